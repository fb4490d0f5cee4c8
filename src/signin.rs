//! The pages through which a user signs in to a server that wants OAuth,
//! under `/oauth/`, and what `mcpgate login` and `logout` ask of a running
//! mcpgate. The work is the authorizer's (`downstream::oauth`); this is its
//! HTTP side.
//!
//! - `GET /oauth/connect?e=ID`: the link a client shows. Whoever opens it
//!   must show they are the user it was made for (the MCP spec's phishing
//!   rule): with `auth.oauth`, by signing in at mcpgate's own issuer; with
//!   static tokens only, by giving their token in a form (`POST`); without
//!   `auth` the gateway is one user. Then the browser goes to the server's
//!   authorization server, with a cookie that binds the callback to it.
//! - `GET /oauth/callback`: where authorization servers send the browser
//!   back (the redirect URI); it completes the sign-in, tells the client
//!   sessions of that user, and says so in words.
//! - `GET /oauth/client.json`: mcpgate's client ID metadata document.
//! - `POST /oauth/login`, `GET /oauth/login?e=ID`, `POST /oauth/complete`,
//!   `POST /oauth/logout`: `mcpgate login` and `logout`, with the caller's
//!   bearer token (like `/mcp`): a link for that user, its state, the
//!   pasted address of the callback, forgetting the tokens.
//!
//! Every page says what happened and what to do; nothing on it, nor in the
//! log, holds a token or a code.

use serde_json::{Value, json};

use crate::config::Transport;
use crate::downstream::oauth::server::ServerAuth;
use crate::downstream::oauth::{self, Completed, FlowView, User};
use crate::gateway::Gateway;
use crate::http::auth::{Access, Auth};
use crate::http::{HttpError, HttpReply, HttpRequest};
use crate::protocol::jsonrpc;

/// The paths served here.
pub(crate) const PATHS: &[&str] =
    &["/oauth/connect", "/oauth/callback", "/oauth/client.json", "/oauth/login", "/oauth/complete", "/oauth/logout"];

/// The name of the cookie of the sign-in `id` (its first 16 hex digits).
fn cookie_name(id: &str) -> String {
    format!("mcpgate_signin_{}", &id[..id.len().min(16)])
}

/// The values of this request's sign-in cookies.
fn cookies(req: &HttpRequest) -> Vec<&str> {
    req.header("cookie")
        .map(|c| {
            c.split(';')
                .filter_map(|pair| pair.trim().split_once('='))
                .filter(|(name, _)| name.starts_with("mcpgate_signin_"))
                .map(|(_, value)| value)
                .collect()
        })
        .unwrap_or_default()
}

/// Text for HTML: `<`, `>`, `&`, quotes escaped.
fn escape(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '<' => "&lt;".to_string(),
            '>' => "&gt;".to_string(),
            '&' => "&amp;".to_string(),
            '"' => "&quot;".to_string(),
            '\'' => "&#39;".to_string(),
            c => c.to_string(),
        })
        .collect()
}

/// A page: a title and a paragraph (already escaped), never cached or referred on.
fn page(status: u16, title: &str, body_html: &str) -> HttpReply {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" \
         content=\"width=device-width\"><title>mcpgate: {t}</title></head><body style=\"font-family: sans-serif; \
         max-width: 40em; margin: 3em auto\"><h1>{t}</h1>{body_html}</body></html>",
        t = escape(title)
    );
    HttpReply::text(status, "text/html; charset=utf-8", html)
        .header("Cache-Control", "no-store")
        .header("Referrer-Policy", "no-referrer")
        .header("X-Frame-Options", "DENY")
}

fn said(status: u16, title: &str, text: &str) -> HttpReply {
    page(status, title, &format!("<p id=\"said\">{}</p>", escape(text)))
}

/// A redirect of the browser to `url`, setting the sign-in's cookie.
fn redirect(url: &str, id: &str, cookie: &str, secure: bool, max_age: u64) -> HttpReply {
    let secure = if secure { "; Secure" } else { "" };
    HttpReply::empty(302)
        .header("Location", url)
        .header(
            "Set-Cookie",
            &format!("{}={cookie}; Path=/oauth/; HttpOnly; SameSite=Lax; Max-Age={max_age}{secure}", cookie_name(id)),
        )
        .header("Cache-Control", "no-store")
        .header("Referrer-Policy", "no-referrer")
}

/// A JSON answer for `mcpgate login` and `logout`.
fn answer(status: u16, value: Value) -> HttpReply {
    HttpReply::json(status, value.to_string().into_bytes())
}

