#!/usr/bin/env bash
# Scale-out test with the real engines: three mcpgate instances (instance_id
# gw-a, gw-b, gw-c, one shared state_dir) behind HAProxy, then behind nginx,
# using config/haproxy.cfg and config/nginx.conf with only their addresses
# changed; two mcp-fixture servers behind them; clients of the official
# Python SDK (`mcp` 2.3.0) calling a tool in a loop and holding GET streams.
#
# Checks, for each balancer:
#   - every call lands on the instance that owns its session: no "session
#     not found" (404) and no client whose session changed instance, before
#     the kill; sessions per instance within half and twice an even share;
#   - kill -9 of gw-b: each of its clients that noticed initializes again and
#     calls on within a bound; the clients of the other instances lose no call;
#   - HAProxy: gw-b is restarted (it resumes from its state file); nginx:
#     gw-b stays dead and a peer takes over its state. Either way each
#     downstream server ends with DELETEs == initializes, none repeated.
#
#   scripts/scale.sh            60 clients, 20 s + 20 s per balancer (by hand)
#   scripts/scale.sh --smoke    15 clients, 6 s + 8 s (CI; about a minute)
#   scripts/scale.sh --only haproxy|nginx
#
# Installs haproxy and nginx-light from Debian's packages when missing (root,
# apt-get, bounded), and the Python SDK's venv of scripts/pinned.sh when missing
# (.interop/venv; SCALE_VENV names another). Everything listens on 127.0.0.1;
# every process started here is stopped by its PID.
set -euo pipefail

ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
HERE=$ROOT/scripts/scale
cd "$ROOT"

MODE=full
ONLY=
while (($#)); do
    case $1 in
    --smoke) MODE=smoke ;;
    --only) ONLY=${2:?--only needs haproxy or nginx}; shift ;;
    *) echo "usage: scripts/scale.sh [--smoke] [--only haproxy|nginx]" >&2; exit 2 ;;
    esac
    shift
done
if [[ $MODE == smoke ]]; then
    CLIENTS=15 STEADY=6 AFTER=8 IDLE=4
else
    CLIENTS=60 STEADY=20 AFTER=20 IDLE=10
fi
RECOVER_BOUND=10 # seconds from a client's first failed call to its next good one

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
    install_debian "$OUT/apt.log" haproxy=haproxy nginx=nginx-light
}

# --- one balancer ----------------------------------------------------------------------------

