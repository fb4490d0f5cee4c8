#![forbid(unsafe_code)]
//! The client side: one [`Server`] per configured MCP server (its connection
//! pool and health), and the [`Downstream`] sessions opened on it, one per
//! client session. [`close_all`] is the only way a downstream session ends.

use std::fmt;
use std::io::{BufReader, Read};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use serde_json::Value;
use serde_json::value::RawValue;
use ureq::Agent;
use ureq::http::Response;

use crate::config::{Config, ServerConfig};
use crate::flight::{Flight, LaneError, Lanes, Stop};
use crate::jsonrpc::{self, Kind, Message};
use crate::limited;
use crate::memory::Charge;
use crate::reader::{self, Reader};
use crate::sse;
use crate::state::Journal;
use crate::stats::{Gauge, Stats};

/// Protocol versions mcpgate speaks, newest first.
pub const PROTOCOL_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];

/// Why a downstream exchange failed, in words a person can act on.
#[derive(Debug, Clone, PartialEq)]
pub enum DownstreamError {
    /// The server could not be reached.
    Connect(String),
    /// The server sent no message for longer than the request timeout.
    Timeout(Duration),
    /// Every lane to the server stayed taken while the request waited.
    Busy(usize),
    /// An HTTP status other than the ones MCP defines for the exchange.
    Status { status: u16, detail: String },
    /// The server answered 404 for our session id: it no longer knows it.
    SessionGone,
    /// The answer broke the protocol: bad JSON, wrong content type, a stream without a response.
    Protocol(String),
    /// The server refused `initialize` or offered no usable protocol version.
    Refused(String),
    /// mcpgate is closing this downstream session.
    Closed,
    /// mcpgate is out of a resource it needs (threads, descriptors, memory).
    Exhausted(String),
    /// The client cancelled the request.
    Cancelled,
}

impl fmt::Display for DownstreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DownstreamError::Connect(e) => write!(f, "unreachable: {e}"),
            DownstreamError::Timeout(d) => {
                write!(f, "sent no message within {} s (request_timeout_secs)", d.as_secs_f64())
            }
            DownstreamError::Busy(n) => {
                write!(f, "busy: {n} requests to it are in flight (calls_per_server); try again later")
            }
            DownstreamError::Status { status, detail } if detail.is_empty() => write!(f, "answered HTTP {status}"),
            DownstreamError::Status { status, detail } => write!(f, "answered HTTP {status}: {detail}"),
            DownstreamError::SessionGone => write!(f, "the server no longer knows this session (HTTP 404)"),
            DownstreamError::Protocol(e) => write!(f, "protocol error: {e}"),
            DownstreamError::Refused(e) => write!(f, "initialize refused: {e}"),
            DownstreamError::Closed => write!(f, "the session is closing"),
            DownstreamError::Exhausted(e) => write!(f, "{e}"),
            DownstreamError::Cancelled => write!(f, "the request was cancelled"),
        }
    }
}

/// Where a downstream session's unsolicited messages go: the client session
/// that owns it.
pub trait Inbox: Send + Sync {
    /// A message the server sent on its `GET` stream.
    fn deliver(&self, server: &Arc<Server>, message: Message);
    /// The server answered 404 for the stream of downstream session
    /// `session_id`: it no longer knows it (it restarted).
    fn lost(&self, server: &Arc<Server>, session_id: Option<&str>);
}

/// Last success and failure of one server, for the status page.
#[derive(Debug, Default, Clone)]
pub struct Health {
    pub last_error: Option<String>,
    pub last_error_at: Option<SystemTime>,
    pub last_ok_at: Option<SystemTime>,
}

/// Timeouts and limits for talking to servers, from the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub connect: Duration,
    pub request: Duration,
    pub delete: Duration,
    pub max_message: usize,
}

impl Limits {
    pub fn from_config(config: &Config) -> Limits {
        Limits {
            connect: config.connect_timeout,
            request: config.request_timeout,
            delete: config.delete_timeout,
            max_message: config.max_message_bytes,
        }
    }
}

