#include "transport/lnd_switch.h"

#include <algorithm>

#include "transport/fabric_transport.h"
#include "transport/tcp_transport.h"

namespace pfsnet {
namespace {

FabricOptions fabric_options(const NetConfig& n) {
  FabricOptions f;
  f.provider = n.provider;
  f.domain = n.domain;
  f.rx_depth = static_cast<uint32_t>(n.rx_depth);
  f.msg_size = static_cast<uint32_t>(n.msg_size);
  return f;
}

}  // namespace

LndSwitch::LndSwitch(std::vector<Lnd> lnds) : lnds_(std::move(lnds)) {}

LndSwitch::~LndSwitch() { stop(); }

Transport* LndSwitch::lnd_of(const Nid& local) const {
  for (const Lnd& l : lnds_)
    if (std::find(l.nis.begin(), l.nis.end(), local) != l.nis.end()) return l.transport.get();
  return nullptr;
}

Status LndSwitch::listen(const Nid& local, uint16_t port) {
  Transport* t = lnd_of(local);
  if (!t) return Status(Code::kInvalidArgument, "no LND carries the NI " + local.to_string());
  return t->listen(local, port);
}

void LndSwitch::connect(const Nid& local, const Nid& remote, uint16_t port, ConnectCallback cb) {
  Transport* t = lnd_of(local);
  if (!t) {
    cb(Status(Code::kInvalidArgument, "no LND carries the NI " + local.to_string()));
    return;
  }
  t->connect(local, remote, port, std::move(cb));
}

void LndSwitch::connect_bulk(const Nid& local, const Nid& remote, uint16_t port,
                             ConnectCallback cb) {
  Transport* t = lnd_of(local);
  if (!t) {
    cb(Status(Code::kInvalidArgument, "no LND carries the NI " + local.to_string()));
    return;
  }
  t->connect_bulk(local, remote, port, std::move(cb));
}

bool LndSwitch::has_bulk_connections(const Nid& local) const {
  Transport* t = lnd_of(local);
  return t && t->has_bulk_connections(local);
}

void LndSwitch::post(std::function<void()> fn) { lnds_.front().transport->post(std::move(fn)); }

bool LndSwitch::progress() {
  bool any = false;
  for (auto& l : lnds_) any |= l.transport->progress();
  return any;
}

void LndSwitch::set_socket_buffers(int tx_bytes, int rx_bytes) {
  for (auto& l : lnds_) l.transport->set_socket_buffers(tx_bytes, rx_bytes);
}

void LndSwitch::stop() {
  for (auto it = lnds_.rbegin(); it != lnds_.rend(); ++it) it->transport->stop();
}

Status check_lnds(const Config& cfg) {
  for (const NetConfig& n : cfg.nets) {
    if (!n.nid.is_verbs()) continue;
    Status s = FabricTransport::probe(fabric_options(n), n.nid);
    if (!s.ok())
      return Status(Code::kInvalidArgument,
                    "net " + n.nid.to_string() +
                        ": libfabric cannot carry it (an @o2ib NI is never carried over sockets "
                        "instead; see net.provider and net.domain): " +
                        s.message());
  }
  return Status::Ok();
}

std::unique_ptr<Transport> make_lnds(const Config& cfg, const TransportOptions& opts,
                                     const std::vector<Nid>& nids, Clock& clock,
                                     TransportEvents& events) {
  std::vector<LndSwitch::Lnd> lnds;
  std::vector<Nid> tcp;
  for (const NetConfig& n : cfg.nets) {
    if (!n.nid.is_verbs()) {
      tcp.push_back(n.nid);
      continue;
    }
    lnds.push_back(
        {{n.nid}, std::make_unique<FabricTransport>(opts, fabric_options(n), nids, clock, events)});
  }
  if (lnds.empty()) return std::make_unique<TcpTransport>(opts, nids, clock, events);
  if (!tcp.empty())
    lnds.insert(lnds.begin(),
                {std::move(tcp), std::make_unique<TcpTransport>(opts, nids, clock, events)});
  return std::make_unique<LndSwitch>(std::move(lnds));
}

std::unique_ptr<Transport> make_node_transport(const Config& cfg, const TransportOptions& opts,
                                               const std::vector<Nid>& nids, Clock& clock,
                                               TimerQueue& timers, EmulatingTransport::HoldFn hold,
                                               TransportEvents& events) {
  return std::make_unique<EmulatingTransport>(emulation_rules(cfg), std::move(hold), clock, timers,
                                              events,
                                              [&cfg, &opts, &nids, &clock](TransportEvents& inner) {
                                                return make_lnds(cfg, opts, nids, clock, inner);
                                              });
}

}  // namespace pfsnet
