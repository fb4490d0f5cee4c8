//! Servers that are slow, silent or deaf, measured from the client's side:
//! a server that keeps its answer open with keep-alive comments and never
//! answers is cut off at `request_timeout_secs`; a server that hangs holds
//! only its own `calls_per_server` permits, never another server's; a call
//! the client cancels ends at once even when the server ignores the cancel;
//! and a session the client deletes ends its calls at once. Every call here
//! is a POST on a connection of its own, read with a deadline, so a test
//! that fails says how long it waited instead of hanging.

mod support;

use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{
    Answer, Client, Fixture, Gate, assert_balanced, exchange, has_head, mcp_post, read_answer_from, read_until, send,
    wait_until,
};

/// The longest any single call here is waited for.
const GIVE_UP: Duration = Duration::from_secs(10);

fn session_of(client: &Client) -> String {
    client.session.clone().expect("initialized")
}

fn call_body(id: &str, tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})
}

/// The text of the first content item of the response to `id` in `answer`.
fn text_of(answer: &Answer, id: &str) -> Option<String> {
    answer.response_to(id)?["result"]["content"][0]["text"].as_str().map(str::to_string)
}

/// POSTs `body` in `session` on a fresh connection and reads the answer
/// until it is whole, the connection ends, or `limit` passes.
fn post_alone(addr: SocketAddr, session: &str, body: &Value, limit: Duration) -> Answer {
    exchange(addr, &mcp_post(addr, Some(session), &body.to_string(), false), limit).expect("connect to mcpgate")
}

/// Starts `post_alone` on a thread; the answer arrives on the receiver.
fn post_in_background(gate: &Gate, client: &Client, body: Value, limit: Duration) -> mpsc::Receiver<Answer> {
    let (addr, session) = (gate.addr, session_of(client));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(post_alone(addr, &session, &body, limit));
    });
    rx
}

