// NodeTimers: the one periodic driver of a node's deadlines. Each round calls, separately
// and in this order: Net::expire (transmit deadlines), RpcEngine::expire (RPC deadlines
// and remote timeouts), RpcStats::tick (the statistics of every second passed),
// RecoveryPinger::run (recovery pings due), RouterPinger::run (router pings due),
// HealthMonitor::run (slowness, once a second)
// and log_held_lines (counts of repeated log lines
// held back). None of them drives another.
// Threads: tick() from one thread at a time (NodeCore runs it on the node's timer queue;
// a test on a manual clock calls it). The parts must outlive the rounds.
#pragma once

#include <pfsnet/clock.h>

#include "base/log.h"
#include "net/net.h"
#include "rpc/health_monitor.h"
#include "rpc/recovery_pinger.h"
#include "rpc/router_pinger.h"
#include "rpc/rpc_engine.h"
#include "stats/rpc_stats.h"

namespace pfsnet {

class NodeTimers {
 public:
  // `stats`, `pinger` and `health` may be null (nothing of theirs runs).
  NodeTimers(Net& net, RpcEngine& rpc, RpcStats* stats, RecoveryPinger* pinger,
             HealthMonitor* health = nullptr, RouterPinger* routers = nullptr)
      : net_(net), rpc_(rpc), stats_(stats), pinger_(pinger), health_(health), routers_(routers) {}

  // One round at `now`. Returns how many RPCs the RPC expiry failed or resent.
  size_t tick(TimePoint now) {
    net_.expire(now);
    size_t n = rpc_.expire(now);
    if (stats_) stats_->tick();
    if (pinger_) pinger_->run(now);
    if (routers_) routers_->run(now);
    if (health_) health_->run(now);
    log_held_lines();
    return n;
  }

 private:
  Net& net_;
  RpcEngine& rpc_;
  RpcStats* stats_;
  RecoveryPinger* pinger_;
  HealthMonitor* health_;
  RouterPinger* routers_;
};

}  // namespace pfsnet
