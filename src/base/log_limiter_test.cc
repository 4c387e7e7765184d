#include "base/log_limiter.h"

#include <gtest/gtest.h>

namespace pfsnet {
namespace {

using namespace std::chrono_literals;

TimePoint at(Duration d) { return TimePoint(1s) + d; }

TEST(LogLimiterTest, OneLinePerKeyPerIntervalAndTheNextSaysHowManyWereHeld) {
  LogLimiter lim({.interval = 10s, .burst = 1, .max_keys = 16});
  auto v = lim.admit("connect a -> b failed", at(0s));
  EXPECT_TRUE(v.log);
  EXPECT_EQ(v.held, 0u);
  // 189 more within the interval (the dead-server case: ~190 in 6 s) are held back.
  for (int i = 1; i < 190; ++i) EXPECT_FALSE(lim.admit("connect a -> b failed", at(i * 30ms)).log);
  // Another subject or kind is not held back by this one.
  EXPECT_TRUE(lim.admit("connect a -> c failed", at(1s)).log);
  EXPECT_TRUE(lim.admit("handshake with b failed", at(1s)).log);
  // The interval ends: the next line goes out, carrying the count.
  v = lim.admit("connect a -> b failed", at(10s));
  EXPECT_TRUE(v.log);
  EXPECT_EQ(v.held, 189u);
  EXPECT_EQ(held_suffix(v), " (189 more like this held back)");
  EXPECT_EQ(held_suffix(LogLimiter::Verdict{true, 0}), "");
  // Already reported: nothing is held now.
  EXPECT_TRUE(lim.take_held(at(30s)).empty());
}

TEST(LogLimiterTest, BurstLinesGetThroughBeforeHolding) {
  LogLimiter lim({.interval = 1s, .burst = 3, .max_keys = 16});
  int logged = 0;
  for (int i = 0; i < 10; ++i) logged += lim.admit("k", at(i * 10ms)).log;
  EXPECT_EQ(logged, 3);
}

TEST(LogLimiterTest, HeldLinesAreReportedWhenTheIntervalEndsInSilence) {
  LogLimiter lim({.interval = 10s, .burst = 1, .max_keys = 16});
  for (int i = 0; i < 5; ++i) lim.admit("k", at(i * 1s));  // 1 logged, 4 held (1 s .. 4 s)
  EXPECT_TRUE(lim.take_held(at(9s)).empty());              // the interval has not ended
  auto held = lim.take_held(at(10s));
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].key, "k");
  EXPECT_EQ(held[0].count, 4u);
  EXPECT_EQ(held[0].over, 3s);
  // Reported once: neither the next take nor the next line repeats the count.
  EXPECT_TRUE(lim.take_held(at(11s)).empty());
  auto v = lim.admit("k", at(12s));
  EXPECT_TRUE(v.log);
  EXPECT_EQ(v.held, 0u);
}

TEST(LogLimiterTest, IdleKeysAreForgottenAndTheTableIsBounded) {
  LogLimiter lim({.interval = 10s, .burst = 1, .max_keys = 4});
  lim.admit("old", at(0s));
  lim.admit("old", at(1s));  // held
  for (int i = 0; i < 3; ++i) lim.admit("k" + std::to_string(i), at(2s));
  EXPECT_EQ(lim.keys(), 4u);
  // A fifth key evicts the one idle longest; its held line is still reported.
  EXPECT_TRUE(lim.admit("new", at(3s)).log);
  EXPECT_EQ(lim.keys(), 4u);
  auto held = lim.take_held(at(4s));
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].key, "old");
  EXPECT_EQ(held[0].count, 1u);
  // A whole idle interval later, keys with nothing held are dropped.
  lim.take_held(at(20s));
  EXPECT_EQ(lim.keys(), 0u);
}

}  // namespace
}  // namespace pfsnet
