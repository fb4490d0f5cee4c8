//! The one correlator of the transports that carry a stream of messages
//! both ways (stdio's pipes, HTTP+SSE's event stream and its `POST`s): the
//! requests waiting for their answers, by the id they have on the wire,
//! and where each message the server sends goes. The transports only frame
//! (a line of a child's stdout, an SSE event) and hand each message here;
//! what comes back for them to send (an answer to a `ping`, a refusal) they
//! send their own way.
//!
//! Where a message goes:
//! - a response, to the call waiting for it (its caller's id put back when
//!   the wire id was the transport's own); to no one (logged) when none
//!   waits; to the transport itself for a request of its own ([`Waiter::Reader`]);
//! - progress, to the call that asked for it, by its token (the caller's
//!   token put back when it was rewritten on the wire);
//! - a request of a client (sampling, elicitation, roots), to the one call
//!   running that can carry it (see [`carries`]) on the one session with
//!   such calls, else to that session's inbox (its `GET` stream), else to
//!   the one session listening; with no session or several to choose from,
//!   given back to be refused;
//! - a log message, as [`Logs`] says; list changes and the rest, to every
//!   session listening.
//!
//! What comes before the session listens is kept for it, in order and
//! bounded ([`EARLY_MAX`], [`EARLY_BYTES`]), when [`Rules::early`] says so
//! (a server of one session: server-filesystem asks for the roots as soon
//! as it is initialized).

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use crossbeam_channel::Sender;
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::downstream::{DownstreamError, Inbox, Server};
use crate::limited;
use crate::protocol::jsonrpc::{self, Kind, Message, Params};

/// Messages, and their bytes, kept before the session listens; more are dropped.
const EARLY_MAX: usize = 64;
const EARLY_BYTES: usize = 1 << 20;

/// What arrives for a call waiting on the server.
pub(crate) enum Incoming {
    Message(Message),
    /// The call ends without its response: why.
    Ended(DownstreamError),
}

/// Who waits for the answer to a request.
pub(crate) enum Waiter {
    /// A call: its answer, and what the server sends for it meanwhile.
    Call(Sender<Incoming>),
    /// The transport itself (a shared child's own `initialize`): its answer
    /// is given back to the reader ([`Routed::Own`]).
    Reader,
}

/// A request waiting for its answer.
pub(crate) struct Waiting {
    pub(crate) waiter: Waiter,
    /// The session it is for (0 for a server of one session).
    pub(crate) view: usize,
    /// The caller's id, put back on the answer: the wire id is the transport's own.
    pub(crate) id: Option<Value>,
    /// Its progress token on the wire (see [`token_key`]).
    pub(crate) token: Option<String>,
    /// The caller's progress token, put back on progress: the one on the
    /// wire is the transport's own.
    pub(crate) their_token: Option<Value>,
    /// Whether the caller's answer carries what the server asks meanwhile
    /// of a client (see [`carries`]).
    pub(crate) carries: bool,
}

impl Waiting {
    /// A call of `view`, whose ids are on the wire as the caller gave them.
    pub(crate) fn call(tx: Sender<Incoming>, view: usize, carries: bool) -> Waiting {
        Waiting { waiter: Waiter::Call(tx), view, id: None, token: None, their_token: None, carries }
    }

    fn tx(&self) -> Option<&Sender<Incoming>> {
        match &self.waiter {
            Waiter::Call(tx) => Some(tx),
            Waiter::Reader => None,
        }
    }
}

/// Where a server's log messages (`notifications/message`) go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Logs {
    /// To the one call running that carries the server's messages, as its
    /// requests do (HTTP+SSE); else as [`Logs::ToEverySession`].
    ToTheCall,
    /// To every session listening, as list changes (stdio: a shared
    /// child's logs are no one call's).
    ToEverySession,
}

/// What differs between the transports that use a correlator.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    /// Whether what the server sends before its session listens is kept
    /// for it: a server of one session (HTTP+SSE, a stdio child per
    /// session), not one shared by sessions that come and go.
    pub(crate) early: bool,
    pub(crate) logs: Logs,
}

