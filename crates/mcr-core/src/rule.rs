//! The rule model: what MCR forwards, from where to where.
//!
//! A rule takes one input (an interface, optionally one VLAN of it, a
//! destination group or unicast address and port, and optionally the
//! sources it takes) and sends every packet to one or more outputs (an
//! interface, optionally a VLAN tag, a destination group or unicast host
//! and port, a TTL, DSCP and source-address policy). IPv4 and IPv6 are
//! alike everywhere; an output's family may differ from its input's.
//!
//! The compact text form, used by `mcrctl` and the config file:
//!
//! ```text
//! input:  IFACE:ADDRESS:PORT[,vlan=ID][,source=ADDRESS]...
//!         veth1:239.1.1.1:5001,source=10.0.0.1,source=10.0.0.2
//! output: IFACE:ADDRESS:PORT[,vlan=ID][,ttl=N][,dscp=D][,source=POLICY]
//!         veth2:[ff3e::10]:6001,ttl=8,dscp=46
//! ```
//!
//! IPv6 addresses go in brackets (`veth1:[ff3e::1]:5001`).

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::arbitrate::framing::Framing;

pub use crate::rist::RistEndpoint;
pub use crate::srt::SrtEndpoint;

/// A forwarding rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// A name, unique among the rules: letters, digits, `.`, `_`, `-`.
    pub name: String,
    /// Where the stream comes in (with `redundancy`: the first input, the
    /// primary of a failover).
    pub input: Input,
    /// The stream's other inputs and how they are combined, if it has
    /// several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redundancy: Option<Redundancy>,
    /// Where it goes out; at least one.
    pub outputs: Vec<Output>,
    /// Whether the health of each input is followed (RTP sequence and
    /// jitter, MPEG-TS first-priority errors); on unless turned off.
    #[serde(default = "health_on", skip_serializing_if = "is_on")]
    pub health: bool,
    /// Whether it forwards: a rule turned off (an NMOS receiver that a
    /// controller disabled, or `enabled = false`) joins nothing and takes
    /// nothing, and keeps its place, its outputs and its counters.
    #[serde(default = "health_on", skip_serializing_if = "is_on")]
    pub enabled: bool,
}

fn health_on() -> bool {
    true
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_on(v: &bool) -> bool {
    *v
}

impl Rule {
    /// A rule with one input, its health followed.
    pub fn new(name: impl Into<String>, input: Input, outputs: Vec<Output>) -> Self {
        Rule {
            name: name.into(),
            input,
            redundancy: None,
            outputs,
            health: true,
            enabled: true,
        }
    }

    /// Every input, the first one first.
    pub fn inputs(&self) -> impl Iterator<Item = &Input> {
        std::iter::once(&self.input).chain(self.redundancy.iter().flat_map(|r| r.inputs.iter()))
    }

    /// Every input taken at layer 2, with its place among the inputs.
    pub fn udp_inputs(&self) -> impl Iterator<Item = (usize, &UdpInput)> {
        self.inputs().enumerate().filter_map(|(k, i)| Some((k, i.as_udp()?)))
    }

    /// The first input taken at layer 2, if any: its family is the rule's.
    pub fn first_udp_input(&self) -> Option<&UdpInput> {
        self.udp_inputs().next().map(|(_, u)| u)
    }

    /// How many inputs.
    pub fn input_count(&self) -> usize {
        1 + self.redundancy.as_ref().map_or(0, |r| r.inputs.len())
    }
}

/// A stream that comes in on several inputs (separate paths carrying the
/// same stream), and how they make one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "RedundancyForm", into = "RedundancyForm")]
pub struct Redundancy {
    /// How the inputs are combined.
    pub mode: Mode,
    /// The inputs besides the rule's first (at least one; in failover
    /// order).
    pub inputs: Vec<Input>,
}

/// The JSON form of [`Redundancy`]: the mode and its settings beside the
/// inputs (`{"mode":"merge","differential_ms":50,"inputs":[...]}`).
#[derive(Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case", deny_unknown_fields)]
enum RedundancyForm {
    Merge {
        inputs: Vec<Input>,
        #[serde(default = "default_differential")]
        differential_ms: u32,
    },
    Failover {
        inputs: Vec<Input>,
        #[serde(default = "default_loss_of_signal")]
        loss_of_signal_ms: u32,
        #[serde(default = "default_hold")]
        hold_ms: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error_threshold: Option<u64>,
    },
    Arbitrate {
        inputs: Vec<Input>,
        framing: Framing,
        #[serde(default = "default_window")]
        window: u32,
    },
}

/// A merge's path differential when a rule names none.
pub const DEFAULT_DIFFERENTIAL_MS: u32 = 50;
/// A failover's loss-of-signal time when a rule names none.
pub const DEFAULT_LOSS_OF_SIGNAL_MS: u32 = 200;
/// A failover's hold time when a rule names none.
pub const DEFAULT_HOLD_MS: u32 = 10_000;

fn default_differential() -> u32 {
    DEFAULT_DIFFERENTIAL_MS
}
fn default_loss_of_signal() -> u32 {
    DEFAULT_LOSS_OF_SIGNAL_MS
}
fn default_hold() -> u32 {
    DEFAULT_HOLD_MS
}
fn default_window() -> u32 {
    crate::arbitrate::DEFAULT_WINDOW
}

impl From<RedundancyForm> for Redundancy {
    fn from(f: RedundancyForm) -> Self {
        match f {
            RedundancyForm::Merge {
                inputs,
                differential_ms,
            } => Redundancy {
                mode: Mode::Merge { differential_ms },
                inputs,
            },
            RedundancyForm::Failover {
                inputs,
                loss_of_signal_ms,
                hold_ms,
                error_threshold,
            } => Redundancy {
                mode: Mode::Failover {
                    loss_of_signal_ms,
                    hold_ms,
                    error_threshold,
                },
                inputs,
            },
            RedundancyForm::Arbitrate {
                inputs,
                framing,
                window,
            } => Redundancy {
                mode: Mode::Arbitrate { framing, window },
                inputs,
            },
        }
    }
}

impl From<Redundancy> for RedundancyForm {
    fn from(r: Redundancy) -> Self {
        match r.mode {
            Mode::Merge { differential_ms } => RedundancyForm::Merge {
                inputs: r.inputs,
                differential_ms,
            },
            Mode::Failover {
                loss_of_signal_ms,
                hold_ms,
                error_threshold,
            } => RedundancyForm::Failover {
                inputs: r.inputs,
                loss_of_signal_ms,
                hold_ms,
                error_threshold,
            },
            Mode::Arbitrate { framing, window } => RedundancyForm::Arbitrate {
                inputs: r.inputs,
                framing,
                window,
            },
        }
    }
}

/// How a rule's inputs make one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// SMPTE ST 2022-7: every RTP packet once, from whichever input brings
    /// it first, in sequence order; a gap is held for at most the path
    /// differential.
    Merge {
        /// The longest one path may lag another, in ms.
        differential_ms: u32,
    },
    /// One input at a time: the first while it is healthy, else the next
    /// healthy one; back to the first once it was healthy for the hold
    /// time.
    Failover {
        /// An input that brought nothing this long has lost its signal, ms.
        loss_of_signal_ms: u32,
        /// How long the first input must be healthy to be taken back, ms.
        hold_ms: u32,
        /// More RTP gaps than this within a second make an input unhealthy
        /// (none: only a loss of signal does).
        error_threshold: Option<u64>,
    },
    /// A/B line arbitration of a sequenced market-data feed: the first
    /// copy of each sequence number goes out at once, later copies are
    /// dropped, and nothing waits for a gap ([`crate::arbitrate`]).
    Arbitrate {
        /// Where the feed keeps its sequence number.
        framing: Framing,
        /// Sequence numbers the window of each unit spans (a power of
        /// two).
        window: u32,
    },
}

