// Little-endian integer stores and loads for the wire codecs (frame, fabric messages).
// On a little-endian host each is one unaligned load or store (memcpy); elsewhere a loop
// over the bytes. (GCC 12 merged neither loop on x86-64: encoding and decoding a frame
// header were 7% of a small RPC's instructions.)
// Thread safety: pure functions.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace pfsnet::le {

template <class T>
void put(uint8_t* p, T v) {
  static_assert(std::is_integral_v<T> || std::is_enum_v<T>);
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(p, &v, sizeof(T));
  } else {
    for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<uint8_t>(uint64_t(v) >> (8 * i));
  }
}
template <class T>
T get(const uint8_t* p) {
  static_assert(std::is_integral_v<T> || std::is_enum_v<T>);
  if constexpr (std::endian::native == std::endian::little) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
  } else {
    uint64_t v = 0;
    for (size_t i = 0; i < sizeof(T); ++i) v |= uint64_t(p[i]) << (8 * i);
    return static_cast<T>(v);
  }
}

}  // namespace pfsnet::le
