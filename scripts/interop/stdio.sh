# shellcheck shell=bash
# The stdio servers of scripts/interop.sh (sourced there: it uses start, stop and
# wait_port of scripts/lib.sh, interop.sh's check_loopback, stop_mcpgate, processes_line, run and
# row, and its variables).
#
# One mcpgate starts four real stdio servers from the registries, pinned in scripts/interop/tools/
# and requirements.txt, each with the `command`/`args`/`env` a Claude Desktop user would write,
# pointed at the installs under .interop/ (`node` is the pinned Node on PATH):
#   filesystem  server-filesystem, given $RUN/stdio/fs (the clients' roots replace it);
#   memory      server-memory, "sharing": "shared", its graph in $RUN/stdio/memory.jsonl;
#   everything  server-everything in stdio mode, with an `env` of its own (stdio_spec.json);
#   time        mcp-server-time, the venv's entry point.
# All but memory with "sharing": "session", a process per client session, whose isolation the
# checks hold; the default, a process per user, is pasted.sh's with the servers run as pasted.
# The official Python client (two sessions: stdio_checks.py) and the TypeScript SDK client
# (stdio_client.cjs) use them through mcpgate, one after the other. A watch (stdio_procs.py) notes
# every process below mcpgate in /proc: as many children as status.json says it spawned. Then, once the shared process was stopped for being idle
# (shared_idle_secs), the last status.json must show every process reaped; after SIGTERM,
# mcpgate's last log line too, and /proc must hold nothing of what it started.

