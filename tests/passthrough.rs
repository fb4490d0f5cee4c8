//! What mcpgate passes through between a client and its servers, checked
//! against real fixture servers: server-to-client requests (sampling,
//! elicitation, roots) and their answers, with ids rewritten both ways;
//! the client's capabilities; cancellation to the one server handling a
//! request; logging levels, remembered for servers opened later; log
//! messages on a POST's SSE answer after a priming event; resource
//! subscriptions; `list_changed` making the merged list stale; and answers
//! and cancels getting through while every worker is busy.

mod support;

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{
    Client, Fixture, Gate, PROTOCOL, RawReply, config, config_for, downstream_session, exchange, mcp_post_as,
    sse_events, wait_until,
};

fn gate_for(fixtures: &[&Fixture]) -> Gate {
    Gate::start(&config_for(fixtures))
}

fn session_with(gate: &Gate, capabilities: Value) -> Client {
    let mut client = gate.client();
    client.initialize_with(capabilities);
    client
}

/// The text of the first content item of a `tools/call` response.
fn text_of(response: &Value) -> String {
    response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text result in {response}"))
        .to_string()
}

/// Whether a server-to-client request id is one of the fixture's own (`fixture-N`).
fn is_fixture_id(id: &Value) -> bool {
    id.as_str().is_some_and(|s| s.starts_with("fixture-"))
}

/// The requests (method and id) a client saw in a streamed answer.
fn asked(events: &[Value]) -> Vec<&Value> {
    events.iter().filter(|m| m.get("method").is_some() && m.get("id").is_some()).collect()
}

/// How many JSON-RPC requests each fixture received while `act` ran.
fn requests_during<T>(a: &Fixture, b: &Fixture, act: impl FnOnce() -> T) -> ((u64, u64), T) {
    let before = (a.count("requests"), b.count("requests"));
    let out = act();
    ((a.count("requests") - before.0, b.count("requests") - before.1), out)
}

/// A fixture's per-session map in /stats (`log_level`, `subscriptions`).
fn per_session(f: &Fixture, key: &str) -> serde_json::Map<String, Value> {
    let stats = f.stats();
    stats[key].as_object().unwrap_or_else(|| panic!("{}: no `{key}` map in {stats}", f.name)).clone()
}

/// POSTs `body` on a fresh connection as a client of protocol `version` in
/// `session`, and reads until the last chunk of a chunked answer (or a
/// whole Content-Length body), at most 10 s.
fn raw_post(gate: &Gate, session: &str, version: &str, body: &str) -> RawReply {
    let request = mcp_post_as(version, gate.addr, Some(session), body, false);
    let answer = exchange(gate.addr, &request, Duration::from_secs(10)).expect("connect to mcpgate");
    if let Some(ending) = answer.ending {
        panic!("no whole answer within 10 s ({ending:?}): {}", String::from_utf8_lossy(&answer.bytes));
    }
    answer.reply().expect("a whole answer has a head")
}

/// The SSE events of a body, as mcpgate's decoder reads them; panics if it is not valid SSE.
fn valid_sse(body: &str) -> Vec<mcpgate::protocol::sse::Event> {
    sse_events(body.as_bytes()).unwrap_or_else(|(events, e)| panic!("invalid SSE ({e}) after {events:?}: {body:?}"))
}

