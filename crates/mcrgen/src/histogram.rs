//! A latency histogram with bounded memory and bounded relative error.
//!
//! Values below 64 ns are counted exactly; above, each power of two is split
//! into 64 buckets, so a reported percentile is within 1/64 (1.6 %) of the
//! true value. Values are capped at 2^41 ns (about 36 minutes).

use serde::{Deserialize, Serialize};

const SUB_BITS: u32 = 6;
const SUB: u64 = 1 << SUB_BITS;
const MAX_MSB: u32 = 41;
const BUCKETS: usize = (SUB + (MAX_MSB - SUB_BITS + 1) as u64 * SUB) as usize;

/// Counts of nanosecond values. The buckets (9 KiB) are allocated with the
/// first value, so an idle stream costs nothing.
#[derive(Debug, Clone)]
pub struct Histogram {
    counts: Vec<u32>,
    total: u64,
    min: u64,
    max: u64,
    sum: u128,
}

/// The percentiles a report shows, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Smallest value.
    pub min_ns: u64,
    /// Median.
    pub p50_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// Largest value.
    pub max_ns: u64,
    /// Arithmetic mean.
    pub mean_ns: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: Vec::new(),
            total: 0,
            min: u64::MAX,
            max: 0,
            sum: 0,
        }
    }
}

fn index(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let msb = (63 - v.leading_zeros()).min(MAX_MSB);
    let v = v.min((1u64 << (MAX_MSB + 1)) - 1);
    let shift = msb - SUB_BITS;
    let mantissa = (v >> shift) - SUB;
    (SUB + u64::from(shift) * SUB + mantissa) as usize
}

/// The largest value that falls into bucket `i`.
fn highest_in(i: usize) -> u64 {
    let i = i as u64;
    if i < SUB {
        return i;
    }
    let shift = (i - SUB) / SUB;
    let mantissa = (i - SUB) % SUB;
    ((SUB + mantissa + 1) << shift) - 1
}

impl Histogram {
    /// Counts one value.
    pub fn record(&mut self, v: u64) {
        if self.counts.is_empty() {
            self.counts = vec![0; BUCKETS];
        }
        let c = &mut self.counts[index(v)];
        *c = c.saturating_add(1);
        self.total += 1;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.sum += u128::from(v);
    }

    /// How many values were counted.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// Adds another histogram's counts to this one.
    pub fn merge(&mut self, other: &Histogram) {
        if other.counts.is_empty() {
            return;
        }
        if self.counts.is_empty() {
            self.counts = vec![0; BUCKETS];
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a = a.saturating_add(*b);
        }
        self.total += other.total;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.sum += other.sum;
    }

    /// The value below which fraction `q` (0..=1) of the values lie.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += u64::from(c);
            if seen >= rank {
                return Some(highest_in(i).clamp(self.min, self.max));
            }
        }
        Some(self.max)
    }

    /// Min, p50, p99, p99.9, max and mean, or `None` if empty.
    pub fn summary(&self) -> Option<Summary> {
        Some(Summary {
            min_ns: self.min.min(self.max),
            p50_ns: self.quantile(0.5)?,
            p99_ns: self.quantile(0.99)?,
            p999_ns: self.quantile(0.999)?,
            max_ns: self.max,
            mean_ns: (self.sum / u128::from(self.total)) as u64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn buckets_are_contiguous_and_ordered() {
        let mut prev = None;
        for i in 0..BUCKETS {
            let hi = highest_in(i);
            assert_eq!(index(hi), i, "bucket {i} ends at {hi}");
            if let Some(p) = prev {
                assert_eq!(index(p + 1), i, "bucket {i} starts right after {p}");
            }
            prev = Some(hi);
        }
    }

    #[test]
    fn small_values_are_exact() {
        let mut h = Histogram::default();
        for v in 0..50 {
            h.record(v);
        }
        let s = h.summary().expect("values");
        assert_eq!((s.min_ns, s.p50_ns, s.max_ns), (0, 24, 49));
    }

    #[test]
    fn empty_has_no_summary_and_huge_values_are_capped() {
        assert!(Histogram::default().summary().is_none());
        let mut h = Histogram::default();
        h.record(u64::MAX);
        assert_eq!(h.summary().expect("one").max_ns, u64::MAX);
    }

    proptest! {
        #[test]
        fn quantiles_are_within_the_stated_error(mut values in proptest::collection::vec(0u64..10_000_000_000, 1..500), q in 0.0f64..1.0) {
            let mut h = Histogram::default();
            for &v in &values { h.record(v); }
            values.sort_unstable();
            let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
            let exact = values[rank - 1];
            let got = h.quantile(q).expect("non-empty");
            prop_assert!(got >= exact, "{} < exact {}", got, exact);
            prop_assert!(got - exact <= exact / 64 + 1, "{} too far above {}", got, exact);
        }

        #[test]
        fn merging_equals_recording_together(a in proptest::collection::vec(0u64..1_000_000, 0..100), b in proptest::collection::vec(0u64..1_000_000, 0..100)) {
            let (mut ha, mut hb, mut hall) = (Histogram::default(), Histogram::default(), Histogram::default());
            for &v in &a { ha.record(v); hall.record(v); }
            for &v in &b { hb.record(v); hall.record(v); }
            ha.merge(&hb);
            prop_assert_eq!(ha.summary(), hall.summary());
        }
    }
}
