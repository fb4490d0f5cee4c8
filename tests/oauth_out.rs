//! mcpgate as each user's OAuth client toward a server that wants OAuth
//! (`"oauth": {}`), against the tests' own server (tests/support/
//! oauth_server.rs: a protected MCP server and its authorization server)
//! and a browser that walks the sign-in pages: the link each kind of client
//! gets, the sign-in, the user's subject at the server, a restart, a
//! refresh, logout, and every bad answer of an authorization server.
//! The real parts (oidc-provider, FastMCP, the SDKs' clients, Chromium)
//! are in scripts/interop/oauth_out.sh.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::*;

/// A config in front of `server` as `prot`, with `oauth` and a state file in `dir`.
fn config_with(server: &OAuthServer, dir: &TempDir, oauth: Value) -> Value {
    let mut c = config(&[("prot", server.url())]);
    c["mcpServers"]["prot"]["oauth"] = oauth;
    c["state_file"] = json!(dir.0.join("state.json"));
    c
}

/// The tests' server, a scratch directory for the state, and mcpgate in front of the server as
/// `prot` with `oauth`.
fn gate_for(oauth: Value) -> (OAuthServer, TempDir, Gate) {
    let server = OAuthServer::start();
    let dir = TempDir::new();
    let gate = Gate::start_checked(&config_with(&server, &dir, oauth));
    (server, dir, gate)
}

/// [`gate_for`] `{}`, and a session of a URL-elicitation client whose user signed in.
fn signed_in() -> (OAuthServer, TempDir, Gate, Client) {
    let (server, dir, gate) = gate_for(json!({}));
    let mut client = url_client(&gate);
    assert_eq!(Browser::default().open(&link_of(&client.call_tool("prot__whoami", json!({})))).status, 200);
    (server, dir, gate, client)
}

/// The sign-in link of an error mcpgate answered a call with.
fn link_of(reply: &Reply) -> String {
    assert_eq!(reply.error_code(), -32042, "{}", reply.body);
    reply.body["error"]["data"]["elicitations"][0]["url"].as_str().expect("a link").to_string()
}

/// The text of a tool's result.
fn text(reply: &Reply) -> String {
    reply.result()["content"][0]["text"].as_str().unwrap_or_default().to_string()
}

/// A session of a 2025-11-25 client that declared URL elicitation.
fn url_client(gate: &Gate) -> Client {
    let mut client = gate.client();
    client.initialize_with(json!({ "elicitation": { "url": {} } }));
    client
}

/// Every file under `dir`, read (nothing of a key file is compared: it is no token).
fn files_text(dir: &std::path::Path) -> String {
    let mut out = String::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            out.push_str(&String::from_utf8_lossy(&std::fs::read(&path).unwrap()));
        }
    }
    out
}

