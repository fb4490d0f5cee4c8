#![forbid(unsafe_code)]
//! mcp-load: the load generator of scripts/bench.sh. It speaks MCP over
//! Streamable HTTP to any server (a fixture directly, mcpgate, a peer
//! gateway) and prints one JSON line of results per command.
//!
//!   mcp-load calls    --url URL|--stdio CMD|--sse URL --tool NAME --clients N --seconds S [--modern] [--args JSON]
//!   mcp-load cold     --url URL|--stdio CMD --tool NAME --count N
//!   mcp-load sessions --url URL --count N [--no-stream] [--list] [--call] [--tool NAME] [--hold-file PATH]
//!   mcp-load churn    --url URL --tool NAME --cycles N [--sample-pid PID --samples CSV]
//!                     [--all-delete] [--modern] [--args JSON] [--quiet-ms MS] [--children-of PID]
//!   mcp-load procs    --pid PID
//!   mcp-load kill9    --pid PID --seconds S
//!   mcp-load connects --url URL --count N
//!
//! Before the command's own flags: `--bearer TOKEN` sends `Authorization:
//! Bearer TOKEN` with every HTTP request, `--ca FILE` trusts the PEM
//! certificates of FILE (only them) for `https://` URLs.
//!
//! `calls`: N clients, each with its own session, call NAME in a loop for S
//! seconds; latency percentiles and throughput. `cold`: N times one after the
//! other, a new client session from its `initialize` to its first call
//! answered (then DELETE, not timed). With `--stdio CMD` (split on spaces)
//! the client is the server's stdio client instead: each session starts CMD
//! and speaks newline-delimited JSON-RPC on its pipes, so `cold` includes
//! the spawn. With `--sse URL` it is a client of the old HTTP+SSE transport:
//! each session is a `GET` of URL, whose `endpoint` event names where each
//! request is `POST`ed; the response comes on the stream. With `--modern`
//! the clients speak protocol 2026-07-28: no session, each request with its
//! `_meta` and routing headers.
//! `sessions`: opens N sessions
//! that each hold a GET stream (unless --no-stream), and with --list each asks the first page
//! of `tools/list`, with --call each calls --tool once; prints `ready`, and holds them until PATH exists (or stdin closes). `churn`: N cycles of initialize, one call,
//! then DELETE (even cycles, or all with --all-delete) or walk away (odd: left
//! to idle eviction), sampling RSS and threads of PID every 100 ms into CSV;
//! with --children-of, after each call it notes the children of that PID
//! (from /proc), and at the end counts which of them are still there.
//! `procs`: RSS and threads of PID (from /proc) and of its children.
//! `kill9`: notes PID's children, sends PID SIGKILL (`kill -9`), and watches
//! each child in /proc for S seconds (then up to 10 s more while any is left).
//! `connects`: N times one after the other, a `GET` of URL on a connection
//! of its own (a TCP connect, and a TLS handshake for `https://`), timed to
//! its answer read.
//!
//! Every command ends within its own bound: a watchdog exits the process
//! after 15 minutes whatever it waits for.

