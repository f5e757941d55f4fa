//! The rules with several inputs, as one worker runs them: each rule's
//! [`Combine`] state, kept across tables while its mode and inputs stay
//! the same (a reload that does not touch the rule, or changes another
//! rule, does not disturb its stream), copies of the frames a merge holds,
//! and the counters of each input.

use mcr_core::combine::{Combine, Take};
use mcr_core::dispatch::Taken;
use mcr_core::forward::Datagram;
use mcr_core::rule::Mode;
use mcr_core::stats::{InputCounter, RuleCounter};
use mcr_core::table::{CompiledRule, MatchTable};
use rustc_hash::FxHashMap;

use super::counts::Counts;

/// A frame a merge holds: a copy of its bytes and where its datagram is.
#[derive(Debug)]
pub struct Held {
    frame: Vec<u8>,
    datagram: Datagram,
}

#[derive(Debug)]
struct Rule {
    /// The rule's index in the table the worker runs.
    index: usize,
    state: Combine<Held>,
}

/// Every rule with several inputs, by statistics slot.
#[derive(Debug, Default)]
pub struct Redundancy {
    rules: FxHashMap<u32, Rule>,
    /// Frame buffers to copy into, from frames already sent.
    spare: Vec<Vec<u8>>,
    out: Vec<Held>,
}

/// The most spare frame buffers kept.
const SPARE: usize = 1024;

impl Redundancy {
    /// Follows `table`: a rule whose mode and number of inputs did not
    /// change keeps its state (and what it holds); others start afresh.
    /// A failover held to an input by `mcrctl switch` is held to it (or
    /// let go) at `now`.
    pub fn reconcile(&mut self, table: &MatchTable, now: u64) {
        let mut next = FxHashMap::default();
        for (index, r) in table.rules().iter().enumerate() {
            let Some(red) = &r.redundancy else { continue };
            let inputs = red.inputs().max(1);
            let mut state = match self.rules.remove(&r.slot) {
                Some(old) if old.state.mode() == red.mode && old.state.inputs() == inputs => old.state,
                _ => Combine::new(red.mode, inputs),
            };
            if state.forced() != red.forced
                && let Err(e) = state.force(red.forced, now)
            {
                tracing::warn!("rule `{}`: {e}", r.name);
            }
            next.insert(r.slot, Rule { index, state });
        }
        self.rules = next;
    }

    /// The frame `frame` that `taken` found a rule with several inputs for
    /// arrived at `now`: counts it for its input and sends, through
    /// `send`, whatever the rule forwards now.
    pub fn packet(
        &mut self,
        taken: &Taken<'_>,
        frame: &[u8],
        now: u64,
        counts: &Counts<'_>,
        mut send: impl FnMut(&CompiledRule, &[u8], &Datagram),
    ) {
        let rule = taken.rule;
        let (Some(red), Some(r)) = (&rule.redundancy, self.rules.get_mut(&rule.slot)) else {
            return;
        };
        let d = &taken.datagram;
        let slot = red.input_slots.get(taken.input).copied();
        if let Some(s) = slot {
            counts.input(s, InputCounter::Packets, 1);
            counts.input(s, InputCounter::Bytes, d.payload_len as u64);
        }
        let payload = &frame[d.payload_at..d.payload_at + d.payload_len];
        let spare = &mut self.spare;
        let copy = || {
            let mut b = spare.pop().unwrap_or_default();
            b.clear();
            b.extend_from_slice(frame);
            Held { frame: b, datagram: *d }
        };
        match r.state.packet(taken.input, payload, now, copy, &mut self.out) {
            Take::Now => send(rule, frame, d),
            Take::Queued | Take::Dropped => {}
            Take::NotRtp => {
                if let Some(s) = slot {
                    counts.input(s, InputCounter::NotRtp, 1);
                }
            }
        }
        Self::settle(r, rule, &mut self.out, &mut self.spare, counts, &mut send);
    }

    /// Sends what time has released by `now` (gaps a merge gives up) and
    /// notes a failover's switches.
    pub fn poll(
        &mut self,
        table: &MatchTable,
        now: u64,
        counts: &Counts<'_>,
        mut send: impl FnMut(&CompiledRule, &[u8], &Datagram),
    ) {
        for r in self.rules.values_mut() {
            if r.state.deadline().is_none_or(|d| d > now) {
                continue;
            }
            let Some(rule) = table.rules().get(r.index) else {
                continue;
            };
            r.state.poll(now, &mut self.out);
            Self::settle(r, rule, &mut self.out, &mut self.spare, counts, &mut send);
        }
    }

    /// The line race of each arbitrated rule (by its slot) at `now`: by
    /// how much each line's copies lagged the first, recently.
    pub fn race(&mut self, now: u64) -> Vec<(u32, Vec<mcr_core::arbitrate::race::LagSummary>)> {
        self.rules
            .iter_mut()
            .filter_map(|(&slot, r)| Some((slot, r.state.lags(now)?)))
            .collect()
    }

    /// The earliest time [`Redundancy::poll`] has something to do.
    pub fn deadline(&self) -> Option<u64> {
        self.rules.values().filter_map(|r| r.state.deadline()).min()
    }

    /// Sends what the state released, gives its buffers back, and adds
    /// what its counts gained.
    fn settle(
        r: &mut Rule,
        rule: &CompiledRule,
        out: &mut Vec<Held>,
        spare: &mut Vec<Vec<u8>>,
        counts: &Counts<'_>,
        send: &mut impl FnMut(&CompiledRule, &[u8], &Datagram),
    ) {
        for h in out.drain(..) {
            send(rule, &h.frame, &h.datagram);
            if spare.len() < SPARE {
                spare.push(h.frame);
            }
        }
        let d = r.state.deltas();
        if let Some(red) = &rule.redundancy {
            for (i, c, n) in d.inputs {
                if let Some(&s) = red.input_slots.get(i) {
                    counts.input(s, c, n);
                }
            }
            for (i, c, n) in d.lines {
                if let Some(s) = red.line_slot(i) {
                    counts.line(s, c, n);
                }
            }
            if matches!(red.mode, Mode::Failover { .. }) {
                counts.set_rule(rule.slot, RuleCounter::Active, d.active);
            }
        }
        for (c, n) in d.rule {
            counts.rule(rule.slot, c, n);
        }
        for s in r.state.take_switches() {
            tracing::warn!(
                "rule `{}`: input {} -> input {} ({})",
                rule.name,
                s.from + 1,
                s.to + 1,
                match s.why {
                    mcr_core::failover::Why::LossOfSignal => "loss of signal",
                    mcr_core::failover::Why::Errors => "RTP gaps past the threshold",
                    mcr_core::failover::Why::PrimaryBack => "the primary was healthy for the hold time",
                    mcr_core::failover::Why::Forced => "forced",
                }
            );
        }
    }
}
