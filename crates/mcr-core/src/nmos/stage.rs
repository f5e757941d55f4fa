//! IS-05 staging: a PATCH of a sender's or receiver's `staged` endpoint,
//! checked against the resource's constraints and merged into what was
//! staged before (IS-05 v1.1, "Behaviour: Staged and active parameters").
//!
//! What is checked, each refusal naming the field: the body is an object
//! of the keys the resource has; `master_enable` a boolean; the
//! `activation` a mode of the three with a `requested_time` when it is
//! scheduled (and none when immediate); `transport_params` one object per
//! leg, each key one the leg's constraints list, each value of its type
//! (an address or `auto`, a port or `auto`, a boolean) and within the
//! constraint (`enum`, `minimum`, `maximum`). Keys the PATCH leaves out
//! keep what was staged.

use std::net::{IpAddr, SocketAddr};

use serde_json::{Map, Value};

use super::Tai;
use crate::interfaces::Interfaces;
use crate::rule::{Input, Output, Rule, SourcePolicy};

/// Which side a resource is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// A sender.
    Sender,
    /// A receiver.
    Receiver,
}

impl Side {
    /// The top-level keys of its `staged`.
    fn keys(self) -> &'static [&'static str] {
        match self {
            Side::Sender => &["receiver_id", "master_enable", "activation", "transport_params"],
            Side::Receiver => &[
                "sender_id",
                "master_enable",
                "activation",
                "transport_file",
                "transport_params",
            ],
        }
    }

    /// The key naming the other end.
    fn peer_key(self) -> &'static str {
        match self {
            Side::Sender => "receiver_id",
            Side::Receiver => "sender_id",
        }
    }
}

/// When a staged activation is to happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// Cancel what is scheduled (`mode: null`).
    Cancel,
    /// Now.
    Immediate,
    /// At this TAI time.
    Absolute(Tai),
    /// This long after the PATCH.
    Relative(Tai),
}

/// A PATCH checked and merged: the new `staged`, and the activation it
/// asks for, if any.
#[derive(Debug, Clone, PartialEq)]
pub struct Staged {
    /// What is staged now (its `activation` as the PATCH gave it).
    pub staged: Value,
    /// The activation asked for.
    pub activation: Option<Activation>,
}

fn is_uuid(s: &str) -> bool {
    uuid::Uuid::parse_str(s).is_ok_and(|u| u.hyphenated().to_string() == s.to_ascii_lowercase())
}

/// Checks one transport parameter's value against its constraint.
fn check_param(key: &str, v: &Value, constraint: &Value, at: &str) -> Result<(), String> {
    let ip_like = |nullable: bool| -> Result<(), String> {
        match v {
            Value::Null if nullable => Ok(()),
            Value::String(s) if s == "auto" || s.parse::<IpAddr>().is_ok() => Ok(()),
            _ => Err(format!(
                "{at}: {key} takes an IP address{}, not {v}",
                if nullable { ", \"auto\" or null" } else { " or \"auto\"" }
            )),
        }
    };
    match key {
        "source_ip" | "multicast_ip" => ip_like(true)?,
        "destination_ip" | "interface_ip" => ip_like(false)?,
        "source_port" | "destination_port" => match v {
            Value::String(s) if s == "auto" => {}
            Value::Number(n) if n.as_u64().is_some_and(|p| (1..=65535).contains(&p)) => {}
            _ => return Err(format!("{at}: {key} takes a port (1 to 65535) or \"auto\", not {v}")),
        },
        "rtp_enabled" if !v.is_boolean() => {
            return Err(format!("{at}: rtp_enabled takes true or false, not {v}"));
        }
        _ => {}
    }
    if let Some(allowed) = constraint.get("enum").and_then(Value::as_array)
        && !allowed.contains(v)
        && v != "auto"
    {
        return Err(format!(
            "{at}: {key} {v} is not one this leg takes ({})",
            allowed.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
        ));
    }
    if let Some(n) = v.as_f64() {
        if let Some(lo) = constraint.get("minimum").and_then(Value::as_f64)
            && n < lo
        {
            return Err(format!("{at}: {key} {v} is below {lo}"));
        }
        if let Some(hi) = constraint.get("maximum").and_then(Value::as_f64)
            && n > hi
        {
            return Err(format!("{at}: {key} {v} is above {hi}"));
        }
    }
    Ok(())
}