use std::collections::BTreeSet;
use std::io::{BufRead, Read, Write};
use std::process::{Child as Process, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use mcpgate::downstream::Lookup;
use serde_json::{Value, json};

fn usage() -> ! {
    eprintln!(
        "usage: mcp-load [--bearer TOKEN] [--ca FILE] calls|cold|sessions|churn|procs|kill9|connects [--url URL | --stdio CMD] [--tool NAME] [--clients N] [--seconds S] [--count N] [--cycles N] [--hold-file PATH] [--sample-pid PID --samples CSV] [--all-delete] [--quiet-ms MS] [--children-of PID] [--pid PID]"
    );
    std::process::exit(2)
}

struct Args {
    command: String,
    url: String,
    tool: String,
    clients: usize,
    seconds: f64,
    count: usize,
    cycles: usize,
    hold_file: Option<String>,
    sample_pid: Option<u32>,
    samples: Option<String>,
    /// `sessions`: without a client GET stream of their own.
    no_stream: bool,
    /// `sessions --list`: each session asks the first page of `tools/list`.
    list: bool,
    /// `sessions --call`: each session calls `--tool` once (a stdio server's
    /// process starts when first needed, not at `initialize`).
    call: bool,
    /// `calls`, `cold`: the stdio server's command and arguments, instead of a URL.
    stdio: Option<Vec<String>>,
    /// `calls`, `cold`: the stream of a server of the old HTTP+SSE transport, instead of a URL.
    sse: Option<String>,
    /// `churn`: every cycle ends with DELETE.
    all_delete: bool,
    /// `calls`, `cold`: clients of protocol 2026-07-28, without sessions.
    modern: bool,
    /// `calls`: the tool's arguments (JSON; default `{"text": "hello"}`).
    arguments: Value,
    /// `churn`: the pause after the first tenth and at the end.
    quiet: Duration,
    /// `churn`: the process whose children are noted after each call.
    children_of: Option<u32>,
    /// `procs`, `kill9`: the process.
    pid: Option<u32>,
}

/// `--bearer`: the token every HTTP request carries.
static BEARER: OnceLock<String> = OnceLock::new();
/// `--ca`: the only roots for `https://`.
static CA: OnceLock<Vec<ureq::tls::Certificate<'static>>> = OnceLock::new();

fn args() -> Args {
    let mut it = std::env::args().skip(1).peekable();
    while let Some(flag) = it.next_if(|f| f == "--bearer" || f == "--ca") {
        let value = it.next().unwrap_or_else(|| usage());
        if flag == "--bearer" {
            let _ = BEARER.set(value);
        } else {
            let pem = std::fs::read(&value).unwrap_or_else(|e| panic!("--ca {value}: {e}"));
            let certs = ureq::tls::parse_pem(&pem)
                .filter_map(|item| match item {
                    Ok(ureq::tls::PemItem::Certificate(cert)) => Some(cert),
                    _ => None,
                })
                .collect();
            let _ = CA.set(certs);
        }
    }
    let command = it.next().unwrap_or_else(|| usage());
    let mut a = Args {
        command,
        url: String::new(),
        tool: "echo".into(),
        clients: 1,
        seconds: 5.0,
        count: 100,
        cycles: 1000,
        hold_file: None,
        sample_pid: None,
        samples: None,
        no_stream: false,
        list: false,
        call: false,
        stdio: None,
        sse: None,
        all_delete: false,
        modern: false,
        arguments: json!({"text": "hello"}),
        quiet: Duration::from_secs(3),
        children_of: None,
        pid: None,
    };
    while let Some(flag) = it.next() {
        if flag == "--list" {
            a.list = true;
            continue;
        }
        if flag == "--call" {
            a.call = true;
            continue;
        }
        if flag == "--no-stream" {
            a.no_stream = true;
            continue;
        }
        if flag == "--all-delete" {
            a.all_delete = true;
            continue;
        }
        if flag == "--modern" {
            a.modern = true;
            continue;
        }
        let value = it.next().unwrap_or_else(|| usage());
        match flag.as_str() {
            "--url" => a.url = value,
            "--tool" => a.tool = value,
            "--args" => a.arguments = serde_json::from_str(&value).unwrap_or_else(|_| usage()),
            "--clients" => a.clients = value.parse().unwrap_or_else(|_| usage()),
            "--seconds" => a.seconds = value.parse().unwrap_or_else(|_| usage()),
            "--count" => a.count = value.parse().unwrap_or_else(|_| usage()),
            "--cycles" => a.cycles = value.parse().unwrap_or_else(|_| usage()),
            "--hold-file" => a.hold_file = Some(value),
            "--sample-pid" => a.sample_pid = Some(value.parse().unwrap_or_else(|_| usage())),
            "--samples" => a.samples = Some(value),
            "--stdio" => a.stdio = Some(value.split_whitespace().map(str::to_string).collect()),
            "--sse" => a.sse = Some(value),
            "--quiet-ms" => a.quiet = Duration::from_millis(value.parse().unwrap_or_else(|_| usage())),
            "--children-of" => a.children_of = Some(value.parse().unwrap_or_else(|_| usage())),
            "--pid" => a.pid = Some(value.parse().unwrap_or_else(|_| usage())),
            _ => usage(),
        }
    }
    let needs_pid = matches!(a.command.as_str(), "procs" | "kill9");
    let no_target = a.url.is_empty() && a.stdio.as_ref().is_none_or(Vec::is_empty) && a.sse.is_none();
    if needs_pid && a.pid.is_none() || !needs_pid && no_target {
        usage();
    }
    a
}

fn agent() -> ureq::Agent {
    let mut config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .timeout_global(Some(Duration::from_secs(60)))
        .max_idle_connections_per_host(2);
    if let Some(certs) = CA.get() {
        let roots = ureq::tls::RootCerts::new_with_certs(certs);
        config = config.tls_config(ureq::tls::TlsConfig::builder().root_certs(roots).build());
    }
    // mcpgate's resolver: ureq's own starts a thread for every lookup that
    // has a timeout, pooled connection or not (one `clone3` per call,
    // measured with strace), and that cost would be the load generator's,
    // shared by every target on this 2-core host.
    ureq::Agent::with_parts(config.build(), ureq::unversioned::transport::DefaultConnector::new(), Lookup)
}

/// `request` with the `--bearer` token, if one was given.
fn with_bearer<B>(request: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
    match BEARER.get() {
        Some(token) => request.header("Authorization", format!("Bearer {token}")),
        None => request,
    }
}

/// One MCP client session over its own keep-alive connection.
struct Client {
    agent: ureq::Agent,
    url: String,
    session: Option<String>,
    next_id: u64,
    /// Protocol 2026-07-28: no `initialize`, no session; each request
    /// carries its version and capabilities in `_meta`, and its routing
    /// headers.
    modern: bool,
}

/// The protocol version of `--modern` clients.
const MODERN: &str = "2026-07-28";

impl Client {
    /// A client of protocol 2026-07-28: nothing to open.
    fn modern(url: &str) -> Client {
        Client { agent: agent(), url: url.to_string(), session: None, next_id: 1, modern: true }
    }

    fn connect(url: &str) -> Result<Client, String> {
        let mut client = Client { agent: agent(), url: url.to_string(), session: None, next_id: 1, modern: false };
        let params = json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "mcp-load", "version": "1"}});
        client.request("initialize", params)?;
        client.notify("notifications/initialized")?;
        Ok(client)
    }

    fn post(&mut self, body: &Value) -> Result<ureq::http::Response<ureq::Body>, String> {
        let mut request = with_bearer(self.agent.post(&self.url))
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream");
        if let Some(session) = &self.session {
            request = request.header("Mcp-Session-Id", session).header("MCP-Protocol-Version", "2025-11-25");
        }
        if self.modern {
            request = request.header("MCP-Protocol-Version", MODERN);
            if let Some(method) = body["method"].as_str() {
                request = request.header("Mcp-Method", method);
            }
            if let Some(name) = body["params"]["name"].as_str() {
                request = request.header("Mcp-Name", name);
            }
        }
        request.send(body.to_string().as_bytes()).map_err(|e| e.to_string())
    }

    fn request(&mut self, method: &str, mut params: Value) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        if self.modern {
            params["_meta"] = json!({
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "mcp-load", "version": "1"},
            });
        }
        let response = self.post(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        if response.status() != 200 {
            return Err(format!("{method}: HTTP {}", response.status()));
        }
        if let Some(session) = response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()) {
            self.session = Some(session.to_string());
        }
        let sse = response.body().mime_type() == Some("text/event-stream");
        let message = if sse {
            // Read events until the response to this request, as SDK clients
            // do; what the server sends after it (or how it ends the stream)
            // is not part of the call.
            let mut reader = std::io::BufReader::new(response.into_body().into_reader());
            let mut line = String::new();
            let mut found = String::new();
            loop {
                line.clear();
                if reader.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
                    break;
                }
                let Some(data) = line.strip_prefix("data:").map(str::trim) else { continue };
                if serde_json::from_str::<Value>(data).is_ok_and(|v| v.get("id") == Some(&json!(id))) {
                    found = data.to_string();
                    break;
                }
            }
            found
        } else {
            response.into_body().read_to_string().map_err(|e| e.to_string())?
        };
        let value: Value = serde_json::from_str(&message).map_err(|e| format!("{method}: {e}: {message}"))?;
        if let Some(error) = value.get("error") {
            return Err(format!("{method}: {error}"));
        }
        Ok(value["result"].clone())
    }

    fn notify(&mut self, method: &str) -> Result<(), String> {
        let response = self.post(&json!({"jsonrpc": "2.0", "method": method}))?;
        let _ = response.into_body().read_to_vec();
        Ok(())
    }

    fn delete(&mut self) -> Result<(), String> {
        let Some(session) = &self.session else { return Ok(()) };
        let response = with_bearer(self.agent.delete(&self.url))
            .header("Mcp-Session-Id", session)
            .call()
            .map_err(|e| e.to_string())?;
        let _ = response.into_body().read_to_vec();
        Ok(())
    }

    /// Opens the GET stream on a connection of its own and reads it on a thread until it ends.
    fn hold_stream(&self, stop: Arc<AtomicBool>) -> Result<std::thread::JoinHandle<()>, String> {
        let response = with_bearer(agent().get(&self.url))
            .header("Accept", "text/event-stream")
            .header("Mcp-Session-Id", self.session.as_deref().unwrap_or(""))
            .header("MCP-Protocol-Version", "2025-11-25")
            .call()
            .map_err(|e| e.to_string())?;
        if response.status() != 200 {
            return Err(format!("GET stream: HTTP {}", response.status()));
        }
        let mut reader = std::io::BufReader::new(response.into_body().into_reader());
        std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || {
                let mut line = String::new();
                while !stop.load(Ordering::Relaxed) {
                    line.clear();
                    match reader.read_line(&mut line) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                }
            })
            .map_err(|e| e.to_string())
    }
}

