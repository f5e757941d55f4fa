//! IPv6 and MLD, IPv4 ↔ IPv6 translation, source-specific inputs, DSCP,
//! VLAN trunks and unicast inputs of both families: real traffic through
//! namespaces, every packet checked by `mcrgen recv --expect` (sequence,
//! payload, checksums), and the wire checked where it says more.

use std::collections::BTreeMap;
use std::time::Duration;

use mcr_core::control::Reply;
use mcr_core::forward::{RxChecksum, parse};
use mcr_testbed::capture::Capture;
use mcr_testbed::presets::Chain;
use mcr_testbed::relay::Relay;
use mcr_testbed::traffic::{Mcrgen, Received, Receiver};
use mcr_testbed::{Ns, traffic_lock};
use mcrgen::wrap::test_payload_id;

const MINUTES: Duration = Duration::from_secs(180);

/// A chain with IPv6 as well as IPv4 on every link. The generator's
/// kernel computes UDP checksums in full (no transmit offload), so the
/// relay receives them complete and updates them incrementally, the path
/// real senders take.
fn dual_chain(tag: &str) -> Chain {
    let c = Chain::new(tag).expect("chain");
    c.add_ipv6().expect("IPv6 addresses");
    c.generator
        .exec("ethtool", ["-K", Chain::GEN_IF, "tx", "off"])
        .expect("checksums computed by the sender");
    c
}

/// Checks a frame's UDP checksum independently of MCR's own code: the
/// ones' complement sum over the pseudo-header, header and payload of an
/// untagged IPv4 (no options) or IPv6 (no extension headers) frame must
/// be 0xffff, and an IPv6 one must not be absent.
fn udp_checksum_verifies(f: &[u8]) -> bool {
    let sum = |b: &[u8]| -> u32 {
        b.chunks(2)
            .map(|c| (u32::from(c[0]) << 8) | u32::from(c.get(1).copied().unwrap_or(0)))
            .sum()
    };
    let (pseudo, udp) = match u16::from_be_bytes([f[12], f[13]]) {
        0x0800 => {
            let udp = &f[34..];
            if udp[6..8] == [0, 0] {
                return true;
            }
            (sum(&f[26..34]) + 17 + udp.len() as u32, udp)
        }
        0x86dd => {
            let udp = &f[54..];
            if udp[6..8] == [0, 0] {
                return false;
            }
            (sum(&f[22..54]) + 17 + udp.len() as u32, udp)
        }
        _ => return false,
    };
    let mut s = pseudo + sum(udp);
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s == 0xffff
}

/// Sends `count` packets to each of `streams` from the generator.
fn send_from(c: &Chain, streams: &str, count: u64, rate: &str, extra: &[&str]) {
    let sender = extra.iter().fold(
        Mcrgen::streams(streams, Chain::GEN_IF).count(count).rate(rate),
        |m, a| m.arg(a),
    );
    let sent = sender.send(&c.generator, MINUTES).expect("send");
    assert_eq!(sent.packets % count, 0, "{sent:?}");
}

/// Waits for `rx` and fails unless every stream delivered all it expected.
fn complete(rx: Receiver, relay: &Relay) -> Received {
    let got = rx.finish(MINUTES).expect("recv done");
    assert_eq!(
        got.code,
        Some(0),
        "{:?}\n{}\n{}",
        got.report.problems,
        got.stderr,
        relay.log()
    );
    got
}

/// Starts `mcrgen recv` on the sink: each of `streams` must deliver
/// `expect` packets carrying stream ids `ids` (`--ids`), each once, in
/// order, intact; `extra` are more options.
fn expect_at(c: &Chain, streams: &str, ids: &str, expect: u64, extra: &[&str]) -> Receiver {
    let mut args = vec!["--ids", ids];
    args.extend_from_slice(extra);
    c.expect_at_sink(streams, expect, &args).expect("recv")
}

