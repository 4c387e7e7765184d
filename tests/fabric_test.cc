// The RPC fabric end to end: real pfsnetd processes on loopback, the test process as a
// client node over real TCP sockets.
#include <gtest/gtest.h>

#include <random>

#include "base/sanitizers.h"
#include "cluster.h"
#include "rpc/ping.h"

namespace pfsnet::testing {
namespace {

constexpr char kKey[] = "integration-test-cluster-key-0001";

class FabricTest : public ::testing::Test {
 protected:
  FabricTest() { write_file(key_, kKey, 0600); }
  TempDir dir_;
  std::string key_ = dir_.file("cluster.key");
};

// Log-uniform sizes over 0..2 MiB with every edge that matters.
std::vector<uint32_t> bulk_sizes(size_t n) {
  std::vector<uint32_t> edges = {
      0,      1, 63, 64, 65, 4095, 4096, 65535, 65536, 65537, 1 << 20, (1 << 20) + 1, (2 << 20) - 1,
      2 << 20};
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> exp2(0, 21);
  std::vector<uint32_t> v;
  for (size_t i = 0; i < n; ++i)
    v.push_back(i < edges.size() ? edges[i]
                                 : std::min<uint32_t>(2 << 20, uint32_t(std::exp2(exp2(rng)))));
  return v;
}

// Under ThreadSanitizer every byte copied and checked costs ~20x: fewer RPCs (the same
// sizes from the start of the list) so that they finish well within their deadline.
#if PFSNET_UNDER_TSAN
constexpr size_t kManyRpcs = 1500;
#else
constexpr size_t kManyRpcs = 10000;
#endif

TEST_F(FabricTest, TenThousandRpcsEveryByteVerified) {
  // The counts below are exact: the server must not probe the client on its own. Under a
  // sanitizer its health monitor found the client's replies slow and probed it (146 more
  // messages each way in CI), which is right but not what this test counts.
  DaemonOptions o;
  o.extra = "[health]\nslowness = false\n";
  Daemon server(dir_, 2, key_, o);
  ASSERT_TRUE(server.ready()) << server.process().output();
  // Every RPC is submitted at once and its deadline runs from then; an attempt gets a third
  // of it: 120 s, so a sanitizer build on a loaded host does not resend (a resend's extra
  // message would break the exact counts below).
  ClientNode client(loopback_nid(1), kKey, 8, 8, 120s);
  ASSERT_TRUE(client.start_status().ok()) << client.start_status().to_string();

  constexpr size_t kRpcs = kManyRpcs;
  std::vector<uint32_t> sizes = bulk_sizes(kRpcs);
  // One pattern buffer; writes send prefixes of it without copying.
  std::vector<BulkData> writes;
  std::atomic<size_t> ok{0}, bad{0};
  std::atomic<uint64_t> bytes{0};
  Completions done;
  for (size_t i = 0; i < kRpcs; ++i) {
    uint32_t n = sizes[i];
    bool echo = i % 2 == 0;  // echo: write n bytes, read them back; else read n bytes
    BulkData data = echo && n ? make_bulk(make_ping_pattern(n)) : nullptr;
    client.rpc().call_async(
        server.nid(), kMsgPing, ping_payload(echo ? std::nullopt : std::optional(n)), data,
        [&, n](RpcReply&& r) {
          bool good = r.status.ok() && r.bulk.size() == n && check_ping_pattern(r.bulk.span());
          (good ? ok : bad).fetch_add(1);
          bytes.fetch_add(r.bytes_sent + r.bytes_received);
          done.add(RpcReply{r.status});
        });
  }
  ASSERT_TRUE(done.wait_for(kRpcs, 150s)) << "only " << ok + bad << " of " << kRpcs << " completed";
  EXPECT_EQ(ok.load(), kRpcs);
  EXPECT_EQ(bad.load(), 0u);
  for (auto& r : done.take())
    if (!r.status.ok()) ADD_FAILURE() << r.status.to_string();
  auto peers = client.net().peers();
  ASSERT_EQ(peers.size(), 1u);
  const NiInfo& p = peers[0];
  std::string why = "resends " + std::to_string(p.resends) + ", remote timeouts " +
                    std::to_string(p.remote_timeouts) + ", local timeouts " +
                    std::to_string(p.local_timeouts) + ", drops " + std::to_string(p.drops);
  EXPECT_EQ(p.send_count, kRpcs) << why;
  EXPECT_EQ(p.recv_count, kRpcs) << why;
  // The net counts what went on the wire: each request and reply also carried its data
  // checksum (lnet.checksum), which the RPC layer's sizes leave out.
  EXPECT_EQ(p.send_bytes + p.recv_bytes, bytes.load() + 2 * kRpcs * kDataCrcSize) << why;
}

// Blocking callers take their replies off the socket themselves (RpcOptions::receive_here):
// four of them, each with its own sizes, while async calls share the connection -- every
// reply reaches its own caller with every byte, whichever thread read it.
TEST_F(FabricTest, BlockingCallersOnFourThreadsBesideAsyncCallsGetEveryByte) {
  Daemon server(dir_, 2, key_);
  ASSERT_TRUE(server.ready()) << server.process().output();
  ClientNode client(loopback_nid(1), kKey, 8, 16, 120s);
  const size_t kCalls = kManyRpcs / 20;  // per thread
  std::vector<uint32_t> sizes = bulk_sizes(4 * kCalls);
  std::atomic<size_t> ok{0};
  Completions async_done;
  std::vector<std::thread> callers;
  for (size_t t = 0; t < 4; ++t) {
    callers.emplace_back([&, t] {
      for (size_t i = 0; i < kCalls; ++i) {
        uint32_t n = sizes[t * kCalls + i];
        if (i % 4 == 0)  // an async read beside each fourth blocking call
          client.rpc().call_async(server.nid(), kMsgPing, ping_payload(n), nullptr,
                                  [&](RpcReply&& r) { async_done.add(std::move(r)); });
        bool echo = i % 2 == 0;
        RpcReply r = client.rpc().call(server.nid(), kMsgPing,
                                       ping_payload(echo ? std::nullopt : std::optional(n)),
                                       echo && n ? make_bulk(make_ping_pattern(n)) : nullptr);
        if (r.status.ok() && r.bulk.size() == n && check_ping_pattern(r.bulk.span()))
          ok.fetch_add(1);
        else
          ADD_FAILURE() << "caller " << t << " call " << i << " (" << n
                        << " bytes): " << r.status.to_string() << ", " << r.bulk.size();
      }
    });
  }
  for (auto& c : callers) c.join();
  EXPECT_EQ(ok.load(), 4 * kCalls);
  ASSERT_TRUE(async_done.wait_for(kCalls, 60s));
  for (auto& r : async_done.take()) EXPECT_TRUE(r.status.ok()) << r.status.to_string();
}

TEST_F(FabricTest, KilledPeerFailsEveryOutstandingRpcBeforeItsDeadline) {
  Daemon server(dir_, 2, key_);
  ASSERT_TRUE(server.ready());
  // Reconnects every 100 ms: what this test is about is how the RPCs out end, not the
  // backoff (NetTest and ReconnectStormSimTest have that, on the manual clock).
  ClientNode client(loopback_nid(1), kKey, 8, 16, 30s, 100ms);
  ASSERT_TRUE(client.rpc().call(server.nid(), kMsgPing, Buffer()).status.ok());

  ASSERT_TRUE(server.process().stop());  // requests pile up unanswered
  Completions done;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 64; ++i)
    client.rpc().call_async(server.nid(), kMsgPing, ping_payload(uint32_t(i * 1000)), nullptr,
                            [&](RpcReply&& r) { done.add(std::move(r)); });
  server.process().kill(SIGKILL);
  ASSERT_TRUE(done.wait_for(64, 20s));
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_LT(elapsed, 20s);  // long before the 30 s deadline
  for (auto& r : done.take()) {
    ASSERT_FALSE(r.status.ok());
    // Sent ones: the connection closed under them; the rest: nobody to connect to.
    EXPECT_TRUE(r.status.code() == Code::kClosed || r.status.code() == Code::kUnreachable)
        << r.status.to_string();
    EXPECT_NE(r.status.message().find(server.nid().to_string()), std::string::npos)
        << r.status.to_string();
  }
}

TEST_F(FabricTest, WrongClusterKeyIsRefusedOnBothSides) {
  Daemon server(dir_, 2, key_);
  ASSERT_TRUE(server.ready());
  ClientNode intruder(loopback_nid(1), "some-other-cluster-key-123456");
  RpcReply r = intruder.rpc().call(server.nid(), kMsgPing, Buffer());
  EXPECT_EQ(r.status.code(), Code::kRejected) << r.status.to_string();
  EXPECT_EQ(r.status.health_kind(), HealthKind::kPeerNiConnectionRejected);
  EXPECT_NE(r.status.message().find("wrong cluster key"), std::string::npos);
  EXPECT_TRUE(server.process().wait_for_output("wrong cluster key"));
  EXPECT_TRUE(server.process().wait_for_output(loopback_nid(1).to_string()));
  // The daemon is unharmed: a node with the key still gets through.
  ClientNode friendly(loopback_nid(3), kKey);
  EXPECT_TRUE(friendly.rpc().call(server.nid(), kMsgPing, Buffer()).status.ok());
}

TEST_F(FabricTest, OnePeerCreditStillCompletesSixtyFourInFlight) {
  DaemonOptions o;
  o.peer_credits = 1;
  Daemon server(dir_, 2, key_, o);
  ASSERT_TRUE(server.ready());
  ClientNode client(loopback_nid(1), kKey, /*peer_credits=*/1, /*max_in_flight=*/64);
  constexpr int kTotal = 3000;
  std::atomic<int> issued{0};
  Completions done;
  BulkData data = make_bulk(make_ping_pattern(4096));
  // A closed loop keeping 64 RPCs in flight.
  std::function<void()> issue = [&] {
    if (issued.fetch_add(1) >= kTotal) return;
    client.rpc().call_async(server.nid(), kMsgPing, Buffer(), data, [&](RpcReply&& r) {
      bool good = r.status.ok() && r.bulk.size() == 4096 && check_ping_pattern(r.bulk.span());
      issue();  // before counting: nothing of the test is touched after the last add
      done.add(RpcReply{good ? Status() : Status(Code::kInternal, r.status.to_string())});
    });
  };
  for (int i = 0; i < 64; ++i) issue();
  ASSERT_TRUE(done.wait_for(kTotal, 60s));
  for (auto& r : done.take()) EXPECT_TRUE(r.status.ok()) << r.status.to_string();
  auto p = client.net().peers();
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].credits_max, 1);
  EXPECT_EQ(p[0].credits_min, 0);  // the single credit really was the limit
}

}  // namespace
}  // namespace pfsnet::testing

