//! `mcrgen hostile`: malformed frames aimed at a relay's input, to prove it
//! counts each and loses none of the valid streams beside them.
//!
//! Every frame is addressed to one group and port (so it takes the relay's
//! own path for that stream) and is wrong in one way, chosen by its kind.
//! Frames are built from a seed, so the same seed gives the same frames and
//! a test can tell exactly what the relay should have counted
//! ([`frame`] is public for that).

use std::collections::BTreeMap;
use std::net::SocketAddrV4;
use std::str::FromStr;

use mcr_core::wire::ethernet::{self, Mac};
use mcr_core::wire::ipv4::{self, FLAG_MF, Ipv4Header, PROTO_IGMP};
use mcr_core::wire::{UDP_V4_HEADERS, UdpFrameSpec, write_udp_v4_frame};
use serde::{Deserialize, Serialize};
use zerocopy::FromBytes;

/// The ways a frame can be wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Random bytes after an Ethernet header that says IPv4, to the group.
    Random,
    /// A valid frame cut short inside its IPv4 or UDP header.
    Truncated,
    /// An IPv4 total length longer than the frame, or a UDP length that does
    /// not fill the datagram.
    BadLength,
    /// A wrong IPv4 header checksum.
    BadIpChecksum,
    /// A wrong UDP checksum (a relay forwards it, as a router does, and the
    /// receiver refuses it).
    BadUdpChecksum,
    /// IPv4 options (a header longer than 20 bytes).
    IpOptions,
    /// A fragment (more-fragments set).
    Fragment,
    /// An IGMP report sent to the group.
    Igmp,
    /// TCP to the group.
    Tcp,
}

impl Kind {
    /// Every kind, in order.
    pub const ALL: [Kind; 9] = [
        Kind::Random,
        Kind::Truncated,
        Kind::BadLength,
        Kind::BadIpChecksum,
        Kind::BadUdpChecksum,
        Kind::IpOptions,
        Kind::Fragment,
        Kind::Igmp,
        Kind::Tcp,
    ];

    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Random => "random",
            Kind::Truncated => "truncated",
            Kind::BadLength => "bad_length",
            Kind::BadIpChecksum => "bad_ip_checksum",
            Kind::BadUdpChecksum => "bad_udp_checksum",
            Kind::IpOptions => "ip_options",
            Kind::Fragment => "fragment",
            Kind::Igmp => "igmp",
            Kind::Tcp => "tcp",
        }
    }
}

impl FromStr for Kind {
    type Err = String;
    fn from_str(s: &str) -> Result<Kind, String> {
        Kind::ALL.into_iter().find(|k| k.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Kind::ALL.iter().map(|k| k.name()).collect();
            format!("`{s}` is not a kind of bad frame (kinds: {})", names.join(", "))
        })
    }
}

