// What the soak's two halves share (soak.cc, the driver; soak_serve.cc, a soak server): the
// soak servers' message types and the bytes they carry.
#pragma once

#include <pfsnet/node.h>

#include <cstring>
#include <string>

namespace pfsnet::testing {

inline constexpr uint32_t kSoakWrite = kMsgFirstUser + 71;
inline constexpr uint32_t kSoakRead = kMsgFirstUser + 72;
inline constexpr int kTimeoutS = 4;  // transaction_timeout everywhere: 3 attempts within it
inline constexpr size_t kMaxBulk = 256 << 10;

// The bytes of SOAK_READ's reply: a pattern of `seed`.
inline Buffer soak_pattern(size_t n, uint32_t seed) {
  Buffer b(n);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    b.data()[i] = static_cast<uint8_t>(x >> 24);
  }
  return b;
}

inline uint64_t get_u64(const Buffer& b, size_t at) {
  uint64_t v = 0;
  if (b.size() >= at + 8) std::memcpy(&v, b.data() + at, 8);
  return v;
}
inline uint32_t get_u32(const Buffer& b, size_t at) {
  uint32_t v = 0;
  if (b.size() >= at + 4) std::memcpy(&v, b.data() + at, 4);
  return v;
}

// `pfsnet_soak serve --config FILE`: a soak server until SIGTERM; its exit code.
int soak_serve(const std::string& config_path);

}  // namespace pfsnet::testing
