//! Merging what several servers offer into one list per kind, and finding
//! which server owns a name or URI. Tools and prompts are renamed
//! `<prefix><separator><name>` (`files__read`), made to fit what clients
//! accept ([`exposed_name`]); resource URIs and templates are kept. Each
//! server's [`Filter`] decides which of its items are listed at all. A
//! tool list also carries its search index ([`search`]), built when first
//! searched.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::{Map, Value};

use crate::protocol::jsonrpc::RpcError;

pub mod search;

pub use search::ToolIndex;

/// The four lists MCP paginates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListKind {
    Tools,
    Prompts,
    Resources,
    Templates,
}

impl ListKind {
    pub const ALL: [ListKind; 4] = [ListKind::Tools, ListKind::Prompts, ListKind::Resources, ListKind::Templates];

    pub fn from_method(method: &str) -> Option<ListKind> {
        ListKind::ALL.into_iter().find(|k| k.method() == method)
    }

    pub fn method(self) -> &'static str {
        match self {
            ListKind::Tools => "tools/list",
            ListKind::Prompts => "prompts/list",
            ListKind::Resources => "resources/list",
            ListKind::Templates => "resources/templates/list",
        }
    }

    /// The result field that holds the items.
    pub fn field(self) -> &'static str {
        match self {
            ListKind::Tools => "tools",
            ListKind::Prompts => "prompts",
            ListKind::Resources => "resources",
            ListKind::Templates => "resourceTemplates",
        }
    }

    /// The server capability that says the list exists.
    pub fn capability(self) -> &'static str {
        match self {
            ListKind::Tools => "tools",
            ListKind::Prompts => "prompts",
            ListKind::Resources | ListKind::Templates => "resources",
        }
    }

    /// The item field that identifies it.
    fn key(self) -> &'static str {
        match self {
            ListKind::Tools | ListKind::Prompts => "name",
            ListKind::Resources => "uri",
            ListKind::Templates => "uriTemplate",
        }
    }

    fn renamed(self) -> bool {
        matches!(self, ListKind::Tools | ListKind::Prompts)
    }

    /// The `list_changed` notification that makes this list stale.
    pub fn changed_notification(self) -> &'static str {
        match self {
            ListKind::Tools => "notifications/tools/list_changed",
            ListKind::Prompts => "notifications/prompts/list_changed",
            ListKind::Resources | ListKind::Templates => "notifications/resources/list_changed",
        }
    }
}

/// How a server's tool and prompt names are exposed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Naming {
    pub prefix: String,
    pub separator: String,
    /// The longest exposed name (`tool_name_max`).
    pub max: usize,
}

impl Naming {
    /// `<prefix><separator><name>`, or the name alone with an empty prefix.
    pub fn raw(&self, name: &str) -> String {
        if self.prefix.is_empty() { name.to_string() } else { format!("{}{}{name}", self.prefix, self.separator) }
    }
}

/// The name a client sees for `name`: `^[a-zA-Z0-9_-]{1,max}$`, what
/// Claude, OpenAI and Gemini accept. Other characters become `_`. A name
/// that is still too long gives up the end of its prefix first, so the
/// tool's own name stays readable, and ends in `-` and 8 hex digits of the
/// SHA-256 of the full name: the same at every start and reload, and
/// distinct. The server always gets its own name back.
pub fn exposed_name(naming: &Naming, name: &str) -> String {
    let raw = naming.raw(name);
    let clean = fit_charset(&raw);
    if (1..=naming.max).contains(&clean.len()) {
        return clean;
    }
    let (prefix, separator, name) = (fit_charset(&naming.prefix), fit_charset(&naming.separator), fit_charset(name));
    let room = naming.max.saturating_sub(HASH_SUFFIX);
    match room.checked_sub(separator.len() + name.len()) {
        Some(keep) if !prefix.is_empty() && keep >= 1 => {
            let hash = &crate::runtime::sha256::hex(raw.as_bytes())[..8];
            format!("{}{separator}{name}-{hash}", &prefix[..keep.min(prefix.len())])
        }
        _ => hashed(&clean, &raw, naming.max),
    }
}

/// `-` and 8 hex digits.
const HASH_SUFFIX: usize = 9;

/// Every character outside `[a-zA-Z0-9_-]` as `_`.
fn fit_charset(text: &str) -> String {
    text.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect()
}

/// `clean` cut to leave room for `-` and a hash of `raw`.
fn hashed(clean: &str, raw: &str, max: usize) -> String {
    let hash = &crate::runtime::sha256::hex(raw.as_bytes())[..8];
    let keep = clean.len().min(max.saturating_sub(HASH_SUFFIX));
    format!("{}-{hash}", &clean[..keep])
}

