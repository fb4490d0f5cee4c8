//! What tells a client how to get a token: the protected-resource metadata
//! (RFC 9728), served at `/.well-known/oauth-protected-resource` and at the
//! same with the path of `resource` after it (`.../mcp`), and the
//! `WWW-Authenticate: Bearer` challenge of every 401 and 403 (RFC 6750),
//! which names that document with an absolute URL.

use serde_json::{Value, json};

use crate::config::OAuthConfig;

/// The well-known path of the metadata, without the resource's path.
pub(crate) const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// The metadata document.
pub(crate) fn document(config: &OAuthConfig) -> Value {
    json!({
        "resource": config.resource,
        "authorization_servers": [config.issuer],
        "scopes_supported": config.scopes_supported,
        "bearer_methods_supported": ["header"],
        "resource_name": "mcpgate",
    })
}

/// `(origin, path)` of a URL: `https://gate.example.com`, `/mcp`.
fn split(url: &str) -> (&str, &str) {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url[after_scheme..].find(['/', '?']) {
        Some(at) => {
            let (origin, rest) = url.split_at(after_scheme + at);
            (origin, rest.split('?').next().unwrap_or(""))
        }
        None => (url, ""),
    }
}

/// The absolute URL of the metadata: the well-known path inserted before
/// the resource's path (RFC 9728 §3.1).
pub(crate) fn metadata_url(config: &OAuthConfig) -> String {
    let (origin, path) = split(&config.resource);
    format!("{origin}{WELL_KNOWN}{}", path.trim_end_matches('/'))
}

/// Whether `path` is one the metadata is served at.
pub(crate) fn serves(config: &OAuthConfig, path: &str) -> bool {
    let (_, resource_path) = split(&config.resource);
    let resource_path = resource_path.trim_end_matches('/');
    path == WELL_KNOWN || path.strip_prefix(WELL_KNOWN).is_some_and(|rest| rest == resource_path || rest == "/mcp")
}

/// A `WWW-Authenticate: Bearer` value: `error` and its description when a
/// token was sent, the scopes that would do, and where the metadata is.
pub(crate) fn challenge(config: &OAuthConfig, error: Option<(&str, &str)>, scopes: &[String]) -> String {
    let mut parts = Vec::new();
    if let Some((code, description)) = error {
        parts.push(format!("error=\"{code}\""));
        parts.push(format!("error_description=\"{}\"", quoted(description)));
    }
    if !scopes.is_empty() {
        parts.push(format!("scope=\"{}\"", scopes.join(" ")));
    }
    parts.push(format!("resource_metadata=\"{}\"", quoted(&metadata_url(config))));
    format!("Bearer {}", parts.join(", "))
}

/// RFC 6750 §3: quoted values are visible ASCII without `"` and `\`.
fn quoted(text: &str) -> String {
    text.chars()
        .take(300)
        .map(|c| match c {
            '"' | '\\' => '\'',
            c if (' '..='~').contains(&c) => c,
            _ => '?',
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(resource: &str) -> OAuthConfig {
        let text = format!(
            r#"{{"auth": {{"oauth": {{"issuer": "https://idp.example.com", "resource": "{resource}", "required_scopes": ["mcp"]}}}},
            "mcpServers": {{"a": {{"url": "http://127.0.0.1:1/mcp"}}}}}}"#
        );
        let c = crate::config::Config::parse(&text, &|_| None).unwrap();
        (*c.oauth.unwrap()).clone()
    }

    #[test]
    fn the_metadata_url_inserts_the_well_known_path_before_the_resource_path() {
        let c = config("https://gate.example.com/mcp");
        assert_eq!(metadata_url(&c), "https://gate.example.com/.well-known/oauth-protected-resource/mcp");
        assert!(serves(&c, "/.well-known/oauth-protected-resource"));
        assert!(serves(&c, "/.well-known/oauth-protected-resource/mcp"));
        assert!(!serves(&c, "/.well-known/oauth-protected-resource/other"));
        let root = config("https://gate.example.com");
        assert_eq!(metadata_url(&root), "https://gate.example.com/.well-known/oauth-protected-resource");
        let doc = document(&c);
        assert_eq!(doc["resource"], "https://gate.example.com/mcp");
        assert_eq!(doc["authorization_servers"][0], "https://idp.example.com");
        assert_eq!(doc["scopes_supported"][0], "mcp");
    }

    #[test]
    fn challenges_quote_safely() {
        let c = config("https://gate.example.com/mcp");
        let value = challenge(&c, Some(("invalid_token", "audience \"x\" not in [y]\n")), &["mcp".into()]);
        assert_eq!(
            value,
            "Bearer error=\"invalid_token\", error_description=\"audience 'x' not in [y]?\", scope=\"mcp\", \
             resource_metadata=\"https://gate.example.com/.well-known/oauth-protected-resource/mcp\""
        );
    }
}
