// What the fuzz targets share. Each target (fuzz/*_fuzz.cc) defines LLVMFuzzerTestOneInput
// -- the body libFuzzer drives in a -DPFSNET_FUZZ=ON clang build -- and fuzz_seeds(), valid
// inputs its corpus starts from. fuzz_replay.cc runs the same body in every build over the
// seeds, the checked-in corpus (fuzz/corpus/<target>/) and deterministic mutations of them.
// A broken invariant traps, so both report it as a crash.
#pragma once

#include <pfsnet/buffer.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#define FUZZ_CHECK(cond)           \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace pfsnet::fuzz {

std::vector<std::vector<uint8_t>> fuzz_seeds();

inline std::vector<uint8_t> bytes_of(const Buffer& b) {
  return std::vector<uint8_t>(b.data(), b.data() + b.size());
}
// `selector` then `body`: for targets that pick one of several decoders by the first byte.
inline std::vector<uint8_t> tagged(uint8_t selector, std::span<const uint8_t> body) {
  std::vector<uint8_t> v(1 + body.size());
  v[0] = selector;
  if (!body.empty()) std::memcpy(v.data() + 1, body.data(), body.size());
  return v;
}
inline std::vector<uint8_t> tagged(uint8_t selector, const Buffer& body) {
  return tagged(selector, body.span());
}

// A message that decodes must encode to bytes that decode to the same message and encode
// again to the same bytes (the encoding of a decoded message is canonical).
template <class R, class Encode, class Decode>
void roundtrip(const R& decoded, Encode encode, Decode decode) {
  if (!decoded.ok()) return;
  auto e1 = encode(*decoded);
  auto again = decode(std::span<const uint8_t>(e1.data(), e1.size()));
  FUZZ_CHECK(again.ok());
  if constexpr (requires { *decoded == *again; }) FUZZ_CHECK(*decoded == *again);
  auto e2 = encode(*again);
  FUZZ_CHECK(e1.size() == e2.size() &&
             (e1.size() == 0 || std::memcmp(e1.data(), e2.data(), e1.size()) == 0));
}

}  // namespace pfsnet::fuzz