#[test]
fn a_user_signs_in_once_keeps_the_sign_in_across_a_restart_refreshes_and_signs_out() {
    let server = OAuthServer::start();
    let dir = TempDir::new();
    let config = config_with(&server, &dir, json!({}));
    let mut gate = Gate::start_checked(&config);
    let mut client = url_client(&gate);

    // The first call: a link, to mcpgate's own connect page.
    let link = link_of(&client.call_tool("prot__whoami", json!({})));
    assert!(link.starts_with(&format!("http://{}/oauth/connect?e=", gate.addr)), "{link}");
    let walk = Browser::default().open(&link);
    assert_eq!(walk.status, 200, "{}", walk.page);
    assert!(walk.page.contains("signed in to server `prot`"), "{}", walk.page);
    assert!(walk.visited.iter().any(|u| u.starts_with(&format!("{}/authorize?", server.issuer()))));
    let asked = server.last_authorize();
    for part in ["code_challenge_method=S256", "resource=http%3A%2F%2F127.0.0.1", "response_type=code"] {
        assert!(asked.contains(part), "the authorization request lacks {part}: {asked}");
    }
    assert_eq!(text(&client.call_tool("prot__whoami", json!({}))), "alice");
    assert_eq!(server.count(|c| &c.registrations), 1, "registered once");

    // After a restart: the same user's call works, without consent or registration.
    assert!(gate.terminate(Duration::from_secs(10)).is_some());
    let gate = Gate::start_checked(&config);
    let mut client = url_client(&gate);
    assert_eq!(text(&client.call_tool("prot__whoami", json!({}))), "alice");
    assert_eq!(server.count(|c| &c.authorizations), 1, "no second consent");
    assert_eq!(server.count(|c| &c.registrations), 1, "the registration was kept");

    // The server stops taking the access token: one refresh, and the call goes through.
    server.revoke_access();
    assert_eq!(text(&client.call_tool("prot__whoami", json!({}))), "alice");
    assert_eq!(server.count(|c| &c.refreshes), 1);

    // No token in clear: in mcpgate's files, its log, its status page and /metrics.
    let status = get_text(&format!("http://{}/status.json", gate.addr));
    let metrics = get_text(&format!("http://{}/metrics", gate.addr));
    let page = get_text(&format!("http://{}/status", gate.addr));
    let seen = [files_text(&dir.0), gate.stderr(), status.clone(), metrics.clone(), page];
    let issued = server.issued();
    assert!(issued.len() >= 3, "{issued:?}");
    for token in &issued {
        for (what, text) in ["files", "log", "status.json", "metrics", "status page"].iter().zip(&seen) {
            assert!(!text.contains(token.as_str()), "a token is in clear in the {what}");
        }
    }
    let view: Value = serde_json::from_str(&status).unwrap();
    assert_eq!(view["servers"]["prot"]["oauth"]["users"], 1, "{}", view["servers"]["prot"]);
    assert!(view["servers"]["prot"]["oauth"]["refreshes"].as_u64() >= Some(1));
    assert!(metrics.contains("mcpgate_server_oauth_users{server=\"prot\"} 1"), "{metrics}");
    let mode = |name: &str| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(dir.0.join(name)).unwrap().permissions().mode() & 0o777
    };
    assert_eq!((mode("state.json.oauth"), mode("oauth.key")), (0o600, 0o600));

    // Signed out: the next call asks again.
    let agent = http_agent(Some(Duration::from_secs(10)));
    let mut out = agent
        .post(&format!("http://{}/oauth/logout", gate.addr))
        .header("Content-Type", "application/json")
        .send(json!({ "server": "prot" }).to_string().as_bytes())
        .unwrap();
    let said: Value = serde_json::from_str(&out.body_mut().read_to_string().unwrap()).unwrap();
    assert_eq!(said["forgot"], true, "{said}");
    link_of(&client.call_tool("prot__whoami", json!({})));
}

#[test]
fn each_kind_of_client_gets_the_link_in_the_form_it_can_show() {
    let (_server, _dir, gate) = gate_for(json!({}));
    // A client that declared no URL elicitation: a tool error with the link in its text.
    let mut plain = gate.open_session();
    let reply = plain.call_tool("prot__whoami", json!({}));
    assert_eq!(reply.result()["isError"], true, "{}", reply.body);
    assert!(text(&reply).contains("/oauth/connect?e="), "{}", text(&reply));
    // A 2026-07-28 client that declared it: an input request, whose retry after the sign-in works.
    let modern = Modern::new(&gate.url());
    let mut meta = era_meta(json!({ "elicitation": { "url": {} } }));
    let asked =
        modern.send(json!(1), "tools/call", json!({ "name": "prot__whoami", "arguments": {}, "_meta": meta }), &[]);
    let result = asked.result();
    assert_eq!(result["resultType"], "input_required", "{}", asked.body);
    let (key, request) = result["inputRequests"].as_object().unwrap().iter().next().unwrap();
    assert_eq!(
        (request["method"].as_str(), request["params"]["mode"].as_str()),
        (Some("elicitation/create"), Some("url"))
    );
    let link = request["params"]["url"].as_str().unwrap();
    assert_eq!(Browser::default().open(link).status, 200);
    meta = era_meta(json!({ "elicitation": { "url": {} } }));
    let retry = modern.send(
        json!(2),
        "tools/call",
        json!({
            "name": "prot__whoami", "arguments": {}, "_meta": meta,
            "inputResponses": { key: { "action": "accept" } },
            "requestState": result["requestState"],
        }),
        &[],
    );
    assert_eq!(retry.result()["content"][0]["text"], "alice", "{}", retry.body);
}

