#!/usr/bin/env bash
# mcpgate's unit (config/mcpgate.service) under a real systemd: systemd 252 from this Debian, as
# PID 1 of private pid, mount, cgroup and network namespaces (`unshare`), on an overlay of `/`
# whose writes go to a tmpfs. Nothing is installed on the host: scripts/install.sh installs the
# binary, the unit and the configuration into the overlay. Needs root (namespaces, mounts).
#
#   scripts/systemd.sh [--binary PATH]   (default: target/debug/mcpgate, built if missing)
#
# What it checks, each with the command that shows it (docs/BOARDS.md has a run's output):
#   1. start: `systemctl start` returns once READY=1 arrived (Type=notify), the watchdog is
#      armed (WatchdogUSec=30s), the process got $WATCHDOG_USEC;
#   2. status: `systemctl show -p StatusText` shows the new session count within 2 s;
#   3. reload: a good configuration is applied (a new server's tools are listed), a broken one
#      makes `systemctl reload` fail (ExecReload= runs `mcpgate --check` first) and the old one
#      keeps serving in the same process;
#   4. watchdog: `kill -STOP` of mcpgate, systemd's watchdog aborts and restarts it (NRestarts=1),
#      and a session opened before answers after, from the state file;
#   5. sandbox: the stdio server runs as the unit's dynamic user, and works;
#   6. `systemd-analyze security mcpgate` of the live unit: at most 1.1;
#   7. stop: `systemctl stop` DELETEs every downstream session the fixture saw opened, every
#      child is reaped, the unit's cgroup is gone.
# And what this host cannot show, said as it runs: MemoryMax and TasksMax need the memory and
# pids controllers on cgroup v2, and this host keeps them in cgroup v1.
#
# Every mount is made inside the private mount namespace, so it goes when the namespace's last
# process ends; every process runs inside the private pid namespace, whose PID 1 is systemd:
# `systemctl poweroff` ends it, and `unshare --kill-child` takes it down if this script dies. On
# exit, the cgroup made for the namespace and the work directory are removed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SCRIPT=systemd.sh
LOG_DIR=$ROOT/.systemd
mkdir -p "$LOG_DIR"
# shellcheck source=lib.sh
. scripts/lib.sh

binary=
while (($#)); do
  case "$1" in
    --binary) binary=$2; shift 2 ;;
    *) echo "usage: scripts/systemd.sh [--binary PATH]" >&2; exit 2 ;;
  esac
done
[[ $EUID == 0 ]] || fail "needs root: it makes namespaces and mounts (CI runs as root)"
[[ -x /lib/systemd/systemd ]] || fail "no /lib/systemd/systemd on this host"
if [[ -z $binary ]]; then
  cargo build --locked --quiet -p mcpgate -p mcp-fixture
  binary=$ROOT/target/debug/mcpgate
fi
[[ -x $ROOT/target/debug/mcp-fixture ]] || cargo build --locked --quiet -p mcp-fixture
began=$SECONDS
passed=0
check() { passed=$((passed + 1)); printf '  PASS %s\n' "$*"; }

# --------------------------------------------------------------- the namespace and its cgroup
WORK=$(mktemp -d /tmp/mcpgate-systemd.XXXXXX)
# The cgroup v2 hierarchy: /sys/fs/cgroup itself, or /sys/fs/cgroup/unified on a hybrid host.
if [[ $(stat -fc %T /sys/fs/cgroup) == cgroup2fs ]]; then
  V2=/sys/fs/cgroup
elif [[ -d /sys/fs/cgroup/unified && $(stat -fc %T /sys/fs/cgroup/unified) == cgroup2fs ]]; then
  V2=/sys/fs/cgroup/unified
else
  fail "no cgroup v2 hierarchy on this host: systemd 252 needs one inside the namespace"
