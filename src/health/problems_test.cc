#include "health/problems.h"

#include <gtest/gtest.h>

#include <fstream>

#include "base/test_nid.h"

namespace pfsnet {
namespace {

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

TEST(ProblemsTest, ANodeStarvedOfCpuIsItsOwnProblemAfterTheDeadAndDown) {
  ProblemInputs in;
  in.node = "oss3";
  NiInfo slow = ni("198.18.0.2@tcp");
  slow.peer = slow.nid;
  slow.degraded = "SLOW";
  in.peers = {slow};
  in.cpu_starved = true;
  in.cpu_since_unix_ms = 4000;
  in.cpu_evidence = "its threads waited 400 ms a second for a CPU";
  NiInfo down = ni("198.18.0.9@tcp");
  down.up = false;
  in.nis = {down};
  std::vector<Problem> p = find_problems(in);
  sort_problems(p);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].cause, "DOWN");
  EXPECT_EQ(p[1].kind, "node");
  EXPECT_EQ(p[1].subject, "oss3");
  EXPECT_EQ(p[1].cause, "CPU");
  EXPECT_EQ(p[1].seen_by, "oss3");
  EXPECT_EQ(p[1].since_unix_ms, 4000);
  EXPECT_EQ(p[1].evidence, in.cpu_evidence);
  EXPECT_EQ(p[2].cause, "SLOW");
  in.cpu_starved = false;
  EXPECT_EQ(find_problems(in).size(), 2u);
}

// A node suspect on a fresh report, while the MGS's own ping checks it, counts as up: it is
// not listed, and this node's own unhealthy view of its NI stays this node's problem until
// the MGS's verdict; suspect because the MGS stopped hearing it, it is listed.
TEST(ProblemsTest, ASuspectTheMgsIsStillCheckingIsNotListedYet) {
  StatusTable t;
  t.mgs = nid("198.18.0.1@tcp");
  StatusNode checked{2,    "oss1", 2,    NodeState::kSuspect, {nid("198.18.0.2@tcp")}, 0, 0,
                     5000, 100,    false};
  checked.verifying = true;
  StatusNode silent{3,    "oss2", 2,    NodeState::kSuspect, {nid("198.18.0.3@tcp")}, 0, 0,
                    6000, 10600,  false};
  t.nodes = {checked, silent};
  ProblemInputs in;
  in.node = "client1";
  in.table = &t;
  NiInfo to_checked = ni("198.18.0.2@tcp");
  to_checked.peer = to_checked.nid;
  to_checked.health = 800;
  to_checked.errors[static_cast<size_t>(HealthKind::kPeerNiUnreachable)] = 1;
  in.peers = {to_checked};
  auto v = find_problems(in);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].subject, "oss2");
  EXPECT_EQ(v[0].cause, "SUSPECT");
  EXPECT_EQ(v[1].subject, "198.18.0.2@tcp");
  EXPECT_EQ(v[1].cause, "UNHEALTHY");
  // Once the MGS's ping goes unanswered it is DEAD, listed, and the view follows from it.
  t.nodes[0].state = NodeState::kDead;
  t.nodes[0].verifying = false;
  v = find_problems(in);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].subject, "oss1");
  EXPECT_EQ(v[0].cause, "DEAD");
  EXPECT_EQ(v[1].subject, "oss2");
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

