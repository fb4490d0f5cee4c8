//! A JWT access token (RFC 9068), checked: its header first, by hand, so
//! that what is refused says why (`alg: none`, HMAC, an algorithm that does
//! not fit the key it names); its signature by jsonwebtoken with the key of
//! the issuer's JWKS; then its claims against the configuration: `iss`
//! exactly, `aud` holding one of `audiences` (RFC 8707), `exp` (required)
//! and `nbf` with the leeway, a `sub`.

use std::collections::HashSet;

use base64::Engine;
use jsonwebtoken::{Algorithm, Validation};
use serde_json::{Map, Value};

use super::claims::{Claims, Rejection};
use super::jwks::{Jwks, KeyError};
use crate::config::OAuthConfig;
use crate::stats::Stats;

/// Whether `token` has the shape of a JWT (three base64url parts, the first
/// a JSON object): the others are opaque tokens, for introspection.
pub(crate) fn looks_like_jwt(token: &str) -> bool {
    let mut parts = token.split('.');
    let (Some(head), Some(_), Some(_), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    decode_part(head).is_some_and(|bytes| bytes.first() == Some(&b'{'))
}

fn decode_part(part: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(part.trim_end_matches('=')).ok()
}

/// The token's claims once its signature and claims check out.
pub(crate) fn check(
    token: &str,
    config: &OAuthConfig,
    jwks: &Jwks,
    stats: &Stats,
    now: u64,
) -> Result<Claims, Rejection> {
    let head = token.split('.').next().and_then(decode_part).ok_or_else(|| malformed("its header is not base64url"))?;
    let head: Map<String, Value> =
        serde_json::from_slice(&head).map_err(|e| malformed(&format!("its header is not a JSON object: {e}")))?;
    let alg_name = head.get("alg").and_then(Value::as_str).ok_or_else(|| malformed("its header has no `alg`"))?;
    let alg = algorithm(alg_name)?;
    let kid = head.get("kid").and_then(Value::as_str);
    let key = jwks.key(kid, alg, stats).map_err(|e| match e {
        KeyError::Unknown(why) => Rejection::UnknownKey(why),
        KeyError::Unavailable(why) => Rejection::Unavailable(format!("the issuer's signing keys: {why}")),
    })?;
    if !key.algorithms.contains(&alg) {
        return Err(Rejection::Algorithm(format!(
            "alg `{alg_name}` does not fit key `{}`, an {} key (for {:?})",
            key.kid.as_deref().unwrap_or("?"),
            key.kind,
            key.algorithms
        )));
    }
    let mut validation = Validation::new(alg);
    validation.algorithms = vec![alg];
    // The claims are checked below, each with its own reason.
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    validation.required_spec_claims = HashSet::new();
    let data =
        jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, &validation).map_err(|e| match e.kind() {
            jsonwebtoken::errors::ErrorKind::InvalidSignature => Rejection::Signature(format!(
                "its signature does not verify with key `{}`",
                key.kid.as_deref().unwrap_or("?")
            )),
            _ => malformed(&e.to_string()),
        })?;
    claims(&data.claims, config, now)
}

/// The algorithm a header names, if mcpgate takes it.
fn algorithm(name: &str) -> Result<Algorithm, Rejection> {
    match name {
        "none" | "None" | "NONE" => Err(Rejection::Algorithm("alg `none` is refused: a token must be signed".into())),
        "HS256" | "HS384" | "HS512" => Err(Rejection::Algorithm(format!(
            "alg `{name}` (HMAC) is refused: it needs a secret shared with the issuer, and a public key is not one"
        ))),
        "RS256" | "RS384" | "RS512" | "PS256" | "PS384" | "PS512" | "ES256" | "ES384" | "EdDSA" => {
            name.parse().map_err(|_| Rejection::Algorithm(format!("alg `{name}` is not supported")))
        }
        other => Err(Rejection::Algorithm(format!(
            "alg `{}` is not supported (RS256, PS256, ES256, EdDSA and their kin are)",
            printable(other)
        ))),
    }
}

/// The claims of a signed token, checked.
pub(crate) fn claims(claims: &Map<String, Value>, config: &OAuthConfig, now: u64) -> Result<Claims, Rejection> {
    let issuer = claims.get("iss").and_then(Value::as_str).unwrap_or("");
    if issuer != config.issuer {
        return Err(Rejection::Issuer(format!(
            "issuer `{}` is not auth.oauth.issuer `{}`",
            printable(issuer),
            config.issuer
        )));
    }
    let leeway = config.leeway.as_secs();
    let expires = match claims.get("exp").map(Value::as_f64) {
        Some(Some(exp)) if exp >= 0.0 => exp as u64,
        _ => return Err(malformed("it has no `exp` (a number)")),
    };
    if now > expires.saturating_add(leeway) {
        return Err(Rejection::Expired(format!(
            "it expired {} s ago (leeway_secs {leeway})",
            now.saturating_sub(expires)
        )));
    }
    if let Some(nbf) = claims.get("nbf").and_then(Value::as_f64)
        && nbf > (now + leeway) as f64
    {
        return Err(Rejection::NotYet(format!(
            "it is not valid for {} s yet (nbf; leeway_secs {leeway})",
            (nbf as u64).saturating_sub(now)
        )));
    }
    audience(claims.get("aud"), config)?;
    let subject = match claims.get("sub").and_then(Value::as_str) {
        Some(sub) if !sub.is_empty() => sub.to_string(),
        _ => return Err(malformed("it has no `sub`")),
    };
    Ok(Claims { issuer: issuer.to_string(), subject, scopes: scopes(claims), expires })
}

