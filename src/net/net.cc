#include "net/net.h"

#include <algorithm>

#include "base/log.h"

namespace pfsnet {

struct Net::Health {
  std::atomic<int> value{kMaxHealth};
  // Guarded by Net::mu_.
  int ping_count = 0;     // recovery pings sent since the last success
  TimePoint next_ping{};  // when below kMaxHealth: the next recovery ping
  TimePoint last_change{};
  int64_t last_change_unix_ms = 0;
  PeerNi* pni = nullptr;  // the peer NI this is the health of (null: a local NI)
  bool listed = false;    // in Net::recovering_
};

struct Net::LocalNi {
  Health health;
  Nid nid;
  uint16_t port = 0;
  std::atomic<bool> up{true};  // written under mu_
  int64_t tx_credits = 0;      // guarded by mu_
  int64_t min_credits = 0;
  NetCounters counters;
  std::vector<Path*> paths;
  std::deque<Path*> blocked;  // paths waiting for an NI credit
};

struct Net::PeerNi {
  Health health;
  std::atomic<bool> dead{false};  // declared dead by the MGS (all NIs of the peer)
  std::string dead_why;           // guarded by mu_
  Nid nid;
  Peer* peer = nullptr;
  NetCounters counters;
  std::vector<Path*> paths;
  int64_t min_credits = 0;
};

struct Net::Peer {
  std::vector<PeerNi*> nis;
  std::vector<Nid> announced;  // every NID the peer announced, in its order
};

struct Net::Path {
  LocalNi* ni = nullptr;
  PeerNi* pni = nullptr;
  ConnectionPtr tx_conn;
  ConnState* tx_state = nullptr;
  std::vector<ConnectionPtr> conns;
  bool connecting = false;
  bool blocked_on_ni = false;
  std::deque<TxMsg*> queue;
  uint64_t last_used = 0;  // selection sequence number, for round-robin
};

struct Net::ConnState {
  LocalNi* ni = nullptr;
  Path* path = nullptr;
  int64_t tx_credits = 0;   // this connection's window left (guarded by mu_)
  int64_t outstanding = 0;  // messages sent and not yet credited back (guarded by mu_)
  std::atomic<bool> flush_pending{false};
  std::atomic<uint32_t> high_water{1};  // changed by set_credits under mu_
  std::weak_ptr<Connection> self;
  uint64_t conn_id = 0;
  // Messages handed to the connection and not completed yet (intrusive list).
  std::mutex tx_mu;
  TxMsg* head = nullptr;
};

struct Net::TxMsg final : TxCompletion {
  Net* net = nullptr;
  Path* path = nullptr;
  std::unique_ptr<OutFrame> frame;
  TimePoint deadline;
  TxCompletion* user = nullptr;
  uint64_t bytes = 0;
  // While handed to a connection (guarded by cs->tx_mu).
  ConnState* cs = nullptr;
  TxMsg* prev = nullptr;
  TxMsg* next = nullptr;
  bool expired = false;
  uint64_t conn_id = 0;

  void on_tx_done(const Status& s, const TxTimes& t) override;
};

namespace {
bool same_net(const Nid& a, const Nid& b) { return a.type == b.type && a.net_num == b.net_num; }

Code code_for(HealthKind k) {
  switch (k) {
    case HealthKind::kLocalNiSendTimeout:
      return Code::kTimeout;
    case HealthKind::kPeerNiConnectionRejected:
      return Code::kRejected;
    default:
      return Code::kUnreachable;
  }
}

bool is_local_kind(HealthKind k) {
  return k == HealthKind::kLocalNiDown || k == HealthKind::kLocalNiUp ||
         k == HealthKind::kLocalNiSendTimeout;
}

}  // namespace

std::string FaultRule::describe() const {
  std::string s = action == Action::kDrop ? "drop" : "delay";
  s += " src=" + (src ? src->to_string() : std::string("*"));
  s += " dst=" + (dst ? dst->to_string() : std::string("*"));
  s += " type=" + (msg_type ? std::to_string(msg_type) : std::string("any"));
  if (rate) s += " rate=" + std::to_string(rate);
  if (interval.count())
    s += " interval=" +
         std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(interval).count()) +
         "ms";
  if (action == Action::kDelay)
    s += " latency=" +
         std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(latency).count()) +
         "ms";
  else
    s += " health=" + std::string(health_kind_name(health));
  return s;
}

NetOptions NetOptions::from(const Config& cfg) {
  NetOptions o;
  o.credits = cfg.lnet.credits;
  o.peer_credits = cfg.lnet.peer_credits;
  o.transaction_timeout = std::chrono::seconds(cfg.lnet.transaction_timeout);
  o.health_sensitivity = cfg.lnet.health_sensitivity;
  o.recovery_interval = std::chrono::seconds(cfg.lnet.recovery_interval);
  for (const NetConfig& n : cfg.nets) o.ports[n.nid.pack()] = n.port;
  return o;
}

uint32_t NetOptions::credit_high_water() const {
  int64_t hw = (peer_credits + 1) / 2;
  hw = std::min(hw, peer_credits - 1);
  return static_cast<uint32_t>(std::max<int64_t>(1, hw));
}

