// The RPC engine tests' fixture: two nodes (Net, RpcEngine, pinger, timers) over the
// in-memory transport on a manual clock, the server serving echo, slow, throwing and
// blocking types (rpc_engine_test.cc, rpc_engine_faults_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <thread>

#include "base/test_nid.h"
#include "rpc/node_core.h"
#include "rpc/ping.h"
#include "rpc/rpc_engine.h"
#include "rpc/test_gate.h"
#include "transport/mem_transport.h"

namespace pfsnet::rpc_test {

using namespace std::chrono_literals;

// A node core over the in-memory transport, ticked by the test (no driver thread), without
// statistics or a health monitor.
struct Node {
  // retry_count 0: these tests see each failure as it happens; the resend tests set it.
  // `wire_max`: the highest wire version it speaks (1: a node of pfsnet up to 8827b49).
  Node(MemHub& hub, Clock& clock, Nid n, int64_t max_in_flight = 8, int peer_credits = 8,
       int64_t retry_count = 0, uint16_t wire_max = kWireVersionMax,
       const std::string& default_job_id = "")
      : core(options(hub, clock, n, max_in_flight, peer_credits, retry_count, wire_max,
                     default_job_id)),
        net(core.net()),
        rpc(core.rpc()),
        pinger(core.pinger()) {
    EXPECT_TRUE(core.start(Duration::zero()).ok());
  }
  static NodeCoreOptions options(MemHub& hub, Clock& clock, Nid n, int64_t max_in_flight,
                                 int peer_credits, int64_t retry_count, uint16_t wire_max,
                                 const std::string& default_job_id = "") {
    NodeCoreOptions o;
    o.cfg.nets.push_back(NetConfig{n});
    o.clock = &clock;
    o.timer_queue = &hub;  // on the manual clock
    o.make_transport = [&hub, n, wire_max](TransportEvents& ev, NodeCore& core) {
      TransportOptions to;
      to.cluster_key = "0123456789abcdef";
      to.wire.max_version = wire_max;
      if (wire_max < 2) to.wire.features = 0;
      return std::make_unique<MemTransport>(hub, to, std::vector<Nid>{n}, core.clock(), ev);
    };
    o.stats = false;
    o.health = false;
    o.net = NetOptions{};
    o.net->peer_credits = peer_credits;
    RpcOptions ro;
    ro.max_rpcs_in_flight = max_in_flight;
    ro.workers = 2;
    ro.default_timeout = 10s;
    ro.max_bulk = 2 << 20;
    ro.retry_count = retry_count;
    ro.default_job_id = default_job_id;
    o.rpc = ro;
    return o;
  }
  // The engine's last callbacks (recovery pings it cancels) run before the pinger goes.
  ~Node() { core.stop(); }
  NodeCore core;  // driven by the tests: core.tick(now)
  Net& net;
  RpcEngine& rpc;
  RecoveryPinger& pinger;
};

struct Replies {
  std::vector<RpcReply> got;
  RpcEngine::Callback cb() {
    return [this](RpcReply&& r) { got.push_back(std::move(r)); };
  }
};

constexpr uint32_t kEcho = 10, kSlow = 11, kThrow = 12, kBlock = 13;

class RpcTest : public ::testing::Test {
 protected:
  RpcTest() : client_(hub_, clock_, a_, 2), server_(hub_, clock_, b_) {
    client_.rpc.define_type(kBlock, "BLOCK");
    server_.rpc.handle(
        kEcho, "ECHO",
        [](RpcRequest& r) {
          RpcResponse resp;
          resp.payload = std::move(r.payload);
          return resp;
        },
        HandlerMode::kInline);
    server_.rpc.handle(
        kSlow, "SLOW",
        [this](RpcRequest&) {
          clock_.advance(3ms);  // execution takes exactly 3 ms
          return RpcResponse{};
        },
        HandlerMode::kInline);
    server_.rpc.handle(
        kThrow, "THROW",
        [](RpcRequest&) -> RpcResponse { throw std::runtime_error("disk on fire"); },
        HandlerMode::kInline);
    server_.rpc.handle(
        kBlock, "BLOCK",
        [this](RpcRequest&) {
          release_.wait();
          return RpcResponse{};
        },
        HandlerMode::kWorker);
  }
  ~RpcTest() override { release_.open(); }

  // Pumps the hub until `done` (workers answer on their own threads); bounded in count
  // and in time.
  template <class Pred>
  void pump_until(Pred done) {
    auto limit = std::chrono::steady_clock::now() + 10s;
    for (int i = 0; i < 10'000'000 && !done() && std::chrono::steady_clock::now() < limit; ++i) {
      hub_.pump();
      std::this_thread::yield();
    }
  }

  Gate release_;  // outlives the nodes' workers
  ManualClock clock_;
  MemHub hub_;
  Nid a_ = nid("10.0.0.1@tcp"), b_ = nid("10.0.0.2@tcp");
  Node client_, server_;
};

}  // namespace pfsnet::rpc_test
