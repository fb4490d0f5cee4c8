//! The fixture's 2026-07-28 era (`mcp-fixture --modern`, and beside the session era with
//! `--both-eras`), checked directly over real HTTP on 127.0.0.1 (no mcpgate in between), so
//! that the gateway's tests of the era stand on a server known to speak its wire as the Python
//! SDK `mcp` 2.3.0 does: the ladder, `server/discover`, results with `resultType` and cache
//! hints, SSE answers, input_required round trips, `subscriptions/listen`, and cancellation by
//! closing the answer.

mod support;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Client, Fixture, http_agent, wait_until};

const VERSION: &str = "2026-07-28";
const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
const META_SUBSCRIPTION: &str = "io.modelcontextprotocol/subscriptionId";
const ACCEPT: &str = "application/json, text/event-stream";

/// Longest wait for something the fixture should do.
const PATIENCE: Duration = Duration::from_secs(5);

/// The answer to one POST: a JSON body, or the messages of an SSE answer (the last one as
/// `body`, the others as `events`).
#[derive(Debug)]
struct Answer {
    status: u16,
    content_type: String,
    headers: Vec<(String, String)>,
    events: Vec<Value>,
    body: Value,
}

impl Answer {
    fn result(&self) -> &Value {
        assert!(self.body.get("error").is_none() && self.status == 200, "expected a result, got {self:?}");
        &self.body["result"]
    }

    fn error_code(&self) -> i64 {
        self.body["error"]["code"].as_i64().unwrap_or_else(|| panic!("expected an error, got {self:?}"))
    }

    /// The HTTP status and the JSON-RPC error code.
    fn refusal(&self) -> (u16, i64) {
        (self.status, self.error_code())
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    fn text(&self) -> String {
        let result = self.result();
        result["content"][0]["text"].as_str().unwrap_or_else(|| panic!("no text in {result}")).to_owned()
    }
}

/// The `data` of the complete SSE events in `text` (comments and empty events left out), and
/// how many bytes they took.
fn sse_events(text: &str) -> (Vec<Value>, usize) {
    let mut events = Vec::new();
    let mut used = 0;
    while let Some(end) = text[used..].find("\n\n") {
        let block = &text[used..used + end];
        used += end + 2;
        let data: Vec<&str> =
            block.lines().filter_map(|line| line.strip_prefix("data:")).map(str::trim_start).collect();
        if !data.is_empty() {
            let data = data.join("\n");
            events.push(serde_json::from_str(&data).unwrap_or_else(|e| panic!("SSE data is not JSON ({e}): {data}")));
        }
    }
    (events, used)
}

/// A client of the 2026-07-28 era: every request carries its own envelope and headers.
struct Modern {
    url: String,
    agent: ureq::Agent,
    next_id: u64,
    capabilities: Value,
    client_info: Option<Value>,
    log_level: Option<&'static str>,
}

impl Modern {
    fn new(fixture: &Fixture) -> Modern {
        Modern {
            url: fixture.url(),
            agent: http_agent(Some(Duration::from_secs(30))),
            next_id: 1,
            capabilities: json!({}),
            client_info: Some(json!({"name": "fixture_modern", "version": "1"})),
            log_level: None,
        }
    }

    fn with_capabilities(fixture: &Fixture, capabilities: Value) -> Modern {
        Modern { capabilities, ..Modern::new(fixture) }
    }

    fn meta(&self) -> Value {
        let mut meta = json!({META_VERSION: VERSION, META_CAPABILITIES: self.capabilities});
        if let Some(info) = &self.client_info {
            meta[META_CLIENT_INFO] = info.clone();
        }
        if let Some(level) = self.log_level {
            meta[META_LOG_LEVEL] = json!(level);
        }
        meta
    }

    /// Request `method` with this client's `_meta` merged into `params`, and the headers a
    /// conforming client sends with it.
    fn prepare(&mut self, method: &str, mut params: Value) -> (Value, Vec<(String, String)>) {
        let id = self.next_id;
        self.next_id += 1;
        let mut meta = self.meta();
        if let Some(Value::Object(extra)) = params.get("_meta") {
            for (key, value) in extra {
                meta[key] = value.clone();
            }
        }
        params["_meta"] = meta;
        let mut headers = vec![("MCP-Protocol-Version".into(), VERSION.into()), ("Mcp-Method".into(), method.into())];
        let named = match method {
            "tools/call" | "prompts/get" => params["name"].as_str(),
            "resources/read" => params["uri"].as_str(),
            _ => None,
        };
        if let Some(named) = named {
            headers.push(("Mcp-Name".into(), header_value(named)));
        }
        (json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}), headers)
    }

    fn request(&mut self, method: &str, params: Value) -> Answer {
        self.request_with(method, params, &[])
    }

    /// [`Modern::request`] with `extra` headers too.
    fn request_with(&mut self, method: &str, params: Value, extra: &[(&str, &str)]) -> Answer {
        let (body, headers) = self.prepare(method, params);
        let mut all: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        all.extend_from_slice(extra);
        self.post(body.to_string().as_bytes(), &all)
    }

    fn call_tool(&mut self, name: &str, arguments: Value) -> Answer {
        self.request("tools/call", json!({"name": name, "arguments": arguments}))
    }

    fn tool_text(&mut self, name: &str, arguments: Value) -> String {
        self.call_tool(name, arguments).text()
    }

    /// POSTs `body` with `Content-Type`, `Accept` (unless `headers` has one) and `headers`.
    fn post(&self, body: &[u8], headers: &[(&str, &str)]) -> Answer {
        let mut request = self.agent.post(&self.url).header("Content-Type", "application/json");
        if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("accept")) {
            request = request.header("Accept", ACCEPT);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send(body).unwrap_or_else(|e| panic!("POST {}: {e}", self.url));
        answer_of(response)
    }
}

/// A header value as a client sends it: verbatim when it is plain ASCII, else base64-wrapped.
fn header_value(value: &str) -> String {
    if value.bytes().all(|b| (0x20..0x7f).contains(&b)) && value.trim() == value {
        return value.to_owned();
    }
    format!("=?base64?{}?=", base64(value.as_bytes()))
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, &b)| n | (u32::from(b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn answer_of(response: ureq::http::Response<ureq::Body>) -> Answer {
    let status = response.status().as_u16();
    let headers: Vec<(String, String)> = response
        .headers()
        .iter()
        .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap_or_default().to_owned()))
        .collect();
    let content_type = response.body().mime_type().unwrap_or_default().to_owned();
    let text = response.into_body().read_to_string().unwrap_or_default();
    if content_type == "text/event-stream" {
        let (mut events, _) = sse_events(&text);
        let body = events.pop().unwrap_or(Value::Null);
        return Answer { status, content_type, headers, events, body };
    }
    let body = if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(Value::String(text)) };
    Answer { status, content_type, headers, events: Vec::new(), body }
}

