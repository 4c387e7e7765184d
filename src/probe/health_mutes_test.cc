#include "probe/health_mutes.h"

#include <gtest/gtest.h>

namespace pfsnet {
namespace {

Problem lossy(const std::string& subject) {
  return Problem{"path", subject, "LOSSY", "c1", 0, "3% lost", ""};
}

HealthMute mute(const std::string& cause, const std::string& subject, int64_t until,
                uint32_t matched, bool sticky = false) {
  return HealthMute{cause, subject, 1000, until, sticky, matched, "c1"};
}

TEST(HealthMutesTest, AMuteHidesItsCauseOrItsSubjectUntilItsTtl) {
  std::vector<Problem> list{lossy("a -> b"), lossy("a -> c"),
                            Problem{"node", "oss1", "SLOW_OPS", "oss1", 0, "", ""}};
  auto s = apply_mutes(list, {mute("LOSSY", "a -> b", 5000, 1)}, 2000);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_TRUE(s[0].hides);
  EXPECT_EQ(s[0].covers, 1u);
  EXPECT_TRUE(list[0].muted);
  EXPECT_FALSE(list[1].muted);  // another subject
  EXPECT_FALSE(list[2].muted);  // another cause
  // A cause-wide mute covers every subject of it; at its TTL it is gone.
  for (Problem& p : list) p.muted = false;
  s = apply_mutes(list, {mute("LOSSY", "", 5000, 2)}, 4999);
  EXPECT_TRUE(list[0].muted && list[1].muted && !list[2].muted);
  for (Problem& p : list) p.muted = false;
  s = apply_mutes(list, {mute("LOSSY", "", 5000, 2)}, 5000);
  EXPECT_TRUE(s.empty());
  EXPECT_FALSE(list[0].muted || list[1].muted);
}

TEST(HealthMutesTest, AProblemThatGrowsWorseComesBackUnlessTheMuteIsSticky) {
  std::vector<Problem> list{lossy("a -> b"), lossy("a -> c"), lossy("a -> d")};
  auto s = apply_mutes(list, {mute("LOSSY", "", 9000, 2)}, 2000);  // 2 when muted, 3 now
  ASSERT_EQ(s.size(), 1u);
  EXPECT_FALSE(s[0].hides);
  EXPECT_EQ(s[0].reason, "grew worse: 3 LOSSY listed, 2 when muted");
  for (const Problem& p : list) EXPECT_FALSE(p.muted);
  s = apply_mutes(list, {mute("LOSSY", "", 9000, 2, true)}, 2000);
  EXPECT_TRUE(s[0].hides);
  for (const Problem& p : list) EXPECT_TRUE(p.muted);
  // Fewer than when muted: still hidden.
  list.pop_back();
  list.pop_back();
  for (Problem& p : list) p.muted = false;
  s = apply_mutes(list, {mute("LOSSY", "", 9000, 2)}, 2000);
  EXPECT_TRUE(s[0].hides && list[0].muted);
}

TEST(HealthMutesTest, TheBoardReplacesRefusesAndForgetsExpiredMutes) {
  MuteBoard b;
  EXPECT_TRUE(b.set(mute("LOSSY", "", 5000, 1), 2000).ok());
  EXPECT_TRUE(b.set(mute("LOSSY", "", 8000, 3), 2000).ok());  // the same target: replaced
  EXPECT_TRUE(b.set(mute("SLOW", "x", 3000, 1), 2000).ok());
  auto l = b.list(2000);
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(l[0].until_unix_ms, 8000);
  EXPECT_EQ(b.set(mute("SLOW", "x", 1500, 1), 2000).code(), Code::kInvalidArgument);  // over
  EXPECT_EQ(b.set(mute("", "", 9000, 1), 2000).code(), Code::kInvalidArgument);
  EXPECT_EQ(b.list(3000).size(), 1u);  // SLOW's TTL ended
  EXPECT_FALSE(b.clear("SLOW", "x"));
  EXPECT_TRUE(b.clear("LOSSY", ""));
  EXPECT_TRUE(b.list(3000).empty());
  for (size_t i = 0; i < kMaxHealthMutes; ++i)
    ASSERT_TRUE(b.set(mute("LOSSY", std::to_string(i), 9000, 1), 3000).ok());
  EXPECT_EQ(b.set(mute("LOSSY", "one more", 9000, 1), 3000).code(), Code::kRejected);
}

TEST(HealthMutesTest, TheMessagesRoundTripAndMalformedOnesAreRefused) {
  MuteReq q{MuteOp::kSet, mute("SLOW_OPS", "oss1", 9000, 2, true)};
  auto d = decode_mute_req(encode_mute_req(q).span());
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(*d, q);
  MuteList l{{mute("LOSSY", "", 5000, 1), mute("SLOW", "x", 6000, 0)}};
  auto dl = decode_mute_list(encode_mute_list(l).span());
  ASSERT_TRUE(dl.ok());
  EXPECT_EQ(*dl, l);
  Buffer b = encode_mute_req(q);
  std::vector<uint8_t> bad(b.span().begin(), b.span().end());
  bad[0] = 7;  // no such op
  EXPECT_EQ(decode_mute_req(bad).status().code(), Code::kProtocol);
  bad[0] = 1;
  bad.push_back(0);  // a byte too many
  EXPECT_EQ(decode_mute_req(bad).status().code(), Code::kProtocol);
  MuteReq list{MuteOp::kList, HealthMute{}};  // a list names nothing
  EXPECT_TRUE(decode_mute_req(encode_mute_req(list).span()).ok());
  MuteReq no_cause{MuteOp::kSet, HealthMute{}};
  EXPECT_FALSE(decode_mute_req(encode_mute_req(no_cause).span()).ok());
  EXPECT_FALSE(decode_mute_list(encode_mute_list(MuteList{{HealthMute{}}}).span()).ok());
}

}  // namespace
}  // namespace pfsnet
