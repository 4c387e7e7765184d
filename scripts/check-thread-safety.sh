#!/usr/bin/env bash
# Checks the lock annotations: builds everything with clang -Wthread-safety -Werror (a
# member read without its lock, a REQUIRES function called without it, is a compile
# error), after proving on a small snippet that the check catches a guarded member read
# without its lock. The build is the ThreadSanitizer build (build-tsan/, clang, benchmarks
# included): one clang build serves both, and `./scripts/test.sh --tsan` after this one
# only runs the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang++ >/dev/null || { echo "check-thread-safety: clang++ missing (apt-get install clang)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/bad.cc" <<'CC'
#include "base/mutex.h"
struct Counter {
  pfsnet::Mutex mu;
  int n GUARDED_BY(mu) = 0;
  int read_unlocked() { return n; }  // must not compile
};
int main() { return Counter().read_unlocked(); }
CC
if clang++ -std=c++20 -Isrc -Wthread-safety -Werror -fsyntax-only "$tmp/bad.cc" 2>"$tmp/err"; then
  echo "check-thread-safety: an unlocked read of a GUARDED_BY member compiled" >&2
  exit 1
fi
grep -q "requires holding mutex 'mu'" "$tmp/err" || { cat "$tmp/err" >&2; exit 1; }

./scripts/test.sh --tsan --build-only
echo "check-thread-safety: ok"
