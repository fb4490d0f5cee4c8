//! Traces: the sampling decision, spans as they are recorded under the W3C
//! trace context (`tracecontext.rs`, with the context each thread holds),
//! and the exporter: one thread of its own sending them as OTLP over HTTP
//! (protobuf, `otlp.rs`) to `POST {endpoint}/v1/traces`, in batches.
//!
//! Nothing here may slow a call or stop it. A span that ends goes into a
//! bounded queue (its bytes charged to `max_memory_mb`) and the caller goes
//! on; a full queue, a refused charge, or a receiver that is down, slow or
//! refuses a batch drop the spans and count them (`/metrics`). No retry: a
//! receiver that is down for a minute loses that minute's spans, and the
//! calls never notice.
//!
//! What spans mean (the MCP conventions) is the callers' business
//! (`gateway/spans.rs` for what mcpgate receives, `downstream/spans.rs` for
//! what it sends); this floor knows contexts, ids, sampling and export.
//!
//! Sampling follows the parent, as OpenTelemetry's default sampler does: a
//! request whose context says "sampled" is recorded, one that says "not
//! sampled" is not (its context is passed on as it came), and a request
//! without a context starts a trace with probability `sample_ratio`. A trace
//! not started carries no context onward: at a ratio of 0.01, 99 calls in
//! 100 pay for one random number and nothing else.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError, bounded};
use parking_lot::{Mutex, RwLock};
use prost::Message as _;

use super::memory::Charge;
use super::otlp;
use super::threads;
/// The context spans are recorded under, and carried on, is `tracecontext.rs`'s.
pub(crate) use super::tracecontext::{
    Context, Entered, SpanContext, current, enabled, enter, outgoing_headers, sending,
};
use super::tracecontext::{ENABLED, to_hex};

/// Spans sent in one request to the receiver at most.
const MAX_BATCH: usize = 512;
/// How long the exporter waits for more spans after the first of a batch.
const BATCH_WAIT: Duration = Duration::from_secs(1);

/// `tracing` in the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TracingConfig {
    /// Where spans go: `{endpoint}/v1/traces` (the endpoint itself when it ends so).
    pub(crate) endpoint: String,
    /// The share of traces started here that are recorded, in millionths.
    pub(crate) sample_per_million: u32,
    /// `service.name` of the resource.
    pub(crate) service_name: String,
    /// Whether a tool call's arguments go on its spans (`gen_ai.tool.call.arguments`), redacted.
    pub(crate) capture_arguments: bool,
    /// Whether a tool call's result goes on its spans (`gen_ai.tool.call.result`), redacted.
    pub(crate) capture_results: bool,
    /// Keys whose values never go on a span (parts of a key, any case).
    pub(crate) redact: Vec<String>,
    /// Spans waiting for the exporter at most.
    pub(crate) max_queue: usize,
    /// The most one export may take.
    pub(crate) export_timeout: Duration,
}

impl TracingConfig {
    /// The URL spans are posted to.
    pub(crate) fn traces_url(&self) -> String {
        let base = self.endpoint.trim_end_matches('/');
        if base.ends_with("/v1/traces") { base.to_string() } else { format!("{base}/v1/traces") }
    }
}

thread_local! {
    /// This thread's random state, for ids and sampling.
    static RANDOM: Cell<u64> = Cell::new(seed());
}

fn seed() -> u64 {
    let mut bytes = [0u8; 8];
    if super::sys::random(&mut bytes).is_err() {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let thread = format!("{:?}", std::thread::current().id());
        return now.as_nanos() as u64 ^ super::sha256::digest(thread.as_bytes())[0] as u64;
    }
    u64::from_le_bytes(bytes)
}

/// wyrand: fast, and random enough for ids nobody must guess.
fn next_u64() -> u64 {
    RANDOM.with(|state| {
        let s = state.get().wrapping_add(0xa076_1d64_78bd_642f);
        state.set(s);
        let t = u128::from(s) * u128::from(s ^ 0xe703_7ed1_a0b4_28db);
        ((t >> 64) as u64) ^ (t as u64)
    })
}

fn new_span_id() -> [u8; 8] {
    loop {
        let id = next_u64();
        if id != 0 {
            return id.to_be_bytes();
        }
    }
}

/// A span's value of one attribute.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Attr {
    Str(String),
    Int(i64),
}

impl From<&str> for Attr {
    fn from(s: &str) -> Attr {
        Attr::Str(s.to_string())
    }
}

impl From<String> for Attr {
    fn from(s: String) -> Attr {
        Attr::Str(s)
    }
}

impl From<i64> for Attr {
    fn from(n: i64) -> Attr {
        Attr::Int(n)
    }
}

/// SERVER (a request mcpgate received) or CLIENT (one it sent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Server,
    Client,
}