/// Which of a server's items are exposed: globs (`*`, `?`) over the names
/// (URIs for resources) the server itself uses. Empty `allow`: all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    pub allow: Vec<String>,
    pub deny: Vec<String>,
}

impl Filter {
    pub fn admits(&self, name: &str) -> bool {
        (self.allow.is_empty() || self.allow.iter().any(|g| glob(g, name))) && !self.deny.iter().any(|g| glob(g, name))
    }
}

/// Whether `text` matches `pattern`, where `*` is any run of characters and
/// `?` any one.
pub fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// A tool or prompt whose exposed name is not `<prefix><separator><name>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renamed {
    pub name: String,
    pub server: String,
    pub original: String,
}

/// One item of a merged list.
#[derive(Debug, Clone)]
pub struct Entry {
    pub server: String,
    /// The name, URI or template as the server knows it.
    pub original: String,
    /// The item as the client sees it.
    pub item: Value,
}

/// What one server listed, in the order of the configuration.
pub struct ServerItems {
    pub server: String,
    pub naming: Naming,
    /// Its filter for this kind of list.
    pub filter: Filter,
    pub items: Vec<Value>,
}

/// A merged list, with an index from the exposed key to the entry.
#[derive(Debug)]
pub struct List {
    pub kind: ListKind,
    pub entries: Vec<Entry>,
    index: HashMap<String, usize>,
    /// The search index of a tool list, built by the first search: it is
    /// cached, shared and dropped with the list.
    tool_index: OnceLock<ToolIndex>,
}

impl List {
    /// Merges per-server items (given in configuration order), leaving out
    /// what their filters hide. The same name from two servers (empty
    /// prefixes): the first server wins and the other is hidden. Two names
    /// that become one only when made to fit: the later gets a hash suffix.
    /// Returns the list, one line per collision, and the renamed items.
    pub fn merge(kind: ListKind, servers: Vec<ServerItems>) -> (List, Vec<String>, Vec<Renamed>) {
        let mut list = List { kind, entries: Vec::new(), index: HashMap::new(), tool_index: OnceLock::new() };
        let (mut collisions, mut renamed) = (Vec::new(), Vec::new());
        // The raw name behind each exposed one, to tell a real collision from one made by fitting.
        let mut raw_of: HashMap<String, String> = HashMap::new();
        let what = &kind.field()[..kind.field().len() - 1];
        for ServerItems { server, naming, filter, items } in servers {
            for item in items {
                let Value::Object(mut object) = item else { continue };
                let Some(original) = object.get(kind.key()).and_then(Value::as_str).map(str::to_string) else {
                    continue;
                };
                if !filter.admits(&original) {
                    continue;
                }
                let (raw, mut exposed) = if kind.renamed() {
                    (naming.raw(&original), exposed_name(&naming, &original))
                } else {
                    (original.clone(), original.clone())
                };
                if let Some(&i) = list.index.get(&exposed) {
                    if raw_of.get(&exposed) == Some(&raw) {
                        let winner = &list.entries[i].server;
                        if winner != &server {
                            collisions.push(format!(
                                "{what} `{exposed}` of server `{server}` is hidden by server `{winner}`"
                            ));
                        }
                        continue;
                    }
                    exposed = hashed(&exposed, &raw, naming.max);
                    if list.index.contains_key(&exposed) {
                        collisions.push(format!("{what} `{original}` of server `{server}` has no name left to take"));
                        continue;
                    }
                }
                if kind.renamed() {
                    if exposed != raw {
                        renamed.push(Renamed {
                            name: exposed.clone(),
                            server: server.clone(),
                            original: original.clone(),
                        });
                    }
                    object.insert(kind.key().to_string(), Value::String(exposed.clone()));
                }
                raw_of.insert(exposed.clone(), raw);
                list.index.insert(exposed, list.entries.len());
                list.entries.push(Entry { server: server.clone(), original, item: Value::Object(object) });
            }
        }
        (list, collisions, renamed)
    }

    pub fn find(&self, exposed: &str) -> Option<&Entry> {
        self.index.get(exposed).map(|&i| &self.entries[i])
    }

    /// The search index of its entries, built on the first call; and
    /// whether this call built it.
    pub fn tool_index(&self) -> (&ToolIndex, bool) {
        let mut built = false;
        let index = self.tool_index.get_or_init(|| {
            built = true;
            ToolIndex::build(&self.entries)
        });
        (index, built)
    }

    /// Bytes of the search index, if it was built: what the list holds
    /// beyond its items.
    pub fn tool_index_bytes(&self) -> usize {
        self.tool_index.get().map_or(0, ToolIndex::bytes)
    }