fn worker_drops(relay: &Relay, reason: &str) -> u64 {
    let s = relay.stats().expect("stats");
    s.workers
        .iter()
        .map(|w| w.drops.get(reason).copied().unwrap_or(0))
        .sum()
}

#[test]
fn an_ipv6_chain_carries_every_packet_with_its_checksum_and_a_33_33_mac() {
    let _lock = traffic_lock().expect("lock");
    let c = dual_chain("v6-chain");
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    relay
        .add_rule("v6", "veth1:[ff3e::1]:5001", &["veth2:[ff3e::10]:6001"])
        .expect("rule added");
    let cap = Capture::start_limited(&c.sink, Chain::SINK_IF, "ip6 and udp", Some(2000)).expect("capture");
    let rx = expect_at(&c, "[ff3e::10]:6001", "0+", 100000, &[]);
    send_from(&c, "[ff3e::1]:5001", 100_000, "40k", &["--ttl", "9", "--size", "512"]);
    let got = complete(rx, &relay);
    assert_eq!(got.report.total.received, 100_000);
    // On the wire: the group's 33:33 MAC, the egress interface's global
    // address, the hop limit one less, and a UDP checksum that verifies
    // (IPv6 requires it; `parse` refuses a zero one).
    let frames = cap.stop().expect("captured");
    assert_eq!(frames.len(), 2000);
    let egress_mac = c.relay.mac(Chain::RELAY_OUT_IF).expect("mac");
    for f in &frames {
        let d = parse(f, f.len(), RxChecksum::Unknown, None).expect("a valid IPv6 UDP frame");
        assert_eq!(&f[0..6], &[0x33, 0x33, 0, 0, 0, 0x10]);
        assert_eq!(&f[12..14], &[0x86, 0xdd]);
        assert_eq!(
            mcr_core::wire::ethernet::format_mac(&f[6..12].try_into().expect("6 bytes")),
            egress_mac
        );
        assert_eq!((d.dst.to_string(), d.dst_port), ("ff3e::10".to_string(), 6001));
        assert_eq!(d.src.to_string(), Chain::RELAY_OUT_ADDR6);
        assert_eq!(d.ttl, 8);
        assert!(udp_checksum_verifies(f), "the UDP checksum, summed independently");
    }
    let s = relay.stats().expect("stats");
    assert_eq!(s.rules[0].outputs[0].packets, 100_000);
}

