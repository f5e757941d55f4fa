//! A worker: one process, pinned to one core, one thread, one loop. It
//! waits for ring readiness or a message from the supervisor, takes every
//! ready frame, forwards it, flushes its batches, and swaps in a new table
//! between batches. It never blocks on the supervisor.

mod counts;
pub mod egress;
mod health;
mod ingress;
mod keeper;
mod liblog;
mod redundancy;
mod rist;
mod srt;

use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;

use anyhow::Context;
use mcr_core::config::RingFormat;
use mcr_core::dispatch::{self, RxMeta, Taken, Verdict};
use mcr_core::forward::{Datagram, RxChecksum};
use mcr_core::stats::{RuleCounter, StatsLayout, WorkerCounter};
use mcr_core::table::{CompiledRule, MatchTable};
use mcr_sys::epoll::Epoll;
use mcr_sys::ring::{RingConfig, RingVersion};
use mcr_sys::shm::SharedCounters;

use crate::channel::{
    FromWorker, Problem, Scope, ToWorker, WORKER_CHANNEL_FD, WORKER_FILTER_FD, WORKER_HEALTH_FD, WORKER_RINGS_FD,
    WORKER_STATS_FD,
};
use counts::Counts;
use egress::Egress;
use health::{Health, KERNEL_READ_EVERY_MS, KernelRecords};
use ingress::Ingress;
use mcr_sys::bpf::ringbuf::RingReader;
use redundancy::Redundancy;

/// How a worker was started (its command line).
#[derive(Debug, Clone, clap::Args)]
pub struct WorkerArgs {
    /// This worker's index.
    #[arg(long)]
    pub index: usize,
    /// How many workers there are (the statistics layout depends on it).
    #[arg(long)]
    pub workers: usize,
    /// The CPU to pin to.
    #[arg(long)]
    pub cpu: Option<usize>,
    /// Ring format.
    #[arg(long, default_value_t = RingFormat::V2, value_parser = crate::args::named_arg::<RingFormat>())]
    pub ring: RingFormat,
    /// Ring memory per input interface, in MiB.
    #[arg(long, default_value_t = 32)]
    pub ring_mb: usize,
    /// V3 block retire timeout in ms.
    #[arg(long, default_value_t = 1)]
    pub block_timeout_ms: u32,
    /// How to write logs (the supervisor's format).
    #[arg(long, value_parser = crate::args::named_arg::<mcr_core::config::LogFormat>())]
    pub log_format: Option<mcr_core::config::LogFormat>,
    /// The supervisor passed the eBPF data path's ring filter (the rings
    /// use it instead of a classic filter).
    #[arg(long)]
    pub ring_filter: bool,
    /// The supervisor passed the eBPF data path's health ring (worker 0
    /// follows the health of the inputs the kernel forwards from).
    #[arg(long)]
    pub health_ring: bool,
}

/// The ring format's kernel version (mcr-sys knows nothing of settings).
pub fn ring_version(f: RingFormat) -> RingVersion {
    match f {
        RingFormat::V2 => RingVersion::V2,
        RingFormat::V3 => RingVersion::V3,
    }
}

/// Frames taken from one ring before looking at the others and flushing.
const RING_BUDGET: usize = 256;
/// The epoll token of the channel (rings use their index).
const CHANNEL: u64 = u64::MAX;
/// The epoll token of the eBPF data path's health ring.
const KERNEL_HEALTH: u64 = u64::MAX - 1;

struct Worker {
    args: WorkerArgs,
    layout: StatsLayout,
    counters: SharedCounters,
    channel: UnixStream,
    inbox: Vec<u8>,
    table: MatchTable,
    ingress: Ingress,
    egress: Egress,
    redundancy: Redundancy,
    health: Health,
    kernel_health: Option<KernelRecords>,
    /// Datagrams taken from SRT inputs, waiting to be forwarded.
    carried: srt::Carried,
    /// The IPv4 identification of the next of them.
    ident: u16,
}

/// The CPUs the worker may use, before it pins itself to one, and that
/// one.
static CPUS: std::sync::OnceLock<(Vec<usize>, usize)> = std::sync::OnceLock::new();

