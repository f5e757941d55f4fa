//! Where a worker counts ([`Counts`]): its block of the shared counters,
//! which every part that forwards (the rings' sends, SRT, RIST) adds to.

use mcr_core::stats::{InputCounter, LineCounter, OutputCounter, RuleCounter, StatsLayout, WorkerCounter};
use mcr_sys::shm::SharedCounters;

/// Where a worker counts.
pub struct Counts<'a> {
    pub counters: &'a SharedCounters,
    pub layout: &'a StatsLayout,
    pub worker: usize,
}

impl Counts<'_> {
    #[inline]
    pub fn output(&self, slot: u32, c: OutputCounter, v: u64) {
        self.counters.add(self.layout.output(self.worker, slot, c), v);
    }

    #[inline]
    pub fn worker(&self, c: WorkerCounter, v: u64) {
        self.counters.add(self.layout.worker(self.worker, c), v);
    }

    #[inline]
    pub fn rule(&self, slot: u32, c: RuleCounter, v: u64) {
        self.counters.add(self.layout.rule(self.worker, slot, c), v);
    }

    #[inline]
    pub fn input(&self, slot: u32, c: InputCounter, v: u64) {
        self.counters.add(self.layout.input(self.worker, slot, c), v);
    }

    /// Adds `v` to line counter `c` of the arbitrated input whose second
    /// slot is `slot`.
    #[inline]
    pub fn line(&self, slot: u32, c: LineCounter, v: u64) {
        self.counters.add(self.layout.line(self.worker, slot, c), v);
    }

    /// Whether the relay is standby (the supervisor says so in the
    /// worker's block): then nothing is sent, and what would be is counted
    /// as held.
    #[inline]
    pub fn standby(&self) -> bool {
        self.counters
            .get(self.layout.worker(self.worker, WorkerCounter::Standby))
            != 0
    }

    /// Sets a rule's value (not a count), such as its active input.
    pub fn set_rule(&self, slot: u32, c: RuleCounter, v: u64) {
        self.counters.set(self.layout.rule(self.worker, slot, c), v);
    }
}
