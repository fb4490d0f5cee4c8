//! Tasks (protocol 2025-11-25, experimental) through the gateway. A server
//! mints its task ids, so two servers may mint the same one: a client sees
//! ids of mcpgate's, scoped to its session, each standing for one server's
//! own id. Every message that carries a task id is rewritten both ways:
//! `task.taskId` in a `CreateTaskResult`, `taskId` in a task, in
//! `tasks/list` and in `notifications/tasks/status`, and the related-task
//! `_meta` of a task's messages and results.
//!
//! In 2026-07-28 tasks are an extension (SEP-2663, [`EXTENSION`]): a task
//! is written flat, with `ttlMs` and `pollIntervalMs`, and its result or
//! error inlined once it ends. [`to_extension`] writes a task of
//! 2025-11-25 that way, for the clients of that era.
//!
//! The ids mcpgate mints carry 128 random bits: in 2026-07-28 a task id is
//! the only key to its task (there is no `tasks/list`), so it must not be
//! guessable.

use std::collections::{HashMap, VecDeque};

use serde_json::{Map, Value};

/// The `_meta` key that ties a message to its task.
pub(crate) const RELATED: &str = "io.modelcontextprotocol/related-task";
/// The tasks extension of 2026-07-28 (SEP-2663), as capabilities name it.
pub(crate) const EXTENSION: &str = "io.modelcontextprotocol/tasks";
/// Task ids one session remembers; the oldest are forgotten first.
const MAX_TASKS: usize = 1024;

/// The task ids of one session.
#[derive(Debug, Default)]
pub(crate) struct TaskIds {
    /// Exposed id to (server, the server's id).
    targets: HashMap<String, (String, String)>,
    exposed: HashMap<(String, String), String>,
    order: VecDeque<String>,
    next: u64,
}

impl TaskIds {
    /// The id the client sees for `server`'s task `theirs`, made on first sight.
    pub(crate) fn expose(&mut self, server: &str, theirs: &str) -> String {
        let key = (server.to_string(), theirs.to_string());
        if let Some(id) = self.exposed.get(&key) {
            return id.clone();
        }
        self.next += 1;
        let id = format!("mcpgate-task-{}-{}", self.next, unguessable(self.next));
        if self.order.len() == MAX_TASKS
            && let Some(old) = self.order.pop_front()
            && let Some(key) = self.targets.remove(&old)
        {
            self.exposed.remove(&key);
        }
        self.targets.insert(id.clone(), key.clone());
        self.exposed.insert(key, id.clone());
        self.order.push_back(id.clone());
        id
    }

    /// The server and its own id behind the client's `exposed` id.
    pub(crate) fn target(&self, exposed: &str) -> Option<(String, String)> {
        self.targets.get(exposed).cloned()
    }
}

/// 128 bits from the kernel, in hex. Should it fail (it does not on any
/// kernel mcpgate runs on), a digest of the clock and `n`: unique still,
/// and logged, since it is then guessable with effort.
fn unguessable(n: u64) -> String {
    let mut bytes = [0u8; 16];
    if let Err(e) = crate::runtime::sys::random(&mut bytes) {
        crate::limited!(warn, "no randomness for a task id ({e}): it is made from the clock");
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let digest = crate::runtime::sha256::digest(format!("{nanos}.{n}.{}", std::process::id()).as_bytes());
        bytes.copy_from_slice(&digest[..16]);
    }
    crate::runtime::sha256::to_hex(&bytes)
}

/// How a tool takes a task (`execution.taskSupport` of its definition);
/// absent is `Forbidden`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Support {
    Forbidden,
    Optional,
    Required,
}

impl Support {
    /// Read from a tool's definition as its server listed it.
    pub(crate) fn of(tool: &Value) -> Support {
        match tool["execution"]["taskSupport"].as_str() {
            Some("optional") => Support::Optional,
            Some("required") => Support::Required,
            _ => Support::Forbidden,
        }
    }
}

/// Whether `capabilities` (a client's, or a server's of 2026-07-28) declare
/// the tasks extension.
pub(crate) fn declares_extension(capabilities: &Value) -> bool {
    capabilities["extensions"][EXTENSION].is_object()
}

/// A task of 2025-11-25 (a `Task`, flat as `tasks/get` answers it, or the
/// `task` of a `CreateTaskResult`) as the extension writes it: the same
/// id, status, message and times, `ttl` as `ttlMs` (null: unlimited) and
/// `pollInterval` as `pollIntervalMs`. Members the extension does not
/// know are left out.
pub(crate) fn to_extension(task: &Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    for key in ["taskId", "status", "statusMessage", "createdAt", "lastUpdatedAt"] {
        if let Some(value) = task.get(key).filter(|v| !v.is_null()) {
            out.insert(key.into(), value.clone());
        }
    }
    out.insert("ttlMs".into(), task.get("ttl").filter(|t| t.is_u64()).cloned().unwrap_or(Value::Null));
    if let Some(poll) = task.get("pollInterval").filter(|p| p.is_u64()) {
        out.insert("pollIntervalMs".into(), poll.clone());
    }
    out
}

/// Replaces every task id in `value` (a result or params object) with what
/// `map` gives for it; ids it gives nothing for are left as they are.
pub(crate) fn rewrite_ids(value: &mut Value, map: &mut dyn FnMut(&str) -> Option<String>) {
    let Value::Object(object) = value else { return };
    rewrite_field(object, map);
    if let Some(Value::Object(task)) = object.get_mut("task") {
        rewrite_field(task, map);
    }
    if let Some(Value::Object(meta)) = object.get_mut("_meta")
        && let Some(Value::Object(related)) = meta.get_mut(RELATED)
    {
        rewrite_field(related, map);
    }
    if let Some(Value::Array(tasks)) = object.get_mut("tasks") {
        for task in tasks {
            if let Value::Object(task) = task {
                rewrite_field(task, map);
            }
        }
    }
}

