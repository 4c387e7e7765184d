// RpcEngine over the in-memory transport with a manual clock: xid matching, execution
// time, bulk both ways, max_rpcs_in_flight, deadlines, errors, shutdown.
#include "rpc/rpc_engine.h"

#include <gtest/gtest.h>

#include <thread>

#include "base/mutex.h"
#include "rpc/call_batch.h"
#include "rpc/rpc_test_fixture.h"

namespace pfsnet {
namespace {

using namespace rpc_test;

// A call's job id and trace context reach the server's handler, and a worker's reply says
// how long the request waited for it -- on the version-2 connection of two nodes of this
// build; a node that speaks version 1 sends and receives none of them. A job id of another
// form fails the call unsent.
TEST_F(RpcTest, JobIdAndTraceReachTheHandlerAndTheQueueTimeComesBackOnVersion2Only) {
  constexpr uint32_t kTagged = 920;  // no type of the registry (msg_types.h) has it
  int served = 0;
  auto says = [&served](RpcRequest& r) {
    ++served;
    RpcResponse resp;
    std::string s = (r.job_id.empty() ? "-" : r.job_id) + " " +
                    (r.trace ? r.trace->to_string() : std::string("-"));
    resp.payload = Buffer::copy_of(std::string_view(s));
    return resp;
  };
  server_.rpc.handle(kTagged, "TAGGED", says, HandlerMode::kWorker);
  const std::string tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  CallOptions co;
  co.job_id = "slurm.4242.0";
  co.trace = *TraceContext::parse(tp);
  Replies r, echo;
  client_.rpc.call_async(b_, kTagged, Buffer(), nullptr, r.cb(), co);
  client_.rpc.call_async(b_, kEcho, Buffer::copy_of(std::string_view("x")), nullptr, echo.cb(), co);
  pump_until([&] { return r.got.size() == 1 && echo.got.size() == 1; });
  ASSERT_EQ(r.got.size(), 1u);
  ASSERT_TRUE(r.got[0].status.ok()) << r.got[0].status.to_string();
  EXPECT_EQ(r.got[0].payload.view(), "slurm.4242.0 " + tp);
  ASSERT_TRUE(r.got[0].queue_time.has_value());  // a worker ran it
  EXPECT_EQ(r.got[0].queue_time->count(), 0);    // the manual clock stood still
  ASSERT_EQ(echo.got.size(), 1u);
  EXPECT_TRUE(echo.got[0].status.ok());
  EXPECT_FALSE(echo.got[0].queue_time.has_value());  // an inline handler waits for nothing

  // A job id of another form: refused here, never sent.
  Replies bad;
  CallOptions spaced;
  spaced.job_id = "my job";
  client_.rpc.call_async(b_, kTagged, Buffer(), nullptr, bad.cb(), spaced);
  pump_until([&] { return bad.got.size() == 1; });
  ASSERT_EQ(bad.got.size(), 1u);
  EXPECT_EQ(bad.got[0].status.code(), Code::kInvalidArgument);
  EXPECT_NE(bad.got[0].status.message().find("printable"), std::string::npos);
  EXPECT_EQ(served, 1);

  // A version-1 node: its connection to the server speaks 1, and carries none of them.
  Node old(hub_, clock_, nid("10.0.0.3@tcp"), 2, 8, 0, 1);
  Replies o;
  old.rpc.call_async(b_, kTagged, Buffer(), nullptr, o.cb(), co);
  pump_until([&] { return o.got.size() == 1; });
  ASSERT_EQ(o.got.size(), 1u);
  ASSERT_TRUE(o.got[0].status.ok()) << o.got[0].status.to_string();
  EXPECT_EQ(o.got[0].payload.view(), "- -");
  EXPECT_FALSE(o.got[0].queue_time.has_value());
  EXPECT_EQ(served, 2);
}

TEST_F(RpcTest, AnAsyncHandlerAnswersLaterOrCancelsWhenDropped) {
  constexpr uint32_t kLater = 14;
  std::vector<Responder> held;
  server_.rpc.handle_async(kLater, "LATER", [&](RpcRequest& req, Responder resp) {
    if (req.payload.view() == "drop") return;  // destroyed unanswered: kCancelled
    held.push_back(std::move(resp));
  });
  Replies r;
  for (const char* p : {"drop", "a", "b"})  // the client has 2 in flight at most
    client_.rpc.call_async(b_, kLater, Buffer::copy_of(std::string_view(p)), nullptr, r.cb());
  hub_.pump();
  ASSERT_EQ(r.got.size(), 1u);
  EXPECT_EQ(r.got[0].status.code(), Code::kCancelled);
  ASSERT_EQ(held.size(), 2u);
  clock_.advance(7ms);
  RpcResponse resp;
  resp.payload = Buffer::copy_of(std::string_view("later"));
  held[1].reply(std::move(resp));
  held[1].reply(RpcResponse{});  // a second reply does nothing
  EXPECT_TRUE(held[1].answered());
  hub_.pump();
  ASSERT_EQ(r.got.size(), 2u);
  EXPECT_TRUE(r.got[1].status.ok());
  EXPECT_EQ(r.got[1].payload.view(), "later");
  EXPECT_EQ(r.got[1].exec_time, 7ms);  // execution runs to the reply
  held.clear();                        // the last one, unanswered: kCancelled
  hub_.pump();
  ASSERT_EQ(r.got.size(), 3u);
  EXPECT_EQ(r.got[2].status.code(), Code::kCancelled);
}

// A batch of calls waited for together: each reply in the order added, whatever order
// they end in; one not ended by the deadline reads as a timeout, and its late end changes
// nothing.
TEST_F(RpcTest, ACallBatchGivesEveryReplyInOrderAndTimesOutWhatIsLate) {
  constexpr uint32_t kLater = 14;
  std::vector<Responder> held;
  server_.rpc.handle_async(kLater, "LATER",
                           [&](RpcRequest&, Responder resp) { held.push_back(std::move(resp)); });
  auto batch = std::make_unique<CallBatch>(client_.rpc);
  EXPECT_EQ(batch->add(b_, kLater, Buffer(), nullptr, {}), 0u);
  EXPECT_EQ(batch->add(b_, kEcho, Buffer::copy_of(std::string_view("one")), nullptr, {}), 1u);
  EXPECT_EQ(batch->add(b_, kThrow, Buffer(), nullptr, {}), 2u);
  pump_until([&] { return held.size() == 1; });
  hub_.pump();  // the echo and the throw end
  EXPECT_FALSE(batch->wait(0ms)) << "the held call has not ended";
  held[0].reply(RpcResponse{Status::Ok(), Buffer::copy_of(std::string_view("late")), {}});
  pump_until([&] { return batch->wait(0ms); });
  ASSERT_TRUE(batch->wait(0ms));
  auto rs = batch->take();
  ASSERT_EQ(rs.size(), 3u);
  EXPECT_EQ(rs[0].payload.view(), "late");  // ended last, first in the order added
  EXPECT_EQ(rs[1].payload.view(), "one");
  EXPECT_EQ(rs[2].status.code(), Code::kRemoteError);
  // A call that has not ended by the deadline: a timeout; its end after the batch is gone
  // changes nothing.
  batch = std::make_unique<CallBatch>(client_.rpc);
  batch->add(b_, kLater, Buffer(), nullptr, {});
  pump_until([&] { return held.size() == 2; });
  EXPECT_FALSE(batch->wait(0ms));  // its deadline, on the engine's clock: now
  rs = batch->take();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].status.code(), Code::kTimeout);
  batch.reset();
  held[1].reply(RpcResponse{});
  hub_.pump();
}

