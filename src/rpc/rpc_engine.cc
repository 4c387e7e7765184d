// RpcEngine (rpc_engine.h): the client side (rpc_client.h) and the server side
// (rpc_server.h) of one node's RPCs behind one receiver of the net.
#include "rpc/rpc_engine.h"

#include <algorithm>
#include <cassert>

#include "rpc/msg_types.h"

namespace pfsnet {

RpcEngine::RpcEngine(Net& net, RpcOptions opts, RpcStats* stats)
    : net_(net),
      max_bulk_(opts.max_bulk),
      stats_(stats),
      history_(opts.ops_history),
      server_(net, opts, stats_, names_, history_),
      client_(net, opts, stats_, names_, history_) {
  net_.set_rx(this);
}

std::vector<Op> RpcEngine::ops_in_flight() const {
  std::vector<Op> v = client_.ops();
  std::vector<Op> s = server_.ops();
  v.insert(v.end(), std::make_move_iterator(s.begin()), std::make_move_iterator(s.end()));
  std::stable_sort(v.begin(), v.end(),
                   [](const Op& a, const Op& b) { return a.started < b.started; });
  return v;
}

RpcEngine::~RpcEngine() {
  shutdown();
  // No callback may reach this engine once it is gone.
  net_.shutdown();
}

void RpcEngine::define_type(uint32_t type, std::string name) {
  names_.define(type, std::move(name));
}

void RpcEngine::handle(uint32_t type, std::string name, Handler h, HandlerMode mode,
                       Execution exec) {
  server_.handle(type, std::move(name), std::move(h), mode, exec);
}

void RpcEngine::handle(uint32_t type, Handler h, HandlerMode mode, Execution exec) {
  assert(!msg_type_name(type).empty());
  handle(type, std::string(msg_type_name(type)), std::move(h), mode, exec);
}

void RpcEngine::handle_async(uint32_t type, std::string name, AsyncHandler h, Execution exec,
                             AsyncCredit credit) {
  server_.handle_async(type, std::move(name), std::move(h), exec, credit);
}

std::string RpcEngine::type_name(uint32_t type) const { return names_.name(type); }

uint32_t RpcEngine::type_by_name(std::string_view name) const { return names_.by_name(name); }

size_t RpcEngine::expire(TimePoint now) {
  server_.expire(now);
  return client_.expire(now);
}

void RpcEngine::shutdown() {
  if (client_.shutdown()) server_.stop();  // once, as the workers are stopped once
}

void RpcEngine::on_message(const Nid& from, InFrame&& f, RxCredit credit) {
  if (f.hdr.kind == FrameKind::kReply)
    client_.on_reply(from, std::move(f), std::move(credit));
  else
    server_.serve(from, std::move(f), std::move(credit));
}

void RpcEngine::on_connection_closed(uint64_t conn_id, const Nid& peer_nid, const Status& why) {
  client_.on_connection_closed(conn_id, peer_nid, why);
}

void RpcEngine::on_corrupt(const Nid& from, const FrameHeader& hdr, RxCredit credit) {
  if (hdr.kind == FrameKind::kRequest) {
    server_.refuse_corrupt(from, hdr, std::move(credit));
    return;
  }
  credit.release();
  client_.resend_damaged(hdr.xid, Status(Code::kCorrupt,
                                         "the reply to RPC " + type_name(hdr.msg_type) + " from " +
                                             from.to_string() + " failed its data checksum",
                                         HealthKind::kPeerNiCorrupt));
}

}  // namespace pfsnet
