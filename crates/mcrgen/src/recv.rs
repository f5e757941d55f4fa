//! `mcrgen recv`: join any number of groups and account for every packet.
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
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mcr_sys::clock::monotonic_ns;
use mcr_sys::epoll::Epoll;
use mcr_sys::mmsg::{MAX_BATCH, RecvBatch, RecvMeta};
use socket2::{Domain, InterfaceIndexOrAddress, Protocol, Socket, Type};

use crate::histogram::Histogram;
use crate::payload::{self, Check};
use crate::report::{RecvReport, StreamStats};
use crate::tracker::{Arrival, SeqTracker};
use crate::units::as_ns;

/// Which stream id each destination must carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdPolicy {
    /// Destination `i` carries stream `first + i` (the default, from 0).
    CountUp(u32),
    /// Every destination carries the same stream (fan-out of one input).
    Same(u32),
    /// Each destination keeps the id of the first packet it gets.
    Any,
}

impl std::str::FromStr for IdPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}`: write N+ (ids count up from N), N (all the same id) or any");
        match s {
            "any" => Ok(IdPolicy::Any),
            _ => match s.strip_suffix('+') {
                Some(n) => n.parse().map(IdPolicy::CountUp).map_err(|_| bad()),
                None => s.parse().map(IdPolicy::Same).map_err(|_| bad()),
            },
        }
    }
}

/// Everything `recv` needs.
#[derive(Debug, Clone)]
pub struct RecvConfig {
    /// Destinations to listen to: multicast groups are joined, unicast
    /// addresses just received.
    pub streams: Vec<SocketAddr>,
    /// Which stream id each destination must carry.
    pub ids: IdPolicy,
    /// The interface to join on.
    pub interface: Option<String>,
    /// Packets each stream must deliver; stop once all have (after
    /// `linger`).
    pub expect: Option<u64>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Stop when nothing arrived for this long after the first packet.
    pub idle_timeout: Duration,
    /// Stop when no packet at all arrived for this long.
    pub first_packet_timeout: Duration,
    /// With `expect`: keep listening this long after the last stream is
    /// complete, to catch late duplicates.
    pub linger: Duration,
    /// Receive buffer per socket, in bytes.
    pub recv_buffer_bytes: usize,
    /// How many recent sequence numbers each stream remembers.
    pub window: u64,
    /// Count loss from the first packet each stream delivers, not from 0
    /// (for a receiver that starts after the sender).
    pub late_join: bool,
    /// Pin the receiving thread to this CPU.
    pub cpu: Option<usize>,
}

/// Why `recv` could not run.
#[derive(Debug, thiserror::Error)]
pub enum RecvError {
    /// Setting up a socket failed.
    #[error("{what}: {source}")]
    Setup {
        /// What was being set up.
        what: String,
        /// The OS error.
        source: io::Error,
    },
    /// A group could not be joined even on a fresh socket.
    #[error("joining {group} on {interface}: {source}")]
    Join {
        /// The group.
        group: IpAddr,
        /// The interface, or `the default interface`.
        interface: String,
        /// The OS error.
        source: io::Error,
    },
    /// Receiving failed.
    #[error("receiving: {0}")]
    Recv(io::Error),
}

fn setup(what: impl Into<String>) -> impl FnOnce(io::Error) -> RecvError {
    let what = what.into();
    move |source| RecvError::Setup { what, source }
}

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

/// What to do about a permission error.
fn privilege_hint(e: &io::Error) -> &'static str {
    if e.kind() == io::ErrorKind::PermissionDenied {
        " (needs root or CAP_NET_RAW)"
    } else {
        ""
    }
}

fn join_error(cfg: &RecvConfig, group: IpAddr, source: io::Error) -> RecvError {
    let interface = match &cfg.interface {
        Some(i) => i.clone(),
        None if source.raw_os_error() == Some(19) => {
            "the default interface (there is no route for it: give --interface)".into()
        }
        None => "the default interface".into(),
    };
    RecvError::Join {
        group,
        interface,
        source,
    }
}

fn join(s: &Sock, group: IpAddr, ifindex: u32) -> io::Result<()> {
    match group {
        IpAddr::V4(g) => s
            .socket
            .join_multicast_v4_n(&g, &InterfaceIndexOrAddress::Index(ifindex)),
        IpAddr::V6(g) => s.socket.join_multicast_v6(&g, ifindex),
    }
}

/// The per-socket join limit shows as ENOBUFS (IPv4) or ENOMEM (option
/// memory, IPv6).
fn is_limit(e: &io::Error) -> bool {
    mcr_sys::mmsg::is_queue_full(e) || e.kind() == io::ErrorKind::OutOfMemory
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

/// What one destination has received.
struct Dest {
    expected_id: Option<u32>,
    tracker: SeqTracker,
    latency: Histogram,
    corrupted: u64,
    wrong_stream: u64,
    unrecognized: u64,
    bytes: u64,
}

struct Counters {
    dests: Vec<Dest>,
    index: HashMap<SocketAddr, usize>,
    stray: u64,
    expect: Option<u64>,
    complete: usize,
}

impl Counters {
    fn handle(&mut self, data: &[u8], meta: &RecvMeta, port: u16, now: u64) {
        let Some(i) = meta
            .destination
            .and_then(|ip| self.index.get(&SocketAddr::new(ip, port)).copied())
        else {
            self.stray += 1;
            return;
        };
        let d = &mut self.dests[i];
        let (header, damaged) = match payload::check(data) {
            _ if meta.truncated => {
                d.corrupted += 1;
                return;
            }
            Check::Intact(h) => (h, false),
            Check::Damaged(h) => (h, true),
            Check::BadHeader => {
                d.corrupted += 1;
                return;
            }
            Check::Unrecognized => {
                d.unrecognized += 1;
                return;
            }
        };
        match d.expected_id {
            Some(id) if id != header.stream => {
                d.wrong_stream += 1;
                return;
            }
            Some(_) => {}
            None => d.expected_id = Some(header.stream),
        }
        let before = d.tracker.unique();
        let arrival = d.tracker.record(header.seq);
        if damaged {
            d.corrupted += 1;
        }
        d.bytes += data.len() as u64;
        if matches!(arrival, Arrival::InOrder | Arrival::Reordered) {
            d.latency.record(now.saturating_sub(header.send_ns));
        }
        if self.expect.is_some_and(|n| before < n && d.tracker.unique() >= n) {
            self.complete += 1;
        }
    }
}

/// Joins, signals readiness through `ready`, receives until a stop
/// condition, and reports.
pub fn run(cfg: &RecvConfig, stop: &AtomicBool, ready: impl FnOnce(&str)) -> Result<RecvReport, RecvError> {
    mcr_sys::process::raise_fd_limit().map_err(setup("raise the open-file limit"))?;
    if let Some(cpu) = cfg.cpu {
        mcr_sys::process::pin_current_thread(cpu).map_err(setup(format!("pin to CPU {cpu}")))?;
    }
    let sockets = open_all(cfg)?;
    let mut epoll = Epoll::new(sockets.len().min(1024)).map_err(setup("epoll"))?;
    for (i, s) in sockets.iter().enumerate() {
        epoll
            .add_readable(s.socket.as_fd(), i as u64)
            .map_err(setup("epoll_ctl"))?;
    }
    let ids = |i: usize| match cfg.ids {
        IdPolicy::CountUp(first) => Some(first.wrapping_add(i as u32)),
        IdPolicy::Same(id) => Some(id),
        IdPolicy::Any => None,
    };
    let mut c = Counters {
        dests: (0..cfg.streams.len())
            .map(|i| Dest {
                expected_id: ids(i),
                tracker: if cfg.late_join {
                    SeqTracker::late_join(cfg.window)
                } else {
                    SeqTracker::new(cfg.window)
                },
                latency: Histogram::default(),
                corrupted: 0,
                wrong_stream: 0,
                unrecognized: 0,
                bytes: 0,
            })
            .collect(),
        index: cfg.streams.iter().enumerate().map(|(i, a)| (*a, i)).collect(),
        stray: 0,
        expect: cfg.expect,
        complete: 0,
    };
    ready(&format!(
        "ready: {} streams on {} sockets{}",
        cfg.streams.len(),
        sockets.len(),
        cfg.interface.as_ref().map(|i| format!(" on {i}")).unwrap_or_default()
    ));

    let mut batch = RecvBatch::new(MAX_BATCH, payload::MAX_PAYLOAD + 64);
    let start = monotonic_ns();
    let (mut first, mut last): (Option<u64>, u64) = (None, start);
    let mut complete_at: Option<u64> = None;
    let ns = as_ns;
    let stopped_by = loop {
        let now = monotonic_ns();
        if stop.load(Ordering::Relaxed) {
            break "signal";
        }
        if cfg.duration.is_some_and(|d| now - start >= ns(d)) {
            break "duration";
        }
        if complete_at.is_some_and(|t| now - t >= ns(cfg.linger)) {
            break "expected count";
        }
        match first {
            Some(_) if now - last >= ns(cfg.idle_timeout) => break "idle timeout",
            None if now - start >= ns(cfg.first_packet_timeout) => break "nothing arrived",
            _ => {}
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
                first.get_or_insert(now);
                last = now;
                for i in 0..n {
                    let (data, meta) = batch.get(i);
                    c.handle(data, meta, s.port, now);
                }
                if n < MAX_BATCH {
                    break;
                }
            }
        }
        if complete_at.is_none() && cfg.expect.is_some() && c.complete == c.dests.len() {
            complete_at = Some(monotonic_ns());
        }
    };
    Ok(report(
        cfg,
        &c,
        &sockets,
        first.map_or(0.0, |f| (last - f) as f64 / 1e9),
        stopped_by,
    ))
}

fn report(cfg: &RecvConfig, c: &Counters, sockets: &[Sock], active_s: f64, stopped_by: &str) -> RecvReport {
    let mut total = StreamStats {
        destination: "total".into(),
        ..Default::default()
    };
    let mut all_latency = Histogram::default();
    let mut problems = Vec::new();
    let streams: Vec<StreamStats> = cfg
        .streams
        .iter()
        .zip(&c.dests)
        .map(|(addr, d)| {
            let s = StreamStats {
                destination: addr.to_string(),
                stream_id: d.expected_id,
                received: d.tracker.received(),
                unique: d.tracker.unique(),
                lost: d.tracker.lost(cfg.expect),
                duplicated: d.tracker.duplicated(),
                reordered: d.tracker.reordered(),
                too_late: d.tracker.too_late(),
                corrupted: d.corrupted,
                wrong_stream: d.wrong_stream,
                unrecognized: d.unrecognized,
                bytes: d.bytes,
                highest_seq: d.tracker.highest(),
                latency: d.latency.summary(),
            };
            total.add_counts(&s);
            all_latency.merge(&d.latency);
            for p in s.problems(cfg.expect) {
                problems.push(format!("{addr}: {p}"));
            }
            s
        })
        .collect();
    total.latency = all_latency.summary();
    total.highest_seq = streams.iter().filter_map(|s| s.highest_seq).max();
    let socket_drops: u64 = sockets
        .iter()
        .map(|s| mcr_sys::sockopt::receive_drops(s.socket.as_fd()).map_or(0, u64::from))
        .sum();
    if c.stray > 0 {
        problems.push(format!("{} packets to destinations not asked for", c.stray));
    }
    if socket_drops > 0 {
        problems.push(format!(
            "{socket_drops} packets dropped by this receiver's full socket buffers (raise --rcvbuf)"
        ));
    }
    RecvReport {
        interface: cfg.interface.clone(),
        streams,
        total,
        sockets: sockets.len(),
        socket_drops,
        stray: c.stray,
        active_s,
        stopped_by: stopped_by.to_string(),
        expect: cfg.expect,
        problems,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_policies_parse() {
        assert_eq!("0+".parse(), Ok(IdPolicy::CountUp(0)));
        assert_eq!("7+".parse(), Ok(IdPolicy::CountUp(7)));
        assert_eq!("7".parse(), Ok(IdPolicy::Same(7)));
        assert_eq!("any".parse(), Ok(IdPolicy::Any));
        assert!("x".parse::<IdPolicy>().expect_err("bad").contains("N+"));
    }
}
