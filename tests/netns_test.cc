// LNet health on real links: two network namespaces joined by two veth pairs (two rails,
// 198.18.1.0/24 on net tcp and 198.18.2.0/24 on net tcp1), a pfsnetd in each with one NI
// per rail. The test creates and removes everything; it needs root (skipped otherwise).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <functional>
#include <set>

#include "cluster.h"

namespace pfsnet::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// The namespaces, links and daemons of one test.
class TwoRails {
 public:
  // transaction_timeout 3: 1 s per attempt with retry_count 2. `rdma`: rail 2 is an
  // @o2ib net (libfabric's tcp provider), rail 1 stays @tcp.
  explicit TwoRails(int transaction_timeout = 3, bool rdma = false) : rdma_(rdma) {
    ip_ = ip_bin();
    if (geteuid() != 0 || ip_.empty()) {
      skip_ = "needs root and iproute2";
      return;
    }
    std::string tag = std::to_string(getpid() % 100000);
    ns_[0] = "pfsA" + tag;
    ns_[1] = "pfsB" + tag;
    for (int r = 0; r < 2; ++r) {
      if_[0][r] = "pa" + std::to_string(r + 1) + "_" + tag;
      if_[1][r] = "pb" + std::to_string(r + 1) + "_" + tag;
    }
    if (!ip({"netns", "add", ns_[0]}) || !ip({"netns", "add", ns_[1]})) {
      skip_ = "ip netns add failed (no network namespaces here)";
      return;
    }
    created_ = true;
    for (int r = 0; r < 2; ++r) {
      ok_ = ok_ && ip({"link", "add", if_[0][r], "netns", ns_[0], "type", "veth", "peer", "name",
                       if_[1][r], "netns", ns_[1]});
      for (int side = 0; side < 2; ++side) {
        ok_ =
            ok_ && ip({"-n", ns_[side], "addr", "add", addr(side, r) + "/24", "dev", if_[side][r]});
        ok_ = ok_ && ip({"-n", ns_[side], "link", "set", if_[side][r], "up"});
      }
    }
    for (int side = 0; side < 2; ++side)
      ok_ = ok_ && ip({"-n", ns_[side], "link", "set", "lo", "up"});
    if (!ok_) return;
    // The kernel reports carrier on a new veth up to a second later (linkwatch): wait for
    // it, bounded, so the daemons start on links that are up.
    for (int side = 0; side < 2; ++side)
      for (int r = 0; r < 2; ++r) ok_ = ok_ && wait_carrier(side, r);
    if (!ok_) return;
    write_file(dir_.file("cluster.key"), "two-rails-netns-test-cluster-key", 0600);
    for (int side = 0; side < 2; ++side) {
      std::string name = side == 0 ? "client" : "server";
      socket_[side] = dir_.file(name + ".sock");
      std::string cfg = dir_.file(name + ".toml");
      write_file(cfg, "[node]\nname = \"" + name + "\"\ncluster_key_file = \"" +
                          dir_.file("cluster.key") + "\"\nadmin_socket = \"" + socket_[side] +
                          "\"\n[[net]]\nnid = \"" + nid(side, 0) + "\"\n[[net]]\nnid = \"" +
                          nid(side, 1) + "\"\n" + (rdma_ ? "provider = \"tcp\"\n" : "") +
                          "[lnet]\ntransaction_timeout = " + std::to_string(transaction_timeout) +
                          "\nretry_count = 2\nrecovery_interval = 1\n"
                          "[stats]\nrpcPerfNumberSecondIntervals = 600\n");
      daemon_[side] = std::make_unique<Process>(
          std::vector<std::string>{ip_, "netns", "exec", ns_[side], PFSNETD_BIN, "--config", cfg});
      ok_ = ok_ && daemon_[side]->wait_for_output("pfsnetd started", 5000ms);
    }
  }

  ~TwoRails() {
    for (auto& d : daemon_) d.reset();  // SIGKILL by PID, reaped
    if (created_)
      for (auto& n : ns_) ip({"netns", "del", n});  // removes the veths with them
  }

