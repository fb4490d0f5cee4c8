//! The merged lists kept for reuse: one per kind and view, shared by every
//! session with that view, and found again only while each of its sources
//! is still the list its server holds; and what the merges said of names,
//! for the status page: the collisions between servers and the renamed
//! items.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::catalog::{List, ListKind, Renamed};
use crate::downstream::Server;

/// The merged lists, one per kind and view (the client capabilities and the
/// servers a session sees), shared by every session with that view, and
/// the names their merges collided on or renamed.
#[derive(Default)]
pub(crate) struct Lists {
    /// Guards the lists, newest first; at most [`MAX_MERGED`].
    lists: Mutex<Vec<(u64, Arc<List>)>>,
    /// Recent name collisions between servers, at most [`MAX_COLLISIONS`].
    collisions: Mutex<Vec<String>>,
    /// Tools and prompts exposed under another name than `<prefix>__<name>`,
    /// at most [`MAX_RENAMED`].
    renamed: Mutex<Vec<Renamed>>,
}

/// Merged lists kept at once: kinds × views; the oldest go first.
const MAX_MERGED: usize = 64;
/// Collision lines kept for the status page.
const MAX_COLLISIONS: usize = 50;
/// Renamed tools and prompts kept for the status page.
const MAX_RENAMED: usize = 500;

impl Lists {
    /// The list of `kind` for `view` over `servers`, if one is kept whose
    /// every source is still the list its server holds. Run for each call
    /// that names a tool or prompt: it allocates nothing.
    pub(super) fn find<'s>(
        &self,
        kind: ListKind,
        view: u64,
        servers: impl Iterator<Item = &'s Arc<Server>> + Clone,
    ) -> Option<Arc<List>> {
        let lists = self.lists.lock();
        lists
            .iter()
            .find(|(v, list)| *v == view && list.kind == kind && current_over(list, view, servers.clone()))
            .map(|(_, list)| list.clone())
    }

    pub(super) fn keep(&self, kind: ListKind, view: u64, list: Arc<List>) {
        let mut lists = self.lists.lock();
        lists.retain(|(v, l)| {
            !(*v == view && l.kind == kind && l.sources().map(|(n, _)| n).eq(list.sources().map(|(n, _)| n)))
        });
        lists.insert(0, (view, list));
        lists.truncate(MAX_MERGED);
    }

    /// Drops the lists whose sources some server of `servers` no longer
    /// holds; how many were dropped.
    pub(super) fn prune(&self, servers: &[Arc<Server>]) -> usize {
        let mut lists = self.lists.lock();
        let before = lists.len();
        lists.retain(|(view, list)| {
            list.sources().all(|(name, source)| {
                servers
                    .iter()
                    .find(|s| s.name() == name)
                    .and_then(|s| s.lists.current(list.kind, *view))
                    .is_some_and(|held| Arc::ptr_eq(&held, source))
            })
        });
        before - lists.len()
    }

    /// Bytes the merged lists hold of their own (see [`List::bytes`]).
    pub(super) fn bytes(&self) -> usize {
        self.lists.lock().iter().map(|(_, list)| list.bytes()).sum()
    }

    /// Keeps the renamed items and the collisions for the status page (each
    /// table bounded, the names in it shortened), and logs new collisions.
    pub(super) fn note_names(&self, collisions: Vec<String>, renamed: Vec<Renamed>) {
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
    }

    /// The recent name collisions between servers, for the status page.
    pub(crate) fn collisions(&self) -> Vec<String> {
        self.collisions.lock().clone()
    }

    /// The renamed tools and prompts, for the status page.
    pub(crate) fn renamed(&self) -> Vec<Renamed> {
        self.renamed.lock().clone()
    }
}

/// Whether `list`'s sources are, in order, the lists `servers` hold now.
fn current_over<'s>(list: &List, view: u64, mut servers: impl Iterator<Item = &'s Arc<Server>>) -> bool {
    let mut sources = list.sources();
    loop {
        match (sources.next(), servers.next()) {
            (None, None) => return true,
            (Some((name, source)), Some(server)) => {
                if name != server.name() || !server.lists.holds(list.kind, view, source) {
                    return false;
                }
            }
            _ => return false,
        }
    }
}
