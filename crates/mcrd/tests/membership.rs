//! Group memberships are real: behind a bridge that snoops IGMP and has a
//! querier, a stream reaches the relay only while a rule has it joined.

use std::time::{Duration, Instant};

use mcr_core::control::Reply;
use mcr_testbed::presets::DualBridge;
use mcr_testbed::relay::Relay;
use mcr_testbed::traffic::{Mcrgen, every_packet_crosses};
use mcr_testbed::{BridgeOptions, Ns, traffic_lock};

const MINUTES: Duration = Duration::from_secs(180);

fn snooping() -> BridgeOptions {
    BridgeOptions {
        snooping: true,
        querier: true,
    }
}

fn rx_packets(ns: &Ns, ifname: &str) -> u64 {
    ns.exec("cat", [format!("/sys/class/net/{ifname}/statistics/rx_packets")])
        .expect("read counter")
        .trim()
        .parse()
        .expect("a number")
}

/// Frames that reached `ifname` over one second.
fn arriving(ns: &Ns, ifname: &str) -> u64 {
    let a = rx_packets(ns, ifname);
    std::thread::sleep(Duration::from_secs(1));
    rx_packets(ns, ifname) - a
}

#[test]
fn a_stream_reaches_the_relay_only_while_it_is_joined() {
    let _lock = traffic_lock().expect("lock");
    let d = DualBridge::new("joins-are-real", 1, 1, snooping()).expect("dual bridge");
    let relay = Relay::start(&d.relay, &[]).expect("mcrd");
    let sender_ns = d.senders[0].clone();
    let sender = std::thread::spawn(move || {
        Mcrgen::streams("239.1.1.1:5001", DualBridge::HOST_IF)
            .duration("25s")
            .rate("500")
            .send(&sender_ns, MINUTES)
            .expect("send")
    });
    // 500 pps are sent. A new querier floods unknown groups for one query
    // response interval; once it has settled, the bridge keeps the stream
    // from a port that has not joined.
    let start = Instant::now();
    loop {
        let before = arriving(&d.relay, DualBridge::RELAY_IN_IF);
        if before < 50 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "{before} frames a second still reach the relay before it joined"
        );
    }

    relay
        .add_rule("feed", "in0:239.1.1.1:5001", &["out0:239.10.1.1:6001"])
        .expect("add");
    let rx = Mcrgen::streams("239.10.1.1:6001", DualBridge::HOST_IF)
        .arg("--late-join")
        .duration("3s")
        .recv(&d.sinks[0])
        .expect("recv");
    let got = rx.finish(MINUTES).expect("recv done");
    assert!(got.report.total.received > 500, "{:?}", got.report.total);
    assert_eq!((got.report.total.lost, got.report.total.duplicated), (0, 0));

    relay.ctl_ok(&["remove", "feed"]).expect("remove");
    // The bridge prunes the port after its last-member queries go
    // unanswered (a few seconds).
    let start = Instant::now();
    loop {
        let now = arriving(&d.relay, DualBridge::RELAY_IN_IF);
        if now < 50 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "still {now} frames a second after leaving"
        );
    }
    sender.join().expect("sender");
}

#[test]
fn fifty_rules_added_while_traffic_flows_each_start_their_stream_cleanly() {
    let _lock = traffic_lock().expect("lock");
    let d = DualBridge::new("fifty-live-adds", 1, 1, snooping()).expect("dual bridge");
    assert_eq!(
        d.relay.sysctl_get("net.ipv4.igmp_max_memberships").expect("sysctl"),
        "20"
    );
    let relay = Relay::start(&d.relay, &[]).expect("mcrd");
    let rx = Mcrgen::streams("239.10.2.1+50:6001+", DualBridge::HOST_IF)
        .arg("--late-join")
        .arg("--idle-timeout")
        .arg("3s")
        .recv(&d.sinks[0])
        .expect("recv");
    let sender_ns = d.senders[0].clone();
    let sender = std::thread::spawn(move || {
        Mcrgen::streams("239.1.2.1+50:5001+", DualBridge::HOST_IF)
            .count(2000)
            .arg("--rate-per-stream")
            .arg("200")
            .send(&sender_ns, MINUTES)
            .expect("send")
    });
    std::thread::sleep(Duration::from_secs(1));
    for i in 1..=50 {
        relay
            .ctl_ok(&[
                "add",
                &format!("s{i}"),
                "--input",
                &format!("in0:239.1.2.{i}:{}", 5000 + i),
                "--output",
                &format!("out0:239.10.2.{i}:{}", 6000 + i),
            ])
            .expect("add");
    }
    let Reply::Rules { rules, .. } = relay.ask(&["list"]).expect("list") else {
        panic!("rules reply")
    };
    assert_eq!(rules.len(), 50);
    assert!(
        rules.iter().all(|r| r.joins.len() == 1 && r.joins[0].joined),
        "{rules:?}"
    );
    sender.join().expect("sender");
    let got = rx.finish(MINUTES).expect("recv done");
    for (i, s) in got.report.streams.iter().enumerate() {
        assert!(s.received > 0, "stream {i} never started");
        assert_eq!(
            (s.lost, s.duplicated, s.reordered, s.corrupted),
            (0, 0, 0, 0),
            "stream {i}: {s:?}"
        );
        assert_eq!(s.highest_seq, Some(1999), "stream {i} did not run to its end: {s:?}");
    }
    assert_eq!(
        d.relay.sysctl_get("net.ipv4.igmp_max_memberships").expect("sysctl"),
        "20"
    );
}

