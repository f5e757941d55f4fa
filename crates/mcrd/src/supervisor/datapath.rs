//! The in-kernel data path: the supervisor loads MCR's BPF object once,
//! attaches its tc program to the input interfaces of the rules it can
//! carry, and keeps its maps equal to the rule table, change by change.
//! The workers' rings filter with its socket filter, so that a frame is
//! forwarded by the kernel or by a worker, never both.
//!
//! Every attachment is a tcx link held by this process: when the rules of
//! an interface go, the link is closed. Under systemd a copy of each link
//! sits in the service's file-descriptor store, so the program forwards on
//! across a restart or a crash of mcrd, with the table it had; the next
//! mcrd takes the links over ([`Datapath::adopt`]) and switches them to its
//! own program once its maps hold its whole table. When the service
//! stops, systemd closes the copies and the program is gone from the
//! interface, so a stopped relay never keeps forwarding or dropping the
//! traffic it used to carry. Without systemd, a killed mcrd takes its
//! links with it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use mcr_bpf::Loaded;
use mcr_core::datapath::{FastTable, Ineligible, Maps};
use mcr_core::interfaces::Interfaces;
use mcr_core::stats::StatsLayout;
use mcr_core::table::MatchTable;
use mcr_sys::bpf::{Link, MappedCounters};

/// The loaded data path.
#[derive(Debug)]
pub struct Datapath {
    // Field order: links close (programs detach) before the object goes.
    links: BTreeMap<u32, Link>,
    /// Links the mcrd before left, still running its program with its
    /// maps, until the next reconcile switches them to this one's.
    adopted: BTreeMap<u32, Link>,
    loaded: Loaded,
    maps: Maps,
    fast: FastTable,
    /// Interfaces the program could not be attached to, and why.
    refused: BTreeMap<u32, String>,
    /// Each arbitrated rule's line race (by rule slot): its entry, and its
    /// lag histograms sampled once a second over the last 10 s, since the
    /// entry was last written afresh.
    race: BTreeMap<u32, (u32, RaceSamples)>,
}

/// A rule's lag histograms (one a line) as sampled, oldest first.
type RaceSamples = VecDeque<(Instant, Vec<Vec<u64>>)>;

/// The lines of an arbitrated rule the kernel keeps histograms for.
fn datapath_lines() -> usize {
    mcr_core::datapath::ARB_LINES as usize
}

/// How far back the line race looks.
const RACE_SPAN: Duration = Duration::from_secs(10);

/// Entries in the outputs array.
const OUTPUT_ENTRIES: u32 = 65_536;

impl Datapath {
    /// Loads the object and maps its counters (the part of one statistics
    /// block of `layout`'s shape that the data path writes).
    pub fn load(layout: &StatsLayout) -> anyhow::Result<Datapath> {
        let loaded = Loaded::load(u32::try_from(layout.datapath_len())?, OUTPUT_ENTRIES)?;
        Ok(Datapath {
            links: BTreeMap::new(),
            adopted: BTreeMap::new(),
            loaded,
            maps: Maps::new(OUTPUT_ENTRIES),
            fast: FastTable::default(),
            refused: BTreeMap::new(),
            race: BTreeMap::new(),
        })
    }

    /// Takes over the links the mcrd before left (each until the next
    /// [`Datapath::reconcile`], which switches those its rules still need
    /// to this program and closes the rest). Returns what could not be
    /// taken, and why.
    pub fn adopt(&mut self, links: Vec<(String, std::os::fd::OwnedFd)>) -> Vec<String> {
        let mut refused = Vec::new();
        for (name, fd) in links {
            match Link::adopt(fd) {
                Ok(link) => {
                    if let Some(old) = self.adopted.insert(link.ifindex(), link) {
                        refused.push(format!("`{name}`: a second link on interface #{}", old.ifindex()));
                    }
                }
                Err(e) => refused.push(format!("`{name}`: {e}")),
            }
        }
        refused
    }

