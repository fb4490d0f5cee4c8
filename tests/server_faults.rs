//! Faults between mcpgate and its servers, each as the probe that injected
//! them found it (issue 38, finding 4), and what must hold after each.
//! Where the fault is the network's, a real TCP proxy between mcpgate and
//! the server makes it (`support::Proxy`); a file size limit makes the
//! state file fail to be written. What is counted is counted at the server
//! (the fixture counts each `initialize` and `DELETE`) and in /proc.

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::{
    Client, Fixture, Gate, Proxy, Scripted, assert_all_closed, config, config_for, read_state, sockets_to,
    wait_for_state, wait_until, with_state_file,
};

const WAIT: Duration = Duration::from_secs(10);

/// The port of a `host:port`.
fn port_of(addr: &str) -> u16 {
    addr.rsplit(':').next().and_then(|p| p.parse().ok()).expect("host:port")
}

// ---------------------------------------------------------------------------
// 4a. A client that only listens never goes deaf
// ---------------------------------------------------------------------------

/// The listening `client` hears a notification `alpha` sends; then its
/// session ends, and the server's session with it, once.
fn hears_then_ends(client: &mut Client, stream: &support::Stream, a: &Fixture) {
    assert_eq!(client.tool_text("alpha__notify", json!({"kind": "message"})), "sent");
    assert!(stream.next_with_method("notifications/message", WAIT).is_some(), "the server's notification arrives");
    assert_eq!(client.delete(), 200);
    assert_all_closed(&[a], 1);
}

/// A server in a crash loop: it restarts (its stream answers 404, and the
/// reaper reopens the downstream session), but is down again when the
/// reopen runs. Before, the downstream session was then left failed, and
/// nothing tried it again for a session that sends no requests: the
/// listener never heard that server again (0 `initialize` at the server
/// 30 s after it came back).
#[test]
fn a_listener_hears_a_server_again_after_its_reopen_failed_while_it_was_down() {
    let mut a = Fixture::start("alpha", &[]);
    let gate = Gate::start(&config_for(&[&a]));
    let mut client = gate.client();
    client.initialize();
    let stream = client.open_stream();
    assert!(wait_until(WAIT, || a.count("get_streams_open") == 1), "{}", a.stats());
    let requests_before = gate.status()["requests"]["total"].as_u64().unwrap();

    // Restarted: the reader's next GET gets 404, and the session is lost.
    a.restart();
    let forgotten = wait_until(Duration::from_secs(20), || gate.stderr().contains("GET stream answered 404"));
    assert!(forgotten, "the reader saw the restarted server: {}", gate.stderr());
    // Down again before the reaper reopens it (its backoff is 0.5 s, its tick 5 s).
    a.kill();
    let failed = wait_until(Duration::from_secs(20), || {
        gate.stderr().contains("reopening a forgotten downstream session failed")
    });
    assert!(failed, "the reopen ran while the server was down: {}", gate.stderr());

    a.restart();
    let back = Instant::now();
    let heard = wait_until(Duration::from_secs(40), || a.count("initialize") == 1 && a.count("get_streams_open") == 1);
    eprintln!("after the failed reopen, the server back for {:?}: {}", back.elapsed(), a.stats());
    assert!(heard, "the listening session never opened the server again: {}", a.stats());
    let status = gate.status();
    assert_eq!(status["requests"]["total"].as_u64().unwrap(), requests_before, "no /mcp request was sent meanwhile");
    hears_then_ends(&mut client, &stream, &a);
}

/// A server lost behind a partition, or a host that rebooted without a
/// FIN: mcpgate's side of the `GET` stream stays open and hears nothing.
/// The stream is read with a bound of its own (not the request timeout,
/// which may be long for tools that run long), and reconnected when it
/// passes, so that the listener hears the server again once the network
/// heals.
#[test]
fn a_listener_hears_a_server_again_after_its_stream_went_half_open() {
    let a = Fixture::start("alpha", &["--keepalive-ms", "1000"]);
    let proxy = Proxy::start(&a.addr);
    let mut c = config(&[("alpha", proxy.url())]);
    c["request_timeout_secs"] = json!(300);
    let gate = Gate::start(&c);
    let mut client = gate.client();
    client.initialize();
    let stream = client.open_stream();
    assert!(wait_until(WAIT, || a.count("get_streams_open") == 1), "{}", a.stats());
    // A few of its keep-alive comments show the stream's pace.
    std::thread::sleep(Duration::from_secs(3));

    proxy.half_open();
    assert!(wait_until(WAIT, || a.count("get_streams_open") == 0), "the server saw its side close: {}", a.stats());
    proxy.heal();
    let healed = Instant::now();
    let heard = wait_until(Duration::from_secs(90), || a.count("get_streams_open") == 1);
    eprintln!("the listener's stream back {:?} after the network healed", healed.elapsed());
    assert!(heard, "the reader still waits on the half-open connection: {}\n{}", a.stats(), gate.stderr());
    hears_then_ends(&mut client, &stream, &a);
}

