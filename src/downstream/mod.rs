//! The client side: one [`Server`] per configured MCP server (its limits,
//! lanes and health), and the [`Downstream`] sessions opened on it, one per
//! client session (or one shared by all, for a shared stdio server).
//!
//! A transport is one folder behind two traits: [`Connector`] for what it
//! keeps per server, [`Link`] per downstream session. Streamable HTTP, in
//! either era (`http/`: the session era's `link.rs` with its `GET` stream's
//! `reader.rs`, the stateless 2026-07-28 era's `stateless.rs`), the old
//! HTTP+SSE (`sse/`), or a child process spoken to over stdio (`stdio/`).
//! This module names none of them: `connect.rs`, above them, picks one for
//! a configured server ([`Server::new`]). Sessions, lists, routing, the
//! status page and the close path see only [`Server`] and [`Downstream`].
//! [`close_all`] is the only way a downstream session ends.
//!
//! The servers, their sessions and the two traits stay in this one file:
//! each names the others (a server opens sessions through its connector,
//! which gives each session's link its server), so split they would import
//! each other.

use std::borrow::Cow;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::config::{Config, ServerConfig};
use crate::limited;
use crate::protocol::jsonrpc::{self, Message, Params};
use crate::protocol::versions;
use crate::runtime::state::Journal;
pub(crate) use crate::runtime::state::SavedDownstream;
use crate::stats::{Gauge, ServerStats, Stats};

pub(crate) mod challenge;
pub(crate) mod children;
mod connect;
mod correlate;
pub(crate) mod deletes;
mod error;
pub(crate) mod flight;
pub(crate) mod http;
pub(crate) mod oauth;
pub(crate) mod resolver;
mod spans;
mod sse;
mod stdio;
#[cfg(feature = "tls")]
pub(crate) mod tls;
/// How mcpgate looks up servers' names (no thread per lookup); the
/// benchmark's bare relay connects the same way.
pub use resolver::Lookup;

pub(crate) use children::Children;
pub(crate) use deletes::Deletes;
pub(crate) use error::{DownstreamError, SignIn};
pub(crate) use flight::{Flight, LaneError, Lanes, Stop};

/// What a server sends while it answers a request, before the response.
pub(crate) enum Arrival {
    /// Its answer is a stream (HTTP's `text/event-stream`): messages may
    /// come before the response, and the response may take long.
    Streaming,
    /// A message about the request: progress, a log message, a request to the client.
    Message(Message),
}

/// Where a downstream session's unsolicited messages go: the client session
/// that owns it.
pub(crate) trait Inbox: Send + Sync {
    /// A message the server sent on its `GET` stream.
    fn deliver(&self, server: &Arc<Server>, message: Message);
    /// The server answered 404 for the stream of downstream session
    /// `session_id`: it no longer knows it (it restarted); or the stream of
    /// an HTTP+SSE session, which is the session, ended.
    fn lost(&self, server: &Arc<Server>, session_id: Option<&str>);
    /// A server this session's lists left out while its process started
    /// (see [`Server::warm`]) is ready: what it lists is there now.
    fn started(&self, server: &Arc<Server>);
}

/// Who opens a downstream session: the client session, its client and its user.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Opener<'a> {
    /// The client session's id, for the state file ("" when none).
    pub(crate) session: &'a str,
    /// Its client's name (`clientInfo.name`), to say who holds a process.
    pub(crate) client: &'a str,
    /// Its user: a token's or an OAuth subject's digest; `None` without `auth`.
    pub(crate) principal: Option<[u8; 32]>,
    /// Its user whatever its token's scopes: whose tokens a server with
    /// `oauth` gets.
    pub(crate) user: Option<[u8; 32]>,
}

/// Whether what a user's sessions share of a server (a stdio server's
/// process) is ready, after [`Server::warm`] waited for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Readiness {
    /// Ready, or nothing to wait for: opening a session finds out the rest
    /// (a failure to start included).
    Ready,
    /// Still starting.
    Starting,
}

/// What becomes of a server's downstream sessions when mcpgate starts again
/// with its state file ([`Server::after_restart`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterRestart {
    /// Taken over by the session id the state file kept, or closed by it
    /// (a Streamable HTTP session, which outlives the process at its server).
    Resumed,
    /// Ended with the process that opened them (an HTTP+SSE stream): the
    /// state file keeps where, and a restored client session opens one anew.
    OpenedAnew,
    /// Not kept: a child process, which ends with mcpgate and starts when needed.
    NotKept,
}

/// Last success and failure of one server, for the status page.
#[derive(Debug, Default, Clone)]
pub(crate) struct Health {
    pub(crate) last_error: Option<String>,
    pub(crate) last_error_at: Option<SystemTime>,
    pub(crate) last_ok_at: Option<SystemTime>,
    /// Its last failure said it is down (see [`DownstreamError::says_down`]),
    /// and nothing succeeded since.
    pub(crate) down: bool,
    /// It did not answer when a session opened on it (a black hole): new
    /// sessions skip it, without waiting, until a probe finds it answering
    /// or a request succeeds. Since when, and why.
    pub(crate) silent: Option<(SystemTime, String)>,
    /// A probe of it runs now (at most one).
    probing: bool,
}

