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

// Where a method's encoded reply travels: in the reply message's payload, or in its bulk
// (a page of a table, larger than a message's payload may be).
enum class ReplyIn { kPayload, kBulk };

template <class Req, class Rep>
struct RpcMethod {
  uint32_t type;
  const char* name;
  Execution exec;
  Buffer (*encode_request)(const Req&);
  Result<Req> (*decode_request)(std::span<const uint8_t>);
  Buffer (*encode_reply)(const Rep&);
  Result<Rep> (*decode_reply)(std::span<const uint8_t>);
  // Where serve() runs its handler: on the I/O thread (must not block) or a worker.
  HandlerMode mode = HandlerMode::kInline;
  ReplyIn reply_in = ReplyIn::kPayload;
};

// A request or a reply that carries nothing; anything in it is malformed.
struct Empty {};
inline Buffer encode_empty(const Empty&) { return Buffer(); }
inline Result<Empty> decode_empty(std::span<const uint8_t> b) {
  if (!b.empty())
    return Status(Code::kProtocol, "carries " + std::to_string(b.size()) + " bytes, expected none");
  return Empty{};
}

// The response that carries an encoded reply where `in` says.
inline RpcResponse reply_response(Buffer encoded, ReplyIn in) {
  RpcResponse resp;
  if (in == ReplyIn::kBulk)
    resp.bulk = make_bulk(std::move(encoded));
  else
    resp.payload = std::move(encoded);
  return resp;
}

// The answer to one request of a typed method, now or later, once (unanswered when it
// goes: the caller hears kCancelled, as with Responder).
template <class Rep>
class TypedResponder {
 public:
  TypedResponder() = default;
  TypedResponder(Responder r, Buffer (*encode)(const Rep&), ReplyIn in = ReplyIn::kPayload)
      : r_(std::move(r)), encode_(encode), in_(in) {}
  // Once: a responder answered already, or made empty, does nothing.
  void reply(const Rep& rep) {
    if (!answered()) r_.reply(reply_response(encode_(rep), in_));
  }
  void fail(Status s) { r_.reply(RpcResponse{std::move(s), {}, {}}); }
  bool answered() const { return r_.answered(); }

 private:
  Responder r_;
  Buffer (*encode_)(const Rep&) = nullptr;
  ReplyIn in_ = ReplyIn::kPayload;
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
        fn(std::move(*q), req, TypedResponder<Rep>(std::move(r), m.encode_reply, m.reply_in));
      },
      m.exec, credit);
}

// Serves `m` on `rpc` with `fn`, which answers at once, on the thread `m.mode` names
// (register before traffic starts). `fn(Req&&, RpcRequest&) -> Result<Rep>`; an error is
// the caller's status.
template <class Req, class Rep, class Fn>
void serve(RpcEngine& rpc, const RpcMethod<Req, Rep>& m, Fn fn) {
  rpc.handle(
      m.type, m.name,
      [m, fn = std::move(fn)](RpcRequest& req) -> RpcResponse {
        Result<Req> q = m.decode_request(req.payload.span());
        if (!q.ok()) return RpcResponse{q.status(), {}, {}};
        Result<Rep> rep = fn(std::move(*q), req);
        if (!rep.ok()) return RpcResponse{rep.status(), {}, {}};
        return reply_response(m.encode_reply(*rep), m.reply_in);
      },
      m.mode, m.exec);
}

// The reply of `m` as its type, or the call's error; a reply that does not decode is
// kProtocol.
template <class Req, class Rep>
Result<Rep> decode_method_reply(const RpcMethod<Req, Rep>& m, const RpcReply& r) {
  if (!r.status.ok()) return r.status;
  Result<Rep> rep = m.decode_reply(m.reply_in == ReplyIn::kBulk ? r.bulk.span() : r.payload.span());
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

// Calls `m` on `dst` with a request already encoded by `m.encode_request` (a pure core
// that hands over wire payloads); `done(Result<Rep>)` gets the reply or the error, once.
template <class Req, class Rep, class Fn>
void call_encoded_async(RpcEngine& rpc, const RpcMethod<Req, Rep>& m, const Nid& dst,
                        Buffer encoded, Fn done, const CallOptions& co) {
  rpc.call_async(
      dst, m.type, std::move(encoded), nullptr,
      [m, done = std::move(done)](RpcReply&& r) mutable { done(decode_method_reply(m, r)); }, co);
}

// Calls `m` on `dst`; `done(Result<Rep>)` gets the reply or the error, once.
template <class Req, class Rep, class Fn>
void call_async(RpcEngine& rpc, const RpcMethod<Req, Rep>& m, const Nid& dst, const Req& req,
                Fn done, const CallOptions& co) {
  call_encoded_async(rpc, m, dst, m.encode_request(req), std::move(done), co);
}

}  // namespace pfsnet
