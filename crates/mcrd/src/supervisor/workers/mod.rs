//! The worker processes: started by re-executing `mcrd worker`, pinned to
//! their cores, fed the whole table, watched, and restarted when they die
//! (when, and after what delay, the plane decides: [`mcr_core::plane::machine`]). A restarted worker counts on in the same statistics
//! block, so no counter is lost, and reads on from the receive rings of
//! the one it replaces, which the supervisor kept open meanwhile, so no
//! frame that arrived while it was away is lost either.
//!
//! As a component ([`Workers`]) it owns each worker's slot, how to start
//! one, the table line every worker is sent, the channel their events
//! come back on, their fanout groups and the shape of their rings. It
//! takes from the plane the table to publish and which worker to start
//! or restart when; it offers each worker's state for the statistics, and
//! hands the supervisor every event of theirs.

mod slot;

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use mcr_sys::ring::RingGeometry;
use mcr_sys::shm::SharedCounters;
use tokio::sync::{mpsc, watch};

use super::handover;
use crate::channel::{FromWorker, ToWorker};

pub use slot::WorkerSlot;

/// What the eBPF data path gives a worker: its rings' socket filter, and
/// (worker 0 only) the ring of health records to read.
#[derive(Debug, Clone, Copy)]
pub struct FromKernel<'a> {
    /// The rings' socket filter.
    pub ring_filter: std::os::fd::BorrowedFd<'a>,
    /// The health ring.
    pub health_ring: Option<std::os::fd::BorrowedFd<'a>>,
}

/// The supervisor's copies of a worker's receive rings, by interface.
pub type KeptRings = BTreeMap<u32, (RingGeometry, OwnedFd)>;

/// What the supervisor hears about a worker.
#[derive(Debug)]
pub enum WorkerEvent {
    /// A message from it.
    Said {
        /// Which worker.
        index: usize,
        /// Which incarnation.
        generation: u64,
        /// What.
        msg: FromWorker,
    },
    /// It exited.
    Exited {
        /// Which worker.
        index: usize,
        /// Which incarnation.
        generation: u64,
        /// How.
        how: String,
        /// Its receive rings, for the worker that replaces it.
        rings: KeptRings,
    },
    /// Its restart delay is over.
    RestartDue {
        /// Which worker.
        index: usize,
    },
}

/// How to start a worker, the same for every one.
#[derive(Debug, Clone)]
pub struct Recipe {
    /// This executable.
    pub exe: std::path::PathBuf,
    /// Arguments every worker gets after `worker`.
    pub common_args: Vec<String>,
}

/// The workers, as a component of the supervisor.
#[derive(Debug)]
pub struct Workers {
    slots: Vec<WorkerSlot>,
    recipe: Recipe,
    /// The current table, encoded as the line every worker is sent.
    table_line: watch::Sender<Arc<Vec<u8>>>,
    events: mpsc::UnboundedSender<WorkerEvent>,
    /// Their fanout groups, with several workers.
    fanout: Option<super::fanout::FanoutGroups>,
    /// The shape of their rings.
    ring: mcr_sys::ring::RingConfig,
}

impl Workers {
    /// A slot for each of `n` workers, worker i on `cpus[i % cpus.len()]`,
    /// started by `recipe`, with rings of `ring`; and the receiver of
    /// their events.
    pub fn new(
        n: usize,
        cpus: &[usize],
        recipe: Recipe,
        ring: mcr_sys::ring::RingConfig,
    ) -> (Workers, mpsc::UnboundedReceiver<WorkerEvent>) {
        let (events, events_rx) = mpsc::unbounded_channel();
        let (table_line, _) = watch::channel(Arc::new(Vec::new()));
        let w = Workers {
            slots: (0..n).map(|i| WorkerSlot::new(i, cpus[i % cpus.len()])).collect(),
            recipe,
            table_line,
            events,
            // (The group ids of one mcrd start from its process id.)
            fanout: (n > 1).then(|| super::fanout::FanoutGroups::new(std::process::id() as u16)),
            ring,
        };
        (w, events_rx)
    }

    /// Gives each worker the rings the mcrd before left it, and takes
    /// their fanout groups: the workers read on where the last stopped.
    /// Returns what could not be taken.
    pub fn adopt_rings(&mut self, rings: Vec<handover::InheritedRing>) -> Vec<String> {
        let mut refused = Vec::new();
        let n = self.slots.len();
        for r in rings {
            let Some(w) = self.slots.get_mut(r.worker) else {
                handover::unstore_ring(&r.name);
                refused.push(format!("`{}`: this mcrd has {n} worker(s)", r.name));
                continue;
            };
            if let Some(groups) = &mut self.fanout
                && let Err(e) = groups.adopt(r.ifindex, r.fd.as_fd())
            {
                refused.push(format!("`{}`: its fanout group: {e}", r.name));
            }
            w.adopt_ring(r.ifindex, r.geometry, r.fd);
        }
        refused
    }

