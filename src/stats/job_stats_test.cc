// Job statistics (stats/job_stats.h) on the manual clock: exact per job and per client, the
// top K plus `other`, idle entries leaving, and the bound on memory with 10,000 job ids.
#include "stats/job_stats.h"

#include <gtest/gtest.h>

#include <chrono>

namespace pfsnet {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kWrite = 20, kRead = 21;

Nid nid(const char* s) { return *Nid::parse(s); }

const JobEntry* find(const JobStats::View& v, const std::string& key) {
  for (const JobEntry& e : v.top)
    if (e.key == key) return &e;
  return nullptr;
}

TEST(JobStatsTest, TwoJobsOnOneClientAndOneOnAnotherAreCountedExactly) {
  ManualClock clock;
  JobStats s(clock, JobStatsOptions{});
  const Nid c1 = nid("198.18.0.1@tcp"), c2 = nid("198.18.0.2@tcp");
  // c1: job A writes 10 x 1 MiB (2 ms each, 1 ms queued), job B reads 5 x 64 KiB; c2: job C
  // writes 3 x 4 KiB; and an RPC with no job id.
  for (int i = 0; i < 10; ++i) s.record("A", c1, kWrite, 1 << 20, 16, 2ms, 1ms);
  clock.advance(1s);
  for (int i = 0; i < 5; ++i) s.record("B", c1, kRead, 32, 64 << 10, 500us, 0ns);
  for (int i = 0; i < 3; ++i) s.record("C", c2, kWrite, 4096, 16, 100us, 0ns);
  s.record("", c2, kRead, 10, 10, 10us, 0ns);

  JobStats::View jobs = s.top_jobs(10, JobStats::By::kBytes);
  ASSERT_EQ(jobs.top.size(), 4u);
  EXPECT_EQ(jobs.top[0].key, "A");  // largest first
  const JobEntry *a = find(jobs, "A"), *b = find(jobs, "B"), *c = find(jobs, "C");
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(a->rpcs, 10u);
  EXPECT_EQ(a->bytes_in, 10u << 20);
  EXPECT_EQ(a->bytes_out, 160u);
  EXPECT_EQ(a->exec_ns, 20'000'000);
  EXPECT_EQ(a->queue_ns, 10'000'000);
  EXPECT_EQ(a->types.size(), 1u);
  EXPECT_EQ(a->type(kWrite)->rpcs, 10u);
  // p50 / p99 within the histogram's 1/16.
  EXPECT_NEAR(double(a->exec.quantile(0.5)), 2e6, 2e6 / 16);
  EXPECT_NEAR(double(a->exec.quantile(0.99)), 2e6, 2e6 / 16);
  EXPECT_EQ(b->rpcs, 5u);
  EXPECT_EQ(b->bytes_out, 5u * (64 << 10));
  EXPECT_EQ(b->type(kRead)->bytes_out, 5u * (64 << 10));
  EXPECT_EQ(b->first, clock.now());
  EXPECT_EQ(c->rpcs, 3u);
  EXPECT_EQ(c->bytes_in, 3u * 4096);
  EXPECT_EQ(find(jobs, "")->rpcs, 1u);
  EXPECT_EQ(jobs.other.rpcs, 0u);

  JobStats::View clients = s.top_clients(10, JobStats::By::kRpcs);
  ASSERT_EQ(clients.top.size(), 2u);
  EXPECT_EQ(clients.top[0].key, "198.18.0.1@tcp");
  EXPECT_EQ(clients.top[0].rpcs, 15u);
  EXPECT_EQ(clients.top[0].types.size(), 2u);
  EXPECT_EQ(clients.top[1].key, "198.18.0.2@tcp");
  EXPECT_EQ(clients.top[1].rpcs, 4u);
  EXPECT_EQ(clients.top[1].bytes_in, 3u * 4096 + 10);

  // The top 1 by RPCs, the rest in `other`, whose sums are exact.
  JobStats::View one = s.top_jobs(1, JobStats::By::kRpcs);
  ASSERT_EQ(one.top.size(), 1u);
  EXPECT_EQ(one.top[0].key, "A");
  EXPECT_EQ(one.other.key, "other");
  EXPECT_EQ(one.other.rpcs, 9u);
  EXPECT_EQ(one.other.keys, 3u);
  EXPECT_EQ(one.other.type(kRead)->rpcs, 6u);
  // By time: A's 20 ms first.
  EXPECT_EQ(s.top_jobs(1, JobStats::By::kTime).top[0].key, "A");
}

TEST(JobStatsTest, AnIdleEntryGoesIntoOtherAndAFullTableCountsNewJobsThere) {
  ManualClock clock;
  JobStats s(clock, JobStatsOptions{2, 60s});
  const Nid c = nid("198.18.0.1@tcp");
  s.record("A", c, kWrite, 100, 0, 1ms, 0ns);
  s.record("B", c, kWrite, 100, 0, 1ms, 0ns);
  s.record("C", c, kWrite, 100, 0, 1ms, 0ns);  // full of live entries: other
  JobStats::View v = s.top_jobs(10, JobStats::By::kBytes);
  EXPECT_EQ(v.top.size(), 2u);
  EXPECT_EQ(v.kept, 2u);
  EXPECT_EQ(v.overflow_keys, 1u);
  EXPECT_EQ(v.other.rpcs, 1u);
  // A stays busy; B goes idle for a minute and leaves, its counts kept in `other`; then D
  // finds room.
  clock.advance(30s);
  s.record("A", c, kWrite, 100, 0, 1ms, 0ns);
  clock.advance(31s);
  s.record("D", c, kWrite, 100, 0, 1ms, 0ns);
  v = s.top_jobs(10, JobStats::By::kBytes);
  ASSERT_EQ(v.top.size(), 2u);
  EXPECT_TRUE(find(v, "A") && find(v, "D")) << v.top[0].key << " " << v.top[1].key;
  EXPECT_EQ(find(v, "A")->rpcs, 2u);
  EXPECT_EQ(v.other.rpcs, 2u) << "C's overflow and B's counts";
  uint64_t total = v.other.rpcs;
  for (const JobEntry& e : v.top) total += e.rpcs;
  EXPECT_EQ(total, 5u) << "nothing is lost from the totals";
}

// The entries of the last keys added to are looked at first: one that went idle (into
// `other`) is not added to again -- the job's next RPC makes a new entry.
TEST(JobStatsTest, AJobBackAfterItsEntryWentGetsANewOne) {
  ManualClock clock;
  JobStats s(clock, JobStatsOptions{4, 60s});
  const Nid c = nid("198.18.0.1@tcp");
  s.record("A", c, kWrite, 100, 0, 1ms, 0ns);
  s.record("A", c, kWrite, 100, 0, 1ms, 0ns);
  clock.advance(61s);
  JobStats::View v = s.top_jobs(10, JobStats::By::kBytes);  // A goes
  EXPECT_TRUE(v.top.empty());
  EXPECT_EQ(v.other.rpcs, 2u);
  s.record("A", c, kRead, 10, 0, 1ms, 0ns);
  v = s.top_jobs(10, JobStats::By::kBytes);
  ASSERT_EQ(v.top.size(), 1u);
  EXPECT_EQ(v.top[0].key, "A");
  EXPECT_EQ(v.top[0].rpcs, 1u);
  EXPECT_EQ(v.top[0].bytes_in, 10u);
  EXPECT_EQ(v.other.rpcs, 2u);
  // The client was busy all along (its table is looked at on its own view): all three.
  JobStats::View cv = s.top_clients(10, JobStats::By::kBytes);
  ASSERT_EQ(cv.top.size(), 1u);
  EXPECT_EQ(cv.top[0].rpcs, 3u);
}

// 10,000 job ids on a table of 1,024: memory stays that of 1,024 entries, every RPC is in
// the totals, and a view (what a /metrics scrape takes) stays small.
TEST(JobStatsTest, TenThousandJobIdsCostWhatTheBoundDoes) {
  ManualClock clock;
  JobStats s(clock, JobStatsOptions{1024, 600s});
  const Nid c = nid("198.18.0.1@tcp");
  for (int round = 0; round < 3; ++round)
    for (int j = 0; j < 10'000; ++j)
      s.record("job" + std::to_string(j), c, j % 2 ? kWrite : kRead, 4096, 64, 100us, 0ns);
  auto started = std::chrono::steady_clock::now();
  JobStats::View v = s.top_jobs(10, JobStats::By::kBytes);
  const double view_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  EXPECT_EQ(v.kept, 1024u);
  EXPECT_EQ(v.top.size(), 10u);
  EXPECT_EQ(v.overflow_keys, 3u * (10'000 - 1024));
  uint64_t total = v.other.rpcs;
  for (const JobEntry& e : v.top) total += e.rpcs;
  EXPECT_EQ(total, 30'000u);
  // 1,024 entries of one or two types and a few histogram buckets: well under 1 MiB.
  EXPECT_LT(v.memory_bytes, size_t(1) << 20);
  EXPECT_GT(v.memory_bytes, 1024u * sizeof(JobEntry));
  std::printf("10,000 job ids on a table of 1,024: %zu kept, %.0f KiB, a top-10 view in %.2f ms\n",
              v.kept, double(v.memory_bytes) / 1024, view_ms);
}

// stats.job_stats = false (at run time): nothing more is counted; what was stays shown; on
// again, counting resumes.
TEST(JobStatsTest, SwitchedOffItCountsNothingAndOnAgainItResumes) {
  ManualClock clock;
  JobStats s(clock, JobStatsOptions{});
  const Nid c1 = nid("198.18.0.1@tcp");
  s.record("A", c1, kWrite, 100, 10, 1ms, 0ns);
  JobStatsOptions off;
  off.enabled = false;
  s.set_options(off);
  EXPECT_FALSE(s.enabled());
  for (int i = 0; i < 5; ++i) s.record("A", c1, kWrite, 100, 10, 1ms, 0ns);
  s.record("B", c1, kWrite, 100, 10, 1ms, 0ns);
  JobStats::View v = s.top_jobs(10, JobStats::By::kRpcs);
  ASSERT_EQ(v.top.size(), 1u);
  EXPECT_EQ(v.top[0].rpcs, 1u);
  EXPECT_EQ(s.top_clients(10, JobStats::By::kRpcs).top.at(0).rpcs, 1u);
  s.set_options(JobStatsOptions{});
  s.record("A", c1, kWrite, 100, 10, 1ms, 0ns);
  EXPECT_EQ(find(s.top_jobs(10, JobStats::By::kRpcs), "A")->rpcs, 2u);
  // Off from the start (the config's key at the daemon's start).
  JobStats quiet(clock, off);
  quiet.record("A", c1, kWrite, 100, 10, 1ms, 0ns);
  EXPECT_TRUE(quiet.top_jobs(10, JobStats::By::kRpcs).top.empty());
}

TEST(JobStatsTest, TheOrderIsNamedByAWord) {
  JobStats::By by = JobStats::By::kTime;
  EXPECT_TRUE(parse_job_stats_by("rpcs", &by));
  EXPECT_EQ(by, JobStats::By::kRpcs);
  EXPECT_TRUE(parse_job_stats_by("bytes", &by));
  EXPECT_EQ(by, JobStats::By::kBytes);
  EXPECT_FALSE(parse_job_stats_by("speed", &by));
}

}  // namespace
}  // namespace pfsnet
