//! Clients of the 2026-07-28 era on `/mcp`: no `initialize`, no session;
//! each request is one `POST` that says who its client is. They share, per
//! token, one session mcpgate keeps for them (the *pool*), whose
//! downstream sessions reach the session-era servers; idle, it is evicted
//! like any session, through the one close path.
//!
//! - `server/discover` is answered before any version check, and offers
//!   2026-07-28 only when every server behind speaks it (`offers_2026`):
//!   a client that negotiates lands in the era it would land in directly.
//! - The lists and calls go through the pool; results get `resultType`.
//!   Cache hints (`ttlMs`, `cacheScope`) a server wrote pass as it wrote
//!   them; mcpgate writes them where it answers itself or merges (a list:
//!   the shortest life and the narrowest scope of its servers', `private`
//!   when tokens decide what a client sees), and never makes a result that
//!   came without them public.
//! - `ping` is answered here: the era's spec left it out, its servers did not.
//! - A call to a server of 2026-07-28 runs on the connection thread that
//!   read it: such a server asks only through its result, passed on as it
//!   is. A call to a session-era server runs on a thread of its own: what
//!   its server sends goes to the answer, as SSE; a request of the
//!   server's (sampling, elicitation, roots) becomes an `input_required`
//!   answer, and the call is held until the client retries with its
//!   answers (see `holds`).
//! - Closing the answer's stream cancels the call (for a call that runs
//!   where it was read, the watcher sees it: see `watch`).
//! - `subscriptions/listen` gets the list changes of every server.
//! - Tasks are the extension `io.modelcontextprotocol/tasks`, over either
//!   era's tasks behind (see `tasks`).

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

use crossbeam_channel::{RecvTimeoutError, Sender, bounded};
use serde_json::{Map, Value, json};

use crate::downstream::Server;
use crate::http::auth::Access;
use crate::http::{EventSink, HttpReply, HttpRequest, StreamReply};
use crate::protocol::jsonrpc::{self, Kind, Message, Params, RpcError};
use crate::protocol::stateless::{self, CacheHints, Envelope};
use crate::protocol::{VERSION_HEADER, sse, versions};
use crate::runtime::memory::{self, Tallied};
use crate::runtime::{sha256, threads};
use crate::session::{ListenFilter, Session};

use super::authorize::{sign_in_2026, sign_in_retry};
use super::dispatch::{self, instructions};
use super::refusal::{self, Why};
use super::search::Route;
use super::{Gateway, accepts, new_session_id, too_busy};
use crate::gateway::outcome::{CallEvents, CallSettings, Outcome};
use call::{NewCall, answer, error_reply, finish_with, log_level_of, own_hints};
use holds::{HeldCall, HoldEvent, HoldThread};

mod call;
pub(super) mod holds;
mod tasks;
pub(super) mod watch;
use crate::catalog::ListKind;

/// Quiet this long, a call's answer becomes a stream, and then carries a
/// comment this often: proxies that cut idle connections leave it be.
const PING: Duration = Duration::from_secs(15);
/// How often a held call's waiter looks whether its client left.
const LOOK: Duration = Duration::from_millis(250);
/// How long a client may keep mcpgate's own answers, in ms: a merged list
/// (for a server whose list says nothing of it), and `server/discover`.
const LIST_TTL_MS: u64 = 5_000;

/// What the 2026-07-28 era keeps across requests: its pools, its held
/// calls and its watched calls.
pub struct Stateless {
    /// The session of the era's clients, per principal (a token's or an
    /// OAuth subject's digest, hashed; "" without `auth`).
    pools: parking_lot::Mutex<std::collections::HashMap<String, Arc<Session>>>,
    /// Calls of the era waiting for their client's retry.
    holds: holds::Holds,
    /// Calls of the era running on their connection thread, watched for their client leaving.
    watch: watch::Watch,
}

impl Default for Stateless {
    fn default() -> Stateless {
        Stateless { pools: Default::default(), holds: holds::Holds::new(), watch: watch::Watch::default() }
    }
}

