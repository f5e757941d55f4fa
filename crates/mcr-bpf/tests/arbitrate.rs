//! The kernel's A/B line arbitration against mcr-core's, packet by packet
//! (`BPF_PROG_TEST_RUN`, in a namespace of the test's own): for each
//! framing, a run of copies on two lines with losses, skew, heartbeats,
//! a session change or a reset, packets of a wrong session and malformed
//! ones; after every packet the program must have forwarded it exactly
//! when `mcr_core::arbitrate::Arbiter` does, and at the end each line's
//! counts, the rule's gaps and the race's copies must be the same.

use mcr_bpf::{Loaded, RACE_BUCKETS};
use mcr_core::arbitrate::{Arbiter, Verdict};
use mcr_core::datapath::{FastTable, Maps, TCX_DROP};
use mcr_core::interfaces::{InterfaceInfo, Interfaces};
use mcr_core::rule::{Mode, Redundancy, Rule};
use mcr_core::snapshot::{SlottedRule, TableSnapshot};
use mcr_core::stats::{InputCounter, LineCounter, OutputCounter, RuleCounter, StatsLayout};
use mcr_core::table::MatchTable;
use mcr_core::wire::{UDP_V4_HEADERS, UdpFrameSpec, write_udp_v4_frame};

const LINES: [&str; 2] = ["239.1.1.1:5001", "239.2.1.1:5001"];
const INPUT_SLOTS: [u32; 4] = [100, 101, 102, 103];

/// splitmix64.
fn word(seed: u64, n: u64) -> u64 {
    let mut x = seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn frame(dst: &str, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; UDP_V4_HEADERS + payload.len()];
    f[UDP_V4_HEADERS..].copy_from_slice(payload);
    let spec = UdpFrameSpec {
        dst_mac: [1, 0, 0x5e, 1, 1, 1],
        src_mac: [2, 0, 0, 0, 0, 1],
        src: "10.0.0.1:40000".parse().expect("src"),
        dst: dst.parse().expect("dst"),
        ttl: 9,
        dscp: 0,
        ident: payload.len() as u16,
    };
    write_udp_v4_frame(&mut f, &spec, payload.len()).expect("fits");
    f
}

fn mold(session: &[u8; 10], seq: u64, count: u16) -> Vec<u8> {
    let mut p = session.to_vec();
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&count.to_be_bytes());
    for _ in 0..count.min(8) {
        p.extend_from_slice(&[0, 3, b'A', 1, 2]);
    }
    p
}

fn mdp3(seq: u32) -> Vec<u8> {
    let mut p = seq.to_le_bytes().to_vec();
    p.extend_from_slice(&[7; 8]);
    p.extend_from_slice(&[0, 0, 1, 2]);
    p
}

fn pitch(unit: u8, seq: u32, count: u8) -> Vec<u8> {
    let mut p = vec![0, 0, count, unit];
    p.extend_from_slice(&seq.to_le_bytes());
    for _ in 0..count {
        p.extend_from_slice(&[4, b'T', 1, 2]);
    }
    let len = p.len() as u16;
    p[..2].copy_from_slice(&len.to_le_bytes());
    p
}