/// What the transport is to do about a message it handed over.
#[derive(Debug)]
pub(crate) enum Routed {
    /// Passed on: to a call, to sessions, kept for the session; or
    /// dropped, which was logged where it is worth it.
    Done,
    /// A response no request waits for (logged), or not JSON-RPC: ignored.
    Ignored,
    /// To send back to the server: the answer to its `ping`.
    Reply(Vec<u8>),
    /// A request of the server's that no session can take: the transport
    /// refuses it, in its words.
    Refuse(Message),
    /// The answer to a request of the transport's own ([`Waiter::Reader`]).
    Own(Message),
}

/// The correlator of one stream: a stdio child, an HTTP+SSE session.
pub(crate) struct Correlator {
    /// Guards the calls waiting and where other messages go; held only to
    /// add, take or look, never across I/O.
    table: Mutex<Table>,
    logs: Logs,
}

#[derive(Default)]
struct Table {
    /// By wire id (as JSON text).
    waiting: HashMap<String, Waiting>,
    /// Wire progress token to wire id.
    tokens: HashMap<String, String>,
    /// Where each session's unasked messages go, once it listens.
    inboxes: HashMap<usize, Weak<dyn Inbox>>,
    /// What came unasked before the session listened, delivered in order
    /// when it does; `None` when nothing is kept (see [`Rules::early`]),
    /// and once the session listens or closes.
    early: Option<Vec<Message>>,
    /// Why the stream ended, once it did: nothing can be sent any more.
    ended: Option<String>,
    /// The close path began: nothing is delivered any more.
    stopping: bool,
}

/// Where a message that is not a response goes.
enum Target {
    Call(Sender<Incoming>),
    Inbox(Arc<dyn Inbox>),
}

impl Correlator {
    pub(crate) fn new(rules: Rules) -> Correlator {
        let table = Table { early: rules.early.then(Vec::new), ..Table::default() };
        Correlator { table: Mutex::new(table), logs: rules.logs }
    }

    /// Registers a request of wire id `wire`. Refused when the session is
    /// closing ([`DownstreamError::Closed`]) or its stream ended
    /// ([`DownstreamError::SessionGone`]: nothing was sent, a new session may take it).
    pub(crate) fn expect(&self, wire: &Value, waiting: Waiting) -> Result<(), DownstreamError> {
        let mut table = self.table.lock();
        if table.stopping {
            return Err(DownstreamError::Closed);
        }
        if table.ended.is_some() {
            return Err(DownstreamError::SessionGone);
        }
        let key = wire.to_string();
        if let Some(token) = &waiting.token {
            table.tokens.insert(token.clone(), key.clone());
        }
        table.waiting.insert(key, waiting);
        Ok(())
    }

    /// The request of wire id `wire` is over.
    pub(crate) fn forget(&self, wire: &Value) {
        let mut table = self.table.lock();
        if let Some(waiting) = table.waiting.remove(&wire.to_string())
            && let Some(token) = waiting.token
        {
            table.tokens.remove(&token);
        }
    }

    /// Whether a request is still waiting for its answer.
    pub(crate) fn awaiting(&self) -> bool {
        !self.table.lock().waiting.is_empty()
    }

    /// Whether the stream ended.
    pub(crate) fn has_ended(&self) -> bool {
        self.table.lock().ended.is_some()
    }

    /// Session `view` listens: what was kept for it goes first, in order,
    /// and what comes meanwhile too, until nothing is left and `inbox`
    /// takes the rest. Why the stream ended, if it did.
    pub(crate) fn listen(&self, server: &Arc<Server>, view: usize, inbox: Weak<dyn Inbox>) -> Result<(), String> {
        // Ends: each turn delivers what was kept since the last one, which is
        // bounded (`keep_early`); the last turn takes the inbox.
        loop {
            let early = {
                let mut table = self.table.lock();
                if let Some(why) = &table.ended {
                    return Err(why.clone());
                }
                match table.early.as_mut() {
                    Some(early) if !early.is_empty() => std::mem::take(early),
                    _ => {
                        table.early = None;
                        if !table.stopping {
                            table.inboxes.insert(view, inbox);
                        }
                        return Ok(());
                    }
                }
            };
            if let Some(inbox) = inbox.upgrade() {
                for message in early {
                    inbox.deliver(server, message);
                }
            }
        }
    }

