#!/usr/bin/env bash
# Builds in Release and prints one JSON line per figure, each beside a baseline measured
# in the same run: {"figure": NAME, "value": X, "baseline": Y, "ratio": X/Y, "unit": U}.
#   bench/run.sh [--seconds S] [--only FIGURE]
#   bench/run.sh --quick     the headline figures only (64 B round trip and rate, 1 MiB
#                            writes and reads, exactly-once's cost), in a few minutes
# Each part's time on the clock goes to stderr ("bench: PART took N s").
# Without arguments it also runs membership_bench, health_bench (the slowness judgement's
# cost at 100,000 peer NIs), mesh_bench (the probe mesh's cost per node at the defaults and
# the MGS's at 100,000 nodes) and wan_bench (the WAN study on a real 50 ms path through
# kernel TCP, at 1 and 4 Gbit/s beside iperf3: sweep tables on stderr and as {"sweep": ...}
# lines, about 9 minutes; needs root and iperf3) and gpfs_bench (the GPFS
# paper's Tables 1-2 with 1 server and 32 client daemons, Tables 4-5 with 2 servers, Tables
# 7-8 with the high nodes' faster server and 28 clients -- each beside the paper's -- and
# the block service with an in-memory target against raw TCP; each cell moves 1 GiB) and
# router_bench (1 MiB writes and 64 B round trips through an LNet-style router beside the
# same pair on one network, on 1 Gbit/s tbf-shaped veths in namespaces; and unshaped, where
# the three daemons' CPUs are the bound; about 2 minutes; needs root) and nrs_bench (what the
# fair request scheduling policy costs a server per request, beside a plain FIFO queue).
#   bench/run.sh --router    router_bench alone
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build-release -G Ninja -DCMAKE_BUILD_TYPE=Release -DPFSNET_BUILD_TESTS=OFF >/dev/null
cmake --build build-release -j "$(nproc)" --target pfsnet_bench membership_bench health_bench mesh_bench wan_bench gpfs_bench router_bench nrs_bench pfsnetd pfsnet_delay_line >/dev/null
# Runs one part, saying on stderr how long it took.
part() {
  local name=$1 start=$SECONDS
  shift
  "$@"
  echo "bench: $name took $((SECONDS - start)) s" >&2
}
if [ "${1:-}" = "--router" ]; then
  part router_bench build-release/bench/router_bench --pfsnetd build-release/apps/pfsnetd --unshaped
  exit 0
fi
if [ "${1:-}" = "--quick" ]; then
  part pfsnet_bench build-release/bench/pfsnet_bench --pfsnetd build-release/apps/pfsnetd \
    --only rpc_rtt_64b_p50,rpc_rate_64b,bulk_write_1m,bulk_read_1m,rpc_rate_64b_once_vs_repeatable
  exit 0
fi
part pfsnet_bench build-release/bench/pfsnet_bench --pfsnetd build-release/apps/pfsnetd "$@"
if [ $# -eq 0 ]; then
  part membership_bench build-release/bench/membership_bench
  part health_bench build-release/bench/health_bench
  part mesh_bench build-release/bench/mesh_bench
  part wan_bench build-release/bench/wan_bench --pfsnetd build-release/apps/pfsnetd \
    --delay-line build-release/tools/delay_line/pfsnet_delay_line
  part gpfs_bench build-release/bench/gpfs_bench --pfsnetd build-release/apps/pfsnetd \
    --pfsnet-bench build-release/bench/pfsnet_bench
  part router_bench build-release/bench/router_bench --pfsnetd build-release/apps/pfsnetd --unshaped
  part nrs_bench build-release/bench/nrs_bench
fi
