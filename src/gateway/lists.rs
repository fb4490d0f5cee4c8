//! The merged lists (`tools/list`, `prompts/list`, `resources/list`,
//! `resources/templates/list`): each server's pages fetched in parallel
//! (bounded in items, bytes and pages), held once per server and client
//! view for every session that sees them (`catalog::ServerLists`), merged
//! with prefixes and filters (`catalog`), the merge held once per view too,
//! and served in pages of `page_size`. All of it is charged to
//! `max_memory_mb`, and let go once no session uses the server.

use std::collections::HashSet;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::config::Config;
use crate::downstream::{Downstream, DownstreamError, Readiness, Server};
use crate::protocol::jsonrpc::{Message, Params, RpcError};
use crate::protocol::stateless::CacheHints;
use crate::runtime::threads;
use crate::session::Session;

use super::current::{Current, visible};
use super::life::Life;
use super::merged::Lists;
use super::outcome::Outcome;
use super::reopen::{cut_short, run_with_reopen};
use super::search::ToolSearch;
use crate::catalog::{List, ListKind, ServerItems, ServerList};

/// Pages of one server's list mcpgate follows before it stops.
const MAX_PAGES: usize = 1000;

/// What bounds the pages mcpgate reads of one server's list.
#[derive(Debug, Clone, Copy)]
pub(super) struct Paging {
    /// Items kept (`max_list_items`).
    pub(crate) items: usize,
    /// Bytes of pages read (`max_list_bytes`).
    pub(crate) bytes: usize,
}

impl Paging {
    pub(super) fn of(config: &Config) -> Paging {
        Paging { items: config.max_list_items, bytes: config.max_list_bytes }
    }
}

/// Every page of a paginated `method`, the items of `field` of each, as the
/// server wrote them: see [`read_pages`].
pub(super) fn fetch_pages(
    d: &Downstream,
    method: &str,
    field: &str,
    paging: Paging,
) -> Result<Vec<Box<RawValue>>, DownstreamError> {
    let mut items = Vec::new();
    read_pages(d, method, field, paging, &mut None, &mut |item| {
        items.push(item.to_owned());
        true
    })?;
    Ok(items)
}

/// Reads every page of a paginated `method` and hands `keep` the items of
/// `field` of each, as the server wrote them, one page at a time (a list is
/// never held twice); `keep` says false to stop. Paging stops at the first
/// cursor seen before (a server whose `nextCursor` went a → b → a was
/// followed 1,000 times: 311,000 items, 894 MB), at `max_list_items`, at
/// `max_list_bytes`, or after [`MAX_PAGES`]; each stop but the natural end
/// (or `keep`'s) is logged. The cache hints the pages carried (2026-07-28)
/// are merged into `hints`.
pub(super) fn read_pages(
    d: &Downstream,
    method: &str,
    field: &str,
    paging: Paging,
    hints: &mut Option<CacheHints>,
    keep: &mut dyn FnMut(&RawValue) -> bool,
) -> Result<(), DownstreamError> {
    let mut count = 0usize;
    let mut read = 0usize;
    let mut seen: HashSet<String> = HashSet::new();
    let mut cursor: Option<String> = None;
    let name = d.server.name();
    for _ in 0..MAX_PAGES {
        let mut params = Params::default();
        if let Some(c) = &cursor {
            params.set("cursor", &Value::from(c.as_str()));
        }
        let response = d.own_request(method, Some(&params))?;
        if let Some(error) = &response.error {
            return Err(DownstreamError::Protocol(format!("{method} answered an error: {}", error.get())));
        }
        let Some(result) = response.result.as_ref() else {
            return Err(DownstreamError::Protocol(format!("{method} answered no result")));
        };
        read += result.get().len();
        if let Some(page) = CacheHints::of(result.get()) {
            *hints = Some(hints.map_or(page, |h| h.and(page)));
        }
        let page = Page::parse(result.get(), field)
            .map_err(|e| DownstreamError::Protocol(format!("{method} result has no `{field}` array ({e})")))?;
        let Some(page_items) = page.items else {
            return Err(DownstreamError::Protocol(format!("{method} result has no `{field}` array")));
        };
        let room = paging.items - count;
        let cut = page_items.len() > room;
        for item in page_items.into_iter().take(room) {
            if !keep(item) {
                return Ok(());
            }
            count += 1;
        }
        if cut || count >= paging.items && page.next_cursor.is_some() {
            crate::limited!(
                warn,
                "server `{name}`: {method} has more than {} items (max_list_items); the rest is left out",
                paging.items
            );
            return Ok(());
        }
        if read >= paging.bytes && page.next_cursor.is_some() {
            crate::limited!(
                warn,
                "server `{name}`: {method} passed {} bytes (max_list_bytes) after {count} items; the rest is left out",
                paging.bytes,
            );
            return Ok(());
        }
        match page.next_cursor {
            None => return Ok(()),
            Some(next) if !seen.insert(next.clone()) => {
                crate::limited!(
                    warn,
                    "server `{name}`: {method} gave the cursor `{}` a second time; paging stops there, with {count} items",
                    crate::catalog::shortened(&next),
                );
                return Ok(());
            }
            Some(next) => cursor = Some(next),
        }
    }
    crate::limited!(warn, "server `{name}`: {method} has more than {MAX_PAGES} pages; the rest is left out");
    Ok(())
}

