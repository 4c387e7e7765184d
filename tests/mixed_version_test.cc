// A cluster of this build's daemons beside daemons built from commit 8827b49, the last main
// that speaks only wire version 1 (scripts/old-release.sh builds them; test.sh runs it
// first): every pair talks, in both directions, as client and as server, the MGS included,
// each connection at the version both ends speak; then each old node is replaced by a new
// one in turn while the others keep RPCs going, and none of them fails.
#include <gtest/gtest.h>
#include <pfsnet/version.h>
#include <unistd.h>

#include <csignal>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cluster.h"

namespace pfsnet::testing {
namespace {

using nlohmann::json;

const std::string kOldDir = PFSNET_OLD_DIR;
const std::string kOldDaemon = kOldDir + "/pfsnetd";
const std::string kOldCli = kOldDir + "/pfsnet";

// The nodes: an MGS, two servers, two clients on loopback(host).
struct MixedNode {
  int host;
  const char* roles;
};
constexpr MixedNode kMgs{2, "\"mgs\", \"server\""}, kOldServer{3, "\"server\""},
    kNewServer{4, "\"server\""}, kOldClient{5, "\"client\""}, kNewClient{6, "\"client\""};

class MixedVersionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(access(kOldDaemon.c_str(), X_OK), 0)
        << "no pfsnetd of 8827b49 at " << kOldDaemon << ": run scripts/old-release.sh";
    ASSERT_EQ(access(kOldCli.c_str(), X_OK), 0) << kOldCli;
    auto [st, out] = run({PFSNET_BIN, "keygen", key_});
    ASSERT_EQ(st, 0) << out;
  }

  // Starts the node of `r` as this build's (old = false) or 8827b49's.
  void start(const MixedNode& r, bool old) {
    DaemonOptions o;
    o.binary = old ? kOldDaemon : PFSNETD_BIN;
    o.node_extra =
        "roles = [" + std::string(r.roles) + "]\nmgs = [\"" + loopback(kMgs.host) + "@tcp\"]\n";
    // Clients ping the MGS every 2 s (not 50), so a restarted MGS hears of them soon. An
    // MGS of this build keeps the release level in the test's directory (an 8827b49 daemon
    // refuses the key: it has none).
    o.extra = "[membership]\nclient_ping_interval = 2\nserver_ping_interval = 2\n";
    if (!old) o.extra += "state_dir = \"" + dir_.path() + "\"\n";
    nodes_[r.host].reset();  // the one before, if any, has exited
    nodes_[r.host] = std::make_unique<Daemon>(dir_, r.host, key_, o);
    old_[r.host] = old;
    ASSERT_TRUE(nodes_[r.host]->ready()) << nodes_[r.host]->process().output();
  }
  // The five nodes -- the old server and client of 8827b49, the MGS as `old_mgs` says --
  // each registered (up in the MGS's table).
  void start_mixed(bool old_mgs) {
    start(kMgs, old_mgs);
    start(kOldServer, true);
    start(kNewServer, false);
    start(kOldClient, true);
    start(kNewClient, false);
    ASSERT_TRUE(eventually([&] { return all_registered(); }, 15000ms))
        << run(cli(kMgs, {"status"})).second;
  }
  // Stops the node of `r` as an operator does (SIGTERM), bounded.
  void stop(const MixedNode& r) {
    Process& p = nodes_[r.host]->process();
    p.kill(SIGTERM);
    ASSERT_GE(p.wait_exit(10000ms), 0) << "node " << r.host << " did not exit";
  }
  Daemon& node(const MixedNode& r) { return *nodes_[r.host]; }
  // The CLI of the node's own build (the admin protocol is its own).
  std::vector<std::string> cli(const MixedNode& r, std::vector<std::string> args) {
    std::vector<std::string> v = {old_[r.host] ? kOldCli : std::string(PFSNET_BIN), "--socket",
                                  node(r).socket()};
    v.insert(v.end(), args.begin(), args.end());
    return v;
  }
  // A ping from `from` to `to`: `count` round trips of `size` bytes each way, data checked.
  // `json`: the summary alone, as JSON; else a line per round trip, then the summary.
  // `wait`: each ping waits for a peer that restarts, within its timeout (--wait, this
  // build's CLI only).
  std::vector<std::string> ping(const MixedNode& from, const MixedNode& to, int count, int size,
                                double interval = 0, bool json = true, bool wait = false) {
    std::vector<std::string> v = {"ping",      node(to).nid().to_string(),
                                  "-c",        std::to_string(count),
                                  "-s",        std::to_string(size),
                                  "-i",        std::to_string(interval),
                                  "--timeout", "20"};
    if (json) v.push_back("--json");
    if (wait) v.push_back("--wait");
    return cli(from, v);
  }
  static void expect_all_ok(const std::string& what, int rc, const std::string& out, int count) {
    ASSERT_EQ(rc, 0) << what << "\n" << out;
    json j = last_json_line(out);
    EXPECT_EQ(j["ok"], count) << what << "\n" << out;
    EXPECT_EQ(j["failed"], 0) << what << "\n" << out;
  }
  // The MGS's table (through its own CLI) lists every node, each up.
  bool all_registered() {
    auto [rc, out] = run(cli(kMgs, {"status", "--json"}));
    if (rc != 0) return false;
    json t = last_json_line(out);
    int up = 0;
    for (const json& n : t["nodes"]) up += n["state"] == "up";
    return up == 5;
  }
  // `pfsnet upgrade STEP --json` on `from` (this build's CLI): {exit status, its answer}.
  std::pair<int, json> upgrade(const MixedNode& from, const std::string& step) {
    auto [rc, out] = run(cli(from, {"upgrade", step, "--json"}));
    json j = json::object();
    try {
      j = last_json_line(out);
    } catch (const std::exception&) {
      j["output"] = out;
    }
    return {rc, j};
  }
  // The cluster's release level as node `r`'s agent last heard it from the MGS.
  int learned_level(const MixedNode& r) {
    auto [rc, out] = run(cli(r, {"status", "--json"}));
    if (rc != 0) return -1;
    return last_json_line(out)["local"]["agent"].value("cluster_level", -1);
  }
  // What `from`'s peers view says of `to`'s connection (its JSON entry).
  json peer_entry(const MixedNode& from, const MixedNode& to) {
    auto [rc, out] = run(cli(from, {"peers", "--json"}));
    if (rc != 0) return json();
    const json all = last_json_line(out);
    for (const json& p : all["peers"])
      if (p["nid"] == node(to).nid().to_string()) return p;
    return json();
  }

