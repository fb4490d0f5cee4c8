//! The `/mcp` endpoint: plain requests in, plain replies out. Knows MCP,
//! sessions and routing; knows nothing of tiny_http (see `httpd`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::config::Config;
use crate::downstream::stdio::Children;
use crate::downstream::{self, Arrival, Context, Downstream, DownstreamError, Limits, PROTOCOL_VERSIONS, Server};
use crate::http::access::Access;
use crate::http::{EventSink, HttpReply, HttpRequest, NoStream, StreamReply};
use crate::protocol::jsonrpc::{self, Kind, Message, Params, RpcError};
use crate::runtime::state::Journal;
use crate::runtime::threads;
use crate::session::{self, CloseReason, Session, Sessions};
use crate::status::stats::Stats;
use catalog::{List, ListKind, ServerItems};

pub mod catalog;
pub mod tasks;

pub const SESSION_HEADER: &str = "mcp-session-id";
pub const VERSION_HEADER: &str = "mcp-protocol-version";

/// The error of protocol 2026-07-28 for a version the server does not speak.
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// Pages of one server's list mcpgate follows before it stops.
const MAX_PAGES: usize = 1000;
/// Collision lines kept for the status page.
const MAX_COLLISIONS: usize = 50;
/// Renamed tools and prompts kept for the status page.
const MAX_RENAMED: usize = 500;

/// The configuration in force and its servers; replaced whole on reload.
pub struct Current {
    pub config: Config,
    /// In configuration order: the first wins a name collision.
    pub servers: Vec<Arc<Server>>,
}

impl Current {
    pub fn server(&self, name: &str) -> Option<&Arc<Server>> {
        self.servers.iter().find(|s| s.name() == name)
    }

    /// Position in the configuration, for collision order.
    fn rank(&self, name: &str) -> usize {
        self.servers.iter().position(|s| s.name() == name).unwrap_or(usize::MAX)
    }
}

/// What the last reload did, for the status page.
#[derive(Debug, Clone, Default)]
pub struct ReloadOutcome {
    pub at: Option<std::time::SystemTime>,
    pub error: Option<String>,
    pub changed: Vec<String>,
    pub restart_needed: Vec<String>,
}

/// The gateway: configuration, servers, sessions and counters.
pub struct Gateway {
    /// Guards only the swap of the whole `Current`; readers clone the Arc.
    current: parking_lot::RwLock<Arc<Current>>,
    pub sessions: Sessions,
    pub stats: Arc<Stats>,
    /// Where opens and closes of downstream sessions are written ahead.
    pub journal: Arc<Journal>,
    /// The child processes of stdio servers.
    pub children: Arc<Children>,
    /// Recent name collisions between servers, for the status page.
    pub collisions: Mutex<Vec<String>>,
    /// Tools and prompts exposed under another name than `<prefix>__<name>`.
    pub renamed: Mutex<Vec<catalog::Renamed>>,
    /// Guards the outcome of the last reload; `reloading` serializes reloads.
    pub last_reload: Mutex<ReloadOutcome>,
    reloading: Mutex<()>,
    /// Set at shutdown, once every session is closed: requests still waiting
    /// on a server are cut short, and say why.
    stopping: std::sync::atomic::AtomicBool,
    /// Milliseconds since start at the last `release_memory`.
    trimmed_at: std::sync::atomic::AtomicU64,
    /// Sessions closed since then: the reaper gives their memory back.
    trim_owed: std::sync::atomic::AtomicBool,
    pub started: Instant,
}

/// What answers a JSON-RPC request: a result built here, an error, a
/// server's response passed on as it came, or nothing (the client
/// cancelled it: the spec says no response follows).
enum Outcome {
    Result(Value),
    Error(RpcError),
    Forwarded(Message),
    Cancelled,
}

impl From<RpcError> for Outcome {
    fn from(e: RpcError) -> Outcome {
        Outcome::Error(e)
    }
}

impl Gateway {
    pub fn new(config: Config) -> Gateway {
        crate::runtime::memory::set_limit(config.max_memory);
        let stats = Arc::new(Stats::default());
        let journal = Arc::new(Journal::new(config.state_file.as_deref()));
        let children = Children::new(config.max_processes, config.stdio_grace, config.max_message_bytes);
        let context = Context { stats: stats.clone(), journal: journal.clone(), children: children.clone() };
        let servers = config.servers.iter().map(|s| new_server(s, &config, &context)).collect();
        Gateway {
            current: parking_lot::RwLock::new(Arc::new(Current { config, servers })),
            sessions: Sessions::new(journal.clone()),
            journal,
            stats,
            children,
            collisions: Mutex::new(Vec::new()),
            renamed: Mutex::new(Vec::new()),
            last_reload: Mutex::new(ReloadOutcome::default()),
            reloading: Mutex::new(()),
            stopping: std::sync::atomic::AtomicBool::new(false),
            trimmed_at: std::sync::atomic::AtomicU64::new(0),
            trim_owed: std::sync::atomic::AtomicBool::new(false),
            started: Instant::now(),
        }
    }

    /// What every server shares.
    pub fn context(&self) -> Context {
        Context { stats: self.stats.clone(), journal: self.journal.clone(), children: self.children.clone() }
    }

    /// The configuration and servers in force now.
    pub fn current(&self) -> Arc<Current> {
        self.current.read().clone()
    }

    /// Fails every request still waiting on a server, and stops the shared
    /// processes and the thread that starts processes; for the end of
    /// shutdown, after every session was closed.
    pub fn shutdown(&self) {
        self.stopping.store(true, std::sync::atomic::Ordering::Release);
        for server in &self.current().servers {
            server.shutdown();
        }
        self.children.stop();
    }

    /// At shutdown: the state file keeps the client sessions (not their
    /// downstream sessions, which are closed) from now on; how many.
    pub fn keep_clients(&self) -> usize {
        let kept: Vec<_> = self.sessions.snapshot().iter().filter_map(|s| s.saved(false)).collect();
        let count = kept.len();
        self.journal.keep_clients(kept);
        count
    }

    /// Closes sessions already removed from the table: idle, deleted or at shutdown.
    pub fn close(&self, sessions: Vec<Arc<Session>>, reason: CloseReason) {
        self.journal.changed();
        let parallel = (self.current().servers.len() * sessions.len()).clamp(1, 32);
        session::close_sessions(sessions, reason, parallel, &self.stats);
        self.release_memory();
    }

