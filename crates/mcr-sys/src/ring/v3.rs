//! TPACKET_V3: a ring of blocks, each holding a run of variable-size frames
//! and one status for the whole block.
//!
//! Each frame taken is marked in its header's padding (which the kernel
//! clears when it writes a frame), so that a process that maps the ring
//! after another one stopped reading it (see [`Cursor::resume`]) skips
//! what the other had taken from a block it had not yet handed back.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::{RxFrame, frame_flags};
use crate::mmap::Mmap;

pub(super) struct Cursor {
    block_size: usize,
    blocks: usize,
    block: usize,
    /// Within the current block: the next packet's index and offset.
    pkt: u32,
    offset: usize,
    /// Skip the marked frames at the start of the current block (they were
    /// taken by an earlier reader).
    skip_taken: bool,
    /// Frames taken and not yet handed back: where their marks go (from
    /// the start of the mapping).
    unmarked: Vec<usize>,
    /// Blocks read to the end and not yet handed back: the ones before
    /// `block`.
    read_out: usize,
}

/// Byte offsets of the fields of `tpacket_block_desc` used here: the block
/// header `tpacket_hdr_v1` starts after two u32s.
const BLOCK_STATUS_AT: usize = 8;
const NUM_PKTS_AT: usize = 12;
const FIRST_PKT_AT: usize = 16;
/// The kernel's sequence number of the block (u64), set when it opens it.
const SEQ_NUM_AT: usize = 24;
/// Where `tp_padding` lies in `tpacket3_hdr` (eight bytes, u32-aligned).
const MARK_AT: usize = 40;
const _: () = assert!(MARK_AT == std::mem::offset_of!(libc::tpacket3_hdr, tp_padding));

impl Cursor {
    pub(super) fn new(block_size: usize, blocks: usize) -> Self {
        Cursor {
            block_size,
            blocks,
            block: 0,
            pkt: 0,
            offset: 0,
            skip_taken: false,
            unmarked: Vec::new(),
            read_out: 0,
        }
    }

    /// The cursor of a ring that another reader had before: it goes on at
    /// the oldest block handed over (by the kernel's sequence number),
    /// skipping the frames of it already taken; with none handed over, at
    /// the block the kernel fills (the newest).
    pub(super) fn resume(block_size: usize, blocks: usize, map: &Mmap) -> Self {
        let mut c = Cursor::new(block_size, blocks);
        let mut oldest_ready: Option<(usize, u64)> = None;
        let mut newest: Option<(usize, u64)> = None;
        for b in 0..blocks {
            debug_assert!((b + 1) * block_size <= map.len());
            let block = map.ptr().wrapping_add(b * block_size);
            // SAFETY: each block starts inside the mapping, page aligned;
            // its status is a u32 at 8 that the kernel writes, so it is
            // read atomically.
            let status = unsafe { AtomicU32::from_ptr(block.wrapping_add(BLOCK_STATUS_AT).cast::<u32>()) }
                .load(Ordering::Acquire);
            // SAFETY: the sequence number is a u64 at 24 (8-aligned) of the
            // same descriptor, read atomically for the same reason.
            let seq =
                unsafe { AtomicU64::from_ptr(block.wrapping_add(SEQ_NUM_AT).cast::<u64>()) }.load(Ordering::Acquire);
            if status & libc::TP_STATUS_USER != 0 && oldest_ready.is_none_or(|(_, s)| seq < s) {
                oldest_ready = Some((b, seq));
            }
            if newest.is_none_or(|(_, s)| seq > s) {
                newest = Some((b, seq));
            }
        }
        if let Some((b, _)) = oldest_ready.or(newest) {
            c.block = b;
        }
        c.skip_taken = true;
        c
    }

