// ClusterHealthService on the in-process cluster (rpc/sim_cluster.h, membership/
// sim_members.h): an MGS, two servers and two clients with the real membership and
// cluster-health services over the in-memory transport, on manual time in 100 ms steps,
// reports every 0.5 s. What reaches the MGS's board, when, and when it leaves it.
#include "probe/cluster_health_sim.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "base/log.h"

namespace pfsnet {
namespace {

using namespace std::chrono_literals;

class InProcessClusterHealthTest : public ClusterHealthSimTest {
 protected:
  // What the MGS's board holds for `node` (nothing when it holds no list).
  std::vector<Problem> on_board(const std::string& node) {
    auto all = health_[2]->cluster(1s);  // the MGS answers from its own board
    if (!all.ok()) return {};
    for (const NodeProblems& np : *all)
      if (np.node == node) return np.problems;
    return {};
  }
  static Problem unhealthy_peer(int host) {
    return Problem{
        "peer_ni", SimMembers::nid(host).to_string(), "UNHEALTHY", "", 0, "PEER_NI_UNREACHABLE",
        ""};
  }
};

TEST_F(InProcessClusterHealthTest, ANodesListReachesTheMgsAtItsNextRoundAndLeavesWithIt) {
  health_[3]->set_local({unhealthy_peer(4)});
  auto listed = c_.run_until([&] { return on_board("n3").size() == 1; }, 5s);
  ASSERT_TRUE(listed.has_value());
  EXPECT_LE(*listed, 100ms);  // sent in the node's next tick, taken in the same step
  EXPECT_EQ(on_board("n3")[0].subject, "10.0.0.4@tcp");
  EXPECT_EQ(health_[3]->counters().started.at("UNHEALTHY"), 1u);
  // Unchanged, it is sent again only every 6 intervals (3 s), and stays.
  uint64_t sent = health_[3]->counters().reports_sent;
  c_.run_for(2s);
  EXPECT_EQ(health_[3]->counters().reports_sent, sent);
  EXPECT_EQ(on_board("n3").size(), 1u);
  // The problem ends: the empty list goes at once and the MGS drops the node's entry.
  health_[3]->set_local({});
  auto gone = c_.run_until([&] { return on_board("n3").empty(); }, 5s);
  ASSERT_TRUE(gone.has_value());
  EXPECT_LE(*gone, 100ms);
  EXPECT_EQ(health_[3]->counters().ended.at("UNHEALTHY"), 1u);
  // A healthy node sends nothing at all.
  uint64_t quiet = health_[4]->counters().reports_sent;
  c_.run_for(10s);
  EXPECT_EQ(health_[4]->counters().reports_sent, quiet);
}

// Each start and end of a node's own problem is logged with a stable code: in the JSON
// format, "event" and "code" (the cause), with how long it lasted at its end.
TEST_F(InProcessClusterHealthTest, EachStartAndEndIsLoggedWithItsCode) {
  std::ostringstream lines;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(lines);
  sink->set_formatter(json_log_formatter("n3"));
  spdlog::logger* log = spdlog::default_logger_raw();
  log->sinks().push_back(sink);
  health_[3]->set_local({unhealthy_peer(4)});
  c_.run_for(2s);
  health_[3]->set_local({});
  log->sinks().pop_back();
  std::vector<nlohmann::json> events;
  std::istringstream in(lines.str());
  for (std::string l; std::getline(in, l);) {
    auto j = nlohmann::json::parse(l);
    if (j.contains("event")) events.push_back(j);
  }
  ASSERT_EQ(events.size(), 2u) << lines.str();
  EXPECT_EQ(events[0]["event"], "health_problem_started");
  EXPECT_EQ(events[0]["level"], "warning");
  EXPECT_EQ(events[0]["code"], "UNHEALTHY");
  EXPECT_EQ(events[0]["kind"], "peer_ni");
  EXPECT_EQ(events[0]["subject"], "10.0.0.4@tcp");
  EXPECT_EQ(events[0]["component"], "probe");
  EXPECT_FALSE(events[0].contains("lasted_s"));
  EXPECT_EQ(events[1]["event"], "health_problem_ended");
  EXPECT_EQ(events[1]["level"], "info");
  EXPECT_EQ(events[1]["code"], "UNHEALTHY");
  EXPECT_EQ(events[1]["lasted_s"], 2.0);
}

// The MGS keeps the cluster's mutes (pfsnet health mute): set from any node, learnt by a
// node with problems at its reports (its /metrics marks them), never asked for by a
// healthy one; cleared, or gone at the TTL's end.
TEST_F(InProcessClusterHealthTest, TheMgsKeepsTheMutesAndANodeWithProblemsLearnsThem) {
  health_[3]->set_local({unhealthy_peer(4)});
  const int64_t now = c_.clock().wall_now().time_since_epoch().count() / 1000000;
  MuteReq set{MuteOp::kSet,
              HealthMute{"UNHEALTHY", "10.0.0.4@tcp", now, now + 10000, false, 1, "n5"}};
  auto m = health_[5]->mutes(set, 1s);  // n5 (a client) asks the MGS
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_EQ(m->size(), 1u);
  EXPECT_EQ((*m)[0].by, "n5");
  // n3 has a problem: it learns the mute by its next refresh (6 intervals of 0.5 s).
  auto learnt = c_.run_until([&] { return health_[3]->known_mutes().size() == 1; }, 5s);
  ASSERT_TRUE(learnt.has_value());
  EXPECT_LE(*learnt, 3100ms);
  std::vector<Problem> mine{unhealthy_peer(4)};
  auto states = apply_mutes(mine, health_[3]->known_mutes(), now + 1000);
  EXPECT_TRUE(mine[0].muted);
  // n4 has none: it asked nothing.
  c_.run_for(4s);
  EXPECT_TRUE(health_[4]->known_mutes().empty());
  // A clear of what is not muted says so; a clear of the mute empties the list everywhere.
  MuteReq other{MuteOp::kClear, HealthMute{"LOSSY", "", 0, 0, false, 0, "n5"}};
  EXPECT_EQ(health_[6]->mutes(other, 1s).status().code(), Code::kNotFound);
  MuteReq clear{MuteOp::kClear, HealthMute{"UNHEALTHY", "10.0.0.4@tcp", 0, 0, false, 0, "n6"}};
  auto cleared = health_[6]->mutes(clear, 1s);
  ASSERT_TRUE(cleared.ok()) << cleared.status().to_string();
  EXPECT_TRUE(cleared->empty());
  ASSERT_TRUE(c_.run_until([&] { return health_[3]->known_mutes().empty(); }, 5s).has_value());
  // A TTL of 2 s: listed, then gone after 2 s.
  const int64_t t = c_.clock().wall_now().time_since_epoch().count() / 1000000;
  MuteReq brief{MuteOp::kSet, HealthMute{"UNHEALTHY", "", t, t + 2000, true, 1, "n5"}};
  ASSERT_TRUE(health_[5]->mutes(brief, 1s).ok());
  EXPECT_EQ(health_[2]->mutes(MuteReq{}, 1s)->size(), 1u);
  c_.run_for(2100ms);
  EXPECT_TRUE(health_[2]->mutes(MuteReq{}, 1s)->empty());
  // A TTL already over is refused.
  EXPECT_EQ(health_[5]->mutes(brief, 1s).status().code(), Code::kInvalidArgument);
}

// A restarted MGS has an empty board; a node whose list is not empty sends it again within
// 6 intervals (3 s), so the new MGS learns it without anyone asking.
TEST_F(InProcessClusterHealthTest, ARestartedMgsLearnsTheListsAgainWithinTheirRefresh) {
  health_[5]->set_local({unhealthy_peer(3)});
  ASSERT_TRUE(c_.run_until([&] { return on_board("n5").size() == 1; }, 5s));
  c_.kill("n2");
  start(2);
  auto back = c_.run_until([&] { return on_board("n5").size() == 1; }, 10s);
  ASSERT_TRUE(back.has_value());
  EXPECT_LE(*back, 3100ms);
}

// A node that dies holding a list: the MGS drops its list when it declares it dead, not
// after the three refreshes a silent node's list is kept (9 s).
TEST_F(InProcessClusterHealthTest, ADeadNodesListLeavesWithItsDeath) {
  health_[4]->set_local({unhealthy_peer(3)});
  ASSERT_TRUE(c_.run_until([&] { return on_board("n4").size() == 1; }, 5s));
  c_.kill("n4");
  auto gone = c_.run_until([&] { return on_board("n4").empty(); }, 15s);
  ASSERT_TRUE(gone.has_value());
  EXPECT_EQ(m_.state_in(2, "n4"), "dead");
  EXPECT_LE(*gone, 2400ms);  // its dead time, as the membership tests have it
}

}  // namespace
}  // namespace pfsnet
