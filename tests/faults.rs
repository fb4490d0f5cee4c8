//! Faults, counted at the downstream servers: a server killed or restarted
//! under the gateway, mcpgate itself killed with SIGKILL (with and without a
//! state file), configuration reloads good and bad, and a scripted server
//! that answers garbage, hangs, or keeps a stream open for ever. After each
//! fault the invariant holds: `downstream.opened == closed + live`.

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{
    Client, Fixture, Gate, Scripted, assert_all_closed, assert_balanced, assert_settled, config, config_for,
    downstream_session, read_state, wait_for_state, wait_until, whoami_id, with_state_file,
};

const WAIT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// The client's downstream sessions on `alpha` and `beta`.
fn both_sessions(client: &mut Client) -> (String, String) {
    (downstream_session(client, "alpha__whoami", "alpha"), downstream_session(client, "beta__whoami", "beta"))
}

/// Whether a message matching `wanted` arrives on the client's stream within 10 s.
fn stream_carries(stream: &support::Stream, wanted: impl Fn(&Value) -> bool) -> bool {
    let deadline = Instant::now() + WAIT;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match stream.next(left) {
            Some(m) if wanted(&m) => return true,
            Some(m) => eprintln!("stream: {m}"),
            None => return false,
        }
    }
    false
}

fn write_config(gate: &Gate, text: &str) {
    std::fs::write(gate.dir.0.join("mcpgate.json"), text).unwrap();
}

fn post_reload(gate: &Gate) -> support::RawReply {
    support::raw_request(gate.addr, "POST", "/reload", &[("Content-Type", "application/json")], b"{}")
}

// ---------------------------------------------------------------------------
// A downstream server that dies or restarts
// ---------------------------------------------------------------------------

#[test]
fn a_downstream_killed_mid_stream_is_reconnected_and_forgets_nothing_the_client_needs() {
    let (mut a, b) = Fixture::alpha_and_beta();
    let gate = Gate::start(&config_for(&[&a, &b]));
    let baseline = gate.threads();
    let mut client = gate.client();
    client.initialize();
    let stream = client.open_stream();
    let a_before = downstream_session(&mut client, "alpha__whoami", "alpha");
    let b_before = downstream_session(&mut client, "beta__whoami", "beta");
    assert!(wait_until(WAIT, || a.count("get_streams_open") == 1), "mcpgate's reader holds A's stream: {}", a.stats());

    a.kill();
    assert_eq!(client.tool_text("beta__echo", json!({"text": "b lives"})), "b lives");
    let reply = client.call_tool("alpha__echo", json!({"text": "x"}));
    eprintln!("call to a killed server: {}", reply.body);
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.error_code(), -32603, "{}", reply.body);
    assert!(reply.error_message().contains("server `alpha`: unreachable"), "{}", reply.body);
    assert_eq!(reply.body["error"]["data"]["server"], "alpha", "{}", reply.body);

    a.restart();
    let a_after = downstream_session(&mut client, "alpha__whoami", "alpha");
    assert_ne!(a_after, a_before, "the restarted A holds a new downstream session");
    assert_eq!(a.count("initialize"), 1, "mcpgate re-initialized A once: {}", a.stats());
    // A's notifications reach the client again: mcpgate's reader holds the new session's stream.
    assert!(wait_until(WAIT, || a.count("get_streams_open") == 1), "reader reconnected: {}", a.stats());
    assert_eq!(client.tool_text("alpha__notify", json!({"kind": "message"})), "sent");
    assert!(stream_carries(&stream, |m| m["params"]["data"] == "hello from alpha"), "A's notification arrived");
    assert_eq!(
        downstream_session(&mut client, "beta__whoami", "beta"),
        b_before,
        "B's downstream session is untouched"
    );
    assert_eq!(b.count("initialize"), 1);
    let status = gate.status();
    assert_eq!(status["sessions"]["created"], 1, "the client never re-initialized: {status}");
    assert!(gate.stderr().contains("no longer knows"), "{}", gate.stderr());

    assert_eq!(client.delete(), 200);
    stream.close();
    assert_all_closed(&[&a, &b], 1);
    // The session the dead process held went through the close path too,
    // without a DELETE: the restarted server had said (404) it does not know it.
    assert_eq!(a.count("delete_unknown"), 0, "{}", a.stats());
    let status = assert_settled(&gate, 0);
    assert_eq!(status["downstream"]["opened"], 3, "{status}");
    assert_eq!(status["threads"]["readers"], 0, "{status}");
    assert!(gate.settles_to(baseline), "threads {} != baseline {baseline}", gate.threads());
}

