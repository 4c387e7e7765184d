// The membership service on the in-process cluster (rpc/sim_cluster.h): an MGS, two
// servers and two clients running the real MembershipService, Net and RpcEngine over the
// in-memory transport, on manual time in 100 ms steps. Servers ping every 1 s, clients
// every 2 s; dead after 2 missed periods (+ a quarter period of grace). What the daemon
// tests assert with wall-clock bounds a loaded host can miss, asserted here exactly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "membership/service.h"
#include "membership/sim_members.h"
#include "rpc/ping.h"
#include "rpc/sim_cluster.h"

namespace pfsnet {
namespace {

using namespace std::chrono_literals;

class InProcessMembershipTest : public ::testing::Test {
 protected:
  // n2 is the MGS (and n7 the second, where a test adds it); n3 and n4 servers; n5 and n6
  // clients.
  void SetUp() override {
    for (int h : hosts_) start(h);
    ASSERT_TRUE(c_.run_until([&] { return up_in_table() == hosts_.size(); }, 5s));
  }
  void start(int host) { ASSERT_NE(m_.start(host), nullptr); }
  static Nid nid_of(int host) { return SimMembers::nid(host); }
  size_t up_in_table(int mgs = 2) { return m_.up_in_table(mgs); }
  bool dead_to(int host, int server) { return m_.dead_to(host, server); }
  // A PING from `from` to `to`: its status once it ends (within the step).
  Status ping(int from, int to) {
    std::optional<Status> got;
    CallOptions co;
    co.timeout = 5s;
    c_.find(SimMembers::name(from))
        ->rpc.call_async(
            nid_of(to), kMsgPing, Buffer(), nullptr, [&got](RpcReply&& r) { got = r.status; }, co);
    EXPECT_TRUE(c_.run_until([&] { return got.has_value(); }, 6s));
    return got.value_or(Status(Code::kTimeout, "no reply"));
  }

