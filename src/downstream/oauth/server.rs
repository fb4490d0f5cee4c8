//! One server's view of the authorizer ([`ServerAuth`]): what its HTTP
//! links ask before each request (the user's bearer token, refreshed when
//! it is about to expire, or got by exchange) and tell when the server
//! refused one (once more after a refresh; else the link to sign in, with
//! more scopes for a 403 `insufficient_scope`), and where its users sign
//! in (discovery, registration), found once and kept.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use super::discovery;
use super::flow::{self, Purpose, Refusal};
use super::register::{self, Client};
use super::target::{Target, User, clone_target, short, user_key};
use super::tokens::{self, TokenError, Tokens};
use super::{Authorizer, Discovered, Exchanged, FAILED_FOR, KNOWN_FOR, fetch, token_record};
use crate::config::{HttpConfig, ServerOAuth, Trust};
use crate::downstream::challenge::{Challenge, parse_challenge};
use crate::downstream::{DownstreamError, SignIn};
use crate::runtime::memory::Charge;

/// One server's view of the authorizer: what its HTTP links ask.
pub(crate) struct ServerAuth {
    pub(super) authorizer: Arc<Authorizer>,
    pub(super) server: String,
    /// Its URL, and the `oauth` and roots of its configuration.
    pub(super) url: String,
    pub(super) oauth: ServerOAuth,
    pub(super) trust: Trust,
}

impl std::fmt::Debug for ServerAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ServerAuth({})", self.server)
    }
}

/// How many times a request is sent again after its server refused its token.
pub(crate) const RETRIES: usize = 1;

impl ServerAuth {
    /// The view of a server with `oauth`, for its HTTP links; `None` without.
    pub(crate) fn new(authorizer: &Arc<Authorizer>, name: &str, http: &HttpConfig) -> Option<ServerAuth> {
        let oauth = http.oauth.clone()?;
        Some(ServerAuth {
            authorizer: authorizer.clone(),
            server: name.to_string(),
            url: http.url.clone(),
            oauth,
            trust: http.trust.clone(),
        })
    }

    /// Starts the authorization of the sign-in `id` at this server's
    /// authorization server: where to send the browser, and its cookie.
    pub(crate) fn authorize(&self, id: &str) -> Result<(String, String), String> {
        let flows = &self.authorizer.flows;
        let scopes = flows.lock().get(id).map(|f| f.scopes.clone()).ok_or(Refusal::Expired.to_string())?;
        let target = self.target(None).map_err(|e| e.to_string())?;
        let target = if scopes.is_empty() || scopes == target.scopes {
            target
        } else {
            let mut wider = clone_target(&target);
            wider.scopes = scopes;
            Arc::new(wider)
        };
        let (state, challenge, cookie) = flows.lock().begin(id, Purpose::Authorize, target.clone())?;
        Ok((flow::authorize_url(&target, &state, &challenge), cookie))
    }

    pub(crate) fn oauth_error(&self, why: impl std::fmt::Display) -> DownstreamError {
        DownstreamError::OAuth(format!("OAuth: {why}"))
    }