#[test]
fn a_downstream_that_forgot_its_sessions_is_reinitialized_once_and_the_request_retried() {
    let (mut a, b) = Fixture::alpha_and_beta();
    let gate = Gate::start(&config_for(&[&a, &b]));
    let mut client = gate.client();
    client.initialize();
    let before = downstream_session(&mut client, "alpha__whoami", "alpha");
    a.restart();
    let reply = client.call_tool("alpha__whoami", json!({}));
    assert_eq!(reply.status, 200, "{reply:?}");
    let after = reply.result()["content"][0]["text"].as_str().unwrap();
    assert!(whoami_id(after, "alpha").is_some_and(|id| id != before), "{before} -> {after}");
    assert_eq!(a.count("initialize"), 1, "{}", a.stats());
    assert_eq!(gate.status()["sessions"]["created"], 1);
    assert_eq!(client.delete(), 200);
    assert_all_closed(&[&a, &b], 1);
    assert_settled(&gate, 0);
}

#[test]
fn a_listening_client_hears_a_restarted_server_again_without_sending_anything() {
    let (mut a, b) = Fixture::alpha_and_beta();
    let gate = Gate::start(&config_for(&[&a, &b]));
    let mut client = gate.client();
    client.initialize();
    let stream = client.open_stream();
    assert!(wait_until(WAIT, || a.count("get_streams_open") == 1));
    let requests_before = gate.status()["requests"]["total"].as_u64().unwrap();
    a.restart();
    // The reader reconnects, gets 404 for the forgotten session, and the
    // reaper opens a new one, with a new stream: no client request needed.
    let reopened =
        wait_until(Duration::from_secs(20), || a.count("initialize") == 1 && a.count("get_streams_open") == 1);
    assert!(reopened, "the restarted server got no new session and stream: {}", a.stats());
    let status = gate.status();
    assert_eq!(status["requests"]["total"].as_u64().unwrap(), requests_before, "no /mcp request was sent meanwhile");
    assert_eq!(client.tool_text("alpha__notify", json!({"kind": "message"})), "sent");
    let message = stream.next(Duration::from_secs(5)).expect("the server's notification arrives");
    assert_eq!(message["method"], "notifications/message", "{message}");
    assert_eq!(client.delete(), 200);
    assert_all_closed(&[&a], 1);
    assert_settled(&gate, 0);
}

// ---------------------------------------------------------------------------
// mcpgate killed or restarted
// ---------------------------------------------------------------------------

/// Three clients, each with a downstream session on both servers; their ids.
fn three_clients(gate: &Gate) -> Vec<(Client, String, String)> {
    (0..3)
        .map(|_| {
            let mut c = gate.client();
            c.initialize();
            let (a, b) = both_sessions(&mut c);
            (c, a, b)
        })
        .collect()
}

