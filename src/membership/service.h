// MembershipService: the scalable pinger inside pfsnetd. On the MGS it serves
// MGS_REGISTER, MGS_PING and MGS_STATUS from an MgsCore and sends its notifications; on
// every node with `node.mgs` set it runs an AgentCore (register, ping, fail over) and
// serves MGS_NOTIFY, acting on what it hears: a client fails the RPCs queued for a dead
// server and refuses new ones until the server is back; a server closes its connections
// to a dead client and evicts it (fence(): its tokens dropped, its I/O refused until it
// registers again); a node the MGS declared dead drops its tokens and its RPCs to servers
// before it registers again. Servers report the clients they heard from (from the net's receive
// counters, sampled per ping: nothing on the RPC path).
// Threads: its round runs every 100 ms on the node's timer queue; handlers run on I/O
// threads; all
// core state is under one mutex.
#pragma once

#include <pfsnet/config.h>

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>

#include "base/mutex.h"
#include "membership/agent.h"
#include "membership/etcd_leadership.h"
#include "membership/mgs.h"
#include "membership/release_level.h"
#include "rpc/fence.h"
#include "rpc/node_part.h"
#include "rpc/rpc_engine.h"
#include "rpc/rpc_method.h"
#include "transport/timer_queue.h"

namespace pfsnet {

// This node's side of membership: its agent and, on the MGS, the core's counters.
struct MembershipCounters {
  // An MGS with leadership in etcd: what it knows of it.
  struct Leader {
    LeaderLease::View view;
    LeaderLease::Counters counters;
    EtcdLeadership::TableCounters table;  // the table handed over through etcd
  };
  std::optional<Leader> leadership;
  struct Agent {
    Nid mgs;  // the MGS it talks to now
    bool registered = false;
    uint64_t epoch = 0;  // the newest leader epoch it heard (0 without etcd)
    AgentCore::Counters counters;
    // The cluster's minimum release level as the MGS last said it (0: not said -- an MGS
    // of a release before levels); this node refuses peers below it.
    uint16_t cluster_level = 0;
  };
  std::optional<Agent> agent;
  std::optional<MgsCore::Counters> mgs;
  // An MGS that leads: the cluster's minimum release level in force, and its record.
  std::optional<LevelRecord> level;
};

class MembershipService final : public NodePart {
 public:
  // Registers the message handlers: construct before traffic starts.
  MembershipService(const Config& cfg, Net& net, RpcEngine& rpc, Clock& clock);
  ~MembershipService() override;

  const char* part_name() const override { return "membership"; }
  // Rounds every 100 ms on `queue` (the node's) until stop(). An MGS with etcd endpoints
  // that are not http://HOST:PORT: an error, and nothing starts.
  Status start(TimerQueue& queue) override;
  void stop() override;
  // One round: MGS states and notifications, the agent's ping.
  void tick(TimePoint now);

  // The MGS's verdicts for this node's services: clients declared dead (on a server), and
  // this node's own eviction (rpc/fence.h).
  Fence& fence() { return fence_; }
  bool is_mgs() const { return mgs_ != nullptr; }
  // An MGS that holds the cluster's tables now: every MGS without etcd; with leadership in
  // etcd, only the leader. Parts with MGS-side state of their own (the mesh's rows, the
  // cluster-health board) keep it only while this holds, and otherwise send to the
  // leader through current_mgs() like any node.
  bool leads();
  bool has_agent() const { return agent_ != nullptr; }
  // The MGS's whole table. Asks the MGS (the current one, page by page, each page within
  // `timeout`) unless this node is it.
  Result<StatusTable> status(Duration timeout);
  MembershipCounters counters();
  // The cluster's minimum release level (release_level.h): `q` checked against the MGS's
  // table, or committed. Asks the MGS (the current one, within `timeout`) unless this node
  // is it; an MGS of a release before levels answers that it keeps none (an error).
  Result<UpgradeRep> upgrade(const UpgradeReq& q, Duration timeout);
  // The MGS this node's agent talks to now; none without an agent.
  std::optional<Nid> current_mgs();
  // On the MGS: its table's generation (every change bumps it) and the nodes it calls
  // DEAD; 0 and none elsewhere.
  uint64_t table_generation();
  std::vector<std::string> dead_nodes();

