//! A client of the 2026-07-28 era ([`Modern`]): no `initialize` and no
//! session; every request is one POST carrying its own envelope in
//! `params._meta` and the routing headers the era asks for
//! (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`). Its answers are
//! [`Reply`]s, as the session-era [`Client`](crate::Client)'s are.
//!
//! Two ways to send: [`Modern::request`] and the like, with ids of their
//! own and the client's `_meta` merged into what `params` carry, as a
//! client sends; and [`Modern::send`] and the like, with the test's id and
//! `params` as they are (the client's `_meta` only when they carry none),
//! headers replaced or removed at will: to break the envelope.

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use serde_json::{Value, json};

use crate::http::{ACCEPT, addr_of_url, http_agent, http_request};
use crate::reply::Reply;

// The era's names, spelled here after the specification rather than taken
// from mcpgate or the fixture: the tests hold those to it.

/// The protocol version of the era.
pub const ERA: &str = "2026-07-28";
pub const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
pub const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
pub const META_SUBSCRIPTION: &str = "io.modelcontextprotocol/subscriptionId";

/// The `clientInfo` a [`Modern`] declares unless told otherwise.
pub fn client_info() -> Value {
    json!({"name": "fixture_modern", "version": "1"})
}

/// The `_meta` every request of the era carries: the version, the client's
/// capabilities and its info.
pub fn era_meta(capabilities: Value) -> Value {
    json!({META_VERSION: ERA, META_CAPABILITIES: capabilities, META_CLIENT_INFO: client_info()})
}

/// Where a client speaks: an MCP endpoint, by its URL.
pub trait Endpoint {
    fn endpoint(&self) -> String;
}

impl Endpoint for str {
    fn endpoint(&self) -> String {
        self.to_owned()
    }
}

impl Endpoint for String {
    fn endpoint(&self) -> String {
        self.clone()
    }
}

/// A client of the era, speaking straight HTTP to `url`.
pub struct Modern {
    pub url: String,
    /// What [`Modern::request`] and [`Modern::post`] speak through (30 s timeout).
    pub agent: ureq::Agent,
    /// The id of the next [`Modern::request`].
    pub next_id: u64,
    /// Sent as `Authorization: Bearer`.
    pub token: Option<String>,
    /// Declared in each request's `_meta`.
    pub capabilities: Value,
    /// Declared in each request's `_meta` when there is one.
    pub client_info: Option<Value>,
    /// Asked for in each request's `_meta` when there is one.
    pub log_level: Option<&'static str>,
}

impl Modern {
    /// A client that can sample and elicit.
    pub fn new(at: &(impl Endpoint + ?Sized)) -> Modern {
        Modern::with_capabilities(at, json!({"sampling": {}, "elicitation": {}}))
    }

    /// A client that declares `capabilities`.
    pub fn with_capabilities(at: &(impl Endpoint + ?Sized), capabilities: Value) -> Modern {
        Modern {
            url: at.endpoint(),
            agent: http_agent(Some(Duration::from_secs(30))),
            next_id: 1,
            token: None,
            capabilities,
            client_info: Some(client_info()),
            log_level: None,
        }
    }

    /// The `_meta` of this client's requests.
    pub fn meta(&self) -> Value {
        let mut meta = json!({META_VERSION: ERA, META_CAPABILITIES: self.capabilities});
        if let Some(info) = &self.client_info {
            meta[META_CLIENT_INFO] = info.clone();
        }
        if let Some(level) = self.log_level {
            meta[META_LOG_LEVEL] = json!(level);
        }
        meta
    }

    /// The headers of the era for `method` with `params`, and the token's.
    fn headers(&self, method: &str, params: &Value) -> Vec<(String, String)> {
        let mut headers = vec![("MCP-Protocol-Version".into(), ERA.into()), ("Mcp-Method".into(), method.into())];
        let named = match method {
            "tools/call" | "prompts/get" => params["name"].as_str(),
            "resources/read" => params["uri"].as_str(),
            "tasks/get" | "tasks/update" | "tasks/cancel" => params["taskId"].as_str(),
            _ => None,
        };
        if let Some(named) = named {
            headers.push(("Mcp-Name".into(), header_value(named)));
        }
        if let Some(token) = &self.token {
            headers.push(("Authorization".into(), format!("Bearer {token}")));
        }
        headers
    }

