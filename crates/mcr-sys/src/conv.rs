//! The integer conversions the kernel's interfaces need, each in one place
//! with the reason it cannot lose anything. The crate denies the lossy
//! `as` casts everywhere else.

use std::os::fd::RawFd;

/// The size of `T` as the kernel's `socklen_t`: every structure passed
/// to a socket call is a few hundred bytes at most.
pub(crate) const fn socklen_of<T>() -> libc::socklen_t {
    let n = std::mem::size_of::<T>();
    assert!(n <= 1 << 16, "a socket structure is small");
    #[allow(clippy::cast_possible_truncation)]
    let len = n as libc::socklen_t;
    len
}

/// A byte count as `socklen_t`, saturating (the kernel then refuses it).
pub(crate) fn socklen(n: usize) -> libc::socklen_t {
    libc::socklen_t::try_from(n).unwrap_or(libc::socklen_t::MAX)
}

/// An address family constant (`AF_INET`, `AF_PACKET`, ...) as the
/// `sa_family_t` of a socket address: they are all below 64.
pub(crate) const fn family(af: libc::c_int) -> libc::sa_family_t {
    assert!(af >= 0 && af < 1 << 16, "an address family");
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let f = af as libc::sa_family_t;
    f
}

/// An EtherType constant (`ETH_P_ALL`, ...) as the u16 it is on the wire.
pub(crate) const fn ethertype(p: libc::c_int) -> u16 {
    assert!(p >= 0 && p < 1 << 16, "an EtherType");
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let t = p as u16;
    t
}

/// An open descriptor as the u32 the bpf(2) attributes take: descriptors
/// are never negative.
pub(crate) fn fd_u32(fd: RawFd) -> u32 {
    u32::try_from(fd).unwrap_or(u32::MAX)
}

/// A descriptor a raw syscall returned (so not negative).
pub(crate) fn fd_of(rc: libc::c_long) -> std::io::Result<RawFd> {
    RawFd::try_from(rc).map_err(|_| std::io::Error::other(format!("{rc} is not a descriptor")))
}

/// A count the kernel returned after [`crate::check`] (so not negative).
pub(crate) fn count<T: TryInto<usize>>(n: T) -> usize {
    n.try_into().unwrap_or(0)
}

/// A length for a u32 field of a kernel structure, saturating (the kernel
/// then refuses it as too large).
pub(crate) fn u32_len(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// An interface index as the `c_int` some structures hold: the kernel's
/// indexes are positive ints.
pub(crate) fn ifindex_int(ifindex: u32) -> libc::c_int {
    libc::c_int::try_from(ifindex).unwrap_or(libc::c_int::MAX)
}
