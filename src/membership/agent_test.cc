// The membership agent on a manual clock: its schedule, skip rule, failover and reports;
// and the simulation at small scale.
#include "membership/agent.h"

#include <gtest/gtest.h>

#include "base/test_nid.h"
#include "membership/simulation.h"

namespace pfsnet {
namespace {

using namespace std::chrono_literals;

class AgentTest : public ::testing::Test {
 protected:
  static AgentOptions opts(uint8_t roles) {
    AgentOptions o;
    o.name = "n";
    o.roles = roles;
    o.nids = {nid("10.0.0.5@tcp")};
    o.mgs = {nid("10.0.0.2@tcp"), nid("10.0.0.12@tcp")};
    o.client_interval = 50s;
    o.server_interval = 10s;
    o.instance = 3;
    return o;
  }
  static std::vector<Nid> none() { return {}; }
  ManualClock clock_;
};

TEST_F(AgentTest, RegistersThenPingsEveryPeriodRainOrShine) {
  AgentCore a(opts(kRoleServer));
  auto s = a.due(clock_.now(), TimePoint{}, none);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->kind, AgentCore::Kind::kRegister);
  EXPECT_FALSE(a.due(clock_.now(), TimePoint{}, none));  // one request at a time
  a.on_register_reply(RegisterRep{4, 1, 1, {}}, clock_.now());
  EXPECT_EQ(a.id(), 4u);
  clock_.advance(9999ms);
  EXPECT_FALSE(a.due(clock_.now(), TimePoint{}, none));
  clock_.advance(1ms);
  s = a.due(clock_.now(), TimePoint{}, [] { return std::vector<Nid>{Nid::ipv4(77)}; });
  ASSERT_TRUE(s);
  EXPECT_EQ(s->kind, AgentCore::Kind::kPing);
  auto p = decode_ping_req(s->payload.span());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->id, 4u);
  EXPECT_EQ(p->heard, std::vector<Nid>{Nid::ipv4(77)});  // a server reports whom it heard
  a.on_ping_reply(PingRep{PingStatus::kOk, 2, 1}, clock_.now() + 300ms);
  clock_.advance(10s);  // the period runs from the ping, not from its reply
  EXPECT_TRUE(a.due(clock_.now(), TimePoint{}, none));
}

// Evicted (a ping answered so, or a registration after a lost ping refused so): the agent
// sends nothing until its node has dropped what it held, then registers saying so; and
// once registered, the next eviction starts over.
TEST_F(AgentTest, EvictedWaitsUntilHandledThenRegistersSayingSo) {
  AgentCore a(opts(kRoleClient));
  ASSERT_TRUE(a.due(clock_.now(), TimePoint{}, none));
  a.on_register_reply(RegisterRep{4, 1, 1, {}}, clock_.now());
  clock_.advance(50s);
  ASSERT_TRUE(a.due(clock_.now(), TimePoint{}, none));
  a.on_ping_reply(PingRep{PingStatus::kEvicted, 1, 1}, clock_.now());
  EXPECT_TRUE(a.evicted());
  EXPECT_FALSE(a.registered());
  clock_.advance(100s);
  EXPECT_FALSE(a.due(clock_.now(), TimePoint{}, none)) << "registered before dropping its state";
  a.eviction_handled(clock_.now());
  auto s = a.due(clock_.now(), TimePoint{}, none);
  ASSERT_TRUE(s);
  ASSERT_EQ(s->kind, AgentCore::Kind::kRegister);
  auto r = decode_register_req(s->payload.span());
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->after_eviction);
  a.on_register_reply(RegisterRep{4, 1, 2, {}}, clock_.now());
  EXPECT_TRUE(a.registered());
  // A ping lost, then a registration the MGS refuses: evicted as well.
  clock_.advance(50s);
  ASSERT_TRUE(a.due(clock_.now(), TimePoint{}, none));
  a.on_failure(clock_.now());
  s = a.due(clock_.now(), TimePoint{}, none);
  ASSERT_TRUE(s);
  r = decode_register_req(s->payload.span());
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->after_eviction);
  RegisterRep refused;
  refused.id = 4;
  refused.evicted = true;
  a.on_register_reply(refused, clock_.now());
  EXPECT_TRUE(a.evicted());
  EXPECT_FALSE(a.registered());
  EXPECT_FALSE(a.due(clock_.now(), TimePoint{}, none));
  EXPECT_EQ(a.counters().evictions, 2u);
}

