// The tuning rules on exact numbers, the drift watch, and the auto-tuner against a model
// of a long fat pipe.
#include "tune/tune.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "tune/text.h"

namespace pfsnet {
namespace {

using tune_text::kMiB;
constexpr double k5Gbit = 5e9 / 8;  // bytes/s

PeerMeasure wan(double rtt_ms = 50.4, double bw = k5Gbit) {
  PeerMeasure m;
  m.peer = "127.0.0.3@tcp";
  m.rtt_ms = rtt_ms;
  m.rtt_source = "probe";
  m.bandwidth = bw;
  m.bandwidth_source = "probe";
  m.rpc_bytes = kMiB;
  return m;
}

bool has(const Advice& a, const std::string& code) {
  return std::any_of(a.problems.begin(), a.problems.end(),
                     [&](const TuneProblem& p) { return p.code == code; });
}

TEST(TuneAdviceTest, TheStudysRuleOnA5GbitWan) {
  // 5 Gbit/s x 50.4 ms = 31.5 MB = 30.04 MiB: 31 RPCs of 1 MiB, plus one.
  EXPECT_EQ(rpcs_for(k5Gbit * 0.0504, kMiB), 32);
  EXPECT_EQ(rpcs_for(4 * kMiB, kMiB), 5);  // exactly 4 -> 4 + 1
  Advice a = advise({wan()}, TuneSettings{}, TuneConfig{}, 1);
  ASSERT_EQ(a.peers.size(), 1u);
  EXPECT_NEAR(a.peers[0].bdp_bytes, 31.5e6, 1e3);
  EXPECT_EQ(a.peers[0].rpcs_needed, 32);
  // 8 x 1 MiB per (50.4 ms + 1.68 ms): 161 MB/s, about a quarter of the link.
  EXPECT_NEAR(a.peers[0].ceiling, 8 * kMiB / (0.0504 + kMiB / k5Gbit), 1);
  EXPECT_EQ(a.recommended, (TuneSettings{32, 32, 64}));
  EXPECT_TRUE(has(a, "rpcs_below_bdp"));
  EXPECT_NE(a.why_rpcs.find("ceil(BDP/size)+1 = 32"), std::string::npos) << a.why_rpcs;
  EXPECT_NE(a.why_rpcs.find("now 8"), std::string::npos) << a.why_rpcs;
  // The recommended settings fit: nothing is wrong with them.
  Advice b = advise({wan()}, a.recommended, TuneConfig{}, 1);
  EXPECT_TRUE(b.problems.empty()) << b.problems[0].text;
  // 100 peers share an NI's credits.
  EXPECT_EQ(advise({wan()}, TuneSettings{}, TuneConfig{}, 100).recommended.credits, 3200);
}

TEST(TuneAdviceTest, BoundsAndALan) {
  TuneConfig b;
  b.max_rpcs_in_flight = 16;
  b.max_peer_credits = 16;
  Advice a = advise({wan()}, TuneSettings{}, b, 1);
  EXPECT_EQ(a.recommended.max_rpcs_in_flight, 16);
  EXPECT_NE(a.why_rpcs.find("capped by tune.max_rpcs_in_flight"), std::string::npos);
  // A LAN: 10 Gbit/s x 50 us = 62.5 kB needs 2; the floor is the default 8.
  Advice lan = advise({wan(0.05, 10e9 / 8)}, TuneSettings{}, TuneConfig{}, 1);
  EXPECT_EQ(lan.peers[0].rpcs_needed, 2);
  EXPECT_EQ(lan.recommended.max_rpcs_in_flight, 8);
  EXPECT_NE(lan.why_rpcs.find("raised to tune.min_rpcs_in_flight"), std::string::npos);
  EXPECT_TRUE(lan.problems.empty());
  // Nothing measured: kept, and said why.
  PeerMeasure none;
  none.peer = "x@tcp";
  Advice n = advise({none}, TuneSettings{24, 24, 64}, TuneConfig{}, 1);
  EXPECT_EQ(n.recommended.max_rpcs_in_flight, 24);
  EXPECT_NE(n.why_rpcs.find("kept"), std::string::npos);
}

// A WAN peer beside LAN peers (the study's OSCs across the WAN and in the machine room):
// the node's value is what the median peer needs, and the WAN peer gets its own, so the
// LAN peers are not given 32 RPCs in flight they do not need. A peer's own value that it
// no longer needs is dropped; one of a peer not measured is kept.
TEST(TuneAdviceTest, AWanPeerBesideLanPeersGetsItsOwnRpcsInFlight) {
  PeerMeasure far = wan();  // needs 32
  far.peer = "198.18.1.2@tcp";
  PeerMeasure near1 = wan(0.05, 10e9 / 8), near2 = wan(0.2, 10e9 / 8);  // 2 each
  near1.peer = "198.18.0.2@tcp";
  near2.peer = "198.18.0.3@tcp";
  TuneSettings cur;
  cur.peer_rpcs_in_flight = {{"198.18.0.3@tcp", 16}, {"198.18.9.9@tcp", 12}};
  Advice a = advise({near1, far, near2}, cur, TuneConfig{}, 3);
  EXPECT_EQ(a.recommended.max_rpcs_in_flight, 8);  // the median needs 2; the floor is 8
  EXPECT_EQ(a.recommended.peer_rpcs_in_flight,
            (std::map<std::string, int64_t>{{"198.18.1.2@tcp", 32}, {"198.18.9.9@tcp", 12}}));
  EXPECT_EQ(a.recommended.peer_credits, 32);  // the most any peer may have in flight
  EXPECT_NE(a.why_rpcs.find("median of 3 measured peers"), std::string::npos) << a.why_rpcs;
  EXPECT_NE(a.why_peer_rpcs["198.18.1.2@tcp"].find("ceil(BDP/size)+1 = 32"), std::string::npos);
  EXPECT_NE(a.why_peer_rpcs["198.18.0.3@tcp"].find("none: needs 2, which the node's 8 covers"),
            std::string::npos);
  // The WAN peer is judged by its own value: 8 is below its BDP; the near peer's own 16 is
  // its value now.
  ASSERT_EQ(a.peers.size(), 3u);
  EXPECT_EQ(a.peers[1].rpcs_now, 8);
  EXPECT_EQ(a.peers[2].rpcs_now, 16);
  EXPECT_TRUE(has(a, "rpcs_below_bdp"));
  // Applied, nothing is wrong any more, and the advice stays put.
  Advice b = advise({near1, far, near2}, a.recommended, TuneConfig{}, 3);
  EXPECT_TRUE(b.problems.empty()) << b.problems[0].text;
  EXPECT_EQ(b.recommended, a.recommended);
  // Two WAN peers of three: the median is a WAN peer, so the node's value covers both and
  // neither needs its own.
  PeerMeasure far2 = wan(60, k5Gbit);
  far2.peer = "198.18.1.3@tcp";
  Advice c = advise({near1, far, far2}, TuneSettings{}, TuneConfig{}, 3);
  EXPECT_EQ(c.recommended.max_rpcs_in_flight, 32);
  EXPECT_EQ(c.recommended.peer_rpcs_in_flight,
            (std::map<std::string, int64_t>{{"198.18.1.3@tcp", rpcs_for(k5Gbit * 0.06, kMiB)}}));
}

TEST(TuneAdviceTest, ProblemsWithTheCurrentSettings) {
  Advice a = advise({}, TuneSettings{32, 8, 64}, TuneConfig{}, 16);
  EXPECT_TRUE(has(a, "peer_credits_below_rpcs"));
  EXPECT_TRUE(has(a, "credits_below_peers"));  // 8 x 16 = 128 > 64
  EXPECT_FALSE(has(advise({}, TuneSettings{8, 8, 128}, TuneConfig{}, 16), "credits_below_peers"));
  // The link's rate unknown, but RPCs queue while the path carries 8 per round trip.
  PeerMeasure m = wan();
  m.bandwidth = 0;
  m.window_limited = true;
  m.throughput = 8 * kMiB / 0.0504 * 0.95;
  Advice w = advise({m}, TuneSettings{}, TuneConfig{}, 1);
  EXPECT_TRUE(has(w, "window_limited"));
  EXPECT_EQ(w.recommended.max_rpcs_in_flight, 16);
  // Traffic's peak is no measure of the link while the window holds the traffic back:
  // the advice doubles rather than asking for one more than the window.
  m.bandwidth = m.throughput;
  m.bandwidth_lower_bound = true;
  Advice lb = advise({m}, TuneSettings{}, TuneConfig{}, 1);
  EXPECT_TRUE(has(lb, "window_limited"));
  EXPECT_EQ(lb.peers[0].rpcs_needed, 0);
  EXPECT_EQ(lb.recommended.max_rpcs_in_flight, 16);
  m.bandwidth = 0;
  m.bandwidth_lower_bound = false;
  m.throughput = 8 * kMiB / 0.0504 * 0.5;  // well below the window: something else limits
  EXPECT_FALSE(has(advise({m}, TuneSettings{}, TuneConfig{}, 1), "window_limited"));
}

TEST(TuneWatchTest, WarnsOnceWhenTheRttGrowsAndClearsWhenFixed) {
  TuneWatch w;
  TuneSettings s;
  EXPECT_TRUE(w.update(advise({wan(0.1)}, s, TuneConfig{}, 1)).empty());  // a LAN: fits
  auto ev = w.update(advise({wan(50.4)}, s, TuneConfig{}, 1));
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_TRUE(ev[0].warning);
  EXPECT_EQ(ev[0].problem.code, "rpcs_below_bdp");
  EXPECT_NE(ev[0].text.find("RTT to 127.0.0.3@tcp went from 0.10 to 50.40 ms"), std::string::npos)
      << ev[0].text;
  EXPECT_EQ(w.warnings(), 1u);
  EXPECT_TRUE(w.update(advise({wan(50.4)}, s, TuneConfig{}, 1)).empty());  // still: no repeat
  EXPECT_EQ(w.active().size(), 1u);
  ev = w.update(advise({wan(50.4)}, TuneSettings{32, 32, 64}, TuneConfig{}, 1));
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_FALSE(ev[0].warning);
  EXPECT_TRUE(w.active().empty());
  // More peers than the credits cover.
  ev = w.update(advise({wan(50.4)}, TuneSettings{32, 32, 64}, TuneConfig{}, 4));
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_NE(ev[0].text.find("peers went from 1 to 4"), std::string::npos) << ev[0].text;
  EXPECT_EQ(w.warnings(), 2u);
}

// A long fat pipe: W RPCs of `size` in flight over `rtt` at `bw`, served by a peer that
// executes at most `server_rps`.
TuneInterval pipe(const TuneSettings& s, double rtt, double bw, double size,
                  double server_rps = 1e9) {
  double cycle = rtt + size / bw;
  double w = double(s.max_rpcs_in_flight);
  double rps = std::min({w / cycle, bw / size, server_rps});
  TuneInterval iv;
  iv.seconds = 1;
  iv.rpcs = static_cast<uint64_t>(rps);
  iv.round_trip_ms = 1000 * std::max(cycle, w / rps);
  iv.bytes = static_cast<uint64_t>(rps * size);
  iv.slot_waits = 1000;  // the application wants 256 in flight
  return iv;
}

TEST(AutoTunerTest, FindsTheBdpOfA5GbitWanAndBacksOffTheQueue) {
  AutoTuner t{TuneConfig{}};
  TuneSettings s;
  std::vector<int64_t> seen;
  int first_90 = -1;
  for (int i = 0; i < 30; ++i) {
    TuneInterval iv = pipe(s, 0.0504, k5Gbit, kMiB);
    if (first_90 < 0 && double(iv.bytes) >= 0.9 * k5Gbit) first_90 = i;
    if (auto c = t.step(iv, s)) {
      EXPECT_FALSE(c->why.empty());
      s = c->to;
      seen.push_back(s.max_rpcs_in_flight);
      EXPECT_GE(s.peer_credits, s.max_rpcs_in_flight);
      EXPECT_GE(s.credits, s.peer_credits);
    }
  }
  // Doubling from 8 with two skipped intervals after each change: 16, 32, 64; 64 queues
  // about 32 RPCs in the pipe, so back to what it holds (596 RPCs/s x 52.1 ms = 31.04,
  // rounded up) plus 2.
  ASSERT_GE(seen.size(), 4u);
  EXPECT_EQ(seen[0], 16);
  EXPECT_EQ(seen[1], 32);
  EXPECT_EQ(seen[2], 64);
  EXPECT_EQ(seen[3], 34);
  EXPECT_EQ(first_90, 4);  // 32 in flight (from the 4th interval) fill the link
  EXPECT_GE(double(pipe(s, 0.0504, k5Gbit, kMiB).bytes), 0.9 * k5Gbit);
  EXPECT_LE(s.max_rpcs_in_flight, 40);  // and it does not wander back up to 64
}

TEST(AutoTunerTest, BacksOffWhenLatencyClimbsWithoutThroughput) {
  // The server executes 100 RPCs/s, whatever the window: 8 in flight already saturate it.
  AutoTuner t{TuneConfig{}};
  TuneSettings s{8, 8, 64};
  auto c = t.step(pipe(s, 0.05, k5Gbit, kMiB, 100), s);
  ASSERT_TRUE(c);  // RPCs waited for slots, latency at its base: grow
  EXPECT_EQ(c->to.max_rpcs_in_flight, 16);
  s = c->to;
  EXPECT_FALSE(t.step(pipe(s, 0.05, k5Gbit, kMiB, 100), s));  // the skipped intervals
  EXPECT_FALSE(t.step(pipe(s, 0.05, k5Gbit, kMiB, 100), s));
  // One slow interval is not enough (a busy CPU looks the same for a second)...
  EXPECT_FALSE(t.step(pipe(s, 0.05, k5Gbit, kMiB, 100), s));
  c = t.step(pipe(s, 0.05, k5Gbit, kMiB, 100), s);
  ASSERT_TRUE(c);  // ...two in a row are.
  // 16 in flight at 100/s: round trip 160 ms against a base of 80: 8 RPCs queue.
  EXPECT_EQ(c->to.max_rpcs_in_flight, 10);
  EXPECT_NE(c->why.find("above its base"), std::string::npos) << c->why;
  EXPECT_NE(c->why.find("before the last growth"), std::string::npos) << c->why;
}

TEST(AutoTunerTest, OneSlowIntervalDoesNotBackOff) {
  AutoTuner t{TuneConfig{}};
  TuneSettings s{32, 32, 64};
  TuneInterval fine = pipe(s, 0.05, k5Gbit, kMiB);
  fine.slot_waits = 0;
  EXPECT_FALSE(t.step(fine, s));  // the base round trip
  TuneInterval slow = fine;
  slow.round_trip_ms *= 2;  // every RPC took twice as long for one interval
  EXPECT_FALSE(t.step(slow, s));
  EXPECT_FALSE(t.step(fine, s));
  EXPECT_FALSE(t.step(slow, s));
}

TEST(AutoTunerTest, HoldsWhenMoreRpcsBuyNothingAndStaysInBounds) {
  TuneConfig b;
  b.max_rpcs_in_flight = 12;
  AutoTuner t{b};
  TuneSettings s;
  TuneInterval iv;
  iv.seconds = 1;
  iv.rpcs = 100;
  iv.round_trip_ms = 10;
  iv.bytes = 100 * 1000;
  iv.slot_waits = 5;
  auto c = t.step(iv, s);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->to.max_rpcs_in_flight, 12);  // 16 wanted, capped
  s = c->to;
  EXPECT_FALSE(t.step(iv, s));
  EXPECT_FALSE(t.step(iv, s));
  EXPECT_FALSE(t.step(iv, s));  // at the bound: nothing to do
  // Unbounded, the same flat throughput after a growth holds.
  AutoTuner u{TuneConfig{}};
  TuneSettings s2;
  c = u.step(iv, s2);
  ASSERT_TRUE(c);
  s2 = c->to;
  EXPECT_FALSE(u.step(iv, s2));
  EXPECT_FALSE(u.step(iv, s2));
  c = u.step(iv, s2);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->to, s2);
  EXPECT_NE(c->why.find("did not grow"), std::string::npos) << c->why;
  EXPECT_FALSE(u.step(iv, s2));  // held
}

