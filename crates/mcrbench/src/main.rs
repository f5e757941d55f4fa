//! `mcrbench`: MCR's demo and benchmarks.
//!
//! - `demo`: the README's first command: a chain of namespaces, test
//!   streams across it, and what arrived.
//! - `generator`: how fast and how accurately `mcrgen send` sends on this
//!   machine; the ceiling every relay measurement here is bounded by.
//! - `relay`: relays on the chain topology, measured as MEASURING.md says.
//! - `sockets`: the UDP socket API benchmark (docs/SOCKETS.md).
//! - `srt-fanout`: one stream to many SRT callers, by MCR and by one
//!   srt-live-transmit per caller (docs/SRT.md).

#![forbid(unsafe_code)]

mod demo;
mod generator;
mod program;
mod relay;
mod soak;
mod sockets;
mod srt_fanout;
mod stats;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "mcrbench", version, about = "MCR's demo and benchmarks (run as root)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Build a chain of namespaces, stream test traffic across it and show
    /// what arrived.
    Demo(demo::Args),
    /// Measure `mcrgen send`: its highest rate and its pacing accuracy.
    Generator(generator::Args),
    /// Measure relays on the chain topology: loss, latency, CPU per packet.
    Relay(Box<relay::Args>),
    /// What the eBPF program spends on a frame of a plain rule and of an
    /// arbitrated one (the kernel's time around each run of the program).
    Program(program::Args),
    /// Run MCR for a long time with many streams while rules churn: the
    /// untouched streams must lose nothing, memory and descriptors must not
    /// grow.
    Soak(soak::Args),
    /// Compare the ways of sending and receiving UDP on Linux: rates,
    /// loss, CPU per datagram and latency over a matrix of backends and
    /// dimensions (`mcrbench sockets compare A.json B.json` for two runs).
    Sockets(Box<sockets::Args>),
    /// One multicast stream to many SRT callers: MCR's one listener port
    /// against one srt-live-transmit per caller, every packet of every
    /// caller checked, CPU of each.
    SrtFanout(srt_fanout::Args),
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Demo(a) => demo::run(&a),
        Command::Generator(a) => generator::run(&a),
        Command::Relay(a) => relay::run(&a),
        Command::Program(a) => program::run(&a),
        Command::Soak(a) => soak::run(&a),
        Command::Sockets(a) => sockets::run(&a),
        Command::SrtFanout(a) => srt_fanout::run(&a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("mcrbench: {e:#}");
            ExitCode::from(2)
        }
    }
}
