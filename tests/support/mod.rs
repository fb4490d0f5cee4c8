//! What the integration tests share, by purpose. Everything is re-exported
//! here, so a test file names `support::X` whichever module X lives in.
//!
//! - Processes ([`process`]): the `mcp-fixture` server ([`Fixture`]) and
//!   mcpgate itself ([`Gate`]) on 127.0.0.1, stopped by PID when dropped;
//!   configs, signals, threads and memory of a process; mcpgate run as
//!   nobody under a thread limit ([`privileges`]); stdio servers and their
//!   children in /proc ([`stdio`]); the state file ([`state`]).
//! - Clients, from the test kit (`mcpgate-testkit`, which the fixture's
//!   tests share): a small MCP client speaking Streamable HTTP over real
//!   sockets ([`Client`]), and plain GETs of what mcpgate and the fixture
//!   show; a client of the 2026-07-28 era ([`Modern`]). Both hand back a
//!   [`Reply`]. Here: HTTPS to mcpgate's front door ([`client`]).
//! - Raw HTTP ([`raw`]): for what a client never sends or never waits for,
//!   the one request writer, reader with a deadline, response parser and
//!   SSE body parser; bytes no client would write are sent as they are.
//! - Scripted servers ([`scripted`]): downstream servers the fixture cannot
//!   be, one that answers garbage, hangs or streams for ever ([`Scripted`])
//!   and one that never answers ([`Silent`]).
//! - A fault-injecting TCP proxy ([`proxy`]) between mcpgate and a server:
//!   black holes, half-open connections, resets, delays ([`Proxy`]).
//! - An OTLP receiver ([`otlp`]): mcpgate's spans, decoded with the official protobuf types.
//! - A token issuer ([`oauth`]): the tests' own signing keys, JWTs signed
//!   with them, and a small server for their JWKS and introspection.
//! - A server that wants OAuth ([`oauth_server`]): a protected MCP server
//!   and its authorization server in one, with faults to turn on, and a
//!   [`Browser`] that walks the sign-in pages.
//! - Assertions ([`assert`]): every downstream session closed exactly once
//!   ([`assert_all_closed`]), mcpgate's count balanced ([`assert_balanced`],
//!   [`assert_settled`]), and the one way to learn which downstream session
//!   a client's session holds ([`downstream_session`]).
//!
//! Each test file is a crate of its own that compiles all of this and uses a
//! part of it: what it leaves unused is allowed here (`dead_code`, and the
//! re-exports), not item by item.
#![allow(dead_code)]

mod assert;
mod client;
mod oauth;
mod oauth_server;
mod otlp;
mod privileges;
mod process;
mod proxy;
mod raw;
mod scripted;
mod state;
mod stdio;

#[allow(unused_imports)]
pub use self::{
    assert::*, client::*, oauth::*, oauth_server::*, otlp::*, privileges::*, process::*, proxy::*, raw::*, scripted::*,
    state::*, stdio::*,
};
#[allow(unused_imports)]
pub use mcpgate_testkit::*;
