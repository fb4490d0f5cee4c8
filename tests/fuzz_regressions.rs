//! Every input the fuzzers (`fuzz/`, run with `cargo fuzz`) found, and
//! their seeds, checked against the same properties on every test run.

#![allow(dead_code)]

#[path = "../fuzz/properties.rs"]
mod properties;

fn each_input(target: &str, check: fn(&[u8])) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut checked = 0;
    for dir in ["regressions", "seeds"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else { continue };
        for entry in entries.flatten() {
            let data = std::fs::read(entry.path()).unwrap();
            let outcome = std::panic::catch_unwind(|| check(&data));
            assert!(outcome.is_ok(), "{target}: {} fails", entry.path().display());
            checked += 1;
        }
    }
    assert!(checked > 0, "no inputs for {target}");
}

#[test]
fn jsonrpc_inputs_found_by_fuzzing_still_pass() {
    each_input("jsonrpc", properties::jsonrpc);
}

#[test]
fn sse_inputs_found_by_fuzzing_still_pass() {
    each_input("sse", properties::sse);
}

#[test]
fn config_inputs_found_by_fuzzing_still_pass() {
    each_input("config", properties::config);
}