/// A span being recorded; sent to the exporter by [`Span::end`], dropped unsent otherwise.
#[derive(Debug)]
pub(crate) struct Span {
    kind: Kind,
    pub(crate) context: SpanContext,
    /// The parent's id, and whether it is remote.
    parent: Option<([u8; 8], bool)>,
    tracestate: Option<String>,
    name: String,
    start_unix_nanos: u64,
    started: Instant,
    attributes: Vec<(&'static str, Attr)>,
    links: Vec<SpanContext>,
    /// Set when it failed: the span's status is ERROR with this description.
    error: Option<String>,
}

impl Span {
    pub(crate) fn set_name(&mut self, name: impl Into<String>) {
        self.name = name.into();
    }

    /// Sets `key` (once: a later value replaces it).
    pub(crate) fn set(&mut self, key: &'static str, value: impl Into<Attr>) {
        let value = value.into();
        match self.attributes.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.attributes.push((key, value)),
        }
    }

    pub(crate) fn link(&mut self, to: SpanContext) {
        self.links.push(to);
    }

    /// Marks it failed: status ERROR, saying `why`.
    pub(crate) fn fail(&mut self, why: impl Into<String>) {
        self.error = Some(why.into());
    }

    /// Ends it now and hands it to the exporter.
    pub(crate) fn end(self) {
        let Some(tracer) = tracer() else { return };
        tracer.send(self);
    }

    fn into_proto(self, ended_after: Duration) -> otlp::Span {
        let flags = 0x01
            | otlp::FLAG_HAS_IS_REMOTE
            | if self.parent.is_some_and(|(_, remote)| remote) { otlp::FLAG_IS_REMOTE } else { 0 };
        let attributes = self
            .attributes
            .into_iter()
            .map(|(key, value)| {
                let value = match value {
                    Attr::Str(s) => otlp::Value::StringValue(s),
                    Attr::Int(n) => otlp::Value::IntValue(n),
                };
                otlp::KeyValue::new(key, value)
            })
            .collect();
        let links = self
            .links
            .into_iter()
            .map(|l| otlp::Link {
                trace_id: l.trace_id.to_vec(),
                span_id: l.span_id.to_vec(),
                trace_state: String::new(),
                attributes: Vec::new(),
                flags: u32::from(l.sampled) | otlp::FLAG_HAS_IS_REMOTE | otlp::FLAG_IS_REMOTE,
            })
            .collect();
        otlp::Span {
            trace_id: self.context.trace_id.to_vec(),
            span_id: self.context.span_id.to_vec(),
            trace_state: self.tracestate.unwrap_or_default(),
            parent_span_id: self.parent.map(|(id, _)| id.to_vec()).unwrap_or_default(),
            name: self.name,
            kind: match self.kind {
                Kind::Server => otlp::SPAN_KIND_SERVER,
                Kind::Client => otlp::SPAN_KIND_CLIENT,
            },
            start_time_unix_nano: self.start_unix_nanos,
            end_time_unix_nano: self.start_unix_nanos + ended_after.as_nanos() as u64,
            attributes,
            dropped_attributes_count: 0,
            links,
            status: self.error.map(|message| otlp::Status { message, code: otlp::STATUS_ERROR }),
            flags,
        }
    }

    /// What it holds, roughly, against `max_memory_mb` while it waits.
    fn weight(&self) -> usize {
        let attributes: usize = self
            .attributes
            .iter()
            .map(|(k, v)| {
                k.len()
                    + 24
                    + match v {
                        Attr::Str(s) => s.len(),
                        Attr::Int(_) => 8,
                    }
            })
            .sum();
        std::mem::size_of::<Span>() + self.name.len() + attributes + 40 * self.links.len()
    }
}

/// What [`begin`] decided: the span to record (if sampled), and the
/// context requests made under it carry (if any).
#[derive(Debug, Default)]
pub(crate) struct Begun {
    pub(crate) span: Option<Span>,
    pub(crate) context: Option<Context>,
}

/// Starts a span of `kind` under `parent` (remote, or this process's own),
/// or a new trace when there is none and the ratio draws it. Without
/// tracing configured: nothing, and nothing to pass on.
pub(crate) fn begin(kind: Kind, parent: Option<Context>) -> Begun {
    if !enabled() {
        return Begun::default();
    }
    let (trace_id, parent_id, carried) = match parent {
        // Not sampled by whoever decided: passed on as it came, not recorded.
        Some(parent) if !parent.span.sampled => return Begun { span: None, context: Some(parent) },
        Some(parent) => (parent.span.trace_id, Some((parent.span.span_id, parent.remote)), Some(parent)),
        None => {
            let (high, low) = (next_u64(), next_u64());
            if low % 1_000_000 >= u64::from(SAMPLE_PER_MILLION.load(Ordering::Relaxed)) {
                return Begun::default();
            }
            let mut trace_id = [0u8; 16];
            trace_id[..8].copy_from_slice(&high.to_be_bytes());
            trace_id[8..].copy_from_slice(&low.to_be_bytes());
            (trace_id, None, None)
        }
    };
    let context = SpanContext { trace_id, span_id: new_span_id(), sampled: true };
    let propagated = match &carried {
        Some(parent) => parent.child(context),
        None => Context { span: context, tracestate: None, baggage: None, remote: false },
    };
    let span = Span {
        kind,
        context,
        parent: parent_id,
        tracestate: propagated.tracestate.clone(),
        name: String::new(),
        start_unix_nanos: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64),
        started: Instant::now(),
        attributes: Vec::with_capacity(12),
        links: Vec::new(),
        error: None,
    };
    Begun { span: Some(span), context: Some(propagated) }
}

