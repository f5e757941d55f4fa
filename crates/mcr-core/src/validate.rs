//! Validation of rules: every rejection names the field and says what is
//! wrong with it.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use crate::field::{Field, Part};
use crate::interfaces::Interfaces;
use crate::rist::{RistEndpoint, RistMode};
use crate::rule::{Input, Output, Rule, SourcePolicy, Ttl, UdpInput, UdpOutput};
use crate::srt::{SrtEndpoint, SrtMode};

/// The most outputs one rule may have.
pub const MAX_OUTPUTS_PER_RULE: usize = 4096;
/// The longest rule name.
pub const MAX_NAME_LEN: usize = 64;

/// Why a rule was refused: which rule, which field, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("rule `{rule}`: {field}: {reason}")]
pub struct RuleError {
    /// The rule's name.
    pub rule: String,
    /// The field, e.g. `input.destination` or `outputs[2].interface`.
    pub field: Field,
    /// What is wrong, and what would be right.
    pub reason: String,
}

fn err(rule: &Rule, field: Field, reason: impl Into<String>) -> RuleError {
    RuleError {
        rule: rule.name.clone(),
        field,
        reason: reason.into(),
    }
}

/// The most sources one input may list.
pub const MAX_SOURCES: usize = 64;

fn family(a: IpAddr) -> &'static str {
    if a.is_ipv4() { "IPv4" } else { "IPv6" }
}

/// Groups that never leave their link (or host): 224.0.0.0/24, and IPv6
/// groups of interface-local or link-local scope (ff01::/16, ff02::/16,
/// and the reserved scope 0), where MLD and neighbour discovery live.
fn is_link_local_multicast(a: IpAddr) -> bool {
    match a {
        IpAddr::V4(v) => v.octets()[..3] == [224, 0, 0],
        IpAddr::V6(v) => v.is_multicast() && v.segments()[0] & 0x000f <= 2,
    }
}

/// A layer-2 segment, a VLAN on it (0: untagged) and a destination: where
/// a stream can be taken.
type Place<'a> = (&'a str, u16, SocketAddr);

/// The part of an input two rules must not share: interface, VLAN (0:
/// untagged), destination (sources aside).
type InputPlace<'a> = (&'a str, u16, SocketAddr);

/// Where a set of rules takes and sends its streams, to check one rule
/// against all the others in constant time (a reload checks thousands).
/// Each list keeps the order of the rules, so the rule a refusal names is
/// the first in that order.
#[derive(Debug, Default)]
pub struct RuleIndex<'a> {
    /// Rules by their input's interface, VLAN and destination, with the
    /// sources each takes.
    inputs: HashMap<InputPlace<'a>, Vec<(&'a str, &'a [IpAddr])>>,
    /// Rules by the layer-2 segment of their input interface and their
    /// destination: the rule and its input interface.
    input_places: HashMap<Place<'a>, Vec<(&'a str, &'a str)>>,
    /// Outputs by segment and destination: the rule, the output's index and
    /// its interface.
    output_places: HashMap<Place<'a>, Vec<(&'a str, usize, &'a str)>>,
    /// SRT listeners (of inputs and outputs) by UDP port: the rule, which
    /// of its fields, and the endpoint.
    srt_listeners: HashMap<u16, Vec<(&'a str, Field, &'a SrtEndpoint)>>,
    /// The UDP ports RIST listeners bind (two in the simple profile): the
    /// rule, which of its fields, and the address.
    rist_ports: HashMap<u16, Vec<(&'a str, Field, IpAddr)>>,
}

impl<'a> RuleIndex<'a> {
    /// The index of `rules` on the host's `interfaces` (which say which
    /// interfaces share a bridge).
    pub fn new(rules: impl IntoIterator<Item = &'a Rule>, interfaces: &'a Interfaces) -> Self {
        let mut ix = RuleIndex::default();
        for r in rules {
            for (f, e) in srt_endpoints(r) {
                if e.mode == SrtMode::Listener {
                    ix.srt_listeners
                        .entry(e.address.port())
                        .or_default()
                        .push((&r.name, f, e));
                }
            }
            for (f, e) in rist_listeners(r) {
                for p in e.ports() {
                    ix.rist_ports.entry(p).or_default().push((&r.name, f, e.address.ip()));
                }
            }
            for (_, input) in r.udp_inputs() {
                ix.inputs
                    .entry(input_place(input))
                    .or_default()
                    .push((&r.name, &input.sources));
                ix.input_places
                    .entry((
                        interfaces.segment(&input.interface),
                        input.vlan.unwrap_or(0),
                        input.destination,
                    ))
                    .or_default()
                    .push((&r.name, &input.interface));
            }
            for (j, o) in r.outputs.iter().enumerate().filter_map(|(j, o)| Some((j, o.as_udp()?))) {
                ix.output_places
                    .entry((interfaces.segment(&o.interface), o.vlan.unwrap_or(0), o.destination))
                    .or_default()
                    .push((&r.name, j, &o.interface));
            }
        }
        ix
    }
}

/// Every SRT endpoint of `rule`, inputs first, with its field.
fn srt_endpoints(rule: &Rule) -> impl Iterator<Item = (Field, &SrtEndpoint)> {
    let inputs = rule
        .inputs()
        .enumerate()
        .filter_map(|(k, i)| Some((Field::input(k, Part::Whole), i.as_srt()?)));
    let outputs = rule
        .outputs
        .iter()
        .enumerate()
        .filter_map(|(j, o)| Some((Field::Output(j, Part::Whole), o.as_srt()?)));
    inputs.chain(outputs)
}

/// Every RIST listener of `rule`, inputs first, with its field.
fn rist_listeners(rule: &Rule) -> impl Iterator<Item = (Field, &RistEndpoint)> {
    let inputs = rule
        .inputs()
        .enumerate()
        .filter_map(|(k, i)| Some((Field::input(k, Part::Whole), i.as_rist()?)));
    let outputs = rule
        .outputs
        .iter()
        .enumerate()
        .filter_map(|(j, o)| Some((Field::Output(j, Part::Whole), o.as_rist()?)));
    inputs.chain(outputs).filter(|(_, e)| e.mode == RistMode::Listener)
}

