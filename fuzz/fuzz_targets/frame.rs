//! The frame parser and rewriter: any bytes in, never a panic; a frame
//! that parses is rewritten to a frame that parses back with valid
//! checksums and the rewritten destination.

#![no_main]

use std::net::Ipv4Addr;

use libfuzzer_sys::fuzz_target;
use mcr_core::forward::{FrameRewrite, RxChecksum, parse, rewrite};
use mcr_core::rule::Ttl;

fuzz_target!(|data: &[u8]| {
    // A capture cut short is refused, whatever it holds.
    assert!(parse(data, data.len() + 1, RxChecksum::Unknown).is_err());
    for checksum in [RxChecksum::Unknown, RxChecksum::Valid, RxChecksum::NotReady] {
        let Ok(d) = parse(data, data.len(), checksum) else {
            continue;
        };
        // The first bytes choose the rewrite, so it varies with the input.
        let b = |i: usize| data.get(i).copied().unwrap_or(0);
        let out = FrameRewrite {
            dst_mac: [1, 0, 0x5e, 10, 1, 1],
            src_mac: [2, 0, 0, 0, 0, 9],
            dst: Ipv4Addr::new(239, b(0), b(1), b(2)),
            dst_port: u16::from_be_bytes([b(3), b(4)]),
            src: (b(5) & 1 == 0).then(|| Ipv4Addr::new(10, 0, 1, b(6))),
            ttl: if b(7) == 0 { Ttl::Decrement } else { Ttl::Fixed(b(7)) },
            mtu: 576 + u32::from(b(8)) * 8,
        };
        let mut buf = vec![0u8; 70_000];
        let Ok(n) = rewrite(data, &d, &out, &mut buf) else {
            continue;
        };
        // Rewriting updates the checksums incrementally: what the kernel
        // vouched for (Valid) stays as right as it was, and a partial sum
        // (NotReady) is finished by the NIC. Only a frame whose checksums
        // are truly right must come out right.
        if parse(data, data.len(), RxChecksum::Unknown).is_err() {
            continue;
        }
        let back = parse(&buf[..n], n, RxChecksum::Unknown).expect("a rewritten frame parses with valid checksums");
        assert_eq!((back.dst, back.dst_port), (out.dst, out.dst_port));
        assert_eq!(back.payload_len, d.payload_len);
    }
});
