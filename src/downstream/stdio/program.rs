//! What a stdio server keeps, whichever session uses it: the program it
//! runs (command, args, env), its children's counts, the backoff after
//! children that failed on their own, and its shared children (one per
//! user, or one for all). Every child of a server starts here, within
//! `max_processes`, and ends here: on the close path
//! ([`Program::stop_child`]) or on its own ([`Program::ended`]).
//!
//! A shared child starts without anyone waiting on it: mcpgate sends its
//! `initialize` at once, and its stdout's reader settles the start when
//! the answer comes (`routing.rs`). Sessions wait for it only as long as
//! they choose (a list, `list_wait_ms`; a call, `start_timeout_secs`), and
//! the reaper stops one still silent past `start_timeout_secs`.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use serde_json::{Value, json};

use super::child::{Child, Signalled, Start, describe};
use super::reader::{log_stderr, read_stdout};
use super::stdout::Stdout;
use crate::config::{BASE_ENV, Sharing, StdioConfig};
use crate::downstream::children::{Children, Holder, Sweep, exits_within, pipe_of};
use crate::downstream::correlate::{Correlator, Logs, Rules, Waiter, Waiting};
use crate::downstream::{DownstreamError, Opener, Processes, Server};
use crate::protocol::jsonrpc;
use crate::runtime::backoff::Backoff;
use crate::runtime::ratelog::RateLimit;
use crate::runtime::sys::{self, ChildSignal};
use crate::runtime::threads;
use crate::stats::{Counter, Gauge};

/// A child that ran this long before it failed resets its server's backoff.
const STABLE_AFTER: Duration = Duration::from_secs(30);
/// How long a writer whose child's stdin broke waits for the child's reader
/// to say how it ended (its exit status, its last stderr lines).
pub(super) const ENDED_WITHIN: Duration = Duration::from_secs(1);
/// Backoff between starts of a server whose children keep failing.
const BACKOFF: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));

/// What a stdio server keeps: its command, its counts, its backoff, and
/// its shared child.
pub(super) struct Program {
    name: String,
    pub(super) config: StdioConfig,
    children: Arc<Children>,
    live: Gauge,
    spawned: Counter,
    exited: Counter,
    killed: Counter,
    restarts: Counter,
    /// Guards the backoff after children that failed on their own.
    backoff: Mutex<Streak>,
    /// Guards the shared children, by whose they are: a user's digest
    /// (`"sharing": "user"`, `None` without `auth`), or `None` for all
    /// (`"shared"`). Held across a start, not across a wait.
    pub(super) shared: Mutex<HashMap<Option<[u8; 32]>, Arc<Child>>>,
    pub(super) retired: AtomicBool,
    /// This server's own limit on its children's stderr in the log, and on
    /// its warnings: another server's flood does not silence it.
    stderr: RateLimit,
    warnings: RateLimit,
}

#[derive(Default)]
struct Streak {
    /// Children in a row that ended on their own within [`STABLE_AFTER`].
    failures: u32,
    until: Option<Instant>,
    /// One ended on its own: the next start is a restart.
    restart: bool,
}

impl Program {
    pub(super) fn new(name: &str, config: StdioConfig, children: Arc<Children>) -> Program {
        Program {
            name: name.to_string(),
            config,
            children,
            live: Gauge::default(),
            spawned: Counter::default(),
            exited: Counter::default(),
            killed: Counter::default(),
            restarts: Counter::default(),
            backoff: Mutex::new(Streak::default()),
            shared: Mutex::new(HashMap::new()),
            retired: AtomicBool::new(false),
            stderr: RateLimit::new(Duration::from_secs(10)),
            warnings: RateLimit::new(Duration::from_secs(10)),
        }
    }

    pub(super) fn processes(&self) -> Processes {
        let starting = self.shared.lock().values().filter(|c| c.is_starting()).count() as u64;
        Processes {
            starting,
            live: self.live.get(),
            spawned: self.spawned.get(),
            exited: self.exited.get(),
            killed: self.killed.get(),
            restarts: self.restarts.get(),
        }
    }

