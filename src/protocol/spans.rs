//! An MCP message on a span, as the OpenTelemetry conventions for MCP say
//! (`docs/gen-ai/mcp.md` of the semantic-conventions-genai repository):
//! the span's name (`{mcp.method.name} {target}`), its attributes, how its
//! answer ended; and the trace context a request carries in `params._meta`
//! (`traceparent`, `tracestate`, `baggage`, unprefixed: SEP-414), read and
//! written. Both sides use it: `gateway/spans.rs` for the requests mcpgate
//! receives (SERVER), `downstream/spans.rs` for those it sends (CLIENT).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::jsonrpc::{Message, Params};
use crate::runtime::trace::{Context, Span};

/// The most bytes of arguments or of a result a span carries (opt-in).
pub(crate) const MAX_CAPTURED: usize = 4096;

/// The trace context a request carries in `params._meta`, if any. The
/// params are read for it only when their text has a `traceparent` at all.
pub(crate) fn meta_context(params: Option<&RawValue>) -> Option<Context> {
    #[derive(Deserialize)]
    struct Params<'a> {
        #[serde(rename = "_meta", borrow)]
        meta: Option<Meta<'a>>,
    }
    #[derive(Deserialize)]
    struct Meta<'a> {
        #[serde(borrow)]
        traceparent: Option<Cow<'a, str>>,
        #[serde(borrow)]
        tracestate: Option<Cow<'a, str>>,
        #[serde(borrow)]
        baggage: Option<Cow<'a, str>>,
    }
    let text = params?.get();
    if !text.contains("traceparent") {
        return None;
    }
    let meta = serde_json::from_str::<Params>(text).ok()?.meta?;
    Context::from_parts(&meta.traceparent?, meta.tracestate.as_deref(), meta.baggage.as_deref())
}

/// `params` with `context` in its `_meta` (what was there kept, the trace
/// keys set to this context's; the other members as they were written);
/// `None` when they cannot carry it (a `_meta` that is not an object):
/// they go as they are.
pub(crate) fn with_context<'a>(params: Option<&Params<'a>>, context: &Context) -> Option<Params<'a>> {
    let mut params = params.cloned().unwrap_or_default();
    let mut meta: Map<String, Value> = match params.raw("_meta") {
        Some(raw) => serde_json::from_str(raw.get()).ok()?,
        None => Map::new(),
    };
    meta.insert("traceparent".into(), context.span.traceparent().into());
    for (key, value) in [("tracestate", &context.tracestate), ("baggage", &context.baggage)] {
        match value {
            Some(value) => meta.insert(key.into(), value.as_str().into()),
            None => meta.remove(key),
        };
    }
    params.set("_meta", &Value::Object(meta));
    Some(params)
}

/// What a request is about: the members of its params that name it.
#[derive(Deserialize, Default)]
pub(crate) struct Target<'a> {
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow)]
    uri: Option<Cow<'a, str>>,
    #[serde(borrow)]
    arguments: Option<&'a RawValue>,
}

impl<'a> Target<'a> {
    /// Read from params as they came, as text.
    pub(crate) fn of(params: Option<&'a RawValue>) -> Target<'a> {
        params.and_then(|p| serde_json::from_str(p.get()).ok()).unwrap_or_default()
    }

    /// Taken from params already read.
    pub(crate) fn from_params(params: Option<&'a Params<'_>>) -> Target<'a> {
        let Some(params) = params else { return Target::default() };
        Target { name: params.text("name"), uri: params.text("uri"), arguments: params.raw("arguments") }
    }
}

/// Names `span` after the request `method` (with `id`, about `target`)
/// and sets its attributes. With `arguments` (the keys to redact), a tool
/// call's arguments go on it too.
pub(crate) fn describe(
    span: &mut Span,
    method: &str,
    id: Option<&Value>,
    target: Target,
    arguments: Option<&[String]>,
) {
    span.set("mcp.method.name", method);
    match id {
        None | Some(Value::Null) => {}
        Some(Value::String(id)) => span.set("jsonrpc.request.id", id.as_str()),
        Some(id) => span.set("jsonrpc.request.id", id.to_string()),
    }
    let name = target.name.as_deref().filter(|_| matches!(method, "tools/call" | "prompts/get"));
    match (method, name) {
        ("tools/call", Some(tool)) => {
            span.set("gen_ai.tool.name", tool);
            span.set("gen_ai.operation.name", "execute_tool");
        }
        ("prompts/get", Some(prompt)) => span.set("gen_ai.prompt.name", prompt),
        _ => {}
    }
    if let ("resources/read" | "resources/subscribe" | "resources/unsubscribe", Some(uri)) = (method, &target.uri) {
        span.set("mcp.resource.uri", uri.as_ref());
    }
    span.set_name(match name {
        Some(name) => format!("{method} {name}"),
        None => method.to_string(),
    });
    if let (Some(redact), Some(raw), "tools/call") = (arguments, target.arguments, method) {
        span.set("gen_ai.tool.call.arguments", captured(raw, redact));
    }
}

