//! What one mcrd hands the next, so that a restart, an upgrade or a crash
//! never interrupts a stream (docs/relay.md, "Restarts").
//!
//! What outlives the process:
//!
//! - the eBPF data path's tcx links (`tcx-IFINDEX`): while a descriptor of
//!   a link is open, its program stays attached and forwards with the
//!   maps it was given, whether or not any mcrd runs;
//! - the sockets holding group memberships (`join-INODE`): while one is
//!   open, the interface stays a member and no switch prunes the group;
//! - the sockets holding unicast ports (`port-INODE`);
//! - the workers' receive rings (`ring-WORKER-IFINDEX-GEOMETRY`), with the
//!   frames that arrive while no worker reads them, and the fanout groups
//!   their sockets make: the next workers read on where the last stopped;
//! - the counters, and which rule each slot of them counted (`stats-…`,
//!   see `carry`), so that the next mcrd's counts go on from them;
//! - with `mcrctl restart`, the control socket (`control`), so that
//!   clients wait in its backlog rather than find no socket.
//!
//! They reach the next process through systemd's file-descriptor store
//! (kept across a restart and a crash, closed when the service stops) or
//! directly (`mcrctl restart`: the process stops its workers and executes
//! the new program in its own place, these descriptors left open). The next
//! process loads its own program and maps, writes its whole table into
//! them, and only then switches each inherited link to its program, in
//! one step per interface; it joins every group and holds every port
//! itself before it lets the inherited sockets go. So no frame meets a
//! half-written table, and no membership lapses.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use mcr_sys::handover::Source;

/// What this process was handed at its start.
#[derive(Debug, Default)]
pub struct Inherited {
    /// Where it came from; none: a fresh start.
    pub source: Option<Source>,
    /// tcx links by the name they were stored under.
    pub links: Vec<(String, OwnedFd)>,
    /// Sockets holding memberships, until this process holds them too.
    pub joins: Vec<OwnedFd>,
    /// Sockets holding unicast ports.
    pub ports: Vec<OwnedFd>,
    /// The workers' receive rings.
    pub rings: Vec<InheritedRing>,
    /// The counters and which slots counted what (`stats-…`).
    pub stats: Vec<(String, OwnedFd)>,
    /// The control socket, listening (a direct handover only).
    pub control: Option<OwnedFd>,
    /// Every name handed over (what systemd's store holds now).
    pub names: Vec<String>,
    /// Names this build does not know (closed, and said so).
    pub unknown: Vec<String>,
    /// Why nothing could be taken, if so.
    pub error: Option<String>,
}

impl Inherited {
    /// Takes what this process was started with. Call it at the start of
    /// `main`, before any thread runs.
    pub fn take() -> Inherited {
        let (source, fds) = match mcr_sys::handover::take_inherited() {
            Ok(x) => x,
            Err(e) => {
                return Inherited {
                    error: Some(e.to_string()),
                    ..Inherited::default()
                };
            }
        };
        let mut out = Inherited {
            source,
            ..Inherited::default()
        };
        for (name, fd) in fds {
            out.names.push(name.clone());
            let kind = name.split('-').next().unwrap_or_default();
            match kind {
                "tcx" => out.links.push((name, fd)),
                "join" => out.joins.push(fd),
                "port" => out.ports.push(fd),
                "ring" => match InheritedRing::parse(&name, fd) {
                    Some(r) => out.rings.push(r),
                    None => out.unknown.push(name),
                },
                "control" => out.control = Some(fd),
                "stats" => out.stats.push((name, fd)),
                _ => out.unknown.push(name),
            }
        }
        out
    }

    /// One line for the journal: where the state came from and what it
    /// held.
    pub fn summary(&self) -> Option<String> {
        let from = match self.source? {
            Source::Systemd => "systemd's file-descriptor store",
            Source::Handover => "the mcrd before (mcrctl restart)",
        };
        let mut s = format!(
            "restart: took over from {from}: {} eBPF attachment(s), {} membership socket(s), {} port socket(s), {} receive ring(s){}",
            self.links.len(),
            self.joins.len(),
            self.ports.len(),
            self.rings.len(),
            if self.stats.is_empty() { "" } else { ", the counters" }
        );
        if !self.unknown.is_empty() {
            s.push_str(&format!("; not understood, so let go: {}", self.unknown.join(", ")));
        }
        Some(s)
    }
}

/// A worker's receive ring, handed over.
#[derive(Debug)]
pub struct InheritedRing {
    /// The name it was stored under.
    pub name: String,
    /// The worker that read it.
    pub worker: usize,
    /// Its interface.
    pub ifindex: u32,
    /// Its shape.
    pub geometry: mcr_sys::ring::RingGeometry,
    /// The socket.
    pub fd: OwnedFd,
}

