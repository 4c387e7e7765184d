// RpcStats with a manual clock: exact values for every rule of the GPFS specification.
#include "stats/rpc_stats.h"

#include <gtest/gtest.h>

#include <thread>

namespace pfsnet {
namespace {

using namespace std::chrono_literals;

const Nid kNodeA = Nid::ipv4(0x7F000002u), kNodeB = Nid::ipv4(0x7F000003u);
constexpr int64_t kStart = 1'700'000'000;  // ManualClock's wall time at creation

RawStatRecord rec(const Nid& node, int64_t latency_us, uint32_t sent = 100,
                  uint32_t received = 100) {
  RawStatRecord r;
  r.node = node;
  r.channel_wait_ns = 1000;
  r.send_ns = 2000;
  r.receive_ns = 3000;
  r.latency_ns = latency_us * 1000;
  r.bytes_sent = sent;
  r.bytes_received = received;
  return r;
}

const StatView& stat_of(const StatsReport& rep, const Nid& node, NodeStat s) {
  for (auto& n : rep.nodes)
    if (n.node == node)
      for (auto& [k, v] : n.stats)
        if (k == s) return v;
  static StatView none;
  ADD_FAILURE() << "no statistic " << node_stat_name(s);
  return none;
}

StatsQuery all() {
  StatsQuery q;
  q.what = StatsQuery::What::kAll;
  return q;
}

class RpcStatsTest : public ::testing::Test {
 protected:
  ManualClock clock_{kStart};
  StatsConfig cfg_;
};

TEST_F(RpcStatsTest, OneRpc) {
  RpcStats s(cfg_, clock_, false);
  s.record(rec(kNodeA, 250));
  clock_.advance(1s);
  EXPECT_EQ(s.tick(), 1u);
  auto rep = s.query(all());
  ASSERT_EQ(rep.nodes.size(), 1u);
  // TCP only: channel wait, send TCP, receive TCP, latency TCP; no verbs statistics.
  EXPECT_EQ(rep.nodes[0].stats.size(), 4u);
  const StatView& lat = stat_of(rep, kNodeA, NodeStat::kLatencyTcp);
  ASSERT_EQ(lat.seconds.size(), 1u);
  EXPECT_EQ(lat.seconds[0].start, kStart);
  EXPECT_EQ(lat.seconds[0].count, 1);
  EXPECT_DOUBLE_EQ(lat.seconds[0].avg_ms, 0.25);
  EXPECT_DOUBLE_EQ(lat.seconds[0].min_ms, 0.25);
  EXPECT_DOUBLE_EQ(lat.seconds[0].max_ms, 0.25);
  EXPECT_TRUE(lat.minutes.empty());
  EXPECT_DOUBLE_EQ(stat_of(rep, kNodeA, NodeStat::kChannelWait).seconds[0].avg_ms, 0.001);
  EXPECT_DOUBLE_EQ(stat_of(rep, kNodeA, NodeStat::kSendTcp).seconds[0].avg_ms, 0.002);
  EXPECT_DOUBLE_EQ(stat_of(rep, kNodeA, NodeStat::kReceiveTcp).seconds[0].avg_ms, 0.003);
  // Size 200 falls in 129-256.
  ASSERT_EQ(rep.sizes.size(), 1u);
  EXPECT_EQ(rep.sizes[0].low, 129u);
  EXPECT_EQ(rep.sizes[0].high, 256u);
  EXPECT_EQ(rep.sizes[0].latency.seconds[0].count, 1);
}

TEST_F(RpcStatsTest, ManyRpcsAcrossASecondBoundaryAndIdleSeconds) {
  RpcStats s(cfg_, clock_, false);
  for (int us : {100, 300, 200}) s.record(rec(kNodeA, us));
  clock_.advance(1s);
  s.tick();
  for (int us : {1000, 3000}) s.record(rec(kNodeA, us));
  clock_.advance(3s);  // one busy second, then two idle ones
  EXPECT_EQ(s.tick(), 3u);
  auto rep_lat = s.query(all());
  const StatView& lat = stat_of(rep_lat, kNodeA, NodeStat::kLatencyTcp);
  ASSERT_EQ(lat.seconds.size(), 4u);
  EXPECT_EQ(lat.seconds[0].count, 3);
  EXPECT_DOUBLE_EQ(lat.seconds[0].avg_ms, 0.2);
  EXPECT_DOUBLE_EQ(lat.seconds[0].min_ms, 0.1);
  EXPECT_DOUBLE_EQ(lat.seconds[0].max_ms, 0.3);
  EXPECT_EQ(lat.seconds[1].count, 2);
  EXPECT_DOUBLE_EQ(lat.seconds[1].avg_ms, 2.0);
  EXPECT_EQ(lat.seconds[1].start, kStart + 1);
  EXPECT_EQ(lat.seconds[2].count, 0);
  EXPECT_EQ(lat.seconds[3].count, 0);
  EXPECT_EQ(lat.seconds[3].start, kStart + 3);
}

TEST_F(RpcStatsTest, SixtyFirstSecondRollsIntoTheFirstMinute) {
  RpcStats s(cfg_, clock_, false);
  for (int sec = 0; sec < 61; ++sec) {
    s.record(rec(kNodeA, 100 + sec));  // 100..160 us
    s.process_second();
  }
  auto rep_lat = s.query(all());
  const StatView& lat = stat_of(rep_lat, kNodeA, NodeStat::kLatencyTcp);
  ASSERT_EQ(lat.seconds.size(), 60u);  // the ring holds 60
  EXPECT_EQ(lat.seconds.front().start, kStart + 1);
  EXPECT_EQ(lat.seconds.back().start, kStart + 60);
  ASSERT_EQ(lat.minutes.size(), 1u);
  EXPECT_EQ(lat.minutes[0].start, kStart);
  EXPECT_EQ(lat.minutes[0].count, 60);
  EXPECT_DOUBLE_EQ(lat.minutes[0].min_ms, 0.100);
  EXPECT_DOUBLE_EQ(lat.minutes[0].max_ms, 0.159);
  EXPECT_NEAR(lat.minutes[0].avg_ms, 0.1295, 1e-12);
  // Percentiles of that minute, within the histogram's 1/16.
  EXPECT_NEAR(lat.p50_ms, 0.129, 0.129 / 16);
  EXPECT_NEAR(lat.p99_ms, 0.159, 0.159 / 16);
}

TEST_F(RpcStatsTest, SixtyMinutesMakeAnHour) {
  RpcStats s(cfg_, clock_, false);
  for (int sec = 0; sec < 3600; ++sec) {
    if (sec % 60 == 0) s.record(rec(kNodeA, 1000 + sec / 60));  // one per minute
    s.process_second();
  }
  auto rep_lat = s.query(all());
  const StatView& lat = stat_of(rep_lat, kNodeA, NodeStat::kLatencyTcp);
  ASSERT_EQ(lat.minutes.size(), 60u);
  for (auto& m : lat.minutes) EXPECT_EQ(m.count, 1);
  ASSERT_EQ(lat.hours.size(), 1u);
  EXPECT_EQ(lat.hours[0].start, kStart);
  EXPECT_EQ(lat.hours[0].count, 60);
  EXPECT_DOUBLE_EQ(lat.hours[0].min_ms, 1.000);
  EXPECT_DOUBLE_EQ(lat.hours[0].max_ms, 1.059);
  EXPECT_TRUE(lat.days.empty());
  // The hour's percentiles come from its own histogram, not from its minutes' ones.
  EXPECT_NEAR(lat.hours[0].p50_ms, 1.029, 1.029 / 16);
  EXPECT_NEAR(lat.hours[0].p99_ms, 1.058, 1.058 / 16);
}

// Every interval of every ring carries its own p50 and p99: a minute of mostly fast RPCs
// with a slow tail has its p99 in the tail, an hour holding it and fast minutes has both.
TEST_F(RpcStatsTest, EveryIntervalHasItsPercentilesRolledUpFromItsHistogram) {
  RpcStats s(cfg_, clock_, false);
  for (int sec = 0; sec < 3600; ++sec) {
    for (int i = 0; i < 10; ++i) s.record(rec(kNodeA, 100));
    if (sec < 60 && sec % 6 == 0) s.record(rec(kNodeA, 50'000));  // 10 slow of 610
    s.process_second();
  }
  s.process_second();  // an idle second
  StatsQuery q = all();
  q.totals = true;
  auto rep = s.query(q);
  const StatView& lat = stat_of(rep, kNodeA, NodeStat::kLatencyTcp);
  ASSERT_EQ(lat.seconds.size(), 60u);
  for (size_t k = 0; k + 1 < lat.seconds.size(); ++k) {
    EXPECT_NEAR(lat.seconds[k].p50_ms, 0.100, 0.100 / 16);
    EXPECT_NEAR(lat.seconds[k].p99_ms, 0.100, 0.100 / 16);
  }
  // An idle interval has none.
  EXPECT_EQ(lat.seconds.back().count, 0);
  EXPECT_EQ(lat.seconds.back().p50_ms, 0);
  ASSERT_EQ(lat.minutes.size(), 60u);
  // The first minute: 10 of 610 at 50 ms, so its p99 is in the tail; the later ones not.
  EXPECT_NEAR(lat.minutes[0].p50_ms, 0.100, 0.100 / 16);
  EXPECT_NEAR(lat.minutes[0].p99_ms, 50.0, 50.0 / 16);
  EXPECT_NEAR(lat.minutes[1].p99_ms, 0.100, 0.100 / 16);
  EXPECT_DOUBLE_EQ(lat.p99_ms, lat.minutes.back().p99_ms);
  // The hour: 10 of 36,010 slow: below its p99.
  ASSERT_EQ(lat.hours.size(), 1u);
  EXPECT_NEAR(lat.hours[0].p99_ms, 0.100, 0.100 / 16);
  EXPECT_EQ(lat.hours[0].count, 36010);
  // Totals: every value so far, bucketed; every power of two of ns is a bucket bound.
  EXPECT_EQ(lat.total.count, 36010);
  EXPECT_NEAR(lat.total.sum_ms, 36000 * 0.1 + 10 * 50.0, 1e-6);
  uint64_t n = 0;
  int64_t prev = 0;
  for (auto [upper, c] : lat.total.buckets) {
    EXPECT_GT(upper, prev);
    prev = upper;
    n += c;
  }
  EXPECT_EQ(n, 36010u);
  ASSERT_EQ(lat.total.buckets.size(), 2u);
  EXPECT_EQ(lat.total.buckets[0].second, 36000u);
  EXPECT_GT(lat.total.buckets[0].first, 100'000);
  EXPECT_GT(lat.total.buckets[1].first, 50'000'000);
  // Without asking, no totals.
  auto plain = s.query(all());
  EXPECT_TRUE(stat_of(plain, kNodeA, NodeStat::kLatencyTcp).total.buckets.empty());
}

// A percentile comes from its bucket's middle, but never beyond what the interval saw: one
// RPC of 8.737 ms has p50 = p99 = 8.737 ms, not the bucket's 8.9 ("p99 8.913 ms, max
// 8.737 ms" on the dashboard), and a fast pair's percentiles stay within their min and max.
TEST_F(RpcStatsTest, APercentileNeverLiesOutsideTheIntervalsMinAndMax) {
  RpcStats s(cfg_, clock_, false);
  s.record(rec(kNodeA, 8737));
  s.process_second();
  s.record(rec(kNodeA, 1030));
  s.record(rec(kNodeA, 1031));
  s.process_second();
  for (int sec = 0; sec < 58; ++sec) s.process_second();  // the minute closes
  auto rep = s.query(all());
  const StatView& lat = stat_of(rep, kNodeA, NodeStat::kLatencyTcp);
  ASSERT_GE(lat.seconds.size(), 2u);
  const IntervalView& one = lat.seconds[0];
  ASSERT_EQ(one.count, 1);
  EXPECT_DOUBLE_EQ(one.p50_ms, 8.737);
  EXPECT_DOUBLE_EQ(one.p99_ms, 8.737);
  const IntervalView& two = lat.seconds[1];
  ASSERT_EQ(two.count, 2);
  for (double p : {two.p50_ms, two.p99_ms}) {
    EXPECT_GE(p, two.min_ms);
    EXPECT_LE(p, two.max_ms);
  }
  ASSERT_EQ(lat.minutes.size(), 1u);
  EXPECT_LE(lat.p99_ms, lat.minutes[0].max_ms);
  EXPECT_GE(lat.p50_ms, lat.minutes[0].min_ms);
}

TEST_F(RpcStatsTest, NonDefaultRingSizesStillRollFullMinutes) {
  cfg_.rpcPerfNumberSecondIntervals = 10;
  cfg_.rpcPerfNumberMinuteIntervals = 2;
  RpcStats s(cfg_, clock_, false);
  for (int sec = 0; sec < 180; ++sec) {
    s.record(rec(kNodeA, 10));
    s.process_second();
  }
  auto rep_lat = s.query(all());
  const StatView& lat = stat_of(rep_lat, kNodeA, NodeStat::kLatencyTcp);
  EXPECT_EQ(lat.seconds.size(), 10u);
  ASSERT_EQ(lat.minutes.size(), 2u);  // the third minute pushed out the first
  EXPECT_EQ(lat.minutes[0].start, kStart + 60);
  EXPECT_EQ(lat.minutes[0].count, 60);  // a minute is 60 seconds whatever the ring sizes
  EXPECT_EQ(lat.minutes[1].count, 60);
}

TEST_F(RpcStatsTest, SixteenTimesRule) {
  EXPECT_EQ(RpcStats::rpc_size(1500, 100), 1600u);  // 15x: both
  EXPECT_EQ(RpcStats::rpc_size(1600, 100), 1700u);  // 16x: not more than 16x, both
  EXPECT_EQ(RpcStats::rpc_size(1700, 100), 1700u);  // 17x: the larger alone
  EXPECT_EQ(RpcStats::rpc_size(100, 1700), 1700u);
  EXPECT_EQ(RpcStats::rpc_size(0, 0), 0u);
  EXPECT_EQ(RpcStats::rpc_size(64, 0), 64u);
}

TEST_F(RpcStatsTest, SizeRangeEdges) {
  int64_t mb = 1 << 20;
  EXPECT_EQ(RpcStats::num_size_ranges(mb), 16u);
  EXPECT_EQ(RpcStats::size_range(0, mb), 0u);
  EXPECT_EQ(RpcStats::size_range(64, mb), 0u);
  EXPECT_EQ(RpcStats::size_range(65, mb), 1u);
  EXPECT_EQ(RpcStats::size_range(128, mb), 1u);
  EXPECT_EQ(RpcStats::size_range(129, mb), 2u);
  EXPECT_EQ(RpcStats::size_range(2 * mb, mb), 15u);
  EXPECT_EQ(RpcStats::size_range(2 * mb + 1, mb), 15u);  // above: the last range
  EXPECT_EQ(RpcStats::size_range(uint64_t(1) << 40, mb), 15u);
  EXPECT_EQ(RpcStats::range_low(15), uint64_t(mb) + 1);
  EXPECT_EQ(RpcStats::range_high(15), 2u * mb);

  RpcStats s(cfg_, clock_, false);
  s.record(rec(kNodeA, 1, 64, 0));
  s.record(rec(kNodeA, 2, 65, 0));
  s.record(rec(kNodeA, 3, 1 << 21, 0));
  s.record(rec(kNodeA, 4, (1 << 21) + 1, 0));
  s.process_second();
  StatsQuery q;
  q.what = StatsQuery::What::kSize;
  auto rep = s.query(q);
  EXPECT_TRUE(rep.nodes.empty());
  ASSERT_EQ(rep.sizes.size(), 3u);
  EXPECT_EQ(rep.sizes[0].high, 64u);
  EXPECT_EQ(rep.sizes[1].low, 65u);
  EXPECT_EQ(rep.sizes[2].high, 2u * mb);
  EXPECT_EQ(rep.sizes[2].latency.seconds[0].count, 2);
}

TEST_F(RpcStatsTest, VerbsAndMixedOnlyWithAVerbsNi) {
  for (bool verbs : {false, true}) {
    RpcStats s(cfg_, clock_, verbs);
    RawStatRecord v = rec(kNodeA, 10), m = rec(kNodeA, 20), t = rec(kNodeA, 30);
    v.sent_verbs = v.received_verbs = true;
    m.sent_verbs = true;
    s.record(v);
    s.record(m);
    s.record(t);
    s.process_second();
    auto rep = s.query(all());
    EXPECT_EQ(stat_of(rep, kNodeA, NodeStat::kLatencyTcp).seconds[0].count, 1);
    EXPECT_EQ(stat_of(rep, kNodeA, NodeStat::kReceiveTcp).seconds[0].count, 2);  // t and m
    EXPECT_EQ(stat_of(rep, kNodeA, NodeStat::kSendTcp).seconds[0].count, 1);
    EXPECT_EQ(stat_of(rep, kNodeA, NodeStat::kChannelWait).seconds[0].count, 3);
    if (verbs) {
      EXPECT_EQ(rep.nodes[0].stats.size(), 7u);
      EXPECT_DOUBLE_EQ(stat_of(rep, kNodeA, NodeStat::kLatencyVerbs).seconds[0].avg_ms, 0.010);
      EXPECT_DOUBLE_EQ(stat_of(rep, kNodeA, NodeStat::kLatencyMixed).seconds[0].avg_ms, 0.020);
      EXPECT_EQ(stat_of(rep, kNodeA, NodeStat::kSendVerbs).seconds[0].count, 2);
    } else {
      EXPECT_EQ(rep.nodes[0].stats.size(), 4u);
    }
  }
}

TEST_F(RpcStatsTest, ExecutionTimePerMessageType) {
  RpcStats s(cfg_, clock_, false);
  s.record_exec({5000, 1});
  s.record_exec({7000, 1});
  s.record_exec({9000, 42});
  s.process_second();
  StatsQuery q;
  q.what = StatsQuery::What::kMessage;
  auto rep = s.query(q);
  ASSERT_EQ(rep.messages.size(), 2u);
  EXPECT_EQ(rep.messages[0].type, 1u);
  EXPECT_EQ(rep.messages[0].execution.seconds[0].count, 2);
  EXPECT_DOUBLE_EQ(rep.messages[0].execution.seconds[0].avg_ms, 0.006);
  EXPECT_EQ(rep.messages[1].type, 42u);
  EXPECT_DOUBLE_EQ(rep.messages[1].execution.seconds[0].max_ms, 0.009);
}

TEST_F(RpcStatsTest, FullRawBufferCountsDrops) {
  cfg_.rpcPerfRawStatBufferSize = 5;
  cfg_.rpcPerfRawExecBufferSize = 3;
  RpcStats s(cfg_, clock_, false);
  for (int i = 0; i < 8; ++i) s.record(rec(kNodeA, 1));
  for (int i = 0; i < 4; ++i) s.record_exec({1, 1});
  EXPECT_EQ(s.dropped_stat(), 3u);
  EXPECT_EQ(s.dropped_exec(), 1u);
  s.process_second();
  auto rep = s.query(all());
  EXPECT_EQ(rep.dropped_stat, 3u);
  EXPECT_EQ(rep.dropped_exec, 1u);
  EXPECT_EQ(stat_of(rep, kNodeA, NodeStat::kLatencyTcp).seconds[0].count, 5);
  // Drained: room again.
  for (int i = 0; i < 5; ++i) s.record(rec(kNodeA, 1));
  EXPECT_EQ(s.dropped_stat(), 3u);
}

TEST_F(RpcStatsTest, ConcurrentProducersLoseNothingBelowTheLimit) {
  cfg_.rpcPerfRawStatBufferSize = 100000;
  RpcStats s(cfg_, clock_, false);
  std::vector<std::thread> t;
  for (int i = 0; i < 4; ++i)
    t.emplace_back([&] {
      for (int k = 0; k < 20000; ++k) s.record(rec(kNodeB, 1));
    });
  for (auto& x : t) x.join();
  s.process_second();
  auto rep = s.query(all());
  EXPECT_EQ(stat_of(rep, kNodeB, NodeStat::kLatencyTcp).seconds[0].count, 80000);
  EXPECT_EQ(s.dropped_stat(), 0u);
}

TEST_F(RpcStatsTest, RunTimeResizeKeepsTheNewest) {
  RpcStats s(cfg_, clock_, false);
  for (int sec = 0; sec < 30; ++sec) {
    s.record(rec(kNodeA, sec + 1));
    s.process_second();
  }
  StatsConfig c = cfg_;
  c.rpcPerfNumberSecondIntervals = 10;
  c.rpcPerfRawStatBufferSize = 2;
  c.maxBlockSize = 4 << 20;
  s.record(rec(kNodeA, 99));  // in the old buffer: still processed
  s.set_config(c);
  auto rep_lat = s.query(all());
  const StatView& lat = stat_of(rep_lat, kNodeA, NodeStat::kLatencyTcp);
  ASSERT_EQ(lat.seconds.size(), 10u);
  EXPECT_DOUBLE_EQ(lat.seconds.front().max_ms, 0.021);  // seconds 21..30 kept
  EXPECT_DOUBLE_EQ(lat.seconds.back().max_ms, 0.030);
  for (int i = 0; i < 3; ++i) s.record(rec(kNodeA, 1));  // new buffer holds 2
  EXPECT_EQ(s.dropped_stat(), 1u);
  s.process_second();
  auto rep_after = s.query(all());
  const StatView& after = stat_of(rep_after, kNodeA, NodeStat::kLatencyTcp);
  EXPECT_EQ(after.seconds.back().count, 3);  // 99 from the old buffer + 2 new
  EXPECT_EQ(RpcStats::num_size_ranges(c.maxBlockSize), 18u);
  s.record(rec(kNodeA, 1, 8 << 20, 0));
  s.process_second();
  StatsQuery q;
  q.what = StatsQuery::What::kSize;
  EXPECT_EQ(s.query(q).sizes.back().high, 8u << 20);
}

TEST_F(RpcStatsTest, QuerySelectsNodeGranularityAndCount) {
  RpcStats s(cfg_, clock_, false);
  for (int sec = 0; sec < 5; ++sec) {
    s.record(rec(kNodeA, 1));
    s.record(rec(kNodeB, 2));
    s.process_second();
  }
  StatsQuery q;
  q.node = kNodeB;
  q.granularity = Granularity::kSecond;
  q.last = 2;
  auto rep = s.query(q);
  ASSERT_EQ(rep.nodes.size(), 1u);
  EXPECT_EQ(rep.nodes[0].node, kNodeB);
  const StatView& v = stat_of(rep, kNodeB, NodeStat::kLatencyTcp);
  ASSERT_EQ(v.seconds.size(), 2u);
  EXPECT_EQ(v.seconds[1].start, kStart + 4);
  EXPECT_TRUE(v.minutes.empty());
}

TEST_F(RpcStatsTest, GoneNodesAreFreedAfterTheDayRing) {
  cfg_.rpcPerfNumberDayIntervals = 1;
  RpcStats s(cfg_, clock_, false);
  s.record(rec(kNodeA, 1));
  s.process_second();
  EXPECT_EQ(s.node_count(), 1u);
  // A new peer costs its four statistics' headers and one interval each, not full rings.
  size_t fresh = s.node_bytes(kNodeA);
  EXPECT_LT(fresh, 4u * 145 * sizeof(Interval));
  clock_.advance(std::chrono::hours(24));
  s.tick();
  EXPECT_EQ(s.node_count(), 1u);  // exactly a day: still covered
  // A day later every ring (60 s + 60 min + 24 h + 1 day) is full.
  size_t full = s.node_bytes(kNodeA);
  EXPECT_GT(full, 4u * 145 * sizeof(Interval));
  EXPECT_LT(full, 64u * 1024);
  clock_.advance(1s);
  s.tick();
  EXPECT_EQ(s.node_count(), 0u);
}

TEST_F(RpcStatsTest, SmallRpcsAreSummedPerPathUntilTaken) {
  RpcStats s(cfg_, clock_, false);
  auto on = [](RawStatRecord r, uint32_t local, const Nid& peer, int64_t exec_us) {
    r.local_ni = Nid::ipv4(local);
    r.peer_ni = peer;
    r.exec_ns = exec_us * 1000;
    return r;
  };
  s.record(on(rec(kNodeA, 200), 1, kNodeA, 10));
  s.record(on(rec(kNodeA, 400), 1, kNodeA, 30));
  s.record(on(rec(kNodeA, 900), 2, kNodeA, 0));
  s.record(on(rec(kNodeA, 5000, 65536, 100), 1, kNodeA, 0));  // bulk: transfer time, left out
  s.record(on(rec(kNodeA, 5000, 100, 4097), 1, kNodeA, 0));   // just above the bound each way
  s.record(rec(kNodeB, 100));                                 // no path known: left out
  EXPECT_TRUE(s.take_path_latency().empty());  // not processed before the second closes
  clock_.advance(1s);
  s.tick();
  auto v = s.take_path_latency();
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].local_ni, Nid::ipv4(1));
  EXPECT_EQ(v[0].peer_ni, kNodeA);
  EXPECT_EQ(v[0].count, 2u);
  EXPECT_DOUBLE_EQ(v[0].latency_ms, 0.6);
  EXPECT_DOUBLE_EQ(v[0].exec_ms, 0.04);
  EXPECT_EQ(v[1].local_ni, Nid::ipv4(2));
  EXPECT_EQ(v[1].count, 1u);
  EXPECT_DOUBLE_EQ(v[1].latency_ms, 0.9);
  EXPECT_TRUE(s.take_path_latency().empty());  // taken
}

TEST(LogHistogramTest, BucketsAndQuantiles) {
  for (int64_t v : {0LL, 1LL, 7LL, 8LL, 15LL, 16LL, 17LL, 1000LL, 123456789LL, (1LL << 39) + 5}) {
    int i = LogHistogram::index(v);
    EXPECT_LE(LogHistogram::lower(i), v) << v;
    EXPECT_GT(LogHistogram::lower(i + 1), v) << v;
  }
  LogHistogram h;
  for (int i = 1; i <= 1000; ++i) h.add(i * 1000);
  EXPECT_NEAR(double(h.quantile(0.5)), 500000.0, 500000.0 / 16);
  EXPECT_NEAR(double(h.quantile(0.99)), 990000.0, 990000.0 / 16);
  EXPECT_EQ(LogHistogram().quantile(0.5), 0);
}

// The sparse form answers what the dense one does, merges by bucket, and costs its buckets.
TEST(SparseHistogramTest, AgreesWithTheDenseFormAndMerges) {
  LogHistogram dense;
  SparseHistogram a, b;
  for (int i = 1; i <= 1000; ++i) {
    int64_t v = (i * 7919) % 1000 * 997 + 3;  // spread over 3 ns .. 1 ms, in no order
    dense.add(v);
    (i % 3 ? a : b).add(v);
  }
  EXPECT_LT(a.count(), 1000u);
  a.merge(b);
  EXPECT_EQ(a.count(), 1000u);
  for (double q : {0.0, 0.01, 0.5, 0.9, 0.99, 1.0})
    EXPECT_EQ(a.quantile(q), dense.quantile(q)) << q;
  uint64_t n = 0;
  int last = -1, buckets = 0;
  a.for_each([&](int i, uint64_t c) {
    EXPECT_GT(i, last);
    last = i;
    n += c;
    ++buckets;
  });
  EXPECT_EQ(n, 1000u);
  EXPECT_LE(a.bytes(), sizeof(SparseHistogram) + 2 * 8 * size_t(buckets));
  a.clear();
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(a.quantile_bucket(0.5), SparseHistogram::kNone);
  a.add_bucket(5, 3);
  a.add_bucket(5, 4);
  EXPECT_EQ(a.count(), 7u);
  EXPECT_EQ(a.quantile_bucket(1.0), 5);
  // Nearest rank: the p99 of two values is the larger, the p50 the smaller.
  SparseHistogram two;
  two.add(1000);
  two.add(5000);
  EXPECT_EQ(two.quantile_bucket(0.99), LogHistogram::index(5000));
  EXPECT_EQ(two.quantile_bucket(0.50), LogHistogram::index(1000));
  EXPECT_EQ(two.quantile_bucket(0.0), LogHistogram::index(1000));
}

}  // namespace
}  // namespace pfsnet

namespace pfsnet {
namespace {

Interval iv(int64_t v) {
  Interval i;
  i.add(v);
  return i;
}

TEST(IntervalRingTest, GrowsToItsCapacityThenWrapsAndResizesKeepingTheNewest) {
  IntervalRing r(3);
  EXPECT_EQ(r.capacity(), 3u);
  EXPECT_EQ(r.size(), 0u);
  size_t empty = r.bytes();
  r.push(iv(1), 100);
  EXPECT_EQ(r.size(), 1u);
  EXPECT_EQ(r.newest(0).sum, 1);
  EXPECT_GT(r.bytes(), empty);
  for (int64_t v = 2; v <= 5; ++v) r.push(iv(v), 100 + v);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r.newest(0).sum, 5);
  EXPECT_EQ(r.newest(1).sum, 4);
  EXPECT_EQ(r.newest(2).sum, 3);
  EXPECT_EQ(r.newest_start(), 105);
  EXPECT_LE(r.bytes(), sizeof(IntervalRing) + 4 * sizeof(Interval));
  r.resize(5);  // grown: the three kept, room for two more
  ASSERT_EQ(r.size(), 3u);
  r.push(iv(6), 106);
  r.push(iv(7), 107);
  r.push(iv(8), 108);
  ASSERT_EQ(r.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(r.newest(i).sum, int64_t(8 - i));
  r.resize(2);  // shrunk: the two newest
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r.newest(0).sum, 8);
  EXPECT_EQ(r.newest(1).sum, 7);
  r.push(iv(9), 109);
  EXPECT_EQ(r.newest(0).sum, 9);
  EXPECT_EQ(r.newest(1).sum, 8);
}

}  // namespace
}  // namespace pfsnet
