// The health view on the in-process cluster (rpc/sim_cluster.h, membership/sim_members.h):
// an MGS (n2), two servers (n3, n4) and two clients (n5, n6) with the real membership and
// cluster-health services over the in-memory transport, on manual time. What n5's
// `pfsnet health` list is made of -- the MGS's table, every node's own list, the mutes --
// judged by the rules: a dead server named once, the peer NI views its death explains left
// out, another node's problem merged and muted, an MGS gone listed first. The asks run one
// after another on the test's thread (the one that drives the cluster).
#include <gtest/gtest.h>

#include "health/view.h"
#include "probe/cluster_health_sim.h"

namespace pfsnet {
namespace {

using namespace std::chrono_literals;

class InProcessHealthViewTest : public ClusterHealthSimTest {
 protected:
  InProcessHealthViewTest() {
    // The MGS (n2) judges HEALTH_LIST with a view of its own, unless the test makes it an
    // MGS of a release before it.
    also_ = [this](int host, SimNode& n, const Config&, MembershipService& ms,
                   ClusterHealthService& ch) {
      if (host != 2 || !mgs_judges_) return;
      serve_health_list(n.rpc, [this, &n, &ms, &ch] { return view(n, cfg2_, ms, &ch); });
    };
  }
  // A node's view, its asks run in turn on this thread (the one that drives the cluster).
  HealthView view(SimNode& n, LiveConfig& cfg, MembershipService& ms, ClusterHealthService* ch) {
    HealthSources s{n.net,   n.rpc,   stats_,  cfg, c_.clock(), &ms,
                    nullptr, nullptr, nullptr, ch,  nullptr};
    HealthFetchers f = HealthView::fetchers_of(s);
    f.run = [](const std::vector<std::function<void()>>& asks) {
      for (const auto& a : asks) a();
    };
    if (!ask_mgs_to_judge_) f.judged = nullptr;
    return HealthView(s, std::move(f));
  }
  // n5's list.
  HealthList list() { return view(*c_.find("n5"), cfg_, m_.at(5), health_[5]).list(1s); }
  bool on_board(const std::string& node) {
    auto all = health_[2]->cluster(1s);
    if (!all.ok()) return false;
    for (const NodeProblems& np : *all)
      if (np.node == node) return true;
    return false;
  }
  static std::string line(const Problem& p) {
    return p.cause + " " + p.subject + " by " + p.seen_by;
  }

