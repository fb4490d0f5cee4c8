//! Raw HTTP/1.1 over a `TcpStream`, for what a well-behaved client never
//! sends or never waits for. One of each: a request writer ([`http_request`],
//! the test kit's), two ways to put bytes on the wire ([`send`], and
//! [`exchange`], which also reads the answer), one reading loop with a
//! deadline ([`read_until`]) under every way of reading, one response parser
//! ([`parse_reply`]: the body de-chunked, cut to its length) and one SSE
//! body parser ([`sse_events`], as mcpgate's decoder reads). Bytes a client
//! would never write (a broken head, a lying `Content-Length`) are written
//! by the test and sent as they are.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use mcpgate::protocol::sse::{Decoder, Event};
use serde_json::Value;

use super::{PROTOCOL, http_request};

/// Whether a read or write failed only because its timeout passed.
pub fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)
}

/// At most 300 characters of what came back, for messages.
pub fn shown(bytes: impl AsRef<[u8]>) -> String {
    String::from_utf8_lossy(bytes.as_ref()).chars().take(300).collect()
}

// ---------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------

/// `body` in the chunked transfer coding, in chunks of `size` bytes, and the last chunk.
pub fn chunked(body: &[u8], size: usize) -> Vec<u8> {
    let mut bytes = Vec::new();
    for piece in body.chunks(size) {
        bytes.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        bytes.extend_from_slice(piece);
        bytes.extend_from_slice(b"\r\n");
    }
    bytes.extend_from_slice(b"0\r\n\r\n");
    bytes
}

/// A `GET` with this `Host` and `Connection: close`.
pub fn get_request(target: &str, host: &str) -> Vec<u8> {
    http_request("GET", target, &[("Host", host), ("Connection", "close")], b"")
}

/// A `POST /mcp` of `body` as a client sends it (in `session`, when given);
/// with `Connection: close` when `close`.
pub fn mcp_post(addr: SocketAddr, session: Option<&str>, body: &str, close: bool) -> Vec<u8> {
    mcp_post_as(PROTOCOL, addr, session, body, close)
}

/// [`mcp_post`] from a client of protocol `version`.
pub fn mcp_post_as(version: &str, addr: SocketAddr, session: Option<&str>, body: &str, close: bool) -> Vec<u8> {
    let host = addr.to_string();
    let mut headers = vec![("Host", host.as_str())];
    if close {
        headers.push(("Connection", "close"));
    }
    headers.extend([("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream")]);
    if let Some(session) = session {
        headers.extend([("Mcp-Session-Id", session), ("MCP-Protocol-Version", version)]);
    }
    http_request("POST", "/mcp", &headers, body.as_bytes())
}

/// Connects to `addr` and writes `bytes`; panics if either fails. What comes
/// back is the test's to read.
pub fn send(addr: SocketAddr, bytes: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
    stream.write_all(bytes).unwrap_or_else(|e| panic!("send to {addr}: {e}"));
    stream
}

/// [`send`] that does not mind a write that fails: mcpgate may refuse the
/// bytes and close before it has read them all, and what it answered is
/// still there to read.
pub fn send_unchecked(addr: SocketAddr, bytes: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
    let _ = stream.write_all(bytes);
    stream
}

/// Sends `bytes` on a fresh connection and reads the answer ([`read_answer`])
/// within `limit`; `Err` when no connection could be made. A write that
/// fails is no error: mcpgate may answer and close before it has read all
/// of the bytes, and the answer is what counts.
pub fn exchange(addr: SocketAddr, bytes: &[u8], limit: Duration) -> Result<Answer, String> {
    let started = Instant::now();
    let mut stream = TcpStream::connect_timeout(&addr, limit).map_err(|e| format!("connect: {e}"))?;
    let _ = stream.write_all(bytes);
    let mut answer = read_answer_from(&mut stream, Vec::new(), limit.saturating_sub(started.elapsed()));
    answer.took = started.elapsed();
    Ok(answer)
}

