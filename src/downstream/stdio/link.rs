//! One downstream session on a stdio server: the child itself
//! (`"sharing": "session"`), or a view of the shared one, whose request ids
//! and progress tokens are the child's own on the wire.

use std::borrow::Cow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

use crossbeam_channel::{Receiver, bounded};
use serde_json::Value;
use serde_json::value::RawValue;

use super::child::Child;
use super::program::Program;
use super::reader::Turn;
use crate::downstream::correlate::{Incoming, Waiting, carries};
use crate::downstream::{Arrival, DownstreamError, Flight, Inbox, Link, Server};
use crate::protocol::jsonrpc::{self, Kind, Message, Params};

/// Numbers the views of children, so a shared child tells sessions apart.
pub(super) static VIEWS: AtomicUsize = AtomicUsize::new(1);

/// One downstream session on a child: the child itself, or a view of the shared one.
pub(super) struct StdioLink {
    pub(super) server: Arc<Server>,
    /// Its server's program: what ends the child, and counts it.
    pub(super) program: Arc<Program>,
    pub(super) child: Arc<Child>,
    pub(super) view: usize,
    pub(super) shared: bool,
}

/// A client's `initialize`, written to a child before its threads start
/// (they start while the child does), and where its answer comes.
pub(super) struct Sent {
    answers: Receiver<Incoming>,
    written: Result<(), DownstreamError>,
}

/// Writes the client's `initialize` to `child`, to be read by the view
/// `view` (within `start_timeout_secs`): the first half of
/// [`StdioLink::initialize`].
pub(super) fn send_initialize(
    child: &Child,
    view: usize,
    server: &Server,
    body: &[u8],
) -> Result<Sent, DownstreamError> {
    let (tx, answers) = bounded(16);
    // This answer is read by the caller, as a call's is (see `round_trip`).
    child.began_call();
    // The client's own id 0 is the wire id too.
    child.calls.expect(&Value::from(0), Waiting::call(tx, view, false))?;
    let written = child.write_line(body, server.limits.start);
    Ok(Sent { answers, written })
}

impl StdioLink {
    /// Waits (connect and request timeouts) for the answer to the
    /// `initialize` sent ([`send_initialize`]); a child that gives none is
    /// stopped by the close path.
    pub(super) fn initialize(&self, server: &Server, sent: Sent) -> Result<Message, DownstreamError> {
        let Sent { answers: rx, written } = sent;
        let wire = Value::from(0);
        let wait = server.limits.start;
        if let Err(e) = written {
            let why = ended_why(&rx);
            self.child.calls.forget(&wire);
            return Err(why.map_or(e, DownstreamError::Refused));
        }
        let deadline = Instant::now() + wait;
        let mut turn = Turn::take(&self.server, &self.child);
        loop {
            match turn.recv(&rx, Some(deadline)) {
                Some(Incoming::Message(m)) if m.kind() == Ok(Kind::Response) => return Ok(m),
                Some(Incoming::Message(_)) => {}
                Some(Incoming::Ended(e)) => return Err(DownstreamError::Refused(reason(e))),
                None => {
                    self.child.calls.forget(&wire);
                    return Err(DownstreamError::Refused(format!(
                        "no answer to initialize within {} s; its process is stopped",
                        wait.as_secs()
                    )));
                }
            }
        }
    }
}

impl Link for StdioLink {
    fn session_id(&self) -> Option<&str> {
        None
    }

    fn round_trip(
        &self,
        id: &Value,
        method: &str,
        params: Option<&Params>,
        on_message: &mut dyn FnMut(Arrival),
        flight: &Arc<Flight>,
    ) -> Result<Message, DownstreamError> {
        if self.child.gone.load(Ordering::Acquire) {
            return Err(DownstreamError::SessionGone);
        }
        *self.child.used.lock() = Instant::now();
        let wire = self.child.next_wire.fetch_add(1, Ordering::Relaxed);
        self.child.began_call();
        // A progress token the caller chose may be another session's too.
        let (params, token) = wire_token(params, wire);
        let (tx, rx) = bounded(64);
        let stop = tx.clone();
        if let Err(why) = flight.arm(Box::new(move || {
            let _ = stop.try_send(Incoming::Ended(DownstreamError::Closed));
        })) {
            return Err(self.server.stopped(why));
        }
        let (token, their_token) = token.unzip();
        let waiting =
            Waiting { id: Some(id.clone()), token, their_token, ..Waiting::call(tx, self.view, carries(method)) };
        let wire = Value::from(wire);
        self.child.calls.expect(&wire, waiting)?;
        let body = jsonrpc::request(&wire, method, params.as_deref());
        let written = self.child.write_line(&body, self.server.limits.request).map_err(|e| match ended_why(&rx) {
            Some(why) => DownstreamError::Exited(why),
            None => e,
        });
        let result = written.and_then(|()| {
            // The answer is read here when no one else reads the child's
            // stdout: one thread, as for an HTTP server, not two.
            let mut turn = Turn::take(&self.server, &self.child);
            loop {
                match turn.recv(&rx, None) {
                    Some(Incoming::Message(m)) if m.kind() == Ok(Kind::Response) => {
                        flight.heard();
                        break Ok(m);
                    }
                    Some(Incoming::Message(m)) => {
                        flight.heard();
                        // Passing it on may wait on the client: stdout is
                        // not held meanwhile, the reader thread reads it.
                        turn.let_go();
                        on_message(Arrival::Message(m));
                    }
                    // Closed when its flight was stopped, else how the process ended.
                    Some(Incoming::Ended(e)) => break Err(e),
                    None => break Err(DownstreamError::Closed),
                }
            }
        });
        self.child.calls.forget(&wire);
        result
    }

