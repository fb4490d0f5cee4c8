//! A small OTLP/HTTP receiver for mcpgate's spans: `POST /v1/traces` with a protobuf body,
//! decoded with the official generated types (`opentelemetry-proto`), on 127.0.0.1; or a
//! receiver that takes connections and never answers (a slow one). Stopped when dropped.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message;
use serde_json::Value;

/// One span as the receiver got it, ids in hex.
#[derive(Debug, Clone)]
pub struct GotSpan {
    pub name: String,
    /// SERVER is 2, CLIENT 3.
    pub kind: i32,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    pub attributes: BTreeMap<String, Value>,
    /// UNSET 0, OK 1, ERROR 2, and its message.
    pub status: (i32, String),
    /// (trace id, span id) of each link.
    pub links: Vec<(String, String)>,
    pub resource: BTreeMap<String, Value>,
    pub start_nanos: u64,
    pub end_nanos: u64,
}

impl GotSpan {
    pub fn attr(&self, key: &str) -> &Value {
        self.attributes.get(key).unwrap_or(&Value::Null)
    }

    /// `00-<trace>-<span>-01`: what a request under this span carries.
    pub fn traceparent(&self) -> String {
        format!("00-{}-{}-01", self.trace_id, self.span_id)
    }
}

pub const SERVER: i32 = 2;
pub const CLIENT: i32 = 3;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn value(v: &Option<AnyValue>) -> Value {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => Value::String(s.clone()),
        Some(any_value::Value::IntValue(n)) => Value::from(*n),
        Some(any_value::Value::BoolValue(b)) => Value::Bool(*b),
        Some(any_value::Value::DoubleValue(d)) => Value::from(*d),
        other => Value::String(format!("{other:?}")),
    }
}

fn attributes(list: &[KeyValue]) -> BTreeMap<String, Value> {
    list.iter().map(|kv| (kv.key.clone(), value(&kv.value))).collect()
}

/// The spans of one export request.
fn spans_of(body: &[u8]) -> Vec<GotSpan> {
    let request = ExportTraceServiceRequest::decode(body).expect("a protobuf ExportTraceServiceRequest");
    let mut out = Vec::new();
    for rs in request.resource_spans {
        let resource = attributes(&rs.resource.map(|r| r.attributes).unwrap_or_default());
        for ss in rs.scope_spans {
            for s in ss.spans {
                out.push(GotSpan {
                    name: s.name,
                    kind: s.kind,
                    trace_id: hex(&s.trace_id),
                    span_id: hex(&s.span_id),
                    parent_span_id: hex(&s.parent_span_id),
                    attributes: attributes(&s.attributes),
                    status: s.status.map(|st| (st.code, st.message)).unwrap_or_default(),
                    links: s.links.iter().map(|l| (hex(&l.trace_id), hex(&l.span_id))).collect(),
                    resource: resource.clone(),
                    start_nanos: s.start_time_unix_nano,
                    end_nanos: s.end_time_unix_nano,
                });
            }
        }
    }
    out
}

/// The receiver: every span it was sent, in order.
pub struct OtlpReceiver {
    pub addr: String,
    spans: Arc<Mutex<Vec<GotSpan>>>,
    /// Connections taken so far.
    connections: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl OtlpReceiver {
    /// One that decodes and answers 200.
    pub fn start() -> OtlpReceiver {
        OtlpReceiver::start_answering(true)
    }

    /// One that takes connections and never answers (a receiver too slow for anyone).
    pub fn start_silent() -> OtlpReceiver {
        OtlpReceiver::start_answering(false)
    }

    fn start_answering(answers: bool) -> OtlpReceiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        listener.set_nonblocking(true).expect("non-blocking accept");
        let addr = listener.local_addr().unwrap().to_string();
        let spans = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let connections = Arc::new(AtomicUsize::new(0));
        let (got, done, taken) = (spans.clone(), stop.clone(), connections.clone());
        let thread = std::thread::spawn(move || {
            let mut held = Vec::new();
            while !done.load(Ordering::Relaxed) {
                let accepted = listener.accept();
                if accepted.is_ok() {
                    taken.fetch_add(1, Ordering::Relaxed);
                }
                match accepted {
                    Ok((stream, _)) if answers => {
                        let got = got.clone();
                        std::thread::spawn(move || serve(stream, &got));
                    }
                    // Held open, never read nor answered, until the receiver stops.
                    Ok((stream, _)) => held.push(stream),
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        OtlpReceiver { addr, spans, connections, stop, thread: Some(thread) }
    }

    /// Connections taken so far.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::Relaxed)
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn spans(&self) -> Vec<GotSpan> {
        self.spans.lock().unwrap().clone()
    }

    /// The spans named `name`, once there are `n` of them (within 10 s: the exporter sends a
    /// batch at least every second).
    pub fn wait_for(&self, name: &str, n: usize) -> Vec<GotSpan> {
        let mut found = Vec::new();
        super::wait_until(Duration::from_secs(10), || {
            found = self.spans().into_iter().filter(|s| s.name == name).collect();
            found.len() >= n
        });
        assert!(found.len() >= n, "expected {n} span(s) named `{name}`, got {found:#?}\nall: {:#?}", self.spans());
        found
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Answers the requests of one connection (kept alive) until it closes.
fn serve(stream: TcpStream, spans: &Mutex<Vec<GotSpan>>) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let mut writer = stream.try_clone().expect("clone the stream");
    let mut reader = BufReader::new(stream);
    for _ in 0..10_000 {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        assert!(line.starts_with("POST /v1/traces "), "unexpected request line: {line:?}");
        let mut length = 0;
        let mut content_type = String::new();
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            let (name, value) = header.split_once(':').unwrap_or((header, ""));
            match name.to_ascii_lowercase().as_str() {
                "content-length" => length = value.trim().parse().expect("a Content-Length"),
                "content-type" => content_type = value.trim().to_string(),
                _ => {}
            }
        }
        assert_eq!(content_type, "application/x-protobuf");
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        spans.lock().unwrap().extend(spans_of(&body));
        let answer = "HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n";
        if writer.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}
