//! The control protocol: newline-delimited JSON over a Unix stream socket,
//! one request per line and one response per request, several per
//! connection.
//!
//! ```text
//! → {"cmd":"version","protocol":4}
//! ← {"ok":true,"result":"version","daemon":"0.1.0","protocol":4}
//! → {"cmd":"add","rule":{"name":"a","input":{...},"outputs":[...]}}
//! ← {"ok":false,"result":"error","error":{"kind":"invalid_rule","field":"outputs[0].interface","message":"..."}}
//! ```

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::rule::Rule;

/// The protocol version this build speaks.
pub const PROTOCOL: u32 = 6;
/// The longest request line accepted, in bytes.
pub const MAX_REQUEST_BYTES: usize = 1 << 20;

/// A request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Who are you? With `protocol`, also: do we speak the same protocol?
    Version {
        /// The client's protocol version.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        protocol: Option<u32>,
    },
    /// Add a rule (or replace the rule of the same name).
    Add {
        /// The rule.
        rule: Rule,
    },
    /// Remove a rule.
    Remove {
        /// Its name.
        name: String,
    },
    /// A failover rule forwards from `input` until told otherwise (none,
    /// or `auto`: the rule chooses again).
    Switch {
        /// The rule's name.
        rule: String,
        /// The input: its number from 1 (the primary), its text as `list`
        /// shows it, or `auto`; none is `auto`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        input: Option<String>,
    },
    /// Every rule, with its group memberships. (Written with braces so that
    /// unknown fields are refused here too.)
    List {},
    /// Counters and rates.
    Stats {},
    /// The worker processes.
    Workers {},
    /// Read the config file again and apply what changed.
    Reload {},
    /// Write the running rules to a config file.
    Save {
        /// Where (an absolute path in the directory of the daemon's config
        /// file); the daemon's own config file if absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        to: Option<PathBuf>,
    },
    /// The text `save` would write, written nowhere.
    Config {},
    /// What the daemon did lately: rules changed, interfaces came and
    /// went, workers restarted, reloads (the newest [`EVENTS_KEPT`]).
    Events {},
    /// Each rule's packet and bit rate over the last [`HISTORY_SAMPLES`]
    /// samples (one a second).
    History {},
    /// How the etcd store the rules come from stands.
    Store {},
    /// The relay as an AMWA NMOS Node: its resources (IS-04) and its
    /// senders' and receivers' connection state (IS-05).
    Nmos {},
    /// The NMOS node at a glance, without building its resources: its id,
    /// how many senders and receivers, its registration, and a stamp that
    /// moves whenever what `nmos` answers may have changed.
    NmosGlance {},
    /// An IS-05 PATCH of a sender's or receiver's `staged` endpoint.
    NmosStage {
        /// A receiver (else a sender).
        receiver: bool,
        /// Its id.
        id: String,
        /// The PATCH's body.
        body: serde_json::Value,
    },
    /// The relay's role (active or standby); with `set`, change it first.
    Role {
        /// The role to take.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        set: Option<crate::config::Role>,
    },
    /// Hand everything to a new mcrd program, run in this process's
    /// place: `binary`, or this one's own file (which a package upgrade
    /// may have replaced). The eBPF data path forwards throughout.
    Restart {
        /// The program to run.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        binary: Option<PathBuf>,
    },
    /// A `stats` reply every `interval_ms` (default 1000) until the client
    /// sends anything or closes.
    Watch {
        /// Between replies, in ms (100 to 60000).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        interval_ms: Option<u64>,
    },
}

/// How many recent events the daemon keeps for `events`.
pub const EVENTS_KEPT: usize = 200;
/// How many rate samples per rule the daemon keeps for `history`.
pub const HISTORY_SAMPLES: usize = 60;

/// The shortest and longest `watch` interval, in ms.
pub const WATCH_INTERVAL_MS: std::ops::RangeInclusive<u64> = 100..=60_000;

/// A response: `ok` and one of the replies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// False exactly when the reply is an error.
    pub ok: bool,
    /// The reply.
    #[serde(flatten)]
    pub reply: Reply,
}