#[test]
fn kill_9_of_mcpgate_with_a_state_file_keeps_client_sessions_and_orphans_nothing() {
    let (a, b) = Fixture::alpha_and_beta();
    let (_state, path, c) = with_state_file(config_for(&[&a, &b]));
    let mut first = Gate::start(&c);
    let baseline = first.threads();
    let mut clients = three_clients(&first);
    wait_for_state(&path, 3, 2);
    first.kill();

    let gate = Gate::start(&c);
    assert_ne!(gate.addr, first.addr);
    for (client, a_id, b_id) in &mut clients {
        client.url = gate.url();
        assert_eq!(&downstream_session(client, "alpha__whoami", "alpha"), a_id, "resumed by id");
        assert_eq!(&downstream_session(client, "beta__whoami", "beta"), b_id, "resumed by id");
    }
    assert_eq!(a.count("initialize"), 3, "{}", a.stats());
    assert_eq!(b.count("initialize"), 3, "{}", b.stats());
    let status = gate.status();
    assert_eq!(status["sessions"]["live"], 3, "{status}");
    assert_eq!(status["sessions"]["created"], 0, "{status}");
    assert_eq!(status["sessions"]["restored"], 3, "{status}");
    assert_eq!(status["downstream"]["resumed"], 6, "{status}");
    for (client, _, _) in &clients {
        assert_eq!(client.delete(), 200);
    }
    assert_all_closed(&[&a, &b], 3);
    let status = assert_settled(&gate, 0);
    assert_eq!(status["downstream"]["opened"], 6, "{status}");
    assert_eq!(status["downstream"]["delete_failures"], 0, "{status}");
    assert!(gate.settles_to(baseline), "threads {} != a fresh process's {baseline}", gate.threads());
}

/// A server whose URL changed while mcpgate was down: its old sessions are
/// DELETEd at the old URL, and without the headers configured now, which
/// belong to the new server (a bearer token for another host). The state
/// file keeps no secrets, so the old server gets none.
#[test]
fn sessions_of_a_moved_server_are_deleted_without_the_new_servers_credentials() {
    let (old, new) = (Fixture::start("old", &[]), Fixture::start("new", &[]));
    let mut c = config(&[("files", old.url())]);
    c["mcpServers"]["files"]["headers"] = json!({"Authorization": "Bearer old-server-token"});
    let (_state, path, c) = with_state_file(c);
    let mut first = Gate::start(&c);
    let _clients: Vec<Client> = (0..2).map(|_| first.open_session()).collect();
    wait_for_state(&path, 2, 1);
    first.kill();

    let mut moved = c.clone();
    moved["mcpServers"]["files"] = json!({"url": new.url(), "headers": {"Authorization": "Bearer new-server-secret"}});
    let _gate = Gate::start(&moved);
    assert!(wait_until(WAIT, || old.count("delete") == 2), "{}", old.stats());
    let seen = &old.stats()["delete_authorizations"];
    assert!(!seen.to_string().contains("new-server-secret"), "the new server's token went to the old URL: {seen}");
    assert_eq!(seen, &json!([""]), "{seen}");
    assert_eq!(new.count("delete"), 0, "{}", new.stats());
}

/// The time mcpgate is down is not its clients' idleness: a crash must not
/// take back a session a client holds, however long the restart takes
/// (before, sessions in use at the crash were expired at start once the
/// downtime passed their idle timeout).
#[test]
fn kill_9_of_mcpgate_with_a_state_file_keeps_sessions_across_a_long_downtime() {
    const IDLE_SECS: u64 = 4;
    let (a, b) = Fixture::alpha_and_beta();
    let (_state, path, mut c) = with_state_file(config_for(&[&a, &b]));
    // Idle for this long after the restart, a session is evicted: the three
    // clients' calls must all come within it, on a loaded host too (at 1 s,
    // beside two busy loops, the third client found its session evicted).
    c["session_idle_timeout_secs"] = json!(IDLE_SECS);
    let mut first = Gate::start(&c);
    let mut clients = three_clients(&first);
    // Open streams keep the sessions from idle eviction until the kill.
    let streams: Vec<_> = clients.iter().map(|(c, _, _)| c.open_stream()).collect();
    wait_for_state(&path, 3, 2);
    first.kill();
    for s in streams {
        s.close();
    }
    // Down for longer than the idle timeout.
    std::thread::sleep(Duration::from_secs(IDLE_SECS + 2));

    let gate = Gate::start(&c);
    for (client, a_id, _) in &mut clients {
        client.url = gate.url();
        assert_eq!(downstream_session(client, "alpha__whoami", "alpha"), *a_id, "resumed, not reopened");
    }
    // Idle after the restart, they are evicted as any session is, each closed once.
    assert_all_closed(&[&a, &b], 3);
    let status = assert_settled(&gate, 0);
    assert_eq!(status["sessions"]["restored"], 3, "{status}");
    assert_eq!(status["sessions"]["expired_at_start"], 0, "{status}");
}

