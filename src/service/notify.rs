//! systemd's notify protocol (`Type=notify`): READY, STATUS, RELOADING,
//! STOPPING, and watchdog pings sent only after mcpgate has answered its
//! own `/healthz`, so a wedged listener stops the pings and systemd
//! restarts the service. `STATUS=` follows the counts within a second of
//! a change, at most once a second: sent only with READY=1 and each ping,
//! `systemctl status` said `0 session(s)` for up to 15 s after sessions
//! opened. Without `$NOTIFY_SOCKET` all of it is a no-op.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixDatagram;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Sender, bounded, select, tick};

use crate::gateway::Gateway;
use crate::runtime::threads;

/// A connection to systemd's notify socket.
pub struct Notifier {
    socket: UnixDatagram,
    address: std::os::unix::net::SocketAddr,
}

impl Notifier {
    /// From `$NOTIFY_SOCKET` (a path, or an abstract name starting with `@`).
    pub fn from_env() -> Option<Notifier> {
        let target = std::env::var("NOTIFY_SOCKET").ok().filter(|t| !t.is_empty())?;
        let address = match target.strip_prefix('@') {
            Some(name) => {
                use std::os::linux::net::SocketAddrExt;
                std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).ok()?
            }
            None => std::os::unix::net::SocketAddr::from_pathname(&target).ok()?,
        };
        let socket = UnixDatagram::unbound().ok()?;
        Some(Notifier { socket, address })
    }

    /// Sends one notification, e.g. `READY=1\nSTATUS=...`.
    pub fn send(&self, state: &str) {
        if let Err(e) = self.socket.send_to_addr(state.as_bytes(), &self.address) {
            log::warn!("sd_notify `{}` failed: {e}", state.lines().next().unwrap_or(""));
        }
    }
}

/// Half of `$WATCHDOG_USEC`, when the watchdog is meant for this process.
pub fn watchdog_interval() -> Option<Duration> {
    if let Ok(pid) = std::env::var("WATCHDOG_PID")
        && pid.trim() != std::process::id().to_string()
    {
        return None;
    }
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.trim().parse().ok()?;
    (usec > 0).then(|| Duration::from_micros(usec / 2))
}

/// One line for `STATUS=`: what `systemctl status` shows.
pub fn status_line(gateway: &Gateway) -> String {
    let s = &gateway.stats;
    format!(
        "{} session(s), {} downstream session(s) live, {} server(s)",
        gateway.sessions.len(),
        s.downstream_live.get(),
        gateway.current().servers.len()
    )
}

/// Whether the listener answers `GET /healthz` within `timeout` (over TLS
/// when it serves HTTPS): the accept thread, a connection thread and the
/// app all work.
fn healthy(addr: SocketAddr, timeout: Duration, tls: bool) -> bool {
    let addr = match addr.ip() {
        ip if ip.is_unspecified() && addr.is_ipv4() => SocketAddr::from(([127, 0, 0, 1], addr.port())),
        ip if ip.is_unspecified() => SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, addr.port())),
        _ => addr,
    };
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, timeout) else { return false };
    #[cfg(feature = "tls")]
    if tls {
        return crate::http::tls::healthz_on_own_port(stream, timeout);
    }
    let _ = tls;
    let _ = stream.set_read_timeout(Some(timeout));
    let _ = stream.set_write_timeout(Some(timeout));
    if stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 200")
}

/// How often the notify thread looks at the counts: `STATUS=` goes out
/// within this of a change, and at most this often, however fast sessions
/// come and go (systemd keeps only the last line anyway).
pub(crate) const STATUS_EVERY: Duration = Duration::from_secs(1);

/// The thread that refreshes `STATUS=` when the counts change and, with a
/// watchdog, pings it.
pub struct NotifyThread {
    stop: Sender<()>,
    handle: JoinHandle<()>,
}

/// Starts the notify thread: `STATUS=` when the line differs from the last
/// one sent (looked at every [`STATUS_EVERY`]), and with `watchdog` a
/// `WATCHDOG=1` every that often, only after `/healthz` answered. `sent`
/// is the line that went out with READY=1.
pub fn start(
    notifier: Arc<Notifier>,
    gateway: Arc<Gateway>,
    addr: SocketAddr,
    tls: bool,
    watchdog: Option<Duration>,
    sent: String,
) -> std::io::Result<NotifyThread> {
    let (stop, stopped) = bounded::<()>(0);
    let handle = threads::spawn("notify", "", move || {
        let mut sent = sent;
        let status = tick(STATUS_EVERY);
        let pings = watchdog.map(tick).unwrap_or_else(crossbeam_channel::never);
        loop {
            select! {
                recv(stopped) -> _ => return,
                recv(status) -> _ => {
                    let line = status_line(&gateway);
                    if line != sent {
                        notifier.send(&format!("STATUS={line}"));
                        sent = line;
                    }
                }
                recv(pings) -> _ => {
                    let interval = watchdog.unwrap_or(STATUS_EVERY);
                    if healthy(addr, interval.min(Duration::from_secs(2)), tls) {
                        sent = status_line(&gateway);
                        notifier.send(&format!("WATCHDOG=1\nSTATUS={sent}"));
                    } else {
                        log::error!("mcpgate did not answer its own /healthz: watchdog ping withheld");
                    }
                }
            }
        }
    })?;
    Ok(NotifyThread { stop, handle })
}

impl NotifyThread {
    pub fn stop(self) {
        drop(self.stop);
        let _ = self.handle.join();
    }
}
