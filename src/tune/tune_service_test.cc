// TuneService without a process: two nodes over the in-memory transport on a manual
// clock; the service's rounds are driven by the test.
#include "tune/tune_service.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "base/test_nid.h"
#include "rpc/node_core.h"
#include "rpc/ping.h"
#include "transport/mem_transport.h"

namespace pfsnet {
namespace {

using namespace std::chrono_literals;

// A node core over the in-memory transport, with statistics, never ticked.
struct Node {
  Node(MemHub& hub, Clock& clock, Nid n, const Config& cfg)
      : core(options(hub, clock, n, cfg)), stats(*core.stats()), net(core.net()), rpc(core.rpc()) {
    EXPECT_TRUE(core.start(Duration::zero()).ok());
  }
  static NodeCoreOptions options(MemHub& hub, Clock& clock, Nid n, const Config& cfg) {
    NodeCoreOptions o;
    o.cfg = cfg;
    o.clock = &clock;
    o.timer_queue = &hub;  // on the manual clock
    o.health = false;
    o.make_transport = [&hub, n](TransportEvents& ev, NodeCore& core) {
      TransportOptions to;
      to.cluster_key = "0123456789abcdef";
      return std::make_unique<MemTransport>(hub, to, std::vector<Nid>{n}, core.clock(), ev);
    };
    return o;
  }
  NodeCore core;
  RpcStats& stats;
  Net& net;
  RpcEngine& rpc;
};

Config config(const char* self, bool auto_tune) {
  Config c;
  c.node.name = self;
  c.nets.push_back({nid(self), 7988});
  c.rpc.max_rpcs_in_flight = 8;
  c.lnet.peer_credits = 8;
  c.tune.auto_tune = auto_tune;
  c.tune.link_mbit = 800;  // 100 MB/s
  return c;
}

class TuneServiceTest : public ::testing::Test {
 protected:
  TuneServiceTest()
      : live_(config("10.0.0.1@tcp", true)),
        client_(hub_, clock_, a_, live_.get()),
        server_(hub_, clock_, b_, config("10.0.0.2@tcp", false)),
        svc_(client_.net, client_.rpc, client_.stats, live_, clock_) {
    hub_.set_clock(&clock_);
    live_.on_apply([this](const Config& before, const Config& after) {
      if (after.rpc.max_rpcs_in_flight != before.rpc.max_rpcs_in_flight)
        client_.rpc.set_max_rpcs_in_flight(after.rpc.max_rpcs_in_flight);
      if (after.rpc.peer_rpcs_in_flight != before.rpc.peer_rpcs_in_flight)
        client_.rpc.set_peer_rpcs_in_flight(RpcOptions::from(after).peer_rpcs_in_flight);
      if (after.lnet.peer_credits != before.lnet.peer_credits)
        client_.net.set_credits(after.lnet.credits, after.lnet.peer_credits);
    });
  }

  // `n` PINGs with 4 KiB of bulk, all submitted at once, pumped to completion.
  void burst(int n) { burst_to(b_, n); }
  void burst_to(const Nid& to, int n) {
    BulkData data = make_bulk(make_ping_pattern(4096));
    int done = 0;
    for (int i = 0; i < n; ++i)
      client_.rpc.call_async(to, kMsgPing, Buffer(), data, [&](RpcReply&& r) {
        EXPECT_TRUE(r.status.ok()) << r.status.to_string();
        ++done;
      });
    for (int i = 0; i < 1000 && done < n; ++i) hub_.pump();
    ASSERT_EQ(done, n);
  }

