//! The files backend of the session store: `state_dir`, shared by the
//! instances of one host (or of a mount where `flock` works).
//!
//! - A session is in the journal of the instance that holds it
//!   (`<instance_id>.state.json`, `runtime::state`).
//! - An instance is alive while it holds its lock, `<instance_id>.lock`
//!   (the kernel drops it when the process dies, however it dies). A paused
//!   instance keeps it: its sessions wait for it, nobody takes them.
//! - Where it is reached: `<instance_id>.peer`, its `peer_url`.
//! - Who holds a session: the instance its id names, until it is claimed;
//!   then `owners/<id>`, a line `<instance> <epoch>` (and ` ended` once its
//!   session ended there). The journal of the instance it was claimed from
//!   still names it; that instance's restart, and the peer that closes what
//!   a dead instance left, skip a session the owner file gives to another.
//!
//! A claim holds `owners.lock` (one claim at a time in the directory) and
//! the dead holder's lock (it cannot come back in the middle), reads the
//! session from the holder's journal, records it in this instance's
//! journal, and only then writes the owner file: a crash in between leaves
//! the session with its old holder, whose restart or peers close it.

use std::collections::HashMap;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{Claim, Found, Holder, SessionStore, StoreError, minted_by, plausible_id};
use crate::runtime::state::{self, Change, Mirror, SavedSession, StateError};

/// The longest a claim waits for another claim in the directory.
const CLAIM_WAIT: Duration = Duration::from_secs(5);

/// The lock file of instance `id` in `dir`.
pub fn lock_path(dir: &Path, id: &str) -> PathBuf {
    dir.join(format!("{id}.lock"))
}

/// Opens (creating) a lock file, never through a symlink.
pub fn open_lock(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Takes the lock of `file`, waiting at most `wait`; `None` when it stays held.
fn lock_within(file: &File, wait: Duration) -> std::io::Result<bool> {
    let deadline = Instant::now() + wait;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(true),
            Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(TryLockError::WouldBlock) => return Ok(false),
            Err(TryLockError::Error(e)) => return Err(e),
        }
    }
}

/// Who holds session `id` by the files in `dir`: its owner file, else the
/// instance its id names at epoch 0; and whether it ended there.
pub(crate) fn holder(dir: &Path, id: &str) -> Option<(Holder, bool)> {
    if !plausible_id(id) {
        return None;
    }
    match std::fs::read_to_string(dir.join("owners").join(id)) {
        Ok(text) => {
            let mut words = text.split_whitespace();
            let instance = words.next()?.to_string();
            let epoch = words.next()?.parse().ok()?;
            Some((Holder { instance, epoch }, words.next() == Some("ended")))
        }
        Err(_) => Some((Holder { instance: minted_by(id)?.to_string(), epoch: 0 }, false)),
    }
}

/// Whether session `id`, found in the journal of `instance`, was claimed
/// away from it: it is another's now, and not `instance`'s to restore or close.
pub fn moved_away(dir: &Path, instance: &str, id: &str) -> bool {
    holder(dir, id).is_some_and(|(h, _)| h.instance != instance)
}

pub struct FileStore {
    name: String,
    dir: PathBuf,
    me: String,
    /// Guards the sessions this instance claimed, with their epoch: their
    /// owner file says `ended` when they end.
    claimed: Mutex<HashMap<String, u64>>,
}

impl FileStore {
    pub fn new(dir: &Path, me: &str) -> FileStore {
        FileStore {
            name: format!("state_dir {}", dir.display()),
            dir: dir.to_path_buf(),
            me: me.to_string(),
            claimed: Mutex::new(HashMap::new()),
        }
    }

    /// Says where this instance is reached, for its peers to pass it requests.
    pub(crate) fn announce(&self, peer_url: &str) -> std::io::Result<()> {
        self.write_file(&self.dir.join(format!("{}.peer", self.me)), peer_url.as_bytes())
    }

    fn failed(&self, why: impl std::fmt::Display) -> StoreError {
        StoreError { store: self.name.clone(), why: why.to_string() }
    }

    /// Writes a small file whole: a temporary file renamed over it, synced.
    fn write_file(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        let tmp = path.with_extension("tmp");
        let _ = std::fs::remove_file(&tmp);
        let mut file =
            OpenOptions::new().write(true).create_new(true).mode(0o600).custom_flags(libc::O_NOFOLLOW).open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(parent) = path.parent() {
            File::open(parent)?.sync_all()?;
        }
        Ok(())
    }

    fn write_owner(&self, id: &str, epoch: u64, ended: bool) -> std::io::Result<()> {
        let owners = self.dir.join("owners");
        std::fs::create_dir_all(&owners)?;
        let line = format!("{} {epoch}{}\n", self.me, if ended { " ended" } else { "" });
        self.write_file(&owners.join(id), line.as_bytes())
    }