/// Timeouts and limits for talking to servers, from the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub(crate) connect: Duration,
    pub(crate) request: Duration,
    pub(crate) delete: Duration,
    /// What a stdio server's process has to start and answer `initialize`.
    pub(crate) start: Duration,
    pub(crate) max_message: usize,
}

impl Limits {
    pub fn from_config(config: &Config) -> Limits {
        Limits {
            connect: config.connect_timeout,
            request: config.request_timeout,
            delete: config.delete_timeout,
            start: config.start_timeout,
            max_message: config.max_message_bytes,
        }
    }

    /// The most one open of a downstream session may take: connecting and
    /// answering `initialize`, or a process starting.
    pub(crate) fn open(&self) -> Duration {
        (self.connect + self.request).max(self.start)
    }
}

/// What a downstream session does with its server, whatever carries it:
/// the one seam every transport implements. A link is given what it needs
/// when it is opened (its [`Server`], by the transport that opens it; the
/// protocol version, by [`Link::agreed`] once `initialize` answered), and
/// reads nothing of the [`Downstream`] that holds it.
pub(crate) trait Link: Send + Sync {
    /// The server's id for this session (HTTP's `Mcp-Session-Id`), if any.
    fn session_id(&self) -> Option<&str>;
    /// Whether the server holds a session for it: one to open and close,
    /// counted among the downstream sessions (not so in the 2026-07-28 era).
    fn holds_session(&self) -> bool {
        true
    }
    /// Whether the session can outlive this process at its server, so that
    /// the state file keeps it to resume or `DELETE` after a restart. An
    /// HTTP+SSE session cannot: it is its stream, which ends with the
    /// process (as a child process does).
    fn survives_restart(&self) -> bool {
        true
    }
    /// The protocol version its `initialize` agreed on (or the state file
    /// kept; the newest when the answer was refused), told once, before
    /// the session is shared: what its later messages say they speak.
    fn agreed(&mut self, _version: Cow<'static, str>) {}
    /// Sends the request `method` with `params` (as id `id`, the members
    /// read once, where the request came in) and returns
    /// the server's response; what the server sends about it meanwhile (progress, log
    /// messages, requests to the client) goes to `on_message`. Ends early,
    /// with any error, when `flight` is stopped: the link arms it with what
    /// wakes the waiting thread.
    fn round_trip(
        &self,
        id: &Value,
        method: &str,
        params: Option<&Params>,
        on_message: &mut dyn FnMut(Arrival),
        flight: &Arc<Flight>,
    ) -> Result<Message, DownstreamError>;
    /// Sends a notification, or the answer to a request the server made.
    fn send(&self, body: &[u8]) -> Result<(), DownstreamError>;
    /// Starts delivering what the server sends unasked to `inbox`.
    fn listen(&self, inbox: Weak<dyn Inbox>) -> Result<(), DownstreamError>;
    /// The close path's first step: stop listening, at once. Called once,
    /// as the session is marked closing.
    fn stop(&self);
    /// Its second, in parallel with other closes: end the session at the
    /// server (join the reader and `DELETE`; or let the child go and reap it).
    fn end(&self) -> Result<(), DownstreamError>;
    /// After `stop`, for a session another instance took over: let go of it
    /// here. Ended, as a close ends it, where it cannot outlive this process
    /// (a child, an HTTP+SSE stream: that instance opens its own); a
    /// Streamable HTTP session is left open at its server, which that
    /// instance goes on with.
    fn hand_over(&self) -> Result<(), DownstreamError> {
        self.end()
    }
}

/// A downstream session's link, and the server's answer to its
/// `initialize`: the server may hold the session whatever the answer was,
/// so the link is there to close it.
pub(crate) type Opened = (Box<dyn Link>, Result<Message, DownstreamError>);

/// What a server's transport does for it, whatever carries it: the seam
/// per server, as [`Link`] is per session. Each transport's folder
/// implements it (`http/`, `sse/`, `stdio/`); [`Server::new`], in
/// `connect.rs`, is the one place that picks one from the configuration.
pub(crate) trait Connector: Send + Sync {
    /// `http`, `sse` or `stdio`, for the status page.
    fn kind(&self) -> &'static str;
    /// Opens a downstream session for `opener`: sends `initialize` (`body`,
    /// the client's params) and gives back the link with the server's answer.
    fn open(&self, server: &Arc<Server>, body: &[u8], opener: &Opener) -> Result<Opened, DownstreamError>;
    /// Whether a client session opens its session with this server at its
    /// `initialize` (a connection, cheap); not a process, which starts when
    /// first needed.
    fn opens_at_initialize(&self) -> bool {
        true
    }
    /// Starts what the sessions of `principal` share of this server (a
    /// process), unless it runs, and waits for it to be ready at most
    /// `within`; still starting then, `inbox` (if any) is told when it is.
    fn warm(
        &self,
        _server: &Arc<Server>,
        _principal: Option<[u8; 32]>,
        _within: Duration,
        _inbox: Option<Weak<dyn Inbox>>,
    ) -> Readiness {
        Readiness::Ready
    }
    /// The link of a downstream session an earlier process opened on
    /// `server`, by the session id the state file kept (and its user, for a server with `oauth`); `None` when this transport's sessions
    /// end with the process that opened them (a child, an HTTP+SSE stream).
    fn resume(
        &self,
        _server: &Arc<Server>,
        _session_id: Option<String>,
        _user: Option<[u8; 32]>,
    ) -> Option<Box<dyn Link>> {
        None
    }
    /// Where the state file finds the server again after a restart: its
    /// URL; `None` for a child process, which ends with mcpgate.
    fn saved_url(&self) -> Option<&str> {
        None
    }
    /// What becomes of its sessions at a restart: by default, those the
    /// state file keeps (by [`Connector::saved_url`]) but this transport
    /// cannot [`Connector::resume`] are opened anew.
    fn after_restart(&self) -> AfterRestart {
        if self.saved_url().is_some() { AfterRestart::OpenedAnew } else { AfterRestart::NotKept }
    }
    /// Whether its servers may answer `initialize` with 2024-11-05, the old
    /// HTTP+SSE transport's version.
    fn answers_2024_11_05(&self) -> bool {
        false
    }
    /// The server's protocol era, once known: `session` or `2026-07-28`.
    fn era(&self) -> Option<&'static str> {
        Some("session")
    }
    /// Whether the server speaks 2026-07-28, asking it once if nobody did
    /// yet; `None` when it cannot be asked now.
    fn speaks_2026(&self, _server: &Server) -> Option<bool> {
        Some(false)
    }
    /// Its processes, for the status page, when it is a program mcpgate starts.
    fn processes(&self) -> Option<Processes> {
        None
    }
    /// Whether its server can be asked, cheaply and without a session,
    /// whether it answers at all ([`Connector::answers`]): only such a
    /// server is skipped by new sessions after it did not answer one.
    fn probes(&self) -> bool {
        false
    }
    /// Whether the server answers at all now, within a bound (the probe).
    fn answers(&self) -> bool {
        true
    }
    /// A reload removed or changed the server: what it holds for all its
    /// sessions stops once unused (a shared child, a standing listen).
    fn retire(&self) {}
    /// mcpgate is stopping: unblock what is in flight, stop what it holds.
    fn shutdown(&self);
    /// Stops what nobody has used for `idle` (a shared child); the reaper's job.
    fn stop_idle(&self, _idle: Duration) {}
    /// Closes the idle connections to the server: every one when `unused`
    /// (no session uses it), else those its end closed; the reaper's job.
    fn close_idle(&self, _unused: bool) {}
}