TEST(AutoTunerTest, AServerRaisesPeerCreditsWhenRepliesWait) {
  AutoTuner t{TuneConfig{}};
  TuneSettings s;
  TuneInterval iv;
  iv.seconds = 1;
  iv.credit_waits = 40;
  iv.peers = 2;
  auto c = t.step(iv, s);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->to.peer_credits, 16);
  EXPECT_EQ(c->to.max_rpcs_in_flight, 8);
  EXPECT_EQ(c->to.credits, 64);  // 16 x 2 peers fits in 64
  EXPECT_NE(c->why.find("40 sends waited for credits"), std::string::npos) << c->why;
  iv.credit_waits = 0;
  EXPECT_FALSE(t.step(iv, c->to));  // idle
}

// Arrival stamps (ns) of RPCs of 1 MiB.
std::vector<uint64_t> stamps_ms(std::initializer_list<double> ms) {
  std::vector<uint64_t> v;
  for (double m : ms) v.push_back(static_cast<uint64_t>(m * 1e6));
  return v;
}

TEST(TrainRateTest, ATrainPacedByTheBottleneckGivesItsRate) {
  // 8 x 1 MiB, one every 2.1 ms (~476 MiB/s), RTT 50 ms; given out of order.
  TrainRate r = train_rate(stamps_ms({2.1, 0, 4.2, 6.3, 8.4, 10.5, 14.7, 12.6}), 1 << 20, 50);
  EXPECT_FALSE(r.window_limited);
  EXPECT_NEAR(r.rate / (1 << 20), 7 / 0.0147, 1);
  // A slow link spaces every arrival widely, and evenly: still the bottleneck.
  r = train_rate(stamps_ms({0, 40, 80, 120}), 1 << 20, 50);
  EXPECT_FALSE(r.window_limited);
  EXPECT_NEAR(r.rate / (1 << 20), 3 / 0.120, 0.01);
}

