//! Raw HTTP/1.1 over a `TcpStream`: requests written byte for byte, and
//! responses read as they come (one way of reading, [`read_until`], for
//! every test), for what a well-behaved client never sends or never waits for.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::PROTOCOL;

/// Whether a read or write failed only because its timeout passed.
pub fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)
}

/// At most 300 characters of what came back, for messages.
pub fn shown(bytes: impl AsRef<[u8]>) -> String {
    String::from_utf8_lossy(bytes.as_ref()).chars().take(300).collect()
}

/// How a connection ended while it was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The peer closed it (FIN).
    Closed,
    /// The peer reset it, or another error.
    Reset,
    /// It was still open when the time was up.
    TimedOut,
}

/// Reads into `out` until `done(out)` holds (`None`), or else says how the
/// connection ended first: closed, reset, or still open when `limit` passed.
pub fn read_until(
    stream: &mut TcpStream,
    out: &mut Vec<u8>,
    limit: Duration,
    done: impl Fn(&[u8]) -> bool,
) -> Option<Ending> {
    let deadline = Instant::now() + limit;
    let mut buf = [0u8; 8192];
    while !done(out) {
        let Some(left) = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()) else {
            return Some(Ending::TimedOut);
        };
        if stream.set_read_timeout(Some(left)).is_err() {
            return Some(Ending::Reset);
        }
        match stream.read(&mut buf) {
            Ok(0) => return Some(Ending::Closed),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if is_timeout(&e) => return Some(Ending::TimedOut),
            Err(_) => return Some(Ending::Reset),
        }
    }
    None
}

/// Reads what the peer sends until it closes the connection or `timeout` passes.
pub fn read_until_closed(stream: &mut TcpStream, timeout: Duration) -> (String, Ending) {
    let mut out = Vec::new();
    let ending = read_until(stream, &mut out, timeout, |_| false).unwrap_or(Ending::TimedOut);
    (String::from_utf8_lossy(&out).into_owned(), ending)
}