  const std::string& skip() const { return skip_; }
  bool ok() const { return ok_; }
  // side 0 = client (A), 1 = server (B); rail 0 or 1.
  static std::string addr(int side, int rail) {
    return "198.18." + std::to_string(rail + 1) + "." + std::to_string(side + 1);
  }
  std::string nid(int side, int rail) const {
    return addr(side, rail) + (rail == 0 ? "@tcp" : rdma_ ? "@o2ib" : "@tcp1");
  }
  const std::string& socket(int side) const { return socket_[side]; }
  Process& daemon(int side) { return *daemon_[side]; }
  // Runs an nftables script in a side's namespace (its rules go with the namespace).
  bool nft(int side, const std::string& script) {
    std::string f = dir_.file("rules" + std::to_string(side) + ".nft");
    write_file(f, script);
    auto [rc, out] = run({ip_, "netns", "exec", ns_[side], "nft", "-f", f}, 10000ms);
    if (rc != 0) std::fprintf(stderr, "nft failed (%d): %s\n", rc, out.c_str());
    return rc == 0;
  }
  // nftables drops `percent` % of the client's packets on `rail` as the server receives
  // them (table pfsloss; `nft(1, "delete table inet pfsloss\n")` ends it). On the server's
  // input: a drop on the sender's own output would be a local error TCP retries without
  // counting, not a loss on the wire.
  bool lose(int rail, int percent) {
    return nft(1,
               "table inet pfsloss {\n chain in {\n  type filter hook input priority 0; "
               "policy accept;\n  ip saddr " +
                   addr(0, rail) + " numgen random mod 100 < " + std::to_string(percent) +
                   " drop\n }\n}\n");
  }
  bool link(int side, int rail, bool up) {
    return ip({"-n", ns_[side], "link", "set", if_[side][rail], up ? "up" : "down"});
  }
  const std::string& ifname(int side, int rail) const { return if_[side][rail]; }
  const std::string& ns(int side) const { return ns_[side]; }
  // `ip -n NS ARGS...` in a side's namespace.
  bool ip_in(int side, std::vector<std::string> args) {
    args.insert(args.begin(), {"-n", ns_[side]});
    return ip(std::move(args));
  }
  bool mtu(int side, int rail, int bytes) {
    return ip_in(side, {"link", "set", if_[side][rail], "mtu", std::to_string(bytes)});
  }
  // `tc ARGS...` in a side's namespace.
  bool tc(int side, std::vector<std::string> args) {
    std::vector<std::string> argv = {ip_, "netns", "exec", ns_[side], "tc"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto [rc, out] = run(argv, 10000ms);
    if (rc != 0) std::fprintf(stderr, "tc failed (%d): %s\n", rc, out.c_str());
    return rc == 0;
  }

  // `pfsnet <args> --json` against a side's daemon.
  json cli(int side, std::vector<std::string> args) {
    std::vector<std::string> argv = {PFSNET_BIN, "--socket", socket_[side]};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("--json");
    auto [rc, out] = run(argv, 20000ms);
    EXPECT_EQ(rc, 0) << out;
    return rc == 0 ? last_json_line(out) : json();
  }
  json ni(int side, int rail) {
    json all = cli(side, {"nis"});  // kept alive: the loop walks into it
    for (const json& n : all["nis"])
      if (n["nid"] == nid(side, rail)) return n;
    return json();
  }
  json peer(int side, const std::string& peer_nid) {
    json all = cli(side, {"peers"});
    for (const json& n : all["peers"])
      if (n["nid"] == peer_nid) return n;
    return json();
  }
  // nftables drops everything the server sends from its address on `rail` (table
  // pfsblack): requests arrive and run, their replies (and TCP's acks) vanish.
  bool black_hole_replies(int rail) {
    return nft(1,
               "table inet pfsblack {\n chain out {\n  type filter hook output priority 0; "
               "policy accept;\n  ip saddr " +
                   addr(1, rail) + " drop\n }\n}\n");
  }
  // `count` 4 KiB BRW_WRITEs from the client to the server's rail-1 NID, 10 ms apart.
  std::unique_ptr<Process> writes(int count, int timeout) {
    return std::make_unique<Process>(std::vector<std::string>{
        PFSNET_BIN, "--socket", socket_[0], "ping", nid(1, 0), "--mode", "write", "--size", "4096",
        "--count", std::to_string(count), "--interval", "0.01", "--timeout",
        std::to_string(timeout), "--json"});
  }
  // A background `pfsnet ping` load from the client to the server's rail-1 NID.
  std::unique_ptr<Process> load(int count, const std::string& interval, int timeout) {
    return std::make_unique<Process>(std::vector<std::string>{
        PFSNET_BIN, "--socket", socket_[0], "ping", nid(1, 0), "--count", std::to_string(count),
        "--interval", interval, "--timeout", std::to_string(timeout), "--json"});
  }

 private:
  bool ip(std::vector<std::string> args) {
    args.insert(args.begin(), ip_);
    auto [rc, out] = run(args, 10000ms);
    if (rc != 0) std::fprintf(stderr, "ip failed (%d): %s\n", rc, out.c_str());
    return rc == 0;
  }

  bool wait_carrier(int side, int rail) {
    for (int i = 0; i < 100; ++i) {
      auto [rc, out] = run({ip_, "-n", ns_[side], "link", "show", "dev", if_[side][rail]}, 5000ms);
      if (rc == 0 && out.find("LOWER_UP") != std::string::npos) return true;
      std::this_thread::sleep_for(50ms);  // polling the kernel's link state, bounded (5 s)
    }
    std::fprintf(stderr, "no carrier on %s\n", if_[side][rail].c_str());
    return false;
  }

  bool rdma_;
  std::string ip_, skip_;
  bool created_ = false, ok_ = true;
  std::string ns_[2];
  std::string if_[2][2];
  TempDir dir_;
  std::string socket_[2];
  std::unique_ptr<Process> daemon_[2];
};

// Polls `pred` every 50 ms until it holds or `limit` passes; returns the seconds it took,
// or -1.
template <class Pred>
double poll_until(Pred pred, std::chrono::milliseconds limit) {
  auto start = Clock::now();
  for (int i = 0; i < 10000 && Clock::now() - start < limit; ++i) {
    if (pred()) return std::chrono::duration<double>(Clock::now() - start).count();
    std::this_thread::sleep_for(50ms);  // polling interval of an observation, not a sync
  }
  return -1;
}

uint64_t sent(const json& ni) { return ni.is_null() ? 0 : ni["send_count"].get<uint64_t>(); }

TEST(NetnsTest, LinkDownUnderLoadFailsOverAndTrafficReturns) {
  TwoRails net;
  if (!net.skip().empty()) GTEST_SKIP() << net.skip();
  ASSERT_TRUE(net.ok());
  // ~24 s of sequential RPCs: enough to outlast the failover and the healing even when
  // the sanitized build shares the CPU with other tests (6,000 once ended too early).
  auto load = net.load(12000, "0.002", 3);
  ASSERT_GE(
      poll_until([&] { return sent(net.ni(0, 0)) > 100 && sent(net.ni(0, 1)) > 100; }, 10000ms), 0)
      << "traffic on both rails before the failure: " << load->output()
      << net.cli(0, {"nis"}).dump() << net.daemon(0).output() << net.daemon(1).output();
  auto t0 = Clock::now();
  ASSERT_TRUE(net.link(0, 0, false));
  double detect = poll_until([&] { return net.ni(0, 0)["state"] == "down"; }, 5000ms);
  ASSERT_GE(detect, 0) << "the NI is marked down from the link event";
  json a1 = net.ni(0, 0);
  EXPECT_EQ(a1["errors"]["LOCAL_NI_DOWN"], 1) << a1.dump();
  EXPECT_LT(a1["health"].get<int>(), 1000);
  // Rail 1 carries nothing more; rail 2 carries everything.
  uint64_t rail1 = sent(a1), rail2 = sent(net.ni(0, 1));
  double moved = poll_until([&] { return sent(net.ni(0, 1)) > rail2 + 100; }, 5000ms);
  ASSERT_GE(moved, 0);
  EXPECT_EQ(sent(net.ni(0, 0)), rail1);
  double failover = std::chrono::duration<double>(Clock::now() - t0).count();
  // `pfsnet health` on the client names the NI and its cause, and not the other rail.
  json h = net.cli(0, {"health"});
  bool named = false;
  for (const json& p : h.value("problems", json::array())) {
    named = named || (p["kind"] == "ni" && p["subject"] == net.nid(0, 0) && p["cause"] == "DOWN");
    if (p["kind"] != "settings") {
      EXPECT_NE(p["subject"], net.nid(0, 1)) << h.dump();
      EXPECT_NE(p["subject"], net.nid(1, 1)) << h.dump();
    }
  }
  EXPECT_TRUE(named) << h.dump();
  // Back up: LOCAL_NI_UP, recovery pings restore the health, traffic returns to rail 1.
  ASSERT_TRUE(net.link(0, 0, true));
  auto t1 = Clock::now();
  double healed = poll_until(
      [&] {
        json n = net.ni(0, 0);
        return n["state"] == "up" && n["health"] == 1000;
      },
      15000ms);
  ASSERT_GE(healed, 0) << net.ni(0, 0).dump();
  EXPECT_EQ(net.ni(0, 0)["errors"]["LOCAL_NI_UP"], 1);
  uint64_t back = sent(net.ni(0, 0));
  ASSERT_GE(poll_until([&] { return sent(net.ni(0, 0)) > back + 100; }, 10000ms), 0)
      << "traffic returns to rail 1: " << net.cli(0, {"nis"}).dump()
      << net.cli(0, {"peers", "-v"}).dump() << load->output() << "\nclient log:\n"
      << net.daemon(0).output() << "\nserver log:\n"
      << net.daemon(1).output();
  double returned = std::chrono::duration<double>(Clock::now() - t1).count();
  // No RPC failed; the longest one (resends included) is the failover cost.
  ASSERT_EQ(load->wait_exit(60000ms), 0) << load->output();
  ASSERT_TRUE(load->wait_eof(5000ms));
  json summary = last_json_line(load->output());
  EXPECT_EQ(summary["failed"], 0) << summary.dump();
  EXPECT_EQ(summary["ok"], 12000);
  double worst = summary["total_max_ms"].get<double>();
  EXPECT_LT(worst, 2000) << "failover within a second or two";
  std::printf(
      "failover: link down seen in %.3f s, traffic moved within %.3f s of the event, slowest RPC "
      "%.3f ms; after link up: healthy in %.3f s, traffic back on rail 1 within %.3f s\n",
      detect, failover, worst, healed, returned);
}

// Rail 2 is RDMA (@o2ib over libfabric), rail 1 TCP: RDMA carries the traffic while it is
// healthy, its link failing under load moves everything to TCP with no RPC lost, and it
// comes back once recovered. The RPC statistics split the load by kind, exactly.
TEST(NetnsTest, RdmaRailFailsUnderLoadTcpCarriesOnAndRdmaReturns) {
  TwoRails net(3, /*rdma=*/true);
  if (!net.skip().empty()) GTEST_SKIP() << net.skip();
  ASSERT_TRUE(net.ok()) << net.daemon(0).output() << net.daemon(1).output();
  constexpr int kRpcs = 8000;
  auto load = net.load(kRpcs, "0.002", 3);  // addressed to the server's tcp NID
  ASSERT_GE(poll_until([&] { return sent(net.ni(0, 1)) > 200; }, 10000ms), 0)
      << load->output() << net.cli(0, {"nis"}).dump() << net.daemon(0).output();
  EXPECT_LE(sent(net.ni(0, 0)), 2u) << "TCP idle while RDMA is healthy (the first ping "
                                       "discovers the o2ib NID)";
  ASSERT_TRUE(net.link(0, 1, false));
  ASSERT_GE(poll_until([&] { return net.ni(0, 1)["state"] == "down"; }, 5000ms), 0);
  uint64_t rdma = sent(net.ni(0, 1)), tcp = sent(net.ni(0, 0));
  ASSERT_GE(poll_until([&] { return sent(net.ni(0, 0)) > tcp + 200; }, 5000ms), 0)
      << "TCP takes over: " << net.cli(0, {"nis"}).dump();
  EXPECT_EQ(sent(net.ni(0, 1)), rdma);
  ASSERT_TRUE(net.link(0, 1, true));
  ASSERT_GE(poll_until(
                [&] {
                  json n = net.ni(0, 1);
                  return n["state"] == "up" && n["health"] == 1000;
                },
                15000ms),
            0)
      << net.ni(0, 1).dump();
  uint64_t back = sent(net.ni(0, 1));
  ASSERT_GE(poll_until([&] { return sent(net.ni(0, 1)) > back + 200; }, 10000ms), 0)
      << "traffic returns to RDMA: " << net.cli(0, {"nis"}).dump() << load->output();
  ASSERT_EQ(load->wait_exit(90000ms), 0) << load->output();
  ASSERT_TRUE(load->wait_eof(5000ms));
  json summary = last_json_line(load->output());
  EXPECT_EQ(summary["failed"], 0) << summary.dump();
  EXPECT_EQ(summary["ok"], kRpcs);
  // Every RPC of the load in the statistics of the server's tcp NID (the NID it was
  // addressed to), each by the kinds of its last attempt's request and reply.
  json st;
  poll_until(
      [&] {
        json r = net.cli(0, {"diag", "rpc", "node"});
        for (const json& n : r["nodes"])
          if (n["nid"] == net.nid(1, 0)) st = n["stats"];
        return total(st["channel_wait"]) >= kRpcs;
      },
      10000ms);
  int64_t verbs = total(st["latency_verbs"]), tcp_rpcs = total(st["latency_tcp"]),
          mixed = total(st["latency_mixed"]);
  EXPECT_EQ(total(st["channel_wait"]), kRpcs) << st.dump();
  EXPECT_EQ(verbs + tcp_rpcs + mixed, kRpcs) << st.dump();
  EXPECT_GT(verbs, 100);
  EXPECT_GT(tcp_rpcs, 100);
  EXPECT_EQ(total(st["send_time_verbs"]) + total(st["send_time_tcp"]), kRpcs);
  std::printf("RDMA rail down and up under %d RPCs: %lld over RDMA, %lld over TCP, %lld mixed\n",
              kRpcs, (long long)verbs, (long long)tcp_rpcs, (long long)mixed);
}

TEST(NetnsTest, BlackHoledRailTimesOutRemotelyAndResendsOnTheOther) {
  TwoRails net;
  if (!net.skip().empty()) GTEST_SKIP() << net.skip();
  ASSERT_TRUE(net.ok());
  // A running system: the peer is known on both rails before the rail fails.
  auto warm = net.load(20, "0", 3);
  ASSERT_EQ(warm->wait_exit(20000ms), 0) << warm->output();
  json added = net.cli(
      0, {"fault", "add", "drop", "--src", net.nid(0, 0), "--dst", net.nid(1, 0), "--rate", "1"});
  ASSERT_TRUE(added.contains("added")) << added.dump();
  auto load = net.load(400, "0.002", 3);
  ASSERT_EQ(load->wait_exit(60000ms), 0) << load->output();
  ASSERT_TRUE(load->wait_eof(5000ms));
  json summary = last_json_line(load->output());
  EXPECT_EQ(summary["failed"], 0) << summary.dump();
  json p1 = net.peer(0, net.nid(1, 0));
  EXPECT_GE(p1["remote_timeouts"].get<int>(), 1) << p1.dump();
  EXPECT_GE(p1["resends"].get<int>(), 1) << p1.dump();
  EXPECT_GE(p1["errors"]["PEER_NI_UNREACHABLE"].get<int>(), 1) << p1.dump();
  EXPECT_LT(p1["health"].get<int>(), 1000);
  json a1 = net.ni(0, 0);
  EXPECT_EQ(a1["local_timeouts"], 0) << a1.dump();  // remote, not local
  json faults = net.cli(0, {"fault", "list"});
  ASSERT_EQ(faults["faults"].size(), 1u);
  EXPECT_GE(faults["faults"][0]["injected"].get<int>(), 1);
  // A resend waits one attempt (transaction_timeout / 3 = 1 s), not more.
  EXPECT_LT(summary["total_max_ms"].get<double>(), 1500) << summary.dump();
  EXPECT_EQ(net.cli(0, {"fault", "del", "--all"})["deleted"], 1);
}

// Frames the server received from the client on `rail` (its peer entry's count).
int server_received(TwoRails& net, int rail) {
  json p = net.peer(1, net.nid(0, rail));
  return p.is_object() ? p.value("recv_count", 0) : 0;
}

// Exactly-once over a black-holed rail: nftables on the server (outside pfsnet) drops
// everything it sends on rail 1, so writes that went that way run but their replies
// vanish; the client times out there and resends on rail 2 with the same xid, and the
// server answers the copy with the saved reply. Every write ran once.
TEST(NetnsTest, WritesResentOverABlackHoledRailRunOnce) {
  TwoRails net;
  if (!net.skip().empty()) GTEST_SKIP() << net.skip();
  ASSERT_TRUE(net.ok());
  if (access("/usr/sbin/nft", X_OK) != 0) GTEST_SKIP() << "needs nftables";
  auto warm = net.load(20, "0", 3);  // both rails known and connected (PING: no writes)
  ASSERT_EQ(warm->wait_exit(20000ms), 0) << warm->output();
  int before = server_received(net, 0);
  ASSERT_TRUE(net.black_hole_replies(0));
  constexpr int kWrites = 40;
  auto load = net.writes(kWrites, 3);
  ASSERT_EQ(load->wait_exit(60000ms), 0) << load->output();
  ASSERT_TRUE(load->wait_eof(5000ms));
  json summary = last_json_line(load->output());
  EXPECT_EQ(summary["failed"], 0) << summary.dump();
  json p1 = net.peer(0, net.nid(1, 0));
  EXPECT_GE(p1["resends"].get<int>(), 1) << p1.dump();
  EXPECT_EQ(executions(net.socket(1), "BRW_WRITE", kWrites), kWrites);
  json rc = reply_cache(net.socket(1));
  // The copy is answered from the reply cache -- when the first went out at all: in the
  // slow sanitizer build the write on the black-holed rail sometimes never leaves the
  // client's TCP (the server's rail-1 count does not move), so there is no copy to answer
  // and the write simply runs once, by its resend.
  if (server_received(net, 0) > before) {
    EXPECT_GE(rc["replayed"].get<int>(), 1) << rc.dump();
  } else {
    std::printf("black-holed rail: the first write never reached the server; no copy\n");
  }
  EXPECT_EQ(rc["clients"], 1) << rc.dump();
  std::printf("black-holed rail: %d writes, %d resends, %d answered from the reply cache\n",
              kWrites, p1["resends"].get<int>(), rc["replayed"].get<int>());
}

// Exactly-once over reset connections: the server's replies on rail 1 are held back
// (nftables, as above) and the client's connections on that rail are reset from outside
// (`ss -K`, the kernel's socket destroy) while writes wait there; each resend goes at
// once on rail 2 -- with RPCs of 30 s, not after an attempt's 10 s -- and runs nothing
// twice.
TEST(NetnsTest, WritesResentOverAResetConnectionRunOnce) {
  TwoRails net(30);
  if (!net.skip().empty()) GTEST_SKIP() << net.skip();
  ASSERT_TRUE(net.ok());
  if (access("/usr/sbin/nft", X_OK) != 0) GTEST_SKIP() << "needs nftables";
  auto warm = net.load(20, "0", 3);
  ASSERT_EQ(warm->wait_exit(20000ms), 0) << warm->output();
  int before = server_received(net, 0);
  ASSERT_TRUE(net.black_hole_replies(0));
  constexpr int kWrites = 40;
  auto load = net.writes(kWrites, 30);
  // The fault driver: resets the client's rail-1 connections every 300 ms until the load
  // is done (bounded: 100 rounds).
  int resets = 0;
  for (int i = 0; i < 100 && load->wait_exit(300ms) == -1; ++i) {
    auto [rc, out] = run(
        {ip_bin(), "netns", "exec", net.ns(0), "ss", "-K", "dst", TwoRails::addr(1, 0)}, 5000ms);
    ASSERT_EQ(rc, 0) << out;
    resets += out.find("ESTAB") != std::string::npos;
  }
  ASSERT_EQ(load->wait_exit(5000ms), 0) << load->output();
  ASSERT_TRUE(load->wait_eof(5000ms));
  json summary = last_json_line(load->output());
  EXPECT_EQ(summary["failed"], 0) << summary.dump();
  EXPECT_GE(resets, 1);
  EXPECT_LT(summary["total_max_ms"].get<double>(), 5000) << summary.dump();  // not a timeout
  json p1 = net.peer(0, net.nid(1, 0));
  EXPECT_GE(p1["resends"].get<int>(), 1) << p1.dump();
  EXPECT_EQ(executions(net.socket(1), "BRW_WRITE", kWrites), kWrites);
  json rc = reply_cache(net.socket(1));
  // As above: a copy exists only when a write on rail 1 reached the server before its reset.
  if (server_received(net, 0) > before) {
    EXPECT_GE(rc["replayed"].get<int>() + rc["running_copies"].get<int>(), 1) << rc.dump();
  } else {
    std::printf("reset connections: no write reached the server on rail 1; no copy\n");
  }
  std::printf(
      "reset connections: %d writes, %d resets, %d resends, %d answered from the "
      "reply cache\n",
      kWrites, resets, p1["resends"].get<int>(), rc["replayed"].get<int>());
}

// Bytes changed on the wire from outside pfsnet: nftables rewrites one byte of every tenth
// large TCP segment as each end receives it -- a middlebox or NIC fault that TCP's checksum
// does not see (on veth nothing checks it). With lnet.checksum on (the default) nothing
// damaged reaches a handler or a caller: every write runs once with its data intact, every
// read returns intact data, the damaged messages are resent and counted on the peer NI as
// PEER_NI_CORRUPT. With the client's checksum turned off at run time the same damage
// reaches the server's BRW_WRITE handler, which finds its pattern broken.
TEST(NetnsTest, DataDamagedOnTheWireIsCaughtAndResentNeverDelivered) {
  TwoRails net(10);
  if (!net.skip().empty()) GTEST_SKIP() << net.skip();
  ASSERT_TRUE(net.ok());
  if (access("/usr/sbin/nft", X_OK) != 0) GTEST_SKIP() << "needs nftables";
  for (int side = 0; side < 2; ++side)
    ASSERT_TRUE(net.nft(side,
                        "table inet pfsmangle {\n chain in {\n  type filter hook input priority 0; "
                        "policy accept;\n  ip saddr 198.18.0.0/15 meta l4proto tcp meta length > "
                        "1000 numgen inc mod 10 == 0 @ih,800,8 set 0x5a\n }\n}\n"));
  constexpr int kRpcs = 200;
  auto ping = [&](const std::string& mode, int want_rc = 0) {  // 1: some failed
    auto p = std::make_unique<Process>(std::vector<std::string>{
        PFSNET_BIN, "--socket", net.socket(0), "ping", net.nid(1, 0), "--mode", mode, "--size",
        "65536", "--count", std::to_string(kRpcs), "--interval", "0", "--timeout", "10", "--json"});
    EXPECT_EQ(p->wait_exit(120000ms), want_rc) << p->output();
    EXPECT_TRUE(p->wait_eof(5000ms));
    return last_json_line(p->output());
  };
  auto corrupt = [&](int side) {  // PEER_NI_CORRUPT over the other side's NIs
    int64_t n = 0;
    json all = net.cli(side, {"peers"});
    for (const json& p : all["peers"]) n += p["errors"].value("PEER_NI_CORRUPT", 0);
    return n;
  };
  json writes = ping("write"), reads = ping("read");
  EXPECT_EQ(writes["ok"], kRpcs) << writes.dump();
  EXPECT_EQ(reads["ok"], kRpcs) << reads.dump();  // each reply's pattern checked by ping
  int64_t at_server = corrupt(1), at_client = corrupt(0);
  EXPECT_GT(at_server, 0) << "no damaged request caught";
  EXPECT_GT(at_client, 0) << "no damaged reply caught";
  EXPECT_EQ(executions(net.socket(1), "BRW_WRITE", kRpcs), kRpcs);  // none twice, none damaged
  int64_t resends = 0;
  for (int rail = 0; rail < 2; ++rail)
    resends += net.peer(0, net.nid(1, rail))["resends"].get<int64_t>();
  EXPECT_GE(resends, 1);

  // The client stops sealing its messages: the damage now reaches the handler.
  json set = net.cli(0, {"config", "set", "lnet.checksum=false"});
  ASSERT_TRUE(set.is_object()) << set.dump();
  json unchecked = ping("write", 1);
  EXPECT_GT(unchecked["failed"].get<int>(), 0) << unchecked.dump();
  EXPECT_GT(unchecked["errors"].value("PROTOCOL_ERROR", 0), 0) << unchecked.dump();
  std::printf(
      "damage on the wire, checksum on: %d writes and %d reads intact, %lld damaged "
      "requests and %lld damaged replies caught, %lld resends; checksum off: %d of %d "
      "writes reached the handler damaged\n",
      writes["ok"].get<int>(), reads["ok"].get<int>(), (long long)at_server, (long long)at_client,
      (long long)resends, unchecked["errors"].value("PROTOCOL_ERROR", 0), kRpcs);
}

// What TCP hides: a rail that drops 5% of its packets (nftables, outside pfsnet) carries
// every RPC -- TCP retransmits them -- and shows only as latency in pfsnet's own figures;
// the kernel's figures per path (peers -v) show the retransmissions, and the clean rail
// next to none.
TEST(NetnsTest, TcpInfoShowsTheRetransmitsOfALossyRail) {
  // 10 s RPCs (3.3 s per attempt): a segment lost twice waits out TCP's backed-off
  // retransmission timer without a remote timeout closing the connection (and its figures).
  TwoRails net(10);
  if (!net.skip().empty()) GTEST_SKIP() << net.skip();
  ASSERT_TRUE(net.ok());
  if (access("/usr/sbin/nft", X_OK) != 0) GTEST_SKIP() << "needs nftables";
  ASSERT_TRUE(net.lose(0, 5));
  for (int rail = 0; rail < 2; ++rail) {
    auto load = std::make_unique<Process>(std::vector<std::string>{
        PFSNET_BIN, "--socket", net.socket(0), "ping", net.nid(1, rail), "--count", "200", "--size",
        "65536", "--interval", "0", "--timeout", "10", "--json"});
    ASSERT_EQ(load->wait_exit(60000ms), 0) << load->output();
  }
  json p = net.cli(0, {"peers", "-v"});
  // Peer NID -> its path's kernel totals, closed connections included: a segment lost
  // several times over may outlast an attempt, and the remote timeout then closes the
  // lossy rail's connection (CI saw it 55 ms before this look); its figures stay.
  std::map<std::string, json> total, open;
  for (const json& n : p["peers"])
    for (const json& path : n.value("paths", json::array())) {
      if (path.contains("tcp_total")) total[n["nid"]] = path["tcp_total"];
      if (path.contains("tcp")) open[n["nid"]] = path["tcp"];
    }
  ASSERT_TRUE(total.count(net.nid(1, 0)) && total.count(net.nid(1, 1))) << p.dump();
  ASSERT_TRUE(open.count(net.nid(1, 1))) << p.dump();
  auto ratio = [](const json& t) {
    return double(t["retransmits"].get<uint64_t>()) /
           double(std::max<uint64_t>(1, t["segments_out"].get<uint64_t>()));
  };
  const json& lossy = total[net.nid(1, 0)];
  const json& clean = total[net.nid(1, 1)];
  EXPECT_GT(lossy["segments_out"].get<uint64_t>(), 200u) << lossy.dump();
  EXPECT_GT(lossy["retransmits"].get<uint64_t>(), 0u) << lossy.dump();
  EXPECT_GT(ratio(lossy), 0.005) << lossy.dump();
  // A clean rail on a busy machine may still send a tail-loss probe or two (CI saw 1 of
  // 9389 segments); it stays far below the lossy one.
  EXPECT_LT(ratio(clean), 0.002) << clean.dump();
  EXPECT_LT(ratio(clean), ratio(lossy) / 10) << clean.dump();
  const json& clean_now = open[net.nid(1, 1)];
  EXPECT_GT(clean_now["rtt_ms"].get<double>(), 0.0) << clean_now.dump();
  EXPECT_GT(clean_now["pmtu"].get<unsigned>(), 0u) << clean_now.dump();
  // The human view says it too.
  auto [rc, out] = run({PFSNET_BIN, "--socket", net.socket(0), "peers", "-v"});
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("tcp: over all its connections, retransmits"), std::string::npos) << out;
  std::printf("5%% drop: %llu of %llu segments retransmitted (%.2f%%), clean rail %llu of %llu\n",
              static_cast<unsigned long long>(lossy["retransmits"].get<uint64_t>()),
              static_cast<unsigned long long>(lossy["segments_out"].get<uint64_t>()),
              100 * ratio(lossy),
              static_cast<unsigned long long>(clean["retransmits"].get<uint64_t>()),
              static_cast<unsigned long long>(clean["segments_out"].get<uint64_t>()));
}

