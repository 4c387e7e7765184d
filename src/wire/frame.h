// The pfsnet frame format (docs/wire_format.md is the specification): a fixed 64-byte
// little-endian header, then payload, then bulk data. This header holds every constant of
// the format; encode_header and decode_header are its only encoder and decoder.
// Thread safety: pure functions.
#pragma once

#include <pfsnet/nid.h>
#include <pfsnet/status.h>

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "wire/crc32c.h"

namespace pfsnet {

inline constexpr uint32_t kFrameMagic = 0x31534650;  // "PFS1" on the wire
inline constexpr uint16_t kWireVersion = 1;
inline constexpr size_t kHeaderSize = 64;
// Largest payload (RPC arguments, handshake messages); bulk data has its own limit.
inline constexpr uint32_t kMaxPayload = 64 * 1024;

enum class FrameKind : uint8_t {
  kHello = 1,    // handshake: nonce, NIDs, server's proof
  kAuth = 2,     // handshake: client's proof (client to server) or acceptance (server to client)
  kReject = 3,   // handshake refused; payload is the reason
  kRequest = 4,  // an RPC request
  kReply = 5,    // an RPC reply (status field set)
  kCredit = 6,   // returns credits when there is no traffic to piggyback them on
};
bool is_valid_frame_kind(uint8_t k);

// Flags.
inline constexpr uint8_t kFlagBulkFromServer = 1;  // request asks for bulk in the reply
// The sender used its last credit on this frame: the receiver returns every credit it
// owes once the frame is consumed (its own threshold may exceed the sender's window).
inline constexpr uint8_t kFlagWindowEmpty = 2;
// Integrity of the data (wire/data_crc.h): the payload's last 4 bytes are the CRC-32C of
// the payload before them and then the bulk. Only on REQUEST and REPLY; the 4 bytes do not
// count against FrameLimits::max_payload.
inline constexpr uint8_t kFlagDataCrc = 4;
inline constexpr uint32_t kDataCrcSize = 4;
// REQUEST: a copy -- its client wrote an earlier one to a connection, so the server (or
// its previous run, before a restart) may have it already (rpc/reply_cache.h). A receiver
// that does not know the flag ignores it.
inline constexpr uint8_t kFlagResend = 8;

struct FrameHeader {
  FrameKind kind = FrameKind::kRequest;
  uint8_t flags = 0;
  uint64_t src_nid = 0;  // packed Nid
  uint64_t dst_nid = 0;
  uint64_t xid = 0;
  uint32_t msg_type = 0;
  uint32_t payload_len = 0;
  uint32_t bulk_len = 0;
  uint32_t credits = 0;  // credits returned to the receiver of this frame
  // Bytes 48..59 mean one thing in a reply and another in a request (never both).
  uint64_t exec_ns = 0;  // replies: server execution time
  uint16_t status = 0;   // replies: Code; 0 = OK
  uint16_t health = 0;   // replies: HealthKind of a failure
  // Requests (exactly-once execution, rpc/reply_cache.h): the client engine's
  // incarnation -- random and nonzero per start; 0 asks for nothing -- and how far below
  // this xid its oldest unfinished RPC is: every xid of that client below
  // xid - done_lag is finished at its end (answered or given up).
  uint64_t incarnation = 0;
  uint32_t done_lag = 0;
  // bulk_read: in a request, how many bytes of bulk the reply should carry
  // is carried in the payload by the RPC layer; the frame knows only lengths.
};

struct FrameLimits {
  uint32_t max_payload = kMaxPayload;
  uint32_t max_bulk = 2 * 1024 * 1024;
};

using EncodedHeader = std::array<uint8_t, kHeaderSize>;

// Encodes the header with its checksum.
void encode_header(const FrameHeader& h, EncodedHeader* out);

// Decodes and checks a header: magic, version, kind, checksum, and payload and bulk
// lengths against `limits` (so no allocation is made for a hostile length).
// Errors have Code::kProtocol and say what was wrong.
Result<FrameHeader> decode_header(std::span<const uint8_t> bytes, const FrameLimits& limits);

}  // namespace pfsnet
