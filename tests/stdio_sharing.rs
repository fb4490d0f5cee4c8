//! Stdio servers as people paste them (issue 37): with the default sharing, one process per
//! server and user; sessions that open at once while processes start; lists that wait for a
//! starting process only so long, then say `list_changed`; calls that wait for it; clients
//! that leave without `DELETE` and pin nothing; processes started ahead (`"start": "eager"`).
//! Counted at the fixture children (their `/stats`) and in /proc, not only in mcpgate.

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Client, Fixture, StdioGate, is_dead, proc_info, use_servers, user_server, wait_until};

const TOKEN_A: &str = "user-a-token-0123456789abcdef";
const TOKEN_B: &str = "user-b-token-0123456789abcdef";

/// A config with small timeouts around `servers`, and `keys` over it.
fn config(servers: Value, keys: Value) -> Value {
    let mut c = json!({
        "listen": "127.0.0.1:0",
        "client_idle_timeout_secs": 1,
        "connect_timeout_secs": 2,
        "request_timeout_secs": 10,
        "stdio_grace_ms": 500,
        "mcpServers": servers,
    });
    for (key, value) in keys.as_object().expect("keys are an object") {
        c[key] = value.clone();
    }
    c
}

/// mcpgate's live children, from /proc.
fn live_children(gate: &StdioGate) -> Vec<u32> {
    gate.children().into_iter().filter(|c| !c.is_zombie()).map(|c| c.pid).collect()
}

fn session_with_token(gate: &StdioGate, token: &str) -> Client {
    let mut client = gate.client_with_token(token);
    client.initialize();
    client
}

#[test]
fn sessions_of_one_user_share_one_process_and_each_user_gets_its_own() {
    let mut c = config(json!({"p": user_server("p", &[])}), json!({}));
    c["auth"] = json!({"tokens": [{"token": TOKEN_A}, {"token": TOKEN_B}]});
    let gate = StdioGate::start(&c);
    let a: Vec<Client> = (0..3).map(|_| session_with_token(&gate, TOKEN_A)).collect();
    let b: Vec<Client> = (0..2).map(|_| session_with_token(&gate, TOKEN_B)).collect();
    for client in a.iter().chain(&b) {
        use_servers(client, &["p"]);
    }
    let kids = gate.kids("p", 2);
    let live = live_children(&gate);
    assert_eq!(live.len(), 2, "five sessions of two users: one process each, in /proc: {live:?}");
    for kid in &kids {
        let stats = kid.stats();
        assert_eq!(stats["initialize"], 1, "initialized once, by mcpgate: {stats}");
        assert_eq!(stats["last_client_info"]["name"], "mcpgate", "{stats}");
    }
    let calls: Vec<u64> = kids.iter().map(|k| k.stats()["methods"]["tools/call"].as_u64().unwrap_or(0)).collect();
    let mut sorted = calls.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, [2, 3], "each user's calls reach that user's process: {calls:?}");
    let status = gate.status();
    assert_eq!(status["servers"]["p"]["processes"]["spawned"], 2, "{status}");
    assert_eq!(status["servers"]["p"]["live_sessions"], 5, "{status}");

    // A user's sessions come and go; their process stays while one is left.
    for client in &a {
        assert_eq!(client.delete(), 200);
    }
    assert_eq!(live_children(&gate).len(), 2, "a user's last session leaving does not stop it at once");
    let mut again = session_with_token(&gate, TOKEN_A);
    assert_eq!(again.tool_text("p__echo", json!({"text": "back"})), "back");
    assert_eq!(gate.status()["servers"]["p"]["processes"]["spawned"], 2, "the user's process was kept");
}

#[test]
fn without_auth_every_session_shares_one_process() {
    let gate = StdioGate::start(&config(json!({"p": user_server("p", &[])}), json!({})));
    let clients: Vec<Client> = (0..10).map(|_| gate.session_using(&["p"])).collect();
    let kid = gate.kid("p", 1);
    assert_eq!(live_children(&gate), vec![kid.pid], "ten sessions, one process");
    assert_eq!(kid.stats()["initialize"], 1);
    assert_eq!(kid.stats()["methods"]["tools/call"], 10);
    drop(clients);
}

