//! The state file: the live client sessions with their `initialize` params
//! and each downstream session's id, and the downstream sessions whose
//! `DELETE` is under way, so that after a restart (clean, `kill -9`, power
//! cut) clients keep their sessions and every downstream session is still
//! closed exactly once.
//!
//! A journal of JSON lines (format 3): a header, then one record per
//! change, appended as it happens: a session opened or ended, a downstream
//! session opened, marked closing, closed, and now and then the sessions'
//! activity. One session's open or close appends a line, and rewrites no
//! other session's record (20 sessions with a 3 MB `clientInfo` made a
//! 60 MB file rewritten on every open and close). The file is rewritten
//! whole at start and when it has doubled since, as a snapshot followed by
//! the records still to come: the live sessions are read first, then the
//! closing ones and the records queued, together, so every change the
//! snapshot shows has its record in the old file or after the snapshot,
//! and a session that ends in between is closing in the new file, not in
//! neither. Replaying a record twice changes nothing.
//!
//! Write-ahead: a client session is in the file before its `initialize` is
//! answered, a downstream session before a request uses it, and a closing
//! one is marked before its `DELETE` and kept until that `DELETE` is done.
//! A crash can then only leave a session the server created in the
//! milliseconds before it was written; a `DELETE` answered in the
//! milliseconds before its end was written is not sent again, the next
//! start asking its server first (`service::restore`). [`Journal::commit`] waits for the records
//! queued before it; appends are grouped, so one `fdatasync` serves every
//! request waiting.
//!
//! The file: 0600. A rewrite goes to a temporary file opened with
//! `O_NOFOLLOW` and `O_EXCL`, fsynced, renamed over the old one, the
//! directory fsynced. A last line cut short is an append a crash
//! interrupted (nobody was answered on it): it is left out. Any other line
//! that does not read makes the file damaged. Files of format 1 and 2 (one
//! JSON document) still load.

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

/// Format 3 is the journal; formats 1 and 2 (one JSON document) still load.
const FORMAT: u32 = 3;
/// How often the writer looks for activity to save, and retries a failed write.
const LOOK_EVERY: Duration = Duration::from_millis(250);
/// The longest a request waits for its write.
const COMMIT_WAIT: Duration = Duration::from_secs(5);
/// The file is rewritten whole once it passes this and has doubled since
/// its last rewrite.
const REWRITE_AT: u64 = 1 << 20;

/// The state file of instance `id` in a shared `state_dir`.
pub(crate) fn state_path(dir: &Path, id: &str) -> PathBuf {
    dir.join(format!("{id}.state.json"))
}

/// Activity alone (no session opened or closed) is written at most this
/// often, and at least four times per idle timeout.
pub(crate) fn activity_every(idle_timeout: Duration) -> Duration {
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
    /// The digest of who created it (hex: a token's SHA-256, an OAuth
    /// subject's), never a token. Files before OAuth called it `token_sha256`.
    #[serde(default, alias = "token_sha256")]
    pub principal_sha256: Option<String>,
    /// The digest of its user when it is not the principal's (an OAuth
    /// issuer and subject, whatever the token's scopes): whose tokens at
    /// servers with `oauth` it uses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_sha256: Option<String>,
    #[serde(default)]
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
    /// The client session it belongs to (absent in files of format 1 and 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// Of an HTTP+SSE server: the session was its stream, which ended with
    /// the process that held it. A restart opens a new one, never resumes it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ends_with_process: bool,
    /// Whose tokens it sends, on a server with `oauth` (hex digest): its
    /// `DELETE` after a restart needs one too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// What a state file holds, whatever its format.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Saved {
    pub(crate) format: u32,
    /// The `instance_id` of the mcpgate that wrote it: its session ids start with it.
    #[serde(default)]
    pub(crate) instance_id: Option<String>,
    /// Downstream sessions whose `DELETE` had not been seen through.
    #[serde(default)]
    pub(crate) closing: Vec<SavedDownstream>,
    pub(crate) sessions: Vec<SavedSession>,
    /// When the file was last written (its mtime), in unix seconds: the
    /// writer touches it at least every `activity_every`, so mcpgate ran
    /// until about then. A session's idle time ends there: the time it was
    /// down is not the client's idleness.
    #[serde(skip)]
    pub(crate) written: Option<u64>,
}

