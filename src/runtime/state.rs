//! The state file: the live client sessions with their `initialize` params
//! and each downstream session's id, and the downstream sessions whose
//! `DELETE` is under way, so that after a restart (clean, `kill -9`, power
//! cut) clients keep their sessions and every downstream session is still
//! closed exactly once.
//!
//! Write-ahead: a downstream session is in the file before its client's
//! `initialize` is answered (or before a request uses it), and a closing
//! one is marked before its `DELETE` and kept until that `DELETE` is
//! done. A crash can then only leave a session the server created in the
//! milliseconds before it was written, or repeat a `DELETE` that was
//! answered in the milliseconds before its end was written (the server
//! answers 404 to the repeat). [`Journal::commit`] waits for the write;
//! writes are grouped, so one write serves every request waiting for it.
//!
//! The file: 0600, written to a temporary file opened with `O_NOFOLLOW`
//! and `O_EXCL`, fsynced, renamed over the old one, the directory fsynced.
//! One entry per line, so a damaged file still gives up what it holds.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::{Condvar, Mutex};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::runtime::threads;

/// Format 2 added `closing` and the token hash; format 1 files still load.
const FORMAT: u32 = 2;
/// How often the writer looks for activity to save, and retries a failed write.
const LOOK_EVERY: Duration = Duration::from_millis(250);
/// The longest a request waits for its write.
const COMMIT_WAIT: Duration = Duration::from_secs(5);

/// Activity alone (no session opened or closed) is written at most this
/// often, and at least four times per idle timeout.
/// The state file of instance `id` in a shared `state_dir`.
pub fn state_path(dir: &Path, id: &str) -> PathBuf {
    dir.join(format!("{id}.state.json"))
}

pub fn activity_every(idle_timeout: Duration) -> Duration {
    (idle_timeout / 4).clamp(LOOK_EVERY, Duration::from_secs(30))
}

/// A client session as the state file keeps it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SavedSession {
    pub id: String,
    pub protocol_version: String,
    pub init_params: Value,
    pub client_name: String,
    /// Unix seconds of the last request or stream end.
    pub last_active: u64,
    /// The servers its token may reach; absent for all.
    #[serde(default)]
    pub scope: Option<Vec<String>>,
    /// SHA-256 of the token that created it (hex), never the token.
    #[serde(default)]
    pub token_sha256: Option<String>,
    pub downstreams: Vec<SavedDownstream>,
}

/// A downstream session as the state file keeps it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SavedDownstream {
    pub server: String,
    /// The server's URL when it was saved: a server whose URL changed since is not resumed.
    pub url: String,
    pub session_id: Option<String>,
    pub protocol_version: String,
    pub capabilities: Value,
    pub instructions: Option<String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Saved {
    pub format: u32,
    /// The `instance_id` of the mcpgate that wrote it: its session ids start with it.
    #[serde(default)]
    pub instance_id: Option<String>,
    /// Downstream sessions whose `DELETE` had not been seen through.
    #[serde(default)]
    pub closing: Vec<SavedDownstream>,
    pub sessions: Vec<SavedSession>,
}

impl Saved {
    /// One entry per line: a file cut short loses only its last entry.
    fn encode(&self) -> Vec<u8> {
        let mut out = format!("{{\"format\":{},\n", self.format).into_bytes();
        if let Some(id) = &self.instance_id {
            out.extend_from_slice(format!("\"instance_id\":{},\n", Value::from(id.as_str())).as_bytes());
        }
        out.extend_from_slice(b"\"closing\":[");
        let line = |out: &mut Vec<u8>, first: bool, item: Vec<u8>| {
            out.extend_from_slice(if first { b"\n" } else { b",\n" });
            out.extend_from_slice(&item);
        };
        for (i, d) in self.closing.iter().enumerate() {
            line(&mut out, i == 0, serde_json::to_vec(d).unwrap_or_default());
        }
        out.extend_from_slice(b"\n],\n\"sessions\":[");
        for (i, s) in self.sessions.iter().enumerate() {
            line(&mut out, i == 0, serde_json::to_vec(s).unwrap_or_default());
        }
        out.extend_from_slice(b"\n]}\n");
        out
    }

    /// What can be read from a damaged file, entry by entry.
    fn recover(text: &str) -> Saved {
        let mut saved = Saved { format: FORMAT, ..Saved::default() };
        for line in text.lines() {
            let entry = line.trim().trim_end_matches(',');
            if let Ok(session) = serde_json::from_str::<SavedSession>(entry) {
                saved.sessions.push(session);
            } else if let Ok(closing) = serde_json::from_str::<SavedDownstream>(entry) {
                saved.closing.push(closing);
            }
        }
        saved
    }

