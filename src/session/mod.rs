//! Client sessions: each holds one slot per server for its downstream
//! session, its `GET` streams, the requests in flight in both directions and
//! its merged lists. [`close_sessions`] is the one way a session ends.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError, bounded};
use parking_lot::{Condvar, Mutex};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::downstream::{self, Downstream, Inbox, Server};
use crate::downstream::{Flight, Stop};
use crate::gateway::catalog::{List, ListKind};
use crate::gateway::tasks::{self, TaskIds};
use crate::http::access::Access;
use crate::protocol::jsonrpc::{self, Kind, Message, RpcError};
use crate::protocol::sse;
use crate::runtime::memory::{self, Event, Held};
use crate::runtime::state::Journal;
use crate::status::stats::Stats;

/// Messages kept for a client that has no `GET` stream open yet; in bytes,
/// what the session holds stays within its share of `max_memory_mb`.
const BACKLOG: usize = 256;
/// Requests of servers waiting for the client's answer, per session; past
/// it the oldest is forgotten (a client that never answers would otherwise
/// grow the table for good), and its late answer is dropped.
const MAX_ASKS: usize = 1000;
/// Messages queued on one `GET` stream before it counts as stuck.
const STREAM_QUEUE: usize = 256;
/// Events kept for clients that resume a stream with `Last-Event-ID`; the
/// oldest go first when the session needs room for new ones.
const REPLAY_EVENTS: usize = 256;
const REPLAY_BYTES: usize = 1 << 20;
/// What a 2025-11-25 client waits before it reconnects a dropped stream.
const RETRY_MS: u64 = 1000;

/// Why a session ended, for the counters and the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    Idle,
    ClientDelete,
    Shutdown,
    /// Refused at `initialize` after it was created (no server could open).
    Refused,
}

enum Slot {
    /// A thread is opening it; others wait on `slot_changed`.
    Opening,
    Open(Arc<Downstream>),
    Failed {
        error: String,
        at: Instant,
        /// mcpgate, not the server, was short of a resource (threads, descriptors).
        exhausted: bool,
    },
}

/// A request of the client that a server is working on: where a cancel
/// goes, and the flight that ends it.
struct Call {
    server: String,
    downstream_id: Value,
    flight: Arc<Flight>,
}

/// A request a server sent to the client: where the answer goes.
struct Ask {
    server: String,
    id: Value,
}

/// A `GET` stream as the session sees it. Dropped when the stream ends: what
/// is still queued for it is dropped at once (a writer blocked on a client
/// that does not read would hold it until its write times out).
struct ClientStream {
    /// The stream number in event ids.
    id: u64,
    /// This attachment: a resumed stream keeps its number on a new connection.
    attach: u64,
    tx: Sender<Event>,
    /// The writer's end too, to empty the queue when the stream is cut.
    rx: Receiver<Event>,
}

impl Drop for ClientStream {
    fn drop(&mut self) {
        while self.rx.try_recv().is_ok() {}
    }
}

/// An SSE event as sent, kept for replay. Ids are `<stream>-<seq>`: unique
/// within the session, and they name the stream they belong to.
struct Logged {
    stream: u64,
    seq: u64,
    /// The response that ends a `POST` stream.
    last: bool,
    bytes: Event,
}

/// A `GET` stream as the connection thread writes it: `first` (replay,
/// priming, waiting messages), then whatever arrives on `rx` until it
/// disconnects. `id` is set for a `GET` stream to detach when it ends.
pub struct Attached {
    pub id: Option<u64>,
    pub first: Vec<Event>,
    pub rx: Receiver<Event>,
}

/// Everything about a session that changes. Guarded by `Session::state`,
/// which is never held across network I/O.
struct State {
    /// Set once, when the session is closed; with why.
    closed: bool,
    deleted_by_client: bool,
    last_active: Instant,
    in_flight: usize,
    streams: Vec<ClientStream>,
    next_stream: u64,
    next_attach: u64,
    slots: HashMap<String, Slot>,
    lists: HashMap<ListKind, Arc<List>>,
    calls: HashMap<String, Call>,
    /// By mcpgate's id, oldest first.
    asks: BTreeMap<u64, Ask>,
    next_ask: u64,
    /// Messages for a `GET` stream that is not open yet.
    backlog: VecDeque<Event>,
    next_seq: u64,
    log: VecDeque<Logged>,
    log_bytes: usize,
    /// `POST` answers streaming now, with the `GET` that resumed one, if any.
    posts: HashMap<u64, Option<Sender<Event>>>,
    /// The last `logging/setLevel` params, for servers opened later.
    log_level: Option<Box<RawValue>>,
    /// Downstream sessions (server, session id) whose stream answered 404:
    /// the reaper reopens them.
    lost: Vec<(String, Option<String>)>,
    /// The client's task ids, each standing for one server's.
    tasks: TaskIds,
}

pub struct Session {
    pub id: String,
    pub protocol_version: String,
    /// What every server gets as `initialize` params: the client's capabilities and info.
    init_params: Box<RawValue>,
    pub client_name: String,
    /// The servers this session may reach (its token's); `None` for all.
    scope: Option<Vec<String>>,
    /// SHA-256 of the token that created it: only that token reaches it.
    token: Option<[u8; 32]>,
    state: Mutex<State>,
    slot_changed: Condvar,
    /// Bytes of events this session holds (queued, kept, waiting).
    tally: Arc<AtomicUsize>,
    me: Weak<Session>,
}

