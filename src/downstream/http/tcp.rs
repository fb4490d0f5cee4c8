//! The TCP connections to HTTP servers: ureq's transport, made by
//! mcpgate so that two things cost one system call instead of three or two,
//! and so that a connection whose peer vanished is found.
//!
//! - **Is a kept-alive connection still good?** ureq asks before it reuses
//!   one and when it puts one back: `ioctl(FIONBIO)`, a one-byte `recv`,
//!   `ioctl(FIONBIO)` again, twice per request. Here it is one
//!   `recv(MSG_PEEK | MSG_DONTWAIT)` ([`sys::idle_and_open`]), once per
//!   request: the look as it goes back, right after its answer was read,
//!   is left to the look before its next use, which sees the same (bytes
//!   nobody asked for, or the server's close) and more.
//! - **Timeouts.** ureq bounds each read by what is left of the request's
//!   budget, a new value each time, so each request set `SO_RCVTIMEO` again.
//!   Here a timeout already set is kept while it fits
//!   ([`clock::timeout_fits`]), as the front door does for clients.
//! - **Peers that vanish.** Every connection has TCP keepalive (probes after
//!   30 s of silence, every 10 s, 3 unanswered end it): a server lost behind
//!   a partition, or a host that rebooted without a FIN, ends the read that
//!   waits on it instead of leaving it waiting for ever. A `GET` stream's
//!   connection is read with a bound of its own, its [`Pace`]: a server may
//!   keep its stream quiet, so the bound follows what the server showed of
//!   its keep-alive (three times the longest gap between its bytes, 10 to
//!   60 s; 60 s before it showed any); past it the stream is opened again.
//! - **Idle connections.** The sockets an agent opened are known to its
//!   owner ([`Sockets`]), which closes the agent's idle ones when no session
//!   uses the server, or when their peer closed them.
//!
//! Everything else is as ureq's `TcpConnector` does it: the addresses in
//! turn, the connect timeout shared among them, `TCP_NODELAY`, and the
//! socket registered with the agent at once, so that `Agent::shutdown`
//! (a cancel) unblocks a read in another thread.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout, ShutdownHandle, Transport,
};
use ureq::{Error, Timeout};

use crate::runtime::{clock, sys};

/// TCP keepalive on every connection: the first probe after this long without traffic,
const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
/// then one every this long,
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// and this many unanswered end the connection (about 60 s after a peer vanished).
const KEEPALIVE_PROBES: u32 = 3;

/// A stream's reads wait at most this many times the longest gap seen
/// between its bytes,
const PACE_FACTOR: u32 = 3;
/// at least this long,
const PACE_MIN: Duration = Duration::from_secs(10);
/// and at most this long: what it waits before the server showed its pace.
/// A reverse proxy in front of a server cuts a stream quiet for as long
/// (nginx's `proxy_read_timeout` is 60 s), so servers behind one keep
/// their streams alive more often than that.
const PACE_MAX: Duration = Duration::from_secs(60);

/// Opens [`Tcp`] connections; passes on a transport made earlier in the
/// chain. Each agent has its own: what it opened goes to its [`Sockets`],
/// and a stream's connections are read at its [`Pace`].
#[derive(Debug, Default)]
pub(crate) struct TcpConnector {
    sockets: Arc<Sockets>,
    pace: Option<Arc<Pace>>,
}

impl TcpConnector {
    /// For an agent of requests and answers: what it opens is noted in `sockets`.
    pub(crate) fn new(sockets: Arc<Sockets>) -> TcpConnector {
        TcpConnector { sockets, pace: None }
    }

    /// For the agent of one `GET` stream: its reads wait at its [`Pace`].
    pub(crate) fn paced() -> TcpConnector {
        TcpConnector { sockets: Arc::default(), pace: Some(Arc::default()) }
    }
}

impl<In: Transport> Connector<In> for TcpConnector {
    type Out = Either<In, Tcp>;

