//! The health of every input, as the relay follows it while it forwards:
//! an MPEG-TS-in-RTP stream crosses an impairer (which drops datagrams and
//! breaks sync bytes, and counts what it did) and the relay; what the
//! relay reports for its input is checked against what the impairer did
//! and against what the sink, running the same checks on what the relay
//! sent, saw. Every packet is checked at the sink as always. Each test
//! runs on both data paths: the workers', and the eBPF program's (which
//! hands each datagram to worker 0 through its health ring).

use std::time::Duration;

use mcr_core::control::{InputHealthStats, RuleStats};
use mcr_sys::process::Signal;
use mcr_testbed::presets::TwoPaths;
use mcr_testbed::relay::Relay;
use mcr_testbed::traffic::{Mcrgen, Received};
use mcr_testbed::traffic_lock;

const MINUTES: Duration = Duration::from_secs(180);

/// The relay on data path `datapath` (`packet`: the workers'; `ebpf`),
/// with two workers and rule `feed` from path a to the sink.
fn relay(p: &TwoPaths, datapath: &str, extra: &[&str]) -> Relay {
    let relay = relay_of(p, &["--datapath", datapath, "--workers", "2"], extra);
    let s = relay.stats().expect("stats");
    assert_eq!(
        s.rules[0].datapath,
        if datapath == "packet" { "packet" } else { "ebpf" }
    );
    relay
}

/// mcrd with `args`, and rule `feed` added with `extra`.
fn relay_of(p: &TwoPaths, args: &[&str], extra: &[&str]) -> Relay {
    let relay = Relay::start(&p.relay, args).expect("mcrd");
    let mut add = vec![
        "add",
        "feed",
        "--input",
        "in0:239.1.1.1:5001",
        "--output",
        "out0:239.10.1.1:6001",
    ];
    add.extend_from_slice(extra);
    relay.ctl_ok(&add).expect("rule added");
    relay
}

/// Sends `count` MPEG-TS-in-RTP packets on path a while the sink checks
/// them.
fn send(p: &TwoPaths, count: u64) -> Received {
    let rx = Mcrgen::streams("239.10.1.1:6001", TwoPaths::SINK_IF)
        .expect(count)
        .wrap("rtp-ts")
        .arg("--idle-timeout")
        .arg("2s")
        .recv(&p.sink)
        .expect("receiver ready");
    let sent = Mcrgen::streams("239.1.1.1:5001", TwoPaths::GEN_A_IF)
        .count(count)
        .rate("2000")
        .wrap("rtp-ts")
        .send(&p.generator, MINUTES)
        .expect("sent");
    assert_eq!(sent.packets, count);
    rx.finish(MINUTES).expect("receiver finished")
}

fn feed(relay: &Relay) -> (RuleStats, InputHealthStats) {
    let s = relay.stats().expect("stats");
    let r = s.rules.into_iter().find(|r| r.name == "feed").expect("rule feed");
    assert_eq!(r.health.len(), 1, "{r:?}");
    let h = r.health[0].clone();
    (r, h)
}

/// The stream of rule `feed` has ended: a second and a half later its
/// input has no signal, and had one.
fn signal_goes(relay: &Relay) {
    std::thread::sleep(Duration::from_millis(1500));
    let (_, h) = feed(relay);
    assert!(!h.signal && h.since_last_ms.is_some_and(|ms| ms >= 1000), "{h:?}");
}

#[test]
fn a_clean_stream_shows_every_health_count_at_zero_and_its_signal_going() {
    clean_stream("packet");
}

#[test]
fn a_clean_stream_shows_every_health_count_at_zero_on_the_ebpf_path() {
    clean_stream("ebpf");
}

