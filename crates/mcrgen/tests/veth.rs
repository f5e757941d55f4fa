//! `mcrgen send` and `recv` across a veth pair in namespaces: every packet
//! accounted for, and every kind of fault, injected by `mcrgen impair` (this
//! kernel has no netem), counted exactly.

use std::time::Duration;

use mcr_testbed::presets::{Chain, Pipeline};
use mcr_testbed::traffic::{Impairer, Mcrgen, Received, Receiver, send};
use mcr_testbed::traffic_lock;
use mcrgen::impair::ImpairReport;
use mcrgen::report::SendReport;

const MINUTE: Duration = Duration::from_secs(60);

/// gen (veth0, 10.0.0.1) ↔ (veth1, 10.0.0.2) sink.
fn link(tag: &str) -> Pipeline {
    Pipeline::new(tag, 0).expect("test bed")
}

fn run(p: &Pipeline, recv_args: &[&str], send_args: &[&str]) -> (Received, SendReport) {
    let rx = Receiver::start(&p.sink, recv_args).expect("receiver ready");
    let sent = send(&p.generator, send_args, MINUTE).expect("sender ran");
    let got = rx.finish(MINUTE).expect("receiver finished");
    (got, sent)
}

#[test]
fn fifty_streams_cross_a_veth_with_every_packet_accounted_for() {
    let _lock = traffic_lock().expect("lock");
    let p = link("fifty-streams");
    let streams = "239.1.1.1+50:5001+";
    let (got, sent) = run(
        &p,
        &["-s", streams, "-i", "veth1", "--expect", "2000"],
        &["-s", streams, "-i", "veth0", "--count", "2000", "--rate", "20k"],
    );
    assert_eq!(sent.packets, 100_000);
    assert_eq!(sent.path, "frames");
    let r = &got.report;
    assert_eq!(got.code, Some(0), "problems: {:?}\n{}", r.problems, got.stderr);
    assert!(r.problems.is_empty());
    assert_eq!(r.streams.len(), 50);
    for (i, s) in r.streams.iter().enumerate() {
        assert_eq!(s.stream_id, Some(i as u32));
        assert_eq!((s.received, s.unique, s.highest_seq), (2000, 2000, Some(1999)), "{s:?}");
        assert_eq!((s.lost, s.duplicated, s.reordered, s.too_late), (0, 0, 0, 0), "{s:?}");
        assert_eq!((s.corrupted, s.wrong_stream, s.unrecognized), (0, 0, 0), "{s:?}");
        assert_eq!(s.bytes, 2000 * 1024);
        let l = s.latency.expect("latency measured");
        assert!(
            l.min_ns <= l.p50_ns && l.p50_ns <= l.p99_ns && l.p99_ns <= l.max_ns,
            "{l:?}"
        );
    }
    assert_eq!(r.total.received, 100_000);
    assert_eq!((r.stray, r.socket_drops), (0, 0));
}

#[test]
fn the_udp_path_delivers_as_the_frames_path_does() {
    let _lock = traffic_lock().expect("lock");
    let p = link("udp-path");
    let streams = "239.1.1.1+5:5001+";
    let (got, sent) = run(
        &p,
        &["-s", streams, "-i", "veth1", "--expect", "1000"],
        &[
            "-s", streams, "-i", "veth0", "--count", "1000", "--rate", "10k", "--via", "udp", "--size", "64",
        ],
    );
    assert_eq!(sent.path, "udp");
    assert_eq!(got.code, Some(0), "{:?}", got.report.problems);
    assert_eq!(got.report.total.received, 5000);
}

#[test]
fn joins_beyond_the_per_socket_limit_are_spread_over_sockets() {
    let _lock = traffic_lock().expect("lock");
    let p = link("many-joins");
    assert_eq!(
        p.sink.sysctl_get("net.ipv4.igmp_max_memberships").expect("sysctl"),
        "20"
    );
    // 45 groups on one port: 20 + 20 + 5 joins.
    let streams = "239.2.0.1+45:5001";
    let rx = Mcrgen::streams(streams, "veth1")
        .expect(200)
        .recv(&p.sink)
        .expect("ready");
    // The joins are real: the kernel lists all 45 memberships on veth1
    // (/proc/net/igmp shows 239.2.0.N as the little-endian hex NN0002EF).
    let igmp = p.sink.exec("cat", ["/proc/net/igmp"]).expect("igmp");
    assert_eq!(igmp.matches("0002EF").count(), 45, "{igmp}");
    Mcrgen::streams(streams, "veth0")
        .count(200)
        .rate("9k")
        .send(&p.generator, MINUTE)
        .expect("sent");
    let got = rx.finish(MINUTE).expect("finished");
    assert_eq!(got.code, Some(0), "{:?}", got.report.problems);
    assert_eq!(got.report.sockets, 3);
    assert!(got.report.streams.iter().all(|s| s.unique == 200));
    assert_eq!(
        p.sink.sysctl_get("net.ipv4.igmp_max_memberships").expect("sysctl"),
        "20"
    );
}