fn activation_of(v: &Value) -> Result<Option<Activation>, String> {
    let Value::Object(a) = v else {
        return Err(format!("activation takes an object, not {v}"));
    };
    if let Some(k) = a.keys().find(|k| *k != "mode" && *k != "requested_time") {
        return Err(format!("activation has no field {k:?} (mode, requested_time)"));
    }
    let time = match a.get("requested_time") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(
            s.parse::<Tai>()
                .map_err(|e| format!("activation.requested_time: {e}"))?,
        ),
        Some(other) => {
            return Err(format!(
                "activation.requested_time takes \"SECONDS:NANOSECONDS\" or null, not {other}"
            ));
        }
    };
    let mode = match a.get("mode") {
        None => return Ok(None),
        Some(Value::Null) => return Ok(Some(Activation::Cancel)),
        Some(Value::String(m)) => m.as_str(),
        Some(other) => return Err(format!("activation.mode takes a string or null, not {other}")),
    };
    Ok(Some(match (mode, time) {
        ("activate_immediate", None) => Activation::Immediate,
        ("activate_immediate", Some(_)) => {
            return Err("activation: an immediate activation takes no requested_time".into());
        }
        ("activate_scheduled_absolute", Some(t)) => Activation::Absolute(t),
        ("activate_scheduled_relative", Some(t)) => Activation::Relative(t),
        ("activate_scheduled_absolute" | "activate_scheduled_relative", None) => {
            return Err(format!("activation: {mode} needs a requested_time"));
        }
        (other, _) => {
            return Err(format!(
                "activation.mode {other:?} is none of activate_immediate, activate_scheduled_absolute, \
                 activate_scheduled_relative"
            ));
        }
    }))
}

