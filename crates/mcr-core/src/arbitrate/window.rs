//! The window of recently seen sequence numbers of one unit of a rule:
//! which sequence number each slot last took, and which line brought it
//! when. Slot `seq mod N` holds, in one `u64`, the sequence number's
//! *tag* (its generation and `seq / N`) in the high half, and in the low
//! half when it came (in units of 1,024 ns, 28 bits) and which line
//! brought it (3 bits, and a bit that marks the slot taken). The eBPF data
//! path keeps the same words and decides the same way, taking a slot with
//! one compare-and-exchange, so that two lines on two CPUs never both win.
//!
//! A packet is *first* when its slot holds an older tag (or nothing), a
//! *copy* when it holds the same tag, and *too late* when it holds a newer
//! one: its sequence number is a window or more behind one already seen.

/// How a slot's time is kept: ns shifted right by this (1.024 µs).
pub const TIME_SHIFT: u32 = 10;
/// The bits of a slot's low half that hold the line.
const LINE_MASK: u64 = 0x7;
/// The bit that marks a slot taken (so no taken slot is 0).
const TAKEN: u64 = 0x8;
/// The time's bits (28) in the low half.
const TIME_MASK: u32 = 0x0fff_ffff;

/// The tag of `seq` of generation `era` in a window of `2^bits` slots:
/// the generation in the top 8 bits, `seq >> bits` in the low 24. Tags are
/// compared as serial numbers (the difference, as a signed number), so a
/// new generation is newer than any sequence number of the one before.
pub fn tag(era: u8, seq: u64, bits: u32) -> u32 {
    (u32::from(era) << 24) | ((seq >> bits) as u32 & 0x00ff_ffff)
}

/// The word a slot takes for `tag`, arriving at `now_ns` on `line`.
pub fn word(tag: u32, now_ns: u64, line: usize) -> u64 {
    let time = ((now_ns >> TIME_SHIFT) as u32) & TIME_MASK;
    (u64::from(tag) << 32) | (u64::from(time) << 4) | TAKEN | (line as u64 & LINE_MASK)
}

/// What a slot said of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// No line brought it before: it goes out.
    First,
    /// `line` brought it `lag_ns` before.
    Copy {
        /// The line that brought it first.
        line: usize,
        /// How much later this copy came.
        lag_ns: u64,
    },
    /// A window or more behind a sequence number already seen.
    TooLate,
}

/// What the word `cur` of a slot says of a packet with `tag`, arriving
/// at `now_ns`. (The eBPF program's decision, written once here.)
pub fn judge(cur: u64, tag: u32, now_ns: u64) -> Claim {
    if cur & TAKEN == 0 {
        return Claim::First;
    }
    let held = (cur >> 32) as u32;
    match tag.wrapping_sub(held) as i32 {
        0 => {
            let then = ((cur as u32) >> 4) & TIME_MASK;
            let now = ((now_ns >> TIME_SHIFT) as u32) & TIME_MASK;
            Claim::Copy {
                line: (cur & LINE_MASK) as usize,
                lag_ns: u64::from(now.wrapping_sub(then) & TIME_MASK) << TIME_SHIFT,
            }
        }
        d if d < 0 => Claim::TooLate,
        _ => Claim::First,
    }
}

/// The slots of one unit.
#[derive(Debug, Clone)]
pub struct Window {
    slots: Vec<u64>,
    bits: u32,
}

impl Window {
    /// A window of `2^bits` slots, all free.
    pub fn new(bits: u32) -> Self {
        Window {
            slots: vec![0; 1 << bits],
            bits,
        }
    }

    /// Judges `seq` of generation `era` from `line` at `now_ns`, and takes
    /// its slot if it is first.
    pub fn claim(&mut self, era: u8, seq: u64, line: usize, now_ns: u64) -> Claim {
        let t = tag(era, seq, self.bits);
        let i = (seq & ((1u64 << self.bits) - 1)) as usize;
        let Some(slot) = self.slots.get_mut(i) else {
            return Claim::TooLate;
        };
        let c = judge(*slot, t, now_ns);
        if c == Claim::First {
            *slot = word(t, now_ns, line);
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: u64 = 1_000;

    #[test]
    fn the_first_copy_wins_and_the_second_says_by_how_much_it_lagged() {
        let mut w = Window::new(10);
        assert_eq!(w.claim(0, 5, 0, 1_000 * US), Claim::First);
        match w.claim(0, 5, 1, 3_500 * US) {
            Claim::Copy { line: 0, lag_ns } => assert!((2_490 * US..=2_510 * US).contains(&lag_ns), "{lag_ns}"),
            c => panic!("{c:?}"),
        }
        // The same line again is a copy too (of its own).
        assert!(matches!(w.claim(0, 5, 0, 4_000 * US), Claim::Copy { line: 0, .. }));
    }

    #[test]
    fn a_window_behind_is_too_late_and_a_new_generation_is_always_newer() {
        let mut w = Window::new(10);
        assert_eq!(w.claim(0, 3, 0, 0), Claim::First);
        assert_eq!(w.claim(0, 3 + 1024, 0, 0), Claim::First);
        assert_eq!(w.claim(0, 3, 1, 0), Claim::TooLate);
        // After a reset (generation 1) a small number is new again, and
        // the old generation's number in that slot is too late.
        assert_eq!(w.claim(1, 3, 0, 0), Claim::First);
        assert_eq!(w.claim(0, 3 + 1024, 1, 0), Claim::TooLate);
        // Generations wrap as serial numbers.
        assert_eq!(w.claim(255, 9, 0, 0), Claim::First);
        assert_eq!(w.claim(0, 9, 0, 0), Claim::First);
        assert_eq!(w.claim(255, 9, 1, 0), Claim::TooLate);
    }

    #[test]
    fn a_taken_slot_is_never_zero_and_the_lag_survives_the_time_wrap() {
        assert_ne!(word(0, 0, 0), 0);
        // 2^28 units of 1,024 ns is about 275 s: a copy 3 ms after a
        // first that came just before the wrap.
        let wrap = (1u64 << 28) << TIME_SHIFT;
        let first = word(tag(0, 1, 10), wrap - 1_000 * US, 2);
        match judge(first, tag(0, 1, 10), wrap + 2_000 * US) {
            Claim::Copy { line: 2, lag_ns } => assert!((2_990 * US..=3_010 * US).contains(&lag_ns), "{lag_ns}"),
            c => panic!("{c:?}"),
        }
    }
}
