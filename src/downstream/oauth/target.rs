//! Who signs in, and where: a [`User`] (whose tokens), and the [`Target`]
//! their tokens for a resource come from (an authorization server, and
//! mcpgate's client there). What the flows, the servers' views and the
//! [`Authorizer`](super::Authorizer) all name.

use super::register::Client;
use crate::config::Trust;

/// Whose tokens: a user's digest (`Access::user`); `None` without `auth`,
/// where the gateway is one user.
pub(crate) type User = Option<[u8; 32]>;

/// A user as a record's name and the log know it: hex of the digest.
pub(crate) fn user_key(user: &User) -> String {
    match user {
        Some(digest) => crate::runtime::sha256::to_hex(digest),
        None => "anyone".into(),
    }
}

/// The start of a user's digest, for the log.
pub(super) fn short(user: &User) -> String {
    user_key(user).chars().take(8).collect()
}

/// An authorization server and mcpgate's client there, for one resource:
/// what an authorization, a refresh or an exchange is made against.
#[derive(Debug)]
pub(crate) struct Target {
    pub(crate) issuer: String,
    pub(crate) authorization_endpoint: String,
    pub(crate) token_endpoint: String,
    /// It sends `iss` with its redirects (RFC 9207): then one must come.
    pub(crate) sends_iss: bool,
    pub(crate) client: Client,
    /// The resource indicator (RFC 8707).
    pub(crate) resource: String,
    /// Asked for by default.
    pub(crate) scopes: Vec<String>,
    /// The roots its TLS is checked against.
    pub(crate) trust: Trust,
}

/// A copy of `t`.
pub(super) fn clone_target(t: &Target) -> Target {
    Target {
        issuer: t.issuer.clone(),
        authorization_endpoint: t.authorization_endpoint.clone(),
        token_endpoint: t.token_endpoint.clone(),
        sends_iss: t.sends_iss,
        client: t.client.clone(),
        resource: t.resource.clone(),
        scopes: t.scopes.clone(),
        trust: t.trust.clone(),
    }
}