// An urgent call (a token's) does not wait for a max_rpcs_in_flight slot behind the I/O it
// may be what unblocks.
TEST_F(RpcTest, AnUrgentCallGoesPastFullSlots) {
  constexpr uint32_t kLater = 14;
  std::vector<Responder> held;
  server_.rpc.handle_async(kLater, "LATER",
                           [&](RpcRequest&, Responder resp) { held.push_back(std::move(resp)); });
  Replies slow, queued, urgent;
  for (int i = 0; i < 2; ++i)  // the client's 2 slots, held
    client_.rpc.call_async(b_, kLater, Buffer(), nullptr, slow.cb());
  client_.rpc.call_async(b_, kEcho, Buffer::copy_of(std::string_view("queued")), nullptr,
                         queued.cb());
  CallOptions co;
  co.urgent = true;
  client_.rpc.call_async(b_, kEcho, Buffer::copy_of(std::string_view("urgent")), nullptr,
                         urgent.cb(), co);
  pump_until([&] { return held.size() == 2 && !urgent.got.empty(); });
  ASSERT_EQ(urgent.got.size(), 1u);
  EXPECT_EQ(urgent.got[0].payload.view(), "urgent");
  EXPECT_TRUE(queued.got.empty()) << "the ordinary call waits for a slot";
  for (Responder& r : held) r.reply(RpcResponse{});
  pump_until([&] { return !queued.got.empty(); });
  ASSERT_EQ(queued.got.size(), 1u);
  EXPECT_EQ(queued.got[0].payload.view(), "queued");
}

