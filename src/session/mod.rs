//! Client sessions: each holds one slot per server for its downstream
//! session (`slots`), what goes to its client (`streams`, with the replay
//! log), the requests in flight in both directions (`routing`), and its
//! merged lists. [`close_sessions`] is the one way a session ends.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use parking_lot::{Condvar, Mutex};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::catalog::ListKind;
use crate::downstream::{self, Downstream, Inbox, Server, Stop};
use crate::http::auth::Access;
use crate::protocol::jsonrpc::{self, Kind, Message, Params, RpcError};
use crate::protocol::versions;
use crate::runtime::memory::{self};
use crate::runtime::state::Journal;
pub(crate) use crate::runtime::state::SavedSession;
use crate::runtime::{clock, secret};
use crate::stats::Stats;
use crate::tasks;

mod lost;
mod routing;
mod slots;
mod streams;
mod view;

use lost::Lost;
use routing::{CallInFlight, Callers, Calls, Routing, id_key, stale_lists};
use slots::{Found, Slots};
use streams::Streams;
pub(crate) use streams::{Attached, ListenFilter};
pub(crate) use view::{SlotView, View};

/// Why a session ended, for the counters and the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    Idle,
    ClientDelete,
    Shutdown,
    /// Refused at `initialize` after it was created (no server could open).
    Refused,
}

/// Everything about a session that changes. Guarded by `Session::state`,
/// which is never held across network I/O.
struct State {
    /// Set once, when the session is closed; with why.
    closed: bool,
    deleted_by_client: bool,
    /// One per server: its downstream session, or how opening it went.
    slots: Slots,
    /// The last `logging/setLevel` params, for servers opened later.
    log_level: Option<Box<RawValue>>,
    /// Downstream sessions whose stream answered 404 (or, HTTP+SSE, ended):
    /// the reaper reopens them once their backoff has passed.
    lost: Lost,
    /// What goes to the client: its streams and their replay log.
    streams: Streams,
    /// The calls of the 2026-07-28 clients' session running now, by server.
    callers: Callers<Asker>,
}

/// Whose a session is: the servers its token reaches (`None`: all), its
/// user's digest, and its user in words for the log.
struct Owner {
    scope: Option<Vec<String>>,
    principal: Option<[u8; 32]>,
    user: Option<[u8; 32]>,
    who: String,
    audited: Value,
}

/// Takes a server's request to the client of one call of the 2026-07-28
/// clients' session (as `input_required`).
pub(crate) type Asker = Arc<dyn Fn(&Session, &Server, Message) + Send + Sync>;

