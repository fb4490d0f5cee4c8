//! The one place that knows every transport: a configured server's
//! `transport` picks its [`Connector`]. Above the transports, so that the
//! rest of `downstream/` (the servers, their sessions, the close path)
//! names none of them, and a new transport is a folder and one arm here.

use std::sync::Arc;

use super::{Connector, Context, Limits, SavedDownstream, Server, http, sse, stdio};
use crate::config::{Config, ServerConfig, Transport};
use crate::downstream::oauth::server::ServerAuth;

impl Server {
    /// A configured server, reached as its `transport` says, with `lanes`
    /// requests to it at once.
    /// Its `limits` are resolved here once, and shared with its transport.
    pub fn new(config: ServerConfig, limits: Limits, lanes: usize, context: &Context) -> Server {
        let limits = Arc::new(limits);
        let connector: Box<dyn Connector> = match &config.transport {
            Transport::Http(http) => {
                let auth = ServerAuth::new(&context.oauth, &config.name, http);
                Box::new(http::HttpConnector::new(http.clone(), limits.clone(), lanes, auth))
            }
            Transport::Sse(http) => Box::new(sse::SseConnector::new(http.clone(), limits.clone(), lanes)),
            Transport::Stdio(stdio) => {
                Box::new(stdio::StdioConnector::new(&config.name, stdio.clone(), context.children.clone()))
            }
        };
        Server::assemble(config, limits, lanes, context, connector)
    }

    /// A server made up from what the state file saved of a downstream
    /// session, to send its `DELETE` when the server it was opened on was
    /// removed, moved or changed transport since: of the transport whose
    /// sessions outlive mcpgate ([`super::AfterRestart::Resumed`]), Streamable
    /// HTTP, with the limits and TLS roots of `config` and one lane.
    pub(crate) fn for_saved(saved: &SavedDownstream, config: &Config, context: &Context) -> Server {
        let server = ServerConfig::streamable_http(&saved.server, &saved.url, config.trust.clone());
        Server::new(server, Limits::from_config(config), 1, context)
    }
}
