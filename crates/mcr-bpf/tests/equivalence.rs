//! The kernel programs against the workers' Rust, frame by frame, in this
//! kernel (`BPF_PROG_TEST_RUN`, in a namespace of the test's own):
//!
//! - the tc program takes a frame (forwards and consumes it) exactly when
//!   the workers' parser finds a clean datagram there whose rule the kernel
//!   carries, and otherwise lets it go on;
//! - the rings' filter keeps out exactly those frames, and lets in the
//!   others exactly as the workers' classic filter would;
//! - what the program makes of a frame for an output is, byte for byte,
//!   what the workers' rewrite makes of it;
//! - every datagram it takes reaches the health ring, in order, with its
//!   rule and its payload, whole or in the pieces the health checks read,
//!   byte for byte as mcr-core's mirror of that choice makes them.
//!
//! Frames: valid ones for each rule, and a seeded stream of mutations of
//! them (any byte of the headers flipped, cut short, lengths changed).

use mcr_bpf::Loaded;
use mcr_core::bpf::{FilterSpec, ingress_filter, interpret};
use mcr_core::datapath::{
    FastTable, HEALTH_PAYLOAD, HEALTH_PIECES, HEALTH_WHOLE, HealthRecord, Maps, health_looks_into, health_pieces,
};
use mcr_core::forward::{RxChecksum, parse, rewrite};
use mcr_core::interfaces::{InterfaceInfo, Interfaces};
use mcr_core::snapshot::TableSnapshot;
use mcr_core::stats::{RuleCounter, StatsLayout};
use mcr_core::table::{Lookup, MatchTable, OutputKind};
use mcr_core::wire::{UDP_V4_HEADERS, UdpFrameSpec, write_udp_v4_frame};
use mcr_sys::bpf::ringbuf::RingReader;
use std::os::fd::AsFd;

use mcr_core::datapath::{TCX_DROP, TCX_NEXT};

