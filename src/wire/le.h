// Little-endian integer stores and loads for the wire codecs (frame, fabric messages).
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pfsnet::le {

template <class T>
void put(uint8_t* p, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<uint8_t>(uint64_t(v) >> (8 * i));
}
template <class T>
T get(const uint8_t* p) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= uint64_t(p[i]) << (8 * i);
  return static_cast<T>(v);
}

}  // namespace pfsnet::le