/// [`exchange`], and the whole response ([`Answer::whole`]) or why there was none.
pub fn ask(addr: SocketAddr, bytes: &[u8], limit: Duration) -> Result<RawReply, String> {
    exchange(addr, bytes, limit)?.whole()
}

/// Sends one request on a fresh connection with `Connection: close`, `Host`
/// (unless `headers` name one) and `headers`, and returns the whole
/// response; panics if none came within 5 s.
pub fn raw_request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> RawReply {
    let host = addr.to_string();
    let mut all = vec![("Connection", "close")];
    if !headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("host")) {
        all.push(("Host", host.as_str()));
    }
    all.extend_from_slice(headers);
    ask(addr, &http_request(method, path, &all, body), Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
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

// ---------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------

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

/// Reads what the peer sends until it closes the connection or `limit` passes.
pub fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> (String, Ending) {
    let mut out = Vec::new();
    let ending = read_until(stream, &mut out, limit, |_| false).unwrap_or(Ending::TimedOut);
    (String::from_utf8_lossy(&out).into_owned(), ending)
}

/// Reads a response head (up to its blank line) within `limit`: the head
/// (with an empty body), and what came after it.
pub fn read_head(stream: &mut TcpStream, limit: Duration) -> Result<(RawReply, Vec<u8>), String> {
    let mut out = Vec::new();
    match read_until(stream, &mut out, limit, has_head) {
        None => {}
        Some(Ending::TimedOut) => return Err(format!("no head within {limit:?}, got {:?}", shown(&out))),
        Some(ending) => return Err(format!("{ending:?}, got {:?}", shown(&out))),
    }
    let at = head_end(&out).expect("a whole head");
    let reply = parse_reply(&out[..at]).ok_or_else(|| format!("no status line in {:?}", shown(&out)))?;
    Ok((reply, out[at..].to_vec()))
}

/// Reads one response within `limit`, until it is whole
/// ([`is_whole_response`]), the connection ends, or the time is up.
pub fn read_answer(stream: &mut TcpStream, limit: Duration) -> Answer {
    read_answer_from(stream, Vec::new(), limit)
}

/// [`read_answer`] when `out` was already read.
pub fn read_answer_from(stream: &mut TcpStream, mut out: Vec<u8>, limit: Duration) -> Answer {
    let started = Instant::now();
    let ending = read_until(stream, &mut out, limit, is_whole_response);
    Answer { bytes: out, ending, took: started.elapsed() }
}

/// The whole response ([`Answer::whole`]) read within `limit`, or what happened instead.
pub fn read_reply(stream: &mut TcpStream, limit: Duration) -> Result<RawReply, String> {
    read_answer(stream, limit).whole()
}

/// What came back on one connection, read with a deadline.
pub struct Answer {
    /// Everything received.
    pub bytes: Vec<u8>,
    /// `None` once a whole response was there; else how the connection
    /// ended first: closed, reset, or still open when the time was up.
    pub ending: Option<Ending>,
    /// From the start of the exchange (or of the reading) to its end.
    pub took: Duration,
}

impl Answer {
    /// The response as far as it came, once its head is there.
    pub fn reply(&self) -> Option<RawReply> {
        parse_reply(&self.bytes)
    }

    /// The response as far as it came, once the peer ended it: whole, or
    /// closed after its head (cut short, perhaps); `None` while it was still
    /// coming when the time was up, or when it ended before a head.
    pub fn reply_once_ended(&self) -> Option<RawReply> {
        if self.ended() { self.reply() } else { None }
    }

    /// Whether it ended before the time was up: whole, or closed by the peer.
    pub fn ended(&self) -> bool {
        self.ending != Some(Ending::TimedOut)
    }

    /// Its status; 0 before its head came.
    pub fn status(&self) -> u16 {
        self.reply().map_or(0, |r| r.status)
    }

    /// The JSON-RPC messages in it as far as it came ([`RawReply::messages`]).
    pub fn messages(&self) -> Vec<Value> {
        self.reply().map(|r| r.messages()).unwrap_or_default()
    }

    /// The response (not a request or a notification) with this id, as far as the answer came.
    pub fn response_to(&self, id: &str) -> Option<Value> {
        self.reply()?.response_to(id)
    }

    /// The response, if it came whole, or without a length and ended by the
    /// peer closing; else what came instead.
    pub fn whole(&self) -> Result<RawReply, String> {
        let got = shown(&self.bytes);
        let ending = match self.ending {
            None => return self.reply().ok_or_else(|| format!("no status line in {got:?}")),
            Some(Ending::TimedOut) => return Err(format!("no whole answer within {:?}, got {got:?}", self.took)),
            Some(Ending::Closed) => "closed",
            Some(Ending::Reset) => "reset",
        };
        match parse(&self.bytes) {
            Some(parsed) if !parsed.framed => Ok(parsed.reply),
            _ => {
                let what = if self.bytes.is_empty() { "unanswered" } else { "mid-answer" };
                Err(format!("{ending} {what} after {:?}, got {got:?}", self.took))
            }
        }
    }
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Answer")
            .field("took", &self.took)
            .field("ending", &self.ending)
            .field("status", &self.status())
            .field("messages", &self.messages())
            .finish()
    }
}