impl Mode {
    /// A merge with the default path differential (50 ms).
    pub const MERGE: Mode = Mode::Merge {
        differential_ms: DEFAULT_DIFFERENTIAL_MS,
    };
    /// A failover with the default loss-of-signal (200 ms) and hold (10 s)
    /// times.
    pub const FAILOVER: Mode = Mode::Failover {
        loss_of_signal_ms: DEFAULT_LOSS_OF_SIGNAL_MS,
        hold_ms: DEFAULT_HOLD_MS,
        error_threshold: None,
    };

    /// Its name: `merge` or `failover`.
    pub fn name(&self) -> &'static str {
        match self {
            Mode::Merge { .. } => "merge",
            Mode::Failover { .. } => "failover",
            Mode::Arbitrate { .. } => "arbitrate",
        }
    }
}

impl fmt::Display for Mode {
    /// `merge` or `failover`, then the settings that are not the default
    /// (`merge,differential=80ms`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        match *self {
            Mode::Merge { differential_ms } => {
                if Mode::MERGE != *self {
                    write!(f, ",differential={differential_ms}ms")?;
                }
            }
            Mode::Failover {
                loss_of_signal_ms,
                hold_ms,
                error_threshold,
            } => {
                if loss_of_signal_ms != DEFAULT_LOSS_OF_SIGNAL_MS {
                    write!(f, ",loss-of-signal={loss_of_signal_ms}ms")?;
                }
                if hold_ms != DEFAULT_HOLD_MS {
                    write!(f, ",hold={hold_ms}ms")?;
                }
                if let Some(n) = error_threshold {
                    write!(f, ",errors={n}")?;
                }
            }
            Mode::Arbitrate { framing, window } => {
                match framing {
                    Framing::Generic(_) => write!(f, ",{framing}")?,
                    _ => write!(f, ",framing={framing}")?,
                }
                if window != crate::arbitrate::DEFAULT_WINDOW {
                    write!(f, ",window={window}")?;
                }
            }
        }
        Ok(())
    }
}

/// A duration in ms written `50ms`, `2s` or `50` (ms).
fn parse_ms(key: &str, v: &str) -> Result<u32, String> {
    let (num, scale) = if let Some(n) = v.strip_suffix("ms") {
        (n, 1)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1000)
    } else {
        (v, 1)
    };
    num.trim()
        .parse::<u32>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| format!("{key} `{v}`: write a time such as 50ms or 2s"))
}

impl FromStr for Mode {
    type Err = String;
    /// `merge[,differential=T]`,
    /// `failover[,loss-of-signal=T][,hold=T][,errors=N]` or
    /// `arbitrate,framing=NAME[,window=N]` (or the generic framing's
    /// fields instead of `framing=`).
    fn from_str(s: &str) -> Result<Self, String> {
        let mut parts = s.split(',').map(str::trim);
        let mut mode = match parts.next() {
            Some("merge") => Mode::MERGE,
            Some("failover") => Mode::FAILOVER,
            Some("arbitrate") => return parse_arbitrate(s, parts),
            _ => {
                return Err(format!(
                    "mode `{s}`: write merge, failover or arbitrate, then any settings"
                ));
            }
        };
        for kv in parts {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("mode `{s}`: setting `{kv}` is not KEY=VALUE"))?;
            match (&mut mode, k.trim()) {
                (Mode::Merge { differential_ms }, "differential") => *differential_ms = parse_ms(k, v)?,
                (Mode::Failover { loss_of_signal_ms, .. }, "loss-of-signal") => *loss_of_signal_ms = parse_ms(k, v)?,
                (Mode::Failover { hold_ms, .. }, "hold") => *hold_ms = parse_ms(k, v)?,
                (Mode::Failover { error_threshold, .. }, "errors") => {
                    *error_threshold = Some(
                        v.trim()
                            .parse()
                            .map_err(|_| format!("errors `{v}`: write a number of RTP gaps per second"))?,
                    )
                }
                (m, k) => {
                    let known = match m {
                        Mode::Merge { .. } => "differential",
                        Mode::Failover { .. } => "loss-of-signal, hold, errors",
                        Mode::Arbitrate { .. } => "framing, window",
                    };
                    return Err(format!(
                        "mode `{s}`: {} has no setting `{k}` (it has {known})",
                        m.name()
                    ));
                }
            }
        }
        Ok(mode)
    }
}

