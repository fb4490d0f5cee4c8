#!/usr/bin/env bash
# mcpgate's benchmark: overhead next to direct calls, footprint, churn,
# shutdown, and the same overhead and footprint through a peer gateway
# (the FastMCP proxy), all in one run on this machine.
#
#   scripts/bench.sh            the full run: prints the table and writes
#                               docs/BENCHMARKS.md and docs/churn.svg
#   scripts/bench.sh --smoke    a short run for CI: checks that every part
#                               works and that no session or thread leaks;
#                               it never fails on timing (machine noise)
#
# Everything listens on 127.0.0.1; every process started is stopped by its
# PID on exit. Raw results go to .bench/. The binaries are release builds in
# $CARGO_TARGET_DIR (or target/).
set -euo pipefail

ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
MODE=full
[ "${1:-}" = "--smoke" ] && MODE=smoke
OUT=$ROOT/.bench
rm -rf "$OUT/run"
mkdir -p "$OUT/run"
RESULTS=$OUT/run/results.jsonl
: > "$RESULTS"

if [ $MODE = full ]; then
    SECONDS_PER_POINT=5; ROUNDS=3; CLIENT_COUNTS="1 16 64"; SESSIONS_BIG=1000; CHURN=10000; PY_SECONDS=5
else
    SECONDS_PER_POINT=1; ROUNDS=1; CLIENT_COUNTS="1 16"; SESSIONS_BIG=200; CHURN=600; PY_SECONDS=1
fi

