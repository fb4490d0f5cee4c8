//! What the integration tests share: real processes (the `mcp-fixture`
//! server and `mcpgate` itself) on 127.0.0.1, stopped by PID when dropped,
//! and a small MCP client over real sockets.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub const PROTOCOL: &str = "2025-11-25";

/// Polls `cond` every 20 ms until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Reads the first stdout line `listening on ...` of a child, within 10 s.
fn listening_line(child: &mut Child) -> String {
    let stdout = child.stdout.take().expect("stdout is piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let mut reader = BufReader::new(stdout);
        let _ = reader.read_line(&mut line);
        let _ = tx.send(line);
        // Keep draining so the child never blocks on a full pipe.
        let _ = std::io::copy(&mut reader, &mut std::io::sink());
    });
    let line = rx.recv_timeout(Duration::from_secs(10)).expect("child printed no `listening on` line within 10 s");
    line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("unexpected first line: {line:?}")).to_string()
}

/// Sends a signal by name (`TERM`, `KILL`, `HUP`) to a PID.
pub fn signal(pid: u32, name: &str) {
    let status = Command::new("kill").arg(format!("-{name}")).arg(pid.to_string()).status().expect("run kill");
    assert!(status.success(), "kill -{name} {pid} failed");
}

/// Waits for a child to exit, at most `timeout`; kills it if it does not.
pub fn wait_exit(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A fixture MCP server process.
pub struct Fixture {
    child: Child,
    pub addr: String,
    pub name: String,
    args: Vec<String>,
}

impl Fixture {
    pub fn start(name: &str, args: &[&str]) -> Fixture {
        Fixture::start_on(name, "127.0.0.1:0", args)
    }

    /// Starts it on a given address, e.g. the port of a fixture that was killed.
    pub fn start_on(name: &str, listen: &str, args: &[&str]) -> Fixture {
        let mut child = Command::new(env!("CARGO_BIN_EXE_mcp-fixture"))
            .args(["--listen", listen, "--name", name])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start mcp-fixture");
        let addr = listening_line(&mut child);
        Fixture { child, addr, name: name.into(), args: args.iter().map(|s| s.to_string()).collect() }
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the server counted: initializations, DELETEs, live sessions, open GET streams.
    pub fn stats(&self) -> Value {
        get_json(&format!("http://{}/stats", self.addr))
    }

    pub fn count(&self, key: &str) -> u64 {
        self.stats()[key].as_u64().unwrap_or_else(|| panic!("fixture stats have no `{key}`"))
    }

    /// Kills it with SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts it again on the same port (it remembers nothing).
    pub fn restart(&mut self) {
        self.kill();
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        *self = Fixture::start_on(&self.name.clone(), &self.addr.clone(), &args);
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

static DIRS: AtomicUsize = AtomicUsize::new(0);

/// A scratch directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        let n = DIRS.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("mcpgate-test-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create a temp dir");
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A config with test-friendly timeouts and the given servers (name, url).
pub fn config(servers: &[(&str, String)]) -> Value {
    let mut map = serde_json::Map::new();
    for (name, url) in servers {
        map.insert(name.to_string(), json!({ "url": url }));
    }
    json!({
        "listen": "127.0.0.1:0",
        "calls_per_server": 4,
        "session_idle_timeout_secs": 300,
        "client_idle_timeout_secs": 1,
        "connect_timeout_secs": 2,
        "request_timeout_secs": 10,
        "mcpServers": map,
    })
}

/// A running mcpgate process.
pub struct Gate {
    child: Child,
    pub addr: SocketAddr,
    stderr: Arc<Mutex<String>>,
    pub dir: TempDir,
}

impl Gate {
    pub fn start(config: &Value) -> Gate {
        Gate::start_with(config, |c| c)
    }

    /// Starts mcpgate with `config`; `wrap` may prefix the command (e.g. setpriv).
    pub fn start_with(config: &Value, wrap: impl FnOnce(Command) -> Command) -> Gate {
        let dir = TempDir::new();
        let path = dir.0.join("mcpgate.json");
        std::fs::write(&path, serde_json::to_vec_pretty(config).unwrap()).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_mcpgate"));
        command.arg("--config").arg(&path);
        let mut command = wrap(command);
        let mut child = command
            .env("MCPGATE_LOG", "mcpgate=debug")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start mcpgate");
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut pipe = child.stderr.take().unwrap();
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let url = listening_line(&mut child);
        let addr = url.trim_start_matches("http://").trim_end_matches("/mcp").parse().expect("a socket address");
        Gate { child, addr, stderr, dir }
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn client(&self) -> Client {
        Client::new(&self.url())
    }

    pub fn status(&self) -> Value {
        get_json(&format!("http://{}/status.json", self.addr))
    }

    /// Threads of the mcpgate process, counted from /proc.
    pub fn threads(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/task", self.pid())).map(|d| d.count()).unwrap_or(0)
    }

    /// Waits until the thread count is back to `baseline` (at most 10 s).
    pub fn settles_to(&self, baseline: usize) -> bool {
        wait_until(Duration::from_secs(10), || self.threads() == baseline)
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// SIGTERM, then the exit status (None if it did not exit within `timeout`).
    pub fn terminate(&mut self, timeout: Duration) -> Option<ExitStatus> {
        signal(self.pid(), "TERM");
        wait_exit(&mut self.child, timeout)
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The downstream invariant as the status page shows it.
pub fn assert_balanced(status: &Value) {
    let d = &status["downstream"];
    let (opened, closed, live) =
        (d["opened"].as_u64().unwrap(), d["closed"].as_u64().unwrap(), d["live"].as_u64().unwrap());
    assert_eq!(opened, closed + live, "downstream.opened == closed + live: {d}");
    assert_eq!(d["leaked"], 0, "{d}");
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into()
}

pub fn get_json(url: &str) -> Value {
    let mut response = agent().get(url).call().unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let text = response.body_mut().read_to_string().unwrap_or_else(|e| panic!("GET {url}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("GET {url}: not JSON ({e}): {text}"))
}

/// An answer of mcpgate to one POST.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub content_type: String,
    pub session: Option<String>,
    /// The messages of an SSE answer before the last one.
    pub events: Vec<Value>,
    /// The JSON body, or the last SSE message.
    pub body: Value,
}

impl Reply {
    pub fn result(&self) -> &Value {
        assert!(self.body.get("error").is_none(), "expected a result, got {}", self.body);
        &self.body["result"]
    }

    pub fn error_code(&self) -> i64 {
        self.body["error"]["code"].as_i64().unwrap_or_else(|| panic!("expected an error, got {}", self.body))
    }

    pub fn error_message(&self) -> String {
        self.body["error"]["message"].as_str().unwrap_or_default().to_string()
    }
}

/// A small MCP client speaking Streamable HTTP.
pub struct Client {
    agent: ureq::Agent,
    pub url: String,
    pub session: Option<String>,
    next_id: u64,
    /// Sent with every request, e.g. `Authorization`.
    pub headers: Vec<(String, String)>,
}

impl Client {
    pub fn new(url: &str) -> Client {
        Client { agent: agent(), url: url.to_string(), session: None, next_id: 1, headers: Vec::new() }
    }

    pub fn initialize(&mut self) -> Value {
        self.initialize_with(json!({}))
    }

    pub fn initialize_with(&mut self, capabilities: Value) -> Value {
        let params = json!({
            "protocolVersion": PROTOCOL,
            "capabilities": capabilities,
            "clientInfo": { "name": "mcpgate-tests", "version": "1" },
        });
        let reply = self.request("initialize", params);
        assert_eq!(reply.status, 200, "initialize: {reply:?}");
        self.session = Some(reply.session.clone().expect("initialize returns Mcp-Session-Id"));
        assert_eq!(self.notify("notifications/initialized", json!({})), 202);
        reply.result().clone()
    }

    /// A POST to the endpoint with the JSON headers, the session and `self.headers`.
    fn post_request(&self) -> ureq::RequestBuilder<ureq::typestate::WithBody> {
        let mut request = self
            .agent
            .post(&self.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream");
        if let Some(session) = &self.session {
            request = request.header("Mcp-Session-Id", session).header("MCP-Protocol-Version", PROTOCOL);
        }
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        request
    }

    /// POSTs a raw body with the usual headers plus `extra`.
    pub fn post(&self, body: &[u8], extra: &[(&str, &str)]) -> Reply {
        let mut request = self.post_request();
        for (name, value) in extra {
            request = request.header(*name, *value);
        }
        let response = request.send(body).unwrap_or_else(|e| panic!("POST {}: {e}", self.url));
        read_reply(response)
    }

    pub fn request(&mut self, method: &str, params: Value) -> Reply {
        let id = self.next_id;
        self.next_id += 1;
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        self.post(body.to_string().as_bytes(), &[])
    }

    pub fn call_tool(&mut self, name: &str, arguments: Value) -> Reply {
        self.request("tools/call", json!({ "name": name, "arguments": arguments }))
    }

    /// Text of the first content item of a successful tool call.
    pub fn tool_text(&mut self, name: &str, arguments: Value) -> String {
        let reply = self.call_tool(name, arguments);
        reply.result()["content"][0]["text"].as_str().unwrap_or_else(|| panic!("no text in {}", reply.body)).to_string()
    }

    pub fn notify(&self, method: &str, params: Value) -> u16 {
        let body = json!({ "jsonrpc": "2.0", "method": method, "params": params });
        self.post(body.to_string().as_bytes(), &[]).status
    }

    /// Every page of a merged list.
    pub fn list_all(&mut self, method: &str, field: &str) -> Vec<Value> {
        let mut items = Vec::new();
        let mut params = json!({});
        for _ in 0..100 {
            let reply = self.request(method, params.clone());
            let result = reply.result();
            items
                .extend(result[field].as_array().unwrap_or_else(|| panic!("{method}: {}", reply.body)).iter().cloned());
            match result.get("nextCursor").and_then(Value::as_str) {
                Some(cursor) => params = json!({ "cursor": cursor }),
                None => return items,
            }
        }
        panic!("{method}: more than 100 pages");
    }

    pub fn tool_names(&mut self) -> Vec<String> {
        self.list_all("tools/list", "tools").iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
    }

    pub fn delete(&self) -> u16 {
        let mut request = self.agent.delete(&self.url);
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        if let Some(session) = &self.session {
            request = request.header("Mcp-Session-Id", session);
        }
        request.call().map(|r| r.status().as_u16()).unwrap_or(0)
    }

    /// Opens the session's GET stream; messages arrive on the returned receiver.
    pub fn open_stream(&self) -> Stream {
        self.open_stream_from(None)
    }

    /// Opens the GET stream, resuming after `last_event_id` when given.
    pub fn open_stream_from(&self, last_event_id: Option<&str>) -> Stream {
        let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).proxy(None).build().into();
        let mut request = agent.get(&self.url);
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id);
        }
        let response = request
            .header("Accept", "text/event-stream")
            .header("Mcp-Session-Id", self.session.as_deref().expect("initialized"))
            .header("MCP-Protocol-Version", PROTOCOL)
            .call()
            .expect("GET stream");
        assert_eq!(response.status().as_u16(), 200, "GET stream status");
        let (tx, rx) = std::sync::mpsc::channel();
        let handle = agent.clone();
        let last_id = Arc::new(Mutex::new(None));
        let seen = last_id.clone();
        std::thread::spawn(move || {
            let reader = BufReader::new(response.into_body().into_reader());
            let mut decoder = mcpgate::sse::Decoder::new(reader, 1 << 20);
            while let Ok(Some(event)) = decoder.next_event() {
                if event.id.is_some() {
                    *seen.lock().unwrap() = event.id.clone();
                }
                if event.data.trim().is_empty() {
                    continue;
                }
                let Ok(value) = serde_json::from_str::<Value>(&event.data) else { continue };
                if tx.send(value).is_err() {
                    return;
                }
            }
        });
        Stream { rx, agent: handle, last_id }
    }
}

/// A client's open GET stream.
pub struct Stream {
    pub rx: std::sync::mpsc::Receiver<Value>,
    agent: ureq::Agent,
    last_id: Arc<Mutex<Option<String>>>,
}

impl Stream {
    /// The next message with `method`, skipping others, within `timeout`.
    pub fn next_with_method(&self, method: &str, timeout: Duration) -> Option<Value> {
        let deadline = Instant::now() + timeout;
        for _ in 0..1000 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let message = self.next(left)?;
            if message["method"] == method {
                return Some(message);
            }
        }
        None
    }

    /// The id of the last event received, as an EventSource keeps it.
    pub fn last_event_id(&self) -> Option<String> {
        self.last_id.lock().unwrap().clone()
    }

    /// The next message within `timeout`.
    pub fn next(&self, timeout: Duration) -> Option<Value> {
        self.rx.recv_timeout(timeout).ok()
    }

    /// Closes the connection, as a client going away would.
    pub fn close(self) {
        self.agent.shutdown();
    }
}

fn read_reply(response: ureq::http::Response<ureq::Body>) -> Reply {
    let status = response.status().as_u16();
    let session = response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_string);
    let content_type = response.body().mime_type().unwrap_or("").to_string();
    let mut body = response.into_body();
    if content_type == "text/event-stream" {
        let reader = BufReader::new(body.into_reader());
        let mut decoder = mcpgate::sse::Decoder::new(reader, 16 << 20);
        let mut events = Vec::new();
        while let Ok(Some(event)) = decoder.next_event() {
            if !event.data.trim().is_empty() {
                events.push(serde_json::from_str::<Value>(&event.data).expect("SSE data is JSON"));
            }
        }
        let body = events.pop().unwrap_or(Value::Null);
        return Reply { status, content_type, session, events, body };
    }
    let text = body.read_to_string().unwrap_or_default();
    let body = if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(Value::String(text)) };
    Reply { status, content_type, session, events: Vec::new(), body }
}

/// Sends raw bytes on a fresh connection and returns what comes back
/// (until the server closes or 5 s pass).
pub fn raw_exchange(addr: SocketAddr, bytes: &[u8]) -> String {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = stream.write_all(bytes);
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = stream.read(&mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
        if out.windows(4).any(|w| w == b"\r\n\r\n") && response_complete(&out) {
            break;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether a buffered HTTP response has its whole Content-Length body.
fn response_complete(out: &[u8]) -> bool {
    let text = String::from_utf8_lossy(out);
    let Some((head, body)) = text.split_once("\r\n\r\n") else { return false };
    let length = head.lines().find_map(|l| {
        l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse::<usize>().unwrap_or(0))
    });
    length.is_some_and(|n| body.len() >= n)
}

/// One HTTP response as read off a raw connection.
#[derive(Debug, Clone)]
pub struct RawReply {
    pub status: u16,
    /// Header names in lower case, values trimmed, in the order received.
    pub headers: Vec<(String, String)>,
    /// The body (cut to its Content-Length when there is one).
    pub body: String,
}

impl RawReply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The body as JSON; panics with the whole reply when it is not.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("body is not JSON ({e}): {self:?}"))
    }
}

/// Parses the first HTTP response in `text`; `None` if there is no complete head.
pub fn parse_reply(text: &str) -> Option<RawReply> {
    let (head, rest) = text.split_once("\r\n\r\n")?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length = headers.iter().find(|(n, _)| n == "content-length").and_then(|(_, v)| v.parse::<usize>().ok());
    let body = match length {
        Some(n) => rest.get(..n).unwrap_or(rest).to_string(),
        None => rest.to_string(),
    };
    Some(RawReply { status, headers, body })
}

/// Sends one request on a fresh connection with `Host` (unless given), `Connection: close`
/// and (when there is a body) `Content-Length` added to `headers`, and
/// parses the answer; panics if none came within 5 s.
pub fn raw_request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> RawReply {
    let mut bytes = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("host")) {
        bytes.push_str(&format!("Host: {addr}\r\n"));
    }
    for (name, value) in headers {
        bytes.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() {
        bytes.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    bytes.push_str("\r\n");
    let mut bytes = bytes.into_bytes();
    bytes.extend_from_slice(body);
    let text = raw_exchange(addr, &bytes);
    parse_reply(&text).unwrap_or_else(|| panic!("{method} {path}: no HTTP response, got {text:?}"))
}

/// Reads one whole response (Content-Length framed) from a connection that
/// stays open; `None` if the peer closed or failed first, or `timeout` passed.
pub fn read_response(stream: &mut std::net::TcpStream, timeout: Duration) -> Option<String> {
    let deadline = Instant::now() + timeout;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while !response_complete(&out) {
        let left = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero())?;
        stream.set_read_timeout(Some(left)).ok()?;
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

/// How a connection ended while it was read to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The peer closed it (FIN).
    Closed,
    /// The peer reset it, or another error.
    Reset,
    /// It was still open when the time was up.
    TimedOut,
}

/// Reads what the peer sends until it closes the connection or `timeout` passes.
pub fn read_until_closed(stream: &mut std::net::TcpStream, timeout: Duration) -> (String, Ending) {
    let deadline = Instant::now() + timeout;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let ending = loop {
        let Some(left) = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()) else {
            break Ending::TimedOut;
        };
        if stream.set_read_timeout(Some(left)).is_err() {
            break Ending::Reset;
        }
        match stream.read(&mut buf) {
            Ok(0) => break Ending::Closed,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                break Ending::TimedOut;
            }
            Err(_) => break Ending::Reset,
        }
    };
    (String::from_utf8_lossy(&out).into_owned(), ending)
}

/// The body of a GET, as text.
pub fn get_text(url: &str) -> String {
    agent().get(url).call().unwrap_or_else(|e| panic!("GET {url}: {e}")).body_mut().read_to_string().unwrap_or_default()
}

/// Ids of `call_streaming` requests: unique in the test process, so two
/// clients sharing a session never send the same id.
static STREAMING_IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
/// Sessions shared by `same_session` clients, to give each its own id range.
static SHARED_CLIENTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Client {
    /// Another client on this client's session (same id and headers, its
    /// own connection and request ids), e.g. for a second thread.
    pub fn same_session(&self) -> Client {
        let n = SHARED_CLIENTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Client {
            agent: agent(),
            url: self.url.clone(),
            session: self.session.clone(),
            next_id: 1_000_000 * n,
            headers: self.headers.clone(),
        }
    }

    /// POSTs a response `{"id": id, "result": result}` to a request a server
    /// made, on a connection of its own; the HTTP status.
    pub fn respond(&self, id: &Value, result: Value) -> u16 {
        let mut request = agent()
            .post(&self.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("Mcp-Session-Id", self.session.as_deref().expect("initialized"))
            .header("MCP-Protocol-Version", PROTOCOL);
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        let body = json!({ "jsonrpc": "2.0", "id": id, "result": result });
        let response = request.send(body.to_string().as_bytes()).unwrap_or_else(|e| panic!("POST answer: {e}"));
        response.status().as_u16()
    }

    /// Calls tool `name` and reads the SSE answer event by event as it
    /// arrives. Each JSON-RPC request in it (a server asking the client) goes
    /// to `answer`; a result it returns is POSTed back on another connection
    /// (202 expected) while the answer is still being read. Returns the
    /// messages before the response, and the response (or the JSON answer;
    /// `Value::Null` when the stream ended without one).
    pub fn call_streaming(
        &self,
        name: &str,
        arguments: Value,
        mut answer: impl FnMut(&Value) -> Option<Value>,
    ) -> (Vec<Value>, Value) {
        let id = json!(format!("stream-{}", STREAMING_IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
        let body = json!({
            "jsonrpc": "2.0",
            "id": id,
            "method": "tools/call",
            "params": { "name": name, "arguments": arguments },
        });
        let response =
            self.post_request().send(body.to_string().as_bytes()).unwrap_or_else(|e| panic!("POST {name}: {e}"));
        let content_type = response.body().mime_type().unwrap_or("").to_string();
        if content_type != "text/event-stream" {
            let text = response.into_body().read_to_string().unwrap_or_default();
            return (Vec::new(), serde_json::from_str(&text).unwrap_or(Value::String(text)));
        }
        let reader = BufReader::new(response.into_body().into_reader());
        let mut decoder = mcpgate::sse::Decoder::new(reader, 16 << 20);
        let mut events = Vec::new();
        loop {
            let event = match decoder.next_event() {
                Ok(Some(event)) => event,
                Ok(None) => return (events, Value::Null),
                Err(e) => panic!("{name}: reading the SSE answer failed: {e}; messages so far: {events:?}"),
            };
            if event.data.trim().is_empty() {
                continue;
            }
            let message: Value = serde_json::from_str(&event.data)
                .unwrap_or_else(|e| panic!("{name}: SSE data is not JSON ({e}): {}", event.data));
            if message.get("method").is_none() && message.get("id") == Some(&id) {
                return (events, message);
            }
            if message.get("method").is_some()
                && let Some(asked) = message.get("id")
                && let Some(result) = answer(&message)
            {
                let status = self.respond(asked, result);
                assert_eq!(status, 202, "{name}: POSTing the answer to {message}");
            }
            events.push(message);
        }
    }
}