#[test]
fn sampling_elicitation_and_roots_round_trips_reach_the_client_and_back() {
    let a = Fixture::start("a", &[]);
    let gate = gate_for(&[&a]);
    let client = session_with(&gate, json!({"sampling": {}, "elicitation": {}, "roots": {}}));
    let mut seen_ids = Vec::new();

    let (events, last) = client.call_streaming("a__sample", json!({"prompt": "the answer?"}), |request| {
        assert_eq!(request["method"], "sampling/createMessage", "{request}");
        assert_eq!(request["params"]["messages"][0]["content"]["text"], "the answer?", "{request}");
        Some(json!({"role": "assistant", "content": {"type": "text", "text": "forty-two"}, "model": "m"}))
    });
    assert_eq!(text_of(&last), "sampled: forty-two", "events {events:?}");
    let requests = asked(&events);
    assert_eq!(requests.len(), 1, "one sampling request: {events:?}");
    seen_ids.push(requests[0]["id"].clone());

    let (events, last) = client.call_streaming("a__elicit", json!({"message": "who are you?"}), |request| {
        assert_eq!(request["method"], "elicitation/create", "{request}");
        assert_eq!(request["params"]["message"], "who are you?", "{request}");
        Some(json!({"action": "accept", "content": {"name": "ada"}}))
    });
    let text = text_of(&last);
    assert!(text.contains("accept") && text.contains("ada"), "{text:?}");
    let requests = asked(&events);
    assert_eq!(requests.len(), 1, "one elicitation request: {events:?}");
    seen_ids.push(requests[0]["id"].clone());

    let (events, last) = client.call_streaming("a__roots", json!({}), |request| {
        assert_eq!(request["method"], "roots/list", "{request}");
        Some(json!({"roots": [{"uri": "file:///tmp", "name": "tmp"}]}))
    });
    assert!(text_of(&last).contains("file:///tmp"), "{last}");
    let requests = asked(&events);
    assert_eq!(requests.len(), 1, "one roots request: {events:?}");
    seen_ids.push(requests[0]["id"].clone());

    // The fixture asked with `fixture-1..3`; the client saw mcpgate's own ids.
    for id in &seen_ids {
        assert!(!id.is_null() && !is_fixture_id(id), "the client saw the server's id {id}: {seen_ids:?}");
    }
    assert_ne!(seen_ids[0], seen_ids[1]);
    assert_ne!(seen_ids[1], seen_ids[2]);
    assert_ne!(seen_ids[0], seen_ids[2]);
}

#[test]
fn two_servers_asking_at_once_get_their_own_answers() {
    let (a, b) = (Fixture::start("a", &[]), Fixture::start("b", &[]));
    let gate = gate_for(&[&a, &b]);
    let mut first = session_with(&gate, json!({"sampling": {}}));
    // The merged tool list is cached before the race, so neither call lists.
    assert!(first.tool_names().contains(&"b__sample".to_string()));
    let second = first.same_session();
    // Both requests are pending at once before either is answered.
    let pending = Arc::new((Mutex::new(0usize), Condvar::new()));

    let run = |client: &Client, server: &str| {
        let pending = pending.clone();
        let mut seen = None;
        let mut both_pending = false;
        let (events, last) = client.call_streaming(
            &format!("{server}__sample"),
            json!({"prompt": format!("for {server}")}),
            |request| {
                let (count, changed) = &*pending;
                let mut count = count.lock().unwrap();
                *count += 1;
                changed.notify_all();
                let (count, _) = changed.wait_timeout_while(count, Duration::from_secs(10), |n| *n < 2).unwrap();
                both_pending = *count >= 2;
                let prompt = request["params"]["messages"][0]["content"]["text"].as_str().unwrap_or("?").to_string();
                seen = Some(request["id"].clone());
                let text = format!("answer to {prompt} (request {})", request["id"]);
                Some(json!({"role": "assistant", "content": {"type": "text", "text": text}, "model": "m"}))
            },
        );
        (seen.unwrap_or_else(|| panic!("{server}: no sampling request in {events:?}; {last}")), last, both_pending)
    };
    let ((id_a, last_a, both_a), (id_b, last_b, both_b)) = std::thread::scope(|s| {
        let ta = s.spawn(|| run(&first, "a"));
        let tb = s.spawn(|| run(&second, "b"));
        (ta.join().expect("a's call"), tb.join().expect("b's call"))
    });
    assert!(both_a && both_b, "the two sampling requests were never pending at once");
    assert_eq!(text_of(&last_a), format!("sampled: answer to for a (request {id_a})"), "{last_a}");
    assert_eq!(text_of(&last_b), format!("sampled: answer to for b (request {id_b})"), "{last_b}");
    assert_ne!(id_a, id_b, "both fixtures asked with `fixture-1`; the client must see distinct ids");
    assert!(!is_fixture_id(&id_a) && !is_fixture_id(&id_b), "{id_a} {id_b}");
}

