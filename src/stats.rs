//! The one table of counters and gauges, from which `/status.json`, the
//! status page and `/metrics` are all drawn.
//!
//! Each entry is declared once, in a `stats!` block: its doc line is its
//! help text, its type gives its kind, and it names its place in
//! `/status.json` (`section.key`) and its Prometheus name (with a label of
//! its own when it is one of a family, e.g. `reason="idle"`). The blocks
//! differ only in where their values live:
//! - [`Stats`]: the gateway's atomics, counted where things happen;
//! - [`ServerStats`]: each server's atomics (requests, errors by kind,
//!   latency), read with the label `server`;
//! - [`Now`], [`ServerNow`], [`StdioNow`]: values read when an output is
//!   drawn (from `/proc`, the memory budget, the sessions, the servers).
//!
//! Relaxed atomics: each number is exact on its own; a reader may see two
//! of them a moment apart.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// A number that only grows.
#[derive(Default, Debug)]
pub struct Counter(AtomicU64);

impl Counter {
    pub(crate) fn inc(&self) {
        self.0.fetch_add(1, Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// A counter kept elsewhere, as read now.
impl From<u64> for Counter {
    fn from(n: u64) -> Counter {
        Counter(AtomicU64::new(n))
    }
}

/// A number that goes up and down, such as live threads of one role.
#[derive(Default, Debug)]
pub struct Gauge(AtomicU64);

impl Gauge {
    pub(crate) fn inc(&self) {
        self.0.fetch_add(1, Relaxed);
    }

    pub(crate) fn dec(&self) {
        self.0.fetch_sub(1, Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }

    /// Counts one for as long as the returned guard lives (a thread's body).
    pub(crate) fn enter(&self) -> GaugeGuard<'_> {
        self.inc();
        GaugeGuard(self)
    }
}

/// A level read elsewhere, as it is now.
impl From<u64> for Gauge {
    fn from(n: u64) -> Gauge {
        Gauge(AtomicU64::new(n))
    }
}

pub(crate) struct GaugeGuard<'a>(&'a Gauge);

impl Drop for GaugeGuard<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Upper bounds of the latency buckets, in microseconds: 5 ms to 60 s
/// (above, the `+Inf` bucket). Requests to MCP servers take from a
/// millisecond (a list) to a minute (a tool that runs long).
pub(crate) const BUCKETS_MICROS: [u64; 13] = [
    5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000, 30_000_000,
    60_000_000,
];

/// The bounds the MCP conventions advise for `mcp.*.operation.duration`,
/// in microseconds: 10 ms to 300 s.
pub(crate) const OPERATION_BUCKETS_MICROS: [u64; 14] = [
    10_000,
    20_000,
    50_000,
    100_000,
    200_000,
    500_000,
    1_000_000,
    2_000_000,
    5_000_000,
    10_000_000,
    30_000_000,
    60_000_000,
    120_000_000,
    300_000_000,
];

/// Room for the longest list of bounds, and `+Inf`.
const MAX_BUCKETS: usize = 15;

/// Durations in fixed buckets: an observation is two relaxed additions,
/// without a lock or an allocation.
#[derive(Debug)]
pub(crate) struct Histogram {
    /// Observations per bucket (not cumulative); the one after the last bound is `+Inf`.
    counts: [AtomicU64; MAX_BUCKETS],
    sum_micros: AtomicU64,
    /// Upper bounds in microseconds.
    bounds: &'static [u64],
}

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram::with_bounds(&BUCKETS_MICROS)
    }
}

impl Histogram {
    /// With these upper bounds (in microseconds, at most 14).
    pub(crate) const fn with_bounds(bounds: &'static [u64]) -> Histogram {
        assert!(bounds.len() < MAX_BUCKETS);
        Histogram { counts: [const { AtomicU64::new(0) }; MAX_BUCKETS], sum_micros: AtomicU64::new(0), bounds }
    }

    pub(crate) fn observe(&self, took: Duration) {
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let bucket = self.bounds.iter().position(|&bound| micros <= bound).unwrap_or(self.bounds.len());
        self.counts[bucket].fetch_add(1, Relaxed);
        self.sum_micros.fetch_add(micros, Relaxed);
    }

    /// Observations so far.
    pub(crate) fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Relaxed)).sum()
    }

    /// Cumulative counts by upper bound in seconds (the last, `+Inf`, is
    /// the count of all), and the sum in seconds.
    fn sample(&self) -> Sample {
        let mut total = 0;
        let mut buckets = Vec::with_capacity(self.bounds.len() + 1);
        for (i, count) in self.counts[..=self.bounds.len()].iter().enumerate() {
            total += count.load(Relaxed);
            let bound = self.bounds.get(i).map_or(f64::INFINITY, |&micros| micros as f64 / 1e6);
            buckets.push((bound, total));
        }
        Sample::Histogram { buckets, sum: self.sum_micros.load(Relaxed) as f64 / 1e6 }
    }
}

/// The methods of MCP (both eras) that durations are kept for by name;
/// any other counts as `_OTHER`, so that a client sending made-up methods
/// cannot grow `/metrics`.
pub(crate) const METHODS: [&str; 23] = [
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "completion/complete",
    "logging/setLevel",
    "tasks/get",
    "tasks/result",
    "tasks/cancel",
    "tasks/list",
    "tasks/update",
    "server/discover",
    "subscriptions/listen",
    "sampling/createMessage",
    "elicitation/create",
    "roots/list",
];

/// Durations of MCP operations by method (`mcp.server.operation.duration`
/// and `mcp.client.operation.duration`), in the buckets the conventions
/// advise; read as one histogram per method seen, labelled with it.
#[derive(Debug)]
pub struct MethodDurations([Histogram; METHODS.len() + 1]);

impl Default for MethodDurations {
    fn default() -> MethodDurations {
        MethodDurations([const { Histogram::with_bounds(&OPERATION_BUCKETS_MICROS) }; METHODS.len() + 1])
    }
}

