//! What a handler sees of one exchange, and what it gives back: the plain
//! [`HttpRequest`] (its [`Headers`], its [`Client`]), the [`HttpReply`] or
//! [`HttpError`], the [`EventSink`] an answer streams to, the [`App`] that
//! handles requests, and the front door's [`Options`]. The files that read
//! requests and write replies (`request`, `response`, `server`) stand on it.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use crossbeam_channel::Receiver;
use serde_json::Value;

use crate::protocol::jsonrpc::{self, RpcError};
use crate::runtime::memory::{Charge, Event};

/// Request headers the handlers may read; the others are not copied.
pub(super) const HEADERS: &[&str] = &[
    "accept",
    "content-type",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
    "origin",
    "host",
    "authorization",
    "mcp-method",
    "mcp-name",
    // The W3C trace context of a client (`tracing`).
    "traceparent",
    "tracestate",
    "baggage",
    // The sign-in pages' cookie (`/oauth/`): which browser opened a link.
    "cookie",
    // A request one mcpgate instance passed to the one holding its session.
    "mcpgate-forwarded",
];

/// The request headers handlers may read ([`HEADERS`]): lower-case names,
/// their values side by side in one buffer, so a request's headers cost
/// one allocation, not one each.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Headers {
    text: String,
    at: Vec<(&'static str, std::ops::Range<usize>)>,
}

impl Headers {
    /// Room for values of `text` bytes in all: a request's come from its
    /// head, so they fit in its length.
    pub(crate) fn with_capacity(text: usize) -> Headers {
        Headers { text: String::with_capacity(text), at: Vec::with_capacity(HEADERS.len()) }
    }

    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.at.iter().find(|(n, _)| *n == name).map(|(_, r)| &self.text[r.clone()])
    }

    /// Adds `name`; a name already there keeps its first value.
    pub(crate) fn push(&mut self, name: &'static str, value: &str) {
        let start = self.text.len();
        self.text.push_str(value);
        self.at.push((name, start..self.text.len()));
    }

    /// Appends `value` to `name`'s list (`, ` between), or adds it.
    pub(crate) fn join(&mut self, name: &'static str, value: &str) {
        let Some(i) = self.at.iter().position(|(n, _)| *n == name) else { return self.push(name, value) };
        let old = self.at[i].1.clone();
        let start = self.text.len();
        self.text.extend_from_within(old);
        self.text.push_str(", ");
        self.text.push_str(value);
        self.at[i].1 = start..self.text.len();
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&'static str, &str)> {
        self.at.iter().map(|(n, r)| (*n, &self.text[r.clone()]))
    }
}

/// A request as the handlers see it.
#[derive(Debug, Clone, Default)]
pub struct HttpRequest {
    pub method: String,
    /// The path without the query.
    pub(crate) path: String,
    /// The query, without its `?` (empty when none): the sign-in pages read it.
    pub(crate) query: String,
    /// Lower-case names, from [`HEADERS`] only.
    pub(crate) headers: Headers,
    /// `Mcp-Param-*` headers (2026-07-28), lower-case names: forwarded as they came.
    pub(crate) params: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub(crate) peer: Option<SocketAddr>,
    pub(crate) http11: bool,
    /// The client's connection, to notice that it went away mid-request.
    pub(crate) client: Option<Client>,
}

/// The connection a request came on, as a handler may look at it.
#[derive(Clone)]
pub(crate) struct Client(pub(super) std::sync::Arc<super::stream::Stream>);

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_tls() { "Client(tls)" } else { "Client(plain)" })
    }
}

impl Client {
    /// Whether the client closed the connection (its side of it).
    pub(crate) fn gone(&self) -> bool {
        self.0.peer_closed()
    }
}

impl HttpRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name)
    }
}

/// A `GET` stream: SSE events (already encoded) to send, `first` and then
/// from `rx` until it disconnects or a write fails; then `on_end` runs.
pub struct StreamReply {
    pub(crate) first: Vec<Event>,
    pub(crate) rx: Receiver<Event>,
    pub(crate) keepalive: Duration,
    pub(crate) on_end: Box<dyn FnOnce() + Send>,
}

pub enum ReplyBody {
    Empty,
    Data {
        content_type: &'static str,
        bytes: Vec<u8>,
    },
    /// A JSON-RPC response around a result as its server wrote it
    /// (`jsonrpc::result_head`, the result, `jsonrpc::RESULT_TAIL`),
    /// written in one go without joining them: a 1 MB result is not
    /// copied once more.
    Answer {
        head: Vec<u8>,
        result: jsonrpc::Json,
    },
    Stream(StreamReply),
}

impl ReplyBody {
    /// The body's parts, in order (nothing for a stream).
    pub(crate) fn parts(&self) -> [&[u8]; 3] {
        match self {
            ReplyBody::Empty | ReplyBody::Stream(_) => [&[], &[], &[]],
            ReplyBody::Data { bytes, .. } => [bytes, &[], &[]],
            ReplyBody::Answer { head, result } => [head, result.get().as_bytes(), jsonrpc::RESULT_TAIL],
        }
    }
}

/// The size from which a result is written in parts rather than copied.
const ANSWER_IN_PARTS: usize = 16 * 1024;

pub struct HttpReply {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: ReplyBody,
    /// What the body holds against `max_memory_mb`, until it is written.
    pub held: Option<Charge>,
}

impl HttpReply {
    pub(crate) fn json(status: u16, bytes: Vec<u8>) -> HttpReply {
        HttpReply {
            status,
            headers: Vec::new(),
            body: ReplyBody::Data { content_type: "application/json", bytes },
            held: None,
        }
    }

