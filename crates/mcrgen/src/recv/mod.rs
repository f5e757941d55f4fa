//! `mcrgen recv`: join any number of groups and account for every packet.
//!
//! Two ways in ([`RecvVia`]): through UDP sockets, as an application
//! receives ([`sockets`]), or from an AF_PACKET ring on the interface
//! ([`ring`]), which costs the receiving host far less per packet and also
//! checks each frame's IP and UDP checksums as they were on the wire.

mod ring;
mod sockets;

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mcr_sys::clock::monotonic_ns;

use crate::histogram::Histogram;
use crate::payload::{self, Check};
use crate::report::{RecvReport, StreamStats};
use crate::tracker::{Arrival, SeqTracker};
use crate::units::as_ns;
use mcr_core::health::Carries;

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

/// How packets are taken in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvVia {
    /// UDP sockets, as an application receives.
    Sockets,
    /// An AF_PACKET ring on the interface.
    Ring,
}

impl std::str::FromStr for RecvVia {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sockets" => Ok(RecvVia::Sockets),
            "ring" => Ok(RecvVia::Ring),
            _ => Err(format!("`{s}`: write sockets or ring")),
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
    /// Packets of this stream id are passed over (counted as `ignored`).
    pub ignore_id: Option<u32>,
    /// Pin the receiving thread to this CPU.
    pub cpu: Option<usize>,
    /// Through sockets or from a ring.
    pub via: RecvVia,
    /// How the test payload is carried (RTP, MPEG-TS): unwrapped, and
    /// those layers checked, before the payload is.
    pub wrap: crate::wrap::Wrap,
    /// From a ring: take only frames tagged with this 802.1Q VLAN id
    /// (untagged frames only, if none).
    pub vlan: Option<u16>,
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
        None if source.raw_os_error() == Some(libc::ENODEV) => {
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

/// The per-socket join limit shows as ENOBUFS (IPv4) or ENOMEM (option
/// memory, IPv6).
fn is_limit(e: &io::Error) -> bool {
    mcr_sys::mmsg::is_queue_full(e) || e.kind() == io::ErrorKind::OutOfMemory
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
    /// The DSCP values seen (a bit each), from a ring.
    dscp_seen: u64,
    /// The RTP and MPEG-TS checks, with a wrapping.
    health: Option<mcr_core::health::InputHealth>,
}

/// The accounting of every destination.
struct Counters {
    dests: Vec<Dest>,
    index: HashMap<SocketAddr, usize>,
    stray: u64,
    /// Frames with a wrong IP or UDP checksum or length (ring only).
    bad_frames: u64,
    /// Frames of another VLAN than the one asked for (ring only).
    other_vlan: u64,
    /// Packets of the stream id passed over, and that id.
    ignored: u64,
    ignore_id: Option<u32>,
    expect: Option<u64>,
    complete: usize,
    wrap: crate::wrap::Wrap,
    /// Where an MPEG-TS payload is gathered.
    scratch: Vec<u8>,
}

impl Counters {
    fn new(cfg: &RecvConfig) -> Counters {
        let ids = |i: usize| match cfg.ids {
            IdPolicy::CountUp(first) => Some(first.wrapping_add(i as u32)),
            IdPolicy::Same(id) => Some(id),
            IdPolicy::Any => None,
        };
        Counters {
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
                    dscp_seen: 0,
                    health: matches!(
                        cfg.wrap,
                        crate::wrap::Wrap::Rtp | crate::wrap::Wrap::Ts | crate::wrap::Wrap::RtpTs
                    )
                    .then(mcr_core::health::InputHealth::default),
                })
                .collect(),
            index: cfg.streams.iter().enumerate().map(|(i, a)| (*a, i)).collect(),
            stray: 0,
            bad_frames: 0,
            other_vlan: 0,
            ignored: 0,
            ignore_id: cfg.ignore_id,
            expect: cfg.expect,
            complete: 0,
            wrap: cfg.wrap,
            scratch: Vec::new(),
        }
    }