/// One configured server, shared by every client session.
pub struct Server {
    pub config: ServerConfig,
    pub limits: Limits,
    /// Set when a reload removed or changed this server: sessions opened on
    /// it after that close themselves.
    retired: AtomicBool,
    /// For `initialize`, notifications, answers and `DELETE`: short
    /// exchanges bounded in total; keeps connections to the server alive.
    agent: Agent,
    /// For requests, which hold one of `calls_per_server` lanes while they run.
    pub lanes: Lanes,
    pub live_sessions: Gauge,
    /// Where opens and closes are written ahead (the state file).
    pub journal: Arc<Journal>,
    /// Guards the last error and success times; held only to copy them.
    health: Mutex<Health>,
    pub stats: Arc<Stats>,
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Server({})", self.config.name)
    }
}

/// An agent with small buffers, no proxy from the environment, and status
/// codes returned as responses.
pub fn agent(limits: &Limits, idle_per_host: usize) -> Agent {
    agent_with_buffers(limits, idle_per_host, 16 * 1024, 16 * 1024)
}

/// The agent of one `GET` stream's reader: it only sends a small request and
/// reads events, so it gets small buffers (the SSE decoder bounds events
/// itself); there is one per downstream session, and this is most of its memory.
pub fn stream_agent(limits: &Limits) -> Agent {
    agent_with_buffers(limits, 1, 8 * 1024, 2 * 1024)
}

fn agent_with_buffers(limits: &Limits, idle_per_host: usize, input: usize, output: usize) -> Agent {
    let config = Agent::config_builder()
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
        .build();
    Agent::with_parts(config, ureq::unversioned::transport::DefaultConnector::new(), crate::resolver::Lookup)
}

impl Server {
    pub fn new(config: ServerConfig, limits: Limits, lanes: usize, stats: Arc<Stats>, journal: Arc<Journal>) -> Server {
        Server {
            journal,
            agent: agent(&limits, lanes),
            lanes: Lanes::new(lanes, move || agent(&limits, 1)),
            config,
            limits,
            retired: AtomicBool::new(false),
            live_sessions: Gauge::default(),
            health: Mutex::new(Health::default()),
            stats,
        }
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    pub fn retire(&self) {
        self.retired.store(true, Ordering::Release);
    }

    pub fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// Unblocks every request in flight to this server.
    pub fn shutdown(&self) {
        self.lanes.stop_all();
        self.agent.clone().shutdown();
    }

    pub fn health(&self) -> Health {
        self.health.lock().clone()
    }

    /// Replaces every secret of this server in `text` with `***`.
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        for secret in &self.config.secrets {
            out = out.replace(secret.as_str(), "***");
        }
        out
    }

    fn record<T>(&self, result: &Result<T, DownstreamError>) {
        let mut health = self.health.lock();
        match result {
            Ok(_) => health.last_ok_at = Some(SystemTime::now()),
            Err(DownstreamError::Closed | DownstreamError::Cancelled) => {}
            Err(e) => {
                health.last_error = Some(self.redact(&e.to_string()));
                health.last_error_at = Some(SystemTime::now());
            }
        }
    }

    /// Opens a downstream session: `initialize`, `notifications/initialized`,
    /// then the reader of its `GET` stream. `init_params` are the client's.
    pub fn open(
        self: &Arc<Self>,
        init_params: &RawValue,
        inbox: Weak<dyn Inbox>,
    ) -> Result<Arc<Downstream>, DownstreamError> {
        let result = self.open_inner(init_params, inbox);
        self.record(&result);
        if let Err(e) = &result {
            crate::limited!(
                warn,
                "server `{}`: {}: left out of this session's lists until it is retried",
                self.name(),
                self.redact(&e.to_string())
            );
        }
        result
    }

