//! What answers one JSON-RPC request, whichever era asked: every method
//! handler returns it, and each era's HTTP side (`streamable_http`, `stateless`) turns it into bytes.

use serde_json::Value;

use crate::protocol::jsonrpc::{Message, RpcError};

/// What answers a JSON-RPC request: a result built here, an error, a
/// server's response passed on as it came, or nothing (the client
/// cancelled it: the spec says no response follows).
pub(super) enum Outcome {
    Result(Value),
    Error(RpcError),
    Forwarded(Message),
    Cancelled,
}

impl From<RpcError> for Outcome {
    fn from(e: RpcError) -> Outcome {
        Outcome::Error(e)
    }
}
