//! The relays `mcrbench relay` drives, behind one trait.

mod cmd;
mod kernel;
mod mcr;
mod socat;

use std::time::Duration;

use serde::Serialize;

use super::topo::Site;

/// How a relay that merges (`mcr --merge`) wants the generator to send:
/// every packet twice, the second time to the stream's second path
/// (`mcrgen send --copy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Copies {
    /// How much later each copy goes (`--copy-delay`); `None`: half the
    /// interval between two packets at the point's rate, so that
    /// originals and copies alternate evenly.
    pub delay: Option<Duration>,
    /// The copies are a market-data feed's A and B lines, arbitrated
    /// (`mcr --arbitrate FRAMING`): the generator must send that feed.
    pub feed: Option<&'static str>,
}

/// What a relay's merges did with what its inputs brought, all rules
/// together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MergeCounts {
    /// Packets the inputs brought, every input together.
    pub taken_in: u64,
    /// Of those, forwarded (the first copy of each).
    pub forwarded: u64,
    /// Dropped as copies of what an input brought before.
    pub duplicates: u64,
    /// Dropped otherwise: too late, too far from the stream, not RTP.
    pub dropped: u64,
    /// Sequence numbers no input brought in time.
    pub lost: u64,
}

impl MergeCounts {
    /// What changed since `before`.
    pub fn minus(&self, before: &MergeCounts) -> MergeCounts {
        MergeCounts {
            taken_in: self.taken_in.saturating_sub(before.taken_in),
            forwarded: self.forwarded.saturating_sub(before.forwarded),
            duplicates: self.duplicates.saturating_sub(before.duplicates),
            dropped: self.dropped.saturating_sub(before.dropped),
            lost: self.lost.saturating_sub(before.lost),
        }
    }
}

/// A relay under test.
pub trait Relay {
    /// What kind it is (`mcr`, `socat`, `kernel`, `kernel-joined`, `cmd`).
    fn kind(&self) -> &'static str;
    /// Whether it can rewrite group and port (the kernel cannot).
    fn can_rewrite(&self) -> bool {
        true
    }
    /// The most outputs one input may have, if limited.
    fn max_outputs(&self) -> Option<usize> {
        None
    }
    /// Why it cannot run here, and how to install what it needs.
    fn missing(&self) -> Option<String>;
    /// Starts relaying at every site, its processes pinned to `cpu`.
    fn start(&mut self, sites: &[Site], cpu: usize) -> anyhow::Result<()>;
    /// Its processes.
    fn pids(&self) -> Vec<u32>;
    /// Packets it counted as dropped itself: (receive side, send side).
    fn own_drops(&self) -> (u64, u64) {
        (0, 0)
    }
    /// Whether it takes every stream twice, from two paths, and merges
    /// them (`mcr --merge`): then how the generator sends the copies.
    fn copies(&self) -> Option<Copies> {
        None
    }
    /// With [`Relay::copies`]: what its merges did since it started.
    fn merge_counts(&self) -> Option<MergeCounts> {
        None
    }
    /// Stops it.
    fn stop(&mut self);
}

/// Builds the relay of a `LABEL=KIND [ARGS]` spec.
pub fn from_spec(spec: &str) -> anyhow::Result<(String, Box<dyn Relay>)> {
    let (label, rest) = spec.split_once('=').unwrap_or((spec, spec));
    let rest = rest.trim();
    let (kind, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let relay: Box<dyn Relay> = match kind {
        "mcr" => Box::new(
            mcr::Mcr::new(args.split_whitespace().map(String::from).collect())
                .map_err(|e| anyhow::anyhow!("--relay {spec}: {e}"))?,
        ),
        "socat" => Box::new(socat::Socat::default()),
        "kernel" => Box::new(kernel::Kernel::new(false)),
        "kernel-joined" => Box::new(kernel::Kernel::new(true)),
        "cmd" => {
            anyhow::ensure!(
                !args.trim().is_empty(),
                "--relay {spec}: `cmd` needs a command template after it"
            );
            Box::new(cmd::Cmd::new(args.trim().to_string()))
        }
        other => anyhow::bail!(
            "--relay {spec}: unknown relay kind `{other}` (known: mcr, socat, kernel, kernel-joined, cmd)"
        ),
    };
    Ok((label.to_string(), relay))
}

/// True if `program` is on the PATH.
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

/// Processes spawned per (site, stream, output), killed on drop.
#[derive(Default)]
struct Spawned {
    procs: Vec<mcr_testbed::Proc>,
}

impl Spawned {
    fn pids(&self) -> Vec<u32> {
        self.procs.iter().map(|p| p.pid()).collect()
    }

    fn stop(&mut self) {
        for mut p in self.procs.drain(..) {
            let _ = p.signal(mcr_testbed::Signal::Term);
            let _ = p.finish(std::time::Duration::from_secs(5));
        }
    }
}
