//! The floors of `src/`: `lib.rs` lists its modules from the top down and
//! says each imports only from the floors below it. This reads every `use`
//! and every `crate::` path in `src/` and fails on one that runs up, or
//! sideways into a module `lib.rs` does not place.
//!
//! Inside each folder the same holds without a list: its files, each of its
//! subfolders as one, and the folder's own module (`mod.rs`, or `config.rs`
//! beside `config/`) import each other without a loop, so they stand on
//! floors. A loop the code has today is allowed by name in [`ALLOWED`],
//! with why; the list can only shrink.
//!
//! And one import outside the crate is held too: ureq's `unversioned` API
//! (its transport and resolver traits) may change in any minor release, and
//! mcpgate builds its own TCP transport, its coalescing writes and its
//! resolver on it (`downstream/http/tcp.rs`, `coalesce.rs`,
//! `downstream/resolver.rs`). So ureq is pinned to the exact version that
//! code was checked against, and the tests fail loudly when the pin moves
//! or the code reaches for more of that API: either is the moment to read
//! ureq's changelog for the names listed in [`USED`].

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
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

// Floors inside each folder of `src/`: the files of a folder, and each of
// its subfolders as one unit, import each other without a loop.

/// A file's module path from the crate root: `src/gateway/stateless/mod.rs`
/// is `gateway::stateless`, `src/config.rs` is `config`, `lib.rs` the root.
fn module_path(file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(SRC).unwrap().with_extension("");
    let mut path: Vec<String> = relative.iter().map(|c| c.to_str().unwrap().to_string()).collect();
    if matches!(path.last().map(String::as_str), Some("mod" | "lib")) {
        path.pop();
    }
    path
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Word(String),
    Path,
    Open,
    Close,
    Comma,
    Star,
    Bang,
    Other,
}

/// The tokens of a file, as far as a path needs them: comments, strings
/// (raw ones, and those over several lines too) and char literals are none.
fn tokens(text: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let ahead = |n: usize| chars.clone().nth(n);
        if c == '/' && ahead(0) == Some('/') {
            chars.by_ref().find(|&c| c == '\n');
        } else if c == '/' && ahead(0) == Some('*') {
            chars.next();
            while let Some(c) = chars.next() {
                if c == '*' && chars.peek() == Some(&'/') {
                    chars.next();
                    break;
                }
            }
        } else if c.is_ascii_alphanumeric() || c == '_' {
            let mut word = c.to_string();
            while let Some(&next) = chars.peek().filter(|n| n.is_ascii_alphanumeric() || **n == '_') {
                word.push(next);
                chars.next();
            }
            if matches!(word.as_str(), "r" | "br") && matches!(chars.peek(), Some('"' | '#')) {
                // A raw string: r"..." or r#"..."#, its end the quote and as many #.
                let hashes = chars.by_ref().take_while(|&c| c == '#').count();
                while let Some(c) = chars.next() {
                    if c == '"' && (0..hashes).all(|n| chars.clone().nth(n) == Some('#')) {
                        chars.by_ref().take(hashes).for_each(drop);
                        break;
                    }
                }
                out.push(Token::Other);
            } else {
                out.push(Token::Word(word));
            }
        } else if c == '"' {
            while let Some(c) = chars.next() {
                if c == '\\' {
                    chars.next();
                } else if c == '"' {
                    break;
                }
            }
            out.push(Token::Other);
        } else if c == ':' && chars.peek() == Some(&':') {
            chars.next();
            out.push(Token::Path);
        } else if c == '\'' {
            // A char literal ('{', '\'') or a lifetime: what a literal holds is no token.
            let ahead: Vec<char> = chars.clone().take(2).collect();
            if ahead.first() == Some(&'\\') {
                chars.nth(1);
                chars.by_ref().find(|&c| c == '\'');
            } else if ahead.get(1) == Some(&'\'') {
                chars.nth(1);
            }
            out.push(Token::Other);
        } else if !c.is_whitespace() {
            out.push(match c {
                '{' => Token::Open,
                '}' => Token::Close,
                ',' => Token::Comma,
                '*' => Token::Star,
                '!' => Token::Bang,
                _ => Token::Other,
            });
        }
    }
    out
}

