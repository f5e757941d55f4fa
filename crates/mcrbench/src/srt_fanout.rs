//! `mcrbench srt-fanout`: one multicast stream served over SRT to many
//! callers, by MCR (one listener port in worker 0) and by what users run
//! today (one `srt-live-transmit` per caller, multicast in, SRT listener
//! out), one after the other in the same run and the same namespaces.
//!
//! Every caller is an `srt-live-transmit` in the sink's namespace that puts
//! what it receives on a UDP port of its own on loopback, where one
//! `mcrgen recv` checks every datagram of every caller (sequence, payload,
//! MPEG-TS continuity). The CPU figure is each setup's own processes'
//! `utime + stime` (`/proc/PID/stat`) over the send: mcrd's worker 0 with
//! its libsrt threads (and, apart, its supervisor), against the sum of the
//! baseline's processes; beside it the busy time of the relay CPU
//! (MEASURING.md), which both setups' processes are pinned to, and where
//! the kernel's receive work for them runs too.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use mcr_testbed::presets::Chain;
use mcr_testbed::relay::Relay;
use mcr_testbed::srt::LiveTransmit;
use mcr_testbed::traffic::Mcrgen;
use serde::Serialize;

use crate::relay::cpu;

/// Options of `mcrbench srt-fanout`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// SRT callers of the one stream.
    #[arg(long, default_value_t = 50)]
    callers: u16,
    /// Datagrams per second (MPEG-TS, 1,316 bytes each: 475 is 5 Mb/s).
    #[arg(long, default_value_t = 475)]
    pps: u64,
    /// How long the stream flows for each setup, in seconds.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// The SRT latency of every connection, in ms.
    #[arg(long, default_value_t = 200)]
    latency_ms: u32,
    /// Only MCR: no baseline.
    #[arg(long)]
    no_baseline: bool,
    /// The generator's, the callers' and the receiver's CPU.
    #[arg(long, default_value_t = 0)]
    load_cpu: usize,
    /// The relays' CPU (mcrd's worker, every baseline process).
    #[arg(long, default_value_t = 1)]
    relay_cpu: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// One setup's run.
#[derive(Debug, Serialize)]
pub struct Setup {
    /// `mcr` or `srt-live-transmit`.
    pub relay: String,
    /// Relay processes serving the callers.
    pub processes: usize,
    /// Callers connected when the stream started.
    pub callers: usize,
    /// Datagrams each caller should have received.
    pub expected_per_caller: u64,
    /// Datagrams received, all callers.
    pub received: u64,
    /// Lost, duplicated, reordered or corrupted, all callers.
    pub faults: u64,
    /// Callers that received every datagram, each once, in order, intact.
    pub whole_callers: usize,
    /// What `mcrgen recv` found wrong, per caller (empty when all whole).
    pub problems: Vec<String>,
    /// Wall seconds of the send.
    pub wall_s: f64,
    /// CPU seconds (utime + stime) of the relay processes over the send:
    /// mcrd's worker 0 with its libsrt threads, or the sum of the
    /// baseline's processes.
    pub cpu_s: f64,
    /// The same per second of wall time, in percent of one core.
    pub cpu_pct: f64,
    /// mcrd's supervisor, apart (none for the baseline).
    pub supervisor_cpu_s: Option<f64>,
    /// Busy seconds of the relay CPU over the send (wall − idle).
    pub relay_cpu_busy_s: f64,
    /// Other processes' CPU seconds meanwhile (a busy machine).
    pub others_cpu_s: f64,
    /// Resident memory of the relay processes at the end, summed, in KiB.
    pub rss_kib: u64,
    /// Threads of the relay processes, summed.
    pub threads: usize,
    /// MCR only: where its datagrams went (the rule's and worker's
    /// counters, and libsrt's per connection, summed).
    pub mcr: Option<McrCounts>,
}

/// MCR's own counters at the end of a run.
#[derive(Debug, Default, Serialize)]
pub struct McrCounts {
    /// Datagrams the rule took in.
    pub rule_packets: u64,
    /// Datagrams handed to at least one connection.
    pub output_packets: u64,
    /// The output's drops by reason.
    pub output_drops: std::collections::BTreeMap<String, u64>,
    /// Worker 0's ring drops.
    pub ring_drops: u64,
    /// libsrt's counts, all connections: sent, retransmitted, reported
    /// missing by the callers (their loss reports), dropped as too late
    /// (lost for good).
    pub srt_sent: u64,
    pub srt_retransmitted: u64,
    pub srt_reported_missing: u64,
    pub srt_dropped_too_late: u64,
}

