#!/usr/bin/env bash
# The long fuzz runs (docs/fuzzing.md): builds the libFuzzer targets with clang (ASan +
# UBSan) in build-fuzz/, runs each over its checked-in corpus and seeds for RUNS executions
# (default 10 M; at most SECONDS each, default 3600), two at a time, and merges what they
# found into fuzz/corpus/<target>/ (minimised: only inputs that add coverage).
#   scripts/fuzz.sh [--runs N] [--seconds S] [TARGET...]
# Prints per target: executions, exec/s, crashes (artifacts in build-fuzz/work/).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=10000000
seconds=3600
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(frame membership probe selftest config admin storage)
command -v clang++ >/dev/null || { echo "fuzz: clang++ missing (apt-get install clang)" >&2; exit 1; }

CXX=clang++ CC=clang cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DPFSNET_FUZZ=ON -DPFSNET_BUILD_BENCH=OFF >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target "${targets[@]/%/_fuzz}" "${targets[@]/%/_replay}"
work=build-fuzz/work
mkdir -p "$work"
run_one() {
  local t=$1
  rm -rf "$work/$t"
  mkdir -p "$work/$t" "fuzz/corpus/$t"
  build-fuzz/fuzz/${t}_replay --write-seeds "$work/$t" >/dev/null
  cp fuzz/corpus/$t/* "$work/$t/" 2>/dev/null || true
  build-fuzz/fuzz/${t}_fuzz "$work/$t" -runs="$runs" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$work/crash-$t-" \
    >"$work/$t.log" 2>&1 || true
  # Into the checked-in corpus: what the run found that adds coverage (existing files,
  # the regression-* crash inputs among them, stay as they are).
  build-fuzz/fuzz/${t}_fuzz -merge=1 "fuzz/corpus/$t" "$work/$t" >/dev/null 2>&1
}
export -f run_one
export runs seconds work
printf '%s\n' "${targets[@]}" | xargs -P 2 -I{} bash -c 'run_one {}'
printf '%-11s %12s %8s %8s %8s\n' target executions exec/s crashes corpus
for t in "${targets[@]}"; do
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$t.log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/$t.log" | tail -1)
  crashes=$( (ls "$work"/crash-$t-* 2>/dev/null || true) | wc -l)
  printf '%-11s %12s %8s %8s %8s\n' "$t" "${execs:-?}" "${rate:-?}" "$crashes" \
    "$(ls fuzz/corpus/$t | wc -l)"
done
