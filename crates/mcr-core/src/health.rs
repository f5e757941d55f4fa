//! The health of an input, measured as its datagrams pass, without a
//! clock (each is handed its arrival time): RTP sequence gaps, duplicates,
//! late arrivals, sender restarts and interarrival jitter (RFC 3550,
//! appendix A.1 and A.8), and the first-priority checks of ETSI TR 101 290
//! on MPEG-TS, carried straight in UDP or inside RTP (TS_sync_loss,
//! Sync_byte_error, Continuity_count_error per PID, PAT_error).
//!
//! [`RtpSequence::observe`] also says, for each packet, whether it is the
//! first copy of its sequence number: what a merge of two paths needs.

use crate::wire::rtp::RtpHeader;
use crate::wire::ts::{self, TsPacket};

/// A jump ahead of at most this many sequence numbers is a gap (RFC 3550
/// A.1's MAX_DROPOUT); more is a jump the sender must confirm.
pub const MAX_DROPOUT: u16 = 3000;
/// A packet at most this many behind the highest is late, not a restart
/// (MAX_MISORDER).
pub const MAX_MISORDER: u16 = 100;
/// How many recent sequence numbers are remembered as missing.
const WINDOW: u64 = 1024;

/// What one RTP packet was to its stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// The next, or after a gap: the first copy of a new sequence number.
    New,
    /// A sequence number that was missing, arriving late: a first copy.
    Late,
    /// A sequence number already seen.
    Duplicate,
    /// A jump too far from the stream to be a gap, not (yet) confirmed by
    /// the next packet: not forwarded as part of the stream.
    Stray,
    /// The sender started again (a new SSRC, or a confirmed jump): the
    /// first packet of the new stream.
    Restart,
}

impl Arrival {
    /// The packet carries a sequence number the stream did not have.
    pub fn is_first_copy(self) -> bool {
        matches!(self, Arrival::New | Arrival::Late | Arrival::Restart)
    }
}

/// An RTP stream's counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RtpCounts {
    /// Packets seen.
    pub packets: u64,
    /// Sequence numbers still missing (gaps, less those filled late).
    pub lost: u64,
    /// Packets that filled a gap late.
    pub late: u64,
    /// Copies of a sequence number already seen.
    pub duplicates: u64,
    /// Packets too far from the stream (before a restart was confirmed).
    pub strays: u64,
    /// Times the sender started again.
    pub restarts: u64,
    /// The interarrival jitter, in ns (RFC 3550 A.8).
    pub jitter_ns: u64,
}

/// Follows one RTP stream's sequence numbers and timing.
#[derive(Debug, Clone)]
pub struct RtpSequence {
    clock_hz: u32,
    counts: RtpCounts,
    /// (SSRC, highest extended sequence number, the first one) once a
    /// packet was seen.
    state: Option<(u32, u64, u64)>,
    /// The sequence number a jump must be followed by to be a restart.
    bad_seq: Option<u16>,
    /// Bit per sequence number (mod WINDOW): still missing.
    missing: [u64; (WINDOW / 64) as usize],
    /// The last new packet's arrival (ns) and timestamp, for jitter.
    last: Option<(u64, u32)>,
    /// The jitter estimate, in ns times 16 (A.8's fixed point).
    jitter16: i64,
}

impl RtpSequence {
    /// A stream whose media clock runs at `clock_hz` (90,000 for video and
    /// MPEG-TS).
    pub fn new(clock_hz: u32) -> Self {
        RtpSequence {
            clock_hz: clock_hz.max(1),
            counts: RtpCounts::default(),
            state: None,
            bad_seq: None,
            missing: [0; (WINDOW / 64) as usize],
            last: None,
            jitter16: 0,
        }
    }

    /// Forgets what the next packet is expected to be (its reader missed
    /// packets it cannot count): the next one starts the sequence again,
    /// as the first did, and no count changes.
    pub fn resync(&mut self) {
        self.state = None;
        self.bad_seq = None;
        self.last = None;
    }

    /// The counts so far.
    pub fn counts(&self) -> RtpCounts {
        RtpCounts {
            jitter_ns: u64::try_from(self.jitter16 / 16).unwrap_or(0),
            ..self.counts
        }
    }

