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

use std::collections::HashMap;
use std::io::BufReader;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use ureq::Agent;

use super::endpoint::{Endpoint, Exchange};
use crate::downstream::{Arrival, Downstream, DownstreamError, Flight, Inbox, Link, Opened, Server};
use crate::protocol::jsonrpc::{self, Kind, Message};
use crate::protocol::stateless::{self as era, META_CAPABILITIES, META_CLIENT_INFO, META_VERSION, VERSION};
use crate::protocol::{sse, versions};
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
        match &*self.era.lock() {
            Probe::Known(Era::Stateless { .. }) => Some(VERSION),
            Probe::Known(Era::Session { .. }) => Some("session"),
            Probe::Unknown | Probe::Running => None,
        }
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
            Ok(era) => Probe::Known(era.clone()),
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

/// Reconnects of a dropped standing listen: 1 s, doubling up to 30 s.
const LISTEN_BACKOFF_MIN: Duration = Duration::from_secs(1);
const LISTEN_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// `_meta` mcpgate sends as a client of its own (the probe, the listen).
fn own_meta() -> Value {
    json!({
        META_VERSION: VERSION,
        META_CAPABILITIES: {},
        META_CLIENT_INFO: { "name": "mcpgate", "version": env!("CARGO_PKG_VERSION") },
    })
}

/// The routing headers of a request of this era.
fn headers(method: &str, params: &Value) -> Vec<(&'static str, String)> {
    let mut headers = vec![("MCP-Protocol-Version", VERSION.to_string()), ("Mcp-Method", method.to_string())];
    if let Some(member) = era::name_member(method)
        && let Some(name) = params.get(member).and_then(Value::as_str)
    {
        headers.push(("Mcp-Name", era::encode_header_value(name)));
    }
    headers
}

/// Opens a downstream session on an HTTP server of the 2026-07-28 era:
/// `None` when the server speaks the session era (then `initialize`
/// follows). The client's `initialize` (`body`) gives what its requests
/// will say of it; the answer given back stands for `initialize`'s.
pub(crate) fn open(
    server: &Server,
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
    let link = StatelessLink { meta, key, endpoint: endpoint.clone(), side: side.clone() };
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
    let response = endpoint.post_with(endpoint.short_agent(), &headers("server/discover", &params), &body)?;
    let flight = server.lanes.flight(0);
    let exchange = Exchange { session_id: None, version: VERSION, agent: endpoint.short_agent(), flight: &flight };
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
    let response = endpoint.post_with(endpoint.short_agent(), &[], &body)?;
    let session_id = super::link::session_id_of(&response).ok().flatten();
    let flight = server.lanes.flight(0);
    let exchange = Exchange {
        session_id: session_id.as_deref(),
        version: versions::NEWEST,
        agent: endpoint.short_agent(),
        flight: &flight,
    };
    let answer = endpoint.read_answer(server, response, &id, &mut |_| {}, &exchange);
    let result: Value =
        answer.ok().and_then(|a| a.result).and_then(|r| serde_json::from_str(r.get()).ok()).unwrap_or_default();
    let version = result["protocolVersion"].as_str().filter(|v| versions::supported(v));
    if let Some(session) = &session_id
        && let Err(e) = endpoint.delete(session, version.unwrap_or(versions::NEWEST))
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
        if !result.get().contains("x-mcp-header") {
            return;
        }
        let Ok(result) = serde_json::from_str::<Value>(result.get()) else { return };
        let mut schemas = self.0.lock();
        for tool in result["tools"].as_array().into_iter().flatten() {
            if let (Some(name), Some(schema)) = (tool["name"].as_str(), tool.get("inputSchema")) {
                // Bounded: a server listing without end does not grow it past this.
                if schemas.len() < 4096 || schemas.contains_key(name) {
                    schemas.insert(name.to_string(), schema.clone());
                }
            }
        }
    }

    fn headers(&self, params: &Value) -> Vec<(String, String)> {
        let Some(name) = params["name"].as_str() else { return Vec::new() };
        let schemas = self.0.lock();
        schemas.get(name).map(|schema| era::param_headers(schema, &params["arguments"])).unwrap_or_default()
    }
}

impl Link for StatelessLink {
    fn session_id(&self) -> Option<&str> {
        None
    }

    fn holds_session(&self) -> bool {
        false
    }

    fn request(
        &self,
        d: &Downstream,
        id: &Value,
        method: &str,
        params: Option<&RawValue>,
        on_message: &mut dyn FnMut(Arrival),
        flight: &Arc<Flight>,
    ) -> Result<Message, DownstreamError> {
        let mut params: Value = params.and_then(|p| serde_json::from_str(p.get()).ok()).unwrap_or(json!({}));
        // A client of this era sent its own _meta through the gateway: it is kept.
        let meta = params.as_object_mut().map(|p| p.entry("_meta").or_insert(json!({})));
        if let Some(Value::Object(meta)) = meta {
            for (key, value) in &self.meta {
                meta.entry(key.clone()).or_insert_with(|| value.clone());
            }
        }
        let body = jsonrpc::request(id, method, Some(&jsonrpc::raw(&params)));
        let (endpoint, side) = (&self.endpoint, &self.side);
        let mut lane = endpoint.lane_agent();
        let agent = lane.agent().clone();
        // Stopping closes the connection: this era's cancel.
        if let Err(why) = flight.arm(Box::new(move || agent.clone().shutdown())) {
            return Err(d.server.stopped(why));
        }
        let exchange = Exchange { session_id: None, version: VERSION, agent: lane.agent(), flight };
        let mut headers: Vec<(String, String)> =
            headers(method, &params).into_iter().map(|(n, v)| (n.to_string(), v)).collect();
        if method == "tools/call" {
            headers.extend(side.schemas.headers(&params));
        }
        let headers: Vec<(&str, String)> = headers.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
        let result = endpoint
            .post_with(lane.agent(), &headers, &body)
            .and_then(|response| endpoint.read_answer(&d.server, response, id, on_message, &exchange));
        lane.stopped = flight.disarm();
        if method == "tools/list"
            && let Ok(answer) = &result
        {
            side.schemas.learn(answer);
        }
        result
    }

    /// Nothing goes to such a server but requests: a cancel closes the
    /// request's stream, and it asks the client nothing.
    fn send(&self, d: &Downstream, body: &[u8]) -> Result<(), DownstreamError> {
        if let Ok(message) = Message::parse(body)
            && message.method() != "notifications/initialized"
        {
            log::debug!(
                "server `{}` ({VERSION}): `{}` has no place in its era; dropped",
                d.server.name(),
                message.method()
            );
        }
        Ok(())
    }

    fn listen(&self, d: &Arc<Downstream>, inbox: Weak<dyn Inbox>) -> Result<(), DownstreamError> {
        Side::listen(&self.side, self.key, inbox, &d.server, &self.endpoint)
    }

    fn stop(&self, _: &Downstream) {
        self.side.listen.remove(self.key);
    }

    fn end(&self, _: &Downstream) -> Result<(), DownstreamError> {
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
    let mut backoff = LISTEN_BACKOFF_MIN;
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
        for (name, value) in headers("subscriptions/listen", &params) {
            request = request.header(name, value.as_str());
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
        if started.elapsed() > LISTEN_BACKOFF_MAX {
            backoff = LISTEN_BACKOFF_MIN;
        }
        // Wait before listening again, looking for the stop.
        let until = Instant::now() + backoff;
        while Instant::now() < until && !stop.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(50));
        }
        backoff = (backoff * 2).min(LISTEN_BACKOFF_MAX);
    }
}
