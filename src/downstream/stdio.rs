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

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::process::{Child as Process, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Sender, bounded, unbounded};
use parking_lot::Mutex;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::{Arrival, Downstream, DownstreamError, Flight, Inbox, Link, Opened, Server};
use crate::config::{BASE_ENV, Sharing, StdioConfig};
use crate::limited;
use crate::protocol::jsonrpc::{self, Kind, Message};
use crate::runtime::memory::Charge;
use crate::runtime::ratelog::RateLimit;
use crate::runtime::sys::{self, ChildSignal};
use crate::runtime::threads;
use crate::stats::{Counter, Gauge};

/// Lines of a child's stderr logged before they are rate-limited.
const STDERR_BURST: u64 = 50;
/// The longest stderr line logged; the rest of it is cut.
const STDERR_LINE: usize = 2048;
/// A child that ran this long before it failed resets its server's backoff.
const STABLE_AFTER: Duration = Duration::from_secs(30);
/// Messages, and their bytes, a per-session child may send before its
/// session listens (see [`Calls::early`]); more are dropped.
const EARLY_MAX: usize = 64;
const EARLY_BYTES: usize = 1 << 20;
/// Backoff between starts of a server whose children keep failing.
const BACKOFF_MIN: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(60);

/// Every child of mcpgate: the thread that starts them, and their count
/// against `max_processes`.
pub struct Children {
    /// Guards the spawner thread's orders and handle; started with the
    /// first child, `stopped` after shutdown.
    spawner: Mutex<Spawner>,
    /// Held from the check of the limits to the count of the child started:
    /// children started at once would all pass the check before any counted.
    starting: Mutex<()>,
    limit: AtomicUsize,
    grace_ms: AtomicU64,
    max_message: AtomicUsize,
    pub live: Gauge,
    pub spawned: Counter,
    pub reaped: Counter,
    /// Guards the pids of the children started and not yet reaped: any
    /// other process whose parent is mcpgate was left by one of them (see
    /// [`Children::sweep`]). Held across each fork, so that a child just
    /// started is never taken for such a process.
    known: Arc<Mutex<std::collections::HashSet<u32>>>,
}

/// Which of the processes left behind to stop (see [`Children::sweep`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sweep<'a> {
    /// None: those that have ended are reaped.
    Ended,
    /// Those that hold this pipe (`pipe:[inode]`) of a child that is gone.
    Holding(&'a str),
    /// All of them (mcpgate is stopping).
    All,
}

#[derive(Default)]
struct Spawner {
    orders: Option<Sender<SpawnOrder>>,
    thread: Option<JoinHandle<()>>,
    stopped: bool,
}

type SpawnOrder = (Command, Sender<io::Result<Process>>);

impl Children {
    pub fn new(limit: usize, grace: Duration, max_message: usize) -> Arc<Children> {
        Arc::new(Children {
            spawner: Mutex::new(Spawner::default()),
            starting: Mutex::new(()),
            limit: AtomicUsize::new(limit),
            grace_ms: AtomicU64::new(grace.as_millis() as u64),
            max_message: AtomicUsize::new(max_message),
            live: Gauge::default(),
            spawned: Counter::default(),
            reaped: Counter::default(),
            known: Arc::new(Mutex::new(std::collections::HashSet::new())),
        })
    }

    /// Takes new settings (a reload).
    pub fn configure(&self, limit: usize, grace: Duration, max_message: usize) {
        self.limit.store(limit, Ordering::Relaxed);
        self.grace_ms.store(grace.as_millis() as u64, Ordering::Relaxed);
        self.max_message.store(max_message, Ordering::Relaxed);
    }

    fn grace(&self) -> Duration {
        Duration::from_millis(self.grace_ms.load(Ordering::Relaxed))
    }

    /// Starts `command` on the spawner thread, started with the first
    /// child. Children are forked from it alone: the kernel sends
    /// `PR_SET_PDEATHSIG` when the forking *thread* ends, so it lives as
    /// long as mcpgate serves.
    fn spawn(&self, command: Command) -> io::Result<Process> {
        let orders = {
            let mut spawner = self.spawner.lock();
            if spawner.stopped {
                return Err(io::Error::other("mcpgate is stopping"));
            }
            if spawner.orders.is_none() {
                let (tx, rx) = unbounded::<SpawnOrder>();
                let known = self.known.clone();
                spawner.thread = Some(threads::spawn("spawner", "", move || {
                    for (mut command, reply) in rx {
                        let mut known = known.lock();
                        let spawned = command.spawn();
                        if let Ok(process) = &spawned {
                            known.insert(process.id());
                        }
                        drop(known);
                        let _ = reply.send(spawned);
                    }
                })?);
                spawner.orders = Some(tx);
            }
            spawner.orders.clone()
        };
        let (tx, rx) = bounded(1);
        orders
            .ok_or_else(|| io::Error::other("the spawner thread is gone"))?
            .send((command, tx))
            .map_err(|_| io::Error::other("the spawner thread is gone"))?;
        rx.recv().unwrap_or_else(|_| Err(io::Error::other("the spawner thread is gone")))
    }

