//! Market-data A/B line arbitration: the generator sends a feed (MoldUDP64,
//! MDP 3.0, PITCH or MITCH, `mcrgen send --wrap`) on line a and, a few ms
//! later, the same packets on line b; each line crosses an impairer that
//! drops the packets in its own loss band; the relay keeps the first copy
//! of each sequence number. The sink checks every packet (mcrgen's own
//! sequence, payload and checksums inside the feed's messages), and for
//! MoldUDP64 Wireshark's dissector (tshark) reads the output too.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, UdpSocket};
use std::path::PathBuf;
use std::time::Duration;

use mcr_core::control::{InputStats, LineStats, RedundancyStats, RuleStats};
use mcr_testbed::capture::Capture;
use mcr_testbed::presets::TwoPaths;
use mcr_testbed::relay::Relay;
use mcr_testbed::traffic::{Mcrgen, Received};
use mcr_testbed::{traffic_lock, tshark};
use mcrgen::impair::{ImpairReport, in_band};

const MINUTES: Duration = Duration::from_secs(180);
const IN_A: &str = "in0:239.1.1.1:5001";
const IN_B: &str = "in1:239.2.1.1:5001";
const OUT: &str = "out0:239.10.1.1:6001";
const SEED: u64 = 11;
/// Packets a second on each line.
const RATE: &str = "2000";
const RATE_PPS: u64 = 2000;

/// One run of a framing: its `--wrap`, what else mcrgen sends it with,
/// each line's loss band (fractions) and line b's lag.
struct Case {
    wrap: &'static str,
    extra: &'static [&'static str],
    /// Sequence numbers a packet takes.
    messages: u64,
    band_a: (f64, f64),
    band_b: (f64, f64),
    skew: &'static str,
}

const CASES: [Case; 4] = [
    Case {
        wrap: "moldudp64",
        extra: &["--messages", "3"],
        messages: 3,
        band_a: (0.0, 0.05),
        band_b: (0.04, 0.09),
        skew: "3ms",
    },
    Case {
        wrap: "mdp3",
        extra: &[],
        messages: 1,
        band_a: (0.0, 0.10),
        band_b: (0.09, 0.13),
        skew: "0ms",
    },
    Case {
        wrap: "pitch",
        extra: &["--messages", "2", "--size", "400"],
        messages: 2,
        band_a: (0.0, 0.01),
        band_b: (0.005, 0.02),
        skew: "5ms",
    },
    Case {
        wrap: "mitch",
        extra: &["--messages", "4", "--size", "600", "--unit", "7"],
        messages: 4,
        band_a: (0.0, 0.06),
        band_b: (0.05, 0.08),
        skew: "1ms",
    },
];

fn band(b: (f64, f64)) -> String {
    format!("{}-{}%", b.0 * 100.0, b.1 * 100.0)
}

/// What one run brought.
struct Run {
    got: Received,
    paths: [ImpairReport; 2],
    rule: RuleStats,
    red: RedundancyStats,
}

