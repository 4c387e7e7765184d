#include "health/rules.h"

#include <gtest/gtest.h>

#include "probe/test_problem.h"

// The passes of health/rules.h, one rule a test (pure: lists in, list out).
namespace pfsnet {
namespace {

TEST(ClusterHealthMerge, OneEntryPerProblemSeenByAllWhoSeeItSinceTheEarliest) {
  std::vector<Problem> mine = {prob("peer_ni", "198.18.1.3@tcp", "UNHEALTHY", "n5", 5000)};
  std::vector<NodeProblems> nodes = {
      {"n5", 0, {prob("ni", "stale@tcp", "DOWN", "n5")}},  // this node's: its own view wins
      {"n6",
       0,
       {prob("peer_ni", "198.18.1.3@tcp", "UNHEALTHY", "n6", 3000),
        prob("settings", "n6", "SETTINGS", "n6")}},
      {"n7",
       0,
       {prob("peer_ni", "198.18.1.3@tcp", "UNHEALTHY", "n7", 4000),
        prob("peer_ni", "198.18.1.9@tcp", "UNHEALTHY", "n7")}},  // a dead node's NI
      {"n8", 0, {prob("ni", "198.18.1.8@tcp", "DOWN", "")}},
  };
  merge_cluster_problems(mine, nodes, "n5", {"198.18.1.9@tcp"});
  ASSERT_EQ(mine.size(), 3u);
  EXPECT_EQ(mine[0].seen_by, "n5, n6, n7");
  EXPECT_EQ(mine[0].since_unix_ms, 3000);
  EXPECT_EQ(mine[1].subject, "n6");
  EXPECT_EQ(mine[2].subject, "198.18.1.8@tcp");
  EXPECT_EQ(mine[2].seen_by, "n8");  // a list without seer names its node
  EXPECT_TRUE(same_problems({prob("a", "b", "c", "x", 1)}, {prob("a", "b", "c", "y", 2)}));
  EXPECT_FALSE(same_problems({prob("a", "b", "c")}, {prob("a", "b", "d")}));
  EXPECT_FALSE(same_problems({prob("a", "b", "c")}, {}));
}

TEST(ClusterHealthMerge, WhatFollowsFromADownNiIsLeftOut) {
  std::vector<Problem> v = {
      prob("ni", "198.18.1.3@tcp", "DOWN", "n3"),
      prob("peer_ni", "198.18.1.3@tcp", "UNHEALTHY", "n1"),
      prob("ni", "198.18.1.3@tcp (n3)", "LOSSY", "n1,n2"),
      prob("path", "n3 -> n1 (198.18.1.3@tcp -> 198.18.1.1@tcp)", "LOSSY", "n3"),
      prob("ni", "198.18.1.3@tcp (n3)", "MTU", "n1"),         // not a consequence
      prob("peer_ni", "198.18.1.3@tcp1", "UNHEALTHY", "n1"),  // another network's
      prob("peer_ni", "198.18.1.33@tcp", "SLOW", "n1"),       // another address
      prob("path", "n1 -> n4 (198.18.1.1@tcp -> 198.18.1.4@tcp)", "SLOW", "n1"),
  };
  drop_consequences(v);
  std::vector<std::string> left;
  for (const Problem& p : v) left.push_back(p.subject + " " + p.cause);
  EXPECT_EQ(left, (std::vector<std::string>{"198.18.1.3@tcp DOWN", "198.18.1.3@tcp (n3) MTU",
                                            "198.18.1.3@tcp1 UNHEALTHY", "198.18.1.33@tcp SLOW",
                                            "n1 -> n4 (198.18.1.1@tcp -> 198.18.1.4@tcp) SLOW"}));
}

TEST(ClusterHealthMerge, PeersOnlyAFaultyNisNodeCallsFaultyAreLeftOut) {
  std::vector<Problem> v = {
      prob("ni", "198.18.1.4@tcp (n4)", "THROTTLED", "n1,n2,n4"),
      prob("peer_ni", "198.18.1.1@tcp", "LOSSY", "n4"),  // n4's egress drops: its view
      prob("peer_ni", "198.18.1.2@tcp", "SLOW", "n4"),
      prob("peer_ni", "198.18.2.1@tcp1", "LOSSY", "n4"),     // its other rail: kept
      prob("peer_ni", "198.18.1.5@tcp", "LOSSY", "n4, n2"),  // others see it too: kept
      prob("peer_ni", "198.18.1.6@tcp", "LOSSY", "n1"),      // not n4's view: kept
      prob("ni", "198.18.1.7@tcp", "SLOW", "n7"),            // n7's own NI
      prob("peer_ni", "198.18.1.8@tcp", "UNHEALTHY", "n7"),  // so n7's view of a peer goes
      // n4's load moved to its rail 2: bulk probes there share it.
      prob("path", "n2 -> n4 (198.18.2.2@tcp1 -> 198.18.2.4@tcp1)", "THROTTLED", "n2"),
      prob("path", "n7 -> n5 (198.18.2.7@tcp1 -> 198.18.2.5@tcp1)", "SLOW", "n7"),
      prob("path", "n2 -> n5 (198.18.2.2@tcp1 -> 198.18.2.5@tcp1)", "THROTTLED", "n2"),
      prob("path", "n4 -> n5 (198.18.2.4@tcp1 -> 198.18.2.5@tcp1)", "LOSSY", "n4"),  // not slow
  };
  drop_consequences(v);
  std::vector<std::string> left;
  for (const Problem& p : v) left.push_back(p.subject);
  EXPECT_EQ(left, (std::vector<std::string>{"198.18.1.4@tcp (n4)", "198.18.2.1@tcp1",
                                            "198.18.1.5@tcp", "198.18.1.6@tcp", "198.18.1.7@tcp",
                                            "n2 -> n5 (198.18.2.2@tcp1 -> 198.18.2.5@tcp1)",
                                            "n4 -> n5 (198.18.2.4@tcp1 -> 198.18.2.5@tcp1)"}));
}

// Issue 70, item 6: a peer calling a shaped NI LOSSY alone saw its queue overflow
// (congestion); two peers seeing loss on it keep it listed.
TEST(ClusterHealthMerge, OnePeersLossOnAShapedNiIsCongestion) {
  std::vector<Problem> v = {
      prob("ni", "198.18.1.4@tcp (n4)", "THROTTLED", "n1,n2,n3"),
      prob("peer_ni", "198.18.1.4@tcp", "LOSSY", "n7"),      // one of its peers: congestion
      prob("peer_ni", "198.18.1.5@tcp", "LOSSY", "n7"),      // not shaped: kept
      prob("peer_ni", "198.18.2.4@tcp1", "LOSSY", "n7"),     // its other rail, not shaped: kept
      prob("ni", "198.18.1.6@tcp (n6)", "THROTTLED", "n1"),  // shaped, and lossy to two: kept
      prob("peer_ni", "198.18.1.6@tcp", "LOSSY", "n7, n8"),
  };
  drop_consequences(v);
  std::vector<std::string> left;
  for (const Problem& p : v) left.push_back(p.subject + " " + p.cause);
  EXPECT_EQ(left,
            (std::vector<std::string>{"198.18.1.4@tcp (n4) THROTTLED", "198.18.1.5@tcp LOSSY",
                                      "198.18.2.4@tcp1 LOSSY", "198.18.1.6@tcp (n6) THROTTLED",
                                      "198.18.1.6@tcp LOSSY"}));
}

TEST(ClusterHealthMerge, WhatALinkAtCapacityExplainsIsLeftOut) {
  // n4's 50 Mbit/s link carried 5.9 MiB/s (at least 70% of 5.96) in the window; n5's
  // 10 Gbit/s link 300 MiB/s (a quarter); n6's speed is not known.
  std::vector<MeshRow> rows(3);
  rows[0].from = "n4";
  rows[0].nis = {MeshNi{*Nid::parse("198.18.1.4@tcp"), 50, 0.2, 5.9},
                 MeshNi{*Nid::parse("198.18.2.4@tcp1"), 50, 0.1, 0.5}};
  rows[1].from = "n5";
  rows[1].nis = {MeshNi{*Nid::parse("198.18.1.5@tcp"), 10000, 300, 1}};
  rows[2].from = "n6";
  rows[2].nis = {MeshNi{*Nid::parse("198.18.1.6@tcp"), 0, 900, 900}};
  auto busy = saturated_nis(rows);
  EXPECT_EQ(busy, (std::map<std::string, std::string>{{"198.18.1.4@tcp", "n4"}}));
  std::vector<Problem> v = {
      prob("peer_ni", "198.18.1.4@tcp", "SLOW", "n1, n2"),  // its queue: load
      prob("path", "n1 -> n4 (198.18.1.1@tcp -> 198.18.1.4@tcp)", "SLOW", "n1"),
      prob("peer_ni", "198.18.1.4@tcp", "LOSSY", "n1"),      // its shaper's full queue
      prob("peer_ni", "198.18.1.1@tcp", "SLOW", "n4"),       // n4's own full link
      prob("peer_ni", "198.18.1.1@tcp", "SLOW", "n4, n2"),   // n2 sees it too: not n4's
      prob("peer_ni", "198.18.2.1@tcp1", "SLOW", "n4"),      // n4's other link is not full
      prob("peer_ni", "198.18.1.4@tcp", "UNHEALTHY", "n1"),  // its full queue's timeouts
      prob("peer_ni", "198.18.1.6@tcp", "UNHEALTHY", "n1"),  // n6's speed is not known
      prob("peer_ni", "198.18.1.5@tcp", "SLOW", "n1"),       // a quarter of 10 Gbit/s
      prob("ni", "198.18.1.4@tcp (n4)", "MTU", "n1"),
  };
  drop_saturated(v, busy);
  std::vector<std::string> left;
  for (const Problem& p : v) left.push_back(p.subject + " " + p.cause + " " + p.seen_by);
  EXPECT_EQ(left, (std::vector<std::string>{"198.18.1.1@tcp SLOW n4, n2", "198.18.2.1@tcp1 SLOW n4",
                                            "198.18.1.6@tcp UNHEALTHY n1", "198.18.1.5@tcp SLOW n1",
                                            "198.18.1.4@tcp (n4) MTU n1"}));
}

TEST(ClusterHealthMerge, WhatANodeStarvedOfCpuOrAServerAnsweringLateExplainsIsLeftOut) {
  const std::map<std::string, std::vector<std::string>> nids = {
      {"n1", {"198.18.1.1@tcp"}},
      {"n4", {"198.18.1.4@tcp", "198.18.2.4@tcp1"}},
      {"n5", {"198.18.1.5@tcp"}}};
  std::vector<Problem> v = {
      prob("node", "n4", "CPU", "n4"),
      prob("peer_ni", "198.18.1.4@tcp", "SLOW", "n1, n2"),    // it answers late
      prob("server", "198.18.1.4@tcp", "SERVER", "n1"),       // its execution time
      prob("ni", "198.18.2.4@tcp1 (n4)", "THROTTLED", "n1"),  // the mesh's late bulk probes
      prob("path", "n1 -> n4 (198.18.1.1@tcp -> 198.18.1.4@tcp)", "LOSSY", "n1"),  // timed out
      prob("ni", "198.18.1.4@tcp", "SLOW", "n4"),            // its own NI, by its own view
      prob("peer_ni", "198.18.1.5@tcp", "SLOW", "n4"),       // it reads replies late
      prob("peer_ni", "198.18.1.5@tcp", "LOSSY", "n4, n1"),  // n1 sees it too: n5's
      prob("ni", "198.18.1.4@tcp (n4)", "MTU", "n1"),        // not a matter of time
      prob("peer_ni", "198.18.1.1@tcp", "SLOW", "n5"),       // nothing to do with n4
  };
  drop_slow_nodes(v, nids);
  std::vector<std::string> left;
  for (const Problem& p : v) left.push_back(p.subject + " " + p.cause + " " + p.seen_by);
  EXPECT_EQ(left,
            (std::vector<std::string>{"n4 CPU n4", "198.18.1.5@tcp LOSSY n4, n1",
                                      "198.18.1.4@tcp (n4) MTU n1", "198.18.1.1@tcp SLOW n5"}));
  // No node starved: nothing is left out.
  std::vector<Problem> w(v.begin() + 1, v.end());
  drop_slow_nodes(w, nids);
  EXPECT_EQ(w.size(), 3u);
  // Issue 70, item 6: a server that answers late (SERVER: its peers' RPCs wait, TCP's round
  // trip does not) explains its peers' SLOW views of each of its NIs and the mesh's late
  // probes; the SERVER line stays, and what is not about it too.
  std::vector<Problem> late = {
      prob("server", "198.18.1.4@tcp", "SERVER", "n1, n2"),
      prob("peer_ni", "198.18.2.4@tcp1", "SLOW", "n2"),        // a peer that judged it SLOW still
      prob("ni", "198.18.2.4@tcp1 (n4)", "SLOW", "n1,n2,n5"),  // the mesh
      prob("path", "n1 -> n4 (198.18.1.1@tcp -> 198.18.1.4@tcp)", "LOSSY", "n1"),  // timed out
      prob("peer_ni", "198.18.1.5@tcp", "SLOW", "n4"),  // it reads replies late
      prob("ni", "198.18.1.4@tcp (n4)", "MTU", "n1"),   // not a matter of time
      prob("peer_ni", "198.18.1.1@tcp", "SLOW", "n5"),  // nothing to do with n4
  };
  drop_slow_nodes(late, nids);
  left.clear();
  for (const Problem& p : late) left.push_back(p.subject + " " + p.cause + " " + p.seen_by);
  EXPECT_EQ(left,
            (std::vector<std::string>{"198.18.1.4@tcp SERVER n1, n2", "198.18.1.4@tcp (n4) MTU n1",
                                      "198.18.1.1@tcp SLOW n5"}));
}

// A mesh of n1..n4 on @tcp where every node probes every other: answered, unmarked.
std::vector<MeshRow> full_mesh(std::vector<std::vector<MeshMark>>* marks) {
  std::vector<MeshRow> rows;
  for (int i = 1; i <= 4; ++i) {
    MeshRow r;
    r.from = "n" + std::to_string(i);
    for (int j = 1; j <= 4; ++j) {
      if (j == i) continue;
      MeshCell c;
      c.to = "n" + std::to_string(j);
      c.local = *Nid::parse("198.18.1." + std::to_string(i) + "@tcp");
      c.peer = *Nid::parse("198.18.1." + std::to_string(j) + "@tcp");
      c.sent = c.rtt_count = 10;
      c.p50_ms = 0.2;
      r.cells.push_back(c);
    }
    rows.push_back(r);
  }
  marks->assign(rows.size(), std::vector<MeshMark>(3));
  return rows;
}

TEST(ClusterHealthMerge, APeerOnlyOneNodeFindsFaultWithIsThatNodesProblem) {
  std::vector<std::vector<MeshMark>> marks;
  std::vector<MeshRow> rows = full_mesh(&marks);
  marks[0][0].slow = marks[0][1].slow = true;  // n1's own probes to n2 and n3 stand out
  std::vector<Problem> v = {
      prob("peer_ni", "198.18.1.2@tcp", "SLOW", "n1", 5000),
      prob("peer_ni", "198.18.1.3@tcp", "SLOW", "n1", 4000),
      prob("peer_ni", "198.18.1.4@tcp", "LOSSY", "n1"),  // loss stays the peer's
      prob("node", "n9", "DEAD", "n1"),
  };
  attribute_to_observers(v, rows, marks, 5);
  ASSERT_EQ(v.size(), 3u);  // the observer's line takes the place of its first peer's
  EXPECT_EQ(v[1].subject, "198.18.1.4@tcp");
  EXPECT_EQ(v[2].subject, "n9");
  const Problem& mine = v[0];
  EXPECT_EQ(mine.kind, "ni");
  EXPECT_EQ(mine.subject, "198.18.1.1@tcp (n1)");
  EXPECT_EQ(mine.cause, "SLOW");
  EXPECT_EQ(mine.seen_by, "n1");
  EXPECT_EQ(mine.since_unix_ms, 4000);
  EXPECT_EQ(mine.evidence,
            "n1 alone sees 2 peer NI(s) SLOW, which n2,n3,n4 reach fine: the trouble is at its "
            "end -- 198.18.1.2@tcp (evidence of 198.18.1.2@tcp); 198.18.1.3@tcp (evidence of "
            "198.18.1.3@tcp)");

  // It stays the peer's when another node finds fault with it too (in the list, or its
  // mesh cell stands out), when fewer than two others reach it, or when several see it.
  auto stays = [&](std::vector<Problem> w, const std::vector<std::vector<MeshMark>>& m) {
    std::vector<Problem> before = w;
    attribute_to_observers(w, rows, m, 5);
    return w == before;
  };
  EXPECT_TRUE(stays({prob("peer_ni", "198.18.1.2@tcp", "SLOW", "n1"),
                     prob("peer_ni", "198.18.1.2@tcp", "UNHEALTHY", "n3")},
                    marks));
  std::vector<std::vector<MeshMark>> one_marked = marks;
  one_marked[3][0].slow = true;  // n4 -> n1... its first cell is to n1; n4 -> n2 is [3][1]
  one_marked[3][1].slow = true;
  EXPECT_TRUE(stays({prob("peer_ni", "198.18.1.2@tcp", "SLOW", "n1")}, one_marked));
  EXPECT_TRUE(stays({prob("peer_ni", "198.18.1.2@tcp", "SLOW", "n1, n3")}, marks));
  std::vector<MeshRow> few = rows;
  for (MeshRow& r : few)
    for (MeshCell& c : r.cells) c.rtt_count = 2;  // too few answers to vouch for anything
  std::vector<Problem> w = {prob("peer_ni", "198.18.1.2@tcp", "UNHEALTHY", "n1")};
  attribute_to_observers(w, few, marks, 5);
  EXPECT_EQ(w[0].kind, "peer_ni");

  // n1's own probes reach n2 fine as well: its SLOW view is older than they are (a fault
  // that healed, still in its window) and is left out, not blamed on anyone.
  std::vector<std::vector<MeshMark>> none;
  full_mesh(&none);
  w = {prob("peer_ni", "198.18.1.2@tcp", "SLOW", "n1"), prob("node", "n9", "DEAD", "n1")};
  attribute_to_observers(w, rows, none, 5);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].subject, "n9");
  // So is a SERVER line whose every seer's probes reach the server fine (a starved server
  // given its CPU back, its peers' windows not yet clear); while a seer's probes to it stand
  // out, it stays.
  w = {prob("server", "198.18.1.2@tcp", "SERVER", "n1, n3")};
  attribute_to_observers(w, rows, none, 5);
  EXPECT_TRUE(w.empty());
  w = {prob("server", "198.18.1.2@tcp", "SERVER", "n1, n3")};
  attribute_to_observers(w, rows, marks, 5);  // n1's probe of n2 stands out
  EXPECT_EQ(w.size(), 1u);
}

