//! Statistics: the supervisor sums what workers count in shared memory,
//! samples the sums once a second for rates, and answers `stats`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Instant;

use mcr_core::control::{
    DatapathStats, HISTORY_SAMPLES, InputHealthStats, InputStats, OutputStats, RateHistory, RedundancyStats,
    RtpHealthStats, RuleHistory, RuleStats, StatsReport, TsHealthStats, WorkerStats,
};
use mcr_core::snapshot::SlottedRule;
use mcr_core::stats::{
    HEALTH_INPUTS, HealthCounter, InputCounter, LineCounter, OutputCounter, RuleCounter, StatsLayout, WorkerCounter,
};
use mcr_sys::bpf::MappedCounters;
use mcr_sys::shm::SharedCounters;

/// Where the counters are: the workers' blocks in shared memory, and the
/// eBPF data path's one block (laid out as a worker's) in its map.
#[derive(Debug, Clone, Copy)]
pub struct Counters<'a> {
    /// The workers'.
    pub shm: &'a SharedCounters,
    /// The eBPF program's, when it runs.
    pub kernel: Option<&'a MappedCounters>,
}

impl<'a> Counters<'a> {
    /// The workers' block, and the eBPF data path's when it is loaded.
    pub fn of(shm: &'a SharedCounters, kernel: Option<&'a super::datapath::Datapath>) -> Self {
        Counters {
            shm,
            kernel: kernel.map(super::datapath::Datapath::counters),
        }
    }
}

/// What is sampled for rates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    Rule(u32),
    Output(u32),
    Input(u32),
    Worker(usize),
    Kernel,
}

/// Packets and bytes per sampled thing.
type Sample = HashMap<Key, (u64, u64)>;

/// Sums and rates.
#[derive(Debug)]
pub struct Stats {
    layout: StatsLayout,
    started: Instant,
    last: Option<(Instant, Sample)>,
    rates: HashMap<Key, (f64, f64)>,
    interval_s: f64,
    /// Each rule's recent rates (by name: a changed rule keeps its
    /// history), oldest first.
    history: HashMap<String, VecDeque<(f64, f64)>>,
    /// Counts carried over from the mcrd before (a restart).
    carried: super::carry::Carried,
}

impl Stats {
    /// Statistics over `layout`.
    pub fn new(layout: StatsLayout) -> Self {
        Stats {
            layout,
            started: Instant::now(),
            last: None,
            rates: HashMap::new(),
            interval_s: 0.0,
            history: HashMap::new(),
            carried: super::carry::Carried::default(),
        }
    }

    /// The layout of the workers' statistics memory.
    pub fn layout(&self) -> StatsLayout {
        self.layout
    }

    /// What was carried over from before, to add to and hand on.
    pub fn carried(&self) -> &super::carry::Carried {
        &self.carried
    }

    /// The same, to add to.
    pub fn carried_mut(&mut self) -> &mut super::carry::Carried {
        &mut self.carried
    }

    /// The workers' counter `i`, with what was carried over to it.
    fn shm(&self, c: Counters<'_>, i: usize) -> u64 {
        c.shm.get(i) + self.carried.workers(i)
    }

    /// The eBPF data path's counter `i`, with what was carried over to it
    /// (even when this mcrd runs without one).
    fn bpf(&self, c: Counters<'_>, i: usize) -> u64 {
        c.kernel.map_or(0, |m| m.get(i)) + self.carried.kernel(i)
    }

    fn sum_rule(&self, c: Counters<'_>, slot: u32, k: RuleCounter) -> u64 {
        let workers: u64 = (0..self.layout.workers)
            .map(|w| self.shm(c, self.layout.rule(w, slot, k)))
            .sum();
        workers + self.bpf(c, self.layout.rule(0, slot, k))
    }

    fn sum_output(&self, c: Counters<'_>, slot: u32, k: OutputCounter) -> u64 {
        let workers: u64 = (0..self.layout.workers)
            .map(|w| self.shm(c, self.layout.output(w, slot, k)))
            .sum();
        workers + self.bpf(c, self.layout.output(0, slot, k))
    }

    fn sum_input(&self, c: Counters<'_>, slot: u32, k: InputCounter) -> u64 {
        let workers: u64 = (0..self.layout.workers)
            .map(|w| self.shm(c, self.layout.input(w, slot, k)))
            .sum();
        // (An arbitrated rule's lines are the eBPF data path's too.)
        workers + self.bpf(c, self.layout.input(0, slot, k))
    }

