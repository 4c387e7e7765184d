// The 100 Gbit/s WAN study (seed 003) at this machine's scale: two real pfsnetd on
// loopback with link emulation (default 50 ms RTT = 25 ms each way, 5 Gbit/s), 1 MiB
// writes from one client to one server.
//   sweep rows      peer_credits 8, 32, 64 x concurrency 1..256: MiB/s beside the theory
//                   min(link, RPCs x size / RTT) (JSON lines {"sweep": ...})
//   wan_default_vs_theory   defaults (peer_credits 8, max_rpcs_in_flight 8) with the
//                   application asking for 64 in flight; baseline: the theory for 64
//                   (the link)
//   wan_tuned_vs_link       after `pfsnet tune --probe --apply` on both ends; baseline:
//                   the emulated link
//   wan_autotune_seconds_to_90pct   defaults with tune.auto on both ends, 256 asked for:
//                   the first second whose throughput reaches 90% of the link; baseline:
//                   the 30 s target
// Usage: wan_bench --pfsnetd PATH [--rate-mbit R] [--delay-ms D] [--step-seconds S]
//                  [--only sweep|default|tuned|autotune]
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "admin/admin_client.h"
#include "daemons.h"
#include "figure.h"

namespace pfsnet {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

struct Options {
  std::string pfsnetd;
  double rate_mbit = 5000, delay_ms = 25, step_s = 2;
};

// Two daemons (client 127.0.0.21, server 127.0.0.22) with the same settings.
class Pair {
 public:
  Pair(const Options& o, const std::string& settings) : d_(o.pfsnetd, "wan") {
    for (int i = 0; i < 2; ++i)
      d_.start(name(i), "",
               "[[net]]\nnid = \"" + nid(i) +
                   "\"\n[[emulation]]\ndelay_ms = " + std::to_string(o.delay_ms) +
                   "\nrate_mbit = " + std::to_string(o.rate_mbit) + "\n" + settings);
    d_.wait_ready();
  }
  static std::string name(int i) { return i == 0 ? "client" : "server"; }
  static std::string nid(int i) { return i == 0 ? "127.0.0.21@tcp" : "127.0.0.22@tcp"; }

  json ask(int i, const json& req) const {
    auto r = admin_request(d_.socket(name(i)), req, std::chrono::milliseconds(600000));
    if (!r.ok()) {
      std::fprintf(stderr, "wan_bench: %s: %s\n", req.dump().c_str(), r.status().message().c_str());
      std::exit(1);
    }
    return *r;
  }
  json selftest(const json& conc, double duration, double link_mbit) const {
    return ask(0, {{"cmd", "selftest"},
                   {"from", json::array({nid(0)})},
                   {"to", json::array({nid(1)})},
                   {"test", "brw"},
                   {"mode", "write"},
                   {"size", 1 << 20},
                   {"concurrency", conc},
                   {"distribute", "1:1"},
                   {"duration", duration},
                   {"link_mbit", link_mbit}});
  }

