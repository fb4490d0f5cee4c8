//! What a checked token says ([`Claims`]), what it grants ([`Grant`]), and
//! why one was refused ([`Rejection`]): the words every checker (`jwt`,
//! `introspection`) answers in, below them all.

use std::time::Duration;

use crate::runtime::ratelog::RateLimit;

/// What a checked token says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Claims {
    pub(crate) issuer: String,
    pub(crate) subject: String,
    pub(crate) scopes: Vec<String>,
    /// Unix seconds.
    pub(crate) expires: u64,
}

/// What a valid token grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub(crate) subject: String,
    pub(crate) scopes: Vec<String>,
    /// The servers of `server_scopes` whose scope the token lacks.
    pub(crate) hidden: Vec<String>,
    /// SHA-256 of issuer, subject and `hidden`: what its sessions are bound to.
    pub(crate) principal: [u8; 32],
    /// SHA-256 of issuer and subject: the user, whatever the token's scopes
    /// (what the tokens mcpgate keeps for it at servers are bound to).
    pub(crate) user: [u8; 32],
    /// Unix seconds.
    pub(crate) expires: u64,
}

/// Why a token was refused; each says so in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Rejection {
    /// Not a token mcpgate can read.
    Malformed(String),
    /// `alg: none`, HMAC, an unknown algorithm, or one that does not fit its key.
    Algorithm(String),
    UnknownKey(String),
    Signature(String),
    Expired(String),
    NotYet(String),
    Issuer(String),
    Audience(String),
    /// Introspection said `active: false`, or the token is opaque and there is none.
    Inactive(String),
    /// The issuer could not be asked (JWKS, introspection): the token may be good.
    Unavailable(String),
}

impl Rejection {
    fn index(&self) -> usize {
        match self {
            Rejection::Malformed(_) => 0,
            Rejection::Algorithm(_) => 1,
            Rejection::UnknownKey(_) => 2,
            Rejection::Signature(_) => 3,
            Rejection::Expired(_) => 4,
            Rejection::NotYet(_) => 5,
            Rejection::Issuer(_) => 6,
            Rejection::Audience(_) => 7,
            Rejection::Inactive(_) => 8,
            Rejection::Unavailable(_) => 9,
        }
    }

    /// Logs it, at most once per 10 s for each kind of reason.
    pub(crate) fn log(&self) {
        static LIMITS: [RateLimit; 10] = [const { RateLimit::new(Duration::from_secs(10)) }; 10];
        let limit = &LIMITS[self.index()];
        if let Some(suppressed) = limit.allow() {
            let more = crate::runtime::ratelog::more(suppressed, limit);
            match self {
                // Said where the issuer failed (jwks, introspection), at warn or error.
                Rejection::Unavailable(_) => log::debug!("OAuth: a token could not be checked: {self}{more}"),
                _ => log::info!("OAuth: a token was refused: {self}{more}"),
            }
        }
    }
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rejection::Malformed(why) => write!(f, "the token is malformed: {why}"),
            Rejection::Algorithm(why) => write!(f, "{why}"),
            Rejection::UnknownKey(why) => write!(f, "unknown signing key: {why}"),
            Rejection::Signature(why)
            | Rejection::Expired(why)
            | Rejection::NotYet(why)
            | Rejection::Issuer(why)
            | Rejection::Audience(why)
            | Rejection::Inactive(why) => write!(f, "{why}"),
            Rejection::Unavailable(why) => write!(f, "mcpgate cannot check tokens now: {why}"),
        }
    }
}

impl std::error::Error for Rejection {}
