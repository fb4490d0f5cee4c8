//! The fixture's stdio mode (`mcp-fixture --stdio`) and its fault flags, checked directly over
//! the child's pipes (no mcpgate in between), so that the gateway's stdio tests stand on a
//! server known to speak the stdio transport and to misbehave exactly as asked.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::get_json;

/// Longest wait for a message the fixture should send.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// A `mcp-fixture --stdio` child and a line-based MCP client on its pipes. Dropping it kills
/// the child and waits for it, and for the threads that read its pipes.
struct StdioFixture {
    child: Child,
    stdin: Option<ChildStdin>,
    /// Stdout's lines, each parsed (or the line itself if it is not JSON, which is a failure).
    stdout: Receiver<Result<Value, String>>,
    stderr: Receiver<String>,
    readers: Vec<JoinHandle<()>>,
    next_id: u64,
}

impl StdioFixture {
    fn start(args: &[&str]) -> StdioFixture {
        let mut child = Command::new(support::fixture_bin())
            .args(["--stdio", "--name", "piped"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start mcp-fixture --stdio");
        let stdin = child.stdin.take();
        let (stdout_lines, stdout) = mpsc::channel();
        let (stderr_lines, stderr) = mpsc::channel();
        let out = child.stdout.take().expect("stdout is piped");
        let err = child.stderr.take().expect("stderr is piped");
        // Both end at their pipe's EOF, i.e. when the child is gone.
        let readers = vec![
            thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    let _ = stdout_lines.send(serde_json::from_str(&line).map_err(|_| line));
                }
            }),
            thread::spawn(move || {
                for line in BufReader::new(err).lines().map_while(Result::ok) {
                    let _ = stderr_lines.send(line);
                }
            }),
        ];
        StdioFixture { child, stdin, stdout, stderr, readers, next_id: 0 }
    }

    /// Starts it and initializes its session, declaring `capabilities`; the initialize result.
    fn initialized(args: &[&str], capabilities: Value) -> (StdioFixture, Value) {
        let mut fixture = StdioFixture::start(args);
        let params = json!({
            "protocolVersion": "2025-11-25",
            "capabilities": capabilities,
            "clientInfo": {"name": "fixture_stdio", "version": "1"},
        });
        let result = fixture.call("initialize", params)["result"].clone();
        fixture.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        (fixture, result)
    }

    /// Writes one message as one line.
    fn send(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        writeln!(stdin, "{message}").and_then(|()| stdin.flush()).expect("write to the fixture's stdin");
    }

    /// Sends a request; its id.
    fn request(&mut self, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// The next message on stdout, if one comes within `timeout`.
    fn next(&self, timeout: Duration) -> Option<Value> {
        match self.stdout.recv_timeout(timeout) {
            Ok(Ok(message)) => Some(message),
            Ok(Err(line)) => panic!("stdout carried a line that is not JSON: {line:?}"),
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => None,
        }
    }

    /// The response to request `id`, and the messages that came before it.
    fn response_to(&self, id: u64) -> (Vec<Value>, Value) {
        let deadline = Instant::now() + ANSWER_TIMEOUT;
        let mut before = Vec::new();
        // Bounded by the deadline: each turn waits for what is left of it.
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let message = self.next(left).unwrap_or_else(|| panic!("no response to {id} within 5 s; got {before:?}"));
            if message["id"] == id && message.get("method").is_none() {
                return (before, message);
            }
            before.push(message);
        }
    }

    /// Sends a request and returns its response.
    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.request(method, params);
        self.response_to(id).1
    }

    /// Calls a tool and returns the text of its result.
    fn call_tool(&mut self, name: &str, arguments: Value) -> String {
        let response = self.call("tools/call", json!({"name": name, "arguments": arguments}));
        response["result"]["content"][0]["text"].as_str().unwrap_or_else(|| panic!("{response}")).to_owned()
    }

    fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// The exit status, if the child exits within `timeout`.
    fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        // Bounded by the deadline.
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// The stderr lines that come within `timeout` (all of them, once the child has exited).
    fn stderr_lines(&self, timeout: Duration) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        let mut lines = Vec::new();
        while let Ok(line) = self.stderr.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            lines.push(line);
        }
        lines
    }

    /// The `--stats-listen` address, from the `listening on` line on stderr.
    fn stats_url(&self) -> String {
        let line = self.stderr.recv_timeout(ANSWER_TIMEOUT).expect("a `listening on` line on stderr within 5 s");
        let address = line.strip_prefix("listening on ").unwrap_or_else(|| panic!("unexpected first line: {line:?}"));
        format!("http://{address}/stats")
    }
}

