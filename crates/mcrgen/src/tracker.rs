//! Sequence accounting for one stream: what arrived once, twice, late, or
//! not at all.
//!
//! Definitions (sequence numbers start at 0 for every stream):
//! - *received*: every arrival, duplicates included;
//! - *unique*: distinct sequence numbers seen;
//! - *duplicated*: arrivals of a sequence number already seen;
//! - *reordered*: first arrivals of a sequence number lower than one seen
//!   before it;
//! - *lost*: sequence numbers never seen, out of `0..=highest` (or
//!   `0..expected` when the sender's count is known and larger); for a
//!   receiver that joined late, out of `lowest..=highest`.
//!
//! Where the sequence skipped ahead, it notes the *holes*: the first number
//! skipped and how many (the first [`SeqTracker::MAX_HOLES`] of them). A
//! hole is noted when it opens, and an arrival that comes late takes its
//! number out of it, so the holes are exactly what was lost, and where.
//!
//! Memory is bounded: the tracker remembers the last `window` sequence
//! numbers. An arrival further behind the highest than that is counted as
//! *too late*: it is reordered, but whether it is also a duplicate cannot be
//! told, so it is not counted as unique.

/// What one arrival was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// A sequence number not seen before, in order.
    InOrder,
    /// A sequence number not seen before, after a higher one.
    Reordered,
    /// A sequence number seen before.
    Duplicate,
    /// Further behind the highest than the window reaches.
    TooLate,
}

/// The accounting of one stream.
#[derive(Debug, Clone)]
pub struct SeqTracker {
    bits: Vec<u64>,
    window: u64,
    highest: Option<u64>,
    /// For a late join: the lowest sequence number seen, where counting
    /// starts.
    lowest: Option<u64>,
    late_join: bool,
    received: u64,
    unique: u64,
    duplicated: u64,
    reordered: u64,
    too_late: u64,
    holes: Vec<(u64, u64)>,
}

impl SeqTracker {
    /// The most holes a tracker lists.
    pub const MAX_HOLES: usize = 1024;

    /// The most sequence numbers a tracker remembers (2 MiB of bits).
    pub const MAX_WINDOW: u64 = 1 << 24;

    /// A tracker that remembers the last `window` sequence numbers (rounded
    /// up to a multiple of 64, from 64 to [`Self::MAX_WINDOW`]).
    pub fn new(window: u64) -> Self {
        let words = window.clamp(1, Self::MAX_WINDOW).div_ceil(64);
        SeqTracker {
            bits: vec![0; words as usize],
            window: words * 64,
            highest: None,
            lowest: None,
            late_join: false,
            received: 0,
            unique: 0,
            duplicated: 0,
            reordered: 0,
            too_late: 0,
            holes: Vec::new(),
        }
    }

    fn note_hole(&mut self, first: u64, count: u64) {
        if count > 0 && self.holes.len() < Self::MAX_HOLES {
            self.holes.push((first, count));
        }
    }

    /// Takes `seq`, come late, out of the hole that holds it (the most
    /// recent holes first: a late arrival is mostly a little late).
    fn fill_hole(&mut self, seq: u64) {
        let Some(k) = self.holes.iter().rposition(|&(f, n)| f <= seq && seq < f + n) else {
            return;
        };
        let (first, count) = self.holes[k];
        let before = (first, seq - first);
        let after = (seq + 1, first + count - seq - 1);
        match (before.1, after.1) {
            (0, 0) => {
                self.holes.remove(k);
            }
            (0, _) => self.holes[k] = after,
            (_, 0) => self.holes[k] = before,
            _ => {
                self.holes[k] = before;
                self.holes.insert(k + 1, after);
            }
        }
    }

    fn slot(&self, seq: u64) -> (usize, u64) {
        let i = seq % self.window;
        ((i / 64) as usize, 1u64 << (i % 64))
    }

    fn seen(&self, seq: u64) -> bool {
        let (w, m) = self.slot(seq);
        self.bits[w] & m != 0
    }

    fn mark(&mut self, seq: u64) {
        let (w, m) = self.slot(seq);
        self.bits[w] |= m;
    }

    fn clear(&mut self, seq: u64) {
        let (w, m) = self.slot(seq);
        self.bits[w] &= !m;
    }

    /// A tracker for a receiver that started after the sender: loss is
    /// counted from the lowest sequence number that arrives, not from 0.
    pub fn late_join(window: u64) -> Self {
        SeqTracker {
            late_join: true,
            ..Self::new(window)
        }
    }