/// A client session as the state file keeps it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SavedSession {
    pub id: String,
    pub protocol_version: String,
    pub init_params: Value,
    pub client_name: String,
    /// Unix seconds of the last request or stream end.
    pub last_active: u64,
    /// The servers its token may reach; absent for all.
    #[serde(default)]
    pub scope: Option<Vec<String>>,
    /// SHA-256 of the token that created it (hex), never the token.
    #[serde(default)]
    pub token_sha256: Option<String>,
    pub downstreams: Vec<downstream::SavedDownstream>,
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Session {
    pub fn new(
        id: String,
        protocol_version: String,
        init_params: Box<RawValue>,
        client_name: String,
        access: &Access,
    ) -> Arc<Session> {
        Session::with_last_active(
            id,
            protocol_version,
            init_params,
            client_name,
            access.servers().map(<[String]>::to_vec),
            access.bearer().map(|token| crate::runtime::sha256::digest(token.as_bytes())),
            Instant::now(),
        )
    }

    /// Rebuilds a session saved by an earlier process; its downstream
    /// sessions are added with [`Session::adopt`].
    pub fn restore(saved: &SavedSession) -> Arc<Session> {
        let idle = Duration::from_secs(unix_now().saturating_sub(saved.last_active));
        let last_active = Instant::now().checked_sub(idle).unwrap_or_else(Instant::now);
        Session::with_last_active(
            saved.id.clone(),
            saved.protocol_version.clone(),
            jsonrpc::raw(&saved.init_params),
            saved.client_name.clone(),
            saved.scope.clone(),
            saved.token_sha256.as_deref().and_then(parse_digest),
            last_active,
        )
    }

    fn with_last_active(
        id: String,
        protocol_version: String,
        init_params: Box<RawValue>,
        client_name: String,
        scope: Option<Vec<String>>,
        token: Option<[u8; 32]>,
        last_active: Instant,
    ) -> Arc<Session> {
        Arc::new_cyclic(|me| Session {
            id,
            protocol_version,
            init_params,
            client_name,
            token,
            scope,
            state: Mutex::new(State {
                closed: false,
                deleted_by_client: false,
                last_active,
                in_flight: 0,
                streams: Vec::new(),
                next_stream: 0,
                next_attach: 0,
                slots: HashMap::new(),
                lists: HashMap::new(),
                calls: HashMap::new(),
                asks: BTreeMap::new(),
                next_ask: 1,
                backlog: VecDeque::new(),
                next_seq: 1,
                log: VecDeque::new(),
                log_bytes: 0,
                posts: HashMap::new(),
                log_level: None,
                lost: Vec::new(),
                tasks: TaskIds::default(),
            }),
            slot_changed: Condvar::new(),
            tally: Arc::new(AtomicUsize::new(0)),
            me: me.clone(),
        })
    }

    /// Marks a request as running until the guard drops; a session with a
    /// request running is never idle. `None` when `max` are running already.
    pub fn activity(&self, max: usize) -> Option<Activity<'_>> {
        let mut st = self.state.lock();
        if st.in_flight >= max {
            return None;
        }
        st.in_flight += 1;
        st.last_active = Instant::now();
        Some(Activity(self))
    }

    /// Whether a request with `access` may use this session: the token that
    /// created it (restored sessions too: its hash is saved), or any when
    /// no tokens are configured. A session created without a token answers
    /// no token.
    pub fn admits(&self, access: &Access) -> bool {
        match (access.bearer(), &self.token) {
            (None, _) => true,
            (Some(presented), Some(token)) => {
                crate::http::access::constant_time_eq(&crate::runtime::sha256::digest(presented.as_bytes()), token)
            }
            (Some(_), None) => false,
        }
    }

    /// Whether this session may reach `server`.
    pub fn allows(&self, server: &str) -> bool {
        self.scope.as_ref().is_none_or(|servers| servers.iter().any(|s| s == server))
    }

    /// How long the session has been idle: no request running, no `GET`
    /// stream, nothing since the later of the last request and the last
    /// stream's end. `None` while it is in use.
    pub fn idle_for(&self, now: Instant) -> Option<Duration> {
        let st = self.state.lock();
        if st.closed || st.in_flight > 0 || !st.streams.is_empty() {
            return None;
        }
        Some(now.saturating_duration_since(st.last_active))
    }

    /// The open downstream session with `server`, opening it if needed. A
    /// server that failed is tried again only after `retry`.
    pub fn downstream(&self, server: &Arc<Server>, retry: Duration) -> Result<Arc<Downstream>, RpcError> {
        let name = server.name();
        let wait = server.limits.connect + server.limits.request;
        let mut stale = None;
        {
            let mut st = self.state.lock();
            loop {
                if st.closed {
                    return Err(RpcError::internal("the session is closing"));
                }
                match st.slots.get(name) {
                    Some(Slot::Open(d)) if Arc::ptr_eq(&d.server, server) => return Ok(d.clone()),
                    Some(Slot::Open(_)) => {
                        // Of a server a reload retired, which this request no longer sees:
                        // closed here (taken from the slot, it is this thread's to close).
                        if let Some(Slot::Open(d)) = st.slots.insert(name.to_string(), Slot::Opening) {
                            server.journal.closing(d.closing_record());
                            stale = Some(d);
                        }
                        break;
                    }
                    Some(Slot::Opening) => {
                        if self.slot_changed.wait_for(&mut st, wait).timed_out() {
                            return Err(RpcError::server(name, "still opening its session"));
                        }
                    }
                    Some(Slot::Failed { error, at, .. }) if at.elapsed() < retry => {
                        return Err(RpcError::server(name, error));
                    }
                    _ => {
                        st.slots.insert(name.to_string(), Slot::Opening);
                        break;
                    }
                }
            }
        }
        if let Some(d) = stale {
            downstream::close_all(&[d], 1);
        }
        let inbox: Weak<dyn Inbox> = self.me.clone();
        let result = server.open(&self.init_params, inbox);
        let mut st = self.state.lock();
        let outcome = match result {
            Ok(d) if st.closed || server.is_retired() => {
                st.slots.remove(name);
                drop(st);
                downstream::close_all(&[d], 1);
                self.slot_changed.notify_all();
                return Err(RpcError::server(name, "closed while it opened (session ended or configuration reloaded)"));
            }
            Ok(d) => {
                let recovered = matches!(st.slots.get(name), Some(Slot::Failed { .. }));
                st.slots.insert(name.to_string(), Slot::Open(d.clone()));
                if recovered {
                    st.lists.clear();
                }
                let level = st.log_level.clone().filter(|_| d.offers("logging"));
                drop(st);
                self.slot_changed.notify_all();
                // In the state file before anything uses it: a crash from
                // here on cannot orphan it.
                // A failed write is logged by the writer (initialize refuses the session).
                let _ = server.journal.commit();
                if let Some(level) = level {
                    let id = d.next_id();
                    if let Err(e) = d.request(&id, "logging/setLevel", Some(&level), &mut |_| {}) {
                        crate::limited!(warn, "server `{name}`: logging/setLevel: {}", server.redact(&e.to_string()));
                    }
                }
                return Ok(d);
            }
            Err(e) => {
                let error = server.redact(&e.to_string());
                let exhausted = matches!(e, downstream::DownstreamError::Exhausted(_));
                st.slots.insert(name.to_string(), Slot::Failed { error: error.clone(), at: Instant::now(), exhausted });
                Err(RpcError::server(name, error))
            }
        };
        drop(st);
        self.slot_changed.notify_all();
        outcome
    }

    /// The downstream sessions whose server forgot them, to reopen; each is
    /// handed out once, and only while it is still the one in its slot (a
    /// request may have replaced it already).
    pub fn take_lost(&self) -> Vec<Arc<Downstream>> {
        let mut st = self.state.lock();
        let lost = std::mem::take(&mut st.lost);
        lost.iter()
            .filter_map(|(name, session_id)| match st.slots.get(name) {
                Some(Slot::Open(d)) if d.session_id() == session_id.as_deref() => Some(d.clone()),
                _ => None,
            })
            .collect()
    }

    /// Takes over a downstream session saved by an earlier process; its
    /// reader starts later ([`Session::start_reader`]).
    pub fn adopt(&self, server: &Arc<Server>, saved: &downstream::SavedDownstream) -> Arc<Downstream> {
        let d = server.saved_downstream(saved);
        self.state.lock().slots.insert(server.name().to_string(), Slot::Open(d.clone()));
        d
    }

    /// Starts the reader of a downstream session taken over at a restart.
    /// Without one it still serves requests; the error is logged.
    pub fn start_reader(&self, d: &Arc<Downstream>) {
        let inbox: Weak<dyn Inbox> = self.me.clone();
        let _ = d.start_reader(inbox);
    }

    /// The state file's closing records of its open downstream sessions.
    pub fn closing_records(&self) -> Vec<(usize, downstream::SavedDownstream)> {
        let st = self.state.lock();
        st.slots
            .values()
            .filter_map(|slot| match slot {
                Slot::Open(d) => d.closing_record(),
                _ => None,
            })
            .collect()
    }

    /// Marks the session closed and takes its open downstream sessions,
    /// for a session that was never put in the table.
    pub fn take_downstreams(&self) -> Vec<Arc<Downstream>> {
        self.take_for_close(CloseReason::Refused)
    }

    /// What the state file keeps of this session; `None` once it is closing.
    pub fn saved(&self, with_downstreams: bool) -> Option<SavedSession> {
        let st = self.state.lock();
        if st.closed {
            return None;
        }
        let downstreams = if with_downstreams {
            st.slots
                .values()
                .filter_map(|slot| match slot {
                    Slot::Open(d) => d.saved(),
                    _ => None,
                })
                .collect()
        } else {
            Vec::new()
        };
        let idle = if st.in_flight > 0 || !st.streams.is_empty() { Duration::ZERO } else { st.last_active.elapsed() };
        Some(SavedSession {
            id: self.id.clone(),
            protocol_version: self.protocol_version.clone(),
            init_params: serde_json::from_str(self.init_params.get()).unwrap_or(Value::Null),
            client_name: self.client_name.clone(),
            last_active: unix_now().saturating_sub(idle.as_secs()),
            scope: self.scope.clone(),
            token_sha256: self.token.map(|t| t.iter().map(|b| format!("{b:02x}")).collect()),
            downstreams,
        })
    }

    /// Replaces a downstream session the server no longer knows: the old one
    /// goes through the close path, a new one opens. When another request
    /// already replaced it, that one is used.
    pub fn reopen(&self, server: &Arc<Server>, old: &Arc<Downstream>) -> Result<Arc<Downstream>, RpcError> {
        {
            let mut st = self.state.lock();
            if let Some(Slot::Open(d)) = st.slots.get(server.name())
                && Arc::ptr_eq(d, old)
            {
                // Marked closing before it leaves the slot: no write of the state file misses it.
                server.journal.closing(old.closing_record());
                st.slots.remove(server.name());
            }
        }
        downstream::close_all(std::slice::from_ref(old), 1);
        self.downstream(server, Duration::ZERO)
    }

    /// Takes the downstream sessions of `servers` (retired by a reload) for
    /// the caller to close; they reopen lazily with the new settings.
    pub fn take_servers(&self, servers: &[Arc<Server>]) -> Vec<Arc<Downstream>> {
        let mut st = self.state.lock();
        let mut taken = Vec::new();
        for server in servers {
            match st.slots.get(server.name()) {
                // Only the retired server's own: the slot may already hold one
                // opened on the server that replaced it.
                Some(Slot::Open(d)) if Arc::ptr_eq(&d.server, server) => {
                    if let Some(Slot::Open(d)) = st.slots.remove(server.name()) {
                        server.journal.closing(d.closing_record());
                        taken.push(d);
                    }
                }
                // A failure of the old server says nothing of the new one.
                Some(Slot::Failed { .. }) => {
                    st.slots.remove(server.name());
                }
                // An opener sees its server retired and closes what it opened.
                Some(Slot::Open(_) | Slot::Opening) | None => {}
            }
        }
        taken
    }

    /// The merged lists may have changed (a reload): forget them and tell the client.
    pub fn lists_changed(&self) {
        self.state.lock().lists.clear();
        for kind in [ListKind::Tools, ListKind::Prompts, ListKind::Resources] {
            self.push_to_stream(jsonrpc::notification(kind.changed_notification(), None));
        }
    }

    /// The downstream session with `server` if it is open now; never opens one.
    pub fn downstream_if_open(&self, server: &str) -> Option<Arc<Downstream>> {
        match self.state.lock().slots.get(server) {
            Some(Slot::Open(d)) => Some(d.clone()),
            _ => None,
        }
    }

    /// Why opening failed where mcpgate itself was short of a resource.
    pub fn exhausted(&self) -> Option<String> {
        self.state.lock().slots.values().find_map(|slot| match slot {
            Slot::Failed { error, exhausted: true, .. } => Some(error.clone()),
            _ => None,
        })
    }

    /// The error of each server whose downstream session failed to open.
    pub fn failed_servers(&self) -> Vec<(String, String)> {
        let st = self.state.lock();
        let mut failed: Vec<(String, String)> = st
            .slots
            .iter()
            .filter_map(|(name, slot)| match slot {
                Slot::Failed { error, .. } => Some((name.clone(), error.clone())),
                _ => None,
            })
            .collect();
        failed.sort();
        failed
    }

    pub fn cached_list(&self, kind: ListKind) -> Option<Arc<List>> {
        self.state.lock().lists.get(&kind).cloned()
    }

    pub fn cache_list(&self, list: Arc<List>) {
        self.state.lock().lists.insert(list.kind, list);
    }

    /// Remembers which server works on the client's request `client_id`,
    /// and its flight, which the client's cancel or the session's close stops.
    pub fn start_call(&self, client_id: &Value, server: &str, downstream_id: &Value, flight: Arc<Flight>) {
        let call = Call { server: server.to_string(), downstream_id: downstream_id.clone(), flight };
        self.state.lock().calls.insert(id_key(client_id), call);
    }

    pub fn end_call(&self, client_id: &Value) {
        self.state.lock().calls.remove(&id_key(client_id));
    }

    /// Ends the client's request `client_id` at once (its answer will
    /// carry no response) and says where its cancel goes: the downstream
    /// session and the server's id for the request.
    pub fn cancel(&self, client_id: &Value) -> Option<(Arc<Downstream>, Value)> {
        let (flight, target) = {
            let st = self.state.lock();
            let call = st.calls.get(&id_key(client_id))?;
            let target = match st.slots.get(&call.server) {
                Some(Slot::Open(d)) => Some((d.clone(), call.downstream_id.clone())),
                _ => None,
            };
            (call.flight.clone(), target)
        };
        flight.stop(Stop::Cancelled);
        target
    }

    /// Every open downstream session.
    pub fn open_downstreams(&self) -> Vec<Arc<Downstream>> {
        let st = self.state.lock();
        st.slots
            .values()
            .filter_map(|slot| match slot {
                Slot::Open(d) => Some(d.clone()),
                _ => None,
            })
            .collect()
    }

    /// Turns a message from `server` into what the client receives, or
    /// `None` when the client must not see it. Requests get an id of
    /// mcpgate's, remembered so the answer can go back; `list_changed`
    /// makes the merged list stale.
    pub fn to_client(&self, server: &Server, message: Message) -> Option<Vec<u8>> {
        match message.kind().ok()? {
            Kind::Request => {
                let params = self.task_params(server, &message);
                let mut st = self.state.lock();
                let n = st.next_ask;
                st.next_ask += 1;
                st.asks.insert(n, Ask { server: server.name().to_string(), id: message.id.clone()? });
                if st.asks.len() > MAX_ASKS {
                    st.asks.pop_first();
                }
                Some(jsonrpc::request(&Value::from(n), message.method(), params.as_deref()))
            }
            Kind::Notification => {
                let method = message.method();
                if let Some(kinds) = stale_lists(method) {
                    let mut st = self.state.lock();
                    for kind in kinds {
                        st.lists.remove(kind);
                    }
                }
                if method == "notifications/cancelled" {
                    return self.server_cancelled(server, &message);
                }
                Some(jsonrpc::notification(method, self.task_params(server, &message).as_deref()))
            }
            Kind::Response => None,
        }
    }

    /// A message's params with the server's task ids as the client knows
    /// them; untouched (and not parsed) when they name no task.
    fn task_params(&self, server: &Server, message: &Message) -> Option<Box<RawValue>> {
        let raw = message.params.as_deref()?;
        if !(raw.get().contains(tasks::RELATED) || message.method() == "notifications/tasks/status") {
            return Some(raw.to_owned());
        }
        let Ok(mut params) = serde_json::from_str::<Value>(raw.get()) else { return Some(raw.to_owned()) };
        self.tasks_from(server.name(), &mut params);
        Some(jsonrpc::raw(&params))
    }

    /// Rewrites the task ids `server` wrote in `value` to the client's.
    pub fn tasks_from(&self, server: &str, value: &mut Value) {
        let mut st = self.state.lock();
        tasks::rewrite_ids(value, &mut |theirs| Some(st.tasks.expose(server, theirs)));
    }

    /// The server and its own id behind the client's task id.
    pub fn task_target(&self, exposed: &str) -> Option<(String, String)> {
        self.state.lock().tasks.target(exposed)
    }

    /// A server withdrew a request it sent the client: rewrite its id to ours.
    fn server_cancelled(&self, server: &Server, message: &Message) -> Option<Vec<u8>> {
        let mut params = message.params_object().ok()?;
        let theirs = params.get("requestId")?.clone();
        let mut st = self.state.lock();
        let ours = *st.asks.iter().find(|(_, a)| a.server == server.name() && a.id == theirs)?.0;
        st.asks.remove(&ours);
        params.insert("requestId".into(), Value::from(ours));
        Some(jsonrpc::notification("notifications/cancelled", Some(&jsonrpc::raw(&Value::Object(params)))))
    }

    /// The client's answer to a server's request: the downstream session it
    /// goes to and the message with the server's own id. `None` for an id
    /// mcpgate never issued (or already answered).
    pub fn answer_from_client(&self, message: &Message) -> Option<(Arc<Downstream>, Vec<u8>)> {
        let n = message.id.as_ref()?.as_u64()?;
        let mut st = self.state.lock();
        let ask = st.asks.remove(&n)?;
        let Some(Slot::Open(d)) = st.slots.get(&ask.server) else { return None };
        let body = match (&message.result, &message.error) {
            (Some(result), _) => jsonrpc::result(&ask.id, result),
            (None, Some(error)) => jsonrpc::raw_error(&ask.id, error),
            (None, None) => return None,
        };
        Some((d.clone(), body))
    }

    /// Sends a message to the client's `GET` stream, or keeps it until one
    /// opens. A stream that falls behind (a client that does not read) by
    /// more than the session's share of `max_memory_mb`, or by
    /// [`STREAM_QUEUE`] messages, is ended: the client resumes it with
    /// `Last-Event-ID` and gets what the replay log still holds.
    pub fn push_to_stream(&self, message: Vec<u8>) {
        let mut st = self.state.lock();
        while let Some(stream) = st.streams.last() {
            let (id, tx) = (stream.id, stream.tx.clone());
            let Some(event) = st.record(id, &message, false, &self.tally) else {
                crate::limited!(
                    warn,
                    "session {}: mcpgate holds its limit of max_memory_mb; a message for it was dropped",
                    short(&self.id)
                );
                return;
            };
            if self.tally.load(Ordering::Relaxed) > memory::share() {
                let behind = st.streams.iter().filter(|s| !s.tx.is_empty()).count();
                st.streams.retain(|s| s.tx.is_empty());
                if behind > 0 {
                    crate::limited!(
                        warn,
                        "session {}: {behind} GET stream(s) fell more than its share of max_memory_mb ({} bytes) \
                         behind; ended (the client resumes with Last-Event-ID)",
                        short(&self.id),
                        memory::share()
                    );
                }
            }
            if st.streams.last().is_some_and(|s| s.id == id && s.tx.same_channel(&tx)) {
                match tx.try_send(event) {
                    Ok(()) => return,
                    Err(TrySendError::Full(_)) => {
                        crate::limited!(
                            warn,
                            "session {}: a GET stream fell {STREAM_QUEUE} messages behind; ended",
                            short(&self.id)
                        );
                        st.streams.pop();
                    }
                    // Its writer ended (the client left) and has not detached yet.
                    Err(TrySendError::Disconnected(_)) => {
                        st.streams.pop();
                    }
                }
            }
        }
        // No stream: keep it, within the count and the session's share.
        let share = memory::share();
        while !st.backlog.is_empty()
            && (st.backlog.len() >= BACKLOG || self.tally.load(Ordering::Relaxed) + message.len() > share)
        {
            st.backlog.pop_front();
            crate::limited!(
                warn,
                "session {}: no GET stream open and its backlog is full ({BACKLOG} messages or {share} bytes); \
                 the oldest is dropped",
                short(&self.id)
            );
        }
        st.make_room(message.len(), share, &self.tally);
        match Held::new(message, &self.tally) {
            Ok(message) => st.backlog.push_back(message),
            Err(_) => crate::limited!(
                warn,
                "session {}: mcpgate holds its limit of max_memory_mb; a message for it was dropped",
                short(&self.id)
            ),
        }
    }

    /// The priming event that opens a stream for a 2025-11-25 client: an id
    /// to resume from and how long to wait before reconnecting.
    pub fn priming(&self, stream: u64) -> Option<Vec<u8>> {
        (self.protocol_version.as_str() >= "2025-11-25").then(|| sse::priming(&format!("{stream}-0"), Some(RETRY_MS)))
    }

    /// Starts the SSE answer of a `POST`: its stream number.
    pub fn open_post_stream(&self) -> u64 {
        let mut st = self.state.lock();
        st.next_stream += 1;
        let id = st.next_stream;
        st.posts.insert(id, None);
        id
    }

    /// One event of a `POST` stream as SSE bytes, kept for replay (when
    /// the session has room) and passed to a `GET` that resumed the stream.
    /// `last` (the response) ends it.
    pub fn post_event(&self, stream: u64, message: &[u8], last: bool) -> Vec<u8> {
        let mut st = self.state.lock();
        let resumer = if last { st.posts.remove(&stream).flatten() } else { st.posts.get(&stream).cloned().flatten() };
        match st.record(stream, message, last, &self.tally) {
            Some(event) => {
                let bytes = event.to_vec();
                if let Some(tx) = resumer {
                    let _ = tx.try_send(event);
                }
                bytes
            }
            // Not kept: this answer goes out, but cannot be resumed.
            None => st.encode(stream, message),
        }
    }

    /// Ends a `POST` stream without a response (its request was
    /// cancelled): a `GET` that resumed it ends, and one that resumes it
    /// later gets what was sent and nothing more.
    pub fn end_post_stream(&self, stream: u64) {
        let mut st = self.state.lock();
        st.posts.remove(&stream);
        st.record(stream, b"", true, &self.tally);
    }

    /// Attaches a `GET` stream. With `last_event_id` of an earlier stream,
    /// the events of that stream after it are replayed first, and only
    /// those; resuming a `POST` stream follows it to its response.
    pub fn attach_stream(&self, last_event_id: Option<&str>, max_streams: usize) -> Result<Attached, RpcError> {
        let mut st = self.state.lock();
        if st.closed {
            return Err(RpcError::internal("the session is closing"));
        }
        let resume = last_event_id.and_then(parse_event_id);
        let replay: Vec<Event> = match resume {
            Some((stream, seq)) => {
                st.log.iter().filter(|e| e.stream == stream && e.seq > seq).map(|e| e.bytes.clone()).collect()
            }
            None => Vec::new(),
        };
        if let Some((stream, _)) = resume {
            let finished = st.log.iter().any(|e| e.stream == stream && e.last);
            if finished {
                let (_, rx) = bounded(0);
                return Ok(Attached { id: None, first: replay, rx });
            }
            if let Some(resumer) = st.posts.get_mut(&stream) {
                let (tx, rx) = bounded(STREAM_QUEUE);
                *resumer = Some(tx);
                return Ok(Attached { id: None, first: replay, rx });
            }
        }
        // Resuming a GET stream continues it: same stream number, so the ids
        // the client sees keep naming one stream. The connection it replaces
        // is taken as dead.
        let resumed = resume.map(|(stream, _)| stream).filter(|&stream| stream <= st.next_stream);
        if let Some(stream) = resumed {
            st.streams.retain(|s| s.id != stream);
        }
        if st.streams.len() >= max_streams {
            return Err(RpcError::new(
                jsonrpc::INVALID_REQUEST,
                format!("this session already has {max_streams} GET streams open (max_streams_per_session)"),
            ));
        }
        let id = match resumed {
            Some(stream) => stream,
            None => {
                st.next_stream += 1;
                st.next_stream
            }
        };
        // Replay first, then the priming event: its id must not be one a
        // client could resume from while replayed events are still unseen.
        let mut first = replay;
        if self.protocol_version.as_str() >= "2025-11-25" {
            first.extend(st.record(id, b"", false, &self.tally));
        }
        let waiting: Vec<Event> = st.backlog.drain(..).collect();
        for message in waiting {
            // The message leaves the backlog as it enters the log: room for it is there.
            let len = message.len();
            let message = Arc::try_unwrap(message).map_or_else(|shared| shared.to_vec(), |held| held.to_vec());
            match st.record(id, &message, false, &self.tally) {
                Some(event) => first.push(event),
                None => {
                    crate::limited!(warn, "session {}: a waiting message of {len} bytes was dropped", short(&self.id))
                }
            }
        }
        let (tx, rx) = bounded(STREAM_QUEUE);
        st.next_attach += 1;
        let attach = st.next_attach;
        st.streams.push(ClientStream { id, attach, tx, rx: rx.clone() });
        Ok(Attached { id: Some(attach), first, rx })
    }

    /// Remembers `logging/setLevel` for servers this session opens later.
    pub fn remember_log_level(&self, params: Option<&RawValue>) {
        self.state.lock().log_level = params.map(|p| p.to_owned());
    }

    /// A `GET` stream ended (client gone, or the session closed).
    pub fn detach_stream(&self, attach: u64) {
        let mut st = self.state.lock();
        st.streams.retain(|s| s.attach != attach);
        if st.streams.is_empty() {
            st.last_active = st.last_active.max(Instant::now());
        }
    }

    /// Whether its client ended the session (`DELETE`): its calls then end
    /// without a response, as cancelled ones do.
    pub fn deleted_by_client(&self) -> bool {
        self.state.lock().deleted_by_client
    }

    /// Marks the session closed and takes what must be closed: its open
    /// downstream sessions. Its streams end as their queues are dropped.
    fn take_for_close(&self, reason: CloseReason) -> Vec<Arc<Downstream>> {
        let mut st = self.state.lock();
        st.closed = true;
        st.deleted_by_client = reason == CloseReason::ClientDelete;
        st.streams.clear();
        let calls: Vec<Call> = st.calls.drain().map(|(_, call)| call).collect();
        st.asks.clear();
        st.lists.clear();
        st.backlog.clear();
        st.log.clear();
        st.posts.clear();
        let slots = std::mem::take(&mut st.slots);
        drop(st);
        self.slot_changed.notify_all();
        for call in calls {
            call.flight.stop(Stop::Closing);
        }
        slots
            .into_values()
            .filter_map(|slot| match slot {
                Slot::Open(d) => Some(d),
                _ => None,
            })
            .collect()
    }
}

