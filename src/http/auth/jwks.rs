//! The issuer's signing keys (its JWKS), fetched when first needed and kept:
//! fetched again after an hour, or when a token names a key (`kid`) that is
//! not there, which is how a key rotation reaches mcpgate without a
//! restart. A refetch for an unknown key happens at most every
//! [`REFETCH_EVERY`], whatever tokens arrive: made-up `kid`s cannot make
//! mcpgate hammer the issuer. One fetch runs at a time; requests that need
//! the keys meanwhile wait for it (never holding a lock while it runs).
//!
//! Only asymmetric signing keys are kept: `oct` (HMAC) keys and keys with
//! `"use": "enc"` are left out, and each key is good for the algorithms of
//! its type only (its `alg` when it names one): a token's `alg` must fit
//! the key it names.

use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk};
use jsonwebtoken::{Algorithm, DecodingKey};
use parking_lot::{Condvar, Mutex, RwLock};
use serde_json::Value;
use ureq::Agent;

use super::idp;
use crate::stats::Stats;

/// The least time between two fetches caused by unknown keys.
pub(crate) const REFETCH_EVERY: Duration = Duration::from_secs(10);
/// How long a key set is used before it is fetched again anyway.
const MAX_AGE: Duration = Duration::from_secs(3600);
/// The longest a request waits for another's fetch.
const WAIT_FOR_FETCH: Duration = Duration::from_secs(15);

/// One signing key of the issuer.
#[derive(Clone)]
pub(crate) struct Key {
    pub(crate) kid: Option<String>,
    /// What the key is, for errors: `RSA`, `EC P-256`, `OKP Ed25519`.
    pub(crate) kind: &'static str,
    /// The algorithms it may check.
    pub(crate) algorithms: Vec<Algorithm>,
    pub(crate) key: DecodingKey,
}

/// Why no key could be had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KeyError {
    /// The set holds no key with this `kid` (or none for the `alg`, without one).
    Unknown(String),
    /// The keys could not be fetched: the reason.
    Unavailable(String),
}

struct Fetched {
    keys: Vec<Key>,
    at: Option<Instant>,
}

/// Whether a fetch runs, and how the last one went.
#[derive(Default)]
struct Fetching {
    running: bool,
    last_attempt: Option<Instant>,
    last_error: Option<String>,
    /// Discovered from the issuer's metadata, when not configured.
    jwks_uri: Option<String>,
}

pub(crate) struct Jwks {
    issuer: String,
    configured_uri: Option<String>,
    agent: Agent,
    /// Guards the keys in use; replaced whole after a fetch.
    keys: RwLock<Fetched>,
    /// Guards the state of fetching; the fetch itself runs outside it.
    fetching: Mutex<Fetching>,
    fetched: Condvar,
}

impl Jwks {
    pub(crate) fn new(issuer: &str, jwks_uri: Option<&str>, agent: Agent) -> Jwks {
        Jwks {
            issuer: issuer.to_string(),
            configured_uri: jwks_uri.map(str::to_string),
            agent,
            keys: RwLock::new(Fetched { keys: Vec::new(), at: None }),
            fetching: Mutex::new(Fetching::default()),
            fetched: Condvar::new(),
        }
    }

    /// The key a token with `kid` and `alg` names.
    pub(crate) fn key(&self, kid: Option<&str>, alg: Algorithm, stats: &Stats) -> Result<Key, KeyError> {
        let stale = self.keys.read().at.is_none_or(|at| at.elapsed() >= MAX_AGE);
        if stale {
            self.refresh(stats);
        }
        if let Some(key) = self.find(kid, alg) {
            return Ok(key);
        }
        // Unknown: perhaps rotated in since the last fetch.
        self.refresh(stats);
        if let Some(key) = self.find(kid, alg) {
            return Ok(key);
        }
        let fetching = self.fetching.lock();
        if self.keys.read().at.is_none() {
            let why = fetching.last_error.clone().unwrap_or_else(|| "not fetched yet".into());
            return Err(KeyError::Unavailable(why));
        }
        let ago = fetching.last_attempt.map_or(0, |at| at.elapsed().as_secs());
        Err(KeyError::Unknown(match kid {
            Some(kid) => format!(
                "no key `{kid}` in the issuer's JWKS (fetched {ago} s ago; fetched again for an unknown key at most every {} s)",
                REFETCH_EVERY.as_secs()
            ),
            None => format!("the token names no `kid`, and no key of the issuer's JWKS is for {alg:?}"),
        }))
    }

    fn find(&self, kid: Option<&str>, alg: Algorithm) -> Option<Key> {
        let fetched = self.keys.read();
        let mut fitting = fetched.keys.iter().filter(|k| match kid {
            Some(kid) => k.kid.as_deref() == Some(kid),
            None => k.algorithms.contains(&alg),
        });
        // By `kid`: the key, whatever its type (the caller checks `alg` against it).
        fitting.next().cloned()
    }

