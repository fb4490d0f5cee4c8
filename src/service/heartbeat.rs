//! The heartbeat of an instance whose sessions are in Redis (`store`):
//! every quarter of `store_lease_ms` it moves its heartbeat (and writes how
//! idle its sessions are), and sees its peers'. After a pause long enough
//! for a peer to take its sessions, it asks the store which it still holds
//! and lets go of the others. Twice per idle timeout it closes the sessions
//! nobody continued: those of dead instances, idle past the timeout.
//!
//! With `state_dir` there is no heartbeat: the kernel's locks say who is
//! alive, and `peers` closes what a dead instance left.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{Sender, bounded, select, tick};

use crate::downstream::{self, Downstream};
use crate::gateway::Gateway;
use crate::runtime::store::{Claim, Holder};
use crate::runtime::threads;
use crate::service::peers;
use crate::service::restore::{ended_at_server, server_for};
use crate::session;

/// DELETEs of orphaned sessions at once.
const CLOSE_PARALLEL: usize = 16;

pub struct Heartbeat {
    stop: Sender<()>,
    handle: JoinHandle<()>,
}

/// Starts the heartbeat, when the sessions are in Redis.
pub fn start(gateway: Arc<Gateway>) -> std::io::Result<Option<Heartbeat>> {
    let Some(redis) = gateway.store.redis.clone() else { return Ok(None) };
    let (stop, stopped) = bounded::<()>(0);
    let handle = threads::spawn("state", "heartbeat", move || {
        let ticks = tick(redis.beat_every());
        let sweep_every = peers::interval(gateway.current().config.session_idle_timeout);
        let mut swept = Instant::now();
        let mut losses = 0;
        let mut answered = beat(&gateway, &mut losses);
        loop {
            select! {
                recv(stopped) -> _ => return,
                recv(ticks) -> _ => {
                    let answers = beat(&gateway, &mut losses);
                    if answers && !answered {
                        reassert(&gateway);
                    }
                    answered = answers;
                    if swept.elapsed() >= sweep_every {
                        swept = Instant::now();
                        sweep(&gateway);
                    }
                }
            }
        }
    })?;
    Ok(Some(Heartbeat { stop, handle }))
}

impl Heartbeat {
    pub fn stop(self) {
        drop(self.stop);
        let _ = self.handle.join();
    }
}

/// The store answers again after it did not: the sessions held here that
/// it lost (a restart without its data) are written again.
fn reassert(gateway: &Gateway) {
    let Some(store) = &gateway.store.shared else { return };
    let held: Vec<_> = gateway.sessions.snapshot().iter().filter_map(|s| Some((s.saved(true)?, s.epoch()))).collect();
    match store.reassert(&held) {
        Ok(0) => log::info!("{} answers again; it still had the {} session(s) held here", store.name(), held.len()),
        Ok(n) => log::warn!(
            "{} answers again, without {n} of the {} session(s) held here: written again",
            store.name(),
            held.len()
        ),
        Err(e) => {
            gateway.stats.store_errors.inc();
            crate::limited!(warn, "{e}: the sessions held here are written again when it answers");
        }
    }
}

/// One heartbeat (whether the store answered); after a pause, the
/// sessions another instance took are let go.
fn beat(gateway: &Gateway, losses: &mut u64) -> bool {
    let Some(store) = &gateway.store.shared else { return false };
    let active: Vec<(String, u64)> =
        gateway.sessions.snapshot().iter().filter_map(|s| Some((s.id.clone(), s.last_active_unix()?))).collect();
    if let Err(e) = store.beat(&active) {
        gateway.stats.store_errors.inc();
        crate::limited!(warn, "{e}: the sessions held here go on; new ones are refused until it answers");
        return false;
    }
    let now = store.losses();
    if now == *losses {
        return true;
    }
    *losses = now;
    let mut kept = 0;
    for session in gateway.sessions.snapshot() {
        if session.checked_since(now) {
            continue;
        }
        match store.holds(&session.id, session.epoch()) {
            Ok(true) => {
                session.mark_checked(now);
                kept += 1;
            }
            Ok(false) => gateway.failover().let_go(&session.id),
            Err(e) => {
                gateway.stats.store_errors.inc();
                crate::limited!(warn, "{e}: a session held here goes on unchecked");
            }
        }
    }
    log::warn!("this instance was paused past its heartbeat: {kept} session(s) still held here, the rest let go");
    true
}

