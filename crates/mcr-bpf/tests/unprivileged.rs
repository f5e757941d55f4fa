//! MCR's object as mcrd runs it under the packaged systemd unit: a user
//! that is not root, with only CAP_BPF, CAP_NET_ADMIN and CAP_NET_RAW.
//! Without CAP_PERFMON the verifier is stricter than for root (no read of
//! stack it cannot prove written, Spectre v1 and v4 mitigations, no
//! pointer leaks), and a program it refuses sends every rule to the
//! workers with nothing to show for it but a log line.
//!
//! The test runs itself again, in a namespace of its own, under `setpriv`
//! as `nobody` with just those capabilities (effective, permitted,
//! inheritable, ambient and bounding sets). That process loads the object
//! as mcrd does, writes a rule into its maps, and runs frames through the
//! tc program and the rings' filter (`BPF_PROG_TEST_RUN`): the verdicts,
//! and the health records of datagrams of every shape the record's pieces
//! care about, must be what mcr-core says, as equivalence.rs holds them
//! for root.

use std::net::{SocketAddrV4, SocketAddrV6};
use std::os::fd::AsFd;
use std::process::Command;

use mcr_bpf::Loaded;
use mcr_core::datapath::{
    FastTable, HEALTH_PAYLOAD, HEALTH_PIECES, HEALTH_WHOLE, HealthRecord, Maps, TCX_DROP, TCX_NEXT, health_pieces,
};
use mcr_core::interfaces::{InterfaceInfo, Interfaces};
use mcr_core::snapshot::TableSnapshot;
use mcr_core::stats::{RuleCounter, StatsLayout};
use mcr_core::table::MatchTable;
use mcr_core::wire::{
    UDP_V4_HEADERS, UDP_V6_HEADERS, UdpFrameSpec, UdpFrameSpecV6, write_udp_v4_frame, write_udp_v6_frame,
};
use mcr_sys::bpf::ringbuf::RingReader;
use mcr_sys::bpf::{LoadError, ProgramKind};

/// Set in the process that runs as the unit's user.
const CHILD: &str = "MCR_BPF_UNPRIVILEGED_CHILD";
/// This test, as the child runs it.
const TEST: &str = "the_data_path_loads_and_forwards_with_only_the_units_capabilities";
/// CAP_NET_ADMIN (12), CAP_NET_RAW (13), CAP_BPF (39): the unit's set.
const UNIT_CAPS: u64 = 1 << 12 | 1 << 13 | 1 << 39;
const SETPRIV_CAPS: &str = "+bpf,+net_admin,+net_raw";
/// What the child prints once every check has passed.
const DONE: &str = "mcr-bpf: loaded and ran as the unit's user";

#[test]
fn the_data_path_loads_and_forwards_with_only_the_units_capabilities() {
    if std::env::var_os(CHILD).is_some() {
        as_the_units_user();
        return;
    }
    let mut tb = mcr_testbed::Testbed::new("bpf-unpriv").expect("test bed");
    let ns = tb.ns("a").expect("namespace");
    ns.ip(&["link", "add", "d0", "type", "veth", "peer", "name", "d1"])
        .expect("veth");
    ns.link_up("d0").expect("up");
    ns.link_up("d1").expect("up");
    let exe = std::env::current_exe().expect("this test's executable");
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns.name(),
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ])
        .arg(format!("--inh-caps=-all,{SETPRIV_CAPS}"))
        .arg(format!("--ambient-caps=-all,{SETPRIV_CAPS}"))
        .arg(format!("--bounding-set=-all,{SETPRIV_CAPS}"))
        .arg(&exe)
        .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .expect("ip and setpriv (iproute2, util-linux) run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.lines().any(|l| l == DONE),
        "as the unit's user ({}):\n{stdout}\n{stderr}",
        out.status
    );
}

/// A line of /proc/self/status, e.g. `CapEff` (hex) or `Uid`.
fn status(field: &str) -> String {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
        .trim()
        .to_string()
}

