// The op tracker (rpc/op_tracker.h): the history's rules alone, then the engine's RPCs in
// flight at both ends -- a client's queued for a slot and waiting for replies, a server's
// queued for a worker and executing -- and the history they leave, on the manual clock.
#include "rpc/op_tracker.h"

#include <gtest/gtest.h>

#include <map>

#include "rpc/rpc_test_fixture.h"

namespace pfsnet {
namespace {

using namespace std::chrono_literals;

Op ended(uint64_t xid, TimePoint start, Duration took) {
  Op op;
  op.xid = xid;
  op.started = start;
  op.ended = start + took;
  op.phase = OpPhase::kDone;
  return op;
}

TEST(OpHistoryTest, KeepsTheSlowestOfTheWindowAndTurnsAwayTheRestCheaply) {
  OpHistory h(OpHistoryOptions{3, 60s, 1ms});
  const TimePoint t0 = TimePoint{} + 1000s;
  EXPECT_FALSE(h.wants(500us, t0)) << "below the minimum";
  EXPECT_TRUE(h.wants(5ms, t0)) << "room left";
  for (auto [xid, ms] : {std::pair{1, 10}, {2, 30}, {3, 20}, {4, 5}})
    h.add(ended(xid, t0, std::chrono::milliseconds(ms)));
  std::vector<Op> s = h.slowest(t0 + 1s);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].xid, 2u);
  EXPECT_EQ(s[1].xid, 3u);
  EXPECT_EQ(s[2].xid, 1u);
  // Full: only one slower than the fastest kept (10 ms) may enter.
  EXPECT_FALSE(h.wants(9ms, t0 + 2s));
  EXPECT_TRUE(h.wants(11ms, t0 + 2s));
  // Once the kept ones leave the window, anything above the minimum may enter again.
  EXPECT_TRUE(h.wants(2ms, t0 + 61s));
  h.add(ended(5, t0 + 61s, 2ms));
  s = h.slowest(t0 + 62s);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].xid, 5u);
  // Capacity 0: nothing is kept, nothing is wanted.
  OpHistory none(OpHistoryOptions{0, 60s, 0ms});
  EXPECT_FALSE(none.wants(10s, t0));
}

// At run time: off keeps nothing and wants nothing; on again with a smaller capacity keeps
// the slowest of what it had.
TEST(OpHistoryTest, ItsCapacitySetAtRunTimeTurnsItOffAndOnKeepingTheSlowest) {
  OpHistory h(OpHistoryOptions{3, 60s, 1ms});
  const TimePoint t0 = TimePoint{} + 1000s;
  for (auto [xid, ms] : {std::pair{1, 10}, {2, 30}, {3, 20}})
    h.add(ended(xid, t0, std::chrono::milliseconds(ms)));
  h.set_capacity(0);
  EXPECT_EQ(h.capacity(), 0u);
  EXPECT_FALSE(h.wants(10s, t0 + 1s));
  h.add(ended(4, t0, 50ms));
  EXPECT_TRUE(h.slowest(t0 + 1s).empty());
  h.set_capacity(2);
  EXPECT_TRUE(h.wants(5ms, t0 + 1s)) << "room again";
  for (auto [xid, ms] : {std::pair{5, 10}, {6, 30}, {7, 20}})
    h.add(ended(xid, t0, std::chrono::milliseconds(ms)));
  std::vector<Op> s = h.slowest(t0 + 1s);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].xid, 6u);
  EXPECT_EQ(s[1].xid, 7u);
  h.set_capacity(1);  // smaller: the slowest stays
  s = h.slowest(t0 + 1s);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].xid, 6u);
  EXPECT_FALSE(h.wants(20ms, t0 + 1s));
}

