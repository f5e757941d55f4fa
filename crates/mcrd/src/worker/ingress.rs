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
use mcr_sys::ring::{Fanout, Filter, FilterInsn, RingConfig, RxRing, filter_insn};

use super::keeper::Keeper;
use crate::channel::{Problem, RingNote, Scope, ring_for_mtu};

struct Input {
    ifindex: u32,
    ring: RxRing,
    /// What its filter lets in; `None` for a ring this worker did not open
    /// (an earlier worker's, or a group's founding ring), whose filter is
    /// set again.
    spec: Option<FilterSpec>,
    /// Its fanout group.
    group: Option<u16>,
    /// `PACKET_MR_PROMISC` is set (the rules take a VLAN of it).
    promisc: bool,
    registered: bool,
    /// The MTU last said to be more than its slots hold.
    outgrown_at: Option<u32>,
}

impl Input {
    /// Says (once per MTU) when the interface's frames have outgrown the
    /// ring's slots. Nothing is lost or cut: the ring reads a longer frame
    /// whole from its socket's queue, in its place (see `mcr_sys::ring`),
    /// at the cost of a system call. A ring is not made anew for the new
    /// MTU while it runs: a socket that joins a fanout group moves flows
    /// between its members, and one that leaves takes what its ring holds.
    fn note_mtu(&mut self, name: &str, mtu: u32) {
        let holds = self.ring.slot_frame_bytes();
        let frame = mtu as usize + 18;
        if frame <= holds || self.outgrown_at == Some(mtu) {
            return;
        }
        self.outgrown_at = Some(mtu);
        tracing::warn!(
            "input interface `{name}`: MTU {mtu} outgrows its ring's slots ({holds} bytes of frame): \
             longer frames are read whole from the ring socket's queue (a system call each); \
             mcrd sizes the ring for the MTU when it next starts"
        );
    }
}

/// A ring handed over on the ring channel, until a table says whether it
/// is wanted.
struct Adopted {
    ifindex: u32,
    ring: RxRing,
    /// The supervisor holds a copy already (an earlier worker's ring).
    held: bool,
}

/// The rings of a worker.
pub struct Ingress {
    cfg: RingConfig,
    /// Several workers share each interface, through fanout groups.
    shared: bool,
    inputs: Vec<Input>,
    /// The eBPF data path's ring filter, when it runs.
    program: Option<OwnedFd>,
    keeper: Option<Keeper>,
    adopted: Vec<Adopted>,
}

fn filter(spec: &FilterSpec) -> Vec<FilterInsn> {
    ingress_filter(spec)
        .into_iter()
        .map(|i| filter_insn(i.code, i.jt, i.jf, i.k))
        .collect()
}

impl Ingress {
    /// No rings yet; `shared` means several workers share each interface
    /// (fanout groups); `program` is the eBPF ring filter to use instead of
    /// a classic one; `keeper` is the ring channel, whose waiting messages
    /// hand over the rings of the worker this one replaces. Returns what
    /// could not be adopted.
    pub fn new(cfg: RingConfig, shared: bool, program: Option<OwnedFd>, keeper: Option<Keeper>) -> (Self, Vec<String>) {
        let mut ingress = Ingress {
            cfg,
            shared,
            inputs: Vec::new(),
            program,
            keeper,
            adopted: Vec::new(),
        };
        let troubles = ingress.take_handed_over(true);
        (ingress, troubles)
    }

    /// Takes the rings waiting on the ring channel; `held` if the
    /// supervisor keeps copies of them already.
    fn take_handed_over(&mut self, held: bool) -> Vec<String> {
        let Some(k) = &self.keeper else {
            return Vec::new();
        };
        let (rings, troubles) = k.take();
        self.adopted
            .extend(rings.into_iter().map(|(ifindex, ring)| Adopted { ifindex, ring, held }));
        troubles
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

    /// Opens, refilters and closes rings to match `table`, joining the
    /// fanout groups `groups` names (by interface index); returns what
    /// could not be set up.
    pub fn reconcile(&mut self, table: &MatchTable, interfaces: &Interfaces, groups: &[(u32, u16)]) -> Vec<Problem> {
        let wanted = table.input_interfaces();
        let shared = self.shared;
        let group_of = |ifindex: u32| groups.iter().find(|g| g.0 == ifindex).map(|g| g.1);
        // A ring is kept while its interface has rules and it is in the
        // group the table names (a group founded anew replaces it).
        let fits =
            |ifindex: u32, group: Option<u16>| wanted.contains(&ifindex) && (!shared || group == group_of(ifindex));
        let mut handed = self.take_handed_over(false);
        let mut notes = Vec::new();
        for i in self.inputs.iter().filter(|i| !fits(i.ifindex, i.group)) {
            notes.push(RingNote::Release { ifindex: i.ifindex });
        }
        self.inputs.retain(|i| fits(i.ifindex, i.group));
        for a in std::mem::take(&mut self.adopted) {
            let group = a.ring.fanout_id().ok().flatten();
            let taken = self.inputs.iter().any(|i| i.ifindex == a.ifindex);
            if fits(a.ifindex, group) && !taken {
                if !a.held {
                    notes.push(RingNote::Hold {
                        ifindex: a.ifindex,
                        geometry: a.ring.geometry(),
                    });
                }
                self.inputs.push(Input {
                    ifindex: a.ifindex,
                    ring: a.ring,
                    spec: None,
                    group,
                    promisc: false,
                    registered: false,
                    outgrown_at: None,
                });
            } else if a.held && !taken {
                notes.push(RingNote::Release { ifindex: a.ifindex });
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
                if let Some(mtu) = iface.map(|f| f.mtu) {
                    i.note_mtu(&name, mtu);
                }
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
            let cfg = ring_for_mtu(&self.cfg, iface.map(|i| i.mtu));
            let classic = filter(&spec);
            let f = match &self.program {
                Some(p) => Filter::Program(p.as_fd()),
                None => Filter::Classic(&classic),
            };
            let group = group_of(ifindex);
            if shared && group.is_none() {
                troubles.push(Problem {
                    error: format!("input interface `{name}`: the table names no fanout group for it"),
                    scope: Scope::Input(name),
                });
                continue;
            }
            match RxRing::open(ifindex, &cfg, f, group.filter(|_| shared).map(Fanout::Join)) {
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
                        group: group.filter(|_| shared),
                        promisc,
                        registered: false,
                        outgrown_at: None,
                    })
                }
                Err(e) => troubles.push(Problem {
                    error: format!("input interface `{name}`: receive ring: {e}"),
                    scope: Scope::Input(name),
                }),
            }
        }
        if let (Some(k), false) = (&self.keeper, notes.is_empty()) {
            let inputs = &self.inputs;
            let fd_of = |ifindex| inputs.iter().find(|i| i.ifindex == ifindex).map(|i| i.ring.as_fd());
            if let Err(e) = k.tell(&notes, fd_of) {
                handed.push(format!(
                    "could not hand the supervisor a copy of the rings (a restart of this worker would lose what they hold): {e}"
                ));
            }
        }
        troubles.extend(handed.into_iter().map(|error| Problem {
            error,
            scope: Scope::Input(String::new()),
        }));
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
