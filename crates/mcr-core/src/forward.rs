//! The forwarding step: parse an arriving frame, and build the frame an
//! output sends, with headers rewritten and checksums updated
//! incrementally. Pure functions of bytes: no I/O, no allocation.
//!
//! Both families are handled alike: an IPv4 or IPv6 datagram (in an
//! untagged frame, or one tagged 802.1Q) goes out as IPv4 or IPv6, tagged
//! or not, whatever it came in as.

use std::net::IpAddr;

use zerocopy::network_endian::U16;
use zerocopy::{FromBytes, IntoBytes};

use crate::rule::{Dscp, Ttl};
use crate::stats::{OutputCounter, WorkerCounter};
use crate::wire::checksum;
use crate::wire::ethernet::{self, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_VLAN, EthernetHeader, Mac, VlanTag};
use crate::wire::ipv4::{self, FLAG_DF, Ipv4Header, PROTO_UDP};
use crate::wire::ipv6::{self, Ipv6Header, Upper};
use crate::wire::udp::{self, UdpHeader};

/// A UDP datagram (over IPv4 or IPv6) found in a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram {
    /// Offset of the IP header in the frame.
    pub ip_at: usize,
    /// Offset of the UDP header in the frame (after any IPv6 extension
    /// headers).
    pub udp_at: usize,
    /// The 802.1Q VLAN id it carried, 0 if untagged (or priority-tagged).
    pub vlan: u16,
    /// The 802.1Q priority it carried (0 if untagged).
    pub pcp: u8,
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// TTL (IPv4) or hop limit (IPv6) as it arrived.
    pub ttl: u8,
    /// TOS byte (IPv4) or traffic class (IPv6): DSCP and ECN.
    pub tos: u8,
    /// The IPv6 flow label (0 for IPv4).
    pub flow_label: u32,
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
/// knows of the UDP checksum; `tag` is the 802.1Q TCI the kernel took off
/// the frame before handing it over (the ring's `tp_vlan_tci`), if any. A
/// tag still in the frame is read from there; a second tag (802.1ad
/// QinQ) is not taken.
pub fn parse(frame: &[u8], wire_len: usize, checksum: RxChecksum, tag: Option<u16>) -> Result<Datagram, WorkerCounter> {
    if frame.len() < wire_len {
        return Err(WorkerCounter::Truncated);
    }
    let (eth, _) = EthernetHeader::ref_from_prefix(frame).map_err(|_| WorkerCounter::BadLength)?;
    let mut at = ethernet::HEADER_LEN;
    let mut ethertype = eth.ethertype.get();
    let mut tci = tag;
    if is_tag(ethertype) {
        // A second tag (QinQ), or an 802.1ad service tag: no rule's VLAN.
        if tci.is_some() || ethertype != ETHERTYPE_VLAN {
            return Err(WorkerCounter::VlanTagged);
        }
        let (t, _) = VlanTag::ref_from_prefix(&frame[at..]).map_err(|_| WorkerCounter::BadLength)?;
        tci = Some(t.tci.get());
        ethertype = t.ethertype.get();
        at += 4;
        if is_tag(ethertype) {
            return Err(WorkerCounter::VlanTagged);
        }
    }
    let mut d = match ethertype {
        ETHERTYPE_IPV4 => parse_v4(frame, at, checksum)?,
        ETHERTYPE_IPV6 => parse_v6(frame, at, checksum)?,
        _ => return Err(WorkerCounter::NotIp),
    };
    if let Some(t) = tci {
        d.vlan = ethernet::tci_vid(t);
        d.pcp = ethernet::tci_pcp(t);
    }
    Ok(d)
}

fn is_tag(ethertype: u16) -> bool {
    ethertype == ETHERTYPE_VLAN || ethertype == ethernet::ETHERTYPE_QINQ
}

/// The 802.1Q tag the kernel took off a frame, as [`parse`] takes it, from
/// the ring's TCI and TPID: an 802.1ad service tag (TPID 0x88a8) is no
/// customer VLAN a rule takes, and counts as `vlan_tagged`.
pub fn kernel_tag(tci: Option<u16>, tpid: Option<u16>) -> Result<Option<u16>, WorkerCounter> {
    match (tci, tpid) {
        (Some(_), Some(t)) if t != ETHERTYPE_VLAN => Err(WorkerCounter::VlanTagged),
        _ => Ok(tci),
    }
}

