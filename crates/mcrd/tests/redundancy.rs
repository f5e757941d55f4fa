//! A stream that comes on two paths (SMPTE ST 2022-7): the generator sends
//! each RTP packet on path a and, 20 ms later, the same packet on path b;
//! each path crosses an impairer that drops, cuts or passes it; the relay
//! merges the two (or fails over between them) into one output, whose
//! every packet the sink checks (sequence, payload, RTP).

use std::collections::BTreeSet;
use std::time::Duration;

use mcr_core::control::{RedundancyStats, RuleStats};
use mcr_testbed::presets::TwoPaths;
use mcr_testbed::relay::Relay;
use mcr_testbed::traffic::{Impairer, Mcrgen, Received};
use mcr_testbed::{Ns, traffic_lock};
use mcrgen::impair::{ImpairReport, in_band};

const MINUTES: Duration = Duration::from_secs(180);
const IN_A: &str = "in0:239.1.1.1:5001";
const IN_B: &str = "in1:239.2.1.1:5001";
const OUT: &str = "out0:239.10.1.1:6001";
/// The seed both impairers share, so that their loss bands agree on which
/// packets fall where.
const SEED: &str = "7";

/// Starts an impairer on each path that drops the test packets in its
/// loss band (`FROM-TO%`), both with [`SEED`].
fn lossy_paths(p: &TwoPaths, band_a: &str, band_b: &str) -> (Impairer, Impairer) {
    let start = |b: bool, band: &str| p.impair(b, &["--loss-band", band, "--seed", SEED]).expect("impairer");
    (start(false, band_a), start(true, band_b))
}

/// Starts the relay with rule `m` taking both paths in `mode`.
fn relay_with(p: &TwoPaths, mode: &str) -> Relay {
    relay_of(p, mode, &[])
}

/// [`relay_with`], with `args` for mcrd.
fn relay_of(p: &TwoPaths, mode: &str, args: &[&str]) -> Relay {
    let relay = Relay::start(&p.relay, args).expect("mcrd");
    relay
        .ctl_ok(&[
            "add", "m", "--input", IN_A, "--input", IN_B, "--mode", mode, "--output", OUT,
        ])
        .expect("rule added");
    relay
}

/// Sends `count` RTP packets at `rate` on path a and each again 20 ms
/// later on path b, while the sink expects them all at the output.
fn send_both_ways(p: &TwoPaths, count: u64, rate: &str, extra: &[&str]) -> Received {
    send_stream(p, 0, count, rate, extra)
}

/// [`send_both_ways`] for the stream of id `id` (its SSRC).
fn send_stream(p: &TwoPaths, id: u32, count: u64, rate: &str, extra: &[&str]) -> Received {
    send_between(&p.sink, &p.generator, id, count, rate, extra)
}

/// [`send_stream`] from the namespaces themselves (for another thread).
fn send_between(sink: &Ns, generator: &Ns, id: u32, count: u64, rate: &str, extra: &[&str]) -> Received {
    let rx = Mcrgen::streams("239.10.1.1:6001", TwoPaths::SINK_IF)
        .expect(count)
        .wrap("rtp")
        .ids(id)
        .arg("--idle-timeout")
        .arg("2s")
        .recv(sink)
        .expect("receiver ready");
    let mut send = Mcrgen::streams("239.1.1.1:5001", TwoPaths::GEN_A_IF)
        .arg("--first-id")
        .arg(id)
        .count(count)
        .rate(rate)
        .wrap("rtp")
        .arg("--copy")
        .arg("239.2.1.1:5001")
        .arg("--copy-delay")
        .arg("20ms")
        .arg("--copy-interface")
        .arg(TwoPaths::GEN_B_IF);
    for a in extra {
        send = send.arg(a);
    }
    let sent = send.send(generator, MINUTES).expect("sent");
    assert_eq!((sent.packets, sent.copies), (count, count));
    rx.finish(MINUTES).expect("receiver finished")
}

fn rule(relay: &Relay) -> (RuleStats, RedundancyStats) {
    let s = relay.stats().expect("stats");
    let r = s.rules.into_iter().find(|r| r.name == "m").expect("rule m");
    let red = r.redundancy.clone().expect("a rule with two inputs");
    (r, red)
}

