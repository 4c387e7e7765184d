// The WAN study (the LNET WAN study, docs/sources.md) on a real path: two network namespaces joined
// by pfsnet_delay_line (tools/delay_line), so kernel TCP at both ends sees the round trip (default
// 50 ms: 25 ms each way), the rate and the tail-drop queue. A pfsnetd in each namespace, 1 MiB RPCs
// from the client to the server; every pfsnet figure runs as long as
// (--iperf-seconds), and stands beside, what one iperf3 stream (kernel autotuning) moved on
// the same line in the same run.
// Per rate (default 1000 and 4000 Mbit/s):
//   wan_<R>m_default_write_vs_iperf3   pfsnetd's defaults, the application asking for 64
//                                      RPCs in flight
//   wan_<R>m_tuned_write_vs_iperf3     after one `pfsnet tune --probe --apply` on both ends
//   wan_<R>m_tuned_read_vs_iperf3      the same, reads (baseline: iperf3 -R)
//   wan_<R>m_tuned_write_cpu_s_per_gib_vs_iperf3   CPU seconds both daemons spent per GiB
//                                      of those writes, beside iperf3's (both ends; lower
//                                      is better)
//   wan_<R>m_tuned_conns4_write_vs_iperf3  the same with lnet.conns_per_peer = 4
//   wan_<R>m_tuned_conns4_read_vs_iperf3   and reads after them
//   wan_<R>m_autotune_seconds_to_90pct tune.auto on both ends, 256 asked for: the first
//                                      second that moves 90% of iperf3; baseline: 10 s
//   sweep rows (first rate only)       peer_credits 8, 32, 64 x concurrency 1..256: MiB/s
//                                      beside min(iperf3, RPCs x size / RTT)
// And per --losses fraction (default 0.0001 and 0.001: 0.01% and 0.1% of the packets
// dropped each way), at the last rate:
//   wan_<R>m_loss_<P>pct_tuned_write_vs_iperf3   as tuned above, on the lossy line
//   wan_<R>m_loss_<P>pct_tuned_conns4_write_vs_iperf3   and with lnet.conns_per_peer = 4
//   wan_<R>m_loss_<P>pct_autotune_last10s_write_vs_iperf3   tune.auto alone, from the
//                                      defaults: the last 10 s of 20
// With --only conns (not in a full run): writes at 16..128 RPCs in flight over 1 and 4
// connections per path, with the delay line's queue drops in each.
// Needs root (namespaces, TUN devices) and iperf3.
// Usage: wan_bench --pfsnetd PATH --delay-line PATH [--rates 1000,4000] [--losses F,F]
//                  [--delay-ms D] [--step-seconds S] [--iperf-seconds S] [--node-config TOML]
//                  [--only sweep|default|tuned|autotune|loss|conns|lossconns]
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>

#include "admin/admin_client.h"
#include "daemons.h"
#include "delay_path.h"
#include "figure.h"

namespace pfsnet {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

struct Options {
  std::string pfsnetd, delay_line, only;
  std::string node_config;  // [node] keys for every daemon (--node-config)
  std::vector<double> rates = {1000, 4000};
  std::vector<double> losses = {0.0001, 0.001};
  // 20 s: BBR drops each flow's window to 4 packets for 200 ms when its min_rtt is 10 s
  // old (PROBE_RTT). A fresh iperf3 stream reaches that in its 11th-12th second (328 MiB/s
  // there, 472 around it), while the daemons' connections, opened by the pings and the
  // probe before the write, reach it within the first 10 s: 10 s windows held it on
  // pfsnet's side only. 20 s windows hold one on each side.
  double delay_ms = 25, step_s = 2, iperf_s = 20;
};

// Thrown on a failure and caught in main, so the daemons, the delay line and the
// namespaces are stopped and removed on the way out.
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};
[[noreturn]] void fail(const std::string& why) { throw Failure(why); }

// Runs `argv` and returns what it printed on stdout (bounded by the program itself: iperf3
// runs for its -t).
std::string capture(std::vector<std::string> argv) {
  std::string cmd;
  for (const std::string& a : argv) cmd += "'" + a + "' ";
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) fail("cannot run " + argv[0]);
  std::string out;
  char b[4096];
  size_t n;
  while ((n = fread(b, 1, sizeof b, f)) > 0) out.append(b, n);
  pclose(f);
  return out;
}