impl State {
    /// Encodes `message` as the next event of `stream`, without keeping it.
    fn encode(&mut self, stream: u64, message: &[u8]) -> Vec<u8> {
        let seq = self.next_seq;
        self.next_seq += 1;
        sse::encode(Some(&format!("{stream}-{seq}")), message)
    }

    /// Encodes `message` as the next event of `stream` and keeps it for
    /// replay; `None` when the budget has no room for it even after the
    /// session gave up its oldest replay events.
    fn record(&mut self, stream: u64, message: &[u8], last: bool, tally: &Arc<AtomicUsize>) -> Option<Event> {
        let seq = self.next_seq;
        let bytes = self.encode(stream, message);
        self.make_room(bytes.len(), memory::share(), tally);
        let mut bytes = bytes;
        let event = loop {
            match Held::new(bytes, tally) {
                Ok(event) => break event,
                // Spent: what this session keeps for replay goes first.
                Err(back) if !self.log.is_empty() => {
                    bytes = back;
                    self.drop_oldest();
                }
                Err(_) => return None,
            }
        };
        self.log.push_back(Logged { stream, seq, last, bytes: event.clone() });
        self.log_bytes += event.len();
        while self.log.len() > REPLAY_EVENTS || self.log_bytes > REPLAY_BYTES {
            self.drop_oldest();
        }
        Some(event)
    }