/// The paths a use tree or a path expression at `at` names, each whole (a
/// group `a::{b, c::d}` gives `a::b` and `a::c::d`), and where it ends.
fn paths_at(tokens: &[Token], mut at: usize, mut path: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    loop {
        match tokens.get(at) {
            Some(Token::Word(w)) => {
                if w != "self" {
                    path.push(w.clone());
                }
                at += 1;
            }
            Some(Token::Star) => {
                out.push(path);
                return at + 1;
            }
            Some(Token::Open) => {
                at += 1;
                while !matches!(tokens.get(at), None | Some(Token::Close)) {
                    at = paths_at(tokens, at, path.clone(), out);
                    // an `as` alias, then the comma
                    while !matches!(tokens.get(at), None | Some(Token::Close | Token::Comma)) {
                        at += 1;
                    }
                    at += usize::from(tokens.get(at) == Some(&Token::Comma));
                }
                return at + 1;
            }
            _ => {
                out.push(path);
                return at;
            }
        }
        if tokens.get(at) != Some(&Token::Path) {
            out.push(path);
            return at;
        }
        at += 1;
    }
}

/// A path a file names, resolved from where it stands (`crate`, `self`,
/// `super`, or a child module's name), and whether a `use` of the file's
/// own scope names it (which other files may then name through it).
struct Named {
    path: Vec<String>,
    used_at_top: bool,
}

fn named_paths(own: &[String], text: &str, modules: &BTreeMap<Vec<String>, PathBuf>) -> Vec<Named> {
    let tokens = tokens(text);
    // Inline modules (`mod tests { ... }`) with the depth they open at.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth: usize = 0;
    let mut out = Vec::new();
    let mut at = 0;
    while at < tokens.len() {
        let starts_path = tokens.get(at + 1) == Some(&Token::Path) && (at == 0 || tokens[at - 1] != Token::Path);
        match &tokens[at] {
            Token::Open => depth += 1,
            Token::Close => {
                depth = depth.checked_sub(1).expect("no more braces closed than opened");
                if inline.last().is_some_and(|(_, opened)| *opened == depth) {
                    inline.pop();
                }
            }
            Token::Word(w) if w == "mod" => {
                if let (Some(Token::Word(name)), Some(Token::Open)) = (tokens.get(at + 1), tokens.get(at + 2)) {
                    inline.push((name.clone(), depth));
                }
            }
            Token::Word(w) if starts_path => {
                let mut here = own.to_vec();
                here.extend(inline.iter().map(|(name, _)| name.clone()));
                let (base, next) = match w.as_str() {
                    "crate" => (Vec::new(), at + 2),
                    "self" => (here, at + 2),
                    "super" => {
                        let mut next = at;
                        while tokens.get(next) == Some(&Token::Word("super".into()))
                            && tokens.get(next + 1) == Some(&Token::Path)
                        {
                            here.pop();
                            next += 2;
                        }
                        (here, next)
                    }
                    child if modules.contains_key(&[here.as_slice(), &[child.to_string()]].concat()) => (here, at),
                    _ => {
                        at += 1;
                        continue;
                    }
                };
                let mut found = Vec::new();
                let end = paths_at(&tokens, next, base, &mut found);
                // `crate::name!`: an exported macro sits at the root, whatever defines it.
                if tokens.get(end) != Some(&Token::Bang) {
                    let used_at_top = inline.is_empty() && at > 0 && tokens[at - 1] == Token::Word("use".into());
                    out.extend(found.into_iter().map(|path| Named { path, used_at_top }));
                }
                at = end.max(at + 1);
                continue;
            }
            _ => {}
        }
        at += 1;
    }
    out
}

