//! Bad input at `/mcp` and around it: every kind gets an answer that says
//! what was wrong (HTTP status, JSON-RPC code, a message naming the
//! problem), never reaches a server when it is refused at the HTTP level,
//! and leaves the gateway serving: after each case an already-open session
//! still calls a tool, `/healthz` answers and no session was created or lost.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{
    Client, Ending, Fixture, Gate, PROTOCOL, RawReply, ask, assert_balanced, chunked, config, http_request,
    raw_request, read_reply, read_until_closed, send, send_unchecked,
};

/// `max_body_bytes` of the gateway under test.
const MAX_BODY: usize = 4096;
/// How long an answer on a raw connection is waited for.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);
const UNKNOWN_SESSION: &str = "00000000000000000000000000000000";

/// Header changes of a case: `(name, Some(value))` sets a header, `(name, None)` leaves it out.
type Changes<'a> = Vec<(&'a str, Option<&'a str>)>;

/// A gateway in front of one fixture, with two open sessions: `healthy`,
/// which only ever sends good requests, and `probe`, whose id the bad
/// requests carry.
struct Bench {
    fixture: Fixture,
    gate: Gate,
    healthy: Client,
    probe: String,
    /// Requests the fixture had received after the last check.
    fixture_requests: u64,
    checks: u32,
}

impl Bench {
    fn start() -> Bench {
        let fixture = Fixture::start("alpha", &[]);
        let mut c = config(&[("alpha", fixture.url())]);
        c["max_body_bytes"] = json!(MAX_BODY);
        let gate = Gate::start(&c);
        let mut healthy = gate.client();
        healthy.initialize();
        // The first call also fetches and caches the tool list.
        assert_eq!(healthy.tool_text("alpha__echo", json!({"text": "ready"})), "ready");
        let mut probe = gate.client();
        probe.initialize();
        let probe = probe.session.clone().unwrap();
        let fixture_requests = fixture.count("requests");
        Bench { fixture, gate, healthy, probe, fixture_requests, checks: 0 }
    }

    fn addr(&self) -> SocketAddr {
        self.gate.addr
    }

    /// The headers a well-behaved client sends on a `POST` in the probe session.
    fn headers(&self) -> Vec<(String, String)> {
        vec![
            ("Content-Type".into(), "application/json".into()),
            ("Accept".into(), "application/json, text/event-stream".into()),
            ("Mcp-Session-Id".into(), self.probe.clone()),
            ("MCP-Protocol-Version".into(), PROTOCOL.into()),
        ]
    }

    /// A raw `POST /mcp` in the probe session: `Host`, then `first`, the
    /// probe session's headers and `last`; its body is `body` as it is.
    fn raw_post(&self, first: &[(&str, &str)], last: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
        let host = self.addr().to_string();
        let own = self.headers();
        let mut headers = vec![("Host", host.as_str())];
        headers.extend_from_slice(first);
        headers.extend(own.iter().map(|(n, v)| (n.as_str(), v.as_str())));
        headers.extend_from_slice(last);
        http_request("POST", "/mcp", &headers, body)
    }

    /// A request with the probe session's headers, changed by `changes`:
    /// `(name, Some(value))` sets a header, `(name, None)` leaves it out.
    fn send(&self, method: &str, path: &str, changes: &[(&str, Option<&str>)], body: &str) -> RawReply {
        let mut headers = self.headers();
        for (name, value) in changes {
            headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
            if let Some(value) = value {
                headers.push((name.to_string(), value.to_string()));
            }
        }
        let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        raw_request(self.addr(), method, path, &headers, body.as_bytes())
    }

    fn post(&self, body: &str, changes: &[(&str, Option<&str>)]) -> RawReply {
        self.send("POST", "/mcp", changes, body)
    }