/// Adds the rule `md` arbitrating `wrap`, sends `count` packets of it on
/// both lines through impairers dropping `bands`, receives the output
/// (capturing it into `pcap` if given) and removes the rule again.
fn run(p: &TwoPaths, relay: &Relay, c: &Case, count: u64, extra: &[&str], pcap: Option<&PathBuf>) -> Run {
    let mode = format!("arbitrate,framing={}", c.wrap);
    relay
        .ctl_ok(&[
            "add", "md", "--input", IN_A, "--input", IN_B, "--mode", &mode, "--output", OUT,
        ])
        .expect("rule added");
    let seed = SEED.to_string();
    let impair = |b: bool, band: String| p.impair(b, &["--loss-band", &band, "--seed", &seed]).expect("impairer");
    let (a, b) = (impair(false, band(c.band_a)), impair(true, band(c.band_b)));
    let capture = pcap.map(|_| Capture::start(&p.sink, TwoPaths::SINK_IF, "udp port 6001").expect("capture"));
    let rx = Mcrgen::streams("239.10.1.1:6001", TwoPaths::SINK_IF)
        .wrap(c.wrap)
        .ids(0)
        .arg("--idle-timeout")
        .arg("1s")
        .recv(&p.sink)
        .expect("receiver ready");
    let mut send = Mcrgen::streams("239.1.1.1:5001", TwoPaths::GEN_A_IF)
        .count(count)
        .rate(RATE)
        .wrap(c.wrap)
        .arg("--copy")
        .arg("239.2.1.1:5001")
        .arg("--copy-delay")
        .arg(c.skew)
        .arg("--copy-interface")
        .arg(TwoPaths::GEN_B_IF);
    for x in c.extra.iter().chain(extra) {
        send = send.arg(x);
    }
    let sent = send.send(&p.generator, MINUTES).expect("sent");
    assert_eq!((sent.packets, sent.copies), (count, count));
    let got = rx.finish(MINUTES).expect("receiver finished");
    if let (Some(cap), Some(to)) = (capture, pcap) {
        cap.stop_keeping(Some(to)).expect("capture stopped");
    }
    let paths = [a.stop().expect("line a"), b.stop().expect("line b")];
    let s = relay.stats().expect("stats");
    let rule = s.rules.into_iter().find(|r| r.name == "md").expect("rule md");
    let red = rule.redundancy.clone().expect("two lines");
    let shown = relay.ctl_ok(&["stats"]).expect("mcrctl stats");
    assert!(
        shown.contains("line: messages"),
        "mcrctl stats shows each line:\n{shown}"
    );
    eprintln!("{shown}");
    relay.ctl_ok(&["remove", "md"]).expect("rule removed");
    // Time for the workers to take the table without it, so that the next
    // case's rule, added at once, takes its slot (and, on the eBPF path,
    // its arbitration entry) again, well within the second between two
    // samples of the line race.
    std::thread::sleep(Duration::from_millis(200));
    Run { got, paths, rule, red }
}

fn line(i: &InputStats) -> &LineStats {
    i.line.as_ref().expect("an arbitrated input has its line's figures")
}

/// The packets (mcrgen's numbers) line `band` dropped, of `count`.
fn dropped(count: u64, band: (f64, f64)) -> BTreeSet<u64> {
    (0..count).filter(|&q| in_band(SEED, 0, q, band)).collect()
}

/// Gaps a line counts: what it dropped between the first and the last
/// packet it brought.
fn gaps_of(count: u64, drops: &BTreeSet<u64>) -> u64 {
    let brought: Vec<u64> = (0..count).filter(|q| !drops.contains(q)).collect();
    let (first, last) = (brought[0], brought[brought.len() - 1]);
    drops.iter().filter(|&&q| q > first && q < last).count() as u64
}