TEST(TrainRateTest, ATrainHeldBackByTheWindowIsNamedSo) {
  // A window of 3 MiB: three arrive at the link's rate, then a round trip's wait.
  TrainRate r = train_rate(stamps_ms({0, 2.1, 4.2, 52.1, 54.2, 56.3, 104.2, 106.3}), 1 << 20, 50);
  EXPECT_TRUE(r.window_limited);
  EXPECT_LT(r.rate / (1 << 20), 70);  // what the window let through, far below the link
  // Every RPC at once: no rate.
  EXPECT_EQ(train_rate(stamps_ms({5, 5, 5}), 1 << 20, 50).rate, 0);
  // Without a round trip nothing can be called a wait for the window.
  EXPECT_FALSE(train_rate(stamps_ms({0, 1, 2, 60}), 1 << 20, 0).window_limited);
}

TEST(ProbeEstimateTest, TheLaterCleanTrainsGiveTheRateNotSlowStartNorABurst) {
  auto clean = [](double mib) { return TrainRate{mib * (1 << 20), false}; };
  auto held = [](double mib) { return TrainRate{mib * (1 << 20), true}; };
  // Slow start climbing through the first trains, a loss (held), a burst released by a
  // retransmission (3659), then the link's ~480 MiB/s.
  std::vector<TrainRate> t = {held(33),   held(130),  clean(145), clean(3659), held(109),
                              clean(476), clean(353), held(124),  clean(483),  held(115)};
  ProbeEstimate e = estimate_bandwidth(t);
  EXPECT_FALSE(e.window_limited);
  EXPECT_EQ(e.clean, 5);
  EXPECT_NEAR(e.bandwidth / (1 << 20), 476, 1e-6);  // the later half's clean: 353, 476, 483
  EXPECT_FALSE(trains_settled(t));
  // Three clean trains within 10% settle a probe; a climb of 8% a train does not.
  EXPECT_TRUE(trains_settled({held(40), clean(470), clean(480), clean(455)}));
  EXPECT_FALSE(trains_settled({clean(230), clean(265), clean(287)}));
  EXPECT_FALSE(trains_settled({clean(480), clean(480)}));
  // Every train held back by the window: the best of them, called a lower bound.
  e = estimate_bandwidth({held(43), held(94), held(60)});
  EXPECT_TRUE(e.window_limited);
  EXPECT_NEAR(e.bandwidth / (1 << 20), 94, 1e-6);
  EXPECT_EQ(estimate_bandwidth({TrainRate{}}).bandwidth, 0);
}