/// A RIST listener's ports are its own: no other RIST listener and no SRT
/// listener may bind them (on an overlapping address), in this rule or
/// another; and an SRT listener of this rule may not bind another rule's
/// RIST port.
fn check_rist_ports(rule: &Rule, index: &RuleIndex<'_>) -> Result<(), RuleError> {
    let overlap = |a: IpAddr, b: IpAddr| a == b || a.is_unspecified() || b.is_unspecified();
    let whose = |n: &str, f: Field| {
        if n == rule.name {
            format!("this rule's {f}")
        } else {
            format!("rule `{n}` (its {f})")
        }
    };
    let mine: Vec<(Field, &RistEndpoint)> = rist_listeners(rule).collect();
    // Each SRT listener (this rule's, or another's) by port.
    let srt: Vec<(&str, Field, &SrtEndpoint)> = srt_endpoints(rule)
        .filter(|(_, e)| e.mode == SrtMode::Listener)
        .map(|(f, e)| (rule.name.as_str(), f, e))
        .chain(
            index
                .srt_listeners
                .values()
                .flatten()
                .copied()
                .filter(|(n, _, _)| *n != rule.name),
        )
        .collect();
    for (n, (field, e)) in mine.iter().enumerate() {
        for p in e.ports() {
            let earlier = mine[..n]
                .iter()
                .filter(|(_, x)| x.ports().contains(&p))
                .map(|(f, x)| (rule.name.as_str(), *f, x.address.ip()));
            let others = index
                .rist_ports
                .get(&p)
                .into_iter()
                .flatten()
                .copied()
                .filter(|(o, _, _)| *o != rule.name);
            let srts = srt
                .iter()
                .filter(|(_, _, x)| x.address.port() == p)
                .map(|&(o, f, x)| (o, f, x.address.ip()));
            if let Some((o, f, _)) = earlier
                .chain(others)
                .chain(srts)
                .find(|(_, _, a)| overlap(*a, e.address.ip()))
            {
                return Err(err(
                    rule,
                    *field,
                    format!(
                        "UDP port {p} is {}'s already; a RIST listener has its port{} to itself",
                        whose(o, f),
                        if e.ports().len() > 1 {
                            "s (the simple profile's two)"
                        } else {
                            ""
                        }
                    ),
                ));
            }
        }
    }
    for (field, e) in srt_endpoints(rule).filter(|(_, e)| e.mode == SrtMode::Listener) {
        let taken = index
            .rist_ports
            .get(&e.address.port())
            .into_iter()
            .flatten()
            .find(|(o, _, a)| *o != rule.name && overlap(*a, e.address.ip()));
        if let Some((o, f, _)) = taken {
            return Err(err(
                rule,
                field,
                format!("UDP port {} is {}'s RIST listener's", e.address.port(), whose(o, *f)),
            ));
        }
    }
    Ok(())
}

fn input_place(i: &UdpInput) -> InputPlace<'_> {
    (&i.interface, i.vlan.unwrap_or(0), i.destination)
}

/// A VLAN id must be 1 to 4094 (0 means untagged, 4095 is reserved); the
/// text form checks this too, but a rule may come as JSON.
fn check_vlan(rule: &Rule, field: Field, vlan: Option<u16>) -> Result<(), RuleError> {
    match vlan {
        Some(v) if !(1..=4094).contains(&v) => Err(err(
            rule,
            field,
            format!("VLAN id {v} is outside 1-4094; leave vlan out for untagged frames"),
        )),
        _ => Ok(()),
    }
}

/// The sources two inputs of the same place would both take: all (any
/// source) against all, or those they both list. `None` if they take
/// distinct sources.
fn shared_sources(a: &[IpAddr], b: &[IpAddr]) -> Option<String> {
    match (a.is_empty(), b.is_empty()) {
        (true, true) => Some("from any source".into()),
        (true, false) | (false, true) => None,
        (false, false) => a.iter().find(|s| b.contains(s)).map(|s| format!("from {s}")),
    }
}

/// How an output on `out` reaches an input on `input`, when they are not
/// the same interface: through the bridge they share.
fn via(out: &str, input: &str, interfaces: &Interfaces) -> String {
    if out == input {
        String::new()
    } else {
        format!(
            " (through bridge `{}`, which {out} and {input} share)",
            interfaces.segment(out)
        )
    }
}

/// Checks one rule on its own and against `others` (the rules it would
/// join; a rule of the same name among them is the one it replaces and is
/// ignored) and the host's `interfaces`.
pub fn check_rule(rule: &Rule, others: &[Rule], interfaces: &Interfaces) -> Result<(), RuleError> {
    check_rule_in(rule, &RuleIndex::new(others, interfaces), interfaces)
}

/// [`check_rule`] against the rules of `index` (which may hold `rule`
/// itself, or the rule of the same name it replaces: both are ignored).
pub fn check_rule_in(rule: &Rule, index: &RuleIndex<'_>, interfaces: &Interfaces) -> Result<(), RuleError> {
    check_name(rule)?;
    for (k, input) in rule.inputs().enumerate() {
        match input {
            Input::Udp(u) => check_input(rule, k, u, interfaces)?,
            Input::Srt(e) => check_srt_input(rule, k, e)?,
            Input::Rist(e) => check_rist_input(rule, k, e)?,
        }
    }
    check_redundancy(rule)?;
    if rule.outputs.is_empty() {
        return Err(err(rule, Field::Outputs, "a rule needs at least one output"));
    }
    if rule.outputs.len() > MAX_OUTPUTS_PER_RULE {
        return Err(err(
            rule,
            Field::Outputs,
            format!(
                "{} outputs is more than the {MAX_OUTPUTS_PER_RULE} one rule may have",
                rule.outputs.len()
            ),
        ));
    }
    for (i, o) in rule.outputs.iter().enumerate() {
        if let Output::Udp(u) = o {
            check_output(rule, i, u, interfaces)?;
        }
    }
    let mine: Vec<(Field, &SrtEndpoint)> = srt_endpoints(rule).collect();
    for (n, (field, e)) in mine.iter().enumerate() {
        e.check().map_err(|m| err(rule, *field, m))?;
        check_srt_port(rule, *field, e, &mine[..n], index)?;
    }
    for (field, e) in rule
        .inputs()
        .enumerate()
        .filter_map(|(k, i)| Some((Field::input(k, Part::Whole), i.as_rist()?)))
        .chain(
            rule.outputs
                .iter()
                .enumerate()
                .filter_map(|(j, o)| Some((Field::Output(j, Part::Whole), o.as_rist()?))),
        )
    {
        e.check().map_err(|m| err(rule, field, m))?;
    }
    check_rist_ports(rule, index)?;
    for (k, input) in rule.udp_inputs() {
        let taken = index.inputs.get(&input_place(input)).and_then(|v| {
            v.iter()
                .filter(|(n, _)| *n != rule.name)
                .find_map(|(n, srcs)| shared_sources(&input.sources, srcs).map(|from| (n, from)))
        });
        if let Some((o, from)) = taken {
            let vlan = input.vlan.map(|v| format!(" vlan {v}")).unwrap_or_default();
            return Err(err(
                rule,
                Field::input(k, Part::Whole),
                format!(
                    "rule `{o}` already takes {}{vlan} {} ({from}); one input feeds one rule, which may have many outputs",
                    input.interface, input.destination
                ),
            ));
        }
        check_loops(rule, k, input, index, interfaces)?;
    }
    Ok(())
}