/// What the relay counted agrees with what crossed each path: every
/// arrival on an input is either forwarded from it or a duplicate, and
/// what was forwarded is the rule's output.
fn counts_add_up(relay: &Relay, paths: [&ImpairReport; 2], forwarded: u64) -> RedundancyStats {
    let (r, red) = rule(relay);
    for (i, path) in red.inputs.iter().zip(paths) {
        let arrived = path.test_packets - path.band_dropped - path.cut - path.dropped;
        assert_eq!(
            i.packets, arrived,
            "{}: every packet the path let through arrived",
            i.input
        );
        assert_eq!(i.not_rtp + i.strays + i.too_late, 0, "{i:?}");
        assert_eq!(i.forwarded + i.duplicates, i.packets, "{i:?}");
    }
    assert_eq!(red.inputs.iter().map(|i| i.forwarded).sum::<u64>(), forwarded);
    assert_eq!(r.packets, forwarded, "the rule counts what it forwarded");
    assert_eq!(r.outputs[0].packets, forwarded);
    red
}

#[test]
fn a_merge_loses_nothing_when_the_paths_lose_different_packets() {
    let _lock = traffic_lock().expect("lock");
    let p = TwoPaths::new("merge-loss").expect("topology");
    let (a, b) = lossy_paths(&p, "0-1%", "1-2%");
    // Two workers: the fanout program brings both paths to the rule's one
    // worker.
    let relay = relay_of(&p, "merge", &["--workers", "2"]);
    let got = send_both_ways(&p, 6000, "1000", &[]);
    let (a, b) = (a.stop().expect("path a"), b.stop().expect("path b"));
    assert!(
        a.band_dropped > 20 && b.band_dropped > 20,
        "each path lost about 1%: {a:?} {b:?}"
    );
    let s = relay.stats().expect("stats");
    let w = rule(&relay).0.worker.expect("a merge has one worker");
    let arrived = 12_000 - a.band_dropped - b.band_dropped;
    let mut want = [0, 0];
    want[w] = arrived;
    assert_eq!(
        s.workers.iter().map(|w| w.rx_frames).collect::<Vec<_>>(),
        want,
        "every copy on worker {w}"
    );
    let s = &got.report.streams[0];
    assert_eq!(got.code, Some(0), "{:?}\n{}", got.report.problems, relay.log());
    assert_eq!(
        (s.received, s.unique, s.lost, s.duplicated, s.reordered, s.corrupted),
        (6000, 6000, 0, 0, 0, 0)
    );
    let rtp = s.health.expect("health").rtp.expect("rtp");
    assert_eq!((rtp.lost, rtp.duplicates), (0, 0));
    let red = counts_add_up(&relay, [&a, &b], 6000);
    assert_eq!(red.lost, 0);
    // Path b lags by 20 ms, so path a brings first all that it has.
    assert_eq!(red.inputs[0].forwarded, 6000 - a.band_dropped, "{red:?}");
    assert_eq!(red.inputs[1].forwarded, a.band_dropped, "{red:?}");
    let list = relay.ctl_ok(&["stats"]).expect("stats");
    assert!(
        list.contains("merge: 0 lost") && list.contains("<- in1:239.2.1.1:5001"),
        "{list}"
    );
    assert!(list.contains(&format!("(worker {w}: several inputs")), "{list}");
    relay.stop().expect("stopped");
}

