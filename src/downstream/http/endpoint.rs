//! What talking to an HTTP server takes, whatever the era: the agents (one
//! per lane, and one for short exchanges), the requests (`POST`, the `GET`
//! stream, `DELETE`) with the configured headers, and reading an answer:
//! JSON, or an SSE stream resumed with `Last-Event-ID` when it drops.

use std::io::{BufReader, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::Value;
use ureq::Agent;
use ureq::http::{HeaderName, HeaderValue, Response, Uri};

use crate::config::HttpConfig;
use crate::downstream::{Arrival, DownstreamError, Flight, Limits, Server};
use crate::protocol::jsonrpc::{Kind, Message};
use crate::protocol::sse;
use crate::runtime::memory::Charge;
use crate::runtime::recycle;

use super::tcp::{Sockets, TcpConnector};

/// How long a probe of a server that did not answer waits for its answer,
/// once connected.
const PROBE_WAIT: Duration = Duration::from_secs(5);

/// The most room an answer sent chunked is read into ahead of its bytes
/// ([`Endpoint::read_message`]).
const ROOM_MAX: usize = 256 * 1024;

/// What a server reached over HTTP keeps: the agents it talks through.
pub(crate) struct Endpoint {
    pub(crate) config: HttpConfig,
    /// `config.url`, parsed once instead of per request (or why it is no URL).
    uri: Result<Uri, String>,
    /// For `initialize`, notifications, answers and `DELETE`: short
    /// exchanges bounded in total; keeps connections to the server alive.
    /// Guards the agent and how many exchanges use it now.
    short: Mutex<Short>,
    /// One agent per lane, each with one kept-alive connection; a request
    /// holds one while it runs (the server's lanes bound how many). Guards
    /// the idle agents, made as requests first need them: a server with
    /// many lanes costs nothing for the ones it never uses.
    lane_agents: Mutex<Vec<Pooled>>,
    /// How many lanes (the short agent keeps as many connections).
    lanes: usize,
    /// The server's own ([`Server::limits`]), shared.
    limits: Arc<Limits>,
    /// TLS for an `https://` URL, with the server's roots.
    tls: Tls,
    /// The size of the last answer read without a `Content-Length`, and an
    /// eighth: what the next such answer is read into, so that one like it
    /// needs no regrowth copies.
    chunked_hint: AtomicUsize,
    /// What answers of 16 KiB or more are read into: buffers earlier answers gave back.
    answers: &'static recycle::Pool,
}

/// An agent, and the sockets it opened: its pool's idle connections are
/// closed by dropping it for a fresh one ([`Endpoint::close_idle`]).
struct Pooled {
    agent: Agent,
    sockets: Arc<Sockets>,
}

/// The agent of short exchanges, and how many use it now: it is replaced
/// only while none does, so that a shutdown reaches every one in flight.
struct Short {
    pooled: Pooled,
    in_use: usize,
}

/// How an agent wraps its connections in TLS: the server's own settings.
#[cfg(feature = "tls")]
type Tls = crate::downstream::tls::TlsConnector;
#[cfg(not(feature = "tls"))]
type Tls = ();

#[cfg(feature = "tls")]
fn tls_for(config: &HttpConfig) -> Tls {
    crate::downstream::tls::TlsConnector::new(&config.trust)
}

#[cfg(not(feature = "tls"))]
fn tls_for(_: &HttpConfig) -> Tls {}

/// An agent with small buffers, no proxy from the environment, and status
/// codes returned as responses; what it opens goes to its own [`Sockets`].
fn agent(limits: &Limits, idle_per_host: usize, tls: &Tls) -> Pooled {
    let sockets = Arc::new(Sockets::default());
    let config = config(limits, idle_per_host, 16 * 1024, 16 * 1024).build();
    Pooled { agent: with_connector(config, TcpConnector::new(sockets.clone()), tls), sockets }
}

fn config(
    limits: &Limits,
    idle_per_host: usize,
    input: usize,
    output: usize,
) -> ureq::config::ConfigBuilder<ureq::typestate::AgentScope> {
    Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .timeout_connect(Some(limits.connect))
        .timeout_recv_response(Some(limits.request))
        .timeout_per_read(Some(limits.request))
        .input_buffer_size(input)
        .output_buffer_size(output)
        .max_idle_connections(idle_per_host.max(1) * 4)
        .max_idle_connections_per_host(idle_per_host.max(1))
        .max_redirects(0)
        .user_agent(concat!("mcpgate/", env!("CARGO_PKG_VERSION")))
}

fn with_connector(config: ureq::config::Config, tcp: TcpConnector, tls: &Tls) -> Agent {
    use ureq::unversioned::transport::Connector;
    let connector = ().chain(tcp);
    #[cfg(feature = "tls")]
    let connector = connector.chain(tls.clone());
    #[cfg(not(feature = "tls"))]
    let () = *tls;
    let connector = connector.chain(super::coalesce::Coalesce);
    Agent::with_parts(config, connector, crate::downstream::resolver::Lookup)
}

impl Endpoint {
    pub(crate) fn new(config: HttpConfig, limits: Arc<Limits>, lanes: usize) -> Endpoint {
        let tls = tls_for(&config);
        Endpoint {
            uri: config.url.parse::<Uri>().map_err(|e| format!("`{}` is not a URL: {e}", config.url)),
            short: Mutex::new(Short { pooled: agent(&limits, lanes, &tls), in_use: 0 }),
            lane_agents: Mutex::new(Vec::new()),
            lanes,
            config,
            limits,
            tls,
            chunked_hint: AtomicUsize::new(0),
            answers: recycle::pool(),
        }
    }

    /// The agent of one `GET` stream's reader: it only sends a small request and
    /// reads events, so it gets small buffers (the SSE decoder bounds events
    /// itself); there is one per downstream session, and this is most of its memory.
    /// Its reads wait at the stream's pace (see `tcp.rs`), not the request timeout.
    pub(crate) fn stream_agent(&self) -> Agent {
        let config = config(&self.limits, 1, 8 * 1024, 2 * 1024).timeout_per_read(None).build();
        with_connector(config, TcpConnector::paced(), &self.tls)
    }

    /// The agent of an HTTP+SSE server's stream, which is its session: as
    /// [`Endpoint::stream_agent`], but without a pace (a session stays open
    /// however quiet it is).
    pub(crate) fn session_stream_agent(&self) -> Agent {
        let config = config(&self.limits, 1, 8 * 1024, 2 * 1024).build();
        with_connector(config, TcpConnector::new(Arc::default()), &self.tls)
    }

    /// Closes the idle connections of the agents no request uses now: all
    /// of them when `unused` (no session uses the server), else those whose
    /// peer closed them or that hold bytes nobody asked for. An agent with
    /// one is dropped for a fresh one, which its pool's connections go with
    /// (ureq has no other way to let go of them). The sockets are looked at
    /// outside the locks, the agents taken out and put back under them.
    pub(crate) fn close_idle(&self, unused: bool) {
        let idle = std::mem::take(&mut *self.lane_agents.lock());
        let mut dropped = Vec::new();
        let kept: Vec<Pooled> = idle
            .into_iter()
            .map(|pooled| {
                if !pooled.sockets.any_to_close(unused) {
                    return pooled;
                }
                dropped.push(pooled);
                agent(&self.limits, 1, &self.tls)
            })
            .collect();
        {
            let mut lanes = self.lane_agents.lock();
            lanes.extend(kept);
            // A request that came meanwhile made an agent of its own: as many are kept as there are lanes.
            let extra = lanes.len().saturating_sub(self.lanes);
            dropped.extend(lanes.drain(..extra));
        }
        let sockets = {
            let short = self.short.lock();
            (short.in_use == 0).then(|| short.pooled.sockets.clone())
        };
        if sockets.as_ref().is_some_and(|s| s.any_to_close(unused)) {
            let fresh = agent(&self.limits, self.lanes, &self.tls);
            let mut short = self.short.lock();
            // Unless an exchange took it meanwhile.
            if short.in_use == 0 && sockets.is_some_and(|s| Arc::ptr_eq(&s, &short.pooled.sockets)) {
                dropped.push(std::mem::replace(&mut short.pooled, fresh));
            }
        }
        drop(dropped);
    }

    /// The server's URL, for a request.
    fn uri(&self) -> Result<Uri, DownstreamError> {
        self.uri.clone().map_err(DownstreamError::Connect)
    }

    /// Unblocks every short exchange in flight (requests stop with their flights).
    pub(crate) fn shutdown(&self) {
        self.short.lock().pooled.agent.clone().shutdown();
    }

    /// Adds the session, the protocol version, the trace context, the
    /// configured headers and, on a server with `oauth`, the user's bearer token.
    fn headers<B>(
        &self,
        mut request: ureq::RequestBuilder<B>,
        session: Option<&str>,
        version: Option<&str>,
        bearer: Option<&str>,
    ) -> ureq::RequestBuilder<B> {
        // Static names, and a version mcpgate speaks as a static value: no copies.
        if let Some(session) = session {
            request = request.header(HeaderName::from_static("mcp-session-id"), session);
        }
        if let Some(version) = version {
            let name = HeaderName::from_static("mcp-protocol-version");
            request = match crate::protocol::versions::known(version) {
                Some(known) => request.header(name, HeaderValue::from_static(known)),
                None => request.header(name, version),
            };
        }
        // The trace context of the request being sent, if it is traced (`downstream/spans.rs`).
        if let Some((traceparent, tracestate)) = crate::runtime::trace::outgoing_headers() {
            request = request.header(HeaderName::from_static("traceparent"), traceparent);
            if let Some(tracestate) = tracestate {
                request = request.header(HeaderName::from_static("tracestate"), tracestate);
            }
        }
        for (name, value) in &self.config.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        if let Some(token) = bearer {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        request
    }

    /// A `POST` of one JSON-RPC message with `headers` (the 2026-07-28
    /// era's routing headers), on `agent`; the response head, whatever its status.
    pub(crate) fn post_with(
        &self,
        agent: &Agent,
        headers: Vec<(HeaderName, HeaderValue)>,
        body: &[u8],
    ) -> Result<Response<ureq::Body>, DownstreamError> {
        let mut request = agent
            .post(self.uri()?)
            .header("Content-Type", HeaderValue::from_static("application/json"))
            .header("Accept", HeaderValue::from_static("application/json, text/event-stream"));
        for (name, value) in headers {
            request = request.header(name, value);
        }
        self.headers(request, None, None, None).send(body).map_err(|e| self.transport_error(e))
    }

    /// The agent for short exchanges, while the returned guard lives.
    pub(crate) fn short_agent(&self) -> ShortAgent<'_> {
        let mut short = self.short.lock();
        short.in_use += 1;
        ShortAgent { endpoint: self, agent: short.pooled.agent.clone() }
    }

    /// A `POST` of one JSON-RPC message on `agent`; the response head,
    /// whatever its status.
    pub(super) fn post(
        &self,
        agent: &Agent,
        session: Option<&str>,
        version: Option<&str>,
        body: &[u8],
        bearer: Option<&str>,
    ) -> Result<Response<ureq::Body>, DownstreamError> {
        let request = agent
            .post(self.uri()?)
            .header("Content-Type", HeaderValue::from_static("application/json"))
            .header("Accept", HeaderValue::from_static("application/json, text/event-stream"));
        self.headers(request, session, version, bearer).send(body).map_err(|e| self.transport_error(e))
    }

    /// Whether the server answers at all: a `ping` outside any session
    /// (which opens none), with the configured headers; any HTTP answer
    /// within the connect timeout and [`PROBE_WAIT`] will do.
    pub(crate) fn answers(&self) -> bool {
        let Ok(uri) = self.uri() else { return false };
        let agent = self.short_agent();
        let request = agent
            .post(uri)
            .header("Content-Type", HeaderValue::from_static("application/json"))
            .header("Accept", HeaderValue::from_static("application/json, text/event-stream"));
        let answered = self
            .headers(request, None, None, None)
            .config()
            .timeout_global(Some(self.limits.connect + PROBE_WAIT))
            .build()
            .send(&br#"{"jsonrpc":"2.0","id":"mcpgate-probe","method":"ping"}"#[..]);
        answered.is_ok()
    }

    /// A `POST` of one JSON-RPC message to `url`, the endpoint an HTTP+SSE
    /// server named, with the configured headers; the response head,
    /// whatever its status.
    pub(crate) fn post_to(
        &self,
        agent: &Agent,
        url: &str,
        version: Option<&str>,
        body: &[u8],
    ) -> Result<Response<ureq::Body>, DownstreamError> {
        let request = agent.post(url).header("Content-Type", "application/json");
        self.headers(request, None, version, None).send(body).map_err(|e| self.transport_error(e))
    }

    /// The `GET` that opens an HTTP+SSE server's stream, which is its
    /// session: its head within `head_timeout`, then no timeout between
    /// reads (a quiet stream is an idle session, not a dead one; the close
    /// path ends it by shutting `agent` down).
    pub(crate) fn open_sse(
        &self,
        agent: &Agent,
        head_timeout: Duration,
    ) -> Result<Response<ureq::Body>, DownstreamError> {
        self.headers(agent.get(self.uri()?).header("Accept", "text/event-stream"), None, None, None)
            .config()
            .timeout_recv_response(Some(head_timeout))
            .timeout_per_read(None)
            .build()
            .call()
            .map_err(|e| self.transport_error(e))
    }

    /// A `GET` of the session's stream, optionally resuming after `last_event_id`.
    pub(crate) fn get_stream(
        &self,
        agent: &Agent,
        session: Option<&str>,
        version: &str,
        last_event_id: Option<&str>,
        head_timeout: Option<Duration>,
        bearer: Option<&str>,
    ) -> Result<Response<ureq::Body>, DownstreamError> {
        let mut request =
            self.headers(agent.get(self.uri()?).header("Accept", "text/event-stream"), session, Some(version), bearer);
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id);
        }
        match head_timeout {
            Some(timeout) => request.config().timeout_recv_response(Some(timeout)).build().call(),
            None => request.call(),
        }
        .map_err(|e| self.transport_error(e))
    }

    /// Sends `DELETE` for a downstream session. Out of file descriptors, it
    /// tries again every 50 ms within `delete_timeout_secs`: closing
    /// sessions frees descriptors, and this DELETE is what must not be lost.
    pub(crate) fn delete(&self, session: &str, version: &str, bearer: Option<&str>) -> Result<(), DownstreamError> {
        let deadline = Instant::now() + self.limits.delete;
        let short = self.short_agent();
        // A connection of its own, once a kept-alive one was closed under the `DELETE`.
        let mut own: Option<Pooled> = None;
        let response = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let on = own.as_ref().map_or(&*short, |own| &own.agent);
            let request = self.headers(on.delete(self.uri()?), Some(session), Some(version), bearer);
            match request.config().timeout_global(Some(left)).build().call() {
                Ok(response) => break response,
                Err(ureq::Error::Io(e))
                    if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
                        && left > Duration::from_millis(50) =>
                {
                    std::thread::sleep(Duration::from_millis(50));
                }
                // The server closed the kept-alive connection as the `DELETE`
                // went out on it (uvicorn closes one idle for 5 s). Ending a
                // session twice is harmless (a 404 the second time), so it is
                // sent once more at once, on a new connection, instead of
                // being owed to the reaper.
                Err(ureq::Error::Io(e)) if own.is_none() && closed_under_it(&e) && !left.is_zero() => {
                    own = Some(agent(&self.limits, 1, &self.tls));
                }
                Err(e) => return Err(self.delete_error(e)),
            }
        };
        let status = response.status().as_u16();
        // Read the (small) body so the connection can be reused.
        let _ = response.into_body().with_config().limit(64 * 1024).read_to_vec();
        match status {
            200..=299 => Ok(()),
            // Already gone, or the server does not let clients end sessions: nothing is left open.
            404 | 405 => Ok(()),
            401 => Err(DownstreamError::Unauthorized { status, challenge: None }),
            status => Err(DownstreamError::Status { status, detail: String::new() }),
        }
    }

    /// A failed `DELETE`: a timeout is `delete_timeout_secs`'s.
    fn delete_error(&self, e: ureq::Error) -> DownstreamError {
        match self.transport_error(e) {
            DownstreamError::Timeout(_) => DownstreamError::DeleteTimeout(self.limits.delete),
            other => other,
        }
    }

    pub(crate) fn transport_error(&self, e: ureq::Error) -> DownstreamError {
        let url = &self.config.url;
        match e {
            ureq::Error::Timeout(ureq::Timeout::Connect) => DownstreamError::ConnectTimeout(self.limits.connect),
            ureq::Error::Timeout(_) => DownstreamError::Timeout(self.limits.request),
            ureq::Error::Io(io)
                if io.kind() == std::io::ErrorKind::TimedOut || io.kind() == std::io::ErrorKind::WouldBlock =>
            {
                DownstreamError::Timeout(self.limits.request)
            }
            ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::NotConnected => DownstreamError::Closed,
            ureq::Error::Io(io) => DownstreamError::Connect(format!("{io} ({url})")),
            ureq::Error::HostNotFound => DownstreamError::Connect(format!("host not found ({url})")),
            ureq::Error::ConnectionFailed => DownstreamError::Connect(format!("connection failed ({url})")),
            other => DownstreamError::Protocol(other.to_string()),
        }
    }

    /// Reads the answer to the request `id`: a JSON body, or an SSE stream
    /// whose other messages go to `on_message`. A stream that ends early is
    /// resumed with `GET` and `Last-Event-ID` when the server gave event ids.
    pub(crate) fn read_answer(
        &self,
        server: &Server,
        response: Response<ureq::Body>,
        id: &Value,
        on_message: &mut dyn FnMut(Arrival),
        exchange: &Exchange<'_>,
    ) -> Result<Message, DownstreamError> {
        let status = response.status().as_u16();
        let mime = response.body().mime_type().unwrap_or("");
        let (json, events) =
            (mime.eq_ignore_ascii_case("application/json"), mime.eq_ignore_ascii_case("text/event-stream"));
        match status {
            200 if json => {
                let (bytes, held) = self.read_message(response)?;
                // The result stays in the bytes read, charged while it is
                // held: a large one is not copied out.
                let message = Message::parse_charged(bytes, held)
                    .map_err(|e| DownstreamError::Protocol(format!("invalid JSON-RPC answer: {}", e.message)))?;
                match message.kind() {
                    Ok(Kind::Response) if message.id.as_ref() == Some(id) => Ok(message),
                    _ => Err(DownstreamError::Protocol("the JSON answer is not the response to the request".into())),
                }
            }
            200 if events => {
                on_message(Arrival::Streaming);
                self.read_stream(server, response, id, on_message, exchange)
            }
            200 | 202 => Err(DownstreamError::Protocol(format!(
                "answered HTTP {status} with `{mime}`, expected application/json or text/event-stream"
            ))),
            404 if exchange.session_id.is_some() => Err(DownstreamError::SessionGone),
            401 | 403 if let Some(refused) = unauthorized(&response) => {
                drain(response);
                Err(refused)
            }
            // The 2026-07-28 era answers errors with 400 or 404 and the JSON-RPC error in the body.
            400..=499 if exchange.version == crate::protocol::stateless::VERSION && json => {
                let (bytes, held) = self.read_message(response)?;
                match Message::parse(&bytes) {
                    Ok(mut message) if message.kind() == Ok(Kind::Response) && message.id.as_ref() == Some(id) => {
                        // Copied out of the body: the body's charge goes with it.
                        message.hold(held);
                        Ok(message)
                    }
                    _ => Err(DownstreamError::Status { status, detail: String::from_utf8_lossy(&bytes).into() }),
                }
            }
            _ => Err(status_error(response)),
        }
    }

    fn read_stream(
        &self,
        server: &Server,
        response: Response<ureq::Body>,
        id: &Value,
        on_message: &mut dyn FnMut(Arrival),
        exchange: &Exchange<'_>,
    ) -> Result<Message, DownstreamError> {
        const MAX_RESUMES: usize = 10;
        let mut body = response.into_body().into_reader();
        let mut last_event_id: Option<String> = None;
        let mut retry: Option<Duration> = None;
        for _ in 0..=MAX_RESUMES {
            let mut decoder = sse::Decoder::new(BufReader::with_capacity(8 * 1024, body), self.limits.max_message);
            let ended = loop {
                match decoder.next_event() {
                    Ok(Some(event)) => {
                        if event.id.is_some() {
                            last_event_id = event.id;
                        }
                        if let Some(ms) = event.retry_ms {
                            retry = Some(Duration::from_millis(ms));
                        }
                        if event.data.trim().is_empty() {
                            continue;
                        }
                        exchange.flight.heard();
                        let charge = decoder.charge_for(event.data.len());
                        let message = Message::parse_text(event.data, charge).map_err(|e| {
                            DownstreamError::Protocol(format!("invalid JSON-RPC in the SSE stream: {}", e.message))
                        })?;
                        match message.kind() {
                            Ok(Kind::Response) if message.id.as_ref() == Some(id) => return Ok(message),
                            Ok(Kind::Response) => {
                                log::debug!("server `{}`: response to an unknown id ignored", server.name())
                            }
                            _ => on_message(Arrival::Message(message)),
                        }
                    }
                    Ok(None) => break "the stream ended before the response".to_string(),
                    Err(e) if is_timeout(&e) => return Err(DownstreamError::Timeout(self.limits.request)),
                    Err(e) if e.kind() == std::io::ErrorKind::OutOfMemory => {
                        return Err(DownstreamError::Protocol(e.to_string()));
                    }
                    Err(e) => break format!("the stream broke before the response: {e}"),
                }
            };
            let Some(resume_from) = last_event_id.as_deref() else {
                return Err(DownstreamError::Protocol(ended));
            };
            if let Some(why) = exchange.flight.stopped() {
                return Err(server.stopped(why));
            }
            std::thread::sleep(retry.unwrap_or(Duration::from_millis(50)).min(self.limits.request));
            let response = self.get_stream(
                exchange.agent,
                exchange.session_id,
                exchange.version,
                Some(resume_from),
                None,
                exchange.bearer,
            )?;
            let mime = response.body().mime_type().unwrap_or("").to_ascii_lowercase();
            if response.status().as_u16() != 200 || mime != "text/event-stream" {
                return Err(DownstreamError::Protocol(format!(
                    "{ended}, and resuming it failed ({})",
                    status_error(response)
                )));
            }
            body = response.into_body().into_reader();
        }
        Err(DownstreamError::Protocol(format!("the stream ended {MAX_RESUMES} times before the response")))
    }

    /// A JSON body of at most `max_message_bytes`, charged against
    /// `max_memory_mb` as it arrives (the charge lasts as long as it is held).
    fn read_message(&self, response: Response<ureq::Body>) -> Result<(Vec<u8>, Charge), DownstreamError> {
        let max = self.limits.max_message;
        // Sized once from Content-Length (never past the limit): no regrowth copies.
        let expected =
            response.headers().get("content-length").and_then(|v| v.to_str().ok()?.parse::<usize>().ok()).unwrap_or(0);
        if expected > max {
            return Err(DownstreamError::Protocol(format!("message larger than {max} bytes")));
        }
        let mut reader = response.into_body().into_reader();
        let fail = |e: std::io::Error| match e {
            e if is_timeout(&e) => DownstreamError::Timeout(self.limits.request),
            e => DownstreamError::Protocol(format!("reading the answer failed: {e}")),
        };
        // ureq ends the body at Content-Length; a byte more than the limit
        // allows is never read. One byte more than announced is refused.
        let end = |reader: &mut dyn Read, bytes: Vec<u8>, charge: Charge| match reader.read(&mut [0u8; 1]) {
            Ok(0) => Ok((bytes, charge)),
            Ok(_) => Err(DownstreamError::Protocol("the answer is longer than its Content-Length".into())),
            Err(e) => Err(fail(e)),
        };
        if expected >= recycle::MIN_BYTES
            && let Some((mut bytes, mut charge)) = self.answers.take()
            && charge.grow(expected.saturating_sub(charge.bytes()))
        {
            // Into a buffer an earlier answer gave back: zeroed only where it grows.
            bytes.reserve_exact(expected.saturating_sub(bytes.len()));
            bytes.resize(expected, 0);
            reader.read_exact(&mut bytes).map_err(fail)?;
            return end(&mut reader, bytes, charge);
        }
        let mut charge = Charge::empty();
        if expected > 0 && charge.grow(expected) {
            // Read straight into the buffer, charged already: one copy.
            let mut bytes = Vec::with_capacity(expected);
            (&mut reader).take(expected as u64).read_to_end(&mut bytes).map_err(fail)?;
            return end(&mut reader, bytes, charge);
        }
        // Sent chunked: no size ahead. Read straight into a buffer an
        // earlier answer gave back (`runtime/recycle.rs`), as far as it is
        // initialized: no copy from a read buffer, no regrowth, nothing
        // zeroed again. Without one, into room for what the last such
        // answer took, when the budget has it: growing a `Vec` to 100 KB
        // copies 112 KB as it doubles (issue 43). Not past ROOM_MAX fresh:
        // 16 answers of 1 MB read into new room of 1.1 MB at once made
        // glibc give back and fault in its heap (10 page faults a call
        // became 90, in one run of two), where doubling did not.
        let hint = self.chunked_hint.load(Ordering::Relaxed).min(max);
        let kept = if hint >= recycle::MIN_BYTES { self.answers.take() } else { None };
        let (mut bytes, mut charge) = kept.unwrap_or_else(|| (Vec::new(), Charge::empty()));
        if hint <= ROOM_MAX && bytes.len() < hint && charge.grow_ahead(hint - bytes.len()) {
            bytes.reserve_exact(hint - bytes.len());
            bytes.resize(hint, 0);
        }
        // Past the room, reads land here first: most answers end there, at
        // a read of nothing, and the room grows only for bytes that came.
        let mut spill = [0u8; 16 * 1024];
        let mut filled = 0;
        loop {
            let full = filled == bytes.len();
            let read = if full { reader.read(&mut spill) } else { reader.read(&mut bytes[filled..]) };
            let n = match read {
                Ok(0) => {
                    bytes.truncate(filled);
                    self.chunked_hint.store(filled + filled / 8, Ordering::Relaxed);
                    return Ok((bytes, charge));
                }
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if is_timeout(&e) => return Err(DownstreamError::Timeout(self.limits.request)),
                Err(e) => return Err(DownstreamError::Protocol(format!("reading the answer failed: {e}"))),
            };
            if filled + n > max {
                return Err(DownstreamError::Protocol(format!("message larger than {max} bytes")));
            }
            if full {
                // The buffer's spare capacity; or room for as much again (for
                // this read at least, the limit at most), charged ahead; when
                // the budget has not that much, room for this read only,
                // charged as held.
                let spare = bytes.capacity() - bytes.len();
                let mut more = if spare >= n { spare } else { bytes.len().max(n) }.min(max - filled);
                if !charge.grow_ahead((filled + more).saturating_sub(charge.bytes())) {
                    more = n;
                    if !charge.grow((filled + more).saturating_sub(charge.bytes())) {
                        return Err(DownstreamError::Exhausted(
                            "mcpgate holds its limit of max_memory_mb; the answer could not be held".into(),
                        ));
                    }
                }
                bytes.reserve_exact(more);
                bytes.resize(filled + more, 0);
                bytes[filled..filled + n].copy_from_slice(&spill[..n]);
            }
            filled += n;
        }
    }

    /// The lane's agent for one request, back when dropped: replaced when
    /// the request was stopped, as stopping shut it down for good.
    pub(crate) fn lane_agent(&self) -> LaneAgent<'_> {
        // Taken under the lock, made outside it.
        let idle = self.lane_agents.lock().pop();
        let pooled = idle.unwrap_or_else(|| agent(&self.limits, 1, &self.tls));
        LaneAgent { endpoint: self, pooled: Some(pooled), stopped: false }
    }
}

