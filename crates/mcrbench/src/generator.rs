//! How fast `mcrgen send` goes on this machine, and how well it paces.
//!
//! Topology: a single veth link between two namespaces. By default nothing
//! listens at the far end, so the figure is the sender's own ceiling (the
//! far namespace's kernel still receives and discards each packet, on the
//! sender's CPU, as veth does). Each point is run several times; the median
//! is reported with the minimum and maximum.

use std::process::ExitCode;
use std::time::Duration;

use mcr_testbed::presets::Pipeline;
use mcr_testbed::traffic::{Receiver, send};
use serde::Serialize;

use crate::stats::Spread;

/// Options of `mcrbench generator`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Payload sizes in bytes for the ceiling.
    #[arg(long, value_delimiter = ',', default_value = "64,1024")]
    sizes: Vec<usize>,
    /// Target rates for the pacing check (packets per second; 1024-byte
    /// payloads).
    #[arg(long, value_delimiter = ',', default_value = "10k,100k,200k,400k")]
    rates: Vec<String>,
    /// Paths to measure: frames, udp.
    #[arg(long, value_delimiter = ',', default_value = "frames,udp")]
    via: Vec<String>,
    /// Runs per point.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Seconds per run.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// CPU to pin the sender to.
    #[arg(long, default_value_t = 0)]
    cpu: usize,
    /// Also run `mcrgen recv` at the far end (on the other CPU, with receive
    /// steering there), checking every packet.
    #[arg(long)]
    with_receiver: bool,
    /// Print JSON lines instead of tables.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
struct Point {
    kind: &'static str,
    via: String,
    payload_bytes: usize,
    target_pps: Option<f64>,
    achieved_pps: Spread,
    error_percent: Option<Spread>,
    received_clean: Option<bool>,
    runs: usize,
}

fn one_run(p: &Pipeline, a: &Args, via: &str, size: usize, rate: &str) -> anyhow::Result<(f64, Option<bool>)> {
    let secs = format!("{}s", a.seconds);
    let cpu = a.cpu.to_string();
    let size_s = size.to_string();
    let rx = if a.with_receiver {
        let other = if a.cpu == 0 { "1" } else { "0" };
        Some(Receiver::start(
            &p.sink,
            &[
                "-s",
                "239.1.1.1:5001",
                "-i",
                "veth1",
                "--cpu",
                other,
                "--idle-timeout",
                "1s",
            ],
        )?)
    } else {
        None
    };
    let r = send(
        &p.generator,
        &[
            "-s",
            "239.1.1.1:5001",
            "-i",
            "veth0",
            "--via",
            via,
            "--size",
            &size_s,
            "--rate",
            rate,
            "--duration",
            &secs,
            "--cpu",
            &cpu,
        ],
        Duration::from_secs_f64(a.seconds + 60.0),
    )?;
    let clean = match rx {
        Some(rx) => {
            let got = rx.finish(Duration::from_secs(60))?;
            Some(got.report.total.received == r.packets && got.report.problems.is_empty())
        }
        None => None,
    };
    Ok((r.achieved_pps, clean))
}

pub fn run(a: &Args) -> anyhow::Result<ExitCode> {
    if !(a.seconds.is_finite() && a.seconds > 0.0 && a.seconds <= 3600.0) {
        anyhow::bail!("--seconds {} is outside 0-3600", a.seconds);
    }
    let p = Pipeline::new("bench-generator", 0)?;
    if a.with_receiver {
        let other = if a.cpu == 0 { 2 } else { 1 };
        p.sink.rps("veth1", other)?;
    }
    let mut points = Vec::new();
    let mut measure = |kind: &'static str, via: &str, size: usize, rate: &str| -> anyhow::Result<()> {
        let target = mcrgen::units::parse_rate(rate).map_err(anyhow::Error::msg)?;
        let mut achieved = Vec::new();
        let mut clean = Some(true);
        for _ in 0..a.runs.max(1) {
            let (pps, c) = one_run(&p, a, via, size, rate)?;
            achieved.push(pps);
            clean = match (clean, c) {
                (Some(x), Some(y)) => Some(x && y),
                _ => None,
            };
        }
        let errors: Vec<f64> =
            target.map_or_else(Vec::new, |t| achieved.iter().map(|x| (x / t - 1.0) * 100.0).collect());
        let point = Point {
            kind,
            via: via.to_string(),
            payload_bytes: size,
            target_pps: target,
            achieved_pps: Spread::of(&achieved).unwrap_or(Spread {
                median: 0.0,
                min: 0.0,
                max: 0.0,
            }),
            error_percent: Spread::of(&errors),
            received_clean: clean,
            runs: achieved.len(),
        };
        if a.json {
            println!("{}", serde_json::to_string(&point)?);
        } else {
            print_point(&point);
        }
        points.push(point);
        Ok(())
    };
    if !a.json {
        println!(
            "{:<8} {:<7} {:>6} {:>10} {:>28} {:>24} {:>6}",
            "kind", "via", "bytes", "target", "achieved pps (median, min-max)", "error % (median, range)", "clean"
        );
    }
    for via in &a.via {
        for &size in &a.sizes {
            measure("ceiling", via, size, "max")?;
        }
    }
    for via in &a.via {
        for rate in &a.rates {
            measure("pacing", via, 1024, rate)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_point(p: &Point) {
    let a = p.achieved_pps;
    let err = p.error_percent.map_or("-".to_string(), |e| {
        format!("{:+.2} ({:+.2}..{:+.2})", e.median, e.min, e.max)
    });
    println!(
        "{:<8} {:<7} {:>6} {:>10} {:>28} {:>24} {:>6}",
        p.kind,
        p.via,
        p.payload_bytes,
        p.target_pps.map_or("max".to_string(), |t| format!("{t:.0}")),
        format!("{:.0} ({:.0}-{:.0})", a.median, a.min, a.max),
        err,
        p.received_clean
            .map_or("-".to_string(), |c| if c { "yes" } else { "NO" }.to_string())
    );
}
