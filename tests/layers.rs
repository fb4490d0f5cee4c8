//! The floors of `src/`: `lib.rs` lists its modules from the top down and
//! says each imports only from the floors below it. This reads every `use`
//! and every `crate::` path in `src/` and fails on one that runs up, or
//! sideways into a module `lib.rs` does not place.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src");

/// The modules of `lib.rs`'s list, top floor first: "//! - [`name`]: ...".
fn floors() -> Vec<String> {
    let lib = fs::read_to_string(Path::new(SRC).join("lib.rs")).unwrap();
    lib.lines()
        .filter_map(|line| line.strip_prefix("//! - [`"))
        .filter_map(|rest| rest.split_once("`]").map(|(name, _)| name.to_string()))
        .collect()
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `src/` belongs to (`None` for the crate
/// roots, which may use everything).
fn module_of(path: &Path) -> Option<String> {
    let relative = path.strip_prefix(SRC).unwrap();
    let first = relative.components().next()?.as_os_str().to_str()?.trim_end_matches(".rs").to_string();
    (first != "lib" && first != "main").then_some(first)
}

/// The code of a file without its comments (a doc link to a floor above
/// is not an import) and without string literals.
fn code(text: &str) -> String {
    text.lines()
        .map(|line| {
            let line = line.split("//").next().unwrap_or("");
            let mut out = String::new();
            let mut in_string = false;
            let mut escaped = false;
            for c in line.chars() {
                match (in_string, escaped, c) {
                    (true, false, '\\') => escaped = true,
                    (true, false, '"') => in_string = false,
                    (true, ..) => escaped = false,
                    (false, _, '"') => in_string = true,
                    (false, ..) => out.push(c),
                }
            }
            out
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every module a file names through `crate::`, but `crate::name!`: an
/// exported macro sits at the root whatever floor defines it (a `use` of
/// one is left out by the test, which knows the exported macros).
fn imports(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        if !name.is_empty() && !rest[name.len()..].starts_with('!') {
            found.push(name);
        }
    }
    found
}

#[test]
fn lib_rs_places_every_module_of_src() {
    let floors = floors();
    assert!(floors.len() >= 10, "lib.rs lists its floors as \"//! - [`name`]: ...\" lines; found {floors:?}");
    let lib = fs::read_to_string(Path::new(SRC).join("lib.rs")).unwrap();
    let declared: Vec<&str> = lib.lines().filter_map(|l| l.strip_prefix("pub mod ")?.strip_suffix(';')).collect();
    let mut missing: Vec<&&str> = declared.iter().filter(|m| !floors.iter().any(|f| f == **m)).collect();
    missing.sort();
    assert!(missing.is_empty(), "modules lib.rs declares but does not place on a floor: {missing:?}");
}

#[test]
fn no_import_in_src_runs_up_a_floor() {
    let floors = floors();
    // Top floor first: a higher index is a lower floor.
    let floor = |name: &str| floors.iter().position(|f| f == name);
    let mut files = Vec::new();
    sources(Path::new(SRC), &mut files);
    let macros: Vec<String> = files
        .iter()
        .flat_map(|file| {
            let text = fs::read_to_string(file).unwrap();
            let exported = "#[macro_export]\nmacro_rules! ";
            text.match_indices(exported)
                .map(|(at, m)| {
                    text[at + m.len()..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect()
                })
                .collect::<Vec<String>>()
        })
        .collect();
    let mut upward: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in &files {
        let Some(module) = module_of(file) else { continue };
        let own = floor(&module).unwrap_or_else(|| panic!("{} is in no floor of lib.rs", file.display()));
        for imported in imports(&code(&fs::read_to_string(file).unwrap())) {
            if imported == module || macros.contains(&imported) {
                continue;
            }
            let name = file.strip_prefix(SRC).unwrap().display().to_string();
            match floor(&imported) {
                Some(theirs) if theirs > own => {}
                Some(_) => upward.entry(name).or_default().push(format!("{module} -> {imported}")),
                None => upward.entry(name).or_default().push(format!("{module} -> {imported} (on no floor)")),
            }
        }
    }
    for arrows in upward.values_mut() {
        arrows.dedup();
    }
    assert!(upward.is_empty(), "imports that run up (floors, top first: {floors:?}):\n{upward:#?}");
}

#[test]
fn the_check_sees_an_import_that_runs_up() {
    // The parser of the two tests above, on a file it must refuse: a test
    // that cannot fail proves nothing.
    let text = "use crate::gateway::Gateway; // crate::status in a comment\nlet s = \"crate::routes\";\ncrate::limited!(warn, \"x\");";
    assert_eq!(imports(&code(text)), vec!["gateway".to_string()]);
}
