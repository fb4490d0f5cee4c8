#!/usr/bin/env bash
# The init script for boards without systemd (config/mcpgate.init), run for real: start, stop
# with every session closed, restart, reload (a good and a broken configuration), twice: under
# Debian's /bin/sh and start-stop-daemon (sysvinit), and under BusyBox's sh and start-stop-daemon
# applet (BusyBox init, as on OpenWrt-like images; Debian's busybox package, installed when
# missing). mcpgate runs as `nobody`, in front of the fixture over HTTP and as a stdio server, on
# 127.0.0.1; every file it uses is under one temporary directory, removed on exit. Needs root
# (start-stop-daemon -c).
#
#   scripts/initd.sh [--binary PATH]   (default: target/debug/mcpgate)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SCRIPT=initd.sh
WORK=$(mktemp -d /tmp/mcpgate-initd.XXXXXX)
chmod 0755 "$WORK"
LOG_DIR=$WORK
# shellcheck source=lib.sh
. scripts/lib.sh
# shellcheck disable=SC2317 # called by stop_all, the EXIT trap
on_exit() {
  # A check that failed may leave mcpgate running: stopped by its pid file, as the script would.
  local pid
  for pid in "$WORK"/*/mcpgate.pid; do
    [[ -r $pid ]] && kill -KILL "$(cat "$pid")" 2>/dev/null
  done
  rm -rf "$WORK"
}

binary=$ROOT/target/debug/mcpgate
while (($#)); do
  case "$1" in
    --binary) binary=$2; shift 2 ;;
    *) echo "usage: scripts/initd.sh [--binary PATH]" >&2; exit 2 ;;
  esac
done
[[ $EUID == 0 ]] || fail "needs root (start-stop-daemon -c nobody)"
[[ -x $binary && -x $ROOT/target/debug/mcp-fixture ]] || cargo build --locked --quiet -p mcpgate -p mcp-fixture
install_debian "${TMPDIR:-/tmp}/mcpgate-initd-apt.log" busybox=busybox || fail "busybox is not installed (above)"
began=$SECONDS
passed=0
check() { passed=$((passed + 1)); printf '  PASS %s\n' "$*"; }
step() { printf '\n== initd.sh: %s\n' "$*"; }

# The binaries where `nobody` may run them (the work tree may be private).
install -m 0755 "$binary" "$WORK/mcpgate"
install -m 0755 "$ROOT/target/debug/mcp-fixture" "$WORK/mcp-fixture"
start fixture "$WORK/mcp-fixture" --listen 127.0.0.1:0 --name web
FIX=$(wait_port fixture "$PID" "$WORK/fixture.out") || fail "the fixture did not start"
stat_of() { curl -fsS --max-time 10 "http://127.0.0.1:$FIX/stats" | python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }
smoke() { python3 "$ROOT/scripts/board/smoke.py" "$@"; }

# run_under NAME SH: the whole sequence, the init script run by SH, with SH's start-stop-daemon.
run_under() {
  local name=$1 shell=$2 dir=$WORK/$1 port
  mkdir -p "$dir/bin"
  chmod 0755 "$dir"
  port=$(free_port)
  local url=http://127.0.0.1:$port/mcp
  if [[ $name == busybox ]]; then
    # Only BusyBox's applets on PATH: its sh, start-stop-daemon, kill, sleep, tail, grep...
    local applet
    for applet in sh start-stop-daemon kill sleep tail grep cat readlink rm touch chown echo; do
      ln -s "$(command -v busybox)" "$dir/bin/$applet"
    done
    PATH_FOR=$dir/bin
    shell=$dir/bin/sh
  else
    PATH_FOR=/usr/sbin:/usr/bin:/sbin:/bin
  fi
  cat >"$dir/defaults" <<EOF
DAEMON=$WORK/mcpgate
CONFIG=$dir/mcpgate.json
ENV_FILE=$dir/env
RUN_AS=nobody
PIDFILE=$dir/mcpgate.pid
LOGFILE=$dir/mcpgate.log
STOP_TIMEOUT=30
EOF
  echo "WEB_URL=http://127.0.0.1:$FIX/mcp" >"$dir/env"
  write_config() {
    cat >"$dir/mcpgate.json" <<EOF
{
  "listen": "127.0.0.1:$port",
  "mcpServers": {
    "web": { "url": "\${WEB_URL}" },
    "local": { "command": "$WORK/mcp-fixture", "args": ["--stdio", "--name", "local"] }$1
  }
}
EOF
  }
  write_config ""
  initd() { env -i PATH="$PATH_FOR" MCPGATE_DEFAULTS="$dir/defaults" "$shell" "$ROOT/config/mcpgate.init" "$@"; }
  local before_init before_del pid

  step "$name: start, calls, stop with every session closed"
  initd start | sed 's/^/  /' || fail "$name: start"
  initd status | sed 's/^/  /' || fail "$name: status after start"
  pid=$(cat "$dir/mcpgate.pid")
  [[ $(ps -o user= -p "$pid") == nobody ]] || fail "$name: mcpgate runs as $(ps -o user= -p "$pid"), not nobody"
  [[ $(readlink "/proc/$pid/exe") == "$WORK/mcpgate" ]] || fail "$name: the pid file names $(readlink "/proc/$pid/exe")"
  before_init=$(stat_of initialize)
  before_del=$(stat_of delete)
  smoke calls "$url" --servers web,local | sed 's/^/    /' || fail "$name: calls"
  smoke open "$url" --count 3 | sed 's/^/    /' || fail "$name: opening sessions"
  initd stop | sed 's/^/  /' || fail "$name: stop"
  kill -0 "$pid" 2>/dev/null && fail "$name: mcpgate (pid $pid) still runs after stop"
  [[ ! -e $dir/mcpgate.pid ]] || fail "$name: the pid file is left after stop"
  local opened=$(($(stat_of initialize) - before_init)) deleted=$(($(stat_of delete) - before_del))
  [[ $opened == 4 && $deleted == 4 ]] || fail "$name: $opened downstream sessions opened, $deleted DELETEd"
  local procs
  procs=$(grep -o 'processes spawned [0-9]*, reaped [0-9]*, live [0-9]*' "$dir/mcpgate.log" | tail -1)
  [[ $procs =~ spawned\ ([0-9]+),\ reaped\ ([0-9]+),\ live\ 0 && ${BASH_REMATCH[1]} == "${BASH_REMATCH[2]}" ]] ||
    fail "$name: at stop mcpgate said \"$procs\""
  check "$name: start as nobody (pid $pid), calls to HTTP and stdio, stop: $deleted DELETEs for $opened downstream sessions, \"$procs\""

  step "$name: restart"
  initd start >/dev/null || fail "$name: start"
  pid=$(cat "$dir/mcpgate.pid")
  before_init=$(stat_of initialize)
  before_del=$(stat_of delete)
  smoke open "$url" --count 2 | sed 's/^/    /' || fail "$name: opening sessions"
  initd restart | sed 's/^/  /' || fail "$name: restart"
  local new
  new=$(cat "$dir/mcpgate.pid")
  if [[ $new == "$pid" ]] || kill -0 "$pid" 2>/dev/null; then fail "$name: restart left pid $pid running"; fi
  opened=$(($(stat_of initialize) - before_init))
  deleted=$(($(stat_of delete) - before_del))
  [[ $opened == 2 && $deleted == 2 ]] || fail "$name: restart: $opened downstream sessions opened, $deleted DELETEd"
  smoke calls "$url" --servers web,local >/dev/null || fail "$name: calls after restart"
  check "$name: restart: pid $pid ended with its 2 sessions DELETEd, pid $new serves"

  step "$name: reload, a good configuration and a broken one"
  # shellcheck disable=SC2016 # ${WEB_URL} is mcpgate's to expand
  write_config ',
    "extra": { "url": "${WEB_URL}", "prefix": "extra" }'
  initd reload | sed 's/^/  /' || fail "$name: reload of a good configuration"
  listed() { smoke calls "$url" --servers web,local,extra >/dev/null 2>&1; }
  wait_for 10 "$name: the reloaded configuration" listed || fail "$name: extra__echo not listed after reload"
  echo '{ "mcpServers": { "web": { "url": "ftp://nowhere" } } }' >"$dir/mcpgate.json"
  if initd reload >"$dir/reload.out" 2>&1; then fail "$name: reload of a broken configuration exited 0"; fi
  sed 's/^/  /' "$dir/reload.out"
  smoke calls "$url" --servers web,local,extra >/dev/null || fail "$name: the old configuration stopped serving"
  [[ $(cat "$dir/mcpgate.pid") == "$new" ]] || fail "$name: reload replaced the process"
  check "$name: reload applies a good configuration; a broken one fails the reload (exit 1) and the old one serves"
  initd stop >/dev/null || fail "$name: stop"
  initd status >/dev/null && fail "$name: status says running after stop"
  check "$name: status exits 3 after stop"
}

run_under sysvinit /bin/sh
run_under busybox busybox
echo
echo "initd.sh: $passed passed, 0 failed in $((SECONDS - began)) s"
