//! Servers of the 2026-07-28 era behind mcpgate (the fixture with
//! `--modern` or `--both-eras`): mcpgate asks each server what it speaks,
//! keeps no session with one of this era, and bridges the eras: a
//! session-era client's call that the server answers `input_required` is
//! asked of the client on its call's stream and retried with its answers,
//! so the client sees one call; a client of the era gets the server's
//! `input_required` as it is; list changes reach session-era clients'
//! `GET` streams from one standing `subscriptions/listen`.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{Fixture, Gate, Modern, assert_balanced, wait_until};

fn gate_for(fx: &Fixture) -> Gate {
    Gate::start_checked(&json!({"listen": "127.0.0.1:0", "mcpServers": {"fx": {"url": fx.url()}}}))
}

fn modern_count(fx: &Fixture, method: &str) -> u64 {
    fx.stats()["modern_requests"][method].as_u64().unwrap_or(0)
}

#[test]
fn a_server_of_the_new_era_is_asked_once_and_holds_no_session() {
    let fx = Fixture::start("fx", &["--modern"]);
    let gate = gate_for(&fx);
    let mut a = gate.open_session();
    let mut b = gate.open_session();
    assert_eq!(a.tool_text("fx__echo", json!({"text": "one"})), "one");
    assert_eq!(b.tool_text("fx__echo", json!({"text": "two"})), "two");
    assert_eq!(fx.count("discover"), 1, "asked once, remembered: {}", fx.stats());
    let status = gate.status();
    assert_eq!(status["servers"]["fx"]["era"], "2026-07-28", "{status}");
    // No session was opened at the server, so none is counted, and none is DELETEd.
    assert_eq!(status["downstream"]["opened"], 0, "{status}");
    assert_eq!(a.delete(), 200);
    assert_eq!(b.delete(), 200);
    assert_balanced(&gate.status());
    assert_eq!(fx.count("delete"), 0);
}

#[test]
fn a_session_era_clients_call_gets_the_servers_questions_on_its_stream_and_sees_one_call() {
    let fx = Fixture::start("fx", &["--modern"]);
    let gate = gate_for(&fx);
    let mut client = gate.client();
    client.initialize_with(json!({"sampling": {}, "elicitation": {}}));
    let (events, response) = client.call_streaming("fx__sample", json!({"prompt": "hi"}), |request| {
        assert_eq!(request["method"], "sampling/createMessage", "{request}");
        Some(json!({"role": "assistant", "content": {"type": "text", "text": "from the client"}, "model": "m"}))
    });
    let text = response["result"]["content"][0]["text"].as_str().unwrap_or_default();
    assert_eq!(text, "sampled: from the client", "{response}\n{events:?}");
    assert!(response["result"].get("requestState").is_none(), "the client sees the final result only: {response}");
    // Two rounds of questions, one call for the client.
    let mut asked = 0;
    let (_, response) = client.call_streaming("fx__elicit_twice", json!({"message": "ok?"}), |request| {
        asked += 1;
        assert_eq!(request["method"], "elicitation/create", "{request}");
        Some(json!({"action": "accept", "content": {"answer": format!("a{asked}")}}))
    });
    assert_eq!(asked, 2, "{response}");
    assert!(response.get("result").is_some(), "{response}");
    assert!(fx.count("retries_with_state") >= 3, "{}", fx.stats());
    assert_eq!(fx.count("bad_request_state"), 0);
}

#[test]
fn a_client_that_cannot_answer_gets_an_error_naming_what_the_server_asked() {
    let fx = Fixture::start("fx", &["--modern"]);
    let gate = gate_for(&fx);
    let mut client = gate.open_session();
    // The server learns the client's capabilities from mcpgate's _meta, and refuses itself.
    let reply = client.call_tool("fx__sample", json!({"prompt": "hi"}));
    assert_eq!(reply.error_code(), -32021, "{}", reply.body);
    assert!(reply.error_message().contains("sampling"), "{}", reply.body);
    assert_eq!(fx.stats()["modern_last_client_capabilities"], json!({}), "the client's own capabilities");
}

