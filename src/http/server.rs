//! The listener and its connections: one accept thread, and one thread per
//! connection up to `max_connections`, on which its requests run.
//!
//! Slots: when every slot is taken, a new connection takes the slot of the
//! peer that has sent nothing useful for longest (an idle keep-alive
//! connection, or one still sending its head), so a slowloris cannot lock
//! clients out. When every slot is busy for real, loopback peers get one of
//! [`RESERVED`] extra slots, which answer only [`RESERVED_PATHS`]: systemd's
//! watchdog and health checks keep working. Anyone else gets `503`.
//!
//! Running out of file descriptors or threads refuses one connection with
//! `503`, counted and logged at most every 10 s; nothing panics.

use std::fs::File;
use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, tick};
use parking_lot::Mutex;

use super::request::{Head, ReadError, Reader};
use super::response::{Connection, Writer};
use super::stream::Stream;
use super::{App, EventSink, HttpReply, HttpRequest, Options, RESERVED_PATHS, ReplyBody, StreamReply};
use crate::limited;
use crate::runtime::threads;
use crate::stats::Stats;

/// Extra slots for loopback peers when all `max_connections` are busy.
pub const RESERVED: usize = 4;

/// What a connection is doing, for the choice of which one gives its slot up.
const WAITING: u8 = 0;
const READING_HEAD: u8 = 1;
const BUSY: u8 = 2;

struct Phase {
    state: AtomicU8,
    /// Milliseconds since the listener started, when `state` was entered.
    since: AtomicU64,
    started: Instant,
}

impl Phase {
    fn set(&self, state: u8) {
        self.since.store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
        self.state.store(state, Ordering::Release);
    }
}

/// One connection thread and what the accept thread needs to take its slot back.
struct Slot {
    stream: Arc<Stream>,
    phase: Arc<Phase>,
    handle: JoinHandle<()>,
    reserved: bool,
    /// Shut down to make room; its thread is ending.
    evicted: bool,
}

/// What the accept thread and the connection threads share.
struct Shared {
    app: Arc<dyn App>,
    options: Options,
    stats: Arc<Stats>,
    stopping: AtomicBool,
    started: Instant,
    /// HTTPS: every connection starts with a TLS handshake.
    #[cfg(feature = "tls")]
    tls: Option<Arc<super::tls::Acceptor>>,
}

/// The running listener: its accept thread and connection threads.
pub struct Httpd {
    addr: SocketAddr,
    shared: Arc<Shared>,
    /// A handle on the listening socket, to wake the accept thread.
    waker: TcpStream,
    accept: Option<JoinHandle<()>>,
    /// Guards the connection slots; the accept thread adds, reaps and evicts.
    slots: Arc<Mutex<Vec<Slot>>>,
}

/// Binds `addr`. A receive timeout on the listening socket makes `accept`
/// return now and then, so the accept loop sees `stopping` and reaps.
fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let listener = TcpListener::bind(addr)?;
    let socket = TcpStream::from(OwnedFd::from(listener));
    socket.set_read_timeout(Some(Duration::from_millis(500)))?;
    Ok(TcpListener::from(OwnedFd::from(socket)))
}

/// What the listener speaks: plain HTTP, or HTTPS with these settings.
#[derive(Clone, Default)]
pub enum Transport {
    #[default]
    Plain,
    #[cfg(feature = "tls")]
    Tls(Arc<super::tls::Acceptor>),
}

impl Httpd {
    /// Listens on `addr` for plain HTTP.
    pub fn start(addr: SocketAddr, app: Arc<dyn App>, options: Options, stats: Arc<Stats>) -> io::Result<Httpd> {
        Httpd::start_with(addr, app, options, stats, Transport::Plain)
    }