/// Closes the sessions of dead instances that nobody continued within the
/// idle timeout: each claimed first (so one instance closes it), then its
/// downstream sessions closed and its record ended.
fn sweep(gateway: &Gateway) {
    let Some(store) = &gateway.store.shared else { return };
    let idle = gateway.current().config.session_idle_timeout;
    let orphans = match store.orphans(idle) {
        Ok(orphans) => orphans,
        Err(e) => {
            gateway.stats.store_errors.inc();
            crate::limited!(warn, "{e}: the sessions of dead instances are closed when it answers");
            return;
        }
    };
    finish_dead_closes(gateway);
    let mut closed = 0;
    let mut list: Vec<Arc<Downstream>> = Vec::new();
    for (id, holder) in orphans {
        if close_orphan(gateway, &id, &holder, &mut list) {
            closed += 1;
        }
    }
    if closed > 0 {
        log::info!(
            "{closed} session(s) of instances that died were not continued within the idle timeout: closed here, with \
             their {} downstream session(s)",
            list.len()
        );
        downstream::close_all(&list, CLOSE_PARALLEL);
    }
}

/// Finishes the closes a dead instance had under way: each taken by one
/// live instance, its server asked first whether the `DELETE` was answered
/// before the death (as a restart does), then closed here.
fn finish_dead_closes(gateway: &Gateway) {
    let Some(store) = &gateway.store.shared else { return };
    let dead = match store.dead_closing() {
        Ok(dead) => dead,
        Err(e) => {
            gateway.stats.store_errors.inc();
            crate::limited!(warn, "{e}: what dead instances were closing is closed when it answers");
            return;
        }
    };
    let mut list = Vec::new();
    for (field, saved) in dead {
        if store.take_closing(&field).unwrap_or(false) {
            list.extend(server_for(gateway, &saved).saved_downstream(&saved));
        }
    }
    if list.is_empty() {
        return;
    }
    let ended = ended_at_server(&list);
    log::info!(
        "{} downstream session(s) a dead instance was closing: {ended} had already ended at their server, the rest \
         are closed here",
        list.len()
    );
    downstream::close_all(&list, CLOSE_PARALLEL);
}

fn close_orphan(gateway: &Gateway, id: &str, holder: &Holder, list: &mut Vec<Arc<Downstream>>) -> bool {
    let Some(store) = &gateway.store.shared else { return false };
    let mut taken = Vec::new();
    let claim = store.claim(id, holder, &mut |saved, _| {
        taken = saved
            .downstreams
            .iter()
            .filter(|d| !d.ends_with_process)
            .filter_map(|d| server_for(gateway, d).saved_downstream(d))
            .collect();
        true
    });
    match claim {
        Ok(Claim::Won { .. }) => {
            // Marked closing before it ends: a crash from here on leaves them to close.
            gateway.store.journal.closing(taken.iter().filter_map(|d| d.closing_record()));
            gateway.store.journal.ended(id);
            log::debug!("session {} of dead instance `{}` closed here", session::short(id), holder.instance);
            list.extend(taken);
            true
        }
        Ok(Claim::Held(_)) => {
            gateway.stats.claims_lost.inc();
            false
        }
        Ok(Claim::Gone) => false,
        Err(e) => {
            gateway.stats.store_errors.inc();
            crate::limited!(warn, "{e}: an orphaned session is closed later");
            false
        }
    }
}
