//! `auth.oauth`: mcpgate as an OAuth 2.1 resource server. The names are
//! those of the issue that asked for it (docs/OAUTH.md shows them at work);
//! every URL is `https://`, or `http://` on a loopback address only, so that
//! neither a token nor a client secret crosses a network in clear.

use std::fmt;
use std::time::Duration;

use serde_json::Value;

use super::invalid::{Invalid, kind};
use super::reader::Keys;
use super::trust::Trust;
use super::vars::expand;

/// How `/mcp` checks access tokens of one authorization server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct OAuthConfig {
    /// Exactly as tokens carry it in `iss`.
    pub(crate) issuer: String,
    /// `None`: from the issuer's metadata.
    pub(crate) jwks_uri: Option<String>,
    /// The public URL of `/mcp`.
    pub(crate) resource: String,
    /// A token's `aud` must hold one of these.
    pub(crate) audiences: Vec<String>,
    pub(crate) scopes_supported: Vec<String>,
    pub(crate) required_scopes: Vec<String>,
    /// Server name and the scope it needs, in configuration order.
    pub(crate) server_scopes: Vec<(String, String)>,
    pub(crate) leeway: Duration,
    pub(crate) introspection: Option<Introspection>,
    /// The roots the issuer's TLS is checked against (`ca_file`, `trust_store`).
    pub(crate) trust: Trust,
    /// For fetches from the issuer: `connect_timeout_secs`.
    pub(crate) connect_timeout: Duration,
}

impl OAuthConfig {
    /// The scope `server` needs, if any.
    pub(crate) fn scope_of(&self, server: &str) -> Option<&str> {
        self.server_scopes.iter().find(|(s, _)| s == server).map(|(_, scope)| scope.as_str())
    }
}

/// RFC 7662: where opaque tokens are checked, and as whom.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Introspection {
    pub(crate) url: String,
    pub(crate) client_id: String,
    pub(crate) client_secret: String,
}

impl fmt::Debug for Introspection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Introspection({}, client_id: {}, client_secret: ***)", self.url, self.client_id)
    }
}

/// `auth.oauth`, read after the servers (`servers`: their names, in
/// order) and the trust; `connect_timeout` bounds its fetches.
pub(super) fn oauth(
    value: &Value,
    servers: &[&str],
    connect_timeout: Duration,
    trust: &Trust,
    env: &dyn Fn(&str) -> Option<String>,
    secrets: &mut Vec<String>,
) -> Result<OAuthConfig, Invalid> {
    let Value::Object(map) = value else {
        return Err(Invalid::new("auth.oauth", format!("expected an object, found {}", kind(value))));
    };
    let mut keys = Keys::new(map, "auth.oauth", "auth.oauth");
    let issuer = keys.string("issuer")?.ok_or_else(|| Invalid::new("auth.oauth.issuer", "missing"))?;
    let issuer = expand(&issuer, env, secrets).map_err(|p| Invalid::new("auth.oauth.issuer", p))?;
    check_url(&issuer, "auth.oauth.issuer")?;
    let jwks_uri = match keys.string("jwks_uri")? {
        Some(uri) => {
            let uri = expand(&uri, env, secrets).map_err(|p| Invalid::new("auth.oauth.jwks_uri", p))?;
            check_url(&uri, "auth.oauth.jwks_uri")?;
            Some(uri)
        }
        None => None,
    };
    let resource = keys.string("resource")?.ok_or_else(|| {
        Invalid::new("auth.oauth.resource", "missing: give the public URL of /mcp, e.g. https://gate.example.com/mcp")
    })?;
    check_url(&resource, "auth.oauth.resource")?;
    let mut audiences = keys.strings("audiences")?;
    if audiences.is_empty() {
        audiences.push(resource.clone());
    }
    let explicit_scopes = keys.present("scopes_supported");
    let mut scopes_supported = keys.strings("scopes_supported")?;
    let required_scopes = keys.strings("required_scopes")?;
    let mut server_scopes = Vec::new();
    if let Some(value) = keys.take("server_scopes") {
        let Value::Object(map) = value else {
            return Err(Invalid::new(
                "auth.oauth.server_scopes",
                format!("expected an object of server name to scope, found {}", kind(value)),
            ));
        };
        for (server, scope) in map {
            let key = format!("auth.oauth.server_scopes.{server}");
            if !servers.contains(&server.as_str()) {
                return Err(Invalid::new(key, format!("no server is named `{server}`")));
            }
            let Value::String(scope) = scope else {
                return Err(Invalid::new(key, format!("expected a scope (a string), found {}", kind(scope))));
            };
            server_scopes.push((server.clone(), scope.clone()));
        }
        // In the order of the servers, not of serde_json's sorted map.
        server_scopes.sort_by_key(|(server, _)| servers.iter().position(|s| s == server));
    }
    for (key, scope) in required_scopes
        .iter()
        .map(|s| ("auth.oauth.required_scopes".to_string(), s))
        .chain(server_scopes.iter().map(|(server, s)| (format!("auth.oauth.server_scopes.{server}"), s)))
    {
        if scope.is_empty() || scope.bytes().any(|b| !(0x21..=0x7e).contains(&b) || b == b'"' || b == b'\\') {
            return Err(Invalid::new(key, format!("`{scope}` is not a scope (RFC 6749: visible ASCII, no quote)")));
        }
        if explicit_scopes && !scopes_supported.contains(scope) {
            return Err(Invalid::new(key, format!("scope `{scope}` is not in auth.oauth.scopes_supported")));
        }
        if !explicit_scopes && !scopes_supported.contains(scope) {
            scopes_supported.push(scope.clone());
        }
    }
    let leeway = Duration::from_secs(keys.count("leeway_secs")? as u64);
    let introspection = match keys.take("introspection") {
        None => None,
        Some(value) => Some(introspection(value, env, secrets)?),
    };
    keys.refuse_unknown()?;
    Ok(OAuthConfig {
        issuer,
        jwks_uri,
        resource,
        audiences,
        scopes_supported,
        required_scopes,
        server_scopes,
        leeway,
        introspection,
        trust: trust.clone(),
        connect_timeout,
    })
}

