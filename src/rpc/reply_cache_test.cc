#include "rpc/reply_cache.h"

#include <gtest/gtest.h>

namespace pfsnet {
namespace {

using std::chrono::seconds;

constexpr uint64_t kInc = 0x1234;
const ReplyPath kRail1{Nid::ipv4(1), Nid::ipv4(11)}, kRail2{Nid::ipv4(2), Nid::ipv4(22)};
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
  // Finishing one the client gave up on meanwhile: its record goes, its reply unkept.
  EXPECT_EQ(rc.admit(kInc, 30, 0, kRail1, kT0).what, Admit::kRun);
  EXPECT_EQ(rc.admit(kInc, 40, 0, kRail1, kT0).what, Admit::kRun);  // 30 finished at the client
  EXPECT_TRUE(rc.finish(kInc, 30, reply(30, "late")));
  EXPECT_EQ(rc.stats().entries, 3u);  // 40; 25, still running; 3 of kInc + 9
  EXPECT_FALSE(rc.finish(kInc, 30, reply(30, "again")));
}

TEST(ReplyCacheTest, ARequestHeldBackByAHungOneKeepsItsReplyUntilTheClientSaysDone) {
  // xid 1 hangs at the client (the done mark keeps pointing at it), 2..2001 complete, each
  // with a 256 KiB reply -- what the old bounds (1024 records, 1 MiB) let go of.
  ReplyCacheOptions o;
  o.window = 4096;
  ReplyCache rc(o);
  ASSERT_EQ(rc.admit(kInc, 1, 0, kRail1, kT0).what, Admit::kRun);
  for (uint64_t x = 2; x <= 2001; ++x) {
    ASSERT_EQ(rc.admit(kInc, x, uint32_t(x - 1), kRail1, kT0).what, Admit::kRun);
    rc.finish(kInc, x, reply(x, "ok", 256 << 10));
  }
  // Any of them lost its reply and is sent again: the saved reply, never an error.
  for (uint64_t x : {2u, 3u, 1000u, 2001u}) {
    Admission a = rc.admit(kInc, x, uint32_t(x - 1), kRail2, kT0);
    ASSERT_EQ(a.what, Admit::kSaved) << x;
    EXPECT_EQ(a.reply->hdr.xid, x);
  }
  EXPECT_EQ(rc.stats().entries, 2001u);
  // The client's DONE: below 2002 everything is finished but 1 and 1500 (its reply lost,
  // about to be resent). Their records stay, the rest go with their memory.
  rc.done(kInc, DoneAck{2002, {1, 1500}}, kT0);
  ReplyCacheStats s = rc.stats();
  EXPECT_EQ(s.entries, 2u);
  EXPECT_EQ(s.done_acks, 1u);
  EXPECT_LT(s.bytes, (256u << 10) + 400u);
  EXPECT_EQ(rc.admit(kInc, 1500, 1499, kRail1, kT0).what, Admit::kSaved);
  EXPECT_EQ(rc.admit(kInc, 1, 0, kRail1, kT0).what, Admit::kRunning);
  // A late copy of one the DONE covered is dropped, not run again; an older DONE arriving
  // late changes nothing.
  EXPECT_EQ(rc.admit(kInc, 700, 0, kRail1, kT0).what, Admit::kFinished);
  rc.done(kInc, DoneAck{900, {1, 700}}, kT0);
  EXPECT_EQ(rc.admit(kInc, 700, 0, kRail1, kT0).what, Admit::kFinished);
  // The hung one finishes; the client gave up on it meanwhile (the next DONE says so): its
  // reply is not kept.
  rc.done(kInc, DoneAck{2003, {}}, kT0);
  EXPECT_TRUE(rc.finish(kInc, 1, reply(1, "late")));
  EXPECT_EQ(rc.stats().entries, 0u);
  EXPECT_EQ(rc.admit(kInc, 1, 0, kRail1, kT0).what, Admit::kFinished);
}

TEST(ReplyCacheTest, AClientOverItsWindowIsRefusedAndNothingOfItRunsOrGoes) {
  ReplyCacheOptions o;
  o.window = 4;
  ReplyCache rc(o);
  ASSERT_EQ(rc.admit(kInc, 1, 0, kRail1, kT0).what, Admit::kRun);  // hangs
  for (uint64_t x = 2; x <= 4; ++x) {
    ASSERT_EQ(rc.admit(kInc, x, uint32_t(x - 1), kRail1, kT0).what, Admit::kRun);
    rc.finish(kInc, x, reply(x, "ok"));
  }
  // A fifth unacknowledged: refused, not recorded, so a later copy is new again.
  EXPECT_EQ(rc.admit(kInc, 5, 4, kRail1, kT0).what, Admit::kOverWindow);
  EXPECT_EQ(rc.stats().over_window, 1u);
  EXPECT_EQ(rc.stats().entries, 4u);
  // Every one it holds still answers; another client is not held to this one's window.
  EXPECT_EQ(rc.admit(kInc, 3, 2, kRail1, kT0).what, Admit::kSaved);
  EXPECT_EQ(rc.admit(kInc + 1, 5, 0, kRail1, kT0).what, Admit::kRun);
  // Acknowledged, the window has room again.
  rc.done(kInc, DoneAck{6, {1}}, kT0);
  EXPECT_EQ(rc.admit(kInc, 6, 5, kRail1, kT0).what, Admit::kRun);
  EXPECT_EQ(rc.stats().max_entries, 2u);
}

TEST(ReplyCacheTest, ACopyOfAnEvictedOrForgottenClientsRequestIsUnknownNotRunAgain) {
  ReplyCacheOptions o;
  o.idle = seconds(600);
  ReplyCache rc(o);
  rc.admit(kInc, 10, 0, kRail1, kT0);
  rc.finish(kInc, 10, reply(10, "x"));
  rc.admit(kInc + 1, 4, 0, kRail2, kT0);
  EXPECT_EQ(rc.evict(kRail1.from), 1u);  // the NID of kInc's requests
  EXPECT_EQ(rc.admit(kInc, 10, 10, kRail1, kT0).what, Admit::kUnknown);
  EXPECT_EQ(rc.admit(kInc, 9, 9, kRail1, kT0).what, Admit::kUnknown);
  // Newer than anything it had sent: a new request of a client that is back; it runs.
  EXPECT_EQ(rc.admit(kInc, 11, 0, kRail1, kT0).what, Admit::kRun);
  EXPECT_EQ(rc.admit(kInc + 1, 4, 0, kRail2, kT0).what, Admit::kRunning);
  ReplyCacheStats s = rc.stats();
  EXPECT_EQ(s.evicted_clients, 1u);
  EXPECT_EQ(s.unknown, 2u);
  // Forgotten when idle: the same.
  EXPECT_EQ(rc.expire(kT0 + seconds(600)), 2u);
  EXPECT_EQ(rc.admit(kInc + 1, 4, 0, kRail2, kT0 + seconds(601)).what, Admit::kUnknown);
}

// A server that started at kT0 + 100 s: a copy (kFlagResend) it has no record of may have
// reached its previous run, until restart_window has passed -- no copy sent before the
// start comes later than a client's deadline.
TEST(ReplyCacheTest, ACopyWithNoRecordSoonAfterTheStartIsUnknownAndRunsOnceTheWindowPassed) {
  const TimePoint start = kT0 + seconds(100);
  ReplyCacheOptions o;
  o.restart_window = seconds(50);
  ReplyCache rc(o, start);
  // A first copy runs, whenever it comes.
  EXPECT_EQ(rc.admit(kInc, 7, 0, kRail1, start).what, Admit::kRun);
  // A copy of a request the cache has no record of: unknown, not recorded, not run --
  // even of an incarnation it knows (whose new requests came first).
  EXPECT_EQ(rc.admit(kInc, 8, 1, kRail1, start + seconds(1), true).what, Admit::kBeforeStart);
  EXPECT_EQ(rc.admit(kInc + 1, 3, 0, kRail1, start + seconds(49), true).what, Admit::kBeforeStart);
  EXPECT_EQ(rc.stats().before_start, 2u);
  EXPECT_EQ(rc.stats().entries, 1u);
  // A copy of one it has: its saved reply, as at any time.
  ASSERT_TRUE(rc.finish(kInc, 7, reply(7, "seven")));
  EXPECT_EQ(rc.admit(kInc, 7, 0, kRail2, start + seconds(2), true).what, Admit::kSaved);
  // One that arrived damaged and was refused (CORRUPT) did not run here: its copy runs,
  // once -- a second copy is one of a running request.
  rc.refused(kInc, 8, start + seconds(3));
  EXPECT_EQ(rc.admit(kInc, 8, 1, kRail2, start + seconds(3), true).what, Admit::kRun);
  EXPECT_EQ(rc.admit(kInc, 8, 1, kRail2, start + seconds(3), true).what, Admit::kRunning);
  // After the window, a copy with no record is one whose earlier copies never arrived.
  EXPECT_EQ(rc.admit(kInc, 9, 2, kRail1, start + seconds(50), true).what, Admit::kRun);
  EXPECT_EQ(rc.stats().before_start, 2u);
}

TEST(ReplyCacheTest, DoneMessagesDecodeOnlyWhenWellFormed) {
  DoneAck d{100, {3, 7, 99}};
  Buffer b = encode_done(d);
  auto back = decode_done(b.span());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->upper, 100u);
  EXPECT_EQ(back->open, d.open);
  // Truncated, trailing bytes, unsorted, not below the upper bound, too many.
  std::span<const uint8_t> all = b.span();
  EXPECT_FALSE(decode_done(all.first(all.size() - 1)).ok());
  std::string longer(reinterpret_cast<const char*>(all.data()), all.size());
  longer.push_back(0);
  EXPECT_FALSE(decode_done(Buffer::copy_of(longer).span()).ok());
  EXPECT_FALSE(decode_done(encode_done(DoneAck{100, {7, 3}}).span()).ok());
  EXPECT_FALSE(decode_done(encode_done(DoneAck{100, {3, 100}}).span()).ok());
  DoneAck big{1u << 20, {}};
  for (uint64_t x = 0; x <= kMaxDoneOpen; ++x) big.open.push_back(x);
  auto r = decode_done(encode_done(big).span());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kProtocol);
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