/// Every connection mcpgate makes to a server has TCP keepalive: a peer
/// that vanished (a host gone without a FIN) is found even while nothing
/// is read or written. /proc shows it as the keepalive timer (2) of the
/// idle, established sockets.
#[test]
fn every_connection_to_a_server_has_tcp_keepalive() {
    let a = Fixture::start("alpha", &[]);
    let gate = Gate::start(&config_for(&[&a]));
    let mut client = gate.client();
    client.initialize();
    let _stream = client.open_stream();
    assert_eq!(client.tool_text("alpha__echo", json!({"text": "x"})), "x");
    assert!(wait_until(WAIT, || a.count("get_streams_open") == 1), "{}", a.stats());
    let timers = support::socket_timers_to(gate.pid(), port_of(&a.addr));
    eprintln!("mcpgate's sockets to the server (state, timer): {timers:?}");
    assert!(timers.len() >= 2, "the stream's and a call's connection: {timers:?}");
    assert!(timers.iter().all(|(_, timer)| *timer == 2), "each has its keepalive timer: {timers:?}");
    assert_eq!(client.delete(), 200);
}

// ---------------------------------------------------------------------------
// 4b. A DELETE lost to a transient fault
// ---------------------------------------------------------------------------

/// A `DELETE` that a black hole swallowed is sent again, with backoff,
/// until the server answers; counted, and its log line names the bound
/// that fired. Before, it was never sent again: the server kept the
/// session (0 `DELETE`s 30 s after the network healed).
#[test]
fn a_delete_lost_to_a_transient_fault_is_sent_again_until_the_server_answers() {
    let a = Fixture::start("alpha", &[]);
    let proxy = Proxy::start(&a.addr);
    let mut c = config(&[("alpha", proxy.url())]);
    c["delete_timeout_secs"] = json!(1);
    c["request_timeout_secs"] = json!(8);
    let gate = Gate::start(&c);
    let mut client = gate.client();
    client.initialize();
    assert_eq!(client.tool_text("alpha__echo", json!({"text": "x"})), "x");

    proxy.black_hole();
    assert_eq!(client.delete(), 200);
    let log = gate.stderr_once(|log| log.contains("ending a downstream session failed"));
    let line = log.lines().find(|l| l.contains("ending a downstream session failed")).unwrap_or_default();
    eprintln!("{line}");
    assert!(line.contains("delete_timeout_secs"), "the log names the bound that fired: {line}");
    assert!(!line.contains("request_timeout_secs"), "{line}");
    assert_eq!(a.count("delete"), 0, "swallowed: {}", a.stats());

    proxy.heal();
    let healed = Instant::now();
    let deleted = wait_until(Duration::from_secs(30), || a.count("delete") == 1);
    eprintln!("DELETE reached the server {:?} after the network healed: {}", healed.elapsed(), a.stats());
    assert!(deleted, "the DELETE was never sent again: {}", a.stats());
    assert_all_closed(&[&a], 1);
    let status = gate.status();
    let d = &status["downstream"];
    assert!(d["delete_retries"].as_u64().unwrap() >= 1, "{d}");
    assert!(wait_until(WAIT, || gate.status()["downstream"]["deletes_owed"] == 0), "{}", gate.status()["downstream"]);
}