/// Checks `body`, a PATCH of a `side` resource whose constraints are
/// `constraints` (one object per leg), and merges it into `staged`.
pub fn patch(side: Side, staged: &Value, constraints: &Value, body: &Value) -> Result<Staged, String> {
    let Value::Object(b) = body else {
        return Err(format!("a PATCH of staged takes a JSON object, not {body}"));
    };
    let mut out: Map<String, Value> = staged.as_object().cloned().unwrap_or_default();
    let legs = constraints.as_array().map_or(&[][..], Vec::as_slice);
    // A receiver's transport file sets its legs' parameters first; those
    // the same PATCH gives go over them.
    // (Of another type, the loop below refuses it.)
    let file = b
        .get("transport_file")
        .filter(|f| f.get("type") == Some(&Value::from("application/sdp")));
    if let (Side::Receiver, Some(Value::String(sdp))) = (side, file.and_then(|f| f.get("data"))) {
        let read = super::read_sdp(sdp).map_err(|e| format!("transport_file: {e}"))?;
        let params = (0..legs.len())
            .map(|k| match read.legs.get(k) {
                Some(l) => {
                    let multicast = l.destination.is_multicast();
                    let mut p = serde_json::json!({
                        "multicast_ip": multicast.then(|| l.destination.to_string()),
                        "destination_port": l.port,
                        "source_ip": l.source.map(|a| a.to_string()),
                        "rtp_enabled": true,
                    });
                    if !multicast {
                        p["interface_ip"] = Value::String(l.destination.to_string());
                    }
                    p
                }
                // A leg the file has none for is turned off.
                None => serde_json::json!({"rtp_enabled": false}),
            })
            .collect::<Vec<_>>();
        let mut merged = out
            .get("transport_params")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_else(|| vec![Value::Object(Map::new()); legs.len()]);
        for (m, p) in merged.iter_mut().zip(params) {
            if let (Value::Object(m), Value::Object(p)) = (m, p) {
                m.extend(p);
            }
        }
        out.insert("transport_params".into(), Value::Array(merged));
    }
    let mut activation = None;
    for (k, v) in b {
        if !side.keys().contains(&k.as_str()) {
            return Err(format!("staged has no field {k:?} ({})", side.keys().join(", ")));
        }
        match k.as_str() {
            "master_enable" if !v.is_boolean() => return Err(format!("master_enable takes true or false, not {v}")),
            "receiver_id" | "sender_id" => match v {
                Value::Null => {}
                Value::String(s) if is_uuid(s) => {}
                _ => return Err(format!("{} takes an id (a UUID) or null, not {v}", side.peer_key())),
            },
            "activation" => activation = activation_of(v)?,
            "transport_file" => {
                let Value::Object(f) = v else {
                    return Err(format!("transport_file takes an object, not {v}"));
                };
                if let Some(k) = f.keys().find(|k| *k != "data" && *k != "type") {
                    return Err(format!("transport_file has no field {k:?} (data, type)"));
                }
                match (f.get("data"), f.get("type")) {
                    (Some(Value::String(_)), Some(Value::String(t))) if t == "application/sdp" => {}
                    (Some(Value::String(_)), Some(t)) => {
                        return Err(format!("transport_file.type is {t}: only application/sdp is taken"));
                    }
                    (None | Some(Value::Null), None | Some(Value::Null)) => {}
                    _ => return Err("transport_file needs data (the SDP) and type \"application/sdp\"".into()),
                }
            }
            "transport_params" => {
                let Value::Array(given) = v else {
                    return Err(format!("transport_params takes an array, one object per leg, not {v}"));
                };
                if given.len() != legs.len() {
                    return Err(format!(
                        "transport_params has {} leg(s): this resource has {} (give {{}} for a leg left as it is)",
                        given.len(),
                        legs.len()
                    ));
                }
                let mut merged = out
                    .get("transport_params")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_else(|| vec![Value::Object(Map::new()); legs.len()]);
                for (i, (leg, c)) in given.iter().zip(legs).enumerate() {
                    let at = format!("transport_params[{i}]");
                    let Value::Object(leg) = leg else {
                        return Err(format!("{at} takes an object, not {leg}"));
                    };
                    for (pk, pv) in leg {
                        let Some(constraint) = c.get(pk) else {
                            let known: Vec<&String> = c.as_object().map(|o| o.keys().collect()).unwrap_or_default();
                            return Err(format!(
                                "{at} has no parameter {pk:?} ({})",
                                known.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
                            ));
                        };
                        check_param(pk, pv, constraint, &at)?;
                        if let Some(Value::Object(m)) = merged.get_mut(i) {
                            m.insert(pk.clone(), pv.clone());
                        }
                    }
                }
                out.insert(k.clone(), Value::Array(merged));
                continue;
            }
            _ => {}
        }
        out.insert(k.clone(), v.clone());
    }
    if side == Side::Receiver {
        let given = |i: usize| {
            b.get("transport_params")
                .and_then(|t| t.get(i))
                .is_some_and(|l| l.get("interface_ip").is_some())
        };
        if let Some(Value::Array(staged_legs)) = out.get_mut("transport_params") {
            for (i, leg) in staged_legs.iter_mut().enumerate() {
                one_family(leg, i, given(i))?;
            }
        }
    }
    Ok(Staged {
        staged: Value::Object(out),
        activation,
    })
}

