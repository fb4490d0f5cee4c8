//! mcpgate's core promise, counted at the downstream servers: every
//! downstream session it opens is closed exactly once (a DELETE reaches the
//! server), and every thread it starts is joined (the thread count, read
//! from /proc, returns to where it was).

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::{Fixture, Gate, assert_all_closed, assert_balanced, config, wait_until};

fn gate_for(a: &Fixture, b: &Fixture, idle_secs: u64) -> Gate {
    let mut c = config(&[("alpha", a.url()), ("beta", b.url())]);
    c["session_idle_timeout_secs"] = json!(idle_secs);
    c["keepalive_secs"] = json!(1);
    Gate::start(&c)
}

#[test]
fn idle_eviction_deletes_every_downstream_session_exactly_once_and_joins_readers() {
    let (a, b) = Fixture::alpha_and_beta();
    let gate = gate_for(&a, &b, 1);
    let baseline = gate.threads();
    for _ in 0..3 {
        let mut client = gate.client();
        client.initialize();
        assert_eq!(client.tool_text("alpha__echo", json!({"text": "x"})), "x");
    }
    assert!(
        wait_until(Duration::from_secs(5), || a.count("get_streams_open") == 3),
        "readers connected: {}",
        a.stats()
    );
    assert_all_closed(&[&a, &b], 3);
    // Exactly once: no second DELETE arrives later.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(a.count("delete"), 3);
    assert_eq!(b.count("delete"), 3);
    let status = gate.status();
    assert_eq!(status["sessions"]["evicted_idle"], 3, "{status}");
    assert_eq!(status["downstream"]["opened"], 6, "{status}");
    assert_eq!(status["downstream"]["live"], 0, "{status}");
    assert_eq!(status["threads"]["readers"], 0, "{status}");
    assert_balanced(&status);
    assert!(gate.settles_to(baseline), "threads {} != baseline {baseline}", gate.threads());
}

#[test]
fn a_listening_client_stays_and_a_vanished_one_is_evicted() {
    let (a, b) = Fixture::alpha_and_beta();
    let gate = gate_for(&a, &b, 1);
    let mut listening = gate.client();
    listening.initialize();
    let stream = listening.open_stream();
    let mut quiet = gate.client();
    quiet.initialize();
    // The quiet session goes after its idle timeout; the listening one stays.
    assert!(wait_until(Duration::from_secs(10), || a.count("delete") == 1), "{}", a.stats());
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(a.count("delete"), 1, "the listening session must not be evicted");
    assert_eq!(listening.tool_text("beta__echo", json!({"text": "still here"})), "still here");
    // The listener vanishes: a keep-alive write fails, and idle time starts.
    stream.close();
    assert_all_closed(&[&a, &b], 2);
    assert_eq!(gate.status()["sessions"]["evicted_idle"], 2);
}

#[test]
fn client_delete_closes_every_downstream_session() {
    let (a, b) = Fixture::alpha_and_beta();
    let gate = gate_for(&a, &b, 300);
    let mut client = gate.client();
    client.initialize();
    let _stream = client.open_stream();
    assert!(wait_until(Duration::from_secs(5), || a.count("get_streams_open") == 1));
    assert_eq!(client.delete(), 200);
    // Closing is synchronous: the DELETEs were sent before the answer.
    assert_all_closed(&[&a, &b], 1);
    let reply = client.request("tools/list", json!({}));
    assert_eq!(reply.status, 404, "an ended session is unknown: {reply:?}");
    assert_eq!(client.delete(), 404);
    let status = gate.status();
    assert_eq!(status["sessions"]["deleted_by_client"], 1, "{status}");
    assert_eq!(status["sessions"]["live"], 0, "{status}");
    assert_balanced(&status);
}

#[test]
fn sigterm_closes_every_session_and_exits_zero() {
    let (a, b) = Fixture::alpha_and_beta();
    let mut gate = gate_for(&a, &b, 300);
    let mut streams = Vec::new();
    for _ in 0..5 {
        let mut client = gate.client();
        client.initialize();
        streams.push(client.open_stream());
    }
    assert!(wait_until(Duration::from_secs(5), || a.count("get_streams_open") == 5));
    let status = gate.terminate(Duration::from_secs(10)).expect("mcpgate exits after SIGTERM");
    assert!(status.success(), "exit status {status:?}\n{}", gate.stderr());
    assert_all_closed(&[&a, &b], 5);
    assert!(gate.stderr().contains("downstream opened 10, closed 10, live 0"), "{}", gate.stderr());
}

