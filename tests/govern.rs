//! Governing calls (issue 42): the audit log, read back record by record against the calls
//! made, its rotation cap, a disk that refuses it; and rate limits per user, which one user
//! passing leaves the other untouched, with 429 and `Retry-After`, a JSON-RPC error in a
//! batch, and buckets a new `initialize` does not refill.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{Client, Fixture, Gate, TempDir, config, wait_until};

const ALICE: &str = "alice-token-0123456789abcdef";
const BOB: &str = "bob-token-0123456789abcdefgh";

fn records(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn session_of(gate: &Gate, token: &str) -> Client {
    let mut client = gate.client_with_token(token);
    client.initialize();
    client
}

#[test]
fn the_audit_log_has_one_record_per_call_and_session_with_principal_and_outcome() {
    let fixture = Fixture::start("alpha", &[]);
    let dir = TempDir::new();
    let path = dir.0.join("audit.jsonl");
    let mut c = config(&[("alpha", fixture.url())]);
    c["auth"] = json!({"tokens": [{"token": ALICE, "name": "alice"}, {"token": BOB}]});
    c["audit"] = json!({"file": path, "arguments": true});
    let gate = Gate::start_checked(&c);
    let mut alice = session_of(&gate, ALICE);
    let mut bob = session_of(&gate, BOB);
    assert_eq!(alice.tool_text("alpha__echo", json!({"text": "hi", "password": "hunter2"})), "hi");
    let failed = bob.call_tool("alpha__fail", json!({}));
    assert_eq!(failed.result()["isError"], true);
    let traced = json!({"name": "alpha__echo", "arguments": {"text": "t"},
        "_meta": {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}});
    alice.request("tools/call", traced);
    assert_eq!(alice.delete(), 200);
    let done = wait_until(Duration::from_secs(5), || records(&path).len() >= 6);
    let all = records(&path);
    assert!(done, "{all:#?}");
    let calls: Vec<&Value> = all.iter().filter(|r| r["event"] == "call").collect();
    assert_eq!(calls.len(), 3, "one record per call: {all:#?}");
    let first = calls[0];
    assert_eq!(first["principal"], json!({"token": "alice"}), "{first}");
    assert_eq!(
        (first["server"].as_str(), first["tool"].as_str(), first["outcome"].as_str()),
        (Some("alpha"), Some("echo"), Some("ok"))
    );
    assert_eq!(first["session"], alice.session.clone().unwrap().as_str());
    assert_eq!(first["arguments"], json!({"text": "hi", "password": "***"}), "redacted by key");
    assert!(
        first["duration_ms"].is_number()
            && first["bytes_in"].as_u64() > Some(0)
            && first["bytes_out"].as_u64() > Some(0)
    );
    assert!(calls[1]["principal"]["token"].as_str().is_some_and(|t| t.starts_with("sha256:")), "{}", calls[1]);
    assert_eq!(calls[1]["outcome"], "tool_error");
    assert_eq!(calls[2]["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    let opened = all.iter().filter(|r| r["event"] == "session_open").count();
    let closed: Vec<&Value> = all.iter().filter(|r| r["event"] == "session_close").collect();
    assert_eq!(opened, 2, "{all:#?}");
    assert_eq!(closed.len(), 1, "{all:#?}");
    assert_eq!(closed[0]["reason"], "client_delete");
    assert!(!std::fs::read_to_string(&path).unwrap().contains("hunter2"), "a secret in the audit log");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
}

#[test]
fn a_rotated_audit_file_never_passes_its_cap() {
    let fixture = Fixture::start("alpha", &[]);
    let dir = TempDir::new();
    let path = dir.0.join("audit.jsonl");
    let mut c = config(&[("alpha", fixture.url())]);
    c["audit"] = json!({"file": path, "max_bytes": 131072, "files": 2, "arguments": true});
    let gate = Gate::start_checked(&c);
    let mut client = gate.open_session();
    let text = "y".repeat(4000);
    for _ in 0..120 {
        client.tool_text("alpha__echo", json!({"text": text}));
    }
    wait_until(Duration::from_secs(5), || gate.status()["audit"]["written"].as_u64() >= Some(121));
    let status = gate.status();
    assert!(status["audit"]["rotations"].as_u64() >= Some(2), "{}", status["audit"]);
    for name in ["audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"] {
        let len = std::fs::metadata(dir.0.join(name)).map(|m| m.len()).unwrap_or(0);
        assert!(len > 0 && len <= 131072, "{name}: {len} bytes");
    }
    assert!(!dir.0.join("audit.jsonl.3").exists(), "more files than `files` keeps");
}

#[test]
fn a_disk_that_refuses_the_audit_log_drops_records_and_never_a_call() {
    let fixture = Fixture::start("alpha", &[]);
    let dir = TempDir::new();
    let path = dir.0.join("audit.jsonl");
    // Every write to it fails with ENOSPC, as on a full disk.
    std::os::unix::fs::symlink("/dev/full", &path).unwrap();
    let mut c = config(&[("alpha", fixture.url())]);
    c["audit"] = json!({"file": path});
    let gate = Gate::start_checked(&c);
    let mut client = gate.open_session();
    for i in 0..20 {
        assert_eq!(client.tool_text("alpha__echo", json!({"text": format!("{i}")})), format!("{i}"));
    }
    let dropped = wait_until(Duration::from_secs(5), || gate.status()["audit"]["dropped"].as_u64() >= Some(21));
    assert!(dropped, "{}", gate.status()["audit"]);
    assert_eq!(gate.status()["audit"]["written"], 0);
}

fn limited_gate(fixture: &Fixture, audit: &std::path::Path) -> Gate {
    let mut c = config(&[("alpha", fixture.url())]);
    c["auth"] = json!({"tokens": [{"token": ALICE, "name": "alice"}, {"token": BOB, "name": "bob"}]});
    c["rate_limit"] =
        json!({"per_user": {"per_minute": 6, "burst": 3}, "tools": {"alpha__add": {"per_minute": 1, "burst": 1}}});
    c["audit"] = json!({"file": audit});
    Gate::start_checked(&c)
}

#[test]
fn a_user_over_the_limit_gets_429_with_retry_after_and_the_other_user_does_not() {
    let fixture = Fixture::start("alpha", &[]);
    let dir = TempDir::new();
    let audit = dir.0.join("audit.jsonl");
    let gate = limited_gate(&fixture, &audit);
    let mut alice = session_of(&gate, ALICE);
    let mut bob = session_of(&gate, BOB);
    for _ in 0..3 {
        assert_eq!(alice.tool_text("alpha__echo", json!({"text": "a"})), "a");
    }
    let over = alice.call_tool("alpha__echo", json!({"text": "a"}));
    assert_eq!(over.status, 429, "{over:?}");
    assert_eq!(over.body["error"]["code"], -32029, "{}", over.body);
    let message = over.error_message();
    assert!(message.contains("rate_limit.per_user") && message.contains("retry in"), "{message}");
    assert!(
        over.body["error"]["data"]["retryAfterSecs"].as_u64().is_some_and(|s| (1..=10).contains(&s)),
        "{}",
        over.body
    );
    // A new session of the same user starts with the same empty bucket.
    let mut again = session_of(&gate, ALICE);
    assert_eq!(again.call_tool("alpha__echo", json!({"text": "a"})).status, 429, "initialize refilled the bucket");
    for _ in 0..3 {
        assert_eq!(bob.tool_text("alpha__echo", json!({"text": "b"})), "b", "bob is not limited by alice's calls");
    }
    let status = gate.status();
    assert!(status["calls"]["rate_limited"].as_u64() >= Some(2), "{}", status["calls"]);
    assert_eq!(fixture.received("tools/call"), 6, "refused calls reached the server");
    // The audit log has the refusals too, with the limit.
    let two = || records(&audit).iter().filter(|r| r["outcome"] == "rate_limited").count() == 2;
    wait_until(Duration::from_secs(5), two);
    let refused: Vec<Value> = records(&audit).into_iter().filter(|r| r["outcome"] == "rate_limited").collect();
    assert_eq!(refused.len(), 2, "{refused:#?}");
    let alices = |r: &Value| r["principal"] == json!({"token": "alice"}) && r["tool"] == "alpha__echo";
    assert!(refused.iter().all(alices), "{refused:#?}");
}

#[test]
fn inside_a_batch_a_call_over_the_limit_is_a_json_rpc_error() {
    let fixture = Fixture::start("alpha", &[]);
    let dir = TempDir::new();
    let gate = limited_gate(&fixture, &dir.0.join("audit.jsonl"));
    let mut alice = gate.client_with_token(ALICE);
    let mut params = support::initialize_params();
    params["protocolVersion"] = json!("2025-03-26");
    let reply = alice.request("initialize", params);
    alice.session = reply.session.clone();
    let call = |id: u64| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "alpha__add", "arguments": {"a": 1, "b": 2}}});
    let batch = json!([call(1), call(2)]);
    let reply = alice.post(batch.to_string().as_bytes(), &[]);
    assert_eq!(reply.status, 200, "{reply:?}");
    let answers = reply.body.as_array().cloned().unwrap_or_default();
    assert_eq!(answers.len(), 2, "{}", reply.body);
    let second = answers.iter().find(|a| a["id"] == 2).unwrap();
    assert_eq!(second["error"]["code"], -32029, "{second}");
    assert!(
        second["error"]["message"].as_str().unwrap_or_default().contains("rate_limit.tools.alpha__add"),
        "{second}"
    );
}