  RpcStats stats_{StatsConfig{}, c_.clock(), false};
  LiveConfig cfg_{m_.config(5)}, cfg2_{m_.config(2)};
  bool mgs_judges_ = true, ask_mgs_to_judge_ = true;
};

// An MGS of a release before HEALTH_LIST: it has no handler for it.
class InProcessOldMgsHealthViewTest : public InProcessHealthViewTest {
 protected:
  InProcessOldMgsHealthViewTest() { mgs_judges_ = false; }
};

TEST_F(InProcessHealthViewTest, TheListIsTheRulesOverWhatTheMgsHoldsAndEndsWithIt) {
  // n3 finds its settings wrong; n6 cannot reach n4's NI.
  health_[3]->set_local(
      {Problem{"settings", "n3", "SETTINGS", "n3", 0, "rpcs below the BDP", "rpcs_below_bdp"}});
  health_[6]->set_local({Problem{"peer_ni", SimMembers::nid(4).to_string(), "UNHEALTHY", "n6", 0,
                                 "PEER_NI_UNREACHABLE", ""}});
  ASSERT_TRUE(c_.run_until([&] { return on_board("n3") && on_board("n6"); }, 5s));
  HealthList h = list();
  EXPECT_TRUE(h.mgs_ok);
  EXPECT_TRUE(h.judged_at_mgs);  // one question (HEALTH_LIST), judged where the rows are
  ASSERT_TRUE(h.table);
  EXPECT_EQ(h.table->nodes, 5u);
  EXPECT_EQ(h.table->up, 5u);
  std::vector<std::string> lines;
  for (const Problem& p : h.problems) lines.push_back(line(p));
  EXPECT_EQ(lines, (std::vector<std::string>{"UNHEALTHY 10.0.0.4@tcp by n6", "SETTINGS n3 by n3"}));

  // n4 dies: the MGS's verdict names it, and n6's view of its NI follows from it.
  c_.kill("n4");
  ASSERT_TRUE(c_.run_until([&] { return m_.state_in(2, "n4") == "dead"; }, 15s));
  h = list();
  lines.clear();
  for (const Problem& p : h.problems) lines.push_back(line(p));
  ASSERT_FALSE(h.problems.empty());
  EXPECT_EQ(h.problems[0].cause, "DEAD");
  EXPECT_EQ(h.problems[0].subject, "n4");
  EXPECT_EQ(std::count_if(h.problems.begin(), h.problems.end(),
                          [](const Problem& p) { return p.cause == "UNHEALTHY"; }),
            0)
      << "the dead node's NI: named by its node's death";
  EXPECT_NE(std::find(lines.begin(), lines.end(), "SETTINGS n3 by n3"), lines.end());
  // Judged at the MGS as n5 would judge it from the four answers.
  ask_mgs_to_judge_ = false;
  HealthList here = list();
  ask_mgs_to_judge_ = true;
  EXPECT_FALSE(here.judged_at_mgs);
  EXPECT_EQ(here.problems, h.problems);

  // Muted from n6: n5's list marks it, with what the mute covers.
  const int64_t now = unix_ms(c_.clock().wall_now());
  MuteReq mute{MuteOp::kSet, HealthMute{"SETTINGS", "n3", now, now + 60000, false, 1, "n6"}};
  ASSERT_TRUE(health_[6]->mutes(mute, 1s).ok());
  h = list();
  auto settings = std::find_if(h.problems.begin(), h.problems.end(),
                               [](const Problem& p) { return p.cause == "SETTINGS"; });
  ASSERT_NE(settings, h.problems.end());
  EXPECT_TRUE(settings->muted);
  ASSERT_EQ(h.mutes.size(), 1u);
  EXPECT_EQ(h.mutes[0].covers, 1u);

  // The MGS gone: the list starts with it, and says what it still knows (n5's own: none).
  c_.kill("n2");
  h = list();
  EXPECT_FALSE(h.mgs_ok);
  ASSERT_FALSE(h.problems.empty());
  EXPECT_EQ(h.problems[0].cause, "UNREACHABLE");
  EXPECT_EQ(h.problems[0].seen_by, "n5");
  EXPECT_TRUE(h.mutes.empty());
}

}  // namespace
}  // namespace pfsnet

namespace pfsnet {
namespace {

TEST_F(InProcessOldMgsHealthViewTest, AnMgsThatCannotJudgeIsAskedItsFourQuestions) {
  // n5's own finding goes with its question; the MGS says it knows no HEALTH_LIST.
  health_[3]->set_local(
      {Problem{"settings", "n3", "SETTINGS", "n3", 0, "rpcs below the BDP", "rpcs_below_bdp"}});
  ASSERT_TRUE(c_.run_until([&] { return on_board("n3"); }, 5s));
  c_.kill("n4");
  ASSERT_TRUE(c_.run_until([&] { return m_.state_in(2, "n4") == "dead"; }, 15s));
  HealthList h = list();
  EXPECT_TRUE(h.mgs_ok);
  EXPECT_FALSE(h.judged_at_mgs);  // judged here, from the four answers
  std::vector<std::string> lines;
  for (const Problem& p : h.problems) lines.push_back(line(p));
  EXPECT_EQ(lines, (std::vector<std::string>{"DEAD n4 by n5", "SETTINGS n3 by n3"}));
}

}  // namespace
}  // namespace pfsnet
