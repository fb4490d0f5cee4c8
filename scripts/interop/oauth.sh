# shellcheck shell=bash
# OAuth and HTTPS with real parts, for scripts/interop.sh (sourced there: it uses start, stop,
# wait_port and install_* of scripts/lib.sh, interop.sh's run, row, stop_mcpgate and its
# variables). About 60 s (30 s more the first time, to install oidc-provider and HAProxy).
#
#   - A private CA made for the run (oauth_certs.py): certificates for mcpgate's front door and
#     for HAProxy (Debian's), which terminates TLS in front of mcp-fixture. mcpgate serves HTTPS
#     (`tls`) and reaches the fixture through HAProxy over HTTPS, trusting the CA by `ca_file`.
#   - The authorization server: oidc-provider (npm, OpenID certified, pinned in
#     scripts/interop/oauth/), started by oauth_server.mjs with dynamic client registration, PKCE,
#     resource indicators and JWT access tokens for mcpgate's `/mcp`.
#   - Three real clients, each running the whole flow through mcpgate by itself: discovery from the
#     401, registration, authorization code with PKCE (the consent given over HTTP by
#     oauth_browser.py), token, then initialize, tools/list and a call: the Python SDK's
#     OAuthClientProvider (oauth_checks.py, with the refusals mcpgate must make), the TypeScript
#     SDK's auth provider (oauth_ts_client.mjs) and mcp-remote (oauth_remote.py).
#   - Opaque tokens: a second mcpgate whose resource gets opaque tokens, checked by introspection
#     (RFC 7662) as the confidential client `mcpgate`; and a token for one resource refused by
#     another.
#   - At the end: the fixture never saw a client's token, and every downstream session was closed.

