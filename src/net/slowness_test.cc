#include "net/slowness.h"

#include <gtest/gtest.h>

namespace pfsnet {
namespace {

using namespace std::chrono_literals;

// Feeds one sample a second on a manual clock and records the changes.
struct Feed {
  SlownessTracker t;
  ManualClock clock;
  std::vector<std::pair<int, SlownessTracker::Change>> changes;  // (second, change)
  int second = 0;
  uint64_t segs = 0, retrans = 0;
  double wire_ms = -1;  // the queue in TCP's smoothed RTT each second (< 0: no TCP)

  explicit Feed(SlownessOptions o = {}) : t(o) {}
  // `n` seconds of traffic at `latency_ms` (and `exec_ms`), `seg_rate` segments a second of
  // which `loss` are retransmitted.
  void run(int n, double latency_ms, double exec_ms = 0.1, uint64_t seg_rate = 0, double loss = 0,
           double peers_ms = 0, uint64_t count = 100) {
    for (int i = 0; i < n; ++i) {
      segs += seg_rate;
      retrans += static_cast<uint64_t>(double(seg_rate) * loss);
      clock.advance(1s);
      ++second;
      SlownessSample s{count, latency_ms, exec_ms, segs, retrans};
      s.rtt_excess_ms = wire_ms;
      auto c = t.add(s, clock.now(), peers_ms);
      if (c) changes.emplace_back(second, *c);
    }
  }
};

TEST(SlownessTest, SlowLinkDegradesAfterTheWindowAndTripThenRecoversWithDamping) {
  Feed f;
  f.run(120, 0.2);  // two minutes at 0.2 ms: the baseline
  EXPECT_TRUE(f.changes.empty());
  EXPECT_NEAR(f.t.evidence().baseline_ms, 0.2, 1e-9);
  f.run(20, 5.0);  // the link slows down 25x
  ASSERT_EQ(f.changes.size(), 1u);
  // The window's median turns at the 6th slow second of 10; 3 judgements in a row: the 8th.
  EXPECT_EQ(f.changes[0].first, 128);
  EXPECT_TRUE(f.changes[0].second.degraded);
  EXPECT_EQ(f.changes[0].second.cause, SlowCause::kSlow);
  EXPECT_NEAR(f.changes[0].second.evidence.latency_ms, 5.0, 1e-9);
  EXPECT_NEAR(f.changes[0].second.evidence.baseline_ms, 0.2, 1e-9);
  EXPECT_NE(f.changes[0].second.evidence.text().find("latency 5.000 ms (baseline 0.200 ms, x25.0"),
            std::string::npos)
      << f.changes[0].second.evidence.text();
  EXPECT_TRUE(f.t.degraded());
  // Back: the (lower) median turns at the 5th good second, 10 good judgements: the 14th.
  f.run(20, 0.2);
  ASSERT_EQ(f.changes.size(), 2u);
  EXPECT_EQ(f.changes[1].first, 140 + 14);
  EXPECT_FALSE(f.changes[1].second.degraded);
  EXPECT_EQ(f.changes[1].second.cause, SlowCause::kSlow);  // what it was
  EXPECT_FALSE(f.t.degraded());
}

TEST(SlownessTest, AFigureHoveringAtTheThresholdDoesNotFlap) {
  Feed f;
  f.run(60, 0.2);
  // Threshold: max(3 x 0.2, 0.2 + 1) = 1.2 ms; good again only below 2/3 of it (0.867).
  f.run(15, 1.3);
  ASSERT_EQ(f.changes.size(), 1u);
  for (int i = 0; i < 10; ++i) {
    f.run(5, 1.1);  // under the threshold, over two thirds of it
    f.run(5, 1.3);
  }
  EXPECT_EQ(f.changes.size(), 1u);
  EXPECT_TRUE(f.t.degraded());
  f.run(30, 0.5);
  ASSERT_EQ(f.changes.size(), 2u);
  EXPECT_FALSE(f.t.degraded());
}

TEST(SlownessTest, MicrosecondNoiseOnAFastLinkIsNotSlowness) {
  Feed f;
  f.run(60, 0.05);
  f.run(60, 0.5);  // 10x, but only 0.45 ms more: under min_excess (1 ms)
  EXPECT_TRUE(f.changes.empty());
  EXPECT_FALSE(f.t.degraded());
}

TEST(SlownessTest, RetransmissionsMakeItLossyEvenWhenLatencyLooksFine) {
  Feed f;
  f.run(60, 0.2, 0.1, 1000, 0.0);
  EXPECT_TRUE(f.changes.empty());
  f.run(10, 0.2, 0.1, 1000, 0.03);  // 3% of segments retransmitted
  ASSERT_EQ(f.changes.size(), 1u);
  EXPECT_EQ(f.changes[0].second.cause, SlowCause::kLossy);
  // Over the 10 s window: 1%+ after 4 lossy seconds (1.2%), judged bad 3 times: the 6th.
  EXPECT_EQ(f.changes[0].first, 66);
  EXPECT_GT(f.changes[0].second.evidence.loss, 0.01);
  EXPECT_NE(f.changes[0].second.evidence.text().find("TCP retransmitted"), std::string::npos);
  // A new connection (counters restart) is counted afresh, not as a huge negative delta.
  f.segs = 0;
  f.retrans = 0;
  f.run(30, 0.2, 0.1, 1000, 0.0);
  ASSERT_EQ(f.changes.size(), 2u);
  EXPECT_FALSE(f.t.degraded());
}

// Congestion loss is not LOSSY: retransmits in seconds when the kernel saw a queue standing
// on the path are a full queue's drops (a shaper's, the path at its ceiling), shown in the
// evidence and not counted; the same retransmits with no queue are random loss.
TEST(SlownessTest, RetransmitsWhileAQueueStandsAreCongestionNotLoss) {
  EXPECT_TRUE(queue_stands(11.7, 0.006));  // a 20 Mbit/s tbf under BBR
  EXPECT_TRUE(queue_stands(50.0, 0.006));  // ... under CUBIC
  EXPECT_FALSE(queue_stands(0.4, 0.003));  // 5% random drops: no queue
  EXPECT_FALSE(queue_stands(55.0, 50.0));  // a 50 ms path: 5 ms above is jitter
  EXPECT_TRUE(queue_stands(70.0, 50.0));   // ... 20 ms above is a queue
  EXPECT_FALSE(queue_stands(5.0, 0));      // no minimum known: no verdict
  // Against the host's own delay: a loaded host's every path 3 ms late is no queue on one.
  EXPECT_FALSE(queue_stands(3.2, 0.01, 2.5));
  EXPECT_TRUE(queue_stands(11.7, 0.006, 2.5));  // the tbf stands out from it
  SlownessTracker t;
  ManualClock clock;
  uint64_t segs = 0, retrans = 0;
  auto second = [&](double loss, bool queueing) {
    segs += 1000;
    retrans += static_cast<uint64_t>(1000 * loss);
    clock.advance(1s);
    SlownessSample smp{100, 0.2, 0.1, segs, retrans};
    smp.queueing = queueing;
    return t.add(smp, clock.now());
  };
  for (int i = 0; i < 60; ++i) second(0, false);
  for (int i = 0; i < 30; ++i) EXPECT_FALSE(second(0.03, true)) << i;
  EXPECT_FALSE(t.degraded());
  EXPECT_EQ(t.evidence().retrans, 0u);
  EXPECT_EQ(t.evidence().congestion_retrans, 300u);
  EXPECT_NE(t.evidence().text().find("300 more while a queue stood (congestion, not loss)"),
            std::string::npos)
      << t.evidence().text();
  // The same drops with no queue: LOSSY.
  for (int i = 0; i < 10 && !t.degraded(); ++i) second(0.03, false);
  EXPECT_TRUE(t.degraded());
  EXPECT_EQ(t.cause(), SlowCause::kLossy);
}

// A drop's retransmit comes a round trip or more after it, when the queue that dropped it
// may have drained: retransmits in the second right after a queued one are still that
// queue's; in the second after that they are loss.
TEST(SlownessTest, RetransmitsJustAfterAQueueAreStillCongestion) {
  SlownessTracker t;
  ManualClock clock;
  uint64_t segs = 0, retrans = 0;
  auto second = [&](uint64_t lost, bool queueing) {
    segs += 1000;
    retrans += lost;
    clock.advance(1s);
    SlownessSample smp{100, 0.2, 0.1, segs, retrans};
    smp.queueing = queueing;
    t.add(smp, clock.now());
  };
  second(0, false);
  second(5, true);    // the queue overflows
  second(40, false);  // its drops retransmitted, the queue gone
  EXPECT_EQ(t.evidence().congestion_retrans, 45u);
  EXPECT_EQ(t.evidence().retrans, 0u);
  second(7, false);  // a second on: loss
  EXPECT_EQ(t.evidence().congestion_retrans, 45u);
  EXPECT_EQ(t.evidence().retrans, 7u);
}

// A queue on the path shows in a connection that has data in flight, its smoothed RTT a
// tenth and 1 ms above its minimum.
TEST(SlownessTest, TuningSeesAQueueInASendingConnectionsRtt) {
  TcpKernelInfo k;
  k.min_rtt_us = 50'000;
  k.rtt_us = 60'900;  // the overflowing queue's second at 1 Gbit/s, 50 ms
  k.unacked = 880;
  EXPECT_TRUE(queue_on_path(k));
  k.rtt_us = 55'500;  // pacing jitter
  EXPECT_FALSE(queue_on_path(k));
  k.rtt_us = 98'000;
  k.unacked = 0;  // idle: its RTT is old
  EXPECT_FALSE(queue_on_path(k));
  k.unacked = 1;
  k.min_rtt_us = 0;  // no minimum yet
  EXPECT_FALSE(queue_on_path(k));
}

TEST(SlownessTest, ALossySubjectRecoversOnlyOnSegmentsNotOnLatencyAlone) {
  Feed f;
  f.run(60, 0.2, 0.1, 1000, 0.0);
  f.run(10, 0.2, 0.1, 1000, 0.05);
  ASSERT_TRUE(f.t.degraded());
  ASSERT_EQ(f.t.cause(), SlowCause::kLossy);
  // Avoided: small probes only, 5 segments a second. Fine latency alone ends nothing; the
  // clean segments gather across seconds once the lossy ones have left the window (second
  // 80), 200 of them take 40 s (second 119), then 10 good judgements: second 128.
  f.run(45, 0.2, 0.1, 5, 0.0);
  EXPECT_TRUE(f.t.degraded());
  f.run(30, 0.2, 0.1, 5, 0.0);
  EXPECT_FALSE(f.t.degraded());
  ASSERT_EQ(f.changes.size(), 2u);
  EXPECT_EQ(f.changes[1].first, 128);
  EXPECT_EQ(f.changes[1].second.cause, SlowCause::kLossy);
  // It lasted from its call to its end.
  EXPECT_EQ(f.changes[1].second.lasted, std::chrono::seconds(128 - f.changes[0].first));
  // A retransmit among the probes' segments starts the gathering again.
  Feed g;
  g.run(60, 0.2, 0.1, 1000, 0.0);
  g.run(10, 0.2, 0.1, 1000, 0.05);
  g.run(40, 0.2, 0.1, 5, 0.0);
  g.run(1, 0.2, 0.1, 5, 1.0);  // all 5 of this second's segments retransmitted
  g.run(45, 0.2, 0.1, 5, 0.0);
  EXPECT_TRUE(g.t.degraded());
  // Under load, clean: 10 s.
  g.run(12, 0.2, 0.1, 1000, 0.0);
  EXPECT_FALSE(g.t.degraded());
}

// A LOSSY path that then carries a few segments a second and no small RPC at all (no
// latency to judge by) still ends on its clean segments.
TEST(SlownessTest, ALossyPathWithoutSmallRpcsEndsOnItsSegments) {
  Feed f;  // bulk only from the start: never a latency sample
  f.run(60, 0.2, 0.1, 1000, 0.0, 0, /*count=*/0);
  f.run(10, 0.2, 0.1, 1000, 0.05, 0, /*count=*/0);
  ASSERT_TRUE(f.t.degraded());
  // Its evidence is TCP's alone, over the seconds the counters cover: no latency of 0 ms
  // "over 0 s", as a bulk-only path once printed.
  std::string text = f.changes[0].second.evidence.text();
  EXPECT_EQ(text.find("latency"), std::string::npos) << text;
  EXPECT_EQ(text.rfind("TCP retransmitted", 0), 0u) << text;
  EXPECT_NE(text.find(", over 10 s"), std::string::npos) << text;
  f.run(120, 0.2, 0.1, 5, 0.0, 0, /*count=*/0);
  EXPECT_FALSE(f.t.degraded());
  ASSERT_EQ(f.changes.size(), 2u);
  EXPECT_FALSE(f.changes[1].second.degraded);
  EXPECT_EQ(f.changes[1].second.cause, SlowCause::kLossy);  // what it was
}

TEST(SlownessTest, ASlowServerIsToldApartFromASlowNetwork) {
  Feed f;
  f.run(60, 0.2, 0.1);
  f.run(10, 0.2, 20.0);  // execution (queue wait included) up 200x, the network as before
  ASSERT_EQ(f.changes.size(), 1u);
  EXPECT_EQ(f.changes[0].second.cause, SlowCause::kServer);
  EXPECT_NE(f.changes[0].second.evidence.text().find("server execution 20.000 ms"),
            std::string::npos);
  // The network slows too: the cause becomes the network's.
  f.run(10, 8.0, 20.0);
  ASSERT_EQ(f.changes.size(), 2u);
  EXPECT_TRUE(f.changes[1].second.degraded);
  EXPECT_EQ(f.changes[1].second.cause, SlowCause::kSlow);
}

// Issue 70, item 6: a server stopped 80% of each second (SIGSTOP) made its peers' RPCs
// wait hundreds of ms while TCP's round trip to it stayed short (its kernel ACKs): SERVER,
// not SLOW. A shaper's queue holds the ACKs as long as the RPCs: SLOW.
TEST(SlownessTest, LatencyThatTcpsRoundTripDoesNotShareIsTheServers) {
  Feed stopped;
  stopped.wire_ms = 0.05;
  stopped.run(60, 0.2);
  stopped.run(10, 300.0);  // RPCs wait 300 ms; the kernel's RTT stays 0.05 ms above its lowest
  ASSERT_EQ(stopped.changes.size(), 1u);
  EXPECT_EQ(stopped.changes[0].second.cause, SlowCause::kServer);
  EXPECT_NE(stopped.changes[0].second.evidence.text().find("TCP's RTT +0.050 ms over its lowest"),
            std::string::npos)
      << stopped.changes[0].second.evidence.text();
  // The cause after a minute at `base_ms` and ten seconds at `slow_ms`, TCP's RTT queue `wire_ms`
  // then (< 0: no TCP figures).
  auto cause = [](double base_ms, double slow_ms, double wire_ms) {
    Feed f;
    f.wire_ms = wire_ms < 0 ? -1 : 0.05;
    f.run(60, base_ms);
    f.wire_ms = wire_ms;
    f.run(10, slow_ms);
    EXPECT_EQ(f.changes.size(), 1u);
    return f.changes.empty() ? SlowCause::kNone : f.changes[0].second.cause;
  };
  // Under a tenth: 29 ms of 299.8 is still the server's; at 80 the wire's.
  EXPECT_EQ(cause(0.2, 300.0, 29), SlowCause::kServer);
  EXPECT_EQ(cause(0.2, 300.0, 80), SlowCause::kSlow);
  // A host overloaded under bulk (the quiet-cluster test's, 2026-12-06): 138 ms over a 10 ms
  // baseline with 26 ms of queue in TCP's RTT -- load on the path, not a stopped server.
  EXPECT_EQ(cause(10.0, 138.0, 26), SlowCause::kSlow);
  // Without TCP's figures (another transport) latency is the network's, as before.
  EXPECT_EQ(cause(0.2, 300.0, -1), SlowCause::kSlow);
}

TEST(SlownessTest, SlowFromTheStartIsCaughtByItsPeersNotByItsOwnHistory) {
  Feed alone;
  alone.run(60, 6.0);  // no history but itself: nothing to call slow
  EXPECT_TRUE(alone.changes.empty());
  Feed f;
  f.run(60, 6.0, 0.1, 0, 0, /*peers_ms=*/0.3);
  ASSERT_EQ(f.changes.size(), 1u);
  EXPECT_EQ(f.changes[0].second.cause, SlowCause::kSlow);
  EXPECT_NEAR(f.changes[0].second.evidence.peers_ms, 0.3, 1e-9);
}

TEST(SlownessTest, WithoutTrafficTheStateHoldsAndTheBaselineDoesNotLearnSlowness) {
  Feed f;
  f.run(60, 0.2);
  f.run(20, 5.0);
  ASSERT_TRUE(f.t.degraded());
  f.run(100, 0, 0, 0, 0, 0, /*count=*/0);  // no traffic at all
  EXPECT_TRUE(f.t.degraded());
  EXPECT_EQ(f.changes.size(), 1u);
  // Twenty minutes slow: longer than the baseline's 15, still degraded (frozen baseline).
  f.run(1200, 5.0);
  EXPECT_TRUE(f.t.degraded());
  EXPECT_NEAR(f.t.evidence().baseline_ms, 0.2, 1e-9);
  EXPECT_EQ(f.changes.size(), 1u);
}

}  // namespace
}  // namespace pfsnet
