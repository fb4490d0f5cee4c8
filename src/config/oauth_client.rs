//! mcpgate as the OAuth client of the servers it fronts: a server's
//! `oauth` (what it takes to sign a user in to it, or to exchange the
//! user's own token for one of its audience), and the top-level
//! `oauth_client` (where users are sent back to, where tokens are kept and
//! with what key). docs/OAUTH.md shows them at work.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use super::invalid::{Invalid, kind};
use super::reader::Keys;
use super::vars::expand;

/// A server's `oauth`: `{}` discovers everything from its 401.
#[derive(Clone, PartialEq, Eq, Default)]
pub(crate) struct ServerOAuth {
    /// A client registered at its authorization server by hand.
    pub(crate) client_id: Option<String>,
    pub(crate) client_secret: Option<String>,
    /// The URL of a client ID metadata document of the operator's own,
    /// used as the client id (instead of the one mcpgate serves).
    pub(crate) client_metadata_url: Option<String>,
    /// Asked for at consent; empty: what the server's challenge or metadata names.
    pub(crate) scopes: Vec<String>,
    /// Its authorization server, when its protected-resource metadata does not say.
    pub(crate) authorization_server: Option<String>,
    /// The resource indicator (RFC 8707); absent: the metadata's `resource`.
    pub(crate) resource: Option<String>,
    /// RFC 8693 instead of consent: the user's own token (of `auth.oauth`)
    /// is exchanged for one of this server's audience.
    pub(crate) token_exchange: bool,
    /// The `audience` asked for in an exchange; absent: the resource only.
    pub(crate) audience: Option<String>,
}

impl std::fmt::Debug for ServerOAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerOAuth")
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret.as_ref().map(|_| "***"))
            .field("client_metadata_url", &self.client_metadata_url)
            .field("scopes", &self.scopes)
            .field("authorization_server", &self.authorization_server)
            .field("resource", &self.resource)
            .field("token_exchange", &self.token_exchange)
            .field("audience", &self.audience)
            .finish()
    }
}

/// How a client of the session era (2025-11-25) that declared URL
/// elicitation is asked to sign in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ask {
    /// The `-32042` error with the link: the call ends at once, and the
    /// client retries it (once `notifications/elicitation/complete` came).
    Error,
    /// `elicitation/create` in the call's stream: the call waits for the
    /// user (at most `held_call_timeout_secs`) and goes on by itself.
    Elicitation,
}

/// `oauth_client`: what every server's sign-in shares.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct OAuthClientConfig {
    /// mcpgate's URL as a user's browser reaches it (no path): links,
    /// the callback and the client ID metadata document are under it.
    pub(crate) public_url: String,
    /// Set by hand (not derived from `listen`).
    pub(crate) public_url_given: bool,
    /// The key tokens are encrypted with; `None`: the systemd credential
    /// `mcpgate-oauth-key`, else `oauth.key` beside the store.
    pub(crate) key_file: Option<PathBuf>,
    /// Where tokens and registrations are kept; `None`: beside the state
    /// file, or in memory only without one.
    pub(crate) store_file: Option<PathBuf>,
    pub(crate) ask: Ask,
    /// How long a sign-in link stays good.
    pub(crate) link_timeout: Duration,
    /// mcpgate's own client at `auth.oauth.issuer`, to learn who opens a link.
    pub(crate) client_id: Option<String>,
    pub(crate) client_secret: Option<String>,
}

impl std::fmt::Debug for OAuthClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthClientConfig")
            .field("public_url", &self.public_url)
            .field("key_file", &self.key_file)
            .field("store_file", &self.store_file)
            .field("ask", &self.ask)
            .field("link_timeout", &self.link_timeout)
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret.as_ref().map(|_| "***"))
            .finish()
    }
}

impl OAuthClientConfig {
    /// Where the authorization servers send users back to.
    pub(crate) fn redirect_uri(&self) -> String {
        format!("{}/oauth/callback", self.public_url)
    }

    /// The client ID metadata document mcpgate serves (its URL is the client id).
    pub(crate) fn metadata_document_url(&self) -> String {
        format!("{}/oauth/client.json", self.public_url)
    }

    /// The link a user opens to sign in.
    pub(crate) fn connect_url(&self, elicitation: &str) -> String {
        format!("{}/oauth/connect?e={elicitation}", self.public_url)
    }
}

