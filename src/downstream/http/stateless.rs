//! Servers of the stateless era (2026-07-28, which has no sessions), over
//! HTTP: mcpgate asks every HTTP server
//! `server/discover` once (again after a reload made its endpoint anew),
//! and one that speaks only 2026-07-28 is spoken to in that era. A server
//! that speaks both eras is spoken to in the session era, as its clients
//! of today do: its tools may ask the client things over the session's
//! back-channel, which the new era does not have. A discover that names
//! 2026-07-28 alone does not tell (the Python SDK 2.3.0's servers, of both
//! eras, answer so): such a server is also sent `initialize`, and the
//! session it opens is closed at once. Any other answer means the session
//! era, and `initialize`.
//!
//! Such a server has no session: a downstream session on it is a view
//! ([`StatelessLink`]) with nothing to open or close, not counted among the
//! downstream sessions. Each request carries `params._meta` (the version,
//! the client's capabilities and info) and the routing headers; stopping
//! a request closes its connection, which is the era's cancel. What the
//! server announces unasked (list changes) comes on one standing
//! `subscriptions/listen` per server ([`Listen`]), to every session using it.

use std::collections::{BTreeMap, HashMap};
use std::io::BufReader;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::de::IgnoredAny;
use serde_json::{Map, Value, json};
use ureq::Agent;
use ureq::http::{HeaderName, HeaderValue};

use super::endpoint::{Endpoint, Exchange};
use crate::downstream::{Arrival, DownstreamError, Flight, Inbox, Link, Opened, Server};
use crate::protocol::jsonrpc::{self, Kind, Message, Params};
use crate::protocol::stateless::{self as era, META_CAPABILITIES, META_CLIENT_INFO, META_VERSION, VERSION};
use crate::protocol::{sse, versions};
use crate::runtime::backoff::Backoff;
use crate::runtime::threads;

/// What an HTTP server of the 2026-07-28 era needs beside its endpoint:
/// what it speaks (asked once; a reload makes it anew), its standing
/// listen, and its tools' schemas for the `Mcp-Param-*` headers.
#[derive(Default)]
pub(crate) struct Side {
    /// Guards what the server speaks, once asked; `asked` tells the
    /// sessions that wait for the one probe in flight.
    era: Mutex<Probe>,
    asked: parking_lot::Condvar,
    /// The era's name once known, which it stays for this `Side`: read by
    /// every call without the lock.
    known: std::sync::OnceLock<&'static str>,
    listen: Listen,
    schemas: Schemas,
}

/// Where asking a server its era stands. One probe at a time: the sessions
/// that open while it runs wait for its answer (20 sessions opening at once
/// sent 20 probes, each with an `initialize` and a `DELETE` of its own).
#[derive(Default)]
enum Probe {
    #[default]
    Unknown,
    Running,
    Known(Era),
}

impl Side {
    /// `session` or `2026-07-28`, once known, for the status page.
    pub(crate) fn era_name(&self) -> Option<&'static str> {
        self.known.get().copied()
    }

    /// Whether the server speaks 2026-07-28 (alone, or beside the session
    /// era), asking it first if no session did yet; `None` when it cannot
    /// be asked now. What a client of that era would land in, directly.
    pub(crate) fn speaks_2026(&self, server: &Server, endpoint: &Endpoint) -> Option<bool> {
        let wait = server.limits.connect + server.limits.request;
        match self.era(wait, || ask_era(server, endpoint)) {
            Ok(Era::Stateless { .. }) => Some(true),
            Ok(Era::Session { also_2026 }) => Some(also_2026),
            Err(_) => None,
        }
    }

    /// What the server speaks: asked once, by the first session to need it
    /// (again after a failure; a reload makes a new `Side`). The others wait
    /// for that answer, at most `wait`.
    fn era(&self, wait: Duration, ask: impl FnOnce() -> Result<Era, DownstreamError>) -> Result<Era, DownstreamError> {
        let deadline = Instant::now() + wait;
        let mut state = self.era.lock();
        loop {
            match &*state {
                Probe::Known(era) => return Ok(era.clone()),
                Probe::Unknown => break,
                Probe::Running => {
                    if self.asked.wait_until(&mut state, deadline).timed_out() && matches!(*state, Probe::Running) {
                        return Err(DownstreamError::Timeout(wait));
                    }
                }
            }
        }
        *state = Probe::Running;
        drop(state);
        let asked = ask();
        let mut state = self.era.lock();
        *state = match &asked {
            Ok(era) => {
                let _ = self.known.set(era.name());
                Probe::Known(era.clone())
            }
            // Asked again by the next session: the server may be up by then.
            Err(_) => Probe::Unknown,
        };
        drop(state);
        self.asked.notify_all();
        asked
    }

    /// Stops the standing listen (shutdown, reload).
    pub(crate) fn stop(&self) {
        self.listen.stop();
    }
}