impl Stateless {
    /// Calls held for their client's retry, for the status page.
    pub(crate) fn held_calls(&self) -> usize {
        self.holds.len()
    }

    /// Bytes the calls on their own threads hold, for the status page.
    pub(crate) fn call_bytes(&self) -> usize {
        self.holds.charged()
    }

    /// A new number for a call of mcpgate's in a pool.
    fn next_call(&self) -> u64 {
        self.holds.next()
    }

    /// Cancels the held calls past `held_call_timeout_secs`; the reaper's job.
    pub(crate) fn expire_holds(&self) {
        for held in self.holds.expired() {
            dispatch::cancel_call(&held.pool, &held.call_id, "its client did not retry within held_call_timeout_secs");
        }
    }

    /// At shutdown: stops the watcher, and cancels every held call.
    pub fn stop(&self) {
        self.watch.stop();
        for held in self.holds.take_all() {
            dispatch::cancel_call(&held.pool, &held.call_id, "mcpgate is shutting down");
        }
    }
}

/// The request headers the era's checks read.
struct RequestHeaders<'a>(&'a HttpRequest);

impl stateless::Headers for RequestHeaders<'_> {
    fn get(&self, name: &str) -> Option<&str> {
        self.0.header(name)
    }
}

/// Whether a request belongs to the 2026-07-28 era: it says so in
/// `MCP-Protocol-Version` or in `params._meta` (with no session), or it is
/// `server/discover`.
pub(super) fn is_stateless(req: &HttpRequest, message: &Message) -> bool {
    req.header(VERSION_HEADER) == Some(stateless::VERSION)
        || message.method() == "server/discover"
        || (req.header(crate::protocol::SESSION_HEADER).is_none()
            && message.params.as_deref().is_some_and(|p| p.get().contains(stateless::META_VERSION)))
}

/// A `server/discover` that claims nothing: no `_meta`, and no version
/// header or a session-era one. It is answered before any check, so that a
/// client that does not know the era yet learns it. One that carries the
/// era's `_meta` or another version is checked like any request of the era
/// (as the conformance suite's server-stateless scenario expects).
fn is_bare_probe(req: &HttpRequest, message: &Message) -> bool {
    let has_meta = message
        .params
        .as_deref()
        .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
        .is_some_and(|p| p.get("_meta").is_some());
    !has_meta && req.header(VERSION_HEADER).is_none_or(crate::protocol::versions::supported)
}

/// A request of this era as it came and was checked: its params, read
/// once, and what it says of its client.
struct Checked<'a> {
    message: &'a Message,
    params: Params<'a>,
    envelope: Envelope,
}