    /// The links, to keep in systemd's store: name, id, descriptor.
    pub fn held(&self) -> impl Iterator<Item = super::handover::Held<'_>> {
        self.links
            .values()
            .chain(self.adopted.values())
            .map(|l| (format!("tcx-{}", l.ifindex()), u64::from(l.id()), l.as_fd()))
    }

    /// The workers' ring filter.
    pub fn ring_filter(&self) -> BorrowedFd<'_> {
        self.loaded.ring_filter().as_fd()
    }

    /// The ring of health records worker 0 reads.
    pub fn health_ring(&self) -> Option<BorrowedFd<'_>> {
        self.loaded.health_ring().ok().map(AsFd::as_fd)
    }

    /// The counters the program adds to.
    pub fn counters(&self) -> &MappedCounters {
        self.loaded.counters()
    }

    /// Takes the maps and attachments to `table`. Returns the problems it
    /// met (each also logged once).
    pub fn reconcile(&mut self, table: &MatchTable, ifs: &Interfaces, layout: &StatsLayout) -> Vec<String> {
        let mut problems = Vec::new();
        // A link to an interface that is gone was closed by the kernel; one
        // that comes back (under a new index) gets a new one.
        self.links.retain(|i, _| ifs.by_index(*i).is_some());
        self.adopted.retain(|i, _| ifs.by_index(*i).is_some());
        let wanted = FastTable::wanted_interfaces(table, layout);
        for &ifindex in &wanted {
            if self.links.contains_key(&ifindex) || self.adopted.contains_key(&ifindex) {
                continue;
            }
            // An interface the program could not be attached to is tried
            // again on each change (it may have come back).
            match self.loaded.ingress().attach_tcx_ingress(ifindex) {
                Ok(link) => {
                    if self.refused.remove(&ifindex).is_some() {
                        tracing::info!("kernel data path attached to {}", name_of(ifs, ifindex));
                    }
                    self.links.insert(ifindex, link);
                }
                Err(e) => {
                    let why = format!(
                        "kernel data path on `{}`: {e:#}; the workers forward its rules",
                        name_of(ifs, ifindex)
                    );
                    if self.refused.insert(ifindex, why.clone()).as_ref() != Some(&why) {
                        tracing::warn!("{why}");
                    }
                    problems.push(why);
                }
            }
        }
        let next = FastTable::compile(table, layout, |i| {
            self.links.contains_key(&i) || self.adopted.contains_key(&i)
        });
        match self.maps.plan(&next) {
            Ok(plan) => {
                match self.loaded.write(&plan) {
                    Ok(()) => {
                        // An entry written afresh (a new arbitrated rule, or
                        // a new framing) has its histograms zeroed: its race
                        // starts from zero, not from samples of the rule
                        // that had the same slot and entry before.
                        self.race
                            .retain(|_, (i, _)| !plan.arbs.iter().any(|(fresh, _)| fresh == i));
                        self.take_over(&wanted, ifs, &mut problems);
                    }
                    Err(e) => {
                        let why = format!("kernel data path: writing its maps: {e}");
                        tracing::error!("{why}");
                        problems.push(why);
                    }
                }
                self.fast = next;
            }
            Err(e) => {
                let why = format!("kernel data path: {e}; the change is carried by the workers only");
                tracing::error!("{why}");
                problems.push(why);
            }
        }
        // Interfaces that no longer carry a fast rule: detach, now that no
        // key sends their frames to the program.
        self.links.retain(|i, _| wanted.contains(i));
        self.refused.retain(|i, _| wanted.contains(i));
        problems
    }

    /// Switches the adopted links that `wanted` still needs to this
    /// program, now that its maps hold the whole table: each in one step,
    /// so every frame meets one program or the other with a whole table.
    /// The rest are closed (their program detaches).
    fn take_over(&mut self, wanted: &BTreeSet<u32>, ifs: &Interfaces, problems: &mut Vec<String>) {
        for (ifindex, link) in std::mem::take(&mut self.adopted) {
            if !wanted.contains(&ifindex) {
                tracing::info!(
                    "kernel data path: no rule of this mcrd on `{}`; the inherited program is detached",
                    name_of(ifs, ifindex)
                );
                continue;
            }
            match link.update(self.loaded.ingress()) {
                Ok(()) => {
                    self.links.insert(ifindex, link);
                }
                Err(e) => {
                    // Attach anew; the old program goes with its link.
                    let why = format!(
                        "kernel data path on `{}`: switching the inherited link to this program: {e}; attached anew",
                        name_of(ifs, ifindex)
                    );
                    tracing::warn!("{why}");
                    match self.loaded.ingress().attach_tcx_ingress(ifindex) {
                        Ok(fresh) => {
                            self.links.insert(ifindex, fresh);
                        }
                        Err(e) => problems.push(format!("{why} failed too: {e}")),
                    }
                }
            }
        }
    }

    /// Why the kernel does not carry the rule in `slot` (None: it does).
    pub fn why_not(&self, slot: u32) -> Option<Ineligible> {
        self.fast
            .rules
            .get(&slot)
            .and_then(|r| r.outputs.as_ref().err().copied())
    }

    /// Samples the lag histograms of the arbitrated rules it carries (once
    /// a second).
    pub fn sample_race(&mut self) {
        let now = Instant::now();
        let carried: BTreeMap<u32, u32> = self
            .fast
            .rules
            .iter()
            .filter(|(_, r)| r.arb.is_some() && r.outputs.is_ok())
            .filter_map(|(&slot, _)| Some((slot, self.maps.arb_of(slot)?)))
            .collect();
        self.race.retain(|slot, (i, _)| carried.get(slot) == Some(i));
        for (slot, i) in carried {
            // A new entry's histograms were zeroed when it was made.
            let (_, q) = self.race.entry(slot).or_insert_with(|| {
                let zero = vec![vec![0; mcr_bpf::RACE_BUCKETS]; datapath_lines()];
                (i, VecDeque::from([(now, zero)]))
            });
            q.push_back((now, self.loaded.race(i)));
            while q.front().is_some_and(|(t, _)| now.duration_since(*t) > RACE_SPAN) {
                q.pop_front();
            }
        }
    }

    /// The line race of the arbitrated rule in `slot`, if the kernel
    /// carries it: each line's lag behind the first copies over the last
    /// few seconds.
    pub fn race(&self, slot: u32) -> Option<Vec<mcr_core::arbitrate::race::LagSummary>> {
        let (i, q) = self.race.get(&slot)?;
        let base = q.front().map(|(_, h)| h)?;
        let now = self.loaded.race(*i);
        Some(
            now.iter()
                .zip(base)
                .map(|(n, b)| {
                    let recent: Vec<u64> = n.iter().zip(b).map(|(n, b)| n.saturating_sub(*b)).collect();
                    mcr_core::arbitrate::race::summarize(&recent)
                })
                .collect(),
        )
    }

    /// The interfaces the program is attached to.
    pub fn attached(&self) -> BTreeSet<u32> {
        self.links.keys().copied().collect()
    }
}

fn name_of(ifs: &Interfaces, ifindex: u32) -> String {
    ifs.by_index(ifindex)
        .map_or_else(|| format!("#{ifindex}"), |i| i.name.clone())
}
