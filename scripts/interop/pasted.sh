# shellcheck shell=bash
# The servers users paste, run as pasted (scripts/interop.sh step 4h, sourced there: it uses start,
# stop, wait_port and install_venv of scripts/lib.sh, interop.sh's run, row, check_loopback,
# stop_mcpgate and processes_line, and its variables). scripts/bench.sh sources it too, for the
# footprint row: pasted_install, pasted_prepare and pasted_warm need only lib.sh and ROOT.
#
# One mcpgate, with its defaults ("sharing": "user": one process per server for every session, as
# there is no auth), starts six servers exactly as their READMEs paste them for Claude Desktop,
# pinned to the versions of scripts/interop/pasted_spec.json:
#   filesystem, memory, sequential-thinking   "command": "npx", "args": ["-y", "@modelcontextprotocol/server-...@V", ...]
#   fetch, time, git                          "command": "uvx", "args": ["mcp-server-...==V", ...]
# fetch with --allow-private-ips and --ignore-robots-txt (there is no internet here: it reads a page
# served on 127.0.0.1), git with --repository, a repository made for the run.
#
# Their packages come from the registries into caches of their own under .interop/pasted/home, the
# HOME mcpgate runs with (and so its children: mcpgate passes them HOME and PATH): npm's cache and
# npx's installs in ~/.npm, uv's in ~/.cache/uv, with ~/.npmrc and ~/.config/uv/uv.toml saying the
# rest, so that the six entries stay exactly as pasted, with no `env`. npx is the machine's
# (/usr/bin/npx and its node, not interop.sh's Node 22); uvx is uv pinned in
# requirements-pasted.txt, using the machine's python3 (python-downloads = "never").
#   1. warm-up: each server started once as mcpgate would start it, until it answers initialize,
#      the six at once: first with npm's and uv's offline flags (enough when the caches are warm),
#      and with the network when that fails, 3 tries (a registry's transient error);
#   2. then ~/.npmrc and uv.toml say offline=true: mcpgate's children run with no network;
#   3. pasted_checks.py (the official Python client): sessions opening at once, 10 one after the
#      other from mcpgate's start, 10 at once; every tool of every server called once; the
#      footprint of the whole tree from /proc with 1 and 10 sessions; 20 sessions left without
#      DELETE; pasted_agents.py: openai-agents and pydantic-ai (.interop/agents, pinned in
#      requirements-agents.txt) at their default timeouts, 10 connects each;
#   4. SIGTERM: mcpgate's last log line balances, and /proc holds nothing it started (by the watch's
#      PIDs, their groups, the servers' command lines, and the HOME they inherited), no zombie.
# PASTED_COLD=1 empties the caches first (a first run: everything downloaded).

PASTED=$ROOT/.interop/pasted
PASTED_HOME=$PASTED/home
PASTED_SPEC=$ROOT/scripts/interop/pasted_spec.json
PASTED_PINS=$ROOT/scripts/interop/requirements-pasted.txt
AGENTS=$ROOT/.interop/agents
AGENTS_PINS=$ROOT/scripts/interop/requirements-agents.txt

# pasted_install: uv (pinned) in its venv, and its uv and uvx alone in .interop/pasted/bin (the
# venv's bin has a python too, which uv must not take for the machine's).
pasted_install() {
    install_venv "$PASTED/uv" "$PASTED_PINS" || return 1
    mkdir -p "$PASTED/bin"
    ln -sfn ../uv/bin/uv "$PASTED/bin/uv"
    ln -sfn ../uv/bin/uvx "$PASTED/bin/uvx"
}

# pasted_agents_install: the agent frameworks' venv.
pasted_agents_install() {
    install_venv "$AGENTS" "$AGENTS_PINS"
}

# pasted_path: the PATH mcpgate runs with: uv's bin, the machine's python3, then this PATH without
# what .interop/ put first (interop.sh's Node 22: npx is the machine's, with its own node).
pasted_path() {
    local dir python keep=()
    python=$(python3 -c 'import sys; print(sys.executable)')
    IFS=: read -ra dirs <<<"$PATH"
    for dir in "${dirs[@]}"; do
        [[ $dir == "$ROOT/.interop/"* ]] || keep+=("$dir")
    done
    (
        IFS=:
        echo "$PASTED/bin:${python%/*}:${keep[*]}"
    )
}

