#!/usr/bin/env bash
# ctest: installs a build tree into a scratch prefix, checks what lands there, builds the
# example against it through find_package(pfsnet) and through pkg-config, and runs it.
set -euo pipefail
build=$1
src=$(cd "$(dirname "$0")/.." && pwd)
prefix=$(mktemp -d /tmp/pfsnet-install-XXXXXX)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in sbin/pfsnetd bin/pfsnet lib/libpfsnet_rpc.a lib/libpfsnet_node.a include/pfsnet/node.h \
         lib/cmake/pfsnet/pfsnetConfig.cmake lib/pkgconfig/pfsnet.pc \
         lib/systemd/system/pfsnetd.service lib/sysusers.d/pfsnet.conf \
         share/doc/pfsnet/pfsnetd.toml.example; do
  [ -e "$prefix/$f" ] || { echo "install: $f missing" >&2; exit 1; }
done
# The manual pages: each found by man in the installed tree, rendered without a warning,
# and saying what the programs and the reference say.
for page in "1 pfsnet" "8 pfsnetd" "5 pfsnetd.toml"; do
  set -- $page
  file=$(MANPATH="$prefix/share/man" man -w "$1" "$2") || { echo "install: man $1 $2 missing" >&2; exit 1; }
  warnings=$(MANPATH="$prefix/share/man" man --warnings -E UTF-8 -Tutf8 "$1" "$2" 2>&1 >/dev/null)
  [ -z "$warnings" ] || { echo "install: man $1 $2: $warnings" >&2; exit 1; }
  case "$file" in "$prefix"/*) ;; *) echo "install: man $1 $2 is $file" >&2; exit 1 ;; esac
done
text=$(MANPATH="$prefix/share/man" MANWIDTH=200 man 1 pfsnet 2>/dev/null)
for sub in ping "diag rpc" health "bench gpfs" "file"; do
  grep -q "^   $sub\b" <<<"$text" || { echo "install: pfsnet(1) lacks '$sub'" >&2; exit 1; }
done
grep -q "$("$prefix/bin/pfsnet" --version | awk '{print $2}')" <<<"$text" ||
  { echo "install: pfsnet(1) names another version" >&2; exit 1; }
text=$(MANPATH="$prefix/share/man" MANWIDTH=200 man 5 pfsnetd.toml 2>/dev/null)
keys=$(grep -c '^| `' "$src/docs/configuration.md")
[ "$(grep -cE '^       [a-z]+\.[A-Za-z0-9_]+$' <<<"$text")" -eq "$keys" ] ||
  { echo "install: pfsnetd.toml(5) lacks keys of docs/configuration.md ($keys)" >&2; exit 1; }
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
"$prefix/sbin/pfsnetd" --config "$prefix/d.toml" --log-level warn &
pid=$!
trap 'kill -KILL $pid 2>/dev/null || true; rm -rf "$prefix"' EXIT
for _ in $(seq 1 100); do [ -S "$prefix/d.sock" ] && break; sleep 0.05; done
"$prefix/example/pfsnet_ping_example" "$addr.1@tcp" "$addr.2@tcp" "$key" 2 | grep -c "reply from" | grep -qx 2
"$prefix/example/pc_build" "$addr.3@tcp" "$addr.2@tcp" "$key" 1 | grep -q "reply from"
kill -TERM $pid
wait $pid
echo "install: ok"