/// The processes of one stdio server, for the status page.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub(crate) struct Processes {
    /// Shared processes started and not yet ready (no answer to `initialize` yet).
    pub(crate) starting: u64,
    pub(crate) live: u64,
    pub(crate) spawned: u64,
    /// Ended on their own (a crash, or an exit mcpgate did not ask for).
    pub(crate) exited: u64,
    /// Needed SIGTERM or SIGKILL to end when mcpgate stopped them.
    pub(crate) killed: u64,
    /// Started again after one of them ended on its own.
    pub(crate) restarts: u64,
}

/// What every server shares: the counters, the state file, the children,
/// the `DELETE`s still owed.
#[derive(Clone)]
pub struct Context {
    pub(crate) stats: Arc<Stats>,
    pub(crate) journal: Arc<Journal>,
    pub(crate) children: Arc<Children>,
    pub(crate) deletes: Arc<Deletes>,
    /// Users' tokens at servers with `oauth`.
    pub(crate) oauth: Arc<oauth::Authorizer>,
}

/// One configured server, shared by every client session.
pub struct Server {
    pub(crate) config: ServerConfig,
    /// The one copy of its limits: its transport shares it.
    pub(crate) limits: Arc<Limits>,
    /// Set when a reload removed or changed this server: sessions opened on
    /// it after that close themselves.
    retired: AtomicBool,
    /// How it is reached: the transport's side of it.
    connector: Box<dyn Connector>,
    /// Requests hold one of `calls_per_server` lanes while they run.
    pub(crate) lanes: Lanes,
    pub(crate) live_sessions: Gauge,
    /// Where opens and closes are written ahead (the state file).
    pub(crate) journal: Arc<Journal>,
    /// The `DELETE`s a fault lost, tried again (shared by every server).
    deletes: Arc<Deletes>,
    /// Guards the last error and success times; held only to copy them.
    health: Mutex<Health>,
    pub(crate) stats: Arc<Stats>,
    /// This server's requests, errors by kind, and latency.
    pub(crate) metrics: ServerStats,
    /// Calls of its tools, and those that failed, by tool.
    pub(crate) tools: crate::stats::Tally,
    /// Its lists, held once for every session that sees the same of them.
    pub(crate) lists: crate::catalog::ServerLists,
    /// The next request id of its downstream sessions (see [`Downstream::next_id`]).
    next_id: AtomicU64,
    /// The server of the same name a reload put in its place, once retired:
    /// held, so that the way from an old server to the one in force stays
    /// whole for as long as someone holds the old one.
    successor: Mutex<Option<Arc<Server>>>,
    /// Guards what its last `initialize` answer said (capabilities and
    /// instructions): what a client's `initialize` offers of a server it
    /// does not open then (a process not started).
    known: Mutex<Option<Known>>,
}

/// What a server said of itself when it last answered `initialize`.
#[derive(Debug, Clone)]
pub(crate) struct Known {
    pub(crate) capabilities: Value,
    pub(crate) instructions: Option<String>,
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Server({})", self.config.name)
    }
}