/// Runs `f` with the calling thread free to run on every CPU the worker
/// may use, then pins it back. The threads libsrt and librist start inside
/// `f` (their send, receive and protocol threads) inherit that freedom: a
/// listener's one send thread serves every caller, and pinned to the
/// worker's CPU it would compete with the worker's loop and whatever else
/// runs there, where the scheduler can move it to a quieter one.
pub(crate) fn unpinned<T>(f: impl FnOnce() -> T) -> T {
    let Some((all, cpu)) = CPUS.get() else { return f() };
    if let Err(e) = mcr_sys::process::set_thread_cpus(all) {
        tracing::debug!("unpin for a library's threads: {e}");
    }
    let out = f();
    if let Err(e) = mcr_sys::process::pin_current_thread(*cpu) {
        tracing::warn!("pin back to CPU {cpu}: {e}");
    }
    out
}

/// Runs a worker until the supervisor says stop or goes away.
pub fn run(args: WorkerArgs) -> anyhow::Result<()> {
    if let Some(cpu) = args.cpu {
        let all = mcr_sys::process::allowed_cpus().unwrap_or_default();
        mcr_sys::process::pin_current_thread(cpu).with_context(|| format!("pin to CPU {cpu}"))?;
        if all.len() > 1 {
            let _ = CPUS.set((all, cpu));
        }
    }
    let layout = StatsLayout::new(args.workers);
    // The supervisor passed these descriptors at these numbers (see
    // `channel`); nothing else in this process owns them.
    let stats_fd = take_fd(WORKER_STATS_FD)?;
    let chan_fd = take_fd(WORKER_CHANNEL_FD)?;
    let counters = SharedCounters::open(stats_fd, layout.len()).context("map the statistics memory")?;
    let ring_filter = if args.ring_filter {
        Some(take_fd(WORKER_FILTER_FD)?)
    } else {
        None
    };
    let kernel_health = if args.health_ring {
        let ring = RingReader::new(take_fd(WORKER_HEALTH_FD)?).context("map the eBPF data path's health ring")?;
        Some(KernelRecords::new(ring))
    } else {
        None
    };
    let channel = UnixStream::from(chan_fd);
    channel.set_nonblocking(true).context("channel O_NONBLOCK")?;
    // The rings of the worker this one replaces, if any, wait there.
    let keeper = take_fd(WORKER_RINGS_FD)?;
    let (ingress, troubles) = Ingress::new(
        RingConfig {
            version: ring_version(args.ring),
            bytes: args.ring_mb << 20,
            max_frame: 1518,
            block_timeout_ms: args.block_timeout_ms,
        },
        args.workers > 1,
        ring_filter,
        Some(keeper::Keeper::new(keeper)),
    );
    for t in troubles {
        tracing::warn!("worker {}: {t}; the ring is opened afresh", args.index);
    }
    let egress = Egress::new(MAX_UDP_PENDING, args.index);
    let mut w = Worker {
        ingress,
        args,
        layout,
        counters,
        channel,
        inbox: Vec::new(),
        table: MatchTable::default(),
        egress,
        redundancy: Redundancy::default(),
        health: Health::default(),
        kernel_health,
        carried: srt::Carried::default(),
        ident: 0,
    };
    w.say(&FromWorker::Ready {
        pid: std::process::id(),
    })?;
    w.run()
}

const MAX_UDP_PENDING: usize = 256;

/// Takes ownership of descriptor `n`, which the supervisor passed.
fn take_fd(n: i32) -> anyhow::Result<OwnedFd> {
    mcr_sys::process::own_inherited_fd(n)
        .with_context(|| format!("descriptor {n} was not passed: `mcrd worker` is started by mcrd itself"))
}

impl Worker {
    fn say(&mut self, m: &FromWorker) -> anyhow::Result<()> {
        let mut line = serde_json::to_vec(m)?;
        line.push(b'\n');
        // Small messages; the supervisor reads continuously. Block briefly
        // if its buffer is full rather than lose an acknowledgement.
        self.channel.set_nonblocking(false)?;
        let r = self.channel.write_all(&line);
        self.channel.set_nonblocking(true)?;
        r.context("write to the supervisor")
    }