// Health that sees loss: a rail that drops 5% of its packets (nftables, outside pfsnet)
// still carries every RPC, so LNet health (errors only) leaves it at 1000. The slowness
// judgement calls its peer NI degraded (LOSSY) within seconds, selection leaves it for the
// clean rail, and once the drops stop the monitor's probes bring it back.
TEST(NetnsTest, ALossyRailIsCalledDegradedLeftAndTakenBackWhenClean) {
  TwoRails net(10);  // as above: TCP's backed-off retransmits stay within an attempt
  if (!net.skip().empty()) GTEST_SKIP() << net.skip();
  ASSERT_TRUE(net.ok());
  if (access("/usr/sbin/nft", X_OK) != 0) GTEST_SKIP() << "needs nftables";
  ASSERT_TRUE(net.lose(0, 5));
  // ~40 s of 64 KiB echoes to the server, on whichever rail selection picks.
  auto load = std::make_unique<Process>(std::vector<std::string>{
      PFSNET_BIN, "--socket", net.socket(0), "ping", net.nid(1, 0), "--count", "8000", "--size",
      "65536", "--interval", "0.005", "--timeout", "10", "--json"});
  auto degraded = [&](int rail) {  // "?" while the peer NI is not known yet
    json p = net.peer(0, net.nid(1, rail));
    return p.is_object() ? p.value("degraded", std::string("?")) : std::string("?");
  };
  double found = poll_until([&] { return degraded(0) == "LOSSY"; }, 30000ms);
  ASSERT_GE(found, 0) << net.cli(0, {"peers", "-v"}).dump() << net.daemon(0).output();
  std::printf("5%% drop on rail 1: its peer NI degraded (LOSSY) %.1f s after the load began\n",
              found);
  json lossy = net.peer(0, net.nid(1, 0));
  EXPECT_EQ(lossy["degraded_penalty"], 500) << lossy.dump();
  EXPECT_NE(lossy["degraded_evidence"].get<std::string>().find("TCP retransmitted"),
            std::string::npos)
      << lossy.dump();
  // Nothing healthy is called faulty: the clean rail's peer NI, and the local NIs (one
  // peer cannot tell a local fault from the peer's).
  EXPECT_EQ(degraded(1), "");
  EXPECT_EQ(net.ni(0, 0)["degraded"], "");
  EXPECT_EQ(net.ni(0, 1)["degraded"], "");
  // Selection leaves it: the clean rail takes nearly every new send (the lossy one gets
  // the monitor's probes, two a second).
  uint64_t r0 = sent(net.ni(0, 0)), r1 = sent(net.ni(0, 1));
  ASSERT_GE(poll_until([&] { return sent(net.ni(0, 1)) > r1 + 400; }, 20000ms), 0)
      << load->output();
  uint64_t d0 = sent(net.ni(0, 0)) - r0, d1 = sent(net.ni(0, 1)) - r1;
  EXPECT_LT(d0 * 10, d1) << "rail 1 " << d0 << ", rail 2 " << d1;
  auto [rc, out] = run({PFSNET_BIN, "--socket", net.socket(0), "peers"});
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("degraded (LOSSY)"), std::string::npos) << out;
  EXPECT_NE(net.daemon(0).output().find("is degraded (LOSSY)"), std::string::npos);
  // `pfsnet health` names it, and not the clean rail (as a faulty link: a settings advice
  // about it would be no fault).
  json h = net.cli(0, {"health"});
  bool named = false;
  for (const json& p : h.value("problems", json::array())) {
    named = named || (p["subject"] == net.nid(1, 0) && p["cause"] == "LOSSY");
    if (p["kind"] != "settings") {
      EXPECT_NE(p["subject"], net.nid(1, 1)) << h.dump();
    }
  }
  EXPECT_TRUE(named) << h.dump();
  // The drops stop: the probes (a 64 KiB echo a second) show a clean window, and the peer
  // NI is healthy again after the damping.
  ASSERT_TRUE(net.nft(1, "delete table inet pfsloss\n"));
  double back = poll_until([&] { return degraded(0).empty(); }, 60000ms);
  ASSERT_GE(back, 0) << net.cli(0, {"peers", "-v"}).dump();
  std::printf("drops stopped: healthy again after %.1f s\n", back);
  // The end says how long it lasted.
  EXPECT_NE(net.daemon(0).output().find("is no longer degraded (was LOSSY, for "),
            std::string::npos);
  load->kill(SIGKILL);
}