/// A client session over either transport.
trait Session: Send {
    fn request(&mut self, method: &str, params: Value) -> Result<Value, String>;
    /// Ends the session: DELETE over HTTP; over stdio, stdin closed and the
    /// child waited for.
    fn end(self: Box<Self>) -> Result<(), String>;
}

impl Session for Client {
    fn request(&mut self, method: &str, params: Value) -> Result<Value, String> {
        Client::request(self, method, params)
    }

    fn end(mut self: Box<Self>) -> Result<(), String> {
        self.delete()
    }
}

/// A new session: over Streamable HTTP to `--url`, or with a stdio server
/// this client starts (`--stdio`).
fn open(a: &Args) -> Result<Box<dyn Session>, String> {
    match (&a.stdio, &a.sse) {
        (Some(command), _) => Ok(Box::new(StdioClient::connect(command)?)),
        (None, Some(url)) => Ok(Box::new(SseClient::connect(url)?)),
        (None, None) if a.modern => Ok(Box::new(Client::modern(&a.url))),
        (None, None) => Ok(Box::new(Client::connect(&a.url)?)),
    }
}

/// One MCP session over the old HTTP+SSE transport, as a client of its
/// time speaks it: a `GET` stream read on a thread of its own, each request
/// `POST`ed to the URL the stream's `endpoint` event named, its response
/// taken from the stream. Ended by closing the stream.
struct SseClient {
    agent: ureq::Agent,
    /// The stream's own agent: shut down to close it.
    stream: ureq::Agent,
    post_url: String,
    /// The messages of the stream, but its `endpoint` event.
    messages: std::sync::mpsc::Receiver<Value>,
    reader: Option<std::thread::JoinHandle<()>>,
    next_id: u64,
}

