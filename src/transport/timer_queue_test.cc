// The timer queues: Repeating, a service's periodic round on its node's queue, over a
// MemHub on a manual clock and over a ThreadTimerQueue.
#include "transport/timer_queue.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "transport/mem_transport.h"

namespace pfsnet {
namespace {

using namespace std::chrono_literals;

// A service's periodic round on its node's timer queue (here a MemHub on a manual clock):
// one period after start, then a period after each round ends, the period asked afresh
// each time; none after stop(); a queue that drops its entries just ends the rounds.
TEST(RepeatingTest, RoundsEveryPeriodOnTheQueueUntilStopped) {
  ManualClock clock;
  MemHub hub;
  hub.set_clock(&clock);
  Duration period = 100ms;
  std::vector<Duration> at;
  TimePoint t0 = clock.now();
  Repeating r;
  r.start(
      hub, clock, [&] { return period; }, [&](TimePoint now) { at.push_back(now - t0); });
  auto run_to = [&](Duration d) {
    for (int i = 0; i < 1000 && clock.now() - t0 < d; ++i) {
      clock.advance(10ms);
      hub.pump();
    }
  };
  run_to(350ms);
  EXPECT_EQ(at, (std::vector<Duration>{100ms, 200ms, 300ms}));
  period = 250ms;  // read after the round at 400 ms: the next is at 650 ms
  run_to(700ms);
  EXPECT_EQ(at, (std::vector<Duration>{100ms, 200ms, 300ms, 400ms, 650ms}));
  r.stop();
  run_to(1500ms);
  EXPECT_EQ(at.size(), 5u);
  // Started again: rounds from then on.
  period = 100ms;
  r.start(hub, clock, period, [&](TimePoint now) { at.push_back(now - t0); });
  run_to(1720ms);
  EXPECT_EQ(at, (std::vector<Duration>{100ms, 200ms, 300ms, 400ms, 650ms, 1600ms, 1700ms}));
}

// On a thread of its own: a queue stopped under a Repeating drops its next round, and the
// Repeating's own stop() after that returns at once.
TEST(RepeatingTest, AStoppedQueueEndsTheRounds) {
  MonotonicClock clock;
  auto q = std::make_unique<ThreadTimerQueue>(clock);
  std::mutex mu;
  std::condition_variable cv;
  int rounds = 0;
  Repeating r;
  r.start(*q, clock, 1ms, [&](TimePoint) {
    std::lock_guard lk(mu);
    ++rounds;
    cv.notify_all();
  });
  {
    std::unique_lock lk(mu);
    ASSERT_TRUE(cv.wait_for(lk, 10s, [&] { return rounds >= 3; }));
  }
  q->stop();
  int after;
  {
    std::lock_guard lk(mu);
    after = rounds;
  }
  q.reset();
  r.stop();
  std::lock_guard lk(mu);
  EXPECT_EQ(rounds, after);
}

}  // namespace
}  // namespace pfsnet
