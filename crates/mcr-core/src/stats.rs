//! Where every counter lives in the statistics memory that workers write
//! and the supervisor reads.
//!
//! The memory is an array of `u64`, one block per worker; within a block,
//! the worker's own counters, then one cache line per rule slot, then one
//! per output slot. Each counter has exactly one writer (its worker), so a
//! worker only ever adds to its own block and the supervisor sums across
//! blocks. A worker that restarts keeps writing the same block, so nothing
//! is lost.

use serde::{Deserialize, Serialize};

/// `u64`s in a cache line.
const LINE: usize = 8;

/// A worker's own counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum WorkerCounter {
    /// Frames taken from the receive rings.
    RxFrames,
    /// Bytes of those frames.
    RxBytes,
    /// Frames the kernel dropped because a receive ring was full
    /// (`PACKET_STATISTICS`).
    RingDrops,
    /// Frames and datagrams handed to the kernel for sending.
    TxPackets,
    /// The table version the worker runs.
    TableVersion,
    /// Dropped: no rule for the destination.
    NoRule,
    /// Dropped: a rule for the destination, but only for other sources.
    WrongSource,
    /// Dropped: not IP (neither IPv4 nor IPv6).
    NotIp,
    /// Dropped: not UDP.
    NotUdp,
    /// Dropped: an IP fragment.
    Fragment,
    /// Dropped: IP options.
    IpOptions,
    /// Dropped: lengths that do not add up.
    BadLength,
    /// Dropped: IP header checksum wrong.
    BadIpChecksum,
    /// Dropped: UDP checksum wrong.
    BadUdpChecksum,
    /// Dropped: cut short by the capture.
    Truncated,
    /// Dropped: tagged twice (802.1ad QinQ), which no rule takes.
    VlanTagged,
    /// Errors the receive sockets reported (the interface went down).
    RingErrors,
    /// Dropped: an IPv6 extension header MCR does not pass over (ESP, AH,
    /// a routing header with segments left, too many headers).
    Ipv6Extension,
    /// Datagrams whose health the eBPF data path could not hand on because
    /// its health ring was full (the data path's block only; worker 0 reads
    /// the ring, and starts the inputs' sequences afresh when this grows).
    HealthMissed,
    /// Written by the supervisor, read by the worker (and the eBPF data
    /// path) before every send: 1 while the relay is standby, when what
    /// would be sent is counted as [`OutputCounter::Held`] instead. A value.
    Standby,
}

impl WorkerCounter {
    /// The counters that count (the rest are values: the table's
    /// version, standby), which a restart carries over.
    pub const SUMS: [WorkerCounter; 18] = [
        WorkerCounter::RxFrames,
        WorkerCounter::RxBytes,
        WorkerCounter::RingDrops,
        WorkerCounter::TxPackets,
        WorkerCounter::NoRule,
        WorkerCounter::WrongSource,
        WorkerCounter::NotIp,
        WorkerCounter::NotUdp,
        WorkerCounter::Fragment,
        WorkerCounter::IpOptions,
        WorkerCounter::BadLength,
        WorkerCounter::BadIpChecksum,
        WorkerCounter::BadUdpChecksum,
        WorkerCounter::Truncated,
        WorkerCounter::VlanTagged,
        WorkerCounter::RingErrors,
        WorkerCounter::Ipv6Extension,
        WorkerCounter::HealthMissed,
    ];

