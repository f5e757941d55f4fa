use std::net::IpAddr;

use super::*;
use crate::interfaces::InterfaceInfo;
use crate::rule::{Mode, Redundancy};

/// The view of `rules` on [`interfaces`] as a node with no history builds
/// it (seeded ids, first versions, nothing known of peers or files).
fn fresh_view(rules: &[Rule]) -> NmosView {
    build(
        &info(),
        &Ids::new("seed"),
        rules,
        &interfaces(),
        &mut Versions::default(),
        &Known::default(),
    )
}

fn info() -> NodeInfo {
    NodeInfo {
        label: "relay-1".into(),
        description: "a relay".into(),
        hostname: "relay-1".into(),
        api_host: "10.9.0.1".into(),
        api_port: 9808,
        protocol: "http",
        authorization: false,
    }
}

fn interfaces() -> Interfaces {
    let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
    Interfaces::new([
        InterfaceInfo::ethernet("eth0", 2, [ip("10.0.0.2")]),
        InterfaceInfo::ethernet("eth1", 3, [ip("10.0.1.2"), ip("fd00::2")]),
    ])
}

fn rule(name: &str, input: &str, outputs: &[&str]) -> Rule {
    Rule::new(
        name,
        input.parse().expect("input"),
        outputs.iter().map(|o| o.parse().expect("output")).collect(),
    )
}

fn merged() -> Rule {
    Rule {
        redundancy: Some(Redundancy {
            mode: "merge".parse::<Mode>().expect("mode"),
            inputs: vec!["eth1:239.2.1.1:5001".parse().expect("input")],
        }),
        ..rule(
            "m",
            "eth0:239.1.1.1:5001,source=10.0.0.9",
            &["eth1:239.10.1.1:6001,ttl=8"],
        )
    }
}

#[test]
fn ids_are_uuids_of_the_seed_and_the_names_and_differ_between_nodes() {
    let (a, b) = (Ids::new("host-a"), Ids::new("host-b"));
    assert_eq!(a.sender("r", 0), Ids::new("host-a").sender("r", 0));
    assert_ne!(a.sender("r", 0), b.sender("r", 0));
    let all = [
        a.node(),
        a.device(),
        a.source("r"),
        a.flow("r"),
        a.sender("r", 0),
        a.sender("r", 1),
        a.receiver("r"),
    ];
    let distinct: HashSet<Uuid> = all.iter().copied().collect();
    assert_eq!(distinct.len(), all.len());
    for id in all {
        assert_eq!(id.get_version_num(), 5);
        assert_eq!(id.to_string(), id.to_string().to_lowercase());
    }
}

#[test]
fn an_ipv6_senders_and_receivers_constraints_offer_every_address_of_its_interface() {
    let rules = vec![rule("v6", "eth1:[ff3e::1]:5001", &["eth1:[ff3e::10]:6001"])];
    let v = fresh_view(&rules);
    let both = json!({"enum": ["10.0.1.2", "fd00::2"]});
    assert_eq!(v.connection_senders[0].constraints[0]["source_ip"], both);
    assert_eq!(v.connection_senders[0].constraints[0]["destination_ip"], json!({}));
    assert_eq!(v.connection_receivers[0].constraints[0]["interface_ip"], both);
    assert_eq!(
        v.connection_senders[0].active["transport_params"][0]["source_ip"],
        "fd00::2"
    );
}

