#![forbid(unsafe_code)]
//! Merging what several servers offer into one list per kind, and finding
//! which server owns a name or URI. Tools and prompts are renamed
//! `<prefix>__<name>`; resource URIs and templates are kept.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::jsonrpc::RpcError;

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

/// The name a client sees for `name` of a server with `prefix`.
pub fn exposed_name(prefix: &str, name: &str) -> String {
    if prefix.is_empty() { name.to_string() } else { format!("{prefix}__{name}") }
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
    pub prefix: String,
    pub items: Vec<Value>,
}

/// A merged list, with an index from the exposed key to the entry.
#[derive(Debug)]
pub struct List {
    pub kind: ListKind,
    pub entries: Vec<Entry>,
    index: HashMap<String, usize>,
}

impl List {
    /// Merges per-server items (given in configuration order): the first
    /// server wins a collision. Returns the list and one line per collision.
    pub fn merge(kind: ListKind, servers: Vec<ServerItems>) -> (List, Vec<String>) {
        let mut list = List { kind, entries: Vec::new(), index: HashMap::new() };
        let mut collisions = Vec::new();
        for ServerItems { server, prefix, items } in servers {
            for item in items {
                let Value::Object(mut object) = item else { continue };
                let Some(original) = object.get(kind.key()).and_then(Value::as_str).map(str::to_string) else {
                    continue;
                };
                let exposed = if kind.renamed() { exposed_name(&prefix, &original) } else { original.clone() };
                if let Some(&i) = list.index.get(&exposed) {
                    let winner = &list.entries[i].server;
                    if winner != &server {
                        collisions.push(format!(
                            "{} `{exposed}` of server `{server}` is hidden by server `{winner}`",
                            &kind.field()[..kind.field().len() - 1]
                        ));
                    }
                    continue;
                }
                if kind.renamed() {
                    object.insert(kind.key().to_string(), Value::String(exposed.clone()));
                }
                list.index.insert(exposed, list.entries.len());
                list.entries.push(Entry { server: server.clone(), original, item: Value::Object(object) });
            }
        }
        (list, collisions)
    }

    pub fn find(&self, exposed: &str) -> Option<&Entry> {
        self.index.get(exposed).map(|&i| &self.entries[i])
    }

    /// One page as a result object: the items and, when more follow, `nextCursor`.
    pub fn page(&self, cursor: Option<&str>, size: usize) -> Result<Value, RpcError> {
        let start = match cursor {
            None => 0,
            Some(c) => decode_cursor(c)
                .filter(|&o| o <= self.entries.len())
                .ok_or_else(|| RpcError::invalid_params(format!("invalid cursor `{c}`: start again without one")))?,
        };
        let end = (start + size).min(self.entries.len());
        let items: Vec<Value> = self.entries[start..end].iter().map(|e| e.item.clone()).collect();
        let mut result = Map::new();
        result.insert(self.kind.field().into(), Value::Array(items));
        if end < self.entries.len() {
            result.insert("nextCursor".into(), Value::String(encode_cursor(end)));
        }
        Ok(Value::Object(result))
    }
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

    fn items(server: &str, prefix: &str, names: &[&str]) -> ServerItems {
        ServerItems {
            server: server.into(),
            prefix: prefix.into(),
            items: names.iter().map(|n| json!({"name": n, "description": format!("{n} of {server}")})).collect(),
        }
    }

    #[test]
    fn prefixes_names_and_keeps_the_first_server_on_collision() {
        let (list, collisions) = List::merge(
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
    }

    #[test]
    fn pages_are_stable_and_bad_cursors_are_refused() {
        let names: Vec<String> = (0..5).map(|i| format!("t{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let (list, _) = List::merge(ListKind::Tools, vec![items("s", "", &refs)]);
        let first = list.page(None, 2).unwrap();
        assert_eq!(first["tools"].as_array().unwrap().len(), 2);
        let second = list.page(first["nextCursor"].as_str(), 2).unwrap();
        assert_eq!(second["tools"][0]["name"], "t2");
        let third = list.page(second["nextCursor"].as_str(), 2).unwrap();
        assert_eq!(third["tools"].as_array().unwrap().len(), 1);
        assert!(third.get("nextCursor").is_none());
        for bad in ["x", "mcpgate-zz", "mcpgate-ff"] {
            assert_eq!(list.page(Some(bad), 2).unwrap_err().code, crate::jsonrpc::INVALID_PARAMS, "{bad}");
        }
    }

    #[test]
    fn resources_keep_their_uris() {
        let servers = vec![ServerItems {
            server: "s".into(),
            prefix: "p".into(),
            items: vec![json!({"uri": "file:///a", "name": "a"})],
        }];
        let (list, _) = List::merge(ListKind::Resources, servers);
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