/// A session that was idle past its timeout when mcpgate stopped (as the
/// state file's last write tells) is expired at start: its downstream
/// sessions get their DELETE, and its client a 404.
#[test]
fn kill_9_of_mcpgate_with_a_state_file_and_expired_sessions_deletes_them_at_start() {
    let (a, b) = Fixture::alpha_and_beta();
    let (_state, path, mut c) = with_state_file(config_for(&[&a, &b]));
    c["session_idle_timeout_secs"] = json!(60);
    let mut first = Gate::start(&c);
    let mut clients = three_clients(&first);
    wait_for_state(&path, 3, 2);
    first.kill();
    assert_eq!(a.count("delete") + b.count("delete"), 0, "nothing was closed before the kill");
    // As if the sessions had been idle for two minutes when mcpgate stopped:
    // their last activity moved back (and the records of later activity gone).
    let text = std::fs::read_to_string(&path).unwrap();
    let older: Vec<String> = text
        .lines()
        .filter(|line| !line.starts_with("{\"active\""))
        .map(|line| {
            let Some(at) = line.find("\"last_active\":") else { return line.to_string() };
            let start = at + "\"last_active\":".len();
            let end = start + line[start..].find(|c: char| !c.is_ascii_digit()).unwrap_or(0);
            let value: u64 = line[start..end].parse().unwrap();
            format!("{}{}{}", &line[..start], value - 120, &line[end..])
        })
        .collect();
    std::fs::write(&path, older.join("\n") + "\n").unwrap();

    let gate = Gate::start(&c);
    assert_all_closed(&[&a, &b], 3);
    for (client, _, _) in &mut clients {
        client.url = gate.url();
        let reply = client.call_tool("alpha__whoami", json!({}));
        assert_eq!(reply.status, 404, "{reply:?}");
    }
    let status = assert_settled(&gate, 0);
    assert_eq!(status["sessions"]["live"], 0, "{status}");
    assert_eq!(status["downstream"]["opened"], 6, "{status}");
    assert!(gate.stderr().contains("3 expired"), "{}", gate.stderr());
}

#[test]
fn kill_9_of_mcpgate_without_a_state_file_means_404_and_a_fresh_session() {
    let (a, b) = Fixture::alpha_and_beta();
    let c = config_for(&[&a, &b]);
    let mut first = Gate::start(&c);
    let mut clients = three_clients(&first);
    first.kill();

    let gate = Gate::start(&c);
    let (client, _, _) = &mut clients[0];
    client.url = gate.url();
    let reply = client.call_tool("alpha__whoami", json!({}));
    assert_eq!(reply.status, 404, "{reply:?}");
    assert_eq!(reply.error_code(), -32600, "{}", reply.body);
    assert!(reply.error_message().contains("initialize a new one"), "{}", reply.body);
    let orphaned = (a.count("live_sessions"), b.count("live_sessions"));
    eprintln!("without a state file, kill -9 left {orphaned:?} downstream sessions open at (alpha, beta)");
    assert_eq!(orphaned, (3, 3), "the cost of no state file: every downstream session of the dead process");

    client.session = None;
    client.initialize();
    downstream_session(client, "alpha__whoami", "alpha");
    assert_eq!(client.tool_text("beta__add", json!({"a": 2, "b": 3})), "5");
    assert_eq!(client.delete(), 200);
    assert!(wait_until(WAIT, || a.count("delete") == 1 && b.count("delete") == 1));
    assert_eq!((a.count("live_sessions"), b.count("live_sessions")), (3, 3), "the orphans stay");
    assert_eq!(a.count("initialize"), 4);
    assert_settled(&gate, 0);
}