/// The agent of short exchanges, counted in use until dropped.
pub(crate) struct ShortAgent<'a> {
    endpoint: &'a Endpoint,
    agent: Agent,
}

impl std::ops::Deref for ShortAgent<'_> {
    type Target = Agent;

    fn deref(&self) -> &Agent {
        &self.agent
    }
}

impl Drop for ShortAgent<'_> {
    fn drop(&mut self) {
        self.endpoint.short.lock().in_use -= 1;
    }
}

pub(crate) struct LaneAgent<'a> {
    endpoint: &'a Endpoint,
    pooled: Option<Pooled>,
    /// Replaced when dropped: the request was stopped (which shut the
    /// agent down for good), or its connection is out of step.
    pub(crate) stopped: bool,
}

impl LaneAgent<'_> {
    pub(crate) fn agent(&self) -> &Agent {
        &self.pooled.as_ref().expect("held until dropped").agent
    }

    /// The request is over: `flight` is disarmed, and the agent is replaced
    /// when dropped if the request was stopped (which shut it down for
    /// good), or if its answer broke the protocol: the connection may be out
    /// of step, a response nobody asked for in front of the one to come,
    /// which the next request on it (another session's, maybe) would take
    /// for its own. Before, such a connection stayed in use, each request
    /// reading the answer to the one before: 4 calls failed after each
    /// second response a server sent 30 ms late.
    pub(crate) fn finish<T>(&mut self, flight: &Flight, result: &Result<T, DownstreamError>) {
        self.stopped = flight.disarm() || matches!(result, Err(DownstreamError::Protocol(_)));
    }
}

