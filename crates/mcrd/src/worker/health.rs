//! The health of the inputs this worker forwards from
//! ([`mcr_core::health::InputHealth`]: what an input carries, its RTP
//! sequence and jitter, its MPEG-TS first-priority errors), one state per
//! (rule slot, input), written into the statistics memory as running
//! totals. A state starts from the totals already there (a worker that
//! restarts carries on its predecessor's counts) and is kept across tables
//! while its rule and input stay the same.
//!
//! Worker 0 also follows the inputs the eBPF data path forwards from: the
//! program hands each of their datagrams to a BPF ring buffer
//! ([`KernelRecords`]), which it reads on its timer.

use mcr_core::datapath::HealthRecord;
use mcr_core::health::{Carries, InputHealth};
use mcr_core::snapshot::TableSnapshot;
use mcr_core::stats::HealthCounter as H;
use rustc_hash::FxHashMap;

use super::counts::Counts;

/// The counts written as totals (base + the state's own), in order.
const COUNTS: [H; 10] = [
    H::Packets,
    H::RtpLost,
    H::RtpLate,
    H::RtpDuplicates,
    H::RtpRestarts,
    H::TsPackets,
    H::TsSyncLosses,
    H::TsSyncByteErrors,
    H::TsContinuityErrors,
    H::TsPatErrors,
];

/// The longest the statistics memory lags a state while packets come.
const WRITE_EVERY_NS: u64 = 50_000_000;

#[derive(Debug)]
struct Tracked {
    /// The rule's name and the input's text, to know it again.
    who: (String, String),
    state: InputHealth,
    packets: u64,
    last_arrival_ns: u64,
    /// The totals in the memory when the state started (None: not read
    /// yet, at the first packet).
    base: Option<[u64; COUNTS.len()]>,
    /// The error counts last written, and when.
    written_errors: u64,
    written_at_ns: u64,
    dirty: bool,
    /// Fed from the eBPF data path's records.
    from_kernel: bool,
    /// A line of an arbitrated market-data feed: only its signal is
    /// followed here (its sequence is the arbitration's to count; its
    /// bytes would only look like RTP by chance).
    signal_only: bool,
}

impl Tracked {
    fn counts(&self) -> [u64; COUNTS.len()] {
        let (r, t) = (self.state.rtp.counts(), self.state.ts.counts());
        [
            self.packets,
            r.lost,
            r.late,
            r.duplicates,
            r.restarts,
            t.packets,
            t.sync_losses,
            t.sync_byte_errors,
            t.continuity_errors,
            t.pat_errors,
        ]
    }

    /// The error counts together (all but the packets of each kind).
    fn errors(&self) -> u64 {
        let c = self.counts();
        c[1..5].iter().chain(&c[6..]).sum()
    }
}

/// Every followed input of the table the worker runs.
#[derive(Debug, Default)]
pub struct Health {
    inputs: FxHashMap<(u32, usize), Tracked>,
    /// When [`Health::flush`] last went over every input.
    flushed_at_ns: u64,
}

impl Health {
    /// Follows `snap`: the inputs of rules whose health is followed keep
    /// their state while the rule (by name) and the input are the same.
    /// Where another input takes the place of one this worker followed,
    /// its counts in this worker's memory start again from zero (a worker
    /// that starts takes over what is there: its predecessor's counts).
    pub fn reconcile(&mut self, snap: &TableSnapshot, counts: &Counts<'_>) {
        let mut next = FxHashMap::default();
        for r in snap.rules.iter().filter(|r| r.rule.health) {
            let signal_only = matches!(
                r.rule.redundancy.as_ref().map(|x| x.mode),
                Some(mcr_core::rule::Mode::Arbitrate { .. })
            );
            for (k, input) in r.rule.inputs().enumerate() {
                let who = (r.rule.name.clone(), input.to_string());
                let t = match self.inputs.remove(&(r.slot, k)) {
                    Some(t) if t.who == who && t.signal_only == signal_only => t,
                    before => {
                        let base = before.map(|_| {
                            for c in H::ALL {
                                counts
                                    .counters
                                    .set(counts.layout.health(counts.worker, r.slot, k, c), 0);
                            }
                            [0; COUNTS.len()]
                        });
                        Tracked {
                            who,
                            state: InputHealth::default(),
                            packets: 0,
                            last_arrival_ns: 0,
                            base,
                            written_errors: 0,
                            written_at_ns: 0,
                            dirty: false,
                            from_kernel: false,
                            signal_only,
                        }
                    }
                };
                next.insert((r.slot, k), t);
            }
        }
        self.inputs = next;
    }

    /// The datagram whose UDP payload is `payload` came in on input
    /// `input` of the rule in slot `slot` at `arrived_ns` (realtime).
    #[inline]
    pub fn packet(&mut self, slot: u32, input: usize, payload: &[u8], arrived_ns: u64, counts: &Counts<'_>) {
        self.arrived(slot, input, Some(payload), arrived_ns, false, counts);
    }

