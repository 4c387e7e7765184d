// The PING message type: a round trip with optional bulk in either direction, used by
// `pfsnet ping`, the tests and the benchmarks. Payload: empty (echo the request's bulk
// back) or 4 bytes LE N (reply with N bytes of ping_pattern bulk, a "read").
// Thread safety: pure functions and PingPattern (any thread); the handler is inline and
// non-blocking.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>

#include "base/mutex.h"
#include "rpc/msg_types.h"
#include "rpc/rpc_engine.h"

namespace pfsnet {

// PING (kMsgPing, rpc/msg_types.h) and bulk write/read in one round trip each, as
// lnet_selftest's brw test does them: BRW_WRITE carries ping_pattern bulk that the server
// checks (a mismatch is an error reply); BRW_READ's payload is 4 bytes LE N and the reply
// carries N bytes of pattern.

// Serves PING, BRW_WRITE and BRW_READ on `engine` (inline), with bulk of up to
// `max_bulk` bytes.
void serve_ping(RpcEngine& engine, size_t max_bulk);
// The request payload: nullopt = echo, N = reply with N bytes of pattern.
Buffer ping_payload(std::optional<uint32_t> reply_bulk);
// Byte i of every PING read reply and of the clients' write data.
inline uint8_t ping_pattern(size_t i) { return static_cast<uint8_t>((i * 131) ^ (i >> 9)); }
Buffer make_ping_pattern(size_t n);
// The pattern a server's read replies send prefixes of (max_bulk bytes, built once), with
// the CRC-32C of each prefix length replied so far, kept as a store keeps its blocks'
// checksums: a reply's data checksum then takes no pass over its bulk. Any thread.
class PingPattern {
 public:
  explicit PingPattern(size_t max_bulk);
  const BulkData& bytes() const { return bytes_; }
  // The CRC-32C of the first n bytes (n <= the pattern's size): computed once per length,
  // the first kMaxLengths lengths kept.
  uint32_t crc_of(size_t n);

  static constexpr size_t kMaxLengths = 64;

 private:
  BulkData bytes_;
  Mutex mu_;
  std::map<size_t, uint32_t> crcs_ GUARDED_BY(mu_);
};
// A read's reply: parses the request's 4-byte size N and fills `r` with the first N bytes
// of `pattern`, and their CRC (an error when the payload is malformed or N exceeds
// `max_bulk`).
void read_reply(const RpcRequest& req, PingPattern& pattern, size_t max_bulk, RpcResponse* r);
// True when `data` is ping_pattern bytes 0..size-1.
bool check_ping_pattern(std::span<const uint8_t> data);

}  // namespace pfsnet
