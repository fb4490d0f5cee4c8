//! The configuration file: JSON with the `mcpServers` map that Claude Desktop,
//! Cursor and VS Code use, plus mcpgate's own top-level keys. A client's own
//! file is read as it is ([`clients`]: VS Code's `servers`, comments,
//! `${env:NAME}`, `envFile`, `disabled`, ...).
//!
//! Parsing is by hand so that every refusal names the file, the key and the
//! problem, and an unknown key the known one nearest it ([`suggest`]).
//! [`KEYS`](keys::KEYS) documents every key; the table of docs/CONFIGURATION.md is
//! printed from it (`mcpgate --config-reference`) and a test keeps the two
//! equal.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};

use crate::catalog::Filter;

mod client_keys;
pub mod clients;
mod env_file;
pub mod import;
mod invalid;
mod jsonc;
mod keys;
mod oauth;
mod oauth_client;
mod reader;
mod suggest;
mod trust;
mod vars;

pub use invalid::Invalid;
use invalid::kind;
pub use keys::reference_markdown;
use keys::valid_name;
pub(crate) use oauth::{Introspection, OAuthConfig};
pub(crate) use oauth_client::{Ask, OAuthClientConfig, ServerOAuth};
use reader::Keys;
#[cfg(feature = "tls")]
pub(crate) use trust::read_certs;
pub(crate) use trust::{TlsFiles, Trust};
use vars::expand;

/// The whole configuration, validated.
#[derive(Clone, Debug)]
pub struct Config {
    pub listen: SocketAddr,
    pub(crate) calls_per_server: usize,
    pub(crate) session_idle_timeout: Duration,
    pub(crate) keepalive: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) delete_timeout: Duration,
    pub shutdown_timeout: Duration,
    pub(crate) open_retry: Duration,
    pub client_idle_timeout: Duration,
    pub client_write_timeout: Duration,
    pub header_timeout: Duration,
    pub max_connections: usize,
    pub max_body_bytes: usize,
    pub max_header_count: usize,
    pub max_header_bytes: usize,
    pub(crate) max_message_bytes: usize,
    pub max_sessions: usize,
    pub(crate) max_processes: usize,
    pub(crate) max_held_calls: usize,
    pub(crate) held_call_timeout: Duration,
    pub(crate) stdio_grace: Duration,
    pub(crate) shared_idle: Duration,
    pub(crate) start_timeout: Duration,
    pub(crate) list_wait: Duration,
    pub(crate) unused_session_idle: Duration,
    /// In bytes.
    pub(crate) max_memory: usize,
    pub(crate) page_size: usize,
    pub(crate) tool_name_max: usize,
    pub state_file: Option<PathBuf>,
    /// Starts every session id mcpgate mints, followed by a dot.
    pub instance_id: Option<String>,
    /// Shared with peer instances; `state_file` is then this instance's file in it.
    pub state_dir: Option<PathBuf>,
    /// `store`: the Redis URL the sessions are kept at.
    pub(crate) store: Option<String>,
    /// `store_lease_ms`.
    pub(crate) store_lease: Duration,
    /// Where the peers reach this instance (`peer_url`), with `state_dir` or `store`.
    pub(crate) peer_url: Option<String>,
    pub(crate) max_streams_per_session: usize,
    pub(crate) max_requests_per_session: usize,
    pub(crate) max_batch_entries: usize,
    pub(crate) max_list_items: usize,
    pub(crate) max_list_bytes: usize,
    pub(crate) allowed_origins: Vec<String>,
    pub(crate) allowed_hosts: Vec<String>,
    /// `None` without an `auth` key: no token needed. With it, its static
    /// tokens (none, when only `oauth` is given).
    pub tokens: Option<Vec<Token>>,
    /// `auth.oauth`: access tokens of an authorization server.
    pub(crate) oauth: Option<std::sync::Arc<OAuthConfig>>,
    /// `tls`: HTTPS on the front door.
    pub tls: Option<TlsFiles>,
    /// `ca_file` and `trust_store`: the roots of every `https://` server.
    pub(crate) trust: Trust,
    pub(crate) status_public: bool,
    pub watch_config: bool,
    /// mcpgate as the OAuth client of servers with `oauth`.
    pub(crate) oauth_client: OAuthClientConfig,
    pub(crate) tool_search: ToolSearch,
    /// `audit`: none when it is not configured.
    pub audit: Option<AuditConfig>,
    /// `rate_limit`.
    pub(crate) rate_limit: RateLimits,
    /// `tracing`: none when it is not configured.
    pub(crate) tracing: Option<TracingConfig>,
    /// In the order of the file: the first server wins a name collision.
    pub servers: Vec<ServerConfig>,
    /// What was read from a client's file its own way, or left to the client.
    pub notes: clients::Notes,
}

/// The `tool_search` mode: search-and-call instead of one long tool list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ToolSearch {
    pub(crate) enabled: bool,
    /// Globs over exposed names: still listed as themselves.
    pub(crate) pinned: Vec<String>,
    pub(crate) max_results: usize,
}

/// One part of the thread budget: the most threads of these roles (as in
/// their names; `other` is the main thread) this configuration can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ThreadBudget {
    /// A short name for the part, e.g. `connections`.
    pub(crate) group: &'static str,
    pub(crate) roles: &'static [&'static str],
    /// What sets the number, e.g. `max_connections`.
    pub(crate) by: &'static str,
    pub(crate) threads: usize,
}

/// A bearer token a client may present, and the servers it may reach.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    pub(crate) token: String,
    /// What the status page calls it.
    pub(crate) name: Option<String>,
    /// `None`: every server.
    pub(crate) servers: Option<Vec<String>>,
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token(***, name: {:?}, servers: {:?})", self.name, self.servers)
    }
}

/// One downstream MCP server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerConfig {
    pub name: String,
    /// How it is reached: over HTTP, or as a child process over stdio.
    pub transport: Transport,
    pub(crate) prefix: String,
    /// Joins the prefix and a name: `__` unless configured.
    pub(crate) separator: String,
    /// Which tools, prompts and resources (by URI) of the server are exposed.
    pub(crate) tools: Filter,
    pub(crate) prompts: Filter,
    pub(crate) resources: Filter,
    /// Values that came from the environment: never logged or shown.
    pub(crate) secrets: Vec<String>,
    /// The limit of each of its tools per user (`rate_limit`); a change to it
    /// leaves the server as it is on reload (it is read from the
    /// configuration in force on every call), hence not compared.
    pub(crate) rate_limit: NotCompared<Option<Rate>>,
}

/// A value a comparison of what holds it leaves out: every two are equal.
#[derive(Clone, Debug, Default)]
pub(crate) struct NotCompared<T>(pub T);

impl<T> PartialEq for NotCompared<T> {
    fn eq(&self, _: &NotCompared<T>) -> bool {
        true
    }
}

impl<T> Eq for NotCompared<T> {}

/// A token bucket's settings: refilled by `per_minute` calls a minute, `burst` calls deep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rate {
    pub(crate) per_minute: u64,
    pub(crate) burst: u64,
}

/// `rate_limit`: the buckets of calls, per user and per (user, tool).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RateLimits {
    /// Whether any limit is set, here or on a server.
    pub(crate) enabled: bool,
    pub(crate) per_user: Option<Rate>,
    pub(crate) per_tool: Option<Rate>,
    /// By exposed tool name.
    pub(crate) tools: BTreeMap<String, Rate>,
    pub(crate) max_buckets: usize,
}

impl RateLimits {
    /// Whether any limit is set.
    pub(crate) fn any(&self, servers: &[ServerConfig]) -> bool {
        self.per_user.is_some()
            || self.per_tool.is_some()
            || !self.tools.is_empty()
            || servers.iter().any(|s| s.rate_limit.0.is_some())
    }
}

/// `audit`: where the audit log goes.
pub(crate) use crate::runtime::audit::AuditConfig;
/// `tracing`: where spans go, and which.
pub(crate) use crate::runtime::trace::TracingConfig;

/// What joins a server's prefix and a name unless `separator` says.
const SEPARATOR: &str = "__";

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    Http(HttpConfig),
    /// The old HTTP+SSE transport (protocol 2024-11-05): `url` is its stream.
    Sse(HttpConfig),
    Stdio(StdioConfig),
}

impl Transport {
    /// Whether each downstream session on it has a reader thread of its
    /// own: the `GET` stream of a Streamable HTTP session, the stream that
    /// is an HTTP+SSE session. A child process's threads are its own.
    pub(crate) fn reads_per_session(&self) -> bool {
        match self {
            Transport::Http(_) | Transport::Sse(_) => true,
            Transport::Stdio(_) => false,
        }
    }
}

/// A server reached over HTTP: Streamable HTTP, or the old HTTP+SSE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpConfig {
    pub(crate) url: String,
    /// Names and values after `${VAR}` expansion.
    pub(crate) headers: Vec<(String, String)>,
    /// The roots its TLS certificate is checked against.
    pub(crate) trust: Trust,
    /// Each user signs in to it (`oauth`), or has their token exchanged.
    pub(crate) oauth: Option<ServerOAuth>,
}

/// A stdio server: a program mcpgate starts and speaks to on its stdin and stdout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StdioConfig {
    pub(crate) command: String,
    pub(crate) args: Vec<String>,
    /// Set in the child's environment, after `${VAR}` expansion, over the base (see [`BASE_ENV`]).
    pub(crate) env: Vec<(String, String)>,
    pub(crate) cwd: Option<PathBuf>,
    pub(crate) sharing: Sharing,
    pub(crate) start: Start,
    /// The variables of mcpgate's environment it gets besides [`BASE_ENV`]
    /// (the global `env_passthrough`).
    pub(crate) passthrough: Vec<String>,
    /// At most this many children of this server at once.
    pub(crate) max_processes: Option<usize>,
}

impl StdioConfig {
    /// Where its `command` is, as the process would find it: a path with a
    /// `/` as it is, a name on `path` (a `PATH`); why not, when it is not
    /// there or not executable.
    pub fn find_program(&self, path: Option<&std::ffi::OsStr>) -> Result<PathBuf, String> {
        use std::os::unix::fs::PermissionsExt;
        let executable = |p: &Path| p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
        if self.command.contains('/') {
            let program = match &self.cwd {
                Some(cwd) if Path::new(&self.command).is_relative() => cwd.join(&self.command),
                _ => PathBuf::from(&self.command),
            };
            return if executable(&program) {
                Ok(program)
            } else {
                Err(format!("`{}` is not an executable file", program.display()))
            };
        }
        let dirs: Vec<PathBuf> = path.map(|p| std::env::split_paths(p).collect()).unwrap_or_default();
        dirs.iter().map(|dir| dir.join(&self.command)).find(|p| executable(p)).ok_or_else(|| {
            let searched: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
            format!("`{}` is not found on PATH ({})", self.command, searched.join(":"))
        })
    }
}

