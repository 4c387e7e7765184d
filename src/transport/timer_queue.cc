#include "transport/timer_queue.h"

#include "base/mutex.h"
#include "base/thread_name.h"

namespace pfsnet {

ThreadTimerQueue::ThreadTimerQueue(Clock& clock) : clock_(clock) {
  thread_ = std::thread([this] {
    name_this_thread("pfs-timers");
    loop();
  });
}

void ThreadTimerQueue::run_at(TimePoint t, std::function<void()> fn) {
  MutexLock lk(mu_);
  if (stop_) return;
  bool earliest = due_.empty() || t < due_.begin()->first;
  due_.emplace(t, std::move(fn));
  if (earliest) cv_.notify_one();
}

void ThreadTimerQueue::stop() {
  // Dropped outside the lock: what a function holds may, going, queue something (a
  // reply it held, answered kCancelled, sent through a decorator that holds frames here).
  std::multimap<TimePoint, std::function<void()>> dropped;
  {
    MutexLock lk(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
    dropped.swap(due_);
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void ThreadTimerQueue::loop() {
  MutexLock lk(mu_);
  while (!stop_) {
    if (due_.empty()) {
      cv_.wait(lk);
      continue;
    }
    TimePoint next = due_.begin()->first, now = clock_.now();
    if (next > now) {
      // The clock follows steady_clock: wait for the difference (a new earlier entry or
      // stop() wakes the wait).
      cv_.wait_for(lk, next - now);
      continue;
    }
    std::function<void()> fn = std::move(due_.begin()->second);
    due_.erase(due_.begin());
    lk.unlock();
    fn();
    lk.lock();
  }
}

void Repeating::start(TimerQueue& queue, Clock& clock, std::function<Duration()> period,
                      std::function<void(TimePoint)> fn) {
  stop();
  st_ = std::make_shared<State>();
  st_->queue = &queue;
  st_->clock = &clock;
  st_->period = std::move(period);
  st_->fn = std::move(fn);
  arm(st_, clock.now() + st_->period());
}

void Repeating::arm(const std::shared_ptr<State>& st, TimePoint at) {
  st->queue->run_at(at, [st] {
    MutexLock lk(st->mu);
    if (st->stopped) return;
    st->fn(st->clock->now());
    // The next round a period after this one ended: a slow round delays, never piles up.
    arm(st, st->clock->now() + st->period());
  });
}

void Repeating::stop() {
  if (!st_) return;
  MutexLock lk(st_->mu);
  st_->stopped = true;
}

}  // namespace pfsnet
