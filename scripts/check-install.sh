#!/usr/bin/env bash
# ctest: installs a build tree into a scratch prefix, checks what lands there, builds the
# example against it through find_package(pfsnet) and through pkg-config, and runs it.
set -euo pipefail
build=$1
src=$(cd "$(dirname "$0")/.." && pwd)
prefix=$(mktemp -d /tmp/pfsnet-install-XXXXXX)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in bin/pfsnetd bin/pfsnet lib/libpfsnet_rpc.a lib/libpfsnet_node.a include/pfsnet/node.h \
         lib/cmake/pfsnet/pfsnetConfig.cmake lib/pkgconfig/pfsnet.pc \
         lib/systemd/system/pfsnetd.service share/doc/pfsnet/pfsnetd.toml.example; do
  [ -e "$prefix/$f" ] || { echo "install: $f missing" >&2; exit 1; }
done
# Only the public API is installed: no internal header.
if [ -e "$prefix/include/pfsnet/rpc/rpc_engine.h" ] || [ -d "$prefix/include/pfsnet/net" ]; then
  echo "install: internal headers installed" >&2
  exit 1
fi
"$prefix/bin/pfsnet" --help | grep -q "ping" || { echo "install: pfsnet --help incomplete" >&2; exit 1; }
# The example through find_package.
cmake -S "$src/examples/ping_client" -B "$prefix/example" -G Ninja \
      -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$prefix/example" >/dev/null
# ... and through pkg-config.
PKG_CONFIG_PATH="$prefix/lib/pkgconfig" c++ -std=c++20 -o "$prefix/example/pc_build" \
  "$src/examples/ping_client/main.cc" $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs pfsnet)
# Run it against a daemon from the installed tree, on loopback.
addr="127.$(( $$ % 200 + 20 )).$(( ($$ / 200) % 250 ))"
key="$prefix/key"
"$prefix/bin/pfsnet" keygen "$key" >/dev/null
cat > "$prefix/d.toml" <<CFG
[node]
cluster_key_file = "$key"
admin_socket = "$prefix/d.sock"
[[net]]
nid = "$addr.2@tcp"
CFG
"$prefix/bin/pfsnetd" --config "$prefix/d.toml" --log-level warn &
pid=$!
trap 'kill -KILL $pid 2>/dev/null || true; rm -rf "$prefix"' EXIT
for _ in $(seq 1 100); do [ -S "$prefix/d.sock" ] && break; sleep 0.05; done
"$prefix/example/pfsnet_ping_example" "$addr.1@tcp" "$addr.2@tcp" "$key" 2 | grep -c "reply from" | grep -qx 2
"$prefix/example/pc_build" "$addr.3@tcp" "$addr.2@tcp" "$key" 1 | grep -q "reply from"
kill -TERM $pid
wait $pid
echo "install: ok"