impl From<Reply> for Response {
    fn from(reply: Reply) -> Self {
        Response {
            ok: !matches!(reply, Reply::Error { .. }),
            reply,
        }
    }
}

/// What the daemon answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Reply {
    /// To `version`.
    Version {
        /// The daemon's version.
        daemon: String,
        /// The protocol it speaks.
        protocol: u32,
    },
    /// To `restart`: the program checked, the workers are stopping and the
    /// process runs `binary` next; the connection then closes.
    Restarting {
        /// The program that takes over.
        binary: PathBuf,
        /// Its version, as it said (`--version`).
        version: String,
        /// The process, which keeps its PID.
        pid: u32,
    },
    /// To `add`: the rule is in the table.
    Added {
        /// The rule's name.
        rule: String,
        /// Whether it replaced a rule of the same name.
        replaced: bool,
        /// Whether every running worker runs the new table (if not, within
        /// the wait, the rule is in the table but may not forward yet).
        applied: bool,
        /// Its group memberships.
        joins: Vec<JoinState>,
        /// What keeps it from forwarding, as the workers report it.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        problems: Vec<String>,
    },
    /// To `remove`.
    Removed {
        /// The rule's name.
        rule: String,
        /// Whether every running worker runs the new table.
        applied: bool,
    },
    /// To `switch`.
    Switched {
        /// The rule's name.
        rule: String,
        /// The input it is held to (its number from 1, and its text);
        /// none: the rule chooses again.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        input: Option<(usize, String)>,
        /// Whether every running worker runs the new table.
        applied: bool,
    },
    /// To `list`.
    Rules {
        /// Every rule, in the order added.
        rules: Vec<RuleStatus>,
        /// The etcd store the daemon takes rules from, if it does.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        store: Option<StoreStatus>,
    },
    /// To `stats`.
    Stats(Box<StatsReport>),
    /// To `reload`: what changed. Answered once every worker runs the
    /// new table (or the wait ran out: `applied` false).
    Reloaded {
        /// The file read.
        path: PathBuf,
        /// Rules that are new.
        added: Vec<String>,
        /// Rules that changed.
        changed: Vec<String>,
        /// Rules that are gone.
        removed: Vec<String>,
        /// How many rules stayed as they were (and were not touched).
        unchanged: usize,
        /// Whether every running worker runs the new table.
        applied: bool,
        /// Settings in `[daemon]` that differ from what the daemon runs
        /// with and take effect only at the next start.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        restart_needed: Vec<String>,
        /// What keeps new or changed rules from forwarding.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        problems: Vec<String>,
    },
    /// To `save`.
    Saved {
        /// The file written.
        path: PathBuf,
        /// How many rules it holds.
        rules: usize,
    },
    /// To `config`.
    Config {
        /// The running rules, with the config file's `[daemon]` settings,
        /// as a config file.
        text: String,
        /// How many rules it holds.
        rules: usize,
    },
    /// To `workers`.
    Workers {
        /// Every worker.
        workers: Vec<WorkerStatus>,
    },
    /// To `events`.
    Events {
        /// Oldest first.
        events: Vec<EventRecord>,
    },
    /// To `history`.
    History(RateHistory),
    /// To `role`.
    Role(RoleStatus),
    /// To `store`.
    Store(StoreStatus),
    /// To `nmos`.
    Nmos(std::sync::Arc<crate::nmos::NmosView>),
    /// To `nmos_glance`.
    NmosGlance(crate::nmos::NmosGlance),
    /// To `nmos_stage`: the HTTP status IS-05 gives the answer, and its
    /// body (the staged parameters, or an NMOS error).
    NmosStaged {
        /// 200, 202, or an error's code.
        status: u16,
        /// The body.
        body: serde_json::Value,
    },
    /// To anything that failed.
    Error {
        /// What failed.
        error: ControlError,
    },
}

/// What went wrong with a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct ControlError {
    /// The kind of failure.
    pub kind: ErrorKind,
    /// The field at fault, when there is one (`outputs[0].interface`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// What is wrong and what to change.
    pub message: String,
}