#[test]
fn a_callback_without_the_browser_cookie_or_state_or_twice_is_refused_saying_why() {
    let (_server, _dir, gate) = gate_for(json!({}));
    let mut client = url_client(&gate);
    let link = link_of(&client.call_tool("prot__whoami", json!({})));
    // The link's browser gets to the authorization server; the callback is taken to another browser.
    let agent = http_agent(Some(Duration::from_secs(10)));
    let no_redirects: ureq::Agent =
        ureq::Agent::config_builder().http_status_as_error(false).max_redirects(0).proxy(None).build().into();
    let to_as = no_redirects.get(&link).call().unwrap();
    let authorize = to_as.headers().get("location").unwrap().to_str().unwrap().to_string();
    let at_as = no_redirects.get(&authorize).call().unwrap();
    let callback = at_as.headers().get("location").unwrap().to_str().unwrap().to_string();
    let mut other = agent.get(&callback).call().unwrap();
    let page = other.body_mut().read_to_string().unwrap();
    assert_eq!(other.status(), 400, "{page}");
    assert!(page.contains("another browser"), "{page}");
    let page = agent.get(&callback).call().unwrap().body_mut().read_to_string().unwrap();
    assert!(page.contains("used already"), "a replayed state: {page}");
    let page = agent
        .get(&format!("http://{}/oauth/callback?code=x", gate.addr))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    assert!(page.contains("no `state`"), "{page}");
    let page = agent
        .get(&format!("http://{}/oauth/callback?code=x&state=made-up", gate.addr))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    assert!(page.contains("is unknown"), "{page}");
    // None of it signed anyone in; the user's own browser still can, with the same link.
    link_of(&client.call_tool("prot__whoami", json!({})));
    assert_eq!(Browser::default().open(&link).status, 200);
    assert_eq!(text(&client.call_tool("prot__whoami", json!({}))), "alice");
}

#[test]
fn an_authorization_server_that_misbehaves_gets_a_clear_error_and_other_servers_go_on() {
    let cases: Vec<(&str, Faults, &str)> = vec![
        ("no PKCE", Faults { no_pkce: true, ..Faults::default() }, "PKCE"),
        ("another issuer", Faults { wrong_issuer: true, ..Faults::default() }, "RFC 8414"),
        (
            "oversized metadata",
            Faults { oversized_metadata: Some(400 * 1024), ..Faults::default() },
            "more than 256 KiB",
        ),
        ("slow metadata", Faults { slow_metadata: Some(Duration::from_secs(12)), ..Faults::default() }, "within 10 s"),
    ];
    let fixture = Fixture::start("fx", &[]);
    for (what, faults, says) in cases {
        let server = OAuthServer::start();
        server.set_faults(faults);
        let dir = TempDir::new();
        let mut c = config_with(&server, &dir, json!({}));
        c["mcpServers"]["fx"] = json!({ "url": fixture.url() });
        let gate = Gate::start_checked(&c);
        let mut client = url_client(&gate);
        let started = std::time::Instant::now();
        let reply = client.call_tool("prot__whoami", json!({}));
        assert!(started.elapsed() < Duration::from_secs(40), "{what}: bounded in time");
        let message = reply.error_message();
        assert!(message.contains("prot") && message.contains(says), "{what}: {message}");
        assert_eq!(client.call_tool("fx__echo", json!({ "text": "hi" })).status, 200, "{what}: the others go on");
    }
}

