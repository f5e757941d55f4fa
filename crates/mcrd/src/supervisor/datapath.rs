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
    /// Links the mcrd before left, still running its program with its
    /// maps, until the next reconcile switches them to this one's.
    adopted: BTreeMap<u32, Link>,
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
            adopted: BTreeMap::new(),
            loaded,
            maps: Maps::new(OUTPUT_ENTRIES),
            fast: FastTable::default(),
            refused: BTreeMap::new(),
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
                    Ok(()) => self.take_over(&wanted, ifs, &mut problems),
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

    /// The interfaces the program is attached to.
    pub fn attached(&self) -> BTreeSet<u32> {
        self.links.keys().copied().collect()
    }
}

fn name_of(ifs: &Interfaces, ifindex: u32) -> String {
    ifs.by_index(ifindex)
        .map_or_else(|| format!("#{ifindex}"), |i| i.name.clone())
}
