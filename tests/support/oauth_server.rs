//! A server that wants OAuth, for mcpgate as its users' OAuth client: one
//! process-local HTTP server on 127.0.0.1 that is both a protected MCP
//! server (`/mcp`: 401 with a `WWW-Authenticate` naming its metadata to a
//! request without a good token; a `whoami` tool that answers the subject
//! of the token it was called with, and `admin`, which needs scope `admin`)
//! and its authorization server: RFC 9728 and RFC 8414 metadata, dynamic
//! registration, an authorization endpoint that approves at once (the test
//! is the browser), a token endpoint (code with PKCE S256, refresh with
//! rotation, token exchange), each counting what it is asked. Faults a test
//! turns on make it misbehave the ways mcpgate must survive. The real one is
//! oidc-provider (scripts/interop/oauth_out.sh).

use std::collections::HashMap;
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

use super::scripted::{serve_connections, serve_requests};

/// Ways the server misbehaves, set by a test.
#[derive(Default, Clone)]
pub struct Faults {
    /// Its metadata has no `code_challenge_methods_supported`.
    pub no_pkce: bool,
    /// Its metadata names another issuer.
    pub wrong_issuer: bool,
    /// Its metadata is this many bytes of padding.
    pub oversized_metadata: Option<usize>,
    /// Its metadata takes this long.
    pub slow_metadata: Option<Duration>,
    /// Its token endpoint answers 503.
    pub token_unavailable: bool,
    /// Its redirects carry this `iss` (not its own).
    pub iss: Option<String>,
    /// It says it takes client ID metadata documents (and fetches the one given).
    pub metadata_documents: bool,
    /// Its refresh grant answers `invalid_grant` (a revoked refresh token).
    pub revoke_refresh: bool,
}

/// What it was asked, counted.
#[derive(Default, Debug)]
pub struct Counts {
    pub metadata: AtomicUsize,
    pub registrations: AtomicUsize,
    pub authorizations: AtomicUsize,
    pub codes: AtomicUsize,
    pub refreshes: AtomicUsize,
    pub exchanges: AtomicUsize,
    pub documents_fetched: AtomicUsize,
    pub calls: AtomicUsize,
}

#[derive(Clone)]
struct Grant {
    subject: String,
    scope: String,
    expires: u64,
    /// The client it was granted to: its refresh token serves that client only.
    client: String,
}

#[derive(Default)]
struct State {
    faults: Faults,
    /// The subject the next authorization approves for.
    next_subject: String,
    access_ttl: u64,
    clients: Vec<String>,
    /// code → (redirect_uri, challenge, resource, grant)
    codes: HashMap<String, (String, String, String, Grant)>,
    access: HashMap<String, Grant>,
    refresh: HashMap<String, Grant>,
    /// The last authorization request's query.
    last_authorize: String,
    /// Every token issued, used or not.
    issued: Vec<String>,
    n: u64,
}

struct Shared {
    stop: AtomicBool,
    addr: SocketAddr,
    state: Mutex<State>,
    counts: Counts,
}

/// The server; stopped and joined when dropped.
pub struct OAuthServer {
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

impl OAuthServer {
    /// Starts it, approving `alice`, with access tokens good for an hour.
    pub fn start() -> OAuthServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let state = State { next_subject: "alice".into(), access_ttl: 3600, ..State::default() };
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            addr,
            state: Mutex::new(state),
            counts: Counts::default(),
        });
        let accept = serve_connections(listener, shared.clone(), |sh| sh.stop.load(Ordering::Acquire), serve);
        OAuthServer { shared, accept: Some(accept) }
    }

    pub fn issuer(&self) -> String {
        format!("http://{}", self.shared.addr)
    }

    /// The protected MCP endpoint.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.shared.addr)
    }

    pub fn counts(&self) -> &Counts {
        &self.shared.counts
    }

    pub fn count(&self, of: fn(&Counts) -> &AtomicUsize) -> usize {
        of(&self.shared.counts).load(Ordering::Acquire)
    }

    pub fn set_faults(&self, faults: Faults) {
        self.shared.state.lock().unwrap().faults = faults;
    }

    pub fn approve_as(&self, subject: &str) {
        self.shared.state.lock().unwrap().next_subject = subject.into();
    }

    pub fn access_ttl(&self, secs: u64) {
        self.shared.state.lock().unwrap().access_ttl = secs;
    }

    /// Every token it issued (access and refresh), to look for in clear.
    pub fn issued(&self) -> Vec<String> {
        self.shared.state.lock().unwrap().issued.clone()
    }

    /// Revokes every access token (a 401 follows, then a refresh).
    pub fn revoke_access(&self) {
        self.shared.state.lock().unwrap().access.clear();
    }

    /// The query of the last authorization request.
    pub fn last_authorize(&self) -> String {
        self.shared.state.lock().unwrap().last_authorize.clone()
    }
}

