// 32 clients of one server that goes away and comes back (issue 67): their reconnects back
// off -- a few a second per client within 10 s of the server's loss, then fewer -- and the
// server, back, is reached by all of them at spread-out moments (jittered), not by a storm.
// On the in-process cluster's manual clock: exact, the same every run.
#include <gtest/gtest.h>

#include "rpc/msg_types.h"
#include "rpc/sim_cluster.h"

namespace pfsnet {
namespace reconnect_storm_test {

using namespace std::chrono_literals;

constexpr int kClients = 32;
Nid server_nid() { return *Nid::parse("10.0.5.1@tcp"); }
Nid client_nid(int i) { return *Nid::parse("10.0.6." + std::to_string(i + 1) + "@tcp"); }

class ReconnectStormSimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(c_.add("server", {server_nid()}, NetOptions{}, opts()), nullptr);
    for (int i = 0; i < kClients; ++i) {
      SimNode* n = c_.add("c" + std::to_string(i), {client_nid(i)}, net_options(), opts());
      ASSERT_NE(n, nullptr);
      clients_.push_back(n);
      // Two PINGs out at a time, topped up at every step of the clock.
      n->on_tick([this, i](TimePoint) {
        // At most two a step: a PING may fail at once (the reconnect backs off past its
        // deadline), and topping up in a loop would never end.
        for (int k = 0; k < 2 && !stopping_ && out_[i] < 2; ++k) ping(i);
      });
    }
    out_.assign(kClients, 0);
    ok_.assign(kClients, 0);
    first_ok_.assign(kClients, TimePoint{});
  }
  void TearDown() override {
    stopping_ = true;
    for (int i = 0; i < kClients; ++i) c_.kill("c" + std::to_string(i));
  }
  virtual NetOptions net_options() const { return NetOptions{}; }
  static RpcOptions opts() {
    RpcOptions o;
    o.default_timeout = 4s;  // the soak's: three attempts within it
    return o;
  }
  void ping(int i) {
    ++out_[i];
    clients_[i]->rpc.call_async(server_nid(), kMsgPing, Buffer(), nullptr, [this, i](RpcReply&& r) {
      --out_[i];
      if (r.status.ok()) {
        ++ok_[i];
        if (first_ok_[i] == TimePoint{}) first_ok_[i] = c_.clock().now();
      }
    });
  }
  uint64_t connects(int i) const { return clients_[i]->net.peers()[0].connects; }
  uint64_t all_connects() const {
    uint64_t n = 0;
    for (int i = 0; i < kClients; ++i) n += connects(i);
    return n;
  }

  SimCluster c_;
  std::vector<SimNode*> clients_;
  std::vector<int> out_, ok_;
  std::vector<TimePoint> first_ok_;  // the first success since reset
  bool stopping_ = false;
};

TEST_F(ReconnectStormSimTest, ClientsOfAServerThatWentAwayBackOffAndReachItSpreadOutWhenBack) {
  ASSERT_TRUE(c_.run_for(2s, 10ms));
  for (int i = 0; i < kClients; ++i) ASSERT_GT(ok_[i], 10) << i;

  c_.kill("server");
  // Each client keeps calling; its connects to the gone server, per second of the outage.
  std::vector<uint64_t> at(kClients);
  for (int i = 0; i < kClients; ++i) at[i] = connects(i);
  ASSERT_TRUE(c_.run_for(10s, 10ms));
  uint64_t first10 = 0;
  for (int i = 0; i < kClients; ++i) first10 += connects(i) - at[i];
  for (int i = 0; i < kClients; ++i) at[i] = connects(i);
  ASSERT_TRUE(c_.run_for(20s, 10ms));
  uint64_t most = 0;  // one client's connects over seconds 10-30 of the outage
  for (int i = 0; i < kClients; ++i) most = std::max(most, connects(i) - at[i]);
  // 1 s doubling (0.5-1 s, 1-2 s, 2-4 s, 4-8 s ...): at most 5 attempts a client in the
  // first 10 s (without the backoff, every resend of two PINGs was one: ~10 a second), and
  // in the next 20 s at most 3 -- fewer than one every 6 s.
  EXPECT_LE(first10, uint64_t(5 * kClients));
  EXPECT_GE(first10, uint64_t(3 * kClients));
  EXPECT_LE(most, 3u);

  // Back: every client reaches it within its interval (at most 32 s now, 16-32 jittered),
  // at moments spread over it: never more than a quarter of them in one 100 ms.
  const uint64_t before = all_connects();
  const TimePoint back_at = c_.clock().now();
  ASSERT_NE(c_.add("server", {server_nid()}, NetOptions{}, opts()), nullptr);
  std::vector<int> ok_before = ok_;
  first_ok_.assign(kClients, TimePoint{});
  uint64_t burst = 0, last = before;
  for (int step = 0; step < 400; ++step) {  // 40 s in 100 ms steps
    ASSERT_TRUE(c_.run_for(100ms, 10ms));
    uint64_t now = all_connects();
    burst = std::max(burst, now - last);
    last = now;
  }
  Duration first_back{};
  for (int i = 0; i < kClients; ++i) {
    EXPECT_GT(ok_[i], ok_before[i] + 10) << "client " << i << " served again";
    ASSERT_NE(first_ok_[i], TimePoint{}) << i;
    EXPECT_LT(first_ok_[i] - back_at, 33s) << i;
    first_back = std::max(first_back, first_ok_[i] - back_at);
  }
  EXPECT_LE(burst, uint64_t(kClients / 4)) << "connects in one 100 ms after the return";
  std::printf(
      "outage: %llu connects of %d clients in its first 10 s, at most %llu of one in the "
      "next 20 s; back: the last client served %.1f s after, at most %llu connects in "
      "100 ms\n",
      (unsigned long long)first10, kClients, (unsigned long long)most,
      std::chrono::duration<double>(first_back).count(), (unsigned long long)burst);
}

