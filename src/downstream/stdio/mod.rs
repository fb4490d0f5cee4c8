//! The stdio transport: a server that is a program mcpgate starts and
//! speaks to in newline-delimited JSON-RPC on its stdin and stdout, as
//! Claude Desktop's `command`/`args`/`env` entries describe.
//!
//! Processes:
//! - every child is started by one long-lived thread ([`Children`]), in a
//!   process group of its own, with `PR_SET_PDEATHSIG`: if mcpgate dies,
//!   even by `kill -9`, the kernel kills it (what it started in turn is in
//!   its group, which systemd's `KillMode=control-group` takes too);
//! - it gets a small base environment ([`BASE_ENV`]) and its own `env`,
//!   not mcpgate's, which may hold other servers' secrets, and no signal
//!   blocked (mcpgate blocks SIGTERM, SIGINT and SIGHUP in every thread,
//!   and a signal mask outlives exec);
//! - one thread reads its stdout (a message per line, at most
//!   `max_message_bytes`), one its stderr (to the log, prefixed with the
//!   server's name, bounded and rate-limited); writes to its stdin never
//!   block longer than the request timeout;
//! - it ends through the close path only: stdin closed, `stdio_grace_ms`
//!   to exit, then SIGTERM to its group, the same again, then SIGKILL, and
//!   it is always reaped. A child that exits by itself is reaped by its
//!   reader at once: no zombies. Either way its group is killed before it
//!   is reaped (while its pid cannot be reused), and the readers notice its
//!   exit even when a process that escaped the group holds its pipes.
//!
//! Sharing: with `"sharing": "session"` (the default) each client session
//! has a child of its own. With `"shared"` one child serves every session:
//! each session's downstream session is a view of it, request ids and
//! progress tokens are rewritten so sessions cannot collide, and what the
//! child sends goes to the session it concerns: a response to its request,
//! progress to the call that asked for it, a request (sampling,
//! elicitation, roots) to the one session with a call running, refused
//! when that is not one session; list changes to every session.
//!
//! A request of a child goes on the answer stream of the one call of a
//! client running on it, else on the session's `GET` stream: never with one
//! of mcpgate's own requests (the lists it merges, `logging/setLevel`),
//! whose answers reach no client. What a per-session child sends before its
//! session listens (server-filesystem asks for the roots as soon as it is
//! initialized) is kept for that session.

use std::io;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::config::{BASE_ENV, Sharing, StdioConfig};
use crate::downstream::{Connector, DownstreamError, Opened, Processes, Server};
use crate::protocol::jsonrpc;
use crate::runtime::children::{Children, pipe_of};
use crate::runtime::sys;
use crate::runtime::threads;
use crate::stats::{Counter, Gauge};

mod child;
mod link;
mod reader;
mod routing;

use child::{Calls, Child, Signalled};
use link::{StdioLink, VIEWS};
use reader::{log_stderr, read_stdout};
pub(crate) use routing::{carries, keep_early, token_key};

/// A child that ran this long before it failed resets its server's backoff.
const STABLE_AFTER: Duration = Duration::from_secs(30);
/// Backoff between starts of a server whose children keep failing.
const BACKOFF_MIN: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(60);

/// A stdio server: the program it is. Its links and its children's
/// readers hold it, to count and stop what they end.
pub(crate) struct StdioConnector {
    program: Arc<Program>,
}

impl StdioConnector {
    pub(crate) fn new(name: &str, config: StdioConfig, children: Arc<Children>) -> StdioConnector {
        StdioConnector { program: Arc::new(Program::new(name, config, children)) }
    }
}

/// Its sessions are its children, which end with mcpgate: nothing is saved
/// to resume, and `saved_url` is none.
impl Connector for StdioConnector {
    fn kind(&self) -> &'static str {
        "stdio"
    }

    fn open(&self, server: &Arc<Server>, body: &[u8]) -> Result<Opened, DownstreamError> {
        open(server, &self.program, body)
    }

    fn processes(&self) -> Option<Processes> {
        Some(self.program.processes())
    }

    fn retire(&self) {
        self.program.retire();
    }

    fn shutdown(&self) {
        self.program.shutdown();
    }

    fn stop_idle(&self, idle: Duration) {
        self.program.stop_idle(idle);
    }
}

/// What a stdio server keeps: its command, its counts, its backoff, and
/// its shared child.
pub(super) struct Program {
    name: String,
    config: StdioConfig,
    pub(super) children: Arc<Children>,
    pub(super) live: Gauge,
    spawned: Counter,
    exited: Counter,
    killed: Counter,
    restarts: Counter,
    /// Guards the backoff after children that failed on their own.
    backoff: Mutex<Backoff>,
    /// Guards the shared child (with `"sharing": "shared"`).
    shared: Mutex<Option<Arc<Child>>>,
    pub(super) retired: AtomicBool,
}