    /// Gives up replay events until `more` bytes fit in the session's `share`.
    fn make_room(&mut self, more: usize, share: usize, tally: &AtomicUsize) {
        while !self.log.is_empty() && tally.load(Ordering::Relaxed) + more > share {
            self.drop_oldest();
        }
    }

    fn drop_oldest(&mut self) {
        if let Some(old) = self.log.pop_front() {
            self.log_bytes -= old.bytes.len();
        }
    }
}

/// 64 hex digits back into a digest.
fn parse_digest(hex: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    if hex.len() != 64 {
        return None;
    }
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// `<stream>-<seq>` back into numbers.
fn parse_event_id(id: &str) -> Option<(u64, u64)> {
    let (stream, seq) = id.trim().split_once('-')?;
    Some((stream.parse().ok()?, seq.parse().ok()?))
}

/// The lists a `list_changed` notification makes stale.
fn stale_lists(method: &str) -> Option<&'static [ListKind]> {
    match method {
        "notifications/tools/list_changed" => Some(&[ListKind::Tools]),
        "notifications/prompts/list_changed" => Some(&[ListKind::Prompts]),
        "notifications/resources/list_changed" => Some(&[ListKind::Resources, ListKind::Templates]),
        _ => None,
    }
}

impl Inbox for Session {
    fn deliver(&self, server: &Arc<Server>, message: Message) {
        if let Some(bytes) = self.to_client(server, message) {
            self.push_to_stream(bytes);
        }
    }

