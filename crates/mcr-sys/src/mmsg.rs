//! Batched UDP I/O: many datagrams per `sendmmsg` / `recvmmsg` call.
//!
//! The kernel structures (`mmsghdr`, `iovec`) hold raw pointers, so they are
//! built on the stack for each call from borrowed slices and never outlive it.

use std::io;
use std::mem;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, BorrowedFd};

use crate::sockaddr::{self, RawSockAddr};

/// The most datagrams one call moves.
pub const MAX_BATCH: usize = 64;

/// One datagram to send: destination and bytes.
#[derive(Debug, Clone, Copy)]
pub struct Outgoing<'a> {
    /// Where it goes; `None` on a connected socket.
    pub to: Option<&'a RawSockAddr>,
    /// The UDP payload.
    pub data: &'a [u8],
    /// This datagram's TTL (IPv4) or hop limit (IPv6), sent as a control
    /// message; `None` for the socket's own.
    pub ttl: Option<u8>,
    /// This datagram's TOS byte (IPv4) or traffic class (IPv6), sent as a
    /// control message; `None` for the socket's own.
    pub tos: Option<u8>,
}

impl<'a> Outgoing<'a> {
    /// A datagram to `to` (or to the connected peer) with the socket's TTL
    /// and TOS.
    pub fn new(to: Option<&'a RawSockAddr>, data: &'a [u8]) -> Self {
        Outgoing {
            to,
            data,
            ttl: None,
            tos: None,
        }
    }
}

/// Room for two control messages of an int each (`IP_TTL` /
/// `IPV6_HOPLIMIT` and `IP_TOS` / `IPV6_TCLASS`), with their headers, in
/// `u64`s: 2 × CMSG_SPACE(4) = 48 bytes.
const CMSG_WORDS: usize = 6;

/// Sends up to [`MAX_BATCH`] datagrams with one `sendmmsg` call and returns
/// how many the kernel accepted (it may take fewer than offered).
pub fn send_batch(fd: BorrowedFd<'_>, msgs: &[Outgoing<'_>], dont_wait: bool) -> io::Result<usize> {
    let n = msgs.len().min(MAX_BATCH);
    if n == 0 {
        return Ok(0);
    }
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; MAX_BATCH];
    for (slot, m) in iov.iter_mut().zip(msgs) {
        // sendmmsg only reads through iov_base; the field is *mut by C's type.
        slot.iov_base = m.data.as_ptr().cast_mut().cast();
        slot.iov_len = m.data.len();
    }
    // SAFETY: mmsghdr is plain data; all zeroes (null pointers, zero lengths)
    // is a valid value.
    let mut hdrs: [libc::mmsghdr; MAX_BATCH] = unsafe { mem::zeroed() };
    let mut control = [[0u64; CMSG_WORDS]; MAX_BATCH];
    let iov_base = iov.as_mut_ptr();
    let control_base = control.as_mut_ptr();
    for (i, (h, m)) in hdrs.iter_mut().zip(msgs).enumerate() {
        if let Some(to) = m.to {
            h.msg_hdr.msg_name = to.as_ptr().cast_mut().cast();
            h.msg_hdr.msg_namelen = to.len();
        }
        h.msg_hdr.msg_iov = iov_base.wrapping_add(i);
        h.msg_hdr.msg_iovlen = 1;
        if m.ttl.is_some() || m.tos.is_some() {
            let v6 = m.to.and_then(|t| t.to_std()).is_some_and(|a| a.is_ipv6());
            let (ttl, tos) = if v6 {
                (
                    (libc::IPPROTO_IPV6, libc::IPV6_HOPLIMIT),
                    (libc::IPPROTO_IPV6, libc::IPV6_TCLASS),
                )
            } else {
                ((libc::IPPROTO_IP, libc::IP_TTL), (libc::IPPROTO_IP, libc::IP_TOS))
            };
            let mut items = [(0, 0, 0); 2];
            let mut k = 0;
            for (v, (level, kind)) in [(m.ttl, ttl), (m.tos, tos)] {
                if let Some(v) = v {
                    items[k] = (level, kind, libc::c_int::from(v));
                    k += 1;
                }
            }
            let buf = control_base.wrapping_add(i).cast::<libc::c_void>();
            h.msg_hdr.msg_control = buf;
            h.msg_hdr.msg_controllen = mem::size_of::<[u64; CMSG_WORDS]>();
            write_int_cmsgs(&mut h.msg_hdr, &items[..k]);
        }
    }
    let flags = if dont_wait { libc::MSG_DONTWAIT } else { 0 };
    // SAFETY: the first `n` headers point at live iovecs, payloads and
    // addresses borrowed for the duration of the call; the kernel reads them
    // and writes only `msg_len` of each header.
    let rc = unsafe { libc::sendmmsg(fd.as_raw_fd(), hdrs.as_mut_ptr(), crate::conv::u32_len(n), flags) };
    crate::check(rc).map(crate::conv::count)
}