fn clean_stream(datapath: &str) {
    let _lock = traffic_lock().expect("lock");
    let p = TwoPaths::new(&format!("health-clean-{datapath}")).expect("topology");
    let a = p.impair(false, &[]).expect("path a");
    let relay = relay(&p, datapath, &[]);
    // A second rule whose health is not followed.
    relay
        .ctl_ok(&[
            "add",
            "quiet",
            "--input",
            "in0:239.1.1.2:5001",
            "--output",
            "out0:239.10.1.2:6001",
            "--no-health",
        ])
        .expect("rule added");
    let count = 8000;
    let got = send(&p, count);
    a.stop().expect("path a");
    let s = &got.report.streams[0];
    assert_eq!(got.code, Some(0), "{:?}\n{}", got.report.problems, relay.log());
    assert_eq!((s.unique, s.lost), (count, 0));
    let (r, h) = feed(&relay);
    assert_eq!(r.packets, count);
    assert_eq!((h.input.as_str(), h.carries.as_str()), ("in0:239.1.1.1:5001", "rtp-ts"));
    let rtp = h.rtp.expect("rtp");
    assert_eq!(
        (rtp.lost, rtp.late, rtp.duplicates, rtp.restarts),
        (0, 0, 0, 0),
        "{h:?}"
    );
    let ts = h.ts.expect("ts");
    assert_eq!(ts.packets, 7 * count, "every transport packet looked at");
    assert_eq!(
        (ts.sync_losses, ts.sync_byte_errors, ts.pat_errors, ts.continuity_errors),
        (0, 0, 0, 0),
        "{h:?}"
    );
    let text = relay.ctl_ok(&["stats"]).expect("stats");
    assert!(
        text.contains("health rtp-ts  rtp: lost 0, late 0, duplicates 0, restarts 0")
            && text.contains("ts: continuity 0, sync byte 0, sync loss 0, PAT 0 (56000 packets)")
            && text.contains("health: turned off (health = false)"),
        "{text}"
    );
    let list = relay.ctl_ok(&["list"]).expect("list");
    assert!(list.contains("health not followed (health = false)"), "{list}");
    // The stream has ended: its signal goes after a second.
    signal_goes(&relay);
    assert!(relay.ctl_ok(&["stats"]).expect("stats").contains("NO SIGNAL for"));
    relay.stop().expect("stopped");
}

#[test]
fn dropped_datagrams_and_broken_sync_bytes_are_counted_exactly() {
    faults("packet");
}

#[test]
fn dropped_datagrams_and_broken_sync_bytes_are_counted_exactly_on_the_ebpf_path() {
    faults("ebpf");
}

fn faults(datapath: &str) {
    let _lock = traffic_lock().expect("lock");
    let p = TwoPaths::new(&format!("health-faults-{datapath}")).expect("topology");
    let a = p
        .impair(
            false,
            &["--loss", "2%", "--sync-error", "1%", "--sync-loss", "1%", "--seed", "5"],
        )
        .expect("path a");
    let relay = relay(&p, datapath, &[]);
    let count = 8000;
    let got = send(&p, count);
    let a = a.stop().expect("path a");
    assert!(a.dropped > 50 && a.sync_errors > 20 && a.sync_losses > 20, "{a:?}");
    let s = &got.report.streams[0];
    // What the sink missed is what the impairer dropped (but any after the
    // last packet that arrived, which nobody can see missing).
    let trailing = count - 1 - s.highest_seq.expect("some arrived");
    assert_eq!(s.lost, a.dropped - trailing, "{s:?}");
    assert_eq!((s.duplicated, s.reordered, s.corrupted), (0, 0, 0));
    let sink = s.health.expect("health");
    let (sink_rtp, sink_ts) = (sink.rtp.expect("rtp"), sink.ts.expect("ts"));
    let (_, h) = feed(&relay);
    let (rtp, ts) = (h.rtp.expect("rtp"), h.ts.expect("ts"));
    // RTP: every dropped datagram is a sequence number missing, nothing
    // else.
    assert_eq!(rtp.lost, s.lost, "{h:?}");
    assert_eq!((rtp.late, rtp.duplicates, rtp.restarts), (0, 0, 0));
    assert_eq!(sink_rtp.lost, s.lost);
    // TS: each broken sync byte counted, each double one a sync loss; the
    // continuity errors (two per run of lost datagrams, and those the
    // broken packets cause) as the sink counts them on the same stream.
    assert_eq!(ts.sync_byte_errors, a.sync_errors + 2 * a.sync_losses, "{h:?}");
    assert_eq!(ts.sync_losses, a.sync_losses, "{h:?}");
    assert_eq!(
        (ts.sync_byte_errors, ts.sync_losses, ts.continuity_errors),
        (sink_ts.sync_byte_errors, sink_ts.sync_losses, sink_ts.continuity_errors)
    );
    let runs = s.holes.len() as u64;
    assert!(
        ts.continuity_errors >= 2 * runs + a.sync_errors + a.sync_losses,
        "{h:?}"
    );
    assert_eq!(ts.pat_errors, 0);
    relay.stop().expect("stopped");
}