    /// Stops `child` (the close path's end for a child), and counts it.
    pub(super) fn stop_child(&self, child: &Child) {
        // A shared child that could not start counts as one that failed: the
        // next start waits for the backoff, as after a crash.
        let failed_start = child.shared && !child.is_ready();
        if let Some(Signalled(signalled)) = child.stop(&self.children, &self.live) {
            if signalled {
                self.killed.inc();
            }
            if failed_start && !self.retired.load(Ordering::Acquire) {
                self.back_off(child);
            }
        }
    }

    /// A reload removed or changed this server: its shared child stops once unused.
    pub(super) fn retire(&self) {
        self.retired.store(true, Ordering::Release);
    }

    /// Stops the shared children, whoever uses them (mcpgate is stopping),
    /// all at once: one after the other, six that each needed their grace
    /// took past shutdown_timeout_secs, and what they had started ran on.
    pub(super) fn shutdown(&self) {
        let shared: Vec<Arc<Child>> = self.shared.lock().drain().map(|(_, child)| child).collect();
        threads::for_each_parallel("close", &shared, shared.len(), |child| self.stop_child(child));
    }

    /// Takes `child` out of the shared ones, if it is there: the next
    /// session of its user starts another.
    pub(super) fn forget_shared(&self, child: &Arc<Child>) {
        self.shared.lock().retain(|_, c| !Arc::ptr_eq(c, child));
    }

    /// Whose shared child a session of `principal` uses.
    fn owner_of(&self, principal: Option<[u8; 32]>) -> Option<[u8; 32]> {
        match self.config.sharing {
            Sharing::User => principal,
            Sharing::Shared | Sharing::Session => None,
        }
    }

    /// The shared child of `principal`'s sessions, started (and sent
    /// `initialize`) unless it runs; it may still be starting.
    pub(super) fn shared_child(
        self: &Arc<Self>,
        server: &Arc<Server>,
        opener: &Opener,
    ) -> Result<Arc<Child>, DownstreamError> {
        let owner = self.owner_of(opener.principal);
        let mut shared = self.shared.lock();
        if let Some(child) = shared.get(&owner) {
            let gone = child.gone.load(Ordering::Acquire);
            if !gone && child.usable() {
                return Ok(child.clone());
            }
            // Ended, or could not start: stopped without the lock held. One that
            // ended is started again (meanwhile another session may start the
            // next one, which this one then uses); one that could not start
            // says why, and the backoff decides when the next is tried.
            let old = shared.remove(&owner);
            drop(shared);
            let why = old.as_ref().filter(|_| !gone).map(|old| old.why_not_started(server.limits.start));
            if let Some(old) = old {
                self.stop_child(&old);
            }
            if let Some(why) = why {
                return Err(DownstreamError::Refused(why));
            }
            shared = self.shared.lock();
            if let Some(child) = shared.get(&owner) {
                return Ok(child.clone());
            }
        }
        let holder = match (self.config.sharing, owner) {
            (Sharing::User, Some(digest)) => Holder::User(crate::runtime::sha256::to_hex(&digest[..4])),
            _ => Holder::Everyone,
        };
        let (child, started) = self.spawn(server, holder, |child| self.begin_start(server, child))?;
        shared.insert(owner, child.clone());
        drop(shared);
        if let Err(e) = started {
            // Its stdin is closed when it ended at once: its reader says why.
            let e = match child.wait_started(Instant::now() + ENDED_WITHIN) {
                Some(Err(why)) => DownstreamError::Exited(why),
                _ => e,
            };
            self.forget_shared(&child);
            self.stop_child(&child);
            return Err(e);
        }
        Ok(child)
    }

