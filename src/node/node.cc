#include <pfsnet/node.h>

#include <atomic>

#include "net/net.h"
#include "rpc/node_timers.h"
#include "rpc/ping.h"
#include "rpc/recovery_pinger.h"
#include "rpc/rpc_engine.h"
#include "stats/rpc_stats.h"
#include "transport/lnd_switch.h"

namespace pfsnet {

// Members in the order they are built; destroyed in reverse, after stop().
struct Node::Impl {
  Config cfg;
  std::vector<Nid> nids;
  MonotonicClock clock;
  std::unique_ptr<RpcStats> stats;
  std::unique_ptr<ThreadTimerQueue> hold_timers;
  std::unique_ptr<Net> net;
  std::unique_ptr<RecoveryPinger> pinger;  // outlives rpc: its pings' callbacks use it
  std::unique_ptr<RpcEngine> rpc;
  std::unique_ptr<HealthMonitor> health;  // outlives rpc's shutdown: its probes use it
  std::unique_ptr<NodeTimers> timers;
  std::atomic<bool> listening{false};
  bool stopped = false;
};

Result<std::unique_ptr<Node>> Node::start(const Config& cfg, std::string cluster_key) {
  auto n = create(cfg, std::move(cluster_key));
  if (!n.ok()) return n.status();
  if (Status s = (*n)->listen(); !s.ok()) return s;
  return n;
}

Result<std::unique_ptr<Node>> Node::create(const Config& cfg, std::string cluster_key) {
  if (cfg.nets.empty()) return Status(Code::kInvalidArgument, "no [[net]]: a node needs an NI");
  if (cluster_key.size() < 16)
    return Status(Code::kInvalidArgument, "the cluster key must be at least 16 bytes");
  if (Status s = check_lnds(cfg); !s.ok()) return s;
  auto impl = std::make_unique<Impl>();
  Impl& n = *impl;
  n.cfg = cfg;
  bool verbs = false;
  for (const NetConfig& c : cfg.nets) {
    n.nids.push_back(c.nid);
    verbs = verbs || c.nid.is_verbs();
  }
  n.stats = std::make_unique<RpcStats>(cfg.stats, n.clock, verbs);
  n.hold_timers = std::make_unique<ThreadTimerQueue>(n.clock);
  auto opts = transport_options(cfg, std::move(cluster_key));
  if (!opts.ok()) return opts.status();
  TransportOptions to = *opts;
  Impl* ip = impl.get();
  n.net =
      std::make_unique<Net>(NetOptions::from(cfg), n.nids, n.clock, [ip, to](TransportEvents& ev) {
        return make_node_transport(
            ip->cfg, to, ip->nids, ip->clock, *ip->hold_timers,
            [ip](const Connection& c, const OutFrame& f) { return ip->net->fault_hold(c, f); }, ev);
      });
  RpcOptions ro = RpcOptions::from(cfg);
  n.rpc = std::make_unique<RpcEngine>(*n.net, ro, n.stats.get());
  n.pinger = std::make_unique<RecoveryPinger>(*n.net, *n.rpc, ro.attempt_timeout());
  n.health = std::make_unique<HealthMonitor>(*n.net, *n.rpc, n.stats.get(),
                                             HealthMonitorOptions::from(cfg));
  n.timers =
      std::make_unique<NodeTimers>(*n.net, *n.rpc, n.stats.get(), n.pinger.get(), n.health.get());
  serve_ping(*n.rpc, static_cast<size_t>(cfg.max_bulk()));
  return std::unique_ptr<Node>(new Node(std::move(impl)));
}

Status Node::listen() {
  if (impl_->stopped) return Status(Code::kCancelled, "the node was stopped");
  if (impl_->listening) return Status::Ok();
  if (Status s = impl_->net->start(); !s.ok()) return s;
  impl_->listening = true;
  impl_->timers->start(std::chrono::milliseconds(100));
  return Status::Ok();
}

Node::Node(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Node::~Node() { stop(); }

void Node::stop() {
  if (impl_->stopped) return;
  impl_->stopped = true;
  if (impl_->listening) impl_->timers->stop();
  impl_->rpc->shutdown();
  impl_->net->shutdown();
  impl_->hold_timers->stop();
}

void Node::handle(uint32_t type, std::string name, Handler h, HandlerMode mode, Execution exec) {
  impl_->rpc->handle(type, std::move(name), std::move(h), mode, exec);
}

namespace {
// A call before listen(): its deadline would not be kept (the node's timers run from then).
RpcReply not_listening() {
  RpcReply r;
  r.status = Status(Code::kInvalidArgument, "the node is not listening yet: call listen() first");
  return r;
}
}  // namespace

RpcReply Node::call(const Nid& dst, uint32_t type, Buffer payload, BulkData bulk,
                    CallOptions opts) {
  if (!impl_->listening.load()) return not_listening();
  return impl_->rpc->call(dst, type, std::move(payload), std::move(bulk), opts);
}

void Node::call_async(const Nid& dst, uint32_t type, Buffer payload, BulkData bulk,
                      std::function<void(RpcReply&&)> done, CallOptions opts) {
  if (!impl_->listening.load()) return done(not_listening());
  impl_->rpc->call_async(dst, type, std::move(payload), std::move(bulk), std::move(done), opts);
}

const std::vector<Nid>& Node::nids() const { return impl_->nids; }
std::vector<NiInfo> Node::nis() const { return impl_->net->nis(); }
std::vector<NiInfo> Node::peers() const { return impl_->net->peers(); }
StatsReport Node::stats(const StatsQuery& q) const { return impl_->stats->query(q); }

}  // namespace pfsnet