# pasted_settings OFFLINE: the runners' settings in $PASTED_HOME (true: no network at all). uv
# takes the system's CA store (system-certs), as npm does through the machine's npmrc: a registry
# behind a TLS-inspecting proxy is trusted there, and mcpgate passes no SSL_CERT_FILE.
pasted_settings() {
    local offline=$1
    mkdir -p "$PASTED_HOME/.config/uv"
    printf 'update-notifier=false\nfund=false\naudit=false\noffline=%s\n' "$offline" >"$PASTED_HOME/.npmrc"
    printf 'python-downloads = "never"\npython-preference = "only-system"\nsystem-certs = true\noffline = %s\n' \
        "$offline" >"$PASTED_HOME/.config/uv/uv.toml"
}

# pasted_prepare DIR CONFIG: the filesystem server's directory (DIR/fs), a git repository (DIR/repo),
# the mcpgate config (CONFIG) with the six as pasted, and DIR/needles.json (what tells each one's
# processes apart, for stdio_procs.py).
pasted_prepare() {
    local dir=$1 config=$2
    rm -rf "$dir"
    mkdir -p "$dir/fs" "$dir/repo"
    git -C "$dir/repo" init -q -b main &&
        git -C "$dir/repo" config user.name "pasted.sh" &&
        git -C "$dir/repo" config user.email "pasted@127.0.0.1" &&
        echo "a repository made for scripts/interop/pasted.sh" >"$dir/repo/README" &&
        git -C "$dir/repo" add README &&
        git -C "$dir/repo" commit -q -m "the first commit" || return 1
    python3 - "$PASTED_SPEC" "$config" "$dir" <<'EOF'
import json, sys
spec, config, d = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
extra = {
    "filesystem": [f"{d}/fs"],
    "fetch": ["--allow-private-ips", "--ignore-robots-txt"],
    "git": ["--repository", f"{d}/repo"],
}
servers, needles = {}, {}
for name, p in spec["packages"].items():
    if p["runner"] == "npx":
        pinned = f"{p['package']}@{p['version']}"
        servers[name] = {"command": "npx", "args": ["-y", pinned, *extra.get(name, [])]}
    else:
        pinned = f"{p['package']}=={p['version']}"
        servers[name] = {"command": "uvx", "args": [pinned, *extra.get(name, [])]}
    needles[name] = pinned
with open(config, "w") as f:
    f.write(json.dumps({"listen": "127.0.0.1:0", "mcpServers": servers}, indent=2) + "\n")
json.dump(needles, open(f"{d}/needles.json", "w"), indent=1)
EOF
}

# pasted_warm CONFIG JSON: step 1 above, then step 2. Prints what each server took.
pasted_warm() {
    local config=$1 out=$2 rc=0
    if [[ ${PASTED_COLD:-} == 1 ]]; then
        echo "PASTED_COLD=1: emptying the caches in $PASTED_HOME"
        rm -rf "$PASTED_HOME"
    fi
    pasted_settings false
    env HOME="$PASTED_HOME" PATH="$(pasted_path)" timeout 1900 "$VPY" "$ROOT/scripts/interop/pasted_checks.py" warm \
        --config "$config" --spec "$PASTED_SPEC" --offline --tries 3 --json "$out" || rc=$?
    pasted_settings true
    return "$rc"
}

# pasted_packages: what ran, from the caches themselves: each npm package's package.json under
# npx's installs, each PyPI package's dist-info in uv's; one a line.
pasted_packages() {
    {
        find "$PASTED_HOME/.npm/_npx" -path '*/node_modules/@modelcontextprotocol/server-*/package.json' \
            -exec python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(d["name"] + "@" + d["version"])' {} \; \
            2>/dev/null | grep '^@modelcontextprotocol/server-'
        find "$PASTED_HOME/.cache/uv/archive-v0" -maxdepth 5 -type d -name 'mcp_server_*.dist-info' 2>/dev/null |
            sed -E 's|.*/||; s|\.dist-info$||; s|_|-|g; s|-([0-9][^-]*)$|==\1|'
    } | sort -u
}

# pasted_runners: the versions of the runners and what runs them.
pasted_runners() {
    local path
    path=$(pasted_path)
    echo "node $(PATH=$path node --version), npm $(PATH=$path npm --version), $("$PASTED/bin/uv" --version), $(python3 --version)"
}