/// Whose a stdio server's child process is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sharing {
    /// One child per user (principal): the sessions of one token or OAuth
    /// subject share it, and without `auth` every session does.
    User,
    /// One child per client session, isolated like an HTTP downstream session.
    Session,
    /// One child for every client session, for stateless servers.
    Shared,
}

/// When a stdio server's shared child starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Start {
    /// When a session first needs it: a list or a call.
    Lazy,
    /// With mcpgate and at each reload (with `auth`, at each user's first
    /// `initialize`); started again when it ends, never stopped when idle.
    Eager,
}

/// What a stdio server's child gets of mcpgate's own environment, before
/// its `env`: enough to find programs and run them, nothing that may hold
/// another server's secrets.
pub(crate) const BASE_ENV: &[&str] = &["PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR"];

/// What `env_passthrough` is unless the config says otherwise: what `npx`,
/// `uvx` and `pip` need to reach a registry behind a proxy or a private CA,
/// and to find their caches and indexes. None is another server's secret:
/// CA paths are paths; a proxy's URL (credentials included) and a package
/// index's settings (a token for a private registry included) serve every
/// server alike.
pub(crate) const DEFAULT_PASSTHROUGH: &[&str] = &[
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "npm_config_*",
    "NPM_CONFIG_*",
    "UV_*",
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_CERT",
    "XDG_CACHE_HOME",
];

/// Whether the variable `name` is one `patterns` pass: a name, or a prefix and `*`.
pub(crate) fn passes(patterns: &[String], name: &str) -> bool {
    patterns.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => p == name,
    })
}

impl ServerConfig {
    /// A Streamable HTTP server known by its name and URL only, as the
    /// state file names one: without headers or OAuth, which belong to a
    /// configured server, and with the defaults of everything else.
    pub(crate) fn streamable_http(name: &str, url: &str, trust: Trust) -> ServerConfig {
        ServerConfig {
            name: name.to_string(),
            transport: Transport::Http(HttpConfig { url: url.to_string(), headers: Vec::new(), trust, oauth: None }),
            prefix: String::new(),
            separator: SEPARATOR.into(),
            tools: Filter::default(),
            prompts: Filter::default(),
            resources: Filter::default(),
            secrets: Vec::new(),
            rate_limit: NotCompared::default(),
        }
    }

    /// The URL of a server reached over HTTP (either transport).
    pub(crate) fn url(&self) -> Option<&str> {
        match &self.transport {
            Transport::Http(http) | Transport::Sse(http) => Some(&http.url),
            Transport::Stdio(_) => None,
        }
    }

    /// Whether each user signs in to it (`oauth`).
    pub(crate) fn uses_oauth(&self) -> bool {
        matches!(&self.transport, Transport::Http(HttpConfig { oauth: Some(_), .. }))
    }

    /// Where it is, for people: the URL, or the command line.
    pub(crate) fn target(&self) -> String {
        match &self.transport {
            Transport::Http(http) | Transport::Sse(http) => http.url.clone(),
            Transport::Stdio(stdio) => std::iter::once(stdio.command.as_str())
                .chain(stdio.args.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
}

/// Why a configuration file was refused: the file, the key and the problem.
#[derive(Debug)]
pub struct ConfigError {
    pub file: PathBuf,
    pub invalid: Invalid,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file.display(), self.invalid)
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.invalid)
    }
}

impl Config {
    /// Reads and validates `path`, expanding `${VAR}` from `env`.
    pub(crate) fn load(path: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let refused = |invalid| ConfigError { file: path.to_path_buf(), invalid };
        let text = std::fs::read_to_string(path).map_err(|e| refused(Invalid::new("", format!("cannot read: {e}"))))?;
        Config::parse_file(&text, Some(path), env).map_err(refused)
    }

    /// Parses the text of a configuration file.
    pub fn parse(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, Invalid> {
        Config::parse_file(text, None, env)
    }

    /// Parses the text of the configuration file at `file`, which a client's
    /// `${workspaceFolder}` and relative `envFile` are found from.
    fn parse_file(text: &str, file: Option<&Path>, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, Invalid> {
        let (root, notes, text) = read_json(text, file, env, clients::Mode::Run)?;
        let mut keys = Keys::new(&root, "", "");
        let listen = keys.string("listen")?.unwrap_or_else(|| "127.0.0.1:8780".into());
        let listen = listen.parse::<SocketAddr>().map_err(|_| {
            Invalid::new("listen".to_string(), format!("`{listen}` is not an address like 127.0.0.1:8780"))
        })?;
        let workers = keys.number("workers")?;
        let calls_per_server = match workers {
            Some(workers) if !keys.present("calls_per_server") => workers as usize,
            _ => keys.count("calls_per_server")?,
        };
        let trust = trust::trust(&mut keys)?;
        let mut config = Config {
            listen,
            calls_per_server,
            session_idle_timeout: keys.secs("session_idle_timeout_secs")?,
            keepalive: keys.secs("keepalive_secs")?,
            connect_timeout: keys.secs("connect_timeout_secs")?,
            request_timeout: keys.secs("request_timeout_secs")?,
            delete_timeout: keys.secs("delete_timeout_secs")?,
            shutdown_timeout: keys.secs("shutdown_timeout_secs")?,
            open_retry: keys.secs("open_retry_secs")?,
            client_idle_timeout: keys.secs("client_idle_timeout_secs")?,
            client_write_timeout: keys.secs("client_write_timeout_secs")?,
            header_timeout: keys.secs("header_timeout_secs")?,
            max_connections: keys.count("max_connections")?,
            max_body_bytes: keys.count("max_body_bytes")?,
            max_header_count: keys.count("max_header_count")?,
            max_header_bytes: keys.count("max_header_bytes")?,
            max_message_bytes: keys.count("max_message_bytes")?,
            max_sessions: keys.count("max_sessions")?,
            max_processes: keys.count("max_processes")?,
            max_held_calls: keys.count("max_held_calls")?,
            held_call_timeout: keys.secs("held_call_timeout_secs")?,
            stdio_grace: Duration::from_millis(keys.count("stdio_grace_ms")? as u64),
            shared_idle: keys.secs("shared_idle_secs")?,
            start_timeout: keys.secs("start_timeout_secs")?,
            list_wait: Duration::from_millis(keys.count("list_wait_ms")? as u64),
            unused_session_idle: keys.secs("unused_session_idle_secs")?,
            max_memory: keys.count("max_memory_mb")? << 20,
            page_size: keys.count("page_size")?,
            tool_name_max: keys.count("tool_name_max")?,
            state_file: keys.string("state_file")?.map(PathBuf::from),
            instance_id: None,
            state_dir: None,
            store: None,
            store_lease: Duration::from_millis(keys.count("store_lease_ms")? as u64),
            peer_url: None,
            max_streams_per_session: keys.count("max_streams_per_session")?,
            max_requests_per_session: keys.count("max_requests_per_session")?,
            max_batch_entries: keys.count("max_batch_entries")?,
            max_list_items: keys.count("max_list_items")?,
            max_list_bytes: keys.count("max_list_bytes")?,
            allowed_origins: keys.strings("allowed_origins")?,
            allowed_hosts: keys.strings("allowed_hosts")?,
            tokens: None,
            oauth: None,
            tls: keys.take("tls").map(trust::tls_files).transpose()?,
            trust: trust.clone(),
            status_public: keys.flag("status_public")?,
            watch_config: keys.flag("watch_config")?,
            // Its secret is never written anywhere: no redaction list to keep.
            oauth_client: oauth_client::oauth_client(keys.take("oauth_client"), listen, env, &mut Vec::new())?,
            tool_search: tool_search(keys.take("tool_search"))?,
            audit: keys.take("audit").map(audit).transpose()?,
            rate_limit: rate_limits(keys.take("rate_limit"))?,
            tracing: keys.take("tracing").map(tracing).transpose()?,
            servers: servers(keys.take("mcpServers"), notes.order(server_order(&text)?), env, &trust)?,
            notes,
        };
        let passthrough = match keys.take("env_passthrough") {
            None => DEFAULT_PASSTHROUGH.iter().map(|s| s.to_string()).collect(),
            Some(value) => env_patterns(value)?,
        };
        for server in &mut config.servers {
            if let Transport::Stdio(stdio) = &mut server.transport {
                stdio.passthrough = passthrough.clone();
            }
        }
        apply_env_files(&config.notes, &mut config.servers);
        config.rate_limit.enabled = config.rate_limit.any(&config.servers);
        config.instance_id = keys.string("instance_id")?;
        if let Some(id) = &config.instance_id
            && !valid_instance_id(id)
        {
            return Err(Invalid::new("instance_id", format!("`{id}` is not 1 to 32 of `A-Z a-z 0-9 -`")));
        }
        if let Some(dir) = keys.string("state_dir")?.map(PathBuf::from) {
            let Some(id) = &config.instance_id else {
                return Err(Invalid::new("state_dir", "needs `instance_id`: it names this instance's file there"));
            };
            if config.state_file.is_some() {
                return Err(Invalid::new("state_dir", "set `state_dir` or `state_file`, not both"));
            }
            config.state_file = Some(crate::runtime::state::state_path(&dir, id));
            config.state_dir = Some(dir);
        }
        if let Some(url) = keys.string("store")? {
            if config.instance_id.is_none() {
                return Err(Invalid::new("store", "needs `instance_id`: it names this instance in the store"));
            }
            if config.state_file.is_some() {
                return Err(Invalid::new("store", "set `store`, or `state_file`/`state_dir`, not more than one"));
            }
            if !cfg!(feature = "redis") {
                return Err(Invalid::new("store", "this mcpgate was built without the `redis` feature"));
            }
            if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
                return Err(Invalid::new(
                    "store",
                    "expected a Redis URL: redis://[:password@]host:port/db or rediss://",
                ));
            }
            config.store = Some(url);
        }
        config.peer_url = match keys.string("peer_url")? {
            Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
                Some(url.trim_end_matches('/').to_string())
            }
            Some(_) => return Err(Invalid::new("peer_url", "expected an http:// or https:// URL")),
            None if config.listen.ip().is_unspecified() => None,
            None => {
                let scheme = if config.tls.is_some() { "https" } else { "http" };
                Some(format!("{scheme}://{}", config.listen))
            }
        };
        if config.peer_url.is_none() && (config.state_dir.is_some() || config.store.is_some()) {
            return Err(Invalid::new(
                "peer_url",
                "needed with `state_dir` or `store` when `listen` is an unspecified address: where peers reach this instance",
            ));
        }
        if let Some(auth) = keys.take("auth") {
            // Tokens and the client secret are never written anywhere: no redaction list to keep.
            let (tokens, oauth) = auth_keys(auth, &config, env, &mut Vec::new())?;
            config.tokens = Some(tokens);
            config.oauth = oauth.map(std::sync::Arc::new);
        }
        keys.refuse_unknown()?;
        check_servers_oauth(&config)?;
        Ok(config)
    }

