//! Several instances behind one load balancer: session ids that name their
//! instance, and a `state_dir` they share, each writing its own file under
//! its own lock. When one dies and stays down longer than the idle timeout,
//! one survivor, and only one, closes its downstream sessions and removes
//! its file; when it comes back in time it resumes them itself. Counted at
//! the downstream servers: each session mcpgate opened DELETEd exactly once.

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Client, Fixture, Gate, TempDir, config_for, wait_exit, wait_until};

/// The idle timeout of these tests: a dead peer's sessions go within about twice this.
const IDLE: u64 = 2;

fn peer_config(fixtures: &[&Fixture], dir: &Path, id: &str) -> Value {
    let mut c = config_for(fixtures);
    c["instance_id"] = json!(id);
    c["state_dir"] = json!(dir);
    c["session_idle_timeout_secs"] = json!(IDLE);
    c
}

/// `count` sessions on `gate`, each holding one downstream session per fixture.
fn sessions_on(gate: &Gate, count: usize, tool: &str) -> Vec<Client> {
    (0..count)
        .map(|_| {
            let mut client = gate.open_session();
            assert_eq!(client.call_tool(tool, json!({})).status, 200);
            client
        })
        .collect()
}

#[test]
fn session_ids_start_with_the_instance_id() {
    let alpha = Fixture::start("alpha", &[]);
    let dir = TempDir::new();
    let gate = Gate::start_checked(&peer_config(&[&alpha], &dir.0, "gw-a"));
    let client = gate.open_session();
    let id = client.session.clone().unwrap();
    let (instance, random) = id.split_once('.').expect("<instance_id>.<hex>");
    assert_eq!(instance, "gw-a");
    assert_eq!(random.len(), 32, "{id}");
    assert!(dir.0.join("gw-a.state.json").exists());
    let state = support::read_state(&dir.0.join("gw-a.state.json"));
    assert_eq!(state["instance_id"], "gw-a", "{state}");
}

#[test]
fn a_second_instance_with_the_same_id_in_the_same_state_dir_is_refused() {
    let alpha = Fixture::start("alpha", &[]);
    let dir = TempDir::new();
    let config = peer_config(&[&alpha], &dir.0, "gw-a");
    let _first = Gate::start_checked(&config);
    let scratch = TempDir::new();
    let path = scratch.write_config(&config);
    let mut second = Command::new(env!("CARGO_BIN_EXE_mcpgate"))
        .arg("--config")
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_exit(&mut second, Duration::from_secs(20)).expect("the second instance exits");
    assert!(!status.success());
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut second.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("gw-a") && stderr.contains("lock"), "{stderr}");
}

#[test]
fn a_dead_peers_session_goes_on_where_its_client_comes_and_the_rest_are_closed_once_by_one_survivor() {
    let (alpha, beta) = Fixture::alpha_and_beta();
    let dir = TempDir::new();
    let mut a = Gate::start_checked(&peer_config(&[&alpha, &beta], &dir.0, "a"));
    let b = Gate::start_checked(&peer_config(&[&alpha, &beta], &dir.0, "b"));
    let c = Gate::start_checked(&peer_config(&[&alpha, &beta], &dir.0, "c"));
    let clients = sessions_on(&a, 4, "alpha__whoami");
    assert_eq!((alpha.count("initialize"), beta.count("initialize")), (4, 4));
    a.kill();
    let killed = Instant::now();

    // A client's next request reaches a peer, which continues its session: same id, no initialize.
    let mut moved = Client::new(&b.url());
    moved.session = clients[0].session.clone();
    assert_eq!(moved.call_tool("alpha__whoami", json!({})).status, 200);
    assert!(b.stderr().contains("continued here from instance `a`"), "{}", b.stderr());
    let status = b.status();
    assert_eq!(status["sessions"]["continued"], 1, "{}", status["sessions"]);
    assert!(status["store"]["name"].as_str().is_some_and(|n| n.starts_with("state_dir ")), "{}", status["store"]);
    let page = support::get_text(&b.url().replace("/mcp", "/status"));
    assert!(page.contains("1 continued here from an instance that died"), "the status page says so");

    let closed = wait_until(Duration::from_secs(4 * IDLE + 5), || {
        alpha.count("delete") == 4 && beta.count("delete") == 4 && !dir.0.join("a.state.json").exists()
    });
    let took = killed.elapsed();
    assert!(
        closed,
        "alpha {} beta {} files {:?}",
        alpha.stats(),
        beta.stats(),
        std::fs::read_dir(&dir.0).unwrap().count()
    );
    assert!(took <= Duration::from_secs(2 * IDLE + 3), "closed after {took:?}");
    // Exactly once: a second survivor does not DELETE them again.
    std::thread::sleep(Duration::from_secs(2 * IDLE));
    assert_eq!((alpha.count("delete"), beta.count("delete")), (4, 4));
    assert_eq!((alpha.count("initialize"), beta.count("initialize")), (4, 4));
    // The continued session was closed by b's idle eviction; the other three by the one survivor that took a over.
    let adopters = [&b, &c].iter().filter(|g| g.stderr().contains("peer `a`: down")).count();
    assert_eq!(adopters, 1, "b: {}\nc: {}", b.stderr(), c.stderr());
    let took_over = [&b, &c].iter().map(|g| g.stderr()).find(|e| e.contains("peer `a`: down")).unwrap_or_default();
    assert!(took_over.contains("its 3 client session(s) end"), "{took_over}");
}

