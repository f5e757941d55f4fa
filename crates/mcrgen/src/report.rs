//! What `send` and `recv` report, as JSON for programs and tables for people.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::histogram::Summary;

/// The accounting of one received stream (or the total of all).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamStats {
    /// Destination address and port, or `total`.
    pub destination: String,
    /// The stream id this destination carries (expected, or the first seen).
    pub stream_id: Option<u32>,
    /// Every packet that arrived, duplicates included.
    pub received: u64,
    /// Distinct sequence numbers.
    pub unique: u64,
    /// Sequence numbers that never arrived.
    pub lost: u64,
    /// Arrivals of a sequence number already seen.
    pub duplicated: u64,
    /// First arrivals after a higher sequence number.
    pub reordered: u64,
    /// Arrivals too far behind the newest to judge (see `tracker`).
    pub too_late: u64,
    /// Payloads whose bytes, length or header were not as sent.
    pub corrupted: u64,
    /// Packets of another stream id at this destination.
    pub wrong_stream: u64,
    /// Payloads that were not made by `mcrgen send`.
    pub unrecognized: u64,
    /// Payload bytes received.
    pub bytes: u64,
    /// Where the sequence skipped ahead: (first number skipped, how many),
    /// in order, the first 1,024 (see `tracker`); with nothing reordered,
    /// exactly what was lost before the highest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holes: Vec<(u64, u64)>,
    /// The highest sequence number seen.
    pub highest_seq: Option<u64>,
    /// One-way latency from the send time in the header to the arrival at
    /// the receiving interface (the kernel's receive timestamp).
    pub latency: Option<Summary>,
    /// The DSCP values the packets arrived with (from a ring; empty
    /// through sockets).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dscp: Vec<u8>,
    /// With `--wrap`: what the RTP and MPEG-TS layers showed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<WireHealth>,
}

/// The RTP and MPEG-TS checks of one stream (`mcr_core::health`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireHealth {
    /// RTP sequence and jitter, when the stream is RTP.
    pub rtp: Option<mcr_core::health::RtpCounts>,
    /// The TR 101 290 first-priority checks, when it carries MPEG-TS.
    pub ts: Option<mcr_core::health::TsCounts>,
}

impl WireHealth {
    /// One line: what each layer counted.
    pub fn line(&self) -> String {
        let mut parts = Vec::new();
        if let Some(r) = self.rtp {
            parts.push(format!(
                "rtp {} packets, {} lost, {} late, {} duplicated, {} restarts, jitter {} µs",
                r.packets,
                r.lost,
                r.late,
                r.duplicates,
                r.restarts,
                r.jitter_ns / 1000
            ));
        }
        if let Some(t) = self.ts {
            parts.push(format!(
                "ts {} packets, {} continuity errors, {} sync byte errors, {} sync losses, {} PAT errors",
                t.packets, t.continuity_errors, t.sync_byte_errors, t.sync_losses, t.pat_errors
            ));
        }
        parts.join("; ")
    }
}

impl StreamStats {
    /// What keeps this stream from being exactly `expect` packets, each
    /// once, in order and intact (all faults if `expect` is `None`).
    pub fn problems(&self, expect: Option<u64>) -> Vec<String> {
        let mut p = Vec::new();
        let mut add = |n: u64, what: &str| {
            if n > 0 {
                p.push(format!("{n} {what}"));
            }
        };
        add(self.lost, "lost");
        add(self.duplicated, "duplicated");
        add(self.reordered, "reordered");
        add(self.too_late, "too late to judge");
        add(self.corrupted, "corrupted");
        add(self.wrong_stream, "of another stream");
        add(
            self.unrecognized,
            "not mcrgen payloads (or carried otherwise than --wrap says)",
        );
        if let Some(t) = self.health.and_then(|h| h.ts) {
            add(t.continuity_errors, "MPEG-TS continuity errors");
            add(t.sync_byte_errors, "MPEG-TS sync byte errors");
        }
        if let Some(n) = expect {
            if self.received != n && self.lost == 0 && self.duplicated == 0 {
                p.push(format!("{} received, expected {n}", self.received));
            }
            if let Some(h) = self.highest_seq.filter(|&h| h >= n) {
                p.push(format!("sequence numbers up to {h}, expected below {n}"));
            }
        }
        p
    }