/// A POST whose SSE answer is read as it comes, on a raw HTTP/1.0 connection (so the stream is
/// plain bytes, and dropping it closes the connection: the way a client cancels).
struct RawStream {
    stream: TcpStream,
    buffer: Vec<u8>,
    /// Where the body starts in `buffer`, once the head is in.
    body_at: Option<usize>,
    /// Body bytes already handed out as events.
    used: usize,
}

impl RawStream {
    fn post(fixture: &Fixture, body: &Value, headers: &[(String, String)]) -> RawStream {
        let body = body.to_string();
        let mut request = format!(
            "POST /mcp HTTP/1.0\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
            fixture.addr,
            body.len()
        );
        if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("accept")) {
            request.push_str(&format!("Accept: {ACCEPT}\r\n"));
        }
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        request.push_str(&body);
        let mut stream = TcpStream::connect(&fixture.addr).expect("connect to the fixture");
        stream.write_all(request.as_bytes()).expect("send the request");
        RawStream { stream, buffer: Vec::new(), body_at: None, used: 0 }
    }

    /// Reads more, waiting at most until `deadline`; false once nothing more can come.
    fn read_more(&mut self, deadline: Instant) -> bool {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || self.stream.set_read_timeout(Some(left)).is_err() {
            return false;
        }
        let mut chunk = [0u8; 8192];
        match self.stream.read(&mut chunk) {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buffer.extend_from_slice(&chunk[..n]);
                true
            }
        }
    }

    /// The response head (status line and headers).
    fn head(&mut self) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(at) = self.buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                self.body_at = Some(at + 4);
                return String::from_utf8_lossy(&self.buffer[..at]).into_owned();
            }
            assert!(
                self.read_more(deadline),
                "no response head within 5 s: {:?}",
                String::from_utf8_lossy(&self.buffer)
            );
        }
    }

    /// The next SSE message, if one comes within `timeout`.
    fn next(&mut self, timeout: Duration) -> Option<Value> {
        if self.body_at.is_none() {
            let head = self.head();
            assert!(head.contains("text/event-stream"), "not an SSE answer: {head}");
        }
        let deadline = Instant::now() + timeout;
        loop {
            let body_at = self.body_at.unwrap_or_default();
            let text = String::from_utf8_lossy(&self.buffer[body_at + self.used..]).into_owned();
            let (events, used) = sse_events(&text);
            if let Some(first) = events.into_iter().next() {
                // Only the first event's bytes are consumed; the rest is read again next time.
                let (_, one) = sse_events(&text[..first_event_end(&text)]);
                self.used += one;
                return Some(first);
            }
            self.used += used;
            if !self.read_more(deadline) {
                return None;
            }
        }
    }

    /// Closes the connection, as a client going away does.
    fn close(self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

/// The end of the first SSE block of `text` that carries data.
fn first_event_end(text: &str) -> usize {
    let mut at = 0;
    while let Some(end) = text[at..].find("\n\n") {
        let block = &text[at..at + end];
        at += end + 2;
        if block.lines().any(|line| line.starts_with("data:")) {
            return at;
        }
    }
    at
}

fn start(args: &[&str]) -> (Fixture, Modern) {
    let mut all = vec!["--modern"];
    all.extend_from_slice(args);
    let fixture = Fixture::start("modern", &all);
    let client = Modern::new(&fixture);
    (fixture, client)
}

fn server_info_of(result: &Value) -> &Value {
    &result["_meta"][META_SERVER_INFO]
}

#[test]
fn discover_names_the_versions_the_capabilities_and_the_server() {
    let (fixture, mut client) = start(&[]);
    let answer = client.request("server/discover", json!({}));
    assert_eq!(answer.content_type, "application/json", "{answer:?}");
    assert_eq!(answer.header("mcp-session-id"), None, "no sessions in this era");
    let result = answer.result();
    assert_eq!(result["supportedVersions"], json!([VERSION]), "{result}");
    assert_eq!(result["resultType"], "complete", "{result}");
    assert_eq!(result["ttlMs"], 60_000, "{result}");
    assert_eq!(result["cacheScope"], "public", "{result}");
    assert_eq!(result["instructions"], "fixture modern", "{result}");
    assert_eq!(*server_info_of(result), json!({"name": "modern", "version": "1.0.0"}), "{result}");
    let capabilities = &result["capabilities"];
    assert_eq!(capabilities["tools"], json!({"listChanged": true}), "{result}");
    assert_eq!(capabilities["resources"], json!({"subscribe": true, "listChanged": true}), "{result}");
    for capability in ["prompts", "logging", "completions"] {
        assert!(capabilities[capability].is_object(), "no {capability}: {result}");
    }
    assert!(result.get("serverInfo").is_none() && result.get("protocolVersion").is_none(), "{result}");
    let stats = fixture.stats();
    assert_eq!((stats["discover"].as_u64(), stats["era"].as_str()), (Some(1), Some("modern")), "{stats}");
    assert_eq!(stats["modern_requests"], json!({"server/discover": 1}), "{stats}");
}

#[test]
fn every_result_carries_its_type_and_the_cacheable_ones_their_hints() {
    let (_fixture, mut client) = start(&["--page-size", "4", "--ttl-ms", "2500", "--cache-scope", "private"]);
    // tools/list, walked over its pages.
    let mut names = Vec::new();
    let mut params = json!({});
    for _ in 0..10 {
        let answer = client.request("tools/list", params.clone());
        let result = answer.result();
        assert_eq!(
            (&result["resultType"], &result["ttlMs"], &result["cacheScope"]),
            (&json!("complete"), &json!(2500), &json!("private"))
        );
        assert_eq!(server_info_of(result)["name"], "modern", "{result}");
        names.extend(
            result["tools"].as_array().into_iter().flatten().filter_map(|t| t["name"].as_str()).map(str::to_owned),
        );
        match result.get("nextCursor").and_then(Value::as_str) {
            Some(cursor) => params = json!({"cursor": cursor}),
            None => break,
        }
    }
    for tool in ["echo", "add", "whoami", "slow", "sample", "elicit", "elicit_twice", "roots", "notify", "log"] {
        assert!(names.contains(&tool.to_owned()), "{tool} missing from {names:?}");
    }
    for gone in ["trickle", "ignore_cancel", "flood", "research"] {
        assert!(!names.contains(&gone.to_owned()), "{gone} is of the session era: {names:?}");
    }
    for (method, key) in [
        ("prompts/list", "prompts"),
        ("resources/list", "resources"),
        ("resources/templates/list", "resourceTemplates"),
    ] {
        let answer = client.request(method, json!({}));
        let result = answer.result();
        assert!(result[key].as_array().is_some_and(|items| !items.is_empty()), "{method}: {result}");
        assert_eq!(
            (&result["resultType"], &result["ttlMs"], &result["cacheScope"]),
            (&json!("complete"), &json!(2500), &json!("private")),
            "{method}"
        );
    }
    let read = client.request("resources/read", json!({"uri": "fixture://modern/readme"}));
    let result = read.result();
    assert_eq!(result["contents"][0]["text"], "readme of modern", "{result}");
    assert_eq!((&result["ttlMs"], &result["resultType"]), (&json!(2500), &json!("complete")), "{result}");
    // Not cacheable: a type, no hints.
    let prompt = client.request("prompts/get", json!({"name": "greet", "arguments": {"name": "Ada"}}));
    let result = prompt.result();
    assert_eq!(result["messages"][0]["content"]["text"], "Hello, Ada!", "{result}");
    assert_eq!(result["resultType"], "complete", "{result}");
    assert!(result.get("ttlMs").is_none() && result.get("cacheScope").is_none(), "{result}");
    let completion = client.request(
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "greet"}, "argument": {"name": "name", "value": "a"}}),
    );
    assert_eq!(completion.result()["completion"]["values"], json!(["alice", "bob"]));
    assert_eq!(completion.result()["resultType"], "complete");
    let call = client.call_tool("echo", json!({"text": "hi"}));
    assert_eq!((&call.result()["resultType"], call.result().get("ttlMs")), (&json!("complete"), None));
}

