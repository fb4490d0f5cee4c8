//! Resource exhaustion, counted at the downstream server: mcpgate out of
//! file descriptors, mcpgate out of threads, and the threads it starts on
//! its own. In each, new work is refused with an answer, the process lives
//! (the release profile has `panic = "abort"`, so one panic on an OS call
//! ends every session), and every downstream session it opened is DELETEd
//! exactly once. The debug build these tests run unwinds instead of
//! aborting, so a panic is also caught in mcpgate's log.

mod support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{
    Answer, Fixture, Gate, NOBODY, RawReply, config, exchange, healthz_within, http_request, initialize_params,
    mcp_post, require_root, shown, threads_of_uid, wait_until,
};

/// How long a request may go without any answer before it counts as left hanging.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------
// Requests on raw connections, one per request (`Connection: close`), that
// report what came back instead of panicking: the gate may refuse, close
// or die, and each of those is a finding.
// ---------------------------------------------------------------------------

fn post(addr: SocketAddr, session: Option<&str>, message: &Value) -> Result<Answer, String> {
    exchange(addr, &mcp_post(addr, session, &message.to_string(), true), ANSWER_WITHIN)
}

fn delete(addr: SocketAddr, session: &str) -> Result<Answer, String> {
    let host = addr.to_string();
    let headers = [("Host", host.as_str()), ("Connection", "close"), ("Mcp-Session-Id", session)];
    exchange(addr, &http_request("DELETE", "/mcp", &headers, b""), ANSWER_WITHIN)
}

/// What a connection that ended without a response head shows.
fn unanswered(answer: &Answer) -> String {
    format!("connection closed unanswered {}", shown(&answer.bytes))
}

/// What a connection still open without a whole response shows.
fn hung(answer: &Answer) -> String {
    format!("no answer within {ANSWER_WITHIN:?}: {}", shown(&answer.bytes))
}

/// The JSON-RPC message of a reply: the JSON body, or the last message of an SSE body; else the body as text.
fn message_of(reply: &RawReply) -> Value {
    reply.messages().pop().unwrap_or_else(|| Value::String(reply.body.clone()))
}

/// The error message of a reply: a JSON-RPC error's, or a plain-text body.
fn error_text(reply: &RawReply) -> String {
    match message_of(reply) {
        Value::String(text) => text,
        message => message["error"]["message"].as_str().unwrap_or_default().to_string(),
    }
}

/// What became of one `initialize`.
#[derive(Debug)]
enum Init {
    Created(String),
    /// Refused, in a way the test allows: how.
    Refused(String),
    /// Anything else: what.
    Wrong(String),
}

fn initialize(addr: SocketAddr, allowed_refusal: impl Fn(&RawReply) -> bool) -> Init {
    let message = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize_params() });
    let answer = match post(addr, None, &message) {
        Ok(answer) => answer,
        Err(e) => return Init::Wrong(format!("cannot connect: {e}")),
    };
    match answer.reply_once_ended() {
        Some(reply) if reply.status == 200 && message_of(&reply).get("result").is_some() => {
            match reply.header("mcp-session-id") {
                Some(session) => Init::Created(session.to_string()),
                None => Init::Wrong(format!("200 without Mcp-Session-Id: {}", shown(&reply.body))),
            }
        }
        Some(reply) if allowed_refusal(&reply) => {
            Init::Refused(format!("{} {}", reply.status, shown(error_text(&reply))))
        }
        Some(reply) => Init::Wrong(format!(
            "{} (Retry-After {:?}): {}",
            reply.status,
            reply.header("retry-after"),
            shown(error_text(&reply))
        )),
        None if answer.ended() => Init::Refused(unanswered(&answer)),
        None => Init::Wrong(hung(&answer)),
    }
}

/// What became of one `alpha__echo` call (or a DELETE).
#[derive(Debug)]
enum Work {
    Done,
    /// Refused with an answer.
    Refused(String),
    /// The connection closed without an answer: refused before mcpgate read
    /// it, or dropped after (a panic, in the debug build, looks like this).
    Unanswered(String),
    Wrong(String),
}

/// A refusal of work on a live session: a 503, or a JSON-RPC error naming the server.
fn refuses_work(reply: &RawReply) -> bool {
    let message = message_of(reply);
    let named = message["error"]["message"].as_str().is_some_and(|m| m.contains("alpha"));
    reply.status == 503 || (reply.status == 200 && named)
}