    /// Gives freed memory back to the kernel after sessions close, at most
    /// every 100 ms: RSS then follows the sessions that are live. A close
    /// within 100 ms of the last trim leaves it owed to the reaper
    /// ([`Gateway::settle_memory`]), so the last of a burst is not missed.
    fn release_memory(&self) {
        use std::sync::atomic::Ordering;
        let now = self.started.elapsed().as_millis() as u64;
        let last = self.trimmed_at.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= 100
            && self.trimmed_at.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            self.trim_owed.store(false, Ordering::Relaxed);
            crate::runtime::sys::release_free_memory();
        } else {
            self.trim_owed.store(true, Ordering::Relaxed);
        }
    }

    /// Pays a trim a burst of closes left owed; the reaper calls it.
    pub fn settle_memory(&self) {
        if self.trim_owed.load(std::sync::atomic::Ordering::Relaxed) {
            self.release_memory();
        }
    }

    /// Applies a new configuration. Servers removed or changed (URL, headers,
    /// prefix, the values of their variables, limits) are retired: every
    /// downstream session of theirs is closed through the close path and
    /// reopened lazily with the new settings. Unchanged servers and their
    /// sessions are left alone; sessions whose lists change are told with
    /// `list_changed`. Settings of the listener need a restart and are reported.
    pub fn reload(&self, new: Config) -> ReloadOutcome {
        let _one_at_a_time = self.reloading.lock();
        let old = self.current();
        let mut outcome = ReloadOutcome { at: Some(std::time::SystemTime::now()), ..Default::default() };
        for (key, differs) in [
            ("listen", old.config.listen != new.listen),
            ("max_connections", old.config.max_connections != new.max_connections),
            ("max_body_bytes", old.config.max_body_bytes != new.max_body_bytes),
            ("max_header_count", old.config.max_header_count != new.max_header_count),
            ("max_header_bytes", old.config.max_header_bytes != new.max_header_bytes),
            ("client_idle_timeout_secs", old.config.client_idle_timeout != new.client_idle_timeout),
            ("client_write_timeout_secs", old.config.client_write_timeout != new.client_write_timeout),
            ("header_timeout_secs", old.config.header_timeout != new.header_timeout),
            ("state_file", old.config.state_file != new.state_file),
        ] {
            if differs {
                outcome.restart_needed.push(key.to_string());
            }
        }
        let same_limits = Limits::from_config(&old.config) == Limits::from_config(&new)
            && old.config.calls_per_server == new.calls_per_server;
        let mut servers = Vec::with_capacity(new.servers.len());
        let context = self.context();
        self.children.configure(new.max_processes, new.stdio_grace, new.max_message_bytes);
        for config in &new.servers {
            match old.server(&config.name) {
                Some(server) if server.config == *config && same_limits => servers.push(server.clone()),
                _ => servers.push(new_server(config, &new, &context)),
            }
        }
        let retired: Vec<Arc<Server>> =
            old.servers.iter().filter(|o| !servers.iter().any(|s| Arc::ptr_eq(s, o))).cloned().collect();
        let added = servers.iter().filter(|s| !old.servers.iter().any(|o| Arc::ptr_eq(s, o))).count();
        outcome.changed = retired.iter().map(|s| s.name().to_string()).collect();
        outcome
            .changed
            .extend(servers.iter().filter(|s| old.server(s.name()).is_none()).map(|s| format!("{} (new)", s.name())));
        crate::runtime::memory::set_limit(new.max_memory);
        *self.current.write() = Arc::new(Current { config: new, servers });
        // After the swap: an open that finishes now sees its server retired and closes itself.
        for server in &retired {
            server.retire();
        }
        let mut closing = Vec::new();
        for session in self.sessions.snapshot() {
            let taken = session.take_servers(&retired);
            if !taken.is_empty() || added > 0 || !retired.is_empty() {
                session.lists_changed();
            }
            closing.extend(taken);
        }
        let parallel = closing.len().clamp(1, 32);
        downstream::close_all(&closing, parallel);
        for server in &retired {
            // A shared process nobody uses now stops at once.
            server.stop_idle(Duration::ZERO);
        }
        log::info!(
            "configuration reloaded: {} server(s) changed, {} downstream session(s) closed{}",
            outcome.changed.len(),
            closing.len(),
            if outcome.restart_needed.is_empty() {
                String::new()
            } else {
                format!("; these take effect after a restart: {}", outcome.restart_needed.join(", "))
            }
        );
        *self.last_reload.lock() = outcome.clone();
        outcome
    }

    /// Reloads from `source`. A configuration that cannot be loaded is
    /// refused with a log line and a status-page entry; the old one stays.
    pub fn reload_from(&self, source: &crate::config::Source) -> ReloadOutcome {
        match source.load() {
            Ok(config) => self.reload(config),
            Err(e) => {
                log::error!("configuration reload refused, the previous configuration stays in force: {e}");
                let outcome = ReloadOutcome {
                    at: Some(std::time::SystemTime::now()),
                    error: Some(e.to_string()),
                    ..Default::default()
                };
                *self.last_reload.lock() = outcome.clone();
                outcome
            }
        }
    }

    /// Handles `/mcp`. Events a `POST` sends before its answer go to `sink`.
    pub fn handle(&self, req: &HttpRequest, sink: &mut dyn EventSink, access: &Access) -> HttpReply {
        self.stats.requests.inc();
        match req.method.as_str() {
            "POST" => self.post(req, sink, access),
            "GET" => self.get(req, access),
            "DELETE" => self.delete(req, access),
            _ => HttpReply::error(
                405,
                &Value::Null,
                &RpcError::new(jsonrpc::INVALID_REQUEST, "use GET, POST or DELETE on /mcp"),
            )
            .header("Allow", "GET, POST, DELETE"),
        }
    }

    fn post(&self, req: &HttpRequest, sink: &mut dyn EventSink, access: &Access) -> HttpReply {
        let accept = req.header("accept").unwrap_or("");
        if !(accepts(accept, "application/json") && accepts(accept, "text/event-stream")) {
            return HttpReply::bad(406, "Accept must list both application/json and text/event-stream");
        }
        let content_type = req.header("content-type").unwrap_or("");
        if !content_type.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case("application/json") {
            return HttpReply::bad(415, "Content-Type must be application/json");
        }
        let body = req.body.trim_ascii_start();
        if body.first() == Some(&b'[') {
            return self.batch(req, body, access);
        }
        let message = match Message::parse(body) {
            Ok(m) => m,
            Err(e) => return HttpReply::error(400, &Value::Null, &e),
        };
        if message.method() == "initialize" && message.kind() == Ok(Kind::Request) {
            return self.initialize(&message, access);
        }
        let session = match self.session_of(req, message.id.as_ref(), access) {
            Ok(s) => s,
            Err(reply) => return reply,
        };
        // Only requests count against max_requests_per_session: an answer or
        // a cancel may be what ends the requests in flight.
        let limit = match message.kind() {
            Ok(Kind::Request) => self.current().config.max_requests_per_session,
            _ => usize::MAX,
        };
        let Some(_busy) = session.activity(limit) else {
            return too_busy(&session);
        };
        match message.kind() {
            Ok(Kind::Request) => {
                let id = message.id.clone().unwrap_or(Value::Null);
                let mut events = PostStream { session: &session, sink, stream: None };
                let answer = self.request(&session, &message, &mut events);
                events.finish(answer_bytes(&id, answer))
            }
            Ok(Kind::Notification) => {
                self.client_notification(&session, &message);
                HttpReply::accepted()
            }
            Ok(Kind::Response) => {
                self.client_answer(&session, &message);
                HttpReply::accepted()
            }
            Err(e) => HttpReply::error(400, &Value::Null, &e),
        }
    }

    /// A JSON-RPC batch: only for sessions on protocol 2025-03-26, which had them.
    fn batch(&self, req: &HttpRequest, body: &[u8], access: &Access) -> HttpReply {
        let items: Vec<Box<RawValue>> = match serde_json::from_slice(body) {
            Ok(items) => items,
            Err(e) => {
                return HttpReply::error(
                    400,
                    &Value::Null,
                    &RpcError::new(jsonrpc::PARSE_ERROR, format!("parse error: {e}")),
                );
            }
        };
        let session = match self.session_of(req, None, access) {
            Ok(s) => s,
            Err(reply) => return reply,
        };
        if session.protocol_version != "2025-03-26" {
            let e = RpcError::new(
                jsonrpc::INVALID_REQUEST,
                format!(
                    "JSON-RPC batches were removed in protocol 2025-06-18; this session speaks {}",
                    session.protocol_version
                ),
            );
            return HttpReply::error(400, &Value::Null, &e);
        }
        if items.is_empty() {
            return HttpReply::error(400, &Value::Null, &RpcError::new(jsonrpc::INVALID_REQUEST, "empty batch"));
        }
        let Some(_busy) = session.activity(self.current().config.max_requests_per_session) else {
            return too_busy(&session);
        };
        let mut answers = Vec::new();
        for item in &items {
            let message = match Message::parse(item.get().as_bytes()) {
                Ok(m) => m,
                Err(e) => {
                    answers.push(jsonrpc::error(&Value::Null, &e));
                    continue;
                }
            };
            match message.kind() {
                Ok(Kind::Request) if message.method() == "initialize" => {
                    let e = RpcError::new(jsonrpc::INVALID_REQUEST, "initialize cannot be part of a batch");
                    answers.push(jsonrpc::error(message.id.as_ref().unwrap_or(&Value::Null), &e));
                }
                Ok(Kind::Request) => {
                    let id = message.id.clone().unwrap_or(Value::Null);
                    let mut events = PostStream { session: &session, sink: &mut NoStream, stream: None };
                    let answer = self.request(&session, &message, &mut events);
                    answers.extend(answer_bytes(&id, answer));
                }
                Ok(Kind::Notification) => self.client_notification(&session, &message),
                Ok(Kind::Response) => self.client_answer(&session, &message),
                Err(e) => answers.push(jsonrpc::error(&Value::Null, &e)),
            }
        }
        if answers.is_empty() {
            return HttpReply::accepted();
        }
        let mut out = b"[".to_vec();
        for (i, a) in answers.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(a);
        }
        out.push(b']');
        HttpReply::json(200, out)
    }

    /// The session a request names, or the reply that refuses it.
    /// The session a request names, or the reply that refuses it. A session
    /// created with a token answers only to that token: to any other it is
    /// unknown.
    fn session_of(&self, req: &HttpRequest, id: Option<&Value>, access: &Access) -> Result<Arc<Session>, HttpReply> {
        let id = id.unwrap_or(&Value::Null);
        if let Some(version) = req.header(VERSION_HEADER)
            && !PROTOCOL_VERSIONS.contains(&version)
        {
            // -32022 names the versions mcpgate speaks: a client of the
            // session-less 2026-07-28 generation that probes first falls
            // back to `initialize` on it.
            let e = RpcError {
                code: UNSUPPORTED_PROTOCOL_VERSION,
                message: format!(
                    "unsupported MCP-Protocol-Version `{version}`; mcpgate speaks {}",
                    PROTOCOL_VERSIONS.join(", ")
                ),
                data: Some(json!({ "supported": PROTOCOL_VERSIONS, "requested": version })),
            };
            return Err(HttpReply::error(400, id, &e));
        }
        let Some(session_id) = req.header(SESSION_HEADER) else {
            let e = RpcError::new(jsonrpc::INVALID_REQUEST, "Mcp-Session-Id header is required after initialize");
            return Err(HttpReply::error(400, id, &e));
        };
        match self.sessions.get(session_id) {
            Some(session) if session.admits(access) => Ok(session),
            _ => {
                let e = RpcError::new(jsonrpc::INVALID_REQUEST, "unknown or ended session: initialize a new one");
                Err(HttpReply::error(404, id, &e))
            }
        }
    }

    fn initialize(&self, message: &Message, access: &Access) -> HttpReply {
        let id = message.id.clone().unwrap_or(Value::Null);
        let params = match message.params_object() {
            Ok(p) => p,
            Err(e) => return HttpReply::json(200, jsonrpc::error(&id, &e)),
        };
        let Some(requested) = params.get("protocolVersion").and_then(Value::as_str) else {
            let e = RpcError::invalid_params("initialize needs `protocolVersion` (a string)");
            return HttpReply::json(200, jsonrpc::error(&id, &e));
        };
        let version = if PROTOCOL_VERSIONS.contains(&requested) { requested } else { PROTOCOL_VERSIONS[0] };
        let capabilities = params.get("capabilities").cloned().unwrap_or_else(|| json!({}));
        if !capabilities.is_object() {
            let e = RpcError::invalid_params("initialize: `capabilities` must be an object");
            return HttpReply::json(200, jsonrpc::error(&id, &e));
        }
        let client_info =
            params.get("clientInfo").cloned().unwrap_or_else(|| json!({"name": "unknown", "version": "0"}));
        let client_name = client_info["name"].as_str().unwrap_or("unknown").chars().take(64).collect();
        let init_params =
            json!({ "protocolVersion": version, "capabilities": capabilities, "clientInfo": client_info });
        let session_id = match new_session_id() {
            Ok(s) => s,
            Err(e) => {
                return HttpReply::error(
                    500,
                    &id,
                    &RpcError::internal(format!("cannot read the OS random source: {e}")),
                );
            }
        };
        if let Some(why) = self.resources_short() {
            self.stats.sessions_refused.inc();
            crate::limited!(warn, "an initialize was refused with 503: {why}");
            return HttpReply::error(503, &id, &RpcError::internal(why)).header("Retry-After", "5");
        }
        let session =
            Session::new(session_id.clone(), version.to_string(), jsonrpc::raw(&init_params), client_name, access);
        let max_sessions = self.current().config.max_sessions;
        if !self.sessions.insert(session.clone(), max_sessions) {
            self.stats.sessions_refused.inc();
            let e =
                RpcError::internal(format!("mcpgate holds its limit of {} sessions; try again later", max_sessions));
            return HttpReply::error(503, &id, &e).header("Retry-After", "5");
        }
        self.stats.sessions_created.inc();
        log::debug!("session {} created for `{}` ({version})", session::short(&session_id), session.client_name);
        let opened = self.open_all(&session);
        // The session and its downstream sessions are in the state file
        // before the client learns its id: after a crash it is restored.
        if let Err(e) = self.journal.commit()
            && let Some(session) = self.sessions.remove_if(&session_id, |_| true)
        {
            self.close(vec![session], CloseReason::Refused);
            self.stats.sessions_refused.inc();
            let e = RpcError::internal(format!("{e}; a session that would not survive a restart is refused"));
            return HttpReply::error(503, &id, &e).header("Retry-After", "5");
        }
        if opened.is_empty()
            && let Some(why) = session.exhausted()
            && let Some(session) = self.sessions.remove_if(&session_id, |_| true)
        {
            // A session with no server at all, for want of threads or descriptors: better refused.
            self.close(vec![session], CloseReason::Refused);
            self.stats.sessions_refused.inc();
            let e = RpcError::internal(format!("{why}; try again later"));
            return HttpReply::error(503, &id, &e).header("Retry-After", "5");
        }
        let mut result = json!({
            "protocolVersion": version,
            "capabilities": self.capabilities(&session, &opened),
            "serverInfo": { "name": "mcpgate", "version": env!("CARGO_PKG_VERSION") },
        });
        // Absent, never null: the TypeScript SDK's schema refuses null here.
        if let Some(text) = instructions(&opened) {
            result["instructions"] = Value::String(text);
        }
        HttpReply::json(200, jsonrpc::result(&id, &jsonrpc::raw(&result))).header("Mcp-Session-Id", &session_id)
    }

    /// Why a new session must wait: too few file descriptors or threads
    /// left. A session takes about two descriptors and one thread (its
    /// reader) per server; what is kept back serves the sessions that are
    /// open (their requests need connection threads), closes them (a DELETE
    /// each) and answers the status page. Without the margin, descriptors
    /// ran out and the DELETEs that keep mcpgate's promise failed, and
    /// sessions got no reader.
    fn resources_short(&self) -> Option<String> {
        let servers = self.current().servers.len() as u64;
        let reserve = 64 + 4 * servers;
        let limit = crate::runtime::sys::fd_limit();
        let open = crate::runtime::sys::open_fds().unwrap_or(limit);
        if open + reserve + 2 * servers > limit {
            return Some(format!(
                "mcpgate is near its limit of open files ({open} of {limit} open, {reserve} kept for the sessions \
                 that are open); try again later"
            ));
        }
        let left = crate::runtime::sys::thread_headroom()?;
        let reserve = 8 + servers;
        (left < reserve + servers).then(|| {
            format!(
                "mcpgate is near its limit of threads ({left} more may start, {reserve} kept for the sessions that \
                 are open); try again later"
            )
        })
    }

    /// Opens (or reuses) the session's downstream session with every server,
    /// in parallel; returns those that are open.
    fn open_all(&self, session: &Session) -> Vec<Arc<Downstream>> {
        let cur = self.current();
        let servers = visible(&cur, session);
        let opened = Mutex::new(Vec::new());
        threads::for_each_parallel("fanout", &servers, servers.len(), |server| {
            if let Ok(d) = session.downstream(server, cur.config.open_retry) {
                opened.lock().push(d);
            }
        });
        let mut opened = opened.into_inner();
        opened.sort_by_key(|d| cur.rank(d.server.name()));
        opened
    }

    /// What mcpgate offers a client: the union of what its servers offer. A
    /// server that is not open counts as offering tools, prompts and
    /// resources, so the client asks again once it is back.
    fn capabilities(&self, session: &Session, opened: &[Arc<Downstream>]) -> Value {
        let all_open = opened.len() == visible(&self.current(), session).len();
        let mut caps = Map::new();
        for kind in ["tools", "prompts", "resources"] {
            let offering: Vec<&Value> =
                opened.iter().filter_map(|d| d.capabilities.get(kind)).filter(|v| v.is_object()).collect();
            if offering.is_empty() && all_open {
                continue;
            }
            let list_changed = !all_open || offering.iter().any(|v| v["listChanged"] == true);
            let mut cap = json!({ "listChanged": list_changed });
            if kind == "resources" {
                cap["subscribe"] = Value::Bool(offering.iter().any(|v| v["subscribe"] == true));
            }
            caps.insert(kind.into(), cap);
        }
        for kind in ["logging", "completions"] {
            if opened.iter().any(|d| d.offers(kind)) {
                caps.insert(kind.into(), json!({}));
            }
        }
        if let Some(tasks) = tasks::merge_capabilities(opened.iter().filter_map(|d| d.capabilities.get("tasks"))) {
            caps.insert("tasks".into(), tasks);
        }
        Value::Object(caps)
    }

    fn request(&self, session: &Arc<Session>, message: &Message, events: &mut PostStream<'_>) -> Outcome {
        let method = message.method();
        if let Some(kind) = ListKind::from_method(method) {
            return self.list_page(session, kind, message);
        }
        let params = match Params::of(message) {
            Ok(p) => p,
            Err(e) => return e.into(),
        };
        // A task-augmented call answers with the server's task id: the client gets one of its session's.
        let task_ids = (method == "tools/call" && params.contains("task")) || method.starts_with("tasks/");
        let result = match method {
            "ping" => return Outcome::Result(json!({})),
            "initialize" => {
                return RpcError::new(jsonrpc::INVALID_REQUEST, "this session is already initialized").into();
            }
            "tasks/get" | "tasks/result" | "tasks/cancel" => self.by_task(session, message, params),
            "tasks/list" => return self.list_tasks(session, message),
            "tools/call" => self.by_name(session, ListKind::Tools, message, params),
            "prompts/get" => self.by_name(session, ListKind::Prompts, message, params),
            "resources/read" | "resources/subscribe" | "resources/unsubscribe" => self.by_uri(session, message, params),
            "completion/complete" => self.completion(session, message, params),
            "logging/setLevel" => return self.set_level(session, message),
            _ => return RpcError::new(jsonrpc::METHOD_NOT_FOUND, format!("method not found: `{method}`")).into(),
        };
        match result {
            Ok((server, params)) => match self.forward(session, &server, message, &params, events) {
                Outcome::Forwarded(answer) if task_ids => Outcome::Forwarded(tasks_from(session, &server, answer)),
                outcome => outcome,
            },
            Err(e) => e.into(),
        }
    }

    /// `tasks/get`, `tasks/result` and `tasks/cancel`: the server of the
    /// client's task id, and the params with the server's own id.
    fn by_task(
        &self,
        session: &Arc<Session>,
        message: &Message,
        mut params: Params,
    ) -> Result<(Arc<Server>, Params), RpcError> {
        let Some(id) = params.str("taskId") else {
            return Err(RpcError::invalid_params(format!("{} needs `taskId` (a string)", message.method())));
        };
        let (name, theirs) =
            session.task_target(&id).ok_or_else(|| RpcError::invalid_params(format!("unknown task `{id}`")))?;
        let server =
            self.current().server(&name).cloned().ok_or_else(|| RpcError::server(&name, "no longer configured"))?;
        params.set("taskId", &Value::String(theirs));
        Ok((server, params))
    }

    /// `tasks/list`: every server's tasks of this session, with the
    /// client's ids, in one page.
    fn list_tasks(&self, session: &Arc<Session>, message: &Message) -> Outcome {
        let params = match message.params_object() {
            Ok(p) => p,
            Err(e) => return e.into(),
        };
        if let Some(cursor) = params.get("cursor").filter(|c| !c.is_null()) {
            return RpcError::invalid_params(format!("invalid cursor {cursor}: mcpgate lists every task in one page"))
                .into();
        }
        let cur = self.current();
        let servers: Vec<Arc<Server>> = visible(&cur, session)
            .into_iter()
            .filter(|s| {
                session.downstream_if_open(s.name()).is_some_and(|d| d.capabilities["tasks"].get("list").is_some())
            })
            .collect();
        let found: Mutex<Vec<(usize, Vec<Value>)>> = Mutex::new(Vec::new());
        threads::for_each_parallel("fanout", &servers, servers.len(), |server| {
            match self.exchange(session, server, |d| fetch_pages(d, "tasks/list", "tasks")) {
                Ok(mut tasks) => {
                    for task in &mut tasks {
                        session.tasks_from(server.name(), task);
                    }
                    found.lock().push((cur.rank(server.name()), tasks));
                }
                Err(e) => crate::limited!(warn, "server `{}`: tasks/list failed: {}", server.name(), e.message),
            }
        });
        let mut found = found.into_inner();
        found.sort_by_key(|(rank, _)| *rank);
        Outcome::Result(json!({ "tasks": found.into_iter().flat_map(|(_, tasks)| tasks).collect::<Vec<_>>() }))
    }

    /// `tools/call` and `prompts/get`: the owner of `params.name`, and the
    /// params with the server's own name.
    fn by_name(
        &self,
        session: &Arc<Session>,
        kind: ListKind,
        message: &Message,
        mut params: Params,
    ) -> Result<(Arc<Server>, Params), RpcError> {
        let Some(name) = params.str("name") else {
            return Err(RpcError::invalid_params(format!("{} needs `name` (a string)", message.method())));
        };
        let (server, original) = self.owner(session, kind, &name)?;
        params.set("name", &Value::String(original));
        Ok((server, params))
    }

    fn by_uri(
        &self,
        session: &Arc<Session>,
        message: &Message,
        params: Params,
    ) -> Result<(Arc<Server>, Params), RpcError> {
        let Some(uri) = params.str("uri") else {
            return Err(RpcError::invalid_params(format!("{} needs `uri` (a string)", message.method())));
        };
        let server = self.resource_owner(session, &uri)?;
        Ok((server, params))
    }

    fn completion(
        &self,
        session: &Arc<Session>,
        message: &Message,
        mut params: Params,
    ) -> Result<(Arc<Server>, Params), RpcError> {
        let reference = params.value("ref").unwrap_or(Value::Null);
        match (reference["type"].as_str(), reference["name"].as_str(), reference["uri"].as_str()) {
            (Some("ref/prompt"), Some(name), _) => {
                let (server, original) = self.owner(session, ListKind::Prompts, name)?;
                params.set("ref", &json!({ "type": "ref/prompt", "name": original }));
                Ok((server, params))
            }
            (Some("ref/resource"), _, Some(uri)) => Ok((self.resource_owner(session, uri)?, params)),
            _ => Err(RpcError::invalid_params(format!(
                "{} needs `ref` with type ref/prompt and a name, or ref/resource and a uri",
                message.method()
            ))),
        }
    }

    /// The server that lists `exposed` in the merged list of `kind`. A name
    /// not found in a cached list is looked up once more in a fresh one.
    fn owner(&self, session: &Arc<Session>, kind: ListKind, exposed: &str) -> Result<(Arc<Server>, String), RpcError> {
        let cached = session.cached_list(kind);
        for list in [cached, None] {
            let list = match list {
                Some(list) => list,
                None => self.build_list(session, kind),
            };
            if let Some(entry) = list.find(exposed) {
                let server = self
                    .current()
                    .server(&entry.server)
                    .cloned()
                    .ok_or_else(|| RpcError::server(&entry.server, "no longer configured"))?;
                return Ok((server, entry.original.clone()));
            }
        }
        let what = match kind {
            ListKind::Tools => "tool",
            _ => "prompt",
        };
        if let Some(hidden) = self.hidden_by_filter(session, kind, exposed) {
            return Err(RpcError::invalid_params(hidden));
        }
        let mut message = format!("unknown {what} `{exposed}`");
        let failed = session.failed_servers();
        if !failed.is_empty() {
            let names: Vec<String> = failed.iter().map(|(n, e)| format!("`{n}` ({e})")).collect();
            message.push_str(&format!("; unavailable servers: {}", names.join(", ")));
        }
        Err(RpcError::invalid_params(message))
    }

    /// Why `exposed` names nothing: a server whose `tools`/`prompts` filter
    /// hides the name it would stand for, if any.
    fn hidden_by_filter(&self, session: &Session, kind: ListKind, exposed: &str) -> Option<String> {
        let cur = self.current();
        let key = if kind == ListKind::Tools { "tools" } else { "prompts" };
        visible(&cur, session).iter().find_map(|server| {
            let c = &server.config;
            let original =
                if c.prefix.is_empty() { exposed } else { exposed.strip_prefix(&naming(c, &cur.config).raw(""))? };
            (!filter_for(c, kind).admits(original)).then(|| {
                format!(
                    "{} `{exposed}` is not exposed by this gateway: mcpServers.{}.{key} hides `{original}`",
                    &key[..key.len() - 1],
                    server.name()
                )
            })
        })
    }

    /// The server of a resource: the one listing it, else the one whose
    /// template matches, else the only server offering resources.
    fn resource_owner(&self, session: &Arc<Session>, uri: &str) -> Result<Arc<Server>, RpcError> {
        let resources =
            session.cached_list(ListKind::Resources).unwrap_or_else(|| self.build_list(session, ListKind::Resources));
        let mut owner = resources.find(uri).map(|e| e.server.clone());
        if owner.is_none() {
            let templates = session
                .cached_list(ListKind::Templates)
                .unwrap_or_else(|| self.build_list(session, ListKind::Templates));
            owner = templates
                .entries
                .iter()
                .find(|e| catalog::template_matches(&e.original, uri))
                .map(|e| e.server.clone());
        }
        if owner.is_none() {
            let offering: Vec<Arc<Downstream>> =
                session.open_downstreams().into_iter().filter(|d| d.offers("resources")).collect();
            if let [only] = offering.as_slice() {
                owner = Some(only.server.name().to_string());
            }
        }
        let name = owner.ok_or_else(|| RpcError::invalid_params(format!("no server lists resource `{uri}`")))?;
        let server =
            self.current().server(&name).cloned().ok_or_else(|| RpcError::server(&name, "no longer configured"))?;
        if !server.config.resources.admits(uri) {
            return Err(RpcError::invalid_params(format!(
                "resource `{uri}` is not exposed by this gateway: mcpServers.{name}.resources hides it"
            )));
        }
        Ok(server)
    }

    /// Sends a request to `server` with params rewritten for it; what the
    /// server sends before its answer goes to the client on `sink`.
    fn forward(
        &self,
        session: &Arc<Session>,
        server: &Arc<Server>,
        message: &Message,
        params: &Params,
        events: &mut PostStream<'_>,
    ) -> Outcome {
        let client_id = message.id.clone().unwrap_or(Value::Null);
        let params = params.to_raw();
        let mut cancelled = false;
        let result = self.exchange(session, server, |downstream| {
            let id = downstream.next_id();
            let flight = downstream.flight();
            session.start_call(&client_id, server.name(), &id, flight.clone());
            let mut on_message = |arrival| match arrival {
                // Mirrored: the client's answer becomes a stream now, its head sent.
                Arrival::Streaming => events.start(),
                Arrival::Message(m) => {
                    if let Some(bytes) = session.to_client(server, m) {
                        events.send(bytes);
                    }
                }
            };
            let result = downstream.call(&id, message.method(), Some(&params), &mut on_message, &flight);
            // Cancelled, or its client ended the session: over, without a response.
            cancelled = match &result {
                Err(DownstreamError::Cancelled) => true,
                Err(DownstreamError::Closed) => session.deleted_by_client(),
                _ => false,
            };
            result
        });
        session.end_call(&client_id);
        match result {
            Ok(response) => Outcome::Forwarded(response),
            Err(_) if cancelled => Outcome::Cancelled,
            Err(e) => e.into(),
        }
    }

    /// Runs `exchange` on the session's downstream session with `server`,
    /// opening it if needed. If the server answers 404 (it no longer knows
    /// that session, e.g. it restarted), the downstream session is closed,
    /// opened anew, and `exchange` runs once more: the client never sees a
    /// half-alive session.
    fn exchange<T>(
        &self,
        session: &Session,
        server: &Arc<Server>,
        mut exchange: impl FnMut(&Downstream) -> Result<T, DownstreamError>,
    ) -> Result<T, RpcError> {
        let downstream = session.downstream(server, self.current().config.open_retry)?;
        let result = match exchange(&downstream) {
            Err(DownstreamError::SessionGone) => {
                crate::limited!(
                    warn,
                    "server `{}` no longer knows session {}'s downstream session: opening a new one and retrying once",
                    server.name(),
                    session::short(&session.id)
                );
                let downstream = session.reopen(server, &downstream)?;
                exchange(&downstream)
            }
            other => other,
        };
        result.map_err(|e| {
            if self.stopping.load(std::sync::atomic::Ordering::Acquire) {
                RpcError::server(server.name(), "mcpgate is shutting down; the request was cut short")
            } else {
                RpcError::server(server.name(), server.redact(&e.to_string()))
            }
        })
    }

    fn list_page(&self, session: &Arc<Session>, kind: ListKind, message: &Message) -> Outcome {
        let params = match message.params_object() {
            Ok(p) => p,
            Err(e) => return e.into(),
        };
        let cursor = match params.get("cursor") {
            None | Some(Value::Null) => None,
            Some(Value::String(c)) => Some(c.as_str()),
            Some(_) => return RpcError::invalid_params("`cursor` must be a string").into(),
        };
        let list = match (cursor, session.cached_list(kind)) {
            // A first page always reflects the servers as they are now.
            (None, _) | (Some(_), None) => self.build_list(session, kind),
            (Some(_), Some(list)) => list,
        };
        match list.page(cursor, self.current().config.page_size) {
            Ok(page) => Outcome::Result(page),
            Err(e) => e.into(),
        }
    }

    /// Lists `kind` on every server in parallel (opening downstream sessions
    /// as needed), merges, caches and returns it. Servers that fail are left
    /// out and their error recorded.
    fn build_list(&self, session: &Arc<Session>, kind: ListKind) -> Arc<List> {
        let cur = self.current();
        let servers = visible(&cur, session);
        let found: Mutex<Vec<(usize, ServerItems)>> = Mutex::new(Vec::new());
        threads::for_each_parallel("fanout", &servers, servers.len(), |server| {
            let Ok(d) = session.downstream(server, cur.config.open_retry) else { return };
            if !d.offers(kind.capability()) {
                return;
            }
            match self.exchange(session, server, |d| fetch_all(d, kind)) {
                Ok(items) => found.lock().push((
                    cur.rank(server.name()),
                    ServerItems {
                        server: server.name().to_string(),
                        naming: naming(&server.config, &cur.config),
                        filter: filter_for(&server.config, kind).clone(),
                        items,
                    },
                )),
                Err(e) => crate::limited!(
                    warn,
                    "server `{}`: {} failed: {}; its items are left out of this list",
                    server.name(),
                    kind.method(),
                    e.message
                ),
            }
        });
        let mut found = found.into_inner();
        found.sort_by_key(|(rank, _)| *rank);
        let (list, collisions, renamed) = List::merge(kind, found.into_iter().map(|(_, items)| items).collect());
        if !renamed.is_empty() {
            let mut kept = self.renamed.lock();
            for entry in renamed {
                if !kept.contains(&entry) {
                    if kept.len() == MAX_RENAMED {
                        kept.remove(0);
                    }
                    kept.push(entry);
                }
            }
        }
        if !collisions.is_empty() {
            let mut kept = self.collisions.lock();
            for line in collisions {
                if !kept.contains(&line) {
                    log::warn!("{line}");
                    if kept.len() == MAX_COLLISIONS {
                        kept.remove(0);
                    }
                    kept.push(line);
                }
            }
        }
        let list = Arc::new(list);
        session.cache_list(list.clone());
        list
    }

    fn set_level(&self, session: &Arc<Session>, message: &Message) -> Outcome {
        session.remember_log_level(message.params.as_deref());
        let targets: Vec<Arc<Downstream>> =
            session.open_downstreams().into_iter().filter(|d| d.offers("logging")).collect();
        threads::for_each_parallel("fanout", &targets, targets.len(), |d| {
            let id = d.next_id();
            match d.request(&id, "logging/setLevel", message.params.as_deref(), &mut |_| {}) {
                Ok(m) if m.error.is_some() => {
                    crate::limited!(warn, "server `{}` refused logging/setLevel", d.server.name())
                }
                Ok(_) => {}
                Err(e) => {
                    crate::limited!(
                        warn,
                        "server `{}`: logging/setLevel: {}",
                        d.server.name(),
                        d.server.redact(&e.to_string())
                    )
                }
            }
        });
        Outcome::Result(json!({}))
    }

    fn client_notification(&self, session: &Arc<Session>, message: &Message) {
        match message.method() {
            "notifications/cancelled" => {
                let Ok(params) = message.params_object() else { return };
                let Some(request_id) = params.get("requestId") else { return };
                let Some((downstream, id)) = session.cancel(request_id) else {
                    log::debug!("session {}: cancel of a request not in flight ignored", session::short(&session.id));
                    return;
                };
                let mut params = params.clone();
                params.insert("requestId".into(), id);
                if let Err(e) =
                    downstream.notify("notifications/cancelled", Some(&jsonrpc::raw(&Value::Object(params))))
                {
                    crate::limited!(warn, "server `{}`: forwarding a cancel failed: {e}", downstream.server.name());
                }
            }
            "notifications/roots/list_changed" => {
                for d in session.open_downstreams() {
                    if let Err(e) = d.notify("notifications/roots/list_changed", None) {
                        crate::limited!(
                            warn,
                            "server `{}`: forwarding roots/list_changed failed: {e}",
                            d.server.name()
                        );
                    }
                }
            }
            "notifications/initialized" => {}
            other => log::debug!("client notification `{other}` has no server to go to; ignored"),
        }
    }

    /// The client answered a request a server made: send it to that server.
    fn client_answer(&self, session: &Arc<Session>, message: &Message) {
        let Some((downstream, body)) = session.answer_from_client(message) else {
            log::debug!("session {}: an answer to an unknown request ignored", session::short(&session.id));
            return;
        };
        if let Err(e) = downstream.send(&body) {
            crate::limited!(warn, "server `{}`: forwarding the client's answer failed: {e}", downstream.server.name());
        }
    }

    fn get(&self, req: &HttpRequest, access: &Access) -> HttpReply {
        if !accepts(req.header("accept").unwrap_or(""), "text/event-stream") {
            return HttpReply::bad(406, "GET /mcp needs Accept: text/event-stream");
        }
        if !req.http11 {
            return HttpReply::bad(400, "the GET stream needs HTTP/1.1");
        }
        let session = match self.session_of(req, None, access) {
            Ok(s) => s,
            Err(reply) => return reply,
        };
        match session.attach_stream(req.header("last-event-id"), self.current().config.max_streams_per_session) {
            Ok(attached) => HttpReply::stream(StreamReply {
                first: attached.first,
                rx: attached.rx,
                keepalive: self.current().config.keepalive,
                on_end: Box::new(move || {
                    if let Some(id) = attached.id {
                        session.detach_stream(id);
                    }
                }),
            }),
            Err(e) => HttpReply::error(409, &Value::Null, &e),
        }
    }

    fn delete(&self, req: &HttpRequest, access: &Access) -> HttpReply {
        let Some(id) = req.header(SESSION_HEADER) else {
            return HttpReply::bad(400, "DELETE /mcp needs the Mcp-Session-Id header");
        };
        match self.sessions.remove_if(id, |session| session.admits(access)) {
            Some(session) => {
                self.close(vec![session], CloseReason::ClientDelete);
                HttpReply::empty(200)
            }
            None => HttpReply::error(
                404,
                &Value::Null,
                &RpcError::new(jsonrpc::INVALID_REQUEST, "unknown or ended session"),
            ),
        }
    }
}

