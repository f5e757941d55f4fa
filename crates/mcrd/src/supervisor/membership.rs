//! Group memberships: the supervisor joins every group a rule listens to,
//! on the rule's input interface, so that switches, bridges and NICs that
//! filter multicast deliver the stream at all.
//!
//! Joins are spread over as many sockets as the kernel's per-socket limit
//! (`net.ipv4.igmp_max_memberships`, 20 by default) requires: when a socket
//! refuses a join for want of room, the next socket takes it. The sockets
//! are bound to the loopback address (with `IP_FREEBIND`, so that works
//! even when `lo` is down): no stream's datagram can ever match them, so
//! the kernel queues no data to them, whatever ports the streams use. A
//! join that fails is recorded with its reason and reported on the rule;
//! it stops nothing.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsFd;

use mcr_core::control::JoinState;
use socket2::{Domain, Protocol, Socket, Type};

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

fn open_socket(ipv6: bool) -> io::Result<Socket> {
    let (domain, lo): (Domain, IpAddr) = if ipv6 {
        (Domain::IPV6, Ipv6Addr::LOCALHOST.into())
    } else {
        (Domain::IPV4, Ipv4Addr::LOCALHOST.into())
    };
    let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    if ipv6 {
        s.set_freebind_v6(true)?;
    } else {
        s.set_freebind_v4(true)?;
    }
    mcr_sys::sockopt::set_multicast_all(s.as_fd(), ipv6, false)?;
    s.bind(&SocketAddr::new(lo, 0).into())?;
    Ok(s)
}

/// The kernel's "this socket holds all the memberships it may".
fn is_socket_limit(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(code) if code == 105 /* ENOBUFS */ || code == 12 /* ENOMEM */)
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
        let candidates: Vec<usize> = (0..sockets.len())
            .filter(|&i| sockets[i].ipv6 == ipv6 && !sockets[i].full)
            .collect();
        for i in candidates {
            match mcr_sys::membership::join(sockets[i].sock.as_fd(), key.ifindex, key.group, key.source) {
                Ok(()) => return Ok(i),
                Err(e) if is_socket_limit(&e) => sockets[i].full = true,
                Err(e) => return Err(e.to_string()),
            }
        }
        let s = open_socket(ipv6).map_err(|e| format!("open a membership socket: {e}"))?;
        let r = mcr_sys::membership::join(s.as_fd(), key.ifindex, key.group, key.source);
        sockets.push(JoinSocket {
            sock: s,
            ipv6,
            full: false,
        });
        match r {
            Ok(()) => Ok(sockets.len() - 1),
            Err(e) => Err(e.to_string()),
        }
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
            if let Err(e) = mcr_sys::membership::leave(s.sock.as_fd(), key.ifindex, key.group, key.source) {
                tracing::warn!("leaving {} on {}: {e}", key.group, j.interface);
            }
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
