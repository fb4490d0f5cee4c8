//! `/mcp` over Streamable HTTP, the MCP transport: everything that touches
//! a request or a reply. A `POST` of the 2026-07-28 era goes on to
//! `stateless`; the rest is the session era's. The
//! checks a `POST`, `GET` or `DELETE` must pass (Accept, content type,
//! protocol version, session, token scope), `initialize`, batches, and the
//! answer of a `POST` (JSON, or an SSE stream that can be resumed).

use std::sync::Arc;

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::http::auth::Access;
use crate::http::{EventSink, HttpReply, HttpRequest, NoStream, StreamReply};
use crate::protocol::jsonrpc::{self, Kind, Message, RpcError};
use crate::protocol::versions::{self, SUPPORTED};
use crate::runtime::memory::Charge;
use crate::session::{self, CloseReason, Session};

use super::dispatch::{self, instructions};
use super::outcome::{CallEvents, Outcome};
use super::refusal::{Why, refuse, reply, reply_to};
use super::stateless::Stateless;
use super::{Gateway, SESSION_HEADER, UNSUPPORTED_PROTOCOL_VERSION, VERSION_HEADER, visible};
use super::{accepts, new_session_id, too_busy};
use crate::downstream::Server;

/// The answer to one `POST`: JSON, unless a message for the client comes
/// first; then an SSE stream that opens with a priming event, whose events
/// are kept so a client that lost the connection can resume it with `GET`
/// and `Last-Event-ID`.
pub(super) struct PostStream<'a> {
    session: &'a Session,
    sink: &'a mut dyn EventSink,
    stream: Option<u64>,
    /// How long the client may take to answer what mcpgate asks it for a
    /// server of the 2026-07-28 era (`held_call_timeout_secs`).
    ask_timeout: std::time::Duration,
    /// The request, carried in the priming event's id (a call, with a
    /// session store: another instance can answer it if this one dies).
    request: Option<&'a [u8]>,
}

impl PostStream<'_> {
    pub(super) fn ask_timeout(&self) -> std::time::Duration {
        self.ask_timeout
    }

    pub(super) fn send(&mut self, message: Vec<u8>) {
        let Some(stream) = self.start_stream() else {
            // This answer cannot stream (HTTP/1.0, a batch): the GET stream carries it.
            self.session.push_to_stream(message);
            return;
        };
        let bytes = self.session.post_event(stream, &message, false);
        let _ = self.sink.event(&bytes);
    }

    /// Makes the answer an SSE stream now, if it can be one: its head goes
    /// out (with the priming event, or a comment).
    pub(super) fn start(&mut self) {
        if self.stream.is_none()
            && let Some(stream) = self.start_stream()
            && self.session.priming(stream, None).is_none()
        {
            let _ = self.sink.event(b": mcpgate: the server is working on it\n\n");
        }
    }

    /// The stream of this answer, opened on first use; `None` when the
    /// answer cannot stream.
    fn start_stream(&mut self) -> Option<u64> {
        if let Some(stream) = self.stream {
            return Some(stream);
        }
        if !self.sink.can_stream() {
            return None;
        }
        let stream = self.session.open_post_stream();
        if let Some(priming) = self.session.priming(stream, self.request) {
            // A client that went away can resume from the replay log.
            let _ = self.sink.event(&priming);
        }
        self.stream = Some(stream);
        Some(stream)
    }

    /// The answer's end for `outcome`: a server's result that did not
    /// stream is written around as it came, not copied into one buffer.
    fn finish_with(self, id: &Value, outcome: Outcome) -> HttpReply {
        match outcome {
            Outcome::Forwarded(Message { result: Some(result), .. }) if self.stream.is_none() => {
                HttpReply::answer(id, result)
            }
            mut outcome => {
                // A server's answer, copied into the answer's bytes, brings the charge of the body it came in.
                let held = outcome.take_held();
                self.finish(answer_bytes(id, outcome)).holding(held)
            }
        }
    }

    /// The answer's end: the response, or (cancelled) an SSE answer that
    /// ends without one.
    fn finish(self, answer: Option<Vec<u8>>) -> HttpReply {
        match (self.stream, answer) {
            (None, Some(answer)) => HttpReply::json(200, answer),
            (Some(stream), Some(answer)) => HttpReply::sse(self.session.post_event(stream, &answer, true)),
            (Some(stream), None) => {
                self.session.end_post_stream(stream);
                HttpReply::sse(Vec::new())
            }
            (None, None) => HttpReply::sse(Vec::new()),
        }
    }
}

