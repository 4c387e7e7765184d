// Router pings (LNet's router checker): every lnet.router_ping_interval a node with routes
// asks each of its gateways ROUTER_PING, which every node answers with whether it routes
// and its NIs, each up or down. A gateway that does not answer within
// lnet.router_ping_timeout is dead to this node until it answers again; one that answers
// but does not route, or (lnet.avoid_asym_router_failure) whose NI on a route's network is
// down -- it lost its far side -- is not chosen for that route (Net::set_gateway_status).
// So a router that dies silently is out of use within interval + timeout, before an RPC's
// attempt on it times out (transaction_timeout / (retry_count + 1) by default, 16.7 s
// against 10 + 5 s), and its RPCs go by another gateway when they are sent again.
// Threads: run() from the timer driver's thread; the answers on I/O threads; counters
// from any thread.
#pragma once

#include <atomic>
#include <unordered_set>

#include "base/mutex.h"
#include "net/net.h"
#include "rpc/rpc_engine.h"
#include "rpc/rpc_method.h"

namespace pfsnet {

// A ROUTER_PING's answer: whether the node routes (lnet.routing) and each of its NIs with
// its state (at most kMaxRouterPingNis).
struct RouterPingReply {
  bool routing = false;
  std::vector<std::pair<Nid, bool>> nis;
};
inline constexpr size_t kMaxRouterPingNis = 64;
Buffer encode_router_ping_reply(const RouterPingReply& r);
Result<RouterPingReply> decode_router_ping_reply(std::span<const uint8_t> b);
extern const RpcMethod<Empty, RouterPingReply> kRouterPingRpc;

// Serves ROUTER_PING on `rpc` from what `net` says of itself (inline: no blocking).
void serve_router_ping(RpcEngine& rpc, Net& net);

class RouterPinger {
 public:
  // `net` and `rpc` must outlive the pinger, and the pinger its pings (it is stopped after
  // the engine is shut down).
  RouterPinger(Net& net, RpcEngine& rpc, Duration interval, Duration timeout)
      : net_(net), rpc_(rpc), interval_(interval), timeout_(timeout) {}

  // At most once per interval: a ROUTER_PING to each gateway that has none outstanding.
  void run(TimePoint now);

  uint64_t sent() const { return sent_.load(); }
  uint64_t answered() const { return answered_.load(); }

 private:
  void done(const Nid& gw, Result<RouterPingReply> r);

  Net& net_;
  RpcEngine& rpc_;
  const Duration interval_, timeout_;
  TimePoint next_{};
  Mutex mu_;
  std::unordered_set<Nid> in_flight_ GUARDED_BY(mu_);
  std::atomic<uint64_t> sent_{0}, answered_{0};
};

}  // namespace pfsnet
