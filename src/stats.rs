#![forbid(unsafe_code)]
//! Counters and gauges for the status page. Relaxed atomics: each number is
//! exact on its own; a reader may see two of them a moment apart.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A number that only grows.
#[derive(Default, Debug)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn inc(&self) {
        self.0.fetch_add(1, Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// A number that goes up and down, such as live threads of one role.
#[derive(Default, Debug)]
pub struct Gauge(AtomicU64);

impl Gauge {
    pub fn inc(&self) {
        self.0.fetch_add(1, Relaxed);
    }

    pub fn dec(&self) {
        self.0.fetch_sub(1, Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }

    /// Counts one for as long as the returned guard lives (a thread's body).
    pub fn enter(&self) -> GaugeGuard<'_> {
        self.inc();
        GaugeGuard(self)
    }
}

pub struct GaugeGuard<'a>(&'a Gauge);

impl Drop for GaugeGuard<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Everything the status page counts, shared by every part of the gateway.
#[derive(Default, Debug)]
pub struct Stats {
    pub sessions_created: Counter,
    pub sessions_evicted_idle: Counter,
    pub sessions_deleted_by_client: Counter,
    pub sessions_closed_at_shutdown: Counter,
    pub sessions_refused: Counter,
    /// Client sessions restored from the state file at start.
    pub sessions_restored: Counter,
    /// Client sessions in the state file that had expired: their downstream sessions were closed.
    pub sessions_expired_at_start: Counter,

    /// Downstream sessions a server created for mcpgate (it answered `initialize`).
    pub downstream_opened: Counter,
    /// Downstream sessions closed: DELETE sent (or not needed) and reader joined.
    pub downstream_closed: Counter,
    pub downstream_live: Gauge,
    /// Downstream sessions taken over from the state file (included in `opened`).
    pub downstream_resumed: Counter,
    pub downstream_delete_failures: Counter,
    /// Downstream sessions dropped without going through the close path: a bug if ever non-zero.
    pub downstream_leaked: Counter,

    pub threads_readers: Gauge,
    pub threads_streams: Gauge,
    pub threads_reaper: Gauge,
    pub threads_connections: Gauge,
    /// Connection threads handling a request now (the others wait for one).
    pub connections_busy: Gauge,
    pub threads_join_timeouts: Counter,

    pub connections_accepted: Counter,
    /// Connections closed unanswered or with 503: no slot, no thread, no descriptor.
    pub connections_refused: Counter,
    /// Connections closed to give their slot to a new one (idle, or slow to send a head).
    pub connections_evicted: Counter,
    /// Requests answered with an error by the front door (bad head, framing, limits, timeouts).
    pub requests_refused: Counter,
    pub requests: Counter,
}
