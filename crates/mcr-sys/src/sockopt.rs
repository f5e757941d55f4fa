//! Socket options that `socket2` does not cover, each by name.

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd};

fn set_raw<T>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` points to a live `T` of `size_of::<T>()` bytes for the
    // duration of the call; the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            mem::size_of::<T>() as libc::socklen_t,
        )
    };
    crate::check(rc).map(|_| ())
}

fn get_int(fd: BorrowedFd<'_>, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` are valid and writable; `len` tells the
    // kernel how many bytes it may write.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&raw mut value).cast(),
            &mut len,
        )
    };
    crate::check(rc).map(|_| value)
}

fn set_flag(fd: BorrowedFd<'_>, level: libc::c_int, name: libc::c_int, on: bool) -> io::Result<()> {
    set_raw(fd, level, name, &libc::c_int::from(on))
}

/// Asks for `IP_PKTINFO` / `IPV6_PKTINFO` control messages, which carry the
/// destination address of each received datagram.
pub fn set_recv_pktinfo(fd: BorrowedFd<'_>, ipv6: bool) -> io::Result<()> {
    if ipv6 {
        set_flag(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, true)
    } else {
        set_flag(fd, libc::IPPROTO_IP, libc::IP_PKTINFO, true)
    }
}

/// Asks for `SO_RXQ_OVFL` control messages: the running count of datagrams
/// this socket dropped because its receive buffer was full.
pub fn set_recv_queue_overflow(fd: BorrowedFd<'_>) -> io::Result<()> {
    set_flag(fd, libc::SOL_SOCKET, libc::SO_RXQ_OVFL, true)
}

/// `IP_MULTICAST_ALL` / `IPV6_MULTICAST_ALL`: when off, the socket receives
/// only the groups it joined itself, not every group joined on the host.
pub fn set_multicast_all(fd: BorrowedFd<'_>, ipv6: bool, on: bool) -> io::Result<()> {
    if ipv6 {
        set_flag(fd, libc::IPPROTO_IPV6, libc::IPV6_MULTICAST_ALL, on)
    } else {
        set_flag(fd, libc::IPPROTO_IP, libc::IP_MULTICAST_ALL, on)
    }
}

/// Sets the receive buffer past `net.core.rmem_max` (`SO_RCVBUFFORCE`, needs
/// CAP_NET_ADMIN), falling back to `SO_RCVBUF`. Returns the size the kernel
/// granted, which it reports doubled for its own bookkeeping.
pub fn force_recv_buffer(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<usize> {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    if set_raw(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &v).is_err() {
        set_raw(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &v)?;
    }
    get_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF).map(|n| n.max(0) as usize)
}

/// As [`force_recv_buffer`], for the send buffer.
pub fn force_send_buffer(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<usize> {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    if set_raw(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, &v).is_err() {
        set_raw(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, &v)?;
    }
    get_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF).map(|n| n.max(0) as usize)
}

/// `IP_MULTICAST_IF` by interface index (`ip_mreqn`), so the choice does not
/// depend on which address the interface has.
pub fn set_multicast_if_v4_index(fd: BorrowedFd<'_>, ifindex: u32) -> io::Result<()> {
    let mreqn = libc::ip_mreqn {
        imr_multiaddr: libc::in_addr { s_addr: 0 },
        imr_address: libc::in_addr { s_addr: 0 },
        imr_ifindex: ifindex as libc::c_int,
    };
    set_raw(fd, libc::IPPROTO_IP, libc::IP_MULTICAST_IF, &mreqn)
}

#[cfg(test)]
mod tests {
    use super::*;
    use socket2::{Domain, Socket, Type};
    use std::os::fd::AsFd;

    #[test]
    fn options_apply_to_a_udp_socket() {
        let s = Socket::new(Domain::IPV4, Type::DGRAM, None).expect("socket");
        set_recv_pktinfo(s.as_fd(), false).expect("pktinfo");
        set_recv_queue_overflow(s.as_fd()).expect("rxq_ovfl");
        set_multicast_all(s.as_fd(), false, false).expect("multicast_all");
        let granted = force_recv_buffer(s.as_fd(), 1 << 20).expect("rcvbuf");
        assert!(granted > 0);
        set_multicast_if_v4_index(s.as_fd(), 1).expect("multicast_if lo");
        let s6 = Socket::new(Domain::IPV6, Type::DGRAM, None).expect("socket6");
        set_recv_pktinfo(s6.as_fd(), true).expect("pktinfo6");
        set_multicast_all(s6.as_fd(), true, false).expect("multicast_all6");
    }
}