/// A kept-alive connection the server closed just as the `DELETE` went out
/// on it (uvicorn closes one idle for 5 s; the interop run met it at
/// shutdown: "Connection reset by peer", a `DELETE` owed and counted
/// failed). A `DELETE` may be sent twice, so it is sent once more at
/// once, on a new connection: the server ends the session now, and
/// nothing counts as failed or owed.
#[test]
fn a_delete_on_a_kept_alive_connection_the_server_reset_is_sent_again_at_once() {
    let a = Fixture::start("alpha", &[]);
    let proxy = Proxy::start(&a.addr);
    let gate = Gate::start(&config(&[("alpha", proxy.url())]));
    let mut client = gate.client();
    client.initialize();
    assert_eq!(client.tool_text("alpha__echo", json!({"text": "x"})), "x");

    // Every connection mcpgate keeps to the server is reset as it is next
    // used, the request dropped; new connections pass.
    proxy.reset_as_used();
    assert_eq!(client.delete(), 200);
    assert!(wait_until(WAIT, || a.count("delete") == 1), "the server ended the session: {}", a.stats());
    let status = gate.status();
    let d = &status["downstream"];
    assert_eq!(d["delete_failures"], 0, "{d}");
    assert_eq!(d["deletes_owed"], 0, "{d}");
    assert!(!gate.stderr().contains("ending a downstream session failed"), "{}", gate.stderr());
    assert_all_closed(&[&a], 1);
}

// ---------------------------------------------------------------------------
// 4c. A black-holed server delays every new session
// ---------------------------------------------------------------------------

/// A server that did not answer is remembered: the next sessions do not
/// wait the request timeout for it again, until a probe finds it answering.
/// Before, every `initialize` waited the full `request_timeout_secs` (5.2 s
/// at 5 s, then 5.1 s for the next session).
#[test]
fn a_server_that_did_not_answer_delays_only_the_first_new_session() {
    let (a, b) = Fixture::alpha_and_beta();
    let proxy = Proxy::start(&a.addr);
    let mut c = config(&[("alpha", proxy.url()), ("beta", b.url())]);
    c["request_timeout_secs"] = json!(8);
    c["session_idle_timeout_secs"] = json!(10);
    let gate = Gate::start(&c);
    proxy.black_hole();

    let mut took = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        let mut client = gate.client();
        client.initialize();
        took.push(started.elapsed());
        clients.push(client);
    }
    eprintln!("initialize with a black-holed server, one session after another: {took:?}");
    assert!(took[0] >= Duration::from_secs(7), "the first waits for the server: {took:?}");
    // Well under the 8 s the server would be waited for.
    assert!(took[1..].iter().all(|t| *t < Duration::from_secs(4)), "the next do not wait for it again: {took:?}");
    for client in &mut clients {
        assert_eq!(client.tool_text("beta__echo", json!({"text": "b"})), "b", "the other server serves them");
        let reply = client.call_tool("alpha__echo", json!({"text": "a"}));
        assert!(reply.error_message().contains("alpha"), "{}", reply.body);
    }

    proxy.heal();
    let healed = Instant::now();
    let answered = wait_until(Duration::from_secs(30), || {
        let mut client = gate.client();
        client.initialize();
        let reply = client.call_tool("alpha__echo", json!({"text": "a"}));
        let _ = client.delete();
        reply.body["result"]["content"][0]["text"] == "a"
    });
    eprintln!("a new session reached the server {:?} after it answered again", healed.elapsed());
    assert!(answered, "the server was never tried again: {}", gate.stderr());
    for client in &clients {
        assert_eq!(client.delete(), 200);
    }
    assert!(wait_until(WAIT, || a.count("live_sessions") == 0), "{}", a.stats());
}

// ---------------------------------------------------------------------------
// 4d. "unknown tool" while a server is down
// ---------------------------------------------------------------------------

/// A server whose list must be fetched again (it said its tools changed)
/// is down when a call comes: the call says the server is unavailable,
/// never that the tool is unknown. Before, it got `-32602 unknown tool
/// alpha__echo` with no word of the server.
#[test]
fn a_call_to_a_tool_of_a_down_server_says_the_server_is_unavailable() {
    let (mut a, b) = Fixture::alpha_and_beta();
    let gate = Gate::start(&config_for(&[&a, &b]));
    let mut client = gate.client();
    client.initialize();
    let stream = client.open_stream();
    assert_eq!(client.tool_text("alpha__echo", json!({"text": "x"})), "x");
    // Its list goes stale: fetched again at the next call. The client is
    // told once mcpgate let go of it.
    assert_eq!(client.tool_text("alpha__notify", json!({"kind": "tools"})), "sent");
    assert!(stream.next_with_method("notifications/tools/list_changed", WAIT).is_some(), "the list went stale");
    a.kill();
    let reply = client.call_tool("alpha__echo", json!({"text": "x"}));
    eprintln!("a call to a down server's tool, its list stale: {}", reply.body);
    let message = reply.error_message();
    assert!(!message.contains("unknown tool"), "{}", reply.body);
    assert!(message.contains("alpha") && message.contains("unreachable"), "{}", reply.body);
    assert_eq!(reply.body["error"]["data"]["server"], "alpha", "{}", reply.body);
    assert_eq!(client.tool_text("beta__echo", json!({"text": "b"})), "b");
    // A name no server has is unknown, and names the server that could not say.
    let reply = client.call_tool("nothing__here", json!({}));
    assert!(reply.error_message().contains("unknown tool"), "{}", reply.body);
    assert!(reply.error_message().contains("`alpha`"), "{}", reply.body);
    assert_eq!(client.delete(), 200);
}