  std::vector<int> hosts_ = {2, 3, 4, 5, 6};
  SimCluster c_;
  SimMembers m_{c_};
};

class InProcessTwoMgsTest : public InProcessMembershipTest {
 protected:
  InProcessTwoMgsTest() {
    hosts_ = {2, 3, 4, 5, 6, 7};
    m_.set_mgs({2, 7});
  }
};

TEST_F(InProcessMembershipTest, ClientsHearOfADeadServerWithinItsDeadTimeAndOfItsReturnAtOnce) {
  ASSERT_TRUE(ping(5, 3).ok());
  ASSERT_TRUE(ping(6, 3).ok());
  c_.kill("n3");
  // Its last ping was at most one period (1 s) before the kill: dead 2.25 s after it, told
  // in the MGS's same round. Never before 1.25 s.
  auto told = c_.run_until([&] { return dead_to(5, 3) && dead_to(6, 3); }, 10s);
  ASSERT_TRUE(told.has_value());
  EXPECT_GE(*told, 1200ms);
  EXPECT_LE(*told, 2400ms);
  // Servers are not told of a server.
  EXPECT_FALSE(dead_to(4, 3));
  // New RPCs to it fail at once, with the MGS's verdict.
  Status s = ping(5, 3);
  EXPECT_EQ(s.code(), Code::kPeerDead) << s.to_string();
  EXPECT_NE(s.message().find("declared dead by the MGS"), std::string::npos) << s.to_string();
  // It comes back: it registers on its first round, the MGS tells the clients in its next.
  start(3);
  auto back = c_.run_until([&] { return !dead_to(5, 3) && !dead_to(6, 3); }, 10s);
  ASSERT_TRUE(back.has_value());
  EXPECT_LE(*back, 300ms);
  EXPECT_TRUE(ping(5, 3).ok());
  EXPECT_EQ(up_in_table(), 5u);
  std::printf(
      "dead server told to every client %.1f s after the kill, its return %.1f s after "
      "its start (manual time)\n",
      std::chrono::duration<double>(*told).count(), std::chrono::duration<double>(*back).count());
}

// A call that waits for a restarting server (CallOptions::recover, as block I/O does) is
// not failed with the others when the MGS declares its server dead: it goes on being resent
// within its deadline and is answered once the server is back -- an upgrade's restart, down
// longer than a plain call's lnet.retry_count refused connects. The plain call sent with it
// fails, as before; so does one sent while the server is dead.
TEST_F(InProcessMembershipTest, ARecoverCallOutlivesItsServerDeclaredDeadAndIsAnsweredOnItsReturn) {
  ASSERT_TRUE(ping(5, 3).ok());
  c_.kill("n3");
  std::optional<Status> waited, plain;
  CallOptions co;
  co.timeout = 20s;
  co.recover = true;
  RpcEngine& rpc5 = c_.find(SimMembers::name(5))->rpc;
  rpc5.call_async(
      nid_of(3), kMsgPing, Buffer(), nullptr, [&waited](RpcReply&& r) { waited = r.status; }, co);
  CallOptions po;
  po.timeout = 20s;
  rpc5.call_async(
      nid_of(3), kMsgPing, Buffer(), nullptr, [&plain](RpcReply&& r) { plain = r.status; }, po);
  ASSERT_TRUE(c_.run_until([&] { return dead_to(5, 3) && plain.has_value(); }, 10s));
  EXPECT_FALSE(plain->ok());
  ASSERT_TRUE(c_.run_for(2s));  // dead for a while: the waiting call's resends are refused
  EXPECT_FALSE(waited.has_value()) << waited->to_string();
  EXPECT_EQ(ping(5, 3).code(), Code::kPeerDead);
  const TimePoint down_until = c_.clock().now();
  start(3);
  ASSERT_TRUE(c_.run_until([&] { return waited.has_value(); }, 15s));
  EXPECT_TRUE(waited->ok()) << waited->to_string();
  EXPECT_GE(c_.clock().now(), down_until);
}

TEST_F(InProcessMembershipTest, ServersHearOfADeadClientAndClientsDoNot) {
  c_.run_for(3s);  // the clients have been heard by the servers' reports or their own pings
  c_.kill("n6");
  // Clients ping every 2 s: dead 4.5 s after the last one, never before 2.5 s.
  auto told = c_.run_until([&] { return m_.state_in(2, "n6") == "dead"; }, 10s);
  ASSERT_TRUE(told.has_value());
  EXPECT_GE(*told, 2400ms);
  EXPECT_LE(*told, 4600ms);
  EXPECT_FALSE(dead_to(5, 6));  // a client is not told of a client
}

// A server cut off from the MGS alone (its cable to the MGS pulled, every other link up):
// the MGS, which no longer hears it, declares it dead and tells the clients; when the cut
// heals its pings get through and the clients hear it is back.
TEST_F(InProcessMembershipTest, AServerCutOffFromTheMgsIsDeadToItAndBackWhenTheCutHeals) {
  c_.cut("n3", "n2");
  auto told = c_.run_until([&] { return dead_to(5, 3) && dead_to(6, 3); }, 10s);
  ASSERT_TRUE(told.has_value());
  EXPECT_GE(*told, 1200ms);
  EXPECT_LE(*told, 2400ms);
  EXPECT_EQ(m_.state_in(2, "n3"), "dead");
  c_.run_for(5s);  // the cut lasts: it stays dead, nothing else changes
  EXPECT_EQ(m_.state_in(2, "n3"), "dead");
  EXPECT_EQ(up_in_table(), 4u);
  c_.heal("n3", "n2");
  auto back = c_.run_until([&] { return !dead_to(5, 3) && !dead_to(6, 3); }, 10s);
  ASSERT_TRUE(back.has_value());
  EXPECT_LE(*back, 1100ms);  // its next ping, at most a period away, and the MGS's round
  EXPECT_EQ(up_in_table(), 5u);
  EXPECT_TRUE(ping(5, 3).ok());
}

// One client cannot reach a server that the MGS still reaches: the client's RPCs time out
// and it reports the server unreachable, the MGS pings the server itself, which answers,
// and the report is not believed: no one is told the server is dead.
TEST_F(InProcessMembershipTest, OneClientsCutLinkDoesNotKillTheServerForEveryone) {
  c_.cut("n5", "n3");
  Status s = ping(5, 3);
  EXPECT_FALSE(s.ok()) << s.to_string();
  bool ever_dead = false;
  auto verified = c_.run_until(
      [&] {
        ever_dead = ever_dead || dead_to(6, 3) || m_.state_in(2, "n3") == "dead";
        return m_.at(2).counters().mgs->verified_alive >= 1;
      },
      15s);
  ASSERT_TRUE(verified.has_value()) << "the MGS never verified the report";
  c_.run_for(5s);
  ever_dead = ever_dead || dead_to(6, 3) || m_.state_in(2, "n3") == "dead";
  EXPECT_FALSE(ever_dead);
  EXPECT_EQ(m_.state_in(2, "n3"), "up");
  EXPECT_EQ(m_.at(2).counters().mgs->verified_dead, 0u);
  c_.heal("n5", "n3");
  EXPECT_TRUE(ping(5, 3).ok());
}

// A restarted MGS (same NID, empty table) answers the old nodes' pings "unknown"; each
// registers again at its next ping: servers within their period (1 s), clients within
// theirs (2 s).
TEST_F(InProcessMembershipTest, ARestartedMgsRebuildsItsTableWithinAClientPeriod) {
  c_.kill("n2");
  start(2);
  auto rebuilt = c_.run_until([&] { return up_in_table() == 5; }, 10s);
  ASSERT_TRUE(rebuilt.has_value());
  EXPECT_LE(*rebuilt, 2200ms);  // a client period, a step for the ping, one to see it
  std::printf("restarted MGS: every node registered again %.1f s after the restart\n",
              std::chrono::duration<double>(*rebuilt).count());
}

// The first MGS dies: each node's next request to it fails (its connection closed, its
// NID refuses), and the node registers with the second at once.
TEST_F(InProcessTwoMgsTest, NodesFailOverToTheSecondMgsWithinAClientPeriod) {
  c_.kill("n2");
  auto moved = c_.run_until(
      [&] {
        for (int h : {3, 4, 5, 6})
          if (m_.at(h).current_mgs() != nid_of(7)) return false;
        return up_in_table(7) == 5;  // n3-n7: n2 is gone
      },
      10s);
  ASSERT_TRUE(moved.has_value());
  EXPECT_LE(*moved, 2200ms);  // a client period, a step for the ping, one to see it
  std::printf("MGS failover: every node registered with the second MGS %.1f s after the kill\n",
              std::chrono::duration<double>(*moved).count());
}

// The same run twice gives the same times: nothing depends on the host.
TEST(InProcessMembershipRepeat, TwoRunsOfTheSameClusterAgreeToTheStep) {
  auto one_run = [] {
    struct Run : InProcessMembershipTest {
      void TestBody() override {}
      std::optional<Duration> go() {
        SetUp();
        c_.kill("n4");
        return c_.run_until([&] { return dead_to(5, 4) && dead_to(6, 4); }, 10s);
      }
    } r;
    return r.go();
  };
  auto a = one_run(), b = one_run();
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a, b);
}

// Heard-from reports without a server list (issue 36): client n5 talks to server n3 all
// the time, client n6 only to client n5. n5 learns n3 is a server by asking on its ping
// and then skips its pings (n3's reports keep it up); n6 learns n5 is not and never skips.
// Client period 10 s, server 1 s: the skip window is 8 s.
class InProcessHeardReportsTest : public InProcessMembershipTest {
 protected:
  InProcessHeardReportsTest() {
    m_.configure = [](Config& c) {
      c.membership.client_ping_interval = 10;
      c.membership.heard_from_reports = true;
    };
  }
  uint64_t skipped(int host) { return m_.at(host).counters().agent->counters.skipped; }
};

TEST_F(InProcessHeardReportsTest, AClientLearnsWhichPeersAreServersAndSkipsPingsOnlyForThem) {
  for (int i = 0; i < 160; ++i) {  // 80 s in 500 ms steps
    ASSERT_TRUE(ping(5, 3).ok());
    ASSERT_TRUE(ping(6, 5).ok());
    ASSERT_TRUE(c_.run_for(500ms));
    ASSERT_EQ(m_.state_in(2, "n5"), "up") << i;
    ASSERT_EQ(m_.state_in(2, "n6"), "up") << i;
  }
  EXPECT_GE(skipped(5), 4u);  // of 8 periods: two skips, then a ping of its own, ...
  EXPECT_EQ(skipped(6), 0u);
}

// A server's death told through another server (MGS_RELAY): n2 the MGS, n3 and n4 servers,
// n5-n10 clients; relays while more than 2 wait, 4 clients a relay. n4 cannot reach n5:
// it answers that it missed n5, and the MGS tells n5 itself after its back-off.
class InProcessRelayTest : public InProcessMembershipTest {
 protected:
  InProcessRelayTest() {
    hosts_ = {2, 3, 4, 5, 6, 7, 8, 9, 10};
    m_.configure = [](Config& c) {
      c.membership.notify_relay_above = 2;
      c.membership.notify_relay_fanout = 4;
    };
  }
};

TEST_F(InProcessRelayTest, ClientsAreToldThroughAServerAndOneItMissesIsToldByTheMgs) {
  c_.cut("n4", "n5");
  c_.kill("n3");
  auto others = [&] {
    for (int h = 6; h <= 10; ++h)
      if (!dead_to(h, 3)) return false;
    return true;
  };
  auto told = c_.run_until(others, 10s);
  ASSERT_TRUE(told.has_value());
  EXPECT_LE(*told, 2400ms);  // dead 2.25 s after its last ping at most: told in that round
  EXPECT_FALSE(dead_to(5, 3));
  MgsCore::Counters mc = *m_.at(2).counters().mgs;
  EXPECT_EQ(mc.relays, 2u);   // 4 + 2
  EXPECT_EQ(mc.relayed, 6u);  // every client
  // n4's try of n5 times out (2.5 s), the MGS retries n5 after 1 s, by itself: 1 waits.
  auto late = c_.run_until([&] { return dead_to(5, 3); }, 10s);
  ASSERT_TRUE(late.has_value());
  EXPECT_GE(*late, 2s);
  mc = *m_.at(2).counters().mgs;
  EXPECT_EQ(mc.relays, 2u);
  EXPECT_EQ(mc.notification_retries, 1u);
  EXPECT_EQ(mc.notification_failures, 1u);  // n5 alone: n4's relay itself answered
  EXPECT_EQ(mc.notifications_dropped, 0u);
}

// The cluster's minimum release level (issue 69): n3 plays a node of a release that speaks
// only wire version 1 (its handshakes offer nothing, as 8827b49's do).
class InProcessReleaseLevelTest : public InProcessMembershipTest {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_);
    m_.configure = [this](Config& cfg) { cfg.membership.state_dir = dir_; };
    for (int h : hosts_) start_as(h, h == 3);
    ASSERT_TRUE(c_.run_until([&] { return up_in_table() == hosts_.size(); }, 5s));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void start_as(int host, bool version1) {
    WireSpeaks w;
    if (version1) {
      w.max_version = 1;
      w.features = 0;
    }
    ASSERT_NE(m_.start(host, {}, w), nullptr);
  }
  Result<UpgradeRep> upgrade(int from, bool commit, bool force = false) {
    UpgradeReq q;
    q.commit = commit;
    q.force = force;
    return m_.at(from).upgrade(q, 5s);
  }
  uint16_t learned(int host) {
    auto a = m_.at(host).counters().agent;
    return a ? a->cluster_level : 0;
  }