/// Reads one whole response ([`is_whole_response`]) from a connection that
/// stays open; `None` if the peer closed or failed first, or `timeout` passed.
pub fn read_response(stream: &mut TcpStream, timeout: Duration) -> Option<String> {
    let mut out = Vec::new();
    match read_until(stream, &mut out, timeout, is_whole_response) {
        None => Some(String::from_utf8_lossy(&out).into_owned()),
        Some(_) => None,
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Where the head of the response in `bytes` ends (after its blank line), once it is all there.
pub fn head_end(bytes: &[u8]) -> Option<usize> {
    find(bytes, b"\r\n\r\n").map(|at| at + 4)
}

/// The Content-Length of a response head, if it has a valid one.
fn content_length(head: &str) -> Option<usize> {
    head.lines().find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:")?.trim().parse().ok())
}

fn is_chunked(head: &str) -> bool {
    head.to_ascii_lowercase().contains("transfer-encoding: chunked")
}

/// A chunked body decoded as far as it goes, and whether it is whole (its
/// last chunk and the blank line after it came).
pub fn dechunk(mut rest: &[u8]) -> (Vec<u8>, bool) {
    let mut plain = Vec::new();
    // Every turn consumes at least a size line: bounded by the input.
    loop {
        let Some(line_end) = find(rest, b"\r\n") else { return (plain, false) };
        let size = std::str::from_utf8(&rest[..line_end])
            .ok()
            .and_then(|line| usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16).ok());
        let Some(size) = size else { return (plain, false) };
        let data = &rest[line_end + 2..];
        if size == 0 {
            // No trailers: a blank line at once; else the trailers end with one.
            return (plain, data.starts_with(b"\r\n") || find(data, b"\r\n\r\n").is_some());
        }
        if data.len() < size + 2 {
            plain.extend_from_slice(&data[..size.min(data.len())]);
            return (plain, false);
        }
        plain.extend_from_slice(&data[..size]);
        rest = &data[size + 2..];
    }
}

/// Whether `bytes` hold a whole response: its head, then its Content-Length
/// body or its last chunk. One with neither ends only when the peer closes.
pub fn is_whole_response(bytes: &[u8]) -> bool {
    let Some(at) = head_end(bytes) else { return false };
    let head = String::from_utf8_lossy(&bytes[..at]);
    let body = &bytes[at..];
    if is_chunked(&head) {
        return dechunk(body).1;
    }
    content_length(&head).is_some_and(|n| body.len() >= n)
}

/// The head of the first response in `bytes` (without its blank line), and
/// its body, de-chunked (as far as it came) when it is chunked; `None`
/// before the head is all there.
pub fn head_and_body(bytes: &[u8]) -> Option<(String, Vec<u8>)> {
    let at = head_end(bytes)?;
    let head = String::from_utf8_lossy(&bytes[..at - 4]).into_owned();
    let body = if is_chunked(&head) { dechunk(&bytes[at..]).0 } else { bytes[at..].to_vec() };
    Some((head, body))
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

/// Sends raw bytes on a fresh connection and returns what comes back: one
/// whole response, or what came until the server closed or 5 s passed.
pub fn raw_exchange(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect");
    let _ = stream.write_all(bytes);
    let mut out = Vec::new();
    read_until(&mut stream, &mut out, Duration::from_secs(5), is_whole_response);
    String::from_utf8_lossy(&out).into_owned()
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

/// Reads one response within `limit`: whole ([`is_whole_response`]) or, when
/// it has no length, ended by the server closing. Says what happened instead.
pub fn read_reply(stream: &mut TcpStream, limit: Duration) -> Result<RawReply, String> {
    read_reply_from(stream, Vec::new(), limit)
}

/// [`read_reply`] when `out` was already read.
pub fn read_reply_from(stream: &mut TcpStream, mut out: Vec<u8>, limit: Duration) -> Result<RawReply, String> {
    let started = Instant::now();
    let ended = match read_until(stream, &mut out, limit, is_whole_response) {
        None => return parse_reply(&String::from_utf8_lossy(&out)).ok_or_else(|| "no status line".to_string()),
        Some(Ending::TimedOut) => return Err(format!("no complete answer within {limit:?}, got {:?}", shown(&out))),
        Some(Ending::Closed) => "closed",
        Some(Ending::Reset) => "reset",
    };
    parse_reply(&String::from_utf8_lossy(&out)).ok_or_else(|| {
        let what = if out.is_empty() { "unanswered" } else { "mid-answer" };
        format!("{ended} {what} after {:?}, got {:?}", started.elapsed(), shown(&out))
    })
}

/// Sends `request` on a fresh connection and reads the answer within `limit`.
pub fn ask(addr: SocketAddr, request: &[u8], limit: Duration) -> Result<RawReply, String> {
    let mut stream = TcpStream::connect_timeout(&addr, limit).map_err(|e| format!("connect: {e}"))?;
    stream.write_all(request).map_err(|e| format!("send: {e}"))?;
    read_reply(&mut stream, limit)
}

/// A `GET` with this `Host` and `Connection: close`.
pub fn get_request(target: &str, host: &str) -> Vec<u8> {
    format!("GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").into_bytes()
}

/// Whether a fresh `GET /healthz` is answered `200 ok` within `limit`; how long it took.
pub fn healthz_within(addr: SocketAddr, limit: Duration) -> Result<Duration, String> {
    let started = Instant::now();
    let reply = ask(addr, &get_request("/healthz", &addr.to_string()), limit)?;
    if (reply.status, reply.body.as_str()) != (200, "ok\n") {
        return Err(format!("answered {} {:?}", reply.status, reply.body));
    }
    Ok(started.elapsed())
}

/// A `POST /mcp` of `body` as a client sends it (in `session`, when given),
/// Content-Length framed; with `Connection: close` when `close`.
pub fn mcp_post(addr: SocketAddr, session: Option<&str>, body: &str, close: bool) -> Vec<u8> {
    mcp_post_as(PROTOCOL, addr, session, body, close)
}

/// [`mcp_post`] from a client of protocol `version`.
pub fn mcp_post_as(version: &str, addr: SocketAddr, session: Option<&str>, body: &str, close: bool) -> Vec<u8> {
    let mut head = format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\n");
    if close {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n");
    if let Some(session) = session {
        head.push_str(&format!("Mcp-Session-Id: {session}\r\nMCP-Protocol-Version: {version}\r\n"));
    }
    format!("{head}Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
}