    fn lost(&self, server: &Arc<Server>, session_id: Option<&str>) {
        self.state.lock().lost.push((server.name().to_string(), session_id.map(str::to_string)));
    }
}

/// Keeps a session busy while a request runs.
pub struct Activity<'a>(&'a Session);

impl Drop for Activity<'_> {
    fn drop(&mut self) {
        let mut st = self.0.state.lock();
        st.in_flight -= 1;
        st.last_active = Instant::now();
    }
}

/// A map key for a JSON-RPC id: `1` and `"1"` stay distinct.
fn id_key(id: &Value) -> String {
    id.to_string()
}

/// The first characters of a session id, enough to tell sessions apart in logs.
pub fn short(id: &str) -> &str {
    &id[..id.len().min(8)]
}

/// The live sessions by id.
pub struct Sessions {
    /// Guards the map only; sessions lock their own state.
    map: Mutex<HashMap<String, Arc<Session>>>,
    /// A session leaving the table has its downstream sessions marked
    /// closing in the state file first, so that no write of the file can
    /// miss them between the two.
    journal: Arc<Journal>,
}

impl Sessions {
    pub fn new(journal: Arc<Journal>) -> Sessions {
        Sessions { map: Mutex::new(HashMap::new()), journal }
    }

    fn leaving(&self, session: &Session) {
        self.journal.closing(session.closing_records());
    }

