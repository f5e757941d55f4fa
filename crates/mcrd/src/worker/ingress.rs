//! Receiving: one AF_PACKET ring per input interface, in the fanout group
//! of that interface when there are several workers, with the ingress
//! filter of the current table: the eBPF data path's ring filter when it
//! runs (it keeps out what the kernel forwards, and reads the VLANs and
//! unicast inputs from the data path's maps), else a classic filter built
//! from the table.

use std::os::fd::{AsFd, OwnedFd};

use mcr_core::bpf::{FilterSpec, ingress_filter};
use mcr_core::interfaces::Interfaces;
use mcr_core::table::MatchTable;
use mcr_sys::epoll::Epoll;
use mcr_sys::ring::{Filter, FilterInsn, RingConfig, RxRing};

use crate::channel::{Problem, Scope};

struct Input {
    ifindex: u32,
    ring: RxRing,
    spec: FilterSpec,
    /// `PACKET_MR_PROMISC` is set (the rules take a VLAN of it).
    promisc: bool,
    registered: bool,
}

/// The rings of a worker.
pub struct Ingress {
    cfg: RingConfig,
    fanout_seed: Option<u16>,
    inputs: Vec<Input>,
    /// The eBPF data path's ring filter, when it runs.
    program: Option<OwnedFd>,
}

fn filter(spec: &FilterSpec) -> Vec<FilterInsn> {
    ingress_filter(spec)
        .into_iter()
        .map(|i| FilterInsn {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect()
}

/// The fanout group of an interface: the same in every worker of one
/// supervisor, different for another supervisor's.
fn fanout_group(seed: u16, ifindex: u32) -> u16 {
    seed ^ (ifindex as u16).wrapping_mul(0x9e37).rotate_left(7)
}

impl Ingress {
    /// No rings yet; `fanout_seed` set means join fanout groups;
    /// `program` is the eBPF ring filter to use instead of a classic one.
    pub fn new(cfg: RingConfig, fanout_seed: Option<u16>, program: Option<OwnedFd>) -> Self {
        Ingress {
            cfg,
            fanout_seed,
            inputs: Vec::new(),
            program,
        }
    }

    /// Each ring with its interface index.
    pub fn rings_mut(&mut self) -> impl Iterator<Item = (u32, &mut RxRing)> {
        self.inputs.iter_mut().map(|i| (i.ifindex, &mut i.ring))
    }

    /// Adds rings opened since the last call to `epoll`, each with its
    /// interface index as token.
    pub fn register_new(&mut self, epoll: &Epoll) -> std::io::Result<()> {
        for i in self.inputs.iter_mut().filter(|i| !i.registered) {
            epoll.add_readable(i.ring.as_fd(), u64::from(i.ifindex))?;
            i.registered = true;
        }
        Ok(())
    }

    /// Reads the pending error of the ring on `ifindex`; true if there was
    /// one.
    pub fn take_error(&mut self, ifindex: u32) -> bool {
        self.inputs
            .iter()
            .find(|i| i.ifindex == ifindex)
            .and_then(|i| i.ring.take_error())
            .is_some()
    }

    /// Opens, refilters and closes rings to match `table`; returns what
    /// could not be set up.
    pub fn reconcile(&mut self, table: &MatchTable, interfaces: &Interfaces) -> Vec<Problem> {
        let wanted = table.input_interfaces();
        self.inputs.retain(|i| wanted.contains(&i.ifindex));
        let mut troubles = Vec::new();
        for ifindex in wanted {
            let iface = interfaces.by_index(ifindex);
            let name = iface.map_or_else(|| format!("#{ifindex}"), |i| i.name.clone());
            let spec = FilterSpec {
                unicast: table.unicast_inputs(ifindex),
                vlans: table.vlans(ifindex),
            };
            if let Some(i) = self.inputs.iter_mut().find(|i| i.ifindex == ifindex) {
                // The eBPF filter reads what it needs from its maps.
                if i.spec != spec && self.program.is_some() {
                    i.spec = spec.clone();
                }
                if i.spec != spec {
                    match i.ring.set_filter(Filter::Classic(&filter(&spec))) {
                        Ok(()) => i.spec = spec,
                        Err(e) => troubles.push(Problem {
                            error: format!("input interface `{name}`: filter: {e}"),
                            scope: Scope::Input(name.clone()),
                        }),
                    }
                }
                if !i.promisc && !i.spec.vlans.is_empty() {
                    match i.ring.add_promisc(ifindex) {
                        Ok(()) => i.promisc = true,
                        Err(e) => troubles.push(Problem {
                            error: format!("input interface `{name}`: promiscuous mode for its VLANs: {e}"),
                            scope: Scope::Input(name),
                        }),
                    }
                }
                continue;
            }
            let mut cfg = self.cfg;
            cfg.max_frame = iface.map_or(1500, |i| i.mtu as usize) + 14 + 4;
            let classic = filter(&spec);
            let f = match &self.program {
                Some(p) => Filter::Program(p.as_fd()),
                None => Filter::Classic(&classic),
            };
            match RxRing::open(ifindex, &cfg, f, self.fanout_seed.map(|s| fanout_group(s, ifindex))) {
                Ok(ring) => {
                    // A trunk's VLANs have no membership or sub-interface
                    // on the host that would open the NIC's multicast and
                    // VLAN filters to them.
                    let promisc = !spec.vlans.is_empty();
                    if promisc && let Err(e) = ring.add_promisc(ifindex) {
                        troubles.push(Problem {
                            error: format!("input interface `{name}`: promiscuous mode for its VLANs: {e}"),
                            scope: Scope::Input(name.clone()),
                        });
                    }
                    self.inputs.push(Input {
                        ifindex,
                        ring,
                        spec,
                        promisc,
                        registered: false,
                    })
                }
                Err(e) => troubles.push(Problem {
                    error: format!("input interface `{name}`: receive ring: {e}"),
                    scope: Scope::Input(name),
                }),
            }
        }
        troubles
    }

    /// Frames the kernel dropped for want of ring space since the last
    /// call, over all rings.
    pub fn take_drops(&mut self) -> u64 {
        self.inputs
            .iter()
            .filter_map(|i| i.ring.stats().ok())
            .map(|s| s.drops)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fanout_groups_differ_by_interface_and_by_supervisor() {
        assert_ne!(fanout_group(1000, 2), fanout_group(1000, 3));
        assert_ne!(fanout_group(1000, 2), fanout_group(1001, 2));
        assert_eq!(fanout_group(1000, 2), fanout_group(1000, 2));
    }
}
