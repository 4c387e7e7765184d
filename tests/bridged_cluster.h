// A cluster of nodes in network namespaces on two bridged networks, for the health tests
// (netns_health_test.cc).
#pragma once

#include <sstream>

#include "netns_rails.h"

namespace pfsnet::testing::netns {

// A cluster of nodes on two networks, as in a machine room: a namespace per node with one
// veth per network to a bridge (one per network) in a switch namespace; node i has
// 198.18.1.(10+i)@tcp and 198.18.2.(10+i)@tcp1. The nodes of role "mgs" are the MGSs every
// node lists (node 0 in most tests); a node of role "etcd" runs an etcd member (client port
// 2379 on both its addresses) instead of a pfsnetd. The test creates and removes
// everything; it needs root (skipped otherwise).
class BridgedCluster {
 public:
  struct Node {
    std::string name, role;
    // > 0: both of its links are this slow (tbf each way) and its config says so
    // (net.speed_mbit): a second link class.
    int64_t link_mbit = 0;
  };
  // `ipv6`: every NI an IPv6 one (large NIDs): node i's are 2001:2:0:1::(10+i)@tcp and
  // 2001:2:0:2::(10+i)@tcp1, from the IPv6 benchmarking prefix.
  BridgedCluster(std::vector<Node> nodes, const std::string& extra, bool ipv6 = false)
      : nodes_(std::move(nodes)), ipv6_(ipv6) {
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
              (ipv6_ ? ip({"-n", ns, "addr", "add", address(i, r) + "/64", "dev", ifname(i, r),
                           "nodad"})  // usable at once: no duplicate detection's wait
                     : ip({"-n", ns, "addr", "add", addr(i, r) + "/24", "dev", ifname(i, r)})) &&
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
    std::string mgs_list;
    for (size_t i = 0; i < nodes_.size(); ++i)
      if (nodes_[i].role == "mgs")
        mgs_list += (mgs_list.empty() ? "\"" : ", \"") + node_nid(i, 0) + "\"";
    for (size_t i = 0; i < nodes_.size() && ok_; ++i) {
      socket_.push_back(dir_.file(nodes_[i].name + ".sock"));
      if (nodes_[i].role == "etcd") {
        const std::string client = "http://" + addr(i, 0) + ":2379,http://" + addr(i, 1) + ":2379";
        const std::string peer = "http://" + addr(i, 0) + ":2380";
        daemon_.push_back(std::make_unique<Process>(
            std::vector<std::string>{ip_,
                                     "netns",
                                     "exec",
                                     ns_of(i),
                                     "/usr/bin/etcd",
                                     "--name",
                                     "t",
                                     "--data-dir",
                                     dir_.file("etcd" + std::to_string(i)),
                                     "--listen-client-urls",
                                     client,
                                     "--advertise-client-urls",
                                     client,
                                     "--listen-peer-urls",
                                     peer,
                                     "--initial-advertise-peer-urls",
                                     peer,
                                     "--initial-cluster",
                                     "t=" + peer,
                                     "--log-level",
                                     "warn"}));
        continue;
      }
      std::string cfg = dir_.file(nodes_[i].name + ".toml");
      write_file(cfg, "[node]\nname = \"" + nodes_[i].name + "\"\ncluster_key_file = \"" +
                          dir_.file("cluster.key") + "\"\nadmin_socket = \"" + socket_[i] +
                          "\"\nroles = [\"" + nodes_[i].role + "\"]\nmgs = [" + mgs_list +
                          "]\n[[net]]\nnid = \"" + node_nid(i, 0) + "\"\n" + speed(i) +
                          "[[net]]\nnid = \"" + node_nid(i, 1) + "\"\n" + speed(i) + extra);
      daemon_.push_back(std::make_unique<Process>(
          std::vector<std::string>{ip_, "netns", "exec", ns_of(i), PFSNETD_BIN, "--config", cfg}));
    }
    for (size_t i = 0; i < daemon_.size() && ok_; ++i)
      if (nodes_[i].role != "etcd") ok_ = daemon_[i]->wait_for_output("pfsnetd started", 15000ms);
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
  // Node i's address and NID on a rail in this cluster's family.
  std::string address(size_t i, int rail) const {
    if (!ipv6_) return addr(i, rail);
    char b[32];
    std::snprintf(b, sizeof b, "2001:2:0:%d::%zx", rail + 1, 10 + i);
    return b;
  }
  std::string node_nid(size_t i, int rail) const {
    return address(i, rail) + (rail ? "@tcp1" : "@tcp");
  }
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
  // Packets this host dropped by itself -- not a fault's nftables rule or shaper: the
  // kernel's input backlog drops on every CPU (/proc/net/softnet_stat: a host too busy to
  // take what its veths hand it) and the drops counted on the interfaces of every namespace
  // but node `except`'s and the switch's ports to it. A test tells a path that lost packets
  // on an overloaded host (LOSSY, and true) from a false alarm by it.
  uint64_t host_drops(size_t except) {
    uint64_t n = 0;
    if (FILE* f = std::fopen("/proc/net/softnet_stat", "r")) {
      unsigned processed = 0, dropped = 0;
      char line[512];
      while (std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "%x %x", &processed, &dropped) == 2) n += dropped;
      std::fclose(f);
    }
    const std::string port_of_except = "s" + std::to_string(except) + "r";
    for (size_t k = 0; k <= nodes_.size(); ++k) {
      const bool sw = k == nodes_.size();
      if (!sw && k == except) continue;
      if (!sw) n += tcp_receive_drops(k);
      auto [rc, out] = run({ip_, "-s", "-j", "-n", sw ? sw_ : ns_of(k), "link", "show"}, 10000ms);
      if (rc != 0) continue;
      json links = json::parse(out, nullptr, false);
      if (!links.is_array()) continue;
      for (const json& l : links) {
        const std::string name = l.value("ifname", "");
        if (sw && name.rfind(port_of_except, 0) == 0) continue;
        const json st = l.value("stats64", json::object());
        for (const char* dir : {"rx", "tx"})
          if (st.contains(dir)) n += st[dir].value("dropped", uint64_t{0});
      }
    }
    return n;
  }

