//! An owned memory mapping, unmapped on drop.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;

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
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty mapping"));
        }
        // SAFETY: a fresh mapping chosen by the kernel (addr null) aliases
        // no Rust object; the arguments are plain values.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
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
