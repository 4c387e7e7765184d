#!/usr/bin/env bash
# Before and after in one run: pfsnet_bench figures of this checkout beside those of another
# commit, each build measured in turn (A B A B ...) so that the machine's drift falls on
# both alike; each run prints its figure beside its own raw-TCP baseline, and this script
# prints, per figure, the median of each side's values and of their ratios to the baseline,
# and after/before.
#   bench/ab.sh [--commit C] [--rounds N] [--only FIGURES]
# Defaults: the commit before the current branch's first parent (HEAD~1), 3 rounds, the
# 64-byte figures (rpc_rtt_64b_p50,rpc_rate_64b). Both sides are Release builds as
# bench/run.sh makes them: this checkout in build-release, the other in
# .cache/bench-<commit> (kept between runs).
set -euo pipefail
cd "$(dirname "$0")/.."
commit=HEAD~1
rounds=3
only=rpc_rtt_64b_p50,rpc_rate_64b
while [ $# -gt 0 ]; do
  case "$1" in
    --commit) commit=${2:?}; shift 2 ;;
    --rounds) rounds=${2:?}; shift 2 ;;
    --only) only=${2:?}; shift 2 ;;
    *) echo "usage: $0 [--commit C] [--rounds N] [--only FIGURES]" >&2; exit 2 ;;
  esac
done
full=$(git rev-parse --verify --quiet "$commit^{commit}") || { echo "ab.sh: no commit $commit" >&2; exit 1; }
short=$(git rev-parse --short=12 "$full")
targets=(pfsnet_bench pfsnetd)
cmake -S . -B build-release -G Ninja -DCMAKE_BUILD_TYPE=Release -DPFSNET_BUILD_TESTS=OFF >/dev/null
cmake --build build-release -j "$(nproc)" --target "${targets[@]}" >/dev/null
old=.cache/bench-$short
if [ ! -x "$old/build/bench/pfsnet_bench" ]; then
  rm -rf "$old"
  mkdir -p "$old/src"
  git archive --format=tar "$full" | tar -x -C "$old/src"
  PFSNET_COMMIT=$short cmake -S "$old/src" -B "$old/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DPFSNET_BUILD_TESTS=OFF >/dev/null
  PFSNET_COMMIT=$short cmake --build "$old/build" -j "$(nproc)" --target "${targets[@]}" >/dev/null
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for ((i = 1; i <= rounds; i++)); do
  for side in before after; do
    if [ $side = before ]; then dir=$old/build; else dir=build-release; fi
    "$dir/bench/pfsnet_bench" --pfsnetd "$dir/apps/pfsnetd" --only "$only" |
      sed -n "s/^{/{\"side\":\"$side\",\"round\":$i,/p" >>"$out"
  done
done
python3 - "$out" "$short" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for fig in sorted({r["figure"] for r in rows}):
    side = {s: [r for r in rows if r["figure"] == fig and r["side"] == s] for s in ("before", "after")}
    if not side["before"] or not side["after"]:
        continue
    med = {s: statistics.median(r["value"] for r in side[s]) for s in side}
    rat = {s: statistics.median(r["ratio"] for r in side[s]) for s in side}
    print(json.dumps({"figure": fig, "unit": side["after"][0].get("unit", ""),
                      "before": med["before"], "after": med["after"],
                      "after_over_before": med["after"] / med["before"] if med["before"] else None,
                      "before_ratio_to_baseline": rat["before"], "after_ratio_to_baseline": rat["after"],
                      "rounds": len(side["after"]), "before_commit": sys.argv[2]}))
EOF
