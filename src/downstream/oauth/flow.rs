//! The sign-ins waiting for their user: one per user and server, named by
//! its elicitation id (the link a client shows), bound to that user, that
//! server and an expiry. Each authorization attempt it starts (at the
//! user's authorization server, or at mcpgate's own issuer to learn who
//! opened the link) has a `state` of 256 random bits, a PKCE verifier, and
//! a cookie set in the browser that opened the link; a callback must bring
//! all three, and a `state` is taken once: a replay, or one from another
//! browser, is refused, saying which.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;

use super::target::{Target, User};
use crate::runtime::memory::Charge;
use crate::runtime::secret::constant_time_eq;

/// Sign-ins waiting at once, all users together; past it a call is told to try later.
pub(crate) const MAX_FLOWS: usize = 1024;
/// Used or replaced states remembered, to tell a replay from an unknown state.
const USED: usize = 1024;
/// Sessions told when one sign-in completes.
const MAX_SESSIONS: usize = 8;
/// What one sign-in holds, charged to `max_memory_mb`.
const FLOW_BYTES: usize = 2048;

/// What an attempt is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// At mcpgate's own issuer (`auth.oauth`): who opened the link.
    Identity,
    /// At the server's authorization server: the user's tokens.
    Authorize,
}

/// One authorization in progress: what its callback must match.
pub(crate) struct Attempt {
    pub(crate) purpose: Purpose,
    state: String,
    pub(crate) verifier: String,
    /// SHA-256 of the cookie set in the browser that started it.
    cookie: [u8; 32],
    pub(crate) target: Arc<Target>,
}

/// A sign-in waiting for its user.
pub(crate) struct Flow {
    pub(crate) id: String,
    pub(crate) user: User,
    pub(crate) server: String,
    pub(crate) scopes: Vec<String>,
    pub(crate) expires: Instant,
    /// Client sessions given its link: told when it completes.
    pub(crate) sessions: Vec<String>,
    /// The browser that opened the link proved it is `user`.
    pub(crate) identified: bool,
    pub(crate) attempt: Option<Attempt>,
    /// How it ended, once it did.
    pub(crate) done: Option<Result<(), String>>,
    /// Started by `mcpgate login`, whose user pastes the callback's address
    /// into it: a browser's callback does not complete it.
    pub(crate) paste_only: bool,
    _charge: Charge,
}

/// Why a callback is refused, in words for the page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    NoState,
    UnknownState,
    UsedState,
    Expired,
    OtherBrowser,
    /// A sign-in of `mcpgate login`, which completes it from the pasted address.
    PasteOnly,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::NoState => {
                write!(f, "this callback carries no `state`: it did not come from a sign-in mcpgate started")
            }
            Refusal::UnknownState => write!(
                f,
                "this callback's `state` is unknown: it did not come from a sign-in mcpgate started (or mcpgate restarted since); call the tool again for a new link"
            ),
            Refusal::UsedState => write!(
                f,
                "this callback's `state` was used already: a sign-in completes once; call the tool again if you need a new one"
            ),
            Refusal::Expired => write!(f, "this sign-in link expired: call the tool again for a new one"),
            Refusal::OtherBrowser => write!(
                f,
                "this callback comes from another browser than the one that opened the sign-in link: refused, so that nobody can attach their account to another user's sign-in"
            ),
            Refusal::PasteOnly => write!(
                f,
                "this sign-in was started by `mcpgate login`: copy the address of this page (it starts with the callback's) and paste it where `mcpgate login` asks for it"
            ),
        }
    }
}

/// 256 random bits, base64url.
pub(crate) fn random_text() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    crate::runtime::sys::random(&mut bytes).map_err(|e| format!("no random bytes: {e}"))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// PKCE S256's challenge for `verifier` (RFC 7636 §4.2).
pub(crate) fn challenge_of(verifier: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, verifier.as_bytes());
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest.as_ref())
}

