//! A client of the 2026-07-28 era: no `initialize` and no session; every
//! request carries the era's `_meta` and the routing headers the era asks
//! for (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`). Its answers are
//! [`Reply`]s, as the session-era [`Client`](super::Client)'s are.

use std::net::TcpStream;
use std::time::Duration;

use serde_json::{Value, json};

use super::client::reply_of;
use super::{Reply, addr_of_url, http_agent, http_request, send};

/// The protocol version of the era.
pub const ERA: &str = "2026-07-28";

/// The `_meta` every request of the era carries: the version, the client's
/// capabilities and its info.
pub fn era_meta(capabilities: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": ERA,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "modern-test", "version": "1"},
    })
}

/// A client of the era, speaking straight HTTP to `url`.
pub struct Modern {
    pub url: String,
    /// Sent as `Authorization: Bearer`.
    pub token: Option<String>,
    /// Declared in each request's `_meta`.
    pub capabilities: Value,
}

impl Modern {
    /// A client that can sample and elicit.
    pub fn new(url: &str) -> Modern {
        Modern { url: url.to_string(), token: None, capabilities: json!({"sampling": {}, "elicitation": {}}) }
    }

    /// `method` with `params` (its `_meta` added unless it has one), with
    /// the routing headers the era asks for, and `extra` after them: one of
    /// the same name replaces it, an empty value removes it (to break them).
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
        let mut request = agent
            .post(&self.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream");
        for (k, v) in &headers {
            request = request.header(k, v);
        }
        let response = request.send(body.to_string().as_bytes()).unwrap_or_else(|e| panic!("POST {method}: {e}"));
        reply_of(response)
    }

    /// [`Modern::send`] on a raw connection of its own, left unread: the
    /// test reads the answer as it comes, and closing the connection is the
    /// era's cancel.
    pub fn open(&self, id: Value, method: &str, params: Value) -> TcpStream {
        let (body, headers) = self.envelope(id, method, params, &[]);
        let addr = addr_of_url(&self.url);
        let host = addr.to_string();
        let mut all = vec![
            ("Host", host.as_str()),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ];
        all.extend(headers.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        send(addr, &http_request("POST", "/mcp", &all, body.to_string().as_bytes()))
    }

    /// The JSON-RPC request and the headers of the era that go with it.
    fn envelope(
        &self,
        id: Value,
        method: &str,
        mut params: Value,
        extra: &[(&str, &str)],
    ) -> (Value, Vec<(String, String)>) {
        if params.get("_meta").is_none() {
            params["_meta"] = era_meta(self.capabilities.clone());
        }
        let named =
            if method.starts_with("tasks/") { params.get("taskId") } else { params.get("name").or(params.get("uri")) };
        let name = named.and_then(Value::as_str).map(str::to_string);
        let mut headers: Vec<(String, String)> =
            vec![("MCP-Protocol-Version".into(), ERA.into()), ("Mcp-Method".into(), method.into())];
        if let Some(name) = name {
            headers.push(("Mcp-Name".into(), name));
        }
        for (k, v) in extra {
            headers.retain(|(n, _)| !n.eq_ignore_ascii_case(k));
            if !v.is_empty() {
                headers.push((k.to_string(), v.to_string()));
            }
        }
        if let Some(token) = &self.token {
            headers.push(("Authorization".into(), format!("Bearer {token}")));
        }
        (json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}), headers)
    }

    /// `tools/call` of `tool` with `arguments`.
    pub fn call(&self, id: u64, tool: &str, arguments: Value) -> Reply {
        self.send(json!(id), "tools/call", json!({"name": tool, "arguments": arguments}), &[])
    }
}
