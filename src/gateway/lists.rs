//! The merged lists (`tools/list`, `prompts/list`, `resources/list`,
//! `resources/templates/list`): each server's pages fetched in parallel,
//! merged with prefixes and filters (`catalog`), cached per session, and
//! served in pages of `page_size`.

use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::config::Config;
use crate::downstream::{Downstream, DownstreamError};
use crate::protocol::jsonrpc::{self, Message, RpcError};
use crate::runtime::threads;
use crate::session::Session;

use super::Outcome;
use super::{Gateway, MAX_COLLISIONS, MAX_PAGES, MAX_RENAMED, visible};
use crate::catalog::{List, ListKind, ServerItems};

/// Every page of one server's list.
pub(super) fn fetch_all(d: &Downstream, kind: ListKind) -> Result<Vec<Value>, DownstreamError> {
    fetch_pages(d, kind.method(), kind.field())
}

/// Every page of a paginated `method`, the items of `field` of each.
pub(super) fn fetch_pages(d: &Downstream, method: &str, field: &str) -> Result<Vec<Value>, DownstreamError> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let params = match &cursor {
            Some(c) => json!({ "cursor": c }),
            None => json!({}),
        };
        let id = d.next_id();
        let response = d.request(&id, method, Some(&jsonrpc::raw(&params)), &mut |_| {})?;
        if let Some(error) = &response.error {
            return Err(DownstreamError::Protocol(format!("{method} answered an error: {}", error.get())));
        }
        let result: Value =
            response.result.as_ref().and_then(|r| serde_json::from_str(r.get()).ok()).unwrap_or(Value::Null);
        match result.get(field) {
            Some(Value::Array(page)) => items.extend(page.iter().cloned()),
            _ => return Err(DownstreamError::Protocol(format!("{method} result has no `{field}` array"))),
        }
        match result.get("nextCursor").and_then(Value::as_str) {
            Some(next) if cursor.as_deref() != Some(next) => cursor = Some(next.to_string()),
            _ => return Ok(items),
        }
    }
    crate::limited!(
        warn,
        "server `{}`: {method} has more than {MAX_PAGES} pages; the rest is left out",
        d.server.name()
    );
    Ok(items)
}

/// How `server`'s tools and prompts are named for clients.
pub(super) fn naming(server: &crate::config::ServerConfig, config: &Config) -> crate::catalog::Naming {
    crate::catalog::Naming {
        prefix: server.prefix.clone(),
        separator: server.separator.clone(),
        max: config.tool_name_max,
    }
}

/// `server`'s filter for lists of `kind`.
pub(super) fn filter_for(server: &crate::config::ServerConfig, kind: ListKind) -> &crate::catalog::Filter {
    match kind {
        ListKind::Tools => &server.tools,
        ListKind::Prompts => &server.prompts,
        ListKind::Resources | ListKind::Templates => &server.resources,
    }
}

impl Gateway {
    pub(super) fn list_page(&self, session: &Arc<Session>, kind: ListKind, message: &Message) -> Outcome {
        let params = match message.params_object() {
            Ok(p) => p,
            Err(e) => return e.into(),
        };
        let cursor = match params.get("cursor") {
            None | Some(Value::Null) => None,
            Some(Value::String(c)) => Some(c.as_str()),
            Some(_) => return RpcError::invalid_params("`cursor` must be a string").into(),
        };
        let list = match (cursor, session.cached_list(kind)) {
            // A first page always reflects the servers as they are now.
            (None, _) | (Some(_), None) => self.build_list(session, kind),
            (Some(_), Some(list)) => list,
        };
        if kind == ListKind::Tools && super::search::enabled(self) {
            return self.search_page(&list, cursor).map_or_else(Outcome::from, Outcome::Result);
        }
        match list.page(cursor, self.current().config.page_size) {
            Ok(page) => Outcome::Result(page),
            Err(e) => e.into(),
        }
    }

    /// Lists `kind` on every server in parallel (opening downstream sessions
    /// as needed), merges, caches and returns it. Servers that fail are left
    /// out and their error recorded.
    pub(super) fn build_list(&self, session: &Arc<Session>, kind: ListKind) -> Arc<List> {
        let cur = self.current();
        let servers = visible(&cur, session);
        let found: Mutex<Vec<(usize, ServerItems)>> = Mutex::new(Vec::new());
        threads::for_each_parallel("fanout", &servers, servers.len(), |server| {
            let Ok(d) = session.downstream(server, cur.config.open_retry) else { return };
            if !d.offers(kind.capability()) {
                return;
            }
            match self.on_downstream(session, server, |d| fetch_all(d, kind)) {
                Ok(items) => found.lock().push((
                    cur.rank(server.name()),
                    ServerItems {
                        server: server.name().to_string(),
                        naming: naming(&server.config, &cur.config),
                        filter: filter_for(&server.config, kind).clone(),
                        items,
                    },
                )),
                Err(e) => crate::limited!(
                    warn,
                    "server `{}`: {} failed: {}; its items are left out of this list",
                    server.name(),
                    kind.method(),
                    e.message
                ),
            }
        });
        let mut found = found.into_inner();
        found.sort_by_key(|(rank, _)| *rank);
        let (list, collisions, renamed) = List::merge(kind, found.into_iter().map(|(_, items)| items).collect());
        if !renamed.is_empty() {
            let mut kept = self.renamed.lock();
            for entry in renamed {
                if !kept.contains(&entry) {
                    if kept.len() == MAX_RENAMED {
                        kept.remove(0);
                    }
                    kept.push(entry);
                }
            }
        }
        if !collisions.is_empty() {
            let mut kept = self.collisions.lock();
            for line in collisions {
                if !kept.contains(&line) {
                    log::warn!("{line}");
                    if kept.len() == MAX_COLLISIONS {
                        kept.remove(0);
                    }
                    kept.push(line);
                }
            }
        }
        let list = Arc::new(list);
        session.cache_list(list.clone());
        list
    }
}