#[test]
fn a_client_without_sampling_does_not_get_sampling_tools_working() {
    let a = Fixture::start("a", &[]);
    let gate = gate_for(&[&a]);
    let client = session_with(&gate, json!({}));
    let (events, last) = client.call_streaming("a__sample", json!({"prompt": "x"}), |request| {
        panic!("a client without sampling was asked: {request}")
    });
    assert!(asked(&events).is_empty(), "{events:?}");
    let tool_error = last["result"]["isError"] == true;
    assert!(tool_error || last.get("error").is_some(), "expected a tool or JSON-RPC error: {last}");
    if tool_error {
        // The fixture refused because the capabilities it got lack sampling.
        assert!(text_of(&last).contains("sampling"), "{last}");
    }
}

#[test]
fn cancellation_reaches_only_the_server_handling_the_request_with_its_own_id() {
    let (a, b) = (Fixture::start("a", &[]), Fixture::start("b", &[]));
    let gate = gate_for(&[&a, &b]);
    let mut client = session_with(&gate, json!({}));
    // mcpgate's reader holds a's GET stream (so a resumption of the cut POST
    // stream is refused at once), and the merged list is cached (so the
    // next request a counts is the call itself).
    assert!(wait_until(Duration::from_secs(5), || a.count("get_streams_open") == 1), "{}", a.stats());
    let a_session = downstream_session(&mut client, "a__whoami", "a");
    let before = a.count("requests");

    let worker = client.same_session();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let body = json!({
            "jsonrpc": "2.0",
            "id": "cancel-me",
            "method": "tools/call",
            "params": {"name": "a__cancellable", "arguments": {"ms": 10000}},
        });
        let reply = worker.post(body.to_string().as_bytes(), &[]);
        let _ = done_tx.send(reply);
    });
    assert!(
        wait_until(Duration::from_secs(5), || a.count("requests") > before),
        "a never received the call: {}",
        a.stats()
    );
    let cancelled_at = Instant::now();
    assert_eq!(client.notify("notifications/cancelled", json!({"requestId": "cancel-me", "reason": "test"})), 202);

    let arrived =
        wait_until(Duration::from_secs(5), || a.stats()["cancelled"].as_array().is_some_and(|c| !c.is_empty()));
    let cancelled = a.stats()["cancelled"].clone();
    assert!(arrived, "no cancel reached a within 5 s: {}", a.stats());
    assert_eq!(cancelled.as_array().map(Vec::len), Some(1), "{cancelled}");
    assert_eq!(cancelled[0]["session"], a_session.as_str(), "{cancelled}");
    assert_ne!(cancelled[0]["requestId"], "cancel-me", "mcpgate must send its own downstream id: {cancelled}");
    assert_eq!(b.stats()["cancelled"], json!([]), "b handled nothing: {}", b.stats());

    // The call ends at once, long before its 10 s, and with no response:
    // after a cancel none is sent (the spec), whatever the server does.
    let reply = done_rx
        .recv_timeout(Duration::from_secs(2))
        .unwrap_or_else(|_| panic!("the cancelled call still runs {:?} after the cancel", cancelled_at.elapsed()));
    assert!(cancelled_at.elapsed() < Duration::from_secs(2), "{:?}", cancelled_at.elapsed());
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(reply.body.is_null() && reply.events.is_empty(), "a cancelled call gets no response: {reply:?}");

    // A cancel for nothing in flight (unknown, or already ended) is accepted and goes nowhere.
    let notes = (a.count("notifications"), b.count("notifications"));
    for id in [json!("never-sent"), json!("cancel-me"), json!(424242)] {
        assert_eq!(client.notify("notifications/cancelled", json!({"requestId": id, "reason": "test"})), 202);
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!((a.count("notifications"), b.count("notifications")), notes, "a cancel reached a server");
    assert_eq!(a.stats()["cancelled"].as_array().map(Vec::len), Some(1), "{}", a.stats());
    assert_eq!(b.stats()["cancelled"], json!([]), "{}", b.stats());
}

