//! Reading one request off a connection: the head with `httparse`, inside a
//! deadline and a byte and header budget, then the body by the framing
//! rules of RFC 9112 §6: `Content-Length`, or `Transfer-Encoding: chunked`
//! alone, and nothing ambiguous. Every refusal says what was wrong; every
//! refusal of the framing ends the connection, so no second request can be
//! smuggled behind the first.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::exchange::HEADERS;
use super::stream::Stream;
use super::{Headers, Options};
use crate::runtime::memory::Charge;

/// Bytes read from the socket at a time.
const READ_SIZE: usize = 8 * 1024;
/// A chunk-size line, extensions included. Real clients send a few bytes.
const MAX_CHUNK_LINE: usize = 1024;
/// After the head, the body may take the header timeout again, plus one
/// second per this many bytes: the slowest client mcpgate waits for.
const MIN_BODY_RATE: u64 = 64 * 1024;

/// Why no request could be read.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum ReadError {
    /// The peer left, or sent nothing before the idle timeout: close without a word.
    Quiet,
    /// Answer with this status and message, then close.
    Refuse(u16, String),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Quiet => f.write_str("the peer left or sent nothing"),
            ReadError::Refuse(status, message) => write!(f, "HTTP {status}: {message}"),
        }
    }
}

impl std::error::Error for ReadError {}

/// `Mcp-Param-*`: headers mirroring a tool's arguments (2026-07-28), kept by prefix.
const PARAM_PREFIX: &str = "mcp-param-";

fn refuse(status: u16, message: impl Into<String>) -> ReadError {
    ReadError::Refuse(status, message.into())
}

/// How the body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Framing {
    None,
    Length(u64),
    Chunked,
}

/// A parsed request head.
#[derive(Debug)]
pub(super) struct Head {
    pub(crate) method: String,
    /// The path of the target, without the query (from an absolute URL too).
    pub(crate) path: String,
    /// The target's query, without `?`.
    pub(crate) query: String,
    pub(crate) http11: bool,
    /// The headers handlers may read (lower-case names from [`HEADERS`]).
    pub(crate) headers: Headers,
    /// `Mcp-Param-*` headers (2026-07-28), names in lower case, in order.
    pub(crate) params: Vec<(String, String)>,
    pub(crate) framing: Framing,
    pub(crate) expect_continue: bool,
    /// The client asked to close after this request (or speaks HTTP/1.0
    /// without asking to keep it).
    pub(crate) close: bool,
}

/// The reading side of a connection, with what was read ahead.
pub(super) struct Reader {
    stream: Arc<Stream>,
    buf: Vec<u8>,
    /// Start of the bytes not consumed yet.
    pos: usize,
    /// `httparse`'s header slots, kept between requests: `max_header_count`
    /// of them are 2 KiB or more, past the allocator's per-thread cache, so
    /// a new array per request took the allocator's shared lock each time.
    slots: Vec<httparse::Header<'static>>,
    options: Options,
}

impl Reader {
    pub(crate) fn new(stream: Arc<Stream>, options: Options) -> Reader {
        Reader { stream, buf: Vec::new(), pos: 0, slots: Vec::new(), options }
    }

    fn pending(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    fn consume(&mut self, n: usize) {
        self.pos += n;
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
            // A large body left a large buffer: give it back between requests.
            if self.buf.capacity() > 4 * READ_SIZE {
                self.buf.shrink_to(READ_SIZE);
            }
        }
    }

