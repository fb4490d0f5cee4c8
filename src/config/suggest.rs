//! "Did you mean": the known key nearest a misspelled one.
//!
//! The distance is Levenshtein's with the swap of two neighbours counted as
//! one edit (optimal string alignment: `wrokers` is one edit from
//! `workers`), compared without regard to case. A key is offered when it is
//! at most a third of the typed key's length away (at least one edit), the
//! nearest first: `comand` finds `command`, `arg` finds `args`,
//! `mcpServer` finds `mcpServers`, and `x` finds nothing.

use super::client_keys;
use super::keys::KEYS;

/// The problem of an unknown key at `doc` (a documented path, as in
/// [`KEYS`]: `""` for the top level, `mcpServers.<name>` for a server),
/// with the nearest known key when one is near enough.
pub(crate) fn unknown_key(typed: &str, doc: &str) -> String {
    match nearest(typed, known_at(doc)) {
        Some(key) => format!("unknown key; did you mean `{key}`?"),
        None => "unknown key".to_string(),
    }
}

/// The keys an object at `doc` may hold: those [`KEYS`] documents there,
/// and the keys of clients' files that mcpgate reads or ignores there.
pub(crate) fn known_at(doc: &str) -> Vec<&'static str> {
    let mut known: Vec<&'static str> = KEYS
        .iter()
        .filter_map(|k| if doc.is_empty() { Some(k.name) } else { k.name.strip_prefix(doc)?.strip_prefix('.') })
        .map(|rest| rest.split('.').next().unwrap_or(rest).trim_end_matches("[]"))
        .collect();
    known.extend(client_keys::known_at(doc));
    known.dedup();
    known
}

/// The candidate nearest `typed`, if it is near enough to be a likely misspelling.
pub(crate) fn nearest<'a>(typed: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let typed = typed.to_lowercase();
    let limit = (typed.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .map(|c| (distance(&typed, &c.to_lowercase()), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Optimal string alignment distance, by characters.
fn distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    // Three rows of the table: two back (for a swap), the last, and this one.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut last: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut row = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            row[j] = (last[j] + 1).min(row[j - 1] + 1).min(last[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                row[j] = row[j].min(before[j - 2] + 1);
            }
        }
        before = std::mem::replace(&mut last, row);
    }
    last[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misspelled_key_finds_the_key_it_is_nearest() {
        assert_eq!(distance("wrokers", "workers"), 1, "a swap is one edit");
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("kitten", "sitting"), 3);
        for (typed, doc, meant) in [
            ("comand", "mcpServers.<name>", "command"),
            ("arg", "mcpServers.<name>", "args"),
            ("Args", "mcpServers.<name>", "args"),
            ("evn", "mcpServers.<name>", "env"),
            ("headres", "mcpServers.<name>", "headers"),
            ("serverURL", "mcpServers.<name>", "serverUrl"),
            ("sesion_idle_timeout_secs", "", "session_idle_timeout_secs"),
            ("mcpServer", "", "mcpServers"),
            ("mcpservers", "", "mcpServers"),
            ("wrokers", "", "workers"),
            ("token", "auth", "tokens"),
            ("alow", "mcpServers.<name>.tools", "allow"),
        ] {
            let problem = unknown_key(typed, doc);
            assert_eq!(problem, format!("unknown key; did you mean `{meant}`?"), "{typed}");
        }
    }

    #[test]
    fn a_key_far_from_every_known_one_gets_no_guess() {
        for (typed, doc) in
            [("x", ""), ("color", "mcpServers.<name>"), ("executable", "mcpServers.<name>"), ("zzz", "")]
        {
            assert_eq!(unknown_key(typed, doc), "unknown key", "{typed}");
        }
    }
}