impl Stateless {
    /// A `POST` of the 2026-07-28 era.
    pub(super) fn post(
        &self,
        g: &Gateway,
        req: &HttpRequest,
        message: &Message,
        sink: &mut dyn EventSink,
        access: &Access,
    ) -> HttpReply {
        match message.kind() {
            // This era has no notifications from clients (closing a stream cancels): taken and dropped.
            Ok(Kind::Notification) => return HttpReply::accepted(),
            Ok(Kind::Request) => {}
            _ => {
                let e = RpcError::new(jsonrpc::INVALID_REQUEST, "the body must be a single JSON-RPC request");
                return error_reply(&Value::Null, &e);
            }
        }
        let id = message.id.clone().unwrap_or(Value::Null);
        if message.method() == "server/discover" && is_bare_probe(req, message) {
            return self.discover(g, &id, access);
        }
        // Read once: the checks, mcpgate's own tools, and the call. Params
        // that are not an object, or give a name twice, are refused as such.
        let params = match Params::of(message) {
            Ok(params) => params,
            Err(e) => return error_reply(&id, &e),
        };
        let envelope = match stateless::check(message, &params, &RequestHeaders(req)) {
            Ok(envelope) => envelope,
            Err(e) => return error_reply(&id, &e),
        };
        if message.method() == "server/discover" {
            return self.discover(g, &id, access);
        }
        let pool = match self.pool(g, access) {
            Ok(pool) => pool,
            Err(reply) => return reply,
        };
        let Some(_request) = pool.begin_request(g.current().config.max_requests_per_session) else {
            return too_busy(&pool);
        };
        let method = message.method();
        if let Some(kind) = ListKind::from_method(method) {
            let (page, list) = g.offered.lists.page_of(&g.in_force(), &pool, kind, message);
            // Merged by mcpgate from its servers' lists: the shortest life
            // and the narrowest scope of theirs, private too when tokens decide
            // what a client sees.
            let own = own_hints(g.current().config.tokens.is_some(), LIST_TTL_MS);
            let hints = list.map_or(own, |list| {
                let merged = list.cache_hints(own);
                CacheHints { private: merged.private || own.private, ..merged }
            });
            return finish_with(&id, method, page, None, hints);
        }
        match method {
            "tools/call" | "prompts/get" | "resources/read" | "completion/complete" => {
                // A retry with the answers a held call asked for is that call, counted when it came.
                let retry = params.contains("inputResponses");
                if !retry && let Err(limited) = g.rate_check(&pool, message) {
                    return limited.reply(&id, &pool.who);
                }
                self.stateless_call(g, req, &pool, Checked { message, params, envelope }, sink, access)
            }
            "subscriptions/listen" => self.listen(g, req, &pool, message),
            "tasks/get" | "tasks/update" | "tasks/cancel" => {
                self.tasks(g, &pool, |tasks| tasks.task_request(&pool, message))
            }
            _ => {
                let e = RpcError::new(
                    jsonrpc::METHOD_NOT_FOUND,
                    format!("method not found: `{method}` (protocol {})", stateless::VERSION),
                );
                error_reply(&id, &e)
            }
        }
    }

    /// Whether `server/discover` offers 2026-07-28 to the clients of
    /// `access`: only when every server they may reach speaks it, alone or
    /// beside the session era. A client that probes (`mode="auto"`) then
    /// lands in the era it would land in with those servers directly: in
    /// front of one that speaks only the session era it falls back to
    /// `initialize`, where that server's `ping`, `logging/setLevel`,
    /// `resources/subscribe` and tasks work as they do directly. A server
    /// that cannot be asked now counts as the session era, which mcpgate
    /// bridges to every server. A client pinned to 2026-07-28 sends no
    /// discover and is served whatever its servers speak.
    pub(super) fn offers_2026(&self, g: &Gateway, access: &Access) -> bool {
        let cur = g.current();
        let scope = access.servers();
        let servers: Vec<&Arc<Server>> =
            cur.servers.iter().filter(|s| scope.is_none_or(|names| names.iter().any(|n| n == s.name()))).collect();
        // Those never asked are asked together; the others answer from what they said.
        let unknown: Vec<&Arc<Server>> = servers.iter().copied().filter(|s| s.era().is_none()).collect();
        let all = std::sync::atomic::AtomicBool::new(true);
        threads::for_each_parallel("fanout", &unknown, unknown.len(), |server| {
            if server.speaks_2026() != Some(true) {
                all.store(false, std::sync::atomic::Ordering::Relaxed);
            }
        });
        all.into_inner() && servers.iter().filter(|s| s.era().is_some()).all(|s| s.speaks_2026() == Some(true))
    }

    /// `server/discover` when it does not offer 2026-07-28 (see
    /// [`Gateway::offers_2026`]): what a server of the session era answers a
    /// request without a session, 400 with -32600 and the request's id.
    /// Every SDK's `auto` mode reads it as "not of 2026-07-28" and sends
    /// `initialize` (-32022 would not do: the Rust SDK's reads it as a
    /// version to retry at, and gives up).
    pub(super) fn discover_session_era(message: &Message) -> HttpReply {
        let e = RpcError::new(
            jsonrpc::INVALID_REQUEST,
            "server/discover: the servers behind mcpgate speak the session era, and so does mcpgate to clients that \
             probe: send initialize (protocol 2025-11-25 or earlier)",
        );
        error_reply(message.id.as_ref().unwrap_or(&Value::Null), &e)
    }