    /// Stops the spawner thread and joins it, then whatever the children
    /// left behind; after every child is stopped.
    pub fn stop(&self) {
        let thread = {
            let mut spawner = self.spawner.lock();
            spawner.stopped = true;
            drop(spawner.orders.take());
            spawner.thread.take()
        };
        if let Some(thread) = thread {
            let _ = thread.join();
        }
        self.sweep(Sweep::All);
    }

    /// Reaps what the children left behind that has ended (no zombie of
    /// mcpgate's stays); the reaper's job, once a child was ever started.
    pub fn reap_left_behind(&self) {
        if self.spawned.get() > 0 {
            self.sweep(Sweep::Ended);
        }
    }

    /// A child was reaped: its pid may be reused by any process now.
    fn forget(&self, pid: u32) {
        self.known.lock().remove(&pid);
    }

    /// The processes mcpgate is the parent of but did not start: what its
    /// children started and left behind when they ended (mcpgate is their
    /// subreaper). Those that ended are reaped; those `which` names are
    /// killed and reaped. How many were killed.
    pub(crate) fn sweep(&self, which: Sweep<'_>) -> usize {
        let me = std::process::id();
        let known = self.known.lock();
        let mut killed = Vec::new();
        for (pid, ppid, state) in processes() {
            if ppid != me || known.contains(&pid) {
                continue;
            }
            let stop = match which {
                _ if state == 'Z' => false,
                Sweep::Ended => false,
                Sweep::All => true,
                Sweep::Holding(pipe) => holds(pid, pipe),
            };
            if stop && sys::kill(pid).is_ok() {
                killed.push(pid);
            }
            if state == 'Z' {
                sys::reap(pid);
            }
        }
        drop(known);
        reap_all(&killed);
        if !killed.is_empty() {
            log::info!("stopped {} process(es) left behind by stdio servers that ended: {killed:?}", killed.len());
        }
        killed.len()
    }
}

/// The processes of one stdio server, for the status page.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Processes {
    pub live: u64,
    pub spawned: u64,
    /// Ended on their own (a crash, or an exit mcpgate did not ask for).
    pub exited: u64,
    /// Needed SIGTERM or SIGKILL to end when mcpgate stopped them.
    pub killed: u64,
    /// Started again after one of them ended on its own.
    pub restarts: u64,
}

/// What a stdio server keeps: its command, and its shared child.
pub(crate) struct Endpoint {
    name: String,
    config: StdioConfig,
    children: Arc<Children>,
    live: Gauge,
    spawned: Counter,
    exited: Counter,
    killed: Counter,
    restarts: Counter,
    /// Guards the backoff after children that failed on their own.
    backoff: Mutex<Backoff>,
    /// Guards the shared child (with `"sharing": "shared"`).
    shared: Mutex<Option<Arc<Child>>>,
    retired: AtomicBool,
}

#[derive(Default)]
struct Backoff {
    /// Children in a row that ended on their own within [`STABLE_AFTER`].
    failures: u32,
    until: Option<Instant>,
    /// One ended on its own: the next start is a restart.
    restart: bool,
}

