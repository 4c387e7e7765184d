// The tuning module's wording of sizes and rates, shared by its judgements. Not installed.
// Threads: pure functions.
#pragma once

#include <cstdio>
#include <string>

namespace pfsnet::tune_text {

inline constexpr double kMiB = 1024.0 * 1024.0;

template <class... A>
std::string fmt(const char* f, A... args) {
  char b[512];
  std::snprintf(b, sizeof(b), f, args...);
  return b;
}

inline std::string bytes_text(double b) {
  if (b >= kMiB) return fmt("%.1f MiB", b / kMiB);
  if (b >= 1024) return fmt("%.1f KiB", b / 1024);
  return fmt("%.0f B", b);
}

// "596 MiB/s (5.00 Gbit/s)"
inline std::string rate_text(double bps) {
  return fmt("%.1f MiB/s (%.2f Gbit/s)", bps / kMiB, bps * 8 / 1e9);
}

}  // namespace pfsnet::tune_text