impl InheritedRing {
    /// `ring-WORKER-IFINDEX-GEOMETRY`, or none.
    fn parse(name: &str, fd: OwnedFd) -> Option<InheritedRing> {
        let mut parts = name.splitn(4, '-').skip(1);
        let worker = parts.next()?.parse().ok()?;
        let ifindex = parts.next()?.parse().ok()?;
        let geometry = parts.next()?.parse().ok()?;
        Some(InheritedRing {
            name: name.to_string(),
            worker,
            ifindex,
            geometry,
            fd,
        })
    }
}

/// The name a worker's ring is stored under.
pub fn ring_name(worker: usize, ifindex: u32, geometry: mcr_sys::ring::RingGeometry) -> String {
    format!("ring-{worker}-{ifindex}-{geometry}")
}

/// True for names the rings' keepers store themselves.
fn is_ring(name: &str) -> bool {
    name.starts_with("ring-")
}

/// Something this process holds that must outlive it: its name in the
/// store, what identifies it (a link's id, a socket's inode), and its
/// descriptor.
pub type Held<'a> = (String, u64, BorrowedFd<'a>);

/// systemd's file-descriptor store, kept equal to what this process holds
/// (under systemd only; elsewhere it does nothing).
#[derive(Debug)]
pub struct FdStore {
    on: bool,
    /// What the store holds: name and identity.
    stored: BTreeMap<String, u64>,
}

impl FdStore {
    /// The store as the process before left it: `inherited` (each name
    /// with an identity no descriptor has, so that what is kept is stored
    /// again and the rest removed at the first [`FdStore::sync`]).
    pub fn new(inherited: &[String]) -> FdStore {
        FdStore {
            on: mcr_sys::handover::under_service_manager(),
            stored: inherited
                .iter()
                .filter(|n| !is_ring(n))
                .map(|n| (n.clone(), u64::MAX))
                .collect(),
        }
    }

    /// True under a service manager (else [`FdStore::sync`] does nothing,
    /// and what is held need not be listed).
    pub fn is_on(&self) -> bool {
        self.on
    }

    /// Stores what is held and not stored, and removes what is stored
    /// and no longer held (but the workers' rings, which their keepers
    /// store: [`store_ring`]). Returns what failed, if anything.
    pub fn sync(&mut self, held: Vec<Held<'_>>) -> Vec<String> {
        if !self.on {
            return Vec::new();
        }
        let mut failed = Vec::new();
        let now: BTreeMap<String, (u64, BorrowedFd<'_>)> = held.into_iter().map(|(n, i, fd)| (n, (i, fd))).collect();
        let gone: Vec<String> = self
            .stored
            .iter()
            .filter(|(n, i)| now.get(*n).is_none_or(|(j, _)| j != *i))
            .map(|(n, _)| n.clone())
            .collect();
        for name in gone {
            if let Err(e) = mcr_sys::handover::unstore(&name) {
                failed.push(format!("removing `{name}` from systemd's file-descriptor store: {e}"));
            }
            self.stored.remove(&name);
        }
        for (name, (id, fd)) in now {
            if self.stored.contains_key(&name) {
                continue;
            }
            match mcr_sys::handover::store(&name, fd) {
                Ok(()) => {
                    self.stored.insert(name, id);
                }
                Err(e) => failed.push(format!("keeping `{name}` in systemd's file-descriptor store: {e}")),
            }
        }
        failed
    }
}

/// The inode of a socket, which names it in the store.
pub fn inode(fd: BorrowedFd<'_>) -> u64 {
    mcr_sys::handover::identity(fd).map_or_else(|_| u64::try_from(fd.as_raw_fd()).unwrap_or(0), |(_, i)| i)
}

/// A socket's entry in the store.
pub fn socket<'a>(kind: &str, fd: BorrowedFd<'a>) -> Held<'a> {
    let i = inode(fd);
    (format!("{kind}-{i}"), i, fd)
}

/// Puts a worker's ring in systemd's store (under systemd only), in
/// place of any stored under its name before.
pub fn store_ring(name: &str, fd: BorrowedFd<'_>) {
    if !mcr_sys::handover::under_service_manager() {
        return;
    }
    let stored = mcr_sys::handover::unstore(name).and_then(|()| mcr_sys::handover::store(name, fd));
    if let Err(e) = stored {
        tracing::warn!("keeping `{name}` in systemd's file-descriptor store: {e}; a restart loses what it holds");
    }
}

/// Takes a worker's ring out of systemd's store (under systemd only).
pub fn unstore_ring(name: &str) {
    if !mcr_sys::handover::under_service_manager() {
        return;
    }
    if let Err(e) = mcr_sys::handover::unstore(name) {
        tracing::warn!("removing `{name}` from systemd's file-descriptor store: {e}");
    }
}
