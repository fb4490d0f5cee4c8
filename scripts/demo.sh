#!/usr/bin/env bash
# Runs mcpgate in front of three bundled demo MCP servers (the test
# fixture: two over HTTP on 127.0.0.1:9101 and :9102, one that mcpgate
# starts itself and speaks to over stdio), sends a tool call to each kind
# through it with curl, and keeps running until Ctrl-C. With --once it
# stops after the calls. As mcpgate stops, its log says what it closed, and
# each demo server how many sessions it saw opened and DELETEd.
#
# It talks only to the processes it started: a port of the three that is
# taken fails it at once, naming the process that holds it, and mcpgate
# must say it listens on :8780 itself, and hold that port, before any call.
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
gate=
# mcpgate is stopped first, alone, so that its DELETEs reach the demo servers; then its log
# as it stopped, and what the servers counted.
before_stop() {
  [[ -n $gate ]] || return 0
  stop "$gate" 30
  echo
  echo "> mcpgate stopped; its log as it stopped:"
  sed -n '/closing every session/,$p' "$LOG_DIR/mcpgate.err" | sed 's/^/  /'
  local name port stats
  for name in demo tools; do
    port=${PORTS[$name]}
    stats=$(curl -fsS --max-time 5 "http://127.0.0.1:$port/stats" 2>/dev/null) || continue
    echo "> the demo server \`$name\` saw $(grep -o '"initialize":[0-9]*' <<<"$stats" | cut -d: -f2) session(s) opened and $(grep -o '"delete":[0-9]*' <<<"$stats" | cut -d: -f2) DELETEd"
  done
}
# The logs go with a run that ended well (or by Ctrl-C); a failed one keeps them, and says where.
on_exit() {
  if [[ $EXIT_CODE == @(0|130|143) ]] || ! compgen -G "$LOG_DIR/*.err" >/dev/null; then
    rm -rf "$LOG_DIR"
  else
    echo "$SCRIPT: the processes' logs are kept in $LOG_DIR" >&2
  fi
}
# config/demo.json names the stdio server as target/debug/mcp-fixture.
sed "s#\"target/debug/mcp-fixture\"#\"$bin/mcp-fixture\"#" config/demo.json >"$LOG_DIR/demo.json"

declare -A PORTS=([demo]=9101 [tools]=9102 [mcpgate]=8780)
for name in mcpgate demo tools; do
  if holder=$(port_holder "${PORTS[$name]}"); then
    fail "port ${PORTS[$name]}, which the demo's $name needs, is taken by $holder. Stop that process (or free the port: the demo uses 8780, 9101 and 9102), then run the demo again."
  fi
done

# serve_own NAME CMD...: starts it, and returns once it said itself that it listens on its port
# (it holds it, so nothing else answers there); fails, showing why, if it ends first.
serve_own() {
  local name=$1 port=${PORTS[$1]} said
  start "$@"
  said=$(wait_port "$name" "$PID" "$LOG_DIR/$name.out" "$LOG_DIR/$name.err") ||
    fail "$name did not start (its last lines above)"
  [[ $said == "$port" ]] || fail "$name listens on $said, not $port"
  [[ $(port_holder "$port") == "pid $PID:"* ]] || fail "port $port is held by $(port_holder "$port"), not by $name (pid $PID)"
}
serve_own demo "$bin/mcp-fixture" --listen 127.0.0.1:9101 --name demo
serve_own tools "$bin/mcp-fixture" --listen 127.0.0.1:9102 --name tools
serve_own mcpgate "$bin/mcpgate" --config "$LOG_DIR/demo.json"
gate=$PID
echo "mcpgate (pid $gate) listens on 127.0.0.1:8780, in front of the demo servers (pids of its own)"

url=http://127.0.0.1:8780/mcp
healthy() { curl -fsS --max-time 1 -o /dev/null http://127.0.0.1:8780/healthz 2>/dev/null; }
wait_for 10 "mcpgate answering /healthz on :8780" healthy || fail "mcpgate listens but does not answer (its log: $LOG_DIR/mcpgate.err, kept)"

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
echo "mcpgate is serving $url (status: http://127.0.0.1:8780/status). Ctrl-C stops it and the demo servers,"
echo "and shows mcpgate's log as it stops (all of it, meanwhile: $LOG_DIR/mcpgate.err)."
echo "\`local\` is a stdio server: each client session gets its own process, stopped with the session."
wait "$gate"