    /// `server/discover`: the versions mcpgate speaks, and what its
    /// servers offer together.
    fn discover(&self, g: &Gateway, id: &Value, access: &Access) -> HttpReply {
        let pool = match self.pool(g, access) {
            Ok(pool) => pool,
            Err(reply) => return reply,
        };
        let opened = dispatch::open_all(g, &pool);
        let mut capabilities = dispatch::capabilities(g, &pool, &opened);
        // Offered only what this era's clients are served: tasks left the
        // core protocol in this era for an extension (see `tasks`), and
        // resource subscriptions (`subscriptions/listen`'s
        // `resourceSubscriptions`) are not bridged.
        let offers_tasks = tasks::offers_tasks(&capabilities, &opened);
        if let Value::Object(caps) = &mut capabilities {
            caps.remove("tasks");
            if offers_tasks && let Value::Object(extensions) = caps.entry("extensions").or_insert_with(|| json!({})) {
                extensions.insert(crate::tasks::EXTENSION.into(), json!({}));
            }
            if let Some(Value::Object(resources)) = caps.get_mut("resources") {
                resources.remove("subscribe");
            }
        }
        let mut supported = vec![stateless::VERSION];
        supported.extend_from_slice(versions::SUPPORTED);
        let mut result = json!({
            "supportedVersions": supported,
            "capabilities": capabilities,
            "_meta": {
                "io.modelcontextprotocol/serverInfo": { "name": "mcpgate", "version": env!("CARGO_PKG_VERSION") },
            },
        });
        if let Some(text) = instructions(&super::visible(&g.current(), &pool), &opened) {
            result["instructions"] = Value::String(text);
        }
        self.finish(g, id, "server/discover", Outcome::Result(result), None)
    }

    /// The session of this era's clients of `access`'s token, made when
    /// first needed (and again after it was evicted).
    fn pool(&self, g: &Gateway, access: &Access) -> Result<Arc<Session>, HttpReply> {
        let key = access.principal().map(|p| sha256::hex(&p)).unwrap_or_default();
        let mut pools = self.pools.lock();
        if let Some(pool) = pools.get(&key).filter(|p| g.sessions.get(&p.id).is_some()) {
            return Ok(pool.clone());
        }
        let id = new_session_id(g.store.instance_id.as_deref()).map_err(|e| {
            refusal::reply(Why::Internal, &RpcError::internal(format!("no randomness for a session id: {e}")))
        })?;
        let params = json!({
            "protocolVersion": versions::NEWEST,
            "capabilities": { "sampling": {}, "elicitation": {}, "roots": {} },
            "clientInfo": { "name": "mcpgate (clients of protocol 2026-07-28)", "version": env!("CARGO_PKG_VERSION") },
        });
        let pool =
            Session::new(id, versions::NEWEST.into(), jsonrpc::raw(&params), "protocol 2026-07-28".into(), access);
        pool.mark_sessionless();
        if !g.sessions.insert(pool.clone(), g.current().config.max_sessions) {
            g.refused_session();
            let e = RpcError::internal("mcpgate holds its limit of sessions (max_sessions); retry later");
            return Err(refusal::reply(Why::Unavailable, &e));
        }
        g.stats.sessions_created.inc();
        if let Some(audit) = g.govern.audit_log() {
            audit.write(super::audit::session_record(&pool, g.issuer().as_deref(), None));
        }
        pools.insert(key, pool.clone());
        Ok(pool)
    }

