//! A rule with several inputs as a worker runs it, without I/O: each
//! packet from one of the inputs goes in with its arrival time; out comes
//! what to forward, in order. A merge ([`crate::merge::Merger`]) may hold
//! packets, so it takes each as the caller's item (a copy of the frame); a
//! failover ([`crate::failover::Failover`]) and an arbitration
//! ([`crate::arbitrate::Arbiter`]) only say whether the packet in hand
//! goes on, so nothing is copied. The counts each input and the rule
//! gained since the last look come out as deltas, for counters that only
//! ever add (a worker that restarts starts a new state and keeps adding).

use crate::arbitrate::race::LagSummary;
use crate::arbitrate::{Arbiter, Verdict};
use crate::failover::{Failover, Settings, Switch};
use crate::health::RtpSequence;
use crate::merge::{Merger, Pushed};
use crate::rule::Mode;
use crate::stats::{InputCounter, LineCounter, RuleCounter};
use crate::wire::rtp::RtpHeader;

/// What became of one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// Forward the packet in hand now (failover: its input is the active
    /// one; merge: it is the next in sequence and nothing waits), and
    /// nothing else.
    Now,
    /// Merge: the packet went in as an item (kept, or dropped as a copy
    /// of what went before); forward what came out, in order (perhaps
    /// nothing, perhaps it and others).
    Queued,
    /// Failover: not forwarded, its input is not the active one.
    Dropped,
    /// Not forwarded: a merge needs RTP and this is not.
    NotRtp,
}

/// The line counters an arbitration keeps, in [`LineCounter`]'s order.
const LINES: usize = crate::arbitrate::LINE_VALUES;
const _: () = assert!(LINES == LineCounter::ALL.len());

#[derive(Debug)]
enum How<T> {
    Merge(Merger<T>),
    Failover {
        choice: Failover,
        /// With an error threshold: each input's RTP sequence, for gaps.
        sequences: Vec<RtpSequence>,
        /// Each input's gaps already told to the choice.
        gaps: Vec<u64>,
        /// Packets forwarded from each input.
        forwarded: Vec<u64>,
        /// Packets of each input not forwarded because, after a switch to
        /// it, they repeated what the input before had forwarded.
        repeats: Vec<u64>,
        /// The RTP packets forwarded last.
        last: LastForwarded,
        /// After a switch: what the new input must pass before it is
        /// forwarded.
        catch_up: Option<CatchUp>,
    },
    Arbitrate(Arbiter),
}

/// The counters of one input that the state keeps (the worker counts
/// packets and bytes itself).
const KEPT: [InputCounter; 5] = [
    InputCounter::Forwarded,
    InputCounter::Duplicates,
    InputCounter::Filled,
    InputCounter::TooLate,
    InputCounter::Strays,
];

/// One rule's inputs made one stream.
#[derive(Debug)]
pub struct Combine<T> {
    mode: Mode,
    inputs: usize,
    how: How<T>,
    /// What [`Combine::deltas`] reported so far: per input, then the rule's
    /// lost and switches.
    told: Vec<[u64; KEPT.len()]>,
    told_lines: Vec<[u64; LINES]>,
    told_rule: [u64; 4],
    /// Switches not yet taken by [`Combine::take_switches`].
    switches: Vec<Switch>,
}

/// What changed since the last [`Combine::deltas`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Deltas {
    /// (input, counter, amount to add).
    pub inputs: Vec<(usize, InputCounter, u64)>,
    /// Arbitrating: (input, line counter, amount to add).
    pub lines: Vec<(usize, LineCounter, u64)>,
    /// (counter, amount to add).
    pub rule: Vec<(RuleCounter, u64)>,
    /// The active input from 1 (0: none), for [`RuleCounter::Active`].
    pub active: u64,
}

impl<T> Combine<T> {
    /// The state of a rule with `inputs` inputs in `mode`.
    pub fn new(mode: Mode, inputs: usize) -> Self {
        let inputs = inputs.max(1);
        let how = match mode {
            Mode::Merge { differential_ms } => How::Merge(Merger::new(inputs, u64::from(differential_ms) * 1_000_000)),
            Mode::Failover {
                loss_of_signal_ms,
                hold_ms,
                error_threshold,
            } => How::Failover {
                choice: Failover::new(
                    inputs,
                    Settings {
                        loss_of_signal_ns: u64::from(loss_of_signal_ms) * 1_000_000,
                        hold_ns: u64::from(hold_ms) * 1_000_000,
                        error_threshold,
                    },
                ),
                sequences: match error_threshold {
                    Some(_) => (0..inputs).map(|_| RtpSequence::new(90_000)).collect(),
                    None => Vec::new(),
                },
                gaps: vec![0; inputs],
                forwarded: vec![0; inputs],
                repeats: vec![0; inputs],
                last: LastForwarded::default(),
                catch_up: None,
            },
            Mode::Arbitrate { framing, window } => How::Arbitrate(Arbiter::new(framing, window, inputs)),
        };
        Combine {
            mode,
            inputs,
            how,
            told: vec![[0; KEPT.len()]; inputs],
            told_lines: vec![[0; LINES]; inputs],
            told_rule: [0; 4],
            switches: Vec::new(),
        }
    }