/// The child: checks who it is, then loads and runs the object.
fn as_the_units_user() {
    let effective = u64::from_str_radix(&status("CapEff"), 16).expect("CapEff");
    assert_eq!(
        effective, UNIT_CAPS,
        "the process runs with exactly the unit's capabilities (no CAP_PERFMON, no CAP_SYS_ADMIN)"
    );
    let uid = status("Uid");
    assert!(
        uid.split_whitespace().all(|u| u != "0"),
        "the process is not root (uids {uid})"
    );
    let (d0, d1) = (
        mcr_sys::iface::index("d0").expect("d0"),
        mcr_sys::iface::index("d1").expect("d1"),
    );
    let layout = StatsLayout::new(1);
    // As mcrd does: one statistics block, room for outputs.
    let l = match Loaded::load(layout.datapath_len() as u32, 1024) {
        Ok(l) => l,
        Err(LoadError::Program { name, source, log }) => {
            // More of the log than the error's own tail: where the refused
            // access came from.
            let lines: Vec<&str> = log.lines().collect();
            panic!(
                "the verifier refused `{name}` for the unit's user ({source}):\n{}",
                lines[lines.len().saturating_sub(60)..].join("\n")
            );
        }
        Err(e) => panic!("the data path could not be loaded as the unit's user: {e}"),
    };
    assert_eq!(l.ingress().kind(), ProgramKind::Classifier);
    assert_eq!(l.ring_filter().kind(), ProgramKind::SocketFilter);
    run_frames(&l, &layout, d0, d1);
    // (On stderr: libtest's own line on stdout has no end yet.)
    eprintln!("{DONE}");
}

/// One rule of each family on d0, each with an output on d1, both carried
/// by the program and their health followed.
fn run_frames(l: &Loaded, layout: &StatsLayout, d0: u32, d1: u32) {
    let iface = |name: &str, index: u32, addrs: &[&str]| {
        InterfaceInfo::ethernet(name, index, addrs.iter().map(|a| a.parse().expect("literal")))
    };
    let rules: [(&str, &str, &[&str]); 2] = [
        ("four", "d0:239.1.1.1:5001", &["d1:239.10.1.1:6001"]),
        ("six", "d0:[ff3e::1]:5005", &["d1:[ff3e::10]:6005"]),
    ];
    let ifs = Interfaces::new([
        iface("d0", d0, &["10.0.0.2", "fd00::2"]),
        iface("d1", d1, &["10.0.1.1", "fd00:1::1"]),
    ]);
    let snap = TableSnapshot::from_text(1, &rules, ifs).expect("rules");
    let (table, errors) = MatchTable::compile(&snap);
    assert!(errors.is_empty(), "{errors:?}");
    let fast = FastTable::compile(&table, layout, |_| true);
    l.write(&Maps::new(1024).plan(&fast).expect("room"))
        .expect("maps written");
    let slot = |f: &[u8]| {
        let d = mcr_core::forward::parse(f, f.len(), mcr_core::forward::RxChecksum::Unknown, None).expect("parses");
        match table.lookup(d0, d.vlan, d.dst, d.dst_port, d.src) {
            mcr_core::table::Lookup::Rule(r, _) => {
                assert!(fast.is_fast(r.slot), "the program carries rule {}", r.name);
                layout.rule(0, r.slot, RuleCounter::Packets) as u32
            }
            _ => panic!("no rule takes {:02x?}", &f[..f.len().min(62)]),
        }
    };

    let fd = l
        .health_ring()
        .expect("ring")
        .as_fd()
        .try_clone_to_owned()
        .expect("dup");
    let mut ring = RingReader::new(fd).expect("ring mapped");
    let mut want = Vec::new();
    for (n, payload) in payloads().into_iter().enumerate() {
        for v6 in [false, true] {
            let f = if v6 {
                v6_frame(&payload)
            } else {
                v4_frame("239.1.1.1:5001", &payload)
            };
            let (verdict, _) = l.ingress().test_run(&f, d0).expect("test run");
            // The program's either way (its copy sent on, or, for an IPv6
            // datagram too big for the output's MTU, counted as too big).
            assert_eq!(verdict, TCX_DROP, "payload {n} of {} bytes", payload.len());
            // The rings' filter keeps out what the program takes (it skips
            // the 14 bytes in front, which stand for the Ethernet header).
            let mut shifted = vec![0u8; 14];
            shifted.extend_from_slice(&f);
            let (kept, _) = l.ring_filter().test_run(&shifted, d0).expect("test run");
            assert_eq!(kept, 0, "the rings keep out payload {n}");
            let (form, body) = match health_pieces(&payload) {
                Some(p) => (HEALTH_PIECES, p),
                None => (HEALTH_WHOLE, payload[..payload.len().min(HEALTH_PAYLOAD)].to_vec()),
            };
            want.push((slot(&f), form, body));
        }
    }
    // A datagram no rule takes goes on untouched, and into the rings.
    let other = v4_frame("239.9.9.9:5001", &[0x47; 188]);
    assert_eq!(l.ingress().test_run(&other, d0).expect("test run").0, TCX_NEXT);
    let mut shifted = vec![0u8; 14];
    shifted.extend_from_slice(&other);
    assert_ne!(l.ring_filter().test_run(&shifted, d0).expect("test run").0, 0);

    let pieces = want.iter().filter(|w| w.1 == HEALTH_PIECES).count();
    assert!(
        pieces > 20 && want.len() - pieces > 6,
        "{pieces} of {} records in pieces",
        want.len()
    );
    let mut got = Vec::new();
    ring.drain(usize::MAX, |rec| {
        let r = HealthRecord::parse(rec).expect("a record");
        assert_eq!(r.header.missed, 0, "the ring never filled");
        got.push((r.header.rule, r.header.form, r.body().to_vec()));
    });
    assert_eq!(got.len(), want.len(), "a record for every datagram");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "record {i}: rule, form and body as mcr-core makes them");
    }
}

