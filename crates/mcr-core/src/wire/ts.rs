//! MPEG-2 transport stream packets (ISO/IEC 13818-1, 2.4.3): 188 bytes
//! each, several to a datagram, with the header fields the health checks
//! of ETSI TR 101 290 read.

/// A transport packet is this long.
pub const PACKET: usize = 188;
/// Its first byte.
pub const SYNC: u8 = 0x47;
/// The PID of the program association table.
pub const PAT_PID: u16 = 0;
/// The PID of null (stuffing) packets, which carry no continuity.
pub const NULL_PID: u16 = 0x1fff;

/// One transport packet.
#[derive(Debug, Clone, Copy)]
pub struct TsPacket<'a>(&'a [u8; PACKET]);

impl<'a> TsPacket<'a> {
    /// The packet in `b`.
    pub fn new(b: &'a [u8; PACKET]) -> Self {
        TsPacket(b)
    }

    /// Its first byte is the sync byte.
    pub fn synced(&self) -> bool {
        self.0[0] == SYNC
    }

    /// The packet identifier.
    pub fn pid(&self) -> u16 {
        u16::from_be_bytes([self.0[1] & 0x1f, self.0[2]])
    }

    /// A section or PES packet starts in this packet's payload.
    pub fn unit_start(&self) -> bool {
        self.0[1] & 0x40 != 0
    }

    /// The transport scrambling control bits.
    pub fn scrambling(&self) -> u8 {
        self.0[3] >> 6
    }

    /// The packet carries payload (adaptation field control 01 or 11).
    pub fn has_payload(&self) -> bool {
        self.0[3] & 0x10 != 0
    }

    /// The continuity counter.
    pub fn continuity(&self) -> u8 {
        self.0[3] & 0x0f
    }

    /// The adaptation field, if there is one, without its length byte.
    fn adaptation(&self) -> Option<&'a [u8]> {
        if self.0[3] & 0x20 == 0 {
            return None;
        }
        let len = usize::from(self.0[4]);
        self.0.get(5..5 + len)
    }

    /// The adaptation field says the continuity counter may jump here.
    pub fn discontinuity(&self) -> bool {
        self.adaptation().and_then(|a| a.first()).is_some_and(|f| f & 0x80 != 0)
    }

    /// The payload (empty without one, or if the adaptation field fills
    /// the packet).
    pub fn payload(&self) -> &'a [u8] {
        if !self.has_payload() {
            return &[];
        }
        let start = if self.0[3] & 0x20 != 0 {
            5 + usize::from(self.0[4])
        } else {
            4
        };
        self.0.get(start..).unwrap_or(&[])
    }

    /// The table id of the section that starts here (after the pointer
    /// field), for a packet that starts a section.
    pub fn table_id(&self) -> Option<u8> {
        if !self.unit_start() {
            return None;
        }
        let p = self.payload();
        let pointer = usize::from(*p.first()?);
        p.get(1 + pointer).copied()
    }
}

/// The transport packets of `b`, when `b` is a whole number of them that
/// starts with a sync byte (how MPEG-TS is carried in UDP and in RTP).
pub fn packets(b: &[u8]) -> Option<impl Iterator<Item = TsPacket<'_>>> {
    if b.is_empty() || !b.len().is_multiple_of(PACKET) || b[0] != SYNC {
        return None;
    }
    Some(
        b.chunks_exact(PACKET)
            .filter_map(|c| c.try_into().ok().map(TsPacket::new)),
    )
}

/// Writes a transport packet header into `out[..4]`: sync byte, PID,
/// unit start, payload only, continuity counter `cc`.
pub fn write_header(out: &mut [u8], pid: u16, unit_start: bool, cc: u8) {
    let [hi, lo] = pid.to_be_bytes();
    out[0] = SYNC;
    out[1] = (hi & 0x1f) | if unit_start { 0x40 } else { 0 };
    out[2] = lo;
    out[3] = 0x10 | (cc & 0x0f);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn header_fields_read_back() {
        let mut b = [0xffu8; PACKET];
        write_header(&mut b, 0x1234, true, 7);
        b[4] = 0; // pointer field
        b[5] = 0x02; // table id
        let p = TsPacket::new(&b);
        assert!(p.synced() && p.unit_start() && p.has_payload());
        assert_eq!((p.pid(), p.continuity(), p.scrambling()), (0x1234, 7, 0));
        assert_eq!(p.table_id(), Some(2));
        assert!(!p.discontinuity());
        assert_eq!(p.payload().len(), PACKET - 4);
    }

    #[test]
    fn the_adaptation_field_holds_the_discontinuity_flag() {
        let mut b = [0u8; PACKET];
        write_header(&mut b, 100, false, 3);
        b[3] |= 0x20;
        b[4] = 1;
        b[5] = 0x80;
        let p = TsPacket::new(&b);
        assert!(p.discontinuity());
        assert_eq!(p.payload().len(), PACKET - 6);
    }

    #[test]
    fn only_whole_synced_packets_are_split() {
        let mut b = vec![0u8; 7 * PACKET];
        for c in b.chunks_mut(PACKET) {
            write_header(c, 1, false, 0);
        }
        assert_eq!(packets(&b).map(Iterator::count), Some(7));
        assert!(packets(&b[..100]).is_none());
        assert!(packets(&[]).is_none());
        b[0] = 0;
        assert!(packets(&b).is_none());
    }

    proptest! {
        /// Any packet's fields read without a panic.
        #[test]
        fn any_packet_reads_safely(b in proptest::collection::vec(any::<u8>(), PACKET)) {
            let a: [u8; PACKET] = b.try_into().expect("length");
            let p = TsPacket::new(&a);
            let _ = (p.pid(), p.table_id(), p.discontinuity(), p.payload().len());
        }
    }
}
