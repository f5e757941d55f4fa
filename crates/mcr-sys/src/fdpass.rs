//! Passing open descriptors between processes (`SCM_RIGHTS`) over a
//! `SOCK_SEQPACKET` socket pair: each message is a few bytes of text and up
//! to [`MAX_FDS`] descriptors, delivered whole and in order.
//!
//! The supervisor keeps a copy of each worker's receive rings this way, so
//! that a ring outlives the worker that reads it.

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// The most descriptors one message carries (the kernel takes up to 253).
pub const MAX_FDS: usize = 64;
/// The longest text one message carries.
pub const MAX_TEXT: usize = 16 << 10;

/// A connected pair of `SOCK_SEQPACKET` Unix sockets (close-on-exec).
pub fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1 as RawFd; 2];
    // SAFETY: socketpair writes two descriptors into the array it is given,
    // which has room for exactly two.
    crate::check(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    // SAFETY: a fresh descriptor that nothing else owns.
    let a = unsafe { OwnedFd::from_raw_fd(fds[0]) };
    // SAFETY: as above.
    let b = unsafe { OwnedFd::from_raw_fd(fds[1]) };
    Ok((a, b))
}

/// Sets or clears `O_NONBLOCK`.
pub fn set_nonblocking(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    // SAFETY: F_GETFL/F_SETFL take and return plain integers.
    let flags = crate::check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    let flags = if on {
        flags | libc::O_NONBLOCK
    } else {
        flags & !libc::O_NONBLOCK
    };
    // SAFETY: as above.
    crate::check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags) }).map(|_| ())
}

/// Room for the control message of [`MAX_FDS`] descriptors, aligned as
/// `cmsghdr` needs.
#[repr(C, align(8))]
struct CmsgBuf([u8; 512]);

/// Rounds up to the alignment of control messages (`CMSG_ALIGN`).
fn cmsg_align(x: usize) -> usize {
    let a = mem::size_of::<usize>();
    (x + a - 1) & !(a - 1)
}

/// Where a control message's data starts (`CMSG_LEN(0)`).
fn cmsg_data_at() -> usize {
    cmsg_align(mem::size_of::<libc::cmsghdr>())
}

