//! `mcrbench relay`: the classic multicast-relay experiments, run against
//! several relays in one invocation, measured the way MEASURING.md says a
//! relay must be measured on this machine.
//!
//! Layout: the generator and the sinks are pinned to one CPU, every relay
//! process to the other, and receive packet steering puts the kernel's
//! receive work for the relays' ingress on the relay CPU and for the sinks'
//! on the load CPU, so the relay CPU carries all of a relay's work, whether
//! it runs in a process or in the kernel. Each point: a warm-up run that is
//! not counted, then `--runs` runs reporting what the sinks received (every
//! packet checked by `mcrgen recv`), latency, the busy time of the relay CPU
//! and the relay processes' own CPU time per delivered packet, process count
//! and memory, and where every lost packet went. A run during which other
//! processes used more than 0.1 core is flagged and repeated.

pub(crate) mod cpu;
mod losses;
mod relays;
mod report;
mod run;
mod scenario;
mod topo;

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

use crate::stats::Spread;
use relays::Relay;
use run::{Layout, Run};
use scenario::{Params, Point};

/// Options of `mcrbench relay`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Scenarios to run, comma separated: chain-rate, dual-bridge, streams,
    /// high-density, fanout, pipeline (default: all).
    #[arg(long, value_delimiter = ',')]
    scenario: Vec<String>,
    /// Relays, each `LABEL=KIND [ARGS]`: `mcr=mcr`, `v3=mcr --ring v3`,
    /// `merge=mcr --merge` (each rule merges two copies of its stream,
    /// which the generator sends it twice; needs --wrap rtp or rtp-ts),
    /// `socat=socat`, `kernel=kernel`, or `NAME=cmd TEMPLATE` (placeholders
    /// {in_if} {in_addr} {in_group} {in_port} {out_if} {out_addr}
    /// {out_group} {out_port}). `kernel` is the kernel at its best: a
    /// route, and a group join only where a snooping bridge needs one
    /// (dual-bridge); `kernel-joined` joins every input group. Default:
    /// mcr, socat and kernel.
    #[arg(long = "relay")]
    relays: Vec<String>,
    /// chain-rate and dual-bridge: offered rates (`max`: as fast as the
    /// generator goes).
    #[arg(long, value_delimiter = ',')]
    rates: Vec<String>,
    /// chain-rate, dual-bridge, pipeline: packets per run.
    #[arg(long)]
    count: Option<u64>,
    /// pipeline: offered rates [default: max].
    #[arg(long, value_delimiter = ',')]
    pipeline_rates: Vec<String>,
    /// streams: the stream counts.
    #[arg(long, value_delimiter = ',')]
    streams: Vec<usize>,
    /// fanout: the output counts.
    #[arg(long, value_delimiter = ',')]
    outputs: Vec<usize>,
    /// fanout: the input rates, packets per second [default: 1000,20000].
    #[arg(long, value_delimiter = ',')]
    fanout_rates: Vec<u64>,
    /// streams, high-density, fanout: how long each run sends, in seconds
    /// [default: 5].
    #[arg(long)]
    seconds: Option<u64>,
    /// Counted runs per point.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// How packets arrive at the relay, comma separated: `spaced` (one at a
    /// time through the kernel's UDP send path, as encoders send), `tick`
    /// (every 100 µs the datagrams due by then, rate/10,000, in one
    /// `sendmmsg` through the UDP send path, as software senders with a
    /// pacing tick send) and `burst` (frames handed over in batches). Every
    /// point runs under each.
    #[arg(long, value_delimiter = ',', default_values = ["spaced", "burst"])]
    arrivals: Vec<scenario::Arrivals>,
    /// Seconds without traffic over which each relay's idle cost (the busy
    /// share of the relay CPU) is measured, once per scenario; 0 skips it
    /// [default: 10, or a quarter of a second with --quick].
    #[arg(long)]
    idle_seconds: Option<f64>,
    /// The relay the others are compared with, as ratios of relay core and
    /// whole machine µs per packet at each point [default: the first of
    /// kind `kernel`].
    #[arg(long)]
    reference: Option<String>,
    /// Every scenario at a small scale, one counted run each: for CI.
    /// Checks only that each relay delivered and the report is complete.
    #[arg(long)]
    quick: bool,
    /// The generator's and sinks' CPU.
    #[arg(long, default_value_t = 0)]
    load_cpu: usize,
    /// The relays' CPU.
    #[arg(long, default_value_t = 1)]
    relay_cpu: usize,
    /// How sinks take packets in: `ring` (cheap, so the sink is not the
    /// bottleneck) or `sockets`.
    #[arg(long, default_value = "ring")]
    sink: String,
    /// How the test payload is carried, as `mcrgen send --wrap`: `plain`,
    /// `rtp`, `ts` or `rtp-ts` (MPEG-TS fixes the datagram at 1,316 or
    /// 1,328 bytes, whatever the point's size).
    #[arg(long, default_value = "plain")]
    wrap: String,
    /// Print JSON lines instead of tables.
    #[arg(long)]
    json: bool,
    /// Also write a Markdown report, the JSON lines and SVG plots here.
    #[arg(long)]
    report: Option<std::path::PathBuf>,
}