TEST_F(AgentTest, UnknownReRegistersAndSilenceFailsOver) {
  AgentCore a(opts(kRoleClient));
  ASSERT_TRUE(a.due(clock_.now(), TimePoint{}, none));
  a.on_register_reply(RegisterRep{4, 1, 1, {}}, clock_.now());
  clock_.advance(50s);
  ASSERT_TRUE(a.due(clock_.now(), TimePoint{}, none));
  a.on_ping_reply(PingRep{PingStatus::kUnknown, 1, 2}, clock_.now());
  auto s = a.due(clock_.now(), TimePoint{}, none);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->kind, AgentCore::Kind::kRegister);
  EXPECT_EQ(s->mgs, nid("10.0.0.2@tcp"));
  a.on_failure(clock_.now());
  s = a.due(clock_.now(), TimePoint{}, none);  // straight to the next MGS
  ASSERT_TRUE(s);
  EXPECT_EQ(s->mgs, nid("10.0.0.12@tcp"));
  a.on_failure(clock_.now());
  EXPECT_FALSE(a.due(clock_.now(), TimePoint{}, none));  // a whole round failed: wait 1 s
  clock_.advance(1s);
  s = a.due(clock_.now(), TimePoint{}, none);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->mgs, nid("10.0.0.2@tcp"));
  EXPECT_EQ(a.counters().failovers, 2u);
}

// MGS leadership in etcd: an MGS that does not lead sends the agent to the leader it
// names (configured or not); one that names itself is asked again a second later; one
// that knows no leader is failed over from; an answer of an older epoch is an MGS that
// lost its lead, and counts as a failure.
TEST_F(AgentTest, FollowsTheLeaderAnMgsNamesAndNeverGoesBackToAnOlderEpoch) {
  AgentCore a(opts(kRoleServer));
  const Nid m0 = nid("10.0.0.2@tcp"), m1 = nid("10.0.0.12@tcp"), m2 = nid("10.0.0.22@tcp");
  ASSERT_TRUE(a.due(clock_.now(), TimePoint{}, none));
  RegisterRep redirect;
  redirect.lead = Leadership{7, true, m1};
  a.on_register_reply(redirect, clock_.now());
  EXPECT_FALSE(a.registered());
  EXPECT_EQ(a.current_mgs(), m1);
  EXPECT_EQ(a.epoch(), 7u);
  auto s = a.due(clock_.now(), TimePoint{}, none);  // at once, at the leader
  ASSERT_TRUE(s);
  EXPECT_EQ(s->kind, AgentCore::Kind::kRegister);
  EXPECT_EQ(s->mgs, m1);
  RegisterRep ok{4, 1, 1, {}};
  ok.lead.epoch = 7;
  a.on_register_reply(ok, clock_.now());
  EXPECT_TRUE(a.registered());
  // The leader changes to an MGS not in the configured list: followed there.
  clock_.advance(10s);
  ASSERT_TRUE(a.due(clock_.now(), TimePoint{}, none));
  PingRep moved;
  moved.lead = Leadership{9, true, m2};
  a.on_ping_reply(moved, clock_.now());
  EXPECT_EQ(a.current_mgs(), m2);
  EXPECT_EQ(a.epoch(), 9u);
  // It pings the new leader, which holds its predecessor's table (issue 36, item 2): no
  // registration (a leader that does not know it answers "unknown").
  EXPECT_TRUE(a.registered());
  // m2 answers for epoch 8 (it led once, before 9): not believed.
  s = a.due(clock_.now(), TimePoint{}, none);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->kind, AgentCore::Kind::kPing);
  PingRep old;
  old.lead.epoch = 8;
  a.on_ping_reply(old, clock_.now());
  EXPECT_EQ(a.counters().stale, 1u);
  EXPECT_EQ(a.epoch(), 9u);
  EXPECT_NE(a.current_mgs(), m2);  // failed over
  // One that knows no leader: failed over from too.
  Nid before = a.current_mgs();
  s = a.due(clock_.now(), TimePoint{}, none);
  ASSERT_TRUE(s);
  PingRep none_known;
  none_known.lead = Leadership{9, true, std::nullopt};
  a.on_ping_reply(none_known, clock_.now());
  EXPECT_NE(a.current_mgs(), before);
  // One that names itself but does not lead: asked again after a second.
  Nid cur = a.current_mgs();
  clock_.advance(5s);
  s = a.due(clock_.now(), TimePoint{}, none);
  ASSERT_TRUE(s);
  PingRep self;
  self.lead = Leadership{9, true, cur};
  a.on_ping_reply(self, clock_.now());
  EXPECT_EQ(a.current_mgs(), cur);
  EXPECT_FALSE(a.due(clock_.now() + 999ms, TimePoint{}, none));
  EXPECT_TRUE(a.due(clock_.now() + 1s, TimePoint{}, none));
  EXPECT_EQ(a.counters().redirects, 4u);
  (void)m0;
}

