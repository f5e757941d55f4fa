//! AMWA NMOS: MCR's rules as the resources of an IS-04 v1.3 Node and the
//! views of its IS-05 v1.1 Connection API.
//!
//! The mapping (docs/NMOS.md):
//! - the relay is one Node with one Device;
//! - a rule whose inputs are UDP (one, or two legs of a merge, failover or
//!   arbitration) is a Receiver, its legs the inputs;
//! - a rule is one Source and one Flow (the content it carries), and each
//!   of its UDP outputs a Sender of that Flow.
//!
//! IDs are UUIDv5 from a seed of the node's (its `id_seed`, else the
//! machine's id) and the rule's name and the output's place, so they are
//! the same after a restart, a reload or a change of the rule's addresses.
//! A resource's `version` is the TAI time at which what it says last
//! changed ([`Versions`]).
//!
//! What the Flow says about the content: MPEG-TS (`urn:x-nmos:format:mux`,
//! `video/MP2T`), the common case of the streams MCR carries.

mod sdp;
pub mod stage;
mod time;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::interfaces::{InterfaceInfo, Interfaces};
use crate::rule::{Input, Rule, SourcePolicy, UdpInput, UdpOutput};

pub use sdp::{Content, ReadLeg, ReadSdp, RtpFormat, read_sdp, sender_sdp};
pub use time::{Tai, tai_now};

/// The API versions served.
pub const NODE_API: &str = "v1.3";
/// The Connection API version served.
pub const CONNECTION_API: &str = "v1.1";

/// The UUID namespace of MCR's NMOS ids (a name-based UUID of MCR's own).
const MCR_NAMESPACE: Uuid = Uuid::from_u128(0x7b1d_3c2e_9a4f_5e60_8d21_4c3b_a5f6_0e19);

/// What the node says about itself, and where its APIs are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// Its label (`[daemon.nmos] label`, else the host name).
    pub label: String,
    /// Its description.
    pub description: String,
    /// The host name.
    pub hostname: String,
    /// Where controllers reach the APIs: an address or a host name.
    pub api_host: String,
    /// Its port.
    pub api_port: u16,
    /// `http` or `https`.
    pub protocol: &'static str,
    /// Whether the APIs want a bearer token.
    pub authorization: bool,
}

impl NodeInfo {
    /// The base of every URL the node gives (`http://HOST:PORT`).
    pub fn base_url(&self) -> String {
        let host = match self.api_host.parse::<IpAddr>() {
            Ok(IpAddr::V6(a)) => format!("[{a}]"),
            _ => self.api_host.clone(),
        };
        format!("{}://{host}:{}", self.protocol, self.api_port)
    }
}

/// The ids of a node's resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ids {
    base: Uuid,
}

impl Ids {
    /// The ids of the node whose seed is `seed`.
    pub fn new(seed: &str) -> Self {
        Ids {
            base: Uuid::new_v5(&MCR_NAMESPACE, seed.as_bytes()),
        }
    }

    fn of(&self, what: &str) -> Uuid {
        Uuid::new_v5(&self.base, what.as_bytes())
    }

    /// The node's.
    pub fn node(&self) -> Uuid {
        self.of("node")
    }

    /// The device's.
    pub fn device(&self) -> Uuid {
        self.of("device")
    }

    /// Rule `rule`'s source.
    pub fn source(&self, rule: &str) -> Uuid {
        self.of(&format!("source/{rule}"))
    }

    /// Rule `rule`'s flow.
    pub fn flow(&self, rule: &str) -> Uuid {
        self.of(&format!("flow/{rule}"))
    }

    /// The sender of output `k` (from 0) of rule `rule`.
    pub fn sender(&self, rule: &str, k: usize) -> Uuid {
        self.of(&format!("sender/{rule}/{k}"))
    }

    /// Rule `rule`'s receiver.
    pub fn receiver(&self, rule: &str) -> Uuid {
        self.of(&format!("receiver/{rule}"))
    }
}

/// The version of each resource: the time what it says last changed.
#[derive(Debug, Default)]
pub struct Versions {
    seen: HashMap<Uuid, (u64, Tai)>,
}

impl Versions {
    /// The version of resource `id` that says `body` (without its
    /// version): the one it had if it said the same, else `now` (after
    /// the one it had, so that versions only grow).
    pub fn stamp(&mut self, id: Uuid, body: &Value, now: Tai) -> Tai {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        body.to_string().hash(&mut h);
        let hash = h.finish();
        match self.seen.get(&id) {
            Some(&(was, v)) if was == hash => v,
            Some(&(_, v)) => {
                let v = now.max(v.next());
                self.seen.insert(id, (hash, v));
                v
            }
            None => {
                self.seen.insert(id, (hash, now));
                now
            }
        }
    }

