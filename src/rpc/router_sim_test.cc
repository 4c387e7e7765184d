// Two routers between a client on tcp1 and a server on tcp2 (issue 71), under a steady load
// of PINGs with 64 KiB of bulk, on the in-process cluster's manual clock: a router that
// goes silent (its links cut, as a router powered off), then one that loses its far side
// (its tcp2 NI down: an asymmetric failure), then both healed. No RPC fails; the router is
// out of use within router_ping_interval + router_ping_timeout (and its far side's loss
// within a ping interval and a half), and back within a ping interval of healing.
// Exact, the same every run.
#include <gtest/gtest.h>

#include "rpc/msg_types.h"
#include "rpc/ping.h"
#include "rpc/sim_cluster.h"

namespace pfsnet {
namespace router_sim_test {

using namespace std::chrono_literals;

Nid nid(const char* s) { return *Nid::parse(s); }
const Nid kClient = nid("198.18.1.1@tcp1"), kServer = nid("198.18.2.3@tcp2");
const Nid kR1a = nid("198.18.1.2@tcp1"), kR1b = nid("198.18.2.2@tcp2");
const Nid kR2a = nid("198.18.1.4@tcp1"), kR2b = nid("198.18.2.4@tcp2");

RouteConfig route(const char* net, Nid gw) { return RouteConfig{*parse_lnet_net(net), gw, 1, 0}; }

class RouterSimTest : public ::testing::Test {
 protected:
  static constexpr Duration kPingInterval = 1s, kPingTimeout = 1s;
  static NetOptions net(std::vector<RouteConfig> routes, bool routing) {
    NetOptions o;
    o.routes = std::move(routes);
    o.routing = routing;
    o.router_ping_interval = kPingInterval;
    o.router_ping_timeout = kPingTimeout;
    o.transaction_timeout = 9s;
    return o;
  }
  static RpcOptions rpc() {
    RpcOptions o;
    o.default_timeout = 9s;  // three attempts of 3 s: a router is out of use within 2 s
    return o;
  }
  void SetUp() override {
    client_ =
        c_.add("client", {kClient}, net({route("tcp2", kR1a), route("tcp2", kR2a)}, false), rpc());
    r1_ = c_.add("r1", {kR1a, kR1b}, net({}, true), rpc());
    r2_ = c_.add("r2", {kR2a, kR2b}, net({}, true), rpc());
    server_ =
        c_.add("server", {kServer}, net({route("tcp1", kR1b), route("tcp1", kR2b)}, false), rpc());
    ASSERT_TRUE(client_ && r1_ && r2_ && server_);
    // Eight PINGs with 64 KiB of bulk out at a time, topped up at every step.
    client_->on_tick([this](TimePoint) {
      for (int k = 0; k < 8 && !stopping_ && out_ < 8; ++k) ping();
    });
  }
  void TearDown() override { stopping_ = true; }
  void ping() {
    ++out_;
    client_->rpc.call_async(
        kServer, kMsgPing, Buffer(), make_bulk(make_ping_pattern(64 << 10)), [this](RpcReply&& r) {
          --out_;
          if (!r.status.ok()) {
            ++failed_;
            last_error_ = r.status.to_string();
          } else if (r.bulk.size() == 64u << 10 && check_ping_pattern(r.bulk.span())) {
            ++ok_;
          } else {
            ++bad_data_;
          }
        });
  }
  // The client's route through `gw`.
  RouteInfo route_of(SimNode* n, const Nid& gw) {
    for (const RouteInfo& r : n->net.routes())
      if (r.route.gateway == gw) return r;
    return {};
  }
  uint64_t forwarded(SimNode* r) { return r->net.router_stats().forwarded; }
  bool until(const std::function<bool()>& done, Duration limit, Duration step) {
    return c_.run_until(done, limit, step).has_value();
  }

