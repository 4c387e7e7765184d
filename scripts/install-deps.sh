#!/usr/bin/env bash
# Installs the Debian 12 packages pfsnet builds and tests with. Idempotent: when every
# package is already installed it does nothing and asks no registry.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config clang clang-format lld iproute2
  libasio-dev libcli11-dev libtomlplusplus-dev nlohmann-json3-dev
  libspdlog-dev libfmt-dev libssl-dev libipsec-mb-dev libcpp-httplib-dev
  libgtest-dev libgmock-dev libbenchmark-dev libfabric-dev libfabric-bin
  prometheus curl bc nftables openssl chromium iperf3 etcd-server help2man
  debhelper mmdebstrap lintian
)
# npm installs the dashboard's chart library at build time; the machine's Node.js may
# bring its own npm (NodeSource), else Debian's.
if ! command -v npm >/dev/null 2>&1; then packages+=(npm); fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