    /// The mode it runs.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// How many inputs.
    pub fn inputs(&self) -> usize {
        self.inputs
    }

    /// The packet whose UDP payload is `payload` came from `input` at
    /// `now`; `item` makes the caller's copy of it if the state keeps it.
    /// What to forward goes to `out`, in order.
    pub fn packet(
        &mut self,
        input: usize,
        payload: &[u8],
        now: u64,
        item: impl FnOnce() -> T,
        out: &mut Vec<T>,
    ) -> Take {
        let input = input.min(self.inputs - 1);
        match &mut self.how {
            How::Merge(m) => {
                let Some(h) = RtpHeader::parse(payload) else {
                    return Take::NotRtp;
                };
                match m.take(input, &h, now, item, out) {
                    Pushed::Now => Take::Now,
                    Pushed::Queued => Take::Queued,
                }
            }
            How::Failover {
                choice,
                sequences,
                gaps,
                forwarded,
                repeats,
                last,
                catch_up,
            } => {
                let rtp = RtpHeader::parse(payload);
                if let Some(seq) = sequences.get_mut(input)
                    && let Some(h) = &rtp
                {
                    seq.observe(h, now);
                    let lost = seq.counts().lost;
                    let new = lost.saturating_sub(gaps[input]);
                    gaps[input] = lost;
                    if new > 0 {
                        let s = choice.errors(input, new, now);
                        note_switch(s, *last, catch_up, &mut self.switches);
                    }
                }
                let (forward, switch) = choice.packet(input, now);
                note_switch(switch, *last, catch_up, &mut self.switches);
                if !forward {
                    return Take::Dropped;
                }
                let id = rtp.as_ref().map(|h| (h.ssrc, h.sequence));
                // The input switched to lags the one before: what it
                // brings again is not sent twice.
                if let Some(c) = catch_up.as_mut() {
                    match id {
                        Some((ssrc, seq)) if ssrc == c.ssrc && c.seq.wrapping_sub(seq) < 0x8000 && c.budget > 0 => {
                            c.budget -= 1;
                            repeats[input] += 1;
                            return Take::Dropped;
                        }
                        _ => *catch_up = None,
                    }
                }
                last.forwarded(id);
                forwarded[input] += 1;
                Take::Now
            }
            How::Arbitrate(a) => match a.packet(input, payload, now) {
                Verdict::Forward => Take::Now,
                _ => Take::Dropped,
            },
        }
    }

    /// Arbitrating: by how much each line's copies lagged the first, over
    /// the last few seconds at `now`.
    pub fn lags(&mut self, now: u64) -> Option<Vec<LagSummary>> {
        match &mut self.how {
            How::Arbitrate(a) => Some(a.lags(now)),
            _ => None,
        }
    }

    /// What time brings at `now`: gaps given up (merge), switches
    /// (failover). What to forward goes to `out`, in order.
    pub fn poll(&mut self, now: u64, out: &mut Vec<T>) {
        match &mut self.how {
            How::Merge(m) => m.poll(now, out),
            How::Failover {
                choice, last, catch_up, ..
            } => note_switch(choice.tick(now), *last, catch_up, &mut self.switches),
            How::Arbitrate(_) => {}
        }
    }

    /// When [`Combine::poll`] next has something to do.
    pub fn deadline(&self) -> Option<u64> {
        match &self.how {
            How::Merge(m) => m.deadline(),
            How::Failover { choice, .. } => choice.deadline(),
            How::Arbitrate(_) => None,
        }
    }

    /// An operator takes the stream from `input` (none: gives the choice
    /// back); a merge takes every input and refuses.
    pub fn force(&mut self, input: Option<usize>, now: u64) -> Result<(), String> {
        match &mut self.how {
            How::Merge(_) => Err("a merge takes every input: there is none to switch to".into()),
            How::Arbitrate(_) => Err("an arbitration takes every line: there is none to switch to".into()),
            How::Failover {
                choice, last, catch_up, ..
            } => {
                if let Some(i) = input.filter(|&i| i >= self.inputs) {
                    return Err(format!("input {} is not one of the rule's {}", i + 1, self.inputs));
                }
                note_switch(choice.force(input, now), *last, catch_up, &mut self.switches);
                Ok(())
            }
        }
    }

