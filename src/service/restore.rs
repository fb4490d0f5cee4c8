//! A start with a state file: what it holds comes back before mcpgate
//! listens, without a word to any server (sessions are usable at once);
//! what is to be closed (sessions expired meanwhile, downstream sessions
//! that were closing, or named by a damaged file) is closed, and the
//! readers of the rest start, once it listens. A downstream session that
//! was closing may have had its `DELETE` answered just before the crash,
//! ahead of the record that it was: its server is asked first (a `ping`
//! on the session), and one it answers 404 for is not sent a second
//! `DELETE`. Before, 5 kills under load sent 0 to 8 second `DELETE`s per
//! run (39 in 10 runs, `tests/crash.rs`); now none.
//!
//! A downstream session of an HTTP+SSE server is never taken over: it was
//! the old process's stream, which the kernel closed with it, so there is
//! nothing to close either. A restored client session gets a new one.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use crate::downstream::{self, AfterRestart, Downstream, DownstreamError, Server};
use crate::gateway::Gateway;
use crate::runtime::state::{self, Loaded, SavedDownstream, SavedSession};
use crate::runtime::store::files;
use crate::runtime::threads;
use crate::session::Session;

/// Downstream sessions whose readers start (or DELETEs go) at once after a restart.
const RESTORE_PARALLEL: usize = 16;

/// What a restart found and left to do once mcpgate listens.
#[derive(Default)]
pub struct Restored {
    /// Downstream sessions taken over, whose `GET` stream readers must start.
    readers: Vec<(Arc<Session>, Arc<Downstream>)>,
    /// Downstream sessions that were closing: their `DELETE` may have been
    /// answered just before the crash, ahead of the record that it was.
    closing: Vec<Arc<Downstream>>,
    /// Downstream sessions to close: expired, moved, or named by a damaged file.
    close: Vec<Arc<Downstream>>,
    /// HTTP+SSE servers whose session a restored client session had: opened anew.
    reopen: Vec<(Arc<Session>, Arc<Server>)>,
}

/// Brings back what the state file holds, without a word to any server:
/// sessions are usable as soon as mcpgate listens. Sessions idle past the
/// timeout, and downstream sessions that were closing, are to be closed;
/// [`finish_restore`] does that, and starts the readers, after listening.
pub fn restore(gateway: &Gateway, loaded: Loaded) -> Restored {
    let (saved, trusted) = match loaded {
        Loaded::Absent | Loaded::Rejected => return Restored::default(),
        Loaded::Saved(saved) => (saved, true),
        Loaded::Damaged(saved) => (saved, false),
    };
    if saved.instance_id.is_some() && saved.instance_id != gateway.store.instance_id {
        log::warn!(
            "state file: written by instance `{}`, this is `{}`: its sessions keep their ids, which a balancer \
             routes by the instance they name",
            saved.instance_id.as_deref().unwrap_or_default(),
            gateway.store.instance_id.as_deref().unwrap_or("(none)")
        );
    }
    let current = gateway.current();
    // The saved activity may be one write interval old: a session is expired
    // only past that, so one in use at the crash is never closed at start.
    let idle_timeout = current.config.session_idle_timeout;
    let timeout = (idle_timeout + state::activity_every(idle_timeout)).as_secs();
    let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    // Idle time ends when mcpgate stopped (the file's last write): the time
    // it was down is not the client's, and must not take its session back.
    let stopped = saved.written.unwrap_or(now).min(now);
    let shift = now - stopped;
    let mut done = Restored::default();
    let to_close = |saved: &SavedDownstream| server_for(gateway, saved).saved_downstream(saved);
    // Ended with the old process: nothing to close, nothing to take over.
    let resumable = |saved: &&SavedDownstream| !saved.ends_with_process;
    done.closing.extend(saved.closing.iter().filter(resumable).filter_map(to_close));
    let (mut restored, mut expired, mut moved) = (0, 0, 0);
    let config = &current.config;
    for mut session in saved.sessions {
        // Claimed by a peer while this instance was down: the peer's now, to continue or close.
        if let (Some(dir), Some(me)) = (&config.state_dir, &gateway.store.instance_id)
            && files::moved_away(dir, me, &session.id)
        {
            moved += 1;
            continue;
        }
        if !trusted || stopped.saturating_sub(session.last_active) >= timeout {
            expired += 1;
            gateway.stats.sessions_expired_at_start.inc();
            done.close.extend(session.downstreams.iter().filter(resumable).filter_map(to_close));
            continue;
        }
        session.last_active = session.last_active.saturating_add(shift);
        let live = Session::restore(&session);
        live.hold_params();
        for saved in &session.downstreams {
            let server = current.server(&saved.server).filter(|s| s.config.url() == Some(saved.url.as_str()));
            match server {
                Some(server) if saved.ends_with_process => {
                    if server.after_restart() == AfterRestart::OpenedAnew {
                        done.reopen.push((live.clone(), server.clone()));
                    }
                }
                Some(server) if server.after_restart() == AfterRestart::Resumed => {
                    done.readers.extend(live.adopt(server, saved).map(|d| (live.clone(), d)));
                }
                // Ended with the old process, and its server removed or moved since.
                None if saved.ends_with_process => {}
                // Removed, moved, or of another transport since: closed where it was.
                _ => done.close.extend(to_close(saved)),
            }
        }
        if gateway.sessions.insert(live.clone(), current.config.max_sessions) {
            restored += 1;
            gateway.stats.sessions_restored.inc();
        } else {
            done.close.extend(live.take_downstreams());
            done.readers.retain(|(s, _)| !Arc::ptr_eq(s, &live));
            done.reopen.retain(|(s, _)| !Arc::ptr_eq(s, &live));
        }
    }
    // Closing before the first write of this process: none of it may fall out of the file.
    gateway.store.journal.closing(done.closing.iter().chain(&done.close).filter_map(|d| d.closing_record()));
    let to_close = done.closing.len() + done.close.len();
    if restored + expired + moved + to_close + done.reopen.len() > 0 {
        log::info!(
            "state file: {restored} session(s) restored, {expired} expired or not trusted, {moved} continued by a peer \
             meanwhile; {to_close} downstream session(s) to close ({} of them were closing), {} of HTTP+SSE servers to \
             open anew (they ended with the old process)",
            done.closing.len(),
            done.reopen.len()
        );
    }
    done
}

