//! `mcrgen send`: paced streams from one process, in batches.
//!
//! Packet `k` of the run is due at `start + k / rate`. With [`Pace::Batch`]
//! each wake-up sends every packet that is due (up to a batch at a time) in
//! one call, so the average rate holds even when the scheduler is late, and
//! bursts stay small when it is not. With [`Pace::Each`] every packet is
//! sent on its own, at its own due time, one call per packet: packets leave
//! spaced as an encoder or a software sender spaces them, never several in
//! one call. With [`Pace::Tick`] the sender wakes on a fixed 100 µs tick
//! (`start + j * 100 µs`) and hands over, in one call, every packet due by
//! that tick: rate/10,000 per tick (5 at 50k pps, 10 at 100k), as a
//! software sender with a pacing timer does. Streams take turns: packet `k`
//! belongs to stream `k mod S` and carries sequence number `k div S`.
//!
//! Two paths put packets on the wire ([`Via`]): the kernel's UDP sockets
//! (`sendmmsg` with a destination per packet; any destination, routed, both
//! families), or whole Ethernet frames built here and sent on an AF_PACKET
//! socket of the interface (`sendmmsg` too; IPv4 multicast or a neighbour
//! the kernel already knows). Frames skip the kernel's UDP/IP send path,
//! which is most of the cost per packet on this kind of machine; on the
//! wire they are the same UDP datagrams.

mod frames;
mod udp;

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mcr_sys::clock::{monotonic_ns, set_timer_slack_ns, sleep_until_ns};
use mcr_sys::mmsg::{MAX_BATCH, is_queue_full};

use crate::payload::{MAX_PAYLOAD, MIN_PAYLOAD};
use crate::report::{CpuBusy, SendReport};
use crate::units::as_ns;

/// How fast to send.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rate {
    /// Packets per second, all streams together.
    Total(f64),
    /// Packets per second for each stream.
    PerStream(f64),
    /// As fast as the machine goes.
    Max,
}

/// Which path puts packets on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// Frames when an interface is given and every destination is an IPv4
    /// group; UDP sockets otherwise.
    Auto,
    /// The kernel's UDP sockets.
    Udp,
    /// Ethernet frames on an AF_PACKET socket.
    Frames,
}

impl std::str::FromStr for Via {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Via::Auto),
            "udp" => Ok(Via::Udp),
            "frames" => Ok(Via::Frames),
            _ => Err(format!("`{s}`: write auto, udp or frames")),
        }
    }
}

/// How due packets are handed to the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pace {
    /// Every packet that is due, up to a batch, in one call.
    #[default]
    Batch,
    /// One packet per call, each at its own due time: when the sender is
    /// behind, packets still leave one by one, spaced by the cost of a send.
    Each,
    /// On a 100 µs tick, every packet due by the tick in one call
    /// ([`TICK_NS`]): small bursts of rate/10,000 packets, as a software
    /// sender with a pacing timer sends them.
    Tick,
}

/// The period of [`Pace::Tick`], in nanoseconds.
pub const TICK_NS: u64 = 100_000;

/// How many packets of the run are due `elapsed_ns` after its start at
/// `pps` packets per second (packet `k` at `k / pps`, so packet 0 at once)
/// with [`Pace::Tick`]: those due by the last tick at or before
/// `elapsed_ns`.
fn tick_due(elapsed_ns: u64, pps: f64) -> u64 {
    let tick = elapsed_ns / TICK_NS * TICK_NS;
    // The small excess keeps a packet due exactly on a tick on that tick
    // whatever the rounding (at 30k pps, 100 µs is 3.0 intervals, not
    // 2.9999...). Float-to-integer casts saturate.
    ((tick as f64 * pps / 1e9 + 1e-6) as u64).saturating_add(1)
}

/// When (ns after the start) the first tick comes at which more than
/// `sent` packets are due at `pps`: the tick at or after packet `sent`'s
/// due time.
fn tick_wake(sent: u64, pps: f64) -> u64 {
    let at = sent as f64 * 1e9 / pps;
    let mut j = (at / TICK_NS as f64).ceil() as u64;
    // Correct the rounding either way, so that the tick is exactly the
    // first one with the packet due.
    while j > 0 && tick_due((j - 1) * TICK_NS, pps) > sent {
        j -= 1;
    }
    while j < u64::MAX / TICK_NS && tick_due(j * TICK_NS, pps) <= sent {
        j += 1;
    }
    j.saturating_mul(TICK_NS)
}

