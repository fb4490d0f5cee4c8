#![forbid(unsafe_code)]
//! `mcpgate --config FILE`: parse arguments, load the configuration, start
//! the threads, and on SIGTERM or SIGINT close everything and exit 0.
//! Without `--config`, the first of [`DEFAULT_CONFIGS`] that exists.

use std::fmt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::RecvTimeoutError;

use mcpgate::config::{self, Config, ConfigError, Source};
use mcpgate::gateway::Gateway;
use mcpgate::http::{self, Httpd};
use mcpgate::routes::Routes;
use mcpgate::runtime::state::{self, StateFile};
use mcpgate::runtime::store::SessionStore;
use mcpgate::runtime::sys::{self, Signal};
use mcpgate::runtime::{threads, watch};
use mcpgate::service::notify::{self, Notifier};
use mcpgate::service::{heartbeat, peers, reaper, restore};
use mcpgate::session::CloseReason;

const USAGE: &str = "\
usage: mcpgate [--config FILE] [--listen ADDR]
       mcpgate --check [--start] [--config FILE]
       mcpgate --config-reference
       mcpgate status [--url URL]
       mcpgate login SERVER [--url URL]
       mcpgate logout SERVER [--url URL]
       mcpgate import FILE

  --config FILE       the JSON configuration (see docs/CONFIGURATION.md), or a client's
                      file as it is (Claude Desktop, Cursor, VS Code, Windsurf, Cline);
                      without it, /etc/mcpgate/mcpgate.json, or else ./mcpgate.json
  --listen ADDR       listen on ADDR instead of the file's `listen`, e.g. 127.0.0.1:0
  --check             validate the configuration and exit (0: valid, 2: not): its keys, and
                      that each stdio server's command is on PATH
  --start             with --check: also start each server, list its tools (calling
                      nothing) and say per server what works and, if not, why (exit 1)
  --config-reference  print the table of configuration keys as Markdown
  --version           print the version

  status              print the status of a running mcpgate, read from its /status.json:
                      healthy or not and why, servers, sessions, threads, memory. Exit
                      code 0: healthy, 1: not healthy, 3: no status could be read.
  --url URL           where it runs (default http://127.0.0.1:8780); $MCPGATE_TOKEN, when
                      set, goes as its bearer token (needed beyond loopback with tokens)

  login SERVER        sign in to SERVER (a server with `oauth`) on a running mcpgate, from a
                      host without a browser: it prints a link to open in a browser anywhere,
                      then asks for the address the browser ends on, and completes the sign-in.
                      As the user of $MCPGATE_TOKEN (none: the one user without `auth`)
  logout SERVER       forget that user's tokens for SERVER; its next call asks again

  import FILE         print a client's config file as mcpgate's own JSON on stdout, and on
                      stderr what it left out or needs (exit code 2: it does not load)

Logging: MCPGATE_LOG=debug|info|warn|error (default info), to stderr.";

/// Where the configuration is read from when `--config` is not given: the
/// first of these that exists (the one `scripts/install.sh` writes, then
/// the working directory's).
const DEFAULT_CONFIGS: [&str; 2] = ["/etc/mcpgate/mcpgate.json", "./mcpgate.json"];

/// Why mcpgate stopped early; each maps to an exit code.
enum Error {
    Usage(String),
    Config(ConfigError),
    Io {
        context: String,
        error: std::io::Error,
    },
    /// This instance's lock in `state_dir`: another mcpgate holds it, or it cannot be made.
    Lock(peers::LockError),
    /// `mcpgate status`: the status was read, and it is not healthy.
    Unhealthy,
    /// `mcpgate status`: no status could be read.
    NoStatus(String),
    /// `mcpgate --check --start`: this many of the servers do not work.
    ServersFailed(usize, usize),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(problem) => write!(f, "{problem}\n\n{USAGE}"),
            Error::Config(e) => write!(f, "{e}"),
            Error::Io { context, error } => write!(f, "{context}: {error}"),
            Error::Lock(e) => write!(f, "not starting: {e}"),
            Error::Unhealthy => write!(f, "not healthy"),
            Error::NoStatus(why) => write!(f, "{why}"),
            Error::ServersFailed(failed, all) => write!(f, "{failed} of {all} server(s) do not work (above)"),
        }
    }
}