/// What a server speaks, learned by asking it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Era {
    /// The session era: `initialize`, sessions, `DELETE`; `also_2026` when
    /// its discover offered 2026-07-28 too (a server of both eras).
    Session { also_2026: bool },
    /// 2026-07-28, with what `server/discover` said.
    Stateless { capabilities: Value, instructions: Option<String> },
}

impl Era {
    /// `session` or `2026-07-28`, as the status page says it.
    fn name(&self) -> &'static str {
        match self {
            Era::Session { .. } => "session",
            Era::Stateless { .. } => VERSION,
        }
    }
}

/// Reconnects of a dropped standing listen: 1 s, doubling up to 30 s.
/// A listen that stayed up longer than the cap starts the streak again.
const LISTEN_BACKOFF: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));

/// `_meta` mcpgate sends as a client of its own (the probe, the listen).
fn own_meta() -> Value {
    json!({
        META_VERSION: VERSION,
        META_CAPABILITIES: {},
        META_CLIENT_INFO: { "name": "mcpgate", "version": env!("CARGO_PKG_VERSION") },
    })
}

/// The routing headers of a request of this era: names and the version
/// are static, so only the method's and the name's values are copied.
fn headers(method: &str, name: Option<&str>) -> Result<Vec<(HeaderName, HeaderValue)>, DownstreamError> {
    let value = |v: &str| {
        HeaderValue::from_str(v).map_err(|_| DownstreamError::Protocol(format!("`{v}` cannot be a header value")))
    };
    let mut headers = Vec::with_capacity(4);
    headers.push((HeaderName::from_static("mcp-protocol-version"), HeaderValue::from_static(VERSION)));
    headers.push((HeaderName::from_static(era::HEADER_METHOD), value(method)?));
    if let Some(name) = name {
        headers.push((HeaderName::from_static(era::HEADER_NAME), value(&era::encode_header_value(name))?));
    }
    Ok(headers)
}

/// Whether the params' `_meta` is an object that has every key of `keys`
/// (read no further: its keys only; a key with escapes reads as missing).
fn meta_has(params: &Params, keys: &Map<String, Value>) -> bool {
    let Some(meta) = params.raw("_meta") else { return false };
    match serde_json::from_str::<BTreeMap<&str, IgnoredAny>>(meta.get()) {
        Ok(meta) => keys.keys().all(|k| meta.contains_key(k.as_str())),
        Err(_) => false,
    }
}

/// Opens a downstream session on an HTTP server of the 2026-07-28 era:
/// `None` when the server speaks the session era (then `initialize`
/// follows). The client's `initialize` (`body`) gives what its requests
/// will say of it; the answer given back stands for `initialize`'s.
pub(crate) fn open(
    server: &Arc<Server>,
    endpoint: &Arc<Endpoint>,
    side: &Arc<Side>,
    body: &[u8],
) -> Result<Option<Opened>, DownstreamError> {
    let wait = server.limits.connect + server.limits.request;
    let era = side.era(wait, || ask_era(server, endpoint))?;
    let Era::Stateless { capabilities, instructions } = era else { return Ok(None) };
    let client = Message::parse(body).ok().and_then(|m| m.params_object().ok()).unwrap_or_default();
    let mut meta = Map::new();
    meta.insert(META_VERSION.into(), Value::from(VERSION));
    meta.insert(META_CAPABILITIES.into(), client.get("capabilities").cloned().unwrap_or(json!({})));
    if let Some(info) = client.get("clientInfo") {
        meta.insert(META_CLIENT_INFO.into(), info.clone());
    }
    let mut result = json!({ "protocolVersion": VERSION, "capabilities": capabilities });
    if let Some(text) = instructions {
        result["instructions"] = Value::String(text);
    }
    let answer = Message::parse(jsonrpc::result(&Value::from(0), &jsonrpc::raw(&result)).as_slice())
        .map_err(|e| DownstreamError::Protocol(e.message))?;
    let key = KEYS.fetch_add(1, Ordering::Relaxed);
    let link = StatelessLink { server: server.clone(), meta, key, endpoint: endpoint.clone(), side: side.clone() };
    Ok(Some((Box::new(link), Ok(answer))))
}

