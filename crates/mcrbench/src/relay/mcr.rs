//! MCR itself, as a relay under test: `mcrd` with its workers pinned to
//! the relay CPU, one rule added through `mcrctl`.

use mcr_core::control::Reply;
use mcr_testbed::presets::Chain;
use mcr_testbed::relay::Relay;

use super::RelayUnderTest;

pub struct Mcr {
    args: Vec<String>,
    relay: Option<Relay>,
}

impl Mcr {
    pub fn new(args: Vec<String>) -> Self {
        Mcr { args, relay: None }
    }
}

impl RelayUnderTest for Mcr {
    fn start(&mut self, chain: &Chain, input: &str, output: &str, cpu: usize) -> anyhow::Result<()> {
        let cpus = cpu.to_string();
        let mut args: Vec<&str> = vec!["--cpus", &cpus];
        args.extend(self.args.iter().map(String::as_str));
        let relay = Relay::start(&chain.relay, &args)?;
        relay.ctl_ok(&[
            "add",
            "bench",
            "--input",
            &format!("{}:{input}", Chain::RELAY_IN_IF),
            "--output",
            &format!("{}:{output}", Chain::RELAY_OUT_IF),
        ])?;
        self.relay = Some(relay);
        Ok(())
    }

    fn pids(&self) -> Vec<u32> {
        let Some(r) = &self.relay else { return Vec::new() };
        let mut pids = vec![r.pid()];
        if let Ok(Reply::Workers { workers }) = r.ask(&["workers"]) {
            pids.extend(workers.iter().filter_map(|w| w.pid));
        }
        pids
    }

    fn own_drops(&self) -> (u64, u64) {
        let Some(r) = &self.relay else { return (0, 0) };
        match r.ask(&["stats"]) {
            Ok(Reply::Stats(s)) => (
                s.workers.iter().map(|w| w.ring_drops).sum(),
                s.rules
                    .iter()
                    .flat_map(|r| &r.outputs)
                    .flat_map(|o| o.drops.values())
                    .sum(),
            ),
            _ => (0, 0),
        }
    }

    fn stop(&mut self) {
        if let Some(r) = self.relay.take() {
            let _ = r.stop();
        }
    }
}
