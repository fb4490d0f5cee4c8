//! The reaper: one thread that closes idle sessions through the one close
//! path, ends requests to servers silent past the request timeout, sends
//! again the `DELETE`s a fault lost, stops shared stdio processes nobody
//! uses, closes idle connections to servers, drops expired sign-ins, frees
//! the buffers kept for large answers once none is taken, and joins
//! threads that outlived their owner's wait.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Sender, bounded, select, tick};

use crate::gateway::Gateway;
use crate::gateway::stateless::Stateless;
use crate::runtime::threads;
use crate::session::CloseReason;

pub struct Reaper {
    stop: Sender<()>,
    handle: JoinHandle<()>,
}

/// How often the reaper ends requests whose server went silent past the
/// request timeout: what they may overrun it by.
const DEADLINE_EVERY: Duration = Duration::from_millis(250);

/// How often the reaper looks: a tenth of the idle timeout, from 100 ms to 5 s.
pub(crate) fn interval(idle_timeout: Duration) -> Duration {
    (idle_timeout / 10).clamp(Duration::from_millis(100), Duration::from_secs(5))
}

pub fn start(gateway: Arc<Gateway>, stateless: Arc<Stateless>) -> std::io::Result<Reaper> {
    let (stop, stopped) = bounded::<()>(0);
    let handle = threads::spawn("reaper", "", move || {
        let _live = gateway.stats.threads_reaper.enter();
        let ticks = {
            let config = &gateway.current().config;
            tick(interval(config.session_idle_timeout.min(config.unused_session_idle)))
        };
        let deadlines = tick(DEADLINE_EVERY);
        loop {
            select! {
                recv(stopped) -> _ => return,
                recv(deadlines) -> _ => {
                    let current = gateway.current();
                    for server in &current.servers {
                        server.lanes.expire(current.config.request_timeout);
                    }
                    gateway.life.settle_memory();
                    stateless.expire_holds();
                    crate::runtime::recycle::trim();
                }
                recv(ticks) -> _ => {
                    // Read each time: a reload may change them.
                    let config = &gateway.current().config;
                    let idle = gateway.sessions.take_idle(config.session_idle_timeout, config.unused_session_idle);
                    if !idle.is_empty() {
                        log::debug!("{} idle session(s) evicted", idle.len());
                        gateway.close(idle, CloseReason::Idle);
                    }
                    reopen_lost(&gateway);
                    gateway.downstreams.deletes.retry_due(&gateway.stats);
                    gateway.offered.lists.prune_all(&gateway.current(), &gateway.life);
                    gateway.downstreams.oauth.expire();
                    let current = gateway.current();
                    for server in &current.servers {
                        server.stop_idle(current.config.shared_idle);
                        server.probe_if_silent();
                    }
                    gateway.start_eager(None);
                    gateway.downstreams.children.reap_left_behind();
                    threads::join_late();
                }
            }
        }
    })?;
    Ok(Reaper { stop, handle })
}

/// Reopens downstream sessions whose server forgot them (its stream
/// answered 404), or whose HTTP+SSE stream ended, so that a client that
/// only listens gets that server's notifications again without sending
/// anything; and tries again, with backoff, those whose reopen failed.
fn reopen_lost(gateway: &Gateway) {
    let current = gateway.current();
    let mut lost = Vec::new();
    for session in gateway.sessions.snapshot() {
        for old in session.take_lost() {
            if let Some(server) = current.server(old.server.name()).filter(|s| Arc::ptr_eq(s, &old.server)) {
                lost.push((session.clone(), server.clone(), Some(old)));
            }
        }
        for name in session.take_failed_reopens() {
            if let Some(server) = current.server(&name) {
                lost.push((session.clone(), server.clone(), None));
            }
        }
    }
    threads::for_each_parallel("fanout", &lost, 8, |(session, server, old)| {
        let reopened = match old {
            Some(old) => session.reopen(server, old),
            None => session.retry_reopen(server),
        };
        if let Err(e) = reopened {
            crate::limited!(
                warn,
                "server `{}`: reopening a forgotten downstream session failed: {}; tried again later",
                server.name(),
                e.message
            );
        }
    });
}

impl Reaper {
    pub fn stop(self) {
        drop(self.stop);
        let _ = self.handle.join();
    }
}
