//! A session's slots: one per server, holding its downstream session (or
//! how opening it failed). Opening happens once per slot, outside the lock;
//! a slot serves only the server it was opened on.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::catalog::ListKind;
use crate::downstream::{self, Downstream, Inbox, Server};
use crate::protocol::jsonrpc::{self, RpcError};

use super::{CloseReason, Session};

/// A reload retired the server while a session opened on it.
struct Retired;

pub(super) enum Slot {
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

impl Session {
    /// The open downstream session with `server`, opening it if needed. A
    /// server that failed is tried again only after `retry`.
    pub fn downstream(&self, server: &Arc<Server>, retry: Duration) -> Result<Arc<Downstream>, RpcError> {
        // A request that found its server before a reload replaced it goes
        // to the one in force: a retired server takes no new session.
        let mut server = server.in_force();
        // Reloads that keep coming while sessions open: each open is tried
        // again on the newest server, within the time one open may take.
        let deadline = Instant::now() + server.limits.connect + server.limits.request;
        loop {
            match self.downstream_on(&server, retry) {
                Ok(result) => return result,
                Err(Retired) if Instant::now() < deadline && !server.in_force().is_retired() => {
                    server = server.in_force()
                }
                Err(Retired) => {
                    return Err(RpcError::server(
                        server.name(),
                        "closed while it opened (the configuration was reloaded)",
                    ));
                }
            }
        }
    }

    /// [`Session::downstream`] on one server; `Retired` when a reload retired
    /// it while its session opened (the session opened is closed).
    fn downstream_on(
        &self,
        server: &Arc<Server>,
        retry: Duration,
    ) -> Result<Result<Arc<Downstream>, RpcError>, Retired> {
        let name = server.name();
        let wait = server.limits.connect + server.limits.request;
        let mut stale = None;
        {
            let mut st = self.state.lock();
            loop {
                if st.closed {
                    return Ok(Err(RpcError::internal("the session is closing")));
                }
                match st.slots.get(name) {
                    Some(Slot::Open(d)) if Arc::ptr_eq(&d.server, server) => return Ok(Ok(d.clone())),
                    Some(Slot::Open(_)) => {
                        // Of a server a reload retired, which this request no longer sees:
                        // closed here (taken from the slot, it is this thread's to close).
                        if let Some(Slot::Open(d)) = st.slots.insert(name.to_string(), Slot::Opening) {
                            server.journal.closing(d.closing_record());
                            stale = Some(d);
                        }
                        break;
                    }
                    Some(Slot::Opening) => {
                        if self.slot_changed.wait_for(&mut st, wait).timed_out() {
                            return Ok(Err(RpcError::server(name, "still opening its session")));
                        }
                    }
                    Some(Slot::Failed { error, at, .. }) if at.elapsed() < retry => {
                        return Ok(Err(RpcError::server(name, error)));
                    }
                    _ => {
                        st.slots.insert(name.to_string(), Slot::Opening);
                        break;
                    }
                }
            }
        }
        if let Some(d) = stale {
            downstream::close_all(&[d], 1);
        }
        let inbox: Weak<dyn Inbox> = self.me.clone();
        let result = server.open(&self.id, &self.init_params, inbox);
        let mut st = self.state.lock();
        let outcome = match result {
            Ok(d) if st.closed || server.is_retired() => {
                let closed = st.closed;
                st.slots.remove(name);
                drop(st);
                downstream::close_all(&[d], 1);
                self.slot_changed.notify_all();
                if closed {
                    return Ok(Err(RpcError::server(name, "closed while it opened (the session ended)")));
                }
                return Err(Retired);
            }
            Ok(d) => {
                st.slots.insert(name.to_string(), Slot::Open(d.clone()));
                if let Some(saved) = d.saved() {
                    server.journal.opened_downstream(&self.id, saved);
                }
                let level = st.log_level.clone().filter(|_| d.offers("logging"));
                drop(st);
                self.slot_changed.notify_all();
                // In the state file before anything uses it: a crash from
                // here on cannot orphan it.
                // A failed write is logged by the writer (initialize refuses the session).
                let _ = server.journal.commit();
                if let Some(level) = level {
                    let id = d.next_id();
                    if let Err(e) = d.request(&id, "logging/setLevel", Some(&level), &mut |_| {}) {
                        crate::limited!(warn, "server `{name}`: logging/setLevel: {}", server.redact(&e.to_string()));
                    }
                }
                return Ok(Ok(d));
            }
            Err(e) => {
                let error = server.redact(&e.to_string());
                let exhausted = matches!(e, downstream::DownstreamError::Exhausted(_));
                st.slots.insert(name.to_string(), Slot::Failed { error: error.clone(), at: Instant::now(), exhausted });
                Err(RpcError::server(name, error))
            }
        };
        drop(st);
        self.slot_changed.notify_all();
        Ok(outcome)
    }

