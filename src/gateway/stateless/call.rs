//! A call of the 2026-07-28 era: what a new one is, running it where it
//! was read, and the answer of the era, whatever answers it.

use std::sync::Arc;

use serde_json::Value;

use crate::downstream::Server;
use crate::http::{EventSink, HttpReply, HttpRequest};
use crate::protocol::jsonrpc::{self, Kind, Message, Params, RpcError};
use crate::protocol::sse;
use crate::protocol::stateless::{self, CacheHints, Envelope};
use crate::session::Session;

use super::watch::Watch;
use crate::gateway::dispatch;
use crate::gateway::outcome::{CallEvents, CallSettings, Outcome};
use crate::gateway::refusal::{self, Why};

/// How long a client may keep mcpgate's answer to `server/discover`, in ms.
const DISCOVER_TTL_MS: u64 = 60_000;

/// A call about to run: made by `new_call`.
pub(super) struct NewCall<'a> {
    pub(crate) number: u64,
    pub(crate) call_id: Value,
    pub(crate) call: Message,
    pub(crate) server: Arc<Server>,
    pub(crate) params: Params<'a>,
}

/// Runs a new call on this connection's thread, its client watched (it
/// cancels by closing its stream); what the server sends on the way goes
/// to `sink` as SSE. The outcome, and whether a stream was started.
pub(super) fn run_here(
    watch: &Watch,
    settings: &CallSettings,
    req: &HttpRequest,
    pool: &Arc<Session>,
    new: &NewCall,
    envelope: &Envelope,
    sink: &mut dyn EventSink,
) -> (Outcome, Option<()>) {
    let _watching = watch.add(new.number, req.client.as_ref(), pool, &new.call_id, dispatch::cancel_call);
    let mut events = HereEvents { sink, envelope, streaming: false };
    let outcome = dispatch::call(pool, &new.server, &new.call, &new.params, &mut events, settings);
    (outcome, events.streaming.then_some(()))
}

/// An error answer of this era: its HTTP status follows its code.
pub(super) fn error_reply(id: &Value, e: &RpcError) -> HttpReply {
    refusal::reply_to(Why::Answer2026(e.code), id, e)
}

/// The answer of this era: the result with what the era requires of
/// it, or the error with its status; the last event of the stream when
/// one was started.
/// A result passed on from a server keeps the cache hints it came with;
/// one without gets [`CacheHints::UNKNOWN`], never public.
/// `private`: tokens decide what a client sees.
pub(super) fn answer(private: bool, id: &Value, method: &str, outcome: Outcome, streaming: Option<()>) -> HttpReply {
    let hints = if method == "server/discover" { own_hints(private, DISCOVER_TTL_MS) } else { CacheHints::UNKNOWN };
    finish_with(id, method, outcome, streaming, hints)
}

/// The cache hints of an answer of mcpgate's own: private when tokens
/// decide what a client sees.
pub(super) fn own_hints(private: bool, ttl_ms: u64) -> CacheHints {
    CacheHints { ttl_ms, private }
}

/// [`answer`], with `hints` for a result of a cacheable method
/// that carries none.
pub(super) fn finish_with(
    id: &Value,
    method: &str,
    mut outcome: Outcome,
    streaming: Option<()>,
    hints: CacheHints,
) -> HttpReply {
    // A server's answer brings the charge of the body it came in: held by the reply until written.
    let held = outcome.take_held();
    let (bytes, status) = match outcome {
        // Complete as it came (a server of this era's call result): passed on unparsed, and
        // when not a stream, written around the server's bytes rather than copied.
        Outcome::Forwarded(Message { result: Some(result), .. })
            if !stateless::is_cacheable(method) && stateless::has_result_type(result.get()) =>
        {
            return match streaming {
                Some(()) => HttpReply::sse(sse::encode(None, &jsonrpc::result_text(id, &result))),
                None => HttpReply::answer(id, result),
            }
            .holding(held);
        }
        Outcome::Result(Value::Object(mut result)) => {
            stateless::complete_result(method, &mut result, hints);
            (jsonrpc::result(id, &jsonrpc::raw(&Value::Object(result))), 200)
        }
        Outcome::Result(other) => (jsonrpc::result(id, &jsonrpc::raw(&other)), 200),
        Outcome::Forwarded(answer) => match (&answer.result, &answer.error) {
            (Some(result), _) => match serde_json::from_str::<Value>(result.get()) {
                Ok(Value::Object(mut result)) => {
                    stateless::complete_result(method, &mut result, hints);
                    (jsonrpc::result(id, &jsonrpc::raw(&Value::Object(result))), 200)
                }
                _ => (jsonrpc::result_text(id, result), 200),
            },
            (None, Some(error)) => {
                let code = serde_json::from_str::<Value>(error.get()).ok().and_then(|e| e["code"].as_i64());
                (jsonrpc::raw_error(id, error), refusal::status_2026(code))
            }
            (None, None) => {
                let e = RpcError::internal("the server's response had neither result nor error");
                (jsonrpc::error(id, &e), 200)
            }
        },
        Outcome::Error(e) => (jsonrpc::error(id, &e), refusal::status_2026(Some(e.code))),
        // Cancelled: its client is gone.
        Outcome::Cancelled => return HttpReply::empty(200),
    };
    let reply = match streaming {
        Some(()) => HttpReply::sse(sse::encode(None, &bytes)),
        None => HttpReply::json(status, bytes),
    };
    reply.holding(held)
}

/// The level of a `notifications/message`, read from the message as it
/// came; `None` for any other message.
pub(super) fn log_level_of(message: &Message) -> Option<String> {
    if message.method() != "notifications/message" {
        return None;
    }
    #[derive(serde::Deserialize)]
    struct Level {
        level: Option<String>,
    }
    let params = message.params.as_deref().and_then(|p| serde_json::from_str::<Level>(p.get()).ok());
    // A message without a level is held to the strictest wish.
    Some(params.and_then(|p| p.level).unwrap_or_else(|| "debug".into()))
}

/// What a server of this era sends during a call that runs where it was
/// read: straight to the answer, as SSE.
struct HereEvents<'a> {
    sink: &'a mut dyn EventSink,
    envelope: &'a Envelope,
    streaming: bool,
}

impl CallEvents for HereEvents<'_> {
    fn streaming(&mut self) {}

    fn message(&mut self, session: &Session, server: &Server, message: Message) {
        if message.kind() == Ok(Kind::Request) {
            if server.era() == Some(stateless::VERSION) {
                // This era has no server requests on a stream: it asks through its result.
                log::debug!(
                    "server `{}` sent a request mid-call (protocol {}); ignored",
                    server.name(),
                    stateless::VERSION
                );
            } else {
                // A session-era server's task call: its client is never asked mid-call.
                dispatch::refuse_request(
                    session,
                    server,
                    &message,
                    "a task's call takes no requests (protocol 2026-07-28)",
                );
            }
            return;
        }
        if log_level_of(&message).is_some_and(|level| !self.envelope.wants_log(&level)) {
            return;
        }
        let Some(bytes) = session.to_client(server, message) else { return };
        if self.sink.can_stream() && self.sink.event(&sse::encode(None, &bytes)).is_ok() {
            self.streaming = true;
        }
    }
}