    fn open_inner(
        self: &Arc<Self>,
        init_params: &RawValue,
        inbox: Weak<dyn Inbox>,
    ) -> Result<Arc<Downstream>, DownstreamError> {
        let id = Value::from(0);
        let body = jsonrpc::request(&id, "initialize", Some(init_params));
        let response = self.post(&self.agent, None, None, &body)?;
        let session_id = match response.headers().get("mcp-session-id").map(|v| v.to_str()) {
            None => None,
            Some(Ok(v)) if !v.is_empty() && v.bytes().all(|b| (0x21..=0x7e).contains(&b)) => Some(v.to_string()),
            Some(_) => return Err(DownstreamError::Protocol("Mcp-Session-Id is not visible ASCII".into())),
        };
        let flight = self.lanes.flight(0);
        let exchange = Exchange {
            session_id: session_id.as_deref(),
            version: PROTOCOL_VERSIONS[0],
            agent: &self.agent,
            flight: &flight,
        };
        let answer = self.read_answer(response, &id, &mut |_| {}, &exchange);
        if session_id.is_none() {
            // Without a session id there is nothing to close if the answer is bad.
            answer.as_ref().map_err(Clone::clone)?;
        }
        // From here the server may hold a session: every failure must close it.
        let mut downstream = Downstream::new(self.clone(), session_id);
        let init = match answer.and_then(|m| initialize_result(&m)) {
            Ok(init) => init,
            Err(e) => {
                close_all(&[Arc::new(downstream)], 1);
                return Err(e);
            }
        };
        downstream.protocol_version = init.protocol_version;
        downstream.capabilities = init.capabilities;
        downstream.instructions = init.instructions;
        let downstream = Arc::new(downstream);
        if let Err(e) = downstream.notify("notifications/initialized", None) {
            close_all(&[downstream], 1);
            return Err(e);
        }
        if let Err(e) = downstream.start_reader(inbox) {
            close_all(&[downstream], 1);
            return Err(e);
        }
        Ok(downstream)
    }

    /// A downstream session an earlier mcpgate process opened (from the
    /// state file), taken over without a word to the server: to resume (its
    /// reader starts with [`Downstream::start_reader`]; if the server forgot
    /// it, the first request gets 404 and it is opened anew), or to close.
    /// It counts as opened by this process.
    pub fn saved_downstream(self: &Arc<Self>, saved: &SavedDownstream) -> Arc<Downstream> {
        let mut downstream = Downstream::new(self.clone(), saved.session_id.clone());
        downstream.protocol_version = saved.protocol_version.clone();
        downstream.capabilities = saved.capabilities.clone();
        downstream.instructions = saved.instructions.clone();
        self.stats.downstream_resumed.inc();
        Arc::new(downstream)
    }

    /// Adds the session, the protocol version and the configured headers.
    fn headers<B>(
        &self,
        mut request: ureq::RequestBuilder<B>,
        session: Option<&str>,
        version: Option<&str>,
    ) -> ureq::RequestBuilder<B> {
        if let Some(session) = session {
            request = request.header("Mcp-Session-Id", session);
        }
        if let Some(version) = version {
            request = request.header("MCP-Protocol-Version", version);
        }
        for (name, value) in &self.config.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        request
    }

