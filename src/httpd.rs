#![forbid(unsafe_code)]
//! The upstream HTTP adapter over tiny_http_fork: mcpgate's own accept
//! loop, one thread per connection, at most `workers` requests handled at
//! once, and SSE written as one HTTP chunk per event. Requests become [`HttpRequest`]s and
//! [`HttpReply`]s become bytes; nothing else here knows MCP.
//!
//! tiny_http's own accept thread and task pool are not used: its pool can
//! starve a burst of connections and its accept thread dies when a thread
//! cannot be spawned. Here a connection beyond `max_connections`, or one
//! whose thread cannot be started, is closed and counted, and the rest go on.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, bounded, select, tick};
use parking_lot::Mutex;
use serde_json::Value;
use tiny_http_fork::{Request, Response};

use crate::jsonrpc::{self, RpcError};
use crate::stats::Stats;
use crate::threads;

/// Request headers mcpgate reads; others are not copied out of tiny_http.
const HEADERS: &[&str] = &[
    "accept",
    "content-type",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
    "origin",
    "host",
    "authorization",
];

/// A request as the handlers see it.
#[derive(Debug, Clone, Default)]
pub struct HttpRequest {
    pub method: String,
    /// The path without the query.
    pub path: String,
    /// Lower-case names, from [`HEADERS`] only.
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
    pub peer: Option<SocketAddr>,
    pub http11: bool,
}

impl HttpRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }
}

/// A `GET` stream: SSE events (already encoded) to send, `first` and then
/// from `rx` until it disconnects or a write fails; then `on_end` runs.
pub struct StreamReply {
    pub first: Vec<Vec<u8>>,
    pub rx: Receiver<Vec<u8>>,
    pub keepalive: Duration,
    pub on_end: Box<dyn FnOnce() + Send>,
}

pub enum ReplyBody {
    Empty,
    Data { content_type: &'static str, bytes: Vec<u8> },
    Stream(StreamReply),
}

pub struct HttpReply {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: ReplyBody,
}

impl HttpReply {
    pub fn json(status: u16, bytes: Vec<u8>) -> HttpReply {
        HttpReply { status, headers: Vec::new(), body: ReplyBody::Data { content_type: "application/json", bytes } }
    }

    /// A JSON-RPC error as the body of an HTTP error (or of a 200).
    pub fn error(status: u16, id: &Value, error: &RpcError) -> HttpReply {
        HttpReply::json(status, jsonrpc::error(id, error))
    }

    /// An HTTP error whose body is a JSON-RPC "invalid request" saying why.
    pub fn bad(status: u16, message: &str) -> HttpReply {
        HttpReply::error(status, &Value::Null, &RpcError::new(jsonrpc::INVALID_REQUEST, message))
    }

    pub fn empty(status: u16) -> HttpReply {
        HttpReply { status, headers: Vec::new(), body: ReplyBody::Empty }
    }

    pub fn accepted() -> HttpReply {
        HttpReply::empty(202)
    }

    pub fn text(status: u16, content_type: &'static str, text: String) -> HttpReply {
        HttpReply { status, headers: Vec::new(), body: ReplyBody::Data { content_type, bytes: text.into_bytes() } }
    }

    /// The last event of an SSE answer to a `POST` (already encoded).
    pub fn sse(event: Vec<u8>) -> HttpReply {
        HttpReply {
            status: 200,
            headers: Vec::new(),
            body: ReplyBody::Data { content_type: "text/event-stream", bytes: event },
        }
    }

    pub fn stream(stream: StreamReply) -> HttpReply {
        HttpReply { status: 200, headers: Vec::new(), body: ReplyBody::Stream(stream) }
    }

    pub fn header(mut self, name: &'static str, value: &str) -> HttpReply {
        self.headers.push((name, value.to_string()));
        self
    }
}

/// Where a handler sends events (SSE-encoded) that precede its answer. The
/// first event turns the answer into an SSE stream.
pub trait EventSink {
    /// Whether this answer can become an SSE stream at all.
    fn can_stream(&self) -> bool;
    fn event(&mut self, sse: &[u8]) -> io::Result<()>;
}

/// A sink for answers that cannot stream (batches, inline answers).
pub struct NoStream;

impl EventSink for NoStream {
    fn can_stream(&self) -> bool {
        false
    }