#[test]
fn logging_set_level_reaches_every_server_and_servers_opened_later() {
    let (a, b) = (Fixture::start("a", &[]), Fixture::start("b", &[]));
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
        listener.local_addr().unwrap().port()
    };
    let mut c = config(&[("a", a.url()), ("b", b.url()), ("c", format!("http://127.0.0.1:{port}/mcp"))]);
    c["open_retry_secs"] = json!(1);
    let gate = Gate::start(&c);
    let mut client = session_with(&gate, json!({}));
    let c_failed = Instant::now();

    let reply = client.request("logging/setLevel", json!({"level": "debug"}));
    assert_eq!(reply.result(), &json!({}), "{reply:?}");
    for f in [&a, &b] {
        let levels = per_session(f, "log_level");
        assert_eq!(levels.values().collect::<Vec<_>>(), [&json!("debug")], "{}: {levels:?}", f.name);
    }

    let c = Fixture::start_on("c", &format!("127.0.0.1:{port}"), &[]);
    std::thread::sleep(Duration::from_millis(1200).saturating_sub(c_failed.elapsed()));
    // Listing reopens c; mcpgate remembered the level and sets it there too.
    assert!(client.tool_names().contains(&"c__echo".to_string()), "c did not join");
    let levels = per_session(&c, "log_level");
    assert_eq!(levels.values().collect::<Vec<_>>(), [&json!("debug")], "c: {levels:?}; {}", c.stats());
    assert_eq!(c.count("initialize"), 1, "{}", c.stats());
}

#[test]
fn log_messages_and_progress_arrive_on_the_post_stream_in_order() {
    let a = Fixture::start("a", &[]);
    let gate = gate_for(&[&a]);
    let client = session_with(&gate, json!({}));
    let (events, last) =
        client.call_streaming("a__log", json!({"level": "warning", "message": "careful"}), |request| {
            panic!("unexpected request {request}")
        });
    assert_eq!(text_of(&last), "logged", "{last}");
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["method"], "notifications/message", "{events:?}");
    assert_eq!(events[0]["params"]["level"], "warning", "{events:?}");
    assert_eq!(events[0]["params"]["data"], "careful", "{events:?}");
    assert_eq!(events[0]["params"]["logger"], "a", "{events:?}");

    // The raw answer: a priming event (an id, empty data) first, then the log, then the result.
    let call = json!({
        "jsonrpc": "2.0", "id": 77, "method": "tools/call",
        "params": {"name": "a__log", "arguments": {"level": "warning", "message": "careful"}},
    });
    let session = client.session.clone().unwrap();
    let reply = raw_post(&gate, &session, PROTOCOL, &call.to_string());
    assert_eq!((reply.version.as_str(), reply.status), ("HTTP/1.1", 200), "{reply:?}");
    let content_type = reply.header("content-type").unwrap_or_default().to_ascii_lowercase();
    assert!(content_type.starts_with("text/event-stream"), "{reply:?}");
    let text = &reply.body;
    assert!(text.starts_with("id: "), "the answer must open with a priming event: {text:?}");
    let sse = valid_sse(text);
    assert_eq!(sse.len(), 3, "{sse:?}");
    assert!(sse[0].id.is_some() && sse[0].data.is_empty(), "priming event: {:?}", sse[0]);
    let log: Value = serde_json::from_str(&sse[1].data).unwrap();
    assert_eq!((&log["method"], &log["params"]["data"]), (&json!("notifications/message"), &json!("careful")));
    let response: Value = serde_json::from_str(&sse[2].data).unwrap();
    assert_eq!(response["id"], 77, "{response}");
    assert_eq!(text_of(&response), "logged");
    assert!(sse.iter().all(|e| e.id.is_some()), "every event is resumable: {sse:?}");

    // A 2025-06-18 client gets no priming event: the log comes first.
    let mut old = gate.client();
    let init = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "old", "version": "1"}},
    });
    let reply = old.post(init.to_string().as_bytes(), &[]);
    assert_eq!(reply.result()["protocolVersion"], "2025-06-18", "{reply:?}");
    old.session = reply.session.clone();
    let reply = raw_post(&gate, old.session.as_deref().unwrap(), "2025-06-18", &call.to_string());
    let sse = valid_sse(&reply.body);
    assert_eq!(sse.len(), 2, "{sse:?}");
    assert!(sse[0].data.contains("notifications/message"), "{sse:?}");
}