/// A receiver's leg takes its group on an interface address of the same
/// family: an `interface_ip` the PATCH gave of the other family than its
/// `multicast_ip` is refused; one staged before (the group changed
/// family) becomes `auto`, the interface's own address of the group's
/// family.
fn one_family(leg: &mut Value, i: usize, given: bool) -> Result<(), String> {
    let addr = |k: &str| {
        leg.get(k)
            .and_then(Value::as_str)
            .and_then(|s| s.parse::<IpAddr>().ok())
    };
    let (Some(group), Some(at)) = (addr("multicast_ip"), addr("interface_ip")) else {
        return Ok(());
    };
    if group.is_ipv4() == at.is_ipv4() {
        return Ok(());
    }
    if given {
        return Err(format!(
            "transport_params[{i}]: interface_ip {at} is {} but multicast_ip {group} is {}: give the interface's \
             address of the group's family, or \"auto\"",
            family(at),
            family(group)
        ));
    }
    leg["interface_ip"] = Value::from("auto");
    Ok(())
}

/// The time a staged activation is due: now for an immediate one, `now +
/// offset` for a relative one.
pub fn due(a: Activation, now: Tai) -> Option<Tai> {
    match a {
        Activation::Cancel => None,
        Activation::Immediate => Some(now),
        Activation::Absolute(t) => Some(t),
        Activation::Relative(d) => Some(Tai::from_ns(now.as_ns() + d.as_ns())),
    }
}

/// Why an activation cannot be carried out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// What was staged cannot be (an address of no interface, say): 400.
    Invalid(String),
    /// IS-05 allows it, MCR does not do it yet: 501.
    NotServed(String),
}

fn address(v: &Value, key: &str, leg: usize) -> Result<Option<IpAddr>, Refused> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s == "auto" => Ok(None),
        Some(Value::String(s)) => s
            .parse()
            .map(Some)
            .map_err(|_| Refused::Invalid(format!("transport_params[{leg}].{key}: {s:?} is no address"))),
        Some(other) => Err(Refused::Invalid(format!(
            "transport_params[{leg}].{key}: {other} is no address"
        ))),
    }
}

fn port(v: &Value, key: &str) -> Option<u16> {
    v.get(key).and_then(Value::as_u64).and_then(|p| u16::try_from(p).ok())
}

/// Whether what `staged` says leaves the sender or receiver sending or
/// taking: `master_enable`, and every leg's `rtp_enabled`. One leg of two
/// turned off alone is not served: a rule takes both of its inputs or
/// neither.
fn enabled(staged: &Value, legs: &[Value]) -> Result<bool, Refused> {
    let off = |v: Option<&Value>| v == Some(&Value::Bool(false));
    let legs_off = legs.iter().filter(|l| off(l.get("rtp_enabled"))).count();
    if legs_off > 0 && legs_off < legs.len() {
        return Err(Refused::NotServed(
            "rtp_enabled false on one leg of two: MCR takes both legs of a merged stream or neither (turn the \
             receiver off with master_enable false, or both legs)"
                .into(),
        ));
    }
    Ok(!off(staged.get("master_enable")) && legs_off == 0)
}

/// The interface that has `address`.
fn interface_with(interfaces: &Interfaces, address: IpAddr, leg: usize) -> Result<String, Refused> {
    interfaces
        .iter()
        .find(|i| i.addresses.contains(&address))
        .map(|i| i.name.clone())
        .ok_or_else(|| {
            Refused::Invalid(format!(
                "transport_params[{leg}].interface_ip {address} is no interface's address"
            ))
        })
}

