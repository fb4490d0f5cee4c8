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
#   wait_port NAME PID FILE...
#                             prints the port of the first `listening on ...127.0.0.1:PORT`
#                             line of the first FILE that has one, written by NAME (PID);
#                             returns 1 if PID ends first or after 30 s
#   serve NAME CMD...         start NAME CMD..., then wait_port on its .out and .err: sets PID
#                             and ADDR (127.0.0.1:PORT); returns 1, having stopped it, when it
#                             exits or stays silent instead
#   ended PID                 whether PID, started by this shell, has ended (for wait_for)
#   stop PID [SECONDS]        SIGTERM, then SIGKILL (to its process group, if it leads one)
#                             if it still runs after SECONDS (10)
#   stop_started              stops every PID in PIDS, newest first (mcpgate before the
#                             servers it closes sessions on), and forgets them
#   stop_all                  stop_started, then on_exit; the EXIT trap
#   free_port                 a port on 127.0.0.1 that nothing listens on now
#   free_ports N              N distinct such ports
#   port_holder PORT          whether something listens on PORT (TCP, any local address):
#                             prints which process (`pid N: its command line`, from /proc),
#                             returns 1 if nothing does
#   fail MESSAGE...           says so on stderr and exits 1
#   retry TRIES CMD...        CMD, and again 10 s after it failed, TRIES times at most: an
#                             install's download that a registry's transient error broke
#   install_venv DIR PINS     a Python venv in DIR with exactly the packages of PINS (a pip
#                             freeze file), made anew unless DIR/.pins says it was made from
#                             the same PINS by the same python3 on this platform
#   install_npm SRC DIR       `npm ci` of SRC/package.json and SRC/package-lock.json into DIR,
#                             done anew unless DIR/.pins says it was done from the same two
#                             files by the same node and npm on this platform
#   install_debian LOG CMD=PKG...
#                             installs Debian's package PKG for each command CMD not on PATH
#                             (apt_install), and disables the services they bring: only their
#                             binaries are used
#   apt_install LOG PKG[>=VERSION]...
#                             installs each Debian package not installed (or older than
#                             VERSION), as root, apt's output in LOG: apt_update, then the
#                             install whenever apt has every package (at VERSION or later),
#                             even if an index failed; otherwise fails, naming each package
#                             apt cannot install, why, the indexes that failed, and what to do
#   apt_update LOG            apt-get update of this machine's own architecture's indexes
#                             (the scripts install nothing else, so a foreign one out of step
#                             with its mirror cannot stop them), tried again after each wait
#                             of APT_UPDATE_WAITS (seconds; "10 30 90"); returns 1, having
#                             said which indexes failed, if the last try failed
#
# Sourcing it sets the traps: on EXIT stop_all, and INT and TERM exit (130, 143) through it.
# A script that must do more on exit (remove its files) defines on_exit, which stop_all calls
# once the processes are stopped, with the exit code in EXIT_CODE; one that must do something
# while they run (stop one of them first, and read what the others counted) defines
# before_stop, which stop_all calls first. Only processes this shell started are stopped, by
# their PID: one that has ended and whose PID was given to another process since is left alone.