/// The first line of a journal.
#[derive(Debug, Serialize, Deserialize)]
struct Header {
    format: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    instance_id: Option<String>,
}

/// One line of the journal after its header. Each sets or removes one
/// thing, so that replaying a line twice changes nothing.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Record {
    /// A client session (its `downstreams` come in records of their own).
    Session(SavedSession),
    /// A downstream session of the client session it names.
    Downstream(SavedDownstream),
    /// A downstream session is being closed: it leaves its client session.
    Closing { key: u64, downstream: SavedDownstream },
    /// Its `DELETE` is done.
    Closed(u64),
    /// A client session ended (idle, deleted by its client, refused).
    End(String),
    /// Client sessions' last activity, in unix seconds.
    Active(Vec<(String, u64)>),
}

/// A journal's lines, as they are replayed.
#[derive(Default)]
struct Replay {
    instance_id: Option<String>,
    sessions: HashMap<String, SavedSession>,
    /// In the order the sessions first came.
    order: Vec<String>,
    closing: HashMap<u64, SavedDownstream>,
}

impl Replay {
    fn apply(&mut self, record: Record) {
        match record {
            Record::Session(mut session) => {
                let kept = self.sessions.get_mut(&session.id).map(|s| std::mem::take(&mut s.downstreams));
                session.downstreams = kept.unwrap_or_default();
                if !self.sessions.contains_key(&session.id) {
                    self.order.push(session.id.clone());
                }
                self.sessions.insert(session.id.clone(), session);
            }
            Record::Downstream(downstream) => {
                if let Some(session) = downstream.client.as_ref().and_then(|c| self.sessions.get_mut(c)) {
                    session.downstreams.retain(|d| d.server != downstream.server);
                    session.downstreams.push(downstream);
                }
            }
            Record::Closing { key, downstream } => {
                if let Some(session) = downstream.client.as_ref().and_then(|c| self.sessions.get_mut(c)) {
                    session
                        .downstreams
                        .retain(|d| !(d.server == downstream.server && d.session_id == downstream.session_id));
                }
                self.closing.insert(key, downstream);
            }
            Record::Closed(key) => {
                self.closing.remove(&key);
            }
            Record::End(id) => {
                self.sessions.remove(&id);
            }
            Record::Active(list) => {
                for (id, at) in list {
                    if let Some(session) = self.sessions.get_mut(&id) {
                        session.last_active = session.last_active.max(at);
                    }
                }
            }
        }
    }

    fn into_saved(mut self) -> Saved {
        let sessions = self.order.iter().filter_map(|id| self.sessions.remove(id)).collect();
        let mut closing: Vec<(u64, SavedDownstream)> = self.closing.into_iter().collect();
        closing.sort_by_key(|(key, _)| *key);
        Saved {
            format: FORMAT,
            instance_id: self.instance_id,
            closing: closing.into_iter().map(|(_, d)| d).collect(),
            sessions,
            written: None,
        }
    }
}

/// How reading a journal went.
enum Read {
    Whole(Saved),
    /// Its last line was cut short (a crash while it was appended): left out.
    Torn(Saved),
    /// A line that is not the last does not read: what could be read, and why.
    Damaged(Saved, String),
}

/// Reads a journal (format 3).
fn read_journal(text: &str) -> Option<Read> {
    let mut lines = text.split_inclusive('\n');
    let header: Header = serde_json::from_str(lines.next()?.trim()).ok()?;
    if header.format != FORMAT {
        return None;
    }
    let mut replay = Replay { instance_id: header.instance_id, ..Replay::default() };
    let mut problem = None;
    let mut torn = false;
    let lines: Vec<&str> = lines.collect();
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Record>(line.trim()) {
            Ok(record) => replay.apply(record),
            // Cut short by a crash as it was appended: nobody was answered on it.
            Err(_) if i + 1 == lines.len() && !line.ends_with('\n') => torn = true,
            Err(e) => {
                problem.get_or_insert_with(|| format!("line {} does not read: {e}", i + 2));
            }
        }
    }
    let saved = replay.into_saved();
    Some(match (problem, torn) {
        (Some(problem), _) => Read::Damaged(saved, problem),
        (None, true) => Read::Torn(saved),
        (None, false) => Read::Whole(saved),
    })
}

