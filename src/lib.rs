//! mcpgate: one Streamable HTTP endpoint in front of many MCP servers, with a
//! session lifecycle that never leaks.
//!
//! The floors, from the top down. Each imports only from the floors below
//! it (`tests/layers.rs` holds the code to this list), and a request goes
//! down them from `routes` to `downstream`, its answer back up:
//! - [`service`]: what keeps it running: the reaper, systemd, peers, the
//!   restore at start.
//! - [`routes`]: the application: which path goes where, after the checks
//!   every request passes.
//! - [`signin`]: the pages users sign in to servers that want OAuth
//!   through (`/oauth/`), and what `mcpgate login` and `logout` ask.
//! - [`status`]: `/status.json`, the status page and `/metrics`, drawn from
//!   the gateway, its sessions and the counters.
//! - [`gateway`]: MCP on `/mcp`: the HTTP side of each request
//!   (`streamable_http`), what each method does (`dispatch`), the merged
//!   lists, tool search, the 2026-07-28 clients (`stateless/`), and reloads.
//! - [`session`]: a client session: its downstream slots, its streams and
//!   their replay log, and the routing of calls and server requests in both
//!   directions; `close_sessions`, the one way a session ends.
//! - [`http`]: the front door: sockets, connection threads, request heads
//!   and bodies with their limits, replies and SSE framing, TLS; who may
//!   pass (`Origin`, `Host`, tokens, OAuth).
//! - [`downstream`]: the client side of each server; a transport is one
//!   folder behind two traits (`Connector` per server, `Link` per session):
//!   Streamable HTTP, the old HTTP+SSE and stdio; `close_all`, the one way
//!   a downstream session ends.
//! - [`config`]: the configuration file, its keys in one table.
//! - [`catalog`]: merging what several servers offer into one list per
//!   kind, and the tool search index.
//! - [`protocol`]: JSON-RPC messages, SSE events, and the protocol versions
//!   mcpgate speaks.
//! - [`tasks`]: task ids and states (protocol 2025-11-25).
//! - [`stats`]: the one table of counters and gauges every floor counts into.
//! - [`runtime`]: what every floor uses: the state file and its journal,
//!   threads, memory accounting, the clock, rate-limited logs, OS calls.
// No unsafe code, but in one place: `runtime::sys`, the OS calls, which
// allows it for itself and documents each block.
#![deny(unsafe_code)]

// Linux only: `runtime::sys` calls prctl (the subreaper, a child's parent-death
// signal), the status reads /proc, systemd's socket is an abstract one. Said
// first, here, before the unresolved names a build for another system meets
// (for x86_64-unknown-freebsd: this first, then what libc and std lack there).
#[cfg(not(target_os = "linux"))]
compile_error!(
    "mcpgate runs on Linux only (glibc or musl; x86_64, aarch64, armv7): it uses prctl, /proc and abstract sockets"
);

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
pub mod signin;
pub mod stats;
pub mod status;
pub mod tasks;