#[test]
fn an_iss_mismatch_or_a_token_endpoint_that_answers_5xx_ends_the_sign_in_with_a_clear_page() {
    for (faults, says) in [
        (Faults { iss: Some("http://evil.example.com".into()), ..Faults::default() }, "RFC 9207"),
        (Faults { token_unavailable: true, ..Faults::default() }, "HTTP 503"),
    ] {
        let server = OAuthServer::start();
        server.set_faults(faults);
        let dir = TempDir::new();
        let gate = Gate::start_checked(&config_with(&server, &dir, json!({})));
        let mut client = url_client(&gate);
        let walk = Browser::default().open(&link_of(&client.call_tool("prot__whoami", json!({}))));
        assert_eq!(walk.status, 400, "{}", walk.page);
        assert!(walk.page.contains(says), "{}", walk.page);
        link_of(&client.call_tool("prot__whoami", json!({})));
        assert_eq!(server.count(|c| &c.calls), 0);
    }
}

#[test]
fn two_users_each_get_their_own_token_and_a_link_opened_by_the_other_is_refused() {
    let server = OAuthServer::start();
    let dir = TempDir::new();
    let mut c = config_with(&server, &dir, json!({}));
    c["auth"] = json!({ "tokens": [
        { "token": "alice-token-0123456789", "name": "alice" },
        { "token": "bob-token-0123456789ab", "name": "bob" },
    ]});
    let gate = Gate::start_checked(&c);
    let mut alice = gate.client_with_token("alice-token-0123456789");
    alice.initialize_with(json!({ "elicitation": { "url": {} } }));
    let mut bob = gate.client_with_token("bob-token-0123456789ab");
    bob.initialize_with(json!({ "elicitation": { "url": {} } }));
    let alices_link = link_of(&alice.call_tool("prot__whoami", json!({})));
    // Bob opens Alice's link, and shows his own token: refused.
    let id = alices_link.split("e=").nth(1).unwrap();
    let mut bobs_browser = Browser::default();
    let form = bobs_browser.open(&alices_link);
    assert!(form.page.contains("name=\"token\""), "a form asks for the token: {}", form.page);
    let walk = bobs_browser
        .post(&format!("http://{}/oauth/connect", gate.addr), &format!("e={id}&token=bob-token-0123456789ab"));
    assert_eq!(walk.status, 403, "{}", walk.page);
    assert!(walk.page.contains("another user"), "{}", walk.page);
    assert_eq!(server.count(|c| &c.authorizations), 0, "nobody got to the authorization server");
    // Each signs in with their own link.
    let mut alices_browser = Browser::default();
    alices_browser.open(&alices_link);
    server.approve_as("alice");
    let walk = alices_browser
        .post(&format!("http://{}/oauth/connect", gate.addr), &format!("e={id}&token=alice-token-0123456789"));
    assert_eq!(walk.status, 200, "{}", walk.page);
    let bobs_link = link_of(&bob.call_tool("prot__whoami", json!({})));
    let bob_id = bobs_link.split("e=").nth(1).unwrap();
    server.approve_as("bob");
    let mut browser = Browser::default();
    browser.open(&bobs_link);
    let walk = browser
        .post(&format!("http://{}/oauth/connect", gate.addr), &format!("e={bob_id}&token=bob-token-0123456789ab"));
    assert_eq!(walk.status, 200, "{}", walk.page);
    for _ in 0..3 {
        assert_eq!(text(&alice.call_tool("prot__whoami", json!({}))), "alice");
        assert_eq!(text(&bob.call_tool("prot__whoami", json!({}))), "bob");
    }
}

#[test]
fn a_server_that_wants_more_scope_asks_the_user_again_for_it() {
    let (server, _dir, _gate, mut client) = signed_in();
    assert_eq!(text(&client.call_tool("prot__whoami", json!({}))), "alice");
    // `admin` needs scope `admin`: the server's 403 names it, and the user is asked for it.
    let link = link_of(&client.call_tool("prot__admin", json!({})));
    Browser::default().open(&link);
    assert!(server.last_authorize().contains("admin"), "{}", server.last_authorize());
    assert_eq!(text(&client.call_tool("prot__admin", json!({}))), "admin alice");
}