/// True for the errors that mean "the queue below is full, try again
/// shortly" (`ENOBUFS`, `EAGAIN`), as opposed to a real failure.
pub fn is_queue_full(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOBUFS) || e.kind() == io::ErrorKind::WouldBlock
}

/// Writes control messages of an int each (`(level, type, value)`, at
/// most two) into the control buffer of `hdr`, and shrinks its length to
/// what they take.
fn write_int_cmsgs(hdr: &mut libc::msghdr, items: &[(libc::c_int, libc::c_int, libc::c_int)]) {
    // SAFETY: CMSG_SPACE is arithmetic on a length.
    let space = unsafe { libc::CMSG_SPACE(crate::conv::socklen_of::<libc::c_int>()) } as usize;
    // SAFETY: CMSG_LEN is arithmetic on a length.
    let len = unsafe { libc::CMSG_LEN(crate::conv::socklen_of::<libc::c_int>()) } as usize;
    debug_assert!(items.len() * space <= mem::size_of::<[u64; CMSG_WORDS]>());
    // SAFETY: `hdr` points at a control buffer of CMSG_WORDS u64s (48
    // bytes, aligned for cmsghdr), which holds two CMSG_SPACE(4) = 24-byte
    // messages; CMSG_FIRSTHDR returns its start.
    let mut c = unsafe { libc::CMSG_FIRSTHDR(hdr) };
    let mut written = 0;
    for &(level, kind, value) in items.iter().take(2) {
        if c.is_null() {
            break;
        }
        // SAFETY: `c` is an aligned header position inside the control
        // buffer with room for a header and an int after it (see above);
        // nothing else refers to it.
        unsafe {
            c.write(libc::cmsghdr {
                cmsg_len: len,
                cmsg_level: level,
                cmsg_type: kind,
            })
        };
        // SAFETY: CMSG_DATA is arithmetic on the header just written.
        let data = unsafe { libc::CMSG_DATA(c) };
        // SAFETY: `data` points inside the control buffer, where an int fits
        // after the header; written unaligned to be safe.
        unsafe { std::ptr::write_unaligned(data.cast::<libc::c_int>(), value) };
        // SAFETY: CMSG_NXTHDR reads the header just written and the
        // buffer's bounds from `hdr`; it returns null past the end.
        c = unsafe { libc::CMSG_NXTHDR(hdr, c) };
        written += 1;
    }
    hdr.msg_controllen = written * space;
}

/// What the kernel said about one received datagram.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecvMeta {
    /// Bytes written into the buffer.
    pub len: usize,
    /// The datagram was longer than the buffer and was cut.
    pub truncated: bool,
    /// The sender's address.
    pub source: Option<SocketAddr>,
    /// The destination address in the IP header (needs [`crate::sockopt::set_recv_pktinfo`]).
    pub destination: Option<IpAddr>,
    /// When the kernel took the datagram in (its receive timestamp, ns on
    /// `CLOCK_REALTIME`; needs [`crate::sockopt::set_recv_timestamps`]).
    pub arrived_ns: Option<u64>,
    /// The kernel had more control messages than room for them; some of
    /// the fields above may be missing.
    pub control_truncated: bool,
}

/// Room for the control messages asked for (one `in6_pktinfo`, the larger
/// of the two pktinfo kinds, with header and padding), rounded up
/// generously.
const CONTROL_BYTES: usize = 128;

/// Buffers for receiving up to `batch` datagrams with one `recvmmsg` call.
pub struct RecvBatch {
    buf_bytes: usize,
    bufs: Vec<u8>,
    /// `u64` elements keep each control buffer aligned for `cmsghdr`.
    control: Vec<u64>,
    names: Vec<libc::sockaddr_storage>,
    meta: Vec<RecvMeta>,
    filled: usize,
}

impl std::fmt::Debug for RecvBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBatch")
            .field("batch", &self.meta.len())
            .field("buf_bytes", &self.buf_bytes)
            .field("filled", &self.filled)
            .finish()
    }
}