pasted_step() {
    local dir=$RUN/pasted section="pasted servers (npx -y, uvx)" t0=$SECONDS rc
    local config=$RUN/mcpgate-pasted.json
    pasted_prepare "$dir" "$config" || { row "$section" "the run's directory and repository made" 0 "see above"; return; }
    echo "mcpgate's config, the six as pasted ($config):"
    sed 's/^/  /' "$config"
    local tw=$SECONDS
    rc=0
    pasted_warm "$config" "$dir/warm.json" | tee "$dir/warm.log" || rc=$?
    local warm_s=$((SECONDS - tw))
    row "$section" "warm-up: each server started once by npx or uvx, offline from warm caches or else fetched" \
        "$((rc == 0))" "$warm_s s; $(tail -1 "$dir/warm.log" 2>/dev/null)"

    start mcpgate-pasted env HOME="$PASTED_HOME" PATH="$(pasted_path)" "$MCPGATE" --config "$config"
    local gw_pid=$PID gw_port mcpgate_pid
    gw_port=$(wait_port mcpgate-pasted "$gw_pid" "$RUN/mcpgate-pasted.out") || {
        row "$section" "mcpgate started" 0 "see $RUN/mcpgate-pasted.err"
        return
    }
    check_loopback mcpgate-pasted "$gw_pid" "$gw_port"
    mcpgate_pid=$(pgrep -P "$gw_pid" -x mcpgate || true)
    [[ -n $mcpgate_pid ]] || mcpgate_pid=$gw_pid
    start pasted-procs "$VPY" "$HERE/stdio_procs.py" watch --pid "$mcpgate_pid" --out "$dir/seen.jsonl"
    local watch_pid=$PID url=http://127.0.0.1:$gw_port/mcp
    echo "mcpgate :$gw_port (PID $mcpgate_pid), HOME=$PASTED_HOME"

    rc=0
    run timeout 900 "$VPY" "$HERE/pasted_checks.py" check --url "$url" --spec "$PASTED_SPEC" --fs "$dir/fs" \
        --repo "$dir/repo" --gateway-pid "$mcpgate_pid" --json "$dir/python.json" --figures "$dir/figures.json" || rc=$?
    timeout 60 "$VPY" "$HERE/report.py" checks --json "$dir/python.json" --section "$section: python client" \
        --out "$RESULTS"
    if ((rc != 0 && rc != 1)); then
        row "$section: python client" "pasted_checks.py ran to its end" 0 "exit status $rc (124: timed out)"
    fi
    rc=0
    run timeout 600 "$AGENTS/bin/python" "$HERE/pasted_agents.py" --url "$url" --count 10 --json "$dir/agents.json" \
        --figures "$dir/agents-figures.json" || rc=$?
    timeout 60 "$VPY" "$HERE/report.py" checks --json "$dir/agents.json" --section "$section: agent frameworks" \
        --out "$RESULTS"
    if ((rc != 0 && rc != 1)); then
        row "$section: agent frameworks" "pasted_agents.py ran to its end" 0 "exit status $rc (124: timed out)"
    fi

    local spawned
    spawned=$(curl -fsS --max-time 10 "http://127.0.0.1:$gw_port/status.json" |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["processes"]["spawned"])' || echo -1)
    stop_mcpgate mcpgate-pasted "$gw_pid" "$section: processes"
    processes_line mcpgate-pasted "$section: processes" "$spawned"
    stop "$watch_pid"
    timeout 60 "$VPY" "$HERE/stdio_procs.py" check --seen "$dir/seen.jsonl" --gateway-pid "$mcpgate_pid" \
        --spawned "$spawned" --servers "$dir/needles.json" --tree --env-mark "HOME=$PASTED_HOME" \
        --json "$dir/procs.json" || true
    timeout 60 "$VPY" "$HERE/report.py" checks --json "$dir/procs.json" --section "$section: processes" --out "$RESULTS"

    local found missing=() pinned
    found=$(pasted_packages)
    while read -r pinned; do
        grep -qxF "$pinned" <<<"$found" || missing+=("$pinned")
    done < <(python3 -c 'import json, sys; print("\n".join(json.load(open(sys.argv[1])).values()))' "$dir/needles.json")
    row "$section" "the caches hold the pinned versions; what ran" "$((${#missing[@]} == 0))" \
        "$(paste -sd' ' <<<"$found"); $(pasted_runners)${missing[*]:+; not found: ${missing[*]}}"
    echo "the servers' stderr, in mcpgate's log ($RUN/mcpgate-pasted.err):"
    grep -F '(stderr):' "$RUN/mcpgate-pasted.err" | sed 's/^\[[^]]*\] /  /' | sort | uniq -c | sort -rn | head -12 || true
    echo "step 4h took $((SECONDS - t0)) s (warm-up $warm_s s); figures: $dir/figures.json, $dir/agents-figures.json"
}
