//! Building a whole Ethernet + IPv4 (or IPv6) + UDP frame around a payload.

use std::net::{SocketAddrV4, SocketAddrV6};

use zerocopy::network_endian::U16;
use zerocopy::{FromBytes, IntoBytes};

use super::ethernet::{self, ETHERTYPE_IPV4, ETHERTYPE_IPV6, EthernetHeader, Mac};
use super::ipv4::{self, FLAG_DF, Ipv4Header, PROTO_UDP};
use super::ipv6::{self, Ipv6Header};
use super::udp::{self, UdpHeader};

/// Bytes of headers in front of the payload: Ethernet, IPv4 (no options),
/// UDP.
pub const UDP_V4_HEADERS: usize = ethernet::HEADER_LEN + ipv4::HEADER_LEN + udp::HEADER_LEN;

/// The headers of a UDP-over-IPv4 Ethernet frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpFrameSpec {
    /// Destination MAC (for a group, [`ethernet::multicast_mac`]).
    pub dst_mac: Mac,
    /// Source MAC: the sending interface's.
    pub src_mac: Mac,
    /// Source address and port.
    pub src: SocketAddrV4,
    /// Destination address and port.
    pub dst: SocketAddrV4,
    /// Time to live.
    pub ttl: u8,
    /// DSCP (0-63).
    pub dscp: u8,
    /// IPv4 identification.
    pub ident: u16,
}

/// Why a frame could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The buffer cannot hold headers and payload.
    #[error("a frame of {needed} bytes does not fit a buffer of {have}")]
    TooSmall {
        /// Bytes needed.
        needed: usize,
        /// Bytes available.
        have: usize,
    },
    /// More than an IPv4 datagram can carry.
    #[error("a UDP payload of {0} bytes is more than IPv4 carries (65507)")]
    TooLong(usize),
}

/// Writes the headers of a UDP/IPv4 frame into `frame[..UDP_V4_HEADERS]`
/// around a payload of `payload_len` bytes that is already in place at
/// `frame[UDP_V4_HEADERS..]`, with both checksums computed. Returns the
/// frame's length.
pub fn write_udp_v4_frame(frame: &mut [u8], spec: &UdpFrameSpec, payload_len: usize) -> Result<usize, FrameError> {
    if payload_len > 65507 {
        return Err(FrameError::TooLong(payload_len));
    }
    let total = UDP_V4_HEADERS + payload_len;
    if frame.len() < total {
        return Err(FrameError::TooSmall {
            needed: total,
            have: frame.len(),
        });
    }
    let (headers, rest) = frame.split_at_mut(UDP_V4_HEADERS);
    let payload = &rest[..payload_len];
    let eth = EthernetHeader {
        dst: spec.dst_mac,
        src: spec.src_mac,
        ethertype: U16::new(ETHERTYPE_IPV4),
    };
    let mut ip = Ipv4Header {
        version_ihl: 0x45,
        dscp_ecn: spec.dscp << 2,
        // Fits: payload_len was checked against 65507 above.
        total_len: U16::new((ipv4::HEADER_LEN + udp::HEADER_LEN + payload_len) as u16),
        ident: U16::new(spec.ident),
        flags_fragment: U16::new(FLAG_DF),
        ttl: spec.ttl,
        protocol: PROTO_UDP,
        checksum: U16::new(0),
        src: spec.src.ip().octets(),
        dst: spec.dst.ip().octets(),
    };
    ip.fill_checksum(&[]);
    let mut u = UdpHeader {
        src_port: U16::new(spec.src.port()),
        dst_port: U16::new(spec.dst.port()),
        len: U16::new((udp::HEADER_LEN + payload_len) as u16),
        checksum: U16::new(0),
    };
    u.checksum.set(u.compute_checksum_v4(ip.src, ip.dst, payload));
    let (e, h) = headers.split_at_mut(ethernet::HEADER_LEN);
    let (i, d) = h.split_at_mut(ipv4::HEADER_LEN);
    eth.write_to(e)
        .map_err(|_| FrameError::TooSmall { needed: total, have: 0 })?;
    ip.write_to(i)
        .map_err(|_| FrameError::TooSmall { needed: total, have: 0 })?;
    u.write_to(d)
        .map_err(|_| FrameError::TooSmall { needed: total, have: 0 })?;
    debug_assert!(Ipv4Header::ref_from_bytes(i).is_ok_and(|h| h.checksum_ok(&[])));
    Ok(total)
}

/// Bytes of headers in front of the payload of a UDP/IPv6 frame: Ethernet,
/// IPv6 (no extension headers), UDP.
pub const UDP_V6_HEADERS: usize = ethernet::HEADER_LEN + ipv6::HEADER_LEN + udp::HEADER_LEN;

/// The headers of a UDP-over-IPv6 Ethernet frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpFrameSpecV6 {
    /// Destination MAC (for a group, [`ethernet::multicast_mac`]).
    pub dst_mac: Mac,
    /// Source MAC.
    pub src_mac: Mac,
    /// Source address and port.
    pub src: SocketAddrV6,
    /// Destination address and port.
    pub dst: SocketAddrV6,
    /// Hop limit.
    pub hop_limit: u8,
    /// DSCP (0-63).
    pub dscp: u8,
}

