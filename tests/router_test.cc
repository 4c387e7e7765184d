// Routing between networks with real daemons (issue 71): a client on tcp1, a server on
// tcp2 and a router with an NI on each, each a pfsnetd on its own loopback addresses. The
// client reaches the server only through the router: 1 MiB writes and reads (data checked
// at the far end) and small pings; routes added and deleted at run time; the router's
// counters and the client's view of its route; what a client can leave in a router.
#include <gtest/gtest.h>

#include "cluster.h"

namespace pfsnet::testing {
namespace routed_daemons {

// `pfsnet ping` from `from` to `to`; `--json` unless `human` (whose lines name each error).
std::pair<int, std::string> ping(const Daemon& from, const std::string& to,
                                 std::vector<std::string> extra, bool human = false,
                                 const std::string& timeout = "10") {
  std::vector<std::string> argv = {PFSNET_BIN, "--socket",  from.socket(), "ping",
                                   to,         "--timeout", timeout};
  if (!human) argv.push_back("--json");
  argv.insert(argv.end(), extra.begin(), extra.end());
  return run(argv, 60000ms);
}

nlohmann::json cli(const Daemon& d, std::vector<std::string> args) {
  std::vector<std::string> argv = {PFSNET_BIN, "--socket", d.socket()};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("--json");
  auto [rc, out] = run(argv, 20000ms);
  EXPECT_EQ(rc, 0) << out;
  return rc == 0 ? last_json_line(out) : nlohmann::json();
}

// Three daemons on loopback (hosts base + 1 to base + 4): a client on the client's network
// (base + 1), a router with an NI there (base + 2) and one on the server's network (base +
// 3), and a server on the server's network (base + 4). The client has a route to the
// server's network through the router and the server one back, unless told otherwise;
// `routing` off leaves the middle node a plain node on both networks. Each daemon's own
// `extra` TOML comes first (lnet keys, then tables), the NI and routes after it.
struct RoutedSpec {
  int base = 0;
  std::string client_net = "tcp1", server_net = "tcp2";
  bool routing = true, client_route = true, server_route = true;
  DaemonOptions router, server, client;
};

struct Routed {
  Routed(const TempDir& dir, const std::string& key, RoutedSpec s)
      : router_a(loopback(s.base + 2) + "@" + s.client_net),
        router_b(loopback(s.base + 3) + "@" + s.server_net) {
    auto route = [](const std::string& net, const std::string& gw) {
      return "[[route]]\nnet = \"" + net + "\"\ngateway = \"" + gw + "\"\n";
    };
    s.router.net = s.client_net;
    s.router.extra = (s.routing ? "routing = true\n" : "") + s.router.extra + "[[net]]\nnid = \"" +
                     router_b + "\"\n" +
                     (s.server_net.rfind("o2ib", 0) == 0 ? "provider = \"tcp\"\n" : "");
    s.server.net = s.server_net;
    if (s.server_route) s.server.extra += route(s.client_net, router_b);
    s.client.net = s.client_net;
    if (s.client_route) s.client.extra += route(s.server_net, router_a);
    router = std::make_unique<Daemon>(dir, s.base + 2, key, s.router);
    server = std::make_unique<Daemon>(dir, s.base + 4, key, s.server);
    client = std::make_unique<Daemon>(dir, s.base + 1, key, s.client);
  }
  bool ready() const { return router->ready() && server->ready() && client->ready(); }
  // What the three said (for a failed start).
  std::string output() {
    return router->process().output() + server->process().output() + client->process().output();
  }
  const std::string router_a, router_b;  // the router's NIDs on the client's and server's nets
  std::unique_ptr<Daemon> router, server, client;
};

// The cluster's key in `dir`.
std::string routed_key(const TempDir& dir) {
  const std::string key = dir.file("cluster.key");
  write_file(key, "routed-daemons-test-cluster-key", 0600);
  return key;
}

TEST(RoutedDaemonsTest, BulkAndPingsCrossARouterAndRoutesChangeAtRunTime) {
  TempDir dir;
  RoutedSpec spec;
  spec.client_route = false;  // added at run time below
  Routed n(dir, routed_key(dir), spec);
  ASSERT_TRUE(n.ready()) << n.output();
  Daemon &router = *n.router, &server = *n.server, &client = *n.client;
  const std::string& router_a = n.router_a;
  const std::string target = server.nid().to_string();

  // No route yet: the ping fails at once, saying so.
  {
    auto [rc, out] = ping(client, target, {"--count", "1"}, true);
    EXPECT_NE(rc, 0) << out;
    EXPECT_NE(out.find("no route"), std::string::npos) << out;
  }
  nlohmann::json added =
      cli(client, {"route", "add", "--net", "tcp2", "--gateway", router_a, "--priority", "3"});
  EXPECT_EQ(added["added"]["net"], "tcp2") << added.dump();

  // 1 MiB writes and reads through the router, the data checked at the far end; then small
  // pings.
  for (const char* mode : {"write", "read"}) {
    auto [rc, out] = ping(client, target, {"--mode", mode, "--size", "1048576", "--count", "5"});
    ASSERT_EQ(rc, 0) << out;
    nlohmann::json j = last_json_line(out);
    EXPECT_EQ(j["ok"], 5) << out;
    EXPECT_EQ(j["failed"], 0) << out;
  }
  {
    auto [rc, out] = ping(client, target, {"--count", "20"});
    ASSERT_EQ(rc, 0) << out;
    EXPECT_EQ(last_json_line(out)["ok"], 20) << out;
  }

  // Self-test across the router (lnet_selftest's brw, writes and reads), every RPC answered.
  for (const char* mode : {"write", "read"}) {
    nlohmann::json st = cli(
        client, {"selftest", "--from", client.nid().to_string(), "--to", target, "--test", "brw",
                 "--mode", mode, "--size", "256K", "--concurrency", "4", "--duration", "1"});
    ASSERT_TRUE(st.is_object()) << mode;
    const nlohmann::json& step = st["steps"][0];
    EXPECT_EQ(step["errors"], 0) << step.dump();
    EXPECT_GT(step["rpcs"].get<uint64_t>(), 10u) << step.dump();
  }

  // The client's route: usable, connected to its gateway, with sends on it.
  nlohmann::json routes = cli(client, {"route", "show"});
  ASSERT_EQ(routes["routes"].size(), 1u) << routes.dump();
  const nlohmann::json& r = routes["routes"][0];
  EXPECT_EQ(r["gateway"], router_a);
  EXPECT_EQ(r["priority"], 3);
  EXPECT_EQ(r["state"], "up");
  EXPECT_TRUE(r["usable"].get<bool>());
  EXPECT_TRUE(r["connected"].get<bool>());
  EXPECT_GE(r["sent"].get<uint64_t>(), 30u);
  EXPECT_FALSE(routes["routing"].get<bool>());
  // The router forwarded both ways, every buffer given back; the ends counted theirs.
  nlohmann::json rs = cli(router, {"routerstat"});
  EXPECT_TRUE(rs["routing"].get<bool>());
  EXPECT_GE(rs["forwarded"].get<uint64_t>(), 2u * 30u) << rs.dump();
  EXPECT_GE(rs["forwarded_bytes"].get<uint64_t>(), 10u << 20) << rs.dump();
  for (const nlohmann::json& p : rs["pools"]) EXPECT_EQ(p["in_use"], 0) << rs.dump();
  EXPECT_EQ(rs["dropped"]["no_route"], 0);
  EXPECT_GE(cli(client, {"routerstat"})["sent_routed"].get<uint64_t>(), 30u);
  EXPECT_GE(cli(server, {"routerstat"})["received_routed"].get<uint64_t>(), 30u);
  // The two ends never connected: the server's peers are the router's NI alone.
  nlohmann::json peers = cli(server, {"peers"});
  for (const nlohmann::json& p : peers["peers"]) {
    if (p["nid"] == client.nid().to_string()) {
      EXPECT_EQ(p["connections"], 0) << p.dump();
    }
  }

  // Bad requests change nothing.
  for (std::vector<std::string> bad :
       {std::vector<std::string>{"route", "add", "--net", "tcp1", "--gateway", router_a},
        {"route", "add", "--net", "tcp2", "--gateway", "198.18.0.1@tcp9"},
        {"route", "add", "--net", "tcpx", "--gateway", router_a},
        {"route", "del", "--net", "tcp7"}}) {
    std::vector<std::string> argv = {PFSNET_BIN, "--socket", client.socket()};
    argv.insert(argv.end(), bad.begin(), bad.end());
    auto [rc, out] = run(argv, 20000ms);
    EXPECT_NE(rc, 0) << out;
  }
  EXPECT_EQ(cli(client, {"route", "show"})["routes"].size(), 1u);

  // Deleted: the next ping fails again.
  cli(client, {"route", "del", "--net", "tcp2"});
  EXPECT_TRUE(cli(client, {"routes"})["routes"].empty());
  auto [rc, out] = ping(client, target, {"--count", "1"}, true);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("no route"), std::string::npos) << out;
}

// A gateway that is not a router (two networks, lnet.routing off) says so when pinged: the
// client does not use it, and a send through it fails at once, saying why (a frame that
// reached it anyway would be dropped, counted: RouterTest.ANodeThatDoesNotRouteDrops...).
TEST(RoutedDaemonsTest, AGatewayThatDoesNotRouteIsNotUsedAndSendsSayWhy) {
  TempDir dir;
  RoutedSpec spec;
  spec.base = 10;
  spec.routing = false;  // two networks, routing off
  spec.server_route = false;
  spec.client.extra = "router_ping_interval = 1\n";
  Routed n(dir, routed_key(dir), spec);
  ASSERT_TRUE(n.ready()) << n.output();
  Daemon &mid = *n.router, &server = *n.server, &client = *n.client;
  nlohmann::json route;
  ASSERT_TRUE(eventually(
      [&] {
        nlohmann::json r = cli(client, {"route", "show"});
        if (!r.is_object() || r["routes"].size() != 1) return false;
        route = r["routes"][0];
        return route["usable"] == false;
      },
      10000ms))
      << route.dump();
  EXPECT_NE(route["state"].get<std::string>().find("does not route"), std::string::npos)
      << route.dump();
  auto [rc, out] = ping(client, server.nid().to_string(), {"--count", "1"}, true, "2");
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("does not route"), std::string::npos) << out;
  EXPECT_FALSE(cli(mid, {"routerstat"})["routing"].get<bool>());
  EXPECT_EQ(cli(server, {"routerstat"})["received_routed"], 0);
}

