//! mcpgate as an OAuth 2.1 resource server (`auth.oauth`), against the
//! tests' own issuer (tests/support/oauth.rs: their own keys, a JWKS and an
//! introspection endpoint on 127.0.0.1) and the fixture: discovery from the
//! 401, every check a token must pass and what each refusal says, scopes,
//! key rotation, sessions bound to their subject, the caches, and the
//! client's token never reaching a server. The real authorization server
//! (oidc-provider) and real clients are in scripts/interop/oauth.sh.

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{
    Fixture, Gate, Issuer, RawReply, Signer, b64, config, hs256_token, now, raw_request, read_state, unsigned_token,
    wait_for_state, wait_until, with_state_file,
};

/// The public URL of `/mcp` the gate is told it has (its audience).
const RESOURCE: &str = "http://127.0.0.1:8780/mcp";
const METADATA: &str = "http://127.0.0.1:8780/.well-known/oauth-protected-resource/mcp";
const INIT: &[u8] =
    br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}"#;

/// A gate in front of `alpha` and `beta` taking tokens of `issuer` that carry scope `mcp`.
fn gate_for(issuer: &Issuer, alpha: &Fixture, beta: &Fixture, oauth: Value) -> Gate {
    let mut c = config(&[("alpha", alpha.url()), ("beta", beta.url())]);
    c["auth"] = json!({"oauth": {"issuer": issuer.url(), "resource": RESOURCE, "required_scopes": ["mcp"]}});
    for (key, value) in oauth.as_object().unwrap() {
        c["auth"]["oauth"][key] = value.clone();
    }
    Gate::start_checked(&c)
}

fn init(gate: &Gate, token: Option<&str>) -> RawReply {
    let bearer = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream")];
    if let Some(bearer) = &bearer {
        headers.push(("Authorization", bearer));
    }
    raw_request(gate.addr, "POST", "/mcp", &headers, INIT)
}

/// Lines of the log at info and above (the tests run mcpgate at debug) that contain `text`.
fn lines_with(log: &str, text: &str) -> usize {
    // `2026-12-05T21:55:34.446Z DEBUG mcpgate::...`: the level is the second word.
    log.lines().filter(|l| l.split_whitespace().nth(1) != Some("DEBUG") && l.contains(text)).count()
}

/// mcpgate's log once a line with each of `texts` is in it: the test reads
/// the log on a thread of its own, which on a loaded host lags the answer
/// that followed the line (a fresh clone's CI with two CPU hogs saw the
/// 503 before its log line).
fn log_once_it_has(gate: &Gate, texts: &[&str]) -> String {
    wait_until(Duration::from_secs(10), || {
        let log = gate.stderr();
        texts.iter().all(|text| lines_with(&log, text) > 0)
    });
    gate.stderr()
}

#[test]
fn a_401_names_the_metadata_which_names_the_issuer_and_the_scopes() {
    let key = Signer::rsa("rsa-1", "RS256");
    let issuer = Issuer::start(&[&key]);
    let (alpha, beta) = Fixture::alpha_and_beta();
    let gate = gate_for(&issuer, &alpha, &beta, json!({"server_scopes": {"beta": "files"}}));
    let missing = init(&gate, None);
    assert_eq!(missing.status, 401, "{missing:?}");
    assert_eq!(
        missing.header("www-authenticate"),
        Some(format!("Bearer scope=\"mcp\", resource_metadata=\"{METADATA}\"").as_str()),
        "{missing:?}"
    );
    // Both places a client looks (RFC 9728 path insertion first, then the root), from any page.
    for path in ["/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"] {
        let doc = raw_request(gate.addr, "GET", path, &[("Origin", "https://claude.ai")], b"");
        assert_eq!(doc.status, 200, "{path}: {doc:?}");
        assert_eq!(doc.header("access-control-allow-origin"), Some("*"));
        let doc = doc.json();
        assert_eq!(doc["resource"], RESOURCE, "{doc}");
        assert_eq!(doc["authorization_servers"], json!([issuer.url()]), "{doc}");
        assert_eq!(doc["scopes_supported"], json!(["mcp", "files"]), "{doc}");
        assert_eq!(doc["bearer_methods_supported"], json!(["header"]), "{doc}");
    }
    assert_eq!(raw_request(gate.addr, "GET", "/.well-known/oauth-protected-resource/other", &[], b"").status, 404);
    assert_eq!(alpha.count("initialize"), 0, "nothing reached a server");
    // Without `auth.oauth` there is no such document.
    let plain = Gate::start(&config(&[("alpha", alpha.url())]));
    assert_eq!(raw_request(plain.addr, "GET", "/.well-known/oauth-protected-resource", &[], b"").status, 404);
}