/// The view of the server `name` for sign-ins, if it has `oauth` (not by exchange).
fn server_auth(gateway: &Gateway, name: &str) -> Result<ServerAuth, String> {
    let cur = gateway.current();
    let server = cur.server(name).ok_or_else(|| format!("no server is named `{name}`"))?;
    match &server.config.transport {
        Transport::Http(http) if http.oauth.as_ref().is_some_and(|o| !o.token_exchange) => {
            ServerAuth::new(&gateway.downstreams.oauth, name, http)
                .ok_or_else(|| format!("server `{name}` has no `oauth`"))
        }
        _ => Err(format!("server `{name}` does not sign users in (it has no `oauth`, or exchanges tokens)")),
    }
}

/// The sign-in pages and `mcpgate login`'s requests; `access` is the
/// caller's for the paths that need a token (`login`, `complete`, `logout`).
pub(crate) fn handle(req: &HttpRequest, gateway: &Gateway, auth: &Auth, access: &Access) -> HttpReply {
    match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/oauth/connect") => connect(req, gateway, auth),
        ("POST", "/oauth/connect") => prove_with_token(req, gateway, auth),
        ("GET", "/oauth/callback") => callback(req, gateway, auth),
        ("GET", "/oauth/client.json") => answer(200, gateway.downstreams.oauth.metadata_document()),
        ("POST", "/oauth/login") => login(req, gateway, access),
        ("GET", "/oauth/login") => login_state(req, gateway, access),
        ("POST", "/oauth/complete") => complete(req, gateway, access),
        ("POST", "/oauth/logout") => logout(req, gateway, access),
        (_, path) => HttpError::new(405, format!("not a method of {path}")).reply(),
    }
}

/// Whether pages are served over HTTPS (the cookie is then `Secure`).
fn secure(gateway: &Gateway) -> bool {
    gateway.downstreams.oauth.client_settings().public_url.starts_with("https://")
}

/// `GET /oauth/connect?e=ID`: who opened the link, then the server's sign-in.
fn connect(req: &HttpRequest, gateway: &Gateway, _auth: &Auth) -> HttpReply {
    let id = oauth::fetch::query_value(&req.query, "e").unwrap_or_default();
    let Some(FlowView { user, server, identified, done }) = gateway.downstreams.oauth.flow(&id) else {
        return said(
            404,
            "This sign-in link is unknown or expired",
            "Links are good for oauth_client.link_timeout_secs, and not across a restart. Call the tool again in \
             your client for a new link.",
        );
    };
    if let Some(Ok(())) = done {
        return said(
            200,
            "Signed in",
            &format!("You are signed in to server `{server}` already. You can close this tab."),
        );
    }
    let config = &gateway.current().config;
    if identified || config.tokens.is_none() {
        if config.tokens.is_none() && user.is_some() {
            return said(
                403,
                "Refused",
                "This link was made for a user of mcpgate, which no longer asks who its users are.",
            );
        }
        gateway.downstreams.oauth.identified(&id);
        return to_authorization(gateway, &id, &server);
    }
    let via_issuer = oauth::fetch::query_value(&req.query, "via").as_deref() == Some("issuer");
    let only_oauth = config.tokens.as_ref().is_some_and(Vec::is_empty);
    if config.oauth.is_some() && (via_issuer || only_oauth) {
        return match gateway.downstreams.oauth.identity_start(&id) {
            Ok((url, cookie)) => {
                redirect(&url, &id, &cookie, secure(gateway), config.oauth_client.link_timeout.as_secs())
            }
            Err(why) => said(502, "Cannot ask who you are", &why),
        };
    }
    let issuer = match &config.oauth {
        Some(oauth) => format!(
            "<p>Or <a href=\"/oauth/connect?e={}&amp;via=issuer\">sign in at {}</a>.</p>",
            escape(&id),
            escape(&oauth.issuer)
        ),
        None => String::new(),
    };
    page(
        200,
        &format!("Sign in to `{server}`"),
        &format!(
            "<p>This link lets the user it was made for sign in to server <b>{}</b>. Show mcpgate it is you: \
             give the token your client uses with this gateway.</p><form method=\"post\" action=\"/oauth/connect\">\
             <input type=\"hidden\" name=\"e\" value=\"{}\"><label>Token <input type=\"password\" name=\"token\" \
             autocomplete=\"off\"></label> <button type=\"submit\">Continue</button></form>{issuer}",
            escape(&server),
            escape(&id)
        ),
    )
}