TEST(OpBlameTest, TheLargestPartIsToBlame) {
  const TimePoint t0 = TimePoint{} + 100s;
  // 3 s in all: 0.1 s for a slot, 2.8 s at the server of which 2.7 s queued.
  Op::Blame b = op_blame(t0, t0 + 100ms, t0 + 100ms, t0 + 3s, 2800ms, 2700ms, 1, 8);
  EXPECT_EQ(b.slot, 100ms);
  EXPECT_EQ(b.server_queue, 2700ms);
  EXPECT_EQ(b.server_exec, 100ms);
  EXPECT_EQ(b.wire, 100ms);
  EXPECT_EQ(b.verdict, "server: 2.700 s of 3.000 s queued for a worker");
  b = op_blame(t0, t0, t0, t0 + 2s, 1900ms, std::nullopt, 1, 8);
  EXPECT_EQ(b.verdict, "server: 1.900 s of 2.000 s executing");
  b = op_blame(t0, t0, t0 + 10ms, t0 + 1210ms, 200ms, std::nullopt, 3, 8);
  EXPECT_EQ(b.verdict,
            "network: 1.000 s of 1.210 s on the wire (the round trip less the server's time; 3 "
            "attempts)");
  b = op_blame(t0, t0 + 1200ms, t0 + 1200ms, t0 + 1300ms, 50ms, std::nullopt, 1, 4);
  EXPECT_EQ(b.verdict, "client: waited 1.200 s of 1.300 s for a max_rpcs_in_flight slot (4)");
  b = op_blame(t0, t0, t0 + 900ms, t0 + 1s, 10ms, std::nullopt, 1, 4);
  EXPECT_EQ(b.verdict, "client: waited 900.0 ms of 1.000 s for a connection or credits");
}

// The absolute trigger alone (health.slow_ops_s).
SlowOpsRule over(Duration threshold) {
  SlowOpsRule r;
  r.threshold = threshold;
  return r;
}

TEST(SlowOpsTest, OpsOverTheThresholdAreCountedAndTheOldestExplained) {
  const TimePoint t0 = TimePoint{} + 1000s;
  auto op = [&](uint64_t xid, bool client, Duration age, OpPhase phase, Duration in_phase) {
    Op o;
    o.xid = xid;
    o.client = client;
    o.type = 20;
    o.peer = *Nid::parse("198.18.0.2@tcp");
    o.started = t0 - age;
    o.phase = phase;
    o.phase_since = t0 - in_phase;
    return o;
  };
  auto name = [](uint32_t t) { return t == 20 ? std::string("BLOCK_WRITE") : "?"; };
  std::vector<Op> ops = {op(1, false, 29s, OpPhase::kQueued, 29s),
                         op(2, false, 41s, OpPhase::kQueued, 40s),
                         op(3, false, 35s, OpPhase::kExecuting, 2s)};
  ops[1].job = "slurm.42";
  ops[1].detail = "waiting for a worker: 4 of 4 busy, 16 request(s) queued (rpc.workers)";
  std::optional<SlowOps> s = find_slow_ops(ops, t0, over(30s), name);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->count, 2u) << "29 s is under the threshold";
  EXPECT_EQ(s->oldest.xid, 2u);
  EXPECT_EQ(s->since, t0 - 41s + 30s);
  EXPECT_EQ(s->evidence,
            "2 RPC(s) in flight for over 30.000 s; the oldest, BLOCK_WRITE xid 2 from "
            "198.18.0.2@tcp job slurm.42, for 41.000 s: server: queued 40.000 s for a worker "
            "(waiting for a worker: 4 of 4 busy, 16 request(s) queued (rpc.workers))");
  // A client's: it cannot tell the wire from the server.
  ops = {op(9, true, 31s, OpPhase::kReply, 30s)};
  ops[0].attempts = 2;
  s = find_slow_ops(ops, t0, over(30s), name);
  ASSERT_TRUE(s);
  EXPECT_NE(s->evidence.find("BLOCK_WRITE xid 9 to 198.18.0.2@tcp, for 31.000 s: network or "
                             "server: waiting 30.000 s for the reply from 198.18.0.2@tcp "
                             "(attempt 2)"),
            std::string::npos)
      << s->evidence;
  EXPECT_EQ(op_verdict_now(op(1, true, 5s, OpPhase::kNetwork, 4s), t0),
            "client: waiting 4.000 s for a connection, credits or the write to 198.18.0.2@tcp");
  // None old enough, or the rule off.
  EXPECT_FALSE(find_slow_ops(ops, t0, over(32s), name));
  EXPECT_FALSE(find_slow_ops(ops, t0, over(0s), name));
  EXPECT_FALSE(find_slow_ops({}, t0, over(30s), name));
}