#[test]
fn initialize_answers_at_once_while_a_process_starts_and_a_list_waits_only_list_wait_ms() {
    let http = Fixture::start("h", &[]);
    let servers = json!({"p": user_server("p", &["--initialize-delay-ms", "4000"]), "h": {"url": http.url()}});
    let gate = StdioGate::start(&config(servers, json!({"list_wait_ms": 300})));
    // Five sessions, one after the other: none waits for the process (4 s to start).
    let mut took = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        clients.push(gate.open_session());
        took.push(started.elapsed());
    }
    assert!(took.iter().all(|t| *t < Duration::from_secs(2)), "initialize took {took:?}");
    assert!(live_children(&gate).is_empty(), "a process started by initialize alone");

    let client = &mut clients[0];
    let stream = client.open_stream();
    let started = Instant::now();
    let tools = client.tool_names();
    let listed = started.elapsed();
    assert!(tools.contains(&"h__echo".to_string()), "{tools:?}");
    assert!(!tools.iter().any(|t| t.starts_with("p__")), "a process 4 s from ready is in the list: {tools:?}");
    assert!(listed < Duration::from_secs(3), "the list waited {listed:?} (list_wait_ms 300)");
    let status = gate.status();
    assert_eq!(status["servers"]["p"]["state"], "starting", "{}", status["servers"]["p"]);

    let changed = stream.next_with_method("notifications/tools/list_changed", Duration::from_secs(15));
    assert!(changed.is_some(), "no tools/list_changed once the process was ready");
    let tools = client.tool_names();
    assert!(tools.contains(&"p__echo".to_string()), "{tools:?}");
    assert_eq!(gate.status()["servers"]["p"]["state"], "up");
    assert_eq!(gate.kid("p", 1).stats()["initialize"], 1);
    stream.close();
}

#[test]
fn a_call_made_before_its_process_is_ready_waits_for_it() {
    let servers = json!({"p": user_server("p", &["--initialize-delay-ms", "2000"])});
    let gate = StdioGate::start(&config(servers, json!({"list_wait_ms": 0})));
    let mut client = gate.open_session();
    let started = Instant::now();
    let reply = client.call_tool("p__echo", json!({"text": "waited"}));
    assert_eq!(reply.result()["content"][0]["text"], "waited", "{:?} after {:?}", reply.body, started.elapsed());
    assert!(started.elapsed() >= Duration::from_millis(1900), "answered before the process was ready");
}

#[test]
fn the_initialize_answer_is_the_same_whether_the_process_runs_or_not() {
    let servers = json!({"p": user_server("p", &[])});
    let gate = StdioGate::start(&config(servers, json!({"shared_idle_secs": 1, "session_idle_timeout_secs": 5})));
    let first = gate.session_using(&["p"]);
    let kid = gate.kid("p", 1);
    let mut second = gate.client();
    let running = second.initialize();
    assert_eq!(first.delete(), 200);
    assert_eq!(second.delete(), 200);
    assert!(gate.reaped_within(kid.pid, Duration::from_secs(10)).is_some(), "the unused process was not stopped");
    let mut third = gate.client();
    let stopped = third.initialize();
    assert_eq!(running["capabilities"], stopped["capabilities"], "capabilities differ: {running} / {stopped}");
    assert_eq!(running["instructions"], stopped["instructions"]);
    assert!(running["instructions"].as_str().is_some_and(|t| t.contains("## p")), "{running}");
    assert!(live_children(&gate).is_empty(), "initialize started the process");
}

