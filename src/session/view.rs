//! What the status page shows of a session, copied under its lock (no I/O
//! there, and nothing else held).

use std::time::{Duration, Instant};

use super::Session;
use super::slots::Slot;

/// A session as the status page lists it.
#[derive(Debug, Clone)]
pub struct View {
    pub id: String,
    pub client_name: String,
    pub protocol_version: String,
    /// The digest of who created it, to name its token (`Access::principal`).
    pub principal_sha256: Option<[u8; 32]>,
    pub age: Duration,
    /// `None` while it is in use: a request running, or a `GET` stream open.
    pub idle: Option<Duration>,
    pub requests_in_flight: usize,
    pub streams: usize,
    /// Its downstream session with each server it tried, by server name.
    pub downstreams: Vec<(String, SlotView)>,
}

/// A session's slot for one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotView {
    /// Open, with the server's id for it (HTTP's `Mcp-Session-Id`), if any.
    Open(Option<String>),
    Opening,
    /// Opening failed: why.
    Failed(String),
}

impl Session {
    /// What the status page shows of this session at `now`.
    pub fn view(&self, now: Instant) -> View {
        let st = self.state.lock();
        let in_use = st.in_flight > 0 || !st.streams.is_empty();
        let downstreams: Vec<(String, SlotView)> = st
            .slots
            .iter()
            .map(|(name, slot)| {
                let view = match slot {
                    Slot::Open(d) => SlotView::Open(d.session_id().map(str::to_string)),
                    Slot::Opening => SlotView::Opening,
                    Slot::Failed { error, .. } => SlotView::Failed(error.clone()),
                };
                (name.clone(), view)
            })
            .collect();
        let mut view = View {
            id: self.id.clone(),
            client_name: self.client_name.clone(),
            protocol_version: self.protocol_version.clone(),
            principal_sha256: self.principal,
            age: now.saturating_duration_since(self.created),
            idle: (!in_use).then(|| now.saturating_duration_since(st.last_active)),
            requests_in_flight: st.in_flight,
            streams: st.streams.open_count(),
            downstreams,
        };
        drop(st);
        view.downstreams.sort_by(|a, b| a.0.cmp(&b.0));
        view
    }
}