    /// Reads once more, waiting at most until `deadline`; the bytes read
    /// (0: the peer closed).
    fn fill(&mut self, deadline: Instant) -> io::Result<usize> {
        if self.pos > 0 && self.pos >= self.buf.len() / 2 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        let start = self.buf.len();
        self.buf.resize(start + READ_SIZE, 0);
        let read = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break Err(io::ErrorKind::TimedOut.into());
            }
            match self.stream.read_within(&mut self.buf[start..], left) {
                // mcpgate was stopped and continued (SIGSTOP, SIGCONT: a debugger, a freezer),
                // which fails a read with a timeout on Linux; the client is still there.
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                read => break read,
            }
        };
        self.buf.truncate(start + *read.as_ref().unwrap_or(&0));
        read
    }

    /// Waits for the first byte of the next request, for at most the idle
    /// timeout; false when the connection should close.
    pub(crate) fn wait_for_request(&mut self) -> bool {
        let deadline = Instant::now() + self.options.idle_timeout;
        loop {
            // Empty lines before a request line are allowed (RFC 9112 §2.2).
            let blank = self.pending().iter().take_while(|&&b| b == b'\r' || b == b'\n').count();
            self.consume(blank);
            if !self.pending().is_empty() {
                return true;
            }
            match self.fill(deadline) {
                Ok(0) | Err(_) => return false,
                Ok(_) => {}
            }
        }
    }

    /// Reads and parses a request head; the first byte is already here.
    pub(crate) fn read_head(&mut self) -> Result<Head, ReadError> {
        let options = self.options;
        let deadline = Instant::now() + options.header_timeout;
        let mut searched = 0;
        let end = loop {
            if let Some(end) = head_end(self.pending(), searched) {
                break end;
            }
            let have = self.pending().len();
            if have > options.max_header_bytes {
                return Err(too_large_head(&options));
            }
            if let Some(refusal) = early_refusal(self.pending()) {
                return Err(refusal);
            }
            searched = have.saturating_sub(3);
            match self.fill(deadline) {
                Ok(0) => return Err(ReadError::Quiet),
                Ok(_) => {}
                Err(e) if is_timeout(&e) => {
                    return Err(refuse(
                        408,
                        format!(
                            "the request head was not complete within {} s (header_timeout_secs)",
                            options.header_timeout.as_secs()
                        ),
                    ));
                }
                Err(_) => return Err(ReadError::Quiet),
            }
        };
        if end > options.max_header_bytes {
            return Err(too_large_head(&options));
        }
        let head = parse_head_with(&self.buf[self.pos..self.pos + end], &options, &mut self.slots)?;
        self.consume(end);
        Ok(head)
    }

    /// Reads the body `head` announces, at most `max_body_bytes`, charged
    /// against `max_memory_mb`; `on_continue` runs first when the client
    /// waits for `100 Continue`.
    pub(crate) fn read_body(
        &mut self,
        head: &Head,
        on_continue: impl FnOnce() -> io::Result<()>,
    ) -> Result<(Vec<u8>, Charge), ReadError> {
        let max = self.options.max_body_bytes;
        let too_large = || refuse(413, format!("request body larger than {max} bytes (max_body_bytes)"));
        let length = match head.framing {
            Framing::None => return Ok((Vec::new(), Charge::empty())),
            Framing::Length(n) if n > max as u64 => return Err(too_large()),
            Framing::Length(n) => n as usize,
            Framing::Chunked => 0,
        };
        let mut charge = Charge::new(length).ok_or_else(no_memory)?;
        if head.expect_continue && self.pending().is_empty() && on_continue().is_err() {
            return Err(ReadError::Quiet);
        }
        let (started, header_timeout) = (Instant::now(), self.options.header_timeout);
        let deadline =
            move |received: usize| started + header_timeout + Duration::from_secs(received as u64 / MIN_BODY_RATE);
        match head.framing {
            Framing::Chunked => self.read_chunked(max, deadline, &mut charge).map(|body| (body, charge)),
            _ => {
                let until = deadline(length);
                let mut body = Vec::with_capacity(length.min(READ_SIZE * 8));
                while body.len() < length {
                    if self.pending().is_empty() {
                        self.fill_body(until)?;
                    }
                    let take = self.pending().len().min(length - body.len());
                    body.extend_from_slice(&self.pending()[..take]);
                    self.consume(take);
                }
                Ok((body, charge))
            }
        }
    }

    /// Reads more of a body, or says why it cannot be finished.
    fn fill_body(&mut self, deadline: Instant) -> Result<(), ReadError> {
        match self.fill(deadline) {
            Ok(0) => Err(ReadError::Quiet),
            Ok(_) => Ok(()),
            Err(e) if is_timeout(&e) => Err(refuse(408, "the request body arrived too slowly (header_timeout_secs)")),
            Err(_) => Err(ReadError::Quiet),
        }
    }

    fn read_chunked(
        &mut self,
        max: usize,
        deadline: impl Fn(usize) -> Instant,
        charge: &mut Charge,
    ) -> Result<Vec<u8>, ReadError> {
        let mut body = Vec::new();
        loop {
            let line = self.read_line(MAX_CHUNK_LINE, deadline(body.len()), "a chunk-size line")?;
            let size = chunk_size(&line).ok_or_else(|| refuse(400, "invalid chunk size line"))?;
            if size == 0 {
                break;
            }
            if size > (max - body.len()) as u64 {
                return Err(refuse(413, format!("request body larger than {max} bytes (max_body_bytes)")));
            }
            if !charge.grow(size as usize) {
                return Err(no_memory());
            }
            let mut left = size as usize;
            while left > 0 {
                if self.pending().is_empty() {
                    self.fill_body(deadline(body.len()))?;
                }
                let take = self.pending().len().min(left);
                body.extend_from_slice(&self.pending()[..take]);
                self.consume(take);
                left -= take;
            }
            let end = self.read_line(2, deadline(body.len()), "the end of a chunk")?;
            if !end.is_empty() {
                return Err(refuse(400, "a chunk is longer than its size says"));
            }
        }
        // Trailer fields: read within the head's budget, and ignored.
        let (mut count, mut bytes) = (0, 0);
        loop {
            let line = self.read_line(self.options.max_header_bytes, deadline(body.len()), "a trailer field")?;
            if line.is_empty() {
                return Ok(body);
            }
            count += 1;
            bytes += line.len();
            if count > self.options.max_header_count || bytes > self.options.max_header_bytes {
                return Err(refuse(431, "trailer fields over the header limits (max_header_count, max_header_bytes)"));
            }
        }
    }

    /// One line without its CRLF (or LF), at most `max` bytes before it.
    fn read_line(&mut self, max: usize, deadline: Instant, what: &str) -> Result<Vec<u8>, ReadError> {
        let mut searched = 0;
        loop {
            if let Some(at) = self.pending()[searched..].iter().position(|&b| b == b'\n') {
                let at = searched + at;
                let mut line = self.pending()[..at].to_vec();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                if line.len() > max {
                    return Err(refuse(400, format!("{what} is longer than {max} bytes")));
                }
                self.consume(at + 1);
                return Ok(line);
            }
            searched = self.pending().len();
            if searched > max + 1 {
                return Err(refuse(400, format!("{what} is longer than {max} bytes")));
            }
            self.fill_body(deadline)?;
        }
    }
}

