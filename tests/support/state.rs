//! mcpgate's state file, as the tests of restarts and crashes read it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use super::{TempDir, wait_until};

/// `config` with a `state_file` in a directory of its own (kept alive by the
/// returned `TempDir`), so that mcpgate processes in a row share it.
pub fn with_state_file(mut config: Value) -> (TempDir, PathBuf, Value) {
    let state = TempDir::new();
    let path = state.0.join("state.json");
    config["state_file"] = json!(path);
    (state, path, config)
}

/// The state file as mcpgate reads it (its journal replayed), as JSON:
/// `sessions` (each with its `downstreams`) and `closing`; `Null` while it
/// is missing or does not read.
pub fn read_state(path: &Path) -> Value {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| mcpgate::runtime::state::parse(&text))
        .and_then(|saved| serde_json::to_value(saved).ok())
        .unwrap_or(Value::Null)
}

/// Waits (at most 10 s) until the state file lists `sessions` sessions with
/// `downstreams` downstream sessions each.
pub fn wait_for_state(path: &Path, sessions: usize, downstreams: usize) {
    let ok = wait_until(Duration::from_secs(10), || {
        let state = read_state(path);
        let list = state["sessions"].as_array().cloned().unwrap_or_default();
        list.len() == sessions && list.iter().all(|s| s["downstreams"].as_array().map(Vec::len) == Some(downstreams))
    });
    assert!(ok, "state file {}: {}", path.display(), read_state(path));
}
