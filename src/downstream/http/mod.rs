//! The Streamable HTTP transport: the `endpoint` (agents, requests,
//! answers), a session-era downstream session (`link`, with the `reader`
//! of its `GET` stream). Servers of the 2026-07-28 era use the endpoint
//! too, through `downstream::modern`.

mod endpoint;
mod link;
mod reader;

pub(crate) use endpoint::{Endpoint, Exchange, stream_agent};
pub(crate) use link::{open, resumed, session_id_of};
