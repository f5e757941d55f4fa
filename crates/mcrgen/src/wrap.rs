//! How the test payload travels, as broadcast and IPTV streams do: as the
//! whole UDP payload (`plain`), after an RTP header (`rtp`, RFC 3550), in
//! MPEG-TS packets straight in UDP (`ts`), or in MPEG-TS packets inside RTP
//! (`rtp-ts`, payload type 33, as SMPTE ST 2022-2 and most IPTV carry it).
//!
//! With MPEG-TS, each datagram holds seven 188-byte packets: a PAT (PID 0,
//! no programs, its CRC right) and six packets of PID 0x100 whose payloads,
//! 6 × 184 = 1,104 bytes, are the test payload; every PID's continuity
//! counter runs on from datagram to datagram. The RTP sequence number is
//! the packet's (mod 2^16), its timestamp the send time on a 90 kHz clock,
//! its SSRC the stream's id. The receiver checks RTP sequence and jitter
//! and the TS first-priority errors (`mcr_core::health`), then the test
//! payload byte for byte as always.
//!
//! Or as a market-data feed carries its messages (`moldudp64`, `mdp3`,
//! `pitch`, `mitch`; [`crate::feed`]): the feed's header with its own
//! sequence number, and the test payload cut into the packet's messages.

use mcr_core::wire::rtp::{self, RtpHeader};
use mcr_core::wire::ts;

use crate::feed;
use crate::payload::{HEADER_LEN, MAGIC};

/// What carries the test payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Wrap {
    /// The UDP payload is the test payload.
    #[default]
    Plain,
    /// An RTP header, then the test payload.
    Rtp,
    /// Seven MPEG-TS packets.
    Ts,
    /// An RTP header, then seven MPEG-TS packets.
    RtpTs,
    /// A market-data feed's header, then its messages.
    Feed(feed::Plan),
}

/// `--wrap` as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum WrapArg {
    /// The UDP payload is the test payload.
    #[default]
    Plain,
    /// An RTP header, then the test payload.
    Rtp,
    /// Seven MPEG-TS packets.
    Ts,
    /// An RTP header, then seven MPEG-TS packets.
    RtpTs,
    /// Nasdaq MoldUDP64.
    Moldudp64,
    /// CME MDP 3.0.
    Mdp3,
    /// Cboe PITCH.
    Pitch,
    /// LSE MITCH.
    Mitch,
}

impl WrapArg {
    /// The wrapping, with `plan` for a feed (its framing set from here).
    pub fn with(self, plan: feed::Plan) -> Wrap {
        let feed = |framing| Wrap::Feed(feed::Plan { framing, ..plan });
        match self {
            WrapArg::Plain => Wrap::Plain,
            WrapArg::Rtp => Wrap::Rtp,
            WrapArg::Ts => Wrap::Ts,
            WrapArg::RtpTs => Wrap::RtpTs,
            WrapArg::Moldudp64 => feed(feed::Framing::MoldUdp64),
            WrapArg::Mdp3 => feed(feed::Framing::Mdp3),
            WrapArg::Pitch => feed(feed::Framing::Pitch),
            WrapArg::Mitch => feed(feed::Framing::Mitch),
        }
    }

    /// The feed's framing, if it is one.
    pub fn framing(self) -> Option<feed::Framing> {
        match self.with(feed::Plan::new(feed::Framing::Mdp3)) {
            Wrap::Feed(p) => Some(p.framing),
            _ => None,
        }
    }
}

impl serde::Serialize for Wrap {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(match self {
            Wrap::Plain => "plain",
            Wrap::Rtp => "rtp",
            Wrap::Ts => "ts",
            Wrap::RtpTs => "rtp-ts",
            Wrap::Feed(p) => match p.framing {
                feed::Framing::MoldUdp64 => "moldudp64",
                feed::Framing::Mdp3 => "mdp3",
                feed::Framing::Pitch => "pitch",
                feed::Framing::Mitch => "mitch",
            },
        })
    }
}

/// Transport packets per datagram.
pub const TS_PACKETS: usize = 7;
/// The PID the test payload travels on.
pub const DATA_PID: u16 = 0x100;
/// The test payload's length inside MPEG-TS.
pub const TS_PAYLOAD: usize = (TS_PACKETS - 1) * (ts::PACKET - 4);
/// The RTP payload type of MPEG-TS (RFC 3551); of a plain payload, the
/// first dynamic one.
const PT_MP2T: u8 = 33;
const PT_DYNAMIC: u8 = 96;

impl Wrap {
    /// The datagram's length for `--size` bytes: MPEG-TS fixes it.
    pub fn datagram_len(self, size: usize) -> usize {
        match self {
            Wrap::Plain | Wrap::Rtp | Wrap::Feed(_) => size,
            Wrap::Ts => TS_PACKETS * ts::PACKET,
            Wrap::RtpTs => rtp::FIXED + TS_PACKETS * ts::PACKET,
        }
    }

