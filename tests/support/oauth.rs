//! The tests' own token issuer: signing keys made by the test (RSA from a
//! key kept for the tests only, EC P-256 and Ed25519 made with ring at each
//! run), JWTs signed with them by hand (no JWT library: the tokens are
//! built independently of what checks them), and a small HTTP server on
//! 127.0.0.1 serving the issuer's metadata, its JWKS (which a test can
//! rotate) and an introspection endpoint, counting what it is asked. It
//! stands for no particular authorization server: the real one is
//! `oidc-provider`, in scripts/interop/oauth.sh.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, Ed25519KeyPair, KeyPair, RsaKeyPair};
use serde_json::{Value, json};

use super::raw::head_end;
use super::scripted::serve_connections;

/// A 2048-bit RSA key made with `openssl genpkey` for these tests; it guards nothing.
const RSA_TEST_KEY: &str = include_str!("keys/rsa-2048.test-only.pem");

pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

pub fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

enum Pair {
    Rsa(RsaKeyPair),
    Ec(EcdsaKeyPair),
    Ed(Ed25519KeyPair),
}

/// One signing key and the algorithm it signs with.
pub struct Signer {
    pub kid: String,
    pub alg: &'static str,
    pair: Pair,
}

impl Signer {
    /// The RSA test key, signing with `alg` (`RS256` or `PS256`).
    pub fn rsa(kid: &str, alg: &'static str) -> Signer {
        let pem: String = RSA_TEST_KEY.lines().filter(|l| !l.starts_with("-----")).collect();
        let der = base64::engine::general_purpose::STANDARD.decode(pem).unwrap();
        Signer { kid: kid.into(), alg, pair: Pair::Rsa(RsaKeyPair::from_pkcs8(&der).unwrap()) }
    }

    /// A new EC P-256 key (ES256).
    pub fn ec(kid: &str) -> Signer {
        let rng = SystemRandom::new();
        let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
        Signer {
            kid: kid.into(),
            alg: "ES256",
            pair: Pair::Ec(EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).unwrap()),
        }
    }

    /// A new Ed25519 key (EdDSA).
    pub fn ed(kid: &str) -> Signer {
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
        Signer { kid: kid.into(), alg: "EdDSA", pair: Pair::Ed(Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap()) }
    }

    /// The public key as a JWK (without `alg`: its type says what it is for).
    pub fn jwk(&self) -> Value {
        match &self.pair {
            Pair::Rsa(pair) => {
                let public = signature::RsaPublicKeyComponents::<Vec<u8>>::from(pair.public());
                json!({"kty": "RSA", "kid": self.kid, "use": "sig", "n": b64(&public.n), "e": b64(&public.e)})
            }
            Pair::Ec(pair) => {
                let point = pair.public_key().as_ref();
                json!({"kty": "EC", "kid": self.kid, "crv": "P-256", "x": b64(&point[1..33]), "y": b64(&point[33..65])})
            }
            Pair::Ed(pair) => {
                json!({"kty": "OKP", "kid": self.kid, "crv": "Ed25519", "x": b64(pair.public_key().as_ref())})
            }
        }
    }

    /// The public key's bytes as an attacker could find them (the JWK's text).
    pub fn public_bytes(&self) -> Vec<u8> {
        self.jwk().to_string().into_bytes()
    }

    /// A token with `claims`, signed, its header naming this key and algorithm.
    pub fn token(&self, claims: &Value) -> String {
        self.token_with_header(&json!({"alg": self.alg, "kid": self.kid, "typ": "at+jwt"}), claims)
    }

    /// A token with this header, signed with this key whatever the header says.
    pub fn token_with_header(&self, header: &Value, claims: &Value) -> String {
        let input = format!("{}.{}", b64(header.to_string().as_bytes()), b64(claims.to_string().as_bytes()));
        let rng = SystemRandom::new();
        let sig = match &self.pair {
            Pair::Rsa(pair) => {
                let padding: &dyn signature::RsaEncoding =
                    if self.alg == "PS256" { &signature::RSA_PSS_SHA256 } else { &signature::RSA_PKCS1_SHA256 };
                let mut sig = vec![0; pair.public().modulus_len()];
                pair.sign(padding, &rng, input.as_bytes(), &mut sig).unwrap();
                sig
            }
            Pair::Ec(pair) => pair.sign(&rng, input.as_bytes()).unwrap().as_ref().to_vec(),
            Pair::Ed(pair) => pair.sign(input.as_bytes()).as_ref().to_vec(),
        };
        format!("{input}.{}", b64(&sig))
    }
}

