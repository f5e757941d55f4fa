//! Socket options that `socket2` does not cover, each by name.

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd};

pub(crate) fn set_raw<T>(fd: BorrowedFd<'_>, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` points to a live `T` of `size_of::<T>()` bytes for the
    // duration of the call; the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            crate::conv::socklen_of::<T>(),
        )
    };
    crate::check(rc).map(|_| ())
}

fn get_int(fd: BorrowedFd<'_>, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = crate::conv::socklen_of::<libc::c_int>();
    // SAFETY: `value` and `len` are valid and writable; `len` tells the
    // kernel how many bytes it may write.
    let rc = unsafe { libc::getsockopt(fd.as_raw_fd(), level, name, (&raw mut value).cast(), &mut len) };
    crate::check(rc).map(|_| value)
}

fn set_flag(fd: BorrowedFd<'_>, level: libc::c_int, name: libc::c_int, on: bool) -> io::Result<()> {
    set_raw(fd, level, name, &libc::c_int::from(on))
}

/// Takes a socket's pending error (`SO_ERROR`, which reading clears).
pub fn take_error(fd: BorrowedFd<'_>) -> Option<io::Error> {
    match get_int(fd, libc::SOL_SOCKET, libc::SO_ERROR) {
        Ok(0) => None,
        Ok(e) => Some(io::Error::from_raw_os_error(e)),
        Err(e) => Some(e),
    }
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

/// Asks for each datagram's receive timestamp (`SO_TIMESTAMPNS`: when the
/// kernel took it in, on `CLOCK_REALTIME`), read as `RecvMeta::arrived_ns`.
pub fn set_recv_timestamps(fd: BorrowedFd<'_>) -> io::Result<()> {
    set_flag(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, true)
}

/// How many datagrams this socket has dropped so far because its receive
/// buffer was full (`SO_MEMINFO`, `SK_MEMINFO_DROPS`).
pub fn receive_drops(fd: BorrowedFd<'_>) -> io::Result<u32> {
    // SK_MEMINFO_VARS is 9 in every kernel since 4.x; ask for a little more
    // room and read the index we need.
    const SK_MEMINFO_DROPS: usize = 8;
    let mut info = [0u32; 16];
    let mut len = crate::conv::socklen(mem::size_of_val(&info));
    // SAFETY: `info` has `len` writable bytes and the kernel writes at most
    // that many, updating `len`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    crate::check(rc)?;
    if (len as usize) <= SK_MEMINFO_DROPS * 4 {
        return Err(io::Error::other("SO_MEMINFO without a drop count"));
    }
    Ok(info[SK_MEMINFO_DROPS])
}

/// `IP_RECVERR` / `IPV6_RECVERR`: report errors to the sender. Without it,
/// a UDP send that the queue below drops (ENOBUFS) looks like success.
pub fn set_recv_errors(fd: BorrowedFd<'_>, ipv6: bool) -> io::Result<()> {
    if ipv6 {
        set_flag(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVERR, true)
    } else {
        set_flag(fd, libc::IPPROTO_IP, libc::IP_RECVERR, true)
    }
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
    get_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF).map(crate::conv::count)
}

/// As [`force_recv_buffer`], for the send buffer.
pub fn force_send_buffer(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<usize> {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    if set_raw(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, &v).is_err() {
        set_raw(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, &v)?;
    }
    get_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF).map(crate::conv::count)
}

/// The receive buffer the kernel granted (`SO_RCVBUF`, as it reports it:
/// twice what was asked, for its bookkeeping).
pub fn recv_buffer(fd: BorrowedFd<'_>) -> io::Result<usize> {
    get_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF).map(crate::conv::count)
}

/// Makes every send on this UDP socket a train of datagrams of `size`
/// bytes each (`UDP_SEGMENT`, generic segmentation offload); 0 turns it
/// off.
pub fn set_udp_segment(fd: BorrowedFd<'_>, size: u16) -> io::Result<()> {
    set_raw(fd, libc::SOL_UDP, libc::UDP_SEGMENT, &libc::c_int::from(size))
}

/// Lets the kernel hand this UDP socket trains of same-sized datagrams
/// as one buffer (`UDP_GRO`); [`recv_gro`] says where they split.
pub fn set_udp_gro(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    set_flag(fd, libc::SOL_UDP, libc::UDP_GRO, on)
}

