#include "net/health.h"

#include <algorithm>

#include "base/mutex.h"

namespace pfsnet {

Health::Health(TimePoint now, int64_t wall_ms) : last_change_(now), last_change_unix_ms_(wall_ms) {}

bool Health::lower(int64_t sensitivity, TimePoint now, int64_t wall_ms) {
  MutexLock lk(mu_);
  int v = value_.load();
  int nv = static_cast<int>(std::max<int64_t>(0, v - sensitivity));
  value_.store(nv);
  if (v < kMaxHealth || nv >= kMaxHealth) return false;
  last_change_ = now;
  last_change_unix_ms_ = wall_ms;
  ping_count_ = 0;
  next_ping_ = now;  // in recovery: the first ping goes at once
  return true;
}

bool Health::raise(int64_t sensitivity, TimePoint now, int64_t wall_ms) {
  if (healthy()) return false;
  MutexLock lk(mu_);
  int v = value_.load();
  if (v >= kMaxHealth) return false;
  ping_count_ = 0;
  int nv = static_cast<int>(std::min<int64_t>(kMaxHealth, v + sensitivity));
  value_.store(nv);
  if (nv < kMaxHealth) return false;
  last_change_ = now;
  last_change_unix_ms_ = wall_ms;
  return true;
}

void Health::note_change(TimePoint now, int64_t wall_ms) {
  MutexLock lk(mu_);
  last_change_ = now;
  last_change_unix_ms_ = wall_ms;
}

void Health::recover_now(TimePoint now) {
  MutexLock lk(mu_);
  if (value_.load() >= kMaxHealth) return;
  ping_count_ = 0;
  next_ping_ = now;
}

bool Health::recovery_due(TimePoint now) const {
  MutexLock lk(mu_);
  return value_.load() < kMaxHealth && next_ping_ <= now;
}

void Health::schedule_recovery(TimePoint now, Duration interval) {
  MutexLock lk(mu_);
  int n = std::min(ping_count_, 20);
  next_ping_ = now + std::min<Duration>(interval * (int64_t{1} << n), kMaxRecoveryInterval);
  ++ping_count_;
}

void Health::set_degraded(SlowCause cause, int penalty, std::string evidence, int64_t wall_ms) {
  MutexLock lk(mu_);
  if (cause != degraded_ && (cause == SlowCause::kNone || degraded_ == SlowCause::kNone))
    degraded_since_unix_ms_ = wall_ms;
  degraded_ = cause;
  evidence_ = cause == SlowCause::kNone ? std::string() : std::move(evidence);
  penalty_.store(cause == SlowCause::kNone ? 0 : std::max(0, penalty));
}

Health::Snapshot Health::snapshot() const {
  MutexLock lk(mu_);
  return {value_.load(),   last_change_, last_change_unix_ms_,   ping_count_, next_ping_, degraded_,
          penalty_.load(), evidence_,    degraded_since_unix_ms_};
}

}  // namespace pfsnet