// At 0.1% loss most 8 MiB trains lose a packet (9000-byte segments: 0.999^930 = 0.39 go
// through): one lost mid-train reads low, one lost ahead of the first arrival reads high,
// and neither looks held by the window. Thirteen probes on the delay line read 125-4001
// MiB/s for a 455 MiB/s path so. The trains that lost nothing give the rate.
TEST(ProbeEstimateTest, TrainsThatLostAPacketAreLeftOut) {
  auto clean = [](double mib) { return TrainRate{mib * (1 << 20), false, false}; };
  auto lost = [](double mib) { return TrainRate{mib * (1 << 20), false, true}; };
  std::vector<TrainRate> t = {clean(290), lost(125),  lost(131), clean(452), lost(4001),
                              lost(145),  clean(461), lost(139), clean(449), lost(128)};
  ProbeEstimate e = estimate_bandwidth(t);
  EXPECT_EQ(e.clean, 4);
  EXPECT_EQ(e.lost, 6);
  EXPECT_FALSE(e.every_train_lost);
  EXPECT_NEAR(e.bandwidth / (1 << 20), 461, 1e-6);  // the later half's clean: 449, 461
  // Without the flags the same readings gave a third of the link.
  std::vector<TrainRate> blind = t;
  for (TrainRate& x : blind) x.lost = false;
  EXPECT_LT(estimate_bandwidth(blind).bandwidth / (1 << 20), 150);
  // Settled by the last three that lost nothing, whatever lies between them.
  EXPECT_TRUE(trains_settled(t));
  EXPECT_FALSE(trains_settled({clean(452), lost(461), clean(449), lost(130)}));
  // Every train lost: their median, called rough.
  e = estimate_bandwidth({lost(125), lost(400), lost(4001)});
  EXPECT_TRUE(e.every_train_lost);
  EXPECT_NEAR(e.bandwidth / (1 << 20), 400, 1e-6);
}