#[test]
fn a_clean_restart_with_a_state_file_keeps_the_client_session() {
    let (a, b) = Fixture::alpha_and_beta();
    let (_state, path, c) = with_state_file(config_for(&[&a, &b]));
    let mut first = Gate::start(&c);
    let mut client = first.client();
    client.initialize();
    let before = both_sessions(&mut client);
    let exit = first.terminate(WAIT).expect("mcpgate exits after SIGTERM");
    assert!(exit.success(), "{exit:?}\n{}", first.stderr());
    assert_all_closed(&[&a, &b], 1);
    let saved = read_state(&path);
    assert_eq!(saved["sessions"].as_array().map(Vec::len), Some(1), "{saved}");

    let gate = Gate::start(&c);
    client.url = gate.url();
    let after = both_sessions(&mut client);
    assert!(after.0 != before.0 && after.1 != before.1, "new downstream sessions: {before:?} -> {after:?}");
    assert_eq!((a.count("initialize"), b.count("initialize")), (2, 2));
    assert_eq!(gate.status()["sessions"]["created"], 0);
    assert_eq!(client.delete(), 200);
    assert_all_closed(&[&a, &b], 2);
    assert_settled(&gate, 0);
}

// ---------------------------------------------------------------------------
// Reloads
// ---------------------------------------------------------------------------

#[test]
fn a_reload_that_changes_one_server_of_three_closes_only_its_sessions() {
    let (a, b, c, d) =
        (Fixture::start("a", &[]), Fixture::start("b", &[]), Fixture::start("c", &[]), Fixture::start("d", &[]));
    let mut conf = config(&[("a", a.url()), ("b", b.url()), ("c", c.url())]);
    let gate = Gate::start(&conf);
    let baseline = gate.threads();
    let mut client = gate.client();
    client.initialize();
    let stream = client.open_stream();
    let before: Vec<String> =
        ["a", "b", "c"].iter().map(|s| downstream_session(&mut client, &format!("{s}__whoami"), s)).collect();

    conf["mcpServers"]["b"]["url"] = json!(d.url());
    write_config(&gate, &serde_json::to_string_pretty(&conf).unwrap());
    support::signal(gate.pid(), "HUP");
    assert!(wait_until(WAIT, || b.count("delete") == 1), "b's session closed: {}", b.stats());
    assert_eq!((a.count("delete"), c.count("delete")), (0, 0));
    assert_eq!(downstream_session(&mut client, "a__whoami", "a"), before[0]);
    assert_eq!(downstream_session(&mut client, "c__whoami", "c"), before[2]);
    // b now answers from d.
    downstream_session(&mut client, "b__whoami", "d");
    let told = stream_carries(&stream, |m| m["method"] == "notifications/tools/list_changed");
    assert!(told, "the client's stream carried tools/list_changed");
    let status = gate.status();
    assert_eq!(status["reload"]["changed_servers"], json!(["b"]), "{status}");
    assert_eq!(status["reload"]["error"], Value::Null, "{status}");
    assert_settled(&gate, 3);

    let reply = post_reload(&gate);
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.json()["reloaded"], true, "{reply:?}");
    assert_eq!(reply.json()["changed_servers"], json!([]), "{reply:?}");

    assert_eq!(client.delete(), 200);
    stream.close();
    assert_all_closed(&[&a, &b, &c, &d], 1);
    assert_settled(&gate, 0);
    assert!(gate.settles_to(baseline), "threads {} != baseline {baseline}", gate.threads());
}

