//! Hazards found in tiny_http, which mcpgate first ran on, each proven
//! harmless against a real mcpgate process: (1) a huge `Content-Length` does
//! not abort it, (2) a burst of connections is answered at once, none starved
//! behind a pool, and (3) a thread that cannot be spawned costs one
//! connection, not the accept loop. `tests/front_door.rs` has the rest.

mod support;

use std::io::Write;
use std::net::TcpStream;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{
    Ending, Fixture, Gate, NOBODY, ask, config, exchange, healthz_within, http_request, parse_reply, raw_request,
    read_reply, read_until_closed, require_root, send, threads_of_uid, wait_until,
};

const HUGE: &str = "200000000000";
/// How long `/healthz` may take to answer.
const HEALTHZ_WITHIN: Duration = Duration::from_secs(5);
/// How long an answer is waited for.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);

/// A `GET /healthz` on a connection kept alive.
fn healthz_keep_alive(addr: std::net::SocketAddr) -> Vec<u8> {
    http_request("GET", "/healthz", &[("Host", &addr.to_string()), ("Connection", "keep-alive")], b"")
}

#[test]
fn huge_content_length_gets_413_at_once_and_the_process_survives() {
    let fixture = Fixture::start("alpha", &[]);
    let mut gate = Gate::start(&config(&[("alpha", fixture.url())]));
    let addr = gate.addr;
    let cases = [
        ("GET /mcp", format!("GET /mcp HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n")),
        (
            "POST /mcp",
            format!(
                "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
            ),
        ),
    ];
    for (case, head) in cases {
        let bytes = format!("{head}Content-Length: {HUGE}\r\n\r\n{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}}");
        let started = Instant::now();
        let reply = ask(addr, bytes.as_bytes(), ANSWER_WITHIN);
        let elapsed = started.elapsed();
        assert!(gate.is_running(), "{case}: mcpgate died\n{}", gate.stderr());
        let reply = reply.unwrap_or_else(|e| panic!("{case}: no answer: {e}"));
        assert_eq!(reply.status, 413, "{case}: {reply:?}");
        assert!(reply.json()["error"]["message"].as_str().unwrap().contains("max_body_bytes"), "{case}: {reply:?}");
        // Answered before the body, not after waiting for it.
        assert!(elapsed < Duration::from_secs(1), "{case}: answered after {elapsed:?}");
        healthz_within(addr, HEALTHZ_WITHIN).unwrap_or_else(|e| panic!("{case}: /healthz after: {e}"));
    }
    // The largest value that still parses, and one more than a usize holds.
    let max = format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n\r\n{{}}", usize::MAX);
    let reply = ask(addr, max.as_bytes(), ANSWER_WITHIN).expect("an answer");
    assert_eq!(reply.status, 413, "{reply:?}");
    let over = format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 1{}\r\n\r\n{{}}", usize::MAX);
    let _ = exchange(addr, over.as_bytes(), ANSWER_WITHIN);
    assert!(gate.is_running(), "mcpgate died\n{}", gate.stderr());
    healthz_within(addr, HEALTHZ_WITHIN).expect("/healthz after the largest Content-Lengths");
    // Nothing near the declared size was ever allocated.
    let status = gate.status();
    let rss = status["process"]["rss_bytes"].as_u64().unwrap();
    assert!(rss < 256 << 20, "rss {rss} bytes: {}", status["process"]);
    // The connections drained what they could and ended (idle timeout 1 s).
    assert!(
        wait_until(Duration::from_secs(5), || gate.status()["threads"]["connections"].as_u64() <= Some(1)),
        "connection threads still running: {}",
        gate.status()["threads"]
    );
}

#[test]
fn a_burst_of_40_keep_alive_connections_is_answered_at_once() {
    let fixture = Fixture::start("alpha", &[]);
    let mut c = config(&[("alpha", fixture.url())]);
    // Long enough that every connection of the burst is still held when counted.
    c["client_idle_timeout_secs"] = json!(10);
    let gate = Gate::start(&c);
    let addr = gate.addr;
    const BURST: usize = 40;
    let barrier = Arc::new(Barrier::new(BURST));
    let handles: Vec<_> = (0..BURST)
        .map(|_| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                let started = Instant::now();
                let mut stream = send(addr, &healthz_keep_alive(addr));
                let answer = read_reply(&mut stream, ANSWER_WITHIN);
                (started.elapsed(), answer, stream)
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().expect("burst thread")).collect();
    let slowest = results.iter().map(|(t, _, _)| *t).max().unwrap();
    println!("burst of {BURST}: slowest answer after {slowest:?}");
    for (i, (elapsed, answer, _)) in results.iter().enumerate() {
        let reply = answer.as_ref().unwrap_or_else(|e| panic!("connection {i}: no answer within 5 s: {e}"));
        assert_eq!((reply.status, reply.body.as_str()), (200, "ok\n"), "connection {i}");
        assert!(*elapsed < Duration::from_secs(2), "connection {i} waited {elapsed:?}");
    }
    // Every connection of the burst holds its own thread at the same time.
    let status = gate.status();
    let connections = status["threads"]["connections"].as_u64().unwrap();
    assert!(connections > BURST as u64, "{BURST} held + this one: {}", status["threads"]);
    assert_eq!(status["connections"]["refused"], 0, "{}", status["connections"]);
    drop(results);
    assert!(
        wait_until(Duration::from_secs(5), || gate.status()["threads"]["connections"].as_u64() <= Some(1)),
        "connection threads end when their clients go: {}",
        gate.status()["threads"]
    );
}

