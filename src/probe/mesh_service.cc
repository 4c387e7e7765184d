#include "probe/mesh_service.h"

#include <algorithm>

#include "base/log.h"
#include "membership/methods.h"
#include "net/net_internal.h"  // same_net
#include "rpc/ping.h"
#include "transport/link_monitor.h"

namespace pfsnet {

namespace {

Duration seconds(double s) {
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(s));
}

// Where in [0, period) the probes of path `k` fall: spread by a hash of the path.
Duration stagger(const std::pair<Nid, Nid>& k, Duration period) {
  if (period <= Duration::zero()) return Duration::zero();
  uint64_t h =
      (nid_seed(k.first) * 0x9E3779B97F4A7C15ULL) ^ (nid_seed(k.second) * 0xC2B2AE3D27D4EB4FULL);
  h ^= h >> 29;
  return Duration(static_cast<int64_t>(h % static_cast<uint64_t>(period.count())));
}

double mib_s(size_t bytes, Duration t) {
  double s = std::chrono::duration<double>(t).count();
  return s > 0 ? double(bytes) / double(1 << 20) / s : 0;
}

// The MTU of the interface that holds `nid`'s address (0: not this host's, or not known).
uint32_t mtu_at(const Nid& nid) {
  auto ifn = LinkMonitor::interface_of(nid);
  if (!ifn.ok()) return 0;
  auto mtu = LinkMonitor::mtu_of(*ifn);
  return mtu.ok() ? *mtu : 0;
}

}  // namespace

MeshLinkEnd mesh_link_end(const Nid& local, const Nid& peer) {
  MeshLinkEnd e;
  auto ifn = LinkMonitor::interface_of(local);
  if (!ifn.ok()) return e;
  auto mtu = LinkMonitor::mtu_of(*ifn);
  if (mtu.ok()) e.mtu = *mtu;
  auto route = LinkMonitor::route_to(peer, local);
  e.on_link = route.ok() && route->ifname == *ifn && route->gateway.empty();
  return e;
}

MeshNiNow mesh_ni_now(const Nid& nid, uint32_t configured_mbit, uint64_t own_tx, uint64_t own_rx) {
  MeshNiNow n;
  n.speed_mbit = configured_mbit;
  n.tx_bytes = own_tx;
  n.rx_bytes = own_rx;
  auto ifn = LinkMonitor::interface_of(nid);
  if (!ifn.ok()) return n;
  if (n.speed_mbit == 0) {
    auto speed = LinkMonitor::speed_of(*ifn);
    if (speed.ok()) n.speed_mbit = *speed;
  }
  auto lo = LinkMonitor::is_loopback(*ifn);
  if (!lo.ok() || *lo) return n;
  auto c = LinkMonitor::counters_of(*ifn);
  if (c.ok()) {
    n.tx_bytes = c->tx_bytes;
    n.rx_bytes = c->rx_bytes;
  }
  return n;
}

void serve_mesh_probe(RpcEngine& engine, size_t max_bulk) {
  auto pattern = std::make_shared<PingPattern>(max_bulk);
  engine.handle(
      kMsgMeshProbe,
      [pattern, max_bulk](RpcRequest& req) {
        RpcResponse r;
        if (auto probed = decode_mesh_mtu_ask(req.payload.span()))  // a small probe
          r.payload = encode_mesh_mtu_answer(mtu_at(*probed));
        else if (!req.payload.empty())
          read_reply(req, *pattern, max_bulk, &r);
        return r;  // or a write: its bulk is dropped
      },
      HandlerMode::kInline, Execution::kRepeatable);
}

MeshOptions MeshOptions::from(const Config& cfg) {
  MeshOptions o;
  o.enabled = cfg.mesh.enabled;
  o.name = cfg.node.name;
  o.peers = static_cast<size_t>(cfg.mesh.peers);
  o.interval = seconds(cfg.mesh.interval);
  o.bulk_interval = seconds(cfg.mesh.bulk_interval);
  o.bulk_bytes = static_cast<size_t>(cfg.mesh.bulk_bytes);
  o.rotate_interval_s = cfg.mesh.rotate_interval;
  o.report_interval = seconds(cfg.mesh.report_interval);
  o.mgs_sync_rate = static_cast<double>(cfg.mesh.mgs_sync_rate);
  o.window = std::chrono::seconds(cfg.mesh.window);
  o.probe_timeout = RpcOptions::from(cfg).attempt_timeout();
  o.max_bulk = static_cast<size_t>(cfg.max_bulk());
  for (const NetConfig& n : cfg.nets)
    if (n.speed_mbit > 0) o.speeds_mbit[n.nid] = static_cast<uint32_t>(n.speed_mbit);
  return o;
}

