//! IPv6 headers, and the walk over the extension headers that may stand
//! between the fixed header and UDP.

use std::net::Ipv6Addr;

use zerocopy::network_endian::{U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Length of the fixed IPv6 header.
pub const HEADER_LEN: usize = 40;
/// Next-header value of UDP.
pub const NEXT_UDP: u8 = 17;
/// Hop-by-hop options.
pub const NEXT_HOP_BY_HOP: u8 = 0;
/// Routing header.
pub const NEXT_ROUTING: u8 = 43;
/// Fragment header.
pub const NEXT_FRAGMENT: u8 = 44;
/// Destination options.
pub const NEXT_DEST_OPTS: u8 = 60;
/// Encapsulating security payload.
pub const NEXT_ESP: u8 = 50;
/// Authentication header.
pub const NEXT_AH: u8 = 51;
/// Mobility header.
pub const NEXT_MOBILITY: u8 = 135;
/// Host identity protocol.
pub const NEXT_HIP: u8 = 139;
/// Shim6.
pub const NEXT_SHIM6: u8 = 140;
/// The most extension headers walked before UDP: more is refused (and
/// counted), never looped over.
pub const MAX_EXTENSIONS: usize = 8;

/// The fixed IPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct Ipv6Header {
    /// Version (4 bits), traffic class (8 bits), flow label (20 bits).
    pub ver_tc_flow: U32,
    /// Length of what follows this header, extension headers included.
    pub payload_len: U16,
    /// The header that follows.
    pub next_header: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Source address.
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
}

impl Ipv6Header {
    /// A header for `payload_len` bytes of UDP.
    pub fn udp(src: Ipv6Addr, dst: Ipv6Addr, traffic_class: u8, hop_limit: u8, payload_len: u16) -> Self {
        Ipv6Header {
            ver_tc_flow: U32::new((6 << 28) | (u32::from(traffic_class) << 20)),
            payload_len: U16::new(payload_len),
            next_header: NEXT_UDP,
            hop_limit,
            src: src.octets(),
            dst: dst.octets(),
        }
    }

    /// The version field (6 for IPv6).
    pub fn version(&self) -> u8 {
        (self.ver_tc_flow.get() >> 28) as u8
    }

    /// The traffic class: DSCP (6 bits) and ECN (2 bits).
    pub fn traffic_class(&self) -> u8 {
        (self.ver_tc_flow.get() >> 20) as u8
    }

    /// Sets the traffic class (no header checksum to update in IPv6).
    pub fn set_traffic_class(&mut self, tc: u8) {
        let v = self.ver_tc_flow.get();
        self.ver_tc_flow.set((v & 0xf00f_ffff) | (u32::from(tc) << 20));
    }

    /// The flow label.
    pub fn flow_label(&self) -> u32 {
        self.ver_tc_flow.get() & 0x000f_ffff
    }

    /// The source address.
    pub fn src_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.src)
    }

    /// The destination address.
    pub fn dst_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.dst)
    }
}

/// Where the walk over extension headers ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upper {
    /// UDP, at this offset from the start of the fixed header.
    Udp(usize),
    /// A fragment (not the whole datagram).
    Fragment,
    /// An extension header MCR does not pass over: ESP, AH, a routing
    /// header with segments left, mobility, HIP, shim6, or more than
    /// [`MAX_EXTENSIONS`].
    Unsupported(u8),
    /// A transport other than UDP (ICMPv6, TCP, no next header...).
    Other(u8),
    /// The headers run past the datagram.
    Short,
}

/// Walks the extension headers of the datagram `ip` (fixed header first,
/// cut to the datagram's length) to its upper-layer header. Hop-by-hop
/// and destination options, a routing header with no segments left, and
/// an atomic fragment header (offset 0, no more fragments, RFC 6946) are
/// passed over.
pub fn find_upper(ip: &[u8], first: u8) -> Upper {
    let mut next = first;
    let mut at = HEADER_LEN;
    for _ in 0..=MAX_EXTENSIONS {
        let h = match ip.get(at..at + 8) {
            Some(h) => h,
            None if next == NEXT_UDP => return Upper::Short,
            None if is_extension(next) => return Upper::Short,
            None => return Upper::Other(next),
        };
        match next {
            NEXT_UDP => return Upper::Udp(at),
            NEXT_HOP_BY_HOP | NEXT_DEST_OPTS => at += (usize::from(h[1]) + 1) * 8,
            NEXT_ROUTING if h[3] == 0 => at += (usize::from(h[1]) + 1) * 8,
            NEXT_FRAGMENT => {
                let offset_flags = u16::from_be_bytes([h[2], h[3]]);
                if offset_flags & 0xfff9 != 0 {
                    return Upper::Fragment;
                }
                at += 8;
            }
            n if is_extension(n) => return Upper::Unsupported(n),
            n => return Upper::Other(n),
        }
        next = h[0];
    }
    Upper::Unsupported(next)
}

