//! Traces (issue 42): the SERVER span of each request mcpgate receives and the CLIENT span of
//! each it sends, in the MCP conventions, read back from an OTLP receiver that decodes them with
//! the official protobuf types; the trace context from the client's header or `_meta` to what
//! an HTTP and a stdio server saw; the sampling ratio and the client's decision; a receiver that
//! is down or too slow, which never touches a call; and the operation durations on `/metrics`.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{
    CLIENT, Fixture, Gate, GotSpan, OtlpReceiver, SERVER, StdioGate, config, raw_request, stdio_server, wait_until,
};

const T1: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const P1: &str = "00f067aa0ba902b7";
const T2: &str = "0af7651916cd43dd8448eb211c80319c";
const P2: &str = "b7ad6b7169203331";
const T3: &str = "11112222333344445555666677778888";
const P3: &str = "1111222233334444";

fn metrics(gate: &Gate) -> String {
    let reply = raw_request(gate.addr, "GET", "/metrics", &[], b"");
    assert_eq!(reply.status, 200, "{reply:?}");
    reply.body
}

/// The value of the series `series` (name and labels, as written) on `/metrics`.
fn series(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0, |n| n.trim().parse().unwrap_or_else(|_| panic!("{series}: {n}")))
}

/// The spans of `trace` named `name`.
fn named<'a>(spans: &'a [GotSpan], trace: &str, name: &str) -> Vec<&'a GotSpan> {
    spans.iter().filter(|s| s.trace_id == trace && s.name == name).collect()
}

/// What a fixture saw of the trace context of its `tools/call`s, in order.
fn calls_seen(stats: &Value) -> Vec<Value> {
    let seen = stats["trace_context"].as_array().unwrap_or_else(|| panic!("no trace_context in {stats}"));
    seen.iter().filter(|s| s["method"] == "tools/call").cloned().collect()
}

