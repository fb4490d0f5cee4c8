#!/usr/bin/env bash
# Removes what scripts/install.sh installed. The configuration in
# /etc/mcpgate and the state in /var/lib/mcpgate stay unless --purge.
#
#   scripts/uninstall.sh [--prefix /usr/local] [--destdir DIR] [--purge]
set -euo pipefail

prefix=/usr/local
destdir=
purge=0
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix=$2; shift 2 ;;
    --destdir) destdir=$2; shift 2 ;;
    --purge) purge=1; shift ;;
    *) echo "uninstall.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

if [ -z "$destdir" ] && [ -d /run/systemd/system ]; then
  # Stopping closes every session: a DELETE reaches every downstream server.
  systemctl disable --now mcpgate.service || true
fi
rm -f "$destdir$prefix/bin/mcpgate" "$destdir/etc/systemd/system/mcpgate.service"
if [ $purge = 1 ]; then
  rm -rf "$destdir/etc/mcpgate" "$destdir/var/lib/mcpgate" "$destdir/var/lib/private/mcpgate"
fi
if [ -z "$destdir" ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload
fi
echo "mcpgate is uninstalled${destdir:+ from $destdir}"
