//! RIST inputs and outputs against librist's own tools, `ristreceiver`
//! and `ristsender` (Debian's rist-tools), with `mcrgen recv` checking
//! every packet (sequence, payload, MPEG-TS continuity): a stream MCR
//! serves to a receiver that calls its listener (main profile, AES-256,
//! max-peers), and a stream a sender pushes into MCR's listening input,
//! forwarded to multicast. The simple profile is carried by mcr-sys's own
//! tests (`crates/mcr-sys/tests/rist.rs`).

use std::time::{Duration, Instant};

use mcr_core::control::{SrtStatus, StatsReport};
use mcr_testbed::TempDir;
use mcr_testbed::presets::Chain;
use mcr_testbed::relay::Relay;
use mcr_testbed::rist::RistTool;
use mcr_testbed::traffic::Mcrgen;
use mcr_testbed::traffic_lock;

const MINUTES: Duration = Duration::from_secs(180);
const SECRET: &str = "correct horse battery staple";

/// Waits (at most 60 s) until `ok` holds of what `find` takes from the
/// statistics.
fn wait_until(
    relay: &Relay,
    what: &str,
    find: impl Fn(&StatsReport) -> Option<SrtStatus>,
    ok: impl Fn(&SrtStatus) -> bool,
) -> SrtStatus {
    let start = Instant::now();
    loop {
        let stats = relay.stats().expect("stats");
        if let Some(s) = find(&stats)
            && ok(&s)
        {
            return s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no {what} within 60 s: {:?}\n{}",
            find(&stats),
            relay.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn output_of(stats: &StatsReport, rule: &str) -> Option<SrtStatus> {
    stats.rules.iter().find(|r| r.name == rule)?.outputs[0].rist.clone()
}

fn input_of(stats: &StatsReport, rule: &str) -> Option<SrtStatus> {
    Some(
        stats
            .rules
            .iter()
            .find(|r| r.name == rule)?
            .rist_inputs
            .first()?
            .rist
            .clone(),
    )
}

#[test]
fn rist_outputs_serve_a_receiver_and_rist_inputs_take_a_sender_with_every_packet() {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("rist").expect("chain");
    let dir = TempDir::new("rist").expect("dir");
    let key = dir.file("feed.key", &format!("{SECRET}\n")).expect("key");
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    relay
        .add_rule(
            "dist",
            &format!("{}:239.10.8.1:5001", Chain::RELAY_IN_IF),
            &[&format!(
                "rist://0.0.0.0:8200,buffer=300,secret-file={},aes=256,max-peers=1",
                key.display()
            )],
        )
        .expect("rule added");
    relay
        .add_rule(
            "contrib",
            "rist://0.0.0.0:8210,buffer=300",
            &[&format!("{}:239.10.8.10:6010", Chain::RELAY_OUT_IF)],
        )
        .expect("rule added");
    wait_until(&relay, "listener", |s| output_of(s, "dist"), |s| s.state == "listening");

    // Distribution: a receiver in the sink's namespace calls MCR's
    // listener and puts the stream back on multicast there. A second one
    // finds the listener full (max-peers=1).
    let receiver = RistTool::start(
        &c.sink,
        "ristreceiver",
        1,
        &format!(
            "rist://{}:8200?buffer=300&secret={SECRET}&aes-type=256",
            Chain::RELAY_OUT_ADDR
        ),
        &format!("udp://239.10.8.11:6011?miface={}", Chain::SINK_IF),
    )
    .expect("ristreceiver");
    let dist = wait_until(
        &relay,
        "the receiver",
        |s| output_of(s, "dist"),
        |s| s.connections.len() == 1,
    );
    assert_eq!(
        dist.connections[0].peer.split(':').next(),
        Some(&*Chain::SINK_ADDR.to_string()),
        "{dist:?}"
    );
    let second = RistTool::start(
        &c.sink,
        "ristreceiver",
        1,
        &format!(
            "rist://{}:8200?buffer=300&secret={SECRET}&aes-type=256",
            Chain::RELAY_OUT_ADDR
        ),
        "udp://127.0.0.1:6999",
    )
    .expect("ristreceiver");
    wait_until(
        &relay,
        "the refusal",
        |s| output_of(s, "dist"),
        |s| s.refused.get("full").copied().unwrap_or(0) >= 1,
    );
    drop(second);

    // Contribution: a sender in the generator's namespace takes the
    // generator's unicast stream and reaches MCR's input listener.
    let sender = RistTool::start(
        &c.generator,
        "ristsender",
        1,
        "udp://@0.0.0.0:5010",
        &format!("rist://{}:8210?buffer=300", Chain::RELAY_IN_ADDR),
    )
    .expect("ristsender");
    wait_until(
        &relay,
        "the sender",
        |s| input_of(s, "contrib"),
        |s| s.connections.len() == 1,
    );

    let rx_dist = Mcrgen::streams("239.10.8.11:6011", Chain::SINK_IF)
        .ids("0")
        .wrap("ts")
        .expect(3000)
        .recv(&c.sink)
        .expect("recv");
    let rx_contrib = Mcrgen::streams("239.10.8.10:6010", Chain::SINK_IF)
        .ids("1")
        .wrap("ts")
        .expect(3000)
        .recv(&c.sink)
        .expect("recv");
    Mcrgen::streams(format!("239.10.8.1:5001,{}:5010", Chain::GEN_ADDR), Chain::GEN_IF)
        .count(3000)
        .rate(1000)
        .wrap("ts")
        .send(&c.generator, MINUTES)
        .expect("send");
    for (name, rx, peer) in [("dist", rx_dist, &receiver), ("contrib", rx_contrib, &sender)] {
        let got = rx.finish(MINUTES).expect("recv done");
        assert_eq!(
            got.code,
            Some(0),
            "{name}: {:?}\n{}\n{}\n--- peer\n{}",
            got.report.problems,
            relay.ctl_ok(&["stats"]).unwrap_or_default(),
            relay.log(),
            peer.log()
        );
        assert_eq!(got.report.total.received, 3000, "{name}");
    }

    let stats = relay.stats().expect("stats");
    for name in ["dist", "contrib"] {
        let r = stats.rules.iter().find(|r| r.name == name).expect("rule");
        assert_eq!((r.packets, r.outputs[0].packets), (3000, 3000), "{r:?}");
    }
    // The input's health is followed on RIST too: the TS is whole.
    let r = stats.rules.iter().find(|r| r.name == "contrib").expect("rule");
    let ts = r.health[0].ts.as_ref().expect("MPEG-TS health");
    assert_eq!(
        (ts.packets, ts.continuity_errors, ts.pat_errors),
        (21_000, 0, 0),
        "{ts:?}"
    );
    // librist's own counts, once a second: the sender's include its RTCP
    // packets, so they reach at least every datagram.
    let dist = wait_until(
        &relay,
        "every packet counted",
        |s| output_of(s, "dist"),
        |s| s.connections.first().is_some_and(|c| c.packets >= 3000),
    );
    assert!(dist.connections[0].rtt_ms > 0.0, "{dist:?}");
    let contrib = wait_until(
        &relay,
        "every packet counted",
        |s| input_of(s, "contrib"),
        |s| s.connections.first().is_some_and(|c| c.packets >= 2999),
    );
    assert_eq!(contrib.connections[0].lost, 0, "{contrib:?}");
    let shown = relay.ctl_ok(&["stats"]).expect("mcrctl stats");
    assert!(shown.contains("rist connected on worker 0, 1 peer(s)"), "{shown}");
    assert!(
        shown.contains("<- rist://0.0.0.0:8210,mode=listener,buffer=300"),
        "{shown}"
    );
    drop(receiver);
    drop(sender);
}
