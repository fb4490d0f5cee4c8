//! What the status page shows of a session, copied under its lock (no I/O
//! there, and nothing else held).

use std::time::Duration;

/// A session as the status page lists it.
#[derive(Debug, Clone)]
pub(crate) struct View {
    pub(crate) id: String,
    pub(crate) client_name: String,
    pub(crate) protocol_version: String,
    /// The digest of who created it, to name its token (`Access::principal`).
    pub(crate) principal_sha256: Option<[u8; 32]>,
    pub(crate) age: Duration,
    /// `None` while it is in use: a request running, or a `GET` stream open.
    pub(crate) idle: Option<Duration>,
    pub(crate) requests_in_flight: usize,
    pub(crate) streams: usize,
    /// Its downstream session with each server it tried, by server name.
    pub(crate) downstreams: Vec<(String, SlotView)>,
}

/// A session's slot for one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SlotView {
    /// Open, with the server's id for it (HTTP's `Mcp-Session-Id`), if any.
    Open(Option<String>),
    Opening,
    /// Opening failed: why.
    Failed(String),
}