    /// Every downstream session it names.
    fn downstreams(&self) -> impl Iterator<Item = &SavedDownstream> {
        self.closing.iter().chain(self.sessions.iter().flat_map(|s| &s.downstreams))
    }
}

/// What a start found in the state file.
pub enum Loaded {
    Absent,
    Saved(Saved),
    /// Not to be trusted (others may write it, another user owns it): set
    /// aside unread, nothing in it acted on.
    Rejected,
    /// Damaged: set aside; what could be read from it is to be closed.
    Damaged(Saved),
}

pub struct StateFile {
    path: PathBuf,
}

impl StateFile {
    pub fn new(path: &Path) -> StateFile {
        StateFile { path: path.to_path_buf() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the file, refusing one that others could have written, and
    /// setting aside one that is damaged (a copy is kept; the path is then
    /// free for new state). Each outcome is logged with what was done.
    pub fn load(&self) -> Loaded {
        let path = self.path.display();
        let meta = match std::fs::symlink_metadata(&self.path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Loaded::Absent,
            Err(e) => {
                log::error!("state file {path}: cannot read it ({e}): starting without saved sessions");
                return Loaded::Absent;
            }
        };
        let mode = meta.permissions().mode() & 0o7777;
        let uid = crate::runtime::sys::effective_uid();
        let distrust = if !meta.file_type().is_file() {
            Some("it is not a regular file (a symlink?)".to_string())
        } else if mode & 0o022 != 0 {
            Some(format!("it is writable by others (mode {mode:04o})"))
        } else if meta.uid() != uid {
            Some(format!("it is owned by uid {}, not mcpgate's uid {uid}", meta.uid()))
        } else {
            None
        };
        if let Some(why) = distrust {
            let kept = self.set_aside("rejected");
            log::error!(
                "state file {path}: not loaded: {why}; anyone could have put sessions and servers in it. {}. \
                 Starting without saved sessions; what it names is not closed",
                kept_note(&kept)
            );
            return Loaded::Rejected;
        }
        let text = match std::fs::read(&self.path) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) => {
                log::error!("state file {path}: cannot read it ({e}): starting without saved sessions");
                return Loaded::Absent;
            }
        };
        let problem = match serde_json::from_str::<Saved>(&text) {
            Ok(saved) if saved.format == 1 || saved.format == FORMAT => return Loaded::Saved(saved),
            Ok(saved) => format!("format {} is not one this mcpgate reads", saved.format),
            Err(e) => e.to_string(),
        };
        let recovered = Saved::recover(&text);
        let kept = self.set_aside("damaged");
        log::error!(
            "state file {path}: damaged ({problem}). {}. {} session(s) and {} downstream session(s) could be read \
             from it: the downstream sessions are closed (DELETE), the client sessions are not restored",
            kept_note(&kept),
            recovered.sessions.len(),
            recovered.downstreams().count()
        );
        Loaded::Damaged(recovered)
    }

    /// Renames the file to `<path>.<why>-<unix seconds>`, for a person to look at.
    fn set_aside(&self, why: &str) -> Result<PathBuf, std::io::Error> {
        let secs = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let mut name = self.path.as_os_str().to_owned();
        name.push(format!(".{why}-{secs}"));
        let aside = PathBuf::from(name);
        std::fs::rename(&self.path, &aside).map(|()| aside)
    }

    /// Writes atomically: a reader (or a crash) sees the old file or the new
    /// one. The temporary file is created anew (never through a symlink),
    /// readable by mcpgate's user only.
    pub fn save(&self, saved: &Saved) -> std::io::Result<()> {
        let tmp = self.path.with_extension("tmp");
        // A temporary file left by a crash, or a symlink someone planted: gone.
        match std::fs::remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        let written = file.write_all(&saved.encode()).and_then(|()| file.sync_all());
        drop(file);
        if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, &self.path)) {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // The rename itself is durable once the directory is synced.
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    }
}

fn kept_note(kept: &Result<PathBuf, std::io::Error>) -> String {
    match kept {
        Ok(aside) => format!("It was kept as {}", aside.display()),
        Err(e) => format!("It could not be set aside ({e})"),
    }
}

/// Why what had to be durable is not on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateError {
    /// The write failed (a full disk, permissions): the file and why.
    Failed { path: PathBuf, why: String },
    /// The writer did not finish within 5 s.
    Slow { path: PathBuf },
    /// The writer has stopped (shutdown).
    Stopped,
}

