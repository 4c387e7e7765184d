#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test through ctest.
#   ./scripts/test.sh              RelWithDebInfo build in build/
#   ./scripts/test.sh --sanitize   AddressSanitizer + UBSan build in build-asan/
#   ./scripts/test.sh --tsan       ThreadSanitizer build in build-tsan/ (unit and integration
#                                  tests; a data race fails the test that ran into it)
#   --build-only                   builds and runs nothing
# Idempotent and incremental: a second run only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debug information is line tables only (-g1): enough for a backtrace, a sanitizer's
# report and perf's source lines, at two thirds of the compile time of full -g (one heavy
# test file, 2026-11-28: 21 -> 14.5 s at -O2). ThreadSanitizer's build is -O1, as its
# manual advises (22 -> 11 s); AddressSanitizer's stays -O0 (-O1 made it slower to build).
# The regular build is GCC's; the sanitizer builds are clang's, which builds AddressSanitizer
# code in half GCC's time (tests/tune_test.cc: 19.8 -> 10.2 s), and the ThreadSanitizer
# build is also the one that checks the lock annotations (-Wthread-safety: one clang build
# for both, see scripts/check-thread-safety.sh).
build=build
cxx=c++
flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
  -DPFSNET_SANITIZE=OFF)
run_tests=1
args=()
for a in "$@"; do
  if [ "$a" = "--build-only" ]; then run_tests=0; else args+=("$a"); fi
done
if [ "${args[0]:-}" = "--sanitize" ] && [ ${#args[@]} -eq 1 ]; then
  build=build-asan
  cxx=clang++
  flags=(-DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-g1" -DPFSNET_SANITIZE=ON
    -DPFSNET_BUILD_BENCH=OFF)
  export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
elif [ "${args[0]:-}" = "--tsan" ] && [ ${#args[@]} -eq 1 ]; then
  build=build-tsan
  cxx=clang++
  flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
    -DPFSNET_TSAN=ON -DPFSNET_THREAD_SAFETY=ON -DPFSNET_BUILD_BENCH=ON)
  export TSAN_OPTIONS="halt_on_error=1 abort_on_error=1 second_deadlock_stack=1 suppressions=$PWD/scripts/tsan.supp"
elif [ ${#args[@]} -gt 0 ]; then
  echo "usage: $0 [--sanitize|--tsan] [--build-only]" >&2
  exit 2
fi

./scripts/install-deps.sh
# A build directory configured with another compiler starts over (CMake keeps the first).
cached=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
if [ -n "$cached" ] && [ "$(readlink -f "$cached")" != "$(readlink -f "$(command -v "$cxx")")" ]; then
  echo "test.sh: $build was configured with $cached, not $cxx: configuring it afresh" >&2
  rm -rf "$build"
fi
CXX=$cxx cmake -S . -B "$build" -G Ninja "${flags[@]}" >/dev/null
cmake --build "$build" -j "$(nproc)"
[ "$run_tests" = 1 ] || exit 0
# pfsnetd and pfsnet of 8827b49 (wire version 1) for MixedVersionTest: built once into
# .cache/old-8827b49, which every build directory shares.
./scripts/old-release.sh
cd "$build"
ctest --output-on-failure -j 2 --timeout 300
