// Tests' NIDs, spelled as text ("10.0.0.1@tcp"). A typo in a test's own literal aborts the
// test. For tests only; not installed.
#pragma once

#include <pfsnet/nid.h>

#include <string_view>

namespace pfsnet {

inline Nid nid(std::string_view text) { return *Nid::parse(text); }

}  // namespace pfsnet
