// LNet health over two rails, in memory with a manual clock: discovery, selection,
// link down/up, black holes (remote timeouts), resends, recovery pings and their
// schedule, fault rules, and the errors a caller gets when every attempt fails.
#include <gtest/gtest.h>

#include "base/test_nid.h"
#include "rpc/health_monitor.h"
#include "rpc/node_core.h"
#include "rpc/ping.h"
#include "rpc/rpc_engine.h"
#include "rpc/sim_cluster.h"
#include "stats/rpc_stats.h"

namespace pfsnet {
namespace {

using namespace std::chrono_literals;

// A node core over the in-memory transport under the link-emulation decorator (it holds
// fault delays), ticked by the test; with RPC statistics when `stats`, never a health
// monitor (the tests that want one build it on the node's parts).
struct Node {
  Node(MemHub& hub, Clock& clock, std::vector<Nid> nids, NetOptions o, RpcOptions ro,
       bool stats = false)
      : core(options(hub, clock, std::move(nids), std::move(o), std::move(ro), stats)),
        net(core.net()),
        rpc(core.rpc()),
        pinger(core.pinger()) {
    EXPECT_TRUE(core.start(Duration::zero()).ok());
  }
  static NodeCoreOptions options(MemHub& hub, Clock& clock, std::vector<Nid> nids, NetOptions o,
                                 RpcOptions ro, bool stats) {
    NodeCoreOptions c =
        mem_node_options(hub, clock, nids, std::move(o), std::move(ro), "0123456789abcdef");
    c.stats = stats;
    return c;
  }
  // One round of the node's timers (as the daemon's driver) at `now`.
  void tick(TimePoint now) { core.tick(now); }
  NodeCore core;
  Net& net;
  RpcEngine& rpc;
  RecoveryPinger& pinger;
};

struct Replies {
  std::vector<RpcReply> got;
  RpcEngine::Callback cb() {
    return [this](RpcReply&& r) { got.push_back(std::move(r)); };
  }
  size_t ok() const {
    size_t n = 0;
    for (auto& r : got) n += r.status.ok();
    return n;
  }
};

const NiInfo& find(const std::vector<NiInfo>& v, const Nid& n) {
  for (auto& i : v)
    if (i.nid == n) return i;
  static NiInfo none;
  ADD_FAILURE() << "no NI " << n.to_string();
  return none;
}

uint64_t errors(const NiInfo& i, HealthKind k) { return i.errors[static_cast<size_t>(k)]; }

NetOptions net_opts() {
  NetOptions o;
  o.recovery_interval = 1s;
  return o;
}
RpcOptions rpc_opts() {
  RpcOptions o;
  o.default_timeout = 3s;  // 1 s per attempt with retry_count 2
  o.retry_count = 2;
  o.workers = 1;
  return o;
}

// A client and a server node on one in-memory hub, with a manual clock; the client keeps
// RPC statistics.
class TwoNodes : public ::testing::Test {
 protected:
  TwoNodes(std::vector<Nid> client_nids, std::vector<Nid> server_nids)
      : client_(hub_, clock_, std::move(client_nids), net_opts(), rpc_opts(), true),
        server_(hub_, clock_, std::move(server_nids), net_opts(), rpc_opts()),
        stats_(*client_.core.stats()) {}

  // One PING to `dst`, pumped to completion (`timeout` 0: the engine's).
  RpcReply ping(const Nid& dst, Duration timeout = Duration::zero()) {
    Replies r;
    CallOptions o;
    o.timeout = timeout;
    client_.rpc.call_async(dst, kMsgPing, Buffer(), nullptr, r.cb(), o);
    hub_.pump();
    EXPECT_EQ(r.got.size(), 1u);
    return r.got.empty() ? RpcReply{} : std::move(r.got[0]);
  }
  // Advances the manual clock in 100 ms ticks (as the daemon's ticker), pumping.
  void run_for(Duration d) {
    for (Duration t{0}; t < d; t += 100ms) {
      clock_.advance(100ms);
      client_.tick(clock_.now());
      server_.tick(clock_.now());
      hub_.pump();
    }
  }

