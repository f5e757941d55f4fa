//! Watching the host's interfaces: a route netlink socket subscribed to
//! link and address changes. The messages themselves are not parsed: any
//! of them (or an overflow of the socket) means "read the interfaces
//! again", which the caller does with [`crate::iface`].

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

// rtnetlink multicast groups (linux/rtnetlink.h, the RTMGRP_* bits).
const RTMGRP_LINK: u32 = 0x1;
const RTMGRP_IPV4_IFADDR: u32 = 0x10;
const RTMGRP_IPV6_IFADDR: u32 = 0x100;

/// A socket that becomes readable when an interface appears, goes, goes up
/// or down, or gains or loses an address.
#[derive(Debug)]
pub struct LinkWatch {
    fd: OwnedFd,
}

impl LinkWatch {
    /// Opens the socket, subscribed to link and address changes of both
    /// families.
    pub fn open() -> io::Result<LinkWatch> {
        // SAFETY: socket() takes plain integers and returns a new fd or -1.
        let raw = crate::check(unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        })?;
        // SAFETY: `raw` is a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: an all-zero sockaddr_nl is valid; the fields are set below.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = crate::conv::family(libc::AF_NETLINK);
        addr.nl_groups = RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR;
        // SAFETY: `addr` is a valid sockaddr_nl and its size is passed.
        crate::check(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_nl).cast(),
                crate::conv::socklen_of::<libc::sockaddr_nl>(),
            )
        })?;
        Ok(LinkWatch { fd })
    }

    /// Blocks until a change is announced, then reads every message
    /// waiting; returns how many there were.
    pub fn wait(&self) -> io::Result<usize> {
        let mut buf = [0u8; 16 * 1024];
        loop {
            // SAFETY: `buf` is writable for its whole length, which is passed.
            let rc = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if rc >= 0 {
                return Ok(1 + self.drain()?);
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                // The kernel dropped messages: a change all the same.
                Some(libc::ENOBUFS) => return Ok(1 + self.drain()?),
                Some(libc::EINTR) => {}
                _ => return Err(e),
            }
        }
    }

    /// Reads every message waiting, without blocking; returns how many
    /// there were (an overflow, when the kernel dropped some, counts as
    /// one: the caller must read the interfaces again either way).
    pub fn drain(&self) -> io::Result<usize> {
        let mut buf = [0u8; 16 * 1024];
        let mut n = 0;
        loop {
            // SAFETY: `buf` is writable for its whole length, which is passed.
            let rc = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if rc >= 0 {
                n += 1;
                continue;
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN) => return Ok(n),
                Some(libc::ENOBUFS) => n += 1,
                Some(libc::EINTR) => {}
                _ => return Err(e),
            }
        }
    }
}

impl AsFd for LinkWatch {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for LinkWatch {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_link_and_address_are_seen() {
        let ns = format!("mcr-nltest-{}", std::process::id());
        let ip = |args: &[&str]| {
            let ok = std::process::Command::new("ip")
                .args(args)
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "ip {args:?}");
        };
        ip(&["netns", "add", &ns]);
        let result = std::thread::spawn({
            let ns = ns.clone();
            move || {
                crate::netns::enter(&ns).expect("enter the namespace");
                let w = LinkWatch::open().expect("netlink socket");
                assert_eq!(w.drain().expect("drain"), 0, "a new namespace is quiet");
                let run = |args: &[&str]| {
                    std::process::Command::new("ip")
                        .args(["-n", &ns])
                        .args(args)
                        .status()
                        .is_ok_and(|s| s.success())
                };
                assert!(run(&["link", "add", "nl0", "type", "veth", "peer", "name", "nl1"]));
                assert!(run(&["addr", "add", "10.99.0.1/24", "dev", "nl0"]));
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
                let mut seen = 0;
                while seen < 2 && std::time::Instant::now() < deadline {
                    seen += w.drain().expect("drain");
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                seen
            }
        })
        .join();
        ip(&["netns", "del", &ns]);
        let seen = result.expect("the watching thread");
        assert!(seen >= 2, "the link and its address were announced: {seen}");
    }
}
