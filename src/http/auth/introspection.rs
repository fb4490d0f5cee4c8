//! Opaque access tokens, checked by the issuer (RFC 7662): a form `POST` of
//! the token to `auth.oauth.introspection.url`, as mcpgate's client with
//! HTTP Basic. The answer must say `active`, and its `iss` (when given),
//! `aud` (RFC 8707: required) and `exp` must fit as a JWT's would. An
//! answer is kept for at most [`KEEP`] (never past `exp`): a revoked token
//! is refused within that time.

use std::time::Duration;

use base64::Engine;
use serde_json::Value;
use ureq::Agent;

use super::claims::{Claims, Rejection};
use super::idp;
use super::jwt;
use crate::config::{Introspection, OAuthConfig};
use crate::stats::Stats;

/// The longest an introspection answer is used.
pub(crate) const KEEP: Duration = Duration::from_secs(60);

pub(crate) struct Introspector {
    config: Introspection,
    /// `Basic` credentials: client id and secret, form-encoded then base64.
    basic: String,
    agent: Agent,
}

impl Introspector {
    pub(crate) fn new(config: Introspection, agent: Agent) -> Introspector {
        let pair = format!("{}:{}", form_encode(&config.client_id), form_encode(&config.client_secret));
        let basic = base64::engine::general_purpose::STANDARD.encode(pair);
        Introspector { config, basic, agent }
    }

    /// What the issuer says of `token`: its claims, kept by the caller for
    /// at most [`KEEP`] (the `expires` returned is capped so).
    pub(crate) fn check(&self, token: &str, oauth: &OAuthConfig, stats: &Stats, now: u64) -> Result<Claims, Rejection> {
        stats.auth_introspections.inc();
        let form = format!("token={}&token_type_hint=access_token", form_encode(token));
        let answer = idp::post_form(&self.agent, &self.config.url, &self.basic, &form).map_err(|why| {
            crate::limited!(
                error,
                "OAuth: introspection failed: {why}; opaque tokens are refused (503) until it works"
            );
            Rejection::Unavailable(format!("introspection: {why}"))
        })?;
        if answer["active"] != Value::Bool(true) {
            return Err(Rejection::Inactive("the issuer says the token is not active (introspection)".into()));
        }
        let Some(claims) = answer.as_object() else {
            return Err(Rejection::Malformed("the introspection answer is not a JSON object".into()));
        };
        if let Some(issuer) = claims.get("iss").and_then(Value::as_str)
            && issuer != oauth.issuer
        {
            return Err(Rejection::Issuer(format!(
                "introspection names issuer `{}`, not auth.oauth.issuer `{}`",
                jwt::printable(issuer),
                oauth.issuer
            )));
        }
        jwt::audience(claims.get("aud"), oauth)?;
        let leeway = oauth.leeway.as_secs();
        let expires = claims.get("exp").and_then(Value::as_u64);
        if let Some(exp) = expires
            && now > exp.saturating_add(leeway)
        {
            return Err(Rejection::Expired(format!("it expired {} s ago (introspection)", now - exp)));
        }
        let subject = claims
            .get("sub")
            .or_else(|| claims.get("client_id"))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| Rejection::Malformed("the introspection answer has neither `sub` nor `client_id`".into()))?;
        // The cache keeps a token while `now <= expires + leeway`: until its
        // `exp` as a JWT, but never past KEEP from now.
        let keep_until = (now + KEEP.as_secs()).saturating_sub(leeway);
        Ok(Claims {
            issuer: oauth.issuer.clone(),
            subject: subject.to_string(),
            scopes: jwt::scopes(claims),
            expires: expires.unwrap_or(u64::MAX).min(keep_until),
        })
    }
}

/// `application/x-www-form-urlencoded`: unreserved characters as they are, the rest `%XX`.
fn form_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn forms_are_percent_encoded() {
        assert_eq!(super::form_encode("a b+c/=é"), "a%20b%2Bc%2F%3D%C3%A9");
        assert_eq!(super::form_encode("A-z_0.9~"), "A-z_0.9~");
    }
}