/// Asks the server its era, and says so when it is 2026-07-28 alone.
fn ask_era(server: &Server, endpoint: &Endpoint) -> Result<Era, DownstreamError> {
    let era = probe(server, endpoint)?;
    if matches!(era, Era::Stateless { .. }) {
        log::info!("server `{}` speaks protocol {VERSION}: no sessions with it", server.name());
    }
    Ok(era)
}

/// Asks the server `server/discover`. A transport failure is an error (the
/// server is down; it is asked again); any answer that is not a result
/// offering 2026-07-28 means the session era.
fn probe(server: &Server, endpoint: &Endpoint) -> Result<Era, DownstreamError> {
    let id = Value::from("mcpgate-discover");
    let params = json!({ "_meta": own_meta() });
    let body = jsonrpc::request(&id, "server/discover", Some(&jsonrpc::raw(&params)));
    let agent = endpoint.short_agent();
    let response = endpoint.post_with(&agent, headers("server/discover", None)?, &body)?;
    let flight = server.lanes.flight(0);
    let exchange = Exchange { session_id: None, version: VERSION, agent: &agent, flight: &flight, bearer: None };
    let Ok(answer) = endpoint.read_answer(server, response, &id, &mut |_| {}, &exchange) else {
        return Ok(Era::Session { also_2026: false });
    };
    let result: Value = answer.result.as_ref().and_then(|r| serde_json::from_str(r.get()).ok()).unwrap_or_default();
    let offered = result["supportedVersions"].as_array().cloned().unwrap_or_default();
    let stateless = offered.iter().any(|v| v == VERSION);
    let session = offered.iter().any(|v| v.as_str().is_some_and(versions::supported))
        || (stateless && answers_initialize(server, endpoint)?);
    if stateless && session {
        log::info!("server `{}` speaks both eras: spoken to in the session era", server.name());
    }
    Ok(if stateless && !session {
        Era::Stateless {
            capabilities: result.get("capabilities").cloned().unwrap_or(json!({})),
            instructions: result["instructions"].as_str().map(str::to_string),
        }
    } else {
        Era::Session { also_2026: stateless }
    })
}

/// Whether a server whose discover named 2026-07-28 alone serves the
/// session era too: it is sent `initialize`, and the session it opens, if
/// any, is closed at once with `DELETE`. A transport failure is an error
/// (the server is asked again); any answer but a result naming a
/// session-era version means it does not.
fn answers_initialize(server: &Server, endpoint: &Endpoint) -> Result<bool, DownstreamError> {
    let id = Value::from("mcpgate-initialize-probe");
    let params = json!({
        "protocolVersion": versions::NEWEST,
        "capabilities": {},
        "clientInfo": { "name": "mcpgate", "version": env!("CARGO_PKG_VERSION") },
    });
    let body = jsonrpc::request(&id, "initialize", Some(&jsonrpc::raw(&params)));
    let agent = endpoint.short_agent();
    let response = endpoint.post_with(&agent, Vec::new(), &body)?;
    let session_id = super::link::session_id_of(&response).ok().flatten();
    let flight = server.lanes.flight(0);
    let exchange = Exchange {
        session_id: session_id.as_deref(),
        version: versions::NEWEST,
        agent: &agent,
        flight: &flight,
        bearer: None,
    };
    let answer = endpoint.read_answer(server, response, &id, &mut |_| {}, &exchange);
    let result: Value =
        answer.ok().and_then(|a| a.result).and_then(|r| serde_json::from_str(r.get()).ok()).unwrap_or_default();
    let version = result["protocolVersion"].as_str().filter(|v| versions::supported(v));
    if let Some(session) = &session_id
        && let Err(e) = endpoint.delete(session, version.unwrap_or(versions::NEWEST), None)
    {
        log::warn!("server `{}`: DELETE of the session that asked its era: {e}", server.name());
    }
    Ok(version.is_some())
}

/// Numbers the views, so the standing listen tells its inboxes apart.
static KEYS: AtomicUsize = AtomicUsize::new(1);

/// A downstream session on a server of the 2026-07-28 era: what its
/// requests say of the client, and its place on the standing listen.
struct StatelessLink {
    server: Arc<Server>,
    meta: Map<String, Value>,
    key: usize,
    /// Its server's agents and URL, and what the era keeps per server.
    endpoint: Arc<Endpoint>,
    side: Arc<Side>,
}

