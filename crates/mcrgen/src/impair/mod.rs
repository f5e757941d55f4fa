//! `mcrgen impair`: a userspace stand-in for netem between two interfaces.
//!
//! Every frame that arrives on the input interface leaves on the output
//! interface unchanged, except the frames of the kind chosen ([`Match`]):
//! by default `mcrgen` test packets (IPv4 UDP carrying a test payload,
//! plain or wrapped in RTP or MPEG-TS), or with [`Match::Udp`] every IPv4
//! UDP datagram, whatever it carries (SRT, RIST). Of those, a chosen share
//! is:
//!
//! - *dropped*;
//! - *duplicated*: sent twice;
//! - *reordered*: held back and sent right after the next packet of the same
//!   destination, so the receiver sees it arrive after a higher sequence
//!   number (a held packet that no later one overtakes within
//!   [`HOLD_NS`] is sent as it is and counted as *released in order*);
//! - *corrupted*: one bit of the pattern flipped, with the UDP checksum
//!   fixed up, so only a byte-for-byte check of the payload can tell
//!   (test packets only).
//!
//! Faults are exclusive per packet and drawn from a seeded generator, so a
//! run is reproducible. A delay sends every matched frame that much later,
//! in order, and a cut drops every one for a while. A *loss band* drops
//! instead the test packets whose
//! (stream, sequence number) hash, with the seed, into a share of the
//! range: the same packet is dropped or kept whenever and wherever it
//! passes, so two impairers with the same seed on two paths that carry
//! the same stream drop the same packets where their bands overlap and
//! never the same where they do not ([`in_band`]). The faults that need a
//! test payload (corruption, broken MPEG-TS sync bytes, loss bands) are
//! refused with [`Match::Udp`] ([`Faults::validate`]). Every fault is
//! counted, so a test can check that a receiver reports exactly what was
//! done.

mod matching;
mod run;

pub use matching::Match;
pub use run::{ImpairConfig, ImpairError, run};

use std::collections::HashMap;

use mcr_core::wire::checksum;
use serde::{Deserialize, Serialize};

use crate::payload::HEADER_LEN;
use matching::Flow;

/// The share (0 to 1) of matched packets (test packets, or with
/// [`Match::Udp`] every IPv4 UDP datagram) that suffer each fault.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Faults {
    /// Which frames the faults act on.
    pub matching: Match,
    /// Dropped.
    pub loss: f64,
    /// Sent twice.
    pub duplicate: f64,
    /// Sent after the next packet of the same destination.
    pub reorder: f64,
    /// One payload bit flipped.
    pub corrupt: f64,
    /// MPEG-TS datagrams (in UDP or RTP) with one transport packet's sync
    /// byte broken (a Sync_byte_error).
    pub sync_error: f64,
    /// MPEG-TS datagrams with two transport packets' sync bytes broken in
    /// a row (a TS_sync_loss and two Sync_byte_errors).
    pub sync_loss: f64,
    /// Every matched packet leaves this much later (a longer path), in
    /// order.
    pub delay_ns: u64,
    /// The path is cut, once per entry: every matched packet is dropped
    /// from this long after the first matched packet, for this long.
    pub cut: Vec<(u64, u64)>,
    /// Test packets whose hash falls in this share of the range (from, to,
    /// each 0 to 1) are dropped ([`in_band`]).
    pub loss_band: Option<(f64, f64)>,
}

/// Whether a loss band `(from, to)` with `seed` drops the test packet
/// `seq` of stream `stream`.
pub fn in_band(seed: u64, stream: u32, seq: u64, band: (f64, f64)) -> bool {
    let mut z = seed ^ (u64::from(stream) << 40) ^ seq.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    let at = (z >> 11) as f64 / (1u64 << 53) as f64;
    band.0 <= at && at < band.1
}