  TempDir dir_;
  std::string key_ = dir_.file("cluster.key");
  std::map<int, std::unique_ptr<Daemon>> nodes_;
  std::map<int, bool> old_;
};

const MixedNode kMixedNodes[] = {kMgs, kOldServer, kNewServer, kOldClient, kNewClient};

TEST_F(MixedVersionTest, OldAndNewNodesTalkBothWaysAndAreReplacedOneByOneWithNoRpcLost) {
  ASSERT_NO_FATAL_FAILURE(start_mixed(/*old_mgs=*/true));

  // Every node pings every other, 1 MiB and 64 B: old to new, new to old, new to new.
  for (const MixedNode& a : kMixedNodes)
    for (const MixedNode& b : kMixedNodes) {
      if (a.host == b.host) continue;
      std::string what = std::to_string(a.host) + " -> " + std::to_string(b.host);
      auto [rc, out] = run(ping(a, b, 2, 1 << 20));
      expect_all_ok(what + " 1 MiB", rc, out, 2);
      auto [rc2, out2] = run(ping(a, b, 20, 64));
      expect_all_ok(what + " 64 B", rc2, out2, 20);
    }
  // Each connection speaks what both ends do: a new node sees an old one at version 1 with
  // no release named, a new one at version 2 naming its release.
  json old_peer = peer_entry(kNewServer, kMgs);
  EXPECT_EQ(old_peer["wire_version"], 1) << old_peer.dump();
  EXPECT_EQ(old_peer["release"], "") << old_peer.dump();
  EXPECT_EQ(old_peer["features"], "") << old_peer.dump();
  json new_peer = peer_entry(kNewServer, kNewClient);
  EXPECT_EQ(new_peer["wire_version"], 2) << new_peer.dump();
  EXPECT_EQ(new_peer["features"], "job_id,trace,queue_time,routing,window") << new_peer.dump();
  EXPECT_FALSE(new_peer["release"].get<std::string>().empty()) << new_peer.dump();
  EXPECT_EQ(peer_entry(kNewClient, kOldServer)["wire_version"], 1);
  // pfsnet status through an 8827b49 MGS: the table, and why the releases are not in it.
  {
    auto [rc, out] = run(cli(kNewClient, {"status", "--json"}));
    ASSERT_EQ(rc, 0) << out;
    const json t = last_json_line(out);
    EXPECT_EQ(t["nodes"].size(), 5u) << out;
    EXPECT_NE(t["releases_error"].get<std::string>().find("does not say"), std::string::npos)
        << out;
    auto [hrc, human] = run(cli(kNewClient, {"status"}));
    EXPECT_NE(human.find("releases: unknown: MGS "), std::string::npos) << human;
  }
  // pfsnet health through it: an 8827b49 MGS keeps no mutes -- none, not an error -- and a
  // mute asked of it says why it cannot be kept.
  {
    auto [rc, out] = run(cli(kNewClient, {"health", "--json"}));
    ASSERT_EQ(rc, 0) << out;
    const json h = last_json_line(out);
    EXPECT_TRUE(h["mutes"].empty()) << out;
    EXPECT_FALSE(h.contains("mutes_error")) << out;
    // It has no HEALTH_LIST: the list is judged on the asking node, from its four answers.
    EXPECT_EQ(h["judged_at"], "node") << out;
    EXPECT_EQ(h["nodes"], 5) << out;
    auto [mrc, mout] = run(cli(kNewClient, {"health", "mute", "LOSSY", "--ttl", "1h"}));
    EXPECT_EQ(mrc, 2) << mout;
    EXPECT_NE(mout.find("is of a release before health mutes"), std::string::npos) << mout;
  }

  // A rolling upgrade: each old node in turn stops and comes back as this build's, while
  // the other nodes keep RPCs going (64 B every 10 ms, 1 MiB every 50 ms, data checked), old
  // and new both ways, among themselves and -- from the nodes of this build, whose pings
  // wait for a peer that restarts (--wait, CallOptions::recover, as block I/O does) -- to
  // the restarting node: none of them fails, and once it is back the replaced node talks to
  // every other. (An 8827b49 node's pings to the restarting node are not in the load: its
  // CLI has no --wait, and a plain ping gives up after lnet.retry_count refused connects.)
  // The MGS first, as Lustre's upgrade order has it (then servers, then clients).
  for (const MixedNode& r : {kMgs, kOldServer, kOldClient}) {
    std::vector<std::unique_ptr<Process>> load;
    std::vector<std::string> what;
    int to_restarting = 0;
    for (const MixedNode& from : kMixedNodes)
      for (const MixedNode& to : kMixedNodes) {
        if (from.host == r.host || from.host == to.host) continue;
        const bool waits = to.host == r.host;
        if (waits && old_[from.host]) continue;
        to_restarting += waits;
        load.push_back(std::make_unique<Process>(ping(from, to, 200, 64, 0.01, false, waits)));
        what.push_back(std::to_string(from.host) + " -> " + std::to_string(to.host) + " 64 B");
        load.push_back(std::make_unique<Process>(ping(from, to, 30, 1 << 20, 0.05, false, waits)));
        what.push_back(std::to_string(from.host) + " -> " + std::to_string(to.host) + " 1 MiB");
      }
    EXPECT_GE(to_restarting, 2) << "replacing " << r.host;
    // The load is under way before the node goes (its first replies are in).
    for (auto& p : load) ASSERT_TRUE(p->wait_for_output("reply from", 10000ms)) << p->output();
    // Resends to the restarting node, counted by its peers that wait for it.
    auto resends_to_r = [&] {
      uint64_t n = 0;
      for (const MixedNode& from : kMixedNodes)
        if (from.host != r.host && !old_[from.host])
          n += peer_entry(from, r).value("resends", uint64_t(0));
      return n;
    };
    const uint64_t resends_before = resends_to_r();
    stop(r);
    // The node stays down as long as an upgrade takes (the package replaced, the node's
    // checks): 4 s, past the three tries a plain ping makes -- 1.5 to 3 s of refused
    // connects -- so what holds the waiting RPCs is their wait, not a quick restart. (Not a
    // synchronization: nothing waits for anything here.)
    std::this_thread::sleep_for(4s);
    start(r, false);
    for (size_t i = 0; i < load.size(); ++i) {
      int rc = load[i]->wait_exit(60000ms);
      load[i]->wait_eof(5000ms);
      int n = what[i].find("MiB") != std::string::npos ? 30 : 200;
      std::string summary = std::to_string(n) + " sent, " + std::to_string(n) + " ok, 0 failed";
      EXPECT_EQ(rc, 0) << what[i] << "\n" << load[i]->output();
      EXPECT_NE(load[i]->output().find(summary), std::string::npos)
          << "replacing " << r.host << ": " << what[i] << "\n"
          << load[i]->output();
    }
    // Some RPC to the restarting node was in flight or sent while it was gone: its
    // connection failed, it was resent once the node was back, and it did not fail.
    EXPECT_GT(resends_to_r(), resends_before) << "replacing " << r.host;
    if (r.host == kMgs.host) {
      // pfsnet status from the new MGS, and through it: each node's release as it named it
      // when it registered again -- this build's, or none from the 8827b49 nodes.
      ASSERT_TRUE(eventually([&] { return all_registered(); }, 15000ms))
          << run(cli(kMgs, {"status"})).second;
      for (const MixedNode& asker : {kMgs, kNewClient}) {
        auto [rc, out] = run(cli(asker, {"status", "--json"}));
        ASSERT_EQ(rc, 0) << out;
        const json t = last_json_line(out);
        EXPECT_EQ(t["releases_error"], "") << out;
        int named = 0;
        for (const json& n : t["nodes"]) {
          const std::string name = n["name"];
          const bool is_old = name == "n" + std::to_string(kOldServer.host) ||
                              name == "n" + std::to_string(kOldClient.host);
          EXPECT_EQ(n["release"], is_old ? std::string() : release_name()) << out;
          named += !is_old;
        }
        EXPECT_EQ(named, 3) << out;
      }
      // pfsnet health: judged at the new MGS (HEALTH_LIST) for a node of this build; an
      // 8827b49 node's asks its four questions of it as before.
      {
        auto [nrc, nout] = run(cli(kNewClient, {"health", "--json"}));
        ASSERT_EQ(nrc, 0) << nout;
        EXPECT_EQ(last_json_line(nout)["judged_at"], "mgs") << nout;
        EXPECT_EQ(last_json_line(nout)["nodes"], 5) << nout;
        auto [orc, oout] = run(cli(kOldClient, {"health", "--json"}));
        ASSERT_EQ(orc, 0) << oout;
        EXPECT_EQ(last_json_line(oout)["nodes"], 5) << oout;
      }
      auto [hrc, human] = run(cli(kNewServer, {"status"}));
      EXPECT_NE(human.find("release " + release_name() + ": 3 node(s)"), std::string::npos)
          << human;
      EXPECT_NE(human.find("release unnamed (wire version 1): 2 node(s)"), std::string::npos)
          << human;
    }
    for (const MixedNode& o : kMixedNodes) {
      if (o.host == r.host) continue;
      auto [rc, out] = run(ping(r, o, 2, 1 << 20));
      expect_all_ok("replaced " + std::to_string(r.host) + " -> " + std::to_string(o.host), rc, out,
                    2);
      auto [rc2, out2] = run(ping(o, r, 2, 1 << 20));
      expect_all_ok(std::to_string(o.host) + " -> replaced " + std::to_string(r.host), rc2, out2,
                    2);
    }
  }
  // All of this build now: every connection at version 2, every node registered again.
  ASSERT_TRUE(eventually([&] { return all_registered(); }, 15000ms))
      << run(cli(kMgs, {"status"})).second;
  EXPECT_EQ(peer_entry(kNewServer, kMgs)["wire_version"], 2);
  auto [rc, out] = run(ping(kOldServer, kOldClient, 4, 1 << 20));
  expect_all_ok("3 -> 5 after the upgrade", rc, out, 4);
  EXPECT_EQ(peer_entry(kOldServer, kOldClient)["wire_version"], 2);
}

