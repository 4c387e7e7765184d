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
                        "rpc.max_rpcs_in_flight", "rpc.peer_rpcs_in_flight", "lnet.credits",
                        "lnet.peer_credits", "lnet.checksum", "health.slow_ops_s"})
    EXPECT_TRUE(runtime_key(k)) << k;
  for (const char* k : {"node.name", "lnet.transaction_timeout", "net.nid",
                        "membership.ping_miss_limit", "statsx.foo", "lnet.credits_x"})
    EXPECT_FALSE(runtime_key(k)) << k;
}

// Every key runtime_key() names takes effect when set: the in-force settings (what
// get() and the appliers see) change with it -- the list of run-time keys and what a change
// copies into force cannot drift apart unseen.
TEST(LiveConfigTest, EveryRuntimeKeyTakesEffectWhenSet) {
  const Config base = base_config();
  size_t tried = 0;
  for (const auto& [key, value] : config_entries(base)) {
    if (!runtime_key(key)) continue;
    std::vector<std::string> candidates;
    if (value == "true" || value == "false") {
      candidates = {value == "true" ? "false" : "true"};
    } else if (value.starts_with('{')) {
      candidates = {"{ \"198.18.0.2@tcp\" = 64 }"};
    } else if (value.starts_with('"')) {
      candidates = {"\"debug\"", "\"warn\"", "\"json\"", "\"fair\"", "\"x\""};
    } else if (value.find_first_of(".e") != std::string::npos) {
      candidates = {std::to_string(std::stod(value) * 2 + 1), std::to_string(std::stod(value) / 2)};
    } else {
      long long v = std::stoll(value);
      candidates = {std::to_string(v + 1), std::to_string(v - 1), std::to_string(v * 2)};
    }
    LiveConfig live(base);
    bool applied = false;
    for (const std::string& c : candidates) {
      auto r = live.set({key + "=" + c});
      if (!r.ok()) continue;  // out of the key's range: the next candidate
      ASSERT_EQ(r->changed.size(), 1u) << key;
      for (const auto& [k, v] : config_entries(live.get()))
        if (k == key) {
          EXPECT_NE(v, value) << key << " set to " << c << " but not in force";
        }
      applied = true;
      break;
    }
    EXPECT_TRUE(applied) << key << ": no candidate value was accepted";
    ++tried;
  }
  EXPECT_GE(tried, 10u);
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
  EXPECT_EQ(a.at_restart, (std::vector<std::string>{"node.name", "net.nid", "net.port",
                                                    "net.speed_mbit", "lnet.retry_count"}));
  Config now = live.get();
  EXPECT_EQ(now.lnet.credits, 256);
  EXPECT_EQ(now.node.name, "n1");
  EXPECT_EQ(now.lnet.retry_count, 2);
  EXPECT_EQ(now.nets.size(), 1u);
}

}  // namespace
}  // namespace pfsnet
