//! The `tool_search` mode: instead of every tool of every server, which
//! clients cap (VS Code sends 128 tools at most) and which costs model
//! context on every turn, `tools/list` shows the pinned tools and two of
//! mcpgate's own:
//! - `find_tools` (`query`, optional `server`): the best tools for the
//!   query ([`crate::catalog::search`]) among those of the session's merged
//!   list, with their full definitions; with an empty query, the servers and
//!   their tool counts;
//! - `call_tool` (`name`, `arguments`): unwrapped into the `tools/call` of
//!   that exposed name, with the client's request id, `_meta` (its progress
//!   token) and `task`, so that progress, cancellation, the server's
//!   requests and tasks go as for a direct call, which also still works.
//!
//! The merged list is the session's own (its token's servers, each
//! server's filter): a search cannot find what the session could not call.
//! The index is built from that list and cached with it.
//!
//! For the status page, [`Searches`] keeps the most asked queries and how
//! often their first result was the next tool called: a bounded table
//! ([`MAX_QUERIES`] queries of [`MAX_QUERY_CHARS`] characters), whatever
//! clients send; [`ToolSearch`] keeps it.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::catalog::{List, glob};
use crate::config::Config;
use crate::downstream::Server;
use crate::protocol::jsonrpc::{Params, RpcError};
use crate::session::Session;
use crate::stats::Stats;

use super::outcome::Outcome;
use super::searches::{Searches, normalise};

pub(crate) const FIND_TOOLS: &str = "find_tools";
pub(crate) const CALL_TOOL: &str = "call_tool";

/// Servers `find_tools`'s description names; more are only counted.
const SERVERS_NAMED: usize = 20;
/// Tool names an empty query shows per server, as examples.
const EXAMPLES: usize = 5;

/// `call_tool`'s params made into those of the direct call: `name` and
/// `arguments` from its arguments; `_meta` (the progress token) and `task`
/// kept as the client wrote them.
pub(super) fn unwrap_call<'p>(mut params: Params<'p>) -> Result<Params<'p>, RpcError> {
    let needs = |why: &dyn std::fmt::Display| {
        RpcError::invalid_params(format!(
            "{CALL_TOOL} needs `arguments` with `name`, the tool's name as {FIND_TOOLS} gave it{why}"
        ))
    };
    let inner = match params.object("arguments") {
        Some(Ok(inner)) => inner,
        // Not an object, or a name in it twice: serde says which.
        Some(Err(e)) => return Err(needs(&format_args!(": {e}"))),
        None => return Err(needs(&"")),
    };
    let Some(name) = inner.str("name") else {
        return Err(RpcError::invalid_params(format!(
            "{CALL_TOOL} needs `arguments.name` (a string): the tool's name as {FIND_TOOLS} gave it"
        )));
    };
    params.set("name", &Value::String(name));
    match inner.raw("arguments") {
        None => params.remove("arguments"),
        Some(raw) if raw.get().trim_start().starts_with('{') => params.set_raw("arguments", raw.to_owned()),
        Some(raw) if raw.get().trim() == "null" => params.remove("arguments"),
        Some(_) => {
            return Err(RpcError::invalid_params(format!(
                "{CALL_TOOL}: `arguments.arguments` must be an object, the tool's arguments"
            )));
        }
    }
    Ok(params)
}

