//! Finding a server's authorization server: from the challenge of its 401
//! or 403 (`downstream/challenge.rs`), its protected-resource metadata (RFC 9728: the
//! challenge's URL, else the well-known URI with the server's path, else at
//! the root), and the authorization server's metadata (RFC 8414, then
//! OpenID Connect discovery, in the order of the MCP authorization spec of
//! 2025-11-25). Each document is checked before anything trusts it.

use serde_json::Value;
use ureq::Agent;

use super::fetch;

/// A server's protected-resource metadata (RFC 9728), as checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProtectedResource {
    /// Where it was read.
    pub(crate) url: String,
    pub(crate) resource: String,
    pub(crate) authorization_servers: Vec<String>,
    pub(crate) scopes_supported: Vec<String>,
}

/// `(origin, path)` of a URL: `https://mcp.example.com`, `/mcp`.
pub(crate) fn split_url(url: &str) -> (&str, &str) {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url[after_scheme..].find(['/', '?', '#']) {
        Some(at) => {
            let (origin, rest) = url.split_at(after_scheme + at);
            (origin, rest.split(['?', '#']).next().unwrap_or(""))
        }
        None => (url, ""),
    }
}

/// Where a server's metadata may be: the challenge's URL, then the
/// well-known URI with the server's path, then at the root.
pub(crate) fn resource_metadata_urls(server_url: &str, from_challenge: Option<&str>) -> Vec<String> {
    let (origin, path) = split_url(server_url);
    let path = path.trim_end_matches('/');
    let mut urls: Vec<String> = from_challenge.map(str::to_string).into_iter().collect();
    if !path.is_empty() {
        urls.push(format!("{origin}/.well-known/oauth-protected-resource{path}"));
    }
    urls.push(format!("{origin}/.well-known/oauth-protected-resource"));
    urls.dedup();
    urls
}

/// Whether a metadata document's `resource` is this server: its URL, or
/// an origin or path above it (RFC 9728 §3.3: a client must not use
/// metadata made for another resource).
fn resource_covers(resource: &str, server_url: &str) -> bool {
    let resource = resource.trim_end_matches('/');
    let server = server_url.trim_end_matches('/');
    server == resource || server.strip_prefix(resource).is_some_and(|rest| rest.starts_with('/'))
}

/// The server's protected-resource metadata, from the first place that has it.
pub(crate) fn protected_resource(
    agent: &Agent,
    server_url: &str,
    from_challenge: Option<&str>,
) -> Result<ProtectedResource, String> {
    let mut tried = Vec::new();
    for url in resource_metadata_urls(server_url, from_challenge) {
        if let Err(why) = fetch::check_endpoint(&url) {
            tried.push(format!("{url}: {why}"));
            continue;
        }
        let doc = match fetch::get_json(agent, &url) {
            Ok(doc) => doc,
            Err(e) => {
                tried.push(e);
                continue;
            }
        };
        let resource = doc["resource"].as_str().unwrap_or_default().to_string();
        if resource.is_empty() {
            return Err(format!("the protected-resource metadata at {url} has no `resource`"));
        }
        if !resource_covers(&resource, server_url) {
            return Err(format!(
                "the protected-resource metadata at {url} is for `{resource}`, not for this server ({server_url}): \
                 refused (RFC 9728 §3.3)"
            ));
        }
        let authorization_servers = strings(&doc["authorization_servers"]);
        return Ok(ProtectedResource {
            url,
            resource,
            authorization_servers,
            scopes_supported: strings(&doc["scopes_supported"]),
        });
    }
    Err(format!("no protected-resource metadata: {}", tried.join("; ")))
}

/// An authorization server's metadata, as checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AuthorizationServer {
    pub(crate) issuer: String,
    /// Where it was read.
    pub(crate) url: String,
    pub(crate) authorization_endpoint: String,
    pub(crate) token_endpoint: String,
    pub(crate) registration_endpoint: Option<String>,
    pub(crate) scopes_supported: Vec<String>,
    pub(crate) token_endpoint_auth_methods: Vec<String>,
    /// It takes a client id that is the URL of a client ID metadata document.
    pub(crate) client_id_metadata_documents: bool,
    /// It sends `iss` with its redirects (RFC 9207).
    pub(crate) sends_iss: bool,
    pub(crate) grant_types: Vec<String>,
}

/// Where an issuer's metadata may be: RFC 8414 with the path inserted, then
/// OpenID Connect with the path inserted and appended (without a path:
/// RFC 8414, then OpenID Connect).
pub(crate) fn metadata_urls(issuer: &str) -> Vec<String> {
    let issuer = issuer.trim_end_matches('/');
    let (origin, path) = split_url(issuer);
    if path.is_empty() {
        return vec![
            format!("{origin}/.well-known/oauth-authorization-server"),
            format!("{origin}/.well-known/openid-configuration"),
        ];
    }
    vec![
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!("{origin}/.well-known/openid-configuration{path}"),
        format!("{issuer}/.well-known/openid-configuration"),
    ]
}

fn strings(value: &Value) -> Vec<String> {
    value.as_array().map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect()).unwrap_or_default()
}

