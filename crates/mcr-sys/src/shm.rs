//! Counters in memory shared between processes: the supervisor creates a
//! memfd, workers inherit it and map it, workers add and the supervisor
//! reads, with no system call and no message.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::Ordering;

use crate::mmap::Cells;

/// A new, empty memfd called `name`, closed on exec (children get it by an
/// explicit dup2) and open to seals.
pub fn memfd(name: &str) -> io::Result<OwnedFd> {
    let cname = CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in name"))?;
    // SAFETY: `cname` is a valid C string for the call; the flags are
    // plain integers.
    let raw = crate::check(unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) })?;
    // SAFETY: `raw` is a freshly created fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// An array of `u64` counters in shared memory.
///
/// Each counter should have one writer: [`SharedCounters::add`] is a load
/// and a store, not a locked read-modify-write, because a worker is the only
/// writer of its own counters and a locked add per packet is measurable.
#[derive(Debug)]
pub struct SharedCounters {
    // Field order: unmapped before the fd closes.
    cells: Cells,
    fd: OwnedFd,
}

impl SharedCounters {
    /// Creates `len` zeroed counters in a new memfd called `name`.
    pub fn create(name: &str, len: usize) -> io::Result<SharedCounters> {
        let fd = memfd(name)?;
        let bytes = len
            .checked_mul(8)
            .and_then(|b| libc::off_t::try_from(b).ok())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "too many counters"))?;
        // SAFETY: ftruncate on our own fd; a memfd grows zero-filled.
        crate::check(unsafe { libc::ftruncate(fd.as_raw_fd(), bytes) })?;
        // The size is sealed: a process that holds the fd (a worker gone
        // wrong) cannot shrink the memory under the supervisor's mapping,
        // which would kill it with SIGBUS at its next read, nor grow it,
        // nor lift the seals.
        // SAFETY: fcntl on our own fd with integer arguments only.
        crate::check(unsafe {
            libc::fcntl(
                fd.as_raw_fd(),
                libc::F_ADD_SEALS,
                libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
            )
        })?;
        Self::map(fd, len)
    }

    /// Maps `len` counters of an inherited memfd.
    pub fn open(fd: OwnedFd, len: usize) -> io::Result<SharedCounters> {
        // SAFETY: fstat writes into `st`, which is plain data.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `st` is valid and writable; the fd is ours.
        crate::check(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
        if u64::try_from(st.st_size).unwrap_or(0) < (len as u64).saturating_mul(8) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("shared counters hold {} bytes, {} expected", st.st_size, len * 8),
            ));
        }
        Self::map(fd, len)
    }

    fn map(fd: OwnedFd, len: usize) -> io::Result<SharedCounters> {
        let cells = Cells::map(fd.as_fd(), len)?;
        Ok(SharedCounters { cells, fd })
    }

    /// How many counters.
    pub fn len(&self) -> usize {
        self.cells.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds `v` to counter `i` (its single writer). An index out of range is
    /// ignored.
    #[inline]
    pub fn add(&self, i: usize, v: u64) {
        if let Some(c) = self.cells.all().get(i) {
            c.store(c.load(Ordering::Relaxed).wrapping_add(v), Ordering::Relaxed);
        }
    }

    /// Sets counter `i` to `v`.
    pub fn set(&self, i: usize, v: u64) {
        self.cells.set(i, v);
    }

    /// Reads counter `i` (0 if out of range).
    pub fn get(&self, i: usize) -> u64 {
        self.cells.get(i)
    }
}

impl AsFd for SharedCounters {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_mappings_see_each_others_counts() {
        let a = SharedCounters::create("mcr-test", 1000).expect("memfd");
        let dup = a.as_fd().try_clone_to_owned().expect("dup");
        let b = SharedCounters::open(dup, 1000).expect("map again");
        a.add(7, 5);
        a.add(7, 6);
        b.set(999, 42);
        assert_eq!((b.get(7), a.get(999)), (11, 42));
        a.add(1000, 1);
        assert_eq!(a.get(1000), 0, "out of range is ignored");
        let dup = a.as_fd().try_clone_to_owned().expect("dup");
        assert!(SharedCounters::open(dup, 2000).is_err(), "a shorter file is refused");
    }

    #[test]
    fn whoever_holds_the_fd_cannot_resize_the_memory() {
        let a = SharedCounters::create("mcr-test", 1000).expect("memfd");
        let f = std::fs::File::from(a.as_fd().try_clone_to_owned().expect("dup"));
        let shrink = f.set_len(0).expect_err("shrinking is sealed");
        assert_eq!(shrink.raw_os_error(), Some(libc::EPERM), "{shrink}");
        let grow = f.set_len(1 << 20).expect_err("growing is sealed");
        assert_eq!(grow.raw_os_error(), Some(libc::EPERM), "{grow}");
        assert_eq!(f.metadata().expect("stat").len(), 8000);
        a.add(999, 3);
        assert_eq!(a.get(999), 3, "the mapping still works");
    }
}
