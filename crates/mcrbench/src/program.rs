//! What the eBPF program itself spends on a frame: a plain rule's against
//! an arbitrated rule's and a translating one's (IPv4 in, IPv6 out), each
//! frame timed by the kernel around one run of the program
//! (`BPF_PROG_TEST_RUN`).
//!
//! The program runs in the receive path, so the time it takes is the
//! latency a frame gains inside MCR on the eBPF data path, and the cost it
//! adds to the receiving core. The relay benchmark measures the whole path
//! (sender, veths, receiver), whose latency tail on this machine is
//! hundreds of microseconds of scheduling; this isolates the rule's own
//! work. Setup: two veths in a namespace of its own; a plain rule takes
//! line a's group, an arbitrated rule takes line a and line b. Each frame
//! is a feed packet of its own sequence number: the plain rule forwards
//! each; the arbitrated rule gets each number on line a (the first copy,
//! forwarded) and then on line b (the second, dropped). The clone that
//! forwards a frame is sent out of a veth whose peer is down, which frees
//! it.

use std::os::fd::AsFd;
use std::process::ExitCode;

use mcr_bpf::Loaded;
use mcr_core::datapath::{FastTable, Maps, TCX_DROP};
use mcr_core::interfaces::{InterfaceInfo, Interfaces};
use mcr_core::rule::{Redundancy, Rule};
use mcr_core::snapshot::{SlottedRule, TableSnapshot};
use mcr_core::stats::{OutputCounter, StatsLayout};
use mcr_core::table::MatchTable;
use mcr_core::wire::{UDP_V4_HEADERS, UdpFrameSpec, write_udp_v4_frame};
use mcr_sys::bpf::ringbuf::RingReader;
use mcrgen::feed::{Framing, Plan};
use serde::Serialize;

use crate::stats::Spread;

/// Options of `mcrbench program`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The feed's framing: moldudp64, mdp3, pitch or mitch.
    #[arg(long, default_value = "mdp3")]
    framing: String,
    /// Sequence numbers per run.
    #[arg(long, default_value_t = 100_000)]
    frames: u64,
    /// Runs of each rule, alternating.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Datagram size in bytes.
    #[arg(long, default_value_t = 100)]
    size: usize,
    /// Print JSON lines instead of a table.
    #[arg(long)]
    json: bool,
}

const LINES: [&str; 2] = ["239.1.1.1:5001", "239.2.1.1:5001"];
const OUTPUT: &str = "d1:239.10.1.1:6001";
const OUTPUT_V6: &str = "d1:[ff3e::10]:6001";

/// One kind of frame's times over the runs: the median over runs of each
/// run's mean, median and 99th percentile, in nanoseconds.
#[derive(Debug, Serialize)]
struct Row {
    what: &'static str,
    frames_per_run: u64,
    mean_ns: Spread,
    p50_ns: Spread,
    p99_ns: Spread,
}

/// The times of one run, per frame.
#[derive(Default)]
struct Times {
    plain: Vec<u32>,
    bare: Vec<u32>,
    first: Vec<u32>,
    second: Vec<u32>,
    translated: Vec<u32>,
}