    /// A datagram came: its payload looked at if there is one (the eBPF
    /// data path's records hold at most a 1500-byte MTU's), only counted
    /// if not.
    #[inline]
    fn arrived(
        &mut self,
        slot: u32,
        input: usize,
        payload: Option<&[u8]>,
        arrived_ns: u64,
        from_kernel: bool,
        counts: &Counts<'_>,
    ) {
        let Some(t) = self.inputs.get_mut(&(slot, input)) else {
            return;
        };
        t.from_kernel |= from_kernel;
        if let Some(p) = payload.filter(|_| !t.signal_only) {
            t.state.observe(p, arrived_ns);
        }
        t.packets += 1;
        t.last_arrival_ns = arrived_ns;
        t.dirty = true;
        let errors = t.errors();
        if errors != t.written_errors || arrived_ns.saturating_sub(t.written_at_ns) >= WRITE_EVERY_NS {
            write(slot, input, t, arrived_ns, counts);
        }
    }

    /// Takes one record of the eBPF data path's health ring, whose
    /// monotonic arrival time is `offset_ns` behind the real-time clock
    /// (`scratch`: room to rebuild its payload in).
    fn record(&mut self, r: &HealthRecord<'_>, offset_ns: i64, scratch: &mut Vec<u8>, counts: &Counts<'_>) {
        let Some(slot) = counts.layout.rule_slot_at(r.header.rule as usize) else {
            return;
        };
        let at = r.header.arrived_ns.saturating_add_signed(offset_ns);
        self.arrived(slot, 0, r.payload(scratch), at, true, counts);
    }

    /// The data path lost records: what the inputs it feeds expect next
    /// (sequence numbers, continuity counters) is forgotten, so that a gap
    /// that is the ring's is not taken for the stream's.
    fn kernel_missed(&mut self) {
        for t in self.inputs.values_mut().filter(|t| t.from_kernel) {
            t.state.resync();
        }
    }

    /// Writes what changed since the last write (the worker's timer; at
    /// most once per [`WRITE_EVERY_NS`], so a busy worker does not walk
    /// every input at each wake-up).
    pub fn flush(&mut self, now_ns: u64, counts: &Counts<'_>) {
        if now_ns.saturating_sub(self.flushed_at_ns) < WRITE_EVERY_NS {
            return;
        }
        self.flushed_at_ns = now_ns;
        for (&(slot, input), t) in &mut self.inputs {
            if t.dirty {
                write(slot, input, t, now_ns, counts);
            }
        }
    }
}

fn write(slot: u32, input: usize, t: &mut Tracked, now_ns: u64, counts: &Counts<'_>) {
    let at = |c: H| counts.layout.health(counts.worker, slot, input, c);
    let base = *t.base.get_or_insert_with(|| COUNTS.map(|c| counts.counters.get(at(c))));
    for ((c, b), v) in COUNTS.iter().zip(base).zip(t.counts()) {
        counts.counters.set(at(*c), b + v);
    }
    let carries = match (t.packets, t.state.carries) {
        (0, _) => 0,
        (_, Carries::Other) => 1,
        (_, Carries::Rtp) => 2,
        (_, Carries::Ts) => 3,
        (_, Carries::RtpTs) => 4,
    };
    counts.counters.set(at(H::Carries), carries);
    counts.counters.set(at(H::LastArrivalNs), t.last_arrival_ns);
    counts.counters.set(at(H::RtpJitterNs), t.state.rtp.counts().jitter_ns);
    t.written_errors = t.errors();
    t.written_at_ns = now_ns;
    t.dirty = false;
}

/// Worker 0's reading of the eBPF data path's health ring.
#[derive(Debug)]
pub struct KernelRecords {
    ring: mcr_sys::bpf::ringbuf::RingReader,
    /// The data path's count of records it lost, as the last record said.
    missed: u64,
    /// Where a payload is rebuilt from its pieces.
    scratch: Vec<u8>,
}

/// The most records taken at one reading, so that the worker's own rings
/// wait no longer than that (the rest are read at once after them).
const RECORDS_PER_READ: usize = 4096;

/// How often worker 0 reads the ring at the latest, in ms (the program
/// wakes it sooner when the ring is a quarter full).
pub const KERNEL_READ_EVERY_MS: i32 = 25;

impl KernelRecords {
    /// Reads the ring mapped from `ring`.
    pub fn new(ring: mcr_sys::bpf::ringbuf::RingReader) -> Self {
        KernelRecords {
            ring,
            missed: 0,
            scratch: Vec::new(),
        }
    }

    /// Hands the records that wait to `health`; true if more still wait.
    pub fn read(&mut self, health: &mut Health, counts: &Counts<'_>) -> bool {
        let offset_ns = mcr_sys::clock::realtime_offset_ns();
        let KernelRecords { ring, missed, scratch } = self;
        ring.drain(RECORDS_PER_READ, |rec| {
            let Some(r) = HealthRecord::parse(rec) else {
                return;
            };
            if r.header.missed != *missed {
                *missed = r.header.missed;
                health.kernel_missed();
            }
            health.record(&r, offset_ns, scratch, counts);
        });
        !ring.is_empty()
    }

    /// The ring's descriptor (readable when the program wakes the worker).
    pub fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.ring)
    }
}