/// The two tools of the mode, as `tools/list` shows them; `find_tools`
/// names the servers of `list` and their tool counts.
fn own_tools(list: &List, config: &crate::config::ToolSearch) -> [Value; 2] {
    let counts = counts(list);
    let mut servers: Vec<String> =
        counts.iter().take(SERVERS_NAMED).map(|(name, n, _)| format!("`{name}` ({n} tools)")).collect();
    if counts.len() > SERVERS_NAMED {
        servers.push(format!("and {} more", counts.len() - SERVERS_NAMED));
    }
    let servers = if servers.is_empty() { "none answered yet".to_string() } else { servers.join(", ") };
    let find = json!({
        "name": FIND_TOOLS,
        "title": "Find tools",
        "description": format!(
            "Searches the tools of the servers behind this gateway, which are not listed one by one. Call it \
             first, with what you want to do in a few words as `query` (e.g. \"create a pull request\", \"read a \
             file\"); it answers with up to {} matching tools, best first, each with its name, description and \
             inputSchema. Then call the one that fits with {CALL_TOOL}. If none fits, search again with other \
             words. An empty query lists the servers and how many tools each has; `server` searches one of \
             them only. Servers: {servers}.",
            config.max_results
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What you want to do, in a few words; empty to list the servers"},
                "server": {"type": "string", "description": "Search only this server's tools (a name from an empty query)"},
            },
            "required": ["query"],
        },
        "annotations": {"title": "Find tools", "readOnlyHint": true, "openWorldHint": false},
    });
    let call = json!({
        "name": CALL_TOOL,
        "title": "Call a tool",
        "description": format!(
            "Calls a tool that {FIND_TOOLS} found: `name` exactly as {FIND_TOOLS} gave it, and `arguments` as \
             that tool's inputSchema asks. It answers what the tool answers."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": format!("The tool's name, as {FIND_TOOLS} gave it")},
                "arguments": {"type": "object", "description": "The tool's arguments, as its inputSchema asks"},
            },
            "required": ["name"],
        },
    });
    [find, call]
}

/// Each server of `list` with its tool count and first few tool names, in the list's order.
fn counts(list: &List) -> Vec<(String, usize, Vec<String>)> {
    let mut out: Vec<(String, usize, Vec<String>)> = Vec::new();
    for found in list.items() {
        let name = found.exposed.to_string();
        match out.iter_mut().find(|(server, _, _)| *server == found.server) {
            Some((_, n, examples)) => {
                *n += 1;
                if examples.len() < EXAMPLES {
                    examples.push(name);
                }
            }
            None => out.push((found.server.to_string(), 1, vec![name])),
        }
    }
    out
}

/// A tool's result: the answer as JSON text (what a model reads) and as `structuredContent`.
fn tool_result(answer: Value) -> Value {
    json!({
        "content": [{"type": "text", "text": answer.to_string()}],
        "structuredContent": answer,
    })
}

fn tool_error(text: String) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}

/// What the mode reads of the gateway for one session's `tools/call`:
/// the configuration and servers in force, the counters, and the
/// session's merged list of tools, made only when a search needs it.
pub(super) struct Scope<'a> {
    pub(crate) config: &'a Config,
    pub(crate) servers: &'a [Arc<Server>],
    pub(crate) stats: &'a Stats,
    pub(crate) tools: &'a dyn Fn() -> Result<Arc<List>, RpcError>,
}

/// What becomes of a `tools/call` with the mode on or off.
pub(super) enum Route<'p> {
    /// `find_tools`: answered here.
    Answer(Outcome),
    /// Any other tool, `call_tool` unwrapped into the direct call it stands for.
    Call(Params<'p>),
}

/// The `tool_search` mode: what it has seen, and what it does to a
/// `tools/list` and a `tools/call`.
#[derive(Default)]
pub(crate) struct ToolSearch {
    /// Its queries and its index, for the status page.
    pub(crate) seen: Searches,
}

impl ToolSearch {
    /// Whether the mode is on.
    pub(super) fn enabled(config: &Config) -> bool {
        config.tool_search.enabled
    }

    /// With the mode on, a page of `tools/list`: mcpgate's two tools, then
    /// the pinned ones of `list`; `None` with it off.
    pub(super) fn page(config: &Config, list: &List, cursor: Option<&str>) -> Option<Result<Value, RpcError>> {
        if !Self::enabled(config) {
            return None;
        }
        let search = &config.tool_search;
        let own = own_tools(list, search);
        let pinned: Vec<Value> = list
            .items()
            .filter(|found| {
                let name = found.exposed;
                name != FIND_TOOLS && name != CALL_TOOL && search.pinned.iter().any(|g| glob(g, name))
            })
            .map(|found| list.exposed_item(found))
            .collect();
        let items: Vec<&Value> = own.iter().chain(&pinned).collect();
        Some(list.page_of(&items, cursor, config.page_size))
    }

