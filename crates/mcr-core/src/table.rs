//! The match table a worker forwards with: built from a
//! [`TableSnapshot`], looked up once per packet by (input interface, VLAN,
//! destination, port) and then by source, (S,G) before (*,G).

use std::net::{IpAddr, SocketAddr};

use rustc_hash::FxHashMap;

use crate::forward::FrameRewrite;
use crate::rule::{Dscp, Input, Mode, Output, RistEndpoint, SourcePolicy, SrtEndpoint, Ttl};
use crate::snapshot::TableSnapshot;
use crate::wire::ethernet;

/// How one output sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputKind {
    /// A multicast output: a frame built here, sent on an AF_PACKET socket
    /// of the interface.
    Frame(FrameRewrite),
    /// A unicast output: the payload sent through a UDP socket, which the
    /// kernel routes.
    Udp {
        /// Where to.
        destination: SocketAddr,
        /// The address to send from (the interface's).
        source: IpAddr,
        /// TTL policy.
        ttl: Ttl,
        /// DSCP policy.
        dscp: Dscp,
    },
    /// An SRT output: the payload sent on every connection of the
    /// endpoint, by the worker that owns it.
    Srt(SrtEndpoint),
    /// A RIST output: the payload handed to librist, which sends it to
    /// every peer, by the worker that owns it.
    Rist(RistEndpoint),
}

/// One output, ready to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledOutput {
    /// Its statistics slot.
    pub slot: u32,
    /// The index of its interface (0: none, an SRT output).
    pub ifindex: u32,
    /// The interface's name (empty: none, an SRT output).
    pub interface: String,
    /// How it sends.
    pub kind: OutputKind,
}

/// One rule, ready to forward.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledRule {
    /// Its name.
    pub name: String,
    /// Its statistics slot.
    pub slot: u32,
    /// Its outputs.
    pub outputs: Vec<CompiledOutput>,
    /// With several inputs: how they make one stream.
    pub redundancy: Option<CompiledRedundancy>,
    /// Whether the health of its inputs is followed.
    pub health: bool,
    /// Its SRT inputs: which input (from 0) and the endpoint.
    pub srt_inputs: Vec<(usize, SrtEndpoint)>,
    /// Its RIST inputs: which input (from 0) and the endpoint.
    pub rist_inputs: Vec<(usize, RistEndpoint)>,
}

impl CompiledRule {
    /// Whether it has SRT or RIST endpoints, which worker 0 holds (so it
    /// takes the rule's frames).
    pub fn has_connections(&self) -> bool {
        !self.srt_inputs.is_empty()
            || !self.rist_inputs.is_empty()
            || self
                .outputs
                .iter()
                .any(|o| matches!(o.kind, OutputKind::Srt(_) | OutputKind::Rist(_)))
    }

    /// Whether one worker must take every frame of the rule: it has
    /// several inputs (that worker sees every copy of the stream), or SRT
    /// or RIST endpoints (worker 0's).
    pub fn pinned(&self) -> bool {
        self.redundancy.is_some() || self.has_connections()
    }

    /// The fanout member (taken modulo the workers) that a rule with
    /// several inputs and no connections goes to on its own: from its
    /// slot, which it keeps for its life, so the rule never moves while
    /// other rules come and go, and such rules spread over the workers.
    fn own_member(&self) -> u32 {
        // Slots are handed out in runs (a rule's, then its outputs'), so
        // they are mixed before the kernel takes them modulo the members.
        let h = self.slot.wrapping_mul(0x9e37_79b1);
        h ^ (h >> 16)
    }
}

/// How the inputs of a rule with several make one stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledRedundancy {
    /// The mode and its settings.
    pub mode: Mode,
    /// Each input's statistics slot (among the output slots), in order;
    /// then, arbitrating, each input's second slot (its line's health).
    pub input_slots: Vec<u32>,
    /// A failover held to this input (from 0) by `mcrctl switch`.
    pub forced: Option<usize>,
}