    /// Session `view` no longer listens: nothing is delivered to it, or kept.
    pub(crate) fn stop_view(&self, view: usize) {
        let mut table = self.table.lock();
        table.early = None;
        table.inboxes.remove(&view);
    }

    /// The close path's first step for the whole stream: nothing more is
    /// delivered or registered. The calls that waited, to be told.
    pub(crate) fn stop(&self) -> Vec<Sender<Incoming>> {
        let mut table = self.table.lock();
        table.stopping = true;
        table.inboxes.clear();
        table.early = None;
        take_calls(&mut table)
    }

    /// The stream ended, `why`: the calls that waited, to be told; the
    /// inbox of its session (none when it is closing, or never listened);
    /// and whether it is closing.
    pub(crate) fn end(&self, why: &str) -> (Vec<Sender<Incoming>>, Option<Weak<dyn Inbox>>, bool) {
        let mut table = self.table.lock();
        table.ended = Some(why.to_string());
        let inbox = table.inboxes.drain().map(|(_, inbox)| inbox).next();
        let stopping = table.stopping;
        (take_calls(&mut table), inbox.filter(|_| !stopping), stopping)
    }

    /// Sends a message of the server's where it belongs; what is left for
    /// the transport to do, if anything.
    pub(crate) fn route(&self, server: &Arc<Server>, mut message: Message) -> Routed {
        match message.kind() {
            Ok(Kind::Response) => match self.answered(&message) {
                None => {
                    log::debug!("server `{}`: a response to no request of mcpgate's ignored", server.name());
                    Routed::Ignored
                }
                Some(Waiting { waiter: Waiter::Reader, .. }) => Routed::Own(message),
                Some(Waiting { waiter: Waiter::Call(tx), id, .. }) => {
                    if id.is_some() {
                        message.id = id;
                    }
                    let _ = tx.send(Incoming::Message(message));
                    Routed::Done
                }
            },
            Ok(Kind::Notification) => {
                if let Some((tx, token)) = self.progress_target(&message) {
                    restore_token(&mut message, token);
                    let _ = tx.send(Incoming::Message(message));
                } else if self.logs == Logs::ToTheCall && message.method() == "notifications/message" {
                    // A log message no one can take is dropped.
                    let _ = self.to_one(server, message);
                } else {
                    self.to_every_session(server, message);
                }
                Routed::Done
            }
            Ok(Kind::Request) if message.method() == "ping" => match &message.id {
                Some(id) => Routed::Reply(jsonrpc::result(id, &jsonrpc::raw(&json!({})))),
                None => Routed::Ignored,
            },
            Ok(Kind::Request) => match self.to_one(server, message) {
                Some(message) => Routed::Refuse(message),
                None => Routed::Done,
            },
            Err(_) => Routed::Ignored,
        }
    }

    /// The request a response answers, no longer waiting.
    fn answered(&self, message: &Message) -> Option<Waiting> {
        let mut table = self.table.lock();
        let waiting = table.waiting.remove(&message.id.as_ref()?.to_string())?;
        if let Some(token) = &waiting.token {
            table.tokens.remove(token);
        }
        Some(waiting)
    }

    /// The call a progress notification belongs to, by its (wire) token,
    /// and the caller's token to put back.
    fn progress_target(&self, message: &Message) -> Option<(Sender<Incoming>, Option<Value>)> {
        if message.method() != "notifications/progress" {
            return None;
        }
        let token = token_key(message.params_object().ok()?.get("progressToken")?);
        let table = self.table.lock();
        let waiting = table.waiting.get(table.tokens.get(&token)?)?;
        Some((waiting.tx()?.clone(), waiting.their_token.clone()))
    }

    /// To every session listening, or kept for the session until it listens.
    fn to_every_session(&self, server: &Arc<Server>, message: Message) {
        let inboxes: Vec<Weak<dyn Inbox>> = {
            let mut table = self.table.lock();
            if table.inboxes.is_empty()
                && let Some(early) = table.early.as_mut()
            {
                let _ = keep_early(server, early, message);
                return;
            }
            table.inboxes.values().cloned().collect()
        };
        for inbox in inboxes.iter().filter_map(Weak::upgrade) {
            inbox.deliver(server, message.clone());
        }
    }