impl Drop for LaneAgent<'_> {
    fn drop(&mut self) {
        let Some(pooled) = self.pooled.take() else { return };
        let pooled = if self.stopped { self::agent(&self.endpoint.limits, 1, &self.endpoint.tls) } else { pooled };
        self.endpoint.lane_agents.lock().push(pooled);
    }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock)
        || e.to_string().to_ascii_lowercase().contains("timeout")
}

/// An error for an unexpected status, with the start of the body (for an
/// HTML error page) or the `Retry-After` of a 429 or 503.
pub(crate) fn status_error(response: Response<ureq::Body>) -> DownstreamError {
    let status = response.status().as_u16();
    let retry_after = response.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_string);
    let mut snippet = Vec::new();
    let _ = response.into_body().into_reader().take(512).read_to_end(&mut snippet);
    let text: String = String::from_utf8_lossy(&snippet)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let mut detail = text.chars().take(160).collect::<String>();
    if let Some(after) = retry_after {
        detail = format!("retry after {after} s; {detail}");
    }
    DownstreamError::Status { status, detail: detail.trim_end_matches("; ").to_string() }
}

/// What reading an answer needs to know of the request it belongs to.
pub(crate) struct Exchange<'a> {
    pub(crate) session_id: Option<&'a str>,
    pub(crate) version: &'a str,
    /// The agent of the request's lane, to resume a dropped stream on.
    pub(crate) agent: &'a Agent,
    /// Told of every message; a stopped flight's stream is not resumed.
    pub(crate) flight: &'a Flight,
    /// The user's token the request went with, for a resumed stream.
    pub(crate) bearer: Option<&'a str>,
}

