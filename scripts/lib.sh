# shellcheck shell=bash
# The process handling the scripts share; sourced by scripts/demo.sh, bench.sh, observe.sh and
# interop.sh (and its parts in scripts/interop/):
#
#   start NAME CMD...         CMD in the background, its output in $LOG_DIR/NAME.out and .err;
#                             sets PID and adds it to PIDS; with LIFETIME set, under
#                             `timeout $LIFETIME` (PID is then timeout's, CMD its child)
#   track PID                 one more process to stop on exit
#   wait_for SECONDS WHAT CMD...
#                             runs CMD every 0.1 s until it succeeds; returns 1, saying that
#                             WHAT did not happen, after SECONDS (or as many tries)
#   ended PID                 whether PID, started by this shell, has ended (for wait_for)
#   stop PID [SECONDS]        SIGTERM, then SIGKILL (to its process group, if it leads one)
#                             if it still runs after SECONDS (10)
#   stop_all                  stops every PID in PIDS, newest first (mcpgate before the
#                             servers it closes sessions on); the EXIT trap
#   free_port                 a port on 127.0.0.1 that nothing listens on now
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
        sleep 0.1
    done
    echo "$SCRIPT: $what: not within $limit s" >&2
    return 1
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

# shellcheck disable=SC2317 # called by the trap
stop_all() {
    local rc=$? i
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
        stop "${PIDS[i]}"
    done
    if declare -F on_exit >/dev/null; then
        on_exit || true
    fi
    exit "$rc"
}

free_port() {
    local port tries
    for ((tries = 100; tries > 0; tries--)); do
        port=$((20000 + RANDOM % 40000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$port"
            return 0
        fi
    done
    fail "no free port on 127.0.0.1 in 100 tries"
}

trap stop_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
