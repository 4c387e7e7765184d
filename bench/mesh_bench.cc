// The probe mesh's cost (issue 14, item 1) at the defaults, beside the budget the issue
// sets: each node at most 1% of one core and 0.1% of its link.
//
// A node's mesh work is symmetric: it probes `mesh.peers` (k) peers and, the assignment
// being a circulant graph (probe/mesh.h), is probed by exactly k others, whatever the
// cluster's size (at 100,000 nodes as at 10). So its cost per second is that of k probe
// pairs' worth of both ends: k small probes per `interval` and k bulk pairs (a write and a
// read of `bulk_bytes`) per `bulk_interval`. Both ends are measured here for real: two RPC
// engines over TCP on loopback in this process, with a node's default transport and RPC
// settings, the CPU of the whole process per probe (getrusage), the bytes of the frames.
// The MGS's share at 100,000 nodes -- every node's sync each report_interval, decoded,
// answered with its targets (MeshMgsCore over 100,000 live nodes) and its row kept -- is
// measured on the pure core; its row memory too.
// One JSON line per figure.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "base/log.h"
#include "figure.h"
#include "net/net.h"
#include "probe/mesh_service.h"
#include "rpc/node_core.h"
#include "rpc/ping.h"
#include "rpc/rpc_engine.h"
#include "transport/tcp_transport.h"

using namespace pfsnet;
using namespace std::chrono_literals;

namespace {

constexpr const char* kKey = "mesh-bench-cluster-key-0123456789";

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto tv = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) / 1e6; };
  return tv(u.ru_utime) + tv(u.ru_stime);
}

// A node's core with a node's defaults over plain TCP, serving MESH_PROBE; no driver,
// statistics or health monitor: only the probes cost CPU.
struct Endpoint {
  Nid me;
  std::unique_ptr<NodeCore> core;
  RpcEngine* rpc = nullptr;
  explicit Endpoint(const char* nid) : me(*Nid::parse(nid)) {
    NodeCoreOptions o;
    o.cfg.nets.push_back(NetConfig{me});
    o.stats = false;
    o.health = false;
    o.make_transport = [me = me](TransportEvents& ev, NodeCore& c) {
      TransportOptions to = transport_options(c.config(), kKey).value();
      return std::make_unique<TcpTransport>(to, std::vector<Nid>{me}, c.clock(), ev);
    };
    core = std::make_unique<NodeCore>(std::move(o));
    if (!core->start(Duration::zero()).ok()) std::exit(1);
    rpc = &core->rpc();
    serve_mesh_probe(*rpc, static_cast<size_t>(core->config().max_bulk()));
  }
};

struct ProbeCost {
  double cpu_s = 0;   // both ends, per probe (or per write+read pair)
  double bytes = 0;   // frames both ways, per probe (pair)
  double wall_s = 0;  // per probe (pair)
};

// `n` probes one after another as MeshService sends them (pinned path, no resend).
ProbeCost measure(Endpoint& a, const Nid& peer, bool bulk, size_t bulk_bytes, int n) {
  BulkData data = make_bulk(make_ping_pattern(bulk_bytes));
  CallOptions o;
  o.via = std::make_pair(a.me, peer);
  o.timeout = 10s;
  auto one = [&](uint64_t* bytes) {
    if (!bulk) {
      // As the service does: the local end's MTU and route, then the probe asking the
      // peer's MTU.
      MeshLinkEnd e = mesh_link_end(a.me, peer);
      RpcReply r = a.rpc->call(peer, kMsgMeshProbe, encode_mesh_mtu_ask(peer), nullptr, o);
      if (!r.status.ok() || e.mtu == 0 || decode_mesh_mtu_answer(r.payload.span()) == 0)
        std::exit(1);
      *bytes += r.bytes_sent + r.bytes_received;
      return;
    }
    RpcReply w = a.rpc->call(peer, kMsgMeshProbe, Buffer{}, data, o);
    CallOptions ro = o;
    ro.reply_bulk = bulk_bytes;
    RpcReply r = a.rpc->call(peer, kMsgMeshProbe, ping_payload(static_cast<uint32_t>(bulk_bytes)),
                             nullptr, ro);
    if (!w.status.ok() || !r.status.ok() || r.bulk.size() != bulk_bytes) std::exit(1);
    *bytes += w.bytes_sent + w.bytes_received + r.bytes_sent + r.bytes_received;
  };
  uint64_t warm = 0;
  for (int i = 0; i < n / 10 + 1; ++i) one(&warm);
  uint64_t bytes = 0;
  double c0 = cpu_seconds();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) one(&bytes);
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {(cpu_seconds() - c0) / n, double(bytes) / n, wall / n};
}