#[test]
fn a_reload_with_a_broken_file_keeps_the_old_configuration() {
    let (a, b) = Fixture::alpha_and_beta();
    let conf = config_for(&[&a, &b]);
    let gate = Gate::start(&conf);
    let mut client = gate.client();
    client.initialize();
    let before = both_sessions(&mut client);
    let reload_error = || gate.status()["reload"]["error"].as_str().unwrap_or_default().to_string();

    write_config(&gate, "{ \"mcpServers\": { not json");
    support::signal(gate.pid(), "HUP");
    assert!(wait_until(WAIT, || !reload_error().is_empty()), "{}", gate.status()["reload"]);
    let error = reload_error();
    eprintln!("invalid JSON: {error}");
    assert!(error.contains("mcpgate.json") && error.to_lowercase().contains("json"), "{error}");
    assert_eq!(both_sessions(&mut client), before);

    let mut unknown = conf.clone();
    unknown["wrokers"] = json!(2);
    write_config(&gate, &unknown.to_string());
    support::signal(gate.pid(), "HUP");
    assert!(wait_until(WAIT, || reload_error().contains("wrokers")), "{}", gate.status()["reload"]);
    let error = reload_error();
    eprintln!("unknown key: {error}");
    assert!(error.contains("mcpgate.json") && error.contains("unknown key"), "{error}");
    assert_eq!(both_sessions(&mut client), before);
    assert_eq!(gate.stderr().matches("reload refused").count(), 2, "{}", gate.stderr());

    let reply = post_reload(&gate);
    assert_eq!(reply.status, 400, "{reply:?}");
    assert_eq!(reply.json()["reloaded"], false, "{reply:?}");
    assert!(reply.json()["error"].as_str().unwrap_or_default().contains("wrokers"), "{reply:?}");
    assert_eq!((a.count("delete"), b.count("delete")), (0, 0), "no downstream session was touched");
    assert_eq!(client.delete(), 200);
    assert_all_closed(&[&a, &b], 1);
    assert_settled(&gate, 0);
}

// ---------------------------------------------------------------------------
// A downstream server that misbehaves
// ---------------------------------------------------------------------------

#[test]
fn garbage_from_a_downstream_becomes_a_clear_error_and_harms_nothing_else() {
    let bad = Scripted::start(false);
    let good = Fixture::start("good", &[]);
    let mut conf = config(&[("bad", bad.url()), ("good", good.url())]);
    conf["request_timeout_secs"] = json!(2);
    conf["calls_per_server"] = json!(2);
    let mut gate = Gate::start(&conf);
    let baseline = gate.threads();
    let mut client = gate.client();
    client.initialize();
    let mut other = gate.client();
    other.initialize();
    assert_eq!(client.tool_text("bad__ok", json!({})), "ok");

    let faults = [
        ("bad_json", "invalid JSON-RPC"),
        ("html_error", "HTTP 500"),
        ("broken_sse", "stream"),
        ("unavailable", "HTTP 503"),
        ("too_many", "retry after 30"),
        ("hang", "sent no message within 2 s"),
    ];
    for (tool, expected) in faults {
        let started = Instant::now();
        let reply = client.call_tool(&format!("bad__{tool}"), json!({}));
        let took = started.elapsed();
        eprintln!("{tool}: {} in {took:?}", reply.body);
        assert_eq!(reply.status, 200, "{tool}: {reply:?}");
        assert_eq!(reply.error_code(), -32603, "{tool}: {}", reply.body);
        let message = reply.error_message();
        assert!(message.starts_with("server `bad`: ") && message.contains(expected), "{tool}: {message}");
        assert!(took < Duration::from_secs(4), "{tool} took {took:?}");
        assert_eq!(client.tool_text("good__echo", json!({"text": tool})), tool, "same session after {tool}");
        assert_eq!(other.tool_text("good__echo", json!({"text": tool})), tool, "other session after {tool}");
        assert!(gate.is_running(), "after {tool}");
    }
    assert!(client.error_message_of("bad__too_many").contains("HTTP 429"));
    assert!(client.error_message_of("bad__html_error").contains("Internal Server Error"));

    // A hung call holds its lane no longer than the timeout: 4 in a row with 2 lanes.
    let started = Instant::now();
    for _ in 0..4 {
        assert!(client.error_message_of("bad__hang").contains("sent no message within"));
    }
    let took = started.elapsed();
    eprintln!("4 hung calls, one after another, with 2 lanes: {took:?}");
    assert!(took < Duration::from_secs(12), "4 hung calls took {took:?}");
    assert_eq!(client.tool_text("bad__ok", json!({})), "ok", "the bad server's session still works");
    assert_settled(&gate, 4);

    assert_eq!(client.delete(), 200);
    assert_eq!(other.delete(), 200);
    assert!(wait_until(WAIT, || bad.deletes() == 2), "bad counted {} DELETEs", bad.deletes());
    assert_all_closed(&[&good], 2);
    assert_eq!(gate.status()["downstream"]["delete_failures"], 0);
    assert_settled(&gate, 0);
    assert!(gate.settles_to(baseline), "threads {} != baseline {baseline}", gate.threads());
}

