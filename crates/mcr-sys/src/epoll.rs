//! Readiness notification for many file descriptors (`epoll`), level
//! triggered, each fd registered with a caller-chosen token.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// An epoll instance.
#[derive(Debug)]
pub struct Epoll {
    fd: OwnedFd,
    events: Vec<libc::epoll_event>,
}

impl Epoll {
    /// A new epoll instance that reports up to `max_events` ready fds per wait.
    pub fn new(max_events: usize) -> io::Result<Epoll> {
        // SAFETY: epoll_create1 takes a flag and returns a new fd or -1.
        let raw = crate::check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: `raw` is a freshly created fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(Epoll {
            fd,
            events: vec![libc::epoll_event { events: 0, u64: 0 }; max_events.max(1)],
        })
    }

    /// Watches `fd` for readability; [`Epoll::wait`] reports it as `token`.
    /// The caller keeps `fd` open while it is registered.
    pub fn add_readable(&self, fd: BorrowedFd<'_>, token: u64) -> io::Result<()> {
        self.add(fd, token, libc::EPOLLIN as u32)
    }

    /// Watches `fd` for wake-ups only (edge-triggered): [`Epoll::wait`]
    /// reports it as `token` when its owner signals new data, not for as
    /// long as data waits (a BPF ring buffer read on a timer, whose
    /// producer wakes the reader only when it fills up).
    pub fn add_wakeups(&self, fd: BorrowedFd<'_>, token: u64) -> io::Result<()> {
        self.add(fd, token, (libc::EPOLLIN | libc::EPOLLET).cast_unsigned())
    }

    fn add(&self, fd: BorrowedFd<'_>, token: u64, events: u32) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: `ev` is a valid epoll_event for the call; both fds are open.
        let rc = unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd.as_raw_fd(), &mut ev) };
        crate::check(rc).map(|_| ())
    }

    /// Stops watching `fd`.
    pub fn remove(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: as above; the event argument is ignored for EPOLL_CTL_DEL
        // but must be non-null on old kernels.
        let rc = unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_DEL, fd.as_raw_fd(), &mut ev) };
        crate::check(rc).map(|_| ())
    }

    /// Waits up to `timeout_ms` (-1: forever) and returns the tokens of the
    /// fds that are ready. An interrupted wait returns no tokens.
    pub fn wait(&mut self, timeout_ms: i32) -> io::Result<impl Iterator<Item = u64> + '_> {
        Ok(self.wait_events(timeout_ms)?.map(|e| e.token))
    }

    /// As [`Epoll::wait`], also saying whether each fd reported an error or
    /// a hang-up (`EPOLLERR`/`EPOLLHUP`), which stays reported until the
    /// fd's error is read.
    pub fn wait_events(&mut self, timeout_ms: i32) -> io::Result<impl Iterator<Item = Ready> + '_> {
        // SAFETY: `events` has `len` writable entries; the kernel writes at
        // most that many.
        let rc = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                self.events.as_mut_ptr(),
                libc::c_int::try_from(self.events.len()).unwrap_or(libc::c_int::MAX),
                timeout_ms,
            )
        };
        let n = match crate::check(rc) {
            Ok(n) => crate::conv::count(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
            Err(e) => return Err(e),
        };
        Ok(self.events[..n].iter().map(|e| Ready {
            token: e.u64,
            error: e.events & (libc::EPOLLERR | libc::EPOLLHUP) as u32 != 0,
        }))
    }
}

/// A ready file descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ready {
    /// The token it was registered with.
    pub token: u64,
    /// It reported an error or a hang-up.
    pub error: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;

    #[test]
    fn reports_the_token_of_a_readable_socket() {
        let a = UdpSocket::bind("127.0.0.1:0").expect("a");
        let b = UdpSocket::bind("127.0.0.1:0").expect("b");
        let mut ep = Epoll::new(4).expect("epoll");
        ep.add_readable(a.as_fd(), 10).expect("add a");
        ep.add_readable(b.as_fd(), 20).expect("add b");
        assert_eq!(ep.wait(0).expect("wait").count(), 0);
        b.send_to(b"x", a.local_addr().expect("addr")).expect("send");
        let ready: Vec<u64> = ep.wait(5000).expect("wait").collect();
        assert_eq!(ready, vec![10]);
        ep.remove(a.as_fd()).expect("remove");
        assert_eq!(ep.wait(0).expect("wait").count(), 0);
    }
}
