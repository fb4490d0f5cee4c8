//! Merging what several servers offer into one list per kind, and finding
//! which server owns a name or URI. Tools and prompts are renamed
//! `<prefix><separator><name>` (`files__read`), made to fit what clients
//! accept ([`exposed_name`]); resource URIs and templates are kept. Each
//! server's [`Filter`] decides which of its items are listed at all. A
//! tool list also carries its search index ([`search`]), built when first
//! searched.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::protocol::jsonrpc::RpcError;
use crate::protocol::stateless::CacheHints;
use crate::runtime::memory::Charge;

pub(crate) mod search;

pub(crate) use search::ToolIndex;

/// The four lists MCP paginates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ListKind {
    Tools,
    Prompts,
    Resources,
    Templates,
}

impl ListKind {
    pub(crate) const ALL: [ListKind; 4] =
        [ListKind::Tools, ListKind::Prompts, ListKind::Resources, ListKind::Templates];

    pub(crate) fn from_method(method: &str) -> Option<ListKind> {
        ListKind::ALL.into_iter().find(|k| k.method() == method)
    }

    pub(crate) fn method(self) -> &'static str {
        match self {
            ListKind::Tools => "tools/list",
            ListKind::Prompts => "prompts/list",
            ListKind::Resources => "resources/list",
            ListKind::Templates => "resources/templates/list",
        }
    }

    /// The result field that holds the items.
    pub(crate) fn field(self) -> &'static str {
        match self {
            ListKind::Tools => "tools",
            ListKind::Prompts => "prompts",
            ListKind::Resources => "resources",
            ListKind::Templates => "resourceTemplates",
        }
    }

    /// The server capability that says the list exists.
    pub(crate) fn capability(self) -> &'static str {
        match self {
            ListKind::Tools => "tools",
            ListKind::Prompts => "prompts",
            ListKind::Resources | ListKind::Templates => "resources",
        }
    }

    /// The item field that identifies it.
    pub(crate) fn key(self) -> &'static str {
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
    pub(crate) fn changed_notification(self) -> &'static str {
        match self {
            ListKind::Tools => "notifications/tools/list_changed",
            ListKind::Prompts => "notifications/prompts/list_changed",
            ListKind::Resources | ListKind::Templates => "notifications/resources/list_changed",
        }
    }
}

/// How a server's tool and prompt names are exposed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Naming {
    pub(crate) prefix: String,
    pub(crate) separator: String,
    /// The longest exposed name (`tool_name_max`).
    pub(crate) max: usize,
}

impl Naming {
    /// `<prefix><separator><name>`, or the name alone with an empty prefix.
    pub(crate) fn raw(&self, name: &str) -> String {
        if self.prefix.is_empty() { name.to_string() } else { format!("{}{}{name}", self.prefix, self.separator) }
    }

    /// Whether `text` is [`Naming::raw`] of `name`, without making it.
    pub(crate) fn spells(&self, name: &str, text: &str) -> bool {
        if self.prefix.is_empty() {
            return text == name;
        }
        text.len() == self.prefix.len() + self.separator.len() + name.len()
            && text.starts_with(&self.prefix)
            && text[self.prefix.len()..].starts_with(&self.separator)
            && text.ends_with(name)
    }
}