fn mcr_counts(relay: &Relay) -> anyhow::Result<McrCounts> {
    let st = relay.stats()?;
    let mut m = McrCounts {
        ring_drops: st.workers.iter().map(|w| w.ring_drops).sum(),
        ..McrCounts::default()
    };
    if let Some(r) = st.rules.first() {
        m.rule_packets = r.packets;
        if let Some(o) = r.outputs.first() {
            m.output_packets = o.packets;
            m.output_drops = o.drops.clone();
            for c in o.srt.iter().flat_map(|s| &s.connections) {
                m.srt_sent += c.packets;
                m.srt_retransmitted += c.retransmitted;
                m.srt_reported_missing += c.reported_missing;
                m.srt_dropped_too_late += c.dropped_too_late;
            }
        }
    }
    Ok(m)
}

/// What `mcrbench srt-fanout` reports.
#[derive(Debug, Serialize)]
pub struct Report {
    pub callers: u16,
    pub pps: u64,
    pub bitrate_mbps: f64,
    pub seconds: u64,
    pub latency_ms: u32,
    pub setups: Vec<Setup>,
    /// Baseline CPU over MCR's (process time), when both ran.
    pub cpu_ratio: Option<f64>,
}

/// MPEG-TS datagram size with `--wrap ts`.
const TS_DATAGRAM_BYTES: u64 = 1316;
/// The callers' loopback ports: caller k writes to FIRST_PORT + k.
const FIRST_PORT: u16 = 7001;

fn proc_status_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count())
}

fn cpu_of(pids: &[u32]) -> f64 {
    pids.iter().filter_map(|&p| cpu::process_cpu_s(p, false)).sum()
}

/// The callers, each calling `url(k)` and writing to its loopback port.
fn callers(c: &Chain, a: &Args, url: impl Fn(u16) -> String) -> anyhow::Result<Vec<LiveTransmit>> {
    (0..a.callers)
        .map(|k| {
            LiveTransmit::start_on(
                &c.sink,
                Some(a.load_cpu),
                &url(k),
                &format!("udp://127.0.0.1:{}", FIRST_PORT + k),
                0,
            )
            .map_err(Into::into)
        })
        .collect()
}

