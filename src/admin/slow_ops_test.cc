// SLOW_OPS (issue 70, item 3): RPCs in flight for over health.slow_ops_s are a problem of
// each node that holds them -- the client that waits, the server that queues or runs them --
// named with the oldest's verdict, and gone when they end. Two nodes over the in-memory
// transport on the manual clock (rpc/rpc_test_fixture.h): the server's two workers hold
// BLOCK requests until the test opens the gate.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "admin/node_commands.h"
#include "base/live_config.h"
#include "rpc/rpc_test_fixture.h"
#include "stats/rpc_stats.h"

namespace pfsnet::rpc_test {
namespace {

class SlowOpsTest : public RpcTest {
 protected:
  // The statistics go before the nodes (the base's): none may be left pointing at them.
  ~SlowOpsTest() override {
    client_.rpc.set_stats(nullptr);
    server_.rpc.set_stats(nullptr);
  }
  static Config config(const std::string& name, double slow_ops_s) {
    Config c;
    c.node.name = name;
    c.health.slow_ops_s = slow_ops_s;
    return c;
  }
  std::vector<Problem> slow_ops(Node& n, LiveConfig& cfg) {
    NodeParts parts{n.net, n.rpc, &n == &server_ ? server_stats_ : stats_, cfg, clock_};
    std::vector<Problem> v = local_problems(parts);
    std::erase_if(v, [](const Problem& p) { return p.cause != "SLOW_OPS"; });
    return v;
  }
  // Until the server's two workers run two requests and `queued` more wait for them.
  void until_executing(size_t queued) {
    pump_until([&] {
      std::vector<Op> ops = server_.rpc.ops_in_flight();
      return ops.size() == 2 + queued && std::count_if(ops.begin(), ops.end(), [](const Op& o) {
                                           return o.phase == OpPhase::kExecuting;
                                         }) == 2;
    });
  }
  RpcStats stats_{StatsConfig{}, clock_, false}, server_stats_{StatsConfig{}, clock_, false};
  LiveConfig client_cfg_{config("c1", 5)}, server_cfg_{config("s1", 5)},
      server_cfg30_{config("s1", 30)};
};

TEST_F(SlowOpsTest, EachEndNamesItsOldestRpcWithItsVerdictUntilItEnds) {
  // (Replies outlive the test's body: an early return leaves calls for the nodes to end.)
  auto r = std::make_shared<Replies>();
  CallOptions co;
  co.job_id = "job7";
  // The client's two slots (max_rpcs_in_flight 2) hold two; the third waits for one.
  for (int i = 0; i < 3; ++i)
    client_.rpc.call_async(
        b_, kBlock, Buffer(), nullptr, [r](RpcReply&& x) { r->got.push_back(std::move(x)); }, co);
  until_executing(0);
  ASSERT_EQ(server_.rpc.ops_in_flight().size(), 2u);
  // Under the threshold: nothing.
  clock_.advance(4900ms);
  EXPECT_TRUE(slow_ops(client_, client_cfg_).empty());
  EXPECT_TRUE(slow_ops(server_, server_cfg_).empty());

  clock_.advance(1s);
  std::vector<Problem> c = slow_ops(client_, client_cfg_);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].kind, "node");
  EXPECT_EQ(c[0].subject, "c1");
  EXPECT_EQ(c[0].seen_by, "c1");
  EXPECT_NE(c[0].evidence.find("3 RPC(s) in flight for over 5.000 s; the oldest, BLOCK xid "),
            std::string::npos)
      << c[0].evidence;
  EXPECT_NE(c[0].evidence.find(" to 10.0.0.2@tcp job job7, for 5.900 s: network or server: "
                               "waiting 5.900 s for the reply from 10.0.0.2@tcp"),
            std::string::npos)
      << c[0].evidence;
  // Since the oldest crossed the threshold: 0.9 s ago.
  EXPECT_NEAR(double(unix_ms(clock_.wall_now()) - c[0].since_unix_ms), 900, 1);
  // The server says which: both run on its two workers.
  std::vector<Problem> s = slow_ops(server_, server_cfg_);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].subject, "s1");
  EXPECT_NE(s[0].evidence.find("2 RPC(s) in flight for over 5.000 s; the oldest, BLOCK xid "),
            std::string::npos)
      << s[0].evidence;
  EXPECT_NE(
      s[0].evidence.find(" from 10.0.0.1@tcp job job7, for 5.900 s: server: executing for 5.900 s "
                         "(its handler runs on a worker)"),
      std::string::npos)
      << s[0].evidence;
  // A threshold the RPCs have not reached, or the rule off (0): nothing.
  LiveConfig off{config("s1", 0)}, later{config("s1", 6)};
  EXPECT_TRUE(slow_ops(server_, off).empty());
  EXPECT_TRUE(slow_ops(server_, later).empty());
  // The MGS declares the server dead: the client's RPCs to it are that node's DEAD, not the
  // client's SLOW_OPS; the server's own stay its own.
  client_.net.set_peer_dead(b_, true, "declared dead by the MGS (test)");
  EXPECT_TRUE(slow_ops(client_, client_cfg_).empty());
  EXPECT_EQ(slow_ops(server_, server_cfg_).size(), 1u);
  client_.net.set_peer_dead(b_, false, "");
  EXPECT_EQ(slow_ops(client_, client_cfg_).size(), 1u);

  release_.open();
  pump_until([&] { return r->got.size() == 3; });
  ASSERT_EQ(r->got.size(), 3u);
  pump_until([&] { return server_.rpc.ops_in_flight().empty(); });
  EXPECT_TRUE(slow_ops(client_, client_cfg_).empty());
  EXPECT_TRUE(slow_ops(server_, server_cfg_).empty());
}