    /// Records the arrival of `seq` and says what it was.
    pub fn record(&mut self, seq: u64) -> Arrival {
        self.received += 1;
        self.lowest = Some(self.lowest.map_or(seq, |l| l.min(seq)));
        let arrival = match self.highest {
            None => {
                if !self.late_join {
                    self.note_hole(0, seq);
                }
                self.highest = Some(seq);
                self.mark(seq);
                Arrival::InOrder
            }
            Some(h) if seq > h => {
                let gap = seq - h;
                self.note_hole(h + 1, gap - 1);
                if gap >= self.window {
                    self.bits.iter_mut().for_each(|w| *w = 0);
                } else {
                    // Forget what the slots between held a window ago.
                    for s in h + 1..seq {
                        self.clear(s);
                    }
                }
                self.mark(seq);
                self.highest = Some(seq);
                Arrival::InOrder
            }
            Some(h) if h - seq >= self.window => Arrival::TooLate,
            Some(_) if self.seen(seq) => Arrival::Duplicate,
            Some(_) => {
                self.mark(seq);
                self.fill_hole(seq);
                Arrival::Reordered
            }
        };
        match arrival {
            Arrival::InOrder => self.unique += 1,
            Arrival::Reordered => {
                self.unique += 1;
                self.reordered += 1;
            }
            Arrival::Duplicate => self.duplicated += 1,
            Arrival::TooLate => self.too_late += 1,
        }
        arrival
    }

    /// Every arrival, duplicates included.
    pub fn received(&self) -> u64 {
        self.received
    }
    /// Distinct sequence numbers seen.
    pub fn unique(&self) -> u64 {
        self.unique
    }
    /// Arrivals of a sequence number already seen.
    pub fn duplicated(&self) -> u64 {
        self.duplicated
    }
    /// First arrivals after a higher sequence number.
    pub fn reordered(&self) -> u64 {
        self.reordered
    }
    /// Arrivals too far behind to judge.
    pub fn too_late(&self) -> u64 {
        self.too_late
    }
    /// What is still missing where the sequence skipped ahead: (first
    /// number, how many), in order; at most [`Self::MAX_HOLES`] holes
    /// noted.
    pub fn holes(&self) -> &[(u64, u64)] {
        &self.holes
    }
    /// The highest sequence number seen.
    pub fn highest(&self) -> Option<u64> {
        self.highest
    }

