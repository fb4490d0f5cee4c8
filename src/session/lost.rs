//! A session's downstream sessions whose stream was lost: it answered 404
//! (the server forgot the session) or, HTTP+SSE, ended (it cannot be
//! resumed). The reaper reopens each once its backoff has passed; the
//! backoff grows with the server's streak of losses, as the reader's own
//! reconnects do. A reopen that failed (the server was down again: a crash
//! loop) is tried again the same way, for as long as the session lives:
//! before, it was left failed, and a client that only listens never heard
//! that server again.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::runtime::backoff::Backoff;

/// Losses of one server's stream closer than this apart count as a streak.
const LOST_STREAK: Duration = Duration::from_secs(60);
/// Reopens of a lost stream: 0.5 s, doubling, up to 30 s.
const REOPEN: Backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));

/// The lost downstream sessions of one session, the servers whose reopen
/// failed, and each server's streak.
#[derive(Default)]
pub(super) struct Lost {
    waiting: Vec<LostStream>,
    /// Servers to open again, each not before its time.
    failed: Vec<(String, Instant)>,
    /// Per server, how many times in a row its stream was lost, and when.
    streaks: HashMap<String, (u32, Instant)>,
}

struct LostStream {
    server: String,
    session_id: Option<String>,
    /// Reopened not before then.
    after: Instant,
}

impl Lost {
    /// The stream of `server`'s session `session_id` was lost at `now`.
    pub(super) fn record(&mut self, server: &str, session_id: Option<&str>, now: Instant) {
        let after = self.next_try(server, now);
        self.waiting.push(LostStream { server: server.to_string(), session_id: session_id.map(str::to_string), after });
    }

    /// Reopening `server`'s downstream session failed at `now`: tried
    /// again after the backoff, which the failure lengthens.
    pub(super) fn reopen_failed(&mut self, server: &str, now: Instant) {
        let after = self.next_try(server, now);
        self.failed.retain(|(s, _)| s != server);
        self.failed.push((server.to_string(), after));
    }

    /// When to try `server` again after a loss at `now`: its streak grows.
    fn next_try(&mut self, server: &str, now: Instant) -> Instant {
        let streak = self.streaks.entry(server.to_string()).or_insert((0, now));
        *streak = (lost_again(*streak, now), now);
        now + reopen_delay(streak.0)
    }

    /// The servers whose failed reopen is due at `now`, each handed out once.
    pub(super) fn take_failed(&mut self, now: Instant) -> Vec<String> {
        let (due, later): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.failed).into_iter().partition(|(_, at)| *at <= now);
        self.failed = later;
        due.into_iter().map(|(server, _)| server).collect()
    }

    /// Those whose backoff has passed at `now`, each handed out once: the
    /// server and the session id it forgot.
    pub(super) fn take_due(&mut self, now: Instant) -> Vec<(String, Option<String>)> {
        let (due, later): (Vec<LostStream>, Vec<LostStream>) =
            std::mem::take(&mut self.waiting).into_iter().partition(|lost| lost.after <= now);
        self.waiting = later;
        due.into_iter().map(|lost| (lost.server, lost.session_id)).collect()
    }
}

/// The streak after a loss at `now`, given the last one's count and time.
fn lost_again((count, at): (u32, Instant), now: Instant) -> u32 {
    if count > 0 && now.saturating_duration_since(at) < LOST_STREAK { count.saturating_add(1) } else { 1 }
}

/// How long the `n`th loss in a row waits before its session is reopened,
/// as the reader's own reconnects do: 0.5 s, doubling, up to 30 s.
fn reopen_delay(n: u32) -> Duration {
    REOPEN.delay(n.saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_stream_is_reopened_with_backoff_that_resets_after_a_quiet_minute() {
        let start = Instant::now();
        let mut streak = (0, start);
        let mut delays = Vec::new();
        for i in 0..10 {
            let now = start + Duration::from_secs(i);
            streak = (lost_again(streak, now), now);
            delays.push(reopen_delay(streak.0));
        }
        assert_eq!(delays[0], Duration::from_millis(500));
        assert_eq!(delays[1], Duration::from_secs(1));
        assert!(delays.windows(2).all(|w| w[0] <= w[1]), "{delays:?}");
        assert_eq!(*delays.last().unwrap(), Duration::from_secs(30));
        let quiet = streak.1 + LOST_STREAK + Duration::from_secs(1);
        assert_eq!(reopen_delay(lost_again(streak, quiet)), Duration::from_millis(500));
    }

    #[test]
    fn a_failed_reopen_is_tried_again_after_a_longer_backoff_once() {
        let start = Instant::now();
        let mut lost = Lost::default();
        lost.record("files", Some("abc"), start);
        lost.take_due(start + Duration::from_secs(1));
        lost.reopen_failed("files", start + Duration::from_secs(1));
        assert!(lost.take_failed(start + Duration::from_secs(1)).is_empty(), "not before its backoff");
        // The second loss in a row waits 1 s.
        assert_eq!(lost.take_failed(start + Duration::from_secs(2)), vec!["files".to_string()]);
        assert!(lost.take_failed(start + Duration::from_secs(60)).is_empty(), "handed out once");
    }

    #[test]
    fn a_lost_stream_is_handed_out_once_after_its_backoff() {
        let start = Instant::now();
        let mut lost = Lost::default();
        lost.record("files", Some("abc"), start);
        assert!(lost.take_due(start).is_empty(), "not before its backoff");
        let later = start + Duration::from_secs(1);
        assert_eq!(lost.take_due(later), vec![("files".to_string(), Some("abc".to_string()))]);
        assert!(lost.take_due(later).is_empty(), "handed out once");
    }
}
