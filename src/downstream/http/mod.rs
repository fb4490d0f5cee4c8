//! The Streamable HTTP transport: the `endpoint` (agents, requests,
//! answers), a session-era downstream session (`link`, with the `reader`
//! of its `GET` stream). Servers of the 2026-07-28 era use the endpoint
//! too, through `downstream::modern`, and so do those of the old HTTP+SSE
//! transport, through `downstream::sse`. `tls`: the TLS of `https://`
//! servers, with their roots.

mod endpoint;
mod link;
mod reader;
#[cfg(feature = "tls")]
pub mod tls;

pub(crate) use endpoint::{Endpoint, Exchange, status_error};
pub(crate) use link::{open, resumed, session_id_of};
pub(crate) use reader::Reader;
