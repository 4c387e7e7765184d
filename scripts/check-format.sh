#!/usr/bin/env bash
# Fails when a C++ file differs from what clang-format makes of it (.clang-format).
set -euo pipefail
cd "$(dirname "$0")/.."
files=$(git ls-files '*.h' '*.cc')
bad=0
for f in $files; do
  if ! clang-format --style=file "$f" | cmp -s - "$f"; then
    echo "format: $f is not clang-formatted (run: clang-format -i $f)" >&2
    bad=1
  fi
done
exit $bad
