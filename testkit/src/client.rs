//! A small MCP client of the session era speaking Streamable HTTP over
//! real sockets ([`Client`]), and its GET stream ([`Stream`]).

use std::io::BufReader;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::http::{ACCEPT, PROTOCOL, agent, http_agent};
use crate::reply::Reply;
use crate::sse::Decoder;

/// The params of an `initialize` from a client with no capabilities.
pub fn initialize_params() -> Value {
    json!({
        "protocolVersion": PROTOCOL,
        "capabilities": {},
        "clientInfo": { "name": "mcpgate-tests", "version": "1" },
    })
}

/// A small MCP client speaking Streamable HTTP.
pub struct Client {
    agent: ureq::Agent,
    pub url: String,
    pub session: Option<String>,
    next_id: u64,
    /// Sent with every request, e.g. `Authorization`.
    pub headers: Vec<(String, String)>,
}

impl Client {
    pub fn new(url: &str) -> Client {
        Client { agent: agent(), url: url.to_string(), session: None, next_id: 1, headers: Vec::new() }
    }

    /// A client speaking through `agent` (one that trusts a test CA, say).
    pub fn with_agent(url: &str, agent: ureq::Agent) -> Client {
        Client { agent, url: url.to_string(), session: None, next_id: 1, headers: Vec::new() }
    }

    pub fn initialize(&mut self) -> Value {
        self.initialize_with(json!({}))
    }

    pub fn initialize_with(&mut self, capabilities: Value) -> Value {
        let mut params = initialize_params();
        params["capabilities"] = capabilities;
        let reply = self.request("initialize", params);
        assert_eq!(reply.status, 200, "initialize: {reply:?}");
        self.session = Some(reply.session.clone().expect("initialize returns Mcp-Session-Id"));
        assert_eq!(self.notify("notifications/initialized", json!({})), 202);
        reply.result().clone()
    }

    /// A POST to the endpoint with the JSON headers, the session and `self.headers`.
    fn post_request(&self) -> ureq::RequestBuilder<ureq::typestate::WithBody> {
        self.post_request_on(&self.agent)
    }

    /// [`Client::post_request`] through `agent`.
    fn post_request_on(&self, agent: &ureq::Agent) -> ureq::RequestBuilder<ureq::typestate::WithBody> {
        let mut request = agent.post(&self.url).header("Content-Type", "application/json").header("Accept", ACCEPT);
        if let Some(session) = &self.session {
            request = request.header("Mcp-Session-Id", session).header("MCP-Protocol-Version", PROTOCOL);
        }
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        request
    }

    /// POSTs a raw body with the usual headers plus `extra`.
    pub fn post(&self, body: &[u8], extra: &[(&str, &str)]) -> Reply {
        let mut request = self.post_request();
        for (name, value) in extra {
            request = request.header(*name, *value);
        }
        let response = request.send(body).unwrap_or_else(|e| panic!("POST {}: {e}", self.url));
        Reply::of(response)
    }

    pub fn request(&mut self, method: &str, params: Value) -> Reply {
        let id = self.next_id;
        self.next_id += 1;
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        self.post(body.to_string().as_bytes(), &[])
    }

    pub fn call_tool(&mut self, name: &str, arguments: Value) -> Reply {
        self.request("tools/call", json!({ "name": name, "arguments": arguments }))
    }

    /// Text of the first content item of a successful tool call.
    pub fn tool_text(&mut self, name: &str, arguments: Value) -> String {
        self.call_tool(name, arguments).text()
    }

    pub fn notify(&self, method: &str, params: Value) -> u16 {
        let body = json!({ "jsonrpc": "2.0", "method": method, "params": params });
        self.post(body.to_string().as_bytes(), &[]).status
    }

    /// Every page of a merged list.
    pub fn list_all(&mut self, method: &str, field: &str) -> Vec<Value> {
        let mut items = Vec::new();
        let mut params = json!({});
        for _ in 0..100 {
            let reply = self.request(method, params.clone());
            let result = reply.result();
            items
                .extend(result[field].as_array().unwrap_or_else(|| panic!("{method}: {}", reply.body)).iter().cloned());
            match result.get("nextCursor").and_then(Value::as_str) {
                Some(cursor) => params = json!({ "cursor": cursor }),
                None => return items,
            }
        }
        panic!("{method}: more than 100 pages");
    }

    pub fn tool_names(&mut self) -> Vec<String> {
        self.list_all("tools/list", "tools").iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
    }

    pub fn delete(&self) -> u16 {
        let mut request = self.agent.delete(&self.url);
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        if let Some(session) = &self.session {
            request = request.header("Mcp-Session-Id", session);
        }
        request.call().map(|r| r.status().as_u16()).unwrap_or(0)
    }

    /// Opens the session's GET stream; messages arrive on the returned receiver.
    pub fn open_stream(&self) -> Stream {
        self.open_stream_from(None)
    }

