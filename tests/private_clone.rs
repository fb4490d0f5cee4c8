//! The tests that run mcpgate as another user (tests/exhaustion.rs and
//! tests/hazards.rs run it as nobody under a thread limit) work from a clone
//! that user cannot reach: one in a directory of mode 0700, as `mktemp -d`
//! makes, or in root's home. There, nobody could not run the binary, and
//! such a test failed with `unexpected first line: ""`.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::json;
use support::{Fixture, Gate, NOBODY, TempDir, config, fixture_bin, require_root, stdio_args, threads_of_uid};

/// The real uid of a process.
fn uid_of(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("Uid:"))?.split_whitespace().next()?.parse().ok()
}

/// `from` copied into `dir` as `name`, executable.
fn copy_into(dir: &Path, from: &str, name: &str) -> String {
    let to = dir.join(name);
    std::fs::copy(from, &to).unwrap_or_else(|e| panic!("copy {from} to {}: {e}", to.display()));
    to.into_os_string().into_string().unwrap()
}

#[test]
#[ignore = "needs root"]
fn mcpgate_and_its_stdio_server_run_as_nobody_from_a_directory_nobody_may_enter() {
    require_root("it runs mcpgate as nobody");
    // The clone: mcpgate and the fixture in a directory only root may enter.
    let clone = TempDir::new();
    std::fs::set_permissions(&clone.0, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mcpgate = copy_into(&clone.0, env!("CARGO_BIN_EXE_mcpgate"), "mcpgate");
    let fixture_copy = copy_into(&clone.0, fixture_bin(), "mcp-fixture");

    let web = Fixture::start("web", &[]);
    let mut c = config(&[("web", web.url())]);
    c["mcpServers"]["local"] = json!({ "command": fixture_copy, "args": stdio_args("local", &[]) });
    let limit = threads_of_uid(NOBODY) + 1000;
    let mut gate = Gate::start_as_nobody_from(Path::new(&mcpgate), &c, limit);
    assert_eq!(uid_of(gate.pid()), Some(NOBODY), "mcpgate runs as nobody");

    let mut client = gate.open_session();
    for tool in ["web__echo", "local__echo"] {
        let text = client.tool_text(tool, json!({ "text": "through" }));
        assert!(text.contains("through"), "{tool}: {text}");
    }
    let children = support::children_of(gate.pid());
    assert!(!children.is_empty(), "the stdio server runs as mcpgate's child");
    for child in &children {
        assert_eq!(uid_of(child.pid), Some(NOBODY), "mcpgate's child {child:?} runs as nobody");
    }
    assert!(gate.is_running(), "mcpgate died\n{}", gate.stderr());
}
