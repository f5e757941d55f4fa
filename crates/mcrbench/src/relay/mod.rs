//! `mcrbench relay`: relays measured on the chain topology, in one
//! invocation, the way MEASURING.md says a relay must be measured here.
//!
//! Layout: gen ↔ relay ↔ sink; the generator and the sink are pinned to
//! one CPU, the relay to the other, and receive packet steering puts the
//! kernel's receive work for the relay's ingress on the relay's CPU and for
//! the sink's on the sink's, so that the relay's core carries all of the
//! relay's work (ingress, relay, egress) whatever the relay is.
//!
//! Each point: a warm-up run that is not counted, then `--runs` runs, each
//! reporting what `mcrgen recv` saw (every packet checked), the busy time of
//! the relay's core per delivered packet, the relay processes' own CPU time
//! per delivered packet, where every lost packet went, and how much CPU
//! other processes took meanwhile (a run disturbed by more than 0.1 core is
//! flagged and repeated once).

mod cpu;
mod losses;
mod mcr;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use mcr_testbed::presets::Chain;
use mcr_testbed::traffic::{Receiver, send};
use serde::Serialize;

use crate::stats::Spread;
use losses::Losses;

/// Options of `mcrbench relay`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Relays to measure, each `LABEL=KIND [ARGS]`: `mcr=mcr`, or
    /// `v3=mcr --ring v3` for mcrd with extra arguments.
    #[arg(long = "relay", default_value = "mcr=mcr")]
    relays: Vec<String>,
    /// Offered rates in packets per second (`max`: as fast as the
    /// generator goes).
    #[arg(long, value_delimiter = ',', default_value = "50k,200k,400k,max")]
    rates: Vec<String>,
    /// Packets per run.
    #[arg(long, default_value_t = 1_000_000)]
    count: u64,
    /// UDP payload bytes.
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// Counted runs per point.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// The generator's and sink's CPU.
    #[arg(long, default_value_t = 0)]
    load_cpu: usize,
    /// The relay's CPU.
    #[arg(long, default_value_t = 1)]
    relay_cpu: usize,
    /// How the sink takes packets in: `ring` (an AF_PACKET ring: cheap, so
    /// the sink is not the bottleneck) or `sockets` (as an application).
    #[arg(long, default_value = "ring")]
    sink: String,
    /// Print JSON lines instead of tables.
    #[arg(long)]
    json: bool,
}

/// A relay under test.
trait RelayUnderTest {
    /// Starts forwarding `input` to `output` across `chain`, on `cpu`.
    fn start(&mut self, chain: &Chain, input: &str, output: &str, cpu: usize) -> anyhow::Result<()>;
    /// Its processes, for CPU accounting.
    fn pids(&self) -> Vec<u32>;
    /// Packets it knows it dropped: (ring drops, output drops).
    fn own_drops(&self) -> (u64, u64);
    /// Stops it.
    fn stop(&mut self);
}

fn relay_from_spec(spec: &str) -> anyhow::Result<(String, Box<dyn RelayUnderTest>)> {
    let (label, rest) = spec.split_once('=').unwrap_or((spec, spec));
    let mut words = rest.split_whitespace();
    let kind = words.next().unwrap_or("");
    let args: Vec<String> = words.map(String::from).collect();
    let relay: Box<dyn RelayUnderTest> = match kind {
        "mcr" => Box::new(mcr::Mcr::new(args)),
        other => anyhow::bail!("--relay {spec}: unknown relay kind `{other}` (known: mcr)"),
    };
    Ok((label.to_string(), relay))
}

/// One counted run.
#[derive(Debug, Clone, Serialize)]
struct Run {
    sent: u64,
    achieved_pps: f64,
    delivered: u64,
    lost: u64,
    duplicated: u64,
    reordered: u64,
    p50_us: f64,
    p99_us: f64,
    p999_us: f64,
    relay_core_us_per_pkt: f64,
    relay_proc_us_per_pkt: f64,
    others_cores: f64,
    losses: Losses,
}