    pub fn len(&self) -> usize {
        self.map.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, id: &str) -> Option<Arc<Session>> {
        self.map.lock().get(id).cloned()
    }

    /// Adds a session unless `max` are live.
    pub fn insert(&self, session: Arc<Session>, max: usize) -> bool {
        let mut map = self.map.lock();
        if map.len() >= max {
            return false;
        }
        map.insert(session.id.clone(), session);
        memory::set_sessions(map.len());
        true
    }

    /// Removes the session if `allowed` says so (e.g. it answers to the token).
    pub fn remove_if(&self, id: &str, allowed: impl FnOnce(&Session) -> bool) -> Option<Arc<Session>> {
        let mut map = self.map.lock();
        let session = map.get(id)?;
        if !allowed(session) {
            return None;
        }
        self.leaving(session);
        let removed = map.remove(id);
        memory::set_sessions(map.len());
        removed
    }

    /// Removes and returns the sessions idle for at least `timeout`.
    pub fn take_idle(&self, timeout: Duration) -> Vec<Arc<Session>> {
        let now = Instant::now();
        let mut map = self.map.lock();
        let idle: Vec<String> =
            map.values().filter(|s| s.idle_for(now).is_some_and(|d| d >= timeout)).map(|s| s.id.clone()).collect();
        let taken: Vec<Arc<Session>> = idle.iter().filter_map(|id| map.remove(id)).collect();
        taken.iter().for_each(|s| self.leaving(s));
        memory::set_sessions(map.len());
        taken
    }