#[test]
fn each_rule_is_a_source_and_flow_its_udp_outputs_senders_and_its_inputs_a_receiver() {
    let rules = vec![
        rule(
            "a",
            "eth0:239.1.1.1:5001",
            &["eth1:239.10.1.1:6001", "eth1:10.0.1.9:7000"],
        ),
        merged(),
        rule("s", "srt://0.0.0.0:9000", &["eth1:239.10.1.3:6001"]),
    ];
    let ids = Ids::new("seed");
    let mut versions = Versions::default();
    let v = build(&info(), &ids, &rules, &interfaces(), &mut versions, &Known::default());
    assert_eq!(v.sources.len(), 3);
    assert_eq!(v.flows.len(), 3);
    assert_eq!(v.senders.len(), 4);
    assert_eq!(v.receivers.len(), 2, "the SRT input is none");
    assert!(
        v.left_out.iter().any(|l| l.starts_with("s: an SRT")),
        "{:?}",
        v.left_out
    );
    // The merge is one receiver with two legs.
    let m = &v.connection_receivers[1];
    assert_eq!(m.id, ids.receiver("m").to_string());
    let legs = m.active["transport_params"].as_array().expect("legs");
    assert_eq!(legs.len(), 2);
    assert_eq!(legs[0]["source_ip"], "10.0.0.9");
    assert_eq!(legs[0]["multicast_ip"], "239.1.1.1");
    assert_eq!(legs[0]["interface_ip"], "10.0.0.2");
    assert_eq!(legs[1]["interface_ip"], "10.0.1.2");
    assert_eq!(m.constraints.as_array().map(Vec::len), Some(2));
    assert_eq!(v.receivers[1]["interface_bindings"], json!(["eth0", "eth1"]));
    // The unicast output is a sender to the host.
    let u = &v.connection_senders[1];
    assert_eq!(u.active["transport_params"][0]["destination_ip"], "10.0.1.9");
    assert_eq!(u.active["transport_params"][0]["source_ip"], "10.0.1.2");
    // The device lists them all, and its control is the Connection API.
    let d = &v.devices[0];
    assert_eq!(d["senders"].as_array().map(Vec::len), Some(4));
    assert_eq!(d["controls"][0]["href"], "http://10.9.0.1:9808/x-nmos/connection/v1.1/");
    // The node lists the interfaces the rules use.
    assert_eq!(v.node["interfaces"].as_array().map(Vec::len), Some(2));
    assert_eq!(v.node["interfaces"][0]["port_id"], "02-00-00-00-00-02");
    // Every sender's manifest is its transport file.
    assert_eq!(
        v.senders[0]["manifest_href"],
        format!(
            "http://10.9.0.1:9808/x-nmos/connection/v1.1/single/senders/{}/transportfile",
            ids.sender("a", 0)
        )
    );
}

#[test]
fn versions_stay_while_a_resource_says_the_same_and_grow_when_it_changes() {
    let ids = Ids::new("seed");
    let mut versions = Versions::default();
    let mut rules = vec![rule("a", "eth0:239.1.1.1:5001", &["eth1:239.10.1.1:6001"]), merged()];
    let v1 = build(&info(), &ids, &rules, &interfaces(), &mut versions, &Known::default());
    let v2 = build(&info(), &ids, &rules, &interfaces(), &mut versions, &Known::default());
    assert_eq!(v1, v2);
    rules[0].outputs[0] = "eth1:239.10.1.9:6001".parse().expect("output");
    let v3 = build(&info(), &ids, &rules, &interfaces(), &mut versions, &Known::default());
    let version = |v: &Value| v["version"].as_str().expect("version").parse::<Tai>().expect("TAI");
    assert!(version(&v3.senders[0]) > version(&v1.senders[0]));
    assert_eq!(v3.senders[0]["id"], v1.senders[0]["id"], "the id stays");
    // What did not change keeps its version.
    assert_eq!(v3.receivers[1]["version"], v1.receivers[1]["version"]);
    assert_eq!(v3.senders[1]["version"], v1.senders[1]["version"]);
}

#[test]
fn a_senders_sdp_is_mpeg_ts_over_rtp_to_its_destination_with_its_source() {
    let rules = vec![merged()];
    let ids = Ids::new("seed");
    let v = build(
        &info(),
        &ids,
        &rules,
        &interfaces(),
        &mut Versions::default(),
        &Known::default(),
    );
    let sdp = v.connection_senders[0].transport_file.clone().expect("an SDP");
    let parsed = sdp_types::Session::parse(sdp.as_bytes()).expect("parses");
    let m = &parsed.medias[0];
    assert_eq!(m.port, 6001);
    assert_eq!(m.fmt, "33");
    assert_eq!(m.connections[0].connection_address, "239.10.1.1/8");
    assert!(
        sdp.contains("a=source-filter: incl IN IP4 239.10.1.1 10.0.1.2\r\n"),
        "{sdp}"
    );
    assert!(sdp.contains("a=rtpmap:33 MP2T/90000\r\n"), "{sdp}");
}

