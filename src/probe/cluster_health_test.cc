#include "probe/cluster_health.h"

#include <gtest/gtest.h>

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
