//! One downstream session over Streamable HTTP (the session era): opened
//! with `initialize`, its server's own messages read from its `GET` stream
//! by a [`Reader`] thread, ended with `DELETE`.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use serde_json::Value;

use super::endpoint::{Endpoint, Exchange, status_error, unauthorized};
use super::reader::{self, Reader};
use crate::downstream::oauth::server::{self as oauth, Authed};
use crate::downstream::{Arrival, DownstreamError, Flight, Inbox, Link, Opened, Server};
use crate::limited;
use crate::protocol::jsonrpc::{self, Message, Params};
use crate::protocol::versions;

/// The `Mcp-Session-Id` a server's answer issued, if any; one that is not
/// visible ASCII is an error.
pub(crate) fn session_id_of(response: &ureq::http::Response<ureq::Body>) -> Result<Option<String>, DownstreamError> {
    match response.headers().get("mcp-session-id").map(|v| v.to_str()) {
        None => Ok(None),
        Some(Ok(v)) if !v.is_empty() && v.bytes().all(|b| (0x21..=0x7e).contains(&b)) => Ok(Some(v.to_string())),
        Some(_) => Err(DownstreamError::Protocol("Mcp-Session-Id is not visible ASCII".into())),
    }
}

/// Sends `initialize` (id 0, the client's params) and reads the answer; the
/// link carries the session id the server gave, if any. On a server with
/// `oauth`, as the user of `authed` (a refusal is the link to sign in).
pub(crate) fn open(
    server: &Arc<Server>,
    endpoint: &Arc<Endpoint>,
    body: &[u8],
    authed: Option<Authed>,
) -> Result<Opened, DownstreamError> {
    let id = Value::from(0);
    let agent = endpoint.short_agent();
    let (session_id, answer) = oauth::with_bearer(authed.as_ref(), |bearer| {
        let response = endpoint.post(&agent, None, None, body, bearer)?;
        let session_id = session_id_of(&response)?;
        let flight = server.lanes.flight(0);
        let exchange = Exchange {
            session_id: session_id.as_deref(),
            version: versions::NEWEST,
            agent: &agent,
            flight: &flight,
            bearer,
        };
        let answer = endpoint.read_answer(server, response, &id, &mut |_| {}, &exchange);
        if session_id.is_none() {
            // Without a session id there is nothing to close if the answer is bad.
            answer.as_ref().map_err(Clone::clone)?;
        }
        Ok((session_id, answer))
    })?;
    Ok((Box::new(HttpLink::new(server, endpoint, session_id, false, authed)), answer))
}

/// A downstream session of `server` taken over from the state file.
pub(crate) fn resumed(
    server: &Arc<Server>,
    endpoint: &Arc<Endpoint>,
    session_id: Option<String>,
    authed: Option<Authed>,
) -> Box<dyn Link> {
    Box::new(HttpLink::new(server, endpoint, session_id, true, authed))
}

/// One downstream session over HTTP.
struct HttpLink {
    server: Arc<Server>,
    /// Its server's agents and URL.
    endpoint: Arc<Endpoint>,
    /// The protocol version its `initialize` agreed on: its messages' `MCP-Protocol-Version`.
    version: Cow<'static, str>,
    /// The server's `Mcp-Session-Id`, when it issued one.
    session_id: Option<String>,
    /// Taken over from an earlier process: a 404 on its first `GET` means
    /// the server forgot it (a fresh session's means it has no `GET` stream).
    resumed: bool,
    /// The server answered a `POST` of this session with 404: it has
    /// ended the session (the spec's answer for a session id it no longer
    /// knows), so the close path sends no `DELETE`, which would be a
    /// second one when an earlier process's was answered.
    ended: AtomicBool,
    /// The `GET` stream's reader thread; taken by the close path.
    reader: Mutex<Option<Reader>>,
    /// The close path stopped it: a reader started after that is stopped at once.
    stopped: AtomicBool,
    /// Its user, on a server with `oauth`: whose token it sends.
    authed: Option<Authed>,
}

