// The release of this build and the commit it was built from. The release is kept in one
// place, CMakeLists.txt's project(VERSION); the commit is read from git at every build
// (PFSNET_COMMIT in the environment overrides it, for a build from a tarball).
#pragma once

#include <string>
#include <string_view>

namespace pfsnet {

// The semantic version, "MAJOR.MINOR.PATCH".
std::string_view version();
// The commit: 12 hex digits, with "-dirty" when tracked files differed from it; "unknown"
// when built outside a git checkout with no PFSNET_COMMIT.
std::string_view build_commit();
// "<program> <version> (commit <commit>)": what --version prints and the daemon logs.
std::string version_line(std::string_view program);
// "<version> (<commit>)": the release a node names to its peers (the wire handshake) and
// the MGS (pfsnet status).
std::string release_name();

}  // namespace pfsnet