impl SseClient {
    fn connect(url: &str) -> Result<SseClient, String> {
        let stream: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).proxy(None).build().into();
        let response =
            stream.get(url).header("Accept", "text/event-stream").call().map_err(|e| format!("GET {url}: {e}"))?;
        if response.status() != 200 {
            return Err(format!("GET {url}: HTTP {}", response.status()));
        }
        let (endpoint_tx, endpoint) = std::sync::mpsc::channel::<String>();
        let (messages_tx, messages) = std::sync::mpsc::channel::<Value>();
        let mut body = std::io::BufReader::new(response.into_body().into_reader());
        let reader = std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || {
                let (mut event, mut data, mut line) = (String::new(), String::new(), String::new());
                loop {
                    line.clear();
                    match body.read_line(&mut line) {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                    let line = line.trim_end_matches(['\r', '\n']);
                    if let Some(name) = line.strip_prefix("event:") {
                        event = name.trim().to_string();
                    } else if let Some(value) = line.strip_prefix("data:") {
                        data.push_str(value.trim());
                    } else if line.is_empty() && !data.is_empty() {
                        if event == "endpoint" {
                            let _ = endpoint_tx.send(std::mem::take(&mut data));
                        } else if let Ok(message) = serde_json::from_str(&data)
                            && messages_tx.send(message).is_err()
                        {
                            return;
                        }
                        data.clear();
                        event.clear();
                    }
                }
            })
            .map_err(|e| e.to_string())?;
        let mut client =
            SseClient { agent: agent(), stream, post_url: String::new(), messages, reader: Some(reader), next_id: 1 };
        let path = endpoint.recv_timeout(Duration::from_secs(10)).map_err(|_| format!("{url}: no `endpoint` event"))?;
        // The fixture's and the SDKs' endpoints are absolute paths on the stream's origin.
        let origin =
            url.find("://").and_then(|at| url[at + 3..].find('/').map(|end| &url[..at + 3 + end])).unwrap_or(url);
        client.post_url = if path.starts_with('/') { format!("{origin}{path}") } else { path };
        let params = json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "mcp-load", "version": "1"}});
        client.request("initialize", params)?;
        client.post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
        Ok(client)
    }

    fn post(&self, message: &Value) -> Result<(), String> {
        let response = self
            .agent
            .post(&self.post_url)
            .header("Content-Type", "application/json")
            .send(message.to_string().as_bytes())
            .map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        let _ = response.into_body().read_to_vec();
        if (200..300).contains(&status) { Ok(()) } else { Err(format!("POST: HTTP {status}")) }
    }
}

