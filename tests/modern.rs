//! Clients of the 2026-07-28 era (no `initialize`, no session) through
//! mcpgate to session-era servers (the fixture): the checks every request
//! passes, discover, lists and calls with the fields the era requires, a
//! server's sampling request carried as `input_required` and the call held
//! until the retry, closing the stream as a cancel, `subscriptions/listen`,
//! tokens and OAuth subjects, and the session mcpgate keeps for these clients going through
//! the one close path like any other.

mod support;

use std::io::{BufRead, BufReader, Read};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{ERA, Fixture, Gate, Issuer, Modern, Reply, Signer, assert_balanced, era_meta, http_agent, wait_until};

fn gate_with(fx: &Fixture, keys: Value) -> Gate {
    let mut c = json!({"listen": "127.0.0.1:0", "mcpServers": {"fx": {"url": fx.url()}}});
    for (k, v) in keys.as_object().unwrap() {
        c[k] = v.clone();
    }
    Gate::start_checked(&c)
}

/// The gateway in front of `servers` (name, fixture).
fn gate_of(servers: &[(&str, &Fixture)]) -> Gate {
    let servers: serde_json::Map<String, Value> =
        servers.iter().map(|(name, fx)| (name.to_string(), json!({"url": fx.url()}))).collect();
    Gate::start_checked(&json!({"listen": "127.0.0.1:0", "mcpServers": servers}))
}

#[test]
fn discover_offers_2026_only_when_every_server_speaks_it() {
    let session = Fixture::start("old", &[]);
    let modern = Fixture::start("new", &["--modern"]);
    let both = Fixture::start("both", &["--both-eras"]);
    // As an `auto` client probes: the era's `_meta` and version header.
    let probe = |gate: &Gate| Modern::new(&gate.url()).send(json!(7), "server/discover", json!({}), &[]);
    for (servers, offered) in [
        (vec![("old", &session)], false),
        (vec![("new", &modern), ("old", &session)], false),
        (vec![("new", &modern)], true),
        (vec![("both", &both)], true),
        (vec![("new", &modern), ("both", &both)], true),
    ] {
        let names: Vec<&str> = servers.iter().map(|(n, _)| *n).collect();
        let gate = gate_of(&servers);
        let answer = probe(&gate);
        if offered {
            assert_eq!(answer.status, 200, "{names:?}: {answer:?}");
            assert_eq!(answer.result()["supportedVersions"][0], ERA, "{names:?}: {answer:?}");
        } else {
            // What a session-era server answers: every SDK's auto mode falls
            // back to initialize on it (not -32022, which the Rust SDK's
            // reads as a version to retry at).
            assert_eq!((answer.status, answer.error_code()), (400, -32600), "{names:?}: {answer:?}");
            assert_eq!(answer.body["id"], 7, "{names:?}: correlated");
            let message = answer.body["error"]["message"].as_str().unwrap_or_default().to_string();
            assert!(message.contains("initialize"), "{message}");
            let mut fallback = gate.open_session();
            assert!(fallback.tool_text(&format!("{}__echo", names[0]), json!({"text": "back"})).ends_with("back"));
            // A client pinned to 2026-07-28 (it sends no discover) is served and bridged still.
            let pinned =
                Modern::new(&gate.url()).call(8, &format!("{}__echo", names.last().unwrap()), json!({"text": "x"}));
            assert_eq!(pinned.status, 200, "{names:?}: {pinned:?}");
            assert_eq!(pinned.result()["resultType"], "complete");
        }
    }
}

