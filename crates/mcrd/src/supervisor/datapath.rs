//! The in-kernel data path: the supervisor loads MCR's BPF object once,
//! attaches its tc program to the input interfaces of the rules it can
//! carry, and keeps its maps equal to the rule table, change by change.
//! The workers' rings filter with its socket filter, so that a frame is
//! forwarded by the kernel or by a worker, never both.
//!
//! Every attachment is a tcx link held by this process: when the rules of
//! an interface go, the link is closed; when mcrd exits, or is killed, the
//! kernel closes it and the program is gone from the interface, so a dead
//! relay never keeps dropping the traffic it used to forward.

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{AsFd, BorrowedFd};

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
    loaded: Loaded,
    maps: Maps,
    fast: FastTable,
    /// Interfaces the program could not be attached to, and why.
    refused: BTreeMap<u32, String>,
}

/// Entries in the outputs array.
const OUTPUT_ENTRIES: u32 = 65_536;

impl Datapath {
    /// Loads the object and maps its counters (the part of one statistics
    /// block of `layout`'s shape that the data path writes).
    pub fn load(layout: &StatsLayout) -> anyhow::Result<Datapath> {
        let loaded = Loaded::load(u32::try_from(layout.datapath_len())?, OUTPUT_ENTRIES)?;
        Ok(Datapath {
            links: BTreeMap::new(),
            loaded,
            maps: Maps::new(OUTPUT_ENTRIES),
            fast: FastTable::default(),
            refused: BTreeMap::new(),
        })
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
        let wanted = FastTable::wanted_interfaces(table, layout);
        for &ifindex in &wanted {
            if self.links.contains_key(&ifindex) {
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
        let next = FastTable::compile(table, layout, |i| self.links.contains_key(&i));
        match self.maps.plan(&next) {
            Ok(plan) => {
                if let Err(e) = self.loaded.write(&plan) {
                    let why = format!("kernel data path: writing its maps: {e}");
                    tracing::error!("{why}");
                    problems.push(why);
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

    /// Why the kernel does not carry the rule in `slot` (None: it does).
    pub fn why_not(&self, slot: u32) -> Option<Ineligible> {
        self.fast
            .rules
            .get(&slot)
            .and_then(|r| r.outputs.as_ref().err().copied())
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
