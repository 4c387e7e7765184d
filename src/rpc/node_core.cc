#include "rpc/node_core.h"

#include "rpc/ping.h"
#include "transport/lnd_switch.h"

namespace pfsnet {

NodeCore::NodeCore(NodeCoreOptions o)
    : cfg_(std::move(o.cfg)), clock_(o.clock ? o.clock : &own_clock_) {
  std::vector<Nid> nids;
  bool verbs = false;
  for (const NetConfig& n : cfg_.nets) {
    nids.push_back(n.nid);
    verbs = verbs || n.nid.is_verbs();
  }
  if (o.stats) stats_ = std::make_unique<RpcStats>(cfg_.stats, *clock_, verbs);
  if (!o.timer_queue) own_queue_ = std::make_unique<ThreadTimerQueue>(*clock_);
  queue_ = o.timer_queue ? o.timer_queue : own_queue_.get();
  auto make = std::move(o.make_transport);
  if (!make) {
    make = [to = std::move(o.transport), nids](TransportEvents& ev, NodeCore& core) {
      return make_node_transport(
          core.cfg_, to, nids, core.clock(), core.timer_queue(),
          [&core](const Connection& c, const OutFrame& f) { return core.net().fault_hold(c, f); },
          ev);
    };
  }
  net_ = std::make_unique<Net>(
      o.net ? *o.net : NetOptions::from(cfg_), nids, *clock_,
      [this, make = std::move(make)](TransportEvents& ev) { return make(ev, *this); });
  RpcOptions ro = o.rpc ? *o.rpc : RpcOptions::from(cfg_);
  rpc_ = std::make_unique<RpcEngine>(*net_, ro, stats_.get());
  pinger_ = std::make_unique<RecoveryPinger>(*net_, *rpc_, ro.attempt_timeout());
  if (o.health)
    health_ = std::make_unique<HealthMonitor>(*net_, *rpc_, stats_.get(),
                                              HealthMonitorOptions::from(cfg_));
  routers_ = std::make_unique<RouterPinger>(*net_, *rpc_, net_->router_ping_interval(),
                                            net_->router_ping_timeout());
  timers_ = std::make_unique<NodeTimers>(*net_, *rpc_, stats_.get(), pinger_.get(), health_.get(),
                                         routers_.get());
  serve_ping(*rpc_, ro.max_bulk);
  serve_router_ping(*rpc_, *net_);
}

Status NodeCore::start(Duration tick) {
  if (stopped_) return Status(Code::kCancelled, "the node was stopped");
  if (started_) return Status::Ok();
  for (; opened_ < parts_.size(); ++opened_)
    if (Status s = parts_[opened_]->open(); !s.ok()) return s;
  if (Status s = net_->start(); !s.ok()) return s;
  started_ = true;
  if (tick > Duration::zero())
    driver_.start(*queue_, *clock_, tick, [this](TimePoint now) { timers_->tick(now); });
  for (NodePart* p : parts_)
    if (Status s = p->start(*queue_); !s.ok())
      return Status(s.code(), std::string(p->part_name()) + ": " + s.message());
  return Status::Ok();
}

void NodeCore::stop() {
  if (stopped_) return;
  stopped_ = true;
  for (size_t i = opened_; i-- > 0;) parts_[i]->stop();
  driver_.stop();
  rpc_->shutdown();  // pending RPCs fail now
  net_->shutdown();
  if (own_queue_) own_queue_->stop();
}

}  // namespace pfsnet