impl Error {
    fn exit_code(&self) -> ExitCode {
        match self {
            Error::Usage(_) | Error::Config(_) => ExitCode::from(2),
            Error::Io { .. } | Error::Lock(_) | Error::Unhealthy | Error::ServersFailed(..) => ExitCode::from(1),
            Error::NoStatus(_) => ExitCode::from(3),
        }
    }
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |error| Error::Io { context, error }
}

struct Args {
    config: Option<PathBuf>,
    listen: Option<String>,
    check: bool,
    /// With `check`: start each server too.
    start: bool,
}

enum Command {
    Run(Args),
    Print(String),
    /// `mcpgate status`: the base URL of a running mcpgate.
    Status(String),
    /// `mcpgate login` (true) or `logout` (false): the server and the base URL.
    Sign {
        login: bool,
        server: String,
        url: String,
    },
    /// `mcpgate import FILE`.
    Import(PathBuf),
}

fn parse_args(args: impl Iterator<Item = String>) -> Result<Command, Error> {
    let mut args = args.peekable();
    if args.peek().map(String::as_str) == Some("status") {
        args.next();
        let mut url = "http://127.0.0.1:8780".to_string();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--url" => url = args.next().ok_or_else(|| Error::Usage("--url needs a value".into()))?,
                other => return Err(Error::Usage(format!("unknown argument `{other}` for `mcpgate status`"))),
            }
        }
        return Ok(Command::Status(url));
    }
    if let Some(verb @ ("login" | "logout")) = args.peek().map(String::as_str) {
        let login = verb == "login";
        args.next();
        let mut url = "http://127.0.0.1:8780".to_string();
        let mut server = None;
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--url" => url = args.next().ok_or_else(|| Error::Usage("--url needs a value".into()))?,
                other if server.is_none() && !other.starts_with('-') => server = Some(other.to_string()),
                other => {
                    return Err(Error::Usage(format!(
                        "unknown argument `{other}` for `mcpgate {}`",
                        if login { "login" } else { "logout" }
                    )));
                }
            }
        }
        let server = server.ok_or_else(|| Error::Usage("name the SERVER to sign in to (or out of)".into()))?;
        return Ok(Command::Sign { login, server, url });
    }
    if args.peek().map(String::as_str) == Some("import") {
        args.next();
        let file = args.next().ok_or_else(|| Error::Usage("`mcpgate import` needs a FILE".into()))?;
        if let Some(extra) = args.next() {
            return Err(Error::Usage(format!("unknown argument `{extra}` for `mcpgate import`")));
        }
        return Ok(Command::Import(PathBuf::from(file)));
    }
    let mut parsed = Args { config: None, listen: None, check: false, start: false };
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| Error::Usage(format!("{name} needs a value")));
        match arg.as_str() {
            "--config" | "-c" => parsed.config = Some(PathBuf::from(value("--config")?)),
            "--listen" => parsed.listen = Some(value("--listen")?),
            "--check" => parsed.check = true,
            "--start" => parsed.start = true,
            "--config-reference" => return Ok(Command::Print(config::reference_markdown())),
            "--version" | "-V" => return Ok(Command::Print(format!("mcpgate {}\n", env!("CARGO_PKG_VERSION")))),
            "--help" | "-h" => return Ok(Command::Print(format!("{USAGE}\n"))),
            other => return Err(Error::Usage(format!("unknown argument `{other}`"))),
        }
    }
    if parsed.start && !parsed.check {
        return Err(Error::Usage("--start goes with --check".into()));
    }
    Ok(Command::Run(parsed))
}

/// The first of [`DEFAULT_CONFIGS`] that exists, or may (one that cannot be
/// looked at is taken, and loading it says why); an error naming each.
fn default_config() -> Result<PathBuf, Error> {
    let found = DEFAULT_CONFIGS.iter().map(PathBuf::from).find(|path| path.try_exists().unwrap_or(true));
    found.ok_or_else(|| {
        Error::Usage(format!(
            "no configuration: --config FILE was not given, and neither {} exists",
            DEFAULT_CONFIGS.join(" nor ")
        ))
    })
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcpgate: {e}");
            e.exit_code()
        }
    }
}

