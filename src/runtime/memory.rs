//! The bytes of messages mcpgate holds, counted against `max_memory_mb`:
//! request bodies, events queued for clients and kept for their replay,
//! events still arriving from servers, and servers' answers from their
//! first byte read until the last part of them is dropped (a slow client's
//! write included: `protocol/jsonrpc.rs`'s `Body`). Each holding is a [`Charge`],
//! given back when it is dropped, so the count cannot drift.
//!
//! One budget for the process, as the allocator is one: a charge that would
//! pass the limit is refused, and the party that wanted it (a client too
//! slow for its stream, a server sending an event too large) is cut off
//! with a clear error. Each session may hold its [`share`] of the budget at
//! most, so one slow client cannot take the room of the others.
//!
//! Counted too: what a call of a 2026-07-28 client to a session-era server
//! holds until its thread is joined: that thread's stack, the copy of the
//! request it sends, and what its server sends while the call waits for
//! its client's retry, which outlives the request that started the call
//! (see `gateway/stateless/holds.rs`).
//! Not counted: the other thread stacks and socket buffers, which
//! `max_connections` and `max_sessions` bound (see the status page's thread
//! budget).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// A session's share is never less than this: one ordinary large message.
pub(crate) const MIN_SHARE: usize = 1 << 20;

struct Budget {
    limit: AtomicUsize,
    used: AtomicUsize,
    refused: AtomicU64,
    /// Unix time of the last refusal, in seconds; 0 before any.
    last_refused: AtomicU64,
    sessions: AtomicUsize,
}

static BUDGET: Budget = Budget {
    limit: AtomicUsize::new(usize::MAX),
    used: AtomicUsize::new(0),
    refused: AtomicU64::new(0),
    last_refused: AtomicU64::new(0),
    sessions: AtomicUsize::new(0),
};

/// Sets the limit (from `max_memory_mb`, at start and on reload).
pub(crate) fn set_limit(bytes: usize) {
    BUDGET.limit.store(bytes, Ordering::Relaxed);
}

pub(crate) fn limit() -> usize {
    BUDGET.limit.load(Ordering::Relaxed)
}

/// Bytes held now.
pub(crate) fn used() -> usize {
    BUDGET.used.load(Ordering::Relaxed)
}

/// Charges refused so far.
pub(crate) fn refused() -> u64 {
    BUDGET.refused.load(Ordering::Relaxed)
}

/// Seconds since the last charge was refused; `None` before any.
pub(crate) fn secs_since_refused() -> Option<u64> {
    match BUDGET.last_refused.load(Ordering::Relaxed) {
        0 => None,
        at => Some(super::clock::unix_now().saturating_sub(at)),
    }
}

/// How many client sessions share the budget now.
pub(crate) fn set_sessions(live: usize) {
    BUDGET.sessions.store(live, Ordering::Relaxed);
}

/// What one session (or one server's event being read) may hold: half the
/// limit divided by the live sessions, and at least [`MIN_SHARE`]. The
/// other half is room for what is in flight: events arriving from servers
/// and bodies being read, which must not wait for slow clients.
pub(crate) fn share() -> usize {
    (limit() / 2 / BUDGET.sessions.load(Ordering::Relaxed).max(1)).max(MIN_SHARE)
}

/// Bytes held against the budget; given back when dropped.
#[derive(Debug)]
pub struct Charge {
    bytes: usize,
}

impl Charge {
    /// Charges `bytes`, or `None` when that would pass the limit.
    pub(crate) fn new(bytes: usize) -> Option<Charge> {
        let mut charge = Charge { bytes: 0 };
        charge.grow(bytes).then_some(charge)
    }