// A waiting request served with AsyncCredit::kReturned leaves its sender's window open: a
// peer's whole window of them waiting (peer_credits 8), its next request still gets in. One
// that holds its credit (the default) fills the window: the next waits until one answers.
TEST_F(RpcTest, WaitingRequestsThatReturnTheirCreditsLeaveThePeersWindowOpen) {
  constexpr uint32_t kHeldType = 14, kFreeType = 15;
  std::vector<Responder> held, freed;
  server_.rpc.handle_async(kHeldType, "HELD",
                           [&](RpcRequest&, Responder resp) { held.push_back(std::move(resp)); });
  server_.rpc.handle_async(
      kFreeType, "FREE", [&](RpcRequest&, Responder resp) { freed.push_back(std::move(resp)); },
      Execution::kOnce, AsyncCredit::kReturned);
  CallOptions co;
  co.urgent = true;  // past the client's 2 slots: only credits stand in the way
  Replies waiting, through, behind;
  for (int i = 0; i < 8; ++i)
    client_.rpc.call_async(b_, kFreeType, Buffer(), nullptr, waiting.cb(), co);
  client_.rpc.call_async(b_, kEcho, Buffer::copy_of(std::string_view("through")), nullptr,
                         through.cb(), co);
  pump_until([&] { return freed.size() == 8 && !through.got.empty(); });
  ASSERT_EQ(freed.size(), 8u);
  ASSERT_EQ(through.got.size(), 1u) << "8 waiting requests closed the window";
  EXPECT_EQ(through.got[0].payload.view(), "through");
  for (Responder& r : freed) r.reply(RpcResponse{});
  pump_until([&] { return waiting.got.size() == 8; });
  ASSERT_EQ(waiting.got.size(), 8u);
  for (const RpcReply& r : waiting.got) EXPECT_TRUE(r.status.ok()) << r.status.to_string();
  // Held credits: the ninth request waits for one of the eight to be answered.
  for (int i = 0; i < 8; ++i)
    client_.rpc.call_async(b_, kHeldType, Buffer(), nullptr, waiting.cb(), co);
  client_.rpc.call_async(b_, kEcho, Buffer::copy_of(std::string_view("behind")), nullptr,
                         behind.cb(), co);
  pump_until([&] { return held.size() == 8; });
  ASSERT_EQ(held.size(), 8u);
  for (int i = 0; i < 100; ++i) hub_.pump();
  EXPECT_TRUE(behind.got.empty()) << "got past a full window";
  held[0].reply(RpcResponse{});
  pump_until([&] { return !behind.got.empty(); });
  ASSERT_EQ(behind.got.size(), 1u);
  EXPECT_EQ(behind.got[0].payload.view(), "behind");
  for (Responder& r : held) r.reply(RpcResponse{});
  pump_until([&] { return waiting.got.size() == 16; });  // none left to land after the test
  EXPECT_EQ(waiting.got.size(), 16u);
}

TEST_F(RpcTest, RepliesMatchTheirRequests) {
  Replies r;
  for (int i = 0; i < 20; ++i) {
    std::string s = "request-" + std::to_string(i);
    client_.rpc.call_async(b_, kEcho, Buffer::copy_of(std::string_view(s)), nullptr,
                           [&r, s](RpcReply&& rep) {
                             EXPECT_TRUE(rep.status.ok()) << rep.status.to_string();
                             EXPECT_EQ(rep.payload.view(), s);
                             r.got.push_back(std::move(rep));
                           });
  }
  hub_.pump();
  EXPECT_EQ(r.got.size(), 20u);
  EXPECT_EQ(client_.rpc.pending(), 0u);
}

TEST_F(RpcTest, ExecutionTimeTravelsInTheReply) {
  Replies r;
  client_.rpc.call_async(b_, kSlow, Buffer(), nullptr, r.cb());
  hub_.pump();
  ASSERT_EQ(r.got.size(), 1u);
  EXPECT_TRUE(r.got[0].status.ok());
  EXPECT_EQ(r.got[0].exec_time, 3ms);
  EXPECT_EQ(r.got[0].round_trip(), 3ms);  // the in-memory wire takes no time
  EXPECT_EQ(r.got[0].latency(), 0ms);
  EXPECT_EQ(r.got[0].bytes_sent, kHeaderSize);
  EXPECT_EQ(r.got[0].bytes_received, kHeaderSize);
}