#[test]
fn a_revoked_refresh_token_sends_the_user_back_to_consent_once() {
    let (server, _dir, _gate, mut client) = signed_in();
    server.set_faults(Faults { revoke_refresh: true, ..Faults::default() });
    server.revoke_access();
    let reply = client.call_tool("prot__whoami", json!({}));
    link_of(&reply);
    assert_eq!(server.count(|c| &c.refreshes), 1, "one refresh, then consent: nothing loops");
}

#[test]
fn a_server_that_trusts_mcpgates_issuer_gets_an_exchanged_token_of_its_own() {
    let server = OAuthServer::start();
    let signer = Signer::ec("k1");
    let issuer = Issuer::start(&[&signer]);
    let dir = TempDir::new();
    let oauth = json!({ "token_exchange": true, "client_id": "mcpgate", "authorization_server": server.issuer() });
    let mut c = config_with(&server, &dir, oauth);
    let resource = "http://127.0.0.1:1/mcp";
    c["auth"] = json!({ "oauth": { "issuer": issuer.url(), "resource": resource } });
    let gate = Gate::start_checked(&c);
    let token = signer.token(&json!({ "iss": issuer.url(), "aud": resource, "sub": "carol", "exp": now() + 600 }));
    let mut client = gate.client_with_token(&token);
    client.initialize();
    assert_eq!(text(&client.call_tool("prot__whoami", json!({}))), "carol");
    assert_eq!(text(&client.call_tool("prot__whoami", json!({}))), "carol");
    assert_eq!(server.count(|c| &c.exchanges), 1, "exchanged once, kept until it expires");
    assert_eq!(server.count(|c| &c.authorizations), 0, "no consent");
    let log = gate.stderr();
    assert!(!log.contains(&token), "the user's own token is not in the log");
    for issued in server.issued() {
        assert!(!log.contains(&issued));
    }
}

#[test]
fn with_ask_elicitation_the_call_waits_for_the_user_and_goes_on_by_itself() {
    let server = OAuthServer::start();
    let dir = TempDir::new();
    let mut c = config_with(&server, &dir, json!({}));
    c["oauth_client"] = json!({ "ask": "elicitation" });
    let gate = Gate::start_checked(&c);
    let client = url_client(&gate);
    let mut asked = None;
    let (events, response) = client.call_streaming("prot__whoami", json!({}), |request| {
        assert_eq!(request["method"], "elicitation/create", "{request}");
        assert_eq!(request["params"]["mode"], "url", "{request}");
        asked = request["params"]["elicitationId"].as_str().map(str::to_string);
        // The user opens the link, then the client says it did.
        let walk = Browser::default().open(request["params"]["url"].as_str().unwrap());
        assert_eq!(walk.status, 200, "{}", walk.page);
        Some(json!({ "action": "accept" }))
    });
    assert_eq!(response["result"]["content"][0]["text"], "alice", "{response}");
    let done = events.iter().find(|e| e["method"] == "notifications/elicitation/complete");
    assert_eq!(done.map(|e| e["params"]["elicitationId"].clone()), asked.map(Value::from), "{events:?}");
}

#[test]
fn mcpgate_login_signs_in_from_a_host_without_a_browser_and_logout_forgets() {
    use std::io::{BufRead, Write};
    let (_server, _dir, gate) = gate_for(json!({}));
    let base = format!("http://{}", gate.addr);
    let mut login = std::process::Command::new(env!("CARGO_BIN_EXE_mcpgate"))
        .args(["login", "prot", "--url", &base])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(login.stdout.take().unwrap());
    let mut link = None;
    for _ in 0..20 {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap() == 0 {
            break;
        }
        if let Some(at) = line.trim().strip_prefix(&format!("{base}/oauth/connect")) {
            link = Some(format!("{base}/oauth/connect{at}"));
            break;
        }
    }
    let link = link.expect("mcpgate login prints a link");
    // Elsewhere, a browser: it ends on the callback, which asks for its address to be pasted.
    let walk = Browser::default().open(&link);
    assert!(walk.page.contains("mcpgate login"), "{}", walk.page);
    let callback = walk.visited.last().unwrap().clone();
    assert!(callback.starts_with(&format!("{base}/oauth/callback?")), "{callback}");
    writeln!(login.stdin.take().unwrap(), "{callback}").unwrap();
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut out, &mut rest);
    let status = wait_exit(&mut login, Duration::from_secs(20)).expect("mcpgate login ends");
    assert!(status.success(), "{rest}");
    assert!(rest.contains("signed in to `prot`"), "{rest}");
    let mut client = url_client(&gate);
    assert_eq!(text(&client.call_tool("prot__whoami", json!({}))), "alice");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcpgate"))
        .args(["logout", "prot", "--url", &base])
        .output()
        .unwrap();
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("signed out"), "{out:?}");
    link_of(&client.call_tool("prot__whoami", json!({})));
}

