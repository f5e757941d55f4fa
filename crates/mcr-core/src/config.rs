//! The config file of `mcrd`: TOML, a `[daemon]` table of settings and one
//! `[[rule]]` table per rule, with the same fields as `mcrctl add`.
//!
//! ```toml
//! [daemon]
//! workers = 2
//! http_listen = "127.0.0.1:9808"
//!
//! [[rule]]
//! name = "feed-a"
//! input = "eth0:239.1.1.1:5001"
//! outputs = ["eth1:239.10.1.1:6001,ttl=8", "eth2:10.0.2.9:7000"]
//!
//! [[rule]]
//! name = "feed-b"
//! inputs = ["eth0:239.1.1.2:5001", "eth3:239.2.1.2:5001"]
//! mode = "merge,differential=80ms"
//! outputs = ["eth1:239.10.1.2:6001"]
//! ```
//!
//! Every mistake is reported with its line and column: TOML syntax, an
//! unknown key, a value of the wrong type or out of range, a missing field,
//! a rule name used twice, and whatever [`crate::validate::check_rule`] refuses about a rule
//! (the position is then that of the field at fault). Parsing reads no
//! file: the daemon hands the text in.

use std::fmt;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::PathBuf;

use serde::{Deserialize, Deserializer, Serialize};
use toml::Spanned;

use crate::field::Field;
use crate::interfaces::Interfaces;
use crate::rule::{Input, Mode, Output, Redundancy, Rule};
use crate::validate::{RuleError, RuleIndex, check_rule_in};

/// Where `mcrd` looks for its config file when not told.
pub const DEFAULT_PATH: &str = "/etc/mcr/mcrd.toml";
/// The most worker processes.
pub const MAX_WORKERS: u32 = 64;
/// The most receive-ring memory per worker and interface, in MiB.
pub const MAX_RING_MB: u32 = 4096;

/// The daemon's settings. Each is optional: a command-line flag overrides
/// it, and an absent one takes the default the flag documents.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Worker processes, 1 to [`MAX_WORKERS`].
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "workers")]
    pub workers: Option<u32>,
    /// The CPUs to pin workers to, in turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<Vec<usize>>,
    /// The control socket's path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_socket: Option<PathBuf>,
    /// The user to run as once everything privileged is open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The group whose members may use the control socket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_group: Option<String>,
    /// How long a control client may go without sending a whole request,
    /// or without reading a response, before it is disconnected, in
    /// seconds (1 to 3600).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "control_timeout_s"
    )]
    pub control_timeout_s: Option<u32>,
    /// Where the HTTP server (web page, API, `/metrics`) listens
    /// (ADDRESS:PORT, or `none`); `metrics_listen` is its old name.
    #[serde(
        default,
        alias = "metrics_listen",
        skip_serializing_if = "Option::is_none",
        deserialize_with = "http_listen",
        serialize_with = "as_text"
    )]
    pub http_listen: Option<HttpListen>,
    /// The file holding the bearer token that changes over HTTP need.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_token_file: Option<PathBuf>,
    /// The HTTP server's TLS certificate chain (PEM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_tls_cert: Option<PathBuf>,
    /// Its private key (PEM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_tls_key: Option<PathBuf>,
    /// Serve plain HTTP beyond loopback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_insecure: Option<bool>,
    /// Every HTTP request needs the token, from loopback too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_reads_need_token: Option<bool>,
    /// How much is logged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_level: Option<LogLevel>,
    /// How logs are written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_format: Option<LogFormat>,
    /// Receive ring format.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ring: Option<RingFormat>,
    /// Receive ring memory per worker and input interface, in MiB, 1 to
    /// [`MAX_RING_MB`].
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "ring_mb")]
    pub ring_mb: Option<u32>,
    /// With `ring = "v3"`: how long a part-filled block waits, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_timeout_ms: Option<u32>,
    /// Which data path forwards the rules it can carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datapath: Option<Datapath>,
    /// The role mcrd starts in (`active`, the default, or `standby`);
    /// `mcrctl role` changes it while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// Rules from an etcd key prefix, beside (or instead of) the file's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd: Option<EtcdSettings>,
    /// The relay as an AMWA NMOS Node (IS-04, IS-05), on the HTTP server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nmos: Option<NmosSettings>,
}

/// `[daemon.nmos]`: the relay as an AMWA NMOS Node, its rules as senders
/// and receivers (docs/NMOS.md). On when the table is there.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NmosSettings {
    /// `false` turns it off, the table kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// The node's and device's label (the host name if absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Their description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The host name or address a controller reaches the APIs at (the HTTP
    /// server's address when it is not a wildcard, else the host name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_host: Option<String>,
    /// What the node's ids are made from (the machine's id, from
    /// `/etc/machine-id`, if absent): give each mcrd of one host its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_seed: Option<String>,
    /// Registries to register with (`http://HOST:PORT`), the first the
    /// most preferred, tried before those DNS-SD finds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub registries: Vec<String>,
    /// Whether to look for registries with DNS-SD over mDNS
    /// (`_nmos-register._tcp`) and advertise the node (`_nmos-node._tcp`);
    /// on unless `false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mdns: Option<bool>,
    /// The plant's control networks (`10.10.0.0/16`): a client there
    /// reads the NMOS APIs without the HTTP token.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub control_networks: Vec<String>,
    /// With `true`, a client on a control network may also make IS-05
    /// changes without the token; off unless said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_changes: Option<bool>,
}