    /// The bearer token to send for `user` now: refreshed first when it is
    /// about to expire (one refresh at a time per user and server; the
    /// others wait for it). `None`: none yet, and the server's challenge is
    /// still to be heard (the request goes without one, and its 401 says
    /// where to sign in). The error is the link to sign in, or why not.
    pub(crate) fn bearer(&self, user: &User) -> Result<Option<String>, DownstreamError> {
        if self.oauth.token_exchange {
            return self.exchanged(user).map(Some);
        }
        let slot = self.authorizer.slot(user, &self.server);
        let deadline = Instant::now() + fetch::TIMEOUT * 2;
        let mut st = slot.state.lock();
        while st.refreshing {
            if slot.changed.wait_until(&mut st, deadline).timed_out() {
                return Err(self.oauth_error("a refresh of the token is still running; try again"));
            }
        }
        let now = crate::runtime::clock::unix_now();
        let Some(tokens) = st.tokens.clone() else {
            drop(st);
            return match self.known() {
                Some(_) => Err(self.sign_in(user, &[], "needs you to sign in before it can be used")),
                None => Ok(None),
            };
        };
        if !tokens.stale(now) {
            return Ok(Some(tokens.access_token));
        }
        if tokens.refresh_token.is_none() {
            if !tokens.expired(now) {
                return Ok(Some(tokens.access_token));
            }
            st.tokens = None;
            st.charge = None;
            drop(st);
            self.forget_record(user);
            return Err(self.sign_in(user, &tokens.scopes, "needs you to sign in again: your sign-in expired"));
        }
        st.refreshing = true;
        drop(st);
        let outcome = self.refresh(user, &tokens);
        let mut st = slot.state.lock();
        st.refreshing = false;
        let result = match outcome {
            // Signed out while the refresh ran: what it wrote is taken back.
            Ok(_) if st.tokens.is_none() => {
                drop(st);
                slot.changed.notify_all();
                self.forget_record(user);
                return Err(self.sign_in(user, &tokens.scopes, "needs you to sign in"));
            }
            Ok(fresh) => {
                let access = fresh.access_token.clone();
                st.charge = Charge::new(fresh.size());
                st.tokens = Some(fresh);
                Ok(Some(access))
            }
            Err(TokenError::InvalidGrant(why)) => {
                st.tokens = None;
                st.charge = None;
                drop(st);
                slot.changed.notify_all();
                self.forget_record(user);
                log::info!("OAuth: server `{}`: {why}; user {} signs in again", self.server, short(user));
                return Err(self.sign_in(
                    user,
                    &tokens.scopes,
                    "needs you to sign in again: your sign-in expired or was revoked",
                ));
            }
            // The authorization server is down or slow: the token serves until it expires.
            Err(e) if !tokens.expired(now) => {
                log::warn!(
                    "OAuth: server `{}`: refreshing a token failed ({e}); the current one serves until it expires",
                    self.server
                );
                Ok(Some(tokens.access_token))
            }
            Err(e) => Err(self.oauth_error(format!("refreshing the token failed: {e}"))),
        };
        drop(st);
        slot.changed.notify_all();
        result
    }

    /// Trades the refresh token for new tokens; a rotated refresh token is
    /// in the store before this returns.
    fn refresh(&self, user: &User, tokens: &Tokens) -> Result<Tokens, TokenError> {
        let target = self.target(None).map_err(|e| TokenError::Unavailable(e.to_string()))?;
        let refresh = tokens.refresh_token.as_deref().unwrap_or_default();
        let settings = self.authorizer.settings();
        let agent = fetch::agent(&target.trust, settings.connect);
        let mut pairs =
            vec![("grant_type", "refresh_token"), ("refresh_token", refresh), ("resource", target.resource.as_str())];
        let scope = tokens.scopes.join(" ");
        if !scope.is_empty() {
            pairs.push(("scope", scope.as_str()));
        }
        self.authorizer.counters(&self.server).refreshes.inc();
        let client = tokens.client.as_ref().unwrap_or(&target.client);
        let result = tokens::request(&agent, &target.token_endpoint, &target.issuer, client, pairs, &tokens.scopes);
        let mut fresh = match result {
            Ok(fresh) => fresh,
            Err(e) => {
                self.authorizer.counters(&self.server).failures.inc();
                return Err(e);
            }
        };
        if fresh.refresh_token.is_none() {
            // Not rotated: the one held stays good.
            fresh.refresh_token = tokens.refresh_token.clone();
        }
        if let Ok(store) = self.authorizer.store() {
            let value = serde_json::to_value(&fresh).unwrap_or(Value::Null);
            if let Err(e) = store.put(&token_record(user, &self.server), Some(&value)) {
                log::error!("OAuth: {e}: a refreshed token for `{}` is kept in memory only", self.server);
            }
        }
        Ok(fresh)
    }

    fn forget_record(&self, user: &User) {
        if let Ok(store) = self.authorizer.store()
            && let Err(e) = store.put(&token_record(user, &self.server), None)
        {
            log::error!("OAuth: {e}");
        }
    }

