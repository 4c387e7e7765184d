// Test support: cluster health on the in-process cluster (rpc/sim_cluster.h,
// membership/sim_members.h) -- an MGS (n2), two servers (n3, n4) and two clients (n5, n6)
// with the real membership and cluster-health services over the in-memory transport, on
// manual time in 100 ms steps, reporting every 0.5 s. A test adds what it looks at.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <map>

#include "membership/sim_members.h"
#include "probe/cluster_health_service.h"
#include "rpc/sim_cluster.h"

namespace pfsnet {

class ClusterHealthSimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    m_.configure = [](Config& cfg) { cfg.health.report_interval = 0.5; };
    for (int h : {2, 3, 4, 5, 6}) start(h);
    ASSERT_TRUE(c_.run_until([&] { return m_.up_in_table(2) == 5; }, std::chrono::seconds(5)));
  }
  // Starts (or restarts) node `host` with its cluster-health service.
  void start(int host) {
    ASSERT_NE(m_.start(host,
                       [this, host](SimNode& n, const Config& cfg, MembershipService& ms) {
                         auto& ch = n.attach<ClusterHealthService>(cfg, n.rpc, ms, c_.clock());
                         n.on_tick([&ch](TimePoint now) { ch.tick(now); });
                         health_[host] = &ch;
                         if (also_) also_(host, n, cfg, ms, ch);
                       }),
              nullptr);
  }

  SimCluster c_;
  SimMembers m_{c_};
  std::map<int, ClusterHealthService*> health_;
  // What a test adds to each node as it starts (handlers of its own), when set.
  std::function<void(int host, SimNode&, const Config&, MembershipService&, ClusterHealthService&)>
      also_;
};

}  // namespace pfsnet