    /// The input an operator holds a failover to (from 0), if any.
    pub fn forced(&self) -> Option<usize> {
        match &self.how {
            How::Merge(_) | How::Arbitrate(_) => None,
            How::Failover { choice, .. } => choice.forced(),
        }
    }

    /// The switches since the last call.
    pub fn take_switches(&mut self) -> Vec<Switch> {
        std::mem::take(&mut self.switches)
    }

    /// The counts gained since the last call.
    pub fn deltas(&mut self) -> Deltas {
        let mut gaps = (0, 0);
        let (now_inputs, lost, switches, active): (Vec<[u64; KEPT.len()]>, u64, u64, u64) = match &self.how {
            How::Merge(m) => (
                m.paths()
                    .iter()
                    .map(|p| [p.first, p.duplicates, p.filled, p.too_late, p.strays])
                    .collect(),
                m.lost(),
                0,
                0,
            ),
            How::Failover {
                choice,
                forwarded,
                repeats,
                ..
            } => (
                forwarded.iter().zip(repeats).map(|(&f, &r)| [f, r, 0, 0, 0]).collect(),
                0,
                choice.switches(),
                choice.active() as u64 + 1,
            ),
            How::Arbitrate(a) => {
                gaps = a.gaps();
                (
                    a.counts()
                        .iter()
                        .map(|c| [c.forwarded, c.copies, 0, c.too_late, c.strays])
                        .collect(),
                    0,
                    0,
                    0,
                )
            }
        };
        let mut d = Deltas {
            active,
            ..Deltas::default()
        };
        for (i, (now, told)) in now_inputs.iter().zip(&mut self.told).enumerate() {
            for (k, c) in KEPT.iter().enumerate() {
                if now[k] > told[k] {
                    d.inputs.push((i, *c, now[k] - told[k]));
                    told[k] = now[k];
                }
            }
        }
        // (Read in place: this runs for every packet.)
        let lines = match &self.how {
            How::Arbitrate(a) => a.counts(),
            _ => &[],
        };
        for (i, (counts, told)) in lines.iter().zip(&mut self.told_lines).enumerate() {
            let now = counts.line_values();
            for (k, (c, _)) in LineCounter::ALL.iter().enumerate() {
                if now[k] > told[k] {
                    d.lines.push((i, *c, now[k] - told[k]));
                    told[k] = now[k];
                }
            }
        }
        for (k, (c, now)) in [
            (RuleCounter::Lost, lost),
            (RuleCounter::Switches, switches),
            (RuleCounter::GapsOpened, gaps.0),
            (RuleCounter::GapsFilled, gaps.1),
        ]
        .into_iter()
        .enumerate()
        {
            if now > self.told_rule[k] {
                d.rule.push((c, now - self.told_rule[k]));
                self.told_rule[k] = now;
            }
        }
        d
    }
}

/// The last packet a failover forwarded, as RTP, and whether it followed
/// the one before it in sequence (so the stream is RTP, not a payload
/// whose bytes happen to look like an RTP header once).
#[derive(Debug, Default, Clone, Copy)]
struct LastForwarded {
    id: Option<(u32, u16)>,
    in_sequence: bool,
}

impl LastForwarded {
    fn forwarded(&mut self, id: Option<(u32, u16)>) {
        self.in_sequence = matches!((self.id, id), (Some((a, p)), Some((b, q))) if a == b && q == p.wrapping_add(1));
        self.id = id;
    }
}

/// What an input switched to must pass: packets of the same source at or
/// before the last one forwarded are repeats, held back (at most `budget`
/// of them, so a stream that only looked like RTP cannot stall).
#[derive(Debug, Clone, Copy)]
struct CatchUp {
    ssrc: u32,
    seq: u16,
    budget: u32,
}

