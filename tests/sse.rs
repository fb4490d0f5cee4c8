//! Servers of the old HTTP+SSE transport (protocol 2024-11-05, `"type": "sse"`) behind mcpgate
//! (issue 25): the real mcpgate in front of the real fixture in `--sse-transport` mode, beside a
//! Streamable HTTP fixture. The lifecycle promise is counted at the server (the fixture's
//! `sse_streams_opened`, `_closed` and `_open`: a session of this transport is its stream) and in
//! the kernel (mcpgate's reader threads in `/proc/<pid>/task`): every stream mcpgate opens is
//! closed, and its reader joined, on idle eviction, client DELETE, reload, SIGTERM and a crash;
//! a stream that drops fails the call on it and is opened anew with backoff; bad input is an
//! error that names the server.

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{
    Client, Fixture, Gate, assert_balanced, assert_settled, read_state, wait_for_state, wait_until, with_state_file,
};

const WAIT: Duration = Duration::from_secs(10);

/// A fixture of the HTTP+SSE transport that notices a client gone within about 200 ms.
fn sse_fixture(name: &str, args: &[&str]) -> Fixture {
    let mut all = vec!["--sse-transport", "--keepalive-ms", "100"];
    all.extend_from_slice(args);
    Fixture::start(name, &all)
}

/// A config with `old` (HTTP+SSE, at `sse`'s stream) and, when given, `new` (Streamable HTTP).
fn config(sse: &str, http: Option<&Fixture>, keys: Value) -> Value {
    let mut servers = serde_json::Map::new();
    servers.insert("old".into(), json!({"type": "sse", "url": sse}));
    if let Some(http) = http {
        servers.insert("new".into(), json!({"url": http.url()}));
    }
    let mut c = support::config(&[]);
    c["mcpServers"] = Value::Object(servers);
    c["keepalive_secs"] = json!(1);
    for (key, value) in keys.as_object().expect("keys are an object") {
        c[key] = value.clone();
    }
    c
}

/// The HTTP+SSE fixture `old` (with `args`) alone behind mcpgate (with `keys`), and a client
/// with a session.
fn old_alone(args: &[&str], keys: Value) -> (Fixture, Gate, Client) {
    let old = sse_fixture("old", args);
    let gate = Gate::start_checked(&config(&old.sse_url(), None, keys));
    let mut client = gate.client();
    client.initialize();
    (old, gate, client)
}

/// mcpgate's reader threads, from `/proc/<pid>/task/*/comm`.
fn readers(gate: &Gate) -> usize {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", gate.pid())) else { return 0 };
    tasks
        .filter_map(Result::ok)
        .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with("mcpgate-reader")))
        .count()
}

/// Waits until mcpgate runs `n` reader threads; how many it runs.
fn readers_settle(gate: &Gate, n: usize) -> usize {
    wait_until(WAIT, || readers(gate) == n);
    readers(gate)
}

/// The fixture's count of its streams: (opened, closed, open).
fn streams(f: &Fixture) -> (u64, u64, u64) {
    let s = f.stats();
    let n = |k: &str| s[k].as_u64().unwrap_or_else(|| panic!("no `{k}` in {s}"));
    (n("sse_streams_opened"), n("sse_streams_closed"), n("sse_streams_open"))
}

/// Every one of `n` streams the fixture saw was closed (within 10 s), and no session is left.
#[track_caller]
fn assert_streams_closed(f: &Fixture, n: u64) {
    let closed = wait_until(WAIT, || streams(f) == (n, n, 0));
    let stats = f.stats();
    assert!(closed, "{}: expected {n} streams opened and closed: {stats}", f.name);
    assert_eq!(stats["live_sessions"], 0, "{}: {stats}", f.name);
}

fn capabilities() -> Value {
    json!({"sampling": {}, "elicitation": {}, "roots": {"listChanged": true}})
}

/// Answers the fixture's requests as a client would.
fn answer(asked: &Value) -> Option<Value> {
    match asked["method"].as_str()? {
        "sampling/createMessage" => {
            Some(json!({"role": "assistant", "content": {"type": "text", "text": "a sample"}, "model": "test"}))
        }
        "elicitation/create" => Some(json!({"action": "accept", "content": {"name": "Ada"}})),
        "roots/list" => Some(json!({"roots": [{"uri": "file:///srv", "name": "srv"}]})),
        _ => None,
    }
}

