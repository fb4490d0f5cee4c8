//! Who may use mcpgate: bearer tokens, their server lists, sessions bound
//! to their token, Origin checks, and secrets kept out of what is shown.

mod support;

use serde_json::json;
use support::{Fixture, Gate, TempDir, config, raw_request};

const TOKEN_ALL: &str = "all-servers-token-0123456789";
const TOKEN_ALPHA: &str = "alpha-only-token-0123456789";

fn gate_with_tokens(alpha: &Fixture, beta: &Fixture) -> Gate {
    let mut c = config(&[("alpha", alpha.url()), ("beta", beta.url())]);
    c["auth"] = json!({ "tokens": [
        { "token": TOKEN_ALL },
        { "token": TOKEN_ALPHA, "servers": ["alpha"] },
    ]});
    Gate::start(&c)
}

#[test]
fn without_a_valid_token_mcp_answers_401_with_a_bearer_challenge() {
    let (alpha, beta) = (Fixture::start("alpha", &[]), Fixture::start("beta", &[]));
    let gate = gate_with_tokens(&alpha, &beta);
    let init = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}"#;
    let headers = [("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream")];
    let missing = raw_request(gate.addr, "POST", "/mcp", &headers, init);
    assert_eq!((missing.status, missing.header("www-authenticate")), (401, Some("Bearer")), "{missing:?}");
    let wrong_token = format!("Bearer {}x", TOKEN_ALL);
    let wrong =
        raw_request(gate.addr, "POST", "/mcp", &[headers[0], headers[1], ("Authorization", &wrong_token)], init);
    assert_eq!(wrong.status, 401, "{wrong:?}");
    assert_eq!(wrong.header("www-authenticate"), Some("Bearer error=\"invalid_token\""));
    assert!(wrong.json()["error"]["message"].as_str().unwrap().contains("not valid"), "{wrong:?}");
    assert_eq!(alpha.count("initialize"), 0, "nothing reached a server");
    let mut ok = gate.client_with_token(TOKEN_ALL);
    ok.initialize();
    assert_eq!(ok.tool_text("beta__echo", json!({"text": "in"})), "in");
    // /healthz needs no token; the status pages answer loopback clients.
    assert_eq!(raw_request(gate.addr, "GET", "/healthz", &[], b"").status, 200);
    assert_eq!(raw_request(gate.addr, "GET", "/status.json", &[], b"").status, 200);
}

#[test]
fn a_token_limited_to_some_servers_sees_and_reaches_only_those() {
    let (alpha, beta) = (Fixture::start("alpha", &[]), Fixture::start("beta", &[]));
    let gate = gate_with_tokens(&alpha, &beta);
    let mut limited = gate.client_with_token(TOKEN_ALPHA);
    limited.initialize();
    let names = limited.tool_names();
    assert!(names.iter().all(|n| n.starts_with("alpha__")), "{names:?}");
    assert!(names.contains(&"alpha__echo".to_string()));
    let refused = limited.call_tool("beta__echo", json!({"text": "x"}));
    assert_eq!(refused.error_code(), -32602, "{refused:?}");
    assert!(refused.error_message().contains("unknown tool `beta__echo`"), "{refused:?}");
    assert_eq!(beta.count("initialize"), 0, "no downstream session was opened on a server the token cannot reach");
    let mut full = gate.client_with_token(TOKEN_ALL);
    full.initialize();
    assert!(full.tool_names().iter().any(|n| n.starts_with("beta__")));
}

#[test]
fn a_session_answers_only_to_the_token_that_created_it() {
    let (alpha, beta) = (Fixture::start("alpha", &[]), Fixture::start("beta", &[]));
    let gate = gate_with_tokens(&alpha, &beta);
    let mut owner = gate.client_with_token(TOKEN_ALL);
    owner.initialize();
    let mut other = gate.client_with_token(TOKEN_ALPHA);
    other.session = owner.session.clone();
    let stolen = other.call_tool("alpha__echo", json!({"text": "x"}));
    assert_eq!(stolen.status, 404, "another token cannot use the session: {stolen:?}");
    assert_eq!(other.delete(), 404, "nor end it");
    assert_eq!(owner.tool_text("alpha__echo", json!({"text": "mine"})), "mine");
}