/// The answer to a batch as it grows, charged to `max_memory_mb` and held
/// to the session's share of it: an answer that does not fit is replaced by
/// an error naming the limit, and once one did not fit, the requests left
/// are not run.
struct BatchAnswer {
    bytes: Vec<u8>,
    charge: Charge,
    share: usize,
    refused: bool,
}

impl BatchAnswer {
    fn new(share: usize) -> BatchAnswer {
        BatchAnswer { bytes: b"[".to_vec(), charge: Charge::empty(), share, refused: false }
    }

    fn spent(&self) -> bool {
        self.refused
    }

    fn refusal(&self) -> RpcError {
        RpcError::internal(format!(
            "the answer to this batch passed this session's share of max_memory_mb ({} bytes); send fewer \
             requests in one batch",
            self.share
        ))
    }

    /// A small answer (an error), counted but never refused.
    fn push(&mut self, answer: Vec<u8>) {
        self.charge.grow(answer.len());
        self.append(&answer);
    }

    fn push_or_refuse(&mut self, id: &Value, answer: Vec<u8>) {
        if self.bytes.len() + answer.len() > self.share || !self.charge.grow(answer.len()) {
            self.refused = true;
            let refusal = jsonrpc::error(id, &self.refusal());
            return self.push(refusal);
        }
        self.append(&answer);
    }

    fn append(&mut self, answer: &[u8]) {
        if self.bytes.len() > 1 {
            self.bytes.push(b',');
        }
        self.bytes.extend_from_slice(answer);
    }

    fn reply(mut self) -> HttpReply {
        if self.bytes.len() == 1 {
            return HttpReply::accepted();
        }
        self.bytes.push(b']');
        HttpReply::json(200, self.bytes).holding(Some(self.charge))
    }
}

/// The response to send, if any.
fn answer_bytes(id: &Value, outcome: Outcome) -> Option<Vec<u8>> {
    Some(match outcome {
        Outcome::Cancelled => return None,
        Outcome::Result(value) => jsonrpc::result(id, &jsonrpc::raw(&value)),
        Outcome::Error(e) => jsonrpc::error(id, &e),
        Outcome::Forwarded(m) => match (&m.result, &m.error) {
            (Some(result), _) => jsonrpc::result_text(id, result),
            (None, Some(error)) => jsonrpc::raw_error(id, error),
            (None, None) => {
                jsonrpc::error(id, &RpcError::internal("the server's response had neither result nor error"))
            }
        },
    })
}

/// The most bytes of a client's `capabilities` mcpgate keeps (and sends to
/// every server, and writes to the state file): those of today's clients
/// are a few hundred.
pub(crate) const MAX_CAPABILITIES_BYTES: usize = 16 * 1024;
/// The most bytes of `clientInfo`'s `name`, `title` and `version`.
pub(crate) const MAX_CLIENT_INFO_FIELD: usize = 256;

