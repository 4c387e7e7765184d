#include "membership/agent.h"

#include <algorithm>

#include "base/log.h"

namespace pfsnet {

AgentCore::AgentCore(AgentOptions o) : opts_(std::move(o)) {}

bool AgentCore::from_leader(const Leadership& l, TimePoint now) {
  in_flight_ = false;
  if (l.epoch < epoch_) {
    ++counters_.stale;
    PFS_LOG_WARN("membership: MGS {} answered for epoch {}, older than {}: not the leader",
                 current_mgs().to_string(), l.epoch, epoch_);
    on_failure(now);
    return false;
  }
  epoch_ = l.epoch;
  if (!l.not_leader) return true;
  ++counters_.redirects;
  // Pinged, not registered again, at the leader: it holds the table its predecessor left
  // (ids and instances kept); a ping it does not know is answered "unknown".
  const std::optional<Nid>& leader = l.leader;
  if (!leader) {
    on_failure(now);  // it knows no leader: the next MGS may
    return false;
  }
  auto it = std::find(opts_.mgs.begin(), opts_.mgs.end(), *leader);
  size_t at = static_cast<size_t>(it - opts_.mgs.begin());
  if (it == opts_.mgs.end()) opts_.mgs.push_back(*leader);  // not configured here: followed
  if (at == mgs_index_) {
    // It names itself but does not lead (a restarted MGS whose old lease still holds the
    // key): ask again in a second.
    next_ = now + std::chrono::seconds(1);
    return false;
  }
  PFS_LOG_INFO("membership: MGS {} does not lead; the leader is {} (epoch {})",
               current_mgs().to_string(), leader->to_string(), l.epoch);
  mgs_index_ = at;
  failures_in_a_row_ = 0;
  next_ = now;
  return false;
}

void AgentCore::on_register_reply(const RegisterRep& r, TimePoint now) {
  if (!from_leader(r.lead, now)) return;
  in_flight_ = false;
  failures_in_a_row_ = 0;
  if (r.evicted) return on_evicted();
  registered_ = true;
  after_eviction_ = false;
  id_ = r.id;
  mgs_instance_ = r.mgs_instance;
  next_ = now + opts_.period();
  PFS_LOG_INFO("membership: registered with MGS {} as node {}", current_mgs().to_string(), id_);
  if (registered_partly_ && large_ok(current_mgs())) {
    // The first request opened a connection of version 2: register again with every NID
    // (the MGS updates the node's record; the same instance is the same node).
    PFS_LOG_INFO("membership: MGS {} takes large NIDs: registering them too",
                 current_mgs().to_string());
    registered_ = false;
    registered_partly_ = false;
    next_ = now;
  }
}

void AgentCore::on_ping_reply(const PingRep& r, TimePoint now) {
  if (!from_leader(r.lead, now)) return;
  in_flight_ = false;
  failures_in_a_row_ = 0;
  if (r.status == PingStatus::kOk) {
    for (const Nid& n : asked_)
      learn(n, std::find(r.servers.begin(), r.servers.end(), n) != r.servers.end());
    asked_.clear();
  }
  if (r.status == PingStatus::kUnknown) {
    ++counters_.unknown;
    PFS_LOG_INFO("membership: MGS {} does not know us (it restarted?); registering again",
                 current_mgs().to_string());
    registered_ = false;
    next_ = now;
  } else if (r.status == PingStatus::kEvicted) {
    on_evicted();
  }
}

void AgentCore::on_evicted() {
  ++counters_.evictions;
  PFS_LOG_WARN(
      "membership: MGS {} declared us dead: dropping our tokens and RPCs under way, then "
      "registering again",
      current_mgs().to_string());
  registered_ = false;
  evicted_ = true;
}

void AgentCore::eviction_handled(TimePoint now) {
  evicted_ = false;
  after_eviction_ = true;  // the next registration says so; the MGS takes us back
  next_ = now;
}

void AgentCore::on_failure(TimePoint now) {
  in_flight_ = false;
  ++failures_in_a_row_;
  // With leadership in etcd (an epoch heard) the next MGS leads with the same table: ping
  // it. Without, it knows nothing of us: register.
  if (epoch_ == 0) registered_ = false;
  if (opts_.mgs.size() > 1) {
    Nid from = current_mgs();
    mgs_index_ = (mgs_index_ + 1) % opts_.mgs.size();
    ++counters_.failovers;
    PFS_LOG_WARN("membership: MGS {} does not answer; failing over to {}", from.to_string(),
                 current_mgs().to_string());
  }
  // Straight to the next MGS; after a whole round of failures, wait a second each time.
  next_ = failures_in_a_row_ >= static_cast<int>(opts_.mgs.size()) ? now + std::chrono::seconds(1)
                                                                   : now;
}

std::optional<AgentCore::Send> AgentCore::report_due(TimePoint now,
                                                     const std::vector<PeerSample>& samples) {
  bool can_send = registered_ && opts_.unreachable_reports && !opts_.mgs.empty();
  ReportReq r{id_, opts_.instance, {}};
  for (const PeerSample& p : samples) {
    Seen& s = seen_[p.nid];
    bool refused = p.connect_errors > s.connect_errors;
    bool failing = (refused || p.timeouts > s.timeouts) && p.received == s.received;
    if (failing && can_send &&
        (s.reported == TimePoint{} || now - s.reported >= opts_.report_holdoff)) {
      r.peers.push_back(Unreachable{
          p.nid, refused ? HealthKind::kPeerNiConnectError : HealthKind::kPeerNiUnreachable});
      s.reported = now;
    }
    s.connect_errors = p.connect_errors;
    s.timeouts = p.timeouts;
    s.received = p.received;
  }
  if (!large_ok(current_mgs())) for_version1(&r);
  if (r.peers.empty()) return std::nullopt;
  ++counters_.reports;
  return Send{Kind::kReport, current_mgs(), encode(r)};
}

void AgentCore::apply(const std::vector<NodeEvent>& events) {
  for (const NodeEvent& e : events) {
    if (!(e.roles & kRoleServer)) continue;
    for (const Nid& n : e.nids) learn(n, true);
  }
}

AgentCore::Role AgentCore::role_of(const Nid& nid) const {
  auto it = server_.find(nid);
  if (it == server_.end()) return Role::kUnknown;
  return it->second ? Role::kServer : Role::kOther;
}

void AgentCore::ask_role(const Nid& nid) {
  if (server_.count(nid) || asks_.size() >= 4 * kMaxRoleAsks) return;
  if (std::find(asks_.begin(), asks_.end(), nid) != asks_.end()) return;
  if (std::find(asked_.begin(), asked_.end(), nid) != asked_.end()) return;
  asks_.push_back(nid);
}

void AgentCore::learn(const Nid& nid, bool server) {
  if (server_.size() >= kMaxKnownRoles && !server_.count(nid)) server_.clear();
  server_[nid] = server;
}

void AgentCore::asks_back() {
  asks_.insert(asks_.begin(), asked_.begin(), asked_.end());
  asked_.clear();
}

}  // namespace pfsnet
