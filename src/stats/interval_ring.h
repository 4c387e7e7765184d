// Interval and IntervalRing: the aggregation unit of GPFS RPC statistics. An Interval is
// the sum, count, minimum and maximum of the values of one period, and (beyond GPFS) the
// LogHistogram buckets of its median and 99th percentile, set when the period closes; a
// ring keeps the last
// N periods of one granularity (second, minute, hour, day), idle ones included with
// count 0. Intervals of a ring are consecutive, so only the newest one's start is kept.
// Memory grows with the intervals pushed, up to the capacity: a statistic that appears
// (a new peer: four of them at once, times every peer in a busy second) costs a few
// bytes, not its full rings, until it has lived that long.
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
  // LogHistogram bucket indices of the period's p50 and p99; -1: not known (no values).
  int16_t p50 = -1, p99 = -1;

  void add(int64_t v) {
    sum += v;
    ++count;
    min = std::min(min, v);
    max = std::max(max, v);
  }
  // Sum of sums and counts, min of mins, max of maxes (quantiles do not merge: the owner
  // sets them from the merged histogram).
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
  explicit IntervalRing(size_t capacity) : cap_(std::max<size_t>(capacity, 1)) {}

  size_t capacity() const { return cap_; }
  size_t size() const { return size_; }

  // Appends the next interval, which starts at `start` (unix seconds); the oldest goes
  // when the ring is full.
  void push(const Interval& iv, int64_t start) {
    if (slots_.size() < cap_) {  // not full yet: the slots are in order, oldest first
      if (slots_.size() == slots_.capacity())
        slots_.reserve(std::min(cap_, std::max<size_t>(4, 2 * slots_.size())));
      slots_.push_back(iv);
      head_ = slots_.size() - 1;
    } else {
      head_ = (head_ + 1) % cap_;
      slots_[head_] = iv;
    }
    size_ = std::min(size_ + 1, cap_);
    newest_start_ = start;
  }

  // The i-th newest interval (0 = newest). REQUIRES: i < size().
  const Interval& newest(size_t i) const {
    return slots_[(head_ + slots_.size() - i) % slots_.size()];
  }
  int64_t newest_start() const { return newest_start_; }

  // Resizes keeping the newest intervals.
  void resize(size_t capacity) {
    cap_ = std::max<size_t>(capacity, 1);
    size_t keep = std::min(size_, cap_);
    std::vector<Interval> v(keep);
    for (size_t i = 0; i < keep; ++i) v[keep - 1 - i] = newest(i);
    slots_.swap(v);
    size_ = keep;
    head_ = keep ? keep - 1 : 0;
  }

  size_t bytes() const { return sizeof(*this) + slots_.capacity() * sizeof(Interval); }

 private:
  size_t cap_;
  std::vector<Interval> slots_;  // grows to cap_, then wraps
  size_t head_ = 0;              // index of the newest
  size_t size_ = 0;
  int64_t newest_start_ = 0;
};

}  // namespace pfsnet
