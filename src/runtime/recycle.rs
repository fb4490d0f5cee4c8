//! Buffers for servers' large answers, used again: an answer of 16 KiB or
//! more (chunked, or with a Content-Length) is read into a buffer an
//! earlier answer gave back, where its bytes land as they come, with no
//! copy from a read buffer, no regrowth and no pages faulted in anew
//! (issue 43: at 1 MB answers those copies were 14 % of mcpgate's CPU). A
//! buffer comes back when the message read into it is dropped
//! (`protocol/jsonrpc.rs`).
//!
//! Kept: at most [`MAX_KEPT`] buffers of [`MIN_BYTES`] to [`MAX_BYTES`]
//! each, no more than an eighth of `max_memory_mb` in all, each charged
//! to the budget while it is kept. When none was taken for [`KEEP_IDLE`],
//! all are freed (by the reaper, [`trim`]), so a burst of large answers
//! does not hold its memory once it is over.
//!
//! A kept buffer's length is how far it is initialized: read into as it
//! is, it is zeroed only where it grows.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::memory::{self, Charge};

/// Smaller buffers cost less to allocate than to keep.
pub(crate) const MIN_BYTES: usize = 16 * 1024;
/// Larger ones are freed: a rare giant answer is not held on to.
pub(crate) const MAX_BYTES: usize = 4 << 20;
/// At most this many kept at once.
pub(crate) const MAX_KEPT: usize = 64;
/// Kept buffers are freed once none was taken for this long.
pub(crate) const KEEP_IDLE: Duration = Duration::from_secs(2);

struct Kept {
    buffer: Vec<u8>,
    charge: Charge,
}

/// The kept buffers: one for the process ([`pool`], [`give`], [`trim`]).
pub(crate) struct Pool {
    inner: Mutex<Inner>,
}

struct Inner {
    kept: Vec<Kept>,
    /// Bytes kept (their capacities), at most an eighth of the budget.
    bytes: usize,
    /// When a buffer was last taken.
    taken: Option<Instant>,
}

static POOL: Pool = Pool::new();

/// The process's pool.
pub(crate) fn pool() -> &'static Pool {
    &POOL
}

/// [`Pool::give`] to the process's pool.
pub(crate) fn give(buffer: Vec<u8>, charge: Charge) {
    POOL.give(buffer, charge)
}

/// [`Pool::trim`] of the process's pool, now.
pub(crate) fn trim() -> usize {
    POOL.trim(Instant::now())
}

/// [`Pool::kept`] of the process's pool.
pub(crate) fn kept() -> (usize, usize) {
    POOL.kept()
}

impl Pool {
    pub(crate) const fn new() -> Pool {
        Pool { inner: Mutex::new(Inner { kept: Vec::new(), bytes: 0, taken: None }) }
    }

    /// A kept buffer and its charge (of its capacity), the most recently
    /// given back first; its length is how far it may be read into without
    /// zeroing. `None` when none is kept.
    pub(crate) fn take(&self) -> Option<(Vec<u8>, Charge)> {
        let mut pool = self.inner.lock();
        let kept = pool.kept.pop()?;
        pool.bytes -= kept.buffer.capacity();
        pool.taken = Some(Instant::now());
        Some((kept.buffer, kept.charge))
    }

    /// Keeps `buffer` for the next large answer, or frees it: outside the
    /// sizes kept, past the pool's bounds, or when the budget has no room.
    /// `charge`, what the buffer was charged while in use, becomes the
    /// charge of its capacity while kept, or ends with it.
    pub(crate) fn give(&self, buffer: Vec<u8>, mut charge: Charge) {
        let bytes = buffer.capacity();
        if !(MIN_BYTES..=MAX_BYTES).contains(&bytes) || buffer.is_empty() {
            return;
        }
        // A buffer not kept is freed, and its charge given back, after the
        // guard is dropped (a local, it goes before the arguments).
        let mut pool = self.inner.lock();
        if pool.kept.len() >= MAX_KEPT || pool.bytes + bytes > memory::limit() / 8 {
            return;
        }
        charge.shrink_to(bytes);
        if charge.grow_ahead(bytes - charge.bytes()) {
            pool.bytes += bytes;
            pool.kept.push(Kept { buffer, charge });
        }
    }

