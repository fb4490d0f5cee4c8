# shellcheck shell=bash
# The client matrix of scripts/interop.sh (sourced there: it uses start, stop, track,
# wait_for and wait_port of scripts/lib.sh, interop.sh's check_loopback, stop_mcpgate and row, and
# its variables).
#
# Nine clients, each run directly against server-everything, the Python SDK server
# (py_server.py) and the FastMCP server (fm_server.py), then through one mcpgate in front of
# the three. Those that negotiate an era (the Python SDK 2.x, fastmcp, the TypeScript SDK v2
# client and rmcp, in their `auto` modes) must land through mcpgate in the era they land in
# directly; the Python SDK 2.x pinned to 2026-07-28 is served whatever its servers speak. Each client talks through a tap of its own (tap.py), which writes down what it
# sent and what it got: DELETE and the opening sequences are judged from there, and every
# message mcpgate sent is validated against the TypeScript SDK's schemas (validate.cjs).
# Then each client's opening sequence, against server-everything and mcpgate, and against an
# mcpgate that wants a token it was not given (what does it ask for on 401?).
#
# Clients run in lanes, in parallel (most of a client's time is waiting); a client's own
# targets run one after the other.

MATRIX_TOKEN=interop-matrix-token-0123456789ab # 32 characters; given to no client on purpose
MATRIX_LANES=(
    "inspector-cli python-sdk-2.x rmcp"
    "typescript-sdk python-sdk-1.x typescript-sdk-2"
    "mcp-remote fastmcp python-sdk-2.x-pinned"
)
read -ra MATRIX_CLIENTS <<<"${MATRIX_LANES[*]}"

# matrix_command CLIENT: the command line that runs CLIENT's flow (flow.py's arguments follow).
matrix_command() {
    case $1 in
    typescript-sdk) echo "node $HERE/ts_client.cjs" ;;
    inspector-cli) echo "$VPY $HERE/client_inspector.py" ;;
    mcp-remote) echo "$VPY $HERE/client_mcp_remote.py" ;;
    python-sdk-1.x) echo "$VPY1 $HERE/client_py1.py" ;;
    python-sdk-2.x) echo "$VPY $HERE/client_py2.py" ;;
    python-sdk-2.x-pinned) echo "env MATRIX_MODE=2026-07-28 $VPY $HERE/client_py2.py" ;;
    typescript-sdk-2) echo "env MATRIX_TS_SDK=2 node $HERE/ts_client.cjs" ;;
    fastmcp) echo "$VPY $HERE/client_fastmcp.py" ;;
    rmcp) echo "$VPY $HERE/client_rmcp.py" ;;
    esac
}

# tap_port FILE NAME: the port of the tap listener NAME (tap.py's `listening on 127.0.0.1:PORT NAME`).
tap_port() {
    local file=$1 name=$2
    local line="^listening on 127\.0\.0\.1:([0-9]+) $name\$"
    wait_for 30 "tap listener $name announcing a port; see $file" grep -qE "$line" "$file" || return 1
    sed -nE "s/$line/\1/p" "$file" | head -1
}

# matrix_lane CLIENT...: in a subshell of its own, for each CLIENT: the four matrix runs, then
# the three opening runs, each bounded by `timeout`. A signal ends the run under way.
matrix_lane() {
    local client target tap url label cmd child=
    trap '[[ -n $child ]] && kill -TERM "$child" 2>/dev/null; exit 143' TERM INT
    for client in "$@"; do
        tap=$MX/taps/$client.tap.out
        cmd=$(matrix_command "$client")
        for target in direct:everything direct:py direct:fm mcpgate; do
            label=${target/:/-}
            url=http://127.0.0.1:$(tap_port "$tap" "$label")/mcp
            echo "[$client -> $target]" >"$MX/logs/$client--$label.log"
            # shellcheck disable=SC2086 # cmd is a command line
            timeout 120 $cmd --url "$url" --target "$target" --out "$MX/runs/$client--$label.json" \
                >>"$MX/logs/$client--$label.log" 2>&1 &
            child=$!
            wait "$child" || echo "($client -> $target: exit status $?)" >>"$MX/logs/$client--$label.log"
        done
        # Opening sequences: initialize and list tools with the client's defaults (the Python 2.x
        # SDK and fastmcp probe with server/discover in their default "auto" mode).
        timeout 10 curl -sf -X POST --data "open--$client" "http://127.0.0.1:$(tap_port "$tap" mcpgate)/__tap/mark" >/dev/null
        for target in direct-everything mcpgate auth; do
            url=http://127.0.0.1:$(tap_port "$tap" "$target")/mcp
            # shellcheck disable=SC2086
            MATRIX_OPEN_ONLY=1 MATRIX_MODE=auto timeout 20 $cmd --url "$url" \
                --target "$([[ $target == direct-everything ]] && echo direct:everything || echo mcpgate)" \
                --out "$MX/open/$client--$target.json" >"$MX/logs/open--$client--$target.log" 2>&1 &
            child=$!
            wait "$child" || true # the run against `auth` fails: that is its point
        done
    done
}

