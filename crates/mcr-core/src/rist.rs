//! A RIST endpoint's settings: where a stream leaves or enters MCR over
//! RIST (VSF TR-06: RTP with retransmission over UDP, the other protocol
//! broadcasters cross the Internet with). The protocol is librist's, in
//! the workers (`mcr_sys::rist`); this is only what a rule says.
//!
//! The text form, beside SRT's:
//!
//! ```text
//! rist://HOST:PORT[,mode=listener|caller][,profile=simple|main][,buffer=MS]
//!        [,secret-file=PATH][,aes=128|256][,max-peers=N][,max-bw=RATE]
//! rist://0.0.0.0:8200,buffer=400,max-peers=10
//! rist://203.0.113.5:8200,profile=simple,buffer=1000
//! ```
//!
//! A wildcard host listens and any other connects, as with SRT. An output
//! sends whichever way it connects; an input receives. The main profile
//! (the default) carries everything on one UDP port and may encrypt with
//! a pre-shared secret (named by its file, never held in a rule); the
//! simple profile uses an even port and the next one (RTP and RTCP) and
//! has no encryption.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub use crate::srt::SrtMode as RistMode;
use crate::srt::{EndpointSpec, parse_rate, write_rate};

/// librist's recovery buffer when none is given, in ms.
pub const DEFAULT_BUFFER_MS: u32 = 1_000;
/// The most buffer a rule may ask for, in ms.
pub const MAX_BUFFER_MS: u32 = 30_000;
/// How many peers one listener takes when a rule says nothing.
pub const DEFAULT_MAX_PEERS: u32 = 64;
/// The most peers one listener may take.
pub const MAX_PEERS: u32 = 1_000;

/// The RIST profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum RistProfile {
    /// TR-06-1: RTP over UDP on an even port, RTCP on the next.
    Simple,
    /// TR-06-2: everything in GRE over one UDP port; AES possible.
    #[default]
    Main,
}

impl RistProfile {
    fn name(self) -> &'static str {
        match self {
            RistProfile::Simple => "simple",
            RistProfile::Main => "main",
        }
    }
}

/// A RIST endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RistEndpoint {
    /// Listener or caller.
    pub mode: RistMode,
    /// The listener's address and UDP port, or the peer a caller reaches.
    pub address: SocketAddr,
    /// Simple or main.
    #[serde(default, skip_serializing_if = "is_main")]
    pub profile: RistProfile,
    /// The recovery buffer: how long a packet may take, retransmissions
    /// included, in ms (librist's `buffer`).
    #[serde(default = "default_buffer", skip_serializing_if = "is_default_buffer")]
    pub buffer_ms: u32,
    /// A file holding the pre-shared secret (main profile); none: no
    /// encryption.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_file: Option<PathBuf>,
    /// The AES key size in bits (128 or 256); none: 128 with a secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aes: Option<u16>,
    /// A listener: how many peers it takes at once; the next is refused.
    #[serde(default = "default_max_peers", skip_serializing_if = "is_default_max_peers")]
    pub max_peers: u32,
    /// A cap on the bandwidth of retransmissions, in bit/s (librist's
    /// `bandwidth`); none: librist's (100 Mb/s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bw_bps: Option<u64>,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_main(p: &RistProfile) -> bool {
    *p == RistProfile::Main
}
fn default_buffer() -> u32 {
    DEFAULT_BUFFER_MS
}
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_default_buffer(v: &u32) -> bool {
    *v == DEFAULT_BUFFER_MS
}
fn default_max_peers() -> u32 {
    DEFAULT_MAX_PEERS
}
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_default_max_peers(v: &u32) -> bool {
    *v == DEFAULT_MAX_PEERS
}

impl RistEndpoint {
    /// An endpoint at `address` with every default, in the mode the
    /// address implies.
    pub fn new(address: SocketAddr) -> Self {
        RistEndpoint {
            mode: RistMode::implied_by(&address),
            address,
            profile: RistProfile::Main,
            buffer_ms: DEFAULT_BUFFER_MS,
            secret_file: None,
            aes: None,
            max_peers: DEFAULT_MAX_PEERS,
            max_bw_bps: None,
        }
    }

