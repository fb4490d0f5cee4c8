//! The audit log's records (`audit`): one per call, and one per session
//! opened or closed, built on the request's thread and handed to the writer
//! (`runtime/audit.rs`), which writes them off it. Arguments only with
//! `audit.arguments`, their secrets redacted by key.

use std::time::{Duration, SystemTime};

use serde_json::{Map, Value, json};

use super::outcome::Outcome;
use crate::config::AuditConfig;
use crate::downstream::Server;
use crate::protocol::jsonrpc::Params;
use crate::protocol::spans::is_tool_error;
use crate::runtime::audit::{MAX_LINE, Record, redacted};
use crate::runtime::clock;
use crate::session::{CloseReason, Session};

/// The most bytes of a call's arguments kept in its record.
const MAX_ARGUMENTS: usize = 16 * 1024;

/// A call that ended, as its record needs it.
pub(super) struct Finished<'a> {
    pub(crate) session: &'a Session,
    pub(crate) server: &'a Server,
    pub(crate) method: &'a str,
    pub(crate) params: &'a Params<'a>,
    pub(crate) outcome: &'a Outcome,
    pub(crate) took: Duration,
}

/// A call's record: who, where, what, how it ended, how long, how much.
pub(super) fn call_record(config: &AuditConfig, issuer: Option<&str>, call: &Finished) -> Record {
    let Finished { session, server, method, params, outcome, took } = *call;
    let mut record = base("call", session, issuer);
    record.insert("server".into(), server.name().into());
    record.insert("method".into(), method.into());
    let name = match method {
        "tools/call" | "prompts/get" => params.text("name").map(|n| n.to_string()),
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => params.str("uri"),
        _ => None,
    };
    if let Some(name) = &name {
        let key = if method == "tools/call" {
            "tool"
        } else if method == "prompts/get" {
            "prompt"
        } else {
            "uri"
        };
        record.insert(key.into(), name.as_str().into());
    }
    let (ended, code, bytes_out) = match outcome {
        Outcome::Forwarded(answer) => match (&answer.error, &answer.result) {
            (Some(error), _) => {
                let code = serde_json::from_str::<Value>(error.get()).ok().and_then(|e| e["code"].as_i64());
                ("error", code, error.get().len())
            }
            (None, Some(result)) if method == "tools/call" && is_tool_error(result.get()) => {
                ("tool_error", None, result.get().len())
            }
            (None, result) => ("ok", None, result.as_ref().map_or(0, |r| r.get().len())),
        },
        Outcome::Result(value) => ("ok", None, value.to_string().len()),
        Outcome::Error(e) => ("error", Some(e.code), e.message.len()),
        Outcome::Cancelled => ("cancelled", None, 0),
    };
    record.insert("outcome".into(), ended.into());
    if let Some(code) = code {
        record.insert("code".into(), code.into());
    }
    if let Outcome::Error(e) = outcome {
        record.insert("error".into(), crate::catalog::shortened(&e.message).into());
    }
    record.insert("duration_ms".into(), (took.as_secs_f64() * 1000.0).round().into());
    let raw = params.to_raw();
    record.insert("bytes_in".into(), raw.get().len().into());
    record.insert("bytes_out".into(), bytes_out.into());
    let meta = params.value("_meta");
    // The call's trace: the one mcpgate records it in (`tracing`), else the client's `_meta`'s.
    let traced = crate::runtime::trace::current().map(|c| c.span.trace_hex());
    if let Some(trace) = traced.or_else(|| meta.as_ref().and_then(|m| m["traceparent"].as_str()).and_then(trace_id)) {
        record.insert("trace_id".into(), trace.into());
    }
    if config.arguments
        && let Some(arguments) = params.value("arguments")
    {
        let kept = redacted(&arguments, &config.redact);
        let text = kept.to_string();
        let value = if text.len() <= MAX_ARGUMENTS { kept } else { json!({"cut": format!("{} bytes", text.len())}) };
        record.insert("arguments".into(), value);
    }
    let fields = vec![
        ("MCP_EVENT", "call".to_string()),
        ("MCP_TOOL", name.clone().unwrap_or_else(|| method.to_string())),
        ("MCP_SERVER", server.name().to_string()),
        ("MCP_PRINCIPAL", session.who.clone()),
        ("MCP_SESSION", session.id.clone()),
        ("MCP_OUTCOME", ended.to_string()),
        ("MCP_DURATION_MS", took.as_millis().to_string()),
        (
            "MESSAGE",
            format!(
                "call {} on `{}` for {}: {ended} in {} ms",
                name.as_deref().unwrap_or(method),
                server.name(),
                session.who,
                took.as_millis()
            ),
        ),
    ];
    finish(record, fields)
}