/// What mcpgate keeps of a client's `initialize` params: its capabilities,
/// at most [`MAX_CAPABILITIES_BYTES`], and of `clientInfo` the name, title
/// and version, at most [`MAX_CLIENT_INFO_FIELD`] each (its icons or
/// description would go to every server and into the state file: a 3 MB
/// `clientInfo` made a 60 MB state file of 20 sessions). Larger ones are
/// refused with -32602 naming the limit.
fn kept_params(params: &Map<String, Value>) -> Result<(Value, Value), RpcError> {
    let capabilities = params.get("capabilities").cloned().unwrap_or_else(|| json!({}));
    if !capabilities.is_object() {
        return Err(RpcError::invalid_params("initialize: `capabilities` must be an object"));
    }
    let size = capabilities.to_string().len();
    if size > MAX_CAPABILITIES_BYTES {
        return Err(RpcError::invalid_params(format!(
            "initialize: `capabilities` is {size} bytes; mcpgate keeps at most {MAX_CAPABILITIES_BYTES}"
        )));
    }
    let mut kept = Map::new();
    let info = params.get("clientInfo").and_then(Value::as_object);
    for field in ["name", "title", "version"] {
        let Some(value) = info.and_then(|i| i.get(field)).filter(|v| !v.is_null()) else { continue };
        let Some(text) = value.as_str() else {
            return Err(RpcError::invalid_params(format!("initialize: `clientInfo.{field}` must be a string")));
        };
        if text.len() > MAX_CLIENT_INFO_FIELD {
            return Err(RpcError::invalid_params(format!(
                "initialize: `clientInfo.{field}` is {} bytes; mcpgate keeps at most {MAX_CLIENT_INFO_FIELD}",
                text.len()
            )));
        }
        kept.insert(field.into(), value.clone());
    }
    kept.entry("name").or_insert_with(|| json!("unknown"));
    kept.entry("version").or_insert_with(|| json!("0"));
    Ok((capabilities, Value::Object(kept)))
}

/// `GET` and `DELETE` of the session era, asked in the 2026-07-28 era: 405.
fn no_stream_in_2026(req: &HttpRequest) -> Option<HttpReply> {
    (req.header(VERSION_HEADER) == Some(crate::protocol::stateless::VERSION))
        .then(|| refuse(Why::NoSessions, format!("protocol 2026-07-28 has no sessions: use POST, not {}", req.method)))
}

/// Handles `/mcp` (the route table let only its methods through). Events
/// a `POST` sends before its answer go to `sink`.
pub(crate) fn mcp(
    g: &Gateway,
    st: &Stateless,
    req: &HttpRequest,
    sink: &mut dyn EventSink,
    access: &Access,
) -> HttpReply {
    g.stats.requests.inc();
    match req.method.as_str() {
        "POST" => post(g, st, req, sink, access),
        "GET" => get(g, req, access),
        _ => delete(g, req, access),
    }
}

fn post(g: &Gateway, st: &Stateless, req: &HttpRequest, sink: &mut dyn EventSink, access: &Access) -> HttpReply {
    let accept = req.header("accept").unwrap_or("");
    if !(accepts(accept, "application/json") && accepts(accept, "text/event-stream")) {
        return refuse(Why::NotAcceptable, "Accept must list both application/json and text/event-stream");
    }
    let content_type = req.header("content-type").unwrap_or("");
    if !content_type.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case("application/json") {
        return refuse(Why::NotJson, "Content-Type must be application/json");
    }
    let body = req.body.trim_ascii_start();
    let stateless_header = req.header(VERSION_HEADER) == Some(crate::protocol::stateless::VERSION);
    if body.first() == Some(&b'[') {
        if stateless_header {
            return refuse(Why::Malformed, "protocol 2026-07-28 takes a single JSON-RPC request, not a batch");
        }
        return batch(g, req, body, access);
    }
    let message = match Message::parse(body) {
        Ok(m) => m,
        Err(e) => return reply(Why::Malformed, &e),
    };
    let received = super::spans::received(&g.stats, req, &message);
    let reply = post_message(g, st, req, &message, sink, access);
    if let Some(received) = received {
        received.answered(&reply);
    }
    reply
}

