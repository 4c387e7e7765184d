#include "net/slowness_board.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "base/test_nid.h"

namespace pfsnet {
namespace {

using namespace std::chrono_literals;

// Drives a board one second at a time with figures per path, on a manual clock.
struct Drive {
  SlownessBoard board;
  ManualClock clock;
  int second = 0;
  std::vector<std::pair<int, SlownessChange>> changes;
  // Cumulative figures per path.
  struct Path {
    Nid local, peer;
    uint64_t bytes = 0, segs = 0, retrans = 0;
  };
  std::vector<Path> paths;

  size_t add(const char* local, const char* peer) {
    paths.push_back({nid(local), nid(peer)});
    return paths.size() - 1;
  }
  // One second: per path (index -> (latency ms, bytes moved, segments, loss)).
  struct Second {
    double latency_ms = 0.2;
    uint64_t rpcs = 10, bytes = 10000, segs = 500;
    double loss = 0;
    // The kernel's RTT of the path; srtt < 0: the latency's (a slow wire delays TCP's
    // round trip as much as the RPCs').
    double srtt_ms = -1, min_rtt_ms = 0.01;
  };
  void run(int n, const std::map<size_t, Second>& special = {}) {
    for (int i = 0; i < n; ++i) {
      std::vector<PathFigures> v;
      for (size_t k = 0; k < paths.size(); ++k) {
        auto it = special.find(k);
        Second s = it == special.end() ? Second{} : it->second;
        Path& p = paths[k];
        p.bytes += s.bytes;
        p.segs += s.segs;
        p.retrans += static_cast<uint64_t>(double(s.segs) * s.loss);
        PathFigures f;
        f.local = p.local;
        f.peer = p.peer;
        f.rpcs = s.rpcs;
        f.latency_ms = s.latency_ms * double(s.rpcs);
        f.exec_ms = 0.05 * double(s.rpcs);
        f.bytes = p.bytes;
        f.tcp = true;
        f.segs_out = p.segs;
        f.retrans = p.retrans;
        f.srtt_ms = s.srtt_ms >= 0 ? s.srtt_ms : s.min_rtt_ms + s.latency_ms;
        f.min_rtt_ms = s.min_rtt_ms;
        f.queue_ms = f.srtt_ms - f.min_rtt_ms;
        v.push_back(f);
      }
      clock.advance(1s);
      ++second;
      for (auto& c : board.second(v, clock.now())) changes.emplace_back(second, c);
    }
  }
  bool degraded(const char* peer) {
    auto* t = board.tracker(nid(peer));
    return t && t->degraded();
  }
};

TEST(SlownessBoardTest, OneLossyPeerIsThePeersFaultNotTheLocalNis) {
  Drive d;
  d.add("198.18.0.1@tcp", "198.18.0.2@tcp");
  size_t lossy = d.add("198.18.0.1@tcp", "198.18.0.3@tcp");
  d.add("198.18.0.1@tcp", "198.18.0.4@tcp");
  d.run(60);
  EXPECT_TRUE(d.changes.empty());
  d.run(15, {{lossy, {.loss = 0.05}}});
  ASSERT_EQ(d.changes.size(), 1u);
  EXPECT_EQ(d.changes[0].second.nid, nid("198.18.0.3@tcp"));
  EXPECT_FALSE(d.changes[0].second.local);
  EXPECT_EQ(d.changes[0].second.cause, SlowCause::kLossy);
  EXPECT_NE(d.changes[0].second.evidence.find("TCP retransmitted"), std::string::npos);
  EXPECT_EQ(d.board.local_cause(nid("198.18.0.1@tcp")), SlowCause::kNone);
  EXPECT_EQ(d.board.degraded_peers(), std::vector<Nid>{nid("198.18.0.3@tcp")});
  d.run(30);
  ASSERT_EQ(d.changes.size(), 2u);
  EXPECT_EQ(d.changes[1].second.cause, SlowCause::kNone);
  EXPECT_EQ(d.changes[1].second.was, SlowCause::kLossy);
  EXPECT_TRUE(d.board.degraded_peers().empty());
}

TEST(SlownessBoardTest, AFaultAtMostPeersOfALocalNiIsTheLocalNis) {
  Drive d;
  size_t a = d.add("198.18.0.1@tcp", "198.18.0.2@tcp");
  size_t b = d.add("198.18.0.1@tcp", "198.18.0.3@tcp");
  d.add("198.18.0.1@tcp", "198.18.0.4@tcp");
  d.add("198.18.1.1@tcp1", "198.18.1.2@tcp1");  // another rail, clean
  d.run(60);
  d.run(15, {{a, {.loss = 0.05}}, {b, {.loss = 0.05}}});
  EXPECT_TRUE(d.degraded("198.18.0.2@tcp"));
  EXPECT_TRUE(d.degraded("198.18.0.3@tcp"));
  EXPECT_EQ(d.board.local_cause(nid("198.18.0.1@tcp")), SlowCause::kLossy);
  EXPECT_EQ(d.board.local_cause(nid("198.18.1.1@tcp1")), SlowCause::kNone);
  const SlownessChange& local = d.changes.back().second;
  EXPECT_TRUE(local.local);
  EXPECT_EQ(local.nid, nid("198.18.0.1@tcp"));
  EXPECT_EQ(local.evidence,
            "2 of the 3 peer NIs reached through it are degraded: 198.18.0.2@tcp, 198.18.0.3@tcp");
  d.run(30);
  EXPECT_EQ(d.board.local_cause(nid("198.18.0.1@tcp")), SlowCause::kNone);
  bool cleared = std::any_of(d.changes.begin(), d.changes.end(), [](const auto& c) {
    return c.second.local && c.second.cause == SlowCause::kNone &&
           c.second.was == SlowCause::kLossy;
  });
  EXPECT_TRUE(cleared);
}

TEST(SlownessBoardTest, LatencyBehindTheNodesOwnBulkIsLoadNotSlowness) {
  Drive d;
  size_t p = d.add("198.18.0.1@tcp", "198.18.0.2@tcp");
  d.run(60);
  // 50 MB a second with small RPCs queued behind it at 5 ms: busy, not slow.
  d.run(30, {{p, {.latency_ms = 5.0, .bytes = 50'000'000}}});
  EXPECT_TRUE(d.changes.empty());
  // The same latency while the link carries 100 KB a second: slow.
  d.run(15, {{p, {.latency_ms = 5.0, .bytes = 100'000}}});
  ASSERT_EQ(d.changes.size(), 1u);
  EXPECT_EQ(d.changes[0].second.cause, SlowCause::kSlow);
}

// A shaped link at its ceiling: the kernel's RTT shows the shaper's queue, and the drops
// when it is full are congestion, not LOSSY; the same drops without the queue are.
TEST(SlownessBoardTest, DropsAtAFullQueueAreNotLossy) {
  Drive d;
  size_t p = d.add("198.18.0.1@tcp", "198.18.0.2@tcp");
  d.run(60);
  d.run(30, {{p, {.segs = 2000, .loss = 0.03, .srtt_ms = 50, .min_rtt_ms = 0.01}}});
  EXPECT_FALSE(d.degraded("198.18.0.2@tcp"));
  d.run(15, {{p, {.segs = 2000, .loss = 0.03}}});
  ASSERT_EQ(d.changes.size(), 1u);
  EXPECT_EQ(d.changes[0].second.cause, SlowCause::kLossy);
}

// On a host whose cores the load takes, every path's ACKs come 2-5 ms late: a path that
// drops 5% at random is LOSSY all the same, while a shaper's queue (far above the others)
// is still congestion.
TEST(SlownessBoardTest, ALoadedHostsDelayOnEveryPathIsNoQueue) {
  Drive d;
  size_t lossy = d.add("198.18.0.1@tcp", "198.18.0.2@tcp");
  std::vector<size_t> others;
  for (const char* p : {"198.18.0.3@tcp", "198.18.0.4@tcp", "198.18.0.5@tcp"})
    others.push_back(d.add("198.18.0.1@tcp", p));
  d.run(60);
  std::map<size_t, Drive::Second> busy;
  for (size_t o : others) busy[o] = {.srtt_ms = 3.0, .min_rtt_ms = 0.01};
  busy[lossy] = {.segs = 2000, .loss = 0.05, .srtt_ms = 3.5, .min_rtt_ms = 0.01};
  d.run(15, busy);
  EXPECT_TRUE(d.degraded("198.18.0.2@tcp"));
  ASSERT_FALSE(d.changes.empty());
  EXPECT_EQ(d.changes[0].second.cause, SlowCause::kLossy);
  // A shaper: 50 ms of queue where the host's other paths have 0.04 ms.
  Drive t;
  size_t shaped = t.add("198.18.0.1@tcp", "198.18.0.2@tcp");
  for (const char* p : {"198.18.0.3@tcp", "198.18.0.4@tcp", "198.18.0.5@tcp"})
    t.add("198.18.0.1@tcp", p);
  t.run(60);
  t.run(30, {{shaped, {.segs = 2000, .loss = 0.03, .srtt_ms = 50, .min_rtt_ms = 0.01}}});
  EXPECT_FALSE(t.degraded("198.18.0.2@tcp"));
}

// Issue 70, item 6: a path's retransmits on a connection whose own RTT shows a queue are
// congestion, though its busiest connection shows none (a 20 Mbit/s tbf was called LOSSY
// by one peer: the retransmits were on the connection a bulk probe had crossed). On a
// connection without a queue they are loss.
TEST(SlownessBoardTest, RetransmitsAreJudgedByTheQueueOnTheirOwnConnection) {
  for (double queue_ms : {30.0, 0.0}) {
    SlownessBoard board;
    ManualClock clock;
    const Nid local = nid("198.18.0.1@tcp"), peer = nid("198.18.0.2@tcp");
    uint64_t segs = 0, lost = 0;
    std::vector<SlownessChange> changes;
    for (int i = 0; i < 30; ++i) {
      PathFigures f;
      f.local = local;
      f.peer = peer;
      f.tcp = true;
      f.bytes = 10000 * uint64_t(i + 1);
      f.rpcs = 10;
      f.latency_ms = 0.2 * 10;
      f.exec_ms = 0.05 * 10;
      segs += 2000;
      if (i >= 10) lost += 60;  // 3% of the path's segments, from the 11th second
      f.segs_out = segs;
      f.retrans = lost;
      f.srtt_ms = 0.05;  // the busiest connection: no queue
      f.min_rtt_ms = 0.01;
      f.conns = {ConnFigures{1, 0, 0.05, 0.01}, ConnFigures{2, lost, 0.01 + queue_ms, 0.01}};
      clock.advance(1s);
      for (SlownessChange& c : board.second({f}, clock.now())) changes.push_back(c);
    }
    const SlownessTracker* t = board.tracker(peer);
    ASSERT_NE(t, nullptr);
    if (queue_ms > 0) {
      EXPECT_FALSE(t->degraded()) << t->evidence().text();
      EXPECT_EQ(t->evidence().retrans, 0u);
      EXPECT_EQ(t->evidence().congestion_retrans, 600u);
      EXPECT_NE(t->evidence().text().find("600 more while a queue stood"), std::string::npos)
          << t->evidence().text();
    } else {
      EXPECT_TRUE(t->degraded());
      EXPECT_EQ(t->cause(), SlowCause::kLossy);
    }
  }
}

// A link down for a while: what TCP sent then was all retransmissions. That is an outage
// (DOWN, UNHEALTHY elsewhere), not random loss: the path is not LOSSY when it is back.
TEST(SlownessBoardTest, AnOutagesRetransmissionsAreNotLoss) {
  Drive d;
  size_t p = d.add("198.18.0.1@tcp", "198.18.0.2@tcp");
  d.run(60);
  d.run(5, {{p, {.rpcs = 0, .bytes = 0, .segs = 4, .loss = 1.0}}});
  d.run(30);
  EXPECT_FALSE(d.degraded("198.18.0.2@tcp"));
  EXPECT_TRUE(d.changes.empty());
  // Loss of a part, second after second, is.
  d.run(15, {{p, {.segs = 2000, .loss = 0.05}}});
  EXPECT_TRUE(d.degraded("198.18.0.2@tcp"));
}

// A path called SLOW while it carried little, healed and then busy again (the load that
// hid its latency before): its busy seconds at a healthy latency end the state; busy
// seconds still slow are the bulk's or the path's -- they end nothing.
TEST(SlownessBoardTest, APathHealedUnderLoadEnds) {
  Drive d;
  size_t p = d.add("198.18.0.1@tcp", "198.18.0.2@tcp");
  d.run(60);
  d.run(15, {{p, {.latency_ms = 5.0, .bytes = 100'000}}});
  ASSERT_TRUE(d.degraded("198.18.0.2@tcp"));
  d.run(60, {{p, {.latency_ms = 5.0, .bytes = 50'000'000}}});
  EXPECT_TRUE(d.degraded("198.18.0.2@tcp"));
  d.run(20, {{p, {.latency_ms = 0.2, .bytes = 50'000'000}}});
  EXPECT_FALSE(d.degraded("198.18.0.2@tcp"));
  ASSERT_EQ(d.changes.size(), 2u);
  EXPECT_EQ(d.changes[1].second.cause, SlowCause::kNone);
  EXPECT_EQ(d.changes[1].second.was, SlowCause::kSlow);
  EXPECT_EQ(d.changes[1].second.lasted,
            std::chrono::seconds(d.changes[1].first - d.changes[0].first));
}

TEST(SlownessBoardTest, APeerSlowFromTheStartIsComparedWithItsNetworkOnly) {
  Drive d;
  d.add("198.18.0.1@tcp", "198.18.0.2@tcp");
  d.add("198.18.0.1@tcp", "198.18.0.3@tcp");
  size_t slow = d.add("198.18.0.1@tcp", "198.18.0.4@tcp");
  size_t far = d.add("198.18.1.1@tcp1", "198.18.1.2@tcp1");  // alone on its network
  d.run(30, {{slow, {.latency_ms = 6.0}}, {far, {.latency_ms = 6.0}}});
  ASSERT_EQ(d.changes.size(), 1u);
  EXPECT_EQ(d.changes[0].second.nid, nid("198.18.0.4@tcp"));
  EXPECT_EQ(d.changes[0].second.cause, SlowCause::kSlow);
  EXPECT_FALSE(d.degraded("198.18.1.2@tcp1"));
}

TEST(SlownessBoardTest, SecondsWithoutTcpFiguresAddNothingAndTotalsThatRestartAreSkipped) {
  SlownessBoard b;
  ManualClock clock;
  PathFigures f;
  f.local = nid("198.18.0.1@tcp");
  f.peer = nid("198.18.0.2@tcp");
  // The first reading is where counting starts: a path that retransmitted much before the
  // board existed is not lossy for it.
  f.tcp = true;
  f.segs_out = 100000;
  f.retrans = 50000;
  for (int i = 0; i < 30; ++i) {
    clock.advance(1s);
    if (i % 3 == 0) {  // read every third second only
      f.tcp = true;
      f.segs_out += 3000;
    } else {
      f.tcp = false;
    }
    EXPECT_TRUE(b.second({f}, clock.now()).empty()) << i;
  }
  const SlownessTracker* t = b.tracker(f.peer);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->evidence().retrans, 0u);
  EXPECT_GT(t->evidence().segs, 0u);
}

}  // namespace
}  // namespace pfsnet

namespace pfsnet {
namespace {

// An idle path costs nothing: the caller samples only what moved or is degraded.
TEST(SlownessBoardTest, OnlyPathsThatMovedOrLeadToADegradedPeerAreWanted) {
  Drive d;
  size_t busy = d.add("198.18.0.1@tcp", "198.18.0.2@tcp");
  d.add("198.18.0.1@tcp", "198.18.0.3@tcp");
  Nid l = nid("198.18.0.1@tcp");
  EXPECT_TRUE(d.board.wants(l, nid("198.18.0.9@tcp"), 0));  // never seen: where counting starts
  d.run(60);
  uint64_t now_bytes = d.paths[busy].bytes;
  EXPECT_FALSE(d.board.wants(l, nid("198.18.0.2@tcp"), now_bytes));  // nothing moved
  EXPECT_TRUE(d.board.wants(l, nid("198.18.0.2@tcp"), now_bytes + 1));
  d.run(15, {{busy, {.loss = 0.05}}});
  ASSERT_TRUE(d.degraded("198.18.0.2@tcp"));
  EXPECT_TRUE(d.board.wants(l, nid("198.18.0.2@tcp"), d.paths[busy].bytes));  // degraded: probed
  EXPECT_FALSE(d.board.wants(l, nid("198.18.0.3@tcp"), d.paths[1].bytes));
}

}  // namespace
}  // namespace pfsnet