#[test]
fn tokens_signed_with_rs256_ps256_es256_and_eddsa_reach_the_servers() {
    let (rs, ps) = (Signer::rsa("rsa-1", "RS256"), Signer::rsa("rsa-1", "PS256"));
    let (es, ed) = (Signer::ec("ec-1"), Signer::ed("ed-1"));
    let issuer = Issuer::start(&[&rs, &es, &ed]);
    let (alpha, beta) = Fixture::alpha_and_beta();
    let gate = gate_for(&issuer, &alpha, &beta, json!({}));
    for signer in [&rs, &ps, &es, &ed] {
        let token = signer.token(&issuer.claims("alice", RESOURCE, "mcp"));
        let mut client = gate.client_with_token(&token);
        client.initialize();
        assert_eq!(client.tool_text("beta__echo", json!({"text": signer.alg})), signer.alg);
        assert_eq!(client.delete(), 200);
    }
    assert_eq!(issuer.jwks_fetches(), 1, "one fetch of the JWKS served every token");
    assert_eq!(issuer.metadata_fetches(), 1, "jwks_uri came from the issuer's metadata, once");
}

/// `token` with its claims replaced by `claims`, the signature kept.
fn tampered(token: &str, claims: &Value) -> String {
    let parts: Vec<&str> = token.split('.').collect();
    format!("{}.{}.{}", parts[0], b64(claims.to_string().as_bytes()), parts[2])
}