/// A server that keeps its answer open with keep-alive comments and never
/// answers must not hold a client (and a permit, and a connection) for as
/// long as it likes: comments are not messages, and `request_timeout_secs`
/// bounds how long a server may go without sending one.
#[test]
fn a_server_that_trickles_comments_is_cut_off_at_the_request_timeout() {
    let alpha = Fixture::start("alpha", &[]);
    let gate = Gate::start_for(&[&alpha], json!({"request_timeout_secs": 2}));
    let client = gate.open_session();
    let body = call_body("trickle", "alpha__trickle", json!({"every_ms": 300}));
    let answer = post_alone(gate.addr, &session_of(&client), &body, GIVE_UP);
    eprintln!("trickle with request_timeout_secs 2: {answer:?}");
    assert!(answer.ended(), "no answer within {GIVE_UP:?}: the comments kept the call alive");
    let response = answer.response_to("trickle").unwrap_or_else(|| panic!("no response for the call: {answer:?}"));
    assert_eq!(response["error"]["code"], -32603, "{response}");
    let message = response["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("server `alpha`") && message.contains("within 2 s"), "{response}");
    let took = answer.took;
    assert!(took >= Duration::from_secs(2) && took < Duration::from_secs(4), "cut off after {took:?}");
    // The call is over at the server too: mcpgate closed that connection.
    assert!(wait_until(Duration::from_secs(3), || alpha.count("held_open") == 0), "{}", alpha.stats());
}

/// Permits are per server: a server that hangs (sends nothing at all for
/// 20 s) uses up its own `calls_per_server`, and the calls queued behind
/// them wait for that server only; a call to another server goes at once.
#[test]
fn calls_to_a_hung_server_do_not_delay_calls_to_another() {
    let (alpha, beta) = (Fixture::start("alpha", &[]), Fixture::start("beta", &[]));
    let gate = Gate::start_for(&[&alpha, &beta], json!({"calls_per_server": 2}));
    let mut client = gate.open_session();
    // Both downstream sessions are open: the timed call measures the call alone.
    assert_eq!(client.tool_text("beta__echo", json!({"text": "warm"})), "warm");
    assert_eq!(client.tool_text("alpha__echo", json!({"text": "warm"})), "warm");
    let before = alpha.count("requests");
    let _hung: Vec<_> = (0..4)
        .map(|i| {
            post_in_background(
                &gate,
                &client,
                call_body(&format!("hung-{i}"), "alpha__slow", json!({"ms": 20_000})),
                GIVE_UP,
            )
        })
        .collect();
    assert!(
        wait_until(Duration::from_secs(5), || alpha.count("requests") >= before + 2),
        "the hung calls never reached alpha: {}",
        alpha.stats()
    );
    // The other two are queued by now, behind alpha's two permits.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(alpha.count("requests"), before + 2, "calls_per_server 2 lets two calls at a time reach alpha");
    let answer = post_alone(
        gate.addr,
        &session_of(&client),
        &call_body("beta", "beta__echo", json!({"text": "through"})),
        GIVE_UP,
    );
    eprintln!("beta__echo while alpha hangs: {answer:?}");
    assert_eq!(text_of(&answer, "beta").as_deref(), Some("through"), "{answer:?}");
    assert!(answer.took < Duration::from_secs(1), "beta's call waited {:?} behind alpha's", answer.took);
}

/// A cancelled call is over for the client: mcpgate forwards the cancel
/// (with the server's own id), ends the call's answer at once without a
/// response, and frees its permit, even when the server (like those built
/// on the TypeScript SDK) ignores the cancel and keeps its stream open.
#[test]
fn a_cancelled_call_frees_its_permit_at_once() {
    let alpha = Fixture::start("alpha", &[]);
    let gate = Gate::start_for(&[&alpha], json!({"calls_per_server": 1}));
    let mut client = gate.open_session();
    assert_eq!(client.tool_text("alpha__echo", json!({"text": "warm"})), "warm");
    let call = post_in_background(&gate, &client, call_body("ignore-me", "alpha__ignore_cancel", json!({})), GIVE_UP);
    assert!(wait_until(Duration::from_secs(5), || alpha.count("held_open") == 1), "{}", alpha.stats());

    let cancelled_at = Instant::now();
    assert_eq!(client.notify("notifications/cancelled", json!({"requestId": "ignore-me", "reason": "test"})), 202);
    let cancelled = || alpha.stats()["cancelled"].as_array().cloned().unwrap_or_default();
    assert!(
        wait_until(Duration::from_secs(2), || cancelled().len() == 1),
        "no cancel reached alpha: {}",
        alpha.stats()
    );
    assert_ne!(cancelled()[0]["requestId"], "ignore-me", "mcpgate must send the server's own id: {:?}", cancelled());

    let answer = call.recv_timeout(Duration::from_millis(1500));
    eprintln!("the cancelled call, {:?} after the cancel: {answer:?}", cancelled_at.elapsed());
    let answer = answer.unwrap_or_else(|_| panic!("the cancelled call still runs 1.5 s after its cancel"));
    assert!(answer.ended() && matches!(answer.status(), 200 | 202), "{answer:?}");
    assert!(answer.response_to("ignore-me").is_none(), "a cancelled call gets no response: {answer:?}");

    let next = post_alone(
        gate.addr,
        &session_of(&client),
        &call_body("next", "alpha__echo", json!({"text": "next"})),
        GIVE_UP,
    );
    eprintln!("the next call to alpha: {next:?}");
    assert_eq!(text_of(&next, "next").as_deref(), Some("next"), "{next:?}");
    assert!(next.took < Duration::from_secs(1), "the next call waited {:?} for the permit", next.took);
    assert!(
        wait_until(Duration::from_secs(1), || gate.status()["calls"]["in_flight"] == 0),
        "calls: {}",
        gate.status()["calls"]
    );
    // Nothing is left of the call at the server's end either: its connection is closed.
    assert!(wait_until(Duration::from_secs(2), || alpha.count("held_open") == 0), "{}", alpha.stats());
}

/// A call the client cancels while it waits for one of its server's
/// permits ends at once, without a response, and is never sent: before,
/// it slept until a permit came back (here: 10 s, when it failed as busy).
#[test]
fn a_call_cancelled_while_it_waits_for_a_permit_ends_at_once_unsent() {
    let alpha = Fixture::start("alpha", &[]);
    let gate = Gate::start_for(&[&alpha], json!({"calls_per_server": 1}));
    let mut client = gate.open_session();
    assert_eq!(client.tool_text("alpha__echo", json!({"text": "warm"})), "warm");
    let body = call_body("first", "alpha__cancellable", json!({"ms": 20_000}));
    let first = post_in_background(&gate, &client, body, Duration::from_secs(30));
    assert!(
        wait_until(GIVE_UP, || alpha.received("tools/call") == 2 && alpha.count("requests_running") == 1),
        "{}",
        alpha.stats()
    );
    let waiting =
        post_in_background(&gate, &client, call_body("waiting", "alpha__echo", json!({"text": "w"})), GIVE_UP);
    // Long enough for it to reach the wait on a loaded host; a cancel that
    // comes sooner must end it all the same.
    std::thread::sleep(Duration::from_millis(300));
    let cancelled_at = Instant::now();
    assert_eq!(client.notify("notifications/cancelled", json!({"requestId": "waiting"})), 202);
    let answer = waiting.recv_timeout(GIVE_UP + Duration::from_secs(1)).expect("an answer or a timeout");
    let took = cancelled_at.elapsed();
    eprintln!("the call cancelled while waiting, {took:?} after the cancel: {answer:?}");
    assert!(answer.ended() && matches!(answer.status(), 200 | 202), "{answer:?}");
    assert!(answer.response_to("waiting").is_none(), "a cancelled call gets no response: {answer:?}");
    assert!(took < Duration::from_secs(3), "the cancelled call waited {took:?} for a permit");

    assert_eq!(client.notify("notifications/cancelled", json!({"requestId": "first"})), 202);
    let first = first.recv_timeout(GIVE_UP).expect("the first call's answer");
    assert!(first.response_to("first").is_none(), "{first:?}");
    assert_eq!(client.tool_text("alpha__echo", json!({"text": "after"})), "after");
    assert_eq!(alpha.received("tools/call"), 3, "the cancelled call was sent anyway: {}", alpha.stats());
    assert_eq!(alpha.stats()["cancelled"].as_array().map_or(0, Vec::len), 1, "{}", alpha.stats());
}

/// A cancel that comes while mcpgate is still finding the call's server
/// (here, listing a server slow to list) is kept: the call ends without a
/// response and is never sent. Before, the cancel was ignored as naming no
/// call in flight, and the call ran.
#[test]
fn a_call_cancelled_before_mcpgate_sends_it_is_never_sent() {
    let alpha = Fixture::start("alpha", &["--list-delay-ms", "3000"]);
    let gate = Gate::start_for(&[&alpha], json!({}));
    let mut client = gate.open_session();
    let listed = alpha.received("tools/list");
    let early = post_in_background(&gate, &client, call_body("early", "alpha__echo", json!({"text": "e"})), GIVE_UP);
    assert!(
        wait_until(GIVE_UP, || alpha.received("tools/list") > listed && alpha.count("requests_running") == 1),
        "mcpgate did not list alpha for the call: {}",
        alpha.stats()
    );
    assert_eq!(client.notify("notifications/cancelled", json!({"requestId": "early"})), 202);
    let answer = early.recv_timeout(GIVE_UP + Duration::from_secs(1)).expect("an answer or a timeout");
    eprintln!("the call cancelled before it was sent: {answer:?}");
    assert!(answer.ended() && matches!(answer.status(), 200 | 202), "{answer:?}");
    assert!(answer.response_to("early").is_none(), "a cancelled call gets no response: {answer:?}");
    assert_eq!(alpha.received("tools/call"), 0, "the cancelled call was sent: {}", alpha.stats());
    // The session goes on, and its id is free again.
    assert_eq!(client.tool_text("alpha__echo", json!({"text": "after"})), "after");
    let again =
        post_alone(gate.addr, &session_of(&client), &call_body("early", "alpha__echo", json!({"text": "a"})), GIVE_UP);
    assert_eq!(text_of(&again, "early").as_deref(), Some("a"), "{again:?}");
}

/// A DELETE ends the session's calls with it: it is answered at once (not
/// after the calls), the calls' answers end without a response, the servers
/// get their DELETE, and nothing is left open downstream.
#[test]
fn deleting_a_session_ends_its_calls_at_once() {
    let alpha = Fixture::start("alpha", &[]);
    let gate = Gate::start_for(&[&alpha], json!({}));
    let mut client = gate.open_session();
    assert_eq!(client.tool_text("alpha__echo", json!({"text": "warm"})), "warm");
    let call = post_in_background(&gate, &client, call_body("trickle", "alpha__trickle", json!({})), GIVE_UP);
    assert!(wait_until(Duration::from_secs(5), || alpha.count("held_open") == 1), "{}", alpha.stats());

    let deleted_at = Instant::now();
    let (tx, deleted) = mpsc::channel();
    let deleter = client.same_session();
    std::thread::spawn(move || {
        let _ = tx.send(deleter.delete());
    });
    let status = deleted.recv_timeout(GIVE_UP);
    let delete_took = deleted_at.elapsed();
    let answer = call.recv_timeout(Duration::from_millis(1500).saturating_sub(delete_took));
    eprintln!("DELETE: {status:?} after {delete_took:?}; the call, {:?} after it: {answer:?}", deleted_at.elapsed());
    assert_eq!(status, Ok(200), "the DELETE was not answered within {GIVE_UP:?}");
    assert!(delete_took < Duration::from_secs(1), "the DELETE took {delete_took:?}");
    let answer = answer.unwrap_or_else(|_| panic!("the call still runs 1.5 s after its session was deleted"));
    assert!(answer.ended(), "{answer:?}");
    // The client ended the session: like a cancelled call, it ends without one.
    assert!(answer.response_to("trickle").is_none(), "a call of a deleted session gets no response: {answer:?}");
    assert!(wait_until(Duration::from_secs(2), || alpha.count("delete") == 1), "{}", alpha.stats());
    assert!(wait_until(Duration::from_secs(2), || alpha.count("held_open") == 0), "{}", alpha.stats());
    assert!(wait_until(Duration::from_secs(2), || gate.status()["downstream"]["live"] == 0), "{}", gate.status());
    assert_balanced(&gate.status());
}

/// A server that answers with an SSE stream and then works in silence: the
/// client gets its answer's head at once, not when the response comes.
/// Clients on Node's fetch give up on a head that takes 300 s
/// (`headersTimeout`), whatever the call's own timeout says.
#[test]
fn a_streamed_answer_starts_for_the_client_when_the_server_starts_it() {
    let alpha = Fixture::start("alpha", &["--sse"]);
    let gate = Gate::start_for(&[&alpha], json!({}));
    let client = gate.open_session();
    let body = call_body("quiet", "alpha__slow", json!({"ms": 1500}));
    let started = Instant::now();
    let mut stream = send(gate.addr, &mcp_post(gate.addr, Some(&session_of(&client)), &body.to_string(), false));
    let mut received = Vec::new();
    read_until(&mut stream, &mut received, GIVE_UP, has_head);
    let head_after = started.elapsed();
    let answer = read_answer_from(&mut stream, received, GIVE_UP);
    let took = started.elapsed();
    eprintln!("head after {head_after:?}, answer after {took:?}: {answer:?}");
    assert!(head_after < Duration::from_millis(700), "the answer's head waited {head_after:?} for the response");
    assert_eq!(answer.status(), 200, "{answer:?}");
    assert!(answer.response_to("quiet").is_some(), "{answer:?}");
    assert!(took >= Duration::from_millis(1500), "{answer:?}");
}