fn run() -> Result<(), Error> {
    let args = match parse_args(std::env::args().skip(1))? {
        Command::Print(text) => {
            print!("{text}");
            return Ok(());
        }
        Command::Status(url) => return status(&url),
        Command::Sign { login, server, url } => return sign(login, &server, &url),
        Command::Import(file) => return import(&file),
        Command::Run(args) => args,
    };
    let listen = match &args.listen {
        Some(listen) => Some(
            listen
                .parse()
                .map_err(|_| Error::Usage(format!("--listen `{listen}` is not an address like 127.0.0.1:8780")))?,
        ),
        None => None,
    };
    let (path, defaulted) = match args.config {
        Some(path) => (path, false),
        None => (default_config()?, true),
    };
    let source = Source { path, listen };
    // Looked at before it is read: a save from now on reloads it.
    let looked = watch::look([source.path.as_path()]);
    let config = source.load().map_err(Error::Config)?;
    let tls = tls_acceptor(&config, &source)?;
    if args.check {
        return check(config, &source, args.start);
    }
    // Before any thread starts, so that every thread inherits the mask.
    let signals = sys::block().map_err(io("cannot block signals"))?;
    sys::limit_malloc_arenas();
    init_logging();
    if defaulted {
        log::info!(
            "configuration: {}, the first of {} that exists (no --config given)",
            source.path.display(),
            DEFAULT_CONFIGS.join(", ")
        );
    }
    if let Err(e) = sys::become_subreaper() {
        log::warn!(
            "cannot become the subreaper of the stdio servers' processes ({e}): one that leaves its process group \
             may outlive its server"
        );
    }
    check_fd_limit(&config);
    if let Some(notes) = config.notes.summary() {
        log::info!("{}: {notes}", source.path.display());
    }
    serve(config, source, looked, signals, tls)
}

/// `mcpgate import FILE`: the JSON on stdout, the notes on stderr.
fn import(file: &std::path::Path) -> Result<(), Error> {
    let imported = config::import::import(file, &|name| std::env::var(name).ok()).map_err(Error::Config)?;
    print!("{}", imported.json);
    for note in &imported.notes {
        eprintln!("mcpgate import: {note}");
    }
    Ok(())
}

/// `--check`: what the file says is valid (it loaded), and each stdio
/// server's command is where its process will look for it; with `--start`,
/// each server is started and listed, and the outcome said per server.
fn check(config: Config, source: &Source, start: bool) -> Result<(), Error> {
    let path = std::env::var_os("PATH");
    for server in &config.servers {
        if let config::Transport::Stdio(stdio) = &server.transport
            && let Err(why) = stdio.find_program(path.as_deref())
        {
            let invalid = config::Invalid::new(format!("mcpServers.{}.command", server.name), why);
            return Err(Error::Config(ConfigError { file: source.path.clone(), invalid }));
        }
    }
    println!("{}: valid, {} server(s)", source.path.display(), config.servers.len());
    if let Some(notes) = config.notes.summary() {
        println!("{}: {notes}", source.path.display());
    }
    if !start {
        eprintln!("(no server was started: `mcpgate --check --start` tries each one)");
        return Ok(());
    }
    // Only its children's troubles are worth a line here; nothing is kept.
    init_logging_with("warn");
    let _ = sys::become_subreaper();
    let mut config = config;
    config.state_file = None;
    config.state_dir = None;
    let gateway = Gateway::new(config);
    let tried = mcpgate::gateway::check::try_servers(&gateway.current(), &gateway.stats);
    gateway.shutdown();
    let all = tried.len();
    let mut failed = 0;
    for t in &tried {
        match &t.outcome {
            Ok(tools) => {
                println!("  ok      {} ({}): {tools} tool(s), in {:.2} s", t.server, t.what, t.took.as_secs_f64())
            }
            Err(why) => {
                failed += 1;
                println!("  FAILED  {} ({}): {why}", t.server, t.what);
            }
        }
    }
    if failed == 0 { Ok(()) } else { Err(Error::ServersFailed(failed, all)) }
}

/// The front door's HTTPS settings when `tls` is configured; a file that
/// does not load stops mcpgate here, naming it.
#[cfg(feature = "tls")]
type Tls = Option<Arc<mcpgate::http::tls::Acceptor>>;
#[cfg(not(feature = "tls"))]
type Tls = ();

