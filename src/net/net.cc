// Net, the send core: construction, path selection, queues, credits, transmission and
// the completion of every message.
#include <algorithm>
#include <tuple>

#include "base/log.h"
#include "base/mutex.h"
#include "net/net_internal.h"
#include "net/peer_table.h"
#include "net/slowness.h"
#include "wire/data_crc.h"
#include "wire/le.h"

namespace pfsnet {

namespace {

std::span<const uint8_t> bulk_span(const OutFrame& f) {
  return f.bulk ? std::span<const uint8_t>(f.bulk->data(), f.bulk_size())
                : std::span<const uint8_t>();
}

// A corrupt fault: one byte in the middle of the bulk -- a copy, as the bulk is shared
// with the caller -- or else of the payload is changed, after sealing, as a bad link or
// memory would.
void damage(OutFrame& f) {
  if (size_t n = f.bulk_size(); n > 0) {
    Buffer copy = Buffer::copy_of(bulk_span(f));
    copy.data()[n / 2] ^= 0x20;
    f.bulk = make_bulk(std::move(copy));
  } else if (f.payload_len() > 0) {
    Buffer copy = f.wire_payload();  // the payload is shared: damage a copy of it
    copy.data()[copy.size() / 2] ^= 0x20;
    f.payload = std::move(copy);
    f.sealed = false;
  }
}

}  // namespace

NetOptions NetOptions::from(const Config& cfg) {
  NetOptions o;
  o.credits = cfg.lnet.credits;
  o.peer_credits = cfg.lnet.peer_credits;
  o.transaction_timeout = std::chrono::seconds(cfg.lnet.transaction_timeout);
  o.health_sensitivity = cfg.lnet.health_sensitivity;
  o.recovery_interval = std::chrono::seconds(cfg.lnet.recovery_interval);
  o.min_reconnect = std::chrono::milliseconds(cfg.lnet.min_reconnect_ms);
  o.max_reconnect = std::chrono::milliseconds(cfg.lnet.max_reconnect_ms);
  o.checksum = cfg.lnet.checksum;
  o.conns_per_peer = cfg.lnet.conns_per_peer;
  for (const NetConfig& n : cfg.nets) o.ports[n.nid] = n.port;
  o.routes = cfg.routes;
  o.routing = cfg.lnet.routing;
  o.router_buffers = {cfg.lnet.tiny_router_buffers, cfg.lnet.small_router_buffers,
                      cfg.lnet.large_router_buffers};
  o.peer_buffer_credits = cfg.lnet.peer_buffer_credits;
  o.forward_timeout = o.transaction_timeout / (cfg.lnet.retry_count + 1);
  o.router_ping_interval = std::chrono::seconds(cfg.lnet.router_ping_interval);
  o.router_ping_timeout = std::chrono::seconds(cfg.lnet.router_ping_timeout);
  o.avoid_asym_router_failure = cfg.lnet.avoid_asym_router_failure;
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
  if (c) Connection::return_credit(c, high_water_);
}

// ---- construction ----

Net::Net(NetOptions opts, std::vector<Nid> local_nids, Clock& clock,
         TransportFactory make_transport)
    : opts_(std::move(opts)),
      credits_(opts_.credits),
      peer_credits_(opts_.peer_credits),
      high_water_(opts_.credit_high_water()),
      checksum_(opts_.checksum),
      conns_per_peer_(opts_.conns_per_peer),
      local_nids_(std::move(local_nids)),
      clock_(clock) {
  TimePoint now = clock_.now();
  int64_t wall = unix_ms(clock_.wall_now());
  std::vector<LocalNi*> nis;
  for (const Nid& n : local_nids_) {
    auto it = opts_.ports.find(n);
    auto ni = std::make_unique<LocalNi>(n, it == opts_.ports.end() ? 7988 : it->second, now, wall);
    ni->tx_credits = ni->min_credits = opts_.credits;
    nis.push_back(ni.get());
    nis_.push_back(std::move(ni));
  }
  table_ = std::make_unique<PeerTable>(nis, clock_);
  {
    MutexLock lk(routes_mu_);
    for (const RouteConfig& r : opts_.routes) (void)routes_.add(r, true);
  }
  if (opts_.routing)
    router_ = std::make_unique<RouterState>(opts_.router_buffers, opts_.peer_buffer_credits > 0
                                                                      ? opts_.peer_buffer_credits
                                                                      : opts_.peer_credits);
  transport_ = make_transport(*this);
}

Net::~Net() { shutdown(); }

Status Net::start() {
  for (auto& ni : nis_) {
    Status s = transport_->listen(ni->nid, ni->port);
    if (!s.ok()) return s;
    PFS_LOG_INFO("NI {} up (port {}, credits {}, peer_credits {})", ni->nid.to_string(), ni->port,
                 credits(), peer_credits());
  }
  return Status::Ok();
}

void Net::shutdown() {
  if (shut_.exchange(true)) return;
  transport_->stop();
  std::vector<TxMsg*> dead;
  for (auto& ni : nis_) {
    std::vector<Path*> paths = table_->ni_paths(*ni);
    MutexLock lk(ni->mu);
    for (Path* p : paths) {
      for (TxMsg* m : take_queued_locked(*p)) dead.push_back(m);
      p->tx_conn.reset();
      p->tx_state = nullptr;
      p->bulk.clear();
      // A connection's close after this changes nothing.
      for (auto& c : p->conns)
        if (auto cs = conn_state(*c)) cs->closed.store(true, std::memory_order_release);
      p->conns.clear();
    }
    ni->blocked.clear();
  }
  for (TxMsg* m : dead) fail(m, Status(Code::kCancelled, "shutting down"));
  if (router_) {  // frames waiting for a router buffer: dropped, their credits let go
    std::vector<std::unique_ptr<Forward>> waiting;
    {
      MutexLock lk(router_->mu);
      waiting = router_->buffers.take_waiting();
    }
    for (const auto& fw : waiting) router_->held_bytes.fetch_sub(int64_t(fw->bytes));
  }
}

Net::LocalNi* Net::local_ni(const Nid& nid) const {
  for (auto& ni : nis_)
    if (ni->nid == nid) return ni.get();
  return nullptr;
}

Net::ConnState* Net::conn_state(const Connection& c) const {
  auto* cs = static_cast<ConnState*>(c.upper().get());
  return cs && !cs->closed.load(std::memory_order_acquire) ? cs : nullptr;
}

// ---- health ----

void Net::lower(Health& h, PeerNi* pni) {
  if (!h.lower(opts_.health_sensitivity, clock_.now(), unix_ms(clock_.wall_now())) || !pni) return;
  MutexLock lk(recovery_mu_);
  if (!pni->recovering) {
    pni->recovering = true;
    recovering_.push_back(pni);
  }
}

void Net::raise(Health& h) {
  if (h.healthy()) return;  // the common case: no clock read, no lock
  h.raise(opts_.health_sensitivity, clock_.now(), unix_ms(clock_.wall_now()));
}

// ---- selection ----

Net::Path* Net::select(const PeerNi& dst) {
  thread_local std::vector<Path*> paths;  // no allocation per send
  table_->peer_paths(dst, &paths);
  // One path (one rail): nothing to compare, and no NI lock taken twice per send.
  if (paths.size() == 1) return paths[0]->ni->up.load() ? paths[0] : nullptr;
  Path* best = nullptr;
  int best_nh = -1, best_ph = -1, best_kind = -1;
  int64_t best_avail = 0;
  uint64_t max_used = 0;
  for (Path* p : paths) {
    LocalNi* ni = p->ni;
    if (!ni->up.load()) continue;
    int nh = ni->health.selection_value(), ph = p->pni->health.selection_value();
    int kind = ni->nid.is_verbs() ? 1 : 0;  // RDMA before sockets, at equal health
    int64_t avail;
    {
      MutexLock lk(ni->mu);
      int64_t window = p->tx_state ? p->tx_state->tx_credits : peer_credits();
      avail = std::min(ni->tx_credits, window) -
              static_cast<int64_t>(p->queue.size() + p->bulk_queue.size());
    }
    uint64_t used = p->last_used.load(std::memory_order_relaxed);
    max_used = std::max(max_used, used);
    // Lexicographic: local NI health, peer NI health, kind, credits, least recently used.
    auto key = std::make_tuple(nh, ph, kind, avail);
    auto best_key = std::make_tuple(best_nh, best_ph, best_kind, best_avail);
    bool better = !best || key > best_key ||
                  (key == best_key && used < best->last_used.load(std::memory_order_relaxed));
    if (better) {
      best = p;
      best_nh = nh;
      best_ph = ph;
      best_kind = kind;
      best_avail = avail;
    }
  }
  // Round-robin: the chosen path goes behind every other candidate.
  if (best) best->last_used.store(max_used + 1, std::memory_order_relaxed);
  return best;
}

Connection::Here Net::receive_here(const Nid& dst, const std::atomic<bool>& done, Duration max_wait,
                                   int wake_fd) {
  if (shut_.load()) return Connection::Here::kNo;
  PeerNi* pni = table_->find(dst);
  if (!pni) return Connection::Here::kNo;
  thread_local std::vector<Path*> paths;
  table_->peer_paths(*pni, &paths);
  if (paths.size() != 1) return Connection::Here::kNo;
  ConnectionPtr c;
  {
    MutexLock lk(paths[0]->ni->mu);
    c = paths[0]->tx_conn;
  }
  return c ? c->receive_here(done, max_wait, wake_fd) : Connection::Here::kNo;
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

  PeerNi* dpni = table_->get(dst);
  Path* p = nullptr;
  Status err;
  if (via_local) {
    LocalNi* ni = local_ni(*via_local);
    if (ni && same_net(ni->nid, *via_peer) && (ni->up.load() || strict))
      p = table_->path(*ni, *table_->get(*via_peer));
    // Pinned to a peer on no network of this node's: through a router, from that NI.
    if (strict && !p && !(ni && routed(*via_peer)))
      err = Status(Code::kInvalidArgument,
                   "no path " + via_local->to_string() + " -> " + via_peer->to_string());
  }
  if (err.ok() && dpni->dead.load() && !strict) {
    MutexLock lk(dead_mu_);
    err = Status(Code::kPeerDead, dead_why_[dpni->nid]);
  }
  if (err.ok() && !p) p = select(*dpni);
  bool via_router = false;
  if (err.ok() && !p) {
    // A path exists exactly where a local NI shares the network; elsewhere a router's.
    if (!table_->peer_reachable(*dpni)) {
      p = gateway_path(dst, &err);
      via_router = p != nullptr;
    } else {
      err = Status(Code::kUnreachable,
                   "every local NI on the networks of " + dst.to_string() + " is down",
                   HealthKind::kLocalNiDown);
    }
  }
  if (err.ok() && strict && !p->ni->up.load()) {
    m->path = p;
    err = Status(Code::kUnreachable, "local NI " + p->ni->nid.to_string() + " is down",
                 HealthKind::kLocalNiDown);
  }
  if (!err.ok()) {
    fail(m, err);
    return;
  }
  m->path = p;
  OutFrame& fr = *m->frame;
  fr.hdr.src_nid = p->ni->nid;
  fr.hdr.dst_nid = p->pni->nid;
  m->routed = via_router;
  if (via_router) m->route_dst = dst;
  if (via_router && !fr.hdr.ext.routed) {  // its own: the two ends travel with it
    if (Status s = check_routes_to(*p); !s.ok()) {
      fail(m, s);
      return;
    }
    fr.hdr.ext.routed = true;
    fr.hdr.ext.hops = 0;
    fr.hdr.ext.route_src = via_local && local_ni(*via_local) ? *via_local : p->ni->nid;
    fr.hdr.ext.route_dst = dst;
    sent_routed_.fetch_add(1, std::memory_order_relaxed);
  }
  if (checksum_.load(std::memory_order_relaxed) && !(fr.hdr.flags & kFlagDataCrc) &&
      (fr.hdr.kind == FrameKind::kRequest || fr.hdr.kind == FrameKind::kReply)) {
    le::put<uint32_t>(fr.seal,
                      fr.bulk_crc ? data_crc_joined(fr.payload.span(), *fr.bulk_crc, fr.bulk_size())
                                  : data_crc(fr.payload.span(), bulk_span(fr)));
    fr.sealed = true;
    fr.hdr.flags |= kFlagDataCrc;
    m->bytes += kDataCrcSize;
  }
  if (!faults_.empty()) {
    TimePoint now = clock_.now();
    auto cv = faults_.judge(FaultRule::Action::kCorrupt, p->ni->nid, p->pni->nid, fr.hdr.msg_type,
                            fr.hdr.kind == FrameKind::kReply, now);
    p->ni->counters.faults.fetch_add(cv.injected);
    p->pni->counters.faults.fetch_add(cv.injected);
    if (cv.kind == FaultInjector::Verdict::Kind::kCorrupt) damage(fr);
    auto v = faults_.judge(FaultRule::Action::kDrop, p->ni->nid, p->pni->nid,
                           m->frame->hdr.msg_type, m->frame->hdr.kind == FrameKind::kReply, now);
    p->ni->counters.faults.fetch_add(v.injected);
    p->pni->counters.faults.fetch_add(v.injected);
    if (v.kind == FaultInjector::Verdict::Kind::kDrop) {
      p->ni->counters.drops.fetch_add(1);
      {
        MutexLock lk(p->ni->mu);
        if (!p->tx_conn) start_connect_locked(*p);  // faults take messages, not connections
      }
      if (!v.error.ok()) {
        fail(m, v.error);
      } else {  // a black hole: the send completes, no reply will come
        m->frame.reset();
        m->on_tx_done(Status::Ok(), TxTimes{now, now});
      }
      return;
    }
  }
  Out out;
  Status refused;
  {
    MutexLock lk(p->ni->mu);
    if (!p->tx_conn) refused = backoff_locked(*p, *m);  // connected: nothing to wait for
    if (refused.ok()) enqueue_locked(*p, m, &out);
  }
  if (!refused.ok()) {
    fail(m, refused);
    return;
  }
  transmit(out);
}

Status Net::backoff_locked(Path& p, const TxMsg& m) {
  if (p.reconnect_at == TimePoint{}) return Status::Ok();  // no clock read: never failed
  TimePoint now = clock_.now();
  if (!p.backing_off(now)) return Status::Ok();
  if (m.deadline > p.reconnect_at) {  // it waits for the next attempt
    p.ni->counters.reconnect_waits.fetch_add(1, std::memory_order_relaxed);
    p.pni->counters.reconnect_waits.fetch_add(1, std::memory_order_relaxed);
    return Status::Ok();
  }
  // The next attempt comes after its deadline: it fails now, with the connect's error, as
  // socklnd fails a send to a peer whose connect backs off (EHOSTUNREACH).
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(p.reconnect_at - now).count();
  return Status(Code::kUnreachable,
                "connect " + p.ni->nid.to_string() + " -> " + p.pni->nid.to_string() + " failed (" +
                    p.reconnect_why + "); the next attempt, in " + std::to_string(ms) +
                    " ms, comes after this send's deadline",
                p.reconnect_kind);
}

TimePoint Net::connect_due(const Nid& dst, TimePoint now) {
  PeerNi* pni = table_->find(dst);
  if (!pni) return now;
  thread_local std::vector<Path*> paths;
  table_->peer_paths(*pni, &paths);
  TimePoint due = TimePoint::max();
  for (Path* p : paths) {
    if (!p->ni->up.load()) continue;
    MutexLock lk(p->ni->mu);
    if (!p->backing_off(now)) return now;
    due = std::min(due, p->reconnect_at);
  }
  return due == TimePoint::max() ? now : due;  // no NI up: the send's own error says so
}

SendWait Net::send_wait(const Nid& dst, TimePoint now) {
  SendWait out;
  PeerNi* pni = table_->find(dst);
  if (!pni) return out;
  std::vector<Path*> paths;
  table_->peer_paths(*pni, &paths);
  for (Path* p : paths) {
    LocalNi* ni = p->ni;
    if (!ni->up.load()) continue;
    const std::string link = ni->nid.to_string() + " -> " + p->pni->nid.to_string();
    std::string why;
    SendWait::Kind kind = SendWait::Kind::kConnect;
    {
      MutexLock lk(ni->mu);
      const size_t queued = p->queue.size() + p->bulk_queue.size();
      if (queued == 0) continue;
      if (p->backing_off(now)) {
        why = fmt::format("reconnect {} backs off {:.1f} s more after: {}", link,
                          std::chrono::duration<double>(p->next_connect() - now).count(),
                          p->last_connect_error());
      } else if (!p->tx_conn) {
        why = "connecting " + link;
      } else if (p->blocked_on_ni || ni->tx_credits <= 0) {
        kind = SendWait::Kind::kCredits;
        why = "waiting for a credit of local NI " + ni->nid.to_string() + " (lnet.credits " +
              std::to_string(credits()) + ", all held)";
      } else if (p->tx_state && p->tx_state->tx_credits <= 0) {
        kind = SendWait::Kind::kCredits;
        why = "waiting for peer_credits on " + link + " (" +
              std::to_string(p->tx_state->outstanding) + " sent, none credited back yet; " +
              "lnet.peer_credits " + std::to_string(peer_credits()) + ")";
      } else {
        kind = SendWait::Kind::kWrite;
        why = std::to_string(queued) + " message(s) queued on " + link;
      }
    }
    out.kind = std::max(out.kind, kind);
    out.text += (out.text.empty() ? "" : "; ") + why;
  }
  return out;
}

ReplyWait::Kind reply_wait_kind(uint64_t lost, uint64_t retransmitting, uint64_t unacked,
                                uint64_t notsent, bool closed_window, uint32_t srtt_us,
                                uint32_t min_rtt_us) {
  if (lost || retransmitting) return ReplyWait::Kind::kLosing;
  if (closed_window) return ReplyWait::Kind::kStalled;
  // Health's judgement of a queue (2 ms and a quarter above the lowest RTT).
  if (unacked && queue_stands(srtt_us / 1000.0, min_rtt_us / 1000.0, -1))
    return ReplyWait::Kind::kQueue;
  if (unacked || notsent) return ReplyWait::Kind::kUnacked;
  return ReplyWait::Kind::kDelivered;
}

ReplyWait Net::reply_wait(const Nid& dst) {
  ReplyWait out;
  PeerNi* pni = table_->find(dst);
  if (!pni) return out;
  std::vector<Path*> paths;
  table_->peer_paths(*pni, &paths);
  bool any = false, all_acked = true;
  for (Path* p : paths) {
    std::vector<ConnectionPtr> conns;
    {
      MutexLock lk(p->ni->mu);
      conns = p->conns;
    }
    if (conns.empty()) continue;
    uint64_t lost = 0, retrans = 0, unacked = 0, notsent = 0;
    bool closed_window = false;
    std::optional<TcpKernelInfo> busiest;
    for (const ConnectionPtr& c : conns) {  // outside the lock: a system call each
      std::optional<TcpKernelInfo> k = c->kernel_tcp_info(false);
      if (!k) continue;
      lost += k->lost;
      retrans += k->retransmitting;
      unacked += k->unacked;
      notsent += k->notsent_bytes;
      closed_window |= k->snd_wnd == 0 && k->notsent_bytes > 0;
      if (!busiest || k->bytes_sent > busiest->bytes_sent) busiest = k;
    }
    if (!busiest) continue;
    any = true;
    auto us = [](uint32_t v) {
      return v >= 1000 ? fmt::format("{:.1f} ms", v / 1000.0) : fmt::format("{} us", v);
    };
    const std::string rtt = "srtt " + us(busiest->rtt_us) + ", lowest " + us(busiest->min_rtt_us);
    const ReplyWait::Kind kind = reply_wait_kind(lost, retrans, unacked, notsent, closed_window,
                                                 busiest->rtt_us, busiest->min_rtt_us);
    std::string what;
    switch (kind) {
      case ReplyWait::Kind::kLosing:
        what = fmt::format("{} segment(s) lost, {} retransmitting, {} unacknowledged", lost,
                           retrans, unacked);
        break;
      case ReplyWait::Kind::kStalled:
        what = fmt::format("the peer's window is closed, {} B unsent: it is not reading", notsent);
        break;
      case ReplyWait::Kind::kQueue:
        what = fmt::format("{} segment(s) unacknowledged behind a queue standing on the path",
                           unacked);
        break;
      case ReplyWait::Kind::kUnacked:
        what = fmt::format("{} segment(s) unacknowledged, {} B unsent", unacked, notsent);
        break;
      case ReplyWait::Kind::kDelivered:
      case ReplyWait::Kind::kNone:
        what = "every byte written acknowledged";
        break;
    }
    all_acked &= kind == ReplyWait::Kind::kDelivered;
    if (kind != ReplyWait::Kind::kDelivered) out.kind = std::max(out.kind, kind);
    out.text += (out.text.empty() ? "" : "; ") + std::string("TCP on ") + p->ni->nid.to_string() +
                " -> " + p->pni->nid.to_string() + ": " + what + " (" + rtt + ")";
  }
  // Delivered only when every connection to it says so (the request went on one of them).
  if (any && all_acked) out.kind = ReplyWait::Kind::kDelivered;
  return out;
}

void Net::back_off_locked(Path& p, TimePoint now, const Status& why) {
  p.reconnect_interval = p.reconnect_interval.count() == 0
                             ? opts_.min_reconnect
                             : std::min<Duration>(opts_.max_reconnect, p.reconnect_interval * 2);
  // Jittered to 50-100% of the interval, so clients of a server that went away do not all
  // come back at once: a hash of the path and the time (splitmix64's finalizer), which
  // differs from client to client and failure to failure, and repeats on a manual clock.
  uint64_t r = nid_seed(p.ni->nid) * 0x9e3779b97f4a7c15ull ^ nid_seed(p.pni->nid) ^
               static_cast<uint64_t>(now.time_since_epoch().count());
  r = (r ^ (r >> 30)) * 0xbf58476d1ce4e5b9ull;
  r = (r ^ (r >> 27)) * 0x94d049bb133111ebull;
  r ^= r >> 31;
  int64_t n = p.reconnect_interval.count();
  p.reconnect_at = now + Duration(n / 2 + static_cast<int64_t>(r % uint64_t(n / 2 + 1)));
  p.reconnect_why = why.message().substr(0, 200);
  p.reconnect_kind = why.health_kind() == HealthKind::kPeerNiUnreachable
                         ? HealthKind::kPeerNiUnreachable
                         : HealthKind::kPeerNiConnectError;
}

void Net::enqueue_locked(Path& p, TxMsg* m, Out* out) {
  if (to_bulk_locked(p, *m)) {
    p.bulk_queue.push_back(m);
    drain_locked(p, out);
    return;
  }
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

bool Net::to_bulk_locked(Path& p, const TxMsg& m) {
  if (m.bytes < kBulkConnMinBytes || m.frame->one_stream || !p.tx_conn) return false;
  // The peer's bulk connections serve this end too, whatever its own conns_per_peer.
  open_bulk_locked(p);
  return !p.bulk.empty();
}

void Net::open_bulk_locked(Path& p) {
  int64_t want = conns_per_peer();
  if (want <= 1 || !transport_->has_bulk_connections(p.ni->nid)) return;
  TimePoint now = clock_.now();
  while (static_cast<int64_t>(p.bulk.size()) + p.bulk_connecting < want && now >= p.bulk_retry &&
         !shut_.load() && p.ni->up.load()) {
    ++p.bulk_connecting;
    Path* pp = &p;
    // The transport calls back later, on an I/O thread (never inside connect_bulk()).
    transport_->connect_bulk(
        p.ni->nid, p.pni->nid, p.ni->port,
        [this, pp](Result<ConnectionPtr> r) { on_bulk_connect_result(pp, std::move(r)); });
  }
}

void Net::set_conns_per_peer(int64_t n) {
  conns_per_peer_.store(n, std::memory_order_relaxed);
  // Only paths this end connected: the other end's own raise opens the other ones (both
  // ends opening at once would double the streams, each cold), and a node that only
  // accepted -- a server -- opens its own as its first large message finds none.
  for (Path* p : table_->all_paths()) {
    MutexLock lk(p->ni->mu);
    if (p->tx_conn && p->tx_conn->outgoing()) open_bulk_locked(*p);
  }
}

void Net::on_bulk_connect_result(Path* p, Result<ConnectionPtr> r) {
  Out out;
  {
    MutexLock lk(p->ni->mu);
    --p->bulk_connecting;
    if (!r.ok()) {
      // Large messages keep the first connection; no new try for a while.
      p->bulk_retry = clock_.now() + std::chrono::seconds(10);
      PFS_LOG_WARN_LIMITED(
          "bulk connect " + p->ni->nid.to_string() + " -> " + p->pni->nid.to_string(),
          "bulk connection {} -> {} failed: {}; large messages go on the first "
          "connection",
          p->ni->nid.to_string(), p->pni->nid.to_string(), r.status().message());
    }
    drain_locked(*p, &out);
  }
  transmit(out);
}

std::vector<Net::TxMsg*> Net::take_queued_locked(Path& p) {
  std::vector<TxMsg*> v(p.queue.begin(), p.queue.end());
  v.insert(v.end(), p.bulk_queue.begin(), p.bulk_queue.end());
  p.queue.clear();
  p.bulk_queue.clear();
  return v;
}

void Net::hand_over_locked(Path& p, const std::shared_ptr<ConnState>& state, ConnectionPtr conn,
                           TxMsg* m, Out* out) {
  LocalNi& ni = *p.ni;
  ConnState* cs = state.get();
  --cs->tx_credits;
  ++cs->outstanding;
  if (cs->tx_credits == 0)
    m->frame->hdr.flags |= kFlagWindowEmpty;
  else
    m->frame->hdr.flags &= static_cast<uint8_t>(~kFlagWindowEmpty);
  --ni.tx_credits;
  int64_t low = p.pni->min_credits.load(std::memory_order_relaxed);
  if (cs->tx_credits < low) p.pni->min_credits.store(cs->tx_credits, std::memory_order_relaxed);
  if (ni.tx_credits < ni.min_credits) ni.min_credits = ni.tx_credits;
  {
    MutexLock tl(cs->tx_mu);
    m->cs = state;
    m->conn_id = cs->conn_id;
    m->prev = nullptr;
    m->next = cs->head;
    if (cs->head) cs->head->prev = m;
    cs->head = m;
  }
  out->emplace_back(std::move(conn), m);
}

bool Net::ni_credit_locked(Path& p) {
  if (p.ni->tx_credits > 0) return true;
  if (!p.blocked_on_ni) {
    p.ni->blocked.push_back(&p);
    p.blocked_on_ni = true;
  }
  return false;
}

void Net::drain_locked(Path& p, Out* out) {
  while (!p.queue.empty() && p.tx_state && p.tx_state->tx_credits > 0) {
    if (!ni_credit_locked(p)) return;
    TxMsg* m = p.queue.front();
    p.queue.pop_front();
    hand_over_locked(p, p.tx_state, p.tx_conn, m, out);
  }
  if (!p.bulk_queue.empty() && p.bulk.empty()) {
    // No bulk connection left: the first one carries them.
    p.queue.insert(p.queue.end(), p.bulk_queue.begin(), p.bulk_queue.end());
    p.bulk_queue.clear();
    if (!p.tx_conn) start_connect_locked(p);
    drain_locked(p, out);
    return;
  }
  while (!p.bulk_queue.empty()) {
    // The bulk connection with the most window left, then the fewest unfinished.
    std::shared_ptr<ConnState> best;
    for (const auto& cs : p.bulk)
      if (cs->tx_credits > 0 &&
          (!best || cs->tx_credits > best->tx_credits ||
           (cs->tx_credits == best->tx_credits && cs->outstanding < best->outstanding)))
        best = cs;
    if (!best) return;
    if (!ni_credit_locked(p)) return;
    ConnectionPtr conn = best->conn.lock();
    if (!conn) return;  // closing: on_closed takes it out and drains again
    TxMsg* m = p.bulk_queue.front();
    p.bulk_queue.pop_front();
    hand_over_locked(p, best, std::move(conn), m, out);
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
  out.take_each([](Connection& conn, TxMsg* m) {
    // A routed frame only where both ends speak routing (send checks an open connection
    // first; one that opened meanwhile is closed, failing it, and the gateway with it).
    if (m->frame->hdr.ext.routed && !(conn.wire().features & kFeatureRouting))
      conn.close(Status(Code::kProtocol, "gateway " + conn.peer_nid().to_string() +
                                             " does not speak routing (its release is older)"));
    conn.send(std::move(m->frame));
  });
}

Status Net::check_routes_to(Path& p) {
  MutexLock lk(p.ni->mu);
  if (!p.tx_conn || (p.tx_conn->wire().features & kFeatureRouting)) return Status::Ok();
  return Status(Code::kUnreachable,
                "gateway " + p.pni->nid.to_string() +
                    " cannot route: its connection does not speak routing (wire version " +
                    std::to_string(p.tx_conn->wire().version) + ", release " +
                    (p.tx_conn->wire().peer_release.empty() ? std::string("unknown")
                                                            : p.tx_conn->wire().peer_release) +
                    ")",
                HealthKind::kPeerNiUnreachable);
}

void Net::start_connect_locked(Path& p) {
  if (p.connecting || shut_.load() || !p.ni->up.load()) return;
  if (p.reconnect_at != TimePoint{} && clock_.now() < p.reconnect_at) return;  // expire() does
  p.connecting = true;
  p.ni->counters.connects.fetch_add(1, std::memory_order_relaxed);
  p.pni->counters.connects.fetch_add(1, std::memory_order_relaxed);
  Path* pp = &p;
  // The transport calls back later, on an I/O thread (never inside connect()).
  transport_->connect(p.ni->nid, p.pni->nid, p.ni->port,
                      [this, pp](Result<ConnectionPtr> r) { on_connect_result(pp, std::move(r)); });
}

void Net::on_connect_result(Path* p, Result<ConnectionPtr> r) {
  Failed failed;
  Out out;
  {
    MutexLock lk(p->ni->mu);
    p->connecting = false;
    if (!r.ok()) {
      p->ni->counters.connect_failures.fetch_add(1, std::memory_order_relaxed);
      p->pni->counters.connect_failures.fetch_add(1, std::memory_order_relaxed);
      back_off_locked(*p, clock_.now(), r.status());
      // What is queued fails now, with this connect's error, so that its sender may try
      // another path (LNet's resend on a healthier NI); sent again here, or anything sent
      // meanwhile, it waits for the next attempt when that comes within its deadline.
      if (!p->tx_conn) {
        for (TxMsg* m : take_queued_locked(*p)) failed.emplace_back(m, r.status());
      }
    } else {
      // The backoff was reset by on_connected, which every transport reports first. As
      // socklnd opens every connection of a peer at once: the bulk connections are up
      // (and past their handshakes) before the first bulk message wants one.
      open_bulk_locked(*p);
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

void Net::finish_failures(Failed& failed) {
  for (auto& [m, s] : failed) fail(m, s);
  failed.clear();
}

void Net::TxMsg::on_tx_done(const Status& s, const TxTimes& t) {
  bool was_expired = false;
  if (cs) {
    {
      MutexLock tl(cs->tx_mu);
      if (prev) prev->next = next;
      if (next) next->prev = prev;
      if (cs->head == this) cs->head = next;
      was_expired = expired;
    }
    cs.reset();
  }
  TxTimes tt = t;
  tt.conn_id = conn_id;
  tt.routed = routed;
  tt.route_dst = route_dst;
  Status st = s;
  if (path) {
    tt.local_nid = path->ni->nid;
    tt.peer_nid = path->pni->nid;
    LocalNi& ni = *path->ni;
    PeerNi& pni = *path->pni;
    if (s.ok()) {
      ni.counters.send_count.fetch_add(1, std::memory_order_relaxed);
      ni.counters.send_bytes.fetch_add(bytes, std::memory_order_relaxed);
      pni.counters.send_count.fetch_add(1, std::memory_order_relaxed);
      pni.counters.send_bytes.fetch_add(bytes, std::memory_order_relaxed);
      path->send_count.fetch_add(1, std::memory_order_relaxed);
      path->send_bytes.fetch_add(bytes, std::memory_order_relaxed);
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
          if (is_local_kind(k))
            net->lower(ni.health, nullptr);
          else
            net->lower(pni.health, &pni);
        }
      }
    }
  }
  if (user) user->on_tx_done(st, tt);
  delete this;
}

void Net::set_credits(int64_t credits, int64_t peer_credits) {
  Out out;
  int64_t dc = credits - credits_.exchange(credits);
  const int64_t before = peer_credits_.exchange(peer_credits);
  NetOptions o;
  o.peer_credits = peer_credits;
  uint32_t hw = o.credit_high_water();
  high_water_.store(hw);
  std::vector<ConnectionPtr> regrant;  // granted a window: told the new one
  for (auto& ni : nis_) {
    std::vector<Path*> paths = table_->ni_paths(*ni);
    MutexLock lk(ni->mu);
    ni->tx_credits += dc;
    for (Path* p : paths) {
      for (auto& c : p->conns) {
        if (auto cs = conn_state(*c))
          cs->tx_credits += cs->window(peer_credits) - cs->window(before);
        if (peer_credits != before && (c->wire().features & kFeatureWindow) && rx_window())
          regrant.push_back(c);
      }
      set_high_water_locked(*p);
    }
    for (Path* p : paths) drain_locked(*p, &out);
    drain_ni_locked(*ni, &out);
  }
  for (const ConnectionPtr& c : regrant) grant_window(c, static_cast<uint32_t>(peer_credits));
  PFS_LOG_INFO("credits now {} per NI, peer_credits {} per connection", credits, peer_credits);
  transmit(out);
}

// ---- faults ----

TimePoint Net::fault_hold(const Connection& c, const OutFrame& f) {
  if (faults_.empty() || f.hdr.kind == FrameKind::kCredit) return TimePoint{};
  auto v = faults_.judge(FaultRule::Action::kDelay, c.local_nid(), c.peer_nid(), f.hdr.msg_type,
                         f.hdr.kind == FrameKind::kReply, clock_.now());
  if (v.kind != FaultInjector::Verdict::Kind::kDelay) return TimePoint{};
  if (Path* p = table_->find_path(c.local_nid(), c.peer_nid())) {
    p->ni->counters.faults.fetch_add(v.injected);
    p->pni->counters.faults.fetch_add(v.injected);
  }
  return v.hold_until;
}

uint64_t Net::add_fault(FaultRule rule) { return faults_.add(std::move(rule)); }
bool Net::del_fault(uint64_t id) { return faults_.del(id); }
std::vector<FaultRule> Net::faults() const { return faults_.rules(); }

}  // namespace pfsnet
