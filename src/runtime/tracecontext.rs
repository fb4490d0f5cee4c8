//! The W3C trace context (`traceparent`, `tracestate`, `baggage`) and the
//! one each thread holds now: the current context, under which requests
//! start, and the outgoing one, which a request to a server carries in its
//! headers. `threads.rs` carries the current one onto a thread it starts;
//! `trace.rs` records spans under it and sends them.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether a tracer is in force (`trace.rs` sets it): read first, so that
/// without tracing a request never takes its lock, and no thread holds a context.
pub(super) static ENABLED: AtomicBool = AtomicBool::new(false);

pub(crate) fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The identity of one span, as `traceparent` carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SpanContext {
    pub(crate) trace_id: [u8; 16],
    pub(crate) span_id: [u8; 8],
    pub(crate) sampled: bool,
}

impl SpanContext {
    /// A W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`): version `ff`,
    /// ids of zeros and any other shape are refused, as the spec says.
    pub(crate) fn parse(traceparent: &str) -> Option<SpanContext> {
        let text = traceparent.trim();
        let mut parts = text.split('-');
        let (version, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        // Version 00 has exactly four parts; a later one may add more.
        if version.len() != 2 || version.eq_ignore_ascii_case("ff") || (version == "00" && parts.next().is_some()) {
            return None;
        }
        let _ = hex::<1>(version)?;
        let trace_id = hex::<16>(trace)?;
        let span_id = hex::<8>(span)?;
        let flags = hex::<1>(flags)?[0];
        (trace_id != [0; 16] && span_id != [0; 8]).then_some(SpanContext { trace_id, span_id, sampled: flags & 1 == 1 })
    }

    pub(crate) fn traceparent(&self) -> String {
        format!("00-{}-{}-{:02x}", to_hex(&self.trace_id), to_hex(&self.span_id), u8::from(self.sampled))
    }

    pub(crate) fn trace_hex(&self) -> String {
        to_hex(&self.trace_id)
    }
}

fn hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let bytes = text.as_bytes();
    if bytes.len() != 2 * N {
        return None;
    }
    let digit = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (i, pair) in bytes.chunks(2).enumerate() {
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

pub(super) fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A trace context as it travels: the span, and what goes along with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Context {
    pub(crate) span: SpanContext,
    pub(crate) tracestate: Option<String>,
    pub(crate) baggage: Option<String>,
    /// It came from outside this process (a client's header or `_meta`).
    pub(crate) remote: bool,
}

impl Context {
    /// The context of `traceparent` and what came with it; `None` for a
    /// `traceparent` that is not valid (then the others are dropped too).
    pub(crate) fn from_parts(traceparent: &str, tracestate: Option<&str>, baggage: Option<&str>) -> Option<Context> {
        // Both are lists a receiver may cut; past these sizes they are dropped rather than kept.
        fn keep(v: Option<&str>, max: usize) -> Option<&str> {
            v.map(str::trim).filter(|v| !v.is_empty() && v.len() <= max)
        }
        Some(Context {
            span: SpanContext::parse(traceparent)?,
            tracestate: keep(tracestate, 512).map(str::to_string),
            baggage: keep(baggage, 8192).map(str::to_string),
            remote: true,
        })
    }

    /// The same trace, passed on with another span as the parent.
    pub(super) fn child(&self, span: SpanContext) -> Context {
        Context { span, tracestate: self.tracestate.clone(), baggage: self.baggage.clone(), remote: false }
    }
}

thread_local! {
    /// The context requests started on this thread belong to: the span of
    /// the request it serves, or what the client sent.
    static CURRENT: RefCell<Option<Context>> = const { RefCell::new(None) };
    /// The context of the request this thread sends to a server now, for
    /// its `traceparent` header: set only while that request is sent.
    static OUTGOING: RefCell<Option<Context>> = const { RefCell::new(None) };
}

/// The thread's current context, if any.
pub(crate) fn current() -> Option<Context> {
    if !enabled() {
        return None;
    }
    CURRENT.with(|c| c.borrow().clone())
}

/// Makes `context` the thread's current one until the guard is dropped.
pub(crate) fn enter(context: Option<Context>) -> Entered {
    Entered(CURRENT.with(|c| c.replace(context)), &CURRENT)
}

/// Makes `context` the one the thread's next request to a server carries
/// in its headers, until the guard is dropped.
pub(crate) fn sending(context: Option<Context>) -> Entered {
    Entered(OUTGOING.with(|c| c.replace(context)), &OUTGOING)
}

/// The `traceparent` (and `tracestate`) of the request this thread sends
/// now, for its HTTP headers.
pub(crate) fn outgoing_headers() -> Option<(String, Option<String>)> {
    OUTGOING.with(|c| c.borrow().as_ref().map(|ctx| (ctx.span.traceparent(), ctx.tracestate.clone())))
}

/// Gives back the context that was there before.
pub(crate) struct Entered(Option<Context>, &'static std::thread::LocalKey<RefCell<Option<Context>>>);

impl Drop for Entered {
    fn drop(&mut self) {
        let previous = self.0.take();
        self.1.with(|c| *c.borrow_mut() = previous);
    }
}
