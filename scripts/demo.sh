#!/usr/bin/env bash
# The first experience: builds, starts a small cluster on loopback -- one MGS, two
# servers, two clients on 127.0.0.2-6 -- drives a mixed RPC load (PING echo, BRW_WRITE,
# BRW_READ; 0 B to 1 MiB) for a few seconds, shows `pfsnet diag rpc` and `pfsnet peers`,
# prints the /metrics URL, and stops everything cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" --target pfsnetd pfsnet >/dev/null
P=build/apps/pfsnet

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

$P keygen "$dir/cluster.key" >/dev/null
names=(mgs oss1 oss2 client1 client2)
roles=(mgs server server client client)
for i in 0 1 2 3 4; do
  n=${names[$i]}
  addr="127.0.0.$((i + 2))"
  http=""
  [ "$n" = client1 ] && http="http = \"$addr:9708\""
  cat > "$dir/$n.toml" <<CFG
[node]
name = "$n"
roles = ["${roles[$i]}"]
mgs = ["127.0.0.2@tcp"]
cluster_key_file = "$dir/cluster.key"
admin_socket = "$dir/$n.sock"
$http

[[net]]
nid = "$addr@tcp"
CFG
  build/apps/pfsnetd --config "$dir/$n.toml" --log-level warn 2>"$dir/$n.log" &
  pids+=($!)
done
for n in "${names[@]}"; do
  for _ in $(seq 1 50); do [ -S "$dir/$n.sock" ] && break; sleep 0.1; done
  [ -S "$dir/$n.sock" ] || { echo "demo: $n did not start:" >&2; cat "$dir/$n.log" >&2; exit 1; }
done
echo "== 5 daemons up: mgs 127.0.0.2, oss1 .3, oss2 .4, client1 .5, client2 .6"

echo "== mixed load: each client to each server, PING/BRW_WRITE/BRW_READ, 0 B..1 MiB"
load=()
for c in client1 client2; do
  for s in 3 4; do
    for spec in "echo 0 400" "echo 4096 300" "write 65536 200" "read 65536 200" \
                "write 1048576 40" "read 1048576 40"; do
      set -- $spec
      $P --socket "$dir/$c.sock" ping "127.0.0.$s@tcp" --mode "$1" --size "$2" --count "$3" \
        --json >"$dir/load-$c-$s-$1-$2.json" &
      load+=($!)
    done
  done
  $P --socket "$dir/$c.sock" ping 127.0.0.2@tcp --count 20 --json >"$dir/load-$c-mgs.json" &
  load+=($!)
done
for p in "${load[@]}"; do wait "$p" || true; done
ok=$(cat "$dir"/load-*.json | grep -o '"ok":[0-9]*' | cut -d: -f2 | paste -sd+ | bc)
failed=$(cat "$dir"/load-*.json | grep -o '"failed":[0-9]*' | cut -d: -f2 | paste -sd+ | bc)
echo "   $ok RPCs ok, $failed failed"
sleep 1.1  # statistics are processed once a second

echo "== client1: pfsnet diag rpc node 5s"
$P --socket "$dir/client1.sock" diag rpc node 5s
echo
echo "== client1: pfsnet diag rpc size 5s -Y"
$P --socket "$dir/client1.sock" diag rpc size 5s -Y
echo
echo "== oss1: pfsnet diag rpc message 5s"
$P --socket "$dir/oss1.sock" diag rpc message 5s
echo
echo "== client2: pfsnet status (the MGS's table of every node)"
$P --socket "$dir/client2.sock" status
echo
echo "== client1: pfsnet peers"
$P --socket "$dir/client1.sock" peers
echo
echo "== client1 serves Prometheus metrics at http://127.0.0.5:9708/metrics, e.g.:"
curl -s http://127.0.0.5:9708/metrics | grep '^pfsnet_peer_sent_messages_total' || true

echo "== stopping"
for p in "${pids[@]}"; do kill -TERM "$p"; done
for p in "${pids[@]}"; do wait "$p"; done
pids=()
echo "== all daemons stopped cleanly"
