// The scalable pinger's figures (issue 6), from MembershipSim: the real MGS and node code
// on a manual clock, messages through an in-memory queue. One JSON line per figure, each
// beside its baseline or target, like pfsnet_bench.
#include <chrono>
#include <cstdio>

#include "base/log.h"
#include "membership/simulation.h"

using namespace pfsnet;
using namespace std::chrono_literals;

namespace {
void print_figure(const char* name, double value, double baseline, const char* unit) {
  std::printf(
      "{\"figure\": \"%s\", \"value\": %.3f, \"baseline\": %.3f, \"ratio\": %.4f, \"unit\": "
      "\"%s\"}\n",
      name, value, baseline, baseline > 0 ? value / baseline : 0.0, unit);
  std::fflush(stdout);
}

// MGS pings per second over 100 s after a minute of start-up.
double ping_rate(SimOptions o) {
  MembershipSim sim(o);
  sim.run_for(60s);
  uint64_t before = sim.mgs_pings();
  sim.run_for(100s);
  return double(sim.mgs_pings() - before) / 100.0;
}
}  // namespace

int main() {
  (void)init_logging("warn");
  // 10,000 clients and 200 servers at the default intervals (50 s, 10 s). Baseline: the
  // old pinger of seed 002, every client pinging every target: 2,000,000 pings per 25 s.
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
  MembershipSim sim(big);
  sim.run_for(60s);
  double cpu0 = sim.mgs_cpu_seconds();
  sim.run_for(100s);
  double cpu_per_s = (sim.mgs_cpu_seconds() - cpu0) / 100.0;
  sim.kill_server(1234);
  double killed = std::chrono::duration<double>(sim.now()).count();
  sim.run_for(40s);
  double detect = sim.declared_dead_s() - killed;
  double tell = sim.last_client_told_s() - sim.declared_dead_s();
  print_figure("membership_dead_server_detect_s_100k", detect,
               double(big.miss_limit) * std::chrono::duration<double>(big.server_interval).count(),
               "s (baseline: ping_miss_limit x server period)");
  print_figure("membership_notify_all_clients_s_100k", tell, 2.0, "s (baseline: target)");
  print_figure("membership_clients_told_100k", double(sim.clients_told()), double(big.clients),
               "clients");
  print_figure("membership_mgs_cpu_ms_per_sim_s_100k", cpu_per_s * 1000, 1000,
               "ms (baseline: one core)");
  print_figure("membership_mgs_bytes_per_node_100k",
               double(sim.mgs().memory_bytes()) / double(big.clients + big.servers), 1024,
               "bytes (baseline: target)");

  // Pings one core of the MGS handles: decode, the core, encode, over 100,000 nodes.
  MgsCore mgs(MgsOptions{}, 1);
  ManualClock clock;
  std::vector<Buffer> pings;
  for (uint32_t i = 0; i < 100000; ++i) {
    Nid n;
    n.addr = (10u << 24) + i + 1;
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
               "pings/s (baseline: target)");
  return 0;
}
