//! The old HTTP+SSE transport (protocol 2024-11-05), which Claude Desktop,
//! Cursor and VS Code configs still name as `"type": "sse"`: a downstream
//! session is one long `GET` of the server's URL. Its first `endpoint`
//! event names the URL that every message of mcpgate's is `POST`ed to (a
//! `202` is the normal answer), and everything the server sends, the
//! responses too, comes on that one stream.
//!
//! The stream is the session: there is no `DELETE`, and no resuming one
//! that dropped. So:
//! - its [`Reader`] thread has an agent of its own, and the close path
//!   shuts it down (the server sees the stream end) and joins the thread
//!   within `delete_timeout_secs`;
//! - a stream that drops while the session is open fails the calls waiting
//!   on it with an error naming the server, and the session is reopened as
//!   a new one, with backoff, as a server that forgot a session is
//!   ([`Inbox::lost`]);
//! - the state file notes such a session as one that ends with its process
//!   (the kernel closes the stream of a process that crashed): a restart
//!   opens a new one instead of taking it over.
//!
//! Responses are matched to requests by id, and what else the server sends
//! goes where it belongs, by the correlator stdio's children use too
//! (`downstream/correlate.rs`): progress to the call that asked for it by
//! its token; a request to the client (sampling, elicitation, roots) or a
//! log message to the one call of a client running, else to the session's
//! `Inbox` (the client's `GET` stream); list changes and the rest to the
//! `Inbox`. What comes before the session listens is kept for it.

use std::borrow::Cow;
use std::sync::{Arc, Weak};
use std::time::Instant;

use crossbeam_channel::{Receiver, bounded, select};
use parking_lot::Mutex;
use serde_json::Value;
use ureq::Agent;

use super::correlate::{Correlator, Incoming, Logs, Rules, Waiting, carries, progress_token};
use super::http::{self, Reader, status_error};
use super::{Arrival, Connector, DownstreamError, Flight, Inbox, Limits, Link, Opened, Opener, Server};
use crate::config::HttpConfig;
use crate::limited;
use crate::protocol::jsonrpc::{self, Kind, Message, Params};

mod origin;
mod stream;

/// Messages queued for one waiting call before the reader waits for it (TCP
/// then slows the server down).
const CALL_QUEUE: usize = 64;

/// How a session's correlator routes: what comes before the session
/// listens is kept for it; a log message goes to the one call running.
const RULES: Rules = Rules { early: true, logs: Logs::ToTheCall };

/// What a server of the HTTP+SSE transport keeps: the agents its `POST`s
/// go through (each session's stream has its own).
pub(crate) struct SseConnector {
    /// Shared with its sessions and their readers.
    http: Arc<http::Endpoint>,
}

impl SseConnector {
    pub(crate) fn new(config: HttpConfig, limits: Arc<Limits>, lanes: usize) -> SseConnector {
        SseConnector { http: Arc::new(http::Endpoint::new(config, limits, lanes)) }
    }
}

/// Its sessions end with their streams, and so with mcpgate: none is resumed.
impl Connector for SseConnector {
    fn kind(&self) -> &'static str {
        "sse"
    }

    fn open(&self, server: &Arc<Server>, body: &[u8], _: &Opener) -> Result<Opened, DownstreamError> {
        open(server, self, body)
    }

    /// Kept, so that a restart opens its sessions anew on the same server.
    fn saved_url(&self) -> Option<&str> {
        Some(&self.http.config.url)
    }

    fn answers_2024_11_05(&self) -> bool {
        true
    }

    /// Unblocks every short exchange in flight (requests stop with their flights).
    fn shutdown(&self) {
        self.http.shutdown();
    }

    fn close_idle(&self, unused: bool) {
        self.http.close_idle(unused);
    }

    fn probes(&self) -> bool {
        true
    }

    fn answers(&self) -> bool {
        self.http.answers()
    }
}