impl MethodDurations {
    pub(crate) fn observe(&self, method: &str, took: Duration) {
        let at = METHODS.iter().position(|m| *m == method).unwrap_or(METHODS.len());
        self.0[at].observe(took);
    }
}

/// Gauges whose label values are known only when read, e.g. threads by
/// role; the label's name is declared with the entry (`{ role }`).
#[derive(Default, Debug)]
pub(crate) struct Family(Vec<(String, u64)>);

impl Family {
    pub(crate) fn new(values: Vec<(String, u64)>) -> Family {
        Family(values)
    }
}

/// Counters whose label values are known only when read, e.g. calls by
/// tool (see [`Tally`]); the label's name is declared with the entry.
#[derive(Default, Debug)]
pub(crate) struct CounterFamily(Vec<(String, u64)>);

/// Calls and failed calls by name (a server's tools), for a labelled
/// counter: at most [`Tally::NAMES`] names, the rest counted as `(other)`,
/// so that a client calling made-up names cannot grow `/metrics`.
#[derive(Default, Debug)]
pub(crate) struct Tally {
    /// Guards the counts by name; held only to add or to copy.
    counts: parking_lot::Mutex<Vec<(String, u64, u64)>>,
}

impl Tally {
    pub(crate) const NAMES: usize = 100;
    pub(crate) const OTHER: &'static str = "(other)";

    /// One call of `name`; `failed` when it ended in an error.
    pub(crate) fn note(&self, name: &str, failed: bool) {
        let mut counts = self.counts.lock();
        let at = match counts.iter().position(|(n, _, _)| n == name) {
            Some(at) => at,
            None if counts.len() < Self::NAMES => {
                counts.push((name.to_string(), 0, 0));
                counts.len() - 1
            }
            None => match counts.iter().position(|(n, _, _)| n == Self::OTHER) {
                Some(at) => at,
                None => {
                    counts.push((Self::OTHER.to_string(), 0, 0));
                    counts.len() - 1
                }
            },
        };
        counts[at].1 += 1;
        counts[at].2 += u64::from(failed);
    }

    /// Calls by name, and failed calls by name.
    pub(crate) fn read(&self) -> (CounterFamily, CounterFamily) {
        let counts = self.counts.lock();
        let calls = counts.iter().map(|(n, c, _)| (n.clone(), *c)).collect();
        let failed = counts.iter().map(|(n, _, f)| (n.clone(), *f)).collect();
        (CounterFamily(calls), CounterFamily(failed))
    }
}

/// A fact carried by a label, with the value 1 (`mcpgate_build_info{version=...}`);
/// `/status.json` shows the fact itself.
#[derive(Default, Debug)]
pub(crate) struct Info(String);

impl Info {
    pub(crate) fn new(text: impl Into<String>) -> Info {
        Info(text.into())
    }
}

/// Whether a reading only grows, goes up and down, or counts durations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    /// As Prometheus' `# TYPE` line says it.
    pub fn prometheus(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One entry of the table, as declared.
#[derive(Debug)]
pub struct Entry {
    /// Its place in `/status.json`: `section.key` (a key with a dot nests
    /// further; an empty section is the top level).
    pub(crate) section: &'static str,
    pub(crate) key: &'static str,
    /// Its Prometheus name: `mcpgate_` first, `_total` last for counters,
    /// base units (seconds, bytes).
    pub name: &'static str,
    /// Its doc lines where it is declared, as written: see [`Entry::help`].
    pub(crate) doc: &'static str,
    pub kind: Kind,
    /// The label of the thing its struct is read for, e.g. `server`.
    pub(crate) scope: Option<&'static str>,
    /// The label that tells it from the other entries of its family, e.g.
    /// `("reason", "idle")`.
    pub(crate) variant: Option<(&'static str, &'static str)>,
    /// The label whose values are known only when read (a [`Family`]'s,
    /// an [`Info`]'s), e.g. `role`.
    pub(crate) label: Option<&'static str>,
    /// A fact in its label ([`Info`]): 1 for Prometheus, the text in `/status.json`.
    pub(crate) info: bool,
}

impl Entry {
    /// What it means: its doc lines, without the space each starts with.
    pub(crate) fn help(&self) -> &'static str {
        self.doc.trim()
    }
}

/// A value as read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Sample {
    Number(u64),
    /// Cumulative counts by upper bound in seconds, the last `+Inf`; the sum in seconds.
    Histogram {
        buckets: Vec<(f64, u64)>,
        sum: f64,
    },
    /// A fact: 1 for Prometheus, which has it in a label; the text for `/status.json`.
    Info(String),
}

/// One value of the table now: its entry, all its labels, its place in
/// `/status.json`, and the value.
#[derive(Debug, Clone)]
pub(crate) struct Reading {
    pub(crate) entry: &'static Entry,
    /// The scope's (`server`), then the variant's, then a family's.
    pub(crate) labels: Vec<(&'static str, String)>,
    /// Section, scope, key (split at dots), a family's label value.
    pub(crate) path: Vec<String>,
    pub(crate) sample: Sample,
}

impl Reading {
    fn new(entry: &'static Entry, scope: Option<&str>, sample: Sample) -> Reading {
        let mut labels = Vec::new();
        let mut path: Vec<String> = Vec::new();
        if !entry.section.is_empty() {
            path.push(entry.section.to_string());
        }
        if let (Some(label), Some(value)) = (entry.scope, scope) {
            labels.push((label, value.to_string()));
            path.push(value.to_string());
        }
        if let Some((label, value)) = entry.variant {
            labels.push((label, value.to_string()));
        }
        path.extend(entry.key.split('.').map(str::to_string));
        Reading { entry, labels, path, sample }
    }

