//! `mcrbench soak`: MCR carrying many streams for a long time while its
//! rules churn (one rule added and one removed every second). The
//! untouched streams must lose nothing, and the relay's resident memory
//! and open file descriptors must not grow.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use mcr_testbed::presets::Chain;
use mcr_testbed::relay::Relay;
use mcr_testbed::traffic::{Receiver, send};
use serde::Serialize;

/// Options of `mcrbench soak`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// How long the streams flow (e.g. 10m, 90s).
    #[arg(long, default_value = "10m", value_parser = mcrgen::units::parse_duration)]
    duration: Duration,
    /// Streams, each its own rule (1-250).
    #[arg(long, default_value_t = 100)]
    streams: u32,
    /// Packets per second, all streams together.
    #[arg(long, default_value = "20k", value_parser = parse_pps)]
    rate: f64,
    /// Payload bytes.
    #[arg(long, default_value_t = 512)]
    size: usize,
    /// How often one rule is added and one removed.
    #[arg(long, default_value = "1s", value_parser = mcrgen::units::parse_duration)]
    churn_every: Duration,
    /// Worker processes of the relay.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
}

fn parse_pps(s: &str) -> Result<f64, String> {
    mcrgen::units::parse_rate(s)?.ok_or_else(|| "give a rate (e.g. 20k), not max".into())
}

/// Memory and descriptors of the relay's processes (supervisor and
/// workers) at one moment.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Resources {
    /// Resident memory, summed, in bytes.
    pub rss_bytes: u64,
    /// Open file descriptors, summed.
    pub fds: u64,
    /// How many processes.
    pub processes: usize,
}

/// What a soak found.
#[derive(Debug, Serialize)]
pub struct Soak {
    /// Seconds the streams flowed.
    pub duration_s: f64,
    /// Streams.
    pub streams: u32,
    /// Packets sent, all streams.
    pub sent: u64,
    /// Packets received, all streams.
    pub received: u64,
    /// Lost, duplicated and reordered, all streams.
    pub lost: u64,
    /// Duplicated.
    pub duplicated: u64,
    /// Reordered.
    pub reordered: u64,
    /// Rules added and removed while the streams flowed.
    pub churned: u64,
    /// The relay after warm-up.
    pub start: Resources,
    /// The relay at the end.
    pub end: Resources,
    /// Worker restarts (should be none).
    pub restarts: u64,
    /// What went wrong; empty when the soak passed.
    pub problems: Vec<String>,
}

fn proc_status(pid: u32, key: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let v = s.lines().find_map(|l| l.strip_prefix(key))?;
    v.split_whitespace().next()?.parse().ok()
}

fn resources(relay: &Relay) -> anyhow::Result<Resources> {
    let mut pids = vec![relay.pid()];
    pids.extend(relay.workers()?.iter().filter_map(|w| w.pid));
    let mut r = Resources {
        rss_bytes: 0,
        fds: 0,
        processes: pids.len(),
    };
    for pid in pids {
        r.rss_bytes += proc_status(pid, "VmRSS:").unwrap_or(0) * 1024;
        r.fds += std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64);
    }
    Ok(r)
}

/// Memory may move a little (allocator pages, stack); more than this is
/// growth.
const RSS_SLACK_BYTES: u64 = 8 << 20;

