//! Socket addresses in the kernel's layout, built once and handed to batched
//! syscalls without conversion per packet.

use std::fmt;
use std::mem;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// A `sockaddr_in` or `sockaddr_in6`, stored in a `sockaddr_storage`.
#[derive(Clone, Copy)]
pub struct RawSockAddr {
    storage: libc::sockaddr_storage,
    len: libc::socklen_t,
}

impl RawSockAddr {
    /// The kernel's form of `addr`.
    pub fn new(addr: SocketAddr) -> Self {
        let mut storage = zeroed_storage();
        let len = match addr {
            SocketAddr::V4(a) => {
                let sin = libc::sockaddr_in {
                    sin_family: crate::conv::family(libc::AF_INET),
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes(a.ip().octets()),
                    },
                    sin_zero: [0; 8],
                };
                // SAFETY: sockaddr_storage is larger than sockaddr_in and
                // aligned for every sockaddr type, so the write stays inside
                // `storage` and is aligned.
                unsafe { std::ptr::write((&raw mut storage).cast::<libc::sockaddr_in>(), sin) };
                mem::size_of::<libc::sockaddr_in>()
            }
            SocketAddr::V6(a) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: crate::conv::family(libc::AF_INET6),
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo(),
                    sin6_addr: libc::in6_addr {
                        s6_addr: a.ip().octets(),
                    },
                    sin6_scope_id: a.scope_id(),
                };
                // SAFETY: as above, sockaddr_storage holds a sockaddr_in6.
                unsafe { std::ptr::write((&raw mut storage).cast::<libc::sockaddr_in6>(), sin6) };
                mem::size_of::<libc::sockaddr_in6>()
            }
        };
        RawSockAddr {
            storage,
            len: crate::conv::socklen(len),
        }
    }

    /// The address as a standard type, or `None` for a family other than
    /// IPv4 and IPv6.
    pub fn to_std(&self) -> Option<SocketAddr> {
        from_storage(&self.storage, self.len)
    }

    pub(crate) fn as_ptr(&self) -> *const libc::sockaddr {
        (&raw const self.storage).cast()
    }

    pub(crate) fn len(&self) -> libc::socklen_t {
        self.len
    }
}

impl fmt::Debug for RawSockAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.to_std() {
            Some(a) => write!(f, "RawSockAddr({a})"),
            None => write!(f, "RawSockAddr(family {})", self.storage.ss_family),
        }
    }
}

pub(crate) fn zeroed_storage() -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is plain old data; all zeroes is a valid value
    // (family AF_UNSPEC).
    unsafe { mem::zeroed() }
}

/// Reads a socket address the kernel wrote into `storage` (`len` bytes).
pub(crate) fn from_storage(storage: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    let len = len as usize;
    match libc::c_int::from(storage.ss_family) {
        libc::AF_INET if len >= mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says the storage holds a sockaddr_in, the
            // length covers it, and sockaddr_storage is aligned for it.
            let sin = unsafe { &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(sin.sin_port))))
        }
        libc::AF_INET6 if len >= mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe { &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// An `in_addr`'s address as a standard type.
pub(crate) fn ip_from_in_addr(a: libc::in_addr) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(a.s_addr.to_ne_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_both_families() {
        for s in ["239.1.2.3:5001", "10.0.0.1:1", "[ff3e::1:2]:6001", "[fe80::1%7]:9"] {
            let addr: SocketAddr = match s.parse() {
                Ok(a) => a,
                // std does not parse a scope id; build that one by hand.
                Err(_) => SocketAddr::V6(SocketAddrV6::new("fe80::1".parse().expect("literal"), 9, 0, 7)),
            };
            let raw = RawSockAddr::new(addr);
            assert_eq!(raw.to_std(), Some(addr), "{s}");
        }
    }

    #[test]
    fn port_is_stored_in_network_order() {
        let raw = RawSockAddr::new("1.2.3.4:258".parse().expect("literal"));
        // SAFETY: test only; the storage holds a sockaddr_in, written by `new`.
        let sin = unsafe { &*(&raw const raw.storage).cast::<libc::sockaddr_in>() };
        assert_eq!(sin.sin_port.to_ne_bytes(), [1, 2]);
        assert_eq!(sin.sin_addr.s_addr.to_ne_bytes(), [1, 2, 3, 4]);
    }
}
