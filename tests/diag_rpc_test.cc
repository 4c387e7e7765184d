// RPC statistics end to end: a known load between real daemons, then `pfsnet diag rpc
// --json` must show exactly those counts in the right node, size ranges and message type.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cluster.h"

namespace pfsnet::testing {
namespace {

using nlohmann::json;

TEST(DiagRpcTest, KnownLoadShowsExactCounts) {
  TwoDaemons c;
  ASSERT_TRUE(c.ready());
  Daemon &a = c.a, &b = c.b;

  // size = sent + received frames (64-byte header each way): 128, 2128, 200128 bytes.
  struct Load {
    int count, bulk;
    uint64_t low, high;
  } loads[] = {{50, 0, 65, 128}, {20, 1000, 2049, 4096}, {10, 100000, 131073, 262144}};
  double max_rtt_ms = 0;
  for (const Load& l : loads) {
    auto [rc, out] = run({PFSNET_BIN, "--socket", a.socket(), "ping", b.nid().to_string(), "-c",
                          std::to_string(l.count), "-s", std::to_string(l.bulk), "--json"});
    ASSERT_EQ(rc, 0) << out;
    max_rtt_ms = std::max(max_rtt_ms, last_json_line(out)["rtt_ms"]["max"].get<double>());
  }

  json ra = diag_until(a.socket(), [](const json& r) {
    return !r["nodes"].empty() && total(r["nodes"][0]["stats"]["latency_tcp"]) >= 80;
  });
  ASSERT_EQ(ra["nodes"].size(), 1u) << ra.dump();
  const json& node = ra["nodes"][0];
  EXPECT_EQ(node["nid"], b.nid().to_string());
  for (const char* s : {"channel_wait", "send_time_tcp", "receive_time_tcp", "latency_tcp"})
    EXPECT_EQ(total(node["stats"][s]), 80) << s;
  EXPECT_FALSE(node["stats"].contains("latency_verbs"));  // no verbs NI configured
  // Latencies positive and below the measured round trips.
  for (const json& i : node["stats"]["latency_tcp"]["second"]) {
    if (i["count"] == 0) continue;
    EXPECT_GT(i["max_ms"].get<double>(), 0);
    EXPECT_LE(i["max_ms"].get<double>(), max_rtt_ms + 0.001);
  }
  ASSERT_EQ(ra["sizes"].size(), 3u) << ra["sizes"].dump();
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(ra["sizes"][k]["low"], loads[k].low);
    EXPECT_EQ(ra["sizes"][k]["high"], loads[k].high);
    EXPECT_EQ(total(ra["sizes"][k]["latency"]), loads[k].count);
  }
  EXPECT_TRUE(ra["messages"].empty());  // A executed nothing
  EXPECT_EQ(ra["dropped"]["stat"], 0);

  json rb = diag_until(b.socket(), [](const json& r) {
    return !r["messages"].empty() && total(r["messages"][0]["execution"]) >= 80;
  });
  ASSERT_EQ(rb["messages"].size(), 1u);
  EXPECT_EQ(rb["messages"][0]["type"], "PING");
  EXPECT_EQ(total(rb["messages"][0]["execution"]), 80);
  EXPECT_TRUE(rb["nodes"].empty());  // B sent no requests