/// Rules with several inputs spread over the workers: each rule on one
/// worker (it sees every copy of its stream there), the rules on both.
#[test]
fn merged_rules_spread_over_the_workers_each_whole_on_its_own() {
    const RULES: u32 = 6;
    let _lock = traffic_lock().expect("lock");
    let p = TwoPaths::new("merge-spread").expect("topology");
    let (a, b) = lossy_paths(&p, "0-2%", "2-4%");
    let relay = Relay::start(&p.relay, &["--workers", "2"]).expect("mcrd");
    for i in 1..=RULES {
        let (ia, ib, out) = (
            format!("in0:239.1.1.{i}:5001"),
            format!("in1:239.2.1.{i}:5001"),
            format!("out0:239.10.1.{i}:6001"),
        );
        let name = format!("m{i}");
        relay
            .ctl_ok(&[
                "add", &name, "--input", &ia, "--input", &ib, "--mode", "merge", "--output", &out,
            ])
            .expect("rule added");
    }
    let count = 2000;
    let rx = Mcrgen::streams(format!("239.10.1.1+{RULES}:6001"), TwoPaths::SINK_IF)
        .expect(count)
        .wrap("rtp")
        .arg("--idle-timeout")
        .arg("2s")
        .recv(&p.sink)
        .expect("receiver ready");
    let sent = Mcrgen::streams(format!("239.1.1.1+{RULES}:5001"), TwoPaths::GEN_A_IF)
        .count(count)
        .rate("3000")
        .wrap("rtp")
        .arg("--copy")
        .arg(format!("239.2.1.1+{RULES}:5001"))
        .arg("--copy-delay")
        .arg("10ms")
        .arg("--copy-interface")
        .arg(TwoPaths::GEN_B_IF)
        .send(&p.generator, MINUTES)
        .expect("sent");
    assert_eq!(
        (sent.packets, sent.copies),
        (count * u64::from(RULES), count * u64::from(RULES))
    );
    let got = rx.finish(MINUTES).expect("receiver finished");
    let (a, b) = (a.stop().expect("path a"), b.stop().expect("path b"));
    assert!(a.band_dropped > 0 && b.band_dropped > 0, "{a:?} {b:?}");
    // Every stream whole: what one path lost, the other brought.
    assert_eq!(got.code, Some(0), "{:?}\n{}", got.report.problems, relay.log());
    assert_eq!(got.report.streams.len(), RULES as usize);
    for st in &got.report.streams {
        assert_eq!(
            (
                st.received,
                st.unique,
                st.lost,
                st.duplicated,
                st.reordered,
                st.corrupted
            ),
            (count, count, 0, 0, 0, 0),
            "{st:?}"
        );
    }
    // Each rule's copies all on its worker; both workers carry some.
    let s = relay.stats().expect("stats");
    let mut per_worker = [0u64; 2];
    for r in &s.rules {
        let red = r.redundancy.as_ref().expect("two inputs");
        let w = r.worker.expect("one worker per rule");
        per_worker[w] += red.inputs.iter().map(|i| i.packets).sum::<u64>();
        assert_eq!(r.outputs[0].packets, count, "{r:?}");
        assert_eq!(red.lost, 0, "{red:?}");
    }
    assert_eq!(
        s.workers.iter().map(|w| w.rx_frames).collect::<Vec<_>>(),
        per_worker,
        "each worker took exactly the copies of its rules"
    );
    assert!(
        per_worker.iter().all(|&n| n > 0),
        "both workers carry merges: {per_worker:?}"
    );
    relay.stop().expect("stopped");
}

#[test]
fn a_packet_both_paths_lose_is_lost_once_and_counted() {
    let _lock = traffic_lock().expect("lock");
    let p = TwoPaths::new("merge-both").expect("topology");
    let (a, b) = lossy_paths(&p, "0-2%", "1-3%");
    let relay = relay_with(&p, "merge");
    let count = 6000;
    let got = send_both_ways(&p, count, "1000", &[]);
    let (a, b) = (a.stop().expect("path a"), b.stop().expect("path b"));
    let s = &got.report.streams[0];
    let stream = s.stream_id.expect("a stream id");
    // What both bands drop: 1-2%, worked out from the same hash.
    let seed: u64 = SEED.parse().expect("seed");
    let both: BTreeSet<u64> = (0..count).filter(|&q| in_band(seed, stream, q, (0.01, 0.02))).collect();
    assert!(!both.is_empty());
    let holes: BTreeSet<u64> = s.holes.iter().flat_map(|&(first, n)| first..first + n).collect();
    // A hole after the last packet is not one the receiver can see.
    let seen: BTreeSet<u64> = both
        .iter()
        .copied()
        .filter(|&q| q < s.highest_seq.expect("some"))
        .collect();
    assert_eq!(holes, seen, "exactly the packets both paths lost are missing");
    assert_eq!((s.duplicated, s.reordered, s.corrupted), (0, 0, 0));
    assert_eq!(s.unique, count - both.len() as u64);
    let red = counts_add_up(&relay, [&a, &b], count - both.len() as u64);
    assert_eq!(red.lost, seen.len() as u64, "each counted lost once");
    relay.stop().expect("stopped");
}