#[test]
fn unicast_and_ipv6_destinations() {
    let _lock = traffic_lock().expect("lock");
    let p = link("unicast-v6");
    let (got, sent) = run(
        &p,
        &["-s", "10.0.0.2:7000+3", "-i", "veth1", "--expect", "500"],
        &["-s", "10.0.0.2:7000+3", "-i", "veth0", "--count", "500", "--rate", "5k"],
    );
    assert_eq!(sent.path, "udp", "a unicast destination goes through the kernel");
    assert_eq!(got.code, Some(0), "{:?}", got.report.problems);

    p.generator
        .ip(&["-6", "addr", "add", "fd00::1/64", "dev", "veth0", "nodad"])
        .expect("v6 addr");
    p.sink
        .ip(&["-6", "addr", "add", "fd00::2/64", "dev", "veth1", "nodad"])
        .expect("v6 addr");
    let v6 = "[ff3e::1:1]+4:6001+";
    let (got, sent) = run(
        &p,
        &["-s", v6, "-i", "veth1", "--expect", "500"],
        &["-s", v6, "-i", "veth0", "--count", "500", "--rate", "5k"],
    );
    assert_eq!(sent.path, "udp");
    assert_eq!(got.code, Some(0), "{:?}", got.report.problems);
    assert_eq!(got.report.total.received, 2000);
}

/// Sends 3 streams × 2000 packets at 6000 pps through `mcrgen impair ARGS`
/// in the middle of a chain; returns what the receiver saw and what the
/// impairer did.
fn through_impair(tag: &str, faults: &[&str]) -> (Received, ImpairReport) {
    through_impair_wrapped(tag, faults, "plain")
}

/// As [`through_impair`], the test payload carried as `wrap` says.
fn through_impair_wrapped(tag: &str, faults: &[&str], wrap: &str) -> (Received, ImpairReport) {
    let c = Chain::new(tag).expect("chain");
    let mut args = vec!["--in", Chain::RELAY_IN_IF, "--out", Chain::RELAY_OUT_IF, "--seed", "42"];
    args.extend_from_slice(faults);
    let imp = Impairer::start(&c.relay, &args).expect("impairer ready");
    let streams = "239.3.1.1+3:5001+";
    let rx = Mcrgen::streams(streams, Chain::SINK_IF)
        .expect(2000)
        .arg("--idle-timeout")
        .arg("1s")
        .wrap(wrap)
        .recv(&c.sink)
        .expect("receiver ready");
    let sent = Mcrgen::streams(streams, Chain::GEN_IF)
        .count(2000)
        .rate("6000")
        .wrap(wrap)
        .send(&c.generator, MINUTE)
        .expect("sender ran");
    assert_eq!(sent.packets, 6000);
    let got = rx.finish(MINUTE).expect("receiver finished");
    let did = imp.stop().expect("impairer report");
    assert_eq!(did.test_packets, 6000, "{did:?}");
    assert_eq!(did.send_errors, 0);
    assert_eq!(got.code, Some(1), "--expect must fail: {:?}", got.report.problems);
    (got, did)
}

#[test]
fn loss_is_detected_and_counted_exactly() {
    let _lock = traffic_lock().expect("lock");
    let (got, did) = through_impair("impair-loss", &["--loss", "5%"]);
    let t = &got.report.total;
    assert!(did.dropped > 0);
    assert_eq!(t.lost, did.dropped);
    assert_eq!(t.unique + t.lost, 6000);
    assert_eq!((t.duplicated, t.reordered, t.corrupted), (0, 0, 0));
    assert!(
        got.report.problems.iter().any(|p| p.contains("lost")),
        "{:?}",
        got.report.problems
    );
}