    /// Listens on `addr`, speaking `transport`.
    pub fn start_with(
        addr: SocketAddr,
        app: Arc<dyn App>,
        options: Options,
        stats: Arc<Stats>,
        transport: Transport,
    ) -> io::Result<Httpd> {
        let listener = listen(addr)?;
        let addr = listener.local_addr()?;
        let waker = TcpStream::from(OwnedFd::from(listener.try_clone()?));
        let shared = Arc::new(Shared {
            app,
            options,
            stats,
            stopping: AtomicBool::new(false),
            started: Instant::now(),
            #[cfg(feature = "tls")]
            tls: match transport {
                Transport::Tls(acceptor) => Some(acceptor),
                Transport::Plain => None,
            },
        });
        #[cfg(not(feature = "tls"))]
        let Transport::Plain = transport;
        let slots = Arc::new(Mutex::new(Vec::new()));
        let accept = {
            let (shared, slots) = (shared.clone(), slots.clone());
            threads::spawn("accept", "", move || accept_loop(&listener, &shared, &slots))?
        };
        Ok(Httpd { addr, shared, waker, accept: Some(accept), slots })
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

    /// Joins the connection threads: idle ones are woken by shutting their
    /// sockets, busy ones get until `deadline`. Returns how many were still
    /// running then (they end with the process).
    pub fn join(mut self, deadline: Instant) -> usize {
        self.stop_accepting();
        loop {
            let pending = {
                let mut slots = self.slots.lock();
                reap(&mut slots);
                for slot in slots.iter().filter(|s| s.phase.state.load(Ordering::Acquire) != BUSY) {
                    let _ = slot.stream.tcp().shutdown(Shutdown::Both);
                }
                slots.len()
            };
            if pending == 0 || Instant::now() >= deadline {
                return pending;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Joins connection threads that have finished.
fn reap(slots: &mut Vec<Slot>) {
    let mut i = 0;
    while i < slots.len() {
        if slots[i].handle.is_finished() {
            let _ = slots.swap_remove(i).handle.join();
        } else {
            i += 1;
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>, slots: &Mutex<Vec<Slot>>) {
    // Kept open to be given up when descriptors run out: with it closed, one
    // pending connection can be accepted and refused instead of spinning.
    let mut spare = File::open("/dev/null").ok();
    while !shared.stopping.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((stream, peer)) => admit(stream, peer, shared, slots),
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                reap(&mut slots.lock());
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) if shared.stopping.load(Ordering::Acquire) => break,
            Err(e) => {
                let out_of_fds = matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE));
                if out_of_fds && spare.take().is_some() {
                    if let Ok((stream, _)) = listener.accept() {
                        let stream = match wrap(stream, shared) {
                            Ok(stream) => stream,
                            Err((stream, _)) => Stream::plain(stream),
                        };
                        refuse(stream, shared, "out of file descriptors");
                    }
                    spare = File::open("/dev/null").ok();
                } else {
                    std::thread::sleep(Duration::from_millis(50));
                }
                limited!(error, "accepting a connection failed: {e}; the connection was refused");
            }
        }
    }
}

/// Gives a new connection a slot and a thread, or refuses it.
fn admit(stream: TcpStream, peer: SocketAddr, shared: &Arc<Shared>, slots: &Mutex<Vec<Slot>>) {
    shared.stats.connections_accepted.inc();
    let _ = stream.set_nodelay(true);
    let mut list = slots.lock();
    reap(&mut list);
    let live = list.iter().filter(|s| !s.evicted && !s.reserved).count();
    let reserved = if live < shared.options.max_connections || evict_one(&mut list) {
        false
    } else if peer.ip().is_loopback() && list.iter().filter(|s| s.reserved && !s.evicted).count() < RESERVED {
        true
    } else {
        drop(list);
        let stream = match wrap(stream, shared) {
            Ok(stream) => stream,
            Err((stream, _)) => Stream::plain(stream),
        };
        refuse(
            stream,
            shared,
            &format!("all {} connection slots are busy (max_connections)", shared.options.max_connections),
        );
        return;
    };
    let stream = match wrap(stream, shared) {
        Ok(stream) => Arc::new(stream),
        Err((stream, why)) => {
            drop(list);
            refuse(Stream::plain(stream), shared, &why);
            return;
        }
    };
    let phase = Arc::new(Phase { state: AtomicU8::new(WAITING), since: AtomicU64::new(0), started: shared.started });
    phase.set(WAITING);
    let spawned = {
        let (stream, phase, shared) = (stream.clone(), phase.clone(), shared.clone());
        threads::spawn("conn", "", move || serve_connection(&stream, peer, &phase, reserved, &shared))
    };
    match spawned {
        Ok(handle) => list.push(Slot { stream, phase, handle, reserved, evicted: false }),
        Err(e) => {
            drop(list);
            match Arc::try_unwrap(stream) {
                Ok(stream) => refuse(stream, shared, &format!("cannot start a thread: {e}")),
                Err(stream) => {
                    let _ = stream.tcp().shutdown(Shutdown::Both);
                }
            }
        }
    }
}

/// Takes the slot of the connection that has sent nothing useful for
/// longest (idle, or still sending its head); false if every one is busy.
fn evict_one(list: &mut [Slot]) -> bool {
    let victim = list
        .iter_mut()
        .filter(|s| !s.evicted && !s.reserved && s.phase.state.load(Ordering::Acquire) != BUSY)
        .min_by_key(|s| s.phase.since.load(Ordering::Relaxed));
    let Some(victim) = victim else { return false };
    let _ = victim.stream.tcp().shutdown(Shutdown::Both);
    victim.evicted = true;
    limited!(warn, "all connection slots taken: closed the connection idle for longest to make room (max_connections)");
    true
}

/// The stream of a new connection: plain, or with its TLS state (no I/O
/// yet: the handshake runs on the connection's thread).
fn wrap(tcp: TcpStream, shared: &Shared) -> Result<Stream, (TcpStream, String)> {
    #[cfg(feature = "tls")]
    if let Some(acceptor) = &shared.tls {
        return acceptor.stream(tcp).map(Stream::Tls).map_err(|(tcp, e)| (tcp, format!("cannot start TLS: {e}")));
    }
    let _ = shared;
    Ok(Stream::plain(tcp))
}

/// Answers `503` on a connection that gets no thread, and closes it. Over
/// TLS it is closed unanswered: the handshake that an answer needs would
/// hold the accept thread.
fn refuse(stream: Stream, shared: &Shared, why: &str) {
    shared.stats.connections_refused.inc();
    if stream.is_tls() {
        let _ = stream.tcp().shutdown(Shutdown::Both);
        limited!(warn, "a client connection was closed unanswered (HTTPS): {why}");
        return;
    }
    let _ = stream.tcp().set_write_timeout(Some(Duration::from_millis(200)));
    let mut writer = Writer::new(Arc::new(stream), Duration::from_millis(200));
    let body = format!("mcpgate cannot take this connection now: {why}; retry shortly\n");
    let headers = [("Retry-After", "1".to_string())];
    let _ = writer.respond(503, &headers, Some("text/plain"), body.as_bytes(), Connection::Close);
    limited!(warn, "a client connection was refused with 503: {why}");
}

fn serve_connection(stream: &Arc<Stream>, peer: SocketAddr, phase: &Phase, reserved: bool, shared: &Shared) {
    let _live = shared.stats.threads_connections.enter();
    let options = &shared.options;
    #[cfg(feature = "tls")]
    if let Stream::Tls(tls) = &**stream {
        // Cut like a slow head, and evictable like one while it lasts.
        phase.set(READING_HEAD);
        match tls.handshake(Instant::now() + options.header_timeout) {
            Ok(()) => shared.stats.tls_handshakes.inc(),
            Err(e) => {
                shared.stats.tls_handshake_failures.inc();
                limited!(info, "TLS handshake with {peer} failed: {e}; connection closed");
                let _ = stream.tcp().shutdown(Shutdown::Both);
                return;
            }
        }
    }
    let mut reader = Reader::new(stream.clone(), *options);
    let mut writer = Writer::new(stream.clone(), options.write_timeout);
    let keep_alive = Connection::KeepAlive(options.idle_timeout.as_secs().saturating_sub(1).max(1));
    loop {
        phase.set(WAITING);
        if !reader.wait_for_request() {
            break;
        }
        phase.set(READING_HEAD);
        let head = match reader.read_head() {
            Ok(head) => head,
            Err(e) => {
                refuse_request(&mut writer, e, shared);
                break;
            }
        };
        phase.set(BUSY);
        let _busy = shared.stats.connections_busy.enter();
        if shared.stopping.load(Ordering::Acquire) {
            refuse_request(&mut writer, ReadError::Refuse(503, "mcpgate is shutting down".into()), shared);
            break;
        }
        if reserved && !(head.method == "GET" && RESERVED_PATHS.contains(&head.path.as_str())) {
            let why = "every connection slot is busy (max_connections); retry shortly";
            refuse_request(&mut writer, ReadError::Refuse(503, why.into()), shared);
            break;
        }
        // The charge for the body lasts until its request is answered.
        let (body, _held) = match reader.read_body(&head, || writer.write_parts([b"HTTP/1.1 100 Continue\r\n\r\n"])) {
            Ok(body) => body,
            Err(e) => {
                refuse_request(&mut writer, e, shared);
                break;
            }
        };
        let connection = if head.close { Connection::Close } else { keep_alive };
        let req = request(head, body, stream, peer);
        let mut sink = PostSink { writer: &mut writer, state: Sink::Waiting, http11: req.http11, connection };
        let reply = shared.app.handle(&req, &mut sink);
        let after = sink.finish(reply, shared);
        if after == Connection::Close {
            break;
        }
    }
    if writer.timed_out() {
        // A client too slow to take its answer: drop what the kernel still
        // holds for it (a reset), instead of trickling it out after we left.
        crate::runtime::sys::reset_on_close(stream.tcp());
    }
    let _ = stream.tcp().shutdown(Shutdown::Both);
}

fn request(head: Head, body: Vec<u8>, stream: &Arc<Stream>, peer: SocketAddr) -> HttpRequest {
    HttpRequest {
        method: head.method,
        path: head.path,
        query: head.query,
        headers: head.headers,
        params: head.params,
        body,
        peer: Some(peer),
        http11: head.http11,
        client: Some(super::Client(stream.clone())),
    }
}

/// Answers a request that will not be served, and closes the connection.
fn refuse_request(writer: &mut Writer, e: ReadError, shared: &Shared) {
    let ReadError::Refuse(status, message) = e else { return };
    shared.stats.requests_refused.inc();
    log::debug!("request refused with {status}: {message}");
    let mut reply = HttpReply::bad(status, &message);
    if status == 503 {
        reply = reply.header("Retry-After", "1");
    }
    let _ = respond(writer, reply, Connection::Close, shared);
}

/// The answer to a `POST`: plain until its first event, SSE after.
struct PostSink<'a> {
    writer: &'a mut Writer,
    state: Sink,
    http11: bool,
    connection: Connection,
}

#[derive(PartialEq, Eq)]
enum Sink {
    Waiting,
    Streaming,
    Gone,
}

impl EventSink for PostSink<'_> {
    fn can_stream(&self) -> bool {
        // Chunked framing needs HTTP/1.1.
        self.http11 && self.state != Sink::Gone
    }

