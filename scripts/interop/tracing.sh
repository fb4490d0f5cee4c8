# shellcheck shell=bash
# Traces with a real receiver, for scripts/interop.sh (sourced there: it uses start, stop,
# wait_for, wait_port, free_ports and install_venv of scripts/lib.sh, interop.sh's run, row,
# check_loopback, stop_mcpgate and its variables). About 15 s (minutes more the first time, to
# install Phoenix).
#
#   - Arize Phoenix (PyPI arize-phoenix 20.26.1 with everything it pulls in, pinned in
#     scripts/interop/requirements-phoenix.txt, in .interop/venv-phoenix): it receives OTLP over
#     HTTP, decodes it with the official opentelemetry-proto, keeps the spans in SQLite and answers
#     queries for them (its REST API). It runs offline (no telemetry of its own), on 127.0.0.1
#     only (phoenix_serve.py keeps its gRPC port off the other interfaces).
#   - mcpgate in front of mcp-fixture over HTTP (`fx`) and mcp-fixture as a stdio server
#     (`local`), its `tracing.endpoint` at Phoenix.
#   - tracing_checks.py: a client instrumented with the official OpenTelemetry SDK, exporting its
#     own spans to Phoenix, calls a tool of each through mcpgate with the official Python MCP
#     SDK, the context in `params._meta`. Read back from Phoenix: one trace links the client's
#     span, mcpgate's SERVER span and its CLIENT span, with the MCP attributes; and each fixture's
#     /stats shows it received the CLIENT span's context (in `_meta`, and over HTTP in the header).

PHOENIX_VENV=$IO/venv-phoenix

tracing_step() {
    local section="traces (Arize Phoenix)" dir=$RUN/tracing
    mkdir -p "$dir"
    install_venv "$PHOENIX_VENV" "$HERE/requirements-phoenix.txt" >"$dir/pip.log" 2>&1 || {
        row "$section" "Phoenix installed (scripts/interop/requirements-phoenix.txt)" 0 "see $dir/pip.log"
        return 0
    }
    local px_port grpc_port
    read -r px_port grpc_port <<<"$(free_ports 2)"
    local phoenix=http://127.0.0.1:$px_port
    PHOENIX_WORKING_DIR=$dir/phoenix PHOENIX_HOST=127.0.0.1 PHOENIX_PORT=$px_port PHOENIX_GRPC_PORT=$grpc_port \
        PHOENIX_TELEMETRY_ENABLED=false DO_NOT_TRACK=1 start phoenix "$PHOENIX_VENV/bin/python" "$HERE/phoenix_serve.py"
    local px_pid=$PID
    if ! wait_for 180 "Phoenix answering on $phoenix" curl -fs -o /dev/null --max-time 5 "$phoenix/v1/projects"; then
        row "$section" "Phoenix started" 0 "see $RUN/phoenix.err"
        stop "$px_pid"
        return 0
    fi
    check_loopback phoenix "$px_pid" "$px_port"

    start tracing-fixture "$FIXTURE" --name fx
    local fx_pid=$PID fx_port
    fx_port=$(wait_port tracing-fixture "$fx_pid" "$RUN/tracing-fixture.out")
    cat >"$dir/mcpgate.json" <<EOF
{
  "listen": "127.0.0.1:0",
  "tracing": { "endpoint": "$phoenix" },
  "mcpServers": {
    "fx": { "url": "http://127.0.0.1:$fx_port/mcp" },
    "local": { "command": "$FIXTURE", "args": ["--stdio", "--name", "local", "--stats-listen", "127.0.0.1:0"] }
  }
}
EOF
    # At debug, the stdio fixture's stderr (where it says where its /stats is) reaches the log.
    MCPGATE_LOG=mcpgate=debug start mcpgate-tracing "$MCPGATE" --config "$dir/mcpgate.json"
    local gw_pid=$PID gw_port
    gw_port=$(wait_port mcpgate-tracing "$gw_pid" "$RUN/mcpgate-tracing.out")

    local rc=0
    run timeout 120 "$PHOENIX_VENV/bin/python" "$HERE/tracing_checks.py" --gateway "http://127.0.0.1:$gw_port/mcp" \
        --phoenix "$phoenix" --fixture-stats "http://127.0.0.1:$fx_port/stats" --gate-log "$RUN/mcpgate-tracing.err" \
        --json "$dir/checks.json" || rc=$?
    if [[ -f $dir/checks.json ]]; then
        timeout 60 "$VPY" "$HERE/report.py" checks --json "$dir/checks.json" --section "$section" --out "$RESULTS"
    fi
    if [[ $rc -ne 0 && $rc -ne 1 ]]; then
        row "$section" "tracing_checks.py ran to its end" 0 "exit status $rc (124: timed out)"
    fi
    local exported
    exported=$(curl -fsS --max-time 10 "http://127.0.0.1:$gw_port/metrics" |
        awk '/^mcpgate_trace_spans_(exported|dropped)_total/ {printf "%s %s; ", $1, $2}')
    row "$section" "mcpgate's spans all exported, none dropped" \
        "$([[ $exported =~ exported_total\ [1-9].*dropped_total\ 0\; ]] && echo 1 || echo 0)" "${exported:-no /metrics}"
    stop_mcpgate mcpgate-tracing "$gw_pid" "$section"
    stop "$fx_pid"
    stop "$px_pid"
}
