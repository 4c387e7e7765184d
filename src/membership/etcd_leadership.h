// EtcdLeadership: one MGS campaigning for leadership in etcd -- LeaderLease's decisions,
// EtcdClient's calls. The owner calls tick() from its timer (the membership service's
// round, on the node's timer queue); a call that is due runs on this object's one worker
// thread, which only makes etcd calls (each bounded by the client's timeout) and has no
// timing of its own. view() is the leadership as of the clock's now: a leader whose
// keep-alives go unanswered stops being one at its lease's safe end, whether or not the
// worker is still stuck in a call.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <pfsnet/clock.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "base/mutex.h"
#include "membership/etcd_client.h"
#include "membership/leader_lease.h"

namespace pfsnet {

class EtcdLeadership {
 public:
  // `key`: the leader key (one per cluster); `self`: this MGS's value in it (its NID).
  EtcdLeadership(std::unique_ptr<EtcdClient> etcd, LeaseOptions o, std::string key,
                 std::string self, Clock& clock);
  ~EtcdLeadership();  // stop(false)

  // Hands the worker the call that is due, if any.
  void tick();
  LeaderLease::View view();
  LeaderLease::Counters counters();
  // Stops the worker (after its call in flight); with `resign`, revokes the lease first,
  // so that another MGS can lead at once rather than after the lease's TTL.
  void stop(bool resign);

 private:
  void run();
  // A call failed: logged (at most once in 10 s per kind), retried after the core's wait.
  void failed_locked(LeaderLease::Call c, const char* what, const Status& s) REQUIRES(mu_);

  std::unique_ptr<EtcdClient> etcd_;  // the worker's alone
  const std::string key_, self_;
  Clock& clock_;
  Mutex mu_;
  CondVar cv_;
  LeaderLease core_ GUARDED_BY(mu_);
  std::function<void()> job_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::thread worker_;
};

}  // namespace pfsnet