impl CompiledRedundancy {
    /// How many inputs.
    pub fn inputs(&self) -> usize {
        match self.mode {
            Mode::Arbitrate { .. } => self.input_slots.len() / 2,
            _ => self.input_slots.len(),
        }
    }

    /// Input `i`'s line slot, arbitrating.
    pub fn line_slot(&self, i: usize) -> Option<u32> {
        match self.mode {
            Mode::Arbitrate { .. } => self.input_slots.get(self.inputs() + i).copied(),
            _ => None,
        }
    }
}

/// A rule's input that takes a destination: the rule's index, and which
/// of its inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Taker {
    rule: usize,
    input: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Entry {
    any_source: Option<Taker>,
    by_source: Vec<(IpAddr, Taker)>,
}

/// The result of a lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup<'a> {
    /// The rule that takes the packet, and which of its inputs (0 for a
    /// rule with one).
    Rule(&'a CompiledRule, usize),
    /// Rules exist for the destination, but only for other sources.
    WrongSource,
    /// No rule for the destination.
    NoRule,
}

/// A destination rules take, and those rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination<'a> {
    /// The input interface.
    pub ifindex: u32,
    /// The VLAN id (0: untagged).
    pub vlan: u16,
    /// The destination address.
    pub dst: IpAddr,
    /// The destination port.
    pub port: u16,
    /// The rule for any other source, if any.
    pub any_source: Option<&'a CompiledRule>,
    /// Which of that rule's inputs it is (0 for a rule with one).
    pub any_source_input: usize,
    /// The rules for given sources, and which of each rule's inputs.
    pub by_source: Vec<(IpAddr, &'a CompiledRule)>,
    /// Which input of its rule each of `by_source` is.
    pub by_source_inputs: Vec<usize>,
}

/// The compiled rule table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MatchTable {
    /// The snapshot version it was built from.
    pub version: u64,
    rules: Vec<CompiledRule>,
    entries: FxHashMap<InputKey, Entry>,
}

/// What a packet is looked up by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct InputKey {
    /// The interface it arrived on.
    ifindex: u32,
    /// Its VLAN id (0: untagged).
    vlan: u16,
    /// Its destination address.
    dst: IpAddr,
    /// Its destination port.
    port: u16,
}

/// Why a snapshot could not be compiled (the supervisor validated it, so
/// this means an interface changed under it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("rule `{rule}`: {reason}")]
pub struct CompileError {
    /// The rule.
    pub rule: String,
    /// What is missing.
    pub reason: String,
}

impl MatchTable {
    /// Builds the table from a snapshot, rule by rule: a rule that cannot be
    /// set up (an interface that vanished or lost its address since the
    /// supervisor validated it) is left out and reported, and every other
    /// rule forwards.
    pub fn compile(snap: &TableSnapshot) -> (MatchTable, Vec<CompileError>) {
        let mut t = MatchTable {
            version: snap.version,
            ..Default::default()
        };
        let mut errors = Vec::new();
        for sr in &snap.rules {
            if let Err(e) = t.add(sr, &snap.interfaces, &mut errors) {
                errors.push(e);
            }
        }
        (t, errors)
    }

