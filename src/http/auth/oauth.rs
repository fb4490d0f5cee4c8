//! One issuer's access tokens, checked: a JWT against the issuer's JWKS
//! (`jwt`, `jwks`), an opaque token by introspection (`introspection`).
//! A token that passed is kept by its SHA-256, until its `exp` (bounded in
//! number), so the signature of a token is checked once, not per request.
//!
//! What a token grants is a [`Grant`]: its subject, its scopes, the servers
//! its scopes leave out, and the digest of all three that its sessions are
//! bound to.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::claims::{Claims, Grant, Rejection};
use super::introspection::Introspector;
use super::jwks::Jwks;
use super::{idp, jwt};
use crate::config::OAuthConfig;
use crate::runtime::{clock, sha256};
use crate::stats::Stats;

/// Tokens kept as checked; past it, the expired go first, then half the rest.
const MAX_CACHED: usize = 4096;

/// The key a checked token is kept under: its SHA-256, by ring (several
/// times faster than `runtime::sha256` on a token of a kilobyte, and it
/// runs on every request).
fn token_digest(token: &str) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, token.as_bytes()).as_ref());
    out
}

/// The checker of one `auth.oauth` configuration, with its caches.
pub(crate) struct OAuth {
    pub(crate) config: Arc<OAuthConfig>,
    jwks: Jwks,
    introspector: Option<Introspector>,
    /// Guards the checked tokens by SHA-256; never held across I/O.
    checked: Mutex<HashMap<[u8; 32], Arc<Grant>>>,
}

impl OAuth {
    pub(crate) fn new(config: Arc<OAuthConfig>) -> OAuth {
        super::crypto::install();
        let agent = idp::agent(&config);
        let introspector = config.introspection.clone().map(|i| Introspector::new(i, agent.clone()));
        OAuth {
            jwks: Jwks::new(&config.issuer, config.jwks_uri.as_deref(), agent),
            introspector,
            config,
            checked: Mutex::new(HashMap::new()),
        }
    }

    /// What `token` grants, from the cache or checked now.
    pub(crate) fn check(&self, token: &str, stats: &Stats) -> Result<Arc<Grant>, Rejection> {
        let digest = token_digest(token);
        let now = clock::unix_now();
        let leeway = self.config.leeway.as_secs();
        if let Some(grant) = self.checked.lock().get(&digest).cloned()
            && now <= grant.expires.saturating_add(leeway)
        {
            return Ok(grant);
        }
        let claims = if jwt::looks_like_jwt(token) {
            jwt::check(token, &self.config, &self.jwks, stats, now)?
        } else {
            match &self.introspector {
                Some(introspector) => introspector.check(token, &self.config, stats, now)?,
                None => {
                    return Err(Rejection::Inactive(
                        "the token is not a JWT, and no auth.oauth.introspection is configured for opaque tokens"
                            .into(),
                    ));
                }
            }
        };
        stats.auth_oauth_checked.inc();
        let grant = Arc::new(self.grant(claims));
        self.remember(digest, grant.clone(), now);
        Ok(grant)
    }

    fn grant(&self, claims: Claims) -> Grant {
        let hidden: Vec<String> = self
            .config
            .server_scopes
            .iter()
            .filter(|(_, scope)| !claims.scopes.contains(scope))
            .map(|(server, _)| server.clone())
            .collect();
        // Newlines cannot be in an issuer URL; a subject's are escaped by JSON.
        let bound = serde_json::json!([claims.issuer, claims.subject, hidden]).to_string();
        let principal = sha256::digest(format!("oauth\n{bound}").as_bytes());
        let user =
            sha256::digest(format!("oauth-user\n{}", serde_json::json!([claims.issuer, claims.subject])).as_bytes());
        Grant { subject: claims.subject, scopes: claims.scopes, hidden, principal, user, expires: claims.expires }
    }

    fn remember(&self, digest: [u8; 32], grant: Arc<Grant>, now: u64) {
        let leeway = self.config.leeway.as_secs();
        let mut checked = self.checked.lock();
        if checked.len() >= MAX_CACHED {
            checked.retain(|_, g| now <= g.expires.saturating_add(leeway));
        }
        if checked.len() >= MAX_CACHED {
            let drop: Vec<[u8; 32]> = checked.keys().take(MAX_CACHED / 2).copied().collect();
            drop.iter().for_each(|k| {
                checked.remove(k);
            });
        }
        checked.insert(digest, grant);
    }
}
