// WorkerPool: a fixed set of threads running queued jobs in FIFO order, for RPC handlers
// that may block. It counts what an operator needs to tell a busy server from a slow
// network: jobs waiting, threads busy, and how long jobs waited for a thread (on the
// injected clock). With no threads it runs each job at once on the caller's thread: the
// deterministic in-process cluster (rpc/sim_cluster.h), where everything runs on the
// thread that pumps the in-memory transport. Threads: submit() and stats() from any
// thread; stop() joins (not from a worker).
#pragma once

#include <pfsnet/clock.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/thread_name.h"

namespace pfsnet {

struct WorkerStats {
  int threads = 0, busy = 0;
  uint64_t queued = 0, queued_max = 0;  // waiting now; most ever waiting at once
  uint64_t jobs = 0;                    // started
  Duration wait_total{}, wait_max{};    // from submit() to a thread taking it
};

class WorkerPool {
 public:
  // `name`: its threads' (base/thread_name.h).
  WorkerPool(int threads, const Clock& clock, std::string name = "pfs-worker")
      : clock_(clock), size_(threads) {
    for (int i = 0; i < threads; ++i)
      threads_.emplace_back([this, name] {
        name_this_thread(name);
        run();
      });
  }
  ~WorkerPool() { stop(); }

  // Returns false (and drops the job) after stop().
  bool submit(std::function<void()> job) {
    TimePoint now = clock_.now();
    if (size_ == 0) {
      {
        MutexLock lk(mu_);
        if (stopping_) return false;
        ++stats_.jobs;
      }
      job();
      return true;
    }
    MutexLock lk(mu_);
    if (stopping_) return false;
    jobs_.push_back({std::move(job), now});
    stats_.queued_max = std::max<uint64_t>(stats_.queued_max, jobs_.size());
    // Under the lock: once stop() has taken it after this, the pool may be destroyed, and
    // a notify after unlocking would touch a destroyed condition variable.
    cv_.notify_one();
    return true;
  }

  WorkerStats stats() const {
    MutexLock lk(mu_);
    WorkerStats s = stats_;
    s.threads = size_;
    s.queued = jobs_.size();
    return s;
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
        job = std::move(jobs_.front().fn);
        Duration waited = clock_.now() - jobs_.front().submitted;
        jobs_.pop_front();
        ++stats_.jobs;
        ++stats_.busy;
        stats_.wait_total += waited;
        stats_.wait_max = std::max(stats_.wait_max, waited);
      }
      job();
      MutexLock lk(mu_);
      --stats_.busy;
    }
  }

  struct Job {
    std::function<void()> fn;
    TimePoint submitted;
  };
  const Clock& clock_;
  const int size_;
  mutable Mutex mu_;
  CondVar cv_;
  std::deque<Job> jobs_ GUARDED_BY(mu_);
  WorkerStats stats_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace pfsnet