    /// The number, for a counter or a gauge.
    pub(crate) fn number(&self) -> Option<u64> {
        match self.sample {
            Sample::Number(n) => Some(n),
            _ => None,
        }
    }
}

/// What can stand in the table: its kind, and how it is read.
pub(crate) trait Metric {
    const KIND: Kind;
    /// Whether its values carry a label of their own, declared with the entry.
    const LABELLED: bool = false;
    /// Whether it is a fact in its label ([`Info`]): text in `/status.json`.
    const INFO: bool = false;
    /// Adds its readings (one, or one per value of a family) to `out`.
    fn read(&self, entry: &'static Entry, scope: Option<&str>, out: &mut Vec<Reading>);
}

impl Metric for Counter {
    const KIND: Kind = Kind::Counter;
    fn read(&self, entry: &'static Entry, scope: Option<&str>, out: &mut Vec<Reading>) {
        out.push(Reading::new(entry, scope, Sample::Number(self.get())));
    }
}

impl Metric for Gauge {
    const KIND: Kind = Kind::Gauge;
    fn read(&self, entry: &'static Entry, scope: Option<&str>, out: &mut Vec<Reading>) {
        out.push(Reading::new(entry, scope, Sample::Number(self.get())));
    }
}

impl Metric for Histogram {
    const KIND: Kind = Kind::Histogram;
    fn read(&self, entry: &'static Entry, scope: Option<&str>, out: &mut Vec<Reading>) {
        out.push(Reading::new(entry, scope, self.sample()));
    }
}

impl Metric for MethodDurations {
    const KIND: Kind = Kind::Histogram;
    const LABELLED: bool = true;
    fn read(&self, entry: &'static Entry, scope: Option<&str>, out: &mut Vec<Reading>) {
        for (i, histogram) in self.0.iter().enumerate().filter(|(_, h)| h.count() > 0) {
            let method = METHODS.get(i).copied().unwrap_or("_OTHER");
            let mut reading = Reading::new(entry, scope, histogram.sample());
            reading.labels.push((entry.label.unwrap_or("value"), method.to_string()));
            reading.path.push(method.to_string());
            out.push(reading);
        }
    }
}

impl Metric for Family {
    const KIND: Kind = Kind::Gauge;
    const LABELLED: bool = true;
    fn read(&self, entry: &'static Entry, scope: Option<&str>, out: &mut Vec<Reading>) {
        for (value, n) in &self.0 {
            let mut reading = Reading::new(entry, scope, Sample::Number(*n));
            reading.labels.push((entry.label.unwrap_or("value"), value.clone()));
            reading.path.push(value.clone());
            out.push(reading);
        }
    }
}

impl Metric for CounterFamily {
    const KIND: Kind = Kind::Counter;
    const LABELLED: bool = true;
    fn read(&self, entry: &'static Entry, scope: Option<&str>, out: &mut Vec<Reading>) {
        Family::read(&Family(self.0.clone()), entry, scope, out);
    }
}

impl Metric for Info {
    const KIND: Kind = Kind::Gauge;
    const LABELLED: bool = true;
    const INFO: bool = true;
    fn read(&self, entry: &'static Entry, scope: Option<&str>, out: &mut Vec<Reading>) {
        let mut reading = Reading::new(entry, scope, Sample::Info(self.0.clone()));
        reading.labels.push((entry.label.unwrap_or("value"), self.0.clone()));
        out.push(reading);
    }
}

/// Declares a struct of metrics and its part of the table: `TABLE`, the
/// entries as declared, and `read`, their readings now. An entry added
/// here appears in every output drawn from the table.
///
/// `pub struct Name by server { ... }`: read for each server, labelled
/// `server`. After an entry, `{ kind = "connect" }` is the label that tells
/// it from the others of its family; `{ role }` names the label of a
/// [`Family`]'s (or an [`Info`]'s) values.
macro_rules! stats {
    (@variant) => { None };
    (@variant $label:ident) => { None };
    (@variant $label:ident $value:literal) => { Some((stringify!($label), $value)) };
    (@label) => { None::<&'static str> };
    (@label $label:ident) => { Some(stringify!($label)) };
    (@label $label:ident $value:literal) => { None::<&'static str> };
    (
        $(#[doc = $sdoc:literal])+
        $vis:vis struct $name:ident $(by $scope:ident)? {
            $(
                $(#[doc = $doc:literal])+
                $field:ident: $ty:ident => $section:literal . $key:literal as $metric:literal
                    $({ $label:ident $(= $value:literal)? })?,
            )*
        }
    ) => {
        $(#[doc = $sdoc])+
        #[derive(Default, Debug)]
        $vis struct $name {
            $( $(#[doc = $doc])+ $vis $field: $ty, )*
        }

        impl $name {
            /// The label of what it is read for, if any.
            pub(crate) const SCOPE: Option<&'static str> = stats!(@label $($scope)?);

            /// Its entries, in the order declared.
            pub(crate) const TABLE: &'static [Entry] = &[$(Entry {
                section: $section,
                key: $key,
                name: $metric,
                doc: concat!($($doc),+),
                kind: <$ty as Metric>::KIND,
                scope: Self::SCOPE,
                variant: stats!(@variant $($label $($value)?)?),
                label: stats!(@label $($label $($value)?)?),
                info: <$ty as Metric>::INFO,
            },)*];

            /// Adds its readings to `out`, in the order declared; `scope`
            /// (the server's name, for a struct read `by server`) labels
            /// every one and places it under its value in `/status.json`.
            pub(crate) fn read(&self, scope: Option<&str>, out: &mut Vec<Reading>) {
                let mut entries = Self::TABLE.iter();
                $( if let Some(entry) = entries.next() { self.$field.read(entry, scope, out); } )*
            }
        }

        // A family's values need the name of their label, declared with the entry.
        $(const _: () = assert!(
            <$ty as Metric>::LABELLED == stats!(@label $($label $($value)?)?).is_some(),
            concat!(stringify!($name), ".", stringify!($field), ": a Family or an Info declares its label, e.g. {{ role }}"),
        );)*
    };
}

stats! {
    /// Everything the gateway counts where it happens, shared by every part of it.
    pub struct Stats {
        /// Client sessions created by `initialize`.
        sessions_created: Counter => "sessions"."created" as "mcpgate_sessions_created_total",
        /// Client sessions closed after `session_idle_timeout_secs` without a request or a stream.
        sessions_evicted_idle: Counter => "sessions"."evicted_idle" as "mcpgate_sessions_closed_total" { reason = "idle" },
        /// Client sessions ended by the client's `DELETE`.
        sessions_deleted_by_client: Counter => "sessions"."deleted_by_client" as "mcpgate_sessions_closed_total" { reason = "client_delete" },
        /// Client sessions closed at shutdown.
        sessions_closed_at_shutdown: Counter => "sessions"."closed_at_shutdown" as "mcpgate_sessions_closed_total" { reason = "shutdown" },
        /// Client sessions in the state file that had expired at start: their downstream sessions were closed.
        sessions_expired_at_start: Counter => "sessions"."expired_at_start" as "mcpgate_sessions_closed_total" { reason = "expired_at_start" },
        /// `initialize` refused: a limit, no server could open, or the state file could not be written.
        sessions_refused: Counter => "sessions"."refused" as "mcpgate_sessions_refused_total",
        /// Calls refused for a `rate_limit` (429, or a JSON-RPC error in a batch).
        calls_rate_limited: Counter => "calls"."rate_limited" as "mcpgate_calls_rate_limited_total",
        /// Client sessions restored from the state file at start.
        sessions_restored: Counter => "sessions"."restored" as "mcpgate_sessions_restored_total",
        /// Client sessions continued here after the instance that held them died (claimed from the session store).
        sessions_continued: Counter => "sessions"."continued" as "mcpgate_sessions_continued_total",
        /// Claims of a session another instance won first.
        claims_lost: Counter => "sessions"."claims_lost" as "mcpgate_claims_lost_total",
        /// Client sessions let go here because another instance took them over while this one was paused.
        sessions_handed_over: Counter => "sessions"."handed_over" as "mcpgate_sessions_handed_over_total",
        /// Requests passed to the instance that holds their session.
        requests_forwarded: Counter => "sessions"."forwarded" as "mcpgate_requests_forwarded_total",
        /// Calls in flight on a dead instance, resumed here by their client and run again (their tool is read-only or idempotent).
        calls_run_again: Counter => "calls"."run_again" as "mcpgate_calls_run_again_total",
        /// Calls in flight on a dead instance, resumed here by their client and answered with an error (not run again).
        calls_lost_in_flight: Counter => "calls"."lost_in_flight" as "mcpgate_calls_lost_in_flight_total",
        /// Reads and writes of the session store that failed.
        store_errors: Counter => "store"."errors" as "mcpgate_store_errors_total",

        /// Downstream sessions a server created for mcpgate (it answered `initialize`).
        downstream_opened: Counter => "downstream"."opened" as "mcpgate_downstream_opened_total",
        /// Downstream sessions closed through the close path: DELETE sent (or not needed), reader joined.
        downstream_closed: Counter => "downstream"."closed" as "mcpgate_downstream_closed_total",
        /// Downstream sessions open now.
        downstream_live: Gauge => "downstream"."live" as "mcpgate_downstream_live",
        /// Downstream sessions taken over from the state file (included in `opened`).
        downstream_resumed: Counter => "downstream"."resumed" as "mcpgate_downstream_resumed_total",
        /// Downstream sessions let go to the instance that took their client session over (not closed: it uses them).
        downstream_handed_over: Counter => "downstream"."handed_over" as "mcpgate_downstream_handed_over_total",
        /// Downstream sessions whose DELETE (or process stop) failed at their close.
        downstream_delete_failures: Counter => "downstream"."delete_failures" as "mcpgate_downstream_delete_failures_total",
        /// DELETEs sent again: lost to a fault that may pass (no connection, no answer in time, 5xx, 429), or held until the state file could record their closing.
        downstream_delete_retries: Counter => "downstream"."delete_retries" as "mcpgate_downstream_delete_retries_total",
        /// DELETEs owed now, tried again with backoff until the server answers (their sessions stay in the state file meanwhile).
        downstream_deletes_owed: Gauge => "downstream"."deletes_owed" as "mcpgate_downstream_deletes_owed",
        /// Owed DELETEs given up after 12 tries (about 6 minutes), or past 4,096 owed: the server keeps the session until it expires it.
        downstream_deletes_abandoned: Counter => "downstream"."deletes_abandoned" as "mcpgate_downstream_deletes_abandoned_total",
        /// Downstream sessions dropped without going through the close path: a bug if ever non-zero.
        downstream_leaked: Counter => "downstream"."leaked" as "mcpgate_downstream_leaked_total",

        /// Threads reading a downstream `GET` stream or a child's stdout now.
        threads_readers: Gauge => "threads"."readers" as "mcpgate_threads_readers",
        /// Connection threads writing a client's SSE stream now.
        threads_streams: Gauge => "threads"."streams" as "mcpgate_threads_streams",
        /// The reaper thread (1 while it runs).
        threads_reaper: Gauge => "threads"."reaper" as "mcpgate_threads_reaper",
        /// Connection threads now.
        threads_connections: Gauge => "threads"."connections" as "mcpgate_threads_connections",
        /// Threads that did not stop within their bound and were joined later.
        threads_join_timeouts: Counter => "threads"."join_timeouts" as "mcpgate_threads_join_timeouts_total",

        /// Connections accepted.
        connections_accepted: Counter => "connections"."accepted" as "mcpgate_connections_accepted_total",
        /// Connection threads handling a request now (the others wait for one).
        connections_busy: Gauge => "connections"."busy" as "mcpgate_connections_busy",
        /// Connections closed unanswered or with 503: no slot, no thread, no descriptor.
        connections_refused: Counter => "connections"."refused" as "mcpgate_connections_refused_total",
        /// Connections closed to give their slot to a new one (idle, or slow to send a head).
        connections_evicted: Counter => "connections"."evicted" as "mcpgate_connections_evicted_total",

        /// `find_tools` calls answered (the `tool_search` mode).
        tool_searches: Counter => "tool_search"."queries" as "mcpgate_tool_search_queries_total",
        /// `call_tool` calls unwrapped into the call of the tool they name.
        tool_search_calls: Counter => "tool_search"."calls" as "mcpgate_tool_search_calls_total",
        /// Searches whose first result was the next tool their session called.
        tool_search_hits: Counter => "tool_search"."first_result_called" as "mcpgate_tool_search_first_result_called_total",
        /// Search indexes built: one per merged tool list searched (rebuilt after `list_changed` or a reload).
        tool_search_indexes_built: Counter => "tool_search"."indexes_built" as "mcpgate_tool_search_indexes_built_total",

        /// HTTP requests read from clients.
        requests: Counter => "requests"."total" as "mcpgate_http_requests_total",
        /// HTTP requests answered with an error by the front door (bad head, framing, limits, timeouts).
        requests_refused: Counter => "requests"."refused" as "mcpgate_http_requests_refused_total",

        /// TLS handshakes completed on the front door (`tls`).
        tls_handshakes: Counter => "tls"."handshakes" as "mcpgate_tls_handshakes_total",
        /// TLS handshakes that failed or timed out, plain HTTP on the HTTPS port included.
        tls_handshake_failures: Counter => "tls"."handshake_failures" as "mcpgate_tls_handshake_failures_total",

        /// Requests to `/mcp` or the status pages refused for their token: 401, 403, or 503 when the issuer cannot be asked.
        auth_refused: Counter => "auth"."refused" as "mcpgate_auth_refused_total",
        /// OAuth access tokens checked (a signature or an introspection; a token seen before is not checked again).
        auth_oauth_checked: Counter => "auth"."oauth_checked" as "mcpgate_auth_oauth_checked_total",
        /// Fetches of the issuer's JWKS (at start of use, hourly, and for unknown keys at most every 10 s).
        auth_jwks_fetches: Counter => "auth"."jwks_fetches" as "mcpgate_auth_jwks_fetches_total",
        /// Fetches of the issuer's JWKS that failed.
        auth_jwks_failures: Counter => "auth"."jwks_failures" as "mcpgate_auth_jwks_failures_total",
        /// Opaque tokens sent to the issuer's introspection endpoint.
        auth_introspections: Counter => "auth"."introspections" as "mcpgate_auth_introspections_total",

        /// Seconds from reading an MCP request (or notification) of a client to its answer, by method (`mcp.server.operation.duration`).
        operation_duration: MethodDurations => "mcp"."server_operation_duration_seconds" as "mcp_server_operation_duration_seconds" { mcp_method_name },
    }
}

stats! {
    /// What each server counts: the requests mcpgate sends it, how they
    /// failed, how long they took. Read with the label `server`.
    pub(crate) struct ServerStats by server {
        /// Requests mcpgate sent to a server or tried to (`initialize`, and each request forwarded), whatever came of them.
        requests: Counter => "servers"."requests" as "mcpgate_server_requests_total",
        /// Sessions that did not open the server, without waiting: it did not answer an earlier one, and no probe found it answering since.
        opens_skipped: Counter => "servers"."opens_skipped" as "mcpgate_server_opens_skipped_total",
        /// The server could not be reached.
        errors_connect: Counter => "servers"."errors.connect" as "mcpgate_server_errors_total" { kind = "connect" },
        /// The server sent no message within `request_timeout_secs`.
        errors_timeout: Counter => "servers"."errors.timeout" as "mcpgate_server_errors_total" { kind = "timeout" },
        /// Every lane to the server stayed taken while the request waited (`calls_per_server`).
        errors_busy: Counter => "servers"."errors.busy" as "mcpgate_server_errors_total" { kind = "busy" },
        /// The server answered an HTTP status MCP does not define for the exchange.
        errors_status: Counter => "servers"."errors.status" as "mcpgate_server_errors_total" { kind = "status" },
        /// The server no longer knew the session (HTTP 404): it is opened anew.
        errors_session_gone: Counter => "servers"."errors.session_gone" as "mcpgate_server_errors_total" { kind = "session_gone" },
        /// The answer broke the protocol: bad JSON, a wrong content type, a stream without a response.
        errors_protocol: Counter => "servers"."errors.protocol" as "mcpgate_server_errors_total" { kind = "protocol" },
        /// The server refused `initialize`, or offered no protocol version mcpgate speaks.
        errors_refused: Counter => "servers"."errors.refused" as "mcpgate_server_errors_total" { kind = "refused" },
        /// mcpgate was closing the downstream session.
        errors_closed: Counter => "servers"."errors.closed" as "mcpgate_server_errors_total" { kind = "closed" },
        /// mcpgate was out of threads, descriptors, memory or processes.
        errors_exhausted: Counter => "servers"."errors.exhausted" as "mcpgate_server_errors_total" { kind = "exhausted" },
        /// The client cancelled the request.
        errors_cancelled: Counter => "servers"."errors.cancelled" as "mcpgate_server_errors_total" { kind = "cancelled" },
        /// A stdio server's process ended while the request ran.
        errors_exited: Counter => "servers"."errors.exited" as "mcpgate_server_errors_total" { kind = "exited" },
        /// The server wanted a token: the user had to sign in (OAuth), or mcpgate could not get one, or it has none to send.
        errors_authorization: Counter => "servers"."errors.authorization" as "mcpgate_server_errors_total" { kind = "authorization" },
        /// Seconds from sending a forwarded request on a lane to its response or failure (the wait for a lane not included).
        request_duration: Histogram => "servers"."request_duration_seconds" as "mcpgate_server_request_duration_seconds",
        /// Seconds from sending a request to the server (`initialize` included) to its answer or failure, by method (`mcp.client.operation.duration`).
        operation_duration: MethodDurations => "servers"."operation_duration_seconds" as "mcp_client_operation_duration_seconds" { mcp_method_name },
    }
}

stats! {
    /// What the process and the gateway hold now, read when an output is drawn.
    pub(crate) struct Now {
        /// The version of mcpgate that runs.
        build_info: Info => ""."version" as "mcpgate_build_info" { version },
        /// Seconds since mcpgate started.
        uptime: Gauge => ""."uptime_secs" as "mcpgate_uptime_seconds",
        /// Threads of the process, from `/proc/self/task`.
        threads: Gauge => "process"."threads" as "mcpgate_process_threads",
        /// Threads of the process by role, from their names in `/proc/self/task/*/comm` (`other`: the main thread).
        threads_by_role: Family => "process"."threads_by_role" as "mcpgate_threads" { role },
        /// Resident memory of the process in bytes, from `/proc/self/status`.
        rss_bytes: Gauge => "process"."rss_bytes" as "mcpgate_process_resident_memory_bytes",
        /// Open file descriptors of the process, from `/proc/self/fd`.
        open_fds: Gauge => "process"."open_fds" as "mcpgate_process_open_fds",
        /// The most threads of each group of roles this configuration can run (`TasksMax` must allow their sum).
        thread_budget: Family => "threads"."budget_by_group" as "mcpgate_threads_budget" { group },
        /// Message bytes mcpgate holds now, counted against `max_memory_mb`.
        memory_buffered: Gauge => "memory"."buffered_bytes" as "mcpgate_memory_buffered_bytes",
        /// `max_memory_mb` in bytes.
        memory_limit: Gauge => "memory"."limit_bytes" as "mcpgate_memory_limit_bytes",
        /// Bytes one session may hold now: half the limit divided by the live sessions, at least 1 MiB.
        memory_share: Gauge => "memory"."session_share_bytes" as "mcpgate_memory_session_share_bytes",
        /// Bytes the calls of 2026-07-28 clients to session-era servers hold now on their own threads (each thread, its request, notifications waiting for a held call's retry); part of `buffered_bytes`.
        memory_sessionless_calls: Gauge => "memory"."sessionless_calls_bytes" as "mcpgate_memory_sessionless_calls_bytes",
        /// Bytes of the lists held for every session that lists them: each server's (until a reaper's round after its last session closed) and the merged ones; part of `buffered_bytes`.
        memory_list_cache: Gauge => "memory"."list_cache_bytes" as "mcpgate_memory_list_cache_bytes",
        /// Bytes of the buffers kept for servers' next large answers (freed when none was taken for 2 s); part of `buffered_bytes`.
        memory_answer_buffers: Gauge => "memory"."answer_buffers_bytes" as "mcpgate_memory_answer_buffers_bytes",
        /// Charges against `max_memory_mb` refused: a client too slow for its stream, an event too large.
        memory_refused: Counter => "memory"."refused" as "mcpgate_memory_refused_total",
        /// Seconds since the last charge was refused (the uptime before any).
        memory_since_refused: Gauge => "memory"."secs_since_refused" as "mcpgate_memory_seconds_since_refused",
        /// Tools in the search index built last (the `tool_search` mode).
        tool_search_index_tools: Gauge => "tool_search"."index_tools" as "mcpgate_tool_search_index_tools",
        /// Heap bytes of the search index built last.
        tool_search_index_bytes: Gauge => "tool_search"."index_bytes" as "mcpgate_tool_search_index_bytes",
        /// Client sessions live now.
        sessions_live: Gauge => "sessions"."live" as "mcpgate_sessions_live",
        /// Buckets of `rate_limit` held now (per user, and per user and tool).
        rate_buckets: Gauge => "calls"."rate_buckets" as "mcpgate_rate_limit_buckets",
        /// Audit records written.
        audit_written: Counter => "audit"."written" as "mcpgate_audit_records_written_total",
        /// Audit records dropped: the writer was behind, the memory budget or the disk refused them.
        audit_dropped: Counter => "audit"."dropped" as "mcpgate_audit_records_dropped_total",
        /// Times the audit file reached `audit.max_bytes` and was rotated.
        audit_rotations: Counter => "audit"."rotations" as "mcpgate_audit_rotations_total",
        /// Spans the receiver of `tracing` accepted.
        trace_exported: Counter => "tracing"."exported" as "mcpgate_trace_spans_exported_total",
        /// Spans dropped: the exporter's queue was full, the memory budget refused them, or the receiver was down, slow or refused them.
        trace_dropped: Counter => "tracing"."dropped" as "mcpgate_trace_spans_dropped_total",
        /// Exports (batches of spans) that failed: the receiver could not be reached, took longer than `tracing.export_timeout_ms`, or answered an error.
        trace_export_failures: Counter => "tracing"."export_failures" as "mcpgate_trace_export_failures_total",
        /// Seconds since an `initialize` was last refused (the uptime before any).
        sessions_since_refused: Gauge => "sessions"."secs_since_refused" as "mcpgate_sessions_seconds_since_refused",
        /// Calls of 2026-07-28 clients held now, waiting for the client's retry with answers to the server's requests (`max_held_calls`).
        calls_held: Gauge => "calls"."held_for_2026_clients" as "mcpgate_calls_held",
        /// Child processes of stdio servers started.
        processes_spawned: Counter => "processes"."spawned" as "mcpgate_processes_spawned_total",
        /// Child processes of stdio servers that ended and were reaped.
        processes_reaped: Counter => "processes"."reaped" as "mcpgate_processes_reaped_total",
        /// Child processes of stdio servers running now.
        processes_live: Gauge => "processes"."live" as "mcpgate_processes_live",
        /// Starts of a stdio server's process refused at `max_processes` (or a server's own limit).
        processes_refused: Counter => "processes"."refused" as "mcpgate_processes_refused_total",
        /// Seconds since a start was last refused at a process limit (the uptime before any).
        processes_since_refused: Gauge => "processes"."secs_since_refused" as "mcpgate_processes_seconds_since_refused",
    }
}

stats! {
    /// What each server holds now; read with the label `server`.
    pub(crate) struct ServerNow by server {
        /// 0 while the server is down: its last failure was a connect, a refusal, an error status, a protocol error, its process ending, or any failure to open a session, and nothing succeeded since; else 1 (a timeout or a busy lane alone does not make it down).
        up: Gauge => "servers"."up" as "mcpgate_server_up",
        /// Downstream sessions open on the server now.
        live_sessions: Gauge => "servers"."live_sessions" as "mcpgate_server_sessions_live",
        /// Requests to the server running now, each on one of its `calls_per_server` lanes.
        calls_in_flight: Gauge => "servers"."calls_in_flight" as "mcpgate_server_requests_in_flight",
        /// Calls of each tool of the server (at most 100 tools named, the rest as `(other)`).
        tool_calls: CounterFamily => "servers"."tool_calls" as "mcpgate_server_tool_calls_total" { tool },
        /// Calls of each tool that ended in an error: a JSON-RPC error, or a result with `isError`.
        tool_errors: CounterFamily => "servers"."tool_errors" as "mcpgate_server_tool_errors_total" { tool },
    }
}

stats! {
    /// The child processes of each stdio server; read with the label `server`.
    pub(crate) struct StdioNow by server {
        /// Processes of the server shared by sessions that are starting now (no answer to `initialize` yet).
        starting: Gauge => "servers"."processes.starting" as "mcpgate_server_processes_starting",
        /// Processes of the server running now.
        live: Gauge => "servers"."processes.live" as "mcpgate_server_processes_live",
        /// Processes of the server started.
        spawned: Counter => "servers"."processes.spawned" as "mcpgate_server_processes_spawned_total",
        /// Processes of the server that ended and were reaped (each is reaped as it stops being live).
        reaped: Counter => "servers"."processes.reaped" as "mcpgate_server_processes_reaped_total",
        /// Processes of the server that ended on their own (a crash, or an exit mcpgate did not ask for).
        exited: Counter => "servers"."processes.exited" as "mcpgate_server_processes_exited_total",
        /// Processes of the server that needed SIGTERM or SIGKILL when mcpgate stopped them.
        killed: Counter => "servers"."processes.killed" as "mcpgate_server_processes_killed_total",
        /// Processes of the server started again after one ended on its own.
        restarts: Counter => "servers"."processes.restarts" as "mcpgate_server_processes_restarts_total",
    }
}

stats! {
    /// The sign-ins of each server with `oauth`; read with the label `server`. Counts only: never a token.
    pub(crate) struct OAuthNow by server {
        /// Users holding a token for the server now (signed in, or by exchange).
        users: Gauge => "servers"."oauth.users" as "mcpgate_server_oauth_users",
        /// Sign-ins that completed (and tokens got by exchange).
        signins: Counter => "servers"."oauth.signins" as "mcpgate_server_oauth_signins_total",
        /// Sign-ins waiting for their user now (a link given, not yet used).
        waiting: Gauge => "servers"."oauth.waiting" as "mcpgate_server_oauth_signins_waiting",
        /// Refreshes of a user's token asked of the authorization server.
        refreshes: Counter => "servers"."oauth.refreshes" as "mcpgate_server_oauth_refreshes_total",
        /// What failed: discovery, registration, a sign-in, a refresh or an exchange.
        failures: Counter => "servers"."oauth.failures" as "mcpgate_server_oauth_failures_total",
    }
}

/// Every entry of the table, in the order the outputs show them.
pub fn table() -> impl Iterator<Item = &'static Entry> {
    [Now::TABLE, Stats::TABLE, ServerNow::TABLE, ServerStats::TABLE, StdioNow::TABLE, OAuthNow::TABLE]
        .into_iter()
        .flatten()
}

/// The table as Markdown, for the README: each entry with its type, its
/// labels (a family's variant in its name), its place in `/status.json`
/// and its meaning. A test keeps the README's copy equal to it.
pub fn reference_markdown() -> String {
    let mut out = String::from("| metric | type | labels | in `/status.json` | meaning |\n|---|---|---|---|---|\n");
    for e in table() {
        let metric = match e.variant {
            Some((label, value)) => format!("`{}{{{label}=\"{value}\"}}`", e.name),
            None => format!("`{}`", e.name),
        };
        let labels: Vec<String> = e.scope.into_iter().chain(e.label).map(|l| format!("`{l}`")).collect();
        let scope = e.scope.map(|l| format!("<{l}>"));
        // A family's values are keys in /status.json; an Info's is the value.
        let label = e.label.filter(|_| !e.info).map(|l| format!("<{l}>"));
        let place: Vec<String> =
            [Some(e.section.to_string()).filter(|s| !s.is_empty()), scope, Some(e.key.to_string()), label]
                .into_iter()
                .flatten()
                .collect();
        let _ = writeln!(
            out,
            "| {metric} | {} | {} | `{}` | {} |",
            e.kind.prometheus(),
            labels.join(", "),
            place.join("."),
            e.help()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_counter_is_in_the_table_with_its_help() {
        let stats = Stats::default();
        stats.downstream_resumed.inc();
        // A family by method reads as one histogram per method seen: one here.
        stats.operation_duration.observe("ping", Duration::from_millis(1));
        let mut readings = Vec::new();
        stats.read(None, &mut readings);
        let resumed = readings.iter().find(|r| r.path == ["downstream", "resumed"]).unwrap();
        assert_eq!((resumed.number(), resumed.entry.kind), (Some(1), Kind::Counter));
        assert_eq!(resumed.entry.name, "mcpgate_downstream_resumed_total");
        assert_eq!(readings.len(), Stats::TABLE.len(), "one reading per entry");
    }

    #[test]
    fn every_entry_has_help_a_place_of_its_own_and_a_conventional_name() {
        let entries: Vec<&Entry> = table().collect();
        let mut places = Vec::new();
        let mut series = Vec::new();
        for e in &entries {
            assert!(!e.help().is_empty(), "{e:?}");
            assert!(!e.help().contains(['\n', '|']), "{e:?}: one line, no `|` (a Markdown cell)");
            // The MCP conventions' own metrics keep their names, as OpenTelemetry's
            // Prometheus exporter writes them (`mcp.server.operation.duration` in seconds).
            let semconv = e.name.starts_with("mcp_") && e.name.ends_with("_operation_duration_seconds");
            let name_ok = (e.name.starts_with("mcpgate_") || semconv)
                && e.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            assert!(name_ok, "{}: mcpgate_ (or an MCP convention's name) and snake_case", e.name);
            assert_eq!(e.kind == Kind::Counter, e.name.ends_with("_total"), "{}: _total for counters only", e.name);
            for reserved in ["_bucket", "_count", "_sum"] {
                assert!(!e.name.ends_with(reserved), "{}", e.name);
            }
            places.push((e.section, e.key));
            series.push((e.name, e.variant));
        }
        for list in [
            &mut places.iter().map(|p| format!("{p:?}")).collect::<Vec<_>>(),
            &mut series.iter().map(|s| format!("{s:?}")).collect(),
        ] {
            let all = list.len();
            list.sort_unstable();
            list.dedup();
            assert_eq!(list.len(), all, "two entries in one place, or one series twice");
        }
        // A family shares its kind.
        for a in &entries {
            for b in entries.iter().filter(|b| b.name == a.name) {
                assert_eq!(a.kind, b.kind, "{}", a.name);
                assert_eq!(a.variant.map(|v| v.0), b.variant.map(|v| v.0), "{}: one label tells them apart", a.name);
            }
        }
    }

    #[test]
    fn the_reference_has_a_row_per_entry_with_its_labels_and_place() {
        let text = reference_markdown();
        assert_eq!(text.lines().count(), 2 + table().count());
        for row in [
            "| `mcpgate_sessions_closed_total{reason=\"idle\"}` | counter |  | `sessions.evicted_idle` | Client sessions closed after",
            "| `mcpgate_server_errors_total{kind=\"timeout\"}` | counter | `server` | `servers.<server>.errors.timeout` | ",
            "| `mcpgate_server_request_duration_seconds` | histogram | `server` | `servers.<server>.request_duration_seconds` | ",
            "| `mcpgate_threads` | gauge | `role` | `process.threads_by_role.<role>` | ",
            "| `mcpgate_build_info` | gauge | `version` | `version` | ",
        ] {
            assert!(text.lines().any(|l| l.starts_with(row)), "{row}\n{text}");
        }
    }

    #[test]
    fn durations_by_method_keep_the_methods_of_mcp_and_count_the_rest_as_other() {
        let d = MethodDurations::default();
        d.observe("tools/call", Duration::from_millis(3));
        d.observe("made/up", Duration::from_secs(400));
        let entry = &Stats::TABLE.iter().find(|e| e.name == "mcp_server_operation_duration_seconds").unwrap();
        let mut out = Vec::new();
        d.read(entry, None, &mut out);
        let labels: Vec<String> = out.iter().map(|r| r.labels[0].1.clone()).collect();
        assert_eq!(labels, ["tools/call", "_OTHER"]);
        let Sample::Histogram { buckets, .. } = &out[0].sample else { panic!("a histogram") };
        assert_eq!(buckets[0], (0.01, 1), "the conventions' first bound is 10 ms");
        assert_eq!(buckets.len(), OPERATION_BUCKETS_MICROS.len() + 1);
        let Sample::Histogram { buckets, .. } = &out[1].sample else { panic!("a histogram") };
        assert_eq!(buckets[buckets.len() - 2], (300.0, 0));
        assert_eq!(buckets[buckets.len() - 1], (f64::INFINITY, 1));
    }

    #[test]
    fn a_histogram_counts_each_duration_in_its_bucket_cumulatively() {
        let h = Histogram::default();
        for ms in [1, 5, 7, 400, 90_000] {
            h.observe(Duration::from_millis(ms));
        }
        let Sample::Histogram { buckets, sum } = h.sample() else { panic!("a histogram") };
        assert_eq!(buckets.len(), BUCKETS_MICROS.len() + 1);
        assert_eq!(buckets[0], (0.005, 2), "1 ms and 5 ms are within 5 ms");
        assert_eq!(buckets[1], (0.01, 3));
        assert_eq!(buckets[6], (0.5, 4));
        assert_eq!(buckets[12], (60.0, 4));
        assert_eq!(buckets[13], (f64::INFINITY, 5), "+Inf counts all");
        assert!((sum - 90.413).abs() < 1e-9, "{sum}");
    }

    #[test]
    fn scope_variant_and_family_labels_and_places() {
        let s = ServerStats::default();
        s.errors_timeout.inc();
        let mut out = Vec::new();
        s.read(Some("alpha"), &mut out);
        let timeout = out.iter().find(|r| r.entry.variant == Some(("kind", "timeout"))).unwrap();
        assert_eq!(timeout.labels, [("server", "alpha".to_string()), ("kind", "timeout".to_string())]);
        assert_eq!(timeout.path, ["servers", "alpha", "errors", "timeout"]);
        assert_eq!(timeout.number(), Some(1));

        let now = Now {
            threads_by_role: Family::new(vec![("conn".into(), 3)]),
            build_info: Info::new("1.2.3"),
            ..Now::default()
        };
        let mut out = Vec::new();
        now.read(None, &mut out);
        let conn = out.iter().find(|r| r.entry.name == "mcpgate_threads").unwrap();
        assert_eq!(
            (conn.labels.clone(), conn.path.clone()),
            (vec![("role", "conn".to_string())], vec!["process".to_string(), "threads_by_role".into(), "conn".into()])
        );
        let info = out.iter().find(|r| r.entry.name == "mcpgate_build_info").unwrap();
        assert_eq!(
            (info.path.clone(), info.sample.clone()),
            (vec!["version".to_string()], Sample::Info("1.2.3".into()))
        );
    }
}