impl Server {
    /// A server reached through `connector` (see [`Server::new`], which picks it).
    pub(crate) fn assemble(
        config: ServerConfig,
        limits: Arc<Limits>,
        lanes: usize,
        context: &Context,
        connector: Box<dyn Connector>,
    ) -> Server {
        Server {
            journal: context.journal.clone(),
            deletes: context.deletes.clone(),
            connector,
            lanes: Lanes::new(lanes),
            config,
            limits,
            retired: AtomicBool::new(false),
            live_sessions: Gauge::default(),
            health: Mutex::new(Health::default()),
            stats: context.stats.clone(),
            metrics: ServerStats::default(),
            tools: crate::stats::Tally::default(),
            lists: crate::catalog::ServerLists::default(),
            next_id: AtomicU64::new(1),
            successor: Mutex::new(None),
            known: Mutex::new(None),
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.config.name
    }

    /// `http`, `sse` or `stdio`, for the status page.
    pub(crate) fn transport(&self) -> &'static str {
        self.connector.kind()
    }

    /// What becomes of its downstream sessions at a restart: the restore
    /// and a peer taking over a session ask this, not the transport's name.
    pub(crate) fn after_restart(&self) -> AfterRestart {
        self.connector.after_restart()
    }

    /// The processes of a stdio server, for the status page.
    pub(crate) fn processes(&self) -> Option<Processes> {
        self.connector.processes()
    }

    pub fn retire(&self) {
        self.retired.store(true, Ordering::Release);
        self.connector.retire();
    }