fn introspection(
    value: &Value,
    env: &dyn Fn(&str) -> Option<String>,
    secrets: &mut Vec<String>,
) -> Result<Introspection, Invalid> {
    let path = "auth.oauth.introspection";
    let Value::Object(map) = value else {
        return Err(Invalid::new(
            path,
            format!("expected an object with url, client_id, client_secret, found {}", kind(value)),
        ));
    };
    let mut keys = Keys::new(map, path, path);
    let mut field = |keys: &mut Keys<'_>, name: &'static str| -> Result<String, Invalid> {
        let key = format!("{path}.{name}");
        let text = keys.string(name)?.ok_or_else(|| Invalid::new(key.clone(), "missing"))?;
        expand(&text, env, secrets).map_err(|p| Invalid::new(key, p))
    };
    let url = field(&mut keys, "url")?;
    check_url(&url, "auth.oauth.introspection.url")?;
    let client_id = field(&mut keys, "client_id")?;
    let client_secret = field(&mut keys, "client_secret")?;
    secrets.push(client_secret.clone());
    keys.refuse_unknown()?;
    Ok(Introspection { url, client_id, client_secret })
}

/// `https://`, or `http://` on a loopback address; no fragment.
pub(super) fn check_url(url: &str, key: &str) -> Result<(), Invalid> {
    let uri: ureq::http::Uri = url.parse().map_err(|_| Invalid::new(key, format!("`{url}` is not a URL")))?;
    let host = uri.host().unwrap_or("").trim_matches(['[', ']']);
    let loopback =
        host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    match uri.scheme_str() {
        _ if host.is_empty() => Err(Invalid::new(key, format!("`{url}` has no host"))),
        Some("https") if cfg!(feature = "tls") => Ok(()),
        Some("https") => Err(Invalid::new(key, "https:// needs mcpgate built with the `tls` feature")),
        Some("http") if loopback => Ok(()),
        Some("http") => Err(Invalid::new(
            key,
            format!(
                "`{url}`: http:// is only for a loopback address; tokens and secrets must not cross a network in clear"
            ),
        )),
        _ => Err(Invalid::new(key, format!("`{url}` must start with https://"))),
    }
    .and_then(
        |()| {
            if url.contains('#') { Err(Invalid::new(key, format!("`{url}` has a fragment"))) } else { Ok(()) }
        },
    )
}
