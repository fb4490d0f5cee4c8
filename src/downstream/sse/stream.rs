//! The stream of one HTTP+SSE session, read by its reader thread: the
//! `endpoint` event first, then every message of the server's, each sent
//! where it belongs (the routing table is [`Shared`]). When the stream ends
//! while the session is open, the calls waiting on it fail with an error
//! naming why, and its client session is told it lost it.

use std::collections::HashMap;
use std::io::BufReader;
use std::sync::{Arc, Weak};

use crossbeam_channel::{Receiver, Sender, TryRecvError, bounded};
use parking_lot::Mutex;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::origin;
use crate::downstream::http;
use crate::downstream::stdio::{keep_early, token_key};
use crate::downstream::{DownstreamError, Inbox, Server};
use crate::limited;
use crate::protocol::jsonrpc::{self, Kind, Message, RpcError};
use crate::protocol::sse;

/// Messages queued for one waiting call before the reader waits for it (TCP
/// then slows the server down).
const CALL_QUEUE: usize = 64;

/// What arrives for a call waiting on the stream.
pub(super) enum Incoming {
    Message(Message),
    /// The stream ended (or the session is closing) before the response.
    Ended(DownstreamError),
}

/// The routing table of one session, shared by its requests and its reader.
#[derive(Default)]
pub(super) struct Shared {
    /// Guards the calls waiting and where other messages go; held only to
    /// add, take or look, never across I/O.
    routes: Mutex<Routes>,
}

#[derive(Default)]
struct Routes {
    /// Calls waiting for their response, by their id (as JSON text).
    waiting: HashMap<String, Waiting>,
    /// Progress tokens of the calls waiting, to the call's id.
    tokens: HashMap<String, String>,
    /// The client session's inbox, once it listens.
    inbox: Option<Weak<dyn Inbox>>,
    /// What came before it listened, delivered when it does (a server that
    /// asks for the roots as soon as it is initialized).
    early: Vec<Message>,
    /// Why the stream ended, once it did: nothing can be sent any more.
    ended: Option<String>,
    /// The close path began: nothing is delivered any more.
    stopping: bool,
}

struct Waiting {
    tx: Sender<Incoming>,
    /// Whether the caller's answer carries what the server asks meanwhile
    /// (see `stdio::carries`).
    carries: bool,
    token: Option<String>,
}

/// Where a message that is not a response goes.
enum Target {
    Call(Sender<Incoming>),
    Inbox(Arc<dyn Inbox>),
    /// Kept until the session listens.
    Kept,
    Nobody,
}

impl Shared {
    /// Registers the call `id`; its messages and response arrive on the
    /// receiver. Refused when the stream ended (nothing was sent: a new
    /// session may take the call) or the session is closing.
    pub(super) fn expect(
        &self,
        id: &Value,
        params: Option<&RawValue>,
        carries: bool,
    ) -> Result<Receiver<Incoming>, DownstreamError> {
        let (tx, rx) = bounded(CALL_QUEUE);
        let token = params.and_then(progress_token);
        let mut routes = self.routes.lock();
        if routes.stopping {
            return Err(DownstreamError::Closed);
        }
        if routes.ended.is_some() {
            return Err(DownstreamError::SessionGone);
        }
        let key = id.to_string();
        if let Some(token) = &token {
            routes.tokens.insert(token.clone(), key.clone());
        }
        routes.waiting.insert(key, Waiting { tx, carries, token });
        Ok(rx)
    }

    /// The call `id` is over.
    pub(super) fn forget(&self, id: &Value) {
        let mut routes = self.routes.lock();
        if let Some(waiting) = routes.waiting.remove(&id.to_string())
            && let Some(token) = waiting.token
        {
            routes.tokens.remove(&token);
        }
    }

    pub(super) fn has_ended(&self) -> bool {
        self.routes.lock().ended.is_some()
    }

    /// The client session listens: what came before goes first, in order,
    /// and what comes meanwhile too, until nothing is left.
    pub(super) fn listen(&self, server: &Arc<Server>, inbox: Weak<dyn Inbox>) -> Result<(), DownstreamError> {
        // Ends: each turn delivers what the reader kept since the last one,
        // which is bounded (`keep_early`); the last turn takes the inbox.
        loop {
            let early = {
                let mut routes = self.routes.lock();
                if let Some(why) = &routes.ended {
                    return Err(DownstreamError::Protocol(format!("its SSE stream ended: {why}")));
                }
                if routes.early.is_empty() {
                    routes.inbox = Some(inbox);
                    return Ok(());
                }
                std::mem::take(&mut routes.early)
            };
            if let Some(inbox) = inbox.upgrade() {
                for message in early {
                    inbox.deliver(server, message);
                }
            }
        }
    }

    /// The close path's first step: nothing more is delivered, and the
    /// calls waiting end.
    pub(super) fn stop(&self) {
        let waiting = {
            let mut routes = self.routes.lock();
            routes.stopping = true;
            routes.inbox = None;
            routes.early.clear();
            routes.tokens.clear();
            std::mem::take(&mut routes.waiting)
        };
        for (_, waiting) in waiting {
            let _ = waiting.tx.try_send(Incoming::Ended(DownstreamError::Closed));
        }
    }