    fn event(&mut self, _: &[u8]) -> io::Result<()> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "this answer cannot stream"))
    }
}

/// How a request waits before it runs (always on its connection's thread).
pub enum Route {
    /// At once: it does not wait long on servers.
    AtOnce,
    /// After taking one of the `workers` permits.
    WithPermit,
}

/// The application behind the adapter.
pub trait App: Send + Sync + 'static {
    fn route(&self, req: &HttpRequest) -> Route;
    fn handle(&self, req: &HttpRequest, sink: &mut dyn EventSink) -> HttpReply;
}

/// Socket and queue limits of the listener.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub workers: usize,
    pub max_connections: usize,
    pub max_body_bytes: usize,
    pub max_header_count: usize,
    pub max_header_bytes: usize,
    /// Idle time between requests, and the longest silence while one is sent.
    pub idle_timeout: Duration,
    pub write_timeout: Duration,
}

/// At most `workers` requests that talk to servers run at once. They run on
/// the connection thread that read them, holding one of these permits: a
/// pool of worker threads would add two thread wake-ups to every request,
/// measured at about 100 µs of latency and a fifth of the throughput on a
/// 2-core host (docs/BENCHMARKS.md). A request that finds every permit
/// taken waits for one, in order.
struct Permits {
    give: Sender<()>,
    take: Receiver<()>,
}

impl Permits {
    fn new(count: usize) -> Permits {
        let (give, take) = bounded(count);
        for _ in 0..count {
            give.send(()).expect("the channel holds `count`");
        }
        Permits { give, take }
    }

    /// Waits for a permit; it is given back when the guard drops.
    fn acquire(&self) -> Permit<'_> {
        let _ = self.take.recv();
        Permit(self)
    }
}

struct Permit<'a>(&'a Permits);

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        let _ = self.0.give.try_send(());
    }
}

/// What the accept thread and the connection threads share.
struct Shared {
    app: Arc<dyn App>,
    options: Options,
    stats: Arc<Stats>,
    stopping: AtomicBool,
    permits: Permits,
}