/// Opens the stream, waits (`connect_timeout_secs`) for its `endpoint`
/// event, and sends `initialize` (id 0, the client's params) there.
fn open(server: &Arc<Server>, endpoint: &SseConnector, body: &[u8]) -> Result<Opened, DownstreamError> {
    let limits = *server.limits;
    // Its own agent: shutting it down (the close path) must not touch other requests.
    let agent = endpoint.http.session_stream_agent();
    let response = endpoint.http.open_sse(&agent, limits.connect)?;
    let status = response.status().as_u16();
    let mime = response.body().mime_type().unwrap_or("").to_ascii_lowercase();
    match status {
        200 if mime == "text/event-stream" => {}
        200 => {
            return Err(DownstreamError::Protocol(format!(
                "its `GET` answered `{mime}`, not an SSE stream (text/event-stream): if this is a Streamable HTTP \
                 endpoint, leave out \"type\": \"sse\""
            )));
        }
        _ => return Err(status_error(response)),
    }
    let calls = Arc::new(Correlator::new(RULES));
    let (found, endpoint_rx) = bounded(1);
    let stream_url = endpoint.http.config.url.clone();
    let work = {
        let (server, http, calls) = (server.clone(), endpoint.http.clone(), calls.clone());
        move |stop| stream::read(&server, &http, &calls, response, &stream_url, found, &stop)
    };
    let mut reader = Reader::spawn(server, agent, work).map_err(|e| {
        limited!(error, "server `{}`: cannot start a reader thread: {e}", server.name());
        DownstreamError::Exhausted(format!("mcpgate cannot start a thread now ({e})"))
    })?;
    // The stream is open: from here a failure stops it and joins its reader.
    let post_url = match endpoint_rx.recv_timeout(limits.connect) {
        Ok(Ok(url)) => Ok(url),
        Ok(Err(why)) => Err(why),
        Err(_) => Err(format!(
            "its stream sent no `endpoint` event within {} s (connect_timeout_secs): is it an HTTP+SSE server?",
            limits.connect.as_secs()
        )),
    };
    let post_url = match post_url {
        Ok(url) => url,
        Err(why) => {
            reader.signal();
            reader.join(limits.delete);
            return Err(DownstreamError::Protocol(why));
        }
    };
    let link = SseLink {
        server: server.clone(),
        http: endpoint.http.clone(),
        // Until `initialize` (whose own `POST` says none) agreed on one.
        version: Cow::Borrowed(crate::protocol::versions::NEWEST),
        session_id: stream::session_of(&post_url),
        post_url,
        calls,
        reader: Mutex::new(Some(reader)),
    };
    let answer = link.initialize(server, body);
    Ok((Box::new(link), answer))
}

/// One downstream session over HTTP+SSE: its stream, and where to `POST`.
struct SseLink {
    server: Arc<Server>,
    http: Arc<http::Endpoint>,
    /// The protocol version its `initialize` agreed on: its `POST`s' `MCP-Protocol-Version`.
    version: Cow<'static, str>,
    /// The URL the `endpoint` event named.
    post_url: String,
    /// The server's id for it: the `sessionId` (or `session_id`) of that
    /// URL, or the URL itself.
    session_id: String,
    /// What the link and its reader share: the calls waiting, the inbox.
    calls: Arc<Correlator>,
    /// The stream's reader thread; taken by the close path.
    reader: Mutex<Option<Reader>>,
}

impl SseLink {
    /// Registers the call `id` (its id on the wire too); its messages and
    /// response arrive on the receiver. Refused when the stream ended
    /// (nothing was sent: a new session may take the call) or the session
    /// is closing.
    fn expect(
        &self,
        id: &Value,
        params: Option<&Params>,
        carries: bool,
    ) -> Result<Receiver<Incoming>, DownstreamError> {
        let (tx, rx) = bounded(CALL_QUEUE);
        let token = params.and_then(progress_token);
        self.calls.expect(id, Waiting { token, ..Waiting::call(tx, 0, carries) })?;
        Ok(rx)
    }

    /// A `POST` of one message, on `agent`; the answer (`202`, or any 2xx)
    /// says only that it was taken.
    fn post(&self, agent: &Agent, version: Option<&str>, body: &[u8]) -> Result<(), DownstreamError> {
        let response = self.http.post_to(agent, &self.post_url, version, body)?;
        match response.status().as_u16() {
            200..=299 => {
                // Read the (small) body so the connection can be reused.
                let _ = response.into_body().with_config().limit(64 * 1024).read_to_vec();
                Ok(())
            }
            // The server ended the session (it restarted, or timed the stream out).
            404 => Err(DownstreamError::SessionGone),
            _ => Err(status_error(response)),
        }
    }

