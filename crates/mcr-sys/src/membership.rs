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
}
