#![forbid(unsafe_code)]
//! Which path goes where: `/mcp` to the gateway, the status pages to
//! `status`; and which requests wait for a `workers` permit.

use std::sync::Arc;

use serde_json::json;

use crate::access;
use crate::config::Source;
use crate::gateway::Gateway;
use crate::http::{App, EventSink, HttpReply, HttpRequest, Route};
use crate::status;

pub struct Mcpgate {
    pub gateway: Arc<Gateway>,
    /// The configuration file, for `POST /reload`.
    pub source: Source,
}

impl App for Mcpgate {
    /// Requests that may wait long on servers hold one of the `workers`
    /// permits: JSON-RPC requests, `DELETE /mcp`, `/reload`. A client's
    /// answer to a server's request and its notifications (a cancel) never
    /// wait for a permit: the calls holding the permits may be waiting for
    /// exactly those. The `GET` stream and the status pages answer at once.
    fn route(&self, req: &HttpRequest) -> Route {
        match (req.method.as_str(), req.path.as_str()) {
            ("POST", "/mcp") if !carries_a_request(&req.body) => Route::AtOnce,
            ("POST" | "DELETE", "/mcp") | ("POST", "/reload") => Route::WithPermit,
            _ => Route::AtOnce,
        }
    }

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

/// Whether a `POST` body holds a JSON-RPC request (a message with both
/// `method` and `id`), or may (a batch, or something that does not parse:
/// the handler then says what is wrong).
fn carries_a_request(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Shape {
        method: Option<serde::de::IgnoredAny>,
        id: Option<serde::de::IgnoredAny>,
    }
    match serde_json::from_slice::<Shape>(body) {
        Ok(shape) => shape.method.is_some() && shape.id.is_some(),
        Err(_) => true,
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