    /// Adds one rule; an input of a rule with several that cannot be set
    /// up is reported in `partly` and the rule forwards from the others.
    fn add(
        &mut self,
        sr: &crate::snapshot::SlottedRule,
        interfaces: &crate::interfaces::Interfaces,
        partly: &mut Vec<CompileError>,
    ) -> Result<(), CompileError> {
        let t = self;
        {
            let r = &sr.rule;
            // Turned off: nothing to take or send (its slots stay).
            if !r.enabled {
                return Ok(());
            }
            let bad = |reason: String| CompileError {
                rule: r.name.clone(),
                reason,
            };
            let mut inputs = Vec::with_capacity(r.input_count());
            let mut srt_inputs = Vec::new();
            let mut rist_inputs = Vec::new();
            for (k, input) in r.inputs().enumerate() {
                let input = match input {
                    Input::Udp(u) => u,
                    Input::Srt(e) => {
                        srt_inputs.push((k, e.clone()));
                        continue;
                    }
                    Input::Rist(e) => {
                        rist_inputs.push((k, e.clone()));
                        continue;
                    }
                };
                match interfaces.get(&input.interface) {
                    Some(i) => inputs.push((k, input, i.index)),
                    None => partly.push(bad(format!("input interface `{}` is unknown", input.interface))),
                }
            }
            let carried = srt_inputs.len() + rist_inputs.len();
            if inputs.is_empty() && carried == 0 {
                // Said above, once per input.
                return Err(partly.pop().unwrap_or_else(|| bad("no input".into())));
            }
            if r.redundancy.is_none() && inputs.len() + carried < r.input_count() {
                return Err(partly.pop().unwrap_or_else(|| bad("no input".into())));
            }
            let mut outputs = Vec::with_capacity(r.outputs.len());
            for (o, &slot) in r.outputs.iter().zip(&sr.output_slots) {
                // SRT and RIST outputs: no interface, a worker sends.
                let carried = |kind| CompiledOutput {
                    slot,
                    ifindex: 0,
                    interface: String::new(),
                    kind,
                };
                let o = match o {
                    Output::Udp(u) if !u.enabled => continue,
                    Output::Udp(u) => u,
                    Output::Srt(e) => {
                        outputs.push(carried(OutputKind::Srt(e.clone())));
                        continue;
                    }
                    Output::Rist(e) => {
                        outputs.push(carried(OutputKind::Rist(e.clone())));
                        continue;
                    }
                };
                let iface = interfaces
                    .get(&o.interface)
                    .ok_or_else(|| bad(format!("output interface `{}` is unknown", o.interface)))?;
                let dst = o.destination.ip();
                let family = if dst.is_ipv4() { "IPv4" } else { "IPv6" };
                let kind = match ethernet::multicast_mac(dst) {
                    Some(dst_mac) => OutputKind::Frame(FrameRewrite {
                        dst_mac,
                        src_mac: iface.mac,
                        vlan: o.vlan,
                        dst,
                        dst_port: o.destination.port(),
                        src: match o.source {
                            // (An SRT input's datagrams are IPv4.)
                            SourcePolicy::Keep
                                if r.first_udp_input().is_none_or(|u| u.destination.is_ipv4()) == dst.is_ipv4() =>
                            {
                                None
                            }
                            SourcePolicy::Keep => {
                                return Err(bad(format!("source=keep cannot carry a source into {family}")));
                            }
                            SourcePolicy::Address(a) if a.is_ipv4() == dst.is_ipv4() => Some(a),
                            SourcePolicy::Address(a) => return Err(bad(format!("source {a} is not {family}"))),
                            SourcePolicy::Interface => Some(
                                iface
                                    .address_like(dst)
                                    .ok_or_else(|| bad(format!("`{}` has no {family} address", o.interface)))?,
                            ),
                        },
                        ttl: o.ttl,
                        dscp: o.dscp,
                        mtu: iface.mtu,
                    }),
                    None => OutputKind::Udp {
                        destination: o.destination,
                        source: iface
                            .address_like(dst)
                            .ok_or_else(|| bad(format!("`{}` has no {family} address", o.interface)))?,
                        ttl: o.ttl,
                        dscp: o.dscp,
                    },
                };
                outputs.push(CompiledOutput {
                    slot,
                    ifindex: iface.index,
                    interface: o.interface.clone(),
                    kind,
                });
            }
            let idx = t.rules.len();
            t.rules.push(CompiledRule {
                name: r.name.clone(),
                slot: sr.slot,
                outputs,
                redundancy: r.redundancy.as_ref().map(|x| CompiledRedundancy {
                    mode: x.mode,
                    input_slots: sr.input_slots.clone(),
                    forced: sr.forced_input,
                }),
                health: r.health,
                srt_inputs,
                rist_inputs,
            });
            for (k, input, ifindex) in inputs {
                let key = InputKey {
                    ifindex,
                    vlan: input.vlan.unwrap_or(0),
                    dst: input.destination.ip(),
                    port: input.destination.port(),
                };
                let taker = Taker { rule: idx, input: k };
                let e = t.entries.entry(key).or_default();
                if input.sources.is_empty() {
                    e.any_source = Some(taker);
                }
                e.by_source.extend(input.sources.iter().map(|&s| (s, taker)));
            }
        }
        Ok(())
    }

