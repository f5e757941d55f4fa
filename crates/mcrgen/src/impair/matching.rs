//! Which frames `mcrgen impair` acts on (`--match`): `mcrgen`'s own test
//! packets (the default), or every IPv4 UDP datagram, whatever it carries
//! (SRT data and its ACKs and NAKs, RIST, RTP from any sender).

use mcr_core::wire::ethernet::{ETHERTYPE_IPV4, EthernetHeader};
use mcr_core::wire::ipv4::{Ipv4Header, PROTO_UDP};
use mcr_core::wire::udp::UdpHeader;
use zerocopy::FromBytes;

/// The kind of frame the faults act on; every other frame passes unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Match {
    /// `mcrgen` test packets: IPv4 UDP carrying a test payload, plain or
    /// wrapped in RTP or MPEG-TS.
    #[default]
    Test,
    /// Every IPv4 UDP datagram that is not a fragment, whatever it carries
    /// (another program's traffic: SRT, RIST, RTP). Only the faults that
    /// need no test payload apply: loss, duplication, reordering, delay
    /// and cuts.
    Udp,
}

/// Where a frame goes: destination address and port.
pub(super) type Flow = ([u8; 4], u16);

/// A frame the faults act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Matched {
    /// Where the UDP payload starts in the frame.
    pub payload_at: usize,
    /// The datagram's destination: a packet held for reordering waits for
    /// the next one of its flow.
    pub flow: Flow,
    /// The test packet's (stream, sequence number), when it is one.
    pub test: Option<(u32, u64)>,
}

/// The IPv4 UDP datagram in `frame` (not a fragment), as
/// (where its payload starts, its flow); `None` for any other frame.
fn udp_datagram(frame: &[u8]) -> Option<(usize, Flow)> {
    let (eth, rest) = EthernetHeader::ref_from_prefix(frame).ok()?;
    if eth.ethertype.get() != ETHERTYPE_IPV4 {
        return None;
    }
    let (ip, _) = Ipv4Header::ref_from_prefix(rest).ok()?;
    if ip.protocol != PROTO_UDP || ip.is_fragment() || ip.header_len() < 20 {
        return None;
    }
    let udp_at = 14 + ip.header_len();
    let (udp, _) = UdpHeader::ref_from_prefix(frame.get(udp_at..)?).ok()?;
    Some((udp_at + 8, (ip.dst, udp.dst_port.get())))
}

impl Match {
    /// Whether the faults act on `frame`, and where its parts are.
    pub(super) fn matches(self, frame: &[u8]) -> Option<Matched> {
        let (payload_at, flow) = udp_datagram(frame)?;
        let test = crate::wrap::test_payload_id(&frame[payload_at..]);
        match (self, test) {
            (Match::Test, None) => None,
            _ => Some(Matched { payload_at, flow, test }),
        }
    }

    /// The name of what it matches, for reports: `test packets` or `UDP
    /// datagrams`.
    pub fn noun(self) -> &'static str {
        match self {
            Match::Test => "test packets",
            Match::Udp => "UDP datagrams",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload;
    use mcr_core::wire::{UDP_V4_HEADERS, UdpFrameSpec, write_udp_v4_frame};

    /// An IPv4 UDP frame from 10.0.1.1:9000 to `dst` carrying `payload`.
    fn udp(dst: &str, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; UDP_V4_HEADERS + payload.len()];
        f[UDP_V4_HEADERS..].copy_from_slice(payload);
        let spec = UdpFrameSpec {
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_mac: [2, 0, 0, 0, 0, 1],
            src: "10.0.1.1:9000".parse().expect("literal"),
            dst: dst.parse().expect("literal"),
            ttl: 64,
            dscp: 0,
            ident: 0,
        };
        write_udp_v4_frame(&mut f, &spec, payload.len()).expect("fits");
        f
    }

    /// An SRT data packet (sequence 5, message 1, solo, in order) with a
    /// 1,316-byte body, as libsrt sends one.
    fn srt_data() -> Vec<u8> {
        let mut p = vec![0u8; 16 + 1316];
        p[..4].copy_from_slice(&5u32.to_be_bytes());
        p[4..8].copy_from_slice(&(0xe000_0001u32).to_be_bytes());
        p[12..16].copy_from_slice(&0x1234_5678u32.to_be_bytes());
        p[16] = 0x47;
        udp("10.0.1.2:40000", &p)
    }

    /// An SRT ACK (control type 2): 16 bytes of header and a body.
    fn srt_ack() -> Vec<u8> {
        let mut p = vec![0u8; 16 + 28];
        p[..4].copy_from_slice(&0x8002_0000u32.to_be_bytes());
        udp("10.0.1.1:9000", &p)
    }

    fn test_packet() -> Vec<u8> {
        let mut p = vec![0u8; 200];
        payload::fill(&mut p, 3, 77, 1);
        udp("239.1.1.1:5001", &p)
    }

    #[test]
    fn by_default_only_test_packets_match() {
        let m = Match::Test.matches(&test_packet()).expect("a test packet");
        assert_eq!(m.payload_at, UDP_V4_HEADERS);
        assert_eq!(m.flow, ([239, 1, 1, 1], 5001));
        assert_eq!(m.test, Some((3, 77)));
        assert_eq!(Match::Test.matches(&srt_data()), None);
        assert_eq!(Match::Test.matches(&srt_ack()), None);
    }

    #[test]
    fn with_udp_every_ipv4_udp_datagram_matches_and_test_packets_are_still_known() {
        let data = Match::Udp.matches(&srt_data()).expect("SRT data");
        assert_eq!((data.flow, data.test), (([10, 0, 1, 2], 40000), None));
        let ack = Match::Udp.matches(&srt_ack()).expect("an SRT ACK");
        assert_eq!((ack.flow, ack.test), (([10, 0, 1, 1], 9000), None));
        let t = Match::Udp.matches(&test_packet()).expect("a test packet");
        assert_eq!(t.test, Some((3, 77)));
        // An empty datagram is still one.
        assert!(Match::Udp.matches(&udp("10.0.1.2:40000", &[])).is_some());
    }

    #[test]
    fn what_is_not_a_whole_ipv4_udp_datagram_never_matches() {
        let mut arp = srt_data();
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        let mut tcp = srt_data();
        tcp[14 + 9] = 6;
        let mut fragment = srt_data();
        fragment[14 + 6] |= 0x20; // more fragments
        let mut later_fragment = srt_data();
        later_fragment[14 + 7] = 0x10; // an offset
        let short = srt_data()[..14 + 20 + 4].to_vec();
        for (what, f) in [
            ("ARP", arp),
            ("TCP", tcp),
            ("a first fragment", fragment),
            ("a later fragment", later_fragment),
            ("a cut UDP header", short),
        ] {
            assert_eq!(Match::Udp.matches(&f), None, "{what}");
            assert_eq!(Match::Test.matches(&f), None, "{what}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_never_panic_and_a_test_packet_match_is_a_udp_match(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            if let Some(t) = Match::Test.matches(&bytes) {
                proptest::prop_assert_eq!(Match::Udp.matches(&bytes), Some(t));
            }
        }
    }
}