/// mcpgate checks a server's answer whole before any of it goes to the
/// client (docs/ARCHITECTURE.md, "Large answers"): one that goes wrong
/// after its first bytes, however far in, reaches the client as a JSON-RPC
/// error naming the server, with none of its bytes, and what it held of it
/// is given back.
#[test]
fn a_large_answer_that_goes_wrong_after_its_first_bytes_reaches_the_client_as_an_error_only() {
    let bad = Scripted::start(false);
    let mut conf = config(&[("bad", bad.url())]);
    conf["request_timeout_secs"] = json!(5);
    let gate = Gate::start(&conf);
    let mut client = gate.client();
    client.initialize();
    assert_eq!(client.tool_text("bad__ok", json!({})), "ok");
    // Well formed, the id after 1 MB of result: passed on whole.
    let text = client.tool_text("bad__big_result_first", json!({}));
    assert!(text.len() == support::BIG && text.bytes().all(|b| b == b'x'), "{} bytes", text.len());
    let faults = [
        ("big_wrong_id", "not the response to the request"),
        ("big_bad_tail", "control character"),
        ("big_cut", "reading the answer failed"),
        ("big_reset", "reading the answer failed"),
        ("big_sse_cut", "the stream ended before the response"),
    ];
    for (tool, expected) in faults {
        let started = Instant::now();
        let reply = client.call_tool(&format!("bad__{tool}"), json!({}));
        let took = started.elapsed();
        assert_eq!(reply.status, 200, "{tool}: {reply:?}");
        let written = reply.body.to_string();
        assert!(written.len() < 1024 && reply.events.is_empty(), "{tool}: {} bytes reached the client", written.len());
        assert_eq!(reply.error_code(), -32603, "{tool}: {written}");
        let message = reply.error_message();
        assert!(message.starts_with("server `bad`: ") && message.contains(expected), "{tool}: {message}");
        assert!(took < Duration::from_secs(4), "{tool} took {took:?}");
        assert_eq!(client.tool_text("bad__ok", json!({})), "ok", "the session goes on after {tool}");
    }
    // Each answer was held whole (1 MB) while it was read: none of it stays.
    assert!(
        wait_until(WAIT, || gate.status()["memory"]["buffered_bytes"].as_u64() < Some(64 * 1024)),
        "what mcpgate held of the answers is given back: {}",
        gate.status()["memory"]
    );
    assert_eq!(client.delete(), 200);
    assert!(wait_until(WAIT, || bad.deletes() == 1), "bad counted {} DELETEs", bad.deletes());
    assert_settled(&gate, 0);
}

#[test]
fn a_downstream_whose_stream_never_ends_is_closed_within_a_bound() {
    let endless = Scripted::start(true);
    let gate = Gate::start(&config(&[("endless", endless.url())]));
    let baseline = gate.threads();
    let mut client = gate.client();
    client.initialize();
    assert!(wait_until(WAIT, || endless.gets() == 1), "mcpgate's reader opened a stream");
    // The reader opens its stream, then its thread starts and counts itself.
    assert!(wait_until(WAIT, || gate.status()["threads"]["readers"] == 1), "{}", gate.status()["threads"]);
    let started = Instant::now();
    assert_eq!(client.delete(), 200);
    let took = started.elapsed();
    eprintln!("DELETE with a never-ending downstream stream answered in {took:?}");
    assert!(took < Duration::from_secs(3), "DELETE answered in {took:?}");
    assert_eq!(endless.deletes(), 1);
    assert!(wait_until(WAIT, || gate.status()["threads"]["readers"] == 0), "{}", gate.status()["threads"]);
    let status = assert_settled(&gate, 0);
    assert_eq!(status["threads"]["join_timeouts"], 0, "{status}");
    assert!(gate.settles_to(baseline), "threads {} != baseline {baseline}", gate.threads());
}

