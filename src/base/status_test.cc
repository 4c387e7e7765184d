#include <gtest/gtest.h>
#include <pfsnet/clock.h>
#include <pfsnet/status.h>

namespace pfsnet {
namespace {

TEST(StatusTest, CarriesHealthKind) {
  Status s(Code::kTimeout, "no completion from 127.0.0.3@tcp", HealthKind::kLocalNiSendTimeout);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.health_kind(), HealthKind::kLocalNiSendTimeout);
  EXPECT_EQ(s.to_string(), "TIMEOUT (LOCAL_NI_SEND_TIMEOUT): no completion from 127.0.0.3@tcp");
  EXPECT_EQ(Status().to_string(), "OK");
}

TEST(StatusTest, ResultHoldsValueOrError) {
  Result<int> a = 5;
  EXPECT_TRUE(a.ok());
  EXPECT_EQ(*a, 5);
  Result<int> b = Status(Code::kNotFound, "x");
  EXPECT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), Code::kNotFound);
}

TEST(ClockTest, ManualClockMovesOnlyWhenTold) {
  ManualClock c(1'000);
  TimePoint t0 = c.now();
  EXPECT_EQ(c.now(), t0);
  c.advance(std::chrono::milliseconds(1500));
  EXPECT_EQ(c.now() - t0, std::chrono::milliseconds(1500));
  EXPECT_EQ(
      std::chrono::duration_cast<std::chrono::seconds>(c.wall_now().time_since_epoch()).count(),
      1'001);
}

}  // namespace
}  // namespace pfsnet