// One iperf3 stream from side 0 to side 1 (reverse: 1 to 0) for `seconds`: MiB/s received,
// and the CPU both ends spent per GiB moved (iperf3's own host_total and remote_total).
struct Stream {
  double mib_s = 0;
  double cpu_s_per_gib = 0;
  std::string seconds;  // MiB/s in each of its intervals, as "470 466 ..."
};
Stream iperf3_stream(const DelayPath& path, bool reverse, double seconds) {
  pid_t server = -1;
  std::vector<std::string> s =
      path.in_ns(1, {"iperf3", "-s", "-1", "-B", path.addr(1), "--logfile", "/dev/null"});
  std::vector<char*> sargs;
  for (auto& a : s) sargs.push_back(a.data());
  sargs.push_back(nullptr);
  if (posix_spawnp(&server, "ip", nullptr, nullptr, sargs.data(), environ) != 0)
    fail("cannot start iperf3");
  json r;
  for (int i = 0; i < 50; ++i) {  // the server listens within a moment: bounded retries
    std::vector<std::string> c = {"iperf3", "-c", path.addr(1), "-t", std::to_string(seconds),
                                  "-J"};
    if (reverse) c.push_back("-R");
    std::string out = capture(path.in_ns(0, c));
    r = json::parse(out, nullptr, false);
    if (!r.is_discarded() && !r.contains("error")) break;
    std::this_thread::sleep_for(100ms);
  }
  int st;
  kill(server, SIGTERM);
  waitpid(server, &st, 0);
  if (r.is_discarded() || r.contains("error")) fail("iperf3 failed: " + r.dump());
  Stream out;
  out.mib_s = r["end"]["sum_received"]["bits_per_second"].get<double>() / 8 / (1 << 20);
  const json& cpu = r["end"]["cpu_utilization_percent"];
  double cpu_s = (cpu["host_total"].get<double>() + cpu["remote_total"].get<double>()) / 100 *
                 r["end"]["sum_received"]["seconds"].get<double>();
  double gib = out.mib_s * r["end"]["sum_received"]["seconds"].get<double>() / 1024;
  if (gib > 0) out.cpu_s_per_gib = cpu_s / gib;
  for (const json& i : r["intervals"])
    out.seconds += std::to_string(static_cast<int>(i["sum"]["bits_per_second"].get<double>() / 8 /
                                                   (1 << 20))) +
                   " ";
  return out;
}
double iperf3(const DelayPath& path, bool reverse, double seconds) {
  return iperf3_stream(path, reverse, seconds).mib_s;
}

// Two daemons, client (side 0) and server (side 1), one in each namespace.
class Pair {
 public:
  Pair(const Options& o, const DelayPath& path, const std::string& settings)
      : path_(path), d_(o.pfsnetd, "wan") {
    for (int i = 0; i < 2; ++i)
      d_.start(name(i), o.node_config, "[[net]]\nnid = \"" + nid(i) + "\"\n" + settings,
               {"ip", "netns", "exec", path.ns(i)});
    d_.wait_ready();
    ask(0, {{"cmd", "ping"}, {"nid", nid(1)}, {"count", 1}});  // connected
  }
  static std::string name(int i) { return i == 0 ? "client" : "server"; }
  std::string nid(int i) const { return path_.addr(i) + "@tcp"; }
  // CPU seconds both daemons have used so far.
  double cpu_seconds() const { return d_.cpu_seconds(name(0)) + d_.cpu_seconds(name(1)); }