impl Faults {
    /// Checks each share is in 0..=1 and together they are at most 1, and
    /// that with [`Match::Udp`] no fault needs a test payload.
    pub fn validate(&self) -> Result<(), String> {
        if self.matching == Match::Udp {
            let needs_payload = [
                ("--corrupt", self.corrupt > 0.0),
                ("--sync-error", self.sync_error > 0.0),
                ("--sync-loss", self.sync_loss > 0.0),
                ("--loss-band", self.loss_band.is_some()),
            ];
            let refused: Vec<&str> = needs_payload.iter().filter(|(_, on)| *on).map(|(f, _)| *f).collect();
            if !refused.is_empty() {
                return Err(format!(
                    "{} need{} a test payload and cannot act on any UDP datagram: drop {} or use --match test (with --match udp: --loss, --duplicate, --reorder, --delay, --cut)",
                    refused.join(", "),
                    if refused.len() == 1 { "s" } else { "" },
                    if refused.len() == 1 { "it" } else { "them" },
                ));
            }
        }
        if let Some((from, to)) = self.loss_band
            && !(0.0 <= from && from <= to && to <= 1.0)
        {
            return Err("a loss band runs from a share to a larger one, within 0%-100%".into());
        }
        let all = [
            self.loss,
            self.duplicate,
            self.reorder,
            self.corrupt,
            self.sync_error,
            self.sync_loss,
        ];
        if all.iter().any(|p| !(0.0..=1.0).contains(p)) {
            return Err("each fault's share must be between 0% and 100%".into());
        }
        if all.iter().sum::<f64>() > 1.0 + 1e-9 {
            return Err("the faults' shares add up to more than 100%".into());
        }
        Ok(())
    }
}

/// What the impairer did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImpairReport {
    /// Frames read from the input interface.
    pub frames_in: u64,
    /// Frames written to the output interface.
    pub frames_out: u64,
    /// Frames of no kind the faults act on, passed on unchanged.
    pub other_frames: u64,
    /// Test packets seen (with `--match udp`, those among the UDP
    /// datagrams).
    pub test_packets: u64,
    /// Frames the faults act on (`--match`): the test packets, or every
    /// IPv4 UDP datagram. The counts below are of these.
    #[serde(default)]
    pub matched: u64,
    /// Matched packets dropped.
    pub dropped: u64,
    /// Matched packets sent twice.
    pub duplicated: u64,
    /// Matched packets sent after a later packet of their destination.
    pub reordered: u64,
    /// Matched packets held back but sent in order for want of a later
    /// packet.
    pub released_in_order: u64,
    /// Test packets with one payload bit flipped.
    pub corrupted: u64,
    /// MPEG-TS test packets given one broken sync byte.
    #[serde(default)]
    pub sync_errors: u64,
    /// MPEG-TS test packets given two broken sync bytes in a row.
    #[serde(default)]
    pub sync_losses: u64,
    /// Frames the output interface refused.
    pub send_errors: u64,
    /// Matched packets sent `--delay` later.
    #[serde(default)]
    pub delayed: u64,
    /// The least time a delayed packet was held, in ns (the impairer's
    /// clock).
    #[serde(default)]
    pub delay_min_ns: Option<u64>,
    /// Matched packets dropped while the path was cut.
    #[serde(default)]
    pub cut: u64,
    /// Test packets dropped by the loss band.
    #[serde(default)]
    pub band_dropped: u64,
}

#[derive(Debug, Clone, Copy)]
enum Fault {
    Loss,
    Duplicate,
    Reorder,
    Corrupt,
    /// Break this many sync bytes in a row.
    BreakSync(usize),
}

/// How long a packet held for reordering waits for a later one of its
/// destination before it is sent as it is (20 ms).
pub const HOLD_NS: u64 = 20_000_000;

/// The decisions, without I/O.
#[derive(Debug)]
pub struct Impairer {
    faults: Faults,
    seed: u64,
    rng: u64,
    /// Per destination: the held frame and when it was held.
    held: HashMap<Flow, (Vec<u8>, u64)>,
    /// Matched packets waiting out the delay: when they go, in order.
    delayed: std::collections::VecDeque<(u64, Vec<u8>)>,
    /// When the first matched packet came (the cut counts from it).
    first_test: Option<u64>,
    report: ImpairReport,
}

impl Impairer {
    /// An impairer applying `faults`, drawing from a generator seeded with
    /// `seed`.
    pub fn new(faults: Faults, seed: u64) -> Self {
        Impairer {
            faults,
            seed,
            rng: seed ^ 0x2545_f491_4f6c_dd1d,
            held: HashMap::new(),
            delayed: std::collections::VecDeque::new(),
            first_test: None,
            report: ImpairReport::default(),
        }
    }

