//! Stdio servers behind mcpgate (issue 11): the real mcpgate in front of the real fixture in
//! `--stdio` mode, started by mcpgate as its child. What is checked is counted three ways: by
//! mcpgate (`/status.json`), by the fixture (its `/stats`, found through mcpgate's log where the
//! fixture's stderr goes) and by the kernel (/proc: who is whose child, in which process group,
//! zombie or gone). Every wait is bounded; every process is stopped by pid when a test ends,
//! failed or not (see `StdioGate`).

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{
    Fixture, StdioGate, TempDir, downstream_session, environ, fixture_bin, is_dead, proc_info, reaped_by, shell_server,
    stderr_lines_of, stdio_server, wait_exit, wait_until,
};

/// A config with small timeouts around `servers` (a `mcpServers` object).
fn config(servers: Value) -> Value {
    json!({
        "listen": "127.0.0.1:0",
        "session_idle_timeout_secs": 300,
        "client_idle_timeout_secs": 1,
        "connect_timeout_secs": 2,
        "request_timeout_secs": 10,
        "stdio_grace_ms": 500,
        // A server that failed is not tried again within a test: what it did stays visible.
        "open_retry_secs": 60,
        "mcpServers": servers,
    })
}

/// [`config`] with `keys` set over it.
fn config_with(servers: Value, keys: Value) -> Value {
    let mut c = config(servers);
    for (key, value) in keys.as_object().expect("keys are an object") {
        c[key] = value.clone();
    }
    c
}

/// mcpgate's own count of its children holds: spawned == reaped + live, and `live` is `live`.
fn assert_processes(status: &Value, live: u64) {
    let p = &status["processes"];
    let (spawned, reaped) = (p["spawned"].as_u64().unwrap(), p["reaped"].as_u64().unwrap());
    assert_eq!(p["balanced"], true, "processes: {p}");
    assert_eq!(spawned, reaped + p["live"].as_u64().unwrap(), "spawned == reaped + live: {p}");
    assert_eq!(p["live"], live, "processes: {p}");
}

/// The `processes` of one server on the status page.
fn server_processes(status: &Value, server: &str) -> Value {
    status["servers"][server]["processes"].clone()
}

fn sampling() -> Value {
    json!({"sampling": {}})
}

/// A sampling answer with `text`.
fn sampled(text: &str) -> Value {
    json!({"role": "assistant", "content": {"type": "text", "text": text}, "model": "test"})
}

fn progress_of(events: &[Value]) -> Vec<&Value> {
    events.iter().filter(|m| m["method"] == "notifications/progress").collect()
}

/// A server whose first child crashes (exit status 3) 1.5 s after its start, and whose later
/// children do not: the first to start removes `marker`, a file in `dir`.
fn crash_once(name: &str, dir: &TempDir) -> Value {
    crash_once_after(name, dir, "")
}

/// [`crash_once`], the crashing child running `before` first (in its shell).
fn crash_once_after(name: &str, dir: &TempDir, before: &str) -> Value {
    let marker = dir.0.join("crash-once");
    std::fs::write(&marker, "").unwrap();
    let script = format!(
        "f=\"$1\"; fixture() {{ exec \"$f\" --stdio --name {name} --stats-listen 127.0.0.1:0 \"$@\"; }}; \
         if rm \"$0\" 2>/dev/null; then {before} fixture --exit-after-ms 1500; else fixture; fi"
    );
    shell_server(&script, &[marker.to_str().unwrap(), fixture_bin()])
}

/// Threads of mcpgate by role (`stdio`: a child's stdout reader, `stderr`: its logger), once
/// each role has `n` (within 3 s); the roles as they were otherwise.
fn child_threads(gate: &StdioGate, n: u64) -> (u64, u64) {
    let mut roles = (u64::MAX, u64::MAX);
    wait_until(Duration::from_secs(3), || {
        let by_role = &gate.status()["process"]["threads_by_role"];
        roles = (by_role["stdio"].as_u64().unwrap_or(u64::MAX), by_role["stderr"].as_u64().unwrap_or(u64::MAX));
        roles == (n, n)
    });
    roles
}

#[test]
fn a_child_starts_with_the_first_request_of_a_session_and_serves_lists_calls_and_progress() {
    let gate = StdioGate::start(&config(json!({"p": stdio_server("p", &[])})));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(gate.children(), vec![], "a child before any session used the server");
    let status = gate.status();
    assert_eq!(status["servers"]["p"]["transport"], "stdio", "{status}");
    assert_eq!(status["processes"]["spawned"], 0, "{status}");

    let mut client = gate.open_session();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(gate.children(), vec![], "a child started by initialize alone");
    let tools = client.tool_names();
    let children = gate.wait_children(1);
    let child = &children[0];
    assert_eq!(child.name, "mcp-fixture", "{child:?}");
    assert_eq!(child.pgid, child.pid, "the child leads a process group of its own: {child:?}");
    let kid = gate.kid("p", 1);
    assert_eq!(kid.pid, child.pid, "the fixture's own pid is mcpgate's child");

    for name in ["p__echo", "p__slow", "p__sample"] {
        assert!(tools.contains(&name.to_string()), "{name} missing from {tools:?}");
    }
    assert!(tools.iter().all(|t| t.starts_with("p__")), "unprefixed: {tools:?}");
    assert_eq!(client.tool_text("p__echo", json!({"text": "over a pipe"})), "over a pipe");

    let params = json!({"name": "p__slow", "arguments": {"ms": 300, "steps": 3}, "_meta": {"progressToken": "prog-1"}});
    let reply = client.request("tools/call", params);
    assert_eq!(reply.result()["content"][0]["text"], "done", "{reply:?}");
    let progress = progress_of(&reply.events);
    let steps: Vec<&Value> = progress.iter().map(|m| &m["params"]["progress"]).collect();
    assert_eq!(steps, [&json!(1), &json!(2), &json!(3)], "{:?}", reply.events);
    assert!(progress.iter().all(|m| m["params"]["progressToken"] == "prog-1"), "the client's token: {progress:?}");

    let stats = kid.stats();
    assert_eq!(stats["initialize"], 1, "{stats}");
    assert_eq!(stats["live_sessions"], 1, "{stats}");
    assert_eq!(stats["requests"], 4, "initialize, tools/list and two calls: {stats}");
    assert_eq!(stats["requests_running"], 0, "{stats}");
    let status = gate.status();
    assert_processes(&status, 1);
    assert_eq!(status["processes"]["spawned"], 1, "{status}");
    let p = server_processes(&status, "p");
    assert_eq!((p["spawned"].as_u64(), p["live"].as_u64()), (Some(1), Some(1)), "{p}");
    assert_eq!(gate.children().len(), 1, "one child for one session");

    // A line of 200 KB: its result checked apart from serde_json, and passed whole.
    let text = client.tool_text("p__big", json!({"bytes": 200_000}));
    assert!(text.len() == 200_000 && text.bytes().all(|b| b == b'x'), "{} bytes", text.len());
}