/// What a state file holds, whatever its format; `None` when it is
/// damaged or not a state file. For the tests, which read the file as
/// mcpgate would.
pub fn parse(text: &str) -> Option<Saved> {
    match read_journal(text) {
        Some(Read::Whole(saved) | Read::Torn(saved)) => Some(saved),
        Some(Read::Damaged(..)) => None,
        None => serde_json::from_str::<Saved>(text).ok().filter(|s| s.format == 1 || s.format == 2),
    }
}

impl Saved {
    /// Every downstream session it names.
    fn downstreams(&self) -> impl Iterator<Item = &SavedDownstream> {
        self.closing.iter().chain(self.sessions.iter().flat_map(|s| &s.downstreams))
    }

    /// What can be read from a damaged file of format 1 or 2, entry by entry.
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
}

/// One record as a line of the journal.
fn line(record: &Record) -> Vec<u8> {
    let mut out = serde_json::to_vec(record).unwrap_or_default();
    out.push(b'\n');
    out
}

/// A whole journal: the header, each session and its downstream sessions,
/// the closing ones.
fn snapshot(instance_id: Option<&str>, sessions: Vec<SavedSession>, closing: &[(u64, SavedDownstream)]) -> Vec<u8> {
    let header = Header { format: FORMAT, instance_id: instance_id.map(str::to_string) };
    let mut out = serde_json::to_vec(&header).unwrap_or_default();
    out.push(b'\n');
    for mut session in sessions {
        let downstreams = std::mem::take(&mut session.downstreams);
        let id = session.id.clone();
        out.extend(line(&Record::Session(session)));
        for mut d in downstreams {
            d.client = Some(id.clone());
            out.extend(line(&Record::Downstream(d)));
        }
    }
    for (key, downstream) in closing {
        out.extend(line(&Record::Closing { key: *key, downstream: downstream.clone() }));
    }
    out
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

    pub(crate) fn path(&self) -> &Path {
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
        let written =
            meta.modified().ok().and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok()).map(|d| d.as_secs());
        let (problem, recovered) = match read_journal(&text) {
            Some(Read::Whole(saved)) => return Loaded::Saved(Saved { written, ..saved }),
            Some(Read::Torn(saved)) => {
                let saved = Saved { written, ..saved };
                log::warn!(
                    "state file {path}: its last record was cut short (mcpgate stopped as it wrote it); it is left \
                     out, the {} session(s) before it are restored",
                    saved.sessions.len()
                );
                return Loaded::Saved(saved);
            }
            Some(Read::Damaged(saved, problem)) => (problem, saved),
            None => match serde_json::from_str::<Saved>(&text) {
                Ok(saved) if saved.format == 1 || saved.format == 2 => {
                    return Loaded::Saved(Saved { written, ..saved });
                }
                Ok(saved) => (format!("format {} is not one this mcpgate reads", saved.format), Saved::default()),
                Err(e) => (e.to_string(), Saved::recover(&text)),
            },
        };
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

    /// Writes `bytes` as the whole file, atomically: a reader (or a crash)
    /// sees the old file or the new one. The temporary file is created anew
    /// (never through a symlink), readable by mcpgate's user only.
    pub(crate) fn replace(&self, bytes: &[u8]) -> std::io::Result<()> {
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
        let written = file.write_all(bytes).and_then(|()| file.sync_all());
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

    /// Appends `bytes` to the file through `handle` (opened on first use,
    /// never through a symlink), and syncs its data.
    fn append(&self, handle: &mut Option<std::fs::File>, bytes: &[u8]) -> std::io::Result<()> {
        if handle.is_none() {
            let file = std::fs::OpenOptions::new().append(true).custom_flags(libc::O_NOFOLLOW).open(&self.path)?;
            *handle = Some(file);
        }
        let Some(file) = handle.as_mut() else { return Ok(()) };
        file.write_all(bytes).and_then(|()| file.sync_data())
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
    /// The shared session store (`store`) could not be written: which, and why.
    Store { store: String, why: String },
}

impl std::fmt::Display for StateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StateError::Failed { path, why } => write!(f, "cannot write the state file {}: {why}", path.display()),
            StateError::Slow { path } => write!(f, "the state file {} was not written within 5 s", path.display()),
            StateError::Stopped => f.write_str("the state file writer has stopped"),
            StateError::Store { store, why } => write!(f, "the session store {store} failed: {why}"),
        }
    }
}

