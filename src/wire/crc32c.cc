#include "wire/crc32c.h"

#include <algorithm>
#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
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
// Shifting a CRC register over zero bytes (for joining the three interleaved streams of
// the hardware version): the GF(2) operator of `len` zero bytes, applied by four table
// lookups (Mark Adler's method, as in zlib's crc32_combine).
uint32_t gf2_times(const std::array<uint32_t, 32>& mat, uint32_t vec) {
  uint32_t sum = 0;
  for (size_t i = 0; vec; vec >>= 1, ++i)
    if (vec & 1) sum ^= mat[i];
  return sum;
}
std::array<uint32_t, 32> gf2_square(const std::array<uint32_t, 32>& mat) {
  std::array<uint32_t, 32> sq{};
  for (size_t n = 0; n < 32; ++n) sq[n] = gf2_times(mat, mat[n]);
  return sq;
}
struct ZeroShift {
  std::array<std::array<uint32_t, 256>, 4> t{};
  // REQUIRES: bytes is a power of two.
  explicit ZeroShift(size_t bytes) {
    std::array<uint32_t, 32> op{};  // one zero bit
    op[0] = kPoly;
    for (size_t n = 1; n < 32; ++n) op[n] = 1u << (n - 1);
    for (size_t bits = 1; bits < 8 * bytes; bits <<= 1) op = gf2_square(op);
    for (uint32_t n = 0; n < 256; ++n)
      for (size_t k = 0; k < 4; ++k) t[k][n] = gf2_times(op, n << (8 * k));
  }
  uint32_t operator()(uint32_t c) const {
    return t[0][c & 0xff] ^ t[1][(c >> 8) & 0xff] ^ t[2][(c >> 16) & 0xff] ^ t[3][c >> 24];
  }
};

// The CRC32 instruction takes 3 cycles and issues every cycle: three independent streams
// over a block's thirds run at three times one stream's speed (~8 bytes per cycle), then
// are joined by shifting. Long blocks for bulk, short ones for what is left.
constexpr size_t kLong = 8192, kShort = 256;
const ZeroShift kShiftLong(kLong), kShiftShort(kShort);

__attribute__((target("sse4.2"))) uint64_t three_way(const uint8_t*& p, size_t& n, uint64_t c0,
                                                     size_t block, const ZeroShift& shift) {
  while (n >= 3 * block) {
    uint64_t c1 = 0, c2 = 0;
    for (const uint8_t* end = p + block; p < end; p += 8) {
      uint64_t w0, w1, w2;
      std::memcpy(&w0, p, 8);
      std::memcpy(&w1, p + block, 8);
      std::memcpy(&w2, p + 2 * block, 8);
      c0 = _mm_crc32_u64(c0, w0);
      c1 = _mm_crc32_u64(c1, w1);
      c2 = _mm_crc32_u64(c2, w2);
    }
    c0 = shift(static_cast<uint32_t>(c0)) ^ c1;
    c0 = shift(static_cast<uint32_t>(c0)) ^ c2;
    p += 2 * block;
    n -= 3 * block;
  }
  return c0;
}

// Folding with carry-less multiplication (VPCLMULQDQ on AVX-512; Intel's "Fast CRC
// Computation for Generic Polynomials Using PCLMULQDQ"): four 512-bit accumulators take 256
// bytes a turn, each 128-bit lane multiplied forward by x^2048 (mod P) and the next bytes
// added; then the accumulators fold into one lane, a remainder congruent to the message,
// whose CRC from zero the CRC32 instruction finishes. ~50 GB/s on this VM where three
// CRC32 streams give 14. A lane moves d bytes on: its low half times x^(8d+32), its high
// half times x^(8d-32), each mod P, bit-reflected and shifted left by one (as the
// reflected carry-less product comes out a bit short).
constexpr uint64_t fold_key(unsigned power) {
  uint32_t c = 0x80000000u;  // x^0, reflected
  for (unsigned i = 0; i < power; ++i) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
  return uint64_t{c} << 1;
}
struct FoldKeys {
  uint64_t lo[5]{}, hi[5]{};  // for 256, 64, 48, 32 and 16 bytes on
  constexpr FoldKeys() {
    const unsigned bytes[5] = {256, 64, 48, 32, 16};
    for (int i = 0; i < 5; ++i) {
      lo[i] = fold_key(8 * bytes[i] + 32);
      hi[i] = fold_key(8 * bytes[i] - 32);
    }
  }
};
constexpr FoldKeys kFold;  // constant: right even for a caller in another unit's static init
constexpr size_t kFoldMin = 1024;  // below, the streams' joins cost less than the folds' end

