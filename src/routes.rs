//! Which path goes where: `/mcp` to the gateway, the status pages and
//! `/metrics` to `status`, after the checks every request passes (Host, Origin, access);
//! with `auth.oauth`, the protected-resource metadata too (before the `Origin`
//! check: it is public, and browser-based clients read it).

use std::sync::Arc;

use serde_json::json;

use crate::config::Source;
use crate::gateway::Gateway;
use crate::gateway::stateless::Stateless;
use crate::gateway::streamable_http;
use crate::http::access;
use crate::http::auth::{self, Access, Auth};
use crate::http::{App, EventSink, HttpError, HttpReply, HttpRequest};
use crate::runtime::watch::{self, Watch};
use crate::status;

/// Who may reach a path, beyond the Host and Origin checks every request passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Guard {
    /// Anyone (load balancers and systemd check `/healthz`).
    Anyone,
    /// A valid token, when tokens are configured.
    Token,
    /// Loopback clients and token holders, or anyone with `status_public`.
    Status,
}

/// A path mcpgate serves: the methods it takes and who may reach it.
struct Route {
    path: &'static str,
    methods: &'static [&'static str],
    guard: Guard,
}

/// Every path mcpgate serves: 404 and 405 follow from this table.
const ROUTES: &[Route] = &[
    Route { path: "/mcp", methods: &["GET", "POST", "DELETE"], guard: Guard::Token },
    Route { path: "/healthz", methods: &["GET"], guard: Guard::Anyone },
    Route { path: "/status", methods: &["GET"], guard: Guard::Status },
    Route { path: "/status.json", methods: &["GET"], guard: Guard::Status },
    Route { path: "/metrics", methods: &["GET"], guard: Guard::Status },
    Route { path: "/reload", methods: &["POST"], guard: Guard::Status },
    // Sign-ins at servers with `oauth` (`signin`): a browser's pages, then `mcpgate login`'s.
    Route { path: "/oauth/connect", methods: &["GET", "POST"], guard: Guard::Anyone },
    Route { path: "/oauth/callback", methods: &["GET"], guard: Guard::Anyone },
    Route { path: "/oauth/client.json", methods: &["GET"], guard: Guard::Anyone },
    Route { path: "/oauth/login", methods: &["GET", "POST"], guard: Guard::Token },
    Route { path: "/oauth/complete", methods: &["POST"], guard: Guard::Token },
    Route { path: "/oauth/logout", methods: &["POST"], guard: Guard::Token },
];

/// The application behind the front door: the route table's handlers.
pub struct Routes {
    pub(crate) gateway: Arc<Gateway>,
    /// The 2026-07-28 era's pools, held calls and watched calls.
    pub stateless: Arc<Stateless>,
    /// The configuration file, for `POST /reload`.
    pub(crate) source: Source,
    /// What its files looked like when they were last read: a save reloads.
    watch: Watch,
    /// Who may pass, with what it keeps between requests (checked tokens, keys).
    auth: Auth,
    /// The front door's HTTPS settings, read again on reload.
    #[cfg(feature = "tls")]
    tls: Option<Arc<crate::http::tls::Acceptor>>,
}

/// A request refused for where it claims to come from (its `Host` or
/// `Origin`): answered, and said in the log, at most once per 10 s, with
/// the peer and the reason. (A refused token is said where it is checked,
/// `http/auth/`.)
fn refuse(req: &HttpRequest, refused: HttpError) -> HttpReply {
    let peer = req.peer.map_or_else(|| "unknown".to_string(), |p| p.to_string());
    crate::limited!(
        warn,
        "{} {} from {peer} refused with {}: {}",
        req.method,
        req.path,
        refused.status,
        refused.error.message
    );
    refused.reply()
}

