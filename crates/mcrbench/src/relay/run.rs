//! One counted run of a point: receivers, the generator, and every
//! counter read before and after.

use std::time::{Duration, Instant};

use mcr_testbed::traffic::{Receiver, send};
use serde::Serialize;

use super::cpu;
use super::losses::Losses;
use super::relays::{MergeCounts, Relay};
use super::scenario::{Point, Rate};
use super::topo::Topology;

/// How runs are laid out.
#[derive(Debug, Clone)]
pub struct Layout {
    pub load_cpu: usize,
    pub relay_cpu: usize,
    pub sink_via: String,
    /// `mcrgen --wrap` of the test payload.
    pub wrap: String,
    /// Wait for idle CPUs before each measurement ([`settle`]); not with
    /// `--quick`, which checks what is delivered, not what it costs (and
    /// in CI, beside other tests, waited up to 10 s a run for nothing).
    pub settle: bool,
}

/// What one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// Packets the generator sent.
    pub sent: u64,
    /// Copies of them it sent on the streams' second paths (to a relay
    /// that merges: it receives two packets per packet it forwards).
    pub copies: u64,
    /// The rate it achieved.
    pub achieved_pps: f64,
    /// The rate it was asked for, all streams together (none: `max`).
    pub offered_pps: Option<f64>,
    /// Packets each sink should have had, summed.
    pub expected: u64,
    /// Distinct packets the sinks got.
    pub delivered: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub corrupted: u64,
    /// The worst sink's latency percentiles, µs.
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    /// Busy time of the relay CPU per delivered packet, µs, over the
    /// generator's sending window (first send to last).
    pub relay_core_us_per_pkt: f64,
    /// That busy time, seconds, and the window's length.
    pub relay_core_busy_s: f64,
    pub window_s: f64,
    /// Busy time of both CPUs (the generator's and sinks' too) per
    /// delivered packet, µs, over the same window: work a relay moves to
    /// the other core shows here, not in the relay core's figure.
    pub machine_us_per_pkt: f64,
    pub load_core_busy_s: f64,
    /// The relay processes' own CPU time per delivered packet, µs.
    pub relay_proc_us_per_pkt: f64,
    /// The relay's processes and their resident memory.
    pub relay_procs: usize,
    pub relay_rss_mb: f64,
    /// CPU other user-space processes took, in cores.
    pub others_cores: f64,
    pub losses: Losses,
    /// A merging relay: what its merges did with both paths' packets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merge: Option<MergeCounts>,
}

/// Waits (up to 10 s) until both CPUs are mostly idle.
pub fn settle(l: &Layout) {
    if !l.settle {
        return;
    }
    for _ in 0..20 {
        let a = (cpu::cpu_idle_ticks(l.load_cpu), cpu::cpu_idle_ticks(l.relay_cpu));
        let t = Instant::now();
        std::thread::sleep(Duration::from_millis(500));
        let b = (cpu::cpu_idle_ticks(l.load_cpu), cpu::cpu_idle_ticks(l.relay_cpu));
        let wall = t.elapsed().as_secs_f64();
        if let ((Some(a0), Some(a1)), (Some(b0), Some(b1))) = (a, b)
            && cpu::busy_s(wall, a0, b0) < 0.1 * wall
            && cpu::busy_s(wall, a1, b1) < 0.1 * wall
        {
            return;
        }
    }
}

/// The busy share (0 to 1) of the relay CPU over `d` with no traffic.
pub fn idle_busy_share(l: &Layout, d: Duration) -> f64 {
    let a = cpu::cpu_idle_ticks(l.relay_cpu);
    let t = Instant::now();
    std::thread::sleep(d);
    let b = cpu::cpu_idle_ticks(l.relay_cpu);
    // Over the time that really passed: a sleep lasts at least `d`, and a
    // busy time over that longer time, divided by `d`, came out above 100 %
    // on a loaded machine.
    let wall_s = t.elapsed().as_secs_f64();
    match (a, b) {
        (Some(a), Some(b)) => cpu::busy_s(wall_s, a, b) / wall_s,
        _ => f64::NAN,
    }
}