#[test]
fn tai_times_are_seconds_and_nanoseconds() {
    let t: Tai = "1700000037:120000000".parse().expect("a time");
    assert_eq!((t.secs, t.nanos), (1_700_000_037, 120_000_000));
    assert_eq!(t.to_string(), "1700000037:120000000");
    assert_eq!(Tai::from_utc_ns(t.utc_ns()), t);
    assert_eq!(t.next().to_string(), "1700000037:120000001");
    for bad in ["", "1", "1:", ":1", "1:1000000000", "-1:0", "1.5:0", "1:2:3"] {
        assert!(bad.parse::<Tai>().is_err(), "{bad:?}");
    }
    assert!(tai_now().utc_ns() > 1_700_000_000_000_000_000);
}

mod staging {
    use serde_json::json;

    use super::super::Tai;
    use super::super::stage::{Activation, Side, due, patch};

    fn receiver() -> (serde_json::Value, serde_json::Value) {
        let leg = json!({"source_ip": null, "multicast_ip": "239.1.1.1", "interface_ip": "10.0.0.2", "destination_port": 5001, "rtp_enabled": true});
        let staged = json!({
            "sender_id": null, "master_enable": true,
            "activation": {"mode": null, "requested_time": null, "activation_time": null},
            "transport_file": {"data": null, "type": null},
            "transport_params": [leg.clone(), leg],
        });
        let c = json!({"source_ip": {}, "multicast_ip": {}, "interface_ip": {"enum": ["10.0.0.2"]}, "destination_port": {}, "rtp_enabled": {}});
        (staged, json!([c.clone(), c]))
    }

    #[test]
    fn a_patch_changes_what_it_names_and_keeps_the_rest() {
        let (staged, c) = receiver();
        let s = patch(Side::Receiver, &staged, &c, &json!({})).expect("an empty PATCH");
        assert_eq!(s.staged, staged);
        assert_eq!(s.activation, None);
        let s = patch(
            Side::Receiver,
            &staged,
            &c,
            &json!({"transport_params": [{"multicast_ip": "239.1.1.9"}, {}], "activation": {"mode": "activate_immediate"}}),
        )
        .expect("a move");
        assert_eq!(s.staged["transport_params"][0]["multicast_ip"], "239.1.1.9");
        assert_eq!(s.staged["transport_params"][0]["destination_port"], 5001);
        assert_eq!(s.staged["transport_params"][1], staged["transport_params"][1]);
        assert_eq!(s.activation, Some(Activation::Immediate));
    }

    #[test]
    fn a_receivers_interface_address_keeps_the_family_of_its_group() {
        let leg = json!({"source_ip": null, "multicast_ip": "ff3e::1", "interface_ip": "fd00::2", "destination_port": 5001, "rtp_enabled": true});
        let staged = json!({"sender_id": null, "master_enable": true, "transport_params": [leg]});
        let c = json!([{"source_ip": {}, "multicast_ip": {}, "interface_ip": {"enum": ["10.0.1.2", "fd00::2"]}, "destination_port": {}, "rtp_enabled": {}}]);
        // Asked for both, of two families: refused, nothing staged.
        let e = patch(
            Side::Receiver,
            &staged,
            &c,
            &json!({"transport_params": [{"multicast_ip": "239.1.1.9", "interface_ip": "fd00::2"}]}),
        )
        .expect_err("two families");
        assert!(
            e.contains("interface_ip fd00::2 is IPv6 but multicast_ip 239.1.1.9 is IPv4"),
            "{e}"
        );
        // The group alone: the interface's address of its family, auto.
        let s = patch(
            Side::Receiver,
            &staged,
            &c,
            &json!({"transport_params": [{"multicast_ip": "239.1.1.9"}]}),
        )
        .expect("a group of the other family");
        assert_eq!(s.staged["transport_params"][0]["interface_ip"], "auto");
        let s = patch(
            Side::Receiver,
            &staged,
            &c,
            &json!({"transport_params": [{"multicast_ip": "239.1.1.9", "interface_ip": "10.0.1.2"}]}),
        )
        .expect("both IPv4");
        assert_eq!(s.staged["transport_params"][0]["interface_ip"], "10.0.1.2");
    }