FASTMCP_VERSION=4.2.3
# Where cargo puts the binaries: $CARGO_TARGET_DIR (relative to where cargo
# runs: here) or target/.
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
[[ $TARGET_DIR == /* ]] || TARGET_DIR=$ROOT/$TARGET_DIR
BIN=$TARGET_DIR/release
# mcpgate runs with the allocator settings of its systemd unit (README:
# Running as a service): freed thread stacks are not cached and glibc uses
# two malloc arenas, which keeps RSS close to what is live.
export GLIBC_TUNABLES=glibc.pthread.stack_cache_size=0:glibc.malloc.arena_max=2

PIDS=()
cleanup() {
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
        kill "${PIDS[i]}" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT INT TERM

step() { printf '\n== %s\n' "$*" >&2; }
record() { echo "$1" >> "$RESULTS"; }

# Starts a command that prints `listening on ADDR` first; sets ADDR and PID.
start() {
    local log=$1; shift
    local fifo=$OUT/run/fifo.$$
    rm -f "$fifo"; mkfifo "$fifo"
    "$@" > "$fifo" 2> "$log" &
    PID=$!
    PIDS+=("$PID")
    exec 9< "$fifo"
    local line=""
    if ! IFS= read -r -t 30 line <&9; then
        echo "bench: $* printed nothing within 30 s; see $log" >&2
        exit 1
    fi
    # Keep draining its stdout so it never blocks.
    cat <&9 > /dev/null &
    PIDS+=("$!")
    exec 9<&-
    rm -f "$fifo"
    ADDR=${line#listening on }
    ADDR=${ADDR#http://}
    ADDR=${ADDR%/mcp}
}

# Waits until ADDR answers HTTP (a server may print its port before it listens).
wait_http() {
    for _ in $(seq 100); do
        curl -s -o /dev/null --max-time 1 "http://$1/" && return 0
        sleep 0.1
    done
    echo "bench: nothing answers on $1" >&2
    exit 1
}

stop() {
    local pid=$1
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    wait "$pid" 2>/dev/null || true
}

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
threads() { awk '/^Threads:/ {print $2}' "/proc/$1/status"; }
fixture_stat() { curl -fsS "http://$1/stats" | python3 -c "import json,sys; print(json.load(sys.stdin)['$2'])"; }
status_field() { curl -fsS "http://$1/status.json" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d$2)"; }

gate_config() {
    local path=$1 idle=$2; shift 2
    {
        printf '{"listen": "127.0.0.1:0", "calls_per_server": 8, "session_idle_timeout_secs": %s,\n' "$idle"
        printf ' "max_connections": 4096, "max_sessions": 4096, "keepalive_secs": 15,\n "mcpServers": {'
        local first=1 server
        for server in "$@"; do
            [ $first = 1 ] || printf ', '
            first=0
            printf '"%s": {"url": "http://%s/mcp", "prefix": ""}' "${server%%=*}" "${server#*=}"
        done
        printf '}}\n'
    } > "$path"
}

step "build (release)"
cargo build --release --quiet --bins

step "tools: Python SDK server and FastMCP proxy ($FASTMCP_VERSION)"
"$ROOT/scripts/interop.sh" --install-only > "$OUT/run/install.log" 2>&1 || {
    echo "bench: installing the interop tools failed; see $OUT/run/install.log" >&2
    exit 1
}
PY=$ROOT/.interop/venv/bin/python
FASTMCP_VENV=$OUT/venv-fastmcp
if ! "$FASTMCP_VENV/bin/python" -c "import fastmcp, sys; sys.exit(fastmcp.__version__ != '$FASTMCP_VERSION')" 2>/dev/null; then
    python3 -m venv "$FASTMCP_VENV"
    timeout 300 "$FASTMCP_VENV/bin/pip" install --quiet --disable-pip-version-check "fastmcp==$FASTMCP_VERSION"
fi

LOAD=$BIN/mcp-load

# ---------------------------------------------------------------- 1. overhead
step "1. overhead: tools/call direct and through mcpgate, interleaved"
start "$OUT/run/fixture-a.log" "$BIN/mcp-fixture" --name a
FIX_A=$ADDR; FIX_A_PID=$PID
gate_config "$OUT/run/overhead.json" 300 "a=$FIX_A"
start "$OUT/run/gate-overhead.log" "$BIN/mcpgate" --config "$OUT/run/overhead.json"
GATE=$ADDR; GATE_PID=$PID
start "$OUT/run/fastmcp.log" "$FASTMCP_VENV/bin/python" "$ROOT/scripts/bench/fastmcp_proxy.py" "http://$FIX_A/mcp"
PROXY=$ADDR; PROXY_PID=$PID
wait_http "$PROXY"
for round in $(seq "$ROUNDS"); do
    for clients in $CLIENT_COUNTS; do
        for target in direct mcpgate fastmcp; do
            case $target in
                direct) url=http://$FIX_A/mcp ;;
                mcpgate) url=http://$GATE/mcp ;;
                fastmcp) url=http://$PROXY/mcp
                    # The peer is slow: fewer clients than 64 would be all it can take.
                    [ "$clients" -gt 16 ] && continue ;;
            esac
            line=$("$LOAD" calls --url "$url" --tool echo --clients "$clients" --seconds "$SECONDS_PER_POINT")
            record "{\"part\":\"overhead\",\"server\":\"fixture\",\"target\":\"$target\",\"round\":$round,\"result\":$line}"
            echo "  round $round, $clients client(s), $target: $line" >&2
        done
    done
done

step "1b. overhead with a third-party server (the official Python SDK)"
start "$OUT/run/py-server.log" "$PY" "$ROOT/scripts/interop/py_server.py"
PYS=$ADDR
wait_http "$PYS"
gate_config "$OUT/run/overhead-py.json" 300 "py=$PYS"
start "$OUT/run/gate-py.log" "$BIN/mcpgate" --config "$OUT/run/overhead-py.json"
GATE_PY=$ADDR; GATE_PY_PID=$PID
for clients in 1 16; do
    for target in direct mcpgate; do
        url=http://$PYS/mcp; [ $target = mcpgate ] && url=http://$GATE_PY/mcp
        line=$("$LOAD" calls --url "$url" --tool echo --clients "$clients" --seconds "$PY_SECONDS")
        record "{\"part\":\"overhead\",\"server\":\"python-sdk\",\"target\":\"$target\",\"round\":1,\"result\":$line}"
        echo "  python-sdk, $clients client(s), $target: $line" >&2
    done
done
stop "$GATE_PY_PID"

# --------------------------------------------------------------- 2. footprint
step "2. footprint: at rest, and with 100 and $SESSIONS_BIG sessions x 2 downstream sessions with GET streams"
start "$OUT/run/fixture-b.log" "$BIN/mcp-fixture" --name b
FIX_B=$ADDR
gate_config "$OUT/run/footprint.json" 3600 "a=$FIX_A" "b=$FIX_B"
start "$OUT/run/gate-footprint.log" "$BIN/mcpgate" --config "$OUT/run/footprint.json"
GATE_FP=$ADDR; GATE_FP_PID=$PID
sleep 1
record "{\"part\":\"footprint\",\"target\":\"mcpgate\",\"sessions\":0,\"rss_kib\":$(rss_kib "$GATE_FP_PID"),\"threads\":$(threads "$GATE_FP_PID"),\"readers\":0}"
HOLD=$OUT/run/hold
# Sessions stay open (idle timeout of an hour) after the loader leaves:
# first 100, then enough more to make SESSIONS_BIG.
opened=0
for count in 100 "$SESSIONS_BIG"; do
    "$LOAD" sessions --url "http://$GATE_FP/mcp" --count $((count - opened)) --no-stream > "$OUT/run/sessions-$count.out"
    opened=$count
    sleep 2
    readers=$(status_field "$GATE_FP" "['threads']['readers']")
    record "{\"part\":\"footprint\",\"target\":\"mcpgate\",\"sessions\":$count,\"rss_kib\":$(rss_kib "$GATE_FP_PID"),\"threads\":$(threads "$GATE_FP_PID"),\"readers\":$readers}"
    echo "  $count sessions: rss $(rss_kib "$GATE_FP_PID") KiB, threads $(threads "$GATE_FP_PID"), readers $readers" >&2
done
stop "$GATE_FP_PID"

step "2b. footprint of the peer gateway (FastMCP proxy) at rest and with 100 sessions"
record "{\"part\":\"footprint\",\"target\":\"fastmcp\",\"sessions\":0,\"rss_kib\":$(rss_kib "$PROXY_PID"),\"threads\":$(threads "$PROXY_PID"),\"readers\":0}"
"$LOAD" sessions --url "http://$PROXY/mcp" --count 100 --no-stream > "$OUT/run/sessions-fastmcp.out"
sleep 2
record "{\"part\":\"footprint\",\"target\":\"fastmcp\",\"sessions\":100,\"rss_kib\":$(rss_kib "$PROXY_PID"),\"threads\":$(threads "$PROXY_PID"),\"readers\":0}"

# ------------------------------------------------------------------- 3. churn
step "3. churn: $CHURN cycles of open, call, close (half DELETE, half idle eviction)"
stop "$GATE_PID"
start "$OUT/run/fixture-c.log" "$BIN/mcp-fixture" --name c
FIX_C=$ADDR
start "$OUT/run/fixture-d.log" "$BIN/mcp-fixture" --name d
FIX_D=$ADDR
gate_config "$OUT/run/churn.json" 1 "c=$FIX_C" "d=$FIX_D"
start "$OUT/run/gate-churn.log" "$BIN/mcpgate" --config "$OUT/run/churn.json"
GATE_CH=$ADDR; GATE_CH_PID=$PID
sleep 0.5
BASE_THREADS=$(threads "$GATE_CH_PID")
line=$("$LOAD" churn --url "http://$GATE_CH/mcp" --tool echo --cycles "$CHURN" --sample-pid "$GATE_CH_PID" --samples "$OUT/run/churn.csv")
for _ in $(seq 100); do
    [ "$(status_field "$GATE_CH" "['downstream']['live']")" = 0 ] && break
    sleep 0.1
done
sleep 0.5
opened=$(status_field "$GATE_CH" "['downstream']['opened']")
closed=$(status_field "$GATE_CH" "['downstream']['closed']")
init_c=$(fixture_stat "$FIX_C" initialize); del_c=$(fixture_stat "$FIX_C" delete)
init_d=$(fixture_stat "$FIX_D" initialize); del_d=$(fixture_stat "$FIX_D" delete)
record "{\"part\":\"churn\",\"result\":$line,\"base_threads\":$BASE_THREADS,\"end_threads\":$(threads "$GATE_CH_PID"),\"end_rss_kib\":$(rss_kib "$GATE_CH_PID"),\"opened\":$opened,\"closed\":$closed,\"initialize\":$((init_c + init_d)),\"delete\":$((del_c + del_d))}"
echo "  $line; opened $opened, closed $closed; at the servers: $((init_c + init_d)) initialize, $((del_c + del_d)) DELETE" >&2
cp "$OUT/run/churn.csv" "$OUT/churn.csv"
stop "$GATE_CH_PID"

# ---------------------------------------------------------------- 4. shutdown
step "4. shutdown: SIGTERM with $SESSIONS_BIG live sessions"
start "$OUT/run/fixture-e.log" "$BIN/mcp-fixture" --name e
FIX_E=$ADDR
start "$OUT/run/fixture-f.log" "$BIN/mcp-fixture" --name f
FIX_F=$ADDR
gate_config "$OUT/run/shutdown.json" 3600 "e=$FIX_E" "f=$FIX_F"
start "$OUT/run/gate-shutdown.log" "$BIN/mcpgate" --config "$OUT/run/shutdown.json"
GATE_SD=$ADDR; GATE_SD_PID=$PID
rm -f "$HOLD"
"$LOAD" sessions --url "http://$GATE_SD/mcp" --count "$SESSIONS_BIG" --hold-file "$HOLD" > "$OUT/run/sessions-shutdown.out" &
LOADER=$!; PIDS+=("$LOADER")
for _ in $(seq 1200); do grep -q ready "$OUT/run/sessions-shutdown.out" 2>/dev/null && break; sleep 0.1; done
sleep 1
t0=$(date +%s.%N)
kill -TERM "$GATE_SD_PID"
wait "$GATE_SD_PID" 2>/dev/null && code=0 || code=$?
t1=$(date +%s.%N)
init=$(( $(fixture_stat "$FIX_E" initialize) + $(fixture_stat "$FIX_F" initialize) ))
dels=$(( $(fixture_stat "$FIX_E" delete) + $(fixture_stat "$FIX_F" delete) ))
record "{\"part\":\"shutdown\",\"sessions\":$SESSIONS_BIG,\"seconds\":$(python3 -c "print(round($t1 - $t0, 3))"),\"exit\":$code,\"initialize\":$init,\"delete\":$dels}"
echo "  exit $code after $(python3 -c "print(round($t1 - $t0, 3))") s; $dels DELETEs for $init downstream sessions" >&2
touch "$HOLD"
wait "$LOADER" 2>/dev/null || true

# ------------------------------------------------------------------ report
step "report"
python3 "$ROOT/scripts/bench/report.py" "$RESULTS" "$OUT/churn.csv" "$MODE" \
    --versions "mcpgate $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown), fastmcp $FASTMCP_VERSION, mcp (Python SDK) 2.3.0" \
    --command "scripts/bench.sh${1:+ $1}"
