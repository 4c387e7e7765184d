// WorkerPool: a fixed set of threads running queued jobs in FIFO order, for RPC handlers
// that may block. Threads: submit() from any thread; stop() joins (not from a worker).
#pragma once

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "base/mutex.h"

namespace pfsnet {

class WorkerPool {
 public:
  explicit WorkerPool(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
  }
  ~WorkerPool() { stop(); }

  // Returns false (and drops the job) after stop().
  bool submit(std::function<void()> job) {
    {
      MutexLock lk(mu_);
      if (stopping_) return false;
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
    return true;
  }

  // Runs the jobs already queued, then joins the threads.
  void stop() {
    {
      MutexLock lk(mu_);
      if (stopping_ && threads_.empty()) return;
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
    threads_.clear();
  }

 private:
  void run() {
    for (;;) {
      std::function<void()> job;
      {
        MutexLock lk(mu_);
        cv_.wait(lk, [&]() REQUIRES(mu_) { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> jobs_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace pfsnet
