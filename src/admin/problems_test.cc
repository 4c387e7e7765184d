#include "admin/problems.h"

#include <gtest/gtest.h>

namespace pfsnet {
namespace {

Nid nid(const char* s) { return *Nid::parse(s); }

NiInfo ni(const char* n) {
  NiInfo i;
  i.nid = nid(n);
  i.up = true;
  return i;
}

TEST(ProblemsTest, EachCulpritOnceWithItsCauseSeverestFirst) {
  StatusTable t;
  t.mgs = nid("198.18.0.1@tcp");
  StatusNode up{1, "mgs1", 1, NodeState::kUp, {nid("198.18.0.1@tcp")}, 0, 0, 0, 0, false};
  StatusNode dead{2,    "oss1", 2,    NodeState::kDead, {nid("198.18.0.2@tcp")}, 0, 0,
                  5000, 31000,  false};
  t.nodes = {up, dead};
  ProblemInputs in;
  in.node = "client1";
  in.table = &t;
  NiInfo down = ni("198.18.0.9@tcp");
  down.up = false;
  down.health = 900;
  down.errors[static_cast<size_t>(HealthKind::kLocalNiDown)] = 1;
  down.last_change_unix_ms = 7000;
  in.nis = {ni("198.18.0.8@tcp"), down};
  NiInfo to_dead = ni("198.18.0.2@tcp");  // the dead server's NI: its errors follow from it
  to_dead.health = 0;
  to_dead.peer = to_dead.nid;
  NiInfo lossy = ni("198.18.0.3@tcp");
  lossy.peer = lossy.nid;
  lossy.degraded = "LOSSY";
  lossy.degraded_since_unix_ms = 9000;
  lossy.degraded_evidence = "TCP retransmitted 30 of 1000 segments (3.00%)";
  NiInfo busy = ni("198.18.0.4@tcp");
  busy.peer = nid("198.18.0.4@tcp");
  busy.degraded = "SERVER";
  busy.degraded_evidence = "server execution 40.000 ms (baseline 0.100 ms)";
  in.peers = {to_dead, lossy, busy, ni("198.18.0.5@tcp")};
  in.settings = {{"rpcs_below_bdp", "198.18.0.3@tcp", "needs 18 RPCs in flight"}};
  std::vector<Problem> p = find_problems(in);
  ASSERT_EQ(p.size(), 5u);
  EXPECT_EQ(p[0].kind, "node");
  EXPECT_EQ(p[0].subject, "oss1");
  EXPECT_EQ(p[0].cause, "DEAD");
  EXPECT_EQ(p[0].since_unix_ms, 5000);
  EXPECT_EQ(p[0].seen_by, "client1");
  EXPECT_EQ(p[0].evidence, "last heard 31.0 s ago (by its ping), as the MGS 198.18.0.1@tcp says");
  EXPECT_EQ(p[1].kind, "ni");
  EXPECT_EQ(p[1].subject, "198.18.0.9@tcp");
  EXPECT_EQ(p[1].cause, "DOWN");
  EXPECT_EQ(p[1].evidence, "its link is down; health 900; errors LOCAL_NI_DOWN 1");
  EXPECT_EQ(p[2].kind, "peer_ni");
  EXPECT_EQ(p[2].cause, "LOSSY");
  EXPECT_EQ(p[2].evidence, lossy.degraded_evidence);
  EXPECT_EQ(p[3].kind, "server");
  EXPECT_EQ(p[3].subject, "198.18.0.4@tcp");
  EXPECT_EQ(p[3].cause, "SERVER");
  EXPECT_EQ(p[4].kind, "settings");
  EXPECT_EQ(p[4].code, "rpcs_below_bdp");
  // Nothing healthy is named: not the MGS, not the up NI, not the quiet peer.
  for (const Problem& x : p)
    for (const char* healthy : {"mgs1", "198.18.0.1@tcp", "198.18.0.8@tcp", "198.18.0.5@tcp"})
      EXPECT_NE(x.subject, healthy);
}

TEST(ProblemsTest, WithoutTheTableAnUnhealthyPeerIsListedAsSuch) {
  ProblemInputs in;
  in.node = "client1";
  NiInfo p = ni("198.18.0.2@tcp");
  p.health = 800;
  p.recovery_pings = 3;
  p.errors[static_cast<size_t>(HealthKind::kPeerNiUnreachable)] = 2;
  in.peers = {p};
  auto v = find_problems(in);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].cause, "UNHEALTHY");
  EXPECT_EQ(v[0].evidence,
            "health 800; errors PEER_NI_UNREACHABLE 2; 3 recovery ping(s) unanswered");
  EXPECT_TRUE(find_problems(ProblemInputs{"n", nullptr, {ni("198.18.0.1@tcp")}, {}, {}}).empty());
}

}  // namespace
}  // namespace pfsnet