#[test]
fn a_pasted_sse_server_serves_lists_calls_progress_logs_and_its_requests_to_the_client() {
    let old = sse_fixture("old", &[]);
    let new = Fixture::start("new", &[]);
    let gate = Gate::start_checked(&config(&old.sse_url(), Some(&new), json!({})));
    let mut client = gate.client();
    client.initialize_with(capabilities());
    let tools = client.tool_names();
    assert!(tools.contains(&"old__echo".to_string()) && tools.contains(&"new__echo".to_string()), "{tools:?}");
    assert_eq!(client.tool_text("old__echo", json!({"text": "over the old transport"})), "over the old transport");

    let params = json!({"name": "old__slow", "arguments": {"ms": 300, "steps": 3}, "_meta": {"progressToken": "p-1"}});
    let reply = client.request("tools/call", params);
    assert_eq!(reply.result()["content"][0]["text"], "done", "{reply:?}");
    let progress: Vec<&Value> = reply.events.iter().filter(|m| m["method"] == "notifications/progress").collect();
    assert_eq!(progress.len(), 3, "{:?}", reply.events);
    assert!(progress.iter().all(|m| m["params"]["progressToken"] == "p-1"), "the client's token: {progress:?}");

    let reply = client.call_tool("old__log", json!({"level": "warning", "message": "careful"}));
    assert_eq!(reply.result()["content"][0]["text"], "logged");
    assert!(
        reply.events.iter().any(|m| m["method"] == "notifications/message" && m["params"]["data"] == "careful"),
        "the log message of the call comes with its answer: {:?}",
        reply.events
    );

    for (tool, arguments, want) in [
        ("old__sample", json!({"prompt": "hi"}), "sampled: a sample"),
        ("old__elicit", json!({"message": "name?"}), "elicited: accept {\"name\":\"Ada\"}"),
        ("old__roots", json!({}), "[{\"name\":\"srv\",\"uri\":\"file:///srv\"}]"),
    ] {
        let (events, response) = client.call_streaming(tool, arguments, answer);
        assert_eq!(response["result"]["content"][0]["text"], want, "{tool}: {response} after {events:?}");
    }

    let stream = client.open_stream();
    assert_eq!(client.tool_text("old__notify", json!({"kind": "tools"})), "sent");
    assert!(
        stream.next_with_method("notifications/tools/list_changed", WAIT).is_some(),
        "the server's list change reaches the client's GET stream"
    );
    let status = gate.status();
    assert_eq!(status["servers"]["old"]["transport"], "sse", "{status}");
    assert_eq!(status["servers"]["old"]["url"], old.sse_url(), "{status}");
    assert_eq!(status["servers"]["old"]["up"], 1, "{status}");
    assert_eq!(status["downstream"]["live"], 2, "{status}");
    assert_balanced(&status);
    assert_eq!(streams(&old), (1, 0, 1), "one stream, the session, for all of it: {}", old.stats());
    assert_eq!(old.count("initialize"), 1);
}

#[test]
fn a_cancel_reaches_the_sse_server_and_ends_the_call() {
    let (old, _gate, mut client) = old_alone(&[], json!({}));
    let body = json!({"jsonrpc": "2.0", "id": "c-1", "method": "tools/call",
                      "params": {"name": "old__cancellable", "arguments": {"ms": 20_000}}})
    .to_string();
    let call = {
        let client = client.same_session();
        std::thread::spawn(move || {
            let started = Instant::now();
            (client.post(body.as_bytes(), &[]), started.elapsed())
        })
    };
    assert!(
        wait_until(WAIT, || old.received("tools/call") == 1 && old.count("requests_running") == 1),
        "{}",
        old.stats()
    );
    assert_eq!(client.notify("notifications/cancelled", json!({"requestId": "c-1"})), 202);
    let (reply, took) = call.join().expect("the call's thread");
    assert!(took < Duration::from_secs(15), "cancelled, not run for 20 s: {took:?} {reply:?}");
    assert!(reply.body.get("result").is_none(), "a cancelled call gets no response: {reply:?}");
    assert!(wait_until(WAIT, || old.count("requests_running") == 0), "{}", old.stats());
    let cancelled = old.stats()["cancelled"].as_array().cloned().unwrap_or_default();
    assert_eq!(cancelled.len(), 1, "the cancel reached the server: {cancelled:?}");
    // The session goes on.
    assert_eq!(client.tool_text("old__echo", json!({"text": "after"})), "after");
}