    /// The line health of an arbitrated input whose second slot is
    /// `slot` (the race is the worker's to tell: see `fill_links`).
    fn line_stats(&self, c: Counters<'_>, slot: u32) -> mcr_core::control::LineStats {
        let n = |k: LineCounter| -> u64 {
            let workers: u64 = (0..self.layout.workers)
                .map(|w| self.shm(c, self.layout.line(w, slot, k)))
                .sum();
            workers + self.bpf(c, self.layout.line(0, slot, k))
        };
        mcr_core::control::LineStats {
            messages: n(LineCounter::Messages),
            gaps: n(LineCounter::Gaps),
            duplicates: n(LineCounter::Repeats),
            heartbeats: n(LineCounter::Heartbeats),
            wrong_session: n(LineCounter::WrongSession),
            malformed: n(LineCounter::Malformed),
            resets: n(LineCounter::Resets),
            lag_samples: 0,
            lag_p50_us: 0.0,
            lag_p99_us: 0.0,
        }
    }

    /// The health of input `i` of the rule `r`, if its workers have seen
    /// a packet of it: counts summed over the workers, values (what it
    /// carries, jitter, last arrival) from the worker that saw the latest.
    fn input_health(&self, c: Counters<'_>, r: &SlottedRule, i: usize, input: String) -> InputHealthStats {
        let get = |w: usize, k: HealthCounter| self.shm(c, self.layout.health(w, r.slot, i, k));
        let sum = |k: HealthCounter| (0..self.layout.workers).map(|w| get(w, k)).sum::<u64>();
        let latest = (0..self.layout.workers).max_by_key(|&w| get(w, HealthCounter::LastArrivalNs));
        let value = |k: HealthCounter| latest.map_or(0, |w| get(w, k));
        let last = value(HealthCounter::LastArrivalNs);
        let since_last_ms = (last > 0).then(|| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
            now.saturating_sub(last) / 1_000_000
        });
        // The workers write an input's last arrival at least every 50 ms
        // while packets come: a shorter loss of signal is not told here.
        let lost_after_ms = match r.rule.redundancy.as_ref().map(|x| x.mode) {
            Some(mcr_core::rule::Mode::Failover { loss_of_signal_ms, .. }) => {
                u64::from(loss_of_signal_ms).max(mcr_core::control::SIGNAL_SHORTEST_MS)
            }
            _ => mcr_core::control::SIGNAL_LOST_AFTER_MS,
        };
        let carries = value(HealthCounter::Carries);
        InputHealthStats {
            input,
            carries: ["none", "other", "rtp", "ts", "rtp-ts"]
                .get(usize::try_from(carries).unwrap_or(0))
                .unwrap_or(&"none")
                .to_string(),
            signal: since_last_ms.is_some_and(|ms| ms < lost_after_ms),
            since_last_ms,
            rtp: matches!(carries, 2 | 4).then(|| RtpHealthStats {
                lost: sum(HealthCounter::RtpLost),
                late: sum(HealthCounter::RtpLate),
                duplicates: sum(HealthCounter::RtpDuplicates),
                restarts: sum(HealthCounter::RtpRestarts),
                jitter_us: value(HealthCounter::RtpJitterNs) as f64 / 1000.0,
            }),
            ts: matches!(carries, 3 | 4).then(|| TsHealthStats {
                packets: sum(HealthCounter::TsPackets),
                sync_losses: sum(HealthCounter::TsSyncLosses),
                sync_byte_errors: sum(HealthCounter::TsSyncByteErrors),
                pat_errors: sum(HealthCounter::TsPatErrors),
                continuity_errors: sum(HealthCounter::TsContinuityErrors),
            }),
        }
    }

    /// A worker's counter.
    pub fn worker(&self, c: Counters<'_>, w: usize, k: WorkerCounter) -> u64 {
        self.shm(c, self.layout.worker(w, k))
    }

    /// The eBPF data path's own counter.
    fn kernel(&self, c: Counters<'_>, k: WorkerCounter) -> u64 {
        c.kernel.map(|_| self.bpf(c, self.layout.worker(0, k))).unwrap_or(0)
    }

    /// Zeroes slots before they are given to a new rule or output, and
    /// lets go of what was carried over to them.
    pub fn zero(&mut self, c: Counters<'_>, rules: &[u32], outputs: &[u32]) {
        let l = self.layout;
        let mut carried_at = Vec::new();
        for w in (0..l.workers).filter(|_| !self.carried.is_empty()) {
            for &s in rules {
                carried_at.extend(l.rule_sums(w, s));
                for i in 0..HEALTH_INPUTS {
                    carried_at.extend(l.health_sums(w, s, i));
                }
            }
            for &s in outputs {
                carried_at.extend(l.output_sums(w, s));
            }
        }
        self.carried.forget(carried_at);
        let blocks = (0..self.layout.workers)
            .map(|w| (w, Some(c.shm), None))
            .chain(c.kernel.map(|m| (0, None, Some(m))));
        for (w, shm, kernel) in blocks {
            let set = |i: usize| {
                if let Some(s) = shm {
                    s.set(i, 0);
                }
                if let Some(m) = kernel {
                    m.set(i, 0);
                }
            };
            for &s in rules {
                for k in [
                    RuleCounter::Packets,
                    RuleCounter::Bytes,
                    RuleCounter::Lost,
                    RuleCounter::Switches,
                    RuleCounter::Active,
                    RuleCounter::GapsOpened,
                    RuleCounter::GapsFilled,
                ] {
                    set(self.layout.rule(w, s, k));
                }
            }
            // The health of a rule slot's inputs is the workers' alone.
            if let Some(shm) = shm {
                for &s in rules {
                    for i in 0..HEALTH_INPUTS {
                        for k in HealthCounter::ALL {
                            shm.set(self.layout.health(w, s, i, k), 0);
                        }
                    }
                }
            }
            // An output slot counts an output or an input: the input's
            // counters fill the whole line, the output's are among them.
            for &s in outputs {
                for (k, _) in InputCounter::ALL {
                    set(self.layout.input(w, s, k));
                }
            }
        }
    }

    fn read(&self, c: Counters<'_>, rules: &[SlottedRule]) -> Sample {
        let mut m = HashMap::new();
        for r in rules {
            m.insert(
                Key::Rule(r.slot),
                (
                    self.sum_rule(c, r.slot, RuleCounter::Packets),
                    self.sum_rule(c, r.slot, RuleCounter::Bytes),
                ),
            );
            for &s in &r.output_slots {
                m.insert(
                    Key::Output(s),
                    (
                        self.sum_output(c, s, OutputCounter::Packets),
                        self.sum_output(c, s, OutputCounter::Bytes),
                    ),
                );
            }
            for &s in &r.input_slots {
                m.insert(
                    Key::Input(s),
                    (
                        self.sum_input(c, s, InputCounter::Packets),
                        self.sum_input(c, s, InputCounter::Bytes),
                    ),
                );
            }
        }
        for w in 0..self.layout.workers {
            m.insert(Key::Worker(w), (self.worker(c, w, WorkerCounter::RxFrames), 0));
        }
        m.insert(Key::Kernel, (self.kernel(c, WorkerCounter::RxFrames), 0));
        m
    }

    /// Takes a sample; rates are over the time since the previous one.
    pub fn sample(&mut self, c: Counters<'_>, rules: &[SlottedRule]) {
        let now = Instant::now();
        let cur = self.read(c, rules);
        if let Some((then, prev)) = &self.last {
            let dt = now.duration_since(*then).as_secs_f64().max(1e-6);
            self.interval_s = dt;
            self.rates = cur
                .iter()
                .map(|(k, &(p, b))| {
                    let (pp, pb) = prev.get(k).copied().unwrap_or((p, b));
                    (
                        *k,
                        (p.saturating_sub(pp) as f64 / dt, b.saturating_sub(pb) as f64 * 8.0 / dt),
                    )
                })
                .collect();
        }
        self.last = Some((now, cur));
        let live: std::collections::HashSet<&str> = rules.iter().map(|r| r.rule.name.as_str()).collect();
        self.history.retain(|name, _| live.contains(name.as_str()));
        for r in rules {
            let h = self.history.entry(r.rule.name.clone()).or_default();
            if h.len() == HISTORY_SAMPLES {
                h.pop_front();
            }
            h.push_back(self.rates.get(&Key::Rule(r.slot)).copied().unwrap_or((0.0, 0.0)));
        }
    }

    /// Each rule's highest bit rate of its recent samples, with `header`
    /// bytes more per packet (what the wire carries beyond the payload).
    pub fn peaks(&self, header: f64) -> impl Iterator<Item = (&str, f64)> {
        self.history.iter().map(move |(name, h)| {
            let peak = h.iter().map(|&(p, b)| b + p * header * 8.0).fold(0.0_f64, f64::max);
            (name.as_str(), peak)
        })
    }

    /// Each rule's recent rates (`history`).
    pub fn history(&self) -> RateHistory {
        RateHistory {
            // Sampled once a second (the last interval as measured).
            interval_s: if self.interval_s > 0.0 { self.interval_s } else { 1.0 },
            rules: self
                .history
                .iter()
                .map(|(name, h)| {
                    let rule = RuleHistory {
                        pps: h.iter().map(|&(p, _)| p).collect(),
                        bps: h.iter().map(|&(_, b)| b).collect(),
                    };
                    (name.clone(), rule)
                })
                .collect(),
        }
    }

    /// The answer to `stats` (the data path's interfaces and which rules it
    /// carries are the caller's to fill in).
    pub fn report(&self, c: Counters<'_>, rules: &[SlottedRule]) -> StatsReport {
        let rate = |k: Key| self.rates.get(&k).copied().unwrap_or((0.0, 0.0));
        let rules = rules
            .iter()
            .map(|r| {
                let (pps, bps) = rate(Key::Rule(r.slot));
                RuleStats {
                    name: r.rule.name.clone(),
                    disabled: !r.rule.enabled,
                    input: r.rule.input.to_string(),
                    packets: self.sum_rule(c, r.slot, RuleCounter::Packets),
                    bytes: self.sum_rule(c, r.slot, RuleCounter::Bytes),
                    pps,
                    bps,
                    outputs: r
                        .rule
                        .outputs
                        .iter()
                        .zip(&r.output_slots)
                        .map(|(o, &s)| {
                            let (pps, bps) = rate(Key::Output(s));
                            OutputStats {
                                output: o.name_text(),
                                disabled: !o.is_enabled(),
                                packets: self.sum_output(c, s, OutputCounter::Packets),
                                bytes: self.sum_output(c, s, OutputCounter::Bytes),
                                pps,
                                bps,
                                drops: OutputCounter::DROPS
                                    .iter()
                                    .map(|(k, name)| (name.to_string(), self.sum_output(c, s, *k)))
                                    .collect(),
                                held: self.sum_output(c, s, OutputCounter::Held),
                                srt: None,
                                rist: None,
                            }
                        })
                        .collect(),
                    problems: Vec::new(),
                    datapath: "packet".into(),
                    datapath_reason: None,
                    worker: None,
                    redundancy: r.rule.redundancy.as_ref().map(|red| {
                        let active = self.sum_rule(c, r.slot, RuleCounter::Active);
                        let arbitrate = matches!(red.mode, mcr_core::rule::Mode::Arbitrate { .. });
                        let n_inputs = r.rule.input_count();
                        RedundancyStats {
                            mode: red.mode.to_string(),
                            lost: if arbitrate {
                                self.sum_rule(c, r.slot, RuleCounter::GapsOpened)
                                    .saturating_sub(self.sum_rule(c, r.slot, RuleCounter::GapsFilled))
                            } else {
                                self.sum_rule(c, r.slot, RuleCounter::Lost)
                            },
                            switches: self.sum_rule(c, r.slot, RuleCounter::Switches),
                            // Only a failover has one (a rule that was one
                            // may have left it behind).
                            active: usize::try_from(active)
                                .ok()
                                .filter(|a| *a > 0 && matches!(red.mode, mcr_core::rule::Mode::Failover { .. })),
                            forced: r.forced_input.map(|i| i + 1),
                            inputs: r
                                .rule
                                .inputs()
                                .zip(&r.input_slots)
                                .enumerate()
                                .map(|(k, (i, &s))| {
                                    let (pps, bps) = rate(Key::Input(s));
                                    let n = |k| self.sum_input(c, s, k);
                                    InputStats {
                                        input: i.to_string(),
                                        packets: n(InputCounter::Packets),
                                        bytes: n(InputCounter::Bytes),
                                        pps,
                                        bps,
                                        forwarded: n(InputCounter::Forwarded),
                                        duplicates: n(InputCounter::Duplicates),
                                        filled: n(InputCounter::Filled),
                                        too_late: n(InputCounter::TooLate),
                                        strays: n(InputCounter::Strays),
                                        not_rtp: n(InputCounter::NotRtp),
                                        line: r
                                            .input_slots
                                            .get(n_inputs + k)
                                            .filter(|_| arbitrate)
                                            .map(|&l| self.line_stats(c, l)),
                                    }
                                })
                                .collect(),
                        }
                    }),
                    // An arbitrated line's health is its line's figures
                    // (its signal: its rate), whichever path carries it.
                    health: if r.rule.health
                        && !matches!(
                            r.rule.redundancy.as_ref().map(|x| x.mode),
                            Some(mcr_core::rule::Mode::Arbitrate { .. })
                        ) {
                        r.rule
                            .inputs()
                            .enumerate()
                            .map(|(i, input)| self.input_health(c, r, i, input.to_string()))
                            .collect()
                    } else {
                        Vec::new()
                    },
                    health_not_followed: (!r.rule.health).then(|| "turned off (health = false)".to_string()),
                    srt_inputs: Vec::new(),
                    rist_inputs: Vec::new(),
                }
            })
            .collect();
        let workers = (0..self.layout.workers)
            .map(|w| WorkerStats {
                index: w,
                rx_frames: self.worker(c, w, WorkerCounter::RxFrames),
                rx_bytes: self.worker(c, w, WorkerCounter::RxBytes),
                tx_packets: self.worker(c, w, WorkerCounter::TxPackets),
                ring_drops: self.worker(c, w, WorkerCounter::RingDrops),
                ring_errors: self.worker(c, w, WorkerCounter::RingErrors),
                drops: WorkerCounter::DROPS
                    .iter()
                    .map(|(k, name)| (name.to_string(), self.worker(c, w, *k)))
                    .collect::<BTreeMap<_, _>>(),
                rx_pps: rate(Key::Worker(w)).0,
                cpu_s: 0.0,
                busy: 0.0,
            })
            .collect();
        StatsReport {
            uptime_s: self.started.elapsed().as_secs_f64(),
            interval_s: self.interval_s,
            rules,
            workers,
            datapath: c.kernel.map(|_| DatapathStats {
                interfaces: Vec::new(),
                rx_frames: self.kernel(c, WorkerCounter::RxFrames),
                rx_bytes: self.kernel(c, WorkerCounter::RxBytes),
                tx_packets: self.kernel(c, WorkerCounter::TxPackets),
                rx_pps: rate(Key::Kernel).0,
                health_missed: self.kernel(c, WorkerCounter::HealthMissed),
            }),
            datapath_missing: None,
            role: None,
            store: None,
            interfaces: Vec::new(),
        }
    }

    /// Says to every worker and the eBPF data path whether the relay is
    /// standby: each reads the word before it sends.
    pub fn set_standby(&self, c: Counters<'_>, standby: bool) {
        for w in 0..self.layout.workers {
            c.shm
                .set(self.layout.worker(w, WorkerCounter::Standby), u64::from(standby));
        }
        if let Some(m) = c.kernel {
            m.set(self.layout.worker(0, WorkerCounter::Standby), u64::from(standby));
        }
    }

    /// Packets held over every output of `rules`: what the relay did not
    /// send while standby.
    pub fn held(&self, c: Counters<'_>, rules: &[SlottedRule]) -> u64 {
        rules
            .iter()
            .flat_map(|r| &r.output_slots)
            .map(|&s| self.sum_output(c, s, OutputCounter::Held))
            .sum()
    }
}