/// Waits (at most 60 s) until `ready` holds.
fn wait(what: &str, mut ready: impl FnMut() -> anyhow::Result<bool>) -> anyhow::Result<()> {
    let start = Instant::now();
    while !ready()? {
        anyhow::ensure!(start.elapsed() < Duration::from_secs(60), "no {what} within 60 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// Sends the stream to `group` while every caller's port is checked, and
/// measures `relay_pids` (the relay) and `supervisor` over the send.
fn measure(
    c: &Chain,
    a: &Args,
    group: &str,
    relay: &str,
    relay_pids: &[u32],
    supervisor: Option<u32>,
    connected: usize,
) -> anyhow::Result<Setup> {
    let count = a.pps * a.seconds;
    let rx = Mcrgen::streams(format!("127.0.0.1:{FIRST_PORT}+{}", a.callers), "lo")
        .ids("0")
        .wrap("ts")
        .expect(count)
        .arg("--cpu")
        .arg(a.load_cpu)
        .recv(&c.sink)?;
    let all_before = cpu::all_processes();
    let idle_before = cpu::cpu_idle_ticks(a.relay_cpu).unwrap_or(0);
    let cpu_before = cpu_of(relay_pids);
    let sup_before = supervisor.and_then(|p| cpu::process_cpu_s(p, false));
    let began = Instant::now();
    Mcrgen::streams(group, Chain::GEN_IF)
        .count(count)
        .rate(a.pps)
        .wrap("ts")
        .arg("--cpu")
        .arg(a.load_cpu)
        .send(&c.generator, Duration::from_secs(a.seconds * 4 + 60))?;
    let wall_s = began.elapsed().as_secs_f64();
    let cpu_s = cpu_of(relay_pids) - cpu_before;
    let idle_after = cpu::cpu_idle_ticks(a.relay_cpu).unwrap_or(0);
    let supervisor_cpu_s = supervisor
        .and_then(|p| cpu::process_cpu_s(p, false))
        .zip(sup_before)
        .map(|(after, before)| after - before);
    let all_after = cpu::all_processes();
    let mut ours = relay_pids.to_vec();
    ours.extend(supervisor);
    ours.push(std::process::id());
    let got = rx.finish(Duration::from_secs(a.seconds * 4 + 60))?;
    let mut problems = Vec::new();
    let mut whole = 0;
    for s in &got.report.streams {
        let p = s.problems(Some(count));
        if p.is_empty() {
            whole += 1;
        } else {
            problems.push(format!("{}: {}", s.destination, p.join("; ")));
        }
    }
    let t = &got.report.total;
    Ok(Setup {
        relay: relay.to_string(),
        processes: relay_pids.len(),
        callers: connected,
        expected_per_caller: count,
        received: t.received,
        faults: t.lost + t.duplicated + t.reordered + t.corrupted,
        whole_callers: whole,
        problems,
        wall_s,
        cpu_s,
        cpu_pct: 100.0 * cpu_s / wall_s,
        supervisor_cpu_s,
        relay_cpu_busy_s: cpu::busy_s(wall_s, idle_before, idle_after),
        // The callers, the generator and the receiver are every run's
        // load, not others'; what is left is the machine's noise.
        others_cpu_s: cpu::others_s(&all_before, &all_after, &ours),
        rss_kib: relay_pids.iter().map(|&p| proc_status_kib(p, "VmRSS:")).sum(),
        threads: relay_pids.iter().map(|&p| threads(p)).sum(),
        mcr: None,
    })
}

fn run_mcr(c: &Chain, a: &Args) -> anyhow::Result<Setup> {
    let relay = Relay::start(&c.relay, &["--cpus", &a.relay_cpu.to_string()])?;
    relay.ctl_ok(&[
        "add",
        "fanout",
        "--input",
        &format!("{}:239.1.1.1:5001", Chain::RELAY_IN_IF),
        "--output",
        &format!(
            "srt://0.0.0.0:9000,latency={},streamid=fanout,max-callers={}",
            a.latency_ms,
            a.callers.max(1)
        ),
    ])?;
    let srt_callers = |relay: &Relay| -> anyhow::Result<usize> {
        let st = relay.stats()?;
        Ok(st
            .rules
            .first()
            .and_then(|r| r.outputs.first()?.srt.as_ref())
            .map_or(0, |s| s.connections.len()))
    };
    let calls = callers(c, a, |_| {
        format!(
            "srt://{}:9000?streamid=fanout&latency={}",
            Chain::RELAY_OUT_ADDR,
            a.latency_ms
        )
    })?;
    if let Err(e) = wait("connection of every caller", || {
        Ok(srt_callers(&relay)? == usize::from(a.callers))
    }) {
        let stats = relay.ctl_ok(&["stats"]).unwrap_or_default();
        let log = calls.first().map(LiveTransmit::log).unwrap_or_default();
        anyhow::bail!(
            "{e}: mcrd has {} of them\n{stats}\n{}\n--- a caller:\n{log}",
            srt_callers(&relay)?,
            relay.log()
        );
    }
    let worker = relay
        .workers()?
        .first()
        .and_then(|w| w.pid)
        .ok_or_else(|| anyhow::anyhow!("worker 0 is not running"))?;
    let connected = srt_callers(&relay)?;
    let mut setup = measure(c, a, "239.1.1.1:5001", "mcr", &[worker], Some(relay.pid()), connected);
    if let Ok(s) = &mut setup {
        // libsrt's counts are read once a second.
        std::thread::sleep(Duration::from_millis(1100));
        s.mcr = Some(mcr_counts(&relay)?);
    }
    drop(calls);
    let _ = relay.stop();
    setup
}

fn run_baseline(c: &Chain, a: &Args) -> anyhow::Result<Setup> {
    // One srt-live-transmit per caller, each joining the group and
    // listening on a port of its own, as srt-live-transmit serves one
    // caller at a time.
    let relays: Vec<LiveTransmit> = (0..a.callers)
        .map(|k| {
            LiveTransmit::start_on(
                &c.relay,
                Some(a.relay_cpu),
                &format!("udp://239.1.1.2:5002?adapter={}", Chain::RELAY_IN_ADDR),
                &format!("srt://:{}?mode=listener&latency={}", 9100 + k, a.latency_ms),
                0,
            )
        })
        .collect::<Result<_, _>>()?;
    let calls = callers(c, a, |k| {
        format!("srt://{}:{}?latency={}", Chain::RELAY_OUT_ADDR, 9100 + k, a.latency_ms)
    })?;
    // (libsrt writes "Connection established" in one line of the
    // caller's log; srt-live-transmit's own "Accepted" may be cut by a
    // libsrt line written meanwhile.)
    let connected = |calls: &[LiveTransmit]| {
        calls
            .iter()
            .filter(|c| c.log().contains("Connection established"))
            .count()
    };
    if let Err(e) = wait("connection of every caller", || {
        Ok(connected(&calls) == usize::from(a.callers))
    }) {
        let missing = relays
            .iter()
            .zip(&calls)
            .find(|(_, c)| !c.log().contains("Connection established"));
        let (r, c) = missing.map(|(r, c)| (r.log(), c.log())).unwrap_or_default();
        anyhow::bail!(
            "{e}: {} of them connected\n--- a listener without its caller:\n{r}\n--- its caller:\n{c}",
            connected(&calls)
        );
    }
    let pids: Vec<u32> = relays.iter().map(LiveTransmit::pid).collect();
    let setup = measure(
        c,
        a,
        "239.1.1.2:5002",
        "srt-live-transmit",
        &pids,
        None,
        connected(&calls),
    );
    drop(calls);
    drop(relays);
    setup
}

pub fn run(a: &Args) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        (1..=500).contains(&a.callers),
        "--callers {} is outside 1-500",
        a.callers
    );
    anyhow::ensure!(a.pps > 0 && a.seconds > 0, "--pps and --seconds give no packets");
    let c = Chain::new("srt-fanout")?;
    let mut setups = vec![run_mcr(&c, a)?];
    if !a.no_baseline {
        setups.push(run_baseline(&c, a)?);
    }
    let cpu_ratio = match setups.as_slice() {
        [m, b] if m.cpu_s > 0.0 => Some(b.cpu_s / m.cpu_s),
        _ => None,
    };
    let report = Report {
        callers: a.callers,
        pps: a.pps,
        bitrate_mbps: (a.pps * TS_DATAGRAM_BYTES * 8) as f64 / 1e6,
        seconds: a.seconds,
        latency_ms: a.latency_ms,
        setups,
        cpu_ratio,
    };
    let whole = report.setups[0].whole_callers == usize::from(a.callers);
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print_table(&report);
    }
    Ok(if whole { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn print_table(r: &Report) {
    println!(
        "one {:.1} Mb/s MPEG-TS stream ({} datagrams/s) to {} SRT callers for {} s, latency {} ms",
        r.bitrate_mbps, r.pps, r.callers, r.seconds, r.latency_ms
    );
    println!(
        "{:<18} {:>9} {:>8} {:>14} {:>8} {:>7} {:>10} {:>9} {:>8} {:>8}",
        "relay",
        "processes",
        "callers",
        "whole callers",
        "faults",
        "CPU s",
        "CPU % core",
        "relay CPU",
        "RSS MiB",
        "threads"
    );
    for s in &r.setups {
        println!(
            "{:<18} {:>9} {:>8} {:>14} {:>8} {:>7.2} {:>10.1} {:>8.2}s {:>8.1} {:>8}",
            s.relay,
            s.processes,
            s.callers,
            format!("{}/{}", s.whole_callers, r.callers),
            s.faults,
            s.cpu_s,
            s.cpu_pct,
            s.relay_cpu_busy_s,
            s.rss_kib as f64 / 1024.0,
            s.threads
        );
        if let Some(sup) = s.supervisor_cpu_s {
            println!("{:<18} supervisor apart: {sup:.2} CPU s", "");
        }
        if let Some(m) = &s.mcr {
            println!(
                "{:<18} rule took {}, output sent {}, drops {:?}, ring drops {}; libsrt: sent {}, retransmitted {}, reported missing {}, lost (dropped too late) {}",
                "",
                m.rule_packets,
                m.output_packets,
                m.output_drops,
                m.ring_drops,
                m.srt_sent,
                m.srt_retransmitted,
                m.srt_reported_missing,
                m.srt_dropped_too_late
            );
        }
        if s.others_cpu_s > 0.1 * s.wall_s {
            println!(
                "{:<18} other processes used {:.2} CPU s meanwhile: a busy machine",
                "", s.others_cpu_s
            );
        }
        for p in s.problems.iter().take(5) {
            println!("{:<18} PROBLEM {p}", "");
        }
    }
    if let Some(x) = r.cpu_ratio {
        println!("baseline CPU / MCR CPU: {x:.2}");
    }
}