impl Drop for OAuthServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

fn serve(s: TcpStream, sh: &Shared) {
    serve_requests(s, sh, &sh.stop, answer);
}

fn header(head: &str, name: &str) -> Option<String> {
    head.lines().skip(1).find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_string())
    })
}

fn reply(s: &mut TcpStream, status: &str, mime: &str, extra: &str, body: &[u8]) -> bool {
    let head = format!("HTTP/1.1 {status}\r\nContent-Type: {mime}\r\n{extra}Content-Length: {}\r\n\r\n", body.len());
    s.write_all(&[head.as_bytes(), body].concat()).is_ok()
}

fn json_reply(s: &mut TcpStream, status: &str, value: Value) -> bool {
    reply(s, status, "application/json", "", value.to_string().as_bytes())
}

fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                out.push(u8::from_str_radix(&text[i + 1..i + 3], 16).unwrap_or(b'?'));
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).to_string()
}

fn form(text: &str) -> HashMap<String, String> {
    text.split('&').filter_map(|p| p.split_once('=')).map(|(k, v)| (decode(k), decode(v))).collect()
}

fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn token(st: &mut State, kind: &str) -> String {
    st.n += 1;
    let mut random = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut random).unwrap();
    format!("{kind}-{}-{}", st.n, b64(&random))
}

fn answer(s: &mut TcpStream, head: &str, body: &[u8], sh: &Shared) -> bool {
    let line = head.lines().next().unwrap_or("");
    let mut parts = line.split(' ');
    let method = parts.next().unwrap_or("");
    let target = parts.next().unwrap_or("");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let issuer = format!("http://{}", sh.addr);
    let resource = format!("{issuer}/mcp");
    match (method, path) {
        ("GET", "/.well-known/oauth-protected-resource/mcp" | "/.well-known/oauth-protected-resource") => json_reply(
            s,
            "200 OK",
            json!({ "resource": resource, "authorization_servers": [issuer], "scopes_supported": ["read", "admin"] }),
        ),
        ("GET", "/.well-known/oauth-authorization-server") => {
            sh.counts.metadata.fetch_add(1, Ordering::AcqRel);
            let faults = sh.state.lock().unwrap().faults.clone();
            if let Some(wait) = faults.slow_metadata {
                std::thread::sleep(wait);
            }
            let mut doc = json!({
                "issuer": if faults.wrong_issuer { "http://evil.example.com".to_string() } else { issuer.clone() },
                "authorization_endpoint": format!("{issuer}/authorize"),
                "token_endpoint": format!("{issuer}/token"),
                "registration_endpoint": format!("{issuer}/register"),
                "code_challenge_methods_supported": ["S256"],
                "authorization_response_iss_parameter_supported": true,
                "client_id_metadata_document_supported": faults.metadata_documents,
                "scopes_supported": ["read", "admin"],
            });
            if faults.no_pkce {
                doc.as_object_mut().unwrap().remove("code_challenge_methods_supported");
            }
            if let Some(n) = faults.oversized_metadata {
                doc["padding"] = Value::String("x".repeat(n));
            }
            json_reply(s, "200 OK", doc)
        }
        ("POST", "/register") => {
            sh.counts.registrations.fetch_add(1, Ordering::AcqRel);
            let asked: Value = serde_json::from_slice(body).unwrap_or_default();
            let mut st = sh.state.lock().unwrap();
            let id = token(&mut st, "client");
            st.clients.push(id.clone());
            json_reply(
                s,
                "201 Created",
                json!({ "client_id": id, "redirect_uris": asked["redirect_uris"], "token_endpoint_auth_method": "none" }),
            )
        }
        ("GET", "/authorize") => authorize(s, query, sh, &issuer),
        ("POST", "/token") => token_endpoint(s, &String::from_utf8_lossy(body), sh, &resource),
        ("POST", "/mcp") => mcp(s, head, body, sh, &issuer),
        ("GET" | "DELETE", "/mcp") => reply(s, "405 Method Not Allowed", "text/plain", "Allow: POST\r\n", b""),
        _ => reply(s, "404 Not Found", "text/plain", "", b"no such path"),
    }
}