matrix_step() {
    MX=$RUN/matrix
    mkdir -p "$MX/runs" "$MX/taps" "$MX/logs" "$MX/open"
    start matrix-everything env PORT=0 LOOPBACK_ANNOUNCE=1 GZIP_ALLOWED_DOMAINS=127.0.0.1 \
        node --require "$LOOPBACK" "$EVERYTHING" streamableHttp
    local ev_pid=$PID
    start matrix-py-server "$VPY" "$HERE/py_server.py"
    local py_pid=$PID
    start matrix-fm-server "$VPY" "$HERE/fm_server.py"
    local fm_pid=$PID
    local ev_port py_port fm_port gw_port gwa_port
    ev_port=$(wait_port matrix-everything "$ev_pid" "$RUN/matrix-everything.err")
    py_port=$(wait_port matrix-py-server "$py_pid" "$RUN/matrix-py-server.out")
    fm_port=$(wait_port matrix-fm-server "$fm_pid" "$RUN/matrix-fm-server.out")
    local servers="\"everything\": { \"url\": \"http://127.0.0.1:$ev_port/mcp\" },
    \"py\": { \"url\": \"http://127.0.0.1:$py_port/mcp\" },
    \"fm\": { \"url\": \"http://127.0.0.1:$fm_port/mcp\" }"
    # A small page size: every client walks mcpgate's merged lists over several pages.
    printf '{\n  "listen": "127.0.0.1:0",\n  "page_size": 7,\n  "mcpServers": {\n    %s\n  }\n}\n' "$servers" \
        >"$RUN/mcpgate-matrix.json"
    printf '{\n  "listen": "127.0.0.1:0",\n  "auth": { "tokens": [{ "token": "%s" }] },\n  "mcpServers": {\n    %s\n  }\n}\n' \
        "$MATRIX_TOKEN" "$servers" >"$RUN/mcpgate-matrix-auth.json"
    start mcpgate-matrix "$MCPGATE" --config "$RUN/mcpgate-matrix.json"
    local gw_pid=$PID
    start mcpgate-matrix-auth "$MCPGATE" --config "$RUN/mcpgate-matrix-auth.json"
    local gwa_pid=$PID
    gw_port=$(wait_port mcpgate-matrix "$gw_pid" "$RUN/mcpgate-matrix.out")
    gwa_port=$(wait_port mcpgate-matrix-auth "$gwa_pid" "$RUN/mcpgate-matrix-auth.out")
    echo "server-everything :$ev_port, py-server :$py_port, fm-server :$fm_port, mcpgate :$gw_port (with auth :$gwa_port)"
    check_loopback fm-server "$fm_pid" "$fm_port"

    # A tap per client, a listener per target.
    local client lane tap_pids=() lane_pids=()
    for client in "${MATRIX_CLIENTS[@]}"; do
        start "matrix-tap-$client" "$VPY" "$HERE/tap.py" --dir "$MX/taps" --label "$client" \
            --upstream "direct-everything=http://127.0.0.1:$ev_port" --upstream "direct-py=http://127.0.0.1:$py_port" \
            --upstream "direct-fm=http://127.0.0.1:$fm_port" --upstream "mcpgate=http://127.0.0.1:$gw_port" \
            --upstream "auth=http://127.0.0.1:$gwa_port"
        tap_pids+=("$PID")
        ln -sf "$RUN/matrix-tap-$client.out" "$MX/taps/$client.tap.out"
    done
    export CLIENTS_DIR=$CLIENTS NODE=$NODE_BIN/node MCP_REMOTE_BIN=$CLIENTS/node_modules/mcp-remote/dist/proxy.js \
        INSPECTOR_BIN=$CLIENTS/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js \
        MCP_REMOTE_LOG=$MX/logs/mcp-remote.stderr
    local t_matrix=$SECONDS
    for lane in "${MATRIX_LANES[@]}"; do
        # shellcheck disable=SC2086 # a lane is a list of clients
        matrix_lane $lane &
        lane_pids+=("$!")
        track "$!"
    done
    for lane in "${lane_pids[@]}"; do
        wait "$lane" || true
    done
    echo "the clients ran in $((SECONDS - t_matrix)) s (${#MATRIX_LANES[@]} lanes); each run's log: $MX/logs/"
    for client in "${MATRIX_CLIENTS[@]}"; do
        for f in "$MX/logs/$client"--*.log; do
            sed -n '1p;/^  FAIL\|client failed\|close:\|exit status/p' "$f"
        done
    done

    timeout 60 "$VPY" "$HERE/matrix.py" --runs "$MX/runs" --taps "$MX/taps" --xfail "$RUN/xfail.txt" \
        --md "$MX/matrix.md" --openings "$MX/openings.txt" --out "$RESULTS" >"$MX/matrix.log" 2>&1 ||
        row "client matrix" "matrix.py ran" 0 "see $MX/matrix.log"
    cp "$MX/matrix.md" "$RUN/matrix.md" 2>/dev/null || true

    # The schema check: what mcpgate sent, and its answers to bad requests.
    local rc=0
    run timeout 120 node "$HERE/validate.cjs" --taps "$MX/taps" --match "--(mcpgate|auth)\.jsonl$" --mcpgate "http://127.0.0.1:$gw_port/mcp" \
        --everything "http://127.0.0.1:$ev_port/mcp" --out "$MX/validate.json" >"$MX/validate.log" 2>&1 || rc=$?
    cat "$MX/validate.log"
    timeout 60 "$VPY" "$HERE/report.py" schema --json "$MX/validate.json" --xfail "$RUN/xfail.txt" \
        --section "schema check (TypeScript SDK 1.32.2 zod schemas)" --out "$RESULTS" ||
        row "schema check (TypeScript SDK 1.32.2 zod schemas)" "validate.cjs ran" 0 "exit status $rc; see $MX/validate.log"

    for pid in "${tap_pids[@]}"; do
        stop "$pid"
    done
    stop_mcpgate mcpgate-matrix "$gw_pid" "client matrix"
    stop "$gwa_pid"
    stop "$fm_pid"
    stop "$py_pid"
    stop "$ev_pid"
}