// The probe mesh: five nodes each probing the four others. n5's NI answers slowly and its
// bulk is throttled: every cell through it stands out, so the NI is named once -- not the
// eight paths -- and nothing healthy is; one lossy path elsewhere is listed as a path; a
// dead node's cells are its own problem.
TEST(ProblemsTest, TheMeshNamesTheNiItsOutliersShareAndLoneOutliersAsPaths) {
  std::vector<std::string> names = {"n1", "n2", "n3", "n4", "n5"};
  auto addr = [](size_t i) { return *Nid::parse("198.18.0." + std::to_string(i + 1) + "@tcp"); };
  std::vector<MeshRow> rows;
  std::vector<std::vector<MeshMark>> marks;
  for (size_t i = 0; i < names.size(); ++i) {
    MeshRow r;
    r.from = names[i];
    std::vector<MeshMark> m;
    for (size_t j = 0; j < names.size(); ++j) {
      if (j == i) continue;
      MeshCell c;
      c.to = names[j];
      c.local = addr(i);
      c.peer = addr(j);
      r.cells.push_back(c);
      MeshMark k;
      if (j == 4) {
        k.slow = true;
        k.reason = "p50 30.000 ms > 3 x median 0.200 ms";
      } else if (i == 4) {
        k.throttled = true;
        k.reason = "write 2.0 MiB/s < median 300.0 / 3";
      } else if (i == 0 && j == 1) {
        k.lossy = true;
        k.reason = "lost 3 of 30 probes";
      }
      m.push_back(k);
    }
    rows.push_back(r);
    marks.push_back(m);
  }
  ProblemInputs in;
  in.node = "n2";
  in.mesh = &rows;
  in.mesh_marks = &marks;
  std::vector<Problem> p = find_problems(in);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].kind, "path");
  EXPECT_EQ(p[0].cause, "LOSSY");
  EXPECT_EQ(p[0].subject, "n1 -> n2 (198.18.0.1@tcp -> 198.18.0.2@tcp)");
  EXPECT_EQ(p[0].seen_by, "n1");
  EXPECT_EQ(p[1].kind, "ni");
  EXPECT_EQ(p[1].subject, "198.18.0.5@tcp (n5)");
  EXPECT_EQ(p[1].cause, "SLOW");  // 4 slow, 4 throttled: the severer
  EXPECT_EQ(p[1].seen_by, "n1,n2,n3,n4,n5");
  EXPECT_NE(p[1].evidence.find("8 of the 8 probed paths"), std::string::npos) << p[1].evidence;
  // n5 dead: its cells are not the mesh's to name.
  StatusTable t;
  t.mgs = addr(0);
  t.nodes = {StatusNode{5, "n5", 2, NodeState::kDead, {addr(4)}, 0, 0, 0, 0, false}};
  in.table = &t;
  p = find_problems(in);
  ASSERT_EQ(p.size(), 2u);  // n5 DEAD, the lossy path
  EXPECT_EQ(p[0].cause, "DEAD");
  EXPECT_EQ(p[1].cause, "LOSSY");
  for (const Problem& x : p) EXPECT_EQ(x.subject.find("(198.18.0.5@tcp"), std::string::npos);
}

TEST(ProblemsTest, TheMeshNamesAnNiWhoseMtuIsNotItsLinks) {
  auto addr = [](size_t i) { return *Nid::parse("198.18.0." + std::to_string(i + 1) + "@tcp"); };
  std::vector<MeshRow> rows;
  std::vector<std::vector<MeshMark>> marks;
  for (size_t i = 0; i < 4; ++i) {
    MeshRow r;
    r.from = "n" + std::to_string(i + 1);
    for (size_t j = 0; j < 4; ++j) {
      if (j == i) continue;
      MeshCell c;
      c.to = "n" + std::to_string(j + 1);
      c.local = addr(i);
      c.peer = addr(j);
      c.local_mtu = i == 2 ? 9000 : 1500;
      c.peer_mtu = j == 2 ? 9000 : 1500;
      c.on_link = true;
      r.cells.push_back(c);
    }
    rows.push_back(r);
    marks.push_back(std::vector<MeshMark>(3));
  }
  ProblemInputs in;
  in.node = "n1";
  in.mesh = &rows;
  in.mesh_marks = &marks;
  std::vector<Problem> p = find_problems(in);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].kind, "ni");
  EXPECT_EQ(p[0].subject, "198.18.0.3@tcp (n3)");
  EXPECT_EQ(p[0].cause, "MTU");
  EXPECT_EQ(p[0].seen_by, "n1,n2,n3,n4");
  EXPECT_EQ(p[0].evidence, "probe mesh: MTU 9000 on a link where 3 of its 4 NIs have 1500");
  // A dead node's MTU is not the mesh's to name.
  StatusTable t;
  t.mgs = addr(0);
  t.nodes = {StatusNode{3, "n3", 2, NodeState::kDead, {addr(2)}, 0, 0, 0, 0, false}};
  in.table = &t;
  p = find_problems(in);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].cause, "DEAD");
}

}  // namespace
}  // namespace pfsnet