/// The answer to one `POST`: JSON, unless a message for the client comes
/// first; then an SSE stream that opens with a priming event, whose events
/// are kept so a client that lost the connection can resume it with `GET`
/// and `Last-Event-ID`.
struct PostStream<'a> {
    session: &'a Session,
    sink: &'a mut dyn EventSink,
    stream: Option<u64>,
}

impl PostStream<'_> {
    fn send(&mut self, message: Vec<u8>) {
        let Some(stream) = self.start_stream() else {
            // This answer cannot stream (HTTP/1.0, a batch): the GET stream carries it.
            self.session.push_to_stream(message);
            return;
        };
        let bytes = self.session.post_event(stream, &message, false);
        let _ = self.sink.event(&bytes);
    }

    /// Makes the answer an SSE stream now, if it can be one: its head goes
    /// out (with the priming event, or a comment).
    fn start(&mut self) {
        if self.stream.is_none()
            && let Some(stream) = self.start_stream()
            && self.session.priming(stream).is_none()
        {
            let _ = self.sink.event(b": mcpgate: the server is working on it\n\n");
        }
    }

    /// The stream of this answer, opened on first use; `None` when the
    /// answer cannot stream.
    fn start_stream(&mut self) -> Option<u64> {
        if let Some(stream) = self.stream {
            return Some(stream);
        }
        if !self.sink.can_stream() {
            return None;
        }
        let stream = self.session.open_post_stream();
        if let Some(priming) = self.session.priming(stream) {
            // A client that went away can resume from the replay log.
            let _ = self.sink.event(&priming);
        }
        self.stream = Some(stream);
        Some(stream)
    }

    /// The answer's end: the response, or (cancelled) an SSE answer that
    /// ends without one.
    fn finish(self, answer: Option<Vec<u8>>) -> HttpReply {
        match (self.stream, answer) {
            (None, Some(answer)) => HttpReply::json(200, answer),
            (Some(stream), Some(answer)) => HttpReply::sse(self.session.post_event(stream, &answer, true)),
            (Some(stream), None) => {
                self.session.end_post_stream(stream);
                HttpReply::sse(Vec::new())
            }
            (None, None) => HttpReply::sse(Vec::new()),
        }
    }
}

