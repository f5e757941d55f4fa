//! Stream lists: `239.1.1.1+50:5001+` and friends.
//!
//! A spec is a comma-separated list of items. Each item is an address and a
//! port, either of which may count up:
//!
//! | item | streams |
//! |---|---|
//! | `239.1.1.1:5001` | one |
//! | `239.1.1.1+50:5001+` | 50: 239.1.1.1:5001, 239.1.1.2:5002, … 239.1.1.50:5050 |
//! | `239.1.1.1+50:5001` | 50 groups, all on port 5001 |
//! | `239.1.1.1:5001+10` | 10 ports on one group |
//! | `[ff3e::1]+4:5001+` | IPv6 addresses go in brackets |
//!
//! Stream ids are positions in the expanded list, from 0.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The most streams one spec may expand to.
pub const MAX_STREAMS: usize = 20_000;

/// Why a spec was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// One item is malformed.
    #[error("stream `{item}`: {reason}")]
    Item {
        /// The item as written.
        item: String,
        /// What is wrong and what would be right.
        reason: String,
    },
    /// The same address and port twice.
    #[error("stream {0} is listed twice")]
    Duplicate(SocketAddr),
    /// Nothing to do.
    #[error("no streams given: write e.g. 239.1.1.1:5001 or 239.1.1.1+10:5001+")]
    Empty,
    /// More than [`MAX_STREAMS`].
    #[error("{0} streams is more than the {MAX_STREAMS} one run takes")]
    TooMany(usize),
}

/// Expands a spec into its streams, in order.
pub fn parse(spec: &str) -> Result<Vec<SocketAddr>, SpecError> {
    let mut out = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        expand_item(item, &mut out)?;
        if out.len() > MAX_STREAMS {
            return Err(SpecError::TooMany(out.len()));
        }
    }
    if out.is_empty() {
        return Err(SpecError::Empty);
    }
    let mut seen = HashSet::with_capacity(out.len());
    for a in &out {
        if !seen.insert(*a) {
            return Err(SpecError::Duplicate(*a));
        }
    }
    Ok(out)
}

fn expand_item(item: &str, out: &mut Vec<SocketAddr>) -> Result<(), SpecError> {
    let bad = |reason: String| SpecError::Item {
        item: item.to_string(),
        reason,
    };
    // Split "ADDR[+N]" from "PORT[+[M]]".
    let (addr_part, port_part) = if let Some(rest) = item.strip_prefix('[') {
        let close = rest
            .find(']')
            .ok_or_else(|| bad("`[` without `]` around an IPv6 address".into()))?;
        let after = &rest[close + 1..];
        let colon = after
            .find(':')
            .ok_or_else(|| bad("no port: write ADDRESS:PORT, e.g. [ff3e::1]:5001".into()))?;
        (format!("{}{}", &rest[..close], &after[..colon]), &after[colon + 1..])
    } else {
        let colon = item
            .find(':')
            .ok_or_else(|| bad("no port: write ADDRESS:PORT, e.g. 239.1.1.1:5001".into()))?;
        if item[colon + 1..].contains(':') {
            return Err(bad("an IPv6 address goes in brackets, e.g. [ff3e::1]:5001".into()));
        }
        (item[..colon].to_string(), &item[colon + 1..])
    };
    let (addr_text, addr_count) = split_count(&addr_part).map_err(|r| bad(format!("address: {r}")))?;
    let addr: IpAddr = addr_text
        .parse()
        .map_err(|_| bad(format!("`{addr_text}` is not an IPv4 or IPv6 address")))?;
    let (port_text, port_plus, port_count) = match port_part.split_once('+') {
        None => (port_part, false, None),
        Some((p, "")) => (p, true, None),
        Some((p, n)) => (p, true, Some(parse_count(n).map_err(|r| bad(format!("port: {r}")))?)),
    };
    let port: u16 = port_text
        .parse()
        .map_err(|_| bad(format!("`{port_text}` is not a port (1-65535)")))?;
    if port == 0 {
        return Err(bad("port 0 cannot carry a stream; use 1-65535".into()));
    }
    let (count, addr_up, port_up) = match (addr_count, port_plus, port_count) {
        (None, false, _) => (1, false, false),
        (Some(n), false, _) => (n, true, false),
        (Some(n), true, None) => (n, true, true),
        (Some(n), true, Some(m)) if m == n => (n, true, true),
        (Some(n), true, Some(m)) => {
            return Err(bad(format!(
                "the address counts {n} but the port counts {m}; give one count"
            )));
        }
        (None, true, Some(m)) => (m, false, true),
        (None, true, None) => {
            return Err(bad(
                "`+` after the port counts up with the address and needs a count, as in 239.1.1.1+10:5001+ or 239.1.1.1:5001+10".into(),
            ));
        }
    };
    for i in 0..count {
        let a = if addr_up {
            nth_addr(addr, i).ok_or_else(|| bad(format!("address {addr} + {i} overflows")))?
        } else {
            addr
        };
        if addr.is_multicast() && !a.is_multicast() {
            return Err(bad(format!("the range leaves the multicast range at {a}")));
        }
        let p = if port_up {
            u16::try_from(u64::from(port) + i).map_err(|_| bad(format!("port {port} + {i} is past 65535")))?
        } else {
            port
        };
        out.push(SocketAddr::new(a, p));
        if out.len() > MAX_STREAMS {
            return Err(SpecError::TooMany(out.len()));
        }
    }
    Ok(())
}

