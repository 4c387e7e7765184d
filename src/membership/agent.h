// AgentCore: the node side of the scalable pinger, as pure logic on an injected clock.
// It registers with the MGS, then pings it rain or shine every period (client or server
// interval); a ping answered "unknown" (the MGS restarted, or forgot us) registers again;
// a ping answered "evicted" (the MGS declared us dead) waits until the node has dropped
// what it held (MembershipService), then registers again;
// an MGS that does not answer is failed over to the next configured MGS NID, where the
// node registers again. With heard_reports, a client that exchanged RPCs with a server
// recently enough for that server's report to reach the MGS in time skips its own ping.
// With unreachable_reports, peers whose connects failed or timed out while they sent
// nothing are reported to the MGS at once (MGS_REPORT), at most once per peer per
// report_holdoff: the cluster view catches up with the best-informed node.
// Which peers are servers a client learns by asking: the NIDs it heard from whose role it
// does not know ride on its next ping, and the reply names the servers among them (no node
// holds the whole server list; at 2,000 servers it was 46 KB a registration).
// Thread safety: none; MembershipService serialises calls.
#pragma once

#include <pfsnet/clock.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "membership/protocol.h"

namespace pfsnet {

struct AgentOptions {
  std::string name;
  uint8_t roles = kRoleClient;
  std::vector<Nid> nids;
  std::vector<Nid> mgs;  // in failover order
  Duration client_interval = std::chrono::seconds(50);
  Duration server_interval = std::chrono::seconds(10);
  bool heard_reports = true;
  // Skipped pings in a row at most: ping_miss_limit - 1, so that the MGS hears the client
  // itself before it could declare it dead even if every report were lost, and a
  // restarted MGS learns of a busy client within ping_miss_limit client periods.
  int max_skips = 2;
  uint64_t instance = 0;
  bool unreachable_reports = true;
  Duration report_holdoff = std::chrono::seconds(10);
  // Whether the MGS at a NID may be sent large (IPv6) NIDs: its connection speaks wire
  // version 2 (or it is reached over IPv6). Unset: always. Otherwise the requests to it
  // leave them out (for_version1), and a registration that did so is made again, once,
  // when its reply shows the MGS takes them -- the connection a first request opens.
  std::function<bool(const Nid&)> takes_large_nids;

  Duration period() const {
    return (roles & (kRoleServer | kRoleMgs)) ? server_interval : client_interval;
  }
  // A client that talked to a server within this window before its ping is due skips the
  // ping: the server's report (sent every server_interval) reaches the MGS first.
  Duration skip_window() const { return client_interval - 2 * server_interval; }
};

class AgentCore {
 public:
  explicit AgentCore(AgentOptions o);

  enum class Kind { kRegister, kPing, kReport };
  struct Send {
    Kind kind;
    Nid mgs;
    Buffer payload;
  };
  // What to send now, if anything. `last_server_contact`: when a server last answered
  // us (TimePoint{} if never); `heard`: for servers, the client NIDs heard since the
  // last ping (called only when a ping goes).
  template <class Heard>
  std::optional<Send> due(TimePoint now, TimePoint last_server_contact, Heard&& heard);

  // One peer NI as the net counts it: failed connects, remote timeouts, frames received.
  struct PeerSample {
    Nid nid;
    uint64_t connect_errors = 0, timeouts = 0, received = 0;
  };
  // A report of the peers whose connect errors or timeouts grew since the last look while
  // they sent nothing, if there are any and we are registered. A peer first seen counts
  // from zero. Reports go at once (no in-flight rule): they carry news, not liveness.
  std::optional<Send> report_due(TimePoint now, const std::vector<PeerSample>& samples);

  // Answers. With MGS leadership in etcd, an answer from an MGS that does not lead names
  // the leader (its NID, its epoch): the agent registers there next. An answer with an
  // epoch older than one it has seen is an MGS that lost its lead: it counts as a failure.
  void on_register_reply(const RegisterRep& r, TimePoint now);
  void on_ping_reply(const PingRep& r, TimePoint now);
  // The highest leader epoch heard (0 without etcd): notifications of older ones are stale.
  uint64_t epoch() const { return epoch_; }
  // The request failed (no answer within its timeout): fail over to the next MGS.
  void on_failure(TimePoint now);
  // Learns the servers' NIDs from notifications of servers.
  void apply(const std::vector<NodeEvent>& events);
  // What the agent knows of a peer NID's role; ask_role() puts an unknown one on the next
  // ping. At most kMaxKnownRoles are kept (then it starts again: a client talks to few).
  enum class Role { kUnknown, kServer, kOther };
  Role role_of(const Nid& nid) const;
  void ask_role(const Nid& nid);
  static constexpr size_t kMaxKnownRoles = 4096;