/// Receives one buffer into `buf` (without waiting if `dont_wait`):
/// returns its length and, when the kernel coalesced several datagrams
/// (`UDP_GRO`), the size of each but the last.
pub fn recv_gro(fd: BorrowedFd<'_>, buf: &mut [u8], dont_wait: bool) -> io::Result<(usize, Option<usize>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = [0u64; 8];
    // SAFETY: msghdr is plain data; all zeroes is a valid value.
    let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
    m.msg_iov = &mut iov;
    m.msg_iovlen = 1;
    m.msg_control = control.as_mut_ptr().cast();
    m.msg_controllen = std::mem::size_of_val(&control);
    let flags = if dont_wait { libc::MSG_DONTWAIT } else { 0 };
    // SAFETY: every pointer in `m` (the iovec over `buf`, the control
    // buffer) is live and writable for the call.
    let n = unsafe { libc::recvmsg(std::os::fd::AsRawFd::as_raw_fd(&fd), &mut m, flags) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = crate::conv::count(n);
    let mut segment = None;
    // SAFETY: the kernel filled `m`'s control buffer and set its length.
    let mut c = unsafe { libc::CMSG_FIRSTHDR(&m) };
    while !c.is_null() {
        // SAFETY: `c` is a header the kernel wrote inside the buffer.
        let h = unsafe { &*c };
        let (level, kind) = (h.cmsg_level, h.cmsg_type);
        if level == libc::SOL_UDP && kind == libc::UDP_GRO {
            // SAFETY: arithmetic on the header the kernel wrote.
            let data = unsafe { libc::CMSG_DATA(c) };
            // SAFETY: a UDP_GRO message carries an int after its header.
            let v = unsafe { std::ptr::read_unaligned(data.cast::<libc::c_int>()) };
            segment = usize::try_from(v).ok().filter(|&s| s > 0);
        }
        // SAFETY: the next header within `m`'s control buffer, or null.
        c = unsafe { libc::CMSG_NXTHDR(&m, c) };
    }
    Ok((n, segment))
}

/// Attaches a classic BPF program (`SO_ATTACH_FILTER`), replacing any
/// the socket had, atomically.
pub fn attach_filter(fd: BorrowedFd<'_>, prog: &[libc::sock_filter]) -> io::Result<()> {
    set_program(fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, prog)
}

/// Hands the kernel a classic BPF program through option `name` of
/// `level`.
pub fn set_program(fd: BorrowedFd<'_>, level: i32, name: i32, prog: &[libc::sock_filter]) -> io::Result<()> {
    let fprog = libc::sock_fprog {
        len: u16::try_from(prog.len()).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "filter too long"))?,
        filter: prog.as_ptr().cast_mut(),
    };
    // `fprog` points at `prog`, alive for the call; the kernel copies the
    // program before it returns.
    set_raw(fd, level, name, &fprog)
}

/// Makes a socket refuse every packet at its filter, so nothing is ever
/// queued to it (the kernel counts each as a UDP `InErrors`).
pub fn drop_everything(fd: BorrowedFd<'_>) -> io::Result<()> {
    // Classic BPF opcodes are 16 bits.
    #[allow(clippy::cast_possible_truncation)]
    const BPF_RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    attach_filter(
        fd,
        &[libc::sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: 0,
        }],
    )
}

/// `IP_MULTICAST_IF` by interface index (`ip_mreqn`), so the choice does not
/// depend on which address the interface has.
pub fn set_multicast_if_v4_index(fd: BorrowedFd<'_>, ifindex: u32) -> io::Result<()> {
    let mreqn = libc::ip_mreqn {
        imr_multiaddr: libc::in_addr { s_addr: 0 },
        imr_address: libc::in_addr { s_addr: 0 },
        imr_ifindex: crate::conv::ifindex_int(ifindex),
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
        set_recv_errors(s.as_fd(), false).expect("recverr");
        assert_eq!(receive_drops(s.as_fd()).expect("meminfo"), 0);
        set_multicast_all(s.as_fd(), false, false).expect("multicast_all");
        let granted = force_recv_buffer(s.as_fd(), 1 << 20).expect("rcvbuf");
        assert!(granted > 0);
        set_multicast_if_v4_index(s.as_fd(), 1).expect("multicast_if lo");
        let s6 = Socket::new(Domain::IPV6, Type::DGRAM, None).expect("socket6");
        set_recv_pktinfo(s6.as_fd(), true).expect("pktinfo6");
        set_multicast_all(s6.as_fd(), true, false).expect("multicast_all6");
    }

    #[test]
    fn receive_drops_count_what_a_full_buffer_turned_away() {
        use std::net::UdpSocket;
        let rx = UdpSocket::bind("127.0.0.1:0").expect("rx");
        // The kernel rounds tiny buffers up to its minimum (a few KB).
        let v: libc::c_int = 1;
        set_raw(rx.as_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, &v).expect("rcvbuf");
        let tx = UdpSocket::bind("127.0.0.1:0").expect("tx");
        let big = [0u8; 1400];
        for _ in 0..200 {
            tx.send_to(&big, rx.local_addr().expect("addr")).expect("send");
        }
        let drops = receive_drops(rx.as_fd()).expect("meminfo");
        assert!(drops > 0 && drops < 200, "drops {drops}");
    }
}