impl Session for SseClient {
    fn request(&mut self, method: &str, params: Value) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        self.post(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let message =
                self.messages.recv_timeout(left).map_err(|_| format!("{method}: no response on the stream"))?;
            if message.get("id") == Some(&json!(id)) && message.get("method").is_none() {
                if let Some(error) = message.get("error") {
                    return Err(format!("{method}: {error}"));
                }
                return Ok(message["result"].clone());
            }
        }
    }

    fn end(mut self: Box<Self>) -> Result<(), String> {
        self.stream.clone().shutdown();
        match self.reader.take().map(std::thread::JoinHandle::join) {
            Some(Err(_)) => Err("the stream's reader panicked".into()),
            _ => Ok(()),
        }
    }
}

/// One MCP session with a stdio server this client started, as a gateway
/// or a desktop client would: newline-delimited JSON-RPC on its pipes, its
/// stderr dropped. Dropped, the child is killed and reaped if still there.
struct StdioClient {
    process: Process,
    stdin: Option<ChildStdin>,
    stdout: std::io::BufReader<ChildStdout>,
    next_id: u64,
}

impl StdioClient {
    fn connect(command: &[String]) -> Result<StdioClient, String> {
        let mut process = Command::new(&command[0])
            .args(&command[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", command[0]))?;
        let stdin = process.stdin.take();
        let stdout = process.stdout.take().map(std::io::BufReader::new);
        let Some(stdout) = stdout else {
            let _ = process.kill();
            let _ = process.wait();
            return Err("no stdout".into());
        };
        let mut client = StdioClient { process, stdin, stdout, next_id: 1 };
        let params = json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "mcp-load", "version": "1"}});
        client.request("initialize", params)?;
        client.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
        Ok(client)
    }

    fn send(&mut self, message: &Value) -> Result<(), String> {
        let stdin = self.stdin.as_mut().ok_or("its stdin is closed")?;
        let mut line = message.to_string();
        line.push('\n');
        stdin.write_all(line.as_bytes()).and_then(|()| stdin.flush()).map_err(|e| format!("writing to its stdin: {e}"))
    }
}

impl Session for StdioClient {
    fn request(&mut self, method: &str, params: Value) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        let mut line = String::new();
        // Ends with the child's stdout (the watchdog bounds a child that neither answers nor exits).
        loop {
            line.clear();
            if self.stdout.read_line(&mut line).map_err(|e| format!("{method}: {e}"))? == 0 {
                return Err(format!("{method}: the server closed its stdout"));
            }
            let Ok(value) = serde_json::from_str::<Value>(&line) else { continue };
            if value.get("id") == Some(&json!(id)) && value.get("method").is_none() {
                if let Some(error) = value.get("error") {
                    return Err(format!("{method}: {error}"));
                }
                return Ok(value["result"].clone());
            }
        }
    }

    fn end(mut self: Box<Self>) -> Result<(), String> {
        drop(self.stdin.take());
        for _ in 0..500 {
            match self.process.try_wait() {
                Ok(Some(_)) => return Ok(()),
                Ok(None) => std::thread::sleep(Duration::from_millis(2)),
                Err(e) => return Err(e.to_string()),
            }
        }
        Err("the server did not exit within 1 s of its stdin's end".into())
    }
}

impl Drop for StdioClient {
    fn drop(&mut self) {
        if let Ok(None) = self.process.try_wait() {
            let _ = self.process.kill();
            let _ = self.process.wait();
        }
    }
}

fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn calls(a: &Args) {
    let latencies = Mutex::new(Vec::new());
    let errors = AtomicU64::new(0);
    let duration = Duration::from_secs_f64(a.seconds);
    let started = Mutex::new(None::<Instant>);
    let barrier = std::sync::Barrier::new(a.clients);
    std::thread::scope(|s| {
        for i in 0..a.clients {
            let (latencies, errors, barrier, started) = (&latencies, &errors, &barrier, &started);
            s.spawn(move || {
                let mut client = match open(a) {
                    Ok(c) => c,
                    Err(e) => {
                        eprintln!("client {i}: {e}");
                        errors.fetch_add(1, Ordering::Relaxed);
                        barrier.wait();
                        return;
                    }
                };
                // One call first, so that lists and connections are warm.
                let _ = client.request("tools/call", json!({"name": a.tool, "arguments": {"text": "warm"}}));
                barrier.wait();
                let begin = *started.lock().unwrap().get_or_insert_with(Instant::now);
                let mut mine = Vec::with_capacity(100_000);
                while begin.elapsed() < duration {
                    let t = Instant::now();
                    match client.request("tools/call", json!({"name": a.tool, "arguments": a.arguments})) {
                        Ok(_) => mine.push(t.elapsed().as_micros() as u32),
                        Err(e) => {
                            if errors.fetch_add(1, Ordering::Relaxed) < 3 {
                                eprintln!("client {i}: {e}");
                            }
                        }
                    }
                }
                if let Err(e) = client.end() {
                    eprintln!("client {i}: {e}");
                    errors.fetch_add(1, Ordering::Relaxed);
                }
                latencies.lock().unwrap().extend(mine);
            });
        }
    });
    let mut all = latencies.into_inner().unwrap();
    all.sort_unstable();
    let out = json!({
        "clients": a.clients,
        "seconds": a.seconds,
        "calls": all.len(),
        "throughput": all.len() as f64 / a.seconds,
        "p50_us": percentile(&all, 0.50),
        "p99_us": percentile(&all, 0.99),
        "errors": errors.load(Ordering::Relaxed),
    });
    println!("{out}");
}