    /// The UDP ports a listener binds: one (main profile) or an even one
    /// and the next (simple profile).
    pub fn ports(&self) -> Vec<u16> {
        let p = self.address.port();
        match self.profile {
            RistProfile::Main => vec![p],
            RistProfile::Simple => vec![p, p.saturating_add(1)],
        }
    }

    /// librist's URL for this endpoint, with the secret read from its file
    /// (`secret`): `@` before the address when it listens.
    pub fn url(&self, secret: Option<&str>) -> String {
        let at = if self.mode == RistMode::Listener { "@" } else { "" };
        let mut u = format!("rist://{at}{}?buffer={}", self.address, self.buffer_ms);
        if let Some(s) = secret {
            u.push_str(&format!("&secret={s}&aes-type={}", self.aes.unwrap_or(128)));
        }
        if let Some(b) = self.max_bw_bps {
            u.push_str(&format!("&bandwidth={}", b.div_ceil(1000)));
        }
        u
    }

    /// What is wrong with the settings, if anything.
    pub fn check(&self) -> Result<(), String> {
        let a = self.address;
        if a.port() == 0 {
            return Err(format!("{a}: give a UDP port (not 0)"));
        }
        match self.mode {
            RistMode::Caller if a.ip().is_unspecified() || a.ip().is_multicast() => {
                return Err(format!("a caller reaches one host; {} is not one", a.ip()));
            }
            RistMode::Listener if a.ip().is_multicast() => {
                return Err(format!(
                    "a listener binds an address of this host; {} is a group",
                    a.ip()
                ));
            }
            RistMode::Caller if self.max_peers != DEFAULT_MAX_PEERS => {
                return Err("max-peers is for a listener; a caller has one peer".into());
            }
            _ => {}
        }
        if self.profile == RistProfile::Simple {
            if a.port() % 2 == 1 || a.port() == u16::MAX - 1 {
                return Err(format!(
                    "port {}: the simple profile takes an even port and the next (RTP and RTCP)",
                    a.port()
                ));
            }
            if self.secret_file.is_some() || self.aes.is_some() {
                return Err("the simple profile has no encryption: use profile=main with secret-file".into());
            }
        }
        if !(1..=MAX_BUFFER_MS).contains(&self.buffer_ms) {
            return Err(format!("buffer {} ms: 1 to {MAX_BUFFER_MS}", self.buffer_ms));
        }
        if let Some(k) = self.aes {
            if k != 128 && k != 256 {
                return Err(format!("aes {k}: AES keys are 128 or 256 bits"));
            }
            if self.secret_file.is_none() {
                return Err("aes without secret-file: there is no key".into());
            }
        }
        if !(1..=MAX_PEERS).contains(&self.max_peers) {
            return Err(format!("max-peers {}: 1 to {MAX_PEERS}", self.max_peers));
        }
        if self.max_bw_bps == Some(0) {
            return Err("max-bw 0 would retransmit nothing; leave it out for librist's cap".into());
        }
        Ok(())
    }
}

impl FromStr for RistEndpoint {
    type Err = String;
    fn from_str(spec: &str) -> Result<Self, String> {
        let p = EndpointSpec::parse(spec, "rist")?;
        let spec = p.spec;
        let mut e = RistEndpoint::new(p.address);
        let num = |k: &str, v: &str| p.num(k, v);
        for &(k, v) in &p.options {
            match k {
                "mode" => e.mode = p.mode(v)?,
                "profile" => {
                    e.profile = match v {
                        "simple" => RistProfile::Simple,
                        "main" => RistProfile::Main,
                        _ => return Err(format!("`{spec}`: profile `{v}`: simple or main")),
                    }
                }
                "buffer" => e.buffer_ms = num(k, v)?,
                "secret-file" => e.secret_file = Some(PathBuf::from(v)),
                "aes" => e.aes = Some(v.parse().map_err(|_| format!("`{spec}`: aes `{v}`: 128 or 256"))?),
                "max-peers" => e.max_peers = num(k, v)?,
                "max-bw" => e.max_bw_bps = Some(parse_rate(v).map_err(|m| format!("`{spec}`: {m}"))?),
                "secret" => {
                    return Err(format!(
                        "`{spec}`: the secret goes in a file, named by secret-file=PATH, so rules and saved files never hold it"
                    ));
                }
                _ => {
                    return Err(format!(
                        "`{spec}`: unknown RIST option `{k}` (known: mode, profile, buffer, secret-file, aes, max-peers, max-bw)"
                    ));
                }
            }
        }
        e.check().map_err(|m| format!("`{spec}`: {m}"))?;
        Ok(e)
    }
}