MeshService::MeshService(MeshOptions o, Net& net, RpcEngine& rpc, RpcStats* stats,
                         MembershipService& membership, Clock& clock)
    : opts_(std::move(o)),
      net_(net),
      rpc_(rpc),
      stats_(stats),
      membership_(membership),
      clock_(clock),
      write_bulk_(make_bulk(make_ping_pattern(opts_.bulk_bytes))) {
  serve_mesh_probe(rpc_, opts_.max_bulk);
  if (membership_.is_mgs()) {
    MutexLock lk(mu_);
    mgs_ = std::make_unique<MeshMgsCore>(opts_.peers, opts_.rotate_interval_s,
                                         opts_.report_interval, opts_.mgs_sync_rate);
    serve(rpc_, kMeshSyncRpc, [this](MeshSyncReq&& q, RpcRequest& r) -> Result<MeshSyncRep> {
      Result<MeshSyncRep> rep = [&] {
        MutexLock lk(mu_);
        return sync_locked(std::move(q), clock_.now());
      }();
      if (rep.ok() && !net_.takes_large_nids(r.from)) for_version1(&*rep);
      return rep;
    });
    serve(rpc_, kMeshMatrixRpc, [this](PageReq&& q, RpcRequest& r) -> Result<MeshMatrix> {
      Result<MeshMatrix> m = matrix_page(q);
      if (m.ok() && !net_.takes_large_nids(r.from)) for_version1(&*m);
      return m;
    });
  }
}

MeshService::~MeshService() { stop(); }

Status MeshService::start(TimerQueue& queue) {
  if (!opts_.enabled) return Status::Ok();
  ticker_.start(queue, clock_, std::chrono::milliseconds(100),
                [this](TimePoint now) { tick(now); });
  rpc_.set_path_view([this](const Nid& local, const Nid& peer) { return path_view(local, peer); });
  return Status::Ok();
}

void MeshService::stop() {
  rpc_.set_path_view(nullptr);  // waits for a look under way
  ticker_.stop();
}

void MeshService::tick(TimePoint now) {
  if (!opts_.enabled) return;
  if (membership_.leads()) refresh_nodes(now);
  struct Due {
    PathKey key;
    Nid local, peer;
    bool small, bulk;
  };
  std::vector<Due> due;
  bool sync = false;
  {
    MutexLock lk(mu_);
    for (auto& [k, p] : paths_) {
      Due d{k, p.local, p.peer, false, false};
      if (!p.small_out && now >= p.next_small) {
        p.small_out = d.small = true;
        p.next_small = std::max(p.next_small + opts_.interval, now);
      }
      if (opts_.bulk_interval > Duration::zero() && opts_.bulk_bytes > 0 && !p.bulk_out &&
          now >= p.next_bulk) {
        p.bulk_out = d.bulk = true;
        p.next_bulk = std::max(p.next_bulk + opts_.bulk_interval, now);
      }
      if (d.small || d.bulk) due.push_back(d);
    }
    if (!sync_out_ && now >= next_sync_) sync = sync_out_ = true;
  }
  for (const Due& d : due) {
    if (d.small) {
      // The local end as it is now (a link's MTU may change at any time), looked up on this
      // thread: a few system calls per small probe.
      MeshLinkEnd e = mesh_link_end(d.local, d.peer);
      if (!same_net(d.local, d.peer)) e.on_link = false;  // routed: no one link to judge
      {
        MutexLock lk(mu_);
        auto it = paths_.find(d.key);
        if (it != paths_.end()) {
          it->second.local_mtu = e.mtu;
          it->second.on_link = e.on_link;
        }
      }
      probe_small(d.key, d.local, d.peer);
    }
    if (d.bulk) probe_bulk(d.key, d.local, d.peer);
  }
  sample_nis(now);
  if (sync) send_sync(now);
}