impl std::str::FromStr for Pace {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "batch" => Ok(Pace::Batch),
            "each" => Ok(Pace::Each),
            "tick" => Ok(Pace::Tick),
            _ => Err(format!("`{s}`: write batch, each or tick")),
        }
    }
}

impl std::fmt::Display for Pace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Pace::Batch => "batch",
            Pace::Each => "each",
            Pace::Tick => "tick",
        })
    }
}

/// Everything `send` needs.
#[derive(Debug, Clone)]
pub struct SendConfig {
    /// Destinations, one per stream.
    pub streams: Vec<SocketAddr>,
    /// The id of the first stream; the others count up.
    pub first_id: u32,
    /// The interface to send on (multicast and unicast alike).
    pub interface: Option<String>,
    /// The source address.
    pub source: Option<IpAddr>,
    /// TTL (IPv4) or hop limit (IPv6).
    pub ttl: u32,
    /// UDP payload size in bytes (the datagram's, wrapping and all).
    pub payload_bytes: usize,
    /// How the test payload is carried (RTP, MPEG-TS).
    pub wrap: crate::wrap::Wrap,
    /// With RTP: the sequence number of each stream's packet 0 (it runs
    /// on from there and wraps at 2^16).
    pub rtp_start: u16,
    /// A second path for every packet (SMPTE ST 2022-7 style): the same
    /// bytes to other destinations, later.
    pub copy: Option<Copy>,
    /// How fast.
    pub rate: Rate,
    /// Packets per stream; `None` for no limit.
    pub count: Option<u64>,
    /// How long; `None` for no limit.
    pub duration: Option<Duration>,
    /// Pin the sending thread to this CPU.
    pub cpu: Option<usize>,
    /// Which path.
    pub via: Via,
    /// With the frames path: an 802.1Q tag with this VLAN id on every
    /// frame.
    pub vlan: Option<u16>,
    /// DSCP of every packet (0-63).
    pub dscp: u8,
    /// One packet per call, every due packet in one, or on a 100 µs tick.
    pub pace: Pace,
    /// CPUs whose busy time over the sending window (first send to last)
    /// the report gives.
    pub watch_cpus: Vec<usize>,
}

/// The second path of `--copy`: every packet, byte for byte the same
/// (sequence, send time, RTP timestamp), sent again to `streams[i]` for
/// stream `i`, `delay` after the original, from `interface`.
#[derive(Debug, Clone)]
pub struct Copy {
    /// One destination per stream.
    pub streams: Vec<SocketAddr>,
    /// The interface to send the copies on (the first path's if none).
    pub interface: Option<String>,
    /// How much later.
    pub delay: Duration,
}

/// Why `send` could not run.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// `--copy` names another number of destinations than `--streams`.
    #[error("--copy names {copies} destinations for {streams} streams: give one per stream")]
    CopyStreams {
        /// How many streams.
        streams: usize,
        /// How many copy destinations.
        copies: usize,
    },
    /// Payload size out of range.
    #[error("payload size {0} bytes is outside {MIN_PAYLOAD}-{MAX_PAYLOAD}")]
    Size(usize),
    /// Both families in one run.
    #[error("the streams mix IPv4 and IPv6 destinations; run one sender per family")]
    MixedFamilies,
    /// A rate that is not a positive number.
    #[error("rate {0} is not a positive number of packets per second")]
    Rate(f64),
    /// A TTL out of range.
    #[error("TTL {0} is outside 1-255")]
    Ttl(u32),
    /// A source address of the other family.
    #[error("source address {source_addr} is not of the streams' family")]
    SourceFamily {
        /// The address given.
        source_addr: IpAddr,
    },
    /// The frames path cannot serve this configuration.
    #[error("--via frames: {0}")]
    Frames(String),
    /// Setting up failed.
    #[error("{what}: {source}")]
    Setup {
        /// What was being set up.
        what: String,
        /// The OS error.
        source: io::Error,
    },
    /// The kernel has no route for a destination.
    #[error("no route to {destination}: give --interface, or add a route for it")]
    NoRoute {
        /// The destination.
        destination: SocketAddr,
    },
    /// A send failed for a reason other than a full buffer.
    #[error("sending to {destination}: {source}")]
    Send {
        /// The first destination of the failed batch.
        destination: SocketAddr,
        /// The OS error.
        source: io::Error,
    },
}

fn setup(what: impl Into<String>) -> impl FnOnce(io::Error) -> SendError {
    let what = what.into();
    move |source| SendError::Setup { what, source }
}