    /// One page of `items` (some of its entries, or others of the same
    /// kind) as a result object, with the same cursors as [`List::page`].
    pub fn page_of(&self, items: &[&Value], cursor: Option<&str>, size: usize) -> Result<Value, RpcError> {
        page_items(self.kind, items, cursor, size)
    }

    /// One page as a result object: the items and, when more follow, `nextCursor`.
    pub fn page(&self, cursor: Option<&str>, size: usize) -> Result<Value, RpcError> {
        let items: Vec<&Value> = self.entries.iter().map(|e| &e.item).collect();
        page_items(self.kind, &items, cursor, size)
    }
}

/// One page of `items` as a result object: the items and, when more
/// follow, `nextCursor`.
fn page_items(kind: ListKind, items: &[&Value], cursor: Option<&str>, size: usize) -> Result<Value, RpcError> {
    let start = match cursor {
        None => 0,
        Some(c) => decode_cursor(c)
            .filter(|&o| o <= items.len())
            .ok_or_else(|| RpcError::invalid_params(format!("invalid cursor `{c}`: start again without one")))?,
    };
    let end = (start + size).min(items.len());
    let page: Vec<Value> = items[start..end].iter().map(|&item| item.clone()).collect();
    let mut result = Map::new();
    result.insert(kind.field().into(), Value::Array(page));
    if end < items.len() {
        result.insert("nextCursor".into(), Value::String(encode_cursor(end)));
    }
    Ok(Value::Object(result))
}

const CURSOR_PREFIX: &str = "mcpgate-";

fn encode_cursor(offset: usize) -> String {
    format!("{CURSOR_PREFIX}{offset:x}")
}

fn decode_cursor(cursor: &str) -> Option<usize> {
    usize::from_str_radix(cursor.strip_prefix(CURSOR_PREFIX)?, 16).ok()
}

/// Whether `uri` fits an RFC 6570 template such as `file:///{path}`: the
/// literal parts must appear in order; each expression matches one or more
/// characters (`{+x}` and `{#x}` may cross `/`, plain `{x}` may not).
pub fn template_matches(template: &str, uri: &str) -> bool {
    let mut parts = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else { return false };
        parts.push((&rest[..open], &rest[open + 1..open + close]));
        rest = &rest[open + close + 1..];
    }
    matches_from(&parts, rest, uri)
}

