// What a router costs (issue 71): a client and a server joined both directly (one network)
// and through a router (two networks), each link a veth pair shaped by tbf at the same rate
// both ways, in three network namespaces -- kernel TCP on real links, no IP forwarding: the
// routed path is pfsnet's router or nothing. A pfsnetd in each namespace; the client's
// self-test drives the traffic.
//   router_bulk_write_1m_routed_vs_direct  MiB/s  1 MiB writes, 8 in flight, to the server's
//                      NID behind the router; baseline: the same writes to its NID on the
//                      client's own network, in turn (--rounds pairs, the median reported).
//   router_rpc_rtt_64b_routed_vs_direct  us  a 64 B PING's mean round trip through the
//                      router (1000 in a row); baseline: direct.
//   router_bulk_write_1m_unshaped_routed_vs_direct  MiB/s  the writes with no shaping
//                      (--unshaped): the three daemons share this machine's CPUs, so the
//                      router's copies cost the ends throughput -- the CPU's bound, not the
//                      network's.
// Needs root (namespaces, tc).
// Usage: router_bench --pfsnetd PATH [--rate-mbit 1000] [--seconds 5] [--rounds 3]
//                     [--unshaped]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "admin/admin_client.h"
#include "daemons.h"
#include "figure.h"

namespace pfsnet {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

int sh(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  std::vector<std::string> copy = args;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return -1;
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "router_bench: %s\n", why.c_str());
  std::exit(1);
}

// Three namespaces C (client), R (router), S (server); links C-S (198.18.71.0/24, tcp1),
// C-R (198.18.72.0/24, tcp2) and R-S (198.18.73.0/24, tcp3), each veth end shaped by tbf.
class Triangle {
 public:
  Triangle(double rate_mbit) {
    tag_ = std::to_string(getpid() % 100000);
    for (const char* n : {"C", "R", "S"}) {
      std::string ns = std::string("pfsrb") + n + tag_;
      if (sh({"ip", "netns", "add", ns}) != 0) fail("ip netns add " + ns);
      made_.push_back(ns);
      sh({"ip", "-n", ns, "link", "set", "lo", "up"});
    }
    link(0, 2, 71, rate_mbit);  // C-S
    link(0, 1, 72, rate_mbit);  // C-R
    link(1, 2, 73, rate_mbit);  // R-S
  }
  ~Triangle() {
    for (const std::string& ns : made_) sh({"ip", "netns", "del", ns});
  }
  const std::string& ns(int i) const { return made_[i]; }
  // Node i's address on subnet s (node index + 1 as the host part).
  static std::string addr(int i, int subnet) {
    return "198.18." + std::to_string(subnet) + "." + std::to_string(i + 1);
  }

 private:
  void link(int a, int b, int subnet, double rate_mbit) {
    std::string ia = "rb" + std::to_string(subnet) + "a" + tag_;
    std::string ib = "rb" + std::to_string(subnet) + "b" + tag_;
    if (sh({"ip", "link", "add", ia, "netns", made_[a], "type", "veth", "peer", "name", ib, "netns",
            made_[b]}) != 0)
      fail("ip link add " + ia);
    for (auto [ns, dev, i] : {std::tuple{made_[a], ia, a}, std::tuple{made_[b], ib, b}}) {
      sh({"ip", "-n", ns, "addr", "add", addr(i, subnet) + "/24", "dev", dev});
      sh({"ip", "-n", ns, "link", "set", dev, "up"});
      if (rate_mbit > 0 &&
          sh({"ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate",
              std::to_string(int64_t(rate_mbit)) + "mbit", "burst", "1mb", "latency", "20ms"}) != 0)
        fail("tc tbf on " + dev);
    }
    // The kernel reports carrier on a new veth up to a second later: the daemons start on
    // links that are up (polling the link's state, bounded: 5 s).
    for (auto [ns, dev] : {std::pair{made_[a], ia}, std::pair{made_[b], ib}}) {
      bool up = false;
      for (int k = 0; k < 100 && !up; ++k) {
        up = sh({"sh", "-c", "ip -n " + ns + " link show dev " + dev + " | grep -q LOWER_UP"}) == 0;
        if (!up) std::this_thread::sleep_for(50ms);
      }
      if (!up) fail("no carrier on " + dev);
    }
  }
  std::string tag_;
  std::vector<std::string> made_;
};

struct Run {
  double direct = 0, routed = 0;
};

