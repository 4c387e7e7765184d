// The in-process cluster itself: handlers on the test's thread, round trips of the delays
// set, cut links that hold and heal, killed nodes that refuse, and a blocking call of the
// test's thread that runs the cluster (and is refused inside a handler).
#include "rpc/sim_cluster.h"

#include <gtest/gtest.h>

#include <thread>

namespace pfsnet {
namespace {

using namespace std::chrono_literals;

Nid nid(int host) { return *Nid::parse("10.0.0." + std::to_string(host) + "@tcp"); }
constexpr uint32_t kEcho = 10, kRelay = 11;

class SimClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int h : {1, 2, 3}) {
      SimNode* n = c_.add("n" + std::to_string(h), {nid(h)}, NetOptions{}, opts());
      ASSERT_NE(n, nullptr);
      n->rpc.handle(
          kEcho, "ECHO",
          [this](RpcRequest& r) {
            handler_thread_ = std::this_thread::get_id();
            RpcResponse resp;
            resp.payload = std::move(r.payload);
            return resp;
          },
          HandlerMode::kWorker);
      // A handler that blocks for a call of its own (refused on the cluster).
      n->rpc.handle(
          kRelay, "RELAY",
          [n](RpcRequest&) {
            RpcReply inner = n->rpc.call(nid(2), kEcho, Buffer::copy_of("x"));
            RpcResponse resp;
            resp.status = inner.status.ok() ? Status::Ok() : Status(Code::kInternal, "refused");
            return resp;
          },
          HandlerMode::kInline);
    }
  }
  static RpcOptions opts() {
    RpcOptions o;
    o.default_timeout = 5s;
    o.workers = 4;  // SimNode runs every handler on the pumping thread whatever this says
    return o;
  }
  // A call from `from` to `to`, stepped until it ends: its reply, and the manual time it took.
  std::pair<RpcReply, Duration> call(int from, int to, Duration step = 1ms) {
    std::optional<RpcReply> got;
    c_.find("n" + std::to_string(from))
        ->rpc.call_async(nid(to), kEcho, Buffer::copy_of("hello"), nullptr,
                         [&got](RpcReply&& r) { got = std::move(r); });
    auto took = c_.run_until([&] { return got.has_value(); }, 10s, step);
    EXPECT_TRUE(took.has_value());
    RpcReply r;
    if (got) r = std::move(*got);
    return {std::move(r), took.value_or(Duration::zero())};
  }

  SimCluster c_;
  std::thread::id handler_thread_;
};

TEST_F(SimClusterTest, HandlersRunOnTheTestsThreadAndADelayIsTheRoundTrip) {
  auto [r, took] = call(1, 2);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_EQ(handler_thread_, std::this_thread::get_id());
  EXPECT_LE(took, 1ms);  // no delay: within the step
  c_.set_delay("n1", "n2", 25ms);
  std::tie(r, took) = call(1, 2);
  ASSERT_TRUE(r.status.ok());
  EXPECT_GE(r.round_trip(), 50ms);
  EXPECT_LE(r.round_trip(), 52ms);  // each way to the 1 ms step
  EXPECT_LE(took, 52ms);
  // Only that link: n1 to n3 is as fast as before.
  std::tie(r, took) = call(1, 3);
  EXPECT_LE(took, 1ms);
  c_.set_delay("n1", "n2", Duration::zero());
  std::tie(r, took) = call(1, 2);
  EXPECT_LE(took, 1ms);
}

TEST_F(SimClusterTest, ACutLinkHoldsUntilHealedAndACallAcrossItEndsAtItsDeadline) {
  ASSERT_TRUE(call(1, 2).first.status.ok());  // connected
  c_.cut("n1", "n2");
  auto [r, took] = call(1, 2, 100ms);
  EXPECT_FALSE(r.status.ok());
  EXPECT_GE(took, 5s);  // its deadline, not sooner: nothing fails on a silent link
  EXPECT_LE(took, 5100ms);
  EXPECT_TRUE(call(1, 3).first.status.ok());  // the other links carry on
  c_.heal("n1", "n2");
  EXPECT_TRUE(call(1, 2, 100ms).first.status.ok());
}

TEST_F(SimClusterTest, AKilledNodeRefusesAndARestartedOneAnswers) {
  ASSERT_TRUE(call(1, 2).first.status.ok());
  c_.kill("n2");
  EXPECT_EQ(c_.find("n2"), nullptr);
  auto [r, took] = call(1, 2, 100ms);
  EXPECT_FALSE(r.status.ok());
  EXPECT_LT(took, 5s) << r.status.to_string();  // refused, not timed out
  SimNode* n = c_.add("n2", {nid(2)}, NetOptions{}, opts());
  ASSERT_NE(n, nullptr);
  n->rpc.handle(
      kEcho, "ECHO",
      [](RpcRequest& q) {
        RpcResponse resp;
        resp.payload = std::move(q.payload);
        return resp;
      },
      HandlerMode::kInline);
  // The client's connects to it back off (Net's 1 s doubling, jittered): the call above
  // waited from refused connect to refused connect, three of them, so the next comes
  // within 2-4 s; a call made now waits for it (or fails at once when it comes after its
  // deadline) and is answered once it comes.
  const TimePoint restarted = c_.clock().now();
  bool answered = false;
  for (int i = 0; i < 20 && !answered; ++i) {
    answered = call(1, 2, 100ms).first.status.ok();
    if (!answered) {
      ASSERT_TRUE(c_.run_for(250ms));
    }
  }
  EXPECT_TRUE(answered);
  EXPECT_LE(c_.clock().now() - restarted, 4250ms);  // the interval and a step
  // A NID taken by a live node cannot be added twice.
  EXPECT_EQ(c_.add("again", {nid(2)}, NetOptions{}, opts()), nullptr);
}

