//! The documentation says what the code does: the configuration reference
//! and the metrics table of `docs/CONFIGURATION.md` are the ones the code
//! prints.
//!
//! `UPDATE_DOCS=1 cargo test --test docs` rewrites the two generated tables
//! in place, for after a change to `config::KEYS` or the stats table.

use std::path::Path;
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// Where the generated tables live (the README links to it).
const REFERENCE: &str = "docs/CONFIGURATION.md";

/// Checks that `file` holds `table` (a Markdown table, ending in a newline)
/// whose first line is `header`; with `UPDATE_DOCS` set, puts it there in
/// place of the table that starts with that header.
fn holds_generated_table(file: &str, header: &str, table: &str, what: &str) {
    let path = Path::new(ROOT).join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {file}: {e}"));
    if text.contains(table) {
        return;
    }
    assert!(table.starts_with(header), "the {what} no longer starts with `{header}`: update this test");
    if std::env::var_os("UPDATE_DOCS").is_some() {
        let lines: Vec<&str> = text.split('\n').collect();
        let start = lines.iter().position(|l| *l == header).unwrap_or_else(|| panic!("{file} has no line `{header}`"));
        let end = (start..lines.len()).find(|&i| !lines[i].starts_with('|')).unwrap_or(lines.len());
        let mut new: Vec<&str> = lines[..start].to_vec();
        new.extend(table.trim_end_matches('\n').split('\n'));
        new.extend(&lines[end..]);
        std::fs::write(&path, new.join("\n")).unwrap();
        return;
    }
    panic!(
        "{file} is out of date: its {what} is not the code's. Run `UPDATE_DOCS=1 cargo test --test docs`, or paste this in:\n{table}"
    );
}

#[test]
fn the_configuration_reference_is_the_one_the_binary_prints() {
    let out = Command::new(env!("CARGO_BIN_EXE_mcpgate")).arg("--config-reference").output().expect("run mcpgate");
    assert!(out.status.success());
    let table = String::from_utf8(out.stdout).unwrap();
    holds_generated_table(
        REFERENCE,
        "| key | default | range | meaning |",
        &table,
        "configuration reference (`mcpgate --config-reference`)",
    );
}

#[test]
fn the_metrics_table_lists_every_entry_of_the_stats_table() {
    let table = mcpgate::stats::reference_markdown();
    holds_generated_table(
        REFERENCE,
        "| metric | type | labels | in `/status.json` | meaning |",
        &table,
        "metrics table (`stats::reference_markdown`)",
    );
}

#[test]
fn a_bad_config_is_refused_with_file_key_and_problem_and_exit_code_2() {
    let dir = std::env::temp_dir().join(format!("mcpgate-docs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.json");
    std::fs::write(&path, r#"{"mcpServers": {"files": {"url": "http://127.0.0.1:1/mcp", "headers": {"A": "${MCPGATE_TEST_UNSET_VAR}"}}}}"#)
        .unwrap();
    for args in [&["--config"][..], &["--check", "--config"][..]] {
        let out = Command::new(env!("CARGO_BIN_EXE_mcpgate"))
            .args(args)
            .arg(&path)
            .env_remove("MCPGATE_TEST_UNSET_VAR")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "{}: mcpServers.files.headers.A: environment variable `MCPGATE_TEST_UNSET_VAR` is not set",
                path.display()
            )),
            "{stderr}"
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_mcpgate"))
        .args(["--check", "--config"])
        .arg(dir.join("missing.json"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.json: cannot read"));
    let out = Command::new(env!("CARGO_BIN_EXE_mcpgate")).arg("--bogus").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}