impl RecvBatch {
    /// Buffers for `batch` (at most [`MAX_BATCH`]) datagrams of up to
    /// `buf_bytes` each.
    pub fn new(batch: usize, buf_bytes: usize) -> Self {
        let batch = batch.clamp(1, MAX_BATCH);
        RecvBatch {
            buf_bytes,
            bufs: vec![0; batch * buf_bytes],
            control: vec![0; batch * CONTROL_BYTES / 8],
            names: vec![sockaddr::zeroed_storage(); batch],
            meta: vec![RecvMeta::default(); batch],
            filled: 0,
        }
    }

    /// Receives what is queued on `fd`, up to the batch size, without
    /// blocking. Returns how many datagrams arrived (0 when none was queued).
    pub fn recv(&mut self, fd: BorrowedFd<'_>) -> io::Result<usize> {
        self.filled = 0;
        let batch = self.meta.len();
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; MAX_BATCH];
        let bufs_base = self.bufs.as_mut_ptr();
        for (i, slot) in iov.iter_mut().take(batch).enumerate() {
            slot.iov_base = bufs_base.wrapping_add(i * self.buf_bytes).cast();
            slot.iov_len = self.buf_bytes;
        }
        // SAFETY: mmsghdr is plain data; all zeroes is a valid value.
        let mut hdrs: [libc::mmsghdr; MAX_BATCH] = unsafe { mem::zeroed() };
        let iov_base = iov.as_mut_ptr();
        let names_base = self.names.as_mut_ptr();
        let control_base = self.control.as_mut_ptr();
        for (i, h) in hdrs.iter_mut().take(batch).enumerate() {
            h.msg_hdr.msg_name = names_base.wrapping_add(i).cast();
            h.msg_hdr.msg_namelen = crate::conv::socklen_of::<libc::sockaddr_storage>();
            h.msg_hdr.msg_iov = iov_base.wrapping_add(i);
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_control = control_base.wrapping_add(i * CONTROL_BYTES / 8).cast();
            h.msg_hdr.msg_controllen = CONTROL_BYTES;
        }
        // SAFETY: each of the first `batch` headers points at its own buffer
        // of `buf_bytes`, its own sockaddr_storage and its own CONTROL_BYTES
        // of control space, all owned by `self` and not otherwise borrowed
        // during the call; the lengths given are those sizes.
        let rc = unsafe {
            libc::recvmmsg(
                fd.as_raw_fd(),
                hdrs.as_mut_ptr(),
                crate::conv::u32_len(batch),
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::WouldBlock {
                Ok(0)
            } else {
                Err(e)
            };
        }
        let n = crate::conv::count(rc);
        for (i, h) in hdrs.iter().take(n).enumerate() {
            let mut m = RecvMeta {
                len: h.msg_len as usize,
                truncated: h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
                source: sockaddr::from_storage(&self.names[i], h.msg_hdr.msg_namelen),
                destination: None,
                arrived_ns: None,
                control_truncated: h.msg_hdr.msg_flags & libc::MSG_CTRUNC != 0,
            };
            read_control(&h.msg_hdr, &mut m);
            self.meta[i] = m;
        }
        self.filled = n;
        Ok(n)
    }

    /// How many datagrams the last [`RecvBatch::recv`] filled in.
    pub fn len(&self) -> usize {
        self.filled
    }

    /// True when the last receive got nothing.
    pub fn is_empty(&self) -> bool {
        self.filled == 0
    }

    /// The `i`-th datagram of the last receive: its bytes and what the kernel
    /// said about it. Panics if `i >= self.len()`.
    pub fn get(&self, i: usize) -> (&[u8], &RecvMeta) {
        assert!(i < self.filled, "datagram {i} of a batch of {}", self.filled);
        let m = &self.meta[i];
        let start = i * self.buf_bytes;
        (&self.bufs[start..start + m.len.min(self.buf_bytes)], m)
    }
}