TEST(NetnsTest, KilledPeerFailsEveryRpcWithinTheTimeoutWithItsKind) {
  TwoRails net;
  if (!net.skip().empty()) GTEST_SKIP() << net.skip();
  ASSERT_TRUE(net.ok());
  auto load = net.load(1000, "0.002", 3);
  ASSERT_GE(poll_until([&] { return sent(net.ni(0, 0)) + sent(net.ni(0, 1)) > 100; }, 10000ms), 0);
  net.daemon(1).kill(SIGKILL);
  ASSERT_EQ(net.daemon(1).wait_exit(5000ms), 128 + SIGKILL);
  ASSERT_EQ(load->wait_exit(60000ms), 1) << load->output();
  ASSERT_TRUE(load->wait_eof(5000ms));
  json summary = last_json_line(load->output());
  EXPECT_GT(summary["ok"].get<int>(), 50);
  EXPECT_GT(summary["failed"].get<int>(), 0);
  // Nothing listens any more: connections are refused.
  EXPECT_GE(summary["errors"].value("PEER_NI_CONNECT_ERROR", 0), 1) << summary.dump();
  EXPECT_LE(summary["total_max_ms"].get<double>(), 3000 + 500) << "within transaction_timeout";
  // The error names the attempts and the last failure's kind.
  auto [rc, out] = run(
      {PFSNET_BIN, "--socket", net.socket(0), "ping", net.nid(1, 1), "-c", "1", "--timeout", "3"},
      20000ms);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("PEER_NI_CONNECT_ERROR"), std::string::npos) << out;
  EXPECT_NE(out.find("failed after 3 attempts"), std::string::npos) << out;
}

TEST(NetnsTest, UnreachableAddressesGetTheirKinds) {
  TwoRails net(15);  // attempts of 5 s: longer than ARP's 3 s
  if (!net.skip().empty()) GTEST_SKIP() << net.skip();
  ASSERT_TRUE(net.ok());
  // No route to that network at all: ENETUNREACH at once.
  auto [rc, out] = run({PFSNET_BIN, "--socket", net.socket(0), "ping", "198.19.7.7@tcp", "-c", "1",
                        "--timeout", "15", "--json"},
                       30000ms);
  ASSERT_EQ(rc, 1) << out;
  EXPECT_EQ(last_json_line(out)["errors"]["PEER_NI_UNREACHABLE"], 1) << out;
  // On the rail's subnet, but no host answers ARP: EHOSTUNREACH after the ARP timeout.
  std::tie(rc, out) = run({PFSNET_BIN, "--socket", net.socket(0), "ping", "198.18.1.77@tcp", "-c",
                           "1", "--timeout", "15", "--json"},
                          30000ms);
  ASSERT_EQ(rc, 1) << out;
  EXPECT_EQ(last_json_line(out)["errors"]["PEER_NI_UNREACHABLE"], 1) << out;
  json p = net.peer(0, "198.18.1.77@tcp");
  EXPECT_GE(p["errors"]["PEER_NI_UNREACHABLE"].get<int>(), 1) << p.dump();
  EXPECT_EQ(net.ni(0, 0)["health"], 1000) << "a peer's failure is not the local NI's";
}

