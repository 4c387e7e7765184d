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
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

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
  // State handed over (issue 36, item 2), under `key`/table/: a campaign this MGS wins is
  // a lead only once it has read the table its predecessor left (take_table(): the
  // chunks, once, for that epoch); while it leads, save() queues chunks (the newest of
  // each), written by the worker when no lease call is due, only while the leader key is
  // still of `epoch` (a deposed leader writes nothing).
  std::optional<std::vector<std::string>> take_table(uint64_t epoch);
  void save(uint64_t epoch, std::vector<std::pair<uint32_t, std::string>> chunks);
  // The cluster's minimum release level's record (release_level.h), under `key`/level: read
  // with the table (take_level(): the record, "" when none is kept, once, for that epoch;
  // nullopt when not read for it); save_level() writes one while the leader key is still
  // of `epoch`, before any table chunk, and calls `done` (on the worker) with the outcome.
  std::optional<std::string> take_level(uint64_t epoch);
  void save_level(uint64_t epoch, std::string record, std::function<void(Status)> done);
  struct TableCounters {
    uint64_t loads = 0, chunks_loaded = 0, saves = 0, chunks_saved = 0, save_failures = 0;
  };
  TableCounters table_counters();
  // Stops the worker (after its call in flight); with `resign`, revokes the lease first,
  // so that another MGS can lead at once rather than after the lease's TTL.
  void stop(bool resign);

 private:
  void run();
  // A call failed: logged (at most once in 10 s per kind), retried after the core's wait.
  void failed_locked(LeaderLease::Call c, const char* what, const Status& s) REQUIRES(mu_);

  std::unique_ptr<EtcdClient> etcd_;  // the worker's alone
  const std::string key_, self_;
  const std::string table_prefix_;  // key_ + "/table/"
  const std::string level_key_;     // key_ + "/level"
  Clock& clock_;
  Mutex mu_;
  CondVar cv_;
  LeaderLease core_ GUARDED_BY(mu_);
  std::function<void()> job_ GUARDED_BY(mu_);
  uint64_t loaded_epoch_ GUARDED_BY(mu_) = 0;
  std::optional<std::vector<std::string>> loaded_ GUARDED_BY(mu_);
  std::optional<std::string> loaded_level_ GUARDED_BY(mu_);
  struct LevelSave {
    uint64_t epoch;
    std::string record;
    std::function<void(Status)> done;
  };
  std::optional<LevelSave> level_save_ GUARDED_BY(mu_);
  uint64_t save_epoch_ GUARDED_BY(mu_) = 0;
  std::map<uint32_t, std::string> to_save_ GUARDED_BY(mu_);
  TableCounters table_counters_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::thread worker_;
};

}  // namespace pfsnet
