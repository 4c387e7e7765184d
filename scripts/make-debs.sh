#!/usr/bin/env bash
# Builds the Debian packages pfsnetd, pfsnet and libpfsnet-dev with dpkg-buildpackage
# (debian/) on a copy of the tree, and puts the .deb files in OUT (default: build-deb/).
#   ./scripts/make-debs.sh                  a package build of its own (Debian's hardening
#                                           flags; about as long as the tests' build)
#   ./scripts/make-debs.sh --reuse BUILD    packages the build tree BUILD instead (configured
#                                           and built, e.g. build/ of ./scripts/test.sh)
#   --out DIR                               where the .deb files go
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
reuse="" out="$src/build-deb"
while [ $# -gt 0 ]; do
  case "$1" in
    --reuse) reuse=$(cd "${2:?--reuse needs a build directory}" && pwd); shift 2 ;;
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    *) echo "usage: $0 [--reuse BUILD] [--out DIR]" >&2; exit 2 ;;
  esac
done
command -v dpkg-buildpackage >/dev/null && command -v dh >/dev/null ||
  { echo "make-debs: needs dpkg-dev and debhelper (scripts/install-deps.sh)" >&2; exit 1; }

# One version: debian/changelog's upstream part is the project's.
version=$(sed -n 's/^project(pfsnet VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
deb_version=$(dpkg-parsechangelog -l "$src/debian/changelog" -S Version)
if [ "${deb_version%-*}" != "$version" ]; then
  echo "make-debs: debian/changelog is at $deb_version, CMakeLists.txt at $version:" \
       "add a debian/changelog entry (dch -v $version-1)" >&2
  exit 1
fi
if [ -n "$reuse" ]; then
  [ -f "$reuse/CMakeCache.txt" ] && [ -x "$reuse/apps/pfsnetd" ] ||
    { echo "make-debs: $reuse is not a built pfsnet tree" >&2; exit 1; }
  built=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$reuse/CMakeCache.txt")
  [ "$(readlink -f "$built")" = "$src" ] ||
    { echo "make-debs: $reuse was configured from $built, not $src" >&2; exit 1; }
  # What the packages hold, brought up to date (nothing to do after the tests' build).
  cmake --build "$reuse" --target pfsnetd pfsnet pfsnet_node man >/dev/null
fi

# dpkg-buildpackage writes beside the tree it builds: a copy in a scratch directory keeps
# the checkout clean. The copy is what git tracks (and new files not ignored) or, outside
# a git checkout, everything but build trees.
work=$(mktemp -d /tmp/pfsnet-debs-XXXXXX)
trap 'rm -rf "$work"' EXIT
tree="$work/pfsnet-$version"
mkdir "$tree"
if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
  (cd "$src" && git ls-files -z --cached --others --exclude-standard |
     tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -xf - -C "$tree"
  # The commit the programs name (pfsnet --version) is the checkout's, as the build says it
  # (cmake/pfsnet_commit.cmake): the copy has no .git.
  commit=$(git -C "$src" rev-parse --short=12 HEAD)
  [ -z "$(git -C "$src" status --porcelain --untracked-files=no)" ] || commit="$commit-dirty"
  export PFSNET_COMMIT=${PFSNET_COMMIT:-$commit}
else
  tar -C "$src" --exclude='./build*' -cf - . | tar -xf - -C "$tree"
fi

log="$work/dpkg-buildpackage.log"
(cd "$tree" && PFSNET_PREBUILT="$reuse" dpkg-buildpackage -b -us -uc) >"$log" 2>&1 || {
  tail -40 "$log" >&2
  echo "make-debs: dpkg-buildpackage failed (above: the end of its log)" >&2
  exit 1
}
mkdir -p "$out"
rm -f "$out"/*.deb
cp "$work"/*.deb "$out"/
ls "$out"/*.deb