    fn next_u64(&mut self) -> u64 {
        // splitmix64
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// What was done so far.
    pub fn report(&self) -> ImpairReport {
        self.report
    }

    fn emit(&mut self, frame: Vec<u8>, out: &mut Vec<Vec<u8>>) {
        self.report.frames_out += 1;
        out.push(frame);
    }

    /// Sends a matched packet now, or after the delay.
    fn pass(&mut self, frame: Vec<u8>, now_ns: u64, out: &mut Vec<Vec<u8>>) {
        if self.faults.delay_ns == 0 {
            return self.emit(frame, out);
        }
        self.report.delayed += 1;
        self.delayed
            .push_back((now_ns.saturating_add(self.faults.delay_ns), frame));
    }

    /// Takes one frame that arrived at `now_ns`; appends what to send, in
    /// order, to `out`.
    pub fn frame(&mut self, frame: &[u8], now_ns: u64, out: &mut Vec<Vec<u8>>) {
        self.report.frames_in += 1;
        let Some(matching::Matched { payload_at, flow, test }) = self.faults.matching.matches(frame) else {
            self.report.other_frames += 1;
            self.emit(frame.to_vec(), out);
            return;
        };
        self.report.matched += 1;
        if test.is_some() {
            self.report.test_packets += 1;
        }
        let first = *self.first_test.get_or_insert(now_ns);
        let since = now_ns - first;
        if self
            .faults
            .cut
            .iter()
            .any(|&(after, long)| since >= after && since - after < long)
        {
            self.report.cut += 1;
            return;
        }
        // (Loss bands, corruption and broken sync bytes need a test
        // payload: `validate` refuses them with `Match::Udp`, and a
        // datagram that is not a test packet is spared them here too.)
        if let (Some(band), Some((stream, seq))) = (self.faults.loss_band, test)
            && in_band(self.seed, stream, seq, band)
        {
            self.report.band_dropped += 1;
            return;
        }
        let mut copy = frame.to_vec();
        match self.draw() {
            Some(Fault::Loss) => {
                self.report.dropped += 1;
                return;
            }
            Some(Fault::Duplicate) => {
                self.report.duplicated += 1;
                self.pass(copy.clone(), now_ns, out);
            }
            // One packet per flow is held at a time; another that draws
            // this fault meanwhile passes unharmed.
            Some(Fault::Reorder) if !self.held.contains_key(&flow) => {
                self.held.insert(flow, (copy, now_ns));
                return;
            }
            Some(Fault::Corrupt) if test.is_some() && copy.len() > payload_at + HEADER_LEN => {
                self.corrupt(&mut copy, payload_at);
                self.report.corrupted += 1;
            }
            Some(Fault::BreakSync(n)) if test.is_some() && break_sync(&mut copy, payload_at, n) => match n {
                1 => self.report.sync_errors += 1,
                _ => self.report.sync_losses += 1,
            },
            _ => {}
        }
        self.pass(copy, now_ns, out);
        if let Some((h, _)) = self.held.remove(&flow) {
            self.report.reordered += 1;
            self.pass(h, now_ns, out);
        }
    }

    /// Sends, as they are, the held packets that have waited [`HOLD_NS`] or
    /// longer by `now_ns`, and the delayed ones whose delay is over.
    pub fn expire(&mut self, now_ns: u64, out: &mut Vec<Vec<u8>>) {
        let due: Vec<Flow> = self
            .held
            .iter()
            .filter(|(_, (_, at))| now_ns.saturating_sub(*at) >= HOLD_NS)
            .map(|(f, _)| *f)
            .collect();
        for f in due {
            if let Some((h, _)) = self.held.remove(&f) {
                self.report.released_in_order += 1;
                self.pass(h, now_ns, out);
            }
        }
        while self.delayed.front().is_some_and(|(at, _)| *at <= now_ns) {
            if let Some((at, f)) = self.delayed.pop_front() {
                let held = now_ns - (at - self.faults.delay_ns);
                let least = self.report.delay_min_ns.map_or(held, |m| m.min(held));
                self.report.delay_min_ns = Some(least);
                self.emit(f, out);
            }
        }
    }

    /// When [`Impairer::expire`] next has something to send: the first
    /// delayed packet's time, or when a held one stops waiting.
    pub fn next_due_ns(&self) -> Option<u64> {
        let held = self.held.values().map(|(_, at)| at.saturating_add(HOLD_NS)).min();
        let delayed = self.delayed.front().map(|(at, _)| *at);
        held.into_iter().chain(delayed).min()
    }

    /// Which fault, if any, the next matched packet suffers.
    fn draw(&mut self) -> Option<Fault> {
        let f = &self.faults;
        let shares = [
            (f.loss, Fault::Loss),
            (f.duplicate, Fault::Duplicate),
            (f.reorder, Fault::Reorder),
            (f.corrupt, Fault::Corrupt),
            (f.sync_error, Fault::BreakSync(1)),
            (f.sync_loss, Fault::BreakSync(2)),
        ];
        let r = self.next_f64();
        let mut edge = 0.0;
        for (share, fault) in shares {
            edge += share;
            if r < edge {
                return Some(fault);
            }
        }
        None
    }

    /// Flips one bit of the pattern (after the payload header) and fixes
    /// the UDP checksum, so the frame is valid on the wire.
    fn corrupt(&mut self, frame: &mut [u8], payload_at: usize) {
        let span = frame.len() - payload_at - HEADER_LEN;
        let at = payload_at + HEADER_LEN + (self.next_u64() % span as u64) as usize;
        let bit = 1u8 << (self.next_u64() % 8);
        flip(frame, payload_at, at, bit);
    }

    /// Sends every held and delayed packet as it is (at the end).
    pub fn flush(&mut self, out: &mut Vec<Vec<u8>>) {
        let held: Vec<Vec<u8>> = self.held.drain().map(|(_, (f, _))| f).collect();
        for h in held {
            self.report.released_in_order += 1;
            self.delayed.push_back((0, h));
        }
        while let Some((_, f)) = self.delayed.pop_front() {
            self.emit(f, out);
        }
    }
}

/// XORs byte `at` of `frame` (whose UDP payload starts at `payload_at`)
/// with `mask` and fixes the UDP checksum, so the frame is valid on the
/// wire.
fn flip(frame: &mut [u8], payload_at: usize, at: usize, mask: u8) {
    // The 16-bit word of the UDP checksum that holds the byte: words are
    // aligned to the start of the UDP header (payload_at - 8, even).
    let word_at = at - ((at - (payload_at - 8)) % 2);
    let word = |f: &[u8]| u16::from_be_bytes([f[word_at], *f.get(word_at + 1).unwrap_or(&0)]);
    let old = word(frame);
    frame[at] ^= mask;
    let new = word(frame);
    let csum_at = payload_at - 2;
    let c = u16::from_be_bytes([frame[csum_at], frame[csum_at + 1]]);
    if c != 0 {
        let fixed = match checksum::update16(c, old, new) {
            0 => 0xffff,
            v => v,
        };
        frame[csum_at..csum_at + 2].copy_from_slice(&fixed.to_be_bytes());
    }
}

/// Breaks the sync bytes of `n` transport packets in a row (from the
/// third) of a test packet that carries MPEG-TS (in UDP or in RTP), whose
/// UDP payload starts at `payload_at`; false if it carries none.
fn break_sync(frame: &mut [u8], payload_at: usize, n: usize) -> bool {
    let payload = &frame[payload_at..];
    let body_at = match mcr_core::wire::rtp::RtpHeader::parse(payload) {
        Some(h) if mcr_core::wire::ts::packets(&payload[h.payload_start..h.payload_end]).is_some() => {
            payload_at + h.payload_start
        }
        _ if mcr_core::wire::ts::packets(payload).is_some() => payload_at,
        _ => return false,
    };
    let packets = (frame.len() - body_at) / mcr_core::wire::ts::PACKET;
    if packets < 2 + n {
        return false;
    }
    for k in 2..2 + n {
        flip(frame, payload_at, body_at + k * mcr_core::wire::ts::PACKET, 0xff);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload;
    use mcr_core::wire::ipv4::Ipv4Header;
    use mcr_core::wire::udp::UdpHeader;
    use mcr_core::wire::{UDP_V4_HEADERS, UdpFrameSpec, write_udp_v4_frame};
    use zerocopy::FromBytes;

    fn frame(seq: u64, port: u16) -> Vec<u8> {
        let mut f = vec![0u8; UDP_V4_HEADERS + 200];
        payload::fill(&mut f[UDP_V4_HEADERS..], 0, seq, 1);
        let spec = UdpFrameSpec {
            dst_mac: [1, 0, 0x5e, 1, 1, 1],
            src_mac: [2, 0, 0, 0, 0, 1],
            src: "10.0.0.1:4000".parse().expect("literal"),
            dst: std::net::SocketAddrV4::new("239.1.1.1".parse().expect("literal"), port),
            ttl: 9,
            dscp: 0,
            ident: 0,
        };
        write_udp_v4_frame(&mut f, &spec, 200).expect("fits");
        f
    }

    /// Test packet `seq` wrapped as `wrap`, in a frame with a valid UDP
    /// checksum.
    fn wrapped(seq: u64, wrap: crate::wrap::Wrap) -> Vec<u8> {
        let len = wrap.datagram_len(1024);
        let mut f = vec![0u8; UDP_V4_HEADERS + len];
        wrap.fill(
            &mut f[UDP_V4_HEADERS..],
            0,
            seq,
            0,
            seq * 1_000_000,
            &mut Vec::new(),
            |b| payload::fill(b, 0, seq, 1),
        );
        let spec = UdpFrameSpec {
            dst_mac: [1, 0, 0x5e, 1, 1, 1],
            src_mac: [2, 0, 0, 0, 0, 1],
            src: "10.0.0.1:4000".parse().expect("literal"),
            dst: "239.1.1.1:5001".parse().expect("literal"),
            ttl: 9,
            dscp: 0,
            ident: 0,
        };
        write_udp_v4_frame(&mut f, &spec, len).expect("fits");
        f
    }

    #[test]
    fn broken_sync_bytes_are_counted_by_the_health_checks_exactly_and_checksums_stay_valid() {
        use mcr_core::forward::{RxChecksum, parse, udp_checksum_ok};
        for wrap in [crate::wrap::Wrap::Ts, crate::wrap::Wrap::RtpTs] {
            let mut imp = Impairer::new(
                Faults {
                    sync_error: 0.1,
                    sync_loss: 0.1,
                    ..Faults::default()
                },
                3,
            );
            let mut out = Vec::new();
            for q in 0..2000 {
                imp.frame(&wrapped(q, wrap), q * 1_000_000, &mut out);
            }
            let r = imp.report();
            assert!(r.sync_errors > 100 && r.sync_losses > 100, "{r:?}");
            let mut health = mcr_core::health::InputHealth::default();
            for (q, f) in out.iter().enumerate() {
                let d = parse(f, f.len(), RxChecksum::Unknown, None).expect("a valid datagram");
                assert!(udp_checksum_ok(f, &d, RxChecksum::Unknown), "{wrap:?} packet {q}");
                health.observe(&f[d.payload_at..d.payload_at + d.payload_len], q as u64 * 1_000_000);
            }
            let ts = health.ts.counts();
            assert_eq!(ts.sync_byte_errors, r.sync_errors + 2 * r.sync_losses, "{wrap:?}");
            assert_eq!(ts.sync_losses, r.sync_losses, "{wrap:?}");
            // A packet whose sync byte is broken is out of the stream for
            // the continuity check (and, after a sync loss, so are those
            // until sync is regained): the next packet of its PID counts a
            // continuity error, at least one per event.
            assert!(ts.continuity_errors >= r.sync_errors + r.sync_losses, "{wrap:?} {ts:?}");
            assert_eq!(ts.pat_errors, 0, "{wrap:?}");
        }
        // Nothing to break in a plain test packet.
        let mut f = wrapped(1, crate::wrap::Wrap::Plain);
        assert!(!break_sync(&mut f, UDP_V4_HEADERS, 1));
    }

    fn seqs(out: &[Vec<u8>]) -> Vec<u64> {
        out.iter()
            .map(|f| match payload::check(&f[UDP_V4_HEADERS..]) {
                payload::Check::Intact(h) | payload::Check::Damaged(h) => h.seq,
                other => panic!("not a test packet: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn without_faults_everything_passes_unchanged() {
        let mut imp = Impairer::new(Faults::default(), 1);
        let mut out = Vec::new();
        for s in 0..10 {
            imp.frame(&frame(s, 5001), s, &mut out);
        }
        imp.frame(b"not even ethernet", 0, &mut out);
        assert_eq!(seqs(&out[..10]), (0..10).collect::<Vec<_>>());
        assert_eq!(out[10], b"not even ethernet");
        assert_eq!(imp.report().other_frames, 1);
        assert_eq!(imp.report().frames_out, 11);
    }

    #[test]
    fn loss_bands_drop_the_same_packets_wherever_they_pass() {
        let through = |band: (f64, f64), port: u16| {
            let mut imp = Impairer::new(
                Faults {
                    loss_band: Some(band),
                    ..Faults::default()
                },
                42,
            );
            let mut out = Vec::new();
            for s in 0..20_000 {
                imp.frame(&frame(s, port), s, &mut out);
            }
            let kept: std::collections::BTreeSet<u64> = seqs(&out).into_iter().collect();
            let lost: Vec<u64> = (0..20_000).filter(|s| !kept.contains(s)).collect();
            assert_eq!(imp.report().band_dropped, lost.len() as u64);
            lost
        };
        let a = through((0.0, 0.01), 5001);
        let b = through((0.01, 0.02), 6001);
        // About 1% each, and never the same packet.
        assert!(
            (150..250).contains(&a.len()) && (150..250).contains(&b.len()),
            "{} {}",
            a.len(),
            b.len()
        );
        assert!(a.iter().all(|s| !b.contains(s)));
        // Overlapping bands lose the same packets exactly where they overlap.
        let c = through((0.005, 0.015), 6001);
        let both: Vec<u64> = a.iter().copied().filter(|s| c.contains(s)).collect();
        let overlap: Vec<u64> = (0..20_000).filter(|&s| in_band(42, 0, s, (0.005, 0.01))).collect();
        assert_eq!(both, overlap);
        assert!(!both.is_empty());
    }

    #[test]
    fn each_fault_does_what_it_says() {
        let all = |f: Faults| {
            let mut imp = Impairer::new(f, 7);
            let mut out = Vec::new();
            for s in 0..100 {
                imp.frame(&frame(s, 5001), s, &mut out);
            }
            imp.flush(&mut out);
            (imp.report(), out)
        };
        let (r, out) = all(Faults {
            loss: 1.0,
            ..Default::default()
        });
        assert_eq!((r.dropped, out.len()), (100, 0));
        let (r, out) = all(Faults {
            duplicate: 1.0,
            ..Default::default()
        });
        assert_eq!((r.duplicated, out.len()), (100, 200));
        let (r, out) = all(Faults {
            reorder: 1.0,
            ..Default::default()
        });
        // Every other packet is held and overtaken by the next, which is
        // otherwise unharmed.
        assert_eq!((r.reordered, r.corrupted), (50, 0));
        assert_eq!(&seqs(&out)[..4], &[1, 0, 3, 2]);
        assert!(
            out.iter()
                .all(|f| matches!(payload::check(&f[UDP_V4_HEADERS..]), payload::Check::Intact(_)))
        );
        let (r, out) = all(Faults {
            corrupt: 1.0,
            ..Default::default()
        });
        assert_eq!(r.corrupted, 100);
        for f in &out {
            assert!(matches!(
                payload::check(&f[UDP_V4_HEADERS..]),
                payload::Check::Damaged(_)
            ));
            let (ip, rest) = Ipv4Header::ref_from_prefix(&f[14..]).expect("ip");
            let (u, data) = UdpHeader::ref_from_prefix(rest).expect("udp");
            assert!(
                u.checksum_ok_v4(ip.src, ip.dst, data),
                "corruption must keep the checksum valid"
            );
        }
    }

    #[test]
    fn a_held_packet_waits_only_for_its_own_flow() {
        let mut imp = Impairer::new(
            Faults {
                reorder: 1.0,
                ..Default::default()
            },
            3,
        );
        let mut out = Vec::new();
        imp.frame(&frame(0, 5001), 0, &mut out); // held
        imp.frame(&frame(0, 5002), HOLD_NS / 2, &mut out); // held, other flow
        assert!(out.is_empty());
        // The first has waited long enough; the second not yet.
        imp.expire(HOLD_NS, &mut out);
        assert_eq!(out.len(), 1);
        imp.flush(&mut out);
        assert_eq!(imp.report().released_in_order, 2);
        assert_eq!(imp.report().reordered, 0);
    }

    /// A UDP datagram that is not a test packet (an SRT data packet's
    /// shape: 16 bytes of header, then 1,316 of MPEG-TS), number `n` of
    /// its flow, to `port`.
    fn foreign(n: u32, port: u16) -> Vec<u8> {
        let mut f = vec![0u8; UDP_V4_HEADERS + 16 + 1316];
        f[UDP_V4_HEADERS..UDP_V4_HEADERS + 4].copy_from_slice(&n.to_be_bytes());
        f[UDP_V4_HEADERS + 16] = 0x47;
        let spec = UdpFrameSpec {
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_mac: [2, 0, 0, 0, 0, 1],
            src: "10.0.1.1:9000".parse().expect("literal"),
            dst: std::net::SocketAddrV4::new("10.0.1.2".parse().expect("literal"), port),
            ttl: 64,
            dscp: 0,
            ident: 0,
        };
        write_udp_v4_frame(&mut f, &spec, 16 + 1316).expect("fits");
        f
    }

    fn numbers(out: &[Vec<u8>]) -> Vec<u32> {
        out.iter()
            .map(|f| u32::from_be_bytes(f[UDP_V4_HEADERS..UDP_V4_HEADERS + 4].try_into().expect("4 bytes")))
            .collect()
    }

    #[test]
    fn by_default_other_udp_traffic_passes_untouched() {
        let mut imp = Impairer::new(
            Faults {
                loss: 0.5,
                reorder: 0.5,
                delay_ns: 1_000,
                ..Default::default()
            },
            1,
        );
        let mut out = Vec::new();
        for n in 0..100 {
            imp.frame(&foreign(n, 40000), 0, &mut out);
        }
        assert_eq!(numbers(&out), (0..100).collect::<Vec<_>>());
        let r = imp.report();
        assert_eq!((r.other_frames, r.matched, r.dropped, r.delayed), (100, 0, 0, 0));
    }

    #[test]
    fn with_match_udp_any_datagram_is_lost_delayed_and_reordered_and_counted() {
        let mut imp = Impairer::new(
            Faults {
                matching: Match::Udp,
                loss: 0.02,
                reorder: 0.01,
                delay_ns: 40_000_000,
                ..Default::default()
            },
            5,
        );
        let mut out = Vec::new();
        let mut sent_at = Vec::new();
        // 20,000 datagrams of one flow, one a millisecond, an ARP frame
        // among them; what is due is sent as time goes.
        let mut arp = foreign(0, 40000);
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        for n in 0..20_000u32 {
            let now = u64::from(n) * 1_000_000;
            let before = out.len();
            imp.expire(now, &mut out);
            sent_at.extend(std::iter::repeat_n(now, out.len() - before));
            if n == 10 {
                imp.frame(&arp, now, &mut out);
                // Not a UDP datagram: it passes at once, undelayed.
                assert_eq!(out.last(), Some(&arp));
                out.pop();
            }
            imp.frame(&foreign(n, 40000), now, &mut out);
            // Nothing leaves before its delay is over.
            assert_eq!(out.len(), sent_at.len(), "packet {n}");
        }
        // A packet still held at the end goes, delayed, when its wait is
        // over; the rest at the end.
        imp.expire(20_000 * 1_000_000 + HOLD_NS, &mut out);
        imp.flush(&mut out);
        let r = imp.report();
        assert_eq!(
            (r.frames_in, r.matched, r.other_frames, r.test_packets),
            (20_001, 20_000, 1, 0)
        );
        let got = numbers(&out);
        // Each dropped datagram is missing, each reordered one comes after
        // the next, and nothing else changes.
        assert_eq!(got.len() as u64, 20_000 - r.dropped);
        assert!((300..500).contains(&r.dropped), "{r:?}");
        assert!((100..300).contains(&r.reordered), "{r:?}");
        let late = got.windows(2).filter(|w| w[1] < w[0]).count() as u64;
        assert_eq!(late, r.reordered, "{r:?}");
        let mut sorted = got.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), got.len(), "nothing duplicated");
        assert_eq!(r.delayed, 20_000 - r.dropped);
        assert_eq!(r.delay_min_ns, Some(40_000_000), "{r:?}");
        // Every datagram is left intact.
        for f in &out {
            let n = numbers(std::slice::from_ref(f))[0];
            assert_eq!(f, &foreign(n, 40000));
        }
    }

    #[test]
    fn with_match_udp_the_faults_that_need_a_test_payload_are_refused_by_name() {
        let udp = |f: Faults| Faults {
            matching: Match::Udp,
            ..f
        };
        let e = udp(Faults {
            corrupt: 0.01,
            loss: 0.02,
            ..Default::default()
        })
        .validate()
        .expect_err("corrupt needs a test payload");
        assert!(e.starts_with("--corrupt needs a test payload"), "{e}");
        let e = udp(Faults {
            sync_error: 0.01,
            loss_band: Some((0.0, 0.01)),
            ..Default::default()
        })
        .validate()
        .expect_err("refused");
        assert!(e.starts_with("--sync-error, --loss-band need a test payload"), "{e}");
        assert!(
            udp(Faults {
                loss: 0.02,
                duplicate: 0.01,
                reorder: 0.01,
                delay_ns: 40_000_000,
                cut: vec![(1, 2)],
                ..Default::default()
            })
            .validate()
            .is_ok()
        );
    }

    #[test]
    fn the_next_due_time_is_the_first_delayed_or_held_packets() {
        let mut imp = Impairer::new(
            Faults {
                matching: Match::Udp,
                reorder: 1.0,
                delay_ns: 40_000_000,
                ..Default::default()
            },
            1,
        );
        let mut out = Vec::new();
        assert_eq!(imp.next_due_ns(), None);
        imp.frame(&foreign(0, 40000), 1_000, &mut out); // held
        assert_eq!(imp.next_due_ns(), Some(1_000 + HOLD_NS));
        imp.frame(&foreign(1, 40000), 2_000, &mut out); // overtakes it: both delayed
        assert_eq!(imp.next_due_ns(), Some(2_000 + 40_000_000));
        imp.expire(2_000 + 40_000_000, &mut out);
        assert_eq!(numbers(&out), [1, 0]);
        assert_eq!(imp.next_due_ns(), None);
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_never_panic_and_pass_through(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let mut imp = Impairer::new(Faults { loss: 0.3, duplicate: 0.2, reorder: 0.2, corrupt: 0.3, ..Default::default() }, 9);
            let mut out = Vec::new();
            imp.frame(&bytes, 0, &mut out);
            // Whatever is not a test packet passes unchanged.
            if Match::Test.matches(&bytes).is_none() {
                proptest::prop_assert_eq!(out, vec![bytes]);
            }
        }
    }

    #[test]
    fn shares_must_be_sane() {
        assert!(
            Faults {
                loss: 0.5,
                duplicate: 0.6,
                ..Default::default()
            }
            .validate()
            .is_err()
        );
        assert!(
            Faults {
                loss: -0.1,
                ..Default::default()
            }
            .validate()
            .is_err()
        );
        assert!(
            Faults {
                loss: 0.1,
                corrupt: 0.1,
                ..Default::default()
            }
            .validate()
            .is_ok()
        );
    }

    #[test]
    fn a_delay_keeps_the_order_and_a_cut_drops_exactly_its_window() {
        let mut imp = Impairer::new(
            Faults {
                delay_ns: 20,
                cut: vec![(100, 50)],
                ..Default::default()
            },
            1,
        );
        let mut out = Vec::new();
        for seq in 0..30u64 {
            // One packet every 10 ns: 10 to 14 fall in the cut.
            imp.frame(&frame(seq, 5001), seq * 10, &mut out);
            imp.expire(seq * 10, &mut out);
        }
        let seqs = |out: &[Vec<u8>]| -> Vec<u64> {
            out.iter()
                .map(|f| match payload::check(&f[UDP_V4_HEADERS..]) {
                    payload::Check::Intact(h) => h.seq,
                    other => panic!("{other:?}"),
                })
                .collect()
        };
        // By t = 290 those sent by 270 are out: 0..=27 less the cut.
        let want: Vec<u64> = (0..=27).filter(|s| !(10..15).contains(s)).collect();
        assert_eq!(seqs(&out), want);
        imp.flush(&mut out);
        let want: Vec<u64> = (0..30).filter(|s| !(10..15).contains(s)).collect();
        assert_eq!(seqs(&out), want);
        let r = imp.report();
        assert_eq!((r.cut, r.delayed, r.dropped), (5, 25, 0));
        assert_eq!(r.delay_min_ns, Some(20), "none went before its delay");
    }
}