impl Endpoint {
    pub fn new(name: &str, config: StdioConfig, children: Arc<Children>) -> Endpoint {
        Endpoint {
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

    pub fn processes(&self) -> Processes {
        Processes {
            live: self.live.get(),
            spawned: self.spawned.get(),
            exited: self.exited.get(),
            killed: self.killed.get(),
            restarts: self.restarts.get(),
        }
    }

    /// Stops `child` (the close path's end for a child), and counts it.
    fn stop_child(&self, child: &Child) {
        if let Some(Signalled(signalled)) = child.stop(&self.children) {
            self.live.dec();
            if signalled {
                self.killed.inc();
            }
        }
    }

    /// A reload removed or changed this server: its shared child stops once unused.
    pub fn retire(&self) {
        self.retired.store(true, Ordering::Release);
    }

    /// Stops the shared child, whoever uses it (mcpgate is stopping).
    pub fn shutdown(&self) {
        let shared = self.shared.lock().take();
        if let Some(child) = shared {
            self.stop_child(&child);
        }
    }

    /// Takes `child` out of the shared slot, if it is there: the next
    /// session starts another.
    fn forget_shared(&self, child: &Arc<Child>) {
        let mut shared = self.shared.lock();
        if shared.as_ref().is_some_and(|c| Arc::ptr_eq(c, child)) {
            shared.take();
        }
    }

    /// Stops the shared child when no session has used it for `idle` (or
    /// at once, retired).
    pub fn stop_idle(&self, idle: Duration) {
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
    fn spawn(&self, server: &Arc<Server>) -> Result<Arc<Child>, DownstreamError> {
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
        &self,
        server: &Arc<Server>,
        child: &Arc<Child>,
        stdout: std::process::ChildStdout,
        stderr: std::process::ChildStderr,
    ) -> io::Result<()> {
        let reader = {
            let (server, child) = (server.clone(), child.clone());
            threads::spawn("stdio", &self.name, move || read_stdout(&server, &child, stdout))?
        };
        child.threads.lock().push(reader);
        let name = self.name.clone();
        let pid = child.pid;
        let logger = threads::spawn("stderr", &self.name, move || log_stderr(&name, stderr, pid))?;
        child.threads.lock().push(logger);
        Ok(())
    }

    /// A child ended on its own: counted, and its server backs off.
    fn ended_on_its_own(&self, child: &Child) {
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

fn endpoint(server: &Server) -> &Endpoint {
    match &server.endpoint {
        super::Endpoint::Stdio(endpoint) => endpoint,
        super::Endpoint::Http(..) | super::Endpoint::Sse(_) => unreachable!("a stdio link belongs to a stdio server"),
    }
}

/// What arrives for a call waiting on a child.
enum Incoming {
    Message(Message),
    /// The child is gone (or the call was stopped): why.
    Ended(String),
}

/// A request of mcpgate's waiting for the child's answer.
struct Waiting {
    tx: Sender<Incoming>,
    view: usize,
    /// The id the caller gave the request; the wire id is the child's own.
    id: Value,
    /// The caller's progress token, when it was rewritten on the wire.
    token: Option<(String, Value)>,
    /// Whether the caller's answer carries what the child sends meanwhile to
    /// a client (see [`carries`]).
    carries: bool,
}

/// Whether a request's answer can carry the child's requests to the client
/// whose call it is: not for what mcpgate sends for itself (`initialize`,
/// `ping`, the lists it merges, `logging/setLevel`), whose messages reach
/// no client.
pub(super) fn carries(method: &str) -> bool {
    !matches!(
        method,
        "initialize"
            | "ping"
            | "tools/list"
            | "prompts/list"
            | "resources/list"
            | "resources/templates/list"
            | "tasks/list"
            | "logging/setLevel"
    )
}

#[derive(Default)]
struct Calls {
    /// By wire id.
    waiting: HashMap<u64, Waiting>,
    /// Wire progress token to wire id.
    tokens: HashMap<String, u64>,
    /// Where each view's unasked messages go. (A client's answer to the
    /// child's request needs no entry: it carries the child's own id.)
    inboxes: HashMap<usize, Weak<dyn Inbox>>,
    /// What a per-session child sent unasked before its session listened
    /// (a request right after `notifications/initialized`, as
    /// server-filesystem's for the roots), delivered in order when it does;
    /// `None` for a shared child, and once its session listens or closes.
    early: Option<Vec<Message>>,
}

/// One running child process.
pub(crate) struct Child {
    pid: u32,
    started: Instant,
    /// Guards the process handle; taken by whoever reaps it.
    process: Mutex<Option<Process>>,
    /// Guards its stdin (non-blocking); `None` once closed.
    stdin: Mutex<Option<ChildStdin>>,
    /// Guards the calls waiting, and where unasked messages go.
    calls: Mutex<Calls>,
    /// Downstream sessions using it (1 unless shared).
    views: AtomicUsize,
    next_wire: AtomicU64,
    /// Guards when a session last used it (a shared child stops when idle).
    used: Mutex<Instant>,
    gone: AtomicBool,
    /// Set by the close path: its end is not a crash.
    stopping: AtomicBool,
    /// Guards its reader and stderr threads, joined when it is stopped.
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// A shared child's `initialize` answer, for the views after the first.
    initialize: Mutex<Option<Message>>,
    initialized: AtomicBool,
    /// Its stdout as `/proc` names it (`pipe:[inode]`): a process it left
    /// behind that still holds it is found by it.
    pipe: Option<String>,
}

impl Child {
    fn idle_for(&self) -> Duration {
        self.used.lock().elapsed()
    }

    /// Writes one message as a line, within `timeout`: a child that does not
    /// read its stdin does not hold the writer longer.
    fn write_line(&self, body: &[u8], timeout: Duration) -> Result<(), DownstreamError> {
        let deadline = Instant::now() + timeout;
        let mut line = Vec::with_capacity(body.len() + 1);
        line.extend_from_slice(body);
        line.push(b'\n');
        let mut stdin = self.stdin.lock();
        let Some(pipe) = stdin.as_mut() else { return Err(DownstreamError::Closed) };
        let mut rest = &line[..];
        while !rest.is_empty() {
            match pipe.write(rest) {
                Ok(0) => return Err(DownstreamError::Protocol("its stdin is closed".into())),
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() || !sys::wait_writable(pipe, left).unwrap_or(false) {
                        return Err(DownstreamError::Timeout(timeout));
                    }
                }
                Err(e) => return Err(DownstreamError::Protocol(format!("writing to its stdin failed: {e}"))),
            }
        }
        Ok(())
    }

    /// Ends the child: stdin closed, then the grace to exit, SIGTERM to its
    /// group, the grace again, SIGKILL; reaped in any case, and its threads
    /// joined. Once only: whoever comes second (or after it ended on its
    /// own) gets `None`; the first, whether it needed a signal.
    fn stop(&self, children: &Children) -> Option<Signalled> {
        self.stopping.store(true, Ordering::Release);
        drop(self.stdin.lock().take());
        let Some(mut process) = self.process.lock().take() else {
            self.join_threads();
            return None;
        };
        // What it started, wherever in its tree: a grandchild that left its
        // group (setsid) is out of reach of the signals to the group.
        let tree = descendants(self.pid);
        let grace = children.grace();
        let mut signalled = false;
        if !exits_within(self.pid, grace) {
            signalled = true;
            let _ = sys::signal_group(self.pid, ChildSignal::Terminate);
            // Past this grace, the SIGKILL below ends it.
            exits_within(self.pid, grace);
        }
        // What the child started is in its group: nothing of it outlives it.
        // Sent before the child is reaped, while its pid (the group's id)
        // cannot have been reused.
        let _ = sys::signal_group(self.pid, ChildSignal::Kill);
        let status = process.wait().ok();
        children.forget(self.pid);
        children.reaped.inc();
        children.live.dec();
        // Its tree is mcpgate's now (its subreaper): killed, and reaped.
        let left: Vec<u32> = tree.into_iter().filter(|&pid| sys::kill(pid).is_ok()).collect();
        reap_all(&left);
        if let Some(pipe) = &self.pipe {
            children.sweep(Sweep::Holding(pipe));
        }
        self.end_calls(&format!("its process was stopped ({})", describe(status)));
        self.join_threads();
        if signalled {
            log::debug!("process {} needed a signal to stop", self.pid);
        }
        Some(Signalled(signalled))
    }

    /// Wakes every call waiting on the child with `why`.
    fn end_calls(&self, why: &str) {
        let waiting: Vec<Sender<Incoming>> = self.calls.lock().waiting.drain().map(|(_, w)| w.tx).collect();
        for tx in waiting {
            let _ = tx.send(Incoming::Ended(why.to_string()));
        }
    }

    fn join_threads(&self) {
        let handles: Vec<JoinHandle<()>> = std::mem::take(&mut *self.threads.lock());
        for handle in handles {
            // The reader is this thread when the child ended on its own.
            if handle.thread().id() == std::thread::current().id() {
                threads::join_later(handle);
            } else {
                let _ = handle.join();
            }
        }
    }
}

/// Every process as (pid, parent, state), from `/proc/<pid>/stat`.
fn processes() -> Vec<(u32, u32, char)> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // `pid (name) state ppid ...`: the name may hold spaces and parentheses.
        let Some(rest) = stat.rfind(')').and_then(|at| stat.get(at + 2..)) else { continue };
        let mut fields = rest.split_whitespace();
        let state = fields.next().and_then(|s| s.chars().next()).unwrap_or('?');
        let Some(ppid) = fields.next().and_then(|p| p.parse().ok()) else { continue };
        out.push((pid, ppid, state));
    }
    out
}

/// Every descendant of `root`: its children, theirs, and so on.
fn descendants(root: u32) -> Vec<u32> {
    let all = processes();
    let mut found = vec![root];
    let mut i = 0;
    // Bounded by the processes there are: each is added once.
    while i < found.len() && found.len() <= all.len() {
        let parent = found[i];
        let children: Vec<u32> =
            all.iter().filter(|(pid, ppid, _)| *ppid == parent && !found.contains(pid)).map(|p| p.0).collect();
        found.extend(children);
        i += 1;
    }
    found.remove(0);
    found
}

/// Whether process `pid` has the pipe `pipe` (`pipe:[inode]`) open.
fn holds(pid: u32, pipe: &str) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    fds.flatten().any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target.as_os_str() == pipe))
}