    /// Accounts for one payload for `dst` (`None` when the destination is
    /// unknown) that reached the receiving interface at `at` (the kernel's
    /// receive timestamp on the monotonic clock; the time it was read if
    /// the kernel gave none); `truncated` if it was cut. `dscp` is the
    /// DSCP it arrived with, when known (from a ring).
    fn handle(&mut self, dst: Option<SocketAddr>, data: &[u8], truncated: bool, at: u64, dscp: Option<u8>) {
        let Some(i) = dst.and_then(|a| self.index.get(&a).copied()) else {
            self.stray += 1;
            return;
        };
        if let Some(id) = self.ignore_id
            && !truncated
            && crate::wrap::test_payload_id(data).is_some_and(|(stream, _)| stream == id)
        {
            self.ignored += 1;
            return;
        }
        let d = &mut self.dests[i];
        if let Some(v) = dscp {
            d.dscp_seen |= 1u64 << (v & 63);
        }
        if let Some(h) = &mut d.health
            && !truncated
        {
            h.observe(data, at);
        }
        // Bytes count the UDP payload as it arrived, wrapping and all.
        let len = data.len() as u64;
        let Some(data) = self.wrap.unwrap(data, &mut self.scratch) else {
            d.unrecognized += 1;
            return;
        };
        let (header, damaged) = match payload::check(data) {
            _ if truncated => {
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
        d.bytes += len;
        if matches!(arrival, Arrival::InOrder | Arrival::Reordered) {
            d.latency.record(at.saturating_sub(header.send_ns));
        }
        if self.expect.is_some_and(|n| before < n && d.tracker.unique() >= n) {
            self.complete += 1;
        }
    }
}

/// When to stop: the clock of a run and its stop conditions.
struct Timing {
    start: u64,
    first: Option<u64>,
    last: u64,
    complete_at: Option<u64>,
}

impl Timing {
    fn new() -> Timing {
        let start = monotonic_ns();
        Timing {
            start,
            first: None,
            last: start,
            complete_at: None,
        }
    }

    /// Packets arrived at `now`.
    fn arrived(&mut self, now: u64) {
        self.first.get_or_insert(now);
        self.last = now;
    }

    /// Why to stop now, if it is time.
    fn stop_reason(&mut self, cfg: &RecvConfig, stop: &AtomicBool, c: &Counters) -> Option<&'static str> {
        let now = monotonic_ns();
        if self.complete_at.is_none() && cfg.expect.is_some() && c.complete == c.dests.len() {
            self.complete_at = Some(now);
        }
        if stop.load(Ordering::Relaxed) {
            return Some("signal");
        }
        if cfg.duration.is_some_and(|d| now - self.start >= as_ns(d)) {
            return Some("duration");
        }
        if self.complete_at.is_some_and(|t| now - t >= as_ns(cfg.linger)) {
            return Some("expected count");
        }
        match self.first {
            Some(_) if now - self.last >= as_ns(cfg.idle_timeout) => Some("idle timeout"),
            None if now - self.start >= as_ns(cfg.first_packet_timeout) => Some("nothing arrived"),
            _ => None,
        }
    }

    fn active_s(&self) -> f64 {
        self.first.map_or(0.0, |f| (self.last - f) as f64 / 1e9)
    }
}

/// What a receive loop hands back for the report.
struct Outcome {
    counters: Counters,
    sockets: usize,
    socket_drops: u64,
    active_s: f64,
    stopped_by: &'static str,
}

/// Joins, signals readiness through `ready`, receives until a stop
/// condition, and reports.
pub fn run(cfg: &RecvConfig, stop: &AtomicBool, ready: impl FnOnce(&str)) -> Result<RecvReport, RecvError> {
    mcr_sys::process::raise_fd_limit().map_err(setup("raise the open-file limit"))?;
    if let Some(cpu) = cfg.cpu {
        mcr_sys::process::pin_current_thread(cpu).map_err(setup(format!("pin to CPU {cpu}")))?;
    }
    let out = match cfg.via {
        RecvVia::Sockets => sockets::run(cfg, stop, ready)?,
        RecvVia::Ring => ring::run(cfg, stop, ready)?,
    };
    Ok(report(cfg, &out))
}

fn report(cfg: &RecvConfig, o: &Outcome) -> RecvReport {
    let c = &o.counters;
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
                holes: d.tracker.holes().to_vec(),
                highest_seq: d.tracker.highest(),
                latency: d.latency.summary(),
                dscp: (0..64u8).filter(|v| d.dscp_seen & (1u64 << v) != 0).collect(),
                health: d.health.as_ref().map(|h| crate::report::WireHealth {
                    rtp: matches!(h.carries, Carries::Rtp | Carries::RtpTs).then(|| h.rtp.counts()),
                    ts: matches!(h.carries, Carries::Ts | Carries::RtpTs).then(|| h.ts.counts()),
                }),
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
    if c.stray > 0 {
        problems.push(format!("{} packets to destinations not asked for", c.stray));
    }
    if c.bad_frames > 0 {
        problems.push(format!(
            "{} frames with a wrong IP or UDP checksum or length",
            c.bad_frames
        ));
    }
    if o.socket_drops > 0 {
        problems.push(format!(
            "{} packets dropped by this receiver's full buffers (raise --rcvbuf)",
            o.socket_drops
        ));
    }
    RecvReport {
        interface: cfg.interface.clone(),
        streams,
        total,
        sockets: o.sockets,
        socket_drops: o.socket_drops,
        stray: c.stray,
        bad_frames: c.bad_frames,
        other_vlan: c.other_vlan,
        ignored: c.ignored,
        active_s: o.active_s,
        stopped_by: o.stopped_by.to_string(),
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