    /// The protocol era of an HTTP server, once known: `session` or `2026-07-28`.
    pub(crate) fn era(&self) -> Option<&'static str> {
        self.connector.era()
    }

    /// Whether the server speaks 2026-07-28 (alone or beside the session
    /// era), asking it once if nobody did yet; `None` when it cannot be
    /// asked now. stdio servers and those of the old SSE transport speak
    /// the session era.
    pub(crate) fn speaks_2026(&self) -> Option<bool> {
        self.connector.speaks_2026(self)
    }

    pub(crate) fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// Names the server a reload put in this one's place.
    pub(crate) fn succeeded_by(&self, next: &Arc<Server>) {
        *self.successor.lock() = Some(next.clone());
    }

    /// The server in force for this one's name: itself, or (once a reload
    /// retired it) the one that replaced it, followed to the newest.
    pub(crate) fn in_force(self: &Arc<Self>) -> Arc<Server> {
        let mut server = self.clone();
        // Each reload that changed it adds one step; the steps end at the
        // server in force (the reload sets the successor before it retires).
        // Bounded far past the reloads a request lives through.
        for _ in 0..10_000 {
            let next = if server.is_retired() { server.successor.lock().clone() } else { None };
            match next {
                Some(next) => server = next,
                None => break,
            }
        }
        server
    }

    /// Unblocks every request in flight to this server, and stops its
    /// shared child, if it has one.
    pub(crate) fn shutdown(&self) {
        self.lanes.stop_all();
        self.connector.shutdown();
    }

    /// Stops a shared child nobody has used for `idle`, and closes idle
    /// connections to the server that are of no more use (all of them once
    /// no session uses it); the reaper's job. Before, they stayed open after
    /// every session ended: 13 to 21 in CLOSE_WAIT toward a killed server.
    pub(crate) fn stop_idle(&self, idle: Duration) {
        self.connector.stop_idle(idle);
        self.connector.close_idle(self.live_sessions.get() == 0);
    }

    /// See [`Connector::opens_at_initialize`].
    pub(crate) fn opens_at_initialize(&self) -> bool {
        self.connector.opens_at_initialize()
    }

    /// Starts what the sessions of `principal` share of this server (a
    /// stdio server's process) unless it runs, and waits for it at most
    /// `within`; still starting then, `inbox` is told when it is ready.
    pub(crate) fn warm(
        self: &Arc<Self>,
        principal: Option<[u8; 32]>,
        within: Duration,
        inbox: Option<Weak<dyn Inbox>>,
    ) -> Readiness {
        self.connector.warm(self, principal, within, inbox)
    }

    /// What the server said of itself when it last answered `initialize`;
    /// `None` before it ever did.
    pub(crate) fn known(&self) -> Option<Known> {
        self.known.lock().clone()
    }

    pub(crate) fn health(&self) -> Health {
        self.health.lock().clone()
    }

    /// Replaces every secret of this server in `text` with `***`.
    pub(crate) fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        for secret in &self.config.secrets {
            out = out.replace(secret.as_str(), "***");
        }
        out
    }

    /// Counts a request to this server, and its error by kind.
    fn count<T>(&self, result: &Result<T, DownstreamError>) {
        self.metrics.requests.inc();
        if let Err(e) = result {
            e.counter(&self.metrics).inc();
        }
    }

    fn record<T>(&self, result: &Result<T, DownstreamError>, opening: bool) {
        let mut health = self.health.lock();
        match result {
            Ok(_) => {
                health.last_ok_at = Some(SystemTime::now());
                health.down = false;
                health.silent = None;
            }
            // Not the server's failure; or (SessionGone) retried at once on a new
            // session, whose outcome is recorded in its turn.
            Err(
                DownstreamError::Closed
                | DownstreamError::Gone
                | DownstreamError::Cancelled
                | DownstreamError::SessionGone,
            ) => {}
            Err(e) => {
                health.last_error = Some(self.redact(&e.to_string()));
                health.last_error_at = Some(SystemTime::now());
                health.down |= e.says_down(opening);
            }
        }
    }

    /// The error of a request ended early, for this reason.
    fn stopped(&self, why: Stop) -> DownstreamError {
        match why {
            Stop::Cancelled => DownstreamError::Cancelled,
            Stop::Closing => DownstreamError::Closed,
            Stop::Silent => DownstreamError::Timeout(self.limits.request),
        }
    }

    /// Opens a downstream session: `initialize`, `notifications/initialized`,
    /// then what the server sends unasked starts reaching `inbox`.
    /// `init_params` are the client's.
    ///
    /// A server that did not answer one session's `initialize` in time is
    /// skipped by the next ones, at once, until a probe finds it answering
    /// ([`Server::probe_if_silent`]): before, each new session waited the
    /// full request timeout for it (5.2 s, then 5.1 s at 5 s).
    pub(crate) fn open(
        self: &Arc<Self>,
        opener: &Opener,
        init_params: &RawValue,
        inbox: Weak<dyn Inbox>,
    ) -> Result<Arc<Downstream>, DownstreamError> {
        if let Some((since, why)) = self.health.lock().silent.clone() {
            self.metrics.opens_skipped.inc();
            let ago = since.elapsed().unwrap_or_default().as_secs();
            return Err(DownstreamError::Connect(format!(
                "it did not answer {ago} s ago ({why}); not waited for again until it answers a probe"
            )));
        }
        let result = self.open_inner(opener, init_params, inbox);
        self.count(&result);
        self.record(&result, true);
        if let Err(e) = &result {
            if e.unanswered() && self.connector.probes() {
                self.health.lock().silent = Some((SystemTime::now(), self.redact(&e.to_string())));
            }
            limited!(
                warn,
                "server `{}`: {}: left out of this session's lists until it is retried",
                self.name(),
                self.redact(&e.to_string())
            );
        }
        result
    }

    /// Probes a server that did not answer a session, unless a probe of it
    /// runs already: on a thread of its own, so that the reaper never waits
    /// for it; it ends within the connect timeout and 5 s.
    pub(crate) fn probe_if_silent(self: &Arc<Self>) {
        {
            let mut health = self.health.lock();
            if health.silent.is_none() || health.probing {
                return;
            }
            health.probing = true;
        }
        let server = self.clone();
        let probe = move || {
            let answered = server.connector.answers();
            let mut health = server.health.lock();
            health.probing = false;
            if answered && health.silent.take().is_some() {
                log::info!("server `{}` answers again: new sessions open it", server.name());
            }
        };
        match crate::runtime::threads::spawn("fanout", "probe", probe) {
            Ok(handle) => crate::runtime::threads::join_later(handle),
            Err(_) => self.health.lock().probing = false,
        }
    }

    fn open_inner(
        self: &Arc<Self>,
        opener: &Opener,
        init_params: &RawValue,
        inbox: Weak<dyn Inbox>,
    ) -> Result<Arc<Downstream>, DownstreamError> {
        let id = Value::from(0);
        // Read for the trace context only: untraced, the text goes as it is.
        let params = crate::runtime::trace::enabled().then(|| Params::read(init_params).ok()).flatten();
        let (sent, traced) = spans::sending(self.config.url(), None, None, "initialize", &id, params.as_ref());
        let traced = traced.map(|p| p.to_raw());
        let body = jsonrpc::request(&id, "initialize", Some(traced.as_deref().unwrap_or(init_params)));
        let opened = self.connector.open(self, &body, opener);
        sent.end(&self.metrics, opened.as_ref().and_then(|(_, answer)| answer.as_ref()), |text| self.redact(text));
        let (link, answer) = opened?;
        // From here the server may hold a session: every failure must close it.
        let old_transport = self.connector.answers_2024_11_05();
        let init = answer.and_then(|m| initialize_result(&m, old_transport));
        // Refused, the session is closed as the newest version's.
        let version = init.as_ref().map_or(versions::NEWEST, |init| init.protocol_version.as_str());
        let mut downstream = Downstream::new(self.clone(), link, version, opener.session, opener.user);
        let init = match init {
            Ok(init) => init,
            Err(e) => {
                close_all(&[Arc::new(downstream)], 1);
                return Err(e);
            }
        };
        *self.known.lock() =
            Some(Known { capabilities: init.capabilities.clone(), instructions: init.instructions.clone() });
        downstream.capabilities = init.capabilities;
        downstream.instructions = init.instructions;
        let downstream = Arc::new(downstream);
        if let Err(e) = downstream.notify("notifications/initialized", None) {
            close_all(&[downstream], 1);
            return Err(e);
        }
        if let Err(e) = downstream.start_reader(inbox) {
            close_all(&[downstream], 1);
            return Err(e);
        }
        Ok(downstream)
    }

    /// A downstream session an earlier mcpgate process opened (from the
    /// state file), taken over without a word to the server: to resume (its
    /// reader starts with [`Downstream::start_reader`]; if the server forgot
    /// it, the first request gets 404 and it is opened anew), or to close.
    /// It counts as opened by this process. `None` on a server whose
    /// sessions end with the process that opened them (a child, an HTTP+SSE
    /// stream): there is nothing to take over.
    pub(crate) fn saved_downstream(self: &Arc<Self>, saved: &SavedDownstream) -> Option<Arc<Downstream>> {
        let client = saved.client.as_deref().unwrap_or_default();
        let user = saved.user.as_deref().and_then(crate::runtime::sha256::from_hex);
        let link = self.connector.resume(self, saved.session_id.clone(), user)?;
        let mut downstream = Downstream::new(self.clone(), link, &saved.protocol_version, client, user);
        downstream.capabilities = saved.capabilities.clone();
        downstream.instructions = saved.instructions.clone();
        self.known.lock().get_or_insert_with(|| Known {
            capabilities: saved.capabilities.clone(),
            instructions: saved.instructions.clone(),
        });
        self.stats.downstream_resumed.inc();
        Some(Arc::new(downstream))
    }
}

