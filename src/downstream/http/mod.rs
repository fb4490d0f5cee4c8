//! The Streamable HTTP transport: the `endpoint` (agents, requests,
//! answers), a session-era downstream session (`link`, with the `reader`
//! of its `GET` stream), and one of the stateless era, 2026-07-28, which
//! has no sessions (`stateless`, with its standing listen). Servers of the
//! old HTTP+SSE transport use the endpoint too, through `downstream::sse`.
//! `coalesce`: a request's head and body in one write; `tcp`: the
//! connections beneath; the TLS of `https://` servers is `downstream::tls`.
//! [`HttpConnector`] is the transport's side of a server, in either era.

use std::sync::Arc;

use crate::config::HttpConfig;
use crate::downstream::oauth::server::{Authed, ServerAuth};
use crate::downstream::{AfterRestart, Connector, DownstreamError, Limits, Link, Opened, Opener, Server};

mod coalesce;
mod endpoint;
mod link;
mod reader;
pub(crate) mod stateless;
mod tcp;

pub(crate) use endpoint::{Endpoint, status_error};
pub(crate) use reader::Reader;

/// A Streamable HTTP server, in whichever era it speaks: its endpoint, and
/// what the stateless era needs beside it (its era, asked once; its
/// standing listen). Its links share both.
pub(crate) struct HttpConnector {
    endpoint: Arc<Endpoint>,
    stateless: Arc<stateless::Side>,
    /// With `oauth`: its users' tokens.
    auth: Option<Arc<ServerAuth>>,
}

impl HttpConnector {
    pub(crate) fn new(
        config: HttpConfig,
        limits: Arc<Limits>,
        lanes: usize,
        auth: Option<ServerAuth>,
    ) -> HttpConnector {
        HttpConnector {
            endpoint: Arc::new(Endpoint::new(config, limits, lanes)),
            stateless: Arc::new(stateless::Side::default()),
            auth: auth.map(Arc::new),
        }
    }

    /// The user of a downstream session, on a server with `oauth`.
    fn authed(&self, user: Option<[u8; 32]>) -> Option<Authed> {
        self.auth.as_ref().map(|auth| Authed { auth: auth.clone(), user })
    }
}

impl Connector for HttpConnector {
    fn kind(&self) -> &'static str {
        "http"
    }

    /// A server of the stateless era gets a view; any other, `initialize`.
    fn open(&self, server: &Arc<Server>, body: &[u8], opener: &Opener) -> Result<Opened, DownstreamError> {
        match stateless::open(server, &self.endpoint, &self.stateless, body)? {
            Some(opened) => Ok(opened),
            None => link::open(server, &self.endpoint, body, self.authed(opener.user)),
        }
    }

    fn resume(
        &self,
        server: &Arc<Server>,
        session_id: Option<String>,
        user: Option<[u8; 32]>,
    ) -> Option<Box<dyn Link>> {
        Some(link::resumed(server, &self.endpoint, session_id, self.authed(user)))
    }

    fn saved_url(&self) -> Option<&str> {
        Some(&self.endpoint.config.url)
    }

    fn after_restart(&self) -> AfterRestart {
        AfterRestart::Resumed
    }

    fn era(&self) -> Option<&'static str> {
        self.stateless.era_name()
    }

    fn speaks_2026(&self, server: &Server) -> Option<bool> {
        self.stateless.speaks_2026(server, &self.endpoint)
    }

    fn retire(&self) {
        self.stateless.stop();
    }

    fn close_idle(&self, unused: bool) {
        self.endpoint.close_idle(unused);
    }

    fn probes(&self) -> bool {
        true
    }

    fn answers(&self) -> bool {
        self.endpoint.answers()
    }

    fn shutdown(&self) {
        self.endpoint.shutdown();
        self.stateless.stop();
    }
}
