// Fuzz target for the wire decoders (frame header of both versions and version 2's
// extensions, HELLO payload, version-2 handshake fields, a client HELLO's offer, fabric
// messages, the data checksum): whatever the bytes, they decode or fail cleanly -- no crash, no
// overread, no allocation from a hostile length. frame_fuzz_replay runs the body over generated
// frames (valid headers with a byte changed and the CRC recomputed); frame_replay, like every
// target's, over its seeds and corpus (fuzz.h).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "fuzz.h"
#include "wire/data_crc.h"
#include "wire/fabric_wire.h"
#include "wire/frame.h"
#include "wire/handshake.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pfsnet;
  std::span<const uint8_t> in(data, size);
  auto h = decode_header(in, FrameLimits{});
  if (h.ok() && h->version == 1) {
    // A version-1 header that decodes must re-encode to the same bytes.
    EncodedHeader e;
    encode_header(*h, &e);
    for (size_t i = 0; i < kHeaderSize; ++i)
      if (e[i] != data[i]) __builtin_trap();
  }
  if (h.ok() && h->version == 2) {
    FUZZ_CHECK(h->ext_len <= kMaxExtension);
    // Its extensions (the bytes after it): taken, they re-encode to a frame that decodes to
    // the same fields (unknown ones skipped are not kept).
    FrameHeader x = *h;
    if (size >= kHeaderSize + x.ext_len &&
        decode_extensions(in.subspan(kHeaderSize, x.ext_len), &x).ok()) {
      FUZZ_CHECK(x.ext.job_id_len <= kMaxJobId);
      FUZZ_CHECK(!x.ext.has_trace || x.ext.trace.valid());
      EncodedHead e;
      encode_frame_head(x, 2, &e);
      auto y = decode_header(e.span().first(kHeaderSize), FrameLimits{});
      FUZZ_CHECK(y.ok());
      FUZZ_CHECK(decode_extensions(e.span().subspan(kHeaderSize), &*y).ok());
      FUZZ_CHECK(y->xid == x.xid && y->kind == x.kind && y->flags == x.flags &&
                 y->payload_len == x.payload_len && y->bulk_len == x.bulk_len &&
                 y->credits == x.credits && y->ext.job() == x.ext.job() &&
                 y->ext.has_trace == x.ext.has_trace && y->ext.trace == x.ext.trace &&
                 y->ext.has_queue_time == x.ext.has_queue_time &&
                 y->ext.queue_ns == x.ext.queue_ns && y->ext.routed == x.ext.routed &&
                 y->ext.hops == x.ext.hops && y->ext.route_src == x.ext.route_src &&
                 y->ext.route_dst == x.ext.route_dst);
      FUZZ_CHECK(!x.ext.routed || (!x.ext.route_src.is_none() && !x.ext.route_dst.is_none() &&
                                   x.ext.hops <= kMaxFrameHops));
    }
  }
  // Version-2 handshake fields: what decodes re-encodes to fields that decode the same.
  auto wf = decode_wire_fields(in);
  if (wf.ok()) {
    FUZZ_CHECK(wf->min_version >= 1 && wf->min_version <= wf->max_version);
    FUZZ_CHECK(wf->release.size() <= 64 && wf->nids.size() <= kMaxHelloNids);
    auto again = decode_wire_fields(encode_wire_fields(*wf).span());
    FUZZ_CHECK(again.ok() && again->features == wf->features && again->nids == wf->nids &&
               again->release == wf->release && again->instance == wf->instance &&
               again->window == wf->window && wf->window <= kMaxWindow);
  }
  if (size >= 8) {
    uint64_t xid = 0;
    for (int k = 0; k < 8; ++k) xid |= uint64_t(data[k]) << (8 * k);
    auto offer = parse_offer(xid);
    FUZZ_CHECK(!offer.ok() || (offer->first >= 1 && offer->first <= offer->second));
  }
  // A fabric message: its header, then a frame message's parts (spans within the body).
  auto fh = decode_fabric_header(in);
  if (fh.ok() && (fh->type == FabricMsg::kFrame || fh->type == FabricMsg::kFrameRma)) {
    auto body = in.subspan(kFabricHeaderSize);
    auto m = decode_frame_msg(*fh, body, FrameLimits{});
    if (m.ok() &&
        (m->payload.size() + m->bulk.size() > body.size() ||
         (m->sink && m->hdr.kind != FrameKind::kRequest) ||
         kHeaderSize + m->hdr.ext_len + m->payload.size() + m->bulk.size() > body.size() ||
         (m->hdr.ext.routed && m->hdr.ext.route_dst.is_none())))
      __builtin_trap();
  }
  auto hello = decode_hello(in);
  if (hello.ok() && (hello->nids.empty() || hello->nids.size() > kMaxHelloNids ||
                     (hello->flags & ~kHelloBulk) != 0))
    __builtin_trap();
  // A sealed payload and its bulk (the first byte says where the payload ends): a damaged
  // one is refused and left as it came, an intact one loses exactly its CRC.
  if (size >= 1) {
    size_t cut = std::min<size_t>(data[0], size - 1);
    Buffer payload = Buffer::copy_of(in.subspan(1, cut));
    std::span<const uint8_t> bulk = in.subspan(1 + cut);
    size_t before = payload.size();
    if (unseal_payload(&payload, bulk))
      FUZZ_CHECK(payload.size() == before - kDataCrcSize);
    else
      FUZZ_CHECK(payload.size() == before);
  }
  return 0;
}