/// A way of putting the run's packets on the wire.
trait Transmit {
    /// Builds packets `first .. first + n` of the run, stamped with
    /// `now_ns`, and sends them, giving up early only when `stop` says so.
    fn send(&mut self, first: u64, n: usize, now_ns: u64, stop: &dyn Fn() -> bool) -> Result<Sent, SendError>;
    /// The path's name in the report.
    fn name(&self) -> &'static str;
}

/// What one call of [`Transmit::send`] achieved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Sent {
    /// Packets the kernel took.
    packets: usize,
    /// Sends refused for want of buffer, retried.
    retries: u64,
    /// Sends refused because of an ICMP error about an earlier packet,
    /// retried.
    icmp_errors: u64,
}

/// Which stream and sequence number packet `k` of the run carries.
fn stream_and_seq(k: u64, streams: usize) -> (usize, u64) {
    let s = streams as u64;
    ((k % s) as usize, k / s)
}

/// After this many ICMP errors in a row for one batch, the destination is
/// taken to be unreachable for good.
const MAX_ICMP_RETRIES: u64 = 10_000;

/// Sends `n` items with `attempt(offset)`, which sends from `offset` on and
/// returns how many it sent. A full queue below (ENOBUFS, EAGAIN) is waited
/// out and the same packets are sent again, so no sequence number is
/// skipped; so is an error the kernel reports for an earlier packet (with
/// `IP_RECVERR`, an ICMP port or host unreachable fails the next send, which
/// did not go out). Returns early, with what was sent, once `stop()` is true.
fn send_all(
    n: usize,
    stop: &dyn Fn() -> bool,
    mut attempt: impl FnMut(usize) -> io::Result<usize>,
) -> Result<Sent, (usize, io::Error)> {
    let mut r = Sent::default();
    let mut icmp_in_a_row = 0;
    while r.packets < n {
        match attempt(r.packets) {
            Ok(m) => {
                r.packets += m;
                icmp_in_a_row = 0;
            }
            Err(e) if is_queue_full(&e) => {
                r.retries += 1;
                sleep_until_ns(monotonic_ns().saturating_add(50_000));
            }
            Err(e)
                if matches!(e.raw_os_error(), Some(libc::ECONNREFUSED | libc::EHOSTUNREACH))
                    && icmp_in_a_row < MAX_ICMP_RETRIES =>
            {
                r.icmp_errors += 1;
                icmp_in_a_row += 1;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err((r.packets, e)),
        }
        if r.packets < n && stop() {
            break;
        }
    }
    Ok(r)
}

/// The error numbers `send_all` tells apart (Linux values).
fn validate(cfg: &SendConfig) -> Result<(bool, Option<f64>), SendError> {
    if !(MIN_PAYLOAD..=MAX_PAYLOAD).contains(&cfg.payload_bytes) {
        return Err(SendError::Size(cfg.payload_bytes));
    }
    if !(1..=255).contains(&cfg.ttl) {
        return Err(SendError::Ttl(cfg.ttl));
    }
    let ipv6 = cfg.streams.first().is_some_and(|a| a.is_ipv6());
    let copies = cfg.copy.iter().flat_map(|c| &c.streams);
    if cfg.streams.iter().chain(copies).any(|a| a.is_ipv6() != ipv6) {
        return Err(SendError::MixedFamilies);
    }
    if let Some(c) = cfg.copy.as_ref().filter(|c| c.streams.len() != cfg.streams.len()) {
        return Err(SendError::CopyStreams {
            streams: cfg.streams.len(),
            copies: c.streams.len(),
        });
    }
    if let Some(src) = cfg.source.filter(|s| s.is_ipv6() != ipv6) {
        return Err(SendError::SourceFamily { source_addr: src });
    }
    let pps = match cfg.rate {
        Rate::Total(r) => Some(r),
        Rate::PerStream(r) => Some(r * cfg.streams.len() as f64),
        Rate::Max => None,
    };
    if let Some(r) = pps.filter(|r| !(r.is_finite() && *r > 0.0)) {
        return Err(SendError::Rate(r));
    }
    Ok((ipv6, pps))
}

fn open_path(cfg: &SendConfig, ipv6: bool) -> Result<Box<dyn Transmit>, SendError> {
    let frames_fit = cfg.interface.is_some() && !ipv6 && cfg.streams.iter().all(|a| a.ip().is_multicast());
    if cfg.vlan.is_some() && (cfg.via == Via::Udp || (cfg.via == Via::Auto && !frames_fit)) {
        return Err(SendError::Frames(
            "--vlan tags frames, so it needs the frames path: an interface and IPv4 destinations".into(),
        ));
    }
    match cfg.via {
        Via::Udp => Ok(Box::new(udp::UdpPath::open(cfg, ipv6)?)),
        Via::Frames => Ok(Box::new(frames::FramePath::open(cfg)?)),
        Via::Auto if frames_fit => Ok(Box::new(frames::FramePath::open(cfg)?)),
        Via::Auto => Ok(Box::new(udp::UdpPath::open(cfg, ipv6)?)),
    }
}

/// Sends the configured streams until the count, the duration or `stop`
/// ends the run, and reports what was sent.
pub fn run(cfg: &SendConfig, stop: &AtomicBool) -> Result<SendReport, SendError> {
    let (ipv6, pps) = validate(cfg)?;
    let mut path = open_path(cfg, ipv6)?;
    let mut copy_path = match &cfg.copy {
        Some(c) => {
            let second = SendConfig {
                streams: c.streams.clone(),
                interface: c.interface.clone().or_else(|| cfg.interface.clone()),
                copy: None,
                ..cfg.clone()
            };
            Some((open_path(&second, ipv6)?, as_ns(c.delay)))
        }
        None => None,
    };
    // Batches sent on the first path, waiting to go on the second: when,
    // the first packet, how many, and the original send time.
    let mut copies: std::collections::VecDeque<(u64, u64, usize, u64)> = std::collections::VecDeque::new();
    let mut copies_sent: u64 = 0;
    // The least time between a packet and its copy leaving.
    let mut copy_lag_min: Option<u64> = None;
    if let Some(cpu) = cfg.cpu {
        mcr_sys::process::pin_current_thread(cpu).map_err(setup(format!("pin to CPU {cpu}")))?;
    }
    // Best effort: a coarser slack only makes bursts a little larger.
    let _ = set_timer_slack_ns(1);

    let streams = cfg.streams.len() as u64;
    let limit = cfg.count.map(|c| c.saturating_mul(streams));
    let interval_ns = pps.map(|r| 1e9 / r);
    let start = monotonic_ns();
    let deadline = cfg.duration.map(|d| start.saturating_add(as_ns(d)));
    let stopping = || stop.load(Ordering::Relaxed) || deadline.is_some_and(|d| monotonic_ns() >= d);
    let mut sent: u64 = 0;
    let mut retries: u64 = 0;
    let mut icmp_errors: u64 = 0;
    let mut first_send: Option<u64> = None;
    let mut last_send = start;
    let per_call = match cfg.pace {
        Pace::Batch | Pace::Tick => MAX_BATCH as u64,
        Pace::Each => 1,
    };
    let mut cpu_window: Option<CpuWindow> = None;
    let stopped_by = loop {
        if stop.load(Ordering::Relaxed) {
            break "signal";
        }
        let now = monotonic_ns();
        if let Some((second, _)) = &mut copy_path {
            let (n, lag) = send_copies(&mut copies, second.as_mut(), now, &stopping)?;
            copies_sent += n;
            copy_lag_min = copy_lag_min.into_iter().chain(lag).min();
        }
        if limit.is_some_and(|l| sent >= l) {
            match copies.front() {
                None => break "count",
                Some(&(due, ..)) => {
                    sleep_until_ns(due.min(now.saturating_add(100_000_000)));
                    continue;
                }
            }
        }
        if deadline.is_some_and(|d| now >= d) {
            break "duration";
        }
        let due = match (interval_ns, pps) {
            (Some(_), Some(r)) if cfg.pace == Pace::Tick => tick_due(now - start, r),
            // Float-to-integer casts saturate.
            (Some(iv), _) => (((now - start) as f64 / iv) as u64).saturating_add(1),
            _ => u64::MAX,
        };
        if due <= sent {
            let next = match pps {
                Some(r) if cfg.pace == Pace::Tick => start.saturating_add(tick_wake(sent, r)),
                _ => start.saturating_add((sent as f64 * interval_ns.unwrap_or(0.0)) as u64),
            };
            // Wake at least every 100 ms to notice a signal, and for a copy
            // that is due.
            let copy_due = copies.front().map_or(u64::MAX, |c| c.0);
            let wake = next.min(copy_due).min(now.saturating_add(100_000_000));
            sleep_until_ns(deadline.map_or(wake, |d| wake.min(d)));
            continue;
        }
        if cpu_window.is_none() {
            cpu_window = Some(CpuWindow::open(&cfg.watch_cpus));
        }
        let n = (due - sent).min(per_call).min(limit.map_or(u64::MAX, |l| l - sent)) as usize;
        let r = path.send(sent, n, now, &stopping)?;
        if let Some((_, delay)) = &copy_path {
            copies.push_back((now.saturating_add(*delay), sent, r.packets, now));
        }
        retries += r.retries;
        icmp_errors += r.icmp_errors;
        sent += r.packets as u64;
        last_send = monotonic_ns();
        first_send.get_or_insert(now);
    };
    let cpu_busy = cpu_window.map(CpuWindow::close).unwrap_or_default();
    let first = first_send.unwrap_or(start);
    let achieved_pps = if sent > 1 && last_send > first {
        (sent - 1) as f64 * 1e9 / (last_send - first) as f64
    } else {
        pps.unwrap_or(0.0)
    };
    Ok(SendReport {
        streams: cfg.streams.len(),
        payload_bytes: cfg.payload_bytes,
        path: path.name().to_string(),
        packets: sent,
        bytes: sent * cfg.payload_bytes as u64,
        duration_s: (last_send - start) as f64 / 1e9,
        target_pps: pps,
        achieved_pps,
        reached_target: pps.map(|t| achieved_pps >= 0.99 * t),
        retries,
        icmp_errors,
        stopped_by: stopped_by.to_string(),
        copies: copies_sent,
        copy_lag_min_ns: copy_lag_min,
        pace: cfg.pace.to_string(),
        cpu_busy,
    })
}

/// Sends the copies that are due at `now` on the second path; returns how
/// many packets went, and the least time since their originals left.
fn send_copies(
    queue: &mut std::collections::VecDeque<(u64, u64, usize, u64)>,
    second: &mut dyn Transmit,
    now: u64,
    stop: &dyn Fn() -> bool,
) -> Result<(u64, Option<u64>), SendError> {
    let mut sent = 0;
    let mut lag: Option<u64> = None;
    while let Some(&(due, first, n, at)) = queue.front() {
        if due > now {
            break;
        }
        queue.pop_front();
        lag = Some(lag.map_or(now - at, |l| l.min(now - at)));
        let mut off = 0;
        while off < n {
            let k = (n - off).min(MAX_BATCH);
            sent += second.send(first + off as u64, k, at, stop)?.packets as u64;
            off += k;
        }
    }
    Ok((sent, lag))
}

/// The idle time of some CPUs at the start of the sending window, to give
/// their busy time over it at the end.
struct CpuWindow {
    started: std::time::Instant,
    idle: Vec<(usize, Option<f64>)>,
}

impl CpuWindow {
    fn open(cpus: &[usize]) -> CpuWindow {
        CpuWindow {
            idle: cpus.iter().map(|&c| (c, crate::cpu::idle_s(c))).collect(),
            started: std::time::Instant::now(),
        }
    }

    fn close(self) -> Vec<CpuBusy> {
        let wall_s = self.started.elapsed().as_secs_f64();
        self.idle
            .into_iter()
            .filter_map(|(cpu, before)| {
                let idle = crate::cpu::idle_s(cpu)? - before?;
                Some(CpuBusy {
                    cpu,
                    wall_s,
                    busy_s: (wall_s - idle).max(0.0),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_take_turns_over_streams() {
        assert_eq!(stream_and_seq(0, 3), (0, 0));
        assert_eq!(stream_and_seq(4, 3), (1, 1));
        assert_eq!(stream_and_seq(8, 3), (2, 2));
        assert_eq!(stream_and_seq(7, 1), (0, 7));
    }

    #[test]
    fn a_full_queue_or_an_icmp_report_is_retried_and_nothing_skipped() {
        let mut calls = 0;
        let r = send_all(10, &|| false, |off| {
            calls += 1;
            match calls {
                1 => Ok(4),
                2 => Err(io::Error::from_raw_os_error(105)),
                3 => Err(io::Error::from_raw_os_error(111)),
                4 => Ok(10 - off),
                _ => unreachable!("all sent after four calls"),
            }
        });
        assert_eq!(
            r.expect("sent"),
            Sent {
                packets: 10,
                retries: 1,
                icmp_errors: 1
            }
        );
        let e = send_all(3, &|| false, |_| Err(io::Error::from_raw_os_error(1))).expect_err("EPERM is real");
        assert_eq!(e.0, 0);
    }

    #[test]
    fn a_queue_that_stays_full_gives_way_to_stop() {
        let r = send_all(5, &|| true, |_| Err(io::Error::from_raw_os_error(105))).expect("stopped");
        assert_eq!((r.packets, r.retries), (0, 1));
    }

    /// Simulates a sender on time at every tick over `ticks` ticks: the
    /// packets each tick hands over.
    fn tick_bursts(pps: f64, ticks: u64) -> Vec<u64> {
        let mut sent = 0;
        let mut out = Vec::new();
        let mut now = 0;
        while now <= ticks * TICK_NS {
            let due = tick_due(now, pps);
            if due > sent {
                out.push(due - sent);
                sent = due;
            }
            let wake = tick_wake(sent, pps);
            assert!(wake > now, "{pps} pps: the next wake-up {wake} is not after {now}");
            assert_eq!(wake % TICK_NS, 0, "{pps} pps: wakes on a tick");
            now = wake;
        }
        out
    }

    #[test]
    fn a_tick_hands_over_rate_over_10000_packets() {
        // Packet 0 at the start, then rate/10,000 on every tick.
        for (pps, per_tick) in [(50_000.0, 5), (100_000.0, 10), (200_000.0, 20), (10_000.0, 1)] {
            let b = tick_bursts(pps, 1000);
            assert_eq!(b[0], 1, "{pps}");
            assert!(b[1..].iter().all(|&n| n == per_tick), "{pps}: {:?}", &b[..10]);
            assert_eq!(b.len(), 1001, "{pps}: one call per tick");
        }
    }

    #[test]
    fn ticks_keep_the_exact_rate_at_any_rate() {
        // 15k: 1 and 2 in turn; 30k: 3 on a tick that is exactly 3
        // intervals; 1k: one packet on every tenth tick, never an empty
        // call; 33,333.3: no drift.
        for pps in [15_000.0, 30_000.0, 1_000.0, 33_333.3, 123_456.0] {
            let ticks = 10_000;
            let b = tick_bursts(pps, ticks);
            let total: u64 = b.iter().sum();
            let expect = (ticks * TICK_NS) as f64 * pps / 1e9 + 1.0;
            assert!((total as f64 - expect).abs() <= 1.0, "{pps}: {total} vs {expect}");
            assert!(b.iter().all(|&n| n >= 1), "{pps}");
            let per = pps / 10_000.0;
            assert!(b[1..].iter().all(|&n| n as f64 <= per.ceil()), "{pps}");
        }
        assert_eq!(&tick_bursts(15_000.0, 4)[1..], &[1, 2, 1, 2]);
        assert_eq!(&tick_bursts(30_000.0, 3)[1..], &[3, 3, 3]);
        assert_eq!(tick_wake(1, 1_000.0), 1_000_000);
    }

    #[test]
    fn tick_is_a_pace() {
        assert_eq!("tick".parse::<Pace>(), Ok(Pace::Tick));
        assert_eq!(Pace::Tick.to_string(), "tick");
    }

    fn cfg() -> SendConfig {
        SendConfig {
            streams: vec!["239.1.1.1:5001".parse().expect("literal")],
            first_id: 0,
            interface: None,
            source: None,
            ttl: 16,
            payload_bytes: 1024,
            wrap: crate::wrap::Wrap::Plain,
            rtp_start: 0,
            copy: None,
            rate: Rate::Total(1000.0),
            count: Some(1),
            duration: None,
            cpu: None,
            via: Via::Auto,
            vlan: None,
            dscp: 0,
            pace: Pace::Batch,
            watch_cpus: Vec::new(),
        }
    }

    #[test]
    fn bad_settings_are_refused_with_their_value() {
        let mut c = cfg();
        c.payload_bytes = 10;
        assert!(validate(&c).expect_err("size").to_string().contains("10 bytes"));
        let mut c = cfg();
        c.ttl = 300;
        assert!(validate(&c).expect_err("ttl").to_string().contains("300"));
        let mut c = cfg();
        c.streams.push("[ff3e::1]:5001".parse().expect("literal"));
        assert!(matches!(validate(&c), Err(SendError::MixedFamilies)));
        let mut c = cfg();
        c.source = Some("::1".parse().expect("literal"));
        assert!(matches!(validate(&c), Err(SendError::SourceFamily { .. })));
        let mut c = cfg();
        c.rate = Rate::PerStream(-1.0);
        assert!(matches!(validate(&c), Err(SendError::Rate(_))));
    }
}
