#include "net/net.h"

#include <algorithm>

#include "base/log.h"

namespace pfsnet {

struct Net::ConnState {
  LocalNi* ni = nullptr;
  PeerNi* peer = nullptr;
  int64_t tx_credits = 0;   // this connection's window left (guarded by ni->mu)
  int64_t outstanding = 0;  // messages sent and not yet credited back (guarded by ni->mu)
  std::atomic<bool> flush_pending{false};
  uint32_t high_water = 1;
  std::weak_ptr<Connection> self;
};

namespace {
void raise_health(std::atomic<int>& h, int64_t by) {
  int v = h.load(std::memory_order_relaxed);
  while (v < kMaxHealth &&
         !h.compare_exchange_weak(v, static_cast<int>(std::min<int64_t>(kMaxHealth, v + by)),
                                  std::memory_order_relaxed)) {
  }
}
void lower_health(std::atomic<int>& h, int64_t by) {
  int v = h.load(std::memory_order_relaxed);
  while (v > 0 && !h.compare_exchange_weak(v, static_cast<int>(std::max<int64_t>(0, v - by)),
                                           std::memory_order_relaxed)) {
  }
}
bool is_local_kind(HealthKind k) {
  return k == HealthKind::kLocalNiDown || k == HealthKind::kLocalNiUp ||
         k == HealthKind::kLocalNiSendTimeout;
}
}  // namespace

struct Net::PeerNi {
  std::atomic<int> health{kMaxHealth};
  Nid nid;
  std::vector<Nid> all_nids;
  NetCounters counters;
  ConnectionPtr tx_conn;
  ConnState* tx_state = nullptr;
  std::vector<ConnectionPtr> conns;
  bool connecting = false;
  bool blocked_on_ni = false;
  std::deque<TxMsg*> queue;
  int64_t min_credits = 0;
};

struct Net::LocalNi {
  std::atomic<int> health{kMaxHealth};
  Nid nid;
  uint16_t port = 0;
  mutable std::mutex mu;
  int64_t tx_credits = 0;
  int64_t min_credits = 0;
  NetCounters counters;
  std::unordered_map<uint64_t, std::unique_ptr<PeerNi>> peers;
  std::deque<PeerNi*> blocked;  // peer NIs waiting for an NI credit
};

struct Net::TxMsg final : TxCompletion {
  Net* net = nullptr;
  LocalNi* ni = nullptr;
  PeerNi* peer = nullptr;
  std::unique_ptr<OutFrame> frame;
  TimePoint deadline;
  TxCompletion* user = nullptr;
  uint64_t bytes = 0;

