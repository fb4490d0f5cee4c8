//! What travels on the wire, whoever carries it: JSON-RPC messages, SSE
//! events, and the protocol versions mcpgate speaks.

pub mod jsonrpc;
pub mod sse;
pub mod versions;