    /// A call (`tools/call`, `prompts/get`, `resources/read`,
    /// `completion/complete`): new, or a retry carrying `requestState`.
    fn stateless_call(
        &self,
        g: &Gateway,
        req: &HttpRequest,
        pool: &Arc<Session>,
        checked: Checked<'_>,
        sink: &mut dyn EventSink,
        access: &Access,
    ) -> HttpReply {
        let Checked { message, mut params, envelope } = checked;
        let envelope = &envelope;
        let id = message.id.clone().unwrap_or(Value::Null);
        // A retry after mcpgate asked its user to sign in: what was for mcpgate goes no further.
        let within = g.current().config.held_call_timeout;
        if let Err(e) = sign_in_retry(&g.downstreams.oauth, within, &mut params, access.user()) {
            return error_reply(&id, &e);
        }
        let state = params.str("requestState").filter(|s| s.starts_with(holds::STATE_PREFIX));
        if message.method() == "tools/call" {
            params = match g.tool_search(pool, params, state.is_none()) {
                Ok(Route::Answer(outcome)) => return self.finish(g, &id, message.method(), outcome, None),
                Ok(Route::Call(params)) => params,
                Err(e) => return error_reply(&id, &e),
            };
        }
        let token = access.principal();
        let held = match state {
            Some(state) => match self.holds.take(&state, token.as_ref()) {
                Ok(mut held) => {
                    Self::deliver_answers(&mut held, params.value("inputResponses"));
                    held
                }
                Err(e) => return error_reply(&id, &holds::refused(&e)),
            },
            None => {
                let new = match self.new_call(g, pool, message, params) {
                    Ok(new) => new,
                    Err(e) => return error_reply(&id, &e),
                };
                if new.server.era() == Some(stateless::VERSION) {
                    let (outcome, streaming) = self.call_here(&g.call_settings(), req, pool, &new, envelope, sink);
                    return self.finish(g, &id, new.call.method(), outcome, streaming);
                }
                match self.tasks(g, pool, |tasks| tasks.as_task(pool, &new, envelope)) {
                    Ok(true) => {
                        return self.tasks(g, pool, |tasks| tasks.create_task(req, pool, new, envelope, sink, &id));
                    }
                    Ok(false) => {}
                    Err(e) => return error_reply(&id, &e),
                }
                match self.start_holdable_call(g, pool, new, token) {
                    Ok(held) => held,
                    Err(e) => return error_reply(&id, &e),
                }
            }
        };
        self.wait_for(g, req, held, envelope, sink, &id)
    }

