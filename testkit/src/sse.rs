//! Server-sent events, read after the specification (WHATWG HTML, "Server-sent
//! events"): lines ending in LF or CRLF, `field: value` with one leading
//! space dropped from the value, comments (`:`) skipped, an event dispatched
//! at a blank line, an event cut off by the end of the stream dropped.

use std::io::{BufRead, Read};

use serde_json::Value;

/// One event: its `data` lines joined with `\n`, its `id` and `event` when given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Event {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
}

/// Reads events off a stream, one at a time as they come.
pub struct Decoder<R> {
    reader: R,
    /// The most bytes one event may take, blank lines and comments before it included.
    limit: usize,
    /// Bytes read so far.
    read: usize,
    /// Bytes read up to the end of the last blank line: what complete events took.
    settled: usize,
}

impl<R: BufRead> Decoder<R> {
    pub fn new(reader: R, limit: usize) -> Decoder<R> {
        Decoder { reader, limit, read: 0, settled: 0 }
    }

    /// The next event; `None` at the end of the stream (an event it cut
    /// short is dropped); an error when reading fails or an event is over
    /// the limit.
    pub fn next_event(&mut self) -> std::io::Result<Option<Event>> {
        let mut event = Event::default();
        let mut data: Vec<String> = Vec::new();
        let mut fields = false;
        let mut size = 0;
        let mut line = Vec::new();
        // Each turn reads at least one byte, and at most `limit` in all.
        loop {
            line.clear();
            let room = (self.limit - size) as u64 + 1;
            let n = self.reader.by_ref().take(room).read_until(b'\n', &mut line)?;
            self.read += n;
            size += n;
            if size > self.limit {
                let e = format!("an SSE event over {} bytes", self.limit);
                return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e));
            }
            if line.last() != Some(&b'\n') {
                return Ok(None);
            }
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if line.is_empty() {
                self.settled = self.read;
                if fields {
                    event.data = data.join("\n");
                    return Ok(Some(event));
                }
                continue;
            }
            let line = String::from_utf8_lossy(&line);
            if line.starts_with(':') {
                continue;
            }
            fields = true;
            let (name, value) = line.split_once(':').unwrap_or((&line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match name {
                "data" => data.push(value.to_owned()),
                "id" if !value.contains('\0') => event.id = Some(value.to_owned()),
                "event" => event.event = Some(value.to_owned()),
                _ => {}
            }
        }
    }
}

/// The `data` of the complete SSE events in `text` (comments and events
/// without data left out) as JSON, and how many bytes the complete events
/// took; panics on data that is not JSON.
pub fn sse_events(text: &str) -> (Vec<Value>, usize) {
    let mut decoder = Decoder::new(text.as_bytes(), text.len());
    let mut events = Vec::new();
    while let Ok(Some(event)) = decoder.next_event() {
        if !event.data.is_empty() {
            events.push(json_of(&event.data));
        }
    }
    (events, decoder.settled)
}

/// SSE data as JSON; panics when it is not.
pub(crate) fn json_of(data: &str) -> Value {
    serde_json::from_str(data).unwrap_or_else(|e| panic!("SSE data is not JSON ({e}): {data}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(text: &str) -> Vec<Event> {
        let mut decoder = Decoder::new(text.as_bytes(), 1 << 10);
        let mut events = Vec::new();
        for _ in 0..100 {
            match decoder.next_event() {
                Ok(Some(event)) => events.push(event),
                _ => break,
            }
        }
        events
    }

    #[test]
    fn fields_lines_and_comments_as_the_specification_reads_them() {
        let events = all(": hello\r\nid: 7\r\ndata: a\r\ndata:  b\r\n\r\nid:8\n\nevent: x\ndata\n\n");
        let data = |e: &Event| (e.id.clone(), e.event.clone(), e.data.clone());
        assert_eq!(
            events.iter().map(data).collect::<Vec<_>>(),
            [
                (Some("7".into()), None, "a\n b".into()),
                (Some("8".into()), None, String::new()),
                (None, Some("x".into()), String::new()),
            ]
        );
    }

    #[test]
    fn an_event_cut_off_is_dropped_and_an_oversized_one_is_an_error() {
        assert_eq!(all("data: 1\n\ndata: 2\n").len(), 1);
        let mut decoder = Decoder::new("data: 0123456789\n\n".as_bytes(), 8);
        assert!(decoder.next_event().is_err());
    }

    #[test]
    fn sse_events_counts_the_bytes_of_complete_blocks() {
        let text = "data: {\"a\":1}\n\n: ping\n\ndata: {\"b\"";
        assert_eq!(sse_events(text), (vec![serde_json::json!({"a": 1})], 23));
    }
}
