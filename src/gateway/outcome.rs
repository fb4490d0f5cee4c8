//! What answers one JSON-RPC request, whichever era asked: every method
//! handler returns it, and each era's HTTP side (`streamable_http`, `stateless`) turns it into bytes.
//! And where what a server sends during a call goes before that answer
//! (`CallEvents`), which each era's side writes, and what a call reads of
//! the gateway (`CallSettings`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::downstream::Server;
use crate::protocol::jsonrpc::{Message, RpcError};
use crate::runtime::memory::Charge;
use crate::session::Session;

/// What answers a JSON-RPC request: a result built here, an error, a
/// server's response passed on as it came, or nothing (the client
/// cancelled it: the spec says no response follows).
pub(super) enum Outcome {
    Result(Value),
    Error(RpcError),
    Forwarded(Message),
    Cancelled,
}

impl Outcome {
    /// The charge of the body a server's answer came in, for the reply
    /// made from it to hold until it is written ([`Message::take_held`]).
    pub(super) fn take_held(&mut self) -> Option<Charge> {
        match self {
            Outcome::Forwarded(answer) => answer.take_held(),
            _ => None,
        }
    }
}

impl From<RpcError> for Outcome {
    fn from(e: RpcError) -> Outcome {
        Outcome::Error(e)
    }
}

/// Where what a server sends during a call goes, before its answer.
pub(super) trait CallEvents {
    /// The server's answer became a stream: more may come, and it may take long.
    fn streaming(&mut self);
    /// A message from `server` about the call: progress, a log message, a
    /// request to the client.
    fn message(&mut self, session: &Session, server: &Server, message: Message);
    /// Whether `input` asks a client: only a session-era client's call
    /// does. Otherwise a result is passed on unread (to a client of the
    /// 2026-07-28 era, which asks and retries itself), and a large one is
    /// not scanned for an `input_required` that nobody would answer.
    fn takes_input(&self) -> bool {
        false
    }
    /// A server of the 2026-07-28 era answered `input_required`: asks the
    /// client each of `requests` (key → `{method, params}`) and gives its
    /// answers (key → result), or why not; `None` passes the result on.
    fn input(
        &mut self,
        _session: &Session,
        _requests: &Map<String, Value>,
    ) -> Option<Result<Map<String, Value>, String>> {
        None
    }
    /// A notification of mcpgate's own about the call (a sign-in that
    /// completed), where the client reads the call's answer.
    fn notify(&mut self, _message: Vec<u8>) {}
}

/// What a call needs of the gateway, which a held call's thread cannot
/// borrow: taken when the call starts.
#[derive(Clone)]
pub(super) struct CallSettings {
    pub(crate) open_retry: Duration,
    /// The audit log in force, if any, and the OAuth issuer its records name.
    pub(crate) audit: Option<Arc<crate::runtime::audit::AuditLog>>,
    pub(crate) issuer: Option<String>,
}