impl fmt::Display for RistEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rist://{},mode={}", self.address, self.mode.name())?;
        if self.profile != RistProfile::Main {
            write!(f, ",profile={}", self.profile.name())?;
        }
        if self.buffer_ms != DEFAULT_BUFFER_MS {
            write!(f, ",buffer={}", self.buffer_ms)?;
        }
        if let Some(p) = &self.secret_file {
            write!(f, ",secret-file={}", p.display())?;
        }
        if let Some(k) = self.aes {
            write!(f, ",aes={k}")?;
        }
        if self.max_peers != DEFAULT_MAX_PEERS {
            write!(f, ",max-peers={}", self.max_peers)?;
        }
        if let Some(b) = self.max_bw_bps {
            f.write_str(",max-bw=")?;
            write_rate(f, b)?;
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
            "rist://0.0.0.0:8200,mode=listener",
            "rist://[::]:8200,mode=listener,buffer=400,max-peers=10",
            "rist://10.0.1.1:8200,mode=listener,secret-file=/etc/mcr/feed.key,aes=256",
            "rist://203.0.113.5:8202,mode=caller,profile=simple,buffer=2000",
            "rist://203.0.113.5:8200,mode=caller,max-bw=20M",
        ] {
            let e: RistEndpoint = s.parse().expect(s);
            assert_eq!(e.to_string(), s);
            let json = serde_json::to_string(&e).expect("json");
            assert_eq!(serde_json::from_str::<RistEndpoint>(&json).expect(&json), e);
        }
    }

    #[test]
    fn the_url_is_librists() {
        let e: RistEndpoint = "rist://0.0.0.0:8200,buffer=400,aes=256,secret-file=/k,max-bw=2M"
            .parse()
            .expect("endpoint");
        assert_eq!(
            e.url(Some("s3cret-s3cret")),
            "rist://@0.0.0.0:8200?buffer=400&secret=s3cret-s3cret&aes-type=256&bandwidth=2000"
        );
        let e: RistEndpoint = "rist://10.0.0.1:8202,profile=simple".parse().expect("endpoint");
        assert_eq!(e.url(None), "rist://10.0.0.1:8202?buffer=1000");
        assert_eq!(e.ports(), vec![8202, 8203]);
    }

    #[test]
    fn mistakes_are_named() {
        for (s, needle) in [
            ("rist:/0.0.0.0:8200", "starts with rist://"),
            ("rist://0.0.0.0", "not HOST:PORT"),
            ("rist://0.0.0.0:0", "not 0"),
            ("rist://0.0.0.0:8200,mode=caller", "reaches one host"),
            ("rist://239.1.1.1:8200,mode=listener", "is a group"),
            ("rist://0.0.0.0:8201,profile=simple", "even port"),
            ("rist://0.0.0.0:8200,profile=simple,secret-file=/k", "no encryption"),
            ("rist://0.0.0.0:8200,profile=fancy", "simple or main"),
            ("rist://0.0.0.0:8200,buffer=0", "1 to 30000"),
            ("rist://0.0.0.0:8200,aes=128", "without secret-file"),
            ("rist://0.0.0.0:8200,secret-file=/k,aes=192", "128 or 256"),
            ("rist://0.0.0.0:8200,secret=abc", "goes in a file"),
            ("rist://0.0.0.0:8200,max-peers=0", "1 to 1000"),
            ("rist://10.0.0.1:8200,max-peers=5", "for a listener"),
            ("rist://0.0.0.0:8200,max-bw=0", "retransmit nothing"),
            ("rist://0.0.0.0:8200,colour=red", "unknown RIST option `colour`"),
        ] {
            let e = s.parse::<RistEndpoint>().expect_err(s);
            assert!(e.contains(needle), "{s}: {e}");
        }
    }
}
