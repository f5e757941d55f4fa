//! The line race: by how much a line's copies came after the first copy
//! of the same sequence number, kept as a histogram of four buckets per
//! doubling (each bucket within 19 % of its neighbours), over the last
//! [`SPAN_NS`] to [`2 × SPAN_NS`](SPAN_NS) (two halves, the older
//! dropped as a new one starts), so the figures follow a line that
//! becomes slow.

/// Buckets: lags in units of 1,024 ns from 0 to 2^28 units (about 275 s).
pub const BUCKETS: usize = 108;
/// How long one half of the histogram covers.
pub const SPAN_NS: u64 = 5_000_000_000;
/// A lag's unit.
const UNIT_SHIFT: u32 = super::window::TIME_SHIFT;

/// The bucket of a lag of `units` (of 1,024 ns): the first four hold 0
/// to 3 exactly; past them, four per power of two.
pub fn bucket(units: u64) -> usize {
    if units < 4 {
        return units as usize;
    }
    let o = 63 - units.leading_zeros();
    let b = 4 * (o as usize - 1) + ((units >> (o - 2)) & 3) as usize;
    b.min(BUCKETS - 1)
}

/// The lag, ns, a bucket stands for: the middle of its range.
pub fn bucket_ns(b: usize) -> u64 {
    if b < 4 {
        return (b as u64) << UNIT_SHIFT;
    }
    let o = (b / 4 + 1) as u32;
    let low = (4 + (b % 4) as u64) << (o - 2);
    let width = 1u64 << (o - 2);
    (low << UNIT_SHIFT) + ((width << UNIT_SHIFT) / 2)
}

/// Lags of one line's copies.
#[derive(Debug, Clone)]
pub struct Lags {
    halves: [Box<[u64; BUCKETS]>; 2],
    /// The half written now, and when it started.
    current: usize,
    started_ns: u64,
}

impl Default for Lags {
    fn default() -> Self {
        Lags {
            halves: [Box::new([0; BUCKETS]), Box::new([0; BUCKETS])],
            current: 0,
            started_ns: 0,
        }
    }
}

/// A line's lags, summed up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LagSummary {
    /// Copies measured.
    pub samples: u64,
    /// Half of them came at most this much later, ns.
    pub p50_ns: u64,
    /// 99 % of them came at most this much later, ns.
    pub p99_ns: u64,
}

impl Lags {
    /// A copy that came `lag_ns` after the first, noted at `now_ns`.
    pub fn note(&mut self, lag_ns: u64, now_ns: u64) {
        self.turn(now_ns);
        self.halves[self.current][bucket(lag_ns >> UNIT_SHIFT)] += 1;
    }

    /// Starts a new half if the current one is full at `now_ns`.
    fn turn(&mut self, now_ns: u64) {
        if now_ns.saturating_sub(self.started_ns) < SPAN_NS {
            return;
        }
        // Two spans since the current half started: it is old too.
        if now_ns.saturating_sub(self.started_ns) >= 2 * SPAN_NS {
            self.halves[self.current].fill(0);
        }
        self.current = 1 - self.current;
        self.halves[self.current].fill(0);
        self.started_ns = now_ns;
    }

    /// The median and 99th percentile over the recent copies, at `now_ns`.
    pub fn summary(&mut self, now_ns: u64) -> LagSummary {
        self.turn(now_ns);
        let mut all = [0u64; BUCKETS];
        for h in &self.halves {
            for (a, b) in all.iter_mut().zip(h.iter()) {
                *a += b;
            }
        }
        summarize(&all)
    }
}

/// The median and 99th percentile of a histogram of [`BUCKETS`].
pub fn summarize(h: &[u64]) -> LagSummary {
    let samples: u64 = h.iter().sum();
    if samples == 0 {
        return LagSummary::default();
    }
    let at = |q: u64| {
        // The smallest bucket with at least q % of the samples at or
        // below it.
        let need = (samples * q).div_ceil(100).max(1);
        let mut seen = 0;
        for (b, n) in h.iter().enumerate() {
            seen += n;
            if seen >= need {
                return bucket_ns(b);
            }
        }
        bucket_ns(h.len().saturating_sub(1))
    };
    LagSummary {
        samples,
        p50_ns: at(50),
        p99_ns: at(99),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_rise_with_the_lag_and_stand_for_a_lag_within_their_range() {
        let mut last = 0;
        for units in [0u64, 1, 3, 4, 5, 7, 8, 100, 1_000, 10_000, 1 << 20, (1 << 28) - 1] {
            let b = bucket(units);
            assert!(b >= last, "{units}");
            last = b;
            let mid = bucket_ns(b) >> UNIT_SHIFT;
            // Within a fifth of the lag (exact below 4 units).
            assert!(
                mid.abs_diff(units) * 5 <= units.max(1),
                "{units}: bucket {b} stands for {mid}"
            );
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn the_median_and_p99_follow_the_recent_copies() {
        let mut l = Lags::default();
        // 990 copies 1 ms late, 10 copies 20 ms late.
        for i in 0..1000u64 {
            let lag = if i % 100 == 0 { 20_000_000 } else { 1_000_000 };
            l.note(lag, i * 1_000);
        }
        let s = l.summary(1_000_000);
        assert_eq!(s.samples, 1000);
        assert!((800_000..=1_200_000).contains(&s.p50_ns), "{s:?}");
        assert!((800_000..=1_200_000).contains(&s.p99_ns), "{s:?}");
        l.note(20_000_000, 2_000_000);
        l.note(20_000_000, 2_000_000);
        let s = l.summary(2_000_000);
        assert!(s.p99_ns > 15_000_000, "{s:?}");
        // Ten seconds later the old copies are forgotten.
        assert_eq!(l.summary(12_000_000_000).samples, 0);
        l.note(3_000_000, 12_000_000_000);
        let s = l.summary(12_000_000_000);
        assert_eq!(s.samples, 1);
        assert!((2_500_000..=3_500_000).contains(&s.p50_ns), "{s:?}");
    }
}
