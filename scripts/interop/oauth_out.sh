# shellcheck shell=bash
# Servers that want OAuth, with real parts, for scripts/interop.sh (sourced there: it uses start,
# stop, wait_port and install_* of scripts/lib.sh, interop.sh's run, row, stop_mcpgate and its
# variables). mcpgate is each user's OAuth client toward a protected server. About 90 s (more the
# first time, to install oidc-provider and Chromium).
#
#   - The authorization server: oidc-provider (pinned in scripts/interop/oauth/), started by
#     oauth_out_server.mjs: dynamic registration, PKCE, resource indicators with JWT access tokens
#     of a short life (TTL s), refresh tokens rotated at each use, and a token exchange grant.
#   - The protected servers: FastMCP with its own JWT verification (oauth_out_fm_server.py), whose
#     `whoami` answers the subject and audience of the token it got: `prot` (users sign in) and
#     `exch` (it trusts mcpgate's own issuer: tokens are exchanged).
#   - The person at the browser: Debian's headless Chromium, driven over DevTools
#     (oauth_chromium.py), on the authorization server's own login and consent pages.
#   - The clients: the Python SDK (oauth_out_checks.py: its URL-elicitation error path, the
#     2026-07-28 era's input request, two users through mcpgate's own OAuth), the TypeScript SDK
#     (oauth_out_ts_client.mjs: elicitation/create in the call's stream).
#
# One user (mcpgate without `auth`): a link, Chromium's consent, the subject; a restart, and no
# consent; the token expires, and a refresh is counted at the authorization server; `mcpgate
# logout`, and a link again. Two users (`auth.oauth`): each consents once and the server sees each
# one's subject; the other's link is refused; exchanged tokens. At the end: no token the
# authorization server issued is in the clear in mcpgate's files, logs, status page or /metrics.

OAUTH_OUT_TTL=20