fn rss_mb(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Half the time between two packets of all streams together at `rate`:
/// by default each copy of a merged stream goes that much after its
/// original, so that the relay receives originals and copies evenly
/// spaced, as from two paths, not in pairs. Zero at `max`.
pub fn half_interval(rate: &Rate, streams: usize) -> Duration {
    offered_pps(rate, streams).map_or(Duration::ZERO, |pps| Duration::from_secs_f64(0.5 / pps))
}

/// The rate offered, all streams together (none: as fast as it goes).
pub fn offered_pps(rate: &Rate, streams: usize) -> Option<f64> {
    match rate {
        Rate::Total(r) => mcrgen::units::parse_rate(r).ok().flatten(),
        Rate::PerStream(r) => mcrgen::units::parse_rate(r)
            .ok()
            .flatten()
            .map(|r| r * streams.max(1) as f64),
    }
}

/// The `mcrgen send` arguments that make every packet go twice, for a
/// relay that merges; `rtp_start` is the RTP sequence number the streams
/// carry next (see [`once`]).
fn copy_args(topo: &Topology, relay: &dyn Relay, point: &Point, rtp_start: u16) -> anyhow::Result<Vec<String>> {
    let Some(c) = relay.copies() else {
        return Ok(Vec::new());
    };
    let to = topo
        .copies
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("--merge: this topology has no second path for the copies"))?;
    let to: Vec<String> = to.iter().map(|a| a.to_string()).collect();
    let delay = c
        .delay
        .unwrap_or_else(|| half_interval(&point.rate, topo.streams.len()));
    Ok(vec![
        "--copy".into(),
        to.join(","),
        "--copy-delay".into(),
        format!("{}ns", delay.as_nanos()),
        "--rtp-seq-start".into(),
        rtp_start.to_string(),
    ])
}

/// Runs `point` once (with `count` packets per stream).
///
/// `rtp_next` is the RTP sequence number each stream's next packet
/// carries, for a relay that merges: its runs continue the sequence of the
/// runs before on the same rules, as one encoder's stream would. (A merge
/// takes a stream that starts again at the same SSRC and sequence numbers
/// for copies of what it forwarded already, and drops them.) Other relays
/// get every run from 0, as always.
pub fn once(
    topo: &Topology,
    relay: &dyn Relay,
    point: &Point,
    count: u64,
    l: &Layout,
    rtp_next: &mut u16,
) -> anyhow::Result<Run> {
    settle(l);
    let load = l.load_cpu.to_string();
    let count_s = count.to_string();
    let size = point.size.to_string();
    let pids = relay.pids();
    let copies = copy_args(topo, relay, point, *rtp_next)?;
    let before = Losses::read(topo, relay);
    let merge0 = relay.merge_counts();
    let idle0 = cpu::cpu_idle_ticks(l.relay_cpu).unwrap_or(0);
    let load_idle0 = cpu::cpu_idle_ticks(l.load_cpu).unwrap_or(0);
    let proc0: f64 = pids.iter().filter_map(|&p| cpu::process_cpu_s(p, true)).sum();
    let all0 = cpu::all_processes();
    let t0 = Instant::now();
    let mut receivers = Vec::new();
    let sink_buffer = sink_buffer_bytes(topo.sinks.len()).to_string();
    for k in &topo.sinks {
        let list: Vec<String> = k.streams.iter().map(|s| s.to_string()).collect();
        let list = list.join(",");
        receivers.push(Receiver::start(
            &k.ns,
            &[
                "-s",
                &list,
                "-i",
                &k.ifname,
                "--expect",
                &count_s,
                "--ids",
                &k.ids,
                "--cpu",
                &load,
                "--idle-timeout",
                "2s",
                "--via",
                &l.sink_via,
                "--rcvbuf",
                &sink_buffer,
                "--wrap",
                &l.wrap,
            ],
        )?);
    }
    let streams: Vec<String> = topo.streams.iter().map(|s| s.to_string()).collect();
    let streams = streams.join(",");
    let (rate_flag, rate) = match &point.rate {
        Rate::Total(r) => ("--rate", r.as_str()),
        Rate::PerStream(r) => ("--rate-per-stream", r.as_str()),
    };
    let watch = format!("{},{}", l.relay_cpu, l.load_cpu);
    let mut args = vec![
        "-s",
        &streams,
        "-i",
        &topo.generator.1,
        "--count",
        &count_s,
        rate_flag,
        rate,
        "--wrap",
        &l.wrap,
        "--cpu",
        &load,
        "--watch-cpu",
        &watch,
    ];
    // MPEG-TS fixes the datagram's size.
    if matches!(l.wrap.as_str(), "plain" | "rtp") {
        args.extend(["--size", size.as_str()]);
    }
    args.extend(point.arrivals.sender_args());
    args.extend(copies.iter().map(String::as_str));
    let sent = send(&topo.generator.0, &args, Duration::from_secs(7200));
    if !copies.is_empty() {
        // Sequence numbers wrap at 2^16. (After a send that failed part
        // way this is not where the stream is, and the merge may drop or
        // hold the next run's first packets: the sinks would say so.)
        *rtp_next = rtp_next.wrapping_add((count % 65_536) as u16);
    }
    let sent = sent?;
    let mut got = Vec::new();
    for r in receivers {
        got.push(r.finish(Duration::from_secs(7200))?);
    }
    let wall = t0.elapsed().as_secs_f64();
    let idle1 = cpu::cpu_idle_ticks(l.relay_cpu).unwrap_or(idle0);
    let load_idle1 = cpu::cpu_idle_ticks(l.load_cpu).unwrap_or(load_idle0);
    // The relay's core is charged over the sending window only, as the
    // generator measured it: not the receivers' start, not the idle
    // timeout at the end, not this process's own work around the run.
    let busy_of = |cpu: usize, before: u64, after: u64| {
        sent.cpu_busy
            .iter()
            .find(|c| c.cpu == cpu)
            .copied()
            .unwrap_or(mcrgen::report::CpuBusy {
                cpu,
                wall_s: wall,
                busy_s: cpu::busy_s(wall, before, after),
            })
    };
    let core = busy_of(l.relay_cpu, idle0, idle1);
    let load_core = busy_of(l.load_cpu, load_idle0, load_idle1);
    // (One CPU for everything: the machine is that core.)
    let machine_busy_s = if l.load_cpu == l.relay_cpu {
        core.busy_s
    } else {
        core.busy_s + load_core.busy_s
    };
    let proc1: f64 = pids.iter().filter_map(|&p| cpu::process_cpu_s(p, true)).sum();
    let mut ours = pids.clone();
    ours.push(std::process::id());
    let others = cpu::others_s(&all0, &cpu::all_processes(), &ours) / wall;
    let sink_socket: u64 = got.iter().map(|g| g.report.socket_drops).sum();
    let losses = Losses::read(topo, relay).minus(&before, sink_socket);
    let merge = relay.merge_counts().zip(merge0).map(|(m1, m0)| m1.minus(&m0));
    let delivered: u64 = got.iter().map(|g| g.report.total.unique).sum();
    let expected: u64 = topo.sinks.iter().map(|k| k.streams.len() as u64).sum::<u64>() * count;
    let per = |s: f64| {
        if delivered > 0 {
            s * 1e6 / delivered as f64
        } else {
            f64::NAN
        }
    };
    let worst = |f: fn(&mcrgen::histogram::Summary) -> u64| {
        got.iter()
            .filter_map(|g| g.report.total.latency.as_ref().map(|l| f(l) as f64 / 1e3))
            .fold(f64::NAN, f64::max)
    };
    Ok(Run {
        sent: sent.packets,
        copies: sent.copies,
        achieved_pps: sent.achieved_pps,
        offered_pps: offered_pps(&point.rate, topo.streams.len()),
        expected,
        delivered,
        lost: got.iter().map(|g| g.report.total.lost).sum(),
        duplicated: got.iter().map(|g| g.report.total.duplicated).sum(),
        reordered: got.iter().map(|g| g.report.total.reordered).sum(),
        corrupted: got.iter().map(|g| g.report.total.corrupted).sum(),
        p50_us: worst(|l| l.p50_ns),
        p99_us: worst(|l| l.p99_ns),
        p999_us: worst(|l| l.p999_ns),
        relay_core_us_per_pkt: per(core.busy_s),
        relay_core_busy_s: core.busy_s,
        window_s: core.wall_s,
        machine_us_per_pkt: per(machine_busy_s),
        load_core_busy_s: load_core.busy_s,
        relay_proc_us_per_pkt: per(proc1 - proc0),
        relay_procs: pids.len(),
        relay_rss_mb: pids.iter().map(|&p| rss_mb(p)).sum(),
        others_cores: others,
        losses,
        merge,
    })
}