/// Kinds of failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The line is not JSON, or not a request.
    BadRequest,
    /// The line is longer than [`MAX_REQUEST_BYTES`].
    TooLarge,
    /// The client speaks another protocol version.
    Protocol,
    /// The rule was refused.
    InvalidRule,
    /// No rule of that name.
    NotFound,
    /// The request names something the rule does not have or cannot do
    /// (an input it lacks, a switch of a rule that does not fail over).
    InvalidRequest,
    /// The config file could not be read, or is not valid (the message
    /// says `PATH:LINE:COLUMN: what`); nothing was changed.
    InvalidConfig,
    /// The daemon could not carry out a valid request.
    Internal,
    /// Too many clients are connected; try again later.
    Busy,
    /// The client may not use the daemon (its user is not in the control
    /// socket's group).
    Permission,
}

impl ControlError {
    /// An error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ControlError {
            kind,
            field: None,
            message: message.into(),
        }
    }
}

/// One group membership a rule needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinState {
    /// The interface joined on.
    pub interface: String,
    /// The group.
    pub group: IpAddr,
    /// The source, for a source-specific join.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<IpAddr>,
    /// Whether the kernel holds the membership.
    pub joined: bool,
    /// Why not, when it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A rule and how it stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleStatus {
    /// The rule.
    pub rule: Rule,
    /// Its memberships (none for a unicast input).
    pub joins: Vec<JoinState>,
    /// What keeps it from forwarding, as the workers report it (empty when
    /// it forwards).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
    /// Where it came from.
    #[serde(default)]
    pub origin: Origin,
}

/// Counters of one output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputStats {
    /// The output, in the rule's text form.
    pub output: String,
    /// Packets sent.
    pub packets: u64,
    /// Payload bytes sent.
    pub bytes: u64,
    /// Packets per second over the last interval.
    pub pps: f64,
    /// Payload bits per second over the last interval.
    pub bps: f64,
    /// Drops by reason.
    pub drops: BTreeMap<String, u64>,
    /// Packets not sent because the relay was standby (what it would have
    /// sent).
    #[serde(default)]
    pub held: u64,
    /// Turned off (`enabled=false`): it sends nothing.
    #[serde(default, skip_serializing_if = "is_false")]
    pub disabled: bool,
    /// An SRT output: its listener or call, and every connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub srt: Option<SrtStatus>,
    /// A RIST output: its listener or call, and every peer, in SRT's shape
    /// (see [`RistInputStatus`] for what each field holds for RIST).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rist: Option<SrtStatus>,
}

/// An SRT output as its worker last saw it (once a second).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SrtStatus {
    /// `listening`, `calling` or `connected`, or `failed` (see `error`).
    pub state: String,
    /// Why the endpoint does not work, if it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The worker that holds its connections.
    pub worker: usize,
    /// A listener: callers refused since its worker started, by reason
    /// (`not_found`: a stream ID no output on the port serves, `overload`:
    /// more callers than max-callers, `handshake`: taken by stream ID but
    /// never connected, a wrong passphrase or a caller that gave up).
    /// Each refusal is counted once on the port: under the endpoint whose
    /// stream ID the caller asked for, and `not_found` (no endpoint's)
    /// under the port's first endpoint (the oldest), the only one that has
    /// the key.
    #[serde(default)]
    pub refused: BTreeMap<String, u64>,
    /// The last caller the hook refused, and why (a caller whose handshake
    /// failed later, on its passphrase say, is only counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_refusal: Option<String>,
    /// Every connection, the oldest first.
    #[serde(default)]
    pub connections: Vec<SrtConnection>,
}