/// splitmix64.
fn word(seed: u64, n: u64) -> u64 {
    let mut x = seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn v4_frame(src: &str, dst: &str, ttl: u8, dscp: u8, payload: usize, seed: u64) -> Vec<u8> {
    let mut f = vec![0u8; UDP_V4_HEADERS + payload];
    for (n, b) in f[UDP_V4_HEADERS..].iter_mut().enumerate() {
        *b = word(seed, n as u64) as u8;
    }
    let spec = UdpFrameSpec {
        dst_mac: [1, 0, 0x5e, 1, 1, 1],
        src_mac: [2, 0, 0, 0, 0, 1],
        src: src.parse().expect("src"),
        dst: dst.parse().expect("dst"),
        ttl,
        dscp,
        ident: seed as u16,
    };
    write_udp_v4_frame(&mut f, &spec, payload).expect("fits");
    f
}

/// An IPv6 UDP frame with a full checksum.
fn v6_frame(src: &str, dst: &str, dport: u16, hop: u8, tc: u8, payload: usize, seed: u64) -> Vec<u8> {
    let src: std::net::Ipv6Addr = src.parse().expect("src");
    let dst: std::net::Ipv6Addr = dst.parse().expect("dst");
    let udp_len = 8 + payload;
    let mut f = vec![0u8; 14 + 40 + udp_len];
    f[0..6].copy_from_slice(&[0x33, 0x33, 0, 0, 0, 1]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&[0x86, 0xdd]);
    let vtf: u32 = (6 << 28) | (u32::from(tc) << 20) | 0x12345;
    f[14..18].copy_from_slice(&vtf.to_be_bytes());
    f[18..20].copy_from_slice(&(udp_len as u16).to_be_bytes());
    f[20] = 17;
    f[21] = hop;
    f[22..38].copy_from_slice(&src.octets());
    f[38..54].copy_from_slice(&dst.octets());
    f[54..56].copy_from_slice(&40000u16.to_be_bytes());
    f[56..58].copy_from_slice(&dport.to_be_bytes());
    f[58..60].copy_from_slice(&(udp_len as u16).to_be_bytes());
    for (n, b) in f[62..].iter_mut().enumerate() {
        *b = word(seed, n as u64) as u8;
    }
    let sum = |b: &[u8]| -> u32 {
        b.chunks(2)
            .map(|c| (u32::from(c[0]) << 8) | u32::from(c.get(1).copied().unwrap_or(0)))
            .sum()
    };
    let mut s = sum(&f[22..54]) + 17 + udp_len as u32 + sum(&f[54..]);
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    let c = !(s as u16);
    f[60..62].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
    f
}

/// A mutation of `f`: a header byte changed, the frame cut, or lengths
/// off by a little.
fn mutate(f: &[u8], seed: u64) -> Vec<u8> {
    let mut g = f.to_vec();
    let r = word(seed, 7);
    match r % 4 {
        0 | 1 => {
            let at = (r >> 8) as usize % g.len().min(64);
            g[at] ^= 1 + (r >> 32) as u8 % 255;
        }
        2 => g.truncate(14 + (r >> 8) as usize % (g.len() - 14)),
        _ => {
            // A length field of IPv4 (16), UDP over IPv4 (38), IPv6 (18) or
            // UDP over IPv6 (58), off by a little either way.
            let at = [16usize, 38, 18, 58][(r >> 8) as usize % 4];
            let v = u16::from_be_bytes([g[at], g[at + 1]]);
            let d = 1 + (r >> 16) as u16 % 9;
            let v = if r & (1 << 40) == 0 {
                v.wrapping_add(d)
            } else {
                v.wrapping_sub(d)
            };
            g[at..at + 2].copy_from_slice(&v.to_be_bytes());
        }
    }
    g
}

struct Bed {
    table: MatchTable,
    fast: FastTable,
    spec: FilterSpec,
    ifindex: u32,
}

fn bed(d0: u32, d1: u32) -> Bed {
    let iface = |name: &str, index: u32, addrs: &[&str]| {
        InterfaceInfo::ethernet(name, index, addrs.iter().map(|a| a.parse().expect("literal")))
    };
    let rules = [
        ("plain", "d0:239.1.1.1:5001", vec!["d1:239.10.1.1:6001"]),
        (
            "ttl-dscp",
            "d0:239.1.1.2:5002",
            vec!["d1:239.10.1.2:6002,ttl=7,dscp=ef"],
        ),
        ("keep", "d0:239.1.1.3:5003", vec!["d1:239.10.1.3:6003,source=keep"]),
        ("ssm", "d0:232.1.1.1:5004,source=10.0.0.1", vec!["d1:239.10.1.4:6004"]),
        ("six", "d0:[ff3e::1]:5005", vec!["d1:[ff3e::10]:6005,ttl=3"]),
        ("unicast-in", "d0:10.0.0.2:5006", vec!["d1:239.10.1.6:6006"]),
        // Translations: the program sends the other version's outputs
        // last, whatever their place in the rule.
        (
            "to-six",
            "d0:239.1.1.8:5008",
            vec!["d1:[ff3e::18]:6008,ttl=5,dscp=af41"],
        ),
        ("to-four", "d0:[ff3e::9]:5009", vec!["d1:239.10.1.9:6009"]),
        (
            "both",
            "d0:239.1.1.10:5010",
            vec!["d1:[ff3e::1a]:6010", "d1:239.10.1.10:6010,ttl=9"],
        ),
        // The workers': a unicast output.
        (
            "slow",
            "d0:239.1.1.7:5007",
            vec!["d1:239.10.1.7:6007", "d1:10.0.1.2:7007"],
        ),
    ];
    let rules: Vec<(&str, &str, &[&str])> = rules.iter().map(|(n, i, o)| (*n, *i, o.as_slice())).collect();
    let ifs = Interfaces::new([
        iface("d0", d0, &["10.0.0.2", "fd00::2"]),
        iface("d1", d1, &["10.0.1.1", "fd00:1::1"]),
    ]);
    let snap = TableSnapshot::from_text(1, &rules, ifs).expect("rules");
    let (table, errors) = MatchTable::compile(&snap);
    assert!(errors.is_empty(), "{errors:?}");
    let fast = FastTable::compile(&table, &StatsLayout::new(1), |_| true);
    assert!(!fast.is_fast(9), "the rule with a unicast output is the workers'");
    let spec = FilterSpec {
        unicast: table.unicast_inputs(d0),
        vlans: table.vlans(d0),
    };
    Bed {
        table,
        fast,
        spec,
        ifindex: d0,
    }
}

impl Bed {
    /// The rule slot of the clean datagram in `f`, as the workers' Rust
    /// sees it: a rule takes it, and the program may read it.
    fn clean_rule(&self, f: &[u8]) -> Option<u32> {
        if f.get(12..14) == Some(&[0x81, 0x00]) {
            // A tag left in the frame: only a second one reaches the
            // program, and that is never clean.
            return None;
        }
        let d = parse(f, f.len(), RxChecksum::Unknown, None).ok()?;
        if d.dst.is_ipv6() && d.udp_at != 54 {
            // Extension headers are the workers' to walk.
            return None;
        }
        match self.table.lookup(self.ifindex, d.vlan, d.dst, d.dst_port, d.src) {
            Lookup::Rule(r, _) => Some(r.slot),
            _ => None,
        }
    }

    /// Whether the kernel path forwards `f`.
    fn owned(&self, f: &[u8]) -> bool {
        let no_checksum = f.get(12..14) == Some(&[0x08, 0x00]) && f.get(40..42) == Some(&[0, 0]);
        self.clean_rule(f)
            .is_some_and(|slot| self.fast.takes(slot, no_checksum))
    }
}

/// Every frame of the run: valid ones and their mutations.
fn frames() -> Vec<Vec<u8>> {
    let mut valid = Vec::new();
    for (i, size) in [64usize, 200, 1024, 1472].into_iter().enumerate() {
        let seed = i as u64;
        valid.push(v4_frame("10.0.0.1:40000", "239.1.1.1:5001", 9, 10, size, seed));
        valid.push(v4_frame("10.0.0.1:40000", "239.1.1.2:5002", 2, 0, size, seed));
        valid.push(v4_frame("10.0.0.1:40000", "239.1.1.2:5002", 1, 0, size, seed));
        valid.push(v4_frame("10.0.0.9:40000", "239.1.1.3:5003", 64, 46, size, seed));
        valid.push(v4_frame("10.0.0.1:40000", "232.1.1.1:5004", 9, 0, size, seed));
        valid.push(v4_frame("10.0.0.5:40000", "232.1.1.1:5004", 9, 0, size, seed));
        valid.push(v4_frame("10.0.0.1:40000", "10.0.0.2:5006", 9, 0, size, seed));
        valid.push(v4_frame("10.0.0.1:40000", "239.1.1.7:5007", 9, 0, size, seed));
        valid.push(v4_frame("10.0.0.1:40000", "239.1.1.99:5001", 9, 0, size, seed));
        valid.push(v6_frame("2001:db8::1", "ff3e::1", 5005, 9, 0xb8, size, seed));
        valid.push(v6_frame("2001:db8::1", "ff3e::1", 5999, 9, 0, size, seed));
        valid.push(v4_frame("10.0.0.1:40000", "239.1.1.8:5008", 9, 46, size, seed));
        valid.push(v6_frame("2001:db8::1", "ff3e::9", 5009, 9, 0x2e, size, seed));
        valid.push(v4_frame("10.0.0.1:40000", "239.1.1.10:5010", 9, 0, size, seed));
        // Without a UDP checksum: the workers' where an IPv6 output needs
        // one, the program's where none does.
        for to in ["239.1.1.8:5008", "239.1.1.1:5001"] {
            let mut f = v4_frame("10.0.0.1:40000", to, 9, 0, size, seed);
            f[40..42].fill(0);
            valid.push(f);
        }
    }
    let mut all = valid.clone();
    for n in 0..6000u64 {
        all.push(mutate(&valid[(word(99, n) % valid.len() as u64) as usize], n));
    }
    all
}

/// Runs the whole comparison in a fresh namespace with two veth ends, d0
/// (the input) and d1 (the output).
fn in_namespace<T: Send + 'static>(tag: &str, f: impl FnOnce(u32, u32) -> T + Send + 'static) -> T {
    let mut tb = mcr_testbed::Testbed::new(tag).expect("test bed");
    let ns = tb.ns("a").expect("namespace");
    ns.ip(&["link", "add", "d0", "type", "veth", "peer", "name", "d1"])
        .expect("veth");
    ns.link_up("d0").expect("up");
    ns.link_up("d1").expect("up");
    let name = ns.name().to_string();
    std::thread::spawn(move || {
        mcr_sys::netns::enter(&name).expect("enter the namespace");
        let d0 = mcr_sys::iface::index("d0").expect("d0");
        let d1 = mcr_sys::iface::index("d1").expect("d1");
        f(d0, d1)
    })
    .join()
    .expect("the namespace thread")
}