/// The totals mcrd prints as it stops.
pub fn totals(report: &StatsReport) -> String {
    let mut out = String::from("mcrd final totals\n");
    for r in &report.rules {
        out.push_str(&format!(
            "  rule {:<20} {:>12} packets {:>14} bytes\n",
            r.name, r.packets, r.bytes
        ));
        for o in &r.outputs {
            let drops: u64 = o.drops.values().sum();
            out.push_str(&format!(
                "    -> {:<40} {:>12} packets {:>10} dropped\n",
                o.output, o.packets, drops
            ));
        }
    }
    for w in &report.workers {
        let drops: u64 = w.drops.values().sum();
        let why = mcr_core::control::nonzero_drops(&w.drops);
        out.push_str(&format!(
            "  worker {} rx {} frames, tx {} packets, {} ring drops, {} ring errors, {} dropped{}\n",
            w.index,
            w.rx_frames,
            w.tx_packets,
            w.ring_drops,
            w.ring_errors,
            drops,
            why.map_or_else(String::new, |w| format!(" ({w})"))
        ));
    }
    if let Some(d) = &report.datapath {
        out.push_str(&format!(
            "  ebpf data path rx {} frames, tx {} packets\n",
            d.rx_frames, d.tx_packets
        ));
    }
    out
}
