// RecoveryPinger: LNet's recovery pings. Every NI below full health (local or peer) gets
// a PING on exactly its path when Net::recovery_due names it (at once, then after
// recovery_interval x 2^n, at most 900 s apart); the answer raises its health, a failure
// lowers it again -- both through the net, as for any message.
// Threads: run() from the timer driver's thread; counters from any thread.
#pragma once

#include <atomic>

#include "net/net.h"
#include "rpc/rpc_engine.h"

namespace pfsnet {

class RecoveryPinger {
 public:
  // Each ping may take `timeout` (an attempt's share of transaction_timeout). `net` and
  // `rpc` must outlive the pinger; so must the pinger its pings (it is stopped after the
  // engine is shut down).
  RecoveryPinger(Net& net, RpcEngine& rpc, Duration timeout)
      : net_(net), rpc_(rpc), timeout_(timeout) {}

  // Sends the recovery pings due at `now`.
  void run(TimePoint now);

  uint64_t sent() const { return sent_.load(); }
  uint64_t answered() const { return answered_.load(); }

 private:
  Net& net_;
  RpcEngine& rpc_;
  Duration timeout_;
  std::atomic<uint64_t> sent_{0}, answered_{0};
};

}  // namespace pfsnet