    /// Makes every resource's version new at the next stamp (an IS-05
    /// activation changes a resource even when what it says is the same).
    pub fn touch(&mut self, id: Uuid) {
        if let Some(e) = self.seen.get_mut(&id) {
            e.0 = e.0.wrapping_add(1);
        }
    }

    /// Forgets the resources not in `keep`.
    fn retain(&mut self, keep: &HashSet<Uuid>) {
        self.seen.retain(|id, _| keep.contains(id));
    }
}

/// An IS-05 sender: its rule and output, and what its endpoints answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConnectionSender {
    /// Its id.
    pub id: String,
    /// Its rule.
    pub rule: String,
    /// Its output's place in the rule (from 0).
    pub output: usize,
    /// `/transporttype`.
    pub transport_type: String,
    /// `/constraints`.
    pub constraints: Value,
    /// `/staged`.
    pub staged: Value,
    /// `/active`.
    pub active: Value,
    /// `/transportfile`: the SDP (none while disabled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport_file: Option<String>,
}

/// An IS-05 receiver.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConnectionReceiver {
    /// Its id.
    pub id: String,
    /// Its rule.
    pub rule: String,
    /// `/transporttype`.
    pub transport_type: String,
    /// `/constraints`.
    pub constraints: Value,
    /// `/staged`.
    pub staged: Value,
    /// `/active`.
    pub active: Value,
}

/// Everything the node's APIs answer, built from the rule table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NmosView {
    /// `/self`.
    pub node: Value,
    /// `/devices`.
    pub devices: Vec<Value>,
    /// `/sources`.
    pub sources: Vec<Value>,
    /// `/flows`.
    pub flows: Vec<Value>,
    /// `/senders`.
    pub senders: Vec<Value>,
    /// `/receivers`.
    pub receivers: Vec<Value>,
    /// The Connection API's senders.
    pub connection_senders: Vec<ConnectionSender>,
    /// The Connection API's receivers.
    pub connection_receivers: Vec<ConnectionReceiver>,
    /// What of the rules is not an NMOS resource, and why (`rule: why`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<String>,
    /// Where the node is registered, or why it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registration: Option<Registration>,
}

/// The node at a glance (the live page's, and what the registration
/// watches): cheap, without building the resources.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NmosGlance {
    /// The node's id.
    pub node_id: String,
    /// How many senders.
    pub senders: usize,
    /// How many receivers.
    pub receivers: usize,
    /// Its registration.
    pub registration: Registration,
    /// Moves whenever what the APIs answer may have changed (a rule, an
    /// IS-05 change, a measured bit rate, an interface's addresses).
    pub stamp: u64,
}

/// Rule `r`'s receiver legs, if it is a receiver (every input UDP, one or
/// two); else why it is none.
pub fn receiver_legs(r: &Rule) -> Result<Vec<&UdpInput>, String> {
    let legs: Vec<&UdpInput> = r.inputs().filter_map(Input::as_udp).collect();
    if legs.len() != r.input_count() {
        Err(format!("{}: an SRT or RIST input is not an NMOS receiver", r.name))
    } else if legs.len() > 2 {
        Err(format!(
            "{}: {} inputs (an NMOS receiver has one or two legs)",
            r.name,
            legs.len()
        ))
    } else {
        Ok(legs)
    }
}

/// How many senders and receivers `rules` make.
pub fn count(rules: &[&Rule]) -> (usize, usize) {
    let senders = rules
        .iter()
        .map(|r| r.outputs.iter().filter(|o| o.as_udp().is_some()).count())
        .sum();
    let receivers = rules.iter().filter(|r| receiver_legs(r).is_ok()).count();
    (senders, receivers)
}

/// The node's registration with an IS-04 registry (Registration API v1.3).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    /// The registry it is registered with (`http://HOST:PORT`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<String>,
    /// Registries known (configured, or found by DNS-SD), the preferred
    /// first: `URL (priority N, how found)`.
    #[serde(default)]
    pub known: Vec<String>,
    /// Resources registered there.
    #[serde(default)]
    pub resources: usize,
    /// Heartbeats answered since it registered there.
    #[serde(default)]
    pub heartbeats: u64,
    /// Times it moved to another registry, or registered again.
    #[serde(default)]
    pub failovers: u64,
    /// The last thing that went wrong, if anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Whether it advertises itself peer to peer (`_nmos-node._tcp`).
    #[serde(default)]
    pub advertised: bool,
}