/// splitmix64: the `n`th pseudo-random word of `seed`.
fn word(seed: u64, n: u64) -> u64 {
    let mut x = seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The IPv4 header of `f` (a frame built here: it always holds one).
fn ip_header(f: &mut [u8]) -> Option<&mut Ipv4Header> {
    Ipv4Header::mut_from_prefix(&mut f[ethernet::HEADER_LEN..])
        .ok()
        .map(|(h, _)| h)
}

/// The `i`th frame of `kind` from `seed`: to `dst` from `src`, between the
/// given MACs, with a payload of 64 to 320 bytes.
pub fn frame(kind: Kind, i: u64, seed: u64, src_mac: Mac, src: SocketAddrV4, dst: SocketAddrV4) -> Vec<u8> {
    let r = word(seed, i.wrapping_mul(16).wrapping_add(kind as u64));
    let payload_len = 64 + (r % 257) as usize;
    let mut f = vec![0u8; UDP_V4_HEADERS + payload_len];
    for (n, b) in f[UDP_V4_HEADERS..].iter_mut().enumerate() {
        *b = (word(r, n as u64) & 0xff) as u8;
    }
    let spec = UdpFrameSpec {
        dst_mac: ethernet::multicast_mac((*dst.ip()).into()).unwrap_or([0xff; 6]),
        src_mac,
        src,
        dst,
        ttl: 16,
        dscp: 0,
        ident: (i & 0xffff) as u16,
    };
    // The buffer was sized for this payload, so the frame fits.
    let Ok(len) = write_udp_v4_frame(&mut f, &spec, payload_len) else {
        return f;
    };
    f.truncate(len);
    let ip_at = ethernet::HEADER_LEN;
    match kind {
        Kind::Random => {
            // Keep the Ethernet header and the destination (so the frame is
            // aimed at the stream); everything else is noise.
            for (n, b) in f[ip_at..].iter_mut().enumerate() {
                *b = (word(r ^ 0x5151, n as u64) & 0xff) as u8;
            }
            f[ip_at + 16..ip_at + 20].copy_from_slice(&dst.ip().octets());
        }
        Kind::Truncated => {
            // Inside the IPv4 header (20 bytes), or inside the UDP header.
            let cut = if r & 1 == 0 {
                20 + (r >> 8) % 14
            } else {
                34 + (r >> 8) % 8
            };
            f.truncate(cut as usize);
        }
        Kind::BadLength => {
            if let Some(h) = ip_header(&mut f) {
                if r & 1 == 0 {
                    h.total_len.set(h.total_len.get() + 1 + (r >> 8) as u16 % 200);
                    h.fill_checksum(&[]);
                } else {
                    let at = ip_at + ipv4::HEADER_LEN + 4;
                    let udp_len = u16::from_be_bytes([f[at], f[at + 1]]);
                    f[at..at + 2].copy_from_slice(&(udp_len - 1 - (r >> 8) as u16 % 50).to_be_bytes());
                }
            }
        }
        Kind::BadIpChecksum => {
            if let Some(h) = ip_header(&mut f) {
                h.checksum.set(h.checksum.get() ^ (1 + (r >> 8) as u16 % 0xfffe));
            }
        }
        Kind::BadUdpChecksum => {
            let at = ip_at + ipv4::HEADER_LEN + 6;
            let c = u16::from_be_bytes([f[at], f[at + 1]]);
            // Never 0 (which would mean "no checksum") and never the right one.
            let mut bad = c ^ (1 + (r >> 8) as u16 % 0xfffe);
            if bad == 0 {
                bad = c ^ 0x00ff;
            }
            f[at..at + 2].copy_from_slice(&bad.to_be_bytes());
        }
        Kind::IpOptions => {
            // Four NOP options after the fixed header; lengths and the
            // header checksum stay right.
            f.splice(ip_at + ipv4::HEADER_LEN..ip_at + ipv4::HEADER_LEN, [1u8; 4]);
            if let Some(h) = ip_header(&mut f) {
                h.version_ihl = 0x46;
                h.total_len.set(h.total_len.get() + 4);
                h.fill_checksum(&[1u8; 4]);
            }
        }
        Kind::Fragment => {
            if let Some(h) = ip_header(&mut f) {
                h.flags_fragment.set(FLAG_MF);
                h.fill_checksum(&[]);
            }
        }
        Kind::Igmp | Kind::Tcp => {
            if let Some(h) = ip_header(&mut f) {
                h.protocol = if kind == Kind::Igmp { PROTO_IGMP } else { 6 };
                h.fill_checksum(&[]);
            }
        }
    }
    f
}

/// What `mcrgen hostile` sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostileReport {
    /// Frames sent, by kind.
    pub sent: BTreeMap<Kind, u64>,
    /// All of them.
    pub total: u64,
    /// How long sending took, in seconds.
    pub duration_s: f64,
}

/// What to send.
#[derive(Debug, Clone)]
pub struct HostileConfig {
    /// The interface to send on.
    pub interface: String,
    /// Where every frame is aimed.
    pub dst: SocketAddrV4,
    /// The source address and port they claim.
    pub src: SocketAddrV4,
    /// The kinds, taken in turn.
    pub kinds: Vec<Kind>,
    /// Frames of each kind.
    pub count_per_kind: u64,
    /// Frames per second, all kinds together.
    pub rate_pps: f64,
    /// The seed the frames are built from.
    pub seed: u64,
}