    /// The server refused the request with `status` and `challenge` (its
    /// `WWW-Authenticate`), after `attempt` earlier refusals; `sent`: the
    /// token it refused. `Ok`: send it again (the token was refreshed, once).
    /// Else the link to sign in (again, or with more scopes: step-up), or
    /// why not.
    pub(crate) fn refused(
        &self,
        user: &User,
        sent: Option<&str>,
        attempt: usize,
        status: u16,
        challenge: Option<&str>,
    ) -> Result<(), DownstreamError> {
        let challenge = challenge.and_then(parse_challenge).unwrap_or_default();
        if self.oauth.token_exchange {
            self.authorizer.exchanged.lock().remove(&(user_key(user), self.server.clone()));
            return if attempt < RETRIES {
                Ok(())
            } else {
                Err(self.oauth_error(format!(
                    "it refused the token exchanged for the user (HTTP {status}{})",
                    challenge.error.map(|e| format!(", {e}")).unwrap_or_default()
                )))
            };
        }
        let slot = self.authorizer.slot(user, &self.server);
        let held = slot.state.lock().tokens.clone();
        if status == 403 && challenge.error.as_deref() == Some("insufficient_scope") {
            let needed = challenge.scopes();
            let mut scopes = held.as_ref().map(|t| t.scopes.clone()).unwrap_or_default();
            if needed.iter().all(|s| scopes.contains(s)) {
                self.authorizer.counters(&self.server).failures.inc();
                return Err(self.oauth_error(format!(
                    "it still answers insufficient_scope (it asks for `{}`) to a token with scopes `{}`",
                    needed.join(" "),
                    scopes.join(" ")
                )));
            }
            for scope in needed {
                if !scopes.contains(&scope) {
                    scopes.push(scope);
                }
            }
            return Err(self.sign_in_with(
                user,
                &scopes,
                "needs more access than you gave it: sign in again to grant it",
                Some(&challenge),
            ));
        }
        if let Some(sent) = sent {
            // Looked at and marked under the slot's lock: another request may have refreshed
            // the token since this one was sent, or be refreshing it now.
            let mut st = slot.state.lock();
            let refreshable = attempt < RETRIES;
            let refreshing = st.refreshing;
            match &mut st.tokens {
                // Refreshed meanwhile (or refreshing): the request goes again with the new one.
                Some(tokens) if tokens.access_token != sent || refreshing => {
                    drop(st);
                    return if refreshable {
                        self.bearer(user).map(|_| ())
                    } else {
                        Err(self.oauth_error("it refused the user's token again after a refresh"))
                    };
                }
                // Revoked or expired early: one refresh, then the request again.
                Some(tokens) if refreshable && tokens.refresh_token.is_some() => {
                    tokens.expires_at = Some(0);
                    drop(st);
                    return match self.bearer(user) {
                        Ok(Some(_)) => Ok(()),
                        Ok(None) => Err(self.sign_in_with(user, &[], "needs you to sign in", Some(&challenge))),
                        Err(e) => Err(e),
                    };
                }
                Some(_) => {
                    st.tokens = None;
                    st.charge = None;
                    drop(st);
                    self.forget_record(user);
                }
                None => {}
            }
        }
        let scopes = held.map(|t| t.scopes).unwrap_or_default();
        let why = if sent.is_some() {
            "refused your token: sign in again"
        } else {
            "needs you to sign in before it can be used"
        };
        Err(self.sign_in_with(user, &scopes, why, Some(&challenge)))
    }

    /// `mcpgate login`: the link for `user` to sign in now, or `None` when
    /// the user holds a token already.
    pub(crate) fn link(&self, user: &User) -> Result<Option<SignIn>, DownstreamError> {
        if self.authorizer.slot(user, &self.server).state.lock().tokens.is_some() {
            return Ok(None);
        }
        match self.sign_in_as(user, &[], "needs you to sign in", None, true) {
            DownstreamError::SignIn(sign_in) => Ok(Some(*sign_in)),
            other => Err(other),
        }
    }

    fn sign_in(&self, user: &User, scopes: &[String], why: &str) -> DownstreamError {
        self.sign_in_with(user, scopes, why, None)
    }

    /// The link for `user` to sign in (a sign-in waiting, or a new one),
    /// once discovery found where; else why not.
    fn sign_in_with(
        &self,
        user: &User,
        scopes: &[String],
        why: &str,
        challenge: Option<&Challenge>,
    ) -> DownstreamError {
        self.sign_in_as(user, scopes, why, challenge, false)
    }

    fn sign_in_as(
        &self,
        user: &User,
        scopes: &[String],
        why: &str,
        challenge: Option<&Challenge>,
        paste_only: bool,
    ) -> DownstreamError {
        let target = match self.target(challenge) {
            Ok(target) => target,
            Err(e) => return e,
        };
        if let Err(e) = self.authorizer.store() {
            return self.oauth_error(format!("its tokens cannot be kept: {e}"));
        }
        let mut wanted: Vec<String> = target.scopes.clone();
        for scope in scopes {
            if !wanted.contains(scope) {
                wanted.push(scope.clone());
            }
        }
        let settings = self.authorizer.settings();
        let id = match self.authorizer.flows.lock().pending(
            *user,
            &self.server,
            &wanted,
            settings.client.link_timeout,
            paste_only,
        ) {
            Ok(id) => id,
            Err(why) => return self.oauth_error(why),
        };
        let url = settings.client.connect_url(&id);
        DownstreamError::SignIn(Box::new(SignIn {
            server: self.server.clone(),
            message: format!(
                "Server `{}` ({}) {why}. Open {url} to sign in at {}",
                self.server, self.url, target.issuer
            ),
            elicitation_id: id,
            url,
        }))
    }

