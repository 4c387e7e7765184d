#include "wire/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace pfsnet {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // 0x1EDC6F41 reflected

// kTables[k][b]: the CRC of byte b followed by k zero bytes (slicing-by-8).
struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  constexpr Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
      for (size_t k = 1; k < 8; ++k) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
  }
};
constexpr Tables kTables;

uint32_t portable(const uint8_t* p, size_t n, uint32_t c) {
  const auto& t = kTables.t;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);  // little-endian hosts only (x86-64, aarch64)
    w ^= c;
    c = t[7][w & 0xff] ^ t[6][(w >> 8) & 0xff] ^ t[5][(w >> 16) & 0xff] ^ t[4][(w >> 24) & 0xff] ^
        t[3][(w >> 32) & 0xff] ^ t[2][(w >> 40) & 0xff] ^ t[1][(w >> 48) & 0xff] ^ t[0][w >> 56];
  }
  for (; n > 0; --n, ++p) c = t[0][(c ^ *p) & 0xff] ^ (c >> 8);
  return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t hardware(const uint8_t* p, size_t n, uint32_t c) {
  uint64_t c64 = c;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c64 = _mm_crc32_u64(c64, w);
  }
  c = static_cast<uint32_t>(c64);
  for (; n > 0; --n, ++p) c = _mm_crc32_u8(c, *p);
  return c;
}

// Read during static initialisation: the CPU model is initialised first.
const bool kHaveHardware = (__builtin_cpu_init(), __builtin_cpu_supports("sse4.2"));
#else
constexpr bool kHaveHardware = false;
uint32_t hardware(const uint8_t* p, size_t n, uint32_t c) { return portable(p, n, c); }
#endif

}  // namespace

uint32_t crc32c(std::span<const uint8_t> bytes, uint32_t seed) {
  if (kHaveHardware) return ~hardware(bytes.data(), bytes.size(), ~seed);
  return ~portable(bytes.data(), bytes.size(), ~seed);
}

uint32_t crc32c_portable(std::span<const uint8_t> bytes, uint32_t seed) {
  return ~portable(bytes.data(), bytes.size(), ~seed);
}

bool crc32c_hardware() { return kHaveHardware; }

}  // namespace pfsnet