/// Rule `rule` taking what receiver `staged` says: each leg's group (or,
/// with no group, the interface's own address), port, source filter and
/// interface.
pub fn receiver_rule(rule: &Rule, staged: &Value, interfaces: &Interfaces) -> Result<Rule, Refused> {
    let legs = staged["transport_params"].as_array().cloned().unwrap_or_default();
    let on = enabled(staged, &legs)?;
    let mut inputs: Vec<Input> = rule.inputs().cloned().collect();
    if legs.len() != inputs.len() {
        return Err(Refused::Invalid(format!(
            "{} leg(s) staged for {} input(s)",
            legs.len(),
            inputs.len()
        )));
    }
    for (k, (input, leg)) in inputs.iter_mut().zip(&legs).enumerate() {
        let Input::Udp(u) = input else {
            return Err(Refused::Invalid(format!("input {} is not UDP", k + 1)));
        };
        if let Some(a) = address(leg, "interface_ip", k)? {
            u.interface = interface_with(interfaces, a, k)?;
            if let Some(g) = address(leg, "multicast_ip", k)?
                && g.is_ipv4() != a.is_ipv4()
            {
                return Err(Refused::Invalid(format!(
                    "transport_params[{k}]: interface_ip {a} is {} but multicast_ip {g} is {}",
                    family(a),
                    family(g)
                )));
            }
        }
        let to = match address(leg, "multicast_ip", k)? {
            Some(g) => g,
            // Unicast: to the interface's own address.
            None => match address(leg, "interface_ip", k)? {
                Some(a) => a,
                None if u.destination.ip().is_multicast() => interfaces
                    .get(&u.interface)
                    .and_then(|i| i.address_like(u.destination.ip()))
                    .ok_or_else(|| {
                        Refused::Invalid(format!("transport_params[{k}]: no address to take the stream at"))
                    })?,
                None => u.destination.ip(),
            },
        };
        u.destination = SocketAddr::new(to, port(leg, "destination_port").unwrap_or(u.destination.port()));
        u.sources = address(leg, "source_ip", k)?.into_iter().collect();
    }
    let mut out = rule.clone();
    out.enabled = on;
    let mut it = inputs.into_iter();
    if let Some(first) = it.next() {
        out.input = first;
    }
    if let Some(r) = &mut out.redundancy {
        r.inputs = it.collect();
    }
    Ok(out)
}

/// Rule `rule` with output `k` sending as sender `staged` says: its
/// destination and port, and its source address.
pub fn sender_rule(rule: &Rule, k: usize, staged: &Value, interfaces: &Interfaces) -> Result<Rule, Refused> {
    let legs = staged["transport_params"].as_array().cloned().unwrap_or_default();
    let on = enabled(staged, &legs)?;
    let mut out = rule.clone();
    let Some(Output::Udp(o)) = out.outputs.get_mut(k) else {
        return Err(Refused::Invalid(format!("output {} is not UDP", k + 1)));
    };
    o.enabled = on;
    let Some(leg) = legs.first() else {
        return Err(Refused::Invalid("no leg staged".into()));
    };
    let to = address(leg, "destination_ip", 0)?.unwrap_or(o.destination.ip());
    o.destination = SocketAddr::new(to, port(leg, "destination_port").unwrap_or(o.destination.port()));
    let interface = interfaces.get(&o.interface);
    let same_family = |a: IpAddr| a.is_ipv4() == to.is_ipv4();
    match address(leg, "source_ip", 0)? {
        Some(s) if same_family(s) => {
            let own = interface.and_then(|i| i.address_like(to));
            o.source = if own == Some(s) {
                SourcePolicy::Interface
            } else {
                SourcePolicy::Address(s)
            };
        }
        // The interface's address of the other family (the one staged
        // before the destination changed family, say): the interface's
        // own of the destination's.
        Some(s) if interface.is_some_and(|i| i.addresses.contains(&s)) => o.source = SourcePolicy::Interface,
        Some(s) => {
            return Err(Refused::Invalid(format!(
                "transport_params[0].source_ip {s} is {} but destination_ip {to} is {}: give a source of the \
                 destination's family, one of the interface's addresses, or \"auto\"",
                family(s),
                family(to)
            )));
        }
        // No source given: an address the rule set of the other family
        // gives way to the interface's own.
        None => {
            if matches!(o.source, SourcePolicy::Address(a) if !same_family(a)) {
                o.source = SourcePolicy::Interface;
            }
        }
    }
    Ok(out)
}

fn family(a: IpAddr) -> &'static str {
    if a.is_ipv4() { "IPv4" } else { "IPv6" }
}
