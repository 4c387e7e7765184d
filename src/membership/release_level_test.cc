#include "membership/release_level.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace pfsnet {
namespace {

std::vector<NodeLevel> table() {
  return {{1, "mgs", NodeState::kUp, 2, "r2"},
          {2, "old-server", NodeState::kUp, 1, ""},
          {3, "new-client", NodeState::kUp, 2, "r2"},
          {4, "old-client", NodeState::kDead, 1, ""},
          {5, "quiet", NodeState::kSuspect, 0, ""}};
}

TEST(ReleaseLevelTest, ACheckListsEveryNodeBelowTheTargetAndRefusesNothing) {
  UpgradeRep r = decide_level(UpgradeReq{}, 1, 2, table());
  EXPECT_EQ(r.level, 1);
  EXPECT_EQ(r.target, 2);  // 0 asks for the latest the MGS speaks
  EXPECT_EQ(r.total, 5u);
  EXPECT_EQ(r.below, 3u);  // level 1 up and dead, and one not known
  ASSERT_EQ(r.nodes.size(), 3u);
  EXPECT_EQ(r.nodes[0].name, "old-server");
  EXPECT_EQ(r.nodes[1].name, "old-client");
  EXPECT_EQ(r.nodes[2].name, "quiet");
  EXPECT_EQ(r.refusal, "");
  EXPECT_FALSE(r.committed);
}

TEST(ReleaseLevelTest, ACommitIsRefusedWhileALiveNodeIsBelowOrNotKnownUnlessForced) {
  UpgradeReq q{.commit = true, .level = 2, .force = false};
  UpgradeRep r = decide_level(q, 1, 2, table());
  EXPECT_NE(r.refusal.find("2 node(s) not dead are below level 2"), std::string::npos) << r.refusal;
  EXPECT_NE(r.refusal.find("old-server, quiet"), std::string::npos) << r.refusal;
  EXPECT_EQ(r.refusal.find("old-client"), std::string::npos) << "a dead node holds nothing back";
  q.force = true;
  EXPECT_EQ(decide_level(q, 1, 2, table()).refusal, "");
  // Once the live ones run level 2, the dead one does not hold it back.
  std::vector<NodeLevel> t = table();
  t[1].level = 2;
  t[4].level = 2;
  q.force = false;
  r = decide_level(q, 1, 2, t);
  EXPECT_EQ(r.refusal, "");
  EXPECT_EQ(r.below, 1u);
}

TEST(ReleaseLevelTest, ALevelIsNeverLoweredNorRaisedAboveTheMgsRelease) {
  UpgradeRep r = decide_level(UpgradeReq{.commit = true, .level = 1}, 2, 2, {});
  EXPECT_NE(r.refusal.find("never lowered"), std::string::npos) << r.refusal;
  r = decide_level(UpgradeReq{.commit = true, .level = 3}, 1, 2, {});
  EXPECT_NE(r.refusal.find("up to 2, not 3"), std::string::npos) << r.refusal;
  r = decide_level(UpgradeReq{.commit = false, .level = 3}, 1, 2, {});
  EXPECT_NE(r.refusal, "") << "a check of a level the MGS cannot keep says so too";
  // A commit to the level in force is no change and no refusal.
  r = decide_level(UpgradeReq{.commit = true, .level = 2}, 2, 2, table());
  EXPECT_EQ(r.refusal, "");
}

TEST(ReleaseLevelTest, FeaturesAreThoseAboveTheLevelUpToTheTarget) {
  ASSERT_FALSE(level_features().empty());
  EXPECT_EQ(level_features().back().level, kReleaseLevel);
  auto f = features_between(1, 2);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].name, "wire_v1_refused");
  EXPECT_TRUE(features_between(2, 2).empty());
  EXPECT_TRUE(features_between(2, 1).empty());
}

TEST(ReleaseLevelTest, TheRecordRoundTripsAndAnythingElseIsRefused) {
  LevelRecord r{2, 1765000000123, "n2 (127.0.0.2@tcp)"};
  std::string text = encode_level_record(r);
  auto back = decode_level_record(text);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(*back, r);
  for (const std::string& bad : std::vector<std::string>{
           "", text.substr(0, text.size() - 1), "format pfsnet-release-level 2\n",
           text + "level 3\n",
           std::string("format pfsnet-release-level 1\nlevel 0\nset_unix_ms 1\nby x\n"),
           std::string("format pfsnet-release-level 1\nlevel 70000\nset_unix_ms 1\nby x\n"),
           std::string("format pfsnet-release-level 1\nlevel 2\nset_unix_ms -1\nby x\n"),
           std::string("format pfsnet-release-level 1\nlevel 2\nby x\n")})
    EXPECT_FALSE(decode_level_record(bad).ok()) << bad;
}

TEST(ReleaseLevelTest, TheFileIsLevelOneWhenAbsentAndWrittenWhole) {
  char tmpl[] = "/tmp/pfsnet_level_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl, path = dir + "/release_level";
  auto none = read_level_file(path);
  ASSERT_TRUE(none.ok()) << none.status().to_string();
  EXPECT_EQ(none->level, 1);
  ASSERT_TRUE(write_level_file(path, LevelRecord{2, 5, "me"}).ok());
  auto back = read_level_file(path);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->level, 2);
  EXPECT_EQ(back->by, "me");
  EXPECT_NE(access((path + ".new").c_str(), F_OK), 0) << "no temporary file is left";
  // A damaged file is an error naming it, not level 1.
  std::ofstream(path) << "level 9\n";
  auto bad = read_level_file(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(path), std::string::npos);
  // A directory that does not exist is made; one that cannot be (a file is in the way):
  // the write fails and says where.
  ASSERT_TRUE(write_level_file(dir + "/new/release_level", LevelRecord{2, 5, "me"}).ok());
  EXPECT_EQ(read_level_file(dir + "/new/release_level")->level, 2);
  Status st = write_level_file(path + "/release_level", LevelRecord{2, 5, "me"});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(path), std::string::npos) << st.message();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pfsnet