#[test]
fn clients_that_leave_without_delete_pin_no_process_and_refuse_no_later_session() {
    let servers = json!({"p": user_server("p", &[]), "q": user_server("q", &[])});
    let gate = StdioGate::start(&config(servers, json!({"max_processes": 2, "unused_session_idle_secs": 2})));
    // Twenty sessions as the Inspector's CLI leaves them: initialize, list, gone without DELETE.
    for _ in 0..20 {
        let mut client = gate.open_session();
        let tools = client.tool_names();
        assert!(tools.contains(&"p__echo".to_string()) && tools.contains(&"q__echo".to_string()), "{tools:?}");
    }
    let live = live_children(&gate);
    assert_eq!(live.len(), 2, "one process per server for all of them: {live:?}");
    let mut later = gate.open_session();
    assert_eq!(later.tool_text("p__echo", json!({"text": "later"})), "later", "a later session was refused");
    assert_eq!(later.tool_text("q__echo", json!({"text": "later"})), "later");
    let status = gate.status();
    assert_eq!(status["processes"]["refused"], 0, "{}", status["processes"]);
    // Sessions that never made a call end after unused_session_idle_secs; the one that did stays.
    let ended = wait_until(Duration::from_secs(15), || gate.status()["sessions"]["live"] == 1);
    assert!(ended, "sessions live: {}", gate.status()["sessions"]);
    assert_eq!(later.tool_text("p__echo", json!({"text": "still"})), "still");
}

#[test]
fn an_eager_process_runs_before_any_session_is_kept_when_idle_and_comes_back_when_it_ends() {
    let mut eager = user_server("e", &[]);
    eager["start"] = json!("eager");
    let servers = json!({"e": eager, "lazy": user_server("lazy", &[])});
    let gate = StdioGate::start(&config(servers, json!({"shared_idle_secs": 1, "session_idle_timeout_secs": 2})));
    let first = gate.kid("e", 1);
    assert_eq!(live_children(&gate), vec![first.pid], "only the eager server runs before any session");
    assert_eq!(gate.status()["servers"]["lazy"]["processes"]["spawned"], 0);
    let up = wait_until(Duration::from_secs(10), || gate.status()["servers"]["e"]["processes"]["starting"] == 0);
    assert!(up, "{}", gate.status()["servers"]["e"]);
    let mut client = gate.open_session();
    assert_eq!(client.tool_text("e__echo", json!({"text": "ready"})), "ready");
    assert_eq!(first.stats()["initialize"], 1, "the session used the process started ahead");
    assert_eq!(client.delete(), 200);
    std::thread::sleep(Duration::from_secs(3));
    assert!(!is_dead(first.pid, "mcp-fixture"), "an eager process was stopped when idle");

    // Killed, it is started again without a session asking.
    support::kill_pid(first.pid);
    let second = gate.kid("e", 2);
    assert_ne!(second.pid, first.pid);
    assert!(proc_info(second.pid).is_some(), "the new process runs");
    let status = gate.status();
    assert_eq!(status["servers"]["e"]["processes"]["restarts"], 1, "{}", status["servers"]["e"]);
}

#[test]
fn sigterm_stops_every_users_process_and_leaves_no_zombie() {
    let mut c = config(json!({"p": user_server("p", &["--spawn-grandchild"])}), json!({"stdio_grace_ms": 200}));
    c["auth"] = json!({"tokens": [{"token": TOKEN_A}, {"token": TOKEN_B}]});
    let mut gate = StdioGate::start(&c);
    for token in [TOKEN_A, TOKEN_B] {
        use_servers(&session_with_token(&gate, token), &["p"]);
    }
    let kids = gate.kids("p", 2);
    let grandchildren: Vec<u32> = kids.iter().map(|k| k.grandchild()).collect();
    let exit = gate.terminate(Duration::from_secs(10));
    assert_eq!(exit.and_then(|s| s.code()), Some(0), "{exit:?}");
    for pid in kids.iter().map(|k| k.pid).chain(grandchildren) {
        let gone = wait_until(Duration::from_secs(2), || proc_info(pid).is_none());
        assert!(gone, "process {pid} left after SIGTERM (or a zombie): {:?}", proc_info(pid));
    }
}