void RxCredit::release() {
  auto c = conn_.lock();
  conn_.reset();
  if (!c) return;
  c->add_credits_to_return(1);
  if (c->credits_to_return() < high_water_) return;
  auto* cs = static_cast<Net::ConnState*>(c->user.get());
  if (!cs || cs->flush_pending.exchange(true)) return;
  std::weak_ptr<Connection> weak = c;
  c->post([weak] {
    auto conn = weak.lock();
    if (!conn) return;
    static_cast<Net::ConnState*>(conn->user.get())->flush_pending.store(false);
    if (conn->credits_to_return() == 0 || !conn->is_open()) return;
    auto f = std::make_unique<OutFrame>();
    f->hdr.kind = FrameKind::kCredit;
    f->hdr.src_nid = conn->local_nid().pack();
    f->hdr.dst_nid = conn->peer_nid().pack();
    conn->send(std::move(f));
  });
}

// ---- health ----

void Net::note_change_locked(Health& h, TimePoint now) {
  h.last_change = now;
  h.last_change_unix_ms = unix_ms(clock_.wall_now());
}

void Net::lower_locked(Health& h, TimePoint now) {
  int v = h.value.load();
  int nv = static_cast<int>(std::max<int64_t>(0, v - opts_.health_sensitivity));
  h.value.store(nv);
  if (v == kMaxHealth && nv < kMaxHealth) {
    note_change_locked(h, now);
    h.ping_count = 0;
    h.next_ping = now;  // in recovery: the first ping goes at once
  }
  if (h.pni && nv < kMaxHealth && !h.listed) {
    h.listed = true;
    recovering_.push_back(h.pni);
  }
}

void Net::raise(Health& h) {
  if (h.value.load(std::memory_order_relaxed) >= kMaxHealth) return;
  std::lock_guard lk(mu_);
  int v = h.value.load();
  if (v >= kMaxHealth) return;
  h.ping_count = 0;
  int nv = static_cast<int>(std::min<int64_t>(kMaxHealth, v + opts_.health_sensitivity));
  h.value.store(nv);
  if (nv == kMaxHealth) note_change_locked(h, clock_.now());
}

// ---- construction ----

Net::Net(NetOptions opts, std::vector<Nid> local_nids, Clock& clock,
         TransportFactory make_transport)
    : opts_(std::move(opts)), local_nids_(std::move(local_nids)), clock_(clock) {
  TimePoint now = clock_.now();
  for (const Nid& n : local_nids_) {
    auto ni = std::make_unique<LocalNi>();
    ni->nid = n;
    auto it = opts_.ports.find(n.pack());
    ni->port = it == opts_.ports.end() ? 7988 : it->second;
    ni->tx_credits = ni->min_credits = opts_.credits;
    note_change_locked(ni->health, now);
    nis_.push_back(std::move(ni));
  }
  transport_ = make_transport(*this);
}

Net::~Net() { shutdown(); }

Status Net::start() {
  for (auto& ni : nis_) {
    Status s = transport_->listen(ni->nid, ni->port);
    if (!s.ok()) return s;
    PFS_LOG_INFO("NI {} up (port {}, credits {}, peer_credits {})", ni->nid.to_string(), ni->port,
                 opts_.credits, opts_.peer_credits);
  }
  return Status::Ok();
}

void Net::shutdown() {
  if (shut_.exchange(true)) return;
  transport_->stop();
  std::vector<TxMsg*> dead;
  {
    std::lock_guard lk(mu_);
    for (auto& [k, p] : paths_) {
      for (TxMsg* m : p->queue) dead.push_back(m);
      p->queue.clear();
      p->tx_conn.reset();
      p->tx_state = nullptr;
      p->conns.clear();
    }
    for (auto& ni : nis_) ni->blocked.clear();
  }
  for (TxMsg* m : dead) fail(m, Status(Code::kCancelled, "shutting down"));
}

// ---- lookup and selection ----

Net::LocalNi* Net::local_ni(const Nid& nid) const {
  for (auto& ni : nis_)
    if (ni->nid == nid) return ni.get();
  return nullptr;
}

Net::PeerNi* Net::peer_ni_locked(const Nid& nid) {
  auto& slot = peer_nis_[nid.pack()];
  if (!slot) {
    slot = std::make_unique<PeerNi>();
    slot->nid = nid;
    slot->min_credits = opts_.peer_credits;
    note_change_locked(slot->health, clock_.now());
    slot->health.pni = slot.get();
    peers_.push_back(std::make_unique<Peer>());
    slot->peer = peers_.back().get();
    slot->peer->nis.push_back(slot.get());
    slot->peer->announced = {nid};
    // Every path to it exists from the start, so selection walks them without lookups.
    for (auto& ni : nis_)
      if (same_net(ni->nid, nid)) path_locked(*ni, *slot);
  }
  return slot.get();
}

Net::Path* Net::path_locked(LocalNi& ni, PeerNi& pni) {
  auto& slot = paths_[{ni.nid.pack(), pni.nid.pack()}];
  if (!slot) {
    slot = std::make_unique<Path>();
    slot->ni = &ni;
    slot->pni = &pni;
    ni.paths.push_back(slot.get());
    pni.paths.push_back(slot.get());
  }
  return slot.get();
}

