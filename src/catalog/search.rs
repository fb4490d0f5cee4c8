//! Ranking the tools of a merged list for `find_tools` (the `tool_search`
//! mode): BM25F over four fields of each tool, its name, its title, its
//! parameters' names and its description, with the name weighted most, as
//! a model's query most often names the action and the object.
//!
//! No search engine: for a few thousand tools an inverted index in a
//! `HashMap` is a few hundred kilobytes and answers in well under a
//! millisecond (figures in docs/TOOL_SEARCH.md). The index is built from a
//! [`List`](super::List) once, when first searched, and lives and dies with
//! it: a list rebuilt on `list_changed` or a reload brings a new index.
//!
//! What measurably helped on the fixture's corpus (`fixture/corpus/`, 300
//! tools, 50 queries; see `tests/tool_search.rs`) is kept: splitting names
//! at `_ - .`, camelCase and digits; a light stemmer (plurals, `-ing`,
//! `-ed`, a final `e`); stop words; the field weights below; and partial
//! credit for a query word that begins a longer word of the index
//! (`repo` in `repository`).

use std::collections::HashMap;

use serde_json::Value;

/// The fields of a tool, in the order of [`WEIGHTS`].
const FIELDS: usize = 4;
const NAME: usize = 0;
const TITLE: usize = 1;
const PARAMS: usize = 2;
const DESCRIPTION: usize = 3;

/// How much a word counts in each field: name, title, parameters, description.
const WEIGHTS: [f32; FIELDS] = [3.0, 2.0, 0.5, 1.0];
/// How much each field's length is normalised (BM25's `b`): a long
/// description should not win by repeating words; names are all short.
const LENGTH_NORM: [f32; FIELDS] = [0.5, 0.5, 0.5, 0.75];
/// BM25's saturation of repeated words.
const K1: f32 = 2.0;
/// Words a query or a description says that tell nothing about a tool.
const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "any", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from", "how", "i", "if", "in",
    "into", "is", "it", "its", "me", "my", "of", "on", "or", "our", "so", "some", "that", "the", "their", "them",
    "then", "this", "to", "us", "we", "what", "when", "where", "which", "with", "you", "your",
];
/// Longest query mcpgate reads, in bytes; the rest is ignored.
pub(crate) const MAX_QUERY_BYTES: usize = 1024;
/// Most words of one query that are looked up.
const MAX_QUERY_WORDS: usize = 32;

/// One tool's count of a word, per field.
#[derive(Debug, Clone, Copy)]
struct Posting {
    /// Its place in the list's entries.
    tool: u32,
    counts: [u16; FIELDS],
}

/// The inverted index of one merged tool list.
#[derive(Debug)]
pub(crate) struct ToolIndex {
    /// Each tool's field lengths, in words, in the order of the list.
    lengths: Vec<[u16; FIELDS]>,
    /// The average of each field's length.
    average: [f32; FIELDS],
    /// Word (stemmed) → the tools that have it.
    words: HashMap<Box<str>, Vec<Posting>>,
    bytes: usize,
}

/// A tool found: its place in the list's entries, and its score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Hit {
    pub(crate) entry: usize,
    pub(crate) score: f32,
}

impl ToolIndex {
    /// Indexes tools, each the name its server knows it by and its
    /// definition, in the order of their list.
    pub(crate) fn build<S: AsRef<str>>(tools: impl IntoIterator<Item = (S, Value)>) -> ToolIndex {
        let mut lengths = Vec::new();
        let mut words: HashMap<Box<str>, Vec<Posting>> = HashMap::new();
        let mut totals = [0f64; FIELDS];
        for (tool, (original, item)) in tools.into_iter().enumerate() {
            let fields = fields(original.as_ref(), &item);
            let mut counts: HashMap<String, [u16; FIELDS]> = HashMap::new();
            let mut length = [0u16; FIELDS];
            for (field, text) in fields.iter().enumerate() {
                for word in tokens(text) {
                    length[field] = length[field].saturating_add(1);
                    let count = &mut counts.entry(word).or_default()[field];
                    *count = count.saturating_add(1);
                }
                totals[field] += f64::from(length[field]);
            }
            lengths.push(length);
            for (word, counts) in counts {
                words.entry(word.into_boxed_str()).or_default().push(Posting { tool: tool as u32, counts });
            }
        }
        let n = lengths.len().max(1) as f64;
        let average = totals.map(|total| ((total / n) as f32).max(1.0));
        for postings in words.values_mut() {
            postings.shrink_to_fit();
        }
        let mut index = ToolIndex { lengths, average, words, bytes: 0 };
        index.bytes = index.measure();
        index
    }