TEST_F(SlowOpsTest, ARequestQueuedForAWorkerIsBlamedOnTheServersQueue) {
  client_.rpc.set_max_rpcs_in_flight(3);
  auto r = std::make_shared<Replies>();
  auto call = [&] {
    client_.rpc.call_async(b_, kBlock, Buffer(), nullptr,
                           [r](RpcReply&& x) { r->got.push_back(std::move(x)); });
  };
  // Two hold the server's two workers; the third, sent 2 s later, waits 6 s for one.
  call();
  call();
  until_executing(0);
  clock_.advance(2s);
  call();
  until_executing(1);
  clock_.advance(6s);
  // Over 7 s only the first two, executing; the third has waited 6 s for a worker.
  LiveConfig seven{config("s1", 7)};
  std::vector<Problem> s = slow_ops(server_, seven);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_NE(s[0].evidence.find("2 RPC(s) in flight for over 7.000 s"), std::string::npos)
      << s[0].evidence;
  EXPECT_NE(s[0].evidence.find("server: executing for 8.000 s (its handler runs on a worker)"),
            std::string::npos)
      << s[0].evidence;
  std::vector<Op> ops = server_.rpc.ops_in_flight();
  auto queued = std::find_if(ops.begin(), ops.end(),
                             [](const Op& op) { return op.phase == OpPhase::kQueued; });
  ASSERT_NE(queued, ops.end());
  EXPECT_EQ(op_verdict_now(*queued, clock_.now()),
            "server: queued 6.000 s for a worker (waiting for a worker: 2 of 2 busy, 1 "
            "request(s) queued (rpc.workers))");
  release_.open();
  pump_until([&] { return r->got.size() == 3; });
  EXPECT_EQ(r->got.size(), 3u);
}

// The second trigger: RPCs in flight over health.slow_ops_p99_factor x their type's p99 on
// this node. The p99 comes from the RPCs that ran (RpcStats::type_p99, both ends); a BLOCK
// call then held for 3.5 s is listed, under the 30 s threshold, where 10 x a p99 of 300 ms
// is 3 s.
TEST_F(SlowOpsTest, AnRpcOverTenTimesItsTypesP99IsListedLongBeforeTheThreshold) {
  client_.rpc.set_stats(&stats_);
  server_.rpc.set_stats(&server_stats_);
  // 150 SLOW calls, 3 ms each on the server: their p99 on both ends.
  auto r = std::make_shared<Replies>();
  for (int i = 0; i < 150; ++i) {
    client_.rpc.call_async(b_, kSlow, Buffer(), nullptr,
                           [r](RpcReply&& x) { r->got.push_back(std::move(x)); });
    pump_until([&] { return r->got.size() == size_t(i) + 1; });
  }
  ASSERT_EQ(r->got.size(), 150u);
  EXPECT_FALSE(stats_.type_p99(true, kSlow)) << "not before the second is processed";
  stats_.process_second();
  server_stats_.process_second();
  ASSERT_TRUE(stats_.type_p99(true, kSlow));
  EXPECT_NEAR(double(stats_.type_p99(true, kSlow)->count()), 3e6, 3e6 / 16);
  ASSERT_TRUE(server_stats_.type_p99(false, kSlow));
  EXPECT_NEAR(double(server_stats_.type_p99(false, kSlow)->count()), 3e6, 3e6 / 16);
  EXPECT_FALSE(stats_.type_p99(false, kSlow)) << "the client served none";
  EXPECT_FALSE(stats_.type_p99(true, kBlock)) << "no BLOCK ran";
  // BLOCK's p99 as a client: 300 ms (100 of them, as the RPC path records them).
  for (int i = 0; i < 100; ++i) {
    RawStatRecord rec;
    rec.msg_type = kBlock;
    rec.total_ns = std::chrono::nanoseconds(300ms).count();
    stats_.record(rec);
  }
  stats_.process_second();
  ASSERT_TRUE(stats_.type_p99(true, kBlock));
  const Duration p99 = *stats_.type_p99(true, kBlock);
  EXPECT_NEAR(double(p99.count()), 300e6, 300e6 / 16);

  LiveConfig cfg{config("c1", 30)};  // factor 10 and 1 s, the defaults
  client_.rpc.call_async(b_, kBlock, Buffer(), nullptr,
                         [r](RpcReply&& x) { r->got.push_back(std::move(x)); });
  until_executing(0);
  clock_.advance(10 * p99 - 1ms);
  EXPECT_TRUE(slow_ops(client_, cfg).empty());
  clock_.advance(2ms);
  std::vector<Problem> c = slow_ops(client_, cfg);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_NE(c[0].evidence.find("1 RPC(s) in flight for over 30.000 s or over 10 x their type's "
                               "p99 (and 1.000 s); the oldest, BLOCK (its type's p99 " +
                               op_duration_text(p99) + ") xid "),
            std::string::npos)
      << c[0].evidence;
  // The factor at 0: the threshold alone, which 3 s does not reach.
  LiveConfig off{config("c1", 30)};
  ASSERT_TRUE(off.set({"health.slow_ops_p99_factor=0"}).ok());
  EXPECT_TRUE(slow_ops(client_, off).empty());
  // The server has no p99 for BLOCK: its request is not slow yet.
  EXPECT_TRUE(slow_ops(server_, server_cfg30_).empty());
  release_.open();
  pump_until([&] { return r->got.size() == 151; });
  EXPECT_EQ(r->got.size(), 151u);
}

}  // namespace
}  // namespace pfsnet::rpc_test