/// One page of a list, its items borrowed from the server's answer.
struct Page<'a> {
    next_cursor: Option<String>,
    items: Option<Vec<&'a RawValue>>,
}

impl<'a> Page<'a> {
    fn parse(result: &'a str, field: &str) -> Result<Page<'a>, serde_json::Error> {
        let members: std::collections::HashMap<&str, &RawValue> = serde_json::from_str(result)?;
        let next_cursor = match members.get("nextCursor") {
            Some(raw) => serde_json::from_str::<Option<String>>(raw.get())?,
            None => None,
        };
        let items = members.get(field).map(|raw| serde_json::from_str(raw.get())).transpose()?;
        Ok(Page { next_cursor, items })
    }
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

/// What the merged lists read of the gateway: the configuration and
/// servers in force, and its life (a shutdown cuts a fetch short; a prune
/// gives memory back).
pub(super) struct InForce<'a> {
    pub(crate) current: Arc<Current>,
    pub(crate) life: &'a Life,
}

impl Lists {
    pub(super) fn page(&self, cx: &InForce, session: &Arc<Session>, kind: ListKind, message: &Message) -> Outcome {
        self.page_of(cx, session, kind, message).0
    }

    /// [`Lists::page`], and the merged list it came from (none on
    /// an error before it was made).
    pub(super) fn page_of(
        &self,
        cx: &InForce,
        session: &Arc<Session>,
        kind: ListKind,
        message: &Message,
    ) -> (Outcome, Option<Arc<List>>) {
        let params = match message.params_object() {
            Ok(p) => p,
            Err(e) => return (e.into(), None),
        };
        let cursor = match params.get("cursor") {
            None | Some(Value::Null) => None,
            Some(Value::String(c)) => Some(c.as_str()),
            Some(_) => return (RpcError::invalid_params("`cursor` must be a string").into(), None),
        };
        let list = match self.merged(cx, session, kind) {
            Ok(list) => list,
            Err(e) => return (e.into(), None),
        };
        let config = &cx.current.config;
        let page = match kind {
            ListKind::Tools => ToolSearch::page(config, &list, cursor),
            _ => None,
        };
        let page = page.unwrap_or_else(|| list.page(cursor, config.page_size));
        (page.map_or_else(Outcome::from, Outcome::Result), Some(list))
    }

