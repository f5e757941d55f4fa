//! Sending: frames for multicast outputs in one batch per output
//! interface; payloads for unicast outputs through one UDP socket per
//! (interface, source address), each datagram carrying its destination and
//! TTL. Batches are flushed with one `sendmmsg` per interface or socket,
//! never blocking: what the kernel will not take now is dropped and counted
//! for its output alone.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;

use mcr_core::forward::{Datagram, FrameRewrite, rewrite_as};
use mcr_core::interfaces::Interfaces;
use mcr_core::stats::{OutputCounter, WorkerCounter};
use mcr_core::table::{CompiledOutput, MatchTable, OutputKind};
use mcr_sys::mmsg::{MAX_BATCH, Outgoing, is_queue_full, send_batch};
use mcr_sys::packet::PacketTx;
use mcr_sys::sockaddr::RawSockAddr;
use rustc_hash::FxHashMap;
use socket2::{Domain, Protocol, Socket, Type};

use super::counts::Counts;
use crate::channel::{Problem, Scope};

/// How many messages of one batch the kernel may refuse for a full queue
/// before the rest of the batch is dropped unasked. A queue that another
/// CPU drains (a veth peer's backlog, a NIC's ring) has room again a moment
/// later, so one refusal must not cost the frames behind it (the kernel's
/// own forwarding drops only the frames that meet the full queue); but a
/// queue that stays full must not cost a system call per frame either.
const QUEUE_FULL_SKIPS: usize = 8;

/// Sends `n` messages with `attempt(offset)` and counts each by its output:
/// sent; dropped because the queue was full (that message, and the rest of
/// the batch once [`QUEUE_FULL_SKIPS`] were); or dropped because the kernel
/// refused for another reason (the rest of the batch: such an error, a link
/// that is down, say, does not clear message by message). A standby relay
/// sends none of them and counts each as held.
fn send_counted(
    n: usize,
    outputs: &[u32],
    bytes: &[u32],
    counts: &Counts<'_>,
    mut attempt: impl FnMut(usize) -> io::Result<usize>,
) {
    if counts.standby() {
        for &o in &outputs[..n] {
            counts.output(o, OutputCounter::Held, 1);
        }
        return;
    }
    let mut off = 0;
    let mut skips = 0;
    let mut icmp_reports = 0;
    while off < n {
        match attempt(off) {
            // An ICMP error about an earlier datagram (host or port
            // unreachable, reported by the host it went to) fails the next
            // send on the socket once, without sending it. That earlier
            // datagram left MCR and was counted sent; this one was not
            // sent: send it again, counting nothing for the report (at most
            // once per message, so reports cannot keep a batch going).
            Err(e) if icmp_reports < n && matches!(e.raw_os_error(), Some(libc::ECONNREFUSED | libc::EHOSTUNREACH)) => {
                icmp_reports += 1;
            }
            Ok(0) => {
                for &o in &outputs[off..n] {
                    counts.output(o, OutputCounter::SendError, 1);
                }
                return;
            }
            Ok(k) => {
                for i in off..off + k {
                    counts.output(outputs[i], OutputCounter::Packets, 1);
                    counts.output(outputs[i], OutputCounter::Bytes, u64::from(bytes[i]));
                }
                counts.worker(WorkerCounter::TxPackets, k as u64);
                off += k;
            }
            Err(e) if is_queue_full(&e) && skips < QUEUE_FULL_SKIPS => {
                counts.output(outputs[off], OutputCounter::QueueFull, 1);
                off += 1;
                skips += 1;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                let reason = if is_queue_full(&e) {
                    OutputCounter::QueueFull
                } else {
                    OutputCounter::SendError
                };
                for &o in &outputs[off..n] {
                    counts.output(o, reason, 1);
                }
                return;
            }
        }
    }
}

/// Frames waiting to leave one interface.
pub struct FrameBatch {
    tx: PacketTx,
    slot_bytes: usize,
    buf: Vec<u8>,
    lens: [usize; MAX_BATCH],
    outputs: [u32; MAX_BATCH],
    payloads: [u32; MAX_BATCH],
    n: usize,
}

