//! Server-Sent Events: a decoder with a size limit for what downstream
//! servers send, and the encoder for what mcpgate sends to clients.

use std::io::{self, BufRead};

use crate::runtime::memory::{self, Charge};

/// One event block. `data` is empty for a priming event (an `id` alone) or a
/// block that only sets `retry`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Event {
    pub id: Option<String>,
    pub(crate) event: Option<String>,
    pub data: String,
    pub(crate) retry_ms: Option<u64>,
}

/// Reads events from a byte stream; no line and no event may exceed `limit`
/// bytes. Beyond its first 64 KiB, an event being read is charged against
/// `max_memory_mb` and may not pass a session's share of it: a server that
/// sends one line that never ends holds little.
pub struct Decoder<R> {
    reader: R,
    limit: usize,
    line: Vec<u8>,
    /// Bytes of the event being read, beyond [`FREE`].
    charge: Charge,
}

/// What an event may hold before it is charged against the memory budget.
const FREE: usize = 64 * 1024;
/// How long an event waits for room in a spent budget before it is refused.
const WAIT_FOR_ROOM: std::time::Duration = std::time::Duration::from_secs(1);

impl<R: BufRead> Decoder<R> {
    pub fn new(reader: R, limit: usize) -> Decoder<R> {
        Decoder { reader, limit, line: Vec::new(), charge: Charge::empty() }
    }

    /// Charges an event that holds `held` bytes so far.
    fn account(&mut self, held: usize) -> io::Result<()> {
        if held <= FREE + self.charge.bytes() {
            return Ok(());
        }
        let want = (held - FREE).next_multiple_of(FREE);
        if want > memory::share() {
            return Err(io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("SSE event larger than a session's share of max_memory_mb ({} bytes)", memory::share()),
            ));
        }
        // The budget is spent: wait a little for clients to take what is
        // queued for them, which slows the server down (TCP pushes back),
        // before giving up on this event.
        let deadline = std::time::Instant::now() + WAIT_FOR_ROOM;
        while !self.charge.grow(want - self.charge.bytes()) {
            if std::time::Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::OutOfMemory,
                    "mcpgate holds its limit of max_memory_mb: an SSE event could not be held",
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        Ok(())
    }

    /// The charge of the event last returned, grown to the `len` bytes of
    /// its data (its first 64 KiB were read free), for what is made of
    /// it: held as long as that lives. Not taken, it is given back when
    /// the next event is read.
    pub fn charge_for(&mut self, len: usize) -> Charge {
        let mut charge = std::mem::replace(&mut self.charge, Charge::empty());
        charge.grow_ahead(len.saturating_sub(charge.bytes()));
        charge
    }

    /// The next event block, `Ok(None)` at the end of the stream. A block
    /// cut off by the end of the stream is dropped, as the SSE rules say.
    pub fn next_event(&mut self) -> io::Result<Option<Event>> {
        // The last event went to the caller: what it held is given back.
        self.charge.shrink_to(0);
        if self.line.capacity() > FREE {
            self.line = Vec::new();
        }
        let mut event = Event::default();
        let mut has_data = false;
        let mut seen = false;
        loop {
            if !self.read_line(event.data.len())? {
                return Ok(None);
            }
            if self.line.is_empty() {
                if seen {
                    return Ok(Some(event));
                }
                continue;
            }
            if self.line[0] == b':' {
                continue;
            }
            let line = std::str::from_utf8(&self.line)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "SSE line is not UTF-8"))?;
            let (field, value) = match line.find(':') {
                Some(i) => (&line[..i], line[i + 1..].strip_prefix(' ').unwrap_or(&line[i + 1..])),
                None => (line, ""),
            };
            match field {
                "data" => {
                    if event.data.len() + value.len() + 1 > self.limit {
                        return Err(too_large(self.limit));
                    }
                    if has_data {
                        event.data.push('\n');
                    }
                    event.data.push_str(value);
                    has_data = true;
                    seen = true;
                }
                "id" if !value.contains('\0') => {
                    event.id = Some(value.to_string());
                    seen = true;
                }
                "event" => {
                    event.event = Some(value.to_string());
                    seen = true;
                }
                "retry" => {
                    if let Ok(ms) = value.parse() {
                        event.retry_ms = Some(ms);
                        seen = true;
                    }
                }
                _ => {}
            }
        }
    }

    /// Reads one line without its terminator (`\n`, `\r\n` or `\r`) into
    /// `self.line`; false at the end of the stream. `held` bytes of the
    /// event are read already.
    fn read_line(&mut self, held: usize) -> io::Result<bool> {
        self.line.clear();
        loop {
            let buf = match self.reader.fill_buf() {
                Ok(buf) => buf,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if buf.is_empty() {
                return Ok(!self.line.is_empty());
            }
            if self.line.last() == Some(&b'\r') {
                // A `\r` ended the previous read: drop a `\n` that follows it.
                self.line.pop();
                if buf[0] == b'\n' {
                    self.reader.consume(1);
                }
                return Ok(true);
            }
            match buf.iter().position(|&b| b == b'\n' || b == b'\r') {
                Some(i) if buf[i] == b'\n' => {
                    self.line.extend_from_slice(&buf[..i]);
                    self.reader.consume(i + 1);
                    return Ok(true);
                }
                Some(i) if i + 1 < buf.len() => {
                    self.line.extend_from_slice(&buf[..i]);
                    let crlf = buf[i + 1] == b'\n';
                    self.reader.consume(i + 1 + usize::from(crlf));
                    return Ok(true);
                }
                Some(i) => {
                    // `\r` at the end of the buffer: look at the next byte first.
                    self.line.extend_from_slice(&buf[..=i]);
                    self.reader.consume(i + 1);
                }
                None => {
                    let n = buf.len();
                    self.line.extend_from_slice(buf);
                    self.reader.consume(n);
                }
            }
            if self.line.len() > self.limit {
                return Err(too_large(self.limit));
            }
            self.account(held + self.line.len())?;
        }
    }
}