    /// A `POST` of one JSON-RPC message on `agent`; the response head,
    /// whatever its status.
    fn post(
        &self,
        agent: &Agent,
        session: Option<&str>,
        version: Option<&str>,
        body: &[u8],
    ) -> Result<Response<ureq::Body>, DownstreamError> {
        let request = agent
            .post(&self.config.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream");
        self.headers(request, session, version).send(body).map_err(|e| self.transport_error(e))
    }

    /// A `GET` of the session's stream, optionally resuming after `last_event_id`.
    pub(crate) fn get_stream(
        &self,
        agent: &Agent,
        session: Option<&str>,
        version: &str,
        last_event_id: Option<&str>,
        head_timeout: Option<Duration>,
    ) -> Result<Response<ureq::Body>, DownstreamError> {
        let mut request =
            self.headers(agent.get(&self.config.url).header("Accept", "text/event-stream"), session, Some(version));
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
    fn delete(&self, session: &str, version: &str) -> Result<(), DownstreamError> {
        let deadline = std::time::Instant::now() + self.limits.delete;
        let response = loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let request = self.headers(self.agent.delete(&self.config.url), Some(session), Some(version));
            match request.config().timeout_global(Some(left)).build().call() {
                Ok(response) => break response,
                Err(ureq::Error::Io(e))
                    if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
                        && left > Duration::from_millis(50) =>
                {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => return Err(self.transport_error(e)),
            }
        };
        let status = response.status().as_u16();
        // Read the (small) body so the connection can be reused.
        let _ = response.into_body().with_config().limit(64 * 1024).read_to_vec();
        match status {
            200..=299 => Ok(()),
            // Already gone, or the server does not let clients end sessions: nothing is left open.
            404 | 405 => Ok(()),
            status => Err(DownstreamError::Status { status, detail: String::new() }),
        }
    }

    pub(crate) fn transport_error(&self, e: ureq::Error) -> DownstreamError {
        match e {
            ureq::Error::Timeout(_) => DownstreamError::Timeout(self.limits.request),
            ureq::Error::Io(io)
                if io.kind() == std::io::ErrorKind::TimedOut || io.kind() == std::io::ErrorKind::WouldBlock =>
            {
                DownstreamError::Timeout(self.limits.request)
            }
            ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::NotConnected => DownstreamError::Closed,
            ureq::Error::Io(io) => DownstreamError::Connect(format!("{io} ({})", self.config.url)),
            ureq::Error::HostNotFound => DownstreamError::Connect(format!("host not found ({})", self.config.url)),
            ureq::Error::ConnectionFailed => {
                DownstreamError::Connect(format!("connection failed ({})", self.config.url))
            }
            other => DownstreamError::Protocol(other.to_string()),
        }
    }

    /// Reads the answer to the request `id`: a JSON body, or an SSE stream
    /// whose other messages go to `on_message`. A stream that ends early is
    /// resumed with `GET` and `Last-Event-ID` when the server gave event ids.
    fn read_answer(
        &self,
        response: Response<ureq::Body>,
        id: &Value,
        on_message: &mut dyn FnMut(Message),
        session: &Exchange<'_>,
    ) -> Result<Message, DownstreamError> {
        let status = response.status().as_u16();
        let mime = response.body().mime_type().unwrap_or("").to_ascii_lowercase();
        match status {
            200 if mime == "application/json" => {
                let (bytes, _held) = self.read_message(response)?;
                let message = Message::parse(&bytes)
                    .map_err(|e| DownstreamError::Protocol(format!("invalid JSON-RPC answer: {}", e.message)))?;
                match message.kind() {
                    Ok(Kind::Response) if message.id.as_ref() == Some(id) => Ok(message),
                    _ => Err(DownstreamError::Protocol("the JSON answer is not the response to the request".into())),
                }
            }
            200 if mime == "text/event-stream" => self.read_stream(response, id, on_message, session),
            200 | 202 => Err(DownstreamError::Protocol(format!(
                "answered HTTP {status} with `{mime}`, expected application/json or text/event-stream"
            ))),
            404 if session.session_id.is_some() => Err(DownstreamError::SessionGone),
            _ => Err(status_error(response)),
        }
    }

    fn read_stream(
        &self,
        response: Response<ureq::Body>,
        id: &Value,
        on_message: &mut dyn FnMut(Message),
        session: &Exchange<'_>,
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
                        session.flight.heard();
                        let message = Message::parse(event.data.as_bytes()).map_err(|e| {
                            DownstreamError::Protocol(format!("invalid JSON-RPC in the SSE stream: {}", e.message))
                        })?;
                        match message.kind() {
                            Ok(Kind::Response) if message.id.as_ref() == Some(id) => return Ok(message),
                            Ok(Kind::Response) => {
                                log::debug!("server `{}`: response to an unknown id ignored", self.name())
                            }
                            _ => on_message(message),
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
            if let Some(why) = session.flight.stopped() {
                return Err(self.stopped(why));
            }
            std::thread::sleep(retry.unwrap_or(Duration::from_millis(50)).min(self.limits.request));
            let response =
                self.get_stream(session.agent, session.session_id, session.version, Some(resume_from), None)?;
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

    /// The error of a request ended early, for this reason.
    fn stopped(&self, why: Stop) -> DownstreamError {
        match why {
            Stop::Cancelled => DownstreamError::Cancelled,
            Stop::Closing => DownstreamError::Closed,
            Stop::Silent => DownstreamError::Timeout(self.limits.request),
        }
    }

    /// A JSON body of at most `max_message_bytes`, charged against
    /// `max_memory_mb` as it arrives (the charge lasts as long as it is held).
    fn read_message(&self, response: Response<ureq::Body>) -> Result<(Vec<u8>, Charge), DownstreamError> {
        let max = self.limits.max_message;
        let mut reader = response.into_body().into_reader();
        let (mut bytes, mut charge) = (Vec::new(), Charge::empty());
        let mut buf = [0u8; 16 * 1024];
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => return Ok((bytes, charge)),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if is_timeout(&e) => return Err(DownstreamError::Timeout(self.limits.request)),
                Err(e) => return Err(DownstreamError::Protocol(format!("reading the answer failed: {e}"))),
            };
            if bytes.len() + n > max {
                return Err(DownstreamError::Protocol(format!("message larger than {max} bytes")));
            }
            if !charge.grow(n) {
                return Err(DownstreamError::Exhausted(
                    "mcpgate holds its limit of max_memory_mb; the answer could not be held".into(),
                ));
            }
            bytes.extend_from_slice(&buf[..n]);
        }
    }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock)
        || e.to_string().to_ascii_lowercase().contains("timeout")
}

/// An error for an unexpected status, with the start of the body (for an
/// HTML error page) or the `Retry-After` of a 429 or 503.
fn status_error(response: Response<ureq::Body>) -> DownstreamError {
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
struct Exchange<'a> {
    session_id: Option<&'a str>,
    version: &'a str,
    /// The agent of the request's lane, to resume a dropped stream on.
    agent: &'a Agent,
    /// Told of every message; a stopped flight's stream is not resumed.
    flight: &'a Flight,
}

struct InitializeResult {
    protocol_version: String,
    capabilities: Value,
    instructions: Option<String>,
}

fn initialize_result(message: &Message) -> Result<InitializeResult, DownstreamError> {
    if let Some(error) = &message.error {
        return Err(DownstreamError::Refused(error.get().to_string()));
    }
    let result: Value = message
        .result
        .as_ref()
        .and_then(|r| serde_json::from_str(r.get()).ok())
        .ok_or_else(|| DownstreamError::Protocol("initialize result is not JSON".into()))?;
    let version = result["protocolVersion"].as_str().unwrap_or_default();
    if !PROTOCOL_VERSIONS.contains(&version) {
        return Err(DownstreamError::Refused(format!("protocol version `{version}` is not one mcpgate speaks")));
    }
    Ok(InitializeResult {
        protocol_version: version.to_string(),
        capabilities: result.get("capabilities").cloned().unwrap_or(Value::Object(Default::default())),
        instructions: result["instructions"].as_str().map(str::to_string),
    })
}

/// A downstream session as the state file keeps it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SavedDownstream {
    pub server: String,
    /// The server's URL when it was saved: a server whose URL changed since is not resumed.
    pub url: String,
    pub session_id: Option<String>,
    pub protocol_version: String,
    pub capabilities: Value,
    pub instructions: Option<String>,
}