    /// Adds another stream's counts to this one (latency is merged by the
    /// caller, which holds the histograms).
    pub fn add_counts(&mut self, o: &StreamStats) {
        self.received += o.received;
        self.unique += o.unique;
        self.lost += o.lost;
        self.duplicated += o.duplicated;
        self.reordered += o.reordered;
        self.too_late += o.too_late;
        self.corrupted += o.corrupted;
        self.wrong_stream += o.wrong_stream;
        self.unrecognized += o.unrecognized;
        self.bytes += o.bytes;
    }
}

/// What `mcrgen recv` saw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecvReport {
    /// The interface joined on, if one was named.
    pub interface: Option<String>,
    /// One entry per destination asked for, in the order given.
    pub streams: Vec<StreamStats>,
    /// The sums over all streams, with latency over all packets.
    pub total: StreamStats,
    /// How many sockets carried the joins.
    pub sockets: usize,
    /// Datagrams the kernel dropped because a socket's buffer was full
    /// (`SO_MEMINFO`): lost at this receiver, not on the way.
    pub socket_drops: u64,
    /// Packets to a destination that was not asked for.
    pub stray: u64,
    /// Frames with a wrong IP or UDP checksum or length (`--via ring`,
    /// which sees frames as they were on the wire).
    #[serde(default)]
    pub bad_frames: u64,
    /// Frames of another VLAN than the one asked for (`--via ring`).
    #[serde(default)]
    pub other_vlan: u64,
    /// Packets of the stream id `--ignore-id` names, passed over.
    #[serde(default)]
    pub ignored: u64,
    /// From the first packet to the last, in seconds.
    pub active_s: f64,
    /// Why it stopped: `expected count`, `idle timeout`, `duration`,
    /// `signal`, or `nothing arrived`.
    pub stopped_by: String,
    /// The count each stream was expected to deliver (`--expect`).
    pub expect: Option<u64>,
    /// Every reason the run is not clean; empty when it is.
    pub problems: Vec<String>,
}

/// What `mcrgen send` did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SendReport {
    /// How many streams.
    pub streams: usize,
    /// Payload size in bytes.
    pub payload_bytes: usize,
    /// How packets went out: `udp` (kernel sockets) or `frames` (AF_PACKET).
    pub path: String,
    /// Packets sent, all streams together.
    pub packets: u64,
    /// Payload bytes sent.
    pub bytes: u64,
    /// Wall time from start to the last send, in seconds.
    pub duration_s: f64,
    /// The rate asked for, all streams together; `None` for as fast as
    /// possible.
    pub target_pps: Option<f64>,
    /// The rate achieved between the first and the last send.
    pub achieved_pps: f64,
    /// Whether the achieved rate is within 1 % of the target (or above).
    pub reached_target: Option<bool>,
    /// Sends the kernel refused for lack of buffer (ENOBUFS/EAGAIN) and that
    /// were retried; no packet was skipped.
    pub retries: u64,
    /// Sends refused because of an ICMP error for an earlier packet (a
    /// unicast host or port that was unreachable), retried.
    pub icmp_errors: u64,
    /// Why it stopped: `count`, `duration` or `signal`.
    pub stopped_by: String,
    /// Packets sent again on the second path (`--copy`).
    #[serde(default)]
    pub copies: u64,
    /// The least time between a packet and its copy leaving, in ns (on
    /// the sender's clock: what `--copy-delay` came to).
    #[serde(default)]
    pub copy_lag_min_ns: Option<u64>,
    /// How due packets were handed to the kernel: `batch` or `each`.
    #[serde(default)]
    pub pace: String,
    /// The busy time of each CPU asked for (`--watch-cpu`) over the sending
    /// window, from just before the first send to just after the last.
    #[serde(default)]
    pub cpu_busy: Vec<CpuBusy>,
}

