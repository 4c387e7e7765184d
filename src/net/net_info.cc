// Net: snapshots of NIs, peer NIs and peers, for the admin surface, tuning and tests.
#include <algorithm>

#include "base/mutex.h"
#include "net/net_internal.h"
#include "net/peer_table.h"

namespace pfsnet {

namespace {

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
  info.connects = c.connects.load();
  info.connect_failures = c.connect_failures.load();
  info.reconnect_waits = c.reconnect_waits.load();
  for (int i = 0; i < kNumHealthKinds; ++i) info.errors[i] = c.errors[i].load();
}

void fill(NiInfo& i, const Health& health, TimePoint now) {
  Health::Snapshot h = health.snapshot();
  i.health = h.value;
  i.last_change_unix_ms = h.last_change_unix_ms;
  i.since_change_s = std::chrono::duration<double>(now - h.last_change).count();
  i.recovery_pings = h.ping_count;
  i.next_recovery_s =
      i.health < kMaxHealth ? std::chrono::duration<double>(h.next_ping - now).count() : -1;
  if (h.degraded != SlowCause::kNone) {
    i.degraded = slow_cause_name(h.degraded);
    i.degraded_penalty = h.penalty;
    i.degraded_evidence = h.evidence;
  }
  i.degraded_since_unix_ms = h.degraded_since_unix_ms;
}

// The path's TCP totals: its closed connections' and each open one's now. nullopt when it
// never had a TCP connection. A system call per open connection. `sample` (when given):
// the RTTs and per-connection figures of a PathSample.
std::optional<TcpTotals> tcp_totals(const TcpTotals& closed,
                                    const std::vector<ConnectionPtr>& conns,
                                    std::optional<TcpKernelInfo>* busiest,
                                    PathSample* sample = nullptr) {
  std::optional<TcpTotals> t;
  if (closed.segs_out > 0) t = closed;
  std::optional<TcpKernelInfo> most, queued;  // the busiest; the fresh one most queued
  auto excess = [](const TcpKernelInfo& k) { return int64_t(k.rtt_us) - int64_t(k.min_rtt_us); };
  for (const ConnectionPtr& c : conns) {
    // The counters only, unless a view wants the busiest connection's whole figures.
    auto k = c->kernel_tcp_info(busiest != nullptr);
    if (!k) continue;
    if (!t) t.emplace();
    t->add(*k);
    t->pacing_rate += k->pacing_rate;
    if (!most || k->bytes_sent > most->bytes_sent) most = k;
    if (k->last_data_sent_ms <= 1000 && (!queued || excess(*k) > excess(*queued))) queued = k;
    if (sample)
      sample->conns.push_back(
          ConnFigures{reinterpret_cast<uintptr_t>(c.get()),
                      k->total_retrans - std::min(k->dsack_dups, k->total_retrans),
                      k->rtt_us / 1000.0, k->min_rtt_us / 1000.0});
  }
  if (busiest && most) *busiest = most;
  if (sample && most) {
    sample->srtt_ms = most->rtt_us / 1000.0;
    sample->min_rtt_ms = most->min_rtt_us / 1000.0;
    const TcpKernelInfo& q = queued && excess(*queued) > excess(*most) ? *queued : *most;
    sample->queue_ms = double(std::max<int64_t>(0, excess(q))) / 1000.0;
  }
  return t;
}

}  // namespace

std::vector<NiInfo> Net::nis() const {
  std::vector<NiInfo> v;
  TimePoint now = clock_.now();
  for (auto& ni : nis_) {
    NiInfo i;
    i.nid = ni->nid;
    i.up = ni->up.load() && !shut_.load();
    fill(i, ni->health, now);
    if (!ni->up.load()) i.next_recovery_s = -1;
    i.credits_max = credits();
    std::vector<Path*> paths = table_->ni_paths(*ni);
    {
      MutexLock lk(ni->mu);
      i.credits = ni->tx_credits;
      i.credits_min = ni->min_credits;
      for (Path* p : paths) {
        i.queued += static_cast<int64_t>(p->queue.size() + p->bulk_queue.size());
        i.connections += static_cast<int>(p->conns.size());
      }
    }
    fill(i, ni->counters);
    v.push_back(std::move(i));
  }
  return v;
}

std::optional<WireSession> Net::wire_of(const Nid& nid) const {
  PeerNi* pni = table_->find(nid);
  if (!pni) return std::nullopt;
  for (Path* p : table_->paths_of(*pni)) {
    MutexLock lk(p->ni->mu);
    const Connection* open = p->tx_conn         ? p->tx_conn.get()
                             : p->conns.empty() ? nullptr
                                                : p->conns.front().get();
    if (open) return open->wire();
  }
  return std::nullopt;
}

bool Net::takes_large_nids(const Nid& nid) const {
  if (nid.is_large()) return true;
  std::optional<WireSession> w = wire_of(nid);
  return w && w->version >= 2;
}