#[test]
fn a_server_that_answers_2024_11_05_is_spoken_to_in_it() {
    let (_old, gate, mut client) = old_alone(&["--protocol-2024-11-05"], json!({}));
    assert_eq!(client.tool_text("old__echo", json!({"text": "2024"})), "2024");
    let status = gate.status();
    assert_eq!(status["servers"]["old"]["up"], 1, "{status}");
    assert_eq!(status["downstream"]["live"], 1, "{status}");
}

#[test]
fn idle_eviction_closes_every_stream_and_joins_its_reader() {
    let old = sse_fixture("old", &[]);
    let new = Fixture::start("new", &[]);
    let gate = Gate::start_checked(&config(&old.sse_url(), Some(&new), json!({"session_idle_timeout_secs": 1})));
    let baseline = gate.threads();
    for i in 0..3 {
        let mut client = gate.client();
        client.initialize();
        assert_eq!(client.tool_text("old__echo", json!({"text": format!("c{i}")})), format!("c{i}"));
    }
    assert_streams_closed(&old, 3);
    support::assert_all_closed(&[&new], 3);
    let status = assert_settled(&gate, 0);
    assert_eq!(status["sessions"]["evicted_idle"], 3, "{status}");
    assert_eq!(status["downstream"]["opened"], 6, "{status}");
    assert_eq!(readers_settle(&gate, 0), 0, "no reader left in /proc");
    assert!(gate.settles_to(baseline), "threads {} != baseline {baseline}", gate.threads());
    // Exactly once: nothing more reaches the server later.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(streams(&old), (3, 3, 0), "{}", old.stats());
}

#[test]
fn a_client_delete_closes_the_stream_before_it_is_answered() {
    let (old, gate, client) = old_alone(&[], json!({}));
    let _stream = client.open_stream();
    assert_eq!(streams(&old), (1, 0, 1));
    assert_eq!(readers(&gate), 1, "one reader: the stream's");
    let started = Instant::now();
    assert_eq!(client.delete(), 200);
    let took = started.elapsed();
    // Closing is synchronous: the reader was joined, its socket closed, before the answer.
    assert_eq!(readers(&gate), 0, "the reader was joined before DELETE was answered");
    assert_streams_closed(&old, 1);
    eprintln!("DELETE with an HTTP+SSE downstream session answered in {took:?}");
    let status = gate.status();
    assert_eq!(status["sessions"]["deleted_by_client"], 1, "{status}");
    assert_eq!((status["downstream"]["opened"].as_u64(), status["downstream"]["closed"].as_u64()), (Some(1), Some(1)));
    assert_balanced(&status);
}

#[test]
fn a_reload_that_removes_the_sse_server_closes_its_streams() {
    let old = sse_fixture("old", &[]);
    let new = Fixture::start("new", &[]);
    let mut c = config(&old.sse_url(), Some(&new), json!({}));
    let gate = Gate::start_checked(&c);
    let mut clients: Vec<Client> = (0..2).map(|_| gate.open_session()).collect();
    for client in &mut clients {
        assert_eq!(client.tool_text("old__echo", json!({"text": "x"})), "x");
    }
    assert_eq!(streams(&old), (2, 0, 2));
    assert!(wait_until(WAIT, || readers(&gate) == 4), "two streams of old, two GET streams of new: {}", readers(&gate));
    c["mcpServers"].as_object_mut().expect("servers").remove("old");
    gate.dir.write_config(&c);
    support::signal(gate.pid(), "HUP");
    assert_streams_closed(&old, 2);
    assert_eq!(readers_settle(&gate, 2), 2, "new's readers stay, old's are joined");
    assert_eq!(clients[0].tool_text("new__echo", json!({"text": "kept"})), "kept");
    let status = assert_settled(&gate, 2);
    assert!(status["servers"].get("old").is_none(), "{status}");
    assert_eq!(status["downstream"]["closed"], 2, "{status}");
}