/// The settings of `arbitrate` (after its name): `framing=NAME` or the
/// generic framing's fields, and `window=N`.
fn parse_arbitrate<'a>(s: &str, parts: impl Iterator<Item = &'a str>) -> Result<Mode, String> {
    let mut named = None;
    let mut fields = Vec::new();
    let mut window = crate::arbitrate::DEFAULT_WINDOW;
    for kv in parts {
        let (k, v) = kv
            .split_once('=')
            .map(|(k, v)| (k.trim(), v.trim()))
            .ok_or_else(|| format!("mode `{s}`: setting `{kv}` is not KEY=VALUE"))?;
        match k {
            "framing" => named = Some(Framing::by_name(v)?),
            "window" => {
                window = v
                    .replace('_', "")
                    .parse()
                    .map_err(|_| format!("window `{v}`: write a number of sequence numbers, such as 65536"))?
            }
            "sequence" | "count" | "session" | "unit" => fields.push((k, v)),
            other => {
                return Err(format!(
                    "mode `{s}`: arbitrate has no setting `{other}` (it has framing, window, or a generic framing's sequence, count, session, unit)"
                ));
            }
        }
    }
    let framing = match (named, fields.is_empty()) {
        (Some(f), true) => f,
        (None, false) => Framing::generic(fields)?,
        (Some(_), false) => {
            return Err(format!(
                "mode `{s}`: give framing= or the fields of a generic framing (sequence=...), not both"
            ));
        }
        (None, true) => {
            return Err(format!(
                "mode `{s}`: arbitrate needs the feed's framing: framing={}, or sequence=TYPE@OFFSET",
                crate::arbitrate::framing::NAMES.replace(", ", "|")
            ));
        }
    };
    Ok(Mode::Arbitrate { framing, window })
}

/// Where a rule takes its stream from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Input {
    /// Datagrams to a group or an address of this host, taken at layer 2
    /// on an interface.
    Udp(UdpInput),
    /// An SRT endpoint: a listener a remote encoder calls to push the
    /// stream, or a caller that pulls it from a remote listener.
    Srt(SrtEndpoint),
    /// A RIST endpoint: a listener a remote sender reaches, or a caller
    /// that reaches a remote sender.
    Rist(RistEndpoint),
}

impl Input {
    /// The UDP input, if it is one.
    pub fn as_udp(&self) -> Option<&UdpInput> {
        match self {
            Input::Udp(u) => Some(u),
            Input::Srt(_) | Input::Rist(_) => None,
        }
    }

    /// The SRT endpoint, if it is one.
    pub fn as_srt(&self) -> Option<&SrtEndpoint> {
        match self {
            Input::Srt(e) => Some(e),
            Input::Udp(_) | Input::Rist(_) => None,
        }
    }

    /// The RIST endpoint, if it is one.
    pub fn as_rist(&self) -> Option<&RistEndpoint> {
        match self {
            Input::Rist(e) => Some(e),
            Input::Udp(_) | Input::Srt(_) => None,
        }
    }

    /// Whether its datagrams come through a protocol in user space (SRT or
    /// RIST), which a worker takes them from and carries as IPv4.
    pub fn is_carried(&self) -> bool {
        !matches!(self, Input::Udp(_))
    }

    /// The interface it arrives on, if it names one.
    pub fn interface(&self) -> Option<&str> {
        self.as_udp().map(|u| u.interface.as_str())
    }
}

/// A stream taken at layer 2: datagrams to a group or an address of the
/// host.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UdpInput {
    /// The interface it arrives on.
    pub interface: String,
    /// The 802.1Q VLAN id it carries on that interface (a trunk), or none
    /// for the interface's untagged traffic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlan: Option<u16>,
    /// Its destination: a multicast group, or a unicast address of the
    /// interface, and the UDP port.
    pub destination: SocketAddr,
    /// Only packets from these sources (an (S,G) rule, joined source by
    /// source); any source if empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<IpAddr>,
}

/// One place a rule sends its stream.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Output {
    /// Datagrams to a multicast group or a unicast host, through an
    /// interface.
    Udp(UdpOutput),
    /// An SRT endpoint: a listener that serves the callers that ask, or a
    /// caller.
    Srt(SrtEndpoint),
    /// A RIST endpoint: a listener that serves the receivers that reach
    /// it, or a caller that reaches a remote receiver.
    Rist(RistEndpoint),
}

