//! The demo: MCR relaying translated streams across a chain of
//! namespaces, in a minute.

use std::process::ExitCode;
use std::time::Duration;

use mcr_testbed::presets::Chain;
use mcr_testbed::relay::Relay;
use mcr_testbed::traffic::Mcrgen;

/// Options of `mcrbench demo`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// How many streams (each its own rule).
    #[arg(long, default_value_t = 10)]
    streams: u32,
    /// Packets per stream.
    #[arg(long, default_value_t = 10_000)]
    count: u64,
    /// Packets per second, all streams together.
    #[arg(long, default_value = "50k")]
    rate: String,
    /// Payload bytes.
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// Worker processes of the relay.
    #[arg(long, default_value_t = 1)]
    workers: usize,
}

pub fn run(a: &Args) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        (1..=250).contains(&a.streams),
        "--streams {} is outside 1-250",
        a.streams
    );
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
    println!("IP forwarding is off in the relay namespace: nothing crosses it unless mcrd carries it.");
    println!();
    let workers = a.workers.to_string();
    let relay = Relay::start(&chain.relay, &["--workers", &workers])?;
    println!(
        "mcrd runs in the relay namespace with {} worker(s). Rules, added with mcrctl:",
        a.workers
    );
    for i in 1..=a.streams {
        let input = format!("{}:239.1.1.{i}:{}", Chain::RELAY_IN_IF, 5000 + i);
        let output = format!("{}:239.10.1.{i}:{}", Chain::RELAY_OUT_IF, 6000 + i);
        relay.ctl_ok(&["add", &format!("stream-{i}"), "--input", &input, "--output", &output])?;
        if i <= 3 || i == a.streams {
            println!("  mcrctl add stream-{i} --input {input} --output {output}");
        } else if i == 4 {
            println!("  ...");
        }
    }
    println!();
    let streams_in = format!("239.1.1.1+{}:5001+", a.streams);
    let streams_out = format!("239.10.1.1+{}:6001+", a.streams);
    let count = a.count.to_string();
    let size = a.size.to_string();
    println!(
        "Sending {} x {} packets of {} bytes at {} pps to {streams_in} from gen;",
        a.streams, a.count, a.size, a.rate
    );
    println!("receiving {streams_out} in sink, every packet checked (sequence, every payload byte, latency).");
    let rx = Mcrgen::streams(&streams_out, Chain::SINK_IF)
        .expect(&count)
        .recv(&chain.sink)?;
    let sent = Mcrgen::streams(&streams_in, Chain::GEN_IF)
        .count(&count)
        .rate(&a.rate)
        .size(&size)
        .send(&chain.generator, Duration::from_secs(3600))?;
    let got = rx.finish(Duration::from_secs(3600))?;
    println!();
    println!("Sender:");
    print!("  {}", sent.table());
    println!();
    println!("Receiver:");
    print!("{}", got.report.table(true));
    println!();
    println!("The relay (mcrctl stats):");
    print!("{}", relay.ctl_ok(&["stats"])?);
    let stopped = relay.stop()?;
    println!();
    print!("{}", stopped.stdout);
    println!();
    println!("The namespaces are removed now.");
    Ok(if got.code == Some(0) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
