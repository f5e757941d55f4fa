//! Group membership with the protocol-independent socket options
//! (`MCAST_JOIN_GROUP`, `MCAST_JOIN_SOURCE_GROUP`): by interface index, for
//! IPv4 (IGMP) and IPv6 (MLD) alike, any-source or source-specific.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::BorrowedFd;

use crate::sockaddr::RawSockAddr;

fn storage(a: IpAddr) -> libc::sockaddr_storage {
    let raw = RawSockAddr::new(SocketAddr::new(a, 0));
    let mut s = crate::sockaddr::zeroed_storage();
    // SAFETY: `raw` holds a sockaddr of `raw.len()` bytes, which fits the
    // storage it was built in and this one alike.
    unsafe { std::ptr::copy_nonoverlapping(raw.as_ptr().cast::<u8>(), (&raw mut s).cast::<u8>(), raw.len() as usize) };
    s
}

fn level(group: IpAddr) -> libc::c_int {
    if group.is_ipv4() {
        libc::IPPROTO_IP
    } else {
        libc::IPPROTO_IPV6
    }
}

/// A UDP socket that holds group memberships and never receives a
/// stream's datagram: bound to the loopback address (with freebind, so
/// this works even when `lo` is down) on a port of the kernel's choosing,
/// with `IP_MULTICAST_ALL` off so that only what it joined could reach it,
/// and nothing sent to a group is sent to the loopback address.
pub fn quiet_socket(ipv6: bool) -> io::Result<socket2::Socket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let (domain, lo): (Domain, IpAddr) = if ipv6 {
        (Domain::IPV6, std::net::Ipv6Addr::LOCALHOST.into())
    } else {
        (Domain::IPV4, std::net::Ipv4Addr::LOCALHOST.into())
    };
    let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    if ipv6 {
        s.set_freebind_v6(true)?;
    } else {
        s.set_freebind_v4(true)?;
    }
    crate::sockopt::set_multicast_all(std::os::fd::AsFd::as_fd(&s), ipv6, false)?;
    s.bind(&SocketAddr::new(lo, 0).into())?;
    Ok(s)
}

/// Memberships spread over as many [`quiet_socket`]s as the kernel's
/// per-socket limit requires (`net.ipv4.igmp_max_memberships`, 20 by
/// default, for IPv4; option memory for IPv6): when a socket refuses a
/// join for want of room, the next one takes it, and a new one is opened
/// when none has room. A socket holds at most one membership per group and
/// interface, so an any-source join and source-specific joins of the same
/// group (which the kernel will not mix on one socket) sit on different
/// sockets.
#[derive(Debug, Default)]
pub struct JoinSockets {
    sockets: Vec<HeldSocket>,
}

#[derive(Debug)]
struct HeldSocket {
    sock: socket2::Socket,
    ipv6: bool,
    /// It refused a join for want of room (until it leaves one).
    full: bool,
    /// The (interface, group) pairs it holds a membership of.
    groups: std::collections::HashSet<(u32, IpAddr)>,
}

/// A join that no socket would take.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// No new socket could be opened.
    #[error("open a membership socket: {0}")]
    Open(#[source] io::Error),
    /// A fresh socket refused it too (`conflict`: what a socket that
    /// already held the group said before).
    #[error("{error}{}", conflict.as_ref().map(|c| format!(" (and before: {c})")).unwrap_or_default())]
    Refused {
        /// What the fresh socket said.
        error: io::Error,
        /// What an earlier socket said, if it refused for a conflict.
        conflict: Option<io::Error>,
    },
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

impl JoinSockets {
    /// Joins `group` on `ifindex` (from `source` only, if given) on a
    /// socket with room, opening one if none has. Returns which socket
    /// holds it, for [`JoinSockets::leave`].
    pub fn join(&mut self, ifindex: u32, group: IpAddr, source: Option<IpAddr>) -> Result<usize, JoinError> {
        use std::os::fd::AsFd;
        let ipv6 = group.is_ipv6();
        let pair = (ifindex, group);
        let mut conflict = None;
        for (i, s) in self.sockets.iter_mut().enumerate() {
            if s.ipv6 != ipv6 || s.full || s.groups.contains(&pair) {
                continue;
            }
            match join(s.sock.as_fd(), ifindex, group, source) {
                Ok(()) => {
                    s.groups.insert(pair);
                    return Ok(i);
                }
                Err(e) if is_socket_limit(&e) => s.full = true,
                Err(e) if is_socket_conflict(&e) => conflict = Some(e),
                Err(error) => return Err(JoinError::Refused { error, conflict: None }),
            }
        }
        let sock = quiet_socket(ipv6).map_err(JoinError::Open)?;
        let r = join(sock.as_fd(), ifindex, group, source);
        let mut held = HeldSocket {
            sock,
            ipv6,
            full: false,
            groups: std::collections::HashSet::new(),
        };
        let r = match r {
            Ok(()) => {
                held.groups.insert(pair);
                Ok(self.sockets.len())
            }
            // A fresh socket refuses it too: the conflict is not the socket's.
            Err(error) => Err(JoinError::Refused { error, conflict }),
        };
        self.sockets.push(held);
        r
    }

    /// Leaves what [`JoinSockets::join`] joined on socket `at`; that
    /// socket has room again.
    pub fn leave(&mut self, at: usize, ifindex: u32, group: IpAddr, source: Option<IpAddr>) -> io::Result<()> {
        use std::os::fd::AsFd;
        let Some(s) = self.sockets.get_mut(at) else {
            return Ok(());
        };
        s.groups.remove(&(ifindex, group));
        s.full = false;
        leave(s.sock.as_fd(), ifindex, group, source)
    }

    /// How many sockets it holds.
    pub fn sockets(&self) -> usize {
        self.sockets.len()
    }

    /// Each socket (to hand over to the next process, which holds its
    /// memberships until it has joined them again on its own).
    pub fn fds(&self) -> impl Iterator<Item = BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        self.sockets.iter().map(|s| s.sock.as_fd())
    }
}