  void on_tx_done(const Status& s, const TxTimes& t) override {
    int64_t sens = net->opts_.health_sensitivity;
    if (s.ok()) {
      raise_health(ni->health, sens);
    } else if (s.health_kind() != HealthKind::kNone) {
      lower_health(is_local_kind(s.health_kind()) ? ni->health : peer->health, sens);
    }
    if (s.ok()) {
      ni->counters.send_count.fetch_add(1, std::memory_order_relaxed);
      ni->counters.send_bytes.fetch_add(bytes, std::memory_order_relaxed);
      peer->counters.send_count.fetch_add(1, std::memory_order_relaxed);
      peer->counters.send_bytes.fetch_add(bytes, std::memory_order_relaxed);
    } else {
      ni->counters.count_error(s.health_kind());
      peer->counters.count_error(s.health_kind());
    }
    if (user) user->on_tx_done(s, t);
    delete this;
  }
};

NetOptions NetOptions::from(const Config& cfg) {
  NetOptions o;
  o.credits = cfg.lnet.credits;
  o.peer_credits = cfg.lnet.peer_credits;
  o.transaction_timeout = std::chrono::seconds(cfg.lnet.transaction_timeout);
  o.health_sensitivity = cfg.lnet.health_sensitivity;
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

Net::Net(NetOptions opts, std::vector<Nid> local_nids, Clock& clock,
         TransportFactory make_transport)
    : opts_(std::move(opts)), local_nids_(std::move(local_nids)), clock_(clock) {
  for (const Nid& n : local_nids_) {
    auto ni = std::make_unique<LocalNi>();
    ni->nid = n;
    auto it = opts_.ports.find(n.pack());
    ni->port = it == opts_.ports.end() ? 7988 : it->second;
    ni->tx_credits = ni->min_credits = opts_.credits;
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
  for (auto& ni : nis_) {
    std::vector<TxMsg*> dead;
    {
      std::lock_guard lk(ni->mu);
      for (auto& [k, p] : ni->peers) {
        for (TxMsg* m : p->queue) dead.push_back(m);
        p->queue.clear();
        p->tx_conn.reset();
        p->tx_state = nullptr;
        p->conns.clear();
      }
      ni->blocked.clear();
    }
    for (TxMsg* m : dead) fail(m, Status(Code::kCancelled, "shutting down"));
  }
}

Net::LocalNi* Net::ni_for(const Nid& dst) {
  for (auto& ni : nis_)
    if (ni->nid.type == dst.type && ni->nid.net_num == dst.net_num) return ni.get();
  return nullptr;
}

Net::PeerNi* Net::peer_ni_locked(LocalNi& ni, const Nid& nid) {
  auto& slot = ni.peers[nid.pack()];
  if (!slot) {
    slot = std::make_unique<PeerNi>();
    slot->nid = nid;
    slot->all_nids = {nid};
    slot->min_credits = opts_.peer_credits;
  }
  return slot.get();
}

void Net::send(const Nid& dst, std::unique_ptr<OutFrame> f, TimePoint deadline,
               TxCompletion* done) {
  if (shut_.load()) {
    if (done) done->on_tx_done(Status(Code::kCancelled, "shutting down"), TxTimes{});
    return;
  }
  LocalNi* ni = ni_for(dst);
  if (!ni) {
    if (done)
      done->on_tx_done(
          Status(Code::kInvalidArgument, "no local NI on the network of " + dst.to_string()),
          TxTimes{});
    return;
  }
  f->hdr.src_nid = ni->nid.pack();
  f->hdr.dst_nid = dst.pack();
  auto* m = new TxMsg;
  m->net = this;
  m->ni = ni;
  m->deadline = deadline;
  m->user = done;
  m->bytes = kHeaderSize + f->payload.size() + f->bulk_size();
  f->done = m;
  m->frame = std::move(f);

  std::vector<std::pair<ConnectionPtr, TxMsg*>> out;
  {
    std::lock_guard lk(ni->mu);
    PeerNi* p = peer_ni_locked(*ni, dst);
    m->peer = p;
    p->queue.push_back(m);
    if (!p->tx_conn)
      start_connect_locked(*ni, *p);
    else
      drain_locked(*ni, *p, &out);
  }
  transmit(out);
}

void Net::drain_locked(LocalNi& ni, PeerNi& p, std::vector<std::pair<ConnectionPtr, TxMsg*>>* out) {
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
    --p.tx_state->tx_credits;
    ++p.tx_state->outstanding;
    --ni.tx_credits;
    p.min_credits = std::min(p.min_credits, p.tx_state->tx_credits);
    ni.min_credits = std::min(ni.min_credits, ni.tx_credits);
    out->emplace_back(p.tx_conn, m);
  }
}

void Net::drain_ni_locked(LocalNi& ni, std::vector<std::pair<ConnectionPtr, TxMsg*>>* out) {
  while (ni.tx_credits > 0 && !ni.blocked.empty()) {
    PeerNi* p = ni.blocked.front();
    ni.blocked.pop_front();
    p->blocked_on_ni = false;
    drain_locked(ni, *p, out);
  }
}

void Net::transmit(std::vector<std::pair<ConnectionPtr, TxMsg*>>& out) {
  for (auto& [conn, m] : out) conn->send(std::move(m->frame));
  out.clear();
}

void Net::start_connect_locked(LocalNi& ni, PeerNi& p) {
  if (p.connecting || shut_.load()) return;
  p.connecting = true;
  LocalNi* nip = &ni;
  Nid peer = p.nid;
  transport_->connect(ni.nid, p.nid, ni.port, [this, nip, peer](Result<ConnectionPtr> r) {
    on_connect_result(nip, peer, std::move(r));
  });
}

void Net::on_connect_result(LocalNi* ni, Nid peer, Result<ConnectionPtr> r) {
  std::vector<TxMsg*> dead;
  std::vector<std::pair<ConnectionPtr, TxMsg*>> out;
  {
    std::lock_guard lk(ni->mu);
    PeerNi* p = peer_ni_locked(*ni, peer);
    p->connecting = false;
    if (!r.ok()) {
      if (!p->tx_conn) {
        dead.assign(p->queue.begin(), p->queue.end());
        p->queue.clear();
      }
    } else {
      drain_locked(*ni, *p, &out);
    }
  }
  transmit(out);
  for (TxMsg* m : dead) fail(m, r.status());
}

void Net::fail(TxMsg* m, const Status& s) {
  // The frame never reached the transport: complete it here.
  m->on_tx_done(s, TxTimes{});
}

size_t Net::expire(TimePoint now) {
  size_t n = 0;
  for (auto& ni : nis_) {
    std::vector<TxMsg*> dead;
    {
      std::lock_guard lk(ni->mu);
      for (auto& [k, p] : ni->peers) {
        auto& q = p->queue;
        auto keep = std::stable_partition(q.begin(), q.end(),
                                          [now](TxMsg* m) { return m->deadline > now; });
        dead.insert(dead.end(), keep, q.end());
        q.erase(keep, q.end());
      }
    }
    for (TxMsg* m : dead) {
      ni->counters.timeouts.fetch_add(1);
      m->peer->counters.timeouts.fetch_add(1);
      std::string why = m->peer->tx_conn ? "waiting for credits" : "waiting for a connection";
      fail(m, Status(Code::kTimeout,
                     "send from " + ni->nid.to_string() + " to " + m->peer->nid.to_string() +
                         " passed its deadline " + why,
                     HealthKind::kLocalNiSendTimeout));
    }
    n += dead.size();
  }
  return n;
}

void Net::on_connected(const ConnectionPtr& c) {
  LocalNi* ni = nullptr;
  for (auto& n : nis_)
    if (n->nid == c->local_nid()) ni = n.get();
  if (!ni) {
    c->close(Status(Code::kNotFound, "no local NI " + c->local_nid().to_string()));
    return;
  }
  auto cs = std::make_shared<ConnState>();
  cs->ni = ni;
  cs->high_water = opts_.credit_high_water();
  cs->self = c;
  std::vector<std::pair<ConnectionPtr, TxMsg*>> out;
  {
    std::lock_guard lk(ni->mu);
    PeerNi* p = peer_ni_locked(*ni, c->peer_nid());
    cs->peer = p;
    cs->tx_credits = opts_.peer_credits;
    c->user = cs;
    p->all_nids = c->peer_nids();
    p->conns.push_back(c);
    if (!p->tx_conn) {
      p->tx_conn = c;
      p->tx_state = cs.get();
    }
    drain_locked(*ni, *p, &out);
  }
  transmit(out);
}

void Net::on_frame(Connection& c, InFrame&& f) {
  auto* cs = static_cast<ConnState*>(c.user.get());
  if (!cs) return;
  LocalNi& ni = *cs->ni;
  if (f.hdr.credits) {
    std::vector<std::pair<ConnectionPtr, TxMsg*>> out;
    bool bad = false;
    int64_t outstanding = 0;
    {
      std::lock_guard lk(ni.mu);
      outstanding = cs->outstanding;
      if (f.hdr.credits > static_cast<uint64_t>(outstanding)) {
        bad = true;
      } else {
        cs->tx_credits += f.hdr.credits;
        cs->outstanding -= f.hdr.credits;
        ni.tx_credits += f.hdr.credits;
        drain_locked(ni, *cs->peer, &out);
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
  raise_health(ni.health, opts_.health_sensitivity);
  raise_health(cs->peer->health, opts_.health_sensitivity);
  ni.counters.recv_count.fetch_add(1, std::memory_order_relaxed);
  ni.counters.recv_bytes.fetch_add(bytes, std::memory_order_relaxed);
  cs->peer->counters.recv_count.fetch_add(1, std::memory_order_relaxed);
  cs->peer->counters.recv_bytes.fetch_add(bytes, std::memory_order_relaxed);
  if (f.hdr.dst_nid != ni.nid.pack()) {
    ni.counters.drops.fetch_add(1);
    PFS_LOG_WARN("dropping frame on {} addressed to another NID", c.describe());
    return;
  }
  RxCredit credit(cs->self, cs->high_water);
  if (!rx_) return;
  rx_->on_message(c.peer_nid(), std::move(f), std::move(credit));
}

void Net::on_closed(Connection& c, const Status& why) {
  auto* cs = static_cast<ConnState*>(c.user.get());
  if (!cs) return;
  LocalNi& ni = *cs->ni;
  std::vector<std::pair<ConnectionPtr, TxMsg*>> out;
  ConnectionPtr keep;  // c may be freed when it leaves conns
  {
    std::lock_guard lk(ni.mu);
    PeerNi* p = cs->peer;
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
    if (!p->queue.empty() && !p->tx_conn) start_connect_locked(ni, *p);
    drain_locked(ni, *p, &out);
    drain_ni_locked(ni, &out);
  }
  transmit(out);
  if (rx_ && !shut_.load()) rx_->on_peer_disconnected(c.peer_nids(), why);
}

namespace {
void fill(NiInfo& info, const NetCounters& c) {
  info.send_count = c.send_count.load();
  info.send_bytes = c.send_bytes.load();
  info.recv_count = c.recv_count.load();
  info.recv_bytes = c.recv_bytes.load();
  info.timeouts = c.timeouts.load();
  info.drops = c.drops.load();
  for (int i = 0; i < kNumHealthKinds; ++i) info.errors[i] = c.errors[i].load();
}
}  // namespace

std::vector<NiInfo> Net::nis() const {
  std::vector<NiInfo> v;
  for (auto& ni : nis_) {
    NiInfo i;
    std::lock_guard lk(ni->mu);
    i.nid = ni->nid;
    i.up = !shut_.load();
    i.health = ni->health.load();
    i.credits = ni->tx_credits;
    i.credits_max = opts_.credits;
    i.credits_min = ni->min_credits;
    for (auto& [k, p] : ni->peers) {
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
  for (auto& ni : nis_) {
    std::lock_guard lk(ni->mu);
    for (auto& [k, p] : ni->peers) {
      NiInfo i;
      i.nid = p->nid;
      i.up = p->tx_conn != nullptr;
      i.health = p->health.load();
      i.credits = p->tx_state ? p->tx_state->tx_credits : 0;
      i.credits_max = opts_.peer_credits;
      i.credits_min = p->min_credits;
      i.queued = static_cast<int64_t>(p->queue.size());
      i.connections = static_cast<int>(p->conns.size());
      i.peer_nids = p->all_nids;
      fill(i, p->counters);
      v.push_back(std::move(i));
    }
  }
  std::sort(v.begin(), v.end(), [](const NiInfo& a, const NiInfo& b) { return a.nid < b.nid; });
  return v;
}

}  // namespace pfsnet