    /// The most threads this configuration can run, by group of roles:
    /// what `TasksMax` must allow. Reaching a part's limit refuses work (a
    /// connection, a session) instead of failing to start a thread.
    pub(crate) fn thread_budget(&self) -> Vec<ThreadBudget> {
        let servers = self.servers.len();
        let read = self.servers.iter().filter(|s| s.transport.reads_per_session()).count();
        let stdio = if read < servers { 1 + 2 * self.max_processes } else { 0 };
        let line = |group, roles, by, threads| ThreadBudget { group, roles, by, threads };
        vec![
            line(
                "fixed",
                &["other", "accept", "reaper", "signal", "state", "notify", "audit", "trace"],
                "main, accept, reaper, signal, state, notify, and peers with state_dir, the store's writer and heartbeat with store, audit with audit, trace with tracing",
                6 + usize::from(self.state_dir.is_some())
                    + 2 * usize::from(self.store.is_some())
                    + usize::from(self.audit.is_some())
                    + usize::from(self.tracing.is_some()),
            ),
            line("connections", &["conn"], "max_connections", self.max_connections),
            line("readers", &["reader"], "max_sessions x HTTP servers", self.max_sessions * read),
            line("stdio", &["spawner", "stdio", "stderr"], "spawner, 2 x max_processes", stdio),
            line(
                "fanout",
                &["fanout"],
                "calls_per_server x servers, and a probe per server",
                (self.calls_per_server + 1) * servers,
            ),
            line(
                "hold",
                &["hold", "watch"],
                "calls of 2026-07-28 clients: max_connections + max_held_calls",
                self.max_connections + self.max_held_calls,
            ),
            line("close", &["close"], "reaper, shutdown, reload, DELETEs", 32 + 32 + self.calls_per_server * servers),
        ]
    }

    /// The server with this name, if configured.
    pub(crate) fn server(&self, name: &str) -> Option<&ServerConfig> {
        self.servers.iter().find(|s| s.name == name)
    }
}

/// The text of a file as a JSON object (comments and trailing commas
/// allowed), with what clients write their own way turned into mcpgate's
/// keys; and the text without its comments.
fn read_json(
    text: &str,
    file: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
    mode: clients::Mode,
) -> Result<(Map<String, Value>, clients::Notes, String), Invalid> {
    let text = jsonc::strip(text).map_err(|e| Invalid::new(String::new(), format!("not valid JSON: {e}")))?;
    let root: Value =
        serde_json::from_str(&text).map_err(|e| Invalid::new(String::new(), format!("not valid JSON: {e}")))?;
    let Value::Object(mut root) = root else {
        return Err(Invalid::new(String::new(), format!("expected a JSON object, found {}", kind(&root))));
    };
    let notes = clients::adapt(&mut root, file, env, mode)?;
    Ok((root, notes, text))
}

/// Values of an `envFile` this long or longer are masked as secrets; a
/// shorter one (`DEBUG=1`) would mask its text in every error of the server.
const SECRET_MIN: usize = 8;

/// Puts each `envFile`'s variables in its server's environment, beneath
/// the server's own `env`; the long values become the server's secrets.
fn apply_env_files(notes: &clients::Notes, servers: &mut [ServerConfig]) {
    for file in &notes.env_files {
        let Some(server) = servers.iter_mut().find(|s| s.name == file.server) else { continue };
        let Transport::Stdio(stdio) = &mut server.transport else { continue };
        let mut env: Vec<(String, String)> =
            file.vars.iter().filter(|(n, _)| !stdio.env.iter().any(|(m, _)| m == n)).cloned().collect();
        server.secrets.extend(env.iter().map(|(_, v)| v).filter(|v| v.len() >= SECRET_MIN).cloned());
        env.append(&mut stdio.env);
        stdio.env = env;
    }
}

/// An `instance_id`: short, and free of the dot that ends it in a session id.
pub(crate) fn valid_instance_id(id: &str) -> bool {
    (1..=32).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// What the servers' `oauth` needs of the rest of the configuration: a
/// public URL users can reach, and an issuer to exchange tokens at.
fn check_servers_oauth(config: &Config) -> Result<(), Invalid> {
    for server in &config.servers {
        let Transport::Http(http) = &server.transport else { continue };
        let Some(oauth) = &http.oauth else { continue };
        let key = format!("mcpServers.{}.oauth", server.name);
        if oauth.token_exchange {
            if oauth.authorization_server.is_none() && config.oauth.is_none() {
                return Err(Invalid::new(
                    format!("{key}.token_exchange"),
                    "exchanges the user's token of auth.oauth: set auth.oauth, or `authorization_server`",
                ));
            }
            continue;
        }
        if !config.oauth_client.public_url_given && config.listen.ip().is_unspecified() {
            return Err(Invalid::new(
                "oauth_client.public_url",
                format!(
                    "server `{}` has `oauth`, and mcpgate listens on {}: give the URL users' browsers reach it at, \
                     e.g. https://gate.example.com",
                    server.name, config.listen
                ),
            ));
        }
    }
    Ok(())
}

/// `auth`: its inline tokens, those of `tokens_file`, and `oauth`.
fn auth_keys(
    auth: &Value,
    config: &Config,
    env: &dyn Fn(&str) -> Option<String>,
    secrets: &mut Vec<String>,
) -> Result<(Vec<Token>, Option<OAuthConfig>), Invalid> {
    let Value::Object(map) = auth else {
        return Err(Invalid::new("auth", format!("expected an object, found {}", kind(auth))));
    };
    let mut keys = Keys::new(map, "auth", "auth");
    let mut out = Vec::new();
    if let Some(list) = keys.take("tokens") {
        out.extend(token_list(list, "auth.tokens", config, env, secrets)?);
    }
    if let Some(path) = keys.string("tokens_file")? {
        let key = "auth.tokens_file".to_string();
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Invalid::new(key.clone(), format!("cannot read `{path}`: {e}")))?;
        let list: Value = serde_json::from_str(&text)
            .map_err(|e| Invalid::new(key.clone(), format!("`{path}` is not valid JSON: {e}")))?;
        out.extend(token_list(&list, &format!("{key} ({path})"), config, env, secrets)?);
    }
    let oauth = match keys.take("oauth") {
        Some(value) => {
            let servers: Vec<&str> = config.servers.iter().map(|s| s.name.as_str()).collect();
            Some(oauth::oauth(value, &servers, config.connect_timeout, &config.trust, env, secrets)?)
        }
        None => None,
    };
    keys.refuse_unknown()?;
    if out.is_empty() && oauth.is_none() {
        return Err(Invalid::new(
            "auth",
            "no tokens: give auth.tokens, auth.tokens_file or auth.oauth, or remove `auth`",
        ));
    }
    Ok((out, oauth))
}

fn token_list(
    list: &Value,
    path: &str,
    config: &Config,
    env: &dyn Fn(&str) -> Option<String>,
    secrets: &mut Vec<String>,
) -> Result<Vec<Token>, Invalid> {
    let Value::Array(items) = list else {
        return Err(Invalid::new(path.to_string(), format!("expected an array of tokens, found {}", kind(list))));
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let key = format!("{path}[{i}]");
        let Value::Object(map) = item else {
            return Err(Invalid::new(key, format!("expected an object with `token`, found {}", kind(item))));
        };
        let mut keys = Keys::new(map, &key, "auth.tokens[]");
        let token = keys.string("token")?.ok_or_else(|| Invalid::new(format!("{key}.token"), "missing"))?;
        let token = expand(&token, env, secrets).map_err(|p| Invalid::new(format!("{key}.token"), p))?;
        if token.len() < 16 || token.bytes().any(|b| !(0x21..=0x7e).contains(&b)) {
            return Err(Invalid::new(format!("{key}.token"), "a token is at least 16 visible ASCII characters"));
        }
        secrets.push(token.clone());
        let name = keys.string("name")?;
        if let Some(name) = &name {
            if name.chars().any(char::is_control) {
                return Err(Invalid::new(format!("{key}.name"), "a name has no control characters"));
            }
            if !(1..=64).contains(&name.chars().count()) {
                return Err(Invalid::new(format!("{key}.name"), "a name is 1 to 64 characters"));
            }
        }
        let servers = match keys.take("servers") {
            None => None,
            Some(Value::Array(names)) => {
                let mut list = Vec::new();
                for name in names {
                    let Some(name) = name.as_str() else {
                        return Err(Invalid::new(format!("{key}.servers"), "expected server names (strings)"));
                    };
                    if config.server(name).is_none() {
                        return Err(Invalid::new(format!("{key}.servers"), format!("no server is named `{name}`")));
                    }
                    list.push(name.to_string());
                }
                Some(list)
            }
            Some(other) => {
                return Err(Invalid::new(
                    format!("{key}.servers"),
                    format!("expected an array, found {}", kind(other)),
                ));
            }
        };
        keys.refuse_unknown()?;
        out.push(Token { token, name, servers });
    }
    Ok(out)
}

fn servers(
    value: Option<&Value>,
    order: Vec<String>,
    env: &dyn Fn(&str) -> Option<String>,
    trust: &Trust,
) -> Result<Vec<ServerConfig>, Invalid> {
    let key = "mcpServers";
    let map = match value {
        None => return Err(Invalid::new(key, "missing: name at least one server")),
        Some(Value::Object(map)) => map,
        Some(other) => return Err(Invalid::new(key, format!("expected an object of servers, found {}", kind(other)))),
    };
    if map.is_empty() {
        return Err(Invalid::new(key, "empty: name at least one server"));
    }
    let mut out = Vec::with_capacity(map.len());
    for name in order {
        out.push(server(&name, &map[&name], env, trust)?);
    }
    Ok(out)
}

