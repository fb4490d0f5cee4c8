#!/usr/bin/env bash
# mcpgate's benchmark: overhead next to direct calls (a server of the old
# HTTP+SSE transport too, next to its own clients), footprint, churn,
# shutdown, and the same overhead and footprint through a peer gateway
# (the FastMCP proxy), all in one run on this machine; then the same for a
# stdio server (mcp-fixture --stdio, a child per client session): calls next
# to the load generator driving it over its own pipes and next to a peer
# bridge (supergateway), cold start, footprint per session, churn, and
# kill -9 with children; the footprint of the six servers users paste (npx -y
# and uvx, one process per server) with 1 and 10 sessions; and find_tools
# (the tool_search mode) at 300 and 3,000 tools, with the size of tools/list
# with and without it.
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
    CPU_CLIENT_COUNTS="1 16 64"; CPU_SECONDS=3; CPU_ROUNDS=3
    # Rounds of the points against the bare relay (1d, both eras): each target is the median of
    # the rounds' own ratios, so one round the host spent elsewhere does not decide it.
    RELAY_ROUNDS=5
    # OAuth and TLS: client counts of the token rows, new connections per TLS row.
    AUTH_COUNTS="1 16"; CONNECTS=500
    # stdio: client counts and seconds of the call rows, cold starts per path
    # and round, sessions each holding a child (footprint, then kill -9),
    # churn cycles, the pause at churn's quiet points and before a reading.
    STDIO_COUNTS="1 16 64"; STDIO_SECONDS=5; COLD=100; STDIO_HOLD=50; STDIO_CHURN=1000; QUIET_MS=1000; SETTLE=1
else
    SECONDS_PER_POINT=1; ROUNDS=1; CLIENT_COUNTS="1 16"; SESSIONS_BIG=200; CHURN=600; PY_SECONDS=1
    CPU_CLIENT_COUNTS="1 16"; CPU_SECONDS=1; CPU_ROUNDS=1; RELAY_ROUNDS=1
    AUTH_COUNTS="1"; CONNECTS=50
    STDIO_COUNTS="1"; STDIO_SECONDS=0.5; COLD=20; STDIO_HOLD=10; STDIO_CHURN=50; QUIET_MS=300; SETTLE=0.3
fi

