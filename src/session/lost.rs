//! A session's downstream sessions whose stream was lost: it answered 404
//! (the server forgot the session) or, HTTP+SSE, ended (it cannot be
//! resumed). The reaper reopens each once its backoff has passed; the
//! backoff grows with the server's streak of losses, as the reader's own
//! reconnects do.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Losses of one server's stream closer than this apart count as a streak.
const LOST_STREAK: Duration = Duration::from_secs(60);

/// The lost downstream sessions of one session, and each server's streak.
#[derive(Default)]
pub(super) struct Lost {
    waiting: Vec<LostStream>,
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
        let streak = self.streaks.entry(server.to_string()).or_insert((0, now));
        *streak = (lost_again(*streak, now), now);
        let after = now + reopen_delay(streak.0);
        self.waiting.push(LostStream { server: server.to_string(), session_id: session_id.map(str::to_string), after });
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
    let half_seconds = 1u64 << n.saturating_sub(1).min(6);
    Duration::from_millis(500 * half_seconds).min(Duration::from_secs(30))
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