/// A resource's common fields beside `extra`, versioned.
fn resource(id: Uuid, label: &str, description: &str, extra: Value, versions: &mut Versions, now: Tai) -> Value {
    let mut body = json!({
        "id": id.to_string(),
        "label": label,
        "description": description,
        "tags": {},
    });
    if let (Value::Object(b), Value::Object(e)) = (&mut body, extra) {
        b.extend(e);
    }
    let v = versions.stamp(id, &body, now);
    if let Value::Object(b) = &mut body {
        b.insert("version".into(), Value::String(v.to_string()));
    }
    body
}

/// An IS-04 `port_id`/`chassis_id`: the MAC, lower case, with dashes.
fn mac_id(mac: [u8; 6]) -> String {
    mac.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join("-")
}

/// The transport of every sender and receiver: RTP, to a group or a host
/// alike (an output of MCR may be either, and may change from one to the
/// other).
const TRANSPORT: &str = "urn:x-nmos:transport:rtp";

/// The activation of a resource never activated through IS-05.
fn no_activation() -> Value {
    json!({"mode": null, "requested_time": null, "activation_time": null})
}

/// The address a UDP output's packets leave from.
fn output_source(o: &UdpOutput, interfaces: &Interfaces, input: Option<&UdpInput>) -> Option<IpAddr> {
    let interface = || {
        interfaces
            .get(&o.interface)
            .and_then(|i| i.address_like(o.destination.ip()))
    };
    match o.source {
        SourcePolicy::Address(a) => Some(a),
        // The packets' own source: the input's, when it names one.
        SourcePolicy::Keep => input.and_then(|i| i.sources.first().copied()).or_else(interface),
        SourcePolicy::Interface => interface(),
    }
}

/// The transport parameters of a sender's one leg.
fn sender_params(o: &UdpOutput, source: Option<IpAddr>) -> Value {
    json!({
        "source_ip": source.map(|a| a.to_string()),
        "destination_ip": o.destination.ip().to_string(),
        // The packets keep the port their sender gave them; what MCR knows
        // of the stream's ports is where it goes.
        "source_port": o.destination.port(),
        "destination_port": o.destination.port(),
        "rtp_enabled": true,
    })
}

/// The transport parameters of a receiver's leg.
fn receiver_params(i: &UdpInput, interfaces: &Interfaces) -> Value {
    let to = i.destination.ip();
    let interface_ip = interfaces
        .get(&i.interface)
        .and_then(|f| f.address_like(to))
        .map(|a| a.to_string());
    json!({
        "source_ip": i.sources.first().map(ToString::to_string),
        "multicast_ip": to.is_multicast().then(|| to.to_string()),
        "interface_ip": interface_ip,
        "destination_port": i.destination.port(),
        "rtp_enabled": true,
    })
}

/// A leg's constraints: every parameter listed; the interface's address
/// (and for a sender its source) from the interface's addresses.
fn constraints_of(params: &Value, addresses: &[IpAddr], address_key: &str) -> Value {
    let mut c = serde_json::Map::new();
    if let Value::Object(p) = params {
        for k in p.keys() {
            c.insert(k.clone(), json!({}));
        }
    }
    if !addresses.is_empty() {
        let list: Vec<String> = addresses.iter().map(ToString::to_string).collect();
        c.insert(address_key.into(), json!({ "enum": list }));
    }
    Value::Object(c)
}

/// The addresses of interface `name`, of both families: a sender or
/// receiver may be moved to a destination or group of the other family
/// (the activation takes the interface's address of the right one).
fn addresses_of(interfaces: &Interfaces, name: &str) -> Vec<IpAddr> {
    interfaces.get(name).map(|i| i.addresses.clone()).unwrap_or_default()
}

/// What the node knows beside the rules.
#[derive(Debug, Clone, Default)]
pub struct Known {
    /// The other end an IS-05 activation gave a sender or receiver (by its
    /// id).
    pub peers: HashMap<String, Value>,
    /// The transport file (SDP) an activation gave a rule's receiver (by
    /// the rule's name): it says what the rule carries.
    pub files: HashMap<String, String>,
    /// Each rule's bit rate as measured, in kbit/s with the IP and UDP
    /// headers (by its name); none: not known yet.
    pub bit_rates: HashMap<String, u64>,
}