    #[test]
    fn each_mistake_is_refused_with_what_is_wrong() {
        let (staged, c) = receiver();
        for (body, says) in [
            (json!([]), "JSON object"),
            (json!({"bad": "data"}), "no field \"bad\""),
            (json!({"master_enable": "yes"}), "master_enable takes"),
            (json!({"sender_id": "not-a-uuid"}), "sender_id takes"),
            (json!({"transport_params": [{}]}), "1 leg(s): this resource has 2"),
            (
                json!({"transport_params": [{"destination_port": 70000}, {}]}),
                "takes a port",
            ),
            (
                json!({"transport_params": [{"interface_ip": "10.9.9.9"}, {}]}),
                "not one this leg takes",
            ),
            (
                json!({"transport_params": [{"fec_enabled": true}, {}]}),
                "no parameter \"fec_enabled\"",
            ),
            (
                json!({"transport_params": [{"multicast_ip": 5}, {}]}),
                "multicast_ip takes",
            ),
            (
                json!({"activation": {"mode": "activate_scheduled_relative"}}),
                "needs a requested_time",
            ),
            (
                json!({"activation": {"mode": "activate_immediate", "requested_time": "1:0"}}),
                "takes no requested_time",
            ),
            (json!({"activation": {"mode": "now"}}), "is none of"),
            (
                json!({"activation": {"mode": "activate_scheduled_absolute", "requested_time": "soon"}}),
                "not a TAI time",
            ),
            (
                json!({"transport_file": {"data": "v=0", "type": "text/plain"}}),
                "only application/sdp",
            ),
        ] {
            let e = patch(Side::Receiver, &staged, &c, &body).expect_err(&body.to_string());
            assert!(e.contains(says), "{body}: {e}");
        }
        // A sender has no transport file.
        let e = patch(Side::Sender, &json!({}), &json!([]), &json!({"transport_file": {}})).expect_err("refused");
        assert!(e.contains("no field \"transport_file\""), "{e}");
    }

    #[test]
    fn a_scheduled_activation_is_due_at_its_time_or_after_its_offset() {
        let (staged, c) = receiver();
        let now: Tai = "1000:500000000".parse().expect("time");
        let rel = patch(
            Side::Receiver,
            &staged,
            &c,
            &json!({"activation": {"mode": "activate_scheduled_relative", "requested_time": "0:700000000"}}),
        )
        .expect("relative");
        assert_eq!(
            due(rel.activation.expect("one"), now),
            Some("1001:200000000".parse().expect("t"))
        );
        let abs = patch(
            Side::Receiver,
            &staged,
            &c,
            &json!({"activation": {"mode": "activate_scheduled_absolute", "requested_time": "2000:0"}}),
        )
        .expect("absolute");
        assert_eq!(
            due(abs.activation.expect("one"), now),
            Some("2000:0".parse().expect("t"))
        );
        let cancel = patch(Side::Receiver, &staged, &c, &json!({"activation": {"mode": null}})).expect("cancel");
        assert_eq!(cancel.activation, Some(Activation::Cancel));
    }
}

mod activating {
    use serde_json::json;

    use super::super::stage::{Refused, receiver_rule, sender_rule};
    use super::{interfaces, merged, rule};
    use crate::rule::SourcePolicy;