    /// A new call, on the pool's downstream session with the server that
    /// owns its tool, prompt or resource: its number and id in the pool,
    /// the request as the pool sends it, its server and params.
    fn new_call<'p>(
        &self,
        g: &Gateway,
        pool: &Arc<Session>,
        message: &Message,
        params: Params<'p>,
    ) -> Result<NewCall<'p>, RpcError> {
        // The call's own id in the pool: clients of this era may all use id 1.
        let number = self.next_call();
        let call_id = Value::String(format!("mcpgate-call-{number}"));
        let call = Message {
            jsonrpc: Some("2.0".into()),
            id: Some(call_id.clone()),
            method: message.method.clone(),
            // As the client wrote them: `params` are what the server gets.
            params: message.params.clone(),
            result: None,
            error: None,
            held: None,
        };
        let (server, mut params) = self.target(g, pool, &call, params)?;
        if server.era() != Some(stateless::VERSION) {
            // A session-era server: what describes the hop from the client to
            // mcpgate (its _meta, a retry's answers and state) stays here.
            params.remove("inputResponses");
            params.remove("requestState");
            if let Some(Value::Object(mut meta)) = params.value("_meta") {
                meta.retain(|k, _| !k.starts_with("io.modelcontextprotocol/"));
                if meta.is_empty() {
                    params.remove("_meta");
                } else {
                    params.set("_meta", &Value::Object(meta));
                }
            }
        }
        Ok(NewCall { number, call_id, call, server, params })
    }

    /// A call to a server of this era runs here, on the connection thread
    /// that read it: such a server asks for input only through its result
    /// (`input_required`, passed on as it is, with the server's own
    /// `requestState`), never mid-call, so there is nothing to hold. What
    /// the server sends first goes straight to the answer. A thread and two
    /// wake-ups per call less: 0.34 of direct throughput at 1 client became
    /// what docs/BENCHMARKS.md shows. The watcher cancels the call when the
    /// client closes its stream; no `: ping` comment is added to a quiet
    /// answer (the server's own keep-alives are not relayed either).
    fn call_here(
        &self,
        settings: &CallSettings,
        req: &HttpRequest,
        pool: &Arc<Session>,
        new: &NewCall,
        envelope: &Envelope,
        sink: &mut dyn EventSink,
    ) -> (Outcome, Option<()>) {
        let (outcome, streaming) = call::run_here(&self.watch, settings, req, pool, new, envelope, sink);
        let outcome = match sign_in_2026(new.call.method(), outcome, envelope) {
            // A task of the server's (the tasks extension): the client gets one of mcpgate's ids.
            Outcome::Forwarded(answer) if answer.result.as_ref().is_some_and(|r| stateless::is_task(r.get())) => {
                Outcome::Forwarded(pool.tasks_in_answer(new.server.name(), answer))
            }
            outcome => outcome,
        };
        (outcome, streaming)
    }

    /// Starts a new call to a session-era server on a thread of its own:
    /// such a server may ask the client mid-call, on the call's stream or
    /// on its `GET` stream (read by another thread), and the call must then
    /// wait for the client's retry while its client is answered.
    fn start_holdable_call(
        &self,
        g: &Gateway,
        pool: &Arc<Session>,
        new: NewCall,
        token: Option<[u8; 32]>,
    ) -> Result<HeldCall, RpcError> {
        let NewCall { number, call_id, call, server, params } = new;
        let request_bytes = call.params.as_deref().map_or(0, |p| p.get().len());
        let charge = Tallied::new(holds::THREAD_BYTES + 2 * request_bytes, self.holds.tally())
            .ok_or_else(|| RpcError::internal("mcpgate holds its limit of max_memory_mb; retry shortly"))?;
        let params = params.into_owned();
        let method = call.method().to_string();
        let (tx, rx) = bounded(64);
        let settings = g.call_settings();
        let events = HoldEvents { tx, tally: self.holds.tally().clone() };
        let asks = events.clone();
        pool.add_caller(
            number,
            server.name(),
            Arc::new(move |session, server, message| asks.clone().message(session, server, message)),
        );
        let spawned = {
            let pool = pool.clone();
            let done = events.tx.clone();
            threads::spawn("hold", "", move || {
                let mut events = events;
                let outcome = dispatch::call(&pool, &server, &call, &params, &mut events, &settings);
                pool.remove_caller(number);
                // The end is reported last, so that the waiter's join returns at once.
                drop((pool, server, call, params, events));
                let _ = done.send(HoldEvent::Done(outcome));
            })
        };
        let thread = spawned.map_err(|e| {
            pool.remove_caller(number);
            RpcError::internal(format!("mcpgate cannot start a thread now ({e}); retry later"))
        })?;
        Ok(HeldCall {
            events: rx,
            pool: pool.clone(),
            call_id,
            asks: Vec::new(),
            thread: HoldThread::new(thread, charge),
            method,
            token,
        })
    }

    /// The server and params of a call, as a session-era request would find them.
    fn target<'p>(
        &self,
        g: &Gateway,
        pool: &Arc<Session>,
        call: &Message,
        params: Params<'p>,
    ) -> Result<(Arc<Server>, Params<'p>), RpcError> {
        match call.method() {
            "tools/call" => dispatch::by_name(g, pool, ListKind::Tools, call, params),
            "prompts/get" => dispatch::by_name(g, pool, ListKind::Prompts, call, params),
            "resources/read" => dispatch::by_uri(g, pool, call, params),
            _ => dispatch::completion(g, pool, call, params),
        }
    }

    /// The client's answers to the server's requests of a held call go to
    /// the server; one the client left out is answered with an error.
    fn deliver_answers(held: &mut HeldCall, answers: Option<Value>) {
        let answers = match answers {
            Some(Value::Object(answers)) => answers,
            _ => Map::new(),
        };
        for ask in std::mem::take(&mut held.asks) {
            let body = match answers.get(&ask.to_string()) {
                Some(result) => json!({ "jsonrpc": "2.0", "id": ask, "result": result }),
                None => json!({ "jsonrpc": "2.0", "id": ask, "error": {
                    "code": jsonrpc::INTERNAL_ERROR,
                    "message": "the client (protocol 2026-07-28) retried without answering this request",
                }}),
            };
            if let Ok(answer) = Message::parse(body.to_string().as_bytes()) {
                dispatch::client_answer(&held.pool, &answer);
            }
        }
    }

    /// Waits for what the call sends: notifications go to the client as
    /// SSE; a server's request makes the answer `input_required` and holds
    /// the call; its end is the answer. A client that leaves cancels it.
    fn wait_for(
        &self,
        g: &Gateway,
        req: &HttpRequest,
        mut held: HeldCall,
        envelope: &Envelope,
        sink: &mut dyn EventSink,
        id: &Value,
    ) -> HttpReply {
        let method = held.method.clone();
        let mut streaming = false;
        let mut last_write = Instant::now();
        let mut cancelled = false;
        loop {
            match held.events.recv_timeout(LOOK) {
                Ok(HoldEvent::Streaming) => {}
                Ok(HoldEvent::Notify { bytes, log_level }) => {
                    if log_level.is_some_and(|level| !envelope.wants_log(&level)) {
                        continue;
                    }
                    if sink.can_stream() && sink.event(&sse::encode(None, &bytes)).is_ok() {
                        streaming = true;
                        last_write = Instant::now();
                    }
                }
                Ok(HoldEvent::Ask { id: ask, method: asked, params }) => {
                    if !envelope.can_answer(&asked) {
                        // The server is refused, not left waiting.
                        Self::refuse_ask(&held.pool, ask, &asked);
                        if let Some(capability) = stateless::capability_of(&asked) {
                            // The era's answer: the call needs what the client
                            // did not declare, and ends there.
                            dispatch::cancel_call(
                                &held.pool,
                                &held.call_id,
                                "the client lacks a capability the call needs",
                            );
                            let e = stateless::missing_capability(capability, &asked);
                            return self.finish(g, id, &method, Outcome::Error(e), streaming.then_some(()));
                        }
                        continue;
                    }
                    held.asks.push(ask);
                    let request = match params {
                        Some(params) => json!({ "method": asked, "params": params }),
                        None => json!({ "method": asked }),
                    };
                    let config = &g.current().config;
                    let number = self.next_call();
                    return match self.holds.hold(number, held, config.held_call_timeout, config.max_held_calls) {
                        Ok(state) => {
                            let result = json!({
                                "resultType": "input_required",
                                "inputRequests": { ask.to_string(): request },
                                "requestState": state,
                            });
                            self.finish(g, id, &method, Outcome::Result(result), streaming.then_some(()))
                        }
                        Err(back) => {
                            dispatch::cancel_call(&back.pool, &back.call_id, "mcpgate holds max_held_calls calls");
                            let e = RpcError::internal(format!(
                                "mcpgate holds its limit of {} calls waiting for their clients (max_held_calls); \
                                 retry later",
                                config.max_held_calls
                            ));
                            self.finish(g, id, &method, Outcome::Error(e), streaming.then_some(()))
                        }
                    };
                }
                Ok(HoldEvent::Done(outcome)) => {
                    held.thread.join();
                    let outcome = sign_in_2026(&method, outcome, envelope);
                    return self.finish(g, id, &method, outcome, streaming.then_some(()));
                }
                Err(RecvTimeoutError::Timeout) => {
                    if !cancelled && req.client.as_ref().is_some_and(|c| c.gone()) {
                        // This era's cancel: the client closed its stream.
                        dispatch::cancel_call(&held.pool, &held.call_id, "the client closed its stream");
                        cancelled = true;
                    }
                    if !cancelled && last_write.elapsed() >= PING && sink.can_stream() {
                        streaming |= sink.event(b": ping\n\n").is_ok();
                        last_write = Instant::now();
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let e = RpcError::internal("the call ended without an answer");
                    return self.finish(g, id, &method, Outcome::Error(e), streaming.then_some(()));
                }
            }
        }
    }

    /// Answers a server's request the client cannot take (it did not
    /// declare the capability) with an error, at once.
    fn refuse_ask(pool: &Arc<Session>, ask: u64, method: &str) {
        let body = json!({ "jsonrpc": "2.0", "id": ask, "error": {
            "code": jsonrpc::INTERNAL_ERROR,
            "message": format!("the client did not declare what `{method}` needs in its capabilities"),
        }});
        if let Ok(answer) = Message::parse(body.to_string().as_bytes()) {
            dispatch::client_answer(pool, &answer);
        }
    }

    /// What the tasks extension reads of the gateway, for a request of `pool`.
    fn tasks<T>(&self, g: &Gateway, pool: &Arc<Session>, work: impl FnOnce(&tasks::Tasks) -> T) -> T {
        let cur = g.current();
        let tools = || g.offered.lists.merged(&g.in_force(), pool, ListKind::Tools);
        work(&tasks::Tasks {
            config: &cur.config,
            servers: &cur.servers,
            stats: &g.stats,
            holds: &self.holds,
            watch: &self.watch,
            settings: g.call_settings(),
            tools: &tools,
        })
    }

    /// [`answer`] under the configuration in force.
    fn finish(&self, g: &Gateway, id: &Value, method: &str, outcome: Outcome, streaming: Option<()>) -> HttpReply {
        answer(g.current().config.tokens.is_some(), id, method, outcome, streaming)
    }

    /// `subscriptions/listen`: a stream of the list changes the client
    /// asked for, from every server of the pool.
    fn listen(&self, g: &Gateway, req: &HttpRequest, pool: &Arc<Session>, message: &Message) -> HttpReply {
        let id = message.id.clone().unwrap_or(Value::Null);
        if !accepts(req.header("accept").unwrap_or(""), "text/event-stream") {
            return refusal::refuse(
                Why::NotAcceptable,
                "subscriptions/listen answers with a stream: Accept needs text/event-stream",
            );
        }
        let wanted = message.params_object().ok().and_then(|mut p| p.remove("notifications")).unwrap_or(Value::Null);
        let filter = ListenFilter {
            tools: wanted["toolsListChanged"] == true,
            prompts: wanted["promptsListChanged"] == true,
            resources: wanted["resourcesListChanged"] == true,
        };
        // The servers' own streams carry their changes: open them.
        dispatch::open_all(g, pool);
        let attached = pool.listen(&id, filter);
        let pool = pool.clone();
        HttpReply::stream(StreamReply {
            first: attached.first,
            rx: attached.rx,
            keepalive: g.current().config.keepalive,
            on_end: Box::new(move || {
                if let Some(listener) = attached.id {
                    pool.unlisten(listener);
                }
            }),
        })
    }
}

