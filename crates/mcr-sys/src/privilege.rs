//! Users, groups and capabilities: looking up accounts, dropping from root
//! to an unprivileged user while keeping exactly the capabilities MCR
//! needs, and reading them back.

use std::ffi::CString;
use std::io;

/// A capability, by its number in `linux/capability.h`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    /// CAP_NET_ADMIN (12): forced socket buffer sizes, multicast options.
    NetAdmin,
    /// CAP_NET_RAW (13): AF_PACKET sockets.
    NetRaw,
}

impl Cap {
    fn number(self) -> u32 {
        match self {
            Cap::NetAdmin => 12,
            Cap::NetRaw => 13,
        }
    }
}

/// A user account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    /// Its name.
    pub name: String,
    /// Its user id.
    pub uid: u32,
    /// Its primary group id.
    pub gid: u32,
}

/// Buffer size for the `get*_r` lookups (their own suggestion, or 16 KiB).
fn lookup_buffer(kind: libc::c_int) -> Vec<libc::c_char> {
    // SAFETY: sysconf reads a constant and touches no memory.
    let n = unsafe { libc::sysconf(kind) };
    vec![0; usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(16 * 1024)]
}

fn c_name(name: &str) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a name has no NUL byte"))
}

/// The largest buffer a lookup grows to (an entry with many members).
const MAX_LOOKUP_BUFFER: usize = 1 << 20;

/// Runs a `get*nam_r` lookup, growing the buffer while it says ERANGE.
/// Returns whether an entry was found. "Not found" errors (ENOENT, ESRCH,
/// EBADF, EPERM, as NSS modules variously report it) count as not found.
fn lookup(kind: libc::c_int, mut call: impl FnMut(&mut [libc::c_char]) -> (libc::c_int, bool)) -> io::Result<bool> {
    let mut buf = lookup_buffer(kind);
    loop {
        let (rc, found) = call(&mut buf);
        match rc {
            0 => return Ok(found),
            libc::ERANGE if buf.len() < MAX_LOOKUP_BUFFER => buf.resize(buf.len() * 2, 0),
            libc::ENOENT | libc::ESRCH | libc::EBADF | libc::EPERM => return Ok(false),
            e => return Err(io::Error::from_raw_os_error(e)),
        }
    }
}

/// The account called `name` (through NSS, as `getent passwd` sees it), or
/// `None` if there is none.
pub fn user(name: &str) -> io::Result<Option<Account>> {
    let cname = c_name(name)?;
    // SAFETY: an all-zero passwd is a valid value of the plain C struct;
    // getpwnam_r fills it.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let found = lookup(libc::_SC_GETPW_R_SIZE_MAX, |buf| {
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call: the name is
        // NUL-terminated, `pw` and `found` are writable, and `buf` is
        // writable for its whole length, which is passed.
        let rc = unsafe { libc::getpwnam_r(cname.as_ptr(), &mut pw, buf.as_mut_ptr(), buf.len(), &mut found) };
        (rc, !found.is_null())
    })?;
    Ok(found.then(|| Account {
        name: name.to_string(),
        uid: pw.pw_uid,
        gid: pw.pw_gid,
    }))
}

/// The id of the group called `name`, or `None` if there is none.
pub fn group(name: &str) -> io::Result<Option<u32>> {
    let cname = c_name(name)?;
    // SAFETY: an all-zero group is a valid value of the plain C struct;
    // getgrnam_r fills it.
    let mut gr: libc::group = unsafe { std::mem::zeroed() };
    let found = lookup(libc::_SC_GETGR_R_SIZE_MAX, |buf| {
        let mut found: *mut libc::group = std::ptr::null_mut();
        // SAFETY: as for getpwnam_r above.
        let rc = unsafe { libc::getgrnam_r(cname.as_ptr(), &mut gr, buf.as_mut_ptr(), buf.len(), &mut found) };
        (rc, !found.is_null())
    })?;
    Ok(found.then_some(gr.gr_gid))
}