/// `aud`, a string or an array, must hold one of the configured audiences.
pub(crate) fn audience(aud: Option<&Value>, config: &OAuthConfig) -> Result<(), Rejection> {
    let presented: Vec<&str> = match aud {
        Some(Value::String(one)) => vec![one.as_str()],
        Some(Value::Array(many)) => many.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if presented.iter().any(|a| config.audiences.iter().any(|want| want == a)) {
        return Ok(());
    }
    let shown: Vec<String> = presented.iter().take(5).map(|a| format!("`{}`", printable(a))).collect();
    Err(Rejection::Audience(format!(
        "audience {} not in [{}] (auth.oauth.audiences): the token is for another resource",
        if shown.is_empty() { "(none)".to_string() } else { shown.join(", ") },
        config.audiences.join(", ")
    )))
}

/// `scope` (a space-separated string, RFC 9068) or `scp` (an array or a string).
pub(crate) fn scopes(claims: &Map<String, Value>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for field in ["scope", "scp"] {
        match claims.get(field) {
            Some(Value::String(text)) => out.extend(text.split_whitespace().map(str::to_string)),
            Some(Value::Array(items)) => out.extend(items.iter().filter_map(Value::as_str).map(str::to_string)),
            _ => {}
        }
    }
    out.sort();
    out.dedup();
    out
}

fn malformed(why: &str) -> Rejection {
    Rejection::Malformed(why.to_string())
}

/// At most 64 characters, without control characters or quotes: safe in a
/// log line and a `WWW-Authenticate` value.
pub(crate) fn printable(text: &str) -> String {
    text.chars().take(64).map(|c| if c.is_control() || c == '"' || c == '\\' { '?' } else { c }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config() -> OAuthConfig {
        let text = r#"{"auth": {"oauth": {"issuer": "https://idp.example.com", "resource": "https://gate.example.com/mcp",
            "audiences": ["https://gate.example.com/mcp", "client-1"]}},
            "mcpServers": {"a": {"url": "http://127.0.0.1:1/mcp"}}}"#;
        let c = crate::config::Config::parse(text, &|_| None).unwrap();
        (*c.oauth.unwrap()).clone()
    }

    fn map(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn claims_are_checked_each_with_its_reason() {
        let c = config();
        let good = json!({"iss": "https://idp.example.com", "sub": "alice", "aud": "client-1", "exp": 1000, "scope": "mcp files"});
        let claims = super::claims(&map(good.clone()), &c, 900).unwrap();
        assert_eq!((claims.subject.as_str(), claims.scopes.clone()), ("alice", vec!["files".into(), "mcp".into()]));
        let refused = |change: Value, now: u64| {
            let mut token = map(good.clone());
            for (k, v) in change.as_object().unwrap() {
                if v.is_null() {
                    token.remove(k);
                } else {
                    token.insert(k.clone(), v.clone());
                }
            }
            super::claims(&token, &c, now).unwrap_err().to_string()
        };
        assert!(refused(json!({}), 1031).contains("expired 31 s ago"), "past exp + 30 s of leeway");
        assert!(super::claims(&map(good.clone()), &c, 1030).is_ok(), "within the leeway");
        assert!(refused(json!({"exp": null}), 900).contains("no `exp`"));
        assert!(refused(json!({"nbf": 1000}), 900).contains("not valid for 100 s yet"));
        let aud = refused(json!({"aud": ["https://other.example.com/mcp"]}), 900);
        assert!(
            aud.contains("`https://other.example.com/mcp` not in [https://gate.example.com/mcp, client-1]"),
            "{aud}"
        );
        assert!(refused(json!({"aud": null}), 900).contains("audience (none)"));
        assert!(refused(json!({"iss": "https://evil.example.com"}), 900).contains("issuer `https://evil.example.com`"));
        assert!(refused(json!({"sub": ""}), 900).contains("no `sub`"));
    }

    #[test]
    fn none_and_hmac_are_refused_by_name() {
        assert!(algorithm("none").unwrap_err().to_string().contains("`none` is refused"));
        assert!(algorithm("HS256").unwrap_err().to_string().contains("HMAC"));
        assert!(algorithm("XX\"1").unwrap_err().to_string().contains("`XX?1`"));
        assert_eq!(algorithm("EdDSA").unwrap(), Algorithm::EdDSA);
    }

    #[test]
    fn scopes_come_from_scope_or_scp() {
        assert_eq!(scopes(&map(json!({"scope": "b a"}))), vec!["a", "b"]);
        assert_eq!(scopes(&map(json!({"scp": ["x", "y"]}))), vec!["x", "y"]);
        assert!(scopes(&map(json!({}))).is_empty());
        assert!(looks_like_jwt("eyJhbGciOiJSUzI1NiJ9.e30.c2ln"));
        assert!(!looks_like_jwt("opaque-token-0123456789"));
        assert!(!looks_like_jwt("a.b.c"));
    }
}
