//! Sending: frames for multicast outputs in one batch per output
//! interface, payloads for unicast outputs through one UDP socket each.
//! Batches are flushed with one `sendmmsg` per interface or socket, never
//! blocking: what the kernel will not take now is dropped and counted for
//! its output alone.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;

use mcr_core::forward::{Datagram, FrameRewrite, rewrite};
use mcr_core::stats::{OutputCounter, StatsLayout, WorkerCounter};
use mcr_sys::mmsg::{MAX_BATCH, Outgoing, is_queue_full, send_batch};
use mcr_sys::packet::PacketTx;
use mcr_sys::shm::SharedCounters;
use mcr_sys::sockaddr::RawSockAddr;
use mcr_sys::uring::UringSend;
use socket2::{Domain, Protocol, Socket, Type};

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
}

/// How frames for multicast outputs reach the kernel. Both build frames in
/// a batch buffer; see docs/relay.md for what each costs here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EgressKind {
    /// One `sendmmsg` per batch.
    Sendmmsg,
    /// One io_uring submission per batch.
    Uring,
}

/// Parses `sendmmsg` or `uring`.
pub fn parse_egress(s: &str) -> Result<EgressKind, String> {
    match s {
        "sendmmsg" => Ok(EgressKind::Sendmmsg),
        "uring" => Ok(EgressKind::Uring),
        _ => Err(format!("`{s}`: write sendmmsg or uring")),
    }
}

/// Frames waiting to leave one interface.
pub struct FrameBatch {
    tx: PacketTx,
    uring: Option<(UringSend, Vec<io::Result<usize>>)>,
    slot_bytes: usize,
    buf: Vec<u8>,
    lens: [usize; MAX_BATCH],
    max_frame: usize,
    outputs: [u32; MAX_BATCH],
    payloads: [u32; MAX_BATCH],
    n: usize,
}

impl FrameBatch {
    /// A batch for interface `ifindex`, whose frames are at most
    /// `max_frame` bytes, sent the `kind` way.
    pub fn open(ifindex: u32, max_frame: usize, kind: EgressKind) -> io::Result<FrameBatch> {
        let tx = PacketTx::open(ifindex, false)?;
        mcr_sys::sockopt::force_send_buffer(tx.as_fd(), 4 << 20)?;
        let slot_bytes = max_frame.next_multiple_of(64);
        let uring = match kind {
            EgressKind::Uring => Some((UringSend::new(MAX_BATCH as u32)?, Vec::with_capacity(MAX_BATCH))),
            EgressKind::Sendmmsg => None,
        };
        Ok(FrameBatch {
            tx,
            uring,
            slot_bytes,
            buf: vec![0; slot_bytes * MAX_BATCH],
            lens: [0; MAX_BATCH],
            max_frame,
            outputs: [0; MAX_BATCH],
            payloads: [0; MAX_BATCH],
            n: 0,
        })
    }

    /// The largest frame it takes.
    pub fn max_frame(&self) -> usize {
        self.max_frame
    }