/// The headers of each translated frame on the sink's wire, by UDP port
/// and the sequence number mcrgen put in its payload; relayed with
/// `datapath` (`ebpf` or `packet`), whose stats must say it carried the
/// two rules.
fn translated_with(datapath: &str) -> BTreeMap<(u16, u64), Vec<u8>> {
    let c = dual_chain(&format!("v4v6-{datapath}"));
    let relay = Relay::start(&c.relay, &["--datapath", datapath]).expect("mcrd");
    // Each rule's own version first, then the other's: the program
    // translates once, after the outputs that need none.
    relay
        .add_rule(
            "four-to-six",
            "veth1:239.1.1.1:5001",
            &["veth2:[ff3e::20]:6001", "veth2:239.10.1.1:6003,ttl=5"],
        )
        .expect("rule added");
    relay
        .add_rule(
            "six-to-four",
            "veth1:[ff3e::2]:5002",
            &["veth2:239.10.1.2:6002,dscp=af41", "veth2:239.10.1.3:6004,ttl=3"],
        )
        .expect("rule added");
    let cap = Capture::start(
        &c.sink,
        Chain::SINK_IF,
        "udp port 6001 or udp port 6002 or udp port 6004",
    )
    .expect("capture");
    let to6 = expect_at(&c, "[ff3e::20]:6001", "0", 5000, &[]);
    let to4 = expect_at(&c, "239.10.1.1:6003", "0", 5000, &[]);
    let six_to4 = expect_at(&c, "239.10.1.2:6002,239.10.1.3:6004", "7", 5000, &[]);
    send_from(&c, "239.1.1.1:5001", 5000, "5k", &["--size", "1200"]);
    send_from(&c, "[ff3e::2]:5002", 5000, "5k", &["--size", "1200", "--first-id", "7"]);
    // mcrgen checks each payload's bytes against what its sequence number
    // says was sent: byte-identical, or counted corrupted.
    for rx in [to6, to4, six_to4] {
        let got = complete(rx, &relay);
        assert_eq!(got.report.total.corrupted, 0);
    }
    let s = relay.stats().expect("stats");
    for name in ["four-to-six", "six-to-four"] {
        let r = s.rules.iter().find(|r| r.name == name).expect("the rule");
        assert_eq!((r.datapath.as_str(), &r.datapath_reason), (datapath, &None), "{name}");
    }
    let frames = cap.stop().expect("captured");
    let mut headers = BTreeMap::new();
    for f in &frames {
        let d = parse(f, f.len(), RxChecksum::Unknown, None).expect("valid checksums");
        assert!(udp_checksum_verifies(f), "the UDP checksum, summed independently");
        assert_eq!(d.payload_len, 1200);
        let (_, seq) = test_payload_id(&f[d.payload_at..]).expect("an mcrgen payload");
        if d.dst.is_ipv6() {
            assert_eq!(
                (d.dst_port, d.src.to_string()),
                (6001, Chain::RELAY_OUT_ADDR6.to_string())
            );
        } else {
            assert_eq!(d.src, std::net::IpAddr::from(Chain::RELAY_OUT_ADDR));
        }
        // What differs from run to run whoever relays: the relay's MAC (each
        // run's veth has its own), the sender's port and with it the UDP
        // checksum (verified above).
        let mut h = f[..d.payload_at].to_vec();
        h[6..12].fill(0);
        let udp = d.payload_at - 8;
        h[udp..udp + 2].fill(0);
        h[udp + 6..udp + 8].fill(0);
        let fresh = headers.insert((d.dst_port, seq), h);
        assert!(fresh.is_none(), "one frame of {seq} to port {}", d.dst_port);
    }
    assert_eq!(headers.len(), 15000, "every frame of the three translated outputs");
    headers
}

#[test]
fn ipv4_goes_out_as_ipv6_and_ipv6_as_ipv4_alike_on_both_data_paths() {
    let _lock = traffic_lock().expect("lock");
    let kernel = translated_with("ebpf");
    let workers = translated_with("packet");
    // The same packets, each with the same headers.
    let differ: Vec<_> = kernel
        .iter()
        .filter(|(k, h)| workers.get(k) != Some(h))
        .take(3)
        .map(|(k, h)| (k, h, workers.get(k)))
        .collect();
    assert!(
        differ.is_empty(),
        "the eBPF path's frames differ from the workers': {differ:02x?}"
    );
    assert_eq!(kernel.len(), workers.len());
}

/// The IPv6 groups joined on `ifname`, from `/proc/net/igmp6`.
fn mld_groups(ns: &Ns, ifname: &str) -> Vec<String> {
    let text = ns.exec("cat", ["/proc/net/igmp6"]).expect("igmp6");
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 2 && f[1] == ifname).then(|| f[2].to_string())
        })
        .filter(|g| g.starts_with("ff3e"))
        .collect()
}

/// UDP sockets bound to `::1` in `ns`: the supervisor's membership
/// sockets.
fn loopback_v6_sockets(ns: &Ns) -> usize {
    let text = ns.exec("cat", ["/proc/net/udp6"]).expect("udp6");
    text.lines()
        .filter(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|a| a.starts_with("00000000000000000000000001000000:"))
        })
        .count()
}