impl FrameBatch {
    /// A batch for interface `ifindex`, whose frames are at most
    /// `max_frame` bytes.
    pub fn open(ifindex: u32, max_frame: usize) -> io::Result<FrameBatch> {
        let tx = PacketTx::open(ifindex, false)?;
        mcr_sys::sockopt::force_send_buffer(tx.as_fd(), 4 << 20)?;
        let slot_bytes = max_frame.next_multiple_of(64);
        Ok(FrameBatch {
            tx,
            slot_bytes,
            buf: vec![0; slot_bytes * MAX_BATCH],
            lens: [0; MAX_BATCH],
            outputs: [0; MAX_BATCH],
            payloads: [0; MAX_BATCH],
            n: 0,
        })
    }

    /// The largest frame it takes.
    pub fn max_frame(&self) -> usize {
        self.slot_bytes
    }

    /// Builds output `slot`'s frame for datagram `d`, leaving with `(ttl,
    /// tos)`, into the batch.
    #[inline]
    pub fn push(
        &mut self,
        frame: &[u8],
        d: &Datagram,
        rw: &FrameRewrite,
        (ttl, tos): (u8, u8),
        slot: u32,
        counts: &Counts<'_>,
    ) {
        if self.n == MAX_BATCH {
            self.flush(counts);
        }
        let at = self.n * self.slot_bytes;
        match rewrite_as(frame, d, rw, ttl, tos, &mut self.buf[at..at + self.slot_bytes]) {
            Ok(len) => {
                self.lens[self.n] = len;
                self.outputs[self.n] = slot;
                self.payloads[self.n] = d.payload_len as u32;
                self.n += 1;
            }
            Err(reason) => counts.output(slot, reason, 1),
        }
    }

    /// Hands the batch to the kernel.
    pub fn flush(&mut self, counts: &Counts<'_>) {
        self.flush_then(counts, &mut || ());
    }

    /// Hands the batch to the kernel, calling `before_send` just before.
    fn flush_then(&mut self, counts: &Counts<'_>, before_send: &mut dyn FnMut()) {
        let n = std::mem::take(&mut self.n);
        if n == 0 {
            return;
        }
        let mut frames: [&[u8]; MAX_BATCH] = [&[]; MAX_BATCH];
        for (i, f) in frames.iter_mut().enumerate().take(n) {
            *f = &self.buf[i * self.slot_bytes..i * self.slot_bytes + self.lens[i]];
        }
        let tx = &self.tx;
        before_send();
        send_counted(n, &self.outputs, &self.payloads, counts, |off| {
            tx.send(&frames[off..n], true)
        });
    }
}

/// A UDP socket that sends unicast outputs from one source address out of
/// one interface, and what waits in it.
pub struct UdpSender {
    sock: Socket,
    /// What waits to be sent, in order.
    pending: Vec<PendingSend>,
}

/// A datagram waiting in a [`UdpSender`].
#[derive(Debug, Clone, Copy)]
struct PendingSend {
    /// Its payload's entry in the slab.
    entry: usize,
    /// The output it is for (its statistics slot).
    slot: u32,
    /// Its destination, an index into the worker's destinations.
    dest: usize,
    /// The TTL or hop limit it leaves with.
    ttl: u8,
    /// The TOS byte or traffic class it leaves with.
    tos: u8,
}

impl UdpSender {
    /// A socket that sends from `source` out of interface `ifname`.
    pub fn open(ifname: &str, source: IpAddr) -> io::Result<UdpSender> {
        let domain = if source.is_ipv6() { Domain::IPV6 } else { Domain::IPV4 };
        let sock = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
        sock.bind_device(Some(ifname.as_bytes()))?;
        sock.bind(&SocketAddr::new(source, 0).into())?;
        sock.set_nonblocking(true)?;
        mcr_sys::sockopt::force_send_buffer(sock.as_fd(), 4 << 20)?;
        // Without it a send the queue below drops looks like success.
        mcr_sys::sockopt::set_recv_errors(sock.as_fd(), source.is_ipv6())?;
        Ok(UdpSender {
            sock,
            pending: Vec::with_capacity(MAX_BATCH),
        })
    }

    fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }
}

/// Payloads waiting for unicast outputs, in one slab shared by all of
/// them.
pub struct UdpSlab {
    buf: Vec<u8>,
    lens: Vec<usize>,
    entry_bytes: usize,
}

impl UdpSlab {
    /// Room for `entries` payloads of up to `entry_bytes` each.
    pub fn new(entries: usize, entry_bytes: usize) -> Self {
        UdpSlab {
            buf: vec![0; entries * entry_bytes],
            lens: Vec::with_capacity(entries),
            entry_bytes,
        }
    }

    /// True if a flush is due before the next payload fits.
    pub fn needs_flush(&self) -> bool {
        self.lens.len() * self.entry_bytes >= self.buf.len()
    }

    /// True if it holds half of what it can.
    fn half_full(&self) -> bool {
        2 * self.lens.len() * self.entry_bytes >= self.buf.len()
    }

    /// Queues `payload` on `sender` for output `slot`, to destination
    /// `dest` (an index into the worker's destinations), with `ttl` and
    /// `tos`; false if it does not fit.
    pub fn push(&mut self, sender: &mut UdpSender, payload: &[u8], slot: u32, dest: usize, ttl: u8, tos: u8) -> bool {
        if self.needs_flush() || payload.len() > self.entry_bytes {
            return false;
        }
        let i = self.lens.len();
        self.buf[i * self.entry_bytes..i * self.entry_bytes + payload.len()].copy_from_slice(payload);
        self.lens.push(payload.len());
        sender.pending.push(PendingSend {
            entry: i,
            slot,
            dest,
            ttl,
            tos,
        });
        true
    }

    /// Sends what every sender has pending, and empties the slab; calls
    /// `before_send` just before.
    pub fn flush<'a>(
        &mut self,
        senders: impl Iterator<Item = &'a mut UdpSender>,
        dests: &[RawSockAddr],
        counts: &Counts<'_>,
        before_send: &mut dyn FnMut(),
    ) {
        if self.lens.is_empty() {
            return;
        }
        before_send();
        for s in senders.filter(|s| s.has_pending()) {
            for chunk in s.pending.chunks(MAX_BATCH) {
                let mut msgs = [Outgoing::new(None, &[]); MAX_BATCH];
                let mut outputs = [0u32; MAX_BATCH];
                let mut bytes = [0u32; MAX_BATCH];
                for (k, p) in chunk.iter().enumerate() {
                    let i = p.entry;
                    msgs[k] = Outgoing {
                        to: dests.get(p.dest),
                        data: &self.buf[i * self.entry_bytes..i * self.entry_bytes + self.lens[i]],
                        ttl: Some(p.ttl),
                        tos: Some(p.tos),
                    };
                    outputs[k] = p.slot;
                    bytes[k] = self.lens[i] as u32;
                }
                let n = chunk.len();
                let fd = s.sock.as_fd();
                send_counted(n, &outputs, &bytes, counts, |off| send_batch(fd, &msgs[off..n], true));
            }
            s.pending.clear();
        }
        self.lens.clear();
    }
}

/// Everything a worker sends with: a frame batch per output interface and
/// a UDP sender per (interface, source address) of unicast outputs, kept
/// to what the table needs by [`Egress::reconcile`], as [`super::ingress::Ingress`]
/// keeps its rings.
pub struct Egress {
    frames: FxHashMap<u32, FrameBatch>,
    /// Unicast senders by (interface index, source address).
    udp: FxHashMap<(u32, IpAddr), UdpSender>,
    /// Unicast destinations, by output slot: the sender's key and an index
    /// into `dests`.
    routes: FxHashMap<u32, ((u32, IpAddr), usize)>,
    dests: Vec<RawSockAddr>,
    slab: UdpSlab,
    /// The most frames any batch held since the last flush.
    most_batched: usize,
    /// The SRT endpoints (worker 0's).
    pub srt: super::srt::Srt,
    /// The RIST endpoints (worker 0's).
    pub rist: super::rist::Rist,
}

