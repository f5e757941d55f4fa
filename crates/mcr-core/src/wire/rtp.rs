//! RTP (RFC 3550, section 5.1): the fixed header, its CSRC list, header
//! extension and padding, as far as a relay needs them to follow a stream
//! (sequence number, timestamp, source) and find the payload.

/// The fixed header is this long.
pub const FIXED: usize = 12;

/// An RTP header, checked against the datagram it came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtpHeader {
    /// The payload type (33 is MPEG-TS; 96–127 are dynamic).
    pub payload_type: u8,
    /// The marker bit.
    pub marker: bool,
    /// The sequence number.
    pub sequence: u16,
    /// The media timestamp, in the payload's clock.
    pub timestamp: u32,
    /// The synchronisation source.
    pub ssrc: u32,
    /// Where the payload starts.
    pub payload_start: usize,
    /// Where it ends (before any padding).
    pub payload_end: usize,
}

impl RtpHeader {
    /// The header at the start of `b` (a UDP payload), or `None` when `b`
    /// is not RTP version 2 or its CSRC list, extension or padding do not
    /// fit in it.
    pub fn parse(b: &[u8]) -> Option<RtpHeader> {
        if b.len() < FIXED || b[0] >> 6 != 2 {
            return None;
        }
        let csrcs = usize::from(b[0] & 0x0f);
        let mut start = FIXED + 4 * csrcs;
        if b[0] & 0x10 != 0 {
            // The extension: 16 bits defined by profile, 16 bits of length
            // in 32-bit words, then that many words.
            let ext = b.get(start..start + 4)?;
            start += 4 + 4 * usize::from(u16::from_be_bytes([ext[2], ext[3]]));
        }
        let mut end = b.len();
        if b[0] & 0x20 != 0 {
            let pad = usize::from(*b.last()?);
            if pad == 0 {
                return None;
            }
            end = end.checked_sub(pad)?;
        }
        if start > end {
            return None;
        }
        Some(RtpHeader {
            payload_type: b[1] & 0x7f,
            marker: b[1] & 0x80 != 0,
            sequence: u16::from_be_bytes([b[2], b[3]]),
            timestamp: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
            ssrc: u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
            payload_start: start,
            payload_end: end,
        })
    }

    /// Writes a plain header (no CSRC, extension or padding) into the first
    /// [`FIXED`] bytes of `out`.
    pub fn write(out: &mut [u8], payload_type: u8, sequence: u16, timestamp: u32, ssrc: u32) {
        out[0] = 0x80;
        out[1] = payload_type & 0x7f;
        out[2..4].copy_from_slice(&sequence.to_be_bytes());
        out[4..8].copy_from_slice(&timestamp.to_be_bytes());
        out[8..12].copy_from_slice(&ssrc.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_plain_header_reads_back() {
        let mut b = [0u8; 12 + 188];
        RtpHeader::write(&mut b, 33, 0xfffe, 90_000, 0xdead_beef);
        let h = RtpHeader::parse(&b).expect("rtp");
        assert_eq!(
            (h.payload_type, h.sequence, h.timestamp, h.ssrc, h.marker),
            (33, 0xfffe, 90_000, 0xdead_beef, false)
        );
        assert_eq!((h.payload_start, h.payload_end), (12, 200));
    }

    #[test]
    fn csrcs_extension_and_padding_move_the_payload() {
        // Two CSRCs, an extension of one word, three bytes of padding.
        let mut b = vec![0xb2, 0x60, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3];
        b.extend_from_slice(&[0; 8]); // CSRCs
        b.extend_from_slice(&[0xbe, 0xde, 0, 1, 9, 9, 9, 9]); // extension
        b.extend_from_slice(&[7; 10]); // payload
        b.extend_from_slice(&[0, 0, 3]); // padding
        let h = RtpHeader::parse(&b).expect("rtp");
        assert_eq!((h.payload_start, h.payload_end), (28, 38));
        assert_eq!(h.payload_type, 96);
    }

    #[test]
    fn what_is_not_rtp_is_refused() {
        // MPEG-TS straight in UDP starts with 0x47: version 1.
        assert_eq!(RtpHeader::parse(&[0x47; 188]), None);
        assert_eq!(RtpHeader::parse(&[0x80; 11]), None);
        // Twelve CSRCs announced, none there.
        assert_eq!(RtpHeader::parse(&[0x8c; 20]), None);
        // Padding longer than the datagram; padding of zero.
        let mut b = [0u8; 16];
        b[0] = 0xa0;
        b[15] = 200;
        assert_eq!(RtpHeader::parse(&b), None);
        b[15] = 0;
        assert_eq!(RtpHeader::parse(&b), None);
    }

    proptest! {
        /// Any bytes: no panic, and a header that parses points inside
        /// them.
        #[test]
        fn any_bytes_parse_safely(b in proptest::collection::vec(any::<u8>(), 0..80)) {
            if let Some(h) = RtpHeader::parse(&b) {
                prop_assert!(h.payload_start <= h.payload_end && h.payload_end <= b.len());
            }
        }
    }
}
