#include "rpc/router_pinger.h"

#include "base/log.h"
#include "rpc/msg_types.h"
#include "wire/byte_codec.h"

namespace pfsnet {

Buffer encode_router_ping_reply(const RouterPingReply& r) {
  ByteWriter w;
  w.u8(r.routing ? 1 : 0);
  size_t n = std::min(r.nis.size(), kMaxRouterPingNis);
  w.u16(static_cast<uint16_t>(n));
  for (size_t i = 0; i < n; ++i) {
    w.nid(r.nis[i].first);
    w.u8(r.nis[i].second ? 1 : 0);
  }
  return w.take();
}

Result<RouterPingReply> decode_router_ping_reply(std::span<const uint8_t> b) {
  ByteReader rd(b);
  RouterPingReply r;
  uint8_t routing = rd.u8();
  uint16_t n = rd.u16();
  if (!rd.ok() || routing > 1 || n > kMaxRouterPingNis)
    return Status(Code::kProtocol, "malformed ROUTER_PING reply");
  for (uint16_t i = 0; i < n && rd.ok(); ++i) {
    Nid nid = rd.nid();
    uint8_t up = rd.u8();
    if (up > 1) return Status(Code::kProtocol, "malformed ROUTER_PING reply: NI state");
    r.nis.emplace_back(nid, up == 1);
  }
  if (!rd.done()) return Status(Code::kProtocol, "malformed ROUTER_PING reply");
  r.routing = routing == 1;
  return r;
}

const RpcMethod<Empty, RouterPingReply> kRouterPingRpc{.type = kMsgRouterPing,
                                                       .name = "ROUTER_PING",
                                                       .exec = Execution::kRepeatable,
                                                       .encode_request = encode_empty,
                                                       .decode_request = decode_empty,
                                                       .encode_reply = encode_router_ping_reply,
                                                       .decode_reply = decode_router_ping_reply};

void serve_router_ping(RpcEngine& rpc, Net& net) {
  serve(rpc, kRouterPingRpc, [&net](Empty, RpcRequest&) -> Result<RouterPingReply> {
    RouterPingReply r;
    r.routing = net.routing();
    r.nis = net.local_ni_states();
    return r;
  });
}

void RouterPinger::run(TimePoint now) {
  if (now < next_) return;
  next_ = now + interval_;
  for (const Nid& gw : net_.gateways()) {
    {
      MutexLock lk(mu_);
      if (!in_flight_.insert(gw).second) continue;  // the last one is still out
    }
    sent_.fetch_add(1, std::memory_order_relaxed);
    CallOptions o;
    o.timeout = timeout_;
    o.attempt_timeout = timeout_;
    o.no_delay = true;  // a connect that backs off fails at once: the router is not there
    call_async(
        rpc_, kRouterPingRpc, gw, Empty{},
        [this, gw](Result<RouterPingReply> r) { done(gw, std::move(r)); }, o);
  }
}

void RouterPinger::done(const Nid& gw, Result<RouterPingReply> r) {
  {
    MutexLock lk(mu_);
    in_flight_.erase(gw);
  }
  GatewayStatus s;
  s.answered = r.ok();
  if (r.ok()) {
    answered_.fetch_add(1, std::memory_order_relaxed);
    s.routing = r->routing;
    s.nis = std::move(r->nis);
  } else {
    s.why = r.status().message();
  }
  net_.set_gateway_status(gw, std::move(s));
}

}  // namespace pfsnet