    fn connect(&self, details: &ConnectionDetails, chained: Option<In>) -> Result<Option<Self::Out>, Error> {
        if let Some(chained) = chained {
            return Ok(Some(Either::A(chained)));
        }
        let stream = Arc::new(connect(details)?);
        let handle: Arc<dyn ShutdownHandle> = stream.clone();
        (details.register_shutdown)(Arc::downgrade(&handle))?;
        self.sockets.add(&stream);
        let buffers = LazyBuffers::new(details.config.input_buffer_size(), details.config.output_buffer_size());
        Ok(Some(Either::B(Tcp {
            stream,
            buffers,
            read_timeout: None,
            write_timeout: None,
            answered: false,
            pace: self.pace.clone(),
            last_read: None,
        })))
    }
}

/// The sockets one agent opened, weakly: its pool owns them, and they go
/// when it drops them.
#[derive(Debug, Default)]
pub(crate) struct Sockets(Mutex<Vec<Weak<TcpStream>>>);

impl Sockets {
    fn add(&self, stream: &Arc<TcpStream>) {
        let mut list = self.0.lock();
        list.retain(|s| s.strong_count() > 0);
        list.push(Arc::downgrade(stream));
    }

    /// Whether the agent holds a socket that is of no more use, while it
    /// is idle (no request on it): any at all when `unused` (no session
    /// uses the server), else one whose peer closed it or that holds bytes
    /// nobody asked for.
    pub(crate) fn any_to_close(&self, unused: bool) -> bool {
        let live: Vec<Arc<TcpStream>> = self.0.lock().iter().filter_map(Weak::upgrade).collect();
        live.iter().any(|s| unused || !sys::idle_and_open(&**s))
    }
}

/// The pace of one `GET` stream: the longest gap seen between two reads
/// that brought bytes (keep-alive comments included), in milliseconds,
/// over all its connections.
#[derive(Debug, Default)]
pub(crate) struct Pace {
    longest_gap_ms: AtomicU64,
}

