#include "rpc/ping.h"

namespace pfsnet {

Buffer make_ping_pattern(size_t n) {
  Buffer b(n);
  for (size_t i = 0; i < n; ++i) b.data()[i] = ping_pattern(i);
  return b;
}

bool check_ping_pattern(std::span<const uint8_t> data) {
  for (size_t i = 0; i < data.size(); ++i)
    if (data[i] != ping_pattern(i)) return false;
  return true;
}

Buffer ping_payload(std::optional<uint32_t> reply_bulk) {
  if (!reply_bulk) return Buffer();
  Buffer b(4);
  for (int i = 0; i < 4; ++i) b.data()[i] = static_cast<uint8_t>(*reply_bulk >> (8 * i));
  return b;
}

void read_reply(const RpcRequest& req, const BulkData& pattern, size_t max_bulk, RpcResponse* r) {
  if (req.payload.size() != 4) {
    r->status = Status(Code::kInvalidArgument, "malformed read payload");
    return;
  }
  const uint8_t* p = req.payload.data();
  uint32_t n = p[0] | (p[1] << 8) | (p[2] << 16) | (uint32_t(p[3]) << 24);
  if (n > max_bulk) {
    r->status = Status(Code::kInvalidArgument, "read of " + std::to_string(n) + " bytes exceeds " +
                                                   std::to_string(max_bulk));
    return;
  }
  if (n) {
    r->bulk = pattern;
    r->bulk_limit = n;
  }
}

void serve_ping(RpcEngine& engine, size_t max_bulk) {
  // One shared pattern: read replies send a prefix of it without copying.
  BulkData pattern = make_bulk(make_ping_pattern(max_bulk));
  engine.handle(
      kMsgBrwWrite,
      [](RpcRequest& req) {
        RpcResponse r;
        if (!check_ping_pattern(req.bulk.span()))
          r.status = Status(Code::kProtocol, "BRW_WRITE data arrived corrupted");
        return r;
      },
      HandlerMode::kInline);
  engine.handle(
      kMsgBrwRead,
      [pattern, max_bulk](RpcRequest& req) {
        RpcResponse r;
        read_reply(req, pattern, max_bulk, &r);
        return r;
      },
      HandlerMode::kInline, Execution::kRepeatable);
  engine.handle(
      kMsgPing,
      [pattern, max_bulk](RpcRequest& req) {
        RpcResponse r;
        if (req.payload.empty()) {
          if (!req.bulk.empty()) r.bulk = make_bulk(std::move(req.bulk));
          return r;
        }
        read_reply(req, pattern, max_bulk, &r);
        return r;
      },
      HandlerMode::kInline, Execution::kRepeatable);
}

}  // namespace pfsnet
