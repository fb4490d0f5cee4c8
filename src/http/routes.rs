//! Which path goes where: `/mcp` to the gateway, the status pages to
//! `status`, after the checks every request passes (Host, Origin, access).

use std::sync::Arc;

use serde_json::json;

use crate::config::Source;
use crate::gateway::Gateway;
use crate::http::access;
use crate::http::{App, EventSink, HttpReply, HttpRequest};
use crate::status;

pub struct Mcpgate {
    pub gateway: Arc<Gateway>,
    /// The configuration file, for `POST /reload`.
    pub source: Source,
}

impl App for Mcpgate {
    fn handle(&self, req: &HttpRequest, sink: &mut dyn EventSink) -> HttpReply {
        let gateway = &self.gateway;
        let config = &gateway.current().config;
        if let Err(refused) = access::check_host(req, config).and_then(|()| access::check_origin(req, config)) {
            return refused;
        }
        if matches!(req.path.as_str(), "/status" | "/status.json" | "/reload")
            && let Err(refused) = access::check_status(req, config)
        {
            return refused;
        }
        match (req.method.as_str(), req.path.as_str()) {
            (_, "/mcp") => match access::authenticate(req, config) {
                Ok(access) => gateway.handle(req, sink, &access),
                Err(refused) => refused,
            },
            ("GET", "/healthz") => HttpReply::text(200, "text/plain", "ok\n".into()),
            ("GET", "/status") => HttpReply::text(200, "text/html; charset=utf-8", status::html(gateway)),
            ("GET", "/status.json") => HttpReply::json(200, status::json(gateway).to_string().into_bytes()),
            ("POST", "/reload") => self.reload(),
            (_, "/healthz" | "/status" | "/status.json") => {
                HttpReply::text(405, "text/plain", "use GET\n".into()).header("Allow", "GET")
            }
            (_, "/reload") => HttpReply::text(405, "text/plain", "use POST\n".into()).header("Allow", "POST"),
            (_, path) => HttpReply::text(
                404,
                "text/plain",
                format!("no such path `{path}`: mcpgate serves /mcp, /status, /status.json, /healthz and /reload\n"),
            ),
        }
    }
}

impl Mcpgate {
    /// `POST /reload`: the same as SIGHUP, with the outcome as JSON.
    fn reload(&self) -> HttpReply {
        let outcome = self.gateway.reload_from(&self.source);
        let body = json!({
            "reloaded": outcome.error.is_none(),
            "error": outcome.error,
            "changed_servers": outcome.changed,
            "restart_needed": outcome.restart_needed,
        });
        let status = if outcome.error.is_none() { 200 } else { 400 };
        HttpReply::json(status, body.to_string().into_bytes())
    }
}
