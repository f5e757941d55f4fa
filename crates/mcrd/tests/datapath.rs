//! The eBPF data path end to end: what it carries and what it leaves to
//! the workers, a program of the host that listens to an input, and the
//! program's life on the interface (it leaves with its last rule, and with
//! mcrd, even when mcrd is killed). Every packet is checked by `mcrgen
//! recv`, reading from a ring where the checksums matter: it checks every
//! one itself, partial sums included.

use std::time::Duration;

use mcr_core::control::RuleStats;
use mcr_testbed::presets::Chain;
use mcr_testbed::relay::Relay;
use mcr_testbed::traffic::{Mcrgen, Received, Receiver, every_packet_crosses};
use mcr_testbed::{Ns, Signal, traffic_lock};

const MINUTES: Duration = Duration::from_secs(180);

/// How many programs are attached to the tc ingress hook of `ifname` in
/// `ns`, as the kernel says.
fn programs_on(ns: &Ns, ifname: &str) -> u32 {
    let (name, ifname) = (ns.name().to_string(), ifname.to_string());
    std::thread::spawn(move || {
        mcr_sys::netns::enter(&name).expect("enter the namespace");
        let ifindex = mcr_sys::iface::index(&ifname).expect("the interface");
        mcr_sys::bpf::tcx_ingress_programs(ifindex).expect("query")
    })
    .join()
    .expect("the namespace thread")
}

fn rule<'a>(rules: &'a [RuleStats], name: &str) -> &'a RuleStats {
    rules.iter().find(|r| r.name == name).expect("the rule")
}

/// Checks that `got` received `n` packets of each stream, in order, once,
/// intact, with valid checksums.
fn complete(got: Received, n: u64, relay: &Relay) {
    assert_eq!(got.code, Some(0), "{:?}\n{}", got.report.problems, relay.log());
    for s in &got.report.streams {
        assert_eq!(
            (s.received, s.lost, s.duplicated, s.reordered, s.corrupted),
            (n, 0, 0, 0, 0),
            "{s:?}"
        );
    }
    assert_eq!(got.report.bad_frames, 0);
}

#[test]
fn the_ebpf_datapath_carries_spaced_and_burst_streams_and_the_workers_see_none_of_them() {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("dp-carry").expect("chain");
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    relay
        .add_rule("spaced", "veth1:239.1.1.1:5001", &["veth2:239.10.1.1:6001,ttl=5"])
        .expect("rule added");
    relay
        .add_rule("burst", "veth1:239.1.1.2:5002", &["veth2:239.10.1.2:6002"])
        .expect("rule added");
    assert_eq!(programs_on(&c.relay, Chain::RELAY_IN_IF), 1);
    assert_eq!(programs_on(&c.relay, Chain::RELAY_OUT_IF), 0, "inputs only");
    let ip_in = || c.relay.snmp("Ip", "InReceives").expect("Ip InReceives");
    let rx_dropped = || {
        let path = format!("/sys/class/net/{}/statistics/rx_dropped", Chain::RELAY_IN_IF);
        let n = c.relay.exec("cat", [path.as_str()]).expect("rx_dropped");
        n.trim().parse::<u64>().expect("a count")
    };
    let (ip_in_before, rx_dropped_before) = (ip_in(), rx_dropped());
    let rx = Mcrgen::streams("239.10.1.1+2:6001+", Chain::SINK_IF)
        .expect(20_000)
        .via("ring")
        .recv(&c.sink)
        .expect("recv");
    // One stream through the kernel's UDP send path, one datagram at a
    // time (its checksums left for the hardware: partial sums); one as
    // whole frames in bursts (full checksums).
    let spaced = Mcrgen::streams("239.1.1.1:5001", Chain::GEN_IF)
        .count(20_000)
        .rate("10k")
        .via("udp")
        .arg("--pace")
        .arg("each");
    let burst = Mcrgen::streams("239.1.1.2:5002", Chain::GEN_IF)
        .count(20_000)
        .rate("10k")
        .via("frames")
        .arg("--first-id")
        .arg(1);
    for sender in [spaced, burst] {
        assert_eq!(sender.send(&c.generator, MINUTES).expect("send").packets, 20_000);
    }
    complete(rx.finish(MINUTES).expect("recv done"), 20_000, &relay);
    let s = relay.stats().expect("stats");
    for name in ["spaced", "burst"] {
        let r = rule(&s.rules, name);
        assert_eq!((r.datapath.as_str(), r.packets), ("ebpf", 20_000), "{r:?}");
        assert_eq!(r.outputs[0].packets, 20_000, "{r:?}");
    }
    let d = s.datapath.expect("the eBPF data path runs");
    assert_eq!((d.rx_frames, d.tx_packets), (40_000, 40_000), "{d:?}");
    assert_eq!(d.interfaces, vec![Chain::RELAY_IN_IF.to_string()]);
    let taken: u64 = s.workers.iter().map(|w| w.rx_frames).sum();
    assert_eq!(taken, 0, "the workers' rings were kept out of it: {:?}", s.workers);
    // Consumed: none of the 40,000 forwarded frames went on up the relay
    // host's IP stack (what it did receive meanwhile is its own control
    // traffic: a few IGMP reports and queries).
    let ip_in_grew = ip_in() - ip_in_before;
    assert!(
        ip_in_grew < 100,
        "the relay's IP stack received {ip_in_grew} datagrams while 40,000 were forwarded"
    );
    // ... and the input interface counts none of them as dropped.
    assert_eq!(rx_dropped(), rx_dropped_before, "the input's rx_dropped");
}

