//! Receiving through UDP sockets, as an application does.
//!
//! Sockets are opened per (port, family) and bound to the wildcard address
//! with `IP_MULTICAST_ALL` off, so each receives only the groups it joined
//! itself. Joins go onto the newest socket of the port until the kernel
//! refuses one (`igmp_max_memberships`, 20 by default, is a limit per
//! socket); then another socket takes the next ones. Each datagram's
//! destination comes from `IP_PKTINFO`, so one socket can serve many
//! streams. At the end, `SO_MEMINFO` says how many datagrams each socket
//! dropped because its buffer was full: loss at this receiver, not on the
//! way.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::atomic::AtomicBool;

use mcr_sys::clock::{arrival_monotonic_ns, monotonic_ns, realtime_offset_ns};
use mcr_sys::epoll::Epoll;
use mcr_sys::mmsg::{MAX_BATCH, RecvBatch};
use socket2::{Domain, InterfaceIndexOrAddress, Protocol, Socket, Type};

use super::{Counters, Outcome, RecvConfig, RecvError, Timing, is_limit, join_error, privilege_hint, setup};
use crate::payload;

struct Sock {
    socket: Socket,
    port: u16,
}

fn open_socket(cfg: &RecvConfig, port: u16, ipv6: bool) -> Result<Sock, RecvError> {
    let domain = if ipv6 { Domain::IPV6 } else { Domain::IPV4 };
    let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP)).map_err(setup("open a UDP socket"))?;
    s.set_reuse_address(true).map_err(setup("SO_REUSEADDR"))?;
    if ipv6 {
        s.set_only_v6(true).map_err(setup("IPV6_V6ONLY"))?;
    }
    mcr_sys::sockopt::set_multicast_all(s.as_fd(), ipv6, false).map_err(setup("IP_MULTICAST_ALL"))?;
    mcr_sys::sockopt::set_recv_pktinfo(s.as_fd(), ipv6).map_err(setup("IP_PKTINFO"))?;
    mcr_sys::sockopt::set_recv_timestamps(s.as_fd()).map_err(setup("SO_TIMESTAMPNS"))?;
    mcr_sys::sockopt::force_recv_buffer(s.as_fd(), cfg.recv_buffer_bytes).map_err(setup("SO_RCVBUF"))?;
    if let Some(ifname) = &cfg.interface {
        s.bind_device(Some(ifname.as_bytes())).map_err(|e| RecvError::Setup {
            what: format!("bind to interface `{ifname}`{}", privilege_hint(&e)),
            source: e,
        })?;
    }
    let any: IpAddr = if ipv6 {
        Ipv6Addr::UNSPECIFIED.into()
    } else {
        Ipv4Addr::UNSPECIFIED.into()
    };
    s.bind(&SocketAddr::new(any, port).into())
        .map_err(setup(format!("bind port {port}")))?;
    s.set_nonblocking(true).map_err(setup("O_NONBLOCK"))?;
    Ok(Sock { socket: s, port })
}

fn join(s: &Sock, group: IpAddr, ifindex: u32) -> io::Result<()> {
    match group {
        IpAddr::V4(g) => s
            .socket
            .join_multicast_v4_n(&g, &InterfaceIndexOrAddress::Index(ifindex)),
        IpAddr::V6(g) => s.socket.join_multicast_v6(&g, ifindex),
    }
}

/// Opens the sockets and joins every group; returns the sockets.
fn open_all(cfg: &RecvConfig) -> Result<Vec<Sock>, RecvError> {
    let ifindex = match &cfg.interface {
        Some(n) => mcr_sys::iface::index_or_unknown(n).map_err(setup("--interface"))?,
        None => 0,
    };
    let mut sockets: Vec<Sock> = Vec::new();
    // The socket that takes the next join, per (port, family).
    let mut current: HashMap<(u16, bool), usize> = HashMap::new();
    for dest in &cfg.streams {
        let key = (dest.port(), dest.is_ipv6());
        let idx = match current.get(&key) {
            Some(&i) => i,
            None => {
                sockets.push(open_socket(cfg, key.0, key.1)?);
                current.insert(key, sockets.len() - 1);
                sockets.len() - 1
            }
        };
        if !dest.ip().is_multicast() {
            continue;
        }
        match join(&sockets[idx], dest.ip(), ifindex) {
            Ok(()) => {}
            Err(e) if is_limit(&e) => {
                let fresh = open_socket(cfg, key.0, key.1)?;
                join(&fresh, dest.ip(), ifindex).map_err(|e| join_error(cfg, dest.ip(), e))?;
                sockets.push(fresh);
                current.insert(key, sockets.len() - 1);
            }
            Err(e) => return Err(join_error(cfg, dest.ip(), e)),
        }
    }
    Ok(sockets)
}

/// Joins, receives until a stop condition, and hands back the accounting.
pub(super) fn run(cfg: &RecvConfig, stop: &AtomicBool, ready: impl FnOnce(&str)) -> Result<Outcome, RecvError> {
    let sockets = open_all(cfg)?;
    let mut epoll = Epoll::new(sockets.len().min(1024)).map_err(setup("epoll"))?;
    for (i, s) in sockets.iter().enumerate() {
        epoll
            .add_readable(s.socket.as_fd(), i as u64)
            .map_err(setup("epoll_ctl"))?;
    }
    let mut c = Counters::new(cfg);
    ready(&format!(
        "ready: {} streams on {} sockets{}",
        cfg.streams.len(),
        sockets.len(),
        cfg.interface.as_ref().map(|i| format!(" on {i}")).unwrap_or_default()
    ));
    let mut batch = RecvBatch::new(MAX_BATCH, payload::MAX_PAYLOAD + 64);
    let mut t = Timing::new();
    let stopped_by = loop {
        if let Some(why) = t.stop_reason(cfg, stop, &c) {
            break why;
        }
        let ready_socks: Vec<u64> = epoll.wait(20).map_err(RecvError::Recv)?.collect();
        for token in ready_socks {
            let s = &sockets[token as usize];
            loop {
                let n = batch.recv(s.socket.as_fd()).map_err(RecvError::Recv)?;
                if n == 0 {
                    break;
                }
                let now = monotonic_ns();
                let offset = realtime_offset_ns();
                t.arrived(now);
                for i in 0..n {
                    let (data, meta) = batch.get(i);
                    let dst = meta.destination.map(|ip| SocketAddr::new(ip, s.port));
                    let at = meta.arrived_ns.map_or(now, |r| arrival_monotonic_ns(r, offset, now));
                    c.handle(dst, data, meta.truncated, at, None);
                }
                if n < MAX_BATCH {
                    break;
                }
            }
        }
    };
    let socket_drops = sockets
        .iter()
        .map(|s| mcr_sys::sockopt::receive_drops(s.socket.as_fd()).map_or(0, u64::from))
        .sum();
    Ok(Outcome {
        active_s: t.active_s(),
        sockets: sockets.len(),
        counters: c,
        socket_drops,
        stopped_by,
    })
}
