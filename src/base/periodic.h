// Periodic: runs a function every period of real time on a thread of its own, until
// stop(). A timer, not a synchronisation: the wait ends early only for stop().
// Threads: start() once; stop() from any thread but the body's (it waits for a body in
// progress); idempotent, and called by the destructor.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

#include "base/mutex.h"

namespace pfsnet {

class Periodic {
 public:
  using Period = std::chrono::duration<double>;
  Periodic() = default;
  Periodic(const Periodic&) = delete;
  Periodic& operator=(const Periodic&) = delete;
  ~Periodic() { stop(); }

  // `period` is asked before each wait, so it may change between rounds.
  void start(std::function<Period()> period, std::function<void()> body) {
    thread_ = std::thread([this, period = std::move(period), body = std::move(body)] {
      MutexLock lk(mu_);
      while (!stop_) {
        cv_.wait_for(lk, period(), [&]() REQUIRES(mu_) { return stop_; });
        if (stop_) break;
        lk.unlock();
        body();
        lk.lock();
      }
    });
  }
  void start(Period period, std::function<void()> body) {
    start([period] { return period; }, std::move(body));
  }

  void stop() {
    {
      MutexLock lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  Mutex mu_;
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace pfsnet
