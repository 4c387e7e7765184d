// Large NIDs end to end (issue 69 item 3): real daemons whose every NI is IPv6 -- in
// namespaces the test creates, addressed from the IPv6 benchmarking prefix 2001:2::/48, and
// on ::1 -- register with their MGS, ping with 1 MiB bulk (data checked), probe each other
// in the mesh, show in `pfsnet health`, and run self-test and the block service.
#include <gtest/gtest.h>

#include <set>

#include "bridged_cluster.h"

namespace pfsnet::testing::netns {
namespace {

bool is_ipv6_nid(const std::string& nid) { return nid.find(':') != std::string::npos; }

TEST(Ipv6Test, DaemonsOnIpv6NidsRegisterPingProbeShowInHealthAndRunSelftestAndBlocks) {
  const std::vector<BridgedCluster::Node> nodes = {
      {"mgs", "mgs"}, {"s1", "server"}, {"c1", "client"}};
  enum { kMgs, kS1, kC1 };
  BridgedCluster c(
      nodes, std::string(kFastHealth) + "[storage]\ntargets = [\"mem\"]\nblock_size = 65536\n",
      true);
  if (!c.skip().empty()) GTEST_SKIP() << c.skip();
  ASSERT_TRUE(c.ok());
  const std::string s1 = c.node_nid(kS1, 0), c1 = c.node_nid(kC1, 0);
  ASSERT_TRUE(is_ipv6_nid(s1)) << s1;

  // Registered, every NID IPv6; every node's mesh row in, each IPv6 path probed both ways;
  // nothing wrong.
  json status, mesh, faults;
  bool healthy = eventually(
      [&] {
        status = c.cli(kC1, {"status"});
        if (!status.is_object() || status.value("nodes", json::array()).size() != 3) return false;
        for (const json& n : status["nodes"]) {
          if (n["state"] != "up" || n["nids"].size() != 2) return false;
          for (const json& x : n["nids"])
            if (!is_ipv6_nid(x.get<std::string>())) return false;
        }
        mesh = c.cli(kC1, {"mesh"});
        if (!mesh.is_object() || mesh["rows"].size() != 3) return false;
        for (const json& r : mesh["rows"]) {
          if (r["cells"].size() != 2 * 2) return false;  // 2 peers, 2 rails
          for (const json& cell : r["cells"])
            if (!is_ipv6_nid(cell["local"].get<std::string>()) || cell["write_mib_s"] == 0 ||
                cell["read_mib_s"] == 0 || cell["peer_mtu"] == 0)
              return false;
        }
        faults = faults_at(c, kC1);
        return faults.empty();
      },
      90000ms);
  ASSERT_TRUE(healthy) << "status " << status.dump() << "\nmesh " << mesh.dump() << "\nhealth "
                       << faults.dump();
  json health = c.cli(kC1, {"health"});
  ASSERT_TRUE(health.is_object());
  EXPECT_EQ(health["nodes"], 3) << health.dump();
  EXPECT_EQ(health["nodes_up"], 3) << health.dump();
  EXPECT_TRUE(is_ipv6_nid(health["mgs"].get<std::string>())) << health.dump();

  // 1 MiB writes and reads, the data checked at the far end (ping's pattern).
  for (const char* mode : {"write", "read"}) {
    auto [rc, out] = run({PFSNET_BIN, "--socket", c.socket(kC1), "ping", s1, "--mode", mode,
                          "--size", "1048576", "--count", "5", "--json"},
                         60000ms);
    ASSERT_EQ(rc, 0) << out;
    json j = last_json_line(out);
    EXPECT_EQ(j["target"], s1);
    EXPECT_EQ(j["ok"], 5) << out;
    EXPECT_EQ(j["failed"], 0) << out;
  }
  // The peer speaks wire version 2 (the only one large NIDs travel in).
  json peers = c.cli(kC1, {"peers"});
  bool found = false;
  for (const json& p : peers["peers"])
    if (p["nid"] == s1) {
      found = true;
      EXPECT_EQ(p["wire_version"], 2) << p.dump();
    }
  EXPECT_TRUE(found) << peers.dump();

  // Self-test from the client to the server.
  {
    auto [rc, out] =
        run({PFSNET_BIN, "--socket", c.socket(kC1), "selftest", "--group", "clients=" + c1,
             "--group", "servers=" + s1, "--from", "clients", "--to", "servers", "--size", "64K",
             "--concurrency", "2", "--duration", "1", "--json"},
            60000ms);
    ASSERT_EQ(rc, 0) << out;
    json r = last_json_line(out);
    ASSERT_EQ(r["steps"].size(), 1u) << out;
    EXPECT_EQ(r["steps"][0]["errors"], 0) << out;
    EXPECT_GT(r["steps"][0]["rpc_s"].get<double>(), 0) << out;
  }
  // The block service: the GPFS benchmark's writes and reads (verified) over IPv6.
  {
    auto [rc, out] = run({PFSNET_BIN, "--socket", c.socket(kC1), "bench", "gpfs", "--servers", s1,
                          "--clients", c1, "--requests", "20", "--size", "64K", "--json"},
                         120000ms);
    ASSERT_EQ(rc, 0) << out;
    json r = last_json_line(out);
    EXPECT_EQ(r["servers"], json::array({s1})) << out;
    ASSERT_EQ(r["cells"].size(), 2u) << out;  // a write and a read
    for (const json& cell : r["cells"]) {
      EXPECT_EQ(cell["errors"], 0) << cell.dump();
      EXPECT_EQ(cell["requests"], 20) << cell.dump();
      EXPECT_GT(cell["mib_s"].get<double>(), 0) << cell.dump();
    }
  }
  // Tune: the IPv6 peer measured (RTT, a bulk train) and its settings recommended.
  {
    json r = c.cli(kC1, {"tune", "--probe", "--peer", s1, "--size", "256K"});
    ASSERT_TRUE(r.is_object());
    ASSERT_EQ(r["peers"].size(), 1u) << r.dump();
    EXPECT_EQ(r["peers"][0]["peer"], s1);
    EXPECT_GT(r["peers"][0]["rtt_ms"].get<double>(), 0) << r.dump();
    EXPECT_GT(r["peers"][0]["bandwidth_mib_s"].get<double>(), 0) << r.dump();
  }
  // Netverify over an IPv6 path: the port, the handshake, the MTU both ways (UDP probes of
  // IPv6's headers), routing, the round trip. (Its bandwidth trains' asymmetry check reads
  // this loaded VM's scheduler as much as the path: left to the netns netverify test.)
  {
    json r = c.cli(kC1, {"netverify", s1, "--no-bandwidth"});
    ASSERT_TRUE(r.is_object());
    EXPECT_EQ(r["failed"], 0) << r.dump();
    std::set<std::string> passed;
    for (const json& n : r["nodes"])
      for (const json& p : n["paths"])
        for (const json& ch : p["checks"])
          if (ch["result"] == "PASS") passed.insert(ch["check"].get<std::string>());
    for (const char* want : {"port", "handshake", "mtu", "routing", "rtt"})
      EXPECT_TRUE(passed.count(want)) << want << ": " << r.dump();
  }
}

// On loopback: an MGS with an IPv4 NI and ::1@tcp pings itself over IPv6 with 1 MiB bulk;
// a node of this build is told both its NIDs, a real 8827b49 node (wire version 1) only the
// IPv4 one -- and registers, and reads the MGS's table, as before.
TEST(Ipv6Test, OnLoopbackADualStackMgsIsReachedOverIpv6AndAnOldNodeIsToldOnlyIpv4Nids) {
  const std::string old_dir = PFSNET_OLD_DIR;
  const std::string old_daemon = old_dir + "/pfsnetd", old_cli = old_dir + "/pfsnet";
  ASSERT_EQ(access(old_daemon.c_str(), X_OK), 0)
      << "no pfsnetd of 8827b49 at " << old_daemon << ": run scripts/old-release.sh";
  TempDir dir;
  const std::string key = dir.file("cluster.key");
  ASSERT_EQ(run({PFSNET_BIN, "keygen", key}).first, 0);
  const std::string pings = "[membership]\nclient_ping_interval = 2\nserver_ping_interval = 2\n";
  DaemonOptions om;
  om.node_extra = "roles = [\"mgs\", \"server\"]\n";
  om.extra = pings + "[[net]]\nnid = \"::1@tcp\"\n";
  Daemon mgs(dir, 2, key, om);
  ASSERT_TRUE(mgs.ready()) << mgs.process().output();
  EXPECT_TRUE(
      mgs.process().wait_for_output("NI ::1@tcp is IPv6 (a large NID): nodes that speak "
                                    "only wire version 1"))
      << mgs.process().output();
  DaemonOptions oc;
  oc.node_extra = "roles = [\"client\"]\nmgs = [\"" + mgs.nid().to_string() + "\"]\n";
  oc.extra = pings;
  DaemonOptions oo = oc;
  oo.binary = old_daemon;
  Daemon old(dir, 3, key, oo), neu(dir, 4, key, oc);
  ASSERT_TRUE(old.ready() && neu.ready()) << old.process().output() << neu.process().output();

  auto status = [](const std::string& cli, const std::string& socket) {
    auto [rc, out] = run({cli, "--socket", socket, "status", "--json"});
    return rc == 0 ? last_json_line(out) : json();
  };
  auto nids_of = [](const json& table, const std::string& name) {
    for (const json& n : table.value("nodes", json::array()))
      if (n["name"] == name) return n["nids"];
    return json();
  };
  const json both = json::array({mgs.nid().to_string(), "::1@tcp"});
  json seen_new, seen_old;
  bool told = eventually(
      [&] {
        seen_new = status(PFSNET_BIN, neu.socket());
        seen_old = status(old_cli, old.socket());
        auto up = [](const json& t) {
          if (t.value("nodes", json::array()).size() != 3) return false;
          for (const json& n : t["nodes"])
            if (n["state"] != "up") return false;
          return true;
        };
        return up(seen_new) && up(seen_old) && nids_of(seen_new, "n2") == both;
      },
      30000ms);
  ASSERT_TRUE(told) << "new: " << seen_new.dump() << "\nold: " << seen_old.dump();
  EXPECT_EQ(nids_of(seen_old, "n2"), json::array({mgs.nid().to_string()}))
      << "a version-1 node is told no large NID: " << seen_old.dump();
  for (const json& n : seen_old["nodes"])
    for (const json& x : n["nids"]) EXPECT_FALSE(is_ipv6_nid(x.get<std::string>())) << n.dump();

  // 1 MiB each way over ::1, data checked.
  for (const char* mode : {"write", "read"}) {
    auto [rc, out] = run({PFSNET_BIN, "--socket", mgs.socket(), "ping", "::1@tcp", "--mode", mode,
                          "--size", "1048576", "--count", "3", "--json"},
                         30000ms);
    ASSERT_EQ(rc, 0) << out;
    EXPECT_EQ(last_json_line(out)["ok"], 3) << out;
  }
}

}  // namespace
}  // namespace pfsnet::testing::netns