#[test]
fn list_changes_reach_session_clients_from_one_standing_listen() {
    let fx = Fixture::start("fx", &["--modern", "--keepalive-ms", "200"]);
    let gate = gate_for(&fx);
    let mut a = gate.open_session();
    let b = gate.open_session();
    let (sa, sb) = (a.open_stream(), b.open_stream());
    assert!(wait_until(Duration::from_secs(5), || fx.count("listen_open") >= 1), "{}", fx.stats());
    assert_eq!(a.tool_text("fx__notify", json!({"kind": "tools"})), "sent to 1", "one standing listen for both");
    for stream in [&sa, &sb] {
        let changed = stream.next_with_method("notifications/tools/list_changed", Duration::from_secs(5));
        assert!(changed.is_some(), "a session's GET stream missed the list change");
    }
    // The next list is fresh.
    assert!(a.tool_names().iter().any(|n| n == "fx__echo"));
    drop((sa, sb));
    assert_eq!(a.delete(), 200);
    assert_eq!(b.delete(), 200);
    // With no session on it, the standing listen is closed.
    assert!(
        wait_until(Duration::from_secs(5), || gate.status()["threads"]["readers"] == 0),
        "{}",
        gate.status()["threads"]
    );
}

#[test]
fn a_cancel_closes_the_calls_connection_which_is_the_new_eras_cancel() {
    let fx = Fixture::start("fx", &["--modern", "--keepalive-ms", "100"]);
    let gate = gate_for(&fx);
    let client = gate.open_session();
    let body = json!({"jsonrpc": "2.0", "id": "c1", "method": "tools/call",
        "params": {"name": "fx__cancellable", "arguments": {"every_ms": 50}}});
    let caller = client.same_session();
    let call = std::thread::spawn(move || caller.post(body.to_string().as_bytes(), &[]));
    assert!(
        wait_until(Duration::from_secs(5), || fx.received("tools/call") == 1 && fx.count("requests_running") == 1),
        "{}",
        fx.stats()
    );
    assert_eq!(client.notify("notifications/cancelled", json!({"requestId": "c1"})), 202);
    assert!(
        wait_until(Duration::from_secs(3), || fx.count("modern_cancelled_by_disconnect") == 1),
        "the server saw no disconnect: {}",
        fx.stats()
    );
    let _ = call.join();
}

#[test]
fn a_client_of_the_new_era_gets_the_servers_questions_as_they_are() {
    let fx = Fixture::start("fx", &["--modern"]);
    let gate = gate_for(&fx);
    let mut client = Modern::new(&gate.url());
    client.capabilities = json!({"sampling": {}});
    let first = client.call(1, "fx__sample", json!({"prompt": "x"}));
    let result = first.result();
    assert_eq!(result["resultType"], "input_required", "{first:?}");
    let state = result["requestState"].as_str().unwrap();
    assert!(!state.starts_with("mcpgate:"), "the server's own state, passed on: {state}");
    let key = result["inputRequests"].as_object().unwrap().keys().next().unwrap().clone();
    let answer = json!({"role": "assistant", "content": {"type": "text", "text": "modern"}, "model": "m"});
    let second = client.send(
        json!(2),
        "tools/call",
        json!({"name": "fx__sample", "arguments": {"prompt": "x"}, "inputResponses": {key: answer}, "requestState": state}),
        &[],
    );
    assert_eq!(second.result()["content"][0]["text"], "sampled: modern", "{second:?}");
    assert_eq!(fx.stats()["modern_last_client_capabilities"], json!({"sampling": {}}), "the client's own _meta");
    assert_eq!(modern_count(&fx, "tools/call"), 2);
}

#[test]
fn a_server_of_both_eras_is_spoken_to_in_the_session_era() {
    // Its tools may ask the client things over the session's back-channel,
    // which the new era lacks: the session era keeps them working.
    let fx = Fixture::start("fx", &["--both-eras"]);
    let gate = gate_for(&fx);
    let mut client = gate.client();
    client.initialize_with(json!({"sampling": {}}));
    assert_eq!(client.tool_text("fx__echo", json!({"text": "x"})), "x");
    assert_eq!(gate.status()["servers"]["fx"]["era"], "session");
    assert_eq!((fx.count("discover"), fx.count("initialize")), (1, 1), "{}", fx.stats());
    let (_, response) = client.call_streaming("fx__sample", json!({"prompt": "p"}), |request| {
        assert_eq!(request["method"], "sampling/createMessage");
        Some(json!({"role": "assistant", "content": {"type": "text", "text": "back-channel"}, "model": "m"}))
    });
    assert_eq!(response["result"]["content"][0]["text"], "sampled: back-channel", "{response}");
    // And a server of the session era only is asked once, then initialized.
    let old = Fixture::start("old", &[]);
    let gate = gate_for(&old);
    let mut client = gate.open_session();
    assert_eq!(client.tool_text("fx__echo", json!({"text": "y"})), "y");
    assert_eq!(gate.status()["servers"]["fx"]["era"], "session");
    assert_eq!(old.count("initialize"), 1);
}

