//! A fault-injecting TCP proxy on 127.0.0.1, put between mcpgate and a
//! server: the faults a network or a host makes, on real sockets. It passes
//! bytes both ways until told otherwise:
//!
//! - [`Proxy::black_hole`]: nothing passes any more, either way, on the
//!   connections open now, and new ones are accepted and go nowhere; no
//!   side is told (a partition, a host gone dark);
//! - [`Proxy::half_open`]: the same, but the server's side of the open
//!   connections is closed (a host that rebooted without a FIN: it forgot
//!   them, mcpgate's side still waits);
//! - [`Proxy::reset`]: every open connection is reset on both sides;
//! - [`Proxy::reset_as_used`]: every open connection is reset on both
//!   sides when mcpgate next sends on it, and what it sent is dropped (a
//!   server that closes an idle kept-alive connection as a request comes);
//! - [`Proxy::delay`]: what the server sends waits this long at the proxy;
//! - [`Proxy::heal`]: new connections pass again. Connections that went
//!   silent stay silent: what they lost is lost.
//!
//! Two threads per connection, each reading with a short timeout so that
//! they see a fault and the proxy's end; all are joined when it is dropped.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often a pumping thread looks at the faults and the proxy's end.
const LOOK_EVERY: Duration = Duration::from_millis(20);

/// One connection through the proxy: mcpgate's side and the server's.
struct Conn {
    client: TcpStream,
    /// `None` for a connection accepted into a black hole.
    upstream: Option<TcpStream>,
    /// Nothing passes any more, either way.
    silent: AtomicBool,
    /// Reset: both threads end, and the last to drop it closes both sides
    /// with `SO_LINGER` 0.
    ended: AtomicBool,
    /// Its threads still pumping: the last one out lets go of it.
    pumping: AtomicUsize,
    /// Reset when mcpgate next sends on it.
    reset_when_used: AtomicBool,
}

impl Conn {
    /// Both sides are closed with `SO_LINGER` 0 when the last holder lets
    /// go, and its threads end.
    fn reset(&self) {
        mcpgate::runtime::sys::reset_on_close(&self.client);
        if let Some(upstream) = &self.upstream {
            mcpgate::runtime::sys::reset_on_close(upstream);
        }
        self.ended.store(true, Ordering::Release);
    }
}

#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    /// New connections go nowhere.
    dark: AtomicBool,
    /// Milliseconds what the server sends waits at the proxy.
    delay_ms: AtomicU64,
    accepted: AtomicUsize,
    /// Connections made to the server.
    forwarded: AtomicUsize,
    conns: Mutex<Vec<Arc<Conn>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// The proxy; stopped and joined when dropped.