struct InitializeResult {
    protocol_version: String,
    capabilities: Value,
    instructions: Option<String>,
}

/// The server's answer to `initialize`; `old_transport`: of an HTTP+SSE
/// server, which may answer that transport's version, 2024-11-05.
fn initialize_result(message: &Message, old_transport: bool) -> Result<InitializeResult, DownstreamError> {
    if let Some(error) = &message.error {
        return Err(DownstreamError::Refused(error.get().to_string()));
    }
    let result: Value = message
        .result
        .as_ref()
        .and_then(|r| serde_json::from_str(r.get()).ok())
        .ok_or_else(|| DownstreamError::Protocol("initialize result is not JSON".into()))?;
    let version = result["protocolVersion"].as_str().unwrap_or_default();
    if !versions::server_may_answer(version, old_transport) && version != crate::protocol::stateless::VERSION {
        return Err(DownstreamError::Refused(format!("protocol version `{version}` is not one mcpgate speaks")));
    }
    Ok(InitializeResult {
        protocol_version: version.to_string(),
        capabilities: result.get("capabilities").cloned().unwrap_or(Value::Object(Default::default())),
        instructions: result["instructions"].as_str().map(str::to_string),
    })
}

/// One downstream session: a client session's session with one server.
pub struct Downstream {
    pub server: Arc<Server>,
    link: Box<dyn Link>,
    /// The client session it belongs to, for the state file ("" when none does).
    client: String,
    /// Whose tokens it sends to a server with `oauth`.
    user: Option<[u8; 32]>,
    pub(crate) protocol_version: String,
    pub(crate) capabilities: Value,
    pub(crate) instructions: Option<String>,
    /// Set once, by the close path; later exchanges fail with `Gone`.
    closing: AtomicBool,
    /// Requests using it now: a reload lets them finish before it closes it.
    busy: AtomicUsize,
}

impl fmt::Debug for Downstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Downstream({})", self.server.name())
    }
}

impl Downstream {
    /// A session of `server` on `link`, which speaks `version`.
    fn new(
        server: Arc<Server>,
        mut link: Box<dyn Link>,
        version: &str,
        client: &str,
        user: Option<[u8; 32]>,
    ) -> Downstream {
        link.agreed(versions::known(version).map_or_else(|| Cow::Owned(version.to_string()), Cow::Borrowed));
        if link.holds_session() {
            server.stats.downstream_opened.inc();
            server.stats.downstream_live.inc();
        }
        server.live_sessions.inc();
        Downstream {
            server,
            link,
            client: client.to_string(),
            user,
            protocol_version: version.to_string(),
            capabilities: Value::Null,
            instructions: None,
            closing: AtomicBool::new(false),
            busy: AtomicUsize::new(0),
        }
    }

    /// The server's id for this session (HTTP's `Mcp-Session-Id`), if any.
    pub(crate) fn session_id(&self) -> Option<&str> {
        self.link.session_id()
    }

    /// Starts delivering what the server sends unasked to `inbox` (the
    /// `GET` stream's reader, for HTTP). A session whose reader cannot start
    /// would miss the server's notifications without a word: the caller
    /// closes it and reports the error instead.
    pub(crate) fn start_reader(&self, inbox: Weak<dyn Inbox>) -> Result<(), DownstreamError> {
        self.link.listen(inbox)
    }

    /// The key and record of this downstream session while it closes, for
    /// the state file; `None` when there is nothing to DELETE after a crash
    /// (no session id, or a session that does not outlive mcpgate: a child
    /// process, an HTTP+SSE stream).
    pub(crate) fn closing_record(&self) -> Option<(usize, SavedDownstream)> {
        self.session_id()?;
        if !self.link.survives_restart() {
            return None;
        }
        self.server.connector.saved_url()?;
        Some((self.owner(), self.record()))
    }

    fn record(&self) -> SavedDownstream {
        SavedDownstream {
            server: self.server.name().to_string(),
            url: self.server.connector.saved_url().unwrap_or_default().to_string(),
            session_id: self.session_id().map(str::to_string),
            protocol_version: self.protocol_version.clone(),
            capabilities: self.capabilities.clone(),
            instructions: self.instructions.clone(),
            client: (!self.client.is_empty()).then(|| self.client.clone()),
            ends_with_process: !self.link.survives_restart(),
            user: self.user.filter(|_| self.server.config.uses_oauth()).map(|u| crate::runtime::sha256::to_hex(&u)),
        }
    }

