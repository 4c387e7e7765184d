// Issue 70, item 6: what an outside drill found in `pfsnet health`, each finding a test.
// The drill's cluster: six daemons (the MGS, three clients, two servers), each in its own
// namespace on a bridge per rail, every key at its default; the three clients keep 16 KiB
// echoes going to both servers (every 10 ms, either rail), one fault at a time is injected
// on s1 from outside pfsnet, and `pfsnet health --json` is read on c3 alone, once a second.
// A new cluster for each finding: no fault's aftermath in the next. Needs root (skipped
// otherwise); not under a sanitizer (timing-bound: sanitized daemons under this load make
// two cores the bottleneck, and the mesh measures the scheduler).
#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <map>
#include <thread>

#include "base/sanitizers.h"
#include "bridged_cluster.h"

namespace pfsnet::testing::netns {
namespace {

class Drill {
 public:
  enum { kMgs, kC1, kC2, kC3, kS1, kS2 };
  Drill()
      : c_({{"mgs", "mgs"},
            {"c1", "client"},
            {"c2", "client"},
            {"c3", "client"},
            {"s1", "server"},
            {"s2", "server"}},
           "") {}

  BridgedCluster& c() { return c_; }
  std::string skip() {
    if (!c_.skip().empty()) return c_.skip();
    if (access("/usr/sbin/nft", X_OK) != 0) return "needs nftables";
    return "";
  }
  // Up and quiet: every node in the table, every mesh row in with its MTUs, nothing listed;
  // then the load, under way to both servers from every client.
  ::testing::AssertionResult start() {
    if (!c_.ok()) return ::testing::AssertionFailure() << "the cluster did not start";
    json ps;
    double healthy = poll_until(
        [&] {
          json t = c_.cli(kC3, {"status"});
          if (!t.is_object() || t.value("nodes", json::array()).size() != c_.size()) return false;
          for (const json& n : t["nodes"])
            if (n["state"] != "up") return false;
          json m = c_.cli(kC3, {"mesh"});
          if (!m.is_object() || m["rows"].size() != c_.size()) return false;
          for (const json& r : m["rows"])
            for (const json& cell : r["cells"])
              if (cell["peer_mtu"] == 0) return false;
          ps = faults();
          return ps.empty();
        },
        120000ms);
    if (healthy < 0) return ::testing::AssertionFailure() << "not healthy: " << ps.dump();
    for (size_t cl : {kC1, kC2, kC3})
      for (size_t s : {kS1, kS2})
        for (int rail = 0; rail < 2; ++rail)
          loads_.push_back(std::make_unique<Process>(std::vector<std::string>{
              PFSNET_BIN, "--socket", c_.socket(cl), "ping", BridgedCluster::nid(s, rail),
              "--count", "100000", "--size", "16384", "--interval", "0.02", "--timeout", "10"}));
    double going = poll_until(
        [&] {
          for (auto& l : loads_)
            if (l->output().find("reply from") == std::string::npos) return false;
          return true;
        },
        20000ms);
    if (going < 0) return ::testing::AssertionFailure() << "the load did not start";
    // 15 s of the load before any fault, as in a cluster at work: each node's baselines
    // (the slowness window is 10 s) learn the loaded paths; and nothing is listed meanwhile.
    json listed;
    watch(15, nullptr, [&](const json& ps, double) {
      if (!ps.empty() && listed.is_null()) listed = ps;
    });
    if (!listed.is_null())
      return ::testing::AssertionFailure()
             << "listed under load, before any fault: " << listed.dump();
    return ::testing::AssertionSuccess();
  }
  json faults() { return faults_at(c_, kC3); }
  // s1's rail-0 NI, and the interface it is on.
  static std::string ni() { return BridgedCluster::nid(kS1, 0); }
  std::string dev() { return c_.ifname(kS1, 0); }

  // Looks at c3's list once a second for at most `seconds` from now, `until` a look's list
  // says so (then returns the seconds it took), calling `each` on every look's list.
  double watch(double seconds, const std::function<bool(const json&)>& until,
               const std::function<void(const json&, double)>& each = nullptr) {
    auto t0 = Clock::now();
    for (int round = 0; round < 600; ++round) {
      double at = std::chrono::duration<double>(Clock::now() - t0).count();
      if (at > seconds) break;
      json ps = faults();
      last_ = ps;
      if (each) each(ps, at);
      if (until && until(ps)) return at;
      std::this_thread::sleep_for(1s);  // the next look, not a sync
    }
    return -1;
  }
  const json& last() const { return last_; }