impl std::error::Error for StateError {}

/// Write-ahead bookkeeping of sessions, and the writer it wakes. Without a
/// state file, every call returns at once.
pub struct Journal {
    file: Option<StateFile>,
    /// The shared store the changes go to as well, if any.
    mirror: Option<std::sync::Arc<dyn Mirror>>,
    /// Written into the file.
    instance_id: Option<String>,
    /// Guards the records to append and how far writing got; `wake` tells
    /// the writer, `written` tells the requests waiting for a write. Never
    /// held while another lock is taken.
    state: Mutex<JournalState>,
    wake: Condvar,
    written: Condvar,
}

#[derive(Default)]
struct JournalState {
    /// Records queued and not yet written, as lines, in order.
    pending: Vec<u8>,
    /// Records queued so far, and how many of them are on disk.
    queued: u64,
    durable: u64,
    /// The last write failed: the records it covered, and why.
    failure: Option<(u64, String)>,
    /// Downstream sessions being closed, by their close's key.
    closing: HashMap<u64, SavedDownstream>,
    /// The next write rewrites the whole file: at start, and after an
    /// append failed (it may have left a part of a line).
    rewrite: bool,
    /// Set at shutdown: the file is only appended to from then on.
    appends_only: bool,
    stopping: bool,
}

impl Journal {
    pub(crate) fn new(path: Option<&Path>, instance_id: Option<&str>) -> Journal {
        Journal {
            file: path.map(StateFile::new),
            mirror: None,
            instance_id: instance_id.map(str::to_string),
            state: Mutex::new(JournalState { rewrite: true, ..JournalState::default() }),
            wake: Condvar::new(),
            written: Condvar::new(),
        }
    }

    /// The journal with every change mirrored to the session store too.
    pub(crate) fn with_mirror(mut self, mirror: std::sync::Arc<dyn Mirror>) -> Journal {
        self.mirror = Some(mirror);
        self
    }

    pub fn path(&self) -> Option<&Path> {
        self.file.as_ref().map(StateFile::path)
    }

    fn mirror(&self, change: impl FnOnce() -> Change) {
        if let Some(mirror) = &self.mirror {
            mirror.change(change());
        }
    }

    /// The last write's error, if it failed.
    pub fn error(&self) -> Option<String> {
        self.state.lock().failure.as_ref().map(|(_, e)| e.clone())
    }

    /// Why the file cannot be written now, when its last write failed
    /// (the writer tries again every 250 ms; the activity it writes at
    /// least every 30 s finds a failing file even while nothing else is).
    pub(crate) fn failing(&self) -> Option<StateError> {
        let file = self.file.as_ref()?;
        let why = self.state.lock().failure.as_ref().map(|(_, e)| e.clone())?;
        Some(StateError::Failed { path: file.path.clone(), why })
    }