TEST_F(RpcTest, BulkWriteAndReadEveryByte) {
  Replies r;
  for (size_t n : {size_t(0), size_t(1), size_t(64), size_t(65536), size_t(2 << 20)}) {
    client_.rpc.call_async(b_, kMsgPing, ping_payload(std::nullopt),
                           make_bulk(make_ping_pattern(n)),
                           r.cb());  // echo: write then read back
    client_.rpc.call_async(b_, kMsgPing, ping_payload(uint32_t(n)), nullptr, r.cb());  // read
  }
  hub_.pump();
  ASSERT_EQ(r.got.size(), 10u);
  for (auto& rep : r.got) {
    EXPECT_TRUE(rep.status.ok()) << rep.status.to_string();
    EXPECT_TRUE(check_ping_pattern(rep.bulk.span()));
  }
  std::vector<size_t> sizes;
  for (auto& rep : r.got) sizes.push_back(rep.bulk.size());
  EXPECT_EQ(sizes, (std::vector<size_t>{0, 0, 1, 1, 64, 64, 65536, 65536, 2 << 20, 2 << 20}));
  // Over the limit: a clear error from the server.
  client_.rpc.call_async(b_, kMsgPing, ping_payload(uint32_t((2 << 20) + 1)), nullptr, r.cb());
  hub_.pump();
  EXPECT_EQ(r.got.back().status.code(), Code::kInvalidArgument);
}

TEST_F(RpcTest, ErrorsAreClear) {
  Replies r1, r2, r3;
  client_.rpc.call_async(b_, 999, Buffer(), nullptr, r1.cb());
  client_.rpc.call_async(b_, kThrow, Buffer(), nullptr, r2.cb());
  // A connect refused: the next is backed off past this short call's deadline (Net's
  // min_reconnect, 1 s), so it fails now, naming the connect's error.
  CallOptions brief;
  brief.timeout = 300ms;
  client_.rpc.call_async(nid("10.0.0.7@tcp"), kEcho, Buffer(), nullptr, r3.cb(), brief);
  hub_.pump();
  ASSERT_EQ(r1.got.size() + r2.got.size() + r3.got.size(), 3u);
  EXPECT_EQ(r1.got.at(0).status.code(), Code::kNotFound);
  EXPECT_EQ(r1.got.at(0).status.message(), "no handler for message type 999");
  EXPECT_EQ(r2.got.at(0).status.code(), Code::kRemoteError);
  EXPECT_EQ(r2.got.at(0).status.message(), "handler for THROW failed: disk on fire");
  EXPECT_EQ(r3.got.at(0).status.code(), Code::kUnreachable);
  EXPECT_EQ(r3.got.at(0).status.health_kind(), HealthKind::kPeerNiConnectError);
}

TEST_F(RpcTest, MaxRpcsInFlightQueuesTheRest) {
  Replies r;
  for (int i = 0; i < 5; ++i) client_.rpc.call_async(b_, kBlock, Buffer(), nullptr, r.cb());
  EXPECT_EQ(client_.rpc.target_load(b_), (std::pair<int64_t, size_t>{2, 3}));
  EXPECT_EQ(client_.rpc.waiting_targets(), std::vector<Nid>{b_});
  EXPECT_EQ(client_.rpc.counters().slot_waits, 3u);
  hub_.pump();
  EXPECT_TRUE(r.got.empty());
  release_.open();
  // Workers answer; pump until all five are back (bounded).
  pump_until([&] { return r.got.size() >= 5; });
  ASSERT_EQ(r.got.size(), 5u);
  for (auto& rep : r.got) EXPECT_TRUE(rep.status.ok());
  EXPECT_EQ(client_.rpc.target_load(b_), (std::pair<int64_t, size_t>{0, 0}));
  EXPECT_TRUE(client_.rpc.waiting_targets().empty());
  EXPECT_EQ(client_.rpc.counters().completed, 5u);
  EXPECT_EQ(client_.rpc.counters().slot_waits, 3u);
}

