// Test support: the MGS core on a manual clock, with the periods the MGS tests use
// (servers 10 s, clients 50 s, dead after 3 missed periods; 1,000 notifications a second,
// 8 in flight). Threads: the test's.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/test_nid.h"
#include "membership/mgs.h"

namespace pfsnet {

class MgsTest : public ::testing::Test {
 protected:
  MgsTest() : mgs_(opts(), 1) {}
  static MgsOptions opts() {
    MgsOptions o;
    o.client_interval = std::chrono::seconds(50);
    o.server_interval = std::chrono::seconds(10);
    o.miss_limit = 3;
    o.notify_rate = 1000;
    o.notify_window = 8;
    return o;
  }
  uint32_t add(const std::string& name, uint8_t roles, const char* n) {
    return mgs_.on_register(RegisterReq{name, roles, {nid(n)}, 7}, clock_.now()).id;
  }
  void ping(uint32_t id, std::vector<Nid> heard = {}) {
    EXPECT_EQ(mgs_.on_ping(PingReq{id, 7, std::move(heard)}, clock_.now()).status, PingStatus::kOk);
  }
  NodeState state(uint32_t id) { return mgs_.find(id)->state; }
  // Node `id` registers again, having dropped what it held after its eviction.
  void back(uint32_t id) {
    const NodeRecord& n = *mgs_.find(id);
    EXPECT_FALSE(
        mgs_.on_register(RegisterReq{n.name, n.roles, n.nids, 7, true}, clock_.now()).evicted);
  }

  ManualClock clock_;
  MgsCore mgs_;
};

}  // namespace pfsnet
