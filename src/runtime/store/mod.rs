//! The session store: where the sessions are kept so that any instance can
//! continue one whose instance died, behind one interface with two
//! backends.
//!
//! - `files`: `state_file`, or `state_dir` for the instances of one host
//!   (the default). Each instance's sessions are in its journal
//!   (`runtime::state`); an instance is alive while it holds its lock in
//!   `state_dir` (the kernel drops it when the process dies, however it
//!   dies); a session that moved to another instance has an owner file
//!   naming it and its epoch.
//! - `redis`: `store`, for instances on several hosts. A hash per session
//!   (its record, its holder and epoch, its downstream sessions), a hash of
//!   the instances and their heartbeats, a hash of the downstream sessions
//!   being closed. An instance is alive while its heartbeat moves.
//!
//! Either way a session has one holder at a time: an instance takes one
//! over ([`SessionStore::claim`]) only when its holder is not alive, by a
//! compare-and-swap on the session's epoch, so two instances racing for it
//! cannot both win. The store is touched when a session opens, is claimed
//! and closes, and by the heartbeat: never by a call.

use std::time::Duration;

use crate::runtime::state::{SavedDownstream, SavedSession};

pub mod files;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(not(feature = "redis"))]
#[path = "without_redis.rs"]
pub(crate) mod redis;

/// Who holds a session: an instance, and the epoch of its hold (one more
/// at each claim; 0 for a session never claimed, in `files`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub instance: String,
    pub epoch: u64,
}

/// What the store says of a session id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub holder: Holder,
    /// Whether its holder is alive: its requests go there.
    pub alive: bool,
    /// Where its holder is reached, when known.
    pub peer: Option<String>,
}

/// How a claim went.
#[derive(Debug)]
pub enum Claim {
    /// The session is this instance's now, at `epoch`: what was recorded of it.
    Won { session: SavedSession, epoch: u64 },
    /// Another instance holds it (it was alive, or claimed it first).
    Held(Found),
    /// It is not in the store: it ended.
    Gone,
}

/// The store could not be read or written: which one, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreError {
    pub(crate) store: String,
    pub(crate) why: String,
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the session store {} failed: {}", self.store, self.why)
    }
}

impl std::error::Error for StoreError {}

/// What every backend does. The writes of a session's life (opened, its
/// downstream sessions, closing, ended) go through the journal
/// (`runtime::state::Mirror`); this is the rest.
pub trait SessionStore: Send + Sync {
    /// How the log and errors name it: `redis 10.0.0.7:6379/0`, `state_dir /var/lib/mcpgate`.
    fn name(&self) -> &str;
    /// This instance's id.
    fn me(&self) -> &str;
    /// The epoch of a session this instance opens (`initialize`).
    fn first_epoch(&self) -> u64;
    /// Who holds session `id`, and whether it is alive; `None` when the
    /// store does not have it.
    fn find(&self, id: &str) -> Result<Option<Found>, StoreError>;
    /// Takes session `id` over from `seen` (as [`SessionStore::find`] gave
    /// it), which must not be alive. `adopt` is given the session and its
    /// new epoch once it is this instance's, and records it here before the
    /// claim is final where the backend needs that (`files`: in this
    /// instance's journal before the owner file names it); false from it
    /// gives the session up.
    fn claim(
        &self,
        id: &str,
        seen: &Holder,
        adopt: &mut dyn FnMut(&SavedSession, u64) -> bool,
    ) -> Result<Claim, StoreError>;
    /// Whether this instance still holds `id` at `epoch`: asked before
    /// serving it by an instance that may have been paused past its lease.
    fn holds(&self, id: &str, epoch: u64) -> Result<bool, StoreError>;
    /// Renews this instance's hold on its sessions and looks at the peers'
    /// (Redis); `active` is the last activity (unix seconds) of the sessions
    /// it holds, written so that a peer sees how idle they are.
    fn beat(&self, active: &[(String, u64)]) -> Result<(), StoreError>;
    /// Whether this instance may have lost its sessions without knowing it:
    /// its heartbeat stopped for long enough that a peer could take them
    /// (the process was paused). Each is then checked with
    /// [`SessionStore::holds`] before it serves again.
    fn may_have_lost(&self) -> bool {
        false
    }
    /// How many times [`SessionStore::may_have_lost`] turned true: a session
    /// checked since the last one need not be checked again.
    fn losses(&self) -> u64 {
        0
    }
    /// The sessions of instances that are not alive, idle for at least
    /// `idle`: nobody continued them, and they are to be closed.
    fn orphans(&self, idle: Duration) -> Result<Vec<(String, Holder)>, StoreError>;
    /// Downstream sessions whose `DELETE` a dead instance had under way
    /// (by their field in the store), for a live one to finish.
    fn dead_closing(&self) -> Result<Vec<(String, SavedDownstream)>, StoreError> {
        Ok(Vec::new())
    }
    /// Takes one of [`SessionStore::dead_closing`]: true for the one
    /// instance that gets it, which then closes it.
    fn take_closing(&self, _field: &str) -> Result<bool, StoreError> {
        Ok(false)
    }
    /// This instance stops: its peers may continue its sessions at once.
    fn leave(&self) {}
    /// After the store did not answer: writes again each session this
    /// instance holds (with its epoch) that the store no longer has (a
    /// restart that lost its data), so that its peers find it again. How
    /// many were written.
    fn reassert(&self, _held: &[(SavedSession, u64)]) -> Result<usize, StoreError> {
        Ok(0)
    }
}

/// `id` is one mcpgate could have minted: `<instance>.<32 hex digits>` or
/// 32 hex digits. Anything else is never looked up (nor made a file name).
pub(crate) fn plausible_id(id: &str) -> bool {
    let hex = match id.split_once('.') {
        Some((instance, hex)) => {
            let name = (1..=32).contains(&instance.len());
            if !name || !instance.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
                return false;
            }
            hex
        }
        None => id,
    };
    hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The instance that minted session `id`.
pub(crate) fn minted_by(id: &str) -> Option<&str> {
    id.split_once('.').map(|(instance, _)| instance)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ids_mcpgate_mints_are_looked_up() {
        assert!(plausible_id("gw-a.0123456789abcdef0123456789abcdef"));
        assert!(plausible_id("0123456789abcdef0123456789abcdef"));
        for bad in ["gw-a.xyz", "../etc.0123456789abcdef0123456789abcdef", "a/b.0123456789abcdef0123456789abcdef", ""] {
            assert!(!plausible_id(bad), "{bad}");
        }
        assert_eq!(minted_by("gw-a.0123"), Some("gw-a"));
    }
}