#[test]
fn a_client_delete_stops_and_reaps_the_child() {
    let gate = StdioGate::start(&config(json!({"p": stdio_server("p", &[])})));
    let client = gate.session_using(&["p"]);
    let kid = gate.kid("p", 1);
    assert_eq!(kid.stats()["stdin_eof"], false);
    let status = client.delete();
    assert!((200..300).contains(&status), "DELETE answered {status}");
    let took = gate.reaped_within(kid.pid, Duration::from_secs(3));
    assert!(took.is_some(), "child {} not reaped 3 s after the DELETE: {:?}", kid.pid, proc_info(kid.pid));
    assert_eq!(gate.children(), vec![], "no child left, zombie or not");
    assert!(kid.try_stats().is_none(), "the fixture still answers");
    let status = gate.status();
    assert_processes(&status, 0);
    assert_eq!(status["processes"]["reaped"], 1, "{status}");
    let p = server_processes(&status, "p");
    assert_eq!(p["killed"], 0, "it exited at stdin's EOF, without a signal: {p}");
    assert_eq!(p["exited"], 0, "{p}");
    assert_eq!(child_threads(&gate, 0), (0, 0), "its reader and stderr threads (stdio, stderr) are gone");
}

#[test]
fn an_idle_session_is_evicted_and_its_child_reaped() {
    let gate =
        StdioGate::start(&config_with(json!({"p": stdio_server("p", &[])}), json!({"session_idle_timeout_secs": 1})));
    let _client = gate.session_using(&["p"]);
    let kid = gate.kid("p", 1);
    let took = gate.reaped_within(kid.pid, Duration::from_secs(5));
    assert!(took.is_some(), "child {} not reaped 5 s into a 1 s idle timeout: {:?}", kid.pid, proc_info(kid.pid));
    let status = gate.status();
    assert_eq!(status["sessions"]["evicted_idle"], 1, "{status}");
    assert_processes(&status, 0);
    assert_eq!(status["processes"]["reaped"], 1, "{status}");
    assert_eq!(gate.children(), vec![]);
}

#[test]
fn a_child_that_ignores_stdin_eof_gets_sigterm_then_sigkill_and_its_group_dies() {
    let grace_ms = 300;
    // `deaf` ignores SIGTERM too (an ignored signal stays ignored across exec): only SIGKILL ends it.
    let deaf = shell_server(
        "trap '' TERM; exec \"$0\" --stdio --name deaf --stats-listen 127.0.0.1:0 --ignore-stdin-eof",
        &[fixture_bin()],
    );
    let servers = json!({
        "stubborn": stdio_server("stubborn", &["--ignore-stdin-eof", "--spawn-grandchild"]),
        "deaf": deaf,
    });
    let gate = StdioGate::start(&config_with(servers, json!({"stdio_grace_ms": grace_ms})));
    let client = gate.session_using(&["stubborn", "deaf"]);
    let (stubborn, deaf) = (gate.kid("stubborn", 1), gate.kid("deaf", 1));
    let grandchild = stubborn.grandchild();
    let g = proc_info(grandchild).expect("the grandchild runs");
    assert_eq!((g.name.as_str(), g.ppid, g.pgid), ("sleep", stubborn.pid, stubborn.pid), "{g:?}");
    // A child that starts with SIGTERM blocked (mcpgate blocks it for its sigwait thread, and a
    // mask is inherited across fork and exec) can only be ended by SIGKILL.
    assert_eq!(signal_field(stubborn.pid, "SigBlk:"), 0, "signals blocked in the child at its start");

    // The DELETE answers once its session is closed: the children are watched meanwhile.
    let started = Instant::now();
    let (mut stubborn_gone, mut deaf_gone) = (None, None);
    let deleted = std::thread::scope(|s| {
        let deleting = s.spawn(|| {
            client.delete();
            started.elapsed()
        });
        wait_until(Duration::from_secs(5), || {
            if stubborn_gone.is_none() && reaped_by(stubborn.pid, gate.pid()) {
                stubborn_gone = Some(started.elapsed());
            }
            if deaf_gone.is_none() && reaped_by(deaf.pid, gate.pid()) {
                deaf_gone = Some(started.elapsed());
            }
            stubborn_gone.is_some() && deaf_gone.is_some()
        });
        deleting.join().expect("the DELETE")
    });
    eprintln!(
        "stdio_grace_ms {grace_ms}: DELETE answered in {deleted:?}; SIGTERM ended `stubborn` in {stubborn_gone:?}, \
         SIGKILL `deaf` in {deaf_gone:?}"
    );
    let stubborn_gone = stubborn_gone.unwrap_or_else(|| panic!("stubborn not reaped: {:?}", proc_info(stubborn.pid)));
    let deaf_gone = deaf_gone.unwrap_or_else(|| panic!("deaf not reaped: {:?}", proc_info(deaf.pid)));
    let grace = Duration::from_millis(grace_ms);
    assert!(stubborn_gone >= grace, "stubborn was signalled before its grace: {stubborn_gone:?}");
    assert!(stubborn_gone < 2 * grace, "SIGTERM did not end stubborn; SIGKILL did, after {stubborn_gone:?}");
    assert!(deaf_gone >= 2 * grace, "deaf was killed before two graces: {deaf_gone:?}");
    assert!(deaf_gone < 2 * grace + Duration::from_secs(1), "SIGKILL came late: {deaf_gone:?}");
    assert!(
        wait_until(Duration::from_secs(1), || is_dead(grandchild, "sleep")),
        "the grandchild outlived its group's close: {:?}",
        proc_info(grandchild)
    );
    let status = gate.status();
    assert_processes(&status, 0);
    for name in ["stubborn", "deaf"] {
        let p = server_processes(&status, name);
        assert_eq!((p["killed"].as_u64(), p["exited"].as_u64()), (Some(1), Some(0)), "{name}: {p}");
    }
}

/// A signal set of `/proc/<pid>/status` (`SigBlk:`, `SigIgn:`...) as a bit mask.
fn signal_field(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let hex = status.lines().find_map(|l| l.strip_prefix(field)).map(str::trim);
    hex.and_then(|h| u64::from_str_radix(h, 16).ok()).unwrap_or_else(|| panic!("no {field} for {pid}"))
}