/// What `/proc/self/fd` says a descriptor of mcpgate's is, e.g. `pipe:[123]`.
fn pipe_of(fd: &impl AsRawFd) -> Option<String> {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok().map(|t| t.to_string_lossy().into_owned())
}

/// Reaps processes mcpgate killed, which are its children (it is their
/// subreaper): each within a second.
fn reap_all(pids: &[u32]) {
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut left: Vec<u32> = pids.to_vec();
    while !left.is_empty() && Instant::now() < deadline {
        left.retain(|&pid| !sys::reap(pid));
        if !left.is_empty() {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Whether a child stopped by mcpgate needed SIGTERM or SIGKILL.
struct Signalled(bool);

/// First pause of [`exits_within`]; each next one is twice as long, up to [`WAIT_PAUSE_MAX`].
const WAIT_PAUSE_MIN: Duration = Duration::from_micros(100);
const WAIT_PAUSE_MAX: Duration = Duration::from_millis(10);

/// Waits up to `grace` for the child `pid` to exit, without reaping it,
/// looking again after 0.1 ms, then after twice as long each time, up to
/// 10 ms. A child whose stdin closed mostly exits within a millisecond: a
/// fixed 10 ms pause made every DELETE of a stdio session, and every other
/// close, take 10 ms.
fn exits_within(pid: u32, grace: Duration) -> bool {
    let deadline = Instant::now() + grace;
    let mut pause = WAIT_PAUSE_MIN;
    loop {
        if sys::has_exited(pid) {
            return true;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        std::thread::sleep(pause.min(left));
        pause = (pause * 2).min(WAIT_PAUSE_MAX);
    }
}

/// `exit status 3`, `killed by signal 9`, or why it is not known.
fn describe(status: Option<ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) if s.code().is_some() => format!("exit status {}", s.code().unwrap_or_default()),
        Some(s) => format!("killed by signal {}", s.signal().unwrap_or_default()),
        None => "exit status unknown".into(),
    }
}

/// The reader of a child's stdout: a JSON-RPC message per line, each sent
/// where it belongs. At its end the child is gone: its calls get an error
/// naming its exit status, and it is reaped.
fn read_stdout(server: &Arc<Server>, child: &Arc<Child>, stdout: std::process::ChildStdout) {
    let _live = server.stats.threads_readers.enter();
    let endpoint = endpoint(server);
    let max = endpoint.children.max_message.load(Ordering::Relaxed);
    let mut reader = BufReader::with_capacity(8 * 1024, stdout);
    let mut line = Vec::new();
    let why = loop {
        line.clear();
        match read_line(&mut reader, &mut line, max, child.pid) {
            Ok(Got::Eof) => break "it closed its stdout".to_string(),
            Ok(Got::Exited) => break "it exited; a process it started holds its stdout".to_string(),
            Ok(Got::Line) => {}
            Err(e) => break format!("reading its stdout failed: {e}"),
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match Message::parse(&line) {
            Ok(message) => route(server, child, message),
            Err(e) => {
                limited!(warn, "server `{}`: a line on stdout is not JSON-RPC ({}); ignored", server.name(), e.message)
            }
        }
    };
    child.gone.store(true, Ordering::Release);
    if child.stopping.load(Ordering::Acquire) {
        return;
    }
    // It ended on its own: reap it now (no zombie), and tell its calls.
    let status = child.process.lock().take().map(|mut process| {
        // The grace to exit, if it has not; then its group goes with it, as
        // on the close path, before it is reaped.
        exits_within(child.pid, endpoint.children.grace());
        let _ = sys::signal_group(child.pid, ChildSignal::Kill);
        let status = process.wait().ok();
        endpoint.children.forget(child.pid);
        endpoint.children.reaped.inc();
        endpoint.children.live.dec();
        endpoint.live.dec();
        endpoint.ended_on_its_own(child);
        // What it left holding its stdout goes with it (mcpgate is its subreaper).
        if let Some(pipe) = &child.pipe {
            endpoint.children.sweep(Sweep::Holding(pipe));
        }
        status
    });
    let status = describe(status.flatten());
    limited!(
        warn,
        "server `{}`: its process {} ended ({why}, {status}); it is started again when next needed",
        server.name(),
        child.pid
    );
    child.end_calls(&format!("its process ended ({status})"));
}

/// What [`read_line`] got.
enum Got {
    /// A line, in `line`.
    Line,
    /// The end of the stream.
    Eof,
    /// Nothing to read, and the child has exited: the stream's end may never
    /// come, as a process the child started holds the pipe open (`npx`, a
    /// shell without `exec`), until its group is killed.
    Exited,
}

/// How often a reader with nothing to read looks whether its child exited.
const EXIT_CHECK: Duration = Duration::from_millis(200);

/// Waits until `reader` has something to read, or its end: false if its
/// child `pid` exited meanwhile, leaving nothing to read.
fn input_or_exit<R: AsRawFd>(reader: &BufReader<R>, pid: u32) -> io::Result<bool> {
    while reader.buffer().is_empty() && !sys::wait_readable(reader.get_ref(), EXIT_CHECK)? {
        if sys::has_exited(pid) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// One line into `line`, without its `\n`; or the end of the stream, or of
/// the child `pid`.
fn read_line<R: Read + AsRawFd>(
    reader: &mut BufReader<R>,
    line: &mut Vec<u8>,
    max: usize,
    pid: u32,
) -> io::Result<Got> {
    let mut charge = Charge::empty();
    loop {
        if !input_or_exit(reader, pid)? {
            return Ok(Got::Exited);
        }
        let buf = match reader.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok(Got::Eof);
        }
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(at) => (at, true),
            None => (buf.len(), false),
        };
        if line.len() + take > max {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("a message larger than {max} bytes")));
        }
        if line.len() + take > 64 * 1024 && !charge.grow(take) {
            return Err(io::Error::new(io::ErrorKind::OutOfMemory, "mcpgate holds its limit of max_memory_mb"));
        }
        line.extend_from_slice(&buf[..take]);
        reader.consume(take + usize::from(done));
        if done {
            return Ok(Got::Line);
        }
    }
}

/// Sends a message from the child where it belongs.
fn route(server: &Arc<Server>, child: &Arc<Child>, mut message: Message) {
    match message.kind() {
        Ok(Kind::Response) => {
            let wire = message.id.as_ref().and_then(Value::as_u64);
            let waiting = wire.and_then(|wire| child.calls.lock().waiting.remove(&wire));
            match waiting {
                Some(waiting) => {
                    if let Some((wire_token, _)) = &waiting.token {
                        child.calls.lock().tokens.remove(wire_token);
                    }
                    message.id = Some(waiting.id);
                    let _ = waiting.tx.send(Incoming::Message(message));
                }
                None => log::debug!("server `{}`: a response to no request of mcpgate's ignored", server.name()),
            }
        }
        Ok(Kind::Notification) => {
            if let Some((tx, token)) = progress_target(child, &message) {
                rewrite_token(&mut message, token);
                let _ = tx.send(Incoming::Message(message));
                return;
            }
            // Notifications about the session as a whole go to every session using the child
            // (kept for its session if it does not listen yet).
            let inboxes: Vec<Weak<dyn Inbox>> = {
                let mut calls = child.calls.lock();
                if calls.inboxes.is_empty()
                    && let Some(early) = calls.early.as_mut()
                {
                    let _ = keep_early(server, early, message);
                    return;
                }
                calls.inboxes.values().cloned().collect()
            };
            for inbox in inboxes {
                if let Some(inbox) = inbox.upgrade() {
                    inbox.deliver(server, message.clone());
                }
            }
        }
        Ok(Kind::Request) if message.method() == "ping" => {
            if let Some(id) = &message.id {
                let _ = child.write_line(&jsonrpc::result(id, &jsonrpc::raw(&json!({}))), server.limits.request);
            }
        }
        Ok(Kind::Request) => ask_a_client(server, child, message),
        Err(_) => {}
    }
}

/// A server's request of a client (sampling, elicitation, roots): to the
/// one session with a call running that can carry it (on that call's answer
/// stream when it is the only one, else on the session's `GET` stream), to
/// the one session listening when no such call runs, or kept for a
/// per-session child's session until it listens; with no session or several
/// to choose from, refused.
fn ask_a_client(server: &Arc<Server>, child: &Arc<Child>, message: Message) {
    let (target, message) = {
        let mut calls = child.calls.lock();
        match pick(&calls) {
            Some(target) => (Some(target), message),
            // A per-session child whose session does not listen yet: kept for it.
            None if calls.inboxes.is_empty() && calls.early.is_some() => {
                match calls.early.as_mut().and_then(|early| keep_early(server, early, message)) {
                    None => return,
                    Some(message) => (None, message),
                }
            }
            None => (None, message),
        }
    };
    match target {
        Some(Target::Call(tx)) => {
            let _ = tx.send(Incoming::Message(message));
        }
        Some(Target::Inbox(inbox)) => {
            if let Some(inbox) = inbox.upgrade() {
                inbox.deliver(server, message);
            }
        }
        None => {
            let Some(id) = &message.id else { return };
            let shared = endpoint(server).config.sharing == Sharing::Shared;
            let why = if shared {
                "this server is shared and no single client session has a request running on it"
            } else {
                "its client session is closing, or sent too much before it listened"
            };
            let error = crate::protocol::jsonrpc::RpcError::internal(format!(
                "mcpgate cannot tell which client `{}` is for: {why}",
                message.method()
            ));
            let _ = child.write_line(&jsonrpc::error(id, &error), server.limits.request);
            limited!(
                warn,
                "server `{}`: a `{}` request refused: no single client it could be for",
                server.name(),
                message.method()
            );
        }
    }
}

/// Where a child's request goes: the one call of a view running that can
/// carry it, or else the view's inbox.
fn pick(calls: &Calls) -> Option<Target> {
    let mut views: Vec<usize> = calls.waiting.values().filter(|w| w.carries).map(|w| w.view).collect();
    views.sort_unstable();
    views.dedup();
    let view = match (views.as_slice(), calls.inboxes.len()) {
        ([view], _) => *view,
        ([], 1) => *calls.inboxes.keys().next()?,
        _ => return None,
    };
    let one_call: Vec<&Waiting> = calls.waiting.values().filter(|w| w.view == view && w.carries).collect();
    let target = match one_call.as_slice() {
        [only] => Target::Call(only.tx.clone()),
        _ => Target::Inbox(calls.inboxes.get(&view)?.clone()),
    };
    Some(target)
}

/// Keeps what a per-session child sent before its session listened, up to
/// [`EARLY_MAX`] messages of [`EARLY_BYTES`] in all; gives back one that
/// does not fit.
pub(super) fn keep_early(server: &Server, early: &mut Vec<Message>, message: Message) -> Option<Message> {
    let size = |m: &Message| {
        [&m.params, &m.result, &m.error].iter().filter_map(|p| p.as_ref()).map(|p| p.get().len()).sum::<usize>()
    };
    if early.len() < EARLY_MAX && early.iter().map(size).sum::<usize>() + size(&message) <= EARLY_BYTES {
        early.push(message);
        return None;
    }
    limited!(
        warn,
        "server `{}`: more than mcpgate keeps ({EARLY_MAX} messages, {EARLY_BYTES} bytes) sent before its session \
         listened; `{}` not kept",
        server.name(),
        message.method()
    );
    Some(message)
}

enum Target {
    Call(Sender<Incoming>),
    Inbox(Weak<dyn Inbox>),
}

/// The call a progress notification belongs to, by its (wire) token.
fn progress_target(child: &Child, message: &Message) -> Option<(Sender<Incoming>, Option<Value>)> {
    if message.method() != "notifications/progress" {
        return None;
    }
    let params = message.params_object().ok()?;
    let token = params.get("progressToken")?;
    let calls = child.calls.lock();
    let key = token_key(token);
    let wire = calls.tokens.get(&key)?;
    let waiting = calls.waiting.get(wire)?;
    Some((waiting.tx.clone(), waiting.token.as_ref().map(|(_, theirs)| theirs.clone())))
}

pub(super) fn token_key(token: &Value) -> String {
    match token {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Puts the caller's own progress token back into a progress notification.
fn rewrite_token(message: &mut Message, token: Option<Value>) {
    let Some(token) = token else { return };
    let Ok(mut params) = message.params_object() else { return };
    params.insert("progressToken".into(), token);
    message.params = Some(jsonrpc::raw(&Value::Object(params)));
}

/// A child's stderr into the log, prefixed with the server's name: the
/// first lines as they come, then at most one per 10 s, with a count of
/// those left out. Lines are cut at [`STDERR_LINE`] bytes. Ends with the
/// stream, or once the child `pid` has exited and nothing is left to read:
/// a process that left the child's group may hold the pipe for good, and
/// the close path joins this thread.
fn log_stderr(name: &str, stderr: std::process::ChildStderr, pid: u32) {
    let limit = RateLimit::new(Duration::from_secs(10));
    let mut reader = BufReader::with_capacity(4 * 1024, stderr);
    let mut line = Vec::new();
    let mut seen = 0u64;
    let mut log = |line: &[u8]| {
        seen += 1;
        let text = String::from_utf8_lossy(line);
        let text = text.trim_end();
        if seen <= STDERR_BURST {
            log::info!("server `{name}` (stderr): {text}");
        } else if let Some(suppressed) = limit.allow() {
            log::info!("server `{name}` (stderr): {text}{}", crate::runtime::ratelog::more(suppressed, &limit));
        }
    };
    loop {
        let buf: &[u8] = match input_or_exit(&reader, pid) {
            Ok(true) => match reader.fill_buf() {
                Ok(buf) => buf,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => &[],
            },
            _ => &[],
        };
        if buf.is_empty() {
            if !line.is_empty() {
                log(&line);
            }
            return;
        }
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(at) => (at, true),
            None => (buf.len(), false),
        };
        // What is past STDERR_LINE bytes of a line is read and dropped.
        let room = STDERR_LINE.saturating_sub(line.len());
        line.extend_from_slice(&buf[..take.min(room)]);
        reader.consume(take + usize::from(done));
        if done {
            log(&line);
            line.clear();
        }
    }
}

/// Opens a session on a stdio server: its own child (`"sharing":
/// "session"`) or a view of the shared one. Sends `initialize` unless the
/// shared child has answered it already.
pub(crate) fn open(server: &Arc<Server>, endpoint: &Endpoint, body: &[u8]) -> Result<Opened, DownstreamError> {
    let shared = endpoint.config.sharing == Sharing::Shared;
    let child = if shared {
        let mut slot = endpoint.shared.lock();
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
                        endpoint.stop_child(&old);
                    }
                    slot = endpoint.shared.lock();
                }
                None => {
                    let child = endpoint.spawn(server)?;
                    *slot = Some(child.clone());
                    break child;
                }
            }
        }
    } else {
        endpoint.spawn(server)?
    };
    child.views.fetch_add(1, Ordering::AcqRel);
    *child.used.lock() = Instant::now();
    let link = StdioLink { child: child.clone(), view: VIEWS.fetch_add(1, Ordering::Relaxed), shared };
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

