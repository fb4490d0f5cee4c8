//! Downstream servers the fixture cannot be, on 127.0.0.1: a scripted MCP
//! server whose tools answer garbage, fail or hang and whose stream may
//! never end ([`Scripted`]), and one that accepts connections and never
//! answers ([`Silent`]). Each runs a thread per connection, and every
//! thread is stopped and joined when it is dropped.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::raw::head_end;

/// What the connections of a [`Scripted`] server share: how to behave, and what they counted.
#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    /// GET /mcp: an SSE stream that never ends and ignores DELETE (else 405).
    endless_get: bool,
    initialize: AtomicUsize,
    deletes: AtomicUsize,
    gets: AtomicUsize,
}

/// A scripted MCP server over real HTTP/1.1. Its tools: `ok` answers,
/// `bad_json` answers invalid JSON, `html_error` a 500 page, `broken_sse` an
/// SSE answer cut mid-message, `unavailable` a 503, `too_many` a 429 with
/// `Retry-After: 30`, `hang` nothing at all, `twice` its answer and then a
/// second response nobody asked for in the same write, and `twice_late` the
/// same, the second response 30 ms later. The `big_*` tools answer a text of
/// [`BIG`] bytes, which goes wrong after its first bytes: `big_result_first`
/// does not (the result before `id`, the order the TypeScript SDK writes),
/// `big_wrong_id` names another request's id after it, `big_bad_tail` holds a
/// raw control character near its end, `big_cut` ends its connection short
/// of its Content-Length, `big_reset` resets it in the middle of a chunked
/// body, and `big_sse_cut` ends an SSE answer in the middle of its event.
/// Each `initialize` opens a session `scripted-<n>`.
pub struct Scripted {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl Scripted {
    /// Starts it; with `endless_get`, a GET /mcp gets an SSE stream that
    /// never ends (comments only), else 405.
    pub fn start(endless_get: bool) -> Scripted {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared { endless_get, ..Shared::default() });
        let accept = serve_connections(listener, shared.clone(), |sh| sh.stop.load(Ordering::Acquire), serve);
        Scripted { addr, shared, accept: Some(accept) }
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// The DELETEs it received.
    pub fn deletes(&self) -> usize {
        self.shared.deletes.load(Ordering::Acquire)
    }

    /// The GET streams it opened.
    pub fn gets(&self) -> usize {
        self.shared.gets.load(Ordering::Acquire)
    }
}

/// Serves each connection of `listener` (non-blocking) on a thread of its
/// own with `serve` until `stopped` says so; the returned thread joins them
/// all before it ends.
pub fn serve_connections<S: Send + Sync + 'static>(
    listener: TcpListener,
    shared: Arc<S>,
    stopped: fn(&S) -> bool,
    serve: fn(TcpStream, &S),
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut connections = Vec::new();
        while !stopped(&shared) {
            match listener.accept() {
                Ok((stream, _)) => {
                    let shared = shared.clone();
                    connections.push(std::thread::spawn(move || serve(stream, &shared)));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        for c in connections {
            let _ = c.join();
        }
    })
}

impl Drop for Scripted {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

fn serve(s: TcpStream, sh: &Shared) {
    serve_requests(s, sh, &sh.stop, answer);
}

/// Answers the requests of one connection with `answer` (false: the
/// connection ends) until the peer leaves or `stop` is set.
pub fn serve_requests<S>(
    mut s: TcpStream,
    sh: &S,
    stop: &AtomicBool,
    answer: fn(&mut TcpStream, &str, &[u8], &S) -> bool,
) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(Duration::from_millis(100)));
    let mut buf = Vec::new();
    while let Some((head, body)) = read_request(&mut s, &mut buf, stop) {
        if !answer(&mut s, &head, &body, sh) {
            return;
        }
    }
}

/// One request (head and Content-Length body); `None` when the peer closed or `stop` was set.
pub fn read_request(s: &mut TcpStream, buf: &mut Vec<u8>, stop: &AtomicBool) -> Option<(String, Vec<u8>)> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = head_end(buf) {
            let head = String::from_utf8_lossy(&buf[..end - 4]).to_string();
            let length = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0);
            if buf.len() >= end + length {
                let body = buf[end..end + length].to_vec();
                buf.drain(..end + length);
                return Some((head, body));
            }
        }
        if !wait_readable(s, &mut chunk, buf, stop) {
            return None;
        }
    }
}