impl App for Routes {
    fn handle(&self, req: &HttpRequest, sink: &mut dyn EventSink) -> HttpReply {
        let gateway = &self.gateway;
        let config = &gateway.current().config;
        if let Err(refused) = access::check_host(req, config) {
            return refuse(req, refused);
        }
        if let Some(metadata) = self.auth.metadata(req, config) {
            return metadata;
        }
        // The sign-in pages post to themselves from mcpgate's public origin.
        let own_page = req.path.starts_with("/oauth/")
            && req
                .header("origin")
                .is_some_and(|o| o.eq_ignore_ascii_case(&gateway.downstreams.oauth.client_settings().public_url));
        if !own_page && let Err(refused) = access::check_origin(req, config) {
            return refuse(req, refused);
        }
        let Some(route) = ROUTES.iter().find(|r| r.path == req.path) else {
            let paths: Vec<&str> = ROUTES.iter().map(|r| r.path).collect();
            return HttpError::new(404, format!("no such path `{}`: mcpgate serves {}", req.path, paths.join(", ")))
                .reply();
        };
        let access = match route.guard {
            Guard::Anyone => Access::Open,
            Guard::Token => match self.auth.authenticate(req, config, &gateway.stats) {
                Ok(access) => {
                    self.remember_subject(req, &access);
                    access
                }
                Err(refused) => return refused.reply(),
            },
            Guard::Status => match self.auth.check_status(req, config, &gateway.stats) {
                Ok(()) => Access::Open,
                Err(refused) => return refused.reply(),
            },
        };
        if !route.methods.contains(&req.method.as_str()) {
            let allowed = route.methods.join(", ");
            return HttpError::new(405, format!("use {} on {}", allowed.replace(", DELETE", " or DELETE"), route.path))
                .with_header("Allow", allowed)
                .reply();
        }
        if let Err(refused) = auth::step_up(req, &access, config) {
            return refused.reply();
        }
        match (req.method.as_str(), route.path) {
            (_, "/mcp") => streamable_http::mcp(gateway, &self.stateless, req, sink, &access),
            (_, "/healthz") => HttpReply::text(200, "text/plain", "ok\n".into()),
            (_, "/status") => HttpReply::text(200, "text/html; charset=utf-8", status::html(gateway, &self.stateless)),
            (_, "/status.json") => {
                HttpReply::json(200, status::json(gateway, &self.stateless).to_string().into_bytes())
            }
            (_, "/metrics") => {
                HttpReply::text(200, status::prometheus::CONTENT_TYPE, status::metrics(gateway, &self.stateless))
            }
            (_, "/reload") => self.reload(),
            (_, path) if crate::signin::PATHS.contains(&path) => {
                crate::signin::handle(req, gateway, &self.auth, &access)
            }
            // Every route of the table has a handler above.
            (_, path) => HttpError::new(500, format!("bug: no handler for `{path}`")).reply(),
        }
    }
}

impl Routes {
    pub fn new(gateway: Arc<Gateway>, source: Source) -> Routes {
        Routes {
            gateway,
            stateless: Arc::default(),
            source,
            watch: Watch::default(),
            auth: Auth::new(),
            #[cfg(feature = "tls")]
            tls: None,
        }
    }

    /// Watching the configuration's files, from what they looked like just
    /// before the configuration in force read them.
    pub fn with_watch(self, looked: watch::Looked) -> Routes {
        self.watch.reloaded(looked, &self.watched_files());
        self
    }

    /// The files a change to reloads: the configuration file and each server's `envFile`.
    fn watched_files(&self) -> Vec<std::path::PathBuf> {
        let current = self.gateway.current();
        std::iter::once(self.source.path.clone()).chain(current.config.notes.files().map(Into::into)).collect()
    }

    /// Whether a file of the configuration was saved since it was last read
    /// (and has held still for a look since): time to reload, with `watch_config`.
    pub fn config_saved(&self) -> bool {
        self.watch.changed(&self.watched_files())
    }

    /// Serving HTTPS with `acceptor`, whose files a reload reads again.
    #[cfg(feature = "tls")]
    pub fn with_tls(mut self, acceptor: Option<Arc<crate::http::tls::Acceptor>>) -> Routes {
        self.tls = acceptor;
        self
    }