/// An output that sends UDP datagrams.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UdpOutput {
    /// The interface it leaves on.
    pub interface: String,
    /// The 802.1Q VLAN id every frame is tagged with, or none: untagged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlan: Option<u16>,
    /// Its new destination: a multicast group, or a unicast host, and port.
    pub destination: SocketAddr,
    /// TTL (hop limit) of what leaves.
    #[serde(default, skip_serializing_if = "Ttl::is_default")]
    pub ttl: Ttl,
    /// DSCP of what leaves.
    #[serde(default, skip_serializing_if = "Dscp::is_default")]
    pub dscp: Dscp,
    /// Source address of what leaves.
    #[serde(default, skip_serializing_if = "SourcePolicy::is_default")]
    pub source: SourcePolicy,
    /// Whether it sends: an output turned off (`enabled=false`, or an NMOS
    /// sender a controller disabled) keeps its place and its counters and
    /// sends nothing, while the rule's other outputs go on.
    #[serde(default = "health_on", skip_serializing_if = "is_on")]
    pub enabled: bool,
}

impl Output {
    /// The UDP output, if it is one.
    pub fn as_udp(&self) -> Option<&UdpOutput> {
        match self {
            Output::Udp(u) => Some(u),
            Output::Srt(_) | Output::Rist(_) => None,
        }
    }

    /// The SRT endpoint, if it is one.
    pub fn as_srt(&self) -> Option<&SrtEndpoint> {
        match self {
            Output::Srt(e) => Some(e),
            Output::Udp(_) | Output::Rist(_) => None,
        }
    }

    /// The RIST endpoint, if it is one.
    pub fn as_rist(&self) -> Option<&RistEndpoint> {
        match self {
            Output::Rist(e) => Some(e),
            Output::Udp(_) | Output::Srt(_) => None,
        }
    }

    /// The interface it leaves on, if it names one (an SRT output's
    /// packets go where the kernel routes them).
    pub fn interface(&self) -> Option<&str> {
        self.as_udp().map(|u| u.interface.as_str())
    }

    /// Whether it sends (only a UDP output can be turned off).
    pub fn is_enabled(&self) -> bool {
        self.as_udp().is_none_or(|u| u.enabled)
    }

    /// Its text form as if it were turned on: what names it, on or off.
    pub fn name_text(&self) -> String {
        match self {
            Output::Udp(u) if !u.enabled => UdpOutput {
                enabled: true,
                ..u.clone()
            }
            .to_string(),
            _ => self.to_string(),
        }
    }
}

/// The JSON form of an SRT output: `{"srt": {...}}`, beside a UDP
/// output's fields.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SrtForm<E> {
    srt: E,
}

/// The JSON form of a RIST endpoint: `{"rist": {...}}`.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RistForm<E> {
    rist: E,
}

/// Reads an input or output: a UDP endpoint's fields, `{"srt": {...}}`,
/// `{"rist": {...}}`, or its text form
/// (`"srt://0.0.0.0:9000,latency=400"`); a mistake is named as the form it
/// was meant for names it.
fn deserialize_endpoint<'de, T, U, D>(
    d: D,
    srt: fn(SrtEndpoint) -> T,
    rist: fn(RistEndpoint) -> T,
    udp: fn(U) -> T,
) -> Result<T, D::Error>
where
    T: FromStr<Err = String>,
    U: serde::de::DeserializeOwned,
    D: serde::Deserializer<'de>,
{
    use serde::de::Error;
    let v = serde_json::Value::deserialize(d)?;
    if let Some(text) = v.as_str() {
        return text.parse().map_err(D::Error::custom);
    }
    if v.get("srt").is_some() {
        let f: SrtForm<SrtEndpoint> = serde_json::from_value(v).map_err(D::Error::custom)?;
        f.srt.check().map_err(|m| D::Error::custom(format!("srt: {m}")))?;
        return Ok(srt(f.srt));
    }
    if v.get("rist").is_some() {
        let f: RistForm<RistEndpoint> = serde_json::from_value(v).map_err(D::Error::custom)?;
        f.rist.check().map_err(|m| D::Error::custom(format!("rist: {m}")))?;
        return Ok(rist(f.rist));
    }
    serde_json::from_value(v).map(udp).map_err(D::Error::custom)
}

impl Serialize for Input {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Input::Udp(u) => u.serialize(s),
            Input::Srt(e) => SrtForm { srt: e }.serialize(s),
            Input::Rist(e) => RistForm { rist: e }.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Input {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        deserialize_endpoint(d, Input::Srt, Input::Rist, Input::Udp)
    }
}

impl Serialize for Output {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Output::Udp(u) => u.serialize(s),
            Output::Srt(e) => SrtForm { srt: e }.serialize(s),
            Output::Rist(e) => RistForm { rist: e }.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Output {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        deserialize_endpoint(d, Output::Srt, Output::Rist, Output::Udp)
    }
}

/// The TTL of an output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(try_from = "NumberOrWord", into = "NumberOrWord")]
pub enum Ttl {
    /// The input's TTL minus one (a packet that arrives with TTL 1 is not
    /// sent on). Written `decrement`.
    #[default]
    Decrement,
    /// This value, 1 to 255.
    Fixed(u8),
}

impl Ttl {
    fn is_default(&self) -> bool {
        *self == Ttl::Decrement
    }
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum NumberOrWord {
    Number(u16),
    Word(String),
}

impl TryFrom<NumberOrWord> for Ttl {
    type Error = String;
    fn try_from(t: NumberOrWord) -> Result<Self, String> {
        match t {
            NumberOrWord::Number(n) => match u8::try_from(n) {
                Ok(v) if v > 0 => Ok(Ttl::Fixed(v)),
                _ => Err(format!("ttl {n} is outside 1-255")),
            },
            NumberOrWord::Word(w) => w.parse(),
        }
    }
}

impl From<Ttl> for NumberOrWord {
    fn from(t: Ttl) -> Self {
        match t {
            Ttl::Decrement => NumberOrWord::Word("decrement".into()),
            Ttl::Fixed(v) => NumberOrWord::Number(u16::from(v)),
        }
    }
}

impl FromStr for Ttl {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "decrement" {
            return Ok(Ttl::Decrement);
        }
        match s.parse::<u8>() {
            Ok(v) if v > 0 => Ok(Ttl::Fixed(v)),
            _ => Err(format!("ttl `{s}`: write a number from 1 to 255, or decrement")),
        }
    }
}