/// One CPU's busy time over a window: wall time minus its idle and iowait
/// time (`/proc/stat`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CpuBusy {
    /// The CPU.
    pub cpu: usize,
    /// The window's wall time, seconds.
    pub wall_s: f64,
    /// Its busy time in that window, seconds.
    pub busy_s: f64,
}

/// Formats nanoseconds for people: `850ns`, `12.3µs`, `4.56ms`, `1.20s`.
pub fn human_ns(ns: u64) -> String {
    match ns {
        0..1_000 => format!("{ns}ns"),
        1_000..1_000_000 => format!("{:.1}µs", ns as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.2}ms", ns as f64 / 1e6),
        _ => format!("{:.2}s", ns as f64 / 1e9),
    }
}

impl RecvReport {
    /// The human-readable table. With `all_streams` false, only streams with
    /// a problem are listed (plus the total) when there are more than 20.
    pub fn table(&self, all_streams: bool) -> String {
        let mut out = String::new();
        let header = format!(
            "{:<26} {:>6} {:>10} {:>8} {:>6} {:>6} {:>7} {:>6} {:>9} {:>9} {:>9} {:>9}\n",
            "stream", "id", "received", "lost", "dup", "reord", "corrupt", "other", "p50", "p99", "p99.9", "max"
        );
        out.push_str(&header);
        let show_all = all_streams || self.streams.len() <= 20;
        let mut hidden = 0;
        for s in &self.streams {
            if show_all || !s.problems(self.expect).is_empty() {
                out.push_str(&row(s));
            } else {
                hidden += 1;
            }
        }
        if hidden > 0 {
            let _ = writeln!(out, "({hidden} clean streams not shown; --all-streams lists them)");
        }
        out.push_str(&row(&self.total));
        let _ = writeln!(
            out,
            "{} streams on {} sockets, {:.2} s active, stopped by {}; {} socket-buffer drops, {} stray packets",
            self.streams.len(),
            self.sockets,
            self.active_s,
            self.stopped_by,
            self.socket_drops,
            self.stray
        );
        if self.problems.is_empty() {
            match self.expect {
                Some(n) => {
                    let _ = writeln!(
                        out,
                        "OK: every stream delivered exactly {n} packets, each once, in order, intact"
                    );
                }
                None => out.push_str("OK: nothing lost, duplicated, reordered or corrupted\n"),
            }
        } else {
            for p in self.problems.iter().take(20) {
                let _ = writeln!(out, "PROBLEM: {p}");
            }
            if self.problems.len() > 20 {
                let _ = writeln!(out, "... and {} more problems", self.problems.len() - 20);
            }
            for s in self.streams.iter().filter(|s| !s.holes.is_empty()).take(5) {
                let _ = writeln!(out, "{}", where_skipped(s));
            }
        }
        for s in self.streams.iter().filter(|s| s.health.is_some()).take(20) {
            if let Some(h) = s.health {
                let _ = writeln!(out, "{}: {}", s.destination, h.line());
            }
        }
        out
    }
}

/// Where a stream's sequence skipped ahead, the first few places.
fn where_skipped(s: &StreamStats) -> String {
    const SHOWN: usize = 8;
    let places: Vec<String> = s
        .holes
        .iter()
        .take(SHOWN)
        .map(|&(first, n)| match n {
            1 => first.to_string(),
            _ => format!("{first}-{}", first + n - 1),
        })
        .collect();
    let more = match s.holes.len() {
        n if n > SHOWN => format!(" ... ({n} places)"),
        _ => String::new(),
    };
    format!("{} skipped {}{more}", s.destination, places.join(", "))
}

fn row(s: &StreamStats) -> String {
    let lat = |f: fn(&Summary) -> u64| s.latency.as_ref().map_or("-".to_string(), |l| human_ns(f(l)));
    format!(
        "{:<26} {:>6} {:>10} {:>8} {:>6} {:>6} {:>7} {:>6} {:>9} {:>9} {:>9} {:>9}\n",
        s.destination,
        s.stream_id.map_or("-".to_string(), |i| i.to_string()),
        s.received,
        s.lost,
        s.duplicated,
        s.reordered + s.too_late,
        s.corrupted,
        s.wrong_stream + s.unrecognized,
        lat(|l| l.p50_ns),
        lat(|l| l.p99_ns),
        lat(|l| l.p999_ns),
        lat(|l| l.max_ns),
    )
}