    /// Sends a shared child mcpgate's own `initialize`, able to sample,
    /// elicit and list roots (each session's client is asked); its answer
    /// settles the start (`routing.rs`).
    fn begin_start(&self, server: &Server, child: &Child) -> Result<(), DownstreamError> {
        let params = json!({
            "protocolVersion": crate::protocol::versions::NEWEST,
            "capabilities": {"sampling": {}, "elicitation": {}, "roots": {"listChanged": true}},
            "clientInfo": {"name": "mcpgate", "version": env!("CARGO_PKG_VERSION")},
        });
        let wire = Value::from(0);
        let body = jsonrpc::request(&wire, "initialize", Some(&jsonrpc::raw(&params)));
        // No call waits: the answer settles `start`.
        let waiting =
            Waiting { waiter: Waiter::Reader, id: None, token: None, their_token: None, view: 0, carries: false };
        child.calls.expect(&wire, waiting)?;
        child.write_line(&body, server.limits.request)
    }

    /// Stops the shared children that cannot serve or that nobody needs: gone;
    /// refused `initialize` or silent past `start_timeout_secs`; unused for
    /// `idle` (at once, retired), unless started eagerly. The reaper's job.
    pub(super) fn stop_idle(&self, idle: Duration) {
        let retired = self.retired.load(Ordering::Acquire);
        let eager = self.config.start == crate::config::Start::Eager && !retired;
        let mut stale = Vec::new();
        self.shared.lock().retain(|owner, child| {
            // Started ahead for every session: kept. A user's (with `auth`) stops when unused.
            let kept_ahead = eager && owner.is_none();
            let unused =
                child.views.load(Ordering::Acquire) == 0 && (retired || child.idle_for() >= idle) && !kept_ahead;
            let keep = !unused && !child.gone.load(Ordering::Acquire) && child.usable();
            if !keep {
                stale.push(child.clone());
            }
            keep
        });
        for child in stale {
            let warning = match &*child.start.lock() {
                Start::Pending(_) => Some(format!(
                    "process {} did not answer initialize within start_timeout_secs; it is stopped",
                    child.pid
                )),
                _ if child.gone.load(Ordering::Acquire) => None,
                Start::Failed(why) => Some(format!("process {} is stopped: {why}", child.pid)),
                Start::Ready(_) => {
                    log::info!("server `{}`: a shared process is stopped (no session used it)", self.name);
                    None
                }
            };
            if let Some(warning) = warning
                && let Some(suppressed) = self.warnings.allow()
            {
                log::warn!(
                    "server `{}`: {warning}{}",
                    self.name,
                    crate::runtime::ratelog::more(suppressed, &self.warnings)
                );
            }
            self.stop_child(&child);
        }
    }