fn loaded(b: &Bed) -> Loaded {
    let layout = StatsLayout::new(1);
    let l = Loaded::load(layout.datapath_len() as u32, 1024).expect("loads");
    let plan = Maps::new(1024).plan(&b.fast).expect("room");
    l.write(&plan).expect("maps written");
    l
}

#[test]
fn the_program_takes_exactly_the_frames_the_workers_would_leave_to_it() {
    let mismatches = in_namespace("bpf-eq-take", |d0, d1| {
        let b = bed(d0, d1);
        let l = loaded(&b);
        let classic = ingress_filter(&b.spec);
        let mut bad = Vec::new();
        let (mut owned, mut slow, mut total, mut short) = (0, 0, 0, 0);
        for f in frames() {
            total += 1;
            let want_owned = b.owned(&f);
            let want_taken = b.clean_rule(&f).is_some();
            owned += usize::from(want_owned);
            slow += usize::from(want_taken && !want_owned);
            // A test run refuses a frame too short for the IP header its
            // EtherType announces (it reads it): never one to take.
            let Ok((tc, _)) = l.ingress().test_run(&f, d0) else {
                let header = if f[12..14] == [0x86, 0xdd] { 54 } else { 34 };
                assert!(f.len() < header && !want_owned, "{f:02x?}");
                short += 1;
                continue;
            };
            let want_tc = if want_owned { TCX_DROP } else { TCX_NEXT };
            // A socket filter runs from the network header in a test run:
            // 14 bytes in front stand for the Ethernet header it skips.
            let mut shifted = vec![0u8; 14];
            shifted.extend_from_slice(&f);
            let (ring, _) = l.ring_filter().test_run(&shifted, d0).expect("test run");
            let want_ring = !want_owned && interpret(&classic, &f, None, 0x8100) > 0;
            if tc != want_tc || (ring != 0) != want_ring {
                bad.push(format!(
                    "tc {tc} (want {want_tc}), ring {ring} (want {want_ring}) for {:02x?}",
                    &f[..f.len().min(62)]
                ));
            }
        }
        assert!(
            owned > 40 && owned < total,
            "{owned} of {total} frames are the program's"
        );
        assert!(short < total / 10, "{short} of {total} too short to test");
        assert!(slow > 4, "{slow} clean frames of the workers' rule");
        bad
    });
    assert!(
        mismatches.is_empty(),
        "{} mismatches, first: {:#?}",
        mismatches.len(),
        &mismatches[..mismatches.len().min(5)]
    );
}

