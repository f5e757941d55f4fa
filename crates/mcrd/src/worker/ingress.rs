//! Receiving: one AF_PACKET ring per input interface, in the fanout group
//! of that interface when there are several workers, with the ingress
//! filter of the current table: the eBPF data path's ring filter when it
//! runs (it keeps out what the kernel forwards, and reads the VLANs and
//! unicast inputs from the data path's maps), else a classic filter built
//! from the table.
//!
//! The supervisor keeps a copy of every ring (see [`RingNote`]): when a
//! worker dies, its sockets stay in their fanout groups and go on filling
//! their rings, and the worker started in its place adopts them and reads
//! on from where the dead one stopped.

use std::os::fd::{AsFd, OwnedFd};

use mcr_core::bpf::{FilterSpec, ingress_filter};
use mcr_core::interfaces::Interfaces;
use mcr_core::table::MatchTable;
use mcr_sys::epoll::Epoll;
use mcr_sys::ring::{Filter, FilterInsn, RingConfig, RxRing};

use crate::channel::{Problem, RingNote, Scope};

struct Input {
    ifindex: u32,
    ring: RxRing,
    /// What its filter lets in; `None` for a ring adopted from an earlier
    /// worker, whose filter is set again.
    spec: Option<FilterSpec>,
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
    /// The ring channel to the supervisor.
    keeper: Option<OwnedFd>,
    /// Rings an earlier worker left, until the first table says which
    /// are still wanted.
    adopted: Vec<(u32, RxRing)>,
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
    /// `program` is the eBPF ring filter to use instead of a classic one;
    /// `keeper` is the ring channel, whose waiting messages hand over the
    /// rings of the worker this one replaces. Returns what could not be
    /// adopted.
    pub fn new(
        cfg: RingConfig,
        fanout_seed: Option<u16>,
        program: Option<OwnedFd>,
        keeper: Option<OwnedFd>,
    ) -> (Self, Vec<String>) {
        let mut ingress = Ingress {
            cfg,
            fanout_seed,
            inputs: Vec::new(),
            program,
            keeper,
            adopted: Vec::new(),
        };
        let troubles = ingress.adopt();
        (ingress, troubles)
    }

    /// Takes the rings the supervisor handed over (sent before this
    /// process started, so all of them are waiting).
    fn adopt(&mut self) -> Vec<String> {
        let mut troubles = Vec::new();
        let Some(k) = &self.keeper else {
            return troubles;
        };
        if let Err(e) = mcr_sys::fdpass::set_nonblocking(k.as_fd(), true) {
            return vec![format!("ring channel: {e}")];
        }
        loop {
            let m = match mcr_sys::fdpass::recv(k.as_fd()) {
                Ok(Some(m)) => m,
                Ok(None) => break,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    troubles.push(format!("ring channel: {e}"));
                    break;
                }
            };
            let notes = match RingNote::decode(&m.text, m.fds.len()) {
                Ok(n) => n,
                Err(e) => {
                    troubles.push(format!("ring channel: {e}"));
                    continue;
                }
            };
            let mut fds = m.fds.into_iter();
            for n in notes {
                let RingNote::Hold { ifindex, geometry } = n else {
                    continue;
                };
                let Some(fd) = fds.next() else { break };
                match RxRing::adopt(fd, geometry) {
                    Ok(r) => self.adopted.push((ifindex, r)),
                    Err(e) => troubles.push(format!("the ring of interface #{ifindex} ({geometry}): {e}")),
                }
            }
        }
        // From now on this process only sends on it, and waits if the
        // supervisor is behind rather than lose a note.
        if let Err(e) = mcr_sys::fdpass::set_nonblocking(k.as_fd(), false) {
            troubles.push(format!("ring channel: {e}"));
        }
        troubles
    }

    /// Tells the supervisor which rings to keep and which to close.
    fn tell_keeper(&self, notes: &[RingNote], troubles: &mut Vec<Problem>) {
        let Some(k) = &self.keeper else { return };
        let mut holds = notes.iter().filter_map(|n| match n {
            RingNote::Hold { ifindex, .. } => self.inputs.iter().find(|i| i.ifindex == *ifindex),
            RingNote::Release { .. } => None,
        });
        for chunk in notes.chunks(mcr_sys::fdpass::MAX_FDS) {
            let fds: Vec<_> = holds
                .by_ref()
                .take(chunk.iter().filter(|n| matches!(n, RingNote::Hold { .. })).count())
                .map(|i| i.ring.as_fd())
                .collect();
            if let Err(e) = mcr_sys::fdpass::send(k.as_fd(), &RingNote::encode(chunk), &fds) {
                troubles.push(Problem {
                    error: format!("could not hand the supervisor a copy of the rings (a restart of this worker would lose what they hold): {e}"),
                    scope: Scope::Input(String::new()),
                });
            }
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
        let mut notes = Vec::new();
        for i in self.inputs.iter().filter(|i| !wanted.contains(&i.ifindex)) {
            notes.push(RingNote::Release { ifindex: i.ifindex });
        }
        self.inputs.retain(|i| wanted.contains(&i.ifindex));
        for (ifindex, ring) in std::mem::take(&mut self.adopted) {
            if wanted.contains(&ifindex) && !self.inputs.iter().any(|i| i.ifindex == ifindex) {
                self.inputs.push(Input {
                    ifindex,
                    ring,
                    spec: None,
                    promisc: false,
                    registered: false,
                });
            } else {
                notes.push(RingNote::Release { ifindex });
            }
        }
        let mut troubles = Vec::new();
        for ifindex in wanted {
            let iface = interfaces.by_index(ifindex);
            let name = iface.map_or_else(|| format!("#{ifindex}"), |i| i.name.clone());
            let spec = FilterSpec {
                unicast: table.unicast_inputs(ifindex),
                vlans: table.vlans(ifindex),
            };
            if let Some(i) = self.inputs.iter_mut().find(|i| i.ifindex == ifindex) {
                // The eBPF filter reads what it needs from its maps: it is
                // set once, or again on an adopted ring.
                if i.spec != Some(spec.clone()) {
                    let classic = filter(&spec);
                    let f = match &self.program {
                        Some(p) if i.spec.is_none() => Some(Filter::Program(p.as_fd())),
                        Some(_) => None,
                        None => Some(Filter::Classic(&classic)),
                    };
                    match f.map_or(Ok(()), |f| i.ring.set_filter(f)) {
                        Ok(()) => i.spec = Some(spec.clone()),
                        Err(e) => troubles.push(Problem {
                            error: format!("input interface `{name}`: filter: {e}"),
                            scope: Scope::Input(name.clone()),
                        }),
                    }
                }
                if !i.promisc && !spec.vlans.is_empty() {
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
                    notes.push(RingNote::Hold {
                        ifindex,
                        geometry: ring.geometry(),
                    });
                    self.inputs.push(Input {
                        ifindex,
                        ring,
                        spec: Some(spec),
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
        if !notes.is_empty() {
            self.tell_keeper(&notes, &mut troubles);
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