#[test]
fn one_trace_links_the_client_mcpgates_spans_and_the_context_each_server_saw() {
    let receiver = OtlpReceiver::start();
    let fixture = Fixture::start("alpha", &[]);
    let mut c = config(&[("alpha", fixture.url())]);
    c["mcpServers"]["local"] = stdio_server("local", &[]);
    c["tracing"] = json!({"endpoint": receiver.endpoint()});
    let gate = StdioGate::start(&c);
    let mut client = gate.open_session();
    let session = client.session.clone().unwrap();

    // To the HTTP server: the context in the client's headers.
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "alpha__echo", "arguments": {"text": "a", "password": "hunter2"}}});
    let traceparent = format!("00-{T1}-{P1}-01");
    let reply = client.post(call.to_string().as_bytes(), &[("traceparent", &traceparent), ("tracestate", "v=1")]);
    assert_eq!(reply.result()["content"][0]["text"], "a");
    // To the stdio server: the context in `_meta`, and another trace's in the header (a link).
    client.headers.push(("traceparent".into(), format!("00-{T3}-{P3}-01")));
    let reply = client.request(
        "tools/call",
        json!({"name": "local__echo", "arguments": {"text": "b"},
            "_meta": {"traceparent": format!("00-{T2}-{P2}-01"), "baggage": "user=alice"}}),
    );
    assert_eq!(reply.result()["content"][0]["text"], "b");

    receiver.wait_for("tools/call alpha__echo", 1);
    receiver.wait_for("tools/call local__echo", 1);
    let ok = wait_until(Duration::from_secs(10), || {
        receiver.spans().iter().filter(|s| s.name == "tools/call echo").count() >= 2
    });
    let spans = receiver.spans();
    assert!(ok, "{spans:#?}");

    // mcpgate's SERVER span: a child of the client's, with the conventions' attributes.
    let server = named(&spans, T1, "tools/call alpha__echo");
    assert_eq!(server.len(), 1, "{spans:#?}");
    let server = server[0];
    assert_eq!((server.kind, server.parent_span_id.as_str()), (SERVER, P1), "{server:#?}");
    for (key, value) in [
        ("mcp.method.name", json!("tools/call")),
        ("gen_ai.tool.name", json!("alpha__echo")),
        ("gen_ai.operation.name", json!("execute_tool")),
        ("jsonrpc.request.id", json!("7")),
        ("mcp.session.id", json!(session)),
        ("mcp.protocol.version", json!("2025-11-25")),
        ("network.transport", json!("tcp")),
    ] {
        assert_eq!(server.attr(key), &value, "{key} in {server:#?}");
    }
    assert_eq!(server.attr("gen_ai.tool.call.arguments"), &Value::Null, "arguments only when asked: {server:#?}");
    assert_eq!(server.status.0, 0, "{server:#?}");
    assert!(server.end_nanos >= server.start_nanos && server.start_nanos > 0, "{server:#?}");
    assert_eq!(server.resource["service.name"], "mcpgate");
    assert!(server.resource["service.instance.id"].as_str().is_some_and(|id| !id.is_empty()), "{server:#?}");

    // Its CLIENT span to the HTTP server: a child of the SERVER span, with the server's address.
    let sent = named(&spans, T1, "tools/call echo");
    assert_eq!(sent.len(), 1, "{spans:#?}");
    let sent = sent[0];
    assert_eq!((sent.kind, &sent.parent_span_id), (CLIENT, &server.span_id), "{sent:#?}");
    let port: i64 = fixture.addr.rsplit(':').next().unwrap().parse().unwrap();
    assert_eq!(sent.attr("server.address"), "127.0.0.1", "{sent:#?}");
    assert_eq!(sent.attr("server.port"), &json!(port), "{sent:#?}");
    assert_eq!(sent.attr("network.transport"), "tcp");
    assert_eq!(sent.attr("gen_ai.tool.name"), "echo", "the server's own name: {sent:#?}");
    assert!(sent.attr("mcp.session.id").as_str().is_some_and(|s| !s.is_empty() && s != session), "{sent:#?}");
    assert!(sent.attr("jsonrpc.request.id").is_string(), "{sent:#?}");

    // What the HTTP server saw: the CLIENT span's context, in `_meta` and in the header.
    let seen = calls_seen(&fixture.stats());
    assert_eq!(seen.len(), 1, "{seen:#?}");
    assert_eq!(seen[0]["meta"], json!({"traceparent": sent.traceparent(), "tracestate": "v=1"}), "{seen:#?}");
    assert_eq!(seen[0]["header"], json!({"traceparent": sent.traceparent(), "tracestate": "v=1"}), "{seen:#?}");

    // The stdio call: `_meta`'s context is the parent, the header's a link; `pipe` to the server.
    let server = named(&spans, T2, "tools/call local__echo");
    assert_eq!(server.len(), 1, "{spans:#?}");
    let server = server[0];
    assert_eq!((server.kind, server.parent_span_id.as_str()), (SERVER, P2), "{server:#?}");
    assert_eq!(server.links, vec![(T3.to_string(), P3.to_string())], "{server:#?}");
    let sent = named(&spans, T2, "tools/call echo");
    assert_eq!(sent.len(), 1, "{spans:#?}");
    let sent = sent[0];
    assert_eq!((sent.kind, &sent.parent_span_id), (CLIENT, &server.span_id), "{sent:#?}");
    assert_eq!(sent.attr("network.transport"), "pipe", "{sent:#?}");
    assert_eq!(sent.attr("server.address"), &Value::Null, "{sent:#?}");
    let seen = calls_seen(&gate.kid("local", 1).stats());
    assert_eq!(seen.len(), 1, "{seen:#?}");
    assert_eq!(seen[0]["meta"], json!({"traceparent": sent.traceparent(), "baggage": "user=alice"}), "{seen:#?}");
    assert_eq!(seen[0]["header"], json!({}), "stdio has no headers: {seen:#?}");
    assert!(
        !spans.iter().any(|s| s.attributes.values().any(|v| v.to_string().contains("hunter2"))),
        "a secret on a span"
    );
}

