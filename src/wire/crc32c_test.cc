#include "wire/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace pfsnet {
namespace {

// One bit at a time, straight from the definition: the reference both versions must match.
uint32_t bitwise(const uint8_t* p, size_t n) {
  uint32_t c = ~0u;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}

// RFC 3720 (iSCSI) appendix B.4 test vectors and the common check value.
TEST(Crc32cTest, KnownVectors) {
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xff), up(32), down(32);
  for (int i = 0; i < 32; ++i) {
    up[i] = static_cast<uint8_t>(i);
    down[i] = static_cast<uint8_t>(31 - i);
  }
  const char* check = "123456789";
  for (auto f : {crc32c, crc32c_portable}) {
    EXPECT_EQ(f(zeros, 0), 0x8A9136AAu);
    EXPECT_EQ(f(ones, 0), 0x62A8AB43u);
    EXPECT_EQ(f(up, 0), 0x46DD794Eu);
    EXPECT_EQ(f(down, 0), 0x113FDB5Cu);
    EXPECT_EQ(f({reinterpret_cast<const uint8_t*>(check), 9}, 0), 0xE3069283u);
    EXPECT_EQ(f({}, 0), 0u);
  }
}

TEST(Crc32cTest, BothVersionsMatchTheDefinitionAtEveryLengthAndAlignment) {
  std::mt19937 rng(7);
  std::vector<uint8_t> buf(600);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t off = 0; off < 8; ++off)
    for (size_t n = 0; n + off <= 300; ++n) {
      std::span<const uint8_t> s(buf.data() + off, n);
      uint32_t want = bitwise(s.data(), n);
      ASSERT_EQ(crc32c_portable(s), want) << "offset " << off << " length " << n;
      ASSERT_EQ(crc32c(s), want) << "offset " << off << " length " << n;
    }
}

TEST(Crc32cTest, SeedContinuesARunningChecksum) {
  std::vector<uint8_t> buf(257);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(i * 7 + 3);
  uint32_t whole = crc32c(buf);
  for (size_t cut : {0, 1, 8, 60, 100, 257}) {
    std::span<const uint8_t> a(buf.data(), cut), b(buf.data() + cut, buf.size() - cut);
    EXPECT_EQ(crc32c(b, crc32c(a)), whole) << cut;
    EXPECT_EQ(crc32c_portable(b, crc32c_portable(a)), whole) << cut;
  }
}

// Two checksums join without a pass over the second part's bytes: every cut of a buffer,
// parts of 0 to 1 MiB + 3 bytes, and a second part of zeros (whose CRC is not zero).
TEST(Crc32cTest, CombineJoinsTheChecksumsOfTwoParts) {
  std::mt19937 rng(5);
  std::vector<uint8_t> buf((1 << 20) + 3 + 300);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t len : {size_t{0}, size_t{1}, size_t{300}, size_t{(1 << 20) + 3 + 300}}) {
    std::span<const uint8_t> all(buf.data(), len);
    uint32_t whole = crc32c(all);
    for (size_t cut : {size_t{0}, size_t{1}, len / 3, len / 2, len > 0 ? len - 1 : 0, len}) {
      if (cut > len) continue;
      auto a = all.first(cut), b = all.subspan(cut);
      EXPECT_EQ(crc32c_combine(crc32c(a), crc32c(b), b.size()), whole)
          << "length " << len << " cut " << cut;
    }
  }
  std::vector<uint8_t> zeros(4096 + 5, 0);
  std::span<const uint8_t> head(buf.data(), 77);
  std::vector<uint8_t> joined(head.begin(), head.end());
  joined.insert(joined.end(), zeros.begin(), zeros.end());
  EXPECT_EQ(crc32c_combine(crc32c(head), crc32c(zeros), zeros.size()), crc32c(joined));
  EXPECT_NE(crc32c_combine(crc32c(head), crc32c(zeros), zeros.size() - 1), crc32c(joined));
}