/// A token with `alg: none` and no signature.
pub fn unsigned_token(claims: &Value) -> String {
    format!("{}.{}.", b64(br#"{"alg":"none","typ":"JWT"}"#), b64(claims.to_string().as_bytes()))
}

/// A token "signed" with HMAC-SHA256 keyed by `secret` (the key confusion attack).
pub fn hs256_token(secret: &[u8], kid: &str, claims: &Value) -> String {
    let header = json!({"alg": "HS256", "kid": kid, "typ": "JWT"});
    let input = format!("{}.{}", b64(header.to_string().as_bytes()), b64(claims.to_string().as_bytes()));
    let tag = ring::hmac::sign(&ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret), input.as_bytes());
    format!("{input}.{}", b64(tag.as_ref()))
}

/// What the issuer's connections share.
#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    issuer: Mutex<String>,
    jwks: Mutex<Value>,
    /// Whether the metadata names `jwks_uri`.
    no_jwks_uri: AtomicBool,
    jwks_fetches: AtomicUsize,
    metadata_fetches: AtomicUsize,
    /// Introspection: the answer for each token; others are inactive.
    answers: Mutex<HashMap<String, Value>>,
    introspections: AtomicUsize,
    /// `Authorization` values the introspection endpoint was sent.
    basic: Mutex<Vec<String>>,
}

/// The tests' issuer: metadata at `/.well-known/openid-configuration`
/// (RFC 8414's path answers 404, as at many OpenID providers), the JWKS at
/// `/jwks`, introspection at `/introspect`.
pub struct Issuer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl Issuer {
    pub fn start(signers: &[&Signer]) -> Issuer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        *shared.issuer.lock().unwrap() = format!("http://{addr}");
        *shared.jwks.lock().unwrap() = jwks(signers);
        let accept = serve_connections(listener, shared.clone(), |sh| sh.stop.load(Ordering::Acquire), serve);
        Issuer { addr, shared, accept: Some(accept) }
    }

    /// Its issuer identifier, as tokens carry it in `iss`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Publishes these keys from now on (a rotation).
    pub fn set_keys(&self, signers: &[&Signer]) {
        *self.shared.jwks.lock().unwrap() = jwks(signers);
    }

    /// The metadata leaves `jwks_uri` out.
    pub fn drop_jwks_uri(&self) {
        self.shared.no_jwks_uri.store(true, Ordering::Release);
    }

    pub fn jwks_fetches(&self) -> usize {
        self.shared.jwks_fetches.load(Ordering::Acquire)
    }

    pub fn metadata_fetches(&self) -> usize {
        self.shared.metadata_fetches.load(Ordering::Acquire)
    }

    /// Introspection answers `answer` for `token` (with `active` as given).
    pub fn introspects(&self, token: &str, answer: Value) {
        self.shared.answers.lock().unwrap().insert(token.to_string(), answer);
    }

    pub fn introspections(&self) -> usize {
        self.shared.introspections.load(Ordering::Acquire)
    }

    /// The `Authorization` values introspection requests carried.
    pub fn introspection_credentials(&self) -> Vec<String> {
        self.shared.basic.lock().unwrap().clone()
    }

    /// Claims of a good token for `subject`, for audience `aud`, valid for an hour.
    pub fn claims(&self, subject: &str, aud: &str, scope: &str) -> Value {
        json!({"iss": self.url(), "sub": subject, "aud": aud, "scope": scope,
            "iat": now(), "exp": now() + 3600, "jti": format!("{subject}-{}", now_nanos())})
    }
}

fn jwks(signers: &[&Signer]) -> Value {
    json!({"keys": signers.iter().map(|s| s.jwk()).collect::<Vec<_>>()})
}

fn now_nanos() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos()
}

impl Drop for Issuer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

fn serve(mut stream: TcpStream, shared: &Shared) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(end) = head_end(&buf) {
            break end;
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_string();
    let length = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap_or(0)))
        .unwrap_or(0usize);
    while buf.len() < end + length {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let body = String::from_utf8_lossy(&buf[end..end + length]).to_string();
    let line = head.lines().next().unwrap_or_default().to_string();
    let issuer = shared.issuer.lock().unwrap().clone();
    let (status, answer) = if line.starts_with("GET /.well-known/openid-configuration ") {
        shared.metadata_fetches.fetch_add(1, Ordering::AcqRel);
        let mut metadata = json!({"issuer": issuer, "introspection_endpoint": format!("{issuer}/introspect")});
        if !shared.no_jwks_uri.load(Ordering::Acquire) {
            metadata["jwks_uri"] = json!(format!("{issuer}/jwks"));
        }
        (200, metadata)
    } else if line.starts_with("GET /jwks ") {
        shared.jwks_fetches.fetch_add(1, Ordering::AcqRel);
        (200, shared.jwks.lock().unwrap().clone())
    } else if line.starts_with("POST /introspect ") {
        shared.introspections.fetch_add(1, Ordering::AcqRel);
        if let Some(auth) =
            head.lines().find_map(|l| l.strip_prefix("Authorization: ").or(l.strip_prefix("authorization: ")))
        {
            shared.basic.lock().unwrap().push(auth.trim().to_string());
        }
        let token = body.split('&').find_map(|p| p.strip_prefix("token=")).unwrap_or_default();
        let token = token.replace("%2E", ".").replace("%2D", "-");
        (200, shared.answers.lock().unwrap().get(&token).cloned().unwrap_or_else(|| json!({"active": false})))
    } else {
        (404, json!({"error": "not_found"}))
    };
    let body = answer.to_string();
    let _ = write!(
        stream,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}