#[test]
fn a_tool_error_and_a_json_rpc_error_are_the_spans_error_type_and_arguments_come_redacted() {
    let receiver = OtlpReceiver::start();
    let fixture = Fixture::start("alpha", &[]);
    let mut c = config(&[("alpha", fixture.url())]);
    c["tracing"] = json!({"endpoint": receiver.endpoint(), "capture_arguments": true, "capture_results": true});
    let gate = Gate::start_checked(&c);
    let mut client = gate.open_session();
    client.headers.push(("traceparent".into(), format!("00-{T1}-{P1}-01")));
    assert_eq!(client.call_tool("alpha__fail", json!({})).result()["isError"], true);
    assert_eq!(client.call_tool("alpha__nope", json!({})).error_code(), -32602);
    assert_eq!(client.tool_text("alpha__echo", json!({"text": "hi", "api_key": "sk-123"})), "hi");

    for name in ["tools/call alpha__fail", "tools/call fail"] {
        let span = &receiver.wait_for(name, 1)[0];
        assert_eq!(span.attr("error.type"), "tool_error", "{span:#?}");
        assert_eq!(span.status.0, 2, "status ERROR: {span:#?}");
    }
    let refused = &receiver.wait_for("tools/call alpha__nope", 1)[0];
    assert_eq!(refused.attr("error.type"), "-32602", "{refused:#?}");
    assert_eq!(refused.attr("rpc.response.status_code"), "-32602", "{refused:#?}");
    assert!(refused.status.0 == 2 && refused.status.1.contains("alpha__nope"), "{refused:#?}");
    for name in ["tools/call alpha__echo", "tools/call echo"] {
        let span = &receiver.wait_for(name, 1)[0];
        let arguments: Value = serde_json::from_str(span.attr("gen_ai.tool.call.arguments").as_str().unwrap()).unwrap();
        assert_eq!(arguments, json!({"text": "hi", "api_key": "***"}), "{span:#?}");
        let result: Value = serde_json::from_str(span.attr("gen_ai.tool.call.result").as_str().unwrap()).unwrap();
        assert_eq!(result["content"][0]["text"], "hi", "{span:#?}");
        assert_eq!(span.attr("error.type"), &Value::Null, "{span:#?}");
    }
}

#[test]
fn with_the_receiver_down_calls_are_unaffected_and_the_dropped_spans_are_counted() {
    let fixture = Fixture::start("alpha", &[]);
    let down = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mut c = config(&[("alpha", fixture.url())]);
    c["tracing"] = json!({"endpoint": format!("http://{down}")});
    let gate = Gate::start_checked(&c);
    let mut client = gate.open_session();
    for i in 0..20 {
        assert_eq!(client.tool_text("alpha__echo", json!({"text": format!("{i}")})), format!("{i}"));
    }
    // 20 SERVER and 20 CLIENT spans at least, besides the session's opening.
    let dropped = "mcpgate_trace_spans_dropped_total";
    let counted = wait_until(Duration::from_secs(10), || series(&metrics(&gate), dropped) >= 40);
    let text = metrics(&gate);
    assert!(counted, "{}", text.lines().filter(|l| l.contains("trace")).collect::<Vec<_>>().join("\n"));
    assert!(series(&text, "mcpgate_trace_export_failures_total") >= 1, "{text}");
    assert_eq!(series(&text, "mcpgate_trace_spans_exported_total"), 0, "{text}");
    assert!(gate.stderr().contains("span(s) dropped: sending them to"), "the log says why: {}", gate.stderr());
}

#[test]
fn a_receiver_that_never_answers_never_holds_a_call_back() {
    let receiver = OtlpReceiver::start_silent();
    let fixture = Fixture::start("alpha", &[]);
    let mut c = config(&[("alpha", fixture.url())]);
    // The exporter waits for the receiver longer than this test lasts: only a queue that drops
    // rather than waits lets the calls through.
    c["tracing"] = json!({"endpoint": receiver.endpoint(), "max_queue": 16, "export_timeout_ms": 60000});
    // The client waits for the exporter below, idle: with the tests' 1 s
    // its next call raced mcpgate closing its connection (a broken pipe in
    // a fresh clone's CI run, under the load of another).
    c["client_idle_timeout_secs"] = json!(60);
    let gate = Gate::start_checked(&c);
    let mut client = gate.open_session();
    // The exporter has a batch in its hands (the session's opening) and waits on the receiver.
    assert!(wait_until(Duration::from_secs(10), || receiver.connections() > 0), "the exporter never connected");
    let started = std::time::Instant::now();
    for i in 0..100 {
        assert_eq!(client.tool_text("alpha__echo", json!({"text": format!("{i}")})), format!("{i}"));
    }
    let took = started.elapsed();
    assert!(took < Duration::from_secs(50), "100 calls took {took:?}: the exporter held them back");
    let text = metrics(&gate);
    // 16 of the calls' 200 spans wait in the queue; the rest were dropped.
    assert!(series(&text, "mcpgate_trace_spans_dropped_total") >= 200 - 16, "{text}");
    assert_eq!(series(&text, "mcpgate_trace_spans_exported_total"), 0, "{text}");
}