#[test]
fn fifty_ipv6_streams_are_joined_with_mld_beyond_what_one_socket_holds() {
    let _lock = traffic_lock().expect("lock");
    let c = dual_chain("mld50");
    // Each IPv6 membership takes socket option memory: with 2 KiB a
    // socket, one holds about 36, and fifty need a second. So does a
    // socket filter: the eBPF ring filter (about 5 KiB) does not fit in 2
    // KiB, so this test of the memberships runs on the packet data path,
    // whose classic filter does (the joins are the supervisor's, the same
    // on both).
    c.relay.sysctl("net.core.optmem_max", "2048").expect("sysctl");
    let relay = Relay::start(&c.relay, &["--datapath", "packet"]).expect("mcrd");
    for i in 1..=50 {
        relay
            .add_rule(
                &format!("s{i}"),
                &format!("veth1:[ff3e::1:{i:x}]:{}", 5000 + i),
                &[&format!("veth2:[ff3e::2:{i:x}]:{}", 6000 + i)],
            )
            .expect("rule added");
    }
    let Reply::Rules { rules, .. } = relay.ask(&["list"]).expect("list") else {
        panic!("rules reply")
    };
    assert!(
        rules.iter().all(|r| r.joins.len() == 1 && r.joins[0].joined),
        "{rules:?}"
    );
    let joined = mld_groups(&c.relay, Chain::RELAY_IN_IF);
    assert_eq!(joined.len(), 50, "{joined:?}");
    assert!(
        loopback_v6_sockets(&c.relay) >= 2,
        "the joins did not need a second socket: the test does not test the limit"
    );
    let rx = expect_at(&c, "[ff3e::2:1]+50:6001+", "0+", 400, &[]);
    send_from(&c, "[ff3e::1:1]+50:5001+", 400, "10k", &[]);
    let got = complete(rx, &relay);
    assert_eq!(got.report.total.received, 50 * 400);
}

#[test]
fn a_source_specific_input_takes_only_its_sources_and_counts_the_others() {
    let _lock = traffic_lock().expect("lock");
    let c = dual_chain("ssm");
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    // Two rules for one group, each for its own sources, to their own
    // outputs; a third sender to the group is no rule's.
    relay
        .add_rule(
            "from-a",
            "veth1:232.1.1.1:5001,source=10.0.0.1,source=10.0.0.5",
            &["veth2:239.10.1.1:6001"],
        )
        .expect("rule added");
    relay
        .add_rule(
            "from-b",
            "veth1:232.1.1.1:5001,source=10.0.0.3",
            &["veth2:239.10.1.2:6002"],
        )
        .expect("rule added");
    relay
        .add_rule("v6", "veth1:[ff3e::5]:5005,source=fd00::1", &["veth2:[ff3e::50]:6005"])
        .expect("rule added");
    // The joins are source-specific (IGMPv3 / MLDv2 INCLUDE lists).
    let Reply::Rules { rules, .. } = relay.ask(&["list"]).expect("list") else {
        panic!("rules reply")
    };
    let sources: Vec<Vec<String>> = rules
        .iter()
        .map(|r| {
            assert!(r.joins.iter().all(|j| j.joined), "{r:?}");
            r.joins.iter().map(|j| format!("{:?}", j.source)).collect()
        })
        .collect();
    assert_eq!(
        sources,
        vec![
            vec!["Some(10.0.0.1)".to_string(), "Some(10.0.0.5)".to_string()],
            vec!["Some(10.0.0.3)".to_string()],
            vec!["Some(fd00::1)".to_string()],
        ]
    );
    let filters = c.relay.exec("cat", ["/proc/net/mcfilter"]).expect("mcfilter");
    for src in ["0x0a000001", "0x0a000005", "0x0a000003"] {
        let line = format!("veth1 0xe8010101 {src}      1      0");
        assert!(filters.contains(&line), "no INCLUDE filter for {src}:\n{filters}");
    }
    let filters6 = c.relay.exec("cat", ["/proc/net/mcfilter6"]).expect("mcfilter6");
    assert!(
        filters6.contains("ff3e0000000000000000000000000005 fd000000000000000000000000000001"),
        "{filters6}"
    );
    let a = expect_at(&c, "239.10.1.1:6001", "1", 3000, &[]);
    let b = expect_at(&c, "239.10.1.2:6002", "3", 3000, &[]);
    let six = expect_at(&c, "[ff3e::50]:6005", "0", 3000, &[]);
    for a in ["10.0.0.3/24", "10.0.0.4/24"] {
        c.generator.addr(Chain::GEN_IF, a).expect("sender address");
    }
    // The stranger first: had it been forwarded, it would show as a wrong
    // stream id at a receiver before their own packets arrive.
    let before = worker_drops(&relay, "wrong_source");
    send_from(
        &c,
        "232.1.1.1:5001",
        3000,
        "5k",
        &["--source", "10.0.0.4", "--first-id", "4"],
    );
    send_from(
        &c,
        "232.1.1.1:5001",
        3000,
        "5k",
        &["--source", "10.0.0.1", "--first-id", "1"],
    );
    send_from(
        &c,
        "232.1.1.1:5001",
        3000,
        "5k",
        &["--source", "10.0.0.3", "--first-id", "3"],
    );
    // An IPv6 sender from another address of the generator: not fd00::1.
    c.generator.addr6(Chain::GEN_IF, "fd00::9/64").expect("second address");
    send_from(
        &c,
        "[ff3e::5]:5005",
        3000,
        "5k",
        &["--source", "fd00::9", "--first-id", "9"],
    );
    send_from(&c, "[ff3e::5]:5005", 3000, "5k", &["--source", "fd00::1"]);
    for rx in [a, b, six] {
        let got = complete(rx, &relay);
        assert_eq!((got.report.total.received, got.report.total.wrong_stream), (3000, 0));
    }
    assert_eq!(worker_drops(&relay, "wrong_source") - before, 6000);
}

