//! The README's configuration table is what the binary documents.

use std::process::Command;

#[test]
fn readme_holds_the_configuration_reference_the_binary_prints() {
    let out = Command::new(env!("CARGO_BIN_EXE_mcpgate")).arg("--config-reference").output().expect("run mcpgate");
    assert!(out.status.success());
    let table = String::from_utf8(out.stdout).unwrap();
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    assert!(readme.contains(&table), "README.md is out of date: paste `mcpgate --config-reference` into it:\n{table}");
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
