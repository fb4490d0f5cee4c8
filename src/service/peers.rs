//! Instances sharing a `state_dir` (several behind one load balancer on a
//! host, or on a shared mount). Each keeps its state in
//! `<instance_id>.state.json` there, and holds an exclusive lock (`flock`)
//! on `<instance_id>.lock` for as long as it runs: the kernel releases it
//! when the process dies, however it dies.
//!
//! Every instance looks at its peers' locks at least once per idle timeout
//! (half of it). A peer whose lock it can take is not running; once it has
//! found it so for longer than the idle timeout, and the peer's state file
//! is still there, the peer's clients have moved on (they got 404 elsewhere
//! and initialized again) and its sessions would be expired at its restart
//! anyway. Holding the peer's lock, the instance then writes the peer's
//! downstream sessions into its own file as closing, removes the peer's
//! file, and lets go of the lock; then it DELETEs them. Two survivors
//! cannot both do it: the lock lets one in at a time, and the second finds
//! no file. A peer that comes back while its lock is held waits for it
//! (at most [`LOCK_WAIT`]) and starts with what is left: nothing, or its
//! whole file.

use std::collections::HashMap;
use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Sender, bounded, select, tick};

use crate::config::valid_instance_id;
use crate::downstream::{self, Downstream};
use crate::gateway::Gateway;
use crate::runtime::state::{Loaded, StateFile};
use crate::runtime::store::files::{self, lock_path, open_lock};
use crate::runtime::threads;
use crate::service::restore::server_for;

/// How long a start waits for its own lock (a peer may hold it for the
/// moment it takes to hand over this instance's downstream sessions).
pub(crate) const LOCK_WAIT: Duration = Duration::from_secs(5);
/// DELETEs of a dead peer's downstream sessions at once.
const CLOSE_PARALLEL: usize = 16;

/// Why this instance's lock could not be taken; each says what to do.
#[derive(Debug)]
pub enum LockError {
    /// `state_dir` could not be created.
    Dir { dir: PathBuf, error: std::io::Error },
    /// The lock file could not be opened or locked.
    File { id: String, path: PathBuf, error: std::io::Error },
    /// Another process holds it: another mcpgate with this `instance_id`.
    Held { id: String, path: PathBuf },
}

impl std::fmt::Display for LockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockError::Dir { dir, error } => write!(f, "state_dir {}: cannot create it: {error}", dir.display()),
            LockError::File { id, path, error } => {
                write!(f, "instance `{id}`: cannot open or lock {}: {error}", path.display())
            }
            LockError::Held { id, path } => write!(
                f,
                "instance `{id}`: its lock {} is held by another process for more than {} s: another mcpgate runs \
                 with this instance_id and state_dir",
                path.display(),
                LOCK_WAIT.as_secs()
            ),
        }
    }
}

impl std::error::Error for LockError {}

/// Takes this instance's lock in `dir` (created if missing), waiting at
/// most [`LOCK_WAIT`]; held until the returned file is dropped (or the
/// process ends).
pub fn lock_instance(dir: &Path, id: &str) -> Result<File, LockError> {
    std::fs::create_dir_all(dir).map_err(|error| LockError::Dir { dir: dir.to_path_buf(), error })?;
    let path = lock_path(dir, id);
    let failed = |error| LockError::File { id: id.to_string(), path: path.clone(), error };
    let file = open_lock(&path).map_err(failed)?;
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(TryLockError::WouldBlock) => return Err(LockError::Held { id: id.to_string(), path }),
            Err(TryLockError::Error(error)) => return Err(failed(error)),
        }
    }
}

/// How often an instance looks at its peers: twice per idle timeout, from
/// 100 ms to a minute.
pub(crate) fn interval(idle_timeout: Duration) -> Duration {
    (idle_timeout / 2).clamp(Duration::from_millis(100), Duration::from_secs(60))
}

/// The thread that looks at the peers.
pub struct Watcher {
    stop: Sender<()>,
    handle: JoinHandle<()>,
}