// ---------------------------------------------------------------------------
// 4e. A response nobody asked for
// ---------------------------------------------------------------------------

/// A server that answers a call twice: the second response, left on the
/// pooled connection, must never be taken for the answer to a later call on
/// it (which may be another session's). A second response already there
/// when the connection would be used again (in the same write, or 200 ms
/// later) closes the connection; one that comes while the next call is
/// under way (30 ms later, the next call sent at once) can fail that one
/// call, but is never delivered as its answer, and the connection it came
/// on is not used again.
#[test]
fn a_response_nobody_asked_for_is_never_taken_for_another_calls_answer() {
    let bad = Scripted::start(false);
    let mut c = config(&[("bad", bad.url())]);
    // One lane: every call takes the same connection, if it is kept.
    c["calls_per_server"] = json!(1);
    let gate = Gate::start(&c);
    let (mut first, mut second) = (gate.client(), gate.client());
    first.initialize();
    second.initialize();
    let text = |reply: &support::Reply| reply.body["result"]["content"][0]["text"].as_str().map(str::to_string);
    let (mut delivered, mut failed) = (Vec::new(), Vec::new());
    for round in 0..30 {
        let (tool, pause) = match round % 3 {
            0 => ("bad__twice", 0),
            1 => ("bad__twice_late", 200),
            _ => ("bad__twice_late", 0),
        };
        let calls = [("first", tool), ("second", "bad__ok"), ("first", "bad__ok")];
        for (i, (who, called)) in calls.into_iter().enumerate() {
            if i == 1 {
                std::thread::sleep(Duration::from_millis(pause));
            }
            let client = if who == "first" { &mut first } else { &mut second };
            let reply = client.call_tool(called, json!({}));
            let what = format!("round {round}, {who}'s {called} after {tool} (+{pause} ms)");
            match text(&reply) {
                Some(t) if t == "ok" => {}
                Some(other) => delivered.push(format!("{what}: {other}")),
                None => failed.push((round, tool, format!("{what}: {}", reply.error_message()))),
            }
        }
    }
    let shown: Vec<&String> = failed.iter().map(|(_, _, what)| what).collect();
    eprintln!("another call's answer delivered: {delivered:#?}\n{} of 90 calls failed: {shown:#?}", failed.len());
    assert!(delivered.is_empty(), "{delivered:#?}");
    // At most the one call under way when a late second response came, in
    // its round; never one after it, nor one after a second response that
    // came in the same write.
    for round in 0..30 {
        let in_round: Vec<_> = failed.iter().filter(|(r, _, _)| *r == round).collect();
        assert!(in_round.len() <= 1, "{shown:#?}");
        assert!(in_round.iter().all(|(_, tool, _)| *tool == "bad__twice_late"), "{shown:#?}");
    }
    assert!(shown.iter().all(|f| f.contains("server `bad`")), "{shown:#?}");
}

// ---------------------------------------------------------------------------
// 4f. A client DELETE the state file cannot record
// ---------------------------------------------------------------------------

/// mcpgate started so that a file size limit makes writes fail (`EFBIG`)
/// instead of killing it (`SIGXFSZ` ignored, as it stays across `exec`).
fn start_with_fsize_limit_possible(config: &serde_json::Value) -> Gate {
    Gate::start_with(config, |command| {
        let mut sh = std::process::Command::new("sh");
        sh.arg("-c").arg("trap '' XFSZ; exec \"$0\" \"$@\"").arg(command.get_program()).args(command.get_args());
        sh
    })
}

