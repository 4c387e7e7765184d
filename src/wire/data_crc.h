// End-to-end integrity of a frame's data (flag kFlagDataCrc, docs/wire_format.md): the
// sender seals the payload with the CRC-32C of payload and bulk -- 4 bytes appended to
// the payload -- and the receiver checks it before the message goes anywhere. The header
// has its own CRC (wire/frame.h); this covers what TCP's 16-bit checksum and an RDMA
// NIC's link CRC leave exposed: memory, buses and middleboxes between the two ends.
// Cost: one pass over the bytes at the CPU's CRC speed (bench: crc32c_1m,
// bulk_write_1m_checksum); a megabyte is ~40 us on one core of this machine.
// Thread safety: pure functions.
#pragma once

#include <pfsnet/buffer.h>

#include <cstdint>
#include <optional>
#include <span>

#include "wire/frame.h"

namespace pfsnet {

// The CRC-32C of `payload` followed by `bulk`.
uint32_t data_crc(std::span<const uint8_t> payload, std::span<const uint8_t> bulk);

// The same when the bulk's own CRC-32C is known (kept with the data since it was
// written): no pass over the bulk's `bulk_len` bytes -- and bulk damaged since its CRC was
// taken fails at the receiver, where a CRC taken now would cover the damage.
uint32_t data_crc_joined(std::span<const uint8_t> payload, uint32_t bulk_crc, size_t bulk_len);

// `payload` with the CRC of it and `bulk` appended (little-endian): a sealed frame's
// payload, kDataCrcSize bytes longer.
Buffer seal_payload(std::span<const uint8_t> payload, std::span<const uint8_t> bulk);

// Checks a sealed payload against `bulk`. True when the CRC matches; `payload` then
// keeps only the bytes before it, and `bulk_crc` (if given, and the bulk is not empty)
// the bulk's own CRC-32C, taken out of the seal without a second pass: what a store keeps
// with the data. A `bulk_crc` that holds a value on entry is the bulk's CRC as received
// (taken while it came in) and is joined instead of a pass over the bulk. False (and
// nothing changed) when it does not match or the payload is shorter than the CRC.
bool unseal_payload(Buffer* payload, std::span<const uint8_t> bulk,
                    std::optional<uint32_t>* bulk_crc = nullptr);

}  // namespace pfsnet
