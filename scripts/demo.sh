#!/usr/bin/env bash
# Runs mcpgate in front of three bundled demo MCP servers (the test
# fixture: two over HTTP on 127.0.0.1:9101 and :9102, one that mcpgate
# starts itself and speaks to over stdio), sends a tool call to each kind
# through it with curl, and keeps running until Ctrl-C. With --once it
# stops after the calls.
set -euo pipefail
cd "$(dirname "$0")/.."

once=0
[ "${1:-}" = "--once" ] && once=1

cargo build --quiet --bins
# Where cargo put them: $CARGO_TARGET_DIR or target/.
bin=${CARGO_TARGET_DIR:-target}/debug
LOG_DIR=$(mktemp -d)
# shellcheck source=lib.sh
. scripts/lib.sh
# stop_all stops mcpgate first (the newest), so that its DELETEs reach the demo servers.
on_exit() { rm -rf "$LOG_DIR"; }
# config/demo.json names the stdio server as target/debug/mcp-fixture.
sed "s#\"target/debug/mcp-fixture\"#\"$bin/mcp-fixture\"#" config/demo.json >"$LOG_DIR/demo.json"

start demo "$bin/mcp-fixture" --listen 127.0.0.1:9101 --name demo
start tools "$bin/mcp-fixture" --listen 127.0.0.1:9102 --name tools
start mcpgate "$bin/mcpgate" --config "$LOG_DIR/demo.json"
gate=$PID

url=http://127.0.0.1:8780/mcp
healthy() { curl -fsS --max-time 1 -o /dev/null http://127.0.0.1:8780/healthz 2>/dev/null; }
wait_for 10 "mcpgate answering on :8780 (see $LOG_DIR/mcpgate.err)" healthy || exit 1

post() {
  curl -fsS -D "$headers" -H 'Content-Type: application/json' \
    -H 'Accept: application/json, text/event-stream' ${session:+-H "Mcp-Session-Id: $session"} \
    "$url" -d "$1"
}
headers=$LOG_DIR/headers
session=
echo "> initialize"
post '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"demo","version":"1"}}}'
echo
session=$(grep -i '^mcp-session-id:' "$headers" | cut -d' ' -f2 | tr -d '\r')
post '{"jsonrpc":"2.0","method":"notifications/initialized"}'
echo "> tools/list (names)"
post '{"jsonrpc":"2.0","id":2,"method":"tools/list"}' | grep -o '"name":"[^"]*"' | tr '\n' ' '
echo
echo "> tools/call demo__echo"
reply=$(post '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"demo__echo","arguments":{"text":"hello through mcpgate"}}}')
echo "$reply"
grep -q 'hello through mcpgate' <<<"$reply"
echo "> tools/call local__echo (a stdio server: mcpgate started it for this session)"
reply=$(post '{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"local__echo","arguments":{"text":"hello over stdio"}}}')
echo "$reply"
grep -q 'hello over stdio' <<<"$reply"
status=$(curl -fsS http://127.0.0.1:8780/status.json)
echo "> status: $(grep -o '"downstream":{[^}]*}' <<<"$status") $(grep -o '"processes":{"balanced[^}]*}' <<<"$status")"

if [ $once = 1 ]; then
  exit 0
fi
echo
echo "mcpgate is serving $url (status: http://127.0.0.1:8780/status). Ctrl-C stops it and the demo servers."
echo "\`local\` is a stdio server: each client session gets its own process, stopped with the session."
wait "$gate"