/// Worker 0, which reads the eBPF data path's health ring, stalls (stopped)
/// for longer than the ring holds while the stream goes on: the relay
/// forwards every packet all the same, counts the records the ring could
/// not hold, and makes no error of the packets its health did not see.
#[test]
fn a_full_health_ring_is_counted_and_no_error_is_made_of_it() {
    let _lock = traffic_lock().expect("lock");
    let p = TwoPaths::new("health-ring-full").expect("topology");
    let a = p.impair(false, &[]).expect("path a");
    let relay = relay(&p, "ebpf", &[]);
    // 16 s at 2000 pps; the ring holds about 7.5 s of it, worker 0 stops
    // for 12 s.
    let count = 32_000;
    let got = std::thread::scope(|s| {
        let sender = s.spawn(|| send(&p, count));
        std::thread::sleep(Duration::from_secs(2));
        let pid = relay.workers().expect("workers")[0].pid.expect("worker 0 runs");
        // The test started mcrd, which started this worker.
        mcr_sys::process::send_signal(pid, Signal::Stop).expect("stop worker 0");
        std::thread::sleep(Duration::from_secs(12));
        mcr_sys::process::send_signal(pid, Signal::Cont).expect("worker 0 goes on");
        sender.join().expect("sender")
    });
    a.stop().expect("path a");
    let s = &got.report.streams[0];
    assert_eq!(got.code, Some(0), "{:?}\n{}", got.report.problems, relay.log());
    assert_eq!((s.unique, s.lost), (count, 0), "the kernel forwarded every packet");
    // Read after worker 0 has caught up with what the ring held.
    std::thread::sleep(Duration::from_millis(500));
    let st = relay.stats().expect("stats");
    let missed = st.datapath.as_ref().expect("the eBPF data path").health_missed;
    assert!(missed > 3000 && missed < count, "{missed} missed");
    let (r, h) = feed(&relay);
    assert_eq!(r.packets, count);
    let (rtp, ts) = (h.rtp.expect("rtp"), h.ts.expect("ts"));
    assert_eq!(
        (rtp.lost, rtp.late, rtp.duplicates, rtp.restarts),
        (0, 0, 0, 0),
        "{h:?}"
    );
    assert_eq!(ts.packets, 7 * (count - missed), "every packet the ring held looked at");
    assert_eq!(
        (ts.sync_losses, ts.sync_byte_errors, ts.pat_errors, ts.continuity_errors),
        (0, 0, 0, 0),
        "{h:?}"
    );
    let text = relay.ctl_ok(&["stats"]).expect("stats");
    assert!(
        text.contains(&format!("{missed} datagrams' health not followed")),
        "{text}"
    );
    relay.stop().expect("stopped");
}

/// A stream that is neither RTP nor MPEG-TS, on the eBPF path: the program
/// hands the health ring one of its datagrams in 25 ms, so its input shows
/// what it carries and its signal, and loses the signal when it ends.
#[test]
fn a_stream_of_neither_rtp_nor_mpeg_ts_has_its_signal_on_the_ebpf_path() {
    let _lock = traffic_lock().expect("lock");
    let p = TwoPaths::new("health-plain-ebpf").expect("topology");
    let a = p.impair(false, &[]).expect("path a");
    let relay = relay(&p, "ebpf", &[]);
    let count = 4000;
    let rx = Mcrgen::streams("239.10.1.1:6001", TwoPaths::SINK_IF)
        .expect(count)
        .arg("--idle-timeout")
        .arg("2s")
        .recv(&p.sink)
        .expect("receiver ready");
    let sent = Mcrgen::streams("239.1.1.1:5001", TwoPaths::GEN_A_IF)
        .count(count)
        .rate("2000")
        .send(&p.generator, MINUTES)
        .expect("sent");
    assert_eq!(sent.packets, count);
    let got = rx.finish(MINUTES).expect("receiver finished");
    a.stop().expect("path a");
    let s = &got.report.streams[0];
    assert_eq!(got.code, Some(0), "{:?}\n{}", got.report.problems, relay.log());
    assert_eq!((s.unique, s.lost), (count, 0));
    let (r, h) = feed(&relay);
    assert_eq!(r.packets, count);
    assert_eq!(h.carries, "other", "{h:?}");
    assert!(h.rtp.is_none() && h.ts.is_none(), "{h:?}");
    assert!(h.since_last_ms.is_some(), "it had a signal: {h:?}");
    signal_goes(&relay);
    relay.stop().expect("stopped");
}
