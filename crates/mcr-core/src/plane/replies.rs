//! Changes waiting for their answer: `mcrctl add`, `remove` and `reload`
//! are answered once every live worker runs the table version that holds
//! the change (so a client that sends next finds it forwarding), or when
//! the wait is over, saying the workers had not applied it yet. Each is
//! answered exactly once.

use std::time::{Duration, Instant};

/// The lowest table version every live worker runs (`live_applied`: the
/// version each has applied); `version`, the current one, when none is
/// live (nobody is left to wait for).
pub fn acked(live_applied: impl IntoIterator<Item = u64>, version: u64) -> u64 {
    live_applied.into_iter().min().unwrap_or(version)
}

struct Item<T> {
    version: u64,
    deadline: Instant,
    reply: T,
}

/// Replies (of any type `T`: what to say, and to whom) waiting for a
/// table version.
pub struct Waiting<T> {
    items: Vec<Item<T>>,
    wait: Duration,
}

impl<T> std::fmt::Debug for Waiting<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiting")
            .field("items", &self.items.len())
            .field("wait", &self.wait)
            .finish()
    }
}

/// A reply that can be given now.
#[derive(Debug, PartialEq, Eq)]
pub struct Due<T> {
    /// What was waiting.
    pub reply: T,
    /// Every live worker runs the change (else its wait is over).
    pub applied: bool,
    /// The version it waited for.
    pub version: u64,
}

impl<T> Waiting<T> {
    /// Nothing waiting; each reply will wait at most `wait`.
    pub fn new(wait: Duration) -> Self {
        Waiting {
            items: Vec::new(),
            wait,
        }
    }

    /// How long each reply waits at most.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// `reply` waits, from `now`, for every live worker to run `version`.
    pub fn push(&mut self, version: u64, now: Instant, reply: T) {
        self.items.push(Item {
            version,
            deadline: now + self.wait,
            reply,
        });
    }

    /// The replies that can be given now, in the order they came, each
    /// once: those whose version every live worker runs (`acked`, see
    /// [`acked`]) and, with `timed`, those whose wait is over at `now`.
    pub fn due(&mut self, acked: u64, now: Instant, timed: bool) -> Vec<Due<T>> {
        let (done, wait): (Vec<Item<T>>, Vec<Item<T>>) = std::mem::take(&mut self.items)
            .into_iter()
            .partition(|p| p.version <= acked || (timed && now >= p.deadline));
        self.items = wait;
        done.into_iter()
            .map(|p| Due {
                applied: p.version <= acked,
                version: p.version,
                reply: p.reply,
            })
            .collect()
    }

    /// None is waiting.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[derive(Debug, Clone)]
    enum Ev {
        /// A change: the table version goes up, its reply waits.
        Change,
        /// Worker `i` applies the current table.
        Applied(usize),
        /// Worker `i` dies (it no longer holds answers up) or starts again
        /// (applying nothing yet).
        Toggle(usize),
        /// Time passes, by this many ms, and the timer fires.
        Tick(u64),
    }

    fn ev() -> impl Strategy<Value = Ev> {
        prop_oneof![
            3 => Just(Ev::Change),
            3 => (0usize..3).prop_map(Ev::Applied),
            1 => (0usize..3).prop_map(Ev::Toggle),
            2 => (0u64..3000).prop_map(Ev::Tick),
        ]
    }

    proptest! {
        /// Whatever the workers and the clock do: every change is answered
        /// exactly once, never before every live worker runs it or its
        /// wait is over, "applied" exactly when they run it; and once every
        /// wait is over, nothing waits.
        #[test]
        fn every_change_is_answered_once_and_truthfully(evs in proptest::collection::vec(ev(), 1..80)) {
            let start = Instant::now();
            let mut now = start;
            let mut version = 0u64;
            // (live, applied) per worker.
            let mut workers = [(true, 0u64); 3];
            let mut waiting = Waiting::new(Duration::from_secs(5));
            let mut asked_at = Vec::new();
            let mut answered = BTreeSet::new();
            for e in evs {
                let timed = matches!(e, Ev::Tick(_));
                match e {
                    Ev::Change => {
                        version += 1;
                        waiting.push(version, now, version);
                        asked_at.push(now);
                    }
                    Ev::Applied(i) => {
                        if workers[i].0 {
                            workers[i].1 = version;
                        }
                    }
                    Ev::Toggle(i) => workers[i] = (!workers[i].0, 0),
                    Ev::Tick(ms) => now += Duration::from_millis(ms),
                }
                let a = acked(workers.iter().filter(|w| w.0).map(|w| w.1), version);
                for d in waiting.due(a, now, timed) {
                    prop_assert_eq!(d.reply, d.version);
                    prop_assert!(answered.insert(d.reply), "{} answered twice", d.reply);
                    prop_assert_eq!(d.applied, d.version <= a);
                    let waited = now - asked_at[(d.version - 1) as usize];
                    prop_assert!(d.applied || waited >= waiting.wait(), "answered early, after {:?}", waited);
                }
            }
            now += Duration::from_secs(5);
            let a = acked(workers.iter().filter(|w| w.0).map(|w| w.1), version);
            for d in waiting.due(a, now, true) {
                prop_assert!(answered.insert(d.reply), "{} answered twice", d.reply);
            }
            prop_assert!(waiting.is_empty());
            prop_assert_eq!(answered.len() as u64, version);
        }
    }

    #[test]
    fn with_no_live_worker_nothing_is_waited_for() {
        assert_eq!(acked([], 7), 7);
        assert_eq!(acked([3, 5], 7), 3);
    }
}