impl Pace {
    fn heard_after(&self, gap: Duration) {
        let ms = u64::try_from(gap.as_millis()).unwrap_or(u64::MAX);
        self.longest_gap_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// How long a read may wait: [`PACE_FACTOR`] times the longest gap,
    /// within [`PACE_MIN`] and [`PACE_MAX`]; [`PACE_MAX`] before any gap.
    fn bound(&self) -> Duration {
        match self.longest_gap_ms.load(Ordering::Relaxed) {
            0 => PACE_MAX,
            ms => (Duration::from_millis(ms) * PACE_FACTOR).clamp(PACE_MIN, PACE_MAX),
        }
    }
}

/// The addresses in turn: each gets half of what is left of the connect
/// timeout (the last one all of it), and at least 10 ms.
fn connect(details: &ConnectionDetails) -> Result<TcpStream, Error> {
    let started = std::time::Instant::now();
    let budget = (!details.timeout.after.is_not_happening()).then(|| *details.timeout.after);
    let mut last: Option<Error> = None;
    let count = details.addrs.len();
    for (i, addr) in details.addrs.iter().enumerate() {
        let share = match budget {
            None => None,
            Some(budget) => {
                let left = budget.saturating_sub(started.elapsed());
                if i > 0 && left.is_zero() {
                    return Err(Error::Timeout(Timeout::Connect));
                }
                let share = if i + 1 == count { left } else { left / 2 };
                Some(share.max(Duration::from_millis(10)))
            }
        };
        match connect_one(*addr, share) {
            Ok(stream) => {
                if details.config.no_delay() {
                    stream.set_nodelay(true)?;
                }
                sys::keep_alive(&stream, KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_PROBES)?;
                return Ok(stream);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| Error::Io(io::Error::new(io::ErrorKind::ConnectionRefused, "no address to connect to"))))
}

fn connect_one(addr: SocketAddr, timeout: Option<Duration>) -> Result<TcpStream, Error> {
    let connected = match timeout {
        Some(timeout) => TcpStream::connect_timeout(&addr, timeout),
        None => TcpStream::connect(addr),
    };
    connected.map_err(|e| error(e, Timeout::Connect))
}

/// An I/O error as ureq reports it: a timed-out socket is `reason`.
fn error(e: io::Error, reason: Timeout) -> Error {
    match e.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => Error::Timeout(reason),
        _ => Error::Io(e),
    }
}

/// One connection to a server.
pub(crate) struct Tcp {
    stream: Arc<TcpStream>,
    buffers: LazyBuffers,
    /// The timeouts as last set on the socket.
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
    /// Read from since ureq last asked whether it is open: the next ask is
    /// ureq putting it back in its pool.
    answered: bool,
    /// A stream's: its reads wait no longer than its pace allows.
    pace: Option<Arc<Pace>>,
    /// When a read last brought bytes, for the pace.
    last_read: Option<Instant>,
}

/// Sets `want` through `set` unless the timeout in `have` still fits it.
fn bound(
    stream: &TcpStream,
    have: &mut Option<Duration>,
    want: Option<Duration>,
    set: impl FnOnce(&TcpStream, Option<Duration>) -> io::Result<()>,
) -> io::Result<()> {
    let keep = match (*have, want) {
        (None, None) => true,
        (Some(have), Some(want)) => clock::timeout_fits(have, want),
        _ => false,
    };
    if !keep {
        set(stream, want)?;
        *have = want;
    }
    Ok(())
}

fn timeout_of(timeout: NextTimeout) -> Option<Duration> {
    timeout.not_zero().map(|d| *d)
}

impl Transport for Tcp {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), Error> {
        let timeout = timeout.for_write();
        if timeout.after.is_zero() {
            return Err(Error::Timeout(timeout.reason));
        }
        bound(&self.stream, &mut self.write_timeout, timeout_of(timeout), TcpStream::set_write_timeout)?;
        let output = &self.buffers.output()[..amount];
        (&*self.stream).write_all(output).map_err(|e| error(e, timeout.reason))
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, Error> {
        let timeout = timeout.for_read();
        if timeout.after.is_zero() {
            return Err(Error::Timeout(timeout.reason));
        }
        let mut wait = timeout_of(timeout);
        if let Some(pace) = &self.pace {
            wait = Some(wait.map_or(pace.bound(), |w| w.min(pace.bound())));
        }
        bound(&self.stream, &mut self.read_timeout, wait, TcpStream::set_read_timeout)?;
        let input = self.buffers.input_append_buf();
        // A signal may interrupt the read (SO_RCVTIMEO reads are not
        // restarted): read again, a bounded number of times.
        let mut read = (&*self.stream).read(input);
        for _ in 0..16 {
            match &read {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => read = (&*self.stream).read(input),
                _ => break,
            }
        }
        let amount = read.map_err(|e| error(e, timeout.reason))?;
        if let Some(pace) = &self.pace
            && amount > 0
        {
            let now = Instant::now();
            if let Some(last) = self.last_read.replace(now) {
                pace.heard_after(now - last);
            }
        }
        self.answered = true;
        self.buffers.input_appended(amount);
        Ok(amount > 0)
    }

