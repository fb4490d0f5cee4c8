# shellcheck shell=bash
# Both protocol eras, for scripts/interop.sh (sourced there: it uses start, stop and
# wait_port of scripts/lib.sh, interop.sh's check_loopback, stop_mcpgate, run and row, and its
# variables).
#
# One mcpgate in front of three servers: py_server.py (the Python SDK, both eras; mcpgate speaks
# to it in the session era), py_modern_server.py (the Python SDK limited to 2026-07-28) and
# mcp-fixture (session era only, counting its sessions). The official Python client
# (modern_checks.py) runs in mode="legacy", mode="2026-07-28" and mode="auto": call, progress,
# sampling, elicitation, roots, list_changed and cancel against each Python server, and prints
# the table client era x server x feature; in mode="auto" it must land in the session era there
# (the fixture speaks only that) and in 2026-07-28 through a second mcpgate in front of the two
# Python servers alone, both of which speak it. The TypeScript SDK's 2026-07-28 client
# (@modelcontextprotocol/client, ts_modern_client.cjs) does the same through that second
# mcpgate, pinned to 2026-07-28 and in 'auto' mode (pinned, it still probes server/discover, and
# fails where it is not offered, as it does in front of a session-era server directly). Then the fixture's own count: every session opened on
# it (the 2026-07-28 clients' pool session too) was DELETEd once mcpgate stopped.
#
# modern_conformance_step (5b): the conformance suite's pre-release with the 2026-07-28 scenarios,
# `--requirements 2026-07-28`, against mcpgate in front of mcp-fixture --conformance --both-eras and
# py_modern_server.py --conformance (the tools of input-required-result-*), both "prefix": "".
# The suite exits 0 when every scenario it scores for that revision passes; the ones it lists as
# not scored (the tasks extension, pending scenarios) are printed, not judged.

modern_step() {
    local section="both protocol eras" rc=0 stats
    start py-both "$VPY" "$HERE/py_server.py"
    local both_pid=$PID
    start py-modern "$VPY" "$HERE/py_modern_server.py"
    local modern_pid=$PID
    start fixture-eras "$FIXTURE" --name fx
    local fx_pid=$PID
    local both_port modern_port fx_port
    both_port=$(wait_port py-both "$both_pid" "$RUN/py-both.out")
    modern_port=$(wait_port py-modern "$modern_pid" "$RUN/py-modern.out")
    fx_port=$(wait_port fixture-eras "$fx_pid" "$RUN/fixture-eras.out")
    cat >"$RUN/mcpgate-eras.json" <<EOF
{
  "listen": "127.0.0.1:0",
  "mcpServers": {
    "py": { "url": "http://127.0.0.1:$both_port/mcp" },
    "pym": { "url": "http://127.0.0.1:$modern_port/mcp" },
    "fx": { "url": "http://127.0.0.1:$fx_port/mcp" }
  }
}
EOF
    cat >"$RUN/mcpgate-eras-2026.json" <<EOF
{
  "listen": "127.0.0.1:0",
  "mcpServers": {
    "py": { "url": "http://127.0.0.1:$both_port/mcp" },
    "pym": { "url": "http://127.0.0.1:$modern_port/mcp" }
  }
}
EOF
    start mcpgate-eras "$MCPGATE" --config "$RUN/mcpgate-eras.json"
    local gw_pid=$PID gw_port
    start mcpgate-eras-2026 "$MCPGATE" --config "$RUN/mcpgate-eras-2026.json"
    local gw2_pid=$PID gw2_port
    gw_port=$(wait_port mcpgate-eras "$gw_pid" "$RUN/mcpgate-eras.out")
    gw2_port=$(wait_port mcpgate-eras-2026 "$gw2_pid" "$RUN/mcpgate-eras-2026.out")
    echo "py (both eras) :$both_port, pym (2026-07-28 only) :$modern_port, mcp-fixture :$fx_port, mcpgate :$gw_port" \
        "(py and pym alone: :$gw2_port)"
    check_loopback py-modern "$modern_pid" "$modern_port"

    run timeout 300 "$VPY" "$HERE/modern_checks.py" --url "http://127.0.0.1:$gw_port/mcp" \
        --url-2026 "http://127.0.0.1:$gw2_port/mcp" --json "$RUN/modern_checks.json" || rc=$?
    if [[ -f $RUN/modern_checks.json ]]; then
        timeout 60 "$VPY" "$HERE/report.py" checks --json "$RUN/modern_checks.json" --section "$section" --out "$RESULTS"
    fi
    if [[ $rc -ne 0 && $rc -ne 1 ]]; then
        row "$section" "modern_checks.py ran to its end" 0 "exit status $rc (124: timed out)"
    fi
    rc=0
    CLIENTS_DIR=$CLIENTS run timeout 300 node "$HERE/ts_modern_client.cjs" --url "http://127.0.0.1:$gw2_port/mcp" \
        --out "$RUN/ts_modern.json" || rc=$?
    if [[ -f $RUN/ts_modern.json ]]; then
        timeout 60 "$VPY" "$HERE/report.py" checks --json "$RUN/ts_modern.json" --section "$section" --out "$RESULTS"
    fi
    if [[ $rc -ne 0 && $rc -ne 1 ]]; then
        row "$section" "ts_modern_client.cjs ran to its end" 0 "exit status $rc (124: timed out)"
    fi
    grep -E "server \`[a-z]+\` (speaks|is spoken)" "$RUN/mcpgate-eras.err" | sed 's/^/  mcpgate: /' || true
    stop_mcpgate mcpgate-eras "$gw_pid" "$section"
    stop_mcpgate mcpgate-eras-2026 "$gw2_pid" "$section"
    stats=$(curl -fsS -m 5 "http://127.0.0.1:$fx_port/stats" || true)
    stats=$(timeout 10 "$VPY" - "${stats:-null}" <<'EOF' 2>&1 || true
import json, sys
s = json.loads(sys.argv[1])
ok = s["initialize"] > 0 and s["live_sessions"] == 0 and s["delete"] == s["initialize"] and s["delete_unknown"] == 0
print(int(ok), f"initialize {s['initialize']}, DELETE {s['delete']} (unknown {s['delete_unknown']}), live {s['live_sessions']}")
EOF
)
    if [[ $stats =~ ^[01]\  ]]; then
        row "$section" "mcp-fixture counts: each session mcpgate opened on it was DELETEd once" "${stats%% *}" "${stats#* }"
    else
        row "$section" "mcp-fixture counts: each session mcpgate opened on it was DELETEd once" 0 "no usable /stats: $stats"
    fi
    stop "$fx_pid"
    stop "$modern_pid"
    stop "$both_pid"
}

