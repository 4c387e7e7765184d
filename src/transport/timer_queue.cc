#include "transport/timer_queue.h"

#include "base/mutex.h"

namespace pfsnet {

ThreadTimerQueue::ThreadTimerQueue(Clock& clock) : clock_(clock) {
  thread_ = std::thread([this] { loop(); });
}

void ThreadTimerQueue::run_at(TimePoint t, std::function<void()> fn) {
  MutexLock lk(mu_);
  if (stop_) return;
  bool earliest = due_.empty() || t < due_.begin()->first;
  due_.emplace(t, std::move(fn));
  if (earliest) cv_.notify_one();
}

void ThreadTimerQueue::stop() {
  {
    MutexLock lk(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
    due_.clear();
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

}  // namespace pfsnet