// A probe on the delay line at 0.1% loss (4 Gbit/s, 50 ms; iperf3 moved 436-455 MiB/s),
// train by train with the sender's pacing rate: BBR paced the trains at the link's rate in
// start-up, then at about one train per round trip (~155 MiB/s), and most trains lost a
// packet. The clean trains read only that pacing; the link carries at least the best train
// that read no faster than its pacing.
TEST(ProbeEstimateTest, PacedTrainsAndLossesUnderThePacingAreLowerBounds) {
  auto t = [](double mib, double pacing_mib, bool held, bool lost) {
    return TrainRate{mib * (1 << 20), held, lost, pacing_mib * (1 << 20)};
  };
  std::vector<TrainRate> probe = {
      t(35.0, 224.9, false, true),   t(130.4, 383.2, true, true), t(4567.6, 413.5, false, true),
      t(1109.8, 413.5, false, true), t(108.0, 413.5, true, true), t(417.7, 413.5, false, false),
      t(492.7, 413.5, false, true),  t(95.0, 182.4, true, true),  t(127.4, 154.1, true, true),
      t(86.2, 154.1, true, true),    t(87.8, 192.7, true, true),  t(403.1, 192.7, false, true),
      t(154.4, 154.1, false, false), t(106.6, 152.8, true, true), t(154.0, 191.0, false, false)};
  EXPECT_TRUE(paced(probe[5]));
  EXPECT_TRUE(paced(probe[12]));
  EXPECT_FALSE(paced(probe[14]));  // 154 at a pacing of 191: spaced by something else
  ProbeEstimate e = estimate_bandwidth(probe);
  EXPECT_EQ(e.paced, 2);
  EXPECT_EQ(e.lost, 12);
  EXPECT_EQ(e.clean, 1);
  // Bounds: the two paced and the eight lost under their pacing (35.0 and the held ones);
  // not 4567.6, 1109.8, 492.7 or 403.1 (each faster than its pacing: released at once).
  EXPECT_EQ(e.bounds, 10);
  EXPECT_NEAR(e.bandwidth / (1 << 20), 417.7, 1e-6);
  EXPECT_FALSE(trains_settled(probe));
  // Without the pacing the later clean trains give a third of the link.
  for (TrainRate& x : probe) x.pacing = 0;
  EXPECT_NEAR(estimate_bandwidth(probe).bandwidth / (1 << 20), 154.4, 1e-6);
  // Trains that read their pacing never settle a probe: it may yet find more.
  EXPECT_FALSE(trains_settled(
      {t(450, 455, false, false), t(452, 455, false, false), t(449, 455, false, false)}));
  EXPECT_TRUE(trains_settled(
      {t(450, 1300, false, false), t(452, 1300, false, false), t(449, 1300, false, false)}));
}

