#!/usr/bin/env bash
# Where mcpgate's CPU goes, socket to socket: the profiling build (the release build with symbols,
# `cargo build --profile profiling`), mcp-fixture behind it, mcp-load with 16 clients calling
# `echo` (or --bytes N: `big`), and perf (Debian's linux-perf, installed when missing) sampling
# mcpgate's threads with call graphs. Prints the hottest symbols, self and with children, and
# writes the raw report to .bench/profile/. By hand, not in CI (it needs perf_event access).
#
#   scripts/profile.sh [--seconds S] [--clients N] [--bytes N] [--modern]
#
# --modern: 2026-07-28 clients, sessionless, before `mcp-fixture --modern` (one pool session for
# all of them, as one user's: `max_requests_per_session` 128, as in scripts/bench.sh).
set -euo pipefail

ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
SECONDS_RUN=10 CLIENTS=16 BYTES='' ERA=() EXTRA=''
while [ $# -gt 0 ]; do
    case $1 in
        --seconds) SECONDS_RUN=${2:?}; shift 2 ;;
        --clients) CLIENTS=${2:?}; shift 2 ;;
        --bytes) BYTES=${2:?}; shift 2 ;;
        --modern) ERA=(--modern) EXTRA=' "max_requests_per_session": 128,'; shift ;;
        *) echo "usage: scripts/profile.sh [--seconds S] [--clients N] [--bytes N] [--modern]" >&2; exit 2 ;;
    esac
done
OUT=$ROOT/.bench/profile
rm -rf "$OUT"; mkdir -p "$OUT"
cargo build --profile profiling --quiet --bin mcpgate --bin mcp-fixture --bin mcp-load
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/profiling

# start, wait_for, track, and every process stopped by PID on exit: scripts/lib.sh.
SCRIPT=profile.sh LOG_DIR=$OUT
# shellcheck source=lib.sh
. scripts/lib.sh
install_debian "$OUT/apt.log" perf=linux-perf || fail "perf is not installed (above)"

# serve NAME CMD...: starts CMD and waits (at most 10 s) for its `listening on ADDR`; sets ADDR,
# PID.
serve() {
    local name=$1
    start "$@"
    wait_for 10 "$name listening; see $OUT/$name.*" grep -q '^listening on ' "$OUT/$name.out" || exit 1
    ADDR=$(grep -om1 'listening on [^ ]*' "$OUT/$name.out" | sed 's/listening on //; s#^http://##; s#/mcp$##')
}

serve fixture "$BIN/mcp-fixture" "${ERA[@]}" --listen 127.0.0.1:0 --name a
FIXTURE=$ADDR
printf '{"listen": "127.0.0.1:0", "max_connections": 4096,%s "mcpServers": {"a": {"url": "http://%s/mcp", "prefix": ""}}}\n' \
    "$EXTRA" "$FIXTURE" >"$OUT/mcpgate.json"
serve mcpgate "$BIN/mcpgate" --config "$OUT/mcpgate.json"
GATE=$ADDR; GATE_PID=$PID
tool=echo args='{"text": "hello"}'
[ -n "$BYTES" ] && tool=big args="{\"bytes\": $BYTES}"
"$BIN/mcp-load" calls "${ERA[@]}" --url "http://$GATE/mcp" --tool "$tool" --args "$args" --clients "$CLIENTS" --seconds 1 >/dev/null
"$BIN/mcp-load" calls "${ERA[@]}" --url "http://$GATE/mcp" --tool "$tool" --args "$args" --clients "$CLIENTS" \
    --seconds "$SECONDS_RUN" >"$OUT/load.json" &
LOAD=$!; track "$LOAD"
sleep 0.5
timeout $((SECONDS_RUN + 30)) perf record -F 999 -g --call-graph dwarf,16384 -p "$GATE_PID" -o "$OUT/perf.data" \
    -- sleep $((SECONDS_RUN - 1)) 2>"$OUT/perf-record.log"
wait "$LOAD" || true
echo "load: $(cat "$OUT/load.json")"
timeout 600 perf report -i "$OUT/perf.data" --no-children --sort symbol --stdio --percent-limit 1 -g none \
    >"$OUT/self.txt" 2>/dev/null || true
timeout 600 perf report -i "$OUT/perf.data" --children --sort symbol --stdio --percent-limit 3 -g none \
    >"$OUT/children.txt" 2>/dev/null || true
echo "== self (the symbols that burn the CPU)"
grep -m40 -E '^ +[0-9]' "$OUT/self.txt"
echo "== with children (where the time is spent below)"
grep -m50 -E '^ +[0-9]' "$OUT/children.txt"
