//! Who may use `/mcp`: a static token of `auth.tokens`, or an access token
//! of the `auth.oauth` issuer (mcpgate as an OAuth 2.1 resource server:
//! `oauth`, with `jwt`, `jwks`, `crypto`, `introspection`, `idp`), and what
//! a client is told when it may not (`metadata`: RFC 9728 and RFC 6750).
//!
//! Whoever passes becomes an [`Access`]: what it may reach, and the
//! principal its sessions are bound to. A token is never passed on: the
//! servers get their own configured credentials, whoever calls.
//!
//! - No token: 401 with `WWW-Authenticate: Bearer` (and, with OAuth, the
//!   metadata URL and the required scopes).
//! - A token that is refused: 401 `error="invalid_token"` with the reason
//!   in `error_description`, and the reason logged (once per 10 s per kind).
//! - A valid token without a required scope, or a call to a server whose
//!   scope it lacks: 403 `error="insufficient_scope"` naming the scopes.
//! - The issuer cannot be asked (its keys unreachable): 503 with
//!   `Retry-After`, as the token may well be good.

use std::sync::Arc;

use parking_lot::RwLock;
use serde_json::Value;

use crate::config::{Config, OAuthConfig, Token};
use crate::http::{HttpError, HttpReply, HttpRequest};
use crate::runtime::secret::constant_time_eq;
use crate::stats::Stats;

mod claims;
mod crypto;
mod idp;
mod introspection;
mod jwks;
mod jwt;
pub(crate) mod metadata;
mod oauth;

pub(crate) use claims::{Grant, Rejection};
use oauth::OAuth;

/// What a request may reach once admitted, and who it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// No `auth` configured: everything.
    Open,
    /// A valid static token: the servers it names (all when it names none).
    Token(Token),
    /// A valid OAuth access token: what it grants, and the servers its
    /// scopes reach (`None`: all).
    OAuth { grant: Arc<Grant>, servers: Option<Vec<String>> },
}

impl Access {
    /// The servers this access is limited to; `None` for all of them.
    pub(crate) fn servers(&self) -> Option<&[String]> {
        match self {
            Access::Open => None,
            Access::Token(token) => token.servers.as_deref(),
            Access::OAuth { servers, .. } => servers.as_deref(),
        }
    }

    /// Who is calling, in words for the log: a token's `name`, else the
    /// start of its digest; an OAuth subject; `anyone` without `auth`.
    /// Never the token itself.
    pub(crate) fn who(&self) -> String {
        match self {
            Access::Open => "anyone".into(),
            Access::Token(token) => match &token.name {
                Some(name) => format!("token `{}`", jwt::printable(name)),
                None => {
                    let digest = crate::runtime::sha256::digest(token.token.as_bytes());
                    format!("token {}", crate::runtime::sha256::to_hex(&digest[..4]))
                }
            },
            Access::OAuth { grant, .. } => format!("subject `{}`", jwt::printable(&grant.subject)),
        }
    }

    /// Who is calling, for the audit log: `{"token": name}` (the start of
    /// its digest when it has no name), `{"subject": ...}` (the audit log
    /// adds the issuer), or `{}` without `auth`. Never the token itself.
    pub(crate) fn audited(&self) -> serde_json::Value {
        match self {
            Access::Open => serde_json::json!({}),
            Access::Token(token) => match &token.name {
                Some(name) => serde_json::json!({"token": name}),
                None => {
                    let digest = crate::runtime::sha256::digest(token.token.as_bytes());
                    serde_json::json!({"token": format!("sha256:{}", crate::runtime::sha256::to_hex(&digest[..4]))})
                }
            },
            Access::OAuth { grant, .. } => serde_json::json!({"subject": grant.subject}),
        }
    }

    /// Who is calling, as a digest sessions and held calls are bound to: a
    /// static token's SHA-256; for OAuth the SHA-256 of its issuer, subject
    /// and the servers its scopes leave out. `None` without `auth`. Never
    /// the token itself: this is what the state file keeps.
    pub(crate) fn principal(&self) -> Option<[u8; 32]> {
        match self {
            Access::Open => None,
            Access::Token(token) => Some(crate::runtime::sha256::digest(token.token.as_bytes())),
            Access::OAuth { grant, .. } => Some(grant.principal),
        }
    }

    /// Who is calling, whatever its token reaches: a static token's SHA-256;
    /// for OAuth the SHA-256 of its issuer and subject. What the tokens
    /// mcpgate keeps for a user at its servers are bound to; `None` without `auth`.
    pub(crate) fn user(&self) -> Option<[u8; 32]> {
        match self {
            Access::OAuth { grant, .. } => Some(grant.user),
            other => other.principal(),
        }
    }
}