modern_conformance_step() {
    local section="conformance 2026-07-28: through mcpgate" rc=0 out=$RUN/server-2026
    local suite=$IO/conformance-next/node_modules/@modelcontextprotocol/conformance/dist/index.js
    # Of both eras (mcpgate speaks the session era to it, as to --conformance alone): with every
    # server behind speaking 2026-07-28, server/discover offers it, as the suite expects.
    start conformance-fixture-2026 "$FIXTURE" --conformance --both-eras --name conformance
    local cf_pid=$PID
    start py-modern-conformance "$VPY" "$HERE/py_modern_server.py" --conformance
    local pm_pid=$PID
    local cf_port pm_port
    cf_port=$(wait_port conformance-fixture-2026 "$cf_pid" "$RUN/conformance-fixture-2026.out")
    pm_port=$(wait_port py-modern-conformance "$pm_pid" "$RUN/py-modern-conformance.out")
    cat >"$RUN/mcpgate-2026.json" <<EOF
{
  "listen": "127.0.0.1:0",
  "mcpServers": {
    "conformance": { "url": "http://127.0.0.1:$cf_port/mcp", "prefix": "" },
    "input-required": { "url": "http://127.0.0.1:$pm_port/mcp", "prefix": "" }
  }
}
EOF
    start mcpgate-2026 "$MCPGATE" --config "$RUN/mcpgate-2026.json"
    local gw_pid=$PID gw_port
    gw_port=$(wait_port mcpgate-2026 "$gw_pid" "$RUN/mcpgate-2026.out")
    run timeout 600 node --require "$LOOPBACK" "$suite" server --requirements 2026-07-28 \
        --url "http://127.0.0.1:$gw_port/mcp" -o "$out" >"$RUN/server-2026.log" 2>&1 || rc=$?
    grep -E '^(Running requirements|Total:|Not scored)' "$RUN/server-2026.log" || true
    local failing unscored
    failing=$(grep -E '^✗ ' "$RUN/server-2026.log" | sed -E 's/^✗ ([^:]+):.*/\1/' | tr '\n' ' ')
    unscored=$(sed -n '/^Not scored/,$p' "$RUN/server-2026.log" | grep -E '^  ✗ ' | sed -E 's/^  ✗ ([^ ]+).*/\1/' | tr '\n' ' ')
    local scored_failing=() name
    for name in $failing; do
        [[ " $unscored " == *" $name "* ]] || scored_failing+=("$name")
    done
    if ((rc == 0 && ${#scored_failing[@]} == 0)); then
        row "$section" "every scenario scored for 2026-07-28 passes" 1 \
            "$(grep -E '^Total:' "$RUN/server-2026.log" | tail -1); not scored, failing: ${unscored:-none}"
    else
        row "$section" "every scenario scored for 2026-07-28 passes" 0 \
            "exit status $rc; failing: ${scored_failing[*]:-?}; see $RUN/server-2026.log"
    fi
    stop_mcpgate mcpgate-2026 "$gw_pid" "$section"
    stop "$pm_pid"
    stop "$cf_pid"
}