/// The server names in the order the file gives them (serde_json's map is
/// sorted), so that "the first configured server wins" means what it says.
fn server_order(text: &str) -> Result<Vec<String>, Invalid> {
    use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};

    struct Names(Vec<String>);
    impl<'de> serde::Deserialize<'de> for Names {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Names, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Names;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("an object of servers")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Names, A::Error> {
                    let mut names: Vec<String> = Vec::new();
                    while let Some(name) = map.next_key::<String>()? {
                        map.next_value::<IgnoredAny>()?;
                        if names.contains(&name) {
                            return Err(serde::de::Error::custom(format!("server `{name}` is named twice")));
                        }
                        names.push(name);
                    }
                    Ok(Names(names))
                }
            }
            d.deserialize_map(V)
        }
    }
    #[derive(serde::Deserialize)]
    struct Root {
        #[serde(rename = "mcpServers", alias = "servers")]
        servers: Option<Names>,
    }
    let root: Root = serde_json::from_str(text).map_err(|e| Invalid::new("mcpServers".to_string(), e.to_string()))?;
    Ok(root.servers.map(|n| n.0).unwrap_or_default())
}

fn server(
    name: &str,
    value: &Value,
    env: &dyn Fn(&str) -> Option<String>,
    trust: &Trust,
) -> Result<ServerConfig, Invalid> {
    let path = format!("mcpServers.{name}");
    if !valid_name(name) {
        return Err(Invalid::new(path, "a server name is 1 to 64 of A-Z a-z 0-9 _ . -"));
    }
    let Value::Object(map) = value else {
        return Err(Invalid::new(path, format!("expected an object, found {}", kind(value))));
    };
    if map.contains_key("command") && map.contains_key("url") {
        return Err(Invalid::new(
            format!("{path}.command"),
            "give `url` (a Streamable HTTP server) or `command` (a stdio server), not both",
        ));
    }
    let mut keys = Keys::new(map, &path, "mcpServers.<name>");
    let mut secrets = Vec::new();
    let stdio = map.contains_key("command");
    let mut sse = false;
    if let Some(kind) = keys.string("type")? {
        match kind.as_str() {
            "http" | "streamable-http" | "streamableHttp" if !stdio => {}
            "sse" if !stdio => sse = true,
            "stdio" if stdio => {}
            other => {
                let expected = if stdio { "`stdio` with `command`" } else { "`http` or `sse` with `url`" };
                return Err(Invalid::new(
                    format!("{path}.type"),
                    format!("transport `{other}` does not fit: expected {expected}"),
                ));
            }
        }
    }
    let transport = if stdio {
        Transport::Stdio(stdio_config(&mut keys, &path, env, &mut secrets)?)
    } else if sse {
        let http = http_config(&mut keys, &path, env, &mut secrets, trust)?;
        if http.oauth.is_some() {
            return Err(Invalid::new(
                format!("{path}.oauth"),
                "is for Streamable HTTP servers, not `\"type\": \"sse\"`",
            ));
        }
        Transport::Sse(http)
    } else {
        Transport::Http(http_config(&mut keys, &path, env, &mut secrets, trust)?)
    };
    let prefix = keys.string("prefix")?.unwrap_or_else(|| name.to_string());
    if !prefix.is_empty() && (!valid_name(&prefix) || prefix.contains("__")) {
        return Err(Invalid::new(
            format!("{path}.prefix"),
            "a prefix is empty, or 1 to 64 of A-Z a-z 0-9 _ . - without `__`",
        ));
    }
    let separator = keys.string("separator")?.unwrap_or_else(|| SEPARATOR.into());
    if separator.is_empty() || separator.len() > 8 || separator.chars().any(|c| c.is_control() || c == ' ') {
        return Err(Invalid::new(format!("{path}.separator"), "a separator is 1 to 8 visible characters"));
    }
    let tools = filter(keys.take("tools"), &format!("{path}.tools"))?;
    let prompts = filter(keys.take("prompts"), &format!("{path}.prompts"))?;
    let resources = filter(keys.take("resources"), &format!("{path}.resources"))?;
    let rate_limit = keys
        .take("rate_limit")
        .map(|v| rate(v, &format!("{path}.rate_limit"), "mcpServers.<name>.rate_limit"))
        .transpose()?;
    keys.refuse_unknown()?;
    Ok(ServerConfig {
        name: name.to_string(),
        transport,
        prefix,
        separator,
        tools,
        prompts,
        resources,
        secrets,
        rate_limit: NotCompared(rate_limit),
    })
}

/// `url` and `headers`: a server reached over HTTP.
fn http_config(
    keys: &mut Keys<'_>,
    path: &str,
    env: &dyn Fn(&str) -> Option<String>,
    secrets: &mut Vec<String>,
    trust: &Trust,
) -> Result<HttpConfig, Invalid> {
    let url_key = format!("{path}.url");
    let url = keys.string("url")?.ok_or_else(|| Invalid::new(url_key.clone(), "missing: give `url` or `command`"))?;
    let url = expand(&url, env, secrets).map_err(|p| Invalid::new(url_key.clone(), p))?;
    check_url(&url).map_err(|p| Invalid::new(url_key, p))?;
    let mut headers = Vec::new();
    if let Some(value) = keys.take("headers") {
        let Value::Object(map) = value else {
            return Err(Invalid::new(format!("{path}.headers"), format!("expected an object, found {}", kind(value))));
        };
        for (header, value) in map {
            let key = format!("{path}.headers.{header}");
            if !valid_header_name(header) {
                return Err(Invalid::new(key, "not a valid HTTP header name"));
            }
            let Value::String(value) = value else {
                return Err(Invalid::new(key, format!("expected a string, found {}", kind(value))));
            };
            let value = expand(value, env, secrets).map_err(|p| Invalid::new(key.clone(), p))?;
            if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                return Err(Invalid::new(key, "contains a line break or NUL"));
            }
            if value.len() >= MIN_SECRET {
                secrets.push(value.clone());
            }
            headers.push((header.clone(), value));
        }
    }
    let trust = match keys.string("ca_file")? {
        Some(file) => trust.with_ca_file(&file, &format!("{path}.ca_file"))?,
        None => trust.clone(),
    };
    let oauth = match keys.take("oauth") {
        Some(value) => Some(oauth_client::server_oauth(value, path, env, secrets)?),
        None => None,
    };
    Ok(HttpConfig { url, headers, trust, oauth })
}

/// `command`, `args`, `env`, `cwd`: a stdio server, as Claude Desktop,
/// Cursor and VS Code write it.
fn stdio_config(
    keys: &mut Keys<'_>,
    path: &str,
    env: &dyn Fn(&str) -> Option<String>,
    secrets: &mut Vec<String>,
) -> Result<StdioConfig, Invalid> {
    let command_key = format!("{path}.command");
    let command = keys.string("command")?.ok_or_else(|| Invalid::new(command_key.clone(), "missing"))?;
    let command = expand(&command, env, secrets).map_err(|p| Invalid::new(command_key.clone(), p))?;
    if command.trim().is_empty() || command.contains('\0') {
        return Err(Invalid::new(command_key, "expected a program name or path"));
    }
    let mut args = Vec::new();
    for (i, arg) in keys.strings("args")?.iter().enumerate() {
        let key = format!("{path}.args[{i}]");
        let arg = expand(arg, env, secrets).map_err(|p| Invalid::new(key.clone(), p))?;
        if arg.contains('\0') {
            return Err(Invalid::new(key, "contains NUL"));
        }
        args.push(arg);
    }
    let mut child_env = Vec::new();
    if let Some(value) = keys.take("env") {
        let Value::Object(map) = value else {
            return Err(Invalid::new(
                format!("{path}.env"),
                format!("expected an object of strings, found {}", kind(value)),
            ));
        };
        for (name, value) in map {
            let key = format!("{path}.env.{name}");
            if name.is_empty() || name.contains(['=', '\0']) {
                return Err(Invalid::new(key, "not a valid environment variable name"));
            }
            let Value::String(value) = value else {
                return Err(Invalid::new(key, format!("expected a string, found {}", kind(value))));
            };
            let value = expand(value, env, secrets).map_err(|p| Invalid::new(key.clone(), p))?;
            if value.contains('\0') {
                return Err(Invalid::new(key, "contains NUL"));
            }
            // A key pasted as it is (Claude Desktop's own examples do) is as secret as one from
            // `${VAR}`: an error quoting the server's stderr must not show it.
            if value.len() >= MIN_SECRET {
                secrets.push(value.clone());
            }
            child_env.push((name.clone(), value));
        }
    }
    let cwd = keys.string("cwd")?.map(PathBuf::from);
    let sharing = match keys.string("sharing")?.as_deref() {
        None | Some("user") => Sharing::User,
        Some("session") => Sharing::Session,
        Some("shared") => Sharing::Shared,
        Some(other) => {
            return Err(Invalid::new(
                format!("{path}.sharing"),
                format!("`{other}` is not `user`, `session` or `shared`"),
            ));
        }
    };
    let start = match keys.string("start")?.as_deref() {
        None | Some("lazy") => Start::Lazy,
        Some("eager") if sharing == Sharing::Session => {
            return Err(Invalid::new(
                format!("{path}.start"),
                "`eager` starts a process shared by sessions: not with `\"sharing\": \"session\"`",
            ));
        }
        Some("eager") => Start::Eager,
        Some(other) => {
            return Err(Invalid::new(format!("{path}.start"), format!("`{other}` is not `lazy` or `eager`")));
        }
    };
    let max_processes = keys.number("max_processes")?.map(|n| n as usize);
    Ok(StdioConfig { command, args, env: child_env, cwd, sharing, start, passthrough: Vec::new(), max_processes })
}

/// `env_passthrough`: a list of variable names, each maybe ending in `*`.
fn env_patterns(value: &Value) -> Result<Vec<String>, Invalid> {
    let key = "env_passthrough";
    let Value::Array(items) = value else {
        return Err(Invalid::new(key, format!("expected a list of variable names, found {}", kind(value))));
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let name = item.as_str().unwrap_or_default();
        let bare = name.strip_suffix('*').unwrap_or(name);
        if bare.is_empty() || !bare.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(Invalid::new(
                format!("{key}[{i}]"),
                format!("{item} is not a variable name, or a prefix of one followed by `*`"),
            ));
        }
        out.push(name.to_string());
    }
    Ok(out)
}

/// A section of the file that is an object (`key`, like `example`), or
/// `empty` when it is not given.
fn section<'a>(
    value: Option<&'a Value>,
    empty: &'a Map<String, Value>,
    key: &str,
    example: &str,
) -> Result<&'a Map<String, Value>, Invalid> {
    match value {
        None => Ok(empty),
        Some(Value::Object(map)) => Ok(map),
        Some(other) => {
            Err(Invalid::new(key.to_string(), format!("expected an object such as {example}, found {}", kind(other))))
        }
    }
}

