//! The Streamable HTTP transport: the `endpoint` (agents, requests,
//! answers), a session-era downstream session (`link`, with the `reader`
//! of its `GET` stream), and one of the stateless era, 2026-07-28, which
//! has no sessions (`stateless`, with its standing listen). Servers of the
//! old HTTP+SSE transport use the endpoint too, through `downstream::sse`. `tls`: the TLS of `https://`
//! servers, with their roots.

mod endpoint;
mod link;
mod reader;
pub(crate) mod stateless;
#[cfg(feature = "tls")]
pub mod tls;

pub(crate) use endpoint::{Endpoint, status_error};
pub(crate) use link::{open, resumed};
pub(crate) use reader::Reader;