    fn send(&self, body: &[u8]) -> Result<(), DownstreamError> {
        if self.child.gone.load(Ordering::Acquire) {
            return Err(DownstreamError::SessionGone);
        }
        if self.shared && self.child.initialized.load(Ordering::Acquire) && is_initialized(body) {
            // A shared child is initialized once, by mcpgate when it started.
            return Ok(());
        }
        self.child.write_line(body, self.server.limits.request)
    }

    fn listen(&self, inbox: Weak<dyn Inbox>) -> Result<(), DownstreamError> {
        // What the child sent before goes first, in order. Never refused: a
        // child's end is told to its calls, not marked on its correlator.
        self.child.calls.listen(&self.server, self.view, inbox).map_err(DownstreamError::Exited)
    }

    fn stop(&self) {
        self.child.calls.stop_view(self.view);
    }

    fn end(&self) -> Result<(), DownstreamError> {
        let program = &self.program;
        let others = self.child.views.fetch_sub(1, Ordering::AcqRel) - 1;
        *self.child.used.lock() = Instant::now();
        if self.shared && others > 0 {
            return Ok(());
        }
        // The last session left a shared child: the reaper stops it after
        // shared_idle_secs, unless it cannot serve (it refused initialize, or
        // stayed silent past start_timeout_secs), or its server was removed
        // or changed by a reload (the reaper looks only at the servers
        // configured now): then no session can use it, and it stops now.
        let unusable = || program.retired.load(Ordering::Acquire) || !self.child.usable();
        if self.shared && !unusable() {
            return Ok(());
        }
        if self.shared {
            program.forget_shared(&self.child);
        }
        program.stop_child(&self.child);
        Ok(())
    }
}

/// Why the child ended, when a write to it failed because it did: its
/// reader tells the calls waiting (exit status, last stderr lines) within
/// [`ENDED_WITHIN`]; `None` if it did not end.
fn ended_why(rx: &Receiver<Incoming>) -> Option<String> {
    let deadline = Instant::now() + super::program::ENDED_WITHIN;
    loop {
        match rx.recv_deadline(deadline) {
            Ok(Incoming::Ended(e)) => return Some(reason(e)),
            Ok(Incoming::Message(_)) => {}
            Err(_) => return None,
        }
    }
}

/// How a call ended, in words: how its process ended (see
/// [`Child::end_calls`]), or that it was stopped.
fn reason(ended: DownstreamError) -> String {
    match ended {
        DownstreamError::Exited(why) => why,
        _ => "stopped".into(),
    }
}

fn is_initialized(body: &[u8]) -> bool {
    Message::parse(body).is_ok_and(|m| m.method() == "notifications/initialized")
}

/// The params' text with a progress token of the child's own (the
/// caller's kept to put back), when they carry one; as they are (and
/// `_meta` not parsed) otherwise.
fn wire_token<'p>(params: Option<&'p Params>, wire: u64) -> (Option<Cow<'p, RawValue>>, Option<(String, Value)>) {
    let Some(params) = params else { return (None, None) };
    let meta = params.raw("_meta").filter(|meta| meta.get().contains("progressToken"));
    let Some(Ok(Value::Object(mut meta))) = meta.map(|meta| serde_json::from_str(meta.get())) else {
        return (Some(params.text_as_sent()), None);
    };
    let Some(token) = meta.get_mut("progressToken") else { return (Some(params.text_as_sent()), None) };
    let theirs = token.take();
    let ours = format!("mcpgate-{wire}");
    *token = Value::String(ours.clone());
    let mut params = params.clone();
    params.set("_meta", &Value::Object(meta));
    (Some(Cow::Owned(params.to_raw())), Some((ours, theirs)))
}
