//! The `DELETE`s still owed to servers: a downstream session whose `DELETE`
//! a transient fault lost (no connection, no answer within
//! `delete_timeout_secs`, a 5xx or 429), or whose closing could not be
//! written to the state file yet (it is ended at its server only once a
//! crash can no longer bring it back, so that it is never closed twice).
//!
//! Each stays marked closing in the state file (a restart sends it too) and
//! is tried again by the reaper with backoff, 1 s doubling to 60 s, until
//! its server answers; after [`ATTEMPTS`] tries (about 6 minutes) it is
//! given up and its record leaves the file. At most [`MAX_OWED`] are kept;
//! past that the oldest is given up. Before, a lost `DELETE` was never
//! sent again: a server behind a fault proxy ended a soak holding 5
//! sessions mcpgate counted closed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::error::DownstreamError;
use crate::limited;
use crate::runtime::backoff::Backoff;
use crate::runtime::state::Journal;
use crate::runtime::threads;
use crate::stats::Stats;

/// Tries of one `DELETE` after the first, before it is given up.
const ATTEMPTS: u32 = 12;
/// `DELETE`s owed at once, at most.
const MAX_OWED: usize = 4096;
/// Tried again per reaper tick, at most, and this many at once.
const PER_TICK: usize = 64;
const PARALLEL: usize = 16;
/// The first wait before a try, doubled after each failed one up to a minute.
const BACKOFF: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));

/// The `DELETE`s owed, shared by every server (one per gateway).
#[derive(Default)]
pub(crate) struct Deletes {
    /// Guards the list, oldest first; taken only to add, or to take the ones due.
    owed: Mutex<Vec<Owed>>,
    /// A thread tries some again now.
    retrying: AtomicBool,
}

/// A downstream session whose `DELETE` is owed: what trying it again needs
/// of it (the downstream session itself, which the close path hands on).
pub(super) trait Owing: Send + Sync {
    /// Ends it at its server, as the close path did: its `DELETE`.
    fn end(&self) -> Result<(), DownstreamError>;
    /// Its server's name, for the log.
    fn server_name(&self) -> &str;
    /// `text` with its server's secrets replaced by `***`.
    fn redact(&self, text: &str) -> String;
    /// Where its closing is written ahead, and its end (the state file).
    fn journal(&self) -> &Journal;
}

struct Owed {
    d: Arc<dyn Owing>,
    /// Its key in the state file.
    key: usize,
    /// Its closing is on disk: it may be ended at its server.
    journaled: bool,
    /// Tries made so far.
    attempts: u32,
    /// Not tried again before then.
    due: Instant,
}

/// Whether a failed `DELETE` may succeed later: the server could not be
/// reached or did not answer in time, was overloaded, or mcpgate was short
/// of descriptors. A refusal (another 4xx) or a broken answer would be the
/// same again.
pub(super) fn worth_retrying(e: &DownstreamError) -> bool {
    match e {
        DownstreamError::Connect(_)
        | DownstreamError::ConnectTimeout(_)
        | DownstreamError::Timeout(_)
        | DownstreamError::DeleteTimeout(_)
        | DownstreamError::Exhausted(_) => true,
        DownstreamError::Status { status, .. } => *status >= 500 || *status == 429,
        _ => false,
    }
}

impl Deletes {
    /// Owes the `DELETE` of `d` (state file key `key`): tried again after
    /// the backoff; `journaled`: its closing is on disk already.
    pub(super) fn owe(&self, d: Arc<dyn Owing>, key: usize, journaled: bool, stats: &Stats) {
        let due = Instant::now() + if journaled { BACKOFF.first } else { Duration::ZERO };
        let dropped = {
            let mut owed = self.owed.lock();
            owed.push(Owed { d, key, journaled, attempts: 0, due });
            (owed.len() > MAX_OWED).then(|| owed.remove(0))
        };
        stats.downstream_deletes_owed.inc();
        if let Some(oldest) = dropped {
            give_up(oldest, stats, &format!("more than {MAX_OWED} are owed"));
        }
    }

