// The pfsnet frame format (docs/wire_format.md is the specification): a fixed 64-byte
// little-endian header, then (version 2) an extension area of typed, length-prefixed
// fields, then payload, then bulk data. This header holds every constant of the format;
// encode_header / encode_frame_head and decode_header / decode_extensions are its only
// encoders and decoders.
// Thread safety: pure functions.
#pragma once

#include <pfsnet/nid.h>
#include <pfsnet/status.h>
#include <pfsnet/trace_context.h>

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "wire/crc32c.h"

namespace pfsnet {

inline constexpr uint32_t kFrameMagic = 0x31534650;  // "PFS1" on the wire
// The wire versions this build speaks; a connection speaks the highest both ends do
// (wire/handshake.h). Version 1 is the 64-byte header of pfsnet up to commit 8827b49 and is
// spoken for as long as such a peer can exist (docs/wire_format.md, "Compatibility").
inline constexpr uint16_t kWireVersion = 1;  // the version of a handshake's first frame
inline constexpr uint16_t kWireVersionMin = 1;
inline constexpr uint16_t kWireVersionMax = 2;
inline constexpr size_t kHeaderSize = 64;
// Version 2: the most bytes of extension fields a frame may carry after its header.
inline constexpr size_t kMaxExtension = 1024;
// Largest payload (RPC arguments, handshake messages); bulk data has its own limit.
inline constexpr uint32_t kMaxPayload = 64 * 1024;

enum class FrameKind : uint8_t {
  kHello = 1,    // handshake: nonce, NIDs, server's proof
  kAuth = 2,     // handshake: client's proof (client to server) or acceptance (server to client)
  kReject = 3,   // handshake refused; payload is the reason
  kRequest = 4,  // an RPC request
  kReply = 5,    // an RPC reply (status field set)
  kCredit = 6,   // returns credits when there is no traffic to piggyback them on
  // The receive window its sender grants now (xid: frames in flight it takes on the
  // connection, kFeatureWindow). A control frame; only where both ends announce the feature.
  kWindow = 7,
};
bool is_valid_frame_kind(uint8_t k);
// HELLO, AUTH and REJECT: the handshake's frames, in the version its machine chose.
inline bool is_handshake_kind(FrameKind k) {
  return k == FrameKind::kHello || k == FrameKind::kAuth || k == FrameKind::kReject;
}

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

// Version 2's extension fields (docs/wire_format.md, "Extensions"): each a type byte, a
// length byte and that many bytes. A type with bit 7 clear is skipped by a receiver that
// does not know it; one with bit 7 set is a protocol error there. A sender puts a field
// only on a connection whose negotiated features include it (kFeature* below).
enum class ExtType : uint8_t {
  kJobId = 1,         // REQUEST: the job the RPC works for (1..kMaxJobId printable bytes)
  kTraceContext = 2,  // REQUEST: W3C trace context (trace id 16, parent id 8, flags 1)
  kQueueTime = 3,     // REPLY: ns the request waited at the server before its handler ran
  // REQUEST and REPLY: a routed frame's two ends and the routers it crossed (bit 7 set: a
  // receiver that does not know it must refuse the frame, not take it for its own).
  kRoute = 0x84,
};
// A routed frame that has crossed this many routers is dropped: a routing loop.
inline constexpr uint8_t kMaxFrameHops = 32;
inline constexpr size_t kMaxJobId = 64;
inline constexpr size_t kTraceContextSize = 25;

// Feature bits a node announces in its version-2 handshake; a connection has those both
// ends announce.
inline constexpr uint64_t kFeatureJobId = 1 << 0;
inline constexpr uint64_t kFeatureTraceContext = 1 << 1;
inline constexpr uint64_t kFeatureQueueTime = 1 << 2;
// The node understands routed frames (ExtType::kRoute): a router forwards them, any other
// node takes those addressed to it and drops the rest. A routed frame goes only on a
// connection whose two ends announce it.
inline constexpr uint64_t kFeatureRouting = 1 << 3;
// Receive windows (docs/wire_format.md, "Receive windows"): an end may grant in its
// handshake how many requests and replies it takes in flight on the connection (a router:
// its lnet.peer_credits), and sends a WINDOW frame when that changes; its peer keeps within
// the grant, and it closes a connection whose peer goes beyond. A router forwards only for
// peers that announce the feature.
inline constexpr uint64_t kFeatureWindow = 1 << 4;
inline constexpr uint32_t kMaxWindow = 1 << 16;  // the largest window granted (peer_credits)
inline constexpr uint64_t kFeaturesSpoken =
    kFeatureJobId | kFeatureTraceContext | kFeatureQueueTime | kFeatureRouting | kFeatureWindow;
// "job_id,trace,queue_time,routing,window" (the bits this build knows by name; others as
// hex).
std::string feature_names(uint64_t features);

// The extension fields of one frame (version 2 only; a version-1 connection carries none).
struct FrameExt {
  uint8_t job_id_len = 0;
  std::array<char, kMaxJobId> job_id{};
  bool has_trace = false;
  TraceContext trace;
  bool has_queue_time = false;
  uint64_t queue_ns = 0;
  // A routed frame (ExtType::kRoute): the NI that sent it first and the NI it is for,
  // across routers (a version-2 header carries only its hop's, the connection's), and how
  // many routers it has crossed.
  bool routed = false;
  uint8_t hops = 0;
  Nid route_src = Nid::none(), route_dst = Nid::none();