/// The name a client sees for `name`: `^[a-zA-Z0-9_-]{1,max}$`, what
/// Claude, OpenAI and Gemini accept. Other characters become `_`. A name
/// that is still too long gives up the end of its prefix first, so the
/// tool's own name stays readable, and ends in `-` and 8 hex digits of the
/// SHA-256 of the full name: the same at every start and reload, and
/// distinct. The server always gets its own name back.
pub(crate) fn exposed_name(naming: &Naming, name: &str) -> String {
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
pub(crate) struct Filter {
    pub(crate) allow: Vec<String>,
    pub(crate) deny: Vec<String>,
}

impl Filter {
    pub(crate) fn admits(&self, name: &str) -> bool {
        (self.allow.is_empty() || self.allow.iter().any(|g| glob(g, name))) && !self.deny.iter().any(|g| glob(g, name))
    }
}

/// Whether `text` matches `pattern`, where `*` is any run of characters and
/// `?` any one.
pub(crate) fn glob(pattern: &str, text: &str) -> bool {
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

/// A tool or prompt whose exposed name is not `<prefix><separator><name>`,
/// for the status page: the original as [`shortened`], never whole (600
/// tools with 100 KB names kept 54 MB and made a 50 MB status page).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Renamed {
    pub(crate) name: String,
    pub(crate) server: String,
    pub(crate) original: String,
}

/// The longest name the status page and the log show whole.
const SHOWN_NAME: usize = 128;

/// `name` as shown to people: whole when short, else its first characters,
/// its length and a hash of the whole, so two long names stay apart.
pub(crate) fn shortened(name: &str) -> String {
    if name.len() <= SHOWN_NAME {
        return name.to_string();
    }
    let start = &name[..name.floor_char_boundary(SHOWN_NAME - 32)];
    let hash = &crate::runtime::sha256::hex(name.as_bytes())[..8];
    format!("{start}... ({} bytes, sha256 {hash})", name.len())
}

/// A server's whole list of one kind, its pages joined, as it sent it:
/// held once however many sessions list it (a 100,000-tool list cost
/// 200 MB per session when each kept a tree of its own), and charged to
/// `max_memory_mb` for as long as it lives.
///
/// Compact: every item's JSON one after the other in one buffer, and per
/// item where its JSON and its key (name, URI or template) are in it. A key
/// is found inside its item's JSON; only one written with escapes is kept
/// again, unescaped, after it. 185 tools of 100 KB names (17.6 MB) were
/// charged 35.4 MiB as an allocation per item plus a copy of each name;
/// now 17.7 MiB.
#[derive(Debug)]
pub(crate) struct ServerList {
    pub(crate) kind: ListKind,
    text: String,
    items: Vec<Span>,
    /// The cache hints its pages carried (2026-07-28), merged; `None` when
    /// they carried none (the session era's).
    pub(crate) hints: Option<CacheHints>,
    charge: Charge,
}

/// Where an item's JSON and its key are in a [`ServerList`]'s text.
#[derive(Debug, Clone, Copy)]
struct Span {
    json: (u32, u32),
    key: (u32, u32),
}

/// What did not fit in what `max_memory_mb` leaves: a server's list, the
/// merged list, or the search index, named with its size so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OverBudget(pub(crate) String);

impl std::fmt::Display for OverBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} does not fit in what max_memory_mb leaves", self.0)
    }
}

impl std::error::Error for OverBudget {}

impl ServerList {
    /// A list of `kind` to fill item by item, as its pages come.
    pub(crate) fn builder(kind: ListKind) -> ListBuilder {
        ListBuilder(ServerList::empty(kind))
    }

    /// The items of `kind` in `items`, or why they do not fit in `max_memory_mb`.
    pub(crate) fn new(kind: ListKind, items: &[Box<RawValue>]) -> Result<ServerList, OverBudget> {
        let mut list = ServerList::builder(kind);
        for item in items {
            list.push(item)?;
        }
        Ok(list.finish())
    }

    /// An empty list: a server that does not offer this kind.
    pub(crate) fn empty(kind: ListKind) -> ServerList {
        ServerList { kind, text: String::new(), items: Vec::new(), hints: None, charge: Charge::empty() }
    }

    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// The key of the `i`th item: its name, URI or template as the server knows it.
    pub(crate) fn key(&self, i: usize) -> &str {
        let (start, end) = self.items[i].key;
        &self.text[start as usize..end as usize]
    }

    /// The JSON of the `i`th item, as the server wrote it.
    pub(crate) fn json(&self, i: usize) -> &str {
        let (start, end) = self.items[i].json;
        &self.text[start as usize..end as usize]
    }

    /// Bytes it holds against `max_memory_mb`.
    pub(crate) fn bytes(&self) -> usize {
        self.charge.bytes()
    }
}

/// A [`ServerList`] being filled, charged as it grows.
pub(crate) struct ListBuilder(ServerList);