impl Drop for StdioFixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
    }
}

/// A process this test did not start but must not leave behind: killed (SIGKILL) on drop.
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // `kill` is waited for by `status`; the fixture, its parent, reaps the target.
        let _ = Command::new("kill").arg("-KILL").arg(self.0.to_string()).status();
    }
}

/// `(name, state, parent pid)` of a live process, from /proc.
fn process_info(pid: u64) -> Option<(String, String, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, tail) = stat.rsplit_once(')')?;
    let name = head.split_once('(')?.1.to_owned();
    let mut fields = tail.split_whitespace();
    let state = fields.next()?.to_owned();
    let parent = fields.next()?.parse().ok()?;
    Some((name, state, parent))
}

#[test]
fn initialize_declares_the_capabilities_and_then_tools_list_and_calls() {
    let (mut fixture, init) = StdioFixture::initialized(&[], json!({}));
    assert_eq!(init["protocolVersion"], "2025-11-25", "{init}");
    assert_eq!(init["serverInfo"]["name"], "piped", "{init}");
    for capability in ["tools", "prompts", "resources", "logging", "completions"] {
        assert!(init["capabilities"][capability].is_object(), "no {capability}: {init}");
    }

    let tools = fixture.call("tools/list", json!({}));
    let names: Vec<&str> =
        tools["result"]["tools"].as_array().into_iter().flatten().filter_map(|t| t["name"].as_str()).collect();
    for name in ["echo", "slow", "sample", "cancellable"] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    assert_eq!(fixture.call_tool("echo", json!({"text": "over a pipe"})), "over a pipe");
    assert!(fixture.call_tool("whoami", json!({})).starts_with("piped:"));
}

#[test]
fn requests_before_initialize_are_refused_except_ping() {
    let mut fixture = StdioFixture::start(&[]);
    let ping = fixture.call("ping", json!({}));
    assert_eq!(ping["result"], json!({}), "{ping}");
    let early = fixture.call("tools/list", json!({}));
    assert_eq!(early["error"]["code"], -32600, "{early}");
}

#[test]
fn slow_with_a_progress_token_sends_progress_then_the_result() {
    let (mut fixture, _) = StdioFixture::initialized(&[], json!({}));
    let params = json!({"name": "slow", "arguments": {"ms": 300, "steps": 3}, "_meta": {"progressToken": "p1"}});
    let id = fixture.request("tools/call", params);
    let (before, response) = fixture.response_to(id);
    let progress: Vec<&Value> = before.iter().filter(|m| m["method"] == "notifications/progress").collect();
    assert_eq!(progress.len(), 3, "{before:?}");
    assert!(progress.iter().all(|m| m["params"]["progressToken"] == "p1"), "{progress:?}");
    assert_eq!(progress[2]["params"]["progress"], 3);
    assert_eq!(response["result"]["content"][0]["text"], "done", "{response}");
}

#[test]
fn sample_asks_the_client_on_stdout_and_returns_its_answer() {
    let (mut fixture, _) = StdioFixture::initialized(&[], json!({"sampling": {}}));
    let id = fixture.request("tools/call", json!({"name": "sample", "arguments": {"prompt": "a haiku"}}));
    let asked = fixture.next(ANSWER_TIMEOUT).expect("a sampling request within 5 s");
    assert_eq!(asked["method"], "sampling/createMessage", "{asked}");
    assert_eq!(asked["params"]["messages"][0]["content"]["text"], "a haiku", "{asked}");
    let answer = json!({"role": "assistant", "content": {"type": "text", "text": "pipes carry lines"}, "model": "m"});
    fixture.send(&json!({"jsonrpc": "2.0", "id": asked["id"], "result": answer}));
    let (_, response) = fixture.response_to(id);
    assert_eq!(response["result"]["content"][0]["text"], "sampled: pipes carry lines", "{response}");
}

#[test]
fn a_ping_is_answered_while_a_slow_call_runs() {
    let (mut fixture, _) = StdioFixture::initialized(&[], json!({}));
    let slow = fixture.request("tools/call", json!({"name": "slow", "arguments": {"ms": 2000}}));
    let sent = Instant::now();
    let ping = fixture.request("ping", json!({}));
    let (_, pong) = fixture.response_to(ping);
    assert_eq!(pong["result"], json!({}), "{pong}");
    assert!(sent.elapsed() < Duration::from_secs(1), "the ping waited {:?} behind the slow call", sent.elapsed());
    let (_, done) = fixture.response_to(slow);
    assert_eq!(done["result"]["content"][0]["text"], "done", "{done}");
}

