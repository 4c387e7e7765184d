// Test support: membership nodes of the in-process cluster (rpc/sim_cluster.h). Node
// `host` is n<host> at 10.0.0.<host>@tcp running the real MembershipService, with the
// periods the tests use: servers ping every 1 s, clients every 2 s, dead after 2 missed
// periods. The hosts in `mgs` are MGSs (in failover order), 3 and 4 servers, others
// clients. A test of another module adds its own services to each node in `extra`.
// Threads: the test's.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "membership/service.h"
#include "rpc/sim_cluster.h"

namespace pfsnet {

class SimMembers {
 public:
  using Extra = std::function<void(SimNode&, const Config&, MembershipService&)>;

  explicit SimMembers(SimCluster& c, std::vector<int> mgs = {2}) : c_(c), mgs_(std::move(mgs)) {}

  static Nid nid(int host) { return *Nid::parse("10.0.0." + std::to_string(host) + "@tcp"); }
  static std::string name(int host) { return "n" + std::to_string(host); }
  const char* role(int host) const {
    if (std::find(mgs_.begin(), mgs_.end(), host) != mgs_.end()) return "mgs";
    return host <= 4 ? "server" : "client";
  }
  // The MGSs, in failover order (before any node starts).
  void set_mgs(std::vector<int> mgs) { mgs_ = std::move(mgs); }
  // Changes every node's config before it starts (a module's own keys).
  std::function<void(Config&)> configure;

  Config config(int host) const {
    Config cfg;
    cfg.node.name = name(host);
    cfg.node.roles = {role(host)};
    for (int m : mgs_) cfg.node.mgs.push_back(nid(m));
    NetConfig nc;
    nc.nid = nid(host);
    cfg.nets = {nc};
    cfg.membership.server_ping_interval = 1;
    cfg.membership.client_ping_interval = 2;
    cfg.membership.ping_miss_limit = 2;
    if (configure) configure(cfg);
    return cfg;
  }
  // Starts node `host` (again, after a kill): its net, engine and membership, then `extra`.
  // `wire`: what its handshakes speak (an older release speaks less). Null when its net
  // cannot start.
  MembershipService* start(int host, const Extra& extra = {}, WireSpeaks wire = {}) {
    Config cfg = config(host);
    std::vector<Nid> nids;  // nid(host), unless `configure` gave it others
    for (const NetConfig& nc : cfg.nets) nids.push_back(nc.nid);
    SimNode* n = c_.add(name(host), std::move(nids), NetOptions::from(cfg), RpcOptions::from(cfg),
                        std::move(wire));
    if (!n) return nullptr;
    MembershipService& m = n->attach<MembershipService>(cfg, n->net, n->rpc, c_.clock());
    n->on_tick([&m](TimePoint now) { m.tick(now); });
    if (extra) extra(*n, cfg, m);
    services_[host] = &m;
    return &m;
  }
  MembershipService& at(int host) { return *services_.at(host); }

  // Nodes MGS `mgs` lists up (its own table).
  size_t up_in_table(int mgs) {
    auto t = at(mgs).status(std::chrono::seconds(1));
    if (!t.ok()) return 0;
    size_t up = 0;
    for (const StatusNode& n : t->nodes) up += n.state == NodeState::kUp;
    return up;
  }
  // The state of `node` in MGS `mgs`'s table ("" when not listed).
  std::string state_in(int mgs, const std::string& node) {
    auto t = at(mgs).status(std::chrono::seconds(1));
    if (!t.ok()) return "";
    for (const StatusNode& n : t->nodes)
      if (n.name == node) return node_state_name(n.state);
    return "";
  }
  // Whether node `host` refuses RPCs to `server` as dead (the MGS told it so).
  bool dead_to(int host, int server) { return c_.find(name(host))->net.peer_dead(nid(server)); }

 private:
  SimCluster& c_;
  std::vector<int> mgs_;
  std::map<int, MembershipService*> services_;
};

}  // namespace pfsnet