SCRIPT=${SCRIPT:-${0##*/}}
LOG_DIR=${LOG_DIR:-${TMPDIR:-/tmp}}
PIDS=()
PID=
ADDR=

fail() {
    printf '%s: FAILED: %s\n' "$SCRIPT" "$*" >&2
    exit 1
}

start() {
    local name=$1
    shift
    # Emptied here, before the fork: the `>` below runs in the child, later,
    # and until it does a name started before (a restart) still shows its
    # old `listening on` line, which wait_port would take for the new one.
    : >"$LOG_DIR/$name.out"
    : >"$LOG_DIR/$name.err"
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

# announced PID FILE...: a FILE has a `listening on` line, or PID ended (and never will write one).
# shellcheck disable=SC2317 # called through wait_for
announced() { grep -qsE "$LISTENING" "${@:2}" || ended "$1"; }

wait_port() {
    local name=$1 pid=$2 file line=
    shift 2
    wait_for 30 "$name announcing a port; see $LOG_DIR/$name.*" announced "$pid" "$@" || return 1
    for file in "$@"; do
        line=$(grep -m1 -oE "$LISTENING" "$file" 2>/dev/null || true)
        [[ -n $line ]] && break
    done
    if [[ -z $line ]]; then
        echo "$SCRIPT: $name exited before it listened; see $LOG_DIR/$name.err" >&2
        tail -5 "$LOG_DIR/$name.err" >&2 || true
        return 1
    fi
    echo "${line##*:}"
}

serve() {
    local name=$1 port
    start "$@"
    port=$(wait_port "$name" "$PID" "$LOG_DIR/$name.out" "$LOG_DIR/$name.err") || { stop "$PID"; return 1; }
    # shellcheck disable=SC2034 # read by the scripts that source this
    ADDR=127.0.0.1:$port
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
    # shellcheck disable=SC2034 # read by on_exit, in the scripts that source this
    EXIT_CODE=$rc
    if declare -F before_stop >/dev/null; then
        before_stop || true
    fi
    stop_started
    if declare -F on_exit >/dev/null; then
        on_exit || true
    fi
    exit "$rc"
}

free_port() {
    free_ports 1
}

# Ports are drawn below the kernel's ephemeral range (32768 and up here):
# a port in it can be taken, between this check and the bind, by any
# outgoing connection on the host, which a busy build makes by the
# thousand (scale.sh once failed so: "Address already in use").
free_ports() {
    local count=$1 ports=() port tries low=32768
    read -r low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
    ((low > 12000)) || low=32768
    for ((tries = 100 * count; tries > 0 && ${#ports[@]} < count; tries--)); do
        port=$((10000 + RANDOM % (low - 10000)))
        if [[ " ${ports[*]} " != *" $port "* ]] && ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            ports+=("$port")
        fi
    done
    ((${#ports[@]} == count)) || fail "not $count free ports on 127.0.0.1 in $((100 * count)) tries"
    echo "${ports[*]}"
}

port_holder() {
    local hex inode socket pid
    hex=$(printf '%04X' "$1")
    # /proc/net/tcp{,6}: local address HEXIP:HEXPORT in column 2, state 0A is LISTEN, inode in 10.
    inode=$(awk -v port=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == port {print $10; exit}' \
        /proc/net/tcp /proc/net/tcp6 2>/dev/null)
    [[ -n $inode ]] || return 1
    socket=$(find /proc/[0-9]*/fd -lname "socket:\[$inode\]" -print -quit 2>/dev/null)
    pid=${socket#/proc/}
    pid=${pid%%/*}
    if [[ -n $pid ]]; then
        echo "pid $pid: $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-200 | sed 's/ *$//')"
    else
        echo "a process not visible from here (socket inode $inode; as root, ss -ltnp 'sport = :$1' may name it)"
    fi
}

# fingerprint FILE... -- WORD...: one hash of the files' contents and the words: what an install's
# outcome depends on (its inputs, the versions of the tools that do it, the platform).
fingerprint() {
    local inputs=() words=()
    while (($#)) && [[ $1 != -- ]]; do
        inputs+=("$1")
        shift
    done
    (($#)) && shift
    words=("$@")
    { cat "${inputs[@]}" && printf '%s\n' "${words[@]}" "$(uname -sm)"; } | sha256sum | cut -d' ' -f1
}

# fresh DIR WANT: DIR was installed from inputs whose fingerprint is WANT.
fresh() {
    [[ -f $1/.pins && $(cat "$1/.pins") == "$2" ]]
}

retry() {
    local tries=$1 try
    shift
    for ((try = 1; ; try++)); do
        "$@" && return 0
        ((try < tries)) || return 1
        echo "$SCRIPT: try $try of $tries failed: ${*:1:3} ...; again in 10 s" >&2
        sleep 10
    done
}

install_venv() {
    local venv=$1 pins=$2 want
    want=$(fingerprint "$pins" -- "$(python3 --version 2>&1)")
    if fresh "$venv" "$want" && timeout 60 "$venv/bin/python" -c 'import sys' 2>/dev/null; then
        echo "python: ${venv##*/} has ${pins##*/} (unchanged)"
        return 0
    fi
    timeout 60 python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' ||
        fail "python3 >= 3.10 is needed for ${pins##*/}"
    echo "python: installing ${pins##*/} into $venv"
    rm -rf "$venv"
    timeout 120 python3 -m venv "$venv" || return 1
    retry 3 timeout 600 "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
        --no-deps -r "$pins" || return 1
    # --no-deps installs the pins and nothing else: pip check says if they are not a whole set.
    timeout 120 "$venv/bin/python" -m pip check --disable-pip-version-check ||
        fail "${pins##*/} misses a dependency (above): pin it there"
    echo "$want" >"$venv/.pins"
}

# `npm ci` installs exactly what the lock names and never rewrites it, so a package the registry
# gains later (an optional dependency of a locked version, say) changes nothing: locked versions
# are immutable, and a complete lock is a closed set of them. It fails, saying so, when
# package.json and the lock disagree.
install_npm() {
    local src=$1 dir=$2 want
    want=$(fingerprint "$src/package.json" "$src/package-lock.json" -- "$(node --version)" "$(npm --version)")
    if fresh "$dir" "$want" && [[ -d $dir/node_modules ]]; then
        echo "npm: ${dir##*/} has ${src#"${ROOT:-}"/}'s lock (unchanged)"
        return 0
    fi
    echo "npm: npm ci of ${src#"${ROOT:-}"/} into $dir"
    rm -rf "$dir"
    mkdir -p "$dir"
    cp "$src/package.json" "$src/package-lock.json" "$dir/"
    (cd "$dir" && retry 3 timeout 600 npm ci --no-audit --no-fund --loglevel=error) || return 1
    echo "$want" >"$dir/.pins"
}

install_debian() {
    local log=$1 missing=() commands=() pair command
    shift
    for pair in "$@"; do
        command -v "${pair%%=*}" >/dev/null || { missing+=("${pair#*=}"); commands+=("${pair%%=*}"); }
    done
    ((${#missing[@]})) || return 0
    apt_install "$log" "${missing[@]}" || return 1
    if command -v systemctl >/dev/null; then
        for command in "${commands[@]}"; do
            timeout 20 systemctl disable --now "$command" >/dev/null 2>&1 || true
        done
    fi
}

# Only this machine's architecture: every package the scripts install is native (or `all`), and
# the ARM builds need no foreign one (scripts/cross.sh builds their standard library from
# source). List-Cleanup=0 leaves the lists of other architectures as they were.
APT_NATIVE=(-o "APT::Architectures=$(dpkg --print-architecture 2>/dev/null || echo amd64)" -o APT::Get::List-Cleanup=0)

# apt_needed PKG[>=VERSION]...: those not installed, or installed older than VERSION.
apt_needed() {
    local spec name min have
    for spec in "$@"; do
        name=${spec%%>=*} min=
        [[ $spec == *'>='* ]] && min=${spec#*>=}
        have=$({ dpkg-query -W -f='${Status} ${Version}\n' "$name" 2>/dev/null || true; } |
            awk '$3 == "installed" {print $4}')
        if [[ -z $have ]] || { [[ -n $min ]] && ! dpkg --compare-versions "$have" ge "$min"; }; then
            echo "$spec"
        fi
    done
}

# apt_unavailable PKG[>=VERSION]...: a line for each that apt cannot install now, and why.
apt_unavailable() {
    local spec name min candidate out
    for spec in "$@"; do
        name=${spec%%>=*} min=
        [[ $spec == *'>='* ]] && min=${spec#*>=}
        candidate=$({ apt-cache policy "${APT_NATIVE[@]}" "$name" 2>/dev/null || true; } | awk '/Candidate:/ {print $2}')
        if [[ -z $candidate || $candidate == "(none)" ]]; then
            echo "$name: in no index apt has"
        elif [[ -n $min ]] && ! dpkg --compare-versions "$candidate" ge "$min"; then
            echo "$name: $min or later is needed, the indexes apt has offer $candidate"
        elif ! out=$(apt-get install --simulate -q --no-install-recommends "${APT_NATIVE[@]}" "$name" 2>&1); then
            echo "$name: $(grep -E '^ |^E:' <<<"$out" | grep -v '^E: Unable to correct problems' | paste -sd' ' | tr -s ' ')"
        fi
    done
}

# apt_failed_indexes LOG: the indexes the last apt-get update in LOG could not fetch.
apt_failed_indexes() {
    sed -n 's/^[EW]: Failed to fetch \([^ ]*\) *\(.*\)/\1 (\2)/p' "$1" | sort -u
}

apt_update() {
    local log=$1 wait try=0 out
    out=$(mktemp)
    for wait in ${APT_UPDATE_WAITS:-10 30 90} last; do
        try=$((try + 1))
        if timeout 600 apt-get update -q "${APT_NATIVE[@]}" >"$out" 2>&1; then
            cat "$out" >>"$log"
            rm -f "$out"
            return 0
        fi
        cat "$out" >>"$log"
        [[ $wait == last ]] && break
        echo "apt-get update failed (try $try; again in $wait s): $(apt_failed_indexes "$out" | head -1)" >&2
        sleep "$wait"
    done
    echo "apt-get update failed $try times; the indexes it could not fetch:" >&2
    { apt_failed_indexes "$out" | sed 's/^/  /'; grep '^E:' "$out" | grep -v 'Failed to fetch' | sed 's/^/  /'; } >&2
    rm -f "$out"
    return 1
}

apt_install() {
    local log=$1 needed=() packages=() unavailable=() failed=
    shift
    mapfile -t needed < <(apt_needed "$@")
    ((${#needed[@]})) || return 0
    packages=("${needed[@]%%>=*}")
    if [[ $(id -u) != 0 ]]; then
        echo "error: ${needed[*]} missing; install them (apt-get install ${packages[*]}) or run as root" >&2
        return 1
    fi
    echo "installing ${needed[*]} from Debian's packages (apt's output: $log)"
    export DEBIAN_FRONTEND=noninteractive
    : >"$log"
    apt_update "$log" || failed=yes
    mapfile -t unavailable < <(apt_unavailable "${needed[@]}")
    if ((${#unavailable[@]})); then
        {
            echo "error: apt cannot install what this needs:"
            printf '  %s\n' "${unavailable[@]}"
            if [[ -n $failed ]]; then
                echo "  apt-get update could not fetch (above): a mirror out of step (\"Mirror sync in progress?\") or out of reach."
                echo "  What to do: run this again once the mirror has caught up (the failing index says when its"
                echo "  Release file was made), or point /etc/apt/sources.list.d at a mirror that is in step, or"
                echo "  install the packages yourself: apt-get install ${packages[*]}"
            else
                echo "  What to do: these indexes do not have it (apt-cache policy ${packages[0]} shows what they offer):"
                echo "  add the suite that does (bookworm-security, bookworm-updates) to /etc/apt/sources.list.d"
            fi
        } >&2
        return 1
    fi
    [[ -n $failed ]] && echo "every package needed is in the indexes that did download: installing them"
    timeout 1800 apt-get install -y -q --no-install-recommends "${APT_NATIVE[@]}" "${packages[@]}" >>"$log" 2>&1 || {
        tail -20 "$log" >&2
        echo "error: apt-get install ${packages[*]} failed (above; all of apt's output in $log)" >&2
        return 1
    }
}

trap stop_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# in_turn ROUND WORD...: the words in their order in odd rounds, and the other way round in even
# ones: with two of them measured one after the other, a host growing slower or faster over the
# pair favours each in turn.
in_turn() {
    local round=$1; shift
    if [ $((round % 2)) -eq 1 ]; then echo "$@"; else printf '%s\n' "$@" | tac | xargs; fi
}