    /// The gateway still serves after `case`: the healthy session calls a
    /// tool, `/healthz` answers, both sessions are still there and no other
    /// was created. Unless `may_reach_server`, the fixture saw nothing of the case.
    #[track_caller]
    fn assert_unharmed(&mut self, case: &str, may_reach_server: bool) {
        self.checks += 1;
        assert!(self.gate.is_running(), "{case}: mcpgate exited\n{}", self.gate.stderr());
        if !may_reach_server {
            let now = self.fixture.count("requests");
            assert_eq!(now, self.fixture_requests, "{case}: refused input must not reach the server");
        }
        let text = format!("still fine after check {} ({case})", self.checks);
        assert_eq!(self.healthy.tool_text("alpha__echo", json!({"text": text})), text, "{case}");
        let health = raw_request(self.addr(), "GET", "/healthz", &[], b"");
        assert_eq!((health.status, health.body.as_str()), (200, "ok\n"), "{case}: {health:?}");
        let status = self.gate.status();
        assert_eq!(status["sessions"]["live"], 2, "{case}: {}", status["sessions"]);
        assert_eq!(status["sessions"]["created"], 2, "{case}: {}", status["sessions"]);
        assert_balanced(&status);
        self.fixture_requests = self.fixture.count("requests");
    }
}

/// `reply` is a JSON-RPC error with this HTTP status and code whose message
/// contains every one of `mentions`.
#[track_caller]
fn assert_rpc_error(reply: &RawReply, status: u16, code: i64, mentions: &[&str], case: &str) -> Value {
    assert_eq!(reply.status, status, "{case}: {reply:?}");
    assert_eq!(reply.header("content-type"), Some("application/json"), "{case}: {reply:?}");
    let body = reply.json();
    assert_eq!(body["jsonrpc"], "2.0", "{case}: {body}");
    assert_eq!(body["error"]["code"], code, "{case}: {body}");
    let message = body["error"]["message"].as_str().unwrap_or_else(|| panic!("{case}: no message: {body}"));
    for m in mentions {
        assert!(message.contains(m), "{case}: the message should mention {m:?}: {message:?}");
    }
    body
}