#[derive(Default)]
struct Backoff {
    /// Children in a row that ended on their own within [`STABLE_AFTER`].
    failures: u32,
    until: Option<Instant>,
    /// One ended on its own: the next start is a restart.
    restart: bool,
}

impl Program {
    fn new(name: &str, config: StdioConfig, children: Arc<Children>) -> Program {
        Program {
            name: name.to_string(),
            config,
            children,
            live: Gauge::default(),
            spawned: Counter::default(),
            exited: Counter::default(),
            killed: Counter::default(),
            restarts: Counter::default(),
            backoff: Mutex::new(Backoff::default()),
            shared: Mutex::new(None),
            retired: AtomicBool::new(false),
        }
    }

    fn processes(&self) -> Processes {
        Processes {
            live: self.live.get(),
            spawned: self.spawned.get(),
            exited: self.exited.get(),
            killed: self.killed.get(),
            restarts: self.restarts.get(),
        }
    }

    /// Stops `child` (the close path's end for a child), and counts it.
    pub(super) fn stop_child(&self, child: &Child) {
        if let Some(Signalled(signalled)) = child.stop(&self.children) {
            self.live.dec();
            if signalled {
                self.killed.inc();
            }
        }
    }

    /// A reload removed or changed this server: its shared child stops once unused.
    fn retire(&self) {
        self.retired.store(true, Ordering::Release);
    }

    /// Stops the shared child, whoever uses it (mcpgate is stopping).
    fn shutdown(&self) {
        let shared = self.shared.lock().take();
        if let Some(child) = shared {
            self.stop_child(&child);
        }
    }

    /// Takes `child` out of the shared slot, if it is there: the next
    /// session starts another.
    pub(super) fn forget_shared(&self, child: &Arc<Child>) {
        let mut shared = self.shared.lock();
        if shared.as_ref().is_some_and(|c| Arc::ptr_eq(c, child)) {
            shared.take();
        }
    }

    /// Stops the shared child when no session has used it for `idle` (or
    /// at once, retired).
    fn stop_idle(&self, idle: Duration) {
        let retired = self.retired.load(Ordering::Acquire);
        let unused = {
            let mut shared = self.shared.lock();
            let stale = shared.as_ref().is_some_and(|child| {
                child.views.load(Ordering::Acquire) == 0 && (retired || child.idle_for() >= idle)
                    || child.gone.load(Ordering::Acquire)
            });
            if stale { shared.take() } else { None }
        };
        if let Some(child) = unused {
            log::info!("server `{}`: its shared process is stopped (no session used it)", self.name);
            self.stop_child(&child);
        }
    }

