//! The CLIENT span of each request mcpgate sends to a server, in the MCP
//! conventions (`protocol/spans.rs`), and its duration by server and
//! method (`mcp.client.operation.duration`, kept whether or not it is
//! traced).
//!
//! The span is a child of the thread's current context (the request being
//! served, carried to fan-out and held-call threads), or starts a trace of
//! its own (a list fetched after `list_changed`) when the ratio draws it.
//! Its context goes to the server in `params._meta`, the only carrier a
//! stdio server has, and in the `traceparent` and `tracestate` headers of
//! an HTTP request (`http/endpoint.rs` reads it while the request is sent).

use std::time::Instant;

use serde_json::Value;

use super::error::DownstreamError;
use crate::protocol::jsonrpc::{Message, Params};
use crate::protocol::spans;
use crate::runtime::trace::{self, Entered, Span};
use crate::stats::ServerStats;

/// A request on its way: its duration runs, its span (if traced) too.
pub(super) struct Sent<'m> {
    method: &'m str,
    started: Instant,
    span: Option<Span>,
    /// The keys to redact when the results go on the span (`tracing.capture_results`).
    results: Option<Vec<String>>,
    /// Its context, for the request's HTTP headers, while it is sent.
    _outgoing: Option<Entered>,
}

/// Starts sending `method` (as `id`, with `params`) to the server at `url`
/// (none for a child's pipe), on its session `session_id` speaking
/// `version` (none while it opens): the params to send instead, when the
/// context goes in their `_meta`.
pub(super) fn sending<'m, 'p>(
    url: Option<&str>,
    session_id: Option<&str>,
    version: Option<&str>,
    method: &'m str,
    id: &Value,
    params: Option<&Params<'p>>,
) -> (Sent<'m>, Option<Params<'p>>) {
    let mut sent = Sent { method, started: Instant::now(), span: None, results: None, _outgoing: None };
    if !trace::enabled() {
        return (sent, None);
    }
    let begun = trace::begin(trace::Kind::Client, trace::current());
    let Some(context) = begun.context else { return (sent, None) };
    let traced = spans::with_context(params, &context);
    sent._outgoing = Some(trace::sending(Some(context)));
    let (Some(mut span), Some(config)) = (begun.span, trace::config()) else { return (sent, traced) };
    let arguments = config.capture_arguments.then_some(&config.redact[..]);
    spans::describe(&mut span, method, Some(id), spans::Target::from_params(params), arguments);
    if let Some(session) = session_id {
        span.set("mcp.session.id", session);
    }
    if let Some(version) = version {
        span.set("mcp.protocol.version", version);
    }
    match url {
        None => span.set("network.transport", "pipe"),
        Some(url) => {
            span.set("network.transport", "tcp");
            span.set("network.protocol.name", "http");
            if let Some((host, port)) = host_and_port(url) {
                span.set("server.address", host);
                span.set("server.port", i64::from(port));
            }
        }
    }
    sent.results = config.capture_results.then(|| config.redact.clone());
    sent.span = Some(span);
    (sent, traced)
}

impl Sent<'_> {
    /// The server answered (or did not): the duration is counted in its
    /// server's `metrics`, the span says how it ended (an error's text
    /// through `redact`, which takes out the server's secrets).
    pub(super) fn end(
        self,
        metrics: &ServerStats,
        result: Result<&Message, &DownstreamError>,
        redact: impl FnOnce(&str) -> String,
    ) {
        metrics.operation_duration.observe(self.method, self.started.elapsed());
        let Some(mut span) = self.span else { return };
        match result {
            Ok(answer) => spans::answered(&mut span, self.method, answer, self.results.as_deref()),
            Err(e) => {
                span.set("error.type", e.kind());
                span.fail(redact(&e.to_string()));
            }
        }
        span.end();
    }
}

/// The host and port of an `http://` or `https://` URL (the scheme's port when none is written).
fn host_and_port(url: &str) -> Option<(String, u16)> {
    let uri: ureq::http::Uri = url.parse().ok()?;
    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']').to_string();
    let port = uri.port_u16().unwrap_or(if uri.scheme_str() == Some("https") { 443 } else { 80 });
    Some((host, port))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_server_url_gives_its_host_and_port() {
        assert_eq!(super::host_and_port("http://127.0.0.1:9001/mcp"), Some(("127.0.0.1".into(), 9001)));
        assert_eq!(super::host_and_port("https://mcp.example.com/mcp"), Some(("mcp.example.com".into(), 443)));
        assert_eq!(super::host_and_port("http://[::1]/mcp"), Some(("::1".into(), 80)));
    }
}
