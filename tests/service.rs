//! The systemd unit and the install scripts, checked without a running systemd.

mod support;

use std::path::Path;
use std::process::Command;

use support::TempDir;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The unit with ExecStart pointing at the binary cargo built.
fn unit_for_this_build(dir: &Path) -> std::path::PathBuf {
    let unit = std::fs::read_to_string(Path::new(ROOT).join("config/mcpgate.service")).unwrap();
    let path = dir.join("mcpgate.service");
    std::fs::write(&path, unit.replace("/usr/local/bin/mcpgate", env!("CARGO_BIN_EXE_mcpgate"))).unwrap();
    path
}

#[test]
fn the_unit_passes_systemd_analyze_verify_and_scores_as_well_sandboxed() {
    let dir = TempDir::new();
    let unit = unit_for_this_build(&dir.0);
    let verify =
        Command::new("systemd-analyze").arg("verify").arg(&unit).output().expect("systemd-analyze is installed");
    let complaints = String::from_utf8_lossy(&verify.stderr);
    assert!(verify.status.success() && complaints.trim().is_empty(), "systemd-analyze verify: {complaints}");
    let security = Command::new("systemd-analyze")
        .args(["security", "--offline=yes"])
        .arg(&unit)
        .output()
        .expect("systemd-analyze");
    let report = String::from_utf8_lossy(&security.stdout);
    let score: f64 = report
        .lines()
        .find_map(|l| l.split("Overall exposure level for mcpgate.service: ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in: {report}"));
    eprintln!("systemd-analyze security exposure: {score}");
    assert!(score <= 2.0, "exposure {score} (lower is better):\n{report}");
}

#[test]
fn install_is_idempotent_and_uninstall_removes_what_it_installed() {
    let dir = TempDir::new();
    let root = dir.0.join("root");
    let run = |script: &str| {
        let out = Command::new(Path::new(ROOT).join("scripts").join(script))
            .arg("--destdir")
            .arg(&root)
            .args(if script == "install.sh" { vec!["--binary", env!("CARGO_BIN_EXE_mcpgate")] } else { vec![] })
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{script}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let files = || {
        let mut found = Vec::new();
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                if entry.path().is_dir() {
                    stack.push(entry.path());
                } else {
                    found.push(entry.path().strip_prefix(&root).unwrap().display().to_string());
                }
            }
        }
        found.sort();
        found
    };
    run("install.sh");
    let first = files();
    assert_eq!(
        first,
        ["etc/mcpgate/env", "etc/mcpgate/mcpgate.json", "etc/systemd/system/mcpgate.service", "usr/local/bin/mcpgate"]
    );
    // An edited configuration survives a second install.
    let config = root.join("etc/mcpgate/mcpgate.json");
    let edited =
        std::fs::read_to_string(&config).unwrap().replace("\"calls_per_server\": 64", "\"calls_per_server\": 3");
    std::fs::write(&config, &edited).unwrap();
    run("install.sh");
    assert_eq!(files(), first);
    assert_eq!(std::fs::read_to_string(&config).unwrap(), edited);
    run("uninstall.sh");
    assert_eq!(files(), ["etc/mcpgate/env", "etc/mcpgate/mcpgate.json"]);
}