    /// The tools indexed.
    pub(crate) fn tools(&self) -> usize {
        self.lengths.len()
    }

    /// What the index holds on the heap, in bytes (an estimate that counts
    /// each allocation's payload and the map's slots): what it is charged
    /// against `max_memory_mb`.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    fn measure(&self) -> usize {
        use std::mem::size_of;
        let slot = size_of::<(Box<str>, Vec<Posting>)>() + 1;
        let words: usize = self.words.iter().map(|(w, p)| w.len() + p.capacity() * size_of::<Posting>()).sum();
        self.lengths.capacity() * size_of::<[u16; FIELDS]>() + self.words.capacity() * slot + words
    }

    /// The best `limit` tools for `query` among those `admit` lets
    /// through (by their place in the list), best first; a tie keeps the
    /// list's order. A query with no word that tells anything finds nothing.
    pub(crate) fn search(&self, query: &str, limit: usize, admit: impl Fn(usize) -> bool) -> Vec<Hit> {
        let query = &query[..query.floor_char_boundary(MAX_QUERY_BYTES)];
        let mut asked = tokens(query);
        asked.sort_unstable();
        asked.dedup();
        asked.truncate(MAX_QUERY_WORDS);
        let n = self.lengths.len() as f32;
        let mut scores: HashMap<u32, f32> = HashMap::new();
        for word in &asked {
            let mut add = |postings: &[Posting], credit: f32| {
                let df = postings.len() as f32;
                let idf = ln(1.0 + (n - df + 0.5) / (df + 0.5));
                for posting in postings {
                    let weight = self.weighted(posting);
                    *scores.entry(posting.tool).or_default() += credit * idf * weight / (K1 + weight);
                }
            };
            if let Some(postings) = self.words.get(word.as_str()) {
                add(postings, 1.0);
            }
            for other in synonyms(word) {
                if let Some(postings) = self.words.get(other.as_str()) {
                    add(postings, SYNONYM_CREDIT);
                }
            }
        }
        let mut hits: Vec<Hit> = scores
            .into_iter()
            .filter(|&(tool, _)| admit(tool as usize))
            .map(|(tool, score)| Hit { entry: tool as usize, score })
            .collect();
        hits.sort_unstable_by(|a, b| b.score.total_cmp(&a.score).then(a.entry.cmp(&b.entry)));
        hits.truncate(limit);
        hits
    }

    /// BM25F's weighted, length-normalised count of a word in one tool.
    fn weighted(&self, posting: &Posting) -> f32 {
        let length = &self.lengths[posting.tool as usize];
        (0..FIELDS)
            .map(|f| {
                let norm = 1.0 - LENGTH_NORM[f] + LENGTH_NORM[f] * f32::from(length[f]) / self.average[f];
                WEIGHTS[f] * f32::from(posting.counts[f]) / norm
            })
            .sum()
    }
}

/// What a query word earns for each tool that has one of its synonyms, against the word itself.
const SYNONYM_CREDIT: f32 = 0.5;
/// Words that API names use for one another: the verbs of reading,
/// searching, making, changing, removing, running and sending, and a few
/// nouns every tracker or file system names two ways. Both sides stemmed.
const SYNONYMS: &[&[&str]] = &[
    &["search", "find", "look", "query", "lookup"],
    &["get", "fetch", "retrieve", "read", "show", "view", "list", "display"],
    &["create", "add", "new", "make", "insert"],
    &["delete", "remove", "erase", "drop"],
    &["update", "edit", "modify", "change", "patch"],
    &["run", "execute", "exec", "invoke"],
    &["send", "post", "publish"],
    &["navigate", "go", "visit", "open"],
    &["download", "fetch"],
    &["directory", "folder", "dir"],
    &["issue", "ticket"],
];

/// The other words of `word`'s synonym groups, stemmed.
fn synonyms(word: &str) -> Vec<String> {
    let mut out = Vec::new();
    for group in SYNONYMS {
        let stems: Vec<String> = group.iter().map(|w| stem(w)).collect();
        if stems.iter().any(|s| s == word) {
            out.extend(stems.into_iter().filter(|s| s != word));
        }
    }
    out
}

/// A tool's four fields as text: its own name, its title, its
/// parameters' names, its description.
fn fields(original: &str, item: &Value) -> [String; FIELDS] {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let mut out: [String; FIELDS] = Default::default();
    // The tool's own name: the prefix is the same for all of a server's tools, and often a common word.
    out[NAME] = original.to_string();
    out[TITLE] = match item.get("title") {
        Some(Value::String(title)) => title.clone(),
        _ => text(&item["annotations"]["title"]),
    };
    if let Some(properties) = item["inputSchema"]["properties"].as_object() {
        let mut params: Vec<&str> = properties.keys().map(String::as_str).collect();
        params.extend(properties.values().filter_map(|p| p["description"].as_str()));
        out[PARAMS] = params.join(" ");
    }
    out[DESCRIPTION] = text(&item["description"]);
    out
}