/// One SRT connection, from libsrt's statistics.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SrtConnection {
    /// The peer's address and port.
    pub peer: String,
    /// The stream ID it sent (empty if none).
    pub stream_id: String,
    /// libsrt's state of the socket (`connected`, `broken`, ...).
    pub state: String,
    /// Seconds since it connected.
    pub connected_s: u64,
    /// The smoothed round-trip time, in ms.
    pub rtt_ms: f64,
    /// What it sends, in Mbit/s.
    pub send_mbps: f64,
    /// What it receives, in Mbit/s.
    pub recv_mbps: f64,
    /// Packets it sent (unique, without retransmissions).
    pub packets: u64,
    /// Packets retransmitted (sending), or received again (receiving).
    pub retransmitted: u64,
    /// Packets reported missing, and so retransmitted unless too late:
    /// sending, the peer's loss reports (libsrt's `pktSndLossTotal`: a
    /// packet reported twice counts twice); receiving, the gaps found
    /// (`pktRcvLossTotal`). Not a loss by itself.
    #[serde(default)]
    pub reported_missing: u64,
    /// Packets lost for good: SRT gives a packet up only when it is too
    /// late to deliver (`pktSndDropTotal` sending, `pktRcvDropTotal`
    /// receiving), so on SRT this is `dropped_too_late`; RIST's own count.
    pub lost: u64,
    /// Packets dropped because they were too late to be of use.
    pub dropped_too_late: u64,
    /// Packets MCR could not hand to the connection: its send buffer was
    /// full (a peer too slow for the stream).
    pub queue_full: u64,
    /// What waits in the send buffer, in ms.
    pub buffer_ms: u64,
    /// The latency both ends agreed on, in ms.
    pub latency_ms: u64,
}

/// How many rule names a "no rule named" message lists.
const NAMES_LISTED: usize = 10;

/// The error for a request that names no rule there is: what it named and
/// the rules there are (the first [`NAMES_LISTED`], then how many more).
pub fn no_such_rule<'a>(name: &str, known: impl ExactSizeIterator<Item = &'a str>) -> ControlError {
    let count = known.len();
    let mut listed: Vec<&str> = known.take(NAMES_LISTED).collect();
    let more = count.saturating_sub(listed.len());
    let rules = if listed.is_empty() {
        "none".to_string()
    } else if more > 0 {
        listed.push("");
        format!("{}and {more} more", listed.join(", "))
    } else {
        listed.join(", ")
    };
    ControlError::new(ErrorKind::NotFound, format!("no rule named `{name}` (rules: {rules})"))
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_false(v: &bool) -> bool {
    !*v
}

/// The non-zero drop reasons of `drops`, each as "reason count", in the
/// order of the map, comma separated (none when nothing was dropped): what
/// `mcrctl stats` and the final totals show beside a drop total.
pub fn nonzero_drops(drops: &BTreeMap<String, u64>) -> Option<String> {
    let why: Vec<String> = drops
        .iter()
        .filter(|(_, v)| **v > 0)
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    (!why.is_empty()).then(|| why.join(", "))
}

/// Counters of one rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuleStats {
    /// The rule's name.
    pub name: String,
    /// Turned off (`enabled = false`): it joins and forwards nothing.
    #[serde(default, skip_serializing_if = "is_false")]
    pub disabled: bool,
    /// Its input, in text form.
    pub input: String,
    /// Packets matched.
    pub packets: u64,
    /// Payload bytes matched.
    pub bytes: u64,
    /// Packets per second over the last interval.
    pub pps: f64,
    /// Payload bits per second over the last interval.
    pub bps: f64,
    /// Per output.
    pub outputs: Vec<OutputStats>,
    /// What keeps it from forwarding (a failed join, a missing interface);
    /// empty when it forwards.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
    /// Which data path forwards it: `ebpf` (MCR's program in the kernel)
    /// or `packet` (the workers, from their rings).
    #[serde(default)]
    pub datapath: String,
    /// Why the workers forward it when the eBPF data path runs (a unicast
    /// output, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datapath_reason: Option<String>,
    /// With several workers, the one that takes every frame of the rule
    /// when one must (a rule with several inputs sees every copy there; a
    /// rule with SRT or RIST endpoints is worker 0's); none when its
    /// frames go by flow, or the eBPF data path carries it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<usize>,
    /// With several inputs: how they make one stream, and each input's
    /// counters. (The rule's packets and bytes are those it forwarded.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redundancy: Option<RedundancyStats>,
    /// The health of each input, in order, where it is followed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub health: Vec<InputHealthStats>,
    /// Why the inputs' health is not shown, when it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_not_followed: Option<String>,
    /// Its SRT inputs: each endpoint and its connection.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub srt_inputs: Vec<SrtInputStatus>,
    /// Its RIST inputs: each endpoint and its flow.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rist_inputs: Vec<RistInputStatus>,
}