/// A request body with a good envelope, and the headers that go with it.
fn envelope_request(method: &str, params: Value) -> (Value, Vec<(String, String)>) {
    let mut client = Modern {
        url: String::new(),
        agent: http_agent(None),
        next_id: 7,
        capabilities: json!({}),
        client_info: None,
        log_level: None,
    };
    client.prepare(method, params)
}

fn headers_of(headers: &[(String, String)]) -> Vec<(&str, &str)> {
    headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect()
}

#[test]
fn the_ladder_answers_each_rung_in_order() {
    let (fixture, client) = start(&[]);
    let post = |body: &str, headers: &[(&str, &str)]| client.post(body.as_bytes(), headers);
    let version = ("MCP-Protocol-Version", VERSION);

    // Accept must take both JSON and SSE.
    let (body, headers) = envelope_request("tools/list", json!({}));
    let mut json_only = headers_of(&headers);
    json_only.push(("Accept", "application/json"));
    assert_eq!(post(&body.to_string(), &json_only).status, 406);
    // Not JSON; not one request.
    let answer = post("{not json", &[version]);
    assert_eq!((answer.refusal(), &answer.body["id"]), ((400, -32700), &Value::Null));
    let batch = format!("[{body}]");
    assert_eq!(post(&batch, &[version]).refusal(), (400, -32600));
    assert_eq!(post(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, &[version]).refusal(), (400, -32600));
    assert_eq!(post(r#"{"jsonrpc":"2.0","id":true,"method":"tools/list"}"#, &[version]).refusal(), (400, -32600));
    // A notification is acknowledged and dropped, when its version is this era's.
    let cancel = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#;
    let accepted = post(cancel, &[version]);
    assert_eq!((accepted.status, &accepted.body), (202, &Value::Null));
    let refused = post(cancel, &[("MCP-Protocol-Version", "2025-11-25")]);
    assert_eq!(refused.refusal(), (400, -32022));
    assert_eq!(refused.body["error"]["data"], json!({"supported": [VERSION], "requested": "2025-11-25"}));

    // Routing headers sent twice.
    let mut twice = headers_of(&headers);
    twice.push(("Mcp-Method", "tools/list"));
    let answer = post(&body.to_string(), &twice);
    assert_eq!((answer.refusal(), &answer.body["id"]), ((400, -32020), &json!(7)), "the id is known by now");
    // The envelope: missing, or missing a required key (clientInfo is optional).
    let bare = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
    assert_eq!(post(&bare.to_string(), &headers_of(&headers)).refusal(), (400, -32602));
    let mut partial = body.clone();
    partial["params"]["_meta"].as_object_mut().map(|m| m.remove(META_CAPABILITIES));
    let answer = post(&partial.to_string(), &headers_of(&headers));
    assert_eq!(answer.refusal(), (400, -32602));
    assert!(answer.body["error"]["message"].as_str().unwrap_or_default().contains(META_CAPABILITIES), "{answer:?}");
    // ...which comes before the headers: no headers at all is still -32602.
    assert_eq!(post(&bare.to_string(), &[]).refusal(), (400, -32602));
    // The headers against the body.
    for (name, value) in [("MCP-Protocol-Version", "2025-11-25"), ("Mcp-Method", "prompts/list")] {
        let mut wrong: Vec<(&str, &str)> = headers_of(&headers).into_iter().filter(|(n, _)| *n != name).collect();
        assert_eq!(post(&body.to_string(), &wrong).refusal(), (400, -32020), "without {name}");
        wrong.push((name, value));
        assert_eq!(post(&body.to_string(), &wrong).refusal(), (400, -32020), "{name}: {value}");
    }
    let (call, call_headers) = envelope_request("tools/call", json!({"name": "echo", "arguments": {"text": "x"}}));
    let mut misnamed: Vec<(&str, &str)> =
        headers_of(&call_headers).into_iter().filter(|(n, _)| *n != "Mcp-Name").collect();
    assert_eq!(post(&call.to_string(), &misnamed).refusal(), (400, -32020), "without Mcp-Name");
    misnamed.push(("Mcp-Name", "add"));
    assert_eq!(post(&call.to_string(), &misnamed).refusal(), (400, -32020), "Mcp-Name: add");
    // The version, last: a header and an envelope that agree on a version nobody speaks.
    let mut future = body.clone();
    future["params"]["_meta"][META_VERSION] = json!("2099-01-01");
    let future_headers = [("MCP-Protocol-Version", "2099-01-01"), ("Mcp-Method", "tools/list")];
    let answer = post(&future.to_string(), &future_headers);
    assert_eq!(answer.refusal(), (400, -32022));
    assert_eq!(answer.body["error"]["data"], json!({"supported": [VERSION], "requested": "2099-01-01"}));
    // ...after the headers: disagreeing headers win over the unsupported version.
    assert_eq!(post(&future.to_string(), &headers_of(&headers)).refusal(), (400, -32020));

    // Methods of the session era are not found here.
    let mut modern = Modern::new(&fixture);
    for method in ["initialize", "ping", "logging/setLevel", "resources/subscribe", "tasks/list", "no/such"] {
        assert_eq!(modern.request(method, json!({})).refusal(), (404, -32601), "{method}");
    }
    // An initialize without the envelope is a session-era client: told what is served.
    let legacy = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "old", "version": "1"}}});
    let answer = post(&legacy.to_string(), &[]);
    assert_eq!(answer.refusal(), (400, -32022));
    assert_eq!(answer.body["error"]["data"], json!({"supported": [VERSION], "requested": "2025-11-25"}));
    // The shapes of the envelope's values.
    for (key, bad) in
        [(META_CAPABILITIES, json!([])), (META_CLIENT_INFO, json!({"name": "x"})), (META_LOG_LEVEL, json!("loud"))]
    {
        let mut shaped = body.clone();
        shaped["params"]["_meta"][key] = bad;
        assert_eq!(post(&shaped.to_string(), &headers_of(&headers)).refusal(), (400, -32602), "{key}");
    }

    let stats = fixture.stats();
    assert_eq!(stats["header_mismatch"], 8, "{stats}");
    let rejected = &stats["modern_rejected"];
    assert_eq!(
        (&rejected["-32700"], &rejected["-32600"], &rejected["-32601"]),
        (&json!(1), &json!(3), &json!(6)),
        "{stats}"
    );
    assert_eq!((&rejected["-32022"], &rejected["-32602"]), (&json!(3), &json!(6)), "{stats}");
    assert_eq!(stats["modern_notifications"], 1, "{stats}");
}