    /// The stream ended: the calls waiting get `why`, and the inbox is
    /// given back (none when the session is closing, or never listened).
    fn end(&self, why: &str) -> Option<Weak<dyn Inbox>> {
        let (waiting, inbox, stopping) = {
            let mut routes = self.routes.lock();
            routes.ended = Some(why.to_string());
            routes.tokens.clear();
            (std::mem::take(&mut routes.waiting), routes.inbox.take(), routes.stopping)
        };
        let error = || match stopping {
            true => DownstreamError::Closed,
            false => DownstreamError::Protocol(format!("its SSE stream ended before the response ({why})")),
        };
        for (_, waiting) in waiting {
            let _ = waiting.tx.try_send(Incoming::Ended(error()));
        }
        inbox.filter(|_| !stopping)
    }

    /// Where a message that is not a response goes; `for_a_call`: to the
    /// one call that carries such messages, if there is exactly one.
    fn target(&self, server: &Server, message: Message, for_a_call: bool) -> (Target, Option<Message>) {
        let mut routes = self.routes.lock();
        if routes.stopping {
            return (Target::Nobody, Some(message));
        }
        if for_a_call {
            let mut calls = routes.waiting.values().filter(|w| w.carries);
            if let (Some(only), None) = (calls.next(), calls.next()) {
                return (Target::Call(only.tx.clone()), Some(message));
            }
        }
        if let Some(inbox) = routes.inbox.as_ref().and_then(Weak::upgrade) {
            return (Target::Inbox(inbox), Some(message));
        }
        if routes.inbox.is_none() {
            return match keep_early(server, &mut routes.early, message) {
                None => (Target::Kept, None),
                Some(message) => (Target::Nobody, Some(message)),
            };
        }
        (Target::Nobody, Some(message))
    }

    /// The call waiting for a response, or for a progress notification.
    fn call_for(&self, message: &Message) -> Option<Sender<Incoming>> {
        let mut routes = self.routes.lock();
        match message.kind() {
            Ok(Kind::Response) => {
                let waiting = routes.waiting.remove(&message.id.as_ref()?.to_string())?;
                if let Some(token) = waiting.token {
                    routes.tokens.remove(&token);
                }
                Some(waiting.tx)
            }
            Ok(Kind::Notification) if message.method() == "notifications/progress" => {
                let token = message.params_object().ok()?.get("progressToken").map(token_key)?;
                let key = routes.tokens.get(&token)?;
                routes.waiting.get(key).map(|w| w.tx.clone())
            }
            _ => None,
        }
    }
}

/// The progress token of a request's params, if it carries one.
fn progress_token(params: &RawValue) -> Option<String> {
    if !params.get().contains("progressToken") {
        return None;
    }
    let value: Value = serde_json::from_str(params.get()).ok()?;
    value.pointer("/_meta/progressToken").filter(|t| !t.is_null()).map(token_key)
}

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
    shared: &Shared,
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
                match Message::parse_text(event.data) {
                    Ok(message) => route(server, shared, &answers, message),
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
    let lost = shared.end(&why);
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

/// Sends a message of the server's where it belongs.
fn route(server: &Arc<Server>, shared: &Shared, answers: &Answers<'_>, message: Message) {
    let kind = message.kind();
    if let Some(call) = shared.call_for(&message) {
        let _ = call.send(Incoming::Message(message));
        return;
    }
    match kind {
        Ok(Kind::Response) => {
            log::debug!("server `{}`: a response to no request of mcpgate's ignored", server.name());
        }
        Ok(Kind::Request) if message.method() == "ping" => {
            if let Some(id) = &message.id {
                answers.send(&jsonrpc::result(id, &jsonrpc::raw(&json!({}))));
            }
        }
        Ok(Kind::Request | Kind::Notification) => {
            let for_a_call = kind == Ok(Kind::Request) || message.method() == "notifications/message";
            match shared.target(server, message, for_a_call) {
                (Target::Call(tx), Some(message)) => {
                    let _ = tx.send(Incoming::Message(message));
                }
                (Target::Inbox(inbox), Some(message)) => inbox.deliver(server, message),
                (Target::Nobody, Some(message)) if kind == Ok(Kind::Request) => refuse(server, answers, &message),
                _ => {}
            }
        }
        Err(_) => {}
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

    #[test]
    fn a_progress_token_is_found_only_where_it_belongs() {
        let raw = |v: Value| jsonrpc::raw(&v);
        assert_eq!(progress_token(&raw(json!({"_meta": {"progressToken": 7}}))), Some("7".into()));
        assert_eq!(progress_token(&raw(json!({"_meta": {"progressToken": "t"}}))), Some("t".into()));
        assert_eq!(progress_token(&raw(json!({"progressToken": "t"}))), None);
        assert_eq!(progress_token(&raw(json!({"name": "x"}))), None);
    }
}