/// A `POST` of one message, read.
fn post_message(
    g: &Gateway,
    st: &Stateless,
    req: &HttpRequest,
    message: &Message,
    sink: &mut dyn EventSink,
    access: &Access,
) -> HttpReply {
    // A discover that finds only the session era is answered as that era would answer it.
    let discover_refused = message.method() == "server/discover" && !st.offers_2026(g, access);
    if discover_refused && req.header(SESSION_HEADER).is_none() {
        return Stateless::discover_session_era(message);
    }
    if !discover_refused && super::stateless::is_stateless(req, message) {
        return st.post(g, req, message, sink, access);
    }
    if message.method() == "initialize" && message.kind() == Ok(Kind::Request) {
        return initialize(g, message, access);
    }
    if let Some(elsewhere) = g.failover().elsewhere(req, sink) {
        return elsewhere;
    }
    let session = match session_of(g, req, access) {
        Ok(s) => s,
        Err((why, e)) => return reply_to(why, message.id.as_ref().unwrap_or(&Value::Null), &e),
    };
    // Only requests count against max_requests_per_session: an answer or
    // a cancel may be what ends the requests in flight.
    let limit = match message.kind() {
        Ok(Kind::Request) => g.current().config.max_requests_per_session,
        _ => usize::MAX,
    };
    let Some(_request) = session.begin_request(limit) else {
        return too_busy(&session);
    };
    match message.kind() {
        Ok(Kind::Request) => {
            let id = message.id.clone().unwrap_or(Value::Null);
            if let Err(limited) = g.rate_check(&session, message) {
                return limited.reply(&id, &session.who);
            }
            let _id = match session.claim_request_id(&id) {
                Ok(claim) => claim,
                Err(e) => return HttpReply::json(200, jsonrpc::error(&id, &e)),
            };
            // With a store, a call's answer streams from the start: its
            // priming event carries it, so that the instance a client
            // resumes on, if this one dies, can answer it.
            let carried = g.store.shared.is_some()
                && message.method() == "tools/call"
                && versions::primes_streams(&session.protocol_version);
            let mut events = PostStream {
                session: &session,
                sink,
                stream: None,
                ask_timeout: g.current().config.held_call_timeout,
                request: carried.then_some(req.body.trim_ascii_start()),
            };
            if carried {
                events.start();
            }
            let answer = dispatch::request(g, &session, message, &mut events);
            events.finish_with(&id, answer)
        }
        Ok(Kind::Notification) => {
            dispatch::client_notification(&session, message);
            HttpReply::accepted()
        }
        Ok(Kind::Response) => {
            dispatch::client_answer(&session, message);
            HttpReply::accepted()
        }
        Err(e) => reply(Why::Malformed, &e),
    }
}

