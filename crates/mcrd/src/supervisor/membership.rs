//! Group memberships: the supervisor joins every group a rule listens to,
//! on the rule's input interface, so that switches, bridges and NICs that
//! filter multicast deliver the stream at all.
//!
//! Joins are spread over as many sockets as the kernel's per-socket limit
//! requires, and an any-source join and source-specific joins of the same
//! group sit on different sockets ([`mcr_sys::membership::JoinSockets`]).
//! The sockets are bound to the loopback address (with `IP_FREEBIND`, so
//! that works even when `lo` is down): no stream's datagram can ever match
//! them, so the kernel queues no data to them, whatever ports the streams
//! use. A join that fails is recorded with its reason and reported on the
//! rule; it stops nothing.

use std::collections::HashMap;
use std::net::IpAddr;

use mcr_core::control::JoinState;
use mcr_sys::membership::JoinSockets;

/// One membership: a group (and source) on an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct JoinKey {
    /// The interface index.
    pub ifindex: u32,
    /// The group.
    pub group: IpAddr,
    /// The source, for a source-specific join.
    pub source: Option<IpAddr>,
}

struct Join {
    interface: String,
    users: usize,
    /// The socket holding the membership, or why there is none.
    held: Result<usize, String>,
}

/// Every membership the rules need.
#[derive(Default)]
pub struct Memberships {
    sockets: JoinSockets,
    joins: HashMap<JoinKey, Join>,
}

impl std::fmt::Debug for Memberships {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memberships")
            .field("sockets", &self.sockets.sockets())
            .field("joins", &self.joins.len())
            .finish()
    }
}

impl Memberships {
    /// Makes sure `key` is joined, for one more user (a rule). Returns how
    /// it stands.
    pub fn acquire(&mut self, key: JoinKey, interface: &str) -> JoinState {
        if let Some(j) = self.joins.get_mut(&key) {
            j.users += 1;
            // A join that failed before is tried again with each new user.
            if j.held.is_err() {
                j.held = Self::join(&mut self.sockets, key);
            }
        } else {
            let held = Self::join(&mut self.sockets, key);
            self.joins.insert(
                key,
                Join {
                    interface: interface.to_string(),
                    users: 1,
                    held,
                },
            );
        }
        self.state(key)
    }

    fn join(sockets: &mut JoinSockets, key: JoinKey) -> Result<usize, String> {
        sockets
            .join(key.ifindex, key.group, key.source)
            .map_err(|e| e.to_string())
    }

    /// One user fewer of `key`; the last one leaves the group.
    pub fn release(&mut self, key: JoinKey) {
        let Some(j) = self.joins.get_mut(&key) else { return };
        j.users -= 1;
        if j.users > 0 {
            return;
        }
        if let Some(j) = self.joins.remove(&key)
            && let Ok(i) = j.held
        {
            match self.sockets.leave(i, key.ifindex, key.group, key.source) {
                // The interface is gone, and its memberships with it.
                Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {}
                Err(e) => tracing::warn!("leaving {} on {}: {e}", key.group, j.interface),
                Ok(()) => {}
            }
        }
    }

    /// How `key` stands.
    pub fn state(&self, key: JoinKey) -> JoinState {
        let j = self.joins.get(&key);
        JoinState {
            interface: j.map(|j| j.interface.clone()).unwrap_or_default(),
            group: key.group,
            source: key.source,
            joined: j.is_some_and(|j| j.held.is_ok()),
            error: j.and_then(|j| j.held.as_ref().err().cloned()),
        }
    }
}