/// What one user's stored token costs mcpgate's memory, for the notes (not a check: it prints).
#[test]
#[ignore = "a measurement: cargo test --test oauth_out resident -- --ignored --nocapture"]
fn resident_memory_per_stored_token() {
    const USERS: usize = 400;
    const WARM: usize = 20;
    let server = OAuthServer::start();
    let dir = TempDir::new();
    let mut c = config_with(&server, &dir, json!({}));
    let tokens: Vec<Value> = (0..USERS).map(|n| json!({ "token": format!("user-token-{n:08}-0123456789") })).collect();
    c["auth"] = json!({ "tokens": tokens });
    c["oauth_client"] = json!({ "link_timeout_secs": 30 });
    c["max_sessions"] = json!(USERS + 10);
    let gate = Gate::start_checked(&c);
    let mut before = 0;
    let started = std::time::Instant::now();
    for n in 0..USERS {
        if n == WARM {
            before = rss_bytes(gate.pid());
        }
        let token = format!("user-token-{n:08}-0123456789");
        let mut client = gate.client_with_token(&token);
        client.initialize_with(json!({ "elicitation": { "url": {} } }));
        let link = link_of(&client.call_tool("prot__whoami", json!({})));
        let id = link.split("e=").nth(1).unwrap().to_string();
        let mut browser = Browser::default();
        browser.open(&link);
        let walk = browser.post(&format!("http://{}/oauth/connect", gate.addr), &format!("e={id}&token={token}"));
        assert_eq!(walk.status, 200, "{}", walk.page);
        assert_eq!(client.delete(), 200);
    }
    let signed_in = rss_bytes(gate.pid());
    // The finished sign-ins expire (link_timeout_secs 30): what is left is the tokens.
    std::thread::sleep(Duration::from_secs(40));
    let after = rss_bytes(gate.pid());
    let store = std::fs::metadata(dir.0.join("state.json.oauth")).unwrap().len();
    let per = |rss: u64| (rss.saturating_sub(before)) as f64 / (USERS - WARM) as f64;
    println!(
        "{USERS} users signed in in {:.1} s; RSS {before} -> {signed_in} (with their finished sign-ins) -> {after} \
         (tokens alone): {:.0} and {:.0} bytes per user; the store: {:.0} bytes per user",
        started.elapsed().as_secs_f64(),
        per(signed_in),
        per(after),
        store as f64 / USERS as f64
    );
    assert_eq!(gate.status()["servers"]["prot"]["oauth"]["users"], USERS);
}