#[test]
fn a_server_that_lists_only_the_new_era_but_answers_initialize_speaks_both() {
    // The Python SDK 2.3.0's servers: `server/discover` names 2026-07-28
    // alone, yet `initialize` opens a session whose tools ask the client
    // things over its back-channel. The session era keeps them working.
    let fx = Fixture::start("fx", &["--both-eras", "--discover-modern-only"]);
    let gate = gate_for(&fx);
    let mut client = gate.client();
    client.initialize_with(json!({"sampling": {}}));
    assert_eq!(gate.status()["servers"]["fx"]["era"], "session", "{}", fx.stats());
    let (_, response) = client.call_streaming("fx__sample", json!({"prompt": "p"}), |request| {
        assert_eq!(request["method"], "sampling/createMessage");
        Some(json!({"role": "assistant", "content": {"type": "text", "text": "back-channel"}, "model": "m"}))
    });
    assert_eq!(response["result"]["content"][0]["text"], "sampled: back-channel", "{response}");
    // Asking cost one session, closed at once: the server sees a DELETE for each initialize.
    assert_eq!(client.delete(), 200);
    assert!(
        wait_until(Duration::from_secs(5), || fx.count("initialize") == 2 && fx.count("delete") == 2),
        "{}",
        fx.stats()
    );
    assert_eq!(fx.count("discover"), 1);
    assert_balanced(&gate.status());
}

#[test]
fn a_call_mirrors_the_arguments_its_tool_marks_for_headers() {
    let fx = Fixture::start("fx", &["--modern"]);
    let gate = gate_for(&fx);
    let mut client = gate.open_session();
    let reply = client.call_tool("fx__routed", json!({"region": "eu-west", "shard": 7}));
    assert!(reply.body.get("result").is_some() && reply.body["result"]["isError"] != true, "{}", reply.body);
    let headers = &fx.stats()["modern_last_headers"];
    assert_eq!(headers["mcp-param-region"], "eu-west", "{headers}");
    assert_eq!(headers["mcp-param-shard"], "7", "{headers}");
    assert_eq!(headers["mcp-name"], "routed", "{headers}");
}

/// The era probe is single-flight per server: 20 sessions initialized at
/// once on a fresh mcpgate ask `server/discover` once (and, for a server
/// whose discover names 2026-07-28 alone, send one probing `initialize`);
/// the others wait for that answer. Before: 20 probes, each with its own
/// extra `initialize` and `DELETE`.
#[test]
fn sessions_opening_at_once_ask_a_server_its_era_once() {
    let fx = Fixture::start("fx", &["--both-eras", "--discover-modern-only"]);
    let gate = gate_for(&fx);
    let url = gate.url();
    let clients: Vec<_> = (0..20)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || {
                let mut client = support::Client::new(&url);
                client.initialize();
                client
            })
        })
        .collect();
    let clients: Vec<_> = clients.into_iter().map(|c| c.join().expect("initialize")).collect();
    assert_eq!(fx.count("discover"), 1, "{}", fx.stats());
    assert_eq!(fx.count("initialize"), 21, "20 sessions and one probe: {}", fx.stats());
    for client in &clients {
        assert_eq!(client.delete(), 200);
    }
    assert!(wait_until(Duration::from_secs(10), || fx.count("delete") == 21), "{}", fx.stats());
    assert_balanced(&gate.status());
}