// The second trigger: an op in flight over N x its type's p99 (and the floor), long before
// the absolute threshold; a type without a p99 (too few ran) only by the threshold.
TEST(SlowOpsTest, AnOpOverNTimesItsTypesP99IsSlowBeforeTheThreshold) {
  const TimePoint t0 = TimePoint{} + 1000s;
  auto op = [&](uint64_t xid, bool client, uint32_t type, Duration age) {
    Op o;
    o.xid = xid;
    o.client = client;
    o.type = type;
    o.peer = *Nid::parse("198.18.0.2@tcp");
    o.started = t0 - age;
    o.phase = client ? OpPhase::kReply : OpPhase::kExecuting;
    o.phase_since = o.started;
    return o;
  };
  auto name = [](uint32_t t) { return t == 20 ? std::string("BLOCK_WRITE") : "PING"; };
  SlowOpsRule rule = over(30s);
  rule.p99_factor = 10;
  rule.p99_min = 1s;
  // BLOCK_WRITE's p99: 200 ms as a client, 150 ms as a server; PING's is not known.
  rule.type_p99 = [](bool client, uint32_t type) -> std::optional<Duration> {
    if (type != 20) return std::nullopt;
    return client ? Duration(200ms) : Duration(150ms);
  };
  // 10 x 200 ms = 2 s: a client's write 2.5 s old is slow, one of 1.9 s is not; a PING of
  // 20 s is not (no p99, under 30 s); the server's write of 1.6 s is (10 x 150 ms = 1.5 s).
  std::vector<Op> ops = {op(1, true, 20, 1900ms), op(2, true, 20, 2500ms), op(3, true, 21, 20s)};
  std::optional<SlowOps> s = find_slow_ops(ops, t0, rule, name);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->count, 1u);
  EXPECT_EQ(s->oldest.xid, 2u);
  EXPECT_EQ(s->since, t0 - 2500ms + 2s);
  EXPECT_NE(
      s->evidence.find("1 RPC(s) in flight for over 30.000 s or over 10 x their type's p99 "
                       "(and 1.000 s); the oldest, BLOCK_WRITE (its type's p99 200.0 ms) xid 2 "
                       "to 198.18.0.2@tcp, for 2.500 s: "),
      std::string::npos)
      << s->evidence;
  s = find_slow_ops({op(4, false, 20, 1600ms)}, t0, rule, name);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->since, t0 - 1600ms + 1500ms);
  // The floor: with a p99 of 20 ms, 10 x is 200 ms, but nothing is slow under 1 s.
  rule.type_p99 = [](bool, uint32_t) -> std::optional<Duration> { return 20ms; };
  EXPECT_FALSE(find_slow_ops({op(5, true, 20, 900ms)}, t0, rule, name));
  s = find_slow_ops({op(5, true, 20, 1100ms), op(6, true, 21, 40s)}, t0, rule, name);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->count, 2u);
  EXPECT_EQ(s->oldest.xid, 6u) << "the oldest is named, whichever trigger made it slow";
  EXPECT_EQ(s->since, t0 - 40s + 1s) << "since the first crossed its limit (1 s: the floor)";
  // The factor 0: that trigger off; both off: nothing.
  rule.p99_factor = 0;
  EXPECT_FALSE(find_slow_ops({op(5, true, 20, 29s)}, t0, rule, name));
  rule.threshold = 0s;
  EXPECT_FALSE(find_slow_ops({op(5, true, 20, 100s)}, t0, rule, name));
}