    /// The drop reasons, in order, with their names in reports.
    pub const DROPS: [(WorkerCounter, &'static str); 12] = [
        (WorkerCounter::NoRule, "no_rule"),
        (WorkerCounter::WrongSource, "wrong_source"),
        (WorkerCounter::NotIp, "not_ip"),
        (WorkerCounter::NotUdp, "not_udp"),
        (WorkerCounter::Fragment, "fragment"),
        (WorkerCounter::IpOptions, "ip_options"),
        (WorkerCounter::BadLength, "bad_length"),
        (WorkerCounter::BadIpChecksum, "bad_ip_checksum"),
        (WorkerCounter::BadUdpChecksum, "bad_udp_checksum"),
        (WorkerCounter::Truncated, "truncated"),
        (WorkerCounter::VlanTagged, "vlan_tagged"),
        (WorkerCounter::Ipv6Extension, "ipv6_extension"),
    ];
}

/// Room for a worker's own counters: four cache lines.
const WORKER_COUNTERS: usize = 4 * LINE;

/// A rule's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum RuleCounter {
    /// Packets matched.
    Packets,
    /// Their UDP payload bytes.
    Bytes,
    /// With several inputs, merged: sequence numbers no input brought in
    /// time (skipped).
    Lost,
    /// With several inputs, failing over: how often the input forwarded
    /// from changed.
    Switches,
    /// With several inputs, failing over: the input forwarded from, from
    /// 1 (0: none yet). A value, not a count.
    Active,
    /// The eBPF data path's block only: when (CLOCK_MONOTONIC, ns) it last
    /// handed the health ring a datagram of the rule that is neither RTP
    /// nor MPEG-TS (it hands on one such in 25 ms). A value, not a count.
    HealthSampled,
    /// Arbitrating: sequence numbers that went past with no line bringing
    /// them.
    GapsOpened,
    /// Arbitrating: of those, the ones a line brought later (the rule
    /// lost the difference).
    GapsFilled,
}

impl RuleCounter {
    /// The counters that count (the rest are values).
    pub const SUMS: [RuleCounter; 6] = [
        RuleCounter::Packets,
        RuleCounter::Bytes,
        RuleCounter::Lost,
        RuleCounter::Switches,
        RuleCounter::GapsOpened,
        RuleCounter::GapsFilled,
    ];
}

/// The health of one input of a rule (`mcr_core::health`), in two cache
/// lines per (rule slot, input) after the output slots. Counts are each
/// worker's running totals (it writes them whole, so a count that falls,
/// such as RTP sequence numbers still missing, stays right); values are
/// marked as such.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum HealthCounter {
    /// Datagrams looked at.
    Packets,
    /// What the input carries: 0 nothing seen, 1 neither RTP nor MPEG-TS,
    /// 2 RTP, 3 MPEG-TS, 4 MPEG-TS in RTP. A value.
    Carries,
    /// When its last datagram arrived, ns on `CLOCK_REALTIME`. A value.
    LastArrivalNs,
    /// RTP sequence numbers still missing.
    RtpLost,
    /// RTP packets that filled a gap late (reordered).
    RtpLate,
    /// RTP packets that repeated a sequence number.
    RtpDuplicates,
    /// Times the RTP sender started again.
    RtpRestarts,
    /// RFC 3550 interarrival jitter, ns. A value.
    RtpJitterNs,
    /// MPEG-TS packets looked at.
    TsPackets,
    /// TS_sync_loss (TR 101 290 1.1).
    TsSyncLosses,
    /// Sync_byte_error (1.2).
    TsSyncByteErrors,
    /// Continuity_count_error (1.4).
    TsContinuityErrors,
    /// PAT_error (1.3).
    TsPatErrors,
}

impl HealthCounter {
    /// The counters that count (the rest are values: what the input
    /// carries, its last arrival, its jitter).
    pub const SUMS: [HealthCounter; 10] = [
        HealthCounter::Packets,
        HealthCounter::RtpLost,
        HealthCounter::RtpLate,
        HealthCounter::RtpDuplicates,
        HealthCounter::RtpRestarts,
        HealthCounter::TsPackets,
        HealthCounter::TsSyncLosses,
        HealthCounter::TsSyncByteErrors,
        HealthCounter::TsContinuityErrors,
        HealthCounter::TsPatErrors,
    ];

    /// Every one, in order.
    pub const ALL: [HealthCounter; 13] = [
        HealthCounter::Packets,
        HealthCounter::Carries,
        HealthCounter::LastArrivalNs,
        HealthCounter::RtpLost,
        HealthCounter::RtpLate,
        HealthCounter::RtpDuplicates,
        HealthCounter::RtpRestarts,
        HealthCounter::RtpJitterNs,
        HealthCounter::TsPackets,
        HealthCounter::TsSyncLosses,
        HealthCounter::TsSyncByteErrors,
        HealthCounter::TsContinuityErrors,
        HealthCounter::TsPatErrors,
    ];
}

