//! Reading a BPF ring buffer (`BPF_MAP_TYPE_RINGBUF`) from user space:
//! its consumer position mapped writable, its producer position and data
//! read-only (the data twice in a row, so that a record that wraps around
//! reads as one slice). Programs commit records; this process reads them
//! in order and hands their space back by moving the consumer position.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::mmap::{Mmap, page_size};

/// `BPF_MAP_TYPE_RINGBUF`.
pub const MAP_TYPE_RINGBUF: u32 = 27;
/// A record's header: its length, with these two bits.
const BUSY: u32 = 1 << 31;
const DISCARD: u32 = 1 << 30;
const HEADER: usize = 8;

/// A ring buffer map, mapped for reading.
#[derive(Debug)]
pub struct RingReader {
    // Field order: unmapped before the fd closes.
    consumer: Mmap,
    producer: Mmap,
    /// The data's size (a power of two).
    size: usize,
    fd: OwnedFd,
}

impl RingReader {
    /// Maps the ring buffer map `fd`.
    pub fn new(fd: OwnedFd) -> io::Result<RingReader> {
        let mut info = super::MapInfo::default();
        super::info_by_fd(fd.as_fd(), &mut info)?;
        let size = info.max_entries as usize;
        if info.map_type != MAP_TYPE_RINGBUF || !size.is_power_of_two() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "not a BPF ring buffer (map type {}, {} bytes)",
                    info.map_type, info.max_entries
                ),
            ));
        }
        let page = page_size();
        let consumer = Mmap::at(fd.as_fd(), page, 0, true)?;
        let producer = Mmap::at(fd.as_fd(), page + 2 * size, page, false)?;
        Ok(RingReader {
            consumer,
            producer,
            size,
            fd,
        })
    }

    /// The data area's size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    fn consumer_pos(&self) -> &AtomicU64 {
        // SAFETY: the consumer page is mapped writable, page aligned and
        // lives as long as `self`; the kernel and this reader touch its
        // first word only atomically.
        unsafe { &*self.consumer.ptr().cast::<AtomicU64>() }
    }

    fn producer_pos(&self) -> &AtomicU64 {
        // SAFETY: as above, for the first word of the producer page, which
        // the kernel writes atomically.
        unsafe { &*self.producer.ptr().cast::<AtomicU64>() }
    }

    /// Hands each committed record to `f`, in order, at most `max` of them
    /// (discarded ones are skipped), and gives their space back. Returns
    /// how many `f` saw.
    pub fn drain(&mut self, max: usize, mut f: impl FnMut(&[u8])) -> usize {
        let page = page_size();
        let mut seen = 0;
        let mut cons = self.consumer_pos().load(Ordering::Acquire);
        let prod = self.producer_pos().load(Ordering::Acquire);
        while cons < prod && seen < max {
            let at = page + usize::try_from(cons & (self.size as u64 - 1)).unwrap_or(0);
            // SAFETY: `at` is within the first copy of the data (page + size
            // bytes into a mapping of page + 2 * size), 8-byte aligned (the
            // kernel rounds every record to 8); the kernel writes the header
            // word atomically (it clears BUSY with a release store).
            let hdr = unsafe { &*self.producer.ptr().wrapping_add(at).cast::<AtomicU32>() }.load(Ordering::Acquire);
            if hdr & BUSY != 0 {
                break;
            }
            let len = (hdr & !(BUSY | DISCARD)) as usize;
            if len > self.size - HEADER {
                // Not a record the kernel could have written: stop here
                // rather than read past it.
                break;
            }
            // The next record is most likely as long as this one: have
            // its lines on their way while this one is read (they were
            // written from another core, and each would be waited for).
            let next = at + ((len + HEADER + 7) & !7);
            self.prefetch(next, (len + HEADER).min(page + 2 * self.size - next));
            if hdr & DISCARD == 0 {
                // SAFETY: a committed record of `len` bytes follows its
                // header; with the data mapped twice in a row it is
                // contiguous even where it wraps, and it lies within the
                // mapping (at + HEADER + len <= page + 2 * size). The
                // kernel does not write it again until the consumer position
                // passes it, which happens only below, after `f` returns.
                let rec = unsafe { std::slice::from_raw_parts(self.producer.ptr().wrapping_add(at + HEADER), len) };
                f(rec);
                seen += 1;
            }
            cons += ((len + HEADER + 7) & !7) as u64;
            self.consumer_pos().store(cons, Ordering::Release);
        }
        seen
    }

    /// Asks the CPU to bring `len` bytes of the mapping from `at` into its
    /// cache (a hint: nothing is read, nothing can fault).
    #[inline]
    fn prefetch(&self, at: usize, len: usize) {
        #[cfg(target_arch = "x86_64")]
        for off in (0..len).step_by(64) {
            // SAFETY: `at + off` is within the mapping (the caller bounds
            // `len` by its end), and a prefetch neither reads memory into
            // the program nor faults; it only warms the cache.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    self.producer.ptr().wrapping_add(at + off).cast::<i8>(),
                );
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (at, len);
    }

    /// Whether records wait to be read.
    pub fn is_empty(&self) -> bool {
        self.consumer_pos().load(Ordering::Acquire) >= self.producer_pos().load(Ordering::Acquire)
    }
}

impl AsFd for RingReader {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