  const std::string dir_ = ::testing::TempDir() + "/pfsnet-level-" + std::to_string(getpid());
};

TEST_F(InProcessReleaseLevelTest, TheLevelRisesOnlyOnceNoLiveNodeIsBelowAndThenKeepsThemOut) {
  // Every node of this build is told level 1 by the MGS; the version-1 node is told nothing.
  ASSERT_TRUE(
      c_.run_until([&] { return learned(4) == 1 && learned(5) == 1 && learned(6) == 1; }, 3s));
  EXPECT_EQ(learned(3), 0);
  auto check = upgrade(5, false);
  ASSERT_TRUE(check.ok()) << check.status().to_string();
  EXPECT_EQ(check->level, 1);
  EXPECT_EQ(check->target, kReleaseLevel);
  EXPECT_EQ(check->total, 5u);
  ASSERT_EQ(check->nodes.size(), 1u);
  EXPECT_EQ(check->nodes[0].name, "n3");
  EXPECT_EQ(check->nodes[0].level, 1);
  // A commit while n3 is up is refused, by name, and changes nothing.
  auto refused = upgrade(5, true);
  ASSERT_TRUE(refused.ok()) << refused.status().to_string();
  EXPECT_FALSE(refused->committed);
  EXPECT_NE(refused->refusal.find("below level 2 or not heard from yet: n3"), std::string::npos)
      << refused->refusal;
  EXPECT_EQ(upgrade(2, false)->level, 1);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/release_level"));

  // n3 stops (to be upgraded); once the MGS calls it dead it holds nothing back.
  c_.kill("n3");
  ASSERT_TRUE(c_.run_until([&] { return m_.state_in(2, "n3") == "dead"; }, 4s));
  auto done = upgrade(6, true);
  ASSERT_TRUE(done.ok()) << done.status().to_string();
  EXPECT_TRUE(done->committed) << done->refusal;
  EXPECT_EQ(done->level, 2);
  EXPECT_EQ(done->below, 1u) << "n3, dead, still listed";
  auto rec = read_level_file(dir_ + "/release_level");
  ASSERT_TRUE(rec.ok()) << rec.status().to_string();
  EXPECT_EQ(rec->level, 2);
  EXPECT_EQ(rec->by, "10.0.0.6@tcp");
  // Every node hears it with its next ping (clients every 2 s).
  ASSERT_TRUE(
      c_.run_until([&] { return learned(4) == 2 && learned(5) == 2 && learned(6) == 2; }, 2100ms));

  // n3 comes back still of version 1: every node refuses it, saying why; it never registers.
  start_as(3, true);
  c_.run_for(3s);
  EXPECT_EQ(m_.state_in(2, "n3"), "dead");
  Status st = ping(3, 4);
  EXPECT_EQ(st.code(), Code::kRejected) << st.to_string();
  EXPECT_NE(st.message().find("minimum release level is 2"), std::string::npos) << st.to_string();
  EXPECT_TRUE(ping(5, 4).ok());
  // Upgraded, it is taken back.
  c_.kill("n3");
  start_as(3, false);
  ASSERT_TRUE(c_.run_until([&] { return m_.state_in(2, "n3") == "up"; }, 3s));
  EXPECT_EQ(upgrade(5, false)->below, 0u);
  EXPECT_TRUE(ping(3, 4).ok());

  // A level is never lowered.
  UpgradeReq lower;
  lower.commit = true;
  lower.level = 1;
  auto l = m_.at(5).upgrade(lower, 5s);
  ASSERT_TRUE(l.ok());
  EXPECT_NE(l->refusal.find("never lowered"), std::string::npos) << l->refusal;
}