    /// Hands each ready frame, at most `max`, to `f`, keeping it and its
    /// block (see [`Cursor::hand_back`]), until `f` says stop. Returns how
    /// many.
    pub(super) fn take_ready(&mut self, map: &Mmap, max: usize, mut f: impl FnMut(&RxFrame<'_>) -> bool) -> usize {
        let mut n = 0;
        let mut stop = false;
        // A block still held is the kernel's again only once handed back:
        // the cursor never comes round to one.
        while n < max && self.read_out + 1 < self.blocks {
            let base = self.block * self.block_size;
            debug_assert!(base + self.block_size <= map.len());
            let block = map.ptr().wrapping_add(base);
            // SAFETY: the block descriptor sits at the start of each block
            // inside the mapping; block_status is a u32 at offset 8 (8-byte
            // aligned), updated by the kernel, so it is accessed atomically.
            let status_word = unsafe { AtomicU32::from_ptr(block.wrapping_add(BLOCK_STATUS_AT).cast::<u32>()) };
            if status_word.load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
                break;
            }
            // SAFETY: with TP_STATUS_USER set the kernel has finished the
            // block and leaves it to us until we hand it back; the field is
            // an aligned u32 inside the descriptor.
            let num_pkts = unsafe { block.wrapping_add(NUM_PKTS_AT).cast::<u32>().read() };
            // SAFETY: as above.
            let first = unsafe { block.wrapping_add(FIRST_PKT_AT).cast::<u32>().read() } as usize;
            if self.pkt == 0 {
                self.offset = first;
            }
            while self.pkt < num_pkts && n < max {
                if self.offset + std::mem::size_of::<libc::tpacket3_hdr>() > self.block_size {
                    // A malformed block: give it back rather than read past it.
                    self.pkt = num_pkts;
                    break;
                }
                // SAFETY: the kernel wrote `num_pkts` packet headers, chained
                // by tp_next_offset, inside this block (checked to fit just
                // above); headers are 16-byte aligned.
                let hdr = unsafe { block.wrapping_add(self.offset).cast::<libc::tpacket3_hdr>().read() };
                if self.skip_taken {
                    // SAFETY: the mark is an aligned u32 inside the header
                    // just read; the block is ours while handed over, and
                    // another process may map it too, so it is read
                    // atomically.
                    let mark = unsafe { AtomicU32::from_ptr(block.wrapping_add(self.offset + MARK_AT).cast::<u32>()) };
                    if mark.load(Ordering::Relaxed) != 0 {
                        self.pkt += 1;
                        self.offset += hdr.tp_next_offset as usize;
                        continue;
                    }
                    self.skip_taken = false;
                }
                let start = self.offset + usize::from(hdr.tp_mac);
                let len = (hdr.tp_snaplen as usize).min(self.block_size.saturating_sub(start));
                // SAFETY: the frame's `tp_snaplen` bytes lie at `tp_mac` from
                // its header, inside the block (clamped above), which stays
                // ours until the block is handed back.
                let data = unsafe { std::slice::from_raw_parts(block.wrapping_add(start), len) };
                let (csum_valid, csum_not_ready) = frame_flags(hdr.tp_status);
                let go_on = f(&RxFrame {
                    data,
                    wire_len: hdr.tp_len as usize,
                    csum_valid,
                    csum_not_ready,
                    vlan_tci: (hdr.tp_status & libc::TP_STATUS_VLAN_VALID != 0)
                        .then_some(u16::try_from(hdr.hv1.tp_vlan_tci & 0xffff).unwrap_or_default()),
                    vlan_tpid: (hdr.tp_status & libc::TP_STATUS_VLAN_TPID_VALID != 0).then_some(hdr.hv1.tp_vlan_tpid),
                    arrived_ns: super::stamp_ns(hdr.tp_sec, hdr.tp_nsec),
                });
                self.unmarked.push(base + self.offset + MARK_AT);
                n += 1;
                self.pkt += 1;
                self.offset += hdr.tp_next_offset as usize;
                if !go_on {
                    stop = true;
                    break;
                }
            }
            if self.pkt < num_pkts {
                break;
            }
            self.block = (self.block + 1) % self.blocks;
            self.read_out += 1;
            self.pkt = 0;
            self.skip_taken = false;
            if stop {
                break;
            }
        }
        n
    }

    /// Marks the frames taken and hands the blocks read to the end back to
    /// the kernel, oldest first.
    pub(super) fn hand_back(&mut self, map: &Mmap) {
        for &at in &self.unmarked {
            debug_assert!(at + 4 <= map.len());
            // SAFETY: `at` is the mark of a frame header taken from a block
            // that is still ours (not handed back yet): an aligned u32
            // inside the mapping, written atomically since another process
            // may map the same ring.
            unsafe { AtomicU32::from_ptr(map.ptr().wrapping_add(at).cast::<u32>()) }.store(1, Ordering::Relaxed);
        }
        self.unmarked.clear();
        let first = (self.block + self.blocks - self.read_out) % self.blocks;
        for k in 0..self.read_out {
            let block = map.ptr().wrapping_add(((first + k) % self.blocks) * self.block_size);
            // SAFETY: block_status is the aligned u32 at 8 of a block
            // descriptor inside the mapping, shared with the kernel.
            unsafe { AtomicU32::from_ptr(block.wrapping_add(BLOCK_STATUS_AT).cast::<u32>()) }
                .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        }
        self.read_out = 0;
    }
}