    /// The rule for a packet that arrived on `ifindex` (on VLAN `vlan`, 0
    /// if untagged), sent from `src` to `dst:port`: the (S,G) rule for its
    /// source if there is one, otherwise the (*,G) rule.
    pub fn lookup(&self, ifindex: u32, vlan: u16, dst: IpAddr, port: u16, src: IpAddr) -> Lookup<'_> {
        let Some(e) = self.entries.get(&InputKey {
            ifindex,
            vlan,
            dst,
            port,
        }) else {
            return Lookup::NoRule;
        };
        let taker = e
            .by_source
            .iter()
            .find(|(s, _)| *s == src)
            .map(|&(_, t)| t)
            .or(e.any_source);
        match taker {
            Some(t) => Lookup::Rule(&self.rules[t.rule], t.input),
            None => Lookup::WrongSource,
        }
    }

    /// Every compiled rule.
    pub fn rules(&self) -> &[CompiledRule] {
        &self.rules
    }

    /// Every destination rules take, with the rules that take it: the
    /// any-source rule, if there is one, and the source-specific ones.
    pub fn destinations(&self) -> impl Iterator<Item = Destination<'_>> {
        self.entries.iter().map(|(k, e)| Destination {
            ifindex: k.ifindex,
            vlan: k.vlan,
            dst: k.dst,
            port: k.port,
            any_source: e.any_source.map(|t| &self.rules[t.rule]),
            any_source_input: e.any_source.map_or(0, |t| t.input),
            by_source: e.by_source.iter().map(|&(s, t)| (s, &self.rules[t.rule])).collect(),
            by_source_inputs: e.by_source.iter().map(|&(_, t)| t.input).collect(),
        })
    }

    /// The unicast destinations rules take on interface `ifindex` (the
    /// ingress filter lets them in besides multicast).
    pub fn unicast_inputs(&self, ifindex: u32) -> Vec<IpAddr> {
        let mut v: Vec<IpAddr> = self
            .entries
            .keys()
            .filter(|k| k.ifindex == ifindex && !k.dst.is_multicast())
            .map(|k| k.dst)
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// The VLANs rules take on interface `ifindex` (the ingress filter lets
    /// frames tagged with them in; untagged frames always).
    pub fn vlans(&self, ifindex: u32) -> Vec<u16> {
        let mut v: Vec<u16> = self
            .entries
            .keys()
            .filter(|k| k.ifindex == ifindex && k.vlan != 0)
            .map(|k| k.vlan)
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// The fanout member of each pinned rule ([`CompiledRule::pinned`]),
    /// by rule index: 0 (worker 0) for a rule with connections, and for
    /// rules that share an input destination with another pinned rule
    /// (the fanout program tells frames apart by destination, not source,
    /// so such rules must be on one worker); otherwise the rule's own
    /// member, so that rules with several inputs spread over the workers.
    fn pin_members(&self) -> Vec<Option<u32>> {
        let mut members: Vec<Option<u32>> = self
            .rules
            .iter()
            .map(|r| r.pinned().then(|| if r.has_connections() { 0 } else { r.own_member() }))
            .collect();
        let mut takers: FxHashMap<(u32, IpAddr, u16), Vec<usize>> = FxHashMap::default();
        for (k, e) in &self.entries {
            let rules = e.any_source.iter().chain(e.by_source.iter().map(|(_, t)| t));
            for t in rules.filter(|t| members[t.rule].is_some()) {
                let v = takers.entry((k.ifindex, k.dst, k.port)).or_default();
                if !v.contains(&t.rule) {
                    v.push(t.rule);
                }
            }
        }
        for shared in takers.values().filter(|v| v.len() > 1) {
            for &r in shared {
                members[r] = Some(0);
            }
        }
        members
    }

    /// The inputs on interface `ifindex` whose every frame one worker must
    /// take, each with its fanout member ([`crate::bpf::fanout_program`]
    /// pins them).
    pub fn pinned_inputs(&self, ifindex: u32) -> Vec<crate::bpf::Pin> {
        let members = self.pin_members();
        let mut v: Vec<crate::bpf::Pin> = Vec::new();
        for (k, e) in self.entries.iter().filter(|(k, _)| k.ifindex == ifindex) {
            let rules = e.any_source.iter().chain(e.by_source.iter().map(|(_, t)| t));
            if let Some(member) = rules.filter_map(|t| members[t.rule]).min() {
                v.push(crate::bpf::Pin {
                    dst: k.dst,
                    port: k.port,
                    member,
                });
            }
        }
        v.sort();
        v.dedup();
        v
    }

    /// By rule index, the worker (of `workers`) that takes every frame of
    /// a pinned rule ([`CompiledRule::pinned`]); none for a rule whose
    /// frames go by flow.
    pub fn pinned_workers(&self, workers: usize) -> Vec<Option<usize>> {
        self.pin_members()
            .into_iter()
            .map(|m| m.map(|m| m as usize % workers.max(1)))
            .collect()
    }

    /// The input interfaces the rules use.
    pub fn input_interfaces(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.entries.keys().map(|k| k.ifindex).collect();
        v.sort();
        v.dedup();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interfaces::{InterfaceInfo, Interfaces};
    use crate::rule::Rule;
    use crate::snapshot::SlottedRule;

    fn snap(rules: &[(&str, &str, &[&str])]) -> TableSnapshot {
        let iface =
            |name: &str, index, addr: &str| InterfaceInfo::ethernet(name, index, [addr.parse().expect("literal")]);
        TableSnapshot {
            version: 7,
            rules: rules
                .iter()
                .enumerate()
                .map(|(i, (name, input, outs))| SlottedRule {
                    rule: Rule::new(
                        *name,
                        input.parse().expect("input"),
                        outs.iter().map(|o| o.parse().expect("output")).collect(),
                    ),
                    slot: i as u32 + 10,
                    output_slots: (0..outs.len() as u32).map(|k| 100 * i as u32 + k).collect(),
                    input_slots: Vec::new(),
                    forced_input: None,
                })
                .collect(),
            interfaces: Interfaces::new([iface("veth1", 2, "10.0.0.2"), iface("veth2", 3, "10.0.1.1")]),
            fanout: Vec::new(),
        }
    }

    #[test]
    fn rules_with_several_inputs_spread_over_the_workers_and_shared_destinations_stay_together() {
        let merged = |name: &str, a: &str, b: &str, out: &str| {
            let mut r = Rule::new(name, a.parse().expect("input"), vec![out.parse().expect("output")]);
            r.redundancy = Some(crate::rule::Redundancy {
                mode: crate::rule::Mode::MERGE,
                inputs: vec![b.parse().expect("input")],
            });
            r
        };
        let mut rules: Vec<Rule> = (1..=8)
            .map(|i| {
                merged(
                    &format!("m{i}"),
                    &format!("veth1:239.1.1.{i}:5001"),
                    &format!("veth1:239.2.1.{i}:5001"),
                    &format!("veth2:239.10.1.{i}:6001"),
                )
            })
            .collect();
        // Two merges that share a destination (other sources), and a plain
        // rule on it too.
        rules.push(merged(
            "s1",
            "veth1:239.3.1.1:5001,source=10.0.0.1",
            "veth1:239.4.1.1:5001",
            "veth2:239.11.1.1:6001",
        ));
        rules.push(merged(
            "s2",
            "veth1:239.3.1.1:5001,source=10.0.0.9",
            "veth1:239.5.1.1:5001",
            "veth2:239.11.1.2:6001",
        ));
        rules.push(Rule::new(
            "plain",
            "veth1:239.6.1.1:5001".parse().expect("input"),
            vec!["veth2:239.12.1.1:6001".parse().expect("output")],
        ));
        let mut s = snap(&[]);
        s.rules = rules
            .into_iter()
            .enumerate()
            .map(|(i, rule)| {
                let i = i as u32;
                let inputs = if rule.redundancy.is_some() { 2 } else { 0 };
                SlottedRule {
                    rule,
                    slot: 10 + i,
                    output_slots: vec![1000 + 10 * i],
                    input_slots: (0..inputs).map(|k| 1001 + 10 * i + k).collect(),
                    forced_input: None,
                }
            })
            .collect();
        let t = compiled(&s);
        let workers = t.pinned_workers(2);
        let of = |name: &str| {
            let i = t.rules().iter().position(|r| r.name == name).expect("rule");
            workers[i]
        };
        let spread: Vec<usize> = (1..=8).map(|i| of(&format!("m{i}")).expect("pinned")).collect();
        assert!(spread.contains(&0) && spread.contains(&1), "{spread:?}");
        assert_eq!((of("s1"), of("s2"), of("plain")), (Some(0), Some(0), None));
        // Every input of a rule is pinned to its worker's member, and a
        // destination is pinned once.
        let pins = t.pinned_inputs(2);
        let member_of = |group: &str| {
            let dst: IpAddr = group.parse().expect("literal");
            let found: Vec<u32> = pins.iter().filter(|p| p.dst == dst).map(|p| p.member).collect();
            assert_eq!(found.len(), 1, "{group}: {pins:?}");
            found[0] as usize % 2
        };
        for i in 1..=8 {
            let w = of(&format!("m{i}"));
            assert_eq!(Some(member_of(&format!("239.1.1.{i}"))), w);
            assert_eq!(Some(member_of(&format!("239.2.1.{i}"))), w);
        }
        for g in ["239.3.1.1", "239.4.1.1", "239.5.1.1"] {
            assert_eq!(member_of(g), 0);
        }
        assert!(
            !pins
                .iter()
                .any(|p| p.dst == "239.6.1.1".parse::<IpAddr>().expect("literal"))
        );
        // A rule keeps its worker when others come and go.
        let mut fewer = s.clone();
        fewer.rules.retain(|r| r.rule.name != "m1" && r.rule.name != "m5");
        let t2 = compiled(&fewer);
        let w2 = t2.pinned_workers(2);
        for (r, w) in t2.rules().iter().zip(&w2) {
            assert_eq!(*w, of(&r.name), "{}", r.name);
        }
    }

    #[test]
    fn source_specific_wins_over_any_source() {
        let t = compiled(&snap(&[
            ("any", "veth1:239.1.1.1:5001", &["veth2:239.10.1.1:6001"]),
            ("s1", "veth1:239.1.1.1:5001,source=10.0.0.1", &["veth2:239.10.1.2:6001"]),
        ]));
        let g: IpAddr = "239.1.1.1".parse().expect("literal");
        let from = |s: &str| t.lookup(2, 0, g, 5001, s.parse().expect("literal"));
        assert!(matches!(from("10.0.0.1"), Lookup::Rule(r, 0) if r.name == "s1"));
        assert!(matches!(from("10.0.0.9"), Lookup::Rule(r, 0) if r.name == "any"));
        assert_eq!(
            t.lookup(2, 0, g, 5002, "10.0.0.1".parse().expect("literal")),
            Lookup::NoRule
        );
        assert_eq!(
            t.lookup(3, 0, g, 5001, "10.0.0.1".parse().expect("literal")),
            Lookup::NoRule
        );
    }

    #[test]
    fn only_source_specific_rules_turn_other_sources_away() {
        let t = compiled(&snap(&[(
            "s1",
            "veth1:239.1.1.1:5001,source=10.0.0.1",
            &["veth2:239.10.1.2:6001"],
        )]));
        let g: IpAddr = "239.1.1.1".parse().expect("literal");
        assert_eq!(
            t.lookup(2, 0, g, 5001, "10.0.0.9".parse().expect("literal")),
            Lookup::WrongSource
        );
    }

    #[test]
    fn outputs_resolve_macs_sources_and_slots() {
        let t = compiled(&snap(&[(
            "a",
            "veth1:10.0.0.2:5001",
            &[
                "veth2:239.10.1.1:6001,ttl=4",
                "veth2:239.10.1.2:6002,source=keep",
                "veth2:10.0.1.2:7000",
            ],
        )]));
        assert_eq!(t.version, 7);
        let r = &t.rules()[0];
        assert_eq!(r.slot, 10);
        let OutputKind::Frame(f) = &r.outputs[0].kind else {
            panic!("multicast output builds frames")
        };
        assert_eq!(f.dst_mac, [1, 0, 0x5e, 10, 1, 1]);
        assert_eq!(f.src_mac, [2, 0, 0, 0, 0, 3]);
        assert_eq!(f.src, Some(IpAddr::from([10, 0, 1, 1])));
        assert_eq!(f.ttl, Ttl::Fixed(4));
        let OutputKind::Frame(k) = &r.outputs[1].kind else {
            panic!("frames")
        };
        assert_eq!(k.src, None);
        assert!(matches!(r.outputs[2].kind, OutputKind::Udp { .. }));
        assert_eq!(r.outputs.iter().map(|o| o.slot).collect::<Vec<_>>(), vec![0, 1, 2]);
        assert_eq!(t.unicast_inputs(2), vec![IpAddr::from([10, 0, 0, 2])]);
        assert_eq!(t.input_interfaces(), vec![2]);
    }

    #[test]
    fn vlans_and_source_lists_are_part_of_the_match() {
        let t = compiled(&snap(&[
            ("v100", "veth1:239.1.1.1:5001,vlan=100", &["veth2:239.10.1.1:6001"]),
            ("plain", "veth1:239.1.1.1:5001", &["veth2:239.10.1.2:6001,vlan=200"]),
            (
                "ssm",
                "veth1:232.1.1.1:5001,source=10.0.0.1,source=10.0.0.3",
                &["veth2:239.10.1.3:6001"],
            ),
        ]));
        let g: IpAddr = "239.1.1.1".parse().expect("literal");
        let s: IpAddr = "10.0.0.9".parse().expect("literal");
        assert!(matches!(t.lookup(2, 100, g, 5001, s), Lookup::Rule(r, 0) if r.name == "v100"));
        assert!(matches!(t.lookup(2, 0, g, 5001, s), Lookup::Rule(r, 0) if r.name == "plain"));
        assert_eq!(t.lookup(2, 300, g, 5001, s), Lookup::NoRule);
        let ssm: IpAddr = "232.1.1.1".parse().expect("literal");
        for src in ["10.0.0.1", "10.0.0.3"] {
            assert!(
                matches!(t.lookup(2, 0, ssm, 5001, src.parse().expect("literal")), Lookup::Rule(r, 0) if r.name == "ssm")
            );
        }
        assert_eq!(
            t.lookup(2, 0, ssm, 5001, "10.0.0.2".parse().expect("literal")),
            Lookup::WrongSource
        );
        assert_eq!(t.vlans(2), vec![100]);
        let OutputKind::Frame(f) = &t.rules()[1].outputs[0].kind else {
            panic!("frames")
        };
        assert_eq!(f.vlan, Some(200));
    }

    #[test]
    fn outputs_of_the_other_family_take_the_interfaces_address_of_theirs() {
        let mut s = snap(&[(
            "x",
            "veth1:239.1.1.1:5001",
            &["veth2:[ff3e::10]:6001,dscp=46", "veth2:[2001:db8::9]:7000"],
        )]);
        let v6: IpAddr = "2001:db8::1".parse().expect("literal");
        let mut ifs: Vec<_> = s.interfaces.iter().cloned().collect();
        ifs[1].addresses.push(v6);
        s.interfaces = Interfaces::new(ifs);
        let t = compiled(&s);
        let OutputKind::Frame(f) = &t.rules()[0].outputs[0].kind else {
            panic!("frames")
        };
        assert_eq!(f.dst_mac, [0x33, 0x33, 0, 0, 0, 0x10]);
        assert_eq!((f.src, f.dscp), (Some(v6), Dscp::Set(46)));
        assert!(matches!(t.rules()[0].outputs[1].kind, OutputKind::Udp { source, .. } if source == v6));
        let keep = snap(&[("k", "veth1:239.1.1.1:5001", &["veth2:[ff3e::10]:6001,source=keep"])]);
        let (_, errors) = MatchTable::compile(&keep);
        assert!(errors[0].reason.contains("source=keep cannot carry"), "{errors:?}");
    }

    fn compiled(s: &TableSnapshot) -> MatchTable {
        let (t, errors) = MatchTable::compile(s);
        assert!(errors.is_empty(), "{errors:?}");
        t
    }

    #[test]
    fn a_rule_or_an_output_turned_off_takes_or_sends_nothing() {
        let mut s = snap(&[
            (
                "a",
                "veth1:239.1.1.1:5001",
                &["veth2:239.10.1.1:6001,enabled=false", "veth2:239.10.1.2:6001"],
            ),
            ("b", "veth1:239.1.1.2:5001", &["veth2:239.10.1.3:6001"]),
        ]);
        s.rules[1].rule.enabled = false;
        let t = compiled(&s);
        assert_eq!(t.rules().len(), 1);
        assert_eq!(t.rules()[0].outputs.len(), 1);
        assert_eq!(t.rules()[0].outputs[0].slot, s.rules[0].output_slots[1]);
        let lookup = |group: &str| {
            t.lookup(
                2,
                0,
                group.parse().expect("literal"),
                5001,
                "10.0.0.1".parse().expect("literal"),
            )
        };
        assert!(matches!(lookup("239.1.1.1"), Lookup::Rule(..)));
        assert!(!matches!(lookup("239.1.1.2"), Lookup::Rule(..)));
        assert!(crate::plane::claims::claim_of(&s.rules[1].rule, &s.interfaces).is_none());
        assert!(crate::plane::claims::claim_of(&s.rules[0].rule, &s.interfaces).is_some());
    }

    #[test]
    fn a_rule_whose_interface_vanished_is_left_out_and_the_rest_forwards() {
        let mut s = snap(&[
            ("a", "veth1:239.1.1.1:5001", &["veth2:239.10.1.1:6001"]),
            ("b", "veth1:239.1.1.2:5001", &["veth9:239.10.1.2:6001"]),
        ]);
        let (t, errors) = MatchTable::compile(&s);
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].rule, "b");
        assert!(errors[0].to_string().contains("`veth9` is unknown"), "{}", errors[0]);
        assert_eq!(t.rules().len(), 1);
        assert!(matches!(
            t.lookup(
                2,
                0,
                "239.1.1.1".parse().expect("literal"),
                5001,
                "10.0.0.1".parse().expect("literal")
            ),
            Lookup::Rule(..)
        ));
        s.interfaces = Interfaces::default();
        let (t, errors) = MatchTable::compile(&s);
        assert_eq!((t.rules().len(), errors.len()), (0, 2));
    }
}