    /// Frees every kept buffer when none was taken for [`KEEP_IDLE`]
    /// before `now` (the reaper's, 4 times a second); returns how many
    /// were freed.
    pub(crate) fn trim(&self, now: Instant) -> usize {
        let freed = {
            let mut pool = self.inner.lock();
            if pool.taken.is_some_and(|at| now.saturating_duration_since(at) < KEEP_IDLE) {
                return 0;
            }
            pool.bytes = 0;
            std::mem::take(&mut pool.kept)
        };
        // Freed outside the lock.
        freed.len()
    }

    /// Buffers kept now and their bytes, for the status page and the tests.
    pub(crate) fn kept(&self) -> (usize, usize) {
        let pool = self.inner.lock();
        (pool.kept.len(), pool.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_given_back_is_taken_again_charged_and_freed_when_unused() {
        let _budget = memory::TEST_BUDGET.lock();
        let pool = Pool::new();
        let used = memory::used();
        let mut buffer = vec![7u8; 100_000];
        buffer.truncate(90_000);
        let capacity = buffer.capacity();
        pool.give(buffer, Charge::empty());
        assert_eq!(pool.kept(), (1, capacity));
        assert_eq!(memory::used(), used + capacity, "a kept buffer is charged");
        let (buffer, charge) = pool.take().expect("the buffer given back");
        assert_eq!((buffer.len(), buffer.capacity(), charge.bytes()), (90_000, capacity, capacity));
        assert_eq!(pool.kept(), (0, 0));
        assert!(pool.take().is_none());
        drop(charge);
        pool.give(buffer, Charge::empty());
        let now = Instant::now();
        assert_eq!(pool.trim(now), 0, "taken just now: kept");
        assert_eq!(pool.trim(now + KEEP_IDLE / 2), 0, "taken within KEEP_IDLE: kept");
        assert_eq!(pool.trim(now + KEEP_IDLE), 1, "not taken for KEEP_IDLE: freed");
        assert_eq!((pool.kept(), memory::used()), ((0, 0), used), "freed and its charge given back");
    }

    /// A buffer comes back with what it was charged while in use: kept, the
    /// charge becomes its capacity's; not kept, the charge ends with it.
    #[test]
    fn a_buffer_given_with_its_charge_is_charged_once() {
        let _budget = memory::TEST_BUDGET.lock();
        const GIB: usize = 1 << 30;
        let pool = Pool::new();
        let before = memory::used();
        let buffer = vec![7u8; 100_000];
        let capacity = buffer.capacity();
        pool.give(buffer, Charge::new(GIB).expect("room"));
        assert_eq!(pool.kept(), (1, capacity));
        assert!(memory::used().abs_diff(before + capacity) < GIB / 4, "charged as its capacity, once");
        let mut small = Charge::empty();
        assert!(small.grow(10));
        pool.give(vec![7u8; 50_000], small);
        assert_eq!(pool.kept().0, 2, "a charge short of the capacity is grown to it");
        pool.give(vec![7u8; MIN_BYTES - 1], Charge::new(GIB).expect("room"));
        assert_eq!(pool.kept().0, 2, "too small to keep");
        assert!(memory::used().abs_diff(before) < GIB / 4, "its charge ended with it");
        assert_eq!(pool.trim(Instant::now()), 2, "never taken: freed");
        assert!(memory::used().abs_diff(before) < GIB / 4);
    }

    #[test]
    fn small_empty_and_giant_buffers_are_not_kept_nor_more_than_the_bounds() {
        let _budget = memory::TEST_BUDGET.lock();
        let pool = Pool::new();
        pool.give(vec![1u8; MIN_BYTES - 1], Charge::empty());
        pool.give(Vec::with_capacity(MIN_BYTES), Charge::empty());
        pool.give(vec![1u8; MAX_BYTES + 1], Charge::empty());
        assert_eq!(pool.kept().0, 0);
        for _ in 0..MAX_KEPT + 5 {
            pool.give(vec![1u8; MIN_BYTES], Charge::empty());
        }
        assert_eq!(pool.kept(), (MAX_KEPT, MAX_KEPT * MIN_BYTES));
        let pool = Pool::new();
        // An eighth of the budget at most (other tests may hold some of it).
        let limit = memory::limit();
        memory::set_limit(memory::used() + 8 * 3 * MIN_BYTES);
        let room = memory::limit() / 8;
        for _ in 0..24 {
            pool.give(vec![1u8; MIN_BYTES], Charge::empty());
        }
        let kept = pool.kept();
        memory::set_limit(limit);
        assert!(kept.0 >= 3 && kept.1 <= room, "{kept:?} kept, room {room}");
    }
}
