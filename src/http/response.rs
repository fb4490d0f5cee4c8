//! Writing to a client: response heads, bodies and SSE chunks. A client
//! must take each 64 KiB within the write timeout: a deadline per piece,
//! not per `write()`, so a client that reads a trickle cannot hold a
//! thread by letting each partial write restart the clock.

use std::io::{self, IoSlice};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::stream::Stream;

/// Bytes a client must accept within one write timeout.
const PIECE: usize = 64 * 1024;

/// The writing side of a connection.
pub(super) struct Writer {
    stream: Arc<Stream>,
    timeout: Duration,
    /// A write gave up: the client did not take its answer in time.
    timed_out: bool,
    /// The `Date` of the last answer and its second: formatted again only
    /// when the second changes.
    date: (u64, String),
}

/// What the connection does after a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Connection {
    /// Kept open for this many seconds of idleness, as the response says.
    KeepAlive(u64),
    Close,
}

impl Writer {
    pub fn new(stream: Arc<Stream>, timeout: Duration) -> Writer {
        Writer { stream, timeout, timed_out: false, date: (u64::MAX, String::new()) }
    }

    pub fn timed_out(&self) -> bool {
        self.timed_out
    }

    /// Writes `parts` in order, as few system calls as the kernel allows.
    pub fn write_parts(&mut self, parts: &[&[u8]]) -> io::Result<()> {
        let mut slices: Vec<IoSlice<'_>> = parts.iter().filter(|p| !p.is_empty()).map(|p| IoSlice::new(p)).collect();
        let mut slices = &mut slices[..];
        let mut deadline = Instant::now() + self.timeout;
        let mut in_piece = 0;
        while !slices.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                self.timed_out = true;
                return Err(io::Error::new(io::ErrorKind::TimedOut, "the client did not take its answer in time"));
            }
            let n = match self.stream.write_within(slices, left) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                    self.timed_out = true;
                    return Err(e);
                }
                Err(e) => return Err(e),
            };
            IoSlice::advance_slices(&mut slices, n);
            in_piece += n;
            if in_piece >= PIECE {
                in_piece = 0;
                deadline = Instant::now() + self.timeout;
            }
        }
        Ok(())
    }

    /// A whole response with a known length.
    pub fn respond(
        &mut self,
        status: u16,
        headers: &[(&str, String)],
        content_type: Option<&str>,
        body: &[u8],
        connection: Connection,
    ) -> io::Result<()> {
        let mut head = self.status_line(status);
        if let Some(content_type) = content_type {
            push_header(&mut head, "Content-Type", content_type);
        }
        if status != 204 && status >= 200 {
            push_header(&mut head, "Content-Length", &body.len().to_string());
        }
        finish_head(&mut head, headers, connection);
        self.write_parts(&[head.as_bytes(), body])
    }

    /// The head of an SSE answer, whose body follows in chunks.
    pub fn sse_head(&mut self, headers: &[(&str, String)], connection: Connection) -> io::Result<()> {
        let mut head = self.status_line(200);
        head.push_str(
            "Content-Type: text/event-stream\r\nCache-Control: no-cache\r\nX-Accel-Buffering: no\r\nTransfer-Encoding: chunked\r\n",
        );
        finish_head(&mut head, headers, connection);
        self.write_parts(&[head.as_bytes()])
    }

    /// One chunk of a chunked body.
    pub fn chunk(&mut self, data: &[u8]) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let size = format!("{:x}\r\n", data.len());
        self.write_parts(&[size.as_bytes(), data, b"\r\n"])
    }

    /// A last chunk of data, if any, and the end of the chunked body, in one write.
    pub fn end_chunks(&mut self, data: &[u8]) -> io::Result<()> {
        if data.is_empty() {
            return self.write_parts(&[b"0\r\n\r\n"]);
        }
        let size = format!("{:x}\r\n", data.len());
        self.write_parts(&[size.as_bytes(), data, b"\r\n0\r\n\r\n"])
    }
}

impl Writer {
    fn status_line(&mut self, status: u16) -> String {
        let now = SystemTime::now();
        let second = now.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if self.date.0 != second {
            self.date = (second, crate::runtime::clock::http_date(now));
        }
        let mut head = String::with_capacity(256);
        head.push_str("HTTP/1.1 ");
        head.push_str(&status.to_string());
        head.push(' ');
        head.push_str(reason(status));
        head.push_str("\r\n");
        push_header(&mut head, "Date", &self.date.1);
        head
    }
}

fn push_header(head: &mut String, name: &str, value: &str) {
    head.push_str(name);
    head.push_str(": ");
    head.push_str(value);
    head.push_str("\r\n");
}

fn finish_head(head: &mut String, headers: &[(&str, String)], connection: Connection) {
    for (name, value) in headers {
        // Values come from mcpgate itself; a line break would split the head.
        if value.bytes().any(|b| b == b'\r' || b == b'\n') {
            log::error!("header `{name}` has a line break in its value; left out");
            continue;
        }
        push_header(head, name, value);
    }
    match connection {
        Connection::KeepAlive(secs) => push_header(head, "Keep-Alive", &format!("timeout={secs}")),
        Connection::Close => push_header(head, "Connection", "close"),
    }
    head.push_str("\r\n");
}

fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        202 => "Accepted",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        417 => "Expectation Failed",
        421 => "Misdirected Request",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}