/// An SRT input of a rule, as its worker last saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SrtInputStatus {
    /// The input, in the rule's text form.
    pub input: String,
    /// Which of the rule's inputs (from 0).
    pub index: usize,
    /// Its endpoint and connection (what that connection received).
    pub srt: SrtStatus,
}

/// A RIST input of a rule, as its worker last saw it.
///
/// A RIST endpoint's status has SRT's shape, filled from librist's
/// statistics: `state` is `listening`, `calling`, `connected` or `failed`;
/// `refused` counts peers refused as `full` (past max-peers); each
/// connection is a peer (its address; `stream_id` holds its RTCP CNAME),
/// with librist's RTT and bit rate, `packets` sent (an output's) or
/// received (an input's), `retransmitted` (an output's: packets sent
/// again) or recovered (an input's: missing packets that a retransmission
/// brought), `lost` (an input's: never recovered within the buffer),
/// `queue_full` (packets librist would not take), and `buffer_ms` and
/// `latency_ms` both the recovery buffer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RistInputStatus {
    /// The input, in the rule's text form.
    pub input: String,
    /// Which of the rule's inputs (from 0).
    pub index: usize,
    /// Its endpoint and peers (what they sent it).
    pub rist: SrtStatus,
}

/// An input is said to have no signal when nothing came on it for this
/// long (a failover rule's inputs: its loss-of-signal time).
pub const SIGNAL_LOST_AFTER_MS: u64 = 1000;
/// The shortest time without a packet that is told as no signal (a
/// failover's shorter loss-of-signal time still switches on time; its
/// health shows the loss from this on).
pub const SIGNAL_SHORTEST_MS: u64 = 200;

/// The health of one input, as its packets show it (`mcr_core::health`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputHealthStats {
    /// The input, in the rule's text form.
    pub input: String,
    /// What it carries: `none` (nothing came yet), `other` (neither RTP
    /// nor MPEG-TS), `rtp`, `ts` (MPEG-TS in UDP) or `rtp-ts`.
    pub carries: String,
    /// Whether a packet came within [`SIGNAL_LOST_AFTER_MS`] (or the
    /// failover's loss-of-signal time, at least [`SIGNAL_SHORTEST_MS`]).
    pub signal: bool,
    /// Milliseconds since its last packet, if one came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_last_ms: Option<u64>,
    /// Its RTP sequence and timing, when it carries RTP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtp: Option<RtpHealthStats>,
    /// ETSI TR 101 290 first-priority errors, when it carries MPEG-TS
    /// (directly or in RTP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ts: Option<TsHealthStats>,
}

/// An RTP stream's sequence and timing (RFC 3550).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RtpHealthStats {
    /// Sequence numbers still missing.
    pub lost: u64,
    /// Packets that came after a later one (filled a gap late).
    pub late: u64,
    /// Packets that repeated a sequence number.
    pub duplicates: u64,
    /// Times the sender started again (new SSRC, or a jump).
    pub restarts: u64,
    /// Interarrival jitter (RFC 3550 A.8), µs.
    pub jitter_us: f64,
}

/// The first-priority checks of ETSI TR 101 290 on a transport stream.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TsHealthStats {
    /// Transport packets looked at.
    pub packets: u64,
    /// TS_sync_loss (1.1).
    pub sync_losses: u64,
    /// Sync_byte_error (1.2).
    pub sync_byte_errors: u64,
    /// PAT_error (1.3).
    pub pat_errors: u64,
    /// Continuity_count_error (1.4).
    pub continuity_errors: u64,
}

/// How the inputs of a rule with several make its stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RedundancyStats {
    /// `merge`, `failover` or `arbitrate`, with its settings.
    pub mode: String,
    /// Merge: sequence numbers no input brought in time. Arbitrate:
    /// sequence numbers no line brought (so far).
    pub lost: u64,
    /// Failover: how often the input forwarded from changed.
    pub switches: u64,
    /// Failover: the input forwarded from (1 is the first), if any yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<usize>,
    /// Failover: the input `mcrctl switch` holds it to (1 is the first),
    /// if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forced: Option<usize>,
    /// Each input, in order.
    pub inputs: Vec<InputStats>,
}