#[test]
fn mcp_name_may_come_in_base64_and_session_headers_are_ignored() {
    let (fixture, mut client) = start(&[]);
    let uri = "fixture://modern/items/café";
    let answer = client.request("resources/read", json!({"uri": uri}));
    assert_eq!(answer.result()["contents"][0]["text"], "item café of modern", "{answer:?}");
    let sent = &fixture.stats()["modern_last_headers"];
    assert_eq!(sent["mcp-name"], "=?base64?Zml4dHVyZTovL21vZGVybi9pdGVtcy9jYWbDqQ==?=", "{sent}");
    // A malformed sentinel matches nothing.
    let (body, headers) = client.prepare("resources/read", json!({"uri": uri}));
    let mut bad: Vec<(&str, &str)> = headers_of(&headers).into_iter().filter(|(n, _)| *n != "Mcp-Name").collect();
    bad.push(("Mcp-Name", "=?base64?Zml4dHVyZQ?="));
    assert_eq!(client.post(body.to_string().as_bytes(), &bad).refusal(), (400, -32020));

    let extra = [("Mcp-Session-Id", "no-such-session"), ("Last-Event-ID", "42")];
    let answer =
        client.request_with("tools/call", json!({"name": "echo", "arguments": {"text": "still here"}}), &extra);
    assert_eq!(answer.text(), "still here");
    assert_eq!(answer.header("mcp-session-id"), None, "{answer:?}");
    assert_eq!(fixture.stats()["modern_last_headers"]["mcp-session-id"], "no-such-session");
}

#[test]
fn get_and_delete_are_405_allowing_post() {
    let (fixture, _) = start(&[]);
    let agent = http_agent(Some(PATIENCE));
    for header in [None, Some(VERSION)] {
        let mut get = agent.get(&fixture.url()).header("Accept", "text/event-stream");
        let mut delete = agent.delete(&fixture.url()).header("Mcp-Session-Id", "x");
        if let Some(version) = header {
            get = get.header("MCP-Protocol-Version", version);
            delete = delete.header("MCP-Protocol-Version", version);
        }
        for response in [get.call(), delete.call()] {
            let response = response.expect("an answer");
            assert_eq!(response.status().as_u16(), 405);
            assert_eq!(response.headers().get("allow").and_then(|v| v.to_str().ok()), Some("POST"));
        }
    }
}

#[test]
fn tools_answer_json_and_whoami_names_the_client() {
    let (_fixture, mut client) = start(&[]);
    let echo = client.call_tool("echo", json!({"text": "hello"}));
    assert_eq!((echo.content_type.as_str(), echo.text()), ("application/json", "hello".to_owned()));
    let add = client.call_tool("add", json!({"a": 2, "b": 3}));
    assert_eq!(add.result()["structuredContent"], json!({"sum": 5}));
    assert_eq!(client.tool_text("whoami", json!({})), "modern:modern:fixture_modern");
    client.client_info = None;
    assert_eq!(client.tool_text("whoami", json!({})), "modern:modern:anonymous");
    let fail = client.call_tool("fail", json!({}));
    assert_eq!((&fail.result()["isError"], &fail.result()["resultType"]), (&json!(true), &json!("complete")));
    assert_eq!(client.tool_text("big", json!({"bytes": 70_000})).len(), 70_000);
    assert_eq!(client.call_tool("no_such_tool", json!({})).refusal(), (400, -32602));
    assert_eq!(client.request("tools/call", json!({"name": "echo", "arguments": [1]})).refusal(), (400, -32602));
}