    /// A JSON-RPC response (HTTP 200) carrying `result` as it came, with
    /// `id`. A small result is joined into one buffer (measured: writing
    /// 100 B results in parts cost more CPU than copying them); a large one
    /// goes out in parts, uncopied.
    pub(crate) fn answer(id: &Value, result: jsonrpc::Json) -> HttpReply {
        if result.get().len() < ANSWER_IN_PARTS {
            return HttpReply::json(200, jsonrpc::result_text(id, &result));
        }
        HttpReply {
            status: 200,
            headers: Vec::new(),
            body: ReplyBody::Answer { head: jsonrpc::result_head(id), result },
            held: None,
        }
    }

    /// A JSON-RPC error as the body of an HTTP error (or of a 200).
    pub(crate) fn error(status: u16, id: &Value, error: &RpcError) -> HttpReply {
        HttpReply::json(status, jsonrpc::error(id, error))
    }

    /// An HTTP error whose body is a JSON-RPC "invalid request" saying why.
    pub fn bad(status: u16, message: &str) -> HttpReply {
        HttpReply::error(status, &Value::Null, &RpcError::new(jsonrpc::INVALID_REQUEST, message))
    }

    pub fn empty(status: u16) -> HttpReply {
        HttpReply { status, headers: Vec::new(), body: ReplyBody::Empty, held: None }
    }

    pub(crate) fn accepted() -> HttpReply {
        HttpReply::empty(202)
    }

    pub(crate) fn text(status: u16, content_type: &'static str, text: String) -> HttpReply {
        HttpReply {
            status,
            headers: Vec::new(),
            body: ReplyBody::Data { content_type, bytes: text.into_bytes() },
            held: None,
        }
    }

    /// The last event of an SSE answer to a `POST` (already encoded).
    pub(crate) fn sse(event: Vec<u8>) -> HttpReply {
        HttpReply {
            status: 200,
            headers: Vec::new(),
            body: ReplyBody::Data { content_type: "text/event-stream", bytes: event },
            held: None,
        }
    }

    pub(crate) fn stream(stream: StreamReply) -> HttpReply {
        HttpReply { status: 200, headers: Vec::new(), body: ReplyBody::Stream(stream), held: None }
    }

    /// The body's charge against `max_memory_mb` (if it has one), kept
    /// until it is written.
    pub(crate) fn holding(mut self, charge: Option<Charge>) -> HttpReply {
        self.held = charge;
        self
    }

    pub fn header(mut self, name: &'static str, value: &str) -> HttpReply {
        self.headers.push((name, value.to_string()));
        self
    }
}

/// A request refused before a handler saw it (Host, Origin, token, access
/// to the status pages, a path or method not served): the status, the
/// JSON-RPC error saying why, and a header the refusal needs
/// (`WWW-Authenticate`, `Allow`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HttpError {
    pub(crate) status: u16,
    pub(crate) error: RpcError,
    pub(crate) header: Option<(&'static str, String)>,
}

impl HttpError {
    pub(crate) fn new(status: u16, message: impl Into<String>) -> HttpError {
        HttpError { status, error: RpcError::new(jsonrpc::INVALID_REQUEST, message), header: None }
    }

    pub(crate) fn with_header(mut self, name: &'static str, value: impl Into<String>) -> HttpError {
        self.header = Some((name, value.into()));
        self
    }

    /// The answer: the status, with a JSON-RPC error body.
    pub(crate) fn reply(&self) -> HttpReply {
        self.reply_to(&Value::Null)
    }

    /// The answer to the JSON-RPC request `id`.
    pub(crate) fn reply_to(&self, id: &Value) -> HttpReply {
        let reply = HttpReply::error(self.status, id, &self.error);
        match &self.header {
            Some((name, value)) => reply.header(name, value),
            None => reply,
        }
    }
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HTTP {}: {}", self.status, self.error.message)
    }
}

impl std::error::Error for HttpError {}

/// Where a handler sends events (SSE-encoded) that precede its answer. The
/// first event turns the answer into an SSE stream.
pub trait EventSink {
    /// Whether this answer can become an SSE stream at all.
    fn can_stream(&self) -> bool;
    fn event(&mut self, sse: &[u8]) -> io::Result<()>;
}

/// A sink for answers that cannot stream (batches, inline answers).
pub(crate) struct NoStream;

impl EventSink for NoStream {
    fn can_stream(&self) -> bool {
        false
    }

    fn event(&mut self, _: &[u8]) -> io::Result<()> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "this answer cannot stream"))
    }
}

/// The application behind the adapter. A request runs on the thread of
/// its connection: a pool of worker threads fed by the connection threads
/// cost two wake-ups per request, about 100 µs and a fifth of the
/// throughput on a 2-core host (docs/BENCHMARKS.md).
pub trait App: Send + Sync + 'static {
    fn handle(&self, req: &HttpRequest, sink: &mut dyn EventSink) -> HttpReply;
}

/// Limits and deadlines of the front door.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub max_connections: usize,
    pub max_body_bytes: usize,
    pub max_header_count: usize,
    /// Bytes of a request head: request line and headers.
    pub max_header_bytes: usize,
    /// Idle time between two requests of a keep-alive connection.
    pub idle_timeout: Duration,
    /// The longest a request head may take from its first byte; its body
    /// gets this again plus one second per 64 KiB.
    pub header_timeout: Duration,
    /// The longest a client may take to accept 64 KiB of its answer.
    pub write_timeout: Duration,
}

/// Paths answered on the slots kept for loopback peers when every other
/// slot is busy: enough for systemd's watchdog, a load balancer's health
/// check, a Prometheus scrape and an operator looking at the status page.
pub(crate) const RESERVED_PATHS: &[&str] = &["/healthz", "/status", "/status.json", "/metrics"];
