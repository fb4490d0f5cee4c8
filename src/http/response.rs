//! Writing to a client: response heads, bodies and SSE chunks. A client
//! must take each 64 KiB within the write timeout: a deadline per piece,
//! not per `write()`, so a client that reads a trickle cannot hold a
//! thread by letting each partial write restart the clock.

use std::fmt::Write as _;
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
    /// The buffer of the last answer's head, kept for the next one.
    head: String,
}

/// What the connection does after a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Connection {
    /// Kept open for this many seconds of idleness, as the response says.
    KeepAlive(u64),
    Close,
}

impl Writer {
    pub(crate) fn new(stream: Arc<Stream>, timeout: Duration) -> Writer {
        Writer { stream, timeout, timed_out: false, date: (u64::MAX, String::new()), head: String::new() }
    }

    pub(crate) fn timed_out(&self) -> bool {
        self.timed_out
    }

    /// Writes `parts` in order, as few system calls as the kernel allows.
    pub(crate) fn write_parts<const N: usize>(&mut self, parts: [&[u8]; N]) -> io::Result<()> {
        let mut slices = parts.map(IoSlice::new);
        let mut slices = &mut slices[..];
        // Empty parts are dropped as they are reached: a write of nothing would end as WriteZero.
        IoSlice::advance_slices(&mut slices, 0);
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
    pub(crate) fn respond(
        &mut self,
        status: u16,
        headers: &[(&str, String)],
        content_type: Option<&str>,
        body: &[u8],
        connection: Connection,
    ) -> io::Result<()> {
        self.respond_parts(status, headers, content_type, [body, &[], &[]], connection)
    }

    /// [`Writer::respond`] with a body in parts, written as one.
    pub(crate) fn respond_parts(
        &mut self,
        status: u16,
        headers: &[(&str, String)],
        content_type: Option<&str>,
        body: [&[u8]; 3],
        connection: Connection,
    ) -> io::Result<()> {
        let mut head = self.status_line(status);
        if let Some(content_type) = content_type {
            push_header(&mut head, "Content-Type", content_type);
        }
        if status != 204 && status >= 200 {
            let _ = write!(head, "Content-Length: {}\r\n", body.iter().map(|p| p.len()).sum::<usize>());
        }
        finish_head(&mut head, headers, connection);
        let [a, b, c] = body;
        let written = self.write_parts([head.as_bytes(), a, b, c]);
        self.head = head;
        written
    }

    /// The head of an SSE answer, whose body follows in chunks.
    pub(crate) fn sse_head(&mut self, headers: &[(&str, String)], connection: Connection) -> io::Result<()> {
        let mut head = self.status_line(200);
        head.push_str(
            "Content-Type: text/event-stream\r\nCache-Control: no-cache\r\nX-Accel-Buffering: no\r\nTransfer-Encoding: chunked\r\n",
        );
        finish_head(&mut head, headers, connection);
        let written = self.write_parts([head.as_bytes()]);
        self.head = head;
        written
    }

    /// One chunk of a chunked body.
    pub(crate) fn chunk(&mut self, data: &[u8]) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let size = format!("{:x}\r\n", data.len());
        self.write_parts([size.as_bytes(), data, b"\r\n"])
    }

    /// A last chunk of data, if any, and the end of the chunked body, in one write.
    pub(crate) fn end_chunks(&mut self, data: [&[u8]; 3]) -> io::Result<()> {
        let len: usize = data.iter().map(|p| p.len()).sum();
        if len == 0 {
            return self.write_parts([b"0\r\n\r\n"]);
        }
        let size = format!("{len:x}\r\n");
        let [a, b, c] = data;
        self.write_parts([size.as_bytes(), a, b, c, b"\r\n0\r\n\r\n"])
    }
}

impl Writer {
    /// The status line and `Date`, in the head buffer the last answer
    /// left (the caller puts it back): an answer allocates no head.
    fn status_line(&mut self, status: u16) -> String {
        let now = SystemTime::now();
        let second = now.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if self.date.0 != second {
            self.date = (second, crate::runtime::clock::http_date(now));
        }
        let mut head = std::mem::take(&mut self.head);
        head.clear();
        head.reserve(256);
        let _ = write!(head, "HTTP/1.1 {status} {}\r\n", reason(status));
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
        Connection::KeepAlive(secs) => {
            let _ = write!(head, "Keep-Alive: timeout={secs}\r\n");
        }
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

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};

    use super::*;

    /// A writer on a real connection, and the peer that reads it.
    fn pair() -> (Writer, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let peer = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (ours, _) = listener.accept().unwrap();
        (Writer::new(Arc::new(Stream::plain(ours)), Duration::from_secs(5)), peer)
    }

    /// What the writer wrote, once it is dropped (the connection closed).
    fn all_of(writer: Writer, mut peer: TcpStream) -> String {
        drop(writer);
        let mut got = String::new();
        peer.read_to_string(&mut got).unwrap();
        got
    }

    #[test]
    fn empty_parts_are_skipped_and_nothing_at_all_is_no_write() {
        let (mut writer, peer) = pair();
        writer.write_parts([b"", b""]).unwrap();
        writer.write_parts([b"", b"a", b"", b"b", b""]).unwrap();
        let got = all_of(writer, peer);
        assert_eq!(got, "ab");
    }

    #[test]
    fn a_body_in_parts_is_one_body() {
        let (mut writer, peer) = pair();
        writer
            .respond_parts(200, &[], Some("application/json"), [b"{\"r\":", b"[1,2]", b"}"], Connection::Close)
            .unwrap();
        let got = all_of(writer, peer);
        assert!(got.contains("Content-Length: 11\r\n"), "{got}");
        assert!(got.ends_with("\r\n\r\n{\"r\":[1,2]}"), "{got}");
    }

    #[test]
    fn each_head_is_written_anew_in_the_kept_buffer() {
        let (mut writer, peer) = pair();
        let long = [("X-Long", "a".repeat(300))];
        writer.respond(404, &long, Some("text/plain"), b"first", Connection::KeepAlive(15)).unwrap();
        writer.respond(200, &[], Some("application/json"), b"{}", Connection::Close).unwrap();
        let got = all_of(writer, peer);
        let second = &got[got.find("HTTP/1.1 200").expect("a second status line")..];
        assert!(got.starts_with("HTTP/1.1 404 Not Found\r\nDate: "), "{got}");
        assert_eq!(got.matches("HTTP/1.1 ").count(), 2, "nothing of the first head is written again: {got}");
        assert!(
            got.contains("Content-Length: 5\r\nX-Long: aaa") && got.contains("Keep-Alive: timeout=15\r\n\r\nfirst")
        );
        assert!(!second.contains("X-Long") && !second.contains("Keep-Alive"), "{second}");
        assert!(second.contains("Content-Length: 2\r\nConnection: close\r\n\r\n{}"), "{second}");
    }
}
