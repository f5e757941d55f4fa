//! The forwarding step: parse an arriving frame, and build the frame an
//! output sends, with headers rewritten and checksums updated
//! incrementally. Pure functions of bytes: no I/O, no allocation.

use std::net::Ipv4Addr;

use zerocopy::{FromBytes, IntoBytes};

use crate::rule::Ttl;
use crate::stats::{OutputCounter, WorkerCounter};
use crate::wire::checksum;
use crate::wire::ethernet::{self, ETHERTYPE_IPV4, ETHERTYPE_VLAN, EthernetHeader, Mac};
use crate::wire::ipv4::{self, Ipv4Header, PROTO_UDP};
use crate::wire::udp::{self, UdpHeader};

/// A UDP-over-IPv4 datagram found in a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram {
    /// Offset of the IPv4 header in the frame.
    pub ip_at: usize,
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// TTL as it arrived.
    pub ttl: u8,
    /// Offset of the UDP payload in the frame.
    pub payload_at: usize,
    /// Length of the UDP payload.
    pub payload_len: usize,
    /// The UDP checksum field holds only a partial sum, to be completed by
    /// the sender's hardware: an output must compute it in full.
    pub checksum_partial: bool,
}

/// What the kernel knows about an arriving frame's UDP checksum (from the
/// ring's status flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxChecksum {
    /// Nothing: check it.
    Unknown,
    /// Already checked and valid (`TP_STATUS_CSUM_VALID`).
    Valid,
    /// Not computed yet (`TP_STATUS_CSUMNOTREADY`): the frame was built on
    /// this host with checksum offload, and the field holds a partial sum.
    NotReady,
}

/// Finds the UDP datagram in an Ethernet frame, or says why there is none
/// to forward. `wire_len` is the frame's length on the wire (more than
/// `frame.len()` if the capture cut it); `checksum` is what the kernel
/// knows of the UDP checksum.
pub fn parse(frame: &[u8], wire_len: usize, checksum: RxChecksum) -> Result<Datagram, WorkerCounter> {
    if frame.len() < wire_len {
        return Err(WorkerCounter::Truncated);
    }
    let (eth, _) = EthernetHeader::ref_from_prefix(frame).map_err(|_| WorkerCounter::BadLength)?;
    let ip_at = ethernet::HEADER_LEN;
    let ethertype = eth.ethertype.get();
    if ethertype == ETHERTYPE_VLAN || ethertype == ethernet::ETHERTYPE_QINQ {
        // Rules take untagged traffic of their interface.
        return Err(WorkerCounter::VlanTagged);
    }
    if ethertype != ETHERTYPE_IPV4 {
        return Err(WorkerCounter::NotIpv4);
    }
    let rest = &frame[ip_at..];
    let (ip, _) = Ipv4Header::ref_from_prefix(rest).map_err(|_| WorkerCounter::BadLength)?;
    if ip.version() != 4 {
        return Err(WorkerCounter::NotIpv4);
    }
    match ip.header_len() {
        ipv4::HEADER_LEN => {}
        n if n > ipv4::HEADER_LEN => return Err(WorkerCounter::IpOptions),
        _ => return Err(WorkerCounter::BadLength),
    }
    let total = usize::from(ip.total_len.get());
    if total < ipv4::HEADER_LEN || total > rest.len() {
        return Err(WorkerCounter::BadLength);
    }
    if !ip.checksum_ok(&[]) {
        return Err(WorkerCounter::BadIpChecksum);
    }
    if ip.is_fragment() {
        return Err(WorkerCounter::Fragment);
    }
    if ip.protocol != PROTO_UDP {
        return Err(WorkerCounter::NotUdp);
    }
    let l4 = &rest[ipv4::HEADER_LEN..total];
    let (u, _) = UdpHeader::ref_from_prefix(l4).map_err(|_| WorkerCounter::BadLength)?;
    let udp_len = usize::from(u.len.get());
    // The UDP length must fill the IP payload exactly: rewriting copies the
    // UDP datagram and keeps the IP length.
    if udp_len < udp::HEADER_LEN || udp_len != l4.len() {
        return Err(WorkerCounter::BadLength);
    }
    let payload = &l4[udp::HEADER_LEN..udp_len];
    if checksum == RxChecksum::Unknown && !u.checksum_ok_v4(ip.src, ip.dst, payload) {
        return Err(WorkerCounter::BadUdpChecksum);
    }
    Ok(Datagram {
        ip_at,
        src: ip.src_addr(),
        dst: ip.dst_addr(),
        src_port: u.src_port.get(),
        dst_port: u.dst_port.get(),
        ttl: ip.ttl,
        payload_at: ip_at + ipv4::HEADER_LEN + udp::HEADER_LEN,
        payload_len: udp_len - udp::HEADER_LEN,
        checksum_partial: checksum == RxChecksum::NotReady,
    })
}

