// RequestScheduler (rpc/request_scheduler.h) under threads: requests submitted from several
// threads, their slots given back from others (as workers and timer threads do), each
// request started exactly once, never more in service than the slots, and a policy drained
// starting whatever waits.
#include "rpc/request_scheduler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <deque>
#include <thread>

namespace pfsnet {
namespace {

NrsFlowKey flow(int i) {
  return NrsFlowKey{*Nid::parse("198.18.0." + std::to_string(i) + "@tcp"), ""};
}

TEST(RequestSchedulerTest, ThreadsSubmitAndReleaseAndEachRequestStartsOnceWithinTheSlots) {
  MonotonicClock clock;
  RequestScheduler s(clock, FairShareOptions{.slots = 3});
  constexpr int kThreads = 4, kEach = 2000;
  std::atomic<int> in_service{0}, most{0}, started{0};
  std::vector<std::atomic<int>> runs(kThreads * kEach);
  // Started requests' slots, given back by the releasing threads below.
  Mutex mu;
  std::deque<RequestScheduler::Slot> to_release;
  std::atomic<bool> submitting_done{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i)
        s.submit(flow(t), 100, [&, id = t * kEach + i](RequestScheduler::Slot slot) {
          runs[id].fetch_add(1);
          started.fetch_add(1);
          int now = in_service.fetch_add(1) + 1;
          int m = most.load();
          while (now > m && !most.compare_exchange_weak(m, now)) {
          }
          MutexLock lk(mu);
          to_release.push_back(std::move(slot));
        });
    });
  std::thread releaser([&] {
    // Bounded: every request is started and released, or 20 s pass.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < until) {
      RequestScheduler::Slot slot;
      {
        MutexLock lk(mu);
        if (!to_release.empty()) {
          slot = std::move(to_release.front());
          to_release.pop_front();
        }
      }
      if (slot.held()) {
        in_service.fetch_sub(1);
        slot.release();  // may start the next one, on this thread
      } else if (submitting_done && started.load() == kThreads * kEach) {
        MutexLock lk(mu);
        if (to_release.empty()) break;
      } else {
        std::this_thread::yield();
      }
    }
  });
  for (auto& t : threads) t.join();
  submitting_done = true;
  releaser.join();
  EXPECT_EQ(started.load(), kThreads * kEach);
  for (int i = 0; i < kThreads * kEach; ++i) ASSERT_EQ(runs[i].load(), 1) << i;
  EXPECT_LE(most.load(), 3);
  auto f = s.figures();
  EXPECT_EQ(f.active, 0);
  EXPECT_EQ(f.waiting, 0u);
  uint64_t requests = 0;
  for (const NrsFlowStats& fl : f.flows) requests += fl.requests;
  EXPECT_EQ(requests, uint64_t(kThreads * kEach));
}

TEST(RequestSchedulerTest, DrainStartsWhatWaitsAndLateSlotsComeBackHarmlessly) {
  MonotonicClock clock;
  RequestScheduler s(clock, FairShareOptions{.slots = 1});
  std::vector<RequestScheduler::Slot> held;
  int started = 0;
  for (int i = 0; i < 5; ++i)
    s.submit(flow(1), 1, [&](RequestScheduler::Slot slot) {
      ++started;
      held.push_back(std::move(slot));
    });
  EXPECT_EQ(started, 1);
  EXPECT_EQ(s.figures().waiting, 4u);
  s.drain();
  EXPECT_EQ(started, 5);
  EXPECT_EQ(s.figures().active, 5);
  held.clear();  // every slot given back
  EXPECT_EQ(s.figures().active, 0);
}

// A policy replaced (release_all) or given new options runs no handler on the caller's
// thread; what it holds starts when the next slot is given back.
TEST(RequestSchedulerTest, ReplacedOrChangedItStartsWhatWaitsAtTheNextSlotGivenBack) {
  MonotonicClock clock;
  RequestScheduler s(clock, FairShareOptions{.slots = 1});
  std::vector<RequestScheduler::Slot> held;
  int started = 0;
  for (int i = 0; i < 4; ++i)
    s.submit(flow(1), 1, [&](RequestScheduler::Slot slot) {
      ++started;
      held.push_back(std::move(slot));
    });
  ASSERT_EQ(started, 1);
  s.set_options(FairShareOptions{.slots = 2});
  EXPECT_EQ(started, 1) << "not on the caller's thread";
  RequestScheduler::Slot first = std::move(held[0]);
  first.release();  // two slots now: two more start
  EXPECT_EQ(started, 3);
  s.release_all();
  EXPECT_EQ(started, 3) << "not on the caller's thread";
  RequestScheduler::Slot second = std::move(held[1]);
  second.release();  // the rest, whatever the slots
  EXPECT_EQ(started, 4);
  EXPECT_EQ(s.figures().waiting, 0u);
}

}  // namespace
}  // namespace pfsnet