impl std::fmt::Display for StateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StateError::Failed { path, why } => write!(f, "cannot write the state file {}: {why}", path.display()),
            StateError::Slow { path } => write!(f, "the state file {} was not written within 5 s", path.display()),
            StateError::Stopped => f.write_str("the state file writer has stopped"),
        }
    }
}

impl std::error::Error for StateError {}

/// Write-ahead bookkeeping of downstream sessions, and the writer it wakes.
/// Without a state file, every call returns at once.
pub struct Journal {
    file: Option<StateFile>,
    /// Written into the file.
    instance_id: Option<String>,
    /// Guards what is to be written and how far writing got; `wake` tells
    /// the writer, `written` tells the requests waiting for a write. Never
    /// held while another lock is taken.
    state: Mutex<JournalState>,
    wake: Condvar,
    written: Condvar,
}

#[derive(Default)]
struct JournalState {
    /// Changes asked for, and changes written (a write covers every change
    /// asked for before it started).
    wanted: u64,
    done: u64,
    /// The last write failed: the change it covered, and why.
    failure: Option<(u64, String)>,
    /// Downstream sessions being closed, by their close's key.
    closing: HashMap<usize, SavedDownstream>,
    /// At shutdown: the client sessions to keep, without downstream sessions.
    keep: Option<Vec<SavedSession>>,
    stopping: bool,
}

impl Journal {
    pub fn new(path: Option<&Path>, instance_id: Option<&str>) -> Journal {
        Journal {
            file: path.map(StateFile::new),
            instance_id: instance_id.map(str::to_string),
            state: Mutex::new(JournalState::default()),
            wake: Condvar::new(),
            written: Condvar::new(),
        }
    }

    pub fn path(&self) -> Option<&Path> {
        self.file.as_ref().map(StateFile::path)
    }

    /// The last write's error, if it failed.
    pub fn error(&self) -> Option<String> {
        self.state.lock().failure.as_ref().map(|(_, e)| e.clone())
    }

    /// Asks for a write and waits until one that covers what changed so
    /// far is on disk (at most 5 s): what must be durable before a client
    /// is answered.
    pub fn commit(&self) -> Result<(), StateError> {
        let Some(file) = &self.file else { return Ok(()) };
        let mut st = self.state.lock();
        st.wanted += 1;
        let target = st.wanted;
        self.wake.notify_one();
        let deadline = Instant::now() + COMMIT_WAIT;
        loop {
            if st.done >= target {
                return Ok(());
            }
            if let Some((at, why)) = &st.failure
                && *at >= target
            {
                return Err(StateError::Failed { path: file.path.clone(), why: why.clone() });
            }
            if st.stopping {
                return Err(StateError::Stopped);
            }
            if self.written.wait_until(&mut st, deadline).timed_out() && st.done < target {
                return Err(StateError::Slow { path: file.path.clone() });
            }
        }
    }

    /// Asks for a write without waiting for it.
    pub fn changed(&self) {
        if self.file.is_some() {
            self.state.lock().wanted += 1;
            self.wake.notify_one();
        }
    }

    /// Marks downstream sessions as closing; written with the next write.
    pub fn closing(&self, entries: impl IntoIterator<Item = (usize, SavedDownstream)>) {
        if self.file.is_some() {
            self.state.lock().closing.extend(entries);
        }
    }

    /// Their `DELETE` is done: they leave the file with the next write.
    pub fn closed(&self, keys: &[usize]) {
        if self.file.is_some() {
            let mut st = self.state.lock();
            for key in keys {
                st.closing.remove(key);
            }
        }
    }

    /// From now on, only these client sessions are written, without their
    /// downstream sessions (closed at shutdown; clients resume after a restart).
    pub fn keep_clients(&self, sessions: Vec<SavedSession>) {
        self.state.lock().keep = Some(sessions);
    }
}

/// What the writer reads of the gateway: the client sessions as the file
/// keeps them, how much happened (a count that grows with each request),
/// and the idle timeout (which sets how often activity alone is written).
pub trait Source: Send + Sync {
    fn saved_sessions(&self) -> Vec<SavedSession>;
    fn activity(&self) -> u64;
    fn idle_timeout(&self) -> Duration;
}

/// What the file holds now: the live sessions (or, at shutdown, the kept
/// client sessions), then the downstream sessions closing. In that order,
/// and with the journal's lock taken only for the second: a session leaves
/// the table only after its downstream sessions are marked closing, so a
/// session missed by the first read is caught by the second.
fn snapshot(source: &dyn Source, journal: &Journal) -> Saved {
    let keep = journal.state.lock().keep.clone();
    let sessions = match keep {
        Some(keep) => keep,
        None => source.saved_sessions(),
    };
    let closing = journal.state.lock().closing.values().cloned().collect();
    Saved { format: FORMAT, instance_id: journal.instance_id.clone(), closing, sessions }
}

