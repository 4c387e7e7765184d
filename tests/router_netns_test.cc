// Routing through real namespaces (issue 71's "done when"): a client on network A
// (198.18.1.0/24, @tcp1), a server on network B (198.18.2.0/24, @tcp2) and two routers with a
// veth on each -- bridges in a switch namespace, no IP forwarding anywhere: LNet-style routing
// is the only way from A to B. Under load (1 MiB writes and reads with their data checked at
// the far end, and 64 B pings) one router is killed (SIGKILL), started again, then loses its
// B side (its link set down from outside: an asymmetric failure), then gets it back; then
// the other is stopped (SIGSTOP: silent, its connections open) and continued. No
// application RPC fails; each router is out of use within router_ping_interval +
// router_ping_timeout (2 s here) of its failure, and used again after. The test creates and removes
// everything; it needs root.
#include <gtest/gtest.h>

#include "netns_rails.h"

namespace pfsnet::testing::netns {
namespace routed {

// Namespaces: a switch with bridge brA and brB; each node with a veth to the bridge of each
// network it is on.
class RoutedNetns {
 public:
  struct Node {
    std::string name;
    std::vector<int> nets;  // 1 = A (@tcp1), 2 = B (@tcp2)
    std::string extra;      // TOML appended (routes, lnet.routing)
  };
  explicit RoutedNetns(std::vector<Node> nodes) : nodes_(std::move(nodes)) {
    ip_ = ip_bin();
    if (geteuid() != 0 || ip_.empty()) {
      skip_ = "needs root and iproute2";
      return;
    }
    tag_ = std::to_string(getpid() % 100000);
    sw_ = "pfsRW" + tag_;
    if (!ip({"netns", "add", sw_})) {
      skip_ = "ip netns add failed (no network namespaces here)";
      return;
    }
    spaces_.push_back(sw_);
    for (int net : {1, 2})
      ok_ = ok_ && ip({"-n", sw_, "link", "add", "br" + std::to_string(net), "type", "bridge"}) &&
            ip({"-n", sw_, "link", "set", "br" + std::to_string(net), "up"});
    for (size_t i = 0; i < nodes_.size() && ok_; ++i) {
      ok_ = ip({"netns", "add", ns(i)});
      if (!ok_) break;
      spaces_.push_back(ns(i));
      ok_ = ip({"-n", ns(i), "link", "set", "lo", "up"});
      for (int net : nodes_[i].nets) {
        std::string sw_side = "s" + std::to_string(i) + "n" + std::to_string(net) + "_" + tag_;
        ok_ = ok_ &&
              ip({"link", "add", ifname(i, net), "netns", ns(i), "type", "veth", "peer", "name",
                  sw_side, "netns", sw_}) &&
              ip({"-n", sw_, "link", "set", sw_side, "master", "br" + std::to_string(net)}) &&
              ip({"-n", sw_, "link", "set", sw_side, "up"}) &&
              ip({"-n", ns(i), "addr", "add", addr(i, net) + "/24", "dev", ifname(i, net)}) &&
              ip({"-n", ns(i), "link", "set", ifname(i, net), "up"});
      }
    }
    for (size_t i = 0; i < nodes_.size() && ok_; ++i)
      for (int net : nodes_[i].nets) ok_ = ok_ && wait_carrier(i, net);
    if (!ok_) return;
    write_file(dir_.file("cluster.key"), "routed-netns-test-cluster-key-01", 0600);
    for (size_t i = 0; i < nodes_.size() && ok_; ++i) {
      socket_.push_back(dir_.file(nodes_[i].name + ".sock"));
      std::string cfg = "[node]\nname = \"" + nodes_[i].name + "\"\ncluster_key_file = \"" +
                        dir_.file("cluster.key") + "\"\nadmin_socket = \"" + socket_[i] + "\"\n";
      for (int net : nodes_[i].nets) cfg += "[[net]]\nnid = \"" + nid(i, net) + "\"\n";
      write_file(dir_.file(nodes_[i].name + ".toml"), cfg + nodes_[i].extra);
      daemon_.push_back(nullptr);
      ok_ = start(i);
    }
  }
  ~RoutedNetns() {
    for (auto& d : daemon_) d.reset();  // SIGKILL by PID, reaped
    for (auto& n : spaces_) ip({"netns", "del", n});
  }

