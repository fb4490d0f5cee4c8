#!/usr/bin/env bash
# What mcpgate shows of itself, checked with the real tools: /metrics
# through `promtool check metrics` and scraped by a real Prometheus server,
# whose HTTP API must return the live session count; and the status page
# rendered in headless Chromium, with its text checked and no console
# message. mcpgate runs in front of 3 servers (one HTTP fixture, one stdio
# fixture, one nobody listens on) with 20 client sessions.
#
# Installs what is missing (Debian's `prometheus` and `chromium`, as root).
# Everything listens on 127.0.0.1, on ports picked at random (or 0); every
# process it starts is stopped by its PID on exit; every wait is bounded.
#
#   scripts/observe.sh [--screenshots DIR]   DIR: also save the page's
#                                            screenshots there (docs/)
set -euo pipefail
cd "$(dirname "$0")/.."

shots=""
case "${1:-}" in
"") ;;
--screenshots) shots=${2:?--screenshots needs a directory} ;;
*)
    echo "usage: scripts/observe.sh [--screenshots DIR]" >&2
    exit 2
    ;;
esac

SESSIONS=20
started_at=$SECONDS
step() { printf '== %s (%d s)\n' "$*" $((SECONDS - started_at)); }

step "building mcpgate and the fixture"
cargo build --quiet --bin mcpgate --bin mcp-fixture
bin="${CARGO_TARGET_DIR:-target}/debug"
bin=$(cd "$bin" && pwd)

work=$(mktemp -d)
LOG_DIR=$work
# start, wait_for, free_port, fail; every process stopped on exit: scripts/lib.sh.
# shellcheck source=lib.sh
. scripts/lib.sh
on_exit() { rm -rf "$work"; }
install_debian "${TMPDIR:-/tmp}/mcpgate-observe-apt.log" promtool=prometheus prometheus=prometheus chromium=chromium ||
    fail "prometheus and chromium are not installed (above)"

listening() { grep -q '^listening on ' "$work/$1.out" 2>/dev/null; }
# Where NAME listens, from its first line: `listening on [http://]ADDR[/mcp]`.
address() { head -n1 "$work/$1.out" | sed 's#^listening on ##; s#^http://##; s#/mcp$##'; }

step "starting a fixture and mcpgate in front of 3 servers, one of them down"
start files "$bin/mcp-fixture" --listen 127.0.0.1:0 --name files
wait_for 10 "the fixture listening" listening files || exit 1
weather_port=$(free_port)
token_laptop="observe-laptop-0123456789"
token_ci="observe-ci-0123456789abcd"
cat >"$work/mcpgate.json" <<EOF
{
  "listen": "127.0.0.1:0",
  "connect_timeout_secs": 2,
  "auth": {"tokens": [{"token": "$token_laptop", "name": "laptop"}, {"token": "$token_ci", "name": "ci-runner"}]},
  "mcpServers": {
    "files": {"url": "http://$(address files)/mcp"},
    "search": {"command": "mcp-fixture", "args": ["--stdio", "--name", "search"], "sharing": "shared"},
    "weather": {"url": "http://127.0.0.1:$weather_port/mcp"}
  }
}
EOF
# The stdio server is found on PATH, so the page (and its screenshots) show
# a command as a user would write it, not this machine's build directory.
PATH="$bin:$PATH" start mcpgate "$bin/mcpgate" --config "$work/mcpgate.json"
wait_for 10 "mcpgate listening" listening mcpgate || exit 1
gate=$(address mcpgate)