namespace pfsnet::testing {
namespace {

// [[emulation]] in both daemons' configs: a 20 ms one-way delay each way makes every
// round trip at least 40 ms, and the daemons say loudly that emulation is on.
TEST(EmulationTest, ConfiguredDelayShowsInEveryRoundTrip) {
  DaemonOptions o;
  o.extra = "[[emulation]]\ndelay_ms = 20\nrate_mbit = 1000\n";
  TwoDaemons d(o, o);
  ASSERT_TRUE(d.ready());
  EXPECT_TRUE(d.a.process().wait_for_output("LINK EMULATION ON", 2000ms));
  auto [rc, out] = run({PFSNET_BIN, "--socket", d.a.socket(), "ping", d.b.nid().to_string(), "-c",
                        "5", "--size", "100000", "--json"});
  ASSERT_EQ(rc, 0) << out;
  nlohmann::json j = last_json_line(out);
  EXPECT_EQ(j["ok"], 5);
  // 2 x 20 ms, plus 100 kB each way at 1 Gbit/s (0.8 ms each).
  EXPECT_GE(j["rtt_ms"]["min"].get<double>(), 41.6) << out;
  EXPECT_LT(j["rtt_ms"]["min"].get<double>(), 200) << out;
}

}  // namespace
}  // namespace pfsnet::testing

