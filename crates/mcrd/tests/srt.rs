//! SRT outputs against a third-party peer: Debian's srt-live-transmit
//! (its own build of libsrt) calls MCR's listener and puts what it gets
//! back on multicast, where `mcrgen recv` checks every packet (sequence,
//! payload, MPEG-TS continuity).

use std::time::{Duration, Instant};

use mcr_core::control::{SrtStatus, StatsReport};
use mcr_testbed::TempDir;
use mcr_testbed::presets::Chain;
use mcr_testbed::relay::Relay;
use mcr_testbed::srt::LiveTransmit;
use mcr_testbed::traffic::Mcrgen;
use mcr_testbed::traffic_lock;

const MINUTES: Duration = Duration::from_secs(180);
const PASSPHRASE: &str = "correct horse battery";

/// The SRT status of output `k` of rule `rule`.
fn srt_of(stats: &StatsReport, rule: &str, k: usize) -> SrtStatus {
    let r = stats.rules.iter().find(|r| r.name == rule).expect("the rule");
    r.outputs[k].srt.clone().expect("an SRT status")
}

/// Waits until `what` holds of the SRT status of `rule`'s first output.
fn wait_for(relay: &Relay, rule: &str, what: &str, ok: impl Fn(&SrtStatus) -> bool) -> SrtStatus {
    wait_for_output(relay, rule, 0, what, ok)
}

/// Waits until `what` holds of the SRT status of `rule`'s output `k`.
fn wait_for_output(relay: &Relay, rule: &str, k: usize, what: &str, ok: impl Fn(&SrtStatus) -> bool) -> SrtStatus {
    wait_until(relay, rule, what, |r| r.outputs.get(k)?.srt.clone(), ok)
}

/// Waits until `ok` holds of the SRT status of `rule`'s input `k`.
fn wait_for_input(relay: &Relay, rule: &str, k: usize, what: &str, ok: impl Fn(&SrtStatus) -> bool) -> SrtStatus {
    wait_until(
        relay,
        rule,
        what,
        |r| Some(r.srt_inputs.iter().find(|i| i.index == k)?.srt.clone()),
        ok,
    )
}