    fn set_missing(&mut self, ext: u64, missing: bool) {
        let (word, bit) = (usize::try_from((ext % WINDOW) / 64).unwrap_or(0), ext % 64);
        if missing {
            self.missing[word] |= 1 << bit;
        } else {
            self.missing[word] &= !(1 << bit);
        }
    }

    fn is_missing(&self, ext: u64) -> bool {
        let (word, bit) = (usize::try_from((ext % WINDOW) / 64).unwrap_or(0), ext % 64);
        self.missing[word] & (1 << bit) != 0
    }

    fn restart(&mut self, h: &RtpHeader, arrived_ns: u64) -> Arrival {
        let ext = u64::from(h.sequence);
        self.state = Some((h.ssrc, ext, ext));
        self.bad_seq = None;
        self.missing = [0; (WINDOW / 64) as usize];
        self.last = Some((arrived_ns, h.timestamp));
        Arrival::Restart
    }

    /// Takes packet `h`, which arrived at `arrived_ns`; says what it was.
    pub fn observe(&mut self, h: &RtpHeader, arrived_ns: u64) -> Arrival {
        self.counts.packets += 1;
        let Some((ssrc, max, first)) = self.state else {
            self.restart(h, arrived_ns);
            return Arrival::New;
        };
        if ssrc != h.ssrc {
            self.counts.restarts += 1;
            return self.restart(h, arrived_ns);
        }
        let max16 = (max & 0xffff) as u16;
        let delta = h.sequence.wrapping_sub(max16);
        if delta == 0 {
            self.counts.duplicates += 1;
            return Arrival::Duplicate;
        }
        if delta < MAX_DROPOUT {
            let ext = max + u64::from(delta);
            for skipped in (max + 1).max(ext.saturating_sub(WINDOW))..ext {
                self.set_missing(skipped, true);
            }
            self.set_missing(ext, false);
            self.counts.lost += u64::from(delta - 1);
            self.state = Some((ssrc, ext, first));
            self.bad_seq = None;
            self.jitter(h.timestamp, arrived_ns);
            return Arrival::New;
        }
        let behind = delta.wrapping_neg();
        if behind <= MAX_MISORDER {
            let ext = max.saturating_sub(u64::from(behind));
            if ext >= first && ext + WINDOW > max && self.is_missing(ext) {
                self.set_missing(ext, false);
                self.counts.lost -= 1;
                self.counts.late += 1;
                return Arrival::Late;
            }
            self.counts.duplicates += 1;
            return Arrival::Duplicate;
        }
        // Too far either way: a restart if the next packet follows it.
        if self.bad_seq == Some(h.sequence) {
            self.counts.restarts += 1;
            return self.restart(h, arrived_ns);
        }
        self.bad_seq = Some(h.sequence.wrapping_add(1));
        self.counts.strays += 1;
        Arrival::Stray
    }

    /// RFC 3550 A.8, in ns: the difference between two packets' spacing
    /// on arrival and in their timestamps, smoothed by 1/16.
    fn jitter(&mut self, timestamp: u32, arrived_ns: u64) {
        if let Some((then, ts)) = self.last {
            let media = i64::from(timestamp.wrapping_sub(ts).cast_signed()) * 1_000_000_000 / i64::from(self.clock_hz);
            let wire = i64::try_from(arrived_ns.wrapping_sub(then)).unwrap_or(i64::MAX / 2);
            let d = (wire - media).abs();
            self.jitter16 += d - (self.jitter16 + 8) / 16;
        }
        self.last = Some((arrived_ns, timestamp));
    }
}

/// The TR 101 290 first-priority counts of a transport stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TsCounts {
    /// Transport packets seen.
    pub packets: u64,
    /// Times sync was lost (two or more bad sync bytes in a row).
    pub sync_losses: u64,
    /// Packets whose first byte was not the sync byte.
    pub sync_byte_errors: u64,
    /// Continuity counter errors (a packet lost, out of order, or sent
    /// more than twice), over every PID.
    pub continuity_errors: u64,
    /// PAT errors: no PAT for 0.5 s, or a section on PID 0 that is not a
    /// PAT, or a scrambled one.
    pub pat_errors: u64,
}

/// The longest a PAT may be away (TR 101 290, 1.3).
pub const PAT_INTERVAL_NS: u64 = 500_000_000;
/// Good sync bytes in a row that regain sync (TR 101 290, 1.1).
const SYNC_AFTER: u8 = 5;
/// Bad ones in a row that lose it.
const SYNC_LOST_AFTER: u8 = 2;

