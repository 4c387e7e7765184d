#!/usr/bin/env bash
# Builds in Release and prints one JSON line per figure, each beside a baseline measured
# in the same run: {"figure": NAME, "value": X, "baseline": Y, "ratio": X/Y, "unit": U}.
#   bench/run.sh [--seconds S] [--only FIGURE]
# Without arguments it also runs membership_bench, health_bench (the slowness judgement's
# cost at 100,000 peer NIs), mesh_bench (the probe mesh's cost per node at the defaults and
# the MGS's at 100,000 nodes) and wan_bench (the WAN study on a real 50 ms path through
# kernel TCP, at 1 and 4 Gbit/s beside iperf3: sweep tables on stderr and as {"sweep": ...}
# lines, about 9 minutes; needs root and iperf3) and gpfs_bench (the GPFS
# paper's Tables 1-2 with 1 server and 32 client daemons, Tables 4-5 with 2 servers, Tables
# 7-8 with the high nodes' faster server and 28 clients -- each beside the paper's -- and
# the block service with an in-memory target against raw TCP; each cell moves 1 GiB).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build-release -G Ninja -DCMAKE_BUILD_TYPE=Release -DPFSNET_BUILD_TESTS=OFF >/dev/null
cmake --build build-release -j "$(nproc)" --target pfsnet_bench membership_bench health_bench mesh_bench wan_bench gpfs_bench pfsnetd pfsnet_delay_line >/dev/null
build-release/bench/pfsnet_bench --pfsnetd build-release/apps/pfsnetd "$@"
if [ $# -eq 0 ]; then
  build-release/bench/membership_bench
  build-release/bench/health_bench
  build-release/bench/mesh_bench
  build-release/bench/wan_bench --pfsnetd build-release/apps/pfsnetd \
    --delay-line build-release/tools/delay_line/pfsnet_delay_line
  build-release/bench/gpfs_bench --pfsnetd build-release/apps/pfsnetd \
    --pfsnet-bench build-release/bench/pfsnet_bench
fi
