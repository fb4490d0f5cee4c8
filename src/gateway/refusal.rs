//! Why `/mcp` answers with an HTTP error status, in either era, and the one
//! place each reason's status is chosen: [`status`]. Every handler of
//! `gateway/` that refuses a request, or answers a 2026-07-28 client with
//! an error, names its reason here instead of writing a number.

use serde_json::Value;

use crate::http::HttpReply;
use crate::protocol::jsonrpc::{self, RpcError};
use crate::protocol::stateless::{HEADER_MISMATCH, MISSING_CAPABILITY, UNSUPPORTED_PROTOCOL_VERSION};

/// Why a request gets an HTTP error, or, in the 2026-07-28 era, which
/// JSON-RPC error code the answer carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Why {
    /// Not a request `/mcp` takes: a body that is not JSON-RPC, a header
    /// missing or wrong, a batch where the era has none.
    Malformed,
    /// `Accept` leaves out what the answer would be.
    NotAcceptable,
    /// `Content-Type` is not `application/json`.
    NotJson,
    /// A method of the session era (`GET`, `DELETE`) asked in 2026-07-28: only `POST` is.
    NoSessions,
    /// The session is unknown or ended.
    UnknownSession,
    /// The stream asked for is another request's.
    StreamTaken,
    /// The session has `max_requests_per_session` requests in flight.
    TooBusy,
    /// Over a `rate_limit`, free again in this many seconds.
    RateLimited(u64),
    /// mcpgate cannot take it now: a limit it holds, a resource it lacks,
    /// a state file or store it cannot write.
    Unavailable,
    /// The session is changing instances, or its holder cannot be asked
    /// now: soon answered.
    Moving,
    /// mcpgate could not pass the request on to the instance that holds it.
    PeerFailed,
    /// mcpgate itself failed at its own work.
    Internal,
    /// A 2026-07-28 answer with this JSON-RPC error code: the era's
    /// transport sets the status by the code.
    Answer2026(i64),
}

/// The status of `why`, with the header that says when to retry: the one
/// place `/mcp`'s error statuses are chosen.
pub(crate) fn status(why: Why) -> (u16, Option<(&'static str, String)>) {
    match why {
        Why::Malformed => (400, None),
        Why::NotAcceptable => (406, None),
        Why::NotJson => (415, None),
        Why::NoSessions => (405, Some(("Allow", "POST".into()))),
        Why::UnknownSession => (404, None),
        Why::StreamTaken => (409, None),
        Why::TooBusy => (429, Some(("Retry-After", "1".into()))),
        Why::RateLimited(secs) => (429, Some(("Retry-After", secs.to_string()))),
        Why::Unavailable => (503, Some(("Retry-After", "5".into()))),
        Why::Moving => (503, Some(("Retry-After", "1".into()))),
        Why::PeerFailed => (502, None),
        Why::Internal => (500, None),
        // 2026-07-28: the codes of a bad request 400, an unknown method 404, the others 200.
        Why::Answer2026(
            jsonrpc::PARSE_ERROR
            | jsonrpc::INVALID_REQUEST
            | jsonrpc::INVALID_PARAMS
            | HEADER_MISMATCH
            | MISSING_CAPABILITY
            | UNSUPPORTED_PROTOCOL_VERSION,
        ) => (400, None),
        Why::Answer2026(jsonrpc::METHOD_NOT_FOUND) => (404, None),
        Why::Answer2026(_) => (200, None),
    }
}

/// The reply to the request `id` that `why` refuses, with `error` as its body.
pub(crate) fn reply_to(why: Why, id: &Value, error: &RpcError) -> HttpReply {
    let (status, header) = status(why);
    let reply = HttpReply::error(status, id, error);
    match header {
        Some((name, value)) => reply.header(name, &value),
        None => reply,
    }
}

/// [`reply_to`] a request whose id is unknown or does not matter.
pub(crate) fn reply(why: Why, error: &RpcError) -> HttpReply {
    reply_to(why, &Value::Null, error)
}

/// [`reply`] with a JSON-RPC "invalid request" saying why.
pub(crate) fn refuse(why: Why, message: impl Into<String>) -> HttpReply {
    reply(why, &RpcError::new(jsonrpc::INVALID_REQUEST, message))
}

/// The status of a 2026-07-28 answer carrying the error `code`, if any.
pub(crate) fn status_2026(code: Option<i64>) -> u16 {
    code.map_or(200, |code| status(Why::Answer2026(code)).0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_era_of_2026_chooses_by_code_and_the_session_era_by_reason() {
        assert_eq!(status(Why::Answer2026(jsonrpc::METHOD_NOT_FOUND)).0, 404);
        assert_eq!(status(Why::Answer2026(UNSUPPORTED_PROTOCOL_VERSION)).0, 400);
        assert_eq!(status(Why::Answer2026(jsonrpc::INTERNAL_ERROR)).0, 200);
        assert_eq!(status_2026(None), 200);
        assert_eq!(status(Why::UnknownSession).0, 404);
        assert_eq!(status(Why::RateLimited(7)), (429, Some(("Retry-After", "7".to_string()))));
        let reply = refuse(Why::NotJson, "Content-Type must be application/json");
        assert_eq!(reply.status, 415);
    }
}