/// Follows one transport stream's packets.
#[derive(Debug, Clone)]
pub struct TsHealth {
    counts: TsCounts,
    /// Per PID: the last continuity counter (bits 0–3), a duplicate seen
    /// (bit 4), seen at all (bit 7).
    pids: Box<[u8; 8192]>,
    in_sync: bool,
    good_run: u8,
    bad_run: u8,
    /// When the last PAT came, and whether its absence was counted.
    last_pat: Option<u64>,
    pat_late_counted: bool,
}

impl Default for TsHealth {
    fn default() -> Self {
        TsHealth {
            counts: TsCounts::default(),
            pids: Box::new([0; 8192]),
            in_sync: true,
            good_run: 0,
            bad_run: 0,
            last_pat: None,
            pat_late_counted: false,
        }
    }
}

impl TsHealth {
    /// Forgets every PID's continuity counter (its reader missed packets
    /// it cannot count); no count changes.
    pub fn resync(&mut self) {
        self.pids.fill(0);
    }

    /// The counts so far.
    pub fn counts(&self) -> TsCounts {
        self.counts
    }

    /// Takes the 188-byte packets of one datagram's payload (a whole
    /// number of them), which arrived at `arrived_ns`.
    pub fn observe(&mut self, payload: &[u8], arrived_ns: u64) {
        // Touch each packet's header first, all at once: they lie 188
        // bytes apart, often in another core's cache (worker 0 reads the
        // eBPF data path's records that way), and read one by one as each
        // packet is judged, each read waits for the one before. Six bytes:
        // the header and an adaptation field's flags.
        let mut touched = 0u8;
        for c in payload.chunks_exact(ts::PACKET) {
            touched ^= c[0] ^ c[5];
        }
        std::hint::black_box(touched);
        for chunk in payload.chunks_exact(ts::PACKET) {
            let Ok(b) = <&[u8; ts::PACKET]>::try_from(chunk) else {
                continue;
            };
            self.packet(TsPacket::new(b), arrived_ns);
        }
        let first = *self.last_pat.get_or_insert(arrived_ns);
        if arrived_ns.saturating_sub(first) > PAT_INTERVAL_NS && !self.pat_late_counted {
            self.counts.pat_errors += 1;
            self.pat_late_counted = true;
        }
    }

    fn packet(&mut self, p: TsPacket<'_>, arrived_ns: u64) {
        self.counts.packets += 1;
        if !p.synced() {
            self.counts.sync_byte_errors += 1;
            self.good_run = 0;
            self.bad_run = self.bad_run.saturating_add(1);
            if self.in_sync && self.bad_run >= SYNC_LOST_AFTER {
                self.in_sync = false;
                self.counts.sync_losses += 1;
            }
            return;
        }
        self.bad_run = 0;
        self.good_run = self.good_run.saturating_add(1);
        if !self.in_sync {
            if self.good_run < SYNC_AFTER {
                return;
            }
            self.in_sync = true;
        }
        let pid = p.pid();
        if pid == ts::PAT_PID {
            match p.table_id() {
                Some(0) if p.scrambling() == 0 => {
                    self.last_pat = Some(arrived_ns);
                    self.pat_late_counted = false;
                }
                Some(_) => self.counts.pat_errors += 1,
                None if p.scrambling() != 0 => self.counts.pat_errors += 1,
                None => {}
            }
        }
        if pid != ts::NULL_PID {
            self.continuity(pid, &p);
        }
    }

    fn continuity(&mut self, pid: u16, p: &TsPacket<'_>) {
        let slot = &mut self.pids[usize::from(pid)];
        let cc = p.continuity();
        let seen = *slot & 0x80 != 0;
        let (last, dup) = (*slot & 0x0f, *slot & 0x10 != 0);
        let mut dup_now = false;
        if seen && !p.discontinuity() {
            let expected = if p.has_payload() { (last + 1) & 0x0f } else { last };
            if cc != expected {
                if p.has_payload() && cc == last && !dup {
                    // One duplicate packet is allowed.
                    dup_now = true;
                } else {
                    self.counts.continuity_errors += 1;
                }
            }
        }
        *slot = 0x80 | if dup_now { 0x10 } else { 0 } | cc;
    }
}

