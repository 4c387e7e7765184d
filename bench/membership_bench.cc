// The scalable pinger's figures (issue 6), from MembershipSim: the real MGS and node code
// on a manual clock, messages through an in-memory queue. One JSON line per figure, each
// beside its baseline or target, like pfsnet_bench.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>

#include "base/log.h"
#include "figure.h"
#include "membership/methods.h"
#include "membership/service.h"
#include "membership/simulation.h"
#include "rpc/node_core.h"
#include "transport/tcp_transport.h"

using namespace pfsnet;
using namespace std::chrono_literals;

namespace {
// MGS pings per second over 300 s after 200 s of start-up (skipped pings come in runs of
// client periods, so the window spans several).
double ping_rate(SimOptions o) {
  MembershipSim sim(o);
  sim.run_for(200s);
  uint64_t before = sim.mgs_pings();
  sim.run_for(300s);
  return double(sim.mgs_pings() - before) / 300.0;
}
}  // namespace

// MGS_PING through the whole stack: a real MGS (MembershipService on Net and RpcEngine
// over TCP on loopback) and one client process-side engine keeping `window` pings in
// flight on behalf of 10,000 registered nodes. Both share this 2-core machine.
double end_to_end_pings_per_s(double seconds, int window) {
  MonotonicClock clock;
  Config cfg;
  cfg.node.name = "mgs";
  cfg.node.roles = {"mgs"};
  Nid mgs_nid = *Nid::parse("127.0.0.91@tcp"), cli_nid = *Nid::parse("127.0.0.92@tcp");
  cfg.nets = {NetConfig{mgs_nid, 7988}};
  cfg.lnet.peer_credits = 256;
  cfg.lnet.credits = 1024;
  // Two node cores over plain TCP, no driver, statistics or health monitor: the MGS's
  // service is the only work.
  auto core = [&](Nid n) {
    NodeCoreOptions o;
    o.cfg = cfg;
    o.cfg.nets = {NetConfig{n, 7988}};
    o.clock = &clock;
    o.stats = false;
    o.health = false;
    RpcOptions ro;
    ro.max_rpcs_in_flight = window;
    ro.workers = 1;
    ro.spin = std::chrono::microseconds(0);
    o.rpc = ro;
    o.make_transport = [n](TransportEvents& ev, NodeCore& c) -> std::unique_ptr<Transport> {
      TransportOptions to;
      to.cluster_key = "membership-bench-cluster-key-0001";
      return std::make_unique<TcpTransport>(to, std::vector<Nid>{n}, c.clock(), ev);
    };
    return std::make_unique<NodeCore>(std::move(o));
  };
  auto mgs = core(mgs_nid);
  MembershipService svc(cfg, mgs->net(), mgs->rpc(), clock);
  auto cli = core(cli_nid);
  RpcEngine& crpc = cli->rpc();
  if (!mgs->start(Duration::zero()).ok() || !cli->start(Duration::zero()).ok()) return 0;
  std::vector<Buffer> pings;
  for (uint32_t i = 0; i < 10000; ++i) {
    Nid n;
    n.set_ipv4((10u << 24) + i + 1);
    Result<RegisterRep> rep = call(crpc, kMgsRegisterRpc, mgs_nid,
                                   RegisterReq{"c" + std::to_string(i), kRoleClient, {n}, 5}, {});
    if (!rep.ok()) return 0;
    pings.push_back(encode(PingReq{rep->id, 5, {}}));
  }
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<uint64_t> done{0}, bad{0};
  std::atomic<bool> stop{false};
  std::atomic<int> outstanding{0};
  std::function<void(size_t)> send = [&](size_t k) {
    outstanding.fetch_add(1);
    const Buffer& b = pings[k % pings.size()];
    crpc.call_async(mgs_nid, kMsgMgsPing, Buffer::copy_of(b.span()), nullptr, [&, k](RpcReply&& r) {
      if (r.status.ok())
        done.fetch_add(1);
      else
        bad.fetch_add(1);
      if (!stop.load()) send(k + size_t(window));
      if (outstanding.fetch_sub(1) == 1) {
        std::lock_guard lk(mu);
        cv.notify_all();
      }
    });
  };
  auto t0 = std::chrono::steady_clock::now();
  for (int k = 0; k < window; ++k) send(size_t(k));
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  uint64_t n = done.load();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  {
    std::unique_lock lk(mu);
    cv.wait_for(lk, 10s, [&] { return outstanding.load() == 0; });
  }
  cli->stop();
  mgs->stop();
  return bad.load() ? 0 : double(n) / secs;
}