/// The thread that writes the state file.
pub struct Writer {
    journal: Arc<Journal>,
    handle: JoinHandle<()>,
}

/// Starts the writer, when there is a state file.
pub fn start(journal: Arc<Journal>, source: Arc<dyn Source>) -> std::io::Result<Option<Writer>> {
    if journal.file.is_none() {
        return Ok(None);
    }
    let handle = {
        let journal = journal.clone();
        threads::spawn("state", "", move || write_loop(&journal, &*source))?
    };
    Ok(Some(Writer { journal, handle }))
}

fn write_loop(journal: &Journal, source: &dyn Source) {
    let Some(file) = &journal.file else { return };
    let (mut requests, mut saved_at) = (source.activity(), Instant::now());
    let mut st = journal.state.lock();
    loop {
        if st.stopping {
            return;
        }
        let every = activity_every(source.idle_timeout());
        let active = source.activity() != requests && saved_at.elapsed() >= every;
        let retry = st.failure.is_some();
        if st.wanted > st.done || active || retry {
            let target = st.wanted;
            drop(st);
            let result = file.save(&snapshot(source, journal));
            st = journal.state.lock();
            match result {
                Ok(()) => {
                    st.done = st.done.max(target);
                    st.failure = None;
                    (requests, saved_at) = (source.activity(), Instant::now());
                }
                Err(e) => {
                    crate::limited!(
                        error,
                        "cannot write the state file {}: {e}; new sessions are refused until it can be written",
                        file.path.display()
                    );
                    st.failure = Some((target, e.to_string()));
                }
            }
            journal.written.notify_all();
            if st.failure.is_none() {
                continue;
            }
        }
        journal.wake.wait_for(&mut st, LOOK_EVERY);
    }
}

impl Writer {
    /// Writes what is pending, then stops.
    pub fn stop(self) {
        let _ = self.journal.commit();
        let mut st = self.journal.state.lock();
        st.stopping = true;
        drop(st);
        self.journal.wake.notify_all();
        self.journal.written.notify_all();
        let _ = self.handle.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn downstream(n: u32) -> SavedDownstream {
        SavedDownstream {
            server: "a".into(),
            url: "http://127.0.0.1:1/mcp".into(),
            session_id: Some(format!("s{n}")),
            protocol_version: "2025-11-25".into(),
            capabilities: serde_json::json!({}),
            instructions: None,
        }
    }

    fn session(n: u32) -> SavedSession {
        SavedSession {
            id: format!("c{n}"),
            protocol_version: "2025-11-25".into(),
            init_params: serde_json::json!({}),
            client_name: "t".into(),
            last_active: 1,
            scope: None,
            token_sha256: None,
            downstreams: vec![downstream(n)],
        }
    }

    #[test]
    fn the_file_keeps_the_instance_id() {
        let saved =
            Saved { format: FORMAT, instance_id: Some("gw-1".into()), closing: vec![], sessions: vec![session(1)] };
        let back: Saved = serde_json::from_slice(&saved.encode()).unwrap();
        assert_eq!(back.instance_id.as_deref(), Some("gw-1"));
        assert_eq!(back.sessions.len(), 1);
        let older: Saved = serde_json::from_str(r#"{"format":2,"closing":[],"sessions":[]}"#).unwrap();
        assert_eq!(older.instance_id, None);
    }

    #[test]
    fn a_file_cut_anywhere_gives_up_every_whole_entry() {
        let saved = Saved {
            format: FORMAT,
            instance_id: None,
            closing: vec![downstream(9)],
            sessions: (0..3).map(session).collect(),
        };
        let text = String::from_utf8(saved.encode()).unwrap();
        let whole: Saved = serde_json::from_str(&text).unwrap();
        assert_eq!((whole.closing.len(), whole.sessions.len()), (1, 3));
        let mut best = 0;
        for cut in 0..text.len() {
            let recovered = Saved::recover(&text[..cut]);
            let found = recovered.closing.len() + recovered.sessions.len();
            assert!(found >= best, "a longer prefix gives up no less");
            best = found;
        }
        assert_eq!(best, 4);
        let half = Saved::recover(&text[..text.len() * 6 / 10]);
        assert!(half.downstreams().count() >= 2, "{}", &text[..text.len() * 6 / 10]);
    }
}