  json ask(int i, const json& req) const {
    auto r = admin_request(d_.socket(name(i)), req, std::chrono::milliseconds(600000));
    if (!r.ok()) fail(req.dump() + ": " + r.status().message());
    return *r;
  }
  json selftest(const std::string& mode, const json& conc, double duration,
                double link_mbit) const {
    return ask(0, {{"cmd", "selftest"},
                   {"from", json::array({nid(0)})},
                   {"to", json::array({nid(1)})},
                   {"test", "brw"},
                   {"mode", mode},
                   {"size", 1 << 20},
                   {"concurrency", conc},
                   {"distribute", "1:1"},
                   {"duration", duration},
                   {"link_mbit", link_mbit}});
  }
  // What auto-tune left in the client's settings: " key=value" for each it may change.
  std::string autotuned() const {
    std::string now;
    json shown = ask(0, {{"cmd", "config_show"}});
    for (const json& e : shown["config"])
      if (e["key"] == "lnet.conns_per_peer" || e["key"] == "rpc.peer_rpcs_in_flight" ||
          e["key"] == "lnet.peer_credits")
        now += " " + e["key"].get<std::string>() + "=" + e["value"].get<std::string>();
    return now;
  }
  // `pfsnet tune --probe --apply` on both ends; prints what the client's found.
  void tune() const {
    json t = ask(0, {{"cmd", "tune"}, {"probe", true}, {"apply", true}});
    ask(1, {{"cmd", "tune"}, {"probe", true}, {"apply", true}});
    const json& peer = t["peers"][0];
    std::fprintf(stderr,
                 "  tune --probe: RTT %.2f ms, bandwidth %.1f MiB/s, BDP %.1f MiB -> "
                 "max_rpcs_in_flight %lld, peer_credits %lld, credits %lld\n",
                 peer["rtt_ms"].get<double>(), peer["bandwidth_mib_s"].get<double>(),
                 peer["bdp_mib"].get<double>(),
                 t["settings"]["max_rpcs_in_flight"]["recommended"].get<long long>(),
                 t["settings"]["peer_credits"]["recommended"].get<long long>(),
                 t["settings"]["credits"]["recommended"].get<long long>());
    std::fprintf(stderr,
                 "    bandwidth from %s; retransmits %.4f%% (the probe's: %lld of %lld segments) "
                 "-> conns_per_peer %lld\n",
                 peer["bandwidth_source"].get<std::string>().c_str(),
                 100 * peer["retransmit_ratio"].get<double>(),
                 peer["probe_retransmits"].get<long long>(),
                 peer["probe_segments"].get<long long>(),
                 t["settings"]["conns_per_peer"]["recommended"].get<long long>());
  }

 private:
  const DelayPath& path_;
  BenchDaemons d_;
};

std::string fig(double rate, const char* what) {
  return "wan_" + std::to_string(static_cast<long>(rate)) + "m_" + what;
}

// Packets the line's queue has dropped from side 0 to side 1 (the writes' direction).
uint64_t queue_drops(DelayPath& path) {
  return json::parse(path.counters())["a_to_b"]["queue_drops"].get<uint64_t>();
}

// RPCs in flight against connections per path: writes at concurrency 16..128 with
// lnet.conns_per_peer 1 and 4 (credits out of the way), and the delay line's queue drops
// while each ran.
void conns_sweep(const Options& o, DelayPath& path, double rate, double iperf_mib) {
  json conc = json::array({16, 24, 32, 40, 48, 64, 96, 128});
  for (int conns : {1, 4}) {
    std::fprintf(stderr, "  conns_per_peer %d (peer_credits 256, max_rpcs_in_flight 256)\n", conns);
    for (const json& c : conc) {
      Pair p(o, path,
             "[lnet]\ncredits = 2048\npeer_credits = 256\nconns_per_peer = " +
                 std::to_string(conns) + "\n[rpc]\nmax_rpcs_in_flight = 256\n");
      uint64_t before = queue_drops(path);
      json r = p.selftest("write", json::array({c}), o.step_s, iperf_mib * 8 * 1.048576);
      const json& st = r["steps"][0];
      uint64_t dropped = queue_drops(path) - before;
      // The first second shows the ramp (connections, slow start); the rest the line.
      const json& tl = st["timeline_mib_s"];
      std::fprintf(stderr,
                   "  %6d in flight: %7.1f MiB/s (%.2f of iperf3; first second %.0f), %llu queue "
                   "drops\n",
                   c.get<int>(), st["mib_s"].get<double>(), st["mib_s"].get<double>() / iperf_mib,
                   tl.empty() ? 0.0 : tl[0].get<double>(), (unsigned long long)dropped);
      std::printf(
          "{\"sweep\": \"rate_mbit=%.0f conns_per_peer=%d\", \"concurrency\": %d, \"mib_s\": "
          "%.1f, \"vs_iperf3\": %.3f, \"queue_drops\": %llu}\n",
          rate, conns, c.get<int>(), st["mib_s"].get<double>(),
          st["mib_s"].get<double>() / iperf_mib, (unsigned long long)dropped);
      std::fflush(stdout);
    }
  }
}