#[test]
fn sigterm_closes_every_stream_and_exits_zero() {
    let old = sse_fixture("old", &[]);
    let new = Fixture::start("new", &[]);
    let mut gate = Gate::start_checked(&config(&old.sse_url(), Some(&new), json!({})));
    let _sessions: Vec<Client> = (0..5).map(|_| gate.open_session()).collect();
    assert!(wait_until(WAIT, || streams(&old) == (5, 0, 5)), "{}", old.stats());
    let exit = gate.terminate(WAIT).expect("mcpgate exits after SIGTERM");
    assert!(exit.success(), "exit status {exit:?}\n{}", gate.stderr());
    assert_streams_closed(&old, 5);
    support::assert_all_closed(&[&new], 5);
    assert!(gate.stderr().contains("downstream opened 10, closed 10, live 0"), "{}", gate.stderr());
    assert!(!gate.stderr().contains("did not stop within"), "every reader joined in time: {}", gate.stderr());
}

#[test]
fn a_stream_that_ends_mid_call_fails_the_call_naming_the_server_and_nothing_else() {
    let mut old = sse_fixture("old", &[]);
    let new = Fixture::start("new", &[]);
    let gate = Gate::start_checked(&config(&old.sse_url(), Some(&new), json!({"open_retry_secs": 1})));
    let mut client = gate.client();
    client.initialize();
    let call = {
        let mut client = client.same_session();
        std::thread::spawn(move || client.call_tool("old__slow", json!({"ms": 8000})))
    };
    assert!(
        wait_until(WAIT, || old.received("tools/call") == 1 && old.count("requests_running") == 1),
        "{}",
        old.stats()
    );
    let started = Instant::now();
    // The server goes away mid-call (and comes back on the same port, knowing nothing).
    old.restart();
    let reply = call.join().expect("the call's thread");
    assert!(started.elapsed() < Duration::from_secs(6), "the call failed when the stream ended, not at its end");
    let message = reply.error_message();
    assert!(message.contains("old") && message.contains("stream ended"), "names the server and why: {reply:?}");
    assert_eq!(client.tool_text("new__echo", json!({"text": "untouched"})), "untouched");
    // The session on it is opened anew: by the reaper, or by the next call.
    assert!(
        wait_until(
            WAIT,
            || client.call_tool("old__echo", json!({"text": "back"})).body["result"]["content"][0]["text"] == "back"
        ),
        "old is reachable again: {}",
        gate.status()["servers"]["old"]
    );
    assert_eq!(old.count("initialize"), 1, "one new session on the restarted server: {}", old.stats());
    assert_eq!(readers_settle(&gate, 2), 2, "one reader for each server, none left from the lost stream");
    assert_settled(&gate, 2);
}

#[test]
fn a_stream_that_keeps_dropping_is_reopened_with_backoff() {
    let (old, gate, client) = old_alone(&["--sse-drop-after-ms", "150"], json!({"session_idle_timeout_secs": 2}));
    // A listening client keeps its session, and wants the server's notifications.
    let _stream = client.open_stream();
    std::thread::sleep(Duration::from_secs(7));
    let (opened, closed, open) = streams(&old);
    eprintln!("a stream that drops 150 ms after each start: {opened} opened in 7 s, {closed} closed");
    // 0.5 s, 1 s, 2 s, 4 s after each loss, against one every reaper tick (0.2 s) without backoff.
    assert!((3..=6).contains(&opened), "reopened with backoff: {opened} streams in 7 s: {}", old.stats());
    assert_eq!(opened, closed + open, "{}", old.stats());
    assert!(readers(&gate) <= 1, "no reader piles up: {}", readers(&gate));
    let status = gate.status();
    assert_balanced(&status);
    assert_eq!(status["downstream"]["opened"], opened, "each stream was a downstream session: {status}");
}

