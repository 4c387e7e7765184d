// CRC-32C (Castagnoli, polynomial 0x1EDC6F41 reflected), the checksum of frame headers
// and of payload and bulk (wire/data_crc.h).
//
// crc32c() uses the CPU's CRC32 instruction (x86-64 SSE 4.2) when it has one -- 60 header
// bytes in ~20 ns; from 768 bytes up three interleaved streams, about 8 bytes per cycle --
// and from 1 KiB up, on CPUs with AVX-512 and VPCLMULQDQ, folding by carry-less
// multiplication (~50 GB/s here; bench: crc32c_1m); slicing-by-8 tables otherwise (~1 byte
// per cycle). All give identical results; crc32c_portable() is the table version alone,
// for tests and for comparing the two.
//
// `seed` continues a running checksum: crc32c(b, crc32c(a)) == crc32c(a + b); and
// crc32c_combine(crc32c(a), crc32c(b), b.size()) == crc32c(a + b) without a pass over b
// (a checksum kept with the data it covers joins a frame's; ~32 multiplications in
// GF(2)[x] mod P, under a microsecond).
// Threads: pure functions, any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace pfsnet {

uint32_t crc32c(std::span<const uint8_t> bytes, uint32_t seed = 0);
uint32_t crc32c_portable(std::span<const uint8_t> bytes, uint32_t seed = 0);
// The CRC32 instruction's three streams alone (no folding; the tables without SSE 4.2),
// for tests and for comparing.
uint32_t crc32c_streams(std::span<const uint8_t> bytes, uint32_t seed = 0);
// True when crc32c() runs on the CPU's instruction; and when it folds long inputs.
bool crc32c_hardware();
bool crc32c_folding();
// Copies `src` to `dst` (src.size() bytes, not overlapping) and returns the CRC-32C of
// them: the copy and the checksum in one pass over memory, a piece at a time (the CRC reads
// each piece from the L1 cache just after the copy wrote it).
uint32_t crc32c_copy(uint8_t* dst, std::span<const uint8_t> src, uint32_t seed = 0);
// The CRC-32C of a followed by b, from the CRC of each and b's length.
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, size_t len_b);

}  // namespace pfsnet