fn parse_v4(frame: &[u8], ip_at: usize, checksum: RxChecksum) -> Result<Datagram, WorkerCounter> {
    let rest = &frame[ip_at..];
    let (ip, _) = Ipv4Header::ref_from_prefix(rest).map_err(|_| WorkerCounter::BadLength)?;
    if ip.version() != 4 {
        return Err(WorkerCounter::NotIp);
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
    let udp_at = ip_at + ipv4::HEADER_LEN;
    // The UDP checksum covers the payload end to end: like a router, the
    // relay leaves it to the receiver (a wrong one stays wrong after the
    // rewrite, which updates it incrementally), and does not read the
    // payload to check it.
    let (u, payload) = udp_of(&rest[ipv4::HEADER_LEN..total])?;
    Ok(datagram(
        ip_at,
        udp_at,
        ip.src_addr().into(),
        ip.dst_addr().into(),
        u,
        ip.ttl,
        ip.dscp_ecn,
        0,
        payload.len(),
        checksum,
    ))
}

fn parse_v6(frame: &[u8], ip_at: usize, checksum: RxChecksum) -> Result<Datagram, WorkerCounter> {
    let rest = &frame[ip_at..];
    let (ip, _) = Ipv6Header::ref_from_prefix(rest).map_err(|_| WorkerCounter::BadLength)?;
    if ip.version() != 6 {
        return Err(WorkerCounter::NotIp);
    }
    let total = ipv6::HEADER_LEN + usize::from(ip.payload_len.get());
    // (A payload length of 0 announces a jumbogram, which no Ethernet
    // frame holds: the UDP length check below refuses it.)
    let dgram = rest.get(..total).ok_or(WorkerCounter::BadLength)?;
    let l4_at = match ipv6::find_upper(dgram, ip.next_header) {
        Upper::Udp(at) => at,
        Upper::Fragment => return Err(WorkerCounter::Fragment),
        Upper::Unsupported(_) => return Err(WorkerCounter::Ipv6Extension),
        Upper::Other(_) => return Err(WorkerCounter::NotUdp),
        Upper::Short => return Err(WorkerCounter::BadLength),
    };
    let (u, payload) = udp_of(&dgram[l4_at..])?;
    // IPv6 requires a UDP checksum: a datagram without one is refused.
    if u.checksum.get() == 0 {
        return Err(WorkerCounter::BadUdpChecksum);
    }
    Ok(datagram(
        ip_at,
        ip_at + l4_at,
        ip.src_addr().into(),
        ip.dst_addr().into(),
        u,
        ip.hop_limit,
        ip.traffic_class(),
        ip.flow_label(),
        payload.len(),
        checksum,
    ))
}

/// The UDP header and payload of an IP payload `l4`. The UDP length must
/// fill it exactly: rewriting copies the UDP datagram and sets the IP
/// length from it.
fn udp_of(l4: &[u8]) -> Result<(&UdpHeader, &[u8]), WorkerCounter> {
    let (u, _) = UdpHeader::ref_from_prefix(l4).map_err(|_| WorkerCounter::BadLength)?;
    let udp_len = usize::from(u.len.get());
    if udp_len < udp::HEADER_LEN || udp_len != l4.len() {
        return Err(WorkerCounter::BadLength);
    }
    Ok((u, &l4[udp::HEADER_LEN..udp_len]))
}

#[allow(clippy::too_many_arguments)]
fn datagram(
    ip_at: usize,
    udp_at: usize,
    src: IpAddr,
    dst: IpAddr,
    u: &UdpHeader,
    ttl: u8,
    tos: u8,
    flow_label: u32,
    payload_len: usize,
    checksum: RxChecksum,
) -> Datagram {
    Datagram {
        ip_at,
        udp_at,
        vlan: 0,
        pcp: 0,
        src,
        dst,
        src_port: u.src_port.get(),
        dst_port: u.dst_port.get(),
        ttl,
        tos,
        flow_label,
        payload_at: udp_at + udp::HEADER_LEN,
        payload_len,
        checksum_partial: checksum == RxChecksum::NotReady,
    }
}

/// Whether the UDP checksum of datagram `d` in `frame` is right, for a
/// receiver that checks every packet (MCR itself does not read payloads to
/// check them): a checksum the kernel left to be completed (`NotReady`)
/// must hold the sum of the pseudo-header, as a sender with checksum
/// offload leaves it; any other must be complete and valid (IPv4 may omit
/// it with 0; IPv6 may not), whatever the kernel said.
pub fn udp_checksum_ok(frame: &[u8], d: &Datagram, rx: RxChecksum) -> bool {
    let Some(l4) = frame.get(d.udp_at..d.payload_at + d.payload_len) else {
        return false;
    };
    let Ok((u, payload)) = UdpHeader::ref_from_prefix(l4) else {
        return false;
    };
    let len = u.len.get();
    let pseudo = match (d.src, d.dst) {
        (IpAddr::V4(s), IpAddr::V4(t)) => checksum::pseudo_header_v4(s.octets(), t.octets(), PROTO_UDP, len),
        (IpAddr::V6(s), IpAddr::V6(t)) => {
            checksum::pseudo_header_v6(s.octets(), t.octets(), ipv6::NEXT_UDP, u32::from(len))
        }
        _ => return false,
    };
    if rx == RxChecksum::NotReady {
        return u.checksum.get() == checksum::fold(pseudo);
    }
    match d.dst {
        IpAddr::V4(_) if u.checksum.get() == 0 => true,
        _ => {
            u.checksum.get() != 0
                && checksum::fold(checksum::add(checksum::add(pseudo, u.as_bytes()), payload)) == 0xffff
        }
    }
}

/// How an output rewrites a datagram into a frame of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRewrite {
    /// Destination MAC (the group's, for multicast).
    pub dst_mac: Mac,
    /// Source MAC: the output interface's.
    pub src_mac: Mac,
    /// The 802.1Q VLAN id to tag the frame with, or none: untagged.
    pub vlan: Option<u16>,
    /// New destination address (its family is the output's).
    pub dst: IpAddr,
    /// New destination port.
    pub dst_port: u16,
    /// New source address (of the destination's family), or `None` to
    /// keep the one it came with (the same family only).
    pub src: Option<IpAddr>,
    /// TTL / hop limit policy.
    pub ttl: Ttl,
    /// DSCP policy.
    pub dscp: Dscp,
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

/// The TOS byte / traffic class an output gives a datagram that arrived
/// with `tos`: the DSCP kept or set, the ECN bits kept.
pub fn output_tos(policy: Dscp, tos: u8) -> u8 {
    match policy {
        Dscp::Keep => tos,
        Dscp::Set(d) => (d << 2) | (tos & 0x03),
    }
}

/// The TTL and TOS an output with these policies gives datagram `d`, or
/// why it sends nothing: for frame and datagram outputs alike.
pub fn leaves_with(ttl: Ttl, dscp: Dscp, d: &Datagram) -> Result<(u8, u8), OutputCounter> {
    Ok((output_ttl(ttl, d.ttl)?, output_tos(dscp, d.tos)))
}

/// The ones'-complement sum of an address's bytes.
fn addr_sum(a: IpAddr) -> u64 {
    match a {
        IpAddr::V4(v) => checksum::add(0, &v.octets()),
        IpAddr::V6(v) => checksum::add(0, &v.octets()),
    }
}

/// Writes the frame that output `out` sends for datagram `d` of `frame`
/// into `buf`, and returns its length: Ethernet header (and tag) anew, the
/// IP header of the output's family (copied and rewritten in place when
/// the family stays IPv4, so identification and flags are kept; built anew
/// otherwise, IPv6 extension headers left behind), the UDP header with the
/// new port and its checksum updated incrementally for the new addresses
/// and port (pseudo-header lengths and protocol are the same in both
/// families), the payload copied once. A checksum that was never completed
/// is computed in full, and so is one an IPv4 sender left out (0) when the
/// output is IPv6, which requires it.
pub fn rewrite(frame: &[u8], d: &Datagram, out: &FrameRewrite, buf: &mut [u8]) -> Result<usize, OutputCounter> {
    let (ttl, tos) = leaves_with(out.ttl, out.dscp, d)?;
    rewrite_as(frame, d, out, ttl, tos, buf)
}

/// [`rewrite`] with the TTL and TOS already decided ([`leaves_with`]).
pub fn rewrite_as(
    frame: &[u8],
    d: &Datagram,
    out: &FrameRewrite,
    ttl: u8,
    tos: u8,
    buf: &mut [u8],
) -> Result<usize, OutputCounter> {
    let udp_len = udp::HEADER_LEN + d.payload_len;
    let ip_header = if out.dst.is_ipv4() {
        ipv4::HEADER_LEN
    } else {
        ipv6::HEADER_LEN
    };
    let ip_len = ip_header + udp_len;
    if ip_len > out.mtu as usize {
        return Err(OutputCounter::TooBig);
    }
    let l2 = ethernet::HEADER_LEN + if out.vlan.is_some() { 4 } else { 0 };
    let len = l2 + ip_len;
    let udp_src = frame.get(d.udp_at..d.udp_at + udp_len).ok_or(OutputCounter::TooBig)?;
    let dst_buf = buf.get_mut(..len).ok_or(OutputCounter::TooBig)?;
    let (l2_bytes, rest) = dst_buf.split_at_mut(l2);
    let (ip_bytes, l4) = rest.split_at_mut(ip_header);
    l4.copy_from_slice(udp_src);
    let ethertype = if out.dst.is_ipv4() {
        ETHERTYPE_IPV4
    } else {
        ETHERTYPE_IPV6
    };
    let (eth_bytes, tag_bytes) = l2_bytes.split_at_mut(ethernet::HEADER_LEN);
    let eth = EthernetHeader {
        dst: out.dst_mac,
        src: out.src_mac,
        ethertype: U16::new(if out.vlan.is_some() { ETHERTYPE_VLAN } else { ethertype }),
    };
    eth_bytes.copy_from_slice(eth.as_bytes());
    if let Some(vid) = out.vlan {
        let tag = VlanTag::new(d.pcp, vid, ethertype);
        tag_bytes.copy_from_slice(tag.as_bytes());
    }
    let src = out.src.unwrap_or(d.src);
    match (d.src, src, out.dst) {
        (IpAddr::V4(_), IpAddr::V4(src), IpAddr::V4(dst)) => {
            let orig = frame
                .get(d.ip_at..d.ip_at + ipv4::HEADER_LEN)
                .ok_or(OutputCounter::TooBig)?;
            ip_bytes.copy_from_slice(orig);
            let (ip, _) = Ipv4Header::mut_from_prefix(ip_bytes).map_err(|_| OutputCounter::TooBig)?;
            ip.set_ttl(ttl);
            if tos != ip.dscp_ecn {
                ip.set_dscp(tos >> 2);
            }
            ip.set_src(src);
            ip.set_dst(dst);
        }
        (_, IpAddr::V4(src), IpAddr::V4(dst)) => {
            let mut ip = Ipv4Header {
                version_ihl: 0x45,
                dscp_ecn: tos,
                total_len: U16::new(ip_len as u16),
                ident: U16::new(0),
                flags_fragment: U16::new(FLAG_DF),
                ttl,
                protocol: PROTO_UDP,
                checksum: U16::new(0),
                src: src.octets(),
                dst: dst.octets(),
            };
            ip.fill_checksum(&[]);
            ip_bytes.copy_from_slice(ip.as_bytes());
        }
        (_, IpAddr::V6(src), IpAddr::V6(dst)) => {
            let mut ip = Ipv6Header::udp(src, dst, tos, ttl, udp_len as u16);
            let v = ip.ver_tc_flow.get();
            ip.ver_tc_flow.set(v | d.flow_label);
            ip_bytes.copy_from_slice(ip.as_bytes());
        }
        // The table never pairs a source of one family with a destination
        // of the other.
        _ => return Err(OutputCounter::SendError),
    }
    let (u, payload) = UdpHeader::mut_from_prefix(l4).map_err(|_| OutputCounter::TooBig)?;
    let old_port = u.dst_port.get();
    u.dst_port.set(out.dst_port);
    let c = u.checksum.get();
    if d.checksum_partial || (c == 0 && out.dst.is_ipv6()) {
        let full = match (src, out.dst) {
            (IpAddr::V4(s), IpAddr::V4(t)) => u.compute_checksum_v4(s.octets(), t.octets(), payload),
            (IpAddr::V6(s), IpAddr::V6(t)) => u.compute_checksum_v6(s.octets(), t.octets(), payload),
            _ => return Err(OutputCounter::SendError),
        };
        u.checksum.set(full);
    } else if c != 0 {
        // The pseudo-header holds both addresses; the header, the port.
        let c = checksum::update_sum(c, addr_sum(d.src) + addr_sum(d.dst), addr_sum(src) + addr_sum(out.dst));
        let c = checksum::update16(c, old_port, out.dst_port);
        u.checksum.set(if c == 0 { 0xffff } else { c });
    }
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{
        UDP_V4_HEADERS, UDP_V6_HEADERS, UdpFrameSpec, UdpFrameSpecV6, write_udp_v4_frame, write_udp_v6_frame,
    };
    use proptest::prelude::*;

    fn ip4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
        IpAddr::from([a, b, c, d])
    }

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
            vlan: None,
            dst: ip4(239, 10, 1, 1),
            dst_port: 6001,
            src: Some(ip4(10, 0, 1, 1)),
            ttl: Ttl::Decrement,
            dscp: Dscp::Keep,
            mtu: 1500,
        }
    }

    /// A frame that parses and whose UDP checksum is complete and right.
    fn valid(f: &[u8]) -> Datagram {
        let d = parse(f, f.len(), RxChecksum::Unknown, None).expect("parses");
        assert!(udp_checksum_ok(f, &d, RxChecksum::Unknown), "the UDP checksum is right");
        d
    }

    /// A wrong UDP checksum is not MCR's to judge (it does not read
    /// payloads), and its rewrite must not launder it into a right one: the
    /// receiver can still tell. (First found by the `frame` fuzz target.)
    #[test]
    fn a_wrong_udp_checksum_is_forwarded_and_stays_wrong() {
        let mut f = frame(&[0x63; 64], 9);
        f[40] ^= 0x55;
        let d = parse(&f, f.len(), RxChecksum::Unknown, None).expect("forwarded as it is");
        assert!(!udp_checksum_ok(&f, &d, RxChecksum::Unknown));
        let mut buf = [0u8; 256];
        let n = rewrite(&f, &d, &out(), &mut buf).expect("rewritten");
        let back = parse(&buf[..n], n, RxChecksum::Unknown, None).expect("parses");
        assert!(!udp_checksum_ok(&buf[..n], &back, RxChecksum::Unknown), "still wrong");
        assert!(
            !udp_checksum_ok(&buf[..n], &back, RxChecksum::Valid),
            "whatever the kernel said"
        );
    }

    #[test]
    fn parses_a_real_frame() {
        let f = frame(b"hello", 64);
        let d = parse(&f, f.len(), RxChecksum::Unknown, None).expect("valid");
        assert_eq!(
            (d.src, d.dst, d.src_port, d.dst_port, d.ttl),
            (ip4(10, 0, 0, 1), ip4(239, 1, 1, 1), 40000, 5001, 64)
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
            (with(&|b| b[12] = 0x86), WorkerCounter::NotIp),
            (with(&|b| b.truncate(20)), WorkerCounter::BadLength),
            (with(&|b| b[14] = 0x46), WorkerCounter::IpOptions),
            (with(&|b| b[14] = 0x44), WorkerCounter::BadLength),
            (with(&|b| b[17] = 0xff), WorkerCounter::BadLength),
            (with(&|b| b[24] ^= 1), WorkerCounter::BadIpChecksum),
        ];
        for (i, (b, want)) in cases.into_iter().enumerate() {
            assert_eq!(parse(&b, b.len(), RxChecksum::Unknown, None), Err(want), "case {i}");
        }
        assert_eq!(
            parse(&good[..40], good.len(), RxChecksum::Unknown, None),
            Err(WorkerCounter::Truncated)
        );
        // A wrong UDP checksum is the receiver's to judge.
        let bad_udp = with(&|b| {
            let n = b.len();
            b[n - 1] ^= 1
        });
        let d = parse(&bad_udp, bad_udp.len(), RxChecksum::Unknown, None).expect("forwarded");
        assert!(!udp_checksum_ok(&bad_udp, &d, RxChecksum::Unknown));
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
            parse(&frag, frag.len(), RxChecksum::Unknown, None),
            Err(WorkerCounter::Fragment)
        );
        let mut tcp = frame(b"abc", 64);
        Ipv4Header::mut_from_prefix(&mut tcp[14..]).expect("ip").0.protocol = 6;
        fix(&mut tcp);
        assert_eq!(
            parse(&tcp, tcp.len(), RxChecksum::Unknown, None),
            Err(WorkerCounter::NotUdp)
        );
    }

    fn tagged(f: &[u8], tci: u16) -> Vec<u8> {
        let mut t = f[..12].to_vec();
        t.extend_from_slice(&[0x81, 0x00]);
        t.extend_from_slice(&tci.to_be_bytes());
        t.extend_from_slice(&f[12..]);
        t
    }

    fn frame6(payload: &[u8], hop_limit: u8, dscp: u8) -> Vec<u8> {
        let mut f = vec![0u8; UDP_V6_HEADERS + payload.len()];
        f[UDP_V6_HEADERS..].copy_from_slice(payload);
        let spec = UdpFrameSpecV6 {
            dst_mac: [0x33, 0x33, 0, 1, 0, 5],
            src_mac: [2, 0, 0, 0, 0, 1],
            src: "[2001:db8::1]:40000".parse().expect("literal"),
            dst: "[ff3e::1:5]:5001".parse().expect("literal"),
            hop_limit,
            dscp,
        };
        write_udp_v6_frame(&mut f, &spec, payload.len()).expect("fits");
        f
    }

    fn out6() -> FrameRewrite {
        FrameRewrite {
            dst_mac: [0x33, 0x33, 0, 0x10, 0, 0x60],
            dst: "ff3e::10:6001".parse().expect("literal"),
            src: Some("2001:db8:1::1".parse().expect("literal")),
            ..out()
        }
    }

    #[test]
    fn a_tag_in_the_frame_or_taken_off_by_the_kernel_gives_the_vlan() {
        let f = frame(b"tagged", 64);
        let t = tagged(&f, 0xa000 | 100);
        let d = parse(&t, t.len(), RxChecksum::Unknown, None).expect("an inline tag");
        assert_eq!((d.vlan, d.pcp, d.ip_at), (100, 5, 18));
        assert_eq!(&t[d.payload_at..d.payload_at + d.payload_len], b"tagged");
        let d = parse(&f, f.len(), RxChecksum::Unknown, Some(0x2000 | 300)).expect("the ring's tag");
        assert_eq!((d.vlan, d.pcp, d.ip_at), (300, 1, 14));
        let d = parse(&f, f.len(), RxChecksum::Unknown, None).expect("untagged");
        assert_eq!(d.vlan, 0);
        // A second tag: 802.1ad QinQ.
        assert_eq!(
            parse(&t, t.len(), RxChecksum::Unknown, Some(200)),
            Err(WorkerCounter::VlanTagged)
        );
        let tt = tagged(&t, 7);
        assert_eq!(
            parse(&tt, tt.len(), RxChecksum::Unknown, None),
            Err(WorkerCounter::VlanTagged)
        );
        // An 802.1ad service tag, in the frame or taken off by the kernel.
        let mut s_tag = t.clone();
        s_tag[12..14].copy_from_slice(&[0x88, 0xa8]);
        assert_eq!(
            parse(&s_tag, s_tag.len(), RxChecksum::Unknown, None),
            Err(WorkerCounter::VlanTagged)
        );
        assert_eq!(kernel_tag(Some(100), Some(0x88a8)), Err(WorkerCounter::VlanTagged));
        assert_eq!(kernel_tag(Some(100), Some(0x8100)), Ok(Some(100)));
        assert_eq!(kernel_tag(Some(100), None), Ok(Some(100)));
        assert_eq!(kernel_tag(None, None), Ok(None));
        assert_eq!(
            parse(&t[..16], 16, RxChecksum::Unknown, None),
            Err(WorkerCounter::BadLength)
        );
    }

    #[test]
    fn an_ipv6_datagram_parses_with_and_without_extension_headers() {
        let f = frame6(b"six", 9, 46);
        let d = parse(&f, f.len(), RxChecksum::Unknown, None).expect("valid");
        assert_eq!(
            (d.src, d.dst, d.src_port, d.dst_port, d.ttl, d.tos >> 2),
            (
                "2001:db8::1".parse::<IpAddr>().expect("literal"),
                "ff3e::1:5".parse::<IpAddr>().expect("literal"),
                40000,
                5001,
                9,
                46
            )
        );
        assert_eq!(&f[d.payload_at..], b"six");
        // A hop-by-hop header (router alert) before UDP: passed over.
        let mut h = f[..54].to_vec();
        h[20] = 0;
        h.extend_from_slice(&[17, 0, 5, 2, 0, 0, 1, 0]);
        h.extend_from_slice(&f[54..]);
        let plen = u16::from_be_bytes([h[18], h[19]]) + 8;
        h[18..20].copy_from_slice(&plen.to_be_bytes());
        let d = parse(&h, h.len(), RxChecksum::Unknown, None).expect("hop-by-hop passed over");
        assert_eq!((d.udp_at, &h[d.payload_at..]), (62, &b"six"[..]));
        let mut bad = f.clone();
        let n = bad.len();
        bad[n - 1] ^= 1;
        let d = parse(&bad, n, RxChecksum::Unknown, None).expect("the payload is the receiver's to judge");
        assert!(!udp_checksum_ok(&bad, &d, RxChecksum::Unknown));
        let mut zero = f.clone();
        zero[60..62].copy_from_slice(&[0, 0]);
        assert_eq!(
            parse(&zero, n, RxChecksum::Unknown, None),
            Err(WorkerCounter::BadUdpChecksum),
            "IPv6 requires the UDP checksum"
        );
        let mut esp = f.clone();
        esp[20] = 50;
        assert_eq!(
            parse(&esp, n, RxChecksum::Unknown, None),
            Err(WorkerCounter::Ipv6Extension)
        );
        let mut icmp = f.clone();
        icmp[20] = 58;
        assert_eq!(parse(&icmp, n, RxChecksum::Unknown, None), Err(WorkerCounter::NotUdp));
        let mut frag = f[..54].to_vec();
        frag[20] = 44;
        frag.extend_from_slice(&[17, 0, 0, 1, 0, 0, 0, 9]);
        frag.extend_from_slice(&f[54..]);
        frag[18..20].copy_from_slice(&plen.to_be_bytes());
        assert_eq!(
            parse(&frag, frag.len(), RxChecksum::Unknown, None),
            Err(WorkerCounter::Fragment)
        );
        let mut long = f.clone();
        long[18..20].copy_from_slice(&2000u16.to_be_bytes());
        assert_eq!(
            parse(&long, n, RxChecksum::Unknown, None),
            Err(WorkerCounter::BadLength)
        );
        let mut v5 = f.clone();
        v5[14] = 0x56;
        assert_eq!(parse(&v5, n, RxChecksum::Unknown, None), Err(WorkerCounter::NotIp));
    }

    #[test]
    fn every_family_pair_translates_with_valid_checksums_and_the_same_payload() {
        let payload = b"the same bytes on every side";
        let f4 = frame(payload, 9);
        let f6 = frame6(payload, 9, 0);
        let out4 = out();
        let out6 = out6();
        for (f, o) in [(&f4, out4), (&f4, out6), (&f6, out4), (&f6, out6)] {
            let d = parse(f, f.len(), RxChecksum::Unknown, None).expect("valid");
            let mut buf = [0u8; 256];
            let n = rewrite(f, &d, &o, &mut buf).expect("sent");
            let back = valid(&buf[..n]);
            assert_eq!(
                (back.dst, back.dst_port, back.src_port, back.ttl),
                (o.dst, o.dst_port, 40000, 8)
            );
            assert_eq!(Some(back.src), o.src);
            assert_eq!(&buf[back.payload_at..n], payload);
            assert_eq!(&buf[..6], &o.dst_mac);
        }
    }

    #[test]
    fn an_ipv4_datagram_without_a_checksum_gets_one_as_ipv6() {
        let mut f = frame(b"no checksum", 9);
        f[40..42].copy_from_slice(&[0, 0]);
        let d = parse(&f, f.len(), RxChecksum::Unknown, None).expect("valid");
        let mut buf = [0u8; 256];
        let n = rewrite(&f, &d, &out6(), &mut buf).expect("sent");
        valid(&buf[..n]);
        let f6 = frame6(b"offloaded", 9, 0);
        let mut p = f6.clone();
        p[60..62].copy_from_slice(&[0x12, 0x34]);
        let d = parse(&p, p.len(), RxChecksum::NotReady, None).expect("not ready");
        for o in [out(), out6()] {
            let n = rewrite(&p, &d, &o, &mut buf).expect("sent");
            valid(&buf[..n]);
        }
    }

    #[test]
    fn dscp_is_set_or_kept_with_ecn_and_the_tag_is_added_changed_or_stripped() {
        let mut f = frame(b"marked", 9);
        // DSCP 10 (af11), ECN 01.
        f[15] = (10 << 2) | 1;
        Ipv4Header::mut_from_prefix(&mut f[14..])
            .expect("ip")
            .0
            .fill_checksum(&[]);
        let t = tagged(&f, 0x6000 | 100);
        let d = parse(&t, t.len(), RxChecksum::Unknown, None).expect("valid");
        let mut buf = [0u8; 256];
        let set = FrameRewrite {
            dscp: Dscp::Set(46),
            vlan: Some(200),
            ..out()
        };
        let n = rewrite(&t, &d, &set, &mut buf).expect("sent");
        let back = valid(&buf[..n]);
        assert_eq!((back.tos, back.vlan, back.pcp), ((46 << 2) | 1, 200, 3));
        assert_eq!(&buf[12..16], &[0x81, 0x00, 0x60, 200]);
        let n = rewrite(&t, &d, &out(), &mut buf).expect("sent");
        let back = valid(&buf[..n]);
        assert_eq!(
            (back.tos, back.vlan, &buf[12..14]),
            ((10 << 2) | 1, 0, &[0x08, 0x00][..])
        );
        let d6 = parse(&frame6(b"x", 9, 34), 63, RxChecksum::Unknown, None).expect("valid");
        let f6 = frame6(b"x", 9, 34);
        for (policy, want) in [(Dscp::Keep, 34), (Dscp::Set(0), 0), (Dscp::Set(46), 46)] {
            for o in [out(), out6()] {
                let n = rewrite(&f6, &d6, &FrameRewrite { dscp: policy, ..o }, &mut buf).expect("sent");
                let back = valid(&buf[..n]);
                assert_eq!(back.tos >> 2, want, "{policy:?} {:?}", o.dst);
            }
        }
    }

    #[test]
    fn a_udp_length_short_of_the_ip_payload_is_a_bad_length() {
        let mut f = frame(b"0123456789", 64);
        // UDP length 8 + 5, IP payload 8 + 10.
        let at = 14 + 20 + 4;
        f[at..at + 2].copy_from_slice(&13u16.to_be_bytes());
        assert_eq!(
            parse(&f, f.len(), RxChecksum::Valid, None),
            Err(WorkerCounter::BadLength)
        );
    }

    #[test]
    fn rewrite_changes_what_it_should_and_keeps_checksums_valid() {
        let f = frame(b"payload bytes", 9);
        let d = parse(&f, f.len(), RxChecksum::Unknown, None).expect("valid");
        let mut buf = [0u8; 2048];
        let n = rewrite(&f, &d, &out(), &mut buf).expect("sent");
        let o = &buf[..n];
        let back =
            parse(o, o.len(), RxChecksum::Unknown, None).expect("the rewritten frame is valid, checksums included");
        assert_eq!(
            (back.dst, back.dst_port, back.src, back.src_port, back.ttl),
            (ip4(239, 10, 1, 1), 6001, ip4(10, 0, 1, 1), 40000, 8)
        );
        assert_eq!(&o[0..6], &[1, 0, 0x5e, 10, 1, 1]);
        assert_eq!(&o[6..12], &[2, 0, 0, 0, 0, 9]);
        assert_eq!(&o[back.payload_at..], b"payload bytes");
        let mut keep = out();
        keep.src = None;
        keep.ttl = Ttl::Fixed(3);
        let n = rewrite(&f, &d, &keep, &mut buf).expect("sent");
        let back = valid(&buf[..n]);
        assert_eq!((back.src, back.ttl), (ip4(10, 0, 0, 1), 3));
    }

    #[test]
    fn ttl_and_mtu_limits_are_drops_of_the_output() {
        let f = frame(&[0u8; 100], 1);
        let d = parse(&f, f.len(), RxChecksum::Unknown, None).expect("valid");
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
        let d = parse(&f, f.len(), RxChecksum::NotReady, None).expect("trusted as not ready");
        assert!(!udp_checksum_ok(&f, &d, RxChecksum::Unknown));
        assert!(
            !udp_checksum_ok(&f, &d, RxChecksum::NotReady),
            "not the pseudo-header's sum either"
        );
        let mut buf = [0u8; 2048];
        let n = rewrite(&f, &d, &out(), &mut buf).expect("sent");
        valid(&buf[..n]);
    }

    #[test]
    fn a_zero_udp_checksum_stays_zero() {
        let mut f = frame(b"no checksum", 9);
        let at = 14 + 20 + 6;
        f[at] = 0;
        f[at + 1] = 0;
        let d = parse(&f, f.len(), RxChecksum::Unknown, None).expect("no checksum is valid");
        let mut buf = [0u8; 2048];
        let n = rewrite(&f, &d, &out(), &mut buf).expect("sent");
        assert_eq!(&buf[at..at + 2], &[0, 0]);
        valid(&buf[..n]);
    }

    proptest! {
        #[test]
        fn any_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200), extra in 0usize..10, verified: bool) {
            let c = if verified { RxChecksum::Valid } else { RxChecksum::Unknown };
            let _ = parse(&bytes, bytes.len() + extra % 2, c, None);
        }

        #[test]
        fn any_bytes_after_a_valid_ethernet_and_ip_start_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..100)) {
            let mut f = frame(b"x", 9)[..34].to_vec();
            f.extend_from_slice(&tail);
            if let Ok(d) = parse(&f, f.len(), RxChecksum::Unknown, None) {
                let mut buf = [0u8; 256];
                let _ = rewrite(&f, &d, &out(), &mut buf);
            }
        }

        #[test]
        fn any_family_pair_vlan_and_dscp_rewrite_to_a_valid_frame_of_the_same_payload(
            payload in proptest::collection::vec(any::<u8>(), 0..1400),
            in6: bool, to6: bool, dscp in proptest::option::of(0u8..64), vlan in proptest::option::of(1u16..4095),
            group: u16, port: u16, tag in proptest::option::of(any::<u16>()),
        ) {
            let f = if in6 { frame6(&payload, 9, 10) } else { frame(&payload, 9) };
            let d = parse(&f, f.len(), RxChecksum::Unknown, tag).expect("valid");
            let base = if to6 { out6() } else { out() };
            let dst: IpAddr = if to6 {
                std::net::Ipv6Addr::new(0xff3e, 0, 0, 0, 0, 0, 1, group).into()
            } else {
                ip4(239, 10, (group >> 8) as u8, group as u8)
            };
            let o = FrameRewrite { dst, dst_port: port, vlan, dscp: dscp.map_or(Dscp::Keep, Dscp::Set), ..base };
            let mut buf = [0u8; 1600];
            let n = rewrite(&f, &d, &o, &mut buf).expect("fits");
            let back = valid(&buf[..n]);
            prop_assert_eq!((back.dst, back.dst_port, back.vlan), (dst, port, vlan.unwrap_or(0)));
            prop_assert_eq!(back.tos >> 2, dscp.unwrap_or(d.tos >> 2));
            prop_assert_eq!(back.ttl, 8);
            prop_assert_eq!(&buf[back.payload_at..n], &payload[..]);
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
            let d = parse(&f, f.len(), RxChecksum::Unknown, None).expect("valid");
            let o = FrameRewrite {
                dst: dst.into(), dst_port: port, src: new_src.map(Into::into),
                ttl: fixed.filter(|&t| t > 0).map_or(Ttl::Decrement, Ttl::Fixed),
                ..out()
            };
            let mut buf = [0u8; 1600];
            let n = rewrite(&f, &d, &o, &mut buf).expect("fits");
            let back = valid(&buf[..n]);
            prop_assert_eq!(back.dst, IpAddr::from(dst));
            prop_assert_eq!(back.dst_port, port);
            prop_assert_eq!(back.src, new_src.map_or(IpAddr::from(src), IpAddr::from));
            prop_assert_eq!(&buf[back.payload_at..n], &payload[..]);
        }
    }
}