/// Every packet at least one line brought left once; what is missing is
/// exactly what both lines lost, counted once as the rule's `lost`, and
/// each line's counts agree with what its impairer did.
fn check_run(r: &Run, c: &Case, count: u64) {
    let (da, db) = (dropped(count, c.band_a), dropped(count, c.band_b));
    let both: BTreeSet<u64> = da.intersection(&db).copied().collect();
    assert!(
        !both.is_empty() && da.len() > both.len(),
        "{}: the bands overlap a little",
        c.wrap
    );
    let s = &r.got.report.streams[0];
    assert_eq!(
        (s.duplicated, s.corrupted, s.wrong_stream, s.unrecognized, s.too_late),
        (0, 0, 0, 0, 0),
        "{}: {s:?}",
        c.wrap
    );
    assert_eq!(
        s.unique,
        count - both.len() as u64,
        "{}: {s:?} {:?} {:?}",
        c.wrap,
        r.red,
        r.paths
    );
    let holes: BTreeSet<u64> = s.holes.iter().flat_map(|&(first, n)| first..first + n).collect();
    let highest = s.highest_seq.expect("some arrived");
    let seen: BTreeSet<u64> = both.iter().copied().filter(|&q| q < highest).collect();
    assert_eq!(
        holes, seen,
        "{}: exactly what both lines lost is missing: {:?} {s:?}",
        c.wrap, r.red
    );
    assert_eq!(
        r.red.lost,
        seen.len() as u64 * c.messages,
        "{}: each sequence number no line brought is counted lost once",
        c.wrap
    );
    for ((i, path), drops) in r.red.inputs.iter().zip(&r.paths).zip([&da, &db]) {
        let arrived = count - drops.len() as u64;
        assert_eq!(path.band_dropped, drops.len() as u64, "{}: {path:?}", i.input);
        assert_eq!(i.packets, arrived, "{}: {i:?}", c.wrap);
        assert_eq!(i.forwarded + i.duplicates, i.packets, "{}: {i:?}", c.wrap);
        assert_eq!(i.too_late + i.strays + i.not_rtp, 0, "{}: {i:?}", c.wrap);
        let l = line(i);
        assert_eq!(l.messages, arrived * c.messages, "{}: {l:?}", c.wrap);
        assert_eq!(l.gaps, gaps_of(count, drops) * c.messages, "{}: {l:?}", c.wrap);
        assert_eq!(
            (l.duplicates, l.malformed, l.wrong_session, l.resets),
            (0, 0, 0, 0),
            "{}: {l:?}",
            c.wrap
        );
    }
    let forwarded: u64 = r.red.inputs.iter().map(|i| i.forwarded).sum();
    assert_eq!(forwarded, s.unique, "{}", c.wrap);
    assert_eq!((r.rule.packets, r.rule.outputs[0].packets), (forwarded, forwarded));
    // Each line's copies of what the other brought first were measured,
    // this rule's own (a rule added just after another was removed starts
    // its race afresh): in a run shorter than the race's span (10 s), each
    // copy but a few at its edges (2 %) is a sample.
    let short = count < 9 * RATE_PPS;
    for i in r.red.inputs.iter().filter(|_| short) {
        let samples = line(i).lag_samples;
        assert!(
            samples <= i.duplicates && samples * 50 >= i.duplicates * 49,
            "{}: {} samples of {} copies behind the first: {:?}",
            c.wrap,
            samples,
            i.duplicates,
            r.red
        );
    }
    assert!(line(&r.red.inputs[1]).lag_samples > 0, "{}: {:?}", c.wrap, r.red);
}

#[test]
fn every_sequence_number_one_line_brought_goes_out_once_for_each_framing_on_the_ebpf_data_path() {
    every_framing_on("ebpf");
}

#[test]
fn every_sequence_number_one_line_brought_goes_out_once_for_each_framing_on_the_workers() {
    every_framing_on("packet");
}

/// Says what a run brought and how far line b was behind.
fn race_line(datapath: &str, c: &Case, r: &Run) {
    eprintln!(
        "{datapath} {}: {} unique, {} lost by both lines, line b behind by median {:.0} µs, p99 {:.0} µs \
         ({} samples)",
        c.wrap,
        r.got.report.streams[0].unique,
        r.red.lost / c.messages,
        line(&r.red.inputs[1]).lag_p50_us,
        line(&r.red.inputs[1]).lag_p99_us,
        line(&r.red.inputs[1]).lag_samples
    );
}

