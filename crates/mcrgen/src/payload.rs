//! The test payload: a header that identifies the packet, then a pattern
//! that lets the receiver check every byte.
//!
//! ```text
//! offset  size  field
//!      0     4  magic "MCRG"
//!      4     4  stream id            (big endian)
//!      8     8  sequence number      (big endian, from 0 per stream)
//!     16     8  send time, CLOCK_MONOTONIC ns (big endian)
//!     24     4  payload length in bytes (big endian)
//!     28     4  header check: a hash of bytes 0..28
//!     32   ...  pattern
//! ```
//!
//! The pattern is a fixed table of pseudo-random words, each XORed with a
//! key derived from (stream, sequence): any flipped bit, any shifted byte and
//! any payload delivered under another stream's or sequence's header shows.

use std::sync::OnceLock;

/// The first four bytes of every payload.
pub const MAGIC: [u8; 4] = *b"MCRG";
/// The header's length in bytes.
pub const HEADER_LEN: usize = 32;
/// The smallest payload `mcrgen send` makes.
pub const MIN_PAYLOAD: usize = 64;
/// The largest payload: a 9000-byte jumbo frame minus IPv4 and UDP headers.
pub const MAX_PAYLOAD: usize = 8972;

/// What the header of a payload says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The stream's id.
    pub stream: u32,
    /// The packet's sequence number within its stream.
    pub seq: u64,
    /// When it was sent, in CLOCK_MONOTONIC nanoseconds.
    pub send_ns: u64,
    /// The whole payload's length in bytes.
    pub len: u32,
}

/// The verdict on a received payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Header and every byte of the pattern as sent.
    Intact(Header),
    /// The header is sound (its check matches), so the packet can be
    /// attributed, but the length or a byte of the pattern is wrong.
    Damaged(Header),
    /// Starts with the magic but the header check fails: corrupted beyond
    /// attribution.
    BadHeader,
    /// Not an `mcrgen` payload at all.
    Unrecognized,
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn header_check(stream: u32, seq: u64, send_ns: u64, len: u32) -> u32 {
    let h = splitmix64(u64::from(stream) ^ seq.rotate_left(17) ^ send_ns.rotate_left(37) ^ (u64::from(len) << 40));
    (h ^ (h >> 32)) as u32
}

fn pattern_key(stream: u32, seq: u64) -> u64 {
    splitmix64((u64::from(stream) << 40) ^ seq ^ 0x5a5a_0000_0000_0000)
}

/// One pseudo-random word per 8 bytes of the largest payload.
fn table() -> &'static [u64] {
    static TABLE: OnceLock<Vec<u64>> = OnceLock::new();
    TABLE.get_or_init(|| {
        (0..MAX_PAYLOAD.div_ceil(8) as u64)
            .map(|i| splitmix64(i ^ 0x6d63_7267))
            .collect()
    })
}

/// Writes a complete payload into `buf` (its whole length is the payload):
/// header, then pattern. `buf` must hold at least [`HEADER_LEN`] bytes and at
/// most [`MAX_PAYLOAD`]; the sender checks sizes before it starts.
pub fn fill(buf: &mut [u8], stream: u32, seq: u64, send_ns: u64) {
    debug_assert!((HEADER_LEN..=MAX_PAYLOAD).contains(&buf.len()));
    write_header(buf, stream, seq, send_ns);
    let key = pattern_key(stream, seq);
    for (chunk, word) in buf[HEADER_LEN..].chunks_mut(8).zip(table()) {
        let bytes = (word ^ key).to_le_bytes();
        chunk.copy_from_slice(&bytes[..chunk.len()]);
    }
}

/// Rewrites only the header of a payload made by [`fill`] for the same
/// stream and sequence number: used to stamp the send time just before
/// sending.
pub fn write_header(buf: &mut [u8], stream: u32, seq: u64, send_ns: u64) {
    let len = u32::try_from(buf.len()).unwrap_or(u32::MAX);
    buf[0..4].copy_from_slice(&MAGIC);
    buf[4..8].copy_from_slice(&stream.to_be_bytes());
    buf[8..16].copy_from_slice(&seq.to_be_bytes());
    buf[16..24].copy_from_slice(&send_ns.to_be_bytes());
    buf[24..28].copy_from_slice(&len.to_be_bytes());
    buf[28..32].copy_from_slice(&header_check(stream, seq, send_ns, len).to_be_bytes());
}