#[test]
fn a_key_file_others_may_read_stops_mcpgate_naming_it() {
    use std::os::unix::fs::PermissionsExt;
    let server = OAuthServer::start();
    let dir = TempDir::new();
    let key = dir.0.join("oauth.key");
    std::fs::write(&key, "ab".repeat(32)).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut c = config_with(&server, &dir, json!({}));
    c["oauth_client"] = json!({ "key_file": key });
    let path = dir.write_config(&c);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcpgate"))
        .args(["--config", path.to_str().unwrap(), "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("oauth_client.key_file") && said.contains("chmod 600"), "{said}");
    assert!(!dir.0.join("state.json.oauth").exists(), "nothing was written with it");
}

#[test]
fn calls_that_find_the_token_refused_at_once_share_one_refresh() {
    let (server, _dir, _gate, mut client) = signed_in();
    assert_eq!(text(&client.call_tool("prot__whoami", json!({}))), "alice");
    server.revoke_access();
    let answers: Vec<String> = std::thread::scope(|scope| {
        let calls: Vec<_> = (0..8)
            .map(|_| {
                let mut client = client.same_session();
                scope.spawn(move || {
                    let reply = client.call_tool("prot__whoami", json!({}));
                    reply.body["result"]["content"][0]["text"].as_str().unwrap_or(&reply.body.to_string()).to_string()
                })
            })
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    assert!(answers.iter().all(|a| a == "alice"), "{answers:?}");
    assert_eq!(server.count(|c| &c.refreshes), 1, "one refresh for all of them");
    // A call whose token is refused after another call refreshed it goes again with the new one.
    server.revoke_access();
    let slow = std::thread::scope(|scope| {
        let mut other = client.same_session();
        let slow = scope.spawn(move || text(&other.call_tool("prot__slow", json!({}))));
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(text(&client.call_tool("prot__whoami", json!({}))), "alice");
        slow.join().unwrap()
    });
    assert_eq!(slow, "alice");
    assert_eq!(server.count(|c| &c.refreshes), 2);
}

#[test]
fn until_its_user_signs_in_a_server_lists_one_tool_that_gives_the_link() {
    let (_server, _dir, gate) = gate_for(json!({}));
    let mut client = url_client(&gate);
    let names = client.tool_names();
    assert_eq!(names, ["prot__sign_in"], "one tool of mcpgate's stands for the server's");
    let link = link_of(&client.call_tool("prot__sign_in", json!({})));
    let stream = client.open_stream();
    assert_eq!(Browser::default().open(&link).status, 200);
    let changed = stream.next_with_method("notifications/tools/list_changed", Duration::from_secs(10));
    assert!(changed.is_some(), "the session hears that its tools changed");
    stream.close();
    let mut names = client.tool_names();
    names.sort();
    assert_eq!(names, ["prot__admin", "prot__slow", "prot__whoami"]);
}

#[test]
fn a_server_that_takes_client_metadata_documents_gets_mcpgates_own_and_no_registration() {
    let server = OAuthServer::start();
    server.set_faults(Faults { metadata_documents: true, ..Faults::default() });
    let dir = TempDir::new();
    let gate = Gate::start_checked(&config_with(&server, &dir, json!({})));
    let document = get_json(&format!("http://{}/oauth/client.json", gate.addr));
    assert_eq!(document["client_id"], format!("http://{}/oauth/client.json", gate.addr));
    assert_eq!(document["redirect_uris"][0], format!("http://{}/oauth/callback", gate.addr));
    let mut client = url_client(&gate);
    assert_eq!(Browser::default().open(&link_of(&client.call_tool("prot__whoami", json!({})))).status, 200);
    assert_eq!(text(&client.call_tool("prot__whoami", json!({}))), "alice");
    assert!(server.last_authorize().contains("client_id=http%3A%2F%2F127.0.0.1"), "{}", server.last_authorize());
    assert_eq!(server.count(|c| &c.documents_fetched), 1);
    assert_eq!(server.count(|c| &c.registrations), 0, "the document is the client: nothing registered");
}

#[test]
fn a_server_without_oauth_that_wants_it_is_named_with_the_key_that_turns_it_on() {
    let server = OAuthServer::start();
    let gate = Gate::start_checked(&config(&[("prot", server.url())]));
    let mut client = gate.open_session();
    let reply = client.call_tool("prot__whoami", json!({}));
    let message = reply.error_message();
    assert!(message.contains("prot") && message.contains("add \"oauth\": {}"), "{message}");
    let log = gate.stderr_once(|log| log.contains("add \"oauth\": {}"));
    assert!(log.contains("server `prot`") && log.contains("oauth-protected-resource/mcp"), "{log}");
}
