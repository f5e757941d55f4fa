//! Interfaces that change under the rules (netlink): deleted and created
//! again with a new index, created after the rule, renumbered. Rules stay,
//! show what they wait for, and resume by themselves; other streams are
//! untouched throughout.

use std::time::{Duration, Instant};

use mcr_core::control::{Reply, RuleStatus};
use mcr_core::forward::{RxChecksum, parse};
use mcr_testbed::capture::Capture;
use mcr_testbed::relay::Relay;
use mcr_testbed::traffic::{Mcrgen, every_packet_crosses};
use mcr_testbed::{Ns, Testbed, traffic_lock};

const MINUTES: Duration = Duration::from_secs(180);

/// gen (g1, g2) ── (i1, i2) relay (o1) ── (s1) sink.
struct Bed {
    tb: Testbed,
    generator: Ns,
    relay: Ns,
    sink: Ns,
}

impl Bed {
    fn new(tag: &str) -> Bed {
        let mut tb = Testbed::new(tag).expect("testbed");
        let generator = tb.ns("gen").expect("ns");
        let relay = tb.ns("relay").expect("ns");
        let sink = tb.ns("sink").expect("ns");
        let bed = Bed {
            tb,
            generator,
            relay,
            sink,
        };
        bed.input("i1", "g1", 1);
        bed.input("i2", "g2", 2);
        bed.tb.veth(&bed.relay, "o1", &bed.sink, "s1").expect("veth");
        bed.relay.addr("o1", "10.1.3.1/24").expect("addr");
        bed.sink.addr("s1", "10.1.3.2/24").expect("addr");
        bed
    }

    /// The link gen:`g` ── relay:`i` on 10.1.`net`.0/24.
    fn input(&self, i: &str, g: &str, net: u8) {
        self.tb.veth(&self.relay, i, &self.generator, g).expect("veth");
        self.relay.addr(i, &format!("10.1.{net}.1/24")).expect("addr");
        self.generator.addr(g, &format!("10.1.{net}.2/24")).expect("addr");
    }

    /// `count` packets to `group` from `via`, every one checked at `out`.
    fn every_packet_crosses(&self, relay: &Relay, group: &str, via: &str, out: &str, count: u64) {
        every_packet_crosses(&self.generator, via, group, &self.sink, "s1", out, count, "2k")
            .unwrap_or_else(|e| panic!("{e}\n{}", relay.log()));
    }
}

impl Bed {
    /// Rule b's stream (g2 239.1.1.2:5002 -> s1 239.10.1.2:6002), `count`
    /// packets at 2,000 a second, under way: its receiver, checking every
    /// packet, and its sender.
    fn rule_b_flows(
        &self,
        count: u64,
    ) -> (
        mcr_testbed::traffic::Receiver,
        std::thread::JoinHandle<mcrgen::report::SendReport>,
    ) {
        let rx = Mcrgen::streams("239.10.1.2:6002", "s1")
            .expect(count)
            .recv(&self.sink)
            .expect("recv b");
        let gen_ns = self.generator.clone();
        let sender = std::thread::spawn(move || {
            Mcrgen::streams("239.1.1.2:5002", "g2")
                .count(count)
                .rate("2k")
                .send(&gen_ns, MINUTES)
                .expect("send b")
        });
        (rx, sender)
    }
}

/// Rule a (i1 239.1.1.1:5001 -> o1 239.10.1.1:6001) and rule b (i2
/// 239.1.1.2:5002 -> o1 239.10.1.2:6002).
fn add_a_and_b(relay: &Relay) {
    relay
        .add_rule("a", "i1:239.1.1.1:5001", &["o1:239.10.1.1:6001"])
        .expect("a");
    relay
        .add_rule("b", "i2:239.1.1.2:5002", &["o1:239.10.1.2:6002"])
        .expect("b");
}

fn rule(relay: &Relay, name: &str) -> RuleStatus {
    relay
        .rules()
        .expect("list")
        .into_iter()
        .find(|r| r.rule.name == name)
        .expect("the rule")
}