/// What the exporter counted since mcpgate started, whatever reloads did.
static EXPORTED: AtomicU64 = AtomicU64::new(0);
static DROPPED: AtomicU64 = AtomicU64::new(0);
static FAILED_EXPORTS: AtomicU64 = AtomicU64::new(0);
/// The tracer's `sample_per_million`, read by every request without the lock.
static SAMPLE_PER_MILLION: AtomicU32 = AtomicU32::new(0);
/// Guards the tracer in force; a reload that changes `tracing` replaces it.
static TRACER: RwLock<Option<Arc<Tracer>>> = RwLock::new(None);

/// Spans exported, spans dropped, and exports that failed, since start.
pub(crate) fn counts() -> (u64, u64, u64) {
    (EXPORTED.load(Ordering::Relaxed), DROPPED.load(Ordering::Relaxed), FAILED_EXPORTS.load(Ordering::Relaxed))
}

fn tracer() -> Option<Arc<Tracer>> {
    if !enabled() {
        return None;
    }
    TRACER.read().clone()
}

/// The configuration in force, if tracing is on.
pub(crate) fn config() -> Option<Arc<TracingConfig>> {
    tracer().map(|t| t.config.clone())
}

/// Starts tracing with `config` (at start, and on a reload that changed
/// it), stopping the exporter before (it sends what it holds first);
/// `None` stops it. `instance` names this process among others
/// (`service.instance.id`); without it, a random id of this run does.
pub(crate) fn configure(config: Option<&TracingConfig>, instance: Option<&str>) {
    if TRACER.read().as_ref().map(|t| &*t.config) == config {
        return;
    }
    let new = config.and_then(|c| match Tracer::start(c.clone(), instance) {
        Ok(tracer) => Some(Arc::new(tracer)),
        Err(e) => {
            log::error!("tracing: cannot start the exporter's thread ({e}): no spans until a reload that works");
            None
        }
    });
    SAMPLE_PER_MILLION.store(config.map_or(0, |c| c.sample_per_million), Ordering::Relaxed);
    ENABLED.store(new.is_some(), Ordering::Relaxed);
    let old = std::mem::replace(&mut *TRACER.write(), new);
    if let Some(old) = old {
        old.stop();
    }
}