#[test]
fn discover_names_both_eras_and_passes_the_checks_of_any_request() {
    let fx = Fixture::start("fx", &["--modern"]);
    let gate = gate_with(&fx, json!({}));
    let client = Modern::new(&gate.url());
    let answer = client.send(json!(1), "server/discover", json!({}), &[]);
    assert_eq!(answer.status, 200, "{answer:?}");
    let result = answer.result();
    assert_eq!(result["supportedVersions"], json!([ERA, "2025-11-25", "2025-06-18", "2025-03-26"]), "{result}");
    assert!(result["capabilities"]["tools"].is_object(), "{result}");
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["cacheScope"], "public");
    assert!(result["ttlMs"].as_u64().is_some(), "{result}");
    assert_eq!(result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "mcpgate");
    // It carries the era's `_meta` like any request, and is checked like one
    // (the spec's server/discover; the conformance suite's server-stateless).
    for params in [json!({"_meta": {}}), json!({"_meta": {"io.modelcontextprotocol/protocolVersion": ERA}})] {
        let bad = client.send(json!(2), "server/discover", params, &[("MCP-Protocol-Version", "2025-06-18")]);
        assert_eq!((bad.status, bad.error_code()), (400, -32602), "{bad:?}");
    }
    let mut other = era_meta(json!({}));
    other["io.modelcontextprotocol/protocolVersion"] = json!("v999.0.0");
    let version =
        client.send(json!(3), "server/discover", json!({"_meta": other}), &[("MCP-Protocol-Version", "v999.0.0")]);
    assert_eq!((version.status, version.error_code()), (400, -32022), "{version:?}");
    let data = &version.body["error"]["data"];
    assert_eq!(data["requested"], "v999.0.0", "{data}");
    assert!(data["supported"].as_array().is_some_and(|s| s.contains(&json!(ERA))), "{data}");
    let mismatch = client.send(json!(4), "server/discover", json!({"_meta": other}), &[]);
    assert_eq!((mismatch.status, mismatch.error_code()), (400, -32020), "{mismatch:?}");
    assert_eq!(mismatch.body["id"], 4);
    // A bare probe (no `_meta`, no version header), as a client that does
    // not know the era yet may send it, is answered all the same.
    let bare = http_agent(Some(Duration::from_secs(20)))
        .post(&gate.url())
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .send(r#"{"jsonrpc":"2.0","id":9,"method":"server/discover"}"#.as_bytes())
        .expect("bare probe");
    assert_eq!(bare.status().as_u16(), 200);
    let bare: Value = serde_json::from_str(&bare.into_body().read_to_string().unwrap()).unwrap();
    assert_eq!(bare["result"]["supportedVersions"][0], ERA, "{bare}");
    // A session-era client on the same /mcp, at the same time.
    let mut session = gate.open_session();
    assert_eq!(session.tool_text("fx__echo", json!({"text": "old"})), "old");
}

#[test]
fn discover_offers_only_what_the_era_serves() {
    // A server of both eras, spoken to in the session era: it offers
    // resource subscriptions and tasks there, which this era's clients
    // are not served through mcpgate; logging they are (by `_meta`).
    let fx = Fixture::start("fx", &["--both-eras"]);
    let gate = gate_with(&fx, json!({}));
    let answer = Modern::new(&gate.url()).send(json!(1), "server/discover", json!({}), &[]);
    let caps = &answer.result()["capabilities"];
    assert!(caps["resources"].is_object() && caps["resources"].get("subscribe").is_none(), "{caps}");
    assert!(caps.get("tasks").is_none(), "{caps}");
}