/// A JSON-RPC batch: only for sessions on protocol 2025-03-26, which had
/// them. At most `max_batch_entries`, its requests counted against
/// `max_requests_per_session` (one batch of 3,000 `tools/list` made a
/// 327 MB answer on one thread), and its answer charged as it grows:
/// past the session's share of `max_memory_mb`, the entries left get an
/// error naming it and are not run.
fn batch(g: &Gateway, req: &HttpRequest, body: &[u8], access: &Access) -> HttpReply {
    let items: Vec<Box<RawValue>> = match serde_json::from_slice(body) {
        Ok(items) => items,
        Err(e) => {
            return reply(Why::Malformed, &RpcError::new(jsonrpc::PARSE_ERROR, format!("parse error: {e}")));
        }
    };
    if let Some(elsewhere) = g.failover().elsewhere(req, &mut NoStream) {
        return elsewhere;
    }
    let session = match session_of(g, req, access) {
        Ok(s) => s,
        Err((why, e)) => return reply(why, &e),
    };
    if !versions::has_batches(&session.protocol_version) {
        let e = RpcError::new(
            jsonrpc::INVALID_REQUEST,
            format!(
                "JSON-RPC batches were removed in protocol 2025-06-18; this session speaks {}",
                session.protocol_version
            ),
        );
        return reply(Why::Malformed, &e);
    }
    if items.is_empty() {
        return refuse(Why::Malformed, "empty batch");
    }
    let config = &g.current().config;
    if items.len() > config.max_batch_entries {
        let e = RpcError::new(
            jsonrpc::INVALID_REQUEST,
            format!(
                "this batch has {} entries; mcpgate takes at most {} (max_batch_entries)",
                items.len(),
                config.max_batch_entries
            ),
        );
        return reply(Why::Malformed, &e);
    }
    let messages: Vec<Result<Message, RpcError>> =
        items.iter().map(|item| Message::parse(item.get().as_bytes())).collect();
    let requests = messages.iter().filter(|m| matches!(m, Ok(m) if m.kind() == Ok(Kind::Request))).count();
    let Some(_requests) = session.begin_requests(requests.max(1), config.max_requests_per_session) else {
        return too_busy(&session);
    };
    let mut answer = BatchAnswer::new(crate::runtime::memory::share());
    // Held for the whole batch: its requests are all outstanding at once.
    let mut claims = Vec::new();
    for message in messages {
        let message = match message {
            Ok(m) => m,
            Err(e) => {
                answer.push(jsonrpc::error(&Value::Null, &e));
                continue;
            }
        };
        let id = message.id.clone().unwrap_or(Value::Null);
        let received = super::spans::received(&g.stats, req, &message);
        let before = answer.bytes.len();
        match message.kind() {
            Ok(Kind::Request) if message.method() == "initialize" => {
                let e = RpcError::new(jsonrpc::INVALID_REQUEST, "initialize cannot be part of a batch");
                answer.push(jsonrpc::error(&id, &e));
            }
            Ok(Kind::Request) if answer.spent() => answer.push(jsonrpc::error(&id, &answer.refusal())),
            Ok(Kind::Request) if let Err(limited) = g.rate_check(&session, &message) => {
                answer.push(jsonrpc::error(&id, &limited.error(&session.who)))
            }
            Ok(Kind::Request) => match session.claim_request_id(&id) {
                Ok(claim) => {
                    claims.push(claim);
                    let mut events = PostStream {
                        session: &session,
                        sink: &mut NoStream,
                        stream: None,
                        ask_timeout: config.held_call_timeout,
                        request: None,
                    };
                    let outcome = dispatch::request(g, &session, &message, &mut events);
                    if let Some(bytes) = answer_bytes(&id, outcome) {
                        answer.push_or_refuse(&id, bytes);
                    }
                }
                Err(e) => answer.push(jsonrpc::error(&id, &e)),
            },
            Ok(Kind::Notification) => dispatch::client_notification(&session, &message),
            Ok(Kind::Response) => dispatch::client_answer(&session, &message),
            Err(e) => answer.push(jsonrpc::error(&Value::Null, &e)),
        }
        if let Some(received) = received {
            // What this entry added to the answer, if anything: its own answer.
            let added = answer.bytes[before..].strip_prefix(b",").unwrap_or(&answer.bytes[before..]);
            received.answered_with((!added.is_empty()).then_some(added));
        }
    }
    answer.reply()
}

/// The session a request names, or the reply that refuses it. A session
/// created with a token answers only to that token: to any other it is
/// unknown.
fn session_of(g: &Gateway, req: &HttpRequest, access: &Access) -> Result<Arc<Session>, (Why, RpcError)> {
    if let Some(version) = req.header(VERSION_HEADER)
        && !versions::supported(version)
    {
        // -32022 names the versions mcpgate speaks: a client of the
        // session-less 2026-07-28 generation that probes first falls
        // back to `initialize` on it.
        let e = RpcError {
            code: UNSUPPORTED_PROTOCOL_VERSION,
            message: format!("unsupported MCP-Protocol-Version `{version}`; mcpgate speaks {}", SUPPORTED.join(", ")),
            data: Some(json!({ "supported": SUPPORTED, "requested": version })),
        };
        return Err((Why::Malformed, e));
    }
    let Some(session_id) = req.header(SESSION_HEADER) else {
        return Err((
            Why::Malformed,
            RpcError::new(jsonrpc::INVALID_REQUEST, "Mcp-Session-Id header is required after initialize"),
        ));
    };
    match g.sessions.get(session_id) {
        Some(session) if session.admits(access) => Ok(session),
        _ => Err((
            Why::UnknownSession,
            RpcError::new(jsonrpc::INVALID_REQUEST, "unknown or ended session: initialize a new one"),
        )),
    }
}