    fn rtp(self) -> bool {
        matches!(self, Wrap::Rtp | Wrap::RtpTs)
    }

    /// Writes the whole datagram `buf` for packet `seq` of `stream`, sent
    /// at `send_ns`, whose RTP sequence number (if RTP) is `seq` plus
    /// `rtp_start`, mod 2^16; `fill` writes the test payload into the
    /// slice it is given (the payload's own buffer for MPEG-TS, `scratch`).
    #[allow(clippy::too_many_arguments)]
    pub fn fill(
        self,
        buf: &mut [u8],
        stream: u32,
        seq: u64,
        rtp_start: u16,
        send_ns: u64,
        scratch: &mut Vec<u8>,
        fill: impl FnOnce(&mut [u8]),
    ) {
        if let Wrap::Feed(plan) = self {
            // (The length was checked when the run started.)
            scratch.resize(plan.payload_len(buf.len()).unwrap_or(0), 0);
            fill(scratch);
            plan.write(buf, seq, send_ns, scratch);
            return;
        }
        let body = if self.rtp() {
            let pt = if self == Wrap::RtpTs { PT_MP2T } else { PT_DYNAMIC };
            // The 90 kHz media clock, from the send time (wraps as RTP's does).
            let ticks = (u128::from(send_ns) * 90_000 / 1_000_000_000) as u32;
            RtpHeader::write(buf, pt, (seq as u16).wrapping_add(rtp_start), ticks, stream);
            &mut buf[rtp::FIXED..]
        } else {
            buf
        };
        if matches!(self, Wrap::Plain | Wrap::Rtp) {
            fill(body);
            return;
        }
        scratch.resize(TS_PAYLOAD, 0);
        fill(scratch);
        let mut packets = body.chunks_exact_mut(ts::PACKET);
        if let Some(pat) = packets.next() {
            write_pat(pat, (seq & 0x0f) as u8);
        }
        for (k, (p, data)) in packets.zip(scratch.chunks(ts::PACKET - 4)).enumerate() {
            let cc = ((seq * (TS_PACKETS as u64 - 1) + k as u64) & 0x0f) as u8;
            ts::write_header(p, DATA_PID, k == 0, cc);
            p[4..].copy_from_slice(data);
        }
    }

    /// The test payload of a received datagram (gathered into `scratch`
    /// for MPEG-TS), or `None` when the datagram is not wrapped this way.
    pub fn unwrap<'a>(self, datagram: &'a [u8], scratch: &'a mut Vec<u8>) -> Option<&'a [u8]> {
        if let Wrap::Feed(plan) = self {
            feed::read(plan.framing, datagram, scratch)?;
            return Some(scratch);
        }
        let body = if self.rtp() {
            let h = RtpHeader::parse(datagram)?;
            &datagram[h.payload_start..h.payload_end]
        } else {
            datagram
        };
        if matches!(self, Wrap::Plain | Wrap::Rtp) {
            return Some(body);
        }
        scratch.clear();
        for p in ts::packets(body)?.filter(|p| p.pid() == DATA_PID) {
            scratch.extend_from_slice(p.payload());
        }
        Some(scratch)
    }
}

/// The stream and sequence number of the `mcrgen` test payload a UDP
/// payload carries, wrapped in any of the ways above (as its header says;
/// the receiver checks the rest).
pub fn test_payload_id(udp_payload: &[u8]) -> Option<(u32, u64)> {
    let id = |b: &[u8]| {
        (b.len() >= 16 && b[..4] == MAGIC).then(|| {
            let stream = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
            let mut seq = [0u8; 8];
            seq.copy_from_slice(&b[8..16]);
            (stream, u64::from_be_bytes(seq))
        })
    };
    let starts = |b: &[u8]| b.len() >= HEADER_LEN && b[..4] == MAGIC;
    if starts(udp_payload) {
        return id(udp_payload);
    }
    // A feed's first message: after MoldUDP64's, PITCH's or MITCH's, or
    // MDP 3.0's header and the message's own length (and type).
    for at in [23, 10, 14] {
        if let Some(b) = udp_payload.get(at..).filter(|b| b.len() >= 16 && b[..4] == MAGIC) {
            return id(b);
        }
    }
    let body = match RtpHeader::parse(udp_payload) {
        Some(h) if starts(&udp_payload[h.payload_start..h.payload_end]) => {
            return id(&udp_payload[h.payload_start..h.payload_end]);
        }
        Some(h) => &udp_payload[h.payload_start..h.payload_end],
        None => udp_payload,
    };
    ts::packets(body)
        .and_then(|mut p| p.find(|p| p.pid() == DATA_PID))
        .and_then(|p| id(p.payload()))
}

