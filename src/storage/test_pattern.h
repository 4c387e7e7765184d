// Tests' data: `n` bytes that differ with `seed`, the same every run. For tests only; not
// installed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace pfsnet {

inline std::vector<uint8_t> test_pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 g(seed);
  for (auto& b : v) b = static_cast<uint8_t>(g());
  return v;
}

}  // namespace pfsnet
