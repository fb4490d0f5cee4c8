//! mcpgate: one Streamable HTTP endpoint in front of many MCP servers, with a
//! session lifecycle that never leaks.
//!
//! The data path, module by module: `httpd` (sockets, threads, SSE framing)
//! hands plain requests to `app`, which routes `/mcp` to `gateway` (MCP,
//! sessions, routing) and the status pages to `status`. A `gateway::Gateway`
//! holds `session::Session`s; each holds one `downstream::Downstream` per
//! configured server, whose `GET` stream a `reader` thread reads. `catalog`
//! merges the servers' lists; the `reaper` evicts idle sessions. Every
//! session ends through `session::close_sessions`, and every downstream
//! session through `downstream::close_all`.
#![deny(unsafe_code)]

pub mod access;
pub mod app;
pub mod catalog;
pub mod config;
pub mod downstream;
pub mod gateway;
pub mod http;
pub mod jsonrpc;
pub mod memory;
pub mod notify;
pub mod ratelog;
pub mod reaper;
pub mod session;
pub mod sha256;
pub mod sse;
pub mod state;
pub mod stats;
pub mod status;
pub mod sys;
pub mod tasks;
pub mod threads;