/// Sets the soft file size limit of `pid` in bytes (`None`: unlimited again).
fn limit_file_size(pid: u32, bytes: Option<u64>) {
    let soft = bytes.map_or_else(|| "unlimited".to_string(), |b| b.to_string());
    let status = std::process::Command::new("prlimit")
        .arg(format!("--pid={pid}"))
        .arg(format!("--fsize={soft}:unlimited"))
        .status()
        .expect("run prlimit");
    assert!(status.success(), "prlimit --pid {pid} --fsize={soft}");
}

/// A client's `DELETE` while the state file cannot be written, then a
/// `kill -9` and a restart: each downstream session is closed once (the
/// restored session, idle, is evicted), and the client was told 503 naming
/// the file. `writer_knows`: the writer found the file failing before the
/// `DELETE` came (the session is left as it was), or the `DELETE`'s own
/// write finds it (the session ends, its servers' sessions are closed once
/// the file can be written). Before, the `DELETE` was answered 200 and
/// closed them; the session came back after the crash, and each downstream
/// session got a second `DELETE` (404 at the server).
fn delete_while_the_state_file_cannot_be_written(writer_knows: bool) {
    let (a, b) = Fixture::alpha_and_beta();
    let (_state, path, mut c) = with_state_file(config_for(&[&a, &b]));
    // Activity is written every second: the writer finds a failing file soon.
    c["session_idle_timeout_secs"] = json!(4);
    let mut first = start_with_fsize_limit_possible(&c);
    let mut client = first.client();
    client.initialize();
    // A live stream keeps the session from idle eviction.
    let stream = client.open_stream();
    wait_for_state(&path, 1, 2);
    // No write of the file fits, not even a rewrite of a smaller snapshot.
    limit_file_size(first.pid(), Some(1));
    if writer_knows {
        let failing = wait_until(WAIT, || first.status()["state"]["error"].is_string());
        assert!(failing, "the state file could still be written: {}", first.status()["state"]);
    }

    let reply = support::raw_request(
        first.addr,
        "DELETE",
        "/mcp",
        &[("Mcp-Session-Id", client.session.as_deref().unwrap())],
        b"",
    );
    eprintln!(
        "a client DELETE while the state file cannot be written: HTTP {} {}; DELETEs at the servers: {} {}",
        reply.status,
        support::shown(&reply.body),
        a.count("delete"),
        b.count("delete")
    );
    assert_eq!(reply.status, 503, "a DELETE whose end cannot be recorded is not answered as done");
    assert!(support::shown(&reply.body).contains(&path.display().to_string()), "it names the file");
    assert_eq!((a.count("delete"), b.count("delete")), (0, 0), "nothing was closed");
    if writer_knows {
        assert_eq!(client.tool_text("alpha__echo", json!({"text": "x"})), "x", "the session goes on");
    }
    first.kill();
    stream.close();

    let gate = Gate::start(&c);
    client.url = gate.url();
    let sessions = &gate.status()["sessions"];
    eprintln!("after the restart: {sessions}");
    let back = sessions["restored"].as_u64().unwrap() + sessions["expired_at_start"].as_u64().unwrap();
    assert_eq!(back, 1, "the session came back (restored, or expired at start): {sessions}");
    // Idle (or expired), the session is closed: each downstream session once.
    let evicted = wait_until(Duration::from_secs(30), || {
        let status = gate.status();
        status["sessions"]["live"] == 0 && status["downstream"]["live"] == 0
    });
    assert!(evicted, "{}", gate.status());
    assert!(
        wait_until(WAIT, || a.count("live_sessions") + b.count("live_sessions") == 0),
        "{} {}",
        a.stats(),
        b.stats()
    );
    for f in [&a, &b] {
        let stats = f.stats();
        assert_eq!(stats["delete_unknown"], 0, "a second DELETE reached {}: {stats}", f.name);
        assert_eq!(stats["delete"], stats["initialize"], "{}: {stats}", f.name);
        assert_eq!(stats["live_sessions"], 0, "{}: {stats}", f.name);
    }
}

#[test]
fn a_client_delete_the_state_file_cannot_record_leaves_the_session_and_closes_nothing_twice() {
    delete_while_the_state_file_cannot_be_written(true);
}

