//! What an MCP server answered to one POST.

use std::io::BufReader;

use serde_json::Value;

use crate::sse::{Decoder, json_of};

/// The answer to one POST: a JSON body, or the messages of an SSE answer
/// (the last one as `body`, the others as `events`).
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub content_type: String,
    /// Its `Mcp-Session-Id`.
    pub session: Option<String>,
    /// Every header, as received.
    pub headers: Vec<(String, String)>,
    /// The messages of an SSE answer before the last one.
    pub events: Vec<Value>,
    /// The JSON body, or the last SSE message.
    pub body: Value,
}

impl Reply {
    /// Reads a response: all of its body, its SSE messages parsed.
    pub fn of(response: ureq::http::Response<ureq::Body>) -> Reply {
        let status = response.status().as_u16();
        let headers: Vec<(String, String)> = response
            .headers()
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap_or_default().to_owned()))
            .collect();
        let session = response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_string);
        let content_type = response.body().mime_type().unwrap_or_default().to_owned();
        let mut body = response.into_body();
        if content_type == "text/event-stream" {
            let mut decoder = Decoder::new(BufReader::new(body.into_reader()), 16 << 20);
            let mut events = Vec::new();
            while let Ok(Some(event)) = decoder.next_event() {
                if !event.data.trim().is_empty() {
                    events.push(json_of(&event.data));
                }
            }
            let body = events.pop().unwrap_or(Value::Null);
            return Reply { status, content_type, session, headers, events, body };
        }
        let text = body.read_to_string().unwrap_or_default();
        let body =
            if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(Value::String(text)) };
        Reply { status, content_type, session, headers, events: Vec::new(), body }
    }

    /// The result; panics with the reply when it is an error.
    pub fn result(&self) -> &Value {
        assert!(self.body.get("error").is_none(), "expected a result, got {self:?}");
        &self.body["result"]
    }

    pub fn error_code(&self) -> i64 {
        self.body["error"]["code"].as_i64().unwrap_or_else(|| panic!("expected an error, got {self:?}"))
    }

    pub fn error_message(&self) -> String {
        self.body["error"]["message"].as_str().unwrap_or_default().to_string()
    }

    /// The HTTP status and the JSON-RPC error code.
    pub fn refusal(&self) -> (u16, i64) {
        (self.status, self.error_code())
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// Whether it came as an SSE stream (`events` may hold messages) rather than JSON.
    pub fn is_sse(&self) -> bool {
        self.content_type == "text/event-stream"
    }

    /// The text of the first content item of a tool call's result.
    pub fn text(&self) -> String {
        let result = self.result();
        result["content"][0]["text"].as_str().unwrap_or_else(|| panic!("no text in {result}")).to_owned()
    }
}
