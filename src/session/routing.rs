//! Routing within a session, both ways: the client's calls a server is
//! working on (a cancel goes to that server, with its own id), what servers
//! send toward the client (their requests get an id of mcpgate's, kept with
//! where the answer goes), and the client's task ids.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender, bounded};
use parking_lot::Mutex;
use serde_json::Value;

use crate::catalog::ListKind;
use crate::downstream::Flight;
use crate::protocol::jsonrpc::Message;
use crate::tasks::TaskIds;

/// Requests of servers waiting for the client's answer, per session; past
/// it the oldest is forgotten (a client that never answers would otherwise
/// grow the table for good), and its late answer is dropped.
const MAX_ASKS: usize = 1000;

/// Shards of [`Calls`]: a power of two, well above the clients of one
/// session that call at once on a small host.
const SHARDS: usize = 16;

/// The client's requests in flight: their ids, and the calls servers work
/// on (where a cancel goes). Each id's entries sit in one of [`SHARDS`]
/// shards, each with its own lock, chosen by a hash of the id: the calls
/// of a session many clients share (a 2026-07-28 pool) take a lock of
/// their own twice each, not one lock of the session, and a thread that
/// loses its core while holding one stops only the ids of its shard.
pub(super) struct Calls {
    shards: [Mutex<Shard>; SHARDS],
}

#[derive(Default)]
struct Shard {
    /// The ids of the client's requests being answered now: unique, as
    /// JSON-RPC wants the ids of outstanding requests; true once the client
    /// cancelled it, so that a cancel that comes before the request is sent
    /// (its server still being found or opened, or a permit waited for)
    /// stops it when it is.
    requests: HashMap<String, bool>,
    calls: HashMap<String, CallInFlight>,
}

impl Calls {
    pub(super) fn new() -> Calls {
        Calls { shards: std::array::from_fn(|_| Mutex::new(Shard::default())) }
    }

    fn shard(&self, key: &str) -> &Mutex<Shard> {
        // FNV-1a: a few bytes of JSON, hashed without a keyed hasher.
        let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        &self.shards[(hash as usize) % SHARDS]
    }

    /// Takes the client's request id `key` while its request runs; false
    /// when a request with that id is outstanding.
    pub(super) fn claim(&self, key: &str) -> bool {
        match self.shard(key).lock().requests.entry(key.to_string()) {
            Entry::Occupied(_) => false,
            Entry::Vacant(free) => {
                free.insert(false);
                true
            }
        }
    }

    /// The client cancelled its request `key`: it stays cancelled for as
    /// long as it is answered, whatever it is sent as (a later round, a
    /// retry on a session opened anew). The call in flight for it, if any:
    /// its server, the server's id for it, and its flight.
    pub(super) fn cancel(&self, key: &str) -> Option<(String, Value, Arc<Flight>)> {
        let mut shard = self.shard(key).lock();
        if let Some(cancelled) = shard.requests.get_mut(key) {
            *cancelled = true;
        }
        let call = shard.calls.get(key)?;
        Some((call.server.clone(), call.downstream_id.clone(), call.flight.clone()))
    }

    pub(super) fn release(&self, key: &str) {
        self.shard(key).lock().requests.remove(key);
    }

    /// Remembers which server works on the client's request `key` (the
    /// client's id, [`id_key`]). Whether the client cancelled it already.
    pub(super) fn start(&self, key: String, call: CallInFlight) -> bool {
        let mut shard = self.shard(&key).lock();
        let cancelled = shard.requests.get(&key).copied().unwrap_or(false);
        shard.calls.insert(key, call);
        cancelled
    }

    /// The call `key` ends: it is given back, to be dropped once the lock
    /// is not held.
    pub(super) fn end(&self, key: &str) -> Option<CallInFlight> {
        self.shard(key).lock().calls.remove(key)
    }

    /// Forgets every id (the session closes); the calls that were in
    /// flight, to stop.
    pub(super) fn clear(&self) -> Vec<Arc<Flight>> {
        let mut flights = Vec::new();
        for shard in &self.shards {
            let mut shard = shard.lock();
            shard.requests.clear();
            flights.extend(shard.calls.drain().map(|(_, call)| call.flight));
        }
        flights
    }
}