fn echo(addr: SocketAddr, session: &str, text: &str) -> Work {
    let message = json!({
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": { "name": "alpha__echo", "arguments": { "text": text } },
    });
    let answer = match post(addr, Some(session), &message) {
        Ok(answer) => answer,
        Err(e) => return Work::Wrong(format!("cannot connect: {e}")),
    };
    match answer.reply_once_ended() {
        Some(reply) if reply.status == 200 && message_of(&reply)["result"]["content"][0]["text"] == text => Work::Done,
        Some(reply) if refuses_work(&reply) => Work::Refused(format!("{} {}", reply.status, shown(error_text(&reply)))),
        Some(reply) => Work::Wrong(format!("{}: {}", reply.status, shown(&reply.body))),
        None if answer.ended() => Work::Unanswered(unanswered(&answer)),
        None => Work::Wrong(hung(&answer)),
    }
}

fn end_session(addr: SocketAddr, session: &str) -> Work {
    let answer = match delete(addr, session) {
        Ok(answer) => answer,
        Err(e) => return Work::Wrong(format!("cannot connect: {e}")),
    };
    match answer.reply_once_ended() {
        Some(reply) if matches!(reply.status, 200 | 204) => Work::Done,
        Some(reply) if reply.status == 503 => Work::Refused(format!("503 {}", shown(error_text(&reply)))),
        Some(reply) => Work::Wrong(format!("{}: {}", reply.status, shown(&reply.body))),
        None if answer.ended() => Work::Unanswered(unanswered(&answer)),
        None => Work::Wrong(hung(&answer)),
    }
}