    /// Whether `instance` runs: its lock is held (by it: this instance
    /// never holds another's but for a moment).
    fn alive(&self, instance: &str) -> bool {
        if instance == self.me {
            return true;
        }
        let path = lock_path(&self.dir, instance);
        if !path.exists() {
            return false;
        }
        let Ok(file) = open_lock(&path) else { return true };
        !matches!(file.try_lock(), Ok(()))
    }

    fn peer(&self, instance: &str) -> Option<String> {
        let text = std::fs::read_to_string(self.dir.join(format!("{instance}.peer"))).ok()?;
        Some(text.trim().to_string()).filter(|t| !t.is_empty())
    }

    /// Session `id` as the journal of `instance` has it.
    fn recorded(&self, instance: &str, id: &str) -> Option<SavedSession> {
        let text = std::fs::read_to_string(state::state_path(&self.dir, instance)).ok()?;
        state::parse(&text)?.sessions.into_iter().find(|s| s.id == id)
    }

    fn found(&self, holder: Holder) -> Found {
        let alive = self.alive(&holder.instance);
        let peer = self.peer(&holder.instance);
        Found { holder, alive, peer }
    }
}

impl SessionStore for FileStore {
    fn name(&self) -> &str {
        &self.name
    }

    fn me(&self) -> &str {
        &self.me
    }

    fn first_epoch(&self) -> u64 {
        0
    }

    fn find(&self, id: &str) -> Result<Option<Found>, StoreError> {
        let Some((holder, ended)) = holder(&self.dir, id) else { return Ok(None) };
        if ended {
            return Ok(None);
        }
        let found = self.found(holder);
        // A dead holder's journal says whether the session is still there to continue.
        if !found.alive && self.recorded(&found.holder.instance, id).is_none() {
            return Ok(None);
        }
        Ok(Some(found))
    }

    fn claim(
        &self,
        id: &str,
        seen: &Holder,
        adopt: &mut dyn FnMut(&SavedSession, u64) -> bool,
    ) -> Result<Claim, StoreError> {
        let guard = open_lock(&self.dir.join("owners.lock")).map_err(|e| self.failed(e))?;
        if !lock_within(&guard, CLAIM_WAIT).map_err(|e| self.failed(e))? {
            return Err(self.failed("another claim held owners.lock for 5 s"));
        }
        let Some((now, ended)) = holder(&self.dir, id) else { return Ok(Claim::Gone) };
        if ended {
            return Ok(Claim::Gone);
        }
        if now != *seen {
            return Ok(Claim::Held(self.found(now)));
        }
        // The holder's lock, held through the claim: it cannot restart in the middle.
        let held = if seen.instance == self.me {
            None
        } else {
            let lock = open_lock(&lock_path(&self.dir, &seen.instance)).map_err(|e| self.failed(e))?;
            match lock.try_lock() {
                Ok(()) => Some(lock),
                Err(TryLockError::WouldBlock) => return Ok(Claim::Held(self.found(now))),
                Err(TryLockError::Error(e)) => return Err(self.failed(e)),
            }
        };
        let Some(session) = self.recorded(&seen.instance, id) else { return Ok(Claim::Gone) };
        let epoch = seen.epoch + 1;
        if !adopt(&session, epoch) {
            return Err(self.failed(format!("session {id} could not be recorded in this instance's journal")));
        }
        self.write_owner(id, epoch, false).map_err(|e| self.failed(e))?;
        self.claimed.lock().insert(id.to_string(), epoch);
        drop(held);
        drop(guard);
        Ok(Claim::Won { session, epoch })
    }

    fn holds(&self, id: &str, epoch: u64) -> Result<bool, StoreError> {
        Ok(holder(&self.dir, id).is_some_and(|(h, ended)| !ended && h.instance == self.me && h.epoch == epoch))
    }

    fn beat(&self, _active: &[(String, u64)]) -> Result<(), StoreError> {
        Ok(())
    }

    fn orphans(&self, _idle: Duration) -> Result<Vec<(String, Holder)>, StoreError> {
        // A dead instance's whole journal is closed by a peer (`service::peers`).
        Ok(Vec::new())
    }
}

/// The journal writes the sessions; the store marks the end of those it claimed.
impl Mirror for FileStore {
    fn change(&self, change: Change) {
        let Change::Ended(id) = change else { return };
        let Some(epoch) = self.claimed.lock().remove(&id) else { return };
        if let Err(e) = self.write_owner(&id, epoch, true) {
            log::warn!("{}: cannot mark session {id} ended in its owner file: {e}", self.name);
        }
    }

    fn commit(&self) -> Result<(), StateError> {
        Ok(())
    }
}