  ManualClock clock_;
  MemHub hub_;
  Nid a_ = nid("10.0.0.1@tcp"), b_ = nid("10.0.0.2@tcp"), c_ = nid("10.0.0.3@tcp");
  LiveConfig live_;
  Node client_, server_;
  TuneService svc_;
};

// Auto-tune is per peer: the peer whose RPCs wait for slots gets its own, doubled
// max_rpcs_in_flight; a peer whose RPCs never waited keeps the node's value.
TEST_F(TuneServiceTest, AutoTuneDoublesTheWindowOfThePeerWhoseRpcsWaitForSlots) {
  Node other(hub_, clock_, c_, config("10.0.0.3@tcp", false));
  svc_.reset(clock_.now());
  burst(2);  // both targets exist from the first interval: their baselines
  burst_to(c_, 2);
  clock_.advance(1s);
  svc_.round(clock_.now());
  EXPECT_EQ(svc_.status().autotune_changes, 0u);
  burst(32);        // 8 on the wire, 24 wait for a slot; the round trip stays at its base
  burst_to(c_, 8);  // never more than 8 at once: no slot wait
  clock_.advance(1s);
  svc_.round(clock_.now());
  const std::map<std::string, int64_t> own{{b_.to_string(), 16}};
  EXPECT_EQ(live_.get().rpc.peer_rpcs_in_flight, own);
  EXPECT_EQ(live_.get().rpc.max_rpcs_in_flight, 8);   // the node's value is not the tuner's
  EXPECT_EQ(live_.get().lnet.peer_credits, 16);       // the most any peer may have in flight
  EXPECT_EQ(client_.rpc.max_rpcs_in_flight(b_), 16);  // applied through the LiveConfig
  EXPECT_EQ(client_.rpc.max_rpcs_in_flight(c_), 8);
  EXPECT_EQ(svc_.status().autotune_changes, 1u);
  // An idle interval changes nothing.
  clock_.advance(1s);
  svc_.round(clock_.now());
  EXPECT_EQ(live_.get().rpc.peer_rpcs_in_flight, own);
  EXPECT_EQ(svc_.status().autotune_changes, 1u);
  other.rpc.shutdown();
}

// Auto-tune reads the kernel's account of the path: while the last check found the peer's
// TCP connection held back by its receive window, RPCs waiting for slots do not grow the
// window of RPCs -- more would only wait in the socket.
TEST_F(TuneServiceTest, AutoTuneDoesNotGrowAPathHeldBackByTcpsWindow) {
  ASSERT_TRUE(live_.set({"tune.check_interval=1"}).ok());
  TcpKernelInfo k;  // 50 ms, busy all the time, 90% of it waiting for the peer's window
  k.rtt_us = k.min_rtt_us = 50000;
  k.snd_wnd = 512 << 10;
  svc_.set_tcp_reader([&] {
    k.busy_us += 1'000'000;
    k.rwnd_limited_us += 900'000;
    k.bytes_sent += 10 << 20;
    return std::vector<ConnTcpSample>{{"a -> b", b_.to_string(), k}};
  });
  svc_.reset(clock_.now());
  burst(2);
  clock_.advance(1s);
  svc_.round(clock_.now());  // baselines: the target's counters, the connection's
  burst(32);                 // 24 wait for a slot, as in the test above
  clock_.advance(1s);
  svc_.round(clock_.now());
  auto st = svc_.status();
  EXPECT_TRUE(std::any_of(st.active.begin(), st.active.end(),
                          [](const TuneProblem& p) { return p.code == "tcp_window"; }));
  EXPECT_TRUE(live_.get().rpc.peer_rpcs_in_flight.empty());
  EXPECT_EQ(client_.rpc.max_rpcs_in_flight(b_), 8);
  EXPECT_EQ(st.autotune_changes, 0u);
}

// A path whose TCP connection retransmits 0.01% of its segments gets its bulk spread over
// kLossyConnsPerPeer connections by auto-tune, at the first check that sees it; a clean
// one keeps one connection.
TEST_F(TuneServiceTest, AutoTuneSpreadsALossyPathOverMoreConnections) {
  ASSERT_TRUE(live_.set({"tune.check_interval=1"}).ok());
  TcpKernelInfo k;
  k.rtt_us = k.min_rtt_us = 50000;
  uint64_t lost_per_s = 0;
  svc_.set_tcp_reader([&] {
    k.segs_out += 100'000;
    k.total_retrans += lost_per_s;
    return std::vector<ConnTcpSample>{{"a -> b", b_.to_string(), k}};
  });
  svc_.reset(clock_.now());
  for (int i = 0; i < 3; ++i) {  // clean: nothing changes
    burst(2);
    clock_.advance(1s);
    svc_.round(clock_.now());
  }
  EXPECT_EQ(live_.get().lnet.conns_per_peer, 1);
  lost_per_s = 30;  // 30 of 100,000 a second: 0.01% of all sent by the next check
  for (int i = 0; i < 2; ++i) {
    burst(2);
    clock_.advance(1s);
    svc_.round(clock_.now());
  }
  EXPECT_EQ(live_.get().lnet.conns_per_peer, kLossyConnsPerPeer);
  EXPECT_GE(svc_.status().autotune_changes, 1u);
  // The loss ends: the connections stay spread.
  lost_per_s = 0;
  burst(2);
  clock_.advance(1s);
  svc_.round(clock_.now());
  EXPECT_EQ(live_.get().lnet.conns_per_peer, kLossyConnsPerPeer);
}

// Retransmits while a queue stands on the path (the connection's smoothed RTT well above
// its minimum, data in flight) are congestion -- auto-tune's own, overfilling a clean
// path -- not the path's loss: 0.03% retransmitted then leaves the path one connection;
// the same loss with no queue makes it lossy (from the second such second: the first may
// still carry the queue's retransmits).
TEST_F(TuneServiceTest, RetransmitsWhileAQueueStandsDoNotMakeAPathLossy) {
  ASSERT_TRUE(live_.set({"tune.check_interval=1"}).ok());
  TcpKernelInfo k;
  k.rtt_us = k.min_rtt_us = 50000;
  k.unacked = 700;
  uint64_t lost_per_read = 0;
  svc_.set_tcp_reader([&] {
    k.segs_out += 100'000;
    k.total_retrans += lost_per_read;
    return std::vector<ConnTcpSample>{{"a -> b", b_.to_string(), k}};
  });
  svc_.reset(clock_.now());
  auto second = [&](uint32_t srtt_us) {
    k.rtt_us = srtt_us;
    burst(2);
    clock_.advance(1s);
    svc_.round(clock_.now());
  };
  for (int i = 0; i < 3; ++i) second(50'500);  // no queue
  lost_per_read = 30;
  for (int i = 0; i < 4; ++i) second(95'000);  // a queue stands
  EXPECT_EQ(live_.get().lnet.conns_per_peer, 1);
  second(50'500);  // the queue gone: its retransmits may come yet
  EXPECT_EQ(live_.get().lnet.conns_per_peer, 1);
  second(50'500);
  EXPECT_EQ(live_.get().lnet.conns_per_peer, kLossyConnsPerPeer);
}

// Loss found between two checks (tune.check_interval, 10 s) is acted on at once: once
// 30,000 counted segments show it, the check runs and auto-tune spreads the path -- the
// seconds until the next check ran on one connection before.
TEST_F(TuneServiceTest, LossFoundBetweenChecksIsActedOnAtOnce) {
  TcpKernelInfo k;
  k.rtt_us = k.min_rtt_us = 50000;
  svc_.set_tcp_reader([&] {
    k.segs_out += 10'000;
    k.total_retrans += 1;  // 0.01%
    return std::vector<ConnTcpSample>{{"a -> b", b_.to_string(), k}};
  });
  svc_.reset(clock_.now());
  for (int i = 0; i < 3; ++i) {  // a baseline, then 20,000 segments counted
    burst(2);
    clock_.advance(1s);
    svc_.round(clock_.now());
  }
  EXPECT_EQ(live_.get().lnet.conns_per_peer, 1);
  burst(2);
  clock_.advance(1s);
  svc_.round(clock_.now());  // 30,000: checked now, 6 s before the interval
  EXPECT_EQ(live_.get().lnet.conns_per_peer, kLossyConnsPerPeer);
}

TEST_F(TuneServiceTest, AutoTuneOffKeepsTheSettings) {
  ASSERT_TRUE(live_.set({"tune.auto=false"}).ok());
  svc_.reset(clock_.now());
  burst(32);
  clock_.advance(1s);
  svc_.round(clock_.now());
  EXPECT_EQ(live_.get().rpc.max_rpcs_in_flight, 8);
  EXPECT_EQ(svc_.status().autotune_changes, 0u);
}

TEST_F(TuneServiceTest, AdviceUsesTrafficAndTheConfiguredLink) {
  ASSERT_TRUE(live_.set({"tune.auto=false"}).ok());
  svc_.reset(clock_.now());
  burst(2);  // connects: the peer exists from now on
  clock_.advance(1s);
  svc_.round(clock_.now());  // first sample: the peer's counters are the baseline
  burst(16);
  // 16 more, not pumped: 8 go to the wire, 8 wait for a max_rpcs_in_flight slot.
  BulkData data = make_bulk(make_ping_pattern(4096));
  int late = 0;
  for (int i = 0; i < 16; ++i)
    client_.rpc.call_async(b_, kMsgPing, Buffer(), data, [&](RpcReply&&) { ++late; });
  clock_.advance(1s);
  svc_.round(clock_.now());
  auto r = svc_.tune({});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->advice.peers.size(), 1u);
  const PeerMeasure& m = r->advice.peers[0].m;
  EXPECT_EQ(m.peer, b_.to_string());
  EXPECT_DOUBLE_EQ(m.bandwidth, 100e6);
  EXPECT_EQ(m.bandwidth_source, "tune.link_mbit");
  // At least the 16 requests and replies with 4 KiB each, over the one second sampled; at
  // most those and the 8 requests handed to the wire since, with their headers.
  EXPECT_GE(m.throughput, 16 * 2 * 4096.0);
  EXPECT_LE(m.throughput, 24 * 2 * (4096.0 + 512));
  EXPECT_TRUE(m.window_limited);  // RPCs were waiting for a slot at the sample
  for (int i = 0; i < 1000 && late < 16; ++i) hub_.pump();
  EXPECT_EQ(late, 16);
  EXPECT_EQ(r->current.max_rpcs_in_flight, 8);
  EXPECT_FALSE(r->applied);
  // Bad sizes are refused; apply takes the recommendation.
  TuneRequest bad;
  bad.size = 100;
  EXPECT_FALSE(svc_.tune(bad).ok());
  TuneRequest apply;
  apply.apply = true;
  r = svc_.tune(apply);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->applied);
  EXPECT_EQ(live_.get().rpc.max_rpcs_in_flight, r->advice.recommended.max_rpcs_in_flight);
  EXPECT_EQ(live_.get().rpc.peer_rpcs_in_flight, r->advice.recommended.peer_rpcs_in_flight);
}

TEST_F(TuneServiceTest, TheCheckRunsEveryCheckInterval) {
  ASSERT_TRUE(live_.set({"tune.auto=false", "tune.check_interval=10"}).ok());
  svc_.reset(clock_.now());
  burst(4);
  clock_.advance(9s);
  svc_.round(clock_.now());
  EXPECT_FALSE(svc_.status().last_advice);
  clock_.advance(1s);
  svc_.round(clock_.now());
  auto st = svc_.status();
  ASSERT_TRUE(st.last_advice);
  EXPECT_EQ(st.last_advice->peers.size(), 1u);
}

}  // namespace
}  // namespace pfsnet