#[test]
fn churn_of_1000_sessions_leaves_no_session_and_no_thread_behind() {
    let (a, b) = Fixture::alpha_and_beta();
    let gate = gate_for(&a, &b, 1);
    let baseline = gate.threads();
    let url = gate.url();
    std::thread::scope(|s| {
        for t in 0..8 {
            let url = url.clone();
            s.spawn(move || {
                for i in 0..125 {
                    let mut client = support::Client::new(&url);
                    client.initialize();
                    assert_eq!(client.tool_text("beta__add", json!({"a": i, "b": t})), format!("{}", i + t));
                    // Half end by DELETE, half by idle eviction.
                    if i % 2 == 0 {
                        assert_eq!(client.delete(), 200);
                    }
                }
            });
        }
    });
    assert_all_closed(&[&a, &b], 1000);
    // The last close may still be joining its readers when the DELETE lands.
    assert!(wait_until(Duration::from_secs(5), || gate.status()["downstream"]["live"] == 0));
    let status = gate.status();
    assert_eq!(status["downstream"]["opened"], 2000, "{status}");
    assert_eq!(status["downstream"]["closed"], 2000, "{status}");
    assert_eq!(status["sessions"]["deleted_by_client"], 504, "{status}");
    assert_eq!(status["sessions"]["evicted_idle"], 496, "{status}");
    assert_eq!(status["downstream"]["delete_failures"], 0, "{status}");
    assert_balanced(&status);
    assert!(gate.settles_to(baseline), "threads {} != baseline {baseline}", gate.threads());
}

/// `shutdown_timeout_secs` bounds the whole shutdown, closing the sessions
/// included: a server that takes every DELETE and never answers (stopped
/// with SIGSTOP: its kernel still accepts connections) does not hold
/// mcpgate past it, even when `delete_timeout_secs` is longer.
#[test]
fn shutdown_timeout_bounds_the_whole_shutdown() {
    let (a, b) = (Fixture::start("alpha", &[]), Fixture::start("beta", &[]));
    let mut c = config(&[("alpha", a.url()), ("beta", b.url())]);
    c["shutdown_timeout_secs"] = json!(1);
    c["delete_timeout_secs"] = json!(4);
    let mut gate = Gate::start(&c);
    for _ in 0..3 {
        gate.open_session();
    }
    support::signal(a.pid(), "STOP");
    let started = Instant::now();
    let status = gate.terminate(Duration::from_secs(10));
    let took = started.elapsed();
    support::signal(a.pid(), "CONT");
    eprintln!("shutdown with a server that never answers DELETE: {took:?}, {status:?}");
    assert!(status.is_some_and(|s| s.success()), "{status:?}: {}", gate.stderr());
    assert!(took < Duration::from_millis(2500), "shutdown took {took:?} with shutdown_timeout_secs 1");
    assert!(gate.stderr().contains("shutdown_timeout_secs"), "the log says what was cut short: {}", gate.stderr());
    // The other server's sessions were closed all the same.
    assert!(wait_until(Duration::from_secs(2), || b.count("delete") == 3), "{}", b.stats());
}

/// A session is busy while its `initialize` runs, like any request: its
/// idle clock starts when the answer is sent. Before, it ran from the
/// request's arrival, and a server slower to start than the idle timeout (a
/// stdio server on its first `npx -y`, any server on a slow board) made a
/// session that was dead on arrival: `notifications/initialized` got 404.
#[test]
fn a_session_whose_initialize_outlasts_the_idle_timeout_is_alive_when_answered() {
    let slow = Fixture::start("slow", &["--initialize-delay-ms", "3000"]);
    let mut c = config(&[("slow", slow.url())]);
    c["session_idle_timeout_secs"] = json!(1);
    let gate = Gate::start(&c);
    let mut client = gate.client();
    let started = Instant::now();
    // initialize_with checks that `notifications/initialized` is taken (202, not 404).
    client.initialize();
    assert!(started.elapsed() >= Duration::from_secs(3), "the server's initialize was slow");
    assert_eq!(client.tool_text("slow__echo", json!({"text": "alive"})), "alive");
    // And its idle clock runs from then: it is evicted after the timeout as any other.
    assert!(wait_until(Duration::from_secs(10), || slow.count("delete") == 1), "{}", slow.stats());
    assert_balanced(&gate.status());
}