    fn run(&mut self) -> anyhow::Result<()> {
        let mut epoll = Epoll::new(64)?;
        epoll.add_readable(self.channel.as_fd(), CHANNEL)?;
        if let Some(k) = &self.kernel_health {
            epoll.add_wakeups(k.as_fd(), KERNEL_HEALTH)?;
        }
        let mut records_wait = false;
        let mut last_stats = mcr_sys::clock::monotonic_ns();
        let mut last_race = last_stats;
        loop {
            // Any wake-up looks at every ring: a ring whose slot is not ready
            // costs one load. A ring that reports an error (its interface
            // went down) must have the error read, or epoll reports it
            // again at once, forever.
            let mut table_msg = false;
            let mut errored: Vec<u32> = Vec::new();
            // Wake for what a rule with several inputs waits for (a gap a
            // merge gives up, a failover's loss of signal), at the latest.
            // (And, with SRT endpoints, to take their callers within 10
            // ms, and an SRT input's datagrams within 1 ms of libsrt
            // releasing them.)
            let idle_ms = if self.egress.srt.has_inputs() || self.egress.rist.has_inputs() {
                1
            } else if self.egress.srt.active() || self.egress.rist.active() {
                10
            } else {
                100
            };
            let mut timeout_ms = self.redundancy.deadline().map_or(idle_ms, |d| {
                let wait = d.saturating_sub(mcr_sys::clock::monotonic_ns());
                wait.div_ceil(1_000_000).min(idle_ms as u64) as i32
            });
            // And for the kernel data path's health records: at once if
            // some were left waiting, else on the reading timer.
            if self.kernel_health.is_some() {
                timeout_ms = timeout_ms.min(if records_wait { 0 } else { KERNEL_READ_EVERY_MS });
            }
            for r in epoll.wait_events(timeout_ms)? {
                if r.token == KERNEL_HEALTH {
                    continue;
                }
                if r.token == CHANNEL {
                    table_msg = true;
                } else if r.error {
                    errored.push(r.token as u32);
                }
            }
            for ifindex in errored {
                if self.ingress.take_error(ifindex) {
                    self.counts().worker(WorkerCounter::RingErrors, 1);
                }
            }
            self.forward_ready();
            records_wait = self.read_kernel_health();
            self.poll_timed();
            self.forward_carried();
            if let Some(ends) = self.egress.srt.poll(mcr_sys::clock::monotonic_ns()) {
                let (outputs, inputs) = srt::by_side(ends);
                self.say(&FromWorker::Srt { outputs, inputs })?;
            }
            if let Some(ends) = self.egress.rist.poll(mcr_sys::clock::monotonic_ns()) {
                let (outputs, inputs) = srt::by_side(ends);
                self.say(&FromWorker::Rist { outputs, inputs })?;
            }
            if table_msg && self.read_channel(&mut epoll)? {
                return Ok(());
            }
            let now = mcr_sys::clock::monotonic_ns();
            if now - last_stats >= 500_000_000 {
                last_stats = now;
                // The line race of arbitrated rules, once a second.
                if now - last_race >= 1_000_000_000 {
                    last_race = now;
                    let rules = self.redundancy.race(now);
                    if !rules.is_empty() {
                        self.say(&FromWorker::Race { rules })?;
                    }
                }
                let drops = self.ingress.take_drops();
                self.counts().worker(WorkerCounter::RingDrops, drops);
            }
        }
    }