impl fmt::Display for Ttl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ttl::Decrement => f.write_str("decrement"),
            Ttl::Fixed(v) => write!(f, "{v}"),
        }
    }
}

/// The DSCP (the upper six bits of the IPv4 TOS byte or the IPv6 traffic
/// class) of an output. ECN bits are always kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(try_from = "NumberOrWord", into = "NumberOrWord")]
pub enum Dscp {
    /// The input's DSCP. Written `keep`.
    #[default]
    Keep,
    /// This value, 0 to 63.
    Set(u8),
}

impl Dscp {
    fn is_default(&self) -> bool {
        *self == Dscp::Keep
    }
}

/// The DSCP names of RFC 4594 / RFC 2474 (class selectors, assured
/// forwarding, expedited forwarding), as operators write them.
fn dscp_by_name(s: &str) -> Option<u8> {
    let l = s.to_ascii_lowercase();
    match l.as_str() {
        "be" | "df" => return Some(0),
        "ef" => return Some(46),
        "va" | "voice-admit" => return Some(44),
        _ => {}
    }
    let digits = |p: &str| l.strip_prefix(p).and_then(|d| d.parse::<u8>().ok());
    if let Some(n) = digits("cs").filter(|n| *n <= 7) {
        return Some(n << 3);
    }
    let af = digits("af")?;
    let (class, drop) = (af / 10, af % 10);
    ((1..=4).contains(&class) && (1..=3).contains(&drop)).then_some((class << 3) | (drop << 1))
}

impl TryFrom<NumberOrWord> for Dscp {
    type Error = String;
    fn try_from(t: NumberOrWord) -> Result<Self, String> {
        match t {
            NumberOrWord::Number(n) if n <= 63 => Ok(Dscp::Set(n as u8)),
            NumberOrWord::Number(n) => Err(format!("dscp {n} is outside 0-63")),
            NumberOrWord::Word(w) => w.parse(),
        }
    }
}

impl From<Dscp> for NumberOrWord {
    fn from(d: Dscp) -> Self {
        match d {
            Dscp::Keep => NumberOrWord::Word("keep".into()),
            Dscp::Set(v) => NumberOrWord::Number(u16::from(v)),
        }
    }
}

impl FromStr for Dscp {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "keep" {
            return Ok(Dscp::Keep);
        }
        match s.parse::<u8>().ok().or_else(|| dscp_by_name(s)) {
            Some(v) if v <= 63 => Ok(Dscp::Set(v)),
            _ => Err(format!(
                "dscp `{s}`: write a number from 0 to 63, a name (ef, af11-af43, cs0-cs7, be), or keep"
            )),
        }
    }
}

impl fmt::Display for Dscp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dscp::Keep => f.write_str("keep"),
            Dscp::Set(v) => write!(f, "{v}"),
        }
    }
}

/// A VLAN id as written in an option: 1 to 4094.
fn parse_vlan(spec: &str, v: &str) -> Result<u16, String> {
    match v.parse::<u16>() {
        Ok(id) if (1..=4094).contains(&id) => Ok(id),
        _ => Err(format!("`{spec}`: vlan `{v}`: write a VLAN id from 1 to 4094")),
    }
}

/// The source address of an output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum SourcePolicy {
    /// The output interface's own address. Written `interface`.
    #[default]
    Interface,
    /// The address the packet arrived with. Written `keep`.
    Keep,
    /// This address.
    Address(IpAddr),
}

impl SourcePolicy {
    fn is_default(&self) -> bool {
        *self == SourcePolicy::Interface
    }
}

impl FromStr for SourcePolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "interface" => Ok(SourcePolicy::Interface),
            "keep" => Ok(SourcePolicy::Keep),
            _ => s
                .parse()
                .map(SourcePolicy::Address)
                .map_err(|_| format!("source `{s}`: write interface, keep, or an IP address")),
        }
    }
}

impl TryFrom<String> for SourcePolicy {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<SourcePolicy> for String {
    fn from(p: SourcePolicy) -> String {
        p.to_string()
    }
}

impl fmt::Display for SourcePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourcePolicy::Interface => f.write_str("interface"),
            SourcePolicy::Keep => f.write_str("keep"),
            SourcePolicy::Address(a) => write!(f, "{a}"),
        }
    }
}

/// The parts of `IFACE:ADDRESS:PORT[,k=v...]`.
struct SpecParts {
    interface: String,
    destination: SocketAddr,
    options: Vec<(String, String)>,
}

/// Splits `IFACE:ADDRESS:PORT[,k=v...]` into its parts.
fn split_spec(spec: &str) -> Result<SpecParts, String> {
    let spec = spec.trim();
    let (main, opts) = match spec.split_once(',') {
        Some((m, o)) => (m, Some(o)),
        None => (spec, None),
    };
    let (iface, addr) = main
        .split_once(':')
        .ok_or_else(|| format!("`{spec}`: write INTERFACE:ADDRESS:PORT, e.g. eth0:239.1.1.1:5001"))?;
    if iface.is_empty() {
        return Err(format!("`{spec}`: the interface is missing before the first `:`"));
    }
    let destination: SocketAddr = addr
        .parse()
        .map_err(|_| format!("`{spec}`: `{addr}` is not ADDRESS:PORT (IPv6 in brackets, e.g. [ff3e::1]:5001)"))?;
    let mut kv = Vec::new();
    for o in opts.into_iter().flat_map(|o| o.split(',')) {
        let (k, v) = o
            .split_once('=')
            .ok_or_else(|| format!("`{spec}`: option `{o}` is not KEY=VALUE"))?;
        kv.push((k.trim().to_string(), v.trim().to_string()));
    }
    Ok(SpecParts {
        interface: iface.to_string(),
        destination,
        options: kv,
    })
}