    /// Request `method` with the next id, this client's `_meta` merged into
    /// `params`, and the headers a conforming client sends with it.
    pub fn prepare(&mut self, method: &str, mut params: Value) -> (Value, Vec<(String, String)>) {
        let id = self.next_id;
        self.next_id += 1;
        let mut meta = self.meta();
        if let Some(Value::Object(extra)) = params.get("_meta") {
            for (key, value) in extra {
                meta[key] = value.clone();
            }
        }
        params["_meta"] = meta;
        let headers = self.headers(method, &params);
        (json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}), headers)
    }

    pub fn request(&mut self, method: &str, params: Value) -> Reply {
        self.request_with(method, params, &[])
    }

    /// [`Modern::request`] with `extra` headers too.
    pub fn request_with(&mut self, method: &str, params: Value, extra: &[(&str, &str)]) -> Reply {
        let (body, headers) = self.prepare(method, params);
        let mut all: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        all.extend_from_slice(extra);
        self.post(body.to_string().as_bytes(), &all)
    }

    pub fn call_tool(&mut self, name: &str, arguments: Value) -> Reply {
        self.request("tools/call", json!({"name": name, "arguments": arguments}))
    }

    pub fn tool_text(&mut self, name: &str, arguments: Value) -> String {
        self.call_tool(name, arguments).text()
    }

    /// POSTs `body` with `Content-Type`, `Accept` (unless `headers` has one) and `headers`.
    pub fn post(&self, body: &[u8], headers: &[(&str, &str)]) -> Reply {
        post_on(&self.agent, &self.url, body, headers)
    }

    /// `method` with `params` (this client's `_meta` added unless they have
    /// one), with the routing headers the era asks for, and `extra` after
    /// them: one of the same name replaces it, an empty value removes it (to
    /// break them). On a connection of its own.
    pub fn send(&self, id: Value, method: &str, params: Value, extra: &[(&str, &str)]) -> Reply {
        self.send_on(&http_agent(Some(Duration::from_secs(20))), id, method, params, extra)
    }

    /// [`Modern::send`] through `agent`: its connections kept alive from
    /// one request to the next, as an SDK's HTTP client keeps them.
    pub fn send_on(
        &self,
        agent: &ureq::Agent,
        id: Value,
        method: &str,
        params: Value,
        extra: &[(&str, &str)],
    ) -> Reply {
        let (body, headers) = self.envelope(id, method, params, extra);
        let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        post_on(agent, &self.url, body.to_string().as_bytes(), &headers)
    }

    /// [`Modern::send`] on a raw connection of its own, left unread: the
    /// test reads the answer as it comes, and closing the connection is the
    /// era's cancel.
    pub fn open(&self, id: Value, method: &str, params: Value) -> TcpStream {
        let (body, headers) = self.envelope(id, method, params, &[]);
        let addr = addr_of_url(&self.url);
        let host = addr.to_string();
        let mut all = vec![("Host", host.as_str()), ("Content-Type", "application/json"), ("Accept", ACCEPT)];
        all.extend(headers.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
        let request = http_request("POST", "/mcp", &all, body.to_string().as_bytes());
        stream.write_all(&request).unwrap_or_else(|e| panic!("send to {addr}: {e}"));
        stream
    }

    /// The JSON-RPC request of [`Modern::send`] and its headers.
    fn envelope(
        &self,
        id: Value,
        method: &str,
        mut params: Value,
        extra: &[(&str, &str)],
    ) -> (Value, Vec<(String, String)>) {
        if params.get("_meta").is_none() {
            params["_meta"] = self.meta();
        }
        let mut headers = self.headers(method, &params);
        for (k, v) in extra {
            headers.retain(|(n, _)| !n.eq_ignore_ascii_case(k));
            if !v.is_empty() {
                headers.push((k.to_string(), v.to_string()));
            }
        }
        (json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}), headers)
    }

    /// `tools/call` of `tool` with `arguments`, by [`Modern::send`].
    pub fn call(&self, id: u64, tool: &str, arguments: Value) -> Reply {
        self.send(json!(id), "tools/call", json!({"name": tool, "arguments": arguments}), &[])
    }
}

/// POSTs `body` to `url` through `agent` with `Content-Type`, `Accept`
/// (unless `headers` has one) and `headers`.
fn post_on(agent: &ureq::Agent, url: &str, body: &[u8], headers: &[(&str, &str)]) -> Reply {
    let mut request = agent.post(url).header("Content-Type", "application/json");
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("accept")) {
        request = request.header("Accept", ACCEPT);
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send(body).unwrap_or_else(|e| panic!("POST {url}: {e}"));
    Reply::of(response)
}

/// A header value as a client sends it: verbatim when it is plain ASCII, else base64-wrapped.
pub fn header_value(value: &str) -> String {
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