/// The most inputs one rule may have.
pub const MAX_INPUTS: usize = 8;

/// A rule with several inputs: each a path of its own, all in one family,
/// and settings a stream can live with.
fn check_redundancy(rule: &Rule) -> Result<(), RuleError> {
    let Some(r) = &rule.redundancy else {
        return Ok(());
    };
    if r.inputs.is_empty() {
        return Err(err(
            rule,
            Field::Redundancy,
            format!(
                "{} needs a second input (redundancy.inputs); a rule with one input has no redundancy",
                r.mode.name()
            ),
        ));
    }
    if rule.input_count() > MAX_INPUTS {
        return Err(err(
            rule,
            Field::Redundancy,
            format!(
                "{} inputs is more than the {MAX_INPUTS} one rule may have",
                rule.input_count()
            ),
        ));
    }
    let inputs: Vec<(usize, &UdpInput)> = rule.udp_inputs().collect();
    let first = inputs.first().map(|(_, u)| u.destination.ip());
    for (n, &(k, input)) in inputs.iter().enumerate() {
        if let Some(&(j, _)) = inputs[..n].iter().find(|(_, p)| input_place(p) == input_place(input)) {
            let first = Field::input(j, Part::Whole).to_string();
            return Err(err(
                rule,
                Field::input(k, Part::Whole),
                format!(
                    "{} {} is already this rule's {first}: the copies of a stream come on separate paths (another interface, group or port)",
                    input.interface, input.destination
                ),
            ));
        }
        let (a, b) = (first.unwrap_or(input.destination.ip()), input.destination.ip());
        if a.is_ipv4() != b.is_ipv4() {
            return Err(err(
                rule,
                Field::input(k, Part::Destination),
                format!(
                    "{b} is {} but the rule's first UDP input is {}: the inputs of a rule are of one family",
                    family(b),
                    family(a)
                ),
            ));
        }
    }
    let within = |what: &str, v: u32, lo: u32, hi: u32| {
        if (lo..=hi).contains(&v) {
            Ok(())
        } else {
            Err(err(
                rule,
                Field::Redundancy,
                format!("{what} {v} ms is outside {lo}-{hi} ms"),
            ))
        }
    };
    match r.mode {
        crate::rule::Mode::Merge { differential_ms } => within("the path differential", differential_ms, 1, 10_000),
        crate::rule::Mode::Failover {
            loss_of_signal_ms,
            hold_ms,
            ..
        } => {
            within("the loss-of-signal time", loss_of_signal_ms, 10, 60_000)?;
            within("the hold time", hold_ms, 0, 3_600_000)
        }
        crate::rule::Mode::Arbitrate { framing, window } => {
            use crate::arbitrate::{WINDOW_MAX, WINDOW_MIN};
            if !window.is_power_of_two() || !(WINDOW_MIN..=WINDOW_MAX).contains(&window) {
                return Err(err(
                    rule,
                    Field::Redundancy,
                    format!(
                        "the window of {window} sequence numbers is not a power of two from {WINDOW_MIN} to {WINDOW_MAX} (such as 65536)"
                    ),
                ));
            }
            framing
                .fields()
                .check()
                .map_err(|e| err(rule, Field::Redundancy, format!("framing: {e}")))
        }
    }
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
            Field::Name,
            format!(
                "`{n}` is not a rule name: use 1-{MAX_NAME_LEN} letters, digits, `.`, `_` or `-`, starting with a letter or digit"
            ),
        ));
    }
    Ok(())
}

/// The interfaces `rule` names that the host does not have (yet): the rule
/// waits for them, and starts when they appear.
pub fn missing_interfaces<'a>(rule: &'a Rule, interfaces: &Interfaces) -> Vec<&'a str> {
    let mut v: Vec<&str> = Vec::new();
    for n in (rule.inputs().filter_map(Input::interface)).chain(rule.outputs.iter().filter_map(Output::interface)) {
        if interfaces.get(n).is_none() && !v.contains(&n) {
            v.push(n);
        }
    }
    v
}

/// The longest interface name Linux takes (IFNAMSIZ less the NUL).
const MAX_IFNAME: usize = 15;

/// An interface that does not exist is no mistake: the rule waits for it
/// (and everything that depends on the interface is checked when the
/// workers set the rule up). Its name must be one Linux could give.
fn check_interface(rule: &Rule, field: Field, name: &str, interfaces: &Interfaces) -> Result<(), RuleError> {
    let impossible = name.is_empty()
        || name.len() > MAX_IFNAME
        || name == "."
        || name == ".."
        || name
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace() || c.is_control());
    match interfaces.get(name) {
        None if impossible => Err(err(
            rule,
            field,
            format!(
                "`{name}` cannot be an interface name (1-{MAX_IFNAME} characters, no `/`, `:` or spaces; known: {})",
                interfaces.names()
            ),
        )),
        None => Ok(()),
        Some(i) if !i.ethernet => Err(err(
            rule,
            field,
            format!("interface `{name}` is not an Ethernet interface; MCR reads and writes Ethernet frames"),
        )),
        Some(_) => Ok(()),
    }
}

fn check_port(rule: &Rule, field: Field, a: &SocketAddr) -> Result<(), RuleError> {
    if a.port() == 0 {
        return Err(err(
            rule,
            field,
            format!("{a}: port 0 cannot carry a stream; use 1-65535"),
        ));
    }
    Ok(())
}