impl ListBuilder {
    /// Adds an item, or says why it does not fit in `max_memory_mb`. An
    /// item without its key is left out (no client could name it).
    pub(crate) fn push(&mut self, item: &RawValue) -> Result<(), OverBudget> {
        /// Borrowed from the JSON unless written with escapes (serde borrows
        /// a `Cow` field, not one inside an `Option`).
        #[derive(serde::Deserialize)]
        struct Key<'a>(#[serde(borrow)] Cow<'a, str>);
        #[derive(serde::Deserialize)]
        struct Keys<'a> {
            #[serde(borrow, default)]
            name: Option<Key<'a>>,
            #[serde(borrow, default)]
            uri: Option<Key<'a>>,
            #[serde(borrow, default, rename = "uriTemplate")]
            uri_template: Option<Key<'a>>,
        }
        let list = &mut self.0;
        let json = item.get();
        let Ok(keys) = serde_json::from_str::<Keys>(json) else { return Ok(()) };
        let key = match list.kind.key() {
            "name" => keys.name,
            "uri" => keys.uri,
            _ => keys.uri_template,
        };
        let Some(Key(key)) = key else { return Ok(()) };
        // Where the key is in the JSON, when it is there as it reads (no escapes).
        let inside = match &key {
            Cow::Borrowed(k) => (k.as_ptr() as usize)
                .checked_sub(json.as_ptr() as usize)
                .filter(|&at| json.get(at..at + k.len()) == Some(*k)),
            Cow::Owned(_) => None,
        };
        let again = if inside.is_some() { 0 } else { key.len() };
        let start = list.text.len();
        // Offsets are u32: a list of 4 GiB is past any budget anyway.
        if u32::try_from(start + json.len() + again).is_err()
            || !list.charge.grow(json.len() + again + std::mem::size_of::<Span>())
        {
            return Err(OverBudget(format!(
                "its {} ({} items so far; {} bytes held now)",
                list.kind.method(),
                list.items.len(),
                crate::runtime::memory::used()
            )));
        }
        list.text.push_str(json);
        let key_at = match inside {
            Some(at) => start + at,
            None => {
                list.text.push_str(&key);
                start + json.len()
            }
        };
        let span = |at: usize, len: usize| (at as u32, (at + len) as u32);
        list.items.push(Span { json: span(start, json.len()), key: span(key_at, key.len()) });
        Ok(())
    }

    /// The list, its buffers cut to what they hold.
    pub(crate) fn finish(mut self) -> ServerList {
        self.0.text.shrink_to_fit();
        self.0.items.shrink_to_fit();
        self.0
    }
}

/// A server's lists, shared by every session that sees the same of it: one
/// per kind and client view (the capabilities the server was initialized
/// with: server-everything lists more tools to a client that can sample).
/// Each is fetched once while the sessions that want it wait; it goes when
/// the server says it changed (`list_changed`), forgot a session (it
/// restarted), or no session uses the server any more.
#[derive(Default)]
pub(crate) struct ServerLists {
    /// Guards the lists and the fetches running; `done` tells the waiters.
    state: parking_lot::Mutex<ListsState>,
    done: parking_lot::Condvar,
}

#[derive(Default)]
struct ListsState {
    lists: HashMap<(ListKind, u64), Held>,
    /// Per kind, how many times it was made stale: a fetch that started
    /// before the last time is not kept.
    epochs: HashMap<ListKind, u64>,
}

enum Held {
    Fetching,
    Ready(Arc<ServerList>),
}

impl ServerLists {
    /// The list of `kind` for `view`, fetched by `fetch` unless it is held
    /// (or being fetched: then this waits for it, at most `wait`).
    pub(crate) fn get<E>(
        &self,
        kind: ListKind,
        view: u64,
        wait: std::time::Duration,
        fetch: impl FnOnce() -> Result<ServerList, E>,
        timed_out: impl FnOnce() -> E,
    ) -> Result<Arc<ServerList>, E> {
        let deadline = std::time::Instant::now() + wait;
        let mut st = self.state.lock();
        loop {
            match st.lists.get(&(kind, view)) {
                Some(Held::Ready(list)) => return Ok(list.clone()),
                Some(Held::Fetching) => {
                    if self.done.wait_until(&mut st, deadline).timed_out()
                        && matches!(st.lists.get(&(kind, view)), Some(Held::Fetching))
                    {
                        return Err(timed_out());
                    }
                }
                None => break,
            }
        }
        st.lists.insert((kind, view), Held::Fetching);
        let epoch = st.epochs.get(&kind).copied().unwrap_or(0);
        drop(st);
        let fetched = fetch().map(Arc::new);
        let mut st = self.state.lock();
        let current = st.epochs.get(&kind).copied().unwrap_or(0) == epoch;
        match &fetched {
            Ok(list) if current => {
                st.lists.insert((kind, view), Held::Ready(list.clone()));
            }
            _ => {
                st.lists.remove(&(kind, view));
            }
        }
        drop(st);
        self.done.notify_all();
        fetched
    }