/// Each framing through the relay forwarding on `datapath`.
fn every_framing_on(datapath: &str) {
    let _lock = traffic_lock().expect("lock");
    let p = TwoPaths::new(&format!("arb-{datapath}")).expect("topology");
    let relay = Relay::start(&p.relay, &["--datapath", datapath]).expect("mcrd");
    let count = 2000;
    let pcap = PathBuf::from(format!("/tmp/{}-moldudp64.pcap", p.sink.name()));
    for c in &CASES {
        let keep = (c.wrap == "moldudp64").then_some(&pcap);
        let r = run(&p, &relay, c, count, &[], keep);
        assert_eq!(r.rule.datapath, datapath, "{}: {:?}", c.wrap, r.rule.datapath_reason);
        check_run(&r, c, count);
        race_line(datapath, c, &r);
    }
    // A rule that held its slot and arbitration entry for longer than the
    // race's span, removed, and one with the same framing added at once in
    // them: the new rule's race is its own (its baseline is not the old
    // rule's last samples, which would hide most of its copies).
    for count in [11 * RATE_PPS, count] {
        let c = &CASES[0];
        let r = run(&p, &relay, c, count, &[], None);
        check_run(&r, c, count);
        race_line(datapath, c, &r);
    }
    // Wireshark's MoldUDP64 dissector reads the output: every packet whole,
    // each sequence number once, exactly those one line brought.
    let c = &CASES[0];
    let frames = tshark::fields(
        &pcap,
        6001,
        "moldudp64",
        &[
            "moldudp64.session",
            "moldudp64.sequence",
            "moldudp64.count",
            "moldudp64.msgseq",
            "moldudp64.msglen.invalid",
        ],
    )
    .expect("tshark decodes the capture");
    let _ = std::fs::remove_file(&pcap);
    let both: BTreeSet<u64> = dropped(count, c.band_a)
        .intersection(&dropped(count, c.band_b))
        .copied()
        .collect();
    let mut sequences = Vec::new();
    for f in &frames {
        assert_eq!(f[0], "MCRFEED001", "{f:?}");
        let seq: u64 = f[1].parse().expect("a sequence number");
        assert_eq!(f[2], "3", "{f:?}");
        assert_eq!(f[3], format!("{},{},{}", seq, seq + 1, seq + 2), "{f:?}");
        assert!(
            f.get(4).is_none_or(String::is_empty),
            "tshark found an invalid message: {f:?}"
        );
        sequences.push(seq);
    }
    let want: Vec<u64> = (0..count).filter(|q| !both.contains(q)).map(|q| 1 + 3 * q).collect();
    let mut got = sequences.clone();
    got.sort_unstable();
    assert_eq!(got, want, "tshark: each sequence number one line brought, once");
    relay.stop().expect("stopped");
}

/// Sends `datagrams` from namespace `ns` (the generator's), each to line a
/// (239.1.1.1:5001 on veth0) or b (239.2.1.1:5001 on veth2), `gap` apart.
fn send_crafted(ns: String, datagrams: Vec<(bool, Vec<u8>)>, gap: Duration) {
    std::thread::spawn(move || {
        mcr_sys::netns::enter(&ns).expect("enter the generator's namespace");
        let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).expect("socket");
        s.set_multicast_ttl_v4(16).expect("ttl");
        for (b, d) in datagrams {
            let to = if b { "239.2.1.1:5001" } else { "239.1.1.1:5001" };
            s.send_to(&d, to).expect("sent");
            std::thread::sleep(gap);
        }
    })
    .join()
    .expect("crafted datagrams sent");
}

/// A MoldUDP64 header: `session`, `seq`, `count` (no messages).
fn mold_header(session: &[u8; 10], seq: u64, count: u16) -> Vec<u8> {
    let mut d = session.to_vec();
    d.extend_from_slice(&seq.to_be_bytes());
    d.extend_from_slice(&count.to_be_bytes());
    d
}

