// A node's core over TCP on a loopback address, for the storage tests that run the block
// service and striped files end to end inside one process (block_service_test.cc,
// read_cut_off_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "rpc/node_core.h"
#include "transport/transport.h"

namespace pfsnet::test {

// A node's core over TCP on a loopback address, as pfsnetd builds it (no statistics, no
// health monitor).
struct TcpNode {
  explicit TcpNode(const std::string& addr, uint16_t port, int peer_credits = 8)
      : core(options(addr, port, peer_credits)), rpc(&core.rpc()), clock(core.clock()) {}
  static NodeCoreOptions options(const std::string& addr, uint16_t port, int peer_credits) {
    NodeCoreOptions o;
    o.cfg.nets.push_back(NetConfig{*Nid::parse(addr + "@tcp"), port});
    o.cfg.lnet.peer_credits = peer_credits;
    o.cfg.lnet.transaction_timeout = 10;
    auto to = transport_options(o.cfg, "0123456789abcdef0123");
    EXPECT_TRUE(to.ok());
    if (to.ok()) o.transport = *to;
    o.stats = false;
    o.health = false;
    return o;
  }
  Status start() { return core.start(std::chrono::milliseconds(50)); }
  void shutdown() { core.stop(); }
  Nid nid() const { return core.config().nets[0].nid; }
  NodeCore core;
  RpcEngine* rpc;
  Clock& clock;
};

}  // namespace pfsnet::test