#[cfg(feature = "tls")]
fn tls_acceptor(config: &Config, source: &Source) -> Result<Tls, Error> {
    let Some(files) = &config.tls else { return Ok(None) };
    let refused = |invalid| Error::Config(ConfigError { file: source.path.clone(), invalid });
    mcpgate::http::tls::Acceptor::load(files).map(|a| Some(Arc::new(a))).map_err(refused)
}

#[cfg(not(feature = "tls"))]
fn tls_acceptor(_: &Config, _: &Source) -> Result<Tls, Error> {
    Ok(())
}

/// `mcpgate status`: reads `/status.json` of the mcpgate at `url` and
/// prints what the status page says, in plain text.
fn status(url: &str) -> Result<(), Error> {
    let base = base_url(url);
    let at = format!("{base}/status.json");
    let mut request = cli_agent().get(&at);
    if let Ok(token) = std::env::var("MCPGATE_TOKEN") {
        request = request.header("Authorization", format!("Bearer {token}"));
    }
    let mut response = request.call().map_err(|e| {
        Error::NoStatus(format!(
            "cannot read {at} ({e}): is mcpgate running at {base}? Start it, or name where it runs with --url URL"
        ))
    })?;
    let text = response.body_mut().read_to_string().map_err(|e| Error::NoStatus(format!("cannot read {at}: {e}")))?;
    if response.status() != 200 {
        let said = text.chars().take(300).collect::<String>();
        return Err(Error::NoStatus(format!("{at} answered {}: {said}", response.status())));
    }
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Error::NoStatus(format!("{at} is not JSON: {e}")))?;
    if !value["health"].is_object() {
        return Err(Error::NoStatus(format!("{at} says nothing of its health: is it mcpgate, and recent?")));
    }
    print!("{}", mcpgate::status::summary::text(&value));
    if value["health"]["healthy"] == true { Ok(()) } else { Err(Error::Unhealthy) }
}

/// The base URL of a running mcpgate, from what a user may give: its `/mcp`
/// URL, a status page's, or the base itself.
fn base_url(url: &str) -> &str {
    let base = url.trim_end_matches('/');
    ["/mcp", "/status.json", "/status"].iter().find_map(|end| base.strip_suffix(end)).unwrap_or(base)
}

/// An agent for `mcpgate status`, `login` and `logout`: no proxy, 10 s a request.
fn cli_agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .timeout_global(Some(std::time::Duration::from_secs(10)))
        .build()
        .into()
}

/// A JSON `POST` to a running mcpgate with `$MCPGATE_TOKEN`: its status and answer.
fn cli_post(at: &str, body: serde_json::Value) -> Result<(u16, serde_json::Value), Error> {
    let mut request = cli_agent().post(at).header("Content-Type", "application/json");
    if let Ok(token) = std::env::var("MCPGATE_TOKEN") {
        request = request.header("Authorization", format!("Bearer {token}"));
    }
    let mut response =
        request.send(body.to_string().as_bytes()).map_err(|e| Error::NoStatus(format!("cannot reach {at}: {e}")))?;
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap_or_default();
    let value = serde_json::from_str(&text).unwrap_or_else(|_| serde_json::json!({ "error": text }));
    Ok((status, value))
}

/// `mcpgate login SERVER` and `logout SERVER`, against the mcpgate at `url`.
fn sign(login: bool, server: &str, url: &str) -> Result<(), Error> {
    let base = base_url(url);
    let failed = |value: &serde_json::Value| {
        Error::NoStatus(value["error"].as_str().map_or_else(|| value.to_string(), str::to_string))
    };
    if !login {
        let (status, value) = cli_post(&format!("{base}/oauth/logout"), serde_json::json!({ "server": server }))?;
        if status != 200 {
            return Err(failed(&value));
        }
        match value["forgot"].as_bool() {
            Some(true) => println!("signed out of `{server}`: its tokens are forgotten"),
            _ => println!("no tokens for `{server}` were held: nothing to forget"),
        }
        return Ok(());
    }
    let (status, value) = cli_post(&format!("{base}/oauth/login"), serde_json::json!({ "server": server }))?;
    if status != 200 {
        return Err(failed(&value));
    }
    if value["signed_in"] == true {
        println!("signed in to `{server}` already (`mcpgate logout {server}` forgets it)");
        return Ok(());
    }
    let link = value["url"].as_str().unwrap_or_default();
    let callback = value["redirect_uri"].as_str().unwrap_or_default();
    println!(
        "Open this link in a browser, on any device, and sign in to `{server}`:

    {link}
"
    );
    println!("The browser then ends on an address that starts with {callback} (a page that");
    println!("may not load, if this host is out of its reach). Paste that whole address here:");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).map_err(io("cannot read the address"))?;
    if line.trim().is_empty() {
        return Err(Error::NoStatus("no address given: nothing was signed in".into()));
    }
    let (status, value) = cli_post(&format!("{base}/oauth/complete"), serde_json::json!({ "url": line.trim() }))?;
    if status != 200 {
        return Err(failed(&value));
    }
    println!("signed in to `{server}`");
    Ok(())
}