pub struct Session {
    pub(crate) id: String,
    pub(crate) protocol_version: String,
    /// What every server gets as `initialize` params: the client's capabilities and info.
    init_params: Box<RawValue>,
    /// Those params held against `max_memory_mb` (see [`Session::hold_params`]).
    params_held: Mutex<Option<memory::Charge>>,
    /// The view of the servers' lists those capabilities make (see `catalog::list_view_of`).
    view: u64,
    pub(crate) client_name: String,
    /// The servers this session may reach (its token's); `None` for all.
    scope: Option<Vec<String>>,
    /// Who created it (`Access::principal`: a token's SHA-256, an OAuth
    /// subject's digest): only the same principal reaches it.
    principal: Option<[u8; 32]>,
    /// Its user whatever its token's scopes (`Access::user`): whose tokens
    /// at servers with `oauth` its downstream sessions send.
    user: Option<[u8; 32]>,
    /// The same in words, for the log (`Access::who`).
    pub(crate) who: String,
    /// The same as the audit log writes it (`Access::audited`).
    pub(crate) audited: Value,
    /// When it was created; for a restored session, its last activity
    /// before the restart (it is at least that old).
    created: Instant,
    /// Requests of its client in flight, and its last activity (ms after
    /// `created`): atomics, not in `state`, so that the calls of a session
    /// many clients share (a 2026-07-28 pool) do not queue on its lock to
    /// count themselves: 4 of the 5 places their threads spun on it.
    in_flight: AtomicUsize,
    active_ms: AtomicU64,
    state: Mutex<State>,
    slot_changed: Condvar,
    /// The client's requests in flight: apart from `state`, and sharded,
    /// as each call takes it up to four times (its id claimed and released,
    /// its flight started and ended), and the calls of a session many
    /// clients share (a 2026-07-28 pool) queued on the one lock of the
    /// session. Never held with `state` or `routing`.
    calls: Calls,
    /// Requests toward the client, and task ids. Never held with `state`.
    routing: Mutex<Routing>,
    /// The session mcpgate keeps for clients of the 2026-07-28 era (one per
    /// token): no client holds its id, nothing waits for a `GET` stream.
    sessionless: std::sync::atomic::AtomicBool,
    /// Set at its first call (anything but `initialize`, lists and `ping`):
    /// until then `unused_session_idle_secs` ends it when idle.
    used: std::sync::atomic::AtomicBool,
    /// The epoch of this instance's hold on it in the session store.
    epoch: std::sync::atomic::AtomicU64,
    /// The store's count of possible losses when its hold was last checked
    /// (see `SessionStore::losses`).
    checked: std::sync::atomic::AtomicU64,
    me: Weak<Session>,
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
            Owner {
                scope: access.servers().map(<[String]>::to_vec),
                principal: access.principal(),
                user: access.user(),
                who: access.who(),
                audited: access.audited(),
            },
            Instant::now(),
        )
    }

    /// Rebuilds a session saved by an earlier process; its downstream
    /// sessions are added with [`Session::adopt`]. It counts as used: what
    /// it did before is not known.
    pub(crate) fn restore(saved: &SavedSession) -> Arc<Session> {
        let idle = Duration::from_secs(clock::unix_now().saturating_sub(saved.last_active));
        let last_active = Instant::now().checked_sub(idle).unwrap_or_else(Instant::now);
        let session = Session::with_last_active(
            saved.id.clone(),
            saved.protocol_version.clone(),
            jsonrpc::raw(&saved.init_params),
            saved.client_name.clone(),
            Owner {
                scope: saved.scope.clone(),
                principal: saved.principal_sha256.as_deref().and_then(crate::runtime::sha256::from_hex),
                user: saved
                    .user_sha256
                    .as_deref()
                    .or(saved.principal_sha256.as_deref())
                    .and_then(crate::runtime::sha256::from_hex),
                who: match saved.principal_sha256.as_deref() {
                    Some(hex) => format!("user {}", &hex[..hex.len().min(8)]),
                    None => "anyone".into(),
                },
                audited: match saved.principal_sha256.as_deref() {
                    Some(hex) => serde_json::json!({"user": format!("sha256:{}", &hex[..hex.len().min(8)])}),
                    None => serde_json::json!({}),
                },
            },
            last_active,
        );
        session.mark_used();
        session
    }

    fn with_last_active(
        id: String,
        protocol_version: String,
        init_params: Box<RawValue>,
        client_name: String,
        owner: Owner,
        last_active: Instant,
    ) -> Arc<Session> {
        let Owner { scope, principal, user, who, audited } = owner;
        let capabilities = serde_json::from_str::<Value>(init_params.get())
            .ok()
            .and_then(|mut p| p.get_mut("capabilities").map(Value::take));
        let view = crate::catalog::list_view_of(&capabilities.unwrap_or(Value::Null));
        let streams = Streams::new(short(&id));
        Arc::new_cyclic(|me| Session {
            id,
            protocol_version,
            init_params,
            params_held: Mutex::new(None),
            view,
            client_name,
            principal,
            user,
            who,
            audited,
            scope,
            created: last_active,
            in_flight: AtomicUsize::new(0),
            active_ms: AtomicU64::new(0),
            state: Mutex::new(State {
                closed: false,
                deleted_by_client: false,
                slots: Slots::default(),
                log_level: None,
                lost: Lost::default(),
                streams,
                callers: Callers::new(),
            }),
            slot_changed: Condvar::new(),
            calls: Calls::new(),
            routing: Mutex::new(Routing::new()),
            sessionless: std::sync::atomic::AtomicBool::new(false),
            used: std::sync::atomic::AtomicBool::new(false),
            epoch: std::sync::atomic::AtomicU64::new(0),
            checked: std::sync::atomic::AtomicU64::new(0),
            me: me.clone(),
        })
    }

    /// Marks a request as running until the guard drops; a session with a
    /// request running is never idle. `None` when `max` are running already.
    pub(crate) fn begin_request(&self, max: usize) -> Option<RequestGuard<'_>> {
        self.begin_requests(1, max)
    }

    /// [`Session::begin_request`] for `count` requests at once (a batch):
    /// `None` when they would pass `max` in flight.
    pub(crate) fn begin_requests(&self, count: usize, max: usize) -> Option<RequestGuard<'_>> {
        self.in_flight
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_add(count).filter(|&n| n <= max))
            .ok()?;
        self.touch();
        Some(RequestGuard(self, count))
    }

    /// Its last activity: a request begun or ended, a stream ended.
    fn last_active(&self) -> Instant {
        self.created + Duration::from_millis(self.active_ms.load(Ordering::SeqCst))
    }

    /// Notes activity now (never moving it back).
    fn touch(&self) {
        let ms = u64::try_from(self.created.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.active_ms.fetch_max(ms, Ordering::SeqCst);
    }

    /// Whether a request runs or a stream is open: not idle, whatever the time.
    fn in_use(&self, st: &State) -> bool {
        self.in_flight.load(Ordering::SeqCst) > 0 || !st.streams.is_empty()
    }

    /// Whether a request with `access` may use this session: the principal
    /// that created it (restored sessions too: its digest is saved), or any
    /// when no `auth` is configured. A session created without one answers none.
    pub(crate) fn admits(&self, access: &Access) -> bool {
        match (access.principal(), &self.principal) {
            (None, _) => true,
            (Some(presented), Some(own)) => secret::constant_time_eq(&presented, own),
            (Some(_), None) => false,
        }
    }

    /// Charges what this session keeps of its client (its `initialize`
    /// params) to `max_memory_mb`; false when the budget has no room.
    pub(crate) fn hold_params(&self) -> bool {
        let Some(charge) = memory::Charge::new(self.init_params.get().len() + self.id.len()) else { return false };
        *self.params_held.lock() = Some(charge);
        true
    }

    /// Which of each server's lists this session sees: those for its client's capabilities.
    pub(crate) fn list_view(&self) -> u64 {
        self.view
    }

    /// Whether this session may reach `server`.
    pub(crate) fn allows(&self, server: &str) -> bool {
        self.scope.as_ref().is_none_or(|servers| servers.iter().any(|s| s == server))
    }

    /// How long the session has been idle: no request running, no `GET`
    /// stream, nothing since the later of the last request and the last
    /// stream's end. `None` while it is in use.
    pub(crate) fn idle_for(&self, now: Instant) -> Option<Duration> {
        let st = self.state.lock();
        if st.closed || self.in_use(&st) {
            return None;
        }
        Some(now.saturating_duration_since(self.last_active()))
    }

    /// What the state file keeps of this session; `None` once it is closing.
    pub(crate) fn saved(&self, with_downstreams: bool) -> Option<SavedSession> {
        let st = self.state.lock();
        if st.closed {
            return None;
        }
        // Copied under the lock; parsed once it is released.
        let downstreams = if with_downstreams { st.slots.saved() } else { Vec::new() };
        let idle = if self.in_use(&st) { Duration::ZERO } else { self.last_active().elapsed() };
        drop(st);
        Some(SavedSession {
            id: self.id.clone(),
            protocol_version: self.protocol_version.clone(),
            init_params: serde_json::from_str(self.init_params.get()).unwrap_or(Value::Null),
            client_name: self.client_name.clone(),
            last_active: clock::unix_now().saturating_sub(idle.as_secs()),
            scope: self.scope.clone(),
            principal_sha256: self.principal.map(|t| crate::runtime::sha256::to_hex(&t)),
            user_sha256: self.user.filter(|u| Some(*u) != self.principal).map(|u| crate::runtime::sha256::to_hex(&u)),
            downstreams,
        })
    }

    /// Its last activity in unix seconds (now while it is in use); `None`
    /// once it is closing.
    pub(crate) fn last_active_unix(&self) -> Option<u64> {
        let st = self.state.lock();
        if st.closed {
            return None;
        }
        let idle = if self.in_use(&st) { Duration::ZERO } else { self.last_active().elapsed() };
        Some(clock::unix_now().saturating_sub(idle.as_secs()))
    }

    /// Where what its servers send unasked goes: itself.
    pub(crate) fn inbox(&self) -> Weak<dyn Inbox> {
        self.me.clone()
    }

    /// Its user: a token's or an OAuth subject's digest; `None` without `auth`.
    pub(crate) fn principal(&self) -> Option<[u8; 32]> {
        self.principal
    }

    /// Its user whatever its token's scopes (see `Access::user`): whose
    /// tokens at servers with `oauth` it uses.
    pub(crate) fn user(&self) -> Option<[u8; 32]> {
        self.user
    }

    /// It made a call: from now on only `session_idle_timeout_secs` ends it.
    pub(crate) fn mark_used(&self) {
        self.used.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether it ever made a call (see [`Session::mark_used`]).
    pub(crate) fn is_used(&self) -> bool {
        self.used.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The epoch of this instance's hold on it in the session store.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(std::sync::atomic::Ordering::Acquire)
    }

    pub(crate) fn set_epoch(&self, epoch: u64) {
        self.epoch.store(epoch, std::sync::atomic::Ordering::Release);
        self.state.lock().streams.number_from(stream_base(epoch));
    }

    /// The request a client resuming a stream with `last_event_id` names,
    /// when that stream was a `POST` answer of another holder of this
    /// session (it died with the call in flight): its stream number and
    /// the request as the priming event carried it.
    pub(crate) fn foreign_call(&self, last_event_id: &str) -> Option<(u64, Vec<u8>)> {
        let (stream, request) = streams::carried_request(last_event_id)?;
        let base = stream_base(self.epoch());
        self.state.lock().streams.is_foreign(stream, base).then_some((stream, request))
    }

    /// Whether its hold was checked since the store's `losses`-th possible loss.
    pub(crate) fn checked_since(&self, losses: u64) -> bool {
        self.checked.load(std::sync::atomic::Ordering::Acquire) >= losses
    }

    pub(crate) fn mark_checked(&self, losses: u64) {
        self.checked.fetch_max(losses, std::sync::atomic::Ordering::AcqRel);
    }

    /// Another instance took this session over: it ends here without a
    /// word to its client or to the store, and its downstream sessions go
    /// to [`downstream::hand_over_all`] (those of HTTP servers stay open
    /// for the other instance).
    pub(crate) fn hand_over(&self) {
        let open = self.take_for_close(CloseReason::Refused);
        downstream::hand_over_all(&open);
    }

    /// Makes this the session of the 2026-07-28 era's clients of one token.
    pub(crate) fn mark_sessionless(&self) {
        self.sessionless.store(true, std::sync::atomic::Ordering::Release);
    }

    pub(crate) fn is_sessionless(&self) -> bool {
        self.sessionless.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether its client ended the session (`DELETE`): its calls then end
    /// without a response, as cancelled ones do.
    pub(crate) fn deleted_by_client(&self) -> bool {
        self.state.lock().deleted_by_client
    }

    /// Marks the session closed and takes what must be closed: its open
    /// downstream sessions. Its streams end as their queues are dropped.
    fn take_for_close(&self, reason: CloseReason) -> Vec<Arc<Downstream>> {
        let mut st = self.state.lock();
        st.closed = true;
        st.deleted_by_client = reason == CloseReason::ClientDelete;
        st.streams.clear();
        let open = st.slots.take_open();
        drop(st);
        self.routing.lock().clear();
        let flights = self.calls.clear();
        self.slot_changed.notify_all();
        for flight in flights {
            flight.stop(Stop::Closing);
        }
        open
    }
}

/// What a client is told of a downstream error of `server`: the one place a
/// [`downstream::DownstreamError`] becomes JSON-RPC, for an open that failed
/// and a request alike. The text is the error's, without the server's secrets.
pub(crate) fn rpc_error(server: &Server, e: &downstream::DownstreamError) -> RpcError {
    if let downstream::DownstreamError::SignIn(sign_in) = e {
        // The 2025-11-25 form; each era's side turns it into what its client takes.
        return RpcError {
            code: jsonrpc::URL_ELICITATION_REQUIRED,
            message: sign_in.message.clone(),
            data: Some(serde_json::json!({
                "elicitations": [{
                    "mode": "url",
                    "elicitationId": sign_in.elicitation_id,
                    "url": sign_in.url,
                    "message": sign_in.message,
                }],
                "server": server.name(),
            })),
        };
    }
    RpcError::server(server.name(), described(server, e))
}

/// A downstream error as a person reads it, without the server's secrets.
fn described(server: &Server, e: &downstream::DownstreamError) -> String {
    server.redact(&e.to_string())
}

/// A reload retired the server while a session opened on it.
struct Retired;

/// The calls of the 2026-07-28 clients' session, and their client's requests.
impl Session {
    /// A call of the 2026-07-28 clients' session starts on `server`: what
    /// the server asks outside any call may be for it (see `deliver`).
    pub(crate) fn add_caller(&self, key: u64, server: &str, ask: Asker) {
        self.state.lock().callers.add(key, server, ask);
    }

    /// The call numbered `key` ended.
    pub(crate) fn remove_caller(&self, key: u64) {
        self.state.lock().callers.remove(key);
    }

    /// Takes the client's request id `id` for as long as its request runs,
    /// or refuses it when a request of this session with that id is
    /// outstanding: a cancel of the id must name one request.
    pub(crate) fn claim_request_id(&self, id: &Value) -> Result<IdClaim<'_>, RpcError> {
        let key = id_key(id);
        if !self.calls.claim(&key) {
            return Err(RpcError::new(
                jsonrpc::INVALID_REQUEST,
                format!(
                    "request id {key} is already in flight in this session: ids of outstanding requests must be unique"
                ),
            ));
        }
        Ok(IdClaim { session: self, key })
    }

    /// Remembers which server works on the client's request `client_id`,
    /// and its flight, which the client's cancel or the session's close stops.
    /// A call the client cancelled before it got here is stopped at once:
    /// it is not sent.
    pub(crate) fn start_call(
        &self,
        client_id: &Value,
        server: &str,
        downstream_id: &Value,
        flight: &Arc<downstream::Flight>,
    ) {
        let (key, call) = (id_key(client_id), CallInFlight::new(server, downstream_id, flight.clone()));
        let cancelled = self.calls.start(key, call);
        if cancelled {
            flight.stop(Stop::Cancelled);
        }
    }

    pub(crate) fn end_call(&self, client_id: &Value) {
        let key = id_key(client_id);
        drop(self.calls.end(&key));
    }

    /// Ends the client's request `client_id` at once (its answer will
    /// carry no response) and says where its cancel goes: the downstream
    /// session and the server's id for the request, if it was sent. A
    /// request not sent yet is never sent.
    pub(crate) fn cancel(&self, client_id: &Value) -> Option<(Arc<Downstream>, Value)> {
        let (server, downstream_id, flight) = self.calls.cancel(&id_key(client_id))?;
        let target = self.state.lock().slots.if_open(&server).map(|d| (d, downstream_id));
        let sent = flight.stop(Stop::Cancelled);
        target.filter(|_| sent)
    }

    /// Turns a message from `server` into what the client receives, or
    /// `None` when the client must not see it. Requests get an id of
    /// mcpgate's, remembered so the answer can go back; `list_changed`
    /// makes the merged list stale.
    pub(crate) fn to_client(&self, server: &Server, message: Message) -> Option<Vec<u8>> {
        match message.kind().ok()? {
            Kind::Request => {
                let params = self.task_params(server, &message);
                let n = self.routing.lock().ask(server.name(), message.id.clone()?, None);
                Some(jsonrpc::request(&Value::from(n), message.method(), params.as_deref()))
            }
            Kind::Notification => {
                let method = message.method();
                if let Some(kinds) = stale_lists(method) {
                    server.lists.invalidate(kinds);
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
    pub(crate) fn tasks_from(&self, server: &str, value: &mut Value) {
        self.routing.lock().tasks_from(server, value);
    }

    /// A server's answer with its task ids rewritten to the client's.
    pub(crate) fn tasks_in_answer(&self, server: &str, mut answer: Message) -> Message {
        if let Some(result) = &answer.result
            && let Ok(mut value) = serde_json::from_str::<Value>(result.get())
        {
            self.tasks_from(server, &mut value);
            answer.result = Some(jsonrpc::raw(&value).into());
        }
        answer
    }

    /// The server and its own id behind the client's task id.
    pub(crate) fn task_target(&self, exposed: &str) -> Option<(String, String)> {
        self.routing.lock().task_target(exposed)
    }

    /// A server withdrew a request it sent the client: rewrite its id to ours.
    fn server_cancelled(&self, server: &Server, message: &Message) -> Option<Vec<u8>> {
        let mut params = message.params_object().ok()?;
        let theirs = params.get("requestId")?.clone();
        let ours = self.routing.lock().withdrawn(server.name(), &theirs)?;
        params.insert("requestId".into(), Value::from(ours));
        Some(jsonrpc::notification("notifications/cancelled", Some(&jsonrpc::raw(&Value::Object(params)))))
    }

    /// The client's answer to a server's request: the downstream session it
    /// goes to and the message with the server's own id. `None` for an id
    /// mcpgate never issued (or already answered).
    pub(crate) fn answer_from_client(&self, message: &Message) -> Option<(Arc<Downstream>, Vec<u8>)> {
        let n = message.id.as_ref()?.as_u64()?;
        let ask = self.routing.lock().answered(n)?;
        let d = self.state.lock().slots.if_open(&ask.server);
        if let Some(reply) = ask.reply {
            let _ = reply.try_send(message.clone());
            return None;
        }
        let body = match (&message.result, &message.error) {
            (Some(result), _) => jsonrpc::result_text(&ask.id, result),
            (None, Some(error)) => jsonrpc::raw_error(&ask.id, error),
            (None, None) => return None,
        };
        Some((d?, body))
    }

    /// A request of mcpgate's own to the client (`method` with `params`):
    /// what to send it, and where its answer will come.
    pub(crate) fn ask_client(&self, method: &str, params: Option<&RawValue>) -> (Vec<u8>, Receiver<Message>) {
        let (n, rx) = self.routing.lock().ask_for_mcpgate();
        (jsonrpc::request(&Value::from(n), method, params), rx)
    }

    /// Whether the client declared what a request of `method` needs.
    pub(crate) fn client_can(&self, method: &str) -> bool {
        let capability = match method {
            "sampling/createMessage" => "sampling",
            "elicitation/create" => "elicitation",
            "roots/list" => "roots",
            _ => return false,
        };
        serde_json::from_str::<Value>(self.init_params.get())
            .ok()
            .is_some_and(|p| p["capabilities"].get(capability).is_some_and(|c| !c.is_null()))
    }

    /// Whether the client declared URL elicitation (2025-11-25:
    /// `elicitation.url`): it can be sent to sign in with a link.
    pub(crate) fn takes_url_elicitation(&self) -> bool {
        serde_json::from_str::<Value>(self.init_params.get())
            .ok()
            .is_some_and(|p| p["capabilities"]["elicitation"].get("url").is_some_and(|c| !c.is_null()))
    }

    /// Remembers `logging/setLevel` for servers this session opens later.
    pub(crate) fn remember_log_level(&self, params: Option<&RawValue>) {
        self.state.lock().log_level = params.map(|p| p.to_owned());
    }
}

/// Its downstream sessions, one slot per server.
impl Session {
    /// The open downstream session with `server`, opening it if needed. A
    /// server that failed is tried again only after `retry`.
    pub fn downstream(&self, server: &Arc<Server>, retry: Duration) -> Result<Arc<Downstream>, RpcError> {
        // A request that found its server before a reload replaced it goes
        // to the one in force: a retired server takes no new session.
        let mut server = server.in_force();
        // Reloads that keep coming while sessions open: each open is tried
        // again on the newest server, within the time one open may take.
        let deadline = Instant::now() + server.limits.open();
        loop {
            match self.downstream_on(&server, retry) {
                Ok(result) => return result,
                Err(Retired) if Instant::now() < deadline && !server.in_force().is_retired() => {
                    server = server.in_force()
                }
                Err(Retired) => {
                    return Err(RpcError::server(
                        server.name(),
                        "closed while it opened (the configuration was reloaded)",
                    ));
                }
            }
        }
    }

    /// [`Session::downstream`] on one server; `Retired` when a reload retired
    /// it while its session opened (the session opened is closed).
    fn downstream_on(
        &self,
        server: &Arc<Server>,
        retry: Duration,
    ) -> Result<Result<Arc<Downstream>, RpcError>, Retired> {
        let name = server.name();
        let wait = server.limits.open();
        let stale = {
            let mut st = self.state.lock();
            loop {
                if st.closed {
                    return Ok(Err(RpcError::internal("the session is closing")));
                }
                match st.slots.find(server, retry) {
                    Found::Open(d) => return Ok(Ok(d)),
                    Found::Opening => {
                        if self.slot_changed.wait_for(&mut st, wait).timed_out() {
                            return Ok(Err(RpcError::server(name, "still opening its session")));
                        }
                    }
                    Found::Failed(error) => return Ok(Err(RpcError::server(name, error))),
                    Found::ToOpen(stale) => break stale,
                }
            }
        };
        if let Some(d) = stale {
            downstream::close_all(&[d], 1);
        }
        let inbox: Weak<dyn Inbox> = self.me.clone();
        let opener = downstream::Opener {
            session: &self.id,
            client: &self.client_name,
            principal: self.principal,
            user: self.user,
        };
        let result = server.open(&opener, &self.init_params, inbox);
        let mut st = self.state.lock();
        let outcome = match result {
            Ok(d) if st.closed || server.is_retired() => {
                let closed = st.closed;
                st.slots.remove(name);
                drop(st);
                downstream::close_all(&[d], 1);
                self.slot_changed.notify_all();
                if closed {
                    return Ok(Err(RpcError::server(name, "closed while it opened (the session ended)")));
                }
                return Err(Retired);
            }
            Ok(d) => {
                st.slots.set_open(name, d.clone());
                if let Some(saved) = d.saved() {
                    server.journal.opened_downstream(&self.id, saved);
                }
                let level = st.log_level.clone().filter(|_| d.offers("logging"));
                drop(st);
                self.slot_changed.notify_all();
                // In the state file before anything uses it: a crash from
                // here on cannot orphan it.
                // A failed write is logged by the writer (initialize refuses the session).
                let _ = server.journal.commit();
                // A client's params for it, read again: an object, or they were refused.
                if let Some(level) = level
                    && let Ok(params) = Params::read(&level)
                    && let Err(e) = d.own_request("logging/setLevel", Some(&params))
                {
                    crate::limited!(warn, "server `{name}`: logging/setLevel: {}", described(server, &e));
                }
                return Ok(Ok(d));
            }
            Err(e) => {
                st.slots.failed(name, described(server, &e), &e);
                Err(rpc_error(server, &e))
            }
        };
        drop(st);
        self.slot_changed.notify_all();
        Ok(outcome)
    }

    /// The downstream sessions whose server forgot them, to reopen; each is
    /// handed out once, and only while it is still the one in its slot (a
    /// request may have replaced it already).
    pub(crate) fn take_lost(&self) -> Vec<Arc<Downstream>> {
        let now = Instant::now();
        let mut st = self.state.lock();
        let due = st.lost.take_due(now);
        due.iter().filter_map(|(server, session_id)| st.slots.still_open(server, session_id.as_deref())).collect()
    }

    /// Takes over a downstream session saved by an earlier process; its
    /// reader starts later ([`Session::start_reader`]). `None` when the
    /// server's sessions cannot be taken over (see [`Server::saved_downstream`]).
    pub(crate) fn adopt(&self, server: &Arc<Server>, saved: &downstream::SavedDownstream) -> Option<Arc<Downstream>> {
        let d = server.saved_downstream(saved)?;
        self.state.lock().slots.set_open(server.name(), d.clone());
        Some(d)
    }

    /// Starts the reader of a downstream session taken over at a restart.
    /// Without one it still serves requests; the error is logged.
    pub(crate) fn start_reader(&self, d: &Arc<Downstream>) {
        let inbox: Weak<dyn Inbox> = self.me.clone();
        let _ = d.start_reader(inbox);
    }

    /// The state file's closing records of its open downstream sessions.
    pub(crate) fn closing_records(&self) -> Vec<(usize, downstream::SavedDownstream)> {
        self.state.lock().slots.closing_records()
    }

    /// Marks the session closed and takes its open downstream sessions,
    /// for a session that was never put in the table.
    pub fn take_downstreams(&self) -> Vec<Arc<Downstream>> {
        self.take_for_close(CloseReason::Refused)
    }

    /// Replaces a downstream session the server no longer knows: the old one
    /// goes through the close path, a new one opens. When another request
    /// already replaced it, that one is used.
    pub(crate) fn reopen(&self, server: &Arc<Server>, old: &Arc<Downstream>) -> Result<Arc<Downstream>, RpcError> {
        self.state.lock().slots.take_if_current(server, old);
        downstream::close_all(std::slice::from_ref(old), 1);
        // A server that forgot a session restarted: what it lists may have changed too.
        server.lists.clear();
        self.reopened(server, self.downstream(server, Duration::ZERO))
    }

    /// The servers whose reopen failed, due to be tried again now; each is
    /// handed out once, and only while no session is open with it (a
    /// request may have opened one already).
    pub(crate) fn take_failed_reopens(&self) -> Vec<String> {
        let mut st = self.state.lock();
        let due = st.lost.take_failed(Instant::now());
        due.into_iter().filter(|server| st.slots.if_open(server).is_none()).collect()
    }

    /// Tries again to open a downstream session whose reopen failed.
    pub(crate) fn retry_reopen(&self, server: &Arc<Server>) -> Result<Arc<Downstream>, RpcError> {
        self.reopened(server, self.downstream(server, Duration::ZERO))
    }

    /// A reopen that failed is tried again later, for as long as the
    /// session lives: whether or not its client sends requests.
    fn reopened(
        &self,
        server: &Server,
        result: Result<Arc<Downstream>, RpcError>,
    ) -> Result<Arc<Downstream>, RpcError> {
        if result.is_err() {
            let mut st = self.state.lock();
            if !st.closed {
                st.lost.reopen_failed(server.name(), Instant::now());
            }
        }
        result
    }

    /// Takes the downstream sessions of `servers` (retired by a reload) for
    /// the caller to close; they reopen lazily with the new settings.
    pub fn take_servers(&self, servers: &[Arc<Server>]) -> Vec<Arc<Downstream>> {
        self.state.lock().slots.take_servers(servers)
    }

    /// The merged lists may have changed (a reload): tell the client.
    pub(crate) fn lists_changed(&self) {
        for kind in [ListKind::Tools, ListKind::Prompts, ListKind::Resources] {
            self.push_to_stream(jsonrpc::notification(kind.changed_notification(), None));
        }
    }

    /// Whether opening its session with `server` failed less than `retry`
    /// ago: it is not tried again before (nor its process started).
    pub(crate) fn failed_within(&self, server: &str, retry: Duration) -> bool {
        self.state.lock().slots.failed_within(server, retry)
    }

    /// The downstream session with `server` if it is open now; never opens one.
    pub(crate) fn downstream_if_open(&self, server: &str) -> Option<Arc<Downstream>> {
        self.state.lock().slots.if_open(server)
    }

    /// Why opening failed where mcpgate itself was short of a resource.
    pub(crate) fn exhausted(&self) -> Option<String> {
        self.state.lock().slots.exhausted()
    }

    /// The error of each server whose downstream session failed to open.
    pub(crate) fn failed_servers(&self) -> Vec<(String, String)> {
        self.state.lock().slots.failures()
    }

    /// Every open downstream session.
    pub(crate) fn open_downstreams(&self) -> Vec<Arc<Downstream>> {
        self.state.lock().slots.open_downstreams()
    }
}

/// What it sends its client.
impl Session {
    /// Sends a message to the client's `GET` stream, or keeps it until one
    /// opens (see [`Streams::push`]).
    pub(crate) fn push_to_stream(&self, message: Vec<u8>) {
        let mut st = self.state.lock();
        if self.is_sessionless() {
            // No GET stream will come: what a listen stream asked for goes there, the rest nowhere.
            st.streams.notify_listeners(&message);
        } else {
            st.streams.push(message);
        }
    }

    /// Opens a `subscriptions/listen` stream (2026-07-28): its first event
    /// acknowledges what of `filter` mcpgate honors; then the list changes
    /// it asked for, each carrying the listen request's id.
    pub(crate) fn listen(&self, subscription: &Value, filter: ListenFilter) -> Attached {
        self.state.lock().streams.listen(subscription, filter)
    }

    /// A listen stream ended.
    pub(crate) fn unlisten(&self, id: u64) {
        let mut st = self.state.lock();
        if st.streams.unlisten(id) {
            self.touch();
        }
    }

    /// The priming event that opens a stream for a 2025-11-25 client: an id
    /// to resume from and how long to wait before reconnecting; with the
    /// `POST`'s `request`, the id carries it too (see `streams::priming_with`).
    pub(crate) fn priming(&self, stream: u64, request: Option<&[u8]>) -> Option<Vec<u8>> {
        versions::primes_streams(&self.protocol_version).then(|| match request {
            Some(request) => streams::priming_with(stream, request),
            None => streams::priming(stream),
        })
    }

    /// Starts the SSE answer of a `POST`: its stream number.
    pub(crate) fn open_post_stream(&self) -> u64 {
        self.state.lock().streams.open_post()
    }

    /// One event of a `POST` stream as SSE bytes, kept for replay (when
    /// the session has room) and passed to a `GET` that resumed the stream.
    /// `last` (the response) ends it.
    pub(crate) fn post_event(&self, stream: u64, message: &[u8], last: bool) -> Vec<u8> {
        self.state.lock().streams.post_event(stream, message, last)
    }

    /// Ends a `POST` stream without a response (its request was
    /// cancelled): a `GET` that resumed it ends, and one that resumes it
    /// later gets what was sent and nothing more.
    pub(crate) fn end_post_stream(&self, stream: u64) {
        self.state.lock().streams.end_post(stream);
    }

    /// Attaches a `GET` stream. With `last_event_id` of an earlier stream,
    /// the events of that stream after it are replayed first, and only
    /// those; resuming a `POST` stream follows it to its response.
    pub(crate) fn attach_stream(&self, last_event_id: Option<&str>, max_streams: usize) -> Result<Attached, RpcError> {
        let mut st = self.state.lock();
        if st.closed {
            return Err(RpcError::internal("the session is closing"));
        }
        Ok(st.streams.attach(last_event_id, max_streams, versions::primes_streams(&self.protocol_version)))
    }

    /// A `GET` stream ended (client gone, or the session closed).
    pub(crate) fn detach_stream(&self, attach: u64) {
        let mut st = self.state.lock();
        if st.streams.detach(attach) {
            self.touch();
        }
    }

    /// What the status page shows of this session at `now`.
    pub(crate) fn view(&self, now: Instant) -> View {
        let st = self.state.lock();
        let in_use = self.in_use(&st);
        let mut view = View {
            id: self.id.clone(),
            client_name: self.client_name.clone(),
            protocol_version: self.protocol_version.clone(),
            principal_sha256: self.principal,
            age: now.saturating_duration_since(self.created),
            idle: (!in_use).then(|| now.saturating_duration_since(self.last_active())),
            requests_in_flight: self.in_flight.load(Ordering::SeqCst),
            streams: st.streams.open_count(),
            downstreams: st.slots.views(),
        };
        drop(st);
        view.downstreams.sort_by(|a, b| a.0.cmp(&b.0));
        view
    }
}

/// A client request id in use while its request is answered; freed when dropped.
pub(crate) struct IdClaim<'a> {
    session: &'a Session,
    key: String,
}

impl Drop for IdClaim<'_> {
    fn drop(&mut self) {
        self.session.calls.release(&self.key);
    }
}

impl Inbox for Session {
    fn deliver(&self, server: &Arc<Server>, message: Message) {
        if self.is_sessionless() && message.kind() == Ok(jsonrpc::Kind::Request) {
            // A request outside any call (on the GET stream, as the Python
            // SDK's `ctx.session.list_roots()` sends it) is for the one call
            // running on that server; with none or several, no client of this
            // era can be told which it is.
            let lone = self.state.lock().callers.lone(server.name());
            if let Some(ask) = lone {
                return ask(self, server, message);
            }
            let (Some(d), Some(id)) = (self.downstream_if_open(server.name()), &message.id) else { return };
            let e = jsonrpc::RpcError::internal(format!(
                "`{}` outside a call cannot reach a client of protocol 2026-07-28 through mcpgate \
                 unless exactly one call runs on this server",
                message.method()
            ));
            if let Err(e) = d.send(&jsonrpc::error(id, &e)) {
                crate::limited!(warn, "server `{}`: refusing its request failed: {e}", server.name());
            }
            return;
        }
        if let Some(bytes) = self.to_client(server, message) {
            self.push_to_stream(bytes);
        }
    }

    fn lost(&self, server: &Arc<Server>, session_id: Option<&str>) {
        self.state.lock().lost.record(server.name(), session_id, Instant::now());
    }

    fn started(&self, server: &Arc<Server>) {
        log::debug!("session {}: server `{}` is ready; its lists changed", short(&self.id), server.name());
        self.lists_changed();
    }
}

/// Keeps a session busy while a request runs.
pub(crate) struct RequestGuard<'a>(&'a Session, usize);

impl Drop for RequestGuard<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(self.1, Ordering::SeqCst);
        self.0.touch();
    }
}

