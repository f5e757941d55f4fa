//! The demo: what MCR's tools do, on a chain of namespaces, in a minute.

use std::process::ExitCode;
use std::time::Duration;

use mcr_testbed::presets::Chain;
use mcr_testbed::traffic::{Receiver, send};

/// Options of `mcrbench demo`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Streams to send, in `mcrgen` syntax.
    #[arg(long, default_value = "239.1.1.1+10:5001+")]
    streams: String,
    /// Packets per stream.
    #[arg(long, default_value_t = 10_000)]
    count: u64,
    /// Packets per second, all streams together.
    #[arg(long, default_value = "50k")]
    rate: String,
    /// Payload bytes.
    #[arg(long, default_value_t = 1024)]
    size: usize,
}

pub fn run(a: &Args) -> anyhow::Result<ExitCode> {
    println!("Building the chain topology in network namespaces:");
    println!(
        "  gen ({} {}) <-> ({} {}) relay ({} {}) <-> ({} {}) sink",
        Chain::GEN_IF,
        Chain::GEN_ADDR,
        Chain::RELAY_IN_IF,
        Chain::RELAY_IN_ADDR,
        Chain::RELAY_OUT_IF,
        Chain::RELAY_OUT_ADDR,
        Chain::SINK_IF,
        Chain::SINK_ADDR
    );
    let chain = Chain::new("demo")?;
    println!(
        "  namespaces: {}",
        chain
            .tb
            .namespaces()
            .iter()
            .map(|n| n.name())
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!();
    println!(
        "The relay is not built yet, so the streams go straight across the first veth: \
         mcrgen send in gen, mcrgen recv in relay."
    );
    let count = a.count.to_string();
    let size = a.size.to_string();
    let rx = Receiver::start(
        &chain.relay,
        &["-s", &a.streams, "-i", Chain::RELAY_IN_IF, "--expect", &count],
    )?;
    let sent = send(
        &chain.generator,
        &[
            "-s",
            &a.streams,
            "-i",
            Chain::GEN_IF,
            "--count",
            &count,
            "--rate",
            &a.rate,
            "--size",
            &size,
        ],
        Duration::from_secs(3600),
    )?;
    let got = rx.finish(Duration::from_secs(3600))?;
    println!();
    println!("Sender:");
    print!("  {}", sent.table());
    println!();
    println!("Receiver (every packet checked: sequence, payload bytes, latency):");
    print!("{}", got.report.table(true));
    println!();
    println!("The namespaces are removed now.");
    Ok(if got.code == Some(0) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