    /// The merged list of `kind` this session sees: the one held for its
    /// view while every server's list is the one it was merged from; else
    /// merged anew, fetching (in parallel, opening downstream sessions as
    /// needed) only the servers whose lists are gone. A server that fails is
    /// left out and its error recorded, and such a list is not kept. So is
    /// a server whose process is still starting past `list_wait_ms`: the
    /// session gets `list_changed` when it is ready. One that does not fit
    /// in `max_memory_mb` is an error naming it.
    pub(super) fn merged(&self, cx: &InForce, session: &Arc<Session>, kind: ListKind) -> Result<Arc<List>, RpcError> {
        let cur = &cx.current;
        let view = session.list_view();
        if let Some(list) = self.find(kind, view, cur.servers.iter().filter(|s| session.allows(s.name()))) {
            return Ok(list);
        }
        let servers = visible(cur, session);
        let paging = Paging::of(&cur.config);
        let wait = cur.config.connect_timeout + cur.config.request_timeout;
        let found: Mutex<Vec<(usize, ServerItems)>> = Mutex::new(Vec::new());
        let left_out = std::sync::atomic::AtomicBool::new(false);
        let too_big: Mutex<Option<RpcError>> = Mutex::new(None);
        threads::for_each_parallel("fanout", &servers, servers.len(), |server| {
            if server.lists.current(kind, view).is_none()
                && !session.failed_within(server.name(), cur.config.open_retry)
                && server.warm(session.principal(), cur.config.list_wait, Some(session.inbox())) == Readiness::Starting
            {
                left_out.store(true, std::sync::atomic::Ordering::Relaxed);
                log::debug!(
                    "server `{}`: its process is still starting after list_wait_ms; left out of this {}, \
                     list_changed follows",
                    server.name(),
                    kind.method()
                );
                return;
            }
            let fetched = server.lists.get(
                kind,
                view,
                wait,
                || {
                    let d = session.downstream(server, cur.config.open_retry)?;
                    if !d.offers(kind.capability()) {
                        return Ok(ServerList::empty(kind));
                    }
                    // Each page goes into the list as it comes.
                    let mut over = None;
                    let mut hints = None;
                    let mut list =
                        run_with_reopen(session, server, cur.config.open_retry, |d| {
                            let mut list = ServerList::builder(kind);
                            read_pages(d, kind.method(), kind.field(), paging, &mut hints, &mut |item| match list
                                .push(item)
                            {
                                Ok(()) => true,
                                Err(why) => {
                                    over = Some(why);
                                    false
                                }
                            })?;
                            Ok(list.finish())
                        })
                        .map_err(|e| cut_short(cx.life, server, e))?;
                    if let Some(why) = over {
                        return Err(RpcError::server(
                            server.name(),
                            format!("{why}: raise max_memory_mb, or lower max_list_items"),
                        ));
                    }
                    // A server of both eras, spoken to in the session era, says
                    // nothing of caching here; to its clients of 2026-07-28 it may
                    // say private: not known, not made public.
                    list.hints = hints.or((server.speaks_2026() == Some(true)).then_some(CacheHints::UNKNOWN));
                    Ok(list)
                },
                || RpcError::server(server.name(), format!("its {} is still being fetched", kind.method())),
            );
            match fetched {
                Ok(list) => found.lock().push((
                    cur.rank(server.name()),
                    ServerItems {
                        server: server.name().to_string(),
                        naming: naming(&server.config, &cur.config),
                        filter: filter_for(&server.config, kind).clone(),
                        list,
                    },
                )),
                Err(e) if e.message.contains("max_memory_mb") => *too_big.lock() = Some(e),
                // A server its user must sign in to first: one tool of mcpgate's, which gives the link.
                Err(e) if kind == ListKind::Tools && super::authorize::link_of(&e).is_some() => {
                    left_out.store(true, std::sync::atomic::Ordering::Relaxed);
                    if let Some(list) = super::authorize::sign_in_list(server) {
                        found.lock().push((
                            cur.rank(server.name()),
                            ServerItems {
                                server: server.name().to_string(),
                                naming: naming(&server.config, &cur.config),
                                filter: Default::default(),
                                list,
                            },
                        ));
                    }
                }
                Err(e) => {
                    left_out.store(true, std::sync::atomic::Ordering::Relaxed);
                    crate::limited!(
                        warn,
                        "server `{}`: {} failed: {}; its items are left out of this list",
                        server.name(),
                        kind.method(),
                        e.message
                    );
                }
            }
        });
        if let Some(e) = too_big.into_inner() {
            return Err(e);
        }
        let mut found = found.into_inner();
        found.sort_by_key(|(rank, _)| *rank);
        let (list, collisions, renamed) = List::merge(kind, found.into_iter().map(|(_, items)| items).collect())
            .map_err(|why| RpcError::internal(format!("{why}: raise max_memory_mb")))?;
        self.note_names(collisions, renamed);
        let list = Arc::new(list);
        if !left_out.into_inner() {
            self.keep(kind, view, list.clone());
        }
        Ok(list)
    }

    /// The servers this session sees whose part of the list of `kind` is
    /// not held and whose process is still starting.
    pub(super) fn starting(cx: &InForce, session: &Session, kind: ListKind) -> Vec<Arc<Server>> {
        let view = session.list_view();
        visible(&cx.current, session)
            .into_iter()
            .filter(|s| {
                s.lists.current(kind, view).is_none()
                    && !session.failed_within(s.name(), cx.current.config.open_retry)
                    && s.warm(session.principal(), std::time::Duration::ZERO, None) == Readiness::Starting
            })
            .collect()
    }

    /// What `find` finds in the merged list of `kind`; when it finds nothing
    /// while servers left out of the list are still starting, it waits for
    /// them (`start_timeout_secs` at most) and looks once more: a call made
    /// before a process was ready goes to it, not to "unknown tool".
    pub(super) fn find_in_list<T>(
        &self,
        cx: &InForce,
        session: &Arc<Session>,
        kind: ListKind,
        find: impl Fn(&List) -> Option<T>,
    ) -> Result<Option<T>, RpcError> {
        if let Some(found) = find(&*self.merged(cx, session, kind)?) {
            return Ok(Some(found));
        }
        let starting = Lists::starting(cx, session, kind);
        if starting.is_empty() {
            return Ok(None);
        }
        threads::for_each_parallel("fanout", &starting, starting.len(), |server| {
            server.warm(session.principal(), server.limits.start, None);
        });
        Ok(find(&*self.merged(cx, session, kind)?))
    }

    /// Lets go of the lists of servers no session uses any more, and of the
    /// merged lists made of them, and gives the memory back to the kernel;
    /// the reaper's job. A server's lists end so within a round of the
    /// reaper after its last session closed (`session_idle_timeout_secs` /
    /// 10, at most 5 s).
    pub(crate) fn prune_all(&self, current: &Current, life: &Life) {
        let mut let_go = 0;
        for server in &current.servers {
            if server.live_sessions.get() == 0 {
                let_go += server.lists.clear();
            }
        }
        let_go += self.prune(&current.servers);
        if let_go > 0 {
            life.release_memory();
        }
    }

    /// Bytes of the lists held for the sessions: each server's, and the
    /// merged ones' own, for the status page.
    pub(crate) fn cache_bytes(&self, current: &Current) -> usize {
        current.servers.iter().map(|s| s.lists.bytes()).sum::<usize>() + self.bytes()
    }
}