TEST(TuneAdviceTest, APathThatLosesPacketsGetsThreeTimesItsBdpInFlight) {
  PeerMeasure m;
  m.peer = "198.18.60.2@tcp";
  m.rtt_ms = 50;
  m.bandwidth = 500.0 * (1 << 20);  // BDP 25 MiB
  m.rpc_bytes = 1 << 20;
  TuneConfig b;
  Advice clean = advise({m}, TuneSettings{}, b, 1);
  EXPECT_EQ(clean.recommended.max_rpcs_in_flight, 26);
  EXPECT_FALSE(clean.peers[0].lossy);
  m.retrans_ratio = 1e-4;
  Advice lossy = advise({m}, TuneSettings{}, b, 1);
  EXPECT_TRUE(lossy.peers[0].lossy);
  EXPECT_EQ(lossy.recommended.max_rpcs_in_flight, 76);  // ceil(3 x 25) + 1
  EXPECT_EQ(lossy.recommended.peer_credits, 76);
  EXPECT_NE(lossy.why_rpcs.find("ceil(3 x BDP/size)+1 = 76"), std::string::npos) << lossy.why_rpcs;
  EXPECT_NE(lossy.why_rpcs.find("retransmits 0.0100% of its TCP segments"), std::string::npos)
      << lossy.why_rpcs;
  // ... and its bulk over four connections; a clean path keeps what it has.
  EXPECT_EQ(lossy.recommended.conns_per_peer, 4);
  EXPECT_NE(lossy.why_conns.find("over 4 connections"), std::string::npos) << lossy.why_conns;
  EXPECT_EQ(clean.recommended.conns_per_peer, 1);

  // Auto-tune's floor: a lossy peer below 3 x BDP is raised to it (at most the bound);
  // one at or above it, a clean peer, or another peer is left to the tuner.
  auto up = lossy_floor(lossy, m.peer, 32, 256);
  ASSERT_TRUE(up);
  EXPECT_EQ(up->to.max_rpcs_in_flight, 76);
  EXPECT_NE(up->why.find("max_rpcs_in_flight 32 -> 76: the path loses packets (TCP retransmits "
                         "0.0100% of its segments) and needs 3 x its BDP"),
            std::string::npos)
      << up->why;
  auto bounded = lossy_floor(lossy, m.peer, 32, 64);
  ASSERT_TRUE(bounded);
  EXPECT_EQ(bounded->to.max_rpcs_in_flight, 64) << "the bound";
  EXPECT_FALSE(lossy_floor(lossy, m.peer, 64, 40)) << "the bound is below what it has";
  EXPECT_FALSE(lossy_floor(lossy, m.peer, 76, 256));
  EXPECT_FALSE(lossy_floor(lossy, "198.18.60.3@tcp", 8, 256));
  EXPECT_FALSE(lossy_floor(clean, m.peer, 8, 256));
}