/// Requests toward the client: the server's requests waiting for the
/// client's answer (where the answer goes), and the client's task ids.
pub(super) struct Routing {
    /// By mcpgate's id, oldest first.
    asks: BTreeMap<u64, ServerRequest>,
    next_ask: u64,
    /// The client's task ids, each standing for one server's.
    tasks: TaskIds,
}

impl Routing {
    pub(super) fn new() -> Routing {
        Routing { asks: BTreeMap::new(), next_ask: 1, tasks: TaskIds::default() }
    }

    /// Forgets the requests toward the client (the session closes).
    pub(super) fn clear(&mut self) {
        self.asks.clear();
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
pub(super) struct CallInFlight {
    server: String,
    downstream_id: Value,
    flight: Arc<Flight>,
}

impl CallInFlight {
    pub(super) fn new(server: &str, downstream_id: &Value, flight: Arc<Flight>) -> CallInFlight {
        CallInFlight { server: server.to_string(), downstream_id: downstream_id.clone(), flight }
    }
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

/// A map key for a JSON-RPC id: `1` and `"1"` stay distinct. The id as
/// JSON; a string that needs no escape is quoted as it is, without
/// serde_json's writer (a call takes three keys of its id).
pub(super) fn id_key(id: &Value) -> String {
    match id {
        Value::String(s) if !s.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) => {
            let mut key = String::with_capacity(s.len() + 2);
            key.push('"');
            key.push_str(s);
            key.push('"');
            key
        }
        _ => id.to_string(),
    }
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
    use serde_json::json;

    use super::*;
    use crate::downstream::flight::Lanes;

    #[test]
    fn an_ids_key_is_the_id_as_json() {
        let ids = [json!(1), json!(-7), json!(u64::MAX), json!("1"), json!("mcpgate-call-12"), json!(""), json!(null)];
        let escaped = [json!("a\"b"), json!("back\\slash"), json!("tab\t"), json!("\u{1}"), json!("é ✓")];
        for id in ids.iter().chain(&escaped) {
            assert_eq!(id_key(id), id.to_string(), "{id}");
        }
        assert_ne!(id_key(&json!(1)), id_key(&json!("1")));
    }

    /// Each id's claim, cancel and call meet in one shard, whichever it is;
    /// a close finds the calls of every shard.
    #[test]
    fn calls_in_flight_keep_their_ids_across_the_shards() {
        let (calls, lanes) = (Calls::new(), Lanes::new(1));
        let keys: Vec<String> = (0..100).map(|i| id_key(&Value::from(i))).collect();
        for key in &keys {
            assert!(calls.claim(key));
            assert!(!calls.claim(key), "id {key} is outstanding");
        }
        let used = calls.shards.iter().filter(|s| !s.lock().requests.is_empty()).count();
        assert!(used > SHARDS / 2, "100 ids fall in {used} of {SHARDS} shards");
        assert!(calls.cancel(&keys[7]).is_none(), "cancelled before it was sent: no call yet");
        for (i, key) in keys.iter().enumerate() {
            let cancelled = calls.start(key.clone(), CallInFlight::new("s", &Value::from(i), lanes.flight(0)));
            assert_eq!(cancelled, i == 7, "{key}: a cancel that came first stops it when it starts");
        }
        let (server, theirs, _) = calls.cancel(&keys[3]).expect("in flight");
        assert_eq!((server.as_str(), theirs), ("s", Value::from(3)));
        assert!(calls.end(&keys[3]).is_some() && calls.end(&keys[3]).is_none(), "ends once");
        calls.release(&keys[3]);
        assert!(calls.claim(&keys[3]), "a released id can be used again");
        assert_eq!(calls.clear().len(), 99, "the close stops every call still in flight");
        assert!(calls.shards.iter().all(|s| s.lock().requests.is_empty() && s.lock().calls.is_empty()));
    }

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
