//! The kernel's own multicast forwarding, programmed by smcroute: it keeps
//! group and port as they are (the kernel cannot rewrite them) and stops at
//! 32 interfaces (MAXVIFS).
//!
//! `kernel` is the kernel at its best: an (S,G) route for each stream, and
//! a group join only where a snooping switch upstream needs one to pass
//! the stream at all (the dual bridge). A join elsewhere makes the kernel
//! also deliver every datagram to its own stack, to no socket, which costs
//! it a third or more per packet and so flatters any relay compared with
//! it. `kernel-joined` joins everywhere, labelled as such, for the
//! comparison with a router configured that way.

use std::fmt::Write;

use super::{Relay, Spawned, on_path};
use crate::relay::topo::Site;

#[derive(Default)]
pub struct Kernel {
    /// Join every input group, whether the topology needs it or not.
    always_join: bool,
    spawned: Spawned,
    files: Vec<std::path::PathBuf>,
}

impl Kernel {
    /// The kernel at its best (`kernel`), or joining every input group
    /// (`kernel-joined`).
    pub fn new(always_join: bool) -> Self {
        Kernel {
            always_join,
            ..Kernel::default()
        }
    }
}

/// MAXVIFS: the kernel's limit on multicast interfaces, input included.
const MAXVIFS: usize = 32;

impl Relay for Kernel {
    fn kind(&self) -> &'static str {
        if self.always_join { "kernel-joined" } else { "kernel" }
    }

    fn can_rewrite(&self) -> bool {
        false
    }

    fn max_outputs(&self) -> Option<usize> {
        Some(MAXVIFS - 1)
    }

    fn missing(&self) -> Option<String> {
        (!on_path("smcrouted")).then(|| "smcroute is not installed (Debian: apt-get install smcroute)".into())
    }

    fn start(&mut self, sites: &[Site], cpu: usize) -> anyhow::Result<()> {
        for site in sites {
            let ident = format!("{}-smc", site.ns.name());
            let conf = std::path::PathBuf::from(format!("/tmp/{ident}.conf"));
            let mut c = String::new();
            let mut ifs: Vec<&str> = Vec::new();
            for f in &site.forwards {
                ifs.push(&f.in_if);
                ifs.extend(f.outputs.iter().map(|o| o.out_if.as_str()));
            }
            ifs.sort();
            ifs.dedup();
            for i in &ifs {
                let _ = writeln!(c, "phyint {i} enable");
            }
            for f in &site.forwards {
                let outs: Vec<&str> = f.outputs.iter().map(|o| o.out_if.as_str()).collect();
                if self.always_join || site.snooped {
                    let _ = writeln!(c, "mgroup from {} group {}", f.in_if, f.input.ip());
                }
                let _ = writeln!(
                    c,
                    "mroute from {} group {} to {}",
                    f.in_if,
                    f.input.ip(),
                    outs.join(" ")
                );
            }
            std::fs::write(&conf, c)?;
            self.files.push(conf.clone());
            let mut cmd = site.ns.command("taskset");
            cmd.args([
                "-c",
                &cpu.to_string(),
                "smcrouted",
                "-n",
                "-N",
                "-l",
                "notice",
                "-i",
                &ident,
            ])
            .arg("-f")
            .arg(&conf)
            .args(["-u", &format!("/tmp/{ident}.sock"), "-P", &format!("/tmp/{ident}.pid")]);
            let mut p = site.ns.spawn(cmd)?;
            p.wait_for_stderr("Ready", std::time::Duration::from_secs(30))?;
            self.spawned.procs.push(p);
        }
        Ok(())
    }

    fn pids(&self) -> Vec<u32> {
        self.spawned.pids()
    }

    fn stop(&mut self) {
        self.spawned.stop();
        for f in self.files.drain(..) {
            let _ = std::fs::remove_file(f);
        }
    }
}