/// `tool_search`: `enabled`, `pinned`, `max_results`.
fn tool_search(value: Option<&Value>) -> Result<ToolSearch, Invalid> {
    let empty = Map::new();
    let map = section(value, &empty, "tool_search", r#"{"enabled": true}"#)?;
    let mut keys = Keys::new(map, "tool_search", "tool_search");
    let search = ToolSearch {
        enabled: keys.flag("enabled")?,
        pinned: keys.strings("pinned")?,
        max_results: keys.count("max_results")?,
    };
    keys.refuse_unknown()?;
    Ok(search)
}

/// `audit`: its file, rotation, journal and arguments.
fn audit(value: &Value) -> Result<AuditConfig, Invalid> {
    let Value::Object(map) = value else {
        return Err(Invalid::new(
            "audit",
            format!("expected an object such as {{\"file\": \"/var/log/mcpgate/audit.jsonl\"}}, found {}", kind(value)),
        ));
    };
    let mut keys = Keys::new(map, "audit", "audit");
    let file = keys.string("file")?.map(PathBuf::from);
    let journal = keys.flag("journal")?;
    if file.is_none() && !journal {
        return Err(Invalid::new("audit.file", "missing: give `file`, or `\"journal\": true`, or both"));
    }
    if let Some(dir) = file.as_ref().and_then(|f| f.parent()).filter(|d| !d.as_os_str().is_empty())
        && !dir.is_dir()
    {
        return Err(Invalid::new("audit.file", format!("its directory {} does not exist", dir.display())));
    }
    let redact = if keys.present("redact") {
        keys.strings("redact")?
    } else {
        let _ = keys.take("redact");
        REDACTED_BY_DEFAULT.iter().map(|s| s.to_string()).collect()
    };
    let config = AuditConfig {
        file,
        max_bytes: keys.number("max_bytes")?.unwrap_or(10 << 20),
        files: keys.count("files")?,
        journal,
        arguments: keys.flag("arguments")?,
        redact,
    };
    keys.refuse_unknown()?;
    Ok(config)
}

/// The keys whose values the audit log and spans never keep, by default.
pub(crate) const REDACTED_BY_DEFAULT: [&str; 8] =
    ["password", "passwd", "secret", "token", "key", "authorization", "cookie", "credential"];

/// `tracing`: the receiver, the ratio, the resource's name, what spans carry.
fn tracing(value: &Value) -> Result<TracingConfig, Invalid> {
    let Value::Object(map) = value else {
        return Err(Invalid::new(
            "tracing",
            format!("expected an object such as {{\"endpoint\": \"http://127.0.0.1:4318\"}}, found {}", kind(value)),
        ));
    };
    let mut keys = Keys::new(map, "tracing", "tracing");
    let Some(endpoint) = keys.string("endpoint")? else {
        return Err(Invalid::new("tracing.endpoint", "missing: the OTLP/HTTP receiver, e.g. http://127.0.0.1:4318"));
    };
    if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
        return Err(Invalid::new("tracing.endpoint", format!("`{endpoint}` is not an http:// or https:// URL")));
    }
    let sample_per_million = match keys.take("sample_ratio") {
        None => 1_000_000,
        Some(value) => match value.as_f64() {
            Some(ratio) if (0.0..=1.0).contains(&ratio) => (ratio * 1e6).round() as u32,
            _ => {
                return Err(Invalid::new(
                    "tracing.sample_ratio",
                    format!("expected a number from 0 to 1, found {value}"),
                ));
            }
        },
    };
    let service_name = keys.string("service_name")?.unwrap_or_else(|| "mcpgate".into());
    if service_name.is_empty() {
        return Err(Invalid::new("tracing.service_name", "empty: give a name, or leave the key out"));
    }
    let config = TracingConfig {
        endpoint,
        sample_per_million,
        service_name,
        capture_arguments: keys.flag("capture_arguments")?,
        capture_results: keys.flag("capture_results")?,
        redact: REDACTED_BY_DEFAULT.iter().map(|s| s.to_string()).collect(),
        max_queue: keys.count("max_queue")?,
        export_timeout: Duration::from_millis(keys.count("export_timeout_ms")? as u64),
    };
    keys.refuse_unknown()?;
    Ok(config)
}