/// How `server`'s tools and prompts are named for clients.
fn naming(server: &crate::config::ServerConfig, config: &Config) -> catalog::Naming {
    catalog::Naming { prefix: server.prefix.clone(), separator: server.separator.clone(), max: config.tool_name_max }
}

/// `server`'s filter for lists of `kind`.
fn filter_for(server: &crate::config::ServerConfig, kind: ListKind) -> &catalog::Filter {
    match kind {
        ListKind::Tools => &server.tools,
        ListKind::Prompts => &server.prompts,
        ListKind::Resources | ListKind::Templates => &server.resources,
    }
}

/// The servers a session may reach, in configuration order.
fn visible(current: &Current, session: &Session) -> Vec<Arc<Server>> {
    current.servers.iter().filter(|s| session.allows(s.name())).cloned().collect()
}

fn new_server(config: &crate::config::ServerConfig, all: &Config, context: &Context) -> Arc<Server> {
    Arc::new(Server::new(config.clone(), Limits::from_config(all), all.calls_per_server, context))
}

/// 429 for a session with `max_requests_per_session` requests in flight.
fn too_busy(session: &Session) -> HttpReply {
    crate::limited!(warn, "session {}: too many requests in flight; one refused with 429", session::short(&session.id));
    let e = RpcError::new(
        jsonrpc::INVALID_REQUEST,
        "this session has too many requests in flight (max_requests_per_session); retry later",
    );
    HttpReply::error(429, &Value::Null, &e).header("Retry-After", "1")
}

