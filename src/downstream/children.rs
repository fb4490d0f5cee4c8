//! Every child process of mcpgate, whatever server it serves: the one
//! long-lived thread that starts them (the kernel's `PR_SET_PDEATHSIG` follows
//! the starting *thread*), their count against `max_processes`, and what
//! they leave behind (mcpgate is their subreaper: [`Children::sweep`]). The
//! stdio transport starts its children here, and the reaper sweeps here;
//! as `runtime/threads.rs` is for threads, the one place processes are
//! started. Below every transport: the gateway owns it, and hands it to
//! the stdio servers through the `Context`.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Sender, bounded, unbounded};
use parking_lot::Mutex;

use crate::runtime::backoff::Backoff;
use crate::runtime::sys;
use crate::runtime::threads;
use crate::stats::{Counter, Gauge};

/// Every child of mcpgate: the thread that starts them, and their count
/// against `max_processes`.
pub struct Children {
    /// Guards the spawner thread's orders and handle; started with the
    /// first child, `stopped` after shutdown.
    spawner: Mutex<Spawner>,
    /// Held from the check of the limits to the count of the child started:
    /// children started at once would all pass the check before any counted.
    pub(crate) starting: Mutex<()>,
    pub(crate) limit: AtomicUsize,
    grace_ms: AtomicU64,
    pub(crate) max_message: AtomicUsize,
    pub live: Gauge,
    pub spawned: Counter,
    pub reaped: Counter,
    /// Guards the pids of the children started and not yet reaped: any
    /// other process whose parent is mcpgate was left by one of them (see
    /// [`Children::sweep`]). Held across each start, so that a child just
    /// started is never taken for such a process.
    known: Arc<Mutex<std::collections::HashSet<u32>>>,
    /// Guards whose each live child is (its server, and for whom), so that a
    /// refusal at `max_processes` names what holds the limit.
    holders: Mutex<std::collections::HashMap<u32, (String, Holder)>>,
    /// Starts refused at a process limit, and when the last was.
    pub(crate) refusals: Counter,
    last_refused: Mutex<Option<Instant>>,
}

/// For whom a child runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Holder {
    /// One client session (`"sharing": "session"`): its id and client's name.
    Session { id: String, client: String },
    /// The sessions of one user (`"sharing": "user"` with `auth`): the start of its digest.
    User(String),
    /// Every session (`"shared"`, or `"user"` without `auth`).
    Everyone,
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

type SpawnOrder = (sys::Exec, Sender<io::Result<sys::Spawned>>);