// The minimum release level, as an operator raises it at the end of a rolling upgrade
// (`mmchconfig release=LATEST`): refused while an 8827b49 node is up, named; committed once
// every node runs this build; then every node refuses an 8827b49 node, saying why, and a
// restarted MGS keeps the level.
TEST_F(MixedVersionTest, TheReleaseLevelRisesOnlyOnceNoOldNodeIsLeftAndThenShutsThemOut) {
  ASSERT_NO_FATAL_FAILURE(start_mixed(/*old_mgs=*/false));

  // The check names the two old nodes, of level 1 and no release.
  auto [crc, check] = upgrade(kNewClient, "check");
  ASSERT_EQ(crc, 0) << check.dump();
  EXPECT_EQ(check["level"], 1) << check.dump();
  EXPECT_EQ(check["target"], 2) << check.dump();
  EXPECT_EQ(check["below"], 2) << check.dump();
  ASSERT_EQ(check["nodes"].size(), 2u) << check.dump();
  for (const json& n : check["nodes"]) {
    EXPECT_TRUE(n["name"] == "n3" || n["name"] == "n5") << check.dump();
    EXPECT_EQ(n["level"], 1) << check.dump();
    EXPECT_EQ(n["release"], "") << check.dump();
  }
  EXPECT_EQ(check["features"][0]["name"], "wire_v1_refused") << check.dump();
  auto [hrc, human] = run(cli(kMgs, {"upgrade", "check"}));
  EXPECT_NE(human.find("2 of 5 node(s) below level 2"), std::string::npos) << human;
  EXPECT_NE(human.find("(wire version 1)"), std::string::npos) << human;
  // A commit is refused, naming them, and changes nothing: exit status 1.
  auto [rrc, refused] = run(cli(kNewServer, {"upgrade", "commit"}));
  EXPECT_EQ(rrc, 1) << refused;
  EXPECT_NE(refused.find("commit refused: 2 node(s) not dead are below level 2"), std::string::npos)
      << refused;
  EXPECT_NE(refused.find("n3, n5"), std::string::npos) << refused;
  EXPECT_EQ(upgrade(kMgs, "check").second["level"], 1);

  // The old nodes are replaced by this build's; then nothing holds the level back.
  for (const MixedNode& r : {kOldServer, kOldClient}) {
    stop(r);
    start(r, false);
  }
  json after;
  ASSERT_TRUE(eventually(
      [&] { return (after = upgrade(kNewClient, "check").second)["below"] == 0; }, 15000ms))
      << after.dump();
  auto [ok_rc, committed] = upgrade(kNewServer, "commit");
  ASSERT_EQ(ok_rc, 0) << committed.dump();
  EXPECT_TRUE(committed["committed"].get<bool>()) << committed.dump();
  EXPECT_EQ(committed["level"], 2) << committed.dump();
  // Every node hears it with its next ping (every 2 s).
  for (const MixedNode& r : {kOldServer, kNewServer, kOldClient, kNewClient})
    EXPECT_TRUE(eventually([&] { return learned_level(r) == 2; }, 10000ms)) << r.host;

  // An 8827b49 client now: every node refuses it, saying why; it never registers.
  const MixedNode kLateOld{7, "\"client\""};
  start(kLateOld, true);
  auto [prc, pout] = run(ping(kLateOld, kNewServer, 1, 64, 0, false));
  EXPECT_NE(prc, 0) << pout;
  EXPECT_NE(pout.find("minimum release level is 2"), std::string::npos) << pout;
  auto [mrc, mout] = run(ping(kLateOld, kMgs, 1, 64, 0, false));
  EXPECT_NE(mrc, 0) << mout;
  EXPECT_NE(mout.find("minimum release level is 2"), std::string::npos) << mout;
  auto listed = [&](const std::string& name) {
    auto [rc, out] = run(cli(kMgs, {"status", "--json"}));
    if (rc != 0) return true;
    const json t = last_json_line(out);
    for (const json& n : t["nodes"])
      if (n["name"] == name) return true;
    return false;
  };
  EXPECT_FALSE(listed("n7"));
  // Its own daemon says why, in 8827b49's words around ours.
  EXPECT_NE(node(kLateOld).process().output().find(
                "refused by the peer: the cluster's minimum release level is 2"),
            std::string::npos)
      << node(kLateOld).process().output();
  // The nodes of this build still talk, 1 MiB each way.
  auto [orc, oout] = run(ping(kNewClient, kOldServer, 2, 1 << 20));
  expect_all_ok("6 -> 3 at level 2", orc, oout, 2);

  // A restarted MGS keeps the level (membership.state_dir/release_level): the 8827b49 node
  // is refused by it again, and the others learn the level from it once more.
  stop(kMgs);
  start(kMgs, false);
  ASSERT_TRUE(eventually([&] { return all_registered(); }, 15000ms))
      << run(cli(kMgs, {"status"})).second;
  auto [arc, again] = upgrade(kNewClient, "check");
  ASSERT_EQ(arc, 0) << again.dump();
  EXPECT_EQ(again["level"], 2) << again.dump();
  EXPECT_EQ(again["below"], 0) << again.dump();
  EXPECT_FALSE(listed("n7"));
  // And never lowered.
  auto [lrc, lower] = run(cli(kNewClient, {"upgrade", "commit", "--level", "1"}));
  EXPECT_EQ(lrc, 1) << lower;
  EXPECT_NE(lower.find("never lowered"), std::string::npos) << lower;
}