    /// What the state file keeps of this downstream session while it is
    /// open; nothing for a child process.
    pub(crate) fn saved(&self) -> Option<SavedDownstream> {
        (!self.is_closing() && self.server.connector.saved_url().is_some()).then(|| self.record())
    }

    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// A fresh request id: unique among all the server's downstream
    /// sessions, so that an answer a server sends twice can never pass for
    /// the answer to another session's request on the same connection.
    pub(crate) fn next_id(&self) -> Value {
        Value::from(self.server.next_id.fetch_add(1, Ordering::Relaxed))
    }

    /// A request of mcpgate's own (a list page, `logging/setLevel`, a
    /// `ping`): a fresh id and flight, and what the server sends about it
    /// meanwhile is dropped.
    pub(crate) fn own_request(&self, method: &str, params: Option<&Params>) -> Result<Message, DownstreamError> {
        self.call(&self.next_id(), method, params, &mut |_| {}, &self.flight())
    }

    /// A flight for a request of this downstream session: whoever holds it
    /// can end the request (a client's cancel).
    pub(crate) fn flight(&self) -> Arc<Flight> {
        self.server.lanes.flight(self.owner())
    }

    /// This downstream session's mark on its flights and in the state file.
    fn owner(&self) -> usize {
        self as *const Downstream as usize
    }

    /// Sends a request on one of the server's lanes. It ends early when
    /// `flight` is stopped: cancelled, closed, or silent past the request
    /// timeout. Counted, and timed on its lane, in the server's metrics.
    pub(crate) fn call(
        &self,
        id: &Value,
        method: &str,
        params: Option<&Params>,
        on_message: &mut dyn FnMut(Arrival),
        flight: &Arc<Flight>,
    ) -> Result<Message, DownstreamError> {
        let result = self.exchange(id, method, params, on_message, flight);
        self.server.count(&result);
        result
    }

    fn exchange(
        &self,
        id: &Value,
        method: &str,
        params: Option<&Params>,
        on_message: &mut dyn FnMut(Arrival),
        flight: &Arc<Flight>,
    ) -> Result<Message, DownstreamError> {
        self.busy.fetch_add(1, Ordering::AcqRel);
        let _busy = Busy(&self.busy);
        if self.is_closing() {
            return Err(DownstreamError::Gone);
        }
        let _lane = match self.server.lanes.take(flight, self.server.limits.request) {
            Ok(lane) => lane,
            Err(LaneError::Busy(n)) => return Err(DownstreamError::Busy(n)),
            Err(LaneError::Stopped(Stop::Closing)) => return Err(DownstreamError::Gone),
            Err(LaneError::Stopped(why)) => return Err(self.server.stopped(why)),
        };
        let version = Some(self.protocol_version.as_str());
        let url = self.server.config.url();
        // Traced, the params carry the context in their `_meta`.
        let (sent, traced) = spans::sending(url, self.session_id(), version, method, id, params);
        let started = Instant::now();
        let result = self.link.round_trip(id, method, traced.as_ref().or(params), on_message, flight);
        self.server.metrics.request_duration.observe(started.elapsed());
        // Whatever broke the exchange, a stop says why.
        let result = match (result, flight.stopped()) {
            (Err(_), Some(why)) => Err(self.server.stopped(why)),
            (result, _) => result,
        };
        sent.end(&self.server.metrics, result.as_ref(), |text| self.server.redact(text));
        self.server.record(&result, false);
        result
    }

    /// Sends a notification, or a response to a request the server made.
    pub(crate) fn send(&self, body: &[u8]) -> Result<(), DownstreamError> {
        if self.is_closing() {
            return Err(DownstreamError::Closed);
        }
        self.link.send(body)
    }

    pub(crate) fn notify(&self, method: &str, params: Option<&RawValue>) -> Result<(), DownstreamError> {
        self.send(&jsonrpc::notification(method, params))
    }

    /// Whether the server declared `capability` (e.g. "tools", "logging").
    pub(crate) fn offers(&self, capability: &str) -> bool {
        self.capabilities.get(capability).is_some_and(|v| !v.is_null())
    }
}

/// An owed `DELETE` tries the session again through its link.
impl deletes::Owing for Downstream {
    fn end(&self) -> Result<(), DownstreamError> {
        self.link.end()
    }

    fn server_name(&self) -> &str {
        self.server.name()
    }

    fn redact(&self, text: &str) -> String {
        self.server.redact(text)
    }

    fn journal(&self) -> &Journal {
        &self.server.journal
    }
}

/// Counts a request using a downstream session while it lives.
struct Busy<'a>(&'a AtomicUsize);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Downstream {
    /// Whether a request is using it now.
    pub(crate) fn in_use(&self) -> bool {
        self.busy.load(Ordering::Acquire) > 0
    }
}

/// Closes downstream sessions a reload took from their slots once the
/// requests using them have ended (at most `wait`, or at once when `stop`
/// is set, at shutdown), on a thread of its own: a call in flight when its
/// server changed finishes where it started, and new calls go to the new
/// server. Before, they were cut: 43 of 3,551 calls failed in 100 reloads.
pub(crate) fn close_when_idle(list: Vec<Arc<Downstream>>, wait: Duration, stop: Arc<AtomicBool>) {
    if list.is_empty() {
        return;
    }
    let parallel = list.len().clamp(1, 32);
    let shared = Arc::new(Mutex::new(Some(list)));
    let work = {
        let shared = shared.clone();
        move || {
            let deadline = Instant::now() + wait;
            let Some(list) = shared.lock().take() else { return };
            while list.iter().any(|d| d.in_use()) && Instant::now() < deadline && !stop.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(10));
            }
            close_all(&list, parallel);
        }
    };
    match crate::runtime::threads::spawn("close", "drain", work) {
        Ok(handle) => crate::runtime::threads::join_later(handle),
        // No thread to wait on: they are closed now, as before.
        Err(_) => {
            if let Some(list) = shared.lock().take() {
                close_all(&list, parallel);
            }
        }
    }
}

