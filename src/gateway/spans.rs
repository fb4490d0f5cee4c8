//! The SERVER span of each request (or notification) mcpgate receives on
//! `/mcp`, in the MCP conventions (`protocol/spans.rs`), and its duration
//! by method (`mcp.server.operation.duration`, kept whether or not it is
//! traced).
//!
//! Its parent is the context of the request's `params._meta`, else of its
//! `traceparent` header; when both came and differ, the header's is a link,
//! as the conventions say. The span is the thread's current context while
//! the request runs: what mcpgate sends to servers for it is its child. It
//! ends when the answer is made, and what the answer says (an error, a
//! tool's `isError`) is read from it only when the span is recorded.

use std::time::Instant;

use crate::http::{HttpReply, HttpRequest, ReplyBody};
use crate::protocol::jsonrpc::{Kind, Message};
use crate::protocol::spans;
use crate::runtime::trace::{self, Context, Entered, Span};
use crate::stats::Stats;

use super::{SESSION_HEADER, VERSION_HEADER};

/// A request being served: its duration runs, its span (if traced) is current.
pub(super) struct Received<'m> {
    stats: &'m Stats,
    method: &'m str,
    started: Instant,
    span: Option<Span>,
    /// The keys to redact when the results go on the span (`tracing.capture_results`).
    results: Option<Vec<String>>,
    /// Makes its context the thread's current one while it runs.
    _current: Option<Entered>,
}

/// Starts serving `message`, which came in `req`; `None` for what is not a
/// request or a notification (a client's answer to a server).
pub(super) fn received<'m>(stats: &'m Stats, req: &HttpRequest, message: &'m Message) -> Option<Received<'m>> {
    if !matches!(message.kind(), Ok(Kind::Request | Kind::Notification)) {
        return None;
    }
    let mut received = Received {
        stats,
        method: message.method(),
        started: Instant::now(),
        span: None,
        results: None,
        _current: None,
    };
    if !trace::enabled() {
        return Some(received);
    }
    let header = req
        .header("traceparent")
        .and_then(|tp| Context::from_parts(tp, req.header("tracestate"), req.header("baggage")));
    let meta = spans::meta_context(message.params.as_deref());
    let link = header.as_ref().filter(|h| meta.as_ref().is_some_and(|m| m.span != h.span)).map(|h| h.span);
    let begun = trace::begin(trace::Kind::Server, meta.or(header));
    received._current = Some(trace::enter(begun.context));
    let (Some(mut span), Some(config)) = (begun.span, trace::config()) else { return Some(received) };
    let arguments = config.capture_arguments.then_some(&config.redact[..]);
    let target = spans::Target::of(message.params.as_deref());
    spans::describe(&mut span, message.method(), message.id.as_ref(), target, arguments);
    if let Some(link) = link {
        span.link(link);
    }
    if let Some(session) = req.header(SESSION_HEADER) {
        span.set("mcp.session.id", session);
    }
    if let Some(version) = req.header(VERSION_HEADER) {
        span.set("mcp.protocol.version", version);
    }
    span.set("network.transport", "tcp");
    span.set("network.protocol.name", "http");
    span.set("network.protocol.version", if req.http11 { "1.1" } else { "1.0" });
    if let Some(peer) = req.peer {
        span.set("client.address", peer.ip().to_string());
        span.set("client.port", i64::from(peer.port()));
    }
    received.results = config.capture_results.then(|| config.redact.clone());
    received.span = Some(span);
    Some(received)
}

impl Received<'_> {
    /// Its answer was `reply`: the span (if any) says how it ended, and ends.
    pub(super) fn answered(mut self, reply: &HttpReply) {
        let Some(mut span) = self.finish() else { return };
        if let Some((_, session)) = reply.headers.iter().find(|(name, _)| name.eq_ignore_ascii_case(SESSION_HEADER)) {
            span.set("mcp.session.id", session.as_str());
        }
        match answer_of(&reply.body) {
            Some(answer) => self.read(&mut span, &answer),
            None if reply.status >= 400 => {
                span.set("error.type", reply.status.to_string());
                span.fail(format!("HTTP {}", reply.status));
            }
            None => {}
        }
        span.end();
    }

    /// Its answer, inside a batch, was `answer` (none for a notification or a cancel).
    pub(super) fn answered_with(mut self, answer: Option<&[u8]>) {
        let Some(mut span) = self.finish() else { return };
        if let Some(answer) = answer.and_then(|a| Message::parse(a).ok()) {
            self.read(&mut span, &answer);
        }
        span.end();
    }

    /// Counts its duration, and takes its span out.
    fn finish(&mut self) -> Option<Span> {
        self.stats.operation_duration.observe(self.method, self.started.elapsed());
        self.span.take()
    }

    fn read(&self, span: &mut Span, answer: &Message) {
        spans::answered(span, self.method, answer, self.results.as_deref());
        if self.method == "initialize"
            && let Some(result) = &answer.result
            && let Ok(result) = serde_json::from_str::<serde_json::Value>(result.get())
            && let Some(version) = result["protocolVersion"].as_str()
        {
            span.set("mcp.protocol.version", version);
        }
    }
}

/// The JSON-RPC answer a reply carries: its JSON body, the last event of an
/// SSE answer, or a server's result passed on as it came.
fn answer_of(body: &ReplyBody) -> Option<Message> {
    match body {
        ReplyBody::Data { content_type: "application/json", bytes } => Message::parse(bytes).ok(),
        ReplyBody::Data { content_type: "text/event-stream", bytes } => {
            let text = std::str::from_utf8(bytes).ok()?;
            let last = text.trim_end().rsplit("\n\n").next()?;
            let data: Vec<&str> = last.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim_start).collect();
            Message::parse(data.join("\n").as_bytes()).ok()
        }
        ReplyBody::Answer { result, .. } => Some(Message {
            jsonrpc: None,
            id: None,
            method: None,
            params: None,
            result: Some(result.clone()),
            error: None,
            held: None,
        }),
        _ => None,
    }
}