fn digest(text: &str) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// The authorization request's URL (RFC 6749 §4.1.1 with PKCE and `resource`).
pub(crate) fn authorize_url(target: &Target, state: &str, challenge: &str) -> String {
    use super::fetch::encode;
    let client = &target.client;
    let mut pairs = vec![
        ("response_type", "code"),
        ("client_id", client.client_id.as_str()),
        ("redirect_uri", client.redirect_uri.as_str()),
        ("state", state),
        ("code_challenge", challenge),
        ("code_challenge_method", "S256"),
        ("resource", target.resource.as_str()),
    ];
    let scope = target.scopes.join(" ");
    if !scope.is_empty() {
        pairs.push(("scope", scope.as_str()));
    }
    let query: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={}", encode(v))).collect();
    let sep = if target.authorization_endpoint.contains('?') { '&' } else { '?' };
    format!("{}{sep}{}", target.authorization_endpoint, query.join("&"))
}

/// Every sign-in waiting, by elicitation id, and their attempts by state.
#[derive(Default)]
pub(crate) struct Flows {
    by_id: HashMap<String, Flow>,
    by_state: HashMap<String, String>,
    used: VecDeque<String>,
}

impl Flows {
    fn forget_state(&mut self, state: &str) {
        if self.by_state.remove(state).is_some() {
            if self.used.len() >= USED {
                self.used.pop_front();
            }
            self.used.push_back(state.to_string());
        }
    }

    /// Drops the sign-ins past their expiry.
    pub(crate) fn expire(&mut self, now: Instant) {
        let gone: Vec<String> = self.by_id.values().filter(|f| f.expires <= now).map(|f| f.id.clone()).collect();
        for id in gone {
            if let Some(flow) = self.by_id.remove(&id)
                && let Some(attempt) = flow.attempt
            {
                self.forget_state(&attempt.state);
            }
        }
    }

    /// The sign-in of `user` at `server` waiting now, its scopes widened to
    /// `scopes`, or a new one good for `timeout`: its id.
    pub(crate) fn pending(
        &mut self,
        user: User,
        server: &str,
        scopes: &[String],
        timeout: Duration,
        paste_only: bool,
    ) -> Result<String, String> {
        let now = Instant::now();
        self.expire(now);
        if let Some(flow) = self
            .by_id
            .values_mut()
            .find(|f| f.user == user && f.server == server && f.done.is_none() && f.paste_only == paste_only)
        {
            for scope in scopes {
                if !flow.scopes.contains(scope) {
                    flow.scopes.push(scope.clone());
                }
            }
            return Ok(flow.id.clone());
        }
        if self.by_id.len() >= MAX_FLOWS {
            return Err(format!("{MAX_FLOWS} sign-ins are waiting for their users: try again in a few minutes"));
        }
        let charge = Charge::new(FLOW_BYTES)
            .ok_or("mcpgate holds its limit of max_memory_mb: no room for one more sign-in; try again later")?;
        let id = {
            let mut bytes = [0u8; 16];
            crate::runtime::sys::random(&mut bytes).map_err(|e| format!("no random bytes: {e}"))?;
            crate::runtime::sha256::to_hex(&bytes)
        };
        self.by_id.insert(
            id.clone(),
            Flow {
                id: id.clone(),
                user,
                server: server.to_string(),
                scopes: scopes.to_vec(),
                expires: now + timeout,
                sessions: Vec::new(),
                // `mcpgate login`'s user proved who it is with its token.
                identified: paste_only,
                attempt: None,
                done: None,
                paste_only,
                _charge: charge,
            },
        );
        Ok(id)
    }

    pub(crate) fn get(&self, id: &str) -> Option<&Flow> {
        self.by_id.get(id).filter(|f| f.expires > Instant::now())
    }

    pub(crate) fn get_mut(&mut self, id: &str) -> Option<&mut Flow> {
        self.by_id.get_mut(id).filter(|f| f.expires > Instant::now())
    }

    /// Remembers that `session` was given the link of `id`.
    pub(crate) fn given_to(&mut self, id: &str, session: &str) {
        if let Some(flow) = self.get_mut(id)
            && !flow.sessions.iter().any(|s| s == session)
            && flow.sessions.len() < MAX_SESSIONS
        {
            flow.sessions.push(session.to_string());
        }
    }

