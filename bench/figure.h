// One benchmark figure as a JSON line, beside its baseline (measured in the same run, or
// a stated target) and the ratio: {"figure", "value", "baseline", "ratio", "unit"}.
#pragma once

#include <cstdio>

namespace pfsnet {

inline void print_figure(const char* name, double value, double baseline, const char* unit) {
  std::printf(
      "{\"figure\": \"%s\", \"value\": %.3f, \"baseline\": %.3f, \"ratio\": %.4f, \"unit\": "
      "\"%s\"}\n",
      name, value, baseline, baseline > 0 ? value / baseline : 0.0, unit);
  std::fflush(stdout);
}

}  // namespace pfsnet