namespace pfsnet {
namespace {

// A certificate within 30 days of its end is a SETTINGS problem of the node that uses it,
// since the day those 30 days began; an expired one says so; one further off is none.
TEST(ProblemsTest, ACertificateNearItsEndIsASettingsProblem) {
  constexpr int64_t kDay = 86'400'000, kNow = 1'800'000'000'000;
  ProblemInputs in;
  in.node = "oss1";
  in.now_unix_ms = kNow;
  in.certificates = {{"tls.cert_file", "/etc/pfsnet/node.pem", "oss1", kNow + 10 * kDay - 5},
                     {"tls.ca_file", "/etc/pfsnet/ca.pem", "cluster-ca", kNow + 31 * kDay},
                     {"tls.ca_file", "/etc/pfsnet/ca.pem", "old-ca", kNow - kDay}};
  std::vector<Problem> v = find_problems(in);
  ASSERT_EQ(v.size(), 2u);
  // Oldest first: the expired CA certificate's 30 days began first.
  EXPECT_EQ(v[0].code, "certificate_expired");
  EXPECT_EQ(v[0].evidence,
            "tls.ca_file /etc/pfsnet/ca.pem (CN old-ca) expired at " + format_unix_ms(kNow - kDay) +
                ": every certificate it signed stops being accepted; renew it and restart pfsnetd");
  EXPECT_EQ(v[1].kind, "settings");
  EXPECT_EQ(v[1].subject, "oss1");
  EXPECT_EQ(v[1].cause, "SETTINGS");
  EXPECT_EQ(v[1].code, "certificate_expires");
  EXPECT_EQ(v[1].since_unix_ms, kNow + 10 * kDay - 5 - 30 * kDay);
  EXPECT_EQ(v[1].evidence,
            "tls.cert_file /etc/pfsnet/node.pem (CN oss1) expires in 10 day(s), at " +
                format_unix_ms(kNow + 10 * kDay - 5) +
                ": then peers stop accepting this node; renew it and restart "
                "pfsnetd");
  // 31 days off: nothing; no certificates (plaintext, or PSK): nothing.
  in.certificates.erase(in.certificates.begin());
  in.certificates.pop_back();
  EXPECT_TRUE(find_problems(in).empty());
}

// ROUTER: one line per gateway not used, with the networks that cuts off -- not one whose
// local NI is down (its DOWN says so) nor one the MGS calls dead (its DEAD does).
TEST(ProblemsTest, AGatewayNotUsedIsNamedWithTheNetworksItCutsOff) {
  auto info = [](const char* net, const char* gw, bool usable, std::string state) {
    RouteInfo r;
    r.route = RouteConfig{*parse_lnet_net(net), nid(gw), 1, 0};
    r.usable = usable;
    r.state = std::move(state);
    r.since_unix_ms = 4000;
    return r;
  };
  ProblemInputs in;
  in.node = "client1";
  in.routes = {info("tcp2", "198.18.1.2@tcp1", false, "dead: its router ping failed 1.0 s ago"),
               info("tcp3", "198.18.1.2@tcp1", false, "dead: its router ping failed 1.0 s ago"),
               info("tcp2", "198.18.1.4@tcp1", true, "up"),
               info("tcp4", "198.18.9.2@tcp9", false, "no local NI up on tcp9")};
  std::vector<Problem> p = find_problems(in);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].kind, "router");
  EXPECT_EQ(p[0].subject, "198.18.1.2@tcp1");
  EXPECT_EQ(p[0].cause, "ROUTER");
  EXPECT_EQ(p[0].since_unix_ms, 4000);
  EXPECT_EQ(p[0].evidence,
            "not used: dead: its router ping failed 1.0 s ago; cut off from tcp3 (no other "
            "gateway is usable); tcp2 still reached through other gateways");
  // The MGS calls it dead: its DEAD is the line.
  StatusTable t;
  t.mgs = nid("198.18.1.9@tcp1");
  t.nodes = {
      StatusNode{2, "r1", 2, NodeState::kDead, {nid("198.18.1.2@tcp1")}, 0, 0, 5000, 31000, false}};
  in.table = &t;
  p = find_problems(in);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].cause, "DEAD");
}

// docs/health.md, the health catalogue: a section ("## CAUSE") for every cause a problem
// can have, in problem_causes()' order (the order pfsnet health sorts by), and none for a
// cause the code does not have.
TEST(HealthCatalogueTest, EveryCauseHasASectionInSeverityOrderAndEverySectionACause) {
  std::ifstream in(std::string(PFSNET_SOURCE_DIR) + "/docs/health.md");
  ASSERT_TRUE(in.good());
  std::vector<std::string> sections;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("## ", 0) == 0) sections.push_back(line.substr(3));
  EXPECT_EQ(sections, problem_causes());
  // And the sort follows that order.
  std::vector<Problem> v;
  for (auto it = problem_causes().rbegin(); it != problem_causes().rend(); ++it)
    v.push_back(Problem{"node", "n1", *it, "n1", 0, "", ""});
  sort_problems(v);
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(v[i].cause, problem_causes()[i]);
}

}  // namespace
}  // namespace pfsnet