/// `rate_limit`: per user, per tool, single tools, and the bound on buckets.
fn rate_limits(value: Option<&Value>) -> Result<RateLimits, Invalid> {
    let empty = Map::new();
    let map = section(value, &empty, "rate_limit", r#"{"per_user": {"per_minute": 600}}"#)?;
    let mut keys = Keys::new(map, "rate_limit", "rate_limit");
    let per_user = keys.take("per_user").map(|v| rate(v, "rate_limit.per_user", "rate_limit.per_user")).transpose()?;
    let per_tool = keys.take("per_tool").map(|v| rate(v, "rate_limit.per_tool", "rate_limit.per_tool")).transpose()?;
    let mut tools = BTreeMap::new();
    if let Some(value) = keys.take("tools") {
        let Value::Object(map) = value else {
            return Err(Invalid::new(
                "rate_limit.tools",
                format!("expected an object of tool names, found {}", kind(value)),
            ));
        };
        for (name, value) in map {
            tools.insert(name.clone(), rate(value, &format!("rate_limit.tools.{name}"), "rate_limit.tools.<tool>")?);
        }
    }
    let max_buckets = keys.count("max_buckets")?;
    keys.refuse_unknown()?;
    Ok(RateLimits { enabled: false, per_user, per_tool, tools, max_buckets })
}

/// `{"per_minute": N, "burst": M}` at `path` (documented at `doc`).
fn rate(value: &Value, path: &str, doc: &'static str) -> Result<Rate, Invalid> {
    let Value::Object(map) = value else {
        return Err(Invalid::new(
            path.to_string(),
            format!("expected an object such as {{\"per_minute\": 60, \"burst\": 10}}, found {}", kind(value)),
        ));
    };
    let mut keys = Keys::new(map, path, doc);
    let per_minute = keys.number("per_minute")?.ok_or_else(|| Invalid::new(format!("{path}.per_minute"), "missing"))?;
    let burst = keys.number("burst")?.unwrap_or((per_minute / 10).max(1));
    keys.refuse_unknown()?;
    Ok(Rate { per_minute, burst })
}

/// `{"allow": [...], "deny": [...]}`: globs over a server's own names.
fn filter(value: Option<&Value>, path: &str) -> Result<Filter, Invalid> {
    let Some(value) = value else { return Ok(Filter::default()) };
    let Value::Object(map) = value else {
        return Err(Invalid::new(
            path.to_string(),
            format!("expected an object with `allow` and/or `deny`, found {}", kind(value)),
        ));
    };
    let mut keys = Keys::new(map, path, "mcpServers.<name>.tools");
    let filter = Filter { allow: keys.strings("allow")?, deny: keys.strings("deny")? };
    keys.refuse_unknown()?;
    Ok(filter)
}

/// The shortest value of a server's `env` or `headers` taken for a secret
/// as it is written: shorter ones (`1`, `true`, a port) would mask words.
const MIN_SECRET: usize = 8;

fn check_url(url: &str) -> Result<(), String> {
    let uri: ureq::http::Uri = url.parse().map_err(|_| format!("`{url}` is not a URL"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") if cfg!(feature = "tls") => {}
        Some("https") => return Err("https:// needs mcpgate built with the `tls` feature".into()),
        _ => return Err(format!("`{url}` must start with http:// or https://")),
    }
    match uri.host() {
        Some(host) if !host.is_empty() => Ok(()),
        _ => Err(format!("`{url}` has no host")),
    }
}

fn valid_header_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Where the configuration comes from: the file, and a `--listen` given on
/// the command line, which wins over the file at start and at every reload.
#[derive(Debug, Clone)]
pub struct Source {
    pub path: PathBuf,
    pub listen: Option<SocketAddr>,
}

impl Source {
    pub fn load(&self) -> Result<Config, ConfigError> {
        let mut config = Config::load(&self.path, &|name| std::env::var(name).ok())?;
        if let Some(listen) = self.listen {
            config.listen = listen;
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::keys::{KEYS, Kind};
    use super::*;

    #[test]
    fn an_env_file_goes_beneath_env_and_its_long_values_are_secrets() {
        let dir = std::env::temp_dir().join(format!("mcpgate-config-envfile-{}", std::process::id()));
        std::fs::create_dir_all(dir.join(".cursor")).unwrap();
        std::fs::write(dir.join(".env"), "GITHUB_TOKEN=ghp_fromthefile\nLOG=debug\n").unwrap();
        let text = r#"{"mcpServers": {"gh": {"command": "npx", "envFile": ".env", "env": {"LOG": "info"}}}}"#;
        let config = Config::parse_file(text, Some(&dir.join(".cursor/mcp.json")), &|_| None).unwrap();
        let Transport::Stdio(stdio) = &config.servers[0].transport else { panic!("stdio") };
        let env: Vec<(&str, &str)> = stdio.env.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        assert_eq!(env, [("GITHUB_TOKEN", "ghp_fromthefile"), ("LOG", "info")], "`env` wins");
        assert_eq!(config.servers[0].secrets, ["ghp_fromthefile"], "long values are secrets, short ones are not");
        let _ = std::fs::remove_dir_all(&dir);
    }
    use serde_json::json;

    fn env(name: &str) -> Option<String> {
        match name {
            "TOKEN" => Some("s3cret".into()),
            "PORT" => Some("9001".into()),
            _ => None,
        }
    }

    fn parse(text: &str) -> Result<Config, Invalid> {
        Config::parse(text, &env)
    }

    #[test]
    fn example_from_the_issue_parses_with_defaults() {
        let c = parse(
            r#"{
              "listen": "127.0.0.1:8780", "workers": 8, "session_idle_timeout_secs": 300,
              "mcpServers": {
                "files": { "url": "http://127.0.0.1:${PORT}/mcp", "headers": { "Authorization": "Bearer ${TOKEN}" } },
                "search": { "url": "http://127.0.0.1:9002/mcp", "prefix": "" }
              }
            }"#,
        )
        .unwrap();
        assert_eq!(c.calls_per_server, 8);
        let old_name = parse(r#"{"workers": 3, "mcpServers": {"a": {"url": "http://x/mcp"}}}"#).unwrap();
        assert_eq!(old_name.calls_per_server, 3, "`workers` is still read");
        assert_eq!(c.keepalive, Duration::from_secs(15));
        let files = c.server("files").unwrap();
        let Transport::Http(http) = &files.transport else { panic!("files is an HTTP server") };
        assert_eq!(http.url, "http://127.0.0.1:9001/mcp");
        assert_eq!(http.headers, vec![("Authorization".into(), "Bearer s3cret".into())]);
        assert_eq!(files.prefix, "files");
        assert_eq!(c.server("search").unwrap().prefix, "");
        assert!(files.secrets.iter().any(|s| s == "s3cret"), "an expanded header value is redacted");
    }

    #[test]
    fn a_claude_desktop_block_is_a_stdio_server() {
        let c = parse(
            r#"{"mcpServers": {
              "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]},
              "gh": {"type": "stdio", "command": "gh-mcp", "env": {"GITHUB_TOKEN": "${TOKEN}"}, "cwd": "/srv",
                     "sharing": "shared", "max_processes": 2}
            }, "max_processes": 7, "stdio_grace_ms": 500, "shared_idle_secs": 30}"#,
        )
        .unwrap();
        let Transport::Stdio(files) = &c.server("files").unwrap().transport else { panic!("files is stdio") };
        assert_eq!(files.command, "npx");
        assert_eq!(files.args, ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]);
        assert_eq!((files.sharing, files.start), (Sharing::User, Start::Lazy), "one process per user, when needed");
        assert_eq!(files.max_processes, None);
        let gh = c.server("gh").unwrap();
        assert_eq!(gh.target(), "gh-mcp");
        assert_eq!(gh.url(), None);
        let Transport::Stdio(gh) = &gh.transport else { panic!("gh is stdio") };
        assert_eq!(gh.env, vec![("GITHUB_TOKEN".to_string(), "s3cret".to_string())]);
        assert_eq!(gh.cwd.as_deref(), Some(Path::new("/srv")));
        assert_eq!((gh.sharing, gh.max_processes), (Sharing::Shared, Some(2)));
        assert!(c.server("gh").unwrap().secrets.iter().any(|s| s == "s3cret"), "an expanded env value is redacted");
        assert_eq!(
            (c.max_processes, c.stdio_grace, c.shared_idle),
            (7, Duration::from_millis(500), Duration::from_secs(30))
        );
    }

    #[test]
    fn env_passthrough_passes_names_and_prefixes_and_refuses_what_is_no_name() {
        let c = parse(r#"{"mcpServers": {"a": {"command": "x"}}}"#).unwrap();
        let Transport::Stdio(a) = &c.server("a").unwrap().transport else { panic!("a is stdio") };
        for name in ["SSL_CERT_FILE", "HTTPS_PROXY", "https_proxy", "npm_config_cache", "UV_CACHE_DIR"] {
            assert!(passes(&a.passthrough, name), "{name} by default");
        }
        for name in ["GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "UVX", "npm"] {
            assert!(!passes(&a.passthrough, name), "{name} by default");
        }
        let c = parse(r#"{"env_passthrough": ["MY_*", "ONE"], "mcpServers": {"a": {"command": "x"}}}"#).unwrap();
        let Transport::Stdio(a) = &c.server("a").unwrap().transport else { panic!("a is stdio") };
        assert!(
            passes(&a.passthrough, "MY_CA") && passes(&a.passthrough, "ONE") && !passes(&a.passthrough, "ONE_MORE")
        );
        assert!(!passes(&a.passthrough, "SSL_CERT_FILE"), "a list given replaces the default");
        let e = parse(r#"{"env_passthrough": ["A B"], "mcpServers": {"a": {"command": "x"}}}"#).unwrap_err();
        assert!(e.to_string().contains("env_passthrough[0]"), "{e}");
    }

    #[test]
    fn a_pasted_sse_server_is_the_old_http_sse_transport() {
        let c = parse(
            r#"{"mcpServers": {
              "old": {"type": "sse", "url": "https://host.example/sse", "headers": {"Authorization": "Bearer ${TOKEN}"},
                      "prefix": "o", "tools": {"deny": ["rm_*"]}},
              "new": {"type": "streamableHttp", "url": "https://host.example/mcp"}
            }}"#,
        )
        .unwrap();
        let old = c.server("old").unwrap();
        let Transport::Sse(http) = &old.transport else { panic!("old is HTTP+SSE: {:?}", old.transport) };
        assert_eq!(http.url, "https://host.example/sse");
        assert_eq!(http.headers, vec![("Authorization".into(), "Bearer s3cret".into())]);
        assert_eq!((old.url(), old.prefix.as_str()), (Some("https://host.example/sse"), "o"));
        assert!(old.secrets.iter().any(|s| s == "s3cret"), "an expanded header value is redacted");
        assert!(matches!(c.server("new").unwrap().transport, Transport::Http(_)));
        assert_eq!(c.thread_budget().iter().find(|b| b.group == "readers").map(|b| b.threads), Some(2 * 1024));
    }
    #[test]
    fn comments_and_trailing_commas_are_read_as_vs_code_reads_them() {
        let c = parse("{\n  // two servers\n  \"mcpServers\": {\"b\": {\"url\": \"http://b\"}, /* and */ \"a\": {\"url\": \"http://a\",},},\n}")
            .unwrap();
        let names: Vec<&str> = c.servers.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["b", "a"], "the order of the file, read past the comments");
    }

    #[test]
    fn servers_keep_the_order_of_the_file() {
        let c = parse(r#"{"mcpServers": {"zeta": {"url": "http://z"}, "alpha": {"url": "http://a"}}}"#).unwrap();
        let names: Vec<&str> = c.servers.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["zeta", "alpha"]);
        let Invalid { key, problem } =
            parse(r#"{"mcpServers": {"a": {"url": "http://z"}, "a": {"url": "http://a"}}}"#).unwrap_err();
        assert_eq!(key, "mcpServers");
        assert!(problem.contains("named twice"), "{problem}");
    }

    #[test]
    fn every_refusal_names_the_key_and_the_problem() {
        let cases = [
            (r#"{"mcpServers": {"a": {"url": "http://x/mcp"}}, "wrokers": 2}"#, "wrokers", "unknown key"),
            (r#"{"mcpServers": {"a": {"url": "http://x/mcp"}}, "workers": "8"}"#, "workers", "expected a whole number"),
            (r#"{"mcpServers": {"a": {"url": "http://x/mcp"}}, "workers": 0}"#, "workers", "out of range"),
            (r#"{"mcpServers": {"a": {"url": "ftp://x/mcp"}}}"#, "mcpServers.a.url", "must start with http"),
            (r#"{"mcpServers": {"a": {"url": "http://x/${NOPE}"}}}"#, "mcpServers.a.url", "`NOPE` is not set"),
            (r#"{"mcpServers": {"a": {"url": "http://x/mcp", "color": 1}}}"#, "mcpServers.a.color", "unknown key"),
            (r#"{"mcpServers": {"a": {"command": "npx", "url": "http://x"}}}"#, "mcpServers.a.command", "not both"),
            (r#"{"mcpServers": {"a": {"command": ""}}}"#, "mcpServers.a.command", "a program name"),
            (r#"{"mcpServers": {"a": {"command": "x", "args": "y"}}}"#, "mcpServers.a.args", "expected"),
            (r#"{"mcpServers": {"a": {"command": "x", "args": ["${NOPE}"]}}}"#, "mcpServers.a.args[0]", "`NOPE`"),
            (r#"{"mcpServers": {"a": {"command": "x", "env": {"K": 1}}}}"#, "mcpServers.a.env.K", "expected a string"),
            (r#"{"mcpServers": {"a": {"command": "x", "env": {"A=B": "1"}}}}"#, "mcpServers.a.env.A=B", "not a valid"),
            (
                r#"{"mcpServers": {"a": {"command": "x", "sharing": "all"}}}"#,
                "mcpServers.a.sharing",
                "`user`, `session` or",
            ),
            (r#"{"mcpServers": {"a": {"command": "x", "start": "now"}}}"#, "mcpServers.a.start", "`lazy` or `eager`"),
            (
                r#"{"mcpServers": {"a": {"command": "x", "sharing": "session", "start": "eager"}}}"#,
                "mcpServers.a.start",
                "not with",
            ),
            (r#"{"mcpServers": {"a": {"command": "x", "max_processes": 0}}}"#, "mcpServers.a.max_processes", "1 to"),
            (r#"{"mcpServers": {"a": {"command": "x", "type": "http"}}}"#, "mcpServers.a.type", "`stdio` with"),
            (
                r#"{"mcpServers": {"a": {"url": "http://x", "type": "stdio"}}}"#,
                "mcpServers.a.type",
                "`http` or `sse` with",
            ),
            (r#"{"mcpServers": {"a": {"command": "x", "headers": {}}}}"#, "mcpServers.a.headers", "unknown key"),
            (r#"{"mcpServers": {"a": {}}}"#, "mcpServers.a.url", "give `url` or `command`"),
            (r#"{"mcpServers": {"a": {"command": "x", "type": "sse"}}}"#, "mcpServers.a.type", "`stdio` with"),
            (r#"{"mcpServers": {"a": {"url": "ftp://x/sse", "type": "sse"}}}"#, "mcpServers.a.url", "http://"),
            (r#"{"mcpServers": {"a": {"url": "http://x", "prefix": "a__b"}}}"#, "mcpServers.a.prefix", "without `__`"),
            (r#"{"mcpServers": {}}"#, "mcpServers", "empty"),
            (r#"{"listen": "localhost"}"#, "listen", "not an address"),
            (r#"{}"#, "mcpServers", "missing"),
            (r#"[1]"#, "", "expected a JSON object"),
            (r#"{"mcpServers": "#, "", "not valid JSON"),
            ("{\n  // the servers\n  \"mcpServers\": {\"a\": {\"url\": \"http://x\"} \"b\": {}}}", "", "at line 3"),
            ("{/* the servers", "", "`/*` comment at line 1 is never closed"),
        ];
        for (text, key, problem) in cases {
            let Invalid { key: k, problem: p } = parse(text).expect_err(text);
            assert_eq!(k, key, "{text}");
            assert!(p.contains(problem), "{text}: {p}");
        }
    }

    #[test]
    fn a_token_may_have_a_name_for_the_status_page() {
        let c = parse(
            r#"{"mcpServers": {"a": {"url": "http://x/mcp"}},
                "auth": {"tokens": [{"token": "0123456789abcdefXYZ", "name": "laptop"}, {"token": "${TOKEN}-0123456789"}]}}"#,
        )
        .unwrap();
        let tokens = c.tokens.unwrap();
        assert_eq!(tokens[0].name.as_deref(), Some("laptop"));
        assert_eq!(tokens[1].name, None);
        assert_eq!(format!("{:?}", tokens[0]), "Token(***, name: Some(\"laptop\"), servers: None)");
        for (name, problem) in [("\"\"", "1 to 64"), ("\"a\\nb\"", "control"), ("7", "expected a string")] {
            let text = format!(
                r#"{{"mcpServers": {{"a": {{"url": "http://x/mcp"}}}}, "auth": {{"tokens": [{{"token": "0123456789abcdefXYZ", "name": {name}}}]}}}}"#
            );
            let Invalid { key, problem: p } = parse(&text).expect_err(&text);
            assert_eq!(key, "auth.tokens[0].name", "{text}");
            assert!(p.contains(problem), "{text}: {p}");
        }
        let long = format!("\"{}\"", "x".repeat(65));
        let text = format!(
            r#"{{"mcpServers": {{"a": {{"url": "http://x/mcp"}}}}, "auth": {{"tokens": [{{"token": "0123456789abcdefXYZ", "name": {long}}}]}}}}"#
        );
        assert!(parse(&text).unwrap_err().problem.contains("1 to 64"));
    }

    #[test]
    fn the_thread_budget_names_known_roles_each_in_one_group() {
        let c = parse(r#"{"mcpServers": {"a": {"url": "http://x/mcp"}, "b": {"command": "x"}}}"#).unwrap();
        let budget = c.thread_budget();
        let mut roles: Vec<&str> = budget.iter().flat_map(|b| b.roles.iter().copied()).collect();
        for role in &roles {
            assert!(*role == "other" || crate::runtime::threads::ROLES.contains(role), "`{role}` is no thread role");
        }
        let all = roles.len();
        roles.sort_unstable();
        roles.dedup();
        assert_eq!(roles.len(), all, "a role in two groups: {budget:?}");
        assert_eq!(budget.iter().find(|b| b.group == "connections").map(|b| b.threads), Some(c.max_connections));
    }

    #[test]
    fn load_error_names_the_file() {
        let e = Config::load(Path::new("/nonexistent/mcpgate.json"), &env).unwrap_err();
        assert!(e.to_string().starts_with("/nonexistent/mcpgate.json: cannot read"), "{e}");
    }

    #[test]
    fn expand_leaves_plain_dollars_alone() {
        let mut secrets = Vec::new();
        assert_eq!(expand("a$b ${PORT}$", &env, &mut secrets).unwrap(), "a$b 9001$");
        assert_eq!(secrets, vec!["9001".to_string()]);
        assert!(expand("${unterminated", &env, &mut secrets).is_err());
        assert!(expand("${9X}", &env, &mut secrets).is_err());
    }

    /// A config that sets every key of the reference: numbers and flags at
    /// their documented defaults, the others to a sample value. It must
    /// parse (every documented key is read: none is refused as unknown),
    /// and the documented defaults must give the config an empty file gives.
    #[test]
    fn every_documented_key_is_read_and_its_default_is_the_parsers() {
        let (ca, env_file) = (test_ca_file(), test_env_file());
        let samples: &[(&str, Value)] = &[
            ("listen", json!("127.0.0.1:8780")),
            ("allowed_origins", json!([])),
            ("allowed_hosts", json!([])),
            ("auth", json!({})),
            ("auth.tokens", json!([{"token": "0123456789abcdefXYZ", "servers": ["a"]}])),
            ("auth.tokens[].token", json!("0123456789abcdefXYZ")),
            ("auth.tokens[].servers", json!(["a"])),
            ("auth.tokens[].name", json!("laptop")),
            ("auth.tokens_file", json!(null)),
            ("state_file", json!("/tmp/mcpgate-test-state.json")),
            ("instance_id", json!("gw-1")),
            ("peer_url", json!("http://10.0.0.5:8780")),
            ("tool_search", json!({})),
            ("tool_search.pinned", json!(["a__*"])),
            ("mcpServers", json!({})),
            ("env_passthrough", json!(["SSL_CERT_FILE", "npm_config_*"])),
            ("audit", json!({})),
            ("audit.file", json!(std::env::temp_dir().join("mcpgate-config-test-audit.jsonl"))),
            ("audit.redact", json!(["password"])),
            ("rate_limit", json!({})),
            ("tracing", json!({})),
            ("tracing.endpoint", json!("http://127.0.0.1:4318")),
            ("tracing.sample_ratio", json!(0.01)),
            ("tracing.service_name", json!("gate")),
            ("rate_limit.per_user", json!({})),
            ("rate_limit.per_tool", json!({})),
            ("rate_limit.tools", json!({})),
            ("mcpServers.<name>.rate_limit", json!({})),
            ("mcpServers.<name>.url", json!("http://127.0.0.1:9/mcp")),
            ("mcpServers.<name>.headers", json!({"X-A": "b"})),
            ("mcpServers.<name>.command", json!("mcp-server")),
            ("mcpServers.<name>.args", json!(["--stdio"])),
            ("mcpServers.<name>.env", json!({"A": "b"})),
            ("mcpServers.<name>.cwd", json!("/tmp")),
            ("mcpServers.<name>.envFile", json!(env_file.path())),
            ("mcpServers.<name>.sharing", json!("shared")),
            ("mcpServers.<name>.start", json!("eager")),
            ("mcpServers.<name>.prefix", json!("a")),
            ("mcpServers.<name>.separator", json!("__")),
            ("mcpServers.<name>.tools", json!({})),
            ("mcpServers.<name>.tools.allow", json!(["*"])),
            ("mcpServers.<name>.tools.deny", json!([])),
            ("mcpServers.<name>.prompts", json!({"allow": ["*"]})),
            ("mcpServers.<name>.resources", json!({"deny": ["x"]})),
            ("mcpServers.<name>.type", json!("http")),
            ("mcpServers.<name>.ca_file", json!(ca.path())),
            ("ca_file", json!(ca.path())),
            ("trust_store", json!("bundled")),
            ("tls", json!({})),
            ("tls.cert_file", json!("/etc/mcpgate/cert.pem")),
            ("tls.key_file", json!("/etc/mcpgate/key.pem")),
            ("auth.oauth", json!({})),
            ("auth.oauth.issuer", json!("https://idp.example.com/realms/x")),
            ("auth.oauth.jwks_uri", json!("https://idp.example.com/realms/x/certs")),
            ("auth.oauth.resource", json!("https://gate.example.com/mcp")),
            ("auth.oauth.audiences", json!(["https://gate.example.com/mcp", "mcpgate"])),
            ("auth.oauth.scopes_supported", json!(["mcp", "files"])),
            ("auth.oauth.required_scopes", json!(["mcp"])),
            ("auth.oauth.server_scopes", json!({"a": "files"})),
            ("auth.oauth.introspection", json!({})),
            ("auth.oauth.introspection.url", json!("https://idp.example.com/realms/x/introspect")),
            ("auth.oauth.introspection.client_id", json!("mcpgate")),
            ("auth.oauth.introspection.client_secret", json!("secret")),
            ("oauth_client", json!({})),
            ("oauth_client.public_url", json!("https://gate.example.com")),
            ("oauth_client.key_file", json!("/etc/mcpgate/oauth.key")),
            ("oauth_client.store_file", json!("/var/lib/mcpgate/oauth")),
            ("oauth_client.ask", json!("elicitation")),
            ("oauth_client.client_id", json!("mcpgate")),
            ("oauth_client.client_secret", json!("secret")),
            ("mcpServers.<name>.oauth", json!({})),
            ("mcpServers.<name>.oauth.client_id", json!("mcpgate")),
            ("mcpServers.<name>.oauth.client_secret", json!("secret")),
            ("mcpServers.<name>.oauth.scopes", json!(["read"])),
            ("mcpServers.<name>.oauth.authorization_server", json!("https://as.example.com")),
            ("mcpServers.<name>.oauth.resource", json!("https://mcp.example.com/mcp")),
            ("mcpServers.<name>.oauth.audience", json!("https://mcp.example.com")),
            ("mcpServers.<name>.oauth.client_metadata_url", json!("https://gate.example.com/c.json")),
        ];
        // An exchange (for `audience`) on `a`; a metadata document (not with a client id) on `c`.
        let bare =
            parse(&json!({"mcpServers": {"a": {"url": "http://127.0.0.1:9/mcp"}, "b": {"command": "x"}}}).to_string())
                .unwrap();
        let mut root = json!({"mcpServers": {
            "a": {"url": "http://127.0.0.1:9/mcp", "oauth": {"token_exchange": true}},
            "b": {"command": "x"},
            "c": {"url": "http://127.0.0.1:9/mcp", "oauth": {"client_metadata_url": "https://gate.example.com/c.json"}},
        }});
        // Refused with `state_file`: `instance_id_is_a_short_token_and_state_dir_needs_it` reads them.
        for key in KEYS.iter().filter(|k| k.name != "state_dir" && k.name != "store") {
            let value = match key.kind {
                Kind::Number { default: Some(n), .. } => json!(n),
                Kind::Number { default: None, min, .. } => json!(min),
                Kind::Flag(b) => json!(b),
                Kind::Other(_) => samples
                    .iter()
                    .find(|(name, _)| *name == key.name)
                    .unwrap_or_else(|| panic!("`{}`: give it a sample value in this test", key.name))
                    .1
                    .clone(),
            };
            // Where the key goes: top level, in `auth`, in a token, in a server or its filter.
            let at = match key.name.split_once('.') {
                None => &mut root[key.name],
                Some(("auth", "tokens[].token" | "tokens[].servers" | "tokens[].name"))
                | Some(("auth", "tokens_file"))
                | Some(("mcpServers", "<name>.oauth.client_metadata_url")) => continue,
                Some((
                    top @ ("auth" | "tls" | "tool_search" | "audit" | "rate_limit" | "tracing" | "oauth_client"),
                    rest,
                )) => rest.split('.').fold(&mut root[top], |at, part| &mut at[part]),
                Some(("mcpServers", rest)) => match rest.trim_start_matches("<name>.").split_once('.') {
                    _ if rest == "<name>" => continue,
                    None => {
                        let name = rest.trim_start_matches("<name>.");
                        let stdio = ["command", "args", "env", "envFile", "cwd", "sharing", "start", "max_processes"];
                        let server = if stdio.contains(&name) { "b" } else { "a" };
                        &mut root["mcpServers"][server][name]
                    }
                    Some((filter, rule)) => &mut root["mcpServers"]["a"][filter][rule],
                },
                Some(_) => panic!("`{}`: where does it go?", key.name),
            };
            if at.is_null() {
                *at = value;
            }
        }
        let full = parse(&root.to_string()).unwrap_or_else(|e| panic!("{e:?} in {root:#}"));
        // The numbers and flags at their documented defaults change nothing.
        let mut defaults = json!({"mcpServers": {"a": {"url": "http://127.0.0.1:9/mcp"}, "b": {"command": "x"}}});
        for key in KEYS.iter().filter(|k| !k.name.contains('.') && k.name != "workers") {
            match key.kind {
                Kind::Number { default: Some(n), .. } => defaults[key.name] = json!(n),
                Kind::Flag(b) => defaults[key.name] = json!(b),
                _ => {}
            }
        }
        let documented = parse(&defaults.to_string()).unwrap();
        assert_eq!(format!("{documented:?}"), format!("{bare:?}"), "a documented default differs from the parser's");
        assert!(full.tokens.is_some() && full.server("b").is_some_and(|b| b.url().is_none()));
    }

    #[test]
    fn tool_search_is_off_by_default_and_names_what_is_wrong() {
        let base = |extra: &str| format!(r#"{{"mcpServers": {{"a": {{"url": "http://127.0.0.1:9/mcp"}}}}{extra}}}"#);
        let off = parse(&base("")).unwrap().tool_search;
        assert_eq!((off.enabled, off.pinned.len(), off.max_results), (false, 0, 8));
        let on = parse(&base(r#", "tool_search": {"enabled": true, "pinned": ["a__x", "b__*"], "max_results": 3}"#))
            .unwrap()
            .tool_search;
        assert_eq!(on, ToolSearch { enabled: true, pinned: vec!["a__x".into(), "b__*".into()], max_results: 3 });
        for (extra, key, says) in [
            (r#", "tool_search": true"#, "tool_search", "expected an object"),
            (r#", "tool_search": {"enabled": "yes"}"#, "tool_search.enabled", "true or false"),
            (r#", "tool_search": {"max_results": 0}"#, "tool_search.max_results", "out of range 1 to 50"),
            (r#", "tool_search": {"pinned": "a__*"}"#, "tool_search.pinned", "array of strings"),
            (r#", "tool_search": {"limit": 3}"#, "tool_search.limit", "unknown key"),
        ] {
            let Invalid { key: k, problem } = parse(&base(extra)).unwrap_err();
            assert_eq!(k, key, "{extra}");
            assert!(problem.contains(says), "{extra}: {problem}");
        }
    }

    #[test]
    fn a_key_read_but_not_documented_is_refused_as_a_bug() {
        let map = Map::new();
        let mut keys = Keys::new(&map, "", "");
        assert_eq!(keys.take("no_such_key"), None);
        let Invalid { key, problem } = keys.refuse_unknown().unwrap_err();
        assert_eq!(key, "no_such_key");
        assert!(problem.contains("not in the configuration reference"), "{problem}");
        let Invalid { problem, .. } = Keys::new(&map, "", "").number("listen").unwrap_err();
        assert!(problem.contains("bug: not a number"), "{problem}");
    }
    #[test]
    fn instance_id_is_a_short_token_and_state_dir_needs_it() {
        let base = |extra: &str| format!(r#"{{"mcpServers": {{"a": {{"url": "http://127.0.0.1:9/mcp"}}}}{extra}}}"#);
        assert_eq!(parse(&base("")).unwrap().instance_id, None);
        assert_eq!(parse(&base(r#", "instance_id": "gw-1""#)).unwrap().instance_id.as_deref(), Some("gw-1"));
        for bad in ["", "a.b", "a_b", "é", &"x".repeat(33)] {
            let Invalid { key, problem } = parse(&base(&format!(r#", "instance_id": "{bad}""#))).unwrap_err();
            assert_eq!(key, "instance_id", "{bad}");
            assert!(problem.contains("A-Z a-z 0-9 -"), "{problem}");
        }
        let shared = parse(&base(r#", "instance_id": "gw-1", "state_dir": "/var/lib/mcpgate""#)).unwrap();
        assert_eq!(shared.state_dir.as_deref(), Some(Path::new("/var/lib/mcpgate")));
        assert_eq!(shared.state_file.as_deref(), Some(Path::new("/var/lib/mcpgate/gw-1.state.json")));
        let Invalid { key, problem } = parse(&base(r#", "state_dir": "/var/lib/mcpgate""#)).unwrap_err();
        assert_eq!(key, "state_dir");
        assert!(problem.contains("instance_id"), "{problem}");
        let both = r#", "instance_id": "a", "state_dir": "/d", "state_file": "/d/x.json""#;
        let Invalid { key, problem } = parse(&base(both)).unwrap_err();
        assert_eq!(key, "state_dir");
        assert!(problem.contains("state_file"), "{problem}");
    }

    #[test]
    #[cfg(feature = "redis")]
    fn a_store_needs_an_instance_id_a_redis_url_and_no_state_file() {
        let base = |extra: &str| format!(r#"{{"mcpServers": {{"a": {{"url": "http://127.0.0.1:9/mcp"}}}}{extra}}}"#);
        let redis = parse(&base(r#", "instance_id": "gw-1", "store": "redis://:pw@127.0.0.1:6379/0""#)).unwrap();
        assert_eq!(redis.store.as_deref(), Some("redis://:pw@127.0.0.1:6379/0"));
        assert_eq!(redis.peer_url.as_deref(), Some("http://127.0.0.1:8780"), "the peers reach it where it listens");
        assert_eq!(redis.store_lease, Duration::from_millis(5000));
        for (extra, why) in [
            (r#", "store": "redis://127.0.0.1""#, "instance_id"),
            (r#", "instance_id": "a", "store": "http://127.0.0.1""#, "Redis URL"),
            (r#", "instance_id": "a", "store": "redis://h", "state_file": "/x""#, "state_file"),
            (r#", "instance_id": "a", "store": "redis://h", "listen": "0.0.0.0:8780""#, "unspecified"),
        ] {
            let Invalid { problem, .. } = parse(&base(extra)).unwrap_err();
            assert!(problem.contains(why), "{extra}: {problem}");
        }
    }

    /// A file of a test's under the temporary directory, removed when
    /// dropped; its name is the process's and the file's own, so that tests
    /// running at once never share one.
    struct TestFile(std::path::PathBuf);

    impl TestFile {
        fn new(what: &str, contents: impl AsRef<[u8]>) -> TestFile {
            static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let path = std::env::temp_dir().join(format!("mcpgate-config-test-{}-{n}-{what}", std::process::id()));
            std::fs::write(&path, contents).unwrap();
            TestFile(path)
        }

        fn path(&self) -> String {
            self.0.to_string_lossy().into_owned()
        }
    }

    impl Drop for TestFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    /// A dotenv file with one variable, for `envFile`.
    fn test_env_file() -> TestFile {
        TestFile::new("token.env", "TOKEN_FROM_FILE=0123456789\n")
    }

    /// A PEM file with one CA certificate, for the keys that read one.
    fn test_ca_file() -> TestFile {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        TestFile::new("ca.pem", cert.pem())
    }

    #[test]
    fn a_ca_file_is_read_and_a_bad_one_is_refused_with_its_key() {
        let ca = test_ca_file();
        let base = |extra: &str| format!(r#"{{"mcpServers": {{"a": {{"url": "https://127.0.0.1:9/mcp"{extra}}}}}}}"#);
        let with = parse(&base(&format!(r#", "ca_file": "{}""#, ca.path()))).unwrap();
        let Transport::Http(http) = &with.servers[0].transport else { panic!("HTTP") };
        assert_eq!(http.trust.roots.len(), 1);
        assert!(http.trust.describe().contains("mcpServers.a.ca_file"), "{}", http.trust.describe());
        let Invalid { key, problem } = parse(&base(r#", "ca_file": "/nonexistent/ca.pem""#)).unwrap_err();
        assert_eq!(key, "mcpServers.a.ca_file");
        assert!(problem.contains("cannot read"), "{problem}");
        let not_pem = TestFile::new("empty.pem", "no certificate here\n");
        let top = format!(r#"{{"ca_file": "{}", "mcpServers": {{"a": {{"url": "https://x/mcp"}}}}}}"#, not_pem.path());
        let Invalid { key, problem } = parse(&top).unwrap_err();
        assert_eq!(key, "ca_file");
        assert!(problem.contains("no `BEGIN CERTIFICATE`"), "{problem}");
        let Invalid { key, .. } =
            parse(r#"{"trust_store": "mine", "mcpServers": {"a": {"url": "https://x/mcp"}}}"#).unwrap_err();
        assert_eq!(key, "trust_store");
    }

    #[test]
    fn oauth_refusals_name_the_key() {
        let base = |oauth: &str| {
            format!(
                r#"{{"auth": {{"oauth": {{{oauth}}}}}, "mcpServers": {{"a": {{"url": "http://127.0.0.1:9/mcp"}}}}}}"#
            )
        };
        let good = r#""issuer": "https://idp.example.com", "resource": "https://gate.example.com/mcp""#;
        let c = parse(&base(good)).unwrap();
        let oauth = c.oauth.as_ref().unwrap();
        assert_eq!(oauth.audiences, vec!["https://gate.example.com/mcp".to_string()], "the resource by default");
        assert_eq!(c.tokens, Some(vec![]), "OAuth alone is auth");
        let cases = [
            (r#""resource": "https://gate.example.com/mcp""#.to_string(), "auth.oauth.issuer", "missing"),
            (r#""issuer": "https://idp.example.com""#.to_string(), "auth.oauth.resource", "missing"),
            (
                r#""issuer": "http://idp.example.com", "resource": "https://g/mcp""#.to_string(),
                "auth.oauth.issuer",
                "loopback",
            ),
            (format!(r#"{good}, "server_scopes": {{"nope": "x"}}"#), "auth.oauth.server_scopes.nope", "no server"),
            (
                format!(r#"{good}, "scopes_supported": ["a"], "required_scopes": ["b"]"#),
                "auth.oauth.required_scopes",
                "not in",
            ),
            (format!(r#"{good}, "leeway_secs": 9999"#), "auth.oauth.leeway_secs", "out of range"),
            (
                format!(r#"{good}, "introspection": {{"url": "https://idp.example.com/i"}}"#),
                "auth.oauth.introspection.client_id",
                "missing",
            ),
            (format!(r#"{good}, "color": 1"#), "auth.oauth.color", "unknown key"),
        ];
        for (oauth, key, problem) in cases {
            let Invalid { key: k, problem: p } = parse(&base(&oauth)).expect_err(&oauth);
            assert_eq!(k, key, "{oauth}");
            assert!(p.contains(problem), "{oauth}: {p}");
        }
        let loopback = parse(&base(r#""issuer": "http://127.0.0.1:9000", "resource": "http://127.0.0.1:8780/mcp""#));
        assert!(loopback.is_ok(), "http:// on loopback: {loopback:?}");
        let scoped =
            parse(&base(&format!(r#"{good}, "required_scopes": ["mcp"], "server_scopes": {{"a": "files"}}"#))).unwrap();
        assert_eq!(scoped.oauth.unwrap().scopes_supported, vec!["mcp".to_string(), "files".to_string()]);
    }
}