namespace pfsnet::fuzz {

std::vector<std::vector<uint8_t>> fuzz_seeds() {
  std::vector<std::vector<uint8_t>> seeds;
  FrameHeader h;
  h.kind = FrameKind::kRequest;
  h.flags = kFlagDataCrc;
  h.xid = 77;
  h.msg_type = 7;
  h.payload_len = 4;
  h.bulk_len = 4096;
  h.incarnation = 0x1234;
  h.done_lag = 3;
  EncodedHeader e;
  encode_header(h, &e);
  seeds.emplace_back(e.begin(), e.end());
  // A fabric frame message: its header, then the frame header and a small inline payload.
  std::vector<uint8_t> fm(kFabricHeaderSize + kHeaderSize + 4);
  h.bulk_len = 0;
  encode_header(h, &e);
  encode_fabric_header({FabricMsg::kFrame, 0, 1, uint32_t(kHeaderSize + 4), 0}, fm.data());
  std::copy(e.begin(), e.end(), fm.begin() + kFabricHeaderSize);
  seeds.push_back(fm);
  Hello hello;
  hello.nids = {*Nid::parse("198.18.1.2@tcp"), *Nid::parse("198.18.2.2@o2ib1")};
  seeds.push_back(bytes_of(encode_hello(hello)));
  // Version 2: a request with its job id and trace context, a reply with its queue time.
  FrameHeader v2 = h;
  v2.ext.set_job("slurm.4242");
  v2.ext.has_trace = true;
  v2.ext.trace = *TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  EncodedHead eh;
  encode_frame_head(v2, 2, &eh);
  seeds.emplace_back(eh.span().begin(), eh.span().end());
  FrameHeader r;
  r.kind = FrameKind::kReply;
  r.ext.has_queue_time = true;
  r.ext.queue_ns = 12345;
  encode_frame_head(r, 2, &eh);
  seeds.emplace_back(eh.span().begin(), eh.span().end());
  // Routed frames: a request from an IPv4 NI to an IPv6 one two routers on, and its reply.
  FrameHeader rt = v2;
  rt.ext.routed = true;
  rt.ext.hops = 2;
  rt.ext.route_src = *Nid::parse("198.18.1.2@tcp1");
  rt.ext.route_dst = *Nid::parse("2001:2::5@tcp2");
  encode_frame_head(rt, 2, &eh);
  seeds.emplace_back(eh.span().begin(), eh.span().end());
  r.ext.routed = true;
  r.ext.route_src = rt.ext.route_dst;
  r.ext.route_dst = rt.ext.route_src;
  encode_frame_head(r, 2, &eh);
  seeds.emplace_back(eh.span().begin(), eh.span().end());
  // Version-2 handshake fields, the server's (with its NIDs).
  seeds.push_back(
      bytes_of(encode_wire_fields({1, 2, kFeaturesSpoken, "0.9.0+git.abc1234", 42, hello.nids})));
  // A fabric frame message of version 2: a routed request's head (its extension area) and a
  // small inline payload.
  FrameHeader fr = rt;
  fr.flags = 0;
  fr.payload_len = 4;
  fr.bulk_len = 0;
  encode_frame_head(fr, 2, &eh);
  std::vector<uint8_t> fm2(kFabricHeaderSize + eh.size + 4);
  encode_fabric_header({FabricMsg::kFrame, 0, 1, uint32_t(eh.size + 4), 0}, fm2.data());
  std::copy(eh.span().begin(), eh.span().end(), fm2.begin() + kFabricHeaderSize);
  seeds.push_back(fm2);
  // A router's fields: its receive window granted.
  WireFields router{1, 2, kFeaturesSpoken, "0.9.0+git.abc1234", 42, hello.nids};
  router.window = 8;
  seeds.push_back(bytes_of(encode_wire_fields(router)));
  // A WINDOW frame (its grant in the xid).
  FrameHeader wnd;
  wnd.kind = FrameKind::kWindow;
  wnd.xid = 16;
  encode_frame_head(wnd, 2, &eh);
  seeds.emplace_back(eh.span().begin(), eh.span().end());
  // Large NIDs: a HELLO of an IPv6 connection (its first NID marked, then an IPv4 one) and
  // version-2 fields with an IPv6 NID.
  Hello hello6;
  hello6.nids = {*Nid::parse("2001:2::2@tcp"), *Nid::parse("198.18.1.2@tcp")};
  seeds.push_back(bytes_of(encode_hello(hello6)));
  seeds.push_back(
      bytes_of(encode_wire_fields({1, 2, kFeaturesSpoken, "0.9.0+git.abc1234", 42, hello6.nids})));
  // A sealed payload of 8 bytes and its bulk.
  std::vector<uint8_t> bulk(100, 0x5a);
  Buffer sealed = seal_payload(std::vector<uint8_t>(8, 1), bulk);
  std::vector<uint8_t> s(1 + sealed.size() + bulk.size());
  s[0] = static_cast<uint8_t>(sealed.size());
  std::copy(sealed.data(), sealed.data() + sealed.size(), s.begin() + 1);
  std::copy(bulk.begin(), bulk.end(), s.begin() + 1 + static_cast<std::ptrdiff_t>(sealed.size()));
  seeds.push_back(s);
  return seeds;
}

}  // namespace pfsnet::fuzz