  bool start(size_t i) {
    daemon_[i] = std::make_unique<Process>(std::vector<std::string>{
        ip_, "netns", "exec", ns(i), PFSNETD_BIN, "--config", dir_.file(nodes_[i].name + ".toml")});
    return daemon_[i]->wait_for_output("pfsnetd started", 15000ms);
  }
  void kill(size_t i) { daemon_[i].reset(); }
  Process& process(size_t i) { return *daemon_[i]; }
  bool link(size_t i, int net, bool up) {
    return ip({"-n", ns(i), "link", "set", ifname(i, net), up ? "up" : "down"});
  }
  const std::string& skip() const { return skip_; }
  bool ok() const { return ok_; }
  static std::string addr(size_t i, int net) {
    return "198.18." + std::to_string(net) + "." + std::to_string(10 + i);
  }
  static std::string nid(size_t i, int net) { return addr(i, net) + "@tcp" + std::to_string(net); }
  const std::string& socket(size_t i) const { return socket_[i]; }
  std::string output(size_t i) { return daemon_[i] ? daemon_[i]->output() : ""; }
  json cli(size_t i, std::vector<std::string> args) {
    std::vector<std::string> argv = {PFSNET_BIN, "--socket", socket_[i]};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("--json");
    auto [rc, out] = run(argv, 30000ms);
    return rc == 0 ? last_json_line(out) : json();
  }

 private:
  std::string ns(size_t i) const { return "pfsR" + std::to_string(i) + "_" + tag_; }
  std::string ifname(size_t i, int net) const {
    return "r" + std::to_string(i) + "n" + std::to_string(net) + "_" + tag_;
  }
  bool ip(std::vector<std::string> args) {
    args.insert(args.begin(), ip_);
    auto [rc, out] = run(args, 10000ms);
    if (rc != 0) std::fprintf(stderr, "ip failed (%d): %s\n", rc, out.c_str());
    return rc == 0;
  }
  bool wait_carrier(size_t i, int net) {
    for (int k = 0; k < 100; ++k) {
      auto [rc, out] = run({ip_, "-n", ns(i), "link", "show", "dev", ifname(i, net)}, 5000ms);
      if (rc == 0 && out.find("LOWER_UP") != std::string::npos) return true;
      std::this_thread::sleep_for(50ms);  // polling the kernel's link state, bounded (5 s)
    }
    return false;
  }

