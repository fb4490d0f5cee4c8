//! A request of a session another instance holds, passed to that instance
//! (its `peer_url`) and its answer passed back as it comes: a `POST`'s SSE
//! events one by one, a `GET` stream for as long as either side keeps it.
//! So a balancer need not route a session's requests to its instance for
//! them to be served there: stickiness only saves this hop.
//!
//! The request goes with the headers mcpgate reads (the client's token
//! among them: the holder checks it as for any request) and
//! `Mcpgate-Forwarded`, so that an instance that gets a passed request for
//! a session it does not hold refuses it instead of passing it on again.
//! A request that never reached the holder (its connection refused) is
//! [`Unreachable`]: the caller may try again or claim the session; one that
//! reached it and broke is answered with an error, never sent twice.

use std::io::{BufRead, BufReader, Read};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use crate::http::{EventSink, HttpReply, HttpRequest, StreamReply};
use crate::protocol::jsonrpc::RpcError;
use crate::runtime::memory::Held;
use crate::runtime::threads;

use super::refusal::{self, Why};

/// The header that marks a request one instance passed to another.
pub(crate) const FORWARDED: &str = "mcpgate-forwarded";

/// The request could not reach the holder: nothing was sent.
pub(super) struct Unreachable(pub(super) String);

/// Events of a forwarded `GET` stream queued for the client.
const STREAM_QUEUE: usize = 256;
/// The most bytes of one forwarded answer or event.
const MAX_EVENT: usize = 64 << 20;

fn agent(connect: Duration, per_read: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .timeout_connect(Some(connect))
        .timeout_recv_response(Some(per_read))
        .timeout_per_read(Some(per_read))
        .max_redirects(0)
        .user_agent(concat!("mcpgate/", env!("CARGO_PKG_VERSION")))
        .build()
        .into()
}

/// Whether `e` means the request never left: the holder could not be reached.
fn never_sent(e: &ureq::Error) -> bool {
    match e {
        ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => true,
        ureq::Error::Timeout(ureq::Timeout::Connect | ureq::Timeout::Resolve) => true,
        ureq::Error::Io(io) => matches!(
            io.kind(),
            std::io::ErrorKind::ConnectionRefused
                | std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::NotConnected
                | std::io::ErrorKind::AddrNotAvailable
        ),
        _ => false,
    }
}

/// Passes `req` to the instance at `peer` and gives back its answer.
/// `me` names this instance in `Mcpgate-Forwarded`.
pub(super) fn forward(
    peer: &str,
    me: &str,
    req: &HttpRequest,
    sink: &mut dyn EventSink,
    connect: Duration,
    per_read: Duration,
    keepalive: Duration,
) -> Result<HttpReply, Unreachable> {
    let url = format!("{peer}/mcp");
    // A GET stream gets an agent of its own: shutting it down ends the stream's reader.
    let agent = agent(connect, if req.method == "GET" { keepalive * 4 } else { per_read });
    let mut builder = ureq::http::Request::builder().method(req.method.as_str()).uri(&url);
    for (name, value) in req.headers.iter().filter(|(name, _)| *name != "host") {
        builder = builder.header(name, value);
    }
    for (name, value) in &req.params {
        builder = builder.header(name.as_str(), value.as_str());
    }
    builder = builder.header(FORWARDED, me);
    let request = match builder.body(req.body.clone()) {
        Ok(request) => request,
        Err(e) => return Ok(refused(Why::Internal, &format!("cannot pass the request on: {e}"))),
    };
    let response = match agent.run(request) {
        Ok(response) => response,
        Err(e) if never_sent(&e) => return Err(Unreachable(e.to_string())),
        Err(e) => {
            return Ok(refused(
                Why::PeerFailed,
                &format!("the instance holding this session at {peer} did not answer: {e}"),
            ));
        }
    };
    let status = response.status().as_u16();
    let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
    let content_type = header("content-type").unwrap_or_default();
    let retry_after = header("retry-after");
    let sse = content_type.starts_with("text/event-stream");
    let mut body = response.into_body();
    let mut reply = if sse && req.method == "GET" {
        stream_back(agent, body.into_reader(), keepalive)
    } else if sse {
        let mut reader = BufReader::new(body.as_reader());
        while let Some(event) = next_event(&mut reader) {
            if sink.event(&event).is_err() {
                break;
            }
        }
        HttpReply::sse(Vec::new())
    } else {
        let mut bytes = Vec::new();
        match body.as_reader().take(MAX_EVENT as u64).read_to_end(&mut bytes) {
            Ok(_) if bytes.is_empty() => HttpReply::empty(status),
            Ok(_) => HttpReply::json(status, bytes),
            Err(e) => refused(Why::PeerFailed, &format!("the instance holding this session broke off its answer: {e}")),
        }
    };
    if let Some(retry) = retry_after {
        reply = reply.header("Retry-After", &retry);
    }
    Ok(reply)
}

/// One SSE event as it came (its lines and the blank line that ends it);
/// `None` at the end of the stream.
fn next_event(reader: &mut impl BufRead) -> Option<Vec<u8>> {
    let mut event = Vec::new();
    loop {
        let before = event.len();
        let read = reader.take(MAX_EVENT as u64).read_until(b'\n', &mut event).ok()?;
        if read == 0 {
            return (!event.is_empty()).then_some(event);
        }
        let line = &event[before..];
        if line == b"\n" || line == b"\r\n" {
            if event.len() == read {
                // A blank line alone: nothing to send.
                event.clear();
                continue;
            }
            return Some(event);
        }
    }
}

/// A forwarded `GET` stream: a thread reads the holder's events into a
/// queue the connection thread writes out; the client's end shuts the
/// agent down, which ends the reader.
fn stream_back(agent: ureq::Agent, body: impl Read + Send + 'static, keepalive: Duration) -> HttpReply {
    let (tx, rx) = crossbeam_channel::bounded(STREAM_QUEUE);
    let tally = Arc::new(AtomicUsize::new(0));
    let reader = threads::spawn("reader", "forward", move || {
        let mut reader = BufReader::new(body);
        while let Some(event) = next_event(&mut reader) {
            let Ok(event) = Held::new(event, &tally) else { break };
            if tx.send(event).is_err() {
                break;
            }
        }
    });
    let reader = match reader {
        Ok(handle) => handle,
        Err(e) => return refused(Why::Unavailable, &format!("mcpgate cannot start a thread now ({e})")),
    };
    HttpReply::stream(StreamReply {
        first: Vec::new(),
        rx,
        keepalive,
        on_end: Box::new(move || {
            agent.shutdown();
            threads::join_later(reader);
        }),
    })
}

fn refused(why: Why, message: &str) -> HttpReply {
    refusal::reply(why, &RpcError::internal(message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_passed_on_as_they_came_one_at_a_time() {
        let text = b"id: 1-0\nretry: 1000\ndata: \n\n\nid: 1-1\ndata: {\"a\":1}\n\n: keep-alive\n\n";
        let mut reader = BufReader::new(&text[..]);
        assert_eq!(next_event(&mut reader).unwrap(), b"id: 1-0\nretry: 1000\ndata: \n\n");
        assert_eq!(next_event(&mut reader).unwrap(), b"id: 1-1\ndata: {\"a\":1}\n\n");
        assert_eq!(next_event(&mut reader).unwrap(), b": keep-alive\n\n");
        assert!(next_event(&mut reader).is_none());
    }
}
