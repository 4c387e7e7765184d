// Gate: for tests, a point that handlers or jobs wait at (bounded: 10 s) until the test
// opens it. Threads: any.
#pragma once

#include <chrono>

#include "base/mutex.h"

namespace pfsnet {

class Gate {
 public:
  void open() {
    MutexLock lk(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void wait() {
    MutexLock lk(mu_);
    cv_.wait_for(lk, std::chrono::seconds(10), [&]() REQUIRES(mu_) { return open_; });
  }

 private:
  Mutex mu_;
  CondVar cv_;
  bool open_ GUARDED_BY(mu_) = false;
};

}  // namespace pfsnet