  std::vector<Node> nodes_;
  std::string ip_, skip_, tag_, sw_;
  bool ok_ = true;
  std::vector<std::string> spaces_;
  TempDir dir_;
  std::vector<std::string> socket_;
  std::vector<std::unique_ptr<Process>> daemon_;
};

// The client's route through gateway `gw` (null when it has none).
json route_via(RoutedNetns& c, size_t node, const std::string& gw) {
  json r = c.cli(node, {"route", "show"});
  if (!r.is_object()) return json();
  for (const json& e : r["routes"])
    if (e["gateway"] == gw) return e;
  return json();
}

// Seconds from `t0` until `node`'s route through `gw` is out of use (-1: not within 10 s);
// `route` is what route show said of it then. The daemon's own stamp of the change of its
// router pings (since_unix_ms) when that came first: the poll's own delay (a CLI process
// a round) is not the router's.
double seconds_until_left(RoutedNetns& c, size_t node, const std::string& gw, Clock::time_point t0,
                          json* route) {
  const int64_t t0_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count() -
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  double after = -1;
  eventually(
      [&] {
        *route = route_via(c, node, gw);
        if (route->is_object() && (*route)["usable"] == false)
          after = std::chrono::duration<double>(Clock::now() - t0).count();
        return after >= 0;
      },
      10000ms);
  const int64_t stamped = route->is_object() ? route->value("since_unix_ms", int64_t(0)) : 0;
  if (after >= 0 && stamped > t0_ms) after = std::min(after, double(stamped - t0_ms) / 1000.0);
  return after;
}

TEST(RouterNetnsTest, TwoRoutersUnderLoadOneKilledThenCutFromItsFarSideAndNoRpcFails) {
  enum { kClient, kR1, kR2, kServer };
  // The stated bound: router_ping_interval + router_ping_timeout, plus the daemon's timer
  // ticks that send a ping and expire it (100 ms each).
  constexpr double kBound = 1.0 + 1.0 + 0.2;
  // Router pings every second, one second to answer: a router is out of use within 2 s.
  const std::string lnet =
      "[lnet]\ntransaction_timeout = 9\nretry_count = 2\nrouter_ping_interval = 1\n"
      "router_ping_timeout = 1\n";
  const std::string via_r = "[[route]]\nnet = \"tcp2\"\ngateway = \"" + RoutedNetns::nid(kR1, 1) +
                            "\"\n[[route]]\nnet = \"tcp2\"\ngateway = \"" +
                            RoutedNetns::nid(kR2, 1) + "\"\n";
  const std::string back = "[[route]]\nnet = \"tcp1\"\ngateway = \"" + RoutedNetns::nid(kR1, 2) +
                           "\"\n[[route]]\nnet = \"tcp1\"\ngateway = \"" +
                           RoutedNetns::nid(kR2, 2) + "\"\n";
  RoutedNetns c({{"client", {1}, lnet + via_r},
                 {"r1", {1, 2}, lnet + "routing = true\n"},
                 {"r2", {1, 2}, lnet + "routing = true\n"},
                 {"server", {2}, lnet + back}});
  if (!c.skip().empty()) GTEST_SKIP() << c.skip();
  ASSERT_TRUE(c.ok()) << c.output(kClient);
  const std::string server = RoutedNetns::nid(kServer, 2), r1 = RoutedNetns::nid(kR1, 1);
  const auto t0 = Clock::now();
  auto since = [&](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };

  // Both routes up and used before the load starts.
  ASSERT_TRUE(eventually(
      [&] {
        json a = route_via(c, kClient, r1), b = route_via(c, kClient, RoutedNetns::nid(kR2, 1));
        return a.is_object() && b.is_object() && a["usable"] == true && b["usable"] == true;
      },
      20000ms));
  {
    auto [rc, out] =
        run({PFSNET_BIN, "--socket", c.socket(kClient), "ping", server, "--count", "4", "--json"},
            30000ms);
    ASSERT_EQ(rc, 0) << out;
  }

  // The load: 1 MiB writes, 1 MiB reads (each checked at the far end) and 64 B pings, each a
  // pfsnet ping of its own for the whole run (~35 s), each RPC with a 9 s deadline.
  struct Load {
    std::string what;
    std::unique_ptr<Process> p;
  };
  std::vector<Load> load;
  for (auto [what, args] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"write",
            {"--mode", "write", "--size", "1048576", "--count", "150", "--interval", "0.2"}},
           {"read", {"--mode", "read", "--size", "1048576", "--count", "150", "--interval", "0.2"}},
           {"small", {"--count", "600", "--interval", "0.05"}}}) {
    std::vector<std::string> argv = {PFSNET_BIN,  "--socket", c.socket(kClient), "ping", server,
                                     "--timeout", "9",        "--json"};
    argv.insert(argv.end(), args.begin(), args.end());
    load.push_back({what, std::make_unique<Process>(argv)});
  }
  std::this_thread::sleep_for(3s);  // the load runs through both routers before the faults
  const uint64_t r1_before = c.cli(kR1, {"routerstat"}).value("forwarded", uint64_t(0));
  EXPECT_GT(r1_before, 10u);

  // 1. r1 killed: out of use within a ping interval and its timeout (2 s), plus a poll.
  c.kill(kR1);
  const auto killed = Clock::now();
  json killed_route;
  const double left = seconds_until_left(c, kClient, r1, killed, &killed_route);
  ASSERT_GE(left, 0) << killed_route.dump();
  EXPECT_LE(left, kBound) << "the killed router was used for " << left << " s";
  std::fprintf(stderr, "killed router out of use after %.2f s\n", left);
  std::this_thread::sleep_for(2s);  // the load on r2 alone