    /// Builds output `slot`'s frame for datagram `d` into the batch.
    #[inline]
    pub fn push(&mut self, frame: &[u8], d: &Datagram, rw: &FrameRewrite, slot: u32, counts: &Counts<'_>) {
        if self.n == MAX_BATCH {
            self.flush(counts);
        }
        let at = self.n * self.slot_bytes;
        match rewrite(frame, d, rw, &mut self.buf[at..at + self.slot_bytes]) {
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
        if self.n == 0 {
            return;
        }
        let n = self.n;
        self.n = 0;
        let (outputs, payloads) = (&self.outputs, &self.payloads);
        let count_sent = |range: std::ops::Range<usize>| {
            for i in range.clone() {
                counts.output(outputs[i], OutputCounter::Packets, 1);
                counts.output(outputs[i], OutputCounter::Bytes, u64::from(payloads[i]));
            }
            counts.worker(WorkerCounter::TxPackets, range.len() as u64);
        };
        let count_dropped = |range: std::ops::Range<usize>, reason: OutputCounter| {
            for i in range {
                counts.output(outputs[i], reason, 1);
            }
        };
        let mut frames: [&[u8]; MAX_BATCH] = [&[]; MAX_BATCH];
        for (i, f) in frames.iter_mut().enumerate().take(n) {
            *f = &self.buf[i * self.slot_bytes..i * self.slot_bytes + self.lens[i]];
        }
        if let Some((u, results)) = &mut self.uring {
            if u.send(self.tx.as_fd(), &frames[..n], results).is_err() {
                results.clear();
            }
            for i in 0..n {
                match results.get(i) {
                    Some(Ok(_)) => count_sent(i..i + 1),
                    Some(Err(e)) if is_queue_full(e) => count_dropped(i..i + 1, OutputCounter::QueueFull),
                    _ => count_dropped(i..i + 1, OutputCounter::SendError),
                }
            }
            return;
        }
        let mut off = 0;
        while off < n {
            match self.tx.send(&frames[off..n], true) {
                Ok(k) => {
                    count_sent(off..off + k);
                    off += k;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_queue_full(&e) => {
                    count_dropped(off..n, OutputCounter::QueueFull);
                    break;
                }
                Err(_) => {
                    count_dropped(off..off + 1, OutputCounter::SendError);
                    off += 1;
                }
            }
        }
    }
}

/// A unicast output's socket and what waits in it.
pub struct UdpOutput {
    sock: Socket,
    to: RawSockAddr,
    ttl_set: Option<u8>,
    /// Indexes into the shared payload slab.
    pending: Vec<(usize, u8)>,
}

impl UdpOutput {
    /// A socket that sends from `source` on interface `ifname` to `to`.
    pub fn open(ifname: &str, source: IpAddr, to: SocketAddr) -> io::Result<UdpOutput> {
        let domain = if to.is_ipv6() { Domain::IPV6 } else { Domain::IPV4 };
        let sock = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
        sock.bind_device(Some(ifname.as_bytes()))?;
        sock.bind(&SocketAddr::new(source, 0).into())?;
        sock.set_nonblocking(true)?;
        mcr_sys::sockopt::force_send_buffer(sock.as_fd(), 4 << 20)?;
        // Without it a send the queue below drops looks like success.
        mcr_sys::sockopt::set_recv_errors(sock.as_fd(), to.is_ipv6())?;
        Ok(UdpOutput {
            sock,
            to: RawSockAddr::new(to),
            ttl_set: None,
            pending: Vec::with_capacity(MAX_BATCH),
        })
    }

    fn set_ttl(&mut self, ttl: u8) -> io::Result<()> {
        if self.ttl_set != Some(ttl) {
            if self.to.to_std().is_some_and(|a| a.is_ipv6()) {
                self.sock.set_unicast_hops_v6(u32::from(ttl))?;
            } else {
                self.sock.set_ttl_v4(u32::from(ttl))?;
            }
            self.ttl_set = Some(ttl);
        }
        Ok(())
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

    fn full(&self) -> bool {
        self.lens.len() * self.entry_bytes >= self.buf.len()
    }

    /// True if a flush is due before the next payload fits.
    pub fn needs_flush(&self) -> bool {
        self.full()
    }

    /// Queues `payload` for `out` with TTL `ttl`; false if it does not fit.
    pub fn push(&mut self, out: &mut UdpOutput, payload: &[u8], ttl: u8) -> bool {
        if self.full() || payload.len() > self.entry_bytes {
            return false;
        }
        let i = self.lens.len();
        self.buf[i * self.entry_bytes..i * self.entry_bytes + payload.len()].copy_from_slice(payload);
        self.lens.push(payload.len());
        out.pending.push((i, ttl));
        true
    }

    /// Sends what every output has pending, and empties the slab.
    pub fn flush<'a>(&mut self, outputs: impl Iterator<Item = (u32, &'a mut UdpOutput)>, counts: &Counts<'_>) {
        for (slot, out) in outputs {
            let mut start = 0;
            while start < out.pending.len() {
                // A run of the same TTL goes out in one call.
                let ttl = out.pending[start].1;
                let end = out.pending[start..]
                    .iter()
                    .position(|p| p.1 != ttl)
                    .map_or(out.pending.len(), |k| start + k)
                    .min(start + MAX_BATCH);
                if out.set_ttl(ttl).is_err() {
                    counts.output(slot, OutputCounter::SendError, (end - start) as u64);
                    start = end;
                    continue;
                }
                let mut msgs = [Outgoing { to: None, data: &[] }; MAX_BATCH];
                for (m, &(i, _)) in msgs.iter_mut().zip(&out.pending[start..end]) {
                    m.to = Some(&out.to);
                    m.data = &self.buf[i * self.entry_bytes..i * self.entry_bytes + self.lens[i]];
                }
                let n = end - start;
                let mut off = 0;
                let mut retried = false;
                while off < n {
                    match send_batch(out.sock.as_fd(), &msgs[off..n], true) {
                        Ok(k) => {
                            for m in &msgs[off..off + k] {
                                counts.output(slot, OutputCounter::Packets, 1);
                                counts.output(slot, OutputCounter::Bytes, m.data.len() as u64);
                            }
                            counts.worker(WorkerCounter::TxPackets, k as u64);
                            off += k;
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) if is_queue_full(&e) => {
                            counts.output(slot, OutputCounter::QueueFull, (n - off) as u64);
                            break;
                        }
                        Err(_) if !retried => {
                            // An ICMP error about an earlier packet (host or
                            // port unreachable) fails this send once; count
                            // it and try again.
                            counts.output(slot, OutputCounter::SendError, 1);
                            retried = true;
                        }
                        Err(_) => {
                            counts.output(slot, OutputCounter::SendError, (n - off) as u64);
                            break;
                        }
                    }
                }
                start = end;
            }
            out.pending.clear();
        }
        self.lens.clear();
    }
}