    fn event(&mut self, data: &[u8]) -> io::Result<()> {
        if self.state == Sink::Gone {
            return Err(io::ErrorKind::NotConnected.into());
        }
        let mut result = Ok(());
        if self.state == Sink::Waiting {
            result = self.writer.sse_head(&[], self.connection);
        }
        let result = result.and_then(|()| self.writer.chunk(data));
        self.state = if result.is_ok() { Sink::Streaming } else { Sink::Gone };
        result
    }
}

impl PostSink<'_> {
    fn finish(self, reply: HttpReply, shared: &Shared) -> Connection {
        match self.state {
            Sink::Waiting => respond(self.writer, reply, self.connection, shared),
            Sink::Streaming => match self.writer.end_chunks(reply.body.parts()) {
                Ok(()) => self.connection,
                Err(_) => Connection::Close,
            },
            Sink::Gone => Connection::Close,
        }
    }
}

fn respond(writer: &mut Writer, reply: HttpReply, connection: Connection, shared: &Shared) -> Connection {
    // The body's charge (`_held`) lasts until it is written.
    let HttpReply { status, headers, body, held: _held } = reply;
    let result = match body {
        ReplyBody::Stream(stream) => {
            run_stream(writer, &headers, stream, shared);
            return Connection::Close;
        }
        ReplyBody::Empty => writer.respond(status, &headers, None, &[], connection),
        ReplyBody::Data { content_type, bytes } => {
            writer.respond(status, &headers, Some(content_type), &bytes, connection)
        }
        ReplyBody::Answer { .. } => {
            writer.respond_parts(status, &headers, Some("application/json"), body.parts(), connection)
        }
    };
    match result {
        Ok(()) => connection,
        Err(e) => {
            log::debug!("writing a response failed: {e}");
            Connection::Close
        }
    }
}

/// Writes a `GET` stream on this connection thread until it ends; the
/// connection closes after it.
fn run_stream(writer: &mut Writer, headers: &[(&'static str, String)], stream: StreamReply, shared: &Shared) {
    let _live = shared.stats.threads_streams.enter();
    let opened =
        writer.sse_head(headers, Connection::Close).is_ok() && stream.first.iter().all(|e| writer.chunk(e).is_ok());
    if opened {
        let keepalive = tick(stream.keepalive);
        loop {
            let written = select! {
                recv(stream.rx) -> message => match message {
                    Ok(event) => writer.chunk(&event),
                    Err(_) => break,
                },
                recv(keepalive) -> _ => writer.chunk(b": keep-alive\n\n"),
            };
            if written.is_err() {
                break;
            }
        }
        let _ = writer.end_chunks([&[]; 3]);
    }
    (stream.on_end)();
}