// pfsnet netverify to a node on another network: the path goes from the client's NI
// towards its gateway through the router, its RPC checks (handshake, round trip, clocks,
// settings) end to end; its port, MTU and IP routing are the hops', skipped naming the
// router -- and nothing fails.
TEST(RoutedDaemonsTest, NetverifyChecksARoutedPathEndToEndAndNamesItsRouter) {
  TempDir dir;
  RoutedSpec spec;
  spec.base = 40;
  Routed n(dir, routed_key(dir), spec);
  ASSERT_TRUE(n.ready()) << n.output();
  Daemon &server = *n.server, &client = *n.client;
  const std::string& router_a = n.router_a;
  auto [rc, out] = run({PFSNET_BIN, "--socket", client.socket(), "netverify",
                        server.nid().to_string(), "--no-bandwidth", "--json"},
                       60000ms);
  EXPECT_EQ(rc, 0) << out;
  nlohmann::json r = last_json_line(out);
  ASSERT_EQ(r["nodes"].size(), 1u) << out;
  ASSERT_EQ(r["nodes"][0]["paths"].size(), 1u) << out;
  const nlohmann::json& p = r["nodes"][0]["paths"][0];
  EXPECT_EQ(p["local"], client.nid().to_string());
  EXPECT_EQ(p["peer"], server.nid().to_string());
  EXPECT_EQ(p["via"], nlohmann::json::array({router_a})) << p.dump();
  EXPECT_EQ(p["failed"], false) << p.dump();
  EXPECT_GT(p["figures"]["rtt_ms"].get<double>(), 0) << p.dump();
  std::map<std::string, std::string> result;
  for (const nlohmann::json& c : p["checks"])
    result[c["check"].get<std::string>()] = c["result"].get<std::string>();
  for (const char* hop : {"port", "mtu", "routing"}) EXPECT_EQ(result[hop], "SKIP") << hop;
  for (const char* e2e : {"handshake", "rtt", "clock", "settings"})
    EXPECT_EQ(result[e2e], "PASS") << e2e << ": " << p.dump();
  // The text names the router.
  auto [trc, text] = run({PFSNET_BIN, "--socket", client.socket(), "netverify",
                          server.nid().to_string(), "--no-bandwidth"},
                         60000ms);
  EXPECT_NE(text.find("(via " + router_a + ")"), std::string::npos) << text;
}