void MeshService::sample_nis(TimePoint now) {
  {
    MutexLock lk(mu_);
    if (now < next_ni_sample_) return;
    next_ni_sample_ = now + opts_.interval;
  }
  std::vector<std::pair<Nid, MeshNiNow>> seen;
  for (const NiInfo& i : net_.nis()) {
    auto it = opts_.speeds_mbit.find(i.nid);
    seen.emplace_back(i.nid, mesh_ni_now(i.nid, it == opts_.speeds_mbit.end() ? 0 : it->second,
                                         i.send_bytes, i.recv_bytes));
  }
  MutexLock lk(mu_);
  for (const auto& [nid, n] : seen) {
    NiState& st = nis_.try_emplace(nid, opts_.window).first->second;
    st.speed_mbit = n.speed_mbit;
    st.load.sample(now, n.tx_bytes, n.rx_bytes);
  }
}

void MeshService::probe_small(const PathKey& k, const Nid& local, const Nid& peer) {
  probes_.fetch_add(1);
  CallOptions o;
  o.timeout = opts_.probe_timeout;
  o.via = std::make_pair(local, peer);
  TimePoint sent = clock_.now();
  rpc_.call_async(
      peer, kMsgMeshProbe, encode_mesh_mtu_ask(peer), nullptr,
      [this, k, sent](RpcReply&& r) {
        TimePoint now = clock_.now();
        bool ok = r.status.ok();
        Duration rtt = ok ? r.round_trip() : now - sent;
        if (!ok) lost_.fetch_add(1);
        if (stats_)
          stats_->record_probe(k.first, k.second, ok ? ProbeStat::kRtt : ProbeStat::kLost,
                               rtt.count());
        MutexLock lk(mu_);
        auto it = paths_.find(k);
        if (it == paths_.end()) return;  // no longer a target
        it->second.small_out = false;
        if (ok) it->second.peer_mtu = decode_mesh_mtu_answer(r.payload.span());
        if (ok)
          it->second.window.rtt(now, std::chrono::duration<double, std::milli>(rtt).count());
        else
          it->second.window.lost(now);
      },
      o);
}

void MeshService::probe_bulk(const PathKey& k, const Nid& local, const Nid& peer) {
  probes_.fetch_add(2);
  bulk_bytes_.fetch_add(2 * opts_.bulk_bytes);
  CallOptions o;
  o.timeout = opts_.probe_timeout;
  o.via = std::make_pair(local, peer);
  TimePoint sent = clock_.now();
  // A write and a read at once (the two directions of a full-duplex link); the second to
  // end frees the path for the next pair.
  auto left = std::make_shared<std::atomic<int>>(2);
  auto done = [this, k, sent, left](bool write, RpcReply&& r) {
    TimePoint now = clock_.now();
    bool ok = r.status.ok() && (write || r.bulk.size() == opts_.bulk_bytes);
    Duration t = r.status.ok() ? r.round_trip() : now - sent;
    if (!ok) lost_.fetch_add(1);
    if (stats_)
      stats_->record_probe(k.first, k.second,
                           !ok     ? ProbeStat::kLost
                           : write ? ProbeStat::kWrite
                                   : ProbeStat::kRead,
                           t.count());
    MutexLock lk(mu_);
    auto it = paths_.find(k);
    if (it == paths_.end()) return;
    if (ok)
      it->second.window.bulk(now, write, mib_s(opts_.bulk_bytes, t));
    else
      it->second.window.lost(now);
    if (left->fetch_sub(1) == 1) it->second.bulk_out = false;
  };
  rpc_.call_async(
      peer, kMsgMeshProbe, Buffer{}, write_bulk_,
      [done](RpcReply&& r) mutable { done(true, std::move(r)); }, o);
  o.reply_bulk = opts_.bulk_bytes;
  rpc_.call_async(
      peer, kMsgMeshProbe, ping_payload(static_cast<uint32_t>(opts_.bulk_bytes)), nullptr,
      [done](RpcReply&& r) mutable { done(false, std::move(r)); }, o);
}

