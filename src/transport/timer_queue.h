// TimerQueue: runs functions at a time of a Clock. The link-emulation decorator holds
// frames with it. ThreadTimerQueue runs them on a thread of its own (the daemon); MemHub
// runs them from pump() once its clock has passed their time (tests on a manual clock).
// Threads: run_at() from any thread; functions run on the queue's thread and must not
// block.
#pragma once

#include <pfsnet/clock.h>

#include <functional>
#include <map>
#include <memory>
#include <thread>

#include "base/mutex.h"

namespace pfsnet {

class TimerQueue {
 public:
  virtual ~TimerQueue() = default;
  // Runs `fn` at `t` or soon after (at once when `t` has passed). Functions due at the
  // same time run in the order they were given.
  virtual void run_at(TimePoint t, std::function<void()> fn) = 0;
};

// On a thread of its own, in real time. REQUIRES: a clock whose now() follows
// steady_clock (MonotonicClock). stop() (or the destructor) drops what has not run.
class ThreadTimerQueue final : public TimerQueue {
 public:
  explicit ThreadTimerQueue(Clock& clock);
  ~ThreadTimerQueue() override { stop(); }
  void run_at(TimePoint t, std::function<void()> fn) override;
  void stop();

 private:
  void loop();

  Clock& clock_;
  Mutex mu_;
  CondVar cv_;
  std::multimap<TimePoint, std::function<void()>> due_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// Runs `fn(now)` every period on a TimerQueue -- a service's periodic round on its node's
// one timer queue, with no thread of its own -- from start() until stop(). The period is
// asked after each round, so it may change. stop() waits for a round under way; no round
// starts after it returns. A queue that stops first just drops the next round.
// Threads: start() and stop() from the owner's thread; rounds on the queue's.
class Repeating {
 public:
  Repeating() = default;
  Repeating(const Repeating&) = delete;
  Repeating& operator=(const Repeating&) = delete;
  ~Repeating() { stop(); }

  // The first round one period after start(). REQUIRES: not running.
  void start(TimerQueue& queue, Clock& clock, std::function<Duration()> period,
             std::function<void(TimePoint)> fn);
  void start(TimerQueue& queue, Clock& clock, Duration period, std::function<void(TimePoint)> fn) {
    start(
        queue, clock, [period] { return period; }, std::move(fn));
  }
  void stop();

 private:
  struct State {
    TimerQueue* queue;
    Clock* clock;
    std::function<Duration()> period;
    std::function<void(TimePoint)> fn;
    Mutex mu;  // held through a round: stop() waits for it
    bool stopped GUARDED_BY(mu) = false;
  };
  static void arm(const std::shared_ptr<State>& st, TimePoint at);
  std::shared_ptr<State> st_;
};

}  // namespace pfsnet