#[test]
fn the_program_rewrites_a_frame_byte_for_byte_as_the_workers_do() {
    let (compared, translated) = in_namespace("bpf-eq-rewrite", |d0, d1| {
        let b = bed(d0, d1);
        let l = loaded(&b);
        let (mut compared, mut translated) = (0, 0);
        for f in frames() {
            if !b.owned(&f) {
                continue;
            }
            let d = parse(&f, f.len(), RxChecksum::Unknown, None).expect("owned frames parse");
            let Lookup::Rule(r, _) = b.table.lookup(d0, d.vlan, d.dst, d.dst_port, d.src) else {
                panic!("an owned frame has a rule")
            };
            // The program's order: the outputs of the datagram's own IP
            // version, then the other's. What it leaves in the frame is the
            // last output it sent.
            let mut order: Vec<_> = r.outputs.iter().collect();
            order.sort_by_key(|o| matches!(&o.kind, OutputKind::Frame(rw) if rw.dst.is_ipv4() != d.dst.is_ipv4()));
            let mut want = None;
            for o in order {
                let OutputKind::Frame(rw) = &o.kind else {
                    panic!("a frame output")
                };
                let mut buf = vec![0u8; 2048];
                // A TTL that would reach 0: the program counts the drop
                // and leaves the frame as the output before left it.
                if let Ok(n) = rewrite(&f, &d, rw, &mut buf) {
                    buf.truncate(n);
                    want = Some(buf);
                }
            }
            let (verdict, got) = l.ingress().test_run(&f, d0).expect("test run");
            // Taken either way: its copy went out, or its drop was counted.
            assert_eq!(verdict, TCX_DROP);
            match want {
                Some(want) => {
                    assert_eq!(got, want, "rule {} rewrites {:02x?}", r.name, &f[..f.len().min(62)]);
                    compared += 1;
                    translated += usize::from(got[12..14] != f[12..14]);
                }
                None => assert_eq!(got, f),
            }
        }
        (compared, translated)
    });
    assert!(compared > 30, "{compared} frames compared");
    assert!(translated > 12, "{translated} of them translated");
}