void sweeps(const Options& o, const DelayPath& path, double rate, double iperf_mib) {
  json conc = json::array();
  for (int c = 1; c <= 256; c *= 2) conc.push_back(c);
  for (int pc : {8, 32, 64}) {
    Pair p(o, path,
           "[lnet]\ncredits = 2048\npeer_credits = " + std::to_string(pc) +
               "\n[rpc]\nmax_rpcs_in_flight = 256\n");
    json r = p.selftest("write", conc, o.step_s, iperf_mib * 8 * 1.048576);
    std::fprintf(stderr, "  peer_credits %d (credits 2048, max_rpcs_in_flight 256)\n", pc);
    std::fprintf(stderr, "  %6s %9s %9s %8s %8s %12s %6s\n", "conc", "MiB/s", "RPC/s", "p50 ms",
                 "RTT ms", "theory MiB/s", "eff");
    for (const json& s : r["steps"]) {
      std::fprintf(stderr, "  %6d %9.1f %9.1f %8.1f %8.1f %12.1f %6.2f\n",
                   s["concurrency"].get<int>(), s["mib_s"].get<double>(), s["rpc_s"].get<double>(),
                   s["p50_ms"].get<double>(), s["rtt_ms"].get<double>(),
                   s["theory_mib_s"].get<double>(), s["efficiency"].get<double>());
      std::printf(
          "{\"sweep\": \"rate_mbit=%.0f peer_credits=%d\", \"concurrency\": %d, \"mib_s\": "
          "%.1f, \"p50_ms\": %.1f, \"theory_mib_s\": %.1f, \"efficiency\": %.3f}\n",
          rate, pc, s["concurrency"].get<int>(), s["mib_s"].get<double>(),
          s["p50_ms"].get<double>(), s["theory_mib_s"].get<double>(),
          s["efficiency"].get<double>());
      std::fflush(stdout);
    }
  }
}

DelayPathOptions path_options(const Options& o, double rate, double loss) {
  DelayPathOptions po;
  po.delay_line = o.delay_line;
  po.delay_ms = o.delay_ms;
  po.rate_mbit = rate;
  po.loss = loss;
  std::fprintf(stderr,
               "delay line: %.0f Mbit/s, %.1f ms RTT, loss %g%%, MTU %d, tcp_rmem/wmem max %lld "
               "MiB\n",
               rate, 2 * o.delay_ms, 100 * loss, po.mtu, (long long)(po.tcp_mem_max >> 20));
  return po;
}

// Writes after one `pfsnet tune --probe --apply` on both ends (`settings` in both
// daemons' files): MiB/s; and, with `read`, reads after them (*read, MiB/s).
double tuned_write(const Options& o, DelayPath& path, double link, const std::string& settings = "",
                   double* read = nullptr) {
  Pair p(o, path, settings);
  p.tune();
  auto run = [&](const char* mode) {
    uint64_t before = queue_drops(path);
    json st = p.selftest(mode, json::array({256}), o.iperf_s, link)["steps"][0];
    std::string line;
    for (const json& v : st["timeline_mib_s"]) line += std::to_string(v.get<int>()) + " ";
    std::fprintf(stderr, "  %s, MiB/s in each second: %s(%llu queue drops)\n", mode, line.c_str(),
                 static_cast<unsigned long long>(queue_drops(path) - before));
    return st["mib_s"].get<double>();
  };
  double mib_s = run("write");
  if (read) *read = run("read");
  std::fprintf(stderr, "  delay line counters so far: %s\n", path.counters().c_str());
  return mib_s;
}