    /// Starts an attempt for the sign-in `id` against `target`: its state,
    /// the PKCE challenge, and the cookie for the browser. An earlier
    /// attempt's state stops being good.
    pub(crate) fn begin(
        &mut self,
        id: &str,
        purpose: Purpose,
        target: Arc<Target>,
    ) -> Result<(String, String, String), String> {
        let state = random_text()?;
        let verifier = random_text()?;
        let cookie = random_text()?;
        let Some(flow) = self.get_mut(id) else { return Err(Refusal::Expired.to_string()) };
        if purpose == Purpose::Authorize && !flow.identified {
            return Err("this browser has not shown it is the user the link was made for".into());
        }
        let old = flow.attempt.replace(Attempt {
            purpose,
            state: state.clone(),
            verifier: verifier.clone(),
            cookie: digest(&cookie),
            target,
        });
        if let Some(old) = old {
            self.forget_state(&old.state);
        }
        self.by_state.insert(state.clone(), id.to_string());
        Ok((state, challenge_of(&verifier), cookie))
    }

    /// Takes the attempt a callback's `state` names, once: the browser
    /// must bring its cookie, unless the caller proved it is the flow's
    /// user another way (`proved`: `mcpgate login` with its token).
    pub(crate) fn take(
        &mut self,
        state: Option<&str>,
        cookies: &[&str],
        proved: Option<User>,
    ) -> Result<(String, Attempt), Refusal> {
        let state = state.filter(|s| !s.is_empty()).ok_or(Refusal::NoState)?;
        let Some(id) = self.by_state.get(state).cloned() else {
            return Err(if self.used.iter().any(|u| u == state) { Refusal::UsedState } else { Refusal::UnknownState });
        };
        if proved.is_none() && self.get(&id).is_some_and(|f| f.paste_only) {
            // Left as it is: the pasted address completes it.
            return Err(Refusal::PasteOnly);
        }
        self.forget_state(state);
        let Some(flow) = self.get_mut(&id) else { return Err(Refusal::Expired) };
        let Some(attempt) = flow.attempt.take() else { return Err(Refusal::UnknownState) };
        let browser = cookies.iter().any(|c| constant_time_eq(&digest(c), &attempt.cookie));
        let user = proved.is_some_and(|p| match (p, flow.user) {
            (Some(a), Some(b)) => constant_time_eq(&a, &b),
            (None, None) => true,
            _ => false,
        });
        if !browser && !user {
            return Err(Refusal::OtherBrowser);
        }
        Ok((id, attempt))
    }

    /// The sign-in `id` ended: the sessions to tell.
    pub(crate) fn finish(&mut self, id: &str, outcome: Result<(), String>) -> Vec<String> {
        match self.get_mut(id) {
            Some(flow) => {
                flow.done = Some(outcome);
                flow.identified = flow.paste_only;
                std::mem::take(&mut flow.sessions)
            }
            None => Vec::new(),
        }
    }

    /// Sign-ins waiting now for `server`.
    pub(crate) fn waiting(&self, server: &str) -> u64 {
        let now = Instant::now();
        self.by_id.values().filter(|f| f.server == server && f.done.is_none() && f.expires > now).count() as u64
    }

