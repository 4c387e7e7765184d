#include "base/live_config.h"

#include <gtest/gtest.h>

namespace pfsnet {
namespace {

Config base_config() {
  auto c = parse_config(R"(
[node]
name = "n1"
[[net]]
nid = "127.0.0.2@tcp"
)",
                        "t.toml");
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return *c;
}

TEST(LiveConfigTest, RuntimeKeys) {
  for (const char* k : {"stats.maxBlockSize", "tune.auto", "node.log_level",
                        "rpc.max_rpcs_in_flight", "lnet.credits", "lnet.peer_credits"})
    EXPECT_TRUE(runtime_key(k)) << k;
  for (const char* k : {"node.name", "lnet.transaction_timeout", "net.nid",
                        "membership.ping_miss_limit", "statsx.foo", "lnet.credits_x"})
    EXPECT_FALSE(runtime_key(k)) << k;
}

TEST(LiveConfigTest, SetAppliesRuntimeKeysAndTellsAppliers) {
  LiveConfig live(base_config());
  std::vector<std::pair<int64_t, int64_t>> seen;  // (before, after) peer_credits
  live.on_apply([&](const Config& b, const Config& a) {
    seen.emplace_back(b.lnet.peer_credits, a.lnet.peer_credits);
  });
  auto r = live.set({"lnet.peer_credits=32", "stats.rpcPerfNumberSecondIntervals = 120"});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->changed.size(), 2u);
  EXPECT_EQ(r->changed[0], (ConfigChange{"lnet.peer_credits", "8", "32"}));
  EXPECT_EQ(r->changed[1], (ConfigChange{"stats.rpcPerfNumberSecondIntervals", "60", "120"}));
  EXPECT_TRUE(r->at_restart.empty());
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], std::make_pair(int64_t(8), int64_t(32)));
  EXPECT_EQ(live.get().lnet.peer_credits, 32);
  EXPECT_EQ(live.read([](const Config& c) { return c.stats.rpcPerfNumberSecondIntervals; }), 120);
}

TEST(LiveConfigTest, SetRefusesRestartKeysAndBadValuesChangingNothing) {
  LiveConfig live(base_config());
  int calls = 0;
  live.on_apply([&](const Config&, const Config&) { ++calls; });
  auto r = live.set({"lnet.peer_credits=32", "lnet.transaction_timeout=9"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'lnet.transaction_timeout' cannot change at run time"),
            std::string::npos)
      << r.status().message();
  r = live.set({"lnet.peer_credits=\"many\""});
  ASSERT_FALSE(r.ok());
  r = live.set({"no_such.key=1"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unknown key"), std::string::npos);
  r = live.set({});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(live.get().lnet.peer_credits, 8);
  EXPECT_EQ(live.get().lnet.transaction_timeout, 50);
}

TEST(LiveConfigTest, UpdateEditsLikeSet) {
  LiveConfig live(base_config());
  auto r = live.update([](Config& c) {
    c.rpc.max_rpcs_in_flight = 64;
    c.lnet.peer_credits = 64;
  });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->changed.size(), 2u);
  EXPECT_EQ(live.get().rpc.max_rpcs_in_flight, 64);
  r = live.update([](Config& c) { c.node.name = "other"; });
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(live.get().node.name, "n1");
}

TEST(LiveConfigTest, ReloadKeepsRestartKeysAndListsThem) {
  LiveConfig live(base_config());
  Config next = base_config();
  next.node.name = "renamed";
  next.lnet.credits = 256;
  next.lnet.retry_count = 5;
  next.nets.push_back({*Nid::parse("127.0.0.3@tcp1"), 7988});
  ConfigApplied a = live.reload(next);
  ASSERT_EQ(a.changed.size(), 1u);
  EXPECT_EQ(a.changed[0].key, "lnet.credits");
  EXPECT_EQ(a.at_restart,
            (std::vector<std::string>{"node.name", "net.nid", "net.port", "lnet.retry_count"}));
  Config now = live.get();
  EXPECT_EQ(now.lnet.credits, 256);
  EXPECT_EQ(now.node.name, "n1");
  EXPECT_EQ(now.lnet.retry_count, 2);
  EXPECT_EQ(now.nets.size(), 1u);
}

}  // namespace
}  // namespace pfsnet