/// Splits `TEXT+N` into (TEXT, Some(N)), or returns (TEXT, None).
fn split_count(s: &str) -> Result<(&str, Option<u64>), String> {
    match s.split_once('+') {
        None => Ok((s, None)),
        Some((t, n)) => Ok((t, Some(parse_count(n)?))),
    }
}

fn parse_count(n: &str) -> Result<u64, String> {
    match n.parse::<u64>() {
        Ok(0) => Err("a count of 0 gives no streams".into()),
        Ok(c) => Ok(c),
        Err(_) => Err(format!("`{n}` is not a count")),
    }
}

fn nth_addr(base: IpAddr, i: u64) -> Option<IpAddr> {
    match base {
        IpAddr::V4(a) => {
            let v = u32::from(a).checked_add(u32::try_from(i).ok()?)?;
            Some(IpAddr::V4(Ipv4Addr::from(v)))
        }
        IpAddr::V6(a) => {
            let v = u128::from(a).checked_add(u128::from(i))?;
            Some(IpAddr::V6(Ipv6Addr::from(v)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(list: &[&str]) -> Vec<SocketAddr> {
        list.iter().map(|a| a.parse().expect("literal")).collect()
    }

    #[test]
    fn single_and_lists() {
        assert_eq!(parse("239.1.1.1:5001").expect("ok"), s(&["239.1.1.1:5001"]));
        assert_eq!(
            parse("239.1.1.1:5001, 10.0.1.2:7000").expect("ok"),
            s(&["239.1.1.1:5001", "10.0.1.2:7000"])
        );
    }

    #[test]
    fn both_count_up() {
        let v = parse("239.1.1.1+50:5001+").expect("ok");
        assert_eq!(v.len(), 50);
        assert_eq!(v[0], "239.1.1.1:5001".parse().expect("literal"));
        assert_eq!(v[49], "239.1.1.50:5050".parse().expect("literal"));
        assert_eq!(
            parse("239.1.1.1+3:5001+3").expect("ok"),
            parse("239.1.1.1+3:5001+").expect("ok")
        );
    }

    #[test]
    fn addresses_or_ports_alone_count_up() {
        assert_eq!(
            parse("239.1.1.254+3:5001").expect("ok"),
            s(&["239.1.1.254:5001", "239.1.1.255:5001", "239.1.2.0:5001"])
        );
        assert_eq!(
            parse("239.1.1.1:5001+3").expect("ok"),
            s(&["239.1.1.1:5001", "239.1.1.1:5002", "239.1.1.1:5003"])
        );
    }

    #[test]
    fn ipv6_in_brackets() {
        assert_eq!(
            parse("[ff3e::1]+2:5001+").expect("ok"),
            s(&["[ff3e::1]:5001", "[ff3e::2]:5002"])
        );
        assert_eq!(parse("[ff3e::1]:9").expect("ok"), s(&["[ff3e::1]:9"]));
    }

    #[test]
    fn mistakes_say_what_is_wrong() {
        let cases = [
            ("239.1.1.1", "no port"),
            ("239.1.1.1:0", "port 0"),
            ("239.1.1.1:70000", "not a port"),
            ("239.1.1.x:5001", "not an IPv4 or IPv6 address"),
            ("239.1.1.1+0:5001", "count of 0"),
            ("239.1.1.1:5001+", "needs a count"),
            ("239.1.1.1+3:5001+4", "give one count"),
            ("239.255.255.255+2:5001", "leaves the multicast range"),
            ("239.1.1.1:65535+2", "past 65535"),
            ("ff3e::1:5001", "brackets"),
            ("[ff3e::1:5001", "without `]`"),
            ("[ff3e::1]5001", "no port"),
            ("255.255.255.255+2:1", "overflows"),
        ];
        for (spec, needle) in cases {
            let e = parse(spec).expect_err(spec).to_string();
            assert!(e.contains(needle), "{spec}: {e}");
            assert!(e.contains(spec.split(',').next().unwrap_or(spec)), "{spec}: {e}");
        }
        assert_eq!(parse(" , "), Err(SpecError::Empty));
        assert_eq!(
            parse("239.1.1.1:5001,239.1.1.1:5001"),
            Err(SpecError::Duplicate("239.1.1.1:5001".parse().expect("literal")))
        );
        assert!(matches!(parse("239.1.1.1+200000:5001"), Err(SpecError::TooMany(_))));
    }
}
