//! UDP headers and their checksum over the IPv4 pseudo-header.

use zerocopy::network_endian::U16;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::checksum;
use super::ipv4::PROTO_UDP;

/// Length of a UDP header.
pub const HEADER_LEN: usize = 8;

/// A UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct UdpHeader {
    /// Source port.
    pub src_port: U16,
    /// Destination port.
    pub dst_port: U16,
    /// Length of header and payload in bytes.
    pub len: U16,
    /// Checksum over pseudo-header, header and payload; 0 means none (IPv4).
    pub checksum: U16,
}

impl UdpHeader {
    /// The checksum of this header (with its checksum field taken as zero)
    /// and `payload`, sent from `src` to `dst` over IPv4. Never returns 0: a
    /// computed 0 is sent as 0xffff (RFC 768).
    pub fn compute_checksum_v4(&self, src: [u8; 4], dst: [u8; 4], payload: &[u8]) -> u16 {
        let mut h = *self;
        h.checksum.set(0);
        let acc = checksum::pseudo_header_v4(src, dst, PROTO_UDP, self.len.get());
        let acc = checksum::add(checksum::add(acc, h.as_bytes()), payload);
        match !checksum::fold(acc) {
            0 => 0xffff,
            c => c,
        }
    }

    /// The checksum of this header (its checksum field taken as zero) and
    /// `payload`, sent from `src` to `dst` over IPv6. Never 0.
    pub fn compute_checksum_v6(&self, src: [u8; 16], dst: [u8; 16], payload: &[u8]) -> u16 {
        let mut h = *self;
        h.checksum.set(0);
        let acc = checksum::pseudo_header_v6(src, dst, PROTO_UDP, u32::from(self.len.get()));
        match !checksum::fold(checksum::add(checksum::add(acc, h.as_bytes()), payload)) {
            0 => 0xffff,
            c => c,
        }
    }

    /// True if the checksum is valid for `payload` between `src` and `dst`
    /// over IPv6, where it is mandatory: 0 is wrong (RFC 8200).
    pub fn checksum_ok_v6(&self, src: [u8; 16], dst: [u8; 16], payload: &[u8]) -> bool {
        if self.checksum.get() == 0 {
            return false;
        }
        let acc = checksum::pseudo_header_v6(src, dst, PROTO_UDP, u32::from(self.len.get()));
        checksum::fold(checksum::add(checksum::add(acc, self.as_bytes()), payload)) == 0xffff
    }

    /// True if the checksum is absent (0) or valid for `payload` between
    /// `src` and `dst`.
    pub fn checksum_ok_v4(&self, src: [u8; 4], dst: [u8; 4], payload: &[u8]) -> bool {
        if self.checksum.get() == 0 {
            return true;
        }
        let acc = checksum::pseudo_header_v4(src, dst, PROTO_UDP, self.len.get());
        checksum::fold(checksum::add(checksum::add(acc, self.as_bytes()), payload)) == 0xffff
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn computed_checksum_verifies_and_a_flip_does_not() {
        let payload = b"hello, multicast";
        let mut h = UdpHeader {
            src_port: U16::new(40000),
            dst_port: U16::new(5001),
            len: U16::new((HEADER_LEN + payload.len()) as u16),
            checksum: U16::new(0),
        };
        let (src, dst) = ([10, 0, 0, 1], [239, 1, 1, 1]);
        h.checksum.set(h.compute_checksum_v4(src, dst, payload));
        assert!(h.checksum_ok_v4(src, dst, payload));
        assert!(!h.checksum_ok_v4(src, [239, 1, 1, 2], payload));
        let mut bad = *payload;
        bad[3] ^= 0x10;
        assert!(!h.checksum_ok_v4(src, dst, &bad));
    }

    #[test]
    fn zero_means_no_checksum() {
        let h = UdpHeader {
            src_port: U16::new(1),
            dst_port: U16::new(2),
            len: U16::new(9),
            checksum: U16::new(0),
        };
        assert!(h.checksum_ok_v4([1, 2, 3, 4], [5, 6, 7, 8], b"x"));
    }
}