std::vector<NiInfo> Net::peers(bool kernel_tcp) const {
  std::vector<NiInfo> v;
  std::vector<PeerNi*> pnis;
  table_->for_each_peer_ni([&](PeerNi& p) { pnis.push_back(&p); });
  TimePoint now = clock_.now();
  for (PeerNi* pni : pnis) {
    NiInfo i;
    i.nid = pni->nid;
    fill(i, pni->health, now);
    i.credits_max = peer_credits();
    i.credits_min = pni->min_credits.load(std::memory_order_relaxed);
    for (Path* p : table_->paths_of(*pni)) {
      std::vector<ConnectionPtr> conns;
      TcpTotals closed;
      {
        MutexLock lk(p->ni->mu);
        if (p->tx_state && !i.up) i.credits = p->tx_state->tx_credits;
        i.up = i.up || p->tx_conn != nullptr;
        i.queued += static_cast<int64_t>(p->queue.size() + p->bulk_queue.size());
        i.connections += static_cast<int>(p->conns.size());
        i.paths.push_back({p->ni->nid,
                           p->send_count.load(),
                           p->send_bytes.load(),
                           p->recv_count.load(),
                           p->recv_bytes.load(),
                           static_cast<int>(p->conns.size()),
                           p->reconnect_interval.count() / 1000000,
                           p->reconnect_at > now && !p->tx_conn
                               ? std::chrono::duration<double>(p->reconnect_at - now).count()
                               : -1.0,
                           {},
                           {}});
        if (kernel_tcp) {
          conns = p->conns;
          closed = p->closed_tcp;
        }
        const Connection* open = p->tx_conn         ? p->tx_conn.get()
                                 : p->conns.empty() ? nullptr
                                                    : p->conns.front().get();
        if (open) {
          const WireSession& w = open->wire();
          i.paths.back().wire_version = w.version;
          i.paths.back().features = w.features;
          if (i.wire_version == 0) {
            i.wire_version = w.version;
            i.features = w.features;
            i.peer_wire_min = w.peer_min;
            i.peer_wire_max = w.peer_max;
            i.release = w.peer_release;
            i.cluster_key = key_used_name(w.peer_key);
          }
        }
      }
      // The kernel's figures, outside the NI's lock (a system call per connection): the
      // totals, and those of the connection that sent the most, which carries this node's
      // traffic on the path.
      if (kernel_tcp) i.paths.back().tcp_total = tcp_totals(closed, conns, &i.paths.back().tcp);
    }
    i.peer_nids = table_->announced(*pni);
    i.peer = table_->peer_name(*pni);
    fill(i, pni->counters);
    v.push_back(std::move(i));
  }
  std::sort(v.begin(), v.end(), [](const NiInfo& a, const NiInfo& b) { return a.nid < b.nid; });
  return v;
}

std::vector<PathSample> Net::path_samples(
    const std::function<bool(const Nid& local, const Nid& peer, uint64_t bytes)>& want) const {
  std::vector<PathSample> v;
  for (Path* p : table_->all_paths()) {
    uint64_t bytes = p->send_bytes.load(std::memory_order_relaxed) +
                     p->recv_bytes.load(std::memory_order_relaxed);
    if (!want(p->ni->nid, p->pni->nid, bytes)) continue;
    PathSample s;
    s.local = p->ni->nid;
    s.peer = p->pni->nid;
    s.bytes = bytes;
    std::vector<ConnectionPtr> conns;
    TcpTotals closed;
    {
      MutexLock lk(p->ni->mu);
      conns = p->conns;
      closed = p->closed_tcp;
    }
    if (auto t = tcp_totals(closed, conns, nullptr, &s)) {
      s.tcp = true;
      s.tcp_total = *t;
    }
    v.push_back(s);
  }
  return v;
}

std::vector<PeerLoad> Net::peer_loads() const {
  std::vector<PeerLoad> v;
  for (const PeerTable::PeerView& peer : table_->peer_views()) {
    PeerLoad l;
    l.peer = peer.name;
    for (const PeerNi* pni : peer.nis) {
      l.bytes += pni->counters.send_bytes.load(std::memory_order_relaxed) +
                 pni->counters.recv_bytes.load(std::memory_order_relaxed);
      l.sends += pni->counters.send_count.load(std::memory_order_relaxed);
    }
    // Connection state is under the NIs' locks (the table's lock is not held here).
    for (Path* p : peer.paths) {
      MutexLock lk(p->ni->mu);
      l.up = l.up || p->tx_conn != nullptr;
    }
    v.push_back(l);
  }
  return v;
}

std::optional<Nid> Net::peer_of(const Nid& nid) const {
  PeerNi* pni = table_->find(nid);
  if (!pni) return std::nullopt;
  return table_->peer_name(*pni);
}

}  // namespace pfsnet