TEST_F(InProcessReleaseLevelTest, ARestartedMgsKeepsTheLevelFromItsFile) {
  c_.kill("n3");
  ASSERT_TRUE(c_.run_until([&] { return m_.state_in(2, "n3") == "dead"; }, 4s));
  ASSERT_TRUE(upgrade(2, true)->committed);
  c_.kill("n2");
  start_as(2, false);
  // The nodes register again with the new MGS, which tells them the level it read.
  ASSERT_TRUE(c_.run_until([&] { return up_in_table() == 4; }, 5s));
  auto r = upgrade(5, false);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->level, 2);
  EXPECT_EQ(m_.at(2).counters().level->level, 2);
  // A version-1 node is refused by the restarted MGS itself.
  start_as(3, true);
  c_.run_for(3s);
  EXPECT_EQ(m_.state_in(2, "n3"), "");
}

TEST_F(InProcessReleaseLevelTest, AForcedCommitShutsOutANodeBelowTheLevelWhenItReconnects) {
  auto r = upgrade(4, true, /*force=*/true);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->committed) << r->refusal;
  EXPECT_EQ(r->level, 2);
  ASSERT_EQ(r->nodes.size(), 1u);
  EXPECT_EQ(r->nodes[0].name, "n3");
  // n3's connections open before the commit keep going until they close; once restarted it
  // is refused by every node that heard the level (with its next ping: a client's within 2 s).
  ASSERT_TRUE(c_.run_until([&] { return learned(5) == 2; }, 2100ms));
  c_.kill("n3");
  start_as(3, true);
  Status st = ping(3, 5);
  EXPECT_EQ(st.code(), Code::kRejected) << st.to_string();
  ASSERT_TRUE(c_.run_until([&] { return m_.state_in(2, "n3") == "dead"; }, 5s));
}

TEST_F(InProcessReleaseLevelTest, AnMgsWhoseLevelRecordDoesNotReadDoesNotStartAndSaysWhy) {
  const std::string path = dir_ + "/release_level";
  {
    std::ofstream f(path);
    f << "format pfsnet-release-level 1\nlevel two\n";
  }
  Config cfg = m_.config(2);
  cfg.nets[0].nid = SimMembers::nid(9);  // a second MGS process beside the running one
  SimNode* n = c_.add("n9", {SimMembers::nid(9)}, NetOptions::from(cfg), RpcOptions::from(cfg));
  ASSERT_NE(n, nullptr);
  MembershipService& m = n->attach<MembershipService>(cfg, n->net, n->rpc, c_.clock());
  Status st = m.start(c_.hub());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(path), std::string::npos) << st.to_string();
  EXPECT_NE(st.message().find("level 'two'"), std::string::npos) << st.to_string();
}

}  // namespace
}  // namespace pfsnet
