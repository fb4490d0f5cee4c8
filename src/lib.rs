//! mcpgate: one Streamable HTTP endpoint in front of many MCP servers, with a
//! session lifecycle that never leaks.
//!
//! The request path, room by room:
//! - [`http`]: the front door: sockets, connection threads, request heads
//!   and bodies with their limits, replies and SSE framing; the route table
//!   and who may pass (tokens, `Origin`, `Host`).
//! - [`protocol`]: JSON-RPC messages, SSE events, and the protocol versions
//!   mcpgate speaks.
//! - [`gateway`]: MCP on `/mcp`: the HTTP side of each request
//!   (`endpoint`), what each method does (`dispatch`), the merged lists
//!   (`lists`, `catalog`), tasks, and reloads.
//! - [`session`]: a client session: its downstream slots, its streams and
//!   their replay log, and the routing of calls and server requests in both
//!   directions; `close_sessions`, the one way a session ends.
//! - [`downstream`]: the client side of each server, behind one seam
//!   (`Link`) for Streamable HTTP, the old HTTP+SSE and stdio;
//!   `close_all`, the one way a downstream session ends.
//! - [`runtime`]: what every floor uses: the state file and its journal,
//!   threads, memory accounting, rate-limited logs, OS calls.
//! - [`service`]: what keeps it running, above the gateway: the reaper,
//!   systemd, the restore at start.
//! - [`status`]: the counters, and the status page drawn from them.
//!
//! [`config`] is read by all of them.
// No unsafe code, but in one place: `runtime::sys`, the OS calls, which
// allows it for itself and documents each block.
#![deny(unsafe_code)]

pub mod catalog;
pub mod config;
pub mod downstream;
pub mod gateway;
pub mod http;
pub mod protocol;
pub mod routes;
pub mod runtime;
pub mod service;
pub mod session;
pub mod stats;
pub mod status;
pub mod tasks;