// pfsnet netverify on real links, faults made outside pfsnet: the two rails pass; then an
// MTU mismatch (one end 9000, the other 1500), a hop that drops packets over 1500 between
// two 9000 ends (one direction only), an asymmetric route (the server's route to the
// client's rail-1 address goes out of its rail-2 link) and a throttled direction (tbf) are
// each named as such, and nothing else fails with them.
TEST(NetnsTest, NetverifyNamesMtuMismatchSmallHopAsymmetricRouteAndThrottledDirection) {
  TwoRails net;
  if (!net.skip().empty()) GTEST_SKIP() << net.skip();
  ASSERT_TRUE(net.ok());
  auto verify = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {PFSNET_BIN, "--socket", net.socket(0), "netverify"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("--json");
    auto [rc, out] = run(argv, 120000ms);
    json j = last_json_line(out);
    EXPECT_TRUE(j.contains("nodes")) << out;
    return std::make_pair(rc, j);
  };
  // The checks of the one path to `peer`, by name -> {result, detail}.
  auto checks = [](const json& r) {
    std::map<std::string, std::pair<std::string, std::string>> m;
    if (!r.contains("nodes") || r["nodes"].empty() || r["nodes"][0]["paths"].empty()) return m;
    for (const json& c : r["nodes"][0]["paths"][0]["checks"])
      m[c["check"]] = {c["result"], c["detail"]};
    return m;
  };
  auto only_failed = [&](const json& r, const std::set<std::string>& want) {
    std::set<std::string> failed;
    for (const auto& [name, v] : checks(r))
      if (v.first == "FAIL") failed.insert(name);
    EXPECT_EQ(failed, want) << r.dump();
  };
  const std::string rail1 = net.nid(1, 0), rail2 = net.nid(1, 1);

  auto [rc, r] = verify({rail1, rail2, "--no-bandwidth"});
  EXPECT_EQ(rc, 0) << r.dump();
  EXPECT_EQ(r["passed"], 2) << r.dump();
  for (const json& n : r["nodes"]) {
    const json& f = n["paths"][0]["figures"];
    EXPECT_EQ(f["mtu_out"], 1500);
    EXPECT_EQ(f["mtu_back"], 1500);
  }

  // 1. MTU mismatch on rail 1: the client's end 9000, the server's 1500.
  ASSERT_TRUE(net.mtu(0, 0, 9000));
  std::tie(rc, r) = verify({rail1, "--no-bandwidth"});
  EXPECT_EQ(rc, 1);
  only_failed(r, {"mtu"});
  std::string want = "MTU mismatch: 9000 here (" + net.ifname(0, 0) + "), 1500 on server (" +
                     net.ifname(1, 0) + ")";
  EXPECT_EQ(checks(r)["mtu"].second.rfind(want, 0), 0u) << checks(r)["mtu"].second;
  EXPECT_EQ(r["nodes"][0]["paths"][0]["figures"]["mtu_out"], 1500) << r.dump();
  std::printf("MTU mismatch: %s\n", checks(r)["mtu"].second.c_str());
  ASSERT_TRUE(net.mtu(0, 0, 1500));

  // 2. Both ends of rail 2 at 9000, a hop that drops what is over 1500 on the way in.
  ASSERT_TRUE(net.mtu(0, 1, 9000) && net.mtu(1, 1, 9000));
  ASSERT_TRUE(net.nft(1,
                      "table inet pfshop {\n chain in {\n  type filter hook input priority 0; "
                      "policy accept;\n  ip saddr " +
                          TwoRails::addr(0, 1) + " ip length > 1500 drop\n }\n}\n"));
  std::tie(rc, r) = verify({rail2, "--no-bandwidth"});
  EXPECT_EQ(rc, 1);
  only_failed(r, {"mtu"});
  EXPECT_NE(checks(r)["mtu"].second.find("out carries 1500, not 4096 (both ends take 9000)"),
            std::string::npos)
      << checks(r)["mtu"].second;
  EXPECT_EQ(r["nodes"][0]["paths"][0]["figures"]["mtu_back"], 9000) << r.dump();
  std::printf("small hop: %s\n", checks(r)["mtu"].second.c_str());
  ASSERT_TRUE(net.nft(1, "delete table inet pfshop\n"));
  ASSERT_TRUE(net.mtu(0, 1, 1500) && net.mtu(1, 1, 1500));

  // 3. The server's route back to the client's rail-1 address leaves by its rail-2 link.
  ASSERT_TRUE(
      net.ip_in(1, {"route", "add", TwoRails::addr(0, 0) + "/32", "dev", net.ifname(1, 1)}));
  std::tie(rc, r) = verify({rail1, "--no-bandwidth"});
  EXPECT_EQ(rc, 1);
  only_failed(r, {"routing"});
  std::string routing = checks(r)["routing"].second;
  EXPECT_NE(routing.find("out of " + net.ifname(1, 1) + ", not " + net.ifname(1, 0)),
            std::string::npos)
      << routing;
  EXPECT_NE(routing.find("come back on " + net.ifname(0, 1)), std::string::npos) << routing;
  std::printf("asymmetric route: %s\n", routing.c_str());
  ASSERT_TRUE(net.ip_in(1, {"route", "del", TwoRails::addr(0, 0) + "/32"}));

  // 4. The client's rail-1 sends shaped to 20 Mbit/s (tbf): out is a fraction of back.
  ASSERT_TRUE(net.tc(0, {"qdisc", "add", "dev", net.ifname(0, 0), "root", "tbf", "rate", "20mbit",
                         "burst", "16kb", "latency", "200ms"}));
  std::tie(rc, r) = verify({rail1, "--size", "64K"});
  EXPECT_EQ(rc, 1);
  only_failed(r, {"bandwidth"});
  const json& f = r["nodes"][0]["paths"][0]["figures"];
  EXPECT_LT(f["write_mib_s"].get<double>(), 3.0) << r.dump();  // 20 Mbit/s = 2.4 MiB/s
  EXPECT_GT(f["read_mib_s"].get<double>(), 3 * f["write_mib_s"].get<double>()) << r.dump();
  std::printf("throttled: %s\n", checks(r)["bandwidth"].second.c_str());
  ASSERT_TRUE(net.tc(0, {"qdisc", "del", "dev", net.ifname(0, 0), "root"}));
}

// A cluster of nodes on two networks, as in a machine room: a namespace per node with one
// veth per network to a bridge (one per network) in a switch namespace; node i has
// 198.18.1.(10+i)@tcp and 198.18.2.(10+i)@tcp1. Node 0 is the MGS. The test creates and
// removes everything; it needs root (skipped otherwise).
class BridgedCluster {
 public:
  struct Node {
    std::string name, role;
    // > 0: both of its links are this slow (tbf each way) and its config says so
    // (net.speed_mbit): a second link class.
    int64_t link_mbit = 0;
  };
  BridgedCluster(std::vector<Node> nodes, const std::string& extra) : nodes_(std::move(nodes)) {
    ip_ = ip_bin();
    if (geteuid() != 0 || ip_.empty()) {
      skip_ = "needs root and iproute2";
      return;
    }
    tag_ = std::to_string(getpid() % 100000);
    sw_ = "pfsW" + tag_;
    if (!ip({"netns", "add", sw_})) {
      skip_ = "ip netns add failed (no network namespaces here)";
      return;
    }
    spaces_.push_back(sw_);
    for (int r = 0; r < 2; ++r) {
      std::string br = "br" + std::to_string(r);
      ok_ = ok_ && ip({"-n", sw_, "link", "add", br, "type", "bridge"}) &&
            ip({"-n", sw_, "link", "set", br, "up"});
    }
    for (size_t i = 0; i < nodes_.size() && ok_; ++i) {
      std::string ns = ns_of(i);
      ok_ = ip({"netns", "add", ns});
      if (!ok_) break;
      spaces_.push_back(ns);
      ok_ = ip({"-n", ns, "link", "set", "lo", "up"});
      for (int r = 0; r < 2 && ok_; ++r) {
        std::string sw_side = "s" + std::to_string(i) + "r" + std::to_string(r) + "_" + tag_;
        ok_ = ip({"link", "add", ifname(i, r), "netns", ns, "type", "veth", "peer", "name", sw_side,
                  "netns", sw_}) &&
              ip({"-n", sw_, "link", "set", sw_side, "master", "br" + std::to_string(r)}) &&
              ip({"-n", sw_, "link", "set", sw_side, "up"}) &&
              ip({"-n", ns, "addr", "add", addr(i, r) + "/24", "dev", ifname(i, r)}) &&
              ip({"-n", ns, "link", "set", ifname(i, r), "up"});
      }
    }
    for (size_t i = 0; i < nodes_.size() && ok_; ++i)
      for (int r = 0; r < 2 && ok_; ++r) ok_ = wait_carrier(i, r);
    // The slower class: a shaper each way (the node's side, and the switch's side of its veth).
    for (size_t i = 0; i < nodes_.size() && ok_; ++i) {
      if (nodes_[i].link_mbit <= 0) continue;
      std::string rate = std::to_string(nodes_[i].link_mbit) + "mbit";
      for (int r = 0; r < 2 && ok_; ++r) {
        std::string sw_side = "s" + std::to_string(i) + "r" + std::to_string(r) + "_" + tag_;
        for (const auto& [ns, dev] : {std::pair{ns_of(i), ifname(i, r)}, std::pair{sw_, sw_side}})
          ok_ = ok_ && ip({"netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf",
                           "rate", rate, "burst", "32kb", "latency", "20ms"});
      }
    }
    if (!ok_) return;
    write_file(dir_.file("cluster.key"), "bridged-netns-test-cluster-key-01", 0600);
    for (size_t i = 0; i < nodes_.size() && ok_; ++i) {
      socket_.push_back(dir_.file(nodes_[i].name + ".sock"));
      std::string cfg = dir_.file(nodes_[i].name + ".toml");
      write_file(cfg, "[node]\nname = \"" + nodes_[i].name + "\"\ncluster_key_file = \"" +
                          dir_.file("cluster.key") + "\"\nadmin_socket = \"" + socket_[i] +
                          "\"\nroles = [\"" + nodes_[i].role + "\"]\nmgs = [\"" + nid(0, 0) +
                          "\"]\n[[net]]\nnid = \"" + nid(i, 0) + "\"\n" + speed(i) +
                          "[[net]]\nnid = \"" + nid(i, 1) + "\"\n" + speed(i) + extra);
      daemon_.push_back(std::make_unique<Process>(
          std::vector<std::string>{ip_, "netns", "exec", ns_of(i), PFSNETD_BIN, "--config", cfg}));
    }
    for (size_t i = 0; i < daemon_.size() && ok_; ++i)
      ok_ = daemon_[i]->wait_for_output("pfsnetd started", 15000ms);
  }

  // Node i's daemon killed (by PID, reaped) and started again with its config.
  bool restart(size_t i) {
    daemon_[i].reset();
    daemon_[i] = std::make_unique<Process>(
        std::vector<std::string>{ip_, "netns", "exec", ns_of(i), PFSNETD_BIN, "--config",
                                 dir_.file(nodes_[i].name + ".toml")});
    return daemon_[i]->wait_for_output("pfsnetd started", 15000ms);
  }

  ~BridgedCluster() {
    for (auto& d : daemon_) d.reset();                // SIGKILL by PID (a stopped one too), reaped
    for (auto& n : spaces_) ip({"netns", "del", n});  // removes the veths and bridges
  }