/// The running listener: its accept thread and connection threads.
pub struct Httpd {
    addr: SocketAddr,
    shared: Arc<Shared>,
    /// A handle on the listening socket, to wake the accept thread.
    waker: TcpStream,
    accept: Option<JoinHandle<()>>,
    /// Guards the handles of connection threads; the accept thread adds and reaps them.
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

/// Binds `addr` with the socket options accepted connections inherit:
/// TCP_NODELAY and the read and write timeouts.
fn listen(addr: SocketAddr, options: &Options) -> io::Result<TcpListener> {
    let listener = TcpListener::bind(addr)?;
    let socket = TcpStream::from(OwnedFd::from(listener));
    socket.set_nodelay(true)?;
    // SO_RCVTIMEO on the listener also makes accept() return every so often; the loop expects it.
    socket.set_read_timeout(Some(options.idle_timeout))?;
    socket.set_write_timeout(Some(options.write_timeout))?;
    Ok(TcpListener::from(OwnedFd::from(socket)))
}

impl Httpd {
    pub fn start(addr: SocketAddr, app: Arc<dyn App>, options: Options, stats: Arc<Stats>) -> io::Result<Httpd> {
        let listener = listen(addr, &options)?;
        let addr = listener.local_addr()?;
        let waker = TcpStream::from(OwnedFd::from(listener.try_clone()?));
        let permits = Permits::new(options.workers);
        let shared = Arc::new(Shared { app, options, stats, stopping: AtomicBool::new(false), permits });
        let conns = Arc::new(Mutex::new(Vec::new()));
        let accept = {
            let (shared, conns) = (shared.clone(), conns.clone());
            let listener = tiny_http_fork::Listener::Tcp(listener);
            threads::spawn("accept", "", move || accept_loop(&listener, &shared, &conns))?
        };
        Ok(Httpd { addr, shared, waker, accept: Some(accept), conns })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting connections; requests already read are still served.
    pub fn stop_accepting(&mut self) {
        self.shared.stopping.store(true, Ordering::Release);
        // shutdown() on a listening socket wakes a blocked accept() on Linux.
        let _ = self.waker.shutdown(Shutdown::Both);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }

    /// Joins the connection threads as soon as none is handling a request
    /// (or at `deadline`). A connection thread still waiting for the next
    /// request of an idle keep-alive client holds nothing and ends with the
    /// process; returns how many did.
    pub fn join(mut self, deadline: Instant) -> usize {
        self.stop_accepting();
        loop {
            let busy = self.shared.stats.connections_busy.get();
            let pending = {
                let mut conns = self.conns.lock();
                reap(&mut conns);
                conns.len()
            };
            if pending == 0 || busy == 0 || Instant::now() >= deadline {
                return pending;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Joins connection threads that have finished.
fn reap(conns: &mut Vec<JoinHandle<()>>) {
    let mut i = 0;
    while i < conns.len() {
        if conns[i].is_finished() {
            let _ = conns.swap_remove(i).join();
        } else {
            i += 1;
        }
    }
}

fn accept_loop(listener: &tiny_http_fork::Listener, shared: &Arc<Shared>, conns: &Mutex<Vec<JoinHandle<()>>>) {
    let ssl = match tiny_http_fork::SslContextWrap::build_ssl_capabilities(None) {
        Ok(ssl) => ssl,
        Err(e) => {
            log::error!("cannot set up the listener: {e}");
            return;
        }
    };
    let mut last_refusal_log: Option<Instant> = None;
    while !shared.stopping.load(Ordering::Acquire) {
        let conn = match tiny_http_fork::Server::accept_connection(listener, &ssl) {
            Ok(Some(conn)) => conn,
            Ok(None) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
                ) =>
            {
                continue;
            }
            Err(_) if shared.stopping.load(Ordering::Acquire) => break,
            Err(e) => {
                // Out of file descriptors, most likely: wait instead of spinning.
                log::error!("accept failed: {e}; retrying in 100 ms");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        shared.stats.connections_accepted.inc();
        let mut list = conns.lock();
        reap(&mut list);
        let refusal = if list.len() >= shared.options.max_connections {
            drop(conn);
            Some(format!("{} connections are open (max_connections)", list.len()))
        } else {
            let shared = shared.clone();
            match threads::spawn("conn", "", move || serve_connection(conn, &shared)) {
                Ok(handle) => {
                    list.push(handle);
                    None
                }
                Err(e) => Some(format!("cannot start a thread: {e}")),
            }
        };
        drop(list);
        if let Some(why) = refusal {
            shared.stats.connections_refused.inc();
            if last_refusal_log.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                log::warn!("a client connection was closed unanswered: {why}");
                last_refusal_log = Some(Instant::now());
            }
        }
    }
}

fn serve_connection<I, E>(conn: I, shared: &Shared)
where
    I: Iterator<Item = Result<Request, E>>,
{
    let _live = shared.stats.threads_connections.enter();
    for rq in conn {
        let Ok(mut rq) = rq else { break };
        // Counted while a request is handled; an idle connection waits in `conn.next()`.
        let _busy = shared.stats.connections_busy.enter();
        // A refused request ends its connection: its body may be unread.
        // (tiny_http will not write `Connection: close`; the close says it.)
        // tiny_http writes the answer first, then drains what is left of the
        // body with a 4 KiB buffer, bounded by the read timeout.
        if shared.stopping.load(Ordering::Acquire) {
            respond(rq, HttpReply::bad(503, "mcpgate is shutting down"), shared);
            break;
        }
        let req = match read_request(&mut rq, &shared.options) {
            Ok(req) => req,
            Err(reply) => {
                respond(rq, reply, shared);
                break;
            }
        };
        match shared.app.route(&req) {
            Route::AtOnce => {
                let reply = shared.app.handle(&req, &mut NoStream);
                if respond(rq, reply, shared) == After::Close {
                    break;
                }
            }
            Route::WithPermit => {
                let _permit = shared.permits.acquire();
                let _handling = shared.stats.threads_workers.enter();
                let mut sink = PostSink::Waiting(Some(rq));
                let reply = shared.app.handle(&req, &mut sink);
                sink.finish(reply, shared);
            }
        }
    }
}

/// Copies what the handlers need out of a tiny_http request, reading the
/// body unless it is too large (decided before a byte of it is read).
fn read_request(rq: &mut Request, options: &Options) -> Result<HttpRequest, HttpReply> {
    let too_large =
        || HttpReply::bad(413, &format!("request body larger than {} bytes (max_body_bytes)", options.max_body_bytes));
    if let Err(why) = check_headers(rq.headers(), options) {
        return Err(HttpReply::bad(431, &why));
    }
    if rq.body_length().is_some_and(|n| n > options.max_body_bytes) {
        return Err(too_large());
    }
    // tiny_http reads a Content-Length it cannot parse as "no body" and would
    // then take the body for the next request: refuse it (RFC 9112, 6.3).
    if rq.body_length().is_none() && rq.headers().get("Content-Length").is_some() {
        return Err(HttpReply::bad(400, "Content-Length is not a valid length"));
    }
    let url = rq.url();
    let path = url.split('?').next().unwrap_or("").to_string();
    let mut headers = Vec::new();
    for name in HEADERS {
        if let Some(value) = rq.headers().get(name) {
            headers.push((*name, value.as_str().to_string()));
        }
    }
    let method = rq.method().as_str().to_string();
    let http11 = *rq.http_version() == (1, 1);
    let peer = rq.remote_addr().copied();
    let mut body = Vec::new();
    let limit = options.max_body_bytes as u64 + 1;
    if let Err(e) = rq.as_reader().take(limit).read_to_end(&mut body) {
        return Err(HttpReply::bad(400, &format!("cannot read the request body: {e}")));
    }
    if body.len() > options.max_body_bytes {
        return Err(too_large());
    }
    Ok(HttpRequest { method, path, headers, body, peer, http11 })
}

/// Counts the headers and their bytes. tiny_http offers no way to walk its
/// headers, but its `Debug` output writes each one as a `Header { .. }`
/// struct: a writer that counts those, and stops the output as soon as a
/// limit is passed, measures them without copying.
fn check_headers(headers: &tiny_http_fork::Headers, options: &Options) -> Result<(), String> {
    struct Budget {
        count: usize,
        bytes: usize,
        max_count: usize,
        max_bytes: usize,
    }
    impl std::fmt::Write for Budget {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            if s == "Header" {
                self.count += 1;
            }
            self.bytes += s.len();
            // The Debug text adds about 64 bytes of field names per header.
            let over = self.count > self.max_count || self.bytes > self.max_bytes + self.count * 64;
            if over { Err(std::fmt::Error) } else { Ok(()) }
        }
    }
    let mut budget =
        Budget { count: 0, bytes: 0, max_count: options.max_header_count, max_bytes: options.max_header_bytes };
    if std::fmt::write(&mut budget, format_args!("{headers:?}")).is_ok() {
        return Ok(());
    }
    if budget.count > options.max_header_count {
        Err(format!("more than {} request headers (max_header_count)", options.max_header_count))
    } else {
        Err(format!("request headers larger than {} bytes (max_header_bytes)", options.max_header_bytes))
    }
}

/// The answer to a `POST`: plain until its first event, SSE after.
enum PostSink {
    Waiting(Option<Request>),
    Streaming(Box<dyn Write + Send>),
    Gone,
}

impl EventSink for PostSink {
    fn can_stream(&self) -> bool {
        match self {
            // Chunked framing needs HTTP/1.1.
            PostSink::Waiting(Some(rq)) => *rq.http_version() == (1, 1),
            PostSink::Waiting(None) => false,
            PostSink::Streaming(_) | PostSink::Gone => true,
        }
    }

    fn event(&mut self, data: &[u8]) -> io::Result<()> {
        if let PostSink::Waiting(rq) = self {
            let Some(rq) = rq.take() else { return Err(io::ErrorKind::NotConnected.into()) };
            let mut writer = rq.into_writer();
            match write_sse_head(&mut writer, &[]) {
                Ok(()) => *self = PostSink::Streaming(writer),
                Err(e) => {
                    *self = PostSink::Gone;
                    return Err(e);
                }
            }
        }
        let PostSink::Streaming(writer) = self else { return Err(io::ErrorKind::NotConnected.into()) };
        let result = write_chunk(writer, data);
        if result.is_err() {
            *self = PostSink::Gone;
        }
        result
    }
}

impl PostSink {
    fn finish(self, reply: HttpReply, shared: &Shared) {
        match self {
            PostSink::Waiting(Some(rq)) => {
                respond(rq, reply, shared);
            }
            PostSink::Streaming(mut writer) => {
                if let ReplyBody::Data { bytes, .. } = &reply.body {
                    let _ = write_chunk(&mut writer, bytes);
                }
                let _ = end_chunks(&mut writer);
            }
            PostSink::Waiting(None) | PostSink::Gone => {}
        }
    }
}

/// What a connection does after a reply.
#[derive(Debug, PartialEq, Eq)]
enum After {
    KeepAlive,
    /// A `GET` stream was sent with `Connection: close`.
    Close,
}

fn respond(rq: Request, reply: HttpReply, shared: &Shared) -> After {
    let HttpReply { status, headers, body } = reply;
    let result = match body {
        ReplyBody::Stream(stream) => {
            run_stream(rq, &headers, stream, shared);
            return After::Close;
        }
        ReplyBody::Empty => rq.respond(with_headers(Response::empty(status), &headers, shared)),
        ReplyBody::Data { content_type, bytes } => {
            let response = Response::from_data(bytes).with_status_code(status);
            let response = with_headers(response, &headers, shared);
            rq.respond(match tiny_http_fork::Header::from_bytes("Content-Type", content_type) {
                Ok(h) => response.with_header(h),
                Err(_) => response,
            })
        }
    };
    if let Err(e) = result {
        log::debug!("writing a response failed: {e}");
    }
    After::KeepAlive
}

fn with_headers<R: Read>(
    mut response: Response<R>,
    headers: &[(&'static str, String)],
    shared: &Shared,
) -> Response<R> {
    // Tells clients (Node's undici, browsers) to drop an idle connection just
    // before mcpgate closes it, so that a request never races the close.
    let idle = shared.options.idle_timeout.as_secs().saturating_sub(1).max(1);
    if let Ok(h) = tiny_http_fork::Header::from_bytes("Keep-Alive", format!("timeout={idle}")) {
        response = response.with_header(h);
    }
    for (name, value) in headers {
        match tiny_http_fork::Header::from_bytes(name.as_bytes(), value.as_bytes()) {
            Ok(h) => response = response.with_header(h),
            Err(_) => log::error!("header `{name}` has a value tiny_http refuses; left out"),
        }
    }
    response
}

/// Writes a `GET` stream on this connection thread until it ends.
fn run_stream(rq: Request, headers: &[(&'static str, String)], stream: StreamReply, shared: &Shared) {
    let _live = shared.stats.threads_streams.enter();
    let mut writer = rq.into_writer();
    // A stream's connection is not reused: after it, the connection thread ends.
    let mut headers = headers.to_vec();
    headers.push(("Connection", "close".into()));
    let opened = write_sse_head(&mut writer, &headers).is_ok()
        && stream.first.iter().all(|event| write_chunk(&mut writer, event).is_ok());
    if opened {
        let keepalive = tick(stream.keepalive);
        loop {
            let written = select! {
                recv(stream.rx) -> message => match message {
                    Ok(event) => write_chunk(&mut writer, &event),
                    Err(_) => break,
                },
                recv(keepalive) -> _ => write_chunk(&mut writer, b": keep-alive\n\n"),
            };
            if written.is_err() {
                break;
            }
        }
        let _ = end_chunks(&mut writer);
    }
    (stream.on_end)();
}

fn write_sse_head(writer: &mut dyn Write, headers: &[(&'static str, String)]) -> io::Result<()> {
    let mut head = String::from(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nX-Accel-Buffering: no\r\nTransfer-Encoding: chunked\r\n",
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    writer.write_all(head.as_bytes())?;
    writer.flush()
}

fn write_chunk(writer: &mut dyn Write, data: &[u8]) -> io::Result<()> {
    writer.write_all(format!("{:x}\r\n", data.len()).as_bytes())?;
    writer.write_all(data)?;
    writer.write_all(b"\r\n")?;
    writer.flush()
}

fn end_chunks(writer: &mut dyn Write) -> io::Result<()> {
    writer.write_all(b"0\r\n\r\n")?;
    writer.flush()
}
