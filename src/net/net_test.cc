// Net over the in-memory transport: credit accounting, NI credits, deadlines, errors.
#include "net/net.h"

#include <gtest/gtest.h>

#include "base/test_nid.h"
#include "net/net_test_support.h"
#include "transport/mem_transport.h"
#include "wire/data_crc.h"

namespace pfsnet {
namespace {

using namespace std::chrono_literals;

using net_testing::Received;
using net_testing::RxLog;
using net_testing::TxLog;

struct Node : net_testing::MemNode {
  Node(MemHub& hub, Clock& clock, Nid n, NetOptions o) : MemNode(hub, clock, {n}, std::move(o)) {
    EXPECT_TRUE(start_status.ok());
  }
};

std::unique_ptr<OutFrame> msg(uint64_t xid) {
  auto f = std::make_unique<OutFrame>();
  f->hdr.kind = FrameKind::kRequest;
  f->hdr.xid = xid;
  f->payload = Buffer::copy_of(std::string_view("hello"));
  return f;
}

NetOptions opts(int credits, int peer_credits) {
  NetOptions o;
  o.credits = credits;
  o.peer_credits = peer_credits;
  return o;
}

class NetTest : public ::testing::Test {
 protected:
  ManualClock clock_;
  MemHub hub_;
  Nid a_ = nid("10.0.0.1@tcp"), b_ = nid("10.0.0.2@tcp"), c_ = nid("10.0.0.3@tcp");
};

TEST_F(NetTest, HighWaterIsHalfTheWindowBelowTheWindow) {
  EXPECT_EQ(opts(64, 1).credit_high_water(), 1u);
  EXPECT_EQ(opts(64, 2).credit_high_water(), 1u);
  EXPECT_EQ(opts(64, 3).credit_high_water(), 2u);
  EXPECT_EQ(opts(64, 8).credit_high_water(), 4u);
}

std::unique_ptr<OutFrame> large(uint64_t xid) {
  auto f = msg(xid);
  f->bulk = make_bulk(Buffer(kBulkConnMinBytes));
  return f;
}

// Raised at run time (tune --apply, config set), conns_per_peer opens the bulk connections
// of every connected path at once, not at its next large message (a cold stream then).
TEST_F(NetTest, ConnsPerPeerRaisedAtRunTimeOpensBulkConnectionsAtOnce) {
  Node a(hub_, clock_, a_, opts(256, 4)), b(hub_, clock_, b_, opts(256, 4));
  TxLog tx;
  a.net.send(b_, msg(1), clock_.now() + 10s, &tx);
  hub_.pump();
  EXPECT_EQ(a.net.peers()[0].connections, 1);
  a.net.set_conns_per_peer(3);
  hub_.pump();
  EXPECT_EQ(a.net.peers()[0].connections, 4);
  EXPECT_EQ(b.net.peers()[0].connections, 4);
  // Lowered, the open ones stay; raised again, only the missing ones open.
  a.net.set_conns_per_peer(1);
  a.net.set_conns_per_peer(3);
  hub_.pump();
  EXPECT_EQ(a.net.peers()[0].connections, 4);
  // The end that accepted the path opens none of its own at once (A's serve it too).
  b.net.set_conns_per_peer(6);
  hub_.pump();
  EXPECT_EQ(b.net.peers()[0].connections, 4);
  ASSERT_EQ(tx.results.size(), 1u);
  EXPECT_TRUE(tx.results[0].ok());
}

TEST_F(NetTest, ConnsPerPeerSpreadsLargeMessagesAndKeepsSmallOnesApart) {
  NetOptions o = opts(256, 4);
  o.conns_per_peer = 3;
  Node a(hub_, clock_, a_, o), b(hub_, clock_, b_, opts(256, 4));
  TxLog tx;
  // Two small messages, on the first connection.
  a.net.send(b_, msg(1), clock_.now() + 10s, &tx);
  a.net.send(b_, msg(3), clock_.now() + 10s, &tx);
  hub_.pump();
  // As socklnd does, the path's connection opens its three bulk ones with it: they are up
  // before the first large message, which goes on one of them.
  EXPECT_EQ(a.net.peers()[0].connections, 4);
  EXPECT_EQ(b.net.peers()[0].connections, 4);
  a.net.send(b_, large(2), clock_.now() + 10s, &tx);
  hub_.pump();
  ASSERT_EQ(b.rx.got.size(), 3u);
  EXPECT_EQ(a.net.peers()[0].connections, 4);
  for (auto& r : b.rx.got) r.credit.release();
  b.rx.got.clear();
  hub_.pump();
  // B consumes nothing now: 12 large messages fill the three bulk windows of 4 (one
  // connection would have taken 4), and small ones still pass on the first connection.
  for (int i = 0; i < 13; ++i) a.net.send(b_, large(10 + i), clock_.now() + 10s, &tx);
  for (int i = 0; i < 4; ++i) a.net.send(b_, msg(30 + i), clock_.now() + 10s, &tx);
  hub_.pump();
  size_t big = 0, small = 0;
  for (const Received& r : b.rx.got) (r.frame.bulk.size() > 0 ? big : small)++;
  EXPECT_EQ(big, 12u);
  EXPECT_EQ(small, 4u);
  EXPECT_EQ(a.net.peers()[0].queued, 1);  // the 13th waits for a bulk window
  // Consumed, the rest goes; B's own large messages use the bulk connections A opened
  // (B's conns_per_peer is 1: it opens none).
  for (auto& r : b.rx.got) r.credit.release();
  hub_.pump();
  EXPECT_EQ(b.rx.got.size(), 17u);
  TxLog back;
  for (int i = 0; i < 8; ++i) b.net.send(a_, large(50 + i), clock_.now() + 10s, &back);
  hub_.pump();
  EXPECT_EQ(a.rx.got.size(), 8u);  // 2 x 4: more than one connection's window
  EXPECT_EQ(b.net.peers()[0].connections, 4);
  // Nothing flows back on a bulk connection: each credit returns at once on a credit
  // frame (not at the next expire()), so the sender's NI credits are whole again.
  for (auto& r : a.rx.got) r.credit.release();
  hub_.pump();
  EXPECT_EQ(b.net.nis()[0].credits, 256);
  for (int i = 0; i < 3; ++i) a.net.send(b_, large(60 + i), clock_.now() + 10s, &tx);
  hub_.pump();
  for (auto& r : b.rx.got) r.credit.release();
  hub_.pump();
  EXPECT_EQ(a.net.nis()[0].credits, 256);
  ASSERT_EQ(tx.results.size(), 23u);
  for (auto& s : tx.results) EXPECT_TRUE(s.ok()) << s.to_string();
}

// Opens A's path to B with its bulk connections (A's conns_per_peer), and settles what the
// opening left owed: both windows whole.
void open_settled(MemHub& hub, ManualClock& clock, Node& a, Node& b, const Nid& to) {
  TxLog tx;
  a.net.send(to, msg(1), clock.now() + 10s, &tx);
  hub.pump();
  ASSERT_EQ(b.rx.got.size(), 1u);
  b.rx.got.clear();  // consumed
  hub.pump();
  a.net.expire(clock.now());
  b.net.expire(clock.now());
  hub.pump();
  ASSERT_EQ(tx.results.size(), 1u);
  EXPECT_TRUE(tx.results[0].ok());
}

// With bulk connections, large requests travel on them and their small replies on the
// first connection, where nothing goes back to carry the replies' credits: each returns
// at once, or the replying end would keep half its window owed (measured: it waited for
// credits on more than half its replies at 40 in flight over a 50 ms path).
TEST_F(NetTest, WithBulkConnectionsTheFirstConnectionsCreditsReturnAtOnce) {
  NetOptions o = opts(256, 8);
  o.conns_per_peer = 3;
  Node a(hub_, clock_, a_, o), b(hub_, clock_, b_, opts(256, 8));
  open_settled(hub_, clock_, a, b, b_);
  ASSERT_EQ(b.net.peers()[0].connections, 4);
  ASSERT_EQ(b.net.peers()[0].credits, 8);
  TxLog tx;
  // B replies on the first connection; A consumes each reply and sends nothing back on it.
  for (int i = 0; i < 3; ++i) b.net.send(a_, msg(10 + i), clock_.now() + 10s, &tx);
  hub_.pump();
  ASSERT_EQ(a.rx.got.size(), 3u);
  EXPECT_EQ(b.net.peers()[0].credits, 5);
  a.rx.got[0].credit.release();
  hub_.pump();
  EXPECT_EQ(b.net.peers()[0].credits, 6) << "below the high water (4), yet returned";
  a.rx.got.clear();
  hub_.pump();
  EXPECT_EQ(b.net.peers()[0].credits, 8);
  // A run-time change of the window keeps it so.
  a.net.set_credits(256, 16);
  b.net.set_credits(256, 16);
  b.net.send(a_, msg(20), clock_.now() + 10s, &tx);
  hub_.pump();
  ASSERT_EQ(a.rx.got.size(), 1u);
  a.rx.got.clear();
  hub_.pump();
  EXPECT_EQ(b.net.peers()[0].credits, 16);
  // Without bulk connections the first connection returns at its high water: a reply
  // would carry the credit.
  Node c(hub_, clock_, c_, opts(256, 8));
  c.net.send(a_, msg(30), clock_.now() + 10s, &tx);
  hub_.pump();
  ASSERT_EQ(a.rx.got.size(), 1u);
  a.rx.got.clear();
  hub_.pump();
  EXPECT_EQ(c.net.peers()[0].credits, 7);
  for (auto& s : tx.results) EXPECT_TRUE(s.ok()) << s.to_string();
}

// A bandwidth probe's train shares one TCP stream: one_stream keeps large messages on the
// first connection, within its window, while the bulk connections stand idle.
TEST_F(NetTest, AOneStreamMessageStaysOnTheFirstConnection) {
  NetOptions o = opts(256, 4);
  o.conns_per_peer = 3;
  Node a(hub_, clock_, a_, o), b(hub_, clock_, b_, opts(256, 4));
  open_settled(hub_, clock_, a, b, b_);
  ASSERT_EQ(a.net.peers()[0].connections, 4);
  TxLog tx;
  // B consumes nothing: the first connection's window (4) bounds what arrives.
  for (int i = 0; i < 6; ++i) {
    auto f = large(10 + i);
    f->one_stream = true;
    a.net.send(b_, std::move(f), clock_.now() + 10s, &tx);
  }
  hub_.pump();
  EXPECT_EQ(b.rx.got.size(), 4u);
  EXPECT_EQ(a.net.peers()[0].queued, 2);
  EXPECT_EQ(a.net.peers()[0].credits, 0);
  // Large messages without it go on the bulk connections meanwhile.
  for (int i = 0; i < 3; ++i) a.net.send(b_, large(20 + i), clock_.now() + 10s, &tx);
  hub_.pump();
  EXPECT_EQ(b.rx.got.size(), 7u);
  for (auto& r : b.rx.got) r.credit.release();
  hub_.pump();
  EXPECT_EQ(b.rx.got.size(), 9u);
  ASSERT_EQ(tx.results.size(), 9u);
  for (auto& s : tx.results) EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST_F(NetTest, OneConnectionPerPeerCarriesEverythingByDefault) {
  TxLog tx;  // outlives the nodes: the queued sends fail into it as they stop
  Node a(hub_, clock_, a_, opts(256, 4)), b(hub_, clock_, b_, opts(256, 4));
  for (int i = 0; i < 8; ++i) a.net.send(b_, large(i), clock_.now() + 10s, &tx);
  hub_.pump();
  EXPECT_EQ(b.rx.got.size(), 4u);  // one window
  EXPECT_EQ(a.net.peers()[0].connections, 1);
  EXPECT_EQ(a.net.peers()[0].queued, 4);
}

TEST_F(NetTest, PeerCreditsBoundUnconsumedMessages) {
  Node a(hub_, clock_, a_, opts(64, 2)), b(hub_, clock_, b_, opts(64, 2));
  TxLog tx;
  for (int i = 0; i < 5; ++i) a.net.send(b_, msg(i), clock_.now() + 10s, &tx);
  hub_.pump();
  // Only peer_credits messages reach B while it holds them unconsumed.
  ASSERT_EQ(b.rx.got.size(), 2u);
  EXPECT_EQ(b.rx.got[0].from, a_);
  auto peers = a.net.peers();
  ASSERT_EQ(peers.size(), 1u);
  EXPECT_EQ(peers[0].credits, 0);
  EXPECT_EQ(peers[0].credits_min, 0);
  EXPECT_EQ(peers[0].queued, 3);
  EXPECT_EQ(a.net.nis()[0].credits, 62);
  // Consuming one returns one credit (explicit credit frame: nothing flows back).
  b.rx.got[0].credit.release();
  hub_.pump();
  ASSERT_EQ(b.rx.got.size(), 3u);
  EXPECT_EQ(a.net.peers()[0].queued, 2);
  for (auto& r : b.rx.got) r.credit.release();
  hub_.pump();
  ASSERT_EQ(b.rx.got.size(), 5u);
  for (auto& r : b.rx.got) r.credit.release();
  hub_.pump();
  EXPECT_EQ(a.net.peers()[0].credits, 2);
  EXPECT_EQ(a.net.nis()[0].credits, 64);
  EXPECT_EQ(a.net.nis()[0].credits_min, 62);
  ASSERT_EQ(tx.results.size(), 5u);
  for (auto& s : tx.results) EXPECT_TRUE(s.ok());
  EXPECT_EQ(a.net.nis()[0].send_count, 5u);
  EXPECT_EQ(b.net.nis()[0].recv_count, 5u);
  // Each frame: its header, 5 bytes of payload and their checksum.
  EXPECT_EQ(b.net.peers()[0].recv_bytes, 5u * (kHeaderSize + 5 + kDataCrcSize));
  // The per-node traffic sums, and the node a NID belongs to.
  auto loads = a.net.peer_loads();
  ASSERT_EQ(loads.size(), 1u);
  EXPECT_EQ(loads[0].peer, b_);
  EXPECT_EQ(loads[0].sends, 5u);
  EXPECT_EQ(loads[0].bytes, a.net.peers()[0].send_bytes + a.net.peers()[0].recv_bytes);
  EXPECT_TRUE(loads[0].up);
  EXPECT_EQ(a.net.peer_of(b_), b_);
  EXPECT_FALSE(a.net.peer_of(c_));
  // Frames arrive in order.
  for (int i = 0; i < 5; ++i) EXPECT_EQ(b.rx.got[i].frame.hdr.xid, uint64_t(i));
}

// Data damaged after sealing (a corrupt fault rule: one byte of the bulk) is caught by
// the receiver: handed up as corrupt -- header only, never as a message -- counted and
// blamed on the peer NI it came from, and its credit comes back. Sealing is invisible to
// the layer above: what arrives intact is exactly what was sent.
TEST_F(NetTest, DamagedDataIsCaughtBlamedOnThePeerNiAndNeverDelivered) {
  Node a(hub_, clock_, a_, opts(64, 8)), b(hub_, clock_, b_, opts(64, 8));
  FaultRule r;
  r.action = FaultRule::Action::kCorrupt;
  r.rate = 2;  // every second message
  a.net.add_fault(r);
  auto with_bulk = [](uint64_t xid) {
    auto f = msg(xid);
    Buffer bulk(3000);
    for (size_t i = 0; i < bulk.size(); ++i) bulk.data()[i] = static_cast<uint8_t>(i * 7);
    f->bulk = make_bulk(std::move(bulk));
    return f;
  };
  TxLog tx;
  for (uint64_t x = 1; x <= 4; ++x) {
    a.net.send(b_, with_bulk(x), clock_.now() + 10s, &tx);
    hub_.pump();
  }
  ASSERT_EQ(b.rx.got.size(), 2u);
  ASSERT_EQ(b.rx.corrupt.size(), 2u);
  EXPECT_EQ(b.rx.corrupt[0].frame.hdr.xid, 2u);
  EXPECT_EQ(b.rx.corrupt[1].frame.hdr.xid, 4u);
  EXPECT_EQ(b.rx.corrupt[0].from, a_);
  for (const Received& g : b.rx.got) {
    EXPECT_EQ(g.frame.payload.view(), "hello");
    ASSERT_EQ(g.frame.bulk.size(), 3000u);
    for (size_t i = 0; i < 3000; ++i) ASSERT_EQ(g.frame.bulk.data()[i], uint8_t(i * 7)) << i;
  }
  NiInfo from_a = b.net.peers()[0];
  EXPECT_EQ(from_a.errors[static_cast<size_t>(HealthKind::kPeerNiCorrupt)], 2u);
  EXPECT_LT(from_a.health, 1000);
  EXPECT_EQ(b.net.nis()[0].errors[static_cast<size_t>(HealthKind::kPeerNiCorrupt)], 2u);
  EXPECT_EQ(a.net.nis()[0].faults, 2u);
  // The corrupt frames' credits come back as they are released, like any message's.
  for (auto& g : b.rx.got) g.credit.release();
  for (auto& g : b.rx.corrupt) g.credit.release();
  hub_.pump();
  EXPECT_EQ(a.net.peers()[0].credits, 8);

  // The sender sends no checksum (lnet.checksum off): the same damage is delivered.
  a.net.set_checksum(false);
  a.net.send(b_, with_bulk(5), clock_.now() + 10s, &tx);
  a.net.send(b_, with_bulk(6), clock_.now() + 10s, &tx);
  hub_.pump();
  ASSERT_EQ(b.rx.got.size(), 4u);
  EXPECT_EQ(b.rx.corrupt.size(), 2u);
  EXPECT_EQ(b.rx.got[3].frame.hdr.xid, 6u);
  EXPECT_FALSE(b.rx.got[3].frame.hdr.flags & kFlagDataCrc);
  EXPECT_NE(b.rx.got[3].frame.bulk.data()[1500], uint8_t(1500 * 7)) << "delivered damaged";
}

TEST_F(NetTest, CreditsPiggybackOnReplies) {
  Node a(hub_, clock_, a_, opts(64, 8)), b(hub_, clock_, b_, opts(64, 8));
  a.net.send(b_, msg(1), clock_.now() + 10s, nullptr);
  hub_.pump();
  ASSERT_EQ(b.rx.got.size(), 1u);
  // Below the high-water mark no credit frame is sent...
  b.rx.got[0].credit.release();
  EXPECT_EQ(hub_.pending(), 0u);
  EXPECT_EQ(a.net.peers()[0].credits, 7);
  // ...the credit rides on B's next message to A.
  b.net.send(a_, msg(2), clock_.now() + 10s, nullptr);
  hub_.pump();
  EXPECT_EQ(a.net.peers()[0].credits, 8);
  ASSERT_EQ(a.rx.got.size(), 1u);
  EXPECT_EQ(a.rx.got[0].frame.hdr.credits, 1u);
}

TEST_F(NetTest, EndsThatConnectedAtOnceSendOnTheSameConnection) {
  Node a(hub_, clock_, a_, opts(64, 8)), b(hub_, clock_, b_, opts(64, 8));
  // Both send before either connection is up: two connections, one opened by each end.
  a.net.send(b_, msg(1), clock_.now() + 10s, nullptr);
  b.net.send(a_, msg(2), clock_.now() + 10s, nullptr);
  hub_.pump();
  ASSERT_EQ(a.rx.got.size(), 1u);
  ASSERT_EQ(b.rx.got.size(), 1u);
  EXPECT_EQ(a.net.peers()[0].connections, 2);
  EXPECT_EQ(b.net.peers()[0].connections, 2);
  a.rx.got.clear();
  b.rx.got.clear();
  a.net.expire(clock_.now());  // what the first two left owed goes back
  b.net.expire(clock_.now());
  hub_.pump();
  ASSERT_EQ(a.net.peers()[0].credits, 8);
  ASSERT_EQ(b.net.peers()[0].credits, 8);
  // A request and its reply: the reply carries the request's credit back, in both
  // directions (crossed connections would leave each end a credit short until a flush,
  // and path selection would shun the path).
  for (int round = 0; round < 2; ++round) {
    Node& req = round == 0 ? a : b;
    Node& rep = round == 0 ? b : a;
    const Nid& to = round == 0 ? b_ : a_;
    const Nid& back = round == 0 ? a_ : b_;
    req.net.send(to, msg(10 + round), clock_.now() + 10s, nullptr);
    hub_.pump();
    ASSERT_EQ(rep.rx.got.size(), 1u) << round;
    rep.rx.got.clear();  // consumed: one credit owed, below the high-water mark
    rep.net.send(back, msg(20 + round), clock_.now() + 10s, nullptr);
    hub_.pump();
    ASSERT_EQ(req.rx.got.size(), 1u) << round;
    EXPECT_EQ(req.rx.got[0].frame.hdr.credits, 1u) << round;
    EXPECT_EQ(req.net.peers()[0].credits, 8) << round;
    req.rx.got.clear();
    req.net.expire(clock_.now());
    hub_.pump();
  }
}

TEST_F(NetTest, ASenderWithASmallerWindowIsNotStarvedByTheReceiversThreshold) {
  // A runs peer_credits 2, B runs 64: B's threshold for an explicit credit frame (32)
  // is far above what A can ever have outstanding. A's last-credit frame is flagged
  // WINDOW_EMPTY, and B returns what it owes as soon as it consumes that frame.
  Node a(hub_, clock_, a_, opts(64, 2)), b(hub_, clock_, b_, opts(64, 64));
  TxLog tx;
  for (int i = 0; i < 6; ++i) a.net.send(b_, msg(i), clock_.now() + 10s, &tx);
  hub_.pump();
  ASSERT_EQ(b.rx.got.size(), 2u);
  EXPECT_EQ(b.rx.got[0].frame.hdr.flags & kFlagWindowEmpty, 0);
  EXPECT_NE(b.rx.got[1].frame.hdr.flags & kFlagWindowEmpty, 0);
  b.rx.got[0].credit.release();  // not the flagged one: B keeps owing (below 32)
  hub_.pump();
  EXPECT_EQ(b.rx.got.size(), 2u);
  for (int round = 0; round < 3; ++round) {  // each flagged frame brings both credits back
    for (auto& r : b.rx.got) r.credit.release();
    hub_.pump();
  }
  ASSERT_EQ(b.rx.got.size(), 6u);
  EXPECT_EQ(tx.results.size(), 6u);
}

TEST_F(NetTest, NiCreditsAreSharedByPeers) {
  Node a(hub_, clock_, a_, opts(2, 8)), b(hub_, clock_, b_, opts(64, 8)),
      c(hub_, clock_, c_, opts(64, 8));
  for (int i = 0; i < 2; ++i) a.net.send(b_, msg(i), clock_.now() + 10s, nullptr);
  for (int i = 0; i < 2; ++i) a.net.send(c_, msg(10 + i), clock_.now() + 10s, nullptr);
  hub_.pump();
  EXPECT_EQ(b.rx.got.size() + c.rx.got.size(), 2u);
  EXPECT_EQ(a.net.nis()[0].credits, 0);
  EXPECT_EQ(a.net.nis()[0].queued, 2);
  // Credits come back as the receivers consume; the waiting peer gets its turn.
  for (int round = 0; round < 4 && b.rx.got.size() + c.rx.got.size() < 4; ++round) {
    for (auto& r : b.rx.got) r.credit.release();
    for (auto& r : c.rx.got) r.credit.release();
    // High water is 4 here: force the return by sending something back.
    b.net.send(a_, msg(100 + round), clock_.now() + 10s, nullptr);
    c.net.send(a_, msg(200 + round), clock_.now() + 10s, nullptr);
    hub_.pump();
  }
  EXPECT_EQ(b.rx.got.size(), 2u);
  EXPECT_EQ(c.rx.got.size(), 2u);
}

TEST_F(NetTest, QueuedSendsExpireAtTheirDeadline) {
  Node a(hub_, clock_, a_, opts(64, 1)), b(hub_, clock_, b_, opts(64, 1));
  TxLog tx;
  a.net.send(b_, msg(1), clock_.now() + 1s, &tx);
  a.net.send(b_, msg(2), clock_.now() + 1s, &tx);  // waits for the only credit
  a.net.send(b_, msg(3), clock_.now() + 2s, &tx);
  hub_.pump();
  ASSERT_EQ(b.rx.got.size(), 1u);
  ASSERT_EQ(tx.results.size(), 1u);  // the first was written
  clock_.advance(999ms);
  EXPECT_EQ(a.net.expire(clock_.now()), 0u);
  clock_.advance(1ms);
  EXPECT_EQ(a.net.expire(clock_.now()), 1u);
  ASSERT_EQ(tx.results.size(), 2u);
  EXPECT_EQ(tx.results[1].code(), Code::kTimeout);
  // It waited for the peer's only credit, which the peer never returned (a hung server
  // holds it): the peer NI is blamed, not the local NI, which could send all along.
  EXPECT_EQ(tx.results[1].health_kind(), HealthKind::kPeerNiUnreachable);
  EXPECT_NE(tx.results[1].message().find("waiting for the peer's credits"), std::string::npos)
      << tx.results[1].message();
  auto ni = a.net.nis()[0];
  EXPECT_EQ(ni.health, 1000);
  EXPECT_EQ(ni.local_timeouts, 1u);  // it never left this node
  EXPECT_EQ(ni.errors[static_cast<size_t>(HealthKind::kLocalNiSendTimeout)], 0u);
  auto peer = a.net.peers()[0];
  EXPECT_EQ(peer.health, 900);
  EXPECT_EQ(peer.local_timeouts, 1u);
  EXPECT_EQ(peer.errors[static_cast<size_t>(HealthKind::kPeerNiUnreachable)], 1u);
  EXPECT_EQ(peer.errors[static_cast<size_t>(HealthKind::kLocalNiSendTimeout)], 0u);
  // The third is still queued and goes when the credit returns.
  b.rx.got[0].credit.release();
  hub_.pump();
  ASSERT_EQ(b.rx.got.size(), 2u);
  EXPECT_EQ(b.rx.got[1].frame.hdr.xid, 3u);
}

TEST_F(NetTest, SendsThatWaitForTheLocalNisCreditsBlameTheLocalNi) {
  // The NI's own credits (1) run out before the peer's window (8) does.
  Node a(hub_, clock_, a_, opts(1, 8)), b(hub_, clock_, b_, opts(64, 8));
  TxLog tx;
  a.net.send(b_, msg(1), clock_.now() + 1s, &tx);
  a.net.send(b_, msg(2), clock_.now() + 1s, &tx);  // waits for the NI's only credit
  hub_.pump();
  ASSERT_EQ(b.rx.got.size(), 1u);
  clock_.advance(1s);
  EXPECT_EQ(a.net.expire(clock_.now()), 1u);
  ASSERT_EQ(tx.results.size(), 2u);
  EXPECT_EQ(tx.results[1].health_kind(), HealthKind::kLocalNiSendTimeout);
  EXPECT_NE(tx.results[1].message().find("waiting for the local NI's credits"), std::string::npos)
      << tx.results[1].message();
  EXPECT_EQ(a.net.nis()[0].health, 900);
  EXPECT_EQ(a.net.nis()[0].errors[static_cast<size_t>(HealthKind::kLocalNiSendTimeout)], 1u);
  EXPECT_EQ(a.net.peers()[0].health, 1000);
}

TEST_F(NetTest, SendHandedOffButNeverCompletedIsARemoteTimeout) {
  Node a(hub_, clock_, a_, opts(64, 8)), b(hub_, clock_, b_, opts(64, 8));
  TxLog tx;
  a.net.send(b_, msg(1), clock_.now() + 10s, &tx);
  hub_.pump();
  ASSERT_EQ(tx.results.size(), 1u);
  // The link goes silent: the next frame is written to the connection and never completes.
  hub_.set_stalled(true);
  a.net.send(b_, msg(2), clock_.now() + 1s, &tx);
  hub_.pump();
  EXPECT_EQ(tx.results.size(), 1u);
  clock_.advance(999ms);
  EXPECT_EQ(a.net.expire(clock_.now()), 0u);
  clock_.advance(1ms);
  EXPECT_EQ(a.net.expire(clock_.now()), 1u);  // the connection is closed
  hub_.pump();
  ASSERT_EQ(a.rx.disconnected.size(), 1u);
  hub_.set_stalled(false);
  hub_.pump();
  ASSERT_EQ(tx.results.size(), 2u);
  EXPECT_EQ(tx.results[1].code(), Code::kTimeout);
  EXPECT_EQ(tx.results[1].health_kind(), HealthKind::kPeerNiUnreachable);
  EXPECT_NE(tx.results[1].message().find("remote timeout"), std::string::npos)
      << tx.results[1].message();
  // Remote: blamed on the peer NI, not on the local NI.
  EXPECT_EQ(a.net.peers()[0].remote_timeouts, 1u);
  EXPECT_EQ(a.net.peers()[0].health, 900);
  EXPECT_EQ(a.net.nis()[0].health, 1000);
  EXPECT_EQ(a.net.nis()[0].local_timeouts, 0u);
  // A new connection carries the next message.
  a.net.send(b_, msg(3), clock_.now() + 10s, &tx);
  hub_.pump();
  ASSERT_EQ(tx.results.size(), 3u);
  EXPECT_TRUE(tx.results[2].ok());
  EXPECT_EQ(b.rx.got.back().frame.hdr.xid, 3u);
}

// A connect that found no host (EHOSTUNREACH): the sends the backoff fails afterwards --
// at once, or after waiting in the queue past their deadlines -- report the connect's kind,
// PEER_NI_UNREACHABLE, not a refusal's (NetnsTest.UnreachableAddressesGetTheirKinds saw
// CONNECT_ERROR when its last attempt fell to the backoff).
TEST_F(NetTest, SendsFailedByTheBackoffOfAnUnreachablePeerSayUnreachable) {
  Node a(hub_, clock_, a_, opts(64, 8));
  TxLog tx;
  const Nid none = nid("10.0.0.77@tcp");
  hub_.set_no_host(none, true);
  a.net.send(none, msg(1), clock_.now() + 10s, &tx);
  hub_.pump();
  ASSERT_EQ(tx.results.size(), 1u);
  EXPECT_EQ(tx.results[0].health_kind(), HealthKind::kPeerNiUnreachable);
  a.net.send(none, msg(2), clock_.now() + 100ms, &tx);  // before the next connect
  ASSERT_EQ(tx.results.size(), 2u);
  EXPECT_EQ(tx.results[1].code(), Code::kUnreachable);
  EXPECT_EQ(tx.results[1].health_kind(), HealthKind::kPeerNiUnreachable) << tx.results[1].message();
  EXPECT_NE(tx.results[1].message().find("no route to host"), std::string::npos)
      << tx.results[1].message();
  // One due before the next connect fails at once; one after it waits for it.
  a.net.send(none, msg(3), clock_.now() + 400ms, &tx);
  a.net.send(none, msg(4), clock_.now() + 30s, &tx);  // waits for the next connect
  ASSERT_EQ(tx.results.size(), 3u);
  EXPECT_EQ(tx.results[2].health_kind(), HealthKind::kPeerNiUnreachable);
  clock_.advance(1s);
  a.net.expire(clock_.now());
  hub_.pump();
  ASSERT_EQ(tx.results.size(), 4u);  // the next connect found no host either
  EXPECT_EQ(tx.results[3].health_kind(), HealthKind::kPeerNiUnreachable);
  // A refusal still says CONNECT_ERROR.
  hub_.set_no_host(none, false);
  clock_.advance(3s);
  a.net.send(none, msg(5), clock_.now() + 30s, &tx);
  a.net.expire(clock_.now());
  hub_.pump();
  ASSERT_EQ(tx.results.size(), 5u);
  EXPECT_EQ(tx.results[4].health_kind(), HealthKind::kPeerNiConnectError);
  a.net.send(none, msg(6), clock_.now() + 100ms, &tx);
  ASSERT_EQ(tx.results.size(), 6u);
  EXPECT_EQ(tx.results[5].health_kind(), HealthKind::kPeerNiConnectError);
}

TEST_F(NetTest, AFailedConnectBacksOffAndLaterSendsWaitForTheNextWithinTheirDeadlines) {
  Node a(hub_, clock_, a_, opts(64, 8));
  TxLog tx;
  const Nid gone = nid("10.0.0.9@tcp");
  a.net.send(gone, msg(1), clock_.now() + 10s, &tx);
  a.net.send(gone, msg(2), clock_.now() + 10s, &tx);
  hub_.pump();
  // Refused: what was queued fails now with the connect's error (its sender may take
  // another path), blamed on the peer NI: 1000 - 2 x health_sensitivity.
  ASSERT_EQ(tx.results.size(), 2u);
  EXPECT_EQ(tx.results[0].health_kind(), HealthKind::kPeerNiConnectError);
  EXPECT_EQ(a.net.peers()[0].health, 800);
  // The next connect waits min_reconnect (1 s) jittered to 0.5-1 s.
  NiInfo p = a.net.peers()[0];
  EXPECT_EQ(p.connects, 1u);
  EXPECT_EQ(p.connect_failures, 1u);
  ASSERT_EQ(p.paths.size(), 1u);
  EXPECT_EQ(p.paths[0].reconnect_interval_ms, 1000);
  EXPECT_GE(p.paths[0].next_connect_s, 0.5);
  EXPECT_LE(p.paths[0].next_connect_s, 1.0);
  const double first_wait = p.paths[0].next_connect_s;
  // A send whose deadline comes before it fails at once (socklnd's EHOSTUNREACH for a
  // peer whose connect backs off); one that can wait for it, waits.
  a.net.send(gone, msg(3), clock_.now() + 100ms, &tx);
  ASSERT_EQ(tx.results.size(), 3u);
  EXPECT_EQ(tx.results[2].code(), Code::kUnreachable);
  EXPECT_EQ(tx.results[2].health_kind(), HealthKind::kPeerNiConnectError);
  EXPECT_NE(tx.results[2].message().find("comes after this send's deadline"), std::string::npos)
      << tx.results[2].message();
  a.net.send(gone, msg(4), clock_.now() + 30s, &tx);
  EXPECT_EQ(a.net.peers()[0].reconnect_waits, 1u);
  EXPECT_EQ(tx.results.size(), 3u);
  // No connect before its time; then one, refused: the interval doubles (1-2 s now), and
  // the waiting send fails with it.
  clock_.advance(std::chrono::duration_cast<Duration>(std::chrono::duration<double>(first_wait)) -
                 10ms);
  a.net.expire(clock_.now());
  hub_.pump();
  EXPECT_EQ(a.net.peers()[0].connects, 1u);
  clock_.advance(10ms);
  a.net.expire(clock_.now());
  hub_.pump();
  p = a.net.peers()[0];
  EXPECT_EQ(p.connects, 2u);
  EXPECT_EQ(p.paths[0].reconnect_interval_ms, 2000);
  EXPECT_GE(p.paths[0].next_connect_s, 1.0);
  ASSERT_EQ(tx.results.size(), 4u);
  EXPECT_EQ(tx.results[3].health_kind(), HealthKind::kPeerNiConnectError);
  // A sender that keeps sending (each send waiting its turn) makes fewer and fewer
  // connects: the interval doubles to max_reconnect (60 s). 120 s: 1 + 2 + 4 + ... .
  for (int i = 0; i < 1200; ++i) {
    if (i % 10 == 0) a.net.send(gone, msg(100 + i), clock_.now() + 60s, &tx);
    clock_.advance(100ms);
    a.net.expire(clock_.now());
    hub_.pump();
  }
  p = a.net.peers()[0];
  EXPECT_GE(p.connects, 6u);
  EXPECT_LE(p.connects, 9u);
  EXPECT_EQ(p.paths[0].reconnect_interval_ms, 60000);
  EXPECT_EQ(a.net.nis()[0].health, 1000);  // never the local NI
  // With nothing waiting, no attempt at all.
  for (size_t i = 0; i < 200 && a.net.peers()[0].queued > 0; ++i) {
    clock_.advance(1s);
    a.net.expire(clock_.now());
    hub_.pump();
  }
  const uint64_t connects = a.net.peers()[0].connects;
  clock_.advance(300s);
  a.net.expire(clock_.now());
  hub_.pump();
  EXPECT_EQ(a.net.peers()[0].connects, connects);
  // No NI on that network at all.
  size_t before = tx.results.size();
  a.net.send(nid("10.0.0.2@tcp4"), msg(5), clock_.now() + 10s, &tx);
  ASSERT_EQ(tx.results.size(), before + 1);
  EXPECT_EQ(tx.results.back().code(), Code::kInvalidArgument);
}

TEST_F(NetTest, DisconnectReturnsCreditsAndTellsTheUpperLayer) {
  Node a(hub_, clock_, a_, opts(4, 2)), b(hub_, clock_, b_, opts(64, 2));
  a.net.send(b_, msg(1), clock_.now() + 10s, nullptr);
  a.net.send(b_, msg(2), clock_.now() + 10s, nullptr);
  hub_.pump();
  EXPECT_EQ(a.net.nis()[0].credits, 2);
  b.net.shutdown();
  hub_.pump();
  EXPECT_EQ(a.net.nis()[0].credits, 4);  // outstanding credits of the dead connection
  ASSERT_EQ(a.rx.disconnected.size(), 1u);
  EXPECT_EQ(a.rx.disconnected[0], b_);
  EXPECT_FALSE(a.net.peers()[0].up);
}

}  // namespace
}  // namespace pfsnet

namespace pfsnet {
namespace {

TEST_F(NetTest, CreditsChangeAtRunTime) {
  Node a(hub_, clock_, a_, opts(64, 2)), b(hub_, clock_, b_, opts(64, 2));
  for (int i = 0; i < 6; ++i) a.net.send(b_, msg(i), clock_.now() + 10s, nullptr);
  hub_.pump();
  ASSERT_EQ(b.rx.got.size(), 2u);  // the window of 2 is full
  a.net.set_credits(64, 4);        // two more at once
  hub_.pump();
  EXPECT_EQ(b.rx.got.size(), 4u);
  EXPECT_EQ(a.net.peers()[0].credits_max, 4);
  a.net.set_credits(64, 1);  // lowered below what is outstanding: nothing more goes...
  for (int i = 0; i < 3; ++i) b.rx.got[i].credit.release();
  b.net.send(a_, msg(100), clock_.now() + 10s, nullptr);  // carries the 3 credits back
  hub_.pump();
  EXPECT_EQ(b.rx.got.size(), 4u);  // ...until the window is back above zero
  b.rx.got[3].credit.release();
  b.net.send(a_, msg(101), clock_.now() + 10s, nullptr);
  hub_.pump();
  EXPECT_EQ(b.rx.got.size(), 5u);
  // NI credits too.
  a.net.set_credits(1, 8);
  EXPECT_EQ(a.net.nis()[0].credits_max, 1);
}

}  // namespace
}  // namespace pfsnet