// ---------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------

/// One HTTP response as read off a raw connection.
#[derive(Debug, Clone)]
pub struct RawReply {
    /// The status line's version, `HTTP/1.1`.
    pub version: String,
    pub status: u16,
    /// Header names in lower case, values trimmed, in the order received.
    pub headers: Vec<(String, String)>,
    /// The body, as far as it came: de-chunked when it is chunked, cut to
    /// its Content-Length when it has one.
    pub body: String,
}

impl RawReply {
    /// A response read through ureq, for a test that needs it as bytes came:
    /// its head, and its whole body as text; an error if the body broke off.
    pub fn read(response: ureq::http::Response<ureq::Body>) -> Result<RawReply, ureq::Error> {
        let version = format!("{:?}", response.version());
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(n, v)| (n.as_str().to_ascii_lowercase(), String::from_utf8_lossy(v.as_bytes()).trim().to_string()))
            .collect();
        let body = response.into_body().read_to_string()?;
        Ok(RawReply { version, status, headers, body })
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The body as JSON; panics with the whole reply when it is not.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("body is not JSON ({e}): {self:?}"))
    }

    /// The JSON-RPC messages in the body: the data of each of its events
    /// that is JSON when it is `text/event-stream` (up to where the stream
    /// broke off), else the body when it is JSON.
    pub fn messages(&self) -> Vec<Value> {
        if self.header("content-type").is_some_and(|t| t.to_ascii_lowercase().starts_with("text/event-stream")) {
            let events = sse_events(self.body.as_bytes()).unwrap_or_else(|(before, _)| before);
            return events.iter().filter_map(|e| serde_json::from_str(&e.data).ok()).collect();
        }
        serde_json::from_str(&self.body).into_iter().collect()
    }

    /// The response (not a request or a notification) with this id among [`RawReply::messages`].
    pub fn response_to(&self, id: &str) -> Option<Value> {
        self.messages().into_iter().find(|m| m.get("method").is_none() && m["id"] == id)
    }
}

/// The events of an SSE body as mcpgate's decoder reads them: all of them,
/// or those before the first error (a stream cut off or broken) and the error.
pub fn sse_events(body: &[u8]) -> Result<Vec<Event>, (Vec<Event>, String)> {
    let mut decoder = Decoder::new(std::io::BufReader::new(body), 16 << 20);
    let mut events = Vec::new();
    loop {
        match decoder.next_event() {
            Ok(Some(event)) => events.push(event),
            Ok(None) => return Ok(events),
            Err(e) => return Err((events, e.to_string())),
        }
    }
}