    /// Removes and returns every session.
    pub fn take_all(&self) -> Vec<Arc<Session>> {
        let mut map = self.map.lock();
        map.values().for_each(|s| self.leaving(s));
        let taken = map.drain().map(|(_, s)| s).collect();
        drop(map);
        memory::set_sessions(0);
        taken
    }

    /// A copy of the list, to read without holding the map.
    pub fn snapshot(&self) -> Vec<Arc<Session>> {
        self.map.lock().values().cloned().collect()
    }
}

/// Closes sessions already removed from [`Sessions`]: the one close path of
/// client sessions, for idle eviction, client `DELETE` and shutdown alike.
/// Every downstream session goes through [`downstream::close_all`].
pub fn close_sessions(sessions: Vec<Arc<Session>>, reason: CloseReason, parallel: usize, stats: &Stats) {
    let mut downstreams = Vec::new();
    for session in &sessions {
        downstreams.extend(session.take_for_close(reason));
        match reason {
            CloseReason::Idle => stats.sessions_evicted_idle.inc(),
            CloseReason::ClientDelete => stats.sessions_deleted_by_client.inc(),
            CloseReason::Shutdown => stats.sessions_closed_at_shutdown.inc(),
            CloseReason::Refused => {}
        }
        log::debug!("session {} closed ({reason:?})", short(&session.id));
    }
    downstream::close_all(&downstreams, parallel);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::downstream::stdio::Children;
    use crate::downstream::{Context, Limits};

    fn server() -> Arc<Server> {
        let text = serde_json::json!({"mcpServers": {"s": {"url": "http://127.0.0.1:9/mcp"}}}).to_string();
        let config = Config::parse(&text, &|_| None).unwrap();
        let context = Context {
            stats: Arc::new(Stats::default()),
            journal: Arc::new(Journal::new(None)),
            children: Children::new(1, Duration::from_millis(10), 1024),
        };
        Arc::new(Server::new(config.servers[0].clone(), Limits::from_config(&config), 1, &context))
    }

    fn session() -> Arc<Session> {
        let params = jsonrpc::raw(&serde_json::json!({"capabilities": {}}));
        Session::new("s".into(), "2025-11-25".into(), params, "test".into(), &Access::Open)
    }

    /// A server's requests the client never answers do not pile up: the
    /// table keeps the newest [`MAX_ASKS`], and the oldest are forgotten.
    #[test]
    fn requests_the_client_never_answers_are_bounded() {
        let (server, session) = (server(), session());
        for i in 0..3000 {
            let text = format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"sampling/createMessage","params":{{}}}}"#);
            let out = session.to_client(&server, Message::parse(text.as_bytes()).unwrap());
            assert!(out.is_some());
        }
        let asks = session.state.lock().asks.len();
        assert!(asks <= MAX_ASKS, "{asks} requests kept");
        // The newest can still be answered, with the server's own id.
        let answer = Message::parse(br#"{"jsonrpc":"2.0","id":3000,"result":{}}"#).unwrap();
        let newest = session.state.lock().asks.get(&3000).map(|a| a.id.clone());
        assert_eq!(newest, Some(Value::from(2999)));
        assert!(session.answer_from_client(&answer).is_none(), "no open downstream session to take it");
        assert!(!session.state.lock().asks.contains_key(&3000));
    }
}
