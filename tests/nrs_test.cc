// Request scheduling in real daemons (issue 72): `pfsnet nrs` shows the policy a server
// serves by; changed at run time to fair, a client's self-test goes through it -- its
// requests counted by client, every slot given back -- and back to fifo by config set.
// Bad policies and weights are refused and change nothing.
#include <gtest/gtest.h>

#include "cluster.h"

namespace pfsnet::testing {
namespace {

using nlohmann::json;

TEST(NrsDaemonTest, APolicyChangedAtRunTimeSchedulesAClientsRequestsAndGoesBack) {
  TwoDaemons d;
  ASSERT_TRUE(d.ready());
  auto nrs = [&](std::vector<std::string> args = {}) {
    std::vector<std::string> argv = {PFSNET_BIN, "--socket", d.b.socket(), "nrs", "--json"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto [rc, out] = run(argv, 20000ms);
    EXPECT_EQ(rc, 0) << out;
    return last_json_line(out);
  };
  json r = nrs();
  EXPECT_EQ(r["policy"], "fifo") << r.dump();
  EXPECT_TRUE(r["classes"].empty()) << r.dump();

  r = nrs({"--policy", "fair"});
  EXPECT_EQ(r["policy"], "fair") << r.dump();
  EXPECT_EQ(r["changed"], true) << r.dump();
  ASSERT_EQ(r["classes"].size(), 2u) << r.dump();
  EXPECT_EQ(r["classes"][0]["slots"], 16) << r.dump();  // rpc.nrs_slots
  EXPECT_EQ(r["classes"][1]["slots"], 2) << r.dump();   // rpc.workers

  // A's self-test against B: 64 KiB writes, 4 in flight, through B's policy (BRW's
  // handler runs inline: the first class, 16 slots).
  auto [rc, out] = run({PFSNET_BIN, "--socket", d.a.socket(), "selftest", "--from",
                        d.a.nid().to_string(), "--to", d.b.nid().to_string(), "--test", "brw",
                        "--size", "64K", "--concurrency", "4", "--duration", "1", "--json"},
                       60000ms);
  ASSERT_EQ(rc, 0) << out;
  json st = last_json_line(out);
  ASSERT_FALSE(st["steps"].empty()) << out;
  EXPECT_EQ(st["steps"][0]["errors"], 0) << out;
  const uint64_t rpcs = st["steps"][0]["rpcs"].get<uint64_t>();
  r = nrs();
  const json& workers = r["classes"][0];
  ASSERT_EQ(workers["flows"].size(), 1u) << r.dump();
  const json& flow = workers["flows"][0];
  EXPECT_EQ(flow["client"], d.a.nid().to_string()) << r.dump();
  // Every request of the run, and not one more, went through it; with 4 in flight and 16
  // slots (and a reserve for no one else), none was held.
  EXPECT_GE(flow["requests"].get<uint64_t>(), rpcs) << r.dump();
  EXPECT_LE(flow["requests"].get<uint64_t>(), rpcs + 4) << r.dump();
  EXPECT_EQ(flow["bytes"].get<uint64_t>() >= rpcs * 65536, true) << r.dump();
  EXPECT_EQ(flow["held"].get<uint64_t>(), 0u) << r.dump();
  EXPECT_EQ(workers["active"], 0) << "every slot given back: " << r.dump();
  EXPECT_EQ(workers["waiting"], 0) << r.dump();

  // Bad input: refused, saying what there is; the policy stays.
  std::tie(rc, out) =
      run({PFSNET_BIN, "--socket", d.b.socket(), "nrs", "--policy", "crrn"}, 20000ms);
  EXPECT_NE(rc, 0) << out;
  std::tie(rc, out) = run(
      {PFSNET_BIN, "--socket", d.b.socket(), "config", "set", "rpc.nrs_policy=\"tbf\""}, 20000ms);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("must be fifo"), std::string::npos) << out;
  std::tie(rc, out) = run({PFSNET_BIN, "--socket", d.b.socket(), "config", "set",
                           "rpc.nrs_job_weights={ \"alpha\" = 0 }"},
                          20000ms);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("1..1000"), std::string::npos) << out;
  EXPECT_EQ(nrs()["policy"], "fair");

  // Weights and slots at run time, then back to fifo by config set.
  std::tie(rc, out) = run({PFSNET_BIN, "--socket", d.b.socket(), "config", "set", "rpc.nrs_slots=4",
                           "rpc.nrs_client_weights={ \"" + d.a.nid().to_string() + "\" = 3 }"},
                          20000ms);
  ASSERT_EQ(rc, 0) << out;
  r = nrs();
  EXPECT_EQ(r["classes"][0]["slots"], 4) << r.dump();
  EXPECT_EQ(r["classes"][0]["flows"][0]["weight"], 3) << r.dump();
  std::tie(rc, out) = run(
      {PFSNET_BIN, "--socket", d.b.socket(), "config", "set", "rpc.nrs_policy=\"fifo\""}, 20000ms);
  ASSERT_EQ(rc, 0) << out;
  r = nrs();
  EXPECT_EQ(r["policy"], "fifo") << r.dump();
  EXPECT_TRUE(r["classes"].empty()) << r.dump();
  // The text view.
  std::tie(rc, out) = run({PFSNET_BIN, "--socket", d.b.socket(), "nrs"}, 20000ms);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("policy fifo"), std::string::npos) << out;
}

}  // namespace
}  // namespace pfsnet::testing