/// The `inputSchema` of the tools a server listed, by name: a call mirrors
/// the arguments its tool marks with `x-mcp-header` in `Mcp-Param-*`.
#[derive(Default)]
pub(crate) struct Schemas(Mutex<HashMap<String, Value>>);

impl Schemas {
    /// Learns the schemas of a `tools/list` page.
    fn learn(&self, answer: &Message) {
        let Some(result) = &answer.result else { return };
        // A page that marks nothing changes nothing, unless some tool was marked before.
        if !result.get().contains("x-mcp-header") && self.0.lock().is_empty() {
            return;
        }
        let Ok(result) = serde_json::from_str::<Value>(result.get()) else { return };
        // Only the schemas that mark an argument are kept: a call of any
        // other tool reads nothing here.
        let marks = |schema: &&Value| schema.to_string().contains("x-mcp-header");
        let listed: Vec<(&str, Option<&Value>)> = result["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|tool| Some((tool["name"].as_str()?, tool.get("inputSchema").filter(marks))))
            .collect();
        let mut schemas = self.0.lock();
        for (name, schema) in listed {
            match schema {
                // Bounded: a server listing without end does not grow it past this.
                Some(schema) if schemas.len() < 4096 || schemas.contains_key(name) => {
                    schemas.insert(name.to_string(), schema.clone());
                }
                Some(_) => {}
                None => {
                    schemas.remove(name);
                }
            }
        }
    }

    /// The `Mcp-Param-*` headers of a call of tool `name`; its arguments
    /// are read only when its schema marks some.
    fn headers(&self, name: &str, arguments: impl FnOnce() -> Value) -> Vec<(HeaderName, HeaderValue)> {
        let pairs = {
            let schemas = self.0.lock();
            let Some(schema) = schemas.get(name) else { return Vec::new() };
            era::param_headers(schema, &arguments())
        };
        let header = |(n, v): (String, String)| Some((HeaderName::try_from(n).ok()?, HeaderValue::try_from(v).ok()?));
        pairs.into_iter().filter_map(header).collect()
    }
}

impl StatelessLink {
    /// The request with `_meta` completed from the client's `initialize`:
    /// what the client's own `_meta` leaves out is taken from it.
    /// A `_meta` that is not an object goes as it is.
    fn with_meta(&self, id: &Value, method: &str, params: Option<&Params>) -> Vec<u8> {
        let mut params = params.cloned().unwrap_or_default();
        let mut meta = match params.raw("_meta").map(|meta| serde_json::from_str(meta.get())) {
            None => Map::new(),
            Some(Ok(Value::Object(meta))) => meta,
            Some(_) => return jsonrpc::request(id, method, Some(&params.text_as_sent())),
        };
        for (key, value) in &self.meta {
            meta.entry(key.clone()).or_insert_with(|| value.clone());
        }
        params.set("_meta", &Value::Object(meta));
        jsonrpc::request(id, method, Some(&params.text_as_sent()))
    }
}

impl Link for StatelessLink {
    fn session_id(&self) -> Option<&str> {
        None
    }

    fn holds_session(&self) -> bool {
        false
    }

    fn round_trip(
        &self,
        id: &Value,
        method: &str,
        params: Option<&Params>,
        on_message: &mut dyn FnMut(Arrival),
        flight: &Arc<Flight>,
    ) -> Result<Message, DownstreamError> {
        let body = match params {
            // A client of this era sent its own _meta through the gateway: it goes as written.
            Some(params) if meta_has(params, &self.meta) => jsonrpc::request(id, method, Some(&params.text_as_sent())),
            _ => self.with_meta(id, method, params),
        };
        let name = era::name_member(method).and_then(|member| params?.str(member));
        let mut headers = headers(method, name.as_deref())?;
        if method == "tools/call"
            && let Some(name) = &name
        {
            let arguments = || params.and_then(|p| p.value("arguments")).unwrap_or_default();
            headers.extend(self.side.schemas.headers(name, arguments));
        }
        let (endpoint, side) = (&self.endpoint, &self.side);
        let mut lane = endpoint.lane_agent();
        let agent = lane.agent().clone();
        // Stopping closes the connection: this era's cancel.
        if let Err(why) = flight.arm(Box::new(move || agent.clone().shutdown())) {
            return Err(self.server.stopped(why));
        }
        let exchange = Exchange { session_id: None, version: VERSION, agent: lane.agent(), flight, bearer: None };
        let result = endpoint
            .post_with(lane.agent(), headers, &body)
            .and_then(|response| endpoint.read_answer(&self.server, response, id, on_message, &exchange));
        lane.finish(flight, &result);
        if method == "tools/list"
            && let Ok(answer) = &result
        {
            side.schemas.learn(answer);
        }
        result
    }

