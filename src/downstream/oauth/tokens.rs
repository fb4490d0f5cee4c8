//! The token endpoint (RFC 6749 §3.2): a code for tokens (with the PKCE
//! verifier and the `resource`), a refresh token for new ones, and the
//! client's authentication; the answer read into [`Tokens`], or why not in
//! words that tell a user's fault (`invalid_grant`: sign in again) from the
//! server's (it is down, slow or answers 5xx: try later).

use base64::Engine;
use serde_json::Value;
use ureq::Agent;

use super::fetch::{self, printable};
use super::register::Client;

/// What a user holds for one server. Never logged: its `Debug` hides the tokens.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Tokens {
    pub(crate) access_token: String,
    #[serde(default)]
    pub(crate) refresh_token: Option<String>,
    /// Unix seconds; `None` when the server did not say.
    #[serde(default)]
    pub(crate) expires_at: Option<u64>,
    /// Unix seconds.
    pub(crate) obtained_at: u64,
    /// What was granted (or asked for, when the answer does not say).
    #[serde(default)]
    pub(crate) scopes: Vec<String>,
    /// The issuer that granted them: tokens of another are not used.
    pub(crate) issuer: String,
    /// The client they were granted to: their refresh goes as it (a
    /// registration made since, for another redirect URI, would not do).
    #[serde(default)]
    pub(crate) client: Option<Client>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tokens(access ***, refresh {}, expires_at {:?}, scopes {:?}, issuer {})",
            if self.refresh_token.is_some() { "***" } else { "none" },
            self.expires_at,
            self.scopes,
            self.issuer
        )
    }
}

impl Tokens {
    /// Whether it is time to refresh at `now`: within a quarter of its
    /// life (at most 60 s) of its expiry.
    pub(crate) fn stale(&self, now: u64) -> bool {
        let Some(expires) = self.expires_at else { return false };
        let life = expires.saturating_sub(self.obtained_at);
        now + (life / 4).min(60) >= expires
    }

    /// Whether it has expired at `now`.
    pub(crate) fn expired(&self, now: u64) -> bool {
        self.expires_at.is_some_and(|e| now >= e)
    }

    /// Bytes it holds, for `max_memory_mb`.
    pub(crate) fn size(&self) -> usize {
        256 + self.access_token.len()
            + self.refresh_token.as_ref().map_or(0, String::len)
            + self.issuer.len()
            + self.scopes.iter().map(|s| s.len() + 24).sum::<usize>()
    }
}

/// Why the token endpoint gave no tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TokenError {
    /// `invalid_grant`: the code or refresh token is no good any more; the user signs in again.
    InvalidGrant(String),
    /// Another refusal (`invalid_client`, `invalid_target`, ...): said as it came.
    Refused(String),
    /// It could not be asked, or answered 5xx or nonsense: try later.
    Unavailable(String),
}

impl std::fmt::Display for TokenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenError::InvalidGrant(why) | TokenError::Refused(why) | TokenError::Unavailable(why) => f.write_str(why),
        }
    }
}