    /// The ids of the sign-ins of `user` at `server` (to drop at logout).
    pub(crate) fn drop_of(&mut self, user: User, server: &str) {
        let ids: Vec<String> =
            self.by_id.values().filter(|f| f.user == user && f.server == server).map(|f| f.id.clone()).collect();
        for id in ids {
            if let Some(flow) = self.by_id.remove(&id)
                && let Some(attempt) = flow.attempt
            {
                self.forget_state(&attempt.state);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::downstream::oauth::register::Client;

    fn target() -> Arc<Target> {
        Arc::new(Target {
            issuer: "https://as.example.com".into(),
            authorization_endpoint: "https://as.example.com/authorize".into(),
            token_endpoint: "https://as.example.com/token".into(),
            sends_iss: true,
            client: Client {
                client_id: "c".into(),
                client_secret: None,
                auth_method: "none".into(),
                redirect_uri: "http://127.0.0.1:1/oauth/callback".into(),
                how: "registered".into(),
            },
            resource: "https://mcp.example.com/mcp".into(),
            scopes: vec!["read".into()],
            trust: Default::default(),
        })
    }

    #[test]
    fn the_pkce_challenge_is_the_base64url_sha256_of_the_verifier() {
        // Computed apart, with Python's hashlib and base64.
        assert_eq!(
            challenge_of("dBjftJeZ4CVP-mJ92K1uOEHdgnlEW2Zug7rVZyJj9aRPnDM"),
            "OtFvwOG8mdBsJnTDI1X93zAD7NbiRvtI_uEfk1fYQ1M"
        );
        let verifier = random_text().unwrap();
        assert_eq!(verifier.len(), 43, "RFC 7636 §4.1: 43 to 128 characters");
        assert_ne!(verifier, random_text().unwrap());
    }

    #[test]
    fn a_state_is_taken_once_from_the_browser_that_opened_the_link() {
        let alice = Some([1u8; 32]);
        let mut flows = Flows::default();
        let id = flows.pending(alice, "files", &["read".into()], Duration::from_secs(60), false).unwrap();
        assert_eq!(flows.pending(alice, "files", &["write".into()], Duration::from_secs(60), false).unwrap(), id);
        assert_eq!(flows.get(&id).unwrap().scopes, ["read", "write"]);
        assert!(flows.begin(&id, Purpose::Authorize, target()).is_err(), "not identified yet");
        flows.get_mut(&id).unwrap().identified = true;
        let (state, _, cookie) = flows.begin(&id, Purpose::Authorize, target()).unwrap();
        assert_eq!(flows.take(Some(&state), &["another browser"], None).err(), Some(Refusal::OtherBrowser));
        assert_eq!(flows.take(Some(&state), &[&cookie], None).err(), Some(Refusal::UsedState), "once, even refused");
        let (state, _, cookie) = flows.begin(&id, Purpose::Authorize, target()).unwrap();
        let (taken, attempt) = flows.take(Some(&state), &[&cookie], None).unwrap();
        assert_eq!((taken.as_str(), attempt.purpose), (id.as_str(), Purpose::Authorize));
        assert_eq!(flows.take(Some(&state), &[&cookie], None).err(), Some(Refusal::UsedState));
        assert_eq!(flows.take(Some("made-up"), &[], None).err(), Some(Refusal::UnknownState));
        assert_eq!(flows.take(None, &[], None).err(), Some(Refusal::NoState));
    }

    #[test]
    fn the_user_may_complete_without_the_cookie_and_nobody_else() {
        let (alice, bob) = (Some([1u8; 32]), Some([2u8; 32]));
        let mut flows = Flows::default();
        let id = flows.pending(alice, "files", &[], Duration::from_secs(60), false).unwrap();
        flows.get_mut(&id).unwrap().identified = true;
        let (state, _, _) = flows.begin(&id, Purpose::Authorize, target()).unwrap();
        assert_eq!(flows.take(Some(&state), &[], Some(bob)).err(), Some(Refusal::OtherBrowser));
        let (state, _, _) = flows.begin(&id, Purpose::Authorize, target()).unwrap();
        assert!(flows.take(Some(&state), &[], Some(alice)).is_ok());
    }

    #[test]
    fn an_expired_sign_in_is_gone_and_a_new_call_gets_a_new_one() {
        let mut flows = Flows::default();
        let id = flows.pending(None, "files", &[], Duration::from_millis(1), false).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        assert!(flows.get(&id).is_none());
        let again = flows.pending(None, "files", &[], Duration::from_secs(60), false).unwrap();
        assert_ne!(again, id);
        let url = authorize_url(&target(), "st", "ch");
        assert!(url.starts_with("https://as.example.com/authorize?response_type=code&client_id=c&redirect_uri=http%3A%2F%2F127.0.0.1%3A1%2Foauth%2Fcallback&state=st&code_challenge=ch&code_challenge_method=S256&resource=https%3A%2F%2Fmcp.example.com%2Fmcp&scope=read"), "{url}");
    }
}