fn check_input(rule: &Rule, k: usize, input: &UdpInput, interfaces: &Interfaces) -> Result<(), RuleError> {
    check_interface(rule, Field::input(k, Part::Interface), &input.interface, interfaces)?;
    let dst = input.destination.ip();
    check_vlan(rule, Field::input(k, Part::Vlan), input.vlan)?;
    check_port(rule, Field::input(k, Part::Destination), &input.destination)?;
    if dst.is_unspecified() || dst == IpAddr::V4(Ipv4Addr::BROADCAST) {
        return Err(err(
            rule,
            Field::input(k, Part::Destination),
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
                Field::input(k, Part::Destination),
                format!(
                    "{dst} is a link-local group (224.0.0.0/24, ff02::/16) where IGMP, MLD and neighbour discovery live; routers do not forward it; use another group"
                ),
            ));
        }
    } else if let Some(iface) = interfaces.get(&input.interface) {
        // (An interface that is not there yet is checked when it is.)
        let iface = Some(iface);
        if !iface.is_some_and(|i| i.addresses.contains(&dst)) {
            let has = iface
                .map(|i| i.addresses.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", "))
                .unwrap_or_default();
            return Err(err(
                rule,
                Field::input(k, Part::Destination),
                format!(
                    "{dst} is neither a multicast group nor an address of {} (it has: {}); a unicast input takes traffic sent to this host",
                    input.interface,
                    if has.is_empty() { "none".to_string() } else { has }
                ),
            ));
        }
    }
    if input.sources.len() > MAX_SOURCES {
        return Err(err(
            rule,
            Field::input(k, Part::Source),
            format!(
                "{} sources is more than the {MAX_SOURCES} one input may list",
                input.sources.len()
            ),
        ));
    }
    for (i, &src) in input.sources.iter().enumerate() {
        if src.is_multicast() || src.is_unspecified() || src == IpAddr::V4(Ipv4Addr::BROADCAST) {
            return Err(err(
                rule,
                Field::input(k, Part::Source),
                format!("{src} is not a sender's address: give a unicast address"),
            ));
        }
        if src.is_ipv4() != dst.is_ipv4() {
            return Err(err(
                rule,
                Field::input(k, Part::Source),
                format!(
                    "{src} is {} but the group {dst} is {}: a source sends to its group in one family",
                    family(src),
                    family(dst)
                ),
            ));
        }
        if input.sources[..i].contains(&src) {
            return Err(err(
                rule,
                Field::input(k, Part::Source),
                format!("{src} is listed twice"),
            ));
        }
    }
    Ok(())
}

/// An SRT output: sound settings, and a listener port that no other
/// output claims for the same callers.
/// An SRT input: a listener takes one caller (the sender), and a cap on
/// what is sent is for outputs.
fn check_srt_input(rule: &Rule, k: usize, e: &SrtEndpoint) -> Result<(), RuleError> {
    let whole = Field::input(k, Part::Whole);
    if e.max_callers != crate::srt::DEFAULT_MAX_CALLERS {
        return Err(err(
            rule,
            whole,
            "max-callers is for outputs: an SRT input takes one caller, the sender (the next is refused while it is connected)",
        ));
    }
    if e.max_bw_bps.is_some() {
        return Err(err(
            rule,
            whole,
            "max-bw caps what an output sends; an input sends nothing",
        ));
    }
    check_carried_family(rule, "SRT")
}

/// A RIST input: a cap on what is sent is for outputs.
fn check_rist_input(rule: &Rule, k: usize, e: &RistEndpoint) -> Result<(), RuleError> {
    if e.max_bw_bps.is_some() {
        return Err(err(
            rule,
            Field::input(k, Part::Whole),
            "max-bw caps what an output retransmits; an input sends none",
        ));
    }
    check_carried_family(rule, "RIST")
}

/// A rule with an SRT or RIST input (`what`), whose datagrams MCR carries
/// as IPv4, takes no IPv6 UDP input beside it.
fn check_carried_family(rule: &Rule, what: &str) -> Result<(), RuleError> {
    if let Some((j, u)) = rule.udp_inputs().find(|(_, u)| !u.destination.is_ipv4()) {
        return Err(err(
            rule,
            Field::input(j, Part::Destination),
            format!(
                "{} is IPv6, and the rule has an {what} input, whose datagrams MCR carries as IPv4: the inputs of a rule are of one family",
                u.destination
            ),
        ));
    }
    Ok(())
}