/// A run of one framing: (line, payload) in arrival order.
fn run_of(framing: &str) -> Vec<(usize, Vec<u8>)> {
    let mut run = Vec::new();
    // Packets in order on line a; each copy on line b three packets
    // later; each line loses its own few percent; some both.
    let lost = |line: u64, k: u64| word(line + 7, k) % 100 < 6;
    let packet = |k: u64, phase: u64| -> Vec<u8> {
        match framing {
            "moldudp64" => {
                let s: &[u8; 10] = if phase == 0 { b"SESSION001" } else { b"SESSION002" };
                mold(s, 1 + 2 * k, 2)
            }
            "mdp3" => mdp3(1 + k as u32),
            _ => pitch(1 + (k % 2) as u8, 1 + (k / 2) as u32, 1),
        }
    };
    for (phase, n) in [(0u64, 300u64), (1, 200)] {
        for t in 0..n + 3 {
            if t < n && !lost(0, t + 1000 * phase) {
                run.push((0, packet(t, phase)));
            }
            if let Some(k) = t.checked_sub(3).filter(|k| *k < n && !lost(1, k + 1000 * phase)) {
                run.push((1, packet(k, phase)));
            }
            // Heartbeats, odd packets, now and then.
            if t == 40 {
                match framing {
                    // (Each heartbeat pair of its own number: whether a
                    // heartbeat is a copy also depends on the time, which
                    // the two sides keep differently here.)
                    "moldudp64" => {
                        let s: &[u8; 10] = if phase == 0 { b"SESSION001" } else { b"SESSION002" };
                        run.push((0, mold(s, 70 + phase, 0)));
                        run.push((1, mold(s, 70 + phase, 0)));
                        run.push((0, mold(b"BOGUS00000", 9_000, 1)));
                    }
                    "pitch" => {
                        run.push((0, pitch(1, 5 + phase as u32, 0)));
                        run.push((1, pitch(1, 5 + phase as u32, 0)));
                        run.push((1, pitch(9, 1, 1)));
                        run.push((1, pitch(3, 1, 1)));
                    }
                    _ => run.push((1, mdp3(2_000_000))),
                }
                run.push((0, vec![1, 2, 3]));
                run.push((1, packet(2, phase)[..7].to_vec()));
            }
        }
    }
    // (For MDP 3.0 and PITCH the second phase starts again at 1: a reset;
    // for MoldUDP64 a new session.)
    run
}

fn arbitrated(framing: &str, d0: u32, d1: u32) -> (TableSnapshot, Mode) {
    let iface = |name: &str, index: u32, addr: &str| InterfaceInfo::ethernet(name, index, [addr.parse().expect("ip")]);
    let mode: Mode = format!("arbitrate,framing={framing},window=1024")
        .parse()
        .expect("mode");
    let rule = Rule {
        redundancy: Some(Redundancy {
            mode,
            inputs: vec![format!("d0:{}", LINES[1]).parse().expect("input")],
        }),
        ..Rule::new(
            "md",
            format!("d0:{}", LINES[0]).parse().expect("input"),
            vec!["d1:239.10.1.1:6001".parse().expect("output")],
        )
    };
    let snap = TableSnapshot {
        version: 1,
        rules: vec![SlottedRule {
            rule,
            slot: 3,
            output_slots: vec![0],
            input_slots: INPUT_SLOTS.to_vec(),
            forced_input: None,
        }],
        interfaces: Interfaces::new([iface("d0", d0, "10.0.0.2"), iface("d1", d1, "10.0.1.1")]),
        fanout: Vec::new(),
    };
    (snap, mode)
}

#[test]
fn the_kernel_arbitrates_each_packet_as_mcr_core_does() {
    let mut tb = mcr_testbed::Testbed::new("bpf-arb").expect("test bed");
    let ns = tb.ns("a").expect("namespace");
    ns.ip(&["link", "add", "d0", "type", "veth", "peer", "name", "d1"])
        .expect("veth");
    ns.link_up("d0").expect("up");
    ns.link_up("d1").expect("up");
    let name = ns.name().to_string();
    let report = std::thread::spawn(move || {
        mcr_sys::netns::enter(&name).expect("enter the namespace");
        let d0 = mcr_sys::iface::index("d0").expect("d0");
        let d1 = mcr_sys::iface::index("d1").expect("d1");
        let mut report = Vec::new();
        for framing in ["moldudp64", "mdp3", "pitch"] {
            report.push(compare(framing, d0, d1));
        }
        report
    })
    .join()
    .expect("the namespace thread");
    for line in &report {
        eprintln!("{line}");
    }
}