stdio_step() {
    local dir=$RUN/stdio sm=@modelcontextprotocol
    local fsdir=$dir/fs section="stdio servers"
    mkdir -p "$fsdir"
    echo "in the filesystem server's own directory, not below a client's root" >"$fsdir/outside.txt"
    cat >"$RUN/mcpgate-stdio.json" <<EOF
{
  "listen": "127.0.0.1:0",
  "page_size": 20,
  "shared_idle_secs": 1,
  "session_idle_timeout_secs": 20,
  "mcpServers": {
    "filesystem": {
      "command": "node",
      "args": ["$NM/$sm/server-filesystem/dist/index.js", "$fsdir"],
      "sharing": "session"
    },
    "memory": {
      "command": "node",
      "args": ["$NM/$sm/server-memory/dist/index.js"],
      "env": { "MEMORY_FILE_PATH": "$dir/memory.jsonl" },
      "sharing": "shared"
    },
    "everything": {
      "command": "node",
      "args": ["$EVERYTHING", "stdio"],
      "env": { "INTEROP_STDIO_KEY": "for server-everything only" },
      "sharing": "session"
    },
    "time": {
      "command": "$VENV/bin/mcp-server-time",
      "args": ["--local-timezone", "Etc/UTC"],
      "sharing": "session"
    }
  }
}
EOF
    # INTEROP_GATEWAY_ONLY: in mcpgate's environment, neither base nor passed through (stdio_spec.json).
    start mcpgate-stdio env INTEROP_GATEWAY_ONLY=not-for-servers "$MCPGATE" --config "$RUN/mcpgate-stdio.json"
    local gw_pid=$PID gw_port
    gw_port=$(wait_port mcpgate-stdio "$gw_pid" "$RUN/mcpgate-stdio.out")
    # $gw_pid is `timeout`'s (see start); mcpgate is its child.
    local mcpgate_pid
    mcpgate_pid=$(pgrep -P "$gw_pid" -x mcpgate || true)
    [[ -n $mcpgate_pid ]] || mcpgate_pid=$gw_pid
    start stdio-procs "$VPY" "$HERE/stdio_procs.py" watch --pid "$mcpgate_pid" --out "$dir/seen.jsonl"
    local watch_pid=$PID
    echo "mcpgate :$gw_port (PID $mcpgate_pid) with 4 stdio servers: $RUN/mcpgate-stdio.json"
    check_loopback mcpgate-stdio "$gw_pid" "$gw_port"
    local url=http://127.0.0.1:$gw_port/mcp rc t0=$SECONDS

    rc=0
    run timeout 120 "$VPY" "$HERE/stdio_checks.py" --url "$url" --spec "$HERE/stdio_spec.json" --roots "$fsdir" \
        --gateway-pid "$mcpgate_pid" --json "$dir/python.json" || rc=$?
    timeout 60 "$VPY" "$HERE/report.py" checks --json "$dir/python.json" \
        --section "$section: python client via mcpgate" --out "$RESULTS"
    if ((rc != 0 && rc != 1)); then
        row "$section: python client via mcpgate" "stdio_checks.py ran to its end" 0 "exit status $rc (124: timed out)"
    fi
    rc=0
    CLIENTS_DIR=$CLIENTS run timeout 120 node "$HERE/stdio_client.cjs" --url "$url" --spec "$HERE/stdio_spec.json" \
        --roots "$fsdir" --json "$dir/typescript.json" || rc=$?
    timeout 60 "$VPY" "$HERE/report.py" checks --json "$dir/typescript.json" \
        --section "$section: typescript client via mcpgate" --out "$RESULTS"
    if ((rc != 0 && rc != 1)); then
        row "$section: typescript client via mcpgate" "stdio_client.cjs ran to its end" 0 \
            "exit status $rc (124: timed out)"
    fi
    echo "the clients ran in $((SECONDS - t0)) s"

    # The clients DELETEd their sessions: each session's processes are stopped with it, and the
    # shared one once idle (1 s; the reaper looks every 2 s). The last status read before SIGTERM:
    local status
    status=$(timeout 30 "$VPY" - "http://127.0.0.1:$gw_port/status.json" <<'EOF' || true
import json, sys, time, urllib.request
deadline = time.monotonic() + 15
while True:
    s = json.load(urllib.request.urlopen(sys.argv[1], timeout=5))
    if s["processes"]["live"] == 0 or time.monotonic() > deadline:
        break
    time.sleep(0.2)
p, servers, sessions = s["processes"], s["servers"], s["sessions"]
each = {n: servers[n]["processes"] for n in ("filesystem", "memory", "everything", "time")}
per_session = all(each[n]["spawned"] == 3 for n in ("filesystem", "everything", "time"))
# Three client sessions (Python A and B, TypeScript): a process of each per-session server each;
# memory's one, or two if it was stopped for being idle between the Python and TypeScript clients.
ok = (p["spawned"] == p["reaped"] and p["live"] == 0 and p["balanced"] and per_session
      and 1 <= each["memory"]["spawned"] <= 2
      and all(e["live"] == 0 and e["exited"] == 0 for e in each.values())
      and sessions["live"] == 0 and sessions["deleted_by_client"] == 3)
print(int(ok), p["spawned"],
      f"processes spawned {p['spawned']} reaped {p['reaped']} live {p['live']} balanced {p['balanced']}; "
      + "; ".join(f"{n}: spawned {e['spawned']} live {e['live']} exited {e['exited']} killed {e['killed']}"
                  for n, e in each.items())
      + f"; client sessions live {sessions['live']}, deleted by client {sessions['deleted_by_client']}")
EOF
    )
    local name="status.json, clients gone, shared process idle: spawned == reaped, live 0, 3 sessions' processes"
    local spawned=
    if [[ $status =~ ^([01])\ ([0-9]+)\ (.*)$ ]]; then
        spawned=${BASH_REMATCH[2]}
        row "$section: processes" "$name" "${BASH_REMATCH[1]}" "${BASH_REMATCH[3]}"
    else
        row "$section: processes" "$name" 0 "no usable answer from /status.json: ${status:-nothing}"
    fi

    stop_mcpgate mcpgate-stdio "$gw_pid" "$section: processes"
    processes_line mcpgate-stdio "$section: processes" "$spawned"
    stop "$watch_pid"
    timeout 60 "$VPY" "$HERE/stdio_procs.py" check --seen "$dir/seen.jsonl" --gateway-pid "$mcpgate_pid" \
        --spawned "${spawned:--1}" --json "$dir/procs.json" || true
    timeout 60 "$VPY" "$HERE/report.py" checks --json "$dir/procs.json" --section "$section: processes" --out "$RESULTS"
    # What the servers wrote on stderr, as mcpgate logged it.
    echo "the servers' stderr, in mcpgate's log ($RUN/mcpgate-stdio.err):"
    grep -F '(stderr):' "$RUN/mcpgate-stdio.err" | sed 's/^\[[^]]*\] /  /' | sort | uniq -c | sort -rn | head -12 || true
}