/// Payloads the health checks look into (RTP or MPEG-TS first bytes, so
/// none is left to sampling), of every shape `follow_pieces` tells apart:
/// shorter than a piece or than the first; the last piece of a base cut
/// short; transport packets from 0 (plain) and from 12 (after an RTP
/// header); a PAT section whose table id lies past its piece (then the
/// payload goes whole), or within it; RTP with CSRCs; longer than a
/// record holds.
fn payloads() -> Vec<Vec<u8>> {
    let noise = |len: usize, seed: u64| -> Vec<u8> { (0..len).map(|n| word(seed, n as u64) as u8).collect() };
    // Seven transport packets from `at`, PID 0x100, none of them a PAT.
    let ts = |len: usize, at: usize, seed: u64| -> Vec<u8> {
        let mut p = noise(len, seed);
        for k in 0..7 {
            let o = at + k * 188;
            if o + 4 <= len {
                p[o..o + 4].copy_from_slice(&[0x47, 0x01, 0x00, 0x10 | k as u8]);
            }
        }
        p
    };
    let mut all = vec![ts(1316, 0, 1)];
    all.push(ts(1316 - 5, 0, 2));
    // A PAT section start in packet k: a pointer field that puts the table
    // id past the piece, or an adaptation field, sends it whole; pointer 0
    // keeps it in pieces.
    for (k, byte3, pointer) in [(0, 0x10, 20), (3, 0x10, 11), (6, 0x30, 0), (2, 0x10, 0), (5, 0x10, 10)] {
        let mut p = ts(1316, 0, 3 + k as u64);
        p[k * 188..k * 188 + 5].copy_from_slice(&[0x47, 0x40, 0x00, byte3, pointer]);
        all.push(p);
    }
    // RTP (version 2, no CSRC) carrying seven packets, one a PAT; and RTP
    // with CSRCs.
    let mut rtp = ts(1328, 12, 9);
    rtp[..2].copy_from_slice(&[0x80, 33]);
    all.push(rtp.clone());
    rtp[12 + 188 * 4..12 + 188 * 4 + 5].copy_from_slice(&[0x47, 0x40, 0x00, 0x10, 30]);
    all.push(rtp.clone());
    rtp[0] = 0x82;
    all.push(rtp);
    all.push(ts(HEALTH_PAYLOAD, 0, 10));
    all.push(ts(2000, 0, 11));
    // Shorter and shorter, each after a longer one (what the program reads
    // a payload into holds the last one's bytes past its end).
    for len in [
        216usize, 215, 205, 204, 203, 188, 187, 64, 29, 28, 27, 17, 16, 15, 13, 12, 11, 5, 4, 3, 2, 1,
    ] {
        let mut p = noise(len, len as u64);
        p[0] = 0x47;
        all.push(p);
    }
    all
}

/// splitmix64.
fn word(seed: u64, n: u64) -> u64 {
    let mut x = seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn v4_frame(dst: &str, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; UDP_V4_HEADERS + payload.len()];
    f[UDP_V4_HEADERS..].copy_from_slice(payload);
    let spec = UdpFrameSpec {
        dst_mac: [1, 0, 0x5e, 1, 1, 1],
        src_mac: [2, 0, 0, 0, 0, 1],
        src: "10.0.0.1:40000".parse::<SocketAddrV4>().expect("src"),
        dst: dst.parse::<SocketAddrV4>().expect("dst"),
        ttl: 9,
        dscp: 0,
        ident: 1,
    };
    write_udp_v4_frame(&mut f, &spec, payload.len()).expect("fits");
    f
}

fn v6_frame(payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; UDP_V6_HEADERS + payload.len()];
    f[UDP_V6_HEADERS..].copy_from_slice(payload);
    let spec = UdpFrameSpecV6 {
        dst_mac: [0x33, 0x33, 0, 0, 0, 1],
        src_mac: [2, 0, 0, 0, 0, 1],
        src: "[2001:db8::1]:40000".parse::<SocketAddrV6>().expect("src"),
        dst: "[ff3e::1]:5005".parse::<SocketAddrV6>().expect("dst"),
        hop_limit: 9,
        dscp: 0,
    };
    write_udp_v6_frame(&mut f, &spec, payload.len()).expect("fits");
    f
}