    /// Tries again those whose backoff has passed (the reaper's job), on a
    /// thread of its own: the reaper never waits for a server. Each is tried
    /// once its closing is on disk, then its `DELETE` goes; those that fail
    /// wait longer, and after [`ATTEMPTS`] tries are given up. One such
    /// thread runs at a time.
    pub(crate) fn retry_due(self: &Arc<Self>, stats: &Arc<Stats>) {
        if self.retrying.swap(true, Ordering::AcqRel) {
            return;
        }
        let now = Instant::now();
        let due: Vec<Owed> = {
            let mut owed = self.owed.lock();
            let (mut due, mut later) = (Vec::new(), Vec::new());
            for one in owed.drain(..) {
                if one.due <= now && due.len() < PER_TICK { due.push(one) } else { later.push(one) }
            }
            *owed = later;
            due
        };
        if due.is_empty() {
            self.retrying.store(false, Ordering::Release);
            return;
        }
        // Shared, so that they come back to the list if no thread can take them.
        let batch = Arc::new(Mutex::new(due));
        let work = {
            let (deletes, stats, batch) = (self.clone(), stats.clone(), batch.clone());
            move || {
                let due = std::mem::take(&mut *batch.lock());
                let later: Mutex<Vec<Owed>> = Mutex::new(Vec::new());
                threads::for_each_parallel("close", &due, PARALLEL, |owed| {
                    if let Some(again) = try_once(owed, &stats) {
                        later.lock().push(again);
                    }
                });
                deletes.owed.lock().extend(later.into_inner());
                deletes.retrying.store(false, Ordering::Release);
            }
        };
        match threads::spawn("close", "deletes", work) {
            Ok(handle) => threads::join_later(handle),
            Err(_) => {
                let due = std::mem::take(&mut *batch.lock());
                self.owed.lock().extend(due);
                self.retrying.store(false, Ordering::Release);
            }
        }
    }
}

/// One try of an owed `DELETE`: what is still owed after it, if anything.
fn try_once(owed: &Owed, stats: &Stats) -> Option<Owed> {
    let d = &owed.d;
    let journal = d.journal();
    let again = |journaled: bool, attempts: u32| Owed {
        d: d.clone(),
        key: owed.key,
        journaled,
        attempts,
        due: Instant::now() + BACKOFF.delay(attempts),
    };
    if !owed.journaled && journal.commit().is_err() {
        // Still not on disk: ending it now could close it twice after a crash.
        return Some(again(false, owed.attempts));
    }
    stats.downstream_delete_retries.inc();
    match d.end() {
        Ok(()) => {
            stats.downstream_deletes_owed.dec();
            journal.closed(&[owed.key]);
            let _ = journal.commit();
            log::debug!("server `{}`: a DELETE owed since a fault reached it", d.server_name());
            None
        }
        Err(e) if worth_retrying(&e) && owed.attempts + 1 < ATTEMPTS => Some(again(true, owed.attempts + 1)),
        Err(e) => {
            give_up(again(true, owed.attempts + 1), stats, &d.redact(&e.to_string()));
            None
        }
    }
}

/// Gives up an owed `DELETE`: counted, logged, and its record leaves the
/// state file (the server keeps the session until it expires it).
fn give_up(owed: Owed, stats: &Stats, why: &str) {
    stats.downstream_deletes_owed.dec();
    stats.downstream_deletes_abandoned.inc();
    let d = &owed.d;
    limited!(
        warn,
        "server `{}`: a DELETE given up after {} tries ({why}); the server keeps that session until it expires it",
        d.server_name(),
        owed.attempts + 1
    );
    d.journal().closed(&[owed.key]);
    let _ = d.journal().commit();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owed_delete_is_tried_again_with_backoff_for_about_six_minutes() {
        let waits: Vec<Duration> = (0..ATTEMPTS).map(|n| BACKOFF.delay(n)).collect();
        assert_eq!(waits[0], Duration::from_secs(1));
        assert!(waits.windows(2).all(|w| w[0] <= w[1]), "{waits:?}");
        assert_eq!(*waits.last().unwrap(), Duration::from_secs(60));
        let total: Duration = waits[..ATTEMPTS as usize - 1].iter().sum();
        assert!(total > Duration::from_secs(300) && total < Duration::from_secs(600), "{total:?}");
    }

    #[test]
    fn only_faults_that_may_pass_are_tried_again() {
        assert!(worth_retrying(&DownstreamError::Connect("refused".into())));
        assert!(worth_retrying(&DownstreamError::DeleteTimeout(Duration::from_secs(2))));
        assert!(worth_retrying(&DownstreamError::Status { status: 503, detail: String::new() }));
        assert!(worth_retrying(&DownstreamError::Status { status: 429, detail: String::new() }));
        assert!(!worth_retrying(&DownstreamError::Status { status: 403, detail: String::new() }));
        assert!(!worth_retrying(&DownstreamError::Protocol("garbage".into())));
    }
}
