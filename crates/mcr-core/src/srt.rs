//! An SRT endpoint's settings: where a stream leaves (or, later, enters)
//! MCR over SRT, the protocol broadcasters cross the Internet with (ARQ
//! over UDP, a latency budget, AES). The protocol itself is libsrt's, in
//! the workers (`mcr_sys::srt`); this is only what a rule says.
//!
//! The text form, used by `mcrctl` and the config file, beside the UDP
//! outputs' `IFACE:ADDRESS:PORT`:
//!
//! ```text
//! srt://HOST:PORT[,mode=listener|caller][,latency=MS][,passphrase-file=PATH]
//!       [,pbkeylen=16|24|32][,streamid=ID][,max-callers=N][,max-bw=RATE]
//!       [,idle-timeout=MS]
//! srt://0.0.0.0:9000,latency=400,streamid=feed-a,max-callers=50
//! srt://203.0.113.5:9000,mode=caller,latency=400
//! ```
//!
//! A wildcard host (`0.0.0.0`, `[::]`) listens and any other calls, as
//! srt-live-transmit does; `mode=` says it outright (a listener on one
//! address of the host). The passphrase is only ever named by its file,
//! so rules, `mcrctl list`, saved files and etcd never hold it.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// libsrt's latency when none is given, in ms.
pub const DEFAULT_LATENCY_MS: u32 = 120;
/// The most latency a rule may ask for, in ms.
pub const MAX_LATENCY_MS: u32 = 60_000;
/// How long a peer may stay silent before its connection is closed, when
/// a rule says nothing (libsrt's default), in ms.
pub const DEFAULT_IDLE_TIMEOUT_MS: u32 = 5_000;
/// The shortest idle timeout a rule may ask for, in ms: libsrt 1.5 ends a
/// silent connection only once its idle timeout has passed and 16 expiry
/// timers (300 ms at least each) went unanswered, so a shorter one would
/// not be kept (measured: 2000 asked, 6.0 s taken).
pub const MIN_IDLE_TIMEOUT_MS: u32 = 5_000;
/// How many callers one listener output serves when a rule says nothing.
pub const DEFAULT_MAX_CALLERS: u32 = 64;
/// The most callers one listener output may serve.
pub const MAX_CALLERS: u32 = 1_000;
/// The longest stream ID SRT carries (its handshake's limit), in bytes.
pub const MAX_STREAM_ID_BYTES: usize = 512;
/// The largest datagram one SRT packet carries in live mode, in bytes
/// (libsrt's `SRT_LIVE_MAX_PLSIZE`).
pub const MAX_PAYLOAD_BYTES: usize = 1456;

/// Whether an endpoint waits for peers or calls one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SrtMode {
    /// Binds the address and serves every peer that calls it.
    Listener,
    /// Calls the address, and calls again (with backoff) when the
    /// connection breaks.
    Caller,
}

impl SrtMode {
    /// The mode a host implies: a wildcard listens, any other calls.
    pub fn implied_by(address: &SocketAddr) -> SrtMode {
        if address.ip().is_unspecified() {
            SrtMode::Listener
        } else {
            SrtMode::Caller
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            SrtMode::Listener => "listener",
            SrtMode::Caller => "caller",
        }
    }
}

/// An SRT endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SrtEndpoint {
    /// Listener or caller.
    pub mode: SrtMode,
    /// The listener's address and UDP port, or the peer a caller calls.
    pub address: SocketAddr,
    /// The latency budget (SRTO_LATENCY): how long a packet may take,
    /// retransmissions included, in ms. The larger of both ends' wins.
    #[serde(default = "default_latency", skip_serializing_if = "is_default_latency")]
    pub latency_ms: u32,
    /// A file holding the AES passphrase (10 to 79 characters); none: no
    /// encryption (and encrypted peers are refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passphrase_file: Option<PathBuf>,
    /// The AES key length in bytes (16, 24 or 32); none: 16, or the
    /// caller's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pbkeylen: Option<u8>,
    /// The stream ID: a caller sends it; a listener serves the callers that
    /// ask for it (exactly, or as `r=` in SRT's `#!::` form), so one port
    /// can serve many rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_id: Option<String>,
    /// A listener: how many callers it serves at once; the next is refused
    /// (overload).
    #[serde(default = "default_max_callers", skip_serializing_if = "is_default_max_callers")]
    pub max_callers: u32,
    /// A cap on the bandwidth one connection sends, retransmissions
    /// included, in bit/s; none: libsrt's (the input rate plus 25 %).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bw_bps: Option<u64>,
    /// How long a silent peer is kept before its connection is closed, in
    /// ms.
    #[serde(default = "default_idle_timeout", skip_serializing_if = "is_default_idle_timeout")]
    pub idle_timeout_ms: u32,
}