/// Every page of one server's list.
fn fetch_all(d: &Downstream, kind: ListKind) -> Result<Vec<Value>, DownstreamError> {
    fetch_pages(d, kind.method(), kind.field())
}

/// Every page of a paginated `method`, the items of `field` of each.
fn fetch_pages(d: &Downstream, method: &str, field: &str) -> Result<Vec<Value>, DownstreamError> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let params = match &cursor {
            Some(c) => json!({ "cursor": c }),
            None => json!({}),
        };
        let id = d.next_id();
        let response = d.request(&id, method, Some(&jsonrpc::raw(&params)), &mut |_| {})?;
        if let Some(error) = &response.error {
            return Err(DownstreamError::Protocol(format!("{method} answered an error: {}", error.get())));
        }
        let result: Value =
            response.result.as_ref().and_then(|r| serde_json::from_str(r.get()).ok()).unwrap_or(Value::Null);
        match result.get(field) {
            Some(Value::Array(page)) => items.extend(page.iter().cloned()),
            _ => return Err(DownstreamError::Protocol(format!("{method} result has no `{field}` array"))),
        }
        match result.get("nextCursor").and_then(Value::as_str) {
            Some(next) if cursor.as_deref() != Some(next) => cursor = Some(next.to_string()),
            _ => return Ok(items),
        }
    }
    crate::limited!(
        warn,
        "server `{}`: {method} has more than {MAX_PAGES} pages; the rest is left out",
        d.server.name()
    );
    Ok(items)
}