#[test]
fn rtp_and_mpeg_ts_cross_clean_and_every_packet_is_checked() {
    let _lock = traffic_lock().expect("lock");
    let p = link("wrap-clean");
    for (wrap, bytes) in [("rtp", 1024), ("ts", 1316), ("rtp-ts", 1328)] {
        let streams = "239.1.2.1+3:5001+";
        let (got, sent) = run(
            &p,
            &["-s", streams, "-i", "veth1", "--expect", "2000", "--wrap", wrap],
            &[
                "-s", streams, "-i", "veth0", "--count", "2000", "--rate", "6000", "--wrap", wrap,
            ],
        );
        assert_eq!(sent.packets, 6000);
        let r = &got.report;
        assert_eq!(got.code, Some(0), "{wrap}: {:?}\n{}", r.problems, got.stderr);
        for s in &r.streams {
            assert_eq!(
                (s.received, s.unique, s.lost, s.corrupted),
                (2000, 2000, 0, 0),
                "{wrap}: {s:?}"
            );
            assert_eq!(s.bytes, 2000 * bytes, "{wrap}");
            let h = s.health.expect("health with a wrapping");
            if let Some(rtp) = h.rtp {
                assert_eq!(
                    (rtp.packets, rtp.lost, rtp.duplicates, rtp.late, rtp.restarts),
                    (2000, 0, 0, 0, 0)
                );
            }
            if let Some(ts) = h.ts {
                assert_eq!(ts.packets, 2000 * 7, "{wrap}");
                assert_eq!(
                    (ts.continuity_errors, ts.sync_byte_errors, ts.pat_errors),
                    (0, 0, 0),
                    "{wrap}"
                );
            }
            assert_eq!(
                (h.rtp.is_some(), h.ts.is_some()),
                (wrap.contains("rtp"), wrap.contains("ts"))
            );
        }
    }
}

#[test]
fn a_size_that_mpeg_ts_cannot_have_is_refused_with_the_size_it_has() {
    let mcrgen = mcr_testbed::bin("mcrgen").expect("mcrgen built");
    let out = std::process::Command::new(mcrgen)
        .args([
            "send",
            "-s",
            "239.1.1.1:5001",
            "--wrap",
            "rtp-ts",
            "--size",
            "500",
            "--count",
            "1",
        ])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--size 500 with --wrap rtp-ts") && err.contains("1328 bytes"),
        "{err}"
    );
}

#[test]
fn a_copy_goes_to_a_second_group_later_and_byte_for_byte() {
    let _lock = traffic_lock().expect("lock");
    let p = link("copy");
    let all = "239.1.3.1:5001,239.1.3.2:5002,239.1.4.1:6001,239.1.4.2:6002";
    let (got, sent) = run(
        &p,
        &[
            "-s", all, "-i", "veth1", "--expect", "1000", "--ids", "any", "--wrap", "rtp-ts",
        ],
        &[
            "-s",
            "239.1.3.1+2:5001+",
            "--copy",
            "239.1.4.1+2:6001+",
            "--copy-delay",
            "20ms",
            "-i",
            "veth0",
            "--count",
            "1000",
            "--rate",
            "2000",
            "--wrap",
            "rtp-ts",
        ],
    );
    assert_eq!((sent.packets, sent.copies), (2000, 2000));
    // No copy left before its delay (on the sender's own clock).
    let lag = sent.copy_lag_min_ns.expect("copies sent");
    assert!(lag >= 20_000_000, "a copy left {lag} ns after its original");
    let r = &got.report;
    assert_eq!(got.code, Some(0), "{:?}\n{}", r.problems, got.stderr);
    for (original, copy) in r.streams[..2].iter().zip(&r.streams[2..]) {
        assert_eq!(original.stream_id, copy.stream_id, "the copy carries the same stream");
        for s in [original, copy] {
            assert_eq!((s.received, s.unique, s.lost, s.corrupted), (1000, 1000, 0, 0), "{s:?}");
            let h = s.health.expect("health");
            assert_eq!(h.rtp.expect("rtp").lost, 0);
            assert_eq!(h.ts.expect("ts").continuity_errors, 0);
        }
    }
}