/// The inputs of a rule whose health has a place (every input: no rule
/// has more, see [`crate::validate::MAX_INPUTS`]).
pub const HEALTH_INPUTS: usize = crate::validate::MAX_INPUTS;
/// Room for one input's health: two cache lines.
const HEALTH_ROOM: usize = 2 * LINE;

/// The counters of one input of a rule with several, in a slot among the
/// output slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum InputCounter {
    /// Packets that arrived on it.
    Packets,
    /// Their UDP payload bytes.
    Bytes,
    /// Packets forwarded from it (merge: it brought them first; failover:
    /// it was the active input).
    Forwarded,
    /// Merge: copies of what another input (or itself) brought before.
    Duplicates,
    /// Merge: packets it missed that another input brought.
    Filled,
    /// Merge: packets that came after their gap was skipped.
    TooLate,
    /// Merge: packets too far from the stream, or of another sender
    /// (before a restart of the sender was confirmed).
    Strays,
    /// Merge: not RTP (a merge needs RTP's sequence numbers).
    NotRtp,
}

impl InputCounter {
    /// Every counter, in order, with its name in reports.
    pub const ALL: [(InputCounter, &'static str); 8] = [
        (InputCounter::Packets, "packets"),
        (InputCounter::Bytes, "bytes"),
        (InputCounter::Forwarded, "forwarded"),
        (InputCounter::Duplicates, "duplicates"),
        (InputCounter::Filled, "filled"),
        (InputCounter::TooLate, "too_late"),
        (InputCounter::Strays, "strays"),
        (InputCounter::NotRtp, "not_rtp"),
    ];
}

/// The line health of one input of an arbitrated rule, in a second slot
/// among the output slots (after the slots of every input).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum LineCounter {
    /// Messages (sequence numbers) its data packets carried.
    Messages,
    /// Sequence numbers it skipped.
    Gaps,
    /// Packets at or behind what it had brought already.
    Repeats,
    /// Heartbeats and ends of session.
    Heartbeats,
    /// Of another session, before the change was confirmed.
    WrongSession,
    /// Not the framing.
    Malformed,
    /// Resets and session changes it made.
    Resets,
}

impl LineCounter {
    /// Every counter, in order, with its name in reports.
    pub const ALL: [(LineCounter, &'static str); 7] = [
        (LineCounter::Messages, "messages"),
        (LineCounter::Gaps, "gaps"),
        (LineCounter::Repeats, "duplicates"),
        (LineCounter::Heartbeats, "heartbeats"),
        (LineCounter::WrongSession, "wrong_session"),
        (LineCounter::Malformed, "malformed"),
        (LineCounter::Resets, "resets"),
    ];
}

/// An output's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum OutputCounter {
    /// Packets sent.
    Packets,
    /// Their UDP payload bytes.
    Bytes,
    /// Dropped: the output's send queue was full.
    QueueFull,
    /// Dropped: the kernel refused the send.
    SendError,
    /// Dropped: the TTL would have reached 0.
    TtlExpired,
    /// Dropped: larger than the output interface's MTU.
    TooBig,
    /// Not sent because the relay is standby: what it would have sent.
    Held,
}

impl OutputCounter {
    /// The drop reasons, in order, with their names in reports.
    pub const DROPS: [(OutputCounter, &'static str); 4] = [
        (OutputCounter::QueueFull, "queue_full"),
        (OutputCounter::SendError, "send_error"),
        (OutputCounter::TtlExpired, "ttl_expired"),
        (OutputCounter::TooBig, "too_big"),
    ];
}

/// The shape of the statistics memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsLayout {
    /// Worker blocks.
    pub workers: usize,
    /// Rule slots per worker block.
    pub rule_slots: usize,
    /// Output slots per worker block.
    pub output_slots: usize,
}

