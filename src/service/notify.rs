//! systemd's notify protocol (`Type=notify`): READY, STATUS, RELOADING,
//! STOPPING, and watchdog pings sent only after mcpgate has answered its
//! own `/healthz`, so a wedged listener stops the pings and systemd
//! restarts the service. Without `$NOTIFY_SOCKET` all of it is a no-op.

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

/// Whether the listener answers `GET /healthz` within `timeout`: the
/// accept thread, a connection thread and the app all work.
fn healthy(addr: SocketAddr, timeout: Duration) -> bool {
    let addr = match addr.ip() {
        ip if ip.is_unspecified() && addr.is_ipv4() => SocketAddr::from(([127, 0, 0, 1], addr.port())),
        ip if ip.is_unspecified() => SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, addr.port())),
        _ => addr,
    };
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, timeout) else { return false };
    let _ = stream.set_read_timeout(Some(timeout));
    let _ = stream.set_write_timeout(Some(timeout));
    if stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 200")
}

/// The thread that pings the watchdog and refreshes `STATUS=`.
pub struct Watchdog {
    stop: Sender<()>,
    handle: JoinHandle<()>,
}

pub fn start_watchdog(
    notifier: Arc<Notifier>,
    gateway: Arc<Gateway>,
    addr: SocketAddr,
    interval: Duration,
) -> std::io::Result<Watchdog> {
    let (stop, stopped) = bounded::<()>(0);
    let handle = threads::spawn("notify", "", move || {
        let ticks = tick(interval);
        loop {
            select! {
                recv(stopped) -> _ => return,
                recv(ticks) -> _ => {
                    if healthy(addr, interval.min(Duration::from_secs(2))) {
                        notifier.send(&format!("WATCHDOG=1\nSTATUS={}", status_line(&gateway)));
                    } else {
                        log::error!("mcpgate did not answer its own /healthz: watchdog ping withheld");
                    }
                }
            }
        }
    })?;
    Ok(Watchdog { stop, handle })
}

impl Watchdog {
    pub fn stop(self) {
        drop(self.stop);
        let _ = self.handle.join();
    }
}