/// The first HTTP response in `bytes` ([`RawReply`]); `None` before its head is all there.
pub fn parse_reply(bytes: impl AsRef<[u8]>) -> Option<RawReply> {
    parse(bytes.as_ref()).map(|parsed| parsed.reply)
}

/// Every response in `bytes`, in order, as long as each ends where its
/// framing says (one without a length, or cut short, ends the list).
pub fn parse_replies(mut bytes: &[u8]) -> Vec<RawReply> {
    let mut out = Vec::new();
    for _ in 0..100 {
        let Some(parsed) = parse(bytes) else { break };
        out.push(parsed.reply);
        match parsed.end {
            Some(end) => bytes = &bytes[end..],
            None => break,
        }
    }
    out
}

/// Whether `bytes` hold a whole response: its head, then its Content-Length
/// body or its last chunk. One with neither ends only when the peer closes.
pub fn is_whole_response(bytes: &[u8]) -> bool {
    parse(bytes).is_some_and(|parsed| parsed.end.is_some())
}

/// Whether `bytes` hold a whole response head (up to its blank line).
pub fn has_head(bytes: &[u8]) -> bool {
    head_end(bytes).is_some()
}

/// The first response in some bytes, parsed.
struct Parsed {
    reply: RawReply,
    /// Whether it says where it ends (a Content-Length, or chunks).
    framed: bool,
    /// Where it ends in the bytes, once all of it is there.
    end: Option<usize>,
}

fn parse(bytes: &[u8]) -> Option<Parsed> {
    let at = head_end(bytes)?;
    let head = String::from_utf8_lossy(&bytes[..at - 4]);
    let mut lines = head.split("\r\n");
    let mut status_line = lines.next()?.split_whitespace();
    let version = status_line.next()?.to_string();
    let status = status_line.next()?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let value = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
    let chunked = value("transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    let length = value("content-length").and_then(|v| v.parse::<usize>().ok());
    let rest = &bytes[at..];
    let (body, framed, end) = if chunked {
        let (plain, end) = dechunk(rest);
        (plain, true, end.map(|n| at + n))
    } else if let Some(n) = length {
        let end = (rest.len() >= n).then_some(at + n);
        (rest[..n.min(rest.len())].to_vec(), true, end)
    } else {
        (rest.to_vec(), false, None)
    };
    let body = String::from_utf8_lossy(&body).into_owned();
    Some(Parsed { reply: RawReply { version, status, headers, body }, framed, end })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Where the head of the message in `bytes` ends (after its blank line), once it is all there.
pub(super) fn head_end(bytes: &[u8]) -> Option<usize> {
    find(bytes, b"\r\n\r\n").map(|at| at + 4)
}

/// A chunked body decoded as far as it goes, and where it ends (after its
/// last chunk and the blank line after it) once it is whole.
fn dechunk(bytes: &[u8]) -> (Vec<u8>, Option<usize>) {
    let mut plain = Vec::new();
    let mut at = 0;
    // Every turn consumes at least a size line: bounded by the input.
    loop {
        let rest = &bytes[at..];
        let Some(line_end) = find(rest, b"\r\n") else { return (plain, None) };
        let size = std::str::from_utf8(&rest[..line_end])
            .ok()
            .and_then(|line| usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16).ok());
        let Some(size) = size else { return (plain, None) };
        let data = &rest[line_end + 2..];
        let data_at = at + line_end + 2;
        if size == 0 {
            // No trailers: a blank line at once; else the trailers end with one.
            if data.starts_with(b"\r\n") {
                return (plain, Some(data_at + 2));
            }
            return (plain, find(data, b"\r\n\r\n").map(|n| data_at + n + 4));
        }
        if data.len() < size + 2 {
            plain.extend_from_slice(&data[..size.min(data.len())]);
            return (plain, None);
        }
        plain.extend_from_slice(&data[..size]);
        at = data_at + size + 2;
    }
}