/// Runs `framing`'s packets through the program and through the Rust; a
/// summary line.
fn compare(framing: &str, d0: u32, d1: u32) -> String {
    let layout = StatsLayout::new(1);
    let (snap, mode) = arbitrated(framing, d0, d1);
    let (table, errors) = MatchTable::compile(&snap);
    assert!(errors.is_empty(), "{errors:?}");
    let fast = FastTable::compile(&table, &layout, |_| true);
    assert!(
        fast.is_fast(3),
        "{framing}: {:?}",
        fast.rules.get(&3).map(|r| r.outputs.clone())
    );
    let l = Loaded::load(layout.datapath_len() as u32, 1024).expect("loads");
    let mut maps = Maps::new(1024);
    let plan = maps.plan(&fast).expect("room");
    l.write(&plan).expect("maps written");
    let arb = maps.arb_of(3).expect("an entry");
    let Mode::Arbitrate { framing: f, window } = mode else {
        unreachable!()
    };
    let mut rust = Arbiter::new(f, window, 2);
    let c = l.counters();
    let out = layout.output(0, 0, OutputCounter::Packets);
    let (mut forwarded, mut copies_of_other) = (0, [0u64; 2]);
    for (n, (line, payload)) in run_of(framing).into_iter().enumerate() {
        let before = c.get(out);
        let (verdict, _) = l
            .ingress()
            .test_run(&frame(LINES[line], &payload), d0)
            .expect("test run");
        let kernel = c.get(out) - before == 1;
        // The program's either way: the first copy went out as a clone,
        // a later one nowhere (not up the host's stack).
        assert_eq!(verdict, TCX_DROP, "{framing}: packet {n}");
        // (The window's ages are the Rust's business; 1 ms apart here.)
        let now = n as u64 * 1_000_000;
        let want = rust.packet(line, &payload, now);
        assert_eq!(
            kernel,
            want == Verdict::Forward,
            "{framing}: packet {n} on line {line} ({want:?}): {payload:02x?}"
        );
        forwarded += u64::from(kernel);
        if matches!(want, Verdict::Copy) {
            copies_of_other[line] += 1;
        }
    }
    // Each line's counts, the rule's gaps, and the race.
    for (i, counts) in rust.counts().iter().enumerate() {
        let input = |k: InputCounter| c.get(layout.input(0, INPUT_SLOTS[i], k));
        let line = |k: LineCounter| c.get(layout.line(0, INPUT_SLOTS[2 + i], k));
        assert_eq!(
            [
                input(InputCounter::Forwarded),
                input(InputCounter::Duplicates),
                input(InputCounter::TooLate),
                input(InputCounter::Strays),
            ],
            [counts.forwarded, counts.copies, counts.too_late, counts.strays],
            "{framing}: line {i}"
        );
        assert_eq!(
            [
                line(LineCounter::Messages),
                line(LineCounter::Gaps),
                line(LineCounter::Repeats),
                line(LineCounter::Heartbeats),
                line(LineCounter::WrongSession),
                line(LineCounter::Malformed),
                line(LineCounter::Resets),
            ],
            [
                counts.messages,
                counts.gaps,
                counts.repeats,
                counts.heartbeats,
                counts.wrong_session,
                counts.malformed,
                counts.resets
            ],
            "{framing}: line {i}"
        );
    }
    let rule = |k: RuleCounter| c.get(layout.rule(0, 3, k));
    assert_eq!(
        (rule(RuleCounter::GapsOpened), rule(RuleCounter::GapsFilled)),
        rust.gaps(),
        "{framing}: the numbers no line brought"
    );
    let race = l.race(arb);
    assert_eq!(race[0].len(), RACE_BUCKETS);
    let lags = rust.lags(0);
    for (i, h) in race.iter().take(2).enumerate() {
        assert_eq!(h.iter().sum::<u64>(), lags[i].samples, "{framing}: line {i}'s race");
    }
    assert!(lags[1].samples > 100, "{framing}: {lags:?}");
    format!(
        "{framing}: {forwarded} forwarded; line b a copy {} times; rule lost {}",
        copies_of_other[1],
        rust.lost()
    )
}