#[test]
fn a_crash_fails_the_running_call_and_the_next_request_restarts_the_child() {
    let dir = TempDir::new();
    // a's child crashes; b's and the one started after the crash do not.
    let servers = json!({"p": crash_once("p", &dir)});
    let gate = StdioGate::start(&config(servers));
    let mut a = gate.session_using(&["p"]);
    let kids = gate.kids("p", 1);
    let mut b = gate.session_using(&["p"]);
    let kids = [kids[0].clone(), gate.kid("p", 2)];
    let (crashing, other) = (&kids[0], &kids[1]);
    assert_eq!(gate.children().len(), 2, "one child per session");

    let started = Instant::now();
    let reply = a.call_tool("p__slow", json!({"ms": 8000}));
    let message = reply.error_message();
    assert!(message.contains("server `p`") && message.contains("exit status 3"), "{}", reply.body);
    assert!(started.elapsed() < Duration::from_secs(4), "the crash was noticed after {:?}", started.elapsed());
    assert!(
        gate.reaped_within(crashing.pid, Duration::from_secs(2)).is_some(),
        "the crashed child is not reaped: {:?}",
        proc_info(crashing.pid)
    );
    let p = server_processes(&gate.status(), "p");
    assert_eq!((p["exited"].as_u64(), p["restarts"].as_u64(), p["live"].as_u64()), (Some(1), Some(0), Some(1)), "{p}");

    assert_eq!(a.tool_text("p__echo", json!({"text": "again"})), "again", "the next request restarts it");
    let restarted = gate.kid("p", 3);
    assert_ne!(restarted.pid, crashing.pid);
    assert_eq!(restarted.stats()["initialize"], 1, "the new child was initialized");
    let status = gate.status();
    let p = server_processes(&status, "p");
    assert_eq!((p["restarts"].as_u64(), p["spawned"].as_u64(), p["live"].as_u64()), (Some(1), Some(3), Some(2)), "{p}");
    assert_processes(&status, 2);
    // The last error is the crash's exit status, not the retry that followed it.
    let last_error = status["servers"]["p"]["last_error"].as_str().unwrap_or_default().to_string();
    assert!(last_error.contains("exit status 3") && !last_error.contains("no longer knows"), "{last_error}");

    // The other session kept its child, untouched.
    assert_eq!(b.tool_text("p__echo", json!({"text": "b"})), "b");
    let stats = other.stats();
    // initialize, its first call, tools/list (the crash made the lists stale) and this call.
    assert_eq!((stats["initialize"].as_u64(), stats["requests"].as_u64()), (Some(1), Some(4)), "{stats}");
    let live: Vec<u32> = gate.wait_children(2).iter().map(|c| c.pid).collect();
    assert_eq!(live, sorted(&[other.pid, restarted.pid]), "mcpgate's children");
    assert_eq!(child_threads(&gate, 2), (2, 2), "a reader and a stderr thread per live child");
}

fn sorted(pids: &[u32]) -> Vec<u32> {
    let mut pids = pids.to_vec();
    pids.sort_unstable();
    pids
}

#[test]
fn a_child_hung_in_initialize_is_left_out_stopped_and_reaped() {
    let servers = json!({
        "hung": stdio_server("hung", &["--hang-initialize"]),
        "ok": stdio_server("ok", &[]),
    });
    let gate = StdioGate::start(&config_with(servers, json!({"start_timeout_secs": 2})));
    let mut client = gate.open_session();
    let started = Instant::now();
    let (tools, hung) = std::thread::scope(|s| {
        let listing = s.spawn(|| client.tool_names());
        // While the list waits on it, the hung child runs.
        let hung = gate.kid("hung", 1);
        assert_eq!(hung.stats()["initialize"], 0, "it never answered initialize");
        (listing.join().expect("tools/list"), hung)
    });
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(2) && took < Duration::from_secs(6), "tools/list took {took:?}");
    assert!(
        gate.reaped_within(hung.pid, Duration::from_secs(3)).is_some(),
        "the hung child is not reaped: {:?}",
        proc_info(hung.pid)
    );
    assert!(tools.contains(&"ok__echo".to_string()), "{tools:?}");
    assert!(!tools.iter().any(|t| t.starts_with("hung__")), "{tools:?}");
    assert_eq!(client.tool_text("ok__echo", json!({"text": "fine"})), "fine");
    let message = client.call_tool("hung__echo", json!({"text": "x"})).error_message();
    assert!(message.contains("`hung`") && message.contains("initialize"), "{message}");
    let status = gate.status();
    let error = status["servers"]["hung"]["last_error"].as_str().unwrap_or_default().to_string();
    assert!(error.contains("no answer to initialize"), "last_error: {error}");
    assert_processes(&status, 1);
    assert_eq!(server_processes(&status, "hung")["live"], 0, "{status}");
    let ok = gate.kid("ok", 1);
    let live: Vec<u32> = gate.wait_children(1).iter().map(|c| c.pid).collect();
    assert_eq!(live, vec![ok.pid], "only the working child is left");
}

#[test]
fn kill_9_of_mcpgate_kills_every_child_within_2_s() {
    let servers = json!({
        "a": stdio_server("a", &["--spawn-grandchild"]),
        "b": stdio_server("b", &[]),
    });
    let mut gate = StdioGate::start(&config(servers));
    let _one = gate.session_using(&["a", "b"]);
    let _two = gate.session_using(&["a", "b"]);
    let children = gate.wait_children(4);
    let grandchildren: Vec<u32> = gate.kids("a", 2).iter().map(|k| k.grandchild()).collect();
    for &g in &grandchildren {
        assert!(!is_dead(g, "sleep"), "grandchild {g} runs before the kill");
    }

    let killed = Instant::now();
    gate.kill();
    let all_dead = wait_until(Duration::from_secs(2), || children.iter().all(|c| is_dead(c.pid, "mcp-fixture")));
    let took = killed.elapsed();
    let left: Vec<_> = children.iter().filter_map(|c| proc_info(c.pid)).collect();
    assert!(all_dead, "children still running 2 s after kill -9 of mcpgate: {left:?}");
    eprintln!("kill -9: every direct child dead after {took:?}; what /proc shows of them: {left:?}");
    // PR_SET_PDEATHSIG reaches the direct children only: report what became of the grandchildren.
    for &g in &grandchildren {
        eprintln!("kill -9: grandchild {g} 2 s later: {:?}", proc_info(g));
    }
}

