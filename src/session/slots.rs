//! A session's slots: one per server, holding its downstream session (or
//! how opening it failed). Opening happens once per slot, outside the lock;
//! a slot serves only the server it was opened on.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::downstream::Downstream;
use crate::downstream::{DownstreamError, SavedDownstream, Server};

use super::view::SlotView;

/// The slots of one session, by server name.
#[derive(Default)]
pub(super) struct Slots(HashMap<String, Slot>);

enum Slot {
    /// A thread is opening it; others wait on `slot_changed`.
    Opening,
    Open(Arc<Downstream>),
    Failed {
        error: String,
        at: Instant,
        /// mcpgate, not the server, was short of a resource (threads, descriptors).
        exhausted: bool,
    },
}

/// What a slot holds for a request that wants its server's session.
pub(super) enum Found {
    Open(Arc<Downstream>),
    /// Another thread opens it: wait for the slot to change.
    Opening,
    /// It failed less than `retry` ago: why.
    Failed(String),
    /// The slot is this thread's to open (now marked opening), and the
    /// session a reload retired that held it, to close.
    ToOpen(Option<Arc<Downstream>>),
}

impl Slots {
    /// What the slot of `server` holds for a request: an open session on
    /// this very server, or the slot marked for the caller to open.
    pub(super) fn find(&mut self, server: &Arc<Server>, retry: Duration) -> Found {
        let name = server.name();
        match self.0.get(name) {
            Some(Slot::Open(d)) if Arc::ptr_eq(&d.server, server) => Found::Open(d.clone()),
            Some(Slot::Open(_)) => {
                // Of a server a reload retired, which this request no longer sees:
                // taken from the slot, it is this thread's to close.
                let stale = match self.0.insert(name.to_string(), Slot::Opening) {
                    Some(Slot::Open(d)) => {
                        server.journal.closing(d.closing_record());
                        Some(d)
                    }
                    _ => None,
                };
                Found::ToOpen(stale)
            }
            Some(Slot::Opening) => Found::Opening,
            Some(Slot::Failed { error, at, .. }) if at.elapsed() < retry => Found::Failed(error.clone()),
            _ => {
                self.0.insert(name.to_string(), Slot::Opening);
                Found::ToOpen(None)
            }
        }
    }

    /// Whether opening `name` failed less than `retry` ago.
    pub(super) fn failed_within(&self, name: &str, retry: Duration) -> bool {
        matches!(self.0.get(name), Some(Slot::Failed { at, .. }) if at.elapsed() < retry)
    }

    /// Opening `name` failed: remembered, with whether mcpgate was short of a resource.
    pub(super) fn failed(&mut self, name: &str, error: String, e: &DownstreamError) {
        if matches!(e, DownstreamError::SignIn(_)) {
            // Not the server's failure: the user's sign-in, which the next
            // request after it must find, without waiting `open_retry_secs`.
            self.0.remove(name);
            return;
        }
        let exhausted = matches!(e, DownstreamError::Exhausted(_));
        self.0.insert(name.to_string(), Slot::Failed { error, at: Instant::now(), exhausted });
    }

    pub(super) fn set_open(&mut self, name: &str, d: Arc<Downstream>) {
        self.0.insert(name.to_string(), Slot::Open(d));
    }

    pub(super) fn remove(&mut self, name: &str) {
        self.0.remove(name);
    }

    /// Takes `old` out of its slot if it is still the one there, marked
    /// closing first: no write of the state file misses it.
    pub(super) fn take_if_current(&mut self, server: &Server, old: &Arc<Downstream>) {
        if let Some(Slot::Open(d)) = self.0.get(server.name())
            && Arc::ptr_eq(d, old)
        {
            server.journal.closing(old.closing_record());
            self.0.remove(server.name());
        }
    }

    /// The downstream session with `server` if it is open now.
    pub(super) fn if_open(&self, server: &str) -> Option<Arc<Downstream>> {
        match self.0.get(server) {
            Some(Slot::Open(d)) => Some(d.clone()),
            _ => None,
        }
    }

    /// The one open with `server` if it is still the session `session_id` names.
    pub(super) fn still_open(&self, server: &str, session_id: Option<&str>) -> Option<Arc<Downstream>> {
        self.if_open(server).filter(|d| d.session_id() == session_id)
    }

    fn open(&self) -> impl Iterator<Item = &Arc<Downstream>> {
        self.0.values().filter_map(|slot| match slot {
            Slot::Open(d) => Some(d),
            _ => None,
        })
    }

    /// Every open downstream session.
    pub(super) fn open_downstreams(&self) -> Vec<Arc<Downstream>> {
        self.open().cloned().collect()
    }

    /// What the state file keeps of the open ones.
    pub(super) fn saved(&self) -> Vec<SavedDownstream> {
        self.open().filter_map(|d| d.saved()).collect()
    }

    /// The state file's closing records of the open ones.
    pub(super) fn closing_records(&self) -> Vec<(usize, SavedDownstream)> {
        self.open().filter_map(|d| d.closing_record()).collect()
    }

    /// Empties every slot; the open sessions, to close.
    pub(super) fn take_open(&mut self) -> Vec<Arc<Downstream>> {
        std::mem::take(&mut self.0)
            .into_values()
            .filter_map(|slot| match slot {
                Slot::Open(d) => Some(d),
                _ => None,
            })
            .collect()
    }

    /// Takes the downstream sessions of `servers` (retired by a reload), marked closing.
    pub(super) fn take_servers(&mut self, servers: &[Arc<Server>]) -> Vec<Arc<Downstream>> {
        let mut taken = Vec::new();
        for server in servers {
            match self.0.get(server.name()) {
                // Only the retired server's own: the slot may already hold one
                // opened on the server that replaced it.
                Some(Slot::Open(d)) if Arc::ptr_eq(&d.server, server) => {
                    if let Some(Slot::Open(d)) = self.0.remove(server.name()) {
                        server.journal.closing(d.closing_record());
                        taken.push(d);
                    }
                }
                // A failure of the old server says nothing of the new one.
                Some(Slot::Failed { .. }) => {
                    self.0.remove(server.name());
                }
                // An opener sees its server retired and closes what it opened.
                Some(Slot::Open(_) | Slot::Opening) | None => {}
            }
        }
        taken
    }

    /// Why opening failed where mcpgate itself was short of a resource.
    pub(super) fn exhausted(&self) -> Option<String> {
        self.0.values().find_map(|slot| match slot {
            Slot::Failed { error, exhausted: true, .. } => Some(error.clone()),
            _ => None,
        })
    }

    /// The error of each server whose downstream session failed to open, by name.
    pub(super) fn failures(&self) -> Vec<(String, String)> {
        let mut failed: Vec<(String, String)> = self
            .0
            .iter()
            .filter_map(|(name, slot)| match slot {
                Slot::Failed { error, .. } => Some((name.clone(), error.clone())),
                _ => None,
            })
            .collect();
        failed.sort();
        failed
    }

    /// What the status page shows of each slot.
    pub(super) fn views(&self) -> Vec<(String, SlotView)> {
        self.0
            .iter()
            .map(|(name, slot)| {
                let view = match slot {
                    Slot::Open(d) => SlotView::Open(d.session_id().map(str::to_string)),
                    Slot::Opening => SlotView::Opening,
                    Slot::Failed { error, .. } => SlotView::Failed(error.clone()),
                };
                (name.clone(), view)
            })
            .collect()
    }
}
