//! An input's health checks: any sequence of datagrams (each a length
//! byte, then that many bytes, then a gap in µs), as RTP, MPEG-TS in UDP or
//! in RTP, or neither: never a panic, and the counts stay consistent.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mcr_core::health::InputHealth;

fuzz_target!(|data: &[u8]| {
    let mut h = InputHealth::default();
    let mut rest = data;
    let mut now = 0u64;
    let mut datagrams = 0u64;
    while let Some((&len, tail)) = rest.split_first() {
        // Lengths in units of 4 reach whole TS packets in RTP (12 + 188 n).
        let len = (usize::from(len) * 4).min(tail.len());
        let (datagram, tail) = tail.split_at(len);
        let (gap, tail) = tail.split_first().map_or((0, tail), |(g, t)| (*g, t));
        now += u64::from(gap) * 1000;
        h.observe(datagram, now);
        datagrams += 1;
        rest = tail;
    }
    let r = h.rtp.counts();
    assert!(r.packets <= datagrams);
    assert!(r.late + r.duplicates + r.strays <= r.packets);
    let t = h.ts.counts();
    assert!(t.sync_byte_errors <= t.packets);
    assert!(t.sync_losses <= t.sync_byte_errors);
});