#[test]
fn sigterm_reaps_every_child_and_the_last_log_line_counts_them() {
    let servers = json!({
        "a": stdio_server("a", &["--spawn-grandchild"]),
        "stubborn": stdio_server("stubborn", &["--ignore-stdin-eof"]),
        "shared": {
            "command": fixture_bin(),
            "args": support::stdio_args("shared", &["--spawn-grandchild"]),
            "sharing": "shared",
        },
    });
    let mut gate = StdioGate::start(&config_with(servers, json!({"stdio_grace_ms": 200})));
    let _one = gate.session_using(&["a", "stubborn", "shared"]);
    let _two = gate.session_using(&["a", "stubborn"]);
    let children = gate.wait_children(5);
    let mut grandchildren: Vec<u32> = gate.kids("a", 2).iter().map(|k| k.grandchild()).collect();
    grandchildren.push(gate.kid("shared", 1).grandchild());

    let started = Instant::now();
    let exit = gate.terminate(Duration::from_secs(10));
    let took = started.elapsed();
    assert_eq!(exit.and_then(|s| s.code()), Some(0), "exit status after SIGTERM: {exit:?}");
    eprintln!("SIGTERM: mcpgate exited in {took:?}");
    let log = gate.stderr_once(|log| log.contains("stopped in"));
    let last = log.lines().rev().find(|l| l.contains("stopped in")).unwrap_or_else(|| panic!("no final line: {log}"));
    let count = |word: &str| -> u64 {
        let rest = last.split_once(&format!("processes {word} ")).map(|(_, r)| r).unwrap_or("");
        rest.split(|c: char| !c.is_ascii_digit()).next().unwrap_or("").parse().unwrap_or(u64::MAX)
    };
    assert_eq!(count("spawned"), 5, "{last}");
    let reaped = last.split_once("reaped ").and_then(|(_, r)| r.split(',').next()).unwrap_or("");
    assert_eq!(reaped, "5", "{last}");
    assert!(last.ends_with("live 0"), "{last}");
    for c in &children {
        assert!(is_dead(c.pid, "mcp-fixture"), "child left after the shutdown: {:?}", proc_info(c.pid));
    }
    // A child killed by PR_SET_PDEATHSIG at mcpgate's exit would leave its grandchild running:
    // a dead grandchild shows the close path killed its group.
    for &g in &grandchildren {
        assert!(
            wait_until(Duration::from_secs(1), || is_dead(g, "sleep")),
            "grandchild left after the shutdown: {:?}",
            proc_info(g)
        );
    }
}