    /// Starts a child, unless a limit or the backoff says no.
    fn spawn(self: &Arc<Self>, server: &Arc<Server>) -> Result<Arc<Child>, DownstreamError> {
        // Children are forked one at a time on the spawner thread anyway.
        let starting = self.children.starting.lock();
        {
            let backoff = self.backoff.lock();
            if let Some(until) = backoff.until
                && Instant::now() < until
            {
                let wait = until.saturating_duration_since(Instant::now()).as_secs_f64().ceil();
                return Err(DownstreamError::Exhausted(format!(
                    "its process ended {} times in a row; it is started again in {wait} s",
                    backoff.failures
                )));
            }
        }
        let total = self.children.limit.load(Ordering::Relaxed);
        if self.children.live.get() as usize >= total {
            return Err(DownstreamError::Exhausted(format!(
                "mcpgate runs its limit of {total} processes (max_processes)"
            )));
        }
        if let Some(max) = self.config.max_processes
            && self.live.get() as usize >= max
        {
            return Err(DownstreamError::Exhausted(format!(
                "this server runs its limit of {max} processes (mcpServers.{}.max_processes)",
                self.name
            )));
        }
        let mut command = Command::new(&self.config.command);
        command.args(&self.config.args).env_clear().stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        for name in BASE_ENV {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        command.envs(self.config.env.iter().map(|(k, v)| (k, v)));
        if let Some(cwd) = &self.config.cwd {
            command.current_dir(cwd);
        }
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        sys::die_with_parent(&mut command);
        sys::unblock_signals(&mut command);
        let mut process = self
            .children
            .spawn(command)
            .map_err(|e| DownstreamError::Connect(format!("cannot start `{}`: {e}", self.config.command)))?;
        self.children.spawned.inc();
        self.children.live.inc();
        self.spawned.inc();
        self.live.inc();
        if std::mem::take(&mut self.backoff.lock().restart) {
            self.restarts.inc();
        }
        drop(starting);
        let pid = process.id();
        let (stdin, stdout, stderr) = (process.stdin.take(), process.stdout.take(), process.stderr.take());
        let pipe = stdout.as_ref().and_then(pipe_of);
        let child = Arc::new(Child {
            pid,
            started: Instant::now(),
            process: Mutex::new(Some(process)),
            stdin: Mutex::new(stdin),
            calls: Mutex::new(Calls {
                early: (self.config.sharing != Sharing::Shared).then(Vec::new),
                ..Calls::default()
            }),
            views: AtomicUsize::new(0),
            next_wire: AtomicU64::new(1),
            used: Mutex::new(Instant::now()),
            gone: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            threads: Mutex::new(Vec::new()),
            initialize: Mutex::new(None),
            initialized: AtomicBool::new(false),
            pipe,
            shared: self.config.sharing == Sharing::Shared,
        });
        if let Some(stdin) = child.stdin.lock().as_ref()
            && let Err(e) = sys::set_nonblocking(stdin)
        {
            log::warn!("server `{}`: its stdin cannot be made non-blocking: {e}", self.name);
        }
        let started = stdout
            .zip(stderr)
            .ok_or_else(|| io::Error::other("no pipes"))
            .and_then(|(stdout, stderr)| self.start_threads(server, &child, stdout, stderr));
        if let Err(e) = started {
            self.stop_child(&child);
            return Err(DownstreamError::Exhausted(format!("mcpgate cannot start a thread now ({e})")));
        }
        log::debug!("server `{}`: process {pid} started", self.name);
        Ok(child)
    }

    fn start_threads(
        self: &Arc<Self>,
        server: &Arc<Server>,
        child: &Arc<Child>,
        stdout: std::process::ChildStdout,
        stderr: std::process::ChildStderr,
    ) -> io::Result<()> {
        let reader = {
            let (server, program, child) = (server.clone(), self.clone(), child.clone());
            threads::spawn("stdio", &self.name, move || read_stdout(&server, &program, &child, stdout))?
        };
        child.threads.lock().push(reader);
        let name = self.name.clone();
        let pid = child.pid;
        let logger = threads::spawn("stderr", &self.name, move || log_stderr(&name, stderr, pid))?;
        child.threads.lock().push(logger);
        Ok(())
    }

    /// A child ended on its own: counted, and its server backs off.
    pub(super) fn ended_on_its_own(&self, child: &Child) {
        self.exited.inc();
        let mut backoff = self.backoff.lock();
        backoff.restart = true;
        if child.started.elapsed() >= STABLE_AFTER {
            backoff.failures = 0;
            backoff.until = None;
        } else {
            // The first failure restarts at once; then 1 s, 2 s, 4 s, ... 60 s.
            backoff.failures += 1;
            backoff.until = (backoff.failures > 1).then(|| {
                let step = BACKOFF_MIN.saturating_mul(1 << (backoff.failures - 2).min(6)).min(BACKOFF_MAX);
                Instant::now() + step
            });
        }
    }
}

/// Opens a session on a stdio server: its own child (`"sharing":
/// "session"`) or a view of the shared one. Sends `initialize` unless the
/// shared child has answered it already.
fn open(server: &Arc<Server>, program: &Arc<Program>, body: &[u8]) -> Result<Opened, DownstreamError> {
    let shared = program.config.sharing == Sharing::Shared;
    let child = if shared {
        let mut slot = program.shared.lock();
        // Ends: a turn either takes a child or takes a gone one out of the slot.
        loop {
            match slot.as_ref() {
                Some(child) if !child.gone.load(Ordering::Acquire) => break child.clone(),
                Some(_) => {
                    // Stopped without the lock held; meanwhile another session
                    // may start the next child, which this one then uses.
                    let old = slot.take();
                    drop(slot);
                    if let Some(old) = old {
                        program.stop_child(&old);
                    }
                    slot = program.shared.lock();
                }
                None => {
                    let child = program.spawn(server)?;
                    *slot = Some(child.clone());
                    break child;
                }
            }
        }
    } else {
        program.spawn(server)?
    };
    child.views.fetch_add(1, Ordering::AcqRel);
    *child.used.lock() = Instant::now();
    let view = VIEWS.fetch_add(1, Ordering::Relaxed);
    let link = StdioLink { program: program.clone(), child: child.clone(), view, shared };
    if shared {
        // The first session initializes the shared child, as mcpgate, able to
        // sample, elicit and list roots (each session's client is asked).
        let mut first = child.initialize.lock();
        if let Some(answer) = first.as_ref() {
            return Ok((Box::new(link), Ok(answer.clone())));
        }
        let params = json!({
            "protocolVersion": crate::protocol::versions::NEWEST,
            "capabilities": {"sampling": {}, "elicitation": {}, "roots": {"listChanged": true}},
            "clientInfo": {"name": "mcpgate", "version": env!("CARGO_PKG_VERSION")},
        });
        let body = jsonrpc::request(&Value::from(0), "initialize", Some(&jsonrpc::raw(&params)));
        let answer = link.initialize(server, &body);
        if let Ok(answer) = &answer {
            *first = Some(answer.clone());
        }
        drop(first);
        return Ok((Box::new(link), answer));
    }
    let answer = link.initialize(server, body);
    Ok((Box::new(link), answer))
}
