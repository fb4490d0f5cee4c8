//! ureq's `unversioned` API (its transport and resolver traits) may change
//! in any minor release, and mcpgate builds its own TCP transport, its
//! coalescing writes and its resolver on it (`downstream/http/tcp.rs`,
//! `coalesce.rs`, `downstream/resolver.rs`). So ureq is pinned to the exact
//! version that code was checked against, and these tests fail loudly when
//! the pin moves or the code reaches for more of that API: either is the
//! moment to read ureq's changelog for the names listed here.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The ureq release the code on `ureq::unversioned` was last checked against.
const CHECKED: &str = "3.5.2";

/// Every name of `ureq::unversioned` the code uses.
const USED: &[&str] = &[
    "resolver::DefaultResolver",
    "resolver::ResolvedSocketAddrs",
    "resolver::Resolver",
    "transport::Buffers",
    "transport::ConnectionDetails",
    "transport::Connector",
    "transport::Either",
    "transport::LazyBuffers",
    "transport::NextTimeout",
    "transport::ShutdownHandle",
    "transport::TcpConnector",
    "transport::Transport",
    "transport::TransportAdapter",
];

const ADVICE: &str = "ureq's `unversioned` API is not under semver: before moving the pin, read ureq's changelog \
                      for each name of USED in tests/pins.rs, run the downstream HTTP tests (faults, server_faults, \
                      slow_servers, tls), and then set CHECKED";

#[test]
fn ureq_is_pinned_to_the_release_its_unversioned_api_was_checked_against() {
    let manifest = fs::read_to_string(Path::new(ROOT).join("Cargo.toml")).unwrap();
    let pin = manifest
        .lines()
        .find(|l| l.starts_with("ureq = "))
        .and_then(|l| l.split("version = \"").nth(1))
        .and_then(|v| v.split('"').next())
        .expect("Cargo.toml's [workspace.dependencies] names ureq with a version");
    assert_eq!(pin, format!("={CHECKED}"), "ureq's pin moved from ={CHECKED} to {pin}: {ADVICE}");

    let lock = fs::read_to_string(Path::new(ROOT).join("Cargo.lock")).unwrap();
    let locked: Vec<&str> = lock
        .split("[[package]]")
        .filter(|p| p.contains("\nname = \"ureq\"\n"))
        .filter_map(|p| p.split("\nversion = \"").nth(1)?.split('"').next())
        .collect();
    assert_eq!(locked, [CHECKED], "Cargo.lock holds ureq {locked:?}, not {CHECKED}: {ADVICE}");
}

#[test]
fn the_code_uses_only_the_unversioned_names_that_were_checked() {
    let mut files = Vec::new();
    sources(&Path::new(ROOT).join("src"), &mut files);
    let mut found: BTreeSet<String> = BTreeSet::new();
    let mut whose: Vec<String> = Vec::new();
    for file in &files {
        let text = fs::read_to_string(file).unwrap();
        let names = unversioned_names(&text);
        if !names.is_empty() {
            whose.push(file.strip_prefix(ROOT).unwrap().display().to_string());
        }
        found.extend(names);
    }
    let used: BTreeSet<String> = USED.iter().map(|s| s.to_string()).collect();
    let new: Vec<&String> = found.difference(&used).collect();
    let gone: Vec<&String> = used.difference(&found).collect();
    assert!(
        new.is_empty() && gone.is_empty(),
        "ureq::unversioned names used but not in USED: {new:?}; in USED but no longer used: {gone:?} \
         (files: {whose:?}). {ADVICE}"
    );
}

#[test]
fn the_name_reader_sees_paths_lists_and_lines() {
    let text = "use ureq::unversioned::transport::{\n    Buffers, Connector,\n};\n\
                let r = ureq::unversioned::resolver::DefaultResolver::default();\n\
                use ureq::unversioned::transport::NextTimeout;";
    let names: Vec<String> = unversioned_names(text).into_iter().collect();
    assert_eq!(
        names,
        ["resolver::DefaultResolver", "transport::Buffers", "transport::Connector", "transport::NextTimeout"]
    );
}

/// The names after each `ureq::unversioned::` in `text`, as `module::Name`:
/// one, or each of a `{...}` list (which may run over lines).
fn unversioned_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for part in text.split("ureq::unversioned::").skip(1) {
        let Some((module, rest)) = part.split_once("::") else { continue };
        let list = match rest.strip_prefix('{') {
            Some(list) => list.split('}').next().unwrap_or(""),
            None => rest.split(|c: char| !(c.is_alphanumeric() || c == '_')).next().unwrap_or(""),
        };
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            names.insert(format!("{module}::{name}"));
        }
    }
    names
}

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}