pub struct Proxy {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl Proxy {
    /// A proxy to `target` (`host:port`) on a port of its own.
    pub fn start(target: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let target: SocketAddr = target.parse().expect("a socket address");
        let shared = Arc::new(Shared::default());
        let sh = shared.clone();
        let accept = std::thread::spawn(move || {
            while !sh.stop.load(Ordering::Acquire) {
                match listener.accept() {
                    Ok((client, _)) => open(&sh, client, target),
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Proxy { addr, shared, accept: Some(accept) }
    }

    /// The MCP endpoint of the server, through the proxy.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::Acquire)
    }

    /// Connections made to the server so far.
    pub fn forwarded(&self) -> usize {
        self.shared.forwarded.load(Ordering::Acquire)
    }

    /// Nothing passes on the open connections, and new ones go nowhere.
    pub fn black_hole(&self) {
        self.shared.dark.store(true, Ordering::Release);
        for conn in self.shared.conns.lock().unwrap().iter() {
            conn.silent.store(true, Ordering::Release);
        }
    }

    /// [`Proxy::black_hole`], with the server's side of the open connections closed.
    pub fn half_open(&self) {
        self.shared.dark.store(true, Ordering::Release);
        for conn in self.shared.conns.lock().unwrap().iter() {
            conn.silent.store(true, Ordering::Release);
            if let Some(upstream) = &conn.upstream {
                let _ = upstream.shutdown(Shutdown::Both);
            }
        }
    }

    /// Resets every open connection, on both sides.
    pub fn reset(&self) {
        let conns = std::mem::take(&mut *self.shared.conns.lock().unwrap());
        for conn in conns {
            conn.reset();
        }
    }

    /// Every open connection is reset, on both sides, when mcpgate next
    /// sends on it; the bytes are dropped. New connections pass.
    pub fn reset_as_used(&self) {
        for conn in self.shared.conns.lock().unwrap().iter() {
            conn.reset_when_used.store(true, Ordering::Release);
        }
    }

    /// What the server sends waits `delay` at the proxy.
    pub fn delay(&self, delay: Duration) {
        self.shared.delay_ms.store(delay.as_millis() as u64, Ordering::Release);
    }

    /// New connections pass again.
    pub fn heal(&self) {
        self.shared.dark.store(false, Ordering::Release);
        self.shared.delay_ms.store(0, Ordering::Release);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        let threads = std::mem::take(&mut *self.shared.threads.lock().unwrap());
        for thread in threads {
            let _ = thread.join();
        }
        self.shared.conns.lock().unwrap().clear();
    }
}

/// Takes a connection in: to the server, or (in the dark) nowhere.
fn open(sh: &Arc<Shared>, client: TcpStream, target: SocketAddr) {
    sh.accepted.fetch_add(1, Ordering::AcqRel);
    let _ = client.set_nonblocking(false);
    let _ = client.set_nodelay(true);
    let dark = sh.dark.load(Ordering::Acquire);
    let upstream = if dark { None } else { TcpStream::connect_timeout(&target, Duration::from_secs(2)).ok() };
    if !dark && upstream.is_none() {
        // The server is down: refused, as it would have been without the proxy.
        mcpgate::runtime::sys::reset_on_close(&client);
        return;
    }
    if upstream.is_some() {
        sh.forwarded.fetch_add(1, Ordering::AcqRel);
    }
    for socket in std::iter::once(&client).chain(upstream.as_ref()) {
        let _ = socket.set_read_timeout(Some(LOOK_EVERY));
        let _ = socket.set_nodelay(true);
    }
    let pumping = AtomicUsize::new(if upstream.is_some() { 2 } else { 1 });
    let conn = Arc::new(Conn {
        client,
        upstream,
        silent: AtomicBool::new(dark),
        ended: AtomicBool::new(false),
        pumping,
        reset_when_used: AtomicBool::new(false),
    });
    sh.conns.lock().unwrap().push(conn.clone());
    let mut threads = sh.threads.lock().unwrap();
    let (up, s) = (conn.clone(), sh.clone());
    threads.push(std::thread::spawn(move || pumped(&s, &up, true)));
    if conn.upstream.is_some() {
        let (down, s) = (conn, sh.clone());
        threads.push(std::thread::spawn(move || pumped(&s, &down, false)));
    }
}

/// [`pump`], then the last thread of a connection takes it out of the list,
/// which closes it.
fn pumped(sh: &Shared, conn: &Arc<Conn>, up: bool) {
    pump(sh, conn, up);
    if conn.pumping.fetch_sub(1, Ordering::AcqRel) == 1 {
        sh.conns.lock().unwrap().retain(|c| !Arc::ptr_eq(c, conn));
    }
}

/// Moves bytes one way until a side closes, a reset, or the proxy's end:
/// toward the server when `up`, else toward mcpgate. A silent connection's
/// bytes from mcpgate are read and dropped (its writes never block), and
/// its closing is not passed on.
fn pump(sh: &Shared, conn: &Conn, up: bool) {
    let (from, to) = match (&conn.upstream, up) {
        (Some(upstream), true) => (&conn.client, Some(upstream)),
        (Some(upstream), false) => (upstream, Some(&conn.client)),
        (None, _) => (&conn.client, None),
    };
    let mut buf = [0u8; 16 * 1024];
    while !sh.stop.load(Ordering::Acquire) && !conn.ended.load(Ordering::Acquire) {
        let n = match (&mut &*from).read(&mut buf) {
            Ok(n) => n,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => continue,
            Err(_) => 0,
        };
        let silent = conn.silent.load(Ordering::Acquire);
        if n == 0 {
            if !silent && let Some(to) = to {
                let _ = to.shutdown(Shutdown::Write);
            }
            return;
        }
        if silent {
            continue;
        }
        if up && conn.reset_when_used.load(Ordering::Acquire) {
            conn.reset();
            return;
        }
        let Some(to) = to else { continue };
        let delay = sh.delay_ms.load(Ordering::Acquire);
        if !up && delay > 0 {
            std::thread::sleep(Duration::from_millis(delay));
        }
        if (&mut &*to).write_all(&buf[..n]).is_err() {
            return;
        }
    }
}
