// Interval and IntervalRing: the aggregation unit of GPFS RPC statistics. An Interval is
// the sum, count, minimum and maximum of the values of one period; a ring keeps the last
// N periods of one granularity (second, minute, hour, day), idle ones included with
// count 0. Intervals of a ring are consecutive, so only the newest one's start is kept.
// Thread safety: none; the owner (RpcStats) serialises access.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace pfsnet {

struct Interval {
  int64_t sum = 0;
  int64_t count = 0;
  int64_t min = std::numeric_limits<int64_t>::max();
  int64_t max = std::numeric_limits<int64_t>::min();

  void add(int64_t v) {
    sum += v;
    ++count;
    min = std::min(min, v);
    max = std::max(max, v);
  }
  // Sum of sums and counts, min of mins, max of maxes.
  void merge(const Interval& o) {
    sum += o.sum;
    count += o.count;
    min = std::min(min, o.min);
    max = std::max(max, o.max);
  }
  bool empty() const { return count == 0; }
};

class IntervalRing {
 public:
  explicit IntervalRing(size_t capacity) : slots_(std::max<size_t>(capacity, 1)) {}

  size_t capacity() const { return slots_.size(); }
  size_t size() const { return size_; }

  // Appends the next interval, which starts at `start` (unix seconds); the oldest goes
  // when the ring is full.
  void push(const Interval& iv, int64_t start) {
    head_ = (head_ + 1) % slots_.size();
    slots_[head_] = iv;
    size_ = std::min(size_ + 1, slots_.size());
    newest_start_ = start;
  }

  // The i-th newest interval (0 = newest). REQUIRES: i < size().
  const Interval& newest(size_t i) const {
    return slots_[(head_ + slots_.size() - i) % slots_.size()];
  }
  int64_t newest_start() const { return newest_start_; }

  // Resizes keeping the newest intervals.
  void resize(size_t capacity) {
    capacity = std::max<size_t>(capacity, 1);
    std::vector<Interval> v(capacity);
    size_t keep = std::min(size_, capacity);
    for (size_t i = 0; i < keep; ++i) v[keep - 1 - i] = newest(i);
    slots_.swap(v);
    size_ = keep;
    head_ = keep ? keep - 1 : capacity - 1;
  }

  size_t bytes() const { return sizeof(*this) + slots_.capacity() * sizeof(Interval); }

 private:
  std::vector<Interval> slots_;
  size_t head_ = 0;  // index of the newest
  size_t size_ = 0;
  int64_t newest_start_ = 0;
};

}  // namespace pfsnet