/// How an output rewrites a datagram into a frame of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRewrite {
    /// Destination MAC (the group's, for multicast).
    pub dst_mac: Mac,
    /// Source MAC: the output interface's.
    pub src_mac: Mac,
    /// New destination address.
    pub dst: Ipv4Addr,
    /// New destination port.
    pub dst_port: u16,
    /// New source address, or `None` to keep the one it came with.
    pub src: Option<Ipv4Addr>,
    /// TTL policy.
    pub ttl: Ttl,
    /// The output interface's MTU.
    pub mtu: u32,
}

/// The TTL an output gives a datagram that arrived with `ttl`, or why it
/// is not sent.
pub fn output_ttl(policy: Ttl, ttl: u8) -> Result<u8, OutputCounter> {
    match policy {
        Ttl::Fixed(t) => Ok(t),
        Ttl::Decrement if ttl > 1 => Ok(ttl - 1),
        Ttl::Decrement => Err(OutputCounter::TtlExpired),
    }
}

/// Writes the frame that output `out` sends for datagram `d` of `frame`
/// into `buf`, and returns its length: Ethernet header anew, IPv4 and UDP
/// headers copied with destination, port, source and TTL rewritten and both
/// checksums updated incrementally, the payload copied once. (A datagram
/// whose UDP checksum was never completed gets it computed in full.)
pub fn rewrite(frame: &[u8], d: &Datagram, out: &FrameRewrite, buf: &mut [u8]) -> Result<usize, OutputCounter> {
    let ttl = output_ttl(out.ttl, d.ttl)?;
    let ip_len = ipv4::HEADER_LEN + udp::HEADER_LEN + d.payload_len;
    if ip_len > out.mtu as usize {
        return Err(OutputCounter::TooBig);
    }
    let len = ethernet::HEADER_LEN + ip_len;
    let src = frame.get(d.ip_at..d.ip_at + ip_len).ok_or(OutputCounter::TooBig)?;
    let dst = buf.get_mut(..len).ok_or(OutputCounter::TooBig)?;
    let (eth_bytes, ip_bytes) = dst.split_at_mut(ethernet::HEADER_LEN);
    ip_bytes.copy_from_slice(src);
    let eth = EthernetHeader {
        dst: out.dst_mac,
        src: out.src_mac,
        ethertype: zerocopy::network_endian::U16::new(ETHERTYPE_IPV4),
    };
    eth_bytes.copy_from_slice(eth.as_bytes());
    let (ip, l4) = Ipv4Header::mut_from_prefix(ip_bytes).map_err(|_| OutputCounter::TooBig)?;
    let (old_src, old_dst) = (ip.src, ip.dst);
    ip.set_ttl(ttl);
    if let Some(s) = out.src {
        ip.set_src(s);
    }
    ip.set_dst(out.dst);
    let (new_src, new_dst) = (ip.src, ip.dst);
    let (u, payload) = UdpHeader::mut_from_prefix(l4).map_err(|_| OutputCounter::TooBig)?;
    let old_port = u.dst_port.get();
    u.dst_port.set(out.dst_port);
    let c = u.checksum.get();
    if d.checksum_partial {
        let full = u.compute_checksum_v4(new_src, new_dst, payload);
        u.checksum.set(full);
    } else if c != 0 {
        // The pseudo-header holds both addresses; the header, the port.
        let mut c = checksum::update32(c, old_src, new_src);
        c = checksum::update32(c, old_dst, new_dst);
        c = checksum::update16(c, old_port, out.dst_port);
        u.checksum.set(if c == 0 { 0xffff } else { c });
    }
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{UDP_V4_HEADERS, UdpFrameSpec, write_udp_v4_frame};
    use proptest::prelude::*;

    fn frame(payload: &[u8], ttl: u8) -> Vec<u8> {
        let mut f = vec![0u8; UDP_V4_HEADERS + payload.len()];
        f[UDP_V4_HEADERS..].copy_from_slice(payload);
        let spec = UdpFrameSpec {
            dst_mac: [1, 0, 0x5e, 1, 1, 1],
            src_mac: [2, 0, 0, 0, 0, 1],
            src: "10.0.0.1:40000".parse().expect("literal"),
            dst: "239.1.1.1:5001".parse().expect("literal"),
            ttl,
            dscp: 0,
            ident: 7,
        };
        write_udp_v4_frame(&mut f, &spec, payload.len()).expect("fits");
        f
    }

    fn out() -> FrameRewrite {
        FrameRewrite {
            dst_mac: [1, 0, 0x5e, 10, 1, 1],
            src_mac: [2, 0, 0, 0, 0, 9],
            dst: Ipv4Addr::new(239, 10, 1, 1),
            dst_port: 6001,
            src: Some(Ipv4Addr::new(10, 0, 1, 1)),
            ttl: Ttl::Decrement,
            mtu: 1500,
        }
    }

    /// Found by the `frame` fuzz target: a frame the kernel vouched for
    /// (`Valid`) is not checked again, and its rewrite must not launder a
    /// wrong UDP checksum into a right one: the receiver can still tell.
    #[test]
    fn a_wrong_checksum_the_kernel_vouched_for_stays_wrong_after_rewriting() {
        let mut f = frame(&[0x63; 64], 9);
        f[40] ^= 0x55;
        assert_eq!(
            parse(&f, f.len(), RxChecksum::Unknown).err(),
            Some(WorkerCounter::BadUdpChecksum)
        );
        let d = parse(&f, f.len(), RxChecksum::Valid).expect("taken on the kernel's word");
        let mut buf = [0u8; 256];
        let n = rewrite(&f, &d, &out(), &mut buf).expect("rewritten");
        assert_eq!(
            parse(&buf[..n], n, RxChecksum::Unknown).err(),
            Some(WorkerCounter::BadUdpChecksum)
        );
    }

    #[test]
    fn parses_a_real_frame() {
        let f = frame(b"hello", 64);
        let d = parse(&f, f.len(), RxChecksum::Unknown).expect("valid");
        assert_eq!(
            (d.src, d.dst, d.src_port, d.dst_port, d.ttl),
            (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(239, 1, 1, 1), 40000, 5001, 64)
        );
        assert_eq!(&f[d.payload_at..d.payload_at + d.payload_len], b"hello");
    }

    #[test]
    fn every_kind_of_bad_frame_has_its_reason() {
        let good = frame(b"0123456789", 64);
        let with = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut b = good.clone();
            f(&mut b);
            b
        };
        let cases: Vec<(Vec<u8>, WorkerCounter)> = vec![
            (with(&|b| b[12] = 0x86), WorkerCounter::NotIpv4),
            (with(&|b| b.truncate(20)), WorkerCounter::BadLength),
            (with(&|b| b[14] = 0x46), WorkerCounter::IpOptions),
            (with(&|b| b[14] = 0x44), WorkerCounter::BadLength),
            (with(&|b| b[17] = 0xff), WorkerCounter::BadLength),
            (with(&|b| b[24] ^= 1), WorkerCounter::BadIpChecksum),
            (
                with(&|b| {
                    let n = b.len();
                    b[n - 1] ^= 1
                }),
                WorkerCounter::BadUdpChecksum,
            ),
        ];
        for (i, (b, want)) in cases.into_iter().enumerate() {
            assert_eq!(parse(&b, b.len(), RxChecksum::Unknown), Err(want), "case {i}");
        }
        assert_eq!(
            parse(&good[..40], good.len(), RxChecksum::Unknown),
            Err(WorkerCounter::Truncated)
        );
        // The kernel vouching for the UDP checksum skips the check.
        let bad_udp = with(&|b| {
            let n = b.len();
            b[n - 1] ^= 1
        });
        assert!(parse(&bad_udp, bad_udp.len(), RxChecksum::Valid).is_ok());
    }

    #[test]
    fn fragments_and_other_protocols_are_not_forwarded() {
        let fix = |b: &mut Vec<u8>| {
            let h = Ipv4Header::mut_from_prefix(&mut b[14..]).expect("ip").0;
            h.fill_checksum(&[]);
        };
        let mut frag = frame(b"abc", 64);
        Ipv4Header::mut_from_prefix(&mut frag[14..])
            .expect("ip")
            .0
            .flags_fragment
            .set(ipv4::FLAG_MF);
        fix(&mut frag);
        assert_eq!(
            parse(&frag, frag.len(), RxChecksum::Unknown),
            Err(WorkerCounter::Fragment)
        );
        let mut tcp = frame(b"abc", 64);
        Ipv4Header::mut_from_prefix(&mut tcp[14..]).expect("ip").0.protocol = 6;
        fix(&mut tcp);
        assert_eq!(parse(&tcp, tcp.len(), RxChecksum::Unknown), Err(WorkerCounter::NotUdp));
    }

    #[test]
    fn a_vlan_tagged_frame_is_not_taken_for_the_untagged_interface() {
        let f = frame(b"tagged", 64);
        let mut t = f[..12].to_vec();
        t.extend_from_slice(&[0x81, 0x00, 0x00, 0x64]);
        t.extend_from_slice(&f[12..]);
        assert_eq!(parse(&t, t.len(), RxChecksum::Unknown), Err(WorkerCounter::VlanTagged));
    }

    #[test]
    fn a_udp_length_short_of_the_ip_payload_is_a_bad_length() {
        let mut f = frame(b"0123456789", 64);
        // UDP length 8 + 5, IP payload 8 + 10.
        let at = 14 + 20 + 4;
        f[at..at + 2].copy_from_slice(&13u16.to_be_bytes());
        assert_eq!(parse(&f, f.len(), RxChecksum::Valid), Err(WorkerCounter::BadLength));
    }

    #[test]
    fn rewrite_changes_what_it_should_and_keeps_checksums_valid() {
        let f = frame(b"payload bytes", 9);
        let d = parse(&f, f.len(), RxChecksum::Unknown).expect("valid");
        let mut buf = [0u8; 2048];
        let n = rewrite(&f, &d, &out(), &mut buf).expect("sent");
        let o = &buf[..n];
        let back = parse(o, o.len(), RxChecksum::Unknown).expect("the rewritten frame is valid, checksums included");
        assert_eq!(
            (back.dst, back.dst_port, back.src, back.src_port, back.ttl),
            (Ipv4Addr::new(239, 10, 1, 1), 6001, Ipv4Addr::new(10, 0, 1, 1), 40000, 8)
        );
        assert_eq!(&o[0..6], &[1, 0, 0x5e, 10, 1, 1]);
        assert_eq!(&o[6..12], &[2, 0, 0, 0, 0, 9]);
        assert_eq!(&o[back.payload_at..], b"payload bytes");
        let mut keep = out();
        keep.src = None;
        keep.ttl = Ttl::Fixed(3);
        let n = rewrite(&f, &d, &keep, &mut buf).expect("sent");
        let back = parse(&buf[..n], n, RxChecksum::Unknown).expect("valid");
        assert_eq!((back.src, back.ttl), (Ipv4Addr::new(10, 0, 0, 1), 3));
    }

    #[test]
    fn ttl_and_mtu_limits_are_drops_of_the_output() {
        let f = frame(&[0u8; 100], 1);
        let d = parse(&f, f.len(), RxChecksum::Unknown).expect("valid");
        let mut buf = [0u8; 2048];
        assert_eq!(rewrite(&f, &d, &out(), &mut buf), Err(OutputCounter::TtlExpired));
        let mut small = out();
        small.ttl = Ttl::Fixed(5);
        small.mtu = 120;
        assert_eq!(rewrite(&f, &d, &small, &mut buf), Err(OutputCounter::TooBig));
        assert_eq!(
            rewrite(
                &f,
                &d,
                &FrameRewrite {
                    ttl: Ttl::Fixed(5),
                    ..out()
                },
                &mut buf[..50]
            ),
            Err(OutputCounter::TooBig)
        );
    }

    #[test]
    fn a_partial_checksum_is_completed_on_output() {
        let mut f = frame(b"offloaded", 9);
        // What a sender with checksum offload leaves in the field: some
        // partial sum, not the checksum.
        let at = 14 + 20 + 6;
        f[at] = 0x12;
        f[at + 1] = 0x34;
        assert_eq!(
            parse(&f, f.len(), RxChecksum::Unknown),
            Err(WorkerCounter::BadUdpChecksum)
        );
        let d = parse(&f, f.len(), RxChecksum::NotReady).expect("trusted as not ready");
        let mut buf = [0u8; 2048];
        let n = rewrite(&f, &d, &out(), &mut buf).expect("sent");
        parse(&buf[..n], n, RxChecksum::Unknown).expect("the output carries a full, valid checksum");
    }

    #[test]
    fn a_zero_udp_checksum_stays_zero() {
        let mut f = frame(b"no checksum", 9);
        let at = 14 + 20 + 6;
        f[at] = 0;
        f[at + 1] = 0;
        let d = parse(&f, f.len(), RxChecksum::Unknown).expect("no checksum is valid");
        let mut buf = [0u8; 2048];
        let n = rewrite(&f, &d, &out(), &mut buf).expect("sent");
        assert_eq!(&buf[at..at + 2], &[0, 0]);
        parse(&buf[..n], n, RxChecksum::Unknown).expect("valid");
    }

    proptest! {
        #[test]
        fn any_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200), extra in 0usize..10, verified: bool) {
            let c = if verified { RxChecksum::Valid } else { RxChecksum::Unknown };
            let _ = parse(&bytes, bytes.len() + extra % 2, c);
        }

        #[test]
        fn any_bytes_after_a_valid_ethernet_and_ip_start_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..100)) {
            let mut f = frame(b"x", 9)[..34].to_vec();
            f.extend_from_slice(&tail);
            if let Ok(d) = parse(&f, f.len(), RxChecksum::Unknown) {
                let mut buf = [0u8; 256];
                let _ = rewrite(&f, &d, &out(), &mut buf);
            }
        }

        #[test]
        fn a_rewritten_frame_always_parses_back_with_valid_checksums(
            payload in proptest::collection::vec(any::<u8>(), 0..1400),
            src: [u8; 4], ttl in 2u8..=255, dst: [u8; 4], port: u16, new_src: Option<[u8; 4]>, fixed: Option<u8>,
        ) {
            let mut f = vec![0u8; UDP_V4_HEADERS + payload.len()];
            f[UDP_V4_HEADERS..].copy_from_slice(&payload);
            let spec = UdpFrameSpec {
                dst_mac: [1, 0, 0x5e, 1, 1, 1], src_mac: [2, 0, 0, 0, 0, 1],
                src: std::net::SocketAddrV4::new(src.into(), 1234),
                dst: "239.1.1.1:5001".parse().expect("literal"),
                ttl, dscp: 0, ident: 0,
            };
            write_udp_v4_frame(&mut f, &spec, payload.len()).expect("fits");
            let d = parse(&f, f.len(), RxChecksum::Unknown).expect("valid");
            let o = FrameRewrite {
                dst: dst.into(), dst_port: port, src: new_src.map(Into::into),
                ttl: fixed.filter(|&t| t > 0).map_or(Ttl::Decrement, Ttl::Fixed),
                ..out()
            };
            let mut buf = [0u8; 1600];
            let n = rewrite(&f, &d, &o, &mut buf).expect("fits");
            let back = parse(&buf[..n], n, RxChecksum::Unknown).expect("checksums valid");
            prop_assert_eq!(back.dst, Ipv4Addr::from(dst));
            prop_assert_eq!(back.dst_port, port);
            prop_assert_eq!(back.src, new_src.map_or(Ipv4Addr::from(src), Ipv4Addr::from));
            prop_assert_eq!(&buf[back.payload_at..n], &payload[..]);
        }
    }
}
