// What the netns tests share: two namespaces joined by two rails (TwoRails), and polling
// an observation with a deadline. The test creates and removes everything; it needs root.
#pragma once

#include <sys/stat.h>

#include <cstdio>
#include <functional>
#include <set>

#include "cluster.h"

namespace pfsnet::testing::netns {

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

inline uint64_t sent(const json& ni) { return ni.is_null() ? 0 : ni["send_count"].get<uint64_t>(); }

}  // namespace pfsnet::testing::netns