void one_loss(const Options& o, double rate, double loss) {
  DelayPath path(path_options(o, rate, loss));
  if (!path.ok()) fail(path.error());
  double up = iperf3(path, false, o.iperf_s);
  std::fprintf(stderr, "  iperf3, one stream: %.1f MiB/s written\n", up);
  if (o.only == "lossconns") {  // the connections sweep on the lossy line
    conns_sweep(o, path, rate, up);
    return;
  }
  char name[96];
  std::snprintf(name, sizeof name, "wan_%ldm_loss_%gpct_tuned_write_vs_iperf3", long(rate),
                100 * loss);
  print_figure(name, tuned_write(o, path, rate), up, "MiB/s");
  std::snprintf(name, sizeof name, "wan_%ldm_loss_%gpct_tuned_conns4_write_vs_iperf3", long(rate),
                100 * loss);
  print_figure(name, tuned_write(o, path, rate, "[lnet]\nconns_per_peer = 4\n"), up, "MiB/s");
  // Auto-tune alone, from the defaults: the last 10 of 20 s, once it has seen the loss.
  {
    Pair p(o, path, "[tune]\nauto = true\n");
    json st = p.selftest("write", json::array({256}), 20, rate)["steps"][0];
    std::vector<double> tl = st["timeline_mib_s"].get<std::vector<double>>();
    std::string line;
    double late = 0;
    size_t counted = 0;
    for (size_t i = 0; i < tl.size(); ++i) {
      line += std::to_string(static_cast<int>(tl[i])) + " ";
      if (i >= 10 && i < 20) {  // whole seconds 11..20
        late += tl[i];
        ++counted;
      }
    }
    late /= double(std::max<size_t>(1, counted));
    std::fprintf(stderr, "  auto-tune, MiB/s in each second: %s(now%s)\n", line.c_str(),
                 p.autotuned().c_str());
    std::snprintf(name, sizeof name, "wan_%ldm_loss_%gpct_autotune_last10s_write_vs_iperf3",
                  long(rate), 100 * loss);
    print_figure(name, late, up, "MiB/s");
  }
  std::fprintf(stderr, "  delay line counters: %s\n", path.counters().c_str());
}