/// Sends the frames `cfg` describes, paced in batches of 32.
pub fn run(cfg: &HostileConfig) -> std::io::Result<HostileReport> {
    let ifindex = mcr_sys::iface::index(&cfg.interface)?;
    let src_mac = mcr_sys::iface::mac(&cfg.interface)?;
    let tx = mcr_sys::packet::PacketTx::open(ifindex, false)?;
    let mut sent: BTreeMap<Kind, u64> = cfg.kinds.iter().map(|k| (*k, 0)).collect();
    let total = cfg.count_per_kind * cfg.kinds.len() as u64;
    let start = mcr_sys::clock::monotonic_ns();
    let ns_per_frame = 1e9 / cfg.rate_pps.max(1.0);
    let mut n = 0u64;
    while n < total {
        let batch: Vec<(Kind, Vec<u8>)> = (n..total.min(n + 32))
            .map(|k| {
                let kind = cfg.kinds[(k % cfg.kinds.len() as u64) as usize];
                let i = k / cfg.kinds.len() as u64;
                (kind, frame(kind, i, cfg.seed, src_mac, cfg.src, cfg.dst))
            })
            .collect();
        let refs: Vec<&[u8]> = batch.iter().map(|(_, f)| f.as_slice()).collect();
        let mut done = 0;
        while done < refs.len() {
            match tx.send(&refs[done..], false) {
                Ok(k) => done += k,
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => std::thread::yield_now(),
                Err(e) => return Err(e),
            }
        }
        for (kind, _) in &batch {
            *sent.entry(*kind).or_default() += 1;
        }
        n += batch.len() as u64;
        mcr_sys::clock::sleep_until_ns(start + (n as f64 * ns_per_frame) as u64);
    }
    Ok(HostileReport {
        sent,
        total,
        duration_s: (mcr_sys::clock::monotonic_ns() - start) as f64 / 1e9,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcr_core::forward::{RxChecksum, parse};
    use mcr_core::stats::WorkerCounter;

    fn frames(kind: Kind, n: u64) -> Vec<Vec<u8>> {
        let src = "10.0.0.1:4000".parse().expect("src");
        let dst = "239.1.1.1:5001".parse().expect("dst");
        (0..n)
            .map(|i| frame(kind, i, 7, [2, 0, 0, 0, 0, 1], src, dst))
            .collect()
    }

    #[test]
    fn each_kind_is_refused_for_its_own_reason() {
        for (kind, want) in [
            (Kind::Truncated, WorkerCounter::BadLength),
            (Kind::BadLength, WorkerCounter::BadLength),
            (Kind::BadIpChecksum, WorkerCounter::BadIpChecksum),
            (Kind::IpOptions, WorkerCounter::IpOptions),
            (Kind::Fragment, WorkerCounter::Fragment),
            (Kind::Igmp, WorkerCounter::NotUdp),
            (Kind::Tcp, WorkerCounter::NotUdp),
        ] {
            for f in frames(kind, 500) {
                assert_eq!(
                    parse(&f, f.len(), RxChecksum::Unknown, None).err(),
                    Some(want),
                    "{kind:?}"
                );
            }
        }
    }

    #[test]
    fn a_bad_udp_checksum_parses_and_is_caught_by_the_receivers_check() {
        for f in frames(Kind::BadUdpChecksum, 500) {
            let d = parse(&f, f.len(), RxChecksum::Unknown, None).expect("the payload is not the relay's to judge");
            assert!(!mcr_core::forward::udp_checksum_ok(&f, &d, RxChecksum::Unknown));
        }
    }

    #[test]
    fn random_frames_are_never_valid_and_stay_aimed_at_the_group() {
        for f in frames(Kind::Random, 5000) {
            assert!(parse(&f, f.len(), RxChecksum::Unknown, None).is_err());
            assert_eq!(&f[30..34], &[239, 1, 1, 1]);
            assert_eq!(&f[12..14], &[0x08, 0x00]);
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_frames() {
        assert_eq!(frames(Kind::Random, 10), frames(Kind::Random, 10));
        let names: Vec<Kind> = Kind::ALL.iter().map(|k| k.name().parse().expect("kind")).collect();
        assert_eq!(names, Kind::ALL);
        assert!("nope".parse::<Kind>().is_err());
    }
}
