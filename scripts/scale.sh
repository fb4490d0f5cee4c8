#!/usr/bin/env bash
# Scale-out test with the real engines: three mcpgate instances (instance_id
# gw-a, gw-b, gw-c) sharing their sessions through Debian's redis-server (on
# loopback, with a password) or one state_dir, behind HAProxy and behind
# nginx, using config/haproxy.cfg and config/nginx.conf with only their
# addresses changed; two mcp-fixture servers behind them; clients of the
# official Python SDK (`mcp` 2.3.0) and of the TypeScript SDK
# (@modelcontextprotocol/sdk 1.32.2) calling a tool every 0.25 s and holding
# GET streams.
#
# Scenarios (each with fresh instances and servers):
#   haproxy-redis-kill, nginx-redis-kill, haproxy-files-kill: kill -9 of
#     gw-b: no client initializes again, each keeps its session id, and no
#     call fails but those in flight at the kill (counted);
#   haproxy-redis-stop: SIGSTOP of gw-a for 2.5 leases, then SIGCONT: the
#     same, and the servers saw no call more than the clients made;
#   haproxy-redis-outage: redis-server stopped and started during the load:
#     the sessions held go on, a new initialize gets 503 naming the store
#     while it is down and 200 once it is back, without a restart.
# Each ends with DELETEs == initializes at every server, none repeated.
#
#   scripts/scale.sh            60 clients, 20 s + 20 s per scenario (by hand)
#   scripts/scale.sh --smoke    15 clients, 6 s + 8 s (CI; a few minutes)
#   scripts/scale.sh --only haproxy|nginx|SCENARIO
#
# Installs haproxy, nginx-light and redis-server from Debian's packages when
# missing (root, apt-get, bounded), and the Python SDK's venv of
# scripts/pinned.sh when missing (.interop/venv; SCALE_VENV names another).
# Everything listens on 127.0.0.1; every process started here is stopped by
# its PID.
set -euo pipefail

ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
HERE=$ROOT/scripts/scale
cd "$ROOT"

MODE=full
ONLY=
while (($#)); do
    case $1 in
    --smoke) MODE=smoke ;;
    --only) ONLY=${2:?--only needs haproxy, nginx or a scenario}; shift ;;
    *) echo "usage: scripts/scale.sh [--smoke] [--only haproxy|nginx|SCENARIO]" >&2; exit 2 ;;
    esac
    shift
done
if [[ $MODE == smoke ]]; then
    CLIENTS=15 TS_CLIENTS=5 STEADY=6 AFTER=8 IDLE=4
else
    CLIENTS=60 TS_CLIENTS=15 STEADY=20 AFTER=20 IDLE=10
fi
LEASE_MS=2000

TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
[[ $TARGET_DIR == /* ]] || TARGET_DIR=$ROOT/$TARGET_DIR
MCPGATE=$TARGET_DIR/debug/mcpgate
FIXTURE=$TARGET_DIR/debug/mcp-fixture
# The Python SDK's venv and its pins (VENV, PY_PINS), as interop.sh's: scripts/pinned.sh.
# shellcheck source=pinned.sh
. "$ROOT/scripts/pinned.sh"
VENV=${SCALE_VENV:-$VENV}
VPY=$VENV/bin/python
OUT=$ROOT/.scale
export NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost
export MCPGATE_LOG=${MCPGATE_LOG:-info}
export PYTHONDONTWRITEBYTECODE=1

T0=$SECONDS
step() { printf '\n== %s  (%ds)\n' "$*" "$((SECONDS - T0))"; }
FAILS=0
check() { # check OK TEXT
    if [[ $1 == 1 ]]; then echo "PASS  $2"; else echo "FAIL  $2"; FAILS=$((FAILS + 1)); fi
}

# --- processes -------------------------------------------------------------------------------

# start, stop, wait_for, wait_port, free_ports, stop_started and stop_all on exit: scripts/lib.sh.
# Every process runs under `timeout`; its output goes to the balancer's run directory (LOG_DIR).
SCRIPT=scale.sh LIFETIME=900
# shellcheck source=lib.sh
. "$ROOT/scripts/lib.sh"

# answers URL: it answers 200.
answers() { curl -fsS --max-time 2 -o /dev/null "$1" 2>/dev/null; }
# dead PID: no such process (PID need not be our child: mcpgate runs under `timeout`).
dead() { ! kill -0 "$1" 2>/dev/null; }

# --- installs --------------------------------------------------------------------------------

install_engines() {
    install_debian "$OUT/apt.log" haproxy=haproxy nginx=nginx-light redis-server=redis-server
}

# --- redis-server: loopback, a password, its data on disk (appendonly) so a stop and start keep it

REDIS_PW=scale-$RANDOM$RANDOM
start_redis() {
    mkdir -p "$OUT/redis"
    LOG_DIR=$OUT/redis start redis redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --requirepass "$REDIS_PW" \
        --dir "$OUT/redis" --appendonly yes --appendfsync always --save ""
    REDIS_PID=$PID
    # Not one of a scenario's processes: it outlives each, and on_exit stops it.
    PIDS=("${PIDS[@]:0:${#PIDS[@]}-1}")
    wait_for 20 "redis-server answering" redis_cli PING
}
on_exit() { [[ -z ${REDIS_PID:-} ]] || stop "$REDIS_PID"; }
redis_cli() { redis-cli -p "$REDIS_PORT" -a "$REDIS_PW" --no-auth-warning "$@" >/dev/null 2>&1; }
stop_redis() { # by its PID: SIGTERM, which makes it write its data
    local pid
    pid=$(pgrep -P "$REDIS_PID" -x redis-server || echo "$REDIS_PID")
    kill "$pid" 2>/dev/null || true
    wait_for 20 "redis-server stopped" dead "$pid" || true
}

# --- one balancer ----------------------------------------------------------------------------

# gate_config ID PORT: the config of one instance, its sessions in Redis or in the run's state_dir (STORE).
gate_config() {
    local store="\"state_dir\": \"$RUN/state\""
    [[ $STORE == redis ]] && store="\"store\": \"redis://:$REDIS_PW@127.0.0.1:$REDIS_PORT/0\", \"store_lease_ms\": $LEASE_MS"
    cat >"$RUN/$1.json" <<EOF
{
  "listen": "127.0.0.1:$2",
  "instance_id": "$1",
  $store,
  "session_idle_timeout_secs": $SCENARIO_IDLE,
  "delete_timeout_secs": 2,
  "mcpServers": {
    "alpha": { "url": "http://127.0.0.1:$ALPHA/mcp" },
    "beta": { "url": "http://127.0.0.1:$BETA/mcp" }
  }
}
EOF
}

start_gate() { # start_gate ID PORT: sets GATE_PID[ID], the PID of mcpgate itself (not of `timeout`)
    start "$1" "$MCPGATE" --config "$RUN/$1.json"
    wait_port "$1" "$PID" "$RUN/$1.out" >/dev/null
    GATE_PID[$1]=$(pgrep -P "$PID" -x mcpgate)
}

# The shipped config with the addresses of this run.
render() { # render FILE
    sed -e "s/127\.0\.0\.1:8780/127.0.0.1:$LB/" -e "s/127\.0\.0\.1:8781/127.0.0.1:${PORT[gw-a]}/" \
        -e "s/127\.0\.0\.1:8782/127.0.0.1:${PORT[gw-b]}/" -e "s/127\.0\.0\.1:8783/127.0.0.1:${PORT[gw-c]}/" "$1"
}

start_balancer() { # start_balancer haproxy|nginx
    case $1 in
    haproxy)
        render config/haproxy.cfg >"$RUN/haproxy.cfg"
        timeout 20 haproxy -c -q -f "$RUN/haproxy.cfg"
        start haproxy haproxy -db -f "$RUN/haproxy.cfg"
        ;;
    nginx)
        render config/nginx.conf >"$RUN/mcpgate-nginx.conf"
        mkdir -p "$RUN/nginx-tmp"
        chmod 0777 "$RUN/nginx-tmp"
        cat >"$RUN/nginx-main.conf" <<EOF
worker_processes 1;
daemon off;
pid $RUN/nginx.pid;
error_log $RUN/nginx.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $RUN/nginx-tmp/body;
    proxy_temp_path $RUN/nginx-tmp/proxy;
    fastcgi_temp_path $RUN/nginx-tmp/fastcgi;
    uwsgi_temp_path $RUN/nginx-tmp/uwsgi;
    scgi_temp_path $RUN/nginx-tmp/scgi;
    include $RUN/mcpgate-nginx.conf;
}
EOF
        timeout 20 nginx -q -t -p "$RUN" -c "$RUN/nginx-main.conf" -e "$RUN/nginx.log"
        start nginx nginx -p "$RUN" -c "$RUN/nginx-main.conf" -e "$RUN/nginx.log"
        ;;
    esac
    wait_for 20 "$1 answering on :$LB" answers "http://127.0.0.1:$LB/healthz"
}

# fixture_stats NAME PORT: its /stats, one line.
fixture_stats() { curl -fsS --max-time 5 "http://127.0.0.1:$2/stats"; }

# settled: every fixture has DELETEs == initializes and no live session.
settled() {
    local port s
    for port in "$ALPHA" "$BETA"; do
        s=$(fixture_stats x "$port") || return 1
        python3 -c 'import json,sys; s=json.loads(sys.argv[1]); sys.exit(not (s["delete"] == s["initialize"] and s["live_sessions"] == 0))' "$s" || return 1
    done
}

# initialize_at URL: the HTTP status of one initialize there, its body in $RUN/init.body.
initialize_at() {
    curl -sS --max-time 20 -o "$RUN/init.body" -w '%{http_code}' -X POST "$1" \
        -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
        -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"probe","version":"1"}}}' || echo 000
}
initializes() { [[ $(initialize_at "$1") == 200 ]]; }

run_scenario() { # run_scenario NAME: LB-STORE-EVENT, e.g. haproxy-redis-kill
    local name=$1 lb store event ports victim=gw-b
    IFS=- read -r lb store event <<<"$name"
    STORE=$store
    # A pause is not idleness: the sessions of a paused instance must outlive it
    # (past the idle timeout, the peers close them as nobody's).
    SCENARIO_IDLE=$IDLE
    [[ $event == stop ]] && SCENARIO_IDLE=60
    [[ $event == stop ]] && victim=gw-a
    RUN=$OUT/run-$name
    LOG_DIR=$RUN
    rm -rf "$RUN"
    mkdir -p "$RUN/state"
    step "$name: 2 fixtures, 3 mcpgate instances ($store), $lb in front"
    [[ $store == redis ]] && redis-cli -p "$REDIS_PORT" -a "$REDIS_PW" --no-auth-warning FLUSHALL >/dev/null
    start alpha "$FIXTURE" --listen 127.0.0.1:0 --name alpha
    ALPHA=$(wait_port alpha "$PID" "$RUN/alpha.out")
    start beta "$FIXTURE" --listen 127.0.0.1:0 --name beta
    BETA=$(wait_port beta "$PID" "$RUN/beta.out")
    read -r -a ports <<<"$(free_ports 4)"
    declare -gA PORT=([gw-a]=${ports[0]} [gw-b]=${ports[1]} [gw-c]=${ports[2]})
    declare -gA GATE_PID=()
    LB=${ports[3]}
    local id
    for id in gw-a gw-b gw-c; do
        gate_config "$id" "${PORT[$id]}"
        start_gate "$id" "${PORT[$id]}"
    done
    start_balancer "$lb"
    echo "$lb on 127.0.0.1:$LB; gw-a :${PORT[gw-a]} gw-b :${PORT[gw-b]} gw-c :${PORT[gw-c]}; alpha :$ALPHA beta :$BETA"

    # Paused past the clients' call timeout (10 s): they give up the call stuck
    # there and call on through the other instances, which take the sessions over.
    local what="kill -9 $victim" client_event=$event stop_secs=$((LEASE_MS * 6 / 1000)) after=$AFTER
    [[ $event == stop ]] && what="SIGSTOP $victim for ${stop_secs} s (6 leases), then SIGCONT" after=$((AFTER + stop_secs))
    [[ $event == outage ]] && what="redis-server stopped, then started" client_event=none
    step "$name: $CLIENTS clients for ${STEADY} s, then $what, then ${AFTER} s more"
    timeout $((STEADY + after + 120)) "$VPY" "$HERE/clients.py" --url "http://127.0.0.1:$LB/mcp" \
        --clients "$CLIENTS" --steady "$STEADY" --after "$after" --victim-pid "${GATE_PID[$victim]}" \
        --victim-id "$victim" --tool alpha__add --event "$client_event" --stop-secs "$stop_secs" \
        --status "gw-a=http://127.0.0.1:${PORT[gw-a]}/status.json" \
        --status "gw-b=http://127.0.0.1:${PORT[gw-b]}/status.json" \
        --status "gw-c=http://127.0.0.1:${PORT[gw-c]}/status.json" >"$RUN/report.json" 2>"$RUN/clients.err" &
    local driver=$! ended_at outage_down=- outage_up=-
    track "$driver"
    CLIENTS_DIR=$ROOT/.interop/clients timeout $((STEADY + after + 120)) "$NODE_BIN/node" "$HERE/ts_clients.cjs" \
        --url "http://127.0.0.1:$LB/mcp" --clients "$TS_CLIENTS" --steady "$STEADY" --after "$after" \
        --tool alpha__add >"$RUN/ts.json" 2>"$RUN/ts.err" &
    local ts_driver=$!
    track "$ts_driver"
    if [[ $event == outage ]]; then
        sleep "$STEADY"
        stop_redis
        sleep 1
        outage_down=$(initialize_at "http://127.0.0.1:$LB/mcp")
        grep -q 'session store redis' "$RUN/init.body" || outage_down="$outage_down (the answer does not name the store)"
        echo "initialize while redis-server is down: $outage_down: $(head -c 300 "$RUN/init.body")"
        sleep 2
        start_redis
        WAIT_EVERY=0.5 wait_for 20 "an initialize answered 200 again" initializes "http://127.0.0.1:$LB/mcp" \
            && outage_up=200
        echo "initialize once redis-server is back: $outage_up"
    fi
    local rc=0
    wait "$driver" || rc=$?
    wait "$ts_driver" || rc=$?
    ended_at=$SECONDS
    if ((rc != 0)); then
        echo "error: the clients failed (exit $rc); see $RUN/clients.err and ts.err" >&2
        tail -20 "$RUN/clients.err" "$RUN/ts.err" >&2
        check 0 "$name: the clients ran"
        stop_started
        return 0
    fi
    # The probes' sessions are the clients' to close no more: they go when idle.
    step "$name: every downstream session closed"
    local settled_ok=0
    WAIT_EVERY=0.5 wait_for $((3 * SCENARIO_IDLE + 30)) "every downstream session closed" settled && settled_ok=1
    local settle_s=$((SECONDS - ended_at))
    local alpha_s beta_s gates=""
    alpha_s=$(fixture_stats alpha "$ALPHA")
    beta_s=$(fixture_stats beta "$BETA")
    for id in gw-a gw-b gw-c; do
        gates+="$id=$(curl -fsS --max-time 5 "http://127.0.0.1:${PORT[$id]}/status.json" 2>/dev/null | python3 -c 'import json,sys; s=json.load(sys.stdin)["sessions"]; print(",".join(str(s.get(k,0)) for k in ("continued","handed_over","forwarded","claims_lost")))' 2>/dev/null || echo dead) "
    done
    echo "per instance, sessions continued,handed_over,forwarded,claims_lost: $gates"
    if [[ $event == stop ]]; then
        # Waking, the paused instance lets go of what was taken and takes nothing from a live peer.
        local woke=${gates#*"$victim="}
        woke=${woke%% *}
        IFS=, read -r woke_continued woke_handed _ <<<"$woke"
        check "$([[ $woke_continued == 0 && $woke_handed -gt 0 ]] && echo 1 || echo 0)" \
            "$name: $victim, waking, let go of $woke_handed session(s) taken over meanwhile and took $woke_continued from its live peers"
    fi

    step "$name: results"
    python3 - "$name" "$event" "$RUN/report.json" "$alpha_s" "$beta_s" "$settled_ok" "$settle_s" "$outage_down" "$outage_up" "$RUN/ts.json" <<'EOF' | tee "$RUN/checks.txt"
import json, sys
name, event, path, alpha, beta, settled, settle_s, down, up, ts_path = sys.argv[1:]
r = json.load(open(path))
ts = json.load(open(ts_path))
fx = {"alpha": json.loads(alpha), "beta": json.loads(beta)}
print("figures:", json.dumps({k: v for k, v in r.items() if k != "failures_sample"}))
if r["failures_sample"]:
    print("failures seen:", r["failures_sample"])
n = r["clients"]
per = r["sessions_per_instance_at_kill"]
even = n / 3
def check(ok, text):
    print(("PASS  " if ok else "FAIL  ") + f"{name}: {text}")
check(r["failed_before_kill"] == 0 and r["session_not_found_before_kill"] == 0,
      f"before the {event}: {r['calls_before_kill']} calls, {r['failed_before_kill']} failed, "
      f"{r['session_not_found_before_kill']} session not found")
counts = [per.get(i, 0) for i in ("gw-a", "gw-b", "gw-c")]
check(all(even / 2 <= c <= even * 2 for c in counts) and sum(counts) == n,
      f"sessions per instance at the {event} {dict(zip(('gw-a', 'gw-b', 'gw-c'), counts))} (status.json: {r['status_sessions_live_at_kill']})")
check(r["clients_reinitialized"] == 0 and r["clients_kept_their_id"] == n,
      f"no client initialized again ({r['clients_reinitialized']}); {r['clients_kept_their_id']} of {n} kept their session id")
# At most the victim's clients had a call in flight at a kill or a pause; none elsewhere.
bound = r["victim_clients"] if event in ("kill", "stop") else 0
check(r["calls_failed_after"] <= bound and r["other_calls_failed"] == 0,
      f"after the {event}: {r['calls_failed_after']} call(s) failed, in flight at it (at most {bound}); "
      f"the {r['victim_clients']} clients of {r['victim']}: {r['victim_calls_after']} good calls after; "
      f"the other {r['other_clients']}: {r['other_calls_failed']} failed, {r['other_calls_after']} good")
print("typescript:", json.dumps(ts))
# A TypeScript client's call in flight at a kill or a pause may fail, one per client at most.
check(ts["kept_their_id"] == ts["clients"] and ts["failed_before"] == 0
      and ts["failed_after"] <= (ts["clients"] if event in ("kill", "stop") else 0),
      f"TypeScript SDK: {ts['kept_their_id']} of {ts['clients']} kept their session id; {ts['calls_before']} calls "
      f"before, {ts['calls_after']} after, {ts['failed_before']} + {ts['failed_after']} failed")
served = sum(s["methods"].get("tools/call", 0) for s in fx.values())
made = r["calls_attempted"] + ts["calls_before"] + ts["calls_after"] + ts["failed_before"] + ts["failed_after"]
check(served <= made, f"the servers ran {served} calls for the {made} the clients made: none served twice")
if event == "outage":
    check(down.startswith("503") and "does not" not in down and up == "200",
          f"initialize with redis-server down: {down} (names the store); once it is back: {up}, without a restart")
for fname, s in fx.items():
    check(settled == "1" and s["delete"] == s["initialize"] and s["live_sessions"] == 0 and s["delete_unknown"] == 0,
          f"{fname}: initialize {s['initialize']}, DELETE {s['delete']} (unknown {s['delete_unknown']}), "
          f"live {s['live_sessions']}, all closed within {settle_s} s of the clients' end")
EOF
    FAILS=$((FAILS + $(grep -c '^FAIL' "$RUN/checks.txt" || true)))
    stop_started
    return 0
}

# --- main ------------------------------------------------------------------------------------

mkdir -p "$OUT"
step "build (debug), engines, venv"
(cd "$ROOT" && timeout 900 cargo build --quiet --bin mcpgate --bin mcp-fixture)
install_engines
install_venv "$VENV" "$PY_PINS"
install_node
install_npm "$ROOT/scripts/interop/clients" "$ROOT/.interop/clients"
echo "$(haproxy -v | head -1); $(nginx -v 2>&1); $(redis-server --version | cut -d' ' -f1-3); $("$VPY" -c 'import importlib.metadata as m; print("mcp", m.version("mcp"))')"
echo "mode $MODE: $CLIENTS clients, ${STEADY} s steady, ${AFTER} s after the event, idle timeout ${IDLE} s, lease ${LEASE_MS} ms"
REDIS_PORT=$(free_port)
start_redis
SCENARIOS=(haproxy-redis-kill nginx-redis-kill haproxy-redis-stop haproxy-redis-outage haproxy-files-kill)
for scenario in "${SCENARIOS[@]}"; do
    [[ -z $ONLY || $ONLY == "$scenario" || $scenario == "$ONLY"-* ]] || continue
    run_scenario "$scenario"
done

step "done in $((SECONDS - T0)) s"
if ((FAILS)); then
    echo "FAILED: $FAILS check(s); runs kept in ${OUT#"$ROOT"/}/"
    exit 1
fi
echo "all checks passed"
