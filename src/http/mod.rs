//! The upstream HTTP/1.1 front door: what a client's bytes become before
//! any MCP is spoken, and how replies go back.
//!
//! - `server`: the listener, the accept loop, connection slots (with the
//!   eviction of peers that send nothing useful, and slots kept for
//!   `/healthz`), and the thread of each connection;
//! - `request`: reading one request, head and body, with deadlines and
//!   limits in bytes and counts, and the framing rules of RFC 9112;
//! - `response`: writing replies and SSE streams, each write bounded in time;
//! - `stream`: the connection beneath both, plain or TLS (`tls`);
//! - `access` and `auth`: who may pass (Host, Origin, static tokens, OAuth);
//! - `exchange`: the plain request and reply, which the others stand on.
//!
//! Handlers see only the plain [`HttpRequest`] and return an [`HttpReply`];
//! nothing outside this folder knows a socket.
//!
//! mcpgate parses request heads itself with `httparse` (the parser hyper
//! uses) and writes its own responses. tiny_http, which this front door
//! replaced, wedged a thread on an `HTTP/2.0` request line, panicked on a
//! failed `try_clone` when file descriptors ran out, buffered header lines
//! of any length, had no deadline for a request head, accepted framing that
//! RFC 9112 refuses, and wrote `400` on idle connections: each is a test in
//! `tests/front_door.rs`.

pub(crate) mod access;
pub mod auth;
mod exchange;
mod request;
mod response;
mod server;
mod stream;
#[cfg(feature = "tls")]
pub mod tls;

pub use exchange::{App, EventSink, HttpReply, HttpRequest, Options, ReplyBody};
pub(crate) use exchange::{Client, Headers, HttpError, NoStream, RESERVED_PATHS, StreamReply};
pub use server::{Httpd, RESERVED, Transport};
