// The membership service on the in-process cluster (rpc/sim_cluster.h): an MGS, two
// servers and two clients running the real MembershipService, Net and RpcEngine over the
// in-memory transport, on manual time in 100 ms steps. Servers ping every 1 s, clients
// every 2 s; dead after 2 missed periods (+ a quarter period of grace). What the daemon
// tests assert with wall-clock bounds a loaded host can miss, asserted here exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "membership/service.h"
#include "rpc/ping.h"
#include "rpc/sim_cluster.h"

namespace pfsnet {
namespace {

using namespace std::chrono_literals;

Nid nid_of(int host) { return *Nid::parse("10.0.0." + std::to_string(host) + "@tcp"); }

class InProcessMembershipTest : public ::testing::Test {
 protected:
  // n2 is the MGS (and n7 the second, where a test adds it); n3 and n4 servers; n5 and n6
  // clients.
  void SetUp() override {
    for (int h : hosts_) start(h);
    ASSERT_TRUE(c_.run_until([&] { return up_in_table() == hosts_.size(); }, 5s));
  }
  const char* role(int host) const {
    if (std::find(mgs_.begin(), mgs_.end(), host) != mgs_.end()) return "mgs";
    return host <= 4 ? "server" : "client";
  }
  static std::string name(int host) { return "n" + std::to_string(host); }

  void start(int host) {
    Config cfg;
    cfg.node.name = name(host);
    cfg.node.roles = {role(host)};
    for (int m : mgs_) cfg.node.mgs.push_back(nid_of(m));
    NetConfig nc;
    nc.nid = nid_of(host);
    cfg.nets = {nc};
    cfg.membership.server_ping_interval = 1;
    cfg.membership.client_ping_interval = 2;
    cfg.membership.ping_miss_limit = 2;
    SimNode* n = c_.add(name(host), {nid_of(host)}, NetOptions::from(cfg), RpcOptions::from(cfg));
    ASSERT_NE(n, nullptr);
    MembershipService& m = n->attach<MembershipService>(cfg, n->net, n->rpc, c_.clock());
    n->on_tick([&m](TimePoint now) { m.tick(now); });
    services_[host] = &m;
  }
  // Nodes the MGS's table lists up.
  size_t up_in_table(int mgs = 2) {
    auto t = services_[mgs]->status(1s);  // the MGS answers from its own table
    if (!t.ok()) return 0;
    size_t up = 0;
    for (const StatusNode& n : t->nodes) up += n.state == NodeState::kUp;
    return up;
  }
  // Whether client `host` refuses RPCs to server `server` as dead.
  bool dead_to(int host, int server) { return c_.find(name(host))->net.peer_dead(nid_of(server)); }
  // A PING from `from` to `to`: its status once it ends (within the step).
  Status ping(int from, int to) {
    std::optional<Status> got;
    CallOptions co;
    co.timeout = 5s;
    c_.find(name(from))
        ->rpc.call_async(
            nid_of(to), kMsgPing, Buffer(), nullptr, [&got](RpcReply&& r) { got = r.status; }, co);
    EXPECT_TRUE(c_.run_until([&] { return got.has_value(); }, 6s));
    return got.value_or(Status(Code::kTimeout, "no reply"));
  }

  std::vector<int> mgs_ = {2}, hosts_ = {2, 3, 4, 5, 6};
  SimCluster c_;
  std::map<int, MembershipService*> services_;
};

class InProcessTwoMgsTest : public InProcessMembershipTest {
 protected:
  InProcessTwoMgsTest() {
    mgs_ = {2, 7};
    hosts_ = {2, 3, 4, 5, 6, 7};
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

TEST_F(InProcessMembershipTest, ServersHearOfADeadClientAndClientsDoNot) {
  c_.run_for(3s);  // the clients have been heard by the servers' reports or their own pings
  c_.kill("n6");
  // Clients ping every 2 s: dead 4.5 s after the last one, never before 2.5 s.
  auto told = c_.run_until(
      [&] {
        auto t = services_[2]->status(1s);
        if (!t.ok()) return false;
        for (const StatusNode& n : t->nodes)
          if (n.name == "n6") return n.state == NodeState::kDead;
        return false;
      },
      10s);
  ASSERT_TRUE(told.has_value());
  EXPECT_GE(*told, 2400ms);
  EXPECT_LE(*told, 4600ms);
  EXPECT_FALSE(dead_to(5, 6));  // a client is not told of a client
}

// The state of `name` in the MGS's table ("" when not listed).
std::string state_in(MembershipService& mgs, const std::string& name) {
  auto t = mgs.status(std::chrono::seconds(1));
  if (!t.ok()) return "";
  for (const StatusNode& n : t->nodes)
    if (n.name == name) return node_state_name(n.state);
  return "";
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
  EXPECT_EQ(state_in(*services_[2], "n3"), "dead");
  c_.run_for(5s);  // the cut lasts: it stays dead, nothing else changes
  EXPECT_EQ(state_in(*services_[2], "n3"), "dead");
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
        ever_dead = ever_dead || dead_to(6, 3) || state_in(*services_[2], "n3") == "dead";
        return services_[2]->counters().mgs->verified_alive >= 1;
      },
      15s);
  ASSERT_TRUE(verified.has_value()) << "the MGS never verified the report";
  c_.run_for(5s);
  ever_dead = ever_dead || dead_to(6, 3) || state_in(*services_[2], "n3") == "dead";
  EXPECT_FALSE(ever_dead);
  EXPECT_EQ(state_in(*services_[2], "n3"), "up");
  EXPECT_EQ(services_[2]->counters().mgs->verified_dead, 0u);
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
          if (services_[h]->current_mgs() != nid_of(7)) return false;
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

}  // namespace
}  // namespace pfsnet