#[test]
fn each_refused_token_gets_401_invalid_token_saying_why_and_the_reason_is_logged() {
    let rsa = Signer::rsa("rsa-1", "RS256");
    let ec = Signer::ec("ec-1");
    let issuer = Issuer::start(&[&rsa, &ec]);
    let (alpha, beta) = Fixture::alpha_and_beta();
    let gate = gate_for(&issuer, &alpha, &beta, json!({}));
    let good = issuer.claims("alice", RESOURCE, "mcp");
    let with = |key: &str, value: Value| {
        let mut claims = good.clone();
        match value {
            Value::Null => {
                claims.as_object_mut().unwrap().remove(key);
            }
            value => claims[key] = value,
        }
        claims
    };
    let unpublished = Signer::ec("not-published");
    let cases: Vec<(&str, String, String)> = vec![
        ("expired", rsa.token(&with("exp", json!(now() - 120))), "it expired 1".into()),
        ("not yet valid", rsa.token(&with("nbf", json!(now() + 600))), "not valid for".into()),
        (
            "wrong audience",
            rsa.token(&with("aud", json!("https://other.example.com/mcp"))),
            format!("audience `https://other.example.com/mcp` not in [{RESOURCE}]"),
        ),
        (
            "wrong issuer",
            rsa.token(&with("iss", json!("https://evil.example.com"))),
            "issuer `https://evil.example.com`".into(),
        ),
        ("unknown key", unpublished.token(&good), "no key `not-published` in the issuer's JWKS".into()),
        ("alg none", unsigned_token(&good), "alg `none` is refused".into()),
        (
            "HS256 signed with the public key",
            hs256_token(&rsa.public_bytes(), "rsa-1", &good),
            "(HMAC) is refused".into(),
        ),
        (
            "key type not matching alg",
            rsa.token_with_header(&json!({"alg": "ES256", "kid": "rsa-1"}), &good),
            "alg `ES256` does not fit key `rsa-1`, an RSA key".into(),
        ),
        (
            "signature of other claims",
            tampered(&rsa.token(&good), &with("sub", json!("mallory"))),
            "does not verify".into(),
        ),
        ("no subject", ec.token(&with("sub", Value::Null)), "no `sub`".into()),
        ("no expiry", ec.token(&with("exp", Value::Null)), "no `exp`".into()),
        ("opaque, no introspection", "opaque-token-0123456789".into(), "not a JWT".into()),
    ];
    for (what, token, reason) in &cases {
        let reply = init(&gate, Some(token));
        assert_eq!(reply.status, 401, "{what}: {reply:?}");
        let challenge = reply.header("www-authenticate").unwrap_or_default();
        assert!(challenge.starts_with("Bearer error=\"invalid_token\", error_description=\""), "{what}: {challenge}");
        assert!(challenge.contains(reason.as_str()), "{what}: `{reason}` not in {challenge}");
        assert!(
            challenge.ends_with(&format!("scope=\"mcp\", resource_metadata=\"{METADATA}\"")),
            "{what}: {challenge}"
        );
        let message = reply.json()["error"]["message"].as_str().unwrap_or_default().to_string();
        assert!(message.contains(reason.as_str()), "{what}: {message}");
    }
    assert_eq!(alpha.count("initialize") + beta.count("initialize"), 0, "no refused token reached a server");
    let reasons = ["it expired", "not in [", "issuer `https://evil", "no key `not-published`", "alg `none`"];
    let log = log_once_it_has(&gate, &reasons);
    for reason in reasons {
        assert_eq!(lines_with(&log, reason), 1, "one log line for `{reason}`:\n{log}");
    }
    assert_eq!(gate.status()["auth"]["refused"], cases.len(), "{}", gate.status());
    assert_eq!(issuer.jwks_fetches(), 1, "the unknown key did not make it fetch again within 10 s");
}

#[test]
fn a_token_without_a_required_scope_gets_403_insufficient_scope() {
    let key = Signer::ed("ed-1");
    let issuer = Issuer::start(&[&key]);
    let (alpha, beta) = Fixture::alpha_and_beta();
    let gate = gate_for(&issuer, &alpha, &beta, json!({"scopes_supported": ["mcp", "profile"]}));
    let token = key.token(&issuer.claims("alice", RESOURCE, "profile"));
    let reply = init(&gate, Some(&token));
    assert_eq!(reply.status, 403, "{reply:?}");
    let challenge = reply.header("www-authenticate").unwrap_or_default();
    assert!(challenge.starts_with("Bearer error=\"insufficient_scope\""), "{challenge}");
    assert!(challenge.contains("the token lacks scope `mcp`"), "{challenge}");
    assert!(challenge.contains("scope=\"mcp\""), "{challenge}");
    assert_eq!(alpha.count("initialize"), 0);
}

