#include "wire/frame.h"

#include <cstring>

#include "wire/le.h"

namespace pfsnet {
namespace {

using le::get;
using le::put;

Status bad(const std::string& why) { return Status(Code::kProtocol, "malformed frame: " + why); }

}  // namespace

bool is_valid_frame_kind(uint8_t k) { return k >= 1 && k <= 6; }

// Layout (little-endian):
//  0 magic u32 | 4 version u16 | 6 kind u8 | 7 flags u8 | 8 src_nid u64 | 16 dst_nid u64
// 24 xid u64 | 32 msg_type u32 | 36 payload_len u32 | 40 bulk_len u32 | 44 credits u32
// 48 exec_ns u64 | 56 status u16 | 58 health u16 (replies and control frames)
// 48 incarnation u64 | 56 done_lag u32 (requests) | 60 crc32c of bytes 0..59 u32
void encode_header(const FrameHeader& h, EncodedHeader* out) {
  uint8_t* p = out->data();
  put<uint32_t>(p + 0, kFrameMagic);
  put<uint16_t>(p + 4, kWireVersion);
  p[6] = static_cast<uint8_t>(h.kind);
  p[7] = h.flags;
  put<uint64_t>(p + 8, h.src_nid);
  put<uint64_t>(p + 16, h.dst_nid);
  put<uint64_t>(p + 24, h.xid);
  put<uint32_t>(p + 32, h.msg_type);
  put<uint32_t>(p + 36, h.payload_len);
  put<uint32_t>(p + 40, h.bulk_len);
  put<uint32_t>(p + 44, h.credits);
  if (h.kind == FrameKind::kRequest) {
    put<uint64_t>(p + 48, h.incarnation);
    put<uint32_t>(p + 56, h.done_lag);
  } else {
    put<uint64_t>(p + 48, h.exec_ns);
    put<uint16_t>(p + 56, h.status);
    put<uint16_t>(p + 58, h.health);
  }
  put<uint32_t>(p + 60, crc32c({p, 60}));
}

Result<FrameHeader> decode_header(std::span<const uint8_t> bytes, const FrameLimits& limits) {
  if (bytes.size() < kHeaderSize)
    return bad("truncated header (" + std::to_string(bytes.size()) + " of 64 bytes)");
  const uint8_t* p = bytes.data();
  uint32_t magic = get<uint32_t>(p);
  if (magic != kFrameMagic) return bad("bad magic 0x" + std::to_string(magic));
  uint16_t version = get<uint16_t>(p + 4);
  if (version != kWireVersion)
    return Status(Code::kRejected, "unsupported wire version " + std::to_string(version) +
                                       " (this node speaks " + std::to_string(kWireVersion) + ")");
  if (get<uint32_t>(p + 60) != crc32c({p, 60})) return bad("header checksum mismatch");
  if (!is_valid_frame_kind(p[6])) return bad("unknown frame kind " + std::to_string(p[6]));
  FrameHeader h;
  h.kind = static_cast<FrameKind>(p[6]);
  h.flags = p[7];
  h.src_nid = get<uint64_t>(p + 8);
  h.dst_nid = get<uint64_t>(p + 16);
  h.xid = get<uint64_t>(p + 24);
  h.msg_type = get<uint32_t>(p + 32);
  h.payload_len = get<uint32_t>(p + 36);
  h.bulk_len = get<uint32_t>(p + 40);
  h.credits = get<uint32_t>(p + 44);
  if (h.kind == FrameKind::kRequest) {
    h.incarnation = get<uint64_t>(p + 48);
    h.done_lag = get<uint32_t>(p + 56);
  } else {
    h.exec_ns = get<uint64_t>(p + 48);
    h.status = get<uint16_t>(p + 56);
    h.health = get<uint16_t>(p + 58);
  }
  const bool sealed = h.flags & kFlagDataCrc;
  if (sealed && h.kind != FrameKind::kRequest && h.kind != FrameKind::kReply)
    return bad("data checksum flag on a control frame");
  if (sealed && h.payload_len < kDataCrcSize)
    return bad("data checksum flag on a payload of " + std::to_string(h.payload_len) + " bytes");
  if (h.payload_len > limits.max_payload + (sealed ? kDataCrcSize : 0))
    return bad("payload length " + std::to_string(h.payload_len) + " exceeds limit " +
               std::to_string(limits.max_payload));
  if (h.bulk_len > limits.max_bulk)
    return bad("bulk length " + std::to_string(h.bulk_len) + " exceeds limit " +
               std::to_string(limits.max_bulk));
  if (h.kind != FrameKind::kRequest && h.kind != FrameKind::kReply && h.bulk_len != 0)
    return bad("bulk data on a control frame");
  return h;
}

}  // namespace pfsnet