Net::Path* Net::select_locked(Peer& peer) {
  Path* best = nullptr;
  int best_nh = -1, best_ph = -1;
  int64_t best_avail = 0;
  for (PeerNi* pni : peer.nis) {
    for (Path* p : pni->paths) {
      LocalNi* ni = p->ni;
      if (!ni->up.load() || !same_net(ni->nid, pni->nid)) continue;
      int nh = ni->health.value.load(), ph = pni->health.value.load();
      int64_t window = p->tx_state ? p->tx_state->tx_credits : opts_.peer_credits;
      int64_t avail = std::min(ni->tx_credits, window) - static_cast<int64_t>(p->queue.size());
      bool better =
          !best || nh > best_nh ||
          (nh == best_nh &&
           (ph > best_ph ||
            (ph == best_ph &&
             (avail > best_avail || (avail == best_avail && p->last_used < best->last_used)))));
      if (better) {
        best = p;
        best_nh = nh;
        best_ph = ph;
        best_avail = avail;
      }
    }
  }
  if (best) best->last_used = ++select_seq_;
  return best;
}

// ---- sending ----

void Net::send(const Nid& dst, std::unique_ptr<OutFrame> f, TimePoint deadline,
               TxCompletion* done) {
  submit(dst, nullptr, nullptr, false, std::move(f), deadline, done);
}

void Net::send_via(const Nid& local, const Nid& peer, std::unique_ptr<OutFrame> f,
                   TimePoint deadline, TxCompletion* done, bool strict) {
  submit(peer, &local, &peer, strict, std::move(f), deadline, done);
}

void Net::submit(const Nid& dst, const Nid* via_local, const Nid* via_peer, bool strict,
                 std::unique_ptr<OutFrame> f, TimePoint deadline, TxCompletion* done) {
  if (shut_.load()) {
    if (done) done->on_tx_done(Status(Code::kCancelled, "shutting down"), TxTimes{});
    return;
  }
  auto* m = new TxMsg;
  m->net = this;
  m->deadline = deadline;
  m->user = done;
  m->bytes = kHeaderSize + f->payload.size() + f->bulk_size();
  f->done = m;
  m->frame = std::move(f);

  Out out;
  std::vector<std::pair<TxMsg*, Status>> failed;
  std::vector<TxMsg*> vanished;
  {
    std::lock_guard lk(mu_);
    PeerNi* dpni = peer_ni_locked(dst);
    Path* p = nullptr;
    if (via_local) {
      LocalNi* ni = local_ni(*via_local);
      if (ni && same_net(ni->nid, *via_peer) && (ni->up.load() || strict))
        p = path_locked(*ni, *peer_ni_locked(*via_peer));
      if (strict && !p) {
        failed.emplace_back(m, Status(Code::kInvalidArgument, "no path " + via_local->to_string() +
                                                                  " -> " + via_peer->to_string()));
      }
    }
    if (dpni->dead.load() && !strict)
      failed.emplace_back(m, Status(Code::kPeerDead, dpni->dead_why));
    if (failed.empty() && !p) p = select_locked(*dpni->peer);
    if (failed.empty() && !p) {
      bool any_net = false;  // a path exists exactly where a local NI shares the network
      for (PeerNi* pni : dpni->peer->nis) any_net = any_net || !pni->paths.empty();
      if (!any_net)
        failed.emplace_back(
            m, Status(Code::kInvalidArgument, "no local NI on the network of " + dst.to_string()));
      else
        failed.emplace_back(
            m, Status(Code::kUnreachable,
                      "every local NI on the networks of " + dst.to_string() + " is down",
                      HealthKind::kLocalNiDown));
    }
    if (failed.empty()) {
      if (strict && !p->ni->up.load()) {
        m->path = p;
        failed.emplace_back(
            m, Status(Code::kUnreachable, "local NI " + p->ni->nid.to_string() + " is down",
                      HealthKind::kLocalNiDown));
      } else {
        m->path = p;
        m->frame->hdr.src_nid = p->ni->nid.pack();
        m->frame->hdr.dst_nid = p->pni->nid.pack();
        if (faults_.empty() || apply_faults_locked(m, &failed, &vanished))
          enqueue_locked(*p, m, &out);
        else if (!p->tx_conn)
          start_connect_locked(*p);  // faults take messages, not connections
      }
    }
  }
  transmit(out);
  finish_failures(failed);
  for (TxMsg* v : vanished) {
    TimePoint now = clock_.now();
    v->frame.reset();
    v->on_tx_done(Status::Ok(), TxTimes{now, now});
  }
}