fn initialize(g: &Gateway, message: &Message, access: &Access) -> HttpReply {
    let id = message.id.clone().unwrap_or(Value::Null);
    let params = match message.params_object() {
        Ok(p) => p,
        Err(e) => return HttpReply::json(200, jsonrpc::error(&id, &e)),
    };
    let Some(requested) = params.get("protocolVersion").and_then(Value::as_str) else {
        let e = RpcError::invalid_params("initialize needs `protocolVersion` (a string)");
        return HttpReply::json(200, jsonrpc::error(&id, &e));
    };
    let version = versions::negotiate(requested);
    let (capabilities, client_info) = match kept_params(&params) {
        Ok(kept) => kept,
        Err(e) => return HttpReply::json(200, jsonrpc::error(&id, &e)),
    };
    let client_name = client_info["name"].as_str().unwrap_or("unknown").chars().take(64).collect();
    let init_params = json!({ "protocolVersion": version, "capabilities": capabilities, "clientInfo": client_info });
    let session_id = match new_session_id(g.store.instance_id.as_deref()) {
        Ok(s) => s,
        Err(e) => {
            return reply_to(Why::Internal, &id, &RpcError::internal(format!("cannot read the OS random source: {e}")));
        }
    };
    if let Some(why) = dispatch::resources_short(g) {
        g.refused_session();
        crate::limited!(warn, "an initialize was refused with 503: {why}");
        return reply_to(Why::Unavailable, &id, &RpcError::internal(why));
    }
    let session =
        Session::new(session_id.clone(), version.to_string(), jsonrpc::raw(&init_params), client_name, access);
    if let Some(store) = &g.store.shared {
        session.set_epoch(store.first_epoch());
    }
    // Busy until answered, like any request: a server slower to start
    // than the idle timeout must not make a session dead on arrival.
    let _busy = session.begin_request(usize::MAX);
    if !session.hold_params() {
        g.refused_session();
        let e = RpcError::internal("mcpgate holds its limit of max_memory_mb; a new session cannot be kept now");
        return reply_to(Why::Unavailable, &id, &e);
    }
    let max_sessions = g.current().config.max_sessions;
    if !g.sessions.insert(session.clone(), max_sessions) {
        g.refused_session();
        let e = RpcError::internal(format!("mcpgate holds its limit of {} sessions; try again later", max_sessions));
        return reply_to(Why::Unavailable, &id, &e);
    }
    g.stats.sessions_created.inc();
    log::debug!("session {} created for `{}` ({version})", session::short(&session_id), session.client_name);
    let opened = dispatch::open_all(g, &session);
    // The session and its downstream sessions are in the state file
    // before the client learns its id: after a crash it is restored.
    if let Err(e) = g.store.journal.commit()
        && let Some(session) = g.sessions.remove_if(&session_id, |_| true)
    {
        g.close(vec![session], CloseReason::Refused);
        g.refused_session();
        let e = RpcError::internal(format!("{e}; a session that would not survive a restart is refused"));
        return reply_to(Why::Unavailable, &id, &e);
    }
    if opened.is_empty()
        && let Some(why) = session.exhausted()
        && let Some(session) = g.sessions.remove_if(&session_id, |_| true)
    {
        // A session with no server at all, for want of threads or descriptors: better refused.
        g.close(vec![session], CloseReason::Refused);
        g.refused_session();
        let e = RpcError::internal(format!("{why}; try again later"));
        return reply_to(Why::Unavailable, &id, &e);
    }
    if let Some(audit) = g.govern.audit_log() {
        audit.write(super::audit::session_record(&session, g.issuer().as_deref(), None));
    }
    let mut result = json!({
        "protocolVersion": version,
        "capabilities": dispatch::capabilities(g, &session, &opened),
        "serverInfo": { "name": "mcpgate", "version": env!("CARGO_PKG_VERSION") },
    });
    // Absent, never null: the TypeScript SDK's schema refuses null here.
    if let Some(text) = instructions(&visible(&g.current(), &session), &opened) {
        result["instructions"] = Value::String(text);
    }
    HttpReply::json(200, jsonrpc::result(&id, &jsonrpc::raw(&result))).header("Mcp-Session-Id", &session_id)
}