#[test]
fn progress_and_log_messages_turn_the_answer_into_an_sse_stream() {
    let (_fixture, mut client) = start(&[]);
    let params = json!({"name": "slow", "arguments": {"ms": 300, "steps": 3}, "_meta": {"progressToken": "p1"}});
    let answer = client.request("tools/call", params);
    assert_eq!((answer.status, answer.content_type.as_str()), (200, "text/event-stream"), "{answer:?}");
    assert_eq!(answer.header("x-accel-buffering"), Some("no"), "{answer:?}");
    assert_eq!(answer.events.len(), 3, "{answer:?}");
    for (step, event) in answer.events.iter().enumerate() {
        assert_eq!(event["method"], "notifications/progress", "{event}");
        assert_eq!((&event["params"]["progressToken"], &event["params"]["progress"]), (&json!("p1"), &json!(step + 1)));
    }
    assert_eq!((answer.text(), &answer.result()["resultType"]), ("done".to_owned(), &json!("complete")));

    // Log messages only when the request's _meta asks for them, at their level or above.
    let quiet = client.call_tool("log", json!({"message": "m"}));
    assert_eq!(quiet.content_type, "application/json");
    assert!(quiet.text().starts_with("not logged"), "{quiet:?}");
    client.log_level = Some("warning");
    assert!(client.tool_text("log", json!({"level": "info", "message": "m"})).starts_with("not logged"));
    let loud = client.call_tool("log", json!({"level": "error", "message": "boom"}));
    assert_eq!((loud.content_type.as_str(), loud.text()), ("text/event-stream", "logged".to_owned()));
    assert_eq!(loud.events.len(), 1, "{loud:?}");
    assert_eq!(loud.events[0]["method"], "notifications/message");
    assert_eq!(loud.events[0]["params"], json!({"level": "error", "logger": "modern", "data": "boom"}));
}

#[test]
fn a_quiet_call_is_pinged_over_sse_once_the_keepalive_interval_passes() {
    let (_fixture, mut client) = start(&["--keepalive-ms", "100"]);
    let answer = client.call_tool("slow", json!({"ms": 350}));
    assert_eq!((answer.content_type.as_str(), answer.text()), ("text/event-stream", "done".to_owned()), "{answer:?}");
    assert!(answer.events.is_empty(), "pings are comments, not messages: {answer:?}");
    let quick = client.call_tool("slow", json!({"ms": 10}));
    assert_eq!(quick.content_type, "application/json", "{quick:?}");
}

/// Answers an `input_required` result's single question with `response`, echoing its state;
/// the answer to the retry.
fn retry_with(client: &mut Modern, tool: &str, arguments: &Value, asked: &Value, response: Value) -> Answer {
    let requests = asked["inputRequests"].as_object().unwrap_or_else(|| panic!("no inputRequests in {asked}"));
    assert_eq!(requests.len(), 1, "{asked}");
    let key = requests.keys().next().cloned().unwrap_or_default();
    let params = json!({
        "name": tool,
        "arguments": arguments,
        "inputResponses": {key: response},
        "requestState": asked["requestState"],
    });
    client.request("tools/call", params)
}

fn input_required(answer: &Answer) -> Value {
    let result = answer.result().clone();
    assert_eq!(result["resultType"], "input_required", "{result}");
    assert!(result["requestState"].as_str().is_some_and(|s| !s.is_empty()), "{result}");
    assert_eq!(server_info_of(&result)["name"], "modern", "{result}");
    assert!(result.get("content").is_none(), "{result}");
    result
}

