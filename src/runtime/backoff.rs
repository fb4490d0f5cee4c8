//! The one backoff of every retry loop: a first wait, doubled after each
//! failure in a row, up to a cap. Each loop keeps its own numbers and its
//! own rule for when a streak ends: [`Backoff::delay`] for a loop that
//! counts its failures itself, [`Steps`] for one that only asks for the
//! next wait, optionally jittered.

use std::time::{Duration, Instant};

/// `first`, doubled after each failure in a row, up to `cap`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Backoff {
    pub(crate) first: Duration,
    pub(crate) cap: Duration,
}

impl Backoff {
    pub(crate) const fn new(first: Duration, cap: Duration) -> Backoff {
        Backoff { first, cap }
    }

    /// The wait after `failures` failures in a row beyond the first:
    /// `first` for 0, twice as long for each more, never above `cap`.
    pub(crate) fn delay(self, failures: u32) -> Duration {
        self.first.saturating_mul(2u32.saturating_pow(failures)).min(self.cap)
    }

    /// The waits of one streak, starting at `first`.
    pub(crate) fn steps(self) -> Steps {
        Steps { backoff: self, failures: 0, seed: None }
    }
}

/// The waits of one streak under a [`Backoff`], each asked for in turn.
pub(crate) struct Steps {
    backoff: Backoff,
    failures: u32,
    /// With jitter: the xorshift64 state that draws it.
    seed: Option<u64>,
}

impl Steps {
    /// Each wait drawn between half and all of its step: enough randomness
    /// to keep the loops of many sessions from retrying in step.
    pub(crate) fn jittered(self) -> Steps {
        use std::hash::{BuildHasher, RandomState};
        Steps { seed: Some(RandomState::new().hash_one(Instant::now()) | 1), ..self }
    }

    /// The next wait; the one after it is twice as long, up to the cap.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let step = self.backoff.delay(self.failures);
        self.failures = self.failures.saturating_add(1);
        let Some(seed) = self.seed.as_mut() else { return step };
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        let half = step / 2;
        half + Duration::from_nanos(*seed % (half.as_nanos() as u64 + 1))
    }

    /// The streak ended: the next wait is the first again.
    pub(crate) fn reset(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));

    #[test]
    fn a_backoff_doubles_from_its_first_wait_to_its_cap_and_never_overflows() {
        let waits: Vec<u64> = (0..8).map(|n| B.delay(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(B.delay(u32::MAX), B.cap);
    }

    #[test]
    fn steps_follow_the_backoff_and_start_again_after_a_reset() {
        let mut steps = B.steps();
        let waits: Vec<Duration> = (0..10).map(|_| steps.next_delay()).collect();
        assert_eq!(waits, (0..10).map(|n| B.delay(n)).collect::<Vec<_>>());
        steps.reset();
        assert_eq!(steps.next_delay(), B.first);
        assert_eq!(steps.next_delay(), B.first * 2);
    }

    #[test]
    fn jittered_steps_wait_between_half_and_all_of_each_step() {
        let mut steps = B.steps().jittered();
        let waits: Vec<Duration> = (0..12).map(|_| steps.next_delay()).collect();
        for (n, wait) in waits.iter().enumerate() {
            let step = B.delay(n as u32);
            assert!(*wait >= step / 2 && *wait <= step, "{n}: {wait:?} of {step:?}");
        }
        assert_ne!(waits, (0..12).map(|n| B.delay(n)).collect::<Vec<_>>(), "jittered");
    }
}
