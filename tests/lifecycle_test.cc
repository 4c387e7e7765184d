// pfsnetd's life cycle: SIGHUP reload (applied, or refused when broken) and a clean stop
// under load.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cluster.h"
#include "rpc/ping.h"

namespace pfsnet::testing {
namespace {

using nlohmann::json;

std::string config_value(const std::string& socket, const std::string& key) {
  auto [rc, out] = run({PFSNET_BIN, "--socket", socket, "config", "show", "--json"});
  if (rc != 0) return "error: " + out;
  json shown = last_json_line(out);
  for (const json& e : shown["config"])
    if (e["key"] == key) return e["value"];
  return "missing";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(LifecycleTest, SighupAppliesRunTimeKeysAndRefusesABrokenFile) {
  TempDir dir;
  std::string key = dir.file("cluster.key");
  ASSERT_EQ(run({PFSNET_BIN, "keygen", key}).first, 0);
  Daemon a(dir, 2, key);
  ASSERT_TRUE(a.ready());
  std::string cfg = dir.file("n2.toml"), original = read_file(cfg);

  std::string edited = original;
  edited.replace(edited.find("peer_credits = 8"), 16, "peer_credits = 4");
  edited.replace(edited.find("transaction_timeout = 50"), 24, "transaction_timeout = 20");
  write_file(cfg, edited + "[stats]\nrpcPerfNumberSecondIntervals = 7\n");
  a.process().kill(SIGHUP);
  ASSERT_TRUE(a.process().wait_for_output("config reloaded"));
  EXPECT_EQ(config_value(a.socket(), "stats.rpcPerfNumberSecondIntervals"), "7");
  EXPECT_EQ(config_value(a.socket(), "lnet.peer_credits"), "4");          // a tuning key: applied
  EXPECT_EQ(config_value(a.socket(), "lnet.transaction_timeout"), "50");  // needs a restart
  EXPECT_TRUE(a.process().wait_for_output(
      "lnet.transaction_timeout changed in the file; it takes effect at the next restart"));

  write_file(cfg, original + "[stats]\nrpcPerfNumberSecondIntervals = 0\n");
  a.process().kill(SIGHUP);
  ASSERT_TRUE(a.process().wait_for_output("config reload refused, the old settings stay"));
  EXPECT_TRUE(a.process().wait_for_output(
      "key 'stats.rpcPerfNumberSecondIntervals': value 0 is out of range"));
  EXPECT_EQ(config_value(a.socket(), "stats.rpcPerfNumberSecondIntervals"), "7");
  a.process().kill(SIGTERM);
  EXPECT_EQ(a.process().wait_exit(10s), 0);
}

TEST(LifecycleTest, SigtermUnderLoadAnswersOrFailsEveryRpc) {
  TempDir dir;
  std::string key = dir.file("cluster.key");
  write_file(key, "lifecycle-test-cluster-key-000001", 0600);
  DaemonOptions o;
  o.peer_credits = 64;
  o.transaction_timeout = 10;
  Daemon server(dir, 2, key, o);
  ASSERT_TRUE(server.ready());
  // Declared before the client: its callbacks may run until the client is destroyed.
  BulkData data = make_bulk(make_ping_pattern(65536));
  std::atomic<bool> stop{false};
  std::atomic<int> issued{0};
  Completions done;
  std::unique_ptr<ClientNode> cp;
  std::function<void()> issue = [&] {
    if (stop.load() || issued.fetch_add(1) >= 100000) return;
    cp->rpc().call_async(server.nid(), kMsgPing, Buffer(), data, [&](RpcReply&& r) {
      if (r.status.ok() && r.bulk.size() != 65536) r.status = Status(Code::kInternal, "bad echo");
      issue();
      done.add(RpcReply{r.status});
    });
  };
  cp = std::make_unique<ClientNode>(loopback_nid(1), "lifecycle-test-cluster-key-000001", 64, 64,
                                    20s);
  for (int i = 0; i < 64; ++i) issue();
  ASSERT_TRUE(done.wait_for(500, 30s));
  auto t0 = std::chrono::steady_clock::now();
  server.process().kill(SIGTERM);
  EXPECT_EQ(server.process().wait_exit(10s), 0);  // within transaction_timeout
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  stop = true;
  // Every RPC issued ends: the ones in flight at SIGTERM are answered or fail clearly.
  ASSERT_TRUE(done.wait_for(static_cast<size_t>(issued.load()), 30s));
  int ok = 0, failed = 0;
  for (auto& r : done.take()) {
    if (r.status.ok()) {
      ++ok;
      continue;
    }
    ++failed;
    EXPECT_TRUE(r.status.code() == Code::kClosed || r.status.code() == Code::kUnreachable ||
                r.status.code() == Code::kCancelled)
        << r.status.to_string();
    EXPECT_FALSE(r.status.message().empty());
  }
  EXPECT_GE(ok, 500);
  EXPECT_GT(failed + ok, 500);
  EXPECT_TRUE(server.process().wait_for_output("pfsnetd: stopped"));
  cp.reset();  // before the state its callbacks use
}

// Exactly-once tells a restarted client from a resend: a client's xids start again at 1
// when it restarts, but under a new incarnation, so the server runs them -- and keeps
// the old incarnation's records apart until they go idle.
TEST(LifecycleTest, ARestartedClientsRequestsRunAgainUnderItsNewIncarnation) {
  TempDir dir;
  std::string key = dir.file("cluster.key");
  write_file(key, "lifecycle-test-cluster-key-000001", 0600);
  Daemon server(dir, 2, key);
  ASSERT_TRUE(server.ready());
  BulkData data = make_bulk(make_ping_pattern(4096));
  constexpr int kWrites = 10;
  uint64_t incarnations[2] = {0, 0};
  for (int life = 0; life < 2; ++life) {
    ClientNode client(loopback_nid(1), "lifecycle-test-cluster-key-000001");
    incarnations[life] = client.rpc().incarnation();
    for (int i = 0; i < kWrites; ++i) {
      RpcReply r = client.rpc().call(server.nid(), kMsgBrwWrite, Buffer(), data);
      ASSERT_TRUE(r.status.ok()) << "life " << life << " write " << i << ": "
                                 << r.status.to_string();
    }
  }
  EXPECT_NE(incarnations[0], incarnations[1]);
  EXPECT_NE(incarnations[0], 0u);
  EXPECT_EQ(executions(server.socket(), "BRW_WRITE", 2 * kWrites), 2 * kWrites);
  json rc = reply_cache(server.socket());
  EXPECT_EQ(rc["clients"], 2) << rc.dump();
  EXPECT_EQ(rc["replayed"], 0) << rc.dump();
  EXPECT_EQ(rc["finished_copies"], 0) << rc.dump();
}

}  // namespace
}  // namespace pfsnet::testing