/// `1*HEXDIG [ BWS ";" chunk-ext ]`: the size, extensions ignored.
fn chunk_size(line: &[u8]) -> Option<u64> {
    let digits = line.split(|&b| b == b';').next()?.trim_ascii_end();
    if digits.is_empty() || digits.len() > 15 || !digits.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
}

fn no_memory() -> ReadError {
    refuse(503, "mcpgate holds its limit of max_memory_mb; retry shortly")
}

fn too_large_head(options: &Options) -> ReadError {
    refuse(431, format!("request head larger than {} bytes (max_header_bytes)", options.max_header_bytes))
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

/// Where the head ends (just past its blank line), looking from `from`.
fn head_end(bytes: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while let Some(at) = bytes.get(i..)?.iter().position(|&b| b == b'\n') {
        let nl = i + at;
        match bytes.get(nl + 1) {
            Some(b'\n') => return Some(nl + 2),
            Some(b'\r') if bytes.get(nl + 2) == Some(&b'\n') => return Some(nl + 3),
            Some(_) => i = nl + 1,
            None => return None,
        }
    }
    None
}

#[cfg(test)]
fn parse_head(bytes: &[u8], options: &Options) -> Result<Head, ReadError> {
    parse_head_with(bytes, options, &mut Vec::new())
}

/// Parses a head with the header slots in `slots`, which it gives back
/// empty-handed: the parsed head owns what it keeps.
fn parse_head_with(
    bytes: &[u8],
    options: &Options,
    slots: &mut Vec<httparse::Header<'static>>,
) -> Result<Head, ReadError> {
    // The same allocation each time (a map to a type of the same layout
    // collects in place), borrowed from `bytes` only while it parses.
    let mut borrowed: Vec<httparse::Header<'_>> =
        std::mem::take(slots).into_iter().map(|_| httparse::EMPTY_HEADER).collect();
    borrowed.resize(options.max_header_count, httparse::EMPTY_HEADER);
    let head = parse_head_in(bytes, options, &mut borrowed);
    *slots = borrowed.into_iter().map(|_| httparse::EMPTY_HEADER).collect();
    head
}

fn parse_head_in<'b>(
    bytes: &'b [u8],
    options: &Options,
    slots: &mut [httparse::Header<'b>],
) -> Result<Head, ReadError> {
    // A lone LF may end a line (RFC 9112 §2.2), but a proxy in front may
    // read it otherwise: refusing it leaves no room to disagree.
    if bytes.iter().enumerate().any(|(i, &b)| b == b'\n' && (i == 0 || bytes[i - 1] != b'\r')) {
        return Err(refuse(400, "malformed request: line ends must be CRLF"));
    }
    let mut req = httparse::Request::new(slots);
    match req.parse(bytes) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(refuse(400, "incomplete request head")),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(refuse(
                431,
                format!("more than {} request headers (max_header_count)", options.max_header_count),
            ));
        }
        Err(httparse::Error::Version) if bytes.starts_with(b"PRI * HTTP/2") || looks_like_request_line(bytes) => {
            return Err(refuse(505, "mcpgate speaks HTTP versions 1.1 and 1.0 only"));
        }
        Err(e) => return Err(refuse(400, format!("malformed request: {e}"))),
    }
    let method = req.method.unwrap_or_default().to_string();
    let http11 = req.version == Some(1);
    let path = target_path(req.path.unwrap_or_default(), &method)?;
    let query = req.path.unwrap_or_default().split_once('?').map(|(_, q)| q.to_string()).unwrap_or_default();
    let mut headers = Headers::with_capacity(bytes.len());
    let mut params: Vec<(String, String)> = Vec::new();
    let mut length: Option<u64> = None;
    let mut codings: Vec<String> = Vec::new();
    let mut hosts = 0;
    let (mut close, mut keep_alive, mut expect_continue) = (!http11, false, false);
    for header in req.headers.iter() {
        let name = header.name;
        if name.eq_ignore_ascii_case("content-length") {
            if header.value.trim_ascii().is_empty() {
                return Err(refuse(400, "Content-Length is empty"));
            }
            for value in header.value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                let n = content_length(value)?;
                if length.is_some_and(|l| l != n) {
                    return Err(refuse(400, "Content-Length is given twice with different values"));
                }
                length = Some(n);
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            codings.extend(split_list(header.value).map(|c| String::from_utf8_lossy(c).to_ascii_lowercase()));
        } else if name.eq_ignore_ascii_case("connection") {
            for token in split_list(header.value) {
                close |= token.eq_ignore_ascii_case(b"close");
                keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case("expect") {
            if !header.value.eq_ignore_ascii_case(b"100-continue") {
                return Err(refuse(417, "the only expectation mcpgate meets is 100-continue"));
            }
            expect_continue = true;
        }
        if name.eq_ignore_ascii_case("host") {
            hosts += 1;
        }
        if name.len() > PARAM_PREFIX.len() && name[..PARAM_PREFIX.len()].eq_ignore_ascii_case(PARAM_PREFIX) {
            let Ok(value) = std::str::from_utf8(header.value) else {
                return Err(refuse(400, format!("header `{name}` is not valid UTF-8")));
            };
            let name = name.to_ascii_lowercase();
            if params.iter().any(|(n, _)| *n == name) {
                return Err(refuse(400, format!("header `{name}` is given more than once")));
            }
            params.push((name, value.trim().to_string()));
        }
        if let Some(known) = HEADERS.iter().find(|h| name.eq_ignore_ascii_case(h)) {
            let Ok(value) = std::str::from_utf8(header.value) else {
                return Err(refuse(400, format!("header `{known}` is not valid UTF-8")));
            };
            match headers.get(known) {
                // A list may come in several lines (RFC 9110 §5.3); the others are single values.
                Some(_) if *known == "accept" => headers.join(known, value.trim()),
                // One Cookie header is all a browser sends (RFC 6265 §5.4); a second is left
                // unread rather than refused: only the sign-in pages read it.
                Some(_) if *known == "cookie" => {}
                Some(_) => return Err(refuse(400, format!("header `{known}` is given more than once"))),
                None => headers.push(known, value.trim()),
            }
        }
    }
    if http11 && hosts != 1 {
        return Err(refuse(400, "an HTTP/1.1 request needs exactly one Host header"));
    }
    if !http11 && keep_alive {
        close = false;
    }
    let framing = framing(&codings, length, http11)?;
    Ok(Head { method, path, query, http11, headers, params, framing, expect_continue, close })
}

/// What can be refused before the head is complete: bytes that cannot
/// start an HTTP request (a TLS handshake, an SSH banner), or a complete
/// request line that is wrong. Such peers would otherwise wait for a blank
/// line that never comes.
fn early_refusal(pending: &[u8]) -> Option<ReadError> {
    let line_end = pending.iter().position(|&b| b == b'\n');
    let line = &pending[..line_end.map_or(pending.len(), |i| i + 1)];
    let method = &line[..line.iter().position(|&b| b == b' ').unwrap_or(line.len())];
    if !method.iter().all(|&b| is_tchar(b)) {
        return Some(refuse(400, "malformed request: this is not an HTTP request line"));
    }
    line_end?;
    let mut no_headers = [];
    match httparse::Request::new(&mut no_headers).parse(line) {
        Ok(_) | Err(httparse::Error::TooManyHeaders) => None,
        Err(httparse::Error::Version) if looks_like_request_line(line) => {
            Some(refuse(505, "mcpgate speaks HTTP versions 1.1 and 1.0 only"))
        }
        Err(e) => Some(refuse(400, format!("malformed request: {e}"))),
    }
}

/// A token character (RFC 9110 §5.6.2).
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A request line that is well formed but for its version (`HTTP/2.0`):
/// such a client gets 505, anything else 400.
fn looks_like_request_line(bytes: &[u8]) -> bool {
    let line = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
    let mut parts = line.trim_ascii_end().split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    !method.is_empty()
        && method.iter().all(u8::is_ascii_uppercase)
        && !target.is_empty()
        && version.starts_with(b"HTTP/")
        && version[5..].iter().all(|b| b.is_ascii_digit() || *b == b'.')
}

/// RFC 9112 §6.1 and §6.3: only `chunked`, once and alone, and never with
/// `Content-Length`; HTTP/1.0 has no transfer codings at all.
fn framing(codings: &[String], length: Option<u64>, http11: bool) -> Result<Framing, ReadError> {
    if codings.is_empty() {
        return Ok(length.map_or(Framing::None, Framing::Length));
    }
    if !http11 {
        return Err(refuse(400, "Transfer-Encoding in an HTTP/1.0 request"));
    }
    if length.is_some() {
        return Err(refuse(400, "Transfer-Encoding and Content-Length together"));
    }
    if let Some(other) = codings.iter().find(|c| *c != "chunked") {
        return Err(refuse(501, format!("transfer coding `{other}` is not supported; use chunked or Content-Length")));
    }
    if codings.len() > 1 {
        return Err(refuse(400, "the chunked transfer coding is applied more than once"));
    }
    Ok(Framing::Chunked)
}

/// Digits only: no sign, no spaces inside, no hex (RFC 9110 §8.6).
fn content_length(value: &[u8]) -> Result<u64, ReadError> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return Err(refuse(400, "Content-Length is not a valid length"));
    }
    // Beyond u64: larger than any body mcpgate takes.
    Ok(std::str::from_utf8(value).ok().and_then(|v| v.parse().ok()).unwrap_or(u64::MAX))
}