#[test]
fn loss_inside_rtp_and_mpeg_ts_is_seen_by_every_layer() {
    let _lock = traffic_lock().expect("lock");
    let (got, did) = through_impair_wrapped("impair-wrapped", &["--loss", "3%"], "rtp-ts");
    assert!(did.dropped > 0);
    assert_eq!(got.report.total.lost, did.dropped);
    for s in &got.report.streams {
        let h = s.health.expect("health");
        let (rtp, ts) = (h.rtp.expect("rtp"), h.ts.expect("ts"));
        // RTP counts exactly the datagrams lost between its first and
        // last; MPEG-TS sees each run of them as one jump of the counter
        // on PID 0 and one on the data PID. (Before the first packet and
        // after the last, neither layer can see a loss.)
        let leading = s.holes.first().filter(|h| h.0 == 0).map_or(0, |h| h.1);
        let trailing = 1999 - s.highest_seq.expect("packets arrived");
        assert_eq!(rtp.lost, s.lost - leading - trailing, "{s:?}");
        let runs = s.holes.len() as u64 - u64::from(leading > 0);
        assert_eq!(ts.continuity_errors, 2 * runs, "{s:?}");
        assert_eq!(ts.packets, 7 * s.received);
    }
    assert!(
        got.report
            .problems
            .iter()
            .any(|p| p.contains("MPEG-TS continuity errors")),
        "{:?}",
        got.report.problems
    );
}

#[test]
fn a_cut_path_loses_one_run_per_stream_and_a_delayed_one_nothing() {
    let _lock = traffic_lock().expect("lock");
    // 2000 pps a stream: a cut of 200 ms from 100 ms in takes one run of
    // about 400 out of each stream.
    let (got, did) = through_impair("impair-cut", &["--cut", "100ms+200ms"]);
    assert!(did.cut > 0);
    assert_eq!(got.report.total.lost, did.cut);
    for s in &got.report.streams {
        assert_eq!(s.holes.len(), 1, "one run lost: {s:?}");
        assert_eq!((s.duplicated, s.reordered, s.corrupted), (0, 0, 0));
    }
    let c = Chain::new("impair-delay").expect("chain");
    let imp = Impairer::start(
        &c.relay,
        &[
            "--in",
            Chain::RELAY_IN_IF,
            "--out",
            Chain::RELAY_OUT_IF,
            "--delay",
            "30ms",
        ],
    )
    .expect("impairer ready");
    let streams = "239.3.2.1+3:5001+";
    let rx = Mcrgen::streams(streams, Chain::SINK_IF)
        .expect(1000)
        .recv(&c.sink)
        .expect("receiver ready");
    Mcrgen::streams(streams, Chain::GEN_IF)
        .count(1000)
        .rate("3000")
        .send(&c.generator, MINUTE)
        .expect("sender ran");
    let got = rx.finish(MINUTE).expect("receiver finished");
    let did = imp.stop().expect("impairer report");
    assert_eq!(got.code, Some(0), "{:?}", got.report.problems);
    assert_eq!(did.delayed, 3000);
    // Nothing left the impairer before its delay was over.
    let least = did.delay_min_ns.expect("packets delayed");
    assert!(least >= 30_000_000, "a packet held only {least} ns");
}

#[test]
fn duplication_is_detected_and_counted_exactly() {
    let _lock = traffic_lock().expect("lock");
    let (got, did) = through_impair("impair-dup", &["--duplicate", "5%"]);
    let t = &got.report.total;
    assert!(did.duplicated > 0);
    assert_eq!(t.duplicated, did.duplicated);
    assert_eq!(t.received, 6000 + did.duplicated);
    assert_eq!((t.lost, t.reordered, t.corrupted), (0, 0, 0));
    assert!(
        got.report.problems.iter().any(|p| p.contains("duplicated")),
        "{:?}",
        got.report.problems
    );
}

#[test]
fn reordering_is_detected_and_counted_exactly() {
    let _lock = traffic_lock().expect("lock");
    let (got, did) = through_impair("impair-reorder", &["--reorder", "5%"]);
    let t = &got.report.total;
    assert!(did.reordered > 0);
    assert_eq!(t.reordered, did.reordered);
    assert_eq!((t.lost, t.duplicated, t.corrupted, t.unique), (0, 0, 0, 6000));
    assert!(
        got.report.problems.iter().any(|p| p.contains("reordered")),
        "{:?}",
        got.report.problems
    );
}

#[test]
fn corruption_is_detected_and_counted_exactly() {
    let _lock = traffic_lock().expect("lock");
    let (got, did) = through_impair("impair-corrupt", &["--corrupt", "5%"]);
    let t = &got.report.total;
    assert!(did.corrupted > 0);
    assert_eq!(t.corrupted, did.corrupted);
    assert_eq!((t.lost, t.duplicated, t.reordered, t.unique), (0, 0, 0, 6000));
    assert!(
        got.report.problems.iter().any(|p| p.contains("corrupted")),
        "{:?}",
        got.report.problems
    );
}