  // Selections: one node, one granularity, -Y.
  auto [rc, one] = run({PFSNET_BIN, "--socket", a.socket(), "diag", "rpc",
                        "node=" + b.nid().to_string(), "5s", "--json"});
  ASSERT_EQ(rc, 0);
  json j = last_json_line(one);
  EXPECT_FALSE(j.contains("sizes"));
  EXPECT_FALSE(j["nodes"][0]["stats"]["latency_tcp"].contains("minute"));
  EXPECT_LE(j["nodes"][0]["stats"]["latency_tcp"]["second"].size(), 5u);
  auto [rc2, y] = run({PFSNET_BIN, "--socket", a.socket(), "diag", "rpc", "size", "-Y"});
  ASSERT_EQ(rc2, 0);
  EXPECT_EQ(y.rfind("pfsnet:diag_rpc:HEADER:", 0), 0u) << y;
  EXPECT_NE(y.find(":size:65-128::latency:second:"), std::string::npos) << y;
  auto [rc3, bad] = run({PFSNET_BIN, "--socket", a.socket(), "diag", "rpc", "sizes"});
  EXPECT_EQ(rc3, 2);
  EXPECT_NE(bad.find("unknown statistics 'sizes'"), std::string::npos) << bad;
}

TEST(DiagRpcTest, PingModesAreMessageTypesOfTheirOwn) {
  TwoDaemons c;
  ASSERT_TRUE(c.ready());
  Daemon &a = c.a, &b = c.b;
  for (auto [mode, count] : {std::pair{"echo", "2"}, {"write", "3"}, {"read", "4"}}) {
    auto [rc, out] = run({PFSNET_BIN, "--socket", a.socket(), "ping", b.nid().to_string(), "-c",
                          count, "-s", "70000", "--mode", mode, "--json"});
    ASSERT_EQ(rc, 0) << out;
    EXPECT_EQ(last_json_line(out)["ok"], std::stoi(count)) << mode;
  }
  json r = diag_until(b.socket(), [](const json& r) {
    int64_t n = 0;
    for (const json& m : r["messages"]) n += total(m["execution"]);
    return n >= 9;
  });
  std::map<std::string, int64_t> by_type;
  for (const json& m : r["messages"]) by_type[m["type"]] = total(m["execution"]);
  EXPECT_EQ(by_type,
            (std::map<std::string, int64_t>{{"BRW_READ", 4}, {"BRW_WRITE", 3}, {"PING", 2}}));
  auto [rc, bad] =
      run({PFSNET_BIN, "--socket", a.socket(), "ping", b.nid().to_string(), "--mode", "rw"});
  EXPECT_NE(rc, 0);
}

TEST(DiagRpcTest, HumanOutputs) {
  TwoDaemons c;
  ASSERT_TRUE(c.ready());
  Daemon &a = c.a, &b = c.b;
  ASSERT_EQ(run({PFSNET_BIN, "--socket", a.socket(), "ping", b.nid().to_string(), "-c", "5"}).first,
            0);
  // The five may fall into two seconds (a slow build): wait until all are processed.
  diag_until(a.socket(), [](const json& r) {
    return !r["nodes"].empty() && total(r["nodes"][0]["stats"]["latency_tcp"]) >= 5;
  });
  auto [rc, out] = run({PFSNET_BIN, "--socket", a.socket(), "diag", "rpc", "all", "10s"});
  ASSERT_EQ(rc, 0) << out;
  for (const char* want : {"RPC statistics: average, minimum and maximum in milliseconds",
                           "raw records dropped: stat 0, exec 0", "channel_wait", "latency_tcp",
                           "size range 65-128", "cnt = "})
    EXPECT_NE(out.find(want), std::string::npos) << want << "\n" << out;
  // The counts of latency_tcp's seconds add up to the five pings.
  {
    size_t at = out.find("latency_tcp"), end = out.find("size range", at);
    int sum = 0;
    for (size_t p = out.find("cnt = ", at); p < end; p = out.find("cnt = ", p + 1))
      sum += std::stoi(out.substr(p + 6));
    EXPECT_EQ(sum, 5) << out;
  }
  EXPECT_LT(out.find("channel_wait"), out.find("send_time_tcp"));  // GPFS order
  auto [rc2, show] = run({PFSNET_BIN, "--socket", a.socket(), "config", "show"});
  ASSERT_EQ(rc2, 0);
  EXPECT_NE(show.find("stats.maxBlockSize"), std::string::npos);
  EXPECT_NE(show.find("at run time"), std::string::npos);
  EXPECT_NE(show.find("at restart"), std::string::npos);
  auto [rc3, set] = run(
      {PFSNET_BIN, "--socket", a.socket(), "config", "set", "stats.rpcPerfNumberHourIntervals=48"});
  ASSERT_EQ(rc3, 0);
  EXPECT_NE(set.find("stats.rpcPerfNumberHourIntervals: 24 -> 48"), std::string::npos) << set;
  for (const std::string& text : {out, show, set}) {
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) EXPECT_LE(line.size(), 100u) << line;
  }
}

TEST(DiagRpcTest, ConfigSetResizesRingsAtRunTime) {
  TwoDaemons c;
  ASSERT_TRUE(c.ready());
  Daemon &a = c.a, &b = c.b;
  auto [rc, out] = run({PFSNET_BIN, "--socket", a.socket(), "config", "set",
                        "stats.rpcPerfNumberSecondIntervals=2", "--json"});
  ASSERT_EQ(rc, 0) << out;
  json changed = last_json_line(out)["changed"];
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_EQ(changed[0]["key"], "stats.rpcPerfNumberSecondIntervals");
  EXPECT_EQ(changed[0]["to"], "2");
  // A key that needs a restart is refused and nothing changes.
  auto [rc2, out2] = run({PFSNET_BIN, "--socket", a.socket(), "config", "set", "lnet.retry_count=5",
                          "stats.rpcPerfNumberSecondIntervals=3"});
  EXPECT_EQ(rc2, 2);
  EXPECT_NE(out2.find("'lnet.retry_count' cannot change at run time"), std::string::npos) << out2;
  auto [rc3, show] = run({PFSNET_BIN, "--socket", a.socket(), "config", "show", "--json"});
  ASSERT_EQ(rc3, 0);
  json shown = last_json_line(show);
  for (const json& e : shown["config"]) {
    if (e["key"] == "stats.rpcPerfNumberSecondIntervals") {
      EXPECT_EQ(e["value"], "2");
    }
    if (e["key"] == "lnet.retry_count") {
      EXPECT_EQ(e["value"], "2");
    }
  }
  // Credits and RPCs in flight change at run time (the tuning keys).
  auto [rc4, out4] = run({PFSNET_BIN, "--socket", a.socket(), "config", "set",
                          "lnet.peer_credits=16", "lnet.credits=128", "rpc.max_rpcs_in_flight=32"});
  ASSERT_EQ(rc4, 0) << out4;
  // Traffic for a few seconds: the second ring now holds 2.
  ASSERT_EQ(run({PFSNET_BIN, "--socket", a.socket(), "ping", b.nid().to_string(), "-c", "3"}).first,
            0);
  json r = diag_until(a.socket(), [](const json& r) {
    return !r["nodes"].empty() && r["nodes"][0]["stats"]["latency_tcp"]["second"].size() >= 2;
  });
  ASSERT_FALSE(r["nodes"].empty());
  EXPECT_EQ(r["nodes"][0]["stats"]["latency_tcp"]["second"].size(), 2u);
  auto [rc5, peers] = run({PFSNET_BIN, "--socket", a.socket(), "peers", "--json"});
  ASSERT_EQ(rc5, 0);
  json p = last_json_line(peers)["peers"][0];
  EXPECT_EQ(p["credits_max"], 16);
  EXPECT_EQ(p["credits"], 16);  // the open connection's window moved with it
  auto [rc6, nis] = run({PFSNET_BIN, "--socket", a.socket(), "nis", "--json"});
  EXPECT_EQ(last_json_line(nis)["nis"][0]["credits_max"], 128);
}

}  // namespace
}  // namespace pfsnet::testing