/// Counters of one input of a rule with several.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputStats {
    /// The input, in the rule's text form.
    pub input: String,
    /// Packets that arrived on it.
    pub packets: u64,
    /// Their payload bytes.
    pub bytes: u64,
    /// Packets per second over the last interval (0: no signal).
    pub pps: f64,
    /// Payload bits per second over the last interval.
    pub bps: f64,
    /// Packets forwarded from it.
    pub forwarded: u64,
    /// Merge: copies of what another input (or itself) brought before.
    pub duplicates: u64,
    /// Merge: packets it missed that another input brought.
    pub filled: u64,
    /// Merge: packets that came after their gap was given up.
    pub too_late: u64,
    /// Merge: packets too far from the stream or of another sender.
    pub strays: u64,
    /// Merge: packets that were not RTP.
    pub not_rtp: u64,
    /// Arbitrating: the line's own sequence and its place in the race.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<LineStats>,
}

/// One line of an arbitrated rule: its own sequence, and by how much it
/// lagged the line that brought a sequence number first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LineStats {
    /// Messages (sequence numbers) its data packets carried.
    pub messages: u64,
    /// Sequence numbers it skipped.
    pub gaps: u64,
    /// Packets at or behind what it had brought already (duplicates within
    /// the line).
    pub duplicates: u64,
    /// Heartbeats (and ends of session).
    pub heartbeats: u64,
    /// Packets of another session before a change was confirmed.
    pub wrong_session: u64,
    /// Packets without the framing (too short, a wrong length).
    pub malformed: u64,
    /// Resets and session changes it made.
    pub resets: u64,
    /// Its copies measured against the first copy, over the last 5 to 10
    /// seconds (none measured: it was first every time, or brought
    /// nothing).
    pub lag_samples: u64,
    /// Half of those came at most this much after the first, µs.
    pub lag_p50_us: f64,
    /// 99 % came at most this much after the first, µs.
    pub lag_p99_us: f64,
}

/// The in-kernel data path: where it runs and what it forwarded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DatapathStats {
    /// The input interfaces its program is attached to.
    pub interfaces: Vec<String>,
    /// Frames it took and forwarded (every output's copies from one).
    pub rx_frames: u64,
    /// Their bytes.
    pub rx_bytes: u64,
    /// Copies it sent, all outputs together.
    pub tx_packets: u64,
    /// Frames per second taken over the last interval.
    pub rx_pps: f64,
    /// Datagrams whose health it could not hand on (its health ring was
    /// full: worker 0 fell behind); the health counts of those inputs
    /// skip them without taking them for errors.
    #[serde(default)]
    pub health_missed: u64,
}

/// Counters of one worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerStats {
    /// Its index.
    pub index: usize,
    /// Frames taken from its rings.
    pub rx_frames: u64,
    /// Their bytes.
    pub rx_bytes: u64,
    /// Frames and datagrams it sent.
    pub tx_packets: u64,
    /// Frames the kernel dropped because its ring was full.
    pub ring_drops: u64,
    /// Errors its receive sockets reported (an input interface went down).
    #[serde(default)]
    pub ring_errors: u64,
    /// Frames it dropped, by reason.
    pub drops: BTreeMap<String, u64>,
    /// Frames per second taken over the last interval.
    pub rx_pps: f64,
    /// CPU time its processes used, user and system, in seconds (over
    /// every restart).
    #[serde(default)]
    pub cpu_s: f64,
    /// The share of one CPU it used over the last interval (0 to 1).
    #[serde(default)]
    pub busy: f64,
}