fi
# A cgroup of its own below this script's, to be the namespace's root: what systemd creates
# inside (init.scope, system.slice...) stays under it and is removed with it.
CGROUP=$V2$(sed -n 's/^0:://p' /proc/self/cgroup)/mcpgate-systemd-$$
CGROUP=${CGROUP//\/\//\/}
mkdir "$CGROUP"
NS_PID=

# shellcheck disable=SC2317 # called by stop_all, the EXIT trap
on_exit() {
  if [[ -n $NS_PID ]] && ours "$UNSHARE_PID"; then
    # Still set: a check failed. What mcpgate's unit said last.
    echo "$SCRIPT: the journal of mcpgate.service, last lines:" >&2
    inside journalctl -u mcpgate.service -n 25 --no-pager -o short-monotonic >&2 || true
    inside systemctl poweroff --no-block >/dev/null 2>&1 || true
    local tries
    for ((tries = 200; tries > 0; tries--)); do
      ours "$UNSHARE_PID" || break
      sleep 0.1
    done
    # --kill-child: SIGKILL to systemd, and with PID 1 every process of the namespace goes.
    if ours "$UNSHARE_PID"; then
      echo "$SCRIPT: systemd did not power off within 20 s; killing the namespace" >&2
      kill -KILL "$UNSHARE_PID" 2>/dev/null
    fi
    wait "$UNSHARE_PID" 2>/dev/null || true
  fi
  # Depth first: systemd's cgroups, then the namespace's own, once the last process left them.
  local left
  for ((tries = 100; tries > 0; tries--)); do
    left=$(find "$CGROUP" -name cgroup.procs -exec cat {} + 2>/dev/null | wc -l)
    ((left == 0)) && break
    sleep 0.1
  done
  if [[ -d $CGROUP ]]; then
    find "$CGROUP" -depth -type d -exec rmdir {} + 2>/dev/null || true
  fi
  [[ -d $CGROUP ]] && echo "$SCRIPT: could not remove $CGROUP" >&2
  rm -rf "$WORK"
}

# What runs as PID 1 of the namespace: the overlay, the API file systems systemd expects of a
# container manager, then systemd itself on the overlay as its root.
cat >"$WORK/boot.sh" <<'EOF'
set -eu
work=$1
mount -t tmpfs -o mode=0755 tmpfs "$work/rw"
mkdir -p "$work/rw/upper" "$work/rw/work"
mount -t overlay overlay -o "lowerdir=/,upperdir=$work/rw/upper,workdir=$work/rw/work" "$work/root"
r=$work/root
mount -t proc proc "$r/proc"
mount -t sysfs -o ro sysfs "$r/sys"
mount -t cgroup2 cgroup2 "$r/sys/fs/cgroup"
mount -t tmpfs -o mode=0755 tmpfs "$r/dev"
for node in null zero full random urandom tty; do
  touch "$r/dev/$node"
  mount --bind "/dev/$node" "$r/dev/$node"
done
mkdir -p "$r/dev/pts" "$r/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts "$r/dev/pts"
ln -s pts/ptmx "$r/dev/ptmx"
mount -t tmpfs -o mode=1777 tmpfs "$r/dev/shm"
mount -t tmpfs -o mode=0755 tmpfs "$r/run"
mount -t tmpfs -o mode=1777 tmpfs "$r/tmp"
# The host's machine id is not this system's.
: >"$r/etc/machine-id"
cd "$r"
mkdir -p .oldroot
pivot_root . .oldroot
umount -l /.oldroot
exec env -i container=mcpgate-test TERM=dumb /lib/systemd/systemd --log-target=journal --log-level=info \
  --unit=basic.target
EOF
mkdir -p "$WORK/rw" "$WORK/root"

# inside CMD...: CMD in the namespace, as a process of its systemd's machine.
inside() { nsenter -t "$NS_PID" -m -u -i -n -p -C -r -w -- "$@"; }
# net CMD...: CMD on the host's file system, in the namespace's network (its 127.0.0.1).
net() { nsenter -t "$NS_PID" -n -- "$@"; }
show() { inside systemctl show -p "$1" --value mcpgate.service; }

step() { printf '\n== systemd.sh: %s\n' "$*"; }
step "systemd as PID 1 of private namespaces, on an overlay of /"
(echo $BASHPID >"$CGROUP/cgroup.procs" &&
  exec unshare --pid --mount --cgroup --net --uts --ipc --fork --kill-child --propagation private \
    bash "$WORK/boot.sh" "$WORK") >"$LOG_DIR/systemd.out" 2>"$LOG_DIR/systemd.err" &
UNSHARE_PID=$!
# unshare's child is PID 1 of the new namespace.
ns_pid() { NS_PID=$(awk '{print $1}' "/proc/$UNSHARE_PID/task/$UNSHARE_PID/children" 2>/dev/null); [[ -n $NS_PID ]]; }
wait_for 10 "the namespace's PID 1" ns_pid || fail "unshare did not start; see $LOG_DIR/systemd.err"
booted() { [[ $(inside systemctl is-system-running 2>/dev/null) =~ ^(running|degraded)$ ]]; }
wait_for 60 "systemd booting" booted || {
  tail -20 "$LOG_DIR/systemd.err" "$LOG_DIR/systemd.out" >&2
  fail "systemd did not boot in the namespace"
}
echo "systemd $(inside systemctl --version | awk 'NR==1 {print $2}') is PID 1 ($(inside systemctl is-system-running) after $((SECONDS - began)) s), host PID $NS_PID"
failed_units=$(inside systemctl --failed --plain --no-legend | awk '{print $1}' | paste -sd' ')
[[ -z $failed_units ]] || echo "  (units of the host's image that fail in a container, not mcpgate's: $failed_units)"
echo "  cgroup v2 controllers inside: $(inside cat /sys/fs/cgroup/cgroup.controllers || true)"
echo "  NOT SHOWN HERE: MemoryMax= and TasksMax= are not enforced in this namespace: this host keeps the"
echo "  memory and pids controllers in cgroup v1 (its /sys/fs/cgroup/memory, /pids), which systemd 252 does"
echo "  not use for a unit. The unit's limits are checked offline only (tests/service.rs)."

# ------------------------------------------------------------------- mcpgate, the fixture
step "installing into the overlay: scripts/install.sh --destdir /proc/$NS_PID/root"
R=/proc/$NS_PID/root
scripts/install.sh --destdir "$R" --binary "$binary" | sed 's/^/  /'
install -m 0755 "$ROOT/target/debug/mcp-fixture" "$R/usr/local/bin/mcp-fixture"
inside systemd-run --quiet --unit=fixture-web -p Type=exec /usr/local/bin/mcp-fixture --listen 127.0.0.1:9001 --name web
inside systemd-run --quiet --unit=fixture-extra -p Type=exec /usr/local/bin/mcp-fixture --listen 127.0.0.1:9002 --name extra
fixture_up() { net curl -fsS --max-time 5 "http://127.0.0.1:$1/stats" >/dev/null 2>&1; }
wait_for 20 "the fixtures listening" fixture_up 9001 || fail "fixture-web did not start"
wait_for 20 "the fixtures listening" fixture_up 9002 || fail "fixture-extra did not start"
stat_of() { net curl -fsS --max-time 10 "http://127.0.0.1:$1/stats" | python3 -c "import json,sys; print(json.load(sys.stdin)['$2'])"; }
write_config() {
  local extra=${1:-}
  cat >"$R/etc/mcpgate/mcpgate.json" <<EOF
{
  "listen": "127.0.0.1:8780",
  "state_file": "/var/lib/mcpgate/state.json",
  "mcpServers": {
    "web": { "url": "http://127.0.0.1:9001/mcp" },
    "local": { "command": "/usr/local/bin/mcp-fixture", "args": ["--stdio", "--name", "local"] }$extra
  }
}
EOF
}
write_config
URL=http://127.0.0.1:8780/mcp
smoke() { net python3 "$ROOT/scripts/board/smoke.py" "$@"; }

# ------------------------------------------------------------------------------ 1. start
step "1. start: systemctl start mcpgate"
t0=$(date +%s.%N)
inside systemctl start mcpgate.service || { inside journalctl -u mcpgate --no-pager | tail -20; fail "systemctl start"; }
t1=$(date +%s.%N)
state="$(show ActiveState)/$(show SubState)"
[[ $state == active/running ]] || fail "after systemctl start: $state"
[[ $(show Type) == notify ]] || fail "Type=$(show Type)"
[[ $(show WatchdogUSec) == 30s ]] || fail "WatchdogUSec=$(show WatchdogUSec), not 30s"
main_pid=$(show MainPID)
env_of=$(inside cat "/proc/$main_pid/environ" | tr '\0' '\n')
grep -qx 'WATCHDOG_USEC=30000000' <<<"$env_of" || fail "mcpgate has no WATCHDOG_USEC=30000000 in its environment"
check "systemctl start returned after READY=1 in $(python3 -c "print(round($t1 - $t0, 2))") s: ActiveState=active, SubState=running, Type=notify, WatchdogUSec=30s, WATCHDOG_USEC=30000000 in the process; StatusText=\"$(show StatusText)\""

# ----------------------------------------------------------------------------- 2. status
step "2. status: systemctl show -p StatusText follows the sessions"
smoke open "$URL" --count 3 --ids "$WORK/ids" | sed 's/^/  /' || fail "opening 3 sessions"
t0=$SECONDS
status_says() { [[ $(show StatusText) == "$1"* ]]; }
# One downstream session each with `web`: the stdio server's process starts when a session first
# needs it, not at initialize.
wait_for 3 "StatusText saying 3 sessions" status_says "3 session(s), 3 downstream session(s) live" ||
  fail "2 s after 3 sessions opened, StatusText says \"$(show StatusText)\""
check "within $((SECONDS - t0)) s of 3 sessions opening: StatusText=\"$(show StatusText)\""
inside systemctl status mcpgate --no-pager --lines=0 | grep -E 'Status:|Main PID' | sed 's/^/    /'

# ----------------------------------------------------------------------------- 3. reload
step "3. reload: systemctl reload mcpgate, with a good and with a broken configuration"
write_config ',
    "extra": { "url": "http://127.0.0.1:9002/mcp" }'
inside systemctl reload mcpgate.service || fail "systemctl reload of a good configuration failed"
listed() { smoke calls "$URL" --servers web,local,extra >/dev/null 2>&1; }
wait_for 10 "the reloaded configuration's server listed" listed || fail "after a good reload, extra__echo is not listed and called"
[[ $(show MainPID) == "$main_pid" ]] || fail "a reload changed the main process"
check "good configuration: systemctl reload exit 0, extra__echo listed and called, same process ($main_pid)"
echo '{ "listen": "127.0.0.1:8780", "mcpServers": { "web": { "url": "ftp://nowhere" } }' >"$R/etc/mcpgate/mcpgate.json"
code=0
inside systemctl reload mcpgate.service 2>"$LOG_DIR/reload.err" || code=$?
[[ $code != 0 ]] || fail "systemctl reload of a broken configuration exited 0"
smoke calls "$URL" --servers web,local,extra | sed 's/^/    /' || fail "after a refused reload, the old configuration does not serve"
[[ $(show MainPID) == "$main_pid" && $(show ActiveState) == active ]] || fail "a refused reload stopped or replaced mcpgate"
check "broken configuration: systemctl reload exit $code, the old configuration still serves, same process, active"
sed 's/^/    systemctl: /' "$LOG_DIR/reload.err" | head -1
inside journalctl -u mcpgate --no-pager -o cat | grep -- 'mcpgate.json: not valid' | tail -1 | sed 's/^/    journal: /' || true
write_config ',
    "extra": { "url": "http://127.0.0.1:9002/mcp" }'

# --------------------------------------------------------------------------- 4. watchdog
step "4. watchdog: kill -STOP mcpgate; systemd aborts and restarts it"
read -r kept <"$WORK/ids"
restarts=$(show NRestarts)
inside kill -STOP "$main_pid"
t0=$SECONDS
restarted() { [[ $(show NRestarts) -gt $restarts && $(show ActiveState) == active && $(show MainPID) != "$main_pid" ]]; }
wait_for 60 "the watchdog restarting mcpgate" restarted || fail "60 s after kill -STOP: NRestarts=$(show NRestarts), $(show ActiveState)"
result=$(inside journalctl -u mcpgate --no-pager -o cat | grep -m1 -i 'watchdog timeout' || true)
[[ -n $result ]] || fail "the restart was not the watchdog's (journal: no watchdog timeout)"
smoke call "$URL" --id "$kept" --tool web__echo | sed 's/^/    /' || fail "the session opened before the restart does not answer after it"
check "restarted $((SECONDS - t0)) s after kill -STOP (\"$result\"), NRestarts=$(show NRestarts), new MainPID $(show MainPID); a session of before answered from the state file"
main_pid=$(show MainPID)

# -------------------------------------------------------------------------- 5. sandbox
step "5. sandbox: the stdio server as the dynamic user"
smoke open "$URL" --count 1 | sed 's/^/  /'
smoke calls "$URL" --servers local | sed 's/^/    /' || fail "a stdio server's call under the sandbox"
smoke open "$URL" --count 1 >/dev/null
users=$(inside sh -c "for p in \$(cat /sys/fs/cgroup/system.slice/mcpgate.service/cgroup.procs); do ps -o user=,uid=,comm= -p \$p; done" | sort | uniq -c | sed 's/^ */    /')
echo "$users"
grep -q 'mcp-fixture' <<<"$users" || fail "no stdio child in the unit's cgroup"
if grep -E 'mcp-fixture|mcpgate' <<<"$users" | grep -qE ' root | 0 '; then fail "a process of the unit runs as root"; fi
check "the stdio server's children run as the unit's dynamic user, in its cgroup, and answer"

# --------------------------------------------------------------------------- 6. security
step "6. systemd-analyze security mcpgate (the live unit)"
score=$(inside systemd-analyze security mcpgate.service --no-pager | sed -n 's/.*Overall exposure level for mcpgate.service: \([0-9.]*\).*/\1/p')
[[ -n $score ]] || fail "systemd-analyze security printed no score"
python3 -c "import sys; sys.exit(not $score <= 1.1)" || fail "systemd-analyze security: $score, above 1.1"
check "systemd-analyze security mcpgate.service: $score (at most 1.1)"

# ------------------------------------------------------------------------------- 7. stop
step "7. stop: systemctl stop mcpgate"
inside systemctl stop mcpgate.service || fail "systemctl stop"
opened=$(stat_of 9001 initialize)
deleted=$(stat_of 9001 delete)
[[ $opened == "$deleted" ]] || fail "the fixture saw $opened downstream sessions opened and $deleted DELETEd"
procs=$(inside journalctl -u mcpgate --no-pager -o cat | grep -o 'processes spawned [0-9]*, reaped [0-9]*, live [0-9]*' | tail -1)
[[ $procs =~ spawned\ ([0-9]+),\ reaped\ ([0-9]+),\ live\ 0 && ${BASH_REMATCH[1]} == "${BASH_REMATCH[2]}" ]] ||
  fail "at stop mcpgate said: \"$procs\""
inside test ! -e /sys/fs/cgroup/system.slice/mcpgate.service || fail "the unit's cgroup is still there after stop"
check "systemctl stop: the fixture counts $deleted DELETEs for $opened downstream sessions (both runs, the watchdog's restart resumed the first one's); mcpgate said \"$procs\"; the unit's cgroup is gone"

step "poweroff"
inside systemctl poweroff --no-block
wait_for 30 "systemd powering off" ended "$UNSHARE_PID" || true
wait "$UNSHARE_PID" 2>/dev/null || true
NS_PID=
echo
echo "systemd.sh: $passed passed, 0 failed in $((SECONDS - began)) s"
