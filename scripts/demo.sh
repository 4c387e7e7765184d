#!/usr/bin/env bash
# The first experience: builds, starts three daemons on 127.0.0.2-4, pings between them
# through the CLI, shows the peers view, and stops them cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" --target pfsnetd pfsnet >/dev/null

dir=$(mktemp -d /tmp/pfsnet-demo-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
  rm -rf "$dir"
}
trap cleanup EXIT

build/apps/pfsnet keygen "$dir/cluster.key" >/dev/null
for i in 2 3 4; do
  cat > "$dir/n$i.toml" <<CFG
[node]
name = "node$i"
cluster_key_file = "$dir/cluster.key"
admin_socket = "$dir/n$i.sock"

[[net]]
nid = "127.0.0.$i@tcp"
CFG
  build/apps/pfsnetd --config "$dir/n$i.toml" 2>"$dir/n$i.log" &
  pids+=($!)
done
for i in 2 3 4; do
  for _ in $(seq 1 50); do [ -S "$dir/n$i.sock" ] && break; sleep 0.1; done
done

echo "== three daemons up on 127.0.0.2-4; pinging between them"
build/apps/pfsnet --socket "$dir/n2.sock" ping 127.0.0.3@tcp --count 3
build/apps/pfsnet --socket "$dir/n3.sock" ping 127.0.0.4@tcp --count 3 --size 1048576
build/apps/pfsnet --socket "$dir/n4.sock" ping 127.0.0.2@tcp --count 1000 --size 4096 --json
echo "== node2's peers"
build/apps/pfsnet --socket "$dir/n2.sock" peers
echo "== stopping"
for p in "${pids[@]}"; do kill -TERM "$p"; done
for p in "${pids[@]}"; do wait "$p"; done
pids=()
echo "== all daemons stopped cleanly"