impl FromStr for Input {
    type Err = String;
    fn from_str(spec: &str) -> Result<Self, String> {
        if spec.trim_start().starts_with("srt://") {
            spec.parse().map(Input::Srt)
        } else if spec.trim_start().starts_with("rist://") {
            spec.parse().map(Input::Rist)
        } else {
            spec.parse().map(Input::Udp)
        }
    }
}

impl FromStr for UdpInput {
    type Err = String;
    fn from_str(spec: &str) -> Result<Self, String> {
        let p = split_spec(spec)?;
        let mut input = UdpInput {
            interface: p.interface,
            vlan: None,
            destination: p.destination,
            sources: Vec::new(),
        };
        for (k, v) in p.options {
            match k.as_str() {
                "source" => input.sources.push(
                    v.parse()
                        .map_err(|_| format!("`{spec}`: source `{v}` is not an IP address"))?,
                ),
                "vlan" => input.vlan = Some(parse_vlan(spec, &v)?),
                _ => return Err(format!("`{spec}`: unknown input option `{k}` (known: vlan, source)")),
            }
        }
        Ok(input)
    }
}

impl FromStr for Output {
    type Err = String;
    fn from_str(spec: &str) -> Result<Self, String> {
        if spec.trim_start().starts_with("srt://") {
            spec.parse().map(Output::Srt)
        } else if spec.trim_start().starts_with("rist://") {
            spec.parse().map(Output::Rist)
        } else {
            spec.parse().map(Output::Udp)
        }
    }
}

impl FromStr for UdpOutput {
    type Err = String;
    fn from_str(spec: &str) -> Result<Self, String> {
        let p = split_spec(spec)?;
        let mut out = UdpOutput {
            interface: p.interface,
            vlan: None,
            destination: p.destination,
            ttl: Ttl::default(),
            dscp: Dscp::default(),
            source: SourcePolicy::default(),
            enabled: true,
        };
        for (k, v) in p.options {
            match k.as_str() {
                "enabled" => {
                    out.enabled = match v.as_str() {
                        "true" => true,
                        "false" => false,
                        _ => return Err(format!("`{spec}`: enabled is true or false, not `{v}`")),
                    }
                }
                "ttl" => out.ttl = v.parse().map_err(|e| format!("`{spec}`: {e}"))?,
                "dscp" => out.dscp = v.parse().map_err(|e| format!("`{spec}`: {e}"))?,
                "source" => out.source = v.parse().map_err(|e| format!("`{spec}`: {e}"))?,
                "vlan" => out.vlan = Some(parse_vlan(spec, &v)?),
                _ => {
                    return Err(format!(
                        "`{spec}`: unknown output option `{k}` (known: vlan, ttl, dscp, source, enabled)"
                    ));
                }
            }
        }
        Ok(out)
    }
}

fn write_addr(f: &mut fmt::Formatter<'_>, iface: &str, a: &SocketAddr) -> fmt::Result {
    write!(f, "{iface}:{a}")
}

impl fmt::Display for Input {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Input::Udp(u) => u.fmt(f),
            Input::Srt(e) => e.fmt(f),
            Input::Rist(e) => e.fmt(f),
        }
    }
}

impl fmt::Display for UdpInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_addr(f, &self.interface, &self.destination)?;
        if let Some(v) = self.vlan {
            write!(f, ",vlan={v}")?;
        }
        for s in &self.sources {
            write!(f, ",source={s}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Output::Udp(u) => u.fmt(f),
            Output::Srt(e) => e.fmt(f),
            Output::Rist(e) => e.fmt(f),
        }
    }
}