fn be_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_be_bytes(a)
}

fn be_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// Checks a received payload byte for byte.
pub fn check(buf: &[u8]) -> Check {
    if buf.len() < 4 || buf[0..4] != MAGIC {
        return Check::Unrecognized;
    }
    if buf.len() < HEADER_LEN {
        return Check::BadHeader;
    }
    let h = Header {
        stream: be_u32(&buf[4..]),
        seq: be_u64(&buf[8..]),
        send_ns: be_u64(&buf[16..]),
        len: be_u32(&buf[24..]),
    };
    if be_u32(&buf[28..]) != header_check(h.stream, h.seq, h.send_ns, h.len) {
        return Check::BadHeader;
    }
    if h.len as usize != buf.len() || buf.len() > MAX_PAYLOAD {
        return Check::Damaged(h);
    }
    let key = pattern_key(h.stream, h.seq);
    let intact = buf[HEADER_LEN..].chunks(8).zip(table()).all(|(chunk, word)| {
        let bytes = (word ^ key).to_le_bytes();
        chunk == &bytes[..chunk.len()]
    });
    if intact { Check::Intact(h) } else { Check::Damaged(h) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn made(len: usize, stream: u32, seq: u64) -> Vec<u8> {
        let mut b = vec![0u8; len];
        fill(&mut b, stream, seq, 123_456_789);
        b
    }

    #[test]
    fn header_layout_is_as_documented() {
        let b = made(64, 7, 0x0102_0304_0506_0708);
        assert_eq!(&b[0..4], b"MCRG");
        assert_eq!(&b[4..8], &[0, 0, 0, 7]);
        assert_eq!(&b[8..16], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&b[16..24], &123_456_789u64.to_be_bytes());
        assert_eq!(&b[24..28], &64u32.to_be_bytes());
    }

    #[test]
    fn a_fresh_payload_is_intact_at_every_size() {
        for len in [HEADER_LEN, MIN_PAYLOAD, 65, 1024, 1473, MAX_PAYLOAD] {
            let b = made(len, 3, 99);
            assert_eq!(
                check(&b),
                Check::Intact(Header {
                    stream: 3,
                    seq: 99,
                    send_ns: 123_456_789,
                    len: len as u32
                })
            );
        }
    }

    #[test]
    fn restamping_the_send_time_keeps_it_intact() {
        let mut b = made(100, 1, 2);
        write_header(&mut b, 1, 2, 42);
        assert!(matches!(check(&b), Check::Intact(h) if h.send_ns == 42));
    }

    #[test]
    fn truncation_and_foreign_bytes_are_told_apart() {
        let b = made(1024, 1, 1);
        assert!(matches!(check(&b[..1000]), Check::Damaged(h) if h.len == 1024));
        assert_eq!(check(&b[..20]), Check::BadHeader);
        assert_eq!(check(b"hello world"), Check::Unrecognized);
        assert_eq!(check(&[]), Check::Unrecognized);
    }

    #[test]
    fn another_packets_pattern_under_this_header_is_damage() {
        let a = made(256, 1, 5);
        let mut b = made(256, 1, 6);
        b[HEADER_LEN..].copy_from_slice(&a[HEADER_LEN..]);
        assert!(matches!(check(&b), Check::Damaged(_)));
        let mut c = made(256, 2, 5);
        c[HEADER_LEN..].copy_from_slice(&a[HEADER_LEN..]);
        assert!(matches!(check(&c), Check::Damaged(_)));
    }

    proptest! {
        #[test]
        fn any_single_bit_flip_is_detected(len in MIN_PAYLOAD..2048usize, stream: u32, seq: u64, bit in 0usize..(2048 * 8)) {
            let mut b = made(len, stream, seq);
            let bit = bit % (len * 8);
            b[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(!matches!(check(&b), Check::Intact(_)), "flip of bit {} not seen", bit);
        }

        #[test]
        fn any_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = check(&bytes);
            let mut with_magic = MAGIC.to_vec();
            with_magic.extend_from_slice(&bytes);
            let _ = check(&with_magic);
        }
    }
}