/// Each sink's receive buffer (its ring's size with `--via ring`, where the
/// kernel allocates all of it up front): 128 MiB, but never more than 2 GiB
/// for all sinks together, so that 200 sinks of a fan-out do not exhaust the
/// machine's memory; at least 8 MiB.
fn sink_buffer_bytes(sinks: usize) -> usize {
    const MIB: usize = 1 << 20;
    ((2048 * MIB) / sinks.max(1)).clamp(8 * MIB, 128 * MIB)
}

#[cfg(test)]
mod tests {
    use super::{Duration, Rate, half_interval, sink_buffer_bytes};

    #[test]
    fn copies_go_half_way_between_two_packets_of_all_streams() {
        let total = |r: &str| Rate::Total(r.into());
        assert_eq!(half_interval(&total("50k"), 1), Duration::from_micros(10));
        assert_eq!(half_interval(&total("10000"), 1), Duration::from_micros(50));
        // The total rate whatever the number of streams.
        assert_eq!(half_interval(&total("50k"), 10), Duration::from_micros(10));
        // Per stream: the streams together.
        assert_eq!(
            half_interval(&Rate::PerStream("2000".into()), 10),
            Duration::from_micros(25)
        );
        assert_eq!(half_interval(&total("max"), 1), Duration::ZERO);
        assert_eq!(half_interval(&total("fast"), 1), Duration::ZERO);
    }

    #[test]
    fn sink_buffers_share_a_bounded_budget() {
        assert_eq!(sink_buffer_bytes(1), 128 << 20);
        assert_eq!(sink_buffer_bytes(16), 128 << 20);
        assert_eq!(sink_buffer_bytes(50), (2048 << 20) / 50);
        assert_eq!(sink_buffer_bytes(200), (2048 << 20) / 200);
        assert_eq!(sink_buffer_bytes(1000), 8 << 20);
        assert!(sink_buffer_bytes(200) * 200 <= 2048 << 20);
    }
}
