// The health view (health/view.h): its four questions to the MGS asked at once, each within
// the one deadline, and what it makes of the answers -- the table's dead node, another node's
// list merged and muted, an MGS that cannot be asked listed first. The node's own parts are
// the RPC tests' two nodes over the in-memory transport (rpc/rpc_test_fixture.h); the MGS's
// answers are the test's.
#include "health/view.h"

#include <gtest/gtest.h>

#include <atomic>

#include "base/mutex.h"
#include "rpc/rpc_test_fixture.h"

namespace pfsnet::rpc_test {
namespace {

class HealthViewTest : public RpcTest {
 protected:
  static Config config() {
    Config c;
    c.node.name = "c1";
    return c;
  }
  HealthSources sources() { return HealthSources{client_.net, client_.rpc, stats_, cfg_, clock_}; }
  // Each fetch waits until all four have started (at most 10 s): a view that asked one at a
  // time would see every fetch but the last time out waiting.
  void arrive_and_wait(Duration given) {
    MutexLock lk(mu_);
    given_.push_back(given);
    ++arrived_;
    cv_.notify_all();
    all_met_ = cv_.wait_for(lk, std::chrono::seconds(10), [&]() REQUIRES(mu_) {
      return arrived_ == 4;
    }) && all_met_;
  }
  HealthFetchers fetchers(Status table_status) {
    HealthFetchers f;
    f.table = [this, table_status](Duration d) -> Result<StatusTable> {
      arrive_and_wait(d);
      if (!table_status.ok()) return table_status;
      StatusTable t;
      t.mgs = nid("198.18.0.9@tcp");
      StatusNode dead;
      dead.name = "s9";
      dead.state = NodeState::kDead;
      dead.nids = {nid("198.18.0.19@tcp")};
      t.nodes = {dead};
      return t;
    };
    f.mesh = [this](Duration d) -> Result<std::vector<MeshRow>> {
      arrive_and_wait(d);
      return std::vector<MeshRow>{};
    };
    f.others = [this](Duration d) -> Result<std::vector<NodeProblems>> {
      arrive_and_wait(d);
      NodeProblems np;
      np.node = "c7";
      np.problems = {Problem{"settings", "c7", "SETTINGS", "c7", 1000, "rpcs below the BDP",
                             "rpcs_below_bdp"}};
      return std::vector<NodeProblems>{np};
    };
    f.mutes = [this](Duration d) -> Result<std::vector<HealthMute>> {
      arrive_and_wait(d);
      HealthMute m;
      m.cause = "SETTINGS";
      m.subject = "c7";
      m.matched = 1;  // as many as when it was set: it hides them
      m.until_unix_ms = unix_ms(clock_.wall_now()) + 3'600'000;
      return std::vector<HealthMute>{m};
    };
    return f;
  }

