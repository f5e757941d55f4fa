//! Validation of rules: every rejection names the field and says what is
//! wrong with it.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use serde::{Deserialize, Serialize};

use crate::interfaces::Interfaces;
use crate::rule::{Input, Rule, SourcePolicy, Ttl};

/// The most outputs one rule may have.
pub const MAX_OUTPUTS_PER_RULE: usize = 4096;
/// The longest rule name.
pub const MAX_NAME_LEN: usize = 64;

/// Why a rule was refused: which rule, which field, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("rule `{rule}`: {field}: {reason}")]
pub struct RuleError {
    /// The rule's name.
    pub rule: String,
    /// The field, e.g. `input.destination` or `outputs[2].interface`.
    pub field: String,
    /// What is wrong, and what would be right.
    pub reason: String,
}

fn err(rule: &Rule, field: impl Into<String>, reason: impl Into<String>) -> RuleError {
    RuleError {
        rule: rule.name.clone(),
        field: field.into(),
        reason: reason.into(),
    }
}

/// IPv4 only for now; the types already hold IPv6.
fn check_family(rule: &Rule, field: &str, a: IpAddr) -> Result<(), RuleError> {
    if a.is_ipv6() {
        return Err(err(
            rule,
            field,
            format!("{a}: IPv6 streams are not supported yet; use IPv4"),
        ));
    }
    Ok(())
}

fn is_link_local_multicast(a: IpAddr) -> bool {
    match a {
        IpAddr::V4(v) => v.octets()[..3] == [224, 0, 0],
        IpAddr::V6(v) => v.segments()[0] & 0xff0f == 0xff02,
    }
}

/// Where a set of rules takes and sends its streams, to check one rule
/// against all the others in constant time (a reload checks thousands).
/// Each list keeps the order of the rules, so the rule a refusal names is
/// the first in that order.
#[derive(Debug, Default)]
pub struct RuleIndex<'a> {
    /// Rules by their whole input (interface, destination, source).
    inputs: HashMap<&'a Input, Vec<&'a str>>,
    /// Rules by input interface and destination.
    input_places: HashMap<(&'a str, SocketAddr), Vec<&'a str>>,
    /// Outputs by interface and destination: the rule and the output's
    /// index.
    output_places: HashMap<(&'a str, SocketAddr), Vec<(&'a str, usize)>>,
}

impl<'a> RuleIndex<'a> {
    /// The index of `rules`.
    pub fn new(rules: impl IntoIterator<Item = &'a Rule>) -> Self {
        let mut ix = RuleIndex::default();
        for r in rules {
            ix.inputs.entry(&r.input).or_default().push(&r.name);
            ix.input_places
                .entry((&r.input.interface, r.input.destination))
                .or_default()
                .push(&r.name);
            for (j, o) in r.outputs.iter().enumerate() {
                ix.output_places
                    .entry((&o.interface, o.destination))
                    .or_default()
                    .push((&r.name, j));
            }
        }
        ix
    }
}

/// Checks one rule on its own and against `others` (the rules it would
/// join; a rule of the same name among them is the one it replaces and is
/// ignored) and the host's `interfaces`.
pub fn check_rule(rule: &Rule, others: &[Rule], interfaces: &Interfaces) -> Result<(), RuleError> {
    check_rule_in(rule, &RuleIndex::new(others), interfaces)
}

/// [`check_rule`] against the rules of `index` (which may hold `rule`
/// itself, or the rule of the same name it replaces: both are ignored).
pub fn check_rule_in(rule: &Rule, index: &RuleIndex<'_>, interfaces: &Interfaces) -> Result<(), RuleError> {
    check_name(rule)?;
    check_input(rule, interfaces)?;
    if rule.outputs.is_empty() {
        return Err(err(rule, "outputs", "a rule needs at least one output"));
    }
    if rule.outputs.len() > MAX_OUTPUTS_PER_RULE {
        return Err(err(
            rule,
            "outputs",
            format!(
                "{} outputs is more than the {MAX_OUTPUTS_PER_RULE} one rule may have",
                rule.outputs.len()
            ),
        ));
    }
    for i in 0..rule.outputs.len() {
        check_output(rule, i, interfaces)?;
    }
    if let Some(o) = index
        .inputs
        .get(&rule.input)
        .and_then(|v| v.iter().find(|n| **n != rule.name))
    {
        {
            let from = match rule.input.source {
                Some(s) => format!("from {s}"),
                None => "from any source".into(),
            };
            return Err(err(
                rule,
                "input",
                format!(
                    "rule `{}` already takes {} {} ({from}); one input feeds one rule, which may have many outputs",
                    o, rule.input.interface, rule.input.destination
                ),
            ));
        }
    }
    check_loops(rule, index)
}