#[test]
fn tokens_can_live_in_a_separate_file_and_a_bad_one_is_refused_at_start() {
    let (alpha, beta) = (Fixture::start("alpha", &[]), Fixture::start("beta", &[]));
    let dir = TempDir::new();
    let file = dir.0.join("tokens.json");
    std::fs::write(&file, json!([{ "token": TOKEN_ALPHA, "servers": ["alpha"] }]).to_string()).unwrap();
    let mut c = config(&[("alpha", alpha.url()), ("beta", beta.url())]);
    c["auth"] = json!({ "tokens_file": file });
    let gate = Gate::start(&c);
    let mut ok = gate.client_with_token(TOKEN_ALPHA);
    ok.initialize();
    assert_eq!(ok.tool_text("alpha__echo", json!({"text": "f"})), "f");
    // A short token, or a server that does not exist, stops mcpgate from starting.
    std::fs::write(&file, json!([{ "token": "short", "servers": ["alpha"] }]).to_string()).unwrap();
    let path = dir.0.join("bad.json");
    std::fs::write(&path, c.to_string()).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcpgate"))
        .arg("--check")
        .arg("--config")
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("auth.tokens_file"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_page_from_another_origin_gets_403_and_local_and_listed_origins_pass() {
    let alpha = Fixture::start("alpha", &[]);
    let mut c = config(&[("alpha", alpha.url())]);
    c["allowed_origins"] = json!(["https://app.example.com"]);
    let gate = Gate::start(&c);
    let init = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}"#;
    let send = |origin: &str, host: &str| {
        let headers = [
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("Origin", origin),
            ("Host", host),
        ];
        raw_request(gate.addr, "POST", "/mcp", &headers, init)
    };
    // The conformance suite's DNS rebinding check sends exactly this.
    let evil = send("http://evil.example.com", "evil.example.com");
    assert_eq!(evil.status, 403, "{evil:?}");
    assert!(evil.json()["error"]["message"].as_str().unwrap().contains("evil.example.com"), "{evil:?}");
    for origin in ["http://localhost:6274", "http://127.0.0.1", "https://app.example.com"] {
        assert_eq!(send(origin, "localhost").status, 200, "{origin}");
    }
    assert_eq!(
        raw_request(gate.addr, "GET", "/status.json", &[("Origin", "http://evil.example.com")], b"").status,
        403
    );
    assert_eq!(alpha.count("initialize"), 3);
}

#[test]
fn secrets_from_the_environment_never_show_on_the_status_page_or_in_errors() {
    // A server whose URL carries a secret, and which is down, so that its errors quote the URL.
    let secret = "s3cr3t-query-token-9f8e7d";
    let mut c = config(&[("down", "http://127.0.0.1:9/mcp?key=${MCPGATE_TEST_SECRET}".to_string())]);
    c["mcpServers"]["down"]["headers"] = json!({ "X-Api-Key": "${MCPGATE_TEST_SECRET}" });
    let dir = TempDir::new();
    let path = dir.0.join("mcpgate.json");
    std::fs::write(&path, c.to_string()).unwrap();
    let gate = Gate::start_with(&c, |mut command| {
        command.env("MCPGATE_TEST_SECRET", secret);
        command
    });
    let mut client = gate.client();
    client.initialize();
    let reply = client.call_tool("down__anything", json!({}));
    let status = gate.status().to_string();
    let html = support::get_text(&format!("http://{}/status", gate.addr));
    for (what, text) in
        [("error", reply.body.to_string()), ("status.json", status), ("status", html), ("log", gate.stderr())]
    {
        assert!(!text.contains(secret), "{what} shows the secret: {text}");
    }
    assert!(gate.status()["servers"]["down"]["url"].as_str().unwrap().contains("key=***"));
}
