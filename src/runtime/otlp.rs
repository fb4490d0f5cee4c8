//! The few OTLP messages a trace export needs, as the official protobuf
//! schema numbers them (`opentelemetry/proto/collector/trace/v1`,
//! `trace/v1`, `common/v1`, `resource/v1`), encoded with prost: the body of
//! `POST {endpoint}/v1/traces` with `Content-Type: application/x-protobuf`.
//!
//! Written here rather than taken from `opentelemetry-proto`: its trace
//! types come only with its `trace` feature, which compiles the
//! OpenTelemetry SDK and the `futures` executor into mcpgate (checked with
//! `cargo tree`). The tests decode what this encodes with that crate's
//! generated types (tests/tracing.rs), so a wrong field number fails there.

/// `ExportTraceServiceRequest` (and `TracesData`, which has the same shape).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ExportTraceServiceRequest {
    #[prost(message, repeated, tag = "1")]
    pub(crate) resource_spans: Vec<ResourceSpans>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ResourceSpans {
    #[prost(message, optional, tag = "1")]
    pub(crate) resource: Option<Resource>,
    #[prost(message, repeated, tag = "2")]
    pub(crate) scope_spans: Vec<ScopeSpans>,
    #[prost(string, tag = "3")]
    pub(crate) schema_url: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Resource {
    #[prost(message, repeated, tag = "1")]
    pub(crate) attributes: Vec<KeyValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ScopeSpans {
    #[prost(message, optional, tag = "1")]
    pub(crate) scope: Option<InstrumentationScope>,
    #[prost(message, repeated, tag = "2")]
    pub(crate) spans: Vec<Span>,
    #[prost(string, tag = "3")]
    pub(crate) schema_url: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct InstrumentationScope {
    #[prost(string, tag = "1")]
    pub(crate) name: String,
    #[prost(string, tag = "2")]
    pub(crate) version: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Span {
    #[prost(bytes = "vec", tag = "1")]
    pub(crate) trace_id: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub(crate) span_id: Vec<u8>,
    #[prost(string, tag = "3")]
    pub(crate) trace_state: String,
    #[prost(bytes = "vec", tag = "4")]
    pub(crate) parent_span_id: Vec<u8>,
    #[prost(string, tag = "5")]
    pub(crate) name: String,
    /// `SpanKind`: SERVER is 2, CLIENT 3.
    #[prost(int32, tag = "6")]
    pub(crate) kind: i32,
    #[prost(fixed64, tag = "7")]
    pub(crate) start_time_unix_nano: u64,
    #[prost(fixed64, tag = "8")]
    pub(crate) end_time_unix_nano: u64,
    #[prost(message, repeated, tag = "9")]
    pub(crate) attributes: Vec<KeyValue>,
    #[prost(uint32, tag = "10")]
    pub(crate) dropped_attributes_count: u32,
    #[prost(message, repeated, tag = "13")]
    pub(crate) links: Vec<Link>,
    #[prost(message, optional, tag = "15")]
    pub(crate) status: Option<Status>,
    /// The W3C trace flags (bits 0-7), and whether the parent is remote (bits 8-9).
    #[prost(fixed32, tag = "16")]
    pub(crate) flags: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Link {
    #[prost(bytes = "vec", tag = "1")]
    pub(crate) trace_id: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub(crate) span_id: Vec<u8>,
    #[prost(string, tag = "3")]
    pub(crate) trace_state: String,
    #[prost(message, repeated, tag = "4")]
    pub(crate) attributes: Vec<KeyValue>,
    #[prost(fixed32, tag = "6")]
    pub(crate) flags: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Status {
    #[prost(string, tag = "2")]
    pub(crate) message: String,
    /// `StatusCode`: UNSET 0, OK 1, ERROR 2.
    #[prost(int32, tag = "3")]
    pub(crate) code: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct KeyValue {
    #[prost(string, tag = "1")]
    pub(crate) key: String,
    #[prost(message, optional, tag = "2")]
    pub(crate) value: Option<AnyValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct AnyValue {
    #[prost(oneof = "Value", tags = "1, 2, 3")]
    pub(crate) value: Option<Value>,
}

// The names of `AnyValue.value`'s oneof in OTLP's common.proto
// (`string_value`, ...), so the two read side by side.
#[allow(clippy::enum_variant_names)]
#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum Value {
    #[prost(string, tag = "1")]
    StringValue(String),
    #[prost(bool, tag = "2")]
    BoolValue(bool),
    #[prost(int64, tag = "3")]
    IntValue(i64),
}

pub(crate) const SPAN_KIND_SERVER: i32 = 2;
pub(crate) const SPAN_KIND_CLIENT: i32 = 3;
pub(crate) const STATUS_ERROR: i32 = 2;
/// `SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK` and `SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK`.
pub(crate) const FLAG_HAS_IS_REMOTE: u32 = 0x100;
pub(crate) const FLAG_IS_REMOTE: u32 = 0x200;

impl KeyValue {
    pub(crate) fn new(key: &str, value: Value) -> KeyValue {
        KeyValue { key: key.to_string(), value: Some(AnyValue { value: Some(value) }) }
    }
}