fn check_name(rule: &Rule) -> Result<(), RuleError> {
    let n = &rule.name;
    let ok_chars = n
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    let starts_ok = n.chars().next().is_some_and(|c| c.is_ascii_alphanumeric());
    if n.is_empty() || n.len() > MAX_NAME_LEN || !ok_chars || !starts_ok {
        return Err(err(
            rule,
            "name",
            format!(
                "`{n}` is not a rule name: use 1-{MAX_NAME_LEN} letters, digits, `.`, `_` or `-`, starting with a letter or digit"
            ),
        ));
    }
    Ok(())
}

fn check_interface(rule: &Rule, field: &str, name: &str, interfaces: &Interfaces) -> Result<(), RuleError> {
    match interfaces.get(name) {
        None => Err(err(
            rule,
            field,
            format!("interface `{name}` does not exist (known: {})", interfaces.names()),
        )),
        Some(i) if !i.ethernet => Err(err(
            rule,
            field,
            format!("interface `{name}` is not an Ethernet interface; MCR reads and writes Ethernet frames"),
        )),
        Some(_) => Ok(()),
    }
}

fn check_port(rule: &Rule, field: &str, a: &SocketAddr) -> Result<(), RuleError> {
    if a.port() == 0 {
        return Err(err(
            rule,
            field,
            format!("{a}: port 0 cannot carry a stream; use 1-65535"),
        ));
    }
    Ok(())
}

fn check_input(rule: &Rule, interfaces: &Interfaces) -> Result<(), RuleError> {
    let input = &rule.input;
    check_interface(rule, "input.interface", &input.interface, interfaces)?;
    let dst = input.destination.ip();
    check_family(rule, "input.destination", dst)?;
    check_port(rule, "input.destination", &input.destination)?;
    if dst.is_unspecified() || dst == IpAddr::V4(Ipv4Addr::BROADCAST) {
        return Err(err(
            rule,
            "input.destination",
            format!(
                "{dst} is not a stream's destination: give a multicast group or an address of {}",
                input.interface
            ),
        ));
    }
    if dst.is_multicast() {
        if is_link_local_multicast(dst) {
            return Err(err(
                rule,
                "input.destination",
                format!(
                    "{dst} is a link-local control group (224.0.0.0/24), which routers do not forward; use another group"
                ),
            ));
        }
    } else {
        let iface = interfaces.get(&input.interface);
        if !iface.is_some_and(|i| i.addresses.contains(&dst)) {
            let has = iface
                .map(|i| i.addresses.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", "))
                .unwrap_or_default();
            return Err(err(
                rule,
                "input.destination",
                format!(
                    "{dst} is neither a multicast group nor an address of {} (it has: {}); a unicast input takes traffic sent to this host",
                    input.interface,
                    if has.is_empty() { "none".to_string() } else { has }
                ),
            ));
        }
    }
    if let Some(src) = input.source {
        check_family(rule, "input.source", src)?;
        if src.is_multicast() || src.is_unspecified() || src == IpAddr::V4(Ipv4Addr::BROADCAST) {
            return Err(err(
                rule,
                "input.source",
                format!("{src} is not a sender's address: give a unicast address"),
            ));
        }
    }
    Ok(())
}

fn check_output(rule: &Rule, i: usize, interfaces: &Interfaces) -> Result<(), RuleError> {
    let o = &rule.outputs[i];
    let f = |name: &str| format!("outputs[{i}].{name}");
    check_interface(rule, &f("interface"), &o.interface, interfaces)?;
    let dst = o.destination.ip();
    check_family(rule, &f("destination"), dst)?;
    check_port(rule, &f("destination"), &o.destination)?;
    if dst.is_unspecified() || dst == IpAddr::V4(Ipv4Addr::BROADCAST) || dst.is_loopback() {
        return Err(err(
            rule,
            f("destination"),
            format!("{dst} is not a destination: give a multicast group or a unicast host"),
        ));
    }
    if dst.is_multicast() && is_link_local_multicast(dst) {
        return Err(err(
            rule,
            f("destination"),
            format!("{dst} is a link-local control group (224.0.0.0/24); use another group"),
        ));
    }
    if let Ttl::Fixed(0) = o.ttl {
        return Err(err(rule, f("ttl"), "a TTL of 0 never leaves; use 1-255 or decrement"));
    }
    let iface = interfaces.get(&o.interface);
    match o.source {
        SourcePolicy::Interface => {
            if iface.and_then(|i| i.address_like(dst)).is_none() {
                return Err(err(
                    rule,
                    f("source"),
                    format!(
                        "interface `{}` has no {} address to send from; give it one, or set source=keep or source=ADDRESS",
                        o.interface,
                        if dst.is_ipv4() { "IPv4" } else { "IPv6" }
                    ),
                ));
            }
        }
        SourcePolicy::Address(a) => {
            check_family(rule, &f("source"), a)?;
            if a.is_multicast() || a.is_unspecified() {
                return Err(err(rule, f("source"), format!("{a} cannot be a source address")));
            }
        }
        SourcePolicy::Keep => {}
    }
    if !dst.is_multicast() && o.source != SourcePolicy::Interface {
        return Err(err(
            rule,
            f("source"),
            "a unicast output sends through the kernel from the interface's address; source=keep and source=ADDRESS are for multicast outputs",
        ));
    }
    if let Some(j) = rule.outputs[..i]
        .iter()
        .position(|p| p.interface == o.interface && p.destination == o.destination)
    {
        return Err(err(
            rule,
            f("destination"),
            format!("outputs[{j}] already sends to {} on {}", o.destination, o.interface),
        ));
    }
    Ok(())
}

