//! SMPTE ST 2022-7 seamless protection, without I/O: two or more inputs
//! carry the same RTP stream over separate paths; each sequence number is
//! forwarded once, from whichever copy arrives first, and in sequence
//! order. A gap is held for at most the path differential (the longest
//! one path may lag the other), waiting for the other copy; then it is
//! skipped and counted lost. When a stream starts (or its sender starts
//! again), its first packets are held for one differential, so that the
//! path that lags brings the earlier ones; from then on a packet in order
//! is forwarded at once. The caller hands in each packet with its arrival
//! time ([`Merger::push`]) and asks, whenever its timer fires, what has
//! waited long enough ([`Merger::poll`], [`Merger::deadline`]).

use std::collections::BTreeMap;

use crate::wire::rtp::RtpHeader;

/// The path differential when a rule names none: 50 ms.
pub const DEFAULT_DIFFERENTIAL_NS: u64 = 50_000_000;
/// The most packets held behind a gap; beyond it the gap is skipped at
/// once, whatever the time (a path that lags by more than this many
/// packets is not covering the other).
pub const MAX_HELD: usize = 65_536 / 4;
/// How many recent sequence numbers remember which paths brought them.
const WINDOW: u64 = 4096;
/// A packet this many sequence numbers or more from the next one to send
/// (either way) is not part of the stream, unless the path's next packet
/// follows it: then the sender started again.
const FAR: u16 = MAX_HELD as u16;
/// A path that brings this many sequence numbers in a row, each after its
/// gap was skipped and brought by no other path, carries a stream that
/// started again further back.
const LATE_RUN: u8 = 3;

/// One input's part in the merge.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PathCounts {
    /// Packets it brought first (those forwarded from it).
    pub first: u64,
    /// Copies of a packet another path (or itself) brought before.
    pub duplicates: u64,
    /// Packets it missed that another path brought (settled once 4,096
    /// later numbers have come).
    pub filled: u64,
    /// Packets that came after their gap was skipped.
    pub too_late: u64,
    /// Packets too far from the stream (before a sender restart was
    /// confirmed).
    pub strays: u64,
}

#[derive(Debug)]
struct Held<T> {
    item: T,
    arrived_ns: u64,
    path: usize,
}

/// What [`Merger::take`] did with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// Forward it now: it is the next, and nothing waits.
    Now,
    /// Kept or dropped; forward what went to `out`.
    Queued,
}

/// The merge of one stream's copies: `T` is whatever the caller forwards
/// (the packet, or where it is).
#[derive(Debug)]
pub struct Merger<T> {
    differential_ns: u64,
    paths: Vec<PathCounts>,
    /// Per path, the sequence number that confirms a restart.
    restart_at: Vec<Option<u16>>,
    /// Per path, the number a run of too-late packets continues with, and
    /// how long the run is.
    late_run: Vec<(u16, u8)>,
    /// The stream's SSRC, and the next extended sequence number to send.
    next: Option<(u32, u64)>,
    /// While the stream starts: until when nothing is sent.
    starting_until: Option<u64>,
    held: BTreeMap<u64, Held<T>>,
    /// Per recent sequence number (mod WINDOW): which, and which paths
    /// brought it (a bit each).
    brought: Vec<(u64, u32)>,
    /// Sequence numbers skipped, which no path brought in time.
    lost: u64,
    /// Packets forwarded.
    forwarded: u64,
}

impl<T> Merger<T> {
    /// A merge of `paths` inputs (at most 32) that holds a gap for at most
    /// `differential_ns`.
    pub fn new(paths: usize, differential_ns: u64) -> Self {
        let paths = paths.clamp(1, 32);
        Merger {
            differential_ns,
            paths: vec![PathCounts::default(); paths],
            restart_at: vec![None; paths],
            late_run: vec![(0, 0); paths],
            next: None,
            starting_until: None,
            held: BTreeMap::new(),
            brought: vec![(u64::MAX, 0); WINDOW as usize],
            lost: 0,
            forwarded: 0,
        }
    }

    /// Each path's counts.
    pub fn paths(&self) -> &[PathCounts] {
        &self.paths
    }

    /// Sequence numbers no path brought in time.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Packets forwarded.
    pub fn forwarded(&self) -> u64 {
        self.forwarded
    }

    /// When the oldest held packet has waited the whole differential: the
    /// time to call [`Merger::poll`] (none when nothing is held).
    pub fn deadline(&self) -> Option<u64> {
        self.held
            .values()
            .map(|h| h.arrived_ns)
            .min()
            .map(|t| t + self.differential_ns)
    }