  ManualClock clock_;
  MemHub hub_;
  Node client_, server_;
  RpcStats& stats_;  // the client's
};

class HealthTest : public TwoNodes {
 protected:
  HealthTest() : TwoNodes({a1_, a2_}, {b1_, b2_}) {}
  inline static const Nid a1_ = nid("10.1.0.1@tcp"), a2_ = nid("10.2.0.1@tcp1");
  inline static const Nid b1_ = nid("10.1.0.2@tcp"), b2_ = nid("10.2.0.2@tcp1");
};

TEST_F(HealthTest, DiscoveryJoinsThePeersNidsAndTrafficUsesBothRails) {
  ASSERT_TRUE(ping(b1_).status.ok());
  auto peers = client_.net.peers();
  ASSERT_EQ(peers.size(), 2u);  // both NIDs of the server, one peer
  EXPECT_EQ(find(peers, b1_).peer, b1_);
  EXPECT_EQ(find(peers, b2_).peer, b1_);
  EXPECT_EQ(find(peers, b1_).peer_nids.size(), 2u);
  // Equal health and credits: round-robin over the two paths.
  Replies r;
  for (int i = 0; i < 20; ++i) client_.rpc.call_async(b1_, kMsgPing, Buffer(), nullptr, r.cb());
  hub_.pump();
  ASSERT_EQ(r.ok(), 20u);
  auto s = server_.net.nis();
  EXPECT_GE(find(s, b1_).recv_count, 8u);
  EXPECT_GE(find(s, b2_).recv_count, 8u);
  EXPECT_EQ(find(s, b1_).recv_count + find(s, b2_).recv_count, 21u);
  // Replies go back on the path their request came in on.
  auto c = client_.net.nis();
  EXPECT_EQ(find(c, a1_).recv_count, find(s, b1_).recv_count);
  EXPECT_EQ(find(c, a2_).recv_count, find(s, b2_).recv_count);
}

TEST_F(HealthTest, LinkDownMovesTrafficAndRecoveryPingsRestoreHealth) {
  ASSERT_TRUE(ping(b1_).status.ok());
  // Requests in flight on rail 1 when its link goes down are resent on rail 2.
  Replies r;
  for (int i = 0; i < 8; ++i) client_.rpc.call_async(b1_, kMsgPing, Buffer(), nullptr, r.cb());
  ASSERT_TRUE(client_.net.set_link_state(a1_, false));
  hub_.pump();
  ASSERT_EQ(r.got.size(), 8u);
  EXPECT_EQ(r.ok(), 8u);
  auto ni = find(client_.net.nis(), a1_);
  EXPECT_FALSE(ni.up);
  EXPECT_EQ(ni.health, 900);
  EXPECT_EQ(errors(ni, HealthKind::kLocalNiDown), 1u);
  uint64_t rail1 = ni.send_count;
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(ping(b1_).status.ok());
  EXPECT_EQ(find(client_.net.nis(), a1_).send_count, rail1);  // a NI that is down: never
  // No recovery ping while down.
  run_for(2s);
  EXPECT_EQ(client_.pinger.sent(), 0u);
  // Up again: LOCAL_NI_UP, a recovery ping at once restores the health; traffic returns.
  ASSERT_TRUE(client_.net.set_link_state(a1_, true));
  ni = find(client_.net.nis(), a1_);
  EXPECT_TRUE(ni.up);
  EXPECT_EQ(errors(ni, HealthKind::kLocalNiUp), 1u);
  EXPECT_EQ(ni.next_recovery_s, 0);
  run_for(100ms);
  EXPECT_EQ(client_.pinger.sent(), 1u);
  EXPECT_EQ(client_.pinger.answered(), 1u);
  EXPECT_EQ(find(client_.net.nis(), a1_).health, 1000);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(ping(b1_).status.ok());
  EXPECT_GE(find(client_.net.nis(), a1_).send_count, rail1 + 4);
}

TEST_F(HealthTest, BlackHoledRailTimesOutRemotelyAndResendsOnTheOther) {
  ASSERT_TRUE(ping(b1_).status.ok());
  FaultRule drop;
  drop.src = a1_;
  drop.dst = b1_;
  drop.rate = 1;  // every message, silently
  uint64_t id = client_.net.add_fault(drop);
  // Round-robin puts some requests on rail 1; each is written and never answered.
  Replies r;
  for (int i = 0; i < 4; ++i) client_.rpc.call_async(b1_, kMsgPing, Buffer(), nullptr, r.cb());
  hub_.pump();
  size_t direct = r.ok();
  uint64_t holed = client_.net.faults()[0].injected;
  EXPECT_GE(holed, 1u);
  EXPECT_EQ(direct + holed, 4u);  // the others took rail 2
  run_for(900ms);
  EXPECT_EQ(r.got.size(), direct);  // attempt deadline (1 s) not reached
  run_for(200ms);
  // Remote timeouts: blamed on the peer NI, connection closed, resent on rail 2.
  ASSERT_EQ(r.got.size(), 4u);
  EXPECT_EQ(r.ok(), 4u);
  auto p1 = find(client_.net.peers(), b1_);
  EXPECT_EQ(p1.remote_timeouts, holed);
  EXPECT_EQ(p1.resends, holed);
  EXPECT_EQ(errors(p1, HealthKind::kPeerNiUnreachable), holed);
  EXPECT_LT(p1.health, 1000);
  EXPECT_EQ(find(client_.net.nis(), a1_).health, 1000);  // remote: the local NI is fine
  EXPECT_EQ(find(client_.net.nis(), a1_).local_timeouts, 0u);
  // The unhealthy peer NI is not chosen while a healthy one exists.
  uint64_t rail1 = find(client_.net.nis(), a1_).send_count;
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(ping(b1_).status.ok());
  EXPECT_EQ(find(client_.net.nis(), a1_).send_count, rail1);
  // Recovery pings to b1 are black-holed too, with growing intervals: 1, 2, 4 s.
  uint64_t sent = client_.pinger.sent();
  run_for(8s);
  EXPECT_GE(client_.pinger.sent(), sent + 2);
  EXPECT_LE(client_.pinger.sent(), sent + 4);
  EXPECT_EQ(client_.pinger.answered(), 0u);
  // Remove the fault: the next recovery ping succeeds and the peer NI heals.
  ASSERT_TRUE(client_.net.del_fault(id));
  for (int i = 0; i < 40 && find(client_.net.peers(), b1_).health < 1000; ++i) run_for(1s);
  EXPECT_EQ(find(client_.net.peers(), b1_).health, 1000);
  EXPECT_GE(client_.pinger.answered(), 1u);
}

TEST_F(HealthTest, RecoveryPingsBackOffExponentiallyUpTo900Seconds) {
  // No peer answers on b9; every ping fails to connect (a short one: the reconnect backs
  // off past its deadline, so it fails on its first refused connect, not resent).
  Nid b9 = nid("10.1.0.9@tcp");
  RpcReply rep = ping(b9, 300ms);
  EXPECT_EQ(rep.status.health_kind(), HealthKind::kPeerNiConnectError);
  EXPECT_NE(rep.status.message().find("connection refused"), std::string::npos)
      << rep.status.message();
  EXPECT_EQ(find(client_.net.peers(), b9).connects, 1u);
  auto schedule = [&] { return find(client_.net.peers(), b9).next_recovery_s; };
  // In recovery since the first failure: the first ping is due now.
  EXPECT_EQ(schedule(), 0);
  std::vector<double> gaps;
  for (int n = 0; n < 13; ++n) {
    auto due = client_.net.recovery_due(clock_.now());
    ASSERT_EQ(due.size(), 1u);
    EXPECT_EQ(due[0].peer, b9);
    EXPECT_EQ(due[0].local, a1_);
    gaps.push_back(schedule());
    clock_.advance(std::chrono::duration_cast<Duration>(std::chrono::duration<double>(schedule())));
  }
  // recovery_interval x 2^n, capped at 900 s.
  std::vector<double> want = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 900, 900, 900};
  EXPECT_EQ(gaps, want);
  EXPECT_TRUE(client_.net.recovery_due(clock_.now() - 1ms).empty());
}

TEST_F(HealthTest, FaultRulesDropByRateAndIntervalDelayAndReportTheirKind) {
  ASSERT_TRUE(ping(b1_).status.ok());
  // Drop every 2nd message to b2 with a health kind: the sender sees the failure.
  FaultRule r;
  r.dst = b2_;
  r.rate = 2;
  r.health = HealthKind::kLocalNiSendTimeout;
  uint64_t id = client_.net.add_fault(r);
  Replies got;
  for (int i = 0; i < 8; ++i) client_.rpc.call_async(b1_, kMsgPing, Buffer(), nullptr, got.cb());
  hub_.pump();
  run_for(200ms);
  EXPECT_EQ(got.ok(), 8u);  // every failed attempt was resent
  auto rule = client_.net.faults()[0];
  EXPECT_GE(rule.matched, 2u);
  EXPECT_EQ(rule.injected, rule.matched / 2);
  EXPECT_EQ(errors(find(client_.net.nis(), a2_), HealthKind::kLocalNiSendTimeout), rule.injected);
  EXPECT_EQ(find(client_.net.nis(), a2_).faults, rule.injected);
  ASSERT_TRUE(client_.net.del_fault(id));
  EXPECT_FALSE(client_.net.del_fault(id));
  // Delay every message on both rails by 500 ms: released by the ticker, not before.
  FaultRule d;
  d.action = FaultRule::Action::kDelay;
  d.rate = 1;
  d.latency = 500ms;
  client_.net.add_fault(d);
  Replies late;
  client_.rpc.call_async(b1_, kMsgPing, Buffer(), nullptr, late.cb());
  hub_.pump();
  run_for(400ms);
  EXPECT_TRUE(late.got.empty());
  run_for(200ms);
  ASSERT_EQ(late.got.size(), 1u);
  EXPECT_TRUE(late.got[0].status.ok());
  EXPECT_GE(late.got[0].times.reply_complete - late.got[0].times.submit, 500ms);
  EXPECT_GE(late.got[0].channel_wait(), 500ms);  // held before it was written
}

// Health that sees slowness, exact on the manual clock: the server answers in 20 ms on
// both rails, then rail 1's replies take 200 ms (a delay rule on the server's side, after
// its execution: the client sees latency, not execution). The client's monitor calls that
// peer NI SLOW, selection leaves it, the probes keep measuring it, and once the delay is
// gone it is healthy again.
TEST_F(HealthTest, ASlowRailIsDegradedLeftAndTakenBackWhenFastAgain) {
  HealthMonitorOptions o;
  o.probe_timeout = 1s;
  HealthMonitor monitor(client_.net, client_.rpc, &stats_, o);
  struct Shutdown {  // probes' callbacks use the monitor: the engine ends them first
    RpcEngine& rpc;
    ~Shutdown() { rpc.shutdown(); }
  } shutdown{client_.rpc};
  FaultRule base;
  base.action = FaultRule::Action::kDelay;
  base.rate = 1;
  base.latency = 20ms;
  server_.net.add_fault(base);
  Replies got;
  // `seconds` of 10 pings a second to the server (selection picks the rail), in 10 ms steps.
  auto run = [&](int seconds) {
    for (int step = 0; step < seconds * 100; ++step) {
      if (step % 10 == 0) client_.rpc.call_async(b1_, kMsgPing, Buffer(), nullptr, got.cb());
      clock_.advance(10ms);
      client_.tick(clock_.now());
      server_.tick(clock_.now());
      monitor.run(clock_.now());
      hub_.pump();
    }
  };
  auto peer = [&](const Nid& n) { return find(client_.net.peers(), n); };
  run(60);
  EXPECT_EQ(peer(b1_).degraded, "");
  EXPECT_EQ(peer(b2_).degraded, "");
  FaultRule slow = base;
  slow.dst = a1_;  // the replies to rail 1
  slow.latency = 200ms;
  uint64_t slow_id = server_.net.add_fault(slow);
  run(15);
  NiInfo b1 = peer(b1_);
  ASSERT_EQ(b1.degraded, "SLOW") << b1.degraded_evidence;
  EXPECT_EQ(b1.degraded_penalty, 500);
  EXPECT_EQ(b1.health, kMaxHealth);  // no error: LNet health alone would never see it
  EXPECT_EQ(b1.degraded_evidence, "latency 200.000 ms (baseline 20.000 ms, x10.0), over 10 s");
  EXPECT_EQ(peer(b2_).degraded, "");
  EXPECT_EQ(monitor.degraded_total(SlowCause::kSlow), 1u);
  // Selection leaves it: rail 1 carries the probes (a pair a second) and nothing else.
  uint64_t r1 = find(server_.net.nis(), b1_).recv_count;
  uint64_t r2 = find(server_.net.nis(), b2_).recv_count;
  run(10);
  uint64_t d1 = find(server_.net.nis(), b1_).recv_count - r1;
  uint64_t d2 = find(server_.net.nis(), b2_).recv_count - r2;
  EXPECT_GE(d2, 95u);
  EXPECT_LE(d1, 22u) << "rail 1 " << d1 << ", rail 2 " << d2;
  EXPECT_GT(monitor.probes_sent(), 0u);
  // Fast again: the probes' latency brings it back after the damping.
  ASSERT_TRUE(server_.net.del_fault(slow_id));
  run(30);
  EXPECT_EQ(peer(b1_).degraded, "");
  EXPECT_EQ(peer(b1_).degraded_penalty, 0);
  EXPECT_EQ(got.ok(), got.got.size());  // slow is not failed: every ping was answered
}

TEST_F(HealthTest, IntervalRuleDropsTheFirstMatchInEachInterval) {
  ASSERT_TRUE(ping(b1_).status.ok());
  ASSERT_TRUE(client_.net.set_link_state(a2_, false));  // one rail: predictable counts
  FaultRule r;
  r.interval = 1s;
  r.health = HealthKind::kPeerNiUnreachable;
  client_.net.add_fault(r);
  for (int sec = 0; sec < 3; ++sec) {
    for (int i = 0; i < 3; ++i) ping(b1_);
    clock_.advance(1s);
  }
  EXPECT_EQ(client_.net.faults()[0].injected, 3u);  // one per second
}

TEST_F(HealthTest, DeadPeerFailsEveryRpcWithinTheTimeoutNamingTheLastKind) {
  ASSERT_TRUE(ping(b1_).status.ok());
  Replies r;
  for (int i = 0; i < 6; ++i) client_.rpc.call_async(b1_, kMsgPing, Buffer(), nullptr, r.cb());
  server_.net.shutdown();
  hub_.pump();
  run_for(3s);
  ASSERT_EQ(r.got.size(), 6u);
  for (auto& rep : r.got) {
    EXPECT_FALSE(rep.status.ok());
    EXPECT_NE(rep.status.health_kind(), HealthKind::kNone) << rep.status.to_string();
    EXPECT_NE(rep.status.message().find("attempts"), std::string::npos) << rep.status.message();
  }
}

TEST_F(HealthTest, AllLocalNisDownFailsAtOnceAsLocalNiDown) {
  ASSERT_TRUE(client_.net.set_link_state(a1_, false));
  ASSERT_TRUE(client_.net.set_link_state(a2_, false));
  RpcReply rep = ping(b1_);
  EXPECT_EQ(rep.status.health_kind(), HealthKind::kLocalNiDown);
  EXPECT_NE(rep.status.message().find("down"), std::string::npos);
  EXPECT_FALSE(client_.net.set_link_state(nid("10.9.0.1@tcp"), false));
}

// A node with a tcp and an o2ib NI talking to one like it (the in-memory transport carries
// both kinds; selection and statistics go by the NIDs' kinds).
class KindsTest : public TwoNodes {
 protected:
  KindsTest() : TwoNodes({at_, ao_}, {bt_, bo_}) {}