    /// To the one call or session it can be for (see [`pick`]), or kept
    /// for the session until it listens; given back when there is none.
    fn to_one(&self, server: &Arc<Server>, message: Message) -> Option<Message> {
        let target = {
            let mut table = self.table.lock();
            match pick(&table) {
                Some(target) => target,
                None if table.inboxes.is_empty() && table.early.is_some() => {
                    return table.early.as_mut().and_then(|early| keep_early(server, early, message));
                }
                None => return Some(message),
            }
        };
        match target {
            Target::Call(tx) => {
                let _ = tx.send(Incoming::Message(message));
            }
            Target::Inbox(inbox) => inbox.deliver(server, message),
        }
        None
    }
}

/// The calls waiting, taken out of `table`.
fn take_calls(table: &mut Table) -> Vec<Sender<Incoming>> {
    table.tokens.clear();
    table.waiting.drain().filter_map(|(_, waiting)| waiting.tx().cloned()).collect()
}

/// Where a request of the server's goes: the one call of a session running
/// that can carry it, or else that session's inbox; with no such call, the
/// one session listening.
fn pick(table: &Table) -> Option<Target> {
    let mut views: Vec<usize> = table.waiting.values().filter(|w| w.carries).map(|w| w.view).collect();
    views.sort_unstable();
    views.dedup();
    let view = match (views.as_slice(), table.inboxes.len()) {
        ([view], _) => *view,
        ([], 1) => *table.inboxes.keys().next()?,
        _ => return None,
    };
    let one_call: Vec<&Waiting> = table.waiting.values().filter(|w| w.view == view && w.carries).collect();
    match one_call.as_slice() {
        [only] => Some(Target::Call(only.tx()?.clone())),
        _ => table.inboxes.get(&view)?.upgrade().map(Target::Inbox),
    }
}

/// Keeps what the server sent before its session listened, up to
/// [`EARLY_MAX`] messages of [`EARLY_BYTES`] in all; gives back one that
/// does not fit.
fn keep_early(server: &Server, early: &mut Vec<Message>, message: Message) -> Option<Message> {
    let size = |m: &Message| {
        [&m.params, &m.error].iter().filter_map(|p| p.as_ref()).map(|p| p.get().len()).sum::<usize>()
            + m.result.as_ref().map_or(0, |r| r.get().len())
    };
    if early.len() < EARLY_MAX && early.iter().map(size).sum::<usize>() + size(&message) <= EARLY_BYTES {
        early.push(message);
        return None;
    }
    limited!(
        warn,
        "server `{}`: more than mcpgate keeps ({EARLY_MAX} messages, {EARLY_BYTES} bytes) sent before its session \
         listened; `{}` not kept",
        server.name(),
        message.method()
    );
    Some(message)
}

/// Whether a request's answer can carry the server's requests to the client
/// whose call it is: not for what mcpgate sends for itself (`initialize`,
/// `ping`, the lists it merges, `logging/setLevel`), whose messages reach
/// no client.
pub(crate) fn carries(method: &str) -> bool {
    !matches!(
        method,
        "initialize"
            | "ping"
            | "tools/list"
            | "prompts/list"
            | "resources/list"
            | "resources/templates/list"
            | "tasks/list"
            | "logging/setLevel"
    )
}