/// Sets how the request `method` ended on `span`: a JSON-RPC error
/// (`error.type` and `rpc.response.status_code` its code, the status
/// ERROR with its message), or a tool's result with `isError`
/// (`tool_error`). With `results` (the keys to redact), a tool's result
/// goes on it too.
pub(crate) fn answered(span: &mut Span, method: &str, answer: &Message, results: Option<&[String]>) {
    #[derive(Deserialize)]
    struct Error {
        code: Option<i64>,
        message: Option<String>,
    }
    if let Some(error) = &answer.error {
        let error: Error = serde_json::from_str(error.get()).unwrap_or(Error { code: None, message: None });
        let code = error.code.map_or_else(|| "_OTHER".to_string(), |c| c.to_string());
        span.set("error.type", code.clone());
        span.set("rpc.response.status_code", code);
        span.fail(error.message.unwrap_or_default());
        return;
    }
    let Some(result) = &answer.result else { return };
    if method != "tools/call" {
        return;
    }
    if is_tool_error(result.get()) {
        span.set("error.type", "tool_error");
        span.fail("tool_error");
    }
    if let Some(redact) = results
        && let Ok(raw) = serde_json::from_str::<&RawValue>(result.get())
    {
        span.set("gen_ai.tool.call.result", captured(raw, redact));
    }
}

/// `raw` with the values of secret-looking keys replaced, as compact JSON
/// text, or what it was when it is longer than [`MAX_CAPTURED`].
fn captured(raw: &RawValue, redact: &[String]) -> String {
    if raw.get().len() > 16 * MAX_CAPTURED {
        return format!("({} bytes, not kept)", raw.get().len());
    }
    let value: Value = serde_json::from_str(raw.get()).unwrap_or(Value::Null);
    let text = crate::runtime::audit::redacted(&value, redact).to_string();
    if text.len() > MAX_CAPTURED { format!("({} bytes, not kept)", text.len()) } else { text }
}

/// Whether a tool's result says `isError: true`: parsed when small; a large
/// one is looked at where serializers put it, its first and last bytes, so
/// that a call's answer is never read whole once more for this.
pub(crate) fn is_tool_error(result: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Flag {
        #[serde(rename = "isError", default)]
        is_error: bool,
    }
    const WHOLE: usize = 8 * 1024;
    const ENDS: usize = 2 * 1024;
    if result.len() <= WHOLE {
        return serde_json::from_str::<Flag>(result).is_ok_and(|f| f.is_error);
    }
    let says_true = |part: &[u8]| {
        let key = b"\"isError\"";
        memchr::memmem::find_iter(part, key).any(|at| {
            let rest = part[at + key.len()..].iter().skip_while(|b| b.is_ascii_whitespace());
            let mut rest = rest.skip_while(|b| **b == b':').skip_while(|b| b.is_ascii_whitespace());
            rest.by_ref().take(4).copied().eq(*b"true")
        })
    };
    let bytes = result.as_bytes();
    says_true(&bytes[..ENDS]) || says_true(&bytes[bytes.len() - ENDS..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_context_goes_into_meta_beside_what_is_there_and_is_read_back() {
        let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let context = Context::from_parts(traceparent, Some("v=1"), None).unwrap();
        let text = r#"{"name": "x", "arguments": {"n": 12345678901234567890}, "_meta": {"progressToken": 3, "traceparent": "00-old", "baggage": "b=1"}}"#;
        let raw = RawValue::from_string(text.into()).unwrap();
        let params = Params::read(&raw).unwrap();
        let out = with_context(Some(&params), &context).unwrap().to_raw();
        assert!(out.get().contains(r#""arguments":{"n": 12345678901234567890}"#), "the rest as written: {out}");
        let value: Value = serde_json::from_str(out.get()).unwrap();
        assert_eq!(value["_meta"], json!({"progressToken": 3, "traceparent": traceparent, "tracestate": "v=1"}));
        assert_eq!(value["name"], "x");
        assert_eq!(meta_context(Some(&out)), Some(context.clone()));
        let bare: Value = serde_json::from_str(with_context(None, &context).unwrap().to_raw().get()).unwrap();
        assert_eq!(bare, json!({"_meta": {"traceparent": traceparent, "tracestate": "v=1"}}));
        let odd = RawValue::from_string(r#"{"_meta": [1, 2]}"#.into()).unwrap();
        let odd = Params::read(&odd).unwrap();
        assert!(with_context(Some(&odd), &context).is_none(), "a `_meta` that is not an object goes as it is");
        let without = RawValue::from_string(json!({"_meta": {"progressToken": 1}}).to_string()).unwrap();
        assert_eq!(meta_context(Some(&without)), None);
    }

    #[test]
    fn a_tool_error_is_read_from_small_results_and_the_ends_of_large_ones() {
        assert!(is_tool_error(r#"{"content": [], "isError": true}"#));
        assert!(!is_tool_error(r#"{"content": [{"type": "text", "text": "\"isError\": true"}]}"#));
        assert!(!is_tool_error(r#"{"content": [], "isError": false}"#));
        let big = "x".repeat(100_000);
        assert!(is_tool_error(&format!(r#"{{"content": [{{"type": "text", "text": "{big}"}}], "isError" : true}}"#)));
        assert!(is_tool_error(&format!(r#"{{"isError":true, "content": [{{"type": "text", "text": "{big}"}}]}}"#)));
        assert!(!is_tool_error(&format!(r#"{{"content": [{{"type": "text", "text": "{big}"}}], "isError": false}}"#)));
    }
}