  uint64_t received(const Nid& n) { return find(server_.net.nis(), n).recv_count; }
  // The count of `s` for node `dst` over every second held.
  int64_t count(const Nid& dst, NodeStat s) {
    StatsQuery q;
    q.node = dst;
    int64_t n = 0;
    for (const NodeReport& r : stats_.query(q).nodes)
      for (const auto& [stat, view] : r.stats)
        if (stat == s)
          for (const IntervalView& i : view.seconds) n += i.count;
    return n;
  }

  inline static const Nid at_ = nid("10.1.0.1@tcp"), ao_ = nid("10.2.0.1@o2ib");
  inline static const Nid bt_ = nid("10.1.0.2@tcp"), bo_ = nid("10.2.0.2@o2ib");
};

TEST_F(KindsTest, RdmaWhileHealthyTcpWhenItFailsRdmaAgainOnceRecovered) {
  // The first ping knows only the tcp NID; the handshake announces the o2ib one.
  ASSERT_TRUE(ping(bt_).status.ok());
  EXPECT_EQ(received(bt_), 1u);
  // Both paths healthy: every RPC takes RDMA, even one addressed to the tcp NID.
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(ping(bt_).status.ok());
  EXPECT_EQ(received(bo_), 10u);
  EXPECT_EQ(received(bt_), 1u);
  // The o2ib link fails under load: the RPCs on it are resent over TCP, none lost.
  Replies r;
  for (int i = 0; i < 8; ++i) client_.rpc.call_async(bt_, kMsgPing, Buffer(), nullptr, r.cb());
  ASSERT_TRUE(client_.net.set_link_state(ao_, false));
  hub_.pump();
  ASSERT_EQ(r.got.size(), 8u);
  EXPECT_EQ(r.ok(), 8u);
  EXPECT_EQ(received(bt_), 9u);  // the 8 resent (the server also took them over RDMA)
  uint64_t rdma_before = received(bo_);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(ping(bt_).status.ok());
  EXPECT_EQ(received(bt_), 19u);
  EXPECT_EQ(received(bo_), rdma_before);
  // Back up: a recovery ping restores its health and RDMA carries the traffic again.
  ASSERT_TRUE(client_.net.set_link_state(ao_, true));
  run_for(100ms);
  EXPECT_EQ(find(client_.net.nis(), ao_).health, 1000);
  uint64_t tcp_before = received(bt_);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(ping(bt_).status.ok());
  EXPECT_EQ(received(bt_), tcp_before);
  // The statistics of node bt_ by kind: 20 RPCs sent and answered over RDMA, 19 over TCP.
  stats_.process_second();
  EXPECT_EQ(count(bt_, NodeStat::kChannelWait), 39);
  EXPECT_EQ(count(bt_, NodeStat::kSendVerbs), 20);
  EXPECT_EQ(count(bt_, NodeStat::kLatencyVerbs), 20);
  EXPECT_EQ(count(bt_, NodeStat::kSendTcp), 19);
  EXPECT_EQ(count(bt_, NodeStat::kReceiveTcp), 19);
  EXPECT_EQ(count(bt_, NodeStat::kLatencyTcp), 19);
  EXPECT_EQ(count(bt_, NodeStat::kLatencyMixed), 0);
}

}  // namespace
}  // namespace pfsnet