/// A progress token as the tables key it: a string as it is, anything else as JSON.
pub(crate) fn token_key(token: &Value) -> String {
    match token {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The progress token of a request's params, if it carries one.
pub(crate) fn progress_token(params: &Params) -> Option<String> {
    let meta = params.raw("_meta").filter(|meta| meta.get().contains("progressToken"))?;
    let meta: Value = serde_json::from_str(meta.get()).ok()?;
    meta.get("progressToken").filter(|t| !t.is_null()).map(token_key)
}

/// Puts the caller's own progress token back into a progress notification.
fn restore_token(message: &mut Message, token: Option<Value>) {
    let Some(token) = token else { return };
    let Ok(mut params) = message.params_object() else { return };
    params.insert("progressToken".into(), token);
    message.params = Some(jsonrpc::raw(&Value::Object(params)));
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crossbeam_channel::{Receiver, bounded};

    use super::*;
    use crate::config::Config;
    use crate::downstream::oauth::Authorizer;
    use crate::downstream::{Children, Context, Limits};
    use crate::runtime::state::Journal;

    fn server() -> Arc<Server> {
        let text = r#"{"mcpServers": {"s": {"type": "sse", "url": "http://127.0.0.1:9/sse"}}}"#;
        let config = Config::parse(text, &|_| None).expect("a valid configuration");
        let context = Context {
            stats: Arc::default(),
            journal: Arc::new(Journal::new(None, None)),
            children: Children::new(1, Duration::ZERO, 1 << 20),
            deletes: Arc::default(),
            oauth: Authorizer::new(&config),
        };
        Arc::new(Server::new(config.servers[0].clone(), Limits::from_config(&config), 1, &context))
    }

    /// A session's inbox that keeps what it is given.
    #[derive(Default)]
    struct Kept(Mutex<Vec<Message>>);

    impl Inbox for Kept {
        fn deliver(&self, _: &Arc<Server>, message: Message) {
            self.0.lock().push(message);
        }
        fn lost(&self, _: &Arc<Server>, _: Option<&str>) {}
        fn started(&self, _: &Arc<Server>) {}
    }

    impl Kept {
        fn methods(&self) -> Vec<String> {
            self.0.lock().iter().map(|m| m.method().to_string()).collect()
        }
    }

    fn message(value: Value) -> Message {
        Message::parse(value.to_string().as_bytes()).expect("a JSON-RPC message")
    }

    fn call(correlator: &Correlator, wire: u64, view: usize, carries: bool) -> Receiver<Incoming> {
        let (tx, rx) = bounded(8);
        correlator.expect(&Value::from(wire), Waiting::call(tx, view, carries)).unwrap();
        rx
    }

    fn got(rx: &Receiver<Incoming>) -> Message {
        match rx.try_recv() {
            Ok(Incoming::Message(m)) => m,
            _ => panic!("nothing for the call"),
        }
    }

    const SHARED: Rules = Rules { early: false, logs: Logs::ToEverySession };
    const ONE_SESSION: Rules = Rules { early: true, logs: Logs::ToTheCall };

    #[test]
    fn an_answer_goes_to_its_waiter_with_the_callers_id_back() {
        let (server, correlator) = (server(), Correlator::new(SHARED));
        let (tx, rx) = bounded(8);
        let waiting = Waiting { id: Some(json!("theirs-1")), ..Waiting::call(tx, 1, true) };
        correlator.expect(&Value::from(7), waiting).unwrap();
        let other = call(&correlator, 8, 2, true);
        let routed = correlator.route(&server, message(json!({"jsonrpc": "2.0", "id": 7, "result": {}})));
        assert!(matches!(routed, Routed::Done), "{routed:?}");
        assert_eq!(got(&rx).id, Some(json!("theirs-1")));
        assert!(other.try_recv().is_err(), "not another call's");
        // Answered once: the same id again is no one's.
        let again = correlator.route(&server, message(json!({"jsonrpc": "2.0", "id": 7, "result": {}})));
        assert!(matches!(again, Routed::Ignored), "{again:?}");
    }

    #[test]
    fn an_answer_to_no_request_is_ignored_and_an_own_request_is_the_readers() {
        let (server, correlator) = (server(), Correlator::new(SHARED));
        let rx = call(&correlator, 1, 1, true);
        // A string "1" is not the number 1.
        for id in [json!(2), json!("1"), json!(1.5)] {
            let routed = correlator.route(&server, message(json!({"jsonrpc": "2.0", "id": id, "result": {}})));
            assert!(matches!(routed, Routed::Ignored), "{id}: {routed:?}");
        }
        assert!(rx.try_recv().is_err());
        let own = Waiting { waiter: Waiter::Reader, view: 0, id: None, token: None, their_token: None, carries: false };
        correlator.expect(&Value::from(0), own).unwrap();
        let routed = correlator.route(&server, message(json!({"jsonrpc": "2.0", "id": 0, "result": {"x": 1}})));
        assert!(matches!(routed, Routed::Own(m) if m.id == Some(json!(0))));
    }

    #[test]
    fn what_comes_before_the_session_listens_is_kept_up_to_the_bound_then_refused() {
        let (server, correlator) = (server(), Correlator::new(ONE_SESSION));
        let roots = |id: usize| message(json!({"jsonrpc": "2.0", "id": id, "method": "roots/list"}));
        for id in 0..EARLY_MAX {
            assert!(matches!(correlator.route(&server, roots(id)), Routed::Done), "{id} is kept");
        }
        let over = correlator.route(&server, roots(EARLY_MAX));
        assert!(matches!(over, Routed::Refuse(m) if m.id == Some(json!(EARLY_MAX))), "past the bound: refused");
        let changed = message(json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));
        assert!(matches!(correlator.route(&server, changed), Routed::Done), "a notification past it is dropped");
        let inbox = Arc::new(Kept::default());
        let weak: Weak<dyn Inbox> = Arc::downgrade(&(inbox.clone() as Arc<dyn Inbox>));
        correlator.listen(&server, 0, weak).unwrap();
        assert_eq!(inbox.methods().len(), EARLY_MAX, "what was kept, delivered in order");
        assert_eq!(inbox.0.lock()[3].id, Some(json!(3)));
        // The bytes are bounded too.
        let (server, correlator) = (server, Correlator::new(ONE_SESSION));
        let big = "x".repeat(EARLY_BYTES / 2);
        let log = || message(json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": big}}));
        correlator.route(&server, log());
        correlator.route(&server, log());
        let inbox = Arc::new(Kept::default());
        correlator.listen(&server, 0, Arc::downgrade(&(inbox.clone() as Arc<dyn Inbox>))).unwrap();
        assert_eq!(inbox.methods().len(), 1, "the second did not fit");
    }

    #[test]
    fn nothing_is_kept_for_a_server_shared_by_sessions() {
        let (server, correlator) = (server(), Correlator::new(SHARED));
        let ask = message(json!({"jsonrpc": "2.0", "id": 1, "method": "sampling/createMessage"}));
        assert!(matches!(correlator.route(&server, ask), Routed::Refuse(_)), "no session to take it");
    }

    #[test]
    fn progress_goes_to_the_call_by_its_token_with_the_callers_token_back() {
        let (server, correlator) = (server(), Correlator::new(SHARED));
        let (tx, rx) = bounded(8);
        let waiting =
            Waiting { token: Some("mcpgate-4".into()), their_token: Some(json!(17)), ..Waiting::call(tx, 1, true) };
        correlator.expect(&Value::from(4), waiting).unwrap();
        let other = call(&correlator, 5, 2, true);
        let progress = |token: &str| {
            message(json!({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": token, "progress": 1}}))
        };
        correlator.route(&server, progress("mcpgate-4"));
        let m = got(&rx);
        assert_eq!(m.params_object().unwrap().get("progressToken"), Some(&json!(17)));
        assert!(other.try_recv().is_err());
        // Unknown tokens go to the sessions (none listens here): no call gets them.
        correlator.route(&server, progress("mcpgate-9"));
        assert!(rx.try_recv().is_err() && other.try_recv().is_err());
        // Once answered, its token is no one's.
        correlator.route(&server, message(json!({"jsonrpc": "2.0", "id": 4, "result": {}})));
        let _ = got(&rx);
        correlator.route(&server, progress("mcpgate-4"));
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn a_servers_request_goes_to_the_one_call_that_carries_it_else_to_its_session() {
        let (server, correlator) = (server(), Correlator::new(SHARED));
        let (one, two) = (Arc::new(Kept::default()), Arc::new(Kept::default()));
        correlator.listen(&server, 1, Arc::downgrade(&(one.clone() as Arc<dyn Inbox>))).unwrap();
        correlator.listen(&server, 2, Arc::downgrade(&(two.clone() as Arc<dyn Inbox>))).unwrap();
        let ask = || message(json!({"jsonrpc": "2.0", "id": "s-1", "method": "elicitation/create"}));
        assert!(matches!(correlator.route(&server, ask()), Routed::Refuse(_)), "two sessions, no call: refused");
        let _list = call(&correlator, 1, 2, false);
        let rx = call(&correlator, 2, 1, true);
        assert!(matches!(correlator.route(&server, ask()), Routed::Done));
        assert_eq!(got(&rx).method(), "elicitation/create", "the one call that carries it");
        let _second = call(&correlator, 3, 1, true);
        correlator.route(&server, ask());
        assert_eq!(one.methods(), ["elicitation/create"], "two calls of one session: its inbox");
        let _third = call(&correlator, 4, 2, true);
        assert!(matches!(correlator.route(&server, ask()), Routed::Refuse(_)), "calls of two sessions: refused");
        // List changes go to every session; a ping is the transport's to answer.
        correlator.route(&server, message(json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})));
        assert_eq!(two.methods(), ["notifications/tools/list_changed"]);
        let ping = correlator.route(&server, message(json!({"jsonrpc": "2.0", "id": 9, "method": "ping"})));
        assert!(matches!(ping, Routed::Reply(body) if body.starts_with(b"{") && body.windows(2).any(|w| w == b"9,")));
    }

    #[test]
    fn log_messages_go_to_the_call_or_to_every_session_as_the_rules_say() {
        let server = server();
        let log = || message(json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": 1}}));
        for (rules, to_the_call) in [(ONE_SESSION, true), (Rules { early: true, ..SHARED }, false)] {
            let correlator = Correlator::new(rules);
            let inbox = Arc::new(Kept::default());
            correlator.listen(&server, 0, Arc::downgrade(&(inbox.clone() as Arc<dyn Inbox>))).unwrap();
            let rx = call(&correlator, 1, 0, true);
            correlator.route(&server, log());
            assert_eq!(rx.try_recv().is_ok(), to_the_call, "{rules:?}");
            assert_eq!(inbox.methods().len(), usize::from(!to_the_call), "{rules:?}");
        }
    }

    #[test]
    fn a_stopped_or_ended_stream_takes_no_call_and_gives_its_waiters_back() {
        let (server, correlator) = (server(), Correlator::new(ONE_SESSION));
        let _rx = call(&correlator, 1, 0, true);
        assert_eq!(correlator.stop().len(), 1);
        let (tx, _rx) = bounded(1);
        assert_eq!(correlator.expect(&Value::from(2), Waiting::call(tx, 0, true)), Err(DownstreamError::Closed));
        let ask = message(json!({"jsonrpc": "2.0", "id": 1, "method": "roots/list"}));
        assert!(matches!(correlator.route(&server, ask), Routed::Refuse(_)), "nothing kept once closing");
        let (waiting, inbox, stopping) = correlator.end("gone");
        assert!(waiting.is_empty() && inbox.is_none() && stopping);
        let ended = Correlator::new(ONE_SESSION);
        let _ = ended.end("the server closed it");
        let (tx, _rx) = bounded(1);
        assert_eq!(ended.expect(&Value::from(1), Waiting::call(tx, 0, true)), Err(DownstreamError::SessionGone));
        let inbox: Arc<dyn Inbox> = Arc::new(Kept::default());
        assert_eq!(ended.listen(&server, 0, Arc::downgrade(&inbox)), Err("the server closed it".to_string()));
    }

    #[test]
    fn a_progress_token_is_found_only_where_it_belongs() {
        let token = |v: Value| progress_token(&Params::read(&jsonrpc::raw(&v)).unwrap());
        assert_eq!(token(json!({"_meta": {"progressToken": 7}})), Some("7".into()));
        assert_eq!(token(json!({"_meta": {"progressToken": "t"}})), Some("t".into()));
        assert_eq!(token(json!({"_meta": {"progressToken": null}})), None);
        assert_eq!(token(json!({"progressToken": "t"})), None);
        assert_eq!(token(json!({"name": "x", "_meta": {"other": "progressToken"}})), None);
    }
}
