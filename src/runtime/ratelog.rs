//! Rate limits for log lines that an attacker or a broken peer can repeat
//! at will (a refused connection, a dropped message, a failing disk): one
//! line per interval per call site, saying how many were suppressed. A log
//! must not become the way to fill a disk (3.4 million lines in 20 s, before
//! this existed).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// One call site's limit; a `static` beside the log line it guards.
pub(crate) struct RateLimit {
    every_ms: u64,
    /// Milliseconds since the epoch, plus one, of the last line written (0: never).
    last: AtomicU64,
    suppressed: AtomicU64,
}

impl RateLimit {
    pub(crate) const fn new(every: Duration) -> RateLimit {
        RateLimit { every_ms: every.as_millis() as u64, last: AtomicU64::new(0), suppressed: AtomicU64::new(0) }
    }

    /// Whether a line may be written now: `Some(n)` with the number of
    /// lines suppressed since the last one, `None` to stay quiet.
    pub(crate) fn allow(&self) -> Option<u64> {
        let now = epoch().elapsed().as_millis() as u64 + 1;
        let last = self.last.load(Ordering::Relaxed);
        if last != 0 && now.saturating_sub(last) < self.every_ms {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        if self.last.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_err() {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(self.suppressed.swap(0, Ordering::Relaxed))
    }
}

/// `" (and 12 more like it in the last 10 s)"`, or nothing.
pub(crate) fn more(suppressed: u64, every: &RateLimit) -> String {
    if suppressed == 0 {
        String::new()
    } else {
        format!(" ({suppressed} more like it since the last such line, at most one per {} s)", every.every_ms / 1000)
    }
}

/// Logs at `level`, at most once per 10 s from this call site, saying how
/// many lines were suppressed: `limited!(warn, "server `{name}`: ...")`.
#[macro_export]
macro_rules! limited {
    ($level:ident, $($arg:tt)+) => {{
        static LIMIT: $crate::runtime::ratelog::RateLimit = $crate::runtime::ratelog::RateLimit::new(std::time::Duration::from_secs(10));
        if let Some(suppressed) = LIMIT.allow() {
            log::$level!("{}{}", format_args!($($arg)+), $crate::runtime::ratelog::more(suppressed, &LIMIT));
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_and_the_rest_are_counted() {
        let limit = RateLimit::new(Duration::from_millis(200));
        assert_eq!(limit.allow(), Some(0));
        for _ in 0..1000 {
            assert_eq!(limit.allow(), None);
        }
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(limit.allow(), Some(1000));
        assert_eq!(limit.allow(), None);
    }
}