/// Starts the readers of restored downstream sessions and closes what is to
/// be closed, `RESTORE_PARALLEL` at a time, on a thread of its own while
/// mcpgate already serves. A server that does not answer delays only its
/// own sessions' notifications.
pub fn finish_restore(restored: Restored) -> std::io::Result<Option<JoinHandle<()>>> {
    if restored.readers.is_empty()
        && restored.closing.is_empty()
        && restored.close.is_empty()
        && restored.reopen.is_empty()
    {
        return Ok(None);
    }
    threads::spawn("state", "restore", move || {
        let Restored { readers, closing, mut close, reopen } = restored;
        threads::for_each_parallel("fanout", &readers, RESTORE_PARALLEL, |(session, d)| {
            session.start_reader(d);
        });
        threads::for_each_parallel("fanout", &reopen, RESTORE_PARALLEL, |(session, server)| {
            if let Err(e) = session.downstream(server, Duration::ZERO) {
                crate::limited!(
                    warn,
                    "server `{}`: opening a restored session anew failed: {}",
                    server.name(),
                    e.message
                );
            }
        });
        let ended = ended_at_server(&closing);
        if ended > 0 {
            log::info!(
                "state file: {ended} of {} downstream session(s) that were closing had already ended at their server \
                 (its DELETE was answered before the crash could record it): no DELETE is sent again",
                closing.len()
            );
        }
        close.extend(closing);
        downstream::close_all(&close, RESTORE_PARALLEL);
    })
    .map(Some)
}

/// Asks the server of each downstream session that was closing whether it
/// still has it, with a `ping` on the session: 404 says it ended it (the
/// `DELETE` was answered in the moment before the crash, ahead of the
/// record that it was), and the close path then sends no second one. Any
/// other answer, or none, leaves it to the `DELETE`. How many had ended.
pub(crate) fn ended_at_server(closing: &[Arc<Downstream>]) -> usize {
    let ended = std::sync::atomic::AtomicUsize::new(0);
    threads::for_each_parallel("fanout", closing, RESTORE_PARALLEL, |d| {
        if let Err(DownstreamError::SessionGone) = d.own_request("ping", None) {
            ended.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    ended.into_inner()
}

/// The configured server a saved downstream session belongs to, or, when
/// it was removed, moved or changed transport, one made up from what was saved to send its
/// `DELETE`: without the configured headers, which belong to the server
/// configured now (a bearer token for another host, say).
pub(crate) fn server_for(gateway: &Gateway, saved: &SavedDownstream) -> Arc<Server> {
    let current = gateway.current();
    // Only a server whose sessions are resumed (Streamable HTTP) reaches it:
    // an HTTP link on another transport has no endpoint to reach.
    let same =
        |s: &&Arc<Server>| s.config.url() == Some(saved.url.as_str()) && s.after_restart() == AfterRestart::Resumed;
    if let Some(server) = current.server(&saved.server).filter(same) {
        return server.clone();
    }
    Arc::new(Server::for_saved(saved, &current.config, &gateway.context()))
}

/// What the state file's writer reads of the gateway.
impl state::Source for Gateway {
    fn saved_sessions(&self) -> Vec<SavedSession> {
        self.sessions.snapshot().iter().filter_map(|s| s.saved(true)).collect()
    }

    fn last_active(&self) -> Vec<(String, u64)> {
        self.sessions.snapshot().iter().filter_map(|s| Some((s.id.clone(), s.last_active_unix()?))).collect()
    }

    fn idle_timeout(&self) -> Duration {
        self.current().config.session_idle_timeout
    }
}