/// A PAT with no programs (transport stream id 1, version 0), its CRC
/// right, padded with 0xff: PID 0, a section starting here, counter `cc`.
fn write_pat(p: &mut [u8], cc: u8) {
    ts::write_header(p, ts::PAT_PID, true, cc);
    p[4..].fill(0xff);
    // Pointer field, then the section: table id 0, section syntax, length
    // 9 (5 bytes of header after the length, 4 of CRC).
    let section = [0x00, 0xb0, 0x09, 0x00, 0x01, 0xc1, 0x00, 0x00];
    p[4] = 0;
    p[5..13].copy_from_slice(&section);
    let crc = crc32_mpeg(&section);
    p[13..17].copy_from_slice(&crc.to_be_bytes());
}

/// The CRC-32 of MPEG-2 sections (polynomial 0x04c11db7, no reflection,
/// initial value all ones, no final XOR).
fn crc32_mpeg(data: &[u8]) -> u32 {
    let mut crc = u32::MAX;
    for &b in data {
        crc ^= u32::from(b) << 24;
        for _ in 0..8 {
            crc = if crc & 0x8000_0000 != 0 {
                (crc << 1) ^ 0x04c1_1db7
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload::{self, Check};
    use mcr_core::health::{Carries, InputHealth};

    #[test]
    fn the_mpeg_crc_has_its_check_value() {
        // The CRC-32/MPEG-2 of "123456789".
        assert_eq!(crc32_mpeg(b"123456789"), 0x0376_e6e7);
    }

    #[test]
    fn every_wrapping_carries_the_payload_back_and_a_clean_stream_is_clean() {
        for (wrap, carries) in [
            (Wrap::Rtp, Carries::Rtp),
            (Wrap::Ts, Carries::Ts),
            (Wrap::RtpTs, Carries::RtpTs),
        ] {
            let len = wrap.datagram_len(1024);
            let mut buf = vec![0u8; len];
            let (mut scratch, mut back) = (Vec::new(), Vec::new());
            let mut health = InputHealth::default();
            for seq in 0..70_000u64 {
                let at = seq * 1_000_000;
                wrap.fill(&mut buf, 7, seq, 0, at, &mut scratch, |b| payload::fill(b, 7, seq, at));
                health.observe(&buf, at);
                let inner = wrap.unwrap(&buf, &mut back).expect("unwraps");
                let want = if wrap == Wrap::Rtp {
                    len - rtp::FIXED
                } else {
                    TS_PAYLOAD
                };
                assert_eq!(inner.len(), want);
                assert!(
                    matches!(payload::check(inner), Check::Intact(h) if h.seq == seq),
                    "{wrap:?} {seq}"
                );
            }
            assert_eq!(health.carries, carries);
            let r = health.rtp.counts();
            assert_eq!(
                (r.lost, r.duplicates, r.late, r.restarts, r.strays),
                (0, 0, 0, 0, 0),
                "{wrap:?}"
            );
            let t = health.ts.counts();
            assert_eq!(
                (t.continuity_errors, t.sync_byte_errors, t.sync_losses, t.pat_errors),
                (0, 0, 0, 0),
                "{wrap:?}"
            );
        }
    }

    #[test]
    fn a_test_payload_is_recognised_in_every_wrapping() {
        let feeds = [WrapArg::Moldudp64, WrapArg::Mdp3, WrapArg::Pitch, WrapArg::Mitch].map(|w| {
            w.with(feed::Plan {
                messages: 3,
                ..feed::Plan::new(feed::Framing::Mdp3)
            })
        });
        for wrap in [Wrap::Plain, Wrap::Rtp, Wrap::Ts, Wrap::RtpTs].into_iter().chain(feeds) {
            let mut buf = vec![0u8; wrap.datagram_len(200)];
            wrap.fill(&mut buf, 1, 5, 0, 0, &mut Vec::new(), |b| payload::fill(b, 1, 5, 0));
            assert_eq!(test_payload_id(&buf), Some((1, 5)), "{wrap:?}");
        }
        assert_eq!(test_payload_id(&[0x80; 300]), None);
        assert_eq!(test_payload_id(&[0x47; 188]), None);
    }

    #[test]
    fn a_datagram_wrapped_otherwise_does_not_unwrap() {
        let mut buf = vec![0u8; Wrap::Ts.datagram_len(0)];
        Wrap::Ts.fill(&mut buf, 1, 0, 0, 0, &mut Vec::new(), |b| payload::fill(b, 1, 0, 0));
        assert!(Wrap::RtpTs.unwrap(&buf, &mut Vec::new()).is_none());
        assert!(Wrap::Plain.unwrap(&buf, &mut Vec::new()).is_some());
    }
}
