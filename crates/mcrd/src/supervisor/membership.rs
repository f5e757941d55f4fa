//! Group memberships: the supervisor joins every group a rule listens to,
//! on the rule's input interface, so that switches, bridges and NICs that
//! filter multicast deliver the stream at all.
//!
//! Joins are spread over as many sockets as the kernel's per-socket limit
//! (`net.ipv4.igmp_max_memberships`, 20 by default) requires: when a socket
//! refuses a join for want of room, the next socket takes it. A socket
//! holds at most one membership per group and interface, so an any-source
//! join and source-specific joins of the same group (which the kernel will
//! not mix on one socket) sit on different sockets, and leaving one never
//! touches the other. The sockets
//! are bound to the loopback address (with `IP_FREEBIND`, so that works
//! even when `lo` is down): no stream's datagram can ever match them, so
//! the kernel queues no data to them, whatever ports the streams use. A
//! join that fails is recorded with its reason and reported on the rule;
//! it stops nothing.

use std::collections::{HashMap, HashSet};
use std::io;
use std::net::IpAddr;
use std::os::fd::AsFd;

use mcr_core::control::JoinState;
use socket2::Socket;

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

struct JoinSocket {
    sock: Socket,
    ipv6: bool,
    full: bool,
    /// The (interface, group) pairs it holds a membership of.
    groups: HashSet<(u32, IpAddr)>,
}

/// Every membership the rules need.
#[derive(Default)]
pub struct Memberships {
    sockets: Vec<JoinSocket>,
    joins: HashMap<JoinKey, Join>,
}

impl std::fmt::Debug for Memberships {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memberships")
            .field("sockets", &self.sockets.len())
            .field("joins", &self.joins.len())
            .finish()
    }
}

/// The kernel's "this socket holds all the memberships it may".
fn is_socket_limit(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOBUFS | libc::ENOMEM))
}

/// The kernel's "this socket holds a membership of that group that does
/// not mix with this one": another socket may take it.
fn is_socket_conflict(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EADDRINUSE | libc::EINVAL))
}

impl Memberships {
    /// Makes sure `key` is joined, for one more user (a rule). Returns how
    /// it stands.
    pub fn acquire(&mut self, key: JoinKey, interface: &str) -> JoinState {
        if let Some(j) = self.joins.get_mut(&key) {
            j.users += 1;
            // A join that failed before is tried again with each new user.
            if j.held.is_err() {
                j.held = Self::join_somewhere(&mut self.sockets, key);
            }
        } else {
            let held = Self::join_somewhere(&mut self.sockets, key);
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

    fn join_somewhere(sockets: &mut Vec<JoinSocket>, key: JoinKey) -> Result<usize, String> {
        let ipv6 = key.group.is_ipv6();
        let pair = (key.ifindex, key.group);
        let candidates: Vec<usize> = (0..sockets.len())
            .filter(|&i| sockets[i].ipv6 == ipv6 && !sockets[i].full && !sockets[i].groups.contains(&pair))
            .collect();
        let mut conflict = None;
        for i in candidates {
            match mcr_sys::membership::join(sockets[i].sock.as_fd(), key.ifindex, key.group, key.source) {
                Ok(()) => {
                    sockets[i].groups.insert(pair);
                    return Ok(i);
                }
                Err(e) if is_socket_limit(&e) => sockets[i].full = true,
                Err(e) if is_socket_conflict(&e) => conflict = Some(e),
                Err(e) => return Err(e.to_string()),
            }
        }
        let s = mcr_sys::membership::quiet_socket(ipv6).map_err(|e| format!("open a membership socket: {e}"))?;
        let r = mcr_sys::membership::join(s.as_fd(), key.ifindex, key.group, key.source);
        let mut js = JoinSocket {
            sock: s,
            ipv6,
            full: false,
            groups: HashSet::new(),
        };
        let r = match r {
            Ok(()) => {
                js.groups.insert(pair);
                Ok(sockets.len())
            }
            // A fresh socket refuses it too: the conflict is not the socket's.
            Err(e) => Err(conflict.map_or_else(|| e.to_string(), |c| format!("{e} (and before: {c})"))),
        };
        sockets.push(js);
        r
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
            && let Some(s) = self.sockets.get_mut(i)
        {
            match mcr_sys::membership::leave(s.sock.as_fd(), key.ifindex, key.group, key.source) {
                // The interface is gone, and its memberships with it.
                Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {}
                Err(e) => tracing::warn!("leaving {} on {}: {e}", key.group, j.interface),
                Ok(()) => {}
            }
            s.groups.remove(&(key.ifindex, key.group));
            s.full = false;
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
