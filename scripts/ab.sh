#!/usr/bin/env bash
# A same-run A/B of scripts/bench.sh's section 1 (tools/call through
# mcpgate next to direct calls), for two builds of mcpgate: one fixture
# server behind both, and rounds that interleave direct, the bare relay
# (`mcp-relay`, section 1d: the floor issue 43 measures against), A and B
# at 1, 16 and 64 clients, so that what the host does to one round it does
# to all four. Prints each point's median over the rounds, B/A, and A and B
# over the relay.
#
#   scripts/ab.sh A_MCPGATE B_MCPGATE [ROUNDS [SECONDS]]
#
# AB_ERA=modern runs section 1c's path instead: 2026-07-28 clients,
# sessionless, before `mcp-fixture --modern` (a pool session per token).
#
# AB_BYTES=N calls `big` for a result of N bytes instead of `echo` (about
# 100 B): the large-answer points of section 1d. Each point also records
# the CPU the relay, A and B spent (from /proc/PID/stat), printed per call.
#
# AB_LANES=N gives both builds `calls_per_server` N (64, the default, if
# unset). The relay bounds nothing: at 64 clients over 8 lanes (the
# default until issue 43), 56 calls waited their turn in mcpgate, and that
# queue was most of its p99 there.
#
# AB_CLIENTS="N ..." measures only those client counts (1, 16 and 64 if
# unset): more rounds of one point in the same time.
#
# The fixture and the load generator are this checkout's release builds
# (`cargo build --release -p mcp-fixture -p mcp-load`, which builds mcp-relay too). Everything listens
# on 127.0.0.1; every process started is stopped by its PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
SCRIPT=ab.sh
# shellcheck source=lib.sh
. scripts/lib.sh

[ $# -ge 2 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
A=$(realpath "$1") B=$(realpath "$2") ROUNDS=${3:-5} SECS=${4:-3}
BIN=${CARGO_TARGET_DIR:-target}/release
for bin in "$A" "$B" "$BIN/mcp-fixture" "$BIN/mcp-load" "$BIN/mcp-relay"; do
    [ -x "$bin" ] || fail "$bin is not there: build it first (see the top of $0)"
done
OUT=.bench/ab
mkdir -p "$OUT"
LOG_DIR=$OUT
RESULTS=$OUT/results.jsonl
: > "$RESULTS"
trap stop_all EXIT

ERA=${AB_ERA:-session}
LANES=${AB_LANES:-64}
BYTES=${AB_BYTES:-}
TOOL=echo ARGS='{"text": "hello"}'
if [ -n "$BYTES" ]; then
    [[ $BYTES =~ ^[0-9]+$ ]] || fail "AB_BYTES=$BYTES: give a number of bytes"
    TOOL=big ARGS="{\"bytes\": $BYTES}"
fi
[[ $LANES =~ ^[0-9]+$ ]] || fail "AB_LANES=$LANES: give a number of lanes (calls_per_server)"
case $ERA in
    session) FIXTURE_ARGS=() LOAD_ARGS=() EXTRA='' ;;
    # All clients share one token, so one pool session: let it take 64 calls at once.
    modern) FIXTURE_ARGS=(--modern) LOAD_ARGS=(--modern) EXTRA=' "max_requests_per_session": 128,' ;;
    *) fail "AB_ERA=$ERA: give session (the default) or modern" ;;
esac
serve fixture "$BIN/mcp-fixture" "${FIXTURE_ARGS[@]}" --name a
FIX=$ADDR
serve relay "$BIN/mcp-relay" --listen 127.0.0.1:0 --to "http://$FIX/mcp"
RELAY=$ADDR; RELAY_PID=$PID
config() {
    printf '{"listen": "127.0.0.1:0", "calls_per_server": %s, "session_idle_timeout_secs": 300,
 "max_connections": 4096, "max_sessions": 4096, "keepalive_secs": 15,%s
 "mcpServers": {"a": {"url": "http://%s/mcp", "prefix": ""}}}\n' "$LANES" "$EXTRA" "$FIX" > "$OUT/$1.json"
}
config a
config b
serve gate-a "$A" --config "$OUT/a.json"
GATE_A=$ADDR; GATE_A_PID=$PID
serve gate-b "$B" --config "$OUT/b.json"
GATE_B=$ADDR; GATE_B_PID=$PID
ticks() { if [ -n "$1" ]; then awk '{print $14 + $15}' "/proc/$1/stat"; else echo 0; fi; }

