// Clocks: the one time source of pfsnet. Everything with a timer or a deadline takes a
// Clock& so tests can drive time exactly with ManualClock.
// Thread safety: now() and wall_now() may be called from any thread on both clocks.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace pfsnet {

using Duration = std::chrono::nanoseconds;
// Monotonic time, in nanoseconds since an arbitrary epoch.
using TimePoint = std::chrono::time_point<std::chrono::steady_clock, Duration>;
using WallTime = std::chrono::time_point<std::chrono::system_clock, Duration>;

inline constexpr TimePoint kNever = TimePoint::max();

class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimePoint now() const = 0;
  // Calendar time, for the start of statistics intervals and log lines.
  virtual WallTime wall_now() const = 0;
};

// The real clocks: steady_clock and system_clock.
class MonotonicClock final : public Clock {
 public:
  TimePoint now() const override {
    return std::chrono::time_point_cast<Duration>(std::chrono::steady_clock::now());
  }
  WallTime wall_now() const override {
    return std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now());
  }
};

// A clock that moves only when told to. Monotonic and wall time advance together;
// wall time starts at `wall_unix_seconds`.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t wall_unix_seconds = 1'700'000'000)
      : wall_offset_ns_((wall_unix_seconds - 1) * 1'000'000'000LL) {}

  TimePoint now() const override { return TimePoint(Duration(ns_.load())); }
  WallTime wall_now() const override { return WallTime(Duration(ns_.load() + wall_offset_ns_)); }

  void advance(Duration d) { ns_.fetch_add(d.count()); }
  // REQUIRES: t >= now().
  void advance_to(TimePoint t) { ns_.store(t.time_since_epoch().count()); }

 private:
  std::atomic<int64_t> ns_{1'000'000'000};  // start away from 0 so "0" never looks valid
  int64_t wall_offset_ns_;
};

inline double to_ms(Duration d) { return static_cast<double>(d.count()) / 1e6; }
inline double to_us(Duration d) { return static_cast<double>(d.count()) / 1e3; }

// Wall-clock time, for display: milliseconds since the Unix epoch (of a Clock's
// wall_now(): nothing reads the calendar except through a Clock), and that as
// "2026-11-22T05:30:00.123Z".
inline int64_t unix_ms(WallTime t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}
std::string format_unix_ms(int64_t unix_ms);

}  // namespace pfsnet