#[test]
fn dscp_is_set_on_one_output_and_kept_on_another_on_the_wire() {
    let _lock = traffic_lock().expect("lock");
    let c = dual_chain("dscp");
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    relay
        .add_rule(
            "marked",
            "veth1:239.1.1.1:5001",
            &[
                "veth2:239.10.1.1:6001,dscp=ef",
                "veth2:239.10.1.2:6002",
                "veth2:[ff3e::30]:6003,dscp=af41",
                "veth2:10.0.1.2:7000,dscp=cs5",
            ],
        )
        .expect("rule added");
    // A ring sees each frame's DSCP as it was on the wire.
    let rx = expect_at(
        &c,
        "239.10.1.1:6001,239.10.1.2:6002,[ff3e::30]:6003",
        "0",
        4000,
        &["--via", "ring"],
    );
    let unicast = expect_at(&c, "10.0.1.2:7000", "0", 4000, &[]);
    let cap = Capture::start(&c.sink, Chain::SINK_IF, "udp port 7000").expect("capture");
    // Sent as af11 (10).
    send_from(&c, "239.1.1.1:5001", 4000, "4k", &["--dscp", "10"]);
    let got = complete(rx, &relay);
    let dscp: Vec<(String, Vec<u8>)> = got
        .report
        .streams
        .iter()
        .map(|s| (s.destination.clone(), s.dscp.clone()))
        .collect();
    assert_eq!(
        dscp,
        vec![
            ("239.10.1.1:6001".to_string(), vec![46]),
            ("239.10.1.2:6002".to_string(), vec![10]),
            ("[ff3e::30]:6003".to_string(), vec![34]),
        ]
    );
    complete(unicast, &relay);
    let frames = cap.stop().expect("captured");
    assert_eq!(frames.len(), 4000);
    for f in &frames {
        // The relay's kernel sends unicast outputs, and over veth leaves
        // the UDP checksum to an offload that never comes: not MCR's to
        // check here.
        let d = parse(f, f.len(), RxChecksum::Valid, None).expect("valid");
        assert_eq!(d.tos >> 2, 40, "the unicast output's DSCP (cs5)");
    }
}