#[test]
fn the_ratio_starts_traces_and_the_clients_decision_is_followed() {
    let receiver = OtlpReceiver::start();
    let fixture = Fixture::start("alpha", &[]);
    let mut c = config(&[("alpha", fixture.url())]);
    c["tracing"] = json!({"endpoint": receiver.endpoint(), "sample_ratio": 0});
    let gate = Gate::start_checked(&c);
    let mut client = gate.open_session();
    // No context and a ratio of 0: nothing recorded, nothing passed on.
    assert_eq!(client.tool_text("alpha__echo", json!({"text": "a"})), "a");
    // A client that decided not to sample: not recorded, its context passed on as it came.
    let unsampled = format!("00-{T2}-{P2}-00");
    let reply = client.request(
        "tools/call",
        json!({"name": "alpha__echo", "arguments": {"text": "b"}, "_meta": {"traceparent": unsampled}}),
    );
    assert_eq!(reply.result()["content"][0]["text"], "b");
    // A client that sampled: recorded whatever the ratio.
    client.headers.push(("traceparent".into(), format!("00-{T1}-{P1}-01")));
    assert_eq!(client.tool_text("alpha__echo", json!({"text": "c"})), "c");

    receiver.wait_for("tools/call echo", 1);
    let spans = receiver.spans();
    assert!(spans.iter().all(|s| s.trace_id == T1), "only the sampled trace: {spans:#?}");
    assert_eq!(spans.len(), 2, "{spans:#?}");
    let seen = calls_seen(&fixture.stats());
    assert_eq!(seen[0]["meta"], json!({}), "{seen:#?}");
    assert_eq!(seen[0]["header"], json!({}), "{seen:#?}");
    assert_eq!(seen[1]["meta"], json!({"traceparent": unsampled}), "{seen:#?}");
    assert_eq!(seen[1]["header"], json!({"traceparent": unsampled}), "{seen:#?}");
    assert!(seen[2]["meta"]["traceparent"].as_str().is_some_and(|t| t.starts_with(&format!("00-{T1}-"))), "{seen:#?}");
}

#[test]
fn operation_durations_are_on_metrics_by_method_and_server_without_tracing() {
    let fixture = Fixture::start("alpha", &[]);
    let gate = Gate::start_checked(&config(&[("alpha", fixture.url())]));
    let mut client = gate.open_session();
    for _ in 0..3 {
        assert_eq!(client.tool_text("alpha__echo", json!({"text": "x"})), "x");
    }
    let text = metrics(&gate);
    let calls = r#"mcp_server_operation_duration_seconds_count{mcp_method_name="tools/call"}"#;
    assert_eq!(series(&text, calls), 3, "{text}");
    assert_eq!(series(&text, r#"mcp_server_operation_duration_seconds_count{mcp_method_name="initialize"}"#), 1);
    let sent = r#"mcp_client_operation_duration_seconds_count{server="alpha",mcp_method_name="tools/call"}"#;
    assert_eq!(series(&text, sent), 3, "{text}");
    let opened = r#"mcp_client_operation_duration_seconds_count{server="alpha",mcp_method_name="initialize"}"#;
    assert_eq!(series(&text, opened), 1, "{text}");
    assert!(text.contains(r#"mcp_server_operation_duration_seconds_bucket{mcp_method_name="tools/call",le="0.01"}"#));
    assert_eq!(series(&text, "mcpgate_trace_spans_exported_total"), 0);
}

#[test]
fn the_audit_record_of_a_traced_call_names_its_trace_whichever_carrier_brought_it() {
    let receiver = OtlpReceiver::start();
    let fixture = Fixture::start("alpha", &[]);
    let dir = support::TempDir::new();
    let path = dir.0.join("audit.jsonl");
    let mut c = config(&[("alpha", fixture.url())]);
    c["tracing"] = json!({"endpoint": receiver.endpoint()});
    c["audit"] = json!({"file": path});
    let gate = Gate::start_checked(&c);
    let mut client = gate.open_session();
    client.headers.push(("traceparent".into(), format!("00-{T1}-{P1}-01")));
    assert_eq!(client.tool_text("alpha__echo", json!({"text": "x"})), "x");
    let calls = || -> Vec<Value> {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        text.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).filter(|r| r["event"] == "call").collect()
    };
    assert!(wait_until(Duration::from_secs(5), || !calls().is_empty()), "no call record");
    assert_eq!(calls()[0]["trace_id"], T1, "the header's trace: {:?}", calls());
}