#[test]
fn a_peer_back_within_the_idle_timeout_resumes_its_sessions_and_no_survivor_closes_them() {
    let alpha = Fixture::start("alpha", &[]);
    let dir = TempDir::new();
    let mut config = peer_config(&[&alpha], &dir.0, "a");
    config["session_idle_timeout_secs"] = json!(4);
    let mut a = Gate::start_checked(&config);
    let mut peer = peer_config(&[&alpha], &dir.0, "b");
    peer["session_idle_timeout_secs"] = json!(2);
    let _b = Gate::start_checked(&peer);
    let mut clients = sessions_on(&a, 3, "alpha__whoami");
    a.kill();
    std::thread::sleep(Duration::from_millis(300));
    let a = Gate::start_checked(&config);
    for client in &mut clients {
        client.url = a.url();
        assert_eq!(client.call_tool("alpha__whoami", json!({})).status, 200);
    }
    assert_eq!(alpha.count("initialize"), 3, "resumed, not opened anew");
    // b looks more often than a's idle timeout: it finds a's file locked again, and leaves it.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(alpha.count("delete"), 0);
    // a closes them itself once idle; nothing is closed twice.
    assert!(wait_until(Duration::from_secs(15), || alpha.count("delete") == 3), "{}", alpha.stats());
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!((alpha.count("initialize"), alpha.count("delete")), (3, 3));
}

/// The priming event id of a call's answer, read from its stream as the
/// call runs; the stream is left open (the caller kills its instance).
fn priming_of(gate: &Gate, session: &str, id: u64, tool: &str) -> (String, std::thread::JoinHandle<()>) {
    let url = gate.url();
    let session = session.to_string();
    let tool = tool.to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": {"ms": 3000}}});
        let Ok(response) = ureq::post(&url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("Mcp-Session-Id", &session)
            .header("MCP-Protocol-Version", "2025-11-25")
            .send(body.to_string().as_bytes())
        else {
            return;
        };
        let mut lines = std::io::BufReader::new(response.into_body().into_reader()).lines();
        while let Some(Ok(line)) = lines.next() {
            if let Some(id) = line.strip_prefix("id: ") {
                let _ = tx.send(id.to_string());
            }
        }
    });
    let priming = rx.recv_timeout(Duration::from_secs(10)).expect("a call's answer opens with a priming event id");
    (priming, reader)
}

/// GET with `Last-Event-ID`, as the SDKs resume a broken stream: the body.
fn resume(gate: &Gate, session: &str, last: &str) -> String {
    let response = ureq::get(&gate.url())
        .header("Accept", "text/event-stream")
        .header("Mcp-Session-Id", session)
        .header("MCP-Protocol-Version", "2025-11-25")
        .header("Last-Event-ID", last)
        .call()
        .expect("the resumed stream");
    response.into_body().read_to_string().unwrap()
}

#[test]
fn a_call_in_flight_on_a_dead_instance_is_run_again_elsewhere_only_if_its_tool_is_read_only() {
    let (alpha, beta) = Fixture::alpha_and_beta();
    let dir = TempDir::new();
    let mut a = Gate::start_checked(&peer_config(&[&alpha, &beta], &dir.0, "a"));
    let b = Gate::start_checked(&peer_config(&[&alpha, &beta], &dir.0, "b"));
    let client = a.open_session();
    let session = client.session.clone().unwrap();
    // `slow` says it is read-only; `cancellable` says nothing.
    let (read_only, r1) = priming_of(&a, &session, 41, "alpha__slow");
    let (other, r2) = priming_of(&a, &session, 42, "alpha__cancellable");
    assert!(read_only.contains('.'), "the priming event id carries the call: {read_only}");
    a.kill();
    let _ = (r1.join(), r2.join());

    let again = resume(&b, &session, &read_only);
    assert!(again.contains(r#""id":41,"result""#), "run again on b: {again}");
    let lost = resume(&b, &session, &other);
    assert!(lost.contains(r#""id":42,"error""#) && lost.contains("not run again"), "{lost}");
    assert_eq!(alpha.count("initialize"), 1, "b continued the session: no new downstream session");
}

#[test]
fn a_stdio_server_of_a_session_continued_elsewhere_starts_again_there() {
    let alpha = Fixture::start("alpha", &[]);
    let dir = TempDir::new();
    let config = |id| {
        let mut c = peer_config(&[&alpha], &dir.0, id);
        c["mcpServers"]["local"] = support::stdio_server("local", &[]);
        c
    };
    let mut a = Gate::start_checked(&config("a"));
    let b = Gate::start_checked(&config("b"));
    let mut client = a.open_session();
    assert_eq!(client.tool_text("local__echo", json!({"text": "on a"})), "on a");
    let id = client.session.clone();
    a.kill();

    // The same client, its next call through b: the process ended with a, b starts its own.
    client.url = b.url();
    assert_eq!(client.tool_text("local__echo", json!({"text": "on b"})), "on b");
    assert_eq!(client.session, id, "the client kept its session id");
    let status = b.status();
    assert_eq!(status["servers"]["local"]["processes"]["spawned"], 1, "{}", status["servers"]["local"]);
    assert_eq!(status["sessions"]["continued"], 1);
}