/// What an input carries, as its datagrams show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Carries {
    /// Nothing seen yet, or datagrams that are neither RTP nor MPEG-TS.
    #[default]
    Other,
    /// RTP.
    Rtp,
    /// MPEG-TS in UDP.
    Ts,
    /// MPEG-TS in RTP.
    RtpTs,
}

/// The health of one input: what it carries, and its counts.
#[derive(Debug, Clone)]
pub struct InputHealth {
    /// What the input carries: set by each RTP or MPEG-TS datagram (a
    /// datagram that is neither leaves it as it was).
    pub carries: Carries,
    /// The RTP stream's, when it is RTP.
    pub rtp: RtpSequence,
    /// The transport stream's, when it is MPEG-TS.
    pub ts: TsHealth,
}

impl Default for InputHealth {
    fn default() -> Self {
        InputHealth {
            carries: Carries::Other,
            rtp: RtpSequence::new(90_000),
            ts: TsHealth::default(),
        }
    }
}

impl InputHealth {
    /// Forgets what the next packets are expected to be (their reader
    /// missed some): no gap it did not see is counted.
    pub fn resync(&mut self) {
        self.rtp.resync();
        self.ts.resync();
    }

    /// Takes one datagram's UDP payload, which arrived at `arrived_ns`;
    /// returns what it was to the RTP stream, when it is RTP.
    pub fn observe(&mut self, payload: &[u8], arrived_ns: u64) -> Option<Arrival> {
        // A transport stream stays one when a datagram's first sync byte is
        // broken: its packets are still looked at (and that byte counted).
        let was = self.carries;
        let still_ts =
            |carried: Carries, b: &[u8]| was == carried && !b.is_empty() && b.len().is_multiple_of(ts::PACKET);
        if ts::packets(payload).is_some() || still_ts(Carries::Ts, payload) {
            self.carries = Carries::Ts;
            self.ts.observe(payload, arrived_ns);
            return None;
        }
        let h = RtpHeader::parse(payload)?;
        let arrival = self.rtp.observe(&h, arrived_ns);
        let inner = &payload[h.payload_start..h.payload_end];
        if ts::packets(inner).is_some() || still_ts(Carries::RtpTs, inner) {
            self.carries = Carries::RtpTs;
            if arrival.is_first_copy() {
                self.ts.observe(inner, arrived_ns);
            }
        } else {
            self.carries = Carries::Rtp;
        }
        Some(arrival)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ts::write_header;
    use proptest::prelude::*;

    fn rtp(seq: u16, ts: u32, ssrc: u32) -> RtpHeader {
        let mut b = [0u8; 12];
        RtpHeader::write(&mut b, 33, seq, ts, ssrc);
        RtpHeader::parse(&b).expect("rtp")
    }

    /// Packet `i` of a 1 kHz stream: sequence from `start`, timestamps
    /// 90 apart, arriving 1 ms apart.
    fn observe(s: &mut RtpSequence, start: u16, i: u32) -> Arrival {
        let seq = start.wrapping_add(i as u16);
        s.observe(&rtp(seq, i * 90, 7), u64::from(i) * 1_000_000)
    }

    #[test]
    fn gaps_late_arrivals_and_duplicates_are_told_apart() {
        let mut s = RtpSequence::new(90_000);
        let order = [0, 1, 2, 5, 3, 3, 6, 6, 9];
        let got: Vec<Arrival> = order.iter().map(|&i| observe(&mut s, 100, i)).collect();
        use Arrival::*;
        assert_eq!(got, [New, New, New, New, Late, Duplicate, New, Duplicate, New]);
        let c = s.counts();
        // Missing: 4, 7, 8.
        assert_eq!((c.packets, c.lost, c.late, c.duplicates), (9, 3, 1, 2));
        assert_eq!(c.jitter_ns, 0, "evenly spaced packets have no jitter");
    }

    #[test]
    fn the_sequence_wraps_without_a_gap() {
        let mut s = RtpSequence::new(90_000);
        for i in 0..200 {
            assert_eq!(observe(&mut s, 65_500, i), Arrival::New);
        }
        assert_eq!(s.counts().lost, 0);
    }

    #[test]
    fn a_sender_restart_is_confirmed_by_the_next_packet() {
        let mut s = RtpSequence::new(90_000);
        observe(&mut s, 1000, 0);
        observe(&mut s, 1000, 1);
        // The sender starts again at 40000 with the same SSRC: the first
        // packet is a stray, the second confirms it.
        assert_eq!(s.observe(&rtp(40_000, 0, 7), 5_000_000), Arrival::Stray);
        assert_eq!(s.observe(&rtp(40_001, 90, 7), 6_000_000), Arrival::Restart);
        assert_eq!(s.observe(&rtp(40_002, 180, 7), 7_000_000), Arrival::New);
        // A new SSRC is a restart at once.
        assert_eq!(s.observe(&rtp(5, 0, 8), 8_000_000), Arrival::Restart);
        let c = s.counts();
        assert_eq!((c.restarts, c.strays, c.lost), (2, 1, 0));
    }

    #[test]
    fn jitter_follows_uneven_arrivals() {
        let mut s = RtpSequence::new(90_000);
        // Timestamps say 1 ms apart; arrivals alternate 0.5 and 1.5 ms.
        let mut at = 0u64;
        for i in 0..2000u32 {
            s.observe(&rtp(i as u16, i * 90, 1), at);
            at += if i % 2 == 0 { 500_000 } else { 1_500_000 };
        }
        // |D| is 0.5 ms every time: the estimate converges to it.
        let j = s.counts().jitter_ns;
        assert!((490_000..=510_000).contains(&j), "{j}");
    }

    proptest! {
        /// Any order of arrivals, with copies, of a stream with no jump:
        /// each sequence number is a first copy exactly once, the rest are
        /// duplicates, and what is lost is exactly what never came (below
        /// the highest).
        #[test]
        fn each_sequence_number_is_a_first_copy_once(
            start in any::<u16>(),
            arrivals in proptest::collection::vec((0u32..300, 0u32..3), 1..400)
        ) {
            // Arrivals stay within MAX_MISORDER of the highest so far.
            let mut s = RtpSequence::new(90_000);
            let mut highest = 0u32;
            let mut seen = std::collections::BTreeSet::new();
            let mut first = None;
            for (n, copies) in arrivals {
                let i = if n + 80 < highest { highest - 80 } else { n };
                let i = i.max(first.unwrap_or(i));
                first.get_or_insert(i);
                for _ in 0..=copies {
                    let a = observe(&mut s, start, i);
                    prop_assert_eq!(a.is_first_copy(), seen.insert(i), "{} {:?}", i, a);
                }
                highest = highest.max(i);
            }
            let lo = first.unwrap_or(0);
            let never = (lo..=highest).filter(|i| !seen.contains(i)).count() as u64;
            prop_assert_eq!(s.counts().lost, never);
        }
    }

    /// `n` transport packets of PID `pid`, continuity from `cc`.
    fn ts_datagram(pids: &[(u16, u8)]) -> Vec<u8> {
        let mut b = vec![0xffu8; pids.len() * ts::PACKET];
        for (c, &(pid, cc)) in b.chunks_mut(ts::PACKET).zip(pids) {
            write_header(c, pid, pid == 0, cc);
            if pid == 0 {
                c[4] = 0; // pointer field
                c[5] = 0; // table id: PAT
            }
        }
        b
    }

    #[test]
    fn continuity_errors_are_counted_per_pid_and_one_duplicate_is_allowed() {
        let mut h = TsHealth::default();
        h.observe(&ts_datagram(&[(0, 0), (100, 0), (101, 5), (100, 1), (101, 6)]), 0);
        assert_eq!(h.counts().continuity_errors, 0);
        // 100 skips 2 (an error); 101 sends 6 again (allowed once), then
        // again (an error); null packets never count.
        h.observe(
            &ts_datagram(&[(100, 3), (101, 6), (101, 6), (0x1fff, 9), (0x1fff, 2)]),
            1,
        );
        assert_eq!(h.counts().continuity_errors, 2);
        assert_eq!(h.counts().packets, 10);
    }

    #[test]
    fn a_resync_forgets_what_comes_next_and_changes_no_count() {
        let mut s = RtpSequence::new(90_000);
        for i in 0..3 {
            observe(&mut s, 100, i);
        }
        s.resync();
        // 10 packets its reader never saw: neither lost nor a restart.
        assert_eq!(observe(&mut s, 100, 13), Arrival::New);
        assert_eq!(observe(&mut s, 100, 14), Arrival::New);
        let c = s.counts();
        assert_eq!((c.packets, c.lost, c.restarts, c.duplicates), (5, 0, 0, 0));
        observe(&mut s, 100, 16);
        assert_eq!(s.counts().lost, 1, "counted again after it");
        let mut h = TsHealth::default();
        h.observe(&ts_datagram(&[(100, 0), (100, 1)]), 0);
        h.resync();
        h.observe(&ts_datagram(&[(100, 9), (100, 10)]), 1);
        assert_eq!(h.counts().continuity_errors, 0);
        h.observe(&ts_datagram(&[(100, 12)]), 2);
        assert_eq!(h.counts().continuity_errors, 1);
    }

    #[test]
    fn sync_is_lost_after_two_bad_bytes_and_found_after_five_good() {
        let mut h = TsHealth::default();
        let mut b = ts_datagram(&[(0, 0), (100, 0), (100, 1), (100, 2), (100, 3), (100, 4), (100, 5)]);
        b[ts::PACKET] = 0; // packet 1
        b[2 * ts::PACKET] = 0; // packet 2: sync lost
        h.observe(&b, 0);
        let c = h.counts();
        assert_eq!((c.sync_byte_errors, c.sync_losses), (2, 1));
        // Four good packets follow: not yet in sync, so no continuity is
        // judged; the fifth regains it.
        assert_eq!(c.continuity_errors, 0);
        let b = ts_datagram(&[(100, 9), (100, 10)]);
        h.observe(&b, 1);
        // Judged again from the fifth good packet on (PID 100 was not seen
        // before, so its first counter is taken as it comes).
        assert_eq!(h.counts().continuity_errors, 0);
    }

    #[test]
    fn a_transport_stream_whose_first_sync_byte_breaks_is_still_looked_at() {
        for rtp in [false, true] {
            let mut h = InputHealth::default();
            let wrap = |ts: Vec<u8>| {
                if rtp {
                    let mut b = vec![0u8; 12];
                    RtpHeader::write(&mut b, 33, u16::from(ts[3] & 0x0f), 0, 7);
                    b.extend(ts);
                    b
                } else {
                    ts
                }
            };
            h.observe(&wrap(ts_datagram(&[(0, 0), (100, 0)])), 0);
            let mut broken = ts_datagram(&[(0, 1), (100, 1)]);
            broken[0] = 0xb8;
            h.observe(&wrap(broken), 1);
            let c = h.ts.counts();
            assert_eq!((c.packets, c.sync_byte_errors), (4, 1), "rtp {rtp}");
            assert_eq!(h.carries, if rtp { Carries::RtpTs } else { Carries::Ts });
        }
        // A first datagram with a broken first byte is not taken for one.
        let mut h = InputHealth::default();
        let mut broken = ts_datagram(&[(0, 1)]);
        broken[0] = 0;
        h.observe(&broken, 0);
        assert_eq!(h.ts.counts().packets, 0);
    }

    #[test]
    fn a_pat_missing_for_half_a_second_is_an_error_once() {
        let mut h = TsHealth::default();
        h.observe(&ts_datagram(&[(0, 0)]), 0);
        for i in 1..=10u64 {
            h.observe(&ts_datagram(&[(100, (i & 15) as u8)]), i * 100_000_000);
        }
        assert_eq!(h.counts().pat_errors, 1);
        h.observe(&ts_datagram(&[(0, 1)]), 1_100_000_000);
        h.observe(&ts_datagram(&[(100, 11)]), 1_200_000_000);
        assert_eq!(h.counts().pat_errors, 1);
    }

    #[test]
    fn an_input_tells_ts_in_udp_from_ts_in_rtp() {
        let ts = ts_datagram(&[(0, 0), (100, 0)]);
        let mut h = InputHealth::default();
        assert_eq!(h.observe(&ts, 0), None);
        assert_eq!(h.carries, Carries::Ts);
        let mut r = vec![0u8; 12];
        RtpHeader::write(&mut r, 33, 1, 0, 9);
        r.extend_from_slice(&ts_datagram(&[(0, 1), (100, 1)]));
        let mut h = InputHealth::default();
        assert_eq!(h.observe(&r, 0), Some(Arrival::New));
        assert_eq!(h.observe(&r, 1), Some(Arrival::Duplicate));
        assert_eq!(h.carries, Carries::RtpTs);
        // The duplicate's TS packets are not judged twice.
        assert_eq!(h.ts.counts().continuity_errors, 0);
        assert_eq!(h.ts.counts().packets, 2);
    }
}
