// MgsCore: the MGS side of the scalable pinger (Lustre's scalable pinger, docs/sources.md), as pure
// logic on an injected clock so that a test or a simulation drives it exactly: the table of nodes,
// their states (up; suspect after one missed period; dead after ping_miss_limit periods), and the
// notifications of state changes to those who care -- clients of a server that died or came back,
// servers of a client that died or came back -- coalesced per subscriber (one notification carries
// every change it has not heard yet, each in its newest state), at most `notify_rate` per second
// and `notify_window` in flight, retried with back-off. While more than `relay_above`
// subscribers wait (a server's death told to a million clients), clients that are to hear the
// same news are told through servers: one MGS_RELAY to an up server carries it for up to
// `relay_fanout` of them, and the server answers which it did not reach (each retried as
// if notified alone). A dead client is fenced once every live server has acknowledged its
// death (or been given up on, or died): then, and not before, the servers are told so, and
// token managers give its tokens to others -- no data server that has not heard can take
// a write under them by then.
//
// Beyond the design note: a server's ping carries the NIDs of clients that sent it RPCs
// since its last ping; such a client counts as heard from (heard_reports). And a node that
// cannot reach a peer (refused connects, remote timeouts) reports it (MGS_REPORT): the
// MGS does not take one node's word for it -- the peer becomes suspect at once and the
// MGS pings it itself (take_verifications); no answer within verify_timeout, and nothing
// heard from it since the report, and it is dead. A killed or stopped server is thus dead
// in seconds, not after ping_miss_limit periods, and a client cut off alone kills nobody.
//
// Memory: one NodeRecord per node (about 200 bytes plus its name and NIDs) and two
// index entries. Thread safety: none; MgsService serialises calls.
#pragma once

#include <pfsnet/clock.h>
#include <pfsnet/config.h>

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <queue>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "membership/protocol.h"

namespace pfsnet {

struct MgsOptions {
  Duration client_interval = std::chrono::seconds(50);
  Duration server_interval = std::chrono::seconds(10);
  int64_t miss_limit = 3;
  bool heard_reports = true;
  int64_t notify_rate = 100000;  // notifications per second
  size_t notify_window = 4096;   // notifications in flight at once
  int notify_retries = 3;
  Duration notify_backoff = std::chrono::seconds(1);  // doubled on each retry
  size_t relay_fanout = 256;        // clients per MGS_RELAY; 0 or 1: every client told directly
  size_t relay_above = 1024;        // relays only while more subscribers than this wait
  bool unreachable_reports = true;  // act on MGS_REPORT

  static MgsOptions from(const Config& cfg);
  Duration period(uint8_t roles) const {
    return (roles & (kRoleServer | kRoleMgs)) ? server_interval : client_interval;
  }
  // Slack after a period before it counts as missed: a quarter period, at most 500 ms.
  Duration grace(uint8_t roles) const {
    return std::min<Duration>(period(roles) / 4, std::chrono::milliseconds(500));
  }
};

struct NodeRecord {
  uint32_t id = 0;
  std::string name;
  uint8_t roles = 0;
  std::vector<Nid> nids;
  uint64_t instance = 0;
  NodeState state = NodeState::kUp;
  TimePoint last_heard{};
  TimePoint registered{};
  TimePoint last_change{};
  bool heard_by_report = false;  // last heard through a server's report, not its own ping
  // When tick() next looks at it (its suspect or dead deadline as of when it was set; a
  // ping since only moves the real one later): one entry in the MGS's deadline queue.
  bool scheduled = false;
  TimePoint check_at{};
  // Reported unreachable, the MGS's own ping of it under way (verify_token) or due.
  bool verifying = false;
  uint64_t verify_token = 0;
  TimePoint reported_at{};
  std::string reported_by;  // the reporter's name and the kind, for the log
  // As a subscriber: nodes whose change it has not been told yet.
  std::vector<uint32_t> pending;
  std::vector<uint32_t> sending;  // in the notification in flight
  TimePoint sent_at{};            // when that notification was made
  // As a server: dead clients to tell it are fenced (NotifyReq::fenced), and in flight.
  std::vector<uint32_t> fenced_pending, fenced_sending;
  bool queued = false, in_flight = false;
  int attempts = 0;
  // Changes since then may not have reached it (it was dead, or its notifications were
  // given up): when it is heard again it is told of every node it cares about that
  // changed since.
  std::optional<TimePoint> missed_since;
};

class MgsCore {
 public:
  MgsCore(MgsOptions o, uint64_t instance);

  RegisterRep on_register(const RegisterReq& r, TimePoint now);
  PingRep on_ping(const PingReq& r, TimePoint now);
  // Moves nodes to suspect and dead as their periods pass. Call it often (every 100 ms).
  // It looks only at nodes whose deadline passed (a queue by deadline), not the table:
  // at a million nodes a scan every 100 ms was most of the MGS's CPU.
  void tick(TimePoint now);
  // The state changes since the last call (for the local daemon and the log).
  std::vector<NodeEvent> take_changes();

  struct Outgoing {
    uint64_t token = 0;
    uint32_t to = 0;
    std::vector<Nid> nids;  // the subscriber's NIDs (a relay's: the relaying server's)
    NotifyReq req;
    // Not empty: an MGS_RELAY -- `to` passes `req` on to these clients.
    std::vector<Nid> targets;
  };
  // Notifications to send now, within the rate and the window (a relay counts once).
  std::vector<Outgoing> take_notifications(TimePoint now);
  // The outcome of a notification from take_notifications; of a relay, `failed` are the
  // positions in its targets that the server did not reach (ascending).
  void notification_done(uint64_t token, bool ok, TimePoint now,
                         const std::vector<uint32_t>& failed = {});

