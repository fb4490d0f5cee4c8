//! The stream of one HTTP+SSE session, read by its reader thread: the
//! `endpoint` event first, then every message of the server's, each handed
//! to the session's [`Correlator`], which sends it where it belongs. When
//! the stream ends while the session is open, the calls waiting on it fail
//! with an error naming why, and its client session is told it lost it.

use std::io::BufReader;
use std::sync::{Arc, Weak};

use crossbeam_channel::{Receiver, Sender, TryRecvError};

use super::origin;
use crate::downstream::correlate::{Correlator, Incoming, Routed};
use crate::downstream::http;
use crate::downstream::{DownstreamError, Inbox, Server};
use crate::limited;
use crate::protocol::jsonrpc::{self, Message, RpcError};
use crate::protocol::sse;

/// The server's id for a session: the `sessionId` (TypeScript SDK) or
/// `session_id` (Python SDK) of its endpoint URL, else the URL.
pub(super) fn session_of(post_url: &str) -> String {
    let query = post_url.split_once('?').map_or("", |(_, query)| query);
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(name, value)| {
            (name.eq_ignore_ascii_case("sessionid") || name.eq_ignore_ascii_case("session_id")) && !value.is_empty()
        })
        .map_or_else(|| post_url.to_string(), |(_, value)| value.to_string())
}

/// What the reader needs to answer the server itself (a `ping`, a request
/// nobody can take).
struct Answers<'a> {
    server: &'a Server,
    http: &'a http::Endpoint,
    post_url: Option<String>,
}

impl Answers<'_> {
    fn send(&self, body: &[u8]) {
        let Some(url) = &self.post_url else { return };
        let sent = self.http.post_to(&self.http.short_agent(), url, None, body).map(|response| {
            let _ = response.into_body().with_config().limit(64 * 1024).read_to_vec();
        });
        if let Err(e) = sent {
            limited!(warn, "server `{}`: answering on its HTTP+SSE session failed: {e}", self.server.name());
        }
    }
}

/// The reader thread's work: reads `response` (the stream of `stream_url`)
/// until it ends or `stop` disconnects. The first `endpoint` event, resolved,
/// goes to `found` (or why it is refused, or why the stream ended first).
pub(super) fn read(
    server: &Arc<Server>,
    http: &http::Endpoint,
    calls: &Correlator,
    response: ureq::http::Response<ureq::Body>,
    stream_url: &str,
    found: Sender<Result<String, String>>,
    stop: &Receiver<()>,
) {
    let name = server.name();
    let mut found = Some(found);
    let mut answers = Answers { server, http, post_url: None };
    let reader = BufReader::with_capacity(4 * 1024, response.into_body().into_reader());
    let mut decoder = sse::Decoder::new(reader, server.limits.max_message);
    // Ends with the stream: the close path shuts its agent down.
    let why = loop {
        let event = match decoder.next_event() {
            Ok(Some(event)) => event,
            Ok(None) => break "the server closed it".to_string(),
            Err(e) => break format!("reading it failed: {e}"),
        };
        match event.event.as_deref() {
            Some("endpoint") => match found.take() {
                Some(found) => {
                    let resolved = origin::resolve(stream_url, &event.data);
                    answers.post_url = resolved.as_ref().ok().cloned();
                    let refused = resolved.is_err();
                    let _ = found.send(resolved);
                    if refused {
                        // The opener stops this stream.
                        return;
                    }
                }
                None => log::debug!("server `{name}`: a second `endpoint` event ignored"),
            },
            None | Some("message") if !event.data.trim().is_empty() => {
                if answers.post_url.is_none() {
                    limited!(warn, "server `{name}`: a message before its `endpoint` event; ignored");
                    continue;
                }
                let charge = decoder.charge_for(event.data.len());
                match Message::parse_text(event.data, charge) {
                    Ok(message) => hand_over(server, calls, &answers, message),
                    Err(e) => {
                        limited!(
                            warn,
                            "server `{name}`: its SSE stream carried an invalid message ({}); ignored",
                            e.message
                        )
                    }
                }
            }
            _ => {}
        }
    };
    if let Some(found) = found {
        let _ = found.send(Err(format!("its stream ended before its `endpoint` event ({why})")));
    }
    let stopping = matches!(stop.try_recv(), Err(TryRecvError::Disconnected));
    let lost = end(calls, &why);
    if stopping {
        return;
    }
    // Before its session listened, the opening fails with this, and says so.
    let Some(inbox) = lost.and_then(|inbox| inbox.upgrade()) else {
        log::debug!("server `{name}`: its HTTP+SSE stream ended ({why}) while the session opened");
        return;
    };
    limited!(
        warn,
        "server `{name}`: its HTTP+SSE stream ended ({why}): the calls waiting on it fail, and the session is opened \
         anew"
    );
    inbox.lost(server, answers.post_url.as_deref().map(session_of).as_deref());
}

/// The stream ended, `why`: the calls waiting fail with it (or as closed,
/// when the session is closing); the inbox of its session, to be told it
/// lost it (none when it is closing, or never listened).
fn end(calls: &Correlator, why: &str) -> Option<Weak<dyn Inbox>> {
    let (waiting, inbox, stopping) = calls.end(why);
    let error = || match stopping {
        true => DownstreamError::Closed,
        false => DownstreamError::Protocol(format!("its SSE stream ended before the response ({why})")),
    };
    for tx in waiting {
        let _ = tx.try_send(Incoming::Ended(error()));
    }
    inbox
}

/// Hands a message of the server's to the correlator, and does what is
/// left: answers its `ping`, refuses a request no client can take.
fn hand_over(server: &Arc<Server>, calls: &Correlator, answers: &Answers<'_>, message: Message) {
    match calls.route(server, message) {
        Routed::Reply(body) => answers.send(&body),
        Routed::Refuse(message) => refuse(server, answers, &message),
        Routed::Done | Routed::Ignored | Routed::Own(_) => {}
    }
}

/// Answers a request of the server's that no client can take with an error
/// that says so.
fn refuse(server: &Server, answers: &Answers<'_>, message: &Message) {
    let Some(id) = &message.id else { return };
    let error = RpcError::internal(format!(
        "mcpgate cannot pass `{}` to a client: its client session is closing, or sent too much before it listened",
        message.method()
    ));
    answers.send(&jsonrpc::error(id, &error));
    limited!(warn, "server `{}`: a `{}` request refused: no client to take it", server.name(), message.method());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_id_is_the_endpoints_own() {
        assert_eq!(session_of("http://h/message?sessionId=abc-1"), "abc-1");
        assert_eq!(session_of("http://h/messages/?x=1&session_id=0f1e"), "0f1e");
        assert_eq!(session_of("http://h/m/42?sessionid="), "http://h/m/42?sessionid=");
        assert_eq!(session_of("http://h/m/42"), "http://h/m/42");
    }
}