    fn is_open(&mut self) -> bool {
        // Going back to the pool: it is looked at before it is taken again.
        if std::mem::take(&mut self.answered) {
            return true;
        }
        sys::idle_and_open(&*self.stream)
    }
}

impl fmt::Debug for Tcp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tcp").field("peer", &self.stream.peer_addr().ok()).finish()
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, mpsc};
    use std::time::{Duration, Instant};

    use ureq::Agent;
    use ureq::unversioned::transport::Connector;

    use super::TcpConnector;

    fn agent(read_timeout: Duration) -> Agent {
        let config = Agent::config_builder()
            .timeout_connect(Some(Duration::from_secs(5)))
            .timeout_recv_response(Some(read_timeout))
            .timeout_per_read(Some(read_timeout))
            .build();
        Agent::with_parts(
            config,
            ().chain(TcpConnector::default()),
            ureq::unversioned::resolver::DefaultResolver::default(),
        )
    }

    /// Reads one request head (the tests send no bodies).
    fn read_head(conn: &mut TcpStream) -> bool {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            match conn.read(&mut buf) {
                Ok(0) | Err(_) => return false,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        true
    }

    /// A server on 127.0.0.1 that answers `ok` and then does `after` on the
    /// connection; how many connections it accepted.
    fn server(after: fn(&mut TcpStream)) -> (String, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().take(20) {
                let Ok(mut conn) = conn else { return };
                count.fetch_add(1, Ordering::SeqCst);
                std::thread::spawn(move || {
                    conn.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                    while read_head(&mut conn) {
                        if conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").is_err() {
                            return;
                        }
                        after(&mut conn);
                    }
                });
            }
        });
        (url, accepted)
    }

    fn get(agent: &Agent, url: &str) -> String {
        agent.get(url).call().unwrap().into_body().read_to_string().unwrap()
    }

    #[test]
    fn a_kept_alive_connection_carries_the_next_requests() {
        let (url, accepted) = server(|_| {});
        let agent = agent(Duration::from_secs(20));
        for _ in 0..5 {
            assert_eq!(get(&agent, &url), "ok");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    /// Waits (at most 10 s) until `done` counts `n`: what the server did
    /// after an answer is then on this side's socket (loopback delivers a
    /// write or a close before the call returns).
    fn wait_for(done: &AtomicUsize, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while done.load(Ordering::SeqCst) < n {
            assert!(Instant::now() < deadline, "the server did not act within 10 s");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Three requests, each after the server acted on the last connection
    /// (`done`), each on a connection of its own.
    fn each_request_on_a_new_connection(url: &str, accepted: &AtomicUsize, done: &AtomicUsize) {
        let agent = agent(Duration::from_secs(20));
        for i in 1..=3 {
            assert_eq!(get(&agent, url), "ok");
            wait_for(done, i);
            assert_eq!(accepted.load(Ordering::SeqCst), i);
        }
    }

    #[test]
    fn a_connection_the_server_closed_is_not_used_again() {
        static CLOSED: AtomicUsize = AtomicUsize::new(0);
        let (url, accepted) = server(|conn| {
            let _ = conn.shutdown(std::net::Shutdown::Both);
            CLOSED.fetch_add(1, Ordering::SeqCst);
        });
        each_request_on_a_new_connection(&url, &accepted, &CLOSED);
    }

    #[test]
    fn a_connection_with_bytes_nobody_asked_for_is_not_used_again() {
        // After the answer was read and the connection put back: an answer
        // to nothing, which a reuse would take for the next request's.
        static STRAYS: AtomicUsize = AtomicUsize::new(0);
        let (url, accepted) = server(|conn| {
            std::thread::sleep(Duration::from_millis(20));
            let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nstray");
            STRAYS.fetch_add(1, Ordering::SeqCst);
        });
        each_request_on_a_new_connection(&url, &accepted, &STRAYS);
    }

    #[test]
    fn a_server_that_never_answers_times_out_and_a_shutdown_ends_a_read() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for conn in listener.incoming().take(2) {
                held.push(conn); // read nothing, answer nothing
            }
            std::thread::sleep(Duration::from_secs(30));
        });
        let started = Instant::now();
        let e = agent(Duration::from_millis(300)).get(&url).call().unwrap_err();
        assert!(matches!(e, ureq::Error::Timeout(_)), "{e}");
        assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());

        // Another thread's shutdown (a cancel) unblocks the read at once.
        let agent = agent(Duration::from_secs(60));
        let (tx, rx) = mpsc::channel();
        let caller = agent.clone();
        std::thread::spawn(move || {
            let _ = tx.send(caller.get(&url).call().map(|_| ()));
        });
        std::thread::sleep(Duration::from_millis(200));
        agent.shutdown();
        let result = rx.recv_timeout(Duration::from_secs(10)).expect("the read was not unblocked");
        assert!(result.is_err());
    }
}