#[test]
fn a_merge_loses_nothing_while_one_path_is_cut_for_five_seconds() {
    let _lock = traffic_lock().expect("lock");
    let p = TwoPaths::new("merge-cut").expect("topology");
    let a = p.impair(false, &["--cut", "1s+5s"]).expect("path a");
    let b = p.impair(true, &[]).expect("path b");
    let relay = relay_with(&p, "merge");
    let got = send_both_ways(&p, 8000, "1000", &[]);
    let (a, b) = (a.stop().expect("path a"), b.stop().expect("path b"));
    assert!(a.cut >= 4500, "path a was cut for about 5 s: {a:?}");
    let s = &got.report.streams[0];
    assert_eq!(got.code, Some(0), "{:?}\n{}", got.report.problems, relay.log());
    assert_eq!((s.unique, s.lost, s.duplicated, s.reordered), (8000, 0, 0, 0));
    let red = counts_add_up(&relay, [&a, &b], 8000);
    assert_eq!(red.lost, 0);
    assert_eq!(red.inputs[1].forwarded, a.cut, "path b covered exactly the cut");
    relay.stop().expect("stopped");
}

#[test]
fn a_merge_follows_the_rtp_sequence_number_across_its_wrap() {
    let _lock = traffic_lock().expect("lock");
    let p = TwoPaths::new("merge-wrap").expect("topology");
    let (a, b) = lossy_paths(&p, "0-1%", "1-2%");
    let relay = relay_with(&p, "merge");
    // 65000 + 3000 wraps after the 536th packet.
    let got = send_both_ways(&p, 3000, "1000", &["--rtp-seq-start", "65000"]);
    let (a, b) = (a.stop().expect("path a"), b.stop().expect("path b"));
    let s = &got.report.streams[0];
    assert_eq!(got.code, Some(0), "{:?}\n{}", got.report.problems, relay.log());
    assert_eq!((s.unique, s.lost, s.duplicated, s.reordered), (3000, 0, 0, 0));
    let rtp = s.health.expect("health").rtp.expect("rtp");
    assert_eq!((rtp.lost, rtp.duplicates, rtp.restarts), (0, 0, 0), "{rtp:?}");
    let red = counts_add_up(&relay, [&a, &b], 3000);
    assert_eq!(red.lost, 0);
    relay.stop().expect("stopped");
}

#[test]
fn a_merge_follows_a_sender_that_restarts_with_a_new_ssrc_and_sequence() {
    let _lock = traffic_lock().expect("lock");
    let p = TwoPaths::new("merge-restart").expect("topology");
    let (a, b) = lossy_paths(&p, "0-1%", "1-2%");
    let relay = relay_with(&p, "merge");
    let first = send_stream(&p, 1, 2000, "1000", &["--rtp-seq-start", "30000"]);
    // The encoder restarts: another SSRC, its sequence from 0.
    let second = send_stream(&p, 2, 2000, "1000", &[]);
    let (a, b) = (a.stop().expect("path a"), b.stop().expect("path b"));
    for got in [&first, &second] {
        let s = &got.report.streams[0];
        assert_eq!(got.code, Some(0), "{:?}\n{}", got.report.problems, relay.log());
        assert_eq!((s.unique, s.lost, s.duplicated, s.reordered), (2000, 0, 0, 0), "{s:?}");
    }
    let red = counts_add_up(&relay, [&a, &b], 4000);
    assert_eq!(red.lost, 0);
    relay.stop().expect("stopped");
}

/// The one run of packets the sink missed, and checks the rest came once
/// and in order.
fn one_hole(got: &Received) -> (u64, u64) {
    let s = &got.report.streams[0];
    assert_eq!(
        (s.duplicated, s.reordered, s.corrupted, s.wrong_stream),
        (0, 0, 0, 0),
        "{s:?}"
    );
    assert_eq!(s.holes.len(), 1, "one interruption: {:?}", s.holes);
    s.holes[0]
}

