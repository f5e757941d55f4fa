//! A/B line arbitration of sequenced market-data feeds, without I/O.
//! Exchanges send every feed twice, on an A and a B line; the first copy
//! of each sequence number goes out at once, later copies are dropped.
//! Nothing is ever held back for a gap: a consumer recovers what neither
//! line brought as it always has (a retransmission request, a snapshot).
//!
//! - [`framing`]: where each feed keeps its sequence number, message
//!   count, unit and session.
//! - [`window`]: the slots that remember which sequence numbers came, per
//!   unit; the eBPF data path keeps the same words.
//! - [`race`]: by how much each line's copies came after the first.
//!
//! Per unit, each line follows its own sequence: messages, gaps (numbers
//! it skipped), duplicates within it. A line that jumps back by
//! [`RESET_BACK`] or more has been reset (CME's weekly reset, a new
//! trading day) when the packet is sequence number 1, when another line
//! was reset already, or when the line's next packet follows it; until
//! then it is a `stray`. A MoldUDP64 line (or a generic one with a
//! session) that changes session does so at sequence number 1, when
//! another line changed to that session already, or when its next packet
//! follows in the same new session; until then a packet of another
//! session is counted `wrong session`. A line that jumps ahead by a
//! window or more is followed once its next packet follows (a lone packet
//! that far ahead is a `stray`). A change of session or a reset starts a
//! new *generation*, a fresh window: a line that lags behind a reset still
//! fills the old generation's gaps, and a line that comes back after
//! missing resets joins the newest one.

pub mod framing;
pub mod race;
pub mod window;

use std::collections::BTreeMap;

use framing::{Framing, Kind, Malformed, Session};
use race::{LagSummary, Lags};
use window::{Claim, Window};

/// Sequence numbers a window spans when a rule names no other: 65,536.
pub const DEFAULT_WINDOW: u32 = 1 << 16;
/// The smallest and largest windows a rule may name.
pub const WINDOW_MIN: u32 = 1 << 10;
/// The largest window.
pub const WINDOW_MAX: u32 = 1 << 20;
/// Units one rule follows at most (a unit is one byte).
pub const MAX_UNITS: usize = 256;
/// A heartbeat copy: the same unit and sequence number as one that went
/// out less than this before.
pub const HEARTBEAT_COPY_NS: u64 = 500_000_000;

/// A line that jumps back by at least this many sequence numbers may
/// have been reset: at once if it is back at 1 (or 0) or another line
/// reset already, else once its next packet follows.
pub const RESET_BACK: u64 = 16;

/// What became of one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// It goes out: the first copy of its sequence number, or a heartbeat.
    Forward,
    /// A copy of a sequence number already forwarded (from another line,
    /// or this one).
    Copy,
    /// A window or more behind a sequence number already forwarded.
    TooLate,
    /// Far behind the line's sequence, before a reset is confirmed.
    Stray,
    /// Of another session, before the change is confirmed.
    WrongSession,
    /// Not the framing (too short, or its length field wrong).
    Malformed(Malformed),
}

/// One line's counts, since the rule started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LineCounts {
    /// Packets forwarded from it (it brought them first), heartbeats
    /// included.
    pub forwarded: u64,
    /// Copies of what a line brought before.
    pub copies: u64,
    /// A window or more behind.
    pub too_late: u64,
    /// Far behind its sequence before a reset was confirmed.
    pub strays: u64,
    /// Of another session before the change was confirmed.
    pub wrong_session: u64,
    /// Not the framing.
    pub malformed: u64,
    /// Messages (sequence numbers) its data packets carried.
    pub messages: u64,
    /// Heartbeats (and ends of session) it brought.
    pub heartbeats: u64,
    /// Sequence numbers it skipped (its gaps).
    pub gaps: u64,
    /// Packets at or behind what it had brought already (duplicates
    /// within the line).
    pub repeats: u64,
    /// Resets and session changes it made.
    pub resets: u64,
}

/// How many of a line's counts [`LineCounts::line_values`] gives.
pub const LINE_VALUES: usize = 7;

impl LineCounts {
    /// The line's own counts in [`crate::stats::LineCounter`]'s order.
    pub fn line_values(&self) -> [u64; LINE_VALUES] {
        [
            self.messages,
            self.gaps,
            self.repeats,
            self.heartbeats,
            self.wrong_session,
            self.malformed,
            self.resets,
        ]
    }
}

/// What a packet still pending confirmation would start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pending {
    /// A reset, if the line's next packet is `next`.
    Reset { next: u64 },
    /// A change to `session`, if the next packet is `next` of it.
    Session { session: Session, next: u64 },
    /// A jump ahead by a window or more, if the next packet is `next`.
    Ahead { next: u64 },
}