#[test]
fn resource_subscriptions_go_to_the_owning_server_and_updates_reach_the_get_stream() {
    let (a, b) = (Fixture::start("a", &[]), Fixture::start("b", &[]));
    let gate = gate_for(&[&a, &b]);
    let mut client = session_with(&gate, json!({}));
    let stream = client.open_stream();
    // b sends the update on its GET stream: mcpgate's reader must hold it.
    assert!(wait_until(Duration::from_secs(5), || b.count("get_streams_open") == 1), "{}", b.stats());

    let uri = "fixture://b/readme";
    let reply = client.request("resources/subscribe", json!({"uri": uri}));
    assert_eq!(reply.result(), &json!({}), "{reply:?}");
    let subscriptions = per_session(&b, "subscriptions");
    assert_eq!(subscriptions.values().collect::<Vec<_>>(), [&json!([uri])], "b: {subscriptions:?}");
    assert!(per_session(&a, "subscriptions").is_empty(), "a: {}", a.stats());

    let updated = stream
        .next_with_method("notifications/resources/updated", Duration::from_secs(5))
        .expect("no resources/updated on the GET stream within 5 s");
    assert_eq!(updated["params"]["uri"], uri, "{updated}");

    let reply = client.request("resources/unsubscribe", json!({"uri": uri}));
    assert_eq!(reply.result(), &json!({}), "{reply:?}");
    assert!(per_session(&b, "subscriptions").is_empty(), "b: {}", b.stats());
    assert!(per_session(&a, "subscriptions").is_empty(), "a: {}", a.stats());
}

#[test]
fn a_list_changed_makes_the_next_list_fresh() {
    let (a, b) = (Fixture::start("a", &[]), Fixture::start("b", &[]));
    let mut c = config(&[("a", a.url()), ("b", b.url())]);
    c["page_size"] = json!(10);
    let gate = Gate::start(&c);
    let mut client = session_with(&gate, json!({}));
    let stream = client.open_stream();
    assert!(wait_until(Duration::from_secs(5), || a.count("get_streams_open") == 1), "{}", a.stats());

    let page = |client: &mut Client, cursor: Option<&str>| -> Value {
        let params = cursor.map_or_else(|| json!({}), |c| json!({"cursor": c}));
        client.request("tools/list", params).result().clone()
    };
    let notify_tools = |client: &mut Client| {
        assert_eq!(client.tool_text("a__notify", json!({"kind": "tools"})), "sent");
        let changed = stream.next_with_method("notifications/tools/list_changed", Duration::from_secs(5));
        assert!(changed.is_some(), "no tools/list_changed on the GET stream within 5 s");
    };

    // The first list asks every server once; then every page, first ones
    // too, comes from the list held for all the sessions that see it.
    let (seen, first) = requests_during(&a, &b, || page(&mut client, None));
    assert_eq!(seen, (1, 1), "the first list asks every server");
    let cursor = first["nextCursor"].as_str().unwrap_or_else(|| panic!("one page only: {first}")).to_string();
    let (seen, second) = requests_during(&a, &b, || page(&mut client, Some(&cursor)));
    assert_eq!(seen, (0, 0), "a later page comes from the held list");
    let (seen, _) = requests_during(&a, &b, || page(&mut client, None));
    assert_eq!(seen, (0, 0), "and so does a first page");
    let (seen, _) = requests_during(&a, &b, || client.tool_text("a__echo", json!({"text": "x"})));
    assert_eq!(seen, (1, 0), "a call is routed by the held list");

    // After a's list_changed, a's part is fetched afresh (not b's)...
    notify_tools(&mut client);
    let (seen, again) = requests_during(&a, &b, || page(&mut client, Some(&cursor)));
    assert_eq!(seen, (1, 0), "the page after a's list_changed asks a again, and only a");
    assert_eq!(again, second, "the fixture's list is static");
    let (seen, _) = requests_during(&a, &b, || page(&mut client, Some(&cursor)));
    assert_eq!(seen, (0, 0), "and is held again");

    // ...and so is the list a call is routed by.
    notify_tools(&mut client);
    let (seen, _) = requests_during(&a, &b, || client.tool_text("a__echo", json!({"text": "y"})));
    assert_eq!(seen, (2, 0), "a's list, then the call, after a's list_changed");
}

