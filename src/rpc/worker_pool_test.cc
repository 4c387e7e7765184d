#include "rpc/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "rpc/test_gate.h"

namespace pfsnet {
namespace {

using namespace std::chrono_literals;

// Waits (bounded) until `pred` holds on the pool's stats.
template <class Pred>
bool stats_reach(const WorkerPool& p, Pred pred) {
  for (int i = 0; i < 2000; ++i) {
    if (pred(p.stats())) return true;
    std::this_thread::sleep_for(1ms);  // the workers run on their own threads
  }
  return pred(p.stats());
}

TEST(WorkerPoolTest, CountsTheQueueTheBusyThreadsAndTheWaitOnTheInjectedClock) {
  ManualClock clock;
  WorkerPool pool(1, clock);
  Gate gate;
  std::atomic<int> ran{0};
  ASSERT_TRUE(pool.submit([&] {
    gate.wait();
    ++ran;
  }));
  ASSERT_TRUE(stats_reach(pool, [](const WorkerStats& s) { return s.busy == 1; }));
  // Two more wait behind the busy thread: one for 3 s, one for 2 s of the manual clock.
  pool.submit([&] { ++ran; });
  clock.advance(1s);
  pool.submit([&] { ++ran; });
  WorkerStats s = pool.stats();
  EXPECT_EQ(s.threads, 1);
  EXPECT_EQ(s.busy, 1);
  EXPECT_EQ(s.queued, 2u);
  EXPECT_EQ(s.queued_max, 2u);
  clock.advance(2s);
  gate.open();
  ASSERT_TRUE(stats_reach(pool, [](const WorkerStats& s) { return s.jobs == 3 && s.busy == 0; }));
  s = pool.stats();
  EXPECT_EQ(s.queued, 0u);
  EXPECT_EQ(s.wait_total, 5s);  // 0 + 3 s + 2 s
  EXPECT_EQ(s.wait_max, 3s);
  pool.stop();
  EXPECT_EQ(ran.load(), 3);
  EXPECT_FALSE(pool.submit([] {}));
}

// No threads: each job runs at once on the caller's thread (the in-process cluster).
TEST(WorkerPoolTest, WithoutThreadsAJobRunsAtOnceOnTheCallersThread) {
  ManualClock clock;
  WorkerPool pool(0, clock);
  std::thread::id ran_on;
  ASSERT_TRUE(pool.submit([&] { ran_on = std::this_thread::get_id(); }));
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  WorkerStats s = pool.stats();
  EXPECT_EQ(s.threads, 0);
  EXPECT_EQ(s.jobs, 1u);
  EXPECT_EQ(s.queued, 0u);
  pool.stop();
  EXPECT_FALSE(pool.submit([] {}));
}

}  // namespace
}  // namespace pfsnet
