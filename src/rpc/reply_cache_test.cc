#include "rpc/reply_cache.h"

#include <gtest/gtest.h>

namespace pfsnet {
namespace {

using std::chrono::seconds;

constexpr uint64_t kInc = 0x1234;
const ReplyPath kRail1{1, 11}, kRail2{2, 22};
const TimePoint kT0{};

std::shared_ptr<const SavedReply> reply(uint64_t xid, std::string_view text, size_t bulk = 0) {
  auto r = std::make_shared<SavedReply>();
  r->hdr.kind = FrameKind::kReply;
  r->hdr.xid = xid;
  r->payload = Buffer::copy_of(text);
  if (bulk) r->bulk = make_bulk(Buffer::copy_of(std::string(bulk, 'b')));
  return r;
}

TEST(ReplyCacheTest, ACopyOfARequestThatRanGetsItsSavedReplyNotASecondRun) {
  ReplyCache rc;
  EXPECT_EQ(rc.admit(kInc, 7, 0, kRail1, kT0).what, Admit::kRun);
  // A copy while the first still runs: nothing to do, and the reply then goes on the
  // path of the copy (the client waits there now).
  EXPECT_EQ(rc.admit(kInc, 7, 0, kRail2, kT0).what, Admit::kRunning);
  auto p = rc.finish(kInc, 7, reply(7, "seven"));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->from, kRail2.from);
  EXPECT_EQ(p->local, kRail2.local);
  Admission a = rc.admit(kInc, 7, 0, kRail1, kT0);
  ASSERT_EQ(a.what, Admit::kSaved);
  EXPECT_EQ(a.reply->payload.view(), "seven");
  EXPECT_EQ(rc.stats().replayed, 1u);
  EXPECT_EQ(rc.stats().running_copies, 1u);
  // Another xid, and the same xid of another incarnation (a restarted client), run.
  EXPECT_EQ(rc.admit(kInc, 8, 1, kRail1, kT0).what, Admit::kRun);
  EXPECT_EQ(rc.admit(kInc + 1, 7, 0, kRail1, kT0).what, Admit::kRun);
  EXPECT_EQ(rc.stats().clients, 2u);
}

TEST(ReplyCacheTest, WhatTheClientCallsFinishedIsForgottenAndNotRunAgain) {
  ReplyCache rc;
  for (uint64_t x = 10; x < 20; ++x) {
    ASSERT_EQ(rc.admit(kInc, x, 0, kRail1, kT0).what, Admit::kRun);  // done_lag 0: x is oldest
    ASSERT_TRUE(rc.finish(kInc, x, reply(x, "r")));
  }
  // Each request said every xid below itself was finished: only the last is kept.
  EXPECT_EQ(rc.stats().entries, 1u);
  // xid 25 says 22 and up are on the wire: 19 goes; a late copy of 15 is dropped.
  EXPECT_EQ(rc.admit(kInc, 25, 3, kRail1, kT0).what, Admit::kRun);
  EXPECT_EQ(rc.stats().entries, 1u);
  EXPECT_EQ(rc.admit(kInc, 15, 0, kRail1, kT0).what, Admit::kFinished);
  EXPECT_EQ(rc.stats().finished_copies, 1u);
  // A lag larger than the xid (a hostile header) is taken as "nothing finished".
  EXPECT_EQ(rc.admit(kInc + 9, 3, UINT32_MAX, kRail1, kT0).what, Admit::kRun);
  // Finishing one the client gave up on meanwhile: no record, the reply goes as it came.
  EXPECT_EQ(rc.admit(kInc, 30, 0, kRail1, kT0).what, Admit::kRun);
  EXPECT_EQ(rc.admit(kInc, 40, 0, kRail1, kT0).what, Admit::kRun);  // 30 finished at the client
  EXPECT_FALSE(rc.finish(kInc, 30, reply(30, "late")));
}

TEST(ReplyCacheTest, OverItsBoundsACopyIsAnsweredWithAnErrorNeverRunTwice) {
  ReplyCacheOptions o;
  o.max_entries = 4;
  o.max_bytes = kHeaderSize + 2;  // one reply "ok"
  ReplyCache rc(o);
  // xid 1 hangs at the client (the lag keeps pointing at it), 2..7 complete.
  ASSERT_EQ(rc.admit(kInc, 1, 0, kRail1, kT0).what, Admit::kRun);
  for (uint64_t x = 2; x <= 7; ++x) {
    ASSERT_EQ(rc.admit(kInc, x, uint32_t(x - 1), kRail1, kT0).what, Admit::kRun);
    rc.finish(kInc, x, reply(x, "ok"));
  }
  ReplyCacheStats s = rc.stats();
  EXPECT_EQ(s.entries, 4u);          // 1 (running) and the newest finished: 5, 6, 7
  EXPECT_EQ(s.evicted_entries, 3u);  // 2, 3, 4: the lowest finished went first
  // 2 and 5 were kept, each when the reply before it had gone; 3, 4, 6, 7 did not fit.
  EXPECT_EQ(s.unsaved_replies, 4u);
  Admission five = rc.admit(kInc, 5, 4, kRail1, kT0);
  ASSERT_EQ(five.what, Admit::kSaved);
  EXPECT_EQ(five.reply->hdr.xid, 5u);
  // A copy of one whose record went, or of one whose reply was not kept: an error.
  EXPECT_EQ(rc.admit(kInc, 3, 2, kRail1, kT0).what, Admit::kNotKept);
  EXPECT_EQ(rc.admit(kInc, 7, 6, kRail1, kT0).what, Admit::kNotKept);
  // The one still running is still running; a new one runs.
  EXPECT_EQ(rc.admit(kInc, 1, 0, kRail2, kT0).what, Admit::kRunning);
  EXPECT_EQ(rc.admit(kInc, 8, 7, kRail1, kT0).what, Admit::kRun);
  // The client finishes 1: everything below 8 goes, the memory with it.
  EXPECT_EQ(rc.admit(kInc, 9, 1, kRail1, kT0).what, Admit::kRun);
  s = rc.stats();
  EXPECT_EQ(s.entries, 2u);
  EXPECT_LT(s.bytes, 2 * 100 + 1u);  // two records, no saved reply
}

TEST(ReplyCacheTest, ASilentIncarnationIsForgottenAfterIdle) {
  ReplyCacheOptions o;
  o.idle = seconds(600);
  ReplyCache rc(o);
  rc.admit(kInc, 1, 0, kRail1, kT0);
  rc.finish(kInc, 1, reply(1, "x", 4096));
  rc.admit(kInc + 1, 1, 0, kRail1, kT0 + seconds(300));
  EXPECT_GT(rc.stats().bytes, 4096u);
  EXPECT_EQ(rc.expire(kT0 + seconds(599)), 0u);
  EXPECT_EQ(rc.expire(kT0 + seconds(600)), 1u);
  ReplyCacheStats s = rc.stats();
  EXPECT_EQ(s.clients, 1u);
  EXPECT_EQ(s.idle_clients, 1u);
  EXPECT_LT(s.bytes, 4096u);
}

}  // namespace
}  // namespace pfsnet
