// Net: transport events (connections, frames, closes), deadlines, reports from the RPC
// layer, link state, recovery and membership marks.
#include <algorithm>

#include "base/log.h"
#include "base/mutex.h"
#include "net/net_internal.h"
#include "net/peer_table.h"
#include "wire/data_crc.h"

namespace pfsnet {

// ---- transport events ----

bool Net::better_tx(const Connection& c, const Connection* current) {
  auto by_lower = [](const Connection& x) {
    const Nid& opener = x.outgoing() ? x.local_nid() : x.peer_nid();
    const Nid& other = x.outgoing() ? x.peer_nid() : x.local_nid();
    return opener <= other;
  };
  return !current || (by_lower(c) && !by_lower(*current));
}

void Net::on_connected(const ConnectionPtr& c) {
  LocalNi* ni = local_ni(c->local_nid());
  if (!ni) {
    c->close(Status(Code::kNotFound, "no local NI " + c->local_nid().to_string()));
    return;
  }
  PeerNi* pni = table_->get(c->peer_nid());
  // Discovery: every NID the peer announced belongs to the same peer.
  table_->discover(*pni, c->peer_nids());
  Path* p = table_->path(*ni, *pni);
  auto cs = std::make_shared<ConnState>();
  cs->ni = ni;
  cs->path = p;
  cs->conn = c;
  cs->conn_id = c->id();
  cs->high_water = high_water_.load();  // set_high_water_locked below sets it for the path
  c->set_upper(cs);  // before the connection is in the path: every reader finds it
  const WireSession& w = c->wire();
  const bool windowed = w.features & kFeatureWindow;
  if (windowed && w.window) c->grant_rx_window(w.window);
  Out out;
  uint32_t regrant = 0;  // peer_credits changed since the handshake granted its window
  {
    MutexLock lk(ni->mu);
    if (windowed) {
      cs->peer_window = w.peer_window;
      if (int64_t pc = rx_window(); w.window && pc != w.window) regrant = static_cast<uint32_t>(pc);
    }
    cs->tx_credits = cs->window(peer_credits());
    p->conns.push_back(c);
    p->reconnect_interval = Duration::zero();  // it is up: no backoff
    p->reconnect_at = TimePoint{};
    if (c->bulk()) {
      p->bulk.push_back(cs);  // never the path's first connection
    } else if (better_tx(*c, p->tx_conn.get())) {
      p->tx_conn = c;
      p->tx_state = cs;
    }
    set_high_water_locked(*p);
    drain_locked(*p, &out);
  }
  if (regrant) grant_window(c, regrant);
  transmit(out);
}

void Net::grant_window(const ConnectionPtr& c, uint32_t window) {
  c->grant_rx_window(window);  // before the peer can know of it
  auto f = std::make_unique<OutFrame>();
  f->hdr.kind = FrameKind::kWindow;
  f->hdr.xid = window;
  f->hdr.src_nid = c->local_nid();
  f->hdr.dst_nid = c->peer_nid();
  c->send(std::move(f));
}

void Net::on_window(Connection& c, ConnState& cs, uint64_t window) {
  const bool spoken = c.wire().features & kFeatureWindow;
  if (!spoken || window == 0 || window > kMaxWindow) {
    c.close(Status(Code::kProtocol, fmt::format("a WINDOW frame of {}{}", window,
                                                spoken ? "" : " without the window feature")));
    return;
  }
  LocalNi& ni = *cs.ni;
  Out out;
  {
    MutexLock lk(ni.mu);
    int64_t pc = peer_credits();
    int64_t before = cs.window(pc);
    cs.peer_window = static_cast<int64_t>(window);
    cs.tx_credits += cs.window(pc) - before;
    drain_locked(*cs.path, &out);
  }
  transmit(out);
}

// While a path has bulk connections, the large messages of one direction travel on them
// and their replies on the first connection: neither kind of connection carries much the
// other way to take its credits back. A bulk connection's credits would wait for the next
// expire() turn, holding the sender's NI credits; the first connection's would return
// only at half the window -- at 40 RPCs in flight and peer_credits 40 the replying end
// waited for credits on 5,144 of its 9,282 replies in 20 s (4 Gbit/s, 50 ms), holding the
// RPCs in flight short of the line. So on such a path every credit goes back at once; one
// that a message on the way back takes first (the flush is posted to the I/O thread)
// costs no frame. A path of one connection returns at half the window: its replies carry
// the credits.
void Net::set_high_water_locked(Path& p) {
  uint32_t hw = p.bulk.empty() ? high_water_.load() : 1;
  for (auto& c : p.conns)
    if (auto cs = conn_state(*c)) cs->high_water.store(hw, std::memory_order_relaxed);
}

void Net::on_frame(Connection& c, InFrame&& f) {
  ConnState* cs = conn_state(c);
  if (!cs) return;
  LocalNi& ni = *cs->ni;
  if (f.hdr.credits) {
    Out out;
    bool bad = false;
    int64_t outstanding = 0;
    {
      MutexLock lk(ni.mu);
      outstanding = cs->outstanding;
      if (f.hdr.credits > static_cast<uint64_t>(outstanding)) {
        bad = true;
      } else {
        cs->tx_credits += f.hdr.credits;
        cs->outstanding -= f.hdr.credits;
        ni.tx_credits += f.hdr.credits;
        drain_locked(*cs->path, &out);
        drain_ni_locked(ni, &out);
      }
    }
    if (bad) {
      PFS_LOG_WARN("closing connection {}: peer returned {} credits, only {} outstanding",
                   c.describe(), f.hdr.credits, outstanding);
      c.close(Status(Code::kProtocol, "credit overflow"));
      return;
    }
    transmit(out);
  }
  if (f.hdr.kind == FrameKind::kCredit) return;
  if (f.hdr.kind == FrameKind::kWindow) {
    on_window(c, *cs, f.hdr.xid);
    return;
  }
  if (f.hdr.kind != FrameKind::kRequest && f.hdr.kind != FrameKind::kReply) {
    c.close(Status(Code::kProtocol, "unexpected frame kind after handshake"));
    return;
  }
  // Held to the window it was granted: a peer with more out is not a pfsnet keeping to its
  // handshake, and would hold this node's memory without bound.
  if (uint32_t window = c.rx_window(); window && c.count_received() > window) {
    PFS_LOG_WARN(
        "closing connection {}: the peer has more requests and replies out on it than the "
        "receive window of {} it was granted",
        c.describe(), window);
    c.close(
        Status(Code::kProtocol, fmt::format("peer went beyond its receive window of {}", window)));
    return;
  }
  uint64_t bytes = kHeaderSize + f.payload.size() + f.bulk.size();
  PeerNi& pni = *cs->path->pni;
  if (pni.dead.load()) {
    set_peer_dead(pni.nid, false, "");
    PFS_LOG_INFO("heard from {} directly: it is alive, whatever the MGS said", pni.nid.to_string());
  }
  // A routed frame for another node goes on (net_router.cc), its seal with it.
  const bool transit = f.hdr.ext.routed && !local_ni(f.hdr.ext.route_dst);
  std::optional<std::array<uint8_t, kDataCrcSize>> seal;
  if (transit && (f.hdr.flags & kFlagDataCrc) && f.payload.size() >= kDataCrcSize) {
    seal.emplace();
    std::copy_n(f.payload.data() + f.payload.size() - kDataCrcSize, kDataCrcSize, seal->begin());
  }
  const bool corrupt =
      (f.hdr.flags & kFlagDataCrc) && !unseal_payload(&f.payload, f.bulk.span(), &f.bulk_crc);
  if (!corrupt) {
    if (ni.up.load()) raise(ni.health);
    raise(pni.health);
  }
  ni.counters.recv_count.fetch_add(1, std::memory_order_relaxed);
  ni.counters.recv_bytes.fetch_add(bytes, std::memory_order_relaxed);
  pni.counters.recv_count.fetch_add(1, std::memory_order_relaxed);
  pni.counters.recv_bytes.fetch_add(bytes, std::memory_order_relaxed);
  cs->path->recv_count.fetch_add(1, std::memory_order_relaxed);
  cs->path->recv_bytes.fetch_add(bytes, std::memory_order_relaxed);
  if (f.hdr.dst_nid != ni.nid) {
    ni.counters.drops.fetch_add(1);
    PFS_LOG_WARN("dropping frame on {} addressed to another NID", c.describe());
    RxCredit(cs->conn, 1).release();  // its credit goes back at once
    return;
  }
  if (transit) {
    forward(c, *cs, std::move(f), corrupt, corrupt ? std::nullopt : seal);
    return;
  }
  // A routed frame for this node: it comes from its first sender, to the NI it named (the
  // layer above replies to the one from the other).
  Nid from = c.peer_nid();
  if (f.hdr.ext.routed) {
    from = f.hdr.ext.route_src;
    f.hdr.src_nid = from;
    f.hdr.dst_nid = f.hdr.ext.route_dst;
    received_routed_.fetch_add(1, std::memory_order_relaxed);
    // The far end is heard: end to end (one never lowered has no entry to raise).
    if (PeerNi* far = corrupt ? nullptr : table_->find(from)) raise(far->health);
  }
  if (corrupt) {
    on_corrupt(c, *cs, from, f);
    return;
  }
  // A sender out of credits gets every owed credit back when this frame is consumed.
  RxCredit credit(cs->conn, (f.hdr.flags & kFlagWindowEmpty)
                                ? 1
                                : cs->high_water.load(std::memory_order_relaxed));
  if (!rx_) return;
  rx_->on_message(from, std::move(f), std::move(credit));
}

std::optional<Buffer> Net::bulk_sink(Connection& c, const FrameHeader& h) {
  ConnState* cs = conn_state(c);
  if (!cs || !rx_ || h.kind != FrameKind::kReply || h.dst_nid != cs->ni->nid) return std::nullopt;
  if (h.ext.routed && !local_ni(h.ext.route_dst)) return std::nullopt;  // a router's to forward
  return rx_->reply_memory(h, [conn = cs->conn] {
    if (ConnectionPtr c = conn.lock())
      c->close(Status(Code::kCancelled, "a reply's caller gave up while it was received"));
  });
}

void Net::on_corrupt(Connection& c, ConnState& cs, const Nid& from, const InFrame& f) {
  LocalNi& ni = *cs.ni;
  PeerNi& pni = *cs.path->pni;
  ni.counters.count_error(HealthKind::kPeerNiCorrupt);
  pni.counters.count_error(HealthKind::kPeerNiCorrupt);
  lower(pni.health, &pni);
  PFS_LOG_WARN_LIMITED("corrupt " + c.describe(),
                       "{} xid {} type {} on {} failed its data checksum ({} bytes of payload, "
                       "{} of bulk): not delivered, sent again",
                       f.hdr.kind == FrameKind::kReply ? "reply" : "request", f.hdr.xid,
                       f.hdr.msg_type, c.describe(), f.payload.size(), f.bulk.size());
  RxCredit credit(cs.conn, (f.hdr.flags & kFlagWindowEmpty)
                               ? 1
                               : cs.high_water.load(std::memory_order_relaxed));
  if (rx_) rx_->on_corrupt(from, f.hdr, std::move(credit));
}

void Net::on_closed(Connection& c, const Status& why) {
  ConnState* cs = conn_state(c);
  if (!cs || cs->closed.exchange(true, std::memory_order_acq_rel)) return;
  LocalNi& ni = *cs->ni;
  Out out;
  ConnectionPtr keep;  // c may be freed when it leaves conns
  // Its last TCP figures join the path's totals (the socket is shut down, not yet closed).
  std::optional<TcpKernelInfo> k = c.kernel_tcp_info(false);
  {
    MutexLock lk(ni.mu);
    Path* p = cs->path;
    if (k) p->closed_tcp.add(*k);
    ni.tx_credits += cs->outstanding;
    cs->outstanding = 0;
    cs->tx_credits = 0;
    auto it = std::find_if(p->conns.begin(), p->conns.end(),
                           [&](const ConnectionPtr& x) { return x.get() == &c; });
    if (it != p->conns.end()) {
      keep = *it;
      p->conns.erase(it);
    }
    detach_locked(*p, &c);
    auto bulk = std::find_if(p->bulk.begin(), p->bulk.end(),
                             [&](const std::shared_ptr<ConnState>& b) { return b.get() == cs; });
    if (bulk != p->bulk.end()) p->bulk.erase(bulk);
    set_high_water_locked(*p);
    if (!p->queue.empty() && !p->tx_conn) start_connect_locked(*p);
    drain_locked(*p, &out);
    drain_ni_locked(ni, &out);
  }
  transmit(out);
  if (rx_ && !shut_.load()) rx_->on_connection_closed(c.id(), c.peer_nid(), why);
}

void Net::on_local_ni_down(const Nid& local, const Status& why) {
  PFS_LOG_ERROR("NI {}: {} (LOCAL_NI_DOWN); not selected until its link is up again",
                local.to_string(), why.message());
  set_link_state(local, false);
}

// ---- deadlines and reports ----

void Net::detach_locked(Path& p, Connection* c) {
  if (p.tx_conn.get() != c) return;
  p.tx_conn.reset();
  p.tx_state = nullptr;
  for (auto& other : p.conns) {
    if (other.get() == c || !other->is_open() || other->bulk() ||
        !better_tx(*other, p.tx_conn.get()))
      continue;
    if (conn_state(*other)) {
      p.tx_conn = other;
      p.tx_state = std::static_pointer_cast<ConnState>(other->upper());
    }
  }
  if (!p.tx_conn && !p.queue.empty()) start_connect_locked(p);
}

size_t Net::expire(TimePoint now) {
  size_t n = 0;
  Failed failed;
  std::vector<std::pair<ConnectionPtr, Status>> to_close;
  std::vector<ConnectionPtr> to_flush;
  for (auto& ni : nis_) {
    std::vector<Path*> paths = table_->ni_paths(*ni);
    MutexLock lk(ni->mu);
    size_t closing = to_close.size();
    for (Path* pp : paths) {
      Path& p = *pp;
      // A backed-off reconnect, for the sends that wait for it (it starts once due).
      const TimePoint reconnect_at = p.next_connect();
      if (!p.tx_conn && (!p.queue.empty() || !p.bulk_queue.empty())) start_connect_locked(p);
      for (std::deque<TxMsg*>* q : {&p.queue, &p.bulk_queue}) {
        auto keep = std::stable_partition(q->begin(), q->end(),
                                          [now](TxMsg* m) { return m->deadline > now; });
        if (keep == q->end()) continue;
        // Blame goes where the wait was: the local NI's own credits (this NI could not
        // send: LOCAL_NI_SEND_TIMEOUT, its health lowered), or the peer NI -- its window of
        // peer_credits not returned (a hung or overloaded peer) or no connection to it yet
        // (PEER_NI_UNREACHABLE, the peer NI's health lowered). Either way the message
        // never left: both count a local timeout.
        bool bulk = q == &p.bulk_queue;
        std::string why;
        HealthKind kind = HealthKind::kPeerNiUnreachable;
        bool connect_failed = false;  // the connect's error is the send's
        if (p.blocked_on_ni) {
          why = "waiting for the local NI's credits";
          kind = HealthKind::kLocalNiSendTimeout;
        } else if (bulk) {
          why = "waiting for the peer's credits on the bulk connections";
        } else if (p.tx_conn) {
          why = "waiting for the peer's credits";
        } else if (reconnect_at != TimePoint{}) {
          // Its connect failed and the next one backs off: the connect's error is why.
          const std::string last = p.last_connect_error();
          why = "waiting for a connection; the last connect failed: " + last + "; the next in " +
                std::to_string(std::max<int64_t>(
                    0, std::chrono::duration_cast<std::chrono::milliseconds>(reconnect_at - now)
                           .count())) +
                " ms";
          kind = p.last_connect_kind();
          connect_failed = true;
        } else {
          why = "waiting for a connection";
        }
        for (auto it = keep; it != q->end(); ++it) {
          p.ni->counters.local_timeouts.fetch_add(1);
          p.pni->counters.local_timeouts.fetch_add(1);
          failed.emplace_back(
              *it, Status(connect_failed ? Code::kUnreachable : Code::kTimeout,
                          "send " + p.ni->nid.to_string() + " -> " + p.pni->nid.to_string() +
                              " passed its deadline in the queue (local timeout, " + why + ")",
                          kind));
        }
        q->erase(keep, q->end());
        // As o2iblnd does: the connection the message was queued on is closed (a bulk
        // message waited for no one connection).
        if (ConnectionPtr tx = p.tx_conn; tx && !bulk)
          to_close.emplace_back(tx,
                                Status(Code::kClosed, "a transmit deadline passed in its queue"));
      }
      for (auto& c : p.conns) {
        auto cs = conn_state(*c);
        if (!cs) continue;
        // Credits owed on a connection nothing else went back on (the reply left on
        // another connection of the path, or it went idle) return now, not never: a
        // window short of them would make selection shun the path for good.
        if (c->credits_to_return() > 0) to_flush.push_back(c);
        MutexLock tl(cs->tx_mu);
        bool close = false;
        for (TxMsg* m = cs->head; m; m = m->next)
          if (!m->expired && m->deadline <= now) {
            m->expired = true;
            close = true;
            ++n;
          }
        if (close)
          to_close.emplace_back(c, Status(Code::kTimeout, "a transmit deadline passed (remote)",
                                          HealthKind::kPeerNiUnreachable));
      }
    }
    for (size_t i = closing; i < to_close.size(); ++i)
      if (auto cs = conn_state(*to_close[i].first))
        detach_locked(*cs->path, to_close[i].first.get());
  }
  for (auto& [c, s] : to_close) {
    PFS_LOG_WARN("closing connection {}: {}", c->describe(), s.message());
    c->close(s);
  }
  for (auto& c : to_flush) Connection::flush_credits(c);
  n += failed.size();
  finish_failures(failed);
  return n;
}

void Net::report_remote_timeout(const TxTimes& path, const std::string& what) {
  // Through a router, the silence is held against the far end, not the hop (LNet's
  // pitfall: health seen through a router is only the router's): the far NI's health falls
  // and it is pinged back up through the routers, while whether the router itself is alive
  // is its router pings' to say. The connection to the router carries others' RPCs; it stays.
  Path* p = path.routed ? nullptr : table_->find_path(path.local_nid, path.peer_nid);
  PeerNi* blamed = p ? p->pni : path.route_dst.is_none() ? nullptr : table_->get(path.route_dst);
  if (!blamed) return;
  blamed->counters.remote_timeouts.fetch_add(1);
  blamed->counters.count_error(HealthKind::kPeerNiUnreachable);
  lower(blamed->health, blamed);
  if (!p) return;  // routed
  p->ni->counters.remote_timeouts.fetch_add(1);
  p->ni->counters.count_error(HealthKind::kPeerNiUnreachable);
  ConnectionPtr conn;
  {
    MutexLock lk(p->ni->mu);
    for (auto& c : p->conns)
      if (c->id() == path.conn_id) conn = c;
    if (conn) detach_locked(*p, conn.get());
  }
  if (conn) {
    PFS_LOG_WARN_LIMITED(
        "remote timeout " + p->ni->nid.to_string() + " -> " + p->pni->nid.to_string(),
        "closing connection {}: {} (remote timeout)", conn->describe(), what);
    conn->close(Status(Code::kTimeout, what + " (remote timeout)", HealthKind::kPeerNiUnreachable));
  }
}

void Net::note_resend(const TxTimes& path) {
  Path* p = table_->find_path(path.local_nid, path.peer_nid);
  if (!p) return;
  p->ni->counters.resends.fetch_add(1);
  p->pni->counters.resends.fetch_add(1);
}

// ---- link state and recovery ----

bool Net::set_link_state(const Nid& local, bool up, bool penalize) {
  LocalNi* ni = local_ni(local);
  if (!ni) return false;
  Failed failed;
  std::vector<ConnectionPtr> to_close;
  Status down(Code::kClosed, "local NI " + local.to_string() + " is down (link down)",
              HealthKind::kLocalNiDown);
  std::vector<Path*> paths = table_->ni_paths(*ni);
  {
    MutexLock lk(ni->mu);
    if (ni->up.load() == up) return true;
    ni->up.store(up);
    TimePoint now = clock_.now();
    ni->health.note_change(now, unix_ms(clock_.wall_now()));
    if (penalize) ni->counters.count_error(up ? HealthKind::kLocalNiUp : HealthKind::kLocalNiDown);
    if (!up) {
      if (penalize) lower(ni->health, nullptr);
      for (Path* p : paths) {
        for (TxMsg* m : take_queued_locked(*p))
          failed.emplace_back(
              m, Status(Code::kUnreachable, "local NI " + local.to_string() + " is down",
                        HealthKind::kLocalNiDown));
        for (auto& c : p->conns) to_close.push_back(c);
      }
    } else {
      ni->health.recover_now(now);
    }
  }
  if (up)
    PFS_LOG_INFO("NI {}: link up (LOCAL_NI_UP); selectable again, health {}", local.to_string(),
                 ni->health.value());
  else
    PFS_LOG_WARN(
        "NI {}: link down (LOCAL_NI_DOWN); {} connection(s) closed, traffic moves to "
        "the other NIs",
        local.to_string(), to_close.size());
  for (auto& c : to_close) c->close(down);
  finish_failures(failed);
  return true;
}

std::vector<RecoveryTarget> Net::recovery_due(TimePoint now) {
  std::vector<RecoveryTarget> v;
  for (auto& ni : nis_) {
    if (!ni->up.load() || !ni->health.recovery_due(now)) continue;
    // Ping the healthiest peer NI reachable through this NI.
    PeerNi* best = nullptr;
    for (Path* p : table_->ni_paths(*ni))
      if (!best || p->pni->health.value() > best->health.value()) best = p->pni;
    if (!best) continue;  // no peer on its network yet: nothing to ping, no back-off
    ni->health.schedule_recovery(now, opts_.recovery_interval);
    v.push_back(RecoveryTarget{ni->nid, best->nid, true});
  }
  // Only the peer NIs below full health (a server may have 100,000 others).
  MutexLock lk(recovery_mu_);
  for (size_t i = 0; i < recovering_.size();) {
    PeerNi* pni = recovering_[i];
    if (pni->health.healthy()) {  // healed: off the list
      pni->recovering = false;
      recovering_[i] = recovering_.back();
      recovering_.pop_back();
      continue;
    }
    ++i;
    if (!pni->health.recovery_due(now) || pni->dead.load()) continue;
    LocalNi* best = nullptr;
    for (auto& ni : nis_)
      if (ni->up.load() && same_net(ni->nid, pni->nid) &&
          (!best || ni->health.value() > best->health.value()))
        best = ni.get();
    // A far NI on no network of this node's (its health fell on routed RPCs): pinged through
    // its routers, from the NI towards them.
    if (!best && routed(pni->nid))
      if (std::optional<Nid> l = route_local(pni->nid)) best = local_ni(*l);
    if (!best || !best->up.load()) continue;  // every local NI on its network is down
    pni->health.schedule_recovery(now, opts_.recovery_interval);
    v.push_back(RecoveryTarget{best->nid, pni->nid, false});
  }
  return v;
}

// ---- membership ----

bool Net::set_degraded(const Nid& nid, bool local, SlowCause cause, int penalty,
                       const std::string& evidence) {
  Health* h = nullptr;
  if (local) {
    if (LocalNi* ni = local_ni(nid)) h = &ni->health;
  } else if (PeerNi* pni = table_->find(nid)) {
    h = &pni->health;
  }
  if (!h) return false;
  h->set_degraded(cause, penalty, evidence, unix_ms(clock_.wall_now()));
  return true;
}

void Net::set_peer_dead(const Nid& nid, bool dead, const std::string& why) {
  Failed failed;
  PeerNi* pni = table_->get(nid);
  for (PeerNi* x : table_->peer_nis(*pni)) {
    {
      MutexLock lk(dead_mu_);
      if (dead)
        dead_why_[x->nid] = why;
      else
        dead_why_.erase(x->nid);
      x->dead.store(dead);
    }
    if (!dead) continue;
    for (Path* p : table_->paths_of(*x)) {
      MutexLock lk(p->ni->mu);
      for (TxMsg* m : take_queued_locked(*p)) failed.emplace_back(m, Status(Code::kPeerDead, why));
    }
  }
  finish_failures(failed);
}

bool Net::peer_dead(const Nid& nid) const {
  PeerNi* pni = table_->find(nid);
  return pni && pni->dead.load();
}

void Net::drop_peer(const Nid& nid, const std::string& why) {
  PeerNi* pni = table_->find(nid);
  if (!pni) return;
  thread_local std::vector<Path*> paths;
  table_->peer_paths(*pni, &paths);
  std::vector<ConnectionPtr> conns;
  for (Path* p : paths) {
    MutexLock lk(p->ni->mu);
    conns.insert(conns.end(), p->conns.begin(), p->conns.end());
  }
  for (auto& c : conns) c->close(Status(Code::kClosed, why));
}

}  // namespace pfsnet
