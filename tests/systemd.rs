//! The systemd notify protocol, tested without systemd: a datagram socket
//! stands in for $NOTIFY_SOCKET.

mod support;

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use support::{Client, Fixture, Gate, TempDir, config};

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

/// An mcpgate in front of `fixture` whose $NOTIFY_SOCKET is the returned
/// socket, with $WATCHDOG_USEC and, when given, $WATCHDOG_PID.
fn gate_with_notify(
    fixture: &Fixture,
    watchdog_usec: &str,
    watchdog_pid: Option<&str>,
) -> (TempDir, UnixDatagram, Gate) {
    let dir = TempDir::new();
    let path = dir.0.join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    let gate = Gate::start_with(&config(&[("alpha", fixture.url())]), |mut command| {
        command.env("NOTIFY_SOCKET", &path).env("WATCHDOG_USEC", watchdog_usec);
        match watchdog_pid {
            Some(pid) => command.env("WATCHDOG_PID", pid),
            None => command.env_remove("WATCHDOG_PID"),
        };
        command
    });
    (dir, socket, gate)
}

#[test]
fn ready_then_watchdog_pings_then_stopping_arrive_in_order() {
    let fixture = Fixture::start("alpha", &[]);
    let (_dir, socket, mut gate) = gate_with_notify(&fixture, "200000", None);
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
    let (_dir, socket, _gate) = gate_with_notify(&fixture, "200000", Some("1"));
    let messages = receive(&socket, Duration::from_millis(600));
    assert!(messages.iter().any(|m| m.starts_with("READY=1")), "{messages:?}");
    assert!(!messages.iter().any(|m| m.contains("WATCHDOG=1")), "{messages:?}");
}

/// `systemctl status` shows the last STATUS= line: it must follow the
/// session count within a second or two, not wait for the next watchdog
/// ping (15 s with the unit's WatchdogSec=30), and not flood systemd.
#[test]
fn status_follows_the_session_count_within_two_seconds_and_at_most_once_a_second() {
    let fixture = Fixture::start("alpha", &[]);
    let (_dir, socket, gate) = gate_with_notify(&fixture, "60000000", None);
    let ready = receive(&socket, Duration::from_millis(500));
    assert!(ready.iter().any(|m| m.contains("STATUS=0 session(s)")), "{ready:?}");
    let mut clients: Vec<Client> = (0..3).map(|_| Client::new(&gate.url())).collect();
    for client in &mut clients {
        client.initialize();
    }
    status_within(&socket, "STATUS=3 session(s), 3 downstream session(s) live", Duration::from_secs(4));
    // Churn for 2.5 s: the count changes many times a second, STATUS= goes
    // out at most once a second.
    let churn = Instant::now();
    let mut statuses = 0;
    while churn.elapsed() < Duration::from_millis(2500) {
        let mut client = Client::new(&gate.url());
        client.initialize();
        client.delete();
        statuses += receive(&socket, Duration::from_millis(20)).iter().filter(|m| m.contains("STATUS=")).count();
    }
    statuses += receive(&socket, Duration::from_millis(200)).iter().filter(|m| m.contains("STATUS=")).count();
    assert!(statuses <= 4, "{statuses} STATUS= lines in 2.7 s of churn: more than one a second");
    for client in &clients {
        assert_eq!(client.delete(), 200);
    }
    status_within(&socket, "STATUS=0 session(s), 0 downstream session(s) live", Duration::from_secs(4));
}

/// Waits for a datagram holding `status`; fails naming what came instead.
fn status_within(socket: &UnixDatagram, status: &str, limit: Duration) {
    let start = Instant::now();
    let mut seen = Vec::new();
    while start.elapsed() < limit {
        seen.extend(receive(socket, Duration::from_millis(200)));
        if seen.iter().any(|m| m.contains(status)) {
            return;
        }
    }
    panic!("no `{status}` within {limit:?}: {seen:?}");
}
