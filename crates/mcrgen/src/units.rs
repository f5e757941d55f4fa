//! Command-line quantities: durations (`10s`, `500ms`, `2m`, `1.5`) and
//! rates (`50000`, `50k`, `1.5M`, `max`).

use std::time::Duration;

/// Parses a duration: a number with an optional unit `ns`, `us`, `ms`, `s`,
/// `m` or `h` (plain numbers are seconds).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(char::is_alphabetic).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration: write e.g. 10s, 500ms, 2m"))?;
    let scale = match unit {
        "" | "s" => 1.0,
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => {
            return Err(format!("`{s}`: unknown unit `{unit}` (use ns, us, ms, s, m or h)"));
        }
    };
    Duration::try_from_secs_f64(v * scale).map_err(|_| format!("`{s}` is not a duration from zero to about 584 years"))
}

/// A duration in nanoseconds, saturating at `u64::MAX` (584 years).
pub fn as_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Parses a rate in packets per second: a number with an optional `k` or
/// `M`. Returns `None` for `max`.
pub fn parse_rate(s: &str) -> Result<Option<f64>, String> {
    let s = s.trim();
    if s == "max" {
        return Ok(None);
    }
    let (num, scale) = match s.strip_suffix(['k', 'K']) {
        Some(n) => (n, 1e3),
        None => match s.strip_suffix('M') {
            Some(n) => (n, 1e6),
            None => (s, 1.0),
        },
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a rate: write e.g. 50000, 50k, 1.5M or max"))?;
    let v = v * scale;
    if !(v.is_finite() && v > 0.0) {
        return Err(format!("`{s}`: a rate must be more than 0 packets per second"));
    }
    Ok(Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5parsecs").expect_err("unit").contains("unknown unit"));
        assert!(parse_duration("-1s").is_err());
        assert_eq!(parse_duration("5µs"), Ok(Duration::from_micros(5)));
        assert!(
            parse_duration("20000000000000000000").is_err(),
            "too long must be an error, not a panic"
        );
        assert_eq!(as_ns(Duration::MAX), u64::MAX);
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("50000"), Ok(Some(50_000.0)));
        assert_eq!(parse_rate("50k"), Ok(Some(50_000.0)));
        assert_eq!(parse_rate("1.5M"), Ok(Some(1_500_000.0)));
        assert_eq!(parse_rate("max"), Ok(None));
        assert!(parse_rate("0").is_err());
        assert!(parse_rate("fast").is_err());
    }
}