fn check_srt_port(
    rule: &Rule,
    whole: Field,
    e: &SrtEndpoint,
    before: &[(Field, &SrtEndpoint)],
    index: &RuleIndex<'_>,
) -> Result<(), RuleError> {
    if e.mode != SrtMode::Listener {
        return Ok(());
    }
    let this_rule = before.iter().map(|&(f, x)| (rule.name.as_str(), f, x));
    let others = index
        .srt_listeners
        .get(&e.address.port())
        .into_iter()
        .flatten()
        .copied()
        .filter(|(n, _, _)| *n != rule.name);
    for (n, j, other) in this_rule.chain(others) {
        if other.mode != SrtMode::Listener {
            continue;
        }
        let (a, b) = (e.address.ip(), other.address.ip());
        let overlap = a == b || a.is_unspecified() || b.is_unspecified();
        if !overlap {
            continue;
        }
        let whose = if n == rule.name {
            format!("this rule's {j}")
        } else {
            format!("rule `{n}` (its {j})")
        };
        match (&e.stream_id, &other.stream_id) {
            (Some(x), Some(y)) if x != y => {
                if a != b {
                    return Err(err(
                        rule,
                        whole,
                        format!(
                            "{whose} listens on {} and this on {}: listeners that share a port share one address (both {}, or both the same address)",
                            other.address,
                            e.address,
                            other.address.ip()
                        ),
                    ));
                }
            }
            (Some(x), Some(_)) => {
                return Err(err(
                    rule,
                    whole,
                    format!(
                        "{whose} already serves streamid {x} on {}; give each stream on a port its own streamid",
                        other.address
                    ),
                ));
            }
            _ => {
                return Err(err(
                    rule,
                    whole,
                    format!(
                        "{whose} also listens on {}: inputs and outputs that share a listener port each need a streamid (callers choose by it)",
                        other.address
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn check_output(rule: &Rule, i: usize, o: &UdpOutput, interfaces: &Interfaces) -> Result<(), RuleError> {
    let f = |part: Part| Field::Output(i, part);
    check_interface(rule, f(Part::Interface), &o.interface, interfaces)?;
    let dst = o.destination.ip();
    check_vlan(rule, f(Part::Vlan), o.vlan)?;
    check_port(rule, f(Part::Destination), &o.destination)?;
    if dst.is_unspecified() || dst == IpAddr::V4(Ipv4Addr::BROADCAST) || dst.is_loopback() {
        return Err(err(
            rule,
            f(Part::Destination),
            format!("{dst} is not a destination: give a multicast group or a unicast host"),
        ));
    }
    if dst.is_multicast() && is_link_local_multicast(dst) {
        return Err(err(
            rule,
            f(Part::Destination),
            format!(
                "{dst} is a link-local group (224.0.0.0/24, ff02::/16), which never leaves its link; use another group"
            ),
        ));
    }
    if let Ttl::Fixed(0) = o.ttl {
        return Err(err(
            rule,
            f(Part::Ttl),
            "a TTL of 0 never leaves; use 1-255 or decrement",
        ));
    }
    let iface = interfaces.get(&o.interface);
    match o.source {
        SourcePolicy::Interface => {
            // (An interface that is not there yet is checked when it is.)
            if iface.is_some_and(|i| i.address_like(dst).is_none()) {
                return Err(err(
                    rule,
                    f(Part::Source),
                    format!(
                        "interface `{}` has no {} address to send from; give it one, or set source=keep or source=ADDRESS",
                        o.interface,
                        if dst.is_ipv4() { "IPv4" } else { "IPv6" }
                    ),
                ));
            }
        }
        SourcePolicy::Address(a) => {
            if a.is_multicast() || a.is_unspecified() {
                return Err(err(rule, f(Part::Source), format!("{a} cannot be a source address")));
            }
            if a.is_ipv4() != dst.is_ipv4() {
                return Err(err(
                    rule,
                    f(Part::Source),
                    format!(
                        "{a} is {} but {dst} is {}: give an {} source",
                        family(a),
                        family(dst),
                        family(dst)
                    ),
                ));
            }
        }
        SourcePolicy::Keep => {
            if rule.inputs().any(Input::is_carried) {
                return Err(err(
                    rule,
                    f(Part::Source),
                    "source=keep: an SRT or RIST input has no sender's address to keep; use source=interface or source=ADDRESS",
                ));
            }
            let Some(input) = rule.first_udp_input().map(|u| u.destination.ip()) else {
                return Ok(());
            };
            if input.is_ipv4() != dst.is_ipv4() {
                return Err(err(
                    rule,
                    f(Part::Source),
                    format!(
                        "source=keep cannot carry an {} source into an {} packet; use source=interface or source=ADDRESS",
                        family(input),
                        family(dst)
                    ),
                ));
            }
        }
    }
    if o.vlan.is_some() && !dst.is_multicast() {
        return Err(err(
            rule,
            f(Part::Vlan),
            "a unicast output is sent through the kernel, which routes and tags it; vlan= is for multicast outputs (use a VLAN sub-interface for unicast)",
        ));
    }
    if !dst.is_multicast() && o.source != SourcePolicy::Interface {
        return Err(err(
            rule,
            f(Part::Source),
            "a unicast output sends through the kernel from the interface's address; source=keep and source=ADDRESS are for multicast outputs",
        ));
    }
    if let Some(j) = rule.outputs[..i].iter().position(|p| {
        p.as_udp()
            .is_some_and(|p| p.interface == o.interface && p.vlan == o.vlan && p.destination == o.destination)
    }) {
        return Err(err(
            rule,
            f(Part::Destination),
            format!("outputs[{j}] already sends to {} on {}", o.destination, o.interface),
        ));
    }
    Ok(())
}

/// An output that lands on an input (same interface, destination and
/// port) would feed a rule its own or another rule's stream back.
fn check_loops(
    rule: &Rule,
    k: usize,
    input: &UdpInput,
    index: &RuleIndex<'_>,
    interfaces: &Interfaces,
) -> Result<(), RuleError> {
    let input_segment = interfaces.segment(&input.interface);
    let input_vlan = input.vlan.unwrap_or(0);
    for (i, o) in rule
        .outputs
        .iter()
        .enumerate()
        .filter_map(|(i, o)| Some((i, o.as_udp()?)))
    {
        let segment = interfaces.segment(&o.interface);
        let vlan = o.vlan.unwrap_or(0);
        if segment == input_segment && vlan == input_vlan && o.destination == input.destination {
            return Err(err(
                rule,
                Field::Output(i, Part::Whole),
                format!(
                    "{} {} is this rule's own input{}: a loop",
                    o.interface,
                    o.destination,
                    via(&o.interface, &input.interface, interfaces)
                ),
            ));
        }
        let fed = index
            .input_places
            .get(&(segment, vlan, o.destination))
            .and_then(|v| v.iter().find(|(n, _)| *n != rule.name));
        if let Some((r, input_if)) = fed {
            return Err(err(
                rule,
                Field::Output(i, Part::Whole),
                format!(
                    "{} {} is rule `{r}`'s input{}: a loop",
                    o.interface,
                    o.destination,
                    via(&o.interface, input_if, interfaces)
                ),
            ));
        }
    }
    let feeding = index
        .output_places
        .get(&(input_segment, input_vlan, input.destination))
        .and_then(|v| v.iter().find(|(n, _, _)| *n != rule.name));
    if let Some((r, j, out_if)) = feeding {
        return Err(err(
            rule,
            Field::input(k, Part::Whole),
            format!(
                "rule `{r}` sends to {out_if} {} (its outputs[{j}]){}: taking it as input would make a loop",
                input.destination,
                via(out_if, &input.interface, interfaces)
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
            ethernet: name != "tun0",
            ..InterfaceInfo::ethernet(name, index, (!addr.is_empty()).then(|| addr.parse().expect("literal")))
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
            redundancy: None,
            outputs: outputs.iter().map(|o| o.parse().expect("output")).collect(),
            health: true,
            enabled: true,
        }
    }

    fn refused(r: &Rule, others: &[Rule]) -> RuleError {
        check_rule(r, others, &ifaces()).expect_err("should be refused")
    }

    fn redundant(name: &str, inputs: &[&str], mode: &str, outputs: &[&str]) -> Rule {
        Rule {
            redundancy: Some(crate::rule::Redundancy {
                mode: mode.parse().expect("mode"),
                inputs: inputs[1..].iter().map(|i| i.parse().expect("input")).collect(),
            }),
            ..rule(name, inputs[0], outputs)
        }
    }

    #[test]
    fn a_rule_with_several_inputs_is_checked_input_by_input() {
        let out = ["veth2:239.10.1.1:6001"];
        let ok = redundant("m", &["veth1:239.1.1.1:5001", "bare0:239.2.1.1:5001"], "merge", &out);
        check_rule(&ok, &[], &ifaces()).expect("two paths");
        let cases: Vec<(Rule, &str, &str)> = vec![
            (
                redundant("m", &["veth1:239.1.1.1:5001"], "merge", &out),
                "redundancy",
                "merge needs a second input",
            ),
            (
                redundant("m", &["veth1:239.1.1.1:5001", "veth1:239.1.1.1:5001"], "failover", &out),
                "redundancy.inputs[0]",
                "is already this rule's input: the copies of a stream come on separate paths",
            ),
            (
                redundant("m", &["veth1:239.1.1.1:5001", "veth1:[ff3e::1]:5001"], "merge", &out),
                "redundancy.inputs[0].destination",
                "the inputs of a rule are of one family",
            ),
            (
                redundant("m", &["veth1:239.1.1.1:5001", "veth1:239.1.1.2:0"], "merge", &out),
                "redundancy.inputs[0].destination",
                "port 0",
            ),
            (
                redundant(
                    "m",
                    &["veth1:239.1.1.1:5001", "veth1:239.1.1.2:5001"],
                    "merge,differential=0ms",
                    &out,
                ),
                "redundancy",
                "the path differential 0 ms is outside 1-10000 ms",
            ),
            (
                redundant(
                    "m",
                    &["veth1:239.1.1.1:5001", "veth1:239.1.1.2:5001"],
                    "failover,loss-of-signal=5ms",
                    &out,
                ),
                "redundancy",
                "the loss-of-signal time 5 ms is outside 10-60000 ms",
            ),
            (
                redundant("m", &["veth1:239.1.1.1:5001", "veth2:239.10.1.1:6001"], "merge", &out),
                "outputs[0]",
                "is this rule's own input",
            ),
        ];
        for (r, field, says) in cases {
            let e = refused(&r, &[]);
            assert_eq!(e.field.to_string(), field, "{e}");
            assert!(e.to_string().contains(says), "{e}");
        }
        // Another rule's input is taken, whichever input of either rule.
        let plain = rule("p", "bare0:239.2.1.1:5001", &["veth2:239.10.1.9:6001"]);
        let e = refused(&ok, std::slice::from_ref(&plain));
        assert_eq!(e.field.to_string(), "redundancy.inputs[0]");
        assert!(e.to_string().contains("rule `p` already takes bare0"), "{e}");
        let e = refused(&plain, std::slice::from_ref(&ok));
        assert!(e.to_string().contains("rule `m` already takes bare0"), "{e}");
        // And every input waits for its interface.
        let later = redundant("l", &["veth1:239.1.1.1:5001", "eth7:239.2.1.1:5001"], "merge", &out);
        assert_eq!(missing_interfaces(&later, &ifaces()), vec!["eth7"]);
    }

    #[test]
    fn a_rule_may_name_interfaces_that_do_not_exist_yet() {
        let r = rule(
            "later",
            "eth9:239.1.1.1:5001",
            &["veth2:239.10.1.1:6001", "eth8:239.10.1.2:6001", "eth9:10.9.9.9:7000"],
        );
        check_rule(&r, &[], &ifaces()).expect("it waits for eth9 and eth8");
        assert_eq!(missing_interfaces(&r, &ifaces()), vec!["eth9", "eth8"]);
        // A unicast input on a missing interface is checked when it appears.
        check_rule(
            &rule("u", "eth9:10.9.9.9:5001", &["veth2:239.10.1.1:6001"]),
            &[],
            &ifaces(),
        )
        .expect("waits");
        assert!(
            missing_interfaces(
                &rule("p", "veth1:239.1.1.1:5001", &["veth2:239.10.1.1:6001"]),
                &ifaces()
            )
            .is_empty()
        );
    }

    #[test]
    fn vlans_and_source_lists_divide_inputs_and_loops() {
        let a = rule("a", "veth1:239.1.1.1:5001,vlan=100", &["veth1:239.1.1.1:5001,vlan=200"]);
        check_rule(&a, &[], &ifaces()).expect("another VLAN of the same trunk is no loop");
        let same = rule("s", "veth1:239.1.1.1:5001,vlan=100", &["veth1:239.1.1.1:5001,vlan=100"]);
        assert!(refused(&same, &[]).reason.contains("own input"));
        let b = rule("b", "veth1:239.1.1.1:5001,vlan=101", &["veth2:239.10.1.1:6001"]);
        check_rule(&b, std::slice::from_ref(&a), &ifaces()).expect("another VLAN is another input");
        let c = rule("c", "veth1:239.1.1.1:5001,vlan=200", &["veth2:239.10.1.2:6001"]);
        assert!(refused(&c, std::slice::from_ref(&a)).reason.contains("loop"));
        let s1 = rule(
            "s1",
            "veth1:232.1.1.1:5001,source=10.0.0.1,source=10.0.0.3",
            &["veth2:239.10.1.3:6001"],
        );
        let s2 = rule("s2", "veth1:232.1.1.1:5001,source=10.0.0.2", &["veth2:239.10.1.4:6001"]);
        check_rule(&s2, std::slice::from_ref(&s1), &ifaces()).expect("other sources");
        let s3 = rule(
            "s3",
            "veth1:232.1.1.1:5001,source=10.0.0.9,source=10.0.0.3",
            &["veth2:239.10.1.5:6001"],
        );
        let e = refused(&s3, std::slice::from_ref(&s1));
        assert!(
            e.reason
                .contains("rule `s1` already takes veth1 232.1.1.1:5001 (from 10.0.0.3)"),
            "{e}"
        );
        let any = rule("any", "veth1:232.1.1.1:5001", &["veth2:239.10.1.6:6001"]);
        check_rule(&any, &[s1, s2], &ifaces()).expect("(*,G) beside (S,G)");
    }

    #[test]
    fn rist_listeners_have_their_ports_to_themselves() {
        let ok = |r: &Rule, others: &[Rule]| check_rule(r, others, &ifaces()).expect("accepted");
        let a = rule("a", "veth1:239.1.1.1:5001", &["rist://0.0.0.0:8200,profile=simple"]);
        ok(&a, &[]);
        // The simple profile's second port is taken too, by RIST or SRT.
        let b = rule("b", "veth1:239.1.1.2:5001", &["rist://0.0.0.0:8201"]);
        let e = refused(&b, std::slice::from_ref(&a));
        assert!(
            e.reason
                .contains("UDP port 8201 is rule `a` (its outputs[0])'s already"),
            "{e}"
        );
        let c = rule("c", "veth1:239.1.1.3:5001", &["srt://0.0.0.0:8201"]);
        let e = refused(&c, std::slice::from_ref(&a));
        assert!(
            e.reason
                .contains("UDP port 8201 is rule `a` (its outputs[0])'s RIST listener's"),
            "{e}"
        );
        // Within one rule, and against an SRT listener of another.
        let d = rule(
            "d",
            "veth1:239.1.1.4:5001",
            &["rist://0.0.0.0:8300", "rist://0.0.0.0:8300"],
        );
        let e = refused(&d, &[]);
        assert_eq!(e.field, "outputs[1]");
        let s = rule("s", "veth1:239.1.1.5:5001", &["srt://0.0.0.0:9000,streamid=x"]);
        let e = refused(
            &rule("r", "veth1:239.1.1.6:5001", &["rist://0.0.0.0:9000"]),
            std::slice::from_ref(&s),
        );
        assert!(e.reason.contains("rule `s` (its outputs[0])"), "{e}");
        // Callers bind nothing; another address's port is free.
        ok(
            &rule("e", "veth1:239.1.1.7:5001", &["rist://10.9.9.9:8200"]),
            std::slice::from_ref(&a),
        );
        // A RIST input: no max-bw, no IPv6 beside it, no source=keep.
        let e = refused(
            &rule("f", "rist://0.0.0.0:8400,max-bw=1M", &["veth2:239.10.1.1:6001"]),
            &[],
        );
        assert!(e.reason.contains("an input sends none"), "{e}");
        let e = refused(
            &rule("g", "rist://0.0.0.0:8400", &["veth2:239.10.1.1:6001,source=keep"]),
            &[],
        );
        assert!(e.reason.contains("SRT or RIST input"), "{e}");
        ok(&rule("h", "rist://0.0.0.0:8400", &["veth2:239.10.1.1:6001"]), &[]);
    }

    #[test]
    fn srt_listeners_share_a_port_only_by_stream_id() {
        let ok = |r: &Rule, others: &[Rule]| check_rule(r, others, &ifaces()).expect("accepted");
        let a = rule("a", "veth1:239.1.1.1:5001", &["srt://0.0.0.0:9000,streamid=feed-a"]);
        let b = rule("b", "veth1:239.1.1.2:5001", &["srt://0.0.0.0:9000,streamid=feed-b"]);
        ok(&a, &[]);
        ok(&b, std::slice::from_ref(&a));
        // The same stream ID twice on one port.
        let b2 = rule("b", "veth1:239.1.1.2:5001", &["srt://0.0.0.0:9000,streamid=feed-a"]);
        let e = refused(&b2, std::slice::from_ref(&a));
        assert_eq!(e.field, "outputs[0]");
        assert!(
            e.reason
                .contains("rule `a` (its outputs[0]) already serves streamid feed-a"),
            "{e}"
        );
        // A listener without one cannot share.
        let c = rule("c", "veth1:239.1.1.3:5001", &["srt://0.0.0.0:9000"]);
        let e = refused(&c, std::slice::from_ref(&a));
        assert!(e.reason.contains("each need a streamid"), "{e}");
        // Nor one on a specific address of the wildcard's port.
        let d = rule(
            "d",
            "veth1:239.1.1.4:5001",
            &["srt://10.0.1.1:9000,mode=listener,streamid=feed-d"],
        );
        let e = refused(&d, std::slice::from_ref(&a));
        assert!(e.reason.contains("share one address"), "{e}");
        // Within one rule too; and another port, or a caller, is free.
        let two = rule(
            "two",
            "veth1:239.1.1.5:5001",
            &["srt://0.0.0.0:9100", "srt://0.0.0.0:9100,streamid=x"],
        );
        let e = refused(&two, &[]);
        assert_eq!(e.field, "outputs[1]");
        assert!(e.reason.contains("this rule's outputs[0]"), "{e}");
        ok(
            &rule("e", "veth1:239.1.1.6:5001", &["srt://0.0.0.0:9001"]),
            std::slice::from_ref(&a),
        );
        ok(
            &rule("f", "veth1:239.1.1.7:5001", &["srt://10.9.9.9:9000,mode=caller"]),
            std::slice::from_ref(&a),
        );
        // A rule replacing itself does not clash with its old self.
        ok(&a, std::slice::from_ref(&a));
    }

    #[test]
    fn srt_inputs_are_checked_and_share_ports_as_outputs_do() {
        let ok = |r: &Rule, others: &[Rule]| check_rule(r, others, &ifaces()).expect("accepted");
        let pushed = rule("p", "srt://0.0.0.0:9000,streamid=in-a", &["veth2:239.10.1.1:6001"]);
        ok(&pushed, &[]);
        // An output of another rule on the same port by another stream ID.
        let out = rule("o", "veth1:239.1.1.1:5001", &["srt://0.0.0.0:9000,streamid=out-a"]);
        ok(&out, std::slice::from_ref(&pushed));
        let clash = rule("o", "veth1:239.1.1.1:5001", &["srt://0.0.0.0:9000,streamid=in-a"]);
        let e = refused(&clash, std::slice::from_ref(&pushed));
        assert!(
            e.reason.contains("rule `p` (its input) already serves streamid in-a"),
            "{e}"
        );
        for (input, needle) in [
            ("srt://0.0.0.0:9000,max-callers=2", "takes one caller"),
            ("srt://0.0.0.0:9000,max-bw=10M", "an input sends nothing"),
        ] {
            let e = refused(&rule("x", input, &["veth2:239.10.1.1:6001"]), &[]);
            assert_eq!(e.field, "input", "{e}");
            assert!(e.reason.contains(needle), "{e}");
        }
        let keep = rule("k", "srt://0.0.0.0:9000", &["veth2:239.10.1.1:6001,source=keep"]);
        assert!(refused(&keep, &[]).reason.contains("no sender's address"));
        // A failover from SRT to multicast, of one family.
        let fo = redundant(
            "fo",
            &["srt://0.0.0.0:9100", "veth1:239.1.1.9:5001"],
            "failover",
            &["veth2:239.10.1.9:6001"],
        );
        ok(&fo, &[]);
        let v6 = redundant(
            "v6",
            &["srt://0.0.0.0:9100", "veth1:[ff3e::9]:5001"],
            "failover",
            &["veth2:[ff3e::10]:6001"],
        );
        let e = refused(&v6, &[]);
        assert_eq!(e.field, "redundancy.inputs[0].destination", "{e}");
        assert!(e.reason.contains("as IPv4"), "{e}");
    }

    #[test]
    fn srt_settings_are_checked_even_as_json() {
        let mut r = rule("j", "veth1:239.1.1.1:5001", &["srt://0.0.0.0:9000"]);
        let Output::Srt(e) = &mut r.outputs[0] else {
            unreachable!("an SRT output")
        };
        e.pbkeylen = Some(20);
        e.passphrase_file = Some("/k".into());
        let e = refused(&r, &[]);
        assert_eq!(e.field, "outputs[0]");
        assert!(e.reason.contains("16, 24 or 32"), "{e}");
    }

    #[test]
    fn vlan_ids_out_of_range_are_refused_even_as_json() {
        let mut r = rule("j", "veth1:239.1.1.1:5001", &["veth2:239.10.1.1:6001"]);
        let Input::Udp(i) = &mut r.input else {
            unreachable!("a UDP input")
        };
        i.vlan = Some(0);
        assert_eq!(refused(&r, &[]).field, "input.vlan");
        let Input::Udp(i) = &mut r.input else {
            unreachable!("a UDP input")
        };
        i.vlan = None;
        let Output::Udp(o) = &mut r.outputs[0] else {
            unreachable!("a UDP output")
        };
        o.vlan = Some(4095);
        let e = refused(&r, &[]);
        assert_eq!(e.field, "outputs[0].vlan");
        assert!(e.reason.contains("outside 1-4094"), "{e}");
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
                rule("x", "eth9.with.a.long.name:239.1.1.1:5001", &["veth2:239.10.1.1:6001"]),
                "input.interface",
                "`eth9.with.a.long.name` cannot be an interface name (1-15 characters, no `/`, `:` or spaces; known: bare0, tun0, veth1, veth2)",
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
                rule("x", "veth1:[ff02::1:3]:5001", &["veth2:239.10.1.1:6001"]),
                "input.destination",
                "link-local",
            ),
            (
                rule("x", "veth1:[ff3e::1]:5001,source=10.0.0.1", &["veth2:239.10.1.1:6001"]),
                "input.source",
                "10.0.0.1 is IPv4 but the group ff3e::1 is IPv6",
            ),
            (
                rule(
                    "x",
                    "veth1:232.1.1.1:5001,source=10.0.0.1,source=10.0.0.1",
                    &["veth2:239.10.1.1:6001"],
                ),
                "input.source",
                "listed twice",
            ),
            (
                rule("x", "veth1:239.1.1.1:5001", &["veth2:[ff3e::9]:6001,source=keep"]),
                "outputs[0].source",
                "source=keep cannot carry an IPv4 source into an IPv6 packet",
            ),
            (
                rule("x", "veth1:239.1.1.1:5001", &["veth2:[ff3e::9]:6001,source=10.0.1.1"]),
                "outputs[0].source",
                "give an IPv6 source",
            ),
            (
                rule("x", "veth1:239.1.1.1:5001", &["veth2:[ff3e::9]:6001"]),
                "outputs[0].source",
                "no IPv6 address",
            ),
            (
                rule("x", "veth1:239.1.1.1:5001", &["veth2:10.0.1.2:7000,vlan=5"]),
                "outputs[0].vlan",
                "for multicast outputs",
            ),
            (
                rule("x", "veth1:239.1.1.1:5001,source=239.9.9.9", &["veth2:239.10.1.1:6001"]),
                "input.source",
                "unicast",
            ),
            (rule("x", "veth1:239.1.1.1:5001", &[]), "outputs", "at least one"),
            (
                rule("x", "veth1:239.1.1.1:5001", &["eth/9:239.10.1.1:6001"]),
                "outputs[0].interface",
                "cannot be an interface name",
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

    /// br0 with ports p1 and p2, and a stand-alone eth9.
    fn bridged() -> Interfaces {
        let mk = |name: &str, index: u32, master: Option<&str>| InterfaceInfo {
            master: master.map(Into::into),
            ..InterfaceInfo::ethernet(name, index, [format!("10.9.{index}.1").parse().expect("literal")])
        };
        Interfaces::new([
            mk("br0", 20, None),
            mk("p1", 21, Some("br0")),
            mk("p2", 22, Some("br0")),
            mk("eth9", 23, None),
        ])
    }

    #[test]
    fn loops_through_a_bridge_are_refused_with_the_bridge_named() {
        let ifs = bridged();
        // One rule: out of one port, into another, same group and port.
        let own = rule("a", "p1:239.1.1.1:5001", &["p2:239.1.1.1:5001"]);
        let e = check_rule(&own, &[], &ifs).expect_err("a loop through br0");
        assert_eq!(e.field, "outputs[0]");
        assert!(
            e.reason
                .contains("own input (through bridge `br0`, which p2 and p1 share)"),
            "{e}"
        );
        // Across two rules: a's output lands on b's input through the bridge
        // (and the bridge device itself is on the same segment).
        let a = rule("a", "eth9:239.1.1.1:5001", &["br0:239.2.2.2:6001"]);
        let b = rule("b", "p2:239.2.2.2:6001", &["eth9:239.3.3.3:7001"]);
        let e = check_rule(&b, std::slice::from_ref(&a), &ifs).expect_err("b is fed by a");
        assert_eq!(e.field, "input");
        assert!(
            e.reason
                .contains("rule `a` sends to br0 239.2.2.2:6001 (its outputs[0]) (through bridge `br0`"),
            "{e}"
        );
        let e = check_rule(&a, std::slice::from_ref(&b), &ifs).expect_err("a feeds b");
        assert!(
            e.reason
                .contains("is rule `b`'s input (through bridge `br0`, which br0 and p2 share)"),
            "{e}"
        );
        // Other groups, or a port of no bridge, are no loop.
        check_rule(&rule("c", "p1:239.1.1.1:5001", &["p2:239.1.1.9:5001"]), &[], &ifs).expect("another group");
        check_rule(&rule("d", "eth9:239.1.1.1:5001", &["p1:239.4.4.4:5001"]), &[], &ifs).expect("no bridge between");
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