// A client that could flood a router: peer_credits 256 and 64 self-test writes of 1 MiB in
// flight, through a router of peer_credits 4, at a server stopped from outside (SIGSTOP)
// so that nothing drains. The router grants the client a window of 4, so it holds at most
// four of the client's frames, however long the server is away; once the server goes on,
// every write completes.
TEST(RoutedDaemonsTest, AClientWithManyCreditsLeavesNoMoreThanTheRoutersWindowInIt) {
  TempDir dir;
  RoutedSpec spec;
  spec.base = 20;
  spec.router.peer_credits = 4;
  spec.client.peer_credits = 256;
  spec.client.extra = "[rpc]\nmax_rpcs_in_flight = 64\n";
  Routed n(dir, routed_key(dir), spec);
  ASSERT_TRUE(n.ready()) << n.output();
  Daemon &router = *n.router, &server = *n.server, &client = *n.client;
  const std::string from = client.nid().to_string(), to = server.nid().to_string();

  Process selftest({PFSNET_BIN, "--socket", client.socket(), "selftest", "--from", from, "--to", to,
                    "--size", "1M", "--concurrency", "64", "--duration", "3", "--json"});
  ASSERT_TRUE(eventually([&] { return cli(router, {"routerstat"})["forwarded"] >= 64; }, 20000ms))
      << cli(router, {"routerstat"}).dump();
  ASSERT_TRUE(server.process().stop());
  // The router fills to the client's window and stays there while the server is away.
  constexpr int64_t kFrameMost = (1 << 20) + 4096;  // a write: header, its payload, 1 MiB
  int64_t held = 0;
  EXPECT_TRUE(eventually(
      [&] {
        held = cli(router, {"routerstat"})["held_bytes"].get<int64_t>();
        return held >= 4 * (1 << 20);
      },
      10000ms))
      << held;
  EXPECT_LE(held, 4 * kFrameMost);
  // The rest wait at the client, for the router's window: of its 64 writes, 4 at the server
  // (the router's window to it) and 4 in the router.
  nlohmann::json routes = cli(client, {"route", "show"});
  EXPECT_GE(routes["routes"][0]["queued"].get<int64_t>(), 48) << routes.dump();
  server.process().kill(SIGCONT);
  ASSERT_EQ(selftest.wait_exit(120000ms), 0) << selftest.output();
  nlohmann::json result = last_json_line(selftest.output());
  ASSERT_TRUE(result.contains("steps")) << selftest.output();
  EXPECT_GE(result["steps"][0]["rpcs"].get<int64_t>(), 64) << result.dump();
  EXPECT_EQ(result["steps"][0]["errors"], 0) << result.dump();
  nlohmann::json rs = cli(router, {"routerstat"});
  std::printf("router held at most %lld bytes of the client's (its window: 4 frames)\n",
              static_cast<long long>(rs["held_bytes_max"].get<int64_t>()));
  EXPECT_LE(rs["held_bytes_max"].get<int64_t>(), 4 * kFrameMost) << rs.dump();
  EXPECT_EQ(router.process().output().find("beyond the receive window"), std::string::npos)
      << "the client kept to its window; nothing was cut";
}