fn matches_from(parts: &[(&str, &str)], tail: &str, uri: &str) -> bool {
    let Some(((literal, expression), more)) = parts.split_first() else { return uri == tail };
    let Some(after) = uri.strip_prefix(literal) else { return false };
    let crosses = expression.starts_with('+') || expression.starts_with('#') || expression.starts_with('/');
    // Try every length for this expression, shortest first; templates are short.
    let ends = after.char_indices().map(|(i, _)| i).chain(std::iter::once(after.len())).filter(|&end| end > 0);
    for end in ends {
        let taken = &after[..end];
        if !crosses && taken.contains('/') {
            break;
        }
        if matches_from(more, tail, &after[end..]) {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn naming(prefix: &str) -> Naming {
        Naming { prefix: prefix.into(), separator: "__".into(), max: 64 }
    }

    fn items(server: &str, prefix: &str, names: &[&str]) -> ServerItems {
        ServerItems {
            server: server.into(),
            naming: naming(prefix),
            filter: Filter::default(),
            items: names.iter().map(|n| json!({"name": n, "description": format!("{n} of {server}")})).collect(),
        }
    }

    #[test]
    fn prefixes_names_and_keeps_the_first_server_on_collision() {
        let (list, collisions, renamed) = List::merge(
            ListKind::Tools,
            vec![
                items("files", "files", &["read", "write"]),
                items("a", "", &["echo"]),
                items("b", "", &["echo", "add"]),
            ],
        );
        let names: Vec<&str> = list.entries.iter().map(|e| e.item["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["files__read", "files__write", "echo", "add"]);
        let echo = list.find("echo").unwrap();
        assert_eq!((echo.server.as_str(), echo.original.as_str()), ("a", "echo"));
        assert_eq!(echo.item["description"], "echo of a");
        assert_eq!(list.find("files__read").unwrap().original, "read");
        assert_eq!(collisions, ["tool `echo` of server `b` is hidden by server `a`"]);
        assert!(renamed.is_empty());
    }

    #[test]
    fn exposed_names_fit_what_clients_accept() {
        let fit =
            |name: &str| name.len() <= 64 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        assert_eq!(exposed_name(&naming("files"), "read"), "files__read");
        assert_eq!(exposed_name(&naming("files"), "read.all"), "files__read_all");
        assert_eq!(exposed_name(&naming(""), "ünï cödé"), "_n__c_d_");
        let long = exposed_name(&naming("a_server_with_a_long_name"), "and_a_tool_with_an_even_longer_name_than_that");
        assert!(fit(&long) && long.len() == 64, "{long}");
        assert!(long.starts_with("a_server__and_a_tool_with_an_even_longer_name_than_that-"), "{long}");
        assert_eq!(
            long,
            exposed_name(&naming("a_server_with_a_long_name"), "and_a_tool_with_an_even_longer_name_than_that")
        );
        let dotted = Naming { prefix: "fs".into(), separator: ".".into(), max: 20 };
        assert_eq!(exposed_name(&dotted, "x"), "fs_x");
        assert_eq!(exposed_name(&naming("p"), "").len(), 3);
    }

    #[test]
    fn names_that_meet_only_once_fitted_are_told_apart_the_same_way_every_time() {
        let merge = || List::merge(ListKind::Tools, vec![items("s", "s", &["a.b", "a_b", "a-b"])]);
        let (list, collisions, renamed) = merge();
        let names: Vec<&str> = list.entries.iter().map(|e| e.item["name"].as_str().unwrap()).collect();
        assert_eq!(names.len(), 3, "{names:?} {collisions:?}");
        assert_eq!(names[0], "s__a_b");
        assert!(names[1].starts_with("s__a_b-") && names[1].len() == 15, "{names:?}");
        assert_eq!(names[2], "s__a-b");
        assert_eq!(list.find(names[1]).unwrap().original, "a_b");
        assert_eq!(renamed.len(), 2, "a.b and a_b are renamed: {renamed:?}");
        assert_eq!(merge().0.entries[1].item["name"], names[1], "the same on every merge");
    }

    #[test]
    fn filters_allow_then_deny_by_glob() {
        let filter = Filter { allow: vec!["read*".into(), "st?t".into()], deny: vec!["*secret*".into()] };
        for (name, admitted) in [
            ("read", true),
            ("read_file", true),
            ("stat", true),
            ("start", false),
            ("read_secret", false),
            ("write", false),
        ] {
            assert_eq!(filter.admits(name), admitted, "{name}");
        }
        assert!(Filter::default().admits("anything"));
        assert!(glob("*", "") && glob("a*b*c", "aXXbYc") && !glob("a*b", "ac") && glob("??", "xy") && !glob("?", ""));
        let mut hidden = items("s", "s", &["keep", "drop"]);
        hidden.filter = Filter { allow: vec![], deny: vec!["drop".into()] };
        let (list, _, _) = List::merge(ListKind::Tools, vec![hidden]);
        assert!(list.find("s__keep").is_some() && list.find("s__drop").is_none());
    }

    #[test]
    fn pages_are_stable_and_bad_cursors_are_refused() {
        let names: Vec<String> = (0..5).map(|i| format!("t{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let (list, _, _) = List::merge(ListKind::Tools, vec![items("s", "", &refs)]);
        let first = list.page(None, 2).unwrap();
        assert_eq!(first["tools"].as_array().unwrap().len(), 2);
        let second = list.page(first["nextCursor"].as_str(), 2).unwrap();
        assert_eq!(second["tools"][0]["name"], "t2");
        let third = list.page(second["nextCursor"].as_str(), 2).unwrap();
        assert_eq!(third["tools"].as_array().unwrap().len(), 1);
        assert!(third.get("nextCursor").is_none());
        for bad in ["x", "mcpgate-zz", "mcpgate-ff"] {
            assert_eq!(list.page(Some(bad), 2).unwrap_err().code, crate::protocol::jsonrpc::INVALID_PARAMS, "{bad}");
        }
    }

    #[test]
    fn resources_keep_their_uris() {
        let servers = vec![ServerItems {
            server: "s".into(),
            naming: naming("p"),
            filter: Filter::default(),
            items: vec![json!({"uri": "file:///a", "name": "a"})],
        }];
        let (list, _, _) = List::merge(ListKind::Resources, servers);
        assert_eq!(list.find("file:///a").unwrap().item["name"], "a");
    }

    #[test]
    fn templates_match_by_their_literal_parts() {
        assert!(template_matches("fixture://a/items/{id}", "fixture://a/items/42"));
        assert!(!template_matches("fixture://a/items/{id}", "fixture://b/items/42"));
        assert!(!template_matches("fixture://a/items/{id}", "fixture://a/items/"));
        assert!(!template_matches("fixture://a/items/{id}", "fixture://a/items/4/2"));
        assert!(template_matches("file:///{+path}", "file:///etc/hosts"));
        assert!(template_matches("test://template/{id}/data", "test://template/7/data"));
        assert!(!template_matches("test://template/{id}/data", "test://template/7/other"));
        assert!(template_matches("db://{schema}.{table}", "db://public.users"));
    }
}