TEST_F(AgentTest, ClientThatTalkedToAServerRecentlySkipsItsPing) {
  AgentCore a(opts(kRoleClient));
  ASSERT_TRUE(a.due(clock_.now(), TimePoint{}, none));
  a.on_register_reply(RegisterRep{4, 1, 1, {}}, clock_.now());
  clock_.advance(50s);
  // Skip window: 50 - 2 x 10 = 30 s.
  EXPECT_FALSE(a.due(clock_.now(), clock_.now() - 30s, none));
  EXPECT_EQ(a.counters().skipped, 1u);
  clock_.advance(50s);
  EXPECT_TRUE(a.due(clock_.now(), clock_.now() - 31s, none));  // too long ago: ping
  EXPECT_EQ(a.counters().pings, 1u);
  a.on_ping_reply(PingRep{PingStatus::kOk, 1, 1}, clock_.now());
  // Busy all the time: two skips in a row at most (ping_miss_limit - 1), then a ping.
  for (int i = 0; i < 2; ++i) {
    clock_.advance(50s);
    EXPECT_FALSE(a.due(clock_.now(), clock_.now(), none));
  }
  clock_.advance(50s);
  EXPECT_TRUE(a.due(clock_.now(), clock_.now(), none));
  EXPECT_EQ(a.counters().skipped, 3u);
  // Without heard reports the client always pings.
  AgentOptions o = opts(kRoleClient);
  o.heard_reports = false;
  AgentCore b(o);
  ASSERT_TRUE(b.due(clock_.now(), TimePoint{}, none));
  b.on_register_reply(RegisterRep{5, 1, 1, {}}, clock_.now());
  clock_.advance(50s);
  EXPECT_TRUE(b.due(clock_.now(), clock_.now(), none));
}

// The roles of peers a client heard from ride on its next ping; the answer says which are
// servers. A ping without the leader's answer asks them again on the next; a server's
// notification teaches its NIDs too.
TEST_F(AgentTest, LearnsWhichPeersAreServersByAskingOnItsPing) {
  AgentCore a(opts(kRoleClient));
  ASSERT_TRUE(a.due(clock_.now(), TimePoint{}, none));
  a.on_register_reply(RegisterRep{4, 1, 1, {}}, clock_.now());
  const Nid oss = nid("10.0.0.3@tcp"), peer = nid("10.0.0.7@tcp");
  a.ask_role(oss);
  a.ask_role(peer);
  a.ask_role(oss);  // once
  EXPECT_EQ(a.role_of(oss), AgentCore::Role::kUnknown);
  clock_.advance(50s);
  auto s = a.due(clock_.now(), TimePoint{}, none);
  ASSERT_TRUE(s);
  EXPECT_EQ(decode_ping_req(s->payload.span())->ask, (std::vector<Nid>{oss, peer}));
  a.on_failure(clock_.now());  // unanswered (the next MGS, without etcd: registers there)
  s = a.due(clock_.now(), TimePoint{}, none);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->kind, AgentCore::Kind::kRegister);
  a.on_register_reply(RegisterRep{4, 1, 1, {}}, clock_.now());
  clock_.advance(50s);
  s = a.due(clock_.now(), TimePoint{}, none);  // asked again
  ASSERT_TRUE(s);
  EXPECT_EQ(decode_ping_req(s->payload.span())->ask, (std::vector<Nid>{oss, peer}));
  PingRep rep{PingStatus::kOk, 1, 1};
  rep.servers = {oss};
  a.on_ping_reply(rep, clock_.now());
  EXPECT_EQ(a.role_of(oss), AgentCore::Role::kServer);
  EXPECT_EQ(a.role_of(peer), AgentCore::Role::kOther);
  a.ask_role(oss);  // known: not asked again
  clock_.advance(50s);
  s = a.due(clock_.now(), TimePoint{}, none);
  ASSERT_TRUE(s);
  EXPECT_TRUE(decode_ping_req(s->payload.span())->ask.empty());
  const Nid oss9 = nid("10.0.0.9@tcp");
  a.apply({NodeEvent{9, "oss9", kRoleServer, NodeState::kUp, {nid("10.0.0.9@tcp")}}});
  EXPECT_EQ(a.role_of(oss9), AgentCore::Role::kServer);
}

