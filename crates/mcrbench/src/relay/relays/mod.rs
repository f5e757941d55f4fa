//! The relays `mcrbench relay` drives, behind one trait.

mod cmd;
mod kernel;
mod mcr;
mod socat;

use super::topo::Site;

/// A relay under test.
pub trait Relay {
    /// What kind it is (`mcr`, `socat`, `kernel`, `cmd`).
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
    /// Stops it.
    fn stop(&mut self);
}

/// Builds the relay of a `LABEL=KIND [ARGS]` spec.
pub fn from_spec(spec: &str) -> anyhow::Result<(String, Box<dyn Relay>)> {
    let (label, rest) = spec.split_once('=').unwrap_or((spec, spec));
    let rest = rest.trim();
    let (kind, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let relay: Box<dyn Relay> = match kind {
        "mcr" => Box::new(mcr::Mcr::new(args.split_whitespace().map(String::from).collect())),
        "socat" => Box::new(socat::Socat::default()),
        "kernel" => Box::new(kernel::Kernel::default()),
        "cmd" => {
            anyhow::ensure!(
                !args.trim().is_empty(),
                "--relay {spec}: `cmd` needs a command template after it"
            );
            Box::new(cmd::Cmd::new(args.trim().to_string()))
        }
        other => anyhow::bail!("--relay {spec}: unknown relay kind `{other}` (known: mcr, socat, kernel, cmd)"),
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
