// Test support: a problem with the fields the rules and the codec look at, its evidence
// named after its subject.
#pragma once

#include <cstdint>
#include <string>

#include "probe/cluster_health.h"

namespace pfsnet {

inline Problem prob(std::string kind, std::string subject, std::string cause, std::string by = "",
                    int64_t since = 0) {
  std::string evidence = "evidence of " + subject;
  return Problem{std::move(kind),
                 std::move(subject),
                 std::move(cause),
                 std::move(by),
                 since,
                 std::move(evidence),
                 ""};
}

}  // namespace pfsnet