    /// Waits until every record queued so far is on disk (at most 5 s):
    /// what must be durable before a client is answered.
    pub(crate) fn commit(&self) -> Result<(), StateError> {
        if let Some(mirror) = &self.mirror {
            mirror.commit()?;
        }
        let Some(file) = &self.file else { return Ok(()) };
        let mut st = self.state.lock();
        let target = st.queued;
        if st.durable >= target {
            return Ok(());
        }
        self.wake.notify_one();
        let deadline = Instant::now() + COMMIT_WAIT;
        loop {
            if st.durable >= target {
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
            if self.written.wait_until(&mut st, deadline).timed_out() && st.durable < target {
                return Err(StateError::Slow { path: file.path.clone() });
            }
        }
    }

    /// Queues records, to be written with the next write.
    fn queue(&self, records: impl IntoIterator<Item = Record>) {
        if self.file.is_none() {
            return;
        }
        let mut st = self.state.lock();
        for record in records {
            st.push(&record);
        }
        drop(st);
        self.wake.notify_one();
    }

    /// A client session opens: in the file before anyone learns its id.
    pub(crate) fn opened_session(&self, session: SavedSession) {
        self.mirror(|| Change::Opened(session.clone()));
        self.queue([Record::Session(session)]);
    }

    /// A downstream session of client session `client` opened.
    pub(crate) fn opened_downstream(&self, client: &str, mut downstream: SavedDownstream) {
        downstream.client = Some(client.to_string());
        self.mirror(|| Change::Downstream(downstream.clone()));
        self.queue([Record::Downstream(downstream)]);
    }

    /// A client session ended: its record goes (its downstream sessions
    /// were marked closing first).
    pub(crate) fn ended(&self, client: &str) {
        self.mirror(|| Change::Ended(client.to_string()));
        self.queue([Record::End(client.to_string())]);
    }

    /// Marks downstream sessions as closing; written with the next write.
    /// Each is marked and its record queued under one lock, so that a
    /// rewrite (which takes both at once) sees both or neither.
    pub(crate) fn closing(&self, entries: impl IntoIterator<Item = (usize, SavedDownstream)>) {
        let entries: Vec<(u64, SavedDownstream)> = entries.into_iter().map(|(k, d)| (k as u64, d)).collect();
        for (key, downstream) in &entries {
            self.mirror(|| Change::Closing(*key, downstream.clone()));
        }
        if self.file.is_none() {
            return;
        }
        let mut st = self.state.lock();
        for (key, downstream) in entries {
            // Marked once, though several paths may mark it.
            if st.closing.get(&key) != Some(&downstream) {
                st.push(&Record::Closing { key, downstream: downstream.clone() });
                st.closing.insert(key, downstream);
            }
        }
        drop(st);
        self.wake.notify_one();
    }

    /// From now on the file is only appended to, never rewritten: shutdown
    /// takes every session out of the table while the file keeps the
    /// clients' ones for the next start, and a rewrite writes what the
    /// table holds. (A SIGTERM whose `closing` and `closed` records took the
    /// file past its rewrite left a file of no session: 61 of 61 clients got
    /// 404 after the restart.)
    pub fn appends_only(&self) {
        self.state.lock().appends_only = true;
    }

    /// Their `DELETE` is done: they leave the file with the next write
    /// (unmarked and recorded under one lock, as [`Journal::closing`]).
    pub(crate) fn closed(&self, keys: &[usize]) {
        for key in keys {
            self.mirror(|| Change::Closed(*key as u64));
        }
        if self.file.is_none() {
            return;
        }
        let mut st = self.state.lock();
        for key in keys {
            if st.closing.remove(&(*key as u64)).is_some() {
                st.push(&Record::Closed(*key as u64));
            }
        }
        drop(st);
        self.wake.notify_one();
    }
}

impl JournalState {
    /// Queues one record.
    fn push(&mut self, record: &Record) {
        self.pending.extend(line(record));
        self.queued += 1;
    }
}

/// One change of the sessions, as the journal mirrors it to a shared store
/// (`runtime::store`): the same events as its records, in the same order.
#[derive(Debug, Clone)]
pub enum Change {
    /// A client session opened here, before its client learns its id.
    Opened(SavedSession),
    /// A downstream session of a client session opened (`client` is set).
    Downstream(SavedDownstream),
    /// A downstream session is being closed: its key here, and what it is.
    Closing(u64, SavedDownstream),
    /// Its `DELETE` is done.
    Closed(u64),
    /// A client session ended.
    Ended(String),
}

/// Where the journal mirrors its changes besides (or instead of) the file:
/// the shared store. `commit` waits until what was given is stored.
pub trait Mirror: Send + Sync {
    fn change(&self, change: Change);
    fn commit(&self) -> Result<(), StateError>;
}

/// What the writer reads of the gateway: the client sessions as the file
/// keeps them (for a rewrite), their last activity (for the records of
/// activity), and the idle timeout (which sets how often those are written).
pub trait Source: Send + Sync {
    fn saved_sessions(&self) -> Vec<SavedSession>;
    /// Each live client session's last activity, in unix seconds.
    fn last_active(&self) -> Vec<(String, u64)>;
    fn idle_timeout(&self) -> Duration;
}

/// The thread that writes the state file.
pub struct Writer {
    journal: Arc<Journal>,
    handle: JoinHandle<()>,
}

/// Starts the writer, when there is a state file. Its first write
/// rewrites the file whole, from what was restored: the records queued as
/// it was restored (each session put back in the table, each downstream
/// session marked closing) say what that snapshot holds, and are dropped
/// rather than written twice (with 15 KB `initialize` params, they made the
/// file each start wrote twice as large).
pub fn start(journal: Arc<Journal>, source: Arc<dyn Source>) -> std::io::Result<Option<Writer>> {
    if journal.file.is_none() {
        return Ok(None);
    }
    journal.state.lock().pending.clear();
    let handle = {
        let journal = journal.clone();
        threads::spawn("state", "", move || write_loop(&journal, &*source))?
    };
    Ok(Some(Writer { journal, handle }))
}

/// What the writer keeps between writes.
struct Written {
    /// The file, open for appending; `None` until the first append after a rewrite.
    handle: Option<std::fs::File>,
    /// Its size, and its size after the last rewrite.
    size: u64,
    rewritten: u64,
    /// The activity last written, by session.
    activity: HashMap<String, u64>,
    activity_at: Instant,
}

impl Written {
    fn new() -> Written {
        Written { handle: None, size: 0, rewritten: 0, activity: HashMap::new(), activity_at: Instant::now() }
    }
}

fn write_loop(journal: &Journal, source: &dyn Source) {
    let Some(file) = &journal.file else { return };
    let mut w = Written::new();
    let mut st = journal.state.lock();
    loop {
        // A failed write leaves the file to be rewritten (it may end in a
        // part of a line, which an append would bury): once only appends
        // may be made, nothing more is written, and every wait fails at once.
        let stuck = st.appends_only && st.rewrite;
        if stuck {
            let why = st.failure.take().map_or_else(|| "mcpgate stopped before its first write".into(), |(_, why)| why);
            st.failure = Some((st.queued, why));
            journal.written.notify_all();
        }
        if st.stopping && (stuck || (st.pending.is_empty() && !st.rewrite)) {
            return;
        }
        let rewrite = !st.appends_only && (st.rewrite || (w.size > REWRITE_AT && w.size > 2 * w.rewritten));
        let activity_due = w.activity_at.elapsed() >= activity_every(source.idle_timeout());
        if !stuck && (rewrite || !st.pending.is_empty() || activity_due) {
            drop(st);
            write_once(file, journal, source, rewrite, activity_due, &mut w);
            st = journal.state.lock();
            if st.failure.is_none() && (!st.pending.is_empty() || st.rewrite) {
                continue;
            }
        }
        journal.wake.wait_for(&mut st, LOOK_EVERY);
    }
}

/// One write of the file: the file rewritten whole, or the records queued
/// appended (with the activity, when it is due); then the requests
/// waiting for it are told.
///
/// A rewrite reads the live sessions first, and only then takes the
/// closing ones and the records queued, together: every change the
/// sessions show has its record in the file being replaced or among those
/// records, and a session that ends in between is in neither the sessions
/// nor the file unless its records come with it. Taking the records first
/// (as before) lost such a session's downstream sessions from the file the
/// rewrite renamed into place, until the next append: a kill there left
/// them open at their servers for good.
fn write_once(
    file: &StateFile,
    journal: &Journal,
    source: &dyn Source,
    rewrite: bool,
    activity_due: bool,
    w: &mut Written,
) {
    let sessions = rewrite.then(|| source.saved_sessions());
    let mut st = journal.state.lock();
    let target = st.queued;
    let pending = std::mem::take(&mut st.pending);
    let closing: Vec<(u64, SavedDownstream)> = match sessions {
        Some(_) => st.closing.iter().map(|(k, d)| (*k, d.clone())).collect(),
        None => Vec::new(),
    };
    drop(st);
    let result = match sessions {
        Some(sessions) => write_whole(file, journal, sessions, &closing, &pending, w),
        None => write_records(file, source, pending.clone(), activity_due, w),
    };
    let mut st = journal.state.lock();
    match result {
        Ok(()) => {
            st.durable = st.durable.max(target);
            st.failure = None;
            if rewrite {
                st.rewrite = false;
            }
        }
        Err(e) => {
            crate::limited!(
                error,
                "cannot write the state file {}: {e}; new sessions are refused until it can be written",
                file.path.display()
            );
            // Written again with the next try, after a rewrite: an
            // append that failed may have left a part of a line.
            let mut again = pending;
            again.append(&mut st.pending);
            st.pending = again;
            st.rewrite = true;
            st.failure = Some((target, e.to_string()));
        }
    }
    drop(st);
    journal.written.notify_all();
}

/// Rewrites the file: a snapshot of the live sessions and the closing
/// ones, then the records queued up to it (replayed over the snapshot,
/// they bring each session to where the snapshot or a later record has it).
fn write_whole(
    file: &StateFile,
    journal: &Journal,
    sessions: Vec<SavedSession>,
    closing: &[(u64, SavedDownstream)],
    pending: &[u8],
    w: &mut Written,
) -> std::io::Result<()> {
    let activity: HashMap<String, u64> = sessions.iter().map(|s| (s.id.clone(), s.last_active)).collect();
    let mut bytes = snapshot(journal.instance_id.as_deref(), sessions, closing);
    bytes.extend_from_slice(pending);
    file.replace(&bytes)?;
    w.handle = None;
    w.size = bytes.len() as u64;
    w.rewritten = w.size;
    w.activity = activity;
    w.activity_at = Instant::now();
    Ok(())
}

/// Appends the records queued, and the activity that changed when it is due.
fn write_records(
    file: &StateFile,
    source: &dyn Source,
    mut bytes: Vec<u8>,
    activity_due: bool,
    w: &mut Written,
) -> std::io::Result<()> {
    let mut activity = None;
    if activity_due {
        let now: HashMap<String, u64> = source.last_active().into_iter().collect();
        let changed: Vec<(String, u64)> =
            now.iter().filter(|(id, at)| w.activity.get(*id) != Some(at)).map(|(id, at)| (id.clone(), *at)).collect();
        // Written even when nothing changed: the file's mtime tells a
        // restart until when mcpgate ran.
        bytes.extend(line(&Record::Active(changed)));
        activity = Some(now);
        w.activity_at = Instant::now();
    }
    if !bytes.is_empty() {
        if let Err(e) = file.append(&mut w.handle, &bytes) {
            w.handle = None;
            return Err(e);
        }
        w.size += bytes.len() as u64;
    }
    if let Some(now) = activity {
        w.activity = now;
    }
    Ok(())
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
            client: None,
            ends_with_process: false,
            user: None,
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
            principal_sha256: None,
            user_sha256: None,
            downstreams: vec![downstream(n)],
        }
    }

    fn read(text: &[u8]) -> Saved {
        parse(std::str::from_utf8(text).unwrap()).expect("a state file")
    }

    /// The live sessions as a gateway would show them to the writer, and,
    /// once, a client that ends session `c1` in the moment the writer reads
    /// them (its records are queued, it leaves the table).
    struct Live {
        sessions: Mutex<Vec<SavedSession>>,
        ends_during_snapshot: Mutex<Option<Arc<Journal>>>,
    }

    impl Source for Live {
        fn saved_sessions(&self) -> Vec<SavedSession> {
            if let Some(journal) = self.ends_during_snapshot.lock().take() {
                let mut sessions = self.sessions.lock();
                let ended = sessions.iter().position(|s| s.id == "c1").map(|i| sessions.remove(i));
                for mut d in ended.into_iter().flat_map(|s| s.downstreams) {
                    d.client = Some("c1".into());
                    journal.closing([(7, d)]);
                }
                journal.ended("c1");
            }
            self.sessions.lock().clone()
        }

        fn last_active(&self) -> Vec<(String, u64)> {
            Vec::new()
        }

        fn idle_timeout(&self) -> Duration {
            Duration::from_secs(300)
        }
    }

    /// A state file in a directory of its own, removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir = std::env::temp_dir().join(format!("mcpgate-state-test-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A rewrite that races a client's DELETE: the session leaves the table
    /// between the writer taking the records queued and reading the
    /// sessions. The file it renames into place must still name the
    /// downstream session as closing (a crash before the next append then
    /// sends its DELETE at the next start), not forget it.
    #[test]
    fn a_session_ended_while_the_file_is_rewritten_stays_closing_in_the_new_file() {
        let scratch = Scratch::new("rewrite-race");
        let journal = Arc::new(Journal::new(Some(&scratch.0.join("state.json")), None));
        let live = Live { sessions: Mutex::new(vec![session(1)]), ends_during_snapshot: Mutex::new(None) };
        let file = journal.file.as_ref().unwrap();
        let mut w = Written::new();
        write_once(file, &journal, &live, true, false, &mut w);
        let before = read(&std::fs::read(file.path()).unwrap());
        assert_eq!(before.sessions.len(), 1);
        assert_eq!(before.sessions[0].downstreams.len(), 1);

        *live.ends_during_snapshot.lock() = Some(journal.clone());
        write_once(file, &journal, &live, true, false, &mut w);
        let after = read(&std::fs::read(file.path()).unwrap());
        assert!(after.sessions.is_empty(), "c1 ended: {:?}", after.sessions);
        let closing: Vec<_> = after.closing.iter().map(|d| d.session_id.as_deref()).collect();
        assert_eq!(closing, [Some("s1")], "its downstream session must be closing in the file the rewrite left");
    }

    #[test]
    fn a_token_hash_of_a_file_from_before_oauth_is_its_principal() {
        let mut line = serde_json::to_value(session(1)).unwrap();
        let object = line.as_object_mut().unwrap();
        object.remove("principal_sha256");
        object.insert("token_sha256".into(), "ab".repeat(32).into());
        let back: SavedSession = serde_json::from_value(line).unwrap();
        assert_eq!(back.principal_sha256, Some("ab".repeat(32)));
    }

    #[test]
    fn a_snapshot_reads_back_with_its_instance_id_and_closing_sessions() {
        let bytes = snapshot(Some("gw-1"), (0..3).map(session).collect(), &[(9, downstream(9))]);
        let back = read(&bytes);
        assert_eq!(back.instance_id.as_deref(), Some("gw-1"));
        assert_eq!(back.sessions.len(), 3);
        assert_eq!(back.sessions[1].downstreams[0].session_id.as_deref(), Some("s1"));
        assert_eq!(back.closing.len(), 1);
        let older: Saved = serde_json::from_str(r#"{"format":2,"closing":[],"sessions":[]}"#).unwrap();
        assert_eq!(older.instance_id, None);
        assert!(parse(r#"{"format":2,"closing":[],"sessions":[]}"#).is_some(), "format 2 still loads");
    }

    #[test]
    fn records_replay_to_the_state_they_describe_and_twice_changes_nothing() {
        let mut bytes = snapshot(None, vec![], &[]);
        let mut s = session(1);
        s.downstreams.clear();
        let records = vec![
            Record::Session(s.clone()),
            Record::Downstream(SavedDownstream { client: Some("c1".into()), ..downstream(1) }),
            Record::Session(session(2)),
            Record::Closing { key: 7, downstream: SavedDownstream { client: Some("c1".into()), ..downstream(1) } },
            Record::Active(vec![("c1".into(), 50), ("gone".into(), 60)]),
            Record::End("c2".into()),
        ];
        for record in &records {
            bytes.extend(line(record));
        }
        let once = read(&bytes);
        assert_eq!(once.sessions.len(), 1, "c2 ended");
        assert!(once.sessions[0].downstreams.is_empty(), "its downstream session is closing");
        assert_eq!(once.sessions[0].last_active, 50);
        assert_eq!(once.closing.len(), 1);
        for record in &records {
            bytes.extend(line(record));
        }
        bytes.extend(line(&Record::Closed(7)));
        let twice = read(&bytes);
        assert_eq!((twice.sessions.len(), twice.closing.len()), (1, 0));
    }

    #[test]
    fn a_last_line_cut_short_is_left_out_and_a_bad_line_before_it_is_damage() {
        let mut bytes = snapshot(None, vec![session(1)], &[]);
        let whole = bytes.len();
        bytes.extend(line(&Record::Session(session(2))));
        let cut = std::str::from_utf8(&bytes[..bytes.len() - 10]).unwrap();
        assert!(matches!(read_journal(cut), Some(Read::Torn(s)) if s.sessions.len() == 1));
        let mut garbled = bytes[..whole].to_vec();
        garbled.extend_from_slice(b"{\"session\": nonsense}\n");
        garbled.extend(line(&Record::Session(session(3))));
        match read_journal(std::str::from_utf8(&garbled).unwrap()) {
            Some(Read::Damaged(saved, problem)) => {
                assert_eq!(saved.sessions.len(), 2, "what reads is recovered");
                assert!(problem.contains("line 4"), "{problem}");
            }
            _ => panic!("a bad line in the middle is damage"),
        }
    }
}