#[test]
fn a_cancelled_call_ends_without_a_response() {
    let (mut fixture, _) = StdioFixture::initialized(&["--stats-listen", "127.0.0.1:0"], json!({}));
    let stats = fixture.stats_url();
    let id = fixture.request("tools/call", json!({"name": "cancellable", "arguments": {"ms": 10_000}}));
    let running = |stats: &Value| stats["requests_running"].as_u64();
    assert!(support::wait_until(ANSWER_TIMEOUT, || running(&get_json(&stats)) == Some(1)), "the call never ran");
    let cancel = json!({"requestId": id, "reason": "changed my mind"});
    fixture.send(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel}));
    assert!(support::wait_until(ANSWER_TIMEOUT, || running(&get_json(&stats)) == Some(0)), "the call went on");
    let ping = fixture.request("ping", json!({}));
    let (before, _) = fixture.response_to(ping);
    assert!(before.is_empty(), "the cancelled call answered: {before:?}");
    assert_eq!(get_json(&stats)["cancelled"][0]["requestId"], id);
}

#[test]
fn notify_and_subscribe_send_their_notifications_on_stdout() {
    let (mut fixture, _) = StdioFixture::initialized(&[], json!({}));
    let id = fixture.request("tools/call", json!({"name": "notify", "arguments": {"kind": "tools"}}));
    let (before, response) = fixture.response_to(id);
    assert_eq!(response["result"]["content"][0]["text"], "sent", "{response}");
    assert!(before.iter().any(|m| m["method"] == "notifications/tools/list_changed"), "{before:?}");

    let id = fixture.request("resources/subscribe", json!({"uri": "fixture://piped/readme"}));
    let (before, _) = fixture.response_to(id);
    let updated = before.iter().find(|m| m["method"] == "notifications/resources/updated");
    assert_eq!(updated.map(|m| m["params"]["uri"].clone()), Some(json!("fixture://piped/readme")), "{before:?}");
}

#[test]
fn closing_stdin_makes_it_exit_0_within_2_s() {
    let (mut fixture, _) = StdioFixture::initialized(&[], json!({}));
    fixture.close_stdin();
    let status = fixture.wait_exit(Duration::from_secs(2)).expect("still running 2 s after stdin closed");
    assert!(status.success(), "{status}");
}

#[test]
fn exit_after_ms_exits_with_status_3() {
    let started = Instant::now();
    let (mut fixture, _) = StdioFixture::initialized(&["--exit-after-ms", "200"], json!({}));
    let status = fixture.wait_exit(Duration::from_secs(5)).expect("still running 5 s after start");
    assert_eq!(status.code(), Some(3), "{status}");
    assert!(started.elapsed() >= Duration::from_millis(200), "exited after {:?}", started.elapsed());
}

#[test]
fn hang_initialize_answers_nothing() {
    let mut fixture = StdioFixture::start(&["--hang-initialize"]);
    let params =
        json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}});
    fixture.request("initialize", params);
    fixture.request("ping", json!({}));
    assert_eq!(fixture.next(Duration::from_secs(1)), None, "a hung server answered");
    assert_eq!(fixture.wait_exit(Duration::ZERO), None, "it must keep running");
}

#[test]
fn stats_listen_serves_the_counts_with_the_pid() {
    let (mut fixture, _) = StdioFixture::initialized(&["--stats-listen", "127.0.0.1:0"], json!({}));
    let url = fixture.stats_url();
    fixture.call_tool("echo", json!({"text": "counted"}));
    let stats = get_json(&url);
    assert_eq!(stats["pid"], fixture.child.id(), "{stats}");
    assert_eq!(stats["transport"], "stdio", "{stats}");
    assert_eq!(stats["initialize"], 1, "{stats}");
    assert_eq!(stats["requests"], 2, "initialize and the call: {stats}");
    assert_eq!(stats["notifications"], 1, "notifications/initialized: {stats}");
    assert_eq!(stats["live_sessions"], 1, "{stats}");
    assert_eq!(stats["stdin_eof"], false, "{stats}");
    assert_eq!(stats["grandchild_pid"], Value::Null, "{stats}");
    let sessions = get_json(&url.replace("/stats", "/stats/sessions"));
    assert_eq!(sessions["sessions"].as_array().map(Vec::len), Some(1), "{sessions}");
}

