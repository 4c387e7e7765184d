#include <pfsnet/version.h>

#include "pfsnet_build_commit.h"  // generated at every build (cmake/pfsnet_commit.cmake)

namespace pfsnet {

std::string_view version() { return PFSNET_VERSION_STRING; }

std::string_view build_commit() { return PFSNET_BUILD_COMMIT; }

std::string version_line(std::string_view program) {
  return std::string(program) + " " + std::string(version()) + " (commit " +
         std::string(build_commit()) + ")";
}

std::string release_name() {
  return std::string(version()) + " (" + std::string(build_commit()) + ")";
}

}  // namespace pfsnet
