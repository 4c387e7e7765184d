// @o2ib end to end: real pfsnetd processes whose NIs libfabric carries (its tcp provider
// on loopback: no RDMA hardware needed), driven through the CLI like an operator would.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "cluster.h"

namespace pfsnet::testing {
namespace {

using nlohmann::json;

DaemonOptions o2ib() {
  DaemonOptions o;
  o.net = "o2ib";
  return o;
}

TEST(O2ibTest, TwoDaemonsPingWithOneMiBBulkBothWaysAndCountVerbsLatencies) {
  TwoDaemons c(o2ib(), o2ib());
  ASSERT_TRUE(c.ready()) << c.a.process().output() << c.b.process().output();
  ASSERT_TRUE(c.a.nid().is_verbs());
  // Each mode moves 1 MiB: echo both ways, write to the server, read from it. Every
  // byte is checked (the server checks writes, the client what comes back).
  for (Daemon* from : {&c.a, &c.b}) {
    Daemon* to = from == &c.a ? &c.b : &c.a;
    for (const char* mode : {"echo", "write", "read"}) {
      auto [rc, out] = run({PFSNET_BIN, "--socket", from->socket(), "ping", to->nid().to_string(),
                            "-c", "4", "-s", "1048576", "--mode", mode, "--json"});
      ASSERT_EQ(rc, 0) << mode << ": " << out;
      json s = last_json_line(out);
      ASSERT_TRUE(s.is_object()) << out;
      EXPECT_EQ(s["ok"], 4) << mode;
      EXPECT_EQ(s["failed"], 0) << mode;
    }
  }
  // 12 RPCs each way, all over the fabric: the verbs statistics count them, the TCP
  // ones nothing, and none is mixed.
  for (Daemon* d : {&c.a, &c.b}) {
    json r = diag_until(d->socket(), [](const json& r) {
      return !r["nodes"].empty() &&
             total(r["nodes"][0]["stats"].value("latency_verbs", json())) >= 12;
    });
    ASSERT_EQ(r["nodes"].size(), 1u) << r.dump();
    const json& st = r["nodes"][0]["stats"];
    EXPECT_EQ(total(st["latency_verbs"]), 12) << st.dump();
    EXPECT_EQ(total(st["send_time_verbs"]), 12);
    EXPECT_EQ(total(st["channel_wait"]), 12);
    // A statistic with no record is left out.
    for (const char* none : {"latency_mixed", "latency_tcp", "send_time_tcp", "receive_time_tcp"})
      EXPECT_FALSE(st.contains(none)) << none << ": " << st.dump();
  }
}

// Both kinds on each daemon: a tcp NI and an o2ib NI (second [[net]]).
DaemonOptions tcp_and_o2ib(int o2ib_host) {
  DaemonOptions o;
  o.extra = "[[net]]\nnid = \"" + loopback(o2ib_host) + "@o2ib\"\nprovider = \"tcp\"\n";
  return o;
}

// All seven statistics of `diag rpc` with exact counts after a known load over both
// kinds: one RPC tcp both ways (before the handshake announced the o2ib NID), ten RDMA
// both ways, and five mixed -- sent over RDMA, answered over TCP because the server's
// replies on its o2ib NI fail (a fault rule: PEER_NI_CONNECT_ERROR) and each is sent
// again on the path left. The request's connection stays open, so nothing is resent by
// the client and each reply's kinds are exactly known.
TEST(O2ibTest, DiagRpcCountsTcpVerbsAndMixedLatenciesExactly) {
  DaemonOptions oa = tcp_and_o2ib(12);
  oa.http = loopback(2) + ":9708";
  TwoDaemons c(oa, tcp_and_o2ib(13));
  ASSERT_TRUE(c.ready()) << c.a.process().output() << c.b.process().output();
  std::string b_tcp = c.b.nid().to_string(), b_o2ib = loopback(13) + "@o2ib";
  auto ping = [&](int n) {
    auto [rc, out] = run(
        {PFSNET_BIN, "--socket", c.a.socket(), "ping", b_tcp, "-c", std::to_string(n), "--json"});
    EXPECT_EQ(rc, 0) << out;
    EXPECT_EQ(last_json_line(out)["ok"], n) << out;
  };
  ping(1);   // tcp: only the tcp NID is known yet
  ping(10);  // RDMA: the o2ib path is preferred once known
  auto [rc, out] =
      run({PFSNET_BIN, "--socket", c.b.socket(), "fault", "add", "drop", "--src", b_o2ib, "--type",
           "PING", "--rate", "1", "--health", "PEER_NI_CONNECT_ERROR"});
  ASSERT_EQ(rc, 0) << out;
  ping(5);  // mixed: requests over RDMA, replies over TCP

  json r = diag_until(c.a.socket(), [](const json& r) {
    return !r["nodes"].empty() && total(r["nodes"][0]["stats"].value("channel_wait", json())) >= 16;
  });
  ASSERT_EQ(r["nodes"].size(), 1u) << r.dump();
  const json& st = r["nodes"][0]["stats"];
  EXPECT_EQ(total(st["channel_wait"]), 16) << st.dump();
  EXPECT_EQ(total(st["send_time_tcp"]), 1) << st.dump();
  EXPECT_EQ(total(st["send_time_verbs"]), 15) << st.dump();
  EXPECT_EQ(total(st["receive_time_tcp"]), 6) << st.dump();
  EXPECT_EQ(total(st["latency_tcp"]), 1) << st.dump();
  EXPECT_EQ(total(st["latency_verbs"]), 10) << st.dump();
  EXPECT_EQ(total(st["latency_mixed"]), 5) << st.dump();
  // /metrics shows the same counts (the last 60 seconds).
  httplib::Client http(loopback(2), 9708);
  http.set_connection_timeout(5);
  http.set_read_timeout(5);
  auto m = http.Get("/metrics");
  ASSERT_TRUE(m) << "no HTTP answer";
  std::string node =
      "pfsnet_rpc_node_rpcs{nid=\"" + r["nodes"][0]["nid"].get<std::string>() + "\",stat=\"";
  for (auto [stat, n] : {std::pair{"send_time_verbs", 15},
                         {"latency_verbs", 10},
                         {"latency_mixed", 5},
                         {"latency_tcp", 1}})
    EXPECT_NE(m->body.find(node + stat + "\"} " + std::to_string(n) + "\n"), std::string::npos)
        << stat << "\n"
        << m->body.substr(0, 3000);
  // The client resent nothing: its paths to B stayed healthy.
  json peers =
      last_json_line(run({PFSNET_BIN, "--socket", c.a.socket(), "peers", "--json"}).second);
  ASSERT_EQ(peers["peers"].size(), 2u) << peers.dump();  // B's tcp and o2ib NIs
  for (const json& p : peers["peers"]) EXPECT_EQ(p.at("resends"), 0) << p.dump();
  // Which path carried what: the tcp path the first request and the six replies over
  // TCP, the RDMA path fifteen requests and ten replies.
  std::string a_tcp = c.a.nid().to_string(), a_o2ib = loopback(12) + "@o2ib";
  for (const json& p : peers["peers"]) {
    bool rdma = p["nid"] == b_o2ib;
    ASSERT_EQ(p["paths"].size(), 1u) << p.dump();
    const json& path = p["paths"][0];
    EXPECT_EQ(path["local"], rdma ? a_o2ib : a_tcp) << p.dump();
    EXPECT_EQ(path["kind"], rdma ? "verbs" : "tcp");
    EXPECT_EQ(path["send_count"], rdma ? 15 : 1) << p.dump();
    EXPECT_EQ(path["recv_count"], rdma ? 10 : 6) << p.dump();
  }
  auto [vrc, verbose] = run({PFSNET_BIN, "--socket", c.a.socket(), "peers", "-v"});
  EXPECT_EQ(vrc, 0);
  EXPECT_NE(verbose.find("path from " + a_o2ib), std::string::npos) << verbose;
}

TEST(O2ibTest, MissingProviderFailsTheStartNamingLibfabricAndTheProvider) {
  TempDir dir;
  std::string key = TwoDaemons::write_key(dir);
  DaemonOptions o = o2ib();
  o.provider = "no-such-provider";
  Daemon d(dir, 2, key, o);
  EXPECT_FALSE(d.ready());
  EXPECT_NE(d.process().wait_exit(5000ms), 0);
  d.process().wait_eof(5000ms);
  std::string out = d.process().output();
  EXPECT_NE(out.find("net " + d.nid().to_string() + ": libfabric cannot carry it"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("provider 'no-such-provider'"), std::string::npos) << out;
  EXPECT_EQ(out.find("pfsnetd started"), std::string::npos) << out;
}

}  // namespace
}  // namespace pfsnet::testing