impl Egress {
    /// Nothing to send with yet; unicast payloads queue in a slab of
    /// `pending` entries.
    pub fn new(pending: usize, worker: usize) -> Egress {
        Egress {
            srt: super::srt::Srt::new(worker),
            rist: super::rist::Rist::new(worker),
            frames: FxHashMap::default(),
            udp: FxHashMap::default(),
            routes: FxHashMap::default(),
            dests: Vec::new(),
            slab: UdpSlab::new(pending, 9216),
            most_batched: 0,
        }
    }

    /// Opens and closes sockets to match `table`: a frame batch per output
    /// interface, large enough for its MTU, and a UDP sender per
    /// (interface, source) of unicast outputs. What cannot be opened is
    /// left out and reported. Call it with nothing pending ([`Egress::flush`]).
    pub fn reconcile(&mut self, table: &MatchTable, interfaces: &Interfaces) -> Vec<Problem> {
        let mut problems = Vec::new();
        let name_of = |ifindex: u32| {
            interfaces
                .by_index(ifindex)
                .map_or_else(|| format!("#{ifindex}"), |i| i.name.clone())
        };
        let mut frame_ifs: FxHashMap<u32, usize> = FxHashMap::default();
        let mut routes: FxHashMap<u32, ((u32, IpAddr), usize)> = FxHashMap::default();
        let mut dests = Vec::new();
        for r in table.rules() {
            for o in &r.outputs {
                match &o.kind {
                    OutputKind::Frame(fr) => {
                        let need = 14 + 4 + fr.mtu as usize;
                        let e = frame_ifs.entry(o.ifindex).or_default();
                        *e = (*e).max(need);
                    }
                    OutputKind::Udp {
                        destination, source, ..
                    } => {
                        let key = (o.ifindex, *source);
                        if let std::collections::hash_map::Entry::Vacant(v) = self.udp.entry(key) {
                            match UdpSender::open(&o.interface, *source) {
                                Ok(u) => {
                                    v.insert(u);
                                }
                                Err(e) => {
                                    problems.push(Problem {
                                        scope: Scope::Rule(r.name.clone()),
                                        error: format!("unicast output on `{}` from {source}: {e}", o.interface),
                                    });
                                    continue;
                                }
                            }
                        }
                        dests.push(RawSockAddr::new(*destination));
                        routes.insert(o.slot, (key, dests.len() - 1));
                    }
                    OutputKind::Srt(_) | OutputKind::Rist(_) => {}
                }
            }
        }
        let used: std::collections::HashSet<(u32, IpAddr)> = routes.values().map(|(k, _)| *k).collect();
        self.udp.retain(|k, _| used.contains(k));
        self.routes = routes;
        self.dests = dests;
        self.frames
            .retain(|ifindex, b| frame_ifs.get(ifindex).is_some_and(|&need| b.max_frame() >= need));
        for (ifindex, need) in frame_ifs {
            if let std::collections::hash_map::Entry::Vacant(v) = self.frames.entry(ifindex) {
                match FrameBatch::open(ifindex, need) {
                    Ok(b) => {
                        v.insert(b);
                    }
                    Err(e) => problems.push(Problem {
                        scope: Scope::Output(name_of(ifindex)),
                        error: format!("output interface `{}`: AF_PACKET socket: {e}", name_of(ifindex)),
                    }),
                }
            }
        }
        problems
    }