    /// The list held now, if any; never fetches.
    pub(crate) fn current(&self, kind: ListKind, view: u64) -> Option<Arc<ServerList>> {
        match self.state.lock().lists.get(&(kind, view)) {
            Some(Held::Ready(list)) => Some(list.clone()),
            _ => None,
        }
    }

    /// Whether `list` is the list held now (a merged list's source still
    /// current); compared under the lock, with no reference taken.
    pub(crate) fn holds(&self, kind: ListKind, view: u64, list: &Arc<ServerList>) -> bool {
        matches!(self.state.lock().lists.get(&(kind, view)), Some(Held::Ready(held)) if Arc::ptr_eq(held, list))
    }

    /// The server's lists of `kinds` changed: they are fetched anew when
    /// next asked for. The bytes of the lists let go.
    pub(crate) fn invalidate(&self, kinds: &[ListKind]) -> usize {
        let mut st = self.state.lock();
        for kind in kinds {
            *st.epochs.entry(*kind).or_default() += 1;
        }
        let mut let_go = 0;
        st.lists.retain(|(kind, _), held| match held {
            Held::Ready(list) if kinds.contains(kind) => {
                let_go += list.bytes();
                false
            }
            _ => true,
        });
        let_go
    }

    /// Forgets every list (the server restarted, or no session uses it);
    /// the bytes of the lists let go.
    pub(crate) fn clear(&self) -> usize {
        self.invalidate(&ListKind::ALL)
    }

    /// Bytes of the lists held now.
    pub(crate) fn bytes(&self) -> usize {
        self.state
            .lock()
            .lists
            .values()
            .map(|held| match held {
                Held::Ready(list) => list.bytes(),
                Held::Fetching => 0,
            })
            .sum()
    }
}

/// The view a client's `capabilities` make of a server's lists: equal
/// capabilities, equal lists. A hash of their JSON with sorted keys.
pub(crate) fn list_view_of(capabilities: &Value) -> u64 {
    let digest = crate::runtime::sha256::digest(capabilities.to_string().as_bytes());
    u64::from_le_bytes([digest[0], digest[1], digest[2], digest[3], digest[4], digest[5], digest[6], digest[7]])
}

/// What one server listed, in the order of the configuration.
pub(crate) struct ServerItems {
    pub(crate) server: String,
    pub(crate) naming: Naming,
    /// Its filter for this kind of list.
    pub(crate) filter: Filter,
    pub(crate) list: Arc<ServerList>,
}

/// One item of a merged list: where it comes from and its exposed name.
#[derive(Debug)]
struct Entry {
    /// Its server, by place in [`List::sources`].
    source: u32,
    /// Its place in that server's list.
    item: u32,
    exposed: Arc<str>,
}

/// A tool, prompt, resource or template of a merged list, as lookups see it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Found<'a> {
    pub(crate) server: &'a str,
    /// The name, URI or template as the server knows it.
    pub(crate) original: &'a str,
    /// What the client sees.
    pub(crate) exposed: &'a str,
    /// The item's JSON as the server wrote it (its name not yet exposed).
    pub(crate) json: &'a str,
}

/// A merged list: each server's list (shared with every other merge that
/// uses it) and, for each item exposed, its exposed name, with an index from
/// that name to the item. Charged for the names and the index.
#[derive(Debug)]
pub(crate) struct List {
    pub(crate) kind: ListKind,
    sources: Vec<(String, Arc<ServerList>)>,
    entries: Vec<Entry>,
    index: HashMap<Arc<str>, u32>,
    _charge: Charge,
    /// The search index of a tool list, built by the first search, with
    /// its charge: it is held, shared and dropped with the list.
    tool_index: OnceLock<(ToolIndex, Charge)>,
}