    fn counts(&self) -> Counts<'_> {
        Counts {
            counters: &self.counters,
            layout: &self.layout,
            worker: self.args.index,
        }
    }

    /// Reads what the supervisor sent; true when told to stop.
    fn read_channel(&mut self, epoll: &mut Epoll) -> anyhow::Result<bool> {
        let mut chunk = [0u8; 65536];
        loop {
            match self.channel.read(&mut chunk) {
                Ok(0) => {
                    // The supervisor is gone: nothing to forward for.
                    return Ok(true);
                }
                Ok(n) => self.inbox.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e).context("read from the supervisor"),
            }
        }
        while let Some(end) = self.inbox.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.inbox.drain(..=end).collect();
            match serde_json::from_slice::<ToWorker>(&line).context("a message from the supervisor")? {
                ToWorker::Stop => {
                    self.flush();
                    return Ok(true);
                }
                ToWorker::Table(snap) => {
                    let version = snap.version;
                    let problems = self.apply(&snap);
                    self.ingress.register_new(epoll)?;
                    self.counters.set(
                        self.layout.worker(self.args.index, WorkerCounter::TableVersion),
                        version,
                    );
                    self.say(&FromWorker::Applied { version, problems })?;
                }
            }
        }
        Ok(false)
    }

    /// Swaps in a new table, opening and closing sockets to match it.
    /// Rules that cannot be set up are left out; returns why.
    fn apply(&mut self, snap: &mcr_core::snapshot::TableSnapshot) -> Vec<Problem> {
        self.flush();
        let (table, errors) = MatchTable::compile(snap);
        let mut problems: Vec<Problem> = errors
            .into_iter()
            .map(|e| Problem {
                scope: Scope::Rule(e.rule),
                error: e.reason,
            })
            .collect();
        // Ingress: a ring per input interface, its filter following the
        // unicast inputs. (A closed ring leaves the epoll set by itself.)
        problems.extend(self.ingress.reconcile(&table, &snap.interfaces, &snap.fanout));
        // Egress: a frame batch per output interface, a UDP sender per
        // (interface, source) of unicast outputs.
        problems.extend(self.egress.reconcile(&table, &snap.interfaces));
        problems.extend(self.egress.srt.reconcile(&table));
        problems.extend(self.egress.rist.reconcile(&table));
        self.redundancy.reconcile(&table, mcr_sys::clock::monotonic_ns());
        let counts = Counts {
            counters: &self.counters,
            layout: &self.layout,
            worker: self.args.index,
        };
        self.health.reconcile(snap, &counts);
        self.table = table;
        problems
    }

    /// Takes every ready frame from every ring and forwards it.
    fn forward_ready(&mut self) {
        loop {
            let mut any = false;
            let Worker {
                ingress,
                table,
                egress,
                redundancy,
                health,
                counters,
                layout,
                args,
                ..
            } = self;
            let counts = Counts {
                counters,
                layout,
                worker: args.index,
            };
            for (ifindex, ring) in ingress.rings_mut() {
                let n = ring.take_ready(RING_BUDGET, |f| {
                    counts.worker(WorkerCounter::RxFrames, 1);
                    counts.worker(WorkerCounter::RxBytes, f.wire_len as u64);
                    let checksum = if f.csum_not_ready {
                        RxChecksum::NotReady
                    } else if f.csum_valid {
                        RxChecksum::Valid
                    } else {
                        RxChecksum::Unknown
                    };
                    let meta = RxMeta {
                        wire_len: f.wire_len,
                        checksum,
                        vlan_tci: f.vlan_tci,
                        vlan_tpid: f.vlan_tpid,
                    };
                    let taken = match dispatch::take(table, ifindex, f.data, meta) {
                        Ok(t) => t,
                        Err(reason) => {
                            counts.worker(reason, 1);
                            return true;
                        }
                    };
                    let taken_by = TakenBy {
                        health,
                        redundancy,
                        egress,
                        counts: &counts,
                    };
                    taken_by.take(&taken, f.data, f.arrived_ns);
                    // The pass ends before a batch is full: a full batch
                    // would be sent before what is in it is handed back.
                    !egress.half_full()
                });
                any |= n > 0;
            }
            // What was taken goes back to the kernel at the moment it is
            // sent: a worker killed before that leaves it to the next one.
            // (Once is enough: the first send hands back all of them.)
            let mut handed = false;
            egress.flush_then(&counts, &mut || {
                if !std::mem::replace(&mut handed, true) {
                    for (_, ring) in ingress.rings_mut() {
                        ring.hand_back();
                    }
                }
            });
            for (_, ring) in ingress.rings_mut() {
                ring.hand_back();
            }
            if !any {
                return;
            }
        }
    }

    /// Forwards what the SRT inputs released, as the rings' frames are:
    /// each datagram made a frame ([`dispatch::carried_in`]) and taken by
    /// its rule as input `k`.
    fn forward_carried(&mut self) {
        if !self.egress.srt.has_inputs() && !self.egress.rist.has_inputs() {
            return;
        }
        let Worker {
            table,
            egress,
            redundancy,
            health,
            counters,
            layout,
            args,
            carried,
            ident,
            ..
        } = self;
        carried.clear();
        egress.srt.receive(carried);
        egress.rist.receive(carried);
        if carried.meta.is_empty() {
            return;
        }
        let counts = Counts {
            counters,
            layout,
            worker: args.index,
        };
        // The datagrams of one input come together: its rule is looked up
        // once for them, not once each.
        let mut last: Option<(u32, usize)> = None;
        for i in 0..carried.meta.len() {
            let (slot, k, len, from) = carried.meta[i];
            let index = match last {
                Some((s, at)) if s == slot => at,
                _ => {
                    let Some(at) = table.rules().iter().position(|r| r.slot == slot) else {
                        continue;
                    };
                    last = Some((slot, at));
                    at
                }
            };
            let rule = &table.rules()[index];
            *ident = ident.wrapping_add(1);
            let frame = carried.frame_mut(i);
            let d = match dispatch::carried_in(frame, len, from, *ident) {
                Ok(d) => d,
                Err(reason) => {
                    counts.worker(reason, 1);
                    continue;
                }
            };
            let frame = &frame[..mcr_core::wire::UDP_V4_HEADERS + len];
            let taken = Taken {
                datagram: d,
                rule,
                input: k,
            };
            let taken_by = TakenBy {
                health,
                redundancy,
                egress,
                counts: &counts,
            };
            taken_by.take(&taken, frame, None);
        }
        self.flush();
    }

    /// Hands the kernel data path's health records to the inputs' health
    /// (worker 0); true if more wait.
    fn read_kernel_health(&mut self) -> bool {
        let Worker {
            kernel_health,
            health,
            counters,
            layout,
            args,
            ..
        } = self;
        let Some(k) = kernel_health else {
            return false;
        };
        let counts = Counts {
            counters,
            layout,
            worker: args.index,
        };
        k.read(health, &counts)
    }

    /// Sends what the rules with several inputs release with time, and
    /// writes the inputs' health that packets have not written yet.
    fn poll_timed(&mut self) {
        let Worker {
            table,
            egress,
            redundancy,
            health,
            counters,
            layout,
            args,
            ..
        } = self;
        let counts = Counts {
            counters,
            layout,
            worker: args.index,
        };
        health.flush(mcr_sys::clock::realtime_ns(), &counts);
        let now = mcr_sys::clock::monotonic_ns();
        if redundancy.deadline().is_some_and(|d| d <= now) {
            redundancy.poll(table, now, &counts, |rule, frame, d| {
                send(egress, rule, frame, d, &counts)
            });
            self.flush();
        }
    }

    fn flush(&mut self) {
        let counts = Counts {
            counters: &self.counters,
            layout: &self.layout,
            worker: self.args.index,
        };
        self.egress.flush(&counts);
    }
}