for round in $(seq "$ROUNDS"); do
    for clients in ${AB_CLIENTS:-1 16 64}; do
        for target in $(in_turn "$round" direct relay a b); do
            case $target in
                direct) url=http://$FIX/mcp pid= ;;
                relay) url=http://$RELAY/mcp pid=$RELAY_PID ;;
                a) url=http://$GATE_A/mcp pid=$GATE_A_PID ;;
                b) url=http://$GATE_B/mcp pid=$GATE_B_PID ;;
            esac
            before=$(ticks "$pid")
            line=$("$BIN/mcp-load" calls "${LOAD_ARGS[@]}" --url "$url" --tool "$TOOL" --args "$ARGS" --clients "$clients" --seconds "$SECS")
            after=$(ticks "$pid")
            echo "{\"era\":\"$ERA\",\"lanes\":$LANES,\"bytes\":\"${BYTES:-echo}\",\"round\":$round,\"clients\":$clients,\"target\":\"$target\",\"ticks\":$((after - before)),\"result\":$line}" >> "$RESULTS"
            echo "  round $round, $clients client(s), $target: $line" >&2
        done
    done
done

python3 - "$RESULTS" "$(getconf CLK_TCK)" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
tck = int(sys.argv[2])
def med(clients, target, key):
    return statistics.median(r["result"][key] for r in rows if r["clients"] == clients and r["target"] == target)
def cpu(clients, target):
    # Ticks and calls summed over the rounds, as scripts/bench.sh's table does.
    mine = [r for r in rows if r["clients"] == clients and r["target"] == target]
    calls = sum(r["result"]["calls"] for r in mine)
    return sum(r["ticks"] for r in mine) / tck * 1e6 / max(calls, 1)
print(f"era: {rows[0].get('era', 'session')}, calls_per_server: {rows[0].get('lanes', 64)}, result: {rows[0].get('bytes', 'echo')}")
print("| clients | direct calls/s | relay calls/s | A calls/s | B calls/s | B/A | A, B / relay "
      "| relay p99 ms | A p99 ms | B p99 ms | B/A | A, B / relay |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
counts = sorted({r["clients"] for r in rows})
for c in counts:
    d, r, a, b = (med(c, t, "throughput") for t in ("direct", "relay", "a", "b"))
    pr, pa, pb = (med(c, t, "p99_us") / 1000 for t in ("relay", "a", "b"))
    print(f"| {c} | {d:,.0f} | {r:,.0f} | {a:,.0f} | {b:,.0f} | {b / a:.2f} | {a / r:.2f}, {b / r:.2f} "
          f"| {pr:.2f} | {pa:.2f} | {pb:.2f} | {pb / pa:.2f} | {pa / pr:.2f}, {pb / pr:.2f} |")
print()
def rounds(clients, target):
    return {r["round"]: r["ticks"] / max(r["result"]["calls"], 1) for r in rows
            if r["clients"] == clients and r["target"] == target}
def paired(clients):
    # Each round's own B/A, A and B measured one after the other: their median and range.
    a, b = rounds(clients, "a"), rounds(clients, "b")
    ratios = sorted(b[n] / a[n] for n in a if n in b and a[n] and b[n])
    return f"{statistics.median(ratios):.2f} ({ratios[0]:.2f} to {ratios[-1]:.2f})" if ratios else "-"
print("| clients | relay CPU/call µs | A | B | B/A | B/A, median of the rounds' | A, B / relay |")
print("|---:|---:|---:|---:|---:|---:|---:|")
for c in counts:
    r, a, b = (cpu(c, t) for t in ("relay", "a", "b"))
    print(f"| {c} | {r:.0f} | {a:.0f} | {b:.0f} | {b / a:.2f} | {paired(c)} | {a / r:.2f}, {b / r:.2f} |")
EOF
