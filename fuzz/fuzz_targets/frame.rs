//! The frame parser and rewriter: any bytes in, never a panic; a frame
//! that parses is rewritten to a frame that parses back with the
//! rewritten destination, and with a valid UDP checksum when its own was
//! valid or not yet computed.

#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use libfuzzer_sys::fuzz_target;
use mcr_core::forward::{FrameRewrite, RxChecksum, parse, rewrite, udp_checksum_ok};
use mcr_core::rule::{Dscp, Ttl};

fuzz_target!(|data: &[u8]| {
    // A capture cut short is refused, whatever it holds.
    // The first bytes choose the tag the kernel took off and the rewrite,
    // so they vary with the input.
    let b = |i: usize| data.get(i).copied().unwrap_or(0);
    let tag = (b(9) & 1 == 1).then(|| u16::from_be_bytes([b(10), b(11)]));
    assert!(parse(data, data.len() + 1, RxChecksum::Unknown, tag).is_err());
    for checksum in [RxChecksum::Unknown, RxChecksum::Valid, RxChecksum::NotReady] {
        let Ok(d) = parse(data, data.len(), checksum, tag) else {
            continue;
        };
        let v6 = b(12) & 1 == 1;
        let dst: IpAddr = if v6 {
            Ipv6Addr::new(0xff3e, 0, 0, 0, 0, 0, u16::from(b(0)), u16::from_be_bytes([b(1), b(2)])).into()
        } else {
            Ipv4Addr::new(239, b(0), b(1), b(2)).into()
        };
        // Keeping the source is only offered within one family.
        let keep = b(5) & 1 == 1 && d.src.is_ipv6() == v6;
        let src: Option<IpAddr> = if keep {
            None
        } else if v6 {
            Some(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 1, u16::from(b(6))).into())
        } else {
            Some(Ipv4Addr::new(10, 0, 1, b(6)).into())
        };
        let out = FrameRewrite {
            dst_mac: [1, 0, 0x5e, 10, 1, 1],
            src_mac: [2, 0, 0, 0, 0, 9],
            vlan: (b(13) & 1 == 1).then(|| u16::from(b(14)) + 1),
            dst,
            dst_port: u16::from_be_bytes([b(3), b(4)]),
            src,
            ttl: if b(7) == 0 { Ttl::Decrement } else { Ttl::Fixed(b(7)) },
            dscp: if b(15) < 64 { Dscp::Set(b(15)) } else { Dscp::Keep },
            mtu: 576 + u32::from(b(8)) * 8,
        };
        let mut buf = vec![0u8; 70_000];
        let Ok(n) = rewrite(data, &d, &out, &mut buf) else {
            continue;
        };
        // Rewriting updates the UDP checksum incrementally, so it stays as
        // right as it was, and computes a partial sum (NotReady) in full:
        // a frame whose checksum was right, or not yet computed, comes out
        // with a right one.
        if checksum != RxChecksum::NotReady && !udp_checksum_ok(data, &d, RxChecksum::Unknown) {
            continue;
        }
        let back = parse(&buf[..n], n, RxChecksum::Unknown, None).expect("a rewritten frame parses");
        assert!(udp_checksum_ok(&buf[..n], &back, RxChecksum::Unknown), "with a valid UDP checksum");
        assert_eq!((back.dst, back.dst_port), (out.dst, out.dst_port));
        assert_eq!(back.vlan, out.vlan.unwrap_or(0));
        assert_eq!(back.payload_len, d.payload_len);
        assert_eq!(&buf[back.payload_at..n], &data[d.payload_at..d.payload_at + d.payload_len]);
    }
});