void one_rate(const Options& o, double rate, bool first) {
  DelayPath path(path_options(o, rate, 0));
  if (!path.ok()) fail(path.error());
  Stream up_stream = iperf3_stream(path, false, o.iperf_s);
  double up = up_stream.mib_s, down = iperf3(path, true, o.iperf_s);
  std::fprintf(stderr,
               "  iperf3, one stream: %.1f MiB/s written (%.2f CPU s per GiB, both ends; in each "
               "second: %s), %.1f MiB/s read\n",
               up, up_stream.cpu_s_per_gib, up_stream.seconds.c_str(), down);
  double link = up * 8 * 1.048576;  // Mbit/s, the selftest's theory line
  auto want = [&](const char* what) { return o.only.empty() || o.only == what; };
  if (first && want("sweep")) sweeps(o, path, rate, up);
  if (o.only == "conns") conns_sweep(o, path, rate, up);
  if (want("default")) {
    Pair p(o, path, "");
    json s = p.selftest("write", json::array({64}), o.iperf_s, link)["steps"][0];
    print_figure(fig(rate, "default_write_vs_iperf3").c_str(), s["mib_s"].get<double>(), up,
                 "MiB/s");
  }
  if (want("tuned")) {
    {
      Pair p(o, path, "");
      p.tune();
      double cpu0 = p.cpu_seconds();
      json w = p.selftest("write", json::array({256}), o.iperf_s, link)["steps"][0];
      double cpu = p.cpu_seconds() - cpu0;
      std::string line;
      for (const json& v : w["timeline_mib_s"]) line += std::to_string(v.get<int>()) + " ";
      std::fprintf(stderr, "  one connection, MiB/s in each second: %s\n", line.c_str());
      print_figure(fig(rate, "tuned_write_vs_iperf3").c_str(), w["mib_s"].get<double>(), up,
                   "MiB/s");
      // What both ends spent per GiB written, against iperf3's (lower is better). The
      // daemons' CPU over the selftest's span includes its set-up and their periodic work.
      double gib = w["mib_s"].get<double>() * o.iperf_s / 1024;
      if (gib > 0 && up_stream.cpu_s_per_gib > 0)
        print_figure(fig(rate, "tuned_write_cpu_s_per_gib_vs_iperf3").c_str(), cpu / gib,
                     up_stream.cpu_s_per_gib, "CPU s/GiB");
      json r = p.selftest("read", json::array({256}), o.iperf_s, link)["steps"][0];
      print_figure(fig(rate, "tuned_read_vs_iperf3").c_str(), r["mib_s"].get<double>(), down,
                   "MiB/s");
    }
    double read = 0;
    print_figure(fig(rate, "tuned_conns4_write_vs_iperf3").c_str(),
                 tuned_write(o, path, link, "[lnet]\nconns_per_peer = 4\n", &read), up, "MiB/s");
    print_figure(fig(rate, "tuned_conns4_read_vs_iperf3").c_str(), read, down, "MiB/s");
  }
  if (want("autotune")) {
    Pair p(o, path, "[tune]\nauto = true\n");
    uint64_t before = queue_drops(path);
    json s = p.selftest("write", json::array({256}), 20, link)["steps"][0];
    std::vector<double> tl = s["timeline_mib_s"].get<std::vector<double>>();
    std::string line;
    for (double v : tl) line += std::to_string(static_cast<int>(v)) + " ";
    std::fprintf(stderr, "  auto-tune, MiB/s in each second: %s(%llu queue drops; now%s)\n",
                 line.c_str(), static_cast<unsigned long long>(queue_drops(path) - before),
                 p.autotuned().c_str());
    double secs = 0;
    for (size_t i = 0; i < tl.size(); ++i)
      if (tl[i] >= 0.9 * up) {
        secs = double(i + 1);  // reached by the end of second i
        break;
      }
    if (secs == 0) {
      std::fprintf(stderr, "  auto-tune did not reach 90%% of iperf3 within 20 s\n");
      secs = 21;
    }
    print_figure(fig(rate, "autotune_seconds_to_90pct").c_str(), secs, 10, "s");
  }
  std::fprintf(stderr, "  delay line counters: %s\n", path.counters().c_str());
}

}  // namespace
}  // namespace pfsnet

int main(int argc, char** argv) {
  pfsnet::Options o;
  CLI::App app{"pfsnet WAN study benchmark, on a real kernel path"};
  app.add_option("--pfsnetd", o.pfsnetd, "path of the pfsnetd binary")->required();
  app.add_option("--delay-line", o.delay_line, "path of pfsnet_delay_line")->required();
  app.add_option("--rates", o.rates, "link rates in Mbit/s (default 1000,4000)")->delimiter(',');
  app.add_option("--losses", o.losses, "packet loss fractions (default 0.0001,0.001)")
      ->delimiter(',');
  app.add_option("--delay-ms", o.delay_ms, "one-way delay (default 25)");
  app.add_option("--node-config", o.node_config,
                 "config lines for every daemon, right after its [node] header (a table they "
                 "open must not be one a step writes too: [lnet] in --only loss or conns)");
  app.add_option("--step-seconds", o.step_s, "seconds per sweep step (default 2)");
  app.add_option(
      "--iperf-seconds", o.iperf_s,
      "seconds of each iperf3 baseline and of each pfsnet figure beside it (default 20)");
  app.add_option(
      "--only", o.only,
      "sweep, default, tuned, autotune, loss, conns (a sweep of RPCs in flight with 1 and 4 "
      "connections per path; only when asked for) or lossconns (that sweep on the lossy line)");
  CLI11_PARSE(app, argc, argv);
  try {
    if (geteuid() != 0) pfsnet::fail("needs root: network namespaces and TUN devices");
    if (o.only != "loss" && o.only != "lossconns")
      for (size_t i = 0; i < o.rates.size(); ++i) pfsnet::one_rate(o, o.rates[i], i == 0);
    if (o.only.empty() || o.only == "loss" || o.only == "lossconns")
      for (double loss : o.losses) pfsnet::one_loss(o, o.rates.back(), loss);
  } catch (const pfsnet::Failure& e) {
    std::fprintf(stderr, "wan_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