# gate_config ID PORT: the config of one instance.
gate_config() {
    cat >"$RUN/$1.json" <<EOF
{
  "listen": "127.0.0.1:$2",
  "instance_id": "$1",
  "state_dir": "$RUN/state",
  "session_idle_timeout_secs": $IDLE,
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

run_balancer() { # run_balancer haproxy|nginx
    local lb=$1 ports victim=gw-b
    RUN=$OUT/run-$lb
    LOG_DIR=$RUN
    rm -rf "$RUN"
    mkdir -p "$RUN/state"
    step "$lb: 2 fixtures, 3 mcpgate instances, $lb in front"
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

    step "$lb: $CLIENTS clients for ${STEADY} s, then kill -9 $victim, then ${AFTER} s more"
    timeout $((STEADY + AFTER + 120)) "$VPY" "$HERE/clients.py" --url "http://127.0.0.1:$LB/mcp" \
        --clients "$CLIENTS" --steady "$STEADY" --after "$AFTER" --victim-pid "${GATE_PID[$victim]}" \
        --victim-id "$victim" --tool alpha__add \
        --status "gw-a=http://127.0.0.1:${PORT[gw-a]}/status.json" \
        --status "gw-b=http://127.0.0.1:${PORT[gw-b]}/status.json" \
        --status "gw-c=http://127.0.0.1:${PORT[gw-c]}/status.json" >"$RUN/report.json" 2>"$RUN/clients.err" &
    local driver=$! ended_at
    track "$driver"
    # HAProxy: gw-b comes back a second after its kill, with its state file.
    if [[ $lb == haproxy ]]; then
        wait_for $((STEADY + 60)) "the kill of $victim" dead "${GATE_PID[$victim]}" || true
        sleep 1
        mv "$RUN/$victim.err" "$RUN/$victim.killed.err"
        start_gate "$victim" "${PORT[$victim]}"
        echo "$victim restarted on its port, with its state file"
    fi
    local rc=0
    wait "$driver" || rc=$?
    ended_at=$SECONDS
    if ((rc != 0)); then
        echo "error: the clients failed (exit $rc); see $RUN/clients.err" >&2
        tail -20 "$RUN/clients.err" >&2
        check 0 "$lb: the clients ran"
        stop_started
        return 0
    fi

    step "$lb: every downstream session closed ($( [[ $lb == haproxy ]] && echo "gw-b restarted" || echo "gw-b stays dead: a peer takes over its state"))"
    local settled_ok=0
    WAIT_EVERY=0.5 wait_for $((3 * IDLE + 30)) "every downstream session closed" settled && settled_ok=1
    # From the kill: the clients ran on for AFTER seconds after it.
    local settle_s=$((SECONDS - ended_at + ${AFTER%.*}))
    local alpha_s beta_s
    alpha_s=$(fixture_stats alpha "$ALPHA")
    beta_s=$(fixture_stats beta "$BETA")
    local adopted
    adopted=$(grep -ho "peer .$victim.: down .*" "$RUN"/gw-*.err 2>/dev/null | head -2 || true)
    echo "taken over: ${adopted:-no peer took over (gw-b resumed its own)}"
    echo "state_dir: $(find "$RUN/state" -mindepth 1 -printf '%f\n' | sort | paste -sd' ')"

    step "$lb: results"
    python3 - "$lb" "$RUN/report.json" "$alpha_s" "$beta_s" "$settled_ok" "$settle_s" "$RECOVER_BOUND" <<'EOF' | tee "$RUN/checks.txt"
import json, sys
lb, path, alpha, beta, settled, settle_s, bound = sys.argv[1:]
r = json.load(open(path))
fx = {"alpha": json.loads(alpha), "beta": json.loads(beta)}
print("figures:", json.dumps({k: v for k, v in r.items() if k != "failures_sample"}))
if r["failures_sample"]:
    print("failures seen:", r["failures_sample"])
n = r["clients"]
per = r["sessions_per_instance_at_kill"]
even = n / 3
def check(ok, text):
    print(("PASS  " if ok else "FAIL  ") + f"{lb}: {text}")
check(r["failed_before_kill"] == 0 and r["session_not_found_before_kill"] == 0,
      f"before the kill: {r['calls_before_kill']} calls, {r['failed_before_kill']} failed, "
      f"{r['session_not_found_before_kill']} session not found")
check(r["clients_moved_before_kill"] == 0, f"no session changed instance before the kill ({r['clients_moved_before_kill']})")
counts = [per.get(i, 0) for i in ("gw-a", "gw-b", "gw-c")]
check(all(even / 2 <= c <= even * 2 for c in counts) and sum(counts) == n,
      f"sessions per instance at the kill {dict(zip(('gw-a', 'gw-b', 'gw-c'), counts))} (status.json: {r['status_sessions_live_at_kill']})")
failed_victims = r["victim_clients_recovered"]
check(r["victim_clients"] > 0 and r["victim_clients_unrecovered"] == 0 and (r["recover_max_s"] is None or r["recover_max_s"] <= float(bound)),
      f"kill -9 gw-b: its {r['victim_clients']} clients: {r['victim_calls_failed']} calls failed, "
      f"{r['victim_clients_recovered']} initialized again, recovered in max {r['recover_max_s']} s "
      f"(median {r['recover_median_s']} s), {r['victim_calls_after']} good calls after; now on {r['victim_clients_now_on']}")
check(r["other_calls_failed"] == 0,
      f"the other {r['other_clients']} clients: {r['other_calls_failed']} calls failed, {r['other_calls_after']} good calls after the kill")
for name, s in fx.items():
    check(settled == "1" and s["delete"] == s["initialize"] and s["live_sessions"] == 0 and s["delete_unknown"] == 0,
          f"{name}: initialize {s['initialize']}, DELETE {s['delete']} (unknown {s['delete_unknown']}), "
          f"live {s['live_sessions']}, all closed within {settle_s} s of the kill")
EOF
    FAILS=$((FAILS + $(grep -c '^FAIL' "$RUN/checks.txt" || true)))
    stop_started
}

# --- main ------------------------------------------------------------------------------------

mkdir -p "$OUT"
step "build (debug), engines, venv"
(cd "$ROOT" && timeout 900 cargo build --quiet --bin mcpgate --bin mcp-fixture)
install_engines
install_venv "$VENV" "$PY_PINS"
echo "$(haproxy -v | head -1); $(nginx -v 2>&1); $("$VPY" -c 'import importlib.metadata as m; print("mcp", m.version("mcp"))')"
echo "mode $MODE: $CLIENTS clients, ${STEADY} s steady, ${AFTER} s after the kill, idle timeout ${IDLE} s"

for lb in haproxy nginx; do
    [[ -z $ONLY || $ONLY == "$lb" ]] || continue
    run_balancer "$lb"
done

step "done in $((SECONDS - T0)) s"
if ((FAILS)); then
    echo "FAILED: $FAILS check(s); runs kept in ${OUT#"$ROOT"/}/"
    exit 1
fi
echo "all checks passed"