/// Notes `switch`, if any: from then on, until the input switched to
/// passes `last`, what it repeats is held back.
fn note_switch(switch: Option<Switch>, last: LastForwarded, catch_up: &mut Option<CatchUp>, to: &mut Vec<Switch>) {
    if let Some(s) = switch {
        *catch_up = match last.id {
            Some((ssrc, seq)) if last.in_sequence => Some(CatchUp {
                ssrc,
                seq,
                budget: 0x8000,
            }),
            _ => None,
        };
        to.push(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rtp(seq: u16) -> Vec<u8> {
        let mut b = vec![0u8; 40];
        RtpHeader::write(&mut b, 96, seq, u32::from(seq) * 90, 7);
        b
    }

    const MS: u64 = 1_000_000;

    /// A failover of 200 ms loss of signal and 1 s hold.
    const FAILOVER: Mode = Mode::Failover {
        loss_of_signal_ms: 200,
        hold_ms: 1000,
        error_threshold: None,
    };

    #[test]
    fn a_merge_forwards_each_sequence_number_once_in_order_and_counts_by_input() {
        let mut c: Combine<u16> = Combine::new(Mode::Merge { differential_ms: 10 }, 2);
        let mut out = Vec::new();
        // The first packet is held for one differential; its copy is a
        // duplicate.
        assert_eq!(c.packet(0, &rtp(100), 0, || 100, &mut out), Take::Queued);
        assert_eq!(c.packet(1, &rtp(100), MS, || 100, &mut out), Take::Queued);
        assert!(out.is_empty());
        c.poll(10 * MS, &mut out);
        assert_eq!(out, [100]);
        out.clear();
        // Path 0 misses 101; path 1 brings it.
        c.packet(0, &rtp(102), 11 * MS, || 102, &mut out);
        c.packet(1, &rtp(101), 12 * MS, || 101, &mut out);
        c.packet(1, &rtp(102), 12 * MS, || 102, &mut out);
        assert_eq!(out, [101, 102]);
        assert_eq!(c.packet(0, b"not rtp", 13 * MS, || 0, &mut out), Take::NotRtp);
        let d = c.deltas();
        assert!(d.inputs.contains(&(0, InputCounter::Forwarded, 2)), "{d:?}");
        assert!(d.inputs.contains(&(1, InputCounter::Forwarded, 1)), "{d:?}");
        assert!(d.inputs.contains(&(1, InputCounter::Duplicates, 2)), "{d:?}");
        assert!(d.rule.is_empty());
        // Both miss 103: skipped after the differential, lost once.
        out.clear();
        c.packet(0, &rtp(104), 20 * MS, || 104, &mut out);
        c.packet(1, &rtp(104), 21 * MS, || 104, &mut out);
        assert!(out.is_empty());
        assert_eq!(c.deadline(), Some(30 * MS));
        c.poll(30 * MS, &mut out);
        assert_eq!(out, [104]);
        let d = c.deltas();
        assert_eq!(d.rule, [(RuleCounter::Lost, 1)]);
        // Told once: nothing new.
        assert_eq!(c.deltas(), Deltas::default());
        assert!(c.force(Some(1), 0).is_err());
    }

    #[test]
    fn after_a_switch_a_failover_does_not_send_again_what_the_input_before_sent() {
        let mut c: Combine<()> = Combine::new(FAILOVER, 2);
        let mut out = Vec::new();
        // Input 0 is ahead: it has sent 1..=10 when input 1 has sent 1..=6.
        for q in 1..=10u16 {
            assert_eq!(c.packet(0, &rtp(q), u64::from(q) * MS, || (), &mut out), Take::Now);
        }
        for q in 1..=6u16 {
            assert_eq!(c.packet(1, &rtp(q), u64::from(q) * MS, || (), &mut out), Take::Dropped);
        }
        assert_eq!(c.forced(), None);
        c.force(Some(1), 11 * MS).expect("failover");
        assert_eq!(c.forced(), Some(1));
        // 7..=10 came from input 0 already; 11 on is new.
        let taken: Vec<Take> = (7..=12u16)
            .map(|q| c.packet(1, &rtp(q), 12 * MS, || (), &mut out))
            .collect();
        assert_eq!(
            taken,
            [
                Take::Dropped,
                Take::Dropped,
                Take::Dropped,
                Take::Dropped,
                Take::Now,
                Take::Now
            ]
        );
        let d = c.deltas();
        assert!(d.inputs.contains(&(1, InputCounter::Duplicates, 4)), "{d:?}");
        assert!(d.inputs.contains(&(1, InputCounter::Forwarded, 2)), "{d:?}");
        // Back to input 0, which is ahead: nothing held back, nothing lost
        // that it brings.
        c.force(Some(0), 13 * MS).expect("failover");
        assert_eq!(c.packet(0, &rtp(13), 13 * MS, || (), &mut out), Take::Now);
        // A sender restart (another SSRC) is not a repeat.
        c.force(Some(1), 14 * MS).expect("failover");
        let mut other = vec![0u8; 40];
        RtpHeader::write(&mut other, 96, 1, 0, 8);
        assert_eq!(c.packet(1, &other, 14 * MS, || (), &mut out), Take::Now);
    }

    #[test]
    fn a_payload_that_only_looks_like_rtp_is_never_held_back_after_a_switch() {
        let mut c: Combine<()> = Combine::new(FAILOVER, 2);
        let mut out = Vec::new();
        // The same bytes every time: an "RTP header" whose sequence never
        // moves.
        let same = rtp(5);
        for t in 0..5 {
            assert_eq!(c.packet(0, &same, t * MS, || (), &mut out), Take::Now);
        }
        c.force(Some(1), 6 * MS).expect("failover");
        for t in 6..10 {
            assert_eq!(c.packet(1, &same, t * MS, || (), &mut out), Take::Now);
        }
    }

    #[test]
    fn an_arbitration_forwards_first_copies_at_once_and_counts_each_line() {
        let framing = crate::arbitrate::framing::Framing::Mdp3;
        let mut c: Combine<()> = Combine::new(
            Mode::Arbitrate {
                framing,
                window: crate::arbitrate::DEFAULT_WINDOW,
            },
            2,
        );
        let mut out = Vec::new();
        let mdp3 = |seq: u32| {
            let mut p = seq.to_le_bytes().to_vec();
            p.extend_from_slice(&[0; 10]);
            p
        };
        assert_eq!(c.packet(0, &mdp3(1), 0, || (), &mut out), Take::Now);
        assert_eq!(c.packet(1, &mdp3(1), MS, || (), &mut out), Take::Dropped);
        // A loses 2; B brings it first. Both lose 3.
        assert_eq!(c.packet(0, &mdp3(4), 2 * MS, || (), &mut out), Take::Now);
        assert_eq!(c.packet(1, &mdp3(2), 3 * MS, || (), &mut out), Take::Now);
        assert_eq!(c.packet(1, &mdp3(4), 3 * MS, || (), &mut out), Take::Dropped);
        assert_eq!(c.packet(1, b"short", 3 * MS, || (), &mut out), Take::Dropped);
        assert!(out.is_empty(), "an arbitration keeps nothing");
        assert_eq!(c.deadline(), None);
        let d = c.deltas();
        for want in [
            (0, InputCounter::Forwarded, 2),
            (1, InputCounter::Forwarded, 1),
            (1, InputCounter::Duplicates, 2),
        ] {
            assert!(d.inputs.contains(&want), "{want:?} in {d:?}");
        }
        for want in [
            (0, LineCounter::Messages, 2),
            (0, LineCounter::Gaps, 2),
            (1, LineCounter::Gaps, 1),
            (1, LineCounter::Malformed, 1),
        ] {
            assert!(d.lines.contains(&want), "{want:?} in {d:?}");
        }
        // 2 and 3 went past unbrought; 2 was filled.
        assert_eq!(d.rule, [(RuleCounter::GapsOpened, 2), (RuleCounter::GapsFilled, 1)]);
        assert_eq!(c.deltas(), Deltas::default());
        let lags = c.lags(4 * MS).expect("lags");
        assert_eq!((lags[0].samples, lags[1].samples), (0, 2));
        assert!(c.force(Some(1), 0).is_err());
    }

    #[test]
    fn a_failover_forwards_the_active_input_and_switches_on_loss_of_signal() {
        let mut c: Combine<()> = Combine::new(FAILOVER, 2);
        let mut out = Vec::new();
        let p = rtp(1);
        assert_eq!(c.packet(0, &p, 0, || (), &mut out), Take::Now);
        assert_eq!(c.packet(1, &p, MS, || (), &mut out), Take::Dropped);
        assert_eq!(c.deltas().active, 1);
        // The primary goes quiet; the backup's next packet after the
        // loss-of-signal time is forwarded.
        assert_eq!(c.packet(1, &p, 150 * MS, || (), &mut out), Take::Dropped);
        assert_eq!(c.packet(1, &p, 201 * MS, || (), &mut out), Take::Now);
        let s = c.take_switches();
        assert_eq!((s.len(), s[0].from, s[0].to), (1, 0, 1));
        let d = c.deltas();
        assert_eq!((d.active, d.rule.clone()), (2, vec![(RuleCounter::Switches, 1)]));
        // Forced back, and the choice given back.
        c.force(Some(0), 300 * MS).expect("failover");
        assert_eq!(c.packet(0, &p, 301 * MS, || (), &mut out), Take::Now);
        assert!(c.force(Some(5), 0).is_err());
        assert!(out.is_empty(), "a failover keeps nothing");
    }
}