/// A network: an address and a prefix length (`10.10.0.0/16`,
/// `fd00::/8`; an address alone is that host).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Network {
    /// Its address.
    pub address: std::net::IpAddr,
    /// Its prefix length.
    pub prefix: u8,
}

impl std::str::FromStr for Network {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, p) = s.split_once('/').unwrap_or((s, ""));
        let address: std::net::IpAddr = a
            .trim()
            .parse()
            .map_err(|_| format!("`{s}`: `{a}` is no address (write ADDRESS/PREFIX, e.g. 10.10.0.0/16)"))?;
        let max = if address.is_ipv4() { 32 } else { 128 };
        let prefix = if p.is_empty() {
            max
        } else {
            p.trim()
                .parse::<u8>()
                .ok()
                .filter(|&n| n <= max)
                .ok_or_else(|| format!("`{s}`: the prefix length is 0 to {max}"))?
        };
        Ok(Network { address, prefix })
    }
}

impl Network {
    /// Whether `ip` is in it (an IPv4 address written as IPv6, too).
    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        let bits = |a: std::net::IpAddr| -> (u128, u32) {
            match a.to_canonical() {
                std::net::IpAddr::V4(v) => (u128::from(u32::from(v)), 32),
                std::net::IpAddr::V6(v) => (u128::from(v), 128),
            }
        };
        let ((net, width), (host, host_width)) = (bits(self.address), bits(ip));
        if width != host_width {
            return false;
        }
        let shift = width - u32::from(self.prefix);
        shift >= width || (net >> shift) == (host >> shift)
    }

    /// Whether every address in it is a loopback one (`127.0.0.0/8` or
    /// within it, `::1`): a client there reaches a server on loopback.
    pub fn within_loopback(&self) -> bool {
        match self.address.to_canonical() {
            std::net::IpAddr::V4(v) => v.is_loopback() && self.prefix >= 8,
            std::net::IpAddr::V6(v) => v.is_loopback() && self.prefix == 128,
        }
    }
}

impl NmosSettings {
    /// Whether the node is on.
    pub fn is_on(&self) -> bool {
        self.enabled != Some(false)
    }

    /// Whether mDNS is used.
    pub fn mdns_on(&self) -> bool {
        self.mdns != Some(false)
    }

    /// Checks the registries' URLs: `http://HOST:PORT`.
    pub fn check(&self) -> Result<(), String> {
        for r in &self.registries {
            registry_address(r)?;
        }
        self.networks()?;
        Ok(())
    }

    /// The control networks.
    pub fn networks(&self) -> Result<Vec<Network>, String> {
        self.control_networks
            .iter()
            .map(|n| n.parse().map_err(|e| format!("control_networks: {e}")))
            .collect()
    }
}

/// The host and port of a registry's URL (`http://HOST:PORT`, a path
/// after it ignored).
pub fn registry_address(url: &str) -> Result<(String, u16), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("registry `{url}`: write http://HOST:PORT (https registries are not served yet)"))?;
    let authority = rest.split('/').next().unwrap_or("");
    let (host, port) = authority
        .rsplit_once(':')
        .ok_or_else(|| format!("registry `{url}`: give the port (http://HOST:PORT)"))?;
    let port = port
        .parse::<u16>()
        .map_err(|_| format!("registry `{url}`: `{port}` is no port"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!("registry `{url}`: no host"));
    }
    Ok((host.to_string(), port))
}

/// Where a relay of a fleet takes its rules from: one key per rule under
/// `prefix`, in the config file's `[[rule]]` form.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EtcdSettings {
    /// The etcd members' client URLs (`http://HOST:PORT` or
    /// `https://HOST:PORT`, all of one scheme), tried in turn.
    pub endpoints: Vec<String>,
    /// The key prefix; a rule's key is the prefix and its name.
    pub prefix: String,
    /// How long one call to etcd may take, in ms (100 to 60000; 2000 if
    /// absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u32>,
    /// How often mcrd asks etcd whether it still answers while the watch is
    /// silent, and, with a `user`, whether the user may still read the
    /// prefix, in ms (100 to 600000; 10000 if absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_ms: Option<u32>,
    /// Where mcrd keeps what the store gave last, so that a start while
    /// etcd cannot be reached forwards those rules until it can.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<PathBuf>,
    /// The CA (PEM) that etcd's server certificates are checked against;
    /// required by `https://` endpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// The relay's client certificate (PEM, its chain after it), for etcd's
    /// `--client-cert-auth`; with `key_file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<PathBuf>,
    /// The private key of `cert_file` (PEM); readable by its owner only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
    /// The etcd user the relay authenticates as; with `password_file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// A file holding that user's password (one trailing newline is not
    /// part of it); readable by its owner only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_file: Option<PathBuf>,
}