/// Reads once (100 ms at most); false when the peer closed, the read failed or the test ended.
fn wait_readable(s: &mut TcpStream, chunk: &mut [u8], buf: &mut Vec<u8>, stop: &AtomicBool) -> bool {
    if stop.load(Ordering::Acquire) {
        return false;
    }
    match s.read(chunk) {
        Ok(0) => false,
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            true
        }
        Err(e) => matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
    }
}

fn reply(s: &mut TcpStream, status: &str, mime: &str, extra: &str, body: &[u8]) -> bool {
    let head = format!("HTTP/1.1 {status}\r\nContent-Type: {mime}\r\n{extra}Content-Length: {}\r\n\r\n", body.len());
    s.write_all(&[head.as_bytes(), body].concat()).is_ok()
}

/// The text of the `big_*` tools' answers: 1 MB.
pub const BIG: usize = 1_000_000;

/// A `tools/call` answer of [`BIG`] `x`s, written with the result first,
/// `text` changed by `spoil`, and `id` last.
fn big_answer(id: &Value, spoil: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut text = vec![b'x'; BIG];
    spoil(&mut text);
    let mut body = br#"{"result":{"content":[{"type":"text","text":""#.to_vec();
    body.extend_from_slice(&text);
    body.extend_from_slice(format!(r#""}}]}},"jsonrpc":"2.0","id":{id}}}"#).as_bytes());
    body
}

/// Writes `head` and the first 60 % of `body`: the rest never comes.
fn write_part(s: &mut TcpStream, head: &str, body: &[u8]) {
    let _ = s.write_all(head.as_bytes()).and_then(|()| s.write_all(&body[..body.len() * 6 / 10]));
}

fn result(id: &Value, result: Value) -> Vec<u8> {
    json!({ "jsonrpc": "2.0", "id": id, "result": result }).to_string().into_bytes()
}

/// Answers one request; false when the connection must end.
fn answer(s: &mut TcpStream, head: &str, body: &[u8], sh: &Shared) -> bool {
    match head.split(' ').next().unwrap_or("") {
        "DELETE" => {
            sh.deletes.fetch_add(1, Ordering::AcqRel);
            return reply(s, "200 OK", "text/plain", "", b"");
        }
        "GET" if !sh.endless_get => return reply(s, "405 Method Not Allowed", "text/plain", "Allow: POST\r\n", b""),
        "GET" => {
            sh.gets.fetch_add(1, Ordering::AcqRel);
            let mut ok = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n").is_ok();
            while ok && !sh.stop.load(Ordering::Acquire) {
                ok = s.write_all(b": ping\n\n").is_ok();
                std::thread::sleep(Duration::from_millis(200));
            }
            return false;
        }
        _ => {}
    }
    let message: Value = serde_json::from_slice(body).unwrap_or_default();
    let id = &message["id"];
    match (message["method"].as_str().unwrap_or(""), message["params"]["name"].as_str().unwrap_or("")) {
        ("initialize", _) => {
            let n = sh.initialize.fetch_add(1, Ordering::AcqRel) + 1;
            let init = json!({
                "protocolVersion": "2025-11-25",
                "capabilities": { "tools": {} },
                "serverInfo": { "name": "scripted", "version": "1" },
            });
            reply(s, "200 OK", "application/json", &format!("Mcp-Session-Id: scripted-{n}\r\n"), &result(id, init))
        }
        ("notifications/initialized", _) => reply(s, "202 Accepted", "text/plain", "", b""),
        ("tools/list", _) => {
            let names = [
                "bad_json",
                "html_error",
                "broken_sse",
                "unavailable",
                "too_many",
                "hang",
                "ok",
                "twice",
                "twice_late",
                "big_result_first",
                "big_wrong_id",
                "big_bad_tail",
                "big_cut",
                "big_reset",
                "big_sse_cut",
            ];
            let tools: Vec<Value> =
                names.iter().map(|n| json!({ "name": n, "inputSchema": { "type": "object" } })).collect();
            reply(s, "200 OK", "application/json", "", &result(id, json!({ "tools": tools })))
        }
        ("tools/call", "bad_json") => reply(s, "200 OK", "application/json", "", b"{not json"),
        ("tools/call", "html_error") => {
            let page = b"<!DOCTYPE html><html><body><h1>Internal Server Error</h1><p>oops</p></body></html>";
            reply(s, "500 Internal Server Error", "text/html", "", page)
        }
        ("tools/call", "broken_sse") => {
            let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";
            let _ = s.write_all(head.as_bytes()).and_then(|()| s.write_all(b"data: {\"jsonrpc\":\"2.0\",\"id\":"));
            false
        }
        ("tools/call", "unavailable") => reply(s, "503 Service Unavailable", "text/plain", "", b"down for maintenance"),
        ("tools/call", "too_many") => {
            reply(s, "429 Too Many Requests", "text/plain", "Retry-After: 30\r\n", b"slow down")
        }
        ("tools/call", "hang") => {
            // Never answers; holds the socket until the peer closes it or the test ends.
            let (mut chunk, mut sink) = ([0u8; 512], Vec::new());
            while wait_readable(s, &mut chunk, &mut sink, &sh.stop) {
                sink.clear();
            }
            false
        }
        ("tools/call", "ok") => {
            let ok = json!({ "content": [{ "type": "text", "text": "ok" }] });
            reply(s, "200 OK", "application/json", "", &result(id, ok))
        }
        ("tools/call", "big_result_first") => reply(s, "200 OK", "application/json", "", &big_answer(id, |_| {})),
        ("tools/call", "big_wrong_id") => {
            let other = json!(format!("not-{id}"));
            reply(s, "200 OK", "application/json", "", &big_answer(&other, |_| {}))
        }
        ("tools/call", "big_bad_tail") => {
            let body = big_answer(id, |text| text[BIG - 10] = 0x01);
            reply(s, "200 OK", "application/json", "", &body)
        }
        ("tools/call", "big_cut") => {
            let body = big_answer(id, |_| {});
            let head =
                format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n", body.len());
            write_part(s, &head, &body);
            false
        }
        ("tools/call", "big_reset") => {
            // One chunk of the whole body, reset 60 % into it.
            let body = big_answer(id, |_| {});
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n",
                body.len()
            );
            write_part(s, &head, &body);
            mcpgate::runtime::sys::reset_on_close(&*s);
            false
        }
        ("tools/call", "big_sse_cut") => {
            let event = [
                b"data: ".as_slice(),
                &result(id, json!({ "content": [{ "type": "text", "text": "x".repeat(BIG) }] })),
            ]
            .concat();
            let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";
            write_part(s, head, &event);
            false
        }
        ("tools/call", name @ ("twice" | "twice_late")) => {
            let text = |t: &str| result(id, json!({ "content": [{ "type": "text", "text": t }] }));
            let response = |body: &[u8]| {
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                );
                [head.as_bytes(), body].concat()
            };
            let (first, extra) = (response(&text("ok")), response(&text("stray")));
            if name == "twice" {
                return s.write_all(&[first, extra].concat()).is_ok();
            }
            s.write_all(&first).is_ok() && {
                std::thread::sleep(Duration::from_millis(30));
                s.write_all(&extra).is_ok()
            }
        }
        _ => {
            let e = json!({ "jsonrpc": "2.0", "id": id, "error": { "code": -32601, "message": "not scripted" } });
            reply(s, "200 OK", "application/json", "", e.to_string().as_bytes())
        }
    }
}

/// A server that accepts connections and never answers, on an address of
/// the test's choosing (the port of a fixture it killed, say); it holds
/// what it accepts for at most 120 s, and stops when dropped.
pub struct Silent {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Silent {
    /// Binds `addr`, trying for 2 s while the port is still taken.
    pub fn bind(addr: &str) -> Silent {
        let mut listener = None;
        for _ in 0..100 {
            match TcpListener::bind(addr) {
                Ok(l) => {
                    listener = Some(l);
                    break;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        let listener = listener.unwrap_or_else(|| panic!("cannot bind {addr}"));
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            let mut held: Vec<TcpStream> = Vec::new();
            while !flag.load(Ordering::Acquire) && started.elapsed() < Duration::from_secs(120) {
                match listener.accept() {
                    Ok((stream, _)) => held.push(stream),
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Silent { stop, thread: Some(thread) }
    }
}

impl Drop for Silent {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
