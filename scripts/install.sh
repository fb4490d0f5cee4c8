#!/usr/bin/env bash
# Installs mcpgate as a systemd service: the binary, the unit and, if there
# is none yet, an example configuration. Running it again updates the binary
# and the unit and restarts a running service; the configuration is kept.
#
#   scripts/install.sh [--prefix /usr/local] [--destdir DIR] [--binary PATH]
#
# --destdir installs under DIR (for packaging or a dry run) and touches no
# running service. --binary installs that file instead of building one.
set -euo pipefail
cd "$(dirname "$0")/.."

prefix=/usr/local
destdir=
binary=
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix=$2; shift 2 ;;
    --destdir) destdir=$2; shift 2 ;;
    --binary) binary=$2; shift 2 ;;
    *) echo "install.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

if [ -z "$binary" ]; then
  cargo build --release --locked --bin mcpgate
  binary=target/release/mcpgate
fi

bin="$destdir$prefix/bin/mcpgate"
unit="$destdir/etc/systemd/system/mcpgate.service"
etc="$destdir/etc/mcpgate"

install -D -m 0755 "$binary" "$bin"
install -d -m 0755 "$(dirname "$unit")"
sed "s#/usr/local/bin/mcpgate#$prefix/bin/mcpgate#" config/mcpgate.service > "$unit.new"
install -m 0644 "$unit.new" "$unit"
rm -f "$unit.new"
install -d -m 0755 "$etc"
if [ ! -e "$etc/mcpgate.json" ]; then
  install -m 0644 config/mcpgate.example.json "$etc/mcpgate.json"
  echo "installed an example configuration: edit $etc/mcpgate.json"
fi
if [ ! -e "$etc/env" ]; then
  # Secrets for ${VAR}s in the configuration; read by systemd as root.
  install -m 0600 /dev/null "$etc/env"
fi

# Check the configuration with the service's environment.
# shellcheck source=/dev/null # the service's secrets, written on the target machine
if ! (set -a; . "$etc/env"; "$bin" --check --config "$etc/mcpgate.json"); then
  echo "install.sh: $etc/mcpgate.json does not validate; the service is not (re)started" >&2
  exit 1
fi

if [ -z "$destdir" ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload
  systemctl enable mcpgate.service
  systemctl try-restart mcpgate.service
  echo "mcpgate is installed; start it with: systemctl start mcpgate"
else
  echo "installed under ${destdir:-/} (no running systemd to tell)"
fi
