// pfsnet selftest between two real daemons over an emulated 10 ms RTT: the sweep's
// throughput follows RPCs x size / RTT, every output format, and the errors.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "cluster.h"

namespace pfsnet::testing {
namespace {

using nlohmann::json;

TEST(SelftestTest, ConcurrencySweepTracksTheTheoryOverAnEmulatedRtt) {
  DaemonOptions o;
  o.extra = "[[emulation]]\ndelay_ms = 5\n";  // each way: a 10 ms round trip
  TwoDaemons d(o, o);
  ASSERT_TRUE(d.ready());
  std::string svg = d.dir.file("sweep.svg");
  auto [rc, out] = run({PFSNET_BIN,
                        "--socket",
                        d.a.socket(),
                        "selftest",
                        "--group",
                        "clients=" + d.a.nid().to_string(),
                        "--group",
                        "servers=" + d.b.nid().to_string(),
                        "--from",
                        "clients",
                        "--to",
                        "servers",
                        "--size",
                        "64K",
                        "--concurrency",
                        "1,2,4",
                        "--duration",
                        "1",
                        "--json",
                        "--plot",
                        svg},
                       60000ms);
  ASSERT_EQ(rc, 0) << out;
  json r = last_json_line(out);
  ASSERT_EQ(r["steps"].size(), 3u) << out;
  EXPECT_EQ(r["steps"][2]["concurrency"], 4) << out;
  for (const json& s : r["steps"]) {
    EXPECT_EQ(s["errors"], 0) << s.dump();
    EXPECT_GE(s["rtt_ms"].get<double>(), 10.0) << s.dump();
    EXPECT_GE(s["p50_ms"].get<double>(), 10.0) << s.dump();
    // Close to the theory: the emulated RTT bounds each RPC, nothing else does here. Above:
    // no more than `concurrency` 64 KiB RPCs per emulated 10 ms round trip -- the physical
    // bound (efficiency, against the step's mean RTT, reads above 1 when a loaded machine
    // stretches a few RPCs' RTTs and so the mean: 1.179 once beside the package test).
    EXPECT_GT(s["efficiency"].get<double>(), 0.5) << s.dump();
    EXPECT_LT(s["mib_s"].get<double>(), 1.1 * s["concurrency"].get<int>() * 0.0625 / 0.010)
        << s.dump();
  }
  // One RPC in flight: at most one per RTT; four in flight: about four times as many.
  EXPECT_LE(r["steps"][0]["rpc_s"].get<double>(), 100.0 + 5);
  EXPECT_GT(r["steps"][2]["mib_s"].get<double>(), 2.5 * r["steps"][0]["mib_s"].get<double>());
  // The chart: an SVG with the two lines.
  std::ifstream f(svg);
  std::stringstream text;
  text << f.rdbuf();
  EXPECT_EQ(text.str().rfind("<svg", 0), 0u);
  size_t lines = 0;
  for (size_t p = text.str().find("<polyline"); p != std::string::npos;
       p = text.str().find("<polyline", p + 1))
    ++lines;
  EXPECT_EQ(lines, 2u);
  // CSV: a header and one row per step. Asked through B, which drives A's daemon with
  // SELFTEST_RUN (above, A ran its own share locally).
  std::tie(rc, out) = run({PFSNET_BIN, "--socket", d.b.socket(), "selftest", "--from",
                           d.a.nid().to_string(), "--to", d.b.nid().to_string(), "--test", "ping",
                           "--size", "0", "--concurrency", "1-2", "--duration", "0.3", "--csv"},
                          60000ms);
  ASSERT_EQ(rc, 0) << out;
  std::istringstream rows(out);
  std::string line;
  std::vector<std::string> csv;
  while (std::getline(rows, line))
    if (!line.empty() && (std::isdigit(static_cast<unsigned char>(line[0])) || line[0] == 'c'))
      csv.push_back(line);
  ASSERT_EQ(csv.size(), 3u) << out;
  EXPECT_TRUE(
      d.a.process().wait_for_output("selftest: ping from " + d.b.nid().to_string(), 2000ms));
  EXPECT_EQ(csv[0].rfind("concurrency,mib_s", 0), 0u);
}

// lst's groups at a small scale: four client daemons to two server daemons, every client
// to every server (--distribute 1:N), writes and then reads; every byte is checked (the
// servers check what is written, the clients what is read) and each client and server
// did its share.
TEST(SelftestTest, FourClientsToTwoServersEveryByteChecked) {
  TempDir dir;
  std::string key = dir.file("cluster.key");
  write_file(key, "four-by-two-selftest-cluster-key", 0600);
  std::vector<std::unique_ptr<Daemon>> d;
  for (int host = 31; host <= 36; ++host) {
    d.push_back(std::make_unique<Daemon>(dir, host, key));
    ASSERT_TRUE(d.back()->ready()) << host;
  }
  std::string clients = "clients=", servers = "servers=";
  for (int i = 0; i < 4; ++i) clients += (i ? "," : "") + d[i]->nid().to_string();
  servers += d[4]->nid().to_string() + "," + d[5]->nid().to_string();
  for (std::string mode : {"write", "read"}) {
    // Asked through a client: it drives the other three with SELFTEST_RUN.
    auto [rc, out] = run({PFSNET_BIN,      "--socket", d[0]->socket(), "selftest", "--group",
                          clients,         "--group",  servers,        "--from",   "clients",
                          "--to",          "servers",  "--distribute", "1:N",      "--test",
                          "brw",           "--mode",   mode,           "--size",   "64K",
                          "--concurrency", "4",        "--duration",   "1",        "--json"},
                         60000ms);
    ASSERT_EQ(rc, 0) << out;
    json step = last_json_line(out)["steps"][0];
    EXPECT_EQ(step["errors"], 0) << step.dump();
    ASSERT_EQ(step["clients"].size(), 4u) << step.dump();
    for (int i = 0; i < 4; ++i) {
      const json& c = step["clients"][i];
      EXPECT_EQ(c["nid"], d[i]->nid().to_string());
      EXPECT_GT(c["rpcs"].get<int64_t>(), 0) << c.dump();
      EXPECT_EQ(c["errors"], 0) << c.dump();
    }
    std::string type = mode == "write" ? "BRW_WRITE" : "BRW_READ";
    for (int s = 4; s < 6; ++s) EXPECT_GT(executions(d[s]->socket(), type, 4), 0) << type << s;
  }
}

TEST(SelftestTest, BadRequestsAreRefusedClearly) {
  TwoDaemons d;
  ASSERT_TRUE(d.ready());
  auto bad = [&](std::vector<std::string> extra, const std::string& expect) {
    std::vector<std::string> argv = {PFSNET_BIN, "--socket", d.a.socket(), "selftest"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto [rc, out] = run(argv);
    EXPECT_NE(rc, 0) << out;
    EXPECT_NE(out.find(expect), std::string::npos) << out;
  };
  std::string b = d.b.nid().to_string(), a = d.a.nid().to_string();
  bad({"--from", "nonsense", "--to", b}, "from");
  bad({"--from", a, "--to", b, "--size", "12Q"}, "--size");
  bad({"--from", a, "--to", b, "--size", "64M"}, "size must be at most");
  bad({"--from", a, "--to", b, "--concurrency", "0"}, "concurrency");
  bad({"--from", a, "--to", b, "--test", "bogus"}, "test");
  // A server that is not there: the client's RTT probe fails and says so.
  bad({"--from", a, "--to", loopback(9) + "@tcp", "--duration", "0.2"}, "PING");
  // ... and the same from a client driven over SELFTEST_RUN: its error status names it.
  bad({"--from", b, "--to", loopback(9) + "@tcp", "--duration", "0.2"}, "selftest on " + b);
  bad({"--from", b, "--to", loopback(9) + "@tcp", "--duration", "0.2"}, "PING");
}

}  // namespace
}  // namespace pfsnet::testing