#[test]
fn sample_elicit_and_roots_complete_after_one_input_required_round_trip() {
    let fixture = Fixture::start("modern", &["--modern"]);
    let capabilities = json!({"sampling": {}, "elicitation": {}, "roots": {}});
    let mut client = Modern::with_capabilities(&fixture, capabilities);

    let arguments = json!({"prompt": "a haiku"});
    let asked = input_required(&client.call_tool("sample", arguments.clone()));
    let request = &asked["inputRequests"]["sample"];
    assert_eq!(request["method"], "sampling/createMessage", "{asked}");
    assert_eq!(request["params"]["messages"][0]["content"]["text"], "a haiku", "{asked}");
    let sampled = json!({"role": "assistant", "content": {"type": "text", "text": "quiet wire"}, "model": "m"});
    let done = retry_with(&mut client, "sample", &arguments, &asked, sampled);
    assert_eq!((done.text(), &done.result()["resultType"]), ("sampled: quiet wire".to_owned(), &json!("complete")));

    let arguments = json!({"message": "Your name?"});
    let asked = input_required(&client.call_tool("elicit", arguments.clone()));
    let request = &asked["inputRequests"]["elicit"];
    assert_eq!((&request["method"], &request["params"]["mode"]), (&json!("elicitation/create"), &json!("form")));
    assert_eq!(request["params"]["message"], "Your name?");
    let accepted = json!({"action": "accept", "content": {"name": "alice"}});
    let done = retry_with(&mut client, "elicit", &arguments, &asked, accepted);
    assert_eq!(done.text(), r#"elicited: accept {"name":"alice"}"#);

    let asked = input_required(&client.call_tool("roots", json!({})));
    assert_eq!(asked["inputRequests"]["roots"], json!({"method": "roots/list"}));
    let roots = json!({"roots": [{"uri": "file:///work", "name": "work"}]});
    let done = retry_with(&mut client, "roots", &json!({}), &asked, roots);
    assert_eq!(done.text(), r#"[{"name":"work","uri":"file:///work"}]"#);

    // An answer of the wrong kind is the tool's error.
    let asked = input_required(&client.call_tool("roots", json!({})));
    let wrong = retry_with(&mut client, "roots", &json!({}), &asked, json!({"action": "accept"}));
    assert_eq!(wrong.result()["isError"], true, "{wrong:?}");

    let stats = fixture.stats();
    assert_eq!((&stats["input_required_sent"], &stats["retries_with_state"]), (&json!(4), &json!(4)), "{stats}");
    assert_eq!(stats["bad_request_state"], 0, "{stats}");
}

#[test]
fn elicit_twice_takes_two_rounds_each_with_its_own_state() {
    let fixture = Fixture::start("modern", &["--modern"]);
    let mut client = Modern::with_capabilities(&fixture, json!({"elicitation": {"form": {}}}));
    let arguments = json!({"message": "Who are you?"});
    let first = input_required(&client.call_tool("elicit_twice", arguments.clone()));
    assert!(first["inputRequests"]["name"].is_object(), "{first}");
    let answer = retry_with(
        &mut client,
        "elicit_twice",
        &arguments,
        &first,
        json!({"action": "accept", "content": {"name": "bob"}}),
    );
    let second = input_required(&answer);
    assert_eq!(second["inputRequests"]["confirm"]["params"]["message"], "Confirm bob?", "{second}");
    assert_ne!(second["requestState"], first["requestState"]);
    let done = retry_with(
        &mut client,
        "elicit_twice",
        &arguments,
        &second,
        json!({"action": "accept", "content": {"confirm": true}}),
    );
    assert_eq!(done.text(), r#"elicited twice: accept {"name":"bob"}; accept {"confirm":true}"#);
    // Declining the first question ends it at once.
    let first = input_required(&client.call_tool("elicit_twice", arguments.clone()));
    let declined = retry_with(&mut client, "elicit_twice", &arguments, &first, json!({"action": "decline"}));
    assert_eq!(declined.text(), "elicited twice: decline null");
    assert_eq!(fixture.stats()["input_required_sent"], 3);
}

#[test]
fn a_request_state_is_good_for_its_own_call_only() {
    let fixture = Fixture::start("modern", &["--modern"]);
    let mut client = Modern::with_capabilities(&fixture, json!({"sampling": {}, "elicitation": {}}));
    let arguments = json!({"prompt": "p"});
    let asked = input_required(&client.call_tool("sample", arguments.clone()));
    let state = asked["requestState"].clone();
    let sampled = json!({"role": "assistant", "content": {"type": "text", "text": "t"}, "model": "m"});
    let refused = |client: &mut Modern, name: &str, arguments: Value, state: Value| {
        let params =
            json!({"name": name, "arguments": arguments, "inputResponses": {"sample": sampled}, "requestState": state});
        let answer = client.request("tools/call", params);
        assert_eq!(answer.refusal(), (400, -32602), "{answer:?}");
        assert_eq!(answer.body["error"]["message"], "Invalid or expired requestState");
        assert_eq!(answer.body["error"]["data"], json!({"reason": "invalid_request_state"}));
    };
    refused(&mut client, "sample", arguments.clone(), json!("fixture-state.999.0123456789abcdef"));
    refused(&mut client, "sample", arguments.clone(), json!(format!("{}x", state.as_str().unwrap_or_default())));
    refused(&mut client, "sample", json!({"prompt": "other"}), state.clone());
    refused(&mut client, "elicit", json!({"message": "p"}), state.clone());
    refused(&mut client, "echo", json!({"text": "p"}), state.clone());
    let read = client.request("resources/read", json!({"uri": "fixture://modern/readme", "requestState": state}));
    assert_eq!(read.refusal(), (400, -32602), "no state was handed out for a read");
    // The good state still works, and again (a retry of a retry).
    for _ in 0..2 {
        let done = retry_with(&mut client, "sample", &arguments, &asked, sampled.clone());
        assert_eq!(done.text(), "sampled: t");
    }
    // Answers without a state, or a state without the answer, are asked for again.
    let params = json!({"name": "sample", "arguments": arguments, "inputResponses": {"sample": sampled}});
    input_required(&client.request("tools/call", params));
    let params = json!({"name": "sample", "arguments": arguments, "inputResponses": {"other": {}}, "requestState": asked["requestState"]});
    input_required(&client.request("tools/call", params));
    let stats = fixture.stats();
    assert_eq!((&stats["bad_request_state"], &stats["retries_with_state"]), (&json!(6), &json!(3)), "{stats}");
    assert_eq!(stats["input_required_sent"], 3, "{stats}");
}

#[test]
fn a_question_needs_its_capability_in_the_request() {
    let (_fixture, mut client) = start(&[]);
    for (tool, arguments, required) in [
        ("sample", json!({"prompt": "p"}), json!({"sampling": {}})),
        ("elicit", json!({"message": "m"}), json!({"elicitation": {"form": {}}})),
        ("roots", json!({}), json!({"roots": {}})),
    ] {
        let answer = client.call_tool(tool, arguments);
        assert_eq!(answer.refusal(), (400, -32021), "{tool}: {answer:?}");
        assert_eq!(answer.body["error"]["data"], json!({"requiredCapabilities": required}), "{tool}");
    }
    // A URL-only elicitation capability does not take a form.
    client.capabilities = json!({"elicitation": {"url": {}}});
    assert_eq!(client.call_tool("elicit", json!({"message": "m"})).refusal(), (400, -32021));
    client.capabilities = json!({"elicitation": {"url": {}, "form": {}}});
    input_required(&client.call_tool("elicit", json!({"message": "m"})));
}

/// Opens a `subscriptions/listen` stream asking for `notifications`.
fn listen(fixture: &Fixture, client: &mut Modern, notifications: Value) -> (RawStream, Value) {
    let (body, headers) = client.prepare("subscriptions/listen", json!({"notifications": notifications}));
    (RawStream::post(fixture, &body, &headers), body["id"].clone())
}

#[test]
fn listen_acknowledges_then_relays_what_it_asked_for() {
    let (fixture, mut client) = start(&["--keepalive-ms", "100"]);
    let readme = "fixture://modern/readme";
    let asked = json!({"toolsListChanged": true, "promptsListChanged": false, "resourceSubscriptions": [readme]});
    let (mut stream, id) = listen(&fixture, &mut client, asked);
    let head = stream.head();
    assert!(head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.to_ascii_lowercase().contains("x-accel-buffering: no"), "{head}");
    let ack = stream.next(PATIENCE).expect("the acknowledgement");
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged", "{ack}");
    assert_eq!(ack["params"]["notifications"], json!({"toolsListChanged": true, "resourceSubscriptions": [readme]}));
    assert_eq!(ack["params"]["_meta"][META_SUBSCRIPTION], id, "{ack}");
    assert!(ack.get("id").is_none(), "{ack}");

    let (mut everything, everything_id) =
        listen(&fixture, &mut client, json!({"promptsListChanged": true, "resourcesListChanged": true}));
    assert_eq!(
        everything.next(PATIENCE).expect("an acknowledgement")["method"],
        "notifications/subscriptions/acknowledged"
    );
    let stats = fixture.stats();
    assert_eq!((&stats["listen_open"], &stats["listen_total"]), (&json!(2), &json!(2)), "{stats}");
    assert_eq!(stats["requests_running"], 0, "a listen stream is no running request: {stats}");

    assert_eq!(client.tool_text("notify", json!({"kind": "tools"})), "sent to 1");
    let changed = stream.next(PATIENCE).expect("tools/list_changed");
    assert_eq!(changed["method"], "notifications/tools/list_changed", "{changed}");
    assert_eq!(changed["params"]["_meta"][META_SUBSCRIPTION], id, "{changed}");
    assert_eq!(client.tool_text("notify", json!({"kind": "prompts"})), "sent to 1");
    let prompts = everything.next(PATIENCE).expect("prompts/list_changed");
    assert_eq!(
        (&prompts["method"], &prompts["params"]["_meta"][META_SUBSCRIPTION]),
        (&json!("notifications/prompts/list_changed"), &everything_id)
    );
    assert_eq!(client.tool_text("notify", json!({"kind": "updated", "uri": "fixture://modern/other"})), "sent to 0");
    assert_eq!(client.tool_text("notify", json!({"kind": "updated"})), "sent to 1");
    let updated = stream.next(PATIENCE).expect("resources/updated");
    assert_eq!(updated["method"], "notifications/resources/updated", "{updated}");
    assert_eq!(updated["params"]["uri"], readme, "{updated}");
    assert_eq!(updated["params"]["_meta"][META_SUBSCRIPTION], id, "{updated}");
    assert_eq!(stream.next(Duration::from_millis(300)), None, "the prompts change was not asked for");

    // A client that goes away is noticed at the next ping.
    stream.close();
    assert!(wait_until(PATIENCE, || fixture.count("listen_open") == 1), "{}", fixture.stats());
    // The others end gracefully, with the listen result.
    assert_eq!(client.tool_text("end_listens", json!({})), "ended 1");
    let end = everything.next(PATIENCE).expect("the listen result");
    assert_eq!(end["id"], everything_id, "{end}");
    assert_eq!(end["result"]["resultType"], "complete", "{end}");
    assert_eq!(end["result"]["_meta"][META_SUBSCRIPTION], everything_id, "{end}");
    assert_eq!(server_info_of(&end["result"])["name"], "modern", "{end}");
    assert!(wait_until(PATIENCE, || fixture.count("listen_open") == 0), "{}", fixture.stats());
    assert_eq!(fixture.stats()["modern_requests"]["subscriptions/listen"], 2);
}

#[test]
fn listen_needs_sse_and_a_filter() {
    let (fixture, mut client) = start(&[]);
    let (body, headers) = client.prepare("subscriptions/listen", json!({"notifications": {"toolsListChanged": true}}));
    let mut json_only = headers_of(&headers);
    json_only.push(("Accept", "application/json"));
    assert_eq!(client.post(body.to_string().as_bytes(), &json_only).status, 406);
    assert_eq!(client.request("subscriptions/listen", json!({})).refusal(), (400, -32602));
    let bad = json!({"notifications": {"resourceSubscriptions": "fixture://modern/readme"}});
    assert_eq!(client.request("subscriptions/listen", bad).refusal(), (400, -32602));
    assert_eq!(fixture.count("listen_total"), 0);
}

#[test]
fn closing_the_answer_cancels_the_call() {
    let (fixture, mut client) = start(&[]);
    let params = json!({"name": "slow", "arguments": {"ms": 20_000, "steps": 200}, "_meta": {"progressToken": 9}});
    let (body, headers) = client.prepare("tools/call", params);
    let mut slow = RawStream::post(&fixture, &body, &headers);
    let progress = slow.next(PATIENCE).expect("a first progress notification");
    assert_eq!(progress["params"]["progressToken"], 9, "{progress}");
    assert_eq!(fixture.count("requests_running"), 1);
    let closed = Instant::now();
    slow.close();
    assert!(wait_until(PATIENCE, || fixture.count("modern_cancelled_by_disconnect") == 1), "{}", fixture.stats());
    assert!(wait_until(PATIENCE, || fixture.count("requests_running") == 0), "{}", fixture.stats());
    assert!(closed.elapsed() < Duration::from_secs(2), "noticed after {:?}", closed.elapsed());

    let (body, headers) = client.prepare("tools/call", json!({"name": "cancellable", "arguments": {"every_ms": 50}}));
    let mut cancellable = RawStream::post(&fixture, &body, &headers);
    assert!(cancellable.head().contains("text/event-stream"), "an SSE answer from the start");
    assert!(wait_until(PATIENCE, || fixture.count("requests_running") == 1));
    cancellable.close();
    assert!(wait_until(PATIENCE, || fixture.count("modern_cancelled_by_disconnect") == 2), "{}", fixture.stats());
    assert!(wait_until(PATIENCE, || fixture.count("requests_running") == 0), "{}", fixture.stats());
    // One that is left alone answers.
    let done = client.call_tool("cancellable", json!({"ms": 120, "every_ms": 30}));
    assert_eq!(done.text(), "not cancelled within 120 ms");
}

#[test]
fn routed_calls_must_mirror_their_arguments_in_mcp_param_headers() {
    let (fixture, mut client) = start(&[]);
    let call = json!({"name": "routed", "arguments": {"region": "eu-west", "shard": 7}});
    let with = |client: &mut Modern, headers: &[(&str, &str)]| client.request_with("tools/call", call.clone(), headers);
    let good = with(&mut client, &[("Mcp-Param-Region", "eu-west"), ("Mcp-Param-Shard", "7")]);
    assert_eq!(good.text(), "region=eu-west shard=7");
    assert_eq!(
        with(&mut client, &[("Mcp-Param-Region", "eu-west"), ("Mcp-Param-Shard", "7.0")]).text(),
        "region=eu-west shard=7"
    );
    let sent = &fixture.stats()["modern_last_headers"];
    assert_eq!((&sent["mcp-param-region"], &sent["mcp-param-shard"]), (&json!("eu-west"), &json!("7.0")), "{sent}");
    for headers in [
        vec![("Mcp-Param-Region", "eu-west")],
        vec![("Mcp-Param-Region", "us-east"), ("Mcp-Param-Shard", "7")],
        vec![("Mcp-Param-Region", "eu-west"), ("Mcp-Param-Shard", "8")],
        vec![("Mcp-Param-Region", "eu-west"), ("Mcp-Param-Region", "eu-west"), ("Mcp-Param-Shard", "7")],
    ] {
        assert_eq!(with(&mut client, &headers).refusal(), (400, -32020), "{headers:?}");
    }
    // A header for an argument that is absent; a base64 value.
    let answer = client.request_with(
        "tools/call",
        json!({"name": "routed", "arguments": {"region": "x"}}),
        &[("Mcp-Param-Region", "x"), ("Mcp-Param-Shard", "1")],
    );
    assert_eq!(answer.refusal(), (400, -32020));
    let encoded = header_value("zürich");
    let answer = client.request_with(
        "tools/call",
        json!({"name": "routed", "arguments": {"region": "zürich"}}),
        &[("Mcp-Param-Region", &encoded)],
    );
    assert_eq!(answer.text(), "region=zürich shard=-");
    // Tools without x-mcp-header take no such header into account.
    assert_eq!(
        client
            .request_with(
                "tools/call",
                json!({"name": "echo", "arguments": {"text": "t"}}),
                &[("Mcp-Param-Region", "x")]
            )
            .text(),
        "t"
    );
}

#[test]
fn stats_show_the_last_envelope_and_the_headers_it_came_with() {
    let (fixture, mut client) = start(&[]);
    client.capabilities = json!({"sampling": {}, "experimental": {"x": {}}});
    client.log_level = Some("debug");
    client.call_tool("echo", json!({"text": "t"})).text();
    let stats = fixture.stats();
    assert_eq!(stats["modern_last_client_capabilities"], json!({"sampling": {}, "experimental": {"x": {}}}), "{stats}");
    assert_eq!(stats["modern_last_client_info"], json!({"name": "fixture_modern", "version": "1"}), "{stats}");
    assert_eq!(stats["modern_last_log_level"], "debug", "{stats}");
    let sent = &stats["modern_last_headers"];
    assert_eq!(
        (&sent["mcp-protocol-version"], &sent["mcp-method"], &sent["mcp-name"]),
        (&json!(VERSION), &json!("tools/call"), &json!("echo"))
    );
    assert_eq!(sent["accept"], ACCEPT, "{sent}");
    assert_eq!(stats["modern_requests"], json!({"tools/call": 1}), "{stats}");
    assert_eq!(
        (&stats["requests"], &stats["initialize"], &stats["live_sessions"]),
        (&json!(1), &json!(0), &json!(0)),
        "{stats}"
    );
}

#[test]
fn both_eras_serve_a_session_and_modern_requests_side_by_side() {
    let fixture = Fixture::start("both", &["--both-eras"]);
    let mut session = Client::new(&fixture.url());
    session.initialize();
    let mut modern = Modern::new(&fixture);

    let discover = modern.request("server/discover", json!({}));
    let versions = &discover.result()["supportedVersions"];
    assert_eq!(*versions, json!([VERSION, "2025-11-25", "2025-06-18", "2025-03-26"]), "{discover:?}");
    // One after the other and side by side, each on its own terms.
    let stream = session.open_stream();
    assert!(session.tool_text("whoami", json!({})).starts_with("both:"), "a session still has its id");
    assert_eq!(modern.tool_text("whoami", json!({})), "both:modern:fixture_modern");
    let listed = session.request("tools/list", json!({}));
    assert!(listed.result().get("resultType").is_none(), "session results have no resultType: {:?}", listed.body);
    let names: Vec<&str> =
        listed.result()["tools"].as_array().into_iter().flatten().filter_map(|t| t["name"].as_str()).collect();
    assert!(names.contains(&"trickle") && !names.contains(&"elicit_twice"), "{names:?}");
    let listed = modern.request("tools/list", json!({}));
    assert_eq!(listed.result()["resultType"], "complete");
    assert_eq!(session.tool_text("notify", json!({"kind": "tools"})), "sent");
    assert!(stream.next_with_method("notifications/tools/list_changed", PATIENCE).is_some());
    assert_eq!(modern.tool_text("notify", json!({"kind": "tools"})), "sent to 0", "no listen stream is open");
    // The era is the header's: a modern envelope under a session-era version goes to the
    // session era (which wants a session), and ping is not of the modern one.
    let (body, _) = modern.prepare("tools/list", json!({}));
    let session_era = modern.post(body.to_string().as_bytes(), &[("MCP-Protocol-Version", "2025-11-25")]);
    assert_eq!(session_era.refusal(), (400, -32600), "{session_era:?}");
    assert_eq!(modern.request("ping", json!({})).refusal(), (404, -32601), "modern: no ping");
    // The modern era's GET and DELETE are refused; the session's are served.
    let agent = http_agent(Some(PATIENCE));
    let get = agent.get(&fixture.url()).header("MCP-Protocol-Version", VERSION).call().expect("an answer");
    assert_eq!(get.status().as_u16(), 405);
    let stats = fixture.stats();
    assert_eq!(
        (&stats["initialize"], &stats["live_sessions"], &stats["get_streams_open"]),
        (&json!(1), &json!(1), &json!(1)),
        "{stats}"
    );
    assert_eq!(stats["modern_requests"]["tools/call"], 2, "{stats}");
    assert_eq!(stats["era"], "both");
    assert_eq!(session.delete(), 200);
    assert_eq!(modern.tool_text("echo", json!({"text": "after"})), "after");
    assert_eq!(fixture.count("live_sessions"), 0);
    // An unknown version goes to the modern ladder, which says what it speaks.
    let answer = modern.post(
        br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#,
        &[("MCP-Protocol-Version", "2099-01-01")],
    );
    assert_eq!(answer.refusal(), (400, -32602), "{answer:?}");
}

#[test]
fn without_an_era_flag_the_session_era_is_unchanged() {
    let fixture = Fixture::start("plain", &[]);
    let mut client = Modern::new(&fixture);
    let refused = client.request("server/discover", json!({}));
    assert_eq!(refused.status, 400, "{refused:?}");
    assert_eq!(refused.error_code(), -32600, "the session era's refusal of an unknown version: {refused:?}");
    let mut session = Client::new(&fixture.url());
    let init = session.initialize();
    assert_eq!(init["protocolVersion"], "2025-11-25", "{init}");
    let listed = session.request("tools/list", json!({}));
    assert!(listed.result().get("resultType").is_none() && listed.result().get("ttlMs").is_none());
    let stats = fixture.stats();
    assert_eq!(stats["era"], "session");
    assert_eq!(
        (&stats["modern_requests"], &stats["discover"], &stats["listen_total"]),
        (&json!({}), &json!(0), &json!(0)),
        "{stats}"
    );
}

#[test]
fn the_era_flags_are_for_http_and_one_at_a_time() {
    for args in
        [&["--stdio", "--modern"][..], &["--modern", "--both-eras"], &["--modern", "--tasks"], &["--ttl-ms", "5"]]
    {
        let out = Command::new(support::fixture_bin()).args(args).output().expect("run mcp-fixture");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}