/// A 401, or a 403 `insufficient_scope`, as the error a link signs in
/// from: with the server's `WWW-Authenticate`. Another 403 is another error.
pub(crate) fn unauthorized(response: &Response<ureq::Body>) -> Option<DownstreamError> {
    let status = response.status().as_u16();
    let challenge = response.headers().get("www-authenticate").and_then(|v| v.to_str().ok()).map(str::to_string);
    let scope = challenge.as_deref().and_then(crate::downstream::challenge::parse_challenge).and_then(|c| c.error);
    (status == 401 || scope.as_deref() == Some("insufficient_scope"))
        .then_some(DownstreamError::Unauthorized { status, challenge })
}

/// Reads a small refused answer's body, so its connection can be used again.
fn drain(response: Response<ureq::Body>) {
    let _ = response.into_body().with_config().limit(64 * 1024).read_to_vec();
}

/// Whether a request's connection was closed by the server under it: reset
/// or ended before an answer came.
fn closed_under_it(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
    matches!(e.kind(), ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof)
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpListener;

    use super::*;
    use crate::config::{Config, Transport};

    /// Answers a request with each of `bodies` in turn, in chunks of
    /// `chunk` bytes, without a Content-Length (0: whole, with one); a
    /// connection each.
    fn chunked_server(bodies: Vec<Vec<u8>>, chunk: usize) -> (String, std::thread::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let serve = std::thread::spawn(move || {
            for body in bodies {
                let (mut stream, _) = listener.accept().unwrap();
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap() == 1 {
                    head.push(byte[0]);
                }
                let length = String::from_utf8_lossy(&head)
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase().strip_prefix("content-length: ").map(|v| v.trim().parse().unwrap())
                    })
                    .unwrap_or(0usize);
                stream.read_exact(&mut vec![0; length]).unwrap();
                let mut out = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n".to_vec();
                if chunk == 0 {
                    out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
                    out.extend_from_slice(&body);
                    let _ = stream.write_all(&out);
                    continue;
                }
                out.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
                for part in body.chunks(chunk) {
                    out.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
                    out.extend_from_slice(part);
                    out.extend_from_slice(b"\r\n");
                }
                out.extend_from_slice(b"0\r\n\r\n");
                let _ = stream.write_all(&out);
            }
        });
        (url, serve)
    }

    /// An answer's bytes as read, the capacity they were read into, and where.
    type Answer = (Vec<u8>, usize, usize);

    /// What `read_message` makes of each of `bodies`, sent chunked (in
    /// chunks of `chunk`; 0: with a Content-Length instead) to one
    /// endpoint with `max_message_bytes` of `max`: the bytes, the capacity
    /// they were read into, and where. With `give_back`, each is given back
    /// to the endpoint's pool (one of its own) once read, as a message
    /// read from it gives it back when dropped.
    fn read_chunked_all(
        bodies: Vec<Vec<u8>>,
        chunk: usize,
        max: usize,
        give_back: bool,
    ) -> Vec<Result<Answer, DownstreamError>> {
        let count = bodies.len();
        let (url, serve) = chunked_server(bodies, chunk);
        let text = format!(r#"{{"max_message_bytes": {max}, "mcpServers": {{"s": {{"url": "{url}"}}}}}}"#);
        let config = Config::parse(&text, &|_| None).unwrap();
        let Transport::Http(http) = config.servers[0].transport.clone() else { unreachable!() };
        let mut endpoint = Endpoint::new(http, Arc::new(Limits::from_config(&config)), 1);
        endpoint.answers = Box::leak(Box::new(recycle::Pool::new()));
        let agent = endpoint.short_agent();
        let reads = (0..count)
            .map(|_| {
                let response = endpoint.post(&agent, None, None, b"{}", None)?;
                endpoint.read_message(response).map(|(bytes, _)| {
                    let (capacity, at) = (bytes.capacity(), bytes.as_ptr() as usize);
                    match give_back {
                        true => {
                            let copy = bytes.clone();
                            endpoint.answers.give(bytes, Charge::empty());
                            (copy, capacity, at)
                        }
                        false => (bytes, capacity, at),
                    }
                })
            })
            .collect();
        // The buffers kept, and their charges, go with the test.
        endpoint.answers.trim(std::time::Instant::now() + recycle::KEEP_IDLE);
        serve.join().unwrap();
        reads
    }

    /// What `read_message` makes of `body`, sent chunked, with `max_message_bytes` of `max`.
    fn read_chunked(body: Vec<u8>, chunk: usize, max: usize) -> Result<Vec<u8>, DownstreamError> {
        read_chunked_all(vec![body], chunk, max, false).pop().unwrap().map(|(bytes, ..)| bytes)
    }

    #[test]
    fn a_chunked_answer_is_read_whole_up_to_the_limit_and_refused_a_byte_past_it() {
        // Sizes around where the buffer grows (16 KiB, then doubling) and around the limit.
        let max = 100_000;
        for (size, chunk) in [(0, 7), (1, 1), (16 * 1024, 4096), (16 * 1024 + 1, 1000), (65_537, 65_537), (max, 3000)] {
            let body: Vec<u8> = (0..size).map(|i| b'a' + (i % 26) as u8).collect();
            let read = read_chunked(body.clone(), chunk.max(1), max).unwrap_or_else(|e| panic!("{size} bytes: {e:?}"));
            assert!(read == body, "{size} bytes in chunks of {chunk}: {} bytes read", read.len());
        }
        for size in [max + 1, 3 * max] {
            match read_chunked(vec![b'x'; size], 4096, max) {
                Err(DownstreamError::Protocol(why)) => assert!(why.contains("larger than 100000"), "{why}"),
                other => panic!("{size} bytes: {:?}", other.map(|b| b.len())),
            }
        }
    }

    #[test]
    fn a_chunked_answer_is_read_into_room_for_the_last_one() {
        // 100 KB, then 100 KB again and 90 KB: read into the room the first
        // left, with no regrowth; then 200 KB, which grows past it, and 100 B;
        // then 300 KB, and 100 B read without room (more than ROOM_MAX).
        let sizes = [100_000, 100_000, 90_000, 200_000, 100, 300_000, 100];
        let bodies: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![b'a'; n]).collect();
        let reads = read_chunked_all(bodies.clone(), 16 * 1024, 1_000_000, false);
        let capacities: Vec<usize> = reads.iter().map(|r| r.as_ref().map_or(0, |(_, c, _)| *c)).collect();
        for (read, body) in reads.iter().zip(&bodies) {
            assert!(read.as_ref().is_ok_and(|(bytes, ..)| bytes == body), "{} bytes: {capacities:?}", body.len());
        }
        let room = 100_000 + 100_000 / 8;
        assert_eq!(capacities[1..3], [room, room], "{capacities:?}");
        assert!(capacities[3] >= 200_000 && capacities[4] == 200_000 + 200_000 / 8, "{capacities:?}");
        assert!(capacities[6] < 1000, "{capacities:?}");
    }

    #[test]
    fn a_chunked_answer_is_read_into_the_buffer_the_last_one_gave_back() {
        // 1 MB (past ROOM_MAX: read growing), then 1 MB, 900 KB and 1 MB
        // again into the buffer the first gave back, where it lies, each
        // whole and nothing of the one before; then 1.5 MB, which grows it.
        let _budget = crate::runtime::memory::TEST_BUDGET.lock();
        let sizes = [1_000_000, 1_000_000, 900_000, 1_000_000, 1_500_000];
        let bodies: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &n)| vec![b'a' + i as u8; n]).collect();
        let reads = read_chunked_all(bodies.clone(), 16 * 1024, 2_000_000, true);
        let seen: Vec<(usize, usize)> =
            reads.iter().map(|r| r.as_ref().map_or((0, 0), |(_, c, at)| (*c, *at))).collect();
        for (read, body) in reads.iter().zip(&bodies) {
            assert!(read.as_ref().is_ok_and(|(bytes, ..)| bytes == body), "{} bytes: {seen:?}", body.len());
        }
        assert!(seen[1..4].iter().all(|&s| s == seen[0]), "read where the first was, not grown: {seen:?}");
        assert!(seen[4].0 >= 1_500_000, "{seen:?}");
    }

    #[test]
    fn an_answer_with_a_length_is_read_into_the_buffer_the_last_one_gave_back() {
        // As above, with Content-Length: 100 KB, 90 KB and 100 KB where the
        // first was, then 300 KB, which grows it; 100 B is read apart.
        let _budget = crate::runtime::memory::TEST_BUDGET.lock();
        let sizes = [100_000, 90_000, 100_000, 300_000, 100];
        let bodies: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &n)| vec![b'a' + i as u8; n]).collect();
        let reads = read_chunked_all(bodies.clone(), 0, 1_000_000, true);
        let seen: Vec<(usize, usize)> =
            reads.iter().map(|r| r.as_ref().map_or((0, 0), |(_, c, at)| (*c, *at))).collect();
        for (read, body) in reads.iter().zip(&bodies) {
            assert!(read.as_ref().is_ok_and(|(bytes, ..)| bytes == body), "{} bytes: {seen:?}", body.len());
        }
        assert!(seen[1..3].iter().all(|&s| s == seen[0]), "read where the first was: {seen:?}");
        assert!(seen[3].0 >= 300_000 && seen[4].0 < 1000, "{seen:?}");
    }

    #[test]
    fn an_answer_read_into_room_keeps_the_limit() {
        // The room after 90 KB is the limit itself: an answer that fills
        // it is whole, and one a byte longer is refused.
        let max = 100_000;
        let sizes = [90_000, max, max + 1, 3 * max];
        let bodies: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![b'a'; n]).collect();
        let mut reads = read_chunked_all(bodies.clone(), 3000, max, false).into_iter();
        for body in &bodies[..2] {
            let read = reads.next().unwrap();
            assert!(read.as_ref().is_ok_and(|(bytes, ..)| bytes == body), "{} bytes", body.len());
        }
        for size in &sizes[2..] {
            match reads.next().unwrap() {
                Err(DownstreamError::Protocol(why)) => assert!(why.contains("larger than 100000"), "{why}"),
                other => panic!("{size} bytes: {:?}", other.map(|(b, ..)| b.len())),
            }
        }
    }
}