    /// Takes the packet `h` from `path` (an index below the number of
    /// paths), which arrived at `arrived_ns`: [`Pushed::Now`] when it is
    /// the next to forward and nothing waits (forward it, nothing else);
    /// otherwise whatever is to be forwarded now goes to `out`, in order,
    /// and `item` (called at most once, only when the merge keeps the
    /// packet) makes the caller's copy of it. A copy of what was already
    /// forwarded is never made.
    pub fn take(
        &mut self,
        path: usize,
        h: &RtpHeader,
        arrived_ns: u64,
        item: impl FnOnce() -> T,
        out: &mut Vec<T>,
    ) -> Pushed {
        let path = path.min(self.paths.len() - 1);
        let Some((ssrc, next)) = self.next else {
            self.start(h, path, arrived_ns, item());
            return Pushed::Queued;
        };
        let delta = h.sequence.wrapping_sub((next & 0xffff) as u16);
        let ahead = delta < FAR;
        let behind = delta.wrapping_neg();
        if ssrc != h.ssrc || !(ahead || behind < FAR) {
            // A new stream, if the path's next packet follows this one.
            if ssrc != h.ssrc || self.restart_at[path] == Some(h.sequence) {
                self.flush(out);
                self.start(h, path, arrived_ns, item());
            } else {
                self.restart_at[path] = Some(h.sequence.wrapping_add(1));
                self.paths[path].strays += 1;
            }
            return Pushed::Queued;
        }
        self.restart_at[path] = None;
        let ext = if ahead {
            next + u64::from(delta)
        } else {
            next - u64::from(behind)
        };
        let first_copy = self.bring(ext, path);
        if self.starting_until.is_some() {
            // Nothing is sent yet: an earlier number moves the start back.
            if first_copy {
                self.held.insert(
                    ext,
                    Held {
                        item: item(),
                        arrived_ns,
                        path,
                    },
                );
                self.next = Some((ssrc, next.min(ext)));
            } else {
                self.paths[path].duplicates += 1;
            }
            return Pushed::Queued;
        }
        if ext < next {
            if !first_copy {
                self.paths[path].duplicates += 1;
                return Pushed::Queued;
            }
            self.paths[path].too_late += 1;
            let (at, run) = self.late_run[path];
            let run = if at == h.sequence && run > 0 { run + 1 } else { 1 };
            self.late_run[path] = (h.sequence.wrapping_add(1), run);
            if run >= LATE_RUN {
                self.flush(out);
                self.start(h, path, arrived_ns, item());
            }
            return Pushed::Queued;
        }
        self.late_run[path] = (0, 0);
        if !first_copy {
            self.paths[path].duplicates += 1;
            return Pushed::Queued;
        }
        if ext == next && self.held.is_empty() {
            // In sequence with nothing waiting: forwarded as it is.
            self.paths[path].first += 1;
            self.forwarded += 1;
            self.next = Some((ssrc, next + 1));
            return Pushed::Now;
        }
        self.held.insert(
            ext,
            Held {
                item: item(),
                arrived_ns,
                path,
            },
        );
        self.release(out);
        if self.held.len() > MAX_HELD {
            self.skip_gap(out);
        }
        Pushed::Queued
    }

    /// [`Merger::take`] with the item in hand: what to forward now, in
    /// order.
    #[cfg(test)]
    pub fn push(&mut self, path: usize, h: &RtpHeader, arrived_ns: u64, item: T) -> Vec<T> {
        let mut out = Vec::new();
        let mut slot = Some(item);
        if self.take(path, h, arrived_ns, || slot.take().expect("called once"), &mut out) == Pushed::Now {
            out.extend(slot.take());
        }
        out
    }

    /// Skips each gap whose oldest waiting packet has waited the whole
    /// differential at `now_ns`; what to forward now goes to `out`, in
    /// order.
    pub fn poll(&mut self, now_ns: u64, out: &mut Vec<T>) {
        if self.starting_until.is_some_and(|t| t <= now_ns) {
            self.starting_until = None;
            self.release(out);
        }
        while self.deadline().is_some_and(|d| d <= now_ns) {
            self.skip_gap(out);
        }
    }

    /// [`Merger::poll`], returning what to forward.
    #[cfg(test)]
    pub fn polled(&mut self, now_ns: u64) -> Vec<T> {
        let mut out = Vec::new();
        self.poll(now_ns, &mut out);
        out
    }

    /// Starts the stream at `h`, holding it for one differential.
    fn start(&mut self, h: &RtpHeader, path: usize, arrived_ns: u64, item: T) {
        // Extended numbers start high, so a late copy can sit below.
        let ext = (1 << 32) + u64::from(h.sequence);
        self.next = Some((h.ssrc, ext));
        self.starting_until = Some(arrived_ns + self.differential_ns);
        self.restart_at.iter_mut().for_each(|r| *r = None);
        self.late_run.iter_mut().for_each(|r| *r = (0, 0));
        self.brought.iter_mut().for_each(|b| *b = (u64::MAX, 0));
        self.bring(ext, path);
        self.held.insert(ext, Held { item, arrived_ns, path });
    }