    /// Sends `snap` (compiled as `table`, on the interfaces `ifs`) to every
    /// worker (each gets the newest): first a fanout group for each new
    /// input interface, a member for each worker in order, each ring
    /// reaching its worker before the table.
    pub fn publish(
        &mut self,
        mut snap: mcr_core::snapshot::TableSnapshot,
        table: &mcr_core::table::MatchTable,
        ifs: &mcr_core::interfaces::Interfaces,
    ) {
        if let Some(groups) = &mut self.fanout {
            let n = self.slots.len();
            for (w, ifindex, ring) in groups.reconcile(&table.input_interfaces(), ifs, &self.ring, n) {
                self.slots[w].give_ring(ifindex, ring);
            }
            groups.steer(table, n);
            snap.fanout = groups.table();
        }
        match serde_json::to_vec(&ToWorker::Table(snap)) {
            Ok(mut line) => {
                line.push(b'\n');
                self.table_line.send_replace(Arc::new(line));
            }
            Err(e) => tracing::error!("could not encode the table: {e}"),
        }
    }

    /// Starts (or restarts) worker `i`, with the statistics memory
    /// `counters` and what the eBPF data path gives it.
    pub fn spawn(
        &mut self,
        i: usize,
        counters: &SharedCounters,
        kernel: Option<FromKernel<'_>>,
    ) -> std::io::Result<()> {
        self.slots[i].spawn(&self.recipe, counters, kernel, &self.table_line, &self.events)
    }

    /// Says that worker `i` is due to start again, after `delay`.
    pub fn restart_later(&self, i: usize, delay: std::time::Duration) {
        let tx = self.events.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = tx.send(WorkerEvent::RestartDue { index: i });
        });
    }

    /// The worker that carries a rule of several inputs (by its slot),
    /// with several workers.
    pub fn carrier_of(&self, slot: u32) -> Option<usize> {
        self.fanout.as_ref()?.worker_of(slot)
    }
}

impl std::ops::Deref for Workers {
    type Target = [WorkerSlot];
    fn deref(&self) -> &[WorkerSlot] {
        &self.slots
    }
}

impl std::ops::DerefMut for Workers {
    fn deref_mut(&mut self) -> &mut [WorkerSlot] {
        &mut self.slots
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workers(n: usize, cpus: &[usize]) -> Workers {
        let recipe = Recipe {
            exe: "/nonexistent/mcrd".into(),
            common_args: Vec::new(),
        };
        let ring = mcr_sys::ring::RingConfig {
            version: mcr_sys::ring::RingVersion::V2,
            bytes: 1 << 20,
            max_frame: 1518,
            block_timeout_ms: 1,
        };
        Workers::new(n, cpus, recipe, ring).0
    }

    #[test]
    fn each_worker_has_its_slot_on_its_cpu_and_fanout_groups_only_when_several() {
        let w = workers(3, &[1, 0]);
        let placed: Vec<(usize, usize)> = w.iter().map(|s| (s.index, s.cpu)).collect();
        assert_eq!(placed, [(0, 1), (1, 0), (2, 1)]);
        assert!(w.fanout.is_some());
        assert!(workers(1, &[0]).fanout.is_none());
        assert_eq!(workers(1, &[0]).carrier_of(3), None, "one worker: no worker to name");
    }

    #[test]
    fn a_ring_of_a_worker_this_mcrd_does_not_have_is_refused_and_named() {
        let mut w = workers(1, &[0]);
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("a socket");
        let ring = handover::InheritedRing {
            name: "ring-4-2-x".into(),
            worker: 4,
            ifindex: 2,
            geometry: RingGeometry {
                version: mcr_sys::ring::RingVersion::V2,
                unit_bytes: 2048,
                units: 4,
            },
            fd: OwnedFd::from(socket),
        };
        let refused = w.adopt_rings(vec![ring]);
        assert_eq!(refused, ["`ring-4-2-x`: this mcrd has 1 worker(s)"]);
    }

    #[test]
    fn a_published_table_is_the_line_every_worker_reads() {
        let mut w = workers(1, &[0]);
        let mut seen = w.table_line.subscribe();
        let snap = mcr_core::snapshot::TableSnapshot {
            version: 7,
            ..Default::default()
        };
        let (table, _) = mcr_core::table::MatchTable::compile(&snap);
        w.publish(snap.clone(), &table, &mcr_core::interfaces::Interfaces::default());
        let line = seen.borrow_and_update().clone();
        assert_eq!(line.last(), Some(&b'\n'));
        let ToWorker::Table(got) = serde_json::from_slice(&line).expect("a table message") else {
            panic!("not a table")
        };
        assert_eq!(got, snap);
    }
}
