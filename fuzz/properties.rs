//! What the fuzz targets check, shared with `tests/fuzz_regressions.rs` so
//! that every input the fuzzers found stays a test.

use mcpgate::config::Config;
use mcpgate::protocol::jsonrpc::{self, Kind, Message, Params};
use mcpgate::protocol::sse::{self, Decoder};

/// Any bytes as a POST body: parsing and classifying never panic, a body
/// read as a server's answer (kept, its result not copied out) reads the
/// same, and what mcpgate writes back is valid JSON text (a number too
/// large for f64 is valid JSON, so it is checked as text, not as a Value).
pub fn jsonrpc(data: &[u8]) {
    let parsed = Message::parse(data);
    match (&parsed, Message::parse_owned(data.to_vec())) {
        (Ok(a), Ok(b)) => {
            assert_eq!(format!("{a:?}"), format!("{b:?}"), "parse and parse_owned read different messages")
        }
        (Err(a), Err(b)) => assert_eq!(a.code, b.code, "parse and parse_owned refuse differently"),
        (a, b) => panic!("parse and parse_owned disagree: {a:?}, {b:?}"),
    }
    let Ok(message) = parsed else { return };
    let kind = message.kind().expect("parse() only returns classifiable messages");
    let _ = message.params_object();
    if let Ok(mut params) = Params::of(&message) {
        params.set("name", &serde_json::Value::from("renamed"));
        let raw = params.to_raw();
        serde_json::from_str::<serde::de::IgnoredAny>(raw.get()).expect("forwarded params are JSON");
    }
    let id = message.id.clone().unwrap_or(serde_json::Value::Null);
    let out = match kind {
        Kind::Request => jsonrpc::request(&id, message.method(), message.params.as_deref()),
        Kind::Notification => jsonrpc::notification(message.method(), message.params.as_deref()),
        Kind::Response => match (&message.result, &message.error) {
            (Some(result), _) => jsonrpc::result_text(&id, result),
            (None, Some(error)) => jsonrpc::raw_error(&id, error),
            (None, None) => unreachable!("a response has a result or an error"),
        },
    };
    serde_json::from_slice::<serde::de::IgnoredAny>(&out).expect("what mcpgate writes is JSON");
}

/// Any bytes as a server's SSE stream: decoding never panics and never
/// yields an event over the limit; what mcpgate encodes (JSON, so UTF-8)
/// decodes back to itself.
pub fn sse(data: &[u8]) {
    const LIMIT: usize = 256;
    let mut decoder = Decoder::new(std::io::BufReader::with_capacity(7, data), LIMIT);
    for _ in 0..data.len() + 1 {
        match decoder.next_event() {
            Ok(Some(event)) => assert!(event.data.len() <= LIMIT),
            Ok(None) | Err(_) => break,
        }
    }
    let Ok(text) = std::str::from_utf8(data) else { return };
    let encoded = sse::encode(Some("1-2"), data);
    let mut decoder = Decoder::new(&encoded[..], usize::MAX);
    let event = decoder.next_event().expect("encoded bytes decode").expect("one event");
    assert_eq!(event.data, text.replace("\r\n", "\n").replace('\r', "\n"));
}

/// Any text as a configuration file: accepted, or refused with a problem.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let env = |name: &str| (name == "SET").then(|| "value-of-set".to_string());
    if let Err(invalid) = Config::parse(text, &env) {
        assert!(!invalid.problem.is_empty());
    }
}