#[test]
fn a_vlan_of_a_trunk_goes_out_untagged_or_retagged_and_other_vlans_stay_out() {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("vlan-trunk").expect("chain");
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    // veth1 is a trunk: VLAN 100 carries two streams, VLAN 300 a third to
    // the same group and port, and untagged frames a fourth.
    relay
        .add_rule("strip", "veth1:239.1.1.1:5001,vlan=100", &["veth2:239.10.1.1:6001"])
        .expect("rule added");
    relay
        .add_rule(
            "retag",
            "veth1:239.1.1.3:5003,vlan=100",
            &["veth2:239.10.1.3:6003,vlan=200"],
        )
        .expect("rule added");
    relay
        .add_rule("tag", "veth1:239.1.1.1:5001", &["veth2:239.10.1.2:6002,vlan=200"])
        .expect("rule added");
    // The trunk is put in promiscuous mode, past any NIC's VLAN filter.
    let link = c.relay.ip(&["-d", "link", "show", Chain::RELAY_IN_IF]).expect("link");
    assert!(link.contains("promiscuity 1"), "{link}");
    let untagged = expect_at(&c, "239.10.1.1:6001", "0", 3000, &[]);
    let tagged = expect_at(
        &c,
        "239.10.1.3:6003,239.10.1.2:6002",
        "1+",
        3000,
        &["--via", "ring", "--vlan", "200"],
    );
    let cap = Capture::start(&c.sink, Chain::SINK_IF, "vlan and udp").expect("capture");
    // VLAN 300 first: had it been forwarded, it would show as a wrong
    // stream id before the right packets arrive.
    send_from(&c, "239.1.1.1:5001", 3000, "5k", &["--vlan", "300", "--first-id", "30"]);
    send_from(&c, "239.1.1.1:5001", 3000, "5k", &["--first-id", "2"]);
    send_from(
        &c,
        "239.1.1.1:5001,239.1.1.3:5003",
        3000,
        "5k",
        &["--vlan", "100", "--first-id", "0"],
    );
    let got = complete(untagged, &relay);
    assert_eq!((got.report.total.received, got.report.total.wrong_stream), (3000, 0));
    // VLAN 100's second stream retagged 200 (id 1), the untagged stream
    // tagged 200 (id 2); a frame of VLAN 300 (id 30) would be a wrong
    // stream.
    let got = complete(tagged, &relay);
    assert_eq!((got.report.total.received, got.report.total.wrong_stream), (6000, 0));
    // On the wire, every tagged frame carries VLAN 200.
    let frames = cap.stop().expect("captured");
    assert_eq!(frames.len(), 6000);
    for f in &frames {
        let d = parse(f, f.len(), RxChecksum::Unknown, None).expect("valid");
        assert!(
            mcr_core::forward::udp_checksum_ok(f, &d, RxChecksum::Unknown),
            "a valid UDP checksum"
        );
        assert_eq!(d.vlan, 200);
    }
    let s = relay.stats().expect("stats");
    let mut packets: Vec<(String, u64)> = s.rules.iter().map(|r| (r.name.clone(), r.packets)).collect();
    packets.sort();
    assert_eq!(
        packets,
        vec![
            ("retag".to_string(), 3000),
            ("strip".to_string(), 3000),
            ("tag".to_string(), 3000)
        ]
    );
}

#[test]
fn unicast_streams_of_both_families_go_out_as_multicast() {
    let _lock = traffic_lock().expect("lock");
    let c = dual_chain("unicast-in");
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    relay
        .add_rule("u4", "veth1:10.0.0.2:7001", &["veth2:239.10.7.1:7001"])
        .expect("rule added");
    relay
        .add_rule("u6", "veth1:[fd00::2]:7002", &["veth2:[ff3e::7]:7002"])
        .expect("rule added");
    let rx = expect_at(&c, "239.10.7.1:7001", "0", 5000, &[]);
    let rx6 = expect_at(&c, "[ff3e::7]:7002", "6", 5000, &[]);
    send_from(&c, "10.0.0.2:7001", 5000, "5k", &["--via", "udp"]);
    send_from(&c, "[fd00::2]:7002", 5000, "5k", &["--via", "udp", "--first-id", "6"]);
    for rx in [rx, rx6] {
        let got = complete(rx, &relay);
        assert_eq!(got.report.total.received, 5000);
    }
}