/// Writes one `SCM_RIGHTS` control message carrying `fds` at the start of
/// `buf`, field by field at the offsets of `cmsghdr`; returns its space
/// (`CMSG_SPACE`).
fn put_rights(buf: &mut [u8], fds: &[BorrowedFd<'_>]) -> usize {
    let data = fds.len() * mem::size_of::<RawFd>();
    let len = cmsg_data_at() + data;
    buf[mem::offset_of!(libc::cmsghdr, cmsg_len)..][..mem::size_of::<usize>()].copy_from_slice(&len.to_ne_bytes());
    buf[mem::offset_of!(libc::cmsghdr, cmsg_level)..][..4].copy_from_slice(&libc::SOL_SOCKET.to_ne_bytes());
    buf[mem::offset_of!(libc::cmsghdr, cmsg_type)..][..4].copy_from_slice(&libc::SCM_RIGHTS.to_ne_bytes());
    for (i, fd) in fds.iter().enumerate() {
        buf[cmsg_data_at() + i * 4..][..4].copy_from_slice(&fd.as_raw_fd().to_ne_bytes());
    }
    cmsg_data_at() + cmsg_align(data)
}

/// Takes ownership of the descriptors of every `SCM_RIGHTS` message in
/// `control` (what the kernel wrote back from `recvmsg`).
fn take_rights(control: &[u8]) -> Vec<OwnedFd> {
    let mut fds = Vec::new();
    let mut at = 0;
    let word = mem::size_of::<usize>();
    while at + cmsg_data_at() <= control.len() {
        let field = |off: usize, n: usize| &control[at + off..at + off + n];
        let len = usize::from_ne_bytes(
            field(mem::offset_of!(libc::cmsghdr, cmsg_len), word)
                .try_into()
                .unwrap_or([0; mem::size_of::<usize>()]),
        );
        let int = |off: usize| i32::from_ne_bytes(field(off, 4).try_into().unwrap_or([0; 4]));
        let level = int(mem::offset_of!(libc::cmsghdr, cmsg_level));
        let kind = int(mem::offset_of!(libc::cmsghdr, cmsg_type));
        if len < cmsg_data_at() || at + len > control.len() {
            break;
        }
        if level == libc::SOL_SOCKET && kind == libc::SCM_RIGHTS {
            for raw in control[at + cmsg_data_at()..at + len].chunks_exact(4) {
                let Ok(raw) = <[u8; 4]>::try_from(raw).map(RawFd::from_ne_bytes) else {
                    continue;
                };
                if raw < 0 {
                    continue;
                }
                // SAFETY: the kernel installed this descriptor in this
                // process for this message; nothing else knows its number,
                // and it is taken exactly once.
                fds.push(unsafe { OwnedFd::from_raw_fd(raw) });
            }
        }
        at += cmsg_align(len);
    }
    fds
}

/// Sends `text` (not empty, at most [`MAX_TEXT`]) with `fds` (at most
/// [`MAX_FDS`]) as one message.
pub fn send(sock: BorrowedFd<'_>, text: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    send_with(sock, text, fds, 0)
}

/// [`send`], failing with `WouldBlock` rather than waiting for room.
pub fn send_nowait(sock: BorrowedFd<'_>, text: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    send_with(sock, text, fds, libc::MSG_DONTWAIT)
}

fn send_with(sock: BorrowedFd<'_>, text: &[u8], fds: &[BorrowedFd<'_>], flags: libc::c_int) -> io::Result<()> {
    if text.is_empty() || text.len() > MAX_TEXT || fds.len() > MAX_FDS {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "message size"));
    }
    let mut iov = libc::iovec {
        iov_base: text.as_ptr() as *mut libc::c_void,
        iov_len: text.len(),
    };
    let mut cbuf = CmsgBuf([0; 512]);
    // SAFETY: msghdr is plain data; all zeroes is a valid empty header.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        let space = put_rights(&mut cbuf.0, fds);
        msg.msg_control = cbuf.0.as_mut_ptr().cast();
        msg.msg_controllen = space;
    }
    loop {
        // SAFETY: `msg` points at live buffers of the lengths it states; the
        // kernel only reads them.
        let rc = unsafe { libc::sendmsg(sock.as_raw_fd(), &raw const msg, libc::MSG_NOSIGNAL | flags) };
        if rc >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// One message received.
#[derive(Debug)]
pub struct Received {
    /// Its text.
    pub text: Vec<u8>,
    /// The descriptors it carried, in order (close-on-exec).
    pub fds: Vec<OwnedFd>,
    /// The text or the descriptors did not fit and were cut.
    pub truncated: bool,
}

/// Receives one message; `None` when the peer has closed its end and
/// nothing is left.
pub fn recv(sock: BorrowedFd<'_>) -> io::Result<Option<Received>> {
    recv_with(sock, 0)
}

/// [`recv`], failing with `WouldBlock` when no message is waiting.
pub fn recv_nowait(sock: BorrowedFd<'_>) -> io::Result<Option<Received>> {
    recv_with(sock, libc::MSG_DONTWAIT)
}

fn recv_with(sock: BorrowedFd<'_>, flags: libc::c_int) -> io::Result<Option<Received>> {
    let mut text = vec![0u8; MAX_TEXT];
    let mut iov = libc::iovec {
        iov_base: text.as_mut_ptr().cast(),
        iov_len: text.len(),
    };
    let mut cbuf = CmsgBuf([0; 512]);
    // SAFETY: msghdr is plain data; all zeroes is a valid empty header.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.0.as_mut_ptr().cast();
    msg.msg_controllen = cbuf.0.len();
    let n = loop {
        // SAFETY: `msg` points at writable buffers of the lengths it states.
        let rc = unsafe { libc::recvmsg(sock.as_raw_fd(), &raw mut msg, libc::MSG_CMSG_CLOEXEC | flags) };
        if rc >= 0 {
            break crate::conv::count(rc);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    let fds = take_rights(&cbuf.0[..msg.msg_controllen.min(cbuf.0.len())]);
    if n == 0 && fds.is_empty() {
        return Ok(None);
    }
    text.truncate(n);
    Ok(Some(Received {
        text,
        fds,
        truncated: msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_descriptor_crosses_and_still_refers_to_the_same_file() {
        let (a, b) = seqpacket_pair().unwrap();
        let (x, y) = seqpacket_pair().unwrap();
        send(a.as_fd(), b"hold 1", &[x.as_fd()]).unwrap();
        send(a.as_fd(), b"plain", &[]).unwrap();
        let r = recv(b.as_fd()).unwrap().unwrap();
        assert_eq!(r.text, b"hold 1");
        assert_eq!(r.fds.len(), 1);
        assert!(!r.truncated);
        // The received copy is the same socket: what is sent through it
        // arrives at `y`.
        send(r.fds[0].as_fd(), b"through the copy", &[]).unwrap();
        assert_eq!(recv(y.as_fd()).unwrap().unwrap().text, b"through the copy");
        let r = recv(b.as_fd()).unwrap().unwrap();
        assert_eq!((r.text.as_slice(), r.fds.len()), (&b"plain"[..], 0));
        drop(a);
        assert!(recv(b.as_fd()).unwrap().is_none());
    }

    #[test]
    fn many_descriptors_in_one_message() {
        let (a, b) = seqpacket_pair().unwrap();
        let pairs: Vec<_> = (0..MAX_FDS).map(|_| seqpacket_pair().unwrap()).collect();
        let fds: Vec<_> = pairs.iter().map(|p| p.0.as_fd()).collect();
        send(a.as_fd(), b"many", &fds).unwrap();
        let r = recv(b.as_fd()).unwrap().unwrap();
        assert_eq!(r.fds.len(), MAX_FDS);
        assert!(send(a.as_fd(), b"too many", &[fds.clone(), fds].concat()).is_err());
    }
}