/// Sends the browser of the sign-in `id` (its user shown) to `server`'s authorization server.
fn to_authorization(gateway: &Gateway, id: &str, server: &str) -> HttpReply {
    let auth = match server_auth(gateway, server) {
        Ok(auth) => auth,
        Err(why) => return said(404, "Cannot sign in", &why),
    };
    match auth.authorize(id) {
        Ok((url, cookie)) => {
            let age = gateway.current().config.oauth_client.link_timeout.as_secs();
            redirect(&url, id, &cookie, secure(gateway), age)
        }
        Err(why) => said(502, "Cannot sign in", &why),
    }
}

/// Whether `access` is the user `user` a sign-in was made for.
fn same_user(access: &Access, user: &User) -> bool {
    match (access.user(), user) {
        (Some(a), Some(b)) => crate::runtime::secret::constant_time_eq(&a, b),
        _ => false,
    }
}

/// The refusal of a link opened by another user than its own.
fn other_user(gateway: &Gateway, who: &str) -> HttpReply {
    gateway.stats.auth_refused.inc();
    crate::limited!(warn, "OAuth: a sign-in link was opened by {who}, not the user it was made for: refused");
    said(
        403,
        "This link is another user's",
        &format!(
            "You are {who}, and this sign-in link was made for another user of mcpgate: it is refused, so that \
             nobody signs in on another's behalf. Open the link your own client gave you."
        ),
    )
}

/// `POST /oauth/connect` (`e`, `token`): the user shows its static token.
fn prove_with_token(req: &HttpRequest, gateway: &Gateway, auth: &Auth) -> HttpReply {
    let form = String::from_utf8_lossy(&req.body);
    let id = oauth::fetch::query_value(&form, "e").unwrap_or_default();
    let token = oauth::fetch::query_value(&form, "token").unwrap_or_default();
    let Some(FlowView { user, server, .. }) = gateway.downstreams.oauth.flow(&id) else {
        return said(
            404,
            "This sign-in link is unknown or expired",
            "Call the tool again in your client for a new link.",
        );
    };
    let config = &gateway.current().config;
    match auth.check_bearer(token.trim(), config, &gateway.stats) {
        Ok(access) if same_user(&access, &user) => {
            gateway.downstreams.oauth.identified(&id);
            to_authorization(gateway, &id, &server)
        }
        Ok(access) => other_user(gateway, &access.who()),
        Err(why) => said(403, "Not a token of this gateway", &why),
    }
}

/// `GET /oauth/callback`: an authorization server sent the browser back.
fn callback(req: &HttpRequest, gateway: &Gateway, auth: &Auth) -> HttpReply {
    match gateway.downstreams.oauth.callback(&req.query, &cookies(req), None) {
        Ok(Completed::Identity { id, access_token }) => {
            let config = &gateway.current().config;
            let Some(FlowView { user, server, .. }) = gateway.downstreams.oauth.flow(&id) else {
                return said(404, "This sign-in link expired", "Call the tool again in your client for a new link.");
            };
            match auth.check_bearer(&access_token, config, &gateway.stats) {
                Ok(access) if same_user(&access, &user) => {
                    gateway.downstreams.oauth.identified(&id);
                    to_authorization(gateway, &id, &server)
                }
                Ok(access) => other_user(gateway, &access.who()),
                Err(why) => said(403, "mcpgate does not take that sign-in", &why),
            }
        }
        Ok(Completed::Authorized { id, server, user, sessions }) => {
            tell_sessions(gateway, &id, &user, &sessions);
            said(
                200,
                "Signed in",
                &format!("You are signed in to server `{server}`. You can close this tab and go back to your client."),
            )
        }
        Err(why) if why.contains("`mcpgate login`") => said(200, "Paste this page's address", &why),
        Err(why) => said(400, "Sign-in refused", &why),
    }
}

/// A sign-in completed: the sessions given its link hear
/// `notifications/elicitation/complete`, and every session of the user
/// that its servers' lists changed (the server's tools are there now).
fn tell_sessions(gateway: &Gateway, id: &str, user: &User, given: &[String]) {
    let done = jsonrpc::notification(
        "notifications/elicitation/complete",
        Some(&jsonrpc::raw(&json!({ "elicitationId": id }))),
    );
    for session in gateway.sessions.snapshot() {
        if session.user() != *user {
            continue;
        }
        if given.iter().any(|s| *s == session.id) {
            session.push_to_stream(done.clone());
        }
        session.lists_changed();
    }
}

/// The caller's request body as JSON, and one of its strings.
fn field(req: &HttpRequest, name: &str) -> Option<String> {
    serde_json::from_slice::<Value>(&req.body).ok()?.get(name)?.as_str().map(str::to_string)
}