/// Waits until rule `name` is as `ok` wants it; returns it.
fn wait_for(relay: &Relay, name: &str, what: &str, ok: impl Fn(&RuleStatus) -> bool) -> RuleStatus {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = rule(relay, name);
        if ok(&r) {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "rule `{name}` never {what}: {r:?}\n{}",
            relay.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// No problem, and the one membership a multicast input needs held.
fn forwards(r: &RuleStatus) -> bool {
    r.problems.is_empty() && r.joins.len() == 1 && r.joins[0].joined
}

fn table_version(relay: &Relay) -> u64 {
    relay
        .workers()
        .expect("workers")
        .iter()
        .map(|w| w.table_version)
        .min()
        .unwrap_or(0)
}

#[test]
fn an_input_deleted_and_created_again_comes_back_by_itself_and_others_are_untouched() {
    const OTHER: u64 = 12_000;
    let _lock = traffic_lock().expect("lock");
    let bed = Bed::new("if-recreate");
    let relay = Relay::start(&bed.relay, &[]).expect("mcrd");
    add_a_and_b(&relay);
    // b's stream flows throughout (6 s), every packet checked.
    let (rx_b, sender_b) = bed.rule_b_flows(OTHER);
    bed.every_packet_crosses(&relay, "239.1.1.1:5001", "g1", "239.10.1.1:6001", 1000);
    let before = rule(&relay, "a");
    let index_before = bed.relay.ip(&["-o", "link", "show", "i1"]).expect("link");

    // i1 goes (with its peer): a waits for it, and says so.
    bed.relay.link_del("i1").expect("delete i1");
    let waiting = wait_for(&relay, "a", "waited", |r| {
        r.problems.iter().any(|p| p.contains("waiting for interface `i1`"))
    });
    assert!(
        waiting.joins.is_empty(),
        "no membership on a missing interface: {waiting:?}"
    );
    let list = relay.ctl_ok(&["list"]).expect("list");
    assert!(list.contains("problem: waiting for interface `i1`"), "{list}");

    // i1 comes back (a new index): a joins again and forwards, by itself.
    bed.input("i1", "g1", 1);
    let index_after = bed.relay.ip(&["-o", "link", "show", "i1"]).expect("link");
    assert_ne!(
        index_before.split(':').next(),
        index_after.split(':').next(),
        "a new ifindex"
    );
    let back = wait_for(&relay, "a", "came back", forwards);
    assert_eq!(back.rule, before.rule, "the rule is the same");
    assert!(back.joins.iter().all(|j| j.joined && j.interface == "i1"), "{back:?}");
    bed.every_packet_crosses(&relay, "239.1.1.1:5001", "g1", "239.10.1.1:6001", 1000);
    assert!(
        relay.log().contains("`i1` is gone") && relay.log().contains("`i1` appeared"),
        "{}",
        relay.log()
    );

    // b never noticed.
    assert_eq!(sender_b.join().expect("sender b").packets, OTHER);
    let got = rx_b.finish(MINUTES).expect("recv b");
    assert_eq!(got.code, Some(0), "{:?}", got.report.problems);
    assert!(got.report.streams[0].problems(Some(OTHER)).is_empty());
}

#[test]
fn a_rule_for_an_interface_that_does_not_exist_yet_starts_when_it_appears() {
    let _lock = traffic_lock().expect("lock");
    let bed = Bed::new("if-late");
    let relay = Relay::start(&bed.relay, &[]).expect("mcrd");
    // Taken, not in effect (exit 3), and the reason given.
    let out = relay
        .ctl(&[
            "add",
            "late",
            "--input",
            "late0:239.1.1.7:5007",
            "--output",
            "o1:239.10.1.7:6007",
        ])
        .expect("mcrctl");
    assert_eq!(out.code, Some(3), "{out:?}");
    assert!(
        out.stdout.contains("problem: waiting for interface `late0`"),
        "{}",
        out.stdout
    );
    let out = relay
        .ctl(&[
            "add",
            "late-out",
            "--input",
            "i2:239.1.1.8:5008",
            "--output",
            "later0:239.10.1.8:6008",
        ])
        .expect("mcrctl");
    assert_eq!(out.code, Some(3), "{out:?}");
    // They appear.
    bed.input("late0", "gl", 7);
    bed.tb.veth(&bed.relay, "later0", &bed.sink, "sl").expect("veth");
    bed.relay.addr("later0", "10.1.8.1/24").expect("addr");
    bed.sink.addr("sl", "10.1.8.2/24").expect("addr");
    wait_for(&relay, "late", "started", forwards);
    wait_for(&relay, "late-out", "started", forwards);
    bed.every_packet_crosses(&relay, "239.1.1.7:5007", "gl", "239.10.1.7:6007", 1000);
    every_packet_crosses(
        &bed.generator,
        "g2",
        "239.1.1.8:5008",
        &bed.sink,
        "sl",
        "239.10.1.8:6008",
        1000,
        "2k",
    )
    .expect("every packet crosses");
}

#[test]
fn a_new_address_on_the_output_is_the_source_of_what_leaves() {
    let _lock = traffic_lock().expect("lock");
    let bed = Bed::new("if-readdr");
    let relay = Relay::start(&bed.relay, &[]).expect("mcrd");
    relay
        .add_rule("a", "i1:239.1.1.1:5001", &["o1:239.10.1.1:6001"])
        .expect("a");
    // One capture across both halves (the relay's frames on the sink's
    // link, in order).
    let cap = Capture::start_limited(&bed.sink, "s1", "udp", Some(400)).expect("capture");
    bed.every_packet_crosses(&relay, "239.1.1.1:5001", "g1", "239.10.1.1:6001", 200);
    // Renumbered: the old address goes (deleting a primary address takes
    // its subnet's secondaries with it, so it goes first), the new comes.
    let v0 = table_version(&relay);
    bed.relay.del_addr("o1", "10.1.3.1/24").expect("old address gone");
    bed.relay.addr("o1", "10.1.3.77/24").expect("new address");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !relay.log().contains("-> [10.1.3.77") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    // And the workers run the table made from it: newer than before, the
    // rule without a problem, and no newer table coming.
    let mut last = 0;
    loop {
        let v = table_version(&relay);
        if v > v0 && v == last && forwards(&rule(&relay, "a")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the workers never took the new address: {}",
            relay.log()
        );
        last = v;
        std::thread::sleep(Duration::from_millis(200));
    }
    bed.every_packet_crosses(&relay, "239.1.1.1:5001", "g1", "239.10.1.1:6001", 200);
    let frames = cap.stop().expect("captured");
    let sources: Vec<std::net::IpAddr> = frames
        .iter()
        .map(|f| parse(f, f.len(), RxChecksum::Unknown, None).expect("valid frame").src)
        .collect();
    let mut tally = std::collections::BTreeMap::new();
    for s in &sources {
        *tally.entry(*s).or_insert(0) += 1;
    }
    assert_eq!(sources.len(), 400, "{tally:?}");
    let (before, after) = sources.split_at(200);
    assert!(
        before.iter().all(|s| *s == std::net::IpAddr::from([10, 1, 3, 1])),
        "{before:?}"
    );
    assert!(
        after.iter().all(|s| *s == std::net::IpAddr::from([10, 1, 3, 77])),
        "{after:?}"
    );
}

/// The input's and the output's MTU go from 1500 to 9000 while a stream
/// of 1024-byte datagrams flows through two workers: it loses nothing
/// (the rings keep their slots: a frame longer than one is read whole
/// from the ring socket's queue, in its place); then 8,000-byte datagrams
/// cross whole, none counted `truncated`. On both data paths.
#[test]
fn the_mtu_grows_under_a_flowing_stream_and_then_jumbo_datagrams_cross_whole() {
    use mcr_testbed::presets::Chain;
    let _lock = traffic_lock().expect("lock");
    for (tag, args) in [
        ("mtu-grow-ebpf", &["--workers", "2"][..]),
        ("mtu-grow-packet", &["--workers", "2", "--datapath", "packet"][..]),
    ] {
        let c = Chain::new(tag).expect("chain");
        let mut relay = Relay::start(&c.relay, args).expect("mcrd");
        relay
            .add_rule("small", "veth1:239.1.1.1:5001", &["veth2:239.10.1.1:6001"])
            .expect("small");
        let rx = c
            .expect_at_sink("239.10.1.1:6001", 6000, &["--idle-timeout", "3s"])
            .expect("recv");
        let sender = c.send_from_generator_meanwhile("239.1.1.1:5001", 6000, "2k", MINUTES);
        std::thread::sleep(Duration::from_millis(1000));
        for (ns, ifname) in [
            (&c.sink, Chain::SINK_IF),
            (&c.relay, Chain::RELAY_OUT_IF),
            (&c.relay, Chain::RELAY_IN_IF),
            (&c.generator, Chain::GEN_IF),
        ] {
            ns.mtu(ifname, 9000).expect("mtu 9000");
        }
        for ifname in [Chain::RELAY_IN_IF, Chain::RELAY_OUT_IF] {
            relay
                .wait_for_log(&format!("`{ifname}` changed: MTU 1500 -> 9000"), MINUTES)
                .unwrap_or_else(|e| panic!("{tag}: {e}"));
        }
        assert_eq!(sender.join().expect("sender").expect("send").packets, 6000);
        let got = rx.finish(MINUTES).expect("recv");
        assert_eq!(got.code, Some(0), "{tag}: {:?}\n{}", got.report.problems, relay.log());
        // On the packet path the workers' rings carry the stream, and
        // they say they read long frames the slow way now. (The eBPF data
        // path forwards it in the kernel.)
        if args.contains(&"packet") {
            relay
                .wait_for_log("`veth1`: MTU 9000 outgrows its ring's slots", MINUTES)
                .unwrap_or_else(|e| panic!("{tag}: {e}"));
        }

        // A rule added now is answered once the workers run a table made
        // from the interfaces as they are.
        let Reply::Added { applied, .. } = relay
            .ask(&[
                "add",
                "jumbo",
                "--input",
                "veth1:239.1.1.2:5002",
                "--output",
                "veth2:239.10.1.2:6002",
            ])
            .expect("jumbo")
        else {
            panic!("an add reply")
        };
        assert!(applied, "{tag}");
        let rx = c.expect_at_sink("239.10.1.2:6002", 2000, &[]).expect("recv");
        let sent = Mcrgen::streams("239.1.1.2:5002", Chain::GEN_IF)
            .count(2000)
            .rate("1000")
            .size(8000)
            .send(&c.generator, MINUTES)
            .expect("send");
        assert_eq!(sent.packets, 2000);
        let got = rx.finish(MINUTES).expect("recv");
        assert_eq!(got.code, Some(0), "{tag}: {:?}\n{}", got.report.problems, relay.log());
        assert_eq!(got.report.total.bytes, 2000 * 8000, "{tag}");
        let st = relay.stats().expect("stats");
        let truncated: u64 = st.workers.iter().map(|w| w.drops["truncated"]).sum();
        assert_eq!(truncated, 0, "{tag}");
    }
}

/// A link that goes down and comes up under the rules is told wherever an
/// operator looks: an event (warn) naming the rules it carries, in `mcrctl
/// events` and on the page (in headless Chromium); the rule's problem for
/// as long as it lasts; `mcr_interface_up` and its changes in `/metrics`.
/// The rule on the other input, sending on the same output, loses nothing
/// meanwhile (every packet checked), and the rule whose link it was
/// forwards again, every packet, once it is back.
#[test]
fn a_link_down_and_up_is_an_event_a_problem_and_a_metric_and_other_streams_lose_nothing() {
    use mcr_testbed::browser::Browser;
    use mcr_testbed::metrics::{sample, scrape};
    const ADDR: &str = "127.0.0.1:9808";
    const PATIENCE: Duration = Duration::from_secs(90);
    // b flows for 20 s: twice what every step below takes on a busy host.
    const OTHER: u64 = 40_000;
    let _lock = traffic_lock().expect("lock");
    let bed = Bed::new("if-link");
    let relay = Relay::start(&bed.relay, &["--http-listen", ADDR]).expect("mcrd");
    add_a_and_b(&relay);
    bed.every_packet_crosses(&relay, "239.1.1.1:5001", "g1", "239.10.1.1:6001", 1000);
    let metrics = || scrape(bed.relay.name(), ADDR);
    let up = |m: &str, i: &str| sample(m, &format!("mcr_interface_up{{interface=\"{i}\"}}"));
    let changes = |m: &str, i: &str| sample(m, &format!("mcr_interface_link_changes_total{{interface=\"{i}\"}}"));
    let m = metrics();
    assert_eq!((up(&m, "i1"), up(&m, "i2"), up(&m, "o1")), (1.0, 1.0, 1.0), "{m}");
    assert_eq!(changes(&m, "i1"), 0.0);

    let mut page = Browser::open(&bed.relay, &format!("http://{ADDR}/")).expect("open the page");
    page.wait_for("!!document.querySelector('#rules [data-rule=\"a\"]')", PATIENCE)
        .expect("the page shows the rules");

    let (rx_b, sender_b) = bed.rule_b_flows(OTHER);

    // i1 set down: told, and a's problem while it lasts.
    bed.relay.link_down("i1").expect("i1 down");
    let event = "link `i1` down (set down): it carries inputs of `a`";
    wait_for(&relay, "a", "said its input link is down", |r| {
        r.problems.contains(&"input link `i1` down (set down)".to_string())
    });
    let events = relay.ctl_ok(&["events"]).expect("events");
    assert!(events.contains(event), "{events}");
    let m = metrics();
    assert_eq!((up(&m, "i1"), up(&m, "i2"), up(&m, "o1")), (0.0, 1.0, 1.0), "{m}");
    assert_eq!(changes(&m, "i1"), 1.0, "{m}");
    assert!(rule(&relay, "b").problems.is_empty(), "b is not concerned");
    let stats = relay.ctl_ok(&["stats"]).expect("stats");
    assert!(
        stats.contains("PROBLEM: input link `i1` down (set down)") && stats.contains("DOWN (SET DOWN)"),
        "{stats}"
    );
    page.wait_for(
        &format!(
            "document.getElementById('events').innerText.includes({event:?})
             && document.querySelector('#rules [data-rule=\"a\"]').innerText.includes('input link `i1` down (set down)')"
        ),
        PATIENCE,
    )
    .unwrap_or_else(|e| panic!("the page does not show the link down: {e}"));

    // i1 set up while its peer is down: up, but without a carrier.
    bed.generator.link_down("g1").expect("g1 down");
    bed.relay.link_up("i1").expect("i1 up");
    wait_for(&relay, "a", "said its input link has no carrier", |r| {
        r.problems.contains(&"input link `i1` down (no carrier)".to_string())
    });
    let events = relay.ctl_ok(&["events"]).expect("events");
    assert!(
        events.contains("link `i1` down (no carrier): it carries inputs of `a`"),
        "{events}"
    );

    // The carrier comes back: told, the problem and the metric clear, and
    // a forwards again.
    bed.generator.link_up("g1").expect("g1 up");
    wait_for(&relay, "a", "forwarded again", forwards);
    let events = relay.ctl_ok(&["events"]).expect("events");
    assert!(
        events.contains("link `i1` up (it was down: no carrier): it carries inputs of `a`"),
        "{events}"
    );
    let m = metrics();
    assert_eq!(up(&m, "i1"), 1.0, "{m}");
    assert_eq!(changes(&m, "i1"), 3.0, "{m}");
    page.wait_for(
        "document.getElementById('events').innerText.includes('link `i1` up')
         && !document.querySelector('#rules [data-rule=\"a\"]').innerText.includes('input link `i1` down')",
        PATIENCE,
    )
    .unwrap_or_else(|e| panic!("the page does not show the link back up: {e}"));
    assert!(page.page_errors().is_empty(), "{:?}", page.page_errors());
    drop(page);
    assert!(
        !sender_b.is_finished(),
        "b's stream ended before the link came back: it did not flow throughout"
    );
    // The log has them at warn.
    assert!(
        relay
            .log()
            .lines()
            .any(|l| l.contains("WARN") && l.contains("link `i1` down (set down)")),
        "{}",
        relay.log()
    );
    bed.every_packet_crosses(&relay, "239.1.1.1:5001", "g1", "239.10.1.1:6001", 1000);

    // b never noticed.
    assert_eq!(sender_b.join().expect("sender b").packets, OTHER);
    let got = rx_b.finish(MINUTES).expect("recv b");
    assert_eq!(got.code, Some(0), "{:?}", got.report.problems);
    assert!(got.report.streams[0].problems(Some(OTHER)).is_empty());
    relay.stop().expect("stopped");
}