/// Starts the watcher, when the instance has a `state_dir`.
pub fn start(gateway: Arc<Gateway>) -> std::io::Result<Option<Watcher>> {
    let config = gateway.current().config.clone();
    let (Some(dir), Some(id)) = (config.state_dir.clone(), gateway.store.instance_id.clone()) else {
        return Ok(None);
    };
    let (stop, stopped) = bounded::<()>(0);
    let handle = threads::spawn("state", "peers", move || {
        let ticks = tick(interval(gateway.current().config.session_idle_timeout));
        let mut unlocked_since = HashMap::new();
        loop {
            select! {
                recv(stopped) -> _ => return,
                recv(ticks) -> _ => look(&gateway, &dir, &id, &mut unlocked_since),
            }
        }
    })?;
    Ok(Some(Watcher { stop, handle }))
}

impl Watcher {
    pub fn stop(self) {
        drop(self.stop);
        let _ = self.handle.join();
    }
}

/// One look at every peer's lock; closes what a peer down past the idle
/// timeout left behind.
fn look(gateway: &Gateway, dir: &Path, own: &str, unlocked_since: &mut HashMap<String, Instant>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            crate::limited!(warn, "state_dir {}: cannot list it to look at peers: {e}", dir.display());
            return;
        }
    };
    let idle_timeout = gateway.current().config.session_idle_timeout;
    let mut seen = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(peer) = name.to_str().and_then(|n| n.strip_suffix(".lock")) else { continue };
        if peer == own || !valid_instance_id(peer) {
            continue;
        }
        seen.push(peer.to_string());
        let Ok(lock) = open_lock(&entry.path()) else { continue };
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                unlocked_since.remove(peer);
                continue;
            }
            Err(TryLockError::Error(e)) => {
                crate::limited!(warn, "peer `{peer}`: cannot test its lock: {e}");
                continue;
            }
        }
        let state = crate::runtime::state::state_path(dir, peer);
        if !state.exists() {
            unlocked_since.remove(peer);
            continue;
        }
        let since = *unlocked_since.entry(peer.to_string()).or_insert_with(Instant::now);
        if since.elapsed() < idle_timeout {
            continue;
        }
        let taken = take_over(gateway, peer, &state);
        // The peer's file is gone (or left for the next look): its lock can go.
        drop(lock);
        if let Some(list) = taken {
            unlocked_since.remove(peer);
            downstream::close_all(&list, CLOSE_PARALLEL);
        }
    }
    unlocked_since.retain(|peer, _| seen.contains(peer));
}

/// With the peer's lock held: its downstream sessions written into this
/// instance's file as closing, then its file removed. The sessions to
/// DELETE, or `None` when they could not be written (the file stays, for
/// the next look).
fn take_over(gateway: &Gateway, peer: &str, state: &Path) -> Option<Vec<Arc<Downstream>>> {
    let saved = match StateFile::new(state).load() {
        Loaded::Absent | Loaded::Rejected => return Some(Vec::new()),
        Loaded::Saved(saved) | Loaded::Damaged(saved) => saved,
    };
    // A session a peer claimed from it is that peer's now: not closed here.
    let dir = state.parent().unwrap_or(Path::new("."));
    let sessions: Vec<_> = saved.sessions.iter().filter(|s| !files::moved_away(dir, peer, &s.id)).collect();
    let clients = sessions.len();
    let list: Vec<Arc<Downstream>> = saved
        .closing
        .iter()
        .chain(sessions.iter().flat_map(|s| &s.downstreams))
        // An HTTP+SSE session was the peer's stream: it ended with the peer.
        .filter(|d| !d.ends_with_process)
        .filter_map(|d| server_for(gateway, d).saved_downstream(d))
        .collect();
    let records: Vec<_> = list.iter().filter_map(|d| d.closing_record()).collect();
    let keys: Vec<usize> = records.iter().map(|(key, _)| *key).collect();
    gateway.store.journal.closing(records);
    if let Err(e) = gateway.store.journal.commit() {
        gateway.store.journal.closed(&keys);
        log::error!("peer `{peer}`: its downstream sessions cannot be taken over ({e}); trying again later");
        return None;
    }
    if let Err(e) = std::fs::remove_file(state) {
        if e.kind() != std::io::ErrorKind::NotFound {
            // Closed all the same; the peer's restart would repeat the DELETEs (answered 404).
            log::error!("peer `{peer}`: cannot remove its state file {}: {e}", state.display());
        }
    } else if let Some(parent) = state.parent() {
        let _ = File::open(parent).and_then(|d| d.sync_all());
    }
    log::info!(
        "peer `{peer}`: down for longer than the idle timeout; its {clients} client session(s) end and its {} \
         downstream session(s) are closed here",
        list.len()
    );
    Some(list)
}