oauth_step() {
    local section="OAuth and HTTPS" dir=$RUN/oauth
    # The person at the browser (oauth_browser.py) runs in the clients' children.
    export VPY
    mkdir -p "$dir"
    install_npm "$HERE/oauth" "$IO/oauth" >"$dir/npm.log" 2>&1 || {
        row "$section" "oidc-provider installed (npm ci of scripts/interop/oauth)" 0 "see $dir/npm.log"
        return 0
    }
    install_debian "$dir/apt.log" haproxy=haproxy || {
        row "$section" "HAProxy installed from Debian" 0 "see $dir/apt.log"
        return 0
    }
    timeout 60 "$VPY" "$HERE/oauth_certs.py" "$dir"
    local as_port gw_port opaque_port other_port hp_port
    read -r as_port gw_port opaque_port other_port hp_port <<<"$(free_ports 5)"
    local issuer=http://127.0.0.1:$as_port gw=https://localhost:$gw_port/mcp
    local opaque=http://127.0.0.1:$opaque_port/mcp other=http://127.0.0.1:$other_port/mcp

    start oauth-fixture "$FIXTURE" --name fx
    local fx_pid=$PID fx_port
    fx_port=$(wait_port oauth-fixture "$fx_pid" "$RUN/oauth-fixture.out")
    cat >"$dir/haproxy.cfg" <<EOF
global
    maxconn 256
defaults
    mode http
    timeout connect 5s
    timeout client 75s
    timeout server 75s
frontend tls
    bind 127.0.0.1:$hp_port ssl crt $dir/haproxy.pem
    default_backend fixture
backend fixture
    server fx 127.0.0.1:$fx_port
EOF
    timeout 20 haproxy -c -q -f "$dir/haproxy.cfg"
    start oauth-haproxy haproxy -db -f "$dir/haproxy.cfg"
    local hp_pid=$PID
    OIDC_PROVIDER_DIR=$IO/oauth start oauth-server node "$HERE/oauth_server.mjs" --port "$as_port" \
        --resource "$gw" --resource "$other" --opaque-resource "$opaque" --introspection-secret oauth-interop-secret
    local as_pid=$PID
    wait_port oauth-server "$as_pid" "$RUN/oauth-server.out" >/dev/null

    # name listen resource [tls]: one mcpgate taking the issuer's tokens for resource.
    oauth_gate() {
        local tls="" introspection=""
        [[ ${4:-} == tls ]] && tls="\"tls\": {\"cert_file\": \"$dir/gate.pem\", \"key_file\": \"$dir/gate.key\"},"
        [[ $1 == oauth-opaque ]] && introspection=", \"introspection\": {\"url\": \"$issuer/token/introspection\",
            \"client_id\": \"mcpgate\", \"client_secret\": \"oauth-interop-secret\"}"
        cat >"$dir/$1.json" <<EOF
{
  "listen": "127.0.0.1:$2", $tls
  "ca_file": "$dir/ca.pem",
  "auth": {"oauth": {"issuer": "$issuer", "resource": "$3", "required_scopes": ["mcp"] $introspection}},
  "mcpServers": {"fx": {"url": "https://localhost:$hp_port/mcp"}}
}
EOF
        start "$1" "$MCPGATE" --config "$dir/$1.json"
    }
    oauth_gate oauth-gate "$gw_port" "$gw" tls
    local gw_pid=$PID
    oauth_gate oauth-opaque "$opaque_port" "$opaque"
    local opaque_pid=$PID
    oauth_gate oauth-other "$other_port" "$other"
    local other_pid=$PID
    for p in "oauth-gate $gw_pid" "oauth-opaque $opaque_pid" "oauth-other $other_pid"; do
        wait_port "${p% *}" "${p#* }" "$RUN/${p% *}.out" >/dev/null
    done
    echo "oidc-provider :$as_port, mcpgate https :$gw_port (opaque :$opaque_port, other :$other_port), HAProxy :$hp_port, fixture :$fx_port"

    run timeout 180 "$VPY" "$HERE/oauth_checks.py" --url "$gw" --ca "$dir/ca.pem" --issuer "$issuer" \
        --other-resource-url "$other" --opaque-url "$opaque" --json "$dir/python.json" || true
    timeout 60 "$VPY" "$HERE/report.py" checks --json "$dir/python.json" --section "$section: Python SDK" --out "$RESULTS"
    NODE_EXTRA_CA_CERTS=$dir/ca.pem CLIENTS_DIR=$CLIENTS run timeout 120 node "$HERE/oauth_ts_client.mjs" --url "$gw" \
        --issuer "$issuer" --out "$dir/ts.json" || true
    timeout 60 "$VPY" "$HERE/report.py" checks --json "$dir/ts.json" --section "$section: TypeScript SDK" --out "$RESULTS"
    NODE_EXTRA_CA_CERTS=$dir/ca.pem MCP_REMOTE_BIN=$CLIENTS/node_modules/mcp-remote/dist/proxy.js NODE=$(command -v node) \
        MCP_REMOTE_LOG=$dir/mcp-remote.err OAUTH_BROWSER_LOG=$dir/browser.log run timeout 120 "$VPY" "$HERE/oauth_remote.py" \
        --url "$gw" --out "$dir/mcp-remote.json" || true
    timeout 60 "$VPY" "$HERE/report.py" checks --json "$dir/mcp-remote.json" --section "$section: mcp-remote" --out "$RESULTS"

    # What mcpgate counted, read over its HTTPS with the CA, and what reached the fixture.
    local counts
    counts=$(timeout 20 "$VPY" - "https://127.0.0.1:$gw_port/status.json" "$dir/ca.pem" "http://127.0.0.1:$fx_port/stats" <<'EOF' || true
import json, ssl, sys, urllib.request
status = json.load(urllib.request.urlopen(sys.argv[1], context=ssl.create_default_context(cafile=sys.argv[2]), timeout=5))
seen = json.load(urllib.request.urlopen(sys.argv[3], timeout=5))["authorizations"]
a, t = status["auth"], status["tls"]
ok = a["oauth_checked"] >= 4 and a["refused"] >= 3 and t["handshakes"] > 0 and seen == [""]
print(int(ok), f"tokens checked {a['oauth_checked']}, refused {a['refused']}, JWKS fetches {a['jwks_fetches']}; TLS handshakes "
      f"{t['handshakes']}, failed {t['handshake_failures']}; Authorization values at the fixture: {seen}")
EOF
)
    if [[ $counts =~ ^[01]\  ]]; then
        row "$section" "mcpgate checked each token once, over TLS; the fixture saw no client token" "${counts%% *}" "${counts#* }"
    else
        row "$section" "mcpgate checked each token once, over TLS; the fixture saw no client token" 0 "no counts: ${counts:-none}"
    fi
    stop_mcpgate oauth-gate "$gw_pid" "$section"
    stop_mcpgate oauth-opaque "$opaque_pid" "$section"
    stop_mcpgate oauth-other "$other_pid" "$section"
    stop "$as_pid"
    stop "$hp_pid"
    stop "$fx_pid"
}