/// `POST /oauth/login` (`{"server": ...}`): a link for the caller, or that it is signed in.
fn login(req: &HttpRequest, gateway: &Gateway, access: &Access) -> HttpReply {
    let Some(name) = field(req, "server") else {
        return answer(400, json!({ "error": "the body must be {\"server\": \"<name>\"}" }));
    };
    let auth = match server_auth(gateway, &name) {
        Ok(auth) => auth,
        Err(why) => return answer(404, json!({ "error": why })),
    };
    match auth.link(&access.user()) {
        Ok(None) => answer(200, json!({ "signed_in": true, "server": name })),
        Ok(Some(sign_in)) => answer(
            200,
            json!({
                "signed_in": false,
                "server": name,
                "id": sign_in.elicitation_id,
                "url": sign_in.url,
                "redirect_uri": gateway.downstreams.oauth.client_settings().redirect_uri(),
            }),
        ),
        Err(e) => answer(502, json!({ "error": e.to_string() })),
    }
}

/// `GET /oauth/login?e=ID`: how the caller's sign-in stands.
fn login_state(req: &HttpRequest, gateway: &Gateway, access: &Access) -> HttpReply {
    let id = oauth::fetch::query_value(&req.query, "e").unwrap_or_default();
    match gateway.downstreams.oauth.login_state(&id, &access.user()) {
        None => answer(404, json!({ "state": "unknown", "error": "no such sign-in of yours (expired?)" })),
        Some(None) => answer(200, json!({ "state": "waiting" })),
        Some(Some(Ok(()))) => answer(200, json!({ "state": "done" })),
        Some(Some(Err(why))) => answer(200, json!({ "state": "failed", "error": why })),
    }
}

/// `POST /oauth/complete` (`{"url": ...}`): the callback's address, pasted
/// by the caller into `mcpgate login`.
fn complete(req: &HttpRequest, gateway: &Gateway, access: &Access) -> HttpReply {
    let Some(url) = field(req, "url") else {
        return answer(400, json!({ "error": "the body must be {\"url\": \"<the address the browser ended on>\"}" }));
    };
    let redirect_uri = gateway.downstreams.oauth.client_settings().redirect_uri();
    let query = match url.trim().split_once('?') {
        Some((base, query)) if base == redirect_uri => query.split('#').next().unwrap_or("").to_string(),
        _ => {
            return answer(
                400,
                json!({ "error": format!("that is not an address of the callback: it starts with {redirect_uri}?") }),
            );
        }
    };
    match gateway.downstreams.oauth.callback(&query, &[], Some(access.user())) {
        Ok(Completed::Authorized { id, server, user, sessions }) => {
            tell_sessions(gateway, &id, &user, &sessions);
            answer(200, json!({ "signed_in": true, "server": server }))
        }
        Ok(Completed::Identity { .. }) => {
            answer(400, json!({ "error": "that address is of a sign-in at mcpgate's issuer, not at the server" }))
        }
        Err(why) => answer(400, json!({ "error": why })),
    }
}

/// `POST /oauth/logout` (`{"server": ...}`): forgets the caller's tokens there.
fn logout(req: &HttpRequest, gateway: &Gateway, access: &Access) -> HttpReply {
    let Some(name) = field(req, "server") else {
        return answer(400, json!({ "error": "the body must be {\"server\": \"<name>\"}" }));
    };
    if let Err(why) = server_auth(gateway, &name) {
        return answer(404, json!({ "error": why }));
    }
    // Its downstream sessions with the server end first, while their token still serves their DELETE.
    if let Some(server) = gateway.current().server(&name).cloned() {
        let mut open = Vec::new();
        for session in gateway.sessions.snapshot().iter().filter(|s| s.user() == access.user()) {
            open.extend(session.take_servers(std::slice::from_ref(&server)));
        }
        crate::downstream::close_all(&open, 8);
    }
    match gateway.downstreams.oauth.logout(&access.user(), &name) {
        Ok(had) => {
            log::info!("OAuth: {} signed out of server `{name}`", access.who());
            answer(200, json!({ "forgot": had, "server": name }))
        }
        Err(why) => answer(500, json!({ "error": why })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_escape_what_they_show_and_cookies_are_found_by_name() {
        assert_eq!(escape("<b>&\"'"), "&lt;b&gt;&amp;&quot;&#39;");
        let mut req = HttpRequest::default();
        req.headers.push("cookie", "a=1; mcpgate_signin_0123=xyz; mcpgate_signin_4567=abc");
        assert_eq!(cookies(&req), ["xyz", "abc"]);
    }
}