#[test]
fn the_program_leaves_with_its_last_rule_and_with_mcrd_even_when_mcrd_is_killed() {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("dp-life").expect("chain");
    let mut relay = Relay::start(&c.relay, &[]).expect("mcrd");
    let on_input = || programs_on(&c.relay, Chain::RELAY_IN_IF);
    assert_eq!(on_input(), 0, "no rule, no program");
    relay
        .add_rule("a", "veth1:239.1.1.1:5001", &["veth2:239.10.1.1:6001"])
        .expect("rule added");
    relay
        .add_rule("b", "veth1:239.1.1.2:5002", &["veth2:239.10.1.2:6002"])
        .expect("rule added");
    assert_eq!(on_input(), 1, "one program for every rule of the interface");
    relay.ctl_ok(&["remove", "a"]).expect("remove");
    assert_eq!(on_input(), 1, "rule b still uses it");
    relay.ctl_ok(&["remove", "b"]).expect("remove");
    assert_eq!(on_input(), 0, "gone with the last rule");
    relay
        .add_rule("a", "veth1:239.1.1.1:5001", &["veth2:239.10.1.1:6001"])
        .expect("rule added");
    assert_eq!(on_input(), 1);
    // Killed: no chance to clean up. The kernel closes its descriptors,
    // the link among them, and the program leaves the interface.
    relay.signal(Signal::Kill).expect("kill -9 mcrd");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while on_input() != 0 {
        assert!(std::time::Instant::now() < deadline, "the program outlived mcrd");
        std::thread::sleep(Duration::from_millis(50));
    }
    // And nothing is black-holed: a program of the host that listens to
    // the input gets every packet.
    let got = every_packet_crosses(
        &c.generator,
        Chain::GEN_IF,
        "239.1.1.1:5001",
        &c.relay,
        Chain::RELAY_IN_IF,
        "239.1.1.1:5001",
        3000,
        "3k",
    )
    .expect("every packet crosses");
    assert_eq!(got.report.total.received, 3000);
}

