//! MCR itself: one `mcrd` per relay site, its workers pinned to the relay
//! CPU, one rule per stream added through `mcrctl`; with `--merge`, each
//! rule takes its stream from two inputs and merges them (SMPTE ST
//! 2022-7); with `--arbitrate FRAMING`, it arbitrates them as a market-data
//! feed's A and B lines.

use mcr_core::control::Reply;
use mcr_testbed::relay::Relay as Mcrd;

use super::{Copies, MergeCounts, Relay};
use crate::relay::topo::Site;

pub struct Mcr {
    args: Vec<String>,
    /// `--bin-dir DIR`: the `mcrd` and `mcrctl` of another build.
    bin_dir: Option<std::path::PathBuf>,
    /// `--no-health`: every rule added without input health.
    no_health: bool,
    /// `--merge [--copy-delay T]`: every rule takes its stream from a
    /// second path as well, `--mode merge`.
    merge: Option<Copies>,
    /// The rules' mode with `--merge` or `--arbitrate`.
    mode: String,
    daemons: Vec<Mcrd>,
}

impl Mcr {
    /// MCR with `args` for `mcrd`. Not passed on: `--bin-dir DIR` runs the
    /// `mcrd` and `mcrctl` found in DIR instead of this build's;
    /// `--no-health` adds every rule with `mcrctl add --no-health`;
    /// `--merge` gives every rule a second input (the stream's second
    /// path: the same interface and port, another group) and `--mode
    /// merge`, and has the generator send every packet to both; with it,
    /// `--copy-delay T` sends each copy T after its original.
    pub fn new(args: Vec<String>) -> anyhow::Result<Self> {
        let mut rest = Vec::new();
        let mut bin_dir = None;
        let mut no_health = false;
        let mut merge = false;
        let mut feed = None;
        let mut copy_delay = None;
        let mut it = args.into_iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--bin-dir" => bin_dir = it.next().map(std::path::PathBuf::from),
                "--no-health" => no_health = true,
                "--merge" => merge = true,
                "--arbitrate" => {
                    let f = it.next().ok_or_else(|| {
                        anyhow::anyhow!("--arbitrate needs a framing: moldudp64, mdp3, pitch or mitch")
                    })?;
                    feed = Some(match f.as_str() {
                        "moldudp64" => "moldudp64",
                        "mdp3" => "mdp3",
                        "pitch" => "pitch",
                        "mitch" => "mitch",
                        other => anyhow::bail!("--arbitrate {other}: write moldudp64, mdp3, pitch or mitch"),
                    });
                }
                "--copy-delay" => {
                    let t = it
                        .next()
                        .ok_or_else(|| anyhow::anyhow!("--copy-delay needs a time (0s, 10us, 20ms)"))?;
                    let d = mcrgen::units::parse_duration(&t).map_err(|e| anyhow::anyhow!("--copy-delay {e}"))?;
                    copy_delay = Some(d);
                }
                _ => rest.push(a),
            }
        }
        anyhow::ensure!(
            merge || feed.is_some() || copy_delay.is_none(),
            "--copy-delay delays the copies of --merge: give --merge with it"
        );
        anyhow::ensure!(!(merge && feed.is_some()), "--merge or --arbitrate, not both");
        Ok(Mcr {
            args: rest,
            bin_dir,
            no_health,
            merge: (merge || feed.is_some()).then_some(Copies {
                delay: copy_delay,
                feed,
            }),
            mode: feed.map_or_else(|| "merge".to_string(), |f| format!("arbitrate,framing={f}")),
            daemons: Vec::new(),
        })
    }

    /// With `--merge`: checks that `d` lists every rule it was given, each
    /// with two inputs, merged. (Only then: the rules of an older build's
    /// `mcrd`, with `--bin-dir`, may not read as this build's.)
    fn check_merges(&self, d: &Mcrd, site: &Site) -> anyhow::Result<()> {
        if self.merge.is_none() {
            return Ok(());
        }
        let rules = d.rule_list()?;
        anyhow::ensure!(
            rules.len() == site.forwards.len(),
            "mcrd lists {} rules, {} were added",
            rules.len(),
            site.forwards.len()
        );
        for r in &rules {
            let mode = r.redundancy.as_ref().map(|x| &x.mode);
            anyhow::ensure!(
                mode.is_some_and(|m| m.to_string() == self.mode) && r.input_count() == 2,
                "rule `{}` has {} input(s) and mode {mode:?}: two inputs in mode {} were asked for",
                r.name,
                r.input_count(),
                self.mode,
            );
        }
        Ok(())
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
                if self.merge.is_some() {
                    let second = f.second.ok_or_else(|| {
                        anyhow::anyhow!("--merge: the stream to {} has no second path in this topology", f.input)
                    })?;
                    a.extend([
                        "--input".into(),
                        format!("{}:{second}", f.in_if),
                        "--mode".into(),
                        self.mode.clone(),
                    ]);
                }
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
            self.check_merges(&d, site)?;
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

    fn copies(&self) -> Option<Copies> {
        self.merge
    }

    fn merge_counts(&self) -> Option<MergeCounts> {
        self.merge?;
        let mut t = MergeCounts::default();
        for d in &self.daemons {
            let Ok(Reply::Stats(s)) = d.ask(&["stats"]) else {
                return None;
            };
            for red in s.rules.iter().filter_map(|r| r.redundancy.as_ref()) {
                t.lost += red.lost;
                for i in &red.inputs {
                    t.taken_in += i.packets;
                    t.forwarded += i.forwarded;
                    t.duplicates += i.duplicates;
                    t.dropped += i.too_late + i.strays + i.not_rtp;
                }
            }
        }
        Some(t)
    }

    fn stop(&mut self) {
        for d in self.daemons.drain(..) {
            let _ = d.stop();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn mcr(args: &str) -> anyhow::Result<Mcr> {
        Mcr::new(args.split_whitespace().map(String::from).collect())
    }

    #[test]
    fn merge_and_its_copy_delay_are_ours_and_the_rest_goes_to_mcrd() {
        let m = mcr("--merge --ring v3 --no-health --copy-delay 20ms --datapath packet").expect("parsed");
        assert_eq!(m.args, ["--ring", "v3", "--datapath", "packet"]);
        assert!(m.no_health);
        assert_eq!(
            m.copies(),
            Some(Copies {
                feed: None,
                delay: Some(Duration::from_millis(20))
            })
        );
        let m = mcr("--merge").expect("parsed");
        assert_eq!(
            m.copies(),
            Some(Copies {
                delay: None,
                feed: None
            })
        );
        assert!(m.args.is_empty());
        let m = mcr("--ring v3").expect("parsed");
        assert_eq!(m.copies(), None);
        assert_eq!(m.merge_counts(), None);
    }

    #[test]
    fn a_copy_delay_needs_merge_and_a_time() {
        let e = mcr("--copy-delay 20ms").err().expect("refused").to_string();
        assert!(e.contains("give --merge"), "{e}");
        let e = mcr("--merge --copy-delay").err().expect("refused").to_string();
        assert!(e.contains("needs a time"), "{e}");
        let e = mcr("--merge --copy-delay soon").err().expect("refused").to_string();
        assert!(e.contains("--copy-delay") && e.contains("soon"), "{e}");
    }
}
