//! The stdio transport: a server that is a program mcpgate starts and
//! speaks to in newline-delimited JSON-RPC on its stdin and stdout, as
//! Claude Desktop's `command`/`args`/`env` entries describe.
//!
//! Processes:
//! - every child is started by one long-lived thread ([`Children`]), in a
//!   process group of its own, with `PR_SET_PDEATHSIG`: if mcpgate dies,
//!   even by `kill -9`, the kernel kills it (what it started in turn is in
//!   its group, which systemd's `KillMode=control-group` takes too);
//! - it gets a small base environment ([`BASE_ENV`]) and its own `env`,
//!   not mcpgate's, which may hold other servers' secrets, and no signal
//!   blocked (mcpgate blocks SIGTERM, SIGINT and SIGHUP in every thread,
//!   and a signal mask outlives exec);
//! - one thread reads its stdout (a message per line, at most
//!   `max_message_bytes`), except while calls are running and one of them
//!   holds it: a call that finds stdout free reads its own answer there,
//!   and sends the other calls theirs, as a call to an HTTP server reads
//!   its socket (one thread wake-up less per call); one thread reads its
//!   stderr (to the log, prefixed with the server's name, bounded and
//!   rate-limited); writes to its stdin never block longer than the
//!   request timeout;
//! - it ends through the close path only: stdin closed, `stdio_grace_ms`
//!   to exit, then SIGTERM to its group, the same again, then SIGKILL, and
//!   it is always reaped. A child that exits by itself is reaped by its
//!   reader at once: no zombies. Either way its group is killed before it
//!   is reaped (while its pid cannot be reused), and the readers notice its
//!   exit even when a process that escaped the group holds its pipes.
//!
//! Sharing: with `"sharing": "user"` (the default) the sessions of one
//! user (a token or an OAuth subject; every session without `auth`) share
//! one child, as Claude Desktop runs one process per server for all its
//! conversations; `"shared"` is one child for every session of every user;
//! `"session"` a child per session. A shared child is started when first
//! needed (or ahead, `"start": "eager"`), initialized once by mcpgate, and
//! each session's downstream session is a view of it: request ids and
//! progress tokens are rewritten so sessions cannot collide, and what the
//! child sends goes to the session it concerns: a response to its request,
//! progress to the call that asked for it, a request (sampling,
//! elicitation, roots) to the one session with a call running, refused
//! when that is not one session; list changes to every session.
//!
//! A request of a child goes on the answer stream of the one call of a
//! client running on it, else on the session's `GET` stream: never with one
//! of mcpgate's own requests (the lists it merges, `logging/setLevel`),
//! whose answers reach no client. What a per-session child sends before its
//! session listens (server-filesystem asks for the roots as soon as it is
//! initialized) is kept for that session.
//!
//! The files, from the ground up: `stdout.rs` (a child's stdout and the
//! line half-read from it, held by whoever reads it), `child.rs` (one
//! process and the calls waiting on it, in its correlator:
//! `downstream/correlate.rs` sends what it sends where it belongs),
//! `routing.rs` (what that leaves: a `ping` answered, a request refused,
//! its start settled), `reader.rs` (its stdout read, by its reader thread
//! or a call's turn, and its stderr thread), `program.rs` (a server's children: start,
//! backoff, shared child, end), `link.rs` (a downstream session on one);
//! here, [`StdioConnector`] and `open`. What every server's children share
//! (the spawner thread, `max_processes`, the sweep) is `downstream/children.rs`.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::config::{Sharing, StdioConfig};
use crate::downstream::children::{Children, Holder};
use crate::downstream::{Connector, DownstreamError, Inbox, Opened, Opener, Processes, Readiness, Server};

mod child;
mod link;
mod program;
mod reader;
mod routing;
mod stdout;

use link::{StdioLink, VIEWS};
use program::Program;

/// A stdio server: the program it is. Its links and its children's
/// readers hold it, to count and stop what they end.
pub(crate) struct StdioConnector {
    program: Arc<Program>,
}

impl StdioConnector {
    pub(crate) fn new(name: &str, config: StdioConfig, children: Arc<Children>) -> StdioConnector {
        StdioConnector { program: Arc::new(Program::new(name, config, children)) }
    }
}

/// Its sessions are its children, which end with mcpgate: nothing is saved
/// to resume, and `saved_url` is none.
impl Connector for StdioConnector {
    fn kind(&self) -> &'static str {
        "stdio"
    }

    fn open(&self, server: &Arc<Server>, body: &[u8], opener: &Opener) -> Result<Opened, DownstreamError> {
        open(server, &self.program, body, opener)
    }

    /// A process starts when first needed, not at a session's `initialize`.
    fn opens_at_initialize(&self) -> bool {
        false
    }

    fn warm(
        &self,
        server: &Arc<Server>,
        principal: Option<[u8; 32]>,
        within: Duration,
        inbox: Option<Weak<dyn Inbox>>,
    ) -> Readiness {
        if self.program.config.sharing == Sharing::Session {
            // A session's own process starts when it opens its session.
            return Readiness::Ready;
        }
        let opener = Opener { principal, ..Opener::default() };
        match self.program.shared_child(server, &opener) {
            Ok(child) => child.ready_within(within, inbox),
            // Opening the session says why.
            Err(_) => Readiness::Ready,
        }
    }

    fn processes(&self) -> Option<Processes> {
        Some(self.program.processes())
    }

    fn retire(&self) {
        self.program.retire();
    }

    fn shutdown(&self) {
        self.program.shutdown();
    }

    fn stop_idle(&self, idle: Duration) {
        self.program.stop_idle(idle);
    }
}

/// Opens a session on a stdio server: a view of its user's shared child
/// (started unless it runs, and waited for within `start_timeout_secs`),
/// or a child of its own (`"sharing": "session"`), which gets the
/// client's `initialize`.
fn open(server: &Arc<Server>, program: &Arc<Program>, body: &[u8], opener: &Opener) -> Result<Opened, DownstreamError> {
    let shared = program.config.sharing != Sharing::Session;
    let view = VIEWS.fetch_add(1, Ordering::Relaxed);
    let (child, sent) = if shared {
        (program.shared_child(server, opener)?, None)
    } else {
        let holder =
            Holder::Session { id: opener.session.chars().take(8).collect(), client: opener.client.to_string() };
        let (child, sent) = program.spawn(server, holder, |child| link::send_initialize(child, view, server, body))?;
        (child, Some(sent))
    };
    child.views.fetch_add(1, Ordering::AcqRel);
    *child.used.lock() = Instant::now();
    let link = StdioLink { server: server.clone(), program: program.clone(), child: child.clone(), view, shared };
    let Some(sent) = sent else {
        let answer = match child.wait_started(Instant::now() + server.limits.start) {
            Some(Ok(answer)) => Ok(answer),
            Some(Err(why)) => Err(DownstreamError::Refused(why)),
            None => Err(DownstreamError::Refused(child.why_not_started(server.limits.start))),
        };
        return Ok((Box::new(link), answer));
    };
    let answer = sent.and_then(|sent| link.initialize(server, sent));
    Ok((Box::new(link), answer))
}