class Bench {
 public:
  Bench(const std::string& pfsnetd, double rate_mbit) : net_(rate_mbit), d_(pfsnetd, "router") {
    const std::string lnet = "[lnet]\ncredits = 256\npeer_credits = 64\n";
    d_.start("client", "",
             nid_net(0, 71, 1) + nid_net(0, 72, 2) + lnet + route(3, Triangle::addr(1, 72), 2),
             {"ip", "netns", "exec", net_.ns(0)});
    d_.start("router", "", nid_net(1, 72, 2) + nid_net(1, 73, 3) + lnet + "routing = true\n",
             {"ip", "netns", "exec", net_.ns(1)});
    d_.start("server", "",
             nid_net(2, 71, 1) + nid_net(2, 73, 3) + lnet + route(2, Triangle::addr(1, 73), 3),
             {"ip", "netns", "exec", net_.ns(2)});
    d_.wait_ready();
    for (const std::string& to : {direct_to(), routed_to()})
      ask({{"cmd", "ping"}, {"nid", to}, {"count", 4}});  // connected, both ways
  }
  static std::string nid_net(int i, int subnet, int net) {
    return "[[net]]\nnid = \"" + Triangle::addr(i, subnet) + "@tcp" + std::to_string(net) + "\"\n";
  }
  static std::string route(int net, const std::string& gw_addr, int gw_net) {
    return "[[route]]\nnet = \"tcp" + std::to_string(net) + "\"\ngateway = \"" + gw_addr + "@tcp" +
           std::to_string(gw_net) + "\"\n";
  }
  std::string direct_to() const { return Triangle::addr(2, 71) + "@tcp1"; }
  std::string routed_to() const { return Triangle::addr(2, 73) + "@tcp3"; }
  std::string from(bool routed) const {
    return routed ? Triangle::addr(0, 72) + "@tcp2" : Triangle::addr(0, 71) + "@tcp1";
  }

  json ask(const json& req) const {
    auto r = admin_request(d_.socket("client"), req, std::chrono::milliseconds(300000));
    if (!r.ok()) fail(req.dump() + ": " + r.status().message());
    return *r;
  }
  double write_mib_s(bool routed, double seconds) const {
    json r = ask({{"cmd", "selftest"},
                  {"from", json::array({from(routed)})},
                  {"to", json::array({routed ? routed_to() : direct_to()})},
                  {"test", "brw"},
                  {"mode", "write"},
                  {"size", 1 << 20},
                  {"concurrency", json::array({8})},
                  {"distribute", "1:1"},
                  {"duration", seconds}});
    const json& st = r["steps"][0];
    if (st.value("errors", uint64_t(0)) != 0) fail("self-test errors: " + st.dump());
    return st["mib_s"].get<double>();
  }
  double rtt_us(bool routed) const {
    json r = ask({{"cmd", "ping"},
                  {"nid", routed ? routed_to() : direct_to()},
                  {"count", 1000},
                  {"size", 64},
                  {"timeout", 5}});
    if (r["failed"].get<int64_t>() != 0) fail("ping failed: " + r.dump());
    return r["rtt_ms"]["avg"].get<double>() * 1000;
  }
  json routerstat() const {
    auto r = admin_request(d_.socket("router"), {{"cmd", "routerstat"}}, 10000ms);
    return r.ok() ? *r : json();
  }

 private:
  Triangle net_;
  BenchDaemons d_;
};

// `rounds` pairs (baseline, then the routed run), the median pair by ratio printed.
void measure(const char* name, const char* unit, int rounds, const std::function<double()>& direct,
             const std::function<double()>& routed) {
  std::vector<Run> runs;
  for (int i = 0; i < rounds; ++i) {
    Run r;
    r.direct = direct();
    r.routed = routed();
    runs.push_back(r);
  }
  std::sort(runs.begin(), runs.end(),
            [](const Run& a, const Run& b) { return a.routed / a.direct < b.routed / b.direct; });
  std::fprintf(stderr, "%s: ratios (routed/direct) of %d pairs:", name, rounds);
  for (const Run& r : runs)
    std::fprintf(stderr, " %.3f (%.1f/%.1f)", r.routed / r.direct, r.routed, r.direct);
  std::fprintf(stderr, "\n");
  const Run& m = runs[runs.size() / 2];
  print_figure(name, m.routed, m.direct, unit);
}

}  // namespace
}  // namespace pfsnet

int main(int argc, char** argv) {
  using namespace pfsnet;
  CLI::App app{"router_bench: 1 MiB writes and 64 B round trips through a router and direct"};
  std::string pfsnetd;
  double rate = 1000, seconds = 5;
  int rounds = 3;
  bool unshaped = false;
  app.add_option("--pfsnetd", pfsnetd, "path of the pfsnetd binary")->required();
  app.add_option("--rate-mbit", rate, "each link's rate (tbf, both ways)");
  app.add_option("--seconds", seconds, "duration of each write run");
  app.add_option("--rounds", rounds, "direct/routed pairs per figure");
  app.add_flag("--unshaped", unshaped, "also the writes on unshaped links (the CPU's bound)");
  CLI11_PARSE(app, argc, argv);
  if (geteuid() != 0) {
    std::fprintf(stderr, "router_bench: needs root (namespaces, tc); skipped\n");
    return 0;
  }
  {
    Bench b(pfsnetd, rate);
    measure(
        "router_bulk_write_1m_routed_vs_direct", "MiB/s", rounds,
        [&] { return b.write_mib_s(false, seconds); },
        [&] { return b.write_mib_s(true, seconds); });
    measure(
        "router_rpc_rtt_64b_routed_vs_direct", "us", rounds, [&] { return b.rtt_us(false); },
        [&] { return b.rtt_us(true); });
    std::fprintf(stderr, "router_bench: the router's routerstat: %s\n",
                 b.routerstat().dump().c_str());
  }
  if (unshaped) {
    Bench b(pfsnetd, 0);
    measure(
        "router_bulk_write_1m_unshaped_routed_vs_direct", "MiB/s", rounds,
        [&] { return b.write_mib_s(false, seconds); },
        [&] { return b.write_mib_s(true, seconds); });
  }
  return 0;
}