  RpcStats stats_{StatsConfig{}, clock_, false};
  LiveConfig cfg_{config()};
  Mutex mu_;
  CondVar cv_;
  int arrived_ GUARDED_BY(mu_) = 0;
  bool all_met_ GUARDED_BY(mu_) = true;
  std::vector<Duration> given_ GUARDED_BY(mu_);
};

TEST_F(HealthViewTest, AsksTheMgsItsFourQuestionsAtOnceUnderOneDeadline) {
  HealthView view(sources(), fetchers(Status::Ok()));
  HealthList h = view.list(std::chrono::seconds(5));
  {
    MutexLock lk(mu_);
    EXPECT_TRUE(all_met_) << "the fetches did not run at once";
    ASSERT_EQ(given_.size(), 4u);
    for (Duration d : given_) EXPECT_EQ(d, std::chrono::seconds(5));
  }
  EXPECT_TRUE(h.mgs_ok);
  EXPECT_EQ(h.node, "c1");
  ASSERT_TRUE(h.table);
  ASSERT_EQ(h.problems.size(), 2u);
  EXPECT_EQ(h.problems[0].cause, "DEAD");  // the table's, severest first
  EXPECT_EQ(h.problems[0].subject, "s9");
  EXPECT_EQ(h.problems[1].cause, "SETTINGS");  // another node's own, merged
  EXPECT_EQ(h.problems[1].seen_by, "c7");
  EXPECT_TRUE(h.problems[1].muted) << "the cluster's mute covers it";
  ASSERT_EQ(h.mutes.size(), 1u);
  EXPECT_EQ(h.mutes[0].covers, 1u);
  EXPECT_TRUE(h.mutes_error.empty());
}

TEST_F(HealthViewTest, AnMgsWhoseTableCannotBeHadIsListedFirstAndTheRestStays) {
  HealthView view(sources(), fetchers(Status(Code::kTimeout, "no answer within 5 s")));
  HealthList h = view.list(std::chrono::seconds(5));
  EXPECT_FALSE(h.mgs_ok);
  EXPECT_FALSE(h.table);
  ASSERT_EQ(h.problems.size(), 2u);
  EXPECT_EQ(h.problems[0].cause, "UNREACHABLE");
  EXPECT_EQ(h.problems[0].evidence,
            "its table could not be had, so dead nodes are not listed: no answer within 5 s");
  EXPECT_EQ(h.problems[1].cause, "SETTINGS");
  EXPECT_FALSE(h.problems[1].muted) << "without the MGS's word, its mutes are not applied";
  EXPECT_TRUE(h.mutes.empty());
}

// HEALTH_LIST: one question where the MGS can judge; four where it is of a release before
// it (kNotFound); none more where it could not be asked at all (one deadline, not two).
TEST_F(HealthViewTest, TheMgsJudgesWhereItCanAndAnOlderOneIsAskedTheFourQuestions) {
  Result<HealthListReply> answer = Status(Code::kNotFound, "no handler for message type 44");
  int asked = 0;
  HealthFetchers f = fetchers(Status::Ok());
  f.judged = [&](const HealthReport& mine, Duration d) -> Result<HealthListReply> {
    ++asked;
    EXPECT_EQ(mine.node, "c1");
    EXPECT_EQ(d, std::chrono::seconds(5));
    return answer;
  };
  HealthView view(sources(), f);
  HealthList h = view.list(std::chrono::seconds(5));
  EXPECT_EQ(asked, 1);
  EXPECT_FALSE(h.judged_at_mgs);
  EXPECT_TRUE(h.mgs_ok);
  ASSERT_EQ(h.problems.size(), 2u);  // as the four answers make it
  EXPECT_EQ(h.problems[0].cause, "DEAD");
  {
    MutexLock lk(mu_);
    EXPECT_EQ(given_.size(), 4u);
  }

  answer = Status(Code::kTimeout, "asking MGS 198.18.0.9@tcp for the list: no answer within 5 s");
  h = view.list(std::chrono::seconds(5));
  EXPECT_EQ(asked, 2);
  {
    MutexLock lk(mu_);
    EXPECT_EQ(given_.size(), 4u) << "the four were asked after an MGS that did not answer";
  }
  EXPECT_FALSE(h.mgs_ok);
  ASSERT_FALSE(h.problems.empty());
  EXPECT_EQ(h.problems[0].cause, "UNREACHABLE");
  EXPECT_NE(h.problems[0].evidence.find("no answer within 5 s"), std::string::npos);

  HealthListReply judged;
  judged.has_table = true;
  judged.mgs = nid("198.18.0.9@tcp");
  judged.nodes = 7;
  judged.nodes_up = 6;
  judged.problems = {Problem{"node", "s9", "DEAD", "c1", 1000, "last heard 9.0 s ago", ""}};
  judged.left_off = 3;
  answer = judged;
  h = view.list(std::chrono::seconds(5));
  EXPECT_EQ(asked, 3);
  EXPECT_TRUE(h.judged_at_mgs);
  EXPECT_TRUE(h.mgs_ok);
  EXPECT_EQ(h.problems, judged.problems);
  EXPECT_EQ(h.left_off, 3u);
  ASSERT_TRUE(h.table);
  EXPECT_EQ(h.table->nodes, 7u);
  EXPECT_EQ(h.table->up, 6u);
}

// No MGS (no fetchers): the node's own findings alone, judged by the same rules, as /metrics
// shows them.
TEST_F(HealthViewTest, WithoutAnMgsTheListIsTheNodesOwnAndTheScrapeIsTheSame) {
  HealthView view(sources(), HealthFetchers{});
  HealthList h = view.list(std::chrono::seconds(5));
  EXPECT_FALSE(h.mgs_ok);
  EXPECT_EQ(h.problems, view.scrape(client_.net.nis(), client_.net.peers()));
  EXPECT_EQ(h.problems, view.own_findings());
}

}  // namespace
}  // namespace pfsnet::rpc_test