#[test]
fn a_program_of_the_host_that_listens_to_an_input_still_gets_every_packet() {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("dp-local").expect("chain");
    c.add_ipv6().expect("IPv6 addresses");
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    // The frame is made IPv6 for the second output, and IPv4 again for the
    // host's listener.
    relay
        .add_rule(
            "a",
            "veth1:239.1.1.1:5001",
            &["veth2:239.10.1.1:6001", "veth2:[ff3e::30]:6005"],
        )
        .expect("rule added");
    // Both listen: a socket on the relay's host, joined on its input, and
    // the sink behind the relay.
    let local = Mcrgen::streams("239.1.1.1:5001", Chain::RELAY_IN_IF)
        .expect(10_000)
        .recv(&c.relay)
        .expect("recv");
    let sink = Mcrgen::streams("239.10.1.1:6001,[ff3e::30]:6005", Chain::SINK_IF)
        .ids("0")
        .expect(10_000)
        .via("ring")
        .recv(&c.sink)
        .expect("recv");
    Mcrgen::streams("239.1.1.1:5001", Chain::GEN_IF)
        .count(10_000)
        .rate("10k")
        .send(&c.generator, MINUTES)
        .expect("send");
    let got = sink.finish(MINUTES).expect("sink");
    assert_eq!(got.report.streams.len(), 2, "both outputs");
    complete(got, 10_000, &relay);
    let got = local.finish(MINUTES).expect("local");
    assert_eq!(got.code, Some(0), "{:?}", got.report.problems);
    assert_eq!(
        got.report.total.received, 10_000,
        "the host's own listener lost nothing"
    );
    assert_eq!(rule(&relay.stats().expect("stats").rules, "a").datapath, "ebpf");
}

#[test]
fn rules_the_kernel_cannot_carry_are_forwarded_by_the_workers_beside_it() {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("dp-mixed").expect("chain");
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    let unicast_out = format!("veth2:{}:7002", Chain::SINK_ADDR);
    relay
        .add_rule("fast", "veth1:239.1.1.1:5001", &["veth2:239.10.1.1:6001"])
        .expect("rule added");
    relay
        .add_rule(
            "unicast",
            "veth1:239.1.1.2:5002",
            &["veth2:239.10.1.2:6002", &unicast_out],
        )
        .expect("rule added");
    // Groups 239.FIRST.0.1 and on, counting across the third octet.
    let wide = |first: u8, n: u32, port: u16| -> Vec<String> {
        let base = u32::from(std::net::Ipv4Addr::new(239, first, 0, 1));
        (0..n)
            .map(|i| format!("veth2:{}:{port}", std::net::Ipv4Addr::from(base + i)))
            .collect()
    };
    let (too_wide, widest) = (wide(11, 257, 6003), wide(12, 256, 6004));
    fn refs(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }
    relay
        .add_rule("too-wide", "veth1:239.1.1.3:5003", &refs(&too_wide))
        .expect("rule added");
    relay
        .add_rule("widest", "veth1:239.1.1.4:5004", &refs(&widest))
        .expect("rule added");
    let n = "1000";
    let receivers = [
        ("239.10.1.1:6001".to_string(), "0"),
        (format!("239.10.1.2:6002,{}:7002", Chain::SINK_ADDR), "1"),
        ("239.11.0.1+257:6003".to_string(), "2"),
        ("239.12.0.1+256:6004".to_string(), "3"),
    ];
    let rxs: Vec<Receiver> = receivers
        .iter()
        .map(|(streams, id)| {
            Mcrgen::streams(streams, Chain::SINK_IF)
                .ids(id)
                .expect(n)
                .recv(&c.sink)
                .expect("recv")
        })
        .collect();
    Mcrgen::streams("239.1.1.1+4:5001+", Chain::GEN_IF)
        .count(n)
        .rate("800")
        .send(&c.generator, MINUTES)
        .expect("send");
    for rx in rxs {
        let got = rx.finish(MINUTES).expect("recv done");
        assert_eq!(got.code, Some(0), "{:?}\n{}", got.report.problems, relay.log());
    }
    let s = relay.stats().expect("stats");
    let path = |name: &str| {
        let r = rule(&s.rules, name);
        (r.datapath.clone(), r.datapath_reason.clone())
    };
    assert_eq!(path("fast"), ("ebpf".into(), None));
    assert_eq!(path("widest"), ("ebpf".into(), None));
    assert_eq!(path("unicast"), ("packet".into(), Some("a unicast output".into())));
    assert_eq!(
        path("too-wide"),
        (
            "packet".into(),
            Some("257 outputs (the kernel path takes up to 256)".into())
        )
    );
    let d = s.datapath.expect("the eBPF data path runs");
    assert_eq!((d.rx_frames, d.tx_packets), (2000, 1000 + 1000 * 256), "{d:?}");
    let taken: u64 = s.workers.iter().map(|w| w.rx_frames).sum();
    assert_eq!(taken, 2000, "the workers took the other two rules' packets, no more");
}