/// The members of a comma-separated header value, trimmed, empty ones skipped.
fn split_list(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(<[u8]>::trim_ascii).filter(|v| !v.is_empty())
}

/// The path of a request target: origin form (`/mcp?x`), absolute form
/// (`http://host:port/mcp`, RFC 9112 §3.2.2), or `*` for OPTIONS.
fn target_path(target: &str, method: &str) -> Result<String, ReadError> {
    let path = if target.starts_with('/') {
        target
    } else if target == "*" && method == "OPTIONS" {
        return Ok("*".into());
    } else {
        let lower = target.get(..8).unwrap_or(target).to_ascii_lowercase();
        let rest = if lower.starts_with("http://") {
            &target[7..]
        } else if lower.starts_with("https://") {
            &target[8..]
        } else {
            return Err(refuse(400, "the request target must be a path or an http(s) URL"));
        };
        match rest.find(['/', '?']) {
            Some(at) if rest[at..].starts_with('/') => &rest[at..],
            _ => "/",
        }
    };
    Ok(path.split('?').next().unwrap_or("/").to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> Options {
        Options {
            max_connections: 4,
            max_body_bytes: 1024,
            max_header_count: 8,
            max_header_bytes: 512,
            idle_timeout: Duration::from_secs(1),
            header_timeout: Duration::from_secs(1),
            write_timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn the_header_slots_are_one_allocation_for_every_request() {
        let mut slots = Vec::new();
        let head = |text: &str, slots: &mut Vec<httparse::Header<'static>>| {
            parse_head_with(text.as_bytes(), &options(), slots).map(|h| h.path)
        };
        assert_eq!(head("GET /a HTTP/1.1\r\nHost: h\r\n\r\n", &mut slots), Ok("/a".to_string()));
        let (at, capacity) = (slots.as_ptr(), slots.capacity());
        assert!(capacity >= options().max_header_count);
        let nine = "GET / HTTP/1.1\r\nHost: h\r\n".to_string() + &"X-A: 1\r\n".repeat(8) + "\r\n";
        assert!(matches!(head(&nine, &mut slots), Err(ReadError::Refuse(431, _))));
        assert_eq!(head("GET /b HTTP/1.1\r\nHost: h\r\n\r\n", &mut slots), Ok("/b".to_string()));
        assert_eq!((slots.as_ptr(), slots.capacity()), (at, capacity));
    }

    fn head(text: &str) -> Result<Head, ReadError> {
        parse_head(text.as_bytes(), &options())
    }

    fn status(text: &str) -> u16 {
        match head(text) {
            Ok(_) => 200,
            Err(ReadError::Refuse(status, _)) => status,
            Err(ReadError::Quiet) => 0,
        }
    }

    #[test]
    fn framing_follows_rfc_9112() {
        let cases = [
            ("Content-Length: 5\r\n", 200),
            ("Content-Length: 5\r\nContent-Length: 5\r\n", 200),
            ("Content-Length: 5, 5\r\n", 200),
            ("Content-Length: 5\r\nContent-Length: 6\r\n", 400),
            ("Content-Length: 5, 6\r\n", 400),
            ("Content-Length: +5\r\n", 400),
            ("Content-Length: -1\r\n", 400),
            ("Content-Length: 0x10\r\n", 400),
            ("Content-Length: 1 0\r\n", 400),
            ("Content-Length:\r\n", 400),
            ("Transfer-Encoding: chunked\r\n", 200),
            ("Transfer-Encoding: Chunked\r\n", 200),
            ("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", 400),
            ("Transfer-Encoding: chunked, chunked\r\n", 400),
            ("Transfer-Encoding: gzip, chunked\r\n", 501),
            ("Transfer-Encoding: identity\r\n", 501),
            ("Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", 400),
        ];
        for (headers, expected) in cases {
            let text = format!("POST /mcp HTTP/1.1\r\nHost: h\r\n{headers}\r\n");
            assert_eq!(status(&text), expected, "{headers:?}");
        }
        assert_eq!(status("POST /mcp HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);
        assert_eq!(
            head("POST /mcp HTTP/1.1\r\nHost: h\r\nContent-Length: 7\r\n\r\n").unwrap().framing,
            Framing::Length(7)
        );
    }

    #[test]
    fn request_lines_get_505_or_400() {
        assert_eq!(status("GET /healthz HTTP/2.0\r\n\r\n"), 505);
        assert_eq!(status("GET /healthz HTTP/3\r\n\r\n"), 505);
        assert_eq!(status("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 505);
        assert_eq!(status("\x16\x03\x01\x02\x00\r\n\r\n"), 400);
        assert_eq!(status("GET /healthz\r\n\r\n"), 400);
        assert_eq!(status("GET /healthz HTTP/1.1\r\n\r\n"), 400, "no Host");
        assert_eq!(status("GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), 400);
        assert_eq!(status("GET /healthz HTTP/1.0\r\n\r\n"), 200);
        assert_eq!(status("GET /healthz HTTP/1.1\nHost: x\n\n"), 400, "bare LF");
    }

    #[test]
    fn what_cannot_be_http_is_refused_before_the_head_ends() {
        let early = |bytes: &[u8]| match early_refusal(bytes) {
            Some(ReadError::Refuse(status, _)) => status,
            _ => 0,
        };
        assert_eq!(early(b"\x16\x03\x01\x00\xa5\x01"), 400, "TLS");
        assert_eq!(early(b"SSH-2.0-OpenSSH_9.6\r\n"), 400, "SSH");
        assert_eq!(early(b"GET /healthz HTTP/2.0\r\n"), 505);
        assert_eq!(early(b"GET /healthz HTTP/1.1\r\nHost: x"), 0);
        assert_eq!(early(b"GET /heal"), 0);
        assert_eq!(early(b"POST"), 0);
    }

    #[test]
    fn targets_in_origin_and_absolute_form() {
        let path = |target: &str| target_path(target, "GET").map_err(|_| ());
        assert_eq!(path("/mcp?x=1"), Ok("/mcp".into()));
        assert_eq!(path("http://127.0.0.1:8780/healthz"), Ok("/healthz".into()));
        assert_eq!(path("HTTPS://gate.example.com/mcp?q"), Ok("/mcp".into()));
        assert_eq!(path("http://gate.example.com"), Ok("/".into()));
        assert_eq!(path("http://gate.example.com?x"), Ok("/".into()));
        assert_eq!(path("ftp://x/"), Err(()));
        assert_eq!(path("*"), Err(()));
        assert_eq!(target_path("*", "OPTIONS").map_err(|_| ()), Ok("*".into()));
    }

    #[test]
    fn accept_lines_are_joined_and_the_other_values_stay_whole() {
        let text = "POST /mcp HTTP/1.1\r\nHost: h\r\nAccept: application/json\r\nOrigin: o\r\nAccept:  text/event-stream \r\nMcp-Session-Id: s\r\n\r\n";
        let h = head(text).unwrap();
        let got: Vec<_> = h.headers.iter().collect();
        let accept = ("accept", "application/json, text/event-stream");
        assert_eq!(got, [("host", "h"), accept, ("origin", "o"), ("mcp-session-id", "s")]);
        assert_eq!(h.headers.get("origin"), Some("o"));
    }

    #[test]
    fn headers_are_counted_and_known_ones_copied() {
        let many: String = (0..9).map(|i| format!("X-{i}: v\r\n")).collect();
        assert_eq!(status(&format!("GET / HTTP/1.1\r\nHost: h\r\n{many}\r\n")), 431);
        let h = head("GET /mcp HTTP/1.1\r\nHost: h\r\nMcp-Session-Id: abc \r\nX-Other: 1\r\n\r\n").unwrap();
        assert_eq!(h.headers.iter().collect::<Vec<_>>(), [("host", "h"), ("mcp-session-id", "abc")]);
        let not_utf8 = parse_head(b"GET /mcp HTTP/1.1\r\nHost: h\r\nOrigin: \xff\r\n\r\n", &options());
        assert!(matches!(not_utf8, Err(ReadError::Refuse(400, _))), "{not_utf8:?}");
        assert_eq!(status("GET /mcp HTTP/1.1\r\nHost: h\r\nExpect: 200-ok\r\n\r\n"), 417);
        assert!(head("GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n").unwrap().close);
        assert!(head("GET / HTTP/1.0\r\n\r\n").unwrap().close);
        assert!(!head("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").unwrap().close);
    }

    #[test]
    fn chunk_sizes_are_hex_with_optional_extensions() {
        assert_eq!(chunk_size(b"1a"), Some(26));
        assert_eq!(chunk_size(b"0"), Some(0));
        assert_eq!(chunk_size(b"10;name=value"), Some(16));
        assert_eq!(chunk_size(b"10 ;x"), Some(16));
        for bad in [&b""[..], b"+5", b"-1", b"0x10", b"g", b"1000000000000000", b" 5"] {
            assert_eq!(chunk_size(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn the_end_of_a_head_is_found_with_either_line_ending() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: h\r\n\r\nrest", 0), Some(27));
        assert_eq!(head_end(b"GET / HTTP/1.1\nHost: h\n\nrest", 0), Some(24));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: h\r\n", 0), None);
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: h\r\n\r", 0), None);
    }
}