#[test]
fn a_server_needing_a_scope_is_invisible_without_it_and_a_call_to_it_gets_403_naming_the_scope() {
    let key = Signer::ec("ec-1");
    let issuer = Issuer::start(&[&key]);
    let (alpha, beta) = Fixture::alpha_and_beta();
    let gate = gate_for(&issuer, &alpha, &beta, json!({"server_scopes": {"beta": "files"}}));
    let narrow = key.token(&issuer.claims("alice", RESOURCE, "mcp"));
    let mut client = gate.client_with_token(&narrow);
    client.initialize();
    let names = client.tool_names();
    assert!(names.iter().all(|n| n.starts_with("alpha__")) && !names.is_empty(), "{names:?}");
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "beta__echo", "arguments": {"text": "x"}}});
    let session = client.session.clone().unwrap();
    let bearer = format!("Bearer {narrow}");
    let headers = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("Authorization", bearer.as_str()),
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    let refused = raw_request(gate.addr, "POST", "/mcp", &headers, call.to_string().as_bytes());
    assert_eq!(refused.status, 403, "{refused:?}");
    let challenge = refused.header("www-authenticate").unwrap_or_default();
    assert!(challenge.starts_with("Bearer error=\"insufficient_scope\""), "{challenge}");
    assert!(challenge.contains("scope=\"mcp files\""), "the scopes to ask for, the required one kept: {challenge}");
    assert!(challenge.contains("server `beta`, which needs scope `files`"), "{challenge}");
    assert_eq!(beta.count("initialize"), 0, "no downstream session on a server the token cannot reach");
    // Stepped up: a token with the scope sees and reaches it, in a session of its own.
    let wide = key.token(&issuer.claims("alice", RESOURCE, "mcp files"));
    let mut stepped = gate.client_with_token(&wide);
    stepped.session = client.session.clone();
    assert_eq!(
        stepped.call_tool("beta__echo", json!({"text": "x"})).status,
        404,
        "the narrow token's session is not its"
    );
    stepped.session = None;
    stepped.initialize();
    assert!(stepped.tool_names().iter().any(|n| n == "beta__echo"));
    assert_eq!(stepped.tool_text("beta__echo", json!({"text": "wide"})), "wide");
}

#[test]
fn a_rotated_key_is_fetched_without_a_restart_and_unknown_keys_refetch_at_most_every_10_s() {
    let old = Signer::ec("old");
    let new = Signer::ed("new");
    let issuer = Issuer::start(&[&old]);
    let (alpha, beta) = Fixture::alpha_and_beta();
    let gate = gate_for(&issuer, &alpha, &beta, json!({}));
    let mut client = gate.client_with_token(&old.token(&issuer.claims("alice", RESOURCE, "mcp")));
    client.initialize();
    let first_fetch = Instant::now();
    assert_eq!(issuer.jwks_fetches(), 1);
    issuer.set_keys(&[&old, &new]);
    // A burst of tokens naming keys not fetched yet: refused, and no fetch.
    for i in 0..20 {
        let made_up = Signer::ec(&format!("made-up-{i}"));
        let reply = init(&gate, Some(&made_up.token(&issuer.claims("mallory", RESOURCE, "mcp"))));
        assert_eq!(reply.status, 401, "{reply:?}");
    }
    assert_eq!(issuer.jwks_fetches(), 1, "unknown keys refetch at most every 10 s");
    // Past the bound, the new key is fetched on its first use.
    std::thread::sleep((first_fetch + Duration::from_millis(10_500)).saturating_duration_since(Instant::now()));
    let mut rotated = gate.client_with_token(&new.token(&issuer.claims("alice", RESOURCE, "mcp")));
    rotated.initialize();
    assert_eq!(rotated.tool_text("alpha__echo", json!({"text": "rotated"})), "rotated");
    assert_eq!(issuer.jwks_fetches(), 2, "one more fetch for the new key");
    assert_eq!(client.tool_text("alpha__echo", json!({"text": "old"})), "old", "the old key's token still works");
}

#[test]
fn a_session_answers_only_to_its_subject_even_with_another_valid_token() {
    let key = Signer::rsa("rsa-1", "RS256");
    let issuer = Issuer::start(&[&key]);
    let (alpha, beta) = Fixture::alpha_and_beta();
    let gate = gate_for(&issuer, &alpha, &beta, json!({}));
    let mut alice = gate.client_with_token(&key.token(&issuer.claims("alice", RESOURCE, "mcp")));
    alice.initialize();
    let mut bob = gate.client_with_token(&key.token(&issuer.claims("bob", RESOURCE, "mcp")));
    bob.session = alice.session.clone();
    assert_eq!(bob.call_tool("alpha__echo", json!({"text": "x"})).status, 404, "another subject cannot use it");
    assert_eq!(bob.delete(), 404, "nor end it");
    // Alice with a new token (a refresh: another jti, the same subject) keeps her session.
    let mut refreshed = gate.client_with_token(&key.token(&issuer.claims("alice", RESOURCE, "mcp")));
    refreshed.session = alice.session.clone();
    assert_eq!(refreshed.tool_text("alpha__echo", json!({"text": "mine"})), "mine");
    assert_eq!(refreshed.delete(), 200);
    assert_eq!(gate.status()["auth"]["oauth_checked"], 3, "three tokens, each checked once");
}