/// The module a path reaches: its longest prefix that is a module, and,
/// when that is a folder's own module, through its `use` of the next name
/// (`super::Gateway` is `gateway`, `crate::downstream::DownstreamError` is
/// `downstream::error`).
fn resolve(
    mut path: Vec<String>,
    modules: &BTreeMap<Vec<String>, PathBuf>,
    uses: &BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>>,
) -> Vec<String> {
    for _ in 0..8 {
        let module = (0..=path.len()).rev().map(|n| &path[..n]).find(|p| modules.contains_key(*p)).unwrap().to_vec();
        // A folder's own module hands on the names its `use`s bring in; a
        // file that names another's `use` imports that file.
        let face = modules.keys().any(|m| m.len() > module.len() && m.starts_with(&module));
        let through = path.get(module.len()).filter(|_| face).and_then(|name| uses.get(&module)?.get(name));
        match through {
            Some(target) if *target != path[..=module.len()] => {
                path = [target.as_slice(), &path[module.len() + 1..]].concat();
            }
            _ => return module,
        }
    }
    panic!("a `use` loop at {path:?}")
}

/// A folder of `src/` (`gateway/stateless`) and its units: each file by its
/// name (`holds`), each subfolder as one (`stateless/`), and the file that
/// is the folder's own module (`mod.rs`, or `config.rs` beside `config/`) as
/// `mod`.
type Edge = (String, String, String);

/// Every import between two units of one folder, with the files and the
/// paths that make it.
fn folder_edges() -> BTreeMap<Edge, Vec<String>> {
    let mut files = Vec::new();
    sources(Path::new(SRC), &mut files);
    files.retain(|f| !f.ends_with("main.rs"));
    let modules: BTreeMap<Vec<String>, PathBuf> = files.iter().map(|f| (module_path(f), f.clone())).collect();
    let named: BTreeMap<Vec<String>, Vec<Named>> = files
        .iter()
        .map(|f| (module_path(f), named_paths(&module_path(f), &fs::read_to_string(f).unwrap(), &modules)))
        .collect();
    let uses = named
        .iter()
        .map(|(module, paths)| {
            let by_name = paths
                .iter()
                .filter(|n| n.used_at_top && n.path.len() > module.len().min(1))
                .map(|n| (n.path.last().unwrap().clone(), n.path.clone()))
                .collect();
            (module.clone(), by_name)
        })
        .collect();
    let unit = |path: &[String], at: usize| match path.get(at) {
        None => "mod".to_string(),
        Some(name) if modules.keys().any(|m| m.len() > at + 1 && m[..=at] == path[..=at]) => format!("{name}/"),
        Some(name) => name.clone(),
    };
    let mut edges: BTreeMap<Edge, Vec<String>> = BTreeMap::new();
    for (own, paths) in &named {
        for n in paths {
            let target = resolve(n.path.clone(), &modules, &uses);
            let common = own.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common == 0 || target == *own {
                continue;
            }
            let edge = (own[..common].join("/"), unit(own, common), unit(&target, common));
            let file = modules[own].strip_prefix(SRC).unwrap().display();
            edges.entry(edge).or_default().push(format!("{file}: {}", n.path.join("::")));
        }
    }
    for why in edges.values_mut() {
        why.dedup();
    }
    edges
}

/// The units `from` reaches in one folder's arrows.
fn reach(arrows: &BTreeSet<(&str, &str)>, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut next = vec![from.to_string()];
    while let Some(unit) = next.pop() {
        for (_, to) in arrows.iter().filter(|(f, _)| *f == unit) {
            if seen.insert(to.to_string()) {
                next.push(to.to_string());
            }
        }
    }
    seen
}