impl Children {
    pub(crate) fn new(limit: usize, grace: Duration, max_message: usize) -> Arc<Children> {
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
            holders: Mutex::new(std::collections::HashMap::new()),
            refusals: Counter::default(),
            last_refused: Mutex::new(None),
        })
    }

    /// Notes whose the child `pid` of `server` is.
    pub(crate) fn hold(&self, pid: u32, server: &str, holder: Holder) {
        self.holders.lock().insert(pid, (server.to_string(), holder));
    }

    /// A start refused at a process limit: counted, for the health.
    pub(crate) fn refused(&self) {
        self.refusals.inc();
        *self.last_refused.lock() = Some(Instant::now());
    }

    /// Seconds since a start was last refused at a process limit; `None` if none was.
    pub(crate) fn secs_since_refused(&self) -> Option<u64> {
        self.last_refused.lock().map(|at| at.elapsed().as_secs())
    }

    /// What holds the live children (of `server`, or of all): `30 held by 5
    /// sessions of `mcp-inspector`, 6 by 2 users, 1 by every session`.
    pub(crate) fn holders_of(&self, server: Option<&str>) -> String {
        use std::collections::{BTreeMap, BTreeSet};
        let holders = self.holders.lock();
        let mut sessions: BTreeMap<&str, (usize, BTreeSet<&str>)> = BTreeMap::new();
        let (mut users, mut user_count, mut everyone) = (BTreeSet::new(), 0, 0);
        for (name, holder) in holders.values().filter(|(name, _)| server.is_none_or(|s| s == name)) {
            match holder {
                Holder::Session { id, client } => {
                    let entry = sessions.entry(client).or_default();
                    entry.0 += 1;
                    entry.1.insert(id);
                }
                Holder::User(digest) => {
                    users.insert((name, digest));
                    user_count += 1;
                }
                Holder::Everyone => everyone += 1,
            }
        }
        let distinct_users = users.iter().map(|(_, d)| d).collect::<BTreeSet<_>>().len();
        let mut parts: Vec<String> = sessions
            .iter()
            .map(|(client, (n, ids))| format!("{n} held by {} session(s) of `{client}`", ids.len()))
            .collect();
        if user_count > 0 {
            parts.push(format!("{user_count} shared by the sessions of {distinct_users} user(s)"));
        }
        if everyone > 0 {
            parts.push(format!("{everyone} shared by every session"));
        }
        if parts.is_empty() {
            return "none is held now".into();
        }
        format!(
            "{}; a session's own processes stop when it ends (DELETE, or session_idle_timeout_secs), shared ones after shared_idle_secs unused",
            parts.join(", ")
        )
    }

    /// Takes new settings (a reload).
    pub(crate) fn configure(&self, limit: usize, grace: Duration, max_message: usize) {
        self.limit.store(limit, Ordering::Relaxed);
        self.grace_ms.store(grace.as_millis() as u64, Ordering::Relaxed);
        self.max_message.store(max_message, Ordering::Relaxed);
    }

    pub(crate) fn grace(&self) -> Duration {
        Duration::from_millis(self.grace_ms.load(Ordering::Relaxed))
    }

    /// Starts `exec` on the spawner thread, started with the first
    /// child ([`sys::spawn`]). Children are started from it alone: the kernel
    /// sends `PR_SET_PDEATHSIG` when the starting *thread* ends, so it lives as
    /// long as mcpgate serves.
    pub(crate) fn spawn(&self, exec: sys::Exec) -> io::Result<sys::Spawned> {
        let orders = {
            let mut spawner = self.spawner.lock();
            if spawner.stopped {
                return Err(io::Error::other("mcpgate is stopping"));
            }
            if spawner.orders.is_none() {
                let (tx, rx) = unbounded::<SpawnOrder>();
                let known = self.known.clone();
                spawner.thread = Some(threads::spawn("spawner", "", move || {
                    for (exec, reply) in rx {
                        let mut known = known.lock();
                        let spawned = sys::spawn(&exec);
                        if let Ok(spawned) = &spawned {
                            known.insert(spawned.process.id());
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
            .send((exec, tx))
            .map_err(|_| io::Error::other("the spawner thread is gone"))?;
        rx.recv().unwrap_or_else(|_| Err(io::Error::other("the spawner thread is gone")))
    }

    /// Stops the spawner thread and joins it, then whatever the children
    /// left behind; after every child is stopped.
    pub(crate) fn stop(&self) {
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
    pub(crate) fn reap_left_behind(&self) {
        if self.spawned.get() > 0 {
            self.sweep(Sweep::Ended);
        }
    }

    /// A child was reaped: its pid may be reused by any process now.
    pub(crate) fn forget(&self, pid: u32) {
        self.known.lock().remove(&pid);
        self.holders.lock().remove(&pid);
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
pub(crate) fn descendants(root: u32) -> Vec<u32> {
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
pub(crate) fn pipe_of(fd: &impl AsRawFd) -> Option<String> {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok().map(|t| t.to_string_lossy().into_owned())
}

/// Reaps processes mcpgate killed, which are its children (it is their
/// subreaper): each within a second.
pub(crate) fn reap_all(pids: &[u32]) {
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut left: Vec<u32> = pids.to_vec();
    while !left.is_empty() && Instant::now() < deadline {
        left.retain(|&pid| !sys::reap(pid));
        if !left.is_empty() {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Pauses of [`exits_within`]: the first, then each next one twice as long, up to 10 ms.
const WAIT_PAUSE: Backoff = Backoff::new(Duration::from_micros(100), Duration::from_millis(10));

/// Waits up to `grace` for the child `pid` to exit, without reaping it,
/// looking again after 0.1 ms, then after twice as long each time, up to
/// 10 ms. A child whose stdin closed mostly exits within a millisecond: a
/// fixed 10 ms pause made every DELETE of a stdio session, and every other
/// close, take 10 ms.
pub(crate) fn exits_within(pid: u32, grace: Duration) -> bool {
    let deadline = Instant::now() + grace;
    let mut pause = WAIT_PAUSE.steps();
    loop {
        if sys::has_exited(pid) {
            return true;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        std::thread::sleep(pause.next_delay().min(left));
    }
}