/// Checks an authorization server's metadata document, read at `url`, for `issuer`.
pub(crate) fn check_metadata(issuer: &str, url: &str, doc: &Value) -> Result<AuthorizationServer, String> {
    // RFC 8414 §3.3: a document naming another issuer is not this issuer's.
    if doc["issuer"].as_str() != Some(issuer) {
        return Err(format!(
            "the metadata at {url} names issuer {}, not {issuer}: refused (RFC 8414 §3.3)",
            doc["issuer"]
        ));
    }
    let endpoint = |name: &str| -> Result<String, String> {
        let value = doc[name].as_str().ok_or_else(|| format!("the metadata at {url} has no `{name}`"))?;
        fetch::check_endpoint(value).map_err(|why| format!("the metadata at {url}: `{name}` {why}"))?;
        Ok(value.to_string())
    };
    let authorization_endpoint = endpoint("authorization_endpoint")?;
    let token_endpoint = endpoint("token_endpoint")?;
    let registration_endpoint = match doc.get("registration_endpoint") {
        Some(Value::String(_)) => Some(endpoint("registration_endpoint")?),
        _ => None,
    };
    let methods = strings(&doc["code_challenge_methods_supported"]);
    if !methods.iter().any(|m| m == "S256") {
        return Err(if methods.is_empty() {
            format!(
                "the authorization server {issuer} does not say it supports PKCE (no \
                 code_challenge_methods_supported in {url}): refused, as the MCP authorization spec requires"
            )
        } else {
            format!("the authorization server {issuer} offers PKCE with {methods:?}, not S256: refused")
        });
    }
    Ok(AuthorizationServer {
        issuer: issuer.to_string(),
        url: url.to_string(),
        authorization_endpoint,
        token_endpoint,
        registration_endpoint,
        scopes_supported: strings(&doc["scopes_supported"]),
        token_endpoint_auth_methods: strings(&doc["token_endpoint_auth_methods_supported"]),
        client_id_metadata_documents: doc["client_id_metadata_document_supported"] == true,
        sends_iss: doc["authorization_response_iss_parameter_supported"] == true,
        grant_types: strings(&doc["grant_types_supported"]),
    })
}

/// The issuer's metadata, from the first place that answers.
pub(crate) fn authorization_server(agent: &Agent, issuer: &str) -> Result<AuthorizationServer, String> {
    fetch::check_endpoint(issuer).map_err(|why| format!("the issuer `{issuer}` {why}"))?;
    let mut tried = Vec::new();
    for url in metadata_urls(issuer) {
        match fetch::get_json(agent, &url) {
            Ok(doc) => return check_metadata(issuer, &url, &doc),
            Err(e) => tried.push(e),
        }
    }
    Err(format!("no metadata for the authorization server {issuer}: {}", tried.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn metadata_is_looked_for_where_the_spec_says_in_its_order() {
        assert_eq!(
            resource_metadata_urls("https://mcp.example.com/public/mcp", None),
            [
                "https://mcp.example.com/.well-known/oauth-protected-resource/public/mcp",
                "https://mcp.example.com/.well-known/oauth-protected-resource"
            ]
        );
        assert_eq!(
            metadata_urls("https://auth.example.com/tenant1"),
            [
                "https://auth.example.com/.well-known/oauth-authorization-server/tenant1",
                "https://auth.example.com/.well-known/openid-configuration/tenant1",
                "https://auth.example.com/tenant1/.well-known/openid-configuration"
            ]
        );
        assert_eq!(metadata_urls("http://127.0.0.1:9/").len(), 2);
    }

    #[test]
    fn metadata_for_another_issuer_or_without_pkce_is_refused() {
        let good = json!({"issuer": "https://as.example.com", "authorization_endpoint": "https://as.example.com/a",
            "token_endpoint": "https://as.example.com/t", "code_challenge_methods_supported": ["S256"]});
        assert!(check_metadata("https://as.example.com", "u", &good).is_ok());
        let mut other = good.clone();
        other["issuer"] = json!("https://evil.example.com");
        assert!(check_metadata("https://as.example.com", "u", &other).unwrap_err().contains("RFC 8414"));
        let mut plain = good.clone();
        plain["code_challenge_methods_supported"] = json!(["plain"]);
        assert!(check_metadata("https://as.example.com", "u", &plain).unwrap_err().contains("not S256"));
        let mut none = good.clone();
        none.as_object_mut().unwrap().remove("code_challenge_methods_supported");
        assert!(check_metadata("https://as.example.com", "u", &none).unwrap_err().contains("PKCE"));
        let mut clear = good;
        clear["token_endpoint"] = json!("http://as.example.com/t");
        assert!(check_metadata("https://as.example.com", "u", &clear).unwrap_err().contains("token_endpoint"));
    }

    #[test]
    fn metadata_covers_its_server_and_those_below_it_only() {
        assert!(resource_covers("https://mcp.example.com/mcp", "https://mcp.example.com/mcp"));
        assert!(resource_covers("https://mcp.example.com", "https://mcp.example.com/mcp"));
        assert!(!resource_covers("https://mcp.example.com/m", "https://mcp.example.com/mcp"));
        assert!(!resource_covers("https://other.example.com", "https://mcp.example.com/mcp"));
    }
}
