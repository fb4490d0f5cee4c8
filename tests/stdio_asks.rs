//! What a stdio server sends a client session that has no request of its own running: it
//! reaches the client, on its GET stream. Found with the real server-filesystem
//! (scripts/interop.sh, step 4c), which asks for the client's roots as soon as it is
//! initialized: in about one session in ten the request was lost, either because it came while
//! mcpgate's own `tools/list` (the merged list) was the one call running on the child, whose
//! answer goes to no client, or because it came before the session listened to its child,
//! and was refused. The server here is a few lines of sh that time what it sends so that
//! each case happens every time.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{Gate, TempDir, config};

/// Answers `initialize` (first writing `$EARLY` after the answer, if set), and `tools/list`
/// with one tool, first asking the client for its roots (`roots/list`, id "ask-1"); when the
/// client's answer comes back it says so with a log message naming the roots it got.
const SERVER: &str = r#"
while IFS= read -r line; do
  case $line in
    *'"method":"initialize"'*)
      printf '%s\n' '{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{},"logging":{}},"serverInfo":{"name":"asker","version":"1"}}}'
      [ -n "$EARLY" ] && printf '%s\n' "$EARLY" ;;
    *'"method":"tools/list"'*)
      id=${line#*\"id\":}; id=${id%%,*}
      printf '%s\n' '{"jsonrpc":"2.0","id":"ask-1","method":"roots/list"}'
      printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"t","inputSchema":{"type":"object"}}]}}\n' "$id" ;;
    *'"id":"ask-1"'*)
      uri=${line#*\"uri\":\"}; uri=${uri%%\"*}
      printf '{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"roots answered: %s"}}\n' "$uri" ;;
  esac
done
"#;

/// mcpgate in front of [`SERVER`] (a file: `${...}` in `args` would be a variable to expand).
fn gate(env: Value) -> (Gate, TempDir) {
    let dir = TempDir::new();
    let script = dir.0.join("asker.sh");
    std::fs::write(&script, SERVER).expect("write the server's script");
    let mut c = config(&[]);
    c["mcpServers"] = json!({ "asker": { "command": "sh", "args": [script], "env": env, "sharing": "session" } });
    (Gate::start_checked(&c), dir)
}

fn log_data(message: &Option<Value>) -> String {
    message.as_ref().map(|m| m["params"]["data"].as_str().unwrap_or_default().to_string()).unwrap_or_default()
}

/// The server asks for the roots while mcpgate's own `tools/list` is the one call running on
/// it: the request must not go to that call (its messages reach no client) but to the
/// session's GET stream, and the client's answer back to the server.
#[test]
fn a_request_made_during_mcpgates_own_list_call_reaches_the_client() {
    let (gate, _dir) = gate(json!({}));
    let mut client = gate.client();
    client.initialize_with(json!({ "roots": {} }));
    let stream = client.open_stream();
    let tools = client.request("tools/list", json!({}));
    assert_eq!(tools.result()["tools"][0]["name"], "asker__t", "{:?}", tools.body);

    let ask = stream.next_with_method("roots/list", Duration::from_secs(5));
    let Some(ask) = ask else { panic!("the server's roots/list never reached the client; log:\n{}", gate.stderr()) };
    let roots = json!({ "roots": [{ "uri": "file:///tmp/asker-root", "name": "r" }] });
    assert_eq!(client.respond(&ask["id"], roots), 202);
    let said = stream.next_with_method("notifications/message", Duration::from_secs(5));
    assert_eq!(log_data(&said), "roots answered: file:///tmp/asker-root", "log:\n{}", gate.stderr());
}

/// What the server sends right after its `initialize` answer, before mcpgate has started
/// listening to it for the session (here a log message, which MCP lets a server send before
/// `notifications/initialized`), is kept for the session and reaches its client.
#[test]
fn what_a_child_sends_before_its_session_listens_reaches_the_client() {
    let early = json!({
        "jsonrpc": "2.0", "method": "notifications/message",
        "params": { "level": "info", "data": "sent with the initialize answer" },
    });
    let (gate, _dir) = gate(json!({ "EARLY": early.to_string() }));
    let client = {
        let mut c = gate.client();
        c.initialize();
        c
    };
    let mut client = client;
    let stream = client.open_stream();
    // Its process starts with the session's first request.
    let tools = client.request("tools/list", json!({}));
    assert_eq!(tools.result()["tools"][0]["name"], "asker__t", "{:?}", tools.body);
    let said = stream.next_with_method("notifications/message", Duration::from_secs(5));
    assert_eq!(log_data(&said), "sent with the initialize answer", "log:\n{}", gate.stderr());
}