/// The groups (primary and supplementary) of the process at the other end
/// of the Unix socket `fd`, as they were when it connected
/// (`SO_PEERGROUPS`), without the primary group `SO_PEERCRED` gives.
pub fn peer_groups(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<Vec<u32>> {
    use std::os::fd::AsRawFd;
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    loop {
        let mut len = crate::conv::socklen(groups.len() * std::mem::size_of::<libc::gid_t>());
        // SAFETY: `groups` is writable for `len` bytes, which is passed, and
        // the kernel writes back how many it used (or needs).
        let rc = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let n = len as usize / std::mem::size_of::<libc::gid_t>();
        if rc == 0 {
            groups.truncate(n);
            return Ok(groups);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ERANGE) && n > groups.len() && n <= 65_536 {
            groups.resize(n, 0);
            continue;
        }
        return Err(e);
    }
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const CAP_VERSION_3: u32 = 0x2008_0522;

fn capset(caps: &[Cap]) -> io::Result<()> {
    let mask = caps.iter().fold(0u32, |m, c| m | (1 << c.number()));
    let hdr = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let data = [
        CapData {
            effective: mask,
            permitted: mask,
            inheritable: mask,
        },
        CapData::default(),
    ];
    // SAFETY: capset reads a version-3 header and two data structs, which
    // is what is passed; both outlive the call.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &hdr as *const CapHeader, data.as_ptr()) };
    crate::check(libc::c_int::try_from(rc).unwrap_or(-1)).map(|_| ())
}

fn prctl(option: libc::c_int, a: libc::c_ulong, b: libc::c_ulong) -> io::Result<()> {
    // SAFETY: the prctl options used here take integer arguments only.
    crate::check(unsafe { libc::prctl(option, a, b, 0 as libc::c_ulong, 0 as libc::c_ulong) }).map(|_| ())
}

/// Becomes `account` (its uid and primary gid, no supplementary groups)
/// keeping only `caps`: permitted, effective, inheritable and ambient, so
/// that programs this process starts (the workers) keep them too. Needs
/// root (or CAP_SETUID, CAP_SETGID and the capabilities kept).
pub fn become_user(account: &Account, caps: &[Cap]) -> io::Result<()> {
    // Nothing else can ever be gained again: every other capability leaves
    // the bounding set (which needs CAP_SETPCAP, so comes first).
    let last: u32 = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(40);
    for n in (0..=last).filter(|n| !caps.iter().any(|c| c.number() == *n)) {
        match prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(n), 0) {
            Ok(()) => {}
            // Past the last capability this kernel knows.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => break,
            Err(e) => return Err(e),
        }
    }
    // Keep the permitted set across the uid change.
    prctl(libc::PR_SET_KEEPCAPS, 1, 0)?;
    // SAFETY: an empty list of groups; the pointer is not read.
    crate::check(unsafe { libc::setgroups(0, std::ptr::null()) })?;
    // SAFETY: setresgid/setresuid take plain integers.
    crate::check(unsafe { libc::setresgid(account.gid, account.gid, account.gid) })?;
    // SAFETY: as above.
    crate::check(unsafe { libc::setresuid(account.uid, account.uid, account.uid) })?;
    capset(caps)?;
    for c in caps {
        prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong,
            libc::c_ulong::from(c.number()),
        )?;
    }
    prctl(libc::PR_SET_KEEPCAPS, 0, 0)
}

/// The effective capabilities of this process, as the bit mask
/// `/proc/self/status` shows (`CapEff`).
pub fn effective_caps() -> io::Result<u64> {
    caps_of(std::process::id()).map(|c| c.0)
}

/// The capability sets of process `pid` as `/proc/PID/status` shows them:
/// (effective, permitted, bounding, ambient).
pub fn caps_of(pid: u32) -> io::Result<(u64, u64, u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let get = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("no {key} in /proc/{pid}/status")))
    };
    Ok((get("CapEff:")?, get("CapPrm:")?, get("CapBnd:")?, get("CapAmb:")?))
}

/// The mask of `caps`, as [`effective_caps`] reads it.
pub fn mask(caps: &[Cap]) -> u64 {
    caps.iter().fold(0, |m, c| m | (1u64 << c.number()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounts_and_groups_are_looked_up() {
        let root = user("root").expect("lookup").expect("root exists");
        assert_eq!((root.uid, root.gid), (0, 0));
        assert_eq!(user("no-such-user-mcr").expect("lookup"), None);
        assert_eq!(group("root").expect("lookup"), Some(0));
        assert_eq!(group("no-such-group-mcr").expect("lookup"), None);
        assert!(user("a\0b").is_err());
    }

    #[test]
    fn the_mask_is_that_of_proc_status() {
        assert_eq!(mask(&[Cap::NetRaw, Cap::NetAdmin]), 0x3000);
        // Tests run as root: both are effective.
        let eff = effective_caps().expect("CapEff");
        assert_eq!(eff & 0x3000, 0x3000, "{eff:#x}");
    }
}