    /// The cache key of this server's discovery: its name and URL.
    fn key(&self) -> String {
        format!("{}\n{}", self.server, self.url)
    }

    /// What discovery found, if it did and it is fresh.
    fn known(&self) -> Option<Arc<Target>> {
        match self.authorizer.targets.lock().get(&self.key()) {
            Some(Discovered::Known(target, at)) if at.elapsed() < KNOWN_FOR => Some(target.clone()),
            _ => None,
        }
    }

    /// Where this server's users sign in: found once (from `challenge`,
    /// else the well-known URIs), then kept an hour; a failure is kept 10 s.
    pub(super) fn target(&self, challenge: Option<&Challenge>) -> Result<Arc<Target>, DownstreamError> {
        match self.authorizer.targets.lock().get(&self.key()) {
            Some(Discovered::Known(target, at)) if at.elapsed() < KNOWN_FOR => return Ok(target.clone()),
            Some(Discovered::Failed(why, at)) if at.elapsed() < FAILED_FOR => return Err(self.oauth_error(why)),
            _ => {}
        }
        let found = self.discover(challenge);
        let entry = match &found {
            Ok(target) => Discovered::Known(target.clone(), Instant::now()),
            Err(why) => {
                self.authorizer.counters(&self.server).failures.inc();
                log::warn!("OAuth: server `{}`: {why}", self.server);
                Discovered::Failed(why.clone(), Instant::now())
            }
        };
        self.authorizer.targets.lock().insert(self.key(), entry);
        found.map_err(|why| self.oauth_error(why))
    }

    fn discover(&self, challenge: Option<&Challenge>) -> Result<Arc<Target>, String> {
        let settings = self.authorizer.settings();
        let agent = fetch::agent(&self.trust, settings.connect);
        let from_challenge = challenge.and_then(|c| c.resource_metadata.as_deref());
        let (issuer, resource, mut scopes) = match &self.oauth.authorization_server {
            Some(issuer) => {
                let resource = self.oauth.resource.clone().unwrap_or_else(|| self.url.clone());
                (issuer.clone(), resource, Vec::new())
            }
            None => {
                let prm = discovery::protected_resource(&agent, &self.url, from_challenge)?;
                let issuer = prm.authorization_servers.first().cloned().ok_or_else(|| {
                    format!("its protected-resource metadata ({}) names no authorization server", prm.url)
                })?;
                (issuer, self.oauth.resource.clone().unwrap_or(prm.resource), prm.scopes_supported)
            }
        };
        let metadata = discovery::authorization_server(&agent, &issuer)?;
        if let Some(from) = challenge.map(Challenge::scopes).filter(|s| !s.is_empty()) {
            scopes = from;
        }
        if !self.oauth.scopes.is_empty() {
            scopes = self.oauth.scopes.clone();
        }
        let given = register::Given {
            client_id: self.oauth.client_id.as_deref(),
            client_secret: self.oauth.client_secret.as_deref(),
            metadata_url: self.oauth.client_metadata_url.as_deref(),
        };
        let client = self.authorizer.client_at(&agent, &metadata, &given, &settings.client, &scopes)?;
        log::info!(
            "OAuth: server `{}` signs users in at {} (resource {resource}, client `{}`, {})",
            self.server,
            metadata.issuer,
            client.client_id,
            client.how
        );
        Ok(Arc::new(Target {
            issuer: metadata.issuer,
            authorization_endpoint: metadata.authorization_endpoint,
            token_endpoint: metadata.token_endpoint,
            sends_iss: metadata.sends_iss,
            client,
            resource,
            scopes,
            trust: self.trust.clone(),
        }))
    }