    /// Builds output `o`'s frame for datagram `d` of `frame`, leaving with
    /// `(ttl, tos)`, into its interface's batch.
    #[inline]
    pub fn frame(
        &mut self,
        frame: &[u8],
        d: &Datagram,
        rw: &FrameRewrite,
        ttl_tos: (u8, u8),
        o: &CompiledOutput,
        counts: &Counts<'_>,
    ) {
        match self.frames.get_mut(&o.ifindex) {
            Some(b) => {
                b.push(frame, d, rw, ttl_tos, o.slot, counts);
                self.most_batched = self.most_batched.max(b.n);
            }
            None => counts.output(o.slot, OutputCounter::SendError, 1),
        }
    }

    /// Queues `payload` for unicast output `slot`, leaving with `ttl` and
    /// `tos`, on its sender.
    #[inline]
    pub fn datagram(&mut self, payload: &[u8], slot: u32, ttl: u8, tos: u8, counts: &Counts<'_>) {
        let Some(&(key, dest)) = self.routes.get(&slot) else {
            counts.output(slot, OutputCounter::SendError, 1);
            return;
        };
        if self.slab.needs_flush() {
            self.slab.flush(self.udp.values_mut(), &self.dests, counts, &mut || ());
        }
        let Some(u) = self.udp.get_mut(&key) else {
            counts.output(slot, OutputCounter::SendError, 1);
            return;
        };
        if !self.slab.push(u, payload, slot, dest, ttl, tos) {
            counts.output(slot, OutputCounter::QueueFull, 1);
        }
    }

    /// Hands everything batched to the kernel.
    pub fn flush(&mut self, counts: &Counts<'_>) {
        self.flush_then(counts, &mut || ());
    }

    /// True if a frame batch or the unicast slab is half full: the
    /// workers end a pass there, so that no batch fills (and is sent)
    /// before the frames in it are handed back to their rings, unless one
    /// frame has more outputs on one interface than half a batch.
    pub fn half_full(&self) -> bool {
        2 * self.most_batched >= MAX_BATCH || self.slab.half_full()
    }

    /// Hands everything batched to the kernel, calling `before_send` just
    /// before each send (the workers hand the frames they forward back to
    /// their rings there: a worker killed before then leaves them to the
    /// next one, and one killed during the send system call dies only once
    /// it returned, so the frames went out).
    pub fn flush_then(&mut self, counts: &Counts<'_>, before_send: &mut dyn FnMut()) {
        self.most_batched = 0;
        for b in self.frames.values_mut() {
            b.flush_then(counts, before_send);
        }
        self.slab.flush(self.udp.values_mut(), &self.dests, counts, before_send);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcr_core::stats::StatsLayout;
    use mcr_sys::shm::SharedCounters;

    struct Bench {
        counters: SharedCounters,
        layout: StatsLayout,
    }

    impl Bench {
        fn new() -> Self {
            let layout = StatsLayout::new(1);
            Bench {
                counters: SharedCounters::create("egress-test", layout.len()).expect("memory"),
                layout,
            }
        }
        fn counts(&self) -> Counts<'_> {
            Counts {
                counters: &self.counters,
                layout: &self.layout,
                worker: 0,
            }
        }
        fn get(&self, slot: u32, c: OutputCounter) -> u64 {
            self.counters.get(self.layout.output(0, slot, c))
        }
    }

    /// A kernel that takes messages until `refuse(i)` refuses one
    /// (with that errno): an error if it is the call's first, else a short
    /// count, as `sendmmsg` does.
    fn run(n: usize, refuse: impl Fn(usize) -> Option<i32>) -> (Bench, usize) {
        let b = Bench::new();
        let outputs: Vec<u32> = (0..n as u32).map(|i| i % 2).collect();
        let bytes = vec![100u32; n];
        let mut calls = 0;
        send_counted(n, &outputs, &bytes, &b.counts(), |off| {
            calls += 1;
            let mut k = 0;
            while off + k < n {
                if let Some(errno) = refuse(off + k) {
                    return if k == 0 {
                        Err(io::Error::from_raw_os_error(errno))
                    } else {
                        Ok(k)
                    };
                }
                k += 1;
            }
            Ok(k)
        });
        (b, calls)
    }

    fn total(b: &Bench, c: OutputCounter) -> u64 {
        b.get(0, c) + b.get(1, c)
    }