// The copy and its checksum in one pass: the bytes copied whole, the CRC of them, across
// the pieces it works in, continuing a seed.
TEST(Crc32cTest, CopyReturnsTheChecksumOfWhatItCopied) {
  std::mt19937 rng(9);
  std::vector<uint8_t> src((1 << 20) + 7);
  for (auto& b : src) b = static_cast<uint8_t>(rng());
  for (size_t n : {size_t{0}, size_t{1}, size_t{(16 << 10) - 1}, size_t{16 << 10},
                   size_t{(16 << 10) + 1}, src.size()}) {
    std::vector<uint8_t> dst(n + 1, 0xee);
    std::span<const uint8_t> s(src.data(), n);
    EXPECT_EQ(crc32c_copy(dst.data(), s), crc32c(s)) << n;
    EXPECT_TRUE(std::equal(s.begin(), s.end(), dst.begin())) << n;
    EXPECT_EQ(dst[n], 0xee) << "wrote past the end, " << n;
    EXPECT_EQ(crc32c_copy(dst.data(), s, 0x1234), crc32c(s, 0x1234)) << n;
  }
}

// The hardware version runs three streams over blocks of 3 x 8 KiB and 3 x 256 B and joins
// them: every length around those blocks, at every alignment, against the tables.
TEST(Crc32cTest, InterleavedStreamsMatchAcrossTheirBlockBoundaries) {
  std::mt19937 rng(11);
  std::vector<uint8_t> buf((1 << 16) + 64);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  std::vector<size_t> lengths;
  for (size_t base :
       {size_t{3 * 256}, size_t{3 * 8192}, size_t{2 * 3 * 8192}, size_t{3 * 8192 + 3 * 256}})
    for (size_t d = 0; d < 17; ++d) {
      lengths.push_back(base - d);
      lengths.push_back(base + d);
    }
  lengths.push_back(1 << 16);
  for (size_t off : {0, 3, 8})
    for (size_t n : lengths) {
      ASSERT_LE(off + n, buf.size());
      std::span<const uint8_t> s(buf.data() + off, n);
      ASSERT_EQ(crc32c_streams(s, 0x1234), crc32c_portable(s, 0x1234))
          << "offset " << off << " length " << n;
    }
  // And a whole megabyte against the definition itself.
  std::vector<uint8_t> mib(1 << 20);
  for (auto& b : mib) b = static_cast<uint8_t>(rng());
  EXPECT_EQ(crc32c_streams(mib), bitwise(mib.data(), mib.size()));
}

// Folding (AVX-512 VPCLMULQDQ, from 1 KiB) takes 256-byte blocks and leaves the rest to the
// streams: every length around its threshold and its blocks, at every alignment and with a
// seed, against the tables; a megabyte against the definition.
TEST(Crc32cTest, FoldingMatchesTheTablesAcrossItsBlocks) {
  std::mt19937 rng(13);
  std::vector<uint8_t> buf((1 << 16) + 64);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  std::vector<size_t> lengths;
  for (size_t base : {size_t{1024}, size_t{1280}, size_t{4096}, size_t{3 * 8192}, size_t{1 << 16}})
    for (size_t d = 0; d < 20; ++d) {
      lengths.push_back(base - d);
      if (base + d + 8 <= buf.size()) lengths.push_back(base + d);
    }
  for (size_t off : {0, 1, 8, 13})
    for (size_t n : lengths)
      for (uint32_t seed : {0u, 0x9e3779b9u}) {
        std::span<const uint8_t> s(buf.data() + off, n);
        ASSERT_EQ(crc32c(s, seed), crc32c_portable(s, seed))
            << "offset " << off << " length " << n << " seed " << seed;
      }
  std::vector<uint8_t> mib(1 << 20);
  for (auto& b : mib) b = static_cast<uint8_t>(rng());
  EXPECT_EQ(crc32c(mib), bitwise(mib.data(), mib.size()));
  // A checksum continued across a cut gives the whole one, folded or not on either side.
  for (size_t cut : {size_t{0}, size_t{100}, size_t{1024}, size_t{5000}}) {
    std::span<const uint8_t> all(mib.data(), 9000), a = all.first(cut), b = all.subspan(cut);
    EXPECT_EQ(crc32c(b, crc32c(a)), crc32c_portable(all)) << cut;
  }
}

TEST(Crc32cTest, UsesTheInstructionOnX86WithSse42) {
#if defined(__x86_64__)
  EXPECT_EQ(crc32c_hardware(), __builtin_cpu_supports("sse4.2") != 0);
  EXPECT_EQ(crc32c_folding(),
            __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("pclmul"));
#else
  EXPECT_FALSE(crc32c_hardware());
#endif
}

}  // namespace
}  // namespace pfsnet