// What TCP says of what a client wrote to its server decides whose a wait for the reply
// is: lost segments or a standing queue -> network, all acknowledged -> the server (whose
// host has it; a read's reply may be on its way, so not then), a closed window -> a server
// not reading, the rest -> either.
TEST(OpTrackerTest, AWaitForTheReplyIsBlamedByWhatTcpSaysOfTheRequest) {
  using K = ReplyWait::Kind;
  EXPECT_EQ(reply_wait_kind(1, 0, 3, 0, false, 900, 100), K::kLosing);
  EXPECT_EQ(reply_wait_kind(0, 2, 3, 0, false, 900, 100), K::kLosing);
  EXPECT_EQ(reply_wait_kind(0, 0, 0, 65536, true, 900, 100), K::kStalled);
  // A queue stands 2 ms and a quarter of the lowest RTT above it (health's judgement).
  EXPECT_EQ(reply_wait_kind(0, 0, 40, 0, false, 2200, 100), K::kQueue);
  EXPECT_EQ(reply_wait_kind(0, 0, 40, 0, false, 63000, 50000), K::kQueue);
  EXPECT_EQ(reply_wait_kind(0, 0, 40, 0, false, 60000, 50000), K::kUnacked);
  EXPECT_EQ(reply_wait_kind(0, 0, 0, 0, false, 63000, 50000), K::kDelivered);  // nothing out
  EXPECT_EQ(reply_wait_kind(0, 0, 0, 141, false, 35, 7), K::kUnacked);
  EXPECT_EQ(reply_wait_kind(0, 0, 0, 0, false, 35, 7), K::kDelivered);
  const TimePoint t0 = TimePoint(std::chrono::seconds(1000));
  Op op;
  op.peer = *Nid::parse("198.18.0.2@tcp");
  op.phase = OpPhase::kReply;
  op.phase_since = t0 - 12s;
  op.reply_wait = {K::kDelivered,
                   "TCP on 198.18.0.1@tcp -> 198.18.0.2@tcp: every byte written acknowledged "
                   "(srtt 35 us, lowest 7 us)"};
  EXPECT_EQ(op_verdict_now(op, t0),
            "server: waiting 12.000 s for the reply from 198.18.0.2@tcp, whose host has the "
            "request (TCP on 198.18.0.1@tcp -> 198.18.0.2@tcp: every byte written acknowledged "
            "(srtt 35 us, lowest 7 us))");
  op.reply_bulk = 1 << 20;  // a read: its reply may be coming back
  EXPECT_EQ(op_verdict_now(op, t0).rfind("network or server: waiting 12.000 s", 0), 0u);
  EXPECT_NE(op_verdict_now(op, t0).find("its reply (up to 1048576 B) may be on its way"),
            std::string::npos);
  op.reply_bulk = 0;
  for (K k : {K::kLosing, K::kQueue}) {
    op.reply_wait.kind = k;
    EXPECT_EQ(op_verdict_now(op, t0).rfind("network: waiting 12.000 s for the reply", 0), 0u);
  }
  op.reply_wait.kind = K::kStalled;
  EXPECT_NE(op_verdict_now(op, t0).find("server: waiting 12.000 s for the reply from "
                                        "198.18.0.2@tcp, which does not read its connection"),
            std::string::npos);
  op.reply_wait = {};  // no TCP (the in-memory transport, RDMA)
  EXPECT_EQ(op_verdict_now(op, t0),
            "network or server: waiting 12.000 s for the reply from 198.18.0.2@tcp");
}

TEST(OpBoardTest, ARequestIsListedUntilItsTicketGoesAndASlowOneIsKeptWithItsTimeline) {
  ManualClock clock;
  OpHistory h(OpHistoryOptions{5, 60s, 1ms});
  OpBoard board(clock, h);
  Op op;
  op.xid = 7;
  op.started = clock.now();
  {
    OpBoard::Ticket t = board.enter(op, OpPhase::kQueued);
    ASSERT_EQ(board.in_flight().size(), 1u);
    EXPECT_EQ(board.in_flight()[0].phase, OpPhase::kQueued);
    EXPECT_FALSE(board.in_flight()[0].client);
    clock.advance(2s);
    t.executing();
    EXPECT_EQ(board.in_flight()[0].phase, OpPhase::kExecuting);
    EXPECT_EQ(board.in_flight()[0].phase_since, clock.now());
    clock.advance(1s);
    t.ended(Status(Code::kRemoteError, "disk on fire"));
  }
  EXPECT_TRUE(board.in_flight().empty());
  // An asynchronous handler's request executes from its arrival: no worker start to show.
  {
    op.started = clock.now();  // answered at once: too fast for the history
    OpBoard::Ticket t = board.enter(op, OpPhase::kExecuting);
    EXPECT_EQ(board.in_flight()[0].phase, OpPhase::kExecuting);
    EXPECT_EQ(board.in_flight()[0].handler_at, TimePoint{});
  }
  std::vector<Op> s = h.slowest(clock.now());
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].ended - s[0].started, 3s);
  EXPECT_EQ(s[0].status.code(), Code::kRemoteError);
  ASSERT_EQ(s[0].events.size(), 3u);
  EXPECT_EQ(s[0].events[0].what, "arrived");
  EXPECT_EQ(s[0].events[1].what, "handler started");
  EXPECT_EQ(s[0].events[1].at - s[0].started, 2s);
  EXPECT_EQ(s[0].events[2].what, "replied");
}

