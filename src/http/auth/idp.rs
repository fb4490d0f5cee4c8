//! Talking to the authorization server: one agent (its TLS checked against
//! `ca_file` and `trust_store`, no proxy from the environment, like every
//! other agent of mcpgate), requests bounded in time and answers in size,
//! and the metadata that names its JWKS (RFC 8414, then OpenID Connect
//! discovery).

use std::io::Read;
use std::time::Duration;

use serde_json::Value;
use ureq::Agent;

use crate::config::OAuthConfig;

/// The longest an answer of the issuer may take, whole.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read (a JWKS of a few keys is a few KiB).
const MAX_ANSWER: u64 = 1 << 20;

pub(super) fn agent(config: &OAuthConfig) -> Agent {
    let agent_config = Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .timeout_connect(Some(config.connect_timeout))
        .timeout_global(Some(FETCH_TIMEOUT))
        .max_redirects(0)
        .user_agent(concat!("mcpgate/", env!("CARGO_PKG_VERSION")))
        .build();
    use ureq::unversioned::transport::{Connector, TcpConnector};
    let connector = ().chain(TcpConnector::default());
    #[cfg(feature = "tls")]
    let connector = connector.chain(crate::downstream::tls::TlsConnector::new(&config.trust));
    Agent::with_parts(agent_config, connector, crate::downstream::resolver::Lookup)
}

/// The JSON object of a `GET`, or what went wrong, in words.
pub(super) fn get_json(agent: &Agent, url: &str) -> Result<Value, String> {
    let response = agent.get(url).header("Accept", "application/json").call().map_err(|e| format!("{url}: {e}"))?;
    json_answer(url, response)
}

/// The JSON object answering a form `POST` with HTTP Basic authentication.
pub(super) fn post_form(agent: &Agent, url: &str, basic: &str, form: &str) -> Result<Value, String> {
    let response = agent
        .post(url)
        .header("Accept", "application/json")
        .header("Content-Type", "application/x-www-form-urlencoded")
        .header("Authorization", format!("Basic {basic}"))
        .send(form.as_bytes())
        .map_err(|e| format!("{url}: {e}"))?;
    json_answer(url, response)
}

fn json_answer(url: &str, response: ureq::http::Response<ureq::Body>) -> Result<Value, String> {
    let status = response.status().as_u16();
    let mut body = Vec::new();
    response
        .into_body()
        .into_reader()
        .take(MAX_ANSWER)
        .read_to_end(&mut body)
        .map_err(|e| format!("{url}: reading the answer failed: {e}"))?;
    if status != 200 {
        let text: String = String::from_utf8_lossy(&body).chars().take(160).collect();
        return Err(format!("{url} answered HTTP {status}: {}", text.split_whitespace().collect::<Vec<_>>().join(" ")));
    }
    match serde_json::from_slice::<Value>(&body) {
        Ok(value @ Value::Object(_)) => Ok(value),
        Ok(_) => Err(format!("{url} answered JSON that is not an object")),
        Err(e) => Err(format!("{url} answered something that is not JSON: {e}")),
    }
}

/// Where the issuer's metadata may be: RFC 8414's well-known URI with the
/// issuer's path after it, then OpenID Connect's after the issuer.
pub(super) fn metadata_urls(issuer: &str) -> Vec<String> {
    let issuer = issuer.trim_end_matches('/');
    let after_scheme = issuer.find("://").map_or(0, |i| i + 3);
    let (origin, path) = match issuer[after_scheme..].find('/') {
        Some(at) => issuer.split_at(after_scheme + at),
        None => (issuer, ""),
    };
    vec![
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!("{issuer}/.well-known/openid-configuration"),
    ]
}

/// The issuer's `jwks_uri`, from the first of its metadata documents that
/// answers; the error says what each said.
pub(super) fn discover_jwks_uri(agent: &Agent, issuer: &str) -> Result<String, String> {
    let mut tried = Vec::new();
    for url in metadata_urls(issuer) {
        let metadata = match get_json(agent, &url) {
            Ok(metadata) => metadata,
            Err(e) => {
                tried.push(e);
                continue;
            }
        };
        // RFC 8414 §3.3: metadata for another issuer is not this issuer's.
        if metadata["issuer"].as_str() != Some(issuer) {
            return Err(format!(
                "the metadata at {url} is for issuer {}, not {issuer} (auth.oauth.issuer must be exactly the `issuer` it names)",
                metadata["issuer"]
            ));
        }
        return match metadata["jwks_uri"].as_str() {
            Some(uri) => Ok(uri.to_string()),
            None => Err(format!("the issuer's metadata at {url} has no `jwks_uri`: set auth.oauth.jwks_uri")),
        };
    }
    Err(format!("no metadata for issuer {issuer}: {}", tried.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_looked_for_with_the_path_inserted_then_appended() {
        assert_eq!(
            metadata_urls("https://idp.example.com/realms/x"),
            [
                "https://idp.example.com/.well-known/oauth-authorization-server/realms/x",
                "https://idp.example.com/realms/x/.well-known/openid-configuration"
            ]
        );
        assert_eq!(
            metadata_urls("http://127.0.0.1:9000/"),
            [
                "http://127.0.0.1:9000/.well-known/oauth-authorization-server",
                "http://127.0.0.1:9000/.well-known/openid-configuration"
            ]
        );
    }
}