/// `alpha__echo` on a session that was created, retried while it is refused
/// (at most 10 times in about 3 s): `None` once it works, else the last outcome.
fn still_works(addr: SocketAddr, session: &str) -> Option<String> {
    let mut last = String::new();
    for _ in 0..10 {
        match echo(addr, session, "still here") {
            Work::Done => return None,
            Work::Refused(how) | Work::Unanswered(how) => last = format!("refused: {how}"),
            Work::Wrong(what) => return Some(what),
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    Some(last)
}

/// The lines of mcpgate's log that report a panic (a panic aborts the release build).
fn panics(gate: &Gate) -> Vec<String> {
    gate.stderr().lines().filter(|l| l.contains("panicked")).map(shown).take(5).collect()
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// SIGTERM and the exit status, or why there is none.
fn stop(gate: &mut Gate) -> Result<std::process::ExitStatus, String> {
    if !gate.is_running() {
        return Err("mcpgate was already dead".into());
    }
    gate.terminate(Duration::from_secs(15)).ok_or_else(|| "mcpgate did not exit within 15 s of SIGTERM".into())
}

/// The fixture's counts once its DELETEs have settled (at most 5 s):
/// (initialize, delete, delete_unknown, live_sessions).
fn fixture_counts(fixture: &Fixture) -> (u64, u64, u64, u64) {
    let read = || {
        let s = fixture.stats();
        let n = |k: &str| s[k].as_u64().unwrap_or(u64::MAX);
        (n("initialize"), n("delete"), n("delete_unknown"), n("live_sessions"))
    };
    wait_until(Duration::from_secs(5), || {
        let (init, del, _, live) = read();
        init == del && live == 0
    });
    read()
}

/// Closes one idle connection and waits (at most 1 s) until process `pid` has closed its end.
fn release_one(idle: &mut Vec<TcpStream>, pid: u32) {
    let Some(stream) = idle.pop() else { return };
    let before = open_fds(pid).unwrap_or(0);
    drop(stream);
    wait_until(Duration::from_secs(1), || open_fds(pid).is_none_or(|n| n < before));
}

/// Descriptors open in process `pid`.
fn open_fds(pid: u32) -> Option<usize> {
    std::fs::read_dir(format!("/proc/{pid}/fd")).ok().map(|d| d.count())
}

fn have(tool: &str) -> bool {
    Command::new(tool).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
}

// ---------------------------------------------------------------------------
// 1. File descriptors
// ---------------------------------------------------------------------------

/// An audit saw, at `ulimit -n 1024` and ~700 sessions, `initialize` get
/// 500 "cannot read the OS random source", then the process abort with
/// 1,016 downstream sessions never DELETEd. Here descriptors run out at 300:
/// idle client connections take all but the last 40, sessions the rest, and
/// after each refusal one idle connection goes, so that the next initialize
/// is accepted and meets the shortage inside mcpgate, not at accept().
#[test]
#[ignore = "needs root"]
fn running_out_of_file_descriptors_refuses_new_work_and_closes_every_session_exactly_once() {
    require_root("it sets mcpgate's descriptor limit with prlimit");
    assert!(have("prlimit"), "this test needs prlimit (util-linux)");
    const FDS: u32 = 300;
    const IDLE_MAX: usize = 300;
    const SPARE: usize = 40;
    let fixture = Fixture::start("alpha", &[]);
    let mut c = config(&[("alpha", fixture.url())]);
    // Idle connections stay open (and hold a descriptor) for the whole test.
    c["client_idle_timeout_secs"] = json!(60);
    let mut gate = Gate::start_with(&c, |mcpgate| {
        let mut wrapped = Command::new("prlimit");
        wrapped.arg(format!("--nofile={FDS}:{FDS}"));
        wrapped.arg(mcpgate.get_program()).args(mcpgate.get_args());
        wrapped
    });
    let addr = gate.addr;
    // A refused initialize says 503, when to retry, and why.
    let refusal = |reply: &RawReply| {
        let why = error_text(reply).to_ascii_lowercase();
        reply.status == 503
            && reply.header("retry-after").is_some()
            && (why.contains("descriptor") || why.contains("open files"))
    };

    let mut idle: Vec<TcpStream> = Vec::new();
    let (mut sessions, mut refused, mut wrong) = (Vec::new(), Vec::new(), Vec::new());
    let (mut echoed, mut echo_refused) = (0, 0);
    let mut attempts = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut died = false;
    while attempts < 400 && refused.len() + wrong.len() < 5 && Instant::now() < deadline {
        // Three more idle connections per session, up to 300, while mcpgate
        // has more than SPARE descriptors free.
        for _ in 0..3 {
            if idle.len() < IDLE_MAX
                && open_fds(gate.pid()).is_some_and(|n| n + SPARE < FDS as usize)
                && let Ok(stream) = TcpStream::connect_timeout(&addr, Duration::from_secs(1))
            {
                idle.push(stream);
            }
        }
        attempts += 1;
        let outcome = initialize(addr, refusal);
        let created = matches!(outcome, Init::Created(_));
        match outcome {
            Init::Created(session) => {
                match echo(addr, &session, &format!("n{attempts}")) {
                    Work::Done => echoed += 1,
                    Work::Refused(_) | Work::Unanswered(_) => echo_refused += 1,
                    Work::Wrong(what) => wrong.push(format!("attempt {attempts}: alpha__echo: {what}")),
                }
                sessions.push(session);
            }
            Init::Refused(how) => refused.push(format!("attempt {attempts}: {how}")),
            Init::Wrong(what) => wrong.push(format!("attempt {attempts}: initialize: {what}")),
        }
        if !created {
            // One descriptor back, so that the next initialize is accepted and
            // meets the shortage inside mcpgate rather than at accept().
            release_one(&mut idle, gate.pid());
        }
        if !gate.is_running() {
            died = true;
            break;
        }
    }
    let open_idle = idle.len();
    drop(idle);

    // With the idle connections gone, every session works and /healthz answers.
    let healthz = !died && wait_until(Duration::from_secs(10), || healthz_within(addr, ANSWER_WITHIN).is_ok());
    let mut broken = Vec::new();
    if !died {
        for session in &sessions {
            if let Some(what) = still_works(addr, session) {
                broken.push(format!("{}: {what}", &session[..8.min(session.len())]));
            }
        }
    }
    died |= !gate.is_running();
    let panicked = panics(&gate);
    let stderr = gate.stderr();
    let exit = stop(&mut gate);
    let (init, del, del_unknown, live) = fixture_counts(&fixture);
    println!(
        "nofile {FDS}: {attempts} attempts with up to {open_idle} idle connections: {} sessions created \
         ({echoed} echoed, {echo_refused} echo refused), {} initialize refused, {} wrong answers; died: {died}; \
         healthz after: {healthz}; {} sessions broken after; exit: {exit:?}; fixture: initialize {init}, \
         delete {del}, delete_unknown {del_unknown}, live {live}",
        sessions.len(),
        refused.len(),
        wrong.len(),
        broken.len(),
    );
    for line in refused.iter().take(3).chain(wrong.iter().take(5)).chain(broken.iter().take(3)) {
        println!("  {line}");
    }

    assert!(!died, "mcpgate died (fixture: initialize {init}, delete {del})\n{}", tail(&stderr));
    assert!(panicked.is_empty(), "a thread panicked (the release build aborts there): {panicked:#?}");
    assert!(
        wrong.is_empty(),
        "{} answers other than work done or a refusal with 503 + Retry-After naming descriptors, first: {:#?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
    assert!(!refused.is_empty(), "descriptors never ran out in {attempts} attempts: the test proves nothing");
    let first = &broken[..broken.len().min(5)];
    assert!(broken.is_empty(), "{} sessions no longer work once descriptors are back, first: {first:#?}", broken.len());
    assert!(healthz, "/healthz does not answer once the idle connections are closed");
    let exit = exit.unwrap_or_else(|e| panic!("{e}"));
    assert!(exit.success(), "mcpgate exited with {exit} after SIGTERM\n{}", tail(&gate.stderr()));
    assert_eq!((del, del_unknown, live), (init, 0, 0), "(delete, delete_unknown, live) at the fixture");
}

// ---------------------------------------------------------------------------
// 2. Threads
// ---------------------------------------------------------------------------

/// An audit saw, as a user with `--nproc 200`, a thread spawn inside the
/// HTTP client (ureq's resolver) panic and abort the process, leaving 450
/// of 600 downstream sessions never DELETEd. Here there is room for 20
/// threads more than at rest; each session keeps a reader, a few end.
#[test]
#[ignore = "needs root"]
fn threads_that_cannot_be_started_refuse_new_work_and_close_every_session_exactly_once() {
    require_root("it runs mcpgate as nobody under a thread limit");
    assert!(have("prlimit") && have("setpriv"), "this test needs prlimit and setpriv (util-linux)");
    const ROOM: usize = 20;
    let fixture = Fixture::start("alpha", &[]);
    let mut c = config(&[("alpha", fixture.url())]);
    c["calls_per_server"] = json!(2);
    let at_rest = {
        let probe = Gate::start(&c);
        let mut last = 0;
        // Settled when two readings 200 ms apart agree.
        wait_until(Duration::from_secs(5), || {
            std::thread::sleep(Duration::from_millis(200));
            let now = probe.threads();
            std::mem::replace(&mut last, now) == now
        });
        last
    };
    assert!(at_rest >= 4, "main, accept, reaper, signal: {at_rest}");
    let limit = at_rest + ROOM + threads_of_uid(NOBODY);
    let mut gate = Gate::start_as_nobody(&c, limit);
    let addr = gate.addr;
    assert!(gate.settles_to(at_rest), "limited gate at rest: {} threads, expected {at_rest}", gate.threads());

    let mut live: Vec<String> = Vec::new();
    let (mut created, mut refused, mut wrong) = (0, Vec::new(), Vec::new());
    let (mut echoed, mut echo_refused) = (0, 0);
    let (mut deleted, mut delete_refused, mut delete_unanswered) = (0, 0, 0);
    let (mut attempts, mut most_threads) = (0, 0);
    let mut died = false;
    let deadline = Instant::now() + Duration::from_secs(25);
    while attempts < 60 && Instant::now() < deadline {
        attempts += 1;
        match initialize(addr, refuses_work) {
            Init::Created(session) => {
                created += 1;
                match echo(addr, &session, &format!("n{attempts}")) {
                    Work::Done => echoed += 1,
                    Work::Refused(_) | Work::Unanswered(_) => echo_refused += 1,
                    Work::Wrong(what) => wrong.push(format!("attempt {attempts}: alpha__echo: {what}")),
                }
                live.push(session);
            }
            Init::Refused(how) => refused.push(format!("attempt {attempts}: {how}")),
            Init::Wrong(what) => wrong.push(format!("attempt {attempts}: initialize: {what}")),
        }
        // Every fifth attempt, the oldest session ends.
        if attempts % 5 == 0 && !live.is_empty() {
            match end_session(addr, &live[0]) {
                Work::Done => {
                    deleted += 1;
                    live.remove(0);
                }
                Work::Refused(_) => delete_refused += 1,
                // Whether it ended is not known: the fixture's counts at the end tell.
                Work::Unanswered(_) => {
                    delete_unanswered += 1;
                    live.remove(0);
                }
                Work::Wrong(what) => wrong.push(format!("attempt {attempts}: DELETE: {what}")),
            }
        }
        most_threads = most_threads.max(gate.threads());
        if !gate.is_running() {
            died = true;
            break;
        }
    }

    // The sessions that were created (and not ended) still work.
    let mut broken = Vec::new();
    if !died {
        for session in &live {
            if let Some(what) = still_works(addr, session) {
                broken.push(format!("{}: {what}", &session[..8.min(session.len())]));
            }
        }
    }
    died |= !gate.is_running();
    let panicked = panics(&gate);
    let stderr = gate.stderr();
    let exit = stop(&mut gate);
    let (init, del, del_unknown, fixture_live) = fixture_counts(&fixture);
    println!(
        "nproc {limit} ({at_rest} at rest, room for {ROOM}): {attempts} attempts: {created} sessions created \
         ({echoed} echoed, {echo_refused} echo refused), {} initialize refused, {deleted} DELETEd \
         ({delete_refused} refused, {delete_unanswered} unanswered), {} wrong answers; at most {most_threads} \
         threads; died: {died}; {} sessions broken after; exit: {exit:?}; fixture: initialize {init}, \
         delete {del}, delete_unknown {del_unknown}, live {fixture_live}",
        refused.len(),
        wrong.len(),
        broken.len(),
    );
    for line in refused.iter().take(3).chain(wrong.iter().take(5)).chain(broken.iter().take(3)) {
        println!("  {line}");
    }

    assert!(!died, "mcpgate died (fixture: initialize {init}, delete {del})\n{}", tail(&stderr));
    assert!(panicked.is_empty(), "a thread panicked (the release build aborts there): {panicked:#?}");
    assert!(
        wrong.is_empty(),
        "{} answers other than work done or refused with 503 / an error naming alpha, first: {:#?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
    let ran_out = most_threads + 1 >= at_rest + ROOM || !refused.is_empty() || echo_refused > 0;
    assert!(ran_out, "threads never ran out in {attempts} attempts (at most {most_threads}): the test proves nothing");
    assert!(
        broken.is_empty(),
        "{} sessions no longer work, first: {:#?}",
        broken.len(),
        &broken[..broken.len().min(5)]
    );
    let exit = exit.unwrap_or_else(|e| panic!("{e}"));
    assert!(exit.success(), "mcpgate exited with {exit} after SIGTERM\n{}", tail(&gate.stderr()));
    assert_eq!((del, del_unknown, fixture_live), (init, 0, 0), "(delete, delete_unknown, live) at the fixture");
}

// ---------------------------------------------------------------------------
// 3. Unnamed threads
// ---------------------------------------------------------------------------

/// Thread names of `pid` now, from `/proc/<pid>/task/*/comm`.
fn thread_names(pid: u32) -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .map(|c| c.trim().into())
        .collect()
}

/// Whether every thread of `pid` is traced by `tracer`.
fn all_traced(pid: u32, tracer: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    tasks.flatten().all(|t| {
        let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        status.lines().any(|l| l.strip_prefix("TracerPid:").map(str::trim) == Some(&tracer.to_string()))
    })
}

/// A thread that mcpgate started, as strace saw it.
#[derive(Debug)]
struct Started {
    tid: u32,
    parent: u32,
    stack_size: String,
}

/// From `strace -f -e trace=clone,clone3,prctl` output: the threads started
/// and the names each thread gave itself (`prctl(PR_SET_NAME, ...)`).
fn parse_strace(text: &str) -> (Vec<Started>, HashMap<u32, String>) {
    let (mut started, mut named, mut pending) = (Vec::new(), HashMap::new(), HashMap::<u32, String>::new());
    for line in text.lines() {
        let Some((tid, call)) = line.split_once(' ') else { continue };
        let Ok(tid) = tid.parse::<u32>() else { continue };
        let call = call.trim_start();
        if let Some(rest) = call.strip_prefix("prctl(PR_SET_NAME, \"") {
            named.insert(tid, rest.split('"').next().unwrap_or("").to_string());
            continue;
        }
        let is_clone = call.starts_with("clone(") || call.starts_with("clone3(");
        let resumed = call.starts_with("<... clone");
        if is_clone && call.ends_with("<unfinished ...>") {
            pending.insert(tid, call.to_string());
            continue;
        }
        if !(is_clone || resumed) {
            continue;
        }
        let whole = if resumed { format!("{} {call}", pending.remove(&tid).unwrap_or_default()) } else { call.into() };
        let Some(child) = whole.rsplit_once(") = ").and_then(|(_, r)| r.trim().parse::<u32>().ok()) else { continue };
        let stack_size = whole
            .split("stack_size=")
            .nth(1)
            .map(|s| s.split([',', '}']).next().unwrap_or("").to_string())
            .unwrap_or_else(|| "?".into());
        started.push(Started { tid: child, parent: tid, stack_size });
    }
    (started, named)
}

/// An audit saw ureq's resolver start an unnamed thread with the default
/// 2 MiB stack for each lookup, even of 127.0.0.1, and panic when it
/// cannot; such a thread is outside every limit mcpgate keeps.
/// Sampling `comm` alone cannot show it: it lives for microseconds and
/// inherits its creator's name (`mcpgate-conn`). So mcpgate is also traced
/// with strace (when there is one), and every thread started must name itself.
#[test]
fn opening_and_closing_sessions_on_127_0_0_1_starts_no_unnamed_threads() {
    let fixture = Fixture::start("alpha", &[]);
    let gate = Gate::start(&config(&[("alpha", fixture.url())]));
    let pid = gate.pid();

    let mut tracer = None;
    let trace_file = gate.dir.0.join("strace.txt");
    if have("strace") {
        let child = Command::new("strace")
            .args(["-f", "-qq", "-s", "64", "-e", "trace=clone,clone3,prctl", "-o"])
            .arg(&trace_file)
            .args(["-p", &pid.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start strace");
        let attached = wait_until(Duration::from_secs(5), || all_traced(pid, child.id()));
        if attached {
            tracer = Some(child);
        } else {
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
            println!("strace could not attach: only the sampled names are checked");
        }
    } else {
        println!("no strace: only the sampled names are checked");
    }

    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut seen = BTreeMap::<String, usize>::new();
            let mut samples = 0;
            while !done.load(Ordering::Acquire) && samples < 5_000 {
                for name in thread_names(pid) {
                    *seen.entry(name).or_default() += 1;
                }
                samples += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            (seen, samples)
        })
    };
    for round in 0..20 {
        let mut client = gate.client();
        client.initialize();
        assert_eq!(client.tool_text("alpha__echo", json!({"text": format!("r{round}")})), format!("r{round}"));
        assert_eq!(client.delete(), 200, "round {round}: DELETE");
    }
    std::thread::sleep(Duration::from_millis(200));
    done.store(true, Ordering::Release);
    let (seen, samples) = sampler.join().expect("sampler thread");

    let traced = tracer.map(|mut child| {
        support::signal(child.id(), "TERM");
        let _ = support::wait_exit(&mut child, Duration::from_secs(5));
        parse_strace(&std::fs::read_to_string(&trace_file).unwrap_or_default())
    });
    let names_now: BTreeSet<String> = thread_names(pid).into_iter().collect();
    println!("{samples} samples of {pid}'s threads saw {seen:?}");
    let mut unnamed = Vec::new();
    if let Some((started, named)) = &traced {
        let name_of = |tid: u32| {
            named.get(&tid).cloned().unwrap_or_else(|| {
                std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
                    .map(|c| c.trim().into())
                    .unwrap_or("?".into())
            })
        };
        for thread in started {
            if !named.get(&thread.tid).is_some_and(|n| n.starts_with("mcpgate-")) {
                unnamed.push(format!(
                    "thread {} (stack_size {}) started by {} ({}), never named",
                    thread.tid,
                    thread.stack_size,
                    thread.parent,
                    name_of(thread.parent)
                ));
            }
        }
        let mut by_name = BTreeMap::<String, usize>::new();
        for name in named.values() {
            *by_name.entry(name.clone()).or_default() += 1;
        }
        println!("strace: {} threads started, named {by_name:?}; {} never named", started.len(), unnamed.len());
        for line in unnamed.iter().take(3) {
            println!("  {line}");
        }
    }

    let panicked = panics(&gate);
    assert!(panicked.is_empty(), "a thread panicked: {panicked:#?}");
    let foreign: Vec<&String> =
        seen.keys().chain(names_now.iter()).filter(|n| *n != "mcpgate" && !n.starts_with("mcpgate-")).collect();
    assert!(foreign.is_empty(), "threads not named by mcpgate: {foreign:?} (all seen: {seen:?})");
    let first: Vec<_> = unnamed.iter().take(5).collect();
    assert!(unnamed.is_empty(), "{} threads started that never named themselves, first: {first:#?}", unnamed.len());
}