    /// Notes that `path` brought `ext`; true if no path had. A number that
    /// leaves the window is settled: each path that did not bring what
    /// another did had a gap the other filled.
    fn bring(&mut self, ext: u64, path: usize) -> bool {
        let slot = &mut self.brought[(ext % WINDOW) as usize];
        if slot.0 != ext {
            let (old, mask) = *slot;
            *slot = (ext, 0);
            if old != u64::MAX && old < ext && mask != 0 {
                for (p, c) in self.paths.iter_mut().enumerate() {
                    if mask & (1 << p) == 0 {
                        c.filled += 1;
                    }
                }
            }
        }
        let slot = &mut self.brought[(ext % WINDOW) as usize];
        let first = slot.1 == 0;
        slot.1 |= 1 << path;
        first
    }

    /// Forwards the held packets that follow on from the next number
    /// (none while the stream starts).
    fn release(&mut self, out: &mut Vec<T>) {
        let Some((ssrc, mut next)) = self.next.filter(|_| self.starting_until.is_none()) else {
            return;
        };
        while let Some(h) = self.held.remove(&next) {
            self.paths[h.path].first += 1;
            self.forwarded += 1;
            out.push(h.item);
            next += 1;
        }
        self.next = Some((ssrc, next));
    }

    /// Gives up the gap at the next number: counts it lost and forwards
    /// what follows it.
    fn skip_gap(&mut self, out: &mut Vec<T>) {
        let (Some((ssrc, next)), Some(&first)) = (self.next, self.held.keys().next()) else {
            return;
        };
        self.lost += first - next;
        self.next = Some((ssrc, first));
        self.release(out);
    }