/// `oauth_client`, with the defaults when it is absent.
pub(super) fn oauth_client(
    value: Option<&Value>,
    listen: SocketAddr,
    env: &dyn Fn(&str) -> Option<String>,
    secrets: &mut Vec<String>,
) -> Result<OAuthClientConfig, Invalid> {
    let empty = serde_json::Map::new();
    let map = match value {
        None => &empty,
        Some(Value::Object(map)) => map,
        Some(other) => {
            return Err(Invalid::new("oauth_client", format!("expected an object, found {}", kind(other))));
        }
    };
    let mut keys = Keys::new(map, "oauth_client", "oauth_client");
    let given = keys.string("public_url")?;
    let public_url = match &given {
        Some(url) => {
            let url = url.trim_end_matches('/').to_string();
            super::oauth::check_url(&url, "oauth_client.public_url")?;
            let uri: ureq::http::Uri = url.parse().map_err(|_| Invalid::new("oauth_client.public_url", "not a URL"))?;
            if uri.path() != "/" && !uri.path().is_empty() || uri.query().is_some() {
                return Err(Invalid::new(
                    "oauth_client.public_url",
                    format!("`{url}` has a path: give mcpgate's origin, e.g. https://gate.example.com"),
                ));
            }
            url
        }
        None => format!("http://{listen}"),
    };
    let key_file = keys.string("key_file")?.map(PathBuf::from);
    let store_file = keys.string("store_file")?.map(PathBuf::from);
    let ask = match keys.string("ask")?.as_deref() {
        None | Some("error") => Ask::Error,
        Some("elicitation") => Ask::Elicitation,
        Some(other) => {
            return Err(Invalid::new("oauth_client.ask", format!("`{other}` is not `error` or `elicitation`")));
        }
    };
    let link_timeout = keys.secs("link_timeout_secs")?;
    let client_id = keys.string("client_id")?;
    let client_secret = match keys.string("client_secret")? {
        Some(secret) => {
            let secret = expand(&secret, env, secrets).map_err(|p| Invalid::new("oauth_client.client_secret", p))?;
            secrets.push(secret.clone());
            Some(secret)
        }
        None => None,
    };
    keys.refuse_unknown()?;
    Ok(OAuthClientConfig {
        public_url,
        public_url_given: given.is_some(),
        key_file,
        store_file,
        ask,
        link_timeout,
        client_id,
        client_secret,
    })
}

/// A server's `oauth`.
pub(super) fn server_oauth(
    value: &Value,
    path: &str,
    env: &dyn Fn(&str) -> Option<String>,
    secrets: &mut Vec<String>,
) -> Result<ServerOAuth, Invalid> {
    let key = format!("{path}.oauth");
    let Value::Object(map) = value else {
        return Err(Invalid::new(
            key,
            format!("expected an object (`{{}}` discovers everything), found {}", kind(value)),
        ));
    };
    let mut keys = Keys::new(map, &key, "mcpServers.<name>.oauth");
    let mut text = |keys: &mut Keys<'_>, name: &'static str, secret: bool| -> Result<Option<String>, Invalid> {
        let Some(raw) = keys.string(name)? else { return Ok(None) };
        let value = expand(&raw, env, secrets).map_err(|p| Invalid::new(format!("{key}.{name}"), p))?;
        if value.is_empty() || value.bytes().any(|b| b.is_ascii_control()) {
            return Err(Invalid::new(format!("{key}.{name}"), "empty, or holds a control character"));
        }
        if secret {
            secrets.push(value.clone());
        }
        Ok(Some(value))
    };
    let client_id = text(&mut keys, "client_id", false)?;
    let client_secret = text(&mut keys, "client_secret", true)?;
    let client_metadata_url = text(&mut keys, "client_metadata_url", false)?;
    let authorization_server = text(&mut keys, "authorization_server", false)?;
    let resource = text(&mut keys, "resource", false)?;
    let audience = text(&mut keys, "audience", false)?;
    for (name, url) in [("client_metadata_url", &client_metadata_url), ("authorization_server", &authorization_server)]
    {
        if let Some(url) = url {
            super::oauth::check_url(url, &format!("{key}.{name}"))?;
        }
    }
    if client_metadata_url.is_some() && client_id.is_some() {
        return Err(Invalid::new(
            format!("{key}.client_metadata_url"),
            "give `client_id` or `client_metadata_url` (which is the client id), not both",
        ));
    }
    if client_secret.is_some() && client_id.is_none() {
        return Err(Invalid::new(format!("{key}.client_secret"), "goes with `client_id`"));
    }
    let scopes = keys.strings("scopes")?;
    for scope in &scopes {
        if scope.is_empty() || scope.bytes().any(|b| !(0x21..=0x7e).contains(&b) || b == b'"' || b == b'\\') {
            return Err(Invalid::new(
                format!("{key}.scopes"),
                format!("`{scope}` is not a scope (RFC 6749: visible ASCII, no quote)"),
            ));
        }
    }
    let token_exchange = keys.flag("token_exchange")?;
    if token_exchange && client_id.is_none() {
        return Err(Invalid::new(
            format!("{key}.token_exchange"),
            "needs `client_id` (and usually `client_secret`): mcpgate's client at the issuer that exchanges tokens",
        ));
    }
    if audience.is_some() && !token_exchange {
        return Err(Invalid::new(format!("{key}.audience"), "is for `token_exchange`"));
    }
    keys.refuse_unknown()?;
    Ok(ServerOAuth {
        client_id,
        client_secret,
        client_metadata_url,
        scopes,
        authorization_server,
        resource,
        token_exchange,
        audience,
    })
}