/// One line's place in the sequence of one unit.
#[derive(Debug, Clone, Copy, Default)]
struct LineState {
    /// Seen at all (else it takes the unit's generation at its first).
    started: bool,
    era: u8,
    session: Option<Session>,
    /// The sequence number it should bring next.
    next: Option<u64>,
    pending: Option<Pending>,
}

/// The rule's part of one generation: the first number and the end of
/// what went out, for the numbers neither line brought.
#[derive(Debug, Clone, Copy)]
struct Reach {
    era: u8,
    base: u64,
    high: u64,
}

/// One unit of a rule.
#[derive(Debug)]
struct Unit {
    window: Window,
    /// The newest generation any line is in, and its session.
    era: u8,
    session: Option<Session>,
    lines: Vec<LineState>,
    /// Of the newest generation and the one before.
    reach: [Option<Reach>; 2],
    /// The last heartbeat (or end of session) that went out: its
    /// sequence number, which of the two, and when.
    heartbeat: Option<(u64, Kind, u64)>,
}

/// A serial-number comparison of generations: `a` is newer than `b`.
fn newer(a: u8, b: u8) -> bool {
    (a.wrapping_sub(b) as i8) > 0
}

/// The arbitration of one rule's lines.
#[derive(Debug)]
pub struct Arbiter {
    framing: Framing,
    bits: u32,
    window: u64,
    units: BTreeMap<u32, Unit>,
    counts: Vec<LineCounts>,
    lags: Vec<Lags>,
    /// Sequence numbers that went past without any line bringing them
    /// (opened), and of those, how many a line brought later (filled).
    opened: u64,
    filled: u64,
}

impl Arbiter {
    /// The arbitration of `lines` lines of `framing`, each unit's window
    /// spanning `window` sequence numbers (a power of two).
    pub fn new(framing: Framing, window: u32, lines: usize) -> Self {
        let window = window.clamp(WINDOW_MIN, WINDOW_MAX).next_power_of_two();
        let lines = lines.max(1);
        Arbiter {
            framing,
            bits: window.trailing_zeros(),
            window: u64::from(window),
            units: BTreeMap::new(),
            counts: vec![LineCounts::default(); lines],
            lags: vec![Lags::default(); lines],
            opened: 0,
            filled: 0,
        }
    }

    /// The framing it reads.
    pub fn framing(&self) -> Framing {
        self.framing
    }

    /// How many lines.
    pub fn lines(&self) -> usize {
        self.counts.len()
    }

    /// Each line's counts.
    pub fn counts(&self) -> &[LineCounts] {
        &self.counts
    }

    /// Sequence numbers no line brought (so far: a late line may still
    /// bring some).
    pub fn lost(&self) -> u64 {
        self.opened.saturating_sub(self.filled)
    }

    /// The numbers that went past unbrought, and how many of them a line
    /// brought later: `lost` is the difference (two counts that only add).
    pub fn gaps(&self) -> (u64, u64) {
        (self.opened, self.filled)
    }

    /// How much each line's copies lagged the first, over the last few
    /// seconds at `now_ns`.
    pub fn lags(&mut self, now_ns: u64) -> Vec<LagSummary> {
        self.lags.iter_mut().map(|l| l.summary(now_ns)).collect()
    }