pub fn run(a: &Args) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        (1..=250).contains(&a.streams),
        "--streams {} is outside 1-250",
        a.streams
    );
    let per_stream = ((a.rate * a.duration.as_secs_f64()) / f64::from(a.streams)).ceil() as u64;
    anyhow::ensure!(per_stream > 0, "--rate and --duration give no packets");
    let chain = Chain::new("soak")?;
    let relay = Relay::start(&chain.relay, &["--workers", &a.workers.to_string()])?;
    for i in 1..=a.streams {
        relay.ctl_ok(&[
            "add",
            &format!("stream-{i}"),
            "--input",
            &format!("{}:239.1.1.{i}:{}", Chain::RELAY_IN_IF, 5000 + i),
            "--output",
            &format!("{}:239.10.1.{i}:{}", Chain::RELAY_OUT_IF, 6000 + i),
        ])?;
    }
    let count = per_stream.to_string();
    let rx = Receiver::start(
        &chain.sink,
        &[
            "-s",
            &format!("239.10.1.1+{}:6001+", a.streams),
            "-i",
            Chain::SINK_IF,
            "--expect",
            &count,
            "--idle-timeout",
            "5s",
        ],
    )?;
    let gen_ns = chain.generator.clone();
    let (streams, rate, size) = (a.streams, a.rate, a.size);
    let sender = std::thread::spawn(move || {
        send(
            &gen_ns,
            &[
                "-s",
                &format!("239.1.1.1+{streams}:5001+"),
                "-i",
                Chain::GEN_IF,
                "--count",
                &per_stream.to_string(),
                "--rate",
                &format!("{rate}"),
                "--size",
                &size.to_string(),
            ],
            Duration::from_secs(24 * 3600),
        )
    });
    let churn_rule = |k: u64| {
        (
            format!("churn-{k}"),
            format!("{}:239.2.{}.{}:7001", Chain::RELAY_IN_IF, (k / 250) % 250, k % 250 + 1),
            format!(
                "{}:239.20.{}.{}:8001",
                Chain::RELAY_OUT_IF,
                (k / 250) % 250,
                k % 250 + 1
            ),
        )
    };
    // The table holds one churning rule throughout (its group membership,
    // too), so the start and the end compare the same table size.
    let (name, input, output) = churn_rule(0);
    relay.ctl_ok(&["add", &name, "--input", &input, "--output", &output])?;
    // Warm up, then the starting point.
    std::thread::sleep(Duration::from_secs(2));
    let start = resources(&relay)?;
    let began = Instant::now();
    let mut churned = 0u64;
    let mut problems = Vec::new();
    while !sender.is_finished() {
        std::thread::sleep(a.churn_every);
        let (name, input, output) = churn_rule(churned + 1);
        if let Err(e) = relay.ctl_ok(&["add", &name, "--input", &input, "--output", &output]) {
            problems.push(format!("adding {name}: {e}"));
            break;
        }
        let (old, _, _) = churn_rule(churned);
        if let Err(e) = relay.ctl_ok(&["remove", &old]) {
            problems.push(format!("removing {old}: {e}"));
            break;
        }
        churned += 1;
    }
    let sent = sender
        .join()
        .map_err(|_| anyhow::anyhow!("the sender thread panicked"))??;
    let got = rx.finish(Duration::from_secs(600))?;
    // The least of a few readings: a descriptor of the control connection
    // just closed may not be gone yet.
    let mut end = resources(&relay)?;
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(200));
        let r = resources(&relay)?;
        if r.fds < end.fds || (r.fds == end.fds && r.rss_bytes < end.rss_bytes) {
            end = r;
        }
    }
    let restarts = relay.workers()?.iter().map(|w| w.restarts).sum();
    for s in &got.report.streams {
        let p = s.problems(Some(per_stream));
        if !p.is_empty() {
            problems.push(format!("{}: {}", s.destination, p.join("; ")));
        }
    }
    if end.fds > start.fds {
        problems.push(format!("open descriptors grew from {} to {}", start.fds, end.fds));
    }
    if end.rss_bytes > start.rss_bytes + RSS_SLACK_BYTES {
        problems.push(format!(
            "resident memory grew from {} to {} bytes",
            start.rss_bytes, end.rss_bytes
        ));
    }
    if restarts > 0 {
        problems.push(format!("{restarts} worker restart(s)"));
    }
    let t = &got.report.total;
    let soak = Soak {
        duration_s: began.elapsed().as_secs_f64() + 2.0,
        streams: a.streams,
        sent: sent.packets,
        received: t.received,
        lost: t.lost,
        duplicated: t.duplicated,
        reordered: t.reordered,
        churned,
        start,
        end,
        restarts,
        problems,
    };
    let _ = relay.stop();
    if a.json {
        println!("{}", serde_json::to_string(&soak)?);
    } else {
        println!(
            "soak: {} streams for {:.0} s, {} packets sent, {} received ({} lost, {} duplicated, {} reordered); {} rules added and removed",
            soak.streams,
            soak.duration_s,
            soak.sent,
            soak.received,
            soak.lost,
            soak.duplicated,
            soak.reordered,
            soak.churned
        );
        println!(
            "relay: {} process(es), resident memory {:.1} -> {:.1} MB, open descriptors {} -> {}, {} worker restart(s)",
            soak.end.processes,
            soak.start.rss_bytes as f64 / 1e6,
            soak.end.rss_bytes as f64 / 1e6,
            soak.start.fds,
            soak.end.fds,
            soak.restarts
        );
        for p in &soak.problems {
            println!("PROBLEM: {p}");
        }
    }
    Ok(if soak.problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