/// The checker of the OAuth configuration in force, kept across requests
/// (its caches: keys, checked tokens) and across reloads that leave
/// `auth.oauth` as it was.
#[derive(Default)]
pub(crate) struct Auth {
    /// Guards the swap of the checker; the configuration it was made for
    /// (the latest `Arc` of equal value) beside it.
    current: RwLock<Option<(Arc<OAuthConfig>, Arc<OAuth>)>>,
}

/// A request refused for its token: a line in the log, at most one per 10 s,
/// with the peer and why, never the token. (OAuth's refusals say their own,
/// with the claim that failed.)
fn said_refused(req: &HttpRequest, why: &str) {
    let peer = req.peer.map_or_else(|| "unknown".to_string(), |p| p.to_string());
    crate::limited!(warn, "{} {} from {peer} refused with 401: {why}", req.method, req.path);
}

/// The bearer token a request presents, if any: for a token exchange of
/// the user's own token (`oauth.token_exchange`), never passed on as it is.
pub(crate) fn presented(req: &HttpRequest) -> Option<&str> {
    bearer(req)
}

/// The bearer token of a request, if it sends one.
fn bearer(req: &HttpRequest) -> Option<&str> {
    let (scheme, token) = req.header("authorization")?.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// The token equal to `presented`. Every configured token is compared in
/// full, in time that depends only on the lengths, so the answer's timing
/// tells nothing about how much of a token was right.
fn find<'a>(tokens: &'a [Token], presented: &str) -> Option<&'a Token> {
    let mut found = None;
    for token in tokens {
        if constant_time_eq(token.token.as_bytes(), presented.as_bytes()) {
            found = Some(token);
        }
    }
    found
}

impl Auth {
    pub(crate) fn new() -> Auth {
        Auth::default()
    }

    /// The checker for `config`: the one kept, unless the configuration changed.
    fn checker(&self, config: &Arc<OAuthConfig>) -> Arc<OAuth> {
        if let Some((seen, checker)) = &*self.current.read()
            && Arc::ptr_eq(seen, config)
        {
            return checker.clone();
        }
        let mut current = self.current.write();
        match &mut *current {
            Some((seen, checker)) if **seen == **config => {
                *seen = config.clone();
                checker.clone()
            }
            _ => {
                let checker = Arc::new(OAuth::new(config.clone()));
                *current = Some((config.clone(), checker.clone()));
                checker
            }
        }
    }

    /// The access of a `/mcp` request, or the refusal to answer with.
    pub(crate) fn authenticate(&self, req: &HttpRequest, config: &Config, stats: &Stats) -> Result<Access, HttpError> {
        let Some(tokens) = &config.tokens else { return Ok(Access::Open) };
        let refused = |e: HttpError| {
            stats.auth_refused.inc();
            Err(e)
        };
        let oauth = config.oauth.as_ref();
        let Some(presented) = bearer(req) else {
            let message = "this gateway needs Authorization: Bearer <token>";
            said_refused(req, "it sent no bearer token");
            return refused(match oauth {
                Some(oauth) => unauthorized(oauth, None, message),
                None => HttpError::new(401, message).with_header("WWW-Authenticate", "Bearer"),
            });
        };
        if let Some(token) = find(tokens, presented) {
            return Ok(Access::Token(token.clone()));
        }
        let Some(oauth) = oauth else {
            said_refused(req, "its bearer token is none of auth.tokens");
            return refused(
                HttpError::new(401, "the bearer token is not valid")
                    .with_header("WWW-Authenticate", "Bearer error=\"invalid_token\""),
            );
        };
        match self.checker(oauth).check(presented, stats) {
            Ok(grant) => {
                let missing: Vec<&String> =
                    oauth.required_scopes.iter().filter(|s| !grant.scopes.contains(s)).collect();
                if !missing.is_empty() {
                    let why = format!(
                        "the token lacks scope {} (auth.oauth.required_scopes)",
                        missing.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", ")
                    );
                    crate::limited!(info, "OAuth: a token of `{}` was refused: {why}", jwt::printable(&grant.subject));
                    return refused(insufficient_scope(oauth, &why, &oauth.required_scopes));
                }
                let servers = (!grant.hidden.is_empty()).then(|| {
                    config.servers.iter().map(|s| s.name.clone()).filter(|name| !grant.hidden.contains(name)).collect()
                });
                Ok(Access::OAuth { grant, servers })
            }
            Err(rejection) => {
                rejection.log();
                refused(match &rejection {
                    Rejection::Unavailable(_) => {
                        HttpError::new(503, format!("{rejection}; retry shortly")).with_header("Retry-After", "5")
                    }
                    _ => unauthorized(
                        oauth,
                        Some(&rejection.to_string()),
                        &format!("the bearer token is not valid: {rejection}"),
                    ),
                })
            }
        }
    }

    /// Who a bearer token is (a static token, or an access token of
    /// `auth.oauth`), as for `/mcp`: for the sign-in pages, which must know
    /// who opened a link.
    pub(crate) fn check_bearer(&self, token: &str, config: &Config, stats: &Stats) -> Result<Access, String> {
        let mut req = HttpRequest { method: "GET".into(), path: "/oauth/connect".into(), ..Default::default() };
        req.headers.push("authorization", &format!("Bearer {token}"));
        self.authenticate(&req, config, stats).map_err(|e| e.error.message)
    }

    /// The status pages and `/reload`: loopback clients always; others with
    /// a valid token, or anyone when `status_public` is set.
    pub(crate) fn check_status(&self, req: &HttpRequest, config: &Config, stats: &Stats) -> Result<(), HttpError> {
        if config.status_public || req.peer.is_some_and(|p| p.ip().is_loopback()) {
            return Ok(());
        }
        if config.tokens.is_some() {
            return self.authenticate(req, config, stats).map(|_| ());
        }
        Err(HttpError::new(403, "the status pages answer loopback clients and token holders only (status_public)"))
    }

    /// The protected-resource metadata, when `path` is where it is served.
    pub(crate) fn metadata(&self, req: &HttpRequest, config: &Config) -> Option<HttpReply> {
        let oauth = config.oauth.as_ref()?;
        if !metadata::serves(oauth, &req.path) {
            return None;
        }
        if req.method != "GET" {
            return Some(HttpError::new(405, "use GET").with_header("Allow", "GET").reply());
        }
        let body = metadata::document(oauth).to_string().into_bytes();
        // Public: a browser-based client may read it from any page.
        Some(HttpReply::json(200, body).header("Access-Control-Allow-Origin", "*"))
    }
}