    /// Sends `initialize` and waits for its answer on the stream, within
    /// the connect and request timeouts; the close path ends what it opened.
    fn initialize(&self, server: &Server, body: &[u8]) -> Result<Message, DownstreamError> {
        let id = Value::from(0);
        let rx = self.expect(&id, None, false)?;
        let result = self.post(&self.http.short_agent(), None, body).and_then(|()| {
            let wait = server.limits.connect + server.limits.request;
            let never = crossbeam_channel::never::<()>();
            wait_for_response(&rx, &never, &mut |_| {}, None, Some(Instant::now() + wait)).map_err(|e| match e {
                DownstreamError::Closed => DownstreamError::Refused(format!(
                    "no answer to initialize within {} s (connect_timeout_secs + request_timeout_secs)",
                    wait.as_secs()
                )),
                other => other,
            })
        });
        self.calls.forget(&id);
        result
    }
}

/// Waits for the response on `rx`, passing what else comes to
/// `on_message`; ends when `stop` is signalled, or past `deadline`.
fn wait_for_response(
    rx: &Receiver<Incoming>,
    stop: &Receiver<()>,
    on_message: &mut dyn FnMut(Arrival),
    flight: Option<&Flight>,
    deadline: Option<Instant>,
) -> Result<Message, DownstreamError> {
    let timeout = deadline.map_or_else(crossbeam_channel::never, |at| {
        crossbeam_channel::after(at.saturating_duration_since(Instant::now()))
    });
    // Ends: with the response, the stream's end, a stop or the deadline; the
    // flight's silence is bounded by the reaper, which stops it.
    loop {
        select! {
            recv(rx) -> incoming => match incoming {
                Ok(Incoming::Message(m)) => {
                    if let Some(flight) = flight {
                        flight.heard();
                    }
                    if m.kind() == Ok(Kind::Response) {
                        return Ok(m);
                    }
                    on_message(Arrival::Message(m));
                }
                Ok(Incoming::Ended(e)) => return Err(e),
                Err(_) => return Err(DownstreamError::Closed),
            },
            recv(stop) -> _ => return Err(DownstreamError::Closed),
            recv(timeout) -> _ => return Err(DownstreamError::Closed),
        }
    }
}

impl Link for SseLink {
    fn session_id(&self) -> Option<&str> {
        Some(&self.session_id)
    }

    fn survives_restart(&self) -> bool {
        false
    }

    fn agreed(&mut self, version: Cow<'static, str>) {
        self.version = version;
    }

    fn round_trip(
        &self,
        id: &Value,
        method: &str,
        params: Option<&Params>,
        on_message: &mut dyn FnMut(Arrival),
        flight: &Arc<Flight>,
    ) -> Result<Message, DownstreamError> {
        // Registered before the POST: the response may come before its answer.
        let rx = self.expect(id, params, carries(method))?;
        let params = params.map(Params::text_as_sent);
        let mut lane = self.http.lane_agent();
        let (stop, stopped) = bounded::<()>(1);
        let agent = lane.agent().clone();
        let armed = flight.arm(Box::new(move || {
            let _ = stop.try_send(());
            // A POST the server has not answered yet ends too.
            agent.clone().shutdown();
        }));
        let result = match armed {
            Err(why) => Err(self.server.stopped(why)),
            Ok(()) => self
                .post(lane.agent(), Some(&self.version), &jsonrpc::request(id, method, params.as_deref()))
                .and_then(|()| wait_for_response(&rx, &stopped, on_message, Some(flight), None)),
        };
        lane.stopped = flight.disarm();
        self.calls.forget(id);
        result
    }

    fn send(&self, body: &[u8]) -> Result<(), DownstreamError> {
        if self.calls.has_ended() {
            return Err(DownstreamError::SessionGone);
        }
        self.post(&self.http.short_agent(), Some(&self.version), body)
    }

    fn listen(&self, inbox: Weak<dyn Inbox>) -> Result<(), DownstreamError> {
        self.calls
            .listen(&self.server, 0, inbox)
            .map_err(|why| DownstreamError::Protocol(format!("its SSE stream ended: {why}")))
    }

    fn stop(&self) {
        // The close path's first step: nothing more is delivered, and the calls waiting end.
        for tx in self.calls.stop() {
            let _ = tx.try_send(Incoming::Ended(DownstreamError::Closed));
        }
        if let Some(reader) = self.reader.lock().as_mut() {
            reader.signal();
        }
    }

    /// Joins the reader: its stream, the session, is closed then.
    fn end(&self) -> Result<(), DownstreamError> {
        let reader = self.reader.lock().take();
        if let Some(reader) = reader {
            let started = Instant::now();
            reader.join(self.server.limits.delete);
            log::debug!(
                "server `{}`: HTTP+SSE session {} closed in {:?}",
                self.server.name(),
                self.session_id,
                started.elapsed()
            );
        }
        Ok(())
    }
}