/// Approves at once for the next subject: a redirect with the code, the state and `iss`.
fn authorize(s: &mut TcpStream, query: &str, sh: &Shared, issuer: &str) -> bool {
    sh.counts.authorizations.fetch_add(1, Ordering::AcqRel);
    let q = form(query);
    let mut st = sh.state.lock().unwrap();
    st.last_authorize = query.to_string();
    let redirect = q.get("redirect_uri").cloned().unwrap_or_default();
    let client = q.get("client_id").cloned().unwrap_or_default();
    let known = st.clients.contains(&client) || client.starts_with("http");
    if client.starts_with("http") {
        // A client ID metadata document: fetched, and its redirect URIs believed.
        drop(st);
        let doc = fetch(&client);
        sh.counts.documents_fetched.fetch_add(1, Ordering::AcqRel);
        if !doc["redirect_uris"].as_array().is_some_and(|r| r.iter().any(|u| u == &Value::String(redirect.clone()))) {
            return reply(s, "400 Bad Request", "text/plain", "", b"redirect_uri not in the client's document");
        }
        st = sh.state.lock().unwrap();
    }
    if !known || q.get("response_type").map(String::as_str) != Some("code") {
        return reply(s, "400 Bad Request", "text/plain", "", b"unknown client or response_type");
    }
    if q.get("code_challenge_method").map(String::as_str) != Some("S256") || !q.contains_key("code_challenge") {
        return reply(s, "400 Bad Request", "text/plain", "", b"PKCE S256 is required");
    }
    let grant = Grant {
        subject: st.next_subject.clone(),
        scope: q.get("scope").cloned().unwrap_or_default(),
        expires: 0,
        client: client.clone(),
    };
    let code = token(&mut st, "code");
    st.codes.insert(
        code.clone(),
        (redirect.clone(), q["code_challenge"].clone(), q.get("resource").cloned().unwrap_or_default(), grant),
    );
    let iss = st.faults.iss.clone().unwrap_or_else(|| issuer.to_string());
    let state = q.get("state").cloned().unwrap_or_default();
    let location = format!("{redirect}?code={}&state={}&iss={}", encode(&code), encode(&state), encode(&iss));
    reply(s, "302 Found", "text/plain", &format!("Location: {location}\r\n"), b"")
}

fn fetch(url: &str) -> Value {
    let agent: ureq::Agent =
        ureq::Agent::config_builder().proxy(None).timeout_global(Some(Duration::from_secs(5))).build().into();
    let text = agent.get(url).call().ok().and_then(|mut r| r.body_mut().read_to_string().ok()).unwrap_or_default();
    serde_json::from_str(&text).unwrap_or_default()
}

fn issue(st: &mut State, grant: &Grant, with_refresh: bool) -> Value {
    let access = token(st, "at");
    st.issued.push(access.clone());
    let ttl = st.access_ttl;
    st.access.insert(access.clone(), Grant { expires: now() + ttl, ..grant.clone() });
    let mut out = json!({ "access_token": access, "token_type": "Bearer", "expires_in": ttl, "scope": grant.scope });
    if with_refresh {
        let refresh = token(st, "rt");
        st.issued.push(refresh.clone());
        st.refresh.insert(refresh.clone(), grant.clone());
        out["refresh_token"] = Value::String(refresh);
    }
    out
}