bool Net::apply_faults_locked(TxMsg* m, std::vector<std::pair<TxMsg*, Status>>* failed,
                              std::vector<TxMsg*>* vanished) {
  const Nid& src = m->path->ni->nid;
  const Nid& dst = m->path->pni->nid;
  uint32_t type = m->frame->hdr.msg_type;
  TimePoint now = clock_.now();
  for (FaultRule& r : faults_) {
    if ((r.src && *r.src != src) || (r.dst && *r.dst != dst) || (r.msg_type && r.msg_type != type))
      continue;
    ++r.matched;
    bool fire = false;
    if (r.rate > 0) {
      fire = r.matched % r.rate == 0;
    } else if (r.interval.count() > 0) {
      TimePoint& next = fault_next_fire_[r.id];
      if (now >= next) {
        fire = true;
        next = now + r.interval;
      }
    }
    if (!fire) continue;
    ++r.injected;
    m->path->ni->counters.faults.fetch_add(1);
    m->path->pni->counters.faults.fetch_add(1);
    std::string what = (m->frame->hdr.kind == FrameKind::kReply ? "reply" : "request") +
                       std::string(" type ") + std::to_string(type) + " " + src.to_string() +
                       " -> " + dst.to_string();
    if (r.action == FaultRule::Action::kDelay) {
      PFS_LOG_INFO("fault injection: rule {} delays {} by {} ms", r.id, what,
                   std::chrono::duration_cast<std::chrono::milliseconds>(r.latency).count());
      // Held by the transport until then (the machinery of link emulation).
      m->frame->not_before = std::max(m->frame->not_before, now + r.latency);
      continue;
    }
    PFS_LOG_INFO("fault injection: rule {} drops {} ({})", r.id, what,
                 r.health == HealthKind::kNone ? "silently" : health_kind_name(r.health));
    m->path->ni->counters.drops.fetch_add(1);
    if (r.health == HealthKind::kNone) {
      vanished->push_back(m);
    } else {
      failed->emplace_back(
          m, Status(code_for(r.health),
                    "fault injection (rule " + std::to_string(r.id) + ") dropped the " + what,
                    r.health));
    }
    return false;
  }
  return true;
}

void Net::enqueue_locked(Path& p, TxMsg* m, Out* out) {
  if (p.tx_state && (!p.queue.empty() || p.tx_state->tx_credits <= 0 || p.ni->tx_credits <= 0)) {
    p.pni->counters.credit_waits.fetch_add(1, std::memory_order_relaxed);
    p.ni->counters.credit_waits.fetch_add(1, std::memory_order_relaxed);
  }
  p.queue.push_back(m);
  if (!p.tx_conn)
    start_connect_locked(p);
  else
    drain_locked(p, out);
}

void Net::drain_locked(Path& p, Out* out) {
  LocalNi& ni = *p.ni;
  while (!p.queue.empty() && p.tx_state && p.tx_state->tx_credits > 0) {
    if (ni.tx_credits <= 0) {
      if (!p.blocked_on_ni) {
        ni.blocked.push_back(&p);
        p.blocked_on_ni = true;
      }
      return;
    }
    TxMsg* m = p.queue.front();
    p.queue.pop_front();
    ConnState* cs = p.tx_state;
    --cs->tx_credits;
    ++cs->outstanding;
    if (cs->tx_credits == 0)
      m->frame->hdr.flags |= kFlagWindowEmpty;
    else
      m->frame->hdr.flags &= static_cast<uint8_t>(~kFlagWindowEmpty);
    --ni.tx_credits;
    p.pni->min_credits = std::min(p.pni->min_credits, cs->tx_credits);
    ni.min_credits = std::min(ni.min_credits, ni.tx_credits);
    {
      std::lock_guard tl(cs->tx_mu);
      m->cs = cs;
      m->conn_id = cs->conn_id;
      m->prev = nullptr;
      m->next = cs->head;
      if (cs->head) cs->head->prev = m;
      cs->head = m;
    }
    out->emplace_back(p.tx_conn, m);
  }
}

void Net::drain_ni_locked(LocalNi& ni, Out* out) {
  while (ni.tx_credits > 0 && !ni.blocked.empty()) {
    Path* p = ni.blocked.front();
    ni.blocked.pop_front();
    p->blocked_on_ni = false;
    drain_locked(*p, out);
  }
}

void Net::transmit(Out& out) {
  for (auto& [conn, m] : out) conn->send(std::move(m->frame));
  out.clear();
}

void Net::start_connect_locked(Path& p) {
  if (p.connecting || shut_.load() || !p.ni->up.load()) return;
  p.connecting = true;
  Path* pp = &p;
  transport_->connect(p.ni->nid, p.pni->nid, p.ni->port,
                      [this, pp](Result<ConnectionPtr> r) { on_connect_result(pp, std::move(r)); });
}

void Net::on_connect_result(Path* p, Result<ConnectionPtr> r) {
  std::vector<std::pair<TxMsg*, Status>> failed;
  Out out;
  {
    std::lock_guard lk(mu_);
    p->connecting = false;
    if (!r.ok()) {
      if (!p->tx_conn) {
        for (TxMsg* m : p->queue) failed.emplace_back(m, r.status());
        p->queue.clear();
      }
    } else {
      drain_locked(*p, &out);
    }
  }
  transmit(out);
  finish_failures(failed);
}

void Net::fail(TxMsg* m, const Status& s) {
  // The frame never reached the transport: complete it here.
  m->frame.reset();
  m->on_tx_done(s, TxTimes{});
}

void Net::finish_failures(std::vector<std::pair<TxMsg*, Status>>& failed) {
  for (auto& [m, s] : failed) fail(m, s);
  failed.clear();
}