TEST(ClusterHealthMerge, NodesThatCannotReachEachOtherAreOnePartition) {
  std::vector<std::vector<MeshMark>> marks;
  std::vector<MeshRow> rows = full_mesh(&marks);
  // n3 and n4 on @tcp lose every probe to and from n1 and n2 (a switch split in two).
  auto side = [](const std::string& n) { return n == "n1" || n == "n2" ? 0 : 1; };
  for (MeshRow& r : rows)
    for (MeshCell& c : r.cells)
      if (side(r.from) != side(c.to)) c.rtt_count = 0;
  std::vector<Problem> v = {
      prob("peer_ni", "198.18.1.3@tcp", "UNHEALTHY", "n1"),
      prob("peer_ni", "198.18.1.1@tcp", "UNHEALTHY", "n3, n4"),
      prob("path", "n1 -> n4 (198.18.1.1@tcp -> 198.18.1.4@tcp)", "LOSSY", "n1"),
      prob("ni", "198.18.1.4@tcp (n4)", "LOSSY", "n1,n2,n3"),
      prob("peer_ni", "198.18.1.2@tcp", "SLOW", "n1"),    // within a side: not the split's
      prob("peer_ni", "198.18.2.3@tcp1", "LOSSY", "n1"),  // another network
      prob("ni", "198.18.1.4@tcp (n4)", "MTU", "n1"),     // not a consequence
  };
  fold_partitions(v, rows, {}, 5);
  std::vector<std::string> left;
  for (const Problem& p : v) left.push_back(p.kind + " " + p.subject + " " + p.cause);
  EXPECT_EQ(left, (std::vector<std::string>{
                      "peer_ni 198.18.1.2@tcp SLOW", "peer_ni 198.18.2.3@tcp1 LOSSY",
                      "ni 198.18.1.4@tcp (n4) MTU", "network tcp PARTITION"}));
  EXPECT_EQ(v.back().evidence,
            "tcp is split in 2: n1,n2 | n3,n4 -- 4 probed path(s) between the sides answered "
            "none of their probes");
  EXPECT_EQ(v.back().seen_by, "n1,n2,n3,n4");
  // One probe across answered: the sides reach each other again, no partition.
  rows[0].cells[1].rtt_count = 1;  // n1 -> n3
  std::vector<Problem> w = {prob("peer_ni", "198.18.1.3@tcp", "UNHEALTHY", "n1")};
  fold_partitions(w, rows, {}, 5);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].cause, "UNHEALTHY");
  // A dead node's NIs take no part: it is named DEAD already, not a side.
  rows = full_mesh(&marks);
  for (MeshRow& r : rows)
    for (MeshCell& c : r.cells)
      if (r.from == "n4" || c.to == "n4") c.rtt_count = 0;
  w = {};
  fold_partitions(w, rows, {"198.18.1.4@tcp"}, 5);
  EXPECT_TRUE(w.empty());
  fold_partitions(w, rows, {}, 5);  // not known dead: n4 alone is cut off
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].evidence.find("n1,n2,n3 | n4"), std::string::npos) << w[0].evidence;
}

}  // namespace
}  // namespace pfsnet