#[test]
fn bad_input_from_an_sse_server_is_an_error_naming_it_and_touches_nothing_else() {
    let new = Fixture::start("new", &[]);
    let silent = sse_fixture("old", &["--sse-no-endpoint"]);
    let elsewhere = sse_fixture("old", &["--sse-endpoint", "http://127.0.0.2:9/message?sessionId={session}"]);
    let cases = [
        (silent.sse_url(), "no `endpoint` event within 1 s (connect_timeout_secs)", Some(&silent)),
        (elsewhere.sse_url(), "another origin (http://127.0.0.2:9)", Some(&elsewhere)),
        // A JSON answer, not a stream: a Streamable HTTP server's own `/stats`.
        (format!("http://{}/stats", new.addr), "not an SSE stream", None),
        (format!("http://{}/nowhere", new.addr), "answered HTTP 404", None),
    ];
    for (url, why, fixture) in cases {
        let gate = Gate::start_checked(&config(&url, Some(&new), json!({"connect_timeout_secs": 1})));
        let mut client = gate.client();
        let started = Instant::now();
        client.initialize();
        assert!(started.elapsed() < Duration::from_secs(5), "{why}: initialize took {:?}", started.elapsed());
        let reply = client.call_tool("old__echo", json!({"text": "x"}));
        let message = reply.error_message();
        assert!(message.contains("old"), "{why}: the error names the server: {reply:?}");
        let status = gate.status();
        let error = status["servers"]["old"]["last_error"].as_str().unwrap_or_default().to_string();
        assert!(error.contains(why), "{why}: {error}");
        assert_eq!(client.tool_text("new__echo", json!({"text": "fine"})), "fine", "{why}: the other server");
        if let Some(fixture) = fixture {
            assert!(wait_until(WAIT, || streams(fixture).2 == 0), "{why}: the stream was closed: {}", fixture.stats());
            assert_eq!(fixture.count("initialize"), 0, "{why}: nothing was POSTed");
        }
        assert_eq!(readers_settle(&gate, 1), 1, "{why}: only new's GET stream has a reader");
        assert_balanced(&status);
    }
}

#[test]
fn after_a_crash_a_restored_session_gets_a_new_stream_and_the_old_one_is_not_taken_over() {
    let old = sse_fixture("old", &[]);
    let new = Fixture::start("new", &[]);
    let (_dir, path, c) = with_state_file(config(&old.sse_url(), Some(&new), json!({})));
    let mut gate = Gate::start_checked(&c);
    let mut client = gate.client();
    client.initialize();
    assert_eq!(client.tool_text("old__echo", json!({"text": "before"})), "before");
    wait_for_state(&path, 1, 2);
    let saved = read_state(&path);
    let old_saved =
        saved["sessions"][0]["downstreams"].as_array().and_then(|d| d.iter().find(|d| d["server"] == "old"));
    assert_eq!(old_saved.map(|d| &d["ends_with_process"]), Some(&json!(true)), "{saved}");
    gate.kill();
    // The kernel closed the dead process's stream: the server's session ended with it.
    assert_streams_closed(&old, 1);
    let mut c = c;
    c["listen"] = json!(gate.addr.to_string());
    let gate = Gate::start_checked(&c);
    assert!(wait_until(WAIT, || streams(&old) == (2, 1, 1)), "a new stream for the restored session: {}", old.stats());
    assert_eq!(client.tool_text("old__echo", json!({"text": "after"})), "after", "the same client session");
    let status = gate.status();
    assert_eq!(status["sessions"]["restored"], 1, "{status}");
    assert_eq!(status["downstream"]["resumed"], 1, "only the Streamable HTTP one is taken over: {status}");
    assert_eq!(old.count("initialize"), 2, "{}", old.stats());
    assert_balanced(&status);
}

#[test]
fn a_quiet_stream_outlives_the_request_timeout() {
    // No keep-alive comments at all: the stream says nothing between calls.
    let (old, _gate, mut client) = old_alone(&["--keepalive-ms", "0"], json!({"request_timeout_secs": 1}));
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(client.tool_text("old__echo", json!({"text": "still"})), "still");
    assert_eq!(streams(&old), (1, 0, 1), "the session's one stream, quiet for 3 s, is still open: {}", old.stats());
    assert_eq!(old.count("initialize"), 1);
}
