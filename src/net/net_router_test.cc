// Routing over the in-memory transport on the manual clock: a client on tcp1, a server on
// tcp2 and routers with an NI on each. Frames keep their two ends across the router; the
// data checksum is the sender's end to end; a router's credits and buffers hold what a
// sender may leave in it; gateways are chosen by priority and shared; a dead one is left.
#include <gtest/gtest.h>

#include "base/test_nid.h"
#include "net/net.h"
#include "net/net_test_support.h"
#include "net/router_buffers.h"
#include "net/routes.h"
#include "transport/mem_transport.h"

namespace pfsnet {
namespace router_test {

using namespace std::chrono_literals;

using net_testing::Received;
using net_testing::RxLog;
using net_testing::TxLog;

struct Node : net_testing::MemNode {
  Node(MemHub& hub, Clock& clock, std::vector<Nid> nids, NetOptions o)
      : MemNode(hub, clock, std::move(nids), std::move(o)) {
    EXPECT_TRUE(start_status.ok());
  }
};

NetOptions opts(std::vector<RouteConfig> routes = {}, bool routing = false, int peer_credits = 8) {
  NetOptions o;
  o.peer_credits = peer_credits;
  o.routes = std::move(routes);
  o.routing = routing;
  return o;
}

RouteConfig route(const char* net, const char* gw, int64_t hops = 1, int64_t priority = 0) {
  return RouteConfig{*parse_lnet_net(net), nid(gw), hops, priority};
}

// A router of `peer_credits` with one large buffer (the others plenty) and `buffer_credits`
// router credits per peer.
NetOptions small_router(int peer_credits, int64_t buffer_credits) {
  NetOptions o = opts({}, true, peer_credits);
  o.router_buffers = {8, 8, 1};
  o.peer_buffer_credits = buffer_credits;
  return o;
}

// `frames` routed writes of 256 KiB from `c` to `to`, pumped.
void send_writes(MemHub& hub, Clock& clock, Net& c, const Nid& to, int frames, TxLog* tx);

std::unique_ptr<OutFrame> msg(uint64_t xid, size_t bulk = 0, FrameKind kind = FrameKind::kRequest) {
  auto f = std::make_unique<OutFrame>();
  f->hdr.kind = kind;
  f->hdr.xid = xid;
  f->payload = Buffer::copy_of(std::string_view("hello"));
  if (bulk) {
    Buffer b(bulk);
    for (size_t i = 0; i < bulk; ++i) b.data()[i] = static_cast<uint8_t>(i * 13 + xid);
    f->bulk = make_bulk(std::move(b));
  }
  return f;
}

void send_writes(MemHub& hub, Clock& clock, Net& c, const Nid& to, int frames, TxLog* tx) {
  for (int i = 0; i < frames; ++i) c.send(to, msg(100 + i, 256 * 1024), clock.now() + 60s, tx);
  hub.pump();
}

bool bulk_intact(const InFrame& f, uint64_t xid, size_t bulk) {
  if (f.bulk.size() != bulk) return false;
  for (size_t i = 0; i < bulk; ++i)
    if (f.bulk.data()[i] != static_cast<uint8_t>(i * 13 + xid)) return false;
  return true;
}

class RouterTest : public ::testing::Test {
 protected:
  ManualClock clock_;
  MemHub hub_;
  Nid c_ = nid("198.18.1.1@tcp1"), s_ = nid("198.18.2.3@tcp2");
  Nid r1a_ = nid("198.18.1.2@tcp1"), r1b_ = nid("198.18.2.2@tcp2");
  Nid r2a_ = nid("198.18.1.4@tcp1"), r2b_ = nid("198.18.2.4@tcp2");
};

// A request with 100 KiB of bulk and its reply cross a router: each end sees the other's
// NID (not the router's), the data arrives intact under the sender's checksum, and the
// router counts two frames forwarded.
TEST_F(RouterTest, ARequestAndItsReplyCrossARouterWithTheirTwoEnds) {
  Node c(hub_, clock_, {c_}, opts({route("tcp2", "198.18.1.2@tcp1")}));
  Node r(hub_, clock_, {r1a_, r1b_}, opts({}, true));
  Node s(hub_, clock_, {s_}, opts({route("tcp1", "198.18.2.2@tcp2")}));
  EXPECT_TRUE(c.net.routed(s_));
  EXPECT_FALSE(c.net.routed(r1a_));
  TxLog tx;
  c.net.send(s_, msg(7, 100 * 1024), clock_.now() + 10s, &tx);
  hub_.pump();
  ASSERT_EQ(tx.results.size(), 1u);
  EXPECT_TRUE(tx.results[0].ok()) << tx.results[0].to_string();
  ASSERT_EQ(s.rx.got.size(), 1u);
  Received& req = s.rx.got[0];
  EXPECT_EQ(req.from, c_);
  EXPECT_EQ(req.frame.hdr.src_nid, c_);
  EXPECT_EQ(req.frame.hdr.dst_nid, s_);
  EXPECT_EQ(req.frame.hdr.ext.hops, 1);
  EXPECT_TRUE(bulk_intact(req.frame, 7, 100 * 1024));
  EXPECT_EQ(req.frame.payload.view(), "hello");  // unsealed: the checksum checked here
  // The reply goes back by the server's own route, to the NI the request came from.
  TxLog rtx;
  s.net.send_via(req.frame.hdr.dst_nid, req.from, msg(7, 4096, FrameKind::kReply),
                 clock_.now() + 10s, &rtx, false);
  req.credit.release();
  hub_.pump();
  ASSERT_EQ(c.rx.got.size(), 1u);
  EXPECT_EQ(c.rx.got[0].from, s_);
  EXPECT_TRUE(bulk_intact(c.rx.got[0].frame, 7, 4096));
  RouterStats rs = r.net.router_stats();
  EXPECT_TRUE(rs.routing);
  EXPECT_EQ(rs.forwarded, 2u);
  EXPECT_EQ(rs.pools[size_t(RouterPool::kLarge)].in_use, 0);
  EXPECT_EQ(rs.pools[size_t(RouterPool::kSmall)].in_use, 0);
  EXPECT_EQ(c.net.router_stats().sent_routed, 1u);
  EXPECT_EQ(s.net.router_stats().received_routed, 1u);
  EXPECT_FALSE(c.net.router_stats().routing);
  // The router's peers are its neighbours only: the two ends never met.
  EXPECT_FALSE(c.net.wire_of(s_));
  auto routes = c.net.routes();
  ASSERT_EQ(routes.size(), 1u);
  EXPECT_TRUE(routes[0].usable);
  EXPECT_TRUE(routes[0].connected);
  EXPECT_EQ(routes[0].state, "up");
}

TEST_F(RouterTest, ANetworkWithoutARouteFailsAtOnceSayingSo) {
  Node c(hub_, clock_, {c_}, opts());
  TxLog tx;
  c.net.send(s_, msg(1), clock_.now() + 10s, &tx);
  ASSERT_EQ(tx.results.size(), 1u);
  EXPECT_EQ(tx.results[0].code(), Code::kInvalidArgument);  // not worth sending again
  EXPECT_NE(tx.results[0].message().find("no route"), std::string::npos) << tx.results[0].message();
  // Routes are checked as the config's are.
  EXPECT_FALSE(c.net.add_route(route("tcp1", "198.18.1.2@tcp1")).ok());  // its own network
  EXPECT_FALSE(c.net.add_route(route("tcp2", "198.18.9.9@tcp3")).ok());  // gateway elsewhere
  EXPECT_TRUE(c.net.add_route(route("tcp2", "198.18.1.2@tcp1")).ok());
  EXPECT_FALSE(c.net.add_route(route("tcp2", "198.18.1.2@tcp1")).ok());  // twice
  EXPECT_TRUE(c.net.add_route(route("tcp2", "198.18.1.2@tcp1", 2, 5), true).ok());
  ASSERT_EQ(c.net.routes().size(), 1u);
  EXPECT_EQ(c.net.routes()[0].route.priority, 5);
  EXPECT_EQ(c.net.del_route(*parse_lnet_net("tcp3"), std::nullopt).code(), Code::kNotFound);
  EXPECT_TRUE(c.net.del_route(*parse_lnet_net("tcp2"), std::nullopt).ok());
  EXPECT_TRUE(c.net.routes().empty());
}

// A node that does not route drops a routed frame for another node (counted), and never
// takes it for its own.
TEST_F(RouterTest, ANodeThatDoesNotRouteDropsFramesForOthers) {
  Node c(hub_, clock_, {c_}, opts({route("tcp2", "198.18.1.2@tcp1")}));
  Node r(hub_, clock_, {r1a_, r1b_}, opts({}, false));
  Node s(hub_, clock_, {s_}, opts());
  TxLog tx;
  c.net.send(s_, msg(1), clock_.now() + 10s, &tx);
  hub_.pump();
  EXPECT_TRUE(r.rx.got.empty());
  EXPECT_TRUE(s.rx.got.empty());
  EXPECT_EQ(r.net.router_stats().dropped_not_router, 1u);
}

// Router credits: a router with one large buffer and two credits per peer, in front of a
// server that holds what it gets. The router forwards what the server's window takes,
// holds one more in its buffer, and past that the client's frames wait -- in the router's
// queue for a credit, then at the client for the window of the hop: what the router holds
// is bounded whatever the client sends. Once the server consumes, all of them arrive, in
// order and intact.
TEST_F(RouterTest, ARoutersBuffersAndCreditsBoundWhatAClientLeavesInIt) {
  Node c(hub_, clock_, {c_}, opts({route("tcp2", "198.18.1.2@tcp1")}, false, 2));
  Node r(hub_, clock_, {r1a_, r1b_}, small_router(/*peer_credits=*/2, /*buffer_credits=*/2));
  Node s(hub_, clock_, {s_}, opts({}, false, 2));
  TxLog tx;
  constexpr int kFrames = 8;
  send_writes(hub_, clock_, c.net, s_, kFrames, &tx);
  // The server got its window's worth; the router holds one large buffer (a frame waiting
  // for the server's window) and one frame waiting for it; the client keeps the rest.
  EXPECT_EQ(s.rx.got.size(), 2u);
  RouterStats rs = r.net.router_stats();
  const RouterPoolStats& large = rs.pools[size_t(RouterPool::kLarge)];
  EXPECT_EQ(large.in_use, 1);
  EXPECT_EQ(large.queued, 1);
  EXPECT_GE(large.waits, 1u);
  EXPECT_LE(large.min_free, 0);
  EXPECT_EQ(rs.peer_queued, 0);
  // What it holds: the frame in its buffer and the one waiting, no more.
  const int64_t frame = int64_t(kHeaderSize + 5 + 256 * 1024);  // the seal beside, not counted
  EXPECT_EQ(rs.held_bytes, 2 * frame);
  auto cpeers = c.net.peers();
  ASSERT_EQ(cpeers.size(), 2u);  // the router's NI, and the server's (no path: routed)
  int64_t queued_at_client = 0;
  for (const NiInfo& p : cpeers) queued_at_client += p.queued;
  EXPECT_EQ(queued_at_client, kFrames - 2 - 2);
  EXPECT_EQ(tx.results.size(), 4u);  // written: two to the server, two held in the router
  // The server consumes: everything flows, in order.
  for (int round = 0; round < kFrames && s.rx.got.size() < size_t(kFrames); ++round) {
    for (auto& g : s.rx.got) g.credit.release();
    hub_.pump();
  }
  ASSERT_EQ(s.rx.got.size(), size_t(kFrames));
  for (int i = 0; i < kFrames; ++i) {
    EXPECT_EQ(s.rx.got[i].frame.hdr.xid, uint64_t(100 + i));
    EXPECT_TRUE(bulk_intact(s.rx.got[i].frame, 100 + i, 256 * 1024)) << i;
    EXPECT_EQ(s.rx.got[i].from, c_);
  }
  rs = r.net.router_stats();
  EXPECT_EQ(rs.forwarded, uint64_t(kFrames));
  EXPECT_EQ(rs.pools[size_t(RouterPool::kLarge)].in_use, 0);
  EXPECT_EQ(rs.pools[size_t(RouterPool::kLarge)].queued, 0);
  EXPECT_EQ(rs.held_bytes, 0);
  EXPECT_EQ(rs.held_bytes_max, 2 * frame);
  ASSERT_EQ(tx.results.size(), size_t(kFrames));
  for (const Status& st : tx.results) EXPECT_TRUE(st.ok());
}

// A router grants each peer a receive window of its own peer_credits: a client configured
// with many more keeps within it, so what the client can leave waiting in the router is the
// router's choice, not the client's. The router raising its peer_credits at run time tells
// the client (a WINDOW frame), and everything then flows, in order, with no connection cut.
TEST_F(RouterTest, AClientsWindowIntoARouterIsTheOneTheRouterGrants) {
  Node c(hub_, clock_, {c_}, opts({route("tcp2", "198.18.1.2@tcp1")}, false, 64));
  // 64 router credits: the window, not the router credits, holds the client here.
  Node r(hub_, clock_, {r1a_, r1b_}, small_router(/*peer_credits=*/4, /*buffer_credits=*/64));
  Node s(hub_, clock_, {s_}, opts({}, false, 2));
  TxLog tx;
  constexpr int kFrames = 32;
  send_writes(hub_, clock_, c.net, s_, kFrames, &tx);
  const int64_t frame = int64_t(kHeaderSize + 5 + 256 * 1024);
  auto queued_at_client = [&] {
    int64_t n = 0;
    for (const NiInfo& p : c.net.peers()) n += p.queued;
    return n;
  };
  // The server holds the router's window (4, unconsumed); the router holds the client's
  // window into it (4: one in its large buffer, three waiting for it); the client the rest.
  EXPECT_EQ(s.rx.got.size(), 4u);
  EXPECT_EQ(r.net.router_stats().held_bytes, 4 * frame);
  EXPECT_EQ(queued_at_client(), kFrames - 4 - 4);
  // The router's peer_credits raised: its window to the server and the client's into it.
  r.net.set_credits(64, 8);
  hub_.pump();
  EXPECT_EQ(s.rx.got.size(), 8u);
  EXPECT_EQ(r.net.router_stats().held_bytes, 8 * frame);
  EXPECT_EQ(queued_at_client(), kFrames - 8 - 8);
  for (int round = 0; round < kFrames && s.rx.got.size() < size_t(kFrames); ++round) {
    for (auto& g : s.rx.got) g.credit.release();
    hub_.pump();
  }
  ASSERT_EQ(s.rx.got.size(), size_t(kFrames));
  for (int i = 0; i < kFrames; ++i) {
    EXPECT_EQ(s.rx.got[i].frame.hdr.xid, uint64_t(100 + i));
    EXPECT_TRUE(bulk_intact(s.rx.got[i].frame, 100 + i, 256 * 1024)) << i;
  }
  RouterStats rs = r.net.router_stats();
  EXPECT_EQ(rs.held_bytes_max, 8 * frame);
  EXPECT_EQ(rs.held_bytes, 0);
  ASSERT_EQ(tx.results.size(), size_t(kFrames));
  for (const Status& st : tx.results) EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(c.rx.disconnected.empty());
  EXPECT_TRUE(r.rx.disconnected.empty());
}

// One end of a connection, without a Net: it writes what a test tells it to, credits or not.
struct RawEnd : TransportEvents {
  void on_connected(const ConnectionPtr& c) override { conn = c; }
  void on_frame(Connection&, InFrame&& f) override { kinds.push_back(f.hdr.kind); }
  void on_closed(Connection&, const Status& why) override { closed = why; }
  ConnectionPtr conn;
  std::vector<FrameKind> kinds;
  std::optional<Status> closed;
};

// A client that ignores the window it was granted -- it writes 16 routed 256 KiB frames
// at a router that grants 4, towards a server that takes nothing -- is cut off at the
// fifth: the router never holds more than the window's worth of it. One that does not
// speak windows at all has its routed frames dropped, not held.
TEST_F(RouterTest, AFlooderBeyondItsWindowIsCutOffAndTheRouterHoldsNoMore) {
  Node r(hub_, clock_, {r1a_, r1b_}, small_router(/*peer_credits=*/4, /*buffer_credits=*/64));
  Node s(hub_, clock_, {s_}, opts({}, false, 2));
  const int64_t frame = int64_t(kHeaderSize + 1 + 256 * 1024);
  auto flood = [&](const Nid& from, uint64_t features, int frames) {
    RawEnd end;
    TransportOptions to;
    to.cluster_key = "0123456789abcdef";
    to.wire.features = features;
    MemTransport t(hub_, to, {from}, clock_, end);
    t.connect(from, r1a_, 7988, [](Result<ConnectionPtr>) {});
    hub_.pump();
    EXPECT_TRUE(end.conn);
    if (!end.conn) return end.closed;
    EXPECT_EQ(end.conn->wire().peer_window, features & kFeatureWindow ? 4u : 0u);
    for (int i = 0; i < frames; ++i) {
      auto f = std::make_unique<OutFrame>();
      f->hdr.kind = FrameKind::kRequest;
      f->hdr.xid = uint64_t(i + 1);
      f->hdr.src_nid = from;
      f->hdr.dst_nid = r1a_;
      f->hdr.ext.routed = true;
      f->hdr.ext.route_src = from;
      f->hdr.ext.route_dst = s_;
      f->payload = Buffer::copy_of(std::string_view("x"));
      f->bulk = make_bulk(Buffer(256 * 1024));
      end.conn->send(std::move(f));
    }
    hub_.pump();
    std::optional<Status> why = end.closed;
    t.stop();
    hub_.pump();
    return why;
  };
  std::optional<Status> cut = flood(c_, kFeaturesSpoken, 16);
  ASSERT_TRUE(cut.has_value()) << "the flooder's connection is still open";
  RouterStats rs = r.net.router_stats();
  EXPECT_LE(rs.held_bytes_max, 4 * frame);
  EXPECT_EQ(s.rx.got.size(), 4u);  // its window's worth went on (the server's window, 4)
  EXPECT_EQ(rs.dropped_no_window, 0u);
  // Without the window feature: dropped, counted, nothing held.
  const uint64_t forwarded = rs.forwarded;
  std::optional<Status> dropped =
      flood(nid("198.18.1.9@tcp1"), kFeaturesSpoken & ~kFeatureWindow, 3);
  EXPECT_FALSE(dropped.has_value()) << dropped->to_string();
  rs = r.net.router_stats();
  EXPECT_EQ(rs.dropped_no_window, 3u);
  EXPECT_EQ(rs.forwarded, forwarded);
  EXPECT_LE(rs.held_bytes_max, 4 * frame);
}

// A routed RPC's remote timeout is held against the far NI, never the router's: the server's
// health falls (the router's stays full and its connection open), it is pinged back up
// through the router from the client's NI towards it, and the next routed frame from it
// raises it again.
TEST_F(RouterTest, ARoutedSilenceLowersTheFarNiNotTheRouterAndItIsPingedThroughIt) {
  Node c(hub_, clock_, {c_}, opts({route("tcp2", "198.18.1.2@tcp1")}));
  Node r(hub_, clock_, {r1a_, r1b_}, opts({}, true));
  Node s(hub_, clock_, {s_}, opts({route("tcp1", "198.18.2.2@tcp2")}));
  TxLog tx;
  c.net.send(s_, msg(1), clock_.now() + 10s, &tx);
  hub_.pump();
  ASSERT_EQ(tx.results.size(), 1u);
  auto info = [&](const Nid& n) {
    for (const NiInfo& p : c.net.peers())
      if (p.nid == n) return p;
    return NiInfo{};
  };
  TxTimes t;
  t.local_nid = c_;
  t.peer_nid = r1a_;
  t.routed = true;
  t.route_dst = s_;
  c.net.report_remote_timeout(t, "no reply from " + s_.to_string());
  const int low = info(s_).health;
  EXPECT_LT(low, kMaxHealth);
  EXPECT_EQ(info(s_).remote_timeouts, 1u);
  EXPECT_EQ(info(r1a_).health, kMaxHealth);
  EXPECT_EQ(info(r1a_).remote_timeouts, 0u);
  EXPECT_TRUE(c.rx.disconnected.empty()) << "the router's connection stays";
  // Recovery: the far NI is pinged from the client's NI on the gateway's network.
  clock_.advance(2s);
  bool due = false;
  for (const RecoveryTarget& rt : c.net.recovery_due(clock_.now()))
    due |= rt.peer == s_ && rt.local == c_ && !rt.for_local_ni;
  EXPECT_TRUE(due);
  // A routed frame from it: heard end to end.
  s.net.send(c_, msg(2, 0, FrameKind::kReply), clock_.now() + 10s, nullptr);
  hub_.pump();
  ASSERT_EQ(c.rx.got.size(), 1u);
  EXPECT_GT(info(s_).health, low) << "raised from where it fell";
}

// Gateways: the lower priority is taken; among equals the load is shared; a gateway whose
// connect fails (a dead router) is left for the other at once, and taken back once it
// answers again.
TEST_F(RouterTest, GatewaysAreChosenByPrioritySharedAndADeadOneIsLeft) {
  Node c(hub_, clock_, {c_},
         opts({route("tcp2", "198.18.1.2@tcp1"), route("tcp2", "198.18.1.4@tcp1", 1, 1)}));
  Node r1(hub_, clock_, {r1a_, r1b_}, opts({}, true));
  Node r2(hub_, clock_, {r2a_, r2b_}, opts({}, true));
  Node s(hub_, clock_, {s_}, opts({route("tcp1", "198.18.2.2@tcp2")}));
  TxLog tx;
  for (int i = 0; i < 4; ++i) c.net.send(s_, msg(i), clock_.now() + 10s, &tx);
  hub_.pump();
  EXPECT_EQ(r1.net.router_stats().forwarded, 4u);  // priority 0
  EXPECT_EQ(r2.net.router_stats().forwarded, 0u);
  // Equal priority: shared.
  ASSERT_TRUE(c.net.add_route(route("tcp2", "198.18.1.4@tcp1", 1, 0), true).ok());
  for (int i = 0; i < 4; ++i) c.net.send(s_, msg(10 + i), clock_.now() + 10s, &tx);
  hub_.pump();
  EXPECT_EQ(r1.net.router_stats().forwarded, 6u);
  EXPECT_EQ(r2.net.router_stats().forwarded, 2u);
  for (auto& g : s.rx.got) g.credit.release();
  // The first router dies: its connection drops and no host answers any more.
  hub_.set_no_host(r1a_, true);
  c.net.drop_peer(r1a_, "test: router gone");
  hub_.pump();
  // The next send for the dead one finds no connection and tries one: its connect fails,
  // and so does that send (as a connect error does for an RPC, which sends it again) --
  // and from then on the other gateway takes them all.
  c.net.send(s_, msg(20), clock_.now() + 10s, &tx);  // the dead one has the most credits
  hub_.pump();
  for (int i = 0; i < 4; ++i) c.net.send(s_, msg(30 + i), clock_.now() + 10s, &tx);
  hub_.pump();
  auto routes = c.net.routes();
  ASSERT_EQ(routes.size(), 2u);
  const RouteInfo& dead = routes[0].route.gateway == r1a_ ? routes[0] : routes[1];
  EXPECT_FALSE(dead.usable);
  EXPECT_NE(dead.state.find("backs off"), std::string::npos) << dead.state;
  EXPECT_EQ(r2.net.router_stats().forwarded, 2u + 4u);
  size_t failed = 0;
  for (const Status& st : tx.results) failed += !st.ok();
  EXPECT_EQ(failed, 1u);
  EXPECT_EQ(s.rx.got.size(), 4u + 4u + 4u);
  // Back: after its backoff the gateway is usable again.
  hub_.set_no_host(r1a_, false);
  clock_.advance(61s);
  c.net.expire(clock_.now());
  hub_.pump();
  routes = c.net.routes();
  EXPECT_TRUE((routes[0].route.gateway == r1a_ ? routes[0] : routes[1]).usable);
}

// A frame damaged on the hop into the router is counted there against that hop, and
// forwarded as it came: the destination refuses it as corrupt (its sender sends again),
// naming the first sender.
TEST_F(RouterTest, DataDamagedBeforeTheRouterIsCountedThereAndRefusedAtTheEnd) {
  Node c(hub_, clock_, {c_}, opts({route("tcp2", "198.18.1.2@tcp1")}));
  Node r(hub_, clock_, {r1a_, r1b_}, opts({}, true));
  Node s(hub_, clock_, {s_}, opts());
  FaultRule fr;
  fr.action = FaultRule::Action::kCorrupt;
  fr.rate = 1;
  c.net.add_fault(fr);
  TxLog tx;
  c.net.send(s_, msg(5, 3000), clock_.now() + 10s, &tx);
  hub_.pump();
  EXPECT_EQ(r.net.router_stats().corrupt, 1u);
  EXPECT_EQ(r.net.router_stats().forwarded, 1u);
  EXPECT_TRUE(s.rx.got.empty());
  ASSERT_EQ(s.rx.corrupt.size(), 1u);
  EXPECT_EQ(s.rx.corrupt[0].from, c_);
}

// Two routers that each route tcp2 through the other: a frame for tcp2 goes round until
// kMaxFrameHops, then is dropped as a loop.
TEST_F(RouterTest, ARoutingLoopEndsAtTheHopLimit) {
  Node c(hub_, clock_, {c_}, opts({route("tcp2", "198.18.1.2@tcp1")}));
  Node r1(hub_, clock_, {r1a_}, opts({route("tcp2", "198.18.1.4@tcp1")}, true));
  Node r2(hub_, clock_, {r2a_}, opts({route("tcp2", "198.18.1.2@tcp1")}, true));
  TxLog tx;
  c.net.send(s_, msg(1), clock_.now() + 10s, &tx);
  hub_.pump();
  EXPECT_EQ(r1.net.router_stats().dropped_loop + r2.net.router_stats().dropped_loop, 1u);
  EXPECT_EQ(r1.net.router_stats().forwarded + r2.net.router_stats().forwarded,
            uint64_t(kMaxFrameHops));
}

// ---- the pure cores ----

TEST(RouteChoice, PriorityThenHopsThenHealthThenCreditsThenLeastRecentlyUsed) {
  std::vector<RouteConfig> r = {route("tcp2", "198.18.1.2@tcp1", 2, 0),
                                route("tcp2", "198.18.1.3@tcp1", 1, 1),
                                route("tcp2", "198.18.1.4@tcp1", 1, 0)};
  std::vector<GatewayView> v(3);
  EXPECT_EQ(choose_route(r, v), 2u);  // priority 0, then 1 hop before 2
  v[2].usable = false;
  EXPECT_EQ(choose_route(r, v), 0u);  // priority before hops
  v[0].usable = false;
  EXPECT_EQ(choose_route(r, v), 1u);
  v[1].usable = false;
  EXPECT_FALSE(choose_route(r, v));
  std::vector<RouteConfig> eq = {route("tcp2", "198.18.1.2@tcp1"),
                                 route("tcp2", "198.18.1.3@tcp1")};
  std::vector<GatewayView> w(2);
  w[0].health = 900;
  EXPECT_EQ(choose_route(eq, w), 1u);  // healthier
  w[0].health = 1000;
  w[1].credits = -3;
  EXPECT_EQ(choose_route(eq, w), 0u);  // more credits
  w[1].credits = 0;
  w[0].last_used = 5;
  w[1].last_used = 4;
  EXPECT_EQ(choose_route(eq, w), 1u);  // used longer ago
}

TEST(RouterBuffersTest, APeersCreditsThenAPoolsBuffersAndBothPassOnInOrder) {
  RouterBuffers<int, int> b({2, 2, 1}, /*peer_credits=*/2);
  std::vector<int> go;
  b.admit(1, RouterPool::kLarge, 10, &go);  // a credit and the large buffer
  b.admit(1, RouterPool::kLarge, 11, &go);  // a credit; waits for the buffer
  b.admit(1, RouterPool::kTiny, 12, &go);   // no credit left: waits for one
  b.admit(2, RouterPool::kTiny, 20, &go);   // another peer: its own credits
  EXPECT_EQ(go, (std::vector<int>{10, 20}));
  EXPECT_EQ(b.pool(RouterPool::kLarge).queued, 1);
  EXPECT_EQ(b.pool(RouterPool::kLarge).min_free, -1);
  EXPECT_EQ(b.peer_queued(), 1);
  EXPECT_EQ(b.peer_used(1), 2);
  go.clear();
  b.release(1, RouterPool::kLarge, &go);  // 10 done: 11 takes the buffer, 12 the credit
  EXPECT_EQ(go, (std::vector<int>{11, 12}));
  EXPECT_EQ(b.pool(RouterPool::kLarge).in_use, 1);
  EXPECT_EQ(b.pool(RouterPool::kTiny).in_use, 2);
  EXPECT_EQ(b.peer_used(1), 2);
  go.clear();
  b.release(1, RouterPool::kLarge, &go);
  b.release(1, RouterPool::kTiny, &go);
  b.release(2, RouterPool::kTiny, &go);
  EXPECT_TRUE(go.empty());
  EXPECT_EQ(b.peer_used(1), 0);
  EXPECT_EQ(b.pool(RouterPool::kTiny).in_use, 0);
  EXPECT_EQ(b.pool(RouterPool::kLarge).waits, 1u);
  EXPECT_EQ(b.peer_waits(), 1u);
  EXPECT_EQ(router_pool_for(0), RouterPool::kTiny);
  EXPECT_EQ(router_pool_for(513), RouterPool::kSmall);
  EXPECT_EQ(router_pool_for(64 * 1024 + 1), RouterPool::kLarge);
}

}  // namespace router_test
}  // namespace pfsnet