TEST_F(RpcTest, DeadlinesFailRpcsExactly) {
  Replies r;
  // 1: on the wire, the handler blocks: times out with no reply.
  client_.rpc.call_async(b_, kBlock, Buffer(), nullptr, r.cb(), CallOptions{2s});
  // 2: waits for a slot behind it (max_rpcs_in_flight = 2 is not reached) -> make a third
  // target-less call that waits in the net queue for a connection that is never pumped.
  hub_.pump();
  clock_.advance(1999ms);
  EXPECT_EQ(client_.core.tick(clock_.now()), 0u);
  EXPECT_TRUE(r.got.empty());
  clock_.advance(1ms);
  EXPECT_EQ(client_.core.tick(clock_.now()), 1u);
  ASSERT_EQ(r.got.size(), 1u);
  EXPECT_EQ(r.got[0].status.code(), Code::kTimeout);
  EXPECT_EQ(r.got[0].status.message(),
            "RPC BLOCK to 10.0.0.2@tcp timed out (no reply; remote timeout)");
  // Written, no reply: a remote timeout, blamed on the peer NI, whose connection closes.
  EXPECT_EQ(r.got[0].status.health_kind(), HealthKind::kPeerNiUnreachable);
  EXPECT_EQ(client_.net.peers()[0].remote_timeouts, 1u);
  EXPECT_EQ(client_.net.peers()[0].health, 900);
  EXPECT_EQ(client_.net.nis()[0].health, 1000);
  // The late reply, if it still finds a way back (the server may write it on the closed
  // connection, or open a new one), is counted and dropped, never delivered.
  auto server_done = [&] {  // replies the server wrote or failed to write
    auto ni = server_.net.nis()[0];
    uint64_t n = ni.send_count;
    for (uint64_t e : ni.errors) n += e;
    return n;
  };
  uint64_t before = server_done();
  release_.open();
  pump_until([&] { return client_.rpc.late_replies() > 0 || server_done() > before; });
  hub_.pump();
  EXPECT_LE(client_.rpc.late_replies(), 1u);
  EXPECT_EQ(r.got.size(), 1u);
}

TEST_F(RpcTest, SendQueuedForAConnectionTimesOutBlamingThePeer) {
  Replies r;
  Nid c = nid("10.0.0.3@tcp");
  Node other(hub_, clock_, c);
  client_.rpc.call_async(c, kEcho, Buffer(), nullptr, r.cb(), CallOptions{1s});
  // Nothing pumped: the request waits in the net queue for its connection.
  clock_.advance(1s);
  client_.core.tick(clock_.now());
  ASSERT_EQ(r.got.size(), 1u);
  EXPECT_EQ(r.got[0].status.code(), Code::kTimeout);
  // It never left (a local timeout), but what it waited for was the peer's side of a
  // connection: the peer NI is blamed.
  EXPECT_EQ(r.got[0].status.health_kind(), HealthKind::kPeerNiUnreachable);
  EXPECT_NE(r.got[0].status.message().find("local timeout, waiting for a connection"),
            std::string::npos)
      << r.got[0].status.message();
  hub_.pump();
}

TEST_F(RpcTest, DisconnectFailsRpcsAwaitingReplies) {
  Replies r;
  client_.rpc.call_async(b_, kBlock, Buffer(), nullptr, r.cb());
  hub_.pump();
  server_.net.shutdown();  // the server goes away with the request in hand
  release_.open();
  hub_.pump();
  ASSERT_EQ(r.got.size(), 1u);
  EXPECT_EQ(r.got[0].status.code(), Code::kClosed);
  EXPECT_NE(r.got[0].status.message().find("closed before the reply"), std::string::npos);
}

TEST_F(RpcTest, ShutdownCancelsEverything) {
  Replies r;
  for (int i = 0; i < 4; ++i) client_.rpc.call_async(b_, kEcho, Buffer(), nullptr, r.cb());
  client_.rpc.shutdown();
  ASSERT_EQ(r.got.size(), 4u);
  for (auto& rep : r.got) EXPECT_EQ(rep.status.code(), Code::kCancelled);
  client_.rpc.call_async(b_, kEcho, Buffer(), nullptr, r.cb());
  ASSERT_EQ(r.got.size(), 5u);
  EXPECT_EQ(r.got[4].status.code(), Code::kCancelled);
  hub_.pump();
}

TEST_F(RpcTest, BlockingCallReturnsTheReply) {
  std::atomic<bool> done{false};
  std::thread pump([&] {
    for (int i = 0; i < 100000 && !done; ++i) {
      hub_.pump();
      std::this_thread::yield();
    }
  });
  RpcReply rep = client_.rpc.call(b_, kEcho, Buffer::copy_of(std::string_view("sync")));
  done = true;
  pump.join();
  EXPECT_TRUE(rep.status.ok()) << rep.status.to_string();
  EXPECT_EQ(rep.payload.view(), "sync");
}

}  // namespace
}  // namespace pfsnet
