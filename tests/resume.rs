//! Client streams resume with Last-Event-ID and lose nothing (2025-11-25
//! resumability): the replay covers exactly the events the client missed
//! on that stream.

mod support;

use std::time::Duration;

use serde_json::json;
use support::{Fixture, Gate, config, wait_until};

fn notify(client: &mut support::Client, kind: &str) {
    assert_eq!(client.tool_text("fx__notify", json!({ "kind": kind })), "sent");
}

#[test]
fn a_get_stream_resumed_twice_loses_no_notification() {
    let fixture = Fixture::start("fx", &[]);
    let gate = Gate::start(&config(&[("fx", fixture.url())]));
    let mut client = gate.client();
    client.initialize();
    assert!(wait_until(Duration::from_secs(5), || fixture.count("get_streams_open") == 1));
    let expect = |stream: &support::Stream, method: &str| {
        let message = stream.next(Duration::from_secs(5)).unwrap_or_else(|| panic!("no {method}"));
        assert_eq!(message["method"], method, "{message}");
    };
    let stream = client.open_stream();
    notify(&mut client, "tools");
    expect(&stream, "notifications/tools/list_changed");
    let last = stream.last_event_id().expect("events carry ids");
    stream.close();
    // While the client is away ...
    notify(&mut client, "prompts");
    let stream = client.open_stream_from(Some(&last));
    expect(&stream, "notifications/prompts/list_changed");
    let last = stream.last_event_id().unwrap();
    stream.close();
    notify(&mut client, "resources");
    let stream = client.open_stream_from(Some(&last));
    expect(&stream, "notifications/resources/list_changed");
    assert!(stream.next(Duration::from_millis(300)).is_none(), "nothing is replayed twice");
}

#[test]
fn a_post_answer_lost_with_its_connection_is_replayed_on_get() {
    let fixture = Fixture::start("fx", &[]);
    let gate = Gate::start(&config(&[("fx", fixture.url())]));
    let mut client = gate.client();
    client.initialize();
    // A call with progress answers over SSE; take its events, then ask for
    // its stream again after the priming event (`1-0`, before any progress),
    // as a client whose connection broke right after it opened would: both
    // progress events and the answer are replayed.
    let reply = client.request(
        "tools/call",
        json!({"name": "fx__slow", "arguments": {"ms": 200, "steps": 2}, "_meta": {"progressToken": "t"}}),
    );
    assert_eq!(reply.events.len(), 2, "{reply:?}");
    let stream = client.open_stream_from(Some("1-0"));
    let first = stream.next(Duration::from_secs(5)).expect("replayed progress");
    assert_eq!(first["method"], "notifications/progress");
    let second = stream.next(Duration::from_secs(5)).expect("replayed progress");
    assert_eq!(second["params"]["progress"], 2);
    let answer = stream.next(Duration::from_secs(5)).expect("replayed answer");
    assert_eq!(answer["result"]["content"][0]["text"], "done", "{answer}");
}