/// One downstream session: a client session's session with one server.
pub struct Downstream {
    pub server: Arc<Server>,
    /// The server's `Mcp-Session-Id`, when it issued one.
    pub session_id: Option<String>,
    pub protocol_version: String,
    pub capabilities: Value,
    pub instructions: Option<String>,
    next_id: AtomicU64,
    /// The `GET` stream's reader thread; taken by the close path.
    reader: Mutex<Option<Reader>>,
    /// Set once, by the close path; later exchanges fail with `Closed`.
    closing: AtomicBool,
}

impl fmt::Debug for Downstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Downstream({})", self.server.name())
    }
}

impl Downstream {
    fn new(server: Arc<Server>, session_id: Option<String>) -> Downstream {
        server.stats.downstream_opened.inc();
        server.stats.downstream_live.inc();
        server.live_sessions.inc();
        Downstream {
            server,
            session_id,
            protocol_version: PROTOCOL_VERSIONS[0].to_string(),
            capabilities: Value::Null,
            instructions: None,
            next_id: AtomicU64::new(1),
            reader: Mutex::new(None),
            closing: AtomicBool::new(false),
        }
    }

    /// Starts the reader of this session's `GET` stream. A session whose
    /// reader cannot start would miss the server's notifications without a
    /// word: the caller closes it and reports the error instead. A reader
    /// that starts as its session closes (a restore racing a close) is
    /// stopped at once.
    pub fn start_reader(self: &Arc<Self>, inbox: Weak<dyn Inbox>) -> Result<(), DownstreamError> {
        match reader::start(self, inbox) {
            Ok(reader) => {
                let mut slot = self.reader.lock();
                if self.is_closing() {
                    drop(slot);
                    if let Some(mut reader) = reader {
                        reader.signal();
                        reader.join(self.server.limits.delete);
                    }
                } else {
                    *slot = reader;
                }
                Ok(())
            }
            Err(e) => {
                limited!(error, "server `{}`: cannot start a reader thread: {e}", self.server.name());
                Err(DownstreamError::Exhausted(format!("mcpgate cannot start a thread now ({e})")))
            }
        }
    }

