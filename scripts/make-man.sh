#!/usr/bin/env bash
# Writes the manual pages into OUTDIR from the programs' own --help and --version (help2man)
# and from docs/configuration.md, so they say what the programs and the reference say:
#   pfsnet.1        the CLI: every subcommand's --help, nested ones too
#   pfsnetd.8       the daemon
#   pfsnetd.toml.5  the configuration file: every key of docs/configuration.md
# Usage: scripts/make-man.sh PFSNET_BIN PFSNETD_BIN SOURCE_DIR OUTDIR
set -euo pipefail
pfsnet=$1 pfsnetd=$2 src=$3 out=$4
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The subcommands a --help lists (the lines under "Subcommands:").
subcommands() {
  "$@" --help | awk '/^Subcommands:/ {on = 1; next} on && /^  [a-z]/ {print $1}'
}
# One section per subcommand, depth first: its --help, the program's path dropped.
{
  echo "[COMMANDS]"
  walk() {
    local sub
    for sub in $(subcommands "$@"); do
      echo ".SS \"${*:2} $sub\"" | sed 's/^\.SS " /.SS "/'
      echo ".nf"
      "$@" "$sub" --help | sed -e "s|$pfsnet|pfsnet|g" -e 's/\\/\\e/g' -e 's/^\./\\\&./'
      echo ".fi"
      walk "$@" "$sub"
    done
  }
  walk "$pfsnet"
  cat <<'TXT'
[ENVIRONMENT]
.TP
.B PFSNET_SOCKET
The admin socket of the local pfsnetd, when --socket is not given (default
/run/pfsnet/pfsnetd.sock).
[EXIT STATUS]
0 on success; 2 for a bad argument or an error the daemon reported; other values as each
command says (ping: 1 when an RPC failed).
[SEE ALSO]
.BR pfsnetd (8),
.BR pfsnetd.toml (5).
The reference is in /usr/share/doc/pfsnet (configuration.md, metrics.md, health.md).
TXT
} > "$tmp/pfsnet.h2m"
help2man --no-info --section 1 --include "$tmp/pfsnet.h2m" \
  --name "operate and observe a pfsnet cluster through the local pfsnetd" \
  --output "$out/pfsnet.1" "$pfsnet"

cat > "$tmp/pfsnetd.h2m" <<'TXT'
[DESCRIPTION]
pfsnetd is the pfsnet daemon of one node of a storage cluster: it carries the node's RPCs
over TCP and libfabric (LNet-style NIs, credits, health, multi-rail), keeps their statistics,
pings the MGS, probes its peers and serves the admin socket that pfsnet(1) talks to, and,
with node.http set, /metrics and the dashboard. It runs in the foreground (for systemd).
[SIGNALS]
.TP
.B SIGHUP
Re-read the configuration file: the run-time keys take effect, the others are refused with
a warning (pfsnetd.toml(5) says which are which).
.TP
.BR SIGTERM ", " SIGINT
Stop cleanly.
[FILES]
.TP
.I /etc/pfsnet/pfsnetd.toml
The configuration (pfsnetd.toml(5)).
.TP
.I /etc/pfsnet/cluster.key
The cluster key (pfsnet keygen).
.TP
.I /run/pfsnet/pfsnetd.sock
The admin socket (root and the daemon's own user only).
.TP
.I /lib/systemd/system/pfsnetd.service
The unit: pfsnetd runs as the system user pfsnet, which the package (or systemd-sysusers)
creates; it needs no root.
[SEE ALSO]
.BR pfsnet (1),
.BR pfsnetd.toml (5).
TXT
help2man --no-info --section 8 --include "$tmp/pfsnetd.h2m" \
  --name "the pfsnet daemon" --output "$out/pfsnetd.8" "$pfsnetd"

# pfsnetd.toml(5): the tables of docs/configuration.md, one .TP entry per key.
version=$("$pfsnetd" --version | awk '{print $2}')
awk -v version="$version" '
  function roff(s) {
    gsub(/\\/, "\\e", s); gsub(/`/, "", s); gsub(/\*/, "", s)
    if (s ~ /^[.\047]/) s = "\\&" s  # a line starting with a dot or a quote is no request
    return s
  }
  BEGIN {
    print ".TH PFSNETD.TOML 5 \"\" \"pfsnet " version "\" \"File Formats\""
    print ".SH NAME"
    print "pfsnetd.toml \\- the configuration file of pfsnetd"
    print ".SH DESCRIPTION"
  }
  /^# / { next }
  /^## / { sub(/^## /, ""); print ".SH \"" roff($0) "\""; next }
  /^\| Key / || /^\|---/ { next }
  /^\| `/ {
    n = split($0, c, / \| /)
    key = c[1]; sub(/^\| /, "", key)
    text = c[6]; sub(/ \|$/, "", text)
    print ".TP"
    print ".B " roff(key)
    line = roff(c[2]) "; default " roff(c[3])
    if (c[4] != "") line = line "; " roff(c[4])
    line = line (c[5] == "yes" ? "; changes at run time." : "; at restart.")
    print line
    print ".br"
    print roff(text)
    next
  }
  /^$/ { if (para) print ".PP"; para = 0; next }
  { print roff($0); para = 1 }
  END {
    print ".SH SEE ALSO"
    print ".BR pfsnetd (8),"
    print ".BR pfsnet (1)."
  }
' "$src/docs/configuration.md" > "$out/pfsnetd.toml.5"
