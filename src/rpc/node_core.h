// NodeCore: one node's core, built one way by every user -- pfsnet::Node, pfsnetd, the
// test nodes and the benches. It owns, in this order: the clock (or uses the caller's),
// the RPC statistics, the timer queue, Net over the NIs' transports, the recovery pinger,
// the RPC engine serving PING, the health monitor, and NodeTimers, the one periodic driver
// of their deadlines. Everything timed runs on the node's one timer queue (timer_queue():
// a thread of the core's own, or the caller's -- a MemHub on a manual clock): held frames,
// the driver's rounds, and the services' rounds (transport/timer_queue.h's Repeating) and
// delays. Services (membership, mesh, netverify, cluster health, tune, storage, tokens,
// the I/O benchmark) are built on it -- net(), rpc(), clock(), stats(), timer_queue() --
// and added as parts (rpc/node_part.h). start() opens the parts, makes the NIs listen,
// starts the driver and starts the parts; stop() stops the parts (in reverse), the driver,
// fails pending RPCs, closes the NIs and stops the queue, in that order, once.
// Threads: build, start() and stop() from the owner's thread; the parts are as documented
// in their headers.
#pragma once

#include <pfsnet/clock.h>
#include <pfsnet/config.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "net/net.h"
#include "rpc/health_monitor.h"
#include "rpc/node_part.h"
#include "rpc/node_timers.h"
#include "rpc/recovery_pinger.h"
#include "rpc/router_pinger.h"
#include "rpc/rpc_engine.h"
#include "stats/rpc_stats.h"
#include "transport/timer_queue.h"
#include "transport/transport.h"

namespace pfsnet {

class NodeCore;

struct NodeCoreOptions {
  Config cfg;                  // nets, lnet, rpc, stats, health: read once, here
  TransportOptions transport;  // the cluster key and TLS (transport_options(cfg, key))
  Clock* clock = nullptr;      // null: the core's own MonotonicClock
  // null: a ThreadTimerQueue of the core's own (REQUIRES a clock that follows
  // steady_clock); a test on a manual clock gives its MemHub.
  TimerQueue* timer_queue = nullptr;
  // The NIs' transport, given the core being built (its clock(); its net(), once built,
  // for Net::fault_hold); null: the LNDs `cfg` names (make_node_transport), under the
  // decorator that holds frames on the node's timer queue.
  std::function<std::unique_ptr<Transport>(TransportEvents&, NodeCore&)> make_transport;
  bool stats = true;   // RpcStats: pfsnet diag rpc, latency for the health monitor
  bool health = true;  // HealthMonitor: slowness, CPU starvation
  // What a test or a benchmark sets that no config key says (an engine without workers,
  // a spinning caller); empty: NetOptions::from(cfg), RpcOptions::from(cfg).
  std::optional<NetOptions> net;
  std::optional<RpcOptions> rpc;
};

class NodeCore {
 public:
  explicit NodeCore(NodeCoreOptions o);
  ~NodeCore() { stop(); }
  NodeCore(const NodeCore&) = delete;
  NodeCore& operator=(const NodeCore&) = delete;

  // A part to open before the NIs listen, start once they do and stop before the core
  // does, in the order added (stopped in reverse). REQUIRES: before start(); the part
  // outlives the core's stop().
  void add_part(NodePart& part) { parts_.push_back(&part); }
  // Opens the parts; the NIs listen; the driver ticks every `tick` of real time (zero:
  // never -- the caller calls tick(), as a test on a manual clock does); starts the parts.
  // The first error is returned (stop() undoes what was done).
  Status start(Duration tick = std::chrono::milliseconds(100));
  // One round of the driver at `now` (NodeTimers::tick).
  size_t tick(TimePoint now) { return timers_->tick(now); }
  // Stops the parts (reverse order), then the driver, pending RPCs, the NIs and the queue.
  // Idempotent.
  void stop();
  bool started() const { return started_.load(); }

  const Config& config() const { return cfg_; }
  Clock& clock() { return *clock_; }
  RpcStats* stats() { return stats_.get(); }
  Net& net() { return *net_; }
  RpcEngine& rpc() { return *rpc_; }
  RecoveryPinger& pinger() { return *pinger_; }
  RouterPinger& router_pinger() { return *routers_; }
  HealthMonitor* health() { return health_.get(); }
  TimerQueue& timer_queue() { return *queue_; }

 private:
  Config cfg_;
  MonotonicClock own_clock_;
  Clock* clock_;
  std::unique_ptr<RpcStats> stats_;
  std::unique_ptr<ThreadTimerQueue> own_queue_;  // outlives net_: it releases held frames
  TimerQueue* queue_;
  std::unique_ptr<Net> net_;
  std::unique_ptr<RecoveryPinger> pinger_;  // outlives rpc_: its pings' callbacks use it
  std::unique_ptr<RouterPinger> routers_;   // likewise
  std::unique_ptr<RpcEngine> rpc_;
  std::unique_ptr<HealthMonitor> health_;  // outlives rpc_'s shutdown: its probes use it
  std::unique_ptr<NodeTimers> timers_;
  Repeating driver_;  // timers_->tick on the queue
  std::vector<NodePart*> parts_;
  size_t opened_ = 0;  // parts_[0, opened_) were opened: stop() stops them
  std::atomic<bool> started_{false};
  bool stopped_ = false;
};

}  // namespace pfsnet
