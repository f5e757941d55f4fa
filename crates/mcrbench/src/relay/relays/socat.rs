//! socat, the usual way: one process per stream and output, receiving
//! with `UDP4-RECV` and a group membership, sending with `UDP4-SENDTO` out
//! of the output interface.

use super::{Relay, Spawned, on_path};
use crate::relay::topo::Site;

#[derive(Default)]
pub struct Socat {
    spawned: Spawned,
}

impl Relay for Socat {
    fn kind(&self) -> &'static str {
        "socat"
    }

    fn missing(&self) -> Option<String> {
        (!on_path("socat")).then(|| "socat is not installed (Debian: apt-get install socat)".into())
    }

    fn start(&mut self, sites: &[Site], cpu: usize) -> anyhow::Result<()> {
        for site in sites {
            for f in &site.forwards {
                for o in &f.outputs {
                    let mut cmd = site.ns.command("taskset");
                    cmd.args(["-c", &cpu.to_string(), "socat", "-u", "-b", "65536"])
                        .arg(format!(
                            "UDP4-RECV:{},ip-add-membership={}:{},reuseaddr,rcvbuf=8388608",
                            f.input.port(),
                            f.input.ip(),
                            f.in_if
                        ))
                        .arg(format!(
                            "UDP4-SENDTO:{}:{},ip-multicast-if={},ip-multicast-ttl=15",
                            o.dest.ip(),
                            o.dest.port(),
                            o.out_addr
                        ));
                    self.spawned.procs.push(site.ns.spawn(cmd)?);
                }
            }
        }
        // socat has no readiness signal: give the joins a moment.
        std::thread::sleep(std::time::Duration::from_millis(
            300 + 2 * self.spawned.procs.len() as u64,
        ));
        Ok(())
    }

    fn pids(&self) -> Vec<u32> {
        self.spawned.pids()
    }

    fn stop(&mut self) {
        self.spawned.stop();
    }
}