fn rewrite_field(object: &mut Map<String, Value>, map: &mut dyn FnMut(&str) -> Option<String>) {
    if let Some(Value::String(id)) = object.get("taskId")
        && let Some(new) = map(id)
    {
        object.insert("taskId".into(), Value::String(new));
    }
}

/// What mcpgate offers a client for tasks: the union of what its servers
/// offer (`list`, `cancel`, and which requests may become tasks).
pub(crate) fn merge_capabilities<'a>(offered: impl Iterator<Item = &'a Value>) -> Option<Value> {
    let mut merged: Option<Value> = None;
    for capability in offered.filter(|c| c.is_object()) {
        match &mut merged {
            None => merged = Some(capability.clone()),
            Some(into) => union(into, capability),
        }
    }
    merged
}

/// Adds to `into` the members of `from` it lacks, object by object.
fn union(into: &mut Value, from: &Value) {
    let (Value::Object(into), Value::Object(from)) = (into, from) else { return };
    for (key, value) in from {
        match into.get_mut(key) {
            Some(existing) => union(existing, value),
            None => {
                into.insert(key.clone(), value.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_same_id_from_two_servers_becomes_two_ids() {
        let mut ids = TaskIds::default();
        let a = ids.expose("a", "task-1");
        let b = ids.expose("b", "task-1");
        assert_ne!(a, b);
        assert_eq!(ids.expose("a", "task-1"), a, "stable");
        assert_eq!(ids.target(&b), Some(("b".into(), "task-1".into())));
        assert_eq!(ids.target("task-1"), None, "a server's own id means nothing to the client");
    }

    #[test]
    fn the_oldest_ids_are_forgotten_beyond_the_bound() {
        let mut ids = TaskIds::default();
        let first = ids.expose("s", "0");
        for n in 1..=MAX_TASKS {
            ids.expose("s", &n.to_string());
        }
        assert_eq!(ids.target(&first), None);
        let last = ids.expose("s", &MAX_TASKS.to_string());
        assert!(ids.target(&last).is_some());
    }

    #[test]
    fn every_place_of_a_task_id_is_rewritten() {
        let mut map = |id: &str| Some(format!("x-{id}"));
        let mut created = json!({"task": {"taskId": "1", "status": "working"}});
        rewrite_ids(&mut created, &mut map);
        assert_eq!(created["task"]["taskId"], "x-1");
        let mut got = json!({"taskId": "2", "status": "completed"});
        rewrite_ids(&mut got, &mut map);
        assert_eq!(got["taskId"], "x-2");
        let mut result = json!({"content": [], "_meta": {RELATED: {"taskId": "3"}}});
        rewrite_ids(&mut result, &mut map);
        assert_eq!(result["_meta"][RELATED]["taskId"], "x-3");
        let mut list = json!({"tasks": [{"taskId": "4"}, {"taskId": "5"}]});
        rewrite_ids(&mut list, &mut map);
        assert_eq!(list["tasks"][1]["taskId"], "x-5");
    }

    #[test]
    fn ids_are_unguessable() {
        let mut ids = TaskIds::default();
        let (a, b) = (ids.expose("s", "1"), ids.expose("s", "2"));
        let random = |id: &str| id.rsplit('-').next().map(str::len);
        assert_eq!((random(&a), random(&b)), (Some(32), Some(32)), "{a} {b}");
        assert_ne!(a.rsplit('-').next(), b.rsplit('-').next());
    }

    #[test]
    fn a_task_of_2025_11_25_is_written_as_the_extension_writes_it() {
        let task = json!({"taskId": "t", "status": "working", "createdAt": "c", "lastUpdatedAt": "u",
            "ttl": 60000, "pollInterval": 100, "statusMessage": null, "other": 1});
        let Value::Object(task) = task else { unreachable!() };
        assert_eq!(
            Value::Object(to_extension(&task)),
            json!({"taskId": "t", "status": "working", "createdAt": "c", "lastUpdatedAt": "u",
                "ttlMs": 60000, "pollIntervalMs": 100})
        );
        let Value::Object(unlimited) = json!({"taskId": "t", "status": "working", "ttl": null}) else { unreachable!() };
        assert_eq!(to_extension(&unlimited)["ttlMs"], Value::Null);
    }

    #[test]
    fn task_support_is_read_from_the_definition() {
        assert_eq!(Support::of(&json!({"execution": {"taskSupport": "required"}})), Support::Required);
        assert_eq!(Support::of(&json!({"execution": {"taskSupport": "optional"}})), Support::Optional);
        assert_eq!(Support::of(&json!({"name": "t"})), Support::Forbidden);
        assert!(declares_extension(&json!({"extensions": {EXTENSION: {}}})));
        assert!(!declares_extension(&json!({"extensions": {}})) && !declares_extension(&Value::Null));
    }

    #[test]
    fn capabilities_are_united() {
        let a = json!({"list": {}, "requests": {"tools": {"call": {}}}});
        let b = json!({"cancel": {}, "requests": {"sampling": {"createMessage": {}}}});
        let merged = merge_capabilities([&a, &b].into_iter()).unwrap();
        assert_eq!(
            merged,
            json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}, "sampling": {"createMessage": {}}}})
        );
        assert_eq!(merge_capabilities(std::iter::empty()), None);
    }
}