  // ... started again: used again within a ping interval of its start.
  ASSERT_TRUE(c.start(kR1)) << c.output(kR1);
  const auto restarted = Clock::now();
  double back_after = -1;
  ASSERT_TRUE(eventually(
      [&] {
        json r = route_via(c, kClient, r1);
        if (r.is_object() && r["usable"] == true && back_after < 0) back_after = since(restarted);
        return back_after >= 0 && c.cli(kR1, {"routerstat"}).value("forwarded", uint64_t(0)) > 10;
      },
      20000ms));
  std::fprintf(stderr, "restarted router used again after %.2f s\n", back_after);

  // 2. r1 loses its B side (its link down, from outside): the client's next router ping
  // hears it and leaves r1 for tcp2 -- within 2 s and a poll.
  ASSERT_TRUE(c.link(kR1, 2, false));
  const auto cut = Clock::now();
  json asym_route;
  const double asym = seconds_until_left(c, kClient, r1, cut, &asym_route);
  ASSERT_GE(asym, 0) << asym_route.dump();
  EXPECT_LE(asym, kBound);
  EXPECT_NE(asym_route["state"].get<std::string>().find("asymmetric"), std::string::npos)
      << asym_route.dump();
  std::fprintf(stderr, "router without its far side out of use after %.2f s: %s\n", asym,
               asym_route["state"].get<std::string>().c_str());
  std::this_thread::sleep_for(2s);
  ASSERT_TRUE(c.link(kR1, 2, true));
  const uint64_t r1_healed = c.cli(kR1, {"routerstat"}).value("forwarded", uint64_t(0));
  ASSERT_TRUE(eventually(
      [&] {
        json r = route_via(c, kClient, r1);
        return r.is_object() && r["usable"] == true &&
               c.cli(kR1, {"routerstat"}).value("forwarded", uint64_t(0)) > r1_healed + 10;
      },
      20000ms));

  // 3. r2 goes silent (SIGSTOP: its connections stay open, nothing answers): out of use
  // within a ping interval and its timeout, the RPCs caught in it sent again through r1
  // within their deadlines; continued, it is used again.
  const std::string r2 = RoutedNetns::nid(kR2, 1);
  ASSERT_TRUE(c.process(kR2).stop());
  const auto stopped = Clock::now();
  json silent_route;
  const double silent = seconds_until_left(c, kClient, r2, stopped, &silent_route);
  ASSERT_GE(silent, 0) << silent_route.dump();
  EXPECT_LE(silent, kBound);
  std::fprintf(stderr, "silent router out of use after %.2f s: %s\n", silent,
               silent_route["state"].get<std::string>().c_str());
  // `pfsnet health` on the client names it, and that tcp2 is still reached through r1.
  json router_problem;
  EXPECT_TRUE(eventually(
      [&] {
        json h = c.cli(kClient, {"health"});
        for (const json& p : h.value("problems", json::array()))
          if (p["cause"] == "ROUTER" && p["subject"] == r2) router_problem = p;
        return router_problem.is_object();
      },
      10000ms));
  EXPECT_NE(router_problem.value("evidence", "").find("tcp2 still reached"), std::string::npos)
      << router_problem.dump();
  std::this_thread::sleep_for(2s);
  c.process(kR2).kill(SIGCONT);
  ASSERT_TRUE(eventually(
      [&] {
        json r = route_via(c, kClient, r2);
        return r.is_object() && r["usable"] == true;
      },
      20000ms));

  // The load ends: not one RPC failed, and each one's data was checked.
  for (Load& l : load) {
    ASSERT_EQ(l.p->wait_exit(120000ms), 0) << l.what << ": " << l.p->output();
    json j = last_json_line(l.p->output());
    EXPECT_EQ(j["failed"], 0) << l.what << ": " << j.dump();
    EXPECT_GT(j["ok"].get<int>(), 100) << l.what << ": " << j.dump();  // 150, 150, 600
  }
  json rs2 = c.cli(kR2, {"routerstat"});
  EXPECT_GT(rs2["forwarded"].get<uint64_t>(), 500u) << rs2.dump();
  std::fprintf(stderr, "run took %.1f s\n", since(t0));
}

}  // namespace routed
}  // namespace pfsnet::testing::netns
