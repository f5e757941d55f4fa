//! The I/O of `mcrgen impair`: AF_PACKET in, AF_PACKET out.

use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mcr_sys::clock::monotonic_ns;
use mcr_sys::epoll::Epoll;
use mcr_sys::mmsg::{MAX_BATCH, RecvBatch};
use mcr_sys::packet::{PacketRx, PacketTx};

use super::{Faults, ImpairReport, Impairer};
use crate::units::as_ns;

/// Everything `impair` needs.
#[derive(Debug, Clone)]
pub struct ImpairConfig {
    /// Where frames come in.
    pub input: String,
    /// Where they go out.
    pub output: String,
    /// What to do to which packets.
    pub faults: Faults,
    /// Seed of the fault generator.
    pub seed: u64,
    /// Stop after this long.
    pub duration: Option<Duration>,
}

/// Why `impair` could not run.
#[derive(Debug, thiserror::Error)]
pub enum ImpairError {
    /// The faults asked for make no sense.
    #[error("{0}")]
    Faults(String),
    /// Setting up failed.
    #[error("{what}: {source}")]
    Setup {
        /// What was being set up.
        what: String,
        /// The OS error.
        source: io::Error,
    },
    /// Receiving failed.
    #[error("receiving on {interface}: {source}")]
    Recv {
        /// The input interface.
        interface: String,
        /// The OS error.
        source: io::Error,
    },
}

/// Forwards frames from input to output, impairing the matched packets
/// (test packets, or every UDP datagram), until `stop` or the duration;
/// reports what it did.
pub fn run(cfg: &ImpairConfig, stop: &AtomicBool, ready: impl FnOnce(&str)) -> Result<ImpairReport, ImpairError> {
    cfg.faults.validate().map_err(ImpairError::Faults)?;
    let setup = |what: String| move |source| ImpairError::Setup { what, source };
    let in_idx = mcr_sys::iface::index(&cfg.input).map_err(setup(format!("interface `{}`", cfg.input)))?;
    let out_idx = mcr_sys::iface::index(&cfg.output).map_err(setup(format!("interface `{}`", cfg.output)))?;
    let rx = PacketRx::open(in_idx, 16 << 20).map_err(setup(format!("AF_PACKET socket on `{}`", cfg.input)))?;
    let tx = PacketTx::open(out_idx, false).map_err(setup(format!("AF_PACKET socket on `{}`", cfg.output)))?;
    let mut epoll = Epoll::new(1).map_err(setup("epoll".into()))?;
    epoll.add_readable(rx.as_fd(), 0).map_err(setup("epoll_ctl".into()))?;
    let mut imp = Impairer::new(cfg.faults.clone(), cfg.seed);
    let mut batch = RecvBatch::new(MAX_BATCH, 9216 + 64);
    let mut out: Vec<Vec<u8>> = Vec::new();
    let start = monotonic_ns();
    ready(&format!("ready: impairing {} -> {}", cfg.input, cfg.output));
    loop {
        let now = monotonic_ns();
        if stop.load(Ordering::Relaxed) || cfg.duration.is_some_and(|d| now - start >= as_ns(d)) {
            break;
        }
        imp.expire(now, &mut out);
        send(&tx, &mut out, &mut imp);
        // Wake for the next delayed or held packet (at most 1 ms late), or
        // every 5 ms to look at the clock and `stop`.
        let wait_ms = imp
            .next_due_ns()
            .map_or(5, |due| due.saturating_sub(now).div_ceil(1_000_000).min(5)) as i32;
        let readable = epoll.wait(wait_ms).map_err(setup("epoll_wait".into()))?.count() > 0;
        if readable {
            loop {
                let n = batch.recv(rx.as_fd()).map_err(|source| ImpairError::Recv {
                    interface: cfg.input.clone(),
                    source,
                })?;
                let now = monotonic_ns();
                for i in 0..n {
                    imp.frame(batch.get(i).0, now, &mut out);
                }
                if n < MAX_BATCH {
                    break;
                }
            }
        }
        send(&tx, &mut out, &mut imp);
    }
    imp.flush(&mut out);
    send(&tx, &mut out, &mut imp);
    Ok(imp.report())
}

fn send(tx: &PacketTx, out: &mut Vec<Vec<u8>>, imp: &mut Impairer) {
    for chunk in out.chunks(MAX_BATCH) {
        let frames: Vec<&[u8]> = chunk.iter().map(|f| f.as_slice()).collect();
        let mut off = 0;
        while off < frames.len() {
            match tx.send(&frames[off..], false) {
                Ok(m) => off += m,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    // Count the frame the interface refused and go on.
                    imp.report.send_errors += 1;
                    off += 1;
                }
            }
        }
    }
    out.clear();
}
