//! The relay forwards at layer 2, rewriting as its rules say: every packet
//! checked by `mcrgen recv --expect`, and the wire checked by capture.

use std::time::Duration;

use mcr_core::control::Reply;
use mcr_core::forward::{RxChecksum, parse};
use mcr_testbed::capture::Capture;
use mcr_testbed::presets::{Chain, Star};
use mcr_testbed::relay::Relay;
use mcr_testbed::traffic::{Mcrgen, Receiver, every_packet_crosses};
use mcr_testbed::traffic_lock;

const MINUTES: Duration = Duration::from_secs(180);

#[test]
fn a_chain_translates_every_packet_and_puts_valid_frames_on_the_wire() {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("relay-chain").expect("chain");
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    relay
        .add_rule("feed-a", "veth1:239.1.1.1:5001", &["veth2:239.10.1.1:6001,ttl=7"])
        .expect("rule added");
    let cap = Capture::start_limited(&c.sink, Chain::SINK_IF, "udp", Some(2000)).expect("capture");
    let rx = Mcrgen::streams("239.10.1.1:6001", Chain::SINK_IF)
        .expect(100_000)
        .recv(&c.sink)
        .expect("recv");
    let sent = Mcrgen::streams("239.1.1.1:5001", Chain::GEN_IF)
        .count(100_000)
        .rate("50k")
        .size(1024)
        .arg("--ttl")
        .arg("9")
        .send(&c.generator, MINUTES)
        .expect("send");
    assert_eq!(sent.packets, 100_000);
    let got = rx.finish(MINUTES).expect("recv done");
    assert_eq!(got.code, Some(0), "{:?}\n{}", got.report.problems, relay.log());
    assert_eq!(got.report.total.received, 100_000);

    // On the wire: valid checksums, the TTL set, the group's MAC, the
    // egress interface's MAC and address.
    let frames = cap.stop().expect("captured");
    assert_eq!(frames.len(), 2000, "the capture sees the relay's frames");
    let egress_mac = c.relay.mac(Chain::RELAY_OUT_IF).expect("mac");
    for f in &frames {
        let d = parse(f, f.len(), RxChecksum::Unknown, None).expect("a valid IPv4 header");
        assert!(
            mcr_core::forward::udp_checksum_ok(f, &d, RxChecksum::Unknown),
            "a valid UDP checksum"
        );
        assert_eq!(d.ttl, 7);
        assert_eq!((d.dst.to_string(), d.dst_port), ("239.10.1.1".to_string(), 6001));
        assert_eq!(d.src, Chain::RELAY_OUT_ADDR);
        assert_eq!(&f[0..6], &[0x01, 0x00, 0x5e, 0x0a, 0x01, 0x01]);
        assert_eq!(
            mcr_core::wire::ethernet::format_mac(&f[6..12].try_into().expect("6 bytes")),
            egress_mac
        );
    }
    let stats = relay.stop().expect("stopped");
    assert!(
        stats.stdout.contains("rule feed-a") && stats.stdout.contains("100000 packets"),
        "{}",
        stats.stdout
    );
}

#[test]
fn one_input_fans_out_to_three_groups() {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("relay-fanout3").expect("chain");
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    relay
        .add_rule(
            "fan",
            "veth1:239.1.1.1:5001",
            &[
                "veth2:239.10.1.1:6001",
                "veth2:239.10.1.2:6001",
                "veth2:239.10.1.3:6001",
            ],
        )
        .expect("rule added");
    // Every output carries stream 0.
    let rx = Mcrgen::streams("239.10.1.1+3:6001", Chain::SINK_IF)
        .ids("0")
        .expect(20_000)
        .recv(&c.sink)
        .expect("recv");
    Mcrgen::streams("239.1.1.1:5001", Chain::GEN_IF)
        .count(20_000)
        .rate("20k")
        .send(&c.generator, MINUTES)
        .expect("send");
    let got = rx.finish(MINUTES).expect("recv done");
    assert_eq!(got.code, Some(0), "{:?}", got.report.problems);
    assert_eq!(got.report.total.received, 60_000);
}

#[test]
fn one_input_fans_out_to_fifty_interfaces_beyond_the_kernels_32() {
    let _lock = traffic_lock().expect("lock");
    let s = Star::new("relay-fanout50", 50).expect("star");
    let relay = Relay::start(&s.relay, &[]).expect("mcrd");
    let outputs: Vec<String> = (0..50)
        .map(|k| format!("{}:239.10.1.1:6001", Star::relay_out_if(k)))
        .collect();
    let refs: Vec<&str> = outputs.iter().map(String::as_str).collect();
    relay
        .add_rule("fan50", "veth1:239.1.1.1:5001", &refs)
        .expect("rule added");
    let receivers: Vec<Receiver> = s
        .sinks
        .iter()
        .map(|ns| {
            Mcrgen::streams("239.10.1.1:6001", Star::SINK_IF)
                .expect(2000)
                .recv(ns)
                .expect("recv")
        })
        .collect();
    Mcrgen::streams("239.1.1.1:5001", Star::GEN_IF)
        .count(2000)
        .rate("2000")
        .send(&s.generator, MINUTES)
        .expect("send");
    for (k, rx) in receivers.into_iter().enumerate() {
        let got = rx.finish(MINUTES).expect("recv done");
        assert_eq!(got.code, Some(0), "sink {k}: {:?}", got.report.problems);
    }
}