fn too_large(limit: usize) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("SSE event larger than {limit} bytes"))
}

/// One event as SSE text: `id`, then `data` split at line breaks.
pub fn encode(id: Option<&str>, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 32);
    if let Some(id) = id {
        out.extend_from_slice(b"id: ");
        out.extend_from_slice(id.as_bytes());
        out.push(b'\n');
    }
    let mut rest = data;
    loop {
        let end = rest.iter().position(|&b| b == b'\n' || b == b'\r').unwrap_or(rest.len());
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(&rest[..end]);
        out.push(b'\n');
        if end == rest.len() {
            break;
        }
        let skip = if rest[end] == b'\r' && rest.get(end + 1) == Some(&b'\n') { 2 } else { 1 };
        rest = &rest[end + skip..];
    }
    out.push(b'\n');
    out
}

/// A priming event: an id and empty data, so a client can resume from it.
pub(crate) fn priming(id: &str, retry_ms: Option<u64>) -> Vec<u8> {
    match retry_ms {
        Some(ms) => format!("id: {id}\nretry: {ms}\ndata: \n\n").into_bytes(),
        None => format!("id: {id}\ndata: \n\n").into_bytes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(input: &[u8], limit: usize) -> io::Result<Vec<Event>> {
        let mut d = Decoder::new(io::BufReader::with_capacity(3, input), limit);
        let mut out = Vec::new();
        while let Some(e) = d.next_event()? {
            out.push(e);
        }
        Ok(out)
    }

    fn data(events: &[Event]) -> Vec<&str> {
        events.iter().map(|e| e.data.as_str()).collect()
    }

    #[test]
    fn decodes_every_line_ending_and_multiline_data() {
        let input = b": comment\nid: 1\ndata: {\"a\":\r\ndata: 1}\r\n\r\nevent: message\rdata: x\r\rdata:y\n\n";
        let events = decode_all(input, 1024).unwrap();
        assert_eq!(data(&events), ["{\"a\":\n1}", "x", "y"]);
        assert_eq!(events[0].id.as_deref(), Some("1"));
        assert_eq!(events[1].event.as_deref(), Some("message"));
    }

    #[test]
    fn priming_and_retry_blocks_are_reported() {
        let events = decode_all(b"id: p0\nretry: 500\ndata: \n\ndata: m\n\n", 1024).unwrap();
        assert_eq!(events[0], Event { id: Some("p0".into()), event: None, data: String::new(), retry_ms: Some(500) });
        assert_eq!(events[1].data, "m");
    }

    #[test]
    fn a_block_cut_off_by_the_end_is_dropped() {
        assert_eq!(data(&decode_all(b"data: a\n\ndata: b\n", 1024).unwrap()), ["a"]);
    }

    #[test]
    fn oversized_lines_and_events_are_refused() {
        let long_line = [b"data: ".as_slice(), &[b'x'; 100], b"\n\n"].concat();
        assert!(decode_all(&long_line, 64).is_err());
        let many_lines = b"data: 0123456789\n".repeat(10);
        assert!(decode_all(&many_lines, 64).is_err());
        let endless = vec![b'x'; 10_000];
        assert!(decode_all(&endless, 64).is_err());
    }

    #[test]
    fn encode_round_trips_through_the_decoder() {
        for payload in [&b"{\"a\":1}"[..], b"{\n  \"a\": 1\r\n}", b"", b"\r\r\n\n"] {
            let encoded = encode(Some("7"), payload);
            let events = decode_all(&encoded, 1024).unwrap();
            let expected = String::from_utf8_lossy(payload).replace("\r\n", "\n").replace('\r', "\n");
            assert_eq!(events[0].data, expected, "{:?}", String::from_utf8_lossy(payload));
            assert_eq!(events[0].id.as_deref(), Some("7"));
        }
    }
}