/// A server's answer with its task ids rewritten to the client's.
fn tasks_from(session: &Session, server: &Server, mut answer: Message) -> Message {
    if let Some(result) = answer.result.as_deref()
        && let Ok(mut value) = serde_json::from_str::<Value>(result.get())
    {
        session.tasks_from(server.name(), &mut value);
        answer.result = Some(jsonrpc::raw(&value));
    }
    answer
}

/// The response to send, if any.
fn answer_bytes(id: &Value, outcome: Outcome) -> Option<Vec<u8>> {
    Some(match outcome {
        Outcome::Cancelled => return None,
        Outcome::Result(value) => jsonrpc::result(id, &jsonrpc::raw(&value)),
        Outcome::Error(e) => jsonrpc::error(id, &e),
        Outcome::Forwarded(m) => match (&m.result, &m.error) {
            (Some(result), _) => jsonrpc::result(id, result),
            (None, Some(error)) => jsonrpc::raw_error(id, error),
            (None, None) => {
                jsonrpc::error(id, &RpcError::internal("the server's response had neither result nor error"))
            }
        },
    })
}

fn instructions(opened: &[Arc<Downstream>]) -> Option<String> {
    let parts: Vec<String> = opened
        .iter()
        .filter_map(|d| {
            d.instructions
                .as_ref()
                .filter(|t| !t.trim().is_empty())
                .map(|t| format!("## {}\n{}", d.server.name(), t.trim()))
        })
        .collect();
    if parts.is_empty() { None } else { Some(parts.join("\n\n")) }
}

/// Whether an `Accept` header admits `mime` (directly or by a wildcard).
fn accepts(accept: &str, mime: &str) -> bool {
    let major = mime.split('/').next().unwrap_or("");
    accept.split(',').any(|part| {
        let range = part.split(';').next().unwrap_or("").trim();
        range.eq_ignore_ascii_case(mime)
            || range == "*/*"
            || range.strip_suffix("/*").is_some_and(|m| m.eq_ignore_ascii_case(major))
    })
}

/// A session id: 128 bits from the OS random source, as 32 hex digits.
fn new_session_id() -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    crate::runtime::sys::random(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_header_matching() {
        assert!(accepts("application/json, text/event-stream", "text/event-stream"));
        assert!(accepts("text/event-stream;q=0.9, application/json", "application/json"));
        assert!(accepts("*/*", "application/json"));
        assert!(accepts("text/*", "text/event-stream"));
        assert!(!accepts("application/json", "text/event-stream"));
        assert!(!accepts("", "application/json"));
    }

    #[test]
    fn session_ids_are_128_bit_visible_ascii_and_distinct() {
        let a = new_session_id().unwrap();
        let b = new_session_id().unwrap();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| (0x21..=0x7e).contains(&c)));
        assert_ne!(a, b);
    }
}
