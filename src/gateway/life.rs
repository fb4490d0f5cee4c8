//! The gateway's life and health: when it started, its reloads (one at a
//! time, the last one's outcome), its shutdown (requests cut short, retired
//! downstream sessions closed at once), the memory given back to the kernel
//! as sessions close, and when an `initialize` was last refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::{Mutex, MutexGuard};

/// What the last reload did, for the status page.
#[derive(Debug, Clone, Default)]
pub struct ReloadOutcome {
    pub(crate) at: Option<std::time::SystemTime>,
    pub(crate) error: Option<String>,
    pub(crate) changed: Vec<String>,
    pub(crate) restart_needed: Vec<String>,
}

/// The reload and shutdown state of the gateway.
pub(crate) struct Life {
    started: Instant,
    /// Guards the outcome of the last reload; `reloading` serializes reloads.
    last_reload: Mutex<ReloadOutcome>,
    reloading: Mutex<()>,
    /// Set at shutdown, once every session is closed: requests still waiting
    /// on a server are cut short, and say why.
    stopping: AtomicBool,
    /// Set at shutdown: downstream sessions a reload retired are closed now,
    /// without waiting for their calls.
    draining: Arc<AtomicBool>,
    /// Milliseconds since start at the last `release_memory`.
    trimmed_at: AtomicU64,
    /// Sessions closed since then: the reaper gives their memory back.
    trim_owed: AtomicBool,
    /// Guards when the last `initialize` was refused (a limit, the memory,
    /// the state file): the health says so while it is recent.
    session_refused_at: Mutex<Option<Instant>>,
}

impl Life {
    pub(super) fn new() -> Life {
        Life {
            started: Instant::now(),
            last_reload: Mutex::new(ReloadOutcome::default()),
            reloading: Mutex::new(()),
            stopping: AtomicBool::new(false),
            draining: Arc::new(AtomicBool::new(false)),
            trimmed_at: AtomicU64::new(0),
            trim_owed: AtomicBool::new(false),
            session_refused_at: Mutex::new(None),
        }
    }

    /// When the gateway started.
    pub(crate) fn started(&self) -> Instant {
        self.started
    }

    /// Held for the whole of a reload: reloads run one at a time.
    pub(super) fn one_reload_at_a_time(&self) -> MutexGuard<'_, ()> {
        self.reloading.lock()
    }

    /// What the last reload did.
    pub(crate) fn last_reload(&self) -> ReloadOutcome {
        self.last_reload.lock().clone()
    }

    /// Keeps what a reload did, for the status page.
    pub(super) fn reloaded(&self, outcome: &ReloadOutcome) {
        *self.last_reload.lock() = outcome.clone();
    }

    /// Says, after a reload, what failed besides it (the files of `tls`).
    #[cfg(feature = "tls")]
    pub(crate) fn reload_failed(&self, error: Option<String>) {
        self.last_reload.lock().error = error;
    }

    /// At shutdown: requests still waiting on a server are cut short, and
    /// downstream sessions a reload retired are closed without waiting.
    pub(super) fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        self.draining.store(true, Ordering::Release);
    }

    /// Whether the gateway is shutting down.
    pub(super) fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Set at shutdown: for the closes a reload leaves waiting on their calls.
    pub(super) fn draining(&self) -> Arc<AtomicBool> {
        self.draining.clone()
    }

    /// Gives freed memory back to the kernel after sessions close, at most
    /// every 100 ms: RSS then follows the sessions that are live. A close
    /// within 100 ms of the last trim leaves it owed to the reaper
    /// ([`Life::settle_memory`]), so the last of a burst is not missed.
    pub(super) fn release_memory(&self) {
        let now = self.started.elapsed().as_millis() as u64;
        let last = self.trimmed_at.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= 100
            && self.trimmed_at.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            self.trim_owed.store(false, Ordering::Relaxed);
            crate::runtime::sys::release_free_memory();
        } else {
            self.trim_owed.store(true, Ordering::Relaxed);
        }
    }

    /// Pays a trim a burst of closes left owed; the reaper calls it.
    pub(crate) fn settle_memory(&self) {
        if self.trim_owed.load(Ordering::Relaxed) {
            self.release_memory();
        }
    }

    /// An `initialize` was refused: its time is kept for the health.
    pub(super) fn session_refused(&self) {
        *self.session_refused_at.lock() = Some(Instant::now());
    }

    /// Seconds since an `initialize` was last refused; `None` if none was.
    pub(crate) fn secs_since_session_refused(&self) -> Option<u64> {
        self.session_refused_at.lock().map(|at| at.elapsed().as_secs())
    }
}