/// An output that lands on an input (same interface, destination and
/// port) would feed a rule its own or another rule's stream back.
fn check_loops(rule: &Rule, index: &RuleIndex<'_>) -> Result<(), RuleError> {
    for (i, o) in rule.outputs.iter().enumerate() {
        if o.interface == rule.input.interface && o.destination == rule.input.destination {
            return Err(err(
                rule,
                format!("outputs[{i}]"),
                format!("{} {} is this rule's own input: a loop", o.interface, o.destination),
            ));
        }
        let fed = index
            .input_places
            .get(&(o.interface.as_str(), o.destination))
            .and_then(|v| v.iter().find(|n| **n != rule.name));
        if let Some(r) = fed {
            return Err(err(
                rule,
                format!("outputs[{i}]"),
                format!("{} {} is rule `{r}`'s input: a loop", o.interface, o.destination),
            ));
        }
    }
    let feeding = index
        .output_places
        .get(&(rule.input.interface.as_str(), rule.input.destination))
        .and_then(|v| v.iter().find(|(n, _)| *n != rule.name));
    if let Some((r, j)) = feeding {
        return Err(err(
            rule,
            "input",
            format!(
                "rule `{r}` sends to {} {} (its outputs[{j}]): taking it as input would make a loop",
                rule.input.interface, rule.input.destination
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interfaces::InterfaceInfo;

    fn ifaces() -> Interfaces {
        let mk = |name: &str, index, addr: &str| InterfaceInfo {
            name: name.into(),
            index,
            mac: [2, 0, 0, 0, 0, index as u8],
            mtu: 1500,
            addresses: if addr.is_empty() {
                vec![]
            } else {
                vec![addr.parse().expect("literal")]
            },
            ethernet: name != "tun0",
        };
        Interfaces::new([
            mk("veth1", 2, "10.0.0.2"),
            mk("veth2", 3, "10.0.1.1"),
            mk("bare0", 4, ""),
            mk("tun0", 5, "10.9.0.1"),
        ])
    }

    fn rule(name: &str, input: &str, outputs: &[&str]) -> Rule {
        Rule {
            name: name.into(),
            input: input.parse().expect("input"),
            outputs: outputs.iter().map(|o| o.parse().expect("output")).collect(),
        }
    }

    fn refused(r: &Rule, others: &[Rule]) -> RuleError {
        check_rule(r, others, &ifaces()).expect_err("should be refused")
    }

    #[test]
    fn a_plain_translation_is_accepted() {
        let r = rule(
            "feed-a",
            "veth1:239.1.1.1:5001",
            &["veth2:239.10.1.1:6001", "veth2:10.0.1.2:7000"],
        );
        check_rule(&r, &[], &ifaces()).expect("valid");
        let unicast_in = rule(
            "u",
            "veth1:10.0.0.2:5001,source=10.0.0.1",
            &["veth2:239.10.1.1:6001,source=keep,ttl=4"],
        );
        check_rule(&unicast_in, &[], &ifaces()).expect("valid");
    }

    #[test]
    fn each_mistake_names_its_field() {
        let cases: Vec<(Rule, &str, &str)> = vec![
            (
                rule("bad name!", "veth1:239.1.1.1:5001", &["veth2:239.10.1.1:6001"]),
                "name",
                "not a rule name",
            ),
            (
                rule("x", "eth9:239.1.1.1:5001", &["veth2:239.10.1.1:6001"]),
                "input.interface",
                "`eth9` does not exist (known: bare0, tun0, veth1, veth2)",
            ),
            (
                rule("x", "tun0:239.1.1.1:5001", &["veth2:239.10.1.1:6001"]),
                "input.interface",
                "not an Ethernet interface",
            ),
            (
                rule("x", "veth1:239.1.1.1:0", &["veth2:239.10.1.1:6001"]),
                "input.destination",
                "port 0",
            ),
            (
                rule("x", "veth1:10.9.9.9:5001", &["veth2:239.10.1.1:6001"]),
                "input.destination",
                "neither a multicast group nor an address of veth1 (it has: 10.0.0.2)",
            ),
            (
                rule("x", "veth1:224.0.0.5:5001", &["veth2:239.10.1.1:6001"]),
                "input.destination",
                "link-local",
            ),
            (
                rule("x", "veth1:0.0.0.0:5001", &["veth2:239.10.1.1:6001"]),
                "input.destination",
                "not a stream's destination",
            ),
            (
                rule("x", "veth1:[ff3e::1]:5001", &["veth2:239.10.1.1:6001"]),
                "input.destination",
                "IPv6",
            ),
            (
                rule("x", "veth1:239.1.1.1:5001,source=239.9.9.9", &["veth2:239.10.1.1:6001"]),
                "input.source",
                "unicast",
            ),
            (rule("x", "veth1:239.1.1.1:5001", &[]), "outputs", "at least one"),
            (
                rule("x", "veth1:239.1.1.1:5001", &["eth9:239.10.1.1:6001"]),
                "outputs[0].interface",
                "does not exist",
            ),
            (
                rule("x", "veth1:239.1.1.1:5001", &["veth2:239.10.1.1:0"]),
                "outputs[0].destination",
                "port 0",
            ),
            (
                rule("x", "veth1:239.1.1.1:5001", &["veth2:127.0.0.1:6001"]),
                "outputs[0].destination",
                "not a destination",
            ),
            (
                rule("x", "veth1:239.1.1.1:5001", &["bare0:239.10.1.1:6001"]),
                "outputs[0].source",
                "no IPv4 address",
            ),
            (
                rule("x", "veth1:239.1.1.1:5001", &["veth2:10.0.1.2:7000,source=keep"]),
                "outputs[0].source",
                "for multicast outputs",
            ),
            (
                rule(
                    "x",
                    "veth1:239.1.1.1:5001",
                    &["veth2:239.10.1.1:6001", "veth2:239.10.1.1:6001,ttl=3"],
                ),
                "outputs[1].destination",
                "outputs[0] already",
            ),
            (
                rule("x", "veth1:239.1.1.1:5001", &["veth1:239.1.1.1:5001"]),
                "outputs[0]",
                "own input: a loop",
            ),
        ];
        for (r, field, needle) in cases {
            let e = refused(&r, &[]);
            assert_eq!(e.field, field, "{e}");
            assert!(e.reason.contains(needle), "{e}");
            assert!(
                e.to_string().starts_with(&format!("rule `{}`: {field}: ", r.name)),
                "{e}"
            );
        }
    }

    #[test]
    fn conflicts_with_other_rules_are_refused() {
        let a = rule("a", "veth1:239.1.1.1:5001", &["veth2:239.10.1.1:6001"]);
        let same_input = rule("b", "veth1:239.1.1.1:5001", &["veth2:239.10.1.2:6001"]);
        let e = refused(&same_input, std::slice::from_ref(&a));
        assert!(
            e.reason
                .contains("rule `a` already takes veth1 239.1.1.1:5001 (from any source)"),
            "{e}"
        );
        // (S,G) beside (*,G) is fine, and so is a different source.
        let sg = rule("sg", "veth1:239.1.1.1:5001,source=10.0.0.1", &["veth2:239.10.1.3:6001"]);
        check_rule(&sg, std::slice::from_ref(&a), &ifaces()).expect("(S,G) beside (*,G)");
        // Feeding another rule's input, in either direction.
        let feeds_a = rule("c", "veth2:239.20.1.1:5001", &["veth1:239.1.1.1:5001"]);
        assert!(
            refused(&feeds_a, std::slice::from_ref(&a))
                .reason
                .contains("rule `a`'s input: a loop")
        );
        let fed_by_a = rule("d", "veth2:239.10.1.1:6001", &["veth2:239.30.1.1:6001"]);
        let e = refused(&fed_by_a, std::slice::from_ref(&a));
        assert_eq!(e.field, "input");
        assert!(e.reason.contains("rule `a` sends to"), "{e}");
        // A rule of the same name is the one being replaced, not a conflict.
        let a2 = rule("a", "veth1:239.1.1.1:5001", &["veth2:239.10.1.9:6001"]);
        check_rule(&a2, std::slice::from_ref(&a), &ifaces()).expect("replacement");
    }
}