    #[test]
    fn a_receivers_legs_become_the_rules_inputs() {
        let r = merged();
        let staged = json!({"master_enable": true, "transport_params": [
            {"multicast_ip": "239.5.5.5", "interface_ip": "10.0.0.2", "destination_port": 7000, "source_ip": null, "rtp_enabled": true},
            {"multicast_ip": null, "interface_ip": "10.0.1.2", "destination_port": 7001, "source_ip": "10.0.1.50", "rtp_enabled": true},
        ]});
        let out = receiver_rule(&r, &staged, &interfaces()).expect("a rule");
        assert_eq!(out.input.to_string(), "eth0:239.5.5.5:7000");
        let second = &out.redundancy.as_ref().expect("a merge").inputs[0];
        assert_eq!(second.to_string(), "eth1:10.0.1.2:7001,source=10.0.1.50");
        assert_eq!(out.outputs, r.outputs);
        let bad = json!({"master_enable": true, "transport_params": [{"interface_ip": "10.9.9.9"}, {}]});
        assert!(matches!(receiver_rule(&r, &bad, &interfaces()), Err(Refused::Invalid(e)) if e.contains("10.9.9.9")));
        let parked = json!({"master_enable": false, "transport_params": [{}, {}]});
        let out = receiver_rule(&r, &parked, &interfaces()).expect("a rule");
        assert!(!out.enabled, "master_enable false turns the rule off");
        assert_eq!((out.inputs().count(), &out.outputs), (2, &r.outputs));
        let both = json!({"master_enable": true, "transport_params": [{"rtp_enabled": false}, {"rtp_enabled": false}]});
        assert!(!receiver_rule(&r, &both, &interfaces()).expect("a rule").enabled);
        let one = json!({"master_enable": true, "transport_params": [{"rtp_enabled": true}, {"rtp_enabled": false}]});
        assert!(matches!(
            receiver_rule(&r, &one, &interfaces()),
            Err(Refused::NotServed(e)) if e.contains("one leg of two")
        ));
    }

    #[test]
    fn a_senders_leg_becomes_its_outputs_destination_and_source() {
        let r = rule(
            "a",
            "eth0:239.1.1.1:5001",
            &["eth1:239.10.1.1:6001,ttl=8", "eth1:239.10.1.2:6002"],
        );
        let staged = json!({"master_enable": true, "transport_params": [
            {"destination_ip": "10.0.1.77", "destination_port": 9000, "source_ip": "10.0.1.2", "source_port": "auto", "rtp_enabled": true}
        ]});
        let out = sender_rule(&r, 1, &staged, &interfaces()).expect("a rule");
        let o = out.outputs[1].as_udp().expect("udp");
        assert_eq!(o.destination.to_string(), "10.0.1.77:9000");
        assert_eq!(o.source, SourcePolicy::Interface, "the interface's own address");
        assert_eq!(out.outputs[0], r.outputs[0], "the other output stays");
        let other =
            json!({"master_enable": true, "transport_params": [{"destination_ip": "auto", "source_ip": "10.0.1.99"}]});
        let out = sender_rule(&r, 0, &other, &interfaces()).expect("a rule");
        let o = out.outputs[0].as_udp().expect("udp");
        assert_eq!(o.destination.to_string(), "239.10.1.1:6001", "auto keeps it");
        assert_eq!(o.source, SourcePolicy::Address("10.0.1.99".parse().expect("ip")));
        // An IPv6 output moved to an IPv4 destination: the interface's
        // IPv6 address staged as its source becomes its IPv4 one.
        let v6 = rule("v6", "eth1:[ff3e::1]:5001", &["eth1:[ff3e::10]:6001"]);
        let to_v4 = json!({"master_enable": true, "transport_params": [{"destination_ip": "239.99.0.1", "source_ip": "fd00::2"}]});
        let out = sender_rule(&v6, 0, &to_v4, &interfaces()).expect("a rule");
        let o = out.outputs[0].as_udp().expect("udp");
        assert_eq!(
            (o.destination.to_string(), &o.source),
            ("239.99.0.1:6001".to_string(), &SourcePolicy::Interface)
        );
        let auto =
            json!({"master_enable": true, "transport_params": [{"destination_ip": "239.99.0.1", "source_ip": "auto"}]});
        let pinned = rule("p", "eth1:[ff3e::1]:5001", &["eth1:[ff3e::10]:6001,source=fd00::2"]);
        let out = sender_rule(&pinned, 0, &auto, &interfaces()).expect("a rule");
        assert_eq!(out.outputs[0].as_udp().expect("udp").source, SourcePolicy::Interface);
        // A source that is no address of the interface, of the other
        // family: refused, saying what to give.
        let foreign = json!({"master_enable": true, "transport_params": [{"destination_ip": "239.99.0.1", "source_ip": "fd00::99"}]});
        assert!(matches!(
            sender_rule(&v6, 0, &foreign, &interfaces()),
            Err(Refused::Invalid(e)) if e.contains("fd00::99 is IPv6 but destination_ip 239.99.0.1 is IPv4")
        ));
        // A receiver's interface address and group of two families.
        let v6in = rule("v6in", "eth1:[ff3e::1]:5001", &["eth0:239.10.1.1:6001"]);
        let mixed = json!({"master_enable": true, "transport_params": [{"multicast_ip": "239.1.1.9", "interface_ip": "fd00::2"}]});
        assert!(matches!(
            receiver_rule(&v6in, &mixed, &interfaces()),
            Err(Refused::Invalid(e)) if e.contains("is IPv6 but multicast_ip 239.1.1.9 is IPv4")
        ));
        let auto_in =
            json!({"master_enable": true, "transport_params": [{"multicast_ip": "239.1.1.9", "interface_ip": "auto"}]});
        let out = receiver_rule(&v6in, &auto_in, &interfaces()).expect("a rule");
        assert_eq!(out.input.to_string(), "eth1:239.1.1.9:5001");
        for off in [
            json!({"master_enable": false, "transport_params": [{}]}),
            json!({"master_enable": true, "transport_params": [{"rtp_enabled": false}]}),
        ] {
            let out = sender_rule(&r, 1, &off, &interfaces()).expect("a rule");
            assert!(!out.outputs[1].is_enabled(), "{off}");
            assert_eq!(out.outputs[0], r.outputs[0], "the other output stays on");
            assert!(out.enabled, "the rule stays on");
        }
    }
}

