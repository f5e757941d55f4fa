//! Loops: a rule set whose outputs feed its own inputs is refused with the
//! loop named, through a bridge too; a loop MCR cannot see (through a
//! switch in another namespace) is bounded by the TTL and shows in the
//! counters.

use std::time::{Duration, Instant};

use mcr_testbed::relay::Relay;
use mcr_testbed::traffic::Mcrgen;
use mcr_testbed::{BridgeOptions, Testbed, traffic_lock};

const MINUTES: Duration = Duration::from_secs(180);

#[test]
fn rules_that_feed_their_own_inputs_are_refused_with_the_loop_named() {
    let mut tb = Testbed::new("loops-refused").expect("testbed");
    let relay_ns = tb.ns("relay").expect("ns");
    let far = tb.ns("far").expect("ns");
    // In the relay's namespace: bridge br0 with ports p1 and p2, and a
    // plain link eth9.
    tb.bridge(&relay_ns, "br0", BridgeOptions::default()).expect("bridge");
    for (port, peer, net) in [("p1", "q1", 1), ("p2", "q2", 2), ("eth9", "q9", 9)] {
        tb.veth(&relay_ns, port, &far, peer).expect("veth");
        relay_ns.addr(port, &format!("10.8.{net}.1/24")).expect("addr");
    }
    for port in ["p1", "p2"] {
        tb.attach(&relay_ns, port, "br0").expect("attach");
    }
    relay_ns.addr("br0", "10.8.0.1/24").expect("addr");
    let relay = Relay::start(&relay_ns, &[]).expect("mcrd");
    let refused = |args: &[&str]| {
        let out = relay.ctl(args).expect("mcrctl");
        assert_eq!(out.code, Some(1), "{args:?} should be refused: {out:?}");
        out.stderr
    };
    // Directly: an output onto the rule's own input.
    let e = refused(&[
        "add",
        "a",
        "--input",
        "eth9:239.1.1.1:5001",
        "--output",
        "eth9:239.1.1.1:5001",
    ]);
    assert!(
        e.contains("rule `a`: outputs[0]: eth9 239.1.1.1:5001 is this rule's own input: a loop"),
        "{e}"
    );
    // Through the bridge: out of one port, back in by the other.
    let e = refused(&[
        "add",
        "a",
        "--input",
        "p1:239.1.1.1:5001",
        "--output",
        "p2:239.1.1.1:5001",
    ]);
    assert!(
        e.contains("own input (through bridge `br0`, which p2 and p1 share): a loop"),
        "{e}"
    );
    // Across two rules, directly and through the bridge.
    relay
        .add_rule("a", "eth9:239.1.1.1:5001", &["p2:239.2.2.2:6001"])
        .expect("a");
    let e = refused(&[
        "add",
        "b",
        "--input",
        "eth9:239.3.3.3:7001",
        "--output",
        "eth9:239.1.1.1:5001",
    ]);
    assert!(
        e.contains("rule `b`: outputs[0]: eth9 239.1.1.1:5001 is rule `a`'s input: a loop"),
        "{e}"
    );
    let e = refused(&[
        "add",
        "b",
        "--input",
        "p1:239.2.2.2:6001",
        "--output",
        "eth9:239.3.3.3:7001",
    ]);
    assert!(
        e.contains(
            "rule `a` sends to p2 239.2.2.2:6001 (its outputs[0]) (through bridge `br0`, which p2 and p1 share)"
        ),
        "{e}"
    );
    // The same in a config file, at the field at fault.
    let dir = mcr_testbed::TempDir::new("loops-config").expect("dir");
    let path = dir
        .file(
            "mcrd.toml",
            "[[rule]]\nname = \"x\"\ninput = \"p1:239.5.5.5:5005\"\noutputs = [\"eth9:239.6.6.6:6006\", \"br0:239.5.5.5:5005\"]\n",
        )
        .expect("file");
    let out = relay_ns
        .command(mcr_testbed::bin("mcrd").expect("mcrd"))
        .arg("--check-config")
        .arg(&path)
        .output()
        .expect("check");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(":4:35: rule `x`: outputs[1]: br0 239.5.5.5:5005 is this rule's own input (through bridge `br0`"),
        "{err}"
    );
    // Only `a` made it in.
    let list = relay.ctl_ok(&["list"]).expect("list");
    assert!(list.contains("a ") && !list.contains("b "), "{list}");
}

#[test]
fn a_loop_outside_mcrs_knowledge_is_bounded_by_the_ttl_and_counted() {
    const PACKETS: u64 = 20;
    const TTL: u64 = 8;
    let _lock = traffic_lock().expect("lock");
    let mut tb = Testbed::new("loops-ttl").expect("testbed");
    let relay_ns = tb.ns("relay").expect("ns");
    let switch = tb.ns("switch").expect("ns");
    let generator = tb.ns("gen").expect("ns");
    // A switch (a bridge in a namespace MCR cannot see) joins the relay's
    // input, the relay's output and a sender: what the relay sends comes
    // back to its input.
    tb.bridge(&switch, "sw0", BridgeOptions::default()).expect("bridge");
    for (a_ns, a_if, s_if) in [
        (&relay_ns, "veth1", "s1"),
        (&relay_ns, "veth2", "s2"),
        (&generator, "g0", "s3"),
    ] {
        tb.veth(a_ns, a_if, &switch, s_if).expect("veth");
        tb.attach(&switch, s_if, "sw0").expect("attach");
    }
    relay_ns.addr("veth1", "10.7.0.1/24").expect("addr");
    relay_ns.addr("veth2", "10.7.0.2/24").expect("addr");
    generator.addr("g0", "10.7.0.9/24").expect("addr");
    let relay = Relay::start(&relay_ns, &[]).expect("mcrd");
    // Same group and port out as in, on another interface: MCR sees no
    // loop, the switch makes one.
    relay
        .add_rule("echo", "veth1:239.1.1.1:5001", &["veth2:239.1.1.1:5001"])
        .expect("add");
    let sent = Mcrgen::streams("239.1.1.1:5001", "g0")
        .count(PACKETS)
        .rate("50")
        .arg("--ttl")
        .arg(TTL)
        .send(&generator, MINUTES)
        .expect("send");
    assert_eq!(sent.packets, PACKETS);
    // Each packet goes round with TTL 8, 7, ... 2 (7 times out), and comes
    // in a last time with TTL 1, which no output may send on.
    let want = (PACKETS * TTL, PACKETS * (TTL - 1), PACKETS);
    let deadline = Instant::now() + Duration::from_secs(60);
    let got = loop {
        let st = relay.stats().expect("stats");
        let r = &st.rules[0];
        let o = &r.outputs[0];
        let got = (r.packets, o.packets, o.drops["ttl_expired"]);
        if got == want || Instant::now() > deadline {
            break got;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(got, want, "(matched, sent, ttl_expired)");
    // And it stops: nothing more comes round.
    std::thread::sleep(Duration::from_secs(1));
    let st = relay.stats().expect("stats");
    assert_eq!(st.rules[0].packets, PACKETS * TTL);
}
