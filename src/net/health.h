// Health: the LNet health of one NI, local or peer (LNet health, as current LNet). Pure logic
// on the time the caller passes: no clock is read here, so tests drive it exactly.
//
// The value is kMaxHealth (1000) when healthy. A failure lowers it by `sensitivity`, a
// success raises it by as much. An NI below kMaxHealth is in recovery: a recovery ping is
// due at once, then after interval x 2^n (n = pings since its last success), at most
// kMaxRecoveryInterval apart, until it is healthy again.
//
// Threads: every function from any thread. value() is a relaxed atomic load (the send
// path reads it for selection); raise() at full health takes no lock; the rest take the
// object's own small mutex.
#pragma once

#include <pfsnet/clock.h>
#include <pfsnet/ni_info.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "base/mutex.h"
#include "net/slowness.h"

namespace pfsnet {

inline constexpr Duration kMaxRecoveryInterval = std::chrono::seconds(900);

class Health {
 public:
  struct Snapshot {
    int value = kMaxHealth;
    TimePoint last_change{};  // on the monotonic clock
    int64_t last_change_unix_ms = 0;
    int ping_count = 0;     // recovery pings since the last success
    TimePoint next_ping{};  // meaningful below kMaxHealth
    SlowCause degraded = SlowCause::kNone;
    int penalty = 0;
    std::string evidence;
    int64_t degraded_since_unix_ms = 0;
  };

  // Created healthy; `now` and `wall_ms` are its first state change.
  Health(TimePoint now, int64_t wall_ms);

  int value() const { return value_.load(std::memory_order_relaxed); }
  // What selection compares: the value less the penalty of a degraded NI (relaxed loads:
  // the send path reads it).
  int selection_value() const { return value() - penalty_.load(std::memory_order_relaxed); }
  bool healthy() const { return value() >= kMaxHealth; }

  // A failure. Returns true when this took it out of full health (it enters recovery, its
  // first ping due at `now`).
  bool lower(int64_t sensitivity, TimePoint now, int64_t wall_ms);
  // A success: the ping count restarts. Returns true when this made it healthy again.
  bool raise(int64_t sensitivity, TimePoint now, int64_t wall_ms);
  // A state change that is not a failure or a success (a link going up or down).
  void note_change(TimePoint now, int64_t wall_ms);
  // The next recovery ping is due at once (a link came back up while unhealthy).
  void recover_now(TimePoint now);
  // Unhealthy, and its next recovery ping is due at `now`.
  bool recovery_due(TimePoint now) const;
  // A recovery ping goes now: the next one is due interval x 2^n later (n = pings since
  // the last success), at most kMaxRecoveryInterval.
  void schedule_recovery(TimePoint now, Duration interval);

  // Slowness: degraded for `cause` (kNone: no longer), selection taking `penalty` off the
  // value; `evidence` names the figures. Apart from the value: errors and slowness are
  // judged separately, and either keeps an NI from being chosen.
  void set_degraded(SlowCause cause, int penalty, std::string evidence, int64_t wall_ms);

  Snapshot snapshot() const;

 private:
  std::atomic<int> value_{kMaxHealth};
  std::atomic<int> penalty_{0};
  mutable Mutex mu_;  // guards the rest (and orders changes of value_)
  int ping_count_ GUARDED_BY(mu_) = 0;
  TimePoint next_ping_ GUARDED_BY(mu_){};
  TimePoint last_change_ GUARDED_BY(mu_){};
  int64_t last_change_unix_ms_ GUARDED_BY(mu_) = 0;
  SlowCause degraded_ GUARDED_BY(mu_) = SlowCause::kNone;
  std::string evidence_ GUARDED_BY(mu_);
  int64_t degraded_since_unix_ms_ GUARDED_BY(mu_) = 0;
};

}  // namespace pfsnet