/// What the server sends during a held call, for its waiter; the
/// notifications charged to `tally` until they are written.
#[derive(Clone)]
struct HoldEvents {
    tx: Sender<HoldEvent>,
    tally: Arc<AtomicUsize>,
}

impl CallEvents for HoldEvents {
    fn streaming(&mut self) {
        let _ = self.tx.send(HoldEvent::Streaming);
    }

    fn message(&mut self, session: &Session, server: &Server, message: Message) {
        let kind = message.kind();
        let log_level = log_level_of(&message);
        let Some(bytes) = session.to_client(server, message) else { return };
        let event = match kind {
            // mcpgate's id for the request: the answer goes back through the session.
            Ok(Kind::Request) => match Message::parse(&bytes) {
                Ok(asked) => HoldEvent::Ask {
                    id: asked.id.as_ref().and_then(Value::as_u64).unwrap_or_default(),
                    method: asked.method().to_string(),
                    params: asked.params,
                },
                Err(_) => return,
            },
            _ => match memory::Held::new(bytes, &self.tally) {
                Ok(bytes) => HoldEvent::Notify { bytes, log_level },
                Err(_) => {
                    crate::limited!(
                        warn,
                        "server `{}`: a notification for a client of protocol 2026-07-28 was dropped: \
                         mcpgate holds its limit of max_memory_mb",
                        server.name()
                    );
                    return;
                }
            },
        };
        // The waiter is gone (the hold expired, or mcpgate stops): the call ends with the cancel.
        let _ = self.tx.send(event);
    }
}
