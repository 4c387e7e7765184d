// Fuzz target for the wire decoders (frame header, HELLO payload, fabric messages): whatever the
// bytes, they decode or fail cleanly -- no crash, no overread, no allocation from a hostile length.
// Build with clang and -DPFSNET_FUZZ=ON for libFuzzer; frame_fuzz_replay runs the same body over
// generated inputs in every build.
#include <cstddef>
#include <cstdint>
#include <span>

#include "wire/fabric_wire.h"
#include "wire/frame.h"
#include "wire/handshake.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pfsnet;
  std::span<const uint8_t> in(data, size);
  auto h = decode_header(in, FrameLimits{});
  if (h.ok()) {
    // A header that decodes must re-encode to the same bytes.
    EncodedHeader e;
    encode_header(*h, &e);
    for (size_t i = 0; i < kHeaderSize; ++i)
      if (e[i] != data[i]) __builtin_trap();
  }
  // A fabric message: its header, then a frame message's parts (spans within the body).
  auto fh = decode_fabric_header(in);
  if (fh.ok() && (fh->type == FabricMsg::kFrame || fh->type == FabricMsg::kFrameRma)) {
    auto body = in.subspan(kFabricHeaderSize);
    auto m = decode_frame_msg(*fh, body, FrameLimits{});
    if (m.ok() && (m->payload.size() + m->bulk.size() > body.size() ||
                   (m->sink && m->hdr.kind != FrameKind::kRequest)))
      __builtin_trap();
  }
  auto hello = decode_hello(in);
  if (hello.ok() && (hello->nids.empty() || hello->nids.size() > kMaxHelloNids)) __builtin_trap();
  return 0;
}