impl StatsLayout {
    /// The default capacity: 16384 rules and 65536 outputs.
    pub fn new(workers: usize) -> Self {
        StatsLayout {
            workers,
            rule_slots: 16_384,
            output_slots: 65_536,
        }
    }

    /// How many counters of one block the eBPF data path writes: its own,
    /// the rules' and the outputs' (not the inputs' health, which only the
    /// workers follow), so its map need hold no more.
    pub fn datapath_len(&self) -> usize {
        WORKER_COUNTERS + (self.rule_slots + self.output_slots) * LINE
    }

    fn per_worker(&self) -> usize {
        self.datapath_len() + self.rule_slots * HEALTH_INPUTS * HEALTH_ROOM
    }

    /// How many `u64` counters in all.
    pub fn len(&self) -> usize {
        self.workers * self.per_worker()
    }

    /// True when there is no counter at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where worker `w`'s counter `c` lives.
    pub fn worker(&self, w: usize, c: WorkerCounter) -> usize {
        w * self.per_worker() + c as usize
    }

    /// Where worker `w`'s counter `c` of rule slot `slot` lives.
    pub fn rule(&self, w: usize, slot: u32, c: RuleCounter) -> usize {
        w * self.per_worker() + WORKER_COUNTERS + slot as usize * LINE + c as usize
    }

    /// The rule slot whose first counter is at `index` of a block (what the
    /// eBPF data path names a rule by), if one is.
    pub fn rule_slot_at(&self, index: usize) -> Option<u32> {
        let off = index.checked_sub(WORKER_COUNTERS)?;
        let slot = off / LINE;
        (off % LINE == 0 && slot < self.rule_slots).then(|| u32::try_from(slot).ok())?
    }

    /// Where worker `w`'s counter `c` of output slot `slot` lives.
    pub fn output(&self, w: usize, slot: u32, c: OutputCounter) -> usize {
        self.output_line(w, slot) + c as usize
    }

    /// Where worker `w`'s counter `c` of an input counted in output slot
    /// `slot` lives.
    pub fn input(&self, w: usize, slot: u32, c: InputCounter) -> usize {
        self.output_line(w, slot) + c as usize
    }

    /// Where worker `w`'s line counter `c` of an input counted in output
    /// slot `slot` (its second) lives.
    pub fn line(&self, w: usize, slot: u32, c: LineCounter) -> usize {
        self.output_line(w, slot) + c as usize
    }

    /// Where worker `w`'s health counter `c` of input `input` (0 is the
    /// first) of the rule in slot `slot` lives; an input past
    /// [`HEALTH_INPUTS`] shares the last one's place.
    pub fn health(&self, w: usize, slot: u32, input: usize, c: HealthCounter) -> usize {
        let input = input.min(HEALTH_INPUTS - 1);
        w * self.per_worker() + self.datapath_len() + (slot as usize * HEALTH_INPUTS + input) * HEALTH_ROOM + c as usize
    }

