//! The reader of one downstream session's `GET` stream: a thread of its own
//! with its own ureq Agent, so that the close path can stop it at once
//! (`Agent::shutdown` unblocks its read) and join it. The HTTP+SSE
//! transport's stream is read by such a [`Reader`] too.

use std::io::BufReader;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, bounded};
use ureq::Agent;
use ureq::http::Response;

use super::endpoint::Endpoint;
use crate::downstream::{DownstreamError, Inbox, Server};
use crate::protocol::jsonrpc::Message;
use crate::protocol::sse;
use crate::runtime::backoff::Backoff;
use crate::runtime::threads;

/// Reconnect delays of a dropped stream: 0.5 s doubling to 30 s, jittered.
const BACKOFF: Backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));
/// A stream that stayed up this long resets the backoff.
const STABLE_AFTER: Duration = Duration::from_secs(10);

/// A running reader. Owned by its downstream session's link; the close
/// path signals, then joins it.
pub(crate) struct Reader {
    /// Dropped to stop the thread: a disconnected channel stays disconnected.
    stop: Option<Sender<()>>,
    agent: Agent,
    done: Receiver<()>,
    handle: JoinHandle<()>,
    server: Arc<Server>,
}

impl Reader {
    /// Starts `work` on a reader thread of `server`, which reads through
    /// `agent` (its own: shutting it down touches nothing else). `work` is
    /// given the receiver that disconnects when it must stop.
    pub(crate) fn spawn(
        server: &Arc<Server>,
        agent: Agent,
        work: impl FnOnce(Receiver<()>) + Send + 'static,
    ) -> std::io::Result<Reader> {
        let (stop, stop_rx) = bounded(0);
        let (done_tx, done) = bounded::<()>(0);
        let counted = server.clone();
        let handle = threads::spawn("reader", server.name(), move || {
            let _live = counted.stats.threads_readers.enter();
            work(stop_rx);
            drop(done_tx);
        })?;
        Ok(Reader { stop: Some(stop), agent, done, handle, server: server.clone() })
    }

    /// Asks the thread to stop and unblocks any read it is in.
    pub(crate) fn signal(&mut self) {
        drop(self.stop.take());
        self.agent.clone().shutdown();
    }

    /// Waits up to `bound` for the thread to finish, then joins it. A thread
    /// that does not finish in time is joined later ([`threads::join_later`]).
    pub(crate) fn join(self, bound: Duration) {
        match self.done.recv_timeout(bound) {
            Err(RecvTimeoutError::Timeout) => {
                self.server.stats.threads_join_timeouts.inc();
                log::error!(
                    "server `{}`: reader thread did not stop within {bound:?}; joined later",
                    self.server.name()
                );
                threads::join_later(self.handle);
            }
            _ => {
                if self.handle.join().is_err() {
                    log::error!("server `{}`: reader thread panicked", self.server.name());
                }
            }
        }
    }
}

/// Starts the reader of a downstream session's stream (of `server`,
/// speaking `version`), or none when the server offers no stream: 405, as
/// the spec says, or 404 on a fresh session's first `GET` (an app that routes only `POST` answers so; before, each such
/// 404 reopened the downstream session on every reaper tick). On a session
/// `resumed` after a restart, a 404 means the server forgot it.
///
/// The first `GET` runs here, on the thread that opened the session: its
/// deep stack (connect, request, response head) is that thread's, and the
/// reader thread keeps resident only what reading needs, about 30 KiB less
/// per downstream session. The response head must come within the connect
/// timeout; otherwise the reader tries again on its own.
pub(crate) fn start(
    server: &Arc<Server>,
    endpoint: &Arc<Endpoint>,
    version: &str,
    session_id: Option<String>,
    resumed: bool,
    inbox: Weak<dyn Inbox>,
    authed: Option<crate::downstream::oauth::server::Authed>,
) -> std::io::Result<Option<Reader>> {
    // Its own agent: shutting it down must not touch other requests.
    let agent = endpoint.stream_agent();
    let first = endpoint.get_stream(
        &agent,
        session_id.as_deref(),
        version,
        None,
        Some(server.limits.connect),
        crate::downstream::oauth::server::current_bearer(authed.as_ref()).as_deref(),
    );
    let no_stream = |status: u16| status == 405 || (status == 404 && !resumed);
    if let Ok(response) = &first
        && no_stream(response.status().as_u16())
    {
        log::debug!("server `{}` offers no GET stream (HTTP {})", server.name(), response.status().as_u16());
        return Ok(None);
    }
    let (reading, version, owner, endpoint) = (agent.clone(), version.to_string(), server.clone(), endpoint.clone());
    let reader = Reader::spawn(server, agent, move |stop| {
        let stream = Stream { server: owner, endpoint, agent: reading, session_id, version, inbox, stop, authed };
        stream.run(first);
    })?;
    Ok(Some(reader))
}

struct Stream {
    server: Arc<Server>,
    /// Where the stream is opened again when it drops.
    endpoint: Arc<Endpoint>,
    agent: Agent,
    session_id: Option<String>,
    version: String,
    inbox: Weak<dyn Inbox>,
    /// Never carries a message; disconnects when the reader must stop.
    stop: Receiver<()>,
    /// Its user, on a server with `oauth`: whose token a reconnect sends.
    authed: Option<crate::downstream::oauth::server::Authed>,
}