  // Segments node i's kernel dropped on receipt for its own reasons (a full receive queue
  // or socket backlog, out-of-order queue pruned, no memory; /proc/net/netstat of its
  // namespace): a host too busy to read, which TCP's sender sees as loss.
  uint64_t tcp_receive_drops(size_t i) {
    auto [rc, out] = run({ip_, "netns", "exec", ns_of(i), "cat", "/proc/net/netstat"}, 10000ms);
    if (rc != 0) return 0;
    static const std::set<std::string> kDrops = {
        "TCPRcvQDrop", "TCPBacklogDrop",    "TCPOFODrop",     "RcvPruned",
        "OfoPruned",   "TCPZeroWindowDrop", "PFMemallocDrop", "TCPMinTTLDrop"};
    std::istringstream in(out);
    std::string names, values;
    uint64_t n = 0;
    while (std::getline(in, names) && std::getline(in, values)) {
      std::istringstream a(names), b(values);
      std::string k, v;
      while (a >> k && b >> v)
        if (kDrops.count(k)) n += std::strtoull(v.c_str(), nullptr, 10);
    }
    return n;
  }
  // `ss -tin` in node i's namespace for the connections to `addr`: each one's TCP figures
  // (retransmits, D-SACKs, reordering, RTT), to tell what a LOSSY verdict saw.
  std::string tcp_connections(size_t i, const std::string& addr) {
    auto [rc, out] = run({ip_, "netns", "exec", ns_of(i), "ss", "-tin", "dst", addr}, 10000ms);
    return rc == 0 ? out : "ss failed: " + out;
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
  bool ipv6_ = false;
  std::string ip_, skip_, tag_, sw_;
  bool ok_ = true;
  std::vector<std::string> spaces_;
  TempDir dir_;
  std::vector<std::string> socket_;
  std::vector<std::unique_ptr<Process>> daemon_;
};

// The health tests' settings: the mesh at 5x its default rates with a 20 s window, and a
// 10 s transaction timeout, so that a fault is named and ends in seconds.
constexpr const char* kFastHealth =
    "[lnet]\ntransaction_timeout = 10\n"
    "[mesh]\ninterval = 1\nbulk_interval = 5\nreport_interval = 2\nwindow = 20\n";

// `pfsnet health` on node i: its problems, the settings advice left out (not a fault).
inline json faults_at(BridgedCluster& c, size_t i) {
  json h = c.cli(i, {"health"});
  json out = json::array();
  if (!h.is_object()) return out;
  for (const json& p : h.value("problems", json::array()))
    if (p["kind"] != "settings") out.push_back(p);
  return out;
}

}  // namespace pfsnet::testing::netns