    /// The downstream sessions whose server forgot them, to reopen; each is
    /// handed out once, and only while it is still the one in its slot (a
    /// request may have replaced it already).
    pub fn take_lost(&self) -> Vec<Arc<Downstream>> {
        let now = Instant::now();
        let mut st = self.state.lock();
        let (due, later) = std::mem::take(&mut st.lost).into_iter().partition(|lost| lost.after <= now);
        st.lost = later;
        due.iter()
            .filter_map(|lost| match st.slots.get(&lost.server) {
                Some(Slot::Open(d)) if d.session_id() == lost.session_id.as_deref() => Some(d.clone()),
                _ => None,
            })
            .collect()
    }

    /// Takes over a downstream session saved by an earlier process; its
    /// reader starts later ([`Session::start_reader`]).
    pub fn adopt(&self, server: &Arc<Server>, saved: &downstream::SavedDownstream) -> Arc<Downstream> {
        let d = server.saved_downstream(saved);
        self.state.lock().slots.insert(server.name().to_string(), Slot::Open(d.clone()));
        d
    }

    /// Starts the reader of a downstream session taken over at a restart.
    /// Without one it still serves requests; the error is logged.
    pub fn start_reader(&self, d: &Arc<Downstream>) {
        let inbox: Weak<dyn Inbox> = self.me.clone();
        let _ = d.start_reader(inbox);
    }

    /// The state file's closing records of its open downstream sessions.
    pub fn closing_records(&self) -> Vec<(usize, downstream::SavedDownstream)> {
        let st = self.state.lock();
        st.slots
            .values()
            .filter_map(|slot| match slot {
                Slot::Open(d) => d.closing_record(),
                _ => None,
            })
            .collect()
    }

    /// Marks the session closed and takes its open downstream sessions,
    /// for a session that was never put in the table.
    pub fn take_downstreams(&self) -> Vec<Arc<Downstream>> {
        self.take_for_close(CloseReason::Refused)
    }

    /// Replaces a downstream session the server no longer knows: the old one
    /// goes through the close path, a new one opens. When another request
    /// already replaced it, that one is used.
    pub fn reopen(&self, server: &Arc<Server>, old: &Arc<Downstream>) -> Result<Arc<Downstream>, RpcError> {
        {
            let mut st = self.state.lock();
            if let Some(Slot::Open(d)) = st.slots.get(server.name())
                && Arc::ptr_eq(d, old)
            {
                // Marked closing before it leaves the slot: no write of the state file misses it.
                server.journal.closing(old.closing_record());
                st.slots.remove(server.name());
            }
        }
        downstream::close_all(std::slice::from_ref(old), 1);
        // A server that forgot a session restarted: what it lists may have changed too.
        server.lists.clear();
        self.downstream(server, Duration::ZERO)
    }

    /// Takes the downstream sessions of `servers` (retired by a reload) for
    /// the caller to close; they reopen lazily with the new settings.
    pub fn take_servers(&self, servers: &[Arc<Server>]) -> Vec<Arc<Downstream>> {
        let mut st = self.state.lock();
        let mut taken = Vec::new();
        for server in servers {
            match st.slots.get(server.name()) {
                // Only the retired server's own: the slot may already hold one
                // opened on the server that replaced it.
                Some(Slot::Open(d)) if Arc::ptr_eq(&d.server, server) => {
                    if let Some(Slot::Open(d)) = st.slots.remove(server.name()) {
                        server.journal.closing(d.closing_record());
                        taken.push(d);
                    }
                }
                // A failure of the old server says nothing of the new one.
                Some(Slot::Failed { .. }) => {
                    st.slots.remove(server.name());
                }
                // An opener sees its server retired and closes what it opened.
                Some(Slot::Open(_) | Slot::Opening) | None => {}
            }
        }
        taken
    }

    /// The merged lists may have changed (a reload): tell the client.
    pub fn lists_changed(&self) {
        for kind in [ListKind::Tools, ListKind::Prompts, ListKind::Resources] {
            self.push_to_stream(jsonrpc::notification(kind.changed_notification(), None));
        }
    }

    /// The downstream session with `server` if it is open now; never opens one.
    pub fn downstream_if_open(&self, server: &str) -> Option<Arc<Downstream>> {
        match self.state.lock().slots.get(server) {
            Some(Slot::Open(d)) => Some(d.clone()),
            _ => None,
        }
    }

    /// Why opening failed where mcpgate itself was short of a resource.
    pub fn exhausted(&self) -> Option<String> {
        self.state.lock().slots.values().find_map(|slot| match slot {
            Slot::Failed { error, exhausted: true, .. } => Some(error.clone()),
            _ => None,
        })
    }

    /// The error of each server whose downstream session failed to open.
    pub fn failed_servers(&self) -> Vec<(String, String)> {
        let st = self.state.lock();
        let mut failed: Vec<(String, String)> = st
            .slots
            .iter()
            .filter_map(|(name, slot)| match slot {
                Slot::Failed { error, .. } => Some((name.clone(), error.clone())),
                _ => None,
            })
            .collect();
        failed.sort();
        failed
    }

    /// Every open downstream session.
    pub fn open_downstreams(&self) -> Vec<Arc<Downstream>> {
        let st = self.state.lock();
        st.slots
            .values()
            .filter_map(|slot| match slot {
                Slot::Open(d) => Some(d.clone()),
                _ => None,
            })
            .collect()
    }
}