mod transport_files {
    use std::collections::HashMap;

    use serde_json::json;

    use super::super::stage::{Side, patch, receiver_rule};
    use super::*;

    /// An ST 2110-20 stream on two legs (ST 2022-7), as a controller
    /// gives it: RFC 7104's DUP grouping, RFC 4570 source filters.
    const TWO_LEGS: &str = "v=0\r\n\
o=- 1496 0 IN IP4 10.0.0.9\r\n\
s=camera 1\r\n\
t=0 0\r\n\
a=group:DUP primary secondary\r\n\
m=video 5004 RTP/AVP 96\r\n\
c=IN IP4 239.5.1.1/32\r\n\
a=source-filter: incl IN IP4 239.5.1.1 10.0.0.9\r\n\
a=rtpmap:96 raw/90000\r\n\
a=fmtp:96 sampling=YCbCr-4:2:2; width=1920; height=1080; exactframerate=30000/1001; depth=10; TCS=SDR; colorimetry=BT709; PM=2110GPM; SSN=ST2110-20:2017; interlace\r\n\
a=mid:primary\r\n\
m=video 5006 RTP/AVP 96\r\n\
c=IN IP4 239.6.1.1/32\r\n\
a=source-filter: incl IN IP4 239.6.1.1 10.0.1.9\r\n\
a=rtpmap:96 raw/90000\r\n\
a=fmtp:96 sampling=YCbCr-4:2:2; width=1920; height=1080; exactframerate=30000/1001; depth=10; TCS=SDR; colorimetry=BT709; PM=2110GPM; SSN=ST2110-20:2017; interlace\r\n\
a=mid:secondary\r\n";