    /// The key and record of this downstream session while it closes, for
    /// the state file; `None` when there is nothing to DELETE.
    pub fn closing_record(&self) -> Option<(usize, SavedDownstream)> {
        self.session_id.as_ref()?;
        Some((self.owner(), self.record()))
    }

    fn record(&self) -> SavedDownstream {
        SavedDownstream {
            server: self.server.name().to_string(),
            url: self.server.config.url.clone(),
            session_id: self.session_id.clone(),
            protocol_version: self.protocol_version.clone(),
            capabilities: self.capabilities.clone(),
            instructions: self.instructions.clone(),
        }
    }

    /// What the state file keeps of this downstream session while it is open.
    pub fn saved(&self) -> Option<SavedDownstream> {
        (!self.is_closing()).then(|| self.record())
    }

    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// A fresh request id within this downstream session.
    pub fn next_id(&self) -> Value {
        Value::from(self.next_id.fetch_add(1, Ordering::Relaxed))
    }

    /// Sends a request and returns the response message (`result` or `error`).
    pub fn request(
        &self,
        id: &Value,
        method: &str,
        params: Option<&RawValue>,
        on_message: &mut dyn FnMut(Message),
    ) -> Result<Message, DownstreamError> {
        self.call(id, method, params, on_message, &self.flight())
    }

    /// A flight for a request of this downstream session: whoever holds it
    /// can end the request (a client's cancel).
    pub fn flight(&self) -> Arc<Flight> {
        self.server.lanes.flight(self.owner())
    }

    /// This downstream session's mark on its flights.
    fn owner(&self) -> usize {
        self as *const Downstream as usize
    }

    /// Sends a request on one of the server's lanes. It ends early when
    /// `flight` is stopped: cancelled, closed, or silent past the request
    /// timeout.
    pub fn call(
        &self,
        id: &Value,
        method: &str,
        params: Option<&RawValue>,
        on_message: &mut dyn FnMut(Message),
        flight: &Arc<Flight>,
    ) -> Result<Message, DownstreamError> {
        if self.is_closing() {
            return Err(DownstreamError::Closed);
        }
        let lane = match self.server.lanes.take(flight, self.server.limits.request) {
            Ok(lane) => lane,
            Err(LaneError::Busy(n)) => return Err(DownstreamError::Busy(n)),
            Err(LaneError::Stopped(why)) => return Err(self.server.stopped(why)),
        };
        let body = jsonrpc::request(id, method, params);
        let exchange = Exchange {
            session_id: self.session_id.as_deref(),
            version: &self.protocol_version,
            agent: lane.agent(),
            flight,
        };
        let result = self
            .server
            .post(lane.agent(), self.session_id.as_deref(), Some(&self.protocol_version), &body)
            .and_then(|response| self.server.read_answer(response, id, on_message, &exchange));
        // Whatever broke the exchange, a stop says why.
        let result = match (result, flight.stopped()) {
            (Err(_), Some(why)) => Err(self.server.stopped(why)),
            (result, _) => result,
        };
        self.server.record(&result);
        result
    }