/// Waits (at most 60 s) until `ok` holds of the SRT status `find` takes
/// from `rule`'s statistics.
fn wait_until(
    relay: &Relay,
    rule: &str,
    what: &str,
    find: impl Fn(&mcr_core::control::RuleStats) -> Option<SrtStatus>,
    ok: impl Fn(&SrtStatus) -> bool,
) -> SrtStatus {
    let start = Instant::now();
    loop {
        let stats = relay.stats().expect("stats");
        let r = stats.rules.iter().find(|r| r.name == rule);
        if let Some(s) = r.and_then(&find)
            && ok(&s)
        {
            return s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no {what} within 60 s: {r:?}\n{}",
            relay.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn srt_outputs_serve_their_callers_and_call_out_with_every_packet_and_refuse_the_wrong_callers() {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("srt-listener").expect("chain");
    let dir = TempDir::new("srt-listener").expect("dir");
    let key = dir.file("feed.key", &format!("{PASSPHRASE}\n")).expect("key");
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    // A remote listener the rule calls: srt-live-transmit, serving one
    // caller, back out to a group.
    let remote = LiveTransmit::start(
        &c.sink,
        "srt://:9100?mode=listener&latency=200&streamid=ignored",
        &format!("udp://239.9.9.3:6000?adapter={}", Chain::SINK_ADDR),
        0,
    )
    .expect("srt-live-transmit listener");
    let output = format!(
        "srt://0.0.0.0:9000,latency=200,passphrase-file={},streamid=feed-a,max-callers=2",
        key.display()
    );
    let calls = format!("srt://{}:9100,latency=200,streamid=from-mcr", Chain::SINK_ADDR);
    relay
        .add_rule("feed", "veth1:239.1.1.1:5001", &[&output, &calls])
        .expect("rule added");
    // Another rule on the same port, chosen by its own stream ID.
    let other = format!(
        "srt://0.0.0.0:9000,latency=200,passphrase-file={},streamid=feed-b",
        key.display()
    );
    relay
        .add_rule("feed-b", "veth1:239.1.1.2:5001", &[&other])
        .expect("second rule added");
    let listening = wait_for(&relay, "feed", "listener", |s| s.state == "listening");
    assert_eq!(listening.error, None);

    // A port another program has is refused at add, naming it.
    let squatter = LiveTransmit::start(
        &c.relay,
        "srt://:9500?mode=listener",
        &format!("udp://239.9.9.10:6000?adapter={}", Chain::RELAY_OUT_ADDR),
        0,
    )
    .expect("srt-live-transmit on 9500");
    // (srt-live-transmit binds its port a moment after it starts.)
    let start = Instant::now();
    while c
        .relay
        .exec("ss", ["-Hlun", "sport = :9500"])
        .expect("ss")
        .trim()
        .is_empty()
    {
        assert!(start.elapsed() < Duration::from_secs(30), "{}", squatter.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let refused_add = relay
        .ctl(&[
            "add",
            "x",
            "--input",
            "veth1:239.1.1.5:5001",
            "--output",
            "srt://0.0.0.0:9500",
        ])
        .expect("mcrctl");
    assert!(
        refused_add
            .stderr
            .contains("rule `x`: outputs[0]: SRT listener 0.0.0.0:9500: UDP port 9500 is taken by another program"),
        "{refused_add:?}"
    );
    drop(squatter);

    // Two callers, one by the plain stream ID and one by SRT's
    // access-control form, each back out to a group of its own.
    let caller = |id: &str, pass: &str, group: &str| {
        LiveTransmit::start(
            &c.sink,
            &format!(
                "srt://{}:9000?streamid={id}&latency=200&passphrase={pass}",
                Chain::RELAY_OUT_ADDR
            ),
            &format!("udp://{group}:6000?adapter={}", Chain::SINK_ADDR),
            0,
        )
        .expect("srt-live-transmit")
    };
    let plain = caller("feed-a", PASSPHRASE, "239.9.9.1");
    let by_resource = caller("#!::r=feed-a,m=request", PASSPHRASE, "239.9.9.2");
    let two = wait_for(&relay, "feed", "two callers", |s| s.connections.len() == 2);
    let mut ids: Vec<&str> = two.connections.iter().map(|c| c.stream_id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["#!::r=feed-a,m=request", "feed-a"]);

    // Refused: a stream ID nothing serves, a third caller of feed-a
    // (max-callers is 2), a wrong passphrase (for feed-b: the hook lets
    // it in, and libsrt's key exchange refuses it). Each is counted by
    // reason for the port, and the callers that are in lose nothing.
    let mut unknown = caller("feed-z", PASSPHRASE, "239.9.9.7");
    let mut third = caller("feed-a", PASSPHRASE, "239.9.9.8");
    let mut wrong = caller("feed-b", "not the passphrase", "239.9.9.9");
    let refused = wait_for(&relay, "feed", "every refusal", |s| {
        ["not_found", "overload", "handshake"]
            .iter()
            .all(|k| s.refused.get(*k).copied().unwrap_or(0) > 0)
    });
    assert_eq!(refused.connections.len(), 2, "{refused:?}");
    unknown
        .wait_for("REJECT", Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e}\n{}", unknown.log()));
    third
        .wait_for("REJECT", Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e}\n{}", third.log()));
    wrong
        .wait_for("REJECT", Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e}\n{}", wrong.log()));
    let b = srt_of(&relay.stats().expect("stats"), "feed-b", 0);
    assert_eq!((b.refused, b.connections.len()), (refused.refused.clone(), 0));

    // The call is made (srt-live-transmit says whom it accepted).
    let called = wait_for_output(&relay, "feed", 1, "the call", |s| s.state == "connected");
    assert_eq!(called.connections[0].stream_id, "from-mcr");

    // Every packet reaches the callers' groups and the called one,
    // intact and in order.
    let rx = Mcrgen::streams("239.9.9.1+3:6000", Chain::SINK_IF)
        .ids("0")
        .wrap("ts")
        .expect(3000)
        .recv(&c.sink)
        .expect("recv");
    Mcrgen::streams("239.1.1.1:5001", Chain::GEN_IF)
        .count(3000)
        .rate(500)
        .wrap("ts")
        .send(&c.generator, MINUTES)
        .expect("send");
    let got = rx.finish(MINUTES).expect("recv done");
    assert_eq!(
        got.code,
        Some(0),
        "{:?}\n{}\n--- caller 1\n{}\n--- caller 2\n{}\n--- called\n{}",
        got.report.problems,
        relay.log(),
        plain.log(),
        by_resource.log(),
        remote.log()
    );
    assert_eq!(got.report.total.received, 9000);

    let stats = relay.stats().expect("stats");
    let out = &stats.rules[0].outputs[0];
    assert_eq!(out.packets, 3000, "{out:?}");
    assert_eq!(out.drops.values().sum::<u64>(), 0, "{out:?}");
    // libsrt's counts, read once a second, reach what was sent.
    let s = wait_for(&relay, "feed", "every packet counted", |s| {
        s.connections.iter().all(|c| c.packets == 3000)
    });
    assert_eq!(s.connections.len(), 2, "{s:?}");
    for conn in &s.connections {
        assert_eq!(conn.latency_ms, 200, "{conn:?}");
        assert_eq!(conn.queue_full, 0, "{conn:?}");
    }
    let called = srt_of(&relay.stats().expect("stats"), "feed", 1);
    assert_eq!(called.connections[0].peer, format!("{}:9100", Chain::SINK_ADDR));

    // The called listener goes away: the rule calls again, with backoff,
    // saying why the calls fail, and takes up the new one.
    drop(remote.stop());
    let failing = wait_for_output(&relay, "feed", 1, "a failed call", |s| {
        s.state == "calling" && s.error.is_some()
    });
    assert!(failing.connections.is_empty(), "{failing:?}");
    let _again = LiveTransmit::start(
        &c.sink,
        "srt://:9100?mode=listener&latency=200",
        &format!("udp://239.9.9.3:6000?adapter={}", Chain::SINK_ADDR),
        0,
    )
    .expect("srt-live-transmit listener");
    wait_for_output(&relay, "feed", 1, "the call made again", |s| s.state == "connected");
    let shown = relay.ctl_ok(&["stats"]).expect("mcrctl stats");
    assert!(
        shown.contains("srt listening on worker 0, 2 caller(s); refused"),
        "{shown}"
    );
    assert!(shown.contains("caller 10.0.1.2:"), "{shown}");
}

#[test]
fn srt_inputs_take_a_pushed_and_a_pulled_stream_into_multicast_and_on_over_srt_with_every_packet() {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("srt-inputs").expect("chain");
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    // Pushed: an encoder (srt-live-transmit, taking the generator's
    // stream) calls MCR's listener. Pulled: MCR calls a remote
    // listener (srt-live-transmit again) for the second stream.
    relay
        .add_rule(
            "pushed",
            "srt://0.0.0.0:9200,latency=200,streamid=contrib",
            &["veth2:239.10.9.9:6009", "srt://0.0.0.0:9201,latency=200,streamid=hub"],
        )
        .expect("rule added");
    relay
        .add_rule(
            "pulled",
            &format!("srt://{}:9300,latency=200", Chain::GEN_ADDR),
            &["veth2:239.10.9.10:6010"],
        )
        .expect("rule added");
    // (mcrgen sends to the generator's own address, where each
    // srt-live-transmit takes its stream: its multicast does not loop
    // back to the host that sends it.)
    let pusher = LiveTransmit::start(
        &c.generator,
        "udp://:5009",
        &format!("srt://{}:9200?streamid=contrib&latency=200", Chain::RELAY_IN_ADDR),
        0,
    )
    .expect("srt-live-transmit caller");
    let remote = LiveTransmit::start(&c.generator, "udp://:5010", "srt://:9300?mode=listener&latency=200", 0)
        .expect("srt-live-transmit listener");
    let pushed = wait_for_input(&relay, "pushed", 0, "the pusher", |s| s.connections.len() == 1);
    assert_eq!(pushed.connections[0].stream_id, "contrib");
    wait_for_input(&relay, "pulled", 0, "the call", |s| s.state == "connected");
    // A hub: the pushed stream also leaves over SRT, to a caller in the
    // sink's namespace that puts it back on multicast there.
    let hub = LiveTransmit::start(
        &c.sink,
        &format!("srt://{}:9201?streamid=hub&latency=200", Chain::RELAY_OUT_ADDR),
        &format!("udp://239.10.9.11:6011?adapter={}", Chain::SINK_ADDR),
        0,
    )
    .expect("srt-live-transmit caller");
    wait_for_output(&relay, "pushed", 1, "the hub's caller", |s| s.connections.len() == 1);
    let hub_rx = Mcrgen::streams("239.10.9.11:6011", Chain::SINK_IF)
        .ids("0")
        .wrap("ts")
        .expect(3000)
        .recv(&c.sink)
        .expect("recv");

    let rx = Mcrgen::streams("239.10.9.9+2:6009+", Chain::SINK_IF)
        .wrap("ts")
        .expect(3000)
        .recv(&c.sink)
        .expect("recv");
    Mcrgen::streams(
        format!("{}:5009,{}:5010", Chain::GEN_ADDR, Chain::GEN_ADDR),
        Chain::GEN_IF,
    )
    .count(3000)
    .rate(1000)
    .wrap("ts")
    .send(&c.generator, MINUTES)
    .expect("send");
    let got = rx.finish(MINUTES).expect("recv done");
    assert_eq!(
        got.code,
        Some(0),
        "{:?}\n{}\n{}\n--- pusher\n{}\n--- remote\n{}",
        got.report.problems,
        relay.ctl_ok(&["stats"]).unwrap_or_default(),
        relay.log(),
        pusher.log(),
        remote.log()
    );
    assert_eq!(got.report.total.received, 6000);
    let through_hub = hub_rx.finish(MINUTES).expect("recv done");
    assert_eq!(
        through_hub.code,
        Some(0),
        "{:?}\n{}",
        through_hub.report.problems,
        hub.log()
    );
    assert_eq!(through_hub.report.total.received, 3000);

    let stats = relay.stats().expect("stats");
    for name in ["pushed", "pulled"] {
        let r = stats.rules.iter().find(|r| r.name == name).expect("rule");
        assert_eq!((r.packets, r.outputs[0].packets), (3000, 3000), "{r:?}");
        // The inputs' health is followed on SRT too: the TS is whole.
        let ts = r.health[0].ts.as_ref().expect("MPEG-TS health");
        assert_eq!(
            (ts.packets, ts.continuity_errors, ts.pat_errors),
            (21_000, 0, 0),
            "{ts:?}"
        );
    }
    let pushed = wait_for_input(&relay, "pushed", 0, "every packet counted", |s| {
        s.connections.first().is_some_and(|c| c.packets == 3000)
    });
    assert_eq!(pushed.connections[0].latency_ms, 200, "{pushed:?}");
    let shown = relay.ctl_ok(&["stats"]).expect("mcrctl stats");
    assert!(
        shown.contains("<- srt://0.0.0.0:9200,mode=listener,latency=200,streamid=contrib"),
        "{shown}"
    );
}

#[test]
fn a_failover_from_an_srt_primary_takes_the_multicast_backup_when_the_primary_is_cut() {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("srt-failover").expect("chain");
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    // The primary comes over SRT (srt-live-transmit pushes it, 120 ms
    // latency), the backup as multicast: the same datagrams, the copy
    // sent by mcrgen itself.
    relay
        .ctl_ok(&[
            "add",
            "fo",
            "--input",
            "srt://0.0.0.0:9400,latency=120,streamid=primary",
            "--input",
            "veth1:239.1.1.11:5011",
            "--mode",
            "failover",
            "--output",
            "veth2:239.10.9.12:6012",
        ])
        .expect("rule added");
    let mut pusher = LiveTransmit::start(
        &c.generator,
        "udp://:5011",
        &format!("srt://{}:9400?streamid=primary&latency=120", Chain::RELAY_IN_ADDR),
        0,
    )
    .expect("srt-live-transmit caller");
    wait_for_input(&relay, "fo", 0, "the primary's sender", |s| s.connections.len() == 1);
    let rx = Mcrgen::streams("239.10.9.12:6012", Chain::SINK_IF)
        .expect(5000)
        .arg("--idle-timeout")
        .arg("5s")
        .recv(&c.sink)
        .expect("recv");
    let count = 5000;
    let sender = std::thread::spawn({
        let generator = c.generator.clone();
        move || {
            Mcrgen::streams(format!("{}:5011", Chain::GEN_ADDR), Chain::GEN_IF)
                .count(count)
                .rate(1000)
                .arg("--copy")
                .arg("239.1.1.11:5011")
                .send(&generator, MINUTES)
        }
    });
    // Two seconds in, the primary's sender dies (SIGKILL: no goodbye).
    std::thread::sleep(Duration::from_secs(2));
    pusher.kill().expect("kill the pusher");
    sender.join().expect("sender").expect("send");
    let got = rx.finish(MINUTES).expect("recv done");
    let s = &got.report.streams[0];
    assert_eq!(
        (s.duplicated, s.reordered, s.corrupted, s.wrong_stream),
        (0, 0, 0, 0),
        "{s:?}\n{}",
        relay.log()
    );
    assert_eq!(s.holes.len(), 1, "one interruption: {:?}\n{}", s.holes, relay.log());
    assert_eq!(
        s.highest_seq,
        Some(count - 1),
        "the backup carried the stream to its end"
    );
    let (from, missed) = s.holes[0];
    assert!(from > 1000, "the primary carried the start: {from}");
    let stats = relay.stats().expect("stats");
    let red = stats.rules[0].redundancy.clone().expect("failover");
    assert_eq!((red.switches, red.active), (1, Some(2)), "{red:?}");
    assert_eq!(red.inputs[0].forwarded, from, "{red:?}");
    assert!(
        relay.log().contains("input 1 -> input 2 (loss of signal)"),
        "{}",
        relay.log()
    );
    // At 1000 packets/s, a packet a millisecond; the primary ran 120 ms
    // (its SRT latency) behind the backup, so that many of the missed
    // packets had already gone by on the backup when the primary stopped.
    eprintln!(
        "SRT primary cut: {missed} packets missed; the output was interrupted about {} ms (loss of signal 200 ms, SRT latency 120 ms)",
        missed.saturating_sub(120)
    );
}