#[test]
fn each_rung_of_the_checks_answers_with_its_code_and_status() {
    let fx = Fixture::start("fx", &[]);
    let gate = gate_with(&fx, json!({}));
    let client = Modern::new(&gate.url());
    // The name in its base64 form: `fx__echo`.
    let b64 = client.send(
        json!(4),
        "tools/call",
        json!({"name": "fx__echo", "arguments": {"text": "b"}}),
        &[("Mcp-Name", "=?base64?ZnhfX2VjaG8=?=")],
    );
    assert_eq!(b64.result()["content"][0]["text"], "b", "{b64:?}");
    let reached = fx.count("requests");
    let no_meta = client.send(json!(1), "tools/list", json!({"_meta": {"other": 1}}), &[]);
    assert_eq!((no_meta.status, no_meta.error_code()), (400, -32602), "{no_meta:?}");
    let method = client.send(json!(2), "tools/list", json!({}), &[("Mcp-Method", "prompts/list")]);
    assert_eq!((method.status, method.error_code()), (400, -32020), "{method:?}");
    let name =
        client.send(json!(3), "tools/call", json!({"name": "fx__echo", "arguments": {}}), &[("Mcp-Name", "fx__add")]);
    assert_eq!((name.status, name.error_code()), (400, -32020), "{name:?}");
    let mut old = era_meta(json!({}));
    old["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let version = client.send(json!(5), "tools/list", json!({"_meta": old}), &[("MCP-Protocol-Version", "2099-01-01")]);
    assert_eq!((version.status, version.error_code()), (400, -32022), "{version:?}");
    assert!(version.body["error"]["data"]["supported"].as_array().is_some_and(|s| s.contains(&json!(ERA))));
    let unknown = client.send(json!(6), "no/such", json!({}), &[]);
    assert_eq!((unknown.status, unknown.error_code()), (404, -32601), "{unknown:?}");
    // `ping` is of the session era alone (the conformance suite's server-stateless).
    let ping = client.send(json!(7), "ping", json!({}), &[]);
    assert_eq!((ping.status, ping.error_code()), (404, -32601), "{ping:?}");
    // A name given twice: sent on as written, the server might read the
    // first where mcpgate read the last (the headers name the last).
    let (body, headers) =
        Modern::new(&gate.url()).prepare("tools/call", json!({"name": "fx__echo", "arguments": {"text": "c"}}));
    let body = body.to_string().replacen(r#""params":{"#, r#""params":{"name":"fx__add","#, 1);
    let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    let twice = client.post(body.as_bytes(), &headers);
    assert_eq!((twice.status, twice.error_code()), (400, -32602), "{twice:?}");
    let message = twice.body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("`tools/call`") && message.contains("member `name` given twice"), "{twice:?}");
    assert_eq!(fx.count("requests"), reached, "a refused request reached the server: {}", fx.stats());
    // The session era's GET and DELETE are not of this era.
    let agent = http_agent(Some(Duration::from_secs(5)));
    let get = agent.get(&gate.url()).header("MCP-Protocol-Version", ERA).header("Accept", "text/event-stream");
    let delete = agent.delete(&gate.url()).header("MCP-Protocol-Version", ERA);
    for (method, r) in [("GET", get.call().unwrap()), ("DELETE", delete.call().unwrap())] {
        assert_eq!(r.status(), 405, "{method}");
        assert_eq!(r.headers().get("allow").and_then(|v| v.to_str().ok()), Some("POST"), "{method}");
    }
}

#[test]
fn lists_and_calls_carry_the_eras_fields_and_progress_comes_as_sse() {
    let fx = Fixture::start("fx", &[]);
    let gate = gate_with(&fx, json!({}));
    let client = Modern::new(&gate.url());
    let tools = client.send(json!(1), "tools/list", json!({}), &[]);
    let result = tools.result();
    assert!(result["tools"].as_array().is_some_and(|t| t.iter().any(|t| t["name"] == "fx__echo")), "{result}");
    assert_eq!((result["resultType"].as_str(), result["cacheScope"].as_str()), (Some("complete"), Some("public")));
    assert!(result["ttlMs"].is_u64(), "{result}");
    let echo = client.call(2, "fx__echo", json!({"text": "hi"}));
    assert_eq!(echo.result()["content"][0]["text"], "hi");
    assert_eq!(echo.result()["resultType"], "complete");
    let mut params = json!({"name": "fx__slow", "arguments": {"ms": 150, "steps": 3}});
    params["_meta"] = era_meta(json!({}));
    params["_meta"]["progressToken"] = json!("p1");
    let slow = client.send(json!(3), "tools/call", params, &[]);
    assert!(slow.is_sse(), "{slow:?}");
    let progress: Vec<&Value> = slow.events.iter().filter(|m| m["method"] == "notifications/progress").collect();
    assert_eq!(progress.len(), 3, "{slow:?}");
    assert!(progress.iter().all(|p| p["params"]["progressToken"] == "p1"), "{progress:?}");
    assert_eq!(slow.result()["content"][0]["text"], "done");
    // The fixture saw the era's client through mcpgate's own session: no modern _meta reaches it.
    assert_eq!(fx.count("initialize"), 1, "{}", fx.stats());
}

#[test]
fn a_servers_sampling_request_comes_as_input_required_and_the_call_is_held_until_the_retry() {
    let fx = Fixture::start("fx", &[]);
    let gate = gate_with(&fx, json!({}));
    let client = Modern::new(&gate.url());
    let first = client.call(1, "fx__sample", json!({"prompt": "hello"}));
    assert_eq!(first.status, 200, "{first:?}");
    let result = first.result();
    assert_eq!(result["resultType"], "input_required", "{result}");
    let requests = result["inputRequests"].as_object().expect("inputRequests");
    assert_eq!(requests.len(), 1, "{result}");
    let (key, request) = requests.iter().next().unwrap();
    assert_eq!(request["method"], "sampling/createMessage", "{request}");
    let state = result["requestState"].as_str().expect("requestState").to_string();
    assert_eq!(gate.status()["calls"]["held_for_2026_clients"], 1);
    let requests_before = fx.count("requests");

    // A forged state is refused, and the held call is untouched by it.
    let mut forged = state.clone();
    forged.replace_range(forged.len() - 4.., "0000");
    let bad = client.send(
        json!(2),
        "tools/call",
        json!({"name": "fx__sample", "arguments": {}, "requestState": forged}),
        &[],
    );
    assert_eq!((bad.status, bad.error_code()), (400, -32602), "{bad:?}");

    let answer = json!({"role": "assistant", "content": {"type": "text", "text": "from the client"}, "model": "m"});
    let retry = client.send(
        json!(3),
        "tools/call",
        json!({"name": "fx__sample", "arguments": {"prompt": "hello"}, "inputResponses": {key: answer}, "requestState": state}),
        &[],
    );
    assert_eq!(retry.result()["content"][0]["text"], "sampled: from the client", "{retry:?}");
    assert_eq!(retry.result()["resultType"], "complete");
    // One call at the server, not two: the retry went on with the held one.
    assert_eq!(fx.count("requests"), requests_before, "the retry made a new call: {}", fx.stats());
    // The state is good once.
    let again = client.send(
        json!(4),
        "tools/call",
        json!({"name": "fx__sample", "arguments": {}, "inputResponses": {key: answer}, "requestState": state}),
        &[],
    );
    assert_eq!(again.error_code(), -32602, "{again:?}");
    assert_eq!(gate.status()["calls"]["held_for_2026_clients"], 0);
}

/// A session-era server may ask outside the call, on its GET stream (the
/// Python SDK's `ctx.session.list_roots()` does): with one call of the
/// pool on that server, the question is that call's.
#[test]
fn a_servers_request_outside_its_call_goes_to_the_one_call_running_there() {
    let fx = Fixture::start("fx", &[]);
    let gate = gate_with(&fx, json!({}));
    let mut client = Modern::new(&gate.url());
    client.capabilities = json!({"roots": {}});
    // The pool's downstream session and its GET stream, before the call.
    assert_eq!(client.call(1, "fx__echo", json!({"text": "warm"})).result()["content"][0]["text"], "warm");
    assert!(
        wait_until(Duration::from_secs(5), || fx.stats()["get_streams_open"].as_u64() == Some(1)),
        "no GET stream: {}",
        fx.stats()
    );
    let first = client.call(2, "fx__roots", json!({"outside": true}));
    let result = first.result();
    assert_eq!(result["resultType"], "input_required", "{first:?}");
    let (key, request) = result["inputRequests"].as_object().and_then(|r| r.iter().next()).expect("a request");
    assert_eq!(request["method"], "roots/list", "{request}");
    let answer = json!({"roots": [{"uri": "file:///outside", "name": "o"}]});
    let retry = client.send(
        json!(3),
        "tools/call",
        json!({"name": "fx__roots", "arguments": {"outside": true}, "inputResponses": {key: answer},
               "requestState": result["requestState"]}),
        &[],
    );
    assert_eq!(retry.result()["content"][0]["text"], r#"[{"name":"o","uri":"file:///outside"}]"#, "{retry:?}");
}

#[test]
/// A call that needs a capability its client did not declare ends with
/// the era's -32021 naming it (HTTP 400), and is cancelled at its server,
/// which got a refusal rather than a question nobody will answer.
fn a_client_that_cannot_sample_gets_missing_capability_and_the_call_ends_at_its_server() {
    let fx = Fixture::start("fx", &[]);
    let gate = gate_with(&fx, json!({}));
    let mut client = Modern::new(&gate.url());
    client.capabilities = json!({});
    let answer = client.call(1, "fx__sample", json!({"prompt": "x"}));
    assert_eq!((answer.status, answer.error_code()), (400, -32021), "{answer:?}");
    let error = &answer.body["error"];
    assert_eq!(error["data"]["requiredCapabilities"], json!({"sampling": {}}), "{error}");
    assert!(error["message"].as_str().unwrap_or_default().contains("sampling"), "{error}");
    assert!(wait_until(Duration::from_secs(3), || fx.count("requests_running") == 0), "{}", fx.stats());
    assert_eq!(gate.status()["calls"]["held_for_2026_clients"], 0);
    // The same client, with nothing to ask, is served.
    assert_eq!(client.call(2, "fx__echo", json!({"text": "ok"})).result()["content"][0]["text"], "ok");
}

/// The cancel that ends a refused call races the call's own end at its
/// server. A cancel that lands after the call's answer was read must not
/// shut down the connection pool its lane hands to the next call: it once
/// did, and every later call to that server failed with "the session is
/// closing" (1 run in 11 of the conformance suite beside two CPU hogs).
#[test]
fn a_cancel_that_lands_after_its_call_ended_leaves_the_next_calls_working() {
    let fx = Fixture::start("fx", &[]);
    let gate = gate_with(&fx, json!({}));
    let mut client = Modern::new(&gate.url());
    client.capabilities = json!({});
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut rounds = 0;
    while rounds < 150 && Instant::now() < deadline {
        let refused = client.call(2 * rounds, "fx__sample", json!({"prompt": "x"}));
        assert_eq!(refused.error_code(), -32021, "round {rounds}: {refused:?}");
        let echo = client.call(2 * rounds + 1, "fx__echo", json!({"text": "ok"}));
        assert_eq!(echo.result()["content"][0]["text"], "ok", "round {rounds}: {echo:?}");
        rounds += 1;
    }
    assert!(rounds >= 20, "only {rounds} rounds in 90 s");
}

/// A client of this era gets log messages only when its request asks, in
/// `_meta`, and at the level it asks: a session-era server logs to mcpgate
/// whatever it likes.
#[test]
fn log_messages_reach_a_client_only_at_the_level_its_request_asks() {
    let fx = Fixture::start("fx", &[]);
    let gate = gate_with(&fx, json!({}));
    let client = Modern::new(&gate.url());
    let logs = |answer: &Reply| -> Vec<String> {
        answer
            .events
            .iter()
            .filter(|m| m["method"] == "notifications/message")
            .map(|m| m["params"]["level"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let call = |id: u64, level: &str, log_level: Option<&str>| {
        let mut meta = era_meta(client.capabilities.clone());
        if let Some(l) = log_level {
            meta["io.modelcontextprotocol/logLevel"] = json!(l);
        }
        let params = json!({"name": "fx__log", "arguments": {"level": level, "message": "m"}, "_meta": meta});
        client.send(json!(id), "tools/call", params, &[])
    };
    let none = call(1, "error", None);
    assert_eq!(none.result()["content"][0]["text"], "logged", "{none:?}");
    assert_eq!(logs(&none), Vec::<String>::new(), "no logLevel, no log: {none:?}");
    let below = call(2, "info", Some("warning"));
    assert_eq!(logs(&below), Vec::<String>::new(), "info is below warning: {below:?}");
    let at = call(3, "error", Some("warning"));
    assert_eq!(logs(&at), vec!["error".to_string()], "{at:?}");
}

#[test]
fn a_held_call_that_is_not_retried_in_time_is_cancelled_at_its_server() {
    let fx = Fixture::start("fx", &[]);
    let gate = gate_with(&fx, json!({"held_call_timeout_secs": 1, "max_held_calls": 1}));
    let client = Modern::new(&gate.url());
    let held = client.call(1, "fx__sample", json!({"prompt": "x"}));
    assert_eq!(held.result()["resultType"], "input_required");
    // Only one is held at a time.
    let second = client.call(2, "fx__sample", json!({"prompt": "x"}));
    assert!(second.body["error"]["message"].as_str().unwrap_or_default().contains("max_held_calls"), "{second:?}");
    let cancelled = || fx.stats()["cancelled"].as_array().map_or(0, Vec::len);
    assert!(wait_until(Duration::from_secs(4), || cancelled() == 2), "{}", fx.stats());
    let state = held.result()["requestState"].as_str().unwrap().to_string();
    let late =
        client.send(json!(3), "tools/call", json!({"name": "fx__sample", "arguments": {}, "requestState": state}), &[]);
    assert!(late.body["error"]["message"].as_str().unwrap_or_default().contains("expired"), "{late:?}");
    assert!(wait_until(Duration::from_secs(2), || gate.status()["calls"]["held_for_2026_clients"] == 0));
}

/// What a held call keeps (its thread, its request twice) was charged to
/// nothing: clients holding calls with large requests could take mcpgate
/// past `max_memory_mb`. It is charged and shown in
/// `memory.sessionless_calls_bytes`; a call that does not fit is refused
/// saying why, and the charge comes back once the held calls end.
#[test]
fn held_calls_are_charged_to_max_memory_and_shown_until_they_end() {
    let fx = Fixture::start("fx", &[]);
    let gate = gate_with(&fx, json!({"max_memory_mb": 8, "max_held_calls": 64}));
    let client = Modern::new(&gate.url());
    let charged = || gate.status()["memory"]["sessionless_calls_bytes"].as_u64();
    let prompt = "x".repeat(512 << 10);
    // What the status page showed with each call held, and each call's state and request.
    let (mut shown, mut held) = (Vec::new(), Vec::new());
    let refused = (0..32).find_map(|i| {
        let reply = client.call(i, "fx__sample", json!({"prompt": prompt}));
        if reply.body.get("error").is_some() {
            return Some(reply);
        }
        let result = reply.result();
        assert_eq!(result["resultType"], "input_required", "{}", result["resultType"]);
        let ask = result["inputRequests"].as_object().and_then(|r| r.keys().next().cloned());
        held.push((result["requestState"].clone(), ask.expect("an input request")));
        shown.push(charged());
        None
    });
    let refused = refused.expect("32 calls of 512 KiB held within max_memory_mb of 8");
    let message = refused.body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("max_memory_mb"), "{refused:?}");
    assert!(shown.len() >= 2, "only {} calls were held before one was refused", shown.len());
    for (held, bytes) in shown.iter().enumerate() {
        let bytes = bytes.unwrap_or_else(|| panic!("no memory.sessionless_calls_bytes: {}", gate.status()["memory"]));
        assert!(bytes >= (held as u64 + 1) << 20, "{} held calls of 1 MiB of requests, {bytes} bytes shown", held + 1);
    }
    // Each held call answered: it ends, and what it held is given back.
    let answer = json!({"role": "assistant", "content": {"type": "text", "text": "ok"}, "model": "m"});
    for (i, (state, ask)) in held.into_iter().enumerate() {
        let params =
            json!({"name": "fx__sample", "arguments": {}, "inputResponses": {ask: answer}, "requestState": state});
        let retry = client.send(json!(100 + i), "tools/call", params, &[]);
        assert_eq!(retry.result()["content"][0]["text"], "sampled: ok", "{retry:?}");
    }
    assert!(
        wait_until(Duration::from_secs(10), || charged() == Some(0)),
        "{} bytes still charged after the held calls ended: {}",
        charged().unwrap_or_default(),
        gate.status()["calls"]
    );
}

#[test]
fn closing_the_answer_cancels_the_call() {
    let fx = Fixture::start("fx", &[]);
    let gate = gate_with(&fx, json!({}));
    let client = Modern::new(&gate.url());
    client.call(1, "fx__echo", json!({"text": "warm"}));
    let stream = client.open(
        json!(7),
        "tools/call",
        json!({"name": "fx__slow", "arguments": {"ms": 10000}, "_meta": era_meta(json!({}))}),
    );
    assert!(wait_until(Duration::from_secs(3), || fx.count("requests_running") == 1), "{}", fx.stats());
    let closed = Instant::now();
    drop(stream);
    let cancelled = || fx.stats()["cancelled"].as_array().map_or(0, Vec::len);
    assert!(wait_until(Duration::from_secs(3), || cancelled() == 1), "no cancel reached the server: {}", fx.stats());
    eprintln!("the cancel reached the server {:?} after the client closed", closed.elapsed());
    assert!(closed.elapsed() < Duration::from_secs(1), "{:?}", closed.elapsed());
    assert!(wait_until(Duration::from_secs(2), || gate.status()["calls"]["in_flight"] == 0), "{}", gate.status());
}

#[test]
fn listen_streams_the_list_changes_asked_for() {
    let fx = Fixture::start("fx", &[]);
    let gate = gate_with(&fx, json!({}));
    let client = Modern::new(&gate.url());
    let mut stream = client.open(json!("L"), "subscriptions/listen", json!({"notifications": {"toolsListChanged": true, "resourceSubscriptions": ["x://y"]}, "_meta": era_meta(json!({}))}));
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut next_data = || -> Value {
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                panic!("the listen stream ended");
            }
            if let Some(data) = line.strip_prefix("data: ") {
                return serde_json::from_str(data.trim()).unwrap();
            }
        }
    };
    let ack = next_data();
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged", "{ack}");
    assert_eq!(ack["params"]["notifications"], json!({"toolsListChanged": true}), "only what is honored: {ack}");
    assert_eq!(ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "L");
    assert_eq!(client.call(1, "fx__notify", json!({"kind": "prompts"})).result()["content"][0]["text"], "sent");
    client.call(2, "fx__notify", json!({"kind": "tools"}));
    let changed = next_data();
    assert_eq!(changed["method"], "notifications/tools/list_changed", "prompts were not asked for: {changed}");
    assert_eq!(changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "L");
    let mut rest = Vec::new();
    let _ = stream.set_read_timeout(Some(Duration::from_millis(100)));
    let _ = stream.read_to_end(&mut rest);
}

#[test]
fn with_tokens_each_token_has_its_own_session_and_its_own_held_calls() {
    let fx = Fixture::start("fx", &[]);
    let a = "token-a-0123456789abcdef";
    let b = "token-b-0123456789abcdef";
    let gate = gate_with(&fx, json!({"auth": {"tokens": [{"token": a}, {"token": b}]}}));
    let mut client = Modern::new(&gate.url());
    let refused = client.send(json!(1), "tools/list", json!({}), &[]);
    assert_eq!(refused.status, 401, "{refused:?}");
    client.token = Some(a.into());
    let list = client.send(json!(2), "tools/list", json!({}), &[]);
    assert_eq!(list.result()["cacheScope"], "private", "tokens decide what a client sees");
    let held = client.call(3, "fx__sample", json!({"prompt": "x"}));
    let state = held.result()["requestState"].as_str().unwrap().to_string();
    client.token = Some(b.into());
    let stolen =
        client.send(json!(4), "tools/call", json!({"name": "fx__sample", "arguments": {}, "requestState": state}), &[]);
    assert_eq!(stolen.error_code(), -32602, "another token's state: {stolen:?}");
    assert!(stolen.body["error"]["message"].as_str().unwrap().contains("for this token"), "{stolen:?}");
    client.send(json!(5), "tools/list", json!({}), &[]);
    assert_eq!(gate.status()["sessions"]["live"], 2, "one per token: {}", gate.status());
}

#[test]
fn with_oauth_each_subject_has_its_own_session_and_its_own_held_calls() {
    let fx = Fixture::start("fx", &[]);
    let key = Signer::ec("ec-1");
    let issuer = Issuer::start(&[&key]);
    let resource = "http://127.0.0.1:8780/mcp";
    let gate = gate_with(&fx, json!({"auth": {"oauth": {"issuer": issuer.url(), "resource": resource}}}));
    let mut client = Modern::new(&gate.url());
    client.token = Some(key.token(&issuer.claims("alice", resource, "mcp")));
    let list = client.send(json!(1), "tools/list", json!({}), &[]);
    assert_eq!(list.result()["cacheScope"], "private", "what a subject sees is its own");
    let held = client.call(2, "fx__sample", json!({"prompt": "x"}));
    let state = held.result()["requestState"].as_str().unwrap().to_string();
    let asked = held.result()["inputRequests"].as_object().unwrap().keys().next().unwrap().clone();
    client.token = Some(key.token(&issuer.claims("bob", resource, "mcp")));
    let stolen =
        client.send(json!(3), "tools/call", json!({"name": "fx__sample", "arguments": {}, "requestState": state}), &[]);
    assert_eq!(stolen.error_code(), -32602, "another subject's state: {stolen:?}");
    // Alice's next token (a refresh) is the same subject: her state and her session.
    client.token = Some(key.token(&issuer.claims("alice", resource, "mcp")));
    let answer = json!({"role": "assistant", "content": {"type": "text", "text": "hers"}, "model": "m"});
    let retried = client.send(
        json!(4),
        "tools/call",
        json!({"name": "fx__sample", "arguments": {}, "requestState": state, "inputResponses": {asked: answer}}),
        &[],
    );
    assert_eq!(retried.result()["content"][0]["text"], "sampled: hers", "her own state: {retried:?}");
    assert_eq!(gate.status()["sessions"]["live"], 2, "one per subject: {}", gate.status());
}

#[test]
fn the_session_kept_for_these_clients_is_evicted_and_closed_like_any_other() {
    let fx = Fixture::start("fx", &[]);
    let gate = gate_with(&fx, json!({"session_idle_timeout_secs": 1}));
    let client = Modern::new(&gate.url());
    assert_eq!(client.call(1, "fx__echo", json!({"text": "x"})).result()["content"][0]["text"], "x");
    assert_eq!(fx.count("initialize"), 1);
    assert!(wait_until(Duration::from_secs(5), || fx.count("delete") == 1), "{}", fx.stats());
    let status = gate.status();
    assert_eq!(status["sessions"]["evicted_idle"], 1, "{status}");
    assert_balanced(&status);
    // The next request makes a new one.
    assert_eq!(client.call(2, "fx__echo", json!({"text": "y"})).result()["content"][0]["text"], "y");
    assert_eq!(fx.count("initialize"), 2);
}

#[test]
fn tool_search_answers_clients_of_the_era_and_call_tool_holds_a_call_as_a_direct_one() {
    let fx = Fixture::start("fx", &[]);
    let gate = gate_with(&fx, json!({"tool_search": {"enabled": true}}));
    let client = Modern::new(&gate.url());
    let tools = client.send(json!(1), "tools/list", json!({}), &[]);
    let names: Vec<&str> =
        tools.result()["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["find_tools", "call_tool"]);
    let found = client.call(2, "find_tools", json!({"query": "echo the text back"}));
    assert_eq!(found.result()["structuredContent"]["tools"][0]["name"], "fx__echo", "{found:?}");
    assert_eq!(found.result()["resultType"], "complete");
    let echo = client.call(3, "call_tool", json!({"name": "fx__echo", "arguments": {"text": "hi"}}));
    assert_eq!(echo.result()["content"][0]["text"], "hi", "{echo:?}");
    // The server's request comes back as input_required, as for a direct call.
    let asked = client.call(4, "call_tool", json!({"name": "fx__sample", "arguments": {"prompt": "p"}}));
    assert_eq!(asked.result()["resultType"], "input_required", "{asked:?}");
    let (key, request) = asked.result()["inputRequests"].as_object().unwrap().iter().next().unwrap();
    assert_eq!(request["method"], "sampling/createMessage");
    let state = asked.result()["requestState"].clone();
    let answers =
        json!({key.clone(): {"role": "assistant", "content": {"type": "text", "text": "sampled"}, "model": "m"}});
    let retry = client.send(
        json!(5),
        "tools/call",
        json!({"name": "call_tool", "arguments": {"name": "fx__sample", "arguments": {"prompt": "p"}},
            "inputResponses": answers, "requestState": state}),
        &[],
    );
    assert!(retry.result().to_string().contains("sampled"), "{retry:?}");
}

#[test]
fn a_call_to_a_server_of_the_era_runs_where_it_was_read_and_closing_its_answer_cancels_it() {
    // Its keep-alives let the fixture see the connection close.
    let fx = Fixture::start("fx", &["--modern", "--keepalive-ms", "100"]);
    let gate = gate_with(&fx, json!({}));
    let client = Modern::new(&gate.url());
    assert_eq!(client.call(1, "fx__echo", json!({"text": "warm"})).result()["resultType"], "complete");
    let stream = client.open(
        json!(7),
        "tools/call",
        json!({"name": "fx__cancellable", "arguments": {"every_ms": 50}, "_meta": era_meta(json!({}))}),
    );
    assert!(wait_until(Duration::from_secs(3), || fx.count("requests_running") == 1), "{}", fx.stats());
    // No thread of its own: the connection thread that read it waits on the server.
    let roles = gate.status()["process"]["threads_by_role"].clone();
    assert_eq!(roles["hold"].as_u64().unwrap_or(0), 0, "{roles}");
    let closed = Instant::now();
    drop(stream);
    let cancelled = || fx.stats()["modern_cancelled_by_disconnect"].as_u64().unwrap_or(0);
    assert!(wait_until(Duration::from_secs(3), || cancelled() == 1), "no cancel reached the server: {}", fx.stats());
    eprintln!("the cancel reached the server {:?} after the client closed", closed.elapsed());
    assert!(closed.elapsed() < Duration::from_secs(2), "{:?}", closed.elapsed());
    assert!(wait_until(Duration::from_secs(2), || gate.status()["calls"]["in_flight"] == 0), "{}", gate.status());
    // The watcher ends once nothing is left to watch.
    let watchers = || gate.status()["process"]["threads_by_role"]["watch"].as_u64().unwrap_or(0);
    assert!(wait_until(Duration::from_secs(5), || watchers() == 0), "{}", gate.status());
}
