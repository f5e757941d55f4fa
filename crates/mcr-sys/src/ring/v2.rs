//! TPACKET_V2: a ring of fixed-size frame slots, each with its own status.
//!
//! Each slot handed back to the kernel carries a mark: the number of frames
//! taken from the ring so far (never 0), written in the header's padding,
//! which the kernel clears when it fills the slot again. The slot with the
//! newest mark is the last one taken, so a process that maps the ring
//! after another one stopped reading it (see [`Cursor::resume`]) knows
//! where to go on.
//!
//! A frame longer than a slot (the interface's MTU grew after the ring was
//! made) is not cut: the socket asks for a copy of it whole
//! (`PACKET_COPY_THRESH`), which the kernel queues on the socket, in ring
//! order, and marks the slot `TP_STATUS_COPY`; the cursor reads it from
//! the queue when it reaches that slot.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicU32, Ordering};

use super::{RxFrame, frame_flags, stamp_ns};
use crate::mmap::Mmap;

/// Where `tp_padding` lies in `tpacket2_hdr` (four bytes, u32-aligned).
const MARK_AT: usize = 28;
const _: () = assert!(MARK_AT == std::mem::offset_of!(libc::tpacket2_hdr, tp_padding));

pub(super) struct Cursor {
    frame_size: usize,
    frames: usize,
    next: usize,
    /// The mark of the next slot taken.
    mark: u32,
    /// Where a frame too long for its slot is read whole (allocated at the
    /// first one).
    whole: Vec<u8>,
    /// A frame read from the queue that belongs to a later slot than the
    /// one it was read for (its length in `whole`).
    held: Option<usize>,
    /// Slots taken and not yet handed back: the ones before `next`.
    taken: usize,
}

/// The longest frame read whole from the socket's queue.
const WHOLE_MAX: usize = 1 << 17;

/// The next mark after `m` (0 means "not taken" and is skipped).
fn next_mark(m: u32) -> u32 {
    m.wrapping_add(1).max(1)
}

impl Cursor {
    pub(super) fn new(frame_size: usize, frames: usize) -> Self {
        Cursor {
            frame_size,
            frames,
            next: 0,
            mark: 1,
            whole: Vec::new(),
            held: None,
            taken: 0,
        }
    }

    /// The whole frame of a slot marked `TP_STATUS_COPY`, whose first bytes
    /// are `cut`: the next one on the socket's queue, which holds the copies
    /// in the order of their slots. A reader that died between taking a
    /// copy and handing back its slot leaves the queue one frame ahead:
    /// then the frame taken fits no slot until a later one, and is kept
    /// for it. Returns its length in `self.whole`, or `None` (the frame is
    /// then handed over cut, and counted so).
    fn whole_frame(&mut self, fd: BorrowedFd<'_>, cut: &[u8]) -> Option<usize> {
        if self.whole.is_empty() {
            self.whole = vec![0; WHOLE_MAX];
        }
        let mut stale = self.held.is_some();
        loop {
            let n = match self.held {
                Some(n) => n,
                None => {
                    // SAFETY: `whole` has `WHOLE_MAX` writable bytes; the
                    // kernel writes at most that many (MSG_TRUNC only makes
                    // it report the frame's full length).
                    let rc = unsafe {
                        libc::recv(
                            fd.as_raw_fd(),
                            self.whole.as_mut_ptr().cast(),
                            WHOLE_MAX,
                            libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                        )
                    };
                    if rc < 0 {
                        return None;
                    }
                    let n = crate::conv::count(rc).min(WHOLE_MAX);
                    self.held = Some(n);
                    n
                }
            };
            if n >= cut.len() && self.whole[..cut.len()] == *cut {
                self.held = None;
                return Some(n);
            }
            if !stale {
                return None;
            }
            // One kept for a later slot that fits this one neither: it
            // belongs to none; read the queue afresh.
            self.held = None;
            stale = false;
        }
    }

    fn slot(&self, map: &Mmap, i: usize) -> *mut u8 {
        debug_assert!((i + 1) * self.frame_size <= map.len());
        map.ptr().wrapping_add(i * self.frame_size)
    }