void Net::TxMsg::on_tx_done(const Status& s, const TxTimes& t) {
  bool was_expired = false;
  if (cs) {
    std::lock_guard tl(cs->tx_mu);
    if (prev) prev->next = next;
    if (next) next->prev = prev;
    if (cs->head == this) cs->head = next;
    was_expired = expired;
    cs = nullptr;
  }
  TxTimes tt = t;
  tt.conn_id = conn_id;
  Status st = s;
  if (path) {
    tt.local_nid = path->ni->nid.pack();
    tt.peer_nid = path->pni->nid.pack();
    LocalNi& ni = *path->ni;
    PeerNi& pni = *path->pni;
    if (s.ok()) {
      ni.counters.send_count.fetch_add(1, std::memory_order_relaxed);
      ni.counters.send_bytes.fetch_add(bytes, std::memory_order_relaxed);
      pni.counters.send_count.fetch_add(1, std::memory_order_relaxed);
      pni.counters.send_bytes.fetch_add(bytes, std::memory_order_relaxed);
      if (ni.up.load()) net->raise(ni.health);  // a NI that is down stays down
    } else {
      if (was_expired) {
        st = Status(Code::kTimeout,
                    "send " + ni.nid.to_string() + " -> " + pni.nid.to_string() +
                        " not completed by its deadline (remote timeout); connection closed",
                    HealthKind::kPeerNiUnreachable);
        ni.counters.remote_timeouts.fetch_add(1);
        pni.counters.remote_timeouts.fetch_add(1);
      }
      HealthKind k = st.health_kind();
      // Link state changes are counted once, as events, not per message.
      if (k != HealthKind::kLocalNiDown && k != HealthKind::kLocalNiUp) {
        ni.counters.count_error(k);
        pni.counters.count_error(k);
        if (k != HealthKind::kNone) {
          std::lock_guard lk(net->mu_);
          net->lower_locked(is_local_kind(k) ? ni.health : pni.health, net->clock_.now());
        }
      }
    }
  }
  if (user) user->on_tx_done(st, tt);
  delete this;
}

// ---- deadlines, reports, link state, recovery ----

void Net::detach_locked(Path& p, Connection* c) {
  if (p.tx_conn.get() != c) return;
  p.tx_conn.reset();
  p.tx_state = nullptr;
  for (auto& other : p.conns)
    if (other.get() != c && other->is_open()) {
      p.tx_conn = other;
      p.tx_state = static_cast<ConnState*>(other->user.get());
      break;
    }
  if (!p.tx_conn && !p.queue.empty()) start_connect_locked(p);
}