  const std::string& skip() const { return skip_; }
  bool ok() const { return ok_; }
  size_t size() const { return nodes_.size(); }
  const std::string& name(size_t i) const { return nodes_[i].name; }
  static std::string addr(size_t i, int rail) {
    return "198.18." + std::to_string(rail + 1) + "." + std::to_string(10 + i);
  }
  static std::string nid(size_t i, int rail) { return addr(i, rail) + (rail ? "@tcp1" : "@tcp"); }
  std::string ifname(size_t i, int rail) const {
    return "n" + std::to_string(i) + "r" + std::to_string(rail) + "_" + tag_;
  }
  Process& daemon(size_t i) { return *daemon_[i]; }
  const std::string& socket(size_t i) const { return socket_[i]; }
  // `ip -n NODE ARGS...`.
  bool ip_in(size_t i, std::vector<std::string> args) {
    args.insert(args.begin(), {"-n", ns_of(i)});
    return ip(std::move(args));
  }
  // A command in node i's namespace (nft, tc).
  bool exec_in(size_t i, std::vector<std::string> argv) {
    argv.insert(argv.begin(), {ip_, "netns", "exec", ns_of(i)});
    auto [rc, out] = run(argv, 10000ms);
    if (rc != 0) std::fprintf(stderr, "%s failed (%d): %s\n", argv[4].c_str(), rc, out.c_str());
    return rc == 0;
  }
  bool nft(size_t i, const std::string& script) {
    std::string f = dir_.file("rules" + std::to_string(i) + ".nft");
    write_file(f, script);
    return exec_in(i, {"nft", "-f", f});
  }
  // `pfsnet <args> --json` against node i's daemon; null when it fails.
  json cli(size_t i, std::vector<std::string> args) {
    std::vector<std::string> argv = {PFSNET_BIN, "--socket", socket_[i]};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("--json");
    auto [rc, out] = run(argv, 30000ms);
    return rc == 0 ? last_json_line(out) : json();
  }

 private:
  std::string ns_of(size_t i) const { return "pfsN" + std::to_string(i) + "_" + tag_; }
  std::string speed(size_t i) const {
    return nodes_[i].link_mbit > 0 ? "speed_mbit = " + std::to_string(nodes_[i].link_mbit) + "\n"
                                   : "";
  }
  bool ip(std::vector<std::string> args) {
    args.insert(args.begin(), ip_);
    auto [rc, out] = run(args, 10000ms);
    if (rc != 0) std::fprintf(stderr, "ip failed (%d): %s\n", rc, out.c_str());
    return rc == 0;
  }
  bool wait_carrier(size_t i, int rail) {
    for (int k = 0; k < 100; ++k) {
      auto [rc, out] = run({ip_, "-n", ns_of(i), "link", "show", "dev", ifname(i, rail)}, 5000ms);
      if (rc == 0 && out.find("LOWER_UP") != std::string::npos) return true;
      std::this_thread::sleep_for(50ms);  // polling the kernel's link state, bounded (5 s)
    }
    std::fprintf(stderr, "no carrier on %s\n", ifname(i, rail).c_str());
    return false;
  }

  std::vector<Node> nodes_;
  std::string ip_, skip_, tag_, sw_;
  bool ok_ = true;
  std::vector<std::string> spaces_;
  TempDir dir_;
  std::vector<std::string> socket_;
  std::vector<std::unique_ptr<Process>> daemon_;
};

// Issue 14's test of fault finding: ten nodes on two bridged networks, the six faults an
// operator meets injected from outside pfsnet, each on its own server and all at once --
// a killed server, a stopped one (SIGSTOP), a link set down, a link throttled (tbf), a
// link dropping 5% of its packets (nftables), an MTU mismatch (one end 9000 on a 1500
// link). `pfsnet health` on a client that talks to none of them names each culprit and
// its cause within 60 s, and nothing healthy. The probe mesh runs 5x faster than its
// defaults (so the test takes a minute, not five), and its outlier factor is 6, not 3:
// ten daemons and the load on two cores make a 128 KiB bulk probe measure the scheduler
// too -- in CI a healthy path's best probes, both ways, came 3.4x and 3.3x below the
// median (138 and 129 MiB/s of 462 and 429) and it was named THROTTLED. The faults are far
// past 6x: the tbf link carries 2.4 MiB/s. The other keys are the defaults.
//
// Not under a sanitizer: ten sanitized daemons probing at 5x overload two cores, and the
// mesh then measures the scheduler (CI's ASan run saw healthy paths' p50 at 12-44 ms
// against a 4 ms median before any fault). The code it runs is covered there by the mesh,
// cluster-health and other netns tests.
TEST(NetnsTest, HealthOnAnotherNodeNamesSixFaultsInjectedFromOutside) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "timing-bound: ten sanitized daemons overload this host";
#endif
  const std::vector<BridgedCluster::Node> nodes = {
      {"mgs", "mgs"},   {"c1", "client"}, {"c2", "client"}, {"s1", "server"}, {"s2", "server"},
      {"s3", "server"}, {"s4", "server"}, {"s5", "server"}, {"s6", "server"}, {"s7", "server"}};
  enum { kMgs, kC1, kC2, kKilled, kStopped, kLinkDown, kThrottled, kLossy, kMtu, kHealthy };
  BridgedCluster c(nodes,
                   "[lnet]\ntransaction_timeout = 10\n"
                   "[mesh]\ninterval = 1\nbulk_interval = 5\nreport_interval = 3\nwindow = 20\n"
                   "outlier_factor = 6.0\n");
  if (!c.skip().empty()) GTEST_SKIP() << c.skip();
  if (access("/usr/sbin/nft", X_OK) != 0) GTEST_SKIP() << "needs nftables";
  ASSERT_TRUE(c.ok());
  auto problems = [&]() {
    json h = c.cli(kC2, {"health"});
    return h.is_object() ? h.value("problems", json::array()) : json::array();
  };
  auto faults_only = [](const json& ps) {  // settings advice is not a fault
    json out = json::array();
    for (const json& p : ps)
      if (p["kind"] != "settings") out.push_back(p);
    return out;
  };
  // A healthy cluster first: every node up, every node's mesh row with its MTUs in, and
  // nothing wrong.
  json ps;
  double healthy = poll_until(
      [&] {
        json t = c.cli(kC2, {"status"});
        if (!t.is_object() || t.value("nodes", json::array()).size() != c.size()) return false;
        for (const json& n : t["nodes"])
          if (n["state"] != "up") return false;
        json m = c.cli(kC2, {"mesh"});
        if (!m.is_object() || m["rows"].size() != c.size()) return false;
        for (const json& r : m["rows"]) {
          if (r["cells"].size() != 2 * 8) return false;  // 8 peers (mesh.peers), 2 rails
          for (const json& cell : r["cells"])
            if (cell["peer_mtu"] == 0 || cell["write_mib_s"] == 0 || cell["read_mib_s"] == 0)
              return false;
        }
        ps = faults_only(problems());
        return ps.empty();
      },
      90000ms);
  ASSERT_GE(healthy, 0) << "not healthy before the faults: " << ps.dump() << "\n"
                        << c.cli(kC2, {"mesh"}).dump();
  // Each row reports its node's two NIs with the veth's speed (the kernel's, through
  // ethtool, in the node's namespace) and the traffic their interfaces carried.
  for (const json& r : c.cli(kC2, {"mesh"})["rows"]) {
    ASSERT_EQ(r["nis"].size(), 2u) << r.dump();
    for (const json& n : r["nis"]) {
      EXPECT_EQ(n["speed_mbit"], 10000) << r.dump();
      EXPECT_GT(n["rx_peak_mib_s"].get<double>(), 0) << r.dump();
    }
  }
  // c1 works with every server: a 16 KiB echo every 10 ms to each (their rail-1 NIDs; the
  // other rail is used too).
  std::vector<std::unique_ptr<Process>> loads;
  for (size_t s = kKilled; s <= kHealthy; ++s)
    loads.push_back(std::make_unique<Process>(std::vector<std::string>{
        PFSNET_BIN, "--socket", c.socket(kC1), "ping", BridgedCluster::nid(s, 0), "--count",
        "20000", "--size", "16384", "--interval", "0.01", "--timeout", "10"}));
  ASSERT_GE(poll_until(
                [&] {
                  for (auto& l : loads)
                    if (l->output().find("reply from") == std::string::npos) return false;
                  return true;
                },
                20000ms),
            0)
      << "every load under way";

  // The faults, all from outside pfsnet.
  auto t0 = Clock::now();
  c.daemon(kKilled).kill(SIGKILL);
  ASSERT_TRUE(c.daemon(kStopped).stop());
  ASSERT_TRUE(c.ip_in(kLinkDown, {"link", "set", c.ifname(kLinkDown, 0), "down"}));
  ASSERT_TRUE(
      c.exec_in(kThrottled, {"tc", "qdisc", "add", "dev", c.ifname(kThrottled, 0), "root", "tbf",
                             "rate", "20mbit", "burst", "16kb", "latency", "200ms"}));
  ASSERT_TRUE(c.nft(kLossy,
                    "table inet pfsloss {\n chain in {\n  type filter hook input priority "
                    "0; policy accept;\n  iifname \"" +
                        c.ifname(kLossy, 0) + "\" numgen random mod 100 < 5 drop\n }\n}\n"));
  ASSERT_TRUE(c.ip_in(kMtu, {"link", "set", c.ifname(kMtu, 0), "mtu", "9000"}));

  // What names each: its subject -- a node, or an NI ("NID" or "NID (node)") -- and cause.
  auto nid1 = [](size_t i) { return BridgedCluster::nid(i, 0); };
  auto names = [](const json& p, const std::string& who) {
    std::string s = p["subject"];
    return s == who || s.rfind(who + " (", 0) == 0;
  };
  // A path ("a -> b (NID -> NID)") stands out because of either end.
  auto mentions = [&](const json& p, const std::string& who) {
    std::string s = p["subject"];
    return names(p, who) || s.rfind(who + " ->", 0) == 0 ||
           s.find("-> " + who + " (") != std::string::npos ||
           s.find("(" + who + " ->") != std::string::npos ||
           s.find("-> " + who + ")") != std::string::npos;
  };
  struct Want {
    const char* fault;
    std::string who;
    std::set<std::string> causes;
    double found = -1;
  };
  std::vector<Want> want = {
      {"killed", c.name(kKilled), {"DEAD"}},    {"stopped", c.name(kStopped), {"DEAD", "SUSPECT"}},
      {"link down", nid1(kLinkDown), {"DOWN"}}, {"tbf", nid1(kThrottled), {"THROTTLED", "SLOW"}},
      {"5% drops", nid1(kLossy), {"LOSSY"}},    {"MTU 9000", nid1(kMtu), {"MTU"}}};
  size_t left = want.size();
  for (int round = 0; round < 100 && left > 0 && Clock::now() - t0 < 75s; ++round) {
    ps = faults_only(problems());
    double at = std::chrono::duration<double>(Clock::now() - t0).count();
    for (Want& w : want)
      if (w.found < 0)
        for (const json& p : ps)
          if (names(p, w.who) && w.causes.count(p["cause"])) {
            w.found = at;
            --left;
            break;
          }
    if (left > 0) std::this_thread::sleep_for(1s);  // the next look, not a sync
  }
  for (const Want& w : want) {
    EXPECT_GE(w.found, 0) << w.fault << " (" << w.who << ") not named: " << ps.dump(1);
    EXPECT_LE(w.found, 60.0) << w.fault;
    std::printf("%-9s named after %5.1f s\n", w.fault, w.found);
  }
  // Nothing healthy named: every entry is about a culprit -- a faulty node (any of its
  // NIs), or the faulty NI of the others (their other rail is healthy).
  std::vector<std::string> culprits = {c.name(kKilled), c.name(kStopped)};
  for (size_t s : {kKilled, kStopped})
    for (int r = 0; r < 2; ++r) culprits.push_back(BridgedCluster::nid(s, r));
  for (size_t s : {kLinkDown, kThrottled, kLossy, kMtu}) culprits.push_back(nid1(s));
  for (const json& p : ps) {
    bool ok = false;
    for (const std::string& who : culprits) ok = ok || mentions(p, who);
    EXPECT_TRUE(ok) << "a healthy part named: " << p.dump();
  }
  // The shaped link's drops (its queue full) are congestion: never LOSSY.
  for (const json& p : ps) {
    EXPECT_FALSE(mentions(p, nid1(kThrottled)) && p["cause"] == "LOSSY")
        << "congestion called loss: " << p.dump();
  }
  std::printf("health on c2 after the faults:\n");
  for (const json& p : ps)
    std::printf("  %-6s %-48s %-9s seen by %s\n", p["kind"].get<std::string>().c_str(),
                p["subject"].get<std::string>().c_str(), p["cause"].get<std::string>().c_str(),
                p["seen_by"].get<std::string>().c_str());
}

}  // namespace
}  // namespace pfsnet::testing

