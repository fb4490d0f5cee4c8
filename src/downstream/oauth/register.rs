//! Who mcpgate is at an authorization server, in the order the issue asks:
//! a client configured by hand; else the client ID metadata document
//! mcpgate serves itself (its URL is the client id: the MCP spec's
//! preferred way since 2025-11-25), where the server says it takes one;
//! else dynamic registration (RFC 7591), kept in the store so a restart
//! does not register again.

use serde_json::{Value, json};
use ureq::Agent;

use super::discovery::AuthorizationServer;
use super::fetch;

/// mcpgate's client at one authorization server. Its `Debug` hides the secret.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Client {
    pub(crate) client_id: String,
    #[serde(default)]
    pub(crate) client_secret: Option<String>,
    /// `none`, `client_secret_basic` or `client_secret_post`.
    pub(crate) auth_method: String,
    /// The redirect URI it was made for: another needs another client.
    pub(crate) redirect_uri: String,
    /// `configured`, `metadata document` or `registered`: for the status page.
    pub(crate) how: String,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Client({}, {}, {})", self.client_id, self.auth_method, self.how)
    }
}

/// What a configuration gives of a client: an id and secret, or a
/// metadata document's URL of the operator's own.
pub(crate) struct Given<'a> {
    pub(crate) client_id: Option<&'a str>,
    pub(crate) client_secret: Option<&'a str>,
    pub(crate) metadata_url: Option<&'a str>,
}

/// The client ID metadata document mcpgate serves at `url`.
pub(crate) fn metadata_document(url: &str, redirect_uri: &str) -> Value {
    json!({
        "client_id": url,
        "client_name": "mcpgate",
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    })
}

/// Whether an authorization server can fetch a document at `url`: it is
/// `https://`, or `http://` on loopback (a server on the same host).
fn fetchable(url: &str) -> bool {
    url.starts_with("https://") || fetch::check_endpoint(url).is_ok()
}

/// The client to use at `server` without registering: configured, or the
/// metadata document (`own_document`: mcpgate's URL for it). `None`: register.
pub(crate) fn without_registering(
    given: &Given<'_>,
    server: &AuthorizationServer,
    own_document: &str,
    redirect_uri: &str,
) -> Option<Client> {
    if let Some(id) = given.client_id {
        let auth_method = match given.client_secret {
            None => "none",
            Some(_) if server.token_endpoint_auth_methods.iter().any(|m| m == "client_secret_basic") => {
                "client_secret_basic"
            }
            Some(_) if server.token_endpoint_auth_methods.iter().any(|m| m == "client_secret_post") => {
                "client_secret_post"
            }
            Some(_) => "client_secret_basic",
        };
        return Some(Client {
            client_id: id.to_string(),
            client_secret: given.client_secret.map(str::to_string),
            auth_method: auth_method.into(),
            redirect_uri: redirect_uri.to_string(),
            how: "configured".into(),
        });
    }
    let document = given.metadata_url.unwrap_or(own_document);
    (server.client_id_metadata_documents && fetchable(document)).then(|| Client {
        client_id: document.to_string(),
        client_secret: None,
        auth_method: "none".into(),
        redirect_uri: redirect_uri.to_string(),
        how: "metadata document".into(),
    })
}

/// Registers mcpgate at `server` (RFC 7591) as a public client for `redirect_uri`.
pub(crate) fn register(
    agent: &Agent,
    server: &AuthorizationServer,
    redirect_uri: &str,
    scopes: &[String],
) -> Result<Client, String> {
    let Some(endpoint) = &server.registration_endpoint else {
        return Err(format!(
            "the authorization server {} takes no client ID metadata document and offers no dynamic registration: \
             make a client for mcpgate there (redirect URI {redirect_uri}) and set its client_id",
            server.issuer
        ));
    };
    let mut body = json!({
        "client_name": "mcpgate",
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    });
    if !scopes.is_empty() {
        body["scope"] = Value::String(scopes.join(" "));
    }
    let answer = fetch::post_json(agent, endpoint, &body)?;
    let json = answer.json?;
    if !(200..300).contains(&answer.status) {
        let error = json["error_description"].as_str().or(json["error"].as_str()).unwrap_or("");
        return Err(format!("registration at {endpoint} answered HTTP {}: {}", answer.status, fetch::printable(error)));
    }
    let client_id = json["client_id"]
        .as_str()
        .filter(|id| !id.is_empty())
        .ok_or_else(|| format!("registration at {endpoint} answered without a client_id"))?;
    let client_secret = json["client_secret"].as_str().map(str::to_string);
    let auth_method = json["token_endpoint_auth_method"]
        .as_str()
        .unwrap_or(if client_secret.is_some() { "client_secret_basic" } else { "none" })
        .to_string();
    Ok(Client {
        client_id: client_id.to_string(),
        client_secret,
        auth_method,
        redirect_uri: redirect_uri.to_string(),
        how: "registered".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(cimd: bool) -> AuthorizationServer {
        AuthorizationServer {
            issuer: "https://as.example.com".into(),
            url: "u".into(),
            authorization_endpoint: "https://as.example.com/a".into(),
            token_endpoint: "https://as.example.com/t".into(),
            registration_endpoint: None,
            scopes_supported: vec![],
            token_endpoint_auth_methods: vec!["client_secret_post".into()],
            client_id_metadata_documents: cimd,
            sends_iss: true,
            grant_types: vec![],
        }
    }

    #[test]
    fn a_configured_client_comes_first_then_the_metadata_document_else_registration() {
        let doc = "https://gate.example.com/oauth/client.json";
        let configured = Given { client_id: Some("mine"), client_secret: Some("s"), metadata_url: None };
        let c = without_registering(&configured, &server(true), doc, "r").unwrap();
        assert_eq!(
            (c.client_id.as_str(), c.auth_method.as_str(), c.how.as_str()),
            ("mine", "client_secret_post", "configured")
        );
        let none = Given { client_id: None, client_secret: None, metadata_url: None };
        let c = without_registering(&none, &server(true), doc, "r").unwrap();
        assert_eq!((c.client_id.as_str(), c.how.as_str()), (doc, "metadata document"));
        assert!(without_registering(&none, &server(false), doc, "r").is_none(), "no CIMD: register");
        assert!(
            without_registering(&none, &server(true), "http://gate.example.com/oauth/client.json", "r").is_none(),
            "a document the server cannot fetch safely is not offered"
        );
        assert!(!format!("{:?}", Client { client_secret: Some("s3cret".into()), ..c }).contains("s3cret"));
    }
}
