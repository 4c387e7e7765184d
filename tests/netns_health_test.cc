// Health on real links: a cluster of nodes in network namespaces (BridgedCluster), faults
// injected from outside pfsnet, `pfsnet health` read on an uninvolved node. The test
// creates and removes everything; it needs root (skipped otherwise).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "base/sanitizers.h"
#include "bridged_cluster.h"

namespace pfsnet::testing::netns {
namespace {

// Issue 14's test of fault finding: ten nodes on two bridged networks, the six faults an
// operator meets injected from outside pfsnet, each on its own server and all at once --
// a killed server, a stopped one (SIGSTOP), a link set down, a link throttled (tbf), a
// link dropping 5% of its packets (nftables), an MTU mismatch (one end 9000 on a 1500
// link). `pfsnet health` on a client that talks to none of them names each culprit and
// its cause within 60 s, and nothing healthy. The probe mesh runs 5x faster than its
// defaults (so the test takes a minute, not five), and its outlier factor is 6, not 3:
// ten daemons and the load on two cores make a 128 KiB bulk probe measure the scheduler
// too -- in CI a healthy path's best probes, both ways, came 3.4x and 3.3x below the
// median (138 and 129 MiB/s of 462 and 429) and it was named THROTTLED. The faults are far
// past 6x: the tbf link carries 2.4 MiB/s. The other keys are the defaults.
//
// Not under a sanitizer: ten sanitized daemons probing at 5x overload two cores, and the
// mesh then measures the scheduler (CI's ASan run saw healthy paths' p50 at 12-44 ms
// against a 4 ms median before any fault). The code it runs is covered there by the mesh,
// cluster-health and other netns tests.
TEST(NetnsTest, HealthOnAnotherNodeNamesSixFaultsInjectedFromOutside) {
#if PFSNET_UNDER_ASAN || PFSNET_UNDER_TSAN
  GTEST_SKIP() << "timing-bound: ten sanitized daemons overload this host";
#endif
  const std::vector<BridgedCluster::Node> nodes = {
      {"mgs", "mgs"},   {"c1", "client"}, {"c2", "client"}, {"s1", "server"}, {"s2", "server"},
      {"s3", "server"}, {"s4", "server"}, {"s5", "server"}, {"s6", "server"}, {"s7", "server"}};
  enum { kMgs, kC1, kC2, kKilled, kStopped, kLinkDown, kThrottled, kLossy, kMtu, kHealthy };
  BridgedCluster c(nodes,
                   "[lnet]\ntransaction_timeout = 10\n"
                   "[mesh]\ninterval = 1\nbulk_interval = 5\nreport_interval = 3\nwindow = 20\n"
                   "outlier_factor = 6.0\n");
  if (!c.skip().empty()) GTEST_SKIP() << c.skip();
  if (access("/usr/sbin/nft", X_OK) != 0) GTEST_SKIP() << "needs nftables";
  ASSERT_TRUE(c.ok());
  auto problems = [&]() {
    json h = c.cli(kC2, {"health"});
    return h.is_object() ? h.value("problems", json::array()) : json::array();
  };
  auto faults_only = [](const json& ps) {  // settings advice is not a fault
    json out = json::array();
    for (const json& p : ps)
      if (p["kind"] != "settings") out.push_back(p);
    return out;
  };
  // A healthy cluster first: every node up, every node's mesh row with its MTUs in, and
  // nothing wrong.
  json ps;
  double healthy = poll_until(
      [&] {
        json t = c.cli(kC2, {"status"});
        if (!t.is_object() || t.value("nodes", json::array()).size() != c.size()) return false;
        for (const json& n : t["nodes"])
          if (n["state"] != "up") return false;
        json m = c.cli(kC2, {"mesh"});
        if (!m.is_object() || m["rows"].size() != c.size()) return false;
        for (const json& r : m["rows"]) {
          if (r["cells"].size() != 2 * 8) return false;  // 8 peers (mesh.peers), 2 rails
          for (const json& cell : r["cells"])
            if (cell["peer_mtu"] == 0 || cell["write_mib_s"] == 0 || cell["read_mib_s"] == 0)
              return false;
        }
        ps = faults_only(problems());
        return ps.empty();
      },
      90000ms);
  ASSERT_GE(healthy, 0) << "not healthy before the faults: " << ps.dump() << "\n"
                        << c.cli(kC2, {"mesh"}).dump();
  // Each row reports its node's two NIs with the veth's speed (the kernel's, through
  // ethtool, in the node's namespace) and the traffic their interfaces carried.
  for (const json& r : c.cli(kC2, {"mesh"})["rows"]) {
    ASSERT_EQ(r["nis"].size(), 2u) << r.dump();
    for (const json& n : r["nis"]) {
      EXPECT_EQ(n["speed_mbit"], 10000) << r.dump();
      EXPECT_GT(n["rx_peak_mib_s"].get<double>(), 0) << r.dump();
    }
  }
  // c1 works with every server: a 16 KiB echo every 10 ms to each (their rail-1 NIDs; the
  // other rail is used too).
  std::vector<std::unique_ptr<Process>> loads;
  for (size_t s = kKilled; s <= kHealthy; ++s)
    loads.push_back(std::make_unique<Process>(std::vector<std::string>{
        PFSNET_BIN, "--socket", c.socket(kC1), "ping", BridgedCluster::nid(s, 0), "--count",
        "20000", "--size", "16384", "--interval", "0.01", "--timeout", "10"}));
  ASSERT_GE(poll_until(
                [&] {
                  for (auto& l : loads)
                    if (l->output().find("reply from") == std::string::npos) return false;
                  return true;
                },
                20000ms),
            0)
      << "every load under way";

  // The faults, all from outside pfsnet.
  auto t0 = Clock::now();
  c.daemon(kKilled).kill(SIGKILL);
  ASSERT_TRUE(c.daemon(kStopped).stop());
  ASSERT_TRUE(c.ip_in(kLinkDown, {"link", "set", c.ifname(kLinkDown, 0), "down"}));
  ASSERT_TRUE(
      c.exec_in(kThrottled, {"tc", "qdisc", "add", "dev", c.ifname(kThrottled, 0), "root", "tbf",
                             "rate", "20mbit", "burst", "16kb", "latency", "200ms"}));
  ASSERT_TRUE(c.nft(kLossy,
                    "table inet pfsloss {\n chain in {\n  type filter hook input priority "
                    "0; policy accept;\n  iifname \"" +
                        c.ifname(kLossy, 0) + "\" numgen random mod 100 < 5 drop\n }\n}\n"));
  ASSERT_TRUE(c.ip_in(kMtu, {"link", "set", c.ifname(kMtu, 0), "mtu", "9000"}));

  // What names each: its subject -- a node, or an NI ("NID" or "NID (node)") -- and cause.
  auto nid1 = [](size_t i) { return BridgedCluster::nid(i, 0); };
  auto names = [](const json& p, const std::string& who) {
    std::string s = p["subject"];
    return s == who || s.rfind(who + " (", 0) == 0;
  };
  // A path ("a -> b (NID -> NID)") stands out because of either end.
  auto mentions = [&](const json& p, const std::string& who) {
    std::string s = p["subject"];
    return names(p, who) || s.rfind(who + " ->", 0) == 0 ||
           s.find("-> " + who + " (") != std::string::npos ||
           s.find("(" + who + " ->") != std::string::npos ||
           s.find("-> " + who + ")") != std::string::npos;
  };
  struct Want {
    const char* fault;
    std::string who;
    std::set<std::string> causes;
    double found = -1;
  };
  std::vector<Want> want = {
      {"killed", c.name(kKilled), {"DEAD"}},    {"stopped", c.name(kStopped), {"DEAD", "SUSPECT"}},
      {"link down", nid1(kLinkDown), {"DOWN"}}, {"tbf", nid1(kThrottled), {"THROTTLED", "SLOW"}},
      {"5% drops", nid1(kLossy), {"LOSSY"}},    {"MTU 9000", nid1(kMtu), {"MTU"}}};
  size_t left = want.size();
  for (int round = 0; round < 100 && left > 0 && Clock::now() - t0 < 75s; ++round) {
    ps = faults_only(problems());
    double at = std::chrono::duration<double>(Clock::now() - t0).count();
    for (Want& w : want)
      if (w.found < 0)
        for (const json& p : ps)
          if (names(p, w.who) && w.causes.count(p["cause"])) {
            w.found = at;
            --left;
            break;
          }
    if (left > 0) std::this_thread::sleep_for(1s);  // the next look, not a sync
  }
  for (const Want& w : want) {
    EXPECT_GE(w.found, 0) << w.fault << " (" << w.who << ") not named: " << ps.dump(1);
    EXPECT_LE(w.found, 60.0) << w.fault;
    std::printf("%-9s named after %5.1f s\n", w.fault, w.found);
  }
  // Nothing healthy named: every entry is about a culprit -- a faulty node (any of its
  // NIs), or the faulty NI of the others (their other rail is healthy).
  std::vector<std::string> culprits = {c.name(kKilled), c.name(kStopped)};
  for (size_t s : {kKilled, kStopped})
    for (int r = 0; r < 2; ++r) culprits.push_back(BridgedCluster::nid(s, r));
  for (size_t s : {kLinkDown, kThrottled, kLossy, kMtu}) culprits.push_back(nid1(s));
  for (const json& p : ps) {
    bool ok = false;
    for (const std::string& who : culprits) ok = ok || mentions(p, who);
    EXPECT_TRUE(ok) << "a healthy part named: " << p.dump();
  }
  // The shaped link's drops (its queue full) are congestion: never LOSSY.
  for (const json& p : ps) {
    EXPECT_FALSE(mentions(p, nid1(kThrottled)) && p["cause"] == "LOSSY")
        << "congestion called loss: " << p.dump();
  }
  std::printf("health on c2 after the faults:\n");
  for (const json& p : ps)
    std::printf("  %-6s %-48s %-9s seen by %s\n", p["kind"].get<std::string>().c_str(),
                p["subject"].get<std::string>().c_str(), p["cause"].get<std::string>().c_str(),
                p["seen_by"].get<std::string>().c_str());
}

// Issue 34, item 3: nodes that cannot reach each other are one partition. Six nodes on two
// bridged networks; s1 and s2 drop every packet on network 2 (tcp1) from and to the others
// (nftables in their namespaces), so tcp1 is split into {c1, c2, mgs, s3} and {s1, s2}
// while tcp carries on. `pfsnet health` on c2 lists one problem -- the partition, with its
// sides -- and not the peer NIs, paths and mesh culprits it explains; healed, nothing.
TEST(NetnsTest, ASplitNetworkIsOnePartitionAndEndsWhenHealed) {
#if PFSNET_UNDER_ASAN || PFSNET_UNDER_TSAN
  GTEST_SKIP() << "timing-bound: six sanitized daemons probing at 5x overload this host";
#endif
  const std::vector<BridgedCluster::Node> nodes = {{"mgs", "mgs"},   {"c1", "client"},
                                                   {"c2", "client"}, {"s1", "server"},
                                                   {"s2", "server"}, {"s3", "server"}};
  enum { kMgs, kC1, kC2, kS1, kS2, kS3 };
  BridgedCluster c(nodes, kFastHealth);
  if (!c.skip().empty()) GTEST_SKIP() << c.skip();
  if (access("/usr/sbin/nft", X_OK) != 0) GTEST_SKIP() << "needs nftables";
  ASSERT_TRUE(c.ok());
  auto faults = [&] { return faults_at(c, kC2); };
  json ps;
  double healthy = poll_until(
      [&] {
        json m = c.cli(kC2, {"mesh"});
        if (!m.is_object() || m["rows"].size() != c.size()) return false;
        for (const json& r : m["rows"])
          if (r["cells"].size() != 2 * (c.size() - 1)) return false;
        ps = faults();
        return ps.empty();
      },
      90000ms);
  ASSERT_GE(healthy, 0) << "not healthy before the split: " << ps.dump();
  // c1 keeps small RPCs going to every server (either network).
  std::vector<std::unique_ptr<Process>> loads;
  for (size_t s : {kS1, kS2, kS3})
    loads.push_back(std::make_unique<Process>(std::vector<std::string>{
        PFSNET_BIN, "--socket", c.socket(kC1), "ping", BridgedCluster::nid(s, 1), "--count",
        "20000", "--size", "4096", "--interval", "0.02", "--timeout", "10"}));
  std::string others;
  for (size_t i : {kMgs, kC1, kC2, kS3})
    others += (others.empty() ? "" : ", ") + BridgedCluster::addr(i, 1);
  const std::string split =
      "table inet split {\n"
      "  chain in {\n    type filter hook input priority 0;\n"
      "    ip saddr { " +
      others +
      " } drop;\n  }\n"
      "  chain out {\n    type filter hook output priority 0;\n"
      "    ip daddr { " +
      others +
      " } drop;\n  }\n"
      "}\n";
  ASSERT_TRUE(c.nft(kS1, split));
  ASSERT_TRUE(c.nft(kS2, split));
  auto only_the_partition = [&](const json& v) {
    return v.size() == 1 && v[0]["kind"] == "network" && v[0]["subject"] == "tcp1" &&
           v[0]["cause"] == "PARTITION" &&
           v[0]["evidence"].get<std::string>().find("c1,c2,mgs,s3 | s1,s2") != std::string::npos;
  };
  double named = poll_until(
      [&] {
        ps = faults();
        return only_the_partition(ps);
      },
      60000ms);
  ASSERT_GE(named, 0) << "the partition was not named alone: " << ps.dump();
  // And it stays the only line while the split lasts: ten more looks, a second apart.
  int extra = 0;
  for (int i = 0; i < 10; ++i) {
    ps = faults();
    if (!only_the_partition(ps)) {
      ++extra;
      std::printf("  look %d: %s\n", i, ps.dump().c_str());
    }
    std::this_thread::sleep_for(1s);  // the next look, not a sync
  }
  EXPECT_EQ(extra, 0);
  ASSERT_TRUE(c.exec_in(kS1, {"nft", "delete", "table", "inet", "split"}));
  ASSERT_TRUE(c.exec_in(kS2, {"nft", "delete", "table", "inet", "split"}));
  json last;  // what was listed last while the heal was being seen
  double cleared = poll_until(
      [&] {
        ps = faults();
        if (!ps.empty()) last = ps;
        return ps.empty();
      },
      60000ms);
  EXPECT_GE(cleared, 0) << "still listed after the split healed: " << ps.dump();
  std::printf("  last listed after the heal: %s\n", last.dump().c_str());
  // The bound: the partition line goes with the first probe answered across it, but the
  // probes it cost stay in the paths' windows (mesh.window, 20 s here) and mark them LOSSY
  // until they leave, and the rows reach the MGS every report_interval (2 s): window + two
  // syncs + a look's few seconds. Measured: 24.0-24.6 s.
  EXPECT_LE(cleared, 20 + 2 * 2 + 6.0) << "the bound for a partition after the heal";
  std::printf("partition of tcp1: named alone after %.1f s, gone %.1f s after the heal\n", named,
              cleared);
  for (auto& l : loads) l->kill(SIGKILL);
}

// Milliseconds of CPU a second process `pid`'s threads ran over `over` (their schedstat run
// times, sampled at both ends; a thread born or gone meanwhile counts for its part).
double cpu_ms_per_s(pid_t pid, std::chrono::milliseconds over) {
  auto run_ns = [pid] {
    uint64_t ns = 0;
    std::error_code ec;
    for (const auto& t :
         std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
      std::ifstream f(t.path() / "schedstat");
      uint64_t v = 0;
      if (f >> v) ns += v;
    }
    return ns;
  };
  const uint64_t a = run_ns();
  std::this_thread::sleep_for(over);  // the sampling interval, not a sync
  const uint64_t b = run_ns();
  return b > a ? (b - a) / 1e6 / (over.count() / 1000.0) : 0;
}

// Issue 34, item 1's second half: each fault class alone, on one server (s1) -- killed,
// stopped, its link set down, shaped, dropping 5% at random, starved of CPU (a cgroup
// quota of 1% of a core), at another MTU -- healed in
// between, under load. `pfsnet health` on c2 (which talks to none of the servers) names it
// with the right cause within 60 s, lists nothing that is not about s1 the whole time, and
// lists nothing within each cause's bound once it is healed (the same server every time: a
// problem that outlived its fault would be named in the next one). The bounds (mesh at
// interval 1, report_interval 2, window 20; transaction_timeout 10):
//   DEAD (killed, restarted)    the restart's registration and the next table: 15 s
//   DEAD/SUSPECT (SIGCONT)      its next ping to the MGS: 15 s
//   DOWN (link up again)        the link monitor at once; other nodes' failed sends to it
//                               heal with their next recovery ping -- but the retransmits
//                               that cross the heal may make a peer call it LOSSY, which
//                               ends as LOSSY does: 30 s
//   THROTTLED/SLOW (tbf gone)   the mesh's window: 20 s + two syncs + a look: 30 s
//   LOSSY (drops gone)          200 clean segments, or the window's lost probes: 30 s
//   CPU (quota lifted)          s1's own five fed seconds and a report; what it explained
//                               meanwhile (its peers' SLOW views, the mesh's late probes)
//                               ends as SLOW does: 30 s
//   MTU (set back)              the next small probe and sync: 15 s
// Prints time to name, false alarms and time to clear for each.
TEST(NetnsTest, EachFaultAloneIsNamedAloneAndEndsWithinItsBoundWhenHealed) {
#if PFSNET_UNDER_ASAN || PFSNET_UNDER_TSAN
  GTEST_SKIP() << "timing-bound: seven sanitized daemons probing at 5x overload this host";
#endif
  const std::vector<BridgedCluster::Node> nodes = {
      {"mgs", "mgs"},   {"c1", "client"}, {"c2", "client"}, {"s1", "server"},
      {"s2", "server"}, {"s3", "server"}, {"s4", "server"}};
  enum { kMgs, kC1, kC2, kS1 };
  BridgedCluster c(nodes, kFastHealth);
  if (!c.skip().empty()) GTEST_SKIP() << c.skip();
  if (access("/usr/sbin/nft", X_OK) != 0) GTEST_SKIP() << "needs nftables";
  ASSERT_TRUE(c.ok());
  auto faults = [&] { return faults_at(c, kC2); };
  json ps;
  ASSERT_GE(poll_until(
                [&] {
                  json m = c.cli(kC2, {"mesh"});
                  if (!m.is_object() || m["rows"].size() != c.size()) return false;
                  for (const json& r : m["rows"])
                    for (const json& cell : r["cells"])
                      if (cell["peer_mtu"] == 0) return false;
                  ps = faults();
                  return ps.empty();
                },
                90000ms),
            0)
      << "not healthy before the faults: " << ps.dump();
  // c1 works with every server: a 16 KiB echo every 20 ms to each.
  std::vector<std::unique_ptr<Process>> loads;
  for (size_t s = kS1; s < c.size(); ++s)
    loads.push_back(std::make_unique<Process>(std::vector<std::string>{
        PFSNET_BIN, "--socket", c.socket(kC1), "ping", BridgedCluster::nid(s, 0), "--count",
        "100000", "--size", "16384", "--interval", "0.02", "--timeout", "10"}));
  const std::string s1 = c.name(kS1), ni = BridgedCluster::nid(kS1, 0);
  const std::string dev = c.ifname(kS1, 0);
  const std::string starve = "/sys/fs/cgroup/cpu/pfsnet_starve_" + std::to_string(getpid());
  // About s1: naming it or its addresses, or s1's own view (after a stop, its timers).
  auto about_s1 = [&](const json& p) {
    std::string t = p["subject"].get<std::string>() + " " + p.value("evidence", "") + " " +
                    p.value("seen_by", "");
    return t.find(s1) != std::string::npos ||
           t.find(BridgedCluster::addr(kS1, 0)) != std::string::npos ||
           t.find(BridgedCluster::addr(kS1, 1)) != std::string::npos;
  };
  struct Fault {
    const char* name;
    std::string subject;           // what must be named (a node, or an NI: "NID" or "NID (node)")
    std::set<std::string> causes;  // with one of these
    double bound;                  // seconds from the heal to an empty list
    std::function<bool()> inject, heal;
  };
  std::string fault_note;  // what a fault's heal found out about it (printed)
  // Every thread of s1's daemon in a cgroup with `quota_us` of one core per `period_us`
  // (cgroup v1 cpu), then back in the root cgroup.
  auto cpu_fault = [&](const char* name, int period_us, int quota_us) {
    return Fault{
        name,
        s1,
        {"CPU"},
        30,
        [&, name, period_us, quota_us] {
          if (access("/sys/fs/cgroup/cpu/cgroup.procs", W_OK) != 0) return false;
          // What s1 needs now, unstarved: its threads' run time over 2 s (the quotas are a
          // quarter of it; printed so a drift shows).
          std::printf("%s: s1 needs %.1f ms of CPU a second under this load (quota %.1f ms/s)\n",
                      name, cpu_ms_per_s(c.daemon(kS1).pid(), 2s), 1000.0 * quota_us / period_us);
          ::mkdir(starve.c_str(), 0755);
          write_file(starve + "/cpu.cfs_period_us", std::to_string(period_us) + "\n");
          write_file(starve + "/cpu.cfs_quota_us", std::to_string(quota_us) + "\n");
          write_file(starve + "/cgroup.procs", std::to_string(c.daemon(kS1).pid()) + "\n");
          return true;
        },
        [&, name] {
          // How often the quota bit: a daemon that needs less than its quota is
          // not starved, and should not be named.
          std::string stat = read_file(starve + "/cpu.stat");
          auto field = [&](const std::string& key) {
            size_t at = stat.find(key + " ");
            return at == std::string::npos ? -1L : std::atol(stat.c_str() + at + key.size());
          };
          const long periods = field("nr_periods"), throttled = field("nr_throttled");
          fault_note = "its quota ran out in " + std::to_string(throttled) + " of " +
                       std::to_string(periods) + " periods";
          EXPECT_GE(throttled * 2, periods)
              << name << " did not starve s1 (" << fault_note
              << "): it needs less CPU under this load; lower the quota";
          write_file("/sys/fs/cgroup/cpu/cgroup.procs", std::to_string(c.daemon(kS1).pid()) + "\n");
          return ::rmdir(starve.c_str()) == 0;
        }};
  };
  std::vector<Fault> all = {
      {"killed",
       s1,
       {"DEAD"},
       15,
       [&] {
         c.daemon(kS1).kill(SIGKILL);
         return true;
       },
       [&] { return c.restart(kS1); }},
      {"stopped",
       s1,
       {"DEAD", "SUSPECT"},
       15,
       [&] { return c.daemon(kS1).stop(); },
       [&] {
         c.daemon(kS1).kill(SIGCONT);
         return true;
       }},
      {"link down",
       ni,
       {"DOWN"},
       30,
       [&] {
         return c.ip_in(kS1, {"link", "set", dev, "down"});
       },
       [&] {
         return c.ip_in(kS1, {"link", "set", dev, "up"});
       }},
      {"tbf",
       ni,
       {"THROTTLED", "SLOW"},
       30,
       [&] {
         return c.exec_in(kS1, {"tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", "20mbit",
                                "burst", "16kb", "latency", "200ms"});
       },
       [&] {
         return c.exec_in(kS1, {"tc", "qdisc", "del", "dev", dev, "root"});
       }},
      {"5% drops",
       ni,
       {"LOSSY"},
       30,
       [&] {
         return c.nft(kS1,
                      "table inet pfsloss {\n chain in {\n  type filter hook input priority "
                      "0; policy accept;\n  iifname \"" +
                          dev + "\" numgen random mod 100 < 5 drop\n }\n}\n");
       },
       [&] {
         return c.exec_in(kS1, {"nft", "delete", "table", "inet", "pfsloss"});
       }},
      // Both at a quarter of what s1 needs under this load (15.9-17.5 ms a second,
      // 2026-12-07; printed at each): shorter stalls and long ones. Until then 1 ms per
      // 500 ms and 2 ms per second, a quarter of the 7-9 ms of 2026-12-06 -- an eighth of
      // the need since, s1 could not ping its MGS within 50 s and was named DEAD, not CPU.
      cpu_fault("CPU 2ms/500ms", 500000, 2000),
      cpu_fault("CPU 4ms/s", 1000000, 4000),
      {"MTU 9000",
       ni,
       {"MTU"},
       15,
       [&] {
         return c.ip_in(kS1, {"link", "set", dev, "mtu", "9000"});
       },
       [&] {
         return c.ip_in(kS1, {"link", "set", dev, "mtu", "1500"});
       }},
  };
  // PFSNET_FAULTS="CPU 2ms/500ms,CPU 4ms/s": only the classes named (to study one).
  if (const char* only = std::getenv("PFSNET_FAULTS"); only && *only) {
    const std::string list = std::string(",") + only + ",";
    std::erase_if(all, [&](const Fault& f) {
      return list.find("," + std::string(f.name) + ",") == std::string::npos;
    });
  }
  int total_false = 0, named_all = 0;
  for (Fault& f : all) {
    fault_note.clear();
    ASSERT_TRUE(f.inject()) << f.name;
    int false_alarms = 0, host_lossy = 0;
    json last;
    const uint64_t drops_before = c.host_drops(kS1);
    uint64_t host_dropped = 0;
    // A look at c2's list, counting (and printing the first few of) what is not about s1.
    // A path elsewhere called LOSSY while this host itself dropped packets outside s1 (its
    // input backlog overflowing under load: seen once in CI, 14 of 437 segments lost
    // between c2 and s2 while s1 was starved) is true, not a false alarm: counted apart.
    auto look = [&] {
      ps = faults();
      for (const json& p : ps) {
        if (about_s1(p)) continue;
        if (p["cause"] == "LOSSY") {
          host_dropped = c.host_drops(kS1) - drops_before;
          if (host_dropped > 0) {
            if (host_lossy++ < 3)
              std::printf(
                  "  %s: not about s1, LOSSY while the host dropped %llu packet(s) "
                  "itself: %s\n",
                  f.name, static_cast<unsigned long long>(host_dropped), p.dump().c_str());
            continue;
          }
        }
        if (false_alarms++ < 3) std::printf("  %s: not about s1: %s\n", f.name, p.dump().c_str());
        // The first one's TCP connections, as c2's kernel has them: what the verdict saw.
        if (false_alarms == 1 && p.value("kind", "") == "peer_ni") {
          const std::string subj = p["subject"].get<std::string>();
          std::printf("  c2's connections to %s:\n%s\n", subj.c_str(),
                      c.tcp_connections(kC2, subj.substr(0, subj.find('@'))).c_str());
        }
      }
    };
    double named = poll_until(
        [&] {
          look();
          for (const json& p : ps) {
            std::string subj = p["subject"];
            bool names = subj == f.subject || subj.rfind(f.subject + " (", 0) == 0;
            if (names && f.causes.count(p["cause"].get<std::string>())) return true;
          }
          return false;
        },
        60000ms);
    EXPECT_GE(named, 0) << f.name << " not named: " << ps.dump();
    if (named < 0) {  // what s1 itself said meanwhile, to tell why
      const std::string out = c.daemon(kS1).output();
      std::printf("s1's log (the last 4000 bytes):\n%s\n",
                  out.substr(out.size() > 4000 ? out.size() - 4000 : 0).c_str());
    }
    ASSERT_TRUE(f.heal()) << f.name;
    if (!fault_note.empty()) std::printf("%s: %s\n", f.name, fault_note.c_str());
    double cleared = poll_until(
        [&] {
          look();
          if (!ps.empty()) last = ps;
          return ps.empty();
        },
        90000ms);
    EXPECT_GE(cleared, 0) << f.name << ": still listed after the heal: " << ps.dump();
    EXPECT_LE(cleared, f.bound) << f.name << ": the last listed: " << last.dump();
    EXPECT_EQ(false_alarms, 0) << f.name;
    total_false += false_alarms;
    named_all += named >= 0;
    host_dropped = c.host_drops(kS1) - drops_before;
    std::printf(
        "%-9s named after %5.1f s, %d false alarm(s), gone %5.1f s after the heal "
        "(bound %g s); the host dropped %llu packet(s) itself (%d LOSSY look(s) elsewhere)%s%s\n",
        f.name, named, false_alarms, cleared, f.bound,
        static_cast<unsigned long long>(host_dropped), host_lossy,
        last.empty() ? "" : "; last: ", last.empty() ? "" : last.dump().substr(0, 300).c_str());
  }
  std::printf("%d of %zu fault classes named alone; %d false alarm(s) in all\n", named_all,
              all.size(), total_false);
  for (auto& l : loads) l->kill(SIGKILL);
}

// Issue 34's first property: a healthy cluster under mixed load lists nothing. Eight
// nodes, each on its own veth to a bridge per rail, two of the servers on a slower link
// class (50 Mbit/s by tbf, and speed_mbit = 50 in their config); the clients keep small
// echoes and 1 MiB writes going to every server; `pfsnet health` on every node is asked
// every two seconds and any problem it lists is a false alarm, counted and printed (the
// first of each kind whole).
//
// ctest runs it for 60 s (regular build; run alone: it needs the two cores);
// scripts/quiet_cluster.sh for 600 s or PFSNET_QUIET_SECONDS. Its figures, before and
// after each rule that made it true, are in docs/health_rules.md.
TEST(NetnsTest, AQuietClusterUnderLoadListsNothing) {
#if PFSNET_UNDER_ASAN || PFSNET_UNDER_TSAN
  GTEST_SKIP() << "timing-bound: eight sanitized daemons under load overload this host";
#endif
  const char* env = std::getenv("PFSNET_QUIET_SECONDS");
  int seconds = env ? std::max(10, std::atoi(env)) : 60;
  const std::vector<BridgedCluster::Node> nodes = {
      {"mgs", "mgs"},   {"c1", "client"}, {"c2", "client"},     {"s1", "server"},
      {"s2", "server"}, {"s3", "server"}, {"s4", "server", 50}, {"s5", "server", 50}};
  BridgedCluster c(nodes, "[mesh]\ninterval = 1\nbulk_interval = 5\nreport_interval = 3\n");
  if (!c.skip().empty()) GTEST_SKIP() << c.skip();
  ASSERT_TRUE(c.ok());
  auto problems = [&](size_t i) {
    json h = c.cli(i, {"health"});
    return h.is_object() ? h.value("problems", json::array()) : json::array();
  };
  // Up: every node in the MGS's table and every mesh row in.
  double up = poll_until(
      [&] {
        json t = c.cli(1, {"status"});
        if (!t.is_object() || t.value("nodes", json::array()).size() != c.size()) return false;
        for (const json& n : t["nodes"])
          if (n["state"] != "up") return false;
        json m = c.cli(1, {"mesh"});
        return m.is_object() && m["rows"].size() == c.size();
      },
      90000ms);
  ASSERT_GE(up, 0) << "the cluster did not come up";
  // The load: from each client to every server, 16 KiB echoes every 20 ms, and 1 MiB writes
  // (self-test, 4 in flight) on the first rail.
  std::vector<std::unique_ptr<Process>> loads;
  for (size_t cl : {size_t(1), size_t(2)})
    for (size_t s = 3; s < c.size(); ++s) {
      loads.push_back(std::make_unique<Process>(std::vector<std::string>{
          PFSNET_BIN, "--socket", c.socket(cl), "ping", BridgedCluster::nid(s, 0), "--count",
          std::to_string(seconds * 60), "--size", "16384", "--interval", "0.02", "--timeout",
          "10"}));
    }
  for (size_t cl : {size_t(1), size_t(2)}) {
    std::string to;
    for (size_t s = 3; s < c.size(); ++s) to += (to.empty() ? "" : ",") + BridgedCluster::nid(s, 0);
    std::vector<std::string> argv = {PFSNET_BIN, "--socket", c.socket(cl),
                                     "selftest", "--from",   BridgedCluster::nid(cl, 0),
                                     "--to",     to};
    for (const char* a :
         {"--test", "brw", "--size", "1M", "--concurrency", "4", "--distribute", "1:N"})
      argv.push_back(a);
    argv.push_back("--duration");
    argv.push_back(std::to_string(seconds + 10));
    loads.push_back(std::make_unique<Process>(argv));
  }
  auto t0 = Clock::now();
  // LOSSY while this host itself dropped packets (its input backlog overflowing when a VM
  // stalls) is true, not a false alarm: counted apart, with the drops.
  const uint64_t drops_before = c.host_drops(c.size());
  int looks = 0, false_alarms = 0, host_lossy = 0;
  std::map<std::string, int> seen;  // "node: kind subject cause" -> looks it was listed in
  std::set<std::string> examples;
  while (Clock::now() - t0 < std::chrono::seconds(seconds) && looks < 10000) {
    for (size_t i = 0; i < c.size(); ++i) {
      for (const json& p : problems(i)) {
        std::string what =
            p.value("kind", "") + " " + p.value("subject", "") + " " + p.value("cause", "");
        if (p.value("cause", "") == "LOSSY" && c.host_drops(c.size()) > drops_before) {
          if (host_lossy++ == 0)
            std::printf("  on %s, LOSSY while the host dropped packets itself: %s\n",
                        c.name(i).c_str(), p.dump().c_str());
          continue;
        }
        ++false_alarms;
        // The first of each kind of problem, whole (on any node).
        if (examples.insert(what).second)
          std::printf("  e.g. on %s: %s\n", c.name(i).c_str(), p.dump().c_str());
        seen[c.name(i) + ": " + what]++;
      }
    }
    ++looks;
    std::this_thread::sleep_for(2s);  // the next look, not a sync
  }
  std::printf(
      "quiet cluster, %d s under load: %d looks at %zu nodes, %d problems listed; the host "
      "dropped %llu packet(s) itself (%d LOSSY listing(s) then)\n",
      seconds, looks, c.size(), false_alarms,
      static_cast<unsigned long long>(c.host_drops(c.size()) - drops_before), host_lossy);
  for (const auto& [what, n] : seen) std::printf("  %3d x %s\n", n, what.c_str());
  EXPECT_EQ(false_alarms, 0);
  for (auto& l : loads) l->kill(SIGKILL);
}

}  // namespace
}  // namespace pfsnet::testing::netns