/// The words of `text` as the index keeps them: split at anything that is
/// not a letter or a digit, at camelCase and at digits; lower case; stop
/// words left out; stemmed.
pub(crate) fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for run in text.split(|c: char| !c.is_alphanumeric()) {
        let chars: Vec<char> = run.chars().collect();
        let mut start = 0;
        for i in 1..=chars.len() {
            let boundary = i == chars.len() || {
                let (before, here) = (chars[i - 1], chars[i]);
                let next_lower = chars.get(i + 1).is_some_and(|c| c.is_lowercase());
                (before.is_lowercase() && here.is_uppercase())
                    || (before.is_uppercase() && here.is_uppercase() && next_lower)
                    || (before.is_ascii_digit() != here.is_ascii_digit())
            };
            if boundary {
                let word: String = chars[start..i].iter().flat_map(|c| c.to_lowercase()).collect();
                start = i;
                if !word.is_empty() && !STOP_WORDS.contains(&word.as_str()) {
                    out.push(stem(&word));
                }
            }
        }
    }
    out
}

/// A light stemmer: `files` → `fil`, `listing` → `list`, `created` and
/// `create` → `creat`, `repositories` → `repository`. Both the index and
/// the query go through it, so only sameness matters, not the English.
fn stem(word: &str) -> String {
    if word.len() <= 3 || !word.is_ascii() || word.bytes().any(|b| b.is_ascii_digit()) {
        return word.to_string();
    }
    let mut w = word.to_string();
    if let Some(base) = w.strip_suffix("ies").filter(|b| b.len() >= 2) {
        w = format!("{base}y");
    } else if w.ends_with("sses") || w.ends_with("xes") || w.ends_with("ches") || w.ends_with("shes") {
        w.truncate(w.len() - 2);
    } else if w.ends_with('s') && !w.ends_with("ss") && !w.ends_with("us") && !w.ends_with("is") {
        w.pop();
    }
    for suffix in ["ing", "ed"] {
        if let Some(base) = w.strip_suffix(suffix).filter(|b| b.len() >= 3) {
            w = base.to_string();
            break;
        }
    }
    if w.len() > 3 && w.ends_with('e') {
        w.pop();
    }
    w
}

