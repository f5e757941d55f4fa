//! TPACKET_V2: a ring of fixed-size frame slots, each with its own status.

use std::sync::atomic::{AtomicU32, Ordering};

use super::{RxFrame, frame_flags};
use crate::mmap::Mmap;

pub(super) struct Cursor {
    frame_size: usize,
    frames: usize,
    next: usize,
}

impl Cursor {
    pub(super) fn new(frame_size: usize, frames: usize) -> Self {
        Cursor {
            frame_size,
            frames,
            next: 0,
        }
    }

    pub(super) fn for_each_ready(&mut self, map: &Mmap, max: usize, mut f: impl FnMut(&RxFrame<'_>)) -> usize {
        let mut n = 0;
        while n < max {
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
            // slot stays ours until the status is handed back below.
            let data = unsafe { std::slice::from_raw_parts(map.ptr().wrapping_add(base + start), len) };
            let (csum_valid, csum_not_ready) = frame_flags(status);
            f(&RxFrame {
                data,
                wire_len: hdr.tp_len as usize,
                csum_valid,
                csum_not_ready,
                vlan_tci: (status & libc::TP_STATUS_VLAN_VALID != 0).then_some(hdr.tp_vlan_tci),
                vlan_tpid: (status & libc::TP_STATUS_VLAN_TPID_VALID != 0).then_some(hdr.tp_vlan_tpid),
            });
            status_word.store(libc::TP_STATUS_KERNEL, Ordering::Release);
            self.next = (self.next + 1) % self.frames;
            n += 1;
        }
        n
    }
}