/// Reads a `T` from the data of control message `cmsg`, if the message is
/// long enough to hold one.
///
/// # Safety
/// `cmsg` must point at a complete `cmsghdr` inside a control buffer that
/// the kernel filled and that outlives the call, as `CMSG_FIRSTHDR` and
/// `CMSG_NXTHDR` return.
unsafe fn cmsg_data<T: Copy>(cmsg: *const libc::cmsghdr) -> Option<T> {
    // SAFETY: the caller guarantees `cmsg` points at a complete header.
    let len = unsafe { (*cmsg).cmsg_len };
    // SAFETY: CMSG_LEN is pure arithmetic on a length.
    let needed = unsafe { libc::CMSG_LEN(crate::conv::socklen_of::<T>()) } as usize;
    if len < needed {
        // The kernel cut this message short for want of room.
        return None;
    }
    // SAFETY: CMSG_DATA of a complete header points inside the same buffer.
    let data = unsafe { libc::CMSG_DATA(cmsg) };
    // SAFETY: cmsg_len covers the header and a whole `T`, all inside the
    // control buffer; the data may be unaligned, so read it unaligned.
    Some(unsafe { std::ptr::read_unaligned(data.cast::<T>()) })
}

/// Walks the control messages of one received datagram.
fn read_control(hdr: &libc::msghdr, m: &mut RecvMeta) {
    // SAFETY: `hdr` is a msghdr the kernel just filled in; its control
    // pointer and length describe our own buffer, which is still alive.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(hdr) };
    while !cmsg.is_null() {
        // SAFETY: CMSG_FIRSTHDR/CMSG_NXTHDR return either null or a pointer
        // to a complete cmsghdr inside the control buffer.
        let c = unsafe { &*cmsg };
        let (level, kind) = (c.cmsg_level, c.cmsg_type);
        match (level, kind) {
            (libc::IPPROTO_IP, libc::IP_PKTINFO) => {
                // SAFETY: `cmsg` comes from CMSG_FIRSTHDR/CMSG_NXTHDR.
                if let Some(pi) = unsafe { cmsg_data::<libc::in_pktinfo>(cmsg) } {
                    m.destination = Some(sockaddr::ip_from_in_addr(pi.ipi_addr));
                }
            }
            (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => {
                // SAFETY: as above.
                if let Some(pi) = unsafe { cmsg_data::<libc::in6_pktinfo>(cmsg) } {
                    m.destination = Some(IpAddr::V6(Ipv6Addr::from(pi.ipi6_addr.s6_addr)));
                }
            }
            (libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS) => {
                // SAFETY: as above.
                if let Some(ts) = unsafe { cmsg_data::<libc::timespec>(cmsg) } {
                    m.arrived_ns = u64::try_from(ts.tv_sec)
                        .ok()
                        .filter(|&s| s != 0)
                        .map(|s| s * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0));
                }
            }
            _ => {}
        }
        // SAFETY: `hdr` and `cmsg` are valid as above; CMSG_NXTHDR checks the
        // control length and returns null past the end.
        cmsg = unsafe { libc::CMSG_NXTHDR(hdr, cmsg) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sockopt;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;

    #[test]
    fn batch_over_loopback_carries_payload_and_destination() {
        let rx = UdpSocket::bind("127.0.0.1:0").expect("bind rx");
        sockopt::set_recv_pktinfo(rx.as_fd(), false).expect("pktinfo");
        sockopt::set_recv_timestamps(rx.as_fd()).expect("timestamps");
        let to = RawSockAddr::new(rx.local_addr().expect("addr"));
        let tx = UdpSocket::bind("127.0.0.1:0").expect("bind tx");
        let sent_at = crate::clock::monotonic_ns();
        let payloads: Vec<Vec<u8>> = (0u8..10).map(|i| vec![i; 100 + i as usize]).collect();
        let msgs: Vec<Outgoing<'_>> = payloads.iter().map(|p| Outgoing::new(Some(&to), p)).collect();
        assert_eq!(send_batch(tx.as_fd(), &msgs, false).expect("send"), 10);

        let mut batch = RecvBatch::new(16, 2048);
        let mut got = Vec::new();
        while got.len() < 10 {
            let n = batch.recv(rx.as_fd()).expect("recv");
            for i in 0..n {
                let (data, meta) = batch.get(i);
                assert_eq!(meta.destination, Some("127.0.0.1".parse().expect("literal")));
                assert_eq!(meta.source, Some(tx.local_addr().expect("addr")));
                assert!(!meta.truncated && !meta.control_truncated);
                let now = crate::clock::monotonic_ns();
                let stamp = meta.arrived_ns.expect("a receive timestamp");
                // On the monotonic clock, unclamped: after the send (give or
                // take the two clock reads) and not after now.
                let at = i128::from(stamp) - i128::from(crate::clock::realtime_offset_ns());
                assert!(
                    at >= i128::from(sent_at) - 1_000_000 && at <= i128::from(now) + 1_000_000,
                    "arrived {at}, sent {sent_at}, read {now}"
                );
                got.push(data.to_vec());
            }
        }
        assert_eq!(got, payloads);
    }

    #[test]
    fn a_datagram_longer_than_the_buffer_is_marked_truncated() {
        let rx = UdpSocket::bind("127.0.0.1:0").expect("bind rx");
        let to = RawSockAddr::new(rx.local_addr().expect("addr"));
        let tx = UdpSocket::bind("127.0.0.1:0").expect("bind tx");
        let big = vec![7u8; 500];
        send_batch(tx.as_fd(), &[Outgoing::new(Some(&to), &big)], false).expect("send");
        let mut batch = RecvBatch::new(4, 100);
        let mut n = 0;
        while n == 0 {
            n = batch.recv(rx.as_fd()).expect("recv");
        }
        let (data, meta) = batch.get(0);
        assert!(meta.truncated);
        assert_eq!(data.len(), 100);
    }

    #[test]
    fn a_ttl_and_tos_per_datagram_reach_the_receiver() {
        let rx = UdpSocket::bind("127.0.0.1:0").expect("bind rx");
        // Ask for each datagram's TTL and TOS on receipt.
        for opt in [libc::IP_RECVTTL, libc::IP_RECVTOS] {
            crate::sockopt::set_raw(rx.as_fd(), libc::IPPROTO_IP, opt, &(1 as libc::c_int))
                .expect("ask for TTL and TOS");
        }
        let to = RawSockAddr::new(rx.local_addr().expect("addr"));
        let tx = UdpSocket::bind("127.0.0.1:0").expect("bind tx");
        let msg = |data: &'static [u8], ttl, tos| Outgoing {
            to: Some(&to),
            data,
            ttl,
            tos,
        };
        let msgs = [
            msg(b"a", Some(7), Some(0xb8)),
            msg(b"b", Some(9), None),
            msg(b"c", None, Some(0x28)),
        ];
        assert_eq!(send_batch(tx.as_fd(), &msgs, false).expect("send"), 3);
        let mut got = Vec::new();
        let mut buf = [0u8; 16];
        let mut cbuf = [0u64; 8];
        while got.len() < 3 {
            let mut iov = libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: buf.len(),
            };
            // SAFETY: test only; msghdr is plain data.
            let mut m: libc::msghdr = unsafe { mem::zeroed() };
            m.msg_iov = &mut iov;
            m.msg_iovlen = 1;
            m.msg_control = cbuf.as_mut_ptr().cast();
            m.msg_controllen = mem::size_of_val(&cbuf);
            // SAFETY: test only; every pointer in `m` is live for the call.
            let n = unsafe { libc::recvmsg(std::os::fd::AsRawFd::as_raw_fd(&rx), &mut m, 0) };
            assert!(n > 0);
            let (mut ttl, mut tos) = (0, 0);
            // SAFETY: test only; the kernel filled `m`'s control buffer.
            let mut c = unsafe { libc::CMSG_FIRSTHDR(&m) };
            while !c.is_null() {
                // SAFETY: test only; arithmetic on a header the kernel wrote.
                let data = unsafe { libc::CMSG_DATA(c) };
                // SAFETY: test only; `c` is a header the kernel wrote.
                let kind = unsafe { (*c).cmsg_type };
                match kind {
                    // SAFETY: test only; an IP_TTL message carries an int.
                    libc::IP_TTL => ttl = unsafe { std::ptr::read_unaligned(data.cast::<libc::c_int>()) },
                    // SAFETY: test only; an IP_TOS message carries a byte.
                    libc::IP_TOS => tos = unsafe { *data },
                    _ => {}
                }
                // SAFETY: test only; the next header within `m`'s buffer, or null.
                c = unsafe { libc::CMSG_NXTHDR(&m, c) };
            }
            got.push((buf[0], ttl, tos));
        }
        assert_eq!(got, vec![(b'a', 7, 0xb8), (b'b', 9, 0), (b'c', 64, 0x28)]);
    }

    #[test]
    fn empty_socket_gives_zero_not_an_error() {
        let rx = UdpSocket::bind("127.0.0.1:0").expect("bind rx");
        let mut batch = RecvBatch::new(4, 100);
        assert_eq!(batch.recv(rx.as_fd()).expect("recv"), 0);
        assert!(batch.is_empty());
    }
}