  // A node's report of peers it cannot reach: each known node that is up or suspect, not
  // the reporter and not already being verified, becomes suspect and is to be verified --
  // unless the reporter was suspect or dead itself, or came back from that within one of
  // its periods (a stopped node's deadlines all pass at once when it resumes).
  // An unknown reporter is told to register again (kUnknown) and changes nothing.
  PingRep on_report(const ReportReq& r, TimePoint now);
  struct Verify {
    uint64_t token = 0;
    uint32_t id = 0;
    std::vector<Nid> nids;
  };
  // The MGS's own pings of reported nodes, to send now (each at most verify_timeout).
  std::vector<Verify> take_verifications();
  // The outcome of a ping from take_verifications: answered, the node is up (heard); not
  // answered and not heard from since it was reported, it is dead.
  void verification_done(uint64_t token, bool answered, TimePoint now);

  // State handed over (issue 36, item 2). The chunks (kTableChunkNodes ids each) whose
  // records changed since the last call -- a registration, a death, a return -- encoded
  // (encode_table_chunk) for where the next leader finds them.
  std::vector<std::pair<uint32_t, Buffer>> take_dirty_chunks();
  // A new leader's table from the chunks its predecessor left: every node as it was
  // (dead ones dead, the rest up and heard `now`: each gets a whole period to ping), so
  // pings with their ids and instances are known and nobody registers again. Malformed
  // chunks or duplicate ids or names: an error, and the table is left empty.
  Status restore(const std::vector<std::string>& chunks, TimePoint now);

  const std::vector<NodeRecord>& nodes() const { return nodes_; }
  const NodeRecord* find(uint32_t id) const { return id < nodes_.size() ? &nodes_[id] : nullptr; }
  uint64_t generation() const { return generation_; }
  uint64_t instance() const { return instance_; }
  // Approximate bytes held for the table, for the memory-per-node figure.
  size_t memory_bytes() const;

  struct Counters {
    uint64_t registers = 0, pings = 0, unknown_pings = 0, reported = 0;
    uint64_t evicted_pings = 0;  // pings, reports, registrations of nodes it declared dead
    uint64_t notifications_sent = 0, notification_failures = 0, notification_retries = 0;
    uint64_t notifications_dropped = 0, events_delivered = 0;
    uint64_t unreachable_reports = 0, verifications = 0, verified_dead = 0, verified_alive = 0;
    uint64_t reports_of_the_lost = 0;  // reports not acted on: the reporter was lost itself
    uint64_t resyncs = 0;              // subscribers told again of what they missed
    uint64_t relays = 0, relayed = 0;  // MGS_RELAYs sent; notifications they carried
    uint64_t fenced = 0;               // dead clients every server had been told of
  };
  const Counters& counters() const { return counters_; }

 private:
  void change(NodeRecord& n, NodeState s, TimePoint now);
  void heard(NodeRecord& n, TimePoint now, bool by_report);
  void enqueue(NodeRecord& subscriber);
  // Queues for `subscriber` every node it cares about that changed since it missed some.
  void resync(NodeRecord& subscriber);
  static bool cares(const NodeRecord& subscriber, const NodeRecord& n);
  void done_one(NodeRecord& sub, bool ok, TimePoint now);
  // Server `sub` heard of (or will never hear of) client `id`'s death told at `sent`.
  void fence_ack(uint32_t client, uint32_t server, TimePoint sent);
  void announce_fenced(NodeRecord& client);
  // Puts a live node in the deadline queue, at its next deadline, unless it is there.
  void schedule(NodeRecord& n);
  // An up server to relay news of `subjects` (sorted ids; none of them): round robin.
  std::optional<uint32_t> pick_relay(const std::vector<uint32_t>& subjects);
  NodeEvent event_of(const NodeRecord& n) const;

  MgsOptions opts_;
  uint64_t instance_;
  uint64_t generation_ = 1;
  std::vector<NodeRecord> nodes_;  // id = index
  struct Due {
    int64_t at;  // TimePoint ticks
    uint32_t id;
    bool operator>(const Due& o) const { return at > o.at; }
  };
  // Live nodes by the time tick() is to look at them; entries of an older check_at are stale.
  std::priority_queue<Due, std::vector<Due>, std::greater<>> due_;
  std::set<uint32_t> dirty_chunks_;  // id / kTableChunkNodes of records changed
  std::unordered_map<std::string, uint32_t> by_name_;
  std::unordered_map<Nid, uint32_t> by_nid_;  // NID -> id
  std::vector<NodeEvent> changes_;
  std::deque<uint32_t> ready_;                // subscribers with something to send
  std::multimap<TimePoint, uint32_t> retry_;  // subscribers waiting to retry
  std::unordered_map<uint64_t, std::vector<uint32_t>> flying_;  // token -> subscriber(s)
  std::vector<uint32_t> relays_;                                // servers (ids), maybe stale
  // Dead clients not fenced yet -> the servers still to acknowledge their death.
  std::unordered_map<uint32_t, std::unordered_set<uint32_t>> fencing_;
  bool relays_stale_ = true;
  size_t relay_next_ = 0;
  std::vector<uint32_t> to_verify_;                       // reported, their ping not sent yet
  std::unordered_map<uint64_t, uint32_t> verify_flying_;  // token -> reported node
  uint64_t next_token_ = 1;
  double tokens_ = 0;
  TimePoint last_refill_{};
  TimePoint last_scan_{};
  Counters counters_;
};

}  // namespace pfsnet
