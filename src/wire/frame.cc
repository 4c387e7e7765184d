#include "wire/frame.h"

#include <cstdio>
#include <cstring>
#include <optional>
#include <utility>

#include "wire/le.h"
#include "wire/nid_form.h"

namespace pfsnet {
namespace {

using le::get;
using le::put;

Status bad(const std::string& why) { return Status(Code::kProtocol, "malformed frame: " + why); }

constexpr uint8_t kExtMustKnow = 0x80;

bool all_zero(std::span<const uint8_t> b) {
  for (uint8_t v : b)
    if (v) return false;
  return true;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // W3C: lowercase only
}

bool parse_hex(std::string_view text, std::span<uint8_t> out) {
  if (text.size() != 2 * out.size()) return false;
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = hex_value(text[2 * i]), lo = hex_value(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

void put_hex(std::span<const uint8_t> b, std::string* out) {
  static const char kDigits[] = "0123456789abcdef";
  for (uint8_t v : b) {
    out->push_back(kDigits[v >> 4]);
    out->push_back(kDigits[v & 15]);
  }
}

// Where each field the two versions share sits in their headers (docs/wire_format.md): one
// encoder and one decoder of those fields, instantiated per version.
struct Layout {
  uint16_t version;
  size_t xid, msg_type, payload_len, bulk_len, credits;
  size_t word, status, health, done_lag;  // word: exec_ns (replies) / incarnation (requests)
};
constexpr Layout kLayoutV1{1, 24, 32, 36, 40, 44, 48, 56, 58, 56};
constexpr Layout kLayoutV2{2, 8, 16, 20, 24, 28, 32, 40, 42, 40};

template <const Layout& L>
void put_fields(const FrameHeader& h, uint8_t* p) {
  put<uint32_t>(p + 0, kFrameMagic);
  put<uint16_t>(p + 4, L.version);
  p[6] = static_cast<uint8_t>(h.kind);
  p[7] = h.flags;
  put<uint64_t>(p + L.xid, h.xid);
  put<uint32_t>(p + L.msg_type, h.msg_type);
  put<uint32_t>(p + L.payload_len, h.payload_len);
  put<uint32_t>(p + L.bulk_len, h.bulk_len);
  put<uint32_t>(p + L.credits, h.credits);
  if (h.kind == FrameKind::kRequest) {
    put<uint64_t>(p + L.word, h.incarnation);
    put<uint32_t>(p + L.done_lag, h.done_lag);
  } else {
    put<uint64_t>(p + L.word, h.exec_ns);
    put<uint16_t>(p + L.status, h.status);
    put<uint16_t>(p + L.health, h.health);
  }
}

template <const Layout& L>
void get_fields(const uint8_t* p, FrameHeader* h) {
  h->version = L.version;
  h->kind = static_cast<FrameKind>(p[6]);
  h->flags = p[7];
  h->xid = get<uint64_t>(p + L.xid);
  h->msg_type = get<uint32_t>(p + L.msg_type);
  h->payload_len = get<uint32_t>(p + L.payload_len);
  h->bulk_len = get<uint32_t>(p + L.bulk_len);
  h->credits = get<uint32_t>(p + L.credits);
  if (h->kind == FrameKind::kRequest) {
    h->incarnation = get<uint64_t>(p + L.word);
    h->done_lag = get<uint32_t>(p + L.done_lag);
  } else {
    h->exec_ns = get<uint64_t>(p + L.word);
    h->status = get<uint16_t>(p + L.status);
    h->health = get<uint16_t>(p + L.health);
  }
}

}  // namespace

bool is_valid_frame_kind(uint8_t k) { return k >= 1 && k <= 7; }

std::string feature_names(uint64_t features) {
  static const std::pair<uint64_t, const char*> kNames[] = {{kFeatureJobId, "job_id"},
                                                            {kFeatureTraceContext, "trace"},
                                                            {kFeatureQueueTime, "queue_time"},
                                                            {kFeatureRouting, "routing"},
                                                            {kFeatureWindow, "window"}};
  std::string s;
  for (auto [bit, name] : kNames)
    if (features & bit) {
      s += (s.empty() ? "" : ",") + std::string(name);
      features &= ~bit;
    }
  if (features) {
    char hex[32];
    std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(features));
    s += (s.empty() ? "" : ",") + std::string(hex);
  }
  return s;
}

bool TraceContext::valid() const { return !all_zero(trace_id) && !all_zero(parent_id); }

std::string TraceContext::to_string() const {
  std::string s = "00-";
  put_hex(trace_id, &s);
  s += '-';
  put_hex(parent_id, &s);
  s += '-';
  put_hex(std::span(&flags, 1), &s);
  return s;
}

Result<TraceContext> TraceContext::parse(std::string_view t) {
  TraceContext c;
  auto bad_trace = [&] {
    return Status(Code::kInvalidArgument,
                  "trace context '" + std::string(t.substr(0, 80)) +
                      "': expected 00-<32 hex digits>-<16 hex digits>-<2 hex digits>, ids not "
                      "all zero (W3C traceparent)");
  };
  if (t.size() != 55 || t.substr(0, 3) != "00-" || t[35] != '-' || t[52] != '-') return bad_trace();
  if (!parse_hex(t.substr(3, 32), c.trace_id) || !parse_hex(t.substr(36, 16), c.parent_id) ||
      !parse_hex(t.substr(53, 2), std::span(&c.flags, 1)) || !c.valid())
    return bad_trace();
  return c;
}

bool valid_job_id(std::string_view id) {
  if (id.empty() || id.size() > kMaxJobId) return false;
  for (char c : id)
    if (c < 0x21 || c > 0x7e) return false;
  return true;
}

bool FrameExt::set_job(std::string_view id) {
  if (!valid_job_id(id)) return false;
  std::memcpy(job_id.data(), id.data(), id.size());
  job_id_len = static_cast<uint8_t>(id.size());
  return true;
}

void FrameExt::keep_only(uint64_t features) {
  if (!(features & kFeatureJobId)) job_id_len = 0;
  if (!(features & kFeatureTraceContext)) has_trace = false;
  if (!(features & kFeatureQueueTime)) has_queue_time = false;
  if (!(features & kFeatureRouting)) routed = false;
}

size_t FrameExt::encoded_size() const {
  return (job_id_len ? 2 + job_id_len : 0) + (has_trace ? 2 + kTraceContextSize : 0) +
         (has_queue_time ? 2 + 8 : 0) +
         (routed ? 3 + nid_wire_size(route_src) + nid_wire_size(route_dst) : 0);
}

// A version-1 header's NID: 0 (a sender that has none to give, or whose NID is large) reads
// as a NID with no address, which writes as 0 again; the transport fills both from its
// connection. Anything else that is not a NID is a malformed header.
static std::optional<Nid> header_nid(uint64_t v) {
  if (v == 0) return Nid::none();
  uint64_t type = v >> 48;
  if (type != uint64_t(NetType::kTcp) && type != uint64_t(NetType::kO2ib)) return std::nullopt;
  return Nid::ipv4(static_cast<uint32_t>(v), static_cast<NetType>(type),
                   static_cast<uint16_t>(v >> 32));
}

// Layout (little-endian):
//  0 magic u32 | 4 version u16 | 6 kind u8 | 7 flags u8 | 8 src_nid u64 | 16 dst_nid u64
// 24 xid u64 | 32 msg_type u32 | 36 payload_len u32 | 40 bulk_len u32 | 44 credits u32
// 48 exec_ns u64 | 56 status u16 | 58 health u16 (replies and control frames)
// 48 incarnation u64 | 56 done_lag u32 (requests) | 60 crc32c of bytes 0..59 u32
void encode_header(const FrameHeader& h, EncodedHeader* out) {
  uint8_t* p = out->data();
  put_fields<kLayoutV1>(h, p);
  put<uint64_t>(p + 8, h.src_nid.small_form());
  put<uint64_t>(p + 16, h.dst_nid.small_form());
  put<uint32_t>(p + 60, crc32c({p, 60}));
}

// Version 2 (little-endian): the NIDs are the connection's (its handshake named both ends),
// which leaves room for the extension area's length and CRC in the same 64 bytes:
//  0 magic u32 | 4 version u16 = 2 | 6 kind u8 | 7 flags u8 | 8 xid u64 | 16 msg_type u32
// 20 payload_len u32 | 24 bulk_len u32 | 28 credits u32
// 32 exec_ns u64 | 40 status u16 | 42 health u16 (replies and control frames)
// 32 incarnation u64 | 40 done_lag u32 (requests)
// 44 ext_len u16 | 46 zero u16 | 48 ext_crc u32 | 52 zero 8 bytes | 60 crc32c of 0..59 u32
void encode_frame_head(const FrameHeader& h, uint16_t version, EncodedHead* out) {
  uint8_t* p = out->bytes.data();
  if (version < 2) {
    encode_header(h, reinterpret_cast<EncodedHeader*>(p));
    out->size = kHeaderSize;
    return;
  }
  // Extensions first: the header holds their length and CRC.
  uint8_t* e = p + kHeaderSize;
  size_t n = 0;
  if (h.ext.job_id_len) {
    e[n++] = static_cast<uint8_t>(ExtType::kJobId);
    e[n++] = h.ext.job_id_len;
    std::memcpy(e + n, h.ext.job_id.data(), h.ext.job_id_len);
    n += h.ext.job_id_len;
  }
  if (h.ext.has_trace) {
    e[n++] = static_cast<uint8_t>(ExtType::kTraceContext);
    e[n++] = kTraceContextSize;
    std::memcpy(e + n, h.ext.trace.trace_id.data(), 16);
    std::memcpy(e + n + 16, h.ext.trace.parent_id.data(), 8);
    e[n + 24] = h.ext.trace.flags;
    n += kTraceContextSize;
  }
  if (h.ext.has_queue_time) {
    e[n++] = static_cast<uint8_t>(ExtType::kQueueTime);
    e[n++] = 8;
    put<uint64_t>(e + n, h.ext.queue_ns);
    n += 8;
  }
  if (h.ext.routed) {  // hops u8 | source NID | destination NID (wire/nid_form.h)
    e[n++] = static_cast<uint8_t>(ExtType::kRoute);
    e[n++] =
        static_cast<uint8_t>(1 + nid_wire_size(h.ext.route_src) + nid_wire_size(h.ext.route_dst));
    e[n++] = h.ext.hops;
    put_nid(e + n, h.ext.route_src);
    n += nid_wire_size(h.ext.route_src);
    put_nid(e + n, h.ext.route_dst);
    n += nid_wire_size(h.ext.route_dst);
  }
  // Every byte written once, as version 1's encoder does (no memset first: 5 % of a
  // header's cost, frame_head_v2_vs_v1_ns).
  put_fields<kLayoutV2>(h, p);
  put<uint16_t>(p + 44, static_cast<uint16_t>(n));
  put<uint16_t>(p + 46, 0);
  put<uint32_t>(p + 48, n ? crc32c({e, n}) : 0);
  put<uint64_t>(p + 52, 0);
  put<uint32_t>(p + 60, crc32c({p, 60}));
  out->size = kHeaderSize + n;
}

Result<FrameHeader> decode_header(std::span<const uint8_t> bytes, const FrameLimits& limits) {
  if (bytes.size() < kHeaderSize)
    return bad("truncated header (" + std::to_string(bytes.size()) + " of 64 bytes)");
  const uint8_t* p = bytes.data();
  uint32_t magic = get<uint32_t>(p);
  if (magic != kFrameMagic) return bad("bad magic 0x" + std::to_string(magic));
  uint16_t version = get<uint16_t>(p + 4);
  if (version < kWireVersionMin || version > kWireVersionMax)
    return Status(Code::kRejected, "unsupported wire version " + std::to_string(version) +
                                       " (this node speaks " + std::to_string(kWireVersionMin) +
                                       " to " + std::to_string(kWireVersionMax) + ")");
  if (get<uint32_t>(p + 60) != crc32c({p, 60})) return bad("header checksum mismatch");
  if (!is_valid_frame_kind(p[6])) return bad("unknown frame kind " + std::to_string(p[6]));
  FrameHeader h;
  if (version == 1) {
    get_fields<kLayoutV1>(p, &h);
    auto src = header_nid(get<uint64_t>(p + 8)), dst = header_nid(get<uint64_t>(p + 16));
    if (!src || !dst) return bad("a header NID of an unknown network type");
    h.src_nid = *src;
    h.dst_nid = *dst;
  } else {
    get_fields<kLayoutV2>(p, &h);
    h.ext_len = get<uint16_t>(p + 44);
    h.ext_crc = get<uint32_t>(p + 48);
    if (get<uint16_t>(p + 46) != 0 || get<uint64_t>(p + 52) != 0)
      return bad("nonzero reserved bytes in a version-2 header");
    if (h.ext_len > kMaxExtension)
      return bad("extension length " + std::to_string(h.ext_len) + " exceeds limit " +
                 std::to_string(kMaxExtension));
    if (h.ext_len == 0 && h.ext_crc != 0) return bad("extension CRC without extensions");
    if (h.ext_len && h.kind != FrameKind::kRequest && h.kind != FrameKind::kReply)
      return bad("extensions on a control frame");
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

Status decode_extensions(std::span<const uint8_t> b, FrameHeader* h) {
  if (b.size() != h->ext_len)
    return bad("extension area of " + std::to_string(b.size()) + " bytes, header says " +
               std::to_string(h->ext_len));
  h->ext = FrameExt{};
  if (b.empty()) return Status::Ok();
  if (crc32c(b) != h->ext_crc) return bad("extension checksum mismatch");
  const bool request = h->kind == FrameKind::kRequest;
  uint32_t seen = 0;  // known types met, one bit each
  size_t i = 0;
  while (i < b.size()) {
    if (b.size() - i < 2) return bad("truncated extension field");
    uint8_t type = b[i], len = b[i + 1];
    const uint8_t* v = b.data() + i + 2;
    if (b.size() - i - 2 < len)
      return bad("extension field " + std::to_string(type) + " truncated");
    i += 2 + size_t(len);
    // Each known type once: a bit per type (kRoute's is its number less bit 7).
    const uint32_t bit = 1u << (type & 31);
    auto place = [&](bool on_request, size_t min_len, size_t max_len,
                     bool either = false) -> Status {
      if (!either && on_request != request)
        return bad("extension field " + std::to_string(type) + " on a " +
                   (request ? "REQUEST" : "REPLY"));
      if (len < min_len || len > max_len)
        return bad("extension field " + std::to_string(type) + " of " + std::to_string(len) +
                   " bytes");
      if (seen & bit) return bad("extension field " + std::to_string(type) + " twice");
      seen |= bit;
      return Status::Ok();
    };
    switch (static_cast<ExtType>(type)) {
      case ExtType::kJobId: {
        if (Status s = place(true, 1, kMaxJobId); !s.ok()) return s;
        if (!h->ext.set_job({reinterpret_cast<const char*>(v), len}))
          return bad("job id is not printable ASCII");
        break;
      }
      case ExtType::kTraceContext: {
        if (Status s = place(true, kTraceContextSize, kTraceContextSize); !s.ok()) return s;
        std::memcpy(h->ext.trace.trace_id.data(), v, 16);
        std::memcpy(h->ext.trace.parent_id.data(), v + 16, 8);
        h->ext.trace.flags = v[24];
        if (!h->ext.trace.valid()) return bad("trace context with an all-zero id");
        h->ext.has_trace = true;
        break;
      }
      case ExtType::kQueueTime: {
        if (Status s = place(false, 8, 8); !s.ok()) return s;
        h->ext.queue_ns = get<uint64_t>(v);
        h->ext.has_queue_time = true;
        break;
      }
      case ExtType::kRoute: {
        if (Status s = place(true, 1 + 8 + 8, 1 + 24 + 24, true); !s.ok()) return s;
        std::span<const uint8_t> rest(v + 1, len - 1);
        size_t a = 0, b = 0;
        auto src = get_nid(rest, &a);
        if (!src.ok()) return bad("route source: " + src.status().message());
        auto dst = get_nid(rest.subspan(a), &b);
        if (!dst.ok()) return bad("route destination: " + dst.status().message());
        if (a + b != rest.size()) return bad("route field with trailing bytes");
        if (src->is_none() || dst->is_none()) return bad("route field without an address");
        if (v[0] > kMaxFrameHops) return bad("route field of " + std::to_string(v[0]) + " hops");
        h->ext.routed = true;
        h->ext.hops = v[0];
        h->ext.route_src = *src;
        h->ext.route_dst = *dst;
        break;
      }
      default:
        if (type & kExtMustKnow)
          return bad("unknown extension field " + std::to_string(type) + " that must be known");
        break;  // skipped
    }
  }
  return Status::Ok();
}

std::string to_hex(std::span<const uint8_t> bytes) {
  std::string s;
  put_hex(bytes, &s);
  return s;
}

}  // namespace pfsnet