fn get(g: &Gateway, req: &HttpRequest, access: &Access) -> HttpReply {
    if let Some(refused) = no_stream_in_2026(req) {
        return refused;
    }
    if !accepts(req.header("accept").unwrap_or(""), "text/event-stream") {
        return refuse(Why::NotAcceptable, "GET /mcp needs Accept: text/event-stream");
    }
    if !req.http11 {
        return refuse(Why::Malformed, "the GET stream needs HTTP/1.1");
    }
    if let Some(elsewhere) = g.failover().elsewhere(req, &mut NoStream) {
        return elsewhere;
    }
    let session = match session_of(g, req, access) {
        Ok(s) => s,
        Err((why, e)) => return reply(why, &e),
    };
    if let Some((stream, request)) = req.header("last-event-id").and_then(|id| session.foreign_call(id)) {
        return answer_foreign_call(g, &session, stream, &request);
    }
    match session.attach_stream(req.header("last-event-id"), g.current().config.max_streams_per_session) {
        Ok(attached) => HttpReply::stream(StreamReply {
            first: attached.first,
            rx: attached.rx,
            keepalive: g.current().config.keepalive,
            on_end: Box::new(move || {
                if let Some(id) = attached.id {
                    session.detach_stream(id);
                }
            }),
        }),
        Err(e) => reply(Why::StreamTaken, &e),
    }
}

/// A client resumes, here, the answer of a call that was in flight on
/// the instance that held its session before (it died, and this one
/// continued the session): the call, as its priming event carried it,
/// is run again if its tool says it is read-only or idempotent, and
/// otherwise answered with an error: it may have run, and is never
/// run twice behind the client's back.
fn answer_foreign_call(g: &Gateway, session: &Arc<Session>, stream: u64, request: &[u8]) -> HttpReply {
    let Ok(message) = Message::parse(request) else { return HttpReply::sse(Vec::new()) };
    let id = message.id.clone().unwrap_or(Value::Null);
    let answer = if safe_to_run_again(g, session, &message) {
        g.stats.calls_run_again.inc();
        log::info!(
            "session {}: a read-only call in flight on its last instance is run again here",
            session::short(&session.id)
        );
        let _busy = session.begin_request(usize::MAX);
        let mut events = PostStream {
            session,
            sink: &mut NoStream,
            stream: None,
            ask_timeout: g.current().config.held_call_timeout,
            request: None,
        };
        let outcome = dispatch::request(g, session, &message, &mut events);
        answer_bytes(&id, outcome).unwrap_or_default()
    } else {
        g.stats.calls_lost_in_flight.inc();
        let e = RpcError::internal(
            "this call was in flight on the mcpgate instance that held this session when it stopped: it may or may \
             not have run, and it is not run again (its tool does not say it is read-only or idempotent)",
        );
        jsonrpc::error(&id, &e)
    };
    HttpReply::sse(crate::protocol::sse::encode(Some(&format!("{stream}-1")), &answer))
}

/// Whether `message` calls a tool whose annotations say it is
/// read-only or idempotent: running it again changes nothing.
fn safe_to_run_again(g: &Gateway, session: &Arc<Session>, message: &Message) -> bool {
    let name = match message.params_object() {
        Ok(params) if message.method() == "tools/call" => {
            params.get("name").and_then(Value::as_str).map(str::to_string)
        }
        _ => None,
    };
    let Some(name) = name else { return false };
    let Ok(list) = g.offered.lists.merged(&g.in_force(), session, crate::catalog::ListKind::Tools) else {
        return false;
    };
    let Some(found) = list.find(&name) else { return false };
    let tool: Value = serde_json::from_str(found.json).unwrap_or_default();
    tool["annotations"]["readOnlyHint"] == true || tool["annotations"]["idempotentHint"] == true
}