    /// Opens the GET stream, resuming after `last_event_id` when given.
    pub fn open_stream_from(&self, last_event_id: Option<&str>) -> Stream {
        let agent = http_agent(None);
        let mut request = agent.get(&self.url);
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id);
        }
        let response = request
            .header("Accept", "text/event-stream")
            .header("Mcp-Session-Id", self.session.as_deref().expect("initialized"))
            .header("MCP-Protocol-Version", PROTOCOL)
            .call()
            .expect("GET stream");
        assert_eq!(response.status().as_u16(), 200, "GET stream status");
        let (tx, rx) = std::sync::mpsc::channel();
        let handle = agent.clone();
        let last_id = Arc::new(Mutex::new(None));
        let seen = last_id.clone();
        std::thread::spawn(move || {
            let reader = BufReader::new(response.into_body().into_reader());
            let mut decoder = Decoder::new(reader, 1 << 20);
            while let Ok(Some(event)) = decoder.next_event() {
                if event.id.is_some() {
                    *seen.lock().unwrap() = event.id.clone();
                }
                if event.data.trim().is_empty() {
                    continue;
                }
                let Ok(value) = serde_json::from_str::<Value>(&event.data) else { continue };
                if tx.send(value).is_err() {
                    return;
                }
            }
        });
        Stream { rx, agent: handle, last_id }
    }
}

/// A client's open GET stream.
pub struct Stream {
    pub rx: std::sync::mpsc::Receiver<Value>,
    agent: ureq::Agent,
    last_id: Arc<Mutex<Option<String>>>,
}

impl Stream {
    /// The next message with `method`, skipping others, within `timeout`.
    pub fn next_with_method(&self, method: &str, timeout: Duration) -> Option<Value> {
        let deadline = Instant::now() + timeout;
        for _ in 0..1000 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let message = self.next(left)?;
            if message["method"] == method {
                return Some(message);
            }
        }
        None
    }

    /// The id of the last event received, as an EventSource keeps it.
    pub fn last_event_id(&self) -> Option<String> {
        self.last_id.lock().unwrap().clone()
    }

    /// The next message within `timeout`.
    pub fn next(&self, timeout: Duration) -> Option<Value> {
        self.rx.recv_timeout(timeout).ok()
    }

    /// Closes the connection, as a client going away would.
    pub fn close(self) {
        self.agent.shutdown();
    }
}

/// Ids of `call_streaming` requests: unique in the test process, so two
/// clients sharing a session never send the same id.
static STREAMING_IDS: AtomicU64 = AtomicU64::new(1);
/// Sessions shared by `same_session` clients, to give each its own id range.
static SHARED_CLIENTS: AtomicU64 = AtomicU64::new(1);

impl Client {
    /// Another client on this client's session (same id and headers, its
    /// own connection and request ids), e.g. for a second thread.
    pub fn same_session(&self) -> Client {
        let n = SHARED_CLIENTS.fetch_add(1, Ordering::Relaxed);
        Client {
            agent: agent(),
            url: self.url.clone(),
            session: self.session.clone(),
            next_id: 1_000_000 * n,
            headers: self.headers.clone(),
        }
    }

    /// POSTs a response `{"id": id, "result": result}` to a request a server
    /// made, on a connection of its own; the HTTP status.
    pub fn respond(&self, id: &Value, result: Value) -> u16 {
        assert!(self.session.is_some(), "respond: the client is not initialized");
        let body = json!({ "jsonrpc": "2.0", "id": id, "result": result });
        let response = self
            .post_request_on(&agent())
            .send(body.to_string().as_bytes())
            .unwrap_or_else(|e| panic!("POST answer: {e}"));
        response.status().as_u16()
    }

    /// Calls tool `name` and reads the SSE answer event by event as it
    /// arrives. Each JSON-RPC request in it (a server asking the client) goes
    /// to `answer`; a result it returns is POSTed back on another connection
    /// (202 expected) while the answer is still being read. Returns the
    /// messages before the response, and the response (or the JSON answer;
    /// `Value::Null` when the stream ended without one).
    pub fn call_streaming(
        &self,
        name: &str,
        arguments: Value,
        mut answer: impl FnMut(&Value) -> Option<Value>,
    ) -> (Vec<Value>, Value) {
        let id = json!(format!("stream-{}", STREAMING_IDS.fetch_add(1, Ordering::Relaxed)));
        let body = json!({
            "jsonrpc": "2.0",
            "id": id,
            "method": "tools/call",
            "params": { "name": name, "arguments": arguments },
        });
        let response =
            self.post_request().send(body.to_string().as_bytes()).unwrap_or_else(|e| panic!("POST {name}: {e}"));
        let content_type = response.body().mime_type().unwrap_or("").to_string();
        if content_type != "text/event-stream" {
            let text = response.into_body().read_to_string().unwrap_or_default();
            return (Vec::new(), serde_json::from_str(&text).unwrap_or(Value::String(text)));
        }
        let reader = BufReader::new(response.into_body().into_reader());
        let mut decoder = Decoder::new(reader, 16 << 20);
        let mut events = Vec::new();
        loop {
            let event = match decoder.next_event() {
                Ok(Some(event)) => event,
                Ok(None) => return (events, Value::Null),
                Err(e) => panic!("{name}: reading the SSE answer failed: {e}; messages so far: {events:?}"),
            };
            if event.data.trim().is_empty() {
                continue;
            }
            let message: Value = serde_json::from_str(&event.data)
                .unwrap_or_else(|e| panic!("{name}: SSE data is not JSON ({e}): {}", event.data));
            if message.get("method").is_none() && message.get("id") == Some(&id) {
                return (events, message);
            }
            if message.get("method").is_some()
                && let Some(asked) = message.get("id")
                && let Some(result) = answer(&message)
            {
                let status = self.respond(asked, result);
                assert_eq!(status, 202, "{name}: POSTing the answer to {message}");
            }
            events.push(message);
        }
    }
}
