//! IPv4 headers.

use std::net::Ipv4Addr;

use zerocopy::network_endian::U16;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::checksum;

/// Length of an IPv4 header without options.
pub const HEADER_LEN: usize = 20;
/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;
/// IP protocol number of IGMP.
pub const PROTO_IGMP: u8 = 2;
/// The "don't fragment" flag in `flags_fragment`.
pub const FLAG_DF: u16 = 0x4000;
/// The "more fragments" flag in `flags_fragment`.
pub const FLAG_MF: u16 = 0x2000;

/// An IPv4 header without options (options follow it when `ihl > 5`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct Ipv4Header {
    /// Version (4 bits) and header length in 32-bit words (4 bits).
    pub version_ihl: u8,
    /// DSCP (6 bits) and ECN (2 bits).
    pub dscp_ecn: u8,
    /// Length of the whole datagram in bytes.
    pub total_len: U16,
    /// Identification, for reassembly.
    pub ident: U16,
    /// Flags (3 bits) and fragment offset in 8-byte units (13 bits).
    pub flags_fragment: U16,
    /// Time to live.
    pub ttl: u8,
    /// The protocol that follows.
    pub protocol: u8,
    /// Header checksum.
    pub checksum: U16,
    /// Source address.
    pub src: [u8; 4],
    /// Destination address.
    pub dst: [u8; 4],
}

impl Ipv4Header {
    /// The version field (4 for IPv4).
    pub fn version(&self) -> u8 {
        self.version_ihl >> 4
    }

    /// The header's length in bytes, options included.
    pub fn header_len(&self) -> usize {
        usize::from(self.version_ihl & 0x0f) * 4
    }

    /// True if this is a fragment (of any position) of a larger datagram.
    pub fn is_fragment(&self) -> bool {
        self.flags_fragment.get() & (FLAG_MF | 0x1fff) != 0
    }

    /// The source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.src)
    }

    /// The destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.dst)
    }

    /// The DSCP (upper six bits of the former TOS byte).
    pub fn dscp(&self) -> u8 {
        self.dscp_ecn >> 2
    }

    /// Computes and stores the header checksum. `options` are the bytes of
    /// any options that follow the fixed header (empty without).
    pub fn fill_checksum(&mut self, options: &[u8]) {
        self.checksum.set(0);
        let acc = checksum::add(checksum::add(0, self.as_bytes()), options);
        self.checksum.set(!checksum::fold(acc));
    }

    /// True if the header checksum (over the fixed header and `options`) is
    /// valid.
    pub fn checksum_ok(&self, options: &[u8]) -> bool {
        checksum::fold(checksum::add(checksum::add(0, self.as_bytes()), options)) == 0xffff
    }

    /// Sets the TTL and updates the checksum incrementally.
    pub fn set_ttl(&mut self, ttl: u8) {
        let old = u16::from_be_bytes([self.ttl, self.protocol]);
        self.ttl = ttl;
        let new = u16::from_be_bytes([self.ttl, self.protocol]);
        self.checksum.set(checksum::update16(self.checksum.get(), old, new));
    }

    /// Sets the DSCP (keeping ECN) and updates the checksum incrementally.
    pub fn set_dscp(&mut self, dscp: u8) {
        let old = u16::from_be_bytes([self.version_ihl, self.dscp_ecn]);
        self.dscp_ecn = (dscp << 2) | (self.dscp_ecn & 0x03);
        let new = u16::from_be_bytes([self.version_ihl, self.dscp_ecn]);
        self.checksum.set(checksum::update16(self.checksum.get(), old, new));
    }

    /// Sets the source address and updates the checksum incrementally.
    pub fn set_src(&mut self, src: Ipv4Addr) {
        let new = src.octets();
        self.checksum
            .set(checksum::update32(self.checksum.get(), self.src, new));
        self.src = new;
    }

    /// Sets the destination address and updates the checksum incrementally.
    pub fn set_dst(&mut self, dst: Ipv4Addr) {
        let new = dst.octets();
        self.checksum
            .set(checksum::update32(self.checksum.get(), self.dst, new));
        self.dst = new;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A UDP datagram from 192.168.0.1 to 192.168.0.199, TTL 64, DF.
    const HDR: [u8; 20] = [
        0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8,
        0x00, 0xc7,
    ];

    #[test]
    fn fields_of_a_real_header() {
        let h = Ipv4Header::ref_from_bytes(&HDR).expect("20 bytes");
        assert_eq!((h.version(), h.header_len(), h.total_len.get()), (4, 20, 0x73));
        assert_eq!((h.ttl, h.protocol), (64, PROTO_UDP));
        assert_eq!(h.src_addr(), Ipv4Addr::new(192, 168, 0, 1));
        assert_eq!(h.dst_addr(), Ipv4Addr::new(192, 168, 0, 199));
        assert!(!h.is_fragment());
        assert!(h.checksum_ok(&[]));
    }

    #[test]
    fn incremental_setters_keep_the_checksum_valid() {
        let mut b = HDR;
        let h = Ipv4Header::mut_from_bytes(&mut b).expect("20 bytes");
        h.set_ttl(3);
        h.set_dscp(46);
        h.set_src(Ipv4Addr::new(10, 0, 1, 1));
        h.set_dst(Ipv4Addr::new(239, 10, 1, 1));
        assert!(h.checksum_ok(&[]));
        let recomputed = {
            let mut c = *h;
            c.fill_checksum(&[]);
            c.checksum.get()
        };
        assert_eq!(h.checksum.get(), recomputed);
        assert_eq!((h.ttl, h.dscp(), h.dscp_ecn & 3), (3, 46, 0));
    }

    #[test]
    fn fragments_are_recognised() {
        let mut b = HDR;
        let h = Ipv4Header::mut_from_bytes(&mut b).expect("20 bytes");
        h.flags_fragment.set(FLAG_MF);
        assert!(h.is_fragment(), "first fragment");
        h.flags_fragment.set(185);
        assert!(h.is_fragment(), "last fragment");
        h.flags_fragment.set(FLAG_DF);
        assert!(!h.is_fragment());
    }
}