#[test]
fn every_datagram_the_program_takes_reaches_the_health_ring_in_order() {
    let (want, got) = in_namespace("bpf-eq-health", |d0, d1| {
        let b = bed(d0, d1);
        let l = loaded(&b);
        let fd = l
            .health_ring()
            .expect("ring")
            .as_fd()
            .try_clone_to_owned()
            .expect("dup");
        let mut ring = RingReader::new(fd).expect("ring mapped");
        assert!(ring.is_empty());
        let layout = StatsLayout::new(1);
        let (mut want, mut got) = (Vec::new(), Vec::new());
        let mut last_ns = 0;
        let mut read = |ring: &mut RingReader, got: &mut Vec<(u32, u16, Vec<u8>)>| {
            ring.drain(usize::MAX, |rec| {
                let r = HealthRecord::parse(rec).expect("a record");
                assert!(r.whole(), "a datagram of at most 1472 bytes is whole");
                assert_eq!(r.header.missed, 0, "the ring never filled");
                assert!(r.header.arrived_ns >= last_ns, "in order of arrival");
                last_ns = r.header.arrived_ns;
                got.push((r.header.rule, r.header.form, r.body().to_vec()));
            });
        };
        for (n, f) in frames().into_iter().enumerate() {
            // A test run refuses a frame too short for its IP header (see
            // above): never one to take.
            let Ok((verdict, _)) = l.ingress().test_run(&f, d0) else {
                assert!(!b.owned(&f));
                continue;
            };
            if b.owned(&f) {
                assert_eq!(verdict, TCX_DROP);
                let d = parse(&f, f.len(), RxChecksum::Unknown, None).expect("owned frames parse");
                let slot = b.clean_rule(&f).expect("a rule");
                let payload = &f[d.payload_at..d.payload_at + d.payload_len];
                let (form, body) = match health_pieces(payload) {
                    Some(p) => (HEALTH_PIECES, p),
                    None => (HEALTH_WHOLE, payload[..payload.len().min(HEALTH_PAYLOAD)].to_vec()),
                };
                // (Whether each must reach the ring: one the program may
                // sample, only one in 25 ms of its rule does.)
                want.push((
                    health_looks_into(payload),
                    (layout.rule(0, slot, RuleCounter::Packets) as u32, form, body),
                ));
            }
            if n % 1000 == 999 {
                read(&mut ring, &mut got);
            }
        }
        read(&mut ring, &mut got);
        assert!(ring.is_empty());
        (want, got)
    });
    let must = want.iter().filter(|(must, _)| *must).count();
    assert!(
        must > 30 && want.len() > must,
        "{} datagrams taken, {must} looked into",
        want.len()
    );
    // The records are the datagrams, in order: every one that must be
    // there, and of the others some (the first of each rule at least).
    let mut got = got.into_iter().peekable();
    let mut sampled = std::collections::BTreeSet::new();
    for (i, (must, w)) in want.iter().enumerate() {
        if got.peek() == Some(w) {
            if !must {
                sampled.insert(w.0);
            }
            got.next();
        } else {
            assert!(!must, "datagram {i} of rule counter {} has no record", w.0);
        }
    }
    assert_eq!(got.next(), None, "records of no datagram");
    let rules_sampled = want.iter().filter(|(must, _)| !must).map(|(_, w)| w.0);
    assert_eq!(sampled, rules_sampled.collect(), "each rule's first sampled");
}
