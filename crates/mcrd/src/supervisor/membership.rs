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

use mcr_core::control::JoinState;
use mcr_core::plane::claims::JoinKey;
use mcr_sys::membership::JoinSockets;

struct Join {
    interface: String,
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
    /// Makes sure `key` is joined (joins it, or tries again if it failed
    /// before). Returns how it stands. Who needs it is counted by
    /// [`mcr_core::plane::claims::Ledger`], which says when to leave.
    pub fn ensure(&mut self, key: JoinKey, interface: &str) -> JoinState {
        match self.joins.get_mut(&key) {
            Some(j) if j.held.is_err() => j.held = Self::join(&mut self.sockets, key),
            Some(_) => {}
            None => {
                let held = Self::join(&mut self.sockets, key);
                self.joins.insert(
                    key,
                    Join {
                        interface: interface.to_string(),
                        held,
                    },
                );
            }
        }
        self.state(key)
    }

    fn join(sockets: &mut JoinSockets, key: JoinKey) -> Result<usize, String> {
        sockets
            .join(key.ifindex, key.group, key.source)
            .map_err(|e| e.to_string())
    }

    /// The sockets holding memberships, to keep in systemd's store.
    pub fn held(&self) -> impl Iterator<Item = super::handover::Held<'_>> {
        self.sockets.fds().map(|fd| super::handover::socket("join", fd))
    }

    /// Leaves `key` (its last user went).
    pub fn leave(&mut self, key: JoinKey) {
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
