//! What the integration tests of mcpgate (`tests/support/`) and of its
//! fixture (`fixture/tests/support/`) share, so that each support keeps only
//! what is its own (the processes it starts, the servers it fakes):
//!
//! - Plain HTTP ([`http`]): the agent every client speaks through, GETs of
//!   JSON and text, the bytes of a raw request ([`http_request`]), and
//!   [`wait_until`], the one way a test polls.
//! - SSE ([`sse`]): a reader of event streams after the specification, not
//!   mcpgate's decoder (the fixture's tests stand without mcpgate, and a
//!   test should not read the gateway's output with the gateway's code);
//!   not re-exported here, since mcpgate's support has an `sse_events` of
//!   its own that reads as the gateway's decoder does.
//! - A small MCP client of the session era speaking Streamable HTTP
//!   ([`Client`], with its GET [`Stream`]), and one of the 2026-07-28 era
//!   ([`Modern`]). Both hand back a [`Reply`].
#![forbid(unsafe_code)]

pub mod client;
pub mod http;
pub mod modern;
pub mod reply;
pub mod sse;

pub use self::{client::*, http::*, modern::*, reply::*};