#[test]
fn a_failover_takes_the_backup_when_the_primary_stops() {
    let _lock = traffic_lock().expect("lock");
    let p = TwoPaths::new("fail-stop").expect("topology");
    let a = p.impair(false, &["--cut", "2s+60s"]).expect("path a");
    let b = p.impair(true, &[]).expect("path b");
    let relay = relay_with(&p, "failover");
    let count = 5000;
    let got = send_both_ways(&p, count, "1000", &[]);
    let (a, b) = (a.stop().expect("path a"), b.stop().expect("path b"));
    let (from, missed) = one_hole(&got);
    // The primary carried everything before its cut; the output lost
    // only what fell in the loss-of-signal time, then came from the
    // backup to the end.
    let before_cut = a.test_packets - a.cut;
    assert_eq!(from, before_cut, "the hole starts where path a was cut");
    assert_eq!(got.report.streams[0].highest_seq, Some(count - 1));
    let (_, red) = rule(&relay);
    assert_eq!((red.switches, red.active), (1, Some(2)), "{red:?}");
    assert_eq!(red.inputs[0].forwarded, before_cut);
    assert_eq!(red.inputs[1].forwarded, count - before_cut - missed);
    assert_eq!(red.inputs[1].packets, b.test_packets);
    assert!(
        relay.log().contains("input 1 -> input 2 (loss of signal)"),
        "{}",
        relay.log()
    );
    // At 1000 packets/s, a packet a millisecond; path b is 20 ms behind.
    eprintln!(
        "failover: {missed} packets missed, the output interrupted about {} ms (loss of signal 200 ms)",
        missed + 20
    );
    relay.stop().expect("stopped");
}

#[test]
fn a_failover_takes_the_primary_back_only_after_the_hold_time() {
    let _lock = traffic_lock().expect("lock");
    let p = TwoPaths::new("fail-back").expect("topology");
    let a = p.impair(false, &["--cut", "1s+1s"]).expect("path a");
    let b = p.impair(true, &[]).expect("path b");
    let relay = relay_with(&p, "failover,hold=2s");
    let count = 7000;
    let got = send_both_ways(&p, count, "1000", &[]);
    let a = a.stop().expect("path a");
    b.stop().expect("path b");
    let s = &got.report.streams[0];
    assert_eq!((s.duplicated, s.reordered, s.corrupted), (0, 0, 0), "{s:?}");
    // The loss of signal, then (path a being 20 ms ahead of b) the
    // packets by which the primary leads when it is taken back.
    assert!(
        !s.holes.is_empty() && s.holes.len() <= 2,
        "the cut and the switch back: {:?}",
        s.holes
    );
    assert!(a.cut > 500, "path a was cut for about 1 s: {a:?}");
    let (_, red) = rule(&relay);
    assert_eq!((red.switches, red.active), (2, Some(1)), "{red:?}");
    let log = relay.log();
    assert!(log.contains("input 1 -> input 2 (loss of signal)"), "{log}");
    assert!(
        log.contains("input 2 -> input 1 (the primary was healthy for the hold time)"),
        "{log}"
    );
    assert_eq!(red.inputs[0].forwarded + red.inputs[1].forwarded, s.unique);
    relay.stop().expect("stopped");
}