    /// Fetches the keys, unless another fetch runs (then waits for it) or
    /// one was tried in the last [`REFETCH_EVERY`] (an unknown key, or an
    /// issuer that did not answer, cannot make it fetch more often).
    fn refresh(&self, stats: &Stats) {
        let uri = {
            let mut fetching = self.fetching.lock();
            if fetching.running {
                let deadline = Instant::now() + WAIT_FOR_FETCH;
                while fetching.running {
                    if self.fetched.wait_until(&mut fetching, deadline).timed_out() {
                        break;
                    }
                }
                return;
            }
            if fetching.last_attempt.is_some_and(|at| at.elapsed() < REFETCH_EVERY) {
                return;
            }
            fetching.running = true;
            fetching.last_attempt = Some(Instant::now());
            self.configured_uri.clone().or_else(|| fetching.jwks_uri.clone())
        };
        stats.auth_jwks_fetches.inc();
        let outcome = self.fetch(uri);
        let mut fetching = self.fetching.lock();
        fetching.running = false;
        match outcome {
            Ok((uri, keys)) => {
                fetching.jwks_uri = Some(uri);
                fetching.last_error = None;
                *self.keys.write() = Fetched { keys, at: Some(Instant::now()) };
            }
            Err(why) => {
                stats.auth_jwks_failures.inc();
                crate::limited!(
                    error,
                    "OAuth: cannot fetch the issuer's signing keys: {why}; tokens of {} are refused until it works \
                     (with what was fetched before still used)",
                    self.issuer
                );
                fetching.last_error = Some(why);
            }
        }
        drop(fetching);
        self.fetched.notify_all();
    }

    fn fetch(&self, uri: Option<String>) -> Result<(String, Vec<Key>), String> {
        let uri = match uri {
            Some(uri) => uri,
            None => idp::discover_jwks_uri(&self.agent, &self.issuer)?,
        };
        let set = idp::get_json(&self.agent, &uri)?;
        let Some(Value::Array(entries)) = set.get("keys") else {
            return Err(format!("{uri} is not a JWKS: it has no `keys` array"));
        };
        let keys: Vec<Key> = entries.iter().filter_map(key_of).collect();
        if keys.is_empty() {
            return Err(format!("{uri} holds no signing key mcpgate can use (RSA, EC P-256/P-384, Ed25519)"));
        }
        log::info!("OAuth: {} signing key(s) of {} from {uri}", keys.len(), self.issuer);
        Ok((uri, keys))
    }
}

/// A usable signing key from one JWK; `None` for the others.
fn key_of(entry: &Value) -> Option<Key> {
    if entry.get("use").and_then(Value::as_str).is_some_and(|u| u != "sig") {
        return None;
    }
    let jwk: Jwk = serde_json::from_value(entry.clone()).ok()?;
    let (kind, by_type): (&'static str, &[Algorithm]) = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => (
            "RSA",
            &[
                Algorithm::RS256,
                Algorithm::RS384,
                Algorithm::RS512,
                Algorithm::PS256,
                Algorithm::PS384,
                Algorithm::PS512,
            ],
        ),
        AlgorithmParameters::EllipticCurve(ec) => match ec.curve {
            EllipticCurve::P256 => ("EC P-256", &[Algorithm::ES256]),
            EllipticCurve::P384 => ("EC P-384", &[Algorithm::ES384]),
            _ => return None,
        },
        AlgorithmParameters::OctetKeyPair(okp) if okp.curve == EllipticCurve::Ed25519 => {
            ("OKP Ed25519", &[Algorithm::EdDSA])
        }
        // HMAC keys (`oct`) and anything else: never.
        _ => return None,
    };
    let algorithms = match entry.get("alg").and_then(Value::as_str) {
        None => by_type.to_vec(),
        Some(name) => {
            let alg: Algorithm = name.parse().ok()?;
            if !by_type.contains(&alg) {
                return None;
            }
            vec![alg]
        }
    };
    let key = DecodingKey::from_jwk(&jwk).ok()?;
    Some(Key { kid: jwk.common.key_id.clone(), kind, algorithms, key })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_asymmetric_signing_keys_are_kept_each_for_its_own_algorithms() {
        let rsa = json!({"kty": "RSA", "kid": "r", "n": "sXch", "e": "AQAB"});
        let key = key_of(&rsa).expect("an RSA key");
        assert!(key.algorithms.contains(&Algorithm::RS256) && key.algorithms.contains(&Algorithm::PS256));
        assert!(!key.algorithms.contains(&Algorithm::HS256) && !key.algorithms.contains(&Algorithm::ES256));
        let pinned = json!({"kty": "RSA", "kid": "r", "n": "sXch", "e": "AQAB", "alg": "PS256"});
        assert_eq!(key_of(&pinned).unwrap().algorithms, vec![Algorithm::PS256]);
        assert!(
            key_of(&json!({"kty": "RSA", "n": "sXch", "e": "AQAB", "alg": "ES256"})).is_none(),
            "alg not of its type"
        );
        assert!(key_of(&json!({"kty": "oct", "k": "c2VjcmV0"})).is_none(), "HMAC keys are never used");
        assert!(key_of(&json!({"kty": "RSA", "n": "sXch", "e": "AQAB", "use": "enc"})).is_none());
        let ed = json!({"kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"});
        assert_eq!(key_of(&ed).unwrap().algorithms, vec![Algorithm::EdDSA]);
    }
}