/// A point: one relay at one rate.
#[derive(Debug, Serialize)]
struct Point {
    relay: String,
    rate: String,
    runs: Vec<Run>,
    delivered_pct: Spread,
    achieved_pps: Spread,
    p99_us: Spread,
    relay_core_us_per_pkt: Spread,
    relay_proc_us_per_pkt: Spread,
}

fn settle(load_cpu: usize, relay_cpu: usize) {
    // Wait (up to 10 s) until both CPUs are mostly idle.
    for _ in 0..20 {
        let a = (cpu::cpu_idle_ticks(load_cpu), cpu::cpu_idle_ticks(relay_cpu));
        let t = Instant::now();
        std::thread::sleep(Duration::from_millis(500));
        let b = (cpu::cpu_idle_ticks(load_cpu), cpu::cpu_idle_ticks(relay_cpu));
        let wall = t.elapsed().as_secs_f64();
        if let ((Some(a0), Some(a1)), (Some(b0), Some(b1))) = (a, b)
            && cpu::busy_s(wall, a0, b0) < 0.1 * wall
            && cpu::busy_s(wall, a1, b1) < 0.1 * wall
        {
            return;
        }
    }
}

fn one_run(chain: &Chain, relay: &dyn RelayUnderTest, a: &Args, rate: &str, count: u64) -> anyhow::Result<Run> {
    settle(a.load_cpu, a.relay_cpu);
    let load_cpu = a.load_cpu.to_string();
    let count_s = count.to_string();
    let size = a.size.to_string();
    let before_losses = Losses::read(chain, relay)?;
    let idle0 = cpu::cpu_idle_ticks(a.relay_cpu).unwrap_or(0);
    let pids = relay.pids();
    let proc0: f64 = pids.iter().filter_map(|&p| cpu::process_cpu_s(p, true)).sum();
    let all0 = cpu::all_processes();
    let t0 = Instant::now();
    let rx = Receiver::start(
        &chain.sink,
        &[
            "-s",
            "239.10.1.1:6001",
            "-i",
            Chain::SINK_IF,
            "--expect",
            &count_s,
            "--cpu",
            &load_cpu,
            "--idle-timeout",
            "2s",
            "--via",
            &a.sink,
            "--rcvbuf",
            "268435456",
        ],
    )?;
    let sent = send(
        &chain.generator,
        &[
            "-s",
            "239.1.1.1:5001",
            "-i",
            Chain::GEN_IF,
            "--count",
            &count_s,
            "--rate",
            rate,
            "--size",
            &size,
            "--cpu",
            &load_cpu,
        ],
        Duration::from_secs(3600),
    )?;
    let got = rx.finish(Duration::from_secs(3600))?;
    let wall = t0.elapsed().as_secs_f64();
    let idle1 = cpu::cpu_idle_ticks(a.relay_cpu).unwrap_or(idle0);
    let proc1: f64 = pids.iter().filter_map(|&p| cpu::process_cpu_s(p, true)).sum();
    let mut ours = pids.clone();
    ours.push(std::process::id());
    let others = cpu::others_s(&all0, &cpu::all_processes(), &ours) / wall;
    let after_losses = Losses::read(chain, relay)?;
    let t = &got.report.total;
    let delivered = t.unique;
    let per = |s: f64| {
        if delivered > 0 {
            s * 1e6 / delivered as f64
        } else {
            f64::NAN
        }
    };
    let lat = |f: fn(&mcrgen::histogram::Summary) -> u64| t.latency.as_ref().map_or(f64::NAN, |l| f(l) as f64 / 1e3);
    Ok(Run {
        sent: sent.packets,
        achieved_pps: sent.achieved_pps,
        delivered,
        lost: t.lost,
        duplicated: t.duplicated,
        reordered: t.reordered,
        p50_us: lat(|l| l.p50_ns),
        p99_us: lat(|l| l.p99_ns),
        p999_us: lat(|l| l.p999_ns),
        relay_core_us_per_pkt: per(cpu::busy_s(wall, idle0, idle1)),
        relay_proc_us_per_pkt: per(proc1 - proc0),
        others_cores: others,
        losses: after_losses.minus(&before_losses, got.report.socket_drops),
    })
}