    /// Forwards everything held, in order, counting the gaps lost.
    fn flush(&mut self, out: &mut Vec<T>) {
        self.starting_until = None;
        self.release(out);
        while !self.held.is_empty() {
            self.skip_gap(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rtp(seq: u16, ssrc: u32) -> RtpHeader {
        let mut b = [0u8; 12];
        RtpHeader::write(&mut b, 33, seq, 0, ssrc);
        RtpHeader::parse(&b).expect("rtp")
    }

    const MS: u64 = 1_000_000;

    /// Polls at `at`, then pushes: what is forwarded meanwhile.
    fn at(m: &mut Merger<u32>, path: usize, seq: u16, ssrc: u32, at: u64) -> Vec<u32> {
        let mut out = m.polled(at);
        out.extend(m.push(path, &rtp(seq, ssrc), at, u32::from(seq)));
        out
    }

    #[test]
    fn a_stream_starts_after_one_differential_from_its_earliest_packet() {
        let mut m = Merger::new(2, 50 * MS);
        assert!(at(&mut m, 0, 11, 1, 0).is_empty());
        // The lagging path brings an earlier one: the stream starts there.
        assert!(at(&mut m, 1, 10, 1, 20 * MS).is_empty());
        assert!(at(&mut m, 1, 11, 1, 21 * MS).is_empty());
        assert_eq!(m.deadline(), Some(50 * MS));
        assert_eq!(m.polled(50 * MS), [10, 11]);
        // From then on, in order is at once.
        assert_eq!(at(&mut m, 0, 12, 1, 51 * MS), [12]);
        assert_eq!((m.lost(), m.paths()[0].duplicates + m.paths()[1].duplicates), (0, 1));
    }

    #[test]
    fn a_gap_on_one_path_is_filled_from_the_other() {
        let mut m = Merger::new(2, 50 * MS);
        at(&mut m, 0, 10, 1, 0);
        assert_eq!(m.polled(50 * MS), [10]);
        // Path 0 loses 11; 12 waits for it.
        assert!(at(&mut m, 0, 12, 1, 52 * MS).is_empty());
        // Path 1, 20 ms behind, brings 10 (a duplicate) and 11.
        assert!(at(&mut m, 1, 10, 1, 70 * MS).is_empty());
        assert_eq!(at(&mut m, 1, 11, 1, 71 * MS), [11, 12]);
        assert!(at(&mut m, 1, 12, 1, 72 * MS).is_empty());
        assert_eq!(m.lost(), 0);
        assert_eq!((m.paths()[0].first, m.paths()[1].first), (2, 1));
        assert_eq!(m.paths()[1].duplicates, 2);
    }

    #[test]
    fn a_gap_no_path_fills_is_skipped_after_the_differential() {
        let mut m = Merger::new(2, 50 * MS);
        at(&mut m, 0, 65_535, 1, 0);
        assert_eq!(m.polled(50 * MS), [65_535]);
        assert!(at(&mut m, 0, 1, 1, 60 * MS).is_empty());
        assert_eq!(m.deadline(), Some(110 * MS));
        assert!(m.polled(109 * MS).is_empty());
        assert_eq!(m.polled(110 * MS), [1]);
        assert_eq!(m.lost(), 1);
        // The lost number arriving now is too late, and dropped.
        assert!(at(&mut m, 1, 0, 1, 111 * MS).is_empty());
        assert_eq!(m.paths()[1].too_late, 1);
    }

    #[test]
    fn a_sender_restart_starts_the_stream_afresh() {
        let mut m = Merger::new(2, 50 * MS);
        at(&mut m, 0, 100, 1, 0);
        assert_eq!(at(&mut m, 0, 101, 1, 50 * MS), [100, 101]);
        // Same SSRC, far away: a stray, then confirmed; it starts after a
        // differential.
        assert!(at(&mut m, 0, 40_000, 1, 51 * MS).is_empty());
        assert!(at(&mut m, 0, 40_001, 1, 52 * MS).is_empty());
        // The other path follows, its copies duplicates.
        assert!(at(&mut m, 1, 40_001, 1, 53 * MS).is_empty());
        assert!(at(&mut m, 1, 40_002, 1, 54 * MS).is_empty());
        assert_eq!(m.polled(102 * MS), [40_001, 40_002]);
        // A new SSRC: what is held goes, and the new stream starts.
        assert!(at(&mut m, 1, 7, 2, 103 * MS).is_empty());
        assert_eq!(m.polled(153 * MS), [7]);
        // Same SSRC, a little way back: three in a row that no path
        // brought, each too late, start it again there.
        assert!(at(&mut m, 0, 3, 2, 154 * MS).is_empty());
        assert!(at(&mut m, 0, 4, 2, 155 * MS).is_empty());
        assert!(at(&mut m, 0, 5, 2, 156 * MS).is_empty());
        assert_eq!(m.polled(206 * MS), [5]);
        assert_eq!(at(&mut m, 0, 6, 2, 207 * MS), [6]);
        assert_eq!(m.lost(), 0);
    }

    #[test]
    fn what_one_path_missed_and_the_other_brought_is_counted_once_settled() {
        let mut m = Merger::new(2, 50 * MS);
        for i in 0..5000u16 {
            let t = u64::from(i) * MS;
            at(&mut m, 0, i, 1, t);
            if !(100..110).contains(&i) {
                at(&mut m, 1, i, 1, t);
            }
        }
        assert_eq!((m.paths()[0].filled, m.paths()[1].filled), (0, 10));
        assert_eq!(m.lost(), 0);
    }

    /// For each packet: which paths carry it (1: path 0, 2: path 1, 3:
    /// both, 0: neither).
    fn carried() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(
            prop_oneof![8 => Just(3u8), 1 => Just(1), 1 => Just(2), 1 => Just(0)],
            1..600,
        )
    }

    proptest! {
        /// Two paths, 1 ms between packets, path 1 late by `skew` ms (less
        /// than the differential), each losing packets the other may carry:
        /// the output is every packet some path carried, once each, in
        /// order, and exactly those no path carried (between the first and
        /// the last) are lost.
        #[test]
        fn the_merge_loses_only_what_both_paths_lost(
            start in any::<u16>(),
            which in carried(),
            skew in 0u64..40,
        ) {
            let mut arrivals: Vec<(u64, usize, usize)> = Vec::new();
            for (i, w) in which.iter().enumerate() {
                let sent = i as u64 * MS;
                if w & 1 != 0 {
                    arrivals.push((sent, 0, i));
                }
                if w & 2 != 0 {
                    arrivals.push((sent + skew * MS, 1, i));
                }
            }
            arrivals.sort();
            let mut m = Merger::new(2, 50 * MS);
            let mut out = Vec::new();
            for (at, path, i) in arrivals {
                out.extend(m.polled(at));
                out.extend(m.push(path, &rtp(start.wrapping_add(i as u16), 9), at, i));
            }
            out.extend(m.polled(u64::MAX / 2));
            let want: Vec<usize> = (0..which.len()).filter(|&i| which[i] != 0).collect();
            // Sent in order, each once.
            prop_assert_eq!(&out, &want);
            let lost = match (want.first(), want.last()) {
                (Some(&a), Some(&b)) => (a..=b).filter(|&i| which[i] == 0).count() as u64,
                _ => 0,
            };
            prop_assert_eq!(m.lost(), lost);
            let firsts: u64 = m.paths().iter().map(|p| p.first).sum();
            prop_assert_eq!(firsts, want.len() as u64);
            let both = which.iter().filter(|&&w| w == 3).count() as u64;
            let dups: u64 = m.paths().iter().map(|p| p.duplicates).sum();
            prop_assert_eq!(dups, both, "every second copy is a duplicate");
        }
    }
}
