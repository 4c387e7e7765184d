#include "probe/cluster_health.h"

#include <gtest/gtest.h>

#include "probe/health_list.h"
#include "probe/test_problem.h"

namespace pfsnet {
namespace {

using std::chrono::seconds;

TEST(ClusterHealthCodec, ReportsAndPagesRoundTripAndRefuseGarbage) {
  HealthReport r{"n3",
                 {prob("ni", "198.18.1.3@tcp", "DOWN", "n3", 1795511159000),
                  prob("settings", "n3", "SETTINGS", "n3")}};
  r.problems[1].code = "rpcs_below_bdp";
  auto d = decode_health_report(encode_health_report(r).span());
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(*d, r);
  Buffer b = encode_health_report(r);
  for (size_t cut = 0; cut < b.size(); ++cut)
    EXPECT_FALSE(decode_health_report(std::span(b.data(), cut)).ok()) << cut;
  // A problem without a cause is not one.
  r.problems[0].cause = "";
  EXPECT_FALSE(decode_health_report(encode_health_report(r).span()).ok());

  HealthPage p{7, 2, {NodeProblems{"n3", 1795511159000, {prob("ni", "x@tcp", "DOWN")}}}};
  auto dp = decode_health_page(encode_health_page(p).span());
  ASSERT_TRUE(dp.ok());
  EXPECT_EQ(*dp, p);
  std::vector<uint8_t> junk(40, 0xff);
  EXPECT_FALSE(decode_health_page(junk).ok());
}

// HEALTH_LIST's reply: the judged list with its muted marks, the mutes' states and the
// table in brief; beyond kMaxListedProblems counted, not carried.
TEST(ClusterHealthCodec, TheJudgedListRoundTripsCountsWhatItLeavesOffAndRefusesGarbage) {
  HealthListReply r;
  r.has_table = true;
  r.mgs = *Nid::parse("198.18.0.9@tcp");
  r.nodes = 5;
  r.nodes_up = 4;
  r.problems = {prob("node", "n4", "DEAD", "n5", 1795511159000),
                prob("settings", "n3", "SETTINGS")};
  r.problems[1].muted = true;
  r.mutes = {MuteState{HealthMute{"SETTINGS", "n3", 1000, 61000, false, 1, "n6"}, 1, true, ""}};
  r.mutes_error = "";
  Buffer b = encode_health_list(r);
  auto d = decode_health_list(b.span());
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(*d, r);
  for (size_t cut = 0; cut < b.size(); ++cut)
    EXPECT_FALSE(decode_health_list(std::span(b.data(), cut)).ok()) << cut;
  // More up than there are, or a muted mark that is neither 0 nor 1: malformed.
  r.nodes_up = 6;
  EXPECT_FALSE(decode_health_list(encode_health_list(r).span()).ok());
  r.nodes_up = 4;
  // A list of one problem: its muted byte just before left_off, the mutes' count and the
  // mutes' error.
  HealthListReply one = r;
  one.problems.resize(1);
  one.mutes.clear();
  Buffer e1 = encode_health_list(one);
  std::vector<uint8_t> bad(e1.data(), e1.data() + e1.size());
  bad[bad.size() - 1 /* mutes_error */ - 4 /* mutes */ - 4 /* left_off */ - 1] = 2;
  EXPECT_FALSE(decode_health_list(bad).ok());
  // Past the cap: the first kMaxListedProblems carried, the rest counted.
  HealthListReply big;
  big.problems.assign(kMaxListedProblems + 7, prob("ni", "x@tcp", "DOWN"));
  big.left_off = 1;
  auto db = decode_health_list(encode_health_list(big).span());
  ASSERT_TRUE(db.ok());
  EXPECT_EQ(db->problems.size(), kMaxListedProblems);
  EXPECT_EQ(db->left_off, 8u);
  EXPECT_FALSE(db->has_table);

  // The request: the asking node's whole list, past HEALTH_REPORT's 64.
  HealthReport mine{"c1", std::vector<Problem>(100, prob("peer_ni", "x@tcp", "UNHEALTHY"))};
  Buffer q = encode_health_list_request(mine);
  auto dq = decode_health_list_request(q.span());
  ASSERT_TRUE(dq.ok()) << dq.status().to_string();
  EXPECT_EQ(*dq, mine);
  for (size_t cut = 0; cut < q.size(); cut += 7)
    EXPECT_FALSE(decode_health_list_request(std::span(q.data(), cut)).ok()) << cut;
  EXPECT_FALSE(decode_health_list_request(encode_health_list_request({"", {}}).span()).ok())
      << "a request names its node";
}

TEST(ClusterHealthBoard, KeepsTheLastListOfEachNodeDropsEmptyAndStaleOnes) {
  HealthBoard b(seconds(90));
  TimePoint t0{};
  b.report({"n3", {prob("ni", "a@tcp", "DOWN")}}, t0, 1000);
  b.report({"n4", {prob("peer_ni", "a@tcp", "UNHEALTHY")}}, t0 + seconds(60), 2000);
  EXPECT_EQ(b.size(), 2u);
  // A new list replaces the old; an empty one clears the node.
  b.report({"n3", {prob("ni", "a@tcp", "SLOW")}}, t0 + seconds(10), 3000);
  auto all = b.all();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].node, "n3");
  EXPECT_EQ(all[0].problems[0].cause, "SLOW");
  EXPECT_EQ(all[0].updated_unix_ms, 3000);
  b.report({"n4", {}}, t0 + seconds(61), 4000);
  EXPECT_EQ(b.size(), 1u);
  // n3 not renewed within 90 s of its last list: gone.
  b.expire(t0 + seconds(100));
  EXPECT_EQ(b.size(), 1u);
  b.expire(t0 + seconds(101));
  EXPECT_EQ(b.size(), 0u);
}

TEST(ClusterHealthBoard, PagesByCountAndBytes) {
  HealthBoard b(seconds(90));
  for (int i = 0; i < 30; ++i) {
    HealthReport r{"n" + std::to_string(100 + i), {}};
    for (int k = 0; k < 64; ++k) {
      r.problems.push_back(prob("peer_ni", std::to_string(k) + "@tcp", "UNHEALTHY"));
      r.problems.back().evidence = std::string(250, 'e');
    }
    b.report(r, TimePoint{}, 1);
  }
  HealthPage p = b.page(0, 10);
  EXPECT_EQ(p.total, 30u);
  EXPECT_EQ(p.nodes.size(), 10u);
  // 64 problems of ~300 bytes: ~19 KiB a node, about 53 in 1 MiB; all 30 fit.
  EXPECT_EQ(b.page(0, 1000).nodes.size(), 30u);
  EXPECT_LE(encode_health_page(b.page(0, 1000)).size(), kHealthPageBytes);
  EXPECT_EQ(b.page(25, 1000).nodes.size(), 5u);
  EXPECT_EQ(b.page(25, 1000).nodes[0].node, "n125");
  EXPECT_TRUE(b.page(30, 1000).nodes.empty());
}

}  // namespace
}  // namespace pfsnet
