// Runs the fuzz body over deterministic generated inputs: random bytes, valid headers with
// one field or byte mutated, fabric frame messages with random flags and tails, and
// truncations. Exits non-zero only by crashing (the body
// traps on a broken invariant), so ctest reports any failure.
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "wire/fabric_wire.h"
#include "wire/frame.h"
#include "wire/handshake.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main() {
  using namespace pfsnet;
  std::mt19937_64 rng(20261122);
  size_t runs = 0;
  std::vector<uint8_t> buf;
  for (int i = 0; i < 200000; ++i) {
    buf.resize(rng() % 200);
    for (auto& b : buf) b = static_cast<uint8_t>(rng());
    if (i % 3 == 0 && buf.size() >= kHeaderSize) {
      // A valid header with one random byte changed (checksum recomputed half the time).
      FrameHeader h;
      h.kind = static_cast<FrameKind>(1 + rng() % 6);
      h.payload_len = static_cast<uint32_t>(rng() % 70000);
      h.bulk_len = static_cast<uint32_t>(rng() % (3 << 20));
      // Version 1 or 2 (with extensions of random kinds half the time).
      EncodedHead e;
      if (rng() % 2) {
        if (rng() % 2) h.ext.set_job("job" + std::to_string(rng() % 1000));
        h.ext.has_queue_time = rng() % 2;
        h.ext.has_trace = rng() % 2;
        h.ext.trace.trace_id[rng() % 16] = 1;
        h.ext.trace.parent_id[rng() % 8] = 1;
        encode_frame_head(h, 2, &e);
      } else {
        encode_frame_head(h, 1, &e);
      }
      buf.resize(std::max(buf.size(), e.size));
      std::copy(e.bytes.begin(), e.bytes.begin() + static_cast<std::ptrdiff_t>(e.size),
                buf.begin());
      buf[rng() % e.size] ^= static_cast<uint8_t>(1 + rng() % 255);
      if (rng() % 2) {
        uint32_t crc = crc32c({buf.data(), 60});
        for (int k = 0; k < 4; ++k) buf[60 + k] = static_cast<uint8_t>(crc >> (8 * k));
      }
    }
    if (i % 3 == 1) {
      // A fabric frame message: random flags, a valid frame header of random lengths, a
      // random tail (descriptors, inline parts) of a random length.
      FrameHeader h;
      h.kind = static_cast<FrameKind>(1 + rng() % 6);
      h.payload_len = static_cast<uint32_t>(rng() % 64);
      h.bulk_len = static_cast<uint32_t>(rng() % 2 ? rng() % 64 : rng() % (3 << 20));
      EncodedHeader e;
      encode_header(h, &e);
      size_t tail = rng() % 128;
      buf.assign(kFabricHeaderSize + kHeaderSize + tail, 0);
      FabricHeader fh{static_cast<FabricMsg>(1 + rng() % 2), static_cast<uint8_t>(rng() % 16), 0,
                      static_cast<uint32_t>(kHeaderSize + tail), 0};
      encode_fabric_header(fh, buf.data());
      std::copy(e.begin(), e.end(), buf.begin() + kFabricHeaderSize);
      for (size_t k = kFabricHeaderSize + kHeaderSize; k < buf.size(); ++k)
        buf[k] = static_cast<uint8_t>(rng() % 4 ? rng() : 0);
    }
    LLVMFuzzerTestOneInput(buf.data(), buf.size());
    ++runs;
  }
  std::printf("frame_fuzz_replay: %zu inputs, no crash\n", runs);
  return 0;
}