size_t Net::expire(TimePoint now) {
  size_t n = 0;
  std::vector<std::pair<TxMsg*, Status>> failed;
  std::vector<std::pair<ConnectionPtr, Status>> to_close;
  Out out;
  {
    std::lock_guard lk(mu_);
    for (auto& [k, pp] : paths_) {
      Path& p = *pp;
      auto& q = p.queue;
      auto keep =
          std::stable_partition(q.begin(), q.end(), [now](TxMsg* m) { return m->deadline > now; });
      if (keep != q.end()) {
        std::string why = p.tx_conn ? "waiting for credits" : "waiting for a connection";
        for (auto it = keep; it != q.end(); ++it) {
          p.ni->counters.local_timeouts.fetch_add(1);
          p.pni->counters.local_timeouts.fetch_add(1);
          failed.emplace_back(
              *it, Status(Code::kTimeout,
                          "send " + p.ni->nid.to_string() + " -> " + p.pni->nid.to_string() +
                              " passed its deadline in the queue (local timeout, " + why + ")",
                          HealthKind::kLocalNiSendTimeout));
        }
        q.erase(keep, q.end());
        // As o2iblnd does: the connection the message was queued on is closed.
        if (p.tx_conn)
          to_close.emplace_back(p.tx_conn,
                                Status(Code::kClosed, "a transmit deadline passed in its queue"));
      }
      for (auto& c : p.conns) {
        auto* cs = static_cast<ConnState*>(c->user.get());
        std::lock_guard tl(cs->tx_mu);
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
    for (auto& [c, s] : to_close)
      detach_locked(*static_cast<ConnState*>(c->user.get())->path, c.get());
  }
  transmit(out);
  for (auto& [c, s] : to_close) {
    PFS_LOG_WARN("closing connection {}: {}", c->describe(), s.message());
    c->close(s);
  }
  n += failed.size();
  finish_failures(failed);
  return n;
}

void Net::report_remote_timeout(const TxTimes& path, const std::string& what) {
  ConnectionPtr conn;
  {
    std::lock_guard lk(mu_);
    auto it = paths_.find({path.local_nid, path.peer_nid});
    if (it == paths_.end()) return;
    Path& p = *it->second;
    p.ni->counters.remote_timeouts.fetch_add(1);
    p.pni->counters.remote_timeouts.fetch_add(1);
    p.ni->counters.count_error(HealthKind::kPeerNiUnreachable);
    p.pni->counters.count_error(HealthKind::kPeerNiUnreachable);
    lower_locked(p.pni->health, clock_.now());
    for (auto& c : p.conns)
      if (c->id() == path.conn_id) conn = c;
    if (conn) detach_locked(p, conn.get());
  }
  if (conn) {
    PFS_LOG_WARN("closing connection {}: {} (remote timeout)", conn->describe(), what);
    conn->close(Status(Code::kTimeout, what + " (remote timeout)", HealthKind::kPeerNiUnreachable));
  }
}

void Net::note_resend(const TxTimes& path) {
  std::lock_guard lk(mu_);
  auto it = paths_.find({path.local_nid, path.peer_nid});
  if (it == paths_.end()) return;
  it->second->ni->counters.resends.fetch_add(1);
  it->second->pni->counters.resends.fetch_add(1);
}

bool Net::set_link_state(const Nid& local, bool up, bool penalize) {
  LocalNi* ni = local_ni(local);
  if (!ni) return false;
  std::vector<std::pair<TxMsg*, Status>> failed;
  std::vector<ConnectionPtr> to_close;
  Status down(Code::kClosed, "local NI " + local.to_string() + " is down (link down)",
              HealthKind::kLocalNiDown);
  {
    std::lock_guard lk(mu_);
    if (ni->up.load() == up) return true;
    ni->up.store(up);
    TimePoint now = clock_.now();
    note_change_locked(ni->health, now);
    if (penalize) ni->counters.count_error(up ? HealthKind::kLocalNiUp : HealthKind::kLocalNiDown);
    if (!up) {
      if (penalize) lower_locked(ni->health, now);
      for (Path* p : ni->paths) {
        for (TxMsg* m : p->queue)
          failed.emplace_back(
              m, Status(Code::kUnreachable, "local NI " + local.to_string() + " is down",
                        HealthKind::kLocalNiDown));
        p->queue.clear();
        for (auto& c : p->conns) to_close.push_back(c);
      }
    } else if (ni->health.value.load() < kMaxHealth) {
      ni->health.ping_count = 0;
      ni->health.next_ping = now;
    }
  }
  if (up)
    PFS_LOG_INFO("NI {}: link up (LOCAL_NI_UP); selectable again, health {}", local.to_string(),
                 ni->health.value.load());
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
  std::lock_guard lk(mu_);
  auto schedule = [&](Health& h) {
    int n = std::min(h.ping_count, 20);
    Duration d = opts_.recovery_interval * (int64_t{1} << n);
    h.next_ping = now + std::min<Duration>(d, kMaxRecoveryInterval);
    ++h.ping_count;
  };
  for (auto& ni : nis_) {
    Health& h = ni->health;
    if (!ni->up.load() || h.value.load() >= kMaxHealth || h.next_ping > now) continue;
    // Ping the healthiest peer NI reachable through this NI.
    PeerNi* best = nullptr;
    for (Path* p : ni->paths)
      if (!best || p->pni->health.value.load() > best->health.value.load()) best = p->pni;
    if (!best) continue;  // no peer on its network yet: nothing to ping, no back-off
    schedule(h);
    v.push_back(RecoveryTarget{ni->nid, best->nid, true});
  }
  // Only the peer NIs below full health (a server may have 100,000 others).
  for (size_t i = 0; i < recovering_.size();) {
    PeerNi* pni = recovering_[i];
    Health& h = pni->health;
    if (h.value.load() >= kMaxHealth) {  // healed: off the list
      h.listed = false;
      recovering_[i] = recovering_.back();
      recovering_.pop_back();
      continue;
    }
    ++i;
    if (h.next_ping > now || pni->dead.load()) continue;
    LocalNi* best = nullptr;
    for (auto& ni : nis_)
      if (ni->up.load() && same_net(ni->nid, pni->nid) &&
          (!best || ni->health.value.load() > best->health.value.load()))
        best = ni.get();
    if (!best) continue;  // every local NI on its network is down
    schedule(h);
    v.push_back(RecoveryTarget{best->nid, pni->nid, false});
  }
  return v;
}

void Net::set_credits(int64_t credits, int64_t peer_credits) {
  Out out;
  {
    std::lock_guard lk(mu_);
    int64_t dc = credits - opts_.credits, dp = peer_credits - opts_.peer_credits;
    opts_.credits = credits;
    opts_.peer_credits = peer_credits;
    uint32_t hw = opts_.credit_high_water();
    for (auto& ni : nis_) ni->tx_credits += dc;
    for (auto& [k, p] : paths_)
      for (auto& c : p->conns) {
        auto* cs = static_cast<ConnState*>(c->user.get());
        cs->tx_credits += dp;
        cs->high_water = hw;
      }
    for (auto& [k, p] : paths_) drain_locked(*p, &out);
    for (auto& ni : nis_) drain_ni_locked(*ni, &out);
  }
  PFS_LOG_INFO("credits now {} per NI, peer_credits {} per connection", credits, peer_credits);
  transmit(out);
}

// ---- membership ----

void Net::set_peer_dead(const Nid& nid, bool dead, const std::string& why) {
  std::vector<std::pair<TxMsg*, Status>> failed;
  {
    std::lock_guard lk(mu_);
    PeerNi* pni = peer_ni_locked(nid);
    for (PeerNi* x : pni->peer->nis) {
      x->dead.store(dead);
      x->dead_why = why;
      if (!dead) continue;
      for (Path* p : x->paths) {
        for (TxMsg* m : p->queue) failed.emplace_back(m, Status(Code::kPeerDead, why));
        p->queue.clear();
      }
    }
  }
  finish_failures(failed);
}

bool Net::peer_dead(const Nid& nid) const {
  std::lock_guard lk(mu_);
  auto it = peer_nis_.find(nid.pack());
  return it != peer_nis_.end() && it->second->dead.load();
}

void Net::drop_peer(const Nid& nid, const std::string& why) {
  std::vector<ConnectionPtr> conns;
  {
    std::lock_guard lk(mu_);
    auto it = peer_nis_.find(nid.pack());
    if (it == peer_nis_.end()) return;
    for (PeerNi* x : it->second->peer->nis)
      for (Path* p : x->paths) conns.insert(conns.end(), p->conns.begin(), p->conns.end());
  }
  for (auto& c : conns) c->close(Status(Code::kClosed, why));
}

// ---- faults ----

uint64_t Net::add_fault(FaultRule rule) {
  std::lock_guard lk(mu_);
  rule.id = next_fault_id_++;
  rule.matched = rule.injected = 0;
  PFS_LOG_WARN("fault injection: rule {} added: {}", rule.id, rule.describe());
  faults_.push_back(rule);
  return rule.id;
}

bool Net::del_fault(uint64_t id) {
  std::lock_guard lk(mu_);
  auto it =
      std::find_if(faults_.begin(), faults_.end(), [id](const FaultRule& r) { return r.id == id; });
  if (it == faults_.end()) return false;
  PFS_LOG_WARN("fault injection: rule {} removed after {} injections", id, it->injected);
  faults_.erase(it);
  fault_next_fire_.erase(id);
  return true;
}

std::vector<FaultRule> Net::faults() const {
  std::lock_guard lk(mu_);
  return faults_;
}

// ---- transport events ----

void Net::on_connected(const ConnectionPtr& c) {
  LocalNi* ni = local_ni(c->local_nid());
  if (!ni) {
    c->close(Status(Code::kNotFound, "no local NI " + c->local_nid().to_string()));
    return;
  }
  auto cs = std::make_shared<ConnState>();
  cs->ni = ni;
  cs->self = c;
  cs->conn_id = c->id();
  Out out;
  {
    std::lock_guard lk(mu_);
    PeerNi* pni = peer_ni_locked(c->peer_nid());
    // Discovery: every NID the peer announced belongs to the same peer.
    Peer* peer = pni->peer;
    peer->announced = c->peer_nids();
    for (const Nid& n : c->peer_nids()) {
      bool reachable = false;
      for (auto& l : nis_) reachable = reachable || same_net(l->nid, n);
      if (!reachable) continue;  // on a network we have no NI on
      PeerNi* o = peer_ni_locked(n);
      if (o->peer == peer) continue;
      Peer* old = o->peer;
      for (PeerNi* x : old->nis) {
        x->peer = peer;
        peer->nis.push_back(x);
      }
      old->nis.clear();
    }
    Path* p = path_locked(*ni, *pni);
    cs->path = p;
    cs->tx_credits = opts_.peer_credits;
    cs->high_water = opts_.credit_high_water();
    c->user = cs;
    p->conns.push_back(c);
    if (!p->tx_conn) {
      p->tx_conn = c;
      p->tx_state = cs.get();
    }
    drain_locked(*p, &out);
  }
  transmit(out);
}

void Net::on_frame(Connection& c, InFrame&& f) {
  auto* cs = static_cast<ConnState*>(c.user.get());
  if (!cs) return;
  LocalNi& ni = *cs->ni;
  if (f.hdr.credits) {
    Out out;
    bool bad = false;
    int64_t outstanding = 0;
    {
      std::lock_guard lk(mu_);
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
  if (f.hdr.kind != FrameKind::kRequest && f.hdr.kind != FrameKind::kReply) {
    c.close(Status(Code::kProtocol, "unexpected frame kind after handshake"));
    return;
  }
  uint64_t bytes = kHeaderSize + f.payload.size() + f.bulk.size();
  PeerNi& pni = *cs->path->pni;
  if (pni.dead.load()) {
    set_peer_dead(pni.nid, false, "");
    PFS_LOG_INFO("heard from {} directly: it is alive, whatever the MGS said", pni.nid.to_string());
  }
  if (ni.up.load()) raise(ni.health);
  raise(pni.health);
  ni.counters.recv_count.fetch_add(1, std::memory_order_relaxed);
  ni.counters.recv_bytes.fetch_add(bytes, std::memory_order_relaxed);
  pni.counters.recv_count.fetch_add(1, std::memory_order_relaxed);
  pni.counters.recv_bytes.fetch_add(bytes, std::memory_order_relaxed);
  if (f.hdr.dst_nid != ni.nid.pack()) {
    ni.counters.drops.fetch_add(1);
    PFS_LOG_WARN("dropping frame on {} addressed to another NID", c.describe());
    return;
  }
  // A sender out of credits gets every owed credit back when this frame is consumed.
  RxCredit credit(cs->self, (f.hdr.flags & kFlagWindowEmpty)
                                ? 1
                                : cs->high_water.load(std::memory_order_relaxed));
  if (!rx_) return;
  rx_->on_message(c.peer_nid(), std::move(f), std::move(credit));
}

void Net::on_closed(Connection& c, const Status& why) {
  auto* cs = static_cast<ConnState*>(c.user.get());
  if (!cs) return;
  LocalNi& ni = *cs->ni;
  Out out;
  ConnectionPtr keep;  // c may be freed when it leaves conns
  {
    std::lock_guard lk(mu_);
    Path* p = cs->path;
    ni.tx_credits += cs->outstanding;
    cs->outstanding = 0;
    cs->tx_credits = 0;
    auto it = std::find_if(p->conns.begin(), p->conns.end(),
                           [&](const ConnectionPtr& x) { return x.get() == &c; });
    if (it != p->conns.end()) {
      keep = *it;
      p->conns.erase(it);
    }
    if (p->tx_conn.get() == &c) {
      p->tx_conn.reset();
      p->tx_state = nullptr;
      for (auto& other : p->conns)
        if (other->is_open()) {
          p->tx_conn = other;
          p->tx_state = static_cast<ConnState*>(other->user.get());
          break;
        }
    }
    if (!p->queue.empty() && !p->tx_conn) start_connect_locked(*p);
    drain_locked(*p, &out);
    drain_ni_locked(ni, &out);
  }
  transmit(out);
  if (rx_ && !shut_.load()) rx_->on_connection_closed(c.id(), c.peer_nid(), why);
}

// ---- snapshots ----

namespace {
// A peer node's name: its lowest NID. REQUIRES: it has an NI.
Nid lowest_nid(const Net::Peer& p) {
  Nid n = p.nis.front()->nid;
  for (const Net::PeerNi* o : p.nis) n = std::min(n, o->nid);
  return n;
}

void fill(NiInfo& info, const NetCounters& c) {
  info.send_count = c.send_count.load();
  info.send_bytes = c.send_bytes.load();
  info.recv_count = c.recv_count.load();
  info.recv_bytes = c.recv_bytes.load();
  info.local_timeouts = c.local_timeouts.load();
  info.remote_timeouts = c.remote_timeouts.load();
  info.drops = c.drops.load();
  info.resends = c.resends.load();
  info.faults = c.faults.load();
  info.credit_waits = c.credit_waits.load();
  for (int i = 0; i < kNumHealthKinds; ++i) info.errors[i] = c.errors[i].load();
}
}  // namespace

std::vector<NiInfo> Net::nis() const {
  std::vector<NiInfo> v;
  std::lock_guard lk(mu_);
  TimePoint now = clock_.now();
  auto fill_health = [now](NiInfo& i, const Health& h) {
    i.health = h.value.load();
    i.last_change_unix_ms = h.last_change_unix_ms;
    i.since_change_s = std::chrono::duration<double>(now - h.last_change).count();
    i.recovery_pings = h.ping_count;
    i.next_recovery_s =
        i.health < kMaxHealth ? std::chrono::duration<double>(h.next_ping - now).count() : -1;
  };
  for (auto& ni : nis_) {
    NiInfo i;
    i.nid = ni->nid;
    i.up = ni->up.load() && !shut_.load();
    fill_health(i, ni->health);
    if (!ni->up.load()) i.next_recovery_s = -1;
    i.credits = ni->tx_credits;
    i.credits_max = opts_.credits;
    i.credits_min = ni->min_credits;
    for (Path* p : ni->paths) {
      i.queued += static_cast<int64_t>(p->queue.size());
      i.connections += static_cast<int>(p->conns.size());
    }
    fill(i, ni->counters);
    v.push_back(std::move(i));
  }
  return v;
}

std::vector<NiInfo> Net::peers() const {
  std::vector<NiInfo> v;
  std::lock_guard lk(mu_);
  TimePoint now = clock_.now();
  for (auto& [k, pni] : peer_nis_) {
    NiInfo i;
    i.nid = pni->nid;
    i.health = pni->health.value.load();
    i.last_change_unix_ms = pni->health.last_change_unix_ms;
    i.since_change_s = std::chrono::duration<double>(now - pni->health.last_change).count();
    i.recovery_pings = pni->health.ping_count;
    i.next_recovery_s = i.health < kMaxHealth
                            ? std::chrono::duration<double>(pni->health.next_ping - now).count()
                            : -1;
    i.credits_max = opts_.peer_credits;
    i.credits_min = pni->min_credits;
    for (Path* p : pni->paths) {
      if (p->tx_state && !i.up) i.credits = p->tx_state->tx_credits;
      i.up = i.up || p->tx_conn != nullptr;
      i.queued += static_cast<int64_t>(p->queue.size());
      i.connections += static_cast<int>(p->conns.size());
    }
    i.peer_nids = pni->peer->announced;
    i.peer = lowest_nid(*pni->peer);
    fill(i, pni->counters);
    v.push_back(std::move(i));
  }
  std::sort(v.begin(), v.end(), [](const NiInfo& a, const NiInfo& b) { return a.nid < b.nid; });
  return v;
}

std::vector<PeerLoad> Net::peer_loads() const {
  std::vector<PeerLoad> v;
  std::lock_guard lk(mu_);
  v.reserve(peers_.size());
  for (const auto& peer : peers_) {
    if (peer->nis.empty()) continue;
    PeerLoad l;
    l.peer = lowest_nid(*peer);
    for (const PeerNi* pni : peer->nis) {
      l.bytes += pni->counters.send_bytes.load(std::memory_order_relaxed) +
                 pni->counters.recv_bytes.load(std::memory_order_relaxed);
      l.sends += pni->counters.send_count.load(std::memory_order_relaxed);
      for (const Path* p : pni->paths) l.up = l.up || p->tx_conn != nullptr;
    }
    v.push_back(l);
  }
  return v;
}

std::optional<Nid> Net::peer_of(const Nid& nid) const {
  std::lock_guard lk(mu_);
  auto it = peer_nis_.find(nid.pack());
  if (it == peer_nis_.end()) return std::nullopt;
  return lowest_nid(*it->second->peer);
}

}  // namespace pfsnet
