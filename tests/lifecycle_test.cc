// pfsnetd's life cycle: SIGHUP reload (applied, or refused when broken) and a clean stop
// under load.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

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

// A daemon's threads, from outside (/proc/PID/task/*/comm): each named for what it does,
// and one timer queue keeps every deadline and round of the node (membership, the mesh,
// cluster health, tune, held frames, the disk's replies) -- not a thread per service.
TEST(LifecycleTest, EveryThreadIsNamedAndOneKeepsTheNodesTime) {
  TempDir dir;
  std::string key = dir.file("cluster.key");
  ASSERT_EQ(run({PFSNET_BIN, "keygen", key}).first, 0);
  Daemon a(dir, 2, key);
  ASSERT_TRUE(a.ready());
  const std::set<std::string> known = {"pfsnetd",  "pfs-timers", "pfs-tcp-io",    "pfs-rpc-worker",
                                       "pfs-disk", "pfs-links",  "pfs-netverify", "pfs-admin"};
  std::map<std::string, int> names;
  const std::string tasks = "/proc/" + std::to_string(a.process().pid()) + "/task";
  for (const auto& t : std::filesystem::directory_iterator(tasks)) {
    std::string comm = read_file(t.path().string() + "/comm");
    if (!comm.empty() && comm.back() == '\n') comm.pop_back();
    ++names[comm];
  }
  std::string all;
  for (const auto& [name, n] : names) all += name + " x" + std::to_string(n) + " ";
  std::printf("threads: %s\n", all.c_str());
  EXPECT_EQ(names["pfs-timers"], 1) << all;
  EXPECT_GE(names["pfs-tcp-io"], 1) << all;
  EXPECT_GE(names["pfs-rpc-worker"], 1) << all;
  for (const auto& entry : names)
    EXPECT_TRUE(known.count(entry.first)) << entry.first << ": " << all;
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

// Issue 38: a server restarted again and again under load never answers "no handler"
// (NOT_FOUND, a permanent error its client does not resend): a libpfsnet server
// (pfsnet_soak's serve mode) registers its handlers before it listens, so from its first
// connection it serves every type it ever will. Two client threads keep calling its
// SOAK_READ while it is killed and started 20 times; each incarnation must serve some of
// them, and no call may fail with NOT_FOUND (what fails while it is down is a connect error
// or a timeout, which a client resends or retries).
TEST(LifecycleTest, AServerRestartedUnderLoadNeverAnswersNoHandler) {
  constexpr char kKey[] = "lifecycle-restart-cluster-key-01";
  constexpr uint32_t kSoakRead = kMsgFirstUser + 72;  // tests/soak.cc
  TempDir dir;
  std::string key = dir.file("cluster.key"), cfg = dir.file("server.toml");
  write_file(key, kKey, 0600);
  const Nid server = loopback_nid(2);
  write_file(cfg, "[node]\nname = \"restarted\"\ncluster_key_file = \"" + key +
                      "\"\n[lnet]\ntransaction_timeout = 5\n[[net]]\nnid = \"" +
                      server.to_string() + "\"\n");
  ClientNode client(loopback_nid(1), kKey, 8, 8, 5s);
  ASSERT_TRUE(client.start_status().ok()) << client.start_status().to_string();
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> served{0};
  std::mutex mu;
  std::map<std::string, uint64_t> failures;  // code name -> count
  std::string not_found_example;
  std::vector<std::thread> callers;
  for (int t = 0; t < 2; ++t)
    callers.emplace_back([&, t] {
      for (uint32_t i = 0; !stop.load() && i < 1000000; ++i) {
        Buffer req(16);
        std::memset(req.data(), 0, 16);
        const uint32_t size = 4096, seed = i * 2 + static_cast<uint32_t>(t);
        std::memcpy(req.data() + 8, &size, 4);
        std::memcpy(req.data() + 12, &seed, 4);
        CallOptions o;
        o.timeout = 2s;
        RpcReply r = client.rpc().call(server, kSoakRead, std::move(req), nullptr, o);
        if (r.status.ok()) {
          served.fetch_add(1);
          continue;
        }
        std::lock_guard lk(mu);
        ++failures[std::string(code_name(r.status.code()))];
        if (r.status.code() == Code::kNotFound && not_found_example.empty())
          not_found_example = r.status.message();
      }
    });
  int incarnations = 0;
  for (int round = 0; round < 20; ++round) {
    Process p({SOAK_BIN, "serve", "--config", cfg});
    if (!p.wait_for_output("soak server ready", 10000ms)) {
      ADD_FAILURE() << "round " << round << ": the server did not start: " << p.output();
      break;
    }
    // Until this incarnation has served a few calls (bounded), then it is killed.
    const uint64_t before = served.load();
    for (int i = 0; i < 500 && served.load() < before + 20; ++i)
      std::this_thread::sleep_for(10ms);  // a bounded poll of the callers' count
    incarnations += served.load() >= before + 20;
    p.kill(SIGKILL);
    p.wait_exit(5000ms);
  }
  stop = true;
  for (auto& c : callers) c.join();
  std::string summary;
  for (const auto& [k, v] : failures) summary += k + " " + std::to_string(v) + "; ";
  std::printf("20 restarts: %llu calls served, failed: %s%d incarnations served calls\n",
              static_cast<unsigned long long>(served.load()), summary.c_str(), incarnations);
  EXPECT_EQ(failures.count("NOT_FOUND"), 0u) << not_found_example;
  // Nor any other permanent answer: only what a server that is down gives.
  for (const auto& [code, n] : failures)
    EXPECT_TRUE(code == "UNREACHABLE" || code == "CLOSED" || code == "TIMEOUT")
        << code << " x" << n;
  EXPECT_EQ(incarnations, 20);
}

}  // namespace
}  // namespace pfsnet::testing