  bool registered() const { return registered_; }
  // The MGS declared this node dead (a ping answered kEvicted, or a registration
  // refused so): nothing is sent
  // until eviction_handled() -- the node drops what it held first, then registers.
  bool evicted() const { return evicted_; }
  void eviction_handled(TimePoint now);
  bool in_flight() const { return in_flight_; }
  // When due() next has something to do (while no request is in flight).
  TimePoint next_due() const { return next_; }
  const Nid& current_mgs() const { return opts_.mgs[mgs_index_]; }
  uint32_t id() const { return id_; }
  const AgentOptions& options() const { return opts_; }

  struct Counters {
    uint64_t registers = 0, pings = 0, skipped = 0, failovers = 0, unknown = 0, reports = 0;
    uint64_t redirects = 0, stale = 0;  // "not the leader" answers; answers of old epochs
    uint64_t evictions = 0;             // times the MGS said it had declared us dead
  };
  const Counters& counters() const { return counters_; }

 private:
  // Whether an answer is the leader's own, at the newest epoch; if not, acts on it (goes to
  // the leader it names, or on as after a failure) and returns false.
  bool from_leader(const Leadership& l, TimePoint now);
  void on_evicted();
  void learn(const Nid& nid, bool server);
  void asks_back();  // the ping that carried them got no answer of the leader's

  AgentOptions opts_;
  size_t mgs_index_ = 0;
  uint64_t epoch_ = 0;
  bool registered_ = false;
  bool in_flight_ = false;
  bool registered_partly_ = false;  // the registration left large NIDs out
  bool large_ok(const Nid& mgs) const {
    return !opts_.takes_large_nids || opts_.takes_large_nids(mgs);
  }
  bool evicted_ = false;
  bool after_eviction_ = false;  // dropped what it held since: the next registration says so
  uint32_t id_ = 0;
  uint64_t mgs_instance_ = 0;
  TimePoint next_{};  // next ping (or registration attempt)
  int failures_in_a_row_ = 0;
  int skipped_in_a_row_ = 0;
  std::unordered_map<Nid, bool> server_;  // NID -> a server's or not
  std::vector<Nid> asks_, asked_;         // to ask on the next ping; asked, unanswered
  struct Seen {
    uint64_t connect_errors = 0, timeouts = 0, received = 0;
    TimePoint reported{};
  };
  std::unordered_map<Nid, Seen> seen_;  // peer NID -> at the last look
  Counters counters_;
};

template <class Heard>
std::optional<AgentCore::Send> AgentCore::due(TimePoint now, TimePoint last_server_contact,
                                              Heard&& heard) {
  if (in_flight_ || evicted_ || opts_.mgs.empty() || now < next_) return std::nullopt;
  if (!registered_) {
    in_flight_ = true;
    ++counters_.registers;
    RegisterReq r{opts_.name, opts_.roles, opts_.nids, opts_.instance, after_eviction_};
    registered_partly_ =
        !large_ok(current_mgs()) &&
        std::any_of(r.nids.begin(), r.nids.end(), [](const Nid& n) { return n.is_large(); });
    if (registered_partly_) for_version1(&r);
    return Send{Kind::kRegister, current_mgs(), encode(r)};
  }
  Duration period = opts_.period();
  if (opts_.heard_reports && (opts_.roles & ~kRoleRouter) == kRoleClient &&
      last_server_contact != TimePoint{} && now - last_server_contact <= opts_.skip_window() &&
      skipped_in_a_row_ < opts_.max_skips) {
    ++counters_.skipped;
    ++skipped_in_a_row_;
    next_ = now + period;
    return std::nullopt;
  }
  skipped_in_a_row_ = 0;
  in_flight_ = true;
  ++counters_.pings;
  PingReq p{id_, opts_.instance, {}};
  if (opts_.heard_reports && (opts_.roles & kRoleServer)) p.heard = heard();
  asks_back();
  size_t n = std::min(asks_.size(), kMaxRoleAsks);
  p.ask.assign(asks_.begin(), asks_.begin() + static_cast<long>(n));
  asks_.erase(asks_.begin(), asks_.begin() + static_cast<long>(n));
  asked_ = p.ask;
  next_ = now + period;  // rain or shine: the period runs from this ping
  if (!large_ok(current_mgs())) for_version1(&p);
  return Send{Kind::kPing, current_mgs(), encode(p)};
}

}  // namespace pfsnet