/// The natural logarithm of `x` (finite, > 0), computed here rather than
/// with `f32::ln`: that is the one function mcpgate took from libm, and on
/// glibc it made the loader map `libm.so.6` at every start, 320 KiB of RSS
/// at rest. In f64, as 2 atanh((m - 1) / (m + 1)) with x = m 2^e and m
/// within [1/sqrt 2, sqrt 2]; the series' 15 terms reach f64's precision, so
/// the result is `x`'s logarithm correctly rounded to f32 (glibc's `logf`
/// is 1 ULP off that for about 1 input in 1,000).
fn ln(x: f32) -> f32 {
    let bits = f64::from(x).to_bits();
    let mut exponent = ((bits >> 52) & 0x7ff) as i32 - 1023;
    let mut m = f64::from_bits((bits & ((1 << 52) - 1)) | (1023 << 52));
    if m > std::f64::consts::SQRT_2 {
        m /= 2.0;
        exponent += 1;
    }
    let s = (m - 1.0) / (m + 1.0);
    let (mut term, mut sum) = (s, 0.0);
    for k in 0..15 {
        sum += term / f64::from(2 * k + 1);
        term *= s * s;
    }
    (f64::from(exponent) * std::f64::consts::LN_2 + 2.0 * sum) as f32
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    type Entry = (String, Value);

    fn entry(name: &str, description: &str, params: &[&str]) -> Entry {
        let properties: serde_json::Map<String, Value> = params.iter().map(|p| (p.to_string(), json!({}))).collect();
        (name.into(), json!({"name": name, "description": description, "inputSchema": {"properties": properties}}))
    }

    #[test]
    fn ln_is_the_logarithm_correctly_rounded_to_f32() {
        // Every idf of a list of up to 300 tools, and f32s up to 10^7 (about
        // a 1,000th of them): each equal to f64's logarithm rounded to f32.
        let idfs = (1..=300u16).flat_map(|n| (1..=n).map(move |df| (f32::from(n), f32::from(df))));
        let args = idfs.map(|(n, df)| 1.0 + (n - df + 0.5) / (df + 0.5));
        let sweep = (1.0f32.to_bits()..1e7f32.to_bits()).step_by(997).map(f32::from_bits);
        for x in args.chain(sweep) {
            assert_eq!(ln(x), f64::from(x).ln() as f32, "ln({x})");
        }
        assert_eq!(ln(1.0), 0.0);
    }

    #[test]
    fn names_split_at_underscores_dashes_dots_camel_case_and_digits() {
        assert_eq!(tokens("github__create_pull_request"), ["github", "creat", "pull", "request"]);
        assert_eq!(tokens("browser.takeScreenshot"), ["browser", "tak", "screenshot"]);
        assert_eq!(tokens("parseHTTPResponse-v2"), ["pars", "http", "respons", "v", "2"]);
        assert_eq!(tokens("Read the files of a directory"), ["read", "fil", "directory"]);
        assert_eq!(tokens("ünïcödé naïve"), ["ünïcödé", "naïve"]);
        assert!(tokens("  -- __ ").is_empty());
    }

    #[test]
    fn the_stemmer_meets_forms_of_one_word() {
        for (a, b) in
            [("files", "file"), ("creating", "create"), ("created", "creates"), ("repositories", "repository")]
        {
            assert_eq!(stem(a), stem(b), "{a} {b}");
        }
        assert_eq!(stem("class"), "class");
        assert_eq!(stem("status"), "status");
        assert_eq!(stem("v2"), "v2");
    }

    #[test]
    fn the_name_outranks_a_mention_in_a_description() {
        let entries = [
            entry("send_email", "Sends a message to an address; not a calendar event", &["to", "subject"]),
            entry("create_event", "Creates a calendar event", &["title", "start"]),
            entry("list_events", "Lists calendar events; an event may be sent by email", &["from", "to"]),
        ];
        let index = ToolIndex::build(entries.clone());
        let found: Vec<usize> = index.search("send an email", 3, |_| true).iter().map(|h| h.entry).collect();
        assert_eq!(found[0], 0, "{found:?}");
        let found: Vec<usize> = index.search("create a calendar event", 3, |_| true).iter().map(|h| h.entry).collect();
        assert_eq!(found[0], 1, "{found:?}");
        assert!(index.search("the of a", 3, |_| true).is_empty(), "stop words alone find nothing");
        assert!(index.search("zebra", 3, |_| true).is_empty());
    }

    #[test]
    fn a_synonym_finds_a_tool_below_the_word_itself() {
        let entries = [entry("search_files", "Searches for files", &["pattern"]), entry("find_files", "Finds", &[])];
        let index = ToolIndex::build(entries.clone());
        let hits = index.search("find files", 5, |_| true);
        assert_eq!(hits.iter().map(|h| h.entry).collect::<Vec<_>>(), [1, 0], "{hits:?}");
        let hits = index.search("erase a folder", 5, |_| true);
        assert!(hits.is_empty(), "no tool says delete, folder or directory: {hits:?}");
        let index = ToolIndex::build([entry("list_directory", "Lists a directory", &["path"])]);
        assert_eq!(index.search("folder", 5, |_| true).len(), 1);
        assert_eq!(synonyms(&stem("folders")), [stem("directory"), stem("dir")]);
    }

    #[test]
    fn admit_leaves_out_the_tools_a_search_may_not_return_and_limit_bounds_the_rest() {
        let entries: Vec<Entry> =
            (0..20).map(|i| entry(&format!("read_file_{i}"), "Reads a file", &["path"])).collect();
        let index = ToolIndex::build(entries.clone());
        let hits = index.search("read a file", 5, |i| i % 2 == 1);
        assert_eq!(hits.len(), 5);
        assert!(hits.iter().all(|h| h.entry % 2 == 1), "{hits:?}");
        assert_eq!(hits[0].entry, 1, "a tie keeps the list's order");
        assert_eq!(index.tools(), 20);
    }

    #[test]
    fn its_size_is_counted_and_grows_with_the_tools() {
        let small = ToolIndex::build([entry("a_tool", "does a thing", &["x"])]);
        let entries: Vec<Entry> =
            (0..500).map(|i| entry(&format!("tool_{i}"), &format!("does thing number {i} well"), &["x"])).collect();
        let large = ToolIndex::build(entries.clone());
        assert!(small.bytes() > 0 && large.bytes() > 20 * small.bytes(), "{} {}", small.bytes(), large.bytes());
        assert_eq!(ToolIndex::build(Vec::<Entry>::new()).search("anything", 5, |_| true), []);
    }

    #[test]
    fn a_huge_query_is_cut_and_still_answered() {
        let index = ToolIndex::build([entry("read_file", "Reads a file", &["path"])]);
        let query = "read ".repeat(100_000) + "é";
        assert_eq!(index.search(&query, 5, |_| true).len(), 1);
    }
}