/// As [`write_udp_v4_frame`], for IPv6: the headers go into
/// `frame[..UDP_V6_HEADERS]`, the payload is already at
/// `frame[UDP_V6_HEADERS..]`.
pub fn write_udp_v6_frame(frame: &mut [u8], spec: &UdpFrameSpecV6, payload_len: usize) -> Result<usize, FrameError> {
    if payload_len > 65527 {
        return Err(FrameError::TooLong(payload_len));
    }
    let total = UDP_V6_HEADERS + payload_len;
    if frame.len() < total {
        return Err(FrameError::TooSmall {
            needed: total,
            have: frame.len(),
        });
    }
    let (headers, rest) = frame.split_at_mut(UDP_V6_HEADERS);
    let payload = &rest[..payload_len];
    let udp_len = (udp::HEADER_LEN + payload_len) as u16;
    let eth = EthernetHeader {
        dst: spec.dst_mac,
        src: spec.src_mac,
        ethertype: U16::new(ETHERTYPE_IPV6),
    };
    let ip = Ipv6Header::udp(*spec.src.ip(), *spec.dst.ip(), spec.dscp << 2, spec.hop_limit, udp_len);
    let mut u = UdpHeader {
        src_port: U16::new(spec.src.port()),
        dst_port: U16::new(spec.dst.port()),
        len: U16::new(udp_len),
        checksum: U16::new(0),
    };
    u.checksum.set(u.compute_checksum_v6(ip.src, ip.dst, payload));
    let (e, h) = headers.split_at_mut(ethernet::HEADER_LEN);
    let (i, d) = h.split_at_mut(ipv6::HEADER_LEN);
    e.copy_from_slice(eth.as_bytes());
    i.copy_from_slice(ip.as_bytes());
    d.copy_from_slice(u.as_bytes());
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_a_frame_that_parses_back_with_valid_checksums() {
        let payload = b"0123456789abcdef-payload";
        let mut frame = vec![0u8; 200];
        frame[UDP_V4_HEADERS..UDP_V4_HEADERS + payload.len()].copy_from_slice(payload);
        let spec = UdpFrameSpec {
            dst_mac: ethernet::multicast_mac("239.1.1.1".parse().expect("literal")).expect("multicast"),
            src_mac: [2, 0, 0, 0, 0, 1],
            src: "10.0.0.1:40000".parse().expect("literal"),
            dst: "239.1.1.1:5001".parse().expect("literal"),
            ttl: 7,
            dscp: 10,
            ident: 99,
        };
        let n = write_udp_v4_frame(&mut frame, &spec, payload.len()).expect("fits");
        assert_eq!(n, 42 + payload.len());
        let (eth, rest) = EthernetHeader::ref_from_prefix(&frame[..n]).expect("eth");
        assert_eq!(eth.dst, [1, 0, 0x5e, 1, 1, 1]);
        assert_eq!(eth.ethertype.get(), ETHERTYPE_IPV4);
        let (ip, rest) = Ipv4Header::ref_from_prefix(rest).expect("ip");
        assert!(ip.checksum_ok(&[]));
        assert_eq!(
            (ip.ttl, ip.dscp(), ip.total_len.get() as usize),
            (7, 10, 28 + payload.len())
        );
        let (u, data) = UdpHeader::ref_from_prefix(rest).expect("udp");
        assert_eq!(data, payload);
        assert_eq!((u.src_port.get(), u.dst_port.get()), (40000, 5001));
        assert!(u.checksum.get() != 0 && u.checksum_ok_v4(ip.src, ip.dst, data));
    }

    proptest::proptest! {
        #[test]
        fn any_frame_built_parses_back_with_valid_checksums(
            payload in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..1500),
            src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, ttl: u8, dscp in 0u8..64, ident: u16,
        ) {
            let mut frame = vec![0u8; UDP_V4_HEADERS + payload.len()];
            frame[UDP_V4_HEADERS..].copy_from_slice(&payload);
            let spec = UdpFrameSpec {
                dst_mac: [1, 2, 3, 4, 5, 6],
                src_mac: [6, 5, 4, 3, 2, 1],
                src: std::net::SocketAddrV4::new(src.into(), sport),
                dst: std::net::SocketAddrV4::new(dst.into(), dport),
                ttl, dscp, ident,
            };
            let n = write_udp_v4_frame(&mut frame, &spec, payload.len()).expect("fits");
            proptest::prop_assert_eq!(n, frame.len());
            let (_, rest) = EthernetHeader::ref_from_prefix(&frame).expect("eth");
            let (ip, rest) = Ipv4Header::ref_from_prefix(rest).expect("ip");
            proptest::prop_assert!(ip.checksum_ok(&[]));
            proptest::prop_assert_eq!((ip.src, ip.dst, ip.ttl, ip.dscp()), (src, dst, ttl, dscp));
            let (u, data) = UdpHeader::ref_from_prefix(rest).expect("udp");
            proptest::prop_assert_eq!(data, &payload[..]);
            proptest::prop_assert!(u.checksum.get() != 0 && u.checksum_ok_v4(ip.src, ip.dst, data));
            proptest::prop_assert_eq!((u.src_port.get(), u.dst_port.get()), (sport, dport));
        }
    }

    #[test]
    fn refuses_what_does_not_fit() {
        let spec = UdpFrameSpec {
            dst_mac: [0; 6],
            src_mac: [0; 6],
            src: "10.0.0.1:1".parse().expect("literal"),
            dst: "10.0.0.2:2".parse().expect("literal"),
            ttl: 1,
            dscp: 0,
            ident: 0,
        };
        let mut small = [0u8; 50];
        assert_eq!(
            write_udp_v4_frame(&mut small, &spec, 10),
            Err(FrameError::TooSmall { needed: 52, have: 50 })
        );
        assert_eq!(
            write_udp_v4_frame(&mut small, &spec, 70000),
            Err(FrameError::TooLong(70000))
        );
    }
}
