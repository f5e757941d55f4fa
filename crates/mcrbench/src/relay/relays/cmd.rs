//! Any other relay, given as a command template run once per stream and
//! output, inside the relay's namespace (`sh -c`). Placeholders:
//! `{in_if}`, `{in_addr}`, `{in_group}`, `{in_port}`, `{out_if}`,
//! `{out_addr}`, `{out_group}`, `{out_port}`.

use super::{Relay, Spawned};
use crate::relay::topo::{Forward, Output, Site};

pub struct Cmd {
    template: String,
    spawned: Spawned,
}

impl Cmd {
    pub fn new(template: String) -> Self {
        Cmd {
            template,
            spawned: Spawned::default(),
        }
    }

    fn fill(&self, f: &Forward, o: &Output) -> String {
        self.template
            .replace("{in_if}", &f.in_if)
            .replace("{in_addr}", &f.in_addr.to_string())
            .replace("{in_group}", &f.input.ip().to_string())
            .replace("{in_port}", &f.input.port().to_string())
            .replace("{out_if}", &o.out_if)
            .replace("{out_addr}", &o.out_addr.to_string())
            .replace("{out_group}", &o.dest.ip().to_string())
            .replace("{out_port}", &o.dest.port().to_string())
    }
}

impl Relay for Cmd {
    fn kind(&self) -> &'static str {
        "cmd"
    }

    fn missing(&self) -> Option<String> {
        None
    }

    fn start(&mut self, sites: &[Site], cpu: usize) -> anyhow::Result<()> {
        for site in sites {
            for f in &site.forwards {
                for o in &f.outputs {
                    let mut cmd = site.ns.command("taskset");
                    cmd.args(["-c", &cpu.to_string(), "sh", "-c", &self.fill(f, o)]);
                    self.spawned.procs.push(site.ns.spawn(cmd)?);
                }
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
        Ok(())
    }

    fn pids(&self) -> Vec<u32> {
        self.spawned.pids()
    }

    fn stop(&mut self) {
        self.spawned.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_filled() {
        let c = Cmd::new(
            "relay --from {in_group}:{in_port}@{in_if} --to {out_group}:{out_port}@{out_if} --src {out_addr}".into(),
        );
        let f = Forward {
            in_if: "veth1".into(),
            in_addr: "10.0.0.2".parse().expect("literal"),
            input: "239.1.1.1:5001".parse().expect("literal"),
            second: None,
            outputs: vec![],
        };
        let o = Output {
            out_if: "veth2".into(),
            out_addr: "10.0.1.1".parse().expect("literal"),
            dest: "239.10.1.1:6001".parse().expect("literal"),
        };
        assert_eq!(
            c.fill(&f, &o),
            "relay --from 239.1.1.1:5001@veth1 --to 239.10.1.1:6001@veth2 --src 10.0.1.1"
        );
    }
}