/// A token request, as `client`, to `token_endpoint`; `issuer` is who grants.
pub(crate) fn request<'a>(
    agent: &Agent,
    token_endpoint: &str,
    issuer: &str,
    client: &'a Client,
    mut pairs: Vec<(&'a str, &'a str)>,
    asked_scopes: &[String],
) -> Result<Tokens, TokenError> {
    let basic = match (&client.client_secret, client.auth_method.as_str()) {
        (Some(secret), "client_secret_post") => {
            pairs.push(("client_id", &client.client_id));
            pairs.push(("client_secret", secret));
            None
        }
        (Some(secret), _) => Some(base64::engine::general_purpose::STANDARD.encode(format!(
            "{}:{}",
            fetch::encode(&client.client_id),
            fetch::encode(secret)
        ))),
        (None, _) => {
            pairs.push(("client_id", &client.client_id));
            None
        }
    };
    let answer = fetch::post_form(agent, token_endpoint, &fetch::form(&pairs), basic.as_deref())
        .map_err(TokenError::Unavailable)?;
    let status = answer.status;
    let said = |json: &Value| {
        let error = json["error"].as_str().unwrap_or("an error");
        match json["error_description"].as_str() {
            Some(d) => format!("`{}` ({})", printable(error), printable(d)),
            None => format!("`{}`", printable(error)),
        }
    };
    match (status, answer.json) {
        (200, Ok(json)) => tokens_of(&json, issuer, asked_scopes)
            .map(|tokens| Tokens { client: Some(client.clone()), ..tokens })
            .map_err(|why| TokenError::Unavailable(format!("the token endpoint {token_endpoint}: {why}"))),
        (500..=599, _) => {
            Err(TokenError::Unavailable(format!("the token endpoint {token_endpoint} answered HTTP {status}")))
        }
        (_, Ok(json)) if json["error"] == "invalid_grant" => Err(TokenError::InvalidGrant(format!(
            "the token endpoint {token_endpoint} refused the grant: {}",
            said(&json)
        ))),
        (_, Ok(json)) if json["error"].is_string() => Err(TokenError::Refused(format!(
            "the token endpoint {token_endpoint} answered HTTP {status}: {}",
            said(&json)
        ))),
        (_, Ok(_)) => {
            Err(TokenError::Unavailable(format!("the token endpoint {token_endpoint} answered HTTP {status}")))
        }
        (_, Err(why)) => Err(TokenError::Unavailable(why)),
    }
}

/// The tokens of a 200 answer.
fn tokens_of(json: &Value, issuer: &str, asked: &[String]) -> Result<Tokens, String> {
    let access_token = json["access_token"].as_str().filter(|t| !t.is_empty()).ok_or("no access_token")?;
    if !access_token.bytes().all(|b| (0x21..=0x7e).contains(&b)) || access_token.len() > 16 * 1024 {
        return Err("an access_token that cannot go in a header".into());
    }
    let kind = json["token_type"].as_str().unwrap_or("");
    if !kind.eq_ignore_ascii_case("bearer") && !kind.eq_ignore_ascii_case("n_a") {
        return Err(format!("token_type `{}`, not Bearer", printable(kind)));
    }
    let now = crate::runtime::clock::unix_now();
    let scopes = match json["scope"].as_str() {
        Some(scope) => scope.split_whitespace().map(str::to_string).collect(),
        None => asked.to_vec(),
    };
    Ok(Tokens {
        access_token: access_token.to_string(),
        refresh_token: json["refresh_token"].as_str().filter(|t| !t.is_empty()).map(str::to_string),
        expires_at: json["expires_in"].as_u64().map(|s| now + s),
        obtained_at: now,
        scopes,
        issuer: issuer.to_string(),
        client: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn answers_become_tokens_and_their_debug_hides_them() {
        let t = tokens_of(
            &json!({"access_token": "at-1", "token_type": "bearer", "expires_in": 100, "refresh_token": "rt-1", "scope": "a b"}),
            "https://as",
            &[],
        )
        .unwrap();
        assert_eq!(t.scopes, ["a", "b"]);
        assert!(!format!("{t:?}").contains("at-1") && !format!("{t:?}").contains("rt-1"));
        assert!(tokens_of(&json!({"access_token": "x", "token_type": "mac"}), "i", &[]).is_err());
        assert!(tokens_of(&json!({"access_token": "a b", "token_type": "Bearer"}), "i", &[]).is_err());
    }

    #[test]
    fn a_token_is_refreshed_within_a_quarter_of_its_life_of_expiry() {
        let t = Tokens {
            access_token: "a".into(),
            refresh_token: None,
            expires_at: Some(1_000 + 40),
            obtained_at: 1_000,
            scopes: vec![],
            issuer: "i".into(),
            client: None,
        };
        assert!(!t.stale(1_020));
        assert!(t.stale(1_031));
        assert!(!t.expired(1_039) && t.expired(1_040));
    }
}