    /// The packet whose UDP payload is `payload` came on `line` at
    /// `now_ns`: forward it or not.
    pub fn packet(&mut self, line: usize, payload: &[u8], now_ns: u64) -> Verdict {
        let line = line.min(self.counts.len() - 1);
        let p = match self.framing.parse(payload) {
            Ok(p) => p,
            Err(m) => {
                self.counts[line].malformed += 1;
                return Verdict::Malformed(m);
            }
        };
        if !self.units.contains_key(&p.unit) && self.units.len() >= MAX_UNITS {
            self.counts[line].strays += 1;
            return Verdict::Stray;
        }
        let lines = self.counts.len();
        let bits = self.bits;
        let unit = self.units.entry(p.unit).or_insert_with(|| Unit {
            window: Window::new(bits),
            era: 0,
            session: None,
            lines: vec![LineState::default(); lines],
            reach: [None, None],
            heartbeat: None,
        });
        let c = &mut self.counts[line];
        let st = &mut unit.lines[line];
        if !st.started {
            st.started = true;
            st.era = unit.era;
            st.session = Some(p.session);
            unit.session.get_or_insert(p.session);
        }
        let data = p.kind == Kind::Data;
        let end = p.seq.saturating_add(u64::from(p.messages));

        // A change of session, or a reset: at sequence number 1 at once,
        // else when the line's next packet confirms it.
        let other_session = st.session.is_some_and(|s| s != p.session);
        let far_back = data && !other_session && st.next.is_some_and(|n| p.seq.saturating_add(RESET_BACK) <= n);
        if other_session || far_back {
            // Another line is in a newer generation already (of this
            // session, if it is a change of session).
            let joins = newer(unit.era, st.era) && (!other_session || unit.session == Some(p.session));
            let confirmed = p.seq <= 1
                || joins
                || match st.pending {
                    Some(Pending::Reset { next }) => far_back && next == p.seq,
                    Some(Pending::Session { session, next }) => other_session && session == p.session && next == p.seq,
                    Some(Pending::Ahead { .. }) | None => false,
                };
            if !confirmed {
                st.pending = Some(if other_session {
                    Pending::Session {
                        session: p.session,
                        next: end,
                    }
                } else {
                    Pending::Reset { next: end }
                });
                return if other_session {
                    c.wrong_session += 1;
                    Verdict::WrongSession
                } else {
                    c.strays += 1;
                    Verdict::Stray
                };
            }
            // A new generation: the unit's newest if it is ahead (the
            // other line reset first), else the next.
            let next_era = st.era.wrapping_add(1);
            st.era = if newer(unit.era, next_era) { unit.era } else { next_era };
            if newer(st.era, unit.era) {
                unit.era = st.era;
                unit.session = Some(p.session);
            }
            st.session = Some(p.session);
            st.next = None;
            c.resets += 1;
        }
        // A jump ahead by a window or more is taken once the line's next
        // packet follows it: a lone packet that far ahead (a corrupt one,
        // another feed's) must not move the line, or its next packets
        // would look like a reset.
        let far_ahead =
            data && !other_session && !far_back && st.next.is_some_and(|n| p.seq >= n.saturating_add(self.window));
        if far_ahead && st.pending != Some(Pending::Ahead { next: p.seq }) {
            st.pending = Some(Pending::Ahead { next: end });
            c.strays += 1;
            return Verdict::Stray;
        }
        st.pending = None;

        // The line's own sequence.
        if data {
            c.messages += u64::from(p.messages);
        } else {
            c.heartbeats += 1;
        }
        match st.next {
            Some(n) if p.seq > n => c.gaps += p.seq - n,
            Some(n) if data && end <= n => c.repeats += 1,
            _ => {}
        }
        st.next = Some(st.next.map_or(end, |n| n.max(end)));
        let era = st.era;

        if !data {
            // A heartbeat carries the next number: what it skips past is
            // a gap of the rule's too. Each goes out once.
            reach(unit, era, p.seq, p.seq, &mut self.opened, &mut self.filled);
            return match unit.heartbeat {
                Some((seq, kind, at))
                    if seq == p.seq && kind == p.kind && now_ns.saturating_sub(at) < HEARTBEAT_COPY_NS =>
                {
                    c.copies += 1;
                    Verdict::Copy
                }
                _ => {
                    unit.heartbeat = Some((p.seq, p.kind, now_ns));
                    c.forwarded += 1;
                    Verdict::Forward
                }
            };
        }
        match unit.window.claim(era, p.seq, line, now_ns) {
            Claim::First => {
                reach(unit, era, p.seq, end, &mut self.opened, &mut self.filled);
                c.forwarded += 1;
                Verdict::Forward
            }
            Claim::Copy { line: first, lag_ns } => {
                c.copies += 1;
                if first != line {
                    self.lags[line].note(lag_ns, now_ns);
                }
                Verdict::Copy
            }
            Claim::TooLate => {
                c.too_late += 1;
                Verdict::TooLate
            }
        }
    }
}

/// Follows how far the rule's generation `era` of `unit` reached, given
/// that `seq..end` went out first (a heartbeat: `end == seq`): numbers it
/// jumped over are opened, a first copy behind the reach fills.
fn reach(unit: &mut Unit, era: u8, seq: u64, end: u64, opened: &mut u64, filled: &mut u64) {
    let slot = &mut unit.reach[usize::from(era & 1)];
    match slot {
        Some(r) if r.era == era => {
            if seq > r.high {
                *opened += seq - r.high;
            } else if end <= r.high && seq >= r.base {
                *filled += end - seq;
            }
            r.high = r.high.max(end);
        }
        _ => {
            *slot = Some(Reach {
                era,
                base: seq,
                high: end,
            })
        }
    }
}

#[cfg(test)]
mod tests;
