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

/// Whether a reading only grows, or goes up and down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

/// One counter or gauge as the outputs show it: where it goes on the
/// status page (`section.key` in `/status.json`), what it means, its value.
#[derive(Debug, Clone, Copy)]
pub struct Reading {
    pub section: &'static str,
    pub key: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    pub value: u64,
}

/// Declares [`Stats`] and its table ([`Stats::readings`]) in one place: a
/// counter added here appears in every output drawn from the table.
macro_rules! stats {
    ($( $(#[doc = $doc:literal])+ $field:ident: $kind:ident => $section:literal . $key:literal, )*) => {
        /// Everything mcpgate counts, shared by every part of the gateway.
        #[derive(Default, Debug)]
        pub struct Stats {
            $( $(#[doc = $doc])+ pub $field: $kind, )*
        }

        impl Stats {
            /// Every counter and gauge, in the order declared.
            pub fn readings(&self) -> Vec<Reading> {
                vec![$(Reading {
                    section: $section,
                    key: $key,
                    help: concat!($($doc),+),
                    kind: Kind::$kind,
                    value: self.$field.get(),
                },)*]
            }
        }
    };
}

stats! {
    /// Client sessions created by `initialize`.
    sessions_created: Counter => "sessions"."created",
    /// Client sessions closed after `session_idle_timeout_secs` without a request or a stream.
    sessions_evicted_idle: Counter => "sessions"."evicted_idle",
    /// Client sessions ended by the client's `DELETE`.
    sessions_deleted_by_client: Counter => "sessions"."deleted_by_client",
    /// Client sessions closed at shutdown.
    sessions_closed_at_shutdown: Counter => "sessions"."closed_at_shutdown",
    /// `initialize` refused: a limit, no server could open, or the state file could not be written.
    sessions_refused: Counter => "sessions"."refused",
    /// Client sessions restored from the state file at start.
    sessions_restored: Counter => "sessions"."restored",
    /// Client sessions in the state file that had expired at start: their downstream sessions were closed.
    sessions_expired_at_start: Counter => "sessions"."expired_at_start",

    /// Downstream sessions a server created for mcpgate (it answered `initialize`).
    downstream_opened: Counter => "downstream"."opened",
    /// Downstream sessions closed through the close path: DELETE sent (or not needed), reader joined.
    downstream_closed: Counter => "downstream"."closed",
    /// Downstream sessions open now.
    downstream_live: Gauge => "downstream"."live",
    /// Downstream sessions taken over from the state file (included in `opened`).
    downstream_resumed: Counter => "downstream"."resumed",
    /// Downstream sessions whose DELETE (or process stop) failed.
    downstream_delete_failures: Counter => "downstream"."delete_failures",
    /// Downstream sessions dropped without going through the close path: a bug if ever non-zero.
    downstream_leaked: Counter => "downstream"."leaked",

    /// Threads reading a downstream `GET` stream or a child's stdout now.
    threads_readers: Gauge => "threads"."readers",
    /// Connection threads writing a client's SSE stream now.
    threads_streams: Gauge => "threads"."streams",
    /// The reaper thread (1 while it runs).
    threads_reaper: Gauge => "threads"."reaper",
    /// Connection threads now.
    threads_connections: Gauge => "threads"."connections",
    /// Threads that did not stop within their bound and were joined later.
    threads_join_timeouts: Counter => "threads"."join_timeouts",

    /// Connections accepted.
    connections_accepted: Counter => "connections"."accepted",
    /// Connection threads handling a request now (the others wait for one).
    connections_busy: Gauge => "connections"."busy",
    /// Connections closed unanswered or with 503: no slot, no thread, no descriptor.
    connections_refused: Counter => "connections"."refused",
    /// Connections closed to give their slot to a new one (idle, or slow to send a head).
    connections_evicted: Counter => "connections"."evicted",

    /// Requests read.
    requests: Counter => "requests"."total",
    /// Requests answered with an error by the front door (bad head, framing, limits, timeouts).
    requests_refused: Counter => "requests"."refused",
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_counter_is_in_the_table_with_its_help() {
        let stats = Stats::default();
        stats.downstream_resumed.inc();
        let readings = stats.readings();
        let resumed = readings.iter().find(|r| (r.section, r.key) == ("downstream", "resumed")).unwrap();
        assert_eq!((resumed.value, resumed.kind), (1, Kind::Counter));
        assert!(readings.iter().all(|r| !r.help.trim().is_empty()));
        let mut places: Vec<(&str, &str)> = readings.iter().map(|r| (r.section, r.key)).collect();
        places.sort_unstable();
        places.dedup();
        assert_eq!(places.len(), readings.len(), "two readings in one place");
    }
}
