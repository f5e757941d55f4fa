//! `mcrd`: MCR's daemon. `mcrd` runs the supervisor, which starts its
//! workers by re-executing itself as `mcrd worker`.

#![forbid(unsafe_code)]

mod channel;
mod supervisor;
mod worker;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use mcr_sys::ring::RingVersion;
use tracing_subscriber::EnvFilter;

#[derive(Parser, Debug)]
#[command(
    name = "mcrd",
    version,
    about = "MCR's multicast relay daemon (run as root, or with CAP_NET_RAW and CAP_NET_ADMIN)"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// A worker process; the supervisor starts these itself.
    #[command(hide = true)]
    Worker(worker::WorkerArgs),
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Worker processes, each pinned to its own core.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// The CPUs to pin workers to, comma separated (default: the CPUs this
    /// process may run on, in turn).
    #[arg(long, value_delimiter = ',')]
    cpus: Vec<usize>,
    /// The control socket.
    #[arg(long, default_value = "/run/mcr/mcrd.sock")]
    control_socket: PathBuf,
    /// Receive ring format: v2 (frame by frame) or v3 (block by block).
    #[arg(long, default_value = "v2", value_parser = worker::parse_ring)]
    ring: RingVersion,
    /// Receive ring memory per worker and input interface, in MiB.
    #[arg(long, default_value_t = 32)]
    ring_mb: usize,
    /// With --ring v3: how long a part-filled block waits, in ms.
    #[arg(long, default_value_t = 1)]
    block_timeout_ms: u32,

    /// Log level: error, warn, info, debug, trace.
    #[arg(long, default_value = "info")]
    log_level: String,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let level = match &cli.command {
        Some(Command::Worker(_)) => "warn".to_string(),
        None => cli.run.log_level.clone(),
    };
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_new(&level).unwrap_or_else(|_| EnvFilter::new("info")))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    // Every stream may need a socket or a ring: take all the descriptors
    // the hard limit allows (a worker inherits the raised limit).
    if let Err(e) = mcr_sys::process::raise_fd_limit() {
        tracing::warn!("could not raise the open-file limit: {e}");
    }
    let result = match cli.command {
        Some(Command::Worker(a)) => {
            let index = a.index;
            worker::run(a).map_err(|e| e.context(format!("worker {index}")))
        }
        None => run(cli.run),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcrd: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn run(a: RunArgs) -> anyhow::Result<()> {
    anyhow::ensure!((1..=64).contains(&a.workers), "--workers {} is outside 1-64", a.workers);
    anyhow::ensure!(
        (1..=4096).contains(&a.ring_mb),
        "--ring-mb {} is outside 1-4096",
        a.ring_mb
    );
    let allowed = mcr_sys::process::allowed_cpus().context("read this process's CPU affinity")?;
    anyhow::ensure!(!allowed.is_empty(), "this process may run on no CPU");
    let cpus: Vec<usize> = if a.cpus.is_empty() {
        (0..a.workers).map(|i| allowed[i % allowed.len()]).collect()
    } else {
        a.cpus.clone()
    };
    if let Some(c) = cpus.iter().find(|c| !allowed.contains(c)) {
        anyhow::bail!("--cpus: mcrd may not run on CPU {c} (it may use CPUs {allowed:?})");
    }
    let ring = match a.ring {
        RingVersion::V2 => "v2",
        RingVersion::V3 => "v3",
    };
    let worker_args = vec![
        "--workers".into(),
        a.workers.to_string(),
        "--ring".into(),
        ring.into(),
        "--ring-mb".into(),
        a.ring_mb.to_string(),
        "--block-timeout-ms".into(),
        a.block_timeout_ms.to_string(),
        "--fanout-seed".into(),
        (std::process::id() as u16).to_string(),
    ];
    supervisor::run(supervisor::Options {
        workers: a.workers,
        cpus,
        control_socket: a.control_socket,
        worker_args,
    })
}