/// Whether the relay sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// It forwards (the default).
    #[default]
    Active,
    /// It holds its memberships, rings and outputs ready and counts what it
    /// would send, but sends nothing: the other relay of a pair is active.
    Standby,
}

crate::named::named!(Role, "role", [(Role::Active, "active"), (Role::Standby, "standby")]);

/// Log levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Only errors.
    Error,
    /// Errors and warnings.
    Warn,
    /// And what the daemon does (the default).
    Info,
    /// And details.
    Debug,
    /// Everything.
    Trace,
}

crate::named::named!(
    LogLevel,
    "log level",
    [
        (LogLevel::Error, "error"),
        (LogLevel::Warn, "warn"),
        (LogLevel::Info, "info"),
        (LogLevel::Debug, "debug"),
        (LogLevel::Trace, "trace"),
    ]
);

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Lines for people, with time and level.
    Text,
    /// One JSON object per line, for log collectors.
    Json,
    /// Lines for journald: a `<N>` priority prefix, no time (the journal
    /// keeps it).
    Journal,
}

crate::named::named!(
    LogFormat,
    "log format",
    [
        (LogFormat::Text, "text"),
        (LogFormat::Json, "json"),
        (LogFormat::Journal, "journal")
    ]
);

/// Which data path forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Datapath {
    /// MCR's eBPF program at each input interface's tc ingress hook, for
    /// every rule it can carry (the default); the workers for the rest.
    #[default]
    Ebpf,
    /// The workers, from their AF_PACKET rings, for every rule.
    Packet,
}

crate::named::named!(
    Datapath,
    "data path",
    [(Datapath::Ebpf, "ebpf"), (Datapath::Packet, "packet")]
);

/// Receive ring formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RingFormat {
    /// TPACKET_V2, frame by frame (the default).
    V2,
    /// TPACKET_V3, block by block.
    V3,
}

crate::named::named!(
    RingFormat,
    "ring format",
    [(RingFormat::V2, "v2"), (RingFormat::V3, "v3")]
);

impl Settings {
    /// The keys whose values differ between `self` and `other`, sorted.
    pub fn changed_keys(&self, other: &Settings) -> Vec<String> {
        let a = toml::Table::try_from(self).unwrap_or_default();
        let b = toml::Table::try_from(other).unwrap_or_default();
        let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
        keys.into_iter()
            .filter(|k| a.get(*k) != b.get(*k))
            .map(|k| k.to_string())
            .collect()
    }
}

fn bounded<'de, D: Deserializer<'de>>(d: D, what: &str, lo: u32, hi: u32) -> Result<Option<u32>, D::Error> {
    let v = toml::Value::deserialize(d)?;
    let Some(n) = v.as_integer() else {
        return Err(serde::de::Error::custom(format!(
            "{what} takes a whole number from {lo} to {hi}, not {v}"
        )));
    };
    match u32::try_from(n) {
        Ok(n) if (lo..=hi).contains(&n) => Ok(Some(n)),
        _ => Err(serde::de::Error::custom(format!("{what} {n} is outside {lo}-{hi}"))),
    }
}

fn workers<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    bounded(d, "workers", 1, MAX_WORKERS)
}

fn control_timeout_s<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    bounded(d, "control_timeout_s", 1, 3600)
}

fn ring_mb<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    bounded(d, "ring_mb", 1, MAX_RING_MB)
}

fn http_listen<'de, D: Deserializer<'de>>(d: D) -> Result<Option<HttpListen>, D::Error> {
    let s = String::deserialize(d)?;
    s.parse().map(Some).map_err(serde::de::Error::custom)
}

/// Where the HTTP server listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpListen {
    /// Nowhere: no HTTP server.
    Off,
    /// At this address and port.
    At(SocketAddr),
}

impl std::str::FromStr for HttpListen {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s == "none" {
            return Ok(HttpListen::Off);
        }
        s.parse().map(HttpListen::At).map_err(|_| {
            format!("`{s}` is not an address and port: write e.g. 127.0.0.1:9808 or [::1]:9808, or `none`")
        })
    }
}

impl fmt::Display for HttpListen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpListen::Off => f.write_str("none"),
            HttpListen::At(a) => write!(f, "{a}"),
        }
    }
}

fn as_text<S: serde::Serializer, T: fmt::Display>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.collect_str(v),
        None => s.serialize_none(),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    name: Spanned<String>,
    #[serde(default)]
    input: Option<Spanned<String>>,
    #[serde(default)]
    inputs: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    mode: Option<Spanned<String>>,
    outputs: Spanned<Vec<Spanned<String>>>,
    #[serde(default)]
    health: Option<bool>,
    #[serde(default)]
    enabled: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    daemon: Settings,
    #[serde(default)]
    rule: Vec<Spanned<RawRule>>,
}