/// Activity must reach the state file often enough that a session in use is
/// never taken for expired at restart (it was written at most every 30 s).
#[test]
fn a_session_in_use_survives_kill_9_even_with_an_idle_timeout_under_30_s() {
    let (a, b) = Fixture::alpha_and_beta();
    let (_state, path, mut c) = with_state_file(config_for(&[&a, &b]));
    c["session_idle_timeout_secs"] = json!(2);
    let mut first = Gate::start(&c);
    let mut client = first.client();
    client.initialize();
    let before = downstream_session(&mut client, "alpha__whoami", "alpha");
    wait_for_state(&path, 1, 2);
    // Never idle for more than 0.3 s, for longer than the idle timeout.
    for _ in 0..12 {
        assert_eq!(client.tool_text("beta__echo", json!({"text": "x"})), "x");
        std::thread::sleep(Duration::from_millis(300));
    }
    first.kill();
    let gate = Gate::start(&c);
    client.url = gate.url();
    let reply = client.call_tool("alpha__whoami", json!({}));
    assert_eq!(reply.status, 200, "a session in use was expired at restart: {reply:?}\n{}", gate.stderr());
    assert_eq!(reply.result()["content"][0]["text"], format!("alpha:{before}"));
    assert_eq!((a.count("initialize"), a.count("delete")), (1, 0), "{}", a.stats());
    assert_eq!(client.delete(), 200);
    assert_all_closed(&[&a, &b], 1);
    assert_settled(&gate, 0);
}

/// The error message of a tool call that must fail.
trait ErrorOf {
    fn error_message_of(&mut self, tool: &str) -> String;
}

impl ErrorOf for Client {
    fn error_message_of(&mut self, tool: &str) -> String {
        let reply = self.call_tool(tool, json!({}));
        assert!(reply.body.get("error").is_some(), "{tool}: expected an error, got {}", reply.body);
        reply.error_message()
    }
}

/// A server with no `GET` route answers 404 to the stream of a session it
/// just opened (an Express app with only `app.post('/mcp')` does): that
/// means no stream, as 405 does. Before, each such 404 reopened the
/// downstream session on every reaper tick: 40 `initialize` and 40 `DELETE`
/// for 10 listening sessions in 20 s, the server's session state reset each time.
#[test]
fn a_server_whose_get_answers_404_is_not_reopened_in_a_loop() {
    let fx = Fixture::start("fx", &["--get-404"]);
    let mut c = config(&[("fx", fx.url())]);
    c["session_idle_timeout_secs"] = json!(2);
    let gate = Gate::start(&c);
    let mut clients: Vec<Client> = (0..3).map(|_| gate.client()).collect();
    let streams: Vec<_> = clients
        .iter_mut()
        .map(|client| {
            client.initialize();
            client.open_stream()
        })
        .collect();
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(fx.count("initialize"), 3, "one downstream session per client session: {}", fx.stats());
    assert_eq!(fx.count("delete"), 0, "{}", fx.stats());
    for client in &mut clients {
        assert_eq!(client.tool_text("fx__echo", json!({"text": "kept"})), "kept");
    }
    drop(streams);
    for client in &clients {
        assert_eq!(client.delete(), 200);
    }
    assert!(wait_until(Duration::from_secs(10), || fx.count("delete") == 3), "{}", fx.stats());
    assert_balanced(&gate.status());
}