/// Joins `group` on interface `ifindex`, from any source or, with
/// `source`, from that one only (IGMPv3/MLDv2 source-specific).
pub fn join(fd: BorrowedFd<'_>, ifindex: u32, group: IpAddr, source: Option<IpAddr>) -> io::Result<()> {
    change(fd, ifindex, group, source, true)
}

/// Leaves what [`join`] joined.
pub fn leave(fd: BorrowedFd<'_>, ifindex: u32, group: IpAddr, source: Option<IpAddr>) -> io::Result<()> {
    change(fd, ifindex, group, source, false)
}

fn change(fd: BorrowedFd<'_>, ifindex: u32, group: IpAddr, source: Option<IpAddr>, join: bool) -> io::Result<()> {
    match source {
        None => {
            let req = libc::group_req {
                gr_interface: ifindex,
                gr_group: storage(group),
            };
            let name = if join {
                libc::MCAST_JOIN_GROUP
            } else {
                libc::MCAST_LEAVE_GROUP
            };
            crate::sockopt::set_raw(fd, level(group), name, &req)
        }
        Some(src) => {
            let req = libc::group_source_req {
                gsr_interface: ifindex,
                gsr_group: storage(group),
                gsr_source: storage(src),
            };
            let name = if join {
                libc::MCAST_JOIN_SOURCE_GROUP
            } else {
                libc::MCAST_LEAVE_SOURCE_GROUP
            };
            crate::sockopt::set_raw(fd, level(group), name, &req)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn joins_and_leaves_on_loopback() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").expect("socket");
        let g: IpAddr = "239.77.1.1".parse().expect("literal");
        join(s.as_fd(), 1, g, None).expect("join");
        assert!(
            join(s.as_fd(), 1, g, None).is_err(),
            "a second join of the same group is refused"
        );
        leave(s.as_fd(), 1, g, None).expect("leave");
        let src: IpAddr = "10.9.9.9".parse().expect("literal");
        join(s.as_fd(), 1, g, Some(src)).expect("source-specific join");
        leave(s.as_fd(), 1, g, Some(src)).expect("leave");
    }

    #[test]
    fn joins_spread_over_as_many_sockets_as_the_limit_requires() {
        let limit: usize = std::fs::read_to_string("/proc/sys/net/ipv4/igmp_max_memberships")
            .expect("igmp_max_memberships")
            .trim()
            .parse()
            .expect("a number");
        let n = 2 * limit + 5;
        let group = |i: usize| {
            let byte = |n: usize| u8::try_from(n).expect("below 256");
            IpAddr::from([239, 77, 2 + byte(i / 250), byte(i % 250) + 1])
        };
        let mut j = JoinSockets::default();
        let at: Vec<usize> = (0..n).map(|i| j.join(1, group(i), None).expect("join")).collect();
        assert_eq!(j.sockets(), n.div_ceil(limit), "{limit} a socket");
        for s in 0..j.sockets() {
            assert!(at.iter().filter(|&&a| a == s).count() <= limit);
        }
        // A source-specific join of a group held any-source goes elsewhere.
        let src: IpAddr = "10.9.9.9".parse().expect("literal");
        let ssm = j.join(1, group(0), Some(src)).expect("source-specific join");
        assert_ne!(ssm, at[0]);
        // Leaving makes room where it left.
        j.leave(at[1], 1, group(1), None).expect("leave");
        let again = j.join(1, group(1), None).expect("join again");
        assert!(again == at[1] || again == ssm, "{again}: a socket with room");
        for (i, &a) in at.iter().enumerate() {
            let a = if i == 1 { again } else { a };
            j.leave(a, 1, group(i), None).expect("leave");
        }
        j.leave(ssm, 1, group(0), Some(src)).expect("leave");
    }
}