namespace pfsnet::testing {
namespace {

// The health tests' settings: the mesh at 5x its default rates with a 20 s window, and a
// 10 s transaction timeout, so that a fault is named and ends in seconds.
constexpr const char* kFastHealth =
    "[lnet]\ntransaction_timeout = 10\n"
    "[mesh]\ninterval = 1\nbulk_interval = 5\nreport_interval = 2\nwindow = 20\n";

// `pfsnet health` on node i: its problems, the settings advice left out (not a fault).
json faults_at(BridgedCluster& c, size_t i) {
  json h = c.cli(i, {"health"});
  json out = json::array();
  if (!h.is_object()) return out;
  for (const json& p : h.value("problems", json::array()))
    if (p["kind"] != "settings") out.push_back(p);
  return out;
}

// Issue 34, item 3: nodes that cannot reach each other are one partition. Six nodes on two
// bridged networks; s1 and s2 drop every packet on network 2 (tcp1) from and to the others
// (nftables in their namespaces), so tcp1 is split into {c1, c2, mgs, s3} and {s1, s2}
// while tcp carries on. `pfsnet health` on c2 lists one problem -- the partition, with its
// sides -- and not the peer NIs, paths and mesh culprits it explains; healed, nothing.
TEST(NetnsTest, ASplitNetworkIsOnePartitionAndEndsWhenHealed) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "timing-bound: six sanitized daemons probing at 5x overload this host";
#endif
  const std::vector<BridgedCluster::Node> nodes = {{"mgs", "mgs"},   {"c1", "client"},
                                                   {"c2", "client"}, {"s1", "server"},
                                                   {"s2", "server"}, {"s3", "server"}};
  enum { kMgs, kC1, kC2, kS1, kS2, kS3 };
  BridgedCluster c(nodes, kFastHealth);
  if (!c.skip().empty()) GTEST_SKIP() << c.skip();
  if (access("/usr/sbin/nft", X_OK) != 0) GTEST_SKIP() << "needs nftables";
  ASSERT_TRUE(c.ok());
  auto faults = [&] { return faults_at(c, kC2); };
  json ps;
  double healthy = poll_until(
      [&] {
        json m = c.cli(kC2, {"mesh"});
        if (!m.is_object() || m["rows"].size() != c.size()) return false;
        for (const json& r : m["rows"])
          if (r["cells"].size() != 2 * (c.size() - 1)) return false;
        ps = faults();
        return ps.empty();
      },
      90000ms);
  ASSERT_GE(healthy, 0) << "not healthy before the split: " << ps.dump();
  // c1 keeps small RPCs going to every server (either network).
  std::vector<std::unique_ptr<Process>> loads;
  for (size_t s : {kS1, kS2, kS3})
    loads.push_back(std::make_unique<Process>(std::vector<std::string>{
        PFSNET_BIN, "--socket", c.socket(kC1), "ping", BridgedCluster::nid(s, 1), "--count",
        "20000", "--size", "4096", "--interval", "0.02", "--timeout", "10"}));
  std::string others;
  for (size_t i : {kMgs, kC1, kC2, kS3})
    others += (others.empty() ? "" : ", ") + BridgedCluster::addr(i, 1);
  const std::string split =
      "table inet split {\n"
      "  chain in {\n    type filter hook input priority 0;\n"
      "    ip saddr { " +
      others +
      " } drop;\n  }\n"
      "  chain out {\n    type filter hook output priority 0;\n"
      "    ip daddr { " +
      others +
      " } drop;\n  }\n"
      "}\n";
  ASSERT_TRUE(c.nft(kS1, split));
  ASSERT_TRUE(c.nft(kS2, split));
  auto only_the_partition = [&](const json& v) {
    return v.size() == 1 && v[0]["kind"] == "network" && v[0]["subject"] == "tcp1" &&
           v[0]["cause"] == "PARTITION" &&
           v[0]["evidence"].get<std::string>().find("c1,c2,mgs,s3 | s1,s2") != std::string::npos;
  };
  double named = poll_until(
      [&] {
        ps = faults();
        return only_the_partition(ps);
      },
      60000ms);
  ASSERT_GE(named, 0) << "the partition was not named alone: " << ps.dump();
  // And it stays the only line while the split lasts: ten more looks, a second apart.
  int extra = 0;
  for (int i = 0; i < 10; ++i) {
    ps = faults();
    if (!only_the_partition(ps)) {
      ++extra;
      std::printf("  look %d: %s\n", i, ps.dump().c_str());
    }
    std::this_thread::sleep_for(1s);  // the next look, not a sync
  }
  EXPECT_EQ(extra, 0);
  ASSERT_TRUE(c.exec_in(kS1, {"nft", "delete", "table", "inet", "split"}));
  ASSERT_TRUE(c.exec_in(kS2, {"nft", "delete", "table", "inet", "split"}));
  json last;  // what was listed last while the heal was being seen
  double cleared = poll_until(
      [&] {
        ps = faults();
        if (!ps.empty()) last = ps;
        return ps.empty();
      },
      60000ms);
  EXPECT_GE(cleared, 0) << "still listed after the split healed: " << ps.dump();
  std::printf("  last listed after the heal: %s\n", last.dump().c_str());
  // The bound: the partition line goes with the first probe answered across it, but the
  // probes it cost stay in the paths' windows (mesh.window, 20 s here) and mark them LOSSY
  // until they leave, and the rows reach the MGS every report_interval (2 s): window + two
  // syncs + a look's few seconds. Measured: 24.0-24.6 s.
  EXPECT_LE(cleared, 20 + 2 * 2 + 6.0) << "the bound for a partition after the heal";
  std::printf("partition of tcp1: named alone after %.1f s, gone %.1f s after the heal\n", named,
              cleared);
  for (auto& l : loads) l->kill(SIGKILL);
}

// Issue 34, item 1's second half: each fault class alone, on one server (s1) -- killed,
// stopped, its link set down, shaped, dropping 5% at random, starved of CPU (a cgroup
// quota of 1% of a core), at another MTU -- healed in
// between, under load. `pfsnet health` on c2 (which talks to none of the servers) names it
// with the right cause within 60 s, lists nothing that is not about s1 the whole time, and
// lists nothing within each cause's bound once it is healed (the same server every time: a
// problem that outlived its fault would be named in the next one). The bounds (mesh at
// interval 1, report_interval 2, window 20; transaction_timeout 10):
//   DEAD (killed, restarted)    the restart's registration and the next table: 15 s
//   DEAD/SUSPECT (SIGCONT)      its next ping to the MGS: 15 s
//   DOWN (link up again)        the link monitor at once; other nodes' failed sends to it
//                               heal with their next recovery ping -- but the retransmits
//                               that cross the heal may make a peer call it LOSSY, which
//                               ends as LOSSY does: 30 s
//   THROTTLED/SLOW (tbf gone)   the mesh's window: 20 s + two syncs + a look: 30 s
//   LOSSY (drops gone)          200 clean segments, or the window's lost probes: 30 s
//   CPU (quota lifted)          s1's own five fed seconds and a report; what it explained
//                               meanwhile (its peers' SLOW views, the mesh's late probes)
//                               ends as SLOW does: 30 s
//   MTU (set back)              the next small probe and sync: 15 s
// Prints time to name, false alarms and time to clear for each.
TEST(NetnsTest, EachFaultAloneIsNamedAloneAndEndsWithinItsBoundWhenHealed) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "timing-bound: seven sanitized daemons probing at 5x overload this host";
#endif
  const std::vector<BridgedCluster::Node> nodes = {
      {"mgs", "mgs"},   {"c1", "client"}, {"c2", "client"}, {"s1", "server"},
      {"s2", "server"}, {"s3", "server"}, {"s4", "server"}};
  enum { kMgs, kC1, kC2, kS1 };
  BridgedCluster c(nodes, kFastHealth);
  if (!c.skip().empty()) GTEST_SKIP() << c.skip();
  if (access("/usr/sbin/nft", X_OK) != 0) GTEST_SKIP() << "needs nftables";
  ASSERT_TRUE(c.ok());
  auto faults = [&] { return faults_at(c, kC2); };
  json ps;
  ASSERT_GE(poll_until(
                [&] {
                  json m = c.cli(kC2, {"mesh"});
                  if (!m.is_object() || m["rows"].size() != c.size()) return false;
                  for (const json& r : m["rows"])
                    for (const json& cell : r["cells"])
                      if (cell["peer_mtu"] == 0) return false;
                  ps = faults();
                  return ps.empty();
                },
                90000ms),
            0)
      << "not healthy before the faults: " << ps.dump();
  // c1 works with every server: a 16 KiB echo every 20 ms to each.
  std::vector<std::unique_ptr<Process>> loads;
  for (size_t s = kS1; s < c.size(); ++s)
    loads.push_back(std::make_unique<Process>(std::vector<std::string>{
        PFSNET_BIN, "--socket", c.socket(kC1), "ping", BridgedCluster::nid(s, 0), "--count",
        "100000", "--size", "16384", "--interval", "0.02", "--timeout", "10"}));
  const std::string s1 = c.name(kS1), ni = BridgedCluster::nid(kS1, 0);
  const std::string dev = c.ifname(kS1, 0);
  const std::string starve = "/sys/fs/cgroup/cpu/pfsnet_starve_" + std::to_string(getpid());
  // About s1: naming it or its addresses, or s1's own view (after a stop, its timers).
  auto about_s1 = [&](const json& p) {
    std::string t = p["subject"].get<std::string>() + " " + p.value("evidence", "") + " " +
                    p.value("seen_by", "");
    return t.find(s1) != std::string::npos ||
           t.find(BridgedCluster::addr(kS1, 0)) != std::string::npos ||
           t.find(BridgedCluster::addr(kS1, 1)) != std::string::npos;
  };
  struct Fault {
    const char* name;
    std::string subject;           // what must be named (a node, or an NI: "NID" or "NID (node)")
    std::set<std::string> causes;  // with one of these
    double bound;                  // seconds from the heal to an empty list
    std::function<bool()> inject, heal;
  };
  // Every thread of s1's daemon in a cgroup with `quota_us` of one core per `period_us`
  // (cgroup v1 cpu), then back in the root cgroup.
  auto cpu_fault = [&](const char* name, int period_us, int quota_us) {
    return Fault{name,
                 s1,
                 {"CPU"},
                 30,
                 [&, period_us, quota_us] {
                   if (access("/sys/fs/cgroup/cpu/cgroup.procs", W_OK) != 0) return false;
                   ::mkdir(starve.c_str(), 0755);
                   write_file(starve + "/cpu.cfs_period_us", std::to_string(period_us) + "\n");
                   write_file(starve + "/cpu.cfs_quota_us", std::to_string(quota_us) + "\n");
                   write_file(starve + "/cgroup.procs", std::to_string(c.daemon(kS1).pid()) + "\n");
                   return true;
                 },
                 [&] {
                   write_file("/sys/fs/cgroup/cpu/cgroup.procs",
                              std::to_string(c.daemon(kS1).pid()) + "\n");
                   return ::rmdir(starve.c_str()) == 0;
                 }};
  };
  std::vector<Fault> all = {
      {"killed",
       s1,
       {"DEAD"},
       15,
       [&] {
         c.daemon(kS1).kill(SIGKILL);
         return true;
       },
       [&] { return c.restart(kS1); }},
      {"stopped",
       s1,
       {"DEAD", "SUSPECT"},
       15,
       [&] { return c.daemon(kS1).stop(); },
       [&] {
         c.daemon(kS1).kill(SIGCONT);
         return true;
       }},
      {"link down",
       ni,
       {"DOWN"},
       30,
       [&] {
         return c.ip_in(kS1, {"link", "set", dev, "down"});
       },
       [&] {
         return c.ip_in(kS1, {"link", "set", dev, "up"});
       }},
      {"tbf",
       ni,
       {"THROTTLED", "SLOW"},
       30,
       [&] {
         return c.exec_in(kS1, {"tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", "20mbit",
                                "burst", "16kb", "latency", "200ms"});
       },
       [&] {
         return c.exec_in(kS1, {"tc", "qdisc", "del", "dev", dev, "root"});
       }},
      {"5% drops",
       ni,
       {"LOSSY"},
       30,
       [&] {
         return c.nft(kS1,
                      "table inet pfsloss {\n chain in {\n  type filter hook input priority "
                      "0; policy accept;\n  iifname \"" +
                          dev + "\" numgen random mod 100 < 5 drop\n }\n}\n");
       },
       [&] {
         return c.exec_in(kS1, {"nft", "delete", "table", "inet", "pfsloss"});
       }},
      cpu_fault("CPU 1%", 100000, 1000),        // 1 ms every 100 ms
      cpu_fault("CPU 10ms/s", 1000000, 10000),  // 10 ms every second: long stalls
      {"MTU 9000",
       ni,
       {"MTU"},
       15,
       [&] {
         return c.ip_in(kS1, {"link", "set", dev, "mtu", "9000"});
       },
       [&] {
         return c.ip_in(kS1, {"link", "set", dev, "mtu", "1500"});
       }},
  };
  int total_false = 0, named_all = 0;
  for (Fault& f : all) {
    ASSERT_TRUE(f.inject()) << f.name;
    int false_alarms = 0;
    json last;
    // A look at c2's list, counting (and printing the first few of) what is not about s1.
    auto look = [&] {
      ps = faults();
      for (const json& p : ps)
        if (!about_s1(p) && false_alarms++ < 3)
          std::printf("  %s: not about s1: %s\n", f.name, p.dump().c_str());
    };
    double named = poll_until(
        [&] {
          look();
          for (const json& p : ps) {
            std::string subj = p["subject"];
            bool names = subj == f.subject || subj.rfind(f.subject + " (", 0) == 0;
            if (names && f.causes.count(p["cause"].get<std::string>())) return true;
          }
          return false;
        },
        60000ms);
    EXPECT_GE(named, 0) << f.name << " not named: " << ps.dump();
    ASSERT_TRUE(f.heal()) << f.name;
    double cleared = poll_until(
        [&] {
          look();
          if (!ps.empty()) last = ps;
          return ps.empty();
        },
        90000ms);
    EXPECT_GE(cleared, 0) << f.name << ": still listed after the heal: " << ps.dump();
    EXPECT_LE(cleared, f.bound) << f.name << ": the last listed: " << last.dump();
    EXPECT_EQ(false_alarms, 0) << f.name;
    total_false += false_alarms;
    named_all += named >= 0;
    std::printf(
        "%-9s named after %5.1f s, %d false alarm(s), gone %5.1f s after the heal "
        "(bound %g s)%s%s\n",
        f.name, named, false_alarms, cleared, f.bound,
        last.empty() ? "" : "; last: ", last.empty() ? "" : last.dump().substr(0, 300).c_str());
  }
  std::printf("%d of %zu fault classes named alone; %d false alarm(s) in all\n", named_all,
              all.size(), total_false);
  for (auto& l : loads) l->kill(SIGKILL);
}