#[test]
fn a_restored_session_stays_bound_to_its_subject_and_the_state_file_keeps_no_token() {
    let key = Signer::rsa("rsa-1", "RS256");
    let issuer = Issuer::start(&[&key]);
    let (alpha, beta) = Fixture::alpha_and_beta();
    let (_state, path, mut c) = with_state_file(config(&[("alpha", alpha.url()), ("beta", beta.url())]));
    c["auth"] = json!({"oauth": {"issuer": issuer.url(), "resource": RESOURCE}});
    let alice_token = key.token(&issuer.claims("alice", RESOURCE, "mcp"));
    let mut first = Gate::start(&c);
    let mut alice = first.client_with_token(&alice_token);
    alice.initialize();
    assert_eq!(alice.tool_text("alpha__echo", json!({"text": "before"})), "before");
    wait_for_state(&path, 1, 2);
    let saved = std::fs::read_to_string(&path).unwrap();
    assert!(
        !saved.contains(&alice_token) && !saved.contains("alice"),
        "neither token nor subject in the file: {saved}"
    );
    assert!(read_state(&path)["sessions"][0]["principal_sha256"].as_str().is_some_and(|h| h.len() == 64), "{saved}");
    first.kill();

    let gate = Gate::start(&c);
    alice.url = gate.url();
    let mut bob = gate.client_with_token(&key.token(&issuer.claims("bob", RESOURCE, "mcp")));
    bob.session = alice.session.clone();
    assert_eq!(bob.call_tool("alpha__echo", json!({"text": "x"})).status, 404, "another subject after the restart");
    assert_eq!(alice.tool_text("alpha__echo", json!({"text": "after"})), "after", "its subject keeps it");
    let sessions = gate.status()["sessions"]["list"].clone();
    assert_eq!(sessions[0]["token"], "OAuth", "{sessions}");
    assert_eq!(alice.delete(), 200);
}

#[test]
fn the_clients_token_never_reaches_a_server_which_gets_only_its_own_credentials() {
    let key = Signer::ec("ec-1");
    let issuer = Issuer::start(&[&key]);
    let (alpha, beta) = Fixture::alpha_and_beta();
    let mut c = config(&[("alpha", alpha.url()), ("beta", beta.url())]);
    c["mcpServers"]["alpha"]["headers"] = json!({"Authorization": "Bearer alpha-own-credential"});
    c["auth"] = json!({"tokens": [{"token": "static-token-0123456789"}], "oauth": {"issuer": issuer.url(), "resource": RESOURCE}});
    let gate = Gate::start_checked(&c);
    let jwt = key.token(&issuer.claims("alice", RESOURCE, "mcp"));
    for token in [jwt.as_str(), "static-token-0123456789"] {
        let mut client = gate.client_with_token(token);
        client.initialize();
        assert_eq!(client.tool_text("alpha__echo", json!({"text": "a"})), "a");
        assert_eq!(client.tool_text("beta__echo", json!({"text": "b"})), "b");
        assert_eq!(client.delete(), 200);
    }
    assert!(wait_until(Duration::from_secs(5), || alpha.count("delete") == 2 && beta.count("delete") == 2));
    assert_eq!(
        alpha.stats()["authorizations"],
        json!(["Bearer alpha-own-credential"]),
        "only its own: {}",
        alpha.stats()
    );
    assert_eq!(beta.stats()["authorizations"], json!([""]), "none at all: {}", beta.stats());
}