/// Numbers the views of children, so a shared child tells sessions apart.
static VIEWS: AtomicUsize = AtomicUsize::new(1);

/// One downstream session on a child: the child itself, or a view of the shared one.
struct StdioLink {
    child: Arc<Child>,
    view: usize,
    shared: bool,
}

impl StdioLink {
    /// Sends `initialize` and waits (connect and request timeouts) for the
    /// answer; a child that gives none is stopped by the close path.
    fn initialize(&self, server: &Server, body: &[u8]) -> Result<Message, DownstreamError> {
        let (tx, rx) = bounded(16);
        let wire = 0;
        self.child
            .calls
            .lock()
            .waiting
            .insert(wire, Waiting { tx, view: self.view, id: Value::from(0), token: None, carries: false });
        let wait = server.limits.connect + server.limits.request;
        if let Err(e) = self.child.write_line(body, wait) {
            self.child.calls.lock().waiting.remove(&wire);
            return Err(e);
        }
        let deadline = Instant::now() + wait;
        loop {
            match rx.recv_deadline(deadline) {
                Ok(Incoming::Message(m)) if m.kind() == Ok(Kind::Response) => return Ok(m),
                Ok(Incoming::Message(_)) => {}
                Ok(Incoming::Ended(why)) => return Err(DownstreamError::Refused(why)),
                Err(_) => {
                    self.child.calls.lock().waiting.remove(&wire);
                    return Err(DownstreamError::Refused(format!(
                        "no answer to initialize within {} s; its process is stopped",
                        wait.as_secs()
                    )));
                }
            }
        }
    }
}