#[test]
fn a_client_delete_whose_own_write_fails_closes_nothing_twice() {
    delete_while_the_state_file_cannot_be_written(false);
}

/// The downstream sessions of a session ended while the state file could
/// not record it are closed once it can: each gets its `DELETE`, once.
#[test]
fn deletes_held_while_the_state_file_cannot_be_written_go_once_it_can() {
    let (a, b) = Fixture::alpha_and_beta();
    let (_state, path, mut c) = with_state_file(config_for(&[&a, &b]));
    c["session_idle_timeout_secs"] = json!(4);
    let gate = start_with_fsize_limit_possible(&c);
    let mut client = gate.client();
    client.initialize();
    wait_for_state(&path, 1, 2);
    limit_file_size(gate.pid(), Some(1));
    assert_eq!(client.delete(), 503);
    assert!(wait_until(WAIT, || gate.status()["downstream"]["deletes_owed"] == 2), "{}", gate.status()["downstream"]);
    assert_eq!((a.count("delete"), b.count("delete")), (0, 0), "nothing is closed while it cannot be recorded");

    limit_file_size(gate.pid(), None);
    assert_all_closed(&[&a, &b], 1);
    assert!(wait_until(WAIT, || gate.status()["downstream"]["deletes_owed"] == 0), "{}", gate.status()["downstream"]);
    assert!(wait_until(WAIT, || read_state(&path)["closing"] == json!([])), "{}", read_state(&path));
    assert_eq!((a.count("delete_unknown"), b.count("delete_unknown")), (0, 0));
}

// ---------------------------------------------------------------------------
// 4g. Idle connections toward servers
// ---------------------------------------------------------------------------

/// Four sessions make calls at once on a server's four lanes, then end.
fn calls_on_every_lane(gate: &Gate) {
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let mut client = gate.client();
            std::thread::spawn(move || {
                client.initialize();
                for _ in 0..3 {
                    let reply = client.call_tool("alpha__slow", json!({"ms": 200, "steps": 0}));
                    assert!(reply.body.get("result").is_some(), "{}", reply.body);
                }
                client
            })
        })
        .collect();
    for thread in threads {
        let client = thread.join().unwrap();
        assert_eq!(client.delete(), 200);
    }
}

/// Once no session uses a server, mcpgate closes its idle connections to
/// it. Before, they stayed open for good (in CLOSE_WAIT once the server
/// was killed).
#[test]
fn idle_connections_to_a_server_close_once_no_session_uses_it() {
    let a = Fixture::start("alpha", &[]);
    let gate = Gate::start(&config_for(&[&a]));
    let port = port_of(&a.addr);
    calls_on_every_lane(&gate);
    assert_all_closed(&[&a], 4);
    let held = sockets_to(gate.pid(), port);
    eprintln!("after every session ended: {} connection(s) to the server: {held:?}", held.len());
    let started = Instant::now();
    let closed = wait_until(Duration::from_secs(20), || sockets_to(gate.pid(), port).is_empty());
    eprintln!("{:?} later: {:?}", started.elapsed(), sockets_to(gate.pid(), port));
    assert!(closed, "idle connections to a server no session uses stay open: {:?}", sockets_to(gate.pid(), port));
}

/// While sessions still use a server that was killed, the idle connections
/// to it that its end closed are dropped, not kept in CLOSE_WAIT.
#[test]
fn idle_connections_whose_server_closed_them_are_dropped() {
    let mut a = Fixture::start("alpha", &[]);
    let gate = Gate::start(&config_for(&[&a]));
    let port = port_of(&a.addr);
    let mut kept = gate.client();
    kept.initialize();
    calls_on_every_lane(&gate);
    a.kill();
    assert!(
        wait_until(WAIT, || sockets_to(gate.pid(), port).contains(&"CLOSE_WAIT")),
        "{:?}",
        sockets_to(gate.pid(), port)
    );
    eprintln!("after the server was killed: {:?}", sockets_to(gate.pid(), port));
    let started = Instant::now();
    let dropped = wait_until(Duration::from_secs(20), || !sockets_to(gate.pid(), port).contains(&"CLOSE_WAIT"));
    eprintln!("{:?} later: {:?}", started.elapsed(), sockets_to(gate.pid(), port));
    assert!(dropped, "connections the server closed are kept: {:?}", sockets_to(gate.pid(), port));
    let _ = kept.delete();
}