/// `count` requests one after the other, each on a new connection (a new
/// agent: no pool to reuse), timed from the connect to the answer read.
fn connects(a: &Args) {
    let mut all = Vec::with_capacity(a.count);
    let mut errors = 0u64;
    for i in 0..a.count {
        let t = Instant::now();
        let result = with_bearer(agent().get(&a.url)).call().map_err(|e| e.to_string()).and_then(|response| {
            let status = response.status().as_u16();
            let _ = response.into_body().read_to_vec();
            if status == 200 { Ok(()) } else { Err(format!("HTTP {status}")) }
        });
        match result {
            Ok(()) => all.push(t.elapsed().as_micros() as u32),
            Err(e) => {
                errors += 1;
                if errors <= 3 {
                    eprintln!("connection {i}: {e}");
                }
            }
        }
    }
    let mean = if all.is_empty() { 0.0 } else { all.iter().map(|&v| f64::from(v)).sum::<f64>() / all.len() as f64 };
    all.sort_unstable();
    println!(
        "{}",
        json!({"count": a.count, "p50_us": percentile(&all, 0.50), "p99_us": percentile(&all, 0.99),
            "mean_us": mean.round(), "errors": errors})
    );
}

/// `count` new sessions one after the other, each timed from the start of
/// its `initialize` (with a stdio server: of its spawn) to its first call
/// answered; each then ends (DELETE, or stdin closed), untimed.
fn cold(a: &Args) {
    let mut all = Vec::with_capacity(a.count);
    let mut errors = 0u64;
    let started = Instant::now();
    for i in 0..a.count {
        let t = Instant::now();
        let session = open(a).and_then(|mut session| {
            session.request("tools/call", json!({"name": a.tool, "arguments": {"text": "cold"}}))?;
            Ok(session)
        });
        let result = session.and_then(|session| {
            all.push(t.elapsed().as_micros() as u32);
            session.end()
        });
        if let Err(e) = result {
            errors += 1;
            if errors <= 3 {
                eprintln!("session {i}: {e}");
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let mean = if all.is_empty() { 0.0 } else { all.iter().map(|&v| f64::from(v)).sum::<f64>() / all.len() as f64 };
    all.sort_unstable();
    println!(
        "{}",
        json!({
            "count": a.count,
            "seconds": seconds,
            "p50_us": percentile(&all, 0.50),
            "p99_us": percentile(&all, 0.99),
            "min_us": all.first().copied().unwrap_or(0),
            "mean_us": mean.round(),
            "errors": errors,
        })
    );
}

fn sessions(a: &Args) {
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut clients = Vec::with_capacity(a.count);
    let mut readers = Vec::with_capacity(a.count);
    for i in 0..a.count {
        let mut client = Client::connect(&a.url).unwrap_or_else(|e| panic!("session {i}: {e}"));
        if a.list {
            client.request("tools/list", json!({})).unwrap_or_else(|e| panic!("session {i}: tools/list: {e}"));
        }
        if a.call {
            let params = json!({"name": a.tool, "arguments": a.arguments});
            client.request("tools/call", params).unwrap_or_else(|e| panic!("session {i}: tools/call: {e}"));
        }
        if a.no_stream {
            // The session stays open at the server; its connection does not.
            drop(client);
            continue;
        }
        readers.push(client.hold_stream(stop.clone()).unwrap_or_else(|e| panic!("session {i}: {e}")));
        clients.push(client);
    }
    println!("{}", json!({"ready": a.count, "open_seconds": started.elapsed().as_secs_f64()}));
    if a.no_stream {
        // Nothing is held open here: the sessions live on at the server.
        return;
    }
    match &a.hold_file {
        Some(path) => {
            for _ in 0..36_000 {
                if std::path::Path::new(path).exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        None => {
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
        }
    }
    stop.store(true, Ordering::Relaxed);
    // Streams end when the server closes them (shutdown) or when we drop the agents.
    drop(clients);
    for reader in readers {
        let _ = reader.join();
    }
}

/// RSS in bytes and thread count of a process, from /proc.
fn sample(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
    };
    Some((field("VmRSS:")? * 1024, field("Threads:")?))
}

/// A process's parent, state and start time (in clock ticks since boot),
/// from /proc/PID/stat; `None` once it is gone (reaped).
fn stat(pid: u32) -> Option<(u32, char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name, in parentheses, may hold spaces and parentheses itself.
    let rest = text.get(text.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    let ppid = fields.get(1)?.parse().ok()?;
    // Field 22 of stat; the state is field 3.
    let start = fields.get(19)?.parse().ok()?;
    Some((ppid, state, start))
}

/// The children of `parent` (pid, state, start time), by a scan of /proc.
fn children(parent: u32) -> Vec<(u32, char, u64)> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| stat(pid).filter(|(ppid, _, _)| *ppid == parent).map(|(_, state, start)| (pid, state, start)))
        .collect()
}

/// The threads of `pid`, counted in /proc/PID/task.
fn tasks(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count() as u64)
}

fn procs(a: &Args) {
    let pid = a.pid.unwrap_or_else(|| usage());
    let (rss, _) = sample(pid).unwrap_or((0, 0));
    let kids = children(pid);
    let kids_rss: u64 = kids.iter().filter_map(|(kid, _, _)| sample(*kid)).map(|(rss, _)| rss).sum();
    let kids_threads: u64 = kids.iter().map(|(kid, _, _)| tasks(*kid)).sum();
    println!(
        "{}",
        json!({
            "pid": pid,
            "rss_kib": rss / 1024,
            "threads": tasks(pid),
            "children": kids.len(),
            "children_rss_kib": kids_rss / 1024,
            "children_threads": kids_threads,
            "zombies": kids.iter().filter(|(_, state, _)| *state == 'Z').count(),
        })
    );
}

/// SIGKILL to `pid`, then each of its children watched in /proc: when the
/// last stopped running, whether any still runs or is a zombie after
/// `--seconds`, and when the last was gone from /proc (reaped by whoever
/// it was reparented to), within 10 s more.
fn kill9(a: &Args) {
    let pid = a.pid.unwrap_or_else(|| usage());
    let watched: Vec<(u32, u64)> =
        children(pid).into_iter().filter(|(_, state, _)| *state != 'Z').map(|(kid, _, start)| (kid, start)).collect();
    let deadline = Duration::from_secs_f64(a.seconds);
    let limit = deadline + Duration::from_secs(10);
    let t0 = Instant::now();
    let killed = Command::new("kill").args(["-9", &pid.to_string()]).status().is_ok_and(|s| s.success());
    let ms = |d: Duration| (d.as_secs_f64() * 1e4).round() / 10.0;
    let (mut all_dead, mut all_gone, mut at_deadline) = (None, None, None);
    let mut reaper = None;
    let (mut running, mut zombies);
    // Bounded by `limit`.
    loop {
        let now = t0.elapsed();
        (running, zombies) = (0, 0);
        for &(kid, start) in &watched {
            match stat(kid) {
                // The same process (not a new one with its pid).
                Some((ppid, state, s)) if s == start => {
                    if state == 'Z' {
                        zombies += 1;
                        reaper = Some(ppid);
                    } else {
                        running += 1;
                    }
                }
                _ => {}
            }
        }
        if running == 0 && all_dead.is_none() {
            all_dead = Some(ms(now));
        }
        if at_deadline.is_none() && (now >= deadline || running + zombies == 0) {
            at_deadline = Some((running, zombies));
        }
        if running + zombies == 0 {
            all_gone = Some(ms(now));
            break;
        }
        if now >= limit {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let (running_at, zombies_at) = at_deadline.unwrap_or((running, zombies));
    println!(
        "{}",
        json!({
            "children": watched.len(),
            "killed": killed,
            "seconds": a.seconds,
            "running_at_deadline": running_at,
            "zombies_at_deadline": zombies_at,
            "all_dead_ms": all_dead,
            "all_gone_ms": all_gone,
            "left_at_end": running + zombies,
            "zombie_parent": reaper,
        })
    );
}

fn churn(a: &Args) {
    let stop = Arc::new(AtomicBool::new(false));
    let samples = Arc::new(Mutex::new(Vec::<(f64, u64, u64, usize)>::new()));
    let done = Arc::new(AtomicU64::new(0));
    let begin = Instant::now();
    let sampler = a.sample_pid.map(|pid| {
        let (stop, samples, done) = (stop.clone(), samples.clone(), done.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Some((rss, threads)) = sample(pid) {
                    samples.lock().unwrap().push((
                        begin.elapsed().as_secs_f64(),
                        rss,
                        threads,
                        done.load(Ordering::Relaxed) as usize,
                    ));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    });
    let errors = AtomicU64::new(0);
    let workers = 4;
    // After the first tenth (at most 1,000 cycles), everything pauses until
    // the idle sessions are evicted: RSS there and at the end are taken at
    // the same quiet point, so the two compare.
    let first = (a.cycles / 10).clamp(1, 1000);
    let quiet = a.quiet;
    let mut rss_first = 0;
    // With --children-of: every child of that process seen after a call.
    let seen = Mutex::new(BTreeSet::<(u32, u64)>::new());
    let run = |range: std::ops::Range<usize>| {
        std::thread::scope(|s| {
            for w in 0..workers {
                let (errors, done, range, seen) = (&errors, &done, range.clone(), &seen);
                s.spawn(move || {
                    for cycle in range.skip(w).step_by(workers) {
                        let result = Client::connect(&a.url).and_then(|mut client| {
                            client.request("tools/call", json!({"name": a.tool, "arguments": {"text": "churn"}}))?;
                            if let Some(parent) = a.children_of {
                                // This session's child is running now: the scan sees it.
                                let now = children(parent);
                                seen.lock().unwrap().extend(now.into_iter().map(|(kid, _, start)| (kid, start)));
                            }
                            if cycle % 2 == 0 || a.all_delete { client.delete() } else { Ok(()) }
                        });
                        if let Err(e) = result
                            && errors.fetch_add(1, Ordering::Relaxed) < 3
                        {
                            eprintln!("cycle {cycle}: {e}");
                        }
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        });
    };
    let mut working = Duration::ZERO;
    let t = Instant::now();
    run(0..first);
    working += t.elapsed();
    std::thread::sleep(quiet);
    if let Some(pid) = a.sample_pid {
        rss_first = sample(pid).map_or(0, |(rss, _)| rss);
    }
    let t = Instant::now();
    run(first..a.cycles);
    working += t.elapsed();
    std::thread::sleep(quiet);
    let rss_end = a.sample_pid.and_then(sample).map_or(0, |(rss, _)| rss);
    let elapsed = working;
    // Of the children seen, those still in /proc (the same process, not a
    // new one with its pid): running, or zombies nobody reaped.
    let seen = seen.into_inner().unwrap();
    let (mut left, mut left_zombies) = (0, 0);
    for &(kid, start) in &seen {
        if let Some((_, state, s)) = stat(kid)
            && s == start
        {
            left += 1;
            left_zombies += usize::from(state == 'Z');
        }
    }
    let now = a.children_of.map(children).unwrap_or_default();
    stop.store(true, Ordering::Relaxed);
    if let Some(sampler) = sampler {
        let _ = sampler.join();
    }
    if let Some(path) = &a.samples {
        let mut csv = String::from("seconds,rss_bytes,threads,cycles_done\n");
        for (t, rss, threads, cycles) in samples.lock().unwrap().iter() {
            csv.push_str(&format!("{t:.2},{rss},{threads},{cycles}\n"));
        }
        std::fs::write(path, csv).expect("write samples");
    }
    println!(
        "{}",
        json!({
            "cycles": a.cycles,
            "seconds": elapsed.as_secs_f64(),
            "ms_per_cycle": elapsed.as_secs_f64() * 1000.0 / a.cycles as f64,
            "errors": errors.load(Ordering::Relaxed),
            "quiet_rss_after_first": rss_first,
            "first_cycles": first,
            "quiet_rss_at_end": rss_end,
            "children_seen": seen.len(),
            "children_left": left,
            "children_left_zombies": left_zombies,
            "children_now": now.len(),
            "zombies_now": now.iter().filter(|(_, state, _)| *state == 'Z').count(),
            "threads_at_end": a.sample_pid.map(tasks),
        })
    );
}

/// No command waits longer than this, whatever it waits for (a server that
/// neither answers nor exits): the process exits with status 3.
const WATCHDOG: Duration = Duration::from_secs(15 * 60);

fn main() {
    let a = args();
    std::thread::spawn(|| {
        std::thread::sleep(WATCHDOG);
        eprintln!("mcp-load: still running after {} s; giving up", WATCHDOG.as_secs());
        std::process::exit(3);
    });
    match a.command.as_str() {
        "calls" => calls(&a),
        "cold" => cold(&a),
        "sessions" => sessions(&a),
        "churn" => churn(&a),
        "procs" => procs(&a),
        "kill9" => kill9(&a),
        "connects" => connects(&a),
        _ => usage(),
    }
}