TEST(TuneAdviceTest, AProbeThatNeverFilledThePipeGetsHeadroomOverItsBdp) {
  PeerMeasure m;
  m.peer = "198.18.60.2@tcp";
  m.rtt_ms = 50;
  m.bandwidth = 300.0 * (1 << 20);  // BDP 15 MiB, more than a train of 8 x 1 MiB
  m.rpc_bytes = 1 << 20;
  m.probe_short = true;
  Advice a = advise({m}, TuneSettings{}, TuneConfig{}, 1);
  EXPECT_EQ(a.recommended.max_rpcs_in_flight, 25);  // ceil(1.6 x 15) + 1
  EXPECT_NE(a.why_rpcs.find("ceil(1.6 x BDP/size)+1 = 25"), std::string::npos) << a.why_rpcs;
  EXPECT_NE(a.why_rpcs.find("never filled the pipe"), std::string::npos) << a.why_rpcs;
  // The link's 478 MiB/s read by clean trains: 40, where 2 x BDP (50) overflowed the
  // delay line's queue of one BDP.
  PeerMeasure fast = m;
  fast.bandwidth = 478.0 * (1 << 20);
  EXPECT_EQ(advise({fast}, TuneSettings{}, TuneConfig{}, 1).recommended.max_rpcs_in_flight, 40);
  // Losing packets too: the larger headroom.
  m.retrans_ratio = 1e-3;
  EXPECT_EQ(advise({m}, TuneSettings{}, TuneConfig{}, 1).recommended.max_rpcs_in_flight, 46);
}

// The loss check on a scripted path: each train carries 1,000 segments and takes 100 ms
// of the manual clock; TCP retransmits once the path has carried `loss_at` segments.
struct ScriptedPath {
  ManualClock clock;
  ProbeTcp now;
  uint64_t loss_at = 0;  // 0: never
  Duration per_train = std::chrono::milliseconds(100);
  int trains = 0;
  int fail_at = 0;  // the train that fails (1-based); 0: none
  bool lost = false;
  Status train() {
    if (++trains == fail_at) return Status(Code::kTimeout, "the train did not finish");
    now.segments += 1000;
    if (loss_at > 0 && now.segments >= loss_at && !lost) {
      ++now.retransmits;
      lost = true;
    }
    clock.advance(per_train);
    return Status::Ok();
  }
  Result<LossCheck> check(ProbeTcp start) {
    return check_loss([this] { return train(); }, [this] { return now; }, clock, start);
  }
};

