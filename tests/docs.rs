//! The documentation says what the code does: the configuration reference
//! and the metrics table of `docs/CONFIGURATION.md` are the ones the code
//! prints, every JSON block that claims to be a configuration loads, and
//! every relative link of the Markdown files leads somewhere.
//!
//! `UPDATE_DOCS=1 cargo test --test docs` rewrites the two generated tables
//! in place, for after a change to `config::KEYS` or the stats table.

use std::path::{Path, PathBuf};
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
fn the_table_of_client_keys_lists_every_key_the_code_reads_or_leaves() {
    holds_generated_table(
        REFERENCE,
        "| key | where | written by | mcpgate |",
        &mcpgate::config::clients::reference_markdown(),
        "table of client keys (`config::clients::reference_markdown`)",
    );
}

/// The Markdown files of the repository: the README, `docs/`, and any
/// other outside build and tool directories.
fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if depth < 6 && !name.starts_with('.') && name != "target" && name != "node_modules" {
                    walk(&path, depth + 1, out);
                }
            } else if name.ends_with(".md") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(Path::new(ROOT), 0, &mut files);
    files.sort();
    assert!(files.iter().any(|f| f.ends_with("README.md")) && files.iter().any(|f| f.ends_with(REFERENCE)));
    files
}

/// The lines of a Markdown file outside fenced code blocks, with their numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// The anchors GitHub gives a file's headings: lower case, punctuation
/// dropped, spaces as hyphens, `-1`, `-2` after repeats.
fn anchors(text: &str) -> Vec<String> {
    let mut bases: Vec<String> = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for (_, line) in prose_lines(text) {
        let Some(title) = line.strip_prefix('#').map(|t| t.trim_start_matches('#')) else { continue };
        if !title.starts_with(' ') {
            continue;
        }
        let slug: String = title
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let repeats = bases.iter().filter(|b| **b == slug).count();
        seen.push(if repeats == 0 { slug.clone() } else { format!("{slug}-{repeats}") });
        bases.push(slug);
    }
    seen
}

/// `(line, target)` of every inline link and image of a file's prose.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (number, line) in prose_lines(text) {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            let target = rest[..end].split_whitespace().next().unwrap_or("").to_string();
            out.push((number, target));
            rest = &rest[end..];
        }
    }
    out
}

#[test]
fn every_relative_link_of_the_markdown_files_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let shown = file.strip_prefix(ROOT).unwrap().display().to_string();
        for (line, target) in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let resolved = if path.is_empty() { file.clone() } else { file.parent().unwrap().join(path) };
            if !resolved.exists() {
                broken.push(format!("{shown}:{line}: `{target}`: no such file"));
                continue;
            }
            if !anchor.is_empty() && resolved.extension().is_some_and(|e| e == "md") {
                let there = std::fs::read_to_string(&resolved).unwrap();
                if !anchors(&there).iter().any(|a| a == anchor) {
                    broken.push(format!("{shown}:{line}: `{target}`: no heading with that anchor"));
                }
            }
        }
    }
    assert!(checked > 20, "only {checked} relative links found: the link finder is broken");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_link_checker_sees_anchors_as_github_makes_them() {
    let text = "# A title\n## Mixed eras, measured\n```\n# not a heading\n```\n## One tools/call, socket to server\n## Mixed eras, measured\n";
    assert_eq!(
        anchors(text),
        ["a-title", "mixed-eras-measured", "one-toolscall-socket-to-server", "mixed-eras-measured-1"]
    );
    assert_eq!(
        links("see [x](a.md#b) and ![y](c.png)\n```\n[z](d.md)\n```\n"),
        [(1, "a.md#b".to_string()), (1, "c.png".to_string())]
    );
}

/// How a ```json block of the documentation is marked, on the line before it.
const FULL: &str = "<!-- config -->";
const FRAGMENT: &str = "<!-- config fragment -->";
const NOT_CONFIG: &str = "<!-- not mcpgate config";
const CLIENT_CONFIG: &str = "<!-- client config";

/// Files a documented config names that this machine does not have
/// (`/etc/mcpgate/cert.pem`): a certificate and key made for the test, so
/// `--check` reads real PEM where the example names one.
struct ExampleFiles {
    cert: String,
    key: String,
    /// Where an example's audit log goes.
    audit: String,
}