// Issue 34's first property: a healthy cluster under mixed load lists nothing. Eight
// nodes, each on its own veth to a bridge per rail, two of the servers on a slower link
// class (50 Mbit/s by tbf, and speed_mbit = 50 in their config); the clients keep small
// echoes and 1 MiB writes going to every server; `pfsnet health` on every node is asked
// every two seconds and any problem it lists is a false alarm, counted and printed (the
// first of each kind whole).
//
// ctest runs it for 60 s (regular build; run alone: it needs the two cores);
// scripts/quiet_cluster.sh for 600 s or PFSNET_QUIET_SECONDS. Its figures, before and
// after each rule that made it true, are in the README.
TEST(NetnsTest, AQuietClusterUnderLoadListsNothing) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "timing-bound: eight sanitized daemons under load overload this host";
#endif
  const char* env = std::getenv("PFSNET_QUIET_SECONDS");
  int seconds = env ? std::max(10, std::atoi(env)) : 60;
  const std::vector<BridgedCluster::Node> nodes = {
      {"mgs", "mgs"},   {"c1", "client"}, {"c2", "client"},     {"s1", "server"},
      {"s2", "server"}, {"s3", "server"}, {"s4", "server", 50}, {"s5", "server", 50}};
  BridgedCluster c(nodes, "[mesh]\ninterval = 1\nbulk_interval = 5\nreport_interval = 3\n");
  if (!c.skip().empty()) GTEST_SKIP() << c.skip();
  ASSERT_TRUE(c.ok());
  auto problems = [&](size_t i) {
    json h = c.cli(i, {"health"});
    return h.is_object() ? h.value("problems", json::array()) : json::array();
  };
  // Up: every node in the MGS's table and every mesh row in.
  double up = poll_until(
      [&] {
        json t = c.cli(1, {"status"});
        if (!t.is_object() || t.value("nodes", json::array()).size() != c.size()) return false;
        for (const json& n : t["nodes"])
          if (n["state"] != "up") return false;
        json m = c.cli(1, {"mesh"});
        return m.is_object() && m["rows"].size() == c.size();
      },
      90000ms);
  ASSERT_GE(up, 0) << "the cluster did not come up";
  // The load: from each client to every server, 16 KiB echoes every 20 ms, and 1 MiB writes
  // (self-test, 4 in flight) on the first rail.
  std::vector<std::unique_ptr<Process>> loads;
  for (size_t cl : {size_t(1), size_t(2)})
    for (size_t s = 3; s < c.size(); ++s) {
      loads.push_back(std::make_unique<Process>(std::vector<std::string>{
          PFSNET_BIN, "--socket", c.socket(cl), "ping", BridgedCluster::nid(s, 0), "--count",
          std::to_string(seconds * 60), "--size", "16384", "--interval", "0.02", "--timeout",
          "10"}));
    }
  for (size_t cl : {size_t(1), size_t(2)}) {
    std::string to;
    for (size_t s = 3; s < c.size(); ++s) to += (to.empty() ? "" : ",") + BridgedCluster::nid(s, 0);
    std::vector<std::string> argv = {PFSNET_BIN, "--socket", c.socket(cl),
                                     "selftest", "--from",   BridgedCluster::nid(cl, 0),
                                     "--to",     to};
    for (const char* a :
         {"--test", "brw", "--size", "1M", "--concurrency", "4", "--distribute", "1:N"})
      argv.push_back(a);
    argv.push_back("--duration");
    argv.push_back(std::to_string(seconds + 10));
    loads.push_back(std::make_unique<Process>(argv));
  }
  auto t0 = Clock::now();
  int looks = 0, false_alarms = 0;
  std::map<std::string, int> seen;  // "node: kind subject cause" -> looks it was listed in
  std::set<std::string> examples;
  while (Clock::now() - t0 < std::chrono::seconds(seconds) && looks < 10000) {
    for (size_t i = 0; i < c.size(); ++i) {
      for (const json& p : problems(i)) {
        ++false_alarms;
        std::string what =
            p.value("kind", "") + " " + p.value("subject", "") + " " + p.value("cause", "");
        // The first of each kind of problem, whole (on any node).
        if (examples.insert(what).second)
          std::printf("  e.g. on %s: %s\n", c.name(i).c_str(), p.dump().c_str());
        seen[c.name(i) + ": " + what]++;
      }
    }
    ++looks;
    std::this_thread::sleep_for(2s);  // the next look, not a sync
  }
  std::printf("quiet cluster, %d s under load: %d looks at %zu nodes, %d problems listed\n",
              seconds, looks, c.size(), false_alarms);
  for (const auto& [what, n] : seen) std::printf("  %3d x %s\n", n, what.c_str());
  EXPECT_EQ(false_alarms, 0);
  for (auto& l : loads) l->kill(SIGKILL);
}

}  // namespace
}  // namespace pfsnet::testing
