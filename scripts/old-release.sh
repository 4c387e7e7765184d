#!/usr/bin/env bash
# Builds pfsnetd and pfsnet as they were at an earlier commit, for the mixed-version tests:
# by default 8827b49, the last main that speaks only wire version 1 (docs/wire_format.md,
# "Compatibility"). The binaries go to DIR (default .cache/old-<commit>, which every build
# directory shares) with the commit they were built from; a DIR that already holds them is
# kept as it is (the cache: CI builds them once per clone, a developer once).
#
#   scripts/old-release.sh [--commit C] [--out DIR]
#
# The source is the commit's tree from this clone's history (git archive), built in a
# temporary directory with the compiler and flags of ./scripts/test.sh, tests off.
set -euo pipefail
cd "$(dirname "$0")/.."

commit=8827b49
out=
while [ $# -gt 0 ]; do
  case "$1" in
    --commit) commit=${2:?--commit needs a commit}; shift 2 ;;
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    *) echo "usage: $0 [--commit C] [--out DIR]" >&2; exit 2 ;;
  esac
done
full=$(git rev-parse --verify --quiet "$commit^{commit}") || {
  echo "old-release.sh: commit $commit is not in this clone's history (a shallow clone? git fetch --unshallow)" >&2
  exit 1
}
out=${out:-.cache/old-$commit}

if [ -x "$out/pfsnetd" ] && [ -x "$out/pfsnet" ] && [ "$(cat "$out/commit" 2>/dev/null)" = "$full" ]; then
  echo "old-release.sh: $out holds pfsnetd and pfsnet of $commit (cached)"
  exit 0
fi

src=$(mktemp -d /tmp/pfsnet-old.XXXXXX)
trap 'rm -rf "$src"' EXIT
git archive --format=tar "$full" | tar -x -C "$src"
start=$(date +%s)
CXX=c++ cmake -S "$src" -B "$src/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g0 -DNDEBUG" -DPFSNET_BUILD_TESTS=OFF \
  -DPFSNET_BUILD_BENCH=OFF >/dev/null
cmake --build "$src/build" -j "$(nproc)" --target pfsnetd pfsnet >/dev/null
mkdir -p "$out"
cp "$src/build/apps/pfsnetd" "$src/build/apps/pfsnet" "$out/"
echo "$full" >"$out/commit"
echo "old-release.sh: built pfsnetd and pfsnet of $commit into $out in $(($(date +%s) - start)) s"