/// The answer to `stats`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatsReport {
    /// Seconds since the daemon started.
    pub uptime_s: f64,
    /// The interval the rates are over, in seconds.
    pub interval_s: f64,
    /// Per rule.
    pub rules: Vec<RuleStats>,
    /// Per worker.
    pub workers: Vec<WorkerStats>,
    /// The eBPF data path, when it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datapath: Option<DatapathStats>,
    /// Why it does not, when it was chosen but could not be loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datapath_missing: Option<String>,
    /// The relay's role (the daemon fills it in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<RoleStatus>,
    /// The etcd store the daemon takes rules from, if it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<StoreStatus>,
    /// The interfaces the rules use, with their links (the daemon fills
    /// them in).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<InterfaceStatus>,
}

/// An interface the rules use, and its link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InterfaceStatus {
    /// Its name.
    pub name: String,
    /// Its link; none while the interface does not exist.
    pub link: Option<crate::interfaces::Link>,
    /// The rules that read from it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<String>,
    /// The rules that send on it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<String>,
    /// How often its link went down or came up since mcrd started.
    #[serde(default)]
    pub link_changes: u64,
}

/// Where a rule came from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "lowercase")]
pub enum Origin {
    /// The config file (at the start or a reload).
    #[default]
    File,
    /// A request: `mcrctl add` or the HTTP API (a reload removes it).
    Request,
    /// An etcd key.
    Etcd {
        /// The whole key.
        key: String,
        /// The store's revision when the rule last changed.
        revision: i64,
    },
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::File => f.write_str("file"),
            Origin::Request => f.write_str("request"),
            Origin::Etcd { key, revision } => write!(f, "etcd {key}@{revision}"),
        }
    }
}

/// The etcd store a daemon takes rules from, and how it stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoreStatus {
    /// The members' client URLs.
    pub endpoints: Vec<String>,
    /// The key prefix.
    pub prefix: String,
    /// Whether the daemon follows it now (if not, its rules stay as they
    /// were last given).
    pub connected: bool,
    /// Why not, when it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// What kind of failure that is, once the store has been tried (none
    /// before the first attempt ends, or while forwarding the cache).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem_kind: Option<StoreProblem>,
    /// Seconds since it was last reached or lost.
    pub since_s: f64,
    /// The store revision of the last update applied.
    pub revision: i64,
    /// The newest store revision whose rules every live worker runs.
    pub workers_revision: i64,
    /// Rules the store gives.
    pub rules: usize,
    /// Updates applied since the start.
    pub updates: u64,
    /// Keys refused, each with why (the rule it gave before, if any, stays).
    pub refused: Vec<RefusedKey>,
}

/// Why the store is not reached: what an operator has to mend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreProblem {
    /// No answer: connection refused, a timeout, a name that does not
    /// resolve, a member without a leader.
    Unreachable,
    /// TLS failed: the server's certificate does not verify (wrong CA,
    /// wrong host, expired), or etcd refused the relay's own.
    Certificate,
    /// etcd refused the relay's user and password, or wants a user and
    /// none is given.
    Authentication,
    /// The relay's user may not read the prefix.
    Permission,
}

crate::named::named!(
    StoreProblem,
    "etcd problem",
    [
        (StoreProblem::Unreachable, "unreachable"),
        (StoreProblem::Certificate, "certificate"),
        (StoreProblem::Authentication, "authentication"),
        (StoreProblem::Permission, "permission"),
    ]
);

/// A key of the store whose rule was refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedKey {
    /// The whole key.
    pub key: String,
    /// The store revision that was refused.
    pub revision: i64,
    /// Why.
    pub error: String,
}

/// The relay's role, and how it came to be.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoleStatus {
    /// Active (sends) or standby (holds everything ready, sends nothing).
    pub role: crate::config::Role,
    /// Seconds since it took this role (or since the daemon started).
    pub for_s: f64,
    /// How often the role changed since the daemon started.
    pub changes: u64,
    /// Who set it last: `config` (the start), `mcrctl` (the control
    /// socket, as keepalived's notify script does) or `http`.
    pub set_by: String,
    /// Packets held since the daemon started: what a standby would have
    /// sent, over every output.
    pub held: u64,
    /// To a `role` request that set it: whether the role changed.
    #[serde(default)]
    pub changed: bool,
}