// A router between a TCP network and an @o2ib one (libfabric, its tcp provider): a node on
// each side sends the other 1 MiB writes, reads and echoes through it, both ways. On the
// fabric hop a 1 MiB frame cannot go inline (net.msg_size is 4096): its payload or bulk
// goes by RMA, read by the receiver from the sender's registered memory, or into the
// requester's sink.
TEST(FabricRouterTest, BulkCrossesARouterBetweenTcpAndO2ibBothWays) {
  TempDir dir;
  RoutedSpec spec;
  spec.base = 30;
  spec.server_net = "o2ib";
  Routed n(dir, routed_key(dir), spec);
  ASSERT_TRUE(n.ready()) << n.output();
  Daemon &router = *n.router, &ib = *n.server, &tcp = *n.client;

  for (const char* mode : {"write", "read", "echo"}) {
    auto [rc, out] =
        ping(tcp, ib.nid().to_string(), {"--count", "3", "--size", "1048576", "--mode", mode});
    EXPECT_EQ(rc, 0) << "tcp -> o2ib " << mode << ": " << out;
    auto [rc2, out2] =
        ping(ib, tcp.nid().to_string(), {"--count", "3", "--size", "1048576", "--mode", mode});
    EXPECT_EQ(rc2, 0) << "o2ib -> tcp " << mode << ": " << out2;
    auto [rc3, out3] = ping(tcp, ib.nid().to_string(), {"--count", "20"});
    EXPECT_EQ(rc3, 0) << "64 B: " << out3;
  }
  nlohmann::json rs = cli(router, {"routerstat"});
  // 18 round trips of 1 MiB and 60 small ones, a request and a reply each; per direction
  // 3 MiB written, 3 MiB read and 3 MiB echoed each way: 24 MiB of bulk in all.
  EXPECT_GE(rs["forwarded"].get<int64_t>(), 2 * (18 + 60)) << rs.dump();
  EXPECT_GE(rs["forwarded_bytes"].get<int64_t>(), int64_t(24) << 20) << rs.dump();
  for (const char* why : {"no_route", "failed", "loop", "not_router", "no_window"})
    EXPECT_EQ(rs["dropped"][why], 0) << why << ": " << rs.dump();
  EXPECT_GE(cli(ib, {"routerstat"})["received_routed"].get<int64_t>(), 18 + 60);
  EXPECT_GE(cli(tcp, {"routerstat"})["received_routed"].get<int64_t>(), 18 + 60);
}

}  // namespace routed_daemons
}  // namespace pfsnet::testing
