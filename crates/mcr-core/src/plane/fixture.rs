//! What the control plane's tests share: a host of two interfaces that
//! come and go, rules from a small set (so that they share and swap
//! claims), and the host as the actions leave it.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use crate::interfaces::{InterfaceInfo, Interfaces};
use crate::rule::Rule;

use super::claims::{Action, JoinKey};

/// The host's interfaces: `in0` and `in1`, each there or not.
pub fn ifs(present: &[bool; 2]) -> Interfaces {
    let all = [
        InterfaceInfo::ethernet("in0", 2, ["10.0.0.2".parse().expect("literal")]),
        InterfaceInfo::ethernet("in1", 3, ["10.0.1.2".parse().expect("literal")]),
    ];
    Interfaces::new(all.into_iter().zip(present).filter(|(_, p)| **p).map(|(i, _)| i))
}

/// How many rules [`rule`] makes.
pub const RULE_KINDS: u8 = 30;

/// A rule whose input is one of a small set: `which` (below
/// [`RULE_KINDS`]) picks the interface, the group (or a unicast port) and
/// the sources; from 24 on, a rule with two inputs, one of them a group of
/// the rules before and the other a unicast port of its own.
pub fn rule(name: &str, which: u8) -> Rule {
    if which >= 24 {
        let group = which % 3;
        let mut r = rule(name, which % 2 + 2 * group);
        r.redundancy = Some(crate::rule::Redundancy {
            mode: crate::rule::Mode::MERGE,
            inputs: vec![
                format!("in{}:10.0.{}.2:{}", which % 2, which % 2, 7100 + u16::from(which))
                    .parse()
                    .expect("input"),
            ],
        });
        return r;
    }
    let ifname = if which & 1 == 0 { "in0" } else { "in1" };
    let group = (which >> 1) % 3;
    let input = match which >> 3 {
        0 => format!("{ifname}:239.1.1.{group}:5001"),
        1 => format!(
            "{ifname}:239.1.1.{group}:5001,source=10.9.0.1,source=10.9.0.{}",
            group + 2
        ),
        _ => format!("{ifname}:10.0.0.2:{}", 7000 + u16::from(group)),
    };
    Rule {
        name: name.into(),
        input: input.parse().expect("input"),
        redundancy: None,
        outputs: vec!["in1:239.10.1.1:6001".parse().expect("output")],
        health: !which.is_multiple_of(5),
        enabled: true,
    }
}

/// The host as the actions leave it: what is joined and held. Leaving
/// or freeing what is not held panics.
#[derive(Debug, Default)]
pub struct Host {
    /// The memberships.
    pub joined: BTreeSet<JoinKey>,
    /// The ports.
    pub held: BTreeSet<SocketAddr>,
}

impl Host {
    /// Carries out `a`.
    pub fn apply(&mut self, a: &Action) {
        match a {
            Action::Join { key, .. } => {
                self.joined.insert(*key);
            }
            Action::HoldPort(p) => {
                self.held.insert(*p);
            }
            Action::Leave(key) => assert!(self.joined.remove(key), "left {key:?}, not joined"),
            Action::FreePort(p) => assert!(self.held.remove(p), "freed {p}, not held"),
        }
    }
}

/// What `rules` need the host to hold on `ifs`: memberships and ports.
pub fn needed<'a>(rules: impl IntoIterator<Item = &'a Rule>, ifs: &Interfaces) -> Host {
    let mut host = Host::default();
    for r in rules {
        if let Some(c) = super::claims::claim_of(r, ifs) {
            host.joined.extend(c.joins);
            host.held.extend(c.ports);
        }
    }
    host
}