/// A worker process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerStatus {
    /// Its index.
    pub index: usize,
    /// Its process id, when running.
    pub pid: Option<u32>,
    /// The CPU it is pinned to.
    pub cpu: usize,
    /// `running`, `starting` or `restarting`.
    pub state: String,
    /// How often it was restarted.
    pub restarts: u64,
    /// The table version it runs.
    pub table_version: u64,
    /// Why it last ended, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_exit: Option<String>,
    /// What it could not set up for its table (an interface that vanished,
    /// say).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

/// Something the daemon did or saw, as it was logged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventRecord {
    /// When, in ms since the Unix epoch.
    pub at_ms: u64,
    /// `info`, `warn` or `error`.
    pub level: String,
    /// What happened.
    pub message: String,
}

/// Recent rates of every rule, sampled once a second.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RateHistory {
    /// Between samples, in seconds.
    pub interval_s: f64,
    /// Per rule name.
    pub rules: BTreeMap<String, RuleHistory>,
}

/// One rule's recent rates, oldest first (at most [`HISTORY_SAMPLES`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RuleHistory {
    /// Packets per second matched.
    pub pps: Vec<f64>,
    /// Payload bits per second matched.
    pub bps: Vec<f64>,
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_reasons_that_dropped_are_named() {
        let drops: BTreeMap<String, u64> = [("no_rule", 0), ("queue_full", 3), ("bad_frame", 2)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        assert_eq!(
            super::nonzero_drops(&drops).as_deref(),
            Some("bad_frame 2, queue_full 3")
        );
        assert_eq!(super::nonzero_drops(&BTreeMap::new()), None);
    }

    use super::*;

    #[test]
    fn a_missing_rule_is_named_with_at_most_ten_others() {
        let e = no_such_rule("x", ["a", "b"].into_iter());
        assert_eq!(
            (e.kind, e.message.as_str()),
            (ErrorKind::NotFound, "no rule named `x` (rules: a, b)")
        );
        assert_eq!(
            no_such_rule("x", [].into_iter()).message,
            "no rule named `x` (rules: none)"
        );
        let names: Vec<String> = (0..25).map(|i| format!("r{i}")).collect();
        let e = no_such_rule("x", names.iter().map(String::as_str));
        assert_eq!(
            e.message,
            "no rule named `x` (rules: r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, and 15 more)"
        );
    }

    #[test]
    fn requests_are_strict() {
        let r: Request = serde_json::from_str(r#"{"cmd":"list"}"#).expect("list");
        assert_eq!(r, Request::List {});
        let r: Request = serde_json::from_str(r#"{"cmd":"remove","name":"a"}"#).expect("remove");
        assert_eq!(r, Request::Remove { name: "a".into() });
        let r: Request = serde_json::from_str(r#"{"cmd":"version"}"#).expect("version");
        assert_eq!(r, Request::Version { protocol: None });
        for bad in [
            r#"{"cmd":"explode"}"#,
            r#"{"cmd":"remove"}"#,
            r#"{"cmd":"remove","name":"a","force":true}"#,
            r#"{"cmd":"list","verbose":true}"#,
            r#"{"cmd":"stats","x":1}"#,
            r#"{"name":"a"}"#,
            r#"[1,2]"#,
        ] {
            assert!(serde_json::from_str::<Request>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn responses_carry_ok_and_their_kind() {
        let ok: Response = Reply::Removed {
            rule: "a".into(),
            applied: true,
        }
        .into();
        let line = serde_json::to_string(&ok).expect("json");
        assert_eq!(line, r#"{"ok":true,"result":"removed","rule":"a","applied":true}"#);
        assert_eq!(serde_json::from_str::<Response>(&line).expect("back"), ok);
        let e: Response = Reply::Error {
            error: ControlError {
                kind: ErrorKind::InvalidRule,
                field: Some("input.interface".into()),
                message: "no".into(),
            },
        }
        .into();
        let line = serde_json::to_string(&e).expect("json");
        assert!(
            line.starts_with(r#"{"ok":false,"result":"error","error":{"kind":"invalid_rule""#),
            "{line}"
        );
        assert_eq!(serde_json::from_str::<Response>(&line).expect("back"), e);
    }
}