impl Link for StdioLink {
    fn session_id(&self) -> Option<&str> {
        None
    }

    fn request(
        &self,
        d: &Downstream,
        id: &Value,
        method: &str,
        params: Option<&RawValue>,
        on_message: &mut dyn FnMut(Arrival),
        flight: &Arc<Flight>,
    ) -> Result<Message, DownstreamError> {
        if self.child.gone.load(Ordering::Acquire) {
            return Err(DownstreamError::SessionGone);
        }
        *self.child.used.lock() = Instant::now();
        let wire = self.child.next_wire.fetch_add(1, Ordering::Relaxed);
        // A progress token the caller chose may be another session's too.
        let (params, token) = wire_token(params, wire);
        let (tx, rx) = bounded(64);
        let stop = tx.clone();
        if let Err(why) = flight.arm(Box::new(move || {
            let _ = stop.try_send(Incoming::Ended("stopped".into()));
        })) {
            return Err(d.server.stopped(why));
        }
        {
            let mut calls = self.child.calls.lock();
            if let Some((wire_token, _)) = &token {
                calls.tokens.insert(wire_token.clone(), wire);
            }
            calls
                .waiting
                .insert(wire, Waiting { tx, view: self.view, id: id.clone(), token, carries: carries(method) });
        }
        let body = jsonrpc::request(&Value::from(wire), method, params.as_deref());
        let result = self.child.write_line(&body, d.server.limits.request).and_then(|()| {
            loop {
                match rx.recv() {
                    Ok(Incoming::Message(m)) if m.kind() == Ok(Kind::Response) => {
                        flight.heard();
                        break Ok(m);
                    }
                    Ok(Incoming::Message(m)) => {
                        flight.heard();
                        on_message(Arrival::Message(m));
                    }
                    Ok(Incoming::Ended(why)) if why == "stopped" => break Err(DownstreamError::Closed),
                    Ok(Incoming::Ended(why)) => break Err(DownstreamError::Exited(why)),
                    Err(_) => break Err(DownstreamError::Closed),
                }
            }
        });
        let mut calls = self.child.calls.lock();
        if let Some(waiting) = calls.waiting.remove(&wire)
            && let Some((wire_token, _)) = waiting.token
        {
            calls.tokens.remove(&wire_token);
        }
        result
    }