oauth_out_step() {
    local section="OAuth toward servers" dir=$RUN/oauth-out
    mkdir -p "$dir"
    install_npm "$HERE/oauth" "$IO/oauth" >"$dir/npm.log" 2>&1 || {
        row "$section" "oidc-provider installed (npm ci of scripts/interop/oauth)" 0 "see $dir/npm.log"
        return 0
    }
    install_debian "$dir/apt.log" chromium=chromium || {
        row "$section" "Chromium installed from Debian" 0 "see $dir/apt.log"
        return 0
    }
    local as_port one_port two_port issuer secret=oauth-out-exchange-secret
    read -r as_port one_port two_port <<<"$(free_ports 3)"
    issuer=http://127.0.0.1:$as_port
    OIDC_PROVIDER_DIR=$IO/oauth start oauth-out-as node "$HERE/oauth_out_server.mjs" --port "$as_port" \
        --ttl "$OAUTH_OUT_TTL" --exchange-secret "$secret"
    local as_pid=$PID
    wait_port oauth-out-as "$as_pid" "$RUN/oauth-out-as.out" >/dev/null
    start oauth-out-prot "$VPY" "$HERE/oauth_out_fm_server.py" --issuer "$issuer" --name prot
    local prot_pid=$PID prot_port
    start oauth-out-exch "$VPY" "$HERE/oauth_out_fm_server.py" --issuer "$issuer" --name exch
    local exch_pid=$PID exch_port
    prot_port=$(wait_port oauth-out-prot "$prot_pid" "$RUN/oauth-out-prot.out")
    exch_port=$(wait_port oauth-out-exch "$exch_pid" "$RUN/oauth-out-exch.out")
    local prot=http://127.0.0.1:$prot_port/mcp exch=http://127.0.0.1:$exch_port/mcp
    echo "oidc-provider :$as_port, FastMCP prot :$prot_port, exch :$exch_port"
    local checks=(timeout 300 "$VPY" "$HERE/oauth_out_checks.py")
    oauth_out_report() { timeout 60 "$VPY" "$HERE/report.py" checks --json "$1" --section "$section: $2" --out "$RESULTS"; }

    # One user, mcpgate without `auth`, its state (and the store beside it) in $dir/one; on a port
    # of its own, as a gateway keeps its address (the redirect URI) across a restart.
    mkdir -p "$dir/one"
    cat >"$dir/one.json" <<EOF
{ "listen": "127.0.0.1:$one_port", "state_file": "$dir/one/state.json", "mcpServers": { "prot": { "url": "$prot", "oauth": {} } } }
EOF
    start oauth-out-one "$MCPGATE" --config "$dir/one.json"
    local gw_pid=$PID gw_port
    gw_port=$(wait_port oauth-out-one "$gw_pid" "$RUN/oauth-out-one.out")
    local gw=http://127.0.0.1:$gw_port/mcp one=(one --issuer "$issuer" --profile "$dir/chromium-alice" --state "$dir/one.state")
    run "${checks[@]}" "${one[@]}" --url "$gw" --phase first --json "$dir/first.json" || true
    oauth_out_report "$dir/first.json" "one user (Python SDK, -32042)"
    cp "$RUN/oauth-out-one.err" "$dir/one-before-restart.err"
    stop_mcpgate oauth-out-one "$gw_pid" "$section"
    start oauth-out-one "$MCPGATE" --config "$dir/one.json"
    gw_pid=$PID
    gw_port=$(wait_port oauth-out-one "$gw_pid" "$RUN/oauth-out-one.out")
    gw=http://127.0.0.1:$gw_port/mcp
    run "${checks[@]}" "${one[@]}" --url "$gw" --phase again --json "$dir/again.json" || true
    oauth_out_report "$dir/again.json" "one user after a restart"
    sleep $((OAUTH_OUT_TTL + 2))
    run "${checks[@]}" "${one[@]}" --url "$gw" --phase refresh --json "$dir/refresh.json" || true
    oauth_out_report "$dir/refresh.json" "one user, the token expired"
    local said
    said=$(timeout 30 "$MCPGATE" logout prot --url "$gw" 2>&1 || true)
    run "${checks[@]}" "${one[@]}" --url "$gw" --phase signed-out --json "$dir/signed-out.json" || true
    oauth_out_report "$dir/signed-out.json" "one user after \`mcpgate logout\` ($said)"
    # Signed out: a client of 2026-07-28 is asked through an input request, and signs in again.
    run "${checks[@]}" modern --url "$gw" --profile "$dir/chromium-alice" --json "$dir/modern.json" || true
    oauth_out_report "$dir/modern.json" "Python SDK, 2026-07-28"

    # The TypeScript SDK, with `oauth_client.ask` "elicitation": the call waits for the user.
    mkdir -p "$dir/ask"
    cat >"$dir/ask.json" <<EOF
{ "listen": "127.0.0.1:0", "state_file": "$dir/ask/state.json", "oauth_client": { "ask": "elicitation" },
  "mcpServers": { "prot": { "url": "$prot", "oauth": {} } } }
EOF
    start oauth-out-ask "$MCPGATE" --config "$dir/ask.json"
    local ask_pid=$PID ask_port
    ask_port=$(wait_port oauth-out-ask "$ask_pid" "$RUN/oauth-out-ask.out")
    CLIENTS_DIR=$CLIENTS run timeout 240 node "$HERE/oauth_out_ts_client.mjs" --url "http://127.0.0.1:$ask_port/mcp" \
        --profile "$dir/chromium-alice" --login alice --out "$dir/ts.json" || true
    oauth_out_report "$dir/ts.json" "TypeScript SDK, elicitation/create"

    # Two users through mcpgate's own OAuth (the same issuer), and a server of exchanged tokens.
    mkdir -p "$dir/two"
    cat >"$dir/two.json" <<EOF
{
  "listen": "127.0.0.1:$two_port", "state_file": "$dir/two/state.json",
  "auth": { "oauth": { "issuer": "$issuer", "resource": "http://127.0.0.1:$two_port/mcp", "required_scopes": ["mcp"] } },
  "mcpServers": {
    "prot": { "url": "$prot", "oauth": {} },
    "exch": { "url": "$exch", "oauth": { "token_exchange": true, "client_id": "mcpgate-exchange", "client_secret": "$secret" } }
  }
}
EOF
    start oauth-out-two "$MCPGATE" --config "$dir/two.json"
    local two_pid=$PID
    wait_port oauth-out-two "$two_pid" "$RUN/oauth-out-two.out" >/dev/null
    run "${checks[@]}" two --url "http://127.0.0.1:$two_port/mcp" --issuer "$issuer" --profiles "$dir/chromium" \
        --json "$dir/two-users.json" || true
    oauth_out_report "$dir/two-users.json" "two users through mcpgate's OAuth (Python SDK)"

    # No token in the clear: every token the authorization server issued, looked for in what
    # mcpgate wrote (its files, its logs) and shows (status page, status.json, /metrics).
    local found
    found=$(timeout 60 "$VPY" - "$issuer" "$dir" "$RUN" "$gw_port" "$ask_port" "$two_port" <<'EOF' || true
import glob, json, os, sys, urllib.request
issuer, dir, run, *ports = sys.argv[1:]
issued = json.load(urllib.request.urlopen(f"{issuer}/stats", timeout=5))["issued"]
places = {path: open(path, "rb").read().decode("utf-8", "replace")
          for pattern in ("one/*", "ask/*", "two/*", "*.err")
          for path in glob.glob(os.path.join(dir, pattern)) if os.path.isfile(path)}
for name in ("oauth-out-one", "oauth-out-ask", "oauth-out-two"):
    for ext in ("err", "out"):
        path = os.path.join(run, f"{name}.{ext}")
        if os.path.exists(path):
            places[path] = open(path, "rb").read().decode("utf-8", "replace")
for port in ports:
    for page in ("status", "status.json", "metrics"):
        places[f":{port}/{page}"] = urllib.request.urlopen(f"http://127.0.0.1:{port}/{page}", timeout=5).read().decode()
hits = [f"{where}" for where, text in places.items() for token in issued if token in text]
users = json.loads(places[f":{ports[2]}/status.json"])["servers"]["prot"]["oauth"]["users"]
ok = len(issued) >= 6 and not hits and users == 2
print(int(ok), f"{len(issued)} tokens issued, looked for in {len(places)} files and pages: found in {hits or 'none'}; "
      f"users holding a prot token on the two-user gateway: {users}")
EOF
)
    if [[ $found =~ ^[01]\  ]]; then
        row "$section" "no token in the clear in mcpgate's files, logs, status page or /metrics" "${found%% *}" "${found#* }"
    else
        row "$section" "no token in the clear in mcpgate's files, logs, status page or /metrics" 0 "no answer: ${found:-none}"
    fi
    local first refreshes
    first=$(timeout 10 "$VPY" -c 'import json,sys; print(json.load(open(sys.argv[1])).get("first_call_to_authorized_secs", "?"))' "$dir/one.state" 2>/dev/null || echo "?")
    refreshes=$(timeout 10 "$VPY" -c 'import json,sys,urllib.request; print(json.load(urllib.request.urlopen(sys.argv[1] + "/stats"))["refreshes"])' "$issuer" 2>/dev/null || echo "?")
    echo "figures: first call to first authorized call ${first} s (Chromium included); refreshes counted at the authorization server: ${refreshes}"
    stop_mcpgate oauth-out-one "$gw_pid" "$section"
    stop_mcpgate oauth-out-ask "$ask_pid" "$section"
    stop_mcpgate oauth-out-two "$two_pid" "$section"
    stop "$exch_pid"
    stop "$prot_pid"
    stop "$as_pid"
}
