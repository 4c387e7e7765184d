// LogHistogram: a compact log-scale histogram of nanosecond values, 8 buckets per power
// of two from 1 ns to 2^40 ns (about 18 minutes), so a percentile is within 1/16 (6.25%)
// of the true value. 320 uint32 buckets: 1280 bytes.
// Thread safety: none; the owner serialises access.
#pragma once

#include <array>
#include <bit>
#include <cstdint>

namespace pfsnet {

class LogHistogram {
 public:
  static constexpr int kSubBits = 3;
  static constexpr int kOctaves = 40;
  static constexpr int kBuckets = kOctaves << kSubBits;

  void add(int64_t v) {
    ++buckets_[index(v)];
    ++count_;
  }
  void clear() {
    buckets_.fill(0);
    count_ = 0;
  }
  uint64_t count() const { return count_; }

  // The value at quantile q (0..1): the middle of the bucket holding that rank; 0 when
  // empty.
  int64_t quantile(double q) const {
    if (count_ == 0) return 0;
    uint64_t rank = static_cast<uint64_t>(q * double(count_ - 1)) + 1;
    uint64_t seen = 0;
    for (int i = 0; i < kBuckets; ++i) {
      seen += buckets_[i];
      if (seen >= rank) return (lower(i) + lower(i + 1)) / 2;
    }
    return lower(kBuckets);
  }

  static int index(int64_t v) {
    if (v < (1 << kSubBits)) return v < 0 ? 0 : static_cast<int>(v);
    uint64_t u = static_cast<uint64_t>(v);
    int msb = 63 - std::countl_zero(u);
    int sub = static_cast<int>((u >> (msb - kSubBits)) & ((1 << kSubBits) - 1));
    int i = ((msb - kSubBits + 1) << kSubBits) + sub;
    return i < kBuckets ? i : kBuckets - 1;
  }
  // Smallest value of bucket i.
  static int64_t lower(int i) {
    if (i < (1 << kSubBits)) return i;
    int octave = (i >> kSubBits) + kSubBits - 1;
    int sub = i & ((1 << kSubBits) - 1);
    return (int64_t(1) << octave) + (int64_t(sub) << (octave - kSubBits));
  }

 private:
  std::array<uint32_t, kBuckets> buckets_{};
  uint64_t count_ = 0;
};

}  // namespace pfsnet