    fn send(&self, d: &Downstream, body: &[u8]) -> Result<(), DownstreamError> {
        if self.child.gone.load(Ordering::Acquire) {
            return Err(DownstreamError::SessionGone);
        }
        if self.shared && is_initialized(body) && self.child.initialized.swap(true, Ordering::AcqRel) {
            // A shared child is initialized once, by its first session.
            return Ok(());
        }
        self.child.write_line(body, d.server.limits.request)
    }

    fn listen(&self, d: &Arc<Downstream>, inbox: Weak<dyn Inbox>) -> Result<(), DownstreamError> {
        // What the child sent before goes first; what it sends meanwhile is kept
        // too, until nothing is left and the inbox takes the rest, in order.
        loop {
            let early = {
                let mut calls = self.child.calls.lock();
                match calls.early.as_mut() {
                    Some(early) if !early.is_empty() => std::mem::take(early),
                    _ => {
                        calls.early = None;
                        calls.inboxes.insert(self.view, inbox);
                        return Ok(());
                    }
                }
            };
            if let Some(inbox) = inbox.upgrade() {
                for message in early {
                    inbox.deliver(&d.server, message);
                }
            }
        }
    }

    fn stop(&self, _: &Downstream) {
        let mut calls = self.child.calls.lock();
        calls.early = None;
        calls.inboxes.remove(&self.view);
    }