impl Drop for Downstream {
    fn drop(&mut self) {
        if !self.closing.load(Ordering::Acquire) {
            self.server.stats.downstream_leaked.inc();
            log::error!("bug: a downstream session of `{}` was dropped without being closed", self.server.name());
        }
    }
}

/// Marks each session of `list` not already closing as closing, and stops
/// its requests and its listening: what both ways of letting a session go
/// begin with. Returns the ones this call marked (a session is let go once).
fn stop_each_once(list: &[Arc<Downstream>]) -> Vec<&Arc<Downstream>> {
    list.iter()
        .filter(|d| !d.closing.swap(true, Ordering::AcqRel))
        .inspect(|d| {
            d.server.lanes.stop_owned_by(d.owner());
            d.link.stop();
        })
        .collect()
}

/// Lets go of downstream sessions whose client session another instance
/// took over: like [`close_all`], but a session that outlives this process
/// is not ended at its server, and nothing is written to the journal (the
/// other instance holds them now). Counted as handed over, not closed.
pub(crate) fn hand_over_all(list: &[Arc<Downstream>]) {
    let claimed = stop_each_once(list);
    for d in claimed {
        if let Err(e) = d.link.hand_over() {
            limited!(
                warn,
                "server `{}`: letting go of a session failed: {}",
                d.server.name(),
                d.server.redact(&e.to_string())
            );
        }
        d.server.live_sessions.dec();
        if d.link.holds_session() {
            d.server.stats.downstream_live.dec();
            d.server.stats.downstream_handed_over.inc();
        }
    }
}

/// Closes downstream sessions: the one close path. For each one not already
/// closing: mark it closing in the state file, stop its requests and its
/// listening, then (in parallel, `parallel` at a time) end it at the server
/// (HTTP: join the reader, whose socket then closes, so a descriptor is free
/// for the `DELETE` even when they ran out; then `DELETE`, bounded by
/// `delete_timeout_secs`. HTTP+SSE: close the stream, which is the session,
/// and join its reader within `delete_timeout_secs`. stdio: let the child
/// go, and reap it), and count it closed. A session given twice, or already closed, is closed once.
///
/// A session the state file keeps is ended at its server only once its
/// closing mark is on disk: ended before, a crash would bring it back and
/// it would be ended twice. When the mark cannot be written, and when its
/// `DELETE` was lost to a fault that may pass, its `DELETE` is owed
/// ([`Deletes`]): tried again by the reaper, and kept in the file until done.
pub fn close_all(list: &[Arc<Downstream>], parallel: usize) {
    let claimed = stop_each_once(list);
    let Some(first) = claimed.first() else { return };
    // Written ahead: a crash from here on leaves these marked closing, and
    // the next start sends their DELETE.
    let journal = first.server.journal.clone();
    let records: Vec<(usize, SavedDownstream)> = claimed.iter().filter_map(|d| d.closing_record()).collect();
    let keys: Vec<usize> = records.iter().map(|(key, _)| *key).collect();
    let journaled = records.is_empty() || {
        journal.closing(records);
        // A failed write is logged by the writer.
        journal.commit().is_ok()
    };
    let recorded = |d: &Downstream| keys.contains(&d.owner());
    let (now, unjournaled): (Vec<&Arc<Downstream>>, Vec<&Arc<Downstream>>) =
        claimed.iter().partition(|d| journaled || !recorded(d));
    let owed: Mutex<Vec<usize>> = Mutex::new(Vec::new());
    crate::runtime::threads::for_each_parallel("close", &now, parallel, |d| {
        if let Err(e) = d.link.end() {
            d.server.stats.downstream_delete_failures.inc();
            let retried = recorded(d) && deletes::worth_retrying(&e);
            limited!(
                warn,
                "server `{}`: ending a downstream session failed: {}; {}",
                d.server.name(),
                d.server.redact(&e.to_string()),
                if retried { "its DELETE is sent again later" } else { "the server may keep it until it expires" }
            );
            if retried {
                d.server.deletes.owe((*d).clone(), d.owner(), true, &d.server.stats);
                owed.lock().push(d.owner());
            }
        }
    });
    let owed = owed.into_inner();
    let done: Vec<usize> = now.iter().map(|d| d.owner()).filter(|k| keys.contains(k) && !owed.contains(k)).collect();
    if !done.is_empty() {
        journal.closed(&done);
        // Failed, a restart sends these DELETEs again; the server answers 404.
        let _ = journal.commit();
    }
    for d in unjournaled {
        limited!(
            warn,
            "server `{}`: a downstream session is ended once the state file can be written (a crash before would \
             bring it back, and end it twice)",
            d.server.name()
        );
        d.server.deletes.owe((*d).clone(), d.owner(), false, &d.server.stats);
    }
    for d in claimed {
        d.server.live_sessions.dec();
        if d.link.holds_session() {
            d.server.stats.downstream_live.dec();
            d.server.stats.downstream_closed.inc();
        }
    }
}