/// What a client of the era sees of `resources/read`, `tools/list` and
/// `ping`, asked at `url`: the read's cache hints, the list's, and ping's
/// answer (a result, or the error code).
fn what_a_client_sees(url: &str, uri: &str) -> (Value, Value, Result<Value, i64>) {
    let client = Modern::new(url);
    let hints = |reply: &support::Reply| json!([reply.result()["cacheScope"], reply.result()["ttlMs"]]);
    let read = client.send(json!(1), "resources/read", json!({"uri": uri}), &[]);
    let list = client.send(json!(2), "tools/list", json!({}), &[]);
    let ping = client.send(json!(3), "ping", json!({}), &[]);
    let ping = if ping.body.get("error").is_some() { Err(ping.error_code()) } else { Ok(ping.result().clone()) };
    (hints(&read), hints(&list), ping)
}

/// Finding 2 of issue 38: a server that says a resource is private (the
/// SDK's default for a resource read in 2026-07-28) must not be made
/// public by mcpgate, whichever era mcpgate speaks to it in. `ping`, which
/// the era removed, is mcpgate's own (it is not passed on): 404 and
/// -32601, as the spec, the conformance suite and the SDKs' servers
/// (fastmcp 4.2.3, Python SDK 2.3.0) answer it, even in front of a server
/// that answers it.
/// A server of 2026-07-28 alone is spoken to in that era (its hints come
/// with its results); one of both eras in the session era, whose results
/// carry none: mcpgate, not knowing, says what the SDK says of a result
/// whose handler set none (private, 0 ms), never public.
#[test]
fn a_resource_the_server_keeps_private_stays_private_and_ping_is_not_of_the_new_era() {
    for era in ["--both-eras", "--modern"] {
        let fx = Fixture::start("fx", &[era, "--cache-scope", "private", "--ttl-ms", "1234", "--ping"]);
        let gate = gate_for(&fx);
        let uri = "fixture://fx/readme";
        let direct = what_a_client_sees(&fx.url(), uri);
        let through = what_a_client_sees(&gate.url(), uri);
        eprintln!("{era}: directly {direct:?}; through mcpgate {through:?}");
        assert_eq!(direct.0[0], "private", "{era}: the fixture's own answer: {direct:?}");
        assert_eq!(through.0[0], "private", "{era}: resources/read made public through mcpgate: {through:?}");
        if era == "--modern" {
            assert_eq!(through.0, direct.0, "{era}: the server's own hints, passed as it sent them");
        } else {
            assert_eq!(through.0[1], 0, "{era}: hints the server did not send are not made up: {through:?}");
        }
        assert_eq!(through.1[0], "private", "{era}: a list merged from a private one: {through:?}");
        assert!(direct.2.is_ok(), "{era}: the fixture answers ping in the era: {direct:?}");
        assert_eq!(through.2, Err(-32601), "{era}: ping is not of the era: {through:?}");
    }
}

/// The merged lists are mcpgate's own answer, made of each server's:
/// their `ttlMs` is the shortest a server gave, their `cacheScope`
/// private when any server's list is (or tokens decide what a client
/// sees), public only when every one is.
#[test]
fn a_merged_list_has_the_shortest_ttl_and_is_private_when_any_server_keeps_its_list_private() {
    let open = Fixture::start("open", &["--modern", "--cache-scope", "public", "--ttl-ms", "9000"]);
    let kept = Fixture::start("kept", &["--modern", "--cache-scope", "private", "--ttl-ms", "2500"]);
    let also_open = Fixture::start("also", &["--modern", "--cache-scope", "public", "--ttl-ms", "7000"]);
    for (servers, scope, ttl) in [
        (vec![("open", &open), ("kept", &kept)], "private", 2500),
        (vec![("open", &open), ("also", &also_open)], "public", 7000),
    ] {
        let names: serde_json::Map<String, Value> =
            servers.iter().map(|(name, fx)| (name.to_string(), json!({"url": fx.url()}))).collect();
        let gate = Gate::start_checked(&json!({"listen": "127.0.0.1:0", "mcpServers": names}));
        let client = Modern::new(&gate.url());
        for method in ["tools/list", "prompts/list", "resources/list", "resources/templates/list"] {
            let list = client.send(json!(1), method, json!({}), &[]);
            let hints = (&list.result()["cacheScope"], &list.result()["ttlMs"]);
            assert_eq!(hints, (&json!(scope), &json!(ttl)), "{method} of {:?}", names.keys());
        }
    }
}
