// The fair-share policy's core (rpc/nrs.h): turns across flows, weights, the slot kept for
// a flow lately heard from, and what each flow was held.
#include "rpc/nrs.h"

#include <gtest/gtest.h>

#include <map>

namespace pfsnet {
namespace {

using namespace std::chrono_literals;

NrsFlowKey client(int i, std::string job = "") {
  return NrsFlowKey{*Nid::parse("198.18.0." + std::to_string(i) + "@tcp"), std::move(job)};
}

TEST(NrsPolicy, NamesParseAndAnUnknownOneIsRefusedSayingWhatThereIs) {
  EXPECT_EQ(*parse_nrs_policy("fifo"), NrsPolicyKind::kFifo);
  EXPECT_EQ(*parse_nrs_policy("fair"), NrsPolicyKind::kFair);
  EXPECT_STREQ(nrs_policy_name(NrsPolicyKind::kFair), "fair");
  auto bad = parse_nrs_policy("crrn");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("fifo"), std::string::npos);
  EXPECT_NE(bad.status().message().find("fair"), std::string::npos);
}

// A greedy flow queued 10 requests before two others queued 2 each: the slots go in turns,
// not in arrival order.
TEST(FairShare, FlowsWithRequestsWaitingTakeTurns) {
  FairShare f({.slots = 1});
  TimePoint t{};
  uint64_t id = 0;
  for (int i = 0; i < 10; ++i) f.push(client(1), 1 << 20, t, id++);  // 0..9
  for (int i = 0; i < 2; ++i) f.push(client(2), 4096, t, 100 + i);
  for (int i = 0; i < 2; ++i) f.push(client(3), 64, t, 200 + i);
  std::vector<uint64_t> order;
  for (int k = 0; k < 14; ++k) {
    auto next = f.pop(t);
    ASSERT_TRUE(next);
    EXPECT_FALSE(f.pop(t)) << "one slot";
    order.push_back(*next);
    f.done(*next < 100 ? client(1) : *next < 200 ? client(2) : client(3), t);
  }
  EXPECT_EQ(order, (std::vector<uint64_t>{0, 100, 200, 1, 101, 201, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(f.waiting(), 0u);
  EXPECT_EQ(f.active(), 0);
}

// Two jobs on one client are two flows (LU-7982), and a weight of 3 takes 3 a turn.
TEST(FairShare, JobsOnOneClientAreFlowsAndAWeightTakesThatManyATurn) {
  FairShare f({.slots = 1, .job_weights = {{"big", 3}}});
  TimePoint t{};
  for (uint64_t i = 0; i < 6; ++i) f.push(client(1, "big"), 1, t, i);
  for (uint64_t i = 0; i < 6; ++i) f.push(client(1, "small"), 1, t, 10 + i);
  std::string order;
  for (int k = 0; k < 12; ++k) {
    auto next = f.pop(t);
    ASSERT_TRUE(next);
    order += *next < 10 ? 'B' : 's';
    f.done(*next < 10 ? client(1, "big") : client(1, "small"), t);
  }
  EXPECT_EQ(order, "BBBsBBBsssss");
}

// Alone, a greedy flow uses every slot; once another flow was heard from lately, it leaves
// one free for it -- and takes it back when that flow has been quiet for `idle`.
TEST(FairShare, AGreedyFlowLeavesASlotForAFlowHeardFromLately) {
  FairShare f({.slots = 4, .idle = 100ms});
  TimePoint t{};
  uint64_t id = 0;
  for (int i = 0; i < 20; ++i) f.push(client(1), 1 << 20, t, id++);
  int started = 0;
  while (f.pop(t)) ++started;
  EXPECT_EQ(started, 4) << "alone: every slot";
  // Another client's request: it waits for a slot, then takes the next one.
  f.push(client(2), 64, t, 1000);
  EXPECT_FALSE(f.pop(t));
  f.done(client(1), t + 1ms);
  EXPECT_EQ(f.pop(t + 1ms), 1000u);
  f.done(client(2), t + 2ms);  // answered; client 2 is present for 100 ms
  // A slot frees: the greedy flow takes it (3 in service) but not the last one, kept for
  // client 2.
  f.done(client(1), t + 3ms);
  EXPECT_EQ(f.pop(t + 3ms), std::optional<uint64_t>(4));
  EXPECT_FALSE(f.pop(t + 3ms)) << "a slot is kept for client 2";
  EXPECT_EQ(f.active(), 3);
  // Client 2's next request goes straight in.
  f.push(client(2), 64, t + 4ms, 1001);
  EXPECT_EQ(f.pop(t + 4ms), 1001u);
  f.done(client(2), t + 5ms);
  EXPECT_FALSE(f.pop(t + 104ms)) << "client 2 is still present";
  // Quiet for 100 ms: the greedy flow has every slot again.
  EXPECT_EQ(f.pop(t + 105ms), std::optional<uint64_t>(5));
  EXPECT_EQ(f.active(), 4);
}

// With many flows heard from, the slots kept for them are at most `reserve` and half.
TEST(FairShare, TheSlotsKeptForOthersAreAtMostTheReserveAndHalf) {
  for (auto [reserve, started_alone] : {std::pair{0, 8}, {1, 7}, {3, 5}, {6, 4}}) {
    FairShare f({.slots = 8, .idle = 1s, .reserve = reserve});
    TimePoint t{};
    for (int c = 10; c < 30; ++c) {  // 20 clients heard from once
      f.push(client(c), 64, t, 500 + c);
      ASSERT_TRUE(f.pop(t));
      f.done(client(c), t);
    }
    for (uint64_t i = 0; i < 20; ++i) f.push(client(1), 1 << 20, t, i);
    int started = 0;
    while (f.pop(t)) ++started;
    EXPECT_EQ(started, started_alone) << "reserve " << reserve;
  }
}

TEST(FairShare, WhatEachFlowWasHeldIsCounted) {
  FairShare f({.slots = 1});
  TimePoint t{};
  f.push(client(1), 1000, t, 1);
  f.push(client(2), 10, t, 2);
  ASSERT_EQ(f.pop(t), 1u);  // at once: not held
  ASSERT_FALSE(f.pop(t));   // client 2's is refused a slot: held from here
  f.done(client(1), t + 5ms);
  ASSERT_EQ(f.pop(t + 5ms), 2u);  // held 5 ms
  auto flows = f.flows();
  ASSERT_EQ(flows.size(), 2u);
  EXPECT_EQ(flows[0].key, client(2));  // most held first
  EXPECT_EQ(flows[0].held, 1u);
  EXPECT_EQ(flows[0].held_bytes, 10u);
  EXPECT_EQ(flows[0].held_total, Duration(5ms));
  EXPECT_EQ(flows[0].held_max, Duration(5ms));
  EXPECT_EQ(flows[0].active, 1);
  EXPECT_EQ(flows[1].requests, 1u);
  EXPECT_EQ(flows[1].bytes, 1000u);
  EXPECT_EQ(flows[1].held, 0u);
}

// Replacing the policy: everything waiting goes at once, in arrival order.
TEST(FairShare, DrainHandsOverEveryRequestInArrivalOrder) {
  FairShare f({.slots = 1});
  TimePoint t{};
  f.push(client(1), 1, t, 1);
  f.push(client(2), 1, t + 1ms, 2);
  f.push(client(1), 1, t + 2ms, 3);
  f.push(client(3), 1, t + 3ms, 4);
  ASSERT_EQ(f.pop(t + 3ms), 1u);
  EXPECT_EQ(f.drain(t + 4ms), (std::vector<uint64_t>{2, 3, 4}));
  EXPECT_EQ(f.waiting(), 0u);
  EXPECT_EQ(f.active(), 4);
  EXPECT_FALSE(f.pop(t + 4ms));
}

// New options at run time: more slots let more in at once; a client weight applies to a
// flow already seen.
TEST(FairShare, OptionsChangeAtRunTime) {
  FairShare f({.slots = 1});
  TimePoint t{};
  for (uint64_t i = 0; i < 4; ++i) f.push(client(1), 1, t, i);
  ASSERT_TRUE(f.pop(t));
  EXPECT_FALSE(f.pop(t));
  f.set_options({.slots = 3, .client_weights = {{"198.18.0.1@tcp", 5}}});
  EXPECT_TRUE(f.pop(t));
  EXPECT_TRUE(f.pop(t));
  EXPECT_FALSE(f.pop(t));
  EXPECT_EQ(f.flows()[0].weight, 5);
}

}  // namespace
}  // namespace pfsnet