/// The first stream number of a holder at `epoch`: 2^24 numbers each.
fn stream_base(epoch: u64) -> u64 {
    epoch << 24
}

/// The first characters of a session id, enough to tell sessions apart in logs.
pub(crate) fn short(id: &str) -> &str {
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
    pub(crate) fn new(journal: Arc<Journal>) -> Sessions {
        Sessions { map: Mutex::new(HashMap::new()), journal }
    }

    fn leaving(&self, session: &Session) {
        self.journal.closing(session.closing_records());
    }

    pub(crate) fn len(&self) -> usize {
        self.map.lock().len()
    }

    pub(crate) fn get(&self, id: &str) -> Option<Arc<Session>> {
        self.map.lock().get(id).cloned()
    }

    /// Adds a session unless `max` are live. It is in the state file's
    /// records before anyone can learn its id.
    pub(crate) fn insert(&self, session: Arc<Session>, max: usize) -> bool {
        let mut map = self.map.lock();
        if map.len() >= max {
            return false;
        }
        if let Some(saved) = session.saved(false) {
            self.journal.opened_session(saved);
        }
        map.insert(session.id.clone(), session);
        memory::set_sessions(map.len());
        true
    }

    /// Removes the session if `allowed` says so (e.g. it answers to the token).
    pub(crate) fn remove_if(&self, id: &str, allowed: impl FnOnce(&Session) -> bool) -> Option<Arc<Session>> {
        let mut map = self.map.lock();
        let session = map.get(id)?;
        if !allowed(session) {
            return None;
        }
        self.leaving(session);
        self.journal.ended(id);
        let removed = map.remove(id);
        memory::set_sessions(map.len());
        removed
    }

    /// Removes a session another instance took over, without a word to the
    /// journal: it is that instance's now.
    pub(crate) fn take_handed_over(&self, id: &str) -> Option<Arc<Session>> {
        let mut map = self.map.lock();
        let taken = map.remove(id);
        memory::set_sessions(map.len());
        taken
    }

    /// Removes and returns the sessions idle for at least `timeout`, or
    /// `unused` for those that never made a call.
    pub(crate) fn take_idle(&self, timeout: Duration, unused: Duration) -> Vec<Arc<Session>> {
        let now = Instant::now();
        let mut map = self.map.lock();
        let idle: Vec<String> = map
            .values()
            .filter(|s| {
                let limit = if s.is_used() { timeout } else { unused.min(timeout) };
                s.idle_for(now).is_some_and(|d| d >= limit)
            })
            .map(|s| s.id.clone())
            .collect();
        let taken: Vec<Arc<Session>> = idle.iter().filter_map(|id| map.remove(id)).collect();
        for session in &taken {
            self.leaving(session);
            self.journal.ended(&session.id);
        }
        memory::set_sessions(map.len());
        taken
    }

    /// Removes and returns every session (shutdown): their downstream
    /// sessions are marked closing, and the client sessions stay in the
    /// state file, for their clients to resume after a restart.
    pub fn take_all(&self) -> Vec<Arc<Session>> {
        let mut map = self.map.lock();
        map.values().for_each(|s| self.leaving(s));
        let taken = map.drain().map(|(_, s)| s).collect();
        drop(map);
        memory::set_sessions(0);
        taken
    }

    /// A copy of the list, to read without holding the map.
    pub(crate) fn snapshot(&self) -> Vec<Arc<Session>> {
        self.map.lock().values().cloned().collect()
    }
}

/// Closes sessions already removed from [`Sessions`]: the one close path of
/// client sessions, for idle eviction, client `DELETE` and shutdown alike.
/// Every downstream session goes through [`downstream::close_all`].
pub(crate) fn close_sessions(sessions: Vec<Arc<Session>>, reason: CloseReason, parallel: usize, stats: &Stats) {
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
