//! An owned memory mapping, unmapped on drop.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// The size of a memory page.
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf takes a constant and touches no memory.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

/// A shared, read-write mapping of `len` bytes of a file descriptor.
///
/// Owners that also own the fd must declare the `Mmap` field before the
/// fd field, so that the mapping is dropped (unmapped) first.
#[derive(Debug)]
pub(crate) struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

impl Mmap {
    /// Maps `len` bytes of `fd` from offset 0, shared and writable.
    pub(crate) fn shared(fd: BorrowedFd<'_>, len: usize) -> io::Result<Mmap> {
        Mmap::at(fd, len, 0, true)
    }

    /// Maps `len` bytes of `fd` from `offset` (page aligned), shared;
    /// writable or read-only.
    pub(crate) fn at(fd: BorrowedFd<'_>, len: usize, offset: usize, writable: bool) -> io::Result<Mmap> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty mapping"));
        }
        let offset = libc::off_t::try_from(offset).map_err(|_| io::Error::other("mapping offset too large"))?;
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: a fresh mapping chosen by the kernel (addr null) aliases
        // no Rust object; the arguments are plain values.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                offset,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Mmap { ptr, len })
    }

    /// The start of the mapping (page aligned).
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Its length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

// SAFETY: the mapping is process-wide memory, not tied to the thread that
// made it; moving its owner to another thread is sound.
unsafe impl Send for Mmap {}

// SAFETY: `&Mmap` hands out only the raw pointer and length. Every user in
// this crate either mutates through `&mut` of its owner (rings) or touches
// the memory only with atomics (shared counters), so shared references
// across threads cannot race.
unsafe impl Sync for Mmap {}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: `ptr` and `len` describe exactly the mapping made in
        // `shared`, unmapped only here, once; nothing borrows it past the
        // owner's lifetime.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// `len` 64-bit counters at the start of a shared mapping, touched only
/// atomically, here and by whoever else maps them (other processes, eBPF
/// programs). Owners that also own the fd declare it after this field.
#[derive(Debug)]
pub(crate) struct Cells {
    map: Mmap,
    len: usize,
}

impl Cells {
    /// Maps `len` counters of `fd`.
    pub(crate) fn map(fd: BorrowedFd<'_>, len: usize) -> io::Result<Cells> {
        let map = Mmap::shared(fd, len.saturating_mul(8).max(8))?;
        Ok(Cells { map, len })
    }

    /// Every counter.
    pub(crate) fn all(&self) -> &[AtomicU64] {
        // SAFETY: the mapping is page aligned, at least `len * 8` bytes long
        // and lives as long as `self`; AtomicU64 has the layout of u64, and
        // every user of the memory touches these words only atomically.
        unsafe { std::slice::from_raw_parts(self.map.ptr().cast::<AtomicU64>(), self.len) }
    }

    /// How many counters.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Reads counter `i` (0 if out of range).
    pub(crate) fn get(&self, i: usize) -> u64 {
        self.all().get(i).map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Sets counter `i` to `v` (nothing if out of range).
    pub(crate) fn set(&self, i: usize, v: u64) {
        if let Some(c) = self.all().get(i) {
            c.store(v, Ordering::Relaxed);
        }
    }
}