    #[test]
    fn a_two_leg_sdp_gives_each_leg_in_the_dup_groups_order() {
        // The group names the secondary first: its order wins.
        let swapped = TWO_LEGS.replace("DUP primary secondary", "DUP secondary primary");
        let read = read_sdp(&swapped).expect("reads");
        let dests: Vec<String> = read
            .legs
            .iter()
            .map(|l| format!("{}:{}", l.destination, l.port))
            .collect();
        assert_eq!(dests, ["239.6.1.1:5006", "239.5.1.1:5004"]);
        assert_eq!(read.legs[0].source, Some("10.0.1.9".parse().expect("ip")));
        let (format, media_type) = read.content.format();
        assert_eq!((format, media_type.as_str()), ("urn:x-nmos:format:video", "video/raw"));
        let f = read.content.flow_fields();
        assert_eq!((&f["frame_width"], &f["frame_height"]), (&json!(1920), &json!(1080)));
        assert_eq!(f["interlace_mode"], "interlaced_tff");
        assert_eq!(f["grain_rate"], json!({"numerator": 30000, "denominator": 1001}));
        assert_eq!(
            f["components"][1],
            json!({"name": "Cb", "width": 960, "height": 1080, "bit_depth": 10})
        );
    }

    #[test]
    fn what_a_receiver_cannot_take_is_said() {
        let no_group = TWO_LEGS.replace("a=group:DUP primary secondary\r\n", "");
        for (sdp, says) in [
            ("not an sdp", "cannot be read"),
            (no_group.as_str(), "no a=group:DUP"),
            (
                &*TWO_LEGS.replace("DUP primary secondary", "DUP primary third"),
                "names third",
            ),
            (
                &*TWO_LEGS.replace("10.0.0.9\r\na=rtpmap", "camera.example\r\na=rtpmap"),
                "give an address",
            ),
        ] {
            let e = read_sdp(sdp).expect_err(says);
            assert!(e.contains(says), "{says}: {e}");
        }
    }

    #[test]
    fn a_transport_file_stages_the_legs_and_activating_it_makes_the_merge() {
        let r = merged();
        let v = build(
            &info(),
            &Ids::new("seed"),
            std::slice::from_ref(&r),
            &interfaces(),
            &mut Versions::default(),
            &Known::default(),
        );
        let rx = &v.connection_receivers[0];
        let body = json!({"transport_file": {"data": TWO_LEGS, "type": "application/sdp"},
                          "transport_params": [{}, {"interface_ip": "10.0.1.2"}]});
        let staged = patch(Side::Receiver, &rx.staged, &rx.constraints, &body).expect("staged");
        let legs = &staged.staged["transport_params"];
        assert_eq!(legs[0]["multicast_ip"], "239.5.1.1");
        assert_eq!(legs[1]["destination_port"], 5006);
        assert_eq!(legs[1]["source_ip"], "10.0.1.9");
        let out = receiver_rule(&r, &staged.staged, &interfaces()).expect("a rule");
        let inputs: Vec<String> = out.inputs().map(ToString::to_string).collect();
        assert_eq!(
            inputs,
            [
                "eth0:239.5.1.1:5004,source=10.0.0.9",
                "eth1:239.6.1.1:5006,source=10.0.1.9"
            ]
        );
        assert_eq!(
            out.redundancy.as_ref().map(|x| &x.mode),
            r.redundancy.as_ref().map(|x| &x.mode)
        );
        // One leg only: the other is turned off, which a merge cannot do.
        let one = TWO_LEGS
            .split("m=video 5006")
            .next()
            .expect("first leg")
            .replace("a=group:DUP primary secondary\r\n", "");
        let staged = patch(
            Side::Receiver,
            &rx.staged,
            &rx.constraints,
            &json!({"transport_file": {"data": one, "type": "application/sdp"}}),
        )
        .expect("staged");
        assert_eq!(staged.staged["transport_params"][1]["rtp_enabled"], false);
        assert!(receiver_rule(&r, &staged.staged, &interfaces()).is_err());
        // What the file says the rule carries: its flow, source, receiver
        // and senders say it, the senders' SDPs carry its format.
        let files = HashMap::from([("m".to_string(), TWO_LEGS.to_string())]);
        let v = build(
            &info(),
            &Ids::new("seed"),
            std::slice::from_ref(&out),
            &interfaces(),
            &mut Versions::default(),
            &Known {
                files,
                ..Known::default()
            },
        );
        assert_eq!(v.flows[0]["media_type"], "video/raw");
        assert_eq!(v.flows[0]["frame_height"], 1080);
        assert_eq!(
            v.sources[0]["grain_rate"], v.flows[0]["grain_rate"],
            "the source's rate is the flow's"
        );
        assert_eq!(v.sources[0]["format"], "urn:x-nmos:format:video");
        assert_eq!(v.receivers[0]["caps"]["media_types"], json!(["video/raw"]));
        assert_eq!(v.connection_receivers[0].active["transport_file"]["data"], TWO_LEGS);
        let sdp = v.connection_senders[0].transport_file.clone().expect("an SDP");
        assert!(sdp.contains("m=video 6001 RTP/AVP 96\r\n"), "{sdp}");
        assert!(sdp.contains("a=rtpmap:96 raw/90000\r\n"), "{sdp}");
        assert!(sdp.contains("a=fmtp:96 sampling=YCbCr-4:2:2; width=1920"), "{sdp}");
    }

