// Health alone, on a manual clock: lowering, raising, the recovery schedule.
#include <gtest/gtest.h>

#include "net/health.h"

namespace pfsnet {
namespace {

using namespace std::chrono_literals;

TEST(HealthUnitTest, LowerRaiseAndStateChanges) {
  ManualClock clock;
  Health h(clock.now(), 1000);
  EXPECT_TRUE(h.healthy());
  clock.advance(5s);
  EXPECT_TRUE(h.lower(100, clock.now(), 6000));  // leaves full health
  EXPECT_EQ(h.value(), 900);
  EXPECT_EQ(h.snapshot().last_change, clock.now());
  EXPECT_EQ(h.snapshot().last_change_unix_ms, 6000);
  clock.advance(1s);
  EXPECT_FALSE(h.lower(100, clock.now(), 7000));  // already in recovery: no new change
  EXPECT_EQ(h.value(), 800);
  EXPECT_EQ(h.snapshot().last_change_unix_ms, 6000);
  EXPECT_FALSE(h.raise(100, clock.now(), 8000));
  EXPECT_EQ(h.value(), 900);
  EXPECT_TRUE(h.raise(100, clock.now(), 9000));  // healthy again
  EXPECT_EQ(h.snapshot().last_change_unix_ms, 9000);
  EXPECT_FALSE(h.raise(100, clock.now(), 9500));  // capped
  EXPECT_EQ(h.value(), kMaxHealth);
  EXPECT_TRUE(h.lower(5000, clock.now(), 1));
  EXPECT_EQ(h.value(), 0);  // never below 0
}

TEST(HealthUnitTest, RecoveryBacksOffToNineHundredSeconds) {
  ManualClock clock;
  Health h(clock.now(), 0);
  EXPECT_FALSE(h.recovery_due(clock.now()));  // healthy: no pings
  h.lower(100, clock.now(), 0);
  std::vector<int64_t> gaps;
  for (int i = 0; i < 14; ++i) {
    // Find the next due time by stepping in whole seconds (bounded).
    int64_t s = 0;
    while (!h.recovery_due(clock.now()) && s < 2000) {
      clock.advance(1s);
      ++s;
    }
    gaps.push_back(s);
    h.schedule_recovery(clock.now(), 1s);
  }
  EXPECT_EQ(gaps, (std::vector<int64_t>{0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 900, 900, 900}));
  EXPECT_EQ(h.snapshot().ping_count, 14);
  // A success restarts the count; healthy: nothing due.
  h.raise(100, clock.now(), 0);
  EXPECT_EQ(h.snapshot().ping_count, 0);
  EXPECT_FALSE(h.recovery_due(clock.now() + 1000s));
}

TEST(HealthUnitTest, RecoverNowBringsThePingForward) {
  ManualClock clock;
  Health h(clock.now(), 0);
  h.lower(300, clock.now(), 0);
  h.schedule_recovery(clock.now(), 60s);
  EXPECT_FALSE(h.recovery_due(clock.now() + 59s));
  h.recover_now(clock.now());
  EXPECT_TRUE(h.recovery_due(clock.now()));
}

}  // namespace
}  // namespace pfsnet