  bool empty() const { return job_id_len == 0 && !has_trace && !has_queue_time && !routed; }
  std::string_view job() const { return {job_id.data(), job_id_len}; }
  // Sets the job id; false (and nothing set) unless 1..kMaxJobId printable ASCII bytes.
  bool set_job(std::string_view id);
  // Only the fields `features` allow.
  void keep_only(uint64_t features);
  // Bytes the fields take on the wire.
  size_t encoded_size() const;
};
// Whether `id` can be a job id: 1..kMaxJobId bytes of printable ASCII, no space.
bool valid_job_id(std::string_view id);

struct FrameHeader {
  FrameKind kind = FrameKind::kRequest;
  uint8_t flags = 0;
  // The two ends. Version 1 carries them as 64-bit NIDs (0 for a large one); version 2
  // does not: a transport fills both from its connection on receipt in every version.
  Nid src_nid = Nid::none();
  Nid dst_nid = Nid::none();
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
  // The frame's extension fields (version 2).
  FrameExt ext;
  // Decoded: the version of the header, and (version 2) the length and CRC-32C of the
  // extension area that follows it, which decode_extensions checks and takes in.
  uint16_t version = 1;
  uint16_t ext_len = 0;
  uint32_t ext_crc = 0;
};

struct FrameLimits {
  uint32_t max_payload = kMaxPayload;
  uint32_t max_bulk = 2 * 1024 * 1024;
};

using EncodedHeader = std::array<uint8_t, kHeaderSize>;

// Encodes a version-1 header with its checksum (h.ext is not carried).
void encode_header(const FrameHeader& h, EncodedHeader* out);

// A header and its extension area, as a version-2 frame carries them.
struct EncodedHead {
  std::array<uint8_t, kHeaderSize + kMaxExtension> bytes;
  size_t size = 0;
  std::span<const uint8_t> span() const { return {bytes.data(), size}; }
};
// Encodes `h` as `version` writes it: version 1, the header alone (h.ext dropped);
// version 2, the header then h.ext's fields.
void encode_frame_head(const FrameHeader& h, uint16_t version, EncodedHead* out);

// Decodes and checks a header: magic, version (one this build speaks), kind, checksum, and
// payload and bulk lengths against `limits` (so no allocation is made for a hostile
// length). A version-2 header says in ext_len how many bytes of extensions follow it;
// decode_extensions takes them. Errors have Code::kProtocol (an unknown version
// kRejected) and say what was wrong.
Result<FrameHeader> decode_header(std::span<const uint8_t> bytes, const FrameLimits& limits);
// Checks and decodes the h->ext_len bytes of extensions that follow a version-2 header
// into h->ext: their CRC, each field's length and place, no field twice, an unknown field
// with bit 7 set refused.
Status decode_extensions(std::span<const uint8_t> bytes, FrameHeader* h);

// `bytes` in lowercase hex (a trace context's fields, a key's fingerprint).
std::string to_hex(std::span<const uint8_t> bytes);

}  // namespace pfsnet
