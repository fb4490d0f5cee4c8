//! Routing within a session, both ways: the client's calls a server is
//! working on (a cancel goes to that server, with its own id), what servers
//! send toward the client (their requests get an id of mcpgate's, kept with
//! where the answer goes), and the client's task ids.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender, bounded};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::catalog::ListKind;
use crate::downstream::{Downstream, Flight, Server, Stop};
use crate::protocol::jsonrpc::{self, Kind, Message, RpcError};
use crate::tasks::{self, TaskIds};

use super::{Session, Slot};

/// Requests of servers waiting for the client's answer, per session; past
/// it the oldest is forgotten (a client that never answers would otherwise
/// grow the table for good), and its late answer is dropped.
const MAX_ASKS: usize = 1000;

/// Requests in flight in both directions: the client's calls a server works
/// on (where a cancel goes), the server's requests waiting for the client's
/// answer (where the answer goes), and the client's task ids.
pub(super) struct Routes {
    /// The ids of the client's requests being answered now: unique, as
    /// JSON-RPC wants the ids of outstanding requests.
    requests: HashSet<String>,
    calls: HashMap<String, CallInFlight>,
    /// By mcpgate's id, oldest first.
    asks: BTreeMap<u64, ServerRequest>,
    next_ask: u64,
    /// The client's task ids, each standing for one server's.
    tasks: TaskIds,
}

impl Routes {
    pub(super) fn new() -> Routes {
        Routes {
            requests: HashSet::new(),
            calls: HashMap::new(),
            asks: BTreeMap::new(),
            next_ask: 1,
            tasks: TaskIds::default(),
        }
    }

    /// Forgets everything (the session closes); the calls that were in
    /// flight, to stop.
    pub(super) fn clear(&mut self) -> Vec<CallInFlight> {
        self.asks.clear();
        self.requests.clear();
        self.calls.drain().map(|(_, call)| call).collect()
    }
}

/// A request of the client that a server is working on: where a cancel
/// goes, and the flight that ends it.
pub(super) struct CallInFlight {
    server: String,
    downstream_id: Value,
    pub(super) flight: Arc<Flight>,
}

/// A request a server sent to the client: where the answer goes.
pub(super) struct ServerRequest {
    server: String,
    id: Value,
    /// Where the answer goes when mcpgate itself asked (for a server of the
    /// 2026-07-28 era, whose questions come in an `input_required` result).
    reply: Option<Sender<Message>>,
}

/// The lists a `list_changed` notification makes stale.
fn stale_lists(method: &str) -> Option<&'static [ListKind]> {
    match method {
        "notifications/tools/list_changed" => Some(&[ListKind::Tools]),
        "notifications/prompts/list_changed" => Some(&[ListKind::Prompts]),
        "notifications/resources/list_changed" => Some(&[ListKind::Resources, ListKind::Templates]),
        _ => None,
    }
}

/// A map key for a JSON-RPC id: `1` and `"1"` stay distinct.
fn id_key(id: &Value) -> String {
    id.to_string()
}

/// A client request id in use while its request is answered; freed when dropped.
pub struct IdClaim<'a> {
    session: &'a Session,
    key: String,
}

impl Drop for IdClaim<'_> {
    fn drop(&mut self) {
        self.session.state.lock().routes.requests.remove(&self.key);
    }
}