// CPU seconds per second the MGS spends on syncs with `nodes` nodes each reporting every
// `report_s`, and the bytes its rows take.
void mgs_share(size_t nodes, const MeshOptions& d, size_t rails) {
  MeshMgsCore core(d.peers, d.rotate_interval_s, d.report_interval, d.mgs_sync_rate);
  std::vector<NodeEvent> live;
  live.reserve(nodes);
  for (size_t i = 0; i < nodes; ++i) {
    NodeEvent e;
    e.id = static_cast<uint32_t>(i + 1);
    char name[32];
    std::snprintf(name, sizeof name, "c%06zu", i);
    e.name = name;
    e.roles = 1;
    for (size_t r = 0; r < rails; ++r) {
      Nid n = *Nid::parse("198.18.0.1@tcp");
      n.net_num = static_cast<uint16_t>(r);
      n.set_ipv4(0xC6120000u + static_cast<uint32_t>(i));
      e.nids.push_back(n);
    }
    live.push_back(std::move(e));
  }
  core.set_nodes(live);
  ManualClock clock;
  // A node's row: k peers x rails paths.
  auto row_of = [&](size_t i) {
    MeshSyncReq req;
    req.name = live[i].name;
    for (size_t j = 0; j < d.peers; ++j)
      for (size_t r = 0; r < rails; ++r) {
        MeshCell c;
        c.to = live[(i + j + 1) % nodes].name;
        c.local = live[i].nids[r];
        c.peer = live[(i + j + 1) % nodes].nids[r];
        c.sent = 36;
        c.rtt_count = 30;
        c.p50_ms = 0.08;
        c.p99_ms = 0.3;
        c.write_mib_s = 900;
        c.read_mib_s = 950;
        req.cells.push_back(c);
      }
    return encode(req);
  };
  // Every node once (fills the board), then a timed pass: decode, sync, encode the reply.
  std::vector<Buffer> wire;
  wire.reserve(nodes);
  for (size_t i = 0; i < nodes; ++i) wire.push_back(row_of(i));
  double rss0 = 0;
  {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    rss0 = double(u.ru_maxrss) * 1024;
  }
  for (size_t i = 0; i < nodes; ++i) {
    auto req = decode_mesh_sync_req(wire[i].span());
    (void)encode(core.sync(std::move(*req), clock.now(), 1'700'000'000'000));
  }
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  double rows_bytes = double(u.ru_maxrss) * 1024 - rss0;
  clock.advance(1s);
  double c0 = cpu_seconds();
  size_t bytes = 0;
  for (size_t i = 0; i < nodes; ++i) {
    auto req = decode_mesh_sync_req(wire[i].span());
    bytes +=
        wire[i].size() + encode(core.sync(std::move(*req), clock.now(), 1'700'000'000'000)).size();
  }
  double per_sync = (cpu_seconds() - c0) / double(nodes);
  // Each node syncs every sync_interval(): report_interval, stretched to keep the MGS under
  // mesh.mgs_sync_rate.
  double sync_s = std::chrono::duration<double>(core.sync_interval()).count();
  double rate = double(nodes) / sync_s;
  double share = per_sync * rate;
  double link = double(bytes) / double(nodes) * rate;
  std::fprintf(stderr,
               "mesh_bench: MGS at %zu nodes (k = %zu, %zu rails): each syncs every %.0f s, %.0f "
               "syncs/s, %.2f us each; %.0f KiB/s of sync traffic; rows ~%.0f MiB (%zu held)\n",
               nodes, d.peers, rails, sync_s, rate, per_sync * 1e6, link / 1024,
               rows_bytes / (1 << 20), core.row_count());
  print_figure("mesh_mgs_core_pct_100k_nodes", share * 100, 1.0, "% of one core (budget 1%)");
  print_figure("mesh_mgs_link_pct_10gbit_100k_nodes", link / 1250e6 * 100, 0.1,
               "% of a 10 Gbit/s link, both ways (budget 0.1%)");
}

}  // namespace

int main() {
  (void)init_logging("warn");  // the log goes to stderr: stdout is the figures' JSON lines
  Config cfg;                  // the defaults
  MeshOptions d = MeshOptions::from(cfg);
  double interval = std::chrono::duration<double>(d.interval).count();
  double bulk_interval = std::chrono::duration<double>(d.bulk_interval).count();
  Endpoint a("127.0.77.1@tcp"), b("127.0.77.2@tcp");
  ProbeCost small = measure(a, b.me, false, 0, 4000);
  ProbeCost bulk = measure(a, b.me, true, d.bulk_bytes, 400);
  std::fprintf(stderr,
               "mesh_bench: per small probe %.1f us CPU (both ends), %.0f bytes, %.1f us; per "
               "bulk pair (%zu B each way) %.1f us CPU, %.0f bytes, %.1f us\n",
               small.cpu_s * 1e6, small.bytes, small.wall_s * 1e6, d.bulk_bytes, bulk.cpu_s * 1e6,
               bulk.bytes, bulk.wall_s * 1e6);
  // Per path: this node probes k peers and k others probe it; 1 rail (each more rail adds
  // the same again, on its own link).
  double k = double(d.peers);
  double cpu_per_s = k * small.cpu_s / interval + k * bulk.cpu_s / bulk_interval;
  // Each direction of the link carries one pair's bytes per probe (the request one way,
  // the reply the other, for this node's probes and for those it answers).
  double bytes_per_s = k * small.bytes / interval + k * bulk.bytes / bulk_interval;
  std::fprintf(
      stderr,
      "mesh_bench: defaults k = %zu, small every %.0f s, bulk every %.0f s: %.3f ms CPU/s, "
      "%.1f KiB/s each way per rail\n",
      d.peers, interval, bulk_interval, cpu_per_s * 1e3, bytes_per_s / 1024);
  print_figure("mesh_node_core_pct", cpu_per_s * 100, 1.0, "% of one core (budget 1%)");
  print_figure("mesh_node_link_pct_1gbit", bytes_per_s / 125e6 * 100, 0.1,
               "% of a 1 Gbit/s link each way (budget 0.1%)");
  print_figure("mesh_node_link_pct_10gbit", bytes_per_s / 1250e6 * 100, 0.1,
               "% of a 10 Gbit/s link each way (budget 0.1%)");
  mgs_share(100'000, d, 2);
  return 0;
}
