//! Without `--config`, mcpgate reads `/etc/mcpgate/mcpgate.json` (where
//! scripts/install.sh puts it), or else `./mcpgate.json`; with neither it
//! says which it tried. It used to stop at `--config FILE is required`.

mod support;

use std::path::Path;
use std::process::{Command, Stdio};

use support::{Fixture, Gate, TempDir, config};

const ETC: &str = "/etc/mcpgate/mcpgate.json";

/// `mcpgate args` run in `dir`: its exit code, stdout and stderr.
fn mcpgate_in(dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_mcpgate")).args(args).current_dir(dir).output().expect("run mcpgate");
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

/// Whether this host has a configuration where mcpgate looks first: then
/// that one is read, and the tests below check that instead
/// ([`assert_etc_is_read`]) rather than pass blind.
fn host_has_etc_config() -> bool {
    Path::new(ETC).try_exists().unwrap_or(true)
}

fn assert_etc_is_read(dir: &Path) {
    let (_, out, err) = mcpgate_in(dir, &["--check"]);
    assert!(format!("{out}{err}").contains(ETC), "{ETC} exists here, so it is the one read: {out}{err}");
}

/// A directory whose `mcpgate.json` names `fixture`; `None`, having checked
/// that mcpgate reads the host's own instead, when there is one.
fn dir_with_config(fixture: &Fixture) -> Option<TempDir> {
    let dir = TempDir::new();
    dir.write_config(&config(&[("alpha", fixture.url())]));
    if host_has_etc_config() {
        assert_etc_is_read(&dir.0);
        return None;
    }
    Some(dir)
}

#[test]
fn without_config_mcpgate_checks_the_first_default_file_that_exists() {
    let fixture = Fixture::start("alpha", &[]);
    let Some(dir) = dir_with_config(&fixture) else { return };
    let (code, out, err) = mcpgate_in(&dir.0, &["--check"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(out, "./mcpgate.json: valid, 1 server(s)\n", "{err}");
}

#[test]
fn without_config_or_either_default_file_mcpgate_names_both_it_tried() {
    let empty = TempDir::new();
    if host_has_etc_config() {
        return assert_etc_is_read(&empty.0);
    }
    let (code, out, err) = mcpgate_in(&empty.0, &["--check"]);
    assert_eq!(code, Some(2), "{out}{err}");
    let first = err.lines().next().unwrap_or_default();
    assert_eq!(
        first,
        "mcpgate: no configuration: --config FILE was not given, and neither /etc/mcpgate/mcpgate.json nor \
         ./mcpgate.json exists",
        "{err}"
    );
    let (code, _, run_err) = mcpgate_in(&empty.0, &[]);
    assert_eq!((code, run_err.lines().next()), (Some(2), Some(first)), "plain `mcpgate` says the same");
}

#[test]
fn without_config_mcpgate_serves_from_mcpgate_json_and_logs_which_file() {
    let fixture = Fixture::start("alpha", &[]);
    let Some(dir) = dir_with_config(&fixture) else { return };
    let mut command = Command::new(env!("CARGO_BIN_EXE_mcpgate"));
    command.current_dir(&dir.0).stdin(Stdio::null());
    let gate = Gate::spawn(command, dir);
    let mut client = gate.open_session();
    assert_eq!(client.tool_text("alpha__echo", serde_json::json!({"text": "hi"})), "hi");
    let log = gate.stderr_once(|log| log.contains("configuration: "));
    assert!(
        log.contains(
            "configuration: ./mcpgate.json, the first of /etc/mcpgate/mcpgate.json, ./mcpgate.json that exists \
             (no --config given)"
        ),
        "{log}"
    );
}