// The same outage with the backoff as good as off (1 ms): the storm it prevents.
class NoBackoffStormSimTest : public ReconnectStormSimTest {
 protected:
  NetOptions net_options() const override {
    NetOptions o;
    o.min_reconnect = o.max_reconnect = 1ms;
    return o;
  }
};

TEST_F(NoBackoffStormSimTest, WithoutTheBackoffEveryResendIsAConnect) {
  ASSERT_TRUE(c_.run_for(2s, 10ms));
  c_.kill("server");
  const uint64_t before = all_connects();
  ASSERT_TRUE(c_.run_for(10s, 10ms));
  const uint64_t n = all_connects() - before;
  std::printf("outage without backoff: %llu connects of %d clients in its first 10 s\n",
              (unsigned long long)n, kClients);
  EXPECT_GE(n, uint64_t(40 * kClients)) << "four or more a second per client";
}

// An RPC whose connect backs off past its attempt's deadline but not past its own waits for
// the next connect and is served then; a refused connect is one of its attempts; one whose
// own deadline comes before the next connect fails at once with the connect's error; and
// CallOptions::no_delay fails at once rather than wait.
TEST(ReconnectWaitSimTest, ACallWaitsForTheNextConnectWithinItsOwnDeadlineNotItsAttempts) {
  SimCluster c;
  RpcOptions o;
  o.default_timeout = 12s;  // three attempts of 4 s
  SimNode* client = c.add("client", {client_nid(0)}, NetOptions{}, o);
  ASSERT_NE(client, nullptr);
  std::optional<RpcReply> r;
  TimePoint start, end;
  auto call = [&](CallOptions co) {
    r.reset();
    start = c.clock().now();
    client->rpc.call_async(
        server_nid(), kMsgPing, Buffer(), nullptr,
        [&](RpcReply&& x) {
          end = c.clock().now();
          r = std::move(x);
        },
        co);
    return c.run_until([&] { return r.has_value(); }, 30s, 10ms).has_value();
  };
  auto connects = [&] { return client->net.peers()[0].connects; };
  auto next_connect = [&] { return client->net.peers()[0].paths.at(0).next_connect_s; };
  // No server: three connects, each refused, the call waiting from one to the next (0.5-1 s,
  // 1-2 s), then failing with the last one's error -- not three refusals in one instant.
  ASSERT_TRUE(call(CallOptions{12s}));
  EXPECT_EQ(r->status.health_kind(), HealthKind::kPeerNiConnectError) << r->status.to_string();
  EXPECT_NE(r->status.message().find("failed after 3 attempts"), std::string::npos)
      << r->status.to_string();
  EXPECT_NE(r->status.message().find("onnection refused"), std::string::npos)
      << r->status.to_string();
  EXPECT_EQ(connects(), 3u);
  EXPECT_GE(end - start, 1500ms) << "0.5-1 s, then 1-2 s, between the connects";
  EXPECT_LE(end - start, 3s);
  // A call due before the next connect (2-4 s away) fails at once, saying when it comes.
  const double next = next_connect();
  ASSERT_GT(next, 1.0);
  ASSERT_TRUE(call(CallOptions{1s}));
  EXPECT_EQ(end - start, Duration::zero());
  EXPECT_EQ(r->status.health_kind(), HealthKind::kPeerNiConnectError);
  EXPECT_NE(r->status.message().find("comes after"), std::string::npos) << r->status.to_string();
  EXPECT_EQ(connects(), 3u);
  // The server is back. A call whose attempts (0.5 s) end before the next connect but whose
  // deadline (12 s) does not waits for it and is served then, on the one connect due.
  ASSERT_NE(c.add("server", {server_nid()}, NetOptions{}, o), nullptr);
  CallOptions co{12s};
  co.attempt_timeout = 500ms;
  co.no_delay = true;  // ... but not with no_delay: refused by the backoff three times at once
  ASSERT_TRUE(call(co));
  EXPECT_EQ(end - start, Duration::zero());
  EXPECT_EQ(r->status.health_kind(), HealthKind::kPeerNiConnectError) << r->status.to_string();
  EXPECT_NE(r->status.message().find("failed after 3 attempts"), std::string::npos)
      << r->status.to_string();
  co.no_delay = false;
  const double due = next_connect();
  ASSERT_TRUE(call(co));
  ASSERT_TRUE(r->status.ok()) << r->status.to_string();
  const double waited = std::chrono::duration<double>(end - start).count();
  EXPECT_GE(waited, due - 0.01);
  EXPECT_LE(waited, due + 0.05);
  EXPECT_EQ(connects(), 4u) << "one connect, the one due";
}

}  // namespace reconnect_storm_test
}  // namespace pfsnet