/// The client's answer to a server's request, and its cancel, are POSTs:
/// they must not wait behind the call they would end.
#[test]
fn answers_and_cancels_get_through_while_every_lane_is_busy() {
    let a = Fixture::start("a", &[]);
    let mut c = config(&[("a", a.url())]);
    c["calls_per_server"] = json!(1);
    let gate = Gate::start(&c);
    let mut client = session_with(&gate, json!({"sampling": {}}));
    assert!(client.tool_names().contains(&"a__cancellable".to_string()));

    // The one lane runs the call; the client's answer to the server's
    // question must still reach the server, or the call cannot end.
    let caller = client.same_session();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let started = Instant::now();
    std::thread::spawn(move || {
        let (_, last) = caller.call_streaming("a__sample", json!({"prompt": "p"}), |_| {
            Some(json!({"role": "assistant", "content": {"type": "text", "text": "through"}, "model": "m"}))
        });
        let _ = done_tx.send(last);
    });
    let last = done_rx.recv_timeout(Duration::from_secs(5));
    eprintln!("sampling with one worker: after {:?}: {last:?}", started.elapsed());
    let last = last.expect("the sampled call did not end within 5 s: its answer waits for the worker it holds");
    assert_eq!(text_of(&last), "sampled: through", "{last}");

    // Likewise a cancel of the call that holds the worker.
    let before = a.count("requests");
    let worker = client.same_session();
    std::thread::spawn(move || {
        let body = json!({
            "jsonrpc": "2.0", "id": "busy", "method": "tools/call",
            "params": {"name": "a__cancellable", "arguments": {"ms": 10000}},
        });
        worker.post(body.to_string().as_bytes(), &[]);
    });
    assert!(wait_until(Duration::from_secs(5), || a.count("requests") > before), "{}", a.stats());
    let canceller = client.same_session();
    let (sent_tx, sent_rx) = std::sync::mpsc::channel();
    let started = Instant::now();
    std::thread::spawn(move || {
        let _ = sent_tx.send(canceller.notify("notifications/cancelled", json!({"requestId": "busy"})));
    });
    let status = sent_rx.recv_timeout(Duration::from_secs(5));
    eprintln!("cancel with one worker: after {:?}: {status:?}", started.elapsed());
    assert_eq!(status, Ok(202), "the cancel was not accepted within 5 s");
    assert!(
        wait_until(Duration::from_secs(2), || a.stats()["cancelled"].as_array().is_some_and(|c| c.len() == 1)),
        "{}",
        a.stats()
    );
}

/// A client that goes away from its `GET` stream has not fallen behind:
/// the log must not say so (an operator would hunt a slow client).
#[test]
fn a_get_stream_whose_client_left_is_not_reported_as_fallen_behind() {
    let fx = Fixture::start("fx", &[]);
    let gate = gate_for(&[&fx]);
    let mut client = session_with(&gate, json!({}));
    for _ in 0..3 {
        let stream = client.open_stream();
        assert!(wait_until(Duration::from_secs(5), || fx.count("get_streams_open") == 1), "{}", fx.stats());
        stream.close();
        for _ in 0..4 {
            let reply = client.request("tools/call", json!({"name": "fx__notify", "arguments": {"kind": "message"}}));
            reply.result();
        }
    }
    let log = gate.stderr();
    assert!(!log.contains("fell"), "a client that left was reported as falling behind:\n{log}");
}
