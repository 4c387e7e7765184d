// Waiter: how a thread that blocks for the RPC engine's completions waits -- a synchronous
// call, a batch of calls, a striped file's write for pagepool room. In a process the
// completions come on other threads, and the wait is a condition variable. In the
// deterministic in-process cluster (rpc/sim_cluster.h) nothing runs unless the waiting
// thread runs it: its waiter runs the cluster's events, and moves the manual clock when
// none is left, until the condition holds or the deadline passes (KJ's rule: a wait
// drives the event loop, and is refused inside an event).
// Threads: wait_until from any thread that holds `lk` (and, for the sim's, from the
// thread that drives the cluster, outside its events).
#pragma once

#include <pfsnet/clock.h>

#include <algorithm>
#include <functional>

#include "base/mutex.h"

namespace pfsnet {

class Waiter {
 public:
  virtual ~Waiter() = default;
  // Returns once `pred()` holds (true) or `deadline` on the engine's clock has passed
  // (false, with pred() false). `pred` is called with `lk` held; whoever changes what it
  // reads does so under that lock and notifies `cv`.
  virtual bool wait_until(MutexLock& lk, CondVar& cv, TimePoint deadline,
                          const std::function<bool()>& pred) = 0;
};

// The condition variable, for what `clock` says is left. A manual clock moves without a
// notification, so the wait looks at it again at least every 200 ms.
class CondVarWaiter final : public Waiter {
 public:
  explicit CondVarWaiter(const Clock& clock) : clock_(clock) {}
  bool wait_until(MutexLock& lk, CondVar& cv, TimePoint deadline,
                  const std::function<bool()>& pred) override {
    while (!pred()) {
      Duration left = deadline - clock_.now();
      if (left <= Duration::zero()) return false;
      (void)cv.wait_for(lk, std::min<Duration>(left, std::chrono::milliseconds(200)), pred);
    }
    return true;
  }

 private:
  const Clock& clock_;
};

}  // namespace pfsnet