impl fmt::Display for UdpOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_addr(f, &self.interface, &self.destination)?;
        if let Some(v) = self.vlan {
            write!(f, ",vlan={v}")?;
        }
        if self.ttl != Ttl::Decrement {
            write!(f, ",ttl={}", self.ttl)?;
        }
        if self.dscp != Dscp::Keep {
            write!(f, ",dscp={}", self.dscp)?;
        }
        if self.source != SourcePolicy::Interface {
            write!(f, ",source={}", self.source)?;
        }
        if !self.enabled {
            write!(f, ",enabled=false")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_print_back() {
        for s in [
            "veth1:239.1.1.1:5001",
            "veth1:239.1.1.1:5001,source=10.0.0.1",
            "veth1:232.1.1.1:5001,source=10.0.0.1,source=10.0.0.2",
            "trunk0:239.1.1.1:5001,vlan=100",
            "veth1:[ff3e::1]:5001",
            "veth1:[ff3e::1]:5001,source=2001:db8::1",
        ] {
            let i: Input = s.parse().expect(s);
            assert_eq!(i.to_string(), s);
        }
        for s in [
            "veth2:239.10.1.1:6001",
            "veth2:239.10.1.1:6001,ttl=8",
            "veth2:10.0.1.2:7000,ttl=3,source=keep",
            "veth2:239.10.1.1:6001,source=10.9.9.9",
            "veth2:[ff3e::10]:6001,vlan=200,ttl=8,dscp=46",
            "veth2:10.0.1.2:7000,dscp=0",
            "veth2:239.10.1.1:6001,ttl=8,enabled=false",
        ] {
            let o: Output = s.parse().expect(s);
            assert_eq!(o.to_string(), s);
        }
    }

    #[test]
    fn outputs_of_both_kinds_have_a_json_form() {
        let r: Rule = serde_json::from_str(
            r#"{"name":"a","input":{"interface":"veth1","destination":"239.1.1.1:5001"},
                "outputs":[{"interface":"veth2","destination":"239.10.1.1:6001"},
                           {"srt":{"mode":"listener","address":"0.0.0.0:9000","latency_ms":400}},
                           "srt://0.0.0.0:9001,streamid=b"]}"#,
        )
        .expect("rule");
        let texts: Vec<String> = r.outputs.iter().map(ToString::to_string).collect();
        assert_eq!(
            texts,
            [
                "veth2:239.10.1.1:6001",
                "srt://0.0.0.0:9000,mode=listener,latency=400",
                "srt://0.0.0.0:9001,mode=listener,streamid=b"
            ]
        );
        let j = serde_json::to_string(&r).expect("json");
        assert!(
            j.contains(r#"{"srt":{"mode":"listener","address":"0.0.0.0:9001","stream_id":"b"}}"#),
            "{j}"
        );
        assert_eq!(serde_json::from_str::<Rule>(&j).expect("back"), r);
        for (bad, needle) in [
            (
                r#"{"srt":{"mode":"listener","address":"0.0.0.0:9000","colour":1}}"#,
                "unknown field `colour`",
            ),
            (
                r#"{"srt":{"mode":"listener","address":"0.0.0.0:0"}}"#,
                "srt: 0.0.0.0:0: give a UDP port",
            ),
            (
                r#"{"interface":"veth2","destination":"239.1.1.1:1","colour":1}"#,
                "unknown field `colour`",
            ),
            (r#""srt://0.0.0.0:9000,colour=red""#, "unknown SRT option"),
        ] {
            let e = serde_json::from_str::<Output>(bad).expect_err(bad).to_string();
            assert!(e.contains(needle), "{bad}: {e}");
        }
    }

    #[test]
    fn spec_mistakes_are_named() {
        let cases = [
            ("239.1.1.1:5001", "not ADDRESS:PORT"),
            (":239.1.1.1:5001", "interface is missing"),
            ("veth1:239.1.1.1", "not ADDRESS:PORT"),
            ("veth1:239.1.1.1:5001,ttl=3", "unknown input option `ttl`"),
            ("veth1:239.1.1.1:5001,source", "not KEY=VALUE"),
            ("veth1:239.1.1.1:5001,source=me", "not an IP address"),
            ("veth1:239.1.1.1:5001,vlan=0", "1 to 4094"),
            ("veth1:239.1.1.1:5001,vlan=4095", "1 to 4094"),
            ("veth1:239.1.1.1:5001,vlan=x", "1 to 4094"),
        ];
        for (s, needle) in cases {
            let e = s.parse::<Input>().expect_err(s);
            assert!(e.contains(needle), "{s}: {e}");
        }
        let e = "veth2:239.1.1.1:6001,ttl=0".parse::<Output>().expect_err("ttl 0");
        assert!(e.contains("1 to 255"), "{e}");
        let e = "veth2:239.1.1.1:6001,source=nowhere"
            .parse::<Output>()
            .expect_err("source");
        assert!(e.contains("interface, keep"), "{e}");
        let e = "veth2:239.1.1.1:6001,color=red".parse::<Output>().expect_err("option");
        assert!(e.contains("known: vlan, ttl, dscp, source"), "{e}");
        let e = "veth2:239.1.1.1:6001,dscp=64".parse::<Output>().expect_err("dscp");
        assert!(e.contains("0 to 63"), "{e}");
        let e = "veth2:239.1.1.1:6001,dscp=af44".parse::<Output>().expect_err("dscp");
        assert!(e.contains("af11-af43"), "{e}");
    }

    #[test]
    fn dscp_names_are_the_standard_code_points() {
        for (name, v) in [
            ("ef", 46),
            ("EF", 46),
            ("af11", 10),
            ("af41", 34),
            ("af43", 38),
            ("cs1", 8),
            ("cs7", 56),
            ("be", 0),
            ("va", 44),
        ] {
            assert_eq!(name.parse::<Dscp>(), Ok(Dscp::Set(v)), "{name}");
        }
        assert_eq!("keep".parse::<Dscp>(), Ok(Dscp::Keep));
        assert_eq!("63".parse::<Dscp>(), Ok(Dscp::Set(63)));
    }

    #[test]
    fn json_form_is_compact_and_strict() {
        let r = Rule::new(
            "feed-a",
            "veth1:239.1.1.1:5001".parse().expect("input"),
            vec!["veth2:239.10.1.1:6001,ttl=8,source=keep".parse().expect("output")],
        );
        let j = serde_json::to_string(&r).expect("json");
        assert_eq!(
            j,
            r#"{"name":"feed-a","input":{"interface":"veth1","destination":"239.1.1.1:5001"},"outputs":[{"interface":"veth2","destination":"239.10.1.1:6001","ttl":8,"source":"keep"}]}"#
        );
        assert_eq!(serde_json::from_str::<Rule>(&j).expect("back"), r);
        let unknown = j.replace(r#""name""#, r#""colour":"red","name""#);
        let e = serde_json::from_str::<Rule>(&unknown)
            .expect_err("unknown field")
            .to_string();
        assert!(e.contains("unknown field `colour`"), "{e}");
        let bad_ttl = j.replace(r#""ttl":8"#, r#""ttl":300"#);
        assert!(
            serde_json::from_str::<Rule>(&bad_ttl)
                .expect_err("ttl")
                .to_string()
                .contains("1-255")
        );
        let word = j.replace(r#""ttl":8"#, r#""ttl":"decrement""#);
        assert_eq!(
            serde_json::from_str::<Rule>(&word).expect("word").outputs[0]
                .as_udp()
                .expect("udp")
                .ttl,
            Ttl::Decrement
        );
    }

    #[test]
    fn modes_parse_print_back_and_name_their_mistakes() {
        for (text, mode) in [
            ("merge", Mode::MERGE),
            ("merge,differential=80ms", Mode::Merge { differential_ms: 80 }),
            (
                "failover,loss-of-signal=100ms,hold=2000ms,errors=5",
                Mode::Failover {
                    loss_of_signal_ms: 100,
                    hold_ms: 2000,
                    error_threshold: Some(5),
                },
            ),
            ("failover", Mode::FAILOVER),
        ] {
            assert_eq!(text.parse::<Mode>(), Ok(mode), "{text}");
            assert_eq!(mode.to_string(), text);
        }
        assert_eq!(
            "failover,hold=2s".parse::<Mode>(),
            Ok(Mode::Failover {
                loss_of_signal_ms: 200,
                hold_ms: 2000,
                error_threshold: None
            })
        );
        for (bad, says) in [
            ("mirror", "write merge, failover or arbitrate"),
            ("merge,hold=2s", "merge has no setting `hold` (it has differential)"),
            ("merge,differential=fast", "write a time such as 50ms"),
            ("failover,errors", "is not KEY=VALUE"),
        ] {
            let e = bad.parse::<Mode>().expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
        let r = Rule {
            redundancy: Some(Redundancy {
                mode: Mode::MERGE,
                inputs: vec!["veth3:239.2.1.1:5001".parse().expect("input")],
            }),
            ..Rule::new(
                "m",
                "veth1:239.1.1.1:5001".parse().expect("input"),
                vec!["veth2:239.10.1.1:6001".parse().expect("output")],
            )
        };
        let j = serde_json::to_string(&r).expect("json");
        assert!(
            j.contains(r#""redundancy":{"mode":"merge","inputs":[{"interface":"veth3","destination":"239.2.1.1:5001"}],"differential_ms":50}"#),
            "{j}"
        );
        assert_eq!(serde_json::from_str::<Rule>(&j).expect("back"), r);
        let typo = j.replace("differential_ms", "diferential_ms");
        assert!(serde_json::from_str::<Rule>(&typo).is_err(), "unknown setting refused");
        assert_eq!(
            r.inputs().filter_map(Input::interface).collect::<Vec<_>>(),
            ["veth1", "veth3"]
        );
    }

    #[test]
    fn arbitrate_modes_parse_print_back_and_name_their_mistakes() {
        use crate::arbitrate::framing::{Field, Generic};
        for (text, mode) in [
            (
                "arbitrate,framing=moldudp64",
                Mode::Arbitrate {
                    framing: Framing::MoldUdp64,
                    window: 65_536,
                },
            ),
            (
                "arbitrate,framing=mitch,window=4096",
                Mode::Arbitrate {
                    framing: Framing::Mitch,
                    window: 4096,
                },
            ),
            (
                "arbitrate,sequence=u32le@0,count=u16be@4",
                Mode::Arbitrate {
                    framing: Framing::Generic(Generic {
                        sequence: Field {
                            offset: 0,
                            width: 4,
                            big_endian: false,
                        },
                        count: Some(Field {
                            offset: 4,
                            width: 2,
                            big_endian: true,
                        }),
                        session: None,
                        unit: None,
                    }),
                    window: 65_536,
                },
            ),
        ] {
            assert_eq!(text.parse::<Mode>(), Ok(mode), "{text}");
            assert_eq!(mode.to_string(), text);
        }
        for (bad, says) in [
            (
                "arbitrate",
                "needs the feed's framing: framing=moldudp64|mdp3|pitch|mitch",
            ),
            ("arbitrate,framing=itch", "write one of moldudp64, mdp3, pitch, mitch"),
            ("arbitrate,framing=mdp3,sequence=u32le@0", "not both"),
            ("arbitrate,framing=mdp3,differential=5ms", "no setting `differential`"),
            ("arbitrate,framing=mdp3,window=lots", "a number of sequence numbers"),
        ] {
            let e = bad.parse::<Mode>().expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
        let r = Rule {
            redundancy: Some(Redundancy {
                mode: "arbitrate,framing=pitch".parse().expect("mode"),
                inputs: vec!["veth3:239.2.1.1:5001".parse().expect("input")],
            }),
            ..Rule::new(
                "md",
                "veth1:239.1.1.1:5001".parse().expect("input"),
                vec!["veth2:239.10.1.1:6001".parse().expect("output")],
            )
        };
        let j = serde_json::to_string(&r).expect("json");
        assert!(
            j.contains(r#""mode":"arbitrate","inputs":[{"interface":"veth3","destination":"239.2.1.1:5001"}],"framing":"pitch","window":65536}"#),
            "{j}"
        );
        assert_eq!(serde_json::from_str::<Rule>(&j).expect("back"), r);
        let generic = j.replace(r#""framing":"pitch""#, r#""framing":"sequence=u64be@2,unit=u8@0""#);
        let back = serde_json::from_str::<Rule>(&generic).expect("generic");
        assert_eq!(
            back.redundancy.map(|r| r.mode.to_string()).as_deref(),
            Some("arbitrate,sequence=u64be@2,unit=u8@0")
        );
        let bad = j.replace(r#""framing":"pitch""#, r#""framing":"sequence=u64be@2,unit=u16be@0""#);
        let e = serde_json::from_str::<Rule>(&bad).expect_err("unit").to_string();
        assert!(e.contains("one byte"), "{e}");
    }
}