/// One relay at one point.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    scenario: String,
    point: String,
    /// How the packets arrived: `spaced`, `tick` or `burst`.
    arrivals: scenario::Arrivals,
    relay: String,
    kind: String,
    /// `ok`, or why there are no runs (`cannot: ...`, `skipped: ...`,
    /// `failed: ...`).
    status: String,
    /// Whether the relay kept group and port (the kernel cannot rewrite).
    rewrote: bool,
    runs: Vec<Run>,
    delivered_pct: Option<Spread>,
    achieved_pps: Option<Spread>,
    p99_us: Option<Spread>,
    relay_core_us_per_pkt: Option<Spread>,
    /// Both CPUs' busy time per delivered packet.
    machine_us_per_pkt: Option<Spread>,
    relay_proc_us_per_pkt: Option<Spread>,
    /// The rate offered (none: `max`).
    offered_pps: Option<f64>,
}

fn spread(runs: &[Run], f: impl Fn(&Run) -> f64) -> Option<Spread> {
    Spread::of(&runs.iter().map(f).collect::<Vec<_>>())
}

impl Outcome {
    fn new(p: &Point, label: &str, relay: &dyn Relay, status: String, runs: Vec<Run>) -> Outcome {
        Outcome {
            scenario: p.scenario.into(),
            point: p.label.clone(),
            arrivals: p.arrivals,
            relay: label.into(),
            kind: relay.kind().into(),
            status,
            rewrote: relay.can_rewrite(),
            delivered_pct: spread(&runs, |r| r.delivered as f64 * 100.0 / r.expected.max(1) as f64),
            achieved_pps: spread(&runs, |r| r.achieved_pps),
            p99_us: spread(&runs, |r| r.p99_us),
            relay_core_us_per_pkt: spread(&runs, |r| r.relay_core_us_per_pkt),
            machine_us_per_pkt: spread(&runs, |r| r.machine_us_per_pkt),
            relay_proc_us_per_pkt: spread(&runs, |r| r.relay_proc_us_per_pkt),
            offered_pps: runs.first().and_then(|r| r.offered_pps),
            runs,
        }
    }
}

/// A relay's cost with rules in place and no traffic at all.
#[derive(Debug, Clone, Serialize)]
pub struct Idle {
    scenario: String,
    relay: String,
    /// The topology it ran on (the scenario's first).
    topology: String,
    seconds: f64,
    /// Busy share of the relay CPU over those seconds, percent.
    busy_pct: f64,
}

/// Set by SIGINT or SIGTERM: finish no further run, clean up, report what
/// was measured.
static STOP: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();

fn interrupted() -> bool {
    STOP.get().is_some_and(|s| s.load(Ordering::Relaxed))
}

/// `rtp_next`: see [`run::once`].
fn measure(
    topo: &topo::Topology,
    relay: &dyn Relay,
    p: &Point,
    a: &Args,
    layout: &Layout,
    rtp_next: &mut u16,
) -> anyhow::Result<Vec<Run>> {
    // The warm-up also lets a relay finish what it does on a stream's first
    // packets (the kernel installs a (*,G) route through an upcall to
    // smcrouted and drops what arrives meanwhile; a merge holds a stream's
    // first packets for one path differential).
    let _ = run::once(topo, relay, p, (p.count / 10).max(10), layout, rtp_next);
    let wanted = if a.quick { 1 } else { a.runs.max(1) };
    let mut runs = Vec::new();
    let mut repeats = 0;
    while runs.len() < wanted {
        anyhow::ensure!(!interrupted(), "interrupted");
        let r = run::once(topo, relay, p, p.count, layout, rtp_next)?;
        if r.others_cores > 0.1 && repeats < a.runs && !a.quick {
            eprintln!(
                "mcrbench: {} {}: other processes used {:.2} cores; repeating the run",
                p.scenario, p.label, r.others_cores
            );
            repeats += 1;
            continue;
        }
        runs.push(r);
    }
    Ok(runs)
}

