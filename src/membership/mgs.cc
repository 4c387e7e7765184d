#include "membership/mgs.h"

#include <algorithm>

#include "base/log.h"

namespace pfsnet {

MgsOptions MgsOptions::from(const Config& cfg) {
  MgsOptions o;
  o.client_interval = std::chrono::seconds(cfg.membership.client_ping_interval);
  o.server_interval = std::chrono::seconds(cfg.membership.server_ping_interval);
  o.miss_limit = cfg.membership.ping_miss_limit;
  o.heard_reports = cfg.membership.heard_from_reports;
  o.notify_rate = cfg.membership.notify_rate;
  o.relay_fanout = static_cast<size_t>(cfg.membership.notify_relay_fanout);
  o.relay_above = static_cast<size_t>(cfg.membership.notify_relay_above);
  o.unreachable_reports = cfg.membership.unreachable_reports;
  return o;
}

MgsCore::MgsCore(MgsOptions o, uint64_t instance) : opts_(o), instance_(instance) {}

NodeEvent MgsCore::event_of(const NodeRecord& n) const {
  return NodeEvent{n.id, n.name, n.roles, n.state, n.nids};
}

RegisterRep MgsCore::on_register(const RegisterReq& r, TimePoint now) {
  ++counters_.registers;
  uint32_t id;
  auto it = by_name_.find(r.name);
  if (it == by_name_.end()) {
    id = static_cast<uint32_t>(nodes_.size());
    nodes_.emplace_back();
    by_name_[r.name] = id;
  } else {
    id = it->second;
  }
  NodeRecord& n = nodes_[id];
  bool fresh = n.name.empty();
  if (!fresh && n.state == NodeState::kDead && n.instance == r.instance && !r.after_eviction) {
    // Declared dead, and the same process (its registration lost with a timed-out ping):
    // it holds tokens the managers dropped. It drops them, then registers again.
    ++counters_.evicted_pings;
    RegisterRep rep;
    rep.id = id;
    rep.mgs_instance = instance_;
    rep.generation = generation_;
    rep.evicted = true;
    return rep;
  }
  for (const Nid& old : n.nids) by_nid_.erase(old);
  n.id = id;
  n.name = r.name;
  n.roles = r.roles;
  n.nids = r.nids;
  for (const Nid& x : n.nids) by_nid_[x] = id;
  relays_stale_ = true;
  dirty_chunks_.insert(id / kTableChunkNodes);
  bool restarted = !fresh && n.instance != r.instance;
  n.instance = r.instance;
  n.registered = now;
  if (fresh) {
    n.state = NodeState::kUp;
    n.last_change = now;
    ++generation_;
    changes_.push_back(event_of(n));
    PFS_LOG_INFO("membership: {} ({}) registered as node {}", n.name, roles_string(n.roles), id);
  } else if (restarted) {
    PFS_LOG_INFO("membership: {} registered again (restarted)", n.name);
  }
  heard(n, now, false);
  RegisterRep rep;
  rep.id = id;
  rep.mgs_instance = instance_;
  rep.generation = generation_;
  return rep;
}

void MgsCore::heard(NodeRecord& n, TimePoint now, bool by_report) {
  n.last_heard = now;
  n.heard_by_report = by_report;
  if (n.state != NodeState::kUp) change(n, NodeState::kUp, now);
  if (!n.scheduled) schedule(n);
  if (n.missed_since) resync(n);
}

bool MgsCore::cares(const NodeRecord& sub, const NodeRecord& n) {
  return ((n.roles & kRoleServer) && (sub.roles & kRoleClient)) ||
         ((n.roles & kRoleClient) && (sub.roles & kRoleServer));
}

void MgsCore::resync(NodeRecord& sub) {
  const TimePoint since = *sub.missed_since;
  sub.missed_since.reset();
  size_t n = 0;
  for (const NodeRecord& m : nodes_)
    if (!m.name.empty() && m.id != sub.id && cares(sub, m) && m.last_change >= since) {
      sub.pending.push_back(m.id);
      // A server that missed a client's fence hears of it with its death.
      if ((sub.roles & kRoleServer) && m.state == NodeState::kDead && !fencing_.count(m.id))
        sub.fenced_pending.push_back(m.id);
      ++n;
    }
  if (n == 0) return;
  ++counters_.resyncs;
  PFS_LOG_INFO("membership: {} is told again of {} node(s) that changed while it missed news",
               sub.name, n);
  enqueue(sub);
}

PingRep MgsCore::on_ping(const PingReq& r, TimePoint now) {
  ++counters_.pings;
  PingRep rep;
  rep.mgs_instance = instance_;
  if (r.id >= nodes_.size() || nodes_[r.id].name.empty() || nodes_[r.id].instance != r.instance) {
    ++counters_.unknown_pings;
    rep.status = PingStatus::kUnknown;
    rep.generation = generation_;
    return rep;
  }
  NodeRecord& n = nodes_[r.id];
  if (n.state == NodeState::kDead) {
    // Declared dead: its tokens were dropped and its I/O is refused. It comes back only by
    // registering again, once it has dropped what it held.
    ++counters_.evicted_pings;
    rep.status = PingStatus::kEvicted;
    rep.generation = generation_;
    return rep;
  }
  heard(n, now, false);
  if (opts_.heard_reports && (n.roles & kRoleServer)) {
    for (const Nid& nid : r.heard) {
      auto it = by_nid_.find(nid);
      if (it == by_nid_.end()) continue;
      NodeRecord& c = nodes_[it->second];
      // A dead client a server hears from (its refused I/O) is not back: it registers.
      if (!(c.roles & kRoleClient) || c.last_heard >= now || c.state == NodeState::kDead) continue;
      ++counters_.reported;
      heard(c, now, true);
    }
  }
  for (const Nid& nid : r.ask) {
    auto it = by_nid_.find(nid);
    if (it != by_nid_.end() && (nodes_[it->second].roles & kRoleServer)) rep.servers.push_back(nid);
  }
  rep.generation = generation_;
  return rep;
}

void MgsCore::change(NodeRecord& n, NodeState s, TimePoint now) {
  NodeState old = n.state;
  n.state = s;
  n.last_change = now;
  relays_stale_ = true;
  ++generation_;
  changes_.push_back(event_of(n));
  if (s == NodeState::kDead || old == NodeState::kDead)
    dirty_chunks_.insert(n.id / kTableChunkNodes);
  if (s == NodeState::kSuspect || (s == NodeState::kUp && old == NodeState::kSuspect)) return;
  // Died, or came back from the dead: tell those who care. A dead node hears nothing
  // until it is back.
  PFS_LOG_WARN("membership: {} ({}) is {}", n.name, roles_string(n.roles), node_state_name(s));
  if (s == NodeState::kDead && !n.missed_since) n.missed_since = now;
  fencing_.erase(n.id);
  const bool fence = s == NodeState::kDead && (n.roles & kRoleClient);
  std::unordered_set<uint32_t> waiting;
  for (NodeRecord& sub : nodes_) {
    if (sub.name.empty() || sub.id == n.id || sub.state == NodeState::kDead) continue;
    if (!cares(sub, n)) continue;
    sub.pending.push_back(n.id);
    enqueue(sub);
    if (fence && (sub.roles & kRoleServer)) waiting.insert(sub.id);
  }
  if (!fence) return;
  if (waiting.empty())
    announce_fenced(n);
  else
    fencing_[n.id] = std::move(waiting);
}

void MgsCore::fence_ack(uint32_t client, uint32_t server, TimePoint sent) {
  auto it = fencing_.find(client);
  // News made before its death was of an older state: it does not count.
  if (it == fencing_.end() || sent < nodes_[client].last_change) return;
  if (it->second.erase(server) == 0 || !it->second.empty()) return;
  fencing_.erase(it);
  announce_fenced(nodes_[client]);
}

void MgsCore::announce_fenced(NodeRecord& c) {
  ++counters_.fenced;
  PFS_LOG_INFO("membership: every server knows {} is dead: its tokens may go to others", c.name);
  for (NodeRecord& sub : nodes_) {
    if (sub.name.empty() || sub.state == NodeState::kDead || !(sub.roles & kRoleServer)) continue;
    sub.fenced_pending.push_back(c.id);
    enqueue(sub);
  }
}

void MgsCore::enqueue(NodeRecord& sub) {
  if (sub.queued || sub.in_flight || sub.attempts > 0) return;  // retries come back on their own
  sub.queued = true;
  ready_.push_back(sub.id);
}

void MgsCore::schedule(NodeRecord& n) {
  if (n.name.empty() || n.state == NodeState::kDead) return;
  Duration period = opts_.period(n.roles), grace = opts_.grace(n.roles);
  n.check_at = n.last_heard +
               (n.state == NodeState::kUp ? period + grace : period * opts_.miss_limit + grace);
  n.scheduled = true;
  due_.push(Due{n.check_at.time_since_epoch().count(), n.id});
}

void MgsCore::tick(TimePoint now) {
  while (!due_.empty() && due_.top().at <= now.time_since_epoch().count()) {
    const Due d = due_.top();
    due_.pop();
    NodeRecord& n = nodes_[d.id];
    if (!n.scheduled || n.check_at.time_since_epoch().count() != d.at) continue;  // stale
    n.scheduled = false;
    if (n.name.empty() || n.state == NodeState::kDead) continue;
    Duration period = opts_.period(n.roles), grace = opts_.grace(n.roles);
    Duration quiet = now - n.last_heard;
    if (quiet >= period * opts_.miss_limit + grace)
      change(n, NodeState::kDead, now);
    else if (n.state == NodeState::kUp && quiet >= period + grace)
      change(n, NodeState::kSuspect, now);
    schedule(n);  // its next deadline (none once dead)
  }
}

std::vector<NodeEvent> MgsCore::take_changes() { return std::exchange(changes_, {}); }

std::vector<MgsCore::Outgoing> MgsCore::take_notifications(TimePoint now) {
  while (!retry_.empty() && retry_.begin()->first <= now) {
    uint32_t id = retry_.begin()->second;
    retry_.erase(retry_.begin());
    NodeRecord& sub = nodes_[id];
    if (!sub.queued && !sub.in_flight) {
      sub.queued = true;
      ready_.push_back(id);
    }
  }
  // Token bucket: notify_rate per second, bursts of at most a tenth of a second's worth.
  double cap = std::max(1.0, double(opts_.notify_rate) / 10);
  if (last_refill_ == TimePoint{}) {
    tokens_ = cap;
  } else {
    tokens_ = std::min(cap, tokens_ + std::chrono::duration<double>(now - last_refill_).count() *
                                          double(opts_.notify_rate));
  }
  last_refill_ = now;
  std::vector<Outgoing> out;
  // Relays still filling: the news they carry (sorted ids) -> their place in `out`.
  std::map<std::vector<uint32_t>, size_t> open;
  const bool relaying = opts_.relay_fanout > 1 && ready_.size() > opts_.relay_above;
  while (!ready_.empty()) {
    uint32_t id = ready_.front();
    NodeRecord& sub = nodes_[id];
    if ((sub.pending.empty() && sub.fenced_pending.empty()) || sub.state == NodeState::kDead) {
      ready_.pop_front();
      sub.queued = false;
      if (sub.pending.empty() && sub.fenced_pending.empty()) continue;
      ++counters_.notifications_dropped;
      for (uint32_t c : sub.pending) fence_ack(c, id, now);  // a dead server takes no writes
      sub.pending.clear();
      sub.fenced_pending.clear();
      sub.attempts = 0;
      continue;
    }
    std::sort(sub.pending.begin(), sub.pending.end());
    sub.pending.erase(std::unique(sub.pending.begin(), sub.pending.end()), sub.pending.end());
    const bool relayable = relaying && (sub.roles & kRoleClient) && !(sub.roles & kRoleServer);
    if (relayable) {
      if (auto it = open.find(sub.pending); it != open.end()) {
        // The same news as a relay with room: one more client of it, no message of its own.
        ready_.pop_front();
        sub.queued = false;
        Outgoing& o = out[it->second];
        o.targets.push_back(sub.nids[0]);
        flying_[o.token].push_back(id);
        sub.sending = std::move(sub.pending);
        sub.pending.clear();
        sub.sent_at = now;
        sub.in_flight = true;
        ++counters_.notifications_sent;
        ++counters_.relayed;
        if (o.targets.size() >= opts_.relay_fanout) open.erase(it);
        continue;
      }
    }
    if (tokens_ < 1 || flying_.size() >= opts_.notify_window) break;
    ready_.pop_front();
    sub.queued = false;
    Outgoing o;
    o.token = next_token_++;
    o.to = id;
    o.nids = sub.nids;
    o.req.generation = generation_;
    // Each change in its newest state, as many as fit in one message; the rest next time.
    size_t bytes = 20, taken = 0;
    for (; taken < sub.pending.size(); ++taken) {
      NodeEvent e = event_of(nodes_[sub.pending[taken]]);
      // A suspect is up until verified, and its return to up is no news of its own: sent as
      // suspect, the news that it came back would be lost (subscribers act on up and dead).
      if (e.state == NodeState::kSuspect) e.state = NodeState::kUp;
      bytes += encoded_size(e);
      if (bytes > 60000 && taken > 0) break;
      o.req.events.push_back(std::move(e));
    }
    sub.sending.assign(sub.pending.begin(), sub.pending.begin() + static_cast<long>(taken));
    sub.pending.erase(sub.pending.begin(), sub.pending.begin() + static_cast<long>(taken));
    sub.sent_at = now;
    std::sort(sub.fenced_pending.begin(), sub.fenced_pending.end());
    sub.fenced_pending.erase(std::unique(sub.fenced_pending.begin(), sub.fenced_pending.end()),
                             sub.fenced_pending.end());
    for (uint32_t c : sub.fenced_pending) o.req.fenced.push_back(event_of(nodes_[c]));
    sub.fenced_sending = std::move(sub.fenced_pending);
    sub.fenced_pending.clear();
    if (relayable && sub.pending.empty()) {
      if (std::optional<uint32_t> r = pick_relay(sub.sending)) {
        o.targets.push_back(sub.nids[0]);
        o.to = *r;
        o.nids = nodes_[*r].nids;
        open[sub.sending] = out.size();
        ++counters_.relays;
        ++counters_.relayed;
      }
    }
    sub.in_flight = true;
    flying_[o.token] = {id};
    tokens_ -= 1;
    ++counters_.notifications_sent;
    out.push_back(std::move(o));
  }
  return out;
}

std::optional<uint32_t> MgsCore::pick_relay(const std::vector<uint32_t>& subjects) {
  if (relays_stale_) {
    relays_.clear();
    for (const NodeRecord& n : nodes_)
      if (!n.name.empty() && (n.roles & kRoleServer) && n.state == NodeState::kUp)
        relays_.push_back(n.id);
    relays_stale_ = false;
  }
  for (size_t k = 0; k < relays_.size(); ++k) {
    uint32_t r = relays_[relay_next_++ % relays_.size()];
    if (nodes_[r].state != NodeState::kUp || nodes_[r].nids.empty()) continue;
    if (std::binary_search(subjects.begin(), subjects.end(), r)) continue;
    return r;
  }
  return std::nullopt;
}

void MgsCore::notification_done(uint64_t token, bool ok, TimePoint now,
                                const std::vector<uint32_t>& failed) {
  auto it = flying_.find(token);
  if (it == flying_.end()) return;
  std::vector<uint32_t> subs = std::move(it->second);
  flying_.erase(it);
  for (size_t k = 0; k < subs.size(); ++k)
    done_one(nodes_[subs[k]], ok && !std::binary_search(failed.begin(), failed.end(), k), now);
}

void MgsCore::done_one(NodeRecord& sub, bool ok, TimePoint now) {
  sub.in_flight = false;
  if (ok) {
    counters_.events_delivered += sub.sending.size();
    if (sub.roles & kRoleServer)
      for (uint32_t c : sub.sending) fence_ack(c, sub.id, sub.sent_at);
    sub.sending.clear();
    sub.fenced_sending.clear();
    sub.attempts = 0;
  } else {
    ++counters_.notification_failures;
    sub.pending.insert(sub.pending.end(), sub.sending.begin(), sub.sending.end());
    sub.sending.clear();
    sub.fenced_pending.insert(sub.fenced_pending.end(), sub.fenced_sending.begin(),
                              sub.fenced_sending.end());
    sub.fenced_sending.clear();
    if (++sub.attempts > opts_.notify_retries || sub.state == NodeState::kDead) {
      PFS_LOG_WARN("membership: giving up notifying {} after {} attempts", sub.name, sub.attempts);
      ++counters_.notifications_dropped;
      // It hears of these when it is heard from again (each in its state then).
      TimePoint since = now;
      for (uint32_t id : sub.pending) since = std::min(since, nodes_[id].last_change);
      sub.missed_since = std::min(sub.missed_since.value_or(since), since);
      // Given up on: the clients' deaths it was to hear of do not wait for it any longer
      // (a server the MGS cannot reach for that long is about to be declared dead itself).
      if (sub.roles & kRoleServer)
        for (uint32_t c : sub.pending) fence_ack(c, sub.id, now);
      sub.pending.clear();
      sub.fenced_pending.clear();
      sub.attempts = 0;
      return;
    }
    ++counters_.notification_retries;
    retry_.emplace(now + opts_.notify_backoff * (int64_t{1} << (sub.attempts - 1)), sub.id);
    return;
  }
  if (!sub.pending.empty() || !sub.fenced_pending.empty()) enqueue(sub);
}

PingRep MgsCore::on_report(const ReportReq& r, TimePoint now) {
  PingRep rep;
  rep.mgs_instance = instance_;
  rep.generation = generation_;
  if (r.id >= nodes_.size() || nodes_[r.id].name.empty() || nodes_[r.id].instance != r.instance) {
    ++counters_.unknown_pings;
    rep.status = PingStatus::kUnknown;
    return rep;
  }
  NodeRecord& reporter = nodes_[r.id];
  if (reporter.state == NodeState::kDead) {
    ++counters_.evicted_pings;
    rep.status = PingStatus::kEvicted;
    return rep;
  }
  // A reporter the MGS had lost itself (suspect or dead), or that came back from that within
  // one of its periods, was stopped or cut off: the connects and sends it found failed are
  // its own stall's (deadlines that passed while it stood still), not its peers'.
  bool was_lost = reporter.state != NodeState::kUp ||
                  (reporter.last_change > reporter.registered &&
                   now - reporter.last_change < opts_.period(reporter.roles));
  heard(reporter, now, false);  // a report is a sign of life too
  if (!opts_.unreachable_reports) return rep;
  if (was_lost) {
    if (!r.peers.empty()) {
      ++counters_.reports_of_the_lost;
      PFS_LOG_INFO(
          "membership: {} reports {} peer(s) unreachable just after it was lost itself; "
          "not acted on",
          reporter.name, r.peers.size());
    }
    return rep;
  }
  for (const Unreachable& u : r.peers) {
    auto it = by_nid_.find(u.nid);
    if (it == by_nid_.end() || it->second == r.id) continue;
    NodeRecord& n = nodes_[it->second];
    if (n.state == NodeState::kDead || n.verifying) continue;
    ++counters_.unreachable_reports;
    n.verifying = true;
    n.reported_at = now;
    n.reported_by = reporter.name + " (" + std::string(health_kind_name(u.kind)) + " on " +
                    u.nid.to_string() + ")";
    to_verify_.push_back(n.id);
    PFS_LOG_INFO("membership: {} reported unreachable by {}; the MGS pings it to verify", n.name,
                 n.reported_by);
    if (n.state == NodeState::kUp) change(n, NodeState::kSuspect, now);
  }
  rep.generation = generation_;
  return rep;
}

std::vector<MgsCore::Verify> MgsCore::take_verifications() {
  std::vector<Verify> out;
  for (uint32_t id : to_verify_) {
    NodeRecord& n = nodes_[id];
    if (!n.verifying || n.verify_token != 0) continue;
    n.verify_token = next_token_++;
    verify_flying_[n.verify_token] = id;
    ++counters_.verifications;
    out.push_back(Verify{n.verify_token, id, n.nids});
  }
  to_verify_.clear();
  return out;
}

void MgsCore::verification_done(uint64_t token, bool answered, TimePoint now) {
  auto it = verify_flying_.find(token);
  if (it == verify_flying_.end()) return;
  NodeRecord& n = nodes_[it->second];
  verify_flying_.erase(it);
  n.verifying = false;
  n.verify_token = 0;
  if (answered && n.state == NodeState::kDead) {
    // Declared dead meanwhile (its pings stopped): only its registration brings it back.
  } else if (answered) {
    ++counters_.verified_alive;
    PFS_LOG_INFO("membership: {} answers the MGS's ping; the report of {} is not confirmed", n.name,
                 n.reported_by);
    heard(n, now, false);
  } else if (n.last_heard < n.reported_at && n.state != NodeState::kDead) {
    ++counters_.verified_dead;
    PFS_LOG_WARN("membership: {} does not answer the MGS's ping either (reported by {})", n.name,
                 n.reported_by);
    change(n, NodeState::kDead, now);
  }
}

std::vector<std::pair<uint32_t, Buffer>> MgsCore::take_dirty_chunks() {
  std::vector<std::pair<uint32_t, Buffer>> out;
  for (uint32_t c : dirty_chunks_) {
    std::vector<TableRecord> recs;
    const size_t end = std::min<size_t>(nodes_.size(), size_t(c + 1) * kTableChunkNodes);
    for (size_t id = size_t(c) * kTableChunkNodes; id < end; ++id) {
      const NodeRecord& n = nodes_[id];
      if (n.name.empty()) continue;
      TableRecord t{event_of(n), n.instance};
      if (t.node.state == NodeState::kSuspect) t.node.state = NodeState::kUp;  // not a verdict
      recs.push_back(std::move(t));
    }
    out.emplace_back(c, encode_table_chunk(recs));
  }
  dirty_chunks_.clear();
  return out;
}

Status MgsCore::restore(const std::vector<std::string>& chunks, TimePoint now) {
  std::vector<NodeRecord> nodes;
  std::unordered_map<std::string, uint32_t> by_name;
  std::unordered_map<Nid, uint32_t> by_nid;
  for (const std::string& c : chunks) {
    auto recs = decode_table_chunk(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(c.data()), c.size()));
    if (!recs.ok()) return recs.status();
    for (TableRecord& t : *recs) {
      const uint32_t id = t.node.id;
      if (id >= (1u << 24)) return Status(Code::kProtocol, "MGS table: node id out of range");
      if (nodes.size() <= id) nodes.resize(id + 1);
      NodeRecord& n = nodes[id];
      if (!n.name.empty() || !by_name.emplace(t.node.name, id).second)
        return Status(Code::kProtocol, "MGS table: node " + t.node.name + " twice");
      n.id = id;
      n.name = std::move(t.node.name);
      n.roles = t.node.roles;
      n.nids = std::move(t.node.nids);
      n.instance = t.instance;
      n.state = t.node.state == NodeState::kDead ? NodeState::kDead : NodeState::kUp;
      n.last_heard = n.registered = n.last_change = now;
      // A dead node missed what changed before this leader: told of everything on return.
      if (n.state == NodeState::kDead) n.missed_since = TimePoint{};
      for (const Nid& x : n.nids) by_nid[x] = id;
    }
  }
  nodes_ = std::move(nodes);
  by_name_ = std::move(by_name);
  by_nid_ = std::move(by_nid);
  due_ = {};
  fencing_.clear();
  for (NodeRecord& n : nodes_) {
    n.scheduled = false;
    schedule(n);
  }
  // Whether its predecessor fenced the dead clients is not known: every live server is
  // told of their deaths again, and once all acknowledged, that they are fenced.
  std::vector<uint32_t> servers;
  for (const NodeRecord& s : nodes_)
    if (!s.name.empty() && (s.roles & kRoleServer) && s.state != NodeState::kDead)
      servers.push_back(s.id);
  for (NodeRecord& c : nodes_) {
    if (c.name.empty() || !(c.roles & kRoleClient) || c.state != NodeState::kDead) continue;
    std::unordered_set<uint32_t> waiting;
    for (uint32_t s : servers)
      if (s != c.id) {
        nodes_[s].pending.push_back(c.id);
        enqueue(nodes_[s]);
        waiting.insert(s);
      }
    if (waiting.empty())
      announce_fenced(c);
    else
      fencing_[c.id] = std::move(waiting);
  }
  relays_stale_ = true;
  ++generation_;
  return Status::Ok();
}

size_t MgsCore::memory_bytes() const {
  size_t b = sizeof(*this) + nodes_.capacity() * sizeof(NodeRecord);
  for (const NodeRecord& n : nodes_)
    b += n.name.capacity() + n.nids.capacity() * sizeof(Nid) +
         n.pending.capacity() * sizeof(uint32_t);
  // Hash indexes: a node per entry (key, value, next pointer, cached hash) plus buckets.
  b += by_name_.size() * (sizeof(std::string) + 4 + 16) + by_name_.bucket_count() * 8;
  b += by_nid_.size() * (8 + 4 + 16) + by_nid_.bucket_count() * 8;
  b += due_.size() * sizeof(Due);
  return b;
}

}  // namespace pfsnet