TEST(LossCheckTest, ACleanPathCarriesEnoughSegmentsToSeeOneLossInTenThousand) {
  ScriptedPath p;
  p.now = {0, 9000, 0};  // the trains before it carried 9,000 segments and lost none
  auto r = p.check({0, 0, 0});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->trains, 21);  // 9,000 + 21 x 1,000 = 30,000
  EXPECT_EQ(r->segments, kLossCheckSegments);
  EXPECT_EQ(r->retransmits, 0u);
  EXPECT_FALSE(r->cut_short);
}

TEST(LossCheckTest, ItStopsAtTheFirstRetransmit) {
  ScriptedPath p;
  p.now = {5, 100000, 0};  // another connection's old retransmits do not count
  p.loss_at = 112000;
  auto r = p.check(p.now);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->trains, 12);
  EXPECT_EQ(r->segments, 12000u);
  EXPECT_EQ(r->retransmits, 1u);
  EXPECT_FALSE(r->cut_short);
}

TEST(LossCheckTest, ASlowPathIsCutShortAtItsTimeAndSaysSo) {
  ScriptedPath p;
  p.per_train = std::chrono::milliseconds(250);
  auto r = p.check({});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->trains, 12);  // 12 x 250 ms = kLossCheckTime
  EXPECT_EQ(r->segments, 12000u);
  EXPECT_TRUE(r->cut_short);
  // Trains that take no time at all are bounded by their count.
  ScriptedPath instant;
  instant.per_train = Duration::zero();
  instant.now.segments = 0;
  auto b = check_loss(
      [&] {
        ++instant.trains;
        return Status::Ok();
      },
      [&] { return instant.now; }, instant.clock, {});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->trains, kLossCheckTrains);
  EXPECT_TRUE(b->cut_short);
}

TEST(LossCheckTest, AFailedTrainEndsTheCheckWithItsError) {
  ScriptedPath p;
  p.fail_at = 3;
  auto r = p.check({});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kTimeout);
  EXPECT_EQ(p.trains, 3);
}

TEST(TuneAdviceTest, TheAdviceSaysWhatTheProbesLossCheckRuledOut) {
  PeerMeasure m;
  m.peer = "198.18.60.2@tcp";
  m.rtt_ms = 50;
  m.bandwidth = 478.0 * (1 << 20);
  m.rpc_bytes = 1 << 20;
  m.probe_short = true;
  m.probe_segments = 30012;
  Advice a = advise({m}, TuneSettings{}, TuneConfig{}, 1);
  EXPECT_NE(a.why_rpcs.find("the probe carried 30012 TCP segments and TCP retransmitted none (a "
                            "loss of 1 in 10,000 would have shown"),
            std::string::npos)
      << a.why_rpcs;
  m.probe_segments = 9400;
  a = advise({m}, TuneSettings{}, TuneConfig{}, 1);
  EXPECT_NE(a.why_rpcs.find("too few to rule out a loss of 1 in 10,000"), std::string::npos)
      << a.why_rpcs;
}

// Retransmits count as the path's loss only over seconds without a queue, nor one just
// before (a drop's retransmit comes a round trip or more later); the
// first reading and one after the totals went down are baselines.
TEST(LossCounterTest, RetransmitsWhileAQueueStoodAreNotLoss) {
  LossCounter l;
  l.add(500, 1'000'000, false);  // history before the first reading: a baseline
  EXPECT_EQ(l.segs(), 0u);
  l.add(501, 1'100'000, false);  // clean second: counted
  EXPECT_EQ(l.retrans(), 1u);
  EXPECT_EQ(l.segs(), 100'000u);
  l.add(4'501, 1'200'000, true);   // a queue overflowed: not counted
  l.add(6'501, 1'300'000, false);  // its retransmits, a second later: not counted either
  EXPECT_EQ(l.retrans(), 1u);
  EXPECT_EQ(l.segs(), 100'000u);
  l.add(6'502, 1'400'000, false);  // clean again
  EXPECT_EQ(l.retrans(), 2u);
  EXPECT_EQ(l.segs(), 200'000u);
  EXPECT_DOUBLE_EQ(l.ratio(), 1e-5);
  l.add(3, 50'000, false);  // a connection closed: its totals went; a new baseline
  EXPECT_EQ(l.retrans(), 2u);
  l.add(5, 150'000, false);
  EXPECT_EQ(l.retrans(), 4u);
  EXPECT_EQ(l.segs(), 300'000u);
}

}  // namespace
}  // namespace pfsnet