    fn end(&self, d: &Downstream) -> Result<(), DownstreamError> {
        let endpoint = endpoint(&d.server);
        let others = self.child.views.fetch_sub(1, Ordering::AcqRel) - 1;
        *self.child.used.lock() = Instant::now();
        if self.shared && others > 0 {
            return Ok(());
        }
        // The last session left a shared child: the reaper stops it after
        // shared_idle_secs, unless it never answered initialize (it hung, or
        // refused), or its server was removed or changed by a reload (the
        // reaper looks only at the servers configured now): then no session
        // can use it, and it stops now. A session initializing it holds the
        // lock, and keeps it.
        let unusable = || {
            endpoint.retired.load(Ordering::Acquire)
                || self.child.initialize.try_lock().is_some_and(|answer| answer.is_none())
        };
        if self.shared && !unusable() {
            return Ok(());
        }
        if self.shared {
            endpoint.forget_shared(&self.child);
        }
        endpoint.stop_child(&self.child);
        Ok(())
    }
}

fn is_initialized(body: &[u8]) -> bool {
    Message::parse(body).is_ok_and(|m| m.method() == "notifications/initialized")
}

/// The params with a progress token of the child's own (the caller's kept
/// to put back), when they carry one; untouched (and not parsed) otherwise.
fn wire_token(params: Option<&RawValue>, wire: u64) -> (Option<Box<RawValue>>, Option<(String, Value)>) {
    let Some(raw) = params else { return (None, None) };
    if !raw.get().contains("progressToken") {
        return (Some(raw.to_owned()), None);
    }
    let Ok(mut value) = serde_json::from_str::<Value>(raw.get()) else { return (Some(raw.to_owned()), None) };
    let Some(token) = value.pointer_mut("/_meta/progressToken") else { return (Some(raw.to_owned()), None) };
    let theirs = token.take();
    let ours = format!("mcpgate-{wire}");
    *token = Value::String(ours.clone());
    (Some(jsonrpc::raw(&value)), Some((ours, theirs)))
}
