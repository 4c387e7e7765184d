#!/bin/sh
# Issue 34's yardstick: a healthy eight-node netns cluster under mixed load (small echoes
# and 1 MiB writes from two clients to five servers) for SECONDS (default 600), with
# `pfsnet health` asked on every node every two seconds; prints every problem listed (each
# a false alarm) and fails on any. Needs root and the regular build (./scripts/test.sh
# builds it). Run it on an otherwise idle machine.
set -eu
cd "$(dirname "$0")/.."
SECONDS_TO_RUN="${1:-600}"
BIN=build/tests/pfsnet_integration_test
[ -x "$BIN" ] || { echo "build first: $BIN is missing" >&2; exit 2; }
PFSNET_QUIET_SECONDS="$SECONDS_TO_RUN" exec "$BIN" --gtest_filter='NetnsTest.AQuietClusterUnderLoadListsNothing'