// An MGS not known to take large NIDs (no connection yet, or one of wire version 1) is told
// of none: the registration carries the IPv4 NIDs, and is made again with all of them once
// its reply came over a connection that takes them. Pings and reports leave them out too.
TEST_F(AgentTest, LargeNidsGoOnlyToAnMgsThatTakesThemAndTheRegistrationIsCompleted) {
  AgentOptions o = opts(kRoleServer);
  const Nid v6 = nid("2001:2::5@tcp"), v6peer = nid("2001:2::9@tcp");
  o.nids.push_back(v6);
  bool v2 = false;
  o.takes_large_nids = [&v2](const Nid&) { return v2; };
  AgentCore a(o);
  auto s = a.due(clock_.now(), TimePoint{}, none);
  ASSERT_TRUE(s);
  ASSERT_EQ(s->kind, AgentCore::Kind::kRegister);
  EXPECT_EQ(decode_register_req(s->payload.span())->nids, (std::vector<Nid>{o.nids[0]}));
  v2 = true;  // the connection the request opened speaks version 2
  a.on_register_reply(RegisterRep{4, 1, 1, {}}, clock_.now());
  s = a.due(clock_.now(), TimePoint{}, none);  // at once, with every NID
  ASSERT_TRUE(s);
  ASSERT_EQ(s->kind, AgentCore::Kind::kRegister);
  EXPECT_EQ(decode_register_req(s->payload.span())->nids, o.nids);
  a.on_register_reply(RegisterRep{4, 1, 1, {}}, clock_.now());
  EXPECT_TRUE(a.registered());
  EXPECT_EQ(a.counters().registers, 2u);
  // Once whole, not again; an MGS that stops taking them (replaced by an old one) is not
  // sent them in a ping.
  v2 = false;
  clock_.advance(10s);
  s = a.due(clock_.now(), TimePoint{}, [&] {
    return std::vector<Nid>{nid("10.0.0.8@tcp"), v6peer};
  });
  ASSERT_TRUE(s);
  ASSERT_EQ(s->kind, AgentCore::Kind::kPing);
  EXPECT_EQ(decode_ping_req(s->payload.span())->heard, (std::vector<Nid>{nid("10.0.0.8@tcp")}));
  using S = AgentCore::PeerSample;
  EXPECT_FALSE(a.report_due(clock_.now(), {S{v6peer, 3, 0, 0}}))
      << "a report of a large NID alone is nothing to a version-1 MGS";
}