#define PFS_FOLD_TARGET __attribute__((target("avx512f,avx512vl,vpclmulqdq,pclmul,sse4.2")))
PFS_FOLD_TARGET inline __m512i fold_lanes(__m512i x, __m512i k) {
  return _mm512_xor_si512(_mm512_clmulepi64_epi128(x, k, 0x00),
                          _mm512_clmulepi64_epi128(x, k, 0x11));
}
PFS_FOLD_TARGET inline __m512i keys512(int i) {
  return _mm512_set_epi64(static_cast<long long>(kFold.hi[i]), static_cast<long long>(kFold.lo[i]),
                          static_cast<long long>(kFold.hi[i]), static_cast<long long>(kFold.lo[i]),
                          static_cast<long long>(kFold.hi[i]), static_cast<long long>(kFold.lo[i]),
                          static_cast<long long>(kFold.hi[i]), static_cast<long long>(kFold.lo[i]));
}
PFS_FOLD_TARGET inline __m128i fold_lane(__m128i x, int i) {
  __m128i k =
      _mm_set_epi64x(static_cast<long long>(kFold.hi[i]), static_cast<long long>(kFold.lo[i]));
  return _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11));
}
// The CRC register `c` (not inverted) over whole 256-byte blocks of p; p and n advance.
// REQUIRES: n >= 256.
PFS_FOLD_TARGET uint32_t fold256(const uint8_t*& p, size_t& n, uint32_t c) {
  __m512i x0 = _mm512_loadu_si512(p), x1 = _mm512_loadu_si512(p + 64);
  __m512i x2 = _mm512_loadu_si512(p + 128), x3 = _mm512_loadu_si512(p + 192);
  x0 = _mm512_xor_si512(x0, _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(c))));
  p += 256;
  n -= 256;
  const __m512i k256 = keys512(0);
  for (; n >= 256; p += 256, n -= 256) {
    x0 = _mm512_xor_si512(fold_lanes(x0, k256), _mm512_loadu_si512(p));
    x1 = _mm512_xor_si512(fold_lanes(x1, k256), _mm512_loadu_si512(p + 64));
    x2 = _mm512_xor_si512(fold_lanes(x2, k256), _mm512_loadu_si512(p + 128));
    x3 = _mm512_xor_si512(fold_lanes(x3, k256), _mm512_loadu_si512(p + 192));
  }
  const __m512i k64 = keys512(1);
  x1 = _mm512_xor_si512(x1, fold_lanes(x0, k64));
  x2 = _mm512_xor_si512(x2, fold_lanes(x1, k64));
  x3 = _mm512_xor_si512(x3, fold_lanes(x2, k64));
  alignas(64) __m128i lane[4];
  _mm512_store_si512(lane, x3);
  __m128i r = lane[3];
  for (int i = 0; i < 3; ++i) r = _mm_xor_si128(r, fold_lane(lane[i], 2 + i));  // 48, 32, 16 on
  uint64_t v = _mm_crc32_u64(0, static_cast<uint64_t>(_mm_cvtsi128_si64(r)));
  return static_cast<uint32_t>(_mm_crc32_u64(v, static_cast<uint64_t>(_mm_extract_epi64(r, 1))));
}

const bool kHaveFold = (__builtin_cpu_init(), __builtin_cpu_supports("avx512f") &&
                                                  __builtin_cpu_supports("avx512vl") &&
                                                  __builtin_cpu_supports("vpclmulqdq") &&
                                                  __builtin_cpu_supports("pclmul"));

__attribute__((target("sse4.2"))) uint32_t hardware(const uint8_t* p, size_t n, uint32_t c,
                                                    bool fold = true) {
  if (fold && kHaveFold && n >= kFoldMin) c = fold256(p, n, c);
  uint64_t c64 = c;
  if (n >= 3 * kShort) {  // a frame header or a small payload: one stream is all there is
    c64 = three_way(p, n, c64, kLong, kShiftLong);
    c64 = three_way(p, n, c64, kShort, kShiftShort);
  }
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
constexpr bool kHaveFold = false;
uint32_t hardware(const uint8_t* p, size_t n, uint32_t c, bool = true) { return portable(p, n, c); }
#endif

}  // namespace

uint32_t crc32c(std::span<const uint8_t> bytes, uint32_t seed) {
  if (kHaveHardware) return ~hardware(bytes.data(), bytes.size(), ~seed);
  return ~portable(bytes.data(), bytes.size(), ~seed);
}

uint32_t crc32c_portable(std::span<const uint8_t> bytes, uint32_t seed) {
  return ~portable(bytes.data(), bytes.size(), ~seed);
}

uint32_t crc32c_streams(std::span<const uint8_t> bytes, uint32_t seed) {
  if (kHaveHardware) return ~hardware(bytes.data(), bytes.size(), ~seed, false);
  return ~portable(bytes.data(), bytes.size(), ~seed);
}

uint32_t crc32c_copy(uint8_t* dst, std::span<const uint8_t> src, uint32_t seed) {
  constexpr size_t kPiece = 16 << 10;  // well inside L1d with its source
  uint32_t c = seed;
  for (size_t at = 0; at < src.size(); at += kPiece) {
    size_t n = std::min(kPiece, src.size() - at);
    std::memcpy(dst + at, src.data() + at, n);
    c = crc32c(std::span<const uint8_t>(dst + at, n), c);
  }
  return c;
}

// crc(a + b) = crc(a) x^(8 |b|) + crc(b) (mod P): the conditioning of both cancels out
// (zlib's crc32_combine). Polynomials reflected: bit 31 is x^0.
namespace {
constexpr uint32_t mult_mod_p(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t m = 1u << 31; m != 0 && a != 0; m >>= 1) {
    if (a & m) {
      product ^= b;
      a ^= m;
    }
    b = (b & 1) ? (b >> 1) ^ kPoly : b >> 1;
  }
  return product;
}
// x^(2^k) mod P for k = 0..63.
constexpr std::array<uint32_t, 64> kXPow2 = [] {
  std::array<uint32_t, 64> t{};
  uint32_t p = 1u << 30;  // x^1
  for (auto& e : t) {
    e = p;
    p = mult_mod_p(p, p);
  }
  return t;
}();
}  // namespace

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, size_t len_b) {
  uint32_t shift = 1u << 31;  // x^0; times x^(8 len_b), a power of two at a time
  uint64_t bits = uint64_t{len_b} * 8;
  for (size_t k = 0; bits != 0; bits >>= 1, ++k) {
    if (bits & 1) shift = mult_mod_p(kXPow2[k], shift);
  }
  return mult_mod_p(shift, crc_a) ^ crc_b;
}

bool crc32c_hardware() { return kHaveHardware; }
bool crc32c_folding() { return kHaveFold; }

}  // namespace pfsnet
