//! The frames path: Ethernet + IPv4 + UDP frames built here and sent on an
//! AF_PACKET socket of the interface.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};

use mcr_core::wire::{UDP_V4_HEADERS, UdpFrameSpec, ethernet, write_udp_v4_frame};
use mcr_sys::mmsg::MAX_BATCH;
use mcr_sys::packet::PacketTx;

use super::{SendConfig, SendError, Sent, Transmit, send_all, setup, stream_and_seq};
use crate::payload;

/// The length of an 802.1Q tag.
const VLAN_TAG: usize = 4;

pub(super) struct FramePath {
    tx: PacketTx,
    streams: Vec<SocketAddr>,
    specs: Vec<UdpFrameSpec>,
    first_id: u32,
    payload_bytes: usize,
    wrap: crate::wrap::Wrap,
    /// The RTP sequence number of packet 0.
    rtp_start: u16,
    scratch: Vec<u8>,
    bufs: Vec<Vec<u8>>,
    /// The 802.1Q tag to insert after the MAC addresses, if any.
    vlan: Option<[u8; 4]>,
    ident: u16,
    /// Holds the source port, so the kernel gives it to nobody else while
    /// we send from it.
    _port: UdpSocket,
}

/// The MAC of `ip` from the kernel's neighbour table (`/proc/net/arp` of
/// this network namespace), if it has a complete entry on `ifname`.
fn arp_entry(ip: Ipv4Addr, ifname: &str) -> Option<ethernet::Mac> {
    let table = std::fs::read_to_string("/proc/net/arp").ok()?;
    table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let complete = f
            .get(2)
            .and_then(|fl| u32::from_str_radix(fl.trim_start_matches("0x"), 16).ok())?
            & 0x2
            != 0;
        (f.len() >= 6 && f[0] == ip.to_string() && f[5] == ifname && complete)
            .then(|| ethernet::parse_mac(f[3]))
            .flatten()
    })
}

impl FramePath {
    pub(super) fn open(cfg: &SendConfig) -> Result<FramePath, SendError> {
        let bad = |m: String| SendError::Frames(m);
        let ifname = cfg
            .interface
            .as_deref()
            .ok_or_else(|| bad("frames go out on one interface: give --interface".into()))?;
        let ifindex = mcr_sys::iface::index(ifname).map_err(setup(format!("interface `{ifname}`")))?;
        let src_mac = mcr_sys::iface::mac(ifname).map_err(setup(format!("MAC address of `{ifname}`")))?;
        let mtu = mcr_sys::iface::mtu(ifname).map_err(setup(format!("MTU of `{ifname}`")))? as usize;
        if cfg.payload_bytes + UDP_V4_HEADERS - ethernet::HEADER_LEN > mtu {
            return Err(bad(format!(
                "a {}-byte payload makes a {}-byte datagram, more than the MTU {mtu} of `{ifname}`",
                cfg.payload_bytes,
                cfg.payload_bytes + UDP_V4_HEADERS - ethernet::HEADER_LEN
            )));
        }
        let src_ip = match cfg.source {
            Some(IpAddr::V4(a)) => a,
            Some(IpAddr::V6(_)) => {
                return Err(bad("frames are built for IPv4 only; use --via udp for IPv6".into()));
            }
            None => mcr_sys::iface::addresses(ifname)
                .map_err(setup(format!("addresses of `{ifname}`")))?
                .into_iter()
                .find_map(|a| match a {
                    IpAddr::V4(v4) => Some(v4),
                    IpAddr::V6(_) => None,
                })
                .ok_or_else(|| bad(format!("`{ifname}` has no IPv4 address: give --source")))?,
        };
        // Reserve a source port the kernel would otherwise hand to another
        // socket (and answer with port-unreachable for).
        let port = UdpSocket::bind((src_ip, 0)).map_err(setup(format!("reserve a source port on {src_ip}")))?;
        let src_port = port.local_addr().map_err(setup("read the reserved port"))?.port();
        let ttl = u8::try_from(cfg.ttl).map_err(|_| SendError::Ttl(cfg.ttl))?;
        let mut specs = Vec::with_capacity(cfg.streams.len());
        for dst in &cfg.streams {
            let SocketAddr::V4(dst4) = dst else {
                return Err(bad("frames are built for IPv4 only; use --via udp for IPv6".into()));
            };
            let dst_mac = match ethernet::multicast_mac(dst.ip()) {
                Some(m) => m,
                None => arp_entry(*dst4.ip(), ifname).ok_or_else(|| {
                    bad(format!(
                        "no neighbour entry for {} on `{ifname}`; use --via udp for unicast destinations the kernel has not resolved",
                        dst4.ip()
                    ))
                })?,
            };
            specs.push(UdpFrameSpec {
                dst_mac,
                src_mac,
                src: SocketAddrV4::new(src_ip, src_port),
                dst: *dst4,
                ttl,
                dscp: cfg.dscp,
                ident: 0,
            });
        }
        let tx = PacketTx::open(ifindex, false).map_err(setup(format!("AF_PACKET socket on `{ifname}`")))?;
        Ok(FramePath {
            tx,
            streams: cfg.streams.clone(),
            specs,
            first_id: cfg.first_id,
            payload_bytes: cfg.payload_bytes,
            wrap: cfg.wrap,
            rtp_start: cfg.rtp_start,
            scratch: Vec::new(),
            bufs: (0..MAX_BATCH)
                .map(|_| vec![0u8; VLAN_TAG + UDP_V4_HEADERS + cfg.payload_bytes])
                .collect(),
            vlan: cfg.vlan.map(|id| {
                let [tpid_hi, tpid_lo] = mcr_core::wire::ethernet::ETHERTYPE_VLAN.to_be_bytes();
                let [tci_hi, tci_lo] = mcr_core::wire::ethernet::tci(0, id).to_be_bytes();
                [tpid_hi, tpid_lo, tci_hi, tci_lo]
            }),
            ident: 0,
            _port: port,
        })
    }
}

