#include "wire/fabric_wire.h"

#include <string>

#include "wire/le.h"

namespace pfsnet {
namespace {

using le::get;
using le::put;

Status bad_fabric_msg(const std::string& why) {
  return Status(Code::kProtocol, "malformed fabric message: " + why);
}

}  // namespace

// Layout: 0 type u8 | 1 flags u8 | 2 credits u16 | 4 body_len u32 | 8 cookie u64
void encode_fabric_header(const FabricHeader& h, uint8_t* out) {
  out[0] = static_cast<uint8_t>(h.type);
  out[1] = h.flags;
  put<uint16_t>(out + 2, h.credits);
  put<uint32_t>(out + 4, h.body_len);
  put<uint64_t>(out + 8, h.cookie);
}

Result<FabricHeader> decode_fabric_header(std::span<const uint8_t> msg) {
  if (msg.size() < kFabricHeaderSize)
    return bad_fabric_msg("truncated header (" + std::to_string(msg.size()) + " bytes)");
  const uint8_t* p = msg.data();
  if (p[0] < 1 || p[0] > 4) return bad_fabric_msg("unknown type " + std::to_string(p[0]));
  FabricHeader h;
  h.type = static_cast<FabricMsg>(p[0]);
  h.flags = p[1];
  h.credits = get<uint16_t>(p + 2);
  h.body_len = get<uint32_t>(p + 4);
  h.cookie = get<uint64_t>(p + 8);
  if (h.body_len != msg.size() - kFabricHeaderSize)
    return bad_fabric_msg("body of " + std::to_string(h.body_len) + " bytes in a message of " +
                          std::to_string(msg.size()));
  if ((h.type == FabricMsg::kRmaDone || h.type == FabricMsg::kNoop) && h.body_len != 0)
    return bad_fabric_msg("a body on a message that has none");
  return h;
}

// Layout: 0 addr u64 | 8 key u64 | 16 len u64
void encode_rma_desc(const RmaDesc& d, uint8_t* out) {
  put<uint64_t>(out, d.addr);
  put<uint64_t>(out + 8, d.key);
  put<uint64_t>(out + 16, d.len);
}

Result<RmaDesc> decode_rma_desc(std::span<const uint8_t> bytes, uint64_t max_len) {
  if (bytes.size() < kRmaDescSize) return bad_fabric_msg("truncated RMA descriptor");
  RmaDesc d{get<uint64_t>(bytes.data()), get<uint64_t>(bytes.data() + 8),
            get<uint64_t>(bytes.data() + 16)};
  if (d.len == 0 || d.len > max_len)
    return bad_fabric_msg("RMA region of " + std::to_string(d.len) + " bytes (limit " +
                          std::to_string(max_len) + ")");
  return d;
}

Result<FrameMsg> decode_frame_msg(const FabricHeader& fh, std::span<const uint8_t> body,
                                  const FrameLimits& limits) {
  if (fh.type != FabricMsg::kFrame && fh.type != FabricMsg::kFrameRma)
    return bad_fabric_msg("not a frame message");
  const bool rma = fh.type == FabricMsg::kFrameRma;
  const uint8_t known = kSinkOffered | kBulkInSink | (rma ? kRmaPayload | kRmaBulk : 0);
  if (fh.flags & ~known) return bad_fabric_msg("unknown flags " + std::to_string(fh.flags));
  auto hdr = decode_header(body, limits);
  if (!hdr.ok()) return hdr.status();
  FrameMsg m;
  m.hdr = *hdr;
  // Version 2: its extension fields follow the header.
  const size_t head = kHeaderSize + m.hdr.ext_len;
  if (m.hdr.ext_len) {
    if (body.size() < head) return bad_fabric_msg("extensions cut short");
    Status e = decode_extensions(body.subspan(kHeaderSize, m.hdr.ext_len), &m.hdr);
    if (!e.ok()) return e;
  }
  m.bulk_in_sink = fh.flags & kBulkInSink;
  bool payload_rma = fh.flags & kRmaPayload, bulk_rma = fh.flags & kRmaBulk;
  bool sink = fh.flags & kSinkOffered;
  if (sink && m.hdr.kind != FrameKind::kRequest)
    return bad_fabric_msg("a reply sink offered by a non-request");
  if (m.bulk_in_sink && m.hdr.kind != FrameKind::kReply)
    return bad_fabric_msg("bulk in a sink for a non-reply");
  if (m.bulk_in_sink && (bulk_rma || m.hdr.bulk_len == 0))
    return bad_fabric_msg("bulk in a sink and in the message");
  if (rma && !payload_rma && !bulk_rma) return bad_fabric_msg("an RMA frame with nothing to read");
  if (payload_rma && m.hdr.payload_len == 0) return bad_fabric_msg("an empty payload to read");
  if (bulk_rma != (rma && m.hdr.bulk_len > 0 && !m.bulk_in_sink))
    return bad_fabric_msg("the bulk's place does not match its length");
  size_t inline_payload = payload_rma ? 0 : m.hdr.payload_len;
  size_t inline_bulk = rma || m.bulk_in_sink ? 0 : m.hdr.bulk_len;
  size_t descs = size_t(payload_rma) + size_t(bulk_rma) + size_t(sink);
  if (body.size() != head + inline_payload + inline_bulk + descs * kRmaDescSize)
    return bad_fabric_msg("frame lengths do not match the message");
  body = body.subspan(head);
  m.payload = body.first(inline_payload);
  m.bulk = body.subspan(inline_payload, inline_bulk);
  body = body.subspan(inline_payload + inline_bulk);
  auto desc = [&](uint64_t len, bool exact) -> Result<RmaDesc> {
    auto d = decode_rma_desc(body.first(kRmaDescSize), len);
    body = body.subspan(kRmaDescSize);
    if (d.ok() && exact && d->len != len) return bad_fabric_msg("RMA region of the wrong length");
    return d;
  };
  if (payload_rma) {
    auto d = desc(m.hdr.payload_len, true);
    if (!d.ok()) return d.status();
    m.payload_rma = *d;
  }
  if (bulk_rma) {
    auto d = desc(m.hdr.bulk_len, true);
    if (!d.ok()) return d.status();
    m.bulk_rma = *d;
  }
  if (sink) {
    auto d = desc(limits.max_bulk, false);
    if (!d.ok()) return d.status();
    m.sink = *d;
  }
  return m;
}

// Layout: 0 magic u32 | 4 version u16 | 6 reserved u16 | 8 rx_depth u32 | 12 msg_size u32
std::array<uint8_t, kConnParamsSize> encode_conn_params(const ConnParams& p) {
  std::array<uint8_t, kConnParamsSize> out{};
  put<uint32_t>(out.data(), kConnParamsMagic);
  put<uint16_t>(out.data() + 4, p.version);
  put<uint32_t>(out.data() + 8, p.rx_depth);
  put<uint32_t>(out.data() + 12, p.msg_size);
  return out;
}

Result<ConnParams> decode_conn_params(std::span<const uint8_t> bytes) {
  if (bytes.size() < kConnParamsSize)
    return Status(Code::kProtocol, "connection parameters missing (" +
                                       std::to_string(bytes.size()) + " bytes): not a pfsnet peer");
  if (get<uint32_t>(bytes.data()) != kConnParamsMagic)
    return Status(Code::kProtocol, "connection parameters of another protocol");
  ConnParams p;
  p.version = get<uint16_t>(bytes.data() + 4);
  p.rx_depth = get<uint32_t>(bytes.data() + 8);
  p.msg_size = get<uint32_t>(bytes.data() + 12);
  if (p.version != kFabricWireVersion)
    return Status(Code::kRejected, "unsupported fabric wire version " + std::to_string(p.version) +
                                       " (this node speaks " + std::to_string(kFabricWireVersion) +
                                       ")");
  if (p.rx_depth < kMinRxDepth || p.rx_depth > kMaxRxDepth)
    return Status(Code::kProtocol, "receive depth " + std::to_string(p.rx_depth) + " outside [" +
                                       std::to_string(kMinRxDepth) + ", " +
                                       std::to_string(kMaxRxDepth) + "]");
  if (p.msg_size < kMinMsgSize || p.msg_size > kMaxMsgSize)
    return Status(Code::kProtocol, "message size " + std::to_string(p.msg_size) + " outside [" +
                                       std::to_string(kMinMsgSize) + ", " +
                                       std::to_string(kMaxMsgSize) + "]");
  return p;
}

}  // namespace pfsnet