// A cluster of `o`'s size at the default periods: up for 160 s (every node registered within
// the first client period), then a server killed; its detection and the news to every
// client, the MGS's CPU and memory.
void dead_server(const SimOptions& o, const std::string& size) {
  auto fig = [](const std::string& name, double v, double base, const char* unit) {
    print_figure(name.c_str(), v, base, unit);
  };
  auto wall0 = std::chrono::steady_clock::now();
  MembershipSim sim(o);
  sim.run_for(60s);
  double cpu0 = sim.mgs_cpu_seconds();
  sim.run_for(100s);
  double cpu_per_s = (sim.mgs_cpu_seconds() - cpu0) / 100.0;
  const MgsCore::Counters before = sim.mgs().counters();
  sim.kill_server(o.servers / 2 + 234);
  double killed = std::chrono::duration<double>(sim.now()).count();
  sim.run_for(40s);
  const MgsCore::Counters& after = sim.mgs().counters();
  double detect = sim.declared_dead_s() - killed;
  double tell = sim.last_client_told_s() - sim.declared_dead_s();
  const double period = std::chrono::duration<double>(o.server_interval).count();
  fig("membership_dead_server_detect_s_" + size, detect, double(o.miss_limit) * period,
      "s (baseline: ping_miss_limit x server period)");
  fig("membership_notify_all_clients_s_" + size, tell, 2.0, "s (baseline: target)");
  fig("membership_clients_told_" + size, double(sim.clients_told()), double(o.clients), "clients");
  // What the MGS itself sent to tell them: relays (MGS_RELAY, each for up to relay_fanout
  // clients) and notifications of its own, against one per client.
  fig("membership_mgs_messages_to_tell_" + size,
      double((after.relays - before.relays) +
             (after.notifications_sent - before.notifications_sent) -
             (after.relayed - before.relayed)),
      double(o.clients), "MGS messages (baseline: one per client)");
  fig("membership_mgs_cpu_ms_per_sim_s_" + size, cpu_per_s * 1000, 1000, "ms (baseline: one core)");
  fig("membership_mgs_bytes_per_node_" + size,
      double(sim.mgs().memory_bytes()) / double(o.clients + o.servers), 1024,
      "bytes (baseline: target)");
  std::fprintf(stderr, "membership_bench: %s simulated in %.1f s of wall time\n", size.c_str(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count());
}

int main(int argc, char** argv) {
  // --million-only: just the 1,000,000-client run (a minute or two, ~GBs of memory).
  const bool million_only = argc > 1 && std::string(argv[1]) == "--million-only";
  SimOptions huge;
  huge.clients = 1000000;
  huge.servers = 2000;
  if (million_only) {
    (void)init_logging("warn");
    dead_server(huge, "1m");
    SimOptions direct = huge;
    direct.relay_fanout = 0;
    dead_server(direct, "1m_no_relays");
    return 0;
  }
  (void)init_logging("warn");
  // 10,000 clients and 200 servers at the default intervals (50 s, 10 s). Baseline: the
  // old pinger of Lustre's scalable pinger, every client pinging every target: 2,000,000 pings per
  // 25 s.
  SimOptions small;
  small.clients = 10000;
  small.servers = 200;
  double idle = ping_rate(small);
  print_figure("membership_mgs_pings_per_s_10k", idle, 10000.0 * 200 / 25, "pings/s");
  // The same cluster busy (each client talks to a server every 10 s) with heard-from
  // reports: against the idle rate without them.
  SimOptions busy = small;
  busy.heard_reports = true;
  busy.activity = 10s;
  print_figure("membership_mgs_pings_per_s_10k_reports", ping_rate(busy), idle, "pings/s");

  // 100,000 clients and 2,000 servers: kill a server, time its detection and the news.
  SimOptions big;
  big.clients = 100000;
  big.servers = 2000;
  dead_server(big, "100k");

  // State handed over (issue 36, item 2): the leader keeps its table's changed chunks where
  // the next finds them (etcd, in the daemon), and the next restores them and serves: the
  // same 100,000 clients and 2,000 servers, the leader replaced at 160 s.
  SimOptions hand = big;
  hand.keep_table = true;
  MembershipSim hs(hand);
  hs.run_for(60s);  // every node registered (they start within a client period)
  const uint64_t written0 = hs.table_bytes_written();
  hs.run_for(100s);
  const double write_rate = double(hs.table_bytes_written() - written0) / 100.0;
  const MembershipSim::Failover f = hs.fail_over();
  hs.run_for(big.server_interval);  // one server ping period
  const double nodes = double(big.clients + big.servers);
  print_figure("membership_failover_restore_ms_100k", f.restore_s * 1000,
               std::chrono::duration<double, std::milli>(big.server_interval).count(),
               "ms, the new leader reading its predecessor's table (baseline: one server period)");
  print_figure("membership_failover_registrations_100k", double(hs.mgs().counters().registers),
               nodes,
               "registrations in the server period after (baseline: every node, as with "
               "an empty table)");
  print_figure("membership_failover_unknown_pings_100k", double(hs.mgs().counters().unknown_pings),
               nodes, "pings answered unknown (baseline: every node)");
  print_figure("membership_failover_table_errors_100k", double(hs.table_errors()), nodes,
               "live nodes not up in the new table one server period after (baseline: all)");
  print_figure("membership_table_bytes_per_node_100k", double(f.bytes) / nodes, 1024,
               "bytes kept in etcd per node (baseline: target)");
  print_figure("membership_table_write_bytes_per_s_100k", write_rate, double(f.bytes),
               "bytes/s written to etcd in steady state (baseline: the whole table)");

  // A million clients and 2,000 servers (issue 36, item 5); and the same told by the MGS
  // alone (no relays), for the news's figures beside it.
  dead_server(huge, "1m");
  SimOptions direct = huge;
  direct.relay_fanout = 0;
  dead_server(direct, "1m_no_relays");

  // Pings one core of the MGS handles: decode, the core, encode, over 100,000 nodes.
  MgsCore mgs(MgsOptions{}, 1);
  ManualClock clock;
  std::vector<Buffer> pings;
  for (uint32_t i = 0; i < 100000; ++i) {
    Nid n;
    n.set_ipv4((10u << 24) + i + 1);
    RegisterRep r =
        mgs.on_register(RegisterReq{"c" + std::to_string(i), kRoleClient, {n}, 5}, clock.now());
    pings.push_back(encode(PingReq{r.id, 5, {}}));
  }
  size_t n = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int round = 0; round < 10; ++round)
    for (const Buffer& b : pings) {
      auto req = decode_ping_req(b.span());
      Buffer rep = encode(mgs.on_ping(*req, clock.now()));
      n += rep.size() > 0;
    }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  print_figure("membership_mgs_pings_per_core_s", double(n) / secs, 100000,
               "pings/s, MGS code alone (baseline: target)");
  print_figure("membership_mgs_pings_per_s_tcp", end_to_end_pings_per_s(3.0, 256), 100000,
               "pings/s, real MGS over TCP, client on the same 2 cores (baseline: target)");
  return 0;
}