/// What is wrong with a folder's arrows, given the arrows allowed to run
/// up: an arrow of a loop not allowed, an allowance no arrow of the code
/// makes, or one that closes no loop (the list can only shrink).
fn floor_faults(edges: &BTreeMap<Edge, Vec<String>>, allowed: &[(&str, &str, &str, &str)]) -> Vec<String> {
    let allowed: BTreeSet<Edge> =
        allowed.iter().map(|(folder, from, to, _)| (folder.to_string(), from.to_string(), to.to_string())).collect();
    let mut faults = Vec::new();
    for edge in allowed.difference(&edges.keys().cloned().collect()) {
        faults.push(format!("allowed, but no longer in the code (take it off the list): {edge:?}"));
    }
    let folders: BTreeSet<&String> = edges.keys().map(|(folder, ..)| folder).collect();
    for folder in folders {
        let arrows: BTreeSet<(&str, &str)> = edges
            .keys()
            .filter(|edge| edge.0 == *folder && !allowed.contains(*edge))
            .map(|(_, from, to)| (from.as_str(), to.as_str()))
            .collect();
        for (from, to) in &arrows {
            if reach(&arrows, to).contains(*from) {
                let why = &edges[&(folder.clone(), from.to_string(), to.to_string())];
                faults.push(format!("{folder}: {from} -> {to} closes a loop: {why:?}"));
            }
        }
        for (_, from, to) in allowed.iter().filter(|edge| edge.0 == *folder) {
            if edges.contains_key(&(folder.clone(), from.clone(), to.clone())) && !reach(&arrows, to).contains(from) {
                faults
                    .push(format!("allowed, but closes no loop now (take it off the list): {folder}: {from} -> {to}"));
            }
        }
    }
    faults
}

/// The arrows that close a loop today, each allowed by name with why (none
/// since issue 44's third pass): the check fails on any other loop, and on an allowance the code no longer
/// needs, so this list can only shrink. (folder, from, to, why)
///
/// Of the arrows of a loop, the fewest are allowed, and where the choice is
/// free, those that run up: a folder's own module defines what its files
/// share, so it stands low, and its arrows to them run up.
const ALLOWED: &[(&str, &str, &str, &str)] = &[];

#[test]
fn no_two_files_of_a_folder_import_each_other_in_a_loop() {
    let mut faults = floor_faults(&folder_edges(), ALLOWED);
    let architecture = fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/ARCHITECTURE.md")).unwrap();
    let said = format!("The {} arrows that close a loop today", ALLOWED.len());
    if !architecture.split_whitespace().collect::<Vec<_>>().join(" ").contains(&said) {
        faults.push(format!("docs/ARCHITECTURE.md says how many arrows are allowed: \"{said}\""));
    }
    assert!(
        faults.is_empty(),
        "inside a folder, files (and each subfolder as one) stand on floors: a file imports only those below it. \
         Move what two files need of each other to the lower one, or name a `use` from the file that defines it; \
         take an allowance the code no longer needs off ALLOWED (and its count off docs/ARCHITECTURE.md):\n{}",
        faults.join("\n")
    );
}

#[test]
fn the_folder_check_sees_a_loop_and_an_allowance_not_needed() {
    // The parser and the check, on code they must refuse.
    let modules: BTreeMap<Vec<String>, PathBuf> =
        [vec![], vec!["g".into()], vec!["g".into(), "a".into()], vec!["g".into(), "b".into()]]
            .into_iter()
            .map(|m| (m, PathBuf::new()))
            .collect();
    let text = "use super::{b::{self, X}, Y};\n// super::c in a comment\nlet s = \"super::c\";\nmod tests { use super::*; fn f() { super::super::b::z(); } }";
    let paths: Vec<String> =
        named_paths(&["g".into(), "a".into()], text, &modules).iter().map(|n| n.path.join("::")).collect();
    assert_eq!(paths, ["g::b", "g::b::X", "g::Y", "g::a", "g::b::z"]);
    let edge = |from: &str, to: &str| (("g".to_string(), from.to_string(), to.to_string()), vec![String::new()]);
    let looped: BTreeMap<Edge, Vec<String>> = [edge("a", "b"), edge("b", "a"), edge("b", "mod")].into_iter().collect();
    assert_eq!(floor_faults(&looped, &[]).len(), 2, "both arrows of a loop are named");
    assert!(floor_faults(&looped, &[("g", "b", "a", "")]).is_empty());
    assert_eq!(floor_faults(&looped, &[("g", "b", "a", ""), ("g", "b", "mod", "")]).len(), 1, "closes no loop");
    assert_eq!(floor_faults(&looped, &[("g", "b", "a", ""), ("g", "a", "c", "")]).len(), 1, "not in the code");
}

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
                      for each name of USED in tests/layers.rs, run the downstream HTTP tests (faults, server_faults, \
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
    sources(Path::new(SRC), &mut files);
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
