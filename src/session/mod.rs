//! Client sessions: each holds one slot per server for its downstream
//! session (`slots`), what goes to its client (`streams`, with the replay
//! log), the requests in flight in both directions (`routing`), and its
//! merged lists. [`close_sessions`] is the one way a session ends.

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::downstream::{self, Downstream, Inbox, Server, Stop};
use crate::http::auth::Access;
use crate::protocol::jsonrpc::{self, Message};
use crate::runtime::memory::{self};
use crate::runtime::state::Journal;
pub use crate::runtime::state::SavedSession;
use crate::runtime::{clock, secret};
use crate::stats::Stats;

mod routing;
mod slots;
mod streams;
mod view;

pub use routing::IdClaim;
use routing::Routes;
use slots::Slot;
use streams::Streams;
pub use streams::{Attached, ListenFilter};
pub use view::{SlotView, View};

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
    last_active: Instant,
    in_flight: usize,
    /// One per server: its downstream session, or how opening it went.
    slots: HashMap<String, Slot>,
    /// The last `logging/setLevel` params, for servers opened later.
    log_level: Option<Box<RawValue>>,
    /// Downstream sessions whose stream answered 404 (or, HTTP+SSE, ended):
    /// the reaper reopens them once their backoff has passed.
    lost: Vec<Lost>,
    /// Per server, how many times in a row its stream was lost, and when.
    lost_streak: HashMap<String, (u32, Instant)>,
    /// What goes to the client: its streams and their replay log.
    streams: Streams,
    /// Requests in flight in both directions, and task ids.
    routes: Routes,
    /// The calls of the 2026-07-28 clients' session running now, by server.
    callers: Vec<Caller>,
}

/// Takes a server's request to the client of one call of the 2026-07-28
/// clients' session (as `input_required`).
pub type Asker = Arc<dyn Fn(&Session, &Server, Message) + Send + Sync>;

/// A call of the 2026-07-28 clients' session, running on `server`.
struct Caller {
    key: u64,
    server: String,
    ask: Asker,
}