 private:
  // The MGS's own pings of reported nodes.
  void send_verifications(std::vector<MgsCore::Verify> vs);
  // Peers we cannot reach, told to the MGS (sampled from the net's counters once a second).
  void send_report(TimePoint now);
  void act_on(const std::vector<NodeEvent>& events, const std::string& source);
  void send_agent_request(TimePoint now);
  // The MGS declared this node dead: its RPCs to servers fail, the fence tells the services
  // (tokens, cached blocks dropped), then the agent registers again.
  void evicted() EXCLUDES(mu_);
  void send_notifications(std::vector<MgsCore::Outgoing> outs) EXCLUDES(mu_);
  // A notification's outcome (of a relay: the targets it did not reach); sends what is due.
  void after_notification(uint64_t token, bool ok, std::vector<uint32_t> failed) EXCLUDES(mu_);
  // MGS_RELAY on a server: passes the notification on to each target, answers which failed.
  void relay(RelayReq&& q, const Nid& from, TypedResponder<RelayRep> resp) EXCLUDES(mu_);
  // Peer NIDs that sent us something since the last look through `seen` (their receive
  // counters moved): a server's heard-from report, a client's contact with servers.
  std::vector<Nid> peers_heard_since(std::unordered_map<Nid, uint64_t>& seen) REQUIRES(mu_);
  TimePoint last_server_contact(TimePoint now) REQUIRES(mu_);
  // The table slice [offset, offset+limit).
  StatusTable table_locked(uint32_t offset, uint32_t limit) const REQUIRES(mu_);
  ReleasesPage releases_locked(uint32_t offset, uint32_t limit) const REQUIRES(mu_);
  // The MGS's answer to MGS_UPGRADE from `by` (who asked, for the record): at once, or once
  // etcd kept a raised level. `done` runs on this thread or etcd's worker, without mu_.
  void upgrade_here(const UpgradeReq& q, std::string by,
                    std::function<void(Result<UpgradeRep>)> done) EXCLUDES(mu_);
  // Every node of the table with its level, as the release level sees them.
  std::vector<NodeLevel> node_levels_locked() const REQUIRES(mu_);
  // The MGS's level from now on (read at start or at a lead, or committed).
  void set_level_locked(const LevelRecord& r, const std::string& how) REQUIRES(mu_);
  // The level the MGS said in a reply to this node's agent (0: none said).
  void learn_level_locked(uint16_t level) REQUIRES(mu_);
  // This MGS's leadership for its answers: epoch, and whether (and whom) it follows. On a
  // leader at a new epoch, the table starts afresh (every node registers again).
  Leadership leadership_locked() REQUIRES(mu_);
  // Puts this MGS itself in its table (at start, and afresh at a new epoch).
  void register_self_locked() REQUIRES(mu_);
  // The refusal of an MGS that does not lead, naming the leader it knows.
  static Status not_leading(const Leadership& l);

  Config cfg_;
  Net& net_;
  RpcEngine& rpc_;
  Clock& clock_;
  uint8_t roles_ = 0;
  Duration request_timeout_;
  Duration notify_timeout_;
  Duration verify_timeout_;

  mutable Mutex mu_;
  // Set by the constructor (the roles of this node), then only read; what they point to
  // is under mu_.
  std::unique_ptr<MgsCore> mgs_ PT_GUARDED_BY(mu_);
  uint32_t self_id_ GUARDED_BY(mu_) = 0;  // the MGS's own record
  // Node id -> what its handshake said when it registered, or pinged first after this MGS
  // took the table over: the release it named ("" from a node of wire version 1;
  // StatusNode::release, MGS_RELEASES) and its release level (release_level.h).
  struct NodeWire {
    std::string release;
    uint16_t level = 0;  // 0: not known
  };
  std::unordered_map<uint32_t, NodeWire> wires_ GUARDED_BY(mu_);
  // On an MGS: the cluster's minimum release level in force, and where it is kept without
  // etcd (membership.state_dir/release_level).
  LevelRecord level_ GUARDED_BY(mu_);
  std::string level_path_;
  uint16_t agent_level_ GUARDED_BY(mu_) = 0;  // as the MGS last told this node's agent
  uint64_t instance_ GUARDED_BY(mu_) = 0;
  std::unique_ptr<AgentCore> agent_ PT_GUARDED_BY(mu_);
  // MGS leadership in etcd ([membership] etcd): set by the constructor (locks its own).
  std::unique_ptr<EtcdLeadership> leadership_;
  Status start_error_;  // a bad endpoint or level record: start() fails with it
  uint64_t table_epoch_ GUARDED_BY(mu_) = 0;  // the epoch mgs_'s table is of
  // Peer NID -> receive count at the last look: for heard-from reports, for server contact.
  std::unordered_map<Nid, uint64_t> rx_seen_ GUARDED_BY(mu_), contact_seen_ GUARDED_BY(mu_);
  TimePoint server_contact_ GUARDED_BY(mu_){};
  TimePoint next_contact_sample_ GUARDED_BY(mu_){};
  TimePoint next_report_sample_ GUARDED_BY(mu_){};

  Fence fence_;
  Repeating ticker_;
};

}  // namespace pfsnet
