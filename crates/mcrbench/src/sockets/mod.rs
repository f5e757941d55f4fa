//! `mcrbench sockets`: which way of sending and receiving UDP on Linux is
//! fastest, and at what CPU cost, over a matrix of backends, connection,
//! family, payload size, threads, batch size, socket reuse and path.
//!
//! Every point runs a bounded time (or count) in network namespaces of its
//! own, several times; each datagram carries its sender and sequence
//! number, so loss, duplicates and reordering are counted exactly, and
//! each thread's CPU time is read from its own clock.

mod backends;
mod matrix;
mod payload;
mod report;
mod run;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Subcommand;
use mcrgen::units::parse_duration;

pub use matrix::{Conn, Family, PathKind, Point, Reuse};

/// `mcrbench sockets`.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    command: Option<Cmd>,
    /// Backends, comma separated (`--list` names them).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "std,socket2,rustix,mmsg,gso,tokio,tokio-ready,uring,uring-multi,packet"
    )]
    backends: Vec<String>,
    /// Connected or unconnected senders.
    #[arg(long, value_delimiter = ',', default_value = "unconnected,connected")]
    conn: Vec<Conn>,
    /// Address families: v4, v6.
    #[arg(long, value_delimiter = ',', default_value = "v4")]
    family: Vec<Family>,
    /// UDP payload sizes in bytes (24 or more: the header each carries).
    #[arg(long, value_delimiter = ',', default_value = "64,1400")]
    sizes: Vec<usize>,
    /// Sender threads, and as many receiver threads.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    threads: Vec<usize>,
    /// Datagrams per send call (only the backends that batch take more
    /// than 1).
    #[arg(long, value_delimiter = ',', default_value = "1,32")]
    batch: Vec<usize>,
    /// Receiver sockets: `none` (one socket, read by every receiver
    /// thread), `addr` (one per thread with SO_REUSEADDR), `port` (one per
    /// thread with SO_REUSEPORT).
    #[arg(long, value_delimiter = ',', default_value = "none")]
    reuse: Vec<Reuse>,
    /// Paths: `lo` (unicast on loopback), `lo-mcast` (multicast looped back
    /// on lo), `veth` (unicast across a veth pair between two namespaces),
    /// `veth-mcast` (multicast across it).
    #[arg(long, value_delimiter = ',', default_value = "lo")]
    path: Vec<PathKind>,
    /// Measured time per run (after the warm-up).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    duration: Duration,
    /// Warm-up per run, not measured.
    #[arg(long, default_value = "200ms", value_parser = parse_duration)]
    warmup: Duration,
    /// Datagrams per sender thread instead of a time (then the whole run
    /// is measured).
    #[arg(long)]
    count: Option<u64>,
    /// Runs per point: the report gives the median and the spread.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Paced mode: each sender thread sends this many datagrams a second,
    /// and one-way latency percentiles are measured.
    #[arg(long)]
    pace: Option<f64>,
    /// Leave out this share of sequence numbers at the sender (0-0.5), to
    /// check the loss accounting: they must be reported lost, exactly.
    #[arg(long, default_value_t = 0.0, value_parser = parse_share)]
    inject_loss: f64,
    /// Receive buffer asked for per receiver socket, in bytes.
    #[arg(long, default_value_t = 4 << 20)]
    rcvbuf: usize,
    /// Pin sender threads to this CPU (receivers to the other).
    #[arg(long)]
    cpu: Option<usize>,
    /// Show the matrix (every point, and the points left out and why) and
    /// exit.
    #[arg(long)]
    list: bool,
    /// Run only the points whose label contains every one of these words
    /// (e.g. `mmsg,v6`).
    #[arg(long, value_delimiter = ',')]
    filter: Vec<String>,
    /// A small matrix at a modest paced rate, every backend, with loss
    /// injected: what CI runs. Checks that everything sends and receives;
    /// never a timing.
    #[arg(
        long,
        conflicts_with_all = [
            "backends", "conn", "family", "sizes", "threads", "batch", "reuse", "path", "duration", "warmup",
            "count", "runs", "pace", "inject_loss", "rcvbuf"
        ]
    )]
    quick: bool,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the results as CSV here.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Write SVG plots into this directory.
    #[arg(long)]
    plot: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Compare two runs' JSON: per point in both, the change in rates and
    /// CPU cost.
    Compare {
        /// The earlier run.
        a: PathBuf,
        /// The later run.
        b: PathBuf,
    },
}