/// A server whose process ends at once (server-filesystem given a directory it cannot read): the
/// client's error and the status page say why, from the last lines of its stderr, and each of
/// three such servers is named in the log, not one of them for all.
#[test]
fn a_process_that_ends_says_why_in_the_error_and_on_the_status_page() {
    let failing = |n: u32| {
        let script = format!(
            "echo 'Secure MCP Filesystem Server starting' >&2; \
             echo 'Error: None of the specified directories are accessible (server {n}, token s3cret-{n})' >&2; exit 1"
        );
        let mut entry = support::shell_server(&script, &[]);
        entry["sharing"] = json!("user");
        entry["env"] = json!({"TOKEN": format!("s3cret-{n}")});
        entry
    };
    let servers = json!({"f1": failing(1), "f2": failing(2), "f3": failing(3)});
    let gate = StdioGate::start(&config(servers, json!({})));
    let mut client = gate.open_session();
    for n in 1..=3 {
        let reply = client.call_tool(&format!("f{n}__anything"), json!({}));
        // Unknown while its server is down: the message names the server and why.
        let message = reply.error_message();
        assert!(message.contains("None of the specified directories are accessible"), "{}", reply.body);
        assert!(message.contains("exit status 1") && !message.contains(&format!("s3cret-{n}")), "{message}");
    }
    let status = gate.status();
    for n in 1..=3 {
        let error = status["servers"][format!("f{n}")]["last_error"].as_str().unwrap_or_default().to_string();
        assert!(error.contains("None of the specified directories are accessible") && error.contains("***"), "{error}");
    }
    let log = gate.stderr();
    for n in 1..=3 {
        assert!(
            log.lines().any(|l| l.contains(&format!("server `f{n}`: its process")) && l.contains("accessible")),
            "server f{n}'s end is not in the log:\n{log}"
        );
    }
}

/// Found with the six servers users paste (scripts/interop/pasted.sh) on a loaded host: on
/// SIGTERM the shared processes were stopped one after the other, each taking up to its grace
/// period, past `shutdown_timeout_secs`; mcpgate then exited without its last log line, and what
/// the children had started (the python under `uvx`) ran on, reparented to pid 1. Here six
/// shared processes that each need the whole grace (they ignore stdin's EOF), at the defaults
/// (`stdio_grace_ms` 2000, `shutdown_timeout_secs` 5): stopped together, they fit.
#[test]
fn sigterm_stops_six_slow_shared_processes_within_the_shutdown_timeout_and_leaves_no_grandchild() {
    let names = ["s1", "s2", "s3", "s4", "s5", "s6"];
    let servers: serde_json::Map<String, Value> = names
        .iter()
        .map(|name| (name.to_string(), user_server(name, &["--ignore-stdin-eof", "--spawn-grandchild"])))
        .collect();
    let c = config(Value::Object(servers), json!({"stdio_grace_ms": 2000, "shutdown_timeout_secs": 5}));
    let mut gate = StdioGate::start(&c);
    let _session = gate.session_using(&names);
    let kids: Vec<_> = names.iter().map(|name| gate.kid(name, 1)).collect();
    let grandchildren: Vec<u32> = kids.iter().map(|k| k.grandchild()).collect();
    for k in &kids {
        if let Some(p) = proc_info(k.grandchild()) {
            gate.watch_group(p.pgid);
        }
    }

    let started = Instant::now();
    let exit = gate.terminate(Duration::from_secs(30));
    let took = started.elapsed();
    assert_eq!(exit.and_then(|s| s.code()), Some(0), "exit status after SIGTERM: {exit:?}");
    let left: Vec<u32> = grandchildren
        .iter()
        .copied()
        .filter(|&g| !wait_until(Duration::from_secs(1), || is_dead(g, "sleep")))
        .collect();
    let log = gate.stderr_once(|log| log.contains("stopped in"));
    let last = log.lines().rev().find(|l| l.contains("stopped in") || l.contains("shutdown_timeout_secs"));
    assert!(
        left.is_empty(),
        "{} of 6 grandchildren left running after SIGTERM (mcpgate exited in {took:?}; its last word: {last:?})",
        left.len()
    );
    let last = last.unwrap_or("none");
    assert!(
        last.contains("stopped in") && last.contains("processes spawned 6, reaped 6, live 0"),
        "mcpgate's last line after SIGTERM (in {took:?}): {last}"
    );
}