#[test]
fn the_packet_datapath_forwards_every_rule_with_the_workers_and_loads_no_program() {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("dp-packet").expect("chain");
    let relay = Relay::start(&c.relay, &["--datapath", "packet"]).expect("mcrd");
    relay
        .add_rule("a", "veth1:239.1.1.1:5001", &["veth2:239.10.1.1:6001"])
        .expect("rule added");
    assert_eq!(programs_on(&c.relay, Chain::RELAY_IN_IF), 0);
    let rx = c
        .expect_at_sink("239.10.1.1:6001", 10_000, &["--via", "ring"])
        .expect("recv");
    Mcrgen::streams("239.1.1.1:5001", Chain::GEN_IF)
        .count(10_000)
        .rate("10k")
        .via("udp")
        .arg("--pace")
        .arg("each")
        .send(&c.generator, MINUTES)
        .expect("send");
    complete(rx.finish(MINUTES).expect("recv done"), 10_000, &relay);
    let s = relay.stats().expect("stats");
    assert!(s.datapath.is_none() && s.datapath_missing.is_none(), "{s:?}");
    assert_eq!(rule(&s.rules, "a").datapath, "packet");
    let taken: u64 = s.workers.iter().map(|w| w.rx_frames).sum();
    assert_eq!(taken, 10_000);
}

#[test]
fn an_output_that_cannot_keep_up_drops_what_it_cannot_take_and_says_why() {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("dp-overload").expect("chain");
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    // A slow link: the output interface sends 20 Mb/s and queues little,
    // and every packet is sent sixteen times.
    let tbf = [
        "qdisc",
        "replace",
        "dev",
        Chain::RELAY_OUT_IF,
        "root",
        "tbf",
        "rate",
        "20mbit",
        "burst",
        "16kb",
        "latency",
        "5ms",
    ];
    c.relay.exec("tc", tbf).expect("a slow output link");
    let outs: Vec<String> = (1..=16).map(|i| format!("veth2:239.10.1.{i}:6001")).collect();
    let refs: Vec<&str> = outs.iter().map(String::as_str).collect();
    relay
        .add_rule("feed", "veth1:239.1.1.1:5001", &refs)
        .expect("rule added");
    let sent = Mcrgen::streams("239.1.1.1:5001", Chain::GEN_IF)
        .duration("8s")
        .rate("max")
        .size(64)
        .send(&c.generator, MINUTES)
        .expect("send");
    std::thread::sleep(Duration::from_millis(500));
    let s = relay.stats().expect("stats");
    let r = rule(&s.rules, "feed");
    assert_eq!(r.datapath, "ebpf");
    assert!(
        r.packets > 0 && r.packets <= sent.packets,
        "{} of {}",
        r.packets,
        sent.packets
    );
    let mut queue_full = 0;
    for o in &r.outputs {
        // Every packet taken was sent to each output or dropped there, by
        // reason, and nothing counted twice.
        let dropped: u64 = o.drops.values().sum();
        assert_eq!(r.packets, o.packets + dropped, "{o:?}");
        queue_full += o.drops["queue_full"];
    }
    eprintln!(
        "offered {} packets at {:.0} pps; taken {}, queue_full {queue_full}",
        sent.packets, sent.achieved_pps, r.packets
    );
    assert!(queue_full > 0, "the overload shows where it happened: {r:?}");
    // And once it is over, every packet crosses again, to every output.
    c.relay
        .exec("tc", ["qdisc", "del", "dev", Chain::RELAY_OUT_IF, "root"])
        .expect("the link back to speed");
    let rx = Mcrgen::streams("239.10.1.1+16:6001", Chain::SINK_IF)
        .ids("0")
        .expect(5000)
        .via("ring")
        .recv(&c.sink)
        .expect("recv");
    Mcrgen::streams("239.1.1.1:5001", Chain::GEN_IF)
        .count(5000)
        .rate("5k")
        .send(&c.generator, MINUTES)
        .expect("send");
    complete(rx.finish(MINUTES).expect("recv done"), 5000, &relay);
}