    /// SIGHUP and `POST /reload`: the configuration, then the front door's
    /// certificate and key (kept as they were when they do not load).
    pub fn reload_all(&self) -> crate::gateway::ReloadOutcome {
        // Looked at before they are read: a save after this reloads again.
        let looked = watch::look(self.watched_files().iter().map(|f| f.as_path()));
        #[allow(unused_mut)]
        let mut outcome = self.gateway.reload_from(&self.source);
        self.watch.reloaded(looked, &self.watched_files());
        #[cfg(feature = "tls")]
        if let (Some(acceptor), Some(files)) = (&self.tls, &self.gateway.current().config.tls) {
            match acceptor.reload(files) {
                Ok(()) => log::info!(
                    "HTTPS: certificate {} and key {} read",
                    files.cert_file.display(),
                    files.key_file.display()
                ),
                Err(why) => {
                    log::error!("HTTPS: {why}; the certificate and key in force stay");
                    let error = outcome.error.take().map_or(why.to_string(), |e| format!("{e}; {why}"));
                    outcome.error = Some(error);
                    self.gateway.life.reload_failed(outcome.error.clone());
                }
            }
        }
        outcome
    }

    /// Keeps a user's own access token where a server of theirs takes it in
    /// exchange (`oauth.token_exchange`): in memory, until it expires.
    fn remember_subject(&self, req: &HttpRequest, access: &Access) {
        let Access::OAuth { grant, .. } = access else { return };
        let exchanges = self.gateway.current().config.servers.iter().any(|s| {
            matches!(&s.transport, crate::config::Transport::Http(h) if h.oauth.as_ref().is_some_and(|o| o.token_exchange))
        });
        if exchanges && let Some(token) = auth::presented(req) {
            self.gateway.downstreams.oauth.remember_subject(&access.user(), token, grant.expires);
        }
    }

    /// `POST /reload`: the same as SIGHUP, with the outcome as JSON.
    fn reload(&self) -> HttpReply {
        let outcome = self.reload_all();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::http::NoStream;

    fn routes(extra: &str) -> Routes {
        let text = format!(r#"{{ {extra} "mcpServers": {{"a": {{"url": "http://127.0.0.1:1/mcp"}}}} }}"#);
        let config = Config::parse(&text, &|_| None).unwrap();
        Routes::new(Arc::new(Gateway::new(config)), Source { path: "/nonexistent".into(), listen: None })
    }

    fn get(routes: &Routes, path: &str, peer: &str, token: Option<&str>) -> u16 {
        let mut req = HttpRequest {
            method: "GET".into(),
            path: path.into(),
            peer: Some(peer.parse().unwrap()),
            ..Default::default()
        };
        if let Some(token) = token {
            req.headers.push("authorization", &format!("Bearer {token}"));
        }
        routes.handle(&req, &mut NoStream).status
    }

    #[test]
    fn metrics_answer_whom_the_status_pages_answer() {
        let open = routes("");
        let tokens = routes(r#""auth": {"tokens": [{"token": "0123456789abcdef0123"}]},"#);
        let public = routes(r#""status_public": true,"#);
        for path in ["/status", "/status.json", "/metrics"] {
            assert_eq!(get(&open, path, "127.0.0.1:5000", None), 200, "{path}");
            assert_eq!(get(&open, path, "192.0.2.7:5000", None), 403, "{path}");
            assert_eq!(get(&tokens, path, "192.0.2.7:5000", None), 401, "{path}");
            assert_eq!(get(&tokens, path, "192.0.2.7:5000", Some("0123456789abcdef0123")), 200, "{path}");
            assert_eq!(get(&public, path, "192.0.2.7:5000", None), 200, "{path}");
        }
        let reply = open.handle(
            &HttpRequest {
                method: "POST".into(),
                path: "/metrics".into(),
                peer: Some("127.0.0.1:5000".parse().unwrap()),
                ..Default::default()
            },
            &mut NoStream,
        );
        assert_eq!(reply.status, 405);
    }
}