/// Builds what the APIs answer for `rules`, with what is `known`.
pub fn build(
    info: &NodeInfo,
    ids: &Ids,
    rules: &[Rule],
    interfaces: &Interfaces,
    versions: &mut Versions,
    known: &Known,
) -> NmosView {
    let (peers, files) = (&known.peers, &known.files);
    let peer = |id: &Uuid| peers.get(&id.to_string()).cloned().unwrap_or(Value::Null);
    let now = tai_now();
    let base = info.base_url();
    let (node_id, device_id) = (ids.node(), ids.device());
    let mut kept = HashSet::from([node_id, device_id]);
    let mut view = NmosView {
        node: Value::Null,
        devices: Vec::new(),
        sources: Vec::new(),
        flows: Vec::new(),
        senders: Vec::new(),
        receivers: Vec::new(),
        connection_senders: Vec::new(),
        connection_receivers: Vec::new(),
        left_out: Vec::new(),
        registration: None,
    };
    // The interfaces the rules use, by name.
    let mut used: BTreeMap<&str, &InterfaceInfo> = BTreeMap::new();
    for r in rules {
        let inputs = r.udp_inputs().map(|(_, u)| u.interface.as_str());
        let outputs = r
            .outputs
            .iter()
            .filter_map(|o| o.as_udp().map(|u| u.interface.as_str()));
        for name in inputs.chain(outputs) {
            if let Some(i) = interfaces.get(name) {
                used.insert(name, i);
            }
        }
    }
    let (mut sender_ids, mut receiver_ids) = (Vec::new(), Vec::new());
    for r in rules {
        let (source_id, flow_id) = (ids.source(&r.name), ids.flow(&r.name));
        let first = r.first_udp_input();
        let file = files.get(&r.name);
        let content = file
            .and_then(|f| read_sdp(f).ok())
            .map(|s| s.content)
            .unwrap_or_default();
        let (format, media_type) = content.format();
        // The receiver: every input UDP, one or two legs.
        match receiver_legs(r) {
            Err(why) => view.left_out.push(why),
            Ok(legs) => {
                let id = ids.receiver(&r.name);
                let body = resource(
                    id,
                    &format!("{} input", r.name),
                    &format!("what rule {} takes", r.name),
                    json!({
                        "device_id": device_id.to_string(),
                        "transport": TRANSPORT,
                        "interface_bindings": legs.iter().map(|l| l.interface.clone()).collect::<Vec<_>>(),
                        // (Turned off, it is subscribed to nothing.)
                        "subscription": {
                            "sender_id": if r.enabled { peer(&id) } else { Value::Null },
                            "active": r.enabled,
                        },
                        "format": format,
                        "caps": {"media_types": [media_type]},
                    }),
                    versions,
                    now,
                );
                let params: Vec<Value> = legs.iter().map(|l| receiver_params(l, interfaces)).collect();
                let constraints: Vec<Value> = legs
                    .iter()
                    .zip(&params)
                    .map(|(l, p)| constraints_of(p, &addresses_of(interfaces, &l.interface), "interface_ip"))
                    .collect();
                let state = json!({
                    "sender_id": peer(&id),
                    "master_enable": r.enabled,
                    "activation": no_activation(),
                    "transport_file": match file {
                        Some(f) => json!({"data": f, "type": "application/sdp"}),
                        None => json!({"data": null, "type": null}),
                    },
                    "transport_params": params,
                });
                view.connection_receivers.push(ConnectionReceiver {
                    id: id.to_string(),
                    rule: r.name.clone(),
                    transport_type: TRANSPORT.into(),
                    constraints: Value::Array(constraints),
                    staged: state.clone(),
                    active: state,
                });
                receiver_ids.push(id.to_string());
                view.receivers.push(body);
                kept.insert(id);
            }
        }
        // The source and flow, and a sender per UDP output.
        let outputs: Vec<(usize, &UdpOutput)> = r
            .outputs
            .iter()
            .enumerate()
            .filter_map(|(k, o)| Some((k, o.as_udp()?)))
            .collect();
        if outputs.len() < r.outputs.len() {
            view.left_out
                .push(format!("{}: an SRT or RIST output is not an NMOS sender", r.name));
        }
        let mut source = json!({
            "caps": {},
            "device_id": device_id.to_string(),
            "parents": [],
            "clock_name": null,
            "format": format,
        });
        if let Some(n) = content.channels() {
            let channels: Vec<Value> = (1..=n).map(|c| json!({"label": format!("channel {c}")})).collect();
            source["channels"] = Value::Array(channels);
        }
        let flow_fields = content.flow_fields();
        // A video flow's rate is its source's too.
        if let Some(rate) = flow_fields.get("grain_rate") {
            source["grain_rate"] = rate.clone();
        }
        view.sources.push(resource(
            source_id,
            &r.name,
            &format!("the stream rule {} carries", r.name),
            source,
            versions,
            now,
        ));
        let mut flow = json!({
            "source_id": source_id.to_string(),
            "device_id": device_id.to_string(),
            "parents": [],
        });
        if let Value::Object(f) = &mut flow {
            f.extend(flow_fields);
        }
        view.flows.push(resource(
            flow_id,
            &r.name,
            &format!("the stream rule {} carries", r.name),
            flow,
            versions,
            now,
        ));
        kept.extend([source_id, flow_id]);
        for (k, o) in outputs {
            let id = ids.sender(&r.name, k);
            let source = output_source(o, interfaces, first);
            let href = format!("{base}/x-nmos/connection/{CONNECTION_API}/single/senders/{id}/transportfile");
            let mut fields = json!({
                "flow_id": flow_id.to_string(),
                "transport": TRANSPORT,
                "device_id": device_id.to_string(),
                "manifest_href": href,
                "interface_bindings": [o.interface.clone()],
                "subscription": {
                    "receiver_id": if o.enabled { peer(&id) } else { Value::Null },
                    "active": o.enabled,
                },
            });
            // (BCP-006-04: where the bit rate is known, say it.)
            if let Some(&kbps) = known.bit_rates.get(&r.name) {
                fields["bit_rate"] = json!(kbps);
            }
            let body = resource(
                id,
                &format!("{} to {}", r.name, o.destination),
                &format!("output {} of rule {}", k + 1, r.name),
                fields,
                versions,
                now,
            );
            let params = sender_params(o, source);
            let constraints = constraints_of(&params, &addresses_of(interfaces, &o.interface), "source_ip");
            let state = json!({
                "receiver_id": peer(&id),
                "master_enable": o.enabled,
                "activation": no_activation(),
                "transport_params": [params],
            });
            view.connection_senders.push(ConnectionSender {
                id: id.to_string(),
                rule: r.name.clone(),
                output: k,
                transport_type: TRANSPORT.into(),
                constraints: json!([constraints]),
                staged: state.clone(),
                active: state,
                transport_file: Some(sender_sdp(&SdpLeg {
                    session: &id,
                    version: versions.seen.get(&id).map_or(now, |e| e.1),
                    label: &r.name,
                    source,
                    destination: o.destination,
                    ttl: match o.ttl {
                        crate::rule::Ttl::Fixed(t) => t,
                        crate::rule::Ttl::Decrement => 64,
                    },
                    content: &content,
                })),
            });
            sender_ids.push(id.to_string());
            view.senders.push(body);
            kept.insert(id);
        }
    }
    view.devices.push(resource(
        device_id,
        &info.label,
        &format!("the relay of {}", info.label),
        json!({
            "type": "urn:x-nmos:device:generic",
            "node_id": node_id.to_string(),
            "senders": sender_ids,
            "receivers": receiver_ids,
            "controls": [{
                "type": format!("urn:x-nmos:control:sr-ctrl/{CONNECTION_API}"),
                "href": format!("{base}/x-nmos/connection/{CONNECTION_API}/"),
                "authorization": info.authorization,
            }],
        }),
        versions,
        now,
    ));
    let node_interfaces: Vec<Value> = used
        .values()
        .map(|i| {
            json!({
                "chassis_id": null,
                "port_id": mac_id(i.mac),
                "name": i.name,
            })
        })
        .collect();
    view.node = resource(
        node_id,
        &info.label,
        &info.description,
        json!({
            "href": format!("{base}/"),
            "hostname": info.hostname,
            "api": {
                "versions": [NODE_API],
                "endpoints": [{
                    "host": info.api_host,
                    "port": info.api_port,
                    "protocol": info.protocol,
                    "authorization": info.authorization,
                }],
            },
            "caps": {},
            "services": [],
            "clocks": [{"name": "clk0", "ref_type": "internal"}],
            "interfaces": node_interfaces,
        }),
        versions,
        now,
    );
    versions.retain(&kept);
    view
}

/// What a sender's SDP says.
#[derive(Debug, Clone, Copy)]
pub struct SdpLeg<'a> {
    /// The sender's id (the session's).
    pub session: &'a Uuid,
    /// Its version (the SDP's `o=` version).
    pub version: Tai,
    /// The session's name.
    pub label: &'a str,
    /// Where the packets come from.
    pub source: Option<IpAddr>,
    /// Where they go.
    pub destination: SocketAddr,
    /// The TTL of multicast (the `c=` line's).
    pub ttl: u8,
    /// What it carries.
    pub content: &'a Content,
}

#[cfg(test)]
mod tests;
