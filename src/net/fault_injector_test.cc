// FaultInjector alone: matching, rate, interval, delay, drop with and without a kind.
#include "net/fault_injector.h"

#include <gtest/gtest.h>

#include "base/test_nid.h"

namespace pfsnet {
namespace {

using namespace std::chrono_literals;
using Kind = FaultInjector::Verdict::Kind;

TEST(FaultInjectorTest, RateDropsEveryNthMatchingMessage) {
  ManualClock clock;
  FaultInjector f;
  EXPECT_TRUE(f.empty());
  FaultRule r;
  r.dst = nid("10.0.0.2@tcp");
  r.msg_type = 7;
  r.rate = 3;
  r.health = HealthKind::kPeerNiUnreachable;
  uint64_t id = f.add(r);
  EXPECT_FALSE(f.empty());
  std::vector<Kind> got;
  for (int i = 0; i < 6; ++i)
    got.push_back(f.judge(FaultRule::Action::kDrop, nid("10.0.0.1@tcp"), nid("10.0.0.2@tcp"), 7,
                          false, clock.now())
                      .kind);
  EXPECT_EQ(got, (std::vector<Kind>{Kind::kPass, Kind::kPass, Kind::kDrop, Kind::kPass, Kind::kPass,
                                    Kind::kDrop}));
  // Other types and destinations do not match (and are not counted).
  EXPECT_EQ(f.judge(FaultRule::Action::kDrop, nid("10.0.0.1@tcp"), nid("10.0.0.2@tcp"), 8, false,
                    clock.now())
                .kind,
            Kind::kPass);
  EXPECT_EQ(f.judge(FaultRule::Action::kDrop, nid("10.0.0.1@tcp"), nid("10.0.0.3@tcp"), 7, false,
                    clock.now())
                .kind,
            Kind::kPass);
  auto v = f.judge(FaultRule::Action::kDrop, nid("10.0.0.1@tcp"), nid("10.0.0.2@tcp"), 7, true,
                   clock.now());
  v = f.judge(FaultRule::Action::kDrop, nid("10.0.0.1@tcp"), nid("10.0.0.2@tcp"), 7, true,
              clock.now());
  v = f.judge(FaultRule::Action::kDrop, nid("10.0.0.1@tcp"), nid("10.0.0.2@tcp"), 7, true,
              clock.now());
  ASSERT_EQ(v.kind, Kind::kDrop);
  EXPECT_EQ(v.error.health_kind(), HealthKind::kPeerNiUnreachable);
  EXPECT_EQ(v.error.code(), Code::kUnreachable);
  EXPECT_NE(v.error.message().find("dropped the reply type 7"), std::string::npos);
  auto rules = f.rules();
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_EQ(rules[0].matched, 9u);
  EXPECT_EQ(rules[0].injected, 3u);
  EXPECT_TRUE(f.del(id));
  EXPECT_FALSE(f.del(id));
  EXPECT_TRUE(f.empty());
}

TEST(FaultInjectorTest, IntervalFiresOncePerInterval) {
  ManualClock clock;
  FaultInjector f;
  FaultRule r;
  r.interval = 10s;  // silent drop: a black hole
  f.add(r);
  Nid a = nid("10.0.0.1@tcp"), b = nid("10.0.0.2@tcp");
  auto v = f.judge(FaultRule::Action::kDrop, a, b, 1, false, clock.now());
  EXPECT_EQ(v.kind, Kind::kDrop);
  EXPECT_TRUE(v.error.ok());  // vanishes: the sender sees a completed send
  clock.advance(9s);
  EXPECT_EQ(f.judge(FaultRule::Action::kDrop, a, b, 1, false, clock.now()).kind, Kind::kPass);
  clock.advance(1s);
  EXPECT_EQ(f.judge(FaultRule::Action::kDrop, a, b, 1, false, clock.now()).kind, Kind::kDrop);
}

TEST(FaultInjectorTest, DelaysHoldAndAddUp) {
  ManualClock clock;
  FaultInjector f;
  FaultRule d;
  d.action = FaultRule::Action::kDelay;
  d.rate = 1;
  d.latency = 500ms;
  f.add(d);
  d.latency = 2s;
  f.add(d);
  // Drops are judged apart: a delay rule never drops.
  EXPECT_EQ(f.judge(FaultRule::Action::kDrop, nid("10.0.0.1@tcp"), nid("10.0.0.2@tcp"), 1, false,
                    clock.now())
                .kind,
            Kind::kPass);
  auto v = f.judge(FaultRule::Action::kDelay, nid("10.0.0.1@tcp"), nid("10.0.0.2@tcp"), 1, false,
                   clock.now());
  EXPECT_EQ(v.kind, Kind::kDelay);
  EXPECT_EQ(v.hold_until, clock.now() + 2s);
  EXPECT_EQ(v.injected, 2);
  EXPECT_EQ(f.rules()[0].describe(), "delay src=* dst=* type=any rate=1 latency=500ms");
}

}  // namespace
}  // namespace pfsnet