    /// Starts a child for `holder`, unless a limit or the backoff says no,
    /// and has `first` write to it before its reader and stderr threads
    /// start, so that they start while the child does.
    pub(super) fn spawn<T>(
        self: &Arc<Self>,
        server: &Arc<Server>,
        holder: Holder,
        first: impl FnOnce(&Child) -> T,
    ) -> Result<(Arc<Child>, T), DownstreamError> {
        // What to exec, made ready before the limits' lock: finding the program reads the disk.
        let mut env = std::collections::BTreeMap::new();
        for name in BASE_ENV {
            if let Some(value) = std::env::var_os(name) {
                env.insert(name.into(), value);
            }
        }
        for (name, value) in std::env::vars_os() {
            if name.to_str().is_some_and(|n| crate::config::passes(&self.config.passthrough, n)) {
                env.insert(name, value);
            }
        }
        env.extend(self.config.env.iter().map(|(k, v)| (k.into(), v.into())));
        let cannot = |why: &dyn std::fmt::Display| {
            DownstreamError::Connect(format!("cannot start `{}`: {why}", self.config.command))
        };
        // The child's own PATH (mcpgate's, in BASE_ENV, unless its `env` sets one).
        let path = env.get(std::ffi::OsStr::new("PATH")).map(std::ffi::OsString::as_os_str);
        let file = self.config.find_program(path).map_err(|why| cannot(&why))?;
        let exec = sys::Exec::new(&file, &self.config.command, &self.config.args, &env, self.config.cwd.as_deref())
            .map_err(|e| cannot(&e))?;
        // Children are started one at a time on the spawner thread anyway.
        let starting = self.children.starting.lock();
        {
            let backoff = self.backoff.lock();
            if let Some(until) = backoff.until
                && Instant::now() < until
            {
                let wait = until.saturating_duration_since(Instant::now()).as_secs_f64().ceil();
                return Err(DownstreamError::Exhausted(format!(
                    "its process failed (ended, or did not start) {} times in a row; it is started again in {wait} s",
                    backoff.failures
                )));
            }
        }
        let total = self.children.limit.load(Ordering::Relaxed);
        if self.children.live.get() as usize >= total {
            self.children.refused();
            return Err(DownstreamError::Exhausted(format!(
                "mcpgate runs its limit of {total} processes (max_processes): {}",
                self.children.holders_of(None)
            )));
        }
        if let Some(max) = self.config.max_processes
            && self.live.get() as usize >= max
        {
            self.children.refused();
            return Err(DownstreamError::Exhausted(format!(
                "this server runs its limit of {max} processes (mcpServers.{}.max_processes): {}",
                self.name,
                self.children.holders_of(Some(&self.name))
            )));
        }
        let sys::Spawned { process, stdin, stdout, stderr } = self.children.spawn(exec).map_err(|e| cannot(&e))?;
        self.children.hold(process.id(), &self.name, holder);
        self.children.spawned.inc();
        self.children.live.inc();
        self.spawned.inc();
        self.live.inc();
        if std::mem::take(&mut self.backoff.lock().restart) {
            self.restarts.inc();
        }
        drop(starting);
        let pid = process.id();
        let pipe = pipe_of(&stdout);
        let child = Arc::new(Child {
            pid,
            started: Instant::now(),
            process: Mutex::new(Some(process)),
            stdin: Mutex::new(Some(stdin)),
            calls: Correlator::new(rules(self.config.sharing)),
            views: AtomicUsize::new(0),
            next_wire: AtomicU64::new(1),
            used: Mutex::new(Instant::now()),
            gone: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            threads: Mutex::new(Vec::new()),
            start: Mutex::new(Start::Pending(Vec::new())),
            settled: Condvar::new(),
            start_deadline: Instant::now() + server.limits.start,
            initialized: AtomicBool::new(false),
            pipe,
            shared: self.config.sharing != Sharing::Session,
            stderr_tail: Mutex::new(std::collections::VecDeque::with_capacity(super::child::TAIL_LINES)),
            stderr_done: AtomicBool::new(false),
            stdout: Mutex::new(None),
            last_call: AtomicU64::new(0),
            reader_wake: Mutex::new(false),
            reader_woke: Condvar::new(),
        });
        if let Some(stdin) = child.stdin.lock().as_ref()
            && let Err(e) = sys::set_nonblocking(stdin)
        {
            log::warn!("server `{}`: its stdin cannot be made non-blocking: {e}", self.name);
        }
        let max = self.children.max_message.load(Ordering::Relaxed);
        *child.stdout.lock() = Some(Stdout::new(stdout, max));
        let sent = first(&child);
        if let Err(e) = self.start_threads(server, &child, stderr) {
            self.stop_child(&child);
            return Err(DownstreamError::Exhausted(format!("mcpgate cannot start a thread now ({e})")));
        }
        log::debug!("server `{}`: process {pid} started", self.name);
        Ok((child, sent))
    }