    /// Sequence numbers never seen, out of `0..=highest`, or out of
    /// `0..expected` if that is more; for a late join, out of
    /// `lowest..=highest`.
    pub fn lost(&self, expected: Option<u64>) -> u64 {
        let end = self.highest.map_or(0, |h| h.saturating_add(1));
        let span = if self.late_join {
            end - self.lowest.unwrap_or(0).min(end)
        } else {
            end.max(expected.unwrap_or(0))
        };
        span.saturating_sub(self.unique)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    #[test]
    fn in_order_stream_is_clean() {
        let mut t = SeqTracker::new(1024);
        for s in 0..100 {
            assert_eq!(t.record(s), Arrival::InOrder);
        }
        assert_eq!((t.received(), t.unique(), t.lost(Some(100))), (100, 100, 0));
        assert_eq!(t.lost(Some(150)), 50, "the tail that never came is lost");
    }

    #[test]
    fn holes_say_where_the_sequence_skipped_and_by_how_many() {
        let mut t = SeqTracker::new(1024);
        for s in [2, 3, 7, 8, 9, 20, 5] {
            t.record(s);
        }
        // (5 came late: it is no longer missing.)
        assert_eq!(t.holes(), [(0, 2), (4, 1), (6, 1), (10, 10)]);
        assert_eq!(t.lost(None), 21 - 7);
        // Late arrivals take their numbers out of the holes.
        for late in [0, 10, 19, 14] {
            t.record(late);
        }
        assert_eq!(t.holes(), [(1, 1), (4, 1), (6, 1), (11, 3), (15, 4)]);
        assert_eq!(t.lost(None), 21 - 11);
        let mut late = SeqTracker::late_join(1024);
        for s in [100, 101, 103] {
            late.record(s);
        }
        assert_eq!(late.holes(), [(102, 1)], "a late join's start is no hole");
        let mut many = SeqTracker::new(1 << 16);
        for s in (0..5000).map(|i| i * 2) {
            many.record(s);
        }
        assert_eq!(many.holes().len(), SeqTracker::MAX_HOLES);
    }

    #[test]
    fn each_kind_of_fault_is_named() {
        let mut t = SeqTracker::new(1024);
        assert_eq!(t.record(0), Arrival::InOrder);
        assert_eq!(t.record(2), Arrival::InOrder);
        assert_eq!(t.record(1), Arrival::Reordered);
        assert_eq!(t.record(1), Arrival::Duplicate);
        assert_eq!(t.record(5), Arrival::InOrder);
        assert_eq!((t.duplicated(), t.reordered(), t.lost(None)), (1, 1, 2));
    }

    #[test]
    fn a_late_join_counts_from_the_first_arrival() {
        let mut t = SeqTracker::late_join(1024);
        for s in 500..600 {
            t.record(s);
        }
        assert_eq!(t.lost(None), 0);
        t.record(602);
        assert_eq!(t.lost(None), 2, "600 and 601");
        // An earlier one arriving late moves the start, and is reordered.
        t.record(499);
        assert_eq!((t.lost(None), t.reordered()), (2, 1));
    }

    #[test]
    fn the_highest_sequence_number_does_not_overflow() {
        let mut t = SeqTracker::new(64);
        t.record(u64::MAX);
        assert_eq!(t.record(u64::MAX), Arrival::Duplicate);
        assert_eq!(t.lost(Some(10)), u64::MAX - 1);
    }

    #[test]
    fn arrivals_beyond_the_window_are_too_late_not_guessed() {
        let mut t = SeqTracker::new(64);
        t.record(0);
        t.record(1000);
        assert_eq!(t.record(1), Arrival::TooLate);
        assert_eq!(t.too_late(), 1);
        // Slots reused by the window do not report stale duplicates.
        assert_eq!(t.record(1000 - 63), Arrival::Reordered);
        assert_eq!(t.record(1000 - 63), Arrival::Duplicate);
    }

    /// The plain model: every number remembered forever.
    #[derive(Default)]
    struct Model {
        seen: HashSet<u64>,
        highest: Option<u64>,
        received: u64,
        duplicated: u64,
        reordered: u64,
    }

    impl Model {
        fn record(&mut self, s: u64) {
            self.received += 1;
            if !self.seen.insert(s) {
                self.duplicated += 1;
            } else if self.highest.is_some_and(|h| s < h) {
                self.reordered += 1;
            }
            self.highest = Some(self.highest.map_or(s, |h| h.max(s)));
        }
        fn lost(&self, expected: Option<u64>) -> u64 {
            let span = self.highest.map_or(0, |h| h + 1).max(expected.unwrap_or(0));
            span - self.seen.len() as u64
        }
    }

    proptest! {
        /// Any sequence of arrivals (gaps, duplicates, reordering) is
        /// counted exactly as the model counts it, while it stays within the
        /// window.
        #[test]
        fn matches_the_model(arrivals in proptest::collection::vec(0u64..500, 0..800), expected in 0u64..600) {
            let mut t = SeqTracker::new(512);
            let mut m = Model::default();
            for &s in &arrivals {
                t.record(s);
                m.record(s);
            }
            prop_assert_eq!(t.received(), m.received);
            prop_assert_eq!(t.unique(), m.seen.len() as u64);
            prop_assert_eq!(t.duplicated(), m.duplicated);
            prop_assert_eq!(t.reordered(), m.reordered);
            prop_assert_eq!(t.too_late(), 0);
            prop_assert_eq!(t.lost(None), m.lost(None));
            prop_assert_eq!(t.lost(Some(expected)), m.lost(Some(expected)));
        }

        /// Runs longer than the window, made of in-order stretches with
        /// local faults, are still counted exactly.
        #[test]
        fn matches_the_model_over_long_runs(faults in proptest::collection::vec((0u64..5000, 0u8..3), 0..200)) {
            let mut t = SeqTracker::new(128);
            let mut m = Model::default();
            let faults: std::collections::HashMap<u64, u8> = faults.into_iter().collect();
            for s in 0..5000u64 {
                match faults.get(&s) {
                    Some(0) => continue,                       // lost
                    Some(1) => { t.record(s); m.record(s); }   // duplicated
                    Some(_) if s >= 3 => {                     // a late one
                        t.record(s - 3); m.record(s - 3);
                    }
                    _ => {}
                }
                t.record(s);
                m.record(s);
            }
            prop_assert_eq!(t.unique(), m.seen.len() as u64);
            prop_assert_eq!(t.duplicated(), m.duplicated);
            prop_assert_eq!(t.reordered(), m.reordered);
            prop_assert_eq!(t.lost(Some(5000)), m.lost(Some(5000)));
        }
    }
}