void MeshService::send_sync(TimePoint now) {
  MeshSyncReq req;
  req.name = opts_.name;
  {
    MutexLock lk(mu_);
    MeshRow row = row_locked(now);
    req.cells = std::move(row.cells);
    req.nis = std::move(row.nis);
  }
  // The next sync: when the MGS says (never before report_interval); a node the MGS does
  // not know yet (it registers in a moment) asks again within a second.
  auto next = [this](TimePoint t, const MeshSyncRep& rep) {
    if (rep.status != PingStatus::kOk)
      return t + std::min<Duration>(opts_.report_interval, std::chrono::seconds(1));
    return t +
           std::max<Duration>(opts_.report_interval, std::chrono::milliseconds(rep.next_sync_ms));
  };
  if (membership_.leads()) {
    MutexLock lk(mu_);
    MeshSyncRep rep = sync_locked(std::move(req), now);
    if (rep.status == PingStatus::kOk) {
      syncs_.fetch_add(1);
      set_targets(rep.targets, rep.epoch, now);
    }
    next_sync_ = next(now, rep);
    sync_out_ = false;
    return;
  }
  std::optional<Nid> mgs = membership_.current_mgs();
  if (!mgs) {
    MutexLock lk(mu_);
    next_sync_ = now + opts_.report_interval;
    sync_out_ = false;
    return;
  }
  CallOptions o;
  o.timeout = opts_.probe_timeout;
  if (!net_.takes_large_nids(*mgs)) for_version1(&req);
  call_async(
      rpc_, kMeshSyncRpc, *mgs, req,
      [this, next, mgs = *mgs](Result<MeshSyncRep> rep) {
        TimePoint now = clock_.now();
        MutexLock lk(mu_);
        sync_out_ = false;
        if (!rep.ok()) {  // the MGS did not answer: try again an interval later
          sync_failures_.fetch_add(1);
          PFS_LOG_DEBUG("mesh: sync with MGS {} failed: {}", mgs.to_string(),
                        rep.status().to_string());
          next_sync_ = now + opts_.report_interval;
          return;
        }
        next_sync_ = next(now, *rep);
        if (rep->status != PingStatus::kOk) {
          sync_failures_.fetch_add(1);
          return;
        }
        syncs_.fetch_add(1);
        set_targets(rep->targets, rep->epoch, now);
      },
      o);
}

void MeshService::set_targets(const std::vector<NodeEvent>& targets, uint64_t epoch,
                              TimePoint now) {
  if (epoch != epoch_ && !paths_.empty())
    PFS_LOG_INFO("mesh: epoch {}: probing {} peer(s)", epoch, targets.size());
  epoch_ = epoch;
  targets_ = targets;
  std::map<PathKey, PathState> next;
  const std::vector<Nid> locals = net_.local_nids();
  for (const NodeEvent& t : targets) {
    if (t.name == opts_.name) continue;
    // A node on a network this one shares is probed there; one on none of them, through
    // the routers its NIs' networks are reached by (from the NI towards the gateway).
    bool direct = false;
    for (const Nid& peer : t.nids)
      for (const Nid& local : locals) direct |= same_net(local, peer);
    for (const Nid& peer : t.nids) {
      std::vector<Nid> from;
      for (const Nid& local : locals)
        if (same_net(local, peer)) from.push_back(local);
      if (!direct)
        if (std::optional<Nid> l = net_.route_local(peer)) from.push_back(*l);
      for (const Nid& local : from) {
        PathKey k{local, peer};
        auto old = paths_.find(k);
        if (old != paths_.end()) {
          old->second.to = t.name;
          next.emplace(k, std::move(old->second));
          continue;
        }
        PathState p{t.name, local, peer, MeshWindow(opts_.window), now, now, false, false,
                    0,      0,     false};
        p.next_small = now + stagger(k, opts_.interval);
        p.next_bulk = now + stagger(k, opts_.bulk_interval);
        next.emplace(k, std::move(p));
      }
    }
  }
  // Probes of dropped paths still out find no entry when they end.
  paths_.swap(next);
}

MeshRow MeshService::row_locked(TimePoint now) {
  MeshRow row;
  row.from = opts_.name;
  row.updated_unix_ms = unix_ms(clock_.wall_now());
  for (auto& [k, p] : paths_) {
    MeshCell c = p.window.cell(now);
    c.to = p.to;
    c.local = p.local;
    c.peer = p.peer;
    c.local_mtu = p.local_mtu;
    c.peer_mtu = p.peer_mtu;
    c.on_link = p.on_link;
    row.cells.push_back(std::move(c));
  }
  for (auto& [nid, st] : nis_) {
    auto [tx, rx] = st.load.peak(now);
    row.nis.push_back({nid, st.speed_mbit, tx, rx});
  }
  return row;
}