    /// Sends a notification, or a response to a request the server made.
    pub fn send(&self, body: &[u8]) -> Result<(), DownstreamError> {
        if self.is_closing() {
            return Err(DownstreamError::Closed);
        }
        let response =
            self.server.post(&self.server.agent, self.session_id.as_deref(), Some(&self.protocol_version), body)?;
        let status = response.status().as_u16();
        match status {
            200..=299 => {
                let _ = response.into_body().with_config().limit(64 * 1024).read_to_vec();
                Ok(())
            }
            404 if self.session_id.is_some() => Err(DownstreamError::SessionGone),
            _ => Err(status_error(response)),
        }
    }

    pub fn notify(&self, method: &str, params: Option<&RawValue>) -> Result<(), DownstreamError> {
        self.send(&jsonrpc::notification(method, params))
    }

    /// Whether the server declared `capability` (e.g. "tools", "logging").
    pub fn offers(&self, capability: &str) -> bool {
        self.capabilities.get(capability).is_some_and(|v| !v.is_null())
    }
}

impl Drop for Downstream {
    fn drop(&mut self) {
        if !self.closing.load(Ordering::Acquire) {
            self.server.stats.downstream_leaked.inc();
            log::error!("bug: a downstream session of `{}` was dropped without being closed", self.server.name());
        }
    }
}

/// Closes downstream sessions: the one close path. For each one not already
/// closing: signal its reader, then (in parallel, `parallel` at a time)
/// join the reader (bounded), which closes its socket, and send `DELETE`
/// (bounded by `delete_timeout_secs`), then count it closed. The reader
/// goes first so that its descriptor is free for the `DELETE` even when
/// descriptors have run out. A session given twice, or already closed, is
/// closed once.
pub fn close_all(list: &[Arc<Downstream>], parallel: usize) {
    let claimed: Vec<(&Arc<Downstream>, Mutex<Option<Reader>>)> = list
        .iter()
        .filter(|d| !d.closing.swap(true, Ordering::AcqRel))
        .map(|d| {
            d.server.lanes.stop_owned_by(d.owner());
            let mut reader = d.reader.lock().take();
            if let Some(reader) = reader.as_mut() {
                reader.signal();
            }
            (d, Mutex::new(reader))
        })
        .collect();
    let Some((first, _)) = claimed.first() else { return };
    // Written ahead: a crash from here on leaves these marked closing, and
    // the next start sends their DELETE.
    let journal = first.server.journal.clone();
    let records: Vec<(usize, SavedDownstream)> = claimed.iter().filter_map(|(d, _)| d.closing_record()).collect();
    let keys: Vec<usize> = records.iter().map(|(key, _)| *key).collect();
    if !records.is_empty() {
        journal.closing(records);
        // A failed write is logged by the writer; the DELETEs go all the same.
        let _ = journal.commit();
    }
    crate::threads::for_each_parallel("close", &claimed, parallel, |(d, reader)| {
        if let Some(reader) = reader.lock().take() {
            reader.join(d.server.limits.delete);
        }
        let Some(session) = &d.session_id else { return };
        if let Err(e) = d.server.delete(session, &d.protocol_version) {
            d.server.stats.downstream_delete_failures.inc();
            limited!(
                warn,
                "server `{}`: DELETE of a downstream session failed: {}; the server may keep it until it expires",
                d.server.name(),
                d.server.redact(&e.to_string())
            );
        }
    });
    if !keys.is_empty() {
        journal.closed(&keys);
        // Failed, a restart sends these DELETEs again; the server answers 404.
        let _ = journal.commit();
    }
    for (d, _) in claimed {
        d.server.live_sessions.dec();
        d.server.stats.downstream_live.dec();
        d.server.stats.downstream_closed.inc();
    }
}