    #[test]
    fn a_full_queue_costs_only_the_frames_that_meet_it() {
        // Messages 3 and 10 meet a full queue: the call that reaches one
        // ends short, the next one, starting with it, fails.
        let (b, calls) = run(64, |i| (i == 3 || i == 10).then_some(libc::ENOBUFS));
        assert_eq!(calls, 5);
        assert_eq!(total(&b, OutputCounter::QueueFull), 2);
        assert_eq!(total(&b, OutputCounter::Packets), 62);
        assert_eq!(b.get(1, OutputCounter::QueueFull), 1, "message 3 was output 1's");
        assert_eq!(total(&b, OutputCounter::Bytes), 6200);
    }

    #[test]
    fn a_standby_relay_sends_nothing_and_counts_what_it_holds() {
        let b = Bench::new();
        let standby = b.layout.worker(0, WorkerCounter::Standby);
        b.counters.set(standby, 1);
        let outputs = [0u32, 1, 1];
        let mut calls = 0;
        send_counted(3, &outputs, &[100; 3], &b.counts(), |_| {
            calls += 1;
            Ok(3)
        });
        assert_eq!(calls, 0, "nothing reaches the kernel");
        assert_eq!((b.get(0, OutputCounter::Held), b.get(1, OutputCounter::Held)), (1, 2));
        assert_eq!(total(&b, OutputCounter::Packets), 0);
        // Active again: the next batch is sent.
        b.counters.set(standby, 0);
        send_counted(3, &outputs, &[100; 3], &b.counts(), |_| {
            calls += 1;
            Ok(3)
        });
        assert_eq!((calls, total(&b, OutputCounter::Packets)), (1, 3));
        assert_eq!(total(&b, OutputCounter::Held), 3);
    }

    #[test]
    fn a_queue_that_stays_full_costs_a_bounded_number_of_calls() {
        let (b, calls) = run(64, |_| Some(libc::EAGAIN));
        assert_eq!(total(&b, OutputCounter::QueueFull), 64);
        assert_eq!(total(&b, OutputCounter::Packets), 0);
        assert_eq!(calls, QUEUE_FULL_SKIPS + 1);
    }

    #[test]
    fn an_icmp_report_of_an_earlier_datagram_costs_no_message_and_counts_once() {
        // The report fails the call that meets it once, sending nothing;
        // the message is sent by the next call and counted sent, only.
        let b = Bench::new();
        let outputs: Vec<u32> = (0..64).map(|i| i % 2).collect();
        let bytes = vec![100u32; 64];
        let (mut calls, mut reported) = (0, Vec::new());
        send_counted(64, &outputs, &bytes, &b.counts(), |off| {
            calls += 1;
            if (off == 5 || off == 40) && !reported.contains(&off) {
                reported.push(off);
                return Err(io::Error::from_raw_os_error(libc::ECONNREFUSED));
            }
            let end = [5, 40, 64].into_iter().find(|&e| e > off).unwrap_or(64);
            Ok(end - off)
        });
        assert_eq!(total(&b, OutputCounter::Packets), 64);
        assert_eq!(total(&b, OutputCounter::SendError), 0);
        assert_eq!(total(&b, OutputCounter::Bytes), 6400);
        assert_eq!(calls, 5);
        // Reports without end are bounded: then the rest is a send error.
        let (b, calls) = run(8, |_| Some(libc::EHOSTUNREACH));
        assert_eq!(total(&b, OutputCounter::SendError), 8);
        assert_eq!(calls, 9);
    }

    #[test]
    fn another_error_drops_the_rest_at_once() {
        let (b, calls) = run(64, |i| (i >= 20).then_some(libc::ENETDOWN));
        assert_eq!(total(&b, OutputCounter::Packets), 20);
        assert_eq!(total(&b, OutputCounter::SendError), 44);
        assert_eq!(total(&b, OutputCounter::QueueFull), 0);
        assert_eq!(calls, 2);
    }
}