post() { # TOKEN SESSION BODY: POSTs to /mcp; the answer's head on stdout
    curl -fsS -m 10 -D - -o /dev/null -H "Authorization: Bearer $1" ${2:+-H "Mcp-Session-Id: $2"} \
        -H 'MCP-Protocol-Version: 2025-11-25' -H 'Content-Type: application/json' \
        -H 'Accept: application/json, text/event-stream' -d "$3" "http://$gate/mcp"
}
clients=(claude-code cursor vscode mcp-inspector)
for i in $(seq "$SESSIONS"); do
    token=$token_laptop
    [ $((i % 3)) -eq 0 ] && token=$token_ci
    client=${clients[$((i % ${#clients[@]}))]}
    init="{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-11-25\",\
\"capabilities\":{},\"clientInfo\":{\"name\":\"$client\",\"version\":\"1\"}}}"
    session=$(post "$token" "" "$init" | tr -d '\r' | sed -n 's/^[Mm]cp-[Ss]ession-[Ii]d: //p')
    [ -n "$session" ] || fail "initialize #$i gave no session id"
    post "$token" "$session" '{"jsonrpc":"2.0","method":"notifications/initialized"}' >/dev/null
    for tool in files__echo search__echo; do
        post "$token" "$session" "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\
\"params\":{\"name\":\"$tool\",\"arguments\":{\"text\":\"hi\"}}}" >/dev/null
    done
done

step "promtool check metrics on /metrics"
curl -fsS -m 10 "http://$gate/metrics" >"$work/metrics.txt"
promtool check metrics <"$work/metrics.txt" || fail "promtool check metrics refused /metrics"
grep -qx "mcpgate_sessions_live $SESSIONS" "$work/metrics.txt" || fail "/metrics: mcpgate_sessions_live is not $SESSIONS"
grep -q '^mcpgate_server_up{server="weather"} 0$' "$work/metrics.txt" || fail "/metrics: weather is not down"
echo "$(grep -c '^# TYPE' "$work/metrics.txt") families, $(grep -vc '^#' "$work/metrics.txt") samples, promtool: no problem"

step "Prometheus scraping mcpgate"
prom_port=$(free_port)
cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: mcpgate
    static_configs:
      - targets: ["$gate"]
EOF
start prometheus prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/prometheus" \
    --web.listen-address="127.0.0.1:$prom_port" --log.level=warn
prometheus_ready() { curl -fsS -m 2 -o /dev/null "http://127.0.0.1:$prom_port/-/ready" 2>/dev/null; }
wait_for 30 "Prometheus ready" prometheus_ready || exit 1
# query PROMQL: the value of its first result, or nothing.
query() {
    curl -fsS -m 2 -G "http://127.0.0.1:$prom_port/api/v1/query" --data-urlencode "query=$1" 2>/dev/null |
        sed -n 's/.*"value":\[[^,]*,"\([^"]*\)"\].*/\1/p'
}
scraped_sessions() { [ "$(query mcpgate_sessions_live)" = "$SESSIONS" ]; }
if ! wait_for 30 "Prometheus' mcpgate_sessions_live = $SESSIONS" scraped_sessions; then
    curl -sS -m 2 "http://127.0.0.1:$prom_port/api/v1/targets" >&2 || true
    cat "$work/prometheus.err" >&2
    fail "Prometheus did not return the live session count"
fi
[ "$(query 'up{job="mcpgate"}')" = 1 ] || fail "Prometheus: up{job=\"mcpgate\"} is not 1"
calls=$(query 'sum(mcpgate_server_request_duration_seconds_count)')
[ "${calls:-0}" -ge $((2 * SESSIONS)) ] || fail "Prometheus: $calls timed requests, expected at least $((2 * SESSIONS))"
echo "Prometheus /api/v1/query: mcpgate_sessions_live = $SESSIONS, up = 1, timed requests = $calls"

step "the status page in headless Chromium"
chrome() { timeout 60 chromium --headless --disable-gpu --no-sandbox --no-first-run --hide-scrollbars \
    --user-data-dir="$work/chromium" --enable-logging=stderr --v=0 "$@"; }
chrome --dump-dom "http://$gate/status" >"$work/dom.html" 2>"$work/chromium.err" ||
    fail "chromium --dump-dom failed: $(tail -n3 "$work/chromium.err")"
if grep ':CONSOLE' "$work/chromium.err" >&2; then
    fail "the page wrote to the console (above)"
fi
for text in \
    "<p class=\"verdict\" id=\"health\">NOT HEALTHY: server \`weather\` is down: unreachable" \
    '<h2>Servers: 3, 1 down</h2>' \
    '<td>files</td><td>http</td>' \
    '<td>search</td><td>stdio</td>' \
    '<td>weather</td><td>http</td>' \
    "<h2>Sessions: $SESSIONS live</h2>" \
    '<td>laptop</td>' \
    '<td>ci-runner</td>' \
    '<h2>Threads: ' \
    ' MiB<' \
    "$((2 * SESSIONS)) opened = 0 closed + $((2 * SESSIONS)) live"; do
    grep -qF "$text" "$work/dom.html" || fail "the rendered page lacks: $text"
done
sessions_rows=$(grep -o '<tr><td><code>[0-9a-f]\{8\}</code></td>' "$work/dom.html" | wc -l)
[ "$sessions_rows" -eq "$SESSIONS" ] || fail "the page lists $sessions_rows sessions, not $SESSIONS"
echo "rendered: verdict, 3 servers (1 down), $SESSIONS sessions, threads, memory; no console message"

shot_dir=${shots:-$work}
mkdir -p "$shot_dir"
for size in 1280,1800 390,1500; do
    name=status-page.png
    [ "$size" = 390,1500 ] && name=status-page-phone.png
    chrome --window-size="$size" --screenshot="$shot_dir/$name" "http://$gate/status" >/dev/null 2>"$work/shot.err" ||
        fail "chromium --screenshot failed: $(tail -n3 "$work/shot.err")"
    [ "$(head -c 8 "$shot_dir/$name" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] ||
        fail "$name is not a PNG"
done
echo "screenshots: $shot_dir/status-page.png, status-page-phone.png"

step "all checks passed"