TEST_F(AgentTest, ReportsPeersThatFailWhileSilentOncePerHoldoff) {
  AgentCore a(opts(kRoleClient));
  using S = AgentCore::PeerSample;
  Nid oss1 = nid("10.0.0.3@tcp"), oss2 = nid("10.0.0.4@tcp");
  // Not registered yet: nothing to report with.
  EXPECT_FALSE(a.report_due(clock_.now(), {S{oss1, 3, 0, 0}}));
  a.due(clock_.now(), TimePoint{}, none);
  a.on_register_reply(RegisterRep{4, 1, 1, {}}, clock_.now());
  // oss1's connects are refused; oss2 timed out but answered since: only oss1.
  clock_.advance(1s);
  auto s = a.report_due(clock_.now(), {S{oss1, 6, 0, 0}, S{oss2, 0, 1, 5}});
  ASSERT_TRUE(s);
  EXPECT_EQ(s->kind, AgentCore::Kind::kReport);
  EXPECT_EQ(s->mgs, nid("10.0.0.2@tcp"));
  auto r = decode_report_req(s->payload.span());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->id, 4u);
  EXPECT_EQ(r->instance, 3u);
  ASSERT_EQ(r->peers.size(), 1u);
  EXPECT_EQ(r->peers[0], (Unreachable{oss1, HealthKind::kPeerNiConnectError}));
  // Still failing: not again within the hold-off (10 s); nothing new: nothing.
  clock_.advance(1s);
  EXPECT_FALSE(a.report_due(clock_.now(), {S{oss1, 9, 0, 0}, S{oss2, 0, 1, 5}}));
  // oss2 times out and is silent now: reported, as unreachable.
  s = a.report_due(clock_.now(), {S{oss1, 9, 0, 0}, S{oss2, 0, 2, 5}});
  ASSERT_TRUE(s);
  r = decode_report_req(s->payload.span());
  ASSERT_EQ(r->peers.size(), 1u);
  EXPECT_EQ(r->peers[0], (Unreachable{oss2, HealthKind::kPeerNiUnreachable}));
  clock_.advance(9s);
  s = a.report_due(clock_.now(), {S{oss1, 12, 0, 0}, S{oss2, 0, 2, 5}});
  ASSERT_TRUE(s);  // 11 s after oss1's first report
  EXPECT_EQ(decode_report_req(s->payload.span())->peers.size(), 1u);
  EXPECT_EQ(a.counters().reports, 3u);
  // Off: never.
  AgentOptions o = opts(kRoleClient);
  o.unreachable_reports = false;
  AgentCore off(o);
  off.due(clock_.now(), TimePoint{}, none);
  off.on_register_reply(RegisterRep{4, 1, 1, {}}, clock_.now());
  EXPECT_FALSE(off.report_due(clock_.now(), {S{oss1, 3, 0, 0}}));
}

TEST(MembershipSimTest, PingRateDetectionAndNotificationAtSmallScale) {
  SimOptions o;
  o.clients = 2000;
  o.servers = 40;
  MembershipSim sim(o);
  sim.run_for(60s);  // everyone registered (start within one client period)
  uint64_t before = sim.mgs_pings();
  sim.run_for(100s);
  double rate = double(sim.mgs_pings() - before) / 100.0;
  // Each client every 50 s, each server every 10 s: 2000/50 + 40/10 = 44 pings/s.
  EXPECT_NEAR(rate, 44.0, 2.0);
  sim.kill_server(7);
  double killed = std::chrono::duration<double>(sim.now()).count();
  sim.run_for(40s);
  ASSERT_GT(sim.declared_dead_s(), 0);
  double detect = sim.declared_dead_s() - killed;
  EXPECT_GE(detect, 20.0);  // its last ping was at most one period (10 s) before the kill
  EXPECT_LE(detect, 30.0 + 0.5 + 0.1);
  EXPECT_EQ(sim.clients_told(), 2000u);  // every client, and no server
  EXPECT_LT(sim.last_client_told_s() - sim.declared_dead_s(), 2.0);
  EXPECT_LT(sim.mgs().memory_bytes() / 2040, 1024u);
}

TEST(MembershipSimTest, HeardFromReportsCutTheMgsLoadOfAnActiveCluster) {
  SimOptions o;
  o.clients = 2000;
  o.servers = 40;
  o.heard_reports = true;
  o.activity = 5s;  // every client talks to some server every 5 s
  MembershipSim sim(o);
  sim.run_for(200s);  // past the start-up phases: skips come in runs of periods
  uint64_t before = sim.mgs_pings();
  sim.run_for(300s);
  double rate = double(sim.mgs_pings() - before) / 300.0;
  // Servers 4/s; a busy client pings every third period only (two skips at most):
  // 2000 / 150 + 4 = 17.3/s against 44/s.
  EXPECT_NEAR(rate, 17.3, 2.0);
  EXPECT_GT(sim.client_pings_skipped(), 2000u);
  // No client is lost for it: all up.
  size_t up = 0;
  for (const NodeRecord& n : sim.mgs().nodes()) up += n.state == NodeState::kUp;
  EXPECT_EQ(up, 2040u);
}

}  // namespace
}  // namespace pfsnet
