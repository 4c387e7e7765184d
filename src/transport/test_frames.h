// Test helpers shared by the transport tests: patterned buffers and request frames.
// Thread safety: pure functions.
#pragma once

#include <cstring>
#include <memory>

#include "transport/transport.h"

namespace pfsnet::test {

// n bytes of a pattern that differs per seed and per position (a shifted or swapped
// byte shows).
inline Buffer pattern(size_t n, uint8_t seed) {
  Buffer b(n);
  for (size_t i = 0; i < n; ++i) b.data()[i] = static_cast<uint8_t>(seed + i * 13 + (i >> 8));
  return b;
}

// A request of `type` whose payload and bulk are patterns seeded from `xid`.
inline std::unique_ptr<OutFrame> frame(uint64_t xid, size_t payload, size_t bulk,
                                       TxCompletion* done, uint32_t type = 3) {
  auto f = std::make_unique<OutFrame>();
  f->hdr.kind = FrameKind::kRequest;
  f->hdr.xid = xid;
  f->hdr.msg_type = type;
  f->payload = pattern(payload, static_cast<uint8_t>(xid));
  if (bulk) f->bulk = make_bulk(pattern(bulk, static_cast<uint8_t>(xid + 1)));
  f->done = done;
  return f;
}

inline bool same(const Buffer& b, const Buffer& expect) {
  return b.size() == expect.size() &&
         (b.empty() || std::memcmp(b.data(), expect.data(), b.size()) == 0);
}

}  // namespace pfsnet::test
