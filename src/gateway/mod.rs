//! MCP on `/mcp`. `Gateway` (here and in `reload`) is the state and its
//! life: the configuration and servers in force, the sessions, the
//! counters, the journal and the shutdown flags. A request comes in at
//! `streamable_http::mcp` (the HTTP adapter of both eras; the 2026-07-28
//! era's requests go on to `stateless/`, whose `Stateless` owns its pools,
//! held and watched calls), is answered or forwarded by `dispatch`'s
//! functions, whose lists come from `lists` (`Lists`, in `merged`, keeps
//! them with the names their merges collided on or renamed) and `catalog`;
//! `current` is the configuration in force, and `reopen` runs work on a
//! downstream session, opened anew if need be; every handler answers with
//! an `outcome`, and `refusal` chooses the HTTP status of every error.
//! `reload` swaps the configuration, and `life` keeps the reload and
//! shutdown state; `govern` the rate limits and the audit log;
//! `downstreams` what the servers share; `peers` the `Store`: the journal,
//! and the session store shared with other instances; `search`'s
//! `ToolSearch` is the `tool_search` mode's two tools, and `searches` what
//! it has seen.

use std::sync::Arc;

use crate::config::Config;
use crate::downstream::{Context, Limits, Server};
use crate::http::HttpReply;
use crate::protocol::jsonrpc::{self, RpcError};
use crate::session::{self, CloseReason, Session, Sessions};
use crate::stats::Stats;

mod audit;
mod authorize;
pub mod check;
mod current;
mod dispatch;
mod downstreams;
mod failover;
mod forward;
mod govern;
mod life;
mod lists;
mod merged;
mod outcome;
mod peers;
mod rate;
mod refusal;
mod reload;
mod reopen;
mod search;
pub(crate) mod searches;
mod spans;
pub(crate) mod stateless;
pub(crate) mod streamable_http;

pub(crate) use crate::protocol::stateless::UNSUPPORTED_PROTOCOL_VERSION;
pub(crate) use crate::protocol::{SESSION_HEADER, VERSION_HEADER};
pub(crate) use current::Current;
use current::visible;
pub(crate) use downstreams::Downstreams;
pub(crate) use govern::Govern;
pub(crate) use life::{Life, ReloadOutcome};
pub(crate) use merged::Lists;
pub(crate) use peers::Store;
pub(crate) use search::ToolSearch;

/// The gateway: configuration, servers, sessions and counters.
pub struct Gateway {
    /// Guards only the swap of the whole `Current`; readers clone the Arc.
    current: parking_lot::RwLock<Arc<Current>>,
    pub sessions: Sessions,
    pub stats: Arc<Stats>,
    /// The journal, and the session store shared with the instances that
    /// continue each other's sessions.
    pub store: Store,
    /// What the servers share: child processes, lost `DELETE`s, OAuth tokens.
    pub downstreams: Downstreams,
    /// What the sessions are offered: the merged lists, and tool search over them.
    pub(crate) offered: Offered,
    /// Its start, reloads, shutdown, memory given back and refused sessions.
    pub(crate) life: Life,
    /// The rate limits' buckets and the audit log.
    pub govern: Govern,
}

/// What the sessions are offered: the merged lists, and the `tool_search`
/// mode's view of the tools among them.
#[derive(Default)]
pub(crate) struct Offered {
    /// The merged lists, one per kind and view, shared by the sessions, and
    /// the collisions and renames their merges found.
    pub(crate) lists: Lists,
    /// The `tool_search` mode, with what it has seen: its queries and its index.
    pub(crate) search: ToolSearch,
}

impl Gateway {
    pub fn new(config: Config) -> Gateway {
        crate::runtime::memory::set_limit(config.max_memory);
        let stats = Arc::new(Stats::default());
        let store = peers::open_store(&config);
        let downstreams = Downstreams::new(&config);
        let context = downstreams.context(&stats, &store.journal);
        let servers = config.servers.iter().map(|s| new_server(s, &config, &context)).collect();
        Gateway {
            current: parking_lot::RwLock::new(Arc::new(Current { config, servers })),
            sessions: Sessions::new(store.journal.clone()),
            store,
            stats,
            downstreams,
            offered: Offered::default(),
            life: Life::new(),
            govern: Govern::default(),
        }
    }

    /// What failing over a session to or from another instance reads of the gateway.
    pub(crate) fn failover(&self) -> failover::Failover<'_> {
        failover::Failover {
            store: &self.store,
            current: self.current(),
            sessions: &self.sessions,
            stats: &self.stats,
            journal: &self.store.journal,
        }
    }

    /// What the merged lists read of the gateway.
    fn in_force(&self) -> lists::InForce<'_> {
        lists::InForce { current: self.current(), life: &self.life }
    }

    /// What every server shares.
    pub fn context(&self) -> Context {
        self.downstreams.context(&self.stats, &self.store.journal)
    }

    /// The configuration and servers in force now.
    pub fn current(&self) -> Arc<Current> {
        self.current.read().clone()
    }

    /// Fails every request still waiting on a server, and stops the shared
    /// processes and the thread that starts processes; for the end of
    /// shutdown, after every session was closed.
    pub fn shutdown(&self) {
        self.life.stop();
        // Every server at once: each stops its processes, each with its grace.
        let servers = self.current().servers.clone();
        crate::runtime::threads::for_each_parallel("close", &servers, servers.len(), |server| server.shutdown());
        self.downstreams.children.stop();
        // Last: what the closes wrote is written out before the writer stops.
        self.govern.configure_audit(None);
        crate::runtime::trace::configure(None, None);
    }

    /// At shutdown: how many client sessions the state file keeps (their
    /// downstream sessions are closed; see [`Sessions::take_all`]).
    pub fn keep_clients(&self) -> usize {
        if self.store.journal.path().is_some() || self.store.redis.is_some() { self.sessions.len() } else { 0 }
    }

    /// Closes sessions already removed from the table: idle, deleted or at shutdown.
    pub fn close(&self, sessions: Vec<Arc<Session>>, reason: CloseReason) {
        if let Some(audit) = self.govern.audit_log() {
            for session in &sessions {
                audit.write(audit::session_record(session, self.issuer().as_deref(), Some(reason)));
            }
        }
        let parallel = (self.current().servers.len() * sessions.len()).clamp(1, 32);
        session::close_sessions(sessions, reason, parallel, &self.stats);
        self.life.release_memory();
    }
}