#[test]
fn a_primary_that_comes_and_goes_does_not_make_the_output_flap() {
    let _lock = traffic_lock().expect("lock");
    let p = TwoPaths::new("fail-flap").expect("topology");
    // 100 ms off every 200 ms, from 1 s to 5 s.
    let cuts: Vec<String> = (0..20).map(|k| format!("{}ms+100ms", 1000 + 200 * k)).collect();
    let mut faults: Vec<&str> = Vec::new();
    for c in &cuts {
        faults.extend(["--cut", c.as_str()]);
    }
    let a = p.impair(false, &faults).expect("path a");
    let b = p.impair(true, &[]).expect("path b");
    // RTP gaps past 20 in a second make an input unhealthy.
    let relay = relay_with(&p, "failover,errors=20,hold=3s");
    let count = 7000;
    let got = send_both_ways(&p, count, "1000", &[]);
    let a = a.stop().expect("path a");
    b.stop().expect("path b");
    assert!(a.cut > 1500, "path a came and went: {a:?}");
    // One switch, to the backup, at the first gap; the primary is never
    // healthy for the hold time while it flaps, and the stream ends
    // before 3 s after the flapping.
    let (from, _) = one_hole(&got);
    assert!((900..=1100).contains(&from), "the first cut, about 1 s in: {from}");
    let (_, red) = rule(&relay);
    assert_eq!((red.switches, red.active), (1, Some(2)), "{red:?}");
    assert!(
        relay.log().contains("input 1 -> input 2 (RTP gaps past the threshold)"),
        "{}",
        relay.log()
    );
    relay.stop().expect("stopped");
}

#[test]
fn an_operator_holds_a_failover_to_an_input_and_gives_the_choice_back() {
    let _lock = traffic_lock().expect("lock");
    let p = TwoPaths::new("fail-force").expect("topology");
    let a = p.impair(false, &[]).expect("path a");
    let b = p.impair(true, &[]).expect("path b");
    let relay = relay_with(&p, "failover");
    let refused = relay.ctl(&["switch", "m", "3"]).expect("mcrctl");
    assert_eq!(refused.code, Some(1));
    assert!(
        refused.stderr.contains("rule `m` has no input `3`") && refused.stderr.contains("2 = in1:239.2.1.1:5001"),
        "{refused:?}"
    );
    let held = relay.ctl_ok(&["switch", "m", IN_B]).expect("switch");
    assert!(held.contains("held to input 2 (in1:239.2.1.1:5001)"), "{held}");
    // Path b lags by 20 ms: what it repeats after the switch is held
    // back, so nothing arrives twice and nothing is lost.
    let count = 3000;
    let got = send_both_ways(&p, count, "1000", &[]);
    let s = &got.report.streams[0];
    assert_eq!(got.code, Some(0), "{:?}\n{}", got.report.problems, relay.log());
    assert_eq!((s.unique, s.lost, s.duplicated, s.reordered), (count, 0, 0, 0));
    let (_, red) = rule(&relay);
    assert_eq!((red.active, red.forced), (Some(2), Some(2)), "{red:?}");
    assert_eq!(red.inputs[1].forwarded, count);
    let stats = relay.ctl_ok(&["stats"]).expect("stats");
    assert!(stats.contains("held to input 2 by mcrctl switch"), "{stats}");
    let metrics = relay.ctl_ok(&["--json", "stats"]).expect("stats");
    assert!(metrics.contains("\"forced\":2"), "{metrics}");
    relay.ctl_ok(&["switch", "m", "auto"]).expect("auto");
    let (_, red) = rule(&relay);
    assert_eq!(red.forced, None);
    a.stop().expect("path a");
    b.stop().expect("path b");
    relay.stop().expect("stopped");
}

#[test]
fn a_reload_that_changes_one_input_of_a_merge_does_not_disturb_its_stream() {
    let _lock = traffic_lock().expect("lock");
    let p = TwoPaths::new("merge-reload").expect("topology");
    let dir = mcr_testbed::TempDir::new("merge-reload").expect("temp dir");
    let file = |second: &str| {
        format!(
            "{}[[rule]]\nname = \"m\"\ninputs = [\"{IN_A}\", \"{second}\"]\nmode = \"merge\"\noutputs = [\"{OUT}\"]\n",
            mcr_testbed::config_file::HEAD
        )
    };
    let path = dir.file("mcrd.toml", &file(IN_B)).expect("write file");
    let path_s = path.to_str().expect("utf-8 path");
    let a = p.impair(false, &[]).expect("path a");
    let b = p
        .impair(true, &["--loss-band", "0-1%", "--seed", SEED])
        .expect("path b");
    let relay = Relay::start(&p.relay, &["--config", path_s]).expect("mcrd");
    let count = 6000;
    let sender = {
        let (sink, generator) = (p.sink.clone(), p.generator.clone());
        std::thread::spawn(move || send_between(&sink, &generator, 0, count, "1000", &[]))
    };
    // While the stream flows: the second input moves to a group nobody
    // sends, then back.
    std::thread::sleep(Duration::from_secs(2));
    for second in ["in1:239.2.1.99:5001", IN_B] {
        std::fs::write(&path, file(second)).expect("write");
        let reply = relay.ask(&["reload"]).expect("reload");
        assert!(
            matches!(&reply, mcr_core::control::Reply::Reloaded { changed, applied: true, .. } if changed == &["m"]),
            "{reply:?}"
        );
        std::thread::sleep(Duration::from_millis(1500));
    }
    let got = sender.join().expect("sender");
    a.stop().expect("path a");
    b.stop().expect("path b");
    let s = &got.report.streams[0];
    assert_eq!(got.code, Some(0), "{:?}\n{}", got.report.problems, relay.log());
    assert_eq!((s.unique, s.lost, s.duplicated, s.reordered), (count, 0, 0, 0));
    let (r, red) = rule(&relay);
    assert_eq!(red.lost, 0);
    assert_eq!(r.packets, count, "the rule kept its counters through both reloads");
    relay.stop().expect("stopped");
}

