//! The fanout groups of the workers' rings, one per input interface when
//! there are several workers. The supervisor founds each group itself with
//! a ring for worker 0 (`PACKET_FANOUT_FLAG_UNIQUEID`: the kernel picks an
//! id that no group of the namespace has), then opens a ring for each
//! other worker in the group, in worker order, and hands each worker its
//! ring and every worker the id with the table. So member k of every group
//! is worker k's ring. A group lives as long as its interface has rules: a
//! worker's death does not change it (the supervisor keeps every ring).
//!
//! The group's program picks the worker of each frame: a hash of its
//! addresses and ports, so that a flow stays with one worker, except for
//! the inputs of pinned rules ([`mcr_core::table::CompiledRule::pinned`]),
//! whose frames all go to the rule's one worker, on every interface, so
//! that it sees every copy of the stream: worker 0 for a rule with SRT or
//! RIST endpoints, and a worker chosen by the rule's slot for the other
//! rules with several inputs, which so spread over the workers. The
//! supervisor keeps a copy of each founding socket to change the program
//! as the rules change.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};

use mcr_core::interfaces::Interfaces;
use mcr_core::table::MatchTable;
use mcr_sys::ring::{Fanout, Filter, FilterInsn, RingConfig, RxRing, filter_insn};

use crate::channel::ring_for_mtu;

/// A filter that lets nothing in: the rings the supervisor opens have it
/// until their worker puts the table's filter in its place.
const NOTHING: [FilterInsn; 1] = [FilterInsn {
    code: 0x06, // BPF_RET | BPF_K
    jt: 0,
    jf: 0,
    k: 0,
}];

/// The groups, by interface index.
#[derive(Debug)]
pub struct FanoutGroups {
    ids: BTreeMap<u32, u16>,
    /// A copy of each founding socket, and the program its group has.
    steering: BTreeMap<u32, (OwnedFd, Vec<mcr_core::bpf::Insn>)>,
    /// Ids to fall back on if a group cannot be founded (from the
    /// supervisor's pid).
    seed: u16,
    /// The worker each pinned rule's frames go to, by the rule's slot.
    pinned: BTreeMap<u32, usize>,
}

/// The group id derived from `seed` (a fallback only).
fn derived_id(seed: u16, ifindex: u32) -> u16 {
    seed ^ (ifindex as u16).wrapping_mul(0x9e37).rotate_left(7)
}

impl FanoutGroups {
    /// No groups yet.
    pub fn new(seed: u16) -> Self {
        FanoutGroups {
            ids: BTreeMap::new(),
            steering: BTreeMap::new(),
            seed,
            pinned: BTreeMap::new(),
        }
    }

    /// Takes the group of interface `ifindex` that the mcrd before made
    /// (`member`: one of its sockets, the workers' rings handed over):
    /// the next workers join it, and it keeps its members and their
    /// frames. Returns its id, or none if `member` is in no group.
    pub fn adopt(&mut self, ifindex: u32, member: std::os::fd::BorrowedFd<'_>) -> std::io::Result<Option<u16>> {
        if self.ids.contains_key(&ifindex) {
            return Ok(self.ids.get(&ifindex).copied());
        }
        let Some(id) = mcr_sys::ring::fanout_id_of(member)? else {
            return Ok(None);
        };
        self.ids.insert(ifindex, id);
        // Its program is set again from the table (any member may).
        self.steering
            .insert(ifindex, (member.try_clone_to_owned()?, Vec::new()));
        Ok(Some(id))
    }

    /// Founds a group for each of `wanted` that has none, with a member
    /// for each of `workers` in order, and forgets those no longer wanted;
    /// returns the new members: (worker, interface, ring).
    pub fn reconcile(
        &mut self,
        wanted: &[u32],
        ifs: &Interfaces,
        cfg: &RingConfig,
        workers: usize,
    ) -> Vec<(usize, u32, RxRing)> {
        self.ids.retain(|i, _| wanted.contains(i));
        self.steering.retain(|i, _| wanted.contains(i));
        let mut founded = Vec::new();
        let new: Vec<u32> = wanted.iter().copied().filter(|i| !self.ids.contains_key(i)).collect();
        for ifindex in new {
            let cfg = ring_for_mtu(cfg, ifs.by_index(ifindex).map(|i| i.mtu));
            let ring = RxRing::open(ifindex, &cfg, Filter::Classic(&NOTHING), Some(Fanout::Found))
                .and_then(|r| Ok((r.fanout_id()?, r)));
            match ring {
                Ok((Some(id), ring)) => {
                    self.ids.insert(ifindex, id);
                    match ring.as_fd().try_clone_to_owned() {
                        Ok(fd) => {
                            self.steering.insert(ifindex, (fd, Vec::new()));
                        }
                        Err(e) => tracing::warn!(
                            "interface #{ifindex}: no copy of the fanout group's socket ({e}); its frames all go to worker 0"
                        ),
                    }
                    founded.push((0, ifindex, ring));
                    // The other members, in worker order, so that member k
                    // is worker k's (the rules pinned to a worker name it
                    // by its place in every group).
                    for w in 1..workers {
                        match RxRing::open(ifindex, &cfg, Filter::Classic(&NOTHING), Some(Fanout::Join(id))) {
                            Ok(r) => founded.push((w, ifindex, r)),
                            Err(e) => tracing::warn!(
                                "interface #{ifindex}: could not open worker {w}'s ring in the fanout group ({e}); \
                                 it opens its own, and the rules pinned to a worker may reach another"
                            ),
                        }
                    }
                }
                Ok((None, _)) | Err(_) => {
                    let id = derived_id(self.seed, ifindex);
                    let why = ring.err().map_or_else(|| "no group id".to_string(), |e| e.to_string());
                    tracing::warn!(
                        "interface #{ifindex}: could not found the workers' fanout group ({why}); they use group {id}"
                    );
                    self.ids.insert(ifindex, id);
                }
            }
        }
        founded
    }

    /// Gives each group the program `table` needs (only where it changed),
    /// and notes the worker of each pinned rule of `workers`.
    pub fn steer(&mut self, table: &MatchTable, workers: usize) {
        self.pinned = table
            .rules()
            .iter()
            .zip(table.pinned_workers(workers))
            .filter_map(|(r, w)| Some((r.slot, w?)))
            .collect();
        for (ifindex, (fd, current)) in &mut self.steering {
            let program = mcr_core::bpf::fanout_program(&table.pinned_inputs(*ifindex));
            if *current == program {
                continue;
            }
            let insns: Vec<FilterInsn> = program.iter().map(|i| filter_insn(i.code, i.jt, i.jf, i.k)).collect();
            match mcr_sys::ring::set_fanout_program(fd.as_fd(), &insns) {
                Ok(()) => *current = program,
                Err(e) => tracing::warn!(
                    "interface #{ifindex}: could not give the workers' fanout group its program ({e}); its frames go to worker 0"
                ),
            }
        }
    }

    /// The worker that takes every frame of the rule in `slot`, if one
    /// must.
    pub fn worker_of(&self, slot: u32) -> Option<usize> {
        self.pinned.get(&slot).copied()
    }

    /// The groups, for the table.
    pub fn table(&self) -> Vec<(u32, u16)> {
        self.ids.iter().map(|(i, g)| (*i, *g)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_ids_differ_by_interface_and_by_supervisor() {
        assert_ne!(derived_id(1000, 2), derived_id(1000, 3));
        assert_ne!(derived_id(1000, 2), derived_id(1001, 2));
    }
}
