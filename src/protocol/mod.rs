//! What travels on the wire, whoever carries it: JSON-RPC messages, SSE
//! events, the protocol versions mcpgate speaks, the rules of the
//! 2026-07-28 era (`stateless`: no `initialize`, no session), and how a
//! message is written on a trace's span (`spans`), and a member of a
//! result read without parsing it again (`member`), and a large answer
//! checked as JSON faster than serde_json checks it (`validate`).

pub mod jsonrpc;
pub(crate) mod member;
pub(crate) mod spans;
pub mod sse;
pub(crate) mod stateless;
pub(crate) mod validate;
pub(crate) mod versions;

/// The session id header (session era).
pub(crate) const SESSION_HEADER: &str = "mcp-session-id";
/// The protocol version header (both eras).
pub(crate) const VERSION_HEADER: &str = "mcp-protocol-version";
