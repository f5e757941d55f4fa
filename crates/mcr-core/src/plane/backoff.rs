//! How long a worker that died waits before it starts again: 100 ms, then
//! twice as long each time it dies young, up to 5 s; a worker that ran
//! for a second or more was killed or crashed rather than failing as it
//! starts, and starts again after 100 ms. (Its rings hold what arrives
//! meanwhile, 32 MiB each by default: seconds of a busy input, so the
//! delay must stay short for a worker that is not in a crash loop.)

use std::time::Duration;

/// The first restart delay.
pub const MIN: Duration = Duration::from_millis(100);
/// The longest.
pub const MAX: Duration = Duration::from_secs(5);
/// A worker that ran this long before dying starts from [`MIN`].
pub const STABLE: Duration = Duration::from_secs(1);

/// One worker's restart delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { next: MIN }
    }
}

impl Backoff {
    /// The worker died after running for `ran`: how long to wait before
    /// starting it again.
    pub fn after_death(&mut self, ran: Duration) -> Duration {
        if ran >= STABLE {
            self.next = MIN;
        }
        let delay = self.next;
        self.next = (self.next * 2).min(MAX);
        delay
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_while_the_worker_dies_young_and_starts_over_once_it_ran() {
        let mut b = Backoff::default();
        let young = Duration::from_millis(10);
        let delays: Vec<u64> = (0..8).map(|_| b.after_death(young).as_millis() as u64).collect();
        assert_eq!(delays, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        assert_eq!(b.after_death(STABLE), MIN);
        assert_eq!(b.after_death(young), MIN * 2);
    }
}
