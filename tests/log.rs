//! A log people can use (issue 39): one line per finished call, saying what, where, for whom,
//! how it ended and how long it took; a line for a refused token or `Origin`, never the token;
//! timestamps unless journald adds its own; and calls by tool on `/metrics`, bounded.

mod support;

use serde_json::json;
use support::{Fixture, Gate, config, raw_request, wait_until};

const NAMED: &str = "0123456789abcdef-laptop-token";

fn gate_with_named_token(fixture: &Fixture) -> Gate {
    let mut c = config(&[("alpha", fixture.url())]);
    c["auth"] = json!({"tokens": [{"token": NAMED, "name": "laptop"}]});
    Gate::start_checked(&c)
}

fn metrics(gate: &Gate) -> String {
    let reply = raw_request(gate.addr, "GET", "/metrics", &[], b"");
    assert_eq!(reply.status, 200, "{reply:?}");
    reply.body
}

/// The log's lines that contain `needle`, once one does (within 5 s).
fn lines_with(gate: &Gate, needle: &str) -> Vec<String> {
    wait_until(std::time::Duration::from_secs(5), || gate.stderr().contains(needle));
    gate.stderr().lines().filter(|l| l.contains(needle)).map(str::to_string).collect()
}

#[test]
fn each_finished_call_is_one_line_with_what_where_whom_outcome_and_time() {
    let fixture = Fixture::start("alpha", &[]);
    let gate = gate_with_named_token(&fixture);
    let mut client = gate.client_with_token(NAMED);
    client.initialize();
    assert_eq!(client.tool_text("alpha__echo", json!({"text": "hi"})), "hi");
    let failed = client.call_tool("alpha__fail", json!({}));
    assert_eq!(failed.result()["isError"], true, "{:?}", failed.body);
    let session = &client.session.clone().unwrap()[..8];

    let ok = lines_with(&gate, "call: tool `echo`");
    assert_eq!(ok.len(), 1, "{ok:?}");
    let expected = format!("on `alpha` for token `laptop` (`mcpgate-tests`, session {session}): ok in ");
    assert!(ok[0].contains(&expected) && ok[0].ends_with(" ms"), "{}", ok[0]);
    let tool_error = lines_with(&gate, "call: tool `fail`");
    assert!(tool_error[0].contains("): tool error in "), "{tool_error:?}");
    assert!(!gate.stderr().contains(NAMED), "the token is in the log");

    let metrics = metrics(&gate);
    assert!(metrics.contains("mcpgate_server_tool_calls_total{server=\"alpha\",tool=\"echo\"} 1\n"), "{metrics}");
    assert!(metrics.contains("mcpgate_server_tool_errors_total{server=\"alpha\",tool=\"fail\"} 1\n"), "{metrics}");
    assert!(metrics.contains("mcpgate_server_tool_errors_total{server=\"alpha\",tool=\"echo\"} 0\n"), "{metrics}");
}

#[test]
fn a_refused_token_or_origin_leaves_a_line_without_the_token() {
    let fixture = Fixture::start("alpha", &[]);
    let gate = gate_with_named_token(&fixture);
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": support::initialize_params()});
    let body = init.to_string();
    let wrong = format!("Bearer {NAMED}-wrong");
    let headers = [("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream")];
    let reply =
        raw_request(gate.addr, "POST", "/mcp", &[headers[0], headers[1], ("Authorization", &wrong)], body.as_bytes());
    assert_eq!(reply.status, 401);
    let refused = lines_with(&gate, "refused with 401");
    assert!(refused[0].contains("POST /mcp from 127.0.0.1:"), "{refused:?}");
    assert!(refused[0].contains("its bearer token is none of auth.tokens"), "{refused:?}");
    let origin =
        [headers[0], headers[1], ("Authorization", &format!("Bearer {NAMED}")[..]), ("Origin", "https://evil.example")];
    let reply = raw_request(gate.addr, "POST", "/mcp", &origin, body.as_bytes());
    assert_eq!(reply.status, 403);
    // One line per 10 s at most: the second refusal is counted, not written, unless 10 s passed.
    let log = gate.stderr();
    assert!(!log.contains(NAMED), "the token is in the log:\n{log}");
    assert!(log.contains("refused with 403") || log.contains("refused with 401"), "{log}");
}

#[test]
fn lines_carry_a_utc_timestamp_unless_journald_adds_its_own() {
    let fixture = Fixture::start("alpha", &[]);
    let c = config(&[("alpha", fixture.url())]);
    let plain = Gate::start_with(&c, |mut command| {
        command.env_remove("JOURNAL_STREAM");
        command
    });
    let journal = Gate::start_with(&c, |mut command| {
        command.env("JOURNAL_STREAM", "8:12345");
        command
    });
    for (gate, stamped) in [(&plain, true), (&journal, false)] {
        let mut client = gate.open_session();
        client.tool_text("alpha__echo", json!({"text": "x"}));
        let line = lines_with(gate, "call: tool `echo`").remove(0);
        let stamp = line.split(' ').next().unwrap_or_default();
        let looks_stamped = stamp.len() == 24 && stamp.ends_with('Z') && stamp.as_bytes()[10] == b'T';
        assert_eq!(looks_stamped, stamped, "{line}");
        assert_eq!(line.starts_with("<6>"), !stamped, "{line}");
    }
}

#[test]
fn calls_by_tool_on_metrics_name_at_most_100_tools() {
    let fixture = Fixture::start("many", &["--tools", "120"]);
    let gate = Gate::start_checked(&config(&[("many", fixture.url())]));
    let mut client = gate.open_session();
    for i in 0..110 {
        assert_eq!(client.tool_text(&format!("many__many_{i}"), json!({})), format!("many_{i}"));
    }
    let metrics = metrics(&gate);
    let series: Vec<&str> = metrics.lines().filter(|l| l.starts_with("mcpgate_server_tool_calls_total{")).collect();
    assert_eq!(series.len(), 101, "100 tools and (other): {series:?}");
    assert!(metrics.contains("tool=\"(other)\"} 10\n"), "{series:?}");
}