#[test]
fn multicast_in_unicast_out() {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("relay-unicast").expect("chain");
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    relay
        .add_rule("to-host", "veth1:239.1.1.1:5001", &["veth2:10.0.1.2:7000"])
        .expect("rule added");
    let rx = Mcrgen::streams("10.0.1.2:7000", Chain::SINK_IF)
        .expect(10_000)
        .recv(&c.sink)
        .expect("recv");
    Mcrgen::streams("239.1.1.1:5001", Chain::GEN_IF)
        .count(10_000)
        .rate("10k")
        .send(&c.generator, MINUTES)
        .expect("send");
    let got = rx.finish(MINUTES).expect("recv done");
    assert_eq!(got.code, Some(0), "{:?}\n{}", got.report.problems, relay.log());
}

#[test]
fn source_specific_rules_split_one_group_by_sender() {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("relay-ssm").expect("chain");
    c.generator
        .addr(Chain::GEN_IF, "10.0.0.3/24")
        .expect("second sender address");
    c.generator
        .addr(Chain::GEN_IF, "10.0.0.4/24")
        .expect("third sender address");
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    relay
        .add_rule(
            "from-1",
            "veth1:239.1.1.1:5001,source=10.0.0.1",
            &["veth2:239.10.1.1:6001"],
        )
        .expect("rule added");
    relay
        .add_rule(
            "from-3",
            "veth1:239.1.1.1:5001,source=10.0.0.3",
            &["veth2:239.10.1.2:6001"],
        )
        .expect("rule added");
    // Stream 0 comes from 10.0.0.1, stream 1 from 10.0.0.3, each must land
    // on its own output; 10.0.0.4 has no rule.
    let rx = Mcrgen::streams("239.10.1.1+2:6001", Chain::SINK_IF)
        .ids("0+")
        .expect(5000)
        .recv(&c.sink)
        .expect("recv");
    let senders: Vec<std::thread::JoinHandle<()>> = [("10.0.0.1", "0"), ("10.0.0.3", "1"), ("10.0.0.4", "9")]
        .into_iter()
        .map(|(src, id)| {
            let ns = c.generator.clone();
            std::thread::spawn(move || {
                Mcrgen::streams("239.1.1.1:5001", Chain::GEN_IF)
                    .arg("--source")
                    .arg(src)
                    .arg("--first-id")
                    .arg(id)
                    .count(5000)
                    .rate(5000)
                    .send(&ns, MINUTES)
                    .expect("send");
            })
        })
        .collect();
    for s in senders {
        s.join().expect("sender");
    }
    let got = rx.finish(MINUTES).expect("recv done");
    assert_eq!(got.code, Some(0), "{:?}", got.report.problems);
    let Reply::Stats(st) = relay.ask(&["stats"]).expect("stats") else {
        panic!("stats reply")
    };
    let wrong: u64 = st.workers.iter().map(|w| w.drops["wrong_source"]).sum();
    assert_eq!(
        wrong, 5000,
        "the third sender's packets are dropped as from the wrong source"
    );
}

#[test]
fn four_workers_neither_duplicate_nor_reorder() {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("relay-4workers").expect("chain");
    // The workers' fanout is what is tested: they forward every rule.
    let relay = Relay::start(&c.relay, &["--workers", "4", "--datapath", "packet"]).expect("mcrd");
    for i in 1..=20 {
        relay
            .add_rule(
                &format!("s{i}"),
                &format!("veth1:239.1.1.{i}:{}", 5000 + i),
                &[&format!("veth2:239.10.1.{i}:{}", 6000 + i)],
            )
            .expect("rule added");
    }
    every_packet_crosses(
        &c.generator,
        Chain::GEN_IF,
        "239.1.1.1+20:5001+",
        &c.sink,
        Chain::SINK_IF,
        "239.10.1.1+20:6001+",
        2000,
        "20k",
    )
    .expect("every packet crosses");
    let Reply::Stats(st) = relay.ask(&["stats"]).expect("stats") else {
        panic!("stats reply")
    };
    let busy = st.workers.iter().filter(|w| w.rx_frames > 0).count();
    assert!(
        busy >= 2,
        "fanout should spread 20 streams over the workers: {:?}\n{}",
        st.workers,
        relay.log()
    );
    assert_eq!(
        st.workers.iter().map(|w| w.rx_frames).sum::<u64>(),
        40_000,
        "each frame reached exactly one worker"
    );
}

#[test]
fn jumbo_frames_of_9000_bytes_cross_the_relay() {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("relay-jumbo").expect("chain");
    for (ns, ifname) in [
        (&c.generator, Chain::GEN_IF),
        (&c.relay, Chain::RELAY_IN_IF),
        (&c.relay, Chain::RELAY_OUT_IF),
        (&c.sink, Chain::SINK_IF),
    ] {
        ns.mtu(ifname, 9000).expect("mtu 9000");
    }
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    relay
        .add_rule("jumbo", "veth1:239.1.1.1:5001", &["veth2:239.10.1.1:6001"])
        .expect("rule added");
    let rx = Mcrgen::streams("239.10.1.1:6001", Chain::SINK_IF)
        .expect(5000)
        .recv(&c.sink)
        .expect("recv");
    Mcrgen::streams("239.1.1.1:5001", Chain::GEN_IF)
        .count(5000)
        .rate("5000")
        .size(8972)
        .send(&c.generator, MINUTES)
        .expect("send");
    let got = rx.finish(MINUTES).expect("recv done");
    assert_eq!(got.code, Some(0), "{:?}\n{}", got.report.problems, relay.log());
    assert_eq!(got.report.total.bytes, 5000 * 8972);
}