fn delete(g: &Gateway, req: &HttpRequest, access: &Access) -> HttpReply {
    if let Some(refused) = no_stream_in_2026(req) {
        return refused;
    }
    let Some(id) = req.header(SESSION_HEADER) else {
        return refuse(Why::Malformed, "DELETE /mcp needs the Mcp-Session-Id header");
    };
    if let Some(elsewhere) = g.failover().elsewhere(req, &mut NoStream) {
        return elsewhere;
    }
    // The end of a session is answered once it is on disk: a crash
    // would bring back a session ended before, and its downstream
    // sessions would be closed twice (before, it was answered 200 while
    // the state file could not be written, and after a crash its
    // servers got a second DELETE). A file that cannot be written now
    // leaves it as it is, for the client to end later.
    if let Some(e) = g.store.journal.failing() {
        let e = RpcError::internal(format!("{e}; the session was not ended: DELETE it again later"));
        return reply(Why::Unavailable, &e);
    }
    match g.sessions.remove_if(id, |session| session.admits(access)) {
        Some(session) => {
            g.close(vec![session], CloseReason::ClientDelete);
            if let Err(e) = g.store.journal.commit() {
                // The file failed meanwhile: the session is ended, and its
                // downstream sessions close once the file can be written.
                let e = RpcError::internal(format!(
                    "{e}; the session is ended, and its servers' sessions are closed once the file can be \
                     written"
                ));
                return reply(Why::Unavailable, &e);
            }
            HttpReply::empty(200)
        }
        None => refuse(Why::UnknownSession, "unknown or ended session"),
    }
}

impl CallEvents for PostStream<'_> {
    // Mirrored: the client's answer becomes a stream now, its head sent.
    fn streaming(&mut self) {
        self.start();
    }

    fn message(&mut self, session: &Session, server: &Server, message: Message) {
        if let Some(bytes) = session.to_client(server, message) {
            self.send(bytes);
        }
    }

    fn takes_input(&self) -> bool {
        true
    }

    fn notify(&mut self, message: Vec<u8>) {
        self.send(message);
    }

    fn input(
        &mut self,
        session: &Session,
        requests: &Map<String, Value>,
    ) -> Option<Result<Map<String, Value>, String>> {
        Some(ask_each(session, requests, self))
    }
}

/// Asks a session-era client, on its call's stream, what a server of the
/// 2026-07-28 era needs, one request after the other.
fn ask_each(
    session: &Session,
    requests: &Map<String, Value>,
    stream: &mut PostStream<'_>,
) -> Result<Map<String, Value>, String> {
    let mut answers = Map::new();
    for (key, request) in requests {
        let method = request["method"].as_str().unwrap_or_default();
        if !session.client_can(method) {
            return Err(format!("the server asks for `{method}`, which this client did not declare it can answer"));
        }
        let params = request.get("params").map(jsonrpc::raw);
        let (bytes, answer) = session.ask_client(method, params.as_deref());
        stream.send(bytes);
        let wait = stream.ask_timeout();
        match answer.recv_timeout(wait) {
            Ok(message) => match (message.result, message.error) {
                (Some(result), _) => {
                    answers.insert(key.clone(), serde_json::from_str(result.get()).unwrap_or(Value::Null));
                }
                (None, Some(error)) => return Err(format!("the client refused `{method}`: {}", error.get())),
                (None, None) => return Err(format!("the client's answer to `{method}` is empty")),
            },
            Err(_) => {
                return Err(format!("the client did not answer `{method}` within {} s", wait.as_secs()));
            }
        }
    }
    Ok(answers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_header_matching() {
        assert!(accepts("application/json, text/event-stream", "text/event-stream"));
        assert!(accepts("text/event-stream;q=0.9, application/json", "application/json"));
        assert!(accepts("*/*", "application/json"));
        assert!(accepts("text/*", "text/event-stream"));
        assert!(!accepts("application/json", "text/event-stream"));
        assert!(!accepts("", "application/json"));
    }

    #[test]
    fn session_ids_are_128_bit_visible_ascii_and_distinct() {
        let a = new_session_id(None).unwrap();
        let b = new_session_id(None).unwrap();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| (0x21..=0x7e).contains(&c)));
        assert_ne!(a, b);
    }

    #[test]
    fn session_ids_start_with_the_instance_id_and_a_dot() {
        let id = new_session_id(Some("gw-2")).unwrap();
        let (instance, random) = id.split_once('.').unwrap();
        assert_eq!(instance, "gw-2");
        assert!(random.len() == 32 && random.bytes().all(|c| c.is_ascii_hexdigit()), "{id}");
    }
}