enum Ended {
    /// The server offers no stream, or no longer knows the session: do not reconnect.
    Final,
    /// The stream dropped; reconnect after the delay.
    Dropped { retry: Option<Duration>, stayed_up: Duration },
}

impl Stream {
    fn run(&self, first: Result<Response<ureq::Body>, DownstreamError>) {
        let mut last_event_id: Option<String> = None;
        let mut backoff = BACKOFF.steps().jittered();
        let mut first = Some(first);
        loop {
            if self.stopped() {
                return;
            }
            let opened = first.take().unwrap_or_else(|| {
                self.endpoint.get_stream(
                    &self.agent,
                    self.session_id.as_deref(),
                    &self.version,
                    last_event_id.as_deref(),
                    None,
                    crate::downstream::oauth::server::current_bearer(self.authed.as_ref()).as_deref(),
                )
            });
            let delay = match self.read_once(opened, &mut last_event_id) {
                Ended::Final => return,
                Ended::Dropped { retry, stayed_up } => {
                    if stayed_up >= STABLE_AFTER {
                        backoff.reset();
                    }
                    retry.unwrap_or_else(|| backoff.next_delay())
                }
            };
            if let Err(RecvTimeoutError::Disconnected) = self.stop.recv_timeout(delay) {
                return;
            }
        }
    }

    fn stopped(&self) -> bool {
        matches!(self.stop.try_recv(), Err(crossbeam_channel::TryRecvError::Disconnected))
    }

    /// Reads one opened stream until it ends.
    fn read_once(
        &self,
        opened: Result<Response<ureq::Body>, DownstreamError>,
        last_event_id: &mut Option<String>,
    ) -> Ended {
        let name = self.server.name();
        let started = Instant::now();
        let response = match opened {
            Ok(response) => response,
            Err(DownstreamError::Closed) => return Ended::Final,
            Err(e) => {
                if !self.stopped() {
                    crate::limited!(
                        warn,
                        "server `{name}`: GET stream: {}; retrying",
                        self.server.redact(&e.to_string())
                    );
                }
                return Ended::Dropped { retry: None, stayed_up: Duration::ZERO };
            }
        };
        let status = response.status().as_u16();
        let mime = response.body().mime_type().unwrap_or("").to_ascii_lowercase();
        match status {
            200 if mime == "text/event-stream" => {}
            405 => {
                log::debug!("server `{name}` offers no GET stream");
                return Ended::Final;
            }
            404 => {
                crate::limited!(
                    warn,
                    "server `{name}`: GET stream answered 404: the server no longer knows this session; it is reopened"
                );
                if let Some(inbox) = self.inbox.upgrade() {
                    inbox.lost(&self.server, self.session_id.as_deref());
                }
                return Ended::Final;
            }
            _ => {
                crate::limited!(warn, "server `{name}`: GET stream answered HTTP {status} `{mime}`; retrying");
                return Ended::Dropped { retry: None, stayed_up: Duration::ZERO };
            }
        }
        let reader = BufReader::with_capacity(4 * 1024, response.into_body().into_reader());
        let mut decoder = sse::Decoder::new(reader, self.server.limits.max_message);
        let mut retry = None;
        loop {
            match decoder.next_event() {
                Ok(Some(event)) => {
                    if let Some(id) = event.id {
                        *last_event_id = Some(id);
                    }
                    if let Some(ms) = event.retry_ms {
                        retry = Some(Duration::from_millis(ms));
                    }
                    if event.data.trim().is_empty() {
                        continue;
                    }
                    let charge = decoder.charge_for(event.data.len());
                    match Message::parse_text(event.data, charge) {
                        Ok(message) => match self.inbox.upgrade() {
                            Some(inbox) => inbox.deliver(&self.server, message),
                            None => return Ended::Final,
                        },
                        Err(e) => crate::limited!(
                            warn,
                            "server `{name}`: GET stream carried an invalid message ({}); ignored",
                            e.message
                        ),
                    }
                }
                Ok(None) => break,
                Err(e) if e.kind() == std::io::ErrorKind::OutOfMemory => {
                    crate::limited!(warn, "server `{name}`: GET stream cut off: {e}; reconnecting");
                    break;
                }
                // A stream quiet past its pace times out (tcp.rs: three times the
                // longest gap between its bytes, 10 to 60 s), and a vanished peer
                // fails its keepalive: reconnecting is how a dead server is noticed.
                Err(e) => {
                    if !self.stopped() {
                        log::debug!("server `{name}`: GET stream ended: {e}");
                    }
                    break;
                }
            }
        }
        Ended::Dropped { retry, stayed_up: started.elapsed() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_its_cap_with_jitter_and_resets() {
        let mut b = BACKOFF.steps().jittered();
        let delays: Vec<Duration> = (0..12).map(|_| b.next_delay()).collect();
        assert!(delays[0] >= BACKOFF.first / 2 && delays[0] <= BACKOFF.first);
        assert!(delays.iter().all(|d| *d <= BACKOFF.cap));
        assert!(delays[11] >= BACKOFF.cap / 2, "{delays:?}");
        let total: Duration = delays.iter().sum();
        assert!(total >= Duration::from_secs(60), "never spins: {total:?}");
        b.reset();
        assert!(b.next_delay() <= BACKOFF.first);
    }
}
