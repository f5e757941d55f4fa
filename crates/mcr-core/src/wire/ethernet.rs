//! Ethernet II headers, 802.1Q tags, and multicast MAC addresses.

use std::net::IpAddr;

use zerocopy::network_endian::U16;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// EtherType of an 802.1Q VLAN tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// EtherType of an 802.1ad (QinQ) service tag.
pub const ETHERTYPE_QINQ: u16 = 0x88a8;
/// Length of an Ethernet II header.
pub const HEADER_LEN: usize = 14;

/// A MAC address.
pub type Mac = [u8; 6];

/// An Ethernet II header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct EthernetHeader {
    /// Destination MAC.
    pub dst: Mac,
    /// Source MAC.
    pub src: Mac,
    /// What follows (or a VLAN tag's TPID).
    pub ethertype: U16,
}

/// The four bytes of an 802.1Q tag after the TPID, i.e. TCI and the inner
/// EtherType.
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct VlanTag {
    /// Priority (3 bits), drop eligible (1 bit), VLAN id (12 bits).
    pub tci: U16,
    /// What follows the tag.
    pub ethertype: U16,
}

/// The VLAN id's bits of a TCI.
pub const VID_MASK: u16 = 0x0fff;
/// Where the priority (PCP) starts in a TCI.
pub const PCP_SHIFT: u16 = 13;

/// The VLAN id of a TCI.
pub fn tci_vid(tci: u16) -> u16 {
    tci & VID_MASK
}

/// The priority (PCP, 0-7) of a TCI.
pub fn tci_pcp(tci: u16) -> u8 {
    (tci >> PCP_SHIFT) as u8
}

/// A TCI of priority `pcp` and VLAN id `vid` (drop eligibility clear).
pub fn tci(pcp: u8, vid: u16) -> u16 {
    (u16::from(pcp & 7) << PCP_SHIFT) | (vid & VID_MASK)
}

impl VlanTag {
    /// A tag of priority `pcp`, VLAN `vid`, before `ethertype`.
    pub fn new(pcp: u8, vid: u16, ethertype: u16) -> VlanTag {
        VlanTag {
            tci: U16::new(tci(pcp, vid)),
            ethertype: U16::new(ethertype),
        }
    }

    /// The VLAN id.
    pub fn vid(&self) -> u16 {
        tci_vid(self.tci.get())
    }

    /// The priority (PCP).
    pub fn pcp(&self) -> u8 {
        tci_pcp(self.tci.get())
    }
}

/// The Ethernet destination for an IP multicast group: 01:00:5e plus the
/// low 23 bits (IPv4, RFC 1112) or 33:33 plus the low 32 bits (IPv6, RFC
/// 2464). `None` if `group` is not multicast.
pub fn multicast_mac(group: IpAddr) -> Option<Mac> {
    match group {
        IpAddr::V4(g) if g.is_multicast() => {
            let o = g.octets();
            Some([0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]])
        }
        IpAddr::V6(g) if g.is_multicast() => {
            let o = g.octets();
            Some([0x33, 0x33, o[12], o[13], o[14], o[15]])
        }
        _ => None,
    }
}

/// Formats a MAC as `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(m: &Mac) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<Mac> {
    let mut m = [0u8; 6];
    let mut parts = s.trim().split(':');
    for b in &mut m {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multicast_macs_follow_the_rfcs() {
        assert_eq!(
            multicast_mac("239.129.2.3".parse().expect("literal")),
            Some([0x01, 0x00, 0x5e, 0x01, 0x02, 0x03]),
            "the 24th bit of the group is dropped"
        );
        assert_eq!(
            multicast_mac("ff3e::1:2:3:4".parse().expect("literal")),
            Some([0x33, 0x33, 0x00, 0x03, 0x00, 0x04])
        );
        assert_eq!(multicast_mac("10.0.0.1".parse().expect("literal")), None);
    }

    #[test]
    fn header_view_reads_real_bytes() {
        let bytes = [
            1, 0, 0x5e, 1, 1, 1, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x08, 0x00, 0x45,
        ];
        let (h, rest) = EthernetHeader::ref_from_prefix(&bytes).expect("14 bytes");
        assert_eq!(h.dst, [1, 0, 0x5e, 1, 1, 1]);
        assert_eq!(h.ethertype.get(), ETHERTYPE_IPV4);
        assert_eq!(rest, &[0x45]);
        assert!(EthernetHeader::ref_from_prefix(&bytes[..13]).is_err());
    }

    #[test]
    fn macs_round_trip_as_text() {
        let m = [0x02, 0xab, 0, 1, 0xff, 0x10];
        assert_eq!(parse_mac(&format_mac(&m)), Some(m));
        assert_eq!(parse_mac("02:ab:00:01:ff"), None);
        assert_eq!(parse_mac("02:ab:00:01:ff:10:11"), None);
        assert_eq!(parse_mac("zz:ab:00:01:ff:10"), None);
    }
}