    #[test]
    fn audio_is_described_with_its_rate_depth_and_channels() {
        let sdp = "v=0\r\no=- 1 0 IN IP4 10.0.0.9\r\ns=mic\r\nt=0 0\r\nm=audio 5004 RTP/AVP 97\r\nc=IN IP4 239.7.1.1/32\r\na=rtpmap:97 L24/48000/2\r\n";
        let c = read_sdp(sdp).expect("reads").content;
        let f = c.flow_fields();
        assert_eq!(
            (&f["format"], &f["media_type"]),
            (&json!("urn:x-nmos:format:audio"), &json!("audio/L24"))
        );
        assert_eq!(
            (&f["sample_rate"], &f["bit_depth"]),
            (&json!({"numerator": 48000}), &json!(24))
        );
        assert_eq!(c.channels(), Some(2));
        assert_eq!(
            Content::default().format(),
            ("urn:x-nmos:format:mux", "video/MP2T".to_string())
        );
    }
}

#[test]
fn a_known_bit_rate_is_said_and_what_is_turned_off_is_subscribed_to_nothing() {
    let mut r = rule("a", "eth0:239.1.1.1:5001", &["eth1:239.10.1.1:6001,enabled=false"]);
    r.enabled = false;
    let ids = Ids::new("seed");
    let peer = Value::String(Uuid::nil().to_string());
    let known = Known {
        peers: HashMap::from([
            (ids.sender("a", 0).to_string(), peer.clone()),
            (ids.receiver("a").to_string(), peer),
        ]),
        bit_rates: HashMap::from([("a".to_string(), 12_000)]),
        ..Known::default()
    };
    let v = build(&info(), &ids, &[r], &interfaces(), &mut Versions::default(), &known);
    assert_eq!(v.senders[0]["bit_rate"], 12_000);
    assert_eq!(
        v.senders[0]["subscription"],
        json!({"receiver_id": null, "active": false})
    );
    assert_eq!(
        v.receivers[0]["subscription"],
        json!({"sender_id": null, "active": false})
    );
    assert_eq!(v.connection_senders[0].active["master_enable"], false);
    let unknown = build(
        &info(),
        &ids,
        &[rule("b", "eth0:239.1.1.2:5001", &["eth1:239.10.1.2:6001"])],
        &interfaces(),
        &mut Versions::default(),
        &known,
    );
    assert!(unknown.senders[0].get("bit_rate").is_none(), "not known: not said");
}

#[test]
fn the_glance_counts_what_the_view_builds() {
    let rules = vec![
        rule(
            "a",
            "eth0:239.1.1.1:5001",
            &["eth1:239.10.1.1:6001", "eth1:10.0.1.9:7000"],
        ),
        merged(),
        rule(
            "s",
            "srt://0.0.0.0:9000",
            &["eth1:239.10.1.3:6001", "srt://0.0.0.0:9001"],
        ),
    ];
    let v = fresh_view(&rules);
    let refs: Vec<&Rule> = rules.iter().collect();
    assert_eq!(count(&refs), (v.senders.len(), v.receivers.len()));
    assert_eq!(count(&refs), (4, 2));
}
