#!/usr/bin/env bash
# Refuses an include of a module from a module below it (docs/architecture.md "Layers").
# Each module lists the modules it may include; anything else under src/ is an error.
set -euo pipefail
root=${1:-$(dirname "$0")/..}
cd "$root/src"
declare -A allowed=(
  [base]="base"
  [wire]="wire base"
  [stats]="stats base"
  [transport]="transport wire base"
  [net]="net transport wire base"
  [rpc]="rpc net transport wire base stats"
  [admin]="admin health probe membership selftest tune storage rpc net transport wire base stats"
  [health]="health probe membership tune rpc net transport wire base stats"
  [membership]="membership rpc net transport wire base stats"
  [selftest]="selftest rpc net transport wire base stats"
  [tune]="tune rpc net transport wire base stats"
  [probe]="probe membership tune rpc net transport wire base stats"
  [node]="node rpc net transport wire base stats"
  [storage]="storage rpc net transport wire base stats"
)
bad=0
for mod in "${!allowed[@]}"; do
  [ -d "$mod" ] || continue
  while IFS= read -r line; do
    file=${line%%:*}
    inc=$(sed -E 's/.*#include "([a-z_]+)\/.*/\1/' <<<"$line")
    if [[ " ${allowed[$mod]} " != *" $inc "* ]]; then
      echo "layering: $file includes \"$inc/...\": $mod may include only: ${allowed[$mod]}" >&2
      bad=1
    fi
  done < <(grep -rnE '#include "[a-z_]+/' "$mod" || true)
done
# The public API (include/pfsnet) includes only public headers: <pfsnet/...> and the
# standard library, never an internal "module/..." header.
while IFS= read -r line; do
  echo "layering: public header includes an internal header: $line" >&2
  bad=1
done < <(grep -rnE '#include "' ../include/pfsnet || true)
# Wall-clock time is read only by the Clock (base/clock.h), so tests drive it exactly.
while IFS= read -r line; do
  echo "layering: $line reads the wall clock: use Clock::wall_now()" >&2
  bad=1
done < <(grep -rnE 'system_clock::now|gettimeofday|time\(nullptr\)|std::time\(' . \
           | grep -v '^./base/clock.h:' || true)
[ $bad -eq 0 ] && echo "layering: ok"
exit $bad