    /// Nothing goes to such a server but requests: a cancel closes the
    /// request's stream, and it asks the client nothing.
    fn send(&self, body: &[u8]) -> Result<(), DownstreamError> {
        if let Ok(message) = Message::parse(body)
            && message.method() != "notifications/initialized"
        {
            log::debug!(
                "server `{}` ({VERSION}): `{}` has no place in its era; dropped",
                self.server.name(),
                message.method()
            );
        }
        Ok(())
    }

    fn listen(&self, inbox: Weak<dyn Inbox>) -> Result<(), DownstreamError> {
        Side::listen(&self.side, self.key, inbox, &self.server, &self.endpoint)
    }

    fn stop(&self) {
        self.side.listen.remove(self.key);
    }

    fn end(&self) -> Result<(), DownstreamError> {
        Ok(())
    }
}

/// The standing `subscriptions/listen` of one server: running while some
/// session uses the server, its list changes delivered to each.
#[derive(Default)]
pub(crate) struct Listen {
    /// Guards the inboxes and the running thread.
    state: Mutex<ListenState>,
}

#[derive(Default)]
struct ListenState {
    inboxes: HashMap<usize, Weak<dyn Inbox>>,
    running: Option<Running>,
}

struct Running {
    stop: Arc<AtomicBool>,
    agent: Agent,
    handle: JoinHandle<()>,
}

impl Running {
    /// Stops the thread: its read is unblocked, and it is joined by the reaper.
    fn signal(self) {
        self.stop.store(true, Ordering::Release);
        self.agent.clone().shutdown();
        threads::join_later(self.handle);
    }
}

impl Side {
    /// Delivers the server's list changes to `inbox` (as `key`), starting
    /// the standing listen if no session runs it yet.
    fn listen(
        side: &Arc<Side>,
        key: usize,
        inbox: Weak<dyn Inbox>,
        server: &Arc<Server>,
        endpoint: &Arc<Endpoint>,
    ) -> Result<(), DownstreamError> {
        let mut st = side.listen.state.lock();
        st.inboxes.insert(key, inbox);
        if st.running.is_none() {
            let agent = endpoint.stream_agent();
            let stop = Arc::new(AtomicBool::new(false));
            let handle = {
                let name = server.name().to_string();
                let (server, endpoint, side, agent, stop) =
                    (server.clone(), endpoint.clone(), side.clone(), agent.clone(), stop.clone());
                threads::spawn("reader", &name, move || run(&server, &endpoint, &side, &agent, &stop))
                    .map_err(|e| DownstreamError::Exhausted(format!("mcpgate cannot start a thread now ({e})")))?
            };
            st.running = Some(Running { stop, agent, handle });
        }
        Ok(())
    }
}

impl Listen {
    fn remove(&self, key: usize) {
        let running = {
            let mut st = self.state.lock();
            st.inboxes.remove(&key);
            if st.inboxes.is_empty() { st.running.take() } else { None }
        };
        if let Some(running) = running {
            running.signal();
        }
    }

    /// Stops it, whoever uses it (shutdown, reload).
    fn stop(&self) {
        let running = self.state.lock().running.take();
        if let Some(running) = running {
            running.signal();
        }
    }