/// The servers a session may reach, in configuration order.
impl Gateway {
    /// An `initialize` was refused: counted, and its time kept for the health.
    fn refused_session(&self) {
        self.stats.sessions_refused.inc();
        self.life.session_refused();
    }

    /// Takes one call of `message` from the buckets of the session's user
    /// (`rate_limit`); over a limit, which one and when to retry.
    fn rate_check(&self, session: &Session, message: &crate::protocol::jsonrpc::Message) -> Result<(), rate::Limited> {
        self.govern.rate_check(&self.current().config, &self.stats, session, message)
    }

    /// What a call reads of the gateway, for a call that runs on a thread of its own too.
    fn call_settings(&self) -> outcome::CallSettings {
        outcome::CallSettings {
            open_retry: self.current().config.open_retry,
            audit: self.govern.audit_log(),
            issuer: self.issuer(),
        }
    }

    /// The issuer of `auth.oauth`, if any: the audit log names it with a subject.
    fn issuer(&self) -> Option<String> {
        govern::issuer(&self.current().config)
    }

    /// What tool search makes of a `tools/call` of `session` (`new`: not
    /// the retry of a held call): the one place either era asks it.
    fn tool_search<'p>(
        &self,
        session: &Arc<Session>,
        params: jsonrpc::Params<'p>,
        new: bool,
    ) -> Result<search::Route<'p>, RpcError> {
        let cur = self.current();
        let tools = || self.offered.lists.merged(&self.in_force(), session, crate::catalog::ListKind::Tools);
        let scope = search::Scope { config: &cur.config, servers: &cur.servers, stats: &self.stats, tools: &tools };
        self.offered.search.tools_call(&scope, session, params, new)
    }

    /// Starts, changes or stops the span exporter as `tracing` says (at
    /// start and on every reload).
    pub fn configure_tracing(&self) {
        crate::runtime::trace::configure(self.current().config.tracing.as_ref(), self.store.instance_id.as_deref());
    }

    /// Starts the processes of `"start": "eager"` servers ahead, unless they
    /// run; nothing waits for them. Without a session (at start, at a
    /// reload, on the reaper's rounds, which start again one that ended):
    /// those every session shares (`"shared"`, or `"user"` without `auth`).
    /// With one (its `initialize`): those of its user.
    pub fn start_eager(&self, session: Option<&Session>) {
        let cur = self.current();
        for server in &cur.servers {
            let crate::config::Transport::Stdio(stdio) = &server.config.transport else { continue };
            if stdio.start != crate::config::Start::Eager {
                continue;
            }
            let principal = match session {
                Some(session) if session.allows(server.name()) => session.principal(),
                Some(_) => continue,
                // With `auth` every session has a user, known only when it comes.
                None if stdio.sharing == crate::config::Sharing::User && cur.config.tokens.is_some() => continue,
                None => None,
            };
            server.warm(principal, std::time::Duration::ZERO, None);
        }
    }
}

fn new_server(config: &crate::config::ServerConfig, all: &Config, context: &Context) -> Arc<Server> {
    Arc::new(Server::new(config.clone(), Limits::from_config(all), all.calls_per_server, context))
}

/// 429 for a session with `max_requests_per_session` requests in flight.
pub(super) fn too_busy(session: &Session) -> HttpReply {
    crate::limited!(warn, "session {}: too many requests in flight; one refused with 429", session::short(&session.id));
    let e = RpcError::new(
        jsonrpc::INVALID_REQUEST,
        "this session has too many requests in flight (max_requests_per_session); retry later",
    );
    refusal::reply(refusal::Why::TooBusy, &e)
}

/// Whether an `Accept` header admits `mime` (directly or by a wildcard).
pub(super) fn accepts(accept: &str, mime: &str) -> bool {
    let major = mime.split('/').next().unwrap_or("");
    accept.split(',').any(|part| {
        let range = part.split(';').next().unwrap_or("").trim();
        range.eq_ignore_ascii_case(mime)
            || range == "*/*"
            || range.strip_suffix("/*").is_some_and(|m| m.eq_ignore_ascii_case(major))
    })
}

/// A session id: 128 bits from the OS random source, as 32 hex digits,
/// after `<instance>.` when the instance has an id (a balancer routes on it).
pub(super) fn new_session_id(instance: Option<&str>) -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    crate::runtime::sys::random(&mut bytes)?;
    let hex = crate::runtime::sha256::to_hex(&bytes);
    Ok(match instance {
        Some(instance) => format!("{instance}.{hex}"),
        None => hex,
    })
}