  ~Drill() {
    for (auto& l : loads_) l->kill(SIGKILL);
  }

 private:
  BridgedCluster c_;
  std::vector<std::unique_ptr<Process>> loads_;
  json last_;
};

// A problem about `who`: it names it ("NID" or "NID (node)", or the node), or a path with it
// at either end.
bool mentions(const json& p, const std::string& who) {
  std::string s = p["subject"];
  return s == who || s.rfind(who + " (", 0) == 0 || s.rfind(who + " ->", 0) == 0 ||
         s.find("-> " + who + " (") != std::string::npos ||
         s.find("(" + who + " ->") != std::string::npos ||
         s.find("-> " + who + ")") != std::string::npos;
}

std::string lines(const json& ps) {
  std::string s;
  for (const json& p : ps)
    s += "  " + p["kind"].get<std::string>() + " " + p["subject"].get<std::string>() + " " +
         p["cause"].get<std::string>() + " seen by " + p.value("seen_by", "") + ": " +
         p.value("evidence", "") + "\n";
  return s;
}

#define SKIP_UNDER_SANITIZERS()                                                    \
  do {                                                                             \
    if (PFSNET_UNDER_ASAN || PFSNET_UNDER_TSAN)                                    \
      GTEST_SKIP() << "timing-bound: six sanitized daemons under load, two cores"; \
  } while (0)

// The drill's first finding: 3% random drops both ways on a server's link were named LOSSY
// only after 54 s. Now within 15 s.
TEST(NetnsDrillTest, ThreePerCentDropsBothWaysAreNamedLossyWithin15s) {
  SKIP_UNDER_SANITIZERS();
  Drill d;
  if (!d.skip().empty()) GTEST_SKIP() << d.skip();
  ASSERT_TRUE(d.start());
  ASSERT_TRUE(d.c().nft(Drill::kS1,
                        "table inet pfsloss {\n"
                        " chain in {\n  type filter hook input priority 0;\n"
                        "  iifname \"" +
                            d.dev() +
                            "\" numgen random mod 100 < 3 drop\n }\n"
                            " chain out {\n  type filter hook output priority 0;\n"
                            "  oifname \"" +
                            d.dev() + "\" numgen random mod 100 < 3 drop\n }\n}\n"));
  double named = d.watch(60, [](const json& ps) {
    for (const json& p : ps)
      if (mentions(p, Drill::ni()) && p["cause"] == "LOSSY") return true;
    return false;
  });
  std::printf("3%% drops both ways: named LOSSY after %.1f s\n%s", named, lines(d.last()).c_str());
  EXPECT_GE(named, 0) << "not named LOSSY in 60 s";
  EXPECT_LE(named, 15.0);
}

// The second: tbf at 20 Mbit/s on a server's link was first named LOSSY (after 8 s), SLOW only
// at 18 s. A shaper is congestion: never LOSSY, while it is named and for 30 s after.
TEST(NetnsDrillTest, AShapedLinkIsNamedSlowOrThrottledAndNeverLossy) {
  SKIP_UNDER_SANITIZERS();
  Drill d;
  if (!d.skip().empty()) GTEST_SKIP() << d.skip();
  ASSERT_TRUE(d.start());
  ASSERT_TRUE(d.c().exec_in(Drill::kS1, {"tc", "qdisc", "add", "dev", d.dev(), "root", "tbf",
                                         "rate", "20mbit", "burst", "16kb", "latency", "200ms"}));
  std::vector<std::string> lossy;
  auto each = [&](const json& ps, double at) {
    for (const json& p : ps)
      if (mentions(p, Drill::ni()) && p["cause"] == "LOSSY" && lossy.size() < 3)
        lossy.push_back(std::to_string(at) + " s: " + p.dump());
  };
  double named = d.watch(
      90,
      [](const json& ps) {
        for (const json& p : ps)
          if (mentions(p, Drill::ni()) && (p["cause"] == "SLOW" || p["cause"] == "THROTTLED"))
            return true;
        return false;
      },
      each);
  std::printf("tbf 20 Mbit/s: named SLOW or THROTTLED after %.1f s\n%s", named,
              lines(d.last()).c_str());
  EXPECT_GE(named, 0) << "not named in 90 s";
  // Issue 70, item 3: the slow RPCs to the shaped NI are the network's. c3's slowest RPCs
  // (`diag ops --history`) to s1's shaped NI are blamed on the wire.
  {
    const json h = d.c().cli(Drill::kC3, {"diag", "ops", "--history"});
    std::map<std::string, int> blamed;  // "network" / "server" / "client"
    std::string first;
    for (const json& o : h.value("history", json::array()))
      if (o.value("peer", "") == Drill::ni() && o.contains("blame")) {
        const std::string v = o["blame"]["verdict"];
        blamed[v.substr(0, v.find(':'))]++;
        if (first.empty() && v.starts_with("network:")) first = v;
      }
    std::printf("c3's slowest RPCs to the shaped NI, blamed: %s; the slowest network one: %s\n",
                ::testing::PrintToString(blamed).c_str(), first.c_str());
    EXPECT_GT(blamed["network"], 0) << h.dump();
    EXPECT_EQ(blamed["server"], 0) << h.dump();
    // Set against TCP's view of the path: its RTT, read when the RPC ended.
    EXPECT_NE(first.find("now TCP on "), std::string::npos) << first;
  }
  d.watch(30, nullptr, each);
  std::printf("and 30 s later:\n%s", lines(d.last()).c_str());
  for (const std::string& l : lossy) ADD_FAILURE() << "congestion called loss at " << l;
}

// The third: a server stopped 80% of the time (SIGSTOP 800 ms, SIGCONT 200 ms, from outside)
// was named only after 51 s, as a SLOW peer NI, never as the server. Now the node, within
// 30 s.
TEST(NetnsDrillTest, AServerStoppedMostOfEachSecondIsNamedAsTheServerWithin30s) {
  SKIP_UNDER_SANITIZERS();
  Drill d;
  if (!d.skip().empty()) GTEST_SKIP() << d.skip();
  ASSERT_TRUE(d.start());
  const pid_t pid = d.c().daemon(Drill::kS1).pid();
  std::atomic<bool> done{false};
  // The duty cycle, bounded: at most 90 cycles (90 s), left running (SIGCONT) at the end.
  std::thread duty([&] {
    for (int i = 0; i < 90 && !done.load(); ++i) {
      ::kill(pid, SIGSTOP);
      std::this_thread::sleep_for(800ms);  // the fault's own timing, not a sync
      ::kill(pid, SIGCONT);
      std::this_thread::sleep_for(200ms);
    }
    ::kill(pid, SIGCONT);
  });
  // The server: a line of kind "server" (cause SERVER) naming it by its first NID.
  double named = d.watch(60, [&](const json& ps) {
    for (const json& p : ps)
      if (p["kind"] == "server" && p["cause"] == "SERVER" &&
          p["subject"] == BridgedCluster::nid(Drill::kS1, 0))
        return true;
    return false;
  });
  done = true;
  duty.join();
  std::printf("s1 stopped 80%% of each second: named as the server after %.1f s\n%s", named,
              lines(d.last()).c_str());
  EXPECT_GE(named, 0) << "the server never named in 60 s";
  EXPECT_LE(named, 30.0);
}

// The fourth: during an MTU mismatch on one server, the healthy server's path from another
// client was listed SLOW for a while. Now the mismatch is named, and nothing about s2 is,
// over 60 s.
TEST(NetnsDrillTest, AnMtuMismatchOnOneServerNamesNothingAboutTheOther) {
  SKIP_UNDER_SANITIZERS();
  Drill d;
  if (!d.skip().empty()) GTEST_SKIP() << d.skip();
  ASSERT_TRUE(d.start());
  ASSERT_TRUE(d.c().ip_in(Drill::kS1, {"link", "set", d.dev(), "mtu", "9000"}));
  std::vector<std::string> healthy_named;
  const std::string s2 = d.c().name(Drill::kS2);
  auto each = [&](const json& ps, double at) {
    for (const json& p : ps) {
      bool about_s2 = mentions(p, s2);
      for (int rail = 0; rail < 2; ++rail)
        about_s2 = about_s2 || mentions(p, BridgedCluster::nid(Drill::kS2, rail));
      if (about_s2 && healthy_named.size() < 3)
        healthy_named.push_back(std::to_string(at) + " s: " + p.dump());
    }
  };
  double named = d.watch(
      60,
      [](const json& ps) {
        for (const json& p : ps)
          if (mentions(p, Drill::ni()) && p["cause"] == "MTU") return true;
        return false;
      },
      each);
  EXPECT_GE(named, 0) << "the MTU mismatch not named in 60 s";
  d.watch(60, nullptr, each);
  std::printf("MTU 9000 on s1: named after %.1f s; 60 s later:\n%s", named,
              lines(d.last()).c_str());
  for (const std::string& l : healthy_named) ADD_FAILURE() << "the healthy server named at " << l;
}

}  // namespace
}  // namespace pfsnet::testing::netns
