// Typed RPC methods: a module declares each of its methods once -- message type, name,
// execution rule, and the codec of its request and its reply -- and both ends use that one
// declaration: the server serves it, the client calls it. Nothing is encoded, sent or
// decoded by hand at a call site. A malformed request is answered kProtocol without reaching
// the handler; a malformed reply fails the call with kProtocol, naming the method.
// Thread safety: as RpcEngine.
#pragma once

#include <pfsnet/rpc.h>

#include <functional>
#include <span>
#include <string>
#include <utility>

#include "rpc/rpc_engine.h"

namespace pfsnet {

template <class Req, class Rep>
struct RpcMethod {
  uint32_t type;
  const char* name;
  Execution exec;
  Buffer (*encode_request)(const Req&);
  Result<Req> (*decode_request)(std::span<const uint8_t>);
  Buffer (*encode_reply)(const Rep&);
  Result<Rep> (*decode_reply)(std::span<const uint8_t>);
};

// The answer to one request of a typed method, now or later, once (unanswered when it
// goes: the caller hears kCancelled, as with Responder).
template <class Rep>
class TypedResponder {
 public:
  TypedResponder() = default;
  TypedResponder(Responder r, Buffer (*encode)(const Rep&)) : r_(std::move(r)), encode_(encode) {}
  void reply(const Rep& rep) {
    RpcResponse resp;
    resp.payload = encode_(rep);
    r_.reply(std::move(resp));
  }
  void fail(Status s) { r_.reply(RpcResponse{std::move(s), {}, {}}); }

 private:
  Responder r_;
  Buffer (*encode_)(const Rep&) = nullptr;
};

// Serves `m` on `rpc` with `fn`, which gets the decoded request and answers through the
// responder (register before traffic starts).
// `fn(Req&&, RpcRequest&, TypedResponder<Rep>)`.
template <class Req, class Rep, class Fn>
void serve_async(RpcEngine& rpc, const RpcMethod<Req, Rep>& m, Fn fn,
                 AsyncCredit credit = AsyncCredit::kHeld) {
  rpc.handle_async(
      m.type, m.name,
      [m, fn = std::move(fn)](RpcRequest& req, Responder r) {
        Result<Req> q = m.decode_request(req.payload.span());
        if (!q.ok()) return r.reply(RpcResponse{q.status(), {}, {}});
        fn(std::move(*q), req, TypedResponder<Rep>(std::move(r), m.encode_reply));
      },
      m.exec, credit);
}

// The reply of `m` as its type, or the call's error; a reply that does not decode is
// kProtocol.
template <class Req, class Rep>
Result<Rep> decode_method_reply(const RpcMethod<Req, Rep>& m, const RpcReply& r) {
  if (!r.status.ok()) return r.status;
  Result<Rep> rep = m.decode_reply(r.payload.span());
  if (!rep.ok())
    return Status(Code::kProtocol,
                  std::string("malformed ") + m.name + " reply: " + rep.status().message());
  return rep;
}

// Calls `m` on `dst`, blocking until its reply or error.
template <class Req, class Rep>
Result<Rep> call(RpcEngine& rpc, const RpcMethod<Req, Rep>& m, const Nid& dst, const Req& req,
                 const CallOptions& co) {
  return decode_method_reply(m, rpc.call(dst, m.type, m.encode_request(req), nullptr, co));
}

// Calls `m` on `dst`; `done(Result<Rep>)` gets the reply or the error, once.
template <class Req, class Rep, class Fn>
void call_async(RpcEngine& rpc, const RpcMethod<Req, Rep>& m, const Nid& dst, const Req& req,
                Fn done, const CallOptions& co) {
  rpc.call_async(
      dst, m.type, m.encode_request(req), nullptr,
      [m, done = std::move(done)](RpcReply&& r) { done(decode_method_reply(m, r)); }, co);
}

}  // namespace pfsnet