pub fn run(a: &Args) -> anyhow::Result<ExitCode> {
    let framing = match a.framing.as_str() {
        "moldudp64" => Framing::MoldUdp64,
        "mdp3" => Framing::Mdp3,
        "pitch" => Framing::Pitch,
        "mitch" => Framing::Mitch,
        other => anyhow::bail!("--framing {other}: write moldudp64, mdp3, pitch or mitch"),
    };
    anyhow::ensure!(a.frames > 0 && a.runs > 0, "--frames and --runs must be at least 1");
    let plan = Plan::new(framing);
    let payload_len = plan.payload_len(a.size).map_err(|e| anyhow::anyhow!("--size: {e}"))?;
    let mut tb = mcr_testbed::Testbed::new("bench-prog")?;
    let ns = tb.ns("a")?;
    // The output's veth peer stays down: a forwarded clone is freed where
    // it is sent, so that no receiving end's work lands in a timed run.
    ns.ip(&["link", "add", "d0", "type", "veth", "peer", "name", "p0"])?;
    ns.ip(&["link", "add", "d1", "type", "veth", "peer", "name", "p1"])?;
    ns.link_up("d0")?;
    ns.link_up("d1")?;
    let name = ns.name().to_string();
    let (frames, runs, size, feed) = (a.frames, a.runs, a.size, a.framing.clone());
    let runs = std::thread::spawn(move || -> anyhow::Result<Vec<Times>> {
        mcr_sys::netns::enter(&name)?;
        let d0 = mcr_sys::iface::index("d0")?;
        let d1 = mcr_sys::iface::index("d1")?;
        let mut out = Vec::new();
        for _ in 0..runs {
            let mut t = Times::default();
            let sizes = (size, payload_len);
            (t.first, t.second) = time_rule(&feed, Kind::Arbitrated, (d0, d1), frames, &plan, sizes)?;
            t.plain = time_rule(&feed, Kind::Plain, (d0, d1), frames, &plan, sizes)?.0;
            t.bare = time_rule(&feed, Kind::PlainNoHealth, (d0, d1), frames, &plan, sizes)?.0;
            t.translated = time_rule(&feed, Kind::Translated, (d0, d1), frames, &plan, sizes)?.0;
            out.push(t);
        }
        Ok(out)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the namespace thread panicked"))??;
    let row = |what, pick: &dyn Fn(&Times) -> Vec<u32>| {
        let per_run: Vec<[f64; 3]> = runs.iter().map(|t| summary(&pick(t))).collect();
        let col = |i: usize| Spread::of(&per_run.iter().map(|s| s[i]).collect::<Vec<_>>()).expect("runs");
        let n = pick(&runs[0]).len() as u64;
        Row {
            what,
            frames_per_run: n,
            mean_ns: col(0),
            p50_ns: col(1),
            p99_ns: col(2),
        }
    };
    let rows = [
        row("plain rule (health followed, the default)", &|t| t.plain.clone()),
        row("plain rule, health = false", &|t| t.bare.clone()),
        row("arbitrated: line a (first copy, forwarded)", &|t| t.first.clone()),
        row("arbitrated: line b (second copy, dropped)", &|t| t.second.clone()),
        row("arbitrated: both lines", &|t| {
            [t.first.as_slice(), t.second.as_slice()].concat()
        }),
        row("translated to IPv6, health = false", &|t| t.translated.clone()),
    ];
    if a.json {
        for r in &rows {
            println!("{}", serde_json::to_string(r)?);
        }
    } else {
        println!(
            "{} {}-byte datagrams a run, {} runs of each rule (medians over runs, min-max)",
            a.frames, a.size, a.runs
        );
        println!("{:<44} {:>20} {:>20} {:>20}", "frames", "mean ns", "p50 ns", "p99 ns");
        for r in &rows {
            println!(
                "{:<44} {:>20} {:>20} {:>20}",
                r.what,
                fmt(&r.mean_ns),
                fmt(&r.p50_ns),
                fmt(&r.p99_ns)
            );
        }
        let (first, both) = (&rows[2], &rows[4]);
        for plain in &rows[..2] {
            println!(
                "against the {}: arbitrated per frame received {:.2} times its mean; the forwarded copy's p99 {:+.0} ns from its p99",
                plain.what,
                both.mean_ns.median / plain.mean_ns.median,
                first.p99_ns.median - plain.p99_ns.median
            );
        }
        let (bare, translated) = (&rows[1], &rows[5]);
        println!(
            "translated to IPv6 against the {}: {:+.0} ns per frame (mean), p99 {:+.0} ns",
            bare.what,
            translated.mean_ns.median - bare.mean_ns.median,
            translated.p99_ns.median - bare.p99_ns.median
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn fmt(s: &Spread) -> String {
    format!("{:.0} ({:.0}-{:.0})", s.median, s.min, s.max)
}

/// Mean, median and 99th percentile of `v`.
fn summary(v: &[u32]) -> [f64; 3] {
    let mut s = v.to_vec();
    s.sort_unstable();
    let at = |q: f64| f64::from(s[((s.len() - 1) as f64 * q).round() as usize]);
    let mean = s.iter().map(|&x| f64::from(x)).sum::<f64>() / s.len() as f64;
    [mean, at(0.5), at(0.99)]
}

/// The rule timed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Line a to the output, its health followed (each datagram's head
    /// goes to the health ring, which is read as the daemon's worker 0
    /// reads it, between runs).
    Plain,
    /// The same with `health = false`.
    PlainNoHealth,
    /// Lines a and b arbitrated (arbitrated rules have no health lines).
    Arbitrated,
    /// Line a to an IPv6 output, `health = false`.
    Translated,
}

/// Loads the program with one rule, runs `frames` sequence numbers
/// through it (once on line a, and again on line b for an arbitrated
/// rule), checks that each was forwarded or dropped as it should be, and
/// returns the times of line a's frames and line b's.
fn time_rule(
    feed: &str,
    kind: Kind,
    (d0, d1): (u32, u32),
    frames: u64,
    plan: &Plan,
    (size, payload_len): (usize, usize),
) -> anyhow::Result<(Vec<u32>, Vec<u32>)> {
    let layout = StatsLayout::new(1);
    let arbitrated = kind == Kind::Arbitrated;
    let snap = snapshot(feed, kind, d0, d1)?;
    let (table, errors) = MatchTable::compile(&snap);
    anyhow::ensure!(errors.is_empty(), "the rule: {errors:?}");
    let fast = FastTable::compile(&table, &layout, |_| true);
    anyhow::ensure!(fast.is_fast(1), "the rule is not the eBPF program's");
    let l = Loaded::load(layout.datapath_len() as u32, 1024)?;
    let mut maps = Maps::new(1024);
    let p = maps.plan(&fast).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    l.write(&p)?;
    let mut health = RingReader::new(l.health_ring()?.as_fd().try_clone_to_owned()?)?;
    let mut records = 0u64;
    let counters = l.counters();
    let sent = layout.output(0, 0, OutputCounter::Packets);
    let test = vec![0x5au8; payload_len];
    let mut datagram = vec![0u8; size];
    let mut lines = [Vec::new(), Vec::new()];
    let mut frame = vec![0u8; UDP_V4_HEADERS + size];
    for k in 0..frames {
        plan.write(&mut datagram, k, 0, &test);
        for (line, times) in lines.iter_mut().enumerate().take(if arbitrated { 2 } else { 1 }) {
            udp_frame(&mut frame, LINES[line], &datagram)?;
            let before = counters.get(sent);
            let (verdict, _, ns) = l.ingress().test_run_timed(&frame, d0)?;
            let forwarded = counters.get(sent) - before;
            // Taken either way: the first copy went out as a clone.
            anyhow::ensure!(
                verdict == TCX_DROP,
                "packet {k} on line {line}: verdict {verdict}, not TCX_DROP"
            );
            anyhow::ensure!(
                forwarded == u64::from(line == 0),
                "packet {k} on line {line}: forwarded {forwarded} times"
            );
            times.push(ns);
        }
        if k % 64 == 63 {
            records += health.drain(usize::MAX, |_| ()) as u64;
        }
    }
    records += health.drain(usize::MAX, |_| ()) as u64;
    // (A plain rule's health takes every datagram that may be RTP or
    // MPEG-TS by its first byte, and of others one each 25 ms.)
    anyhow::ensure!(
        (records > 0) == (kind == Kind::Plain),
        "{records} health records for {frames} frames"
    );
    let [a, b] = lines;
    Ok((a, b))
}

fn udp_frame(frame: &mut [u8], dst: &str, payload: &[u8]) -> anyhow::Result<()> {
    frame[UDP_V4_HEADERS..].copy_from_slice(payload);
    let spec = UdpFrameSpec {
        dst_mac: [1, 0, 0x5e, 1, 1, 1],
        src_mac: [2, 0, 0, 0, 0, 1],
        src: "10.0.0.1:40000".parse()?,
        dst: dst.parse()?,
        ttl: 9,
        dscp: 0,
        ident: 1,
    };
    write_udp_v4_frame(frame, &spec, payload.len()).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    Ok(())
}

/// The one rule: line a's group to the output, arbitrated with line b.
fn snapshot(feed: &str, kind: Kind, d0: u32, d1: u32) -> anyhow::Result<TableSnapshot> {
    let iface = |name: &str, index: u32, addrs: [&str; 2]| -> anyhow::Result<InterfaceInfo> {
        Ok(InterfaceInfo::ethernet(
            name,
            index,
            [addrs[0].parse()?, addrs[1].parse()?],
        ))
    };
    let parsed = |s: String| -> anyhow::Result<_> { s.parse().map_err(|e: String| anyhow::anyhow!("{s}: {e}")) };
    let output = if kind == Kind::Translated { OUTPUT_V6 } else { OUTPUT };
    let mut rule = Rule::new(
        "feed",
        parsed(format!("d0:{}", LINES[0]))?,
        vec![output.parse().map_err(|e: String| anyhow::anyhow!("{e}"))?],
    );
    rule.health = kind == Kind::Plain;
    if kind == Kind::Arbitrated {
        rule.redundancy = Some(Redundancy {
            mode: format!("arbitrate,framing={feed}")
                .parse()
                .map_err(|e| anyhow::anyhow!("{e}"))?,
            inputs: vec![parsed(format!("d0:{}", LINES[1]))?],
        });
    }
    Ok(TableSnapshot {
        version: 1,
        rules: vec![SlottedRule {
            rule,
            slot: 1,
            output_slots: vec![0],
            input_slots: vec![10, 11, 12, 13],
            forced_input: None,
        }],
        interfaces: Interfaces::new([
            iface("d0", d0, ["10.0.0.2", "fd00::2"])?,
            iface("d1", d1, ["10.0.1.1", "fd00:1::1"])?,
        ]),
        fanout: Vec::new(),
    })
}