/// A call a `rate_limit` refused before it went anywhere.
pub(super) fn refused_record(session: &Session, issuer: Option<&str>, method: &str, tool: &str, limit: &str) -> Record {
    let mut record = base("call", session, issuer);
    record.insert("method".into(), method.into());
    if method != tool {
        record.insert("tool".into(), tool.into());
    }
    record.insert("outcome".into(), "rate_limited".into());
    record.insert("limit".into(), limit.into());
    let fields = vec![
        ("MCP_EVENT", "call".to_string()),
        ("MCP_TOOL", tool.to_string()),
        ("MCP_PRINCIPAL", session.who.clone()),
        ("MCP_SESSION", session.id.clone()),
        ("MCP_OUTCOME", "rate_limited".to_string()),
        ("MESSAGE", format!("call {tool} for {} refused: over {limit}", session.who)),
    ];
    finish(record, fields)
}

/// A session's record: opened, or closed and why.
pub(super) fn session_record(session: &Session, issuer: Option<&str>, closed: Option<CloseReason>) -> Record {
    let event = if closed.is_some() { "session_close" } else { "session_open" };
    let mut record = base(event, session, issuer);
    record.insert("client".into(), session.client_name.as_str().into());
    if let Some(reason) = closed {
        let reason = match reason {
            CloseReason::Idle => "idle",
            CloseReason::ClientDelete => "client_delete",
            CloseReason::Shutdown => "shutdown",
            CloseReason::Refused => "refused",
        };
        record.insert("reason".into(), reason.into());
    }
    let fields = vec![
        ("MCP_EVENT", event.to_string()),
        ("MCP_PRINCIPAL", session.who.clone()),
        ("MCP_SESSION", session.id.clone()),
        (
            "MESSAGE",
            format!("{event} {} for {} (`{}`)", crate::session::short(&session.id), session.who, session.client_name),
        ),
    ];
    finish(record, fields)
}

/// What every record has: when, what, who (an OAuth subject with its `issuer`), which session.
fn base(event: &str, session: &Session, issuer: Option<&str>) -> Map<String, Value> {
    let mut record = Map::new();
    record.insert("time".into(), clock::rfc3339(SystemTime::now()).into());
    record.insert("event".into(), event.into());
    let mut principal = session.audited.clone();
    if let (Some(issuer), Some(who)) = (issuer, principal.as_object_mut())
        && who.contains_key("subject")
    {
        who.insert("issuer".into(), issuer.into());
    }
    record.insert("principal".into(), principal);
    record.insert("session".into(), session.id.as_str().into());
    record
}

fn finish(record: Map<String, Value>, mut fields: Vec<(&'static str, String)>) -> Record {
    let mut line = Value::Object(record).to_string();
    if line.len() > MAX_LINE {
        // Only arguments can make it so long; they are the first to go.
        if let Ok(Value::Object(mut record)) = serde_json::from_str::<Value>(&line) {
            record.insert("arguments".into(), json!({"cut": format!("{} bytes", line.len())}));
            line = Value::Object(record).to_string();
        }
    }
    fields.push(("SYSLOG_IDENTIFIER", "mcpgate-audit".into()));
    Record { line, fields }
}

/// The trace id of a W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`).
fn trace_id(traceparent: &str) -> Option<String> {
    let mut parts = traceparent.split('-');
    let (_version, id) = (parts.next()?, parts.next()?);
    (id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()) && id != "0".repeat(32))
        .then(|| id.to_ascii_lowercase())
}