pub fn run(a: &Args) -> anyhow::Result<ExitCode> {
    let stop = STOP.get_or_init(|| Arc::new(AtomicBool::new(false)));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(stop))?;
    }
    let mut params = if a.quick { Params::quick() } else { Params::full() };
    if !a.rates.is_empty() {
        params.rates = a.rates.clone();
    }
    if !a.pipeline_rates.is_empty() {
        params.pipeline_rates = a.pipeline_rates.clone();
    }
    if let Some(c) = a.count {
        params.count = c;
    }
    if !a.streams.is_empty() {
        params.stream_counts = a.streams.clone();
    }
    if !a.outputs.is_empty() {
        params.fanouts = a.outputs.clone();
    }
    if !a.fanout_rates.is_empty() {
        params.fanout_rates = a.fanout_rates.clone();
    }
    if let Some(s) = a.seconds {
        params.seconds = s.max(1);
    }
    let scenarios: Vec<String> = if a.scenario.is_empty() {
        scenario::ALL.iter().map(|s| s.to_string()).collect()
    } else {
        a.scenario.clone()
    };
    let specs: Vec<String> = if a.relays.is_empty() {
        vec!["mcr=mcr".into(), "socat=socat".into(), "kernel=kernel".into()]
    } else {
        a.relays.clone()
    };
    let mut relays: Vec<(String, Box<dyn Relay>)> = specs
        .iter()
        .map(|s| relays::from_spec(s))
        .collect::<anyhow::Result<_>>()?;
    for (label, relay) in &relays {
        if let Some(feed) = relay.copies().and_then(|c| c.feed) {
            anyhow::ensure!(
                a.wrap == feed,
                "--relay {label}: --arbitrate {feed} needs the generator to send that feed: add --wrap {feed}"
            );
            continue;
        }
        anyhow::ensure!(
            relay.copies().is_none() || carries_rtp(&a.wrap),
            "--relay {label}: --merge needs RTP (a merge takes each RTP sequence number once): \
             add --wrap rtp or --wrap rtp-ts (--wrap {} carries no RTP header)",
            a.wrap
        );
    }
    let layout = Layout {
        load_cpu: a.load_cpu,
        relay_cpu: a.relay_cpu,
        sink_via: a.sink.clone(),
        wrap: a.wrap.clone(),
        settle: !a.quick,
    };
    let idle_s = a.idle_seconds.unwrap_or(if a.quick { 0.25 } else { 10.0 });
    anyhow::ensure!(
        idle_s.is_finite() && idle_s >= 0.0,
        "--idle-seconds {idle_s}: give a number of seconds, 0 or more"
    );
    let mut all: Vec<Outcome> = Vec::new();
    let mut idles: Vec<Idle> = Vec::new();
    let mut out = report::Printer::new(a.json);
    for sc in &scenarios {
        if interrupted() {
            break;
        }
        let points = scenario::points(sc, &params, &a.arrivals)?;
        out.scenario(sc);
        // Points on the same topology share it, per relay, whatever their
        // arrivals.
        let mut shapes: Vec<scenario::Shape> = Vec::new();
        for p in &points {
            if !shapes.contains(&p.shape) {
                shapes.push(p.shape);
            }
        }
        for (nth, shape) in shapes.into_iter().enumerate() {
            let here: Vec<&Point> = points.iter().filter(|p| p.shape == shape).collect();
            for (label, relay) in &mut relays {
                if interrupted() {
                    break;
                }
                let skip = |relay: &dyn Relay, status: String| {
                    here.iter()
                        .map(|p| Outcome::new(p, label, relay, status.clone(), Vec::new()))
                        .collect::<Vec<_>>()
                };
                let outcomes = if let Some(why) = relay.missing() {
                    skip(relay.as_ref(), format!("skipped: {why}"))
                } else if let Some(m) = relay.max_outputs().filter(|&m| shape.outputs() > m) {
                    let why = format!(
                        "cannot: {} outputs and the input need more than the kernel's {} interfaces (MAXVIFS)",
                        shape.outputs(),
                        m + 1
                    );
                    skip(relay.as_ref(), why)
                } else if relay.copies().is_some() && !shape.has_second_path() {
                    let why = format!(
                        "cannot: --merge needs a second path for each stream, which only the chain has \
                         (scenarios chain-rate and streams), not the {}",
                        shape.describe()
                    );
                    skip(relay.as_ref(), why)
                } else {
                    let idle_for = (nth == 0 && idle_s > 0.0).then_some(idle_s);
                    match run_shape(shape, &here, relay.as_mut(), label, a, &layout, idle_for) {
                        Ok((o, idle)) => {
                            if let Some(i) = idle {
                                out.idle(&i)?;
                                idles.push(i);
                            }
                            o
                        }
                        Err(e) => {
                            relay.stop();
                            skip(relay.as_ref(), format!("failed: {e:#}"))
                        }
                    }
                };
                for o in outcomes {
                    out.outcome(&o)?;
                    all.push(o);
                }
            }
        }
    }
    let reference = a
        .reference
        .clone()
        .or_else(|| all.iter().find(|o| o.kind == "kernel").map(|o| o.relay.clone()));
    if let Some(dir) = &a.report {
        let command: Vec<String> = std::env::args().map(|a| shell_word(&a)).collect();
        report::write(dir, &all, &idles, reference.as_deref(), &command.join(" "))?;
        eprintln!("mcrbench: report written to {}", dir.display());
    }
    out.summary(&all, &idles, reference.as_deref());
    if interrupted() {
        eprintln!("mcrbench: interrupted; the results above are all that was measured");
        return Ok(ExitCode::from(130));
    }
    if a.quick {
        let bad: Vec<&Outcome> = all
            .iter()
            .filter(|o| o.status.starts_with("failed") || (o.status == "ok" && o.runs.iter().any(|r| r.delivered == 0)))
            .collect();
        for o in &bad {
            eprintln!(
                "mcrbench: {} {} {}: {}",
                o.scenario,
                o.point,
                o.relay,
                if o.status == "ok" {
                    "delivered nothing"
                } else {
                    &o.status
                }
            );
        }
        if !bad.is_empty() {
            return Ok(ExitCode::from(1));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn run_shape(
    shape: scenario::Shape,
    points: &[&Point],
    relay: &mut dyn Relay,
    label: &str,
    a: &Args,
    layout: &Layout,
    idle_s: Option<f64>,
) -> anyhow::Result<(Vec<Outcome>, Option<Idle>)> {
    let topo = shape.build(relay.can_rewrite())?;
    topo.steer(a.relay_cpu, a.load_cpu)?;
    relay.start(&topo.sites, a.relay_cpu)?;
    let idle = idle_s.map(|secs| {
        run::settle(layout);
        let busy = run::idle_busy_share(layout, std::time::Duration::from_secs_f64(secs));
        Idle {
            scenario: points.first().map_or_else(String::new, |p| p.scenario.to_string()),
            relay: label.to_string(),
            topology: shape.describe(),
            seconds: secs,
            busy_pct: busy * 100.0,
        }
    });
    let mut outcomes = Vec::new();
    // The rules stay for every point on this topology: a merged stream
    // goes on from one run to the next.
    let mut rtp_next = 0;
    for p in points {
        let o = match measure(&topo, relay, p, a, layout, &mut rtp_next) {
            Ok(runs) => Outcome::new(p, label, relay, "ok".into(), runs),
            Err(e) => Outcome::new(p, label, relay, format!("failed: {e:#}"), Vec::new()),
        };
        outcomes.push(o);
    }
    relay.stop();
    Ok((outcomes, idle))
}

/// Whether `mcrgen --wrap` carries an RTP header.
fn carries_rtp(wrap: &str) -> bool {
    matches!(wrap, "rtp" | "rtp-ts")
}

/// `word` as a shell would need it to read it back as one argument: as it
/// is when it holds only plain characters, else in single quotes.
fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_=,./:+@%".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod merge_tests {
    use super::carries_rtp;

    #[test]
    fn only_the_rtp_wraps_can_be_merged() {
        assert!(carries_rtp("rtp"));
        assert!(carries_rtp("rtp-ts"));
        assert!(!carries_rtp("plain"));
        assert!(!carries_rtp("ts"));
    }
}

#[cfg(test)]
mod shell_word_tests {
    use super::shell_word;

    #[test]
    fn a_report_command_reads_back_as_the_same_arguments() {
        assert_eq!(shell_word("--relay"), "--relay");
        assert_eq!(shell_word("mcr=mcr"), "mcr=mcr");
        assert_eq!(
            shell_word("before=mcr --bin-dir /tmp/b"),
            "'before=mcr --bin-dir /tmp/b'"
        );
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word(""), "''");
    }
}