/// The merge's output loss against each path's, for independent random
/// loss on both paths (each path drops the packets its own seed puts in
/// the band `0-X%`): the output misses exactly the packets both paths
/// lost, about X² of them. Prints the table (`--no-capture`).
#[test]
fn a_merges_output_loses_exactly_what_both_paths_lose() {
    let _lock = traffic_lock().expect("lock");
    let p = TwoPaths::new("merge-table").expect("topology");
    let relay = relay_with(&p, "merge");
    let count = 5000;
    let (seed_a, seed_b) = (7u64, 1_000_003u64);
    let mut table =
        vec!["| loss on each path | path a lost | path b lost | both lost (X² expected) | output lost |".to_string()];
    table.push("|---|---|---|---|---|".into());
    for (row, pct) in [1u32, 5, 10, 20, 30].into_iter().enumerate() {
        let band = format!("0-{pct}%");
        let start = |b: bool, seed: u64| {
            p.impair(b, &["--loss-band", &band, "--seed", &seed.to_string()])
                .expect("impairer")
        };
        let (a, b) = (start(false, seed_a), start(true, seed_b));
        // A stream of its own for each row (a new SSRC: the merge starts
        // afresh).
        let got = send_stream(&p, 100 + row as u32, count, "2500", &[]);
        let (a, b) = (a.stop().expect("path a"), b.stop().expect("path b"));
        let s = &got.report.streams[0];
        let stream = s.stream_id.expect("a stream id");
        let frac = (0.0, f64::from(pct) / 100.0);
        let lost_on = |seed: u64| -> BTreeSet<u64> { (0..count).filter(|&q| in_band(seed, stream, q, frac)).collect() };
        let (on_a, on_b) = (lost_on(seed_a), lost_on(seed_b));
        assert_eq!((a.band_dropped, b.band_dropped), (on_a.len() as u64, on_b.len() as u64));
        let both: BTreeSet<u64> = on_a.intersection(&on_b).copied().collect();
        let holes: BTreeSet<u64> = s.holes.iter().flat_map(|&(first, n)| first..first + n).collect();
        let last = s.highest_seq.expect("some arrived");
        let seen: BTreeSet<u64> = both.iter().copied().filter(|&q| q < last).collect();
        assert_eq!(holes, seen, "{pct} %: exactly what both paths lost is missing");
        assert_eq!((s.duplicated, s.reordered, s.corrupted), (0, 0, 0));
        assert_eq!(s.unique, count - both.len() as u64);
        let share = |n: usize| format!("{:.2} %", 100.0 * n as f64 / count as f64);
        table.push(format!(
            "| {pct} % | {} | {} | {} ({:.2} %) | {} |",
            share(on_a.len()),
            share(on_b.len()),
            share(both.len()),
            f64::from(pct * pct) / 100.0,
            share((count - s.unique) as usize)
        ));
    }
    println!(
        "merge of {count} RTP packets per row, 2,500 a second, path b 20 ms behind:\n{}",
        table.join("\n")
    );
    relay.stop().expect("stopped");
}