/// Bytes an entry of a merged list costs beyond its exposed name: the entry,
/// the index's slot, the shared name's header.
const ENTRY_OVERHEAD: usize = 64;

impl List {
    /// Merges per-server lists (given in configuration order), leaving out
    /// what their filters hide. The same name from two servers (empty
    /// prefixes): the first server wins and the other is hidden. Two names
    /// that become one only when made to fit: the later gets a hash suffix.
    /// Returns the list, one line per collision, and the renamed items; or
    /// why the merge does not fit in `max_memory_mb`.
    pub(crate) fn merge(
        kind: ListKind,
        servers: Vec<ServerItems>,
    ) -> Result<(List, Vec<String>, Vec<Renamed>), OverBudget> {
        let mut list = List {
            kind,
            sources: Vec::new(),
            entries: Vec::new(),
            index: HashMap::new(),
            _charge: Charge::empty(),
            tool_index: OnceLock::new(),
        };
        let (mut collisions, mut renamed) = (Vec::new(), Vec::new());
        // Each server's naming, by place in `sources`: the raw name behind an
        // exposed one, to tell a real collision from one made by fitting, is
        // made again when two meet rather than kept for every item (600 tools
        // of 100 KB names kept 60 MB of them for the merge).
        let mut namings: Vec<Naming> = Vec::new();
        let what = &kind.field()[..kind.field().len() - 1];
        for ServerItems { server, naming, filter, list: items } in servers {
            let source = list.sources.len() as u32;
            for i in 0..items.len() {
                let original = items.key(i);
                if !filter.admits(original) {
                    continue;
                }
                let raw_of = |naming: &Naming, original: &str| {
                    if kind.renamed() { naming.raw(original) } else { original.to_string() }
                };
                let mut exposed = if kind.renamed() { exposed_name(&naming, original) } else { original.to_string() };
                if let Some(&at) = list.index.get(exposed.as_str()) {
                    let first = &list.entries[at as usize];
                    let (first_naming, first_original) = match list.sources.get(first.source as usize) {
                        Some((_, their)) => (&namings[first.source as usize], their.key(first.item as usize)),
                        None => (&naming, items.key(first.item as usize)),
                    };
                    let raw = raw_of(&naming, original);
                    if raw == raw_of(first_naming, first_original) {
                        let winner = list.sources.get(first.source as usize).map_or(&server, |(name, _)| name);
                        if winner != &server {
                            collisions.push(format!(
                                "{what} `{}` of server `{server}` is hidden by server `{winner}`",
                                shortened(&exposed)
                            ));
                        }
                        continue;
                    }
                    exposed = hashed(&exposed, &raw, naming.max);
                    if list.index.contains_key(exposed.as_str()) {
                        collisions.push(format!(
                            "{what} `{}` of server `{server}` has no name left to take",
                            shortened(original)
                        ));
                        continue;
                    }
                }
                if kind.renamed() && !naming.spells(original, &exposed) {
                    renamed.push(Renamed {
                        name: exposed.clone(),
                        server: server.clone(),
                        original: shortened(original),
                    });
                }
                if !list._charge.grow(2 * exposed.len() + ENTRY_OVERHEAD) {
                    return Err(OverBudget(format!(
                        "the merged {} ({} items so far)",
                        kind.method(),
                        list.entries.len()
                    )));
                }
                let exposed: Arc<str> = exposed.into();
                list.index.insert(exposed.clone(), list.entries.len() as u32);
                list.entries.push(Entry { source, item: i as u32, exposed });
            }
            list.sources.push((server, items));
            namings.push(naming);
        }
        Ok((list, collisions, renamed))
    }

    fn found<'a>(&'a self, entry: &'a Entry) -> Found<'a> {
        let (server, items) = &self.sources[entry.source as usize];
        let i = entry.item as usize;
        Found { server, original: items.key(i), exposed: &entry.exposed, json: items.json(i) }
    }

