//! Receiving from an AF_PACKET ring on the interface: no socket delivery
//! and no system call per packet, so one receiver checks far more packets
//! per second than through sockets. Each frame's IP and UDP checksums are
//! verified as they were on the wire. Groups are joined with sockets bound
//! to the loopback address, which never receive a datagram themselves.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::atomic::AtomicBool;

use mcr_core::forward::{RxChecksum, parse, udp_checksum_ok};
use mcr_core::stats::WorkerCounter;
use mcr_sys::clock::{arrival_monotonic_ns, monotonic_ns, realtime_offset_ns};
use mcr_sys::epoll::Epoll;
use mcr_sys::membership::{JoinError, JoinSockets};
use mcr_sys::ring::{FilterInsn, RingConfig, RingVersion, RxRing, filter_insn};

use super::{Counters, Outcome, RecvConfig, RecvError, Timing, join_error, setup};

/// Joins every group on `ifindex` from sockets that receive nothing, as
/// many as the kernel's per-socket limit requires.
fn join_quietly(cfg: &RecvConfig, ifindex: u32) -> Result<JoinSockets, RecvError> {
    let mut joins = JoinSockets::default();
    let mut joined = HashSet::new();
    for d in &cfg.streams {
        let g = d.ip();
        // The same group on several ports is joined once.
        if !joined.insert(g) {
            continue;
        }
        joins.join(ifindex, g, None).map_err(|e| match e {
            JoinError::Open(e) => setup("open a membership socket")(e),
            JoinError::Refused { error, .. } => join_error(cfg, g, error),
        })?;
    }
    Ok(joins)
}

pub(super) fn run(cfg: &RecvConfig, stop: &AtomicBool, ready: impl FnOnce(&str)) -> Result<Outcome, RecvError> {
    let bad = |m: &str| RecvError::Setup {
        what: format!("--via ring: {m}"),
        source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
    };
    let ifname = cfg.interface.as_deref().ok_or_else(|| bad("give --interface"))?;
    if cfg.streams.iter().any(|d| !d.ip().is_multicast()) {
        return Err(bad("it takes multicast streams; use --via sockets for unicast"));
    }
    let ifindex = mcr_sys::iface::index_or_unknown(ifname).map_err(setup("--interface"))?;
    let mtu = mcr_sys::iface::mtu(ifname).map_err(setup("interface MTU"))? as usize;
    let joins = join_quietly(cfg, ifindex)?;
    let spec = mcr_core::bpf::FilterSpec {
        unicast: Vec::new(),
        vlans: cfg.vlan.into_iter().collect(),
    };
    let filter: Vec<FilterInsn> = mcr_core::bpf::ingress_filter(&spec)
        .into_iter()
        .map(|i| filter_insn(i.code, i.jt, i.jf, i.k))
        .collect();
    let ring_cfg = RingConfig {
        version: RingVersion::V2,
        bytes: cfg.recv_buffer_bytes.max(1 << 20),
        max_frame: mtu + 18,
        block_timeout_ms: 1,
    };
    let mut ring = RxRing::open(ifindex, &ring_cfg, mcr_sys::ring::Filter::Classic(&filter), None)
        .map_err(setup(format!("receive ring on `{ifname}`")))?;
    // Timestamps taken as each frame enters the interface (where a capture
    // of the link would see it), not when this ring's turn comes on a busy
    // core: asking for them makes the kernel stamp every frame on arrival.
    mcr_sys::sockopt::set_recv_timestamps(ring.as_fd()).map_err(setup("SO_TIMESTAMPNS"))?;
    let mut epoll = Epoll::new(1).map_err(setup("epoll"))?;
    epoll.add_readable(ring.as_fd(), 0).map_err(setup("epoll_ctl"))?;
    let mut c = Counters::new(cfg);
    ready(&format!("ready: {} streams from a ring on {ifname}", cfg.streams.len()));
    let mut t = Timing::new();
    let stopped_by = loop {
        if let Some(why) = t.stop_reason(cfg, stop, &c) {
            break why;
        }
        epoll.wait(20).map_err(RecvError::Recv)?.for_each(drop);
        loop {
            let now = monotonic_ns();
            let offset = realtime_offset_ns();
            let n = ring.for_each_ready(1024, |f| {
                let at = f.arrived_ns.map_or(now, |r| arrival_monotonic_ns(r, offset, now));
                let csum = if f.csum_not_ready {
                    RxChecksum::NotReady
                } else if f.csum_valid {
                    RxChecksum::Valid
                } else {
                    RxChecksum::Unknown
                };
                match mcr_core::forward::kernel_tag(f.vlan_tci, f.vlan_tpid)
                    .and_then(|t| parse(f.data, f.wire_len, csum, t))
                {
                    Ok(d) if d.vlan != cfg.vlan.unwrap_or(0) => c.other_vlan += 1,
                    // Every checksum is checked here, whatever the kernel
                    // said (veth vouches for frames it never checked).
                    Ok(d) if !udp_checksum_ok(f.data, &d, csum) => c.bad_frames += 1,
                    Ok(d) => {
                        let payload = &f.data[d.payload_at..d.payload_at + d.payload_len];
                        let dst = SocketAddr::new(d.dst, d.dst_port);
                        c.handle(Some(dst), payload, false, at, Some(d.tos >> 2));
                    }
                    // Not ours to judge: the filter lets only UDP in, but
                    // other frames may slip in before it is attached.
                    Err(WorkerCounter::NotIp | WorkerCounter::NotUdp) => {}
                    Err(_) => c.bad_frames += 1,
                }
            });
            if n == 0 {
                break;
            }
            t.arrived(now);
        }
    };
    let socket_drops = ring.stats().map_or(0, |s| s.drops);
    drop(joins);
    Ok(Outcome {
        active_s: t.active_s(),
        sockets: 1,
        counters: c,
        socket_drops,
        stopped_by,
    })
}