#[test]
fn stderr_lines_writes_that_many_lines_to_stderr_and_nothing_to_stdout() {
    let mut fixture = StdioFixture::start(&["--stderr-lines", "100"]);
    fixture.close_stdin();
    assert!(fixture.wait_exit(ANSWER_TIMEOUT).is_some_and(|s| s.success()), "no clean exit after stdin closed");
    let lines = fixture.stderr_lines(ANSWER_TIMEOUT);
    assert_eq!(lines.len(), 100, "{lines:?}");
    assert_eq!(lines[99], "mcp-fixture piped: stderr line 100 of 100");
    assert_eq!(fixture.next(Duration::ZERO), None, "stdout is for MCP messages only");
}

#[test]
fn spawn_grandchild_reports_a_live_grandchild() {
    let (fixture, _) = StdioFixture::initialized(&["--spawn-grandchild", "--stats-listen", "127.0.0.1:0"], json!({}));
    let stats = get_json(&fixture.stats_url());
    let pid = stats["grandchild_pid"].as_u64().unwrap_or_else(|| panic!("no grandchild_pid: {stats}"));
    let _grandchild = KillOnDrop(u32::try_from(pid).expect("a pid"));
    let (name, state, parent) = process_info(pid).unwrap_or_else(|| panic!("grandchild {pid} is not running"));
    assert_eq!(name, "sleep");
    assert_ne!(state, "Z", "the grandchild is a zombie");
    assert_eq!(parent, u64::from(fixture.child.id()), "the fixture is the grandchild's parent");
}

#[test]
fn closing_stdin_ends_a_call_waiting_on_the_client_and_answers_it() {
    let (mut fixture, _) = StdioFixture::initialized(&[], json!({"sampling": {}}));
    let id = fixture.request("tools/call", json!({"name": "sample", "arguments": {"prompt": "never answered"}}));
    let asked = fixture.next(ANSWER_TIMEOUT).expect("a sampling request within 5 s");
    assert_eq!(asked["method"], "sampling/createMessage", "{asked}");
    fixture.close_stdin();
    let (_, response) = fixture.response_to(id);
    assert_eq!(response["result"]["isError"], true, "{response}");
    let status = fixture.wait_exit(Duration::from_secs(2)).expect("still running 2 s after stdin closed");
    assert!(status.success(), "{status}");
}

#[test]
fn ignore_stdin_eof_keeps_running_and_answering_after_the_eof() {
    let args = ["--ignore-stdin-eof", "--stats-listen", "127.0.0.1:0"];
    let (mut fixture, _) = StdioFixture::initialized(&args, json!({}));
    let stats = fixture.stats_url();
    let id = fixture.request("tools/call", json!({"name": "slow", "arguments": {"ms": 300}}));
    fixture.close_stdin();
    assert!(support::wait_until(ANSWER_TIMEOUT, || get_json(&stats)["stdin_eof"] == true), "no EOF seen");
    let (_, response) = fixture.response_to(id);
    assert_eq!(response["result"]["content"][0]["text"], "done", "{response}");
    assert_eq!(fixture.wait_exit(Duration::from_millis(500)), None, "it exited after the EOF");
}

#[test]
fn a_task_runs_and_reports_its_status_on_stdout() {
    let (mut fixture, init) = StdioFixture::initialized(&["--tasks"], json!({}));
    assert!(init["capabilities"]["tasks"].is_object(), "{init}");
    let params = json!({"name": "research", "arguments": {"ms": 100}, "task": {"ttl": 60_000}});
    let created = fixture.call("tools/call", params);
    let task_id = created["result"]["task"]["taskId"].clone();
    assert!(task_id.is_string(), "{created}");
    let id = fixture.request("tasks/result", json!({"taskId": task_id}));
    let (mut seen, result) = fixture.response_to(id);
    assert_eq!(result["result"]["content"][0]["text"], "research done", "{result}");
    // The status notification and the result race: the notification may come second.
    let is_status = |m: &Value| m["method"] == "notifications/tasks/status";
    if !seen.iter().any(is_status) {
        seen.extend(fixture.next(ANSWER_TIMEOUT));
    }
    let status = seen.iter().find(|m| is_status(m));
    assert_eq!(status.map(|m| m["params"]["status"].clone()), Some(json!("completed")), "{seen:?}");
}