/// Raises the soft limit on open files to the hard one, and says so when
/// it is below what this configuration can use: mcpgate then refuses new
/// sessions (503) before it runs out, but serves fewer than configured.
fn check_fd_limit(config: &Config) {
    let limit = match sys::raise_fd_limit() {
        Ok(limit) => limit,
        Err(e) => {
            log::warn!("cannot read the limit on open files: {e}");
            return;
        }
    };
    let servers = config.servers.len();
    let wanted = config.max_connections + http::RESERVED + 2 * config.max_sessions * servers + 64 + 4 * servers;
    if (limit as usize) < wanted {
        log::warn!(
            "the limit on open files is {limit}, below the {wanted} this configuration can use (max_connections, \
             max_sessions x servers): new sessions get 503 once descriptors run short; raise LimitNOFILE"
        );
    }
}

/// Logs to stderr. Under systemd (`$JOURNAL_STREAM`) each line starts with
/// its syslog priority (`<3>` error ... `<7>` debug) and carries no
/// timestamp, which journald adds; elsewhere with the time in UTC
/// (`2026-12-05T21:40:00.123Z INFO  mcpgate: ...`).
fn init_logging() {
    // The HTTP client's own debug lines stay off unless asked for by name.
    init_logging_with("info,ureq=warn,ureq_proto=warn,rustls=warn");
}

/// [`init_logging`], with `default` unless `MCPGATE_LOG` says otherwise.
fn init_logging_with(default: &str) {
    use std::io::Write;
    let mut builder = env_logger::Builder::from_env(env_logger::Env::default().filter_or("MCPGATE_LOG", default));
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        builder.format(|buf, record| {
            let priority = match record.level() {
                log::Level::Error => 3,
                log::Level::Warn => 4,
                log::Level::Info => 6,
                log::Level::Debug | log::Level::Trace => 7,
            };
            writeln!(buf, "<{priority}>{}: {}", record.target(), record.args())
        });
    } else {
        builder.format(|buf, record| {
            let now = mcpgate::runtime::clock::rfc3339(std::time::SystemTime::now());
            writeln!(buf, "{now} {:<5} {}: {}", record.level(), record.target(), record.args())
        });
    }
    builder.init();
}

