//! What the tests check at the two ends of mcpgate. At the downstream
//! servers: every session mcpgate opened was closed exactly once
//! ([`assert_all_closed`]), and which downstream session a client's session
//! holds ([`downstream_session`], from the fixture's `whoami`). At mcpgate:
//! its count of downstream sessions balances ([`assert_balanced`]), once
//! the closing is over ([`assert_settled`]).

use std::time::Duration;

use serde_json::{Value, json};

use super::{Client, Fixture, Gate, wait_until};

/// How long sessions are given to close.
const CLOSING: Duration = Duration::from_secs(10);

/// Every fixture saw `sessions` initializations and as many DELETEs (within
/// 10 s), and holds no session and no GET stream. The fixture counts a
/// stream closed when its writer notices, just after the DELETE: that is
/// given 2 s more.
#[track_caller]
pub fn assert_all_closed(fixtures: &[&Fixture], sessions: u64) {
    for f in fixtures {
        let ok = wait_until(CLOSING, || f.count("delete") == sessions);
        wait_until(Duration::from_secs(2), || f.count("get_streams_open") == 0);
        let stats = f.stats();
        assert!(ok, "{}: expected {sessions} DELETEs: {stats}", f.name);
        assert_eq!(stats["initialize"], sessions, "{}: {stats}", f.name);
        assert_eq!(stats["live_sessions"], 0, "{}: {stats}", f.name);
        assert_eq!(stats["get_streams_open"], 0, "{}: {stats}", f.name);
    }
}

/// The downstream invariant as the status page shows it: every downstream
/// session opened is closed or live (`opened == closed + live`), none leaked.
#[track_caller]
pub fn assert_balanced(status: &Value) {
    let d = &status["downstream"];
    let (opened, closed, live) =
        (d["opened"].as_u64().unwrap(), d["closed"].as_u64().unwrap(), d["live"].as_u64().unwrap());
    assert_eq!(opened, closed + live, "downstream.opened == closed + live: {d}");
    assert_eq!(d["leaked"], 0, "{d}");
}

/// Waits (at most 10 s) until mcpgate holds `live` downstream sessions, then
/// checks [`assert_balanced`]; the status page it checked.
#[track_caller]
pub fn assert_settled(gate: &Gate, live: u64) -> Value {
    let ok = wait_until(CLOSING, || gate.status()["downstream"]["live"] == live);
    let status = gate.status();
    assert!(ok, "downstream.live never reached {live}: {}", status["downstream"]);
    assert_balanced(&status);
    status
}

/// The id of the downstream session that `client`'s session holds on the
/// fixture named `server`, from the fixture's `whoami` tool as mcpgate
/// exposes it (`tool`: `alpha__whoami`, or `whoami` without a prefix).
/// Panics unless `server` answered ([`whoami_id`]).
#[track_caller]
pub fn downstream_session(client: &mut Client, tool: &str, server: &str) -> String {
    let text = client.tool_text(tool, json!({}));
    whoami_id(&text, server).unwrap_or_else(|| panic!("{tool} answered {text:?}, not `{server}:<session id>`"))
}

/// The session id in the fixture's `whoami` answer `<server>:<session id>`;
/// `None` for any other text (another server's answer, say).
pub fn whoami_id(answer: &str, server: &str) -> Option<String> {
    let id = answer.strip_prefix(server)?.strip_prefix(':')?;
    (!id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric())).then(|| id.to_string())
}