    /// A `tools/call`: `find_tools` answered; `call_tool` unwrapped (and
    /// counted) into the direct call; a call of any tool counted as a hit
    /// when its session's last search found it first. `new` is false for
    /// the retry of a held call, counted when it was new: only `find_tools`
    /// is answered, the params are left as they are.
    pub(super) fn tools_call<'p>(
        &self,
        scope: &Scope,
        session: &Arc<Session>,
        params: Params<'p>,
        new: bool,
    ) -> Result<Route<'p>, RpcError> {
        if !Self::enabled(scope.config) {
            return Ok(Route::Call(params));
        }
        if params.str("name").as_deref() == Some(FIND_TOOLS) {
            return Ok(Route::Answer(self.own_tool(scope, session, &params)));
        }
        let Some(name) = params.text("name").filter(|_| new) else { return Ok(Route::Call(params)) };
        let (params, name) = match name == CALL_TOOL {
            true => {
                let params = Self::unwrap_call_tool(scope.stats, params)?;
                let name = params.text("name").unwrap_or_default().into_owned();
                (params, name)
            }
            false => (params, name.into_owned()),
        };
        if self.seen.called(&session.id, &name) {
            scope.stats.tool_search_hits.inc();
        }
        Ok(Route::Call(params))
    }

    /// The tool a `tools/call` of `name` calls: through `call_tool`, the
    /// one in its arguments (counted as one of its calls).
    pub(super) fn called_tool(config: &Config, stats: &Stats, name: String, params: Params) -> String {
        if name != CALL_TOOL || !Self::enabled(config) {
            return name;
        }
        Self::unwrap_call_tool(stats, params).ok().and_then(|p| p.str("name")).unwrap_or(name)
    }

    fn unwrap_call_tool<'p>(stats: &Stats, params: Params<'p>) -> Result<Params<'p>, RpcError> {
        stats.tool_search_calls.inc();
        unwrap_call(params)
    }

    /// A `tools/call` of `find_tools`: its answer.
    fn own_tool(&self, scope: &Scope, session: &Arc<Session>, params: &Params) -> Outcome {
        let arguments = params.value("arguments").unwrap_or(Value::Null);
        let query = match &arguments["query"] {
            Value::String(q) => q.clone(),
            Value::Null => String::new(),
            _ => return Outcome::Result(tool_error(format!("{FIND_TOOLS}: `query` must be a string"))),
        };
        let server = match &arguments["server"] {
            Value::String(s) if !s.is_empty() => Some(s.clone()),
            Value::String(_) | Value::Null => None,
            _ => return Outcome::Result(tool_error(format!("{FIND_TOOLS}: `server` must be a string"))),
        };
        Outcome::Result(self.find_tools(scope, session, &query, server.as_deref()))
    }

    fn find_tools(&self, scope: &Scope, session: &Arc<Session>, query: &str, server: Option<&str>) -> Value {
        scope.stats.tool_searches.inc();
        let list = match (scope.tools)() {
            Ok(list) => list,
            Err(e) => return tool_error(format!("{FIND_TOOLS}: {}", e.message)),
        };
        let reachable: Vec<String> =
            scope.servers.iter().filter(|s| session.allows(s.name())).map(|s| s.name().to_string()).collect();
        if let Some(server) = server
            && !reachable.iter().any(|s| s == server)
        {
            return tool_error(format!(
                "{FIND_TOOLS}: no server `{server}` here; the servers are: {}",
                reachable.join(", ")
            ));
        }
        if query.trim().is_empty() {
            return tool_result(servers_answer(session, &list, server));
        }
        let (index, built) = match list.tool_index() {
            Ok(index) => index,
            Err(why) => return tool_error(format!("{FIND_TOOLS}: {why}; raise max_memory_mb")),
        };
        if built {
            scope.stats.tool_search_indexes_built.inc();
            self.seen.built(index.tools(), index.bytes());
        }
        let limit = scope.config.tool_search.max_results;
        let hits = index.search(query, limit, |i| server.is_none_or(|s| list.item(i).is_some_and(|f| f.server == s)));
        let tools: Vec<Value> = hits.iter().filter_map(|h| list.item(h.entry)).map(|f| list.exposed_item(f)).collect();
        let first = tools.first().and_then(|t| t["name"].as_str());
        self.seen.asked(&session.id, query, first);
        if tools.is_empty() {
            return tool_result(json!({
                "tools": [],
                "note": format!(
                    "no tool matches `{}`: try other words, or an empty query to see the servers",
                    normalise(query)
                ),
            }));
        }
        tool_result(json!({ "tools": tools }))
    }
}