// Over the fabric (@o2ib, libfabric's tcp provider): this build's fabric messages carry the
// frame head of the version their handshake settles on -- 2 between two new nodes, with
// every feature (routed frames among them) -- and a node of 8827b49, whose messages carry
// a version-1 header, still talks with a new one both ways, 1 MiB of bulk each way.
TEST(MixedFabricTest, NewNodesSpeakVersion2OverTheFabricAndAnOldOneStillTalksAt1) {
  ASSERT_EQ(access(kOldDaemon.c_str(), X_OK), 0)
      << "no pfsnetd of 8827b49 at " << kOldDaemon << ": run scripts/old-release.sh";
  TempDir dir;
  const std::string key = dir.file("cluster.key");
  ASSERT_EQ(run({PFSNET_BIN, "keygen", key}).first, 0);
  DaemonOptions oo;
  oo.net = "o2ib";
  oo.binary = kOldDaemon;
  Daemon old(dir, 7, key, oo);
  ASSERT_TRUE(old.ready()) << old.process().output();
  DaemonOptions no;
  no.net = "o2ib";
  Daemon a(dir, 8, key, no), b(dir, 9, key, no);
  ASSERT_TRUE(a.ready()) << a.process().output();
  ASSERT_TRUE(b.ready()) << b.process().output();
  auto ping = [](const std::string& cli, const Daemon& from, const Daemon& to,
                 std::vector<std::string> extra) {
    std::vector<std::string> argv = {
        cli, "--socket", from.socket(), "ping", to.nid().to_string(), "-c", "3", "-s", "1048576"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run(argv, 60000ms);
  };
  for (const char* mode : {"write", "read", "echo"}) {
    auto [rc, out] = ping(PFSNET_BIN, a, old, {"--mode", mode});
    EXPECT_EQ(rc, 0) << mode << ": " << out;
    auto [rc2, out2] = ping(PFSNET_BIN, a, b, {"--mode", mode});
    EXPECT_EQ(rc2, 0) << mode << ": " << out2;
  }
  auto [rc, out] = ping(kOldCli, old, a, {});
  EXPECT_EQ(rc, 0) << out;
  auto [prc, pout] = run({PFSNET_BIN, "--socket", a.socket(), "peers", "--json"});
  ASSERT_EQ(prc, 0) << pout;
  std::map<std::string, json> peers;
  const json all = last_json_line(pout);
  for (const json& p : all["peers"]) peers[p["nid"].get<std::string>()] = p;
  ASSERT_TRUE(peers.count(old.nid().to_string()) && peers.count(b.nid().to_string())) << pout;
  const json& to_old = peers[old.nid().to_string()];
  const json& to_new = peers[b.nid().to_string()];
  EXPECT_EQ(to_old["wire_version"], 1) << to_old.dump();
  EXPECT_EQ(to_new["wire_version"], 2) << to_new.dump();
  EXPECT_EQ(to_new["features"], "job_id,trace,queue_time,routing,window") << to_new.dump();
}

}  // namespace
}  // namespace pfsnet::testing