FASTMCP_VERSION=4.2.3
SUPERGATEWAY_VERSION=4.0.0 # scripts/bench/peers/package-lock.json
# Where cargo puts the binaries: $CARGO_TARGET_DIR (relative to where cargo
# runs: here) or target/.
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
[[ $TARGET_DIR == /* ]] || TARGET_DIR=$ROOT/$TARGET_DIR
BIN=$TARGET_DIR/release
# mcpgate runs with the allocator settings of its systemd unit (README:
# Running as a service): freed thread stacks are not cached and glibc uses
# two malloc arenas, which keeps RSS close to what is live. Only mcpgate:
# with no stack cache glibc unmaps a thread's stack as soon as it ends, and
# a pthread_detach that races that end reads the unmapped descriptor
# (mcp-load died so with SIGSEGV in pthread_detach, from the thread ureq's
# resolver started and detached for every call before mcp-load took
# mcpgate's resolver). mcpgate joins every thread it starts; the servers
# detach theirs.
MCPGATE=(env GLIBC_TUNABLES=glibc.pthread.stack_cache_size=0:glibc.malloc.arena_max=2 "$BIN/mcpgate")

# serve (start and wait for its `listening on` line; sets ADDR and PID), stop, wait_for and
# stop_all on exit: scripts/lib.sh. Each process's output: .bench/run/NAME.out and .err.
SCRIPT=bench.sh LOG_DIR=$OUT/run
# shellcheck source=lib.sh
. "$ROOT/scripts/lib.sh"
# The Python SDK's venv (VPY) and Node 22 (NODE_BIN), pinned and installed as interop.sh's.
# shellcheck source=pinned.sh
. "$ROOT/scripts/pinned.sh"

step() { printf '\n== %s  (%ds)\n' "$*" "$SECONDS" >&2; }
record() { echo "$1" >> "$RESULTS"; }

# Whether ADDR answers HTTP (a server may print its port before it listens).
answers() { curl -s -o /dev/null --max-time 1 "http://$1/"; }
wait_http() { wait_for 10 "nothing answers on $1" answers "$1" || exit 1; }

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
threads() { awk '/^Threads:/ {print $2}' "/proc/$1/status"; }
fixture_stat() { curl -fsS "http://$1/stats" | python3 -c "import json,sys; print(json.load(sys.stdin)['$2'])"; }
status_field() { curl -fsS "http://$1/status.json" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d$2)"; }

# gate_config PATH IDLE NAME=ADDR...: mcpgate in front of the servers (no prefix); GATE_EXTRA, when
# set, adds its keys (JSON members, e.g. '"max_memory_mb": 32').
gate_config() {
    local path=$1 idle=$2; shift 2
    {
        printf '{"listen": "127.0.0.1:0", "session_idle_timeout_secs": %s,\n' "$idle"
        printf ' "max_connections": 4096, "max_sessions": 4096, "keepalive_secs": 15,%s\n "mcpServers": {' "${GATE_EXTRA:+ $GATE_EXTRA,}"
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
# The release build linked with its start-up code first (scripts/ordered.sh: callgrind, then lld's
# symbol ordering), what a small host runs: its RSS at rest is footprint's target.
step "the release build with its start-up code first (scripts/ordered.sh)"
ORDERED=$OUT/run/mcpgate-ordered
scripts/ordered.sh "$ORDERED" > "$OUT/run/ordered.log" 2>&1 || {
    tail -5 "$OUT/run/ordered.log" >&2
    echo "bench: scripts/ordered.sh failed; see $OUT/run/ordered.log" >&2
    exit 1
}

step "tools: Python SDK server and FastMCP proxy ($FASTMCP_VERSION)"
(install_python_sdk && install_node) > "$OUT/run/install.log" 2>&1 || {
    echo "bench: installing the interop tools failed; see $OUT/run/install.log" >&2
    exit 1
}
PY=$VPY
# The FastMCP proxy runs from the Python SDK's venv, whose pins hold fastmcp too.
"$PY" -c "import fastmcp, sys; sys.exit(fastmcp.__version__ != '$FASTMCP_VERSION')" ||
    fail ".interop/venv has no fastmcp $FASTMCP_VERSION (scripts/interop/requirements.txt pins it)"

# The peer bridge of the stdio rows: supergateway from npm, exactly as locked
# in scripts/bench/peers/, run by the pinned Node 22 (install_node). When it
# cannot be installed or started here, its rows say so.
NODE=$NODE_BIN/node
PEERS=$OUT/peers
SUPERGATEWAY=$PEERS/node_modules/supergateway/dist/index.js
install_peers() {
    local PATH=$PATH
    PATH="$(dirname "$NODE"):$PATH"
    install_npm "$ROOT/scripts/bench/peers" "$PEERS"
}
step "tools: supergateway $SUPERGATEWAY_VERSION (npm ci into .bench/peers)"
PEER_WHY=""
if ! install_peers > "$OUT/run/peers-install.log" 2>&1; then
    PEER_WHY="npm ci of scripts/bench/peers failed here (see .bench/run/peers-install.log)"
    echo "bench: $PEER_WHY; its rows are left out" >&2
fi

LOAD=$BIN/mcp-load

# CPU per call (steps 1c and 1d): user + sys of a process from /proc, in clock ticks.
CLK_TCK=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TEXT_100B=$(printf 'x%.0s' $(seq 60))
# cpu_point ERA ROUND CLIENTS SIZE TARGET URL PID SERVER_ADDR SERVER_PID [LOAD ARGS...]: one point of
# `calls` at URL with a result of SIZE (100B, 100KB, 1MB), recorded with the CPU ticks the relaying
# process PID (none for direct) and the server spent, and the requests the server counted.
cpu_point() {
    local era=$1 round=$2 clients=$3 size=$4 target=$5 url=$6 pid=$7 server=$8 server_pid=$9 tool args
    shift 9
    case $size in
        100B) tool="echo"; args="{\"text\": \"$TEXT_100B\"}" ;;
        100KB) tool=big; args='{"bytes": 100000}' ;;
        1MB) tool=big; args='{"bytes": 1000000}' ;;
    esac
    local server0 gate0 requests0 line requests1 server1 gate1 gateway_ticks=null
    server0=$(cpu_ticks "$server_pid"); gate0=${pid:+$(cpu_ticks "$pid")}
    requests0=$(fixture_stat "$server" requests)
    line=$("$LOAD" calls "$@" --url "$url" --tool "$tool" --args "$args" --clients "$clients" --seconds "$CPU_SECONDS")
    requests1=$(fixture_stat "$server" requests)
    server1=$(cpu_ticks "$server_pid"); gate1=${pid:+$(cpu_ticks "$pid")}
    [ -n "$pid" ] && gateway_ticks=$((gate1 - gate0))
    record "{\"part\":\"cpu\",\"era\":\"$era\",\"round\":$round,\"target\":\"$target\",\"size\":\"$size\",\"clk_tck\":$CLK_TCK,\"server_ticks\":$((server1 - server0)),\"gateway_ticks\":$gateway_ticks,\"server_requests\":$((requests1 - requests0)),\"result\":$line}"
    echo "  round $round, $era, $clients client(s), $size, $target: $line" >&2
}

# ---------------------------------------------------------------- 1. overhead
step "1. overhead: tools/call direct and through mcpgate, interleaved"
serve fixture-a "$BIN/mcp-fixture" --name a
FIX_A=$ADDR; FIX_A_PID=$PID
gate_config "$OUT/run/overhead.json" 300 "a=$FIX_A"
serve gate-overhead "${MCPGATE[@]}" --config "$OUT/run/overhead.json"
GATE=$ADDR; GATE_PID=$PID
serve fastmcp "$PY" "$ROOT/scripts/bench/fastmcp_proxy.py" "http://$FIX_A/mcp"
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
serve py-server "$PY" "$ROOT/scripts/interop/py_server.py"
PYS=$ADDR
wait_http "$PYS"
gate_config "$OUT/run/overhead-py.json" 300 "py=$PYS"
serve gate-py "${MCPGATE[@]}" --config "$OUT/run/overhead-py.json"
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

step "1c. sessionless (protocol 2026-07-28): tools/call direct to mcp-fixture --modern, through the bare relay, nginx and mcpgate; CPU per call"
serve fixture-modern "$BIN/mcp-fixture" --modern --name m
FIX_M=$ADDR; FIX_M_PID=$PID
# Every client of this era here is one user (no token), whose calls share one pool session, and
# max_requests_per_session (32) bounds a session's requests in flight: at 64 clients the rest
# would get 429. Raised, so that the rows measure the relaying.
GATE_EXTRA='"max_requests_per_session": 128' gate_config "$OUT/run/overhead-modern.json" 300 "m=$FIX_M"
serve gate-modern "${MCPGATE[@]}" --config "$OUT/run/overhead-modern.json"
GATE_M=$ADDR; GATE_M_PID=$PID
# The bare relay (section 1d) in front of the same server: the floor of what any relay on this
# front door and HTTP client reaches, against which the era's targets can be read.
serve relay-modern "$BIN/mcp-relay" --listen 127.0.0.1:0 --to "http://$FIX_M/mcp"
RELAY_M=$ADDR; RELAY_M_PID=$PID
# nginx, the reference C proxy (keep-alive to the server, unbuffered), in front of the same server:
# what a relay of another stack reaches on this host. Installed from Debian when missing.
SESSIONLESS_TARGETS="direct relay mcpgate"
if install_debian "$OUT/run/apt.log" nginx=nginx-light >/dev/null; then
    read -r NGINX_PORT < <(free_ports 1)
    mkdir -p "$OUT/run/nginx-tmp"
    cat >"$OUT/run/nginx-modern.conf" <<NGINX
worker_processes auto;
daemon off;
pid $OUT/run/nginx.pid;
error_log $OUT/run/nginx.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $OUT/run/nginx-tmp/body;
    proxy_temp_path $OUT/run/nginx-tmp/proxy;
    fastcgi_temp_path $OUT/run/nginx-tmp/fastcgi;
    uwsgi_temp_path $OUT/run/nginx-tmp/uwsgi;
    scgi_temp_path $OUT/run/nginx-tmp/scgi;
    upstream fixture { server $FIX_M; keepalive 64; }
    server {
        listen 127.0.0.1:$NGINX_PORT;
        location / {
            proxy_pass http://fixture;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }
    }
}
NGINX
    start nginx-modern nginx -c "$OUT/run/nginx-modern.conf"
    NGINX_M_PID=$PID
    if wait_for 10 "nginx listening on 127.0.0.1:$NGINX_PORT" bash -c "exec 3<>/dev/tcp/127.0.0.1/$NGINX_PORT" 2>/dev/null; then
        SESSIONLESS_TARGETS="direct relay nginx mcpgate"
    fi
else
    echo "  nginx: not installed (not root?); its row is left out" >&2
fi
for round in $(seq "$ROUNDS"); do
    for clients in $CLIENT_COUNTS; do
        for target in $SESSIONLESS_TARGETS; do
            case $target in
                direct) url=http://$FIX_M/mcp ;;
                relay) url=http://$RELAY_M/mcp ;;
                nginx) url=http://127.0.0.1:$NGINX_PORT/mcp ;;
                mcpgate) url=http://$GATE_M/mcp ;;
            esac
            line=$("$LOAD" calls --modern --url "$url" --tool echo --clients "$clients" --seconds "$SECONDS_PER_POINT")
            record "{\"part\":\"overhead\",\"server\":\"sessionless\",\"target\":\"$target\",\"round\":$round,\"result\":$line}"
            echo "  round $round, sessionless, $clients client(s), $target: $line" >&2
        done
    done
done
# The era's CPU per call next to the bare relay, as section 1d does for the session era, in the
# same order (below).
for round in $(seq "$RELAY_ROUNDS"); do
    for clients in $CPU_CLIENT_COUNTS; do
        for size in 100B 100KB 1MB; do
            for target in $(in_turn "$round" direct relay mcpgate); do
                case $target in
                    direct) url=http://$FIX_M/mcp; pid= ;;
                    relay) url=http://$RELAY_M/mcp; pid=$RELAY_M_PID ;;
                    mcpgate) url=http://$GATE_M/mcp; pid=$GATE_M_PID ;;
                esac
                cpu_point 2026-07-28 "$round" "$clients" "$size" "$target" "$url" "$pid" "$FIX_M" "$FIX_M_PID" --modern
            done
        done
    done
done
stop "$GATE_M_PID"
stop "$RELAY_M_PID"
if [ -n "${NGINX_M_PID:-}" ]; then stop "$NGINX_M_PID"; fi
stop "$FIX_M_PID"

step "1d. CPU per call: direct, a bare relay, mcpgate and the FastMCP proxy; results of 100 B, 100 KB and 1 MB"
# The bare relay (bench/src/relay.rs): mcpgate's own front door and HTTP client, forwarding each
# body as it came and the answer unparsed; the floor of what a relay on this stack costs.
serve relay "$BIN/mcp-relay" --listen 127.0.0.1:0 --to "http://$FIX_A/mcp"
RELAY=$ADDR; RELAY_PID=$PID
fds() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }
GATE_THREADS_BEFORE=$(threads "$GATE_PID"); GATE_FDS_BEFORE=$(fds "$GATE_PID")
# In rounds, the round outermost: one point of 3 s moved by a quarter between runs (the relay at
# 1 MB and 16 clients: 806 against 660 µs), and the machine's state drifts over the step. The
# table sums ticks and calls over the rounds; the targets take the median of each round's
# mcpgate / relay, and the relay and mcpgate swap places every other round (in_turn: lib.sh), so a drift
# within a round weighs on each alike. The FastMCP proxy, 500 times the floor, runs once.
for round in $(seq "$RELAY_ROUNDS"); do
for clients in $CPU_CLIENT_COUNTS; do
    for size in 100B 100KB 1MB; do
        for target in $(in_turn "$round" direct relay mcpgate fastmcp); do
            case $target in
                direct) url=http://$FIX_A/mcp; pid= ;;
                relay) url=http://$RELAY/mcp; pid=$RELAY_PID ;;
                mcpgate) url=http://$GATE/mcp; pid=$GATE_PID ;;
                fastmcp) url=http://$PROXY/mcp; pid=$PROXY_PID
                    [ "$clients" -gt 16 ] || [ "$round" -gt 1 ] && continue ;;
            esac
            cpu_point session "$round" "$clients" "$size" "$target" "$url" "$pid" "$FIX_A" "$FIX_A_PID"
        done
    done
done
done
# No growth per call: once its clients closed their sessions, mcpgate is back to its threads and
# descriptors from before (read from /proc).
for _ in $(seq 100); do
    [ "$(threads "$GATE_PID")" -le "$GATE_THREADS_BEFORE" ] && [ "$(fds "$GATE_PID")" -le "$GATE_FDS_BEFORE" ] && break
    sleep 0.1
done
record "{\"part\":\"cpu-growth\",\"threads_before\":$GATE_THREADS_BEFORE,\"threads_after\":$(threads "$GATE_PID"),\"fds_before\":$GATE_FDS_BEFORE,\"fds_after\":$(fds "$GATE_PID")}"
stop "$RELAY_PID"

step "1e. the old HTTP+SSE transport: tools/call direct over SSE to mcp-fixture --sse-transport and through mcpgate"
# Keep-alives every 100 ms: the fixture notices a stream closed at once, and counts it.
serve fixture-sse "$BIN/mcp-fixture" --sse-transport --keepalive-ms 100 --name s
FIX_S=$ADDR; FIX_S_PID=$PID
printf '{"listen": "127.0.0.1:0", "max_connections": 4096, "max_sessions": 4096,\n "mcpServers": {"s": {"type": "sse", "url": "http://%s/sse", "prefix": ""}}}\n' \
    "$FIX_S" > "$OUT/run/overhead-sse.json"
serve gate-sse "${MCPGATE[@]}" --config "$OUT/run/overhead-sse.json"
GATE_SSE=$ADDR; GATE_SSE_PID=$PID
for round in $(seq "$ROUNDS"); do
    for clients in 1 16; do
        for target in direct mcpgate; do
            args=(--sse "http://$FIX_S/sse"); [ $target = mcpgate ] && args=(--url "http://$GATE_SSE/mcp")
            line=$("$LOAD" calls "${args[@]}" --tool echo --clients "$clients" --seconds "$SECONDS_PER_POINT")
            record "{\"part\":\"overhead\",\"server\":\"sse\",\"target\":\"$target\",\"round\":$round,\"result\":$line}"
            echo "  round $round, HTTP+SSE, $clients client(s), $target: $line" >&2
        done
    done
done
stop "$GATE_SSE_PID"
# Every stream opened, directly or by mcpgate, was closed (counted by the fixture).
sse_streams_closed() { [ "$(fixture_stat "$FIX_S" sse_streams_open)" = 0 ]; }
wait_for 10 "the fixture's HTTP+SSE streams closed" sse_streams_closed || true
record "{\"part\":\"sse-balance\",\"opened\":$(fixture_stat "$FIX_S" sse_streams_opened),\"closed\":$(fixture_stat "$FIX_S" sse_streams_closed),\"open\":$(fixture_stat "$FIX_S" sse_streams_open)}"
stop "$FIX_S_PID"

step "1f. OAuth and TLS: a static token and a JWT (RS256), each call's CPU; new connections over HTTP and HTTPS"
# The bench's own issuer (scripts/bench/jwt_issuer.py): its JWKS, and one token for the resource.
# The JWT is checked once (signature, claims) and then kept by its hash: the rows show what
# each call costs after that, next to a static token.
AUTH_RESOURCE=http://127.0.0.1:8780/mcp
serve jwt-issuer "$PY" "$ROOT/scripts/bench/jwt_issuer.py" --resource "$AUTH_RESOURCE" \
    --token-file "$OUT/run/jwt.token"
ISSUER=http://$ADDR; ISSUER_PID=$PID
JWT=$(cat "$OUT/run/jwt.token")
STATIC=bench-static-token-0123456789
printf '{"listen": "127.0.0.1:0", "max_connections": 4096,\n "auth": {"tokens": [{"token": "%s"}], "oauth": {"issuer": "%s", "resource": "%s"}},\n "mcpServers": {"a": {"url": "http://%s/mcp", "prefix": ""}}}\n' \
    "$STATIC" "$ISSUER" "$AUTH_RESOURCE" "$FIX_A" > "$OUT/run/auth.json"
serve gate-auth "${MCPGATE[@]}" --config "$OUT/run/auth.json"
GATE_AU=$ADDR; GATE_AU_PID=$PID
for round in $(seq "$ROUNDS"); do
    for clients in $AUTH_COUNTS; do
        for token in static jwt; do
            bearer=$STATIC; [ $token = jwt ] && bearer=$JWT
            gate0=$(cpu_ticks "$GATE_AU_PID")
            line=$("$LOAD" --bearer "$bearer" calls --url "http://$GATE_AU/mcp" --tool echo --clients "$clients" --seconds "$CPU_SECONDS")
            gate1=$(cpu_ticks "$GATE_AU_PID")
            record "{\"part\":\"auth\",\"token\":\"$token\",\"round\":$round,\"clk_tck\":$CLK_TCK,\"gateway_ticks\":$((gate1 - gate0)),\"result\":$line}"
            echo "  round $round, $clients client(s), $token: $line" >&2
        done
    done
done
record "{\"part\":\"auth-checked\",\"oauth_checked\":$(status_field "$GATE_AU" "['auth']['oauth_checked']"),\"refused\":$(status_field "$GATE_AU" "['auth']['refused']")}"
stop "$ISSUER_PID"
# HTTPS: a CA and a certificate for localhost made for the run (scripts/interop/oauth_certs.py).
"$PY" "$ROOT/scripts/interop/oauth_certs.py" "$OUT/run"
# The same gate as above, static token included, but for HTTPS.
printf '{"listen": "127.0.0.1:0", "max_connections": 4096, "auth": {"tokens": [{"token": "%s"}]},\n "tls": {"cert_file": "%s", "key_file": "%s"},\n "mcpServers": {"a": {"url": "http://%s/mcp", "prefix": ""}}}\n' \
    "$STATIC" "$OUT/run/gate.pem" "$OUT/run/gate.key" "$FIX_A" > "$OUT/run/tls.json"
serve gate-tls "${MCPGATE[@]}" --config "$OUT/run/tls.json"
GATE_TLS=$ADDR; GATE_TLS_PID=$PID
for round in $(seq "$ROUNDS"); do
    for scheme in http https; do
        case $scheme in
            http) base=http://$GATE_AU; pid=$GATE_AU_PID ;;
            https) base=https://localhost:${GATE_TLS##*:}; pid=$GATE_TLS_PID ;;
        esac
        gate0=$(cpu_ticks "$pid")
        line=$("$LOAD" --bearer "$STATIC" --ca "$OUT/run/ca.pem" connects --url "$base/healthz" --count "$CONNECTS")
        gate1=$(cpu_ticks "$pid")
        record "{\"part\":\"tls-connect\",\"scheme\":\"$scheme\",\"round\":$round,\"clk_tck\":$CLK_TCK,\"gateway_ticks\":$((gate1 - gate0)),\"result\":$line}"
        echo "  round $round, $CONNECTS new connections, $scheme: $line" >&2
        gate0=$(cpu_ticks "$pid")
        line=$("$LOAD" --bearer "$STATIC" --ca "$OUT/run/ca.pem" calls --url "$base/mcp" --tool echo --clients 1 --seconds "$CPU_SECONDS")
        gate1=$(cpu_ticks "$pid")
        record "{\"part\":\"tls-calls\",\"scheme\":\"$scheme\",\"round\":$round,\"clk_tck\":$CLK_TCK,\"gateway_ticks\":$((gate1 - gate0)),\"result\":$line}"
        echo "  round $round, calls on one kept-alive connection, $scheme: $line" >&2
    done
done
record "{\"part\":\"tls-handshakes\",\"handshakes\":$(curl -fsS --cacert "$OUT/run/ca.pem" "https://localhost:${GATE_TLS##*:}/status.json" | python3 -c "import json,sys; t=json.load(sys.stdin)['tls']; print(json.dumps(t))")}"
stop "$GATE_TLS_PID"
stop "$GATE_AU_PID"

step "1g. governing calls: what tracing (sampled at 1.0 and at 0.01) and the audit log add to each call's CPU"
# Four mcpgates in front of the same fixture, measured in the same rounds, interleaved: none of
# issue 42's features, tracing at a ratio of 1.0 and of 0.01 (to a receiver that answers without
# decoding: scripts/bench/otlp_sink.py), and the audit log (a file, rotated at its default cap).
# CPU: mcpgate's user + sys from /proc over the point, divided by the calls.
serve otlp-sink "$PY" "$ROOT/scripts/bench/otlp_sink.py"
SINK=http://$ADDR; SINK_PID=$PID
GOVERN_VARIANTS="plain trace-1 trace-0.01 audit"
declare -A GOVERN_ADDR GOVERN_PID
for variant in $GOVERN_VARIANTS; do
    case $variant in
        plain) extra="" ;;
        trace-1) extra="\"tracing\": {\"endpoint\": \"$SINK\", \"sample_ratio\": 1}," ;;
        trace-0.01) extra="\"tracing\": {\"endpoint\": \"$SINK\", \"sample_ratio\": 0.01}," ;;
        audit) extra="\"audit\": {\"file\": \"$OUT/run/audit.jsonl\"}," ;;
    esac
    printf '{"listen": "127.0.0.1:0", "max_connections": 4096, %s\n "mcpServers": {"a": {"url": "http://%s/mcp", "prefix": ""}}}\n' \
        "$extra" "$FIX_A" > "$OUT/run/govern-$variant.json"
    serve "gate-$variant" "${MCPGATE[@]}" --config "$OUT/run/govern-$variant.json"
    GOVERN_ADDR[$variant]=$ADDR; GOVERN_PID[$variant]=$PID
done
for round in $(seq "$CPU_ROUNDS"); do
    for clients in $AUTH_COUNTS; do
        for variant in $GOVERN_VARIANTS; do
            pid=${GOVERN_PID[$variant]}
            gate0=$(cpu_ticks "$pid")
            line=$("$LOAD" calls --url "http://${GOVERN_ADDR[$variant]}/mcp" --tool echo --clients "$clients" --seconds "$CPU_SECONDS")
            gate1=$(cpu_ticks "$pid")
            record "{\"part\":\"govern\",\"variant\":\"$variant\",\"round\":$round,\"clk_tck\":$CLK_TCK,\"gateway_ticks\":$((gate1 - gate0)),\"result\":$line}"
            echo "  round $round, $clients client(s), $variant: $line" >&2
        done
    done
done
# What became of the spans: exported, or dropped (the exporter's queue full), per traced gate,
# once the last batch went (the exporter sends at least every second).
sleep 2
metric() { curl -fsS "http://$1/metrics" | awk -v name="$2" '$1 == name {print $2}'; }
for variant in trace-1 trace-0.01; do
    addr=${GOVERN_ADDR[$variant]}
    record "{\"part\":\"govern-spans\",\"variant\":\"$variant\",\"exported\":$(metric "$addr" mcpgate_trace_spans_exported_total),\"dropped\":$(metric "$addr" mcpgate_trace_spans_dropped_total)}"
done
record "{\"part\":\"govern-audit\",\"written\":$(metric "${GOVERN_ADDR[audit]}" mcpgate_audit_records_written_total),\"dropped\":$(metric "${GOVERN_ADDR[audit]}" mcpgate_audit_records_dropped_total)}"
for variant in $GOVERN_VARIANTS; do stop "${GOVERN_PID[$variant]}"; done
stop "$SINK_PID"

# --------------------------------------------------------------- 2. footprint
step "2. footprint: at rest, and with 100 and $SESSIONS_BIG sessions x 2 downstream sessions with GET streams"
serve fixture-b "$BIN/mcp-fixture" --name b
FIX_B=$ADDR
gate_config "$OUT/run/footprint.json" 3600 "a=$FIX_A" "b=$FIX_B"
serve gate-footprint "${MCPGATE[@]}" --config "$OUT/run/footprint.json"
GATE_FP=$ADDR; GATE_FP_PID=$PID
sleep 1
record "{\"part\":\"footprint\",\"target\":\"mcpgate\",\"sessions\":0,\"rss_kib\":$(rss_kib "$GATE_FP_PID"),\"threads\":$(threads "$GATE_FP_PID"),\"readers\":0}"
# The same at rest, linked by scripts/ordered.sh.
serve gate-footprint-ordered "${MCPGATE[@]:0:2}" "$ORDERED" --config "$OUT/run/footprint.json"
sleep 1
record "{\"part\":\"footprint\",\"target\":\"mcpgate, ordered\",\"sessions\":0,\"rss_kib\":$(rss_kib "$PID"),\"threads\":$(threads "$PID"),\"readers\":0}"
stop "$PID"
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

step "2c. one list for every session: $SESSIONS_BIG sessions each listing a server of 10,000 tools"
# The merged list is held once per server and view and shared by the
# sessions: RSS should stay near one copy of it, within max_memory_mb, and
# the server should be asked for it once.
serve fixture-many "$BIN/mcp-fixture" --name many --tools 10000
FIX_M=$ADDR; FIX_M_PID=$PID
gate_config "$OUT/run/lists.json" 3600 "many=$FIX_M"
serve gate-lists "${MCPGATE[@]}" --config "$OUT/run/lists.json"
GATE_L=$ADDR; GATE_L_PID=$PID
sleep 1
list_point() {
    local sessions=$1 fetches buffered limit
    fetches=$(curl -fsS "http://$FIX_M/stats" | python3 -c "import json,sys; print(json.load(sys.stdin)['methods'].get('tools/list', 0))")
    buffered=$(status_field "$GATE_L" "['memory']['buffered_bytes']")
    limit=$(status_field "$GATE_L" "['memory']['limit_bytes']")
    record "{\"part\":\"list-cache\",\"sessions\":$sessions,\"tools\":10000,\"rss_kib\":$(rss_kib "$GATE_L_PID"),\"buffered\":$buffered,\"limit\":$limit,\"fetches\":$fetches}"
}
list_point 0
"$LOAD" sessions --url "http://$GATE_L/mcp" --count 1 --no-stream --list > "$OUT/run/lists-1.out"
list_point 1
"$LOAD" sessions --url "http://$GATE_L/mcp" --count $((SESSIONS_BIG - 1)) --no-stream --list > "$OUT/run/lists-many.out"
list_point "$SESSIONS_BIG"
echo "  $(tail -1 "$RESULTS")" >&2
stop "$GATE_L_PID"; stop "$FIX_M_PID"

step "2d. memory under full-speed clients of protocol 2026-07-28 and of the session era, to a session-era server"
# Issue 38: 2026-07-28 clients drove mcpgate (max_memory_mb 32) to 238-343 MB, where the same load in
# the session era peaks at 5-15 MB. A fresh mcpgate per point, in front of fixture a; its RSS is read
# at rest, every 0.1 s while the clients call `echo` as fast as they can, and 2 s after they stop.
MEM_LIMIT_MB=32
MEM_SECONDS=15; [ $MODE = smoke ] && MEM_SECONDS=2
for clients in 1 16; do
    for era in session 2026-07-28; do
        GATE_EXTRA="\"max_memory_mb\": $MEM_LIMIT_MB" gate_config "$OUT/run/memory.json" 300 "a=$FIX_A"
        # A name of its own per point: serve reads its output file before the new process truncates it.
        serve "gate-memory-$era-$clients" "${MCPGATE[@]}" --config "$OUT/run/memory.json"
        GATE_MEM=$ADDR; GATE_MEM_PID=$PID
        # The pool's (or a session's) downstream session opens with a first call, before the reading at rest.
        modern=(); [ $era = 2026-07-28 ] && modern=(--modern)
        "$LOAD" calls "${modern[@]}" --url "http://$GATE_MEM/mcp" --tool echo --clients 1 --seconds 0.2 > /dev/null
        sleep 1
        rest=$(rss_kib "$GATE_MEM_PID"); peak=$rest
        "$LOAD" calls "${modern[@]}" --url "http://$GATE_MEM/mcp" --tool echo --clients "$clients" --seconds "$MEM_SECONDS" \
            > "$OUT/run/memory-load.out" &
        load=$!
        while kill -0 "$load" 2>/dev/null; do
            rss=$(rss_kib "$GATE_MEM_PID"); ((rss > peak)) && peak=$rss
            sleep 0.1
        done
        wait "$load"
        sleep 2
        line=$(cat "$OUT/run/memory-load.out")
        charged=$(status_field "$GATE_MEM" "['memory']['sessionless_calls_bytes']")
        record "{\"part\":\"era-memory\",\"era\":\"$era\",\"clients\":$clients,\"limit_mb\":$MEM_LIMIT_MB,\"rest_kib\":$rest,\"peak_kib\":$peak,\"after_kib\":$(rss_kib "$GATE_MEM_PID"),\"charged_after\":$charged,\"result\":$line}"
        echo "  $era, $clients client(s): RSS $rest KiB at rest, peak $peak KiB; $line" >&2
        stop "$GATE_MEM_PID"
    done
done

# ------------------------------------------------------------------- 3. churn
step "3. churn: $CHURN cycles of open, call, close (half DELETE, half idle eviction)"
stop "$GATE_PID"
serve fixture-c "$BIN/mcp-fixture" --name c
FIX_C=$ADDR
serve fixture-d "$BIN/mcp-fixture" --name d
FIX_D=$ADDR
gate_config "$OUT/run/churn.json" 1 "c=$FIX_C" "d=$FIX_D"
serve gate-churn "${MCPGATE[@]}" --config "$OUT/run/churn.json"
GATE_CH=$ADDR; GATE_CH_PID=$PID
sleep 0.5
BASE_THREADS=$(threads "$GATE_CH_PID")
line=$("$LOAD" churn --url "http://$GATE_CH/mcp" --tool echo --cycles "$CHURN" --sample-pid "$GATE_CH_PID" --samples "$OUT/run/churn.csv")
downstream_gone() { [ "$(status_field "$1" "['downstream']['live']")" = 0 ]; }
wait_for 10 "mcpgate's downstream sessions closed" downstream_gone "$GATE_CH" || true
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
serve fixture-e "$BIN/mcp-fixture" --name e
FIX_E=$ADDR
serve fixture-f "$BIN/mcp-fixture" --name f
FIX_F=$ADDR
gate_config "$OUT/run/shutdown.json" 3600 "e=$FIX_E" "f=$FIX_F"
serve gate-shutdown "${MCPGATE[@]}" --config "$OUT/run/shutdown.json"
GATE_SD=$ADDR; GATE_SD_PID=$PID
rm -f "$HOLD"
start sessions-shutdown "$LOAD" sessions --url "http://$GATE_SD/mcp" --count "$SESSIONS_BIG" --hold-file "$HOLD"
LOADER=$PID
wait_for 120 "the loader's sessions ready" grep -q ready "$OUT/run/sessions-shutdown.out" || exit 1
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
wait_for 30 "the loader leaving" ended "$LOADER" || true
stop "$LOADER"

# ------------------------------------------------------------------- 5. stdio
# The stdio server: mcp-fixture --stdio, one process per client session,
# started by mcpgate, by the load generator itself (direct), or by
# supergateway (--stateful: a child per session too; `exec` so that its
# shell is replaced by the fixture, as mcpgate starts the fixture itself).
STDIO_CMD="$BIN/mcp-fixture --stdio --name s"
stdio_config() {
    local path=$1 idle=$2
    {
        printf '{"listen": "127.0.0.1:0", "session_idle_timeout_secs": %s,\n' "$idle"
        printf ' "max_connections": 4096, "max_sessions": 4096, "keepalive_secs": 15, "max_processes": 256,\n'
        printf ' "mcpServers": {"s": {"command": "%s", "args": ["--stdio", "--name", "s"], "prefix": "", "sharing": "session"}}}\n' "$BIN/mcp-fixture"
    } > "$path"
}
# One JSON object of the load generator's `procs`: RSS and threads from
# /proc (threads counted in /proc/PID/task), and the children's.
procs() { "$LOAD" procs --pid "$1"; }
# Waits (at most 10 s) until mcpgate at ADDR runs no child; what is left shows in the record.
no_children() { [ "$(status_field "$1" "['processes']['live']")" = 0 ]; }
wait_no_children() { wait_for 10 "mcpgate at $1 without children" no_children "$1" || true; }

step "5a. stdio: tools/call over the load generator's own pipes, through mcpgate, through supergateway"
stdio_config "$OUT/run/stdio.json" 300
serve gate-stdio "${MCPGATE[@]}" --config "$OUT/run/stdio.json"
GATE_S=$ADDR; GATE_S_PID=$PID
SG=""; SG_PID=""
if [ -z "$PEER_WHY" ]; then
    if serve supergateway env LOOPBACK_ANNOUNCE=1 "$NODE" --require "$ROOT/scripts/interop/loopback.cjs" \
        "$SUPERGATEWAY" --stdio "exec $STDIO_CMD" --outputTransport streamableHttp --stateful --port 0 --logLevel none; then
        SG_PID=$PID
        if wait_for 10 "supergateway answering" answers "$ADDR"; then SG=$ADDR; else PEER_WHY="supergateway did not answer HTTP here"; fi
    else
        PEER_WHY="supergateway did not start here (see .bench/run/supergateway.*)"
    fi
fi
[ -n "$PEER_WHY" ] && record "{\"part\":\"stdio-peer\",\"missing\":\"$PEER_WHY\"}"
for round in $(seq "$ROUNDS"); do
    for clients in $STDIO_COUNTS; do
        for target in direct mcpgate supergateway; do
            case $target in
                direct) args=(--stdio "$STDIO_CMD") ;;
                mcpgate) args=(--url "http://$GATE_S/mcp") ;;
                supergateway) [ -n "$SG" ] || continue; args=(--url "http://$SG/mcp") ;;
            esac
            line=$("$LOAD" calls "${args[@]}" --tool echo --clients "$clients" --seconds "$STDIO_SECONDS")
            record "{\"part\":\"overhead\",\"server\":\"stdio\",\"target\":\"$target\",\"round\":$round,\"result\":$line}"
            echo "  round $round, $clients client(s), $target: $line" >&2
        done
    done
done

step "5b. cold start: initialize to the first call answered, $COLD x $ROUNDS new sessions per path"
gate_config "$OUT/run/cold-http.json" 300 "a=$FIX_A"
serve gate-cold-http "${MCPGATE[@]}" --config "$OUT/run/cold-http.json"
GATE_CH2=$ADDR; GATE_CH2_PID=$PID
for round in $(seq "$ROUNDS"); do
    for target in direct-http mcpgate-http direct-stdio mcpgate-stdio supergateway-stdio; do
        case $target in
            direct-http) args=(--url "http://$FIX_A/mcp") ;;
            mcpgate-http) args=(--url "http://$GATE_CH2/mcp") ;;
            direct-stdio) args=(--stdio "$STDIO_CMD") ;;
            mcpgate-stdio) args=(--url "http://$GATE_S/mcp") ;;
            supergateway-stdio) [ -n "$SG" ] || continue; args=(--url "http://$SG/mcp") ;;
        esac
        line=$("$LOAD" cold "${args[@]}" --tool echo --count "$COLD")
        record "{\"part\":\"cold\",\"target\":\"$target\",\"round\":$round,\"result\":$line}"
        echo "  round $round, $target: $line" >&2
    done
done
stop "$GATE_CH2_PID"
wait_no_children "$GATE_S"
record "{\"part\":\"stdio-balance\",\"gate\":\"calls and cold starts\",\"processes\":$(curl -fsS "http://$GATE_S/status.json" | python3 -c "import json,sys; print(json.dumps(json.load(sys.stdin)['processes']))"),\"children\":$(procs "$GATE_S_PID")}"
stop "$GATE_S_PID"

step "5c. footprint per stdio session: 0 and $STDIO_HOLD client sessions, each holding a child"
stdio_config "$OUT/run/stdio-fp.json" 3600
serve gate-stdio-fp "${MCPGATE[@]}" --config "$OUT/run/stdio-fp.json"
GATE_SF=$ADDR; GATE_SF_PID=$PID
sleep "$SETTLE"
status_threads() { status_field "$1" "['process']['threads']"; }
record "{\"part\":\"stdio-footprint\",\"target\":\"mcpgate\",\"sessions\":0,\"when\":\"fresh\",\"procs\":$(procs "$GATE_SF_PID"),\"status_threads\":$(status_threads "$GATE_SF")}"
# The first child starts the spawner thread, which stays: one session opened
# and closed first, so that the baseline has it.
"$LOAD" cold --url "http://$GATE_SF/mcp" --tool echo --count 1 > /dev/null
wait_no_children "$GATE_SF"
sleep "$SETTLE"
record "{\"part\":\"stdio-footprint\",\"target\":\"mcpgate\",\"sessions\":0,\"when\":\"after one session\",\"procs\":$(procs "$GATE_SF_PID"),\"status_threads\":$(status_threads "$GATE_SF")}"
"$LOAD" sessions --url "http://$GATE_SF/mcp" --count "$STDIO_HOLD" --no-stream --call --tool echo > "$OUT/run/sessions-stdio.out"
sleep "$SETTLE"
record "{\"part\":\"stdio-footprint\",\"target\":\"mcpgate\",\"sessions\":$STDIO_HOLD,\"when\":\"held\",\"procs\":$(procs "$GATE_SF_PID"),\"status_threads\":$(status_threads "$GATE_SF"),\"live\":$(status_field "$GATE_SF" "['processes']['live']")}"
echo "  mcpgate with $STDIO_HOLD sessions: $(procs "$GATE_SF_PID")" >&2
if [ -n "$SG" ]; then
    record "{\"part\":\"stdio-footprint\",\"target\":\"supergateway\",\"sessions\":0,\"when\":\"after the calls\",\"procs\":$(procs "$SG_PID")}"
    "$LOAD" sessions --url "http://$SG/mcp" --count "$STDIO_HOLD" --no-stream > "$OUT/run/sessions-supergateway.out"
    sleep "$SETTLE"
    record "{\"part\":\"stdio-footprint\",\"target\":\"supergateway\",\"sessions\":$STDIO_HOLD,\"when\":\"held\",\"procs\":$(procs "$SG_PID")}"
    echo "  supergateway with $STDIO_HOLD sessions: $(procs "$SG_PID")" >&2
fi

step "5d. kill -9 of mcpgate with $STDIO_HOLD children"
line=$("$LOAD" kill9 --pid "$GATE_SF_PID" --seconds 2)
wait "$GATE_SF_PID" 2>/dev/null || true
record "{\"part\":\"stdio-kill\",\"result\":$line}"
echo "  $line" >&2
if [ -n "$SG" ]; then
    # Its children go with it (its own cleanup, on SIGTERM); any left are ours to stop.
    mapfile -t SG_KIDS < <(pgrep -P "$SG_PID" || true)
    stop "$SG_PID"
    left=0
    for kid in "${SG_KIDS[@]}"; do
        state=$(sed 's/.*) //' "/proc/$kid/stat" 2>/dev/null | cut -d' ' -f1 || true)
        if [ -n "$state" ] && [ "$state" != Z ]; then left=$((left + 1)); kill -KILL "$kid" 2>/dev/null || true; fi
    done
    record "{\"part\":\"stdio-peer-stop\",\"children_before\":${#SG_KIDS[@]},\"left_after\":$left}"
    echo "  supergateway stopped (SIGTERM) with ${#SG_KIDS[@]} children; $left of them left after it" >&2
fi

step "5e. churn: $STDIO_CHURN cycles of initialize, one call, DELETE, with a child each"
stdio_config "$OUT/run/stdio-churn.json" 300
serve gate-stdio-churn "${MCPGATE[@]}" --config "$OUT/run/stdio-churn.json"
GATE_SC=$ADDR; GATE_SC_PID=$PID
"$LOAD" cold --url "http://$GATE_SC/mcp" --tool echo --count 1 > /dev/null
wait_no_children "$GATE_SC"
sleep "$SETTLE"
BASE=$(procs "$GATE_SC_PID")
line=$("$LOAD" churn --url "http://$GATE_SC/mcp" --tool echo --cycles "$STDIO_CHURN" --all-delete --quiet-ms "$QUIET_MS" \
    --children-of "$GATE_SC_PID" --sample-pid "$GATE_SC_PID" --samples "$OUT/run/stdio-churn.csv")
wait_no_children "$GATE_SC"
sleep "$SETTLE"
record "{\"part\":\"stdio-churn\",\"result\":$line,\"base\":$BASE,\"end\":$(procs "$GATE_SC_PID"),\"processes\":$(curl -fsS "http://$GATE_SC/status.json" | python3 -c "import json,sys; print(json.dumps(json.load(sys.stdin)['processes']))"),\"status_threads\":$(status_threads "$GATE_SC")}"
echo "  $line" >&2
stop "$GATE_SC_PID"

step "5f. the servers users paste: RSS and PSS of mcpgate and everything below it, with 1 and 10 sessions"
# The six servers of scripts/interop/pasted.sh exactly as their READMEs paste them (npx -y, uvx),
# pinned, from its caches in .interop/pasted/ (warm after interop.sh; else fetched here once), run
# offline; mcpgate with its defaults, so one process per server for every session. One session
# calls a tool of each server, then 10 do and stay open: the tree is read from /proc each time.
# shellcheck source=interop/pasted.sh
. "$ROOT/scripts/interop/pasted.sh"
PASTED_DIR=$OUT/run/pasted
if { pasted_install && pasted_prepare "$PASTED_DIR" "$OUT/run/pasted.json" &&
    pasted_warm "$OUT/run/pasted.json" "$OUT/run/pasted-warm.json"; } > "$OUT/run/pasted-install.log" 2>&1; then
    serve gate-pasted env HOME="$PASTED_HOME" PATH="$(pasted_path)" "${MCPGATE[@]}" --config "$OUT/run/pasted.json"
    GATE_P=$ADDR; GATE_P_PID=$PID
    line=$("$PY" "$ROOT/scripts/interop/pasted_checks.py" footprint --url "http://$GATE_P/mcp" --spec "$PASTED_SPEC" \
        --fs "$PASTED_DIR/fs" --repo "$PASTED_DIR/repo" --gateway-pid "$GATE_P_PID" --sessions 10 2> "$OUT/run/pasted-footprint.err") || true
    versions="$(pasted_packages | paste -sd' '); $(pasted_runners)"
    record "{\"part\":\"pasted-footprint\",\"result\":${line:-null},\"versions\":\"$versions\"}"
    echo "  $(tail -1 "$RESULTS" | cut -c1-400)" >&2
    stop "$GATE_P_PID"
else
    record '{"part":"pasted-footprint","missing":"the servers could not be installed or started here (see .bench/run/pasted-install.log)"}'
fi

step "6. tool search: find_tools at 300 and 3,000 tools, and the bytes of tools/list with and without it"
# The corpus of tests/tool_search.rs (3 servers of 100 real tools), and the
# same with every tool 10 times; each behind mcpgate with the mode on and off.
# tool_search.py imports scripts/interop/checks.py.
TOOL_SEARCH=(env PYTHONPATH="$ROOT/scripts/interop" PYTHONDONTWRITEBYTECODE=1 python3 "$ROOT/scripts/bench/tool_search.py")
for copies in 1 10; do
    "${TOOL_SEARCH[@]}" corpus "$ROOT/fixture/corpus" "$OUT/run/corpus-$copies" "$copies"
    servers=() fixture_pids=()
    for name in dev web work; do
        serve fixture-$name-$copies "$BIN/mcp-fixture" --name "$name" \
            --tools-from "$OUT/run/corpus-$copies/$name.json"
        servers+=("$name=$ADDR"); fixture_pids+=("$PID")
    done
    "${TOOL_SEARCH[@]}" config "$OUT/run/search-on-$copies.json" true "${servers[@]}"
    "${TOOL_SEARCH[@]}" config "$OUT/run/search-off-$copies.json" false "${servers[@]}"
    serve gate-search-on-$copies "${MCPGATE[@]}" --config "$OUT/run/search-on-$copies.json"
    GATE_ON=$ADDR; GATE_ON_PID=$PID
    serve gate-search-off-$copies "${MCPGATE[@]}" --config "$OUT/run/search-off-$copies.json"
    GATE_OFF=$ADDR; GATE_OFF_PID=$PID
    sizes=$("${TOOL_SEARCH[@]}" sizes "http://$GATE_OFF/mcp" "http://$GATE_ON/mcp")
    line=$("$LOAD" calls --url "http://$GATE_ON/mcp" --tool find_tools --args '{"query": "create a pull request"}' \
        --clients 1 --seconds "$SECONDS_PER_POINT")
    index=$(curl -fsS "http://$GATE_ON/status.json" | python3 -c "import json,sys; print(json.dumps(json.load(sys.stdin)['tool_search']))")
    record "{\"part\":\"tool-search\",\"tools\":$((300 * copies)),\"result\":$line,\"sizes\":$sizes,\"status\":$index}"
    echo "  $((300 * copies)) tools: $line $sizes" >&2
    stop "$GATE_ON_PID"; stop "$GATE_OFF_PID"
    for pid in "${fixture_pids[@]}"; do stop "$pid"; done
done

# --------------------------------------------------------- 7. the session store
step "7. the session store: initialize and a call alone, with state_dir, and with Redis (redis-server on loopback)"
install_debian "$OUT/apt.log" redis-server=redis-server
REDIS_PORT=$(free_port)
start redis redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --requirepass bench --save "" --appendonly no
REDIS_PID=$PID
wait_for 10 "redis-server answering" redis-cli -p "$REDIS_PORT" -a bench --no-auth-warning PING
serve fixture-store "$BIN/mcp-fixture" --name a
FIX_STORE=$ADDR; FIX_STORE_PID=$PID
if [ $MODE = full ]; then STORE_INITS=500; STORE_CALLS=5000; else STORE_INITS=50; STORE_CALLS=300; fi
for round in $(seq "$ROUNDS"); do
    for store in alone state_dir redis; do
        gate_config "$OUT/run/store-$store.json" 300 "a=$FIX_STORE"
        rm -rf "$OUT/run/store-dir"
        case $store in
            state_dir) extra="\"instance_id\": \"gw-a\", \"state_dir\": \"$OUT/run/store-dir\"," ;;
            redis) extra="\"instance_id\": \"gw-a\", \"store\": \"redis://:bench@127.0.0.1:$REDIS_PORT/0\"," ;;
            *) extra="" ;;
        esac
        sed -i "s|^{|{$extra|" "$OUT/run/store-$store.json"
        serve gate-store-$store "${MCPGATE[@]}" --config "$OUT/run/store-$store.json"
        GATE_STORE=$ADDR; GATE_STORE_PID=$PID
        line=$(python3 "$ROOT/scripts/bench/store_cost.py" --url "http://$GATE_STORE/mcp" \
            --initializes "$STORE_INITS" --calls "$STORE_CALLS" --tool echo)
        record "{\"part\":\"store\",\"store\":\"$store\",\"round\":$round,\"result\":$line}"
        echo "  round $round, $store: $line" >&2
        stop "$GATE_STORE_PID"
    done
done
stop "$FIX_STORE_PID"; stop "$REDIS_PID"

# ------------------------------------------------------------------ report
step "report"
python3 "$ROOT/scripts/bench/report.py" "$RESULTS" "$OUT/churn.csv" "$MODE" \
    --versions "mcpgate $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown), fastmcp $FASTMCP_VERSION, mcp (Python SDK) 2.3.0, supergateway $SUPERGATEWAY_VERSION (Node $("$NODE" --version 2>/dev/null || echo missing))" \
    --command "scripts/bench.sh${1:+ $1}"
