# shellcheck shell=bash
# Servers of the old HTTP+SSE transport, for scripts/interop.sh (sourced there: it uses start, stop,
# wait_for and wait_port of scripts/lib.sh, interop.sh's check_loopback, stop_mcpgate, run and row,
# and its variables).
#
# One mcpgate in front of server-everything in its `sse` mode and the Python SDK server on its
# `sse_app` (py_server.py --sse), both `"type": "sse"`, beside mcp-fixture over Streamable HTTP and
# over stdio. The official Python client (sse_checks.py) and the TypeScript SDK client
# (sse_client.cjs) call, get progress, answer sampling, elicitation and roots, see a log message, a
# list change and a cancel reach the server. Then the lifecycle, counted at the servers: each
# HTTP+SSE session is one stream, and server-everything logs `Client Connected` and `Client
# Disconnected` for each, py_server.py counts its own in /stats. After a client DELETE (the Python
# client's exit), idle eviction (the TypeScript client leaves without DELETE), a reload that
# removes the two servers and SIGTERM, every stream mcpgate opened is closed at the servers, and
# /proc/<mcpgate>/task holds no reader of theirs. 25 to 50 s on 2 cores.

sse_step() {
    local section="HTTP+SSE servers" rc=0
    start sse-everything env PORT=0 LOOPBACK_ANNOUNCE=1 node --require "$LOOPBACK" "$EVERYTHING" sse
    local ev_pid=$PID
    start sse-py "$VPY" "$HERE/py_server.py" --sse
    local py_pid=$PID
    start sse-fixture "$FIXTURE" --name fx
    local fx_pid=$PID
    local ev_port py_port fx_port
    ev_port=$(wait_port sse-everything "$ev_pid" "$RUN/sse-everything.err")
    py_port=$(wait_port sse-py "$py_pid" "$RUN/sse-py.out")
    fx_port=$(wait_port sse-fixture "$fx_pid" "$RUN/sse-fixture.out")
    # sse_config IDLE_SECS [without-sse]: the config, with or without the two HTTP+SSE servers.
    sse_config() {
        local old=""
        [[ ${2:-} == without-sse ]] || old="
    \"everything\": { \"type\": \"sse\", \"url\": \"http://127.0.0.1:$ev_port/sse\" },
    \"pysse\": { \"type\": \"sse\", \"url\": \"http://127.0.0.1:$py_port/sse\" },"
        cat >"$RUN/mcpgate-sse.json" <<EOF
{
  "listen": "127.0.0.1:0",
  "session_idle_timeout_secs": $1,
  "keepalive_secs": 1,
  "mcpServers": {$old
    "fx": { "url": "http://127.0.0.1:$fx_port/mcp" },
    "fxs": { "command": "$FIXTURE", "args": ["--stdio", "--name", "fxs"] }
  }
}
EOF
    }
    sse_config 3
    start mcpgate-sse "$MCPGATE" --config "$RUN/mcpgate-sse.json"
    local gw_pid=$PID gw_port mcpgate_pid
    gw_port=$(wait_port mcpgate-sse "$gw_pid" "$RUN/mcpgate-sse.out")
    # $gw_pid is `timeout`'s (see start); mcpgate is its child.
    mcpgate_pid=$(pgrep -P "$gw_pid" -x mcpgate || true)
    [[ -n $mcpgate_pid ]] || mcpgate_pid=$gw_pid
    local url="http://127.0.0.1:$gw_port/mcp"
    echo "server-everything (sse) :$ev_port, py_server.py --sse :$py_port, mcp-fixture :$fx_port, mcpgate :$gw_port"
    check_loopback sse-py "$py_pid" "$py_port"

    # The servers' own count of streams: `opened closed` each, server-everything's then pysse's.
    sse_counts() {
        local ev_in ev_out py
        ev_in=$(grep -c 'Client Connected:' "$RUN/sse-everything.err" || true)
        ev_out=$(grep -c 'Client Disconnected:' "$RUN/sse-everything.err" || true)
        py=$(curl -fsS -m 5 "http://127.0.0.1:$py_port/stats" || echo '{}')
        py=$(timeout 10 "$VPY" -c 'import json,sys; s=json.loads(sys.argv[1]); print(s.get("sse_opened",-1), s.get("sse_closed",-2))' "$py")
        echo "$ev_in $ev_out $py"
    }
    # mcpgate's reader threads now, from /proc/<pid>/task/*/comm.
    sse_readers() {
        { grep -l '^mcpgate-reader' /proc/"$mcpgate_pid"/task/*/comm 2>/dev/null || true; } | wc -l
    }
    # sse_all_closed: both servers counted as many closed as opened, and opened some.
    # shellcheck disable=SC2317 # called through wait_for
    sse_all_closed() {
        local c
        read -r -a c <<<"$(sse_counts)"
        ((c[0] > 0 && c[0] == c[1] && c[2] > 0 && c[2] == c[3]))
    }
    # sse_open N: both servers hold N streams open.
    # shellcheck disable=SC2317 # called through wait_for
    sse_open() {
        local c
        read -r -a c <<<"$(sse_counts)"
        ((c[0] - c[1] == $1 && c[2] - c[3] == $1))
    }
    # sse_readers_are N: mcpgate runs N reader threads.
    # shellcheck disable=SC2317 # called through wait_for
    sse_readers_are() { (($(sse_readers) == $1)); }
    # sse_closed_row HOW READERS: a row: every stream closed at both servers, READERS readers left.
    sse_closed_row() {
        local how=$1 want=$2 ok=1 c readers
        wait_for 15 "$how: every stream closed at the servers" sse_all_closed || ok=0
        wait_for 10 "$how: $want reader threads in /proc" sse_readers_are "$want" || ok=0
        read -r -a c <<<"$(sse_counts)"
        readers=$(sse_readers)
        row "$section" "$how: every HTTP+SSE stream mcpgate opened is closed at the servers, readers joined" "$ok" \
            "server-everything: ${c[0]} connected, ${c[1]} disconnected; pysse: ${c[2]} opened, ${c[3]} closed; mcpgate readers in /proc: $readers (want $want)"
        echo "  $how: server-everything ${c[0]}/${c[1]}, pysse ${c[2]}/${c[3]} (opened/closed), readers $readers"
    }
    sse_status() {
        curl -fsS -m 5 "http://127.0.0.1:$gw_port/status.json" | timeout 10 "$VPY" -c "import json,sys; s=json.load(sys.stdin); print($1)"
    }

    run timeout 120 "$VPY" "$HERE/sse_checks.py" checks --url "$url" --json "$RUN/sse_checks.json" || rc=$?
    if [[ -f $RUN/sse_checks.json ]]; then
        timeout 60 "$VPY" "$HERE/report.py" checks --json "$RUN/sse_checks.json" --section "$section" --out "$RESULTS"
    fi
    ((rc == 0 || rc == 1)) || row "$section" "sse_checks.py ran to its end" 0 "exit status $rc (124: timed out)"
    sse_closed_row "client DELETE (the Python client's exit)" 0
    echo "  $(sse_status '"deleted by client", s["sessions"]["deleted_by_client"]')"

    rc=0
    CLIENTS_DIR=$CLIENTS run timeout 120 node "$HERE/sse_client.cjs" --url "$url" --json "$RUN/sse_client.json" || rc=$?
    if [[ -f $RUN/sse_client.json ]]; then
        timeout 60 "$VPY" "$HERE/report.py" checks --json "$RUN/sse_client.json" --section "$section" --out "$RESULTS"
    fi
    ((rc == 0 || rc == 1)) || row "$section" "sse_client.cjs ran to its end" 0 "exit status $rc (124: timed out)"
    # Left without DELETE: evicted after session_idle_timeout_secs (3), once a keep-alive on its
    # GET stream failed (keepalive_secs 1).
    sse_closed_row "idle eviction (the TypeScript client left without DELETE)" 0
    echo "  $(sse_status '"evicted idle", s["sessions"]["evicted_idle"]')"

    # Sessions that stay (no idle eviction now), then a reload without the two servers.
    sse_config 300
    kill -HUP "$mcpgate_pid"
    sleep 0.5
    timeout 60 "$VPY" "$HERE/sse_checks.py" hold --url "$url" --sessions 3 >"$RUN/sse-hold.out" 2>&1 || true
    wait_for 15 "three sessions open at each HTTP+SSE server" sse_open 3 || true
    echo "  3 sessions held: $(sse_counts) (opened/closed), readers $(sse_readers)"
    sse_config 300 without-sse
    kill -HUP "$mcpgate_pid"
    # What stays: the reader of each session's Streamable HTTP downstream session (fx).
    sse_closed_row "reload without the two servers" 3

    # Back, three sessions more, and SIGTERM.
    sse_config 300
    kill -HUP "$mcpgate_pid"
    sleep 0.5
    timeout 60 "$VPY" "$HERE/sse_checks.py" hold --url "$url" --sessions 3 >>"$RUN/sse-hold.out" 2>&1 || true
    wait_for 15 "three sessions open at each HTTP+SSE server again" sse_open 3 || true
    echo "  3 sessions held: $(sse_counts) (opened/closed), readers $(sse_readers)"
    stop_mcpgate mcpgate-sse "$gw_pid" "$section"
    sse_closed_row "SIGTERM" 0
    stop "$fx_pid"
    stop "$py_pid"
    stop "$ev_pid"
}
