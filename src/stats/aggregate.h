// Aggregate: one GPFS statistic (say, "latency TCP to node X"): the interval being
// filled, the minute, hour and day being accumulated, the four rings, and a log-scale
// histogram of the current and the last completed minute (for p50/p99, beyond GPFS).
// Memory grows with its age (see IntervalRing) up to its full rings.
//
// Roll-up: every closed second goes into its ring and into the minute being built; after
// 60 seconds that minute goes into the minute ring and the hour being built; 60 minutes
// make an hour, 24 hours a day. So a minute is always the previous 60 seconds, whatever
// the ring sizes.
// Thread safety: none; RpcStats serialises access.
#pragma once

#include <memory>

#include "stats/interval_ring.h"
#include "stats/log_histogram.h"

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
    hist_cur_.add(v);
  }

  // Closes the current second (start: unix seconds). `minute_done` etc. say which larger
  // periods end with this second; their starts are given.
  void close_second(int64_t start, bool minute_done, int64_t minute_start, bool hour_done,
                    int64_t hour_start, bool day_done, int64_t day_start) {
    sec_.push(cur_, start);
    minute_acc_.merge(cur_);
    cur_ = Interval{};
    if (!minute_done) return;
    min_.push(minute_acc_, minute_start);
    hour_acc_.merge(minute_acc_);
    minute_acc_ = Interval{};
    if (!hist_last_) hist_last_ = std::make_unique<LogHistogram>();
    std::swap(*hist_last_, hist_cur_);
    hist_cur_.clear();
    if (!hour_done) return;
    hour_.push(hour_acc_, hour_start);
    day_acc_.merge(hour_acc_);
    hour_acc_ = Interval{};
    if (!day_done) return;
    day_.push(day_acc_, day_start);
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
  // The last completed minute's histogram.
  const LogHistogram& last_minute_histogram() const {
    static const LogHistogram kNone;
    return hist_last_ ? *hist_last_ : kNone;
  }
  const LogHistogram& current_minute_histogram() const { return hist_cur_; }

  size_t bytes() const {
    return sizeof(*this) + (hist_last_ ? sizeof(LogHistogram) : 0) + sec_.bytes() + min_.bytes() +
           hour_.bytes() + day_.bytes() - 4 * sizeof(IntervalRing);
  }

 private:
  Interval cur_, minute_acc_, hour_acc_, day_acc_;
  IntervalRing sec_, min_, hour_, day_;
  LogHistogram hist_cur_;
  std::unique_ptr<LogHistogram> hist_last_;  // from the first completed minute on
};

}  // namespace pfsnet