    fn deliver(&self, server: &Arc<Server>, message: &Message) {
        let inboxes: Vec<Weak<dyn Inbox>> = self.state.lock().inboxes.values().cloned().collect();
        for inbox in inboxes {
            if let Some(inbox) = inbox.upgrade() {
                inbox.deliver(server, message.clone());
            }
        }
    }
}

/// The standing listen's thread: listens, delivers, and listens again
/// after a drop (with backoff) until stopped.
fn run(server: &Arc<Server>, endpoint: &Endpoint, side: &Side, agent: &Agent, stop: &AtomicBool) {
    let _live = server.stats.threads_readers.enter();
    let mut backoff = LISTEN_BACKOFF.steps();
    while !stop.load(Ordering::Acquire) {
        let started = Instant::now();
        let params = json!({
            "notifications": { "toolsListChanged": true, "promptsListChanged": true, "resourcesListChanged": true },
            "_meta": own_meta(),
        });
        let body =
            jsonrpc::request(&Value::from("mcpgate-listen"), "subscriptions/listen", Some(&jsonrpc::raw(&params)));
        let request = agent
            .post(&endpoint.config.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .config()
            .timeout_per_read(None)
            .timeout_recv_body(None)
            .build();
        let mut request = request;
        for (name, value) in headers("subscriptions/listen", None).unwrap_or_default() {
            request = request.header(name, value);
        }
        for (name, value) in &endpoint.config.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        match request.send(body.as_slice()) {
            Ok(response) if response.body().mime_type() == Some("text/event-stream") => {
                let reader = BufReader::with_capacity(8 * 1024, response.into_body().into_reader());
                let mut decoder = sse::Decoder::new(reader, server.limits.max_message);
                while let Ok(Some(event)) = decoder.next_event() {
                    let Ok(mut message) = Message::parse(event.data.as_bytes()) else { continue };
                    if message.kind() != Ok(Kind::Notification)
                        || message.method() == "notifications/subscriptions/acknowledged"
                    {
                        continue;
                    }
                    // The subscription id names mcpgate's listen, not the session's.
                    if let Ok(mut p) = message.params_object() {
                        p.remove("_meta");
                        message.params = (!p.is_empty()).then(|| jsonrpc::raw(&Value::Object(p)));
                    }
                    side.listen.deliver(server, &message);
                }
            }
            Ok(response) => {
                crate::limited!(
                    warn,
                    "server `{}`: subscriptions/listen answered HTTP {}; list changes will not reach clients",
                    server.name(),
                    response.status().as_u16()
                );
            }
            Err(e) => log::debug!("server `{}`: subscriptions/listen: {e}", server.name()),
        }
        if started.elapsed() > LISTEN_BACKOFF.cap {
            backoff.reset();
        }
        // Wait before listening again, looking for the stop.
        let until = Instant::now() + backoff.next_delay();
        while Instant::now() < until && !stop.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(tools: Value) -> Message {
        Message::parse(jsonrpc::result(&Value::from(1), &jsonrpc::raw(&json!({ "tools": tools }))).as_slice()).unwrap()
    }

    fn marked(token: &str) -> Value {
        json!({"name": "t", "inputSchema": {"properties": {"r": {"type": "string", "x-mcp-header": token}}}})
    }

    fn names(headers: Vec<(HeaderName, HeaderValue)>) -> Vec<String> {
        headers.into_iter().map(|(n, v)| format!("{n}: {}", v.to_str().unwrap())).collect()
    }

    #[test]
    fn only_marked_schemas_are_kept_and_a_tool_that_drops_its_marks_is_forgotten() {
        let schemas = Schemas::default();
        let plain = json!({"name": "p", "inputSchema": {"properties": {"r": {"type": "string"}}}});
        schemas.learn(&page(json!([marked("Region"), plain])));
        assert_eq!(schemas.0.lock().len(), 1, "the unmarked tool is not kept");
        assert_eq!(names(schemas.headers("t", || json!({"r": "eu"}))), ["mcp-param-region: eu"]);
        // A call of a tool with no marks reads no arguments.
        assert!(schemas.headers("p", || panic!("arguments read")).is_empty());
        // The same tool listed again without marks, on a page with none.
        schemas.learn(&page(json!([{"name": "t", "inputSchema": {"properties": {}}}])));
        assert!(schemas.headers("t", || json!({"r": "eu"})).is_empty(), "its old schema still mirrored");
    }

    #[test]
    fn a_meta_is_complete_only_with_every_key_written_plain() {
        let keys: Map<String, Value> = [(META_VERSION.to_string(), Value::Null)].into_iter().collect();
        let has = |v: Value| meta_has(&Params::read(&jsonrpc::raw(&v)).unwrap(), &keys);
        assert!(has(json!({"name": "echo", "_meta": { META_VERSION: VERSION, "other": 1 }})));
        assert!(!has(json!({"name": "echo", "_meta": { "other": 1 }})));
        assert!(!has(json!({"name": "echo", "_meta": [META_VERSION]})));
        assert!(!has(json!({"name": "echo"})));
        let escaped = serde_json::value::RawValue::from_string(
            r#"{"_meta": {"io.modelcontextprotocol\/protocolVersion": 1}}"#.into(),
        );
        assert!(!meta_has(&Params::read(&escaped.unwrap()).unwrap(), &keys));
    }
}