/// The answer to an empty query: each server with its tool count and
/// a few of its tools' names; those that could not be reached, with why.
fn servers_answer(session: &Session, list: &List, only: Option<&str>) -> Value {
    let servers: Vec<Value> = counts(list)
        .into_iter()
        .filter(|(name, _, _)| only.is_none_or(|o| o == name))
        .map(|(name, tools, examples)| json!({"server": name, "tools": tools, "examples": examples}))
        .collect();
    let mut answer = Map::new();
    answer.insert("servers".into(), Value::Array(servers));
    let failed: Vec<Value> = session
        .failed_servers()
        .into_iter()
        .filter(|(name, _)| only.is_none_or(|o| o == name))
        .map(|(name, error)| json!({"server": name, "error": error}))
        .collect();
    if !failed.is_empty() {
        answer.insert("unavailable".into(), Value::Array(failed));
    }
    Value::Object(answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{Filter, ListKind, Naming, ServerItems, ServerList};

    fn list() -> List {
        let _budget = crate::runtime::memory::TEST_BUDGET.lock();
        let items = |server: &str, names: &[&str]| {
            let raw: Vec<_> = names
                .iter()
                .map(|n| crate::protocol::jsonrpc::raw(&json!({"name": n, "description": format!("{n} things")})))
                .collect();
            ServerItems {
                server: server.into(),
                naming: Naming { prefix: server.into(), separator: "__".into(), max: 64 },
                filter: Filter::default(),
                list: Arc::new(ServerList::new(ListKind::Tools, &raw).unwrap()),
            }
        };
        List::merge(ListKind::Tools, vec![items("files", &["read_file", "write_file"]), items("web", &["fetch"])])
            .unwrap()
            .0
    }

    #[test]
    fn call_tool_unwraps_into_the_direct_call_keeping_meta_task_and_the_arguments_as_written() {
        let message = crate::protocol::jsonrpc::Message::parse(
            br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"call_tool",
            "arguments":{"name":"files__read_file","arguments":{"path":"/a","n":12345678901234567890123}},
            "_meta":{"progressToken":"p1"},"task":{"ttl":1000}}}"#,
        )
        .unwrap();
        let direct = unwrap_call(Params::of(&message).unwrap()).unwrap();
        assert_eq!(direct.str("name").as_deref(), Some("files__read_file"));
        assert_eq!(direct.raw("arguments").unwrap().get(), r#"{"path":"/a","n":12345678901234567890123}"#);
        assert_eq!(direct.value("_meta").unwrap(), json!({"progressToken": "p1"}));
        assert_eq!(direct.value("task").unwrap(), json!({"ttl": 1000}));

        let params = |arguments: &str| {
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"call_tool"{arguments}}}}}"#
            );
            Params::of(&crate::protocol::jsonrpc::Message::parse(body.as_bytes()).unwrap()).unwrap().into_owned()
        };
        let bare = unwrap_call(params(r#","arguments":{"name":"web__fetch"}"#)).unwrap();
        assert!(!bare.contains("arguments"));
        for (bad, says) in [
            ("", "needs `arguments`"),
            (r#","arguments":{"arguments":{}}"#, "needs `arguments.name`"),
            (r#","arguments":{"name":"x","arguments":[1]}"#, "must be an object"),
        ] {
            let e = unwrap_call(params(bad)).unwrap_err();
            assert!(e.message.contains(says), "{bad}: {}", e.message);
        }
    }

    #[test]
    fn find_tools_names_the_servers_and_their_counts() {
        let [find, call] =
            own_tools(&list(), &crate::config::ToolSearch { enabled: true, pinned: vec![], max_results: 4 });
        let description = find["description"].as_str().unwrap();
        assert!(description.contains("`files` (2 tools), `web` (1 tools)"), "{description}");
        assert!(description.contains("up to 4 matching tools"), "{description}");
        assert_eq!((find["name"].as_str(), call["name"].as_str()), (Some(FIND_TOOLS), Some(CALL_TOOL)));
        assert_eq!(
            counts(&list())[0],
            ("files".to_string(), 2, vec!["files__read_file".into(), "files__write_file".into()])
        );
    }
}