    fn start_threads(
        self: &Arc<Self>,
        server: &Arc<Server>,
        child: &Arc<Child>,
        stderr: std::process::ChildStderr,
    ) -> io::Result<()> {
        let reader = {
            let (server, program, child) = (server.clone(), self.clone(), child.clone());
            threads::spawn("stdio", &self.name, move || {
                let _live = server.stats.threads_readers.enter();
                let why = read_stdout(&server, &child);
                program.ended(&server, &child, &why);
            })?
        };
        child.threads.lock().push(reader);
        let (program, stderr_of) = (self.clone(), child.clone());
        let logger = threads::spawn("stderr", &self.name, move || {
            log_stderr(&program.name, stderr, &stderr_of, &program.stderr)
        })?;
        child.threads.lock().push(logger);
        Ok(())
    }

    /// The reader of `child`'s stdout ended, `why`: the child is gone. If
    /// the close path did not stop it, it ended on its own: it is reaped now
    /// (no zombie), and its calls are told.
    fn ended(&self, server: &Server, child: &Child, why: &str) {
        child.gone.store(true, Ordering::Release);
        if child.stopping.load(Ordering::Acquire) {
            return;
        }
        let status = child.process.lock().take().map(|mut process| {
            // The grace to exit, if it has not; then its group goes with it, as
            // on the close path, before it is reaped.
            exits_within(child.pid, self.children.grace());
            let _ = sys::signal_group(child.pid, ChildSignal::Kill);
            let status = process.wait().ok();
            self.children.forget(child.pid);
            // Its server's count first: whoever reads mcpgate's at 0 reads 0 there too.
            self.live.dec();
            self.children.reaped.inc();
            self.children.live.dec();
            self.ended_on_its_own(child);
            // What it left holding its stdout goes with it (mcpgate is its subreaper).
            if let Some(pipe) = &child.pipe {
                self.children.sweep(Sweep::Holding(pipe));
            }
            status
        });
        let status = describe(status.flatten());
        // Why it ended is mostly in its last words: they go with the error.
        let said = child
            .last_stderr(Duration::from_millis(500))
            .map(|tail| format!("; its stderr ended with: {}", server.redact(&tail)))
            .unwrap_or_default();
        if let Some(suppressed) = self.warnings.allow() {
            log::warn!(
                "server `{}`: its process {} ended ({why}, {status}){said}; it is started again when next needed{}",
                server.name(),
                child.pid,
                crate::runtime::ratelog::more(suppressed, &self.warnings)
            );
        }
        child.end_calls(&format!("its process ended ({status}){said}"));
    }

    /// A child ended on its own: counted, and its server backs off.
    fn ended_on_its_own(&self, child: &Child) {
        self.exited.inc();
        self.back_off(child);
    }

    /// `child` failed (it ended on its own, or could not start): the next
    /// start of its server waits, longer each time it fails again soon.
    fn back_off(&self, child: &Child) {
        let mut backoff = self.backoff.lock();
        backoff.restart = true;
        if child.started.elapsed() >= STABLE_AFTER {
            backoff.failures = 0;
            backoff.until = None;
        } else {
            backoff.failures += 1;
            backoff.until = restart_delay(backoff.failures).map(|wait| Instant::now() + wait);
        }
    }
}

/// How a child's correlator routes: what a child of one session sends
/// before its session listens is kept for it; a child's log messages go to
/// every session using it.
fn rules(sharing: Sharing) -> Rules {
    Rules { early: sharing == Sharing::Session, logs: Logs::ToEverySession }
}

/// The wait before the next start after `failures` in a row: the first
/// failure restarts at once; then 1 s, 2 s, 4 s, ... 60 s.
fn restart_delay(failures: u32) -> Option<Duration> {
    (failures > 1).then(|| BACKOFF.delay(failures - 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_server_restarts_at_once_then_after_one_second_doubling_to_a_minute() {
        let waits: Vec<Option<u64>> = (1..=9).map(|n| restart_delay(n).map(|d| d.as_secs())).collect();
        assert_eq!(waits, [None, Some(1), Some(2), Some(4), Some(8), Some(16), Some(32), Some(60), Some(60)]);
    }
}
