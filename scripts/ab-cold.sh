#!/usr/bin/env bash
# A same-run A/B of scripts/bench.sh's cold start (section 5b) for two
# builds of mcpgate: new sessions one after the other, each timed from its
# `initialize` to its first call answered, through A and B to the stdio
# fixture (its process started for the session) and to the HTTP fixture,
# and the stdio fixture started by the load generator itself (direct), in
# interleaved rounds. Prints each path's median p50 over the rounds, and
# bench.sh's target for each build: stdio through mcpgate / (HTTP through
# mcpgate + direct stdio), at most 1.
#
#   scripts/ab-cold.sh A_MCPGATE B_MCPGATE [ROUNDS [SESSIONS]]
#
# The fixture and the load generator are this checkout's release builds
# (`cargo build --release -p mcp-fixture -p mcp-load`). Everything listens
# on 127.0.0.1; every process started is stopped by its PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
SCRIPT=ab-cold.sh
# shellcheck source=lib.sh
. scripts/lib.sh

[ $# -ge 2 ] || { sed -n '2,11p' "$0" >&2; exit 2; }
A=$(realpath "$1") B=$(realpath "$2") ROUNDS=${3:-5} COUNT=${4:-100}
BIN=$(realpath "${CARGO_TARGET_DIR:-target}/release")
for bin in "$A" "$B" "$BIN/mcp-fixture" "$BIN/mcp-load"; do
    [ -x "$bin" ] || fail "$bin is not there: build it first (see the top of $0)"
done
OUT=.bench/ab-cold
mkdir -p "$OUT"
LOG_DIR=$OUT
RESULTS=$OUT/results.jsonl
: > "$RESULTS"
trap stop_all EXIT

serve fixture "$BIN/mcp-fixture" --name a
FIX=$ADDR
common='"listen": "127.0.0.1:0", "session_idle_timeout_secs": 300, "max_connections": 4096, "max_sessions": 4096, "keepalive_secs": 15, "max_processes": 256'
printf '{%s, "mcpServers": {"a": {"url": "http://%s/mcp", "prefix": ""}}}\n' "$common" "$FIX" > "$OUT/http.json"
printf '{%s, "mcpServers": {"s": {"command": "%s", "args": ["--stdio", "--name", "s"], "prefix": "", "sharing": "session"}}}\n' \
    "$common" "$BIN/mcp-fixture" > "$OUT/stdio.json"
declare -A URL
for build in a b; do
    exe=$A
    [ $build = b ] && exe=$B
    for server in stdio http; do
        serve "gate-$build-$server" "$exe" --config "$OUT/$server.json"
        URL[$build-$server]=http://$ADDR/mcp
        # The spawner thread starts with the first child: started before the rounds.
        "$BIN/mcp-load" cold --url "${URL[$build-$server]}" --tool echo --count 5 > /dev/null
    done
done

for round in $(seq "$ROUNDS"); do
    for path in direct a-stdio a-http b-stdio b-http; do
        if [ $path = direct ]; then
            args=(--stdio "$BIN/mcp-fixture --stdio --name s")
        else
            args=(--url "${URL[$path]}")
        fi
        line=$("$BIN/mcp-load" cold "${args[@]}" --tool echo --count "$COUNT")
        echo "{\"round\":$round,\"path\":\"$path\",\"result\":$line}" >> "$RESULTS"
        echo "  round $round, $path: $line" >&2
    done
done

python3 - "$RESULTS" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
errors = sum(r["result"]["errors"] for r in rows)
p50 = {p: statistics.median(r["result"]["p50_us"] for r in rows if r["path"] == p) for p in {r["path"] for r in rows}}
print("| path | p50 ms (median of the rounds) |")
print("|---|---:|")
for path in ("direct", "a-stdio", "a-http", "b-stdio", "b-http"):
    print(f"| {path} | {p50[path] / 1000:.2f} |")
for build in ("a", "b"):
    s, h, d = p50[f"{build}-stdio"], p50[f"{build}-http"], p50["direct"]
    print(f"{build.upper()}: stdio / (HTTP + direct) = {s / (h + d):.3f}")
print(f"B/A, stdio: {p50['b-stdio'] / p50['a-stdio']:.3f}; failed sessions: {errors}")
sys.exit(1 if errors else 0)
EOF
