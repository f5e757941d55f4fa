//! MCR itself: one `mcrd` per relay site, its workers pinned to the relay
//! CPU, one rule per stream added through `mcrctl`.

use mcr_core::control::Reply;
use mcr_testbed::relay::Relay as Mcrd;

use super::Relay;
use crate::relay::topo::Site;

pub struct Mcr {
    args: Vec<String>,
    /// `--bin-dir DIR`: the `mcrd` and `mcrctl` of another build.
    bin_dir: Option<std::path::PathBuf>,
    /// `--no-health`: every rule added without input health.
    no_health: bool,
    daemons: Vec<Mcrd>,
}

impl Mcr {
    /// MCR with `args` for `mcrd`; `--bin-dir DIR` among them (not passed
    /// on) runs the `mcrd` and `mcrctl` found in DIR instead of this
    /// build's, and `--no-health` (not passed on either) adds every rule
    /// with `mcrctl add --no-health`.
    pub fn new(args: Vec<String>) -> Self {
        let mut rest = Vec::new();
        let mut bin_dir = None;
        let mut no_health = false;
        let mut it = args.into_iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--bin-dir" => bin_dir = it.next().map(std::path::PathBuf::from),
                "--no-health" => no_health = true,
                _ => rest.push(a),
            }
        }
        Mcr {
            args: rest,
            bin_dir,
            no_health,
            daemons: Vec::new(),
        }
    }
}

impl Relay for Mcr {
    fn kind(&self) -> &'static str {
        "mcr"
    }

    fn missing(&self) -> Option<String> {
        match &self.bin_dir {
            Some(d) => (!d.join("mcrd").is_file() || !d.join("mcrctl").is_file())
                .then(|| format!("no mcrd and mcrctl in {}", d.display())),
            None => mcr_testbed::bin("mcrd").err().map(|e| e.to_string()),
        }
    }

    fn start(&mut self, sites: &[Site], cpu: usize) -> anyhow::Result<()> {
        let cpus = cpu.to_string();
        for site in sites {
            let mut args: Vec<&str> = vec!["--cpus", &cpus];
            args.extend(self.args.iter().map(String::as_str));
            let d = match &self.bin_dir {
                Some(dir) => Mcrd::start_from(dir, &site.ns, &args)?,
                None => Mcrd::start(&site.ns, &args)?,
            };
            for (i, f) in site.forwards.iter().enumerate() {
                let input = format!("{}:{}", f.in_if, f.input);
                let mut a: Vec<String> = vec!["add".into(), format!("s{i}"), "--input".into(), input];
                for o in &f.outputs {
                    a.push("--output".into());
                    a.push(format!("{}:{}", o.out_if, o.dest));
                }
                if self.no_health {
                    a.push("--no-health".into());
                }
                let refs: Vec<&str> = a.iter().map(String::as_str).collect();
                d.ctl_ok(&refs)?;
            }
            self.daemons.push(d);
        }
        Ok(())
    }

    fn pids(&self) -> Vec<u32> {
        let mut pids = Vec::new();
        for d in &self.daemons {
            pids.push(d.pid());
            if let Ok(Reply::Workers { workers }) = d.ask(&["workers"]) {
                pids.extend(workers.iter().filter_map(|w| w.pid));
            }
        }
        pids
    }

    fn own_drops(&self) -> (u64, u64) {
        let mut t = (0, 0);
        for d in &self.daemons {
            if let Ok(Reply::Stats(s)) = d.ask(&["stats"]) {
                t.0 += s.workers.iter().map(|w| w.ring_drops).sum::<u64>();
                t.1 += s
                    .rules
                    .iter()
                    .flat_map(|r| &r.outputs)
                    .flat_map(|o| o.drops.values())
                    .sum::<u64>();
            }
        }
        t
    }

    fn stop(&mut self) {
        for d in self.daemons.drain(..) {
            let _ = d.stop();
        }
    }
}