namespace pfsnet::testing {
namespace {

// Fault rules by message type name: only BRW_WRITE is dropped, with the kind asked for.
TEST(FaultTest, RuleByTypeNameDropsOnlyThatType) {
  TwoDaemons d;
  ASSERT_TRUE(d.ready());
  auto [rc, out] = run({PFSNET_BIN, "--socket", d.a.socket(), "fault", "add", "drop", "--type",
                        "BRW_WRITE", "--rate", "1", "--health", "PEER_NI_UNREACHABLE", "--json"});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(last_json_line(out)["added"]["type"], 2);
  std::tie(rc, out) = run({PFSNET_BIN, "--socket", d.a.socket(), "fault", "add", "drop", "--type",
                           "NOPE", "--rate", "1"});
  EXPECT_EQ(rc, 2);
  EXPECT_NE(out.find("unknown message type 'NOPE'"), std::string::npos) << out;
  EXPECT_EQ(
      run({PFSNET_BIN, "--socket", d.a.socket(), "ping", d.b.nid().to_string(), "-c", "2"}).first,
      0);
  std::tie(rc, out) =
      run({PFSNET_BIN, "--socket", d.a.socket(), "ping", d.b.nid().to_string(), "-c", "1", "--mode",
           "write", "--size", "100", "--timeout", "2", "--json"});
  EXPECT_EQ(rc, 1) << out;
  EXPECT_EQ(last_json_line(out)["errors"]["PEER_NI_UNREACHABLE"], 1) << out;
}

}  // namespace
}  // namespace pfsnet::testing
