// SparseHistogram: LogHistogram's buckets (8 per power of two, 1 ns to 2^40 ns, so a
// quantile is within 1/16 of the true value) held sparsely: one 8-byte word per bucket
// that has values -- the bucket's index in the top 16 bits, its count in the low 48 --
// sorted by bucket. One period of one statistic spans a few dozen buckets, so it costs a
// few hundred bytes rather than the dense form's 1280, and periods merge in time linear
// in their buckets. Capacity: at most LogHistogram::kBuckets words (2560 bytes); a
// bucket's count saturates at 2^48 - 1.
// Thread safety: none; the owner serialises access.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "stats/log_histogram.h"

namespace pfsnet {

class SparseHistogram {
 public:
  static constexpr int kNone = -1;

  void add(int64_t v) { add_bucket(LogHistogram::index(v), 1); }

  // Adds `n` values to bucket `i` (0 <= i < LogHistogram::kBuckets).
  void add_bucket(int i, uint64_t n) {
    count_ += n;
    uint64_t key = uint64_t(i) << kShift;
    auto it = std::lower_bound(words_.begin(), words_.end(), key);
    if (it != words_.end() && (*it >> kShift) == uint64_t(i))
      *it = key | std::min(kMaxCount, (*it & kMaxCount) + n);
    else
      words_.insert(it, key | std::min(kMaxCount, n));
  }

  // In place: memory grows only by the buckets new to this one.
  void merge(const SparseHistogram& o) { merge_words(o.words_, o.count_); }
  // The same from the dense form (a period's histogram being filled).
  void merge(const LogHistogram& d) {
    if (d.count() == 0) return;
    thread_local std::vector<uint64_t> scratch;  // reused: no allocation per merge
    scratch.clear();
    d.for_each([&](int i, uint64_t n) { scratch.push_back((uint64_t(i) << kShift) | n); });
    merge_words(scratch, d.count());
  }

  // Empties it, keeping its memory for the next period.
  void clear() {
    words_.clear();
    count_ = 0;
  }

  uint64_t count() const { return count_; }
  bool empty() const { return count_ == 0; }

  // The bucket holding quantile q (0..1) -- the same rank rule as LogHistogram -- or kNone
  // when empty.
  int quantile_bucket(double q) const {
    if (count_ == 0) return kNone;
    // Nearest rank: the smallest value with at least q of the values at or below it (so the
    // p99 of two values is the larger).
    uint64_t rank = std::clamp<uint64_t>(uint64_t(std::ceil(q * double(count_))), 1, count_);
    uint64_t seen = 0;
    for (uint64_t w : words_) {
      seen += w & kMaxCount;
      if (seen >= rank) return static_cast<int>(w >> kShift);
    }
    return static_cast<int>(words_.back() >> kShift);
  }
  // The middle of bucket i, in ns (what a quantile reports).
  static int64_t bucket_mid(int i) {
    return (LogHistogram::lower(i) + LogHistogram::lower(i + 1)) / 2;
  }
  int64_t quantile(double q) const {
    int b = quantile_bucket(q);
    return b == kNone ? 0 : bucket_mid(b);
  }

  // f(bucket index, count) for each bucket with values, in bucket order.
  template <typename F>
  void for_each(F&& f) const {
    for (uint64_t w : words_) f(static_cast<int>(w >> kShift), w & kMaxCount);
  }

  size_t bytes() const { return sizeof(*this) + words_.capacity() * sizeof(uint64_t); }

 private:
  static constexpr int kShift = 48;

  void merge_words(const std::vector<uint64_t>& ow, uint64_t ocount) {
    if (ow.empty()) return;
    size_t fresh = 0;  // o's buckets not in this one
    for (size_t a = 0, b = 0; b < ow.size(); ++b) {
      while (a < words_.size() && words_[a] >> kShift < ow[b] >> kShift) ++a;
      if (a == words_.size() || words_[a] >> kShift != ow[b] >> kShift) ++fresh;
    }
    // From the back: write position w never overtakes the unread words of this one.
    size_t a = words_.size(), b = ow.size();
    words_.resize(words_.size() + fresh);
    size_t w = words_.size();
    while (b > 0) {
      uint64_t ob = ow[b - 1];
      if (a > 0 && words_[a - 1] >> kShift > ob >> kShift) {
        words_[--w] = words_[--a];
      } else if (a > 0 && words_[a - 1] >> kShift == ob >> kShift) {
        uint64_t n = (words_[a - 1] & kMaxCount) + (ob & kMaxCount);
        words_[--w] = (ob & ~kMaxCount) | std::min(kMaxCount, n);
        --a;
        --b;
      } else {
        words_[--w] = ob;
        --b;
      }
    }
    count_ += ocount;
  }

  static constexpr uint64_t kMaxCount = (uint64_t(1) << kShift) - 1;
  std::vector<uint64_t> words_;
  uint64_t count_ = 0;
};

}  // namespace pfsnet
