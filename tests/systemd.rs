//! The systemd notify protocol, tested without systemd: a datagram socket
//! stands in for $NOTIFY_SOCKET.

mod support;

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use support::{Fixture, Gate, TempDir, config};

/// Every datagram that arrives within `window`.
fn receive(socket: &UnixDatagram, window: Duration) -> Vec<String> {
    let deadline = Instant::now() + window;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        socket
            .set_read_timeout(Some(deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1))))
            .unwrap();
        match socket.recv(&mut buf) {
            Ok(n) => out.push(String::from_utf8_lossy(&buf[..n]).into_owned()),
            Err(_) => break,
        }
    }
    out
}

#[test]
fn ready_then_watchdog_pings_then_stopping_arrive_in_order() {
    let fixture = Fixture::start("alpha", &[]);
    let dir = TempDir::new();
    let path = dir.0.join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    let mut gate = Gate::start_with(&config(&[("alpha", fixture.url())]), |mut command| {
        command.env("NOTIFY_SOCKET", &path).env("WATCHDOG_USEC", "200000").env_remove("WATCHDOG_PID");
        command
    });
    let mut messages = receive(&socket, Duration::from_millis(800));
    assert!(gate.terminate(Duration::from_secs(10)).expect("exits").success());
    messages.extend(receive(&socket, Duration::from_millis(300)));
    let first = |needle: &str| messages.iter().position(|m| m.lines().any(|l| l == needle));
    let ready = first("READY=1").unwrap_or_else(|| panic!("no READY=1 in {messages:?}"));
    let stopping = first("STOPPING=1").unwrap_or_else(|| panic!("no STOPPING=1 in {messages:?}"));
    let pings: Vec<usize> =
        messages.iter().enumerate().filter(|(_, m)| m.lines().any(|l| l == "WATCHDOG=1")).map(|(i, _)| i).collect();
    assert_eq!(ready, 0, "READY comes first: {messages:?}");
    assert!(pings.len() >= 3, "a ping every 100 ms for 800 ms: {messages:?}");
    assert!(pings.iter().all(|&p| ready < p && p < stopping), "pings come between READY and STOPPING: {messages:?}");
    assert!(messages[ready].contains("STATUS=0 session(s)"), "{messages:?}");
}

#[test]
fn the_watchdog_of_another_process_is_not_pinged() {
    let fixture = Fixture::start("alpha", &[]);
    let dir = TempDir::new();
    let path = dir.0.join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    let _gate = Gate::start_with(&config(&[("alpha", fixture.url())]), |mut command| {
        command.env("NOTIFY_SOCKET", &path).env("WATCHDOG_USEC", "200000").env("WATCHDOG_PID", "1");
        command
    });
    let messages = receive(&socket, Duration::from_millis(600));
    assert!(messages.iter().any(|m| m.starts_with("READY=1")), "{messages:?}");
    assert!(!messages.iter().any(|m| m.contains("WATCHDOG=1")), "{messages:?}");
}