 private:
  BenchDaemons d_;
};

double link_mib(const Options& o) { return o.rate_mbit * 1e6 / 8 / (1 << 20); }

void sweeps(const Options& o) {
  json conc = json::array();
  for (int c = 1; c <= 256; c *= 2) conc.push_back(c);
  for (int pc : {8, 32, 64}) {
    Pair p(o, "[lnet]\ncredits = 2048\npeer_credits = " + std::to_string(pc) +
                  "\n[rpc]\nmax_rpcs_in_flight = 256\n");
    json r = p.selftest(conc, o.step_s, o.rate_mbit);
    std::fprintf(stderr, "peer_credits %d (credits 2048, max_rpcs_in_flight 256)\n", pc);
    std::fprintf(stderr, "%6s %9s %9s %8s %8s %12s %6s\n", "conc", "MiB/s", "RPC/s", "p50 ms",
                 "RTT ms", "theory MiB/s", "eff");
    for (const json& s : r["steps"]) {
      std::fprintf(stderr, "%6d %9.1f %9.1f %8.1f %8.1f %12.1f %6.2f\n",
                   s["concurrency"].get<int>(), s["mib_s"].get<double>(), s["rpc_s"].get<double>(),
                   s["p50_ms"].get<double>(), s["rtt_ms"].get<double>(),
                   s["theory_mib_s"].get<double>(), s["efficiency"].get<double>());
      std::printf(
          "{\"sweep\": \"peer_credits=%d\", \"concurrency\": %d, \"mib_s\": %.1f, \"p50_ms\": "
          "%.1f, \"theory_mib_s\": %.1f, \"efficiency\": %.3f}\n",
          pc, s["concurrency"].get<int>(), s["mib_s"].get<double>(), s["p50_ms"].get<double>(),
          s["theory_mib_s"].get<double>(), s["efficiency"].get<double>());
      std::fflush(stdout);
    }
  }
}

void defaults(const Options& o) {
  Pair p(o, "");
  json s = p.selftest(json::array({64}), o.step_s * 2, o.rate_mbit)["steps"][0];
  print_figure("wan_default_vs_theory", s["mib_s"].get<double>(), s["theory_mib_s"].get<double>(),
               "MiB/s");
}

void tuned(const Options& o) {
  Pair p(o, "");
  p.ask(0, {{"cmd", "ping"}, {"nid", Pair::nid(1)}, {"count", 1}});  // connect
  json t = p.ask(0, {{"cmd", "tune"}, {"probe", true}, {"apply", true}});
  p.ask(1, {{"cmd", "tune"}, {"probe", true}, {"apply", true}});
  const json& peer = t["peers"][0];
  std::fprintf(stderr,
               "tune --probe: RTT %.2f ms, bandwidth %.1f MiB/s, BDP %.1f MiB, max_rpcs_in_flight "
               "%lld, peer_credits %lld, credits %lld\n",
               peer["rtt_ms"].get<double>(), peer["bandwidth_mib_s"].get<double>(),
               peer["bdp_mib"].get<double>(),
               t["settings"]["max_rpcs_in_flight"]["recommended"].get<long long>(),
               t["settings"]["peer_credits"]["recommended"].get<long long>(),
               t["settings"]["credits"]["recommended"].get<long long>());
  json s = p.selftest(json::array({256}), o.step_s * 2, o.rate_mbit)["steps"][0];
  print_figure("wan_tuned_vs_link", s["mib_s"].get<double>(), link_mib(o), "MiB/s");
}

void autotune(const Options& o) {
  Pair p(o, "[tune]\nauto = true\n");
  json s = p.selftest(json::array({256}), 30, o.rate_mbit)["steps"][0];
  std::vector<double> tl = s["timeline_mib_s"].get<std::vector<double>>();
  std::string line;
  for (double v : tl) line += std::to_string(static_cast<int>(v)) + " ";
  std::fprintf(stderr, "auto-tune, MiB/s in each second: %s\n", line.c_str());
  double secs = 0;
  for (size_t i = 0; i < tl.size() && i < 30; ++i)
    if (tl[i] >= 0.9 * link_mib(o)) {
      secs = double(i + 1);  // reached by the end of second i
      break;
    }
  if (secs == 0) {
    std::fprintf(stderr, "auto-tune did not reach 90%% of the link within 30 s\n");
    secs = 30 + 1;
  }
  print_figure("wan_autotune_seconds_to_90pct", secs, 30, "s");
}

}  // namespace
}  // namespace pfsnet

int main(int argc, char** argv) {
  pfsnet::Options o;
  std::string only;
  CLI::App app{"pfsnet WAN study benchmark"};
  app.add_option("--pfsnetd", o.pfsnetd, "path of the pfsnetd binary")->required();
  app.add_option("--rate-mbit", o.rate_mbit, "emulated link rate (default 5000)");
  app.add_option("--delay-ms", o.delay_ms, "emulated one-way delay (default 25)");
  app.add_option("--step-seconds", o.step_s, "seconds per sweep step (default 2)");
  app.add_option("--only", only, "sweep, default, tuned or autotune");
  CLI11_PARSE(app, argc, argv);
  std::fprintf(stderr, "WAN emulation: %.0f Mbit/s (%.1f MiB/s), %.1f ms RTT, 1 MiB writes\n",
               o.rate_mbit, pfsnet::link_mib(o), 2 * o.delay_ms);
  if (only.empty() || only == "sweep") pfsnet::sweeps(o);
  if (only.empty() || only == "default") pfsnet::defaults(o);
  if (only.empty() || only == "tuned") pfsnet::tuned(o);
  if (only.empty() || only == "autotune") pfsnet::autotune(o);
  return 0;
}