#[derive(Debug, Serialize)]
struct SavedRule {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    input: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    inputs: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mode: Option<String>,
    outputs: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    health: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    enabled: Option<bool>,
}

#[derive(Debug, Serialize)]
struct SavedFile<'a> {
    daemon: &'a Settings,
    // No rules is no `rule` key: TOML would write `rule = []`, above
    // `[daemon]`, where a reader looks for the first `[[rule]]`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    rule: Vec<SavedRule>,
}

/// Where each part of a rule is in the file, as byte ranges.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RuleSpans {
    rule: Range<usize>,
    name: Range<usize>,
    /// Each input's string, in order.
    inputs: Vec<Range<usize>>,
    mode: Option<Range<usize>>,
    outputs: Range<usize>,
    output: Vec<Range<usize>>,
}

impl RuleSpans {
    /// The span of `field`: the value of the key it is in, for an output
    /// the output's string, else the whole `[[rule]]` table.
    fn of(&self, field: Field) -> Range<usize> {
        match field {
            Field::Name => self.name.clone(),
            Field::Input(_) => self.inputs[0].clone(),
            Field::OtherInput(i, _) => self.inputs.get(i + 1).unwrap_or(&self.rule).clone(),
            Field::Redundancy => self.mode.as_ref().unwrap_or(&self.rule).clone(),
            Field::Output(i, _) => self.output.get(i).unwrap_or(&self.outputs).clone(),
            Field::Outputs => self.outputs.clone(),
        }
    }
}

/// A parsed config file.
#[derive(Debug, Clone)]
pub struct Config {
    /// The `[daemon]` settings.
    pub settings: Settings,
    /// The rules, in file order.
    pub rules: Vec<Rule>,
    spans: Vec<RuleSpans>,
    /// Line starts, to turn a byte offset into a line and column.
    lines: Vec<usize>,
}

/// A mistake in a config file, and where it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// The line, from 1 (0 when the mistake has no place in the file).
    pub line: usize,
    /// The column, from 1, counted in characters.
    pub column: usize,
    /// What is wrong and what to write instead.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            f.write_str(&self.message)
        } else {
            write!(f, "line {}, column {}: {}", self.line, self.column, self.message)
        }
    }
}

impl ConfigError {
    /// The error as `PATH:LINE:COLUMN: message`, the form editors jump to.
    pub fn in_file(&self, path: &str) -> String {
        if self.line == 0 {
            format!("{path}: {}", self.message)
        } else {
            format!("{path}:{}:{}: {}", self.line, self.column, self.message)
        }
    }
}

fn line_starts(text: &str) -> Vec<usize> {
    std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .collect()
}

fn locate(text: &str, lines: &[usize], offset: usize, message: String) -> ConfigError {
    let offset = offset.min(text.len());
    let line = lines.partition_point(|&s| s <= offset);
    let start = lines[line - 1];
    let column = text.get(start..offset).map_or(1, |s| s.chars().count() + 1);
    ConfigError { line, column, message }
}