#[test]
#[ignore = "needs root"]
fn a_thread_that_cannot_be_spawned_costs_one_connection_and_the_gateway_recovers() {
    require_root("it runs mcpgate as nobody under a thread limit");
    let fixture = Fixture::start("alpha", &[]);
    let mut c = config(&[("alpha", fixture.url())]);
    c["calls_per_server"] = json!(2);
    // Served connections keep their thread while the test holds them.
    c["client_idle_timeout_secs"] = json!(10);
    let at_rest = Gate::start(&c).threads();
    assert!(at_rest >= 4, "main, accept, reaper, signal: {at_rest}");
    // Room for exactly two more threads: a connection and a reader, say.
    let limit = at_rest + 2 + threads_of_uid(NOBODY);
    let mut gate = Gate::start_as_nobody(&c, limit);
    let addr = gate.addr;
    assert!(gate.settles_to(at_rest), "limited gate at rest: {} threads, expected {at_rest}", gate.threads());

    // Ten connections at once, each asking and then holding on.
    let mut streams: Vec<TcpStream> = (0..10).map(|_| TcpStream::connect(addr).expect("connect")).collect();
    let request = healthz_keep_alive(addr);
    for stream in &mut streams {
        let _ = stream.write_all(&request);
    }
    let (mut served, mut refused) = (0, 0);
    for (i, stream) in streams.iter_mut().enumerate() {
        let (text, ending) = read_until_closed(stream, Duration::from_millis(1500));
        match ending {
            // Still open: it must have been answered.
            Ending::TimedOut => {
                assert!(text.starts_with("HTTP/1.1 200"), "connection {i} is open but unanswered: {text:?}");
                served += 1;
            }
            Ending::Closed | Ending::Reset => {
                let reply = parse_reply(&text).unwrap_or_else(|| panic!("connection {i}: closed unanswered: {text:?}"));
                assert_eq!((reply.status, reply.header("retry-after")), (503, Some("1")), "connection {i}: {text:?}");
                assert!(reply.body.contains("cannot start a thread"), "connection {i}: {text:?}");
                refused += 1;
            }
        }
    }
    println!("thread limit {limit} ({at_rest} at rest): {served} connections served, {refused} refused");
    assert!(gate.is_running(), "mcpgate died\n{}", gate.stderr());
    assert!(served >= 1, "the first connections get threads");
    assert!(served <= 2, "no more threads than the limit allows");
    assert!(refused >= 8, "the rest are refused at once");
    assert!(gate.threads() <= limit, "{} threads", gate.threads());
    drop(streams);

    // Once the clients are gone, everything works again.
    assert!(gate.settles_to(at_rest), "threads {} != {at_rest} after the clients left", gate.threads());
    healthz_within(addr, HEALTHZ_WITHIN).expect("/healthz after the burst");
    // The status answer needs a connection thread too: until the one of
    // /healthz has ended it may itself be refused (503, no counters).
    let mut status = Value::Null;
    assert!(
        wait_until(Duration::from_secs(30), || {
            status = gate.status();
            status["connections"]["refused"].is_u64()
        }),
        "/status.json answers once the threads are back: {status}"
    );
    let counted = status["connections"]["refused"].as_u64().unwrap_or(0);
    assert!(counted >= refused, "refusals counted: {}", status["connections"]);
    assert!(gate.stderr().contains("cannot start a thread"), "the refusal is logged:\n{}", gate.stderr());
    // A session would take the last threads, which the sessions that are
    // open need for their requests: it is refused, and says why.
    assert!(gate.settles_to(at_rest), "threads {} != {at_rest}", gate.threads());
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}}});
    let headers = [("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream")];
    let reply = raw_request(addr, "POST", "/mcp", &headers, init.to_string().as_bytes());
    assert_eq!((reply.status, reply.header("retry-after")), (503, Some("5")), "{reply:?}");
    assert!(reply.json()["error"]["message"].as_str().unwrap().contains("limit of threads"), "{reply:?}");
    assert_eq!(fixture.count("initialize"), 0, "nothing was opened downstream");
    assert!(gate.is_running(), "mcpgate died\n{}", gate.stderr());
}

/// An idle connection is closed, and every response tells clients to drop
/// an idle connection a second before that (`Keep-Alive: timeout`), so
/// that a client's next request never races the close.
#[test]
fn an_idle_keep_alive_connection_is_closed_after_the_timeout_it_announced() {
    let fixture = Fixture::start("alpha", &[]);
    let mut c = config(&[("alpha", fixture.url())]);
    c["client_idle_timeout_secs"] = serde_json::json!(2);
    let gate = Gate::start(&c);
    let mut stream = send(gate.addr, &http_request("GET", "/healthz", &[("Host", &gate.addr.to_string())], b""));
    let reply = read_reply(&mut stream, ANSWER_WITHIN).expect("an answer");
    assert_eq!((reply.version.as_str(), reply.status), ("HTTP/1.1", 200), "{reply:?}");
    assert_eq!(reply.header("keep-alive"), Some("timeout=1"), "{reply:?}");
    let started = std::time::Instant::now();
    let (_, ending) = read_until_closed(&mut stream, Duration::from_secs(6));
    assert_eq!(ending, Ending::Closed, "the idle connection was not closed");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(1500) && waited < Duration::from_secs(5), "closed after {waited:?}");
}