impl Transmit for FramePath {
    fn send(&mut self, first: u64, n: usize, now_ns: u64, stop: &dyn Fn() -> bool) -> Result<Sent, SendError> {
        let s = self.streams.len();
        // Each frame is built after room for a tag; a tagged frame then
        // moves its MAC addresses forward over that room and puts the tag
        // between them and the EtherType.
        let start = if self.vlan.is_some() { 0 } else { VLAN_TAG };
        for (i, buf) in self.bufs.iter_mut().take(n).enumerate() {
            let (stream, seq) = stream_and_seq(first + i as u64, s);
            let frame = &mut buf[VLAN_TAG..];
            let id = self.first_id.wrapping_add(stream as u32);
            self.wrap.fill(
                &mut frame[UDP_V4_HEADERS..],
                id,
                seq,
                self.rtp_start,
                now_ns,
                &mut self.scratch,
                |b| {
                    payload::fill(b, id, seq, now_ns);
                },
            );
            let mut spec = self.specs[stream];
            spec.ident = self.ident;
            self.ident = self.ident.wrapping_add(1);
            // The buffer was sized for headers and payload in `open`.
            write_udp_v4_frame(frame, &spec, self.payload_bytes).map_err(|e| SendError::Frames(e.to_string()))?;
            if let Some(tag) = self.vlan {
                buf.copy_within(VLAN_TAG..VLAN_TAG + 12, 0);
                buf[12..16].copy_from_slice(&tag);
            }
        }
        let mut frames: [&[u8]; MAX_BATCH] = [&[]; MAX_BATCH];
        for (f, b) in frames.iter_mut().zip(&self.bufs).take(n) {
            *f = &b[start..];
        }
        let tx = &self.tx;
        send_all(n, stop, |off| tx.send(&frames[off..n], false)).map_err(|(off, source)| SendError::Send {
            destination: self.streams[stream_and_seq(first + off as u64, s).0],
            source,
        })
    }

    fn name(&self) -> &'static str {
        "frames"
    }
}
