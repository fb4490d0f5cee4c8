//! Routing within a session, both ways: the client's calls a server is
//! working on (a cancel goes to that server, with its own id), what servers
//! send toward the client (their requests get an id of mcpgate's, kept with
//! where the answer goes), and the client's task ids.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender, bounded};
use serde_json::Value;

use crate::catalog::ListKind;
use crate::downstream::Flight;
use crate::protocol::jsonrpc::Message;
use crate::tasks::TaskIds;

/// Requests of servers waiting for the client's answer, per session; past
/// it the oldest is forgotten (a client that never answers would otherwise
/// grow the table for good), and its late answer is dropped.
const MAX_ASKS: usize = 1000;

/// Requests in flight in both directions: the client's calls a server works
/// on (where a cancel goes), the server's requests waiting for the client's
/// answer (where the answer goes), and the client's task ids.
pub(super) struct Routing {
    /// The ids of the client's requests being answered now: unique, as
    /// JSON-RPC wants the ids of outstanding requests; true once the client
    /// cancelled it, so that a cancel that comes before the request is sent
    /// (its server still being found or opened, or a permit waited for)
    /// stops it when it is.
    requests: HashMap<String, bool>,
    calls: HashMap<String, CallInFlight>,
    /// By mcpgate's id, oldest first.
    asks: BTreeMap<u64, ServerRequest>,
    next_ask: u64,
    /// The client's task ids, each standing for one server's.
    tasks: TaskIds,
}

impl Routing {
    pub(super) fn new() -> Routing {
        Routing {
            requests: HashMap::new(),
            calls: HashMap::new(),
            asks: BTreeMap::new(),
            next_ask: 1,
            tasks: TaskIds::default(),
        }
    }

    /// Forgets everything (the session closes); the calls that were in
    /// flight, to stop.
    pub(super) fn clear(&mut self) -> Vec<Arc<Flight>> {
        self.asks.clear();
        self.requests.clear();
        self.calls.drain().map(|(_, call)| call.flight).collect()
    }

    /// Takes the client's request id `id` while its request runs; false
    /// when a request with that id is outstanding.
    pub(super) fn claim(&mut self, key: &str) -> bool {
        match self.requests.entry(key.to_string()) {
            Entry::Occupied(_) => false,
            Entry::Vacant(free) => {
                free.insert(false);
                true
            }
        }
    }

    /// The client cancelled its request `key`: it stays cancelled for as
    /// long as it is answered, whatever it is sent as (a later round, a
    /// retry on a session opened anew).
    pub(super) fn cancel(&mut self, key: &str) {
        if let Some(cancelled) = self.requests.get_mut(key) {
            *cancelled = true;
        }
    }

    pub(super) fn release(&mut self, key: &str) {
        self.requests.remove(key);
    }

    /// Remembers which server works on the client's request `client_id`.
    /// Whether the client cancelled it already.
    pub(super) fn start_call(
        &mut self,
        client_id: &Value,
        server: &str,
        downstream_id: &Value,
        flight: Arc<Flight>,
    ) -> bool {
        let key = id_key(client_id);
        let cancelled = self.requests.get(&key).copied().unwrap_or(false);
        let call = CallInFlight { server: server.to_string(), downstream_id: downstream_id.clone(), flight };
        self.calls.insert(key, call);
        cancelled
    }

    pub(super) fn end_call(&mut self, client_id: &Value) {
        self.calls.remove(&id_key(client_id));
    }

    /// The client's request `client_id` in flight: its server, the server's
    /// id for it, and its flight.
    pub(super) fn call(&self, client_id: &Value) -> Option<(&str, &Value, &Arc<Flight>)> {
        let call = self.calls.get(&id_key(client_id))?;
        Some((&call.server, &call.downstream_id, &call.flight))
    }

    /// Gives a request toward the client an id of mcpgate's, kept with where
    /// its answer goes: `server`'s own `id`, or `reply` when mcpgate asked.
    /// Past [`MAX_ASKS`] the oldest is forgotten.
    pub(super) fn ask(&mut self, server: &str, id: Value, reply: Option<Sender<Message>>) -> u64 {
        let n = self.next_ask;
        self.next_ask += 1;
        self.asks.insert(n, ServerRequest { server: server.to_string(), id, reply });
        if self.asks.len() > MAX_ASKS {
            self.asks.pop_first();
        }
        n
    }