    /// The counts (not the values) of worker block `w`'s own counters,
    /// in a fixed order: what a restart carries over.
    pub fn worker_sums(&self, w: usize) -> impl Iterator<Item = usize> + '_ {
        WorkerCounter::SUMS.into_iter().map(move |c| self.worker(w, c))
    }

    /// The counts of worker block `w`'s rule slot `slot`, in a fixed
    /// order.
    pub fn rule_sums(&self, w: usize, slot: u32) -> impl Iterator<Item = usize> + '_ {
        RuleCounter::SUMS.into_iter().map(move |c| self.rule(w, slot, c))
    }

    /// The counts of worker block `w`'s output slot `slot` (an output's or
    /// an input's: every cell of the line is a count), in a fixed order.
    pub fn output_sums(&self, w: usize, slot: u32) -> impl Iterator<Item = usize> {
        let line = self.output_line(w, slot);
        line..line + LINE
    }

    /// The counts of the health of input `input` of rule slot `slot` in
    /// worker block `w`, in a fixed order.
    pub fn health_sums(&self, w: usize, slot: u32, input: usize) -> impl Iterator<Item = usize> + '_ {
        HealthCounter::SUMS
            .into_iter()
            .map(move |c| self.health(w, slot, input, c))
    }

    fn output_line(&self, w: usize, slot: u32) -> usize {
        w * self.per_worker() + WORKER_COUNTERS + (self.rule_slots + slot as usize) * LINE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_leave_out_the_values() {
        let l = StatsLayout::new(2);
        let values = [
            l.worker(1, WorkerCounter::Standby),
            l.worker(1, WorkerCounter::TableVersion),
            l.rule(1, 3, RuleCounter::Active),
            l.rule(1, 3, RuleCounter::HealthSampled),
            l.health(1, 3, 1, HealthCounter::Carries),
            l.health(1, 3, 1, HealthCounter::LastArrivalNs),
            l.health(1, 3, 1, HealthCounter::RtpJitterNs),
        ];
        let sums: Vec<usize> = l
            .worker_sums(1)
            .chain(l.rule_sums(1, 3))
            .chain(l.output_sums(1, 5))
            .chain(l.health_sums(1, 3, 1))
            .collect();
        for v in values {
            assert!(!sums.contains(&v), "{v} is a value");
        }
        assert!(sums.contains(&l.output(1, 5, OutputCounter::Held)));
        assert!(sums.contains(&l.input(1, 5, InputCounter::NotRtp)));
        assert!(sums.contains(&l.worker(1, WorkerCounter::HealthMissed)));
        let distinct: std::collections::BTreeSet<usize> = sums.iter().copied().collect();
        assert_eq!(distinct.len(), sums.len());
    }

    #[test]
    fn every_counter_has_its_own_place() {
        let l = StatsLayout {
            workers: 2,
            rule_slots: 3,
            output_slots: 4,
        };
        let mut all = std::collections::HashSet::new();
        for w in 0..2 {
            for i in 0..WORKER_COUNTERS {
                assert!(all.insert(w * l.per_worker() + i));
            }
            for s in 0..3 {
                for c in [RuleCounter::Packets, RuleCounter::Bytes] {
                    assert!(all.insert(l.rule(w, s, c)));
                }
            }
            for s in 0..4 {
                for c in [OutputCounter::Packets, OutputCounter::TooBig] {
                    assert!(all.insert(l.output(w, s, c)));
                }
            }
            for s in 0..3 {
                for i in 0..HEALTH_INPUTS {
                    for c in [HealthCounter::Packets, HealthCounter::TsPatErrors] {
                        assert!(all.insert(l.health(w, s, i, c)));
                    }
                }
            }
        }
        assert!((HealthCounter::TsPatErrors as usize) < HEALTH_ROOM);
        // The data path's block ends where the health begins.
        assert_eq!(l.datapath_len(), l.health(0, 0, 0, HealthCounter::Packets));
        assert!(l.output(0, 3, OutputCounter::TooBig) < l.datapath_len());
        assert_eq!(l.health(1, 2, 3, HealthCounter::Packets) % LINE, 0);
        assert!(all.iter().all(|&i| i < l.len()));
        assert!((WorkerCounter::Standby as usize) < WORKER_COUNTERS);
        assert!((OutputCounter::Held as usize) < LINE);
        for slot in [0, 1, 2] {
            assert_eq!(l.rule_slot_at(l.rule(0, slot, RuleCounter::Packets)), Some(slot));
        }
        assert_eq!(l.rule_slot_at(l.rule(0, 1, RuleCounter::Bytes)), None);
        assert_eq!(l.rule_slot_at(3), None);
        assert_eq!(l.rule_slot_at(l.output(0, 0, OutputCounter::Packets)), None);
        assert!((InputCounter::NotRtp as usize) < LINE && (RuleCounter::GapsFilled as usize) < LINE);
        assert!((LineCounter::Resets as usize) < LINE);
        // Rule and output lines start on cache-line boundaries.
        assert_eq!(l.rule(1, 2, RuleCounter::Packets) % LINE, 0);
        assert_eq!(l.output(1, 3, OutputCounter::Packets) % LINE, 0);
    }
}