impl Session {
    /// Takes the client's request id `id` for as long as its request runs,
    /// or refuses it when a request of this session with that id is
    /// outstanding: a cancel of the id must name one request.
    pub fn claim_request_id(&self, id: &Value) -> Result<IdClaim<'_>, RpcError> {
        let key = id_key(id);
        if !self.state.lock().routes.requests.insert(key.clone()) {
            return Err(RpcError::new(
                jsonrpc::INVALID_REQUEST,
                format!(
                    "request id {key} is already in flight in this session: ids of outstanding requests must be unique"
                ),
            ));
        }
        Ok(IdClaim { session: self, key })
    }

    /// Remembers which server works on the client's request `client_id`,
    /// and its flight, which the client's cancel or the session's close stops.
    pub fn start_call(&self, client_id: &Value, server: &str, downstream_id: &Value, flight: Arc<Flight>) {
        let call = CallInFlight { server: server.to_string(), downstream_id: downstream_id.clone(), flight };
        self.state.lock().routes.calls.insert(id_key(client_id), call);
    }

    pub fn end_call(&self, client_id: &Value) {
        self.state.lock().routes.calls.remove(&id_key(client_id));
    }

    /// Ends the client's request `client_id` at once (its answer will
    /// carry no response) and says where its cancel goes: the downstream
    /// session and the server's id for the request.
    pub fn cancel(&self, client_id: &Value) -> Option<(Arc<Downstream>, Value)> {
        let (flight, target) = {
            let st = self.state.lock();
            let call = st.routes.calls.get(&id_key(client_id))?;
            let target = match st.slots.get(&call.server) {
                Some(Slot::Open(d)) => Some((d.clone(), call.downstream_id.clone())),
                _ => None,
            };
            (call.flight.clone(), target)
        };
        flight.stop(Stop::Cancelled);
        target
    }

    /// Turns a message from `server` into what the client receives, or
    /// `None` when the client must not see it. Requests get an id of
    /// mcpgate's, remembered so the answer can go back; `list_changed`
    /// makes the merged list stale.
    pub fn to_client(&self, server: &Server, message: Message) -> Option<Vec<u8>> {
        match message.kind().ok()? {
            Kind::Request => {
                let params = self.task_params(server, &message);
                let mut st = self.state.lock();
                let n = st.routes.next_ask;
                st.routes.next_ask += 1;
                st.routes.asks.insert(
                    n,
                    ServerRequest { server: server.name().to_string(), id: message.id.clone()?, reply: None },
                );
                if st.routes.asks.len() > MAX_ASKS {
                    st.routes.asks.pop_first();
                }
                Some(jsonrpc::request(&Value::from(n), message.method(), params.as_deref()))
            }
            Kind::Notification => {
                let method = message.method();
                if let Some(kinds) = stale_lists(method) {
                    server.lists.invalidate(kinds);
                }
                if method == "notifications/cancelled" {
                    return self.server_cancelled(server, &message);
                }
                Some(jsonrpc::notification(method, self.task_params(server, &message).as_deref()))
            }
            Kind::Response => None,
        }
    }

    /// A message's params with the server's task ids as the client knows
    /// them; untouched (and not parsed) when they name no task.
    fn task_params(&self, server: &Server, message: &Message) -> Option<Box<RawValue>> {
        let raw = message.params.as_deref()?;
        if !(raw.get().contains(tasks::RELATED) || message.method() == "notifications/tasks/status") {
            return Some(raw.to_owned());
        }
        let Ok(mut params) = serde_json::from_str::<Value>(raw.get()) else { return Some(raw.to_owned()) };
        self.tasks_from(server.name(), &mut params);
        Some(jsonrpc::raw(&params))
    }

    /// Rewrites the task ids `server` wrote in `value` to the client's.
    pub fn tasks_from(&self, server: &str, value: &mut Value) {
        let mut st = self.state.lock();
        tasks::rewrite_ids(value, &mut |theirs| Some(st.routes.tasks.expose(server, theirs)));
    }

    /// The server and its own id behind the client's task id.
    pub fn task_target(&self, exposed: &str) -> Option<(String, String)> {
        self.state.lock().routes.tasks.target(exposed)
    }

    /// A server withdrew a request it sent the client: rewrite its id to ours.
    fn server_cancelled(&self, server: &Server, message: &Message) -> Option<Vec<u8>> {
        let mut params = message.params_object().ok()?;
        let theirs = params.get("requestId")?.clone();
        let mut st = self.state.lock();
        let ours = *st.routes.asks.iter().find(|(_, a)| a.server == server.name() && a.id == theirs)?.0;
        st.routes.asks.remove(&ours);
        params.insert("requestId".into(), Value::from(ours));
        Some(jsonrpc::notification("notifications/cancelled", Some(&jsonrpc::raw(&Value::Object(params)))))
    }

    /// The client's answer to a server's request: the downstream session it
    /// goes to and the message with the server's own id. `None` for an id
    /// mcpgate never issued (or already answered).
    pub fn answer_from_client(&self, message: &Message) -> Option<(Arc<Downstream>, Vec<u8>)> {
        let n = message.id.as_ref()?.as_u64()?;
        let mut st = self.state.lock();
        let ask = st.routes.asks.remove(&n)?;
        if let Some(reply) = ask.reply {
            let _ = reply.try_send(message.clone());
            return None;
        }
        let Some(Slot::Open(d)) = st.slots.get(&ask.server) else { return None };
        let body = match (&message.result, &message.error) {
            (Some(result), _) => jsonrpc::result(&ask.id, result),
            (None, Some(error)) => jsonrpc::raw_error(&ask.id, error),
            (None, None) => return None,
        };
        Some((d.clone(), body))
    }

    /// A request of mcpgate's own to the client (`method` with `params`):
    /// what to send it, and where its answer will come.
    pub fn ask_client(&self, method: &str, params: Option<&RawValue>) -> (Vec<u8>, Receiver<Message>) {
        let (tx, rx) = bounded(1);
        let mut st = self.state.lock();
        let n = st.routes.next_ask;
        st.routes.next_ask += 1;
        st.routes.asks.insert(n, ServerRequest { server: String::new(), id: Value::Null, reply: Some(tx) });
        if st.routes.asks.len() > MAX_ASKS {
            st.routes.asks.pop_first();
        }
        (jsonrpc::request(&Value::from(n), method, params), rx)
    }

    /// Whether the client declared what a request of `method` needs.
    pub fn client_can(&self, method: &str) -> bool {
        let capability = match method {
            "sampling/createMessage" => "sampling",
            "elicitation/create" => "elicitation",
            "roots/list" => "roots",
            _ => return false,
        };
        serde_json::from_str::<Value>(self.init_params.get())
            .ok()
            .is_some_and(|p| p["capabilities"].get(capability).is_some_and(|c| !c.is_null()))
    }

    /// Remembers `logging/setLevel` for servers this session opens later.
    pub fn remember_log_level(&self, params: Option<&RawValue>) {
        self.state.lock().log_level = params.map(|p| p.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::downstream::stdio::Children;
    use crate::downstream::{Context, Limits};
    use crate::http::auth::Access;
    use crate::runtime::state::Journal;
    use crate::stats::Stats;
    use std::time::Duration;

    fn server() -> Arc<Server> {
        let text = serde_json::json!({"mcpServers": {"s": {"url": "http://127.0.0.1:9/mcp"}}}).to_string();
        let config = Config::parse(&text, &|_| None).unwrap();
        let context = Context {
            stats: Arc::new(Stats::default()),
            journal: Arc::new(Journal::new(None, None)),
            children: Children::new(1, Duration::from_millis(10), 1024),
        };
        Arc::new(Server::new(config.servers[0].clone(), Limits::from_config(&config), 1, &context))
    }

    fn session() -> Arc<Session> {
        let params = jsonrpc::raw(&serde_json::json!({"capabilities": {}}));
        Session::new("s".into(), "2025-11-25".into(), params, "test".into(), &Access::Open)
    }

    /// A server's requests the client never answers do not pile up: the
    /// table keeps the newest [`MAX_ASKS`], and the oldest are forgotten.
    #[test]
    fn requests_the_client_never_answers_are_bounded() {
        let (server, session) = (server(), session());
        for i in 0..3000 {
            let text = format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"sampling/createMessage","params":{{}}}}"#);
            let out = session.to_client(&server, Message::parse(text.as_bytes()).unwrap());
            assert!(out.is_some());
        }
        let asks = session.state.lock().routes.asks.len();
        assert!(asks <= MAX_ASKS, "{asks} requests kept");
        // The newest can still be answered, with the server's own id.
        let answer = Message::parse(br#"{"jsonrpc":"2.0","id":3000,"result":{}}"#).unwrap();
        let newest = session.state.lock().routes.asks.get(&3000).map(|a| a.id.clone());
        assert_eq!(newest, Some(Value::from(2999)));
        assert!(session.answer_from_client(&answer).is_none(), "no open downstream session to take it");
        assert!(!session.state.lock().routes.asks.contains_key(&3000));
    }
}
