#include "delay_schedule.h"

#include <gtest/gtest.h>

namespace pfsnet::delay_line {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

TEST(DelayScheduleTest, OnlyADelayHoldsEveryPacketThatLong) {
  DelaySchedule s({.delay = milliseconds(25)});
  EXPECT_EQ(*s.admit(milliseconds(1), 9000), milliseconds(26));
  EXPECT_EQ(*s.admit(milliseconds(1), 9000), milliseconds(26));
  EXPECT_EQ(*s.admit(milliseconds(7), 100), milliseconds(32));
  EXPECT_EQ(s.counters().packets, 3u);
  EXPECT_EQ(s.counters().bytes, 18100u);
}

TEST(DelayScheduleTest, ARateSerialisesPacketsOneAfterAnother) {
  // 1 Gbit/s: 1250 bytes take 10 us.
  DelaySchedule s({.delay = milliseconds(25), .rate_bps = 1e9});
  EXPECT_EQ(*s.admit(milliseconds(0), 1250), milliseconds(25) + microseconds(10));
  EXPECT_EQ(*s.admit(milliseconds(0), 1250), milliseconds(25) + microseconds(20));
  EXPECT_EQ(*s.admit(milliseconds(0), 2500), milliseconds(25) + microseconds(40));
  // The wire went idle meanwhile: the next packet starts when it comes.
  EXPECT_EQ(*s.admit(milliseconds(1), 1250), milliseconds(26) + microseconds(10));
  EXPECT_EQ(s.counters().max_queue_bytes, 2500u);
}

TEST(DelayScheduleTest, AFullQueueDropsTheTail) {
  // 8 Mbit/s: 1000 bytes take 1 ms; room for 3000 bytes waiting.
  DelaySchedule s({.delay = milliseconds(10), .rate_bps = 8e6, .queue_bytes = 3000});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(s.admit(milliseconds(0), 1000)) << i;
  EXPECT_FALSE(s.admit(milliseconds(0), 1000));  // 3000 wait ahead of it: no room
  EXPECT_EQ(s.counters().queue_drops, 1u);
  // 1 ms later one packet has left the wire: there is room again.
  EXPECT_EQ(*s.admit(milliseconds(1), 1000), milliseconds(14));
  EXPECT_EQ(s.counters().packets, 4u);
}

TEST(DelayScheduleTest, LossDropsAboutTheFractionAskedAndIsRepeatable) {
  auto lost = [](uint64_t seed) {
    DelaySchedule s({.delay = milliseconds(1), .loss = 0.01, .seed = seed});
    for (int i = 0; i < 100000; ++i) s.admit(microseconds(i), 1500);
    return s.counters().lost;
  };
  uint64_t n = lost(7);
  EXPECT_GT(n, 850u);
  EXPECT_LT(n, 1150u);
  EXPECT_EQ(lost(7), n);
  EXPECT_NE(lost(8), n);
}

TEST(DelayScheduleTest, DeliveriesNeverReorder) {
  DelaySchedule s({.delay = milliseconds(5), .rate_bps = 1e9});
  std::chrono::nanoseconds last{0};
  for (int i = 0; i < 1000; ++i) {
    auto at = s.admit(microseconds(i * 3), size_t(64 + (i * 7919) % 9000));
    ASSERT_TRUE(at);
    ASSERT_GE(*at, last);
    last = *at;
  }
}

}  // namespace
}  // namespace pfsnet::delay_line