/// A share of sequence numbers to leave out: 0 to 0.5.
fn parse_share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=0.5).contains(&v) => Ok(v),
        _ => Err(format!(
            "`{s}`: give a share from 0 to 0.5 (0.02 leaves out 2 % of sequence numbers)"
        )),
    }
}

/// Runs `mcrbench sockets`.
pub fn run(a: &Args) -> anyhow::Result<ExitCode> {
    if let Some(Cmd::Compare { a: x, b: y }) = &a.command {
        let read = |p: &PathBuf| -> anyhow::Result<report::Results> {
            let text = std::fs::read_to_string(p).with_context(|| format!("read {}", p.display()))?;
            serde_json::from_str(&text)
                .with_context(|| format!("{} is not a `mcrbench sockets --json` file", p.display()))
        };
        print!("{}", report::compare(&read(x)?, &read(y)?));
        return Ok(ExitCode::SUCCESS);
    }
    let all = backends::all();
    let mut spec = matrix::Spec {
        backends: a.backends.clone(),
        conn: a.conn.clone(),
        family: a.family.clone(),
        sizes: a.sizes.clone(),
        threads: a.threads.clone(),
        batch: a.batch.clone(),
        reuse: a.reuse.clone(),
        path: a.path.clone(),
    };
    let mut opts = run::Options {
        duration: a.duration,
        warmup: a.warmup,
        count: a.count,
        runs: a.runs.max(1),
        pace: a.pace,
        inject_loss: a.inject_loss,
        rcvbuf: a.rcvbuf,
        cpu: a.cpu,
    };
    if a.quick {
        spec = matrix::Spec::quick();
        opts = run::Options::quick();
    }
    let (points, skipped) = matrix::expand(&spec, &all)?;
    let points: Vec<Point> = points.into_iter().filter(|p| p.matches(&a.filter)).collect();
    if a.list {
        for b in &all {
            println!("{:<12} {}", b.name(), b.describe());
        }
        println!();
        for p in &points {
            println!("{}", p.label());
        }
        for (label, why) in &skipped {
            println!("{label}  (left out: {why})");
        }
        println!("{} points", points.len());
        return Ok(ExitCode::SUCCESS);
    }
    if points.is_empty() {
        anyhow::bail!("no point of the matrix matches --filter {}", a.filter.join(","));
    }
    let machine = report::Machine::read();
    eprintln!(
        "mcrbench sockets: {} points × {} runs on {}",
        points.len(),
        opts.runs,
        machine.summary()
    );
    let mut results = report::Results {
        machine,
        options: opts.describe(),
        points: Vec::new(),
    };
    for (i, p) in points.iter().enumerate() {
        let backend = all
            .iter()
            .find(|b| b.name() == p.backend)
            .context("a point's backend is one of all()")?;
        let r = run::point(backend.as_ref(), p, &opts);
        eprintln!("[{}/{}] {}", i + 1, points.len(), report::one_line(p, &r));
        results.points.push(report::PointResult::new(p, r));
    }
    print!("{}", report::table(&results));
    if let Some(path) = &a.json {
        std::fs::write(path, serde_json::to_string_pretty(&results)?)
            .with_context(|| format!("write {}", path.display()))?;
    }
    if let Some(path) = &a.csv {
        std::fs::write(path, report::csv(&results)).with_context(|| format!("write {}", path.display()))?;
    }
    if let Some(dir) = &a.plot {
        std::fs::create_dir_all(dir)?;
        for (name, svg) in report::plots(&results) {
            std::fs::write(dir.join(name), svg)?;
        }
    }
    let failed = results.points.iter().filter(|p| p.error.is_some()).count();
    Ok(if failed > 0 {
        eprintln!("mcrbench sockets: {failed} point(s) could not run");
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
