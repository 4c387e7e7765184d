// LogHistogram: a compact log-scale histogram of nanosecond values, 8 buckets per power
// of two from 1 ns to 2^40 ns (about 18 minutes), so a percentile is within 1/16 (6.25%)
// of the true value. 320 uint32 buckets: 1280 bytes; it tracks the range of buckets in use,
// so clearing and walking cost that range, not all 320.
// Thread safety: none; the owner serialises access.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>

namespace pfsnet {

class LogHistogram {
 public:
  static constexpr int kSubBits = 3;
  static constexpr int kOctaves = 40;
  static constexpr int kBuckets = kOctaves << kSubBits;

  void add(int64_t v) { add_bucket(index(v), 1); }
  // `n` values in bucket `i` (a histogram merged into another).
  void add_bucket(int i, uint64_t n) {
    if (n == 0) return;
    buckets_[i] += static_cast<uint32_t>(n);
    count_ += n;
    lo_ = std::min(lo_, i);
    hi_ = std::max(hi_, i);
  }
  // Zeroes only the buckets used since the last clear.
  void clear() {
    if (count_ == 0) return;
    std::fill(buckets_.begin() + lo_, buckets_.begin() + hi_ + 1, 0);
    count_ = 0;
    lo_ = kBuckets;
    hi_ = -1;
  }
  uint64_t count() const { return count_; }

  // The bucket holding quantile q (0..1), by nearest rank: the smallest value with at least
  // q of the values at or below it (so the p99 of two values is the larger); -1 when empty.
  int quantile_bucket(double q) const {
    if (count_ == 0) return -1;
    uint64_t rank = std::clamp<uint64_t>(uint64_t(std::ceil(q * double(count_))), 1, count_);
    uint64_t seen = 0;
    for (int i = lo_; i <= hi_; ++i) {
      seen += buckets_[i];
      if (seen >= rank) return i;
    }
    return hi_;
  }
  // The value at quantile q: the middle of its bucket; 0 when empty.
  int64_t quantile(double q) const {
    int i = quantile_bucket(q);
    return i < 0 ? 0 : (lower(i) + lower(i + 1)) / 2;
  }

  // f(bucket index, count) for each bucket with values, in bucket order.
  template <typename F>
  void for_each(F&& f) const {
    for (int i = lo_; i <= hi_; ++i)
      if (buckets_[i]) f(i, uint64_t(buckets_[i]));
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
  int lo_ = kBuckets, hi_ = -1;  // the range of buckets used since the last clear
};

}  // namespace pfsnet