    /// A request of mcpgate's own to the client: its id, and where its answer will come.
    pub(super) fn ask_for_mcpgate(&mut self) -> (u64, Receiver<Message>) {
        let (tx, rx) = bounded(1);
        (self.ask("", Value::Null, Some(tx)), rx)
    }

    /// The client answered request `n`: who asked it, once.
    pub(super) fn answered(&mut self, n: u64) -> Option<ServerRequest> {
        self.asks.remove(&n)
    }

    /// `server` withdrew its request `theirs`: mcpgate's id for it, forgotten.
    pub(super) fn withdrawn(&mut self, server: &str, theirs: &Value) -> Option<u64> {
        let ours = *self.asks.iter().find(|(_, a)| a.server == server && a.id == *theirs)?.0;
        self.asks.remove(&ours);
        Some(ours)
    }

    /// Rewrites the task ids `server` wrote in `value` to the client's.
    pub(super) fn tasks_from(&mut self, server: &str, value: &mut Value) {
        crate::tasks::rewrite_ids(value, &mut |theirs| Some(self.tasks.expose(server, theirs)));
    }

    /// The server and its own id behind the client's task id.
    pub(super) fn task_target(&self, exposed: &str) -> Option<(String, String)> {
        self.tasks.target(exposed)
    }
}

/// A request of the client that a server is working on: where a cancel
/// goes, and the flight that ends it.
struct CallInFlight {
    server: String,
    downstream_id: Value,
    flight: Arc<Flight>,
}

/// A request a server sent to the client: where the answer goes.
pub(super) struct ServerRequest {
    pub(super) server: String,
    pub(super) id: Value,
    /// Where the answer goes when mcpgate itself asked (for a server of the
    /// 2026-07-28 era, whose questions come in an `input_required` result).
    pub(super) reply: Option<Sender<Message>>,
}

/// The lists a `list_changed` notification makes stale.
pub(super) fn stale_lists(method: &str) -> Option<&'static [ListKind]> {
    match method {
        "notifications/tools/list_changed" => Some(&[ListKind::Tools]),
        "notifications/prompts/list_changed" => Some(&[ListKind::Prompts]),
        "notifications/resources/list_changed" => Some(&[ListKind::Resources, ListKind::Templates]),
        _ => None,
    }
}

/// A map key for a JSON-RPC id: `1` and `"1"` stay distinct.
pub(super) fn id_key(id: &Value) -> String {
    id.to_string()
}

/// The calls of the 2026-07-28 clients' session running now, by server,
/// each with how to ask its client (`A`, which the session defines).
pub(super) struct Callers<A> {
    running: Vec<Caller<A>>,
}

struct Caller<A> {
    key: u64,
    server: String,
    ask: A,
}

impl<A: Clone> Callers<A> {
    pub(super) fn new() -> Callers<A> {
        Callers { running: Vec::new() }
    }

    pub(super) fn add(&mut self, key: u64, server: &str, ask: A) {
        self.running.push(Caller { key, server: server.to_string(), ask });
    }

    pub(super) fn remove(&mut self, key: u64) {
        self.running.retain(|c| c.key != key);
    }

    /// The one call running on `server`, if there is exactly one.
    pub(super) fn lone(&self, server: &str) -> Option<A> {
        let mut on_server = self.running.iter().filter(|c| c.server == server);
        match (on_server.next(), on_server.next()) {
            (Some(caller), None) => Some(caller.ask.clone()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server's requests the client never answers do not pile up: the
    /// table keeps the newest [`MAX_ASKS`], and the oldest are forgotten.
    #[test]
    fn requests_the_client_never_answers_are_bounded() {
        let mut routing = Routing::new();
        for i in 0..3000 {
            routing.ask("s", Value::from(i), None);
        }
        assert!(routing.asks.len() <= MAX_ASKS, "{} requests kept", routing.asks.len());
        // The newest can still be answered, with the server's own id, once.
        assert_eq!(routing.answered(3000).map(|a| a.id), Some(Value::from(2999)));
        assert!(routing.answered(3000).is_none());
        assert!(routing.answered(1).is_none(), "the oldest was forgotten");
    }

    #[test]
    fn a_lone_caller_is_found_and_two_are_not() {
        let mut callers = Callers::new();
        callers.add(1, "a", 'x');
        assert_eq!(callers.lone("a"), Some('x'));
        callers.add(2, "a", 'y');
        assert_eq!(callers.lone("a"), None);
        callers.remove(1);
        assert_eq!(callers.lone("a"), Some('y'));
        assert_eq!(callers.lone("b"), None);
    }
}
