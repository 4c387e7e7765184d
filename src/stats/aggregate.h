// Aggregate: one GPFS statistic (say, "latency TCP to node X"): the interval being
// filled, the minute, hour and day being accumulated, the four rings, and (beyond GPFS)
// a log-scale histogram of each period being built, so every interval of every ring
// carries its p50 and p99, and one of all values since the statistic appeared (for
// Prometheus histograms). Memory grows with its age (see IntervalRing) up to its full
// rings; the second's histogram is dense (1280 bytes: a value costs one increment), the
// others cost 8 bytes per bucket used (SparseHistogram), at most 2.5 KB each.
//
// Roll-up: every closed second goes into its ring and into the minute being built; after
// 60 seconds that minute goes into the minute ring and the hour being built; 60 minutes
// make an hour, 24 hours a day. So a minute is always the previous 60 seconds, whatever
// the ring sizes. The histograms roll up the same way.
// Thread safety: none; RpcStats serialises access.
#pragma once

#include "stats/interval_ring.h"
#include "stats/sparse_histogram.h"

namespace pfsnet {

struct RingSizes {
  size_t seconds = 60, minutes = 60, hours = 24, days = 30;
};

class Aggregate {
 public:
  explicit Aggregate(const RingSizes& sizes)
      : sec_(sizes.seconds), min_(sizes.minutes), hour_(sizes.hours), day_(sizes.days) {}

  void add(int64_t v) {
    cur_.add(v);
    sec_hist_.add(v);
  }

  // Closes the current second (start: unix seconds). `minute_done` etc. say which larger
  // periods end with this second; their starts are given.
  void close_second(int64_t start, bool minute_done, int64_t minute_start, bool hour_done,
                    int64_t hour_start, bool day_done, int64_t day_start) {
    if (!cur_.empty()) {
      total_.merge(cur_);
      total_hist_.merge(sec_hist_);
      hist_[0].merge(sec_hist_);
      cur_.p50 = static_cast<int16_t>(sec_hist_.quantile_bucket(0.50));
      cur_.p99 = static_cast<int16_t>(sec_hist_.quantile_bucket(0.99));
      sec_hist_.clear();
    }
    sec_.push(cur_, start);
    minute_acc_.merge(cur_);
    cur_ = Interval{};
    if (!minute_done) return;
    hist_[1].merge(hist_[0]);
    roll(minute_acc_, min_, minute_start, 0);
    hour_acc_.merge(minute_acc_);
    minute_acc_ = Interval{};
    if (!hour_done) return;
    hist_[2].merge(hist_[1]);
    roll(hour_acc_, hour_, hour_start, 1);
    day_acc_.merge(hour_acc_);
    hour_acc_ = Interval{};
    if (!day_done) return;
    roll(day_acc_, day_, day_start, 2);
    day_acc_ = Interval{};
  }

  void resize(const RingSizes& s) {
    sec_.resize(s.seconds);
    min_.resize(s.minutes);
    hour_.resize(s.hours);
    day_.resize(s.days);
  }

  const IntervalRing& seconds() const { return sec_; }
  const IntervalRing& minutes() const { return min_; }
  const IntervalRing& hours() const { return hour_; }
  const IntervalRing& days() const { return day_; }
  const Interval& current() const { return cur_; }
  // Every value of every closed second since the statistic appeared: sum, count, min and
  // max, and their histogram.
  const Interval& total() const { return total_; }
  const SparseHistogram& total_histogram() const { return total_hist_; }

  size_t bytes() const {
    size_t b = sizeof(*this) + sec_.bytes() + min_.bytes() + hour_.bytes() + day_.bytes() -
               4 * sizeof(IntervalRing) + total_hist_.bytes() - sizeof(SparseHistogram);
    for (const SparseHistogram& h : hist_) b += h.bytes() - sizeof(SparseHistogram);
    return b;
  }

 private:
  // Pushes the period `iv` with the quantiles of histogram `h` (which it empties).
  void roll(Interval& iv, IntervalRing& ring, int64_t start, int h) {
    if (!hist_[h].empty()) {
      iv.p50 = static_cast<int16_t>(hist_[h].quantile_bucket(0.50));
      iv.p99 = static_cast<int16_t>(hist_[h].quantile_bucket(0.99));
      hist_[h].clear();
    }
    ring.push(iv, start);
  }

  Interval cur_, minute_acc_, hour_acc_, day_acc_, total_;
  IntervalRing sec_, min_, hour_, day_;
  LogHistogram sec_hist_;    // the second being filled: dense, one increment per value
  SparseHistogram hist_[3];  // the minute, hour and day being built
  SparseHistogram total_hist_;
};

}  // namespace pfsnet