impl Config {
    /// Parses `text`, checking everything that does not depend on the
    /// host: syntax, keys, types, ranges, the text form of inputs and
    /// outputs, and that no rule name is used twice.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let lines = line_starts(text);
        let raw: RawFile = toml::from_str(text).map_err(|e| {
            let message = e.message().trim_end().to_string();
            match e.span() {
                Some(s) => locate(text, &lines, s.start, message),
                None => ConfigError {
                    line: 0,
                    column: 0,
                    message,
                },
            }
        })?;
        let mut rules = Vec::with_capacity(raw.rule.len());
        let mut names: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
        let mut spans: Vec<RuleSpans> = Vec::with_capacity(raw.rule.len());
        for r in raw.rule {
            let rule_span = r.span();
            let r = r.into_inner();
            let name_span = r.name.span();
            let name = r.name.into_inner();
            if let Some(&first) = names.get(&name) {
                let at = locate(text, &lines, spans[first].name.start, String::new());
                return Err(locate(
                    text,
                    &lines,
                    name_span.start,
                    format!(
                        "rule name `{name}` is used twice (first at line {}); every rule needs its own name",
                        at.line
                    ),
                ));
            }
            // Inputs and outputs are parsed here rather than by serde, so
            // that a mistake points at the string at fault, not its array.
            let parse_input = |i: &Spanned<String>| {
                i.get_ref()
                    .parse::<Input>()
                    .map(|input| (input, i.span()))
                    .map_err(|m| locate(text, &lines, i.span().start, m))
            };
            let mut inputs: Vec<(Input, Range<usize>)> = match (&r.input, &r.inputs) {
                (Some(i), None) => vec![parse_input(i)?],
                (None, Some(is)) => is.get_ref().iter().map(parse_input).collect::<Result<_, _>>()?,
                (Some(_), Some(is)) => {
                    return Err(locate(
                        text,
                        &lines,
                        is.span().start,
                        "write `input` for one input or `inputs` for several, not both".into(),
                    ));
                }
                (None, None) => {
                    return Err(locate(
                        text,
                        &lines,
                        rule_span.start,
                        "missing field `input` (or `inputs`, with a `mode`)".into(),
                    ));
                }
            };
            let mode = match &r.mode {
                Some(m) => Some((
                    m.get_ref()
                        .parse::<Mode>()
                        .map_err(|e| locate(text, &lines, m.span().start, e))?,
                    m.span(),
                )),
                None => None,
            };
            let several = r.inputs.as_ref();
            match (several, &mode) {
                (Some(is), None) if is.get_ref().len() > 1 => {
                    return Err(locate(
                        text,
                        &lines,
                        is.span().start,
                        "several inputs need a `mode`: \"merge\" (ST 2022-7, packet by packet) or \"failover\"".into(),
                    ));
                }
                (Some(is), _) if is.get_ref().is_empty() => {
                    return Err(locate(text, &lines, is.span().start, "`inputs` is empty".into()));
                }
                (None, Some((_, span))) => {
                    return Err(locate(
                        text,
                        &lines,
                        span.start,
                        "a `mode` is for a rule with several `inputs`".into(),
                    ));
                }
                _ => {}
            }
            let input_spans: Vec<Range<usize>> = inputs.iter().map(|(_, s)| s.clone()).collect();
            let others: Vec<Input> = inputs.drain(1..).map(|(i, _)| i).collect();
            let input = inputs.remove(0).0;
            let redundancy = mode.as_ref().map(|(mode, _)| Redundancy {
                mode: *mode,
                inputs: others,
            });
            let outputs_span = r.outputs.span();
            let mut output_spans = Vec::with_capacity(r.outputs.get_ref().len());
            let mut outputs = Vec::with_capacity(r.outputs.get_ref().len());
            for o in r.outputs.get_ref() {
                let span = o.span();
                outputs.push(
                    o.get_ref()
                        .parse::<Output>()
                        .map_err(|m| locate(text, &lines, span.start, m))?,
                );
                output_spans.push(span);
            }
            spans.push(RuleSpans {
                rule: rule_span,
                name: name_span,
                inputs: input_spans,
                mode: mode.map(|(_, span)| span),
                outputs: outputs_span,
                output: output_spans,
            });
            names.insert(name.clone(), rules.len());
            rules.push(Rule {
                redundancy,
                health: r.health.unwrap_or(true),
                enabled: r.enabled.unwrap_or(true),
                ..Rule::new(name, input, outputs)
            });
        }
        Ok(Config {
            settings: raw.daemon,
            rules,
            spans,
            lines,
        })
    }

    /// Checks every rule as `mcrctl add` would, against the others in the
    /// file and the host's `interfaces`; the error points at the field at
    /// fault. `text` is the text this config was parsed from.
    pub fn check(&self, text: &str, interfaces: &Interfaces) -> Result<(), ConfigError> {
        let index = RuleIndex::new(&self.rules, interfaces);
        for (rule, spans) in self.rules.iter().zip(&self.spans) {
            if let Err(e) = check_rule_in(rule, &index, interfaces) {
                return Err(self.rule_error(text, spans, &e));
            }
        }
        Ok(())
    }

    fn rule_error(&self, text: &str, spans: &RuleSpans, e: &RuleError) -> ConfigError {
        locate(text, &self.lines, spans.of(e.field).start, e.to_string())
    }

    /// `settings` and `rules` as a config file that parses back to them.
    pub fn render(settings: &Settings, rules: &[Rule]) -> Result<String, String> {
        let file = SavedFile {
            daemon: settings,
            rule: rules
                .iter()
                .map(|r| SavedRule {
                    name: r.name.clone(),
                    input: r.redundancy.is_none().then(|| r.input.to_string()),
                    inputs: match &r.redundancy {
                        Some(_) => r.inputs().map(ToString::to_string).collect(),
                        None => Vec::new(),
                    },
                    mode: r.redundancy.as_ref().map(|x| x.mode.to_string()),
                    outputs: r.outputs.iter().map(ToString::to_string).collect(),
                    health: (!r.health).then_some(false),
                    enabled: (!r.enabled).then_some(false),
                })
                .collect(),
        };
        let body = toml::to_string(&file).map_err(|e| format!("could not write the config as TOML: {e}"))?;
        Ok(format!(
            "# mcrd configuration, written by `mcrctl save`: the [daemon] settings of the\n\
             # file the daemon was started with, and the rules it was running.\n\
             # Keys: docs/CONFIGURATION.md.\n\n{body}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_networks_hold_their_hosts_and_no_others() {
        let n: Network = "10.10.0.0/16".parse().expect("net");
        assert!(n.contains("10.10.200.1".parse().expect("ip")));
        assert!(!n.contains("10.11.0.1".parse().expect("ip")));
        assert!(
            n.contains("::ffff:10.10.0.9".parse().expect("ip")),
            "IPv4 written as IPv6"
        );
        assert!(!n.contains("fd00::1".parse().expect("ip")));
        let host: Network = "192.0.2.7".parse().expect("host");
        assert!(host.contains("192.0.2.7".parse().expect("ip")) && !host.contains("192.0.2.8".parse().expect("ip")));
        let all: Network = "::/0".parse().expect("all");
        assert!(all.contains("fd00::1".parse().expect("ip")));
        for (net, within) in [
            ("127.0.0.0/8", true),
            ("127.0.0.1", true),
            ("::1", true),
            ("127.0.0.0/7", false),
            ("10.10.0.0/16", false),
            ("::/0", false),
        ] {
            let n: Network = net.parse().expect("net");
            assert_eq!(n.within_loopback(), within, "{net}");
        }
        for (bad, says) in [("10.0.0.0/33", "0 to 32"), ("ten/8", "no address")] {
            let e = bad.parse::<Network>().expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
    use crate::interfaces::InterfaceInfo;

    fn ifaces() -> Interfaces {
        let mk =
            |name: &str, index: u32, addr: &str| InterfaceInfo::ethernet(name, index, [addr.parse().expect("literal")]);
        Interfaces::new([mk("eth0", 2, "10.0.0.2"), mk("eth1", 3, "10.0.1.1")])
    }

    const GOOD: &str = r#"
# a comment
[daemon]
workers = 2
cpus = [0, 1]
control_socket = "/run/mcr/test.sock"
control_timeout_s = 30
metrics_listen = "127.0.0.1:9808"
log_level = "debug"
log_format = "json"
ring = "v3"
ring_mb = 64
block_timeout_ms = 2

[[rule]]
name = "feed-a"
input = "eth0:239.1.1.1:5001"
outputs = ["eth1:239.10.1.1:6001,ttl=8", "eth1:10.0.1.9:7000"]

[[rule]]
name = "feed-b"
input = "eth0:239.1.1.2:5001,source=10.0.0.1"
outputs = ["eth1:239.10.1.2:6001,source=keep"]
"#;

    /// The error `text` gives, parsed and then checked.
    fn mistake(text: &str) -> ConfigError {
        match Config::parse(text) {
            Err(e) => e,
            Ok(c) => c.check(text, &ifaces()).expect_err("a mistake"),
        }
    }

    #[test]
    fn a_valid_file_loads_every_setting_and_rule() {
        let c = Config::parse(GOOD).expect("parses");
        c.check(GOOD, &ifaces()).expect("valid");
        let s = &c.settings;
        assert_eq!(s.workers, Some(2));
        assert_eq!(s.cpus, Some(vec![0, 1]));
        assert_eq!(s.control_socket, Some(PathBuf::from("/run/mcr/test.sock")));
        assert_eq!(s.control_timeout_s, Some(30));
        assert_eq!(
            s.http_listen,
            Some(HttpListen::At("127.0.0.1:9808".parse().expect("addr")))
        );
        assert_eq!(
            (s.log_level, s.log_format, s.ring),
            (Some(LogLevel::Debug), Some(LogFormat::Json), Some(RingFormat::V3))
        );
        assert_eq!((s.ring_mb, s.block_timeout_ms), (Some(64), Some(2)));
        assert_eq!(c.rules.len(), 2);
        assert_eq!(c.rules[0].name, "feed-a");
        assert_eq!(c.rules[0].outputs[1].to_string(), "eth1:10.0.1.9:7000");
        assert_eq!(c.rules[1].outputs[0].to_string(), "eth1:239.10.1.2:6001,source=keep");
        assert_eq!(c.rules[1].input.to_string(), "eth0:239.1.1.2:5001,source=10.0.0.1");
    }

    #[test]
    fn a_rule_with_several_inputs_loads_renders_back_and_says_what_is_wrong() {
        let text = r#"
[[rule]]
name = "m"
inputs = ["eth0:239.1.1.1:5001", "eth1:239.2.1.1:5001"]
mode = "merge,differential=80ms"
outputs = ["eth1:239.10.1.1:6001"]

[[rule]]
name = "f"
inputs = ["eth0:239.1.1.2:5001", "eth1:239.2.1.2:5001"]
mode = "failover,hold=2s"
outputs = ["eth1:239.10.1.2:6001"]
health = false
"#;
        let c = Config::parse(text).expect("parses");
        c.check(text, &ifaces()).expect("valid");
        assert_eq!((c.rules[0].health, c.rules[1].health), (true, false));
        let m = c.rules[0].redundancy.as_ref().expect("several inputs");
        assert_eq!(m.mode, Mode::Merge { differential_ms: 80 });
        assert_eq!(m.inputs[0].to_string(), "eth1:239.2.1.1:5001");
        let saved = Config::render(&Settings::default(), &c.rules).expect("renders");
        assert!(saved.contains("mode = \"failover,hold=2000ms\""), "{saved}");
        assert_eq!(
            saved.matches("health = false").count(),
            1,
            "only where it is off: {saved}"
        );
        assert_eq!(Config::parse(&saved).expect("parses back").rules, c.rules);
        let rule = |body: &str| format!("[[rule]]\nname = \"a\"\n{body}outputs = [\"eth1:239.10.1.1:6001\"]\n");
        for (body, line, col, says) in [
            (
                "inputs = [\"eth0:239.1.1.1:5001\", \"eth1:239.2.1.1:5001\"]\n",
                3,
                10,
                "several inputs need a `mode`",
            ),
            (
                "input = \"eth0:239.1.1.1:5001\"\nmode = \"merge\"\n",
                4,
                8,
                "a `mode` is for a rule with several `inputs`",
            ),
            (
                "input = \"eth0:239.1.1.1:5001\"\ninputs = [\"eth1:239.2.1.1:5001\"]\n",
                4,
                10,
                "not both",
            ),
            (
                "inputs = [\"eth0:239.1.1.1:5001\", \"eth1:239.2.1.1\"]\nmode = \"merge\"\n",
                3,
                34,
                "is not ADDRESS:PORT",
            ),
            (
                "inputs = [\"eth0:239.1.1.1:5001\", \"eth1:239.2.1.1:5001\"]\nmode = \"mirror\"\n",
                4,
                8,
                "write merge, failover or arbitrate",
            ),
            (
                "inputs = [\"eth0:239.1.1.1:5001\", \"eth0:239.1.1.1:5001\"]\nmode = \"failover\"\n",
                3,
                34,
                "separate paths",
            ),
        ] {
            let t = rule(body);
            let e = mistake(&t);
            assert!(e.message.contains(says), "{t}: {e}");
            assert_eq!((e.line, e.column), (line, col), "{t}: {e}");
        }
    }

    #[test]
    fn ipv6_source_lists_dscp_and_vlans_load_and_render_back() {
        let text = r#"
[[rule]]
name = "v6"
input = "eth0:[ff3e::1]:5001,vlan=100,source=2001:db8::1,source=2001:db8::2"
outputs = ["eth1:239.10.1.1:6001,vlan=200,ttl=4,dscp=ef", "eth1:[ff3e::10]:6001,dscp=keep"]
"#;
        let mut ifs: Vec<InterfaceInfo> = ifaces().iter().cloned().collect();
        ifs[1].addresses.push("fd00:1::1".parse().expect("literal"));
        let c = Config::parse(text).expect("parses");
        c.check(text, &Interfaces::new(ifs)).expect("valid");
        let r = &c.rules[0];
        let input = r.input.as_udp().expect("udp");
        assert_eq!((input.vlan, input.sources.len()), (Some(100), 2));
        assert_eq!(r.outputs[0].to_string(), "eth1:239.10.1.1:6001,vlan=200,ttl=4,dscp=46");
        assert_eq!(r.outputs[1].to_string(), "eth1:[ff3e::10]:6001");
        let back =
            Config::parse(&Config::render(&c.settings, &c.rules).expect("renders")).expect("rendered file parses");
        assert_eq!(back.rules, c.rules);
        let e = mistake(
            "[[rule]]\nname = \"a\"\ninput = \"eth0:239.1.1.1:5001,vlan=5000\"\noutputs = [\"eth1:239.10.1.1:6001\"]\n",
        );
        assert!(
            e.to_string().contains("line 3, column 9") && e.to_string().contains("1 to 4094"),
            "{e}"
        );
    }

    #[test]
    fn an_empty_file_is_a_daemon_with_defaults_and_no_rules() {
        let c = Config::parse("").expect("empty");
        assert_eq!(c.settings, Settings::default());
        assert!(c.rules.is_empty());
    }

    #[test]
    fn each_mistake_is_reported_with_its_line_and_column() {
        // (file, line, column, words the message must hold)
        let cases: &[(&str, usize, usize, &str)] = &[
            ("[daemon]\nworkers = 2\nwrokers = 3\n", 3, 1, "unknown field `wrokers`"),
            ("[daemon]\nverbose = true\n", 2, 1, "unknown field `verbose`"),
            (
                "[[rule]]\nname = \"a\"\ninput = \"eth0:239.1.1.1:5001\"\noutputs = [\"eth1:239.2.2.2:6001\"]\ncolour = \"red\"\n",
                5,
                1,
                "unknown field `colour`",
            ),
            (
                "[daemon]\nmetrics_listen = \"localhost\"\n",
                2,
                18,
                "not an address and port",
            ),
            (
                "[[rule]]\nname = \"a\"\ninput = \"eth0:239.1.1.300:5001\"\noutputs = [\"eth1:239.2.2.2:6001\"]\n",
                3,
                9,
                "239.1.1.300",
            ),
            (
                "[[rule]]\nname = \"a\"\ninput = \"eth0:239.1.1.1:5001\"\noutputs = [\"eth1:239.2.2.2:6001\", \"eth1:239.2.2.3:6001,ttl=0\"]\n",
                4,
                35,
                "ttl",
            ),
            (
                "[[rule]]\nname = \"a\"\ninput = \"eth0:239.1.1.1:5001\"\noutputs = [\"eth1:239.2.2.2:6001\"]\n\n[[rule]]\nname = \"a\"\ninput = \"eth0:239.1.1.2:5001\"\noutputs = [\"eth1:239.2.2.3:6001\"]\n",
                7,
                8,
                "used twice (first at line 2)",
            ),
            (
                "[[rule]]\nname = \"a\"\noutputs = [\"eth1:239.2.2.2:6001\"]\n",
                1,
                1,
                "missing field `input`",
            ),
            (
                "[[rule]]\nname = \"a\"\ninput = \"eth0:239.1.1.1:5001\"\n",
                1,
                1,
                "missing field `outputs`",
            ),
            ("[daemon]\nworkers = 0\n", 2, 11, "workers 0 is outside 1-64"),
            ("[daemon]\nlog_level = \"loud\"\n", 2, 13, "unknown variant `loud`"),
            (
                "[daemon]\nworkers = \"two\"\n",
                2,
                11,
                "workers takes a whole number from 1 to 64, not \"two\"",
            ),
            ("[daemon\nworkers = 2\n", 1, 8, ""),
            // Checked against the host and the other rules.
            (
                "[[rule]]\nname = \"a\"\ninput = \"a very long name:239.1.1.1:5001\"\noutputs = [\"eth1:239.2.2.2:6001\"]\n",
                3,
                9,
                "cannot be an interface name",
            ),
            (
                "[[rule]]\nname = \"a\"\ninput = \"eth0:239.1.1.1:5001\"\noutputs = [\"eth1:239.2.2.2:6001\", \"eth/7:239.2.2.3:6001\"]\n",
                4,
                35,
                "outputs[1].interface",
            ),
            (
                "[[rule]]\nname = \"a\"\ninput = \"eth0:239.1.1.1:5001\"\noutputs = [\"eth1:239.2.2.2:6001\"]\n[[rule]]\nname = \"b\"\ninput = \"eth0:239.1.1.1:5001\"\noutputs = [\"eth1:239.2.2.3:6001\"]\n",
                3,
                9,
                "already takes",
            ),
            (
                "[[rule]]\nname = \"bad name\"\ninput = \"eth0:239.1.1.1:5001\"\noutputs = [\"eth1:239.2.2.2:6001\"]\n",
                2,
                8,
                "not a rule name",
            ),
            (
                "[[rule]]\nname = \"a\"\ninput = \"eth0:239.1.1.1:5001\"\noutputs = []\n",
                4,
                11,
                "at least one output",
            ),
        ];
        for &(text, line, column, words) in cases {
            let e = mistake(text);
            assert_eq!((e.line, e.column), (line, column), "{text}\n=> {e}");
            assert!(e.message.contains(words), "{text}\n=> {e}");
        }
    }

    #[test]
    fn changed_settings_are_named() {
        let a = Config::parse(GOOD).expect("parses").settings;
        let mut b = a.clone();
        assert!(a.changed_keys(&b).is_empty());
        b.workers = Some(3);
        b.http_listen = None;
        assert_eq!(a.changed_keys(&b), vec!["http_listen", "workers"]);
    }

    #[test]
    fn errors_read_as_file_line_column() {
        let e = mistake("[daemon]\nwrokers = 3\n");
        let shown = e.in_file("/etc/mcr/mcrd.toml");
        assert!(
            shown.starts_with("/etc/mcr/mcrd.toml:2:1: unknown field `wrokers`"),
            "{shown}"
        );
        assert!(shown.contains("expected one of"), "the known keys are listed: {shown}");
    }

    #[test]
    fn rendering_and_parsing_back_gives_the_same_settings_and_rules() {
        let c = Config::parse(GOOD).expect("parses");
        let text = Config::render(&c.settings, &c.rules).expect("renders");
        let back = Config::parse(&text).expect("parses back");
        assert_eq!(back.settings, c.settings);
        assert_eq!(back.rules, c.rules);
        back.check(&text, &ifaces()).expect("still valid");
        // No settings and no rules is a valid file too.
        let empty = Config::render(&Settings::default(), &[]).expect("renders");
        let back = Config::parse(&empty).expect("parses back");
        assert_eq!((back.settings, back.rules.len()), (Settings::default(), 0));
        // Settings and no rules (every rule from etcd): no `rule` key at all.
        let none = Config::render(&c.settings, &[]).expect("renders");
        assert!(
            !none.lines().any(|l| l.trim_start().starts_with("rule")),
            "no rule key: {none}"
        );
        let back = Config::parse(&none).expect("parses back");
        assert_eq!((back.settings, back.rules.len()), (c.settings, 0));
    }
}