    /// A token of this server's audience for `user`, by exchange (RFC 8693)
    /// of the user's own token: kept until it expires.
    fn exchanged(&self, user: &User) -> Result<String, DownstreamError> {
        let key = (user_key(user), self.server.clone());
        let now = crate::runtime::clock::unix_now();
        let (subject, subject_hash) = {
            let subjects = self.authorizer.subjects.lock();
            let subject = subjects.get(&key.0).filter(|s| s.expires > now).ok_or_else(|| {
                self.oauth_error(
                    "it takes the user's own token (of auth.oauth) in exchange (token_exchange), and this user has \
                     presented none that is still good",
                )
            })?;
            (subject.token.clone(), crate::runtime::sha256::digest(subject.token.as_bytes()))
        };
        // Good for a while yet (as a refresh is made within a quarter of a token's life of its end).
        if let Some(held) = self.authorizer.exchanged.lock().get(&key)
            && held.subject == subject_hash
            && now + (held.expires.saturating_sub(held.obtained) / 4).min(60) < held.expires
        {
            return Ok(held.token.clone());
        }
        let settings = self.authorizer.settings();
        let issuer = match (&self.oauth.authorization_server, &settings.inbound) {
            (Some(issuer), _) => issuer.clone(),
            (None, Some(inbound)) => inbound.issuer.clone(),
            (None, None) => return Err(self.oauth_error("token_exchange needs auth.oauth or authorization_server")),
        };
        let agent = fetch::agent(&self.trust, settings.connect);
        let metadata = discovery::authorization_server(&agent, &issuer).map_err(|e| self.oauth_error(e))?;
        let client = Client {
            client_id: self.oauth.client_id.clone().unwrap_or_default(),
            client_secret: self.oauth.client_secret.clone(),
            auth_method: if self.oauth.client_secret.is_some() { "client_secret_basic".into() } else { "none".into() },
            redirect_uri: String::new(),
            how: "configured".into(),
        };
        let resource = self.oauth.resource.clone().unwrap_or_else(|| self.url.clone());
        let scope = self.oauth.scopes.join(" ");
        let mut pairs = vec![
            ("grant_type", "urn:ietf:params:oauth:grant-type:token-exchange"),
            ("subject_token", subject.as_str()),
            ("subject_token_type", "urn:ietf:params:oauth:token-type:access_token"),
            ("requested_token_type", "urn:ietf:params:oauth:token-type:access_token"),
            ("resource", resource.as_str()),
        ];
        if let Some(audience) = &self.oauth.audience {
            pairs.push(("audience", audience.as_str()));
        }
        if !scope.is_empty() {
            pairs.push(("scope", scope.as_str()));
        }
        let tokens =
            tokens::request(&agent, &metadata.token_endpoint, &metadata.issuer, &client, pairs, &self.oauth.scopes)
                .map_err(|e| {
                    self.authorizer.counters(&self.server).failures.inc();
                    self.oauth_error(format!("the token exchange at {} failed: {e}", metadata.issuer))
                })?;
        self.authorizer.counters(&self.server).signins.inc();
        let expires = tokens.expires_at.unwrap_or(now + 300);
        let mut exchanged = self.authorizer.exchanged.lock();
        if exchanged.len() < 4096 || exchanged.contains_key(&key) {
            let token = tokens.access_token.clone();
            exchanged.insert(key, Exchanged { token, expires, obtained: now, subject: subject_hash });
        }
        Ok(tokens.access_token)
    }
}

/// A downstream session's user at a server with `oauth`: whose token its
/// requests carry.
#[derive(Clone, Debug)]
pub(crate) struct Authed {
    pub(crate) auth: Arc<ServerAuth>,
    pub(crate) user: User,
}

/// Runs `send` with the user's bearer token (none without `authed`): when
/// the server refuses it (401, or 403 `insufficient_scope`), once more after
/// a refresh; else the link to sign in, or why not. Nothing loops: at most
/// [`RETRIES`] sends more.
pub(crate) fn with_bearer<T>(
    authed: Option<&Authed>,
    mut send: impl FnMut(Option<&str>) -> Result<T, DownstreamError>,
) -> Result<T, DownstreamError> {
    let Some(a) = authed else { return send(None) };
    let mut attempt = 0;
    loop {
        let bearer = a.auth.bearer(&a.user)?;
        match send(bearer.as_deref()) {
            Err(DownstreamError::Unauthorized { status, challenge }) => {
                a.auth.refused(&a.user, bearer.as_deref(), attempt, status, challenge.as_deref())?;
                attempt += 1;
                if attempt > RETRIES {
                    return Err(a.auth.oauth_error("it refused the user's token again after a refresh"));
                }
            }
            other => return other,
        }
    }
}

/// The bearer token to send for `authed` now, if the user holds one
/// (refreshed when due), without starting a sign-in: for a stream that
/// reconnects (a refusal is seen on its next request) and a session's
/// `DELETE`, neither of which any user waits for.
pub(crate) fn current_bearer(authed: Option<&Authed>) -> Option<String> {
    let a = authed?;
    if !a.auth.oauth.token_exchange && a.auth.authorizer.slot(&a.user, &a.auth.server).state.lock().tokens.is_none() {
        return None;
    }
    a.auth.bearer(&a.user).ok().flatten()
}