#[test]
fn a_shared_child_serves_two_sessions_keeps_them_apart_and_stops_when_unused() {
    let shared = json!({"command": fixture_bin(), "args": support::stdio_args("sh", &[]), "sharing": "shared"});
    let gate = StdioGate::start(&config_with(
        json!({"sh": shared}),
        // A 5 s idle timeout makes the reaper look every 500 ms (for shared_idle_secs).
        json!({"shared_idle_secs": 1, "session_idle_timeout_secs": 5}),
    ));
    let mut a = gate.client();
    a.initialize_with(sampling());
    let mut b = gate.client();
    b.initialize_with(sampling());
    support::use_servers(&a, &["sh"]);
    let kid = gate.kid("sh", 1);
    let children = gate.wait_children(1);
    assert_eq!(children[0].pid, kid.pid);
    let (who_a, who_b) =
        (downstream_session(&mut a, "sh__whoami", "sh"), downstream_session(&mut b, "sh__whoami", "sh"));
    assert_eq!(who_a, who_b, "both sessions are served by one fixture session");
    assert_eq!(kid.stats()["initialize"], 1, "initialized once");
    let status = gate.status();
    assert_eq!(status["servers"]["sh"]["live_sessions"], 2, "{status}");
    assert_eq!(server_processes(&status, "sh")["spawned"], 1, "{status}");

    // Same request id, same progress token, at once: each gets its own progress and answer.
    let call = |steps: u64| json!({"name": "sh__slow", "arguments": {"ms": 600, "steps": steps}, "_meta": {"progressToken": "same"}});
    let (ra, rb) = std::thread::scope(|s| {
        let ra = s.spawn(|| a.request("tools/call", call(3)));
        let rb = s.spawn(|| b.request("tools/call", call(5)));
        (ra.join().expect("a's call"), rb.join().expect("b's call"))
    });
    assert_eq!(ra.body["id"], rb.body["id"], "the test meant the ids to collide");
    for (reply, steps) in [(&ra, 3), (&rb, 5)] {
        assert_eq!(reply.result()["content"][0]["text"], "done", "{reply:?}");
        let progress = progress_of(&reply.events);
        assert_eq!(progress.len(), steps, "{:?}", reply.events);
        assert!(
            progress.iter().all(|m| m["params"]["progressToken"] == "same" && m["params"]["total"] == steps),
            "another session's progress: {progress:?}"
        );
    }

    // One session with a call running: the child's sampling request goes to its client.
    let stream_b = b.open_stream();
    let (events, response) = a.call_streaming("sh__sample", json!({"prompt": "for a"}), |asked| {
        (asked["method"] == "sampling/createMessage").then(|| sampled("from a"))
    });
    assert_eq!(response["result"]["content"][0]["text"], "sampled: from a", "{response}");
    assert_eq!(events.iter().filter(|m| m["method"] == "sampling/createMessage").count(), 1, "{events:?}");
    assert_eq!(stream_b.next_with_method("sampling/createMessage", Duration::from_millis(300)), None);

    // Two sessions with calls running: nobody can tell whose it is; refused.
    let (sample, slow) = std::thread::scope(|s| {
        let slow = s.spawn(|| b.call_tool("sh__slow", json!({"ms": 1500})));
        let running = wait_until(Duration::from_secs(5), || kid.stats()["requests_running"] == 1);
        assert!(running, "b's call never ran: {}", kid.stats());
        let sample = a.call_streaming("sh__sample", json!({"prompt": "whose?"}), |asked| {
            panic!("a was asked although two sessions have calls running: {asked}")
        });
        (sample, slow.join().expect("b's call"))
    });
    let (events, response) = sample;
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(response["result"]["isError"], true, "{response}");
    let text = response["result"]["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("cannot tell which client"), "{text}");
    assert_eq!(slow.result()["content"][0]["text"], "done", "{slow:?}");
    assert_eq!(stream_b.next_with_method("sampling/createMessage", Duration::from_millis(100)), None);
    stream_b.close();

    // Both leave: the child outlives them by shared_idle_secs, then it is stopped and reaped.
    a.delete();
    b.delete();
    let closed = Instant::now();
    if closed.elapsed() < Duration::from_millis(700) {
        assert!(!is_dead(kid.pid, "mcp-fixture"), "stopped before shared_idle_secs");
    }
    let took = gate.reaped_within(kid.pid, Duration::from_secs(5)).map(|_| closed.elapsed());
    let took = took.unwrap_or_else(|| panic!("the shared child is not reaped: {:?}", proc_info(kid.pid)));
    // The child's idle time starts in the last DELETE, a little before `closed`.
    assert!(took >= Duration::from_millis(900), "stopped {took:?} after the last session, before shared_idle_secs");
    let status = gate.status();
    assert_processes(&status, 0);
    let p = server_processes(&status, "sh");
    assert_eq!((p["spawned"].as_u64(), p["live"].as_u64()), (Some(1), Some(0)), "{p}");
    assert_eq!(status["servers"]["sh"]["live_sessions"], 0, "{status}");
}

#[test]
fn the_global_max_processes_leaves_the_server_out_of_a_third_session() {
    let http = Fixture::start("h", &[]);
    let servers = json!({"a": stdio_server("a", &[]), "h": {"url": http.url()}});
    let mut gate = StdioGate::start(&config_with(servers, json!({"max_processes": 2})));
    let mut one = gate.session_using(&["a"]);
    let _two = gate.session_using(&["a"]);
    let mut three = gate.open_session();
    assert_eq!(gate.wait_children(2).len(), 2);
    let message = three.call_tool("a__echo", json!({"text": "x"})).error_message();
    assert!(
        message.contains("max_processes") && message.contains("2 held by 2 session(s) of `mcpgate-tests`"),
        "{message}"
    );
    let health = gate.status()["health"].clone();
    assert!(health["problems"].to_string().contains("a process limit refuses work"), "{health}");
    assert_eq!(three.tool_text("h__echo", json!({"text": "http"})), "http", "other servers are unaffected");
    assert_eq!(one.tool_text("a__echo", json!({"text": "one"})), "one");
    let status = gate.status();
    let error = status["servers"]["a"]["last_error"].as_str().unwrap_or_default();
    assert!(error.contains("max_processes"), "last_error: {error}");
    assert_processes(&status, 2);
    assert_eq!(gate.children().len(), 2, "the limit holds in /proc");
    assert!(gate.is_running(), "mcpgate stays up");

    // A session that leaves frees its process for the next one.
    let first = gate.kid("a", 1);
    one.delete();
    assert!(gate.reaped_within(first.pid, Duration::from_secs(3)).is_some());
    let _four = gate.session_using(&["a"]);
    assert_processes(&gate.status(), 2);
    assert_eq!(gate.wait_children(2).len(), 2);
}

#[test]
fn a_server_max_processes_leaves_that_server_out_and_no_other() {
    let mut limited = stdio_server("b", &[]);
    limited["max_processes"] = json!(1);
    let servers = json!({"b": limited, "c": stdio_server("c", &[])});
    let gate = StdioGate::start(&config(servers));
    let mut one = gate.session_using(&["b", "c"]);
    let mut two = gate.session_using(&["c"]);
    assert_eq!(gate.wait_children(3).len(), 3, "b once, c twice");
    let message = two.call_tool("b__echo", json!({"text": "x"})).error_message();
    assert!(message.contains("mcpServers.b.max_processes") && message.contains("1 held by 1 session(s)"), "{message}");
    assert_eq!(two.tool_text("c__echo", json!({"text": "c"})), "c");
    assert_eq!(one.tool_text("b__echo", json!({"text": "b"})), "b");
    let status = gate.status();
    assert_processes(&status, 3);
    assert_eq!(server_processes(&status, "b")["live"], 1, "{status}");
    assert_eq!(server_processes(&status, "c")["live"], 2, "{status}");
    assert!(gate.kid("c", 2).try_stats().is_some(), "c's second child serves");
}

#[test]
fn a_child_sees_its_own_env_and_path_but_not_mcpgates_environment() {
    let cwd = TempDir::new();
    let mut server = stdio_server("p", &[]);
    server["env"] = json!({"MINE": "configured", "PASSED_ON": "${SECRET_OF_OTHER}"});
    server["cwd"] = json!(cwd.0);
    let gate = StdioGate::start_with(&config(json!({"p": server})), |mut command| {
        command.env("SECRET_OF_OTHER", "x").env("ANOTHER_TOKEN", "y");
        // What package runners need behind a proxy or a private CA passes (env_passthrough).
        command.env("HTTPS_PROXY", "http://proxy.example:3128").env("npm_config_cache", "/var/cache/npm");
        command
    });
    let _client = gate.session_using(&["p"]);
    let kid = gate.kid("p", 1);
    let ours = environ(gate.pid());
    assert!(ours.contains(&("SECRET_OF_OTHER".into(), "x".into())), "mcpgate has the secret: {ours:?}");
    let theirs = environ(kid.pid);
    let get = |name: &str| theirs.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
    assert_eq!(get("SECRET_OF_OTHER"), None, "{theirs:?}");
    assert_eq!(get("ANOTHER_TOKEN"), None, "{theirs:?}");
    assert_eq!(get("MCPGATE_LOG"), None, "{theirs:?}");
    assert_eq!(get("MINE"), Some("configured"), "{theirs:?}");
    assert_eq!(get("PASSED_ON"), Some("x"), "what its env names explicitly: {theirs:?}");
    assert_eq!(get("HTTPS_PROXY"), Some("http://proxy.example:3128"), "env_passthrough: {theirs:?}");
    assert_eq!(get("npm_config_cache"), Some("/var/cache/npm"), "env_passthrough: {theirs:?}");
    let path = ours.iter().find(|(n, _)| n == "PATH").map(|(_, v)| v.as_str());
    assert!(path.is_some() && get("PATH") == path, "mcpgate's PATH: {theirs:?}");
    let base = ["PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "MINE", "PASSED_ON"];
    // The rest must be what env_passthrough passes from mcpgate's environment (a proxy, a CA,
    // npm's and uv's settings), never another server's secret.
    let passed = |n: &str| {
        ["SSL_", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "XDG_CACHE_HOME", "PIP_"]
            .iter()
            .any(|p| n.starts_with(p))
            || n.to_ascii_lowercase().ends_with("_proxy")
            || n.to_ascii_lowercase().starts_with("npm_config_")
            || n.starts_with("UV_")
    };
    let extra: Vec<&String> =
        theirs.iter().map(|(n, _)| n).filter(|n| !base.contains(&n.as_str()) && !passed(n)).collect();
    assert!(extra.is_empty(), "not in the base environment nor in its env: {extra:?}");
    let dir = std::fs::read_link(format!("/proc/{}/cwd", kid.pid)).expect("its cwd");
    assert_eq!(dir, cwd.0.canonicalize().unwrap(), "its cwd");
}

#[test]
fn a_reload_that_removes_stdio_servers_stops_and_reaps_their_children() {
    let shared =
        |name: &str| json!({"command": fixture_bin(), "args": support::stdio_args(name, &[]), "sharing": "shared"});
    let servers = json!({
        "gone": stdio_server("gone", &[]),
        "gone_shared": shared("gone_shared"),
        "keep": stdio_server("keep", &[]),
    });
    let mut c = config(servers);
    let gate = StdioGate::start(&c);
    let mut client = gate.session_using(&["gone", "gone_shared", "keep"]);
    assert_eq!(gate.wait_children(3).len(), 3);
    let (gone, gone_shared, keep) = (gate.kid("gone", 1), gate.kid("gone_shared", 1), gate.kid("keep", 1));

    c["mcpServers"] = json!({"keep": stdio_server("keep", &[])});
    gate.dir.write_config(&c);
    support::signal(gate.pid(), "HUP");
    for kid in [&gone, &gone_shared] {
        assert!(
            gate.reaped_within(kid.pid, Duration::from_secs(5)).is_some(),
            "child {} of a removed server is not reaped: {:?}",
            kid.pid,
            proc_info(kid.pid)
        );
    }
    let live: Vec<u32> = gate.wait_children(1).iter().map(|c| c.pid).collect();
    assert_eq!(live, vec![keep.pid], "the kept server keeps its child");
    let tools = client.tool_names();
    assert!(tools.iter().all(|t| t.starts_with("keep__")), "{tools:?}");
    assert_eq!(client.tool_text("keep__echo", json!({"text": "kept"})), "kept");
    assert_eq!(keep.stats()["initialize"], 1, "the kept child was not restarted");
    let status = gate.status();
    assert_processes(&status, 1);
    assert_eq!(status["processes"]["reaped"], 2, "{status}");
    assert!(status["servers"].get("gone").is_none(), "{status}");
}

#[test]
fn child_stderr_goes_to_the_log_with_the_server_name_and_a_flood_is_rate_limited() {
    let servers = json!({
        "quiet": stdio_server("quiet", &["--stderr-lines", "3"]),
        "chatty": stdio_server("chatty", &["--stderr-lines", "100000"]),
    });
    let gate = StdioGate::start(&config(servers));
    let mut client = gate.open_session();
    let started = Instant::now();
    let tools = client.tool_names();
    let took = started.elapsed();
    // The fixture writes its lines before it answers anything: had mcpgate stopped reading its
    // stderr, the pipe would have filled and the list would have waited past the start's
    // timeout (start_timeout_secs, 10 s here); 8 s leaves a loaded host room for the flood.
    assert!(took < Duration::from_secs(8) && tools.contains(&"chatty__echo".to_string()), "{tools:?} in {took:?}");
    assert_eq!(client.tool_text("chatty__echo", json!({"text": "still here"})), "still here");
    assert_eq!(client.tool_text("quiet__echo", json!({"text": "q"})), "q");
    let log = gate.stderr_once(|log| log.contains("server `quiet` (stderr): mcp-fixture quiet: stderr line 3 of 3"));
    for n in 1..=3 {
        let line = format!("server `quiet` (stderr): mcp-fixture quiet: stderr line {n} of 3");
        assert!(log.contains(&line), "`{line}` missing from the log");
    }
    let chatty = stderr_lines_of(&log, "chatty");
    eprintln!("a flood of 100000 stderr lines: initialize took {took:?}, {} lines logged", chatty.len());
    assert!(chatty.iter().any(|l| l.ends_with("mcp-fixture chatty: stderr line 1 of 100000")), "{chatty:?}");
    assert!((50..=55).contains(&chatty.len()), "{} lines of chatty logged", chatty.len());
    assert!(!log.contains("stderr line 100000 of 100000"), "the flood was logged whole");
    assert_eq!(gate.wait_children(2).len(), 2);
}

#[test]
fn a_server_with_url_and_command_is_refused_with_exit_status_2() {
    let dir = TempDir::new();
    let both = json!({"url": "http://127.0.0.1:9/mcp", "command": fixture_bin(), "args": ["--stdio"]});
    let path = dir.write_config(&config(json!({"both": both})));
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcpgate"))
        .arg("--config")
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start mcpgate");
    let status = wait_exit(&mut child, Duration::from_secs(5));
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.and_then(|s| s.code()), Some(2), "{status:?}: {stderr}");
    assert!(stderr.contains("mcpServers.both.command"), "{stderr}");
}

#[test]
fn sessions_opened_at_once_never_run_more_than_max_processes() {
    let http = Fixture::start("h", &[]);
    let mut limited = stdio_server("b", &[]);
    limited["max_processes"] = json!(1);
    let servers = json!({"a": stdio_server("a", &[]), "b": limited, "h": {"url": http.url()}});
    let gate = StdioGate::start(&config_with(servers, json!({"max_processes": 3})));
    // Six sessions, each calling a and b at once: twelve processes wanted.
    let _clients: Vec<support::Client> = std::thread::scope(|s| {
        let opening: Vec<_> = (0..6)
            .map(|_| {
                s.spawn(|| {
                    let client = gate.open_session();
                    std::thread::scope(|s| {
                        for server in ["a", "b"] {
                            let mut one = client.same_session();
                            s.spawn(move || one.call_tool(&format!("{server}__echo"), json!({"text": "x"})));
                        }
                    });
                    client
                })
            })
            .collect();
        opening.into_iter().map(|o| o.join().expect("a session")).collect()
    });
    let children = gate.children();
    let status = gate.status();
    let (a, b) = (server_processes(&status, "a"), server_processes(&status, "b"));
    assert_eq!(children.len(), 3, "max_processes 3, and in /proc: {children:?}");
    assert!(b["spawned"].as_u64() <= Some(1), "b's max_processes is 1: {b}");
    assert_eq!(a["spawned"].as_u64().unwrap() + b["spawned"].as_u64().unwrap(), 3, "{a} {b}");
    assert_processes(&status, 3);
}

#[test]
fn a_crashed_child_takes_its_process_group_with_it() {
    let servers = json!({"p": stdio_server("p", &["--exit-after-ms", "1000", "--spawn-grandchild"])});
    let gate = StdioGate::start(&config(servers));
    let _client = gate.session_using(&["p"]);
    let kid = gate.kid("p", 1);
    let grandchild = kid.grandchild();
    assert!(
        gate.reaped_within(kid.pid, Duration::from_secs(3)).is_some(),
        "the crashed child is not reaped: {:?}",
        proc_info(kid.pid)
    );
    assert_eq!(server_processes(&gate.status(), "p")["exited"], 1);
    assert!(
        wait_until(Duration::from_secs(1), || is_dead(grandchild, "sleep")),
        "the crashed child's grandchild runs on: {:?}",
        proc_info(grandchild)
    );
}

#[test]
fn a_crash_is_noticed_while_a_grandchild_holds_the_childs_stdout() {
    // As `npx` or a shell without `exec` leave them: a process of the child's group that
    // inherited its stdout and stderr, so that neither reaches its EOF when the child exits.
    let script = "sleep 1000 & exec \"$0\" --stdio --name p --stats-listen 127.0.0.1:0 --exit-after-ms 1500";
    let gate = StdioGate::start(&config_with(
        json!({"p": shell_server(script, &[fixture_bin()])}),
        json!({"request_timeout_secs": 4}),
    ));
    let mut client = gate.session_using(&["p"]);
    let kid = gate.kid("p", 1);
    let sleeper = support::group_members(kid.pid).into_iter().find(|p| p.name == "sleep").expect("the sleep runs");
    let started = Instant::now();
    let reply = client.call_tool("p__slow", json!({"ms": 8000}));
    let took = started.elapsed();
    assert!(reply.error_message().contains("exit status 3"), "after {took:?}: {}", reply.body);
    assert!(took < Duration::from_secs(3), "the crash was noticed after {took:?}");
    assert!(
        gate.reaped_within(kid.pid, Duration::from_secs(2)).is_some(),
        "the crashed child is left a zombie: {:?}",
        proc_info(kid.pid)
    );
    assert!(
        wait_until(Duration::from_secs(1), || is_dead(sleeper.pid, "sleep")),
        "its group runs on: {:?}",
        proc_info(sleeper.pid)
    );
    assert_eq!(client.tool_text("p__echo", json!({"text": "again"})), "again", "restarted");
}

#[test]
fn a_shared_child_hung_in_initialize_is_stopped_at_once_not_kept_for_shared_idle_secs() {
    let hung = json!({
        "command": fixture_bin(),
        "args": support::stdio_args("hung", &["--hang-initialize"]),
        "sharing": "shared",
    });
    let servers = json!({"hung": hung, "ok": stdio_server("ok", &[])});
    let gate =
        StdioGate::start(&config_with(servers, json!({"start_timeout_secs": 1, "session_idle_timeout_secs": 5})));
    let mut client = gate.open_session();
    let (tools, hung) = std::thread::scope(|s| {
        let listing = s.spawn(|| client.tool_names());
        let hung = gate.kid("hung", 1);
        (listing.join().expect("tools/list"), hung)
    });
    assert!(tools.contains(&"ok__echo".to_string()) && !tools.iter().any(|t| t.starts_with("hung__")), "{tools:?}");
    assert_eq!(client.tool_text("ok__echo", json!({"text": "fine"})), "fine");
    assert!(
        gate.reaped_within(hung.pid, Duration::from_secs(3)).is_some(),
        "the hung shared child runs on (shared_idle_secs is 300): {:?}",
        proc_info(hung.pid)
    );
    let status = gate.status();
    assert_processes(&status, 1);
    assert_eq!(server_processes(&status, "hung")["live"], 0, "{status}");
}

#[test]
fn a_close_does_not_wait_for_a_process_that_left_the_childs_group_with_its_pipes() {
    // A daemon the child started in a session of its own, with the child's stdout and stderr:
    // the group kill does not reach it, and the pipes stay open as long as it runs.
    let script = "setsid sleep 1000 & exec \"$0\" --stdio --name p --stats-listen 127.0.0.1:0";
    let gate = StdioGate::start(&config_with(
        json!({"p": shell_server(script, &[fixture_bin()])}),
        json!({"stdio_grace_ms": 200, "delete_timeout_secs": 1}),
    ));
    let client = gate.session_using(&["p"]);
    let kid = gate.kid("p", 1);
    let daemon = wait_until(Duration::from_secs(2), || {
        support::all_processes().iter().any(|p| p.name == "sleep" && p.ppid == kid.pid)
    });
    assert!(daemon, "the daemon did not start");
    let escaped: Vec<support::Proc> =
        support::all_processes().into_iter().filter(|p| p.name == "sleep" && p.ppid == kid.pid).collect();
    for p in &escaped {
        gate.watch_group(p.pgid);
    }
    let started = Instant::now();
    let deleted = std::thread::scope(|s| {
        let deleting = s.spawn(|| client.delete());
        let answered = wait_until(Duration::from_secs(5), || deleting.is_finished());
        if !answered {
            // Free the close so that the test can end, and say what held it.
            for p in &escaped {
                let _ = Command::new("kill").arg("-KILL").arg(p.pid.to_string()).status();
            }
        }
        let _ = deleting.join();
        answered
    });
    assert!(deleted, "the DELETE did not answer within 5 s while the daemon held the child's pipes");
    assert!(started.elapsed() < Duration::from_secs(2), "the DELETE took {:?}", started.elapsed());
    assert!(gate.reaped_within(kid.pid, Duration::from_secs(1)).is_some(), "{:?}", proc_info(kid.pid));
    assert_processes(&gate.status(), 0);
}

#[test]
fn a_crashed_shared_child_is_restarted_once_for_all_its_sessions() {
    let dir = TempDir::new();
    // The crashed child leaves a daemon with its stderr: its logger takes up to 200 ms to end,
    // which the first session to reopen waits for, while the others reopen too.
    let mut shared = crash_once_after("sh", &dir, "setsid sleep 1000 &");
    shared["sharing"] = json!("shared");
    let gate = StdioGate::start(&config(json!({"sh": shared})));
    let mut clients: Vec<support::Client> = (0..4).map(|_| gate.session_using(&["sh"])).collect();
    let first = gate.kid("sh", 1);
    let daemon = wait_until(Duration::from_secs(2), || {
        let daemons = support::all_processes().into_iter().filter(|p| p.name == "sleep" && p.ppid == first.pid);
        daemons.map(|p| gate.watch_group(p.pgid)).count() == 1
    });
    assert!(daemon, "the daemon did not start");
    let all = |clients: &mut Vec<support::Client>, call: &(dyn Fn(&mut support::Client) -> String + Sync)| {
        std::thread::scope(|s| {
            let running: Vec<_> = clients.iter_mut().map(|c| s.spawn(move || call(c))).collect();
            running.into_iter().map(|r| r.join().expect("a call")).collect::<Vec<String>>()
        })
    };
    let crashed = all(&mut clients, &|c| c.call_tool("sh__slow", json!({"ms": 8000})).error_message());
    assert!(crashed.iter().all(|m| m.contains("exit status 3")), "{crashed:?}");
    assert!(gate.reaped_within(first.pid, Duration::from_secs(2)).is_some(), "{:?}", proc_info(first.pid));
    // Every session finds the child gone and opens the server again, at once.
    let who = all(&mut clients, &|c| downstream_session(c, "sh__whoami", "sh"));
    let children = gate.wait_children(1);
    assert!(who.iter().all(|w| *w == who[0]), "one new child for every session: {who:?}");
    let second = gate.kid("sh", 2);
    assert_eq!(children[0].pid, second.pid);
    assert_eq!(second.stats()["initialize"], 1, "{}", second.stats());
    let status = gate.status();
    let p = server_processes(&status, "sh");
    assert_eq!(
        (p["spawned"].as_u64(), p["restarts"].as_u64(), p["exited"].as_u64()),
        (Some(2), Some(1), Some(1)),
        "{p}"
    );
    assert_processes(&status, 1);
}

#[test]
fn a_shared_child_opening_while_a_reload_removes_its_server_is_stopped() {
    // Its child answers initialize a second late: the reload comes while it is opening.
    let script = "sleep 1; exec \"$0\" --stdio --name late --stats-listen 127.0.0.1:0";
    let mut late = shell_server(script, &[fixture_bin()]);
    late["sharing"] = json!("shared");
    let mut c =
        config_with(json!({"late": late, "keep": stdio_server("keep", &[])}), json!({"session_idle_timeout_secs": 5}));
    let gate = StdioGate::start(&c);
    let mut client = gate.session_using(&["keep"]);
    let (keep, late) = std::thread::scope(|s| {
        // Its call waits for it to start; the reload ends it with an error.
        let mut caller = client.same_session();
        let opening = s.spawn(move || caller.call_tool("late__echo", json!({"text": "x"})));
        let children = gate.wait_children(2);
        let keep = gate.kid("keep", 1);
        let late = children.iter().find(|c| c.pid != keep.pid).expect("the late child").pid;
        c["mcpServers"] = json!({"keep": stdio_server("keep", &[])});
        gate.dir.write_config(&c);
        support::signal(gate.pid(), "HUP");
        let reloaded = wait_until(Duration::from_secs(3), || gate.stderr().contains("configuration reloaded"));
        assert!(reloaded, "no reload logged");
        // Answered if it started before the reload, refused if after: either way its child goes.
        opening.join().expect("the call");
        (keep, late)
    });
    assert_eq!(client.tool_text("keep__echo", json!({"text": "kept"})), "kept");
    assert!(
        gate.reaped_within(late, Duration::from_secs(3)).is_some(),
        "the child of the removed server runs on: {:?}",
        proc_info(late)
    );
    let live: Vec<u32> = gate.wait_children(1).iter().map(|c| c.pid).collect();
    assert_eq!(live, vec![keep.pid]);
    assert_processes(&gate.status(), 1);
}

/// A grandchild that leaves its stdio child's process group and session
/// (`setsid`) and holds the child's stdout is out of reach of every signal
/// to the group: it outlived its session's close and mcpgate's SIGTERM.
/// mcpgate is the subreaper of what its children start: such a process is
/// stopped and reaped with its child, and whatever is left at mcpgate's exit.
#[test]
fn a_grandchild_that_left_its_group_goes_with_its_session_and_with_mcpgate() {
    let servers = json!({"a": stdio_server("a", &["--spawn-setsid-grandchild"])});
    let mut gate = StdioGate::start(&config_with(servers, json!({"stdio_grace_ms": 200})));
    let first = gate.session_using(&["a"]);
    let kid = gate.kid("a", 1);
    let grandchild = kid.grandchild();
    let g = proc_info(grandchild).expect("the grandchild runs");
    assert_ne!(g.pgid, kid.pid, "it left its parent's group: {g:?}");
    assert_eq!(first.delete(), 200);
    let gone = wait_until(Duration::from_secs(5), || proc_info(grandchild).is_none());
    let left = proc_info(grandchild);
    if let Some(p) = &left {
        let _ = std::process::Command::new("kill").args(["-9", &p.pid.to_string()]).status();
    }
    assert!(gone, "the grandchild outlived its session's close (or was left a zombie): {left:?}");

    let _second = gate.session_using(&["a"]);
    let grandchild = gate.kid("a", 2).grandchild();
    assert!(proc_info(grandchild).is_some_and(|p| p.name == "sleep"), "the second grandchild runs");
    let exit = gate.terminate(Duration::from_secs(10));
    assert_eq!(exit.and_then(|s| s.code()), Some(0), "{exit:?}");
    let gone = wait_until(Duration::from_secs(5), || is_dead(grandchild, "sleep"));
    let left = proc_info(grandchild);
    if let Some(p) = left.as_ref().filter(|p| !p.is_zombie()) {
        let _ = std::process::Command::new("kill").args(["-9", &p.pid.to_string()]).status();
    }
    assert!(gone, "the grandchild outlived mcpgate's SIGTERM: {left:?}");
}

/// Whoever reads a shared child's stdout (its reader thread, or a call reading its own answer
/// there) reads every session's answers: calls from five sessions at once, each its own text
/// back, while a sixth session's slow call is running on the same child; none waits for it.
#[test]
fn calls_from_many_sessions_on_one_child_each_get_their_answer_while_a_slow_one_runs() {
    let shared = json!({"command": fixture_bin(), "args": support::stdio_args("sh", &[]), "sharing": "shared"});
    let gate = StdioGate::start(&config(json!({"sh": shared})));
    let mut slow = gate.client();
    slow.initialize();
    support::use_servers(&slow, &["sh"]);
    let clients: Vec<_> = (0..5)
        .map(|_| {
            let mut c = gate.client();
            c.initialize();
            c
        })
        .collect();
    assert_eq!(gate.wait_children(1).len(), 1, "one child for every session");
    std::thread::scope(|s| {
        let held = s.spawn(move || {
            let reply = slow.request("tools/call", json!({"name": "sh__slow", "arguments": {"ms": 4000}}));
            (reply, Instant::now())
        });
        // The slow call is running (or about to): the others go on meanwhile.
        std::thread::sleep(Duration::from_millis(200));
        let fast: Vec<_> = clients
            .into_iter()
            .enumerate()
            .map(|(i, mut client)| {
                s.spawn(move || {
                    for n in 0..40 {
                        let text = format!("session {i} call {n}");
                        assert_eq!(client.tool_text("sh__echo", json!({ "text": text })), text);
                    }
                    Instant::now()
                })
            })
            .collect();
        let fast_done: Vec<Instant> = fast.into_iter().map(|t| t.join().expect("a session's calls")).collect();
        let (reply, slow_done) = held.join().expect("the slow call");
        assert_eq!(reply.result()["content"][0]["text"], "done", "{reply:?}");
        assert!(fast_done.iter().all(|done| *done < slow_done), "the echo calls waited for the slow call to end");
    });
    assert_processes(&gate.status(), 1);
}