/// 401 with the challenge: the reason when a token was sent, the required scopes.
fn unauthorized(oauth: &OAuthConfig, reason: Option<&str>, message: &str) -> HttpError {
    let error = reason.map(|r| ("invalid_token", r));
    HttpError::new(401, message)
        .with_header("WWW-Authenticate", metadata::challenge(oauth, error, &oauth.required_scopes))
}

/// 403 `insufficient_scope`, naming the scopes a token needs for this (step-up).
fn insufficient_scope(oauth: &OAuthConfig, why: &str, scopes: &[String]) -> HttpError {
    HttpError::new(403, why.to_string())
        .with_header("WWW-Authenticate", metadata::challenge(oauth, Some(("insufficient_scope", why)), scopes))
}

/// A call to a tool or prompt of a server the token's scopes leave out:
/// 403 naming the scope, so that a client can ask for it (step-up). Its
/// lists never showed such a tool; this is for a client that knows the
/// name anyway. Told apart by the server's `prefix` (servers without one
/// cannot be).
pub(crate) fn step_up(req: &HttpRequest, access: &Access, config: &Config) -> Result<(), HttpError> {
    let Access::OAuth { grant, .. } = access else { return Ok(()) };
    let Some(oauth) = &config.oauth else { return Ok(()) };
    if grant.hidden.is_empty() || req.method != "POST" {
        return Ok(());
    }
    let Ok(message) = serde_json::from_slice::<Value>(&req.body) else { return Ok(()) };
    if !matches!(message["method"].as_str(), Some("tools/call" | "prompts/get")) {
        return Ok(());
    }
    let Some(name) = message["params"]["name"].as_str() else { return Ok(()) };
    let owns = |server: &crate::config::ServerConfig| {
        !server.prefix.is_empty() && name.starts_with(&format!("{}{}", server.prefix, server.separator))
    };
    if config.servers.iter().any(|s| !grant.hidden.contains(&s.name) && owns(s)) {
        return Ok(());
    }
    let Some(server) = config.servers.iter().find(|s| grant.hidden.contains(&s.name) && owns(s)) else {
        return Ok(());
    };
    let Some(needed) = oauth.scope_of(&server.name) else { return Ok(()) };
    let mut scopes = oauth.required_scopes.clone();
    if !scopes.iter().any(|s| s == needed) {
        scopes.push(needed.to_string());
    }
    let why = format!("`{}` is on server `{}`, which needs scope `{needed}`", jwt::printable(name), server.name);
    Err(insufficient_scope(oauth, &why, &scopes))
}