impl ExampleFiles {
    fn new(dir: &Path) -> ExampleFiles {
        let made = rcgen::generate_simple_self_signed(vec!["gate.example.com".to_string()]).unwrap();
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&cert, made.cert.pem()).unwrap();
        std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
        let audit = dir.join("audit.jsonl").display().to_string();
        ExampleFiles { cert: cert.display().to_string(), key: key.display().to_string(), audit }
    }
}

/// Points every `cert_file`, `ca_file`, `key_file` and (the audit log's) `file` of `value` at
/// the test's own.
fn point_files_at(value: &mut serde_json::Value, files: &ExampleFiles) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, item) in map.iter_mut() {
                match key.as_str() {
                    "cert_file" | "ca_file" if item.is_string() => *item = files.cert.clone().into(),
                    "key_file" if item.is_string() => *item = files.key.clone().into(),
                    "file" if item.is_string() => *item = files.audit.clone().into(),
                    _ => point_files_at(item, files),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(|item| point_files_at(item, files)),
        _ => {}
    }
}

/// Each stdio server's `command` in `value` as a program the machine that runs it would have:
/// a stub in `bin` (put on `PATH` for a bare name; a path is pointed at it).
fn stub_commands(value: &mut serde_json::Value, bin: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Some(servers) = value.get_mut("mcpServers").and_then(|s| s.as_object_mut()) else { return };
    for server in servers.values_mut() {
        let Some(command) = server.get("command").and_then(|c| c.as_str()).map(str::to_string) else { continue };
        let name = command.rsplit('/').next().unwrap_or(&command).to_string();
        let stub = bin.join(&name);
        std::fs::write(&stub, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755)).unwrap();
        if command.contains('/') {
            server["command"] = stub.display().to_string().into();
        }
    }
}

#[test]
fn every_json_block_that_claims_to_be_a_config_loads() {
    let dir = std::env::temp_dir().join(format!("mcpgate-docs-blocks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let files = ExampleFiles::new(&dir);
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let mut failures = Vec::new();
    let mut loaded = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let shown = file.strip_prefix(ROOT).unwrap().display().to_string();
        let lines: Vec<&str> = text.lines().collect();
        let mut i = 0;
        while i < lines.len() {
            if lines[i].trim() != "```json" {
                i += 1;
                continue;
            }
            let start = i + 1;
            let end = (start..lines.len()).find(|&j| lines[j].trim() == "```").expect("an unclosed ```json block");
            let block = lines[start..end].join("\n");
            let marker = if i > 0 { lines[i - 1].trim() } else { "" };
            i = end + 1;
            let config = if marker == FULL {
                block
            } else if marker == FRAGMENT {
                format!("{{{block}, \"mcpServers\": {{\"files\": {{\"url\": \"http://127.0.0.1:9001/mcp\"}}}}}}")
            } else if marker.starts_with(NOT_CONFIG) || marker.starts_with(CLIENT_CONFIG) {
                continue;
            } else {
                failures.push(format!(
                    "{shown}:{start}: a ```json block without a marker on the line before: `{FULL}`, `{FRAGMENT}`, `{CLIENT_CONFIG}: NAME -->` or `{NOT_CONFIG}: WHY -->`"
                ));
                continue;
            };
            let mut value: serde_json::Value = match serde_json::from_str(&config) {
                Ok(value) => value,
                Err(e) => {
                    failures.push(format!("{shown}:{start}: not JSON: {e}"));
                    continue;
                }
            };
            point_files_at(&mut value, &files);
            stub_commands(&mut value, &bin);
            let config = value.to_string();
            let path = dir.join(format!("block-{loaded}.json"));
            std::fs::write(&path, &config).unwrap();
            let mut check = Command::new(env!("CARGO_BIN_EXE_mcpgate"));
            check.args(["--check", "--config"]).arg(&path);
            let path_var = std::env::var("PATH").unwrap_or_default();
            check.env("PATH", format!("{}:{path_var}", bin.display()));
            // Each `${VAR}` the block names gets a value, as the environment would give it.
            for var in config.split("${").skip(1).filter_map(|s| s.split_once('}')).map(|(name, _)| name) {
                check.env(var, "a-value-of-the-environment-0123");
            }
            let out = check.output().expect("run mcpgate --check");
            if !out.status.success() {
                failures.push(format!(
                    "{shown}:{start}: `mcpgate --check` refuses it: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            loaded += 1;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(loaded >= 4, "only {loaded} config blocks checked: the block finder is broken");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
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
