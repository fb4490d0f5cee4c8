# shellcheck shell=bash
# The process handling the scripts share; sourced by scripts/demo.sh, bench.sh, observe.sh,
# profile.sh, scale.sh and interop.sh (and its parts in scripts/interop/):
#
#   start NAME CMD...         CMD in the background, its output in $LOG_DIR/NAME.out and .err;
#                             sets PID and adds it to PIDS; with LIFETIME set, under
#                             `timeout $LIFETIME` (PID is then timeout's, CMD its child)
#   track PID                 one more process to stop on exit
#   wait_for SECONDS WHAT CMD...
#                             runs CMD every 0.1 s (WAIT_EVERY) until it succeeds; returns 1,
#                             saying that WHAT did not happen, after SECONDS (or 10 tries a
#                             second)
#   wait_port NAME PID FILE   prints the port of the first `listening on ...127.0.0.1:PORT`
#                             line of FILE, written by NAME (PID); returns 1 if PID ends first
#                             or after 30 s
#   ended PID                 whether PID, started by this shell, has ended (for wait_for)
#   stop PID [SECONDS]        SIGTERM, then SIGKILL (to its process group, if it leads one)
#                             if it still runs after SECONDS (10)
#   stop_started              stops every PID in PIDS, newest first (mcpgate before the
#                             servers it closes sessions on), and forgets them
#   stop_all                  stop_started, then on_exit; the EXIT trap
#   free_port                 a port on 127.0.0.1 that nothing listens on now
#   free_ports N              N distinct such ports
#   fail MESSAGE...           says so on stderr and exits 1
#
# Sourcing it sets the traps: on EXIT stop_all, and INT and TERM exit (130, 143) through it.
# A script that must do more on exit (remove its files) defines on_exit, which stop_all calls
# once the processes are stopped. Only processes this shell started are stopped, by their PID:
# one that has ended and whose PID was given to another process since is left alone.

SCRIPT=${SCRIPT:-${0##*/}}
LOG_DIR=${LOG_DIR:-${TMPDIR:-/tmp}}
PIDS=()
PID=

fail() {
    printf '%s: FAILED: %s\n' "$SCRIPT" "$*" >&2
    exit 1
}

start() {
    local name=$1
    shift
    if [[ -n ${LIFETIME:-} ]]; then
        timeout "$LIFETIME" "$@" >"$LOG_DIR/$name.out" 2>"$LOG_DIR/$name.err" &
    else
        "$@" >"$LOG_DIR/$name.out" 2>"$LOG_DIR/$name.err" &
    fi
    PID=$!
    PIDS+=("$PID")
}

track() {
    PIDS+=("$1")
}

wait_for() {
    local limit=$1 what=$2 deadline tries
    shift 2
    deadline=$((SECONDS + limit))
    for ((tries = limit * 10; tries > 0; tries--)); do
        "$@" && return 0
        ((SECONDS < deadline)) || break
        sleep "${WAIT_EVERY:-0.1}"
    done
    echo "$SCRIPT: $what: not within $limit s" >&2
    return 1
}

LISTENING='listening on [^ ]*127\.0\.0\.1:[0-9]+'

# announced FILE PID: FILE has a `listening on` line, or PID ended (and never will write one).
# shellcheck disable=SC2317 # called through wait_for
announced() { grep -qE "$LISTENING" "$1" 2>/dev/null || ended "$2"; }

wait_port() {
    local name=$1 pid=$2 file=$3 line
    wait_for 30 "$name announcing a port; see $LOG_DIR/$name.*" announced "$file" "$pid" || return 1
    line=$(grep -m1 -oE "$LISTENING" "$file" 2>/dev/null || true)
    if [[ -z $line ]]; then
        echo "$SCRIPT: $name exited before it listened; see $LOG_DIR/$name.err" >&2
        tail -5 "$LOG_DIR/$name.err" >&2 || true
        return 1
    fi
    echo "${line##*:}"
}

# ours PID: PID is still there, started by this script (or by the subshell calling).
ours() {
    local ppid
    ppid=$(ps -o ppid= -p "$1" 2>/dev/null) || return 1
    ppid=${ppid//[[:space:]]/}
    [[ $ppid == "$$" || $ppid == "$BASHPID" ]]
}

ended() {
    ! ours "$1"
}

stop() {
    local pid=$1 limit=${2:-10} tries
    if ours "$pid"; then
        kill -TERM "$pid" 2>/dev/null || true
        for ((tries = limit * 10; tries > 0; tries--)); do
            ours "$pid" || break
            sleep 0.1
        done
        if ours "$pid"; then
            echo "$SCRIPT: PID $pid did not stop on SIGTERM within $limit s; killing it" >&2
            # `timeout` (LIFETIME) leads a process group of its own: the command goes with it.
            kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
    wait "$pid" 2>/dev/null || true
}

stop_started() {
    local i
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
        stop "${PIDS[i]}"
    done
    PIDS=()
}

# shellcheck disable=SC2317 # called by the trap
stop_all() {
    local rc=$?
    stop_started
    if declare -F on_exit >/dev/null; then
        on_exit || true
    fi
    exit "$rc"
}

free_port() {
    free_ports 1
}

free_ports() {
    local count=$1 ports=() port tries
    for ((tries = 100 * count; tries > 0 && ${#ports[@]} < count; tries--)); do
        port=$((20000 + RANDOM % 40000))
        if [[ " ${ports[*]} " != *" $port "* ]] && ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            ports+=("$port")
        fi
    done
    ((${#ports[@]} == count)) || fail "not $count free ports on 127.0.0.1 in $((100 * count)) tries"
    echo "${ports[*]}"
}

trap stop_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