fn request(id: i64, method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

/// A `tools/call` of `alpha__echo` whose JSON text is exactly `len` bytes.
fn echo_call_of_len(len: usize) -> (String, String) {
    let body = |text: &str| request(9, "tools/call", json!({"name": "alpha__echo", "arguments": {"text": text}}));
    let overhead = body("").len();
    let text = "x".repeat(len - overhead);
    let out = body(&text);
    assert_eq!(out.len(), len);
    (out, text)
}

/// A raw `POST /mcp` in the probe session with a chunked body cut into `chunk`-byte pieces.
fn chunked_post(bench: &Bench, body: &str, chunk: usize) -> Vec<u8> {
    let encoding = [("Transfer-Encoding", "chunked")];
    bench.raw_post(&[("Connection", "close")], &encoding, &chunked(body.as_bytes(), chunk))
}

#[test]
fn malformed_json_gets_400_parse_error_and_the_gateway_keeps_serving() {
    let mut bench = Bench::start();
    let cases = [
        ("truncated object", r#"{"jsonrpc":"2.0","id":1,"method":"#),
        ("not JSON at all", "{nope}"),
        ("trailing garbage", r#"{"jsonrpc":"2.0","id":1,"method":"ping"} x"#),
        ("empty body", ""),
        ("truncated batch", r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},"#),
    ];
    for (case, body) in cases {
        let reply = bench.post(body, &[]);
        let answer = assert_rpc_error(&reply, 400, -32700, &["parse error"], case);
        // No id applies: the member is left out (MCP's schema takes no `null` id).
        assert!(answer.get("id").is_none(), "{case}: {answer}");
        bench.assert_unharmed(case, false);
    }
    // Without a session too: the body is judged before the session.
    let reply = bench.post("{", &[("Mcp-Session-Id", None)]);
    assert_rpc_error(&reply, 400, -32700, &["parse error"], "malformed, no session");
    bench.assert_unharmed("malformed, no session", false);
}

#[test]
fn json_that_is_not_a_json_rpc_message_gets_400_invalid_request_saying_why() {
    let mut bench = Bench::start();
    let cases: [(&str, &str, &[&str]); 10] = [
        ("no method, no id", r#"{"jsonrpc":"2.0"}"#, &["`method` is missing"]),
        ("a number", "42", &["invalid JSON-RPC message", "integer `42`"]),
        ("a string", r#""ping""#, &["invalid JSON-RPC message"]),
        ("null", "null", &["invalid JSON-RPC message"]),
        ("jsonrpc 1.0", r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#, &["`jsonrpc` must be \"2.0\""]),
        ("jsonrpc missing", r#"{"id":1,"method":"ping"}"#, &["`jsonrpc` must be \"2.0\""]),
        ("jsonrpc a number", r#"{"jsonrpc":2.0,"id":1,"method":"ping"}"#, &["invalid JSON-RPC message"]),
        ("fractional id", r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#, &["`id` must be a string or an integer"]),
        ("object id", r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#, &["`id` must be a string or an integer"]),
        (
            "response with result and error",
            r#"{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"x"}}"#,
            &["exactly one of `result` and `error`"],
        ),
    ];
    for (case, body, mentions) in cases {
        let reply = bench.post(body, &[]);
        assert_rpc_error(&reply, 400, -32600, mentions, case);
        bench.assert_unharmed(case, false);
    }
}

#[test]
fn unknown_method_gets_method_not_found_naming_the_method() {
    let mut bench = Bench::start();
    let reply = bench.post(&request(41, "tools/frobnicate", json!({})), &[]);
    let answer = assert_rpc_error(&reply, 200, -32601, &["`tools/frobnicate`"], "unknown method");
    assert_eq!(answer["id"], 41, "the error answers the request: {answer}");
    bench.assert_unharmed("unknown method", false);
    // A notification has no answer to carry an error: it is accepted and ignored.
    let note = json!({"jsonrpc": "2.0", "method": "notifications/frobnicated"}).to_string();
    let reply = bench.post(&note, &[]);
    assert_eq!((reply.status, reply.body.as_str()), (202, ""), "unknown notification: {reply:?}");
    bench.assert_unharmed("unknown notification", false);
}

#[test]
fn bad_params_get_invalid_params_saying_what_is_wrong() {
    let mut bench = Bench::start();
    let cases: [(&str, String, &[&str]); 8] = [
        ("tools/call without name", request(1, "tools/call", json!({"arguments": {}})), &["tools/call needs `name`"]),
        ("tools/call with a numeric name", request(2, "tools/call", json!({"name": 5})), &["tools/call needs `name`"]),
        ("tools/call with params a string", request(3, "tools/call", json!("echo")), &["`tools/call`", "an object"]),
        ("tools/list with params an array", request(4, "tools/list", json!([1, 2])), &["`tools/list`", "an object"]),
        ("tools/list with a numeric cursor", request(5, "tools/list", json!({"cursor": 5})), &["`cursor`"]),
        ("prompts/get without name", request(6, "prompts/get", json!({})), &["prompts/get needs `name`"]),
        ("resources/read without uri", request(7, "resources/read", json!({})), &["resources/read needs `uri`"]),
        ("ping with params an array", request(8, "ping", json!([])), &["`ping`", "an object"]),
    ];
    for (case, body, mentions) in cases {
        let reply = bench.post(&body, &[]);
        let answer = assert_rpc_error(&reply, 200, -32602, mentions, case);
        assert!(answer["id"].is_i64(), "{case}: the error answers the request: {answer}");
        bench.assert_unharmed(case, false);
    }
    // A refused initialize opens no session (assert_unharmed counts them).
    let no_version = json!({"capabilities": {}, "clientInfo": {"name": "t", "version": "1"}});
    let init_cases: [(&str, Value, &[&str]); 3] = [
        ("initialize without protocolVersion", no_version, &["`protocolVersion`"]),
        ("initialize with params an array", json!([PROTOCOL]), &["`initialize`", "an object"]),
        (
            "initialize with capabilities a string",
            json!({"protocolVersion": PROTOCOL, "capabilities": "all"}),
            &["`capabilities` must be an object"],
        ),
    ];
    for (case, params, mentions) in init_cases {
        let reply =
            bench.post(&request(1, "initialize", params), &[("Mcp-Session-Id", None), ("MCP-Protocol-Version", None)]);
        assert_rpc_error(&reply, 200, -32602, mentions, case);
        assert_eq!(reply.header("mcp-session-id"), None, "{case}: no session may be created: {reply:?}");
        bench.assert_unharmed(case, false);
    }
    // A name given twice, plainly or escaped: params go on as written, so
    // the server might read the first where mcpgate read the last.
    for (case, params) in [
        ("tools/call naming two tools", r#"{"name":"alpha__add","arguments":{"text":"a"},"name":"alpha__echo"}"#),
        ("tools/call naming one escaped", r#"{"name":"alpha__add","n\u0061me":"alpha__echo","arguments":{}}"#),
    ] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{params}}}"#);
        let reply = bench.post(&body, &[]);
        assert_rpc_error(&reply, 200, -32602, &["`tools/call`", "member `name` given twice"], case);
        bench.assert_unharmed(case, false);
    }
}

#[test]
fn unknown_tool_or_prompt_gets_invalid_params_naming_it() {
    let mut bench = Bench::start();
    let cases = [
        ("unknown prefixed tool", "tools/call", "alpha__nope", "unknown tool `alpha__nope`"),
        ("tool name without its prefix", "tools/call", "echo", "unknown tool `echo`"),
        ("tool of an unknown server", "tools/call", "gamma__echo", "unknown tool `gamma__echo`"),
        ("unknown prompt", "prompts/get", "alpha__nope", "unknown prompt `alpha__nope`"),
    ];
    for (case, method, name, mention) in cases {
        let reply = bench.post(&request(3, method, json!({"name": name, "arguments": {}})), &[]);
        assert_rpc_error(&reply, 200, -32602, &[mention], case);
        // Looking the name up may list the server's tools: that reaches it.
        bench.assert_unharmed(case, true);
    }
}

#[test]
fn requests_without_a_live_session_get_400_or_404() {
    let mut bench = Bench::start();
    let ping = request(17, "ping", json!({}));
    let reply = bench.post(&ping, &[("Mcp-Session-Id", None)]);
    let answer = assert_rpc_error(&reply, 400, -32600, &["Mcp-Session-Id header is required"], "no session id");
    assert_eq!(answer["id"], 17, "{answer}");
    bench.assert_unharmed("no session id", false);

    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    let reply = bench.post(&note, &[("Mcp-Session-Id", None)]);
    assert_rpc_error(&reply, 400, -32600, &["Mcp-Session-Id"], "notification without session id");
    bench.assert_unharmed("notification without session id", false);

    let reply = bench.post(&ping, &[("Mcp-Session-Id", Some(UNKNOWN_SESSION))]);
    let answer = assert_rpc_error(&reply, 404, -32600, &["unknown or ended session"], "unknown session id");
    assert_eq!(answer["id"], 17, "{answer}");
    bench.assert_unharmed("unknown session id", false);

    let reply = bench.post(&ping, &[("Mcp-Session-Id", Some(""))]);
    assert_rpc_error(&reply, 404, -32600, &["unknown or ended session"], "empty session id");
    bench.assert_unharmed("empty session id", false);
}

#[test]
fn unsupported_protocol_version_header_gets_400_naming_the_version() {
    let mut bench = Bench::start();
    let ping = request(5, "ping", json!({}));
    let reply = bench.post(&ping, &[("MCP-Protocol-Version", Some("1999-01-01"))]);
    // -32022: mcpgate's "unsupported protocol version", with the versions it speaks as data.
    let answer = assert_rpc_error(&reply, 400, -32022, &["`1999-01-01`", PROTOCOL], "unsupported version on POST");
    assert_eq!(answer["id"], 5, "{answer}");
    assert_eq!(answer["error"]["data"]["requested"], "1999-01-01", "{answer}");
    assert!(answer["error"]["data"]["supported"].as_array().unwrap().contains(&json!(PROTOCOL)), "{answer}");
    bench.assert_unharmed("unsupported version on POST", false);

    let get = [("Accept", Some("text/event-stream")), ("MCP-Protocol-Version", Some("2.0"))];
    let reply = bench.send("GET", "/mcp", &get, "");
    assert_rpc_error(&reply, 400, -32022, &["`2.0`"], "unsupported version on GET");
    bench.assert_unharmed("unsupported version on GET", false);

    // The same request with a supported version works: the header was the only problem.
    let reply = bench.post(&ping, &[]);
    assert_eq!((reply.status, reply.json()["result"].clone()), (200, json!({})), "{reply:?}");
}

#[test]
fn post_needs_both_accept_types_and_a_json_content_type() {
    let mut bench = Bench::start();
    let ping = request(1, "ping", json!({}));
    let accept_cases = [
        ("Accept without text/event-stream", Some("application/json")),
        ("Accept without application/json", Some("text/event-stream")),
        ("no Accept", None),
    ];
    for (case, accept) in accept_cases {
        let reply = bench.post(&ping, &[("Accept", accept)]);
        assert_rpc_error(&reply, 406, -32600, &["Accept", "application/json", "text/event-stream"], case);
        bench.assert_unharmed(case, false);
    }
    let type_cases = [
        ("Content-Type text/plain", Some("text/plain")),
        ("Content-Type form", Some("application/x-www-form-urlencoded")),
        ("no Content-Type", None),
    ];
    for (case, content_type) in type_cases {
        let reply = bench.post(&ping, &[("Content-Type", content_type)]);
        assert_rpc_error(&reply, 415, -32600, &["Content-Type must be application/json"], case);
        bench.assert_unharmed(case, false);
    }
    // Parameters and wildcards are fine.
    let reply =
        bench.post(&ping, &[("Content-Type", Some("application/json; charset=utf-8")), ("Accept", Some("*/*"))]);
    assert_eq!((reply.status, reply.json()["result"].clone()), (200, json!({})), "{reply:?}");
}

#[test]
fn body_over_max_body_bytes_gets_413_with_content_length_or_chunked() {
    let mut bench = Bench::start();
    let mentions = ["larger than 4096 bytes", "max_body_bytes"];

    let (at_limit, text) = echo_call_of_len(MAX_BODY);
    let reply = bench.post(&at_limit, &[]);
    assert_eq!(reply.status, 200, "a body of exactly max_body_bytes is served: {reply:?}");
    assert_eq!(reply.json()["result"]["content"][0]["text"], text.as_str());
    bench.assert_unharmed("body at the limit", true);

    let (over, _) = echo_call_of_len(MAX_BODY + 1);
    let reply = bench.post(&over, &[]);
    assert_rpc_error(&reply, 413, -32600, &mentions, "Content-Length one over");
    bench.assert_unharmed("Content-Length one over", false);

    let (big, _) = echo_call_of_len(20_000);
    let reply = bench.post(&big, &[]);
    assert_rpc_error(&reply, 413, -32600, &mentions, "Content-Length 20000");
    bench.assert_unharmed("Content-Length 20000", false);

    // Chunked: no length up front, so the limit applies while reading.
    let (small, text) = echo_call_of_len(2000);
    let reply = ask(bench.addr(), &chunked_post(&bench, &small, 700), ANSWER_WITHIN).expect("an answer");
    assert_eq!(reply.status, 200, "a chunked body under the limit is served: {reply:?}");
    assert_eq!(reply.json()["result"]["content"][0]["text"], text.as_str());
    bench.assert_unharmed("chunked under the limit", true);

    let (over, _) = echo_call_of_len(6000);
    let reply = ask(bench.addr(), &chunked_post(&bench, &over, 1000), ANSWER_WITHIN).expect("an answer");
    assert_rpc_error(&reply, 413, -32600, &mentions, "chunked over the limit");
    bench.assert_unharmed("chunked over the limit", false);

    // A client that waits for `100 Continue` hears 413 at once instead.
    let head = bench.raw_post(&[], &[("Content-Length", "20000"), ("Expect", "100-continue")], b"");
    let mut stream = send(bench.addr(), &head);
    let started = Instant::now();
    let reply = read_reply(&mut stream, ANSWER_WITHIN).expect("an answer without sending the body");
    assert!(started.elapsed() < Duration::from_secs(1), "took {:?}", started.elapsed());
    assert_rpc_error(&reply, 413, -32600, &mentions, "Expect: 100-continue over the limit");
    drop(stream);
    bench.assert_unharmed("Expect: 100-continue over the limit", false);
}

#[test]
fn a_413_ends_the_connection_and_answers_nothing_more_on_it() {
    let bench = Bench::start();
    let (big, _) = echo_call_of_len(5000);
    let mut stream = send(bench.addr(), &bench.raw_post(&[("Connection", "keep-alive")], &[], big.as_bytes()));
    let reply = read_reply(&mut stream, ANSWER_WITHIN).expect("an answer");
    assert_eq!((reply.status, reply.header("connection")), (413, Some("close")), "{reply:?}");
    // mcpgate closes the connection after a 413: nothing more is answered on
    // it, and the answer says so (`Connection: close`).
    let (rest, ending) = read_until_closed(&mut stream, Duration::from_secs(3));
    assert_eq!((rest.as_str(), ending), ("", Ending::Closed));
}

#[test]
fn json_rpc_batch_in_a_2025_11_25_session_gets_400() {
    let mut bench = Bench::start();
    let batch = format!("[{},{}]", request(1, "ping", json!({})), request(2, "tools/list", json!({})));
    let reply = bench.post(&batch, &[]);
    assert_rpc_error(&reply, 400, -32600, &["batches were removed", PROTOCOL], "batch");
    bench.assert_unharmed("batch", false);
    let reply = bench.post("[]", &[]);
    assert_rpc_error(&reply, 400, -32600, &["batches"], "empty batch");
    bench.assert_unharmed("empty batch", false);
    let reply = bench.post(&batch, &[("Mcp-Session-Id", None)]);
    assert_rpc_error(&reply, 400, -32600, &["Mcp-Session-Id"], "batch without session");
    bench.assert_unharmed("batch without session", false);
}

#[test]
fn get_mcp_needs_event_stream_accept_http_1_1_and_a_live_session() {
    let mut bench = Bench::start();
    let sse = Some("text/event-stream");
    let cases: [(&str, Changes, u16, &[&str]); 5] = [
        ("GET Accept application/json", vec![("Accept", Some("application/json"))], 406, &["text/event-stream"]),
        ("GET without Accept", vec![("Accept", None)], 406, &["text/event-stream"]),
        ("GET without session", vec![("Accept", sse), ("Mcp-Session-Id", None)], 400, &["Mcp-Session-Id"]),
        (
            "GET unknown session",
            vec![("Accept", sse), ("Mcp-Session-Id", Some(UNKNOWN_SESSION))],
            404,
            &["unknown or ended session"],
        ),
        ("GET empty session", vec![("Accept", sse), ("Mcp-Session-Id", Some(""))], 404, &["unknown or ended session"]),
    ];
    for (case, changes, status, mentions) in cases {
        let reply = bench.send("GET", "/mcp", &changes, "");
        assert_rpc_error(&reply, status, -32600, mentions, case);
        bench.assert_unharmed(case, false);
    }
    let head = format!(
        "GET /mcp HTTP/1.0\r\nHost: {}\r\nAccept: text/event-stream\r\nMcp-Session-Id: {}\r\n\r\n",
        bench.addr(),
        bench.probe
    );
    let reply = ask(bench.addr(), head.as_bytes(), ANSWER_WITHIN).expect("an answer");
    assert_rpc_error(&reply, 400, -32600, &["HTTP/1.1"], "GET stream over HTTP/1.0");
    bench.assert_unharmed("GET stream over HTTP/1.0", false);
    assert_eq!(bench.gate.status()["threads"]["streams"], 0, "no refused GET may have started a stream");
}

#[test]
fn delete_of_an_unknown_or_unnamed_session_gets_404_or_400_and_ends_nothing() {
    let mut bench = Bench::start();
    let reply = bench.send("DELETE", "/mcp", &[("Mcp-Session-Id", Some(UNKNOWN_SESSION))], "");
    assert_rpc_error(&reply, 404, -32600, &["unknown or ended session"], "DELETE unknown session");
    bench.assert_unharmed("DELETE unknown session", false);
    let reply = bench.send("DELETE", "/mcp", &[("Mcp-Session-Id", None)], "");
    assert_rpc_error(&reply, 400, -32600, &["Mcp-Session-Id"], "DELETE without session");
    bench.assert_unharmed("DELETE without session", false);
    assert_eq!(bench.fixture.count("delete"), 0, "no downstream session was closed");
    let status = bench.gate.status();
    assert_eq!(status["sessions"]["deleted_by_client"], 0, "{}", status["sessions"]);
}

#[test]
fn other_methods_get_405_with_allow_and_unknown_paths_get_404() {
    let mut bench = Bench::start();
    for method in ["PUT", "PATCH", "OPTIONS"] {
        let case = format!("{method} /mcp");
        let reply = bench.send(method, "/mcp", &[], "{}");
        assert_rpc_error(&reply, 405, -32600, &["use GET, POST or DELETE"], &case);
        assert_eq!(reply.header("allow"), Some("GET, POST, DELETE"), "{case}: {reply:?}");
        bench.assert_unharmed(&case, false);
    }
    for path in ["/healthz", "/status", "/status.json"] {
        let case = format!("POST {path}");
        let reply = bench.send("POST", path, &[], "{}");
        assert_eq!((reply.status, reply.header("allow")), (405, Some("GET")), "{case}: {reply:?}");
        assert!(reply.body.contains("use GET"), "{case}: {reply:?}");
        bench.assert_unharmed(&case, false);
    }
    for path in ["/nope", "/mcp/extra", "/MCP", "/"] {
        let case = format!("GET {path}");
        let reply = bench.send("GET", path, &[], "");
        assert_eq!(reply.status, 404, "{case}: {reply:?}");
        assert!(reply.body.contains(&format!("no such path `{path}`")), "{case}: {reply:?}");
        assert!(reply.body.contains("/mcp"), "{case}: the answer names what is served: {reply:?}");
        bench.assert_unharmed(&case, false);
    }
}

#[test]
fn a_request_head_mcpgate_refuses_gets_an_error_and_only_its_connection_closes() {
    let mut bench = Bench::start();
    let follow_up = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    let cases: [(&str, &[u8], &str); 9] = [
        (
            "a header mcpgate reads that is not UTF-8",
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nOrigin: caf\xe9\r\n\r\n",
            "400",
        ),
        ("HTTP/2.0 request line", b"GET /healthz HTTP/2.0\r\n\r\n", "505"),
        ("TLS handshake bytes", b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\r\n\r\n", "400"),
        ("header line without a colon", b"GET /healthz HTTP/1.1\r\nHost: x\r\nNoColonHere\r\n\r\n", "400"),
        ("bare LF line ends", b"GET /healthz HTTP/1.1\nHost: x\n\n", "400"),
        ("garbage request line", b"HELLO\r\n\r\n", "400"),
        (
            "Transfer-Encoding and Content-Length",
            b"POST /mcp HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
            "400",
        ),
        ("unknown transfer coding", b"POST /mcp HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", "501"),
        ("unknown expectation", b"GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\n\r\n", "417"),
    ];
    for (case, bytes, status) in cases {
        // A good request right behind the bad one must not be served on this connection.
        let mut sent = bytes.to_vec();
        sent.extend_from_slice(follow_up.as_bytes());
        let mut stream = send_unchecked(bench.addr(), &sent);
        let started = Instant::now();
        let (text, ending) = read_until_closed(&mut stream, Duration::from_secs(4));
        assert_ne!(ending, Ending::TimedOut, "{case}: the connection must be closed, got {text:?}");
        assert!(started.elapsed() < Duration::from_secs(2), "{case}: closed only after {:?}", started.elapsed());
        assert!(text.starts_with(&format!("HTTP/1.1 {status} ")), "{case}: {text:?}");
        assert_eq!(text.matches("HTTP/1.1 ").count(), 1, "{case}: only the error is answered: {text:?}");
        bench.assert_unharmed(case, false);
    }
}

#[test]
fn an_invalid_content_length_gets_400_and_the_connection_closes() {
    let mut bench = Bench::start();
    // What follows the head is the declared body; it looks like a request.
    let body = "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n";
    for (value, status) in [("-5", 400), ("+5", 400), ("12abc", 400), ("0x10", 400), ("99999999999999999999999", 413)] {
        let case = format!("Content-Length: {value}");
        let head = format!("GET /healthz HTTP/1.1\r\nHost: {}\r\nContent-Length: {value}\r\n\r\n", bench.addr());
        let mut stream = send(bench.addr(), format!("{head}{body}").as_bytes());
        let (text, ending) = read_until_closed(&mut stream, Duration::from_secs(4));
        assert_ne!(ending, Ending::TimedOut, "{case}: the connection must be closed, got {text:?}");
        assert_eq!(text.matches("HTTP/1.1 ").count(), 1, "{case}: the body was served as a request: {text:?}");
        assert!(text.starts_with(&format!("HTTP/1.1 {status} ")), "{case}: {text:?}");
        bench.assert_unharmed(&case, false);
    }
}

#[test]
fn wrong_method_on_reload_gets_405_with_allow_post() {
    let mut bench = Bench::start();
    for method in ["GET", "PUT"] {
        let case = format!("{method} /reload");
        let reply = bench.send(method, "/reload", &[], "");
        assert_eq!((reply.status, reply.header("allow")), (405, Some("POST")), "{case}: {reply:?}");
        bench.assert_unharmed(&case, false);
    }
}
