#!/usr/bin/env bash
# ctest (debian_packages): the Debian packages, built from BUILD (make-debs.sh --reuse), go
# into a clean Debian 12 root (mmdebstrap) with `apt-get install ./*.deb`. There pfsnetd
# runs from the installed files as its unit runs it -- user pfsnet, /etc/pfsnet/pfsnetd.toml
# as installed, /run/pfsnet -- in a network namespace of the test's own, and answers
# `pfsnet ping`; man finds the three pages; an application builds against libpfsnet-dev
# through pkg-config and runs. Then `apt-get remove` leaves only configuration, and purge
# (with autoremove) leaves the root as it was. Needs root and Debian's package mirror.
set -euo pipefail
build=$(cd "${1:?usage: $0 BUILD}" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
[ "$(id -u)" -eq 0 ] || { echo "packages: needs root (chroot, network namespace)" >&2; exit 1; }
for tool in mmdebstrap lintian; do
  command -v $tool >/dev/null || { echo "packages: needs $tool (scripts/install-deps.sh)" >&2; exit 1; }
done

work=$(mktemp -d /tmp/pfsnet-packages-XXXXXX)
root="$work/root"
ns="pfsnet-pkg-$$"
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill -KILL "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  ip netns del "$ns" 2>/dev/null || true
  umount "$root/proc" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' TERM INT  # ctest's timeout: clean up all the same
step() { echo "packages: $* ($SECONDS s)"; }
in_root() { chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive "$@"; }

"$src/scripts/make-debs.sh" --reuse "$build" --out "$work/debs" >/dev/null
debs=$(cd "$work/debs" && ls pfsnetd_*.deb pfsnet_*.deb libpfsnet-dev_*.deb)
[ "$(wc -w <<<"$debs")" -eq 3 ] || { echo "packages: built $debs" >&2; exit 1; }
step "built $(tr '\n' ' ' <<<"$debs")"
# Debian's own checks: no error. Its warnings of these packages (2026-12-03): initial-upload-
# closes-no-bugs (they are a site's, not the archive's) and pkg-config-unavailable-for-cross-
# compilation (pfsnet.pc is in lib/, not the multiarch directory, so that it finds its prefix).
(cd "$work/debs" && lintian --fail-on error $debs >"$work/lintian.log" 2>&1) ||
  { cat "$work/lintian.log" >&2; echo "packages: lintian found errors" >&2; exit 1; }
step "lintian: no error, $(grep -c '^W: ' "$work/lintian.log" || true) warnings"

# The root: Debian 12 with apt, man-db (to read the pages) and systemd (whose postinst
# snippets then run as on a host, and whose systemd-analyze checks the unit), from the
# mirror this machine's apt uses; its package lists are kept for the installs below.
sources=/etc/apt/sources.list.d/debian.sources
[ -f "$sources" ] || sources=/etc/apt/sources.list
mmdebstrap --quiet --variant=apt --include=man-db,systemd --skip=cleanup/apt/lists \
  --aptopt='Acquire::Check-Valid-Until "false"' --aptopt='Acquire::Check-Date "false"' \
  bookworm "$root" "$sources"
step "a clean Debian 12 root"
# What the root holds before: the installs below must leave it so.
snapshot() {
  (cd "$root" && find . -xdev \( -path ./var/lib/dpkg -o -path ./var/lib/apt -o -path ./var/cache \
     -o -path ./var/log -o -path ./tmp -o -path ./proc -o -path ./run -o -path ./dev \) -prune \
     -o -print | sort)
}
snapshot >"$work/before"

mkdir "$root/tmp/debs"
cp "$work/debs"/*.deb "$root/tmp/debs/"
in_root apt-get install -y -q --no-install-recommends $(sed 's|^|./tmp/debs/|' <<<"$debs") \
  >"$work/install.log" 2>&1 || { tail -30 "$work/install.log" >&2; exit 1; }
step "apt-get install ./*.deb"
# What Depends brought: Debian 12 packages, all of them from the mirror.
in_root dpkg-query -W -f='${Package} ${Status}\n' pfsnetd pfsnet libpfsnet-dev |
  grep -c ' install ok installed$' | grep -qx 3 || { echo "packages: not all installed" >&2; exit 1; }
in_root id pfsnet >/dev/null || { echo "packages: no user pfsnet" >&2; exit 1; }
key_mode=$(in_root stat -c '%U %a' /etc/pfsnet/cluster.key)  # the root's names, not ours
[ "$key_mode" = "pfsnet 600" ] || { echo "packages: cluster key: $key_mode" >&2; exit 1; }
in_root dpkg-query -W -f='${Conffiles}\n' pfsnetd | grep -q ' /etc/pfsnet/pfsnetd.toml ' ||
  { echo "packages: /etc/pfsnet/pfsnetd.toml is not a conffile" >&2; exit 1; }
# The unit, as systemd 252 reads it (its commands and pages exist), enabled by the install.
in_root systemd-analyze verify pfsnetd.service >"$work/verify.log" 2>&1 ||
  { cat "$work/verify.log" >&2; echo "packages: systemd-analyze verify pfsnetd.service" >&2; exit 1; }
[ -z "$(grep -v 'sysinit.target\|basic.target\|Failed to create pfsnetd.service/start' "$work/verify.log")" ] ||
  { cat "$work/verify.log" >&2; exit 1; }
[ "$(in_root systemctl is-enabled pfsnetd.service)" = enabled ] ||
  { echo "packages: pfsnetd.service is not enabled" >&2; exit 1; }
grep -qx 'User=pfsnet' "$root/lib/systemd/system/pfsnetd.service"
step "systemd-analyze verify pfsnetd.service: $(wc -l <"$work/verify.log") lines; enabled"
version=$("$build/apps/pfsnet" --version)
[ "$(in_root pfsnet --version)" = "$version" ] ||
  { echo "packages: installed pfsnet says $(in_root pfsnet --version), the build $version" >&2; exit 1; }

# libpfsnet-dev: its Depends are all an application needs beside a compiler.
cp "$src/examples/ping_client/main.cc" "$root/tmp/ping_client.cc"
in_root apt-get install -y -q --no-install-recommends g++ >"$work/gxx.log" 2>&1 ||
  { tail -20 "$work/gxx.log" >&2; exit 1; }
in_root sh -c 'cd /tmp && g++ -std=c++20 -o ping_client ping_client.cc $(pkg-config --cflags --libs pfsnet)'
step "an application built with libpfsnet-dev (pkg-config --cflags --libs pfsnet)"

# The daemon as its unit starts it: ExecStart, User=, RuntimeDirectory=pfsnet.
exec_start=$(sed -n 's/^ExecStart=//p' "$root/lib/systemd/system/pfsnetd.service")
mount -t proc proc "$root/proc"
in_root install -d -o pfsnet -g pfsnet -m 0755 /run/pfsnet
ip netns add "$ns"
ip -n "$ns" link set lo up
# shellcheck disable=SC2086  # ExecStart is a command line
ip netns exec "$ns" chroot "$root" setpriv --reuid=pfsnet --regid=pfsnet --init-groups \
  env -i PATH=/usr/sbin:/usr/bin $exec_start >"$work/pfsnetd.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
  [ -S "$root/run/pfsnet/pfsnetd.sock" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/pfsnetd.log" >&2; echo "packages: pfsnetd exited" >&2; exit 1; }
  sleep 0.1
done
[ -S "$root/run/pfsnet/pfsnetd.sock" ] || { cat "$work/pfsnetd.log" >&2; exit 1; }
# ip netns exec, chroot, setpriv and env each exec the next: $pid is pfsnetd itself.
[ "$(ps -o comm= -p "$pid")" = pfsnetd ] || { echo "packages: $pid is $(ps -o comm= -p "$pid")" >&2; exit 1; }
daemon_uid=$(ps -o uid= -p "$pid" | tr -d ' ')
daemon_user=$(in_root getent passwd "$daemon_uid" | cut -d: -f1)  # the root's name of it
ping=$(ip netns exec "$ns" chroot "$root" pfsnet ping 127.0.0.1@tcp --count 3 --timeout 5)
grep -q '^3 sent, 3 ok, 0 failed' <<<"$ping" || { echo "$ping"; cat "$work/pfsnetd.log"; exit 1; } >&2
grep -qF "release ${version#* }" "$work/pfsnetd.log" ||
  { cat "$work/pfsnetd.log" >&2; echo "packages: the start line names no release" >&2; exit 1; }
step "pfsnetd (user $daemon_user) answered pfsnet ping: $(grep -c '^reply from' <<<"$ping") replies"
[ "$daemon_user" = pfsnet ] || { echo "packages: pfsnetd ran as $daemon_user" >&2; exit 1; }
app=$(ip netns exec "$ns" chroot "$root" /tmp/ping_client 127.0.0.2@tcp 127.0.0.1@tcp \
        /etc/pfsnet/cluster.key 2) || { echo "$app" >&2; exit 1; }
[ "$(grep -c '^reply from 127.0.0.1@tcp' <<<"$app")" -eq 2 ] || { echo "$app" >&2; exit 1; }
step "the application's node pinged pfsnetd: 2 replies"
kill -TERM "$pid"
for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then echo "packages: pfsnetd did not stop on SIGTERM" >&2; exit 1; fi
wait "$pid" || { echo "packages: pfsnetd exited $? on SIGTERM" >&2; exit 1; }
pid=""
umount "$root/proc"

# The manual pages, as the packages installed them.
for page in "1 pfsnet" "8 pfsnetd" "5 pfsnetd.toml"; do
  set -- $page
  file=$(in_root man -w "$1" "$2") || { echo "packages: man $1 $2 missing" >&2; exit 1; }
  warnings=$(in_root man --warnings -E UTF-8 -Tutf8 "$1" "$2" 2>&1 >/dev/null)
  [ -z "$warnings" ] || { echo "packages: man $1 $2: $warnings" >&2; exit 1; }
  case "$file" in /usr/share/man/*) ;; *) echo "packages: man $1 $2 is $file" >&2; exit 1 ;; esac
done
step "man pfsnet, man pfsnetd, man 5 pfsnetd.toml"
rm -f "$root/tmp/ping_client" "$root/tmp/ping_client.cc"
in_root apt-get purge -y -q g++ >"$work/gxx.log" 2>&1 || { tail -20 "$work/gxx.log" >&2; exit 1; }

# Removed: nothing of the packages is left but their configuration.
in_root apt-get remove -y -q pfsnetd pfsnet libpfsnet-dev >"$work/remove.log" 2>&1 ||
  { tail -20 "$work/remove.log" >&2; exit 1; }
for f in $(cd "$work/debs" && for d in $debs; do dpkg-deb -c "$d" | awk '{print $6}'; done | grep -v '/$'); do
  case "$f" in ./etc/*) continue ;; esac
  [ ! -e "$root/$f" ] || { echo "packages: $f is left after apt-get remove" >&2; exit 1; }
done
for f in /etc/pfsnet/pfsnetd.toml /etc/pfsnet/cluster.key; do
  [ -e "$root$f" ] || { echo "packages: apt-get remove took $f (configuration stays)" >&2; exit 1; }
done
step "apt-get remove: of the packages only /etc/pfsnet/pfsnetd.toml and cluster.key are left"
# Purged, with what Depends brought: the root is as it was.
in_root dpkg --purge pfsnetd pfsnet libpfsnet-dev >"$work/purge.log" 2>&1 &&
  in_root apt-get autoremove --purge -y -q >>"$work/purge.log" 2>&1 ||
  { tail -20 "$work/purge.log" >&2; exit 1; }
# The user pfsnet stays, as Debian's system users do: adding it left the shadow files' backups.
left=$(comm -13 "$work/before" <(snapshot) | grep -v -e '^./tmp' -e '^./etc/g\?shadow-$' || true)
[ -z "$left" ] || { echo "packages: left after purge:"; echo "$left"; exit 1; } >&2
step "purged: nothing left (but the user pfsnet)"
echo "packages: ok"