fn default_latency() -> u32 {
    DEFAULT_LATENCY_MS
}
#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_default_latency(v: &u32) -> bool {
    *v == DEFAULT_LATENCY_MS
}
fn default_max_callers() -> u32 {
    DEFAULT_MAX_CALLERS
}
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_default_max_callers(v: &u32) -> bool {
    *v == DEFAULT_MAX_CALLERS
}
fn default_idle_timeout() -> u32 {
    DEFAULT_IDLE_TIMEOUT_MS
}
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_default_idle_timeout(v: &u32) -> bool {
    *v == DEFAULT_IDLE_TIMEOUT_MS
}

impl SrtEndpoint {
    /// An endpoint at `address` with every default, in the mode the
    /// address implies.
    pub fn new(address: SocketAddr) -> Self {
        SrtEndpoint {
            mode: SrtMode::implied_by(&address),
            address,
            latency_ms: DEFAULT_LATENCY_MS,
            passphrase_file: None,
            pbkeylen: None,
            stream_id: None,
            max_callers: DEFAULT_MAX_CALLERS,
            max_bw_bps: None,
            idle_timeout_ms: DEFAULT_IDLE_TIMEOUT_MS,
        }
    }

    /// Whether `caller_id`, the stream ID a caller sent, asks for this
    /// listener's stream: the same text, or SRT's access-control form
    /// (`#!::r=NAME,...`) naming it as the resource. A listener without a
    /// stream ID serves any caller.
    pub fn serves(&self, caller_id: &str) -> bool {
        match &self.stream_id {
            None => true,
            Some(id) => caller_id == id || resource_of(caller_id) == Some(id.as_str()),
        }
    }

    /// What is wrong with the settings, if anything (the parts a file or
    /// socket cannot tell: those the daemon checks).
    pub fn check(&self) -> Result<(), String> {
        let a = self.address;
        if a.port() == 0 {
            return Err(format!("{a}: give a UDP port (not 0)"));
        }
        match self.mode {
            SrtMode::Caller if a.ip().is_unspecified() || a.ip().is_multicast() => {
                return Err(format!("a caller calls one host; {} is not one", a.ip()));
            }
            SrtMode::Listener if a.ip().is_multicast() => {
                return Err(format!(
                    "a listener binds an address of this host; {} is a group",
                    a.ip()
                ));
            }
            SrtMode::Caller if self.max_callers != DEFAULT_MAX_CALLERS => {
                return Err("max-callers is for a listener; a caller has one peer".into());
            }
            _ => {}
        }
        if self.latency_ms > MAX_LATENCY_MS {
            return Err(format!(
                "latency {} ms is more than {MAX_LATENCY_MS} ms",
                self.latency_ms
            ));
        }
        if let Some(k) = self.pbkeylen {
            if ![16, 24, 32].contains(&k) {
                return Err(format!("pbkeylen {k}: AES keys are 16, 24 or 32 bytes"));
            }
            if self.passphrase_file.is_none() {
                return Err("pbkeylen without passphrase-file: there is no key".into());
            }
        }
        if let Some(id) = &self.stream_id {
            check_stream_id(id)?;
        }
        if !(1..=MAX_CALLERS).contains(&self.max_callers) {
            return Err(format!("max-callers {}: 1 to {MAX_CALLERS}", self.max_callers));
        }
        if self.max_bw_bps == Some(0) {
            return Err("max-bw 0 would send nothing; leave it out for no cap".into());
        }
        if !(MIN_IDLE_TIMEOUT_MS..=600_000).contains(&self.idle_timeout_ms) {
            return Err(format!(
                "idle-timeout {} ms: {MIN_IDLE_TIMEOUT_MS} to 600000 (libsrt 1.5 keeps a silent peer at least about 5 s whatever is asked)",
                self.idle_timeout_ms
            ));
        }
        Ok(())
    }
}

/// The resource (`r=`) of a stream ID in SRT's access-control form
/// (`#!::u=user,r=resource,m=request`), if it is in that form.
pub fn resource_of(stream_id: &str) -> Option<&str> {
    stream_id
        .strip_prefix("#!::")?
        .split(',')
        .find_map(|kv| kv.strip_prefix("r="))
}

fn check_stream_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > MAX_STREAM_ID_BYTES {
        return Err(format!("streamid: 1 to {MAX_STREAM_ID_BYTES} bytes"));
    }
    if let Some(c) = id.chars().find(|c| c.is_control() || c.is_whitespace() || *c == ',') {
        return Err(format!(
            "streamid `{id}` has {c:?}: a stream ID here is printable, without spaces or commas (a caller's `#!::r={id},m=request` still matches it)"
        ));
    }
    Ok(())
}