    /// The cursor of a ring that another reader had before: it goes on at
    /// the slot after the one with the newest mark. Without one (the
    /// kernel has written over every marked slot since: the ring filled
    /// while nobody read it), at the oldest frame waiting, by its time.
    pub(super) fn resume(frame_size: usize, frames: usize, map: &Mmap) -> Self {
        let mut c = Cursor::new(frame_size, frames);
        let mut newest: Option<(usize, u32)> = None;
        let mut oldest_waiting: Option<(usize, (u32, u32))> = None;
        for i in 0..frames {
            let p = c.slot(map, i);
            // SAFETY: each slot starts inside the mapping (frames *
            // frame_size is its length) with a 16-byte aligned header whose
            // first u32 is the status, which the kernel may write
            // concurrently: read atomically.
            let status = unsafe { AtomicU32::from_ptr(p.cast::<u32>()) }.load(Ordering::Acquire);
            // SAFETY: the mark is an aligned u32 of the same header, read
            // atomically for the same reason.
            let mark = unsafe { AtomicU32::from_ptr(p.wrapping_add(MARK_AT).cast::<u32>()) }.load(Ordering::Acquire);
            if mark != 0 {
                // Marks present span fewer than 2^31 takes, so the newest
                // is the one no other is ahead of, counting with wrap-around.
                let ahead = newest.is_none_or(|(_, m)| i32::from_ne_bytes(mark.wrapping_sub(m).to_ne_bytes()) > 0);
                if ahead {
                    newest = Some((i, mark));
                }
            } else if status & libc::TP_STATUS_USER != 0 {
                // SAFETY: the slot is the kernel's to hand over and is
                // handed over (TP_STATUS_USER): its header is written.
                let hdr = unsafe { p.cast::<libc::tpacket2_hdr>().read() };
                let t = (hdr.tp_sec, hdr.tp_nsec);
                if oldest_waiting.is_none_or(|(_, o)| t < o) {
                    oldest_waiting = Some((i, t));
                }
            }
        }
        if let Some((i, m)) = newest {
            c.next = (i + 1) % frames;
            c.mark = next_mark(m);
        } else if let Some((i, _)) = oldest_waiting {
            c.next = i;
        }
        c
    }

    /// Hands each ready frame, at most `max`, to `f`, keeping its slot
    /// (see [`Cursor::hand_back`]), until `f` says stop. Returns how many.
    pub(super) fn take_ready(
        &mut self,
        map: &Mmap,
        fd: BorrowedFd<'_>,
        max: usize,
        mut f: impl FnMut(&RxFrame<'_>) -> bool,
    ) -> usize {
        let mut n = 0;
        // A slot still held is the kernel's again only once handed back:
        // the cursor never comes round to one.
        while n < max && self.taken < self.frames {
            let base = self.next * self.frame_size;
            debug_assert!(base + self.frame_size <= map.len());
            let hdr_ptr = map.ptr().wrapping_add(base).cast::<libc::tpacket2_hdr>();
            // SAFETY: `base` is the start of a frame slot inside the mapping
            // (frames * frame_size equals its length); tp_status is the
            // slot's first u32, 16-byte aligned, and the kernel updates it
            // concurrently, so it is only ever accessed atomically.
            let status_word = unsafe { AtomicU32::from_ptr(hdr_ptr.cast::<u32>()) };
            let status = status_word.load(Ordering::Acquire);
            if status & libc::TP_STATUS_USER == 0 {
                break;
            }
            // SAFETY: with TP_STATUS_USER set the kernel has finished writing
            // the slot and will not touch it until we give it back; the
            // header is fully inside the slot.
            let hdr = unsafe { hdr_ptr.read() };
            let start = usize::from(hdr.tp_mac);
            let len = (hdr.tp_snaplen as usize).min(self.frame_size.saturating_sub(start));
            // SAFETY: the kernel placed `tp_snaplen` bytes of frame at
            // `tp_mac` within the slot (clamped to the slot above), and the
            // slot stays ours until the status is handed back.
            let mut data = unsafe { std::slice::from_raw_parts(map.ptr().wrapping_add(base + start), len) };
            if status & libc::TP_STATUS_COPY != 0
                && let Some(n) = self.whole_frame(fd, data)
            {
                data = &self.whole[..n];
            }
            let (csum_valid, csum_not_ready) = frame_flags(status);
            let go_on = f(&RxFrame {
                data,
                wire_len: hdr.tp_len as usize,
                csum_valid,
                csum_not_ready,
                vlan_tci: (status & libc::TP_STATUS_VLAN_VALID != 0).then_some(hdr.tp_vlan_tci),
                vlan_tpid: (status & libc::TP_STATUS_VLAN_TPID_VALID != 0).then_some(hdr.tp_vlan_tpid),
                arrived_ns: stamp_ns(hdr.tp_sec, hdr.tp_nsec),
            });
            self.next = (self.next + 1) % self.frames;
            self.taken += 1;
            n += 1;
            if !go_on {
                break;
            }
        }
        n
    }

    /// Hands the slots taken back to the kernel, oldest first, each with
    /// its mark.
    pub(super) fn hand_back(&mut self, map: &Mmap) {
        let first = (self.next + self.frames - self.taken) % self.frames;
        for k in 0..self.taken {
            let base = ((first + k) % self.frames) * self.frame_size;
            debug_assert!(base + self.frame_size <= map.len());
            let hdr_ptr = map.ptr().wrapping_add(base);
            // SAFETY: the slot is still ours (taken, not handed back); the
            // mark is an aligned u32 inside its header, written atomically
            // since another process may map the same ring.
            unsafe { AtomicU32::from_ptr(hdr_ptr.wrapping_add(MARK_AT).cast::<u32>()) }
                .store(self.mark, Ordering::Relaxed);
            self.mark = next_mark(self.mark);
            // SAFETY: tp_status is the slot's first u32, 16-byte aligned,
            // shared with the kernel, so accessed atomically.
            unsafe { AtomicU32::from_ptr(hdr_ptr.cast::<u32>()) }.store(libc::TP_STATUS_KERNEL, Ordering::Release);
        }
        self.taken = 0;
    }
}