// CallOptions::recover: n2 runs n1's request, its reply is lost (a fault rule drops it),
// and n2 is killed, then started again 1 s later. The call is resent every 250 ms while n2
// is down (the same incarnation and xid: what a restarted server keys its record of what
// ran by, storage/last_rcvd.h), and answered by the new n2 once the client's backed-off
// reconnect comes; the same call without recover fails within its deadline. NOTE is
// Execution::kOnceRestartSafe (its handler's `seen` stands for last_rcvd), so the copy goes
// to the handler: a kOnce type's would be answered OUTCOME_UNKNOWN (ExactlyOnceSimTest).
TEST_F(SimClusterTest, ARecoverCallWaitsForItsServersRestartAndArrivesWithItsXid) {
  constexpr uint32_t kNote = 12;
  std::vector<std::pair<uint64_t, uint64_t>> seen;  // (incarnation, xid) of each arrival
  auto serve = [&](SimNode* n) {
    n->rpc.handle(
        kNote, "NOTE",
        [&](RpcRequest& q) {
          seen.emplace_back(q.incarnation, q.xid);
          return RpcResponse{};
        },
        HandlerMode::kInline, Execution::kOnceRestartSafe);
  };
  auto restart = [&] {
    SimNode* n = c_.add("n2", {nid(2)}, NetOptions{}, opts());
    ASSERT_NE(n, nullptr);
    serve(n);
  };
  c_.kill("n2");
  restart();
  FaultRule lost;  // n2's replies of kNote vanish
  lost.src = nid(2);
  lost.msg_type = kNote;
  lost.rate = 1;
  c_.find("n2")->net.add_fault(lost);
  CallOptions co;
  co.timeout = 5s;
  co.recover = true;
  std::optional<RpcReply> got, plain;
  c_.find("n1")->rpc.call_async(
      nid(2), kNote, Buffer::copy_of("w"), nullptr, [&](RpcReply&& r) { got = std::move(r); }, co);
  ASSERT_TRUE(c_.run_until([&] { return !seen.empty(); }, 1s, 1ms));
  ASSERT_TRUE(c_.run_for(50ms));
  EXPECT_FALSE(got.has_value());
  const TimePoint killed = c_.clock().now();
  c_.kill("n2");
  // Without recover: fails within its deadline (its resends find no one).
  co.recover = false;
  co.timeout = 1s;
  c_.find("n1")->rpc.call_async(
      nid(2), kNote, Buffer::copy_of("w"), nullptr, [&](RpcReply&& r) { plain = std::move(r); },
      co);
  ASSERT_TRUE(c_.run_until([&] { return plain.has_value(); }, 1s, 1ms));
  EXPECT_FALSE(plain->status.ok());
  ASSERT_TRUE(c_.run_for(1s));
  EXPECT_FALSE(got.has_value()) << got->status.to_string();
  restart();
  const TimePoint back = c_.clock().now();
  ASSERT_TRUE(c_.run_until([&] { return got.has_value(); }, 3s, 1ms));
  EXPECT_TRUE(got->status.ok()) << got->status.to_string();
  // Its resends go every 250 ms, each once the client's backed-off connect lets it: within
  // the reconnect interval reached (2 s after two refusals) of the restart.
  EXPECT_LE(c_.clock().now() - back, 2s);
  EXPECT_GE(c_.clock().now() - killed, 1s);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1], seen[0]) << "the resend is not the same request";
  EXPECT_NE(seen[0].first, 0u);
}

// A blocking call (RpcEngine::call) of the test's thread runs the cluster until it ends:
// the round trip of a 25 ms link passes on the manual clock, a call across a cut link ends
// at its deadline to the step. Inside a handler the same call is refused at once (the
// handler runs within the cluster's events: waiting there could never end).
TEST_F(SimClusterTest, ABlockingCallRunsTheClusterAndIsRefusedInsideAHandler) {
  c_.set_delay("n1", "n2", 25ms);
  SimNode& n1 = *c_.find("n1");
  TimePoint t0 = c_.clock().now();
  RpcReply r = n1.rpc.call(nid(2), kEcho, Buffer::copy_of("hello"));
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(r.payload.data()), r.payload.size()),
            "hello");
  EXPECT_GE(c_.clock().now() - t0, 50ms);
  EXPECT_LE(c_.clock().now() - t0, 70ms);  // the 10 ms steps of a wait
  c_.cut("n1", "n3");
  t0 = c_.clock().now();
  CallOptions co;
  co.timeout = 2s;
  r = n1.rpc.call(nid(3), kEcho, Buffer::copy_of("hello"), nullptr, co);
  EXPECT_EQ(r.status.code(), Code::kTimeout) << r.status.to_string();
  EXPECT_EQ(c_.clock().now() - t0, 2s);
  c_.heal("n1", "n3");
  // n3's RELAY handler calls n2 synchronously: refused, and the refusal is its answer.
  t0 = c_.clock().now();
  r = n1.rpc.call(nid(3), kRelay, Buffer());
  EXPECT_EQ(r.status.code(), Code::kInternal) << r.status.to_string();
  EXPECT_LT(c_.clock().now() - t0, 1s) << "the handler's wait was not refused at once";
}

}  // namespace
}  // namespace pfsnet
