//! NMOS times: TAI seconds and nanoseconds (`"1700000037:120000000"`), as
//! resource versions and IS-05 activation times are written.

use std::fmt;
use std::str::FromStr;

/// TAI is ahead of UTC by the leap seconds since 1972: 37 since 2017, and
/// none announced since.
pub const TAI_MINUS_UTC_S: u64 = 37;

/// A TAI time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Tai {
    /// Seconds since the TAI epoch (1970-01-01 00:00:00 TAI).
    pub secs: u64,
    /// And nanoseconds, below 10^9.
    pub nanos: u32,
}

impl Tai {
    /// The time `ns` nanoseconds since the epoch.
    pub fn from_ns(ns: u128) -> Tai {
        Tai {
            secs: u64::try_from(ns / 1_000_000_000).unwrap_or(u64::MAX),
            nanos: u32::try_from(ns % 1_000_000_000).unwrap_or(0),
        }
    }

    /// Nanoseconds since the epoch.
    pub fn as_ns(self) -> u128 {
        u128::from(self.secs) * 1_000_000_000 + u128::from(self.nanos)
    }

    /// One nanosecond later.
    pub fn next(self) -> Tai {
        Tai::from_ns(self.as_ns() + 1)
    }

    /// The TAI time of a UTC time given as nanoseconds since the Unix epoch.
    pub fn from_utc_ns(utc_ns: u128) -> Tai {
        Tai::from_ns(utc_ns + u128::from(TAI_MINUS_UTC_S) * 1_000_000_000)
    }

    /// The UTC time, as nanoseconds since the Unix epoch.
    pub fn utc_ns(self) -> u128 {
        self.as_ns().saturating_sub(u128::from(TAI_MINUS_UTC_S) * 1_000_000_000)
    }
}

/// The time now, TAI.
pub fn tai_now() -> Tai {
    let utc = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    Tai::from_utc_ns(utc)
}

impl fmt::Display for Tai {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.secs, self.nanos)
    }
}

impl FromStr for Tai {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("{s:?} is not a TAI time (SECONDS:NANOSECONDS, e.g. \"1700000037:0\")");
        let (secs, nanos) = s.split_once(':').ok_or_else(bad)?;
        let all_digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
        if !all_digits(secs) || !all_digits(nanos) {
            return Err(bad());
        }
        let secs: u64 = secs.parse().map_err(|_| bad())?;
        let nanos: u32 = nanos.parse().map_err(|_| bad())?;
        if nanos >= 1_000_000_000 {
            return Err(bad());
        }
        Ok(Tai { secs, nanos })
    }
}