fn token_endpoint(s: &mut TcpStream, body: &str, sh: &Shared, resource: &str) -> bool {
    let f = form(body);
    let mut st = sh.state.lock().unwrap();
    if st.faults.token_unavailable {
        return reply(s, "503 Service Unavailable", "text/html", "", b"<h1>down for maintenance</h1>");
    }
    let bad = |s: &mut TcpStream, error: &str, description: &str| {
        json_reply(s, "400 Bad Request", json!({ "error": error, "error_description": description }))
    };
    match f.get("grant_type").map(String::as_str) {
        Some("authorization_code") => {
            sh.counts.codes.fetch_add(1, Ordering::AcqRel);
            let Some((redirect, challenge, asked_resource, grant)) = st.codes.remove(f.get("code").map_or("", |c| c))
            else {
                return bad(s, "invalid_grant", "unknown or used code");
            };
            let verifier = f.get("code_verifier").cloned().unwrap_or_default();
            let computed = b64(ring::digest::digest(&ring::digest::SHA256, verifier.as_bytes()).as_ref());
            if computed != challenge {
                return bad(s, "invalid_grant", "PKCE verifier does not match");
            }
            if f.get("redirect_uri") != Some(&redirect) || f.get("resource").map(String::as_str) != Some(resource) {
                return bad(s, "invalid_grant", "redirect_uri or resource differs");
            }
            if asked_resource != resource {
                return bad(s, "invalid_target", "resource differs from the authorization's");
            }
            let out = issue(&mut st, &grant, true);
            json_reply(s, "200 OK", out)
        }
        Some("refresh_token") => {
            sh.counts.refreshes.fetch_add(1, Ordering::AcqRel);
            if st.faults.revoke_refresh {
                return bad(s, "invalid_grant", "refresh token revoked");
            }
            // Rotation: the one used is good no more.
            let Some(grant) = st.refresh.remove(f.get("refresh_token").map_or("", |r| r)) else {
                return bad(s, "invalid_grant", "unknown or used refresh token");
            };
            if f.get("client_id") != Some(&grant.client) {
                return bad(s, "invalid_grant", "the refresh token was issued to another client");
            }
            let out = issue(&mut st, &grant, true);
            json_reply(s, "200 OK", out)
        }
        Some("urn:ietf:params:oauth:grant-type:token-exchange") => {
            sh.counts.exchanges.fetch_add(1, Ordering::AcqRel);
            let subject = f.get("subject_token").cloned().unwrap_or_default();
            // A JWT of the tests' issuer, whom this server trusts: its `sub` (not checked further here).
            let claims = subject
                .split('.')
                .nth(1)
                .and_then(|p| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(p).ok())
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
            let Some(name) = claims.as_ref().and_then(|c| c["sub"].as_str()) else {
                return bad(s, "invalid_grant", "the subject token is not a JWT with a sub");
            };
            if f.get("resource").map(String::as_str) != Some(resource) {
                return bad(s, "invalid_target", "an exchange for another resource");
            }
            let grant = Grant { subject: name.to_string(), scope: "read".into(), expires: 0, client: String::new() };
            let mut out = issue(&mut st, &grant, false);
            out["issued_token_type"] = json!("urn:ietf:params:oauth:token-type:access_token");
            json_reply(s, "200 OK", out)
        }
        _ => bad(s, "unsupported_grant_type", "no"),
    }
}

