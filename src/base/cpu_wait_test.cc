#include "base/cpu_wait.h"

#include <gtest/gtest.h>
#include <unistd.h>

namespace pfsnet {
namespace {

using namespace std::chrono_literals;

TEST(CpuWaitTest, SchedstatIsThreeCounters) {
  auto t = parse_schedstat("123456 7890 42\n");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->run_ns, 123456);
  EXPECT_EQ(t->wait_ns, 7890);
  EXPECT_EQ(t->slices, 42);
  EXPECT_FALSE(parse_schedstat(""));
  EXPECT_FALSE(parse_schedstat("1 2"));
  EXPECT_FALSE(parse_schedstat("1 x 3"));
  EXPECT_FALSE(parse_schedstat("1 -2 3"));
}

TEST(CpuWaitTest, ThisProcessHasItsThreadsCounted) {
  auto all = read_cpu_wait();
  ASSERT_FALSE(all.empty()) << "no /proc/self/task/*/schedstat";
  EXPECT_TRUE(all.count(static_cast<int>(::gettid())));
}

TEST(CpuWaitTest, TheCpuCgroupIsFoundInEitherHierarchy) {
  bool v2 = true;
  EXPECT_EQ(parse_cgroup_path("12:memory:/a\n3:cpu,cpuacct:/system.slice/pfsnetd.service\n"
                              "0::/unified\n",
                              &v2),
            "/system.slice/pfsnetd.service");
  EXPECT_FALSE(v2);
  EXPECT_EQ(parse_cgroup_path("1:cpu:/pfsnet_starve_1\n", &v2), "/pfsnet_starve_1");
  EXPECT_FALSE(v2);
  EXPECT_EQ(parse_cgroup_path("0::/user.slice/x.scope\n", &v2), "/user.slice/x.scope");
  EXPECT_TRUE(v2);
  EXPECT_EQ(parse_cgroup_path("2:cpuset:/\nbroken\n", &v2), "");
  EXPECT_FALSE(v2);

  CgroupCpu c;
  parse_cgroup_cpu_stat("nr_periods 51\nnr_throttled 49\nthrottled_time 1922124226\n", c);
  EXPECT_EQ(c.periods, 51);
  EXPECT_EQ(c.throttled, 49);
  EXPECT_EQ(c.throttled_ns, 1922124226);
  CgroupCpu d;
  parse_cgroup_cpu_stat("usage_usec 10\nnr_periods 7\nnr_throttled 2\nthrottled_usec 1500\n", d);
  EXPECT_EQ(d.periods, 7);
  EXPECT_EQ(d.throttled, 2);
  EXPECT_EQ(d.throttled_ns, 1500000);
  parse_cgroup_cpu_max("1000 100000\n", d);
  EXPECT_EQ(d.quota_us, 1000);
  EXPECT_EQ(d.period_us, 100000);
  parse_cgroup_cpu_max("max 100000\n", d);
  EXPECT_EQ(d.quota_us, -1);
  parse_cgroup_cpu_max("garbage", d);
  EXPECT_EQ(d.quota_us, -1);
}

// Feeds the judge one thread (or two) a second on a manual time line.
class Feeder {
 public:
  explicit Feeder(CpuStarvationOptions o = {}) : j(o) { j.sample(t, threads); }
  // One second in which the threads waited `wait_ms` in all over `slices` timeslices.
  CpuStarvation::Change second(double wait_ms, int64_t slices) {
    t += 1s;
    threads[1].wait_ns += static_cast<int64_t>(wait_ms * 1e6);
    threads[1].slices += slices;
    return j.sample(t, threads);
  }
  CpuStarvation j;
  TimePoint t{1000s};
  std::map<int, ThreadCpu> threads{{1, {}}};
};

TEST(CpuWaitTest, ABusyHostIsNotStarvation) {
  Feeder f;
  // The quiet cluster's busiest daemon (91 ms a second, 0.11 ms a slice), and a flood of
  // short waits (600 ms over 6000 slices): never starved.
  for (int i = 0; i < 30; ++i) {
    EXPECT_EQ(f.second(91, 830), CpuStarvation::Change::kNone);
    EXPECT_EQ(f.second(600, 6000), CpuStarvation::Change::kNone);
  }
  EXPECT_FALSE(f.j.starved());
  // Long waits, but few of them in all (a thread that sleeps most of the time): 50 ms a
  // second is no starvation.
  for (int i = 0; i < 10; ++i) f.second(50, 5);
  EXPECT_FALSE(f.j.starved());
}

TEST(CpuWaitTest, AQuotaOfOnePercentIsStarvationFromItsFirstSecond) {
  Feeder f;
  f.second(11, 240);
  // 1 ms per 100 ms: 350-680 ms of wait a second, 1.9-3.7 ms a slice.
  EXPECT_EQ(f.second(576, 179), CpuStarvation::Change::kNone);
  EXPECT_EQ(f.second(350, 183), CpuStarvation::Change::kNone);
  TimePoint first_bad = f.t - 2s;
  EXPECT_EQ(f.second(683, 184), CpuStarvation::Change::kStarted);
  EXPECT_TRUE(f.j.starved());
  EXPECT_EQ(f.j.since(), first_bad);
  EXPECT_NEAR(f.j.last().wait_ms_per_s, 683, 0.01);
  EXPECT_NEAR(f.j.last().wait_per_slice_ms, 683.0 / 184, 0.01);
  EXPECT_NEAR(f.j.mean().wait_ms_per_s, (11.0 + 576 + 350 + 683) / 4, 0.01);
  // Between the thresholds (200 ms, 0.5 ms a slice) it stays starved.
  for (int i = 0; i < 10; ++i) EXPECT_EQ(f.second(200, 400), CpuStarvation::Change::kNone);
  EXPECT_TRUE(f.j.starved());
  // Five fed seconds in a row end it; one bad second among them starts the count again.
  for (int i = 0; i < 4; ++i) EXPECT_EQ(f.second(11, 240), CpuStarvation::Change::kNone);
  EXPECT_EQ(f.second(500, 150), CpuStarvation::Change::kNone);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(f.second(11, 240), CpuStarvation::Change::kNone);
  EXPECT_EQ(f.second(11, 240), CpuStarvation::Change::kEnded);
  EXPECT_FALSE(f.j.starved());
  EXPECT_EQ(f.j.lasted(), f.t - first_bad);
}

TEST(CpuWaitTest, AFedSecondBreaksTheRunThatWouldStartIt) {
  Feeder f;
  for (int i = 0; i < 10; ++i) {
    f.second(900, 100);
    f.second(900, 100);
    EXPECT_EQ(f.second(10, 100), CpuStarvation::Change::kNone);
  }
  EXPECT_FALSE(f.j.starved());
}

TEST(CpuWaitTest, ThreadsThatComeAndGoCountOnlyWhileBothSamplesHaveThem) {
  Feeder f;
  // A thread seen for the first time with a large total is not a second's wait.
  f.t += 1s;
  f.threads[2] = {0, 50'000'000'000, 10};
  EXPECT_EQ(f.j.sample(f.t, f.threads), CpuStarvation::Change::kNone);
  EXPECT_NEAR(f.j.last().wait_ms_per_s, 0, 0.01);
  // Its counters going back (a thread id reused) are no negative wait either.
  f.t += 1s;
  f.threads[2] = {0, 10, 1};
  f.threads[1].wait_ns += 300'000'000;
  f.threads[1].slices += 100;
  f.j.sample(f.t, f.threads);
  EXPECT_NEAR(f.j.last().wait_ms_per_s, 300, 0.01);
  // A thread that waited a whole second without being run once: one slice.
  f.second(1000, 0);
  EXPECT_NEAR(f.j.last().wait_per_slice_ms, 1000, 0.01);
  // The figures are per second of the time line, however late the sample.
  f.t += 2s;
  f.threads[1].wait_ns += 800'000'000;
  f.threads[1].slices += 100;
  f.j.sample(f.t, f.threads);
  EXPECT_NEAR(f.j.last().wait_ms_per_s, 400, 0.01);
}

TEST(CpuWaitTest, AZeroSliceThresholdTurnsTheRuleOff) {
  CpuStarvationOptions o;
  o.wait_per_slice = Duration::zero();
  Feeder f(o);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(f.second(900, 100), CpuStarvation::Change::kNone);
  EXPECT_FALSE(f.j.starved());
}

}  // namespace
}  // namespace pfsnet
