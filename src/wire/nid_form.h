// The wire form of a NID in messages (membership, mesh, netverify, self-test, HELLO): an
// IPv4 NID is the 8 bytes version 1 has always sent (u64 LE, type << 48 | net << 32 |
// address); a large NID is a u64 LE marked with bit 63 (kLargeNidMark | type << 48 |
// net << 32 | address length) followed by the address bytes in network order. A release
// that predates large NIDs reads the mark as an unknown network type and refuses the
// message; a version-1 peer is never sent one (docs/wire_format.md, "Large NIDs").
// Thread safety: plain functions.
#pragma once

#include <pfsnet/nid.h>

#include <cstdint>
#include <cstring>
#include <span>

#include "wire/le.h"

namespace pfsnet {

inline constexpr uint64_t kLargeNidMark = 1ull << 63;

inline size_t nid_wire_size(const Nid& n) { return 8 + (n.is_large() ? n.addr_len : 0); }

// Writes nid_wire_size(n) bytes at p.
inline void put_nid(uint8_t* p, const Nid& n) {
  if (!n.is_large()) {
    le::put<uint64_t>(p, n.small_form());
    return;
  }
  le::put<uint64_t>(
      p, kLargeNidMark | uint64_t(n.type) << 48 | uint64_t(n.net_num) << 32 | n.addr_len);
  std::memcpy(p + 8, n.addr.data(), n.addr_len);
}

// Reads one NID from the front of b; *used is the bytes it took.
inline Result<Nid> get_nid(std::span<const uint8_t> b, size_t* used) {
  if (b.size() < 8) return Status(Code::kProtocol, "NID truncated");
  uint64_t v = le::get<uint64_t>(b.data());
  if (!(v & kLargeNidMark)) {
    *used = 8;
    return Nid::unpack(v);
  }
  auto n = Nid::unpack(v & ~kLargeNidMark & ~uint64_t(0xffffffff));
  if (!n.ok()) return n.status();
  uint32_t len = static_cast<uint32_t>(v);
  // 16 bytes (IPv6) is the only large form yet; any other length is refused, not guessed at.
  if (len != 16) return Status(Code::kProtocol, "large NID of " + std::to_string(len) + " bytes");
  if (b.size() < 8 + len) return Status(Code::kProtocol, "large NID truncated");
  n->addr_len = static_cast<uint8_t>(len);
  std::memcpy(n->addr.data(), b.data() + 8, len);
  if (!n->is_large()) return Status(Code::kProtocol, "large NID with an IPv4 address");
  *used = 8 + len;
  return n;
}

}  // namespace pfsnet