#[test]
fn an_unreachable_jwks_gets_503_and_one_log_line_with_the_reason() {
    let key = Signer::ec("ec-1");
    let issuer = Issuer::start(&[&key]);
    let (alpha, beta) = Fixture::alpha_and_beta();
    let gate = gate_for(&issuer, &alpha, &beta, json!({"jwks_uri": "http://127.0.0.1:9/jwks"}));
    let token = key.token(&issuer.claims("alice", RESOURCE, "mcp"));
    for _ in 0..5 {
        let reply = init(&gate, Some(&token));
        assert_eq!(reply.status, 503, "the token may be good: {reply:?}");
        assert_eq!(reply.header("retry-after"), Some("5"));
        assert!(reply.body.contains("cannot check tokens now"), "{reply:?}");
    }
    let unreachable = "cannot fetch the issuer's signing keys: http://127.0.0.1:9/jwks";
    let log = log_once_it_has(&gate, &[unreachable]);
    assert_eq!(lines_with(&log, unreachable), 1, "{log}");
    assert_eq!(gate.status()["auth"]["jwks_fetches"], 1, "retried at most every 10 s: {}", gate.status());
}

#[test]
fn an_issuer_whose_metadata_has_no_jwks_uri_is_named_in_the_log() {
    let key = Signer::ec("ec-1");
    let issuer = Issuer::start(&[&key]);
    issuer.drop_jwks_uri();
    let (alpha, beta) = Fixture::alpha_and_beta();
    let gate = gate_for(&issuer, &alpha, &beta, json!({}));
    let reply = init(&gate, Some(&key.token(&issuer.claims("alice", RESOURCE, "mcp"))));
    assert_eq!(reply.status, 503, "{reply:?}");
    let line = format!("{}/.well-known/openid-configuration has no `jwks_uri`: set auth.oauth.jwks_uri", issuer.url());
    let log = log_once_it_has(&gate, &[&line]);
    assert_eq!(lines_with(&log, &line), 1, "{log}");
}

#[test]
fn an_opaque_token_is_introspected_once_and_an_inactive_one_is_refused() {
    let key = Signer::ec("ec-1");
    let issuer = Issuer::start(&[&key]);
    let (alpha, beta) = Fixture::alpha_and_beta();
    let introspection = json!({"url": format!("{}/introspect", issuer.url()), "client_id": "mcpgate", "client_secret": "s3cret-of-mcpgate"});
    let gate = gate_for(&issuer, &alpha, &beta, json!({"introspection": introspection}));
    let opaque = "opaque-alice-0123456789";
    issuer.introspects(
        opaque,
        json!({"active": true, "iss": issuer.url(), "sub": "alice", "aud": RESOURCE, "scope": "mcp", "exp": now() + 3600}),
    );
    let mut client = gate.client_with_token(opaque);
    client.initialize();
    for i in 0..5 {
        assert_eq!(client.tool_text("alpha__echo", json!({"text": i.to_string()})), i.to_string());
    }
    assert_eq!(issuer.introspections(), 1, "kept for a while, not asked per request");
    assert_eq!(issuer.introspection_credentials(), vec![format!("Basic {}", "bWNwZ2F0ZTpzM2NyZXQtb2YtbWNwZ2F0ZQ==")]);
    issuer.introspects(
        "opaque-elsewhere-0123",
        json!({"active": true, "iss": issuer.url(), "sub": "x", "aud": "https://other.example.com", "scope": "mcp"}),
    );
    for (token, reason) in [("opaque-revoked-0123456", "not active"), ("opaque-elsewhere-0123", "not in [")] {
        let reply = init(&gate, Some(token));
        assert_eq!(reply.status, 401, "{reply:?}");
        assert!(reply.header("www-authenticate").unwrap_or_default().contains(reason), "{reply:?}");
    }
    assert!(!gate.stderr().contains("s3cret-of-mcpgate"), "the client secret is never logged");
}
