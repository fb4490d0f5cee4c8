//! What the integration tests share: real processes (the `mcp-fixture`
//! server and `mcpgate` itself) on 127.0.0.1, stopped by PID when dropped
//! ([`process`]); a small MCP client over real sockets ([`client`]); raw
//! HTTP for what a client never sends or never waits for ([`raw`]); the
//! state file ([`state`]); mcpgate run as nobody under a thread limit
//! ([`privileges`]); stdio servers and their children in /proc
//! ([`stdio`]). Each test file uses a part of it.
#![allow(dead_code)]

mod assert;
mod client;
mod privileges;
mod process;
mod raw;
mod scripted;
mod state;
mod stdio;

// Each test file uses a part of what is re-exported here.
#[allow(unused_imports)]
pub use self::{assert::*, client::*, privileges::*, process::*, raw::*, scripted::*, state::*, stdio::*};