/// Parses a bit rate: a number of bit/s with an optional k, M or G
/// (powers of 1000).
pub(crate) fn parse_rate(v: &str) -> Result<u64, String> {
    let (num, mult) = match v.as_bytes().last() {
        Some(b'k' | b'K') => (&v[..v.len() - 1], 1_000),
        Some(b'M') => (&v[..v.len() - 1], 1_000_000),
        Some(b'G') => (&v[..v.len() - 1], 1_000_000_000),
        _ => (v, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("max-bw `{v}`: a rate in bit/s, e.g. 20M or 500k"))
}

pub(crate) fn write_rate(f: &mut fmt::Formatter<'_>, bps: u64) -> fmt::Result {
    for (m, s) in [(1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")] {
        if bps.is_multiple_of(m) {
            return write!(f, "{}{s}", bps / m);
        }
    }
    write!(f, "{bps}")
}

/// An endpoint's text form taken apart: its address and each option as
/// (key, value), for `scheme` (`srt`, `rist`); a mistake is named with the
/// whole text.
pub(crate) struct EndpointSpec<'a> {
    pub spec: &'a str,
    pub address: SocketAddr,
    pub options: Vec<(&'a str, &'a str)>,
}

impl<'a> EndpointSpec<'a> {
    pub(crate) fn parse(spec: &'a str, scheme: &str) -> Result<Self, String> {
        let spec = spec.trim();
        let rest = spec.strip_prefix(&format!("{scheme}://")).ok_or_else(|| {
            format!(
                "`{spec}`: an {} endpoint starts with {scheme}://",
                scheme.to_uppercase()
            )
        })?;
        let (addr, opts) = match rest.split_once(',') {
            Some((a, o)) => (a, Some(o)),
            None => (rest, None),
        };
        let address: SocketAddr = addr.parse().map_err(|_| {
            format!("`{spec}`: `{addr}` is not HOST:PORT (an IP address; IPv6 in brackets, e.g. {scheme}://[::]:9000)")
        })?;
        let mut options = Vec::new();
        for o in opts.into_iter().flat_map(|o| o.split(',')) {
            let (k, v) = o
                .split_once('=')
                .ok_or_else(|| format!("`{spec}`: option `{o}` is not KEY=VALUE"))?;
            options.push((k.trim(), v.trim()));
        }
        Ok(EndpointSpec { spec, address, options })
    }

    /// Option `k`'s value `v` as a whole number.
    pub(crate) fn num(&self, k: &str, v: &str) -> Result<u32, String> {
        v.parse()
            .map_err(|_| format!("`{}`: {k} `{v}` is not a whole number", self.spec))
    }

    /// The mode `v` names.
    pub(crate) fn mode(&self, v: &str) -> Result<SrtMode, String> {
        match v {
            "listener" => Ok(SrtMode::Listener),
            "caller" => Ok(SrtMode::Caller),
            _ => Err(format!("`{}`: mode `{v}`: listener or caller", self.spec)),
        }
    }
}

impl FromStr for SrtEndpoint {
    type Err = String;
    fn from_str(spec: &str) -> Result<Self, String> {
        let p = EndpointSpec::parse(spec, "srt")?;
        let spec = p.spec;
        let mut e = SrtEndpoint::new(p.address);
        let num = |k: &str, v: &str| p.num(k, v);
        for &(k, v) in &p.options {
            match k {
                "mode" => e.mode = p.mode(v)?,
                "latency" => e.latency_ms = num(k, v)?,
                "passphrase-file" => e.passphrase_file = Some(PathBuf::from(v)),
                "pbkeylen" => {
                    e.pbkeylen = Some(
                        v.parse()
                            .map_err(|_| format!("`{spec}`: pbkeylen `{v}`: 16, 24 or 32"))?,
                    )
                }
                "streamid" => e.stream_id = Some(v.to_string()),
                "max-callers" => e.max_callers = num(k, v)?,
                "max-bw" => e.max_bw_bps = Some(parse_rate(v).map_err(|m| format!("`{spec}`: {m}"))?),
                "idle-timeout" => e.idle_timeout_ms = num(k, v)?,
                "passphrase" => {
                    return Err(format!(
                        "`{spec}`: the passphrase goes in a file, named by passphrase-file=PATH, so rules and saved files never hold it"
                    ));
                }
                _ => {
                    return Err(format!(
                        "`{spec}`: unknown SRT option `{k}` (known: mode, latency, passphrase-file, pbkeylen, streamid, max-callers, max-bw, idle-timeout)"
                    ));
                }
            }
        }
        e.check().map_err(|m| format!("`{spec}`: {m}"))?;
        Ok(e)
    }
}

impl fmt::Display for SrtEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "srt://{},mode={}", self.address, self.mode.name())?;
        if self.latency_ms != DEFAULT_LATENCY_MS {
            write!(f, ",latency={}", self.latency_ms)?;
        }
        if let Some(p) = &self.passphrase_file {
            write!(f, ",passphrase-file={}", p.display())?;
        }
        if let Some(k) = self.pbkeylen {
            write!(f, ",pbkeylen={k}")?;
        }
        if let Some(id) = &self.stream_id {
            write!(f, ",streamid={id}")?;
        }
        if self.max_callers != DEFAULT_MAX_CALLERS {
            write!(f, ",max-callers={}", self.max_callers)?;
        }
        if let Some(b) = self.max_bw_bps {
            f.write_str(",max-bw=")?;
            write_rate(f, b)?;
        }
        if self.idle_timeout_ms != DEFAULT_IDLE_TIMEOUT_MS {
            write!(f, ",idle-timeout={}", self.idle_timeout_ms)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_and_print_back() {
        for s in [
            "srt://0.0.0.0:9000,mode=listener",
            "srt://[::]:9000,mode=listener,latency=400,streamid=feed-a,max-callers=50",
            "srt://10.0.1.1:9000,mode=listener,passphrase-file=/etc/mcr/feed.key,pbkeylen=32",
            "srt://203.0.113.5:9000,mode=caller,latency=400,max-bw=20M,idle-timeout=8000",
            "srt://203.0.113.5:9000,mode=caller,max-bw=1500k",
            "srt://203.0.113.5:9000,mode=caller,max-bw=1234567",
        ] {
            let e: SrtEndpoint = s.parse().expect(s);
            assert_eq!(e.to_string(), s);
            let json = serde_json::to_string(&e).expect("json");
            assert_eq!(serde_json::from_str::<SrtEndpoint>(&json).expect(&json), e);
        }
    }

    #[test]
    fn the_host_implies_the_mode() {
        let e: SrtEndpoint = "srt://0.0.0.0:9000".parse().expect("listener");
        assert_eq!(e.mode, SrtMode::Listener);
        let e: SrtEndpoint = "srt://10.1.1.1:9000".parse().expect("caller");
        assert_eq!(e.mode, SrtMode::Caller);
        let e: SrtEndpoint = "srt://10.1.1.1:9000,mode=listener".parse().expect("listener");
        assert_eq!(e.to_string(), "srt://10.1.1.1:9000,mode=listener");
        assert_eq!(e.max_bw_bps, None);
    }

    #[test]
    fn mistakes_are_named() {
        for (s, needle) in [
            ("srt:/0.0.0.0:9000", "starts with srt://"),
            ("srt://0.0.0.0", "not HOST:PORT"),
            ("srt://host.example:9000", "not HOST:PORT"),
            ("srt://0.0.0.0:0", "not 0"),
            ("srt://0.0.0.0:9000,mode=caller", "calls one host"),
            ("srt://239.1.1.1:9000,mode=listener", "is a group"),
            ("srt://0.0.0.0:9000,latency=fast", "not a whole number"),
            ("srt://0.0.0.0:9000,latency=90000", "more than 60000"),
            ("srt://0.0.0.0:9000,pbkeylen=16", "without passphrase-file"),
            ("srt://0.0.0.0:9000,passphrase-file=/k,pbkeylen=20", "16, 24 or 32"),
            ("srt://0.0.0.0:9000,passphrase=secret123456", "goes in a file"),
            ("srt://0.0.0.0:9000,streamid=a b", "without spaces"),
            ("srt://0.0.0.0:9000,max-callers=0", "1 to 1000"),
            ("srt://10.0.0.1:9000,max-callers=5", "for a listener"),
            ("srt://0.0.0.0:9000,max-bw=fast", "a rate in bit/s"),
            ("srt://0.0.0.0:9000,max-bw=0", "send nothing"),
            ("srt://0.0.0.0:9000,idle-timeout=2000", "5000 to 600000"),
            ("srt://0.0.0.0:9000,colour=red", "unknown SRT option `colour`"),
            ("srt://0.0.0.0:9000,latency", "not KEY=VALUE"),
        ] {
            let e = s.parse::<SrtEndpoint>().expect_err(s);
            assert!(e.contains(needle), "{s}: {e}");
        }
    }

    #[test]
    fn a_listener_serves_its_stream_id_plain_or_as_a_resource() {
        let e: SrtEndpoint = "srt://0.0.0.0:9000,streamid=feed-a".parse().expect("endpoint");
        assert!(e.serves("feed-a"));
        assert!(e.serves("#!::r=feed-a,m=request"));
        assert!(e.serves("#!::u=joe,r=feed-a"));
        assert!(!e.serves("feed-b"));
        assert!(!e.serves("#!::r=feed-b"));
        assert!(!e.serves(""));
        assert!(!e.serves("r=feed-a"));
        let any: SrtEndpoint = "srt://0.0.0.0:9000".parse().expect("endpoint");
        assert!(any.serves("") && any.serves("whatever"));
    }
}
