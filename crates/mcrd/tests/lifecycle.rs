//! Rules and workers change while traffic flows: untouched streams lose
//! nothing, a removed stream stops at once, a killed worker comes back.

use std::time::{Duration, Instant};

use mcr_core::control::{Reply, StatsReport, WorkerStatus};
use mcr_testbed::presets::Chain;
use mcr_testbed::relay::Relay;
use mcr_testbed::traffic::{Receiver, send};
use mcr_testbed::{Signal, traffic_lock};

const MINUTES: Duration = Duration::from_secs(180);

fn stats(relay: &Relay) -> StatsReport {
    match relay.ask(&["stats"]).expect("stats") {
        Reply::Stats(s) => *s,
        other => panic!("not stats: {other:?}"),
    }
}

fn workers(relay: &Relay) -> Vec<WorkerStatus> {
    match relay.ask(&["workers"]).expect("workers") {
        Reply::Workers { workers } => workers,
        other => panic!("not workers: {other:?}"),
    }
}

#[test]
fn removing_one_rule_stops_its_stream_at_once_and_spares_the_others() {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("relay-remove-one").expect("chain");
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    for i in 1..=10 {
        relay
            .ctl_ok(&[
                "add",
                &format!("s{i}"),
                "--input",
                &format!("veth1:239.1.1.{i}:{}", 5000 + i),
                "--output",
                &format!("veth2:239.10.1.{i}:{}", 6000 + i),
            ])
            .expect("add");
    }
    let rx = Receiver::start(
        &c.sink,
        &[
            "-s",
            "239.10.1.1+10:6001+",
            "-i",
            Chain::SINK_IF,
            "--idle-timeout",
            "2s",
        ],
    )
    .expect("recv");
    let gen_ns = c.generator.clone();
    let sender = std::thread::spawn(move || {
        send(
            &gen_ns,
            &[
                "-s",
                "239.1.1.1+10:5001+",
                "-i",
                Chain::GEN_IF,
                "--count",
                "4000",
                "--rate",
                "10k",
            ],
            MINUTES,
        )
        .expect("send")
    });
    std::thread::sleep(Duration::from_millis(1500));
    relay.ctl_ok(&["remove", "s5"]).expect("remove");
    assert_eq!(sender.join().expect("sender").packets, 40_000);
    let got = rx.finish(MINUTES).expect("recv done");
    for (i, s) in got.report.streams.iter().enumerate() {
        if i == 4 {
            continue;
        }
        assert!(
            s.problems(Some(4000)).is_empty(),
            "stream {i}: {:?}",
            s.problems(Some(4000))
        );
        assert_eq!(s.received, 4000);
    }
    // The removed stream: a clean prefix, then nothing.
    let s5 = &got.report.streams[4];
    assert!(s5.received > 0 && s5.received < 4000, "{s5:?}");
    assert_eq!((s5.lost, s5.duplicated, s5.reordered), (0, 0, 0), "{s5:?}");
    assert_eq!(s5.highest_seq, Some(s5.received - 1));
    // Every packet of it was forwarded before the table changed, or
    // counted as having no rule after: none slipped through.
    let st = stats(&relay);
    let no_rule: u64 = st.workers.iter().map(|w| w.drops["no_rule"]).sum();
    assert_eq!(
        s5.received + no_rule,
        4000,
        "forwarded {} + no_rule {no_rule}",
        s5.received
    );
    assert!(!st.rules.iter().any(|r| r.name == "s5"));
}

#[test]
fn a_killed_worker_comes_back_with_the_table_and_its_counters() {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("relay-kill-worker").expect("chain");
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    relay
        .ctl_ok(&[
            "add",
            "feed",
            "--input",
            "veth1:239.1.1.1:5001",
            "--output",
            "veth2:239.10.1.1:6001",
        ])
        .expect("add");
    let list_before = relay.ctl_ok(&["--json", "list"]).expect("list");
    let rx = Receiver::start(
        &c.sink,
        &["-s", "239.10.1.1:6001", "-i", Chain::SINK_IF, "--idle-timeout", "2s"],
    )
    .expect("recv");
    let gen_ns = c.generator.clone();
    let sender = std::thread::spawn(move || {
        send(
            &gen_ns,
            &[
                "-s",
                "239.1.1.1:5001",
                "-i",
                Chain::GEN_IF,
                "--count",
                "8000",
                "--rate",
                "1000",
            ],
            MINUTES,
        )
        .expect("send")
    });
    std::thread::sleep(Duration::from_secs(2));
    let before = workers(&relay)[0].clone();
    let pid = before.pid.expect("a running worker");
    let packets_before = stats(&relay).rules[0].packets;
    assert!(packets_before > 0);
    // The test started mcrd, which started this worker.
    mcr_sys::process::send_signal(pid, Signal::Kill).expect("kill -9 the worker");

    // It comes back, and meanwhile no counter goes backwards.
    let start = Instant::now();
    let mut last = packets_before;
    let after = loop {
        let st = stats(&relay);
        assert!(
            st.rules[0].packets >= last,
            "counter went back from {last} to {}",
            st.rules[0].packets
        );
        last = st.rules[0].packets;
        let w = workers(&relay)[0].clone();
        if w.state == "running" && w.pid.is_some_and(|p| p != pid) {
            break w;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "worker did not come back: {w:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(after.restarts, 1);
    assert!(
        after.last_exit.as_deref().is_some_and(|e| e.contains("signal 9")),
        "{after:?}"
    );
    assert_eq!(
        relay.ctl_ok(&["--json", "list"]).expect("list"),
        list_before,
        "the rules are unchanged"
    );
    let packets_back = stats(&relay).rules[0].packets;

    sender.join().expect("sender");
    let got = rx.finish(MINUTES).expect("recv done");
    let s = &got.report.streams[0];
    // Forwarding resumed to the very end, without duplicates or reordering;
    // only what arrived while no worker ran may be missing.
    assert_eq!(s.highest_seq, Some(7999), "{s:?}");
    assert_eq!((s.duplicated, s.reordered, s.corrupted), (0, 0, 0), "{s:?}");
    let packets_end = stats(&relay).rules[0].packets;
    assert!(packets_end > packets_back && packets_back >= packets_before);
    assert_eq!(packets_end, s.received, "the relay counted exactly what arrived");
}