std::string MeshService::path_view(const Nid& local, const Nid& peer) {
  MutexLock lk(mu_);
  const TimePoint now = clock_.now();
  auto it = paths_.find({local, peer});
  if (it == paths_.end())
    return "the probe mesh does not probe " + local.to_string() + " -> " + peer.to_string() +
           " now";
  std::vector<double> p50s;
  for (auto& [k, p] : paths_)
    if (MeshCell c = p.window.cell(now); c.rtt_count > 0) p50s.push_back(c.p50_ms);
  double median = 0;
  if (!p50s.empty()) {
    std::nth_element(p50s.begin(), p50s.begin() + long(p50s.size() / 2), p50s.end());
    median = p50s[p50s.size() / 2];
  }
  MeshCell c = it->second.window.cell(now);
  c.local = local;
  c.peer = peer;
  return mesh_path_view(c, median, opts_.window);
}

MeshRow MeshService::local_row() {
  MutexLock lk(mu_);
  return row_locked(clock_.now());
}

void MeshService::refresh_nodes(TimePoint now) {
  {
    MutexLock lk(mu_);
    if (now < next_refresh_) return;
    next_refresh_ = now + std::chrono::seconds(5);
  }
  auto table = membership_.status(opts_.probe_timeout);  // the MGS's own: no RPC
  if (!table.ok()) return;
  std::vector<NodeEvent> live;
  for (const StatusNode& n : table->nodes)
    if (n.state != NodeState::kDead) live.push_back({n.id, n.name, n.roles, n.state, n.nids});
  MutexLock lk(mu_);
  mgs_->set_nodes(std::move(live));
}

MeshSyncRep MeshService::sync_locked(MeshSyncReq req, TimePoint now) {
  MeshSyncRep rep = mgs_->sync(std::move(req), now, unix_ms(clock_.wall_now()));
  // A node that just registered: look at the table again at once.
  if (rep.status == PingStatus::kUnknown) next_refresh_ = TimePoint{};
  return rep;
}

MeshMatrix MeshService::matrix_page(const PageReq& req) {
  MeshMatrix m;
  MutexLock lk(mu_);
  std::vector<MeshRow> rows = mgs_->rows(clock_.now());
  m.epoch = epoch_;
  m.total = static_cast<uint32_t>(rows.size());
  m.offset = std::min<uint32_t>(req.offset, m.total);
  uint32_t end =
      m.offset + std::min<uint32_t>(std::min(req.limit, kMaxMeshPage), m.total - m.offset);
  for (uint32_t i = m.offset; i < end; ++i) m.rows.push_back(std::move(rows[i]));
  return m;
}

Result<MeshMatrix> MeshService::matrix(Duration timeout) {
  if (membership_.leads()) {
    MutexLock lk(mu_);
    MeshMatrix m;
    m.mgs = net_.local_nids().front();
    m.epoch = epoch_;
    m.rows = mgs_->rows(clock_.now());
    m.total = static_cast<uint32_t>(m.rows.size());
    return m;
  }
  std::optional<Nid> mgs = membership_.current_mgs();
  if (!mgs) return Status(Code::kNotFound, "no MGS configured (node.mgs is empty)");
  MeshMatrix all;
  all.mgs = *mgs;
  for (uint32_t offset = 0;;) {
    CallOptions co;
    co.timeout = timeout;
    Result<MeshMatrix> page = call(rpc_, kMeshMatrixRpc, *mgs, PageReq{offset, kMaxMeshPage}, co);
    if (!page.ok())
      return Status(page.status().code(),
                    "asking MGS " + mgs->to_string() + ": " + page.status().message(),
                    page.status().health_kind());
    all.epoch = page->epoch;
    all.total = page->total;
    size_t got = page->rows.size();
    for (MeshRow& row : page->rows) all.rows.push_back(std::move(row));
    offset += static_cast<uint32_t>(got);
    if (got == 0 || offset >= page->total) break;
  }
  return all;
}

MeshService::Counters MeshService::counters() const {
  Counters c;
  c.probes = probes_.load();
  c.lost = lost_.load();
  c.bulk_bytes = bulk_bytes_.load();
  c.syncs = syncs_.load();
  c.sync_failures = sync_failures_.load();
  MutexLock lk(mu_);
  c.epoch = epoch_;
  c.targets = targets_.size();
  c.paths = paths_.size();
  if (mgs_) c.rows = mgs_->row_count();
  return c;
}

}  // namespace pfsnet