pub struct Session {
    pub id: String,
    pub protocol_version: String,
    /// What every server gets as `initialize` params: the client's capabilities and info.
    init_params: Box<RawValue>,
    /// Those params held against `max_memory_mb` (see [`Session::hold_params`]).
    params_held: Mutex<Option<memory::Charge>>,
    /// The view of the servers' lists those capabilities make (see `catalog::list_view_of`).
    view: u64,
    pub client_name: String,
    /// The servers this session may reach (its token's); `None` for all.
    scope: Option<Vec<String>>,
    /// Who created it (`Access::principal`: a token's SHA-256, an OAuth
    /// subject's digest): only the same principal reaches it.
    principal: Option<[u8; 32]>,
    /// When it was created; for a restored session, its last activity
    /// before the restart (it is at least that old).
    created: Instant,
    state: Mutex<State>,
    slot_changed: Condvar,
    /// Bytes of events this session holds (queued, kept, waiting).
    tally: Arc<AtomicUsize>,
    /// The session mcpgate keeps for clients of the 2026-07-28 era (one per
    /// token): no client holds its id, nothing waits for a `GET` stream.
    sessionless: std::sync::atomic::AtomicBool,
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
            access.servers().map(<[String]>::to_vec),
            access.principal(),
            Instant::now(),
        )
    }

    /// Rebuilds a session saved by an earlier process; its downstream
    /// sessions are added with [`Session::adopt`].
    pub fn restore(saved: &SavedSession) -> Arc<Session> {
        let idle = Duration::from_secs(clock::unix_now().saturating_sub(saved.last_active));
        let last_active = Instant::now().checked_sub(idle).unwrap_or_else(Instant::now);
        Session::with_last_active(
            saved.id.clone(),
            saved.protocol_version.clone(),
            jsonrpc::raw(&saved.init_params),
            saved.client_name.clone(),
            saved.scope.clone(),
            saved.principal_sha256.as_deref().and_then(parse_digest),
            last_active,
        )
    }

    fn with_last_active(
        id: String,
        protocol_version: String,
        init_params: Box<RawValue>,
        client_name: String,
        scope: Option<Vec<String>>,
        principal: Option<[u8; 32]>,
        last_active: Instant,
    ) -> Arc<Session> {
        let capabilities = serde_json::from_str::<Value>(init_params.get())
            .ok()
            .and_then(|mut p| p.get_mut("capabilities").map(Value::take));
        let view = crate::catalog::list_view_of(&capabilities.unwrap_or(Value::Null));
        Arc::new_cyclic(|me| Session {
            id,
            protocol_version,
            init_params,
            params_held: Mutex::new(None),
            view,
            client_name,
            principal,
            scope,
            created: last_active,
            state: Mutex::new(State {
                closed: false,
                deleted_by_client: false,
                last_active,
                in_flight: 0,
                slots: HashMap::new(),
                log_level: None,
                lost: Vec::new(),
                lost_streak: HashMap::new(),
                streams: Streams::new(),
                routes: Routes::new(),
                callers: Vec::new(),
            }),
            slot_changed: Condvar::new(),
            tally: Arc::new(AtomicUsize::new(0)),
            sessionless: std::sync::atomic::AtomicBool::new(false),
            me: me.clone(),
        })
    }

    /// Marks a request as running until the guard drops; a session with a
    /// request running is never idle. `None` when `max` are running already.
    pub fn begin_request(&self, max: usize) -> Option<RequestGuard<'_>> {
        self.begin_requests(1, max)
    }

    /// [`Session::begin_request`] for `count` requests at once (a batch):
    /// `None` when they would pass `max` in flight.
    pub fn begin_requests(&self, count: usize, max: usize) -> Option<RequestGuard<'_>> {
        let mut st = self.state.lock();
        if st.in_flight.saturating_add(count) > max {
            return None;
        }
        st.in_flight += count;
        st.last_active = Instant::now();
        Some(RequestGuard(self, count))
    }

    /// Whether a request with `access` may use this session: the principal
    /// that created it (restored sessions too: its digest is saved), or any
    /// when no `auth` is configured. A session created without one answers none.
    pub fn admits(&self, access: &Access) -> bool {
        match (access.principal(), &self.principal) {
            (None, _) => true,
            (Some(presented), Some(own)) => secret::constant_time_eq(&presented, own),
            (Some(_), None) => false,
        }
    }

    /// Charges what this session keeps of its client (its `initialize`
    /// params) to `max_memory_mb`; false when the budget has no room.
    pub fn hold_params(&self) -> bool {
        let Some(charge) = memory::Charge::new(self.init_params.get().len() + self.id.len()) else { return false };
        *self.params_held.lock() = Some(charge);
        true
    }

    /// Which of each server's lists this session sees: those for its client's capabilities.
    pub fn list_view(&self) -> u64 {
        self.view
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

    /// What the state file keeps of this session; `None` once it is closing.
    pub fn saved(&self, with_downstreams: bool) -> Option<SavedSession> {
        let st = self.state.lock();
        if st.closed {
            return None;
        }
        // Copied under the lock; parsed once it is released.
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
        drop(st);
        Some(SavedSession {
            id: self.id.clone(),
            protocol_version: self.protocol_version.clone(),
            init_params: serde_json::from_str(self.init_params.get()).unwrap_or(Value::Null),
            client_name: self.client_name.clone(),
            last_active: clock::unix_now().saturating_sub(idle.as_secs()),
            scope: self.scope.clone(),
            principal_sha256: self.principal.map(|t| t.iter().map(|b| format!("{b:02x}")).collect()),
            downstreams,
        })
    }

    /// Its last activity in unix seconds (now while it is in use); `None`
    /// once it is closing.
    pub fn last_active_unix(&self) -> Option<u64> {
        let st = self.state.lock();
        if st.closed {
            return None;
        }
        let idle = if st.in_flight > 0 || !st.streams.is_empty() { Duration::ZERO } else { st.last_active.elapsed() };
        Some(clock::unix_now().saturating_sub(idle.as_secs()))
    }

    /// Makes this the session of the 2026-07-28 era's clients of one token.
    pub fn mark_sessionless(&self) {
        self.sessionless.store(true, std::sync::atomic::Ordering::Release);
    }

    pub fn is_sessionless(&self) -> bool {
        self.sessionless.load(std::sync::atomic::Ordering::Acquire)
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
        let calls = st.routes.clear();
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

impl Session {
    /// A call of the 2026-07-28 clients' session starts on `server`: what
    /// the server asks outside any call may be for it (see `deliver`).
    pub fn enter_call(&self, key: u64, server: &str, ask: Asker) {
        self.state.lock().callers.push(Caller { key, server: server.to_string(), ask });
    }

    /// The call numbered `key` ended.
    pub fn leave_call(&self, key: u64) {
        self.state.lock().callers.retain(|c| c.key != key);
    }

    /// The one call running on `server`, if there is exactly one.
    fn lone_caller(&self, server: &str) -> Option<Asker> {
        let st = self.state.lock();
        let mut on_server = st.callers.iter().filter(|c| c.server == server);
        match (on_server.next(), on_server.next()) {
            (Some(caller), None) => Some(caller.ask.clone()),
            _ => None,
        }
    }
}

impl Inbox for Session {
    fn deliver(&self, server: &Arc<Server>, message: Message) {
        if self.is_sessionless() && message.kind() == Ok(jsonrpc::Kind::Request) {
            // A request outside any call (on the GET stream, as the Python
            // SDK's `ctx.session.list_roots()` sends it) is for the one call
            // running on that server; with none or several, no client of this
            // era can be told which it is.
            if let Some(ask) = self.lone_caller(server.name()) {
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
        let now = Instant::now();
        let mut st = self.state.lock();
        let streak = st.lost_streak.entry(server.name().to_string()).or_insert((0, now));
        *streak = (lost_again(*streak, now), now);
        let after = now + reopen_delay(streak.0);
        st.lost.push(Lost { server: server.name().to_string(), session_id: session_id.map(str::to_string), after });
    }
}

/// A downstream session whose stream answered 404 (the server forgot it),
/// or whose HTTP+SSE stream ended (it cannot be resumed).
struct Lost {
    server: String,
    session_id: Option<String>,
    /// Reopened not before then.
    after: Instant,
}

/// Losses of one server's stream closer than this apart count as a streak.
const LOST_STREAK: Duration = Duration::from_secs(60);

/// The streak after a loss at `now`, given the last one's count and time.
fn lost_again((count, at): (u32, Instant), now: Instant) -> u32 {
    if count > 0 && now.saturating_duration_since(at) < LOST_STREAK { count.saturating_add(1) } else { 1 }
}

/// How long the `n`th loss in a row waits before its session is reopened,
/// as the reader's own reconnects do: 0.5 s, doubling, up to 30 s.
fn reopen_delay(n: u32) -> Duration {
    let half_seconds = 1u64 << n.saturating_sub(1).min(6);
    Duration::from_millis(500 * half_seconds).min(Duration::from_secs(30))
}

/// Keeps a session busy while a request runs.
pub struct RequestGuard<'a>(&'a Session, usize);

impl Drop for RequestGuard<'_> {
    fn drop(&mut self) {
        let mut st = self.0.state.lock();
        st.in_flight -= self.1;
        st.last_active = Instant::now();
    }
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

    /// Adds a session unless `max` are live. It is in the state file's
    /// records before anyone can learn its id.
    pub fn insert(&self, session: Arc<Session>, max: usize) -> bool {
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
    pub fn remove_if(&self, id: &str, allowed: impl FnOnce(&Session) -> bool) -> Option<Arc<Session>> {
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

    /// Removes and returns the sessions idle for at least `timeout`.
    pub fn take_idle(&self, timeout: Duration) -> Vec<Arc<Session>> {
        let now = Instant::now();
        let mut map = self.map.lock();
        let idle: Vec<String> =
            map.values().filter(|s| s.idle_for(now).is_some_and(|d| d >= timeout)).map(|s| s.id.clone()).collect();
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

    #[test]
    fn a_lost_stream_is_reopened_with_backoff_that_resets_after_a_quiet_minute() {
        let start = Instant::now();
        let mut streak = (0, start);
        let mut delays = Vec::new();
        for i in 0..10 {
            let now = start + Duration::from_secs(i);
            streak = (lost_again(streak, now), now);
            delays.push(reopen_delay(streak.0));
        }
        assert_eq!(delays[0], Duration::from_millis(500));
        assert_eq!(delays[1], Duration::from_secs(1));
        assert!(delays.windows(2).all(|w| w[0] <= w[1]), "{delays:?}");
        assert_eq!(*delays.last().unwrap(), Duration::from_secs(30));
        let quiet = streak.1 + LOST_STREAK + Duration::from_secs(1);
        assert_eq!(reopen_delay(lost_again(streak, quiet)), Duration::from_millis(500));
    }
}