/// True for the next-header values that are extension headers (RFC 7045)
/// rather than a transport.
pub fn is_extension(n: u8) -> bool {
    matches!(
        n,
        NEXT_HOP_BY_HOP
            | NEXT_ROUTING
            | NEXT_FRAGMENT
            | NEXT_DEST_OPTS
            | NEXT_ESP
            | NEXT_AH
            | NEXT_MOBILITY
            | NEXT_HIP
            | NEXT_SHIM6
            | 253
            | 254
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn datagram(exts: &[(u8, Vec<u8>)], upper: u8) -> (Vec<u8>, u8) {
        // Each extension: (its own type, its bytes after the next-header
        // byte); chained so that each names the next.
        let mut v = vec![0u8; HEADER_LEN];
        let first = exts.first().map_or(upper, |e| e.0);
        for (i, (_, body)) in exts.iter().enumerate() {
            let next = exts.get(i + 1).map_or(upper, |e| e.0);
            v.push(next);
            v.extend_from_slice(body);
        }
        v.extend_from_slice(&[0u8; 8]);
        (v, first)
    }

    #[test]
    fn options_routing_and_atomic_fragments_are_passed_over() {
        let opts = |n: u8| {
            let mut b = vec![n];
            b.resize(7 + 8 * usize::from(n), 1);
            b
        };
        let (d, first) = datagram(
            &[
                (NEXT_HOP_BY_HOP, opts(0)),
                (NEXT_DEST_OPTS, opts(1)),
                (NEXT_ROUTING, vec![0, 4, 0, 0, 0, 0, 0]),
                (NEXT_FRAGMENT, vec![0, 0, 0, 0, 0, 0, 7]),
            ],
            NEXT_UDP,
        );
        assert_eq!(find_upper(&d, first), Upper::Udp(HEADER_LEN + 8 + 16 + 8 + 8));
        assert_eq!(find_upper(&d[..HEADER_LEN + 8], NEXT_UDP), Upper::Udp(HEADER_LEN));
    }

    #[test]
    fn what_cannot_be_passed_over_is_named() {
        let (d, f) = datagram(&[(NEXT_FRAGMENT, vec![0, 0, 0x08, 0, 0, 0, 1])], NEXT_UDP);
        assert_eq!(find_upper(&d, f), Upper::Fragment);
        let (d, f) = datagram(&[(NEXT_FRAGMENT, vec![0, 0, 0x01, 0, 0, 0, 1])], NEXT_UDP);
        assert_eq!(find_upper(&d, f), Upper::Fragment, "more fragments");
        let (d, f) = datagram(&[(NEXT_ROUTING, vec![0, 4, 2, 0, 0, 0, 0])], NEXT_UDP);
        assert_eq!(find_upper(&d, f), Upper::Unsupported(NEXT_ROUTING), "segments left");
        let (d, f) = datagram(&[(NEXT_AH, vec![1; 7])], NEXT_UDP);
        assert_eq!(find_upper(&d, f), Upper::Unsupported(NEXT_AH));
        let (d, f) = datagram(&[], 58);
        assert_eq!(find_upper(&d, f), Upper::Other(58));
        let many: Vec<(u8, Vec<u8>)> = (0..=MAX_EXTENSIONS).map(|_| (NEXT_DEST_OPTS, vec![0; 7])).collect();
        let (d, f) = datagram(&many, NEXT_UDP);
        assert_eq!(find_upper(&d, f), Upper::Unsupported(NEXT_UDP));
        let (d, f) = datagram(&[(NEXT_DEST_OPTS, vec![200, 0, 0, 0, 0, 0, 0])], NEXT_UDP);
        assert_eq!(find_upper(&d, f), Upper::Short, "an option length past the end");
    }

    #[test]
    fn traffic_class_and_flow_label_share_a_word() {
        let mut h = Ipv6Header::udp(Ipv6Addr::LOCALHOST, Ipv6Addr::LOCALHOST, 0xb8, 9, 20);
        h.ver_tc_flow.set(h.ver_tc_flow.get() | 0x12345);
        assert_eq!((h.version(), h.traffic_class(), h.flow_label()), (6, 0xb8, 0x12345));
        h.set_traffic_class(0x03);
        assert_eq!((h.version(), h.traffic_class(), h.flow_label()), (6, 0x03, 0x12345));
    }
}