// An asynchronous handler that waits for a resource of its own says so (Responder::
// waiting_for): the request is in phase "waiting" with what it waits for, blamed on the
// server by its verdict, and its timeline keeps the wait.
TEST(OpBoardTest, AHandlerWaitingForAResourceIsInPhaseWaitingAndKeepsTheWaitInItsTimeline) {
  ManualClock clock;
  OpHistory h(OpHistoryOptions{5, 60s, 1ms});
  OpBoard board(clock, h);
  Op op;
  op.xid = 8;
  op.started = clock.now();
  {
    auto t = std::make_shared<OpBoard::Ticket>(board.enter(op, OpPhase::kExecuting));
    Responder resp([](RpcResponse&&) {},
                   [t](std::string_view what) {
                     if (what.empty())
                       t->resumed();
                     else
                       t->waiting(std::string(what));
                   });
    resp.resumed();  // not waiting: nothing changes
    EXPECT_EQ(board.in_flight()[0].phase, OpPhase::kExecuting);
    clock.advance(1s);
    resp.waiting_for("a block buffer: all 4 of 64 KiB in use, 2 request(s) ahead");
    clock.advance(2500ms);
    Op now = board.in_flight()[0];
    EXPECT_EQ(now.phase, OpPhase::kWaiting);
    EXPECT_STREQ(op_phase_name(now.phase), "waiting");
    EXPECT_EQ(op_verdict_now(now, clock.now()),
              "server: waiting 2.500 s for a block buffer: all 4 of 64 KiB in use, 2 request(s) "
              "ahead");
    resp.resumed();
    EXPECT_EQ(board.in_flight()[0].phase, OpPhase::kExecuting);
    EXPECT_EQ(board.in_flight()[0].detail, "");
    clock.advance(500ms);
    resp.reply(RpcResponse{});
    resp.waiting_for("after the reply");  // answered: nothing
  }
  std::vector<Op> s = h.slowest(clock.now());
  ASSERT_EQ(s.size(), 1u);
  ASSERT_EQ(s[0].events.size(), 4u);
  EXPECT_EQ(s[0].events[0].what, "arrived");
  EXPECT_EQ(s[0].events[1].what,
            "waiting for a block buffer: all 4 of 64 KiB in use, 2 request(s) ahead");
  EXPECT_EQ(s[0].events[1].at - s[0].started, 1s);
  EXPECT_EQ(s[0].events[2].what, "resumed after 2.500 s");
  EXPECT_EQ(s[0].events[3].what, "replied");
}

}  // namespace