#[test]
fn all_faults_at_once_are_each_accounted_for() {
    let _lock = traffic_lock().expect("lock");
    let (got, did) = through_impair(
        "impair-all",
        &[
            "--loss",
            "2%",
            "--duplicate",
            "2%",
            "--reorder",
            "2%",
            "--corrupt",
            "2%",
        ],
    );
    let t = &got.report.total;
    assert_eq!(
        (t.lost, t.duplicated, t.reordered, t.corrupted),
        (did.dropped, did.duplicated, did.reordered, did.corrupted)
    );
}

#[test]
fn a_stream_that_falls_short_or_lands_in_the_wrong_place_fails_the_expectation() {
    let _lock = traffic_lock().expect("lock");
    let p = link("short-and-misdirected");
    let (got, _) = run(
        &p,
        &[
            "-s",
            "239.4.1.1+2:5001+",
            "-i",
            "veth1",
            "--expect",
            "1000",
            "--idle-timeout",
            "1s",
        ],
        &[
            "-s",
            "239.4.1.1+2:5001+",
            "-i",
            "veth0",
            "--count",
            "900",
            "--rate",
            "5k",
        ],
    );
    assert_eq!(got.code, Some(1));
    assert!(got.report.streams.iter().all(|s| s.lost == 100 && s.unique == 900));
    assert_eq!(got.report.stopped_by, "idle timeout");

    // The receiver expects ids 5 and 6 at these destinations; the sender
    // sends 0 and 1 there.
    let (got, _) = run(
        &p,
        &[
            "-s",
            "239.4.1.1+2:5001+",
            "-i",
            "veth1",
            "--ids",
            "5+",
            "--idle-timeout",
            "1s",
        ],
        &[
            "-s",
            "239.4.1.1+2:5001+",
            "-i",
            "veth0",
            "--count",
            "100",
            "--rate",
            "5k",
        ],
    );
    assert_eq!(got.report.total.wrong_stream, 200);
    assert!(got.report.problems.iter().any(|p| p.contains("another stream")));
}

#[test]
fn the_ring_receiver_checks_every_packet_and_every_checksum() {
    let _lock = traffic_lock().expect("lock");
    let p = link("recv-ring");
    let streams = "239.5.1.1+5:5001+";
    let (got, _) = run(
        &p,
        &["-s", streams, "-i", "veth1", "--via", "ring", "--expect", "4000"],
        &["-s", streams, "-i", "veth0", "--count", "4000", "--rate", "40k"],
    );
    assert_eq!(got.code, Some(0), "{:?}", got.report.problems);
    assert_eq!(got.report.total.received, 20_000);
    assert_eq!(got.report.bad_frames, 0);

    // A frame whose UDP checksum is wrong is named, not taken.
    let rx = Mcrgen::streams("239.5.1.1:5001", "veth1")
        .via("ring")
        .arg("--idle-timeout")
        .arg("1s")
        .recv(&p.sink)
        .expect("recv");
    let ns = p.generator.name().to_string();
    std::thread::spawn(move || {
        mcr_sys::netns::enter(&ns).expect("enter");
        let mut f = vec![0u8; mcr_core::wire::UDP_V4_HEADERS + 100];
        mcrgen::payload::fill(&mut f[mcr_core::wire::UDP_V4_HEADERS..], 0, 0, 1);
        let spec = mcr_core::wire::UdpFrameSpec {
            dst_mac: [1, 0, 0x5e, 5, 1, 1],
            src_mac: [2, 0, 0, 0, 0, 1],
            src: "10.0.0.1:4000".parse().expect("literal"),
            dst: "239.5.1.1:5001".parse().expect("literal"),
            ttl: 8,
            dscp: 0,
            ident: 0,
        };
        mcr_core::wire::write_udp_v4_frame(&mut f, &spec, 100).expect("fits");
        let n = f.len();
        f[n - 1] ^= 0xff;
        let tx = mcr_sys::packet::PacketTx::open(mcr_sys::iface::index("veth0").expect("veth0"), false).expect("tx");
        tx.send(&[&f], false).expect("send");
    })
    .join()
    .expect("sender");
    let got = rx.finish(MINUTE).expect("recv");
    assert_eq!(got.report.bad_frames, 1, "{:?}", got.report);
    assert!(
        got.report
            .problems
            .iter()
            .any(|p| p.contains("wrong IP or UDP checksum"))
    );
}