fn serve(config: Config, source: Source, looked: watch::Looked, signals: sys::Signals, tls: Tls) -> Result<(), Error> {
    let options = http::Options {
        max_connections: config.max_connections,
        max_body_bytes: config.max_body_bytes,
        max_header_count: config.max_header_count,
        max_header_bytes: config.max_header_bytes,
        idle_timeout: config.client_idle_timeout,
        header_timeout: config.header_timeout,
        write_timeout: config.client_write_timeout,
    };
    let listen = config.listen;
    let shutdown_timeout = config.shutdown_timeout;
    // Held until mcpgate exits: peers in the same state_dir see it running.
    let _instance_lock = match (&config.state_dir, &config.instance_id) {
        (Some(dir), Some(id)) => Some(peers::lock_instance(dir, id).map_err(Error::Lock)?),
        _ => None,
    };
    let loaded = config.state_file.as_deref().map(|path| StateFile::new(path).load());
    let gateway = Arc::new(Gateway::new(config));
    if let Some(why) = gateway.downstreams.oauth.store_problem() {
        let invalid = config::Invalid::new("oauth_client.key_file", format!("OAuth: {why}"));
        return Err(Error::Config(ConfigError { file: source.path.clone(), invalid }));
    }
    // Sessions come back before mcpgate listens (no server is asked
    // anything); their readers start, and what is to be closed is closed,
    // once it listens.
    let restored = loaded.map(|loaded| restore::restore(&gateway, loaded));
    let writer =
        state::start(gateway.store.journal.clone(), gateway.clone()).map_err(io("cannot start the state writer"))?;
    let store_writer = match &gateway.store.redis {
        Some(redis) => Some(redis.start_writer().map_err(io("cannot start the session store's writer"))?),
        None => None,
    };
    let routes = Routes::new(gateway.clone(), source.clone()).with_watch(looked);
    #[cfg(feature = "tls")]
    let (routes, transport, scheme) = match &tls {
        Some(acceptor) => (routes.with_tls(Some(acceptor.clone())), http::Transport::Tls(acceptor.clone()), "https"),
        None => (routes, http::Transport::Plain, "http"),
    };
    #[cfg(not(feature = "tls"))]
    let (transport, scheme, ()) = (http::Transport::Plain, "http", tls);
    let stateless = routes.stateless.clone();
    let app = Arc::new(routes);
    let mut httpd = Httpd::start_with(listen, app.clone(), options, gateway.stats.clone(), transport)
        .map_err(io(format!("cannot listen on {listen}")))?;
    gateway.start_eager(None);
    gateway.govern.configure_audit(gateway.current().config.audit.as_ref());
    gateway.configure_tracing();
    let reaper = reaper::start(gateway.clone(), stateless.clone()).map_err(io("cannot start the reaper"))?;
    let watcher = peers::start(gateway.clone()).map_err(io("cannot start the peers' watcher"))?;
    let heart = heartbeat::start(gateway.clone()).map_err(io("cannot start the heartbeat"))?;
    let restorer = match restored {
        Some(restored) => restore::finish_restore(restored).map_err(io("cannot start the restore"))?,
        None => None,
    };
    let (signal_tx, signal_rx) = crossbeam_channel::bounded::<Signal>(4);
    let signal_thread = threads::spawn("signal", "", move || {
        loop {
            match signals.wait() {
                Ok(signal) => {
                    let last = signal != Signal::Hangup;
                    if signal_tx.send(signal).is_err() || last {
                        return;
                    }
                }
                Err(e) => {
                    log::error!("waiting for signals failed: {e}");
                    return;
                }
            }
        }
    })
    .map_err(io("cannot start the signal thread"))?;
    let addr = httpd.local_addr();
    gateway.downstreams.oauth.listening_at(&format!("{scheme}://{addr}"), &gateway.current().config);
    println!("listening on {scheme}://{addr}/mcp");
    if !addr.ip().is_loopback() && gateway.current().config.tokens.is_none() {
        log::warn!(
            "LISTENING ON {addr}, NOT LOOPBACK, WITHOUT TOKENS: anyone who can reach this address can use every \
             server behind mcpgate with its credentials. Add `auth` to the configuration, or listen on 127.0.0.1."
        );
    }
    let notifier = Notifier::from_env().map(Arc::new);
    let mut notify_thread = None;
    if let Some(notifier) = &notifier {
        let status = notify::status_line(&gateway);
        notifier.send(&format!("READY=1\nSTATUS={status}"));
        notify_thread = Some(
            notify::start(
                notifier.clone(),
                gateway.clone(),
                addr,
                scheme == "https",
                notify::watchdog_interval(),
                status,
            )
            .map_err(io("cannot start the notify thread"))?,
        );
    }
    log::info!(
        "listening on {scheme}://{addr}/mcp, status on {scheme}://{addr}/status, {} server(s)",
        gateway.current().servers.len()
    );

    // SIGHUP and a save reload the same way, here, one at a time.
    let reload = |why: &str| {
        log::info!("{why}: reloading {}", source.path.display());
        if let Some(notifier) = &notifier {
            notifier.send("RELOADING=1");
        }
        app.reload_all();
        if let Some(notifier) = &notifier {
            notifier.send(&format!("READY=1\nSTATUS={}", notify::status_line(&gateway)));
        }
    };
    loop {
        match signal_rx.recv_timeout(watch::EVERY) {
            Err(RecvTimeoutError::Timeout) => {
                if gateway.current().config.watch_config && app.config_saved() {
                    reload("changed on disk");
                }
            }
            Ok(Signal::Hangup) => reload("SIGHUP"),
            Ok(signal) => {
                log::info!("{signal:?}: closing every session");
                break;
            }
            Err(RecvTimeoutError::Disconnected) => {
                log::error!("the signal thread ended; shutting down");
                sys::terminate_self();
                break;
            }
        }
    }

    let started = Instant::now();
    let deadline = started + shutdown_timeout;
    // The pings end before STOPPING is sent: none may follow it.
    if let Some(notify_thread) = notify_thread {
        notify_thread.stop();
    }
    if let Some(notifier) = &notifier {
        notifier.send("STOPPING=1\nSTATUS=closing every session");
    }
    httpd.stop_accepting();
    reaper.stop();
    if let Some(watcher) = watcher {
        watcher.stop();
    }
    if let Some(heart) = heart {
        heart.stop();
    }
    if let Some(restorer) = restorer {
        let _ = restorer.join();
    }
    // Closing every session, stopping the state writer and the children, and
    // joining what is late run within shutdown_timeout_secs as a whole: past
    // it mcpgate exits all the same (with a state file, the closing marks are
    // written ahead, and the next start sends what was cut short).
    let (done_tx, done_rx) = crossbeam_channel::bounded::<usize>(1);
    let closer = {
        let gateway = gateway.clone();
        let stateless = stateless.clone();
        threads::spawn("close", "shutdown", move || {
            // With a state file, clients keep their sessions across the restart:
            // the client side is kept, the downstream sessions are closed all the same.
            let kept = gateway.keep_clients();
            // The table empties here while the file keeps the clients' sessions:
            // no rewrite may read it from now on.
            gateway.store.journal.appends_only();
            let sessions = gateway.sessions.take_all();
            let count = sessions.len();
            gateway.close(sessions, CloseReason::Shutdown);
            if let Some(writer) = writer {
                writer.stop();
                if let (Some(path), None) = (gateway.store.journal.path(), gateway.store.journal.error()) {
                    log::info!("{kept} session(s) kept in {}: clients resume them after a restart", path.display());
                }
            }
            if let (Some(redis), Some(store_writer)) = (&gateway.store.redis, store_writer) {
                redis.stop_writer(store_writer);
                // Its peers continue its sessions from now on, without waiting for a lease.
                redis.leave();
                log::info!("{count} session(s) kept in {}: any instance continues them", redis.name());
            }
            // The calls of 2026-07-28 clients held for their retry are cancelled, then everything else stops.
            stateless.stop();
            gateway.shutdown();
            let _ = done_tx.send(count);
        })
    };
    let count = match closer {
        Ok(closer) => match done_rx.recv_deadline(deadline) {
            Ok(count) => {
                let _ = closer.join();
                count
            }
            Err(_) => {
                log::warn!(
                    "shutdown_timeout_secs ({} s) passed with {} downstream session(s) and {} process(es) still closing; exiting without them{}",
                    shutdown_timeout.as_secs(),
                    gateway.stats.downstream_live.get(),
                    gateway.downstreams.children.live.get(),
                    if gateway.store.journal.path().is_some() { ": the next start sends their DELETEs" } else { "" }
                );
                return Ok(());
            }
        },
        Err(e) => {
            log::error!("cannot start the shutdown thread ({e}); exiting without closing sessions");
            return Ok(());
        }
    };
    let lingering = httpd.join(deadline);
    let late = threads::join_late_by(deadline);
    if late > 0 {
        log::warn!("shutdown_timeout_secs passed with {late} thread(s) still running; exiting without them");
    }
    let _ = signal_thread.join();
    let s = &gateway.stats;
    let c = &gateway.downstreams.children;
    log::info!(
        "stopped in {} ms: {count} session(s) closed; downstream opened {}, closed {}, live {}, DELETE failures {}; \
         processes spawned {}, reaped {}, live {}",
        started.elapsed().as_millis(),
        s.downstream_opened.get(),
        s.downstream_closed.get(),
        s.downstream_live.get(),
        s.downstream_delete_failures.get(),
        c.spawned.get(),
        c.reaped.get(),
        c.live.get(),
    );
    if lingering > 0 {
        log::info!("{lingering} idle keep-alive connection(s) closed at exit");
    }
    Ok(())
}