#[test]
fn the_dual_bridge_is_crossed_with_no_route_between_its_segments() {
    let _lock = traffic_lock().expect("lock");
    let d = DualBridge::new("dual-bridge-relay", 1, 1, snooping()).expect("dual bridge");
    // Neither side can reach the other by routing.
    assert!(
        d.senders[0]
            .exec("ping", ["-c", "1", "-W", "1", &DualBridge::sink_addr(0).to_string()])
            .is_err()
    );
    let relay = Relay::start(&d.relay, &[]).expect("mcrd");
    relay
        .add_rule("cross", "in0:239.1.1.1:5001", &["out0:239.10.1.1:6001"])
        .expect("add");
    every_packet_crosses(
        &d.senders[0],
        DualBridge::HOST_IF,
        "239.1.1.1:5001",
        &d.sinks[0],
        DualBridge::HOST_IF,
        "239.10.1.1:6001",
        10_000,
        "10k",
    )
    .expect("every packet crosses");
}

/// The groups joined on `ifname`, from the namespace's `/proc/net/igmp`
/// (without 224.0.0.0/24, which every interface joins by itself).
fn igmp_groups(ns: &Ns, ifname: &str) -> Vec<std::net::Ipv4Addr> {
    let text = ns.exec("cat", ["/proc/net/igmp"]).expect("igmp");
    let mut device = String::new();
    let mut out = Vec::new();
    for line in text.lines().skip(1) {
        if !line.starts_with('\t') {
            // "Idx\tDevice    : Count Querier"
            device = line.split_whitespace().nth(1).unwrap_or("").to_string();
        } else if device == ifname {
            // The group as the kernel holds it, in network byte order,
            // printed as a host-order hexadecimal number.
            let hex = line.split_whitespace().next().expect("group");
            let raw = u32::from_str_radix(hex, 16).expect("hex");
            let g = std::net::Ipv4Addr::from(raw.to_le_bytes());
            if g.octets()[..3] != [224, 0, 0] {
                out.push(g);
            }
        }
    }
    out
}

/// The (group, source) filters on `ifname`, from `/proc/net/mcfilter`.
fn source_filters(ns: &Ns, ifname: &str) -> Vec<(std::net::Ipv4Addr, std::net::Ipv4Addr)> {
    let text = ns.exec("cat", ["/proc/net/mcfilter"]).expect("mcfilter");
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(1) == Some(&ifname)).then(|| {
                let hex = |s: &str| u32::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex");
                (hex(f[2]).into(), hex(f[3]).into())
            })
        })
        .collect()
}

#[test]
fn any_source_and_source_specific_joins_of_one_group_live_side_by_side() {
    use mcr_testbed::presets::Chain;
    let c = Chain::new("joins-mixed").expect("chain");
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    let group: std::net::Ipv4Addr = "239.1.1.1".parse().expect("group");
    let joined = |args: &[&str]| match relay.ask(args).expect("add") {
        Reply::Added { joins, .. } => {
            assert!(joins.iter().all(|j| j.joined), "{joins:?}");
            assert_eq!(joins.len(), 1);
        }
        other => panic!("{other:?}"),
    };
    let add_any = [
        "add",
        "any",
        "--input",
        "veth1:239.1.1.1:5001",
        "--output",
        "veth2:239.10.1.1:6001",
    ];
    let add_one = [
        "add",
        "one",
        "--input",
        "veth1:239.1.1.1:5001,source=10.0.0.1",
        "--output",
        "veth2:239.10.1.2:6001",
    ];
    let sender: std::net::Ipv4Addr = "10.0.0.1".parse().expect("source");
    // Both orders: (*,G) then (S,G), and (S,G) then (*,G); each time,
    // removing either join leaves the other in place.
    for (first, second, first_is_specific) in [(&add_any, &add_one, false), (&add_one, &add_any, true)] {
        joined(first);
        joined(second);
        assert_eq!(igmp_groups(&c.relay, Chain::RELAY_IN_IF), vec![group]);
        assert_eq!(source_filters(&c.relay, Chain::RELAY_IN_IF), vec![(group, sender)]);
        relay.ctl_ok(&["remove", first[1]]).expect("remove");
        assert_eq!(
            igmp_groups(&c.relay, Chain::RELAY_IN_IF),
            vec![group],
            "removing `{}` left the group",
            first[1]
        );
        let filters = source_filters(&c.relay, Chain::RELAY_IN_IF);
        if first_is_specific {
            assert!(
                filters.is_empty(),
                "the source-specific join went with its rule: {filters:?}"
            );
        } else {
            assert_eq!(filters, vec![(group, sender)], "the source-specific join stays");
        }
        relay.ctl_ok(&["remove", second[1]]).expect("remove");
        assert!(igmp_groups(&c.relay, Chain::RELAY_IN_IF).is_empty());
    }
}