#[test]
fn heartbeats_sessions_resets_and_malformed_packets_mid_stream() {
    let _lock = traffic_lock().expect("lock");
    let p = TwoPaths::new("arb-events").expect("topology");
    for (group, dev) in [
        ("239.1.1.1/32", TwoPaths::GEN_A_IF),
        ("239.2.1.1/32", TwoPaths::GEN_B_IF),
    ] {
        p.generator.route(&[group, "dev", dev]).expect("route");
    }
    let relay = Relay::start(&p.relay, &[]).expect("mcrd");
    let count = 6000;
    let c = Case {
        wrap: "moldudp64",
        extra: &["--messages", "2", "--new-session-at", "4500"],
        messages: 2,
        band_a: (0.0, 0.01),
        band_b: (0.01, 0.02),
        skew: "2ms",
    };
    let pcap = PathBuf::from(format!("/tmp/{}-events.pcap", p.sink.name()));
    // Mid-stream, on top of the feed: three heartbeats on each line (one
    // of each pair goes out), two packets too short for MoldUDP64 and one
    // of another session on line a.
    let crafted = {
        let generator = p.generator.name().to_string();
        let relay_ns = p.relay.name().to_string();
        std::thread::spawn(move || {
            // Wait until the feed flows: 300 packets of it have reached
            // the relay on line a (the stream lasts 3 s, its first session
            // 2.25 s).
            let arrived = || {
                std::process::Command::new("ip")
                    .args([
                        "netns",
                        "exec",
                        &relay_ns,
                        "cat",
                        "/sys/class/net/in0/statistics/rx_packets",
                    ])
                    .output()
                    .ok()
                    .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse::<u64>().ok())
                    .unwrap_or(0)
            };
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            while arrived() < 300 && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let hb = mold_header(b"MCRFEED001", 1, 0);
            let mut bogus = mold_header(b"BOGUS00000", 90_000, 1);
            bogus.extend_from_slice(&[0, 1, b'X']);
            let odd = [
                b"short".to_vec(),
                mold_header(b"MCRFEED001", 7, 1)[..19].to_vec(),
                bogus,
            ];
            // 200 ms apart: each pair's copy 200 ms after the first (a
            // copy), the next pair 600 ms after the one before.
            let mut d = Vec::new();
            for x in odd {
                d.push((false, hb.clone()));
                d.push((true, hb.clone()));
                d.push((false, x));
            }
            send_crafted(generator, d, Duration::from_millis(200));
        })
    };
    let r = run(&p, &relay, &c, count, &[], Some(&pcap));
    crafted.join().expect("crafted");
    let s = &r.got.report.streams[0];
    assert_eq!((s.unique, s.duplicated, s.corrupted), (count, 0, 0), "{s:?}");
    assert_eq!(r.red.lost, 0);
    let (la, lb) = (line(&r.red.inputs[0]), line(&r.red.inputs[1]));
    assert_eq!(
        (la.heartbeats, la.malformed, la.wrong_session, la.resets),
        (3, 2, 1, 1),
        "{la:?}"
    );
    assert_eq!(
        (lb.heartbeats, lb.malformed, lb.wrong_session, lb.resets),
        (3, 0, 0, 1),
        "{lb:?}"
    );
    // tshark: the first session numbered 1, 3, 5 ... for 4,500 packets,
    // then the second from 1; each once; three heartbeats between.
    let frames = tshark::fields(
        &pcap,
        6001,
        "moldudp64",
        &["moldudp64.session", "moldudp64.sequence", "moldudp64.count"],
    )
    .expect("tshark decodes the capture");
    let _ = std::fs::remove_file(&pcap);
    let mut sessions: [Vec<u64>; 2] = [Vec::new(), Vec::new()];
    let mut heartbeats = 0;
    for f in &frames {
        let seq: u64 = f[1].parse().expect("sequence");
        if f[2] == "0" {
            heartbeats += 1;
            continue;
        }
        let k = match f[0].as_str() {
            "MCRFEED001" => 0,
            "MCRFEED002" => 1,
            other => panic!("a packet of session {other} went out: {f:?}"),
        };
        sessions[k].push(seq);
    }
    assert_eq!(heartbeats, 3, "one heartbeat of each pair");
    for s in &mut sessions {
        s.sort_unstable();
    }
    assert_eq!(sessions[0], (0..4500).map(|q| 1 + 2 * q).collect::<Vec<u64>>());
    assert_eq!(sessions[1], (0..1500).map(|q| 1 + 2 * q).collect::<Vec<u64>>());

    // CME's weekly reset: MDP 3.0 back to 1 after 1,000 packets.
    let c = Case {
        wrap: "mdp3",
        extra: &["--reset-at", "1000"],
        messages: 1,
        band_a: (0.0, 0.03),
        band_b: (0.02, 0.05),
        skew: "2ms",
    };
    let r = run(&p, &relay, &c, 2000, &[], None);
    let s = &r.got.report.streams[0];
    let both = dropped(2000, c.band_a).intersection(&dropped(2000, c.band_b)).count() as u64;
    assert_eq!((s.unique, s.duplicated, s.corrupted), (2000 - both, 0, 0), "{s:?}");
    for i in &r.red.inputs {
        assert_eq!((line(i).resets, i.strays, i.too_late), (1, 0, 0), "{i:?}");
    }
    relay.stop().expect("stopped");
}
