// ClusterHealthService: every node's own problems at the MGS (probe/cluster_health.h is the
// pure part). On every node with an MGS, set_local() takes the node's own list (every
// health.report_interval, from report_from()'s function); tick() sends it (HEALTH_REPORT) when it
// differs from the last one the MGS took, and a list that is not empty every 6 intervals
// anyway, so a restarted or new MGS learns it again (a healthy node sends nothing). Each
// change of the list is logged (a problem started or ended). The MGS keeps the lists
// (HealthBoard, dropped when not renewed within 3 refreshes, or at the MGS's next tick
// once its table calls the node DEAD: a dead node's last list is no one's view any more)
// and serves them (HEALTH_CLUSTER); cluster() fetches them from any node.
//
// Threads: set_local/tick from its rounds on the node's timer queue (start), or a test's
// thread; handlers on I/O threads;
// cluster() from admin sessions; state under one mutex.
#pragma once

#include <pfsnet/clock.h>
#include <pfsnet/config.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "base/mutex.h"
#include "membership/service.h"
#include "probe/cluster_health.h"
#include "probe/health_mutes.h"
#include "rpc/node_part.h"
#include "rpc/rpc_engine.h"

namespace pfsnet {

class ClusterHealthService final : public NodePart {
 public:
  // Registers the MGS's handlers when this node is one (construct before traffic). All
  // must outlive the service.
  ClusterHealthService(const Config& cfg, RpcEngine& rpc, MembershipService& membership,
                       Clock& clock);

  const char* part_name() const override { return "cluster-health"; }
  // Where start()'s rounds take this node's own problems. REQUIRES: before start().
  void report_from(std::function<std::vector<Problem>()> local) { local_of_ = std::move(local); }
  // On a node with an MGS (or the MGS), every report_interval on `queue` (the node's):
  // set_local(local()), then tick(). Nothing without report_from().
  Status start(TimerQueue& queue) override;
  void stop() override { ticker_.stop(); }

  // This node's own problems now; logs what started and what ended since the last call.
  void set_local(std::vector<Problem> problems);
  // Sends the list to the MGS when due (see above); never blocks on the network.
  void tick(TimePoint now);
  // Every node's list as the MGS has it (on the MGS: its board; else asked, page by page,
  // each within `timeout`).
  Result<std::vector<NodeProblems>> cluster(Duration timeout);
  Duration report_interval() const { return interval_; }
  // The cluster's mutes (probe/health_mutes.h) after `q` (list, set or clear) at the MGS
  // (on the MGS: its own), within `timeout`.
  Result<std::vector<HealthMute>> mutes(const MuteReq& q, Duration timeout);
  // The mutes as last learnt, without asking: the MGS's own; another node's as of its
  // last report (a node with problems asks at each report; a healthy one never).
  std::vector<HealthMute> known_mutes() const;

  struct Counters {
    uint64_t reports_sent = 0, report_failures = 0, reports_received = 0;
    // This node's own problems that started and ended (health events), by cause.
    std::map<std::string, uint64_t> started, ended;
    // Seconds the ended ones were listed, summed, by cause.
    std::map<std::string, double> lasted_seconds;
  };
  Counters counters() const;

 private:
  // On the MGS: the lists of the nodes its table calls DEAD leave the board (looked at
  // again only when the table changed).
  void forget_the_dead();
  // On the MGS: `q` applied to mute_board_; every mute after it.
  Result<MuteList> change_mutes(const MuteReq& q) REQUIRES(mu_);
  // Asks the MGS for its mutes into mutes_ (asynchronously; one at a time).
  void refresh_mutes();
  int64_t now_unix_ms() const;

  std::string name_;
  RpcEngine& rpc_;
  MembershipService& membership_;
  Clock& clock_;
  Duration interval_;
  std::function<std::vector<Problem>()> local_of_;
  Repeating ticker_;

  mutable Mutex mu_;
  std::vector<Problem> local_ GUARDED_BY(mu_);
  std::optional<std::vector<Problem>> acked_ GUARDED_BY(mu_);  // the list the MGS last took
  TimePoint next_refresh_ GUARDED_BY(mu_){};
  bool in_flight_ GUARDED_BY(mu_) = false;
  std::optional<HealthBoard> board_ GUARDED_BY(mu_);     // the MGS's
  std::optional<MuteBoard> mute_board_ GUARDED_BY(mu_);  // the MGS's
  std::vector<HealthMute> mutes_ GUARDED_BY(mu_);        // as last learnt
  bool mutes_in_flight_ GUARDED_BY(mu_) = false;
  uint64_t seen_generation_ GUARDED_BY(mu_) = 0;  // of the MGS's table, last looked at
  Counters counters_ GUARDED_BY(mu_);
  // When each problem of local_ was first listed: (kind, subject, cause).
  std::map<std::tuple<std::string, std::string, std::string>, TimePoint> began_ GUARDED_BY(mu_);
};

}  // namespace pfsnet