namespace rpc_test {
namespace {

std::vector<Op> side(const std::vector<Op>& ops, bool client) {
  std::vector<Op> v;
  for (const Op& op : ops)
    if (op.client == client) v.push_back(op);
  return v;
}

TEST_F(RpcTest, OpsInFlightShowEachEndsPhaseWithTheJobAndTraceAndLeaveTheirTimelines) {
  client_.rpc.set_max_rpcs_in_flight(3);
  Replies r;
  CallOptions co;
  co.job_id = "job7";
  co.trace = *TraceContext::parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  for (int i = 0; i < 4; ++i) client_.rpc.call_async(b_, kBlock, Buffer(), nullptr, r.cb(), co);
  // The server's two workers hold two requests, the third waits for one; the client's
  // fourth waits for a slot.
  auto server_ops = [&] { return server_.rpc.ops_in_flight(); };
  pump_until([&] {
    std::vector<Op> s = server_ops();
    return s.size() == 3 && std::count_if(s.begin(), s.end(), [](const Op& o) {
                              return o.phase == OpPhase::kExecuting;
                            }) == 2;
  });
  clock_.advance(2s);
  std::vector<Op> c = side(client_.rpc.ops_in_flight(), true);
  ASSERT_EQ(c.size(), 4u);
  int replies = 0, slots = 0;
  for (const Op& op : c) {
    EXPECT_EQ(op.peer, b_);
    EXPECT_EQ(op.type, kBlock);
    EXPECT_EQ(op.job, "job7");
    ASSERT_TRUE(op.trace);
    EXPECT_EQ(*op.trace, *co.trace);
    EXPECT_EQ(clock_.now() - op.started, 2s);
    if (op.phase == OpPhase::kReply) {
      ++replies;
      EXPECT_NE(op.detail.find("waiting for the reply from 10.0.0.2@tcp"), std::string::npos)
          << op.detail;
    } else {
      ++slots;
      EXPECT_EQ(op.phase, OpPhase::kSlot);
      EXPECT_NE(op.detail.find("queued behind 3 RPC(s)"), std::string::npos) << op.detail;
      EXPECT_NE(op.detail.find("max_rpcs_in_flight 3"), std::string::npos) << op.detail;
    }
  }
  EXPECT_EQ(replies, 3);
  EXPECT_EQ(slots, 1);
  // The server's: the same trace (one RPC, two records), queued and executing.
  std::vector<Op> s = side(server_ops(), false);
  ASSERT_EQ(s.size(), 3u);
  int queued = 0;
  for (const Op& op : s) {
    EXPECT_EQ(op.peer, a_);
    EXPECT_EQ(op.job, "job7");
    ASSERT_TRUE(op.trace);
    EXPECT_EQ(op.trace->trace_id, co.trace->trace_id);
    if (op.phase == OpPhase::kQueued) {
      ++queued;
      EXPECT_NE(op.detail.find("waiting for a worker: 2 of 2 busy, 1 request(s) queued"),
                std::string::npos)
          << op.detail;
    }
  }
  EXPECT_EQ(queued, 1);

  release_.open();
  pump_until([&] { return r.got.size() == 4; });
  ASSERT_EQ(r.got.size(), 4u);
  EXPECT_TRUE(client_.rpc.ops_in_flight().empty());
  pump_until([&] { return server_ops().empty(); });
  EXPECT_TRUE(server_ops().empty());
  // Each end keeps them, slowest first, with timelines.
  std::vector<Op> ch = client_.rpc.ops_history();
  ASSERT_EQ(side(ch, true).size(), 4u);
  const Op& slowest = ch[0];
  EXPECT_TRUE(slowest.client);
  EXPECT_GE(slowest.ended - slowest.started, 2s);
  EXPECT_TRUE(slowest.status.ok()) << slowest.status.to_string();
  ASSERT_GE(slowest.events.size(), 3u);
  EXPECT_EQ(slowest.events.front().what, "submitted");
  EXPECT_NE(slowest.events.back().what.find("reply received; server: "), std::string::npos)
      << slowest.events.back().what;
  // Who is to blame, per RPC: the three the server held (two executing, one queued for a
  // worker) and the one that waited for a slot at the client.
  std::map<std::string, int> verdicts;
  for (const Op& op : side(ch, true)) {
    ASSERT_TRUE(op.blame);
    verdicts[op.blame->verdict]++;
  }
  EXPECT_EQ(verdicts["server: 2.000 s of 2.000 s executing"], 2)
      << ::testing::PrintToString(verdicts);
  EXPECT_EQ(verdicts["server: 2.000 s of 2.000 s queued for a worker"], 1)
      << ::testing::PrintToString(verdicts);
  EXPECT_EQ(verdicts["client: waited 2.000 s of 2.000 s for a max_rpcs_in_flight slot (3)"], 1)
      << ::testing::PrintToString(verdicts);
  std::vector<Op> sh = side(server_.rpc.ops_history(), false);
  ASSERT_EQ(sh.size(), 3u) << "the fourth arrived after the clock moved: faster than 1 ms";
  EXPECT_EQ(sh[0].events.front().what, "arrived");
  EXPECT_EQ(sh[0].events.back().what, "replied");
}

// A slow link: the round trip is the network's, and the verdict says so.
// A client's RPC the net holds before writing it says for what: a window of one peer credit
// held by the request the server runs (client: credits), a connect that does not complete
// (network).
TEST_F(RpcTest, AnUnsentRpcSaysWhetherItWaitsForCreditsOrAConnection) {
  const Nid c = nid("10.0.0.3@tcp");
  Node tight(hub_, clock_, c, /*max_in_flight=*/4, /*peer_credits=*/1);
  tight.rpc.define_type(kBlock, "BLOCK");
  auto r = std::make_shared<Replies>();
  auto cb = [r](RpcReply&& x) { r->got.push_back(std::move(x)); };
  for (int i = 0; i < 2; ++i) tight.rpc.call_async(b_, kBlock, Buffer(), nullptr, cb);
  pump_until([&] { return server_.rpc.ops_in_flight().size() == 1; });
  clock_.advance(1500ms);
  std::vector<Op> ops = side(tight.rpc.ops_in_flight(), true);
  ASSERT_EQ(ops.size(), 2u);
  const Op& waiting = ops[0].phase == OpPhase::kNetwork ? ops[0] : ops[1];
  ASSERT_EQ(waiting.phase, OpPhase::kNetwork);
  EXPECT_EQ(waiting.net_wait, SendWait::Kind::kCredits);
  EXPECT_EQ(waiting.detail,
            "waiting for peer_credits on 10.0.0.3@tcp -> 10.0.0.2@tcp (1 sent, none credited "
            "back yet; lnet.peer_credits 1)");
  EXPECT_EQ(op_verdict_now(waiting, clock_.now()),
            "client: waiting 1.500 s for credits (" + waiting.detail + ")");
  release_.open();
  pump_until([&] { return r->got.size() == 2; });
  ASSERT_EQ(r->got.size(), 2u);

  // A connect that hangs (the link cut: connects wait, neither fails).
  const Nid d = nid("10.0.0.4@tcp");
  Node far(hub_, clock_, d);
  hub_.set_cut(c, d, true);
  tight.rpc.call_async(d, kEcho, Buffer(), nullptr, cb);
  hub_.pump();
  clock_.advance(2s);
  ops = side(tight.rpc.ops_in_flight(), true);
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0].phase, OpPhase::kNetwork);
  EXPECT_EQ(ops[0].net_wait, SendWait::Kind::kConnect);
  EXPECT_EQ(ops[0].detail, "connecting 10.0.0.3@tcp -> 10.0.0.4@tcp");
  EXPECT_EQ(op_verdict_now(ops[0], clock_.now()),
            "network: waiting 2.000 s to connect to 10.0.0.4@tcp (connecting 10.0.0.3@tcp -> "
            "10.0.0.4@tcp)");
  hub_.set_cut(c, d, false);
  pump_until([&] { return r->got.size() == 3; });
  EXPECT_EQ(r->got.size(), 3u);
}

