#include <pfsnet/node.h>

#include "rpc/node_core.h"
#include "transport/lnd_switch.h"

namespace pfsnet {

struct Node::Impl {
  std::vector<Nid> nids;
  std::unique_ptr<NodeCore> core;
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
  auto opts = transport_options(cfg, std::move(cluster_key));
  if (!opts.ok()) return opts.status();
  auto impl = std::make_unique<Impl>();
  for (const NetConfig& c : cfg.nets) impl->nids.push_back(c.nid);
  NodeCoreOptions o;
  o.cfg = cfg;
  o.transport = *opts;
  impl->core = std::make_unique<NodeCore>(std::move(o));
  return std::unique_ptr<Node>(new Node(std::move(impl)));
}

Status Node::listen() { return impl_->core->start(std::chrono::milliseconds(100)); }

Node::Node(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Node::~Node() { stop(); }

void Node::stop() { impl_->core->stop(); }

void Node::handle(uint32_t type, std::string name, Handler h, HandlerMode mode, Execution exec) {
  impl_->core->rpc().handle(type, std::move(name), std::move(h), mode, exec);
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
  if (!impl_->core->started()) return not_listening();
  return impl_->core->rpc().call(dst, type, std::move(payload), std::move(bulk), opts);
}

void Node::call_async(const Nid& dst, uint32_t type, Buffer payload, BulkData bulk,
                      std::function<void(RpcReply&&)> done, CallOptions opts) {
  if (!impl_->core->started()) return done(not_listening());
  impl_->core->rpc().call_async(dst, type, std::move(payload), std::move(bulk), std::move(done),
                                opts);
}

const std::vector<Nid>& Node::nids() const { return impl_->nids; }
std::vector<NiInfo> Node::nis() const { return impl_->core->net().nis(); }
std::vector<NiInfo> Node::peers() const { return impl_->core->net().peers(); }
StatsReport Node::stats(const StatsQuery& q) const { return impl_->core->stats()->query(q); }

}  // namespace pfsnet