/// The protected MCP endpoint: stateless JSON answers.
fn mcp(s: &mut TcpStream, head: &str, body: &[u8], sh: &Shared, issuer: &str) -> bool {
    let challenge =
        format!("Bearer resource_metadata=\"{issuer}/.well-known/oauth-protected-resource/mcp\", scope=\"read\"");
    let bearer = header(head, "authorization").and_then(|v| v.strip_prefix("Bearer ").map(str::to_string));
    let message: Value = serde_json::from_slice(body).unwrap_or_default();
    if message["params"]["name"] == "slow" {
        // Its token is looked at only after a while: another request may refresh it meanwhile.
        std::thread::sleep(Duration::from_millis(400));
    }
    let grant = {
        let st = sh.state.lock().unwrap();
        bearer.as_deref().and_then(|t| st.access.get(t)).filter(|g| g.expires > now()).cloned()
    };
    let Some(grant) = grant else {
        let error = if bearer.is_some() { ", error=\"invalid_token\"" } else { "" };
        return reply(
            s,
            "401 Unauthorized",
            "application/json",
            &format!("WWW-Authenticate: {challenge}{error}\r\n"),
            b"{\"error\":\"unauthorized\"}",
        );
    };
    let id = message["id"].clone();
    let ok = |s: &mut TcpStream, result: Value| {
        json_reply(s, "200 OK", json!({"jsonrpc": "2.0", "id": id, "result": result}))
    };
    match (message["method"].as_str().unwrap_or(""), message["params"]["name"].as_str().unwrap_or("")) {
        ("initialize", _) => ok(
            s,
            json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}, "serverInfo": {"name": "protected", "version": "1"}}),
        ),
        (m, _) if m.starts_with("notifications/") => reply(s, "202 Accepted", "text/plain", "", b""),
        ("tools/list", _) => ok(
            s,
            json!({"tools": [
                {"name": "whoami", "inputSchema": {"type": "object"}},
                {"name": "admin", "inputSchema": {"type": "object"}},
                {"name": "slow", "inputSchema": {"type": "object"}},
            ]}),
        ),
        ("tools/call", "whoami" | "slow") => {
            sh.counts.calls.fetch_add(1, Ordering::AcqRel);
            ok(s, json!({"content": [{"type": "text", "text": grant.subject}]}))
        }
        ("tools/call", "admin") if !grant.scope.split(' ').any(|x| x == "admin") => reply(
            s,
            "403 Forbidden",
            "application/json",
            &format!(
                "WWW-Authenticate: Bearer error=\"insufficient_scope\", scope=\"read admin\", resource_metadata=\"{issuer}/.well-known/oauth-protected-resource/mcp\"\r\n"
            ),
            b"{}",
        ),
        ("tools/call", "admin") => {
            ok(s, json!({"content": [{"type": "text", "text": format!("admin {}", grant.subject)}]}))
        }
        _ => json_reply(s, "200 OK", json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "no"}})),
    }
}

/// A browser for the sign-in pages: it follows redirects by hand, and
/// keeps the cookies mcpgate sets (one jar per browser).
#[derive(Default)]
pub struct Browser {
    cookies: Vec<(String, String)>,
}

/// Where a browser's walk ended: the last status and page, and the URLs it went through.
pub struct Walk {
    pub status: u16,
    pub page: String,
    pub visited: Vec<String>,
}

impl Browser {
    /// Opens `url` and follows redirects (at most 10), posting nothing.
    pub fn open(&mut self, url: &str) -> Walk {
        self.go("GET", url, None)
    }

    /// Posts `form` (encoded) to `url`, then follows redirects.
    pub fn post(&mut self, url: &str, form: &str) -> Walk {
        self.go("POST", url, Some(form.to_string()))
    }

    fn go(&mut self, mut method: &str, url: &str, mut body: Option<String>) -> Walk {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .proxy(None)
            .max_redirects(0)
            .timeout_global(Some(Duration::from_secs(30)))
            .build()
            .into();
        let mut url = url.to_string();
        let mut visited = Vec::new();
        for _ in 0..10 {
            visited.push(url.clone());
            let cookie = self.cookies.iter().map(|(n, v)| format!("{n}={v}")).collect::<Vec<_>>().join("; ");
            let mut response = if method == "POST" {
                let mut r = agent.post(&url).header("Content-Type", "application/x-www-form-urlencoded");
                if !cookie.is_empty() {
                    r = r.header("Cookie", &cookie);
                }
                r.send(body.take().unwrap_or_default().as_bytes()).unwrap()
            } else {
                let mut r = agent.get(&url);
                if !cookie.is_empty() {
                    r = r.header("Cookie", &cookie);
                }
                r.call().unwrap()
            };
            for set in response.headers().get_all("set-cookie") {
                let text = set.to_str().unwrap_or("");
                if let Some((name, value)) = text.split(';').next().and_then(|p| p.split_once('=')) {
                    self.cookies.retain(|(n, _)| n != name);
                    self.cookies.push((name.to_string(), value.to_string()));
                }
            }
            let status = response.status().as_u16();
            if (300..400).contains(&status) {
                let location = response.headers().get("location").unwrap().to_str().unwrap().to_string();
                url = if location.starts_with('/') {
                    let origin: String = url.splitn(4, '/').take(3).collect::<Vec<_>>().join("/");
                    format!("{origin}{location}")
                } else {
                    location
                };
                method = "GET";
                continue;
            }
            let page = response.body_mut().read_to_string().unwrap_or_default();
            return Walk { status, page, visited };
        }
        panic!("more than 10 redirects from {url}");
    }
}