TEST_F(RpcTest, ASlowLinkIsBlamedOnTheNetwork) {
  Replies first;  // connected before the link slows
  client_.rpc.call_async(b_, kEcho, Buffer(), nullptr, first.cb(), CallOptions{});
  pump_until([&] { return !first.got.empty(); });
  ASSERT_EQ(first.got.size(), 1u);
  hub_.set_delay(a_, b_, 300ms);
  hub_.set_delay(b_, a_, 300ms);
  // The probe mesh's view of the path (MeshService::path_view), set beside the verdict.
  std::vector<std::pair<Nid, Nid>> asked;
  client_.rpc.set_path_view([&](const Nid& local, const Nid& peer) {
    asked.emplace_back(local, peer);
    return std::string("mesh on the path: p99 8.0 x its median");
  });
  Replies r;
  client_.rpc.call_async(b_, kEcho, Buffer(), nullptr, r.cb(), CallOptions{});
  for (int i = 0; i < 100 && r.got.empty(); ++i) {
    clock_.advance(50ms);
    hub_.pump();
  }
  ASSERT_EQ(r.got.size(), 1u);
  std::vector<Op> h = client_.rpc.ops_history();
  ASSERT_FALSE(h.empty());
  ASSERT_TRUE(h[0].blame);
  EXPECT_GE(h[0].blame->wire, 600ms);
  EXPECT_EQ(h[0].blame->verdict.rfind("network: ", 0), 0u) << h[0].blame->verdict;
  EXPECT_TRUE(h[0].blame->verdict.ends_with("; mesh on the path: p99 8.0 x its median"))
      << h[0].blame->verdict;
  ASSERT_EQ(asked.size(), 1u) << "asked for the slow RPC alone, not the fast first";
  EXPECT_EQ(asked[0], std::make_pair(a_, b_));
  client_.rpc.set_path_view(nullptr);
}

}  // namespace
}  // namespace rpc_test
}  // namespace pfsnet