fn spread(runs: &[Run], f: impl Fn(&Run) -> f64) -> Spread {
    Spread::of(&runs.iter().map(f).collect::<Vec<_>>()).unwrap_or(Spread {
        median: f64::NAN,
        min: f64::NAN,
        max: f64::NAN,
    })
}

pub fn run(a: &Args) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        a.runs >= 1 && a.count >= 10,
        "--runs must be at least 1 and --count at least 10"
    );
    let mut relays: Vec<(String, Box<dyn RelayUnderTest>)> = a
        .relays
        .iter()
        .map(|s| relay_from_spec(s))
        .collect::<anyhow::Result<_>>()?;
    if !a.json {
        header();
    }
    for (label, relay) in &mut relays {
        let chain = Chain::new("bench-chain")?;
        layout(&chain, a)?;
        relay.start(&chain, "239.1.1.1:5001", "239.10.1.1:6001", a.relay_cpu)?;
        for rate in &a.rates {
            // Warm-up, not counted.
            let _ = one_run(&chain, relay.as_ref(), a, rate, (a.count / 10).max(10));
            let mut runs = Vec::new();
            let mut repeats = 0;
            while runs.len() < a.runs {
                let r = one_run(&chain, relay.as_ref(), a, rate, a.count)?;
                if r.others_cores > 0.1 && repeats < a.runs {
                    eprintln!(
                        "mcrbench: {label} at {rate}: other processes used {:.2} cores; repeating the run",
                        r.others_cores
                    );
                    repeats += 1;
                    continue;
                }
                runs.push(r);
            }
            let p = Point {
                relay: label.clone(),
                rate: rate.clone(),
                delivered_pct: spread(&runs, |r| r.delivered as f64 * 100.0 / r.sent.max(1) as f64),
                achieved_pps: spread(&runs, |r| r.achieved_pps),
                p99_us: spread(&runs, |r| r.p99_us),
                relay_core_us_per_pkt: spread(&runs, |r| r.relay_core_us_per_pkt),
                relay_proc_us_per_pkt: spread(&runs, |r| r.relay_proc_us_per_pkt),
                runs,
            };
            if a.json {
                println!("{}", serde_json::to_string(&p)?);
            } else {
                print_point(&p);
            }
        }
        relay.stop();
    }
    Ok(ExitCode::SUCCESS)
}

/// Pinning is done per process; receive steering is set here.
fn layout(chain: &Chain, a: &Args) -> anyhow::Result<()> {
    chain.relay.rps(Chain::RELAY_IN_IF, 1 << a.relay_cpu)?;
    chain.sink.rps(Chain::SINK_IF, 1 << a.load_cpu)?;
    Ok(())
}

fn header() {
    println!(
        "{:<10} {:>7} {:>22} {:>20} {:>22} {:>20} {:>18}  losses (median run)",
        "relay", "rate", "achieved pps", "delivered %", "p99 latency µs", "core µs/pkt", "process µs/pkt"
    );
}

fn fmt(s: Spread, prec: usize) -> String {
    format!("{:.p$} ({:.p$}-{:.p$})", s.median, s.min, s.max, p = prec)
}

fn print_point(p: &Point) {
    let mut by_delivery: Vec<&Run> = p.runs.iter().collect();
    by_delivery.sort_by_key(|r| r.delivered);
    let median = by_delivery[by_delivery.len() / 2];
    println!(
        "{:<10} {:>7} {:>22} {:>20} {:>22} {:>20} {:>18}  {}",
        p.relay,
        p.rate,
        fmt(p.achieved_pps, 0),
        fmt(p.delivered_pct, 2),
        fmt(p.p99_us, 0),
        fmt(p.relay_core_us_per_pkt, 2),
        fmt(p.relay_proc_us_per_pkt, 2),
        median.losses.describe(median.lost)
    );
}
