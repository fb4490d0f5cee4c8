//! Raw HTTP/1.1 over a `TcpStream`: requests written byte for byte, and
//! responses read as they come, for what a well-behaved client never sends
//! or never waits for.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Sends raw bytes on a fresh connection and returns what comes back
/// (until the server closes or 5 s pass).
pub fn raw_exchange(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect");
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
pub fn read_response(stream: &mut TcpStream, timeout: Duration) -> Option<String> {
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
pub fn read_until_closed(stream: &mut TcpStream, timeout: Duration) -> (String, Ending) {
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