  SimCluster c_;
  SimNode *client_ = nullptr, *r1_ = nullptr, *r2_ = nullptr, *server_ = nullptr;
  int out_ = 0, ok_ = 0, failed_ = 0, bad_data_ = 0;
  std::string last_error_;
  bool stopping_ = false;
};

TEST_F(RouterSimTest, ASilentRouterAndOneThatLostItsFarSideAreLeftWithoutAnRpcFailing) {
  ASSERT_TRUE(c_.run_for(3s, 10ms));
  EXPECT_GT(ok_, 100);
  // Both routers carry the load.
  EXPECT_GT(forwarded(r1_), 50u);
  EXPECT_GT(forwarded(r2_), 50u);
  EXPECT_TRUE(route_of(client_, kR1a).usable);
  EXPECT_GE(client_->core.router_pinger().answered(), 4u);

  // r1 goes silent: every link to it cut (no close, no refusal: a router powered off).
  c_.cut("client", "r1");
  c_.cut("server", "r1");
  const TimePoint cut_at = c_.clock().now();
  TimePoint left_at{};
  ASSERT_TRUE(until(
      [&] {
        if (!route_of(client_, kR1a).usable && left_at == TimePoint{}) left_at = c_.clock().now();
        return left_at != TimePoint{} && !route_of(server_, kR1b).usable;
      },
      10s, 10ms));
  EXPECT_LE(left_at - cut_at, kPingInterval + kPingTimeout + 20ms);
  EXPECT_NE(route_of(client_, kR1a).state.find("dead"), std::string::npos)
      << route_of(client_, kR1a).state;
  // RPCs caught in r1 are sent again through r2 within their deadline: none fails.
  const uint64_t r1_before = forwarded(r1_);
  const int ok_before = ok_;
  ASSERT_TRUE(c_.run_for(12s, 10ms));
  EXPECT_EQ(forwarded(r1_), r1_before);
  EXPECT_GT(ok_, ok_before + 500);
  EXPECT_EQ(failed_, 0) << last_error_;

  // Back: within a ping interval (and its answer) r1 carries traffic again.
  c_.cut("client", "r1", false);
  c_.cut("server", "r1", false);
  const TimePoint healed_at = c_.clock().now();
  TimePoint back_at{};
  ASSERT_TRUE(until(
      [&] {
        if (route_of(client_, kR1a).usable && back_at == TimePoint{}) back_at = c_.clock().now();
        return back_at != TimePoint{} && forwarded(r1_) > r1_before + 50;
      },
      15s, 10ms));
  EXPECT_LE(back_at - healed_at, kPingInterval + kPingTimeout + 20ms);

  // r1 loses its far side: its tcp2 NI goes down (the kernel's link event). The client's
  // next router ping hears it and leaves r1 for tcp2; the server cannot reach r1 at all.
  r1_->net.set_link_state(kR1b, false);
  const TimePoint down_at = c_.clock().now();
  TimePoint asym_at{};
  ASSERT_TRUE(until(
      [&] {
        RouteInfo r = route_of(client_, kR1a);
        if (!r.usable && asym_at == TimePoint{}) asym_at = c_.clock().now();
        return asym_at != TimePoint{};
      },
      10s, 10ms));
  EXPECT_LE(asym_at - down_at, kPingInterval + 20ms);
  EXPECT_NE(route_of(client_, kR1a).state.find("asymmetric"), std::string::npos)
      << route_of(client_, kR1a).state;
  const uint64_t r1_asym = forwarded(r1_);
  const int ok_asym = ok_;
  ASSERT_TRUE(c_.run_for(12s, 10ms));
  EXPECT_GT(ok_, ok_asym + 500);
  // What r1 forwarded since: the replies (and the odd request) it had in hand at the loss.
  EXPECT_LT(forwarded(r1_), r1_asym + 40);
  EXPECT_EQ(failed_, 0) << last_error_;
  EXPECT_EQ(bad_data_, 0);

  // Healed: taken back.
  r1_->net.set_link_state(kR1b, true);
  const uint64_t r1_healed = forwarded(r1_);
  ASSERT_TRUE(until([&] { return forwarded(r1_) > r1_healed + 50; }, 20s, 10ms));
  EXPECT_TRUE(route_of(client_, kR1a).usable);
  EXPECT_EQ(failed_, 0) << last_error_;
  EXPECT_EQ(bad_data_, 0);
}

// A gateway that answers but does not route is not used; one that routes is.
TEST(RouterPingTest, AGatewayThatDoesNotRouteIsNotUsedAndItsAnswerSaysWhy) {
  SimCluster c;
  NetOptions cn;
  cn.routes = {route("tcp2", kR1a), route("tcp2", kR2a)};
  cn.router_ping_interval = 1s;
  SimNode* client = c.add("client", {kClient}, cn);
  NetOptions not_router;  // two networks, routing off
  SimNode* r1 = c.add("r1", {kR1a, kR1b}, not_router);
  NetOptions router;
  router.routing = true;
  SimNode* r2 = c.add("r2", {kR2a, kR2b}, router);
  ASSERT_TRUE(client && r1 && r2);
  ASSERT_TRUE(c.run_for(1500ms, 10ms));
  std::vector<RouteInfo> routes = client->net.routes();
  ASSERT_EQ(routes.size(), 2u);
  for (const RouteInfo& r : routes) {
    if (r.route.gateway == kR1a) {
      EXPECT_FALSE(r.usable);
      EXPECT_NE(r.state.find("does not route"), std::string::npos) << r.state;
    } else {
      EXPECT_TRUE(r.usable) << r.state;
    }
  }
}

}  // namespace router_sim_test
}  // namespace pfsnet