/// What a datagram a rule takes goes through, from a ring or an SRT
/// input alike.
struct TakenBy<'a, 'c> {
    health: &'a mut Health,
    redundancy: &'a mut Redundancy,
    egress: &'a mut Egress,
    counts: &'a Counts<'c>,
}

impl TakenBy<'_, '_> {
    /// Follows the input's health and forwards the datagram: through the
    /// rule's merge or failover if it has several inputs. `arrived_ns` is
    /// the ring's time stamp, if it gave one (else now).
    #[inline]
    fn take(self, taken: &Taken<'_>, frame: &[u8], arrived_ns: Option<u64>) {
        let counts = self.counts;
        if taken.rule.health {
            let d = &taken.datagram;
            let arrived = arrived_ns.unwrap_or_else(mcr_sys::clock::realtime_ns);
            let payload = &frame[d.payload_at..d.payload_at + d.payload_len];
            self.health
                .packet(taken.rule.slot, taken.input, payload, arrived, counts);
        }
        let egress = self.egress;
        if taken.rule.redundancy.is_some() {
            let now = mcr_sys::clock::monotonic_ns();
            self.redundancy.packet(taken, frame, now, counts, |rule, frame, d| {
                send(egress, rule, frame, d, counts)
            });
        } else {
            send(egress, taken.rule, frame, &taken.datagram, counts);
        }
    }
}

/// Forwards the datagram `d` of `frame` by `rule`: counts it for the rule
/// and hands each output what it sends.
#[inline]
fn send(egress: &mut Egress, rule: &CompiledRule, frame: &[u8], d: &Datagram, counts: &Counts<'_>) {
    counts.rule(rule.slot, RuleCounter::Packets, 1);
    counts.rule(rule.slot, RuleCounter::Bytes, d.payload_len as u64);
    let taken = Taken {
        datagram: *d,
        rule,
        input: 0,
    };
    for o in &rule.outputs {
        match taken.verdict(o) {
            Verdict::Drop(reason) => counts.output(o.slot, reason, 1),
            Verdict::Frame { rewrite, ttl, tos } => egress.frame(frame, d, rewrite, (ttl, tos), o, counts),
            Verdict::Datagram { ttl, tos } => {
                let payload = &frame[d.payload_at..d.payload_at + d.payload_len];
                egress.datagram(payload, o.slot, ttl, tos, counts);
            }
            Verdict::Srt => {
                let payload = &frame[d.payload_at..d.payload_at + d.payload_len];
                egress.srt.send(o.slot, payload, counts);
            }
            Verdict::Rist => {
                let payload = &frame[d.payload_at..d.payload_at + d.payload_len];
                egress.rist.send(o.slot, payload, counts);
            }
        }
    }
}