    /// A charge of nothing, to grow.
    pub(crate) fn empty() -> Charge {
        Charge { bytes: 0 }
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Charges `more` bytes; false (and nothing charged) past the limit.
    pub(crate) fn grow(&mut self, more: usize) -> bool {
        if self.grow_ahead(more) {
            return true;
        }
        BUDGET.refused.fetch_add(1, Ordering::Relaxed);
        BUDGET.last_refused.store(super::clock::unix_now(), Ordering::Relaxed);
        false
    }

    /// [`Charge::grow`] for memory taken ahead of need, which can go
    /// without: a refusal is not counted as one on the status page.
    pub(crate) fn grow_ahead(&mut self, more: usize) -> bool {
        let taken = BUDGET.used.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
            used.checked_add(more).filter(|&total| total <= limit())
        });
        self.bytes += if taken.is_ok() { more } else { 0 };
        taken.is_ok()
    }

    /// Gives back what is above `bytes`.
    pub(crate) fn shrink_to(&mut self, bytes: usize) {
        if bytes < self.bytes {
            BUDGET.used.fetch_sub(self.bytes - bytes, Ordering::Relaxed);
            self.bytes = bytes;
        }
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.shrink_to(0);
    }
}

/// A charge counted also in a tally of its own: what one session, or one
/// part of mcpgate, holds. Given back to both when dropped.
#[derive(Debug)]
pub(crate) struct Tallied {
    charge: Charge,
    tally: Arc<AtomicUsize>,
}

impl Tallied {
    /// Charges `bytes` to the budget and to `tally`, or `None` when that
    /// would pass the limit.
    pub(crate) fn new(bytes: usize, tally: &Arc<AtomicUsize>) -> Option<Tallied> {
        let charge = Charge::new(bytes)?;
        tally.fetch_add(bytes, Ordering::Relaxed);
        Some(Tallied { charge, tally: tally.clone() })
    }
}

impl Drop for Tallied {
    fn drop(&mut self) {
        self.tally.fetch_sub(self.charge.bytes(), Ordering::Relaxed);
    }
}

/// Bytes held for a client (an SSE event): in its stream's queue and in its
/// session's replay log at once, sharing one allocation. Counted against
/// the budget and the session's tally until the last holder drops it.
#[derive(Debug)]
pub(crate) struct Held {
    bytes: Vec<u8>,
    _charge: Tallied,
}

/// An event as it is queued and kept.
pub(crate) type Event = Arc<Held>;

impl Held {
    /// Holds `bytes` for a session, or gives them back when the budget is spent.
    pub(crate) fn new(bytes: Vec<u8>, tally: &Arc<AtomicUsize>) -> Result<Event, Vec<u8>> {
        let Some(charge) = Tallied::new(bytes.len(), tally) else { return Err(bytes) };
        Ok(Arc::new(Held { bytes, _charge: charge }))
    }
}

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl std::ops::Deref for Held {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

/// Taken by the unit tests that charge the budget: it is one per process,
/// and one of them sets a limit of a few bytes.
#[cfg(test)]
pub(crate) static TEST_BUDGET: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_stop_at_the_limit_and_come_back_when_dropped() {
        let _alone = TEST_BUDGET.lock();
        set_limit(used() + 1000);
        let base = used();
        let a = Charge::new(600).expect("within the limit");
        assert!(Charge::new(500).is_none(), "past the limit");
        let mut b = Charge::empty();
        assert!(b.grow(400));
        assert!(!b.grow(1));
        assert_eq!(used(), base + 1000);
        b.shrink_to(100);
        assert_eq!(used(), base + 700);
        drop(a);
        drop(b);
        assert_eq!(used(), base);

        let tally = Arc::new(AtomicUsize::new(0));
        let event = Held::new(vec![b'x'; 300], &tally).unwrap();
        let kept = event.clone();
        assert_eq!((tally.load(Ordering::Relaxed), used()), (300, base + 300));
        drop(event);
        assert_eq!(tally.load(Ordering::Relaxed), 300, "still held by the other holder");
        drop(kept);
        assert_eq!((tally.load(Ordering::Relaxed), used()), (0, base));
        assert!(Held::new(vec![0; 2000], &tally).is_err());

        set_sessions(4);
        set_limit(64 << 20);
        assert_eq!(share(), 8 << 20);
        set_sessions(1000);
        assert_eq!(share(), MIN_SHARE);
        set_limit(usize::MAX);
        set_sessions(0);
    }
}
