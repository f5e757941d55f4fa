//! What every datagram carries: a header saying who sent it, its sequence
//! number and when, then a pattern the receiver checks, so a truncated or
//! damaged datagram is told from a whole one.

/// Bytes of header: magic (4), sender (4), sequence (8), send time (8).
pub const HEADER: usize = 24;
const MAGIC: u32 = 0x4d43_5253; // "MCRS"

/// Fills `buf` with the pattern (once per buffer; `stamp` then writes the
/// header over its start).
pub fn fill(buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate().skip(HEADER) {
        *b = (i as u8).wrapping_mul(31).wrapping_add(7);
    }
}

/// Writes the header of datagram `seq` of `sender`, sent at `now_ns`.
pub fn stamp(buf: &mut [u8], sender: u32, seq: u64, now_ns: u64) {
    buf[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    buf[4..8].copy_from_slice(&sender.to_le_bytes());
    buf[8..16].copy_from_slice(&seq.to_le_bytes());
    buf[16..24].copy_from_slice(&now_ns.to_le_bytes());
}

/// What a received datagram says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Whole and intact: sender, sequence number, send time.
    Good { sender: u32, seq: u64, sent_ns: u64 },
    /// Shorter or longer than the size sent.
    Truncated,
    /// Not one of ours, or its bytes are not as sent.
    Damaged,
}

/// Checks a datagram of `size` bytes as sent.
pub fn check(d: &[u8], size: usize) -> Seen {
    if d.len() != size {
        return Seen::Truncated;
    }
    let word = |r: std::ops::Range<usize>| d[r].iter().rev().fold(0u64, |v, &b| (v << 8) | u64::from(b));
    if word(0..4) != u64::from(MAGIC) {
        return Seen::Damaged;
    }
    // Spot-check the pattern: its last byte and one in the middle.
    for i in [size - 1, HEADER + (size - HEADER) / 2] {
        if i >= HEADER && d[i] != (i as u8).wrapping_mul(31).wrapping_add(7) {
            return Seen::Damaged;
        }
    }
    Seen::Good {
        sender: word(4..8) as u32,
        seq: word(8..16),
        sent_ns: word(16..24),
    }
}

/// Whether sequence number `seq` is one the sender leaves out to inject
/// a `share` of loss: a fixed, well-spread choice, so sender and report
/// agree on exactly which.
pub fn injected(seq: u64, share: f64) -> bool {
    if share <= 0.0 {
        return false;
    }
    let h = seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 11;
    (h as f64 / (1u64 << 53) as f64) < share
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_datagram_reads_back_and_damage_is_seen() {
        let mut b = vec![0u8; 64];
        fill(&mut b);
        stamp(&mut b, 3, 1234, 99);
        assert_eq!(
            check(&b, 64),
            Seen::Good {
                sender: 3,
                seq: 1234,
                sent_ns: 99
            }
        );
        assert_eq!(check(&b[..63], 64), Seen::Truncated);
        let mut d = b.clone();
        d[63] ^= 1;
        assert_eq!(check(&d, 64), Seen::Damaged);
        let mut m = b.clone();
        m[0] = 0;
        assert_eq!(check(&m, 64), Seen::Damaged);
    }

    #[test]
    fn injected_loss_takes_about_the_share_asked() {
        let n = (0..100_000u64).filter(|&s| injected(s, 0.02)).count();
        assert!((1800..2200).contains(&n), "{n}");
        assert_eq!((0..1000u64).filter(|&s| injected(s, 0.0)).count(), 0);
    }
}