impl Link for HttpLink {
    fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
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
        let body = jsonrpc::request(id, method, params.map(Params::text_as_sent).as_deref());
        let endpoint = &self.endpoint;
        let mut lane = endpoint.lane_agent();
        let agent = lane.agent().clone();
        if let Err(why) = flight.arm(Box::new(move || agent.clone().shutdown())) {
            return Err(self.server.stopped(why));
        }
        let result = oauth::with_bearer(self.authed.as_ref(), |bearer| {
            let exchange = Exchange {
                session_id: self.session_id.as_deref(),
                version: &self.version,
                agent: lane.agent(),
                flight,
                bearer,
            };
            endpoint
                .post(lane.agent(), self.session_id.as_deref(), Some(&self.version), &body, bearer)
                .and_then(|response| endpoint.read_answer(&self.server, response, id, &mut *on_message, &exchange))
        });
        lane.finish(flight, &result);
        self.ended_if_gone(result)
    }

    fn send(&self, body: &[u8]) -> Result<(), DownstreamError> {
        let endpoint = &self.endpoint;
        let agent = endpoint.short_agent();
        let sent = oauth::with_bearer(self.authed.as_ref(), |bearer| {
            let session = self.session_id.as_deref();
            let response = endpoint.post(&agent, session, Some(&self.version), body, bearer)?;
            let status = response.status().as_u16();
            match status {
                200..=299 => {
                    let _ = response.into_body().with_config().limit(64 * 1024).read_to_vec();
                    Ok(())
                }
                404 if self.session_id.is_some() => Err(DownstreamError::SessionGone),
                _ => Err(unauthorized(&response).unwrap_or_else(|| status_error(response))),
            }
        });
        match sent {
            Err(DownstreamError::SessionGone) => self.ended_if_gone(Err(DownstreamError::SessionGone)),
            other => other,
        }
    }

    fn listen(&self, inbox: Weak<dyn Inbox>) -> Result<(), DownstreamError> {
        let server = &self.server;
        match reader::start(
            server,
            &self.endpoint,
            &self.version,
            self.session_id.clone(),
            self.resumed,
            inbox,
            self.authed.clone(),
        ) {
            Ok(reader) => {
                let mut slot = self.reader.lock();
                if self.stopped.load(Ordering::Acquire) {
                    // Started as its session closed (a restore racing a close): stopped at once.
                    drop(slot);
                    if let Some(mut reader) = reader {
                        reader.signal();
                        reader.join(self.server.limits.delete);
                    }
                } else {
                    *slot = reader;
                }
                Ok(())
            }
            Err(e) => {
                limited!(error, "server `{}`: cannot start a reader thread: {e}", server.name());
                Err(DownstreamError::Exhausted(format!("mcpgate cannot start a thread now ({e})")))
            }
        }
    }

    fn stop(&self) {
        // Before the lock: a `listen` that takes it after sees the stop.
        self.stopped.store(true, Ordering::Release);
        if let Some(reader) = self.reader.lock().as_mut() {
            reader.signal();
        }
    }

    /// Another instance goes on with the session: the reader is joined, no `DELETE`.
    fn hand_over(&self) -> Result<(), DownstreamError> {
        if let Some(reader) = self.reader.lock().take() {
            reader.join(self.server.limits.delete);
        }
        Ok(())
    }

    /// Joins the reader (its socket closes, freeing a descriptor for the
    /// DELETE even when descriptors ran out), then sends `DELETE`.
    fn end(&self) -> Result<(), DownstreamError> {
        if let Some(reader) = self.reader.lock().take() {
            reader.join(self.server.limits.delete);
        }
        match &self.session_id {
            Some(_) if self.ended.load(Ordering::Acquire) => Ok(()),
            // With the user's token when they hold one: nobody waits on a sign-in for a DELETE.
            Some(session) => {
                self.endpoint.delete(session, &self.version, oauth::current_bearer(self.authed.as_ref()).as_deref())
            }
            None => Ok(()),
        }
    }
}

impl HttpLink {
    fn new(
        server: &Arc<Server>,
        endpoint: &Arc<Endpoint>,
        session_id: Option<String>,
        resumed: bool,
        authed: Option<Authed>,
    ) -> HttpLink {
        HttpLink {
            server: server.clone(),
            endpoint: endpoint.clone(),
            // Until `initialize` agreed on one: what it was asked with.
            version: Cow::Borrowed(versions::NEWEST),
            session_id,
            resumed,
            ended: AtomicBool::new(false),
            reader: Mutex::new(None),
            stopped: AtomicBool::new(false),
            authed,
        }
    }

    /// Notes a 404 for this session's id: the server has ended it.
    fn ended_if_gone<T>(&self, result: Result<T, DownstreamError>) -> Result<T, DownstreamError> {
        if matches!(result, Err(DownstreamError::SessionGone)) {
            self.ended.store(true, Ordering::Release);
        }
        result
    }
}