impl SendReport {
    /// Packets sent to stream `i` (0-based): packet k of the run goes to
    /// stream k mod `streams`, as its sequence number k div `streams`, so
    /// a run stopped early sent the first streams one packet more than the
    /// rest.
    pub fn sent_to(&self, i: usize) -> u64 {
        let s = self.streams.max(1) as u64;
        let i = i as u64;
        if i >= s {
            return 0;
        }
        self.packets / s + u64::from(i < self.packets % s)
    }

    /// The human-readable summary.
    pub fn table(&self) -> String {
        let mut out = format!(
            "sent {} packets ({} streams x {} bytes, via {}, pace {}) in {:.3} s: {:.0} pps",
            self.packets, self.streams, self.payload_bytes, self.path, self.pace, self.duration_s, self.achieved_pps
        );
        match self.target_pps {
            Some(t) => {
                let _ = write!(
                    out,
                    " (target {t:.0} pps, {:+.2} %)",
                    (self.achieved_pps / t - 1.0) * 100.0
                );
            }
            None => out.push_str(" (as fast as possible)"),
        }
        let _ = write!(out, ", {} retries, stopped by {}", self.retries, self.stopped_by);
        if self.copies > 0 {
            let _ = write!(out, "; {} copies on the second path", self.copies);
        }
        out.push('\n');
        for c in &self.cpu_busy {
            let _ = writeln!(
                out,
                "CPU {} busy {:.3} s of {:.3} s ({:.1} %){}",
                c.cpu,
                c.busy_s,
                c.wall_s,
                c.busy_s * 100.0 / c.wall_s.max(1e-9),
                if self.packets > 0 {
                    format!(", {:.2} µs per packet sent", c.busy_s * 1e6 / self.packets as f64)
                } else {
                    String::new()
                }
            );
        }
        if self.reached_target == Some(false) {
            let _ = writeln!(
                out,
                "WARNING: could not reach the target rate: {:.0} pps of {:.0}",
                self.achieved_pps,
                self.target_pps.unwrap_or_default()
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_units() {
        assert_eq!(human_ns(850), "850ns");
        assert_eq!(human_ns(12_340), "12.3µs");
        assert_eq!(human_ns(4_560_000), "4.56ms");
        assert_eq!(human_ns(1_200_000_000), "1.20s");
    }

    #[test]
    fn the_places_a_sequence_skipped_are_named() {
        let s = StreamStats {
            destination: "239.1.1.1:5001".into(),
            holes: vec![(3, 1), (10, 5)],
            ..Default::default()
        };
        assert_eq!(where_skipped(&s), "239.1.1.1:5001 skipped 3, 10-14");
        let many = StreamStats {
            destination: "x".into(),
            holes: (0..10).map(|i| (i * 10, 2)).collect(),
            ..Default::default()
        };
        assert_eq!(
            where_skipped(&many),
            "x skipped 0-1, 10-11, 20-21, 30-31, 40-41, 50-51, 60-61, 70-71 ... (10 places)"
        );
    }

    #[test]
    fn problems_name_every_fault_and_the_expectation() {
        let s = StreamStats {
            received: 10,
            unique: 9,
            lost: 1,
            duplicated: 1,
            reordered: 2,
            corrupted: 3,
            highest_seq: Some(10),
            ..Default::default()
        };
        let p = s.problems(Some(10)).join("; ");
        for needle in ["1 lost", "1 duplicated", "2 reordered", "3 corrupted", "up to 10"] {
            assert!(p.contains(needle), "{p}");
        }
        let clean = StreamStats {
            received: 10,
            unique: 10,
            highest_seq: Some(9),
            ..Default::default()
        };
        assert!(clean.problems(Some(10)).is_empty());
        let short = StreamStats {
            received: 5,
            unique: 5,
            lost: 5,
            highest_seq: Some(4),
            ..Default::default()
        };
        assert_eq!(short.problems(Some(10)), vec!["5 lost".to_string()]);
    }
}