/// The exporter in force: the queue to its thread.
struct Tracer {
    config: Arc<TracingConfig>,
    /// Guards the queue's sender; `None` once stopping.
    queue: Mutex<Option<Sender<(Span, Duration, Charge)>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Tracer {
    fn start(config: TracingConfig, instance: Option<&str>) -> std::io::Result<Tracer> {
        let (tx, rx) = bounded(config.max_queue);
        let exporter = Exporter::new(&config, instance);
        let thread = threads::spawn("trace", "", move || exporter.run(&rx))?;
        Ok(Tracer { config: Arc::new(config), queue: Mutex::new(Some(tx)), thread: Mutex::new(Some(thread)) })
    }

    /// Queues `span`; dropped (and counted) if the exporter cannot take it now.
    fn send(&self, span: Span) {
        let took = span.started.elapsed();
        let Some(charge) = Charge::new(span.weight()) else {
            DROPPED.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let queue = self.queue.lock().clone();
        let sent = queue.is_some_and(|q| match q.try_send((span, took, charge)) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
        });
        if !sent {
            DROPPED.fetch_add(1, Ordering::Relaxed);
            crate::limited!(warn, "tracing: a span was dropped (the exporter is behind, or its receiver is slow)");
        }
    }

    /// Sends what is queued (within the export timeout) and stops the thread.
    fn stop(&self) {
        drop(self.queue.lock().take());
        if let Some(thread) = self.thread.lock().take() {
            let _ = thread.join();
        }
    }
}

/// The exporter's thread: batches, encodes and posts.
struct Exporter {
    url: String,
    agent: ureq::Agent,
    resource: otlp::Resource,
}

impl Exporter {
    fn new(config: &TracingConfig, instance: Option<&str>) -> Exporter {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .proxy(None)
            .timeout_global(Some(config.export_timeout))
            .user_agent(concat!("mcpgate/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        let instance = instance.map_or_else(|| to_hex(&next_u64().to_be_bytes()), str::to_string);
        let string = |key: &str, value: &str| otlp::KeyValue::new(key, otlp::Value::StringValue(value.to_string()));
        let resource = otlp::Resource {
            attributes: vec![
                string("service.name", &config.service_name),
                string("service.instance.id", &instance),
                string("service.version", env!("CARGO_PKG_VERSION")),
                string("telemetry.sdk.name", "mcpgate"),
                string("telemetry.sdk.language", "rust"),
            ],
        };
        Exporter { url: config.traces_url(), agent, resource }
    }

    fn run(&self, rx: &Receiver<(Span, Duration, Charge)>) {
        let mut batch = Vec::with_capacity(64);
        loop {
            let open = match rx.recv() {
                Ok(first) => {
                    batch.push(first);
                    self.fill(rx, &mut batch)
                }
                Err(_) => false,
            };
            if !batch.is_empty() {
                self.export(std::mem::take(&mut batch));
            }
            if !open {
                return;
            }
        }
    }

    /// Adds what comes within [`BATCH_WAIT`], up to [`MAX_BATCH`]; false once the queue closed.
    fn fill(&self, rx: &Receiver<(Span, Duration, Charge)>, batch: &mut Vec<(Span, Duration, Charge)>) -> bool {
        let deadline = Instant::now() + BATCH_WAIT;
        while batch.len() < MAX_BATCH {
            match rx.recv_deadline(deadline) {
                Ok(span) => batch.push(span),
                Err(RecvTimeoutError::Timeout) => return true,
                Err(RecvTimeoutError::Disconnected) => return false,
            }
        }
        true
    }

    fn export(&self, batch: Vec<(Span, Duration, Charge)>) {
        let count = batch.len() as u64;
        let spans: Vec<otlp::Span> = batch.into_iter().map(|(span, took, _charge)| span.into_proto(took)).collect();
        let request = otlp::ExportTraceServiceRequest {
            resource_spans: vec![otlp::ResourceSpans {
                resource: Some(self.resource.clone()),
                scope_spans: vec![otlp::ScopeSpans {
                    scope: Some(otlp::InstrumentationScope {
                        name: "mcpgate".into(),
                        version: env!("CARGO_PKG_VERSION").into(),
                    }),
                    spans,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
        };
        let body = request.encode_to_vec();
        let answer = self.agent.post(&self.url).header("Content-Type", "application/x-protobuf").send(&body[..]);
        let failure = match answer {
            Ok(mut response) if response.status().is_success() => {
                let _ = response.body_mut().with_config().limit(64 * 1024).read_to_vec();
                EXPORTED.fetch_add(count, Ordering::Relaxed);
                return;
            }
            Ok(response) => format!("it answered {}", response.status()),
            Err(e) => e.to_string(),
        };
        FAILED_EXPORTS.fetch_add(1, Ordering::Relaxed);
        DROPPED.fetch_add(count, Ordering::Relaxed);
        crate::limited!(warn, "tracing: {count} span(s) dropped: sending them to {} failed: {failure}", self.url);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_is_read_as_the_w3c_spec_says() {
        let ctx = SpanContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert!(ctx.sampled);
        assert_eq!(ctx.traceparent(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        assert!(!SpanContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").unwrap().sampled);
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "not a traceparent",
        ] {
            assert_eq!(SpanContext::parse(bad), None, "{bad}");
        }
        // A later version may carry more parts: its first four are read.
        assert!(SpanContext::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more").is_some());
    }

    #[test]
    fn the_endpoint_gets_the_traces_path_once() {
        let mut c = TracingConfig {
            endpoint: "http://127.0.0.1:4318/".into(),
            sample_per_million: 1_000_000,
            service_name: "mcpgate".into(),
            capture_arguments: false,
            capture_results: false,
            redact: Vec::new(),
            max_queue: 16,
            export_timeout: Duration::from_secs(1),
        };
        assert_eq!(c.traces_url(), "http://127.0.0.1:4318/v1/traces");
        c.endpoint = "http://collector:4318/v1/traces".into();
        assert_eq!(c.traces_url(), "http://collector:4318/v1/traces");
    }

    #[test]
    fn an_entered_context_is_given_back_when_its_guard_drops() {
        let a = Context::from_parts("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", Some("x=1"), None);
        {
            let _outer = sending(a.clone());
            {
                let _inner = sending(None);
                assert_eq!(outgoing_headers(), None);
            }
            assert_eq!(
                outgoing_headers(),
                Some(("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(), Some("x=1".into())))
            );
        }
        assert_eq!(outgoing_headers(), None);
    }
}