    pub(crate) fn find(&self, exposed: &str) -> Option<Found<'_>> {
        self.index.get(exposed).map(|&i| self.found(&self.entries[i as usize]))
    }

    /// The `i`th item.
    pub(crate) fn item(&self, i: usize) -> Option<Found<'_>> {
        self.entries.get(i).map(|e| self.found(e))
    }

    /// Every item, in order.
    pub(crate) fn items(&self) -> impl Iterator<Item = Found<'_>> {
        self.entries.iter().map(|e| self.found(e))
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Bytes it holds of its own against `max_memory_mb`: the exposed names
    /// and their index (its sources are their servers', the search index
    /// is shown apart).
    pub(crate) fn bytes(&self) -> usize {
        self._charge.bytes()
    }

    /// The server lists it was merged from: the same `Arc`s are what makes
    /// it current.
    pub(crate) fn sources(&self) -> impl Iterator<Item = (&str, &Arc<ServerList>)> {
        self.sources.iter().map(|(name, list)| (name.as_str(), list))
    }

    /// The item as the client sees it: the server's, with its exposed name.
    pub(crate) fn exposed_item(&self, found: Found<'_>) -> Value {
        let mut item: Value = serde_json::from_str(found.json).unwrap_or(Value::Null);
        if self.kind.renamed()
            && let Value::Object(object) = &mut item
        {
            object.insert(self.kind.key().to_string(), Value::String(found.exposed.to_string()));
        }
        item
    }

    /// The search index of its items, built on the first call and charged
    /// to `max_memory_mb` for as long as the list lives; and whether this
    /// call built it. An index that does not fit is not kept: why.
    pub(crate) fn tool_index(&self) -> Result<(&ToolIndex, bool), OverBudget> {
        if let Some((index, _)) = self.tool_index.get() {
            return Ok((index, false));
        }
        let index = ToolIndex::build(
            self.items().map(|found| (found.original, serde_json::from_str(found.json).unwrap_or(Value::Null))),
        );
        let Some(charge) = Charge::new(index.bytes()) else {
            return Err(OverBudget(format!("the search index of {} tools ({} bytes)", self.len(), index.bytes())));
        };
        // Two searches may build it at once: the first one kept is the index.
        let mut built = false;
        let (kept, _) = self.tool_index.get_or_init(|| {
            built = true;
            (index, charge)
        });
        Ok((kept, built))
    }

    /// One page of `items` (some of its entries, or others of the same
    /// kind) as a result object, with the same cursors as [`List::page`].
    pub(crate) fn page_of(&self, items: &[&Value], cursor: Option<&str>, size: usize) -> Result<Value, RpcError> {
        page_items(self.kind, items, cursor, size)
    }

    /// The cache hints of the merged list: the shortest life and the
    /// narrowest scope of its servers' lists, `otherwise` standing for a
    /// server whose list carried none.
    pub(crate) fn cache_hints(&self, otherwise: CacheHints) -> CacheHints {
        self.sources
            .iter()
            .map(|(_, list)| list.hints.unwrap_or(otherwise))
            .reduce(CacheHints::and)
            .unwrap_or(otherwise)
    }

    /// One page as a result object: the items and, when more follow, `nextCursor`.
    pub(crate) fn page(&self, cursor: Option<&str>, size: usize) -> Result<Value, RpcError> {
        let start = match cursor {
            None => 0,
            Some(c) => decode_cursor(c)
                .filter(|&o| o <= self.entries.len())
                .ok_or_else(|| RpcError::invalid_params(format!("invalid cursor `{c}`: start again without one")))?,
        };
        let end = (start + size).min(self.entries.len());
        let items: Vec<Value> = self.entries[start..end].iter().map(|e| self.exposed_item(self.found(e))).collect();
        let mut result = Map::new();
        result.insert(self.kind.field().into(), Value::Array(items));
        if end < self.entries.len() {
            result.insert("nextCursor".into(), Value::String(encode_cursor(end)));
        }
        Ok(Value::Object(result))
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
pub(crate) fn template_matches(template: &str, uri: &str) -> bool {
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

    /// Every test here charges the budget: not while another sets it to nothing.
    fn budget() -> parking_lot::MutexGuard<'static, ()> {
        crate::runtime::memory::TEST_BUDGET.lock()
    }

    fn raw(values: Vec<Value>) -> Vec<Box<RawValue>> {
        values.iter().map(crate::protocol::jsonrpc::raw).collect()
    }

    fn items(server: &str, prefix: &str, names: &[&str]) -> ServerItems {
        let values = names.iter().map(|n| json!({"name": n, "description": format!("{n} of {server}")})).collect();
        ServerItems {
            server: server.into(),
            naming: naming(prefix),
            filter: Filter::default(),
            list: Arc::new(ServerList::new(ListKind::Tools, &raw(values)).unwrap()),
        }
    }

    fn merge(kind: ListKind, servers: Vec<ServerItems>) -> (List, Vec<String>, Vec<Renamed>) {
        List::merge(kind, servers).unwrap()
    }

    fn names(list: &List) -> Vec<String> {
        list.items().map(|f| list.exposed_item(f)["name"].as_str().unwrap().to_string()).collect()
    }

    #[test]
    fn prefixes_names_and_keeps_the_first_server_on_collision() {
        let _budget = budget();
        let (list, collisions, renamed) = merge(
            ListKind::Tools,
            vec![
                items("files", "files", &["read", "write"]),
                items("a", "", &["echo"]),
                items("b", "", &["echo", "add"]),
            ],
        );
        assert_eq!(names(&list), ["files__read", "files__write", "echo", "add"]);
        let echo = list.find("echo").unwrap();
        assert_eq!((echo.server, echo.original), ("a", "echo"));
        assert_eq!(list.exposed_item(echo)["description"], "echo of a");
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
        let _budget = budget();
        let again = || merge(ListKind::Tools, vec![items("s", "s", &["a.b", "a_b", "a-b"])]);
        let (list, collisions, renamed) = again();
        let names = names(&list);
        assert_eq!(names.len(), 3, "{names:?} {collisions:?}");
        assert_eq!(names[0], "s__a_b");
        assert!(names[1].starts_with("s__a_b-") && names[1].len() == 15, "{names:?}");
        assert_eq!(names[2], "s__a-b");
        assert_eq!(list.find(&names[1]).unwrap().original, "a_b");
        assert_eq!(renamed.len(), 2, "a.b and a_b are renamed: {renamed:?}");
        assert_eq!(self::names(&again().0)[1], names[1], "the same on every merge");
    }

    #[test]
    fn filters_allow_then_deny_by_glob() {
        let _budget = budget();
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
        let (list, _, _) = merge(ListKind::Tools, vec![hidden]);
        assert!(list.find("s__keep").is_some() && list.find("s__drop").is_none());
    }

    #[test]
    fn pages_are_stable_and_bad_cursors_are_refused() {
        let _budget = budget();
        let names: Vec<String> = (0..5).map(|i| format!("t{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let (list, _, _) = merge(ListKind::Tools, vec![items("s", "", &refs)]);
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
        let _budget = budget();
        let list = ServerList::new(ListKind::Resources, &raw(vec![json!({"uri": "file:///a", "name": "a"})])).unwrap();
        let servers = vec![ServerItems {
            server: "s".into(),
            naming: naming("p"),
            filter: Filter::default(),
            list: Arc::new(list),
        }];
        let (list, _, _) = merge(ListKind::Resources, servers);
        let found = list.find("file:///a").unwrap();
        assert_eq!(list.exposed_item(found)["name"], "a");
    }

    #[test]
    fn long_names_are_shown_shortened_and_told_apart() {
        let (a, b) = ("x".repeat(100_000), format!("{}y", "x".repeat(99_999)));
        let (sa, sb) = (shortened(&a), shortened(&b));
        assert!(sa.len() <= SHOWN_NAME + 40 && sb.len() <= SHOWN_NAME + 40, "{sa}");
        assert_ne!(sa, sb);
        assert!(sa.contains("100000 bytes"), "{sa}");
        assert_eq!(shortened("read_file"), "read_file");
    }

    #[test]
    fn a_list_is_charged_while_it_lives() {
        let _budget = budget();
        let before = crate::runtime::memory::used();
        let values = (0..100).map(|i| json!({"name": format!("t{i}"), "description": "d".repeat(100)})).collect();
        let list = ServerList::new(ListKind::Tools, &raw(values)).unwrap();
        assert!(list.bytes() >= 100 * 100, "{}", list.bytes());
        assert!(crate::runtime::memory::used() >= before + list.bytes());
        drop(list);
        assert!(crate::runtime::memory::used() < before + 100 * 100);
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
