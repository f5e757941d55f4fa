//! The relay meets a changing host: interfaces that go down or vanish,
//! frames that are not its interface's own, datagrams sent to the host
//! itself. Each is handled, counted or reported; no stream it should carry
//! loses a packet, and nothing spins or freezes.

use std::time::Duration;

use mcr_testbed::capture::Capture;
use mcr_testbed::presets::Chain;
use mcr_testbed::relay::Relay;
use mcr_testbed::traffic::Mcrgen;
use mcr_testbed::{Ns, traffic_lock};

const MINUTES: Duration = Duration::from_secs(180);

/// Sends `count` packets of one stream from the chain's generator to
/// `dest` through `via`, and checks that every one of them arrives at the
/// sink's `expect_at`, in order, intact.
fn every_packet_crosses(c: &Chain, relay: &Relay, dest: &str, via: &str, expect_at: &str, count: u64) {
    mcr_testbed::traffic::every_packet_crosses(
        &c.generator,
        via,
        dest,
        &c.sink,
        Chain::SINK_IF,
        expect_at,
        count,
        "5k",
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", relay.log()));
}

/// The CPU time (user + system, in clock ticks) process `pid` has used.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    // Fields after the command name (which may hold spaces) start at the
    // last ')'; utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().expect("utime") + f[12].parse::<u64>().expect("stime")
}

#[test]
fn an_input_that_goes_down_and_up_is_waited_out_and_then_forwarded_again() {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("relay-link-flap").expect("chain");
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    relay
        .add_rule("feed", "veth1:239.1.1.1:5001", &["veth2:239.10.1.1:6001"])
        .expect("add");
    every_packet_crosses(&c, &relay, "239.1.1.1:5001", Chain::GEN_IF, "239.10.1.1:6001", 2000);

    let pid = relay.workers().expect("workers")[0].pid.expect("a running worker");
    c.relay.link_down(Chain::RELAY_IN_IF).expect("down");
    // The ring reports the interface going down once; a worker that did
    // not take that error would be woken for it again at once, forever,
    // and burn its core. Over three seconds an idle worker uses next to
    // no CPU, a spinning one all three.
    let ticks_per_s = 100;
    let before = cpu_ticks(pid);
    std::thread::sleep(Duration::from_secs(3));
    let used = cpu_ticks(pid) - before;
    assert!(
        used < ticks_per_s,
        "the worker used {used} ticks of CPU in 3 s with its input down"
    );
    let st = relay.stats().expect("stats");
    assert!(st.workers[0].ring_errors >= 1, "{:?}", st.workers[0]);
    assert_eq!(
        relay.workers().expect("workers")[0].pid,
        Some(pid),
        "the worker kept running"
    );

    c.relay.link_up(Chain::RELAY_IN_IF).expect("up");
    every_packet_crosses(&c, &relay, "239.1.1.1:5001", Chain::GEN_IF, "239.10.1.1:6001", 2000);
}

#[test]
fn a_rule_whose_output_interface_vanished_is_reported_and_the_others_go_on() {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("relay-vanish").expect("chain");
    // A spare veth pair inside the relay's namespace; deleting one end
    // deletes both.
    c.relay
        .ip(&["link", "add", "spare0", "type", "veth", "peer", "name", "spare1"])
        .expect("veth");
    c.relay.addr("spare0", "10.9.9.1/24").expect("addr");
    c.relay.link_up("spare0").expect("up");
    c.relay.link_up("spare1").expect("up");
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    relay
        .add_rule("lost", "veth1:239.1.1.1:5001", &["spare0:239.20.1.1:6001"])
        .expect("add");
    relay
        .add_rule("kept", "veth1:239.1.1.3:5001", &["veth2:239.10.1.3:6001"])
        .expect("add");
    c.relay.link_del("spare0").expect("delete spare0");

    // A change after that: the new table holds a rule the workers cannot
    // set up. It is reported on that rule; every other rule, old and new,
    // runs.
    relay
        .add_rule("fresh", "veth1:239.1.1.2:5001", &["veth2:239.10.1.2:6001"])
        .expect("a rule that can run is added cleanly");
    let listed = relay.rules().expect("list");
    let problems = |name: &str| {
        listed
            .iter()
            .find(|r| r.rule.name == name)
            .map(|r| r.problems.clone())
            .expect("listed")
    };
    let lost = problems("lost");
    assert!(
        lost.iter().any(|p| p.contains("spare0")),
        "the problem names the interface: {lost:?}"
    );
    assert_eq!(problems("fresh"), Vec::<String>::new());
    assert_eq!(problems("kept"), Vec::<String>::new());
    every_packet_crosses(&c, &relay, "239.1.1.2:5001", Chain::GEN_IF, "239.10.1.2:6001", 2000);
    every_packet_crosses(&c, &relay, "239.1.1.3:5001", Chain::GEN_IF, "239.10.1.3:6001", 2000);

    // Naming the vanished interface in a new change is taken, waiting for
    // the interface, and says so (once).
    let out = relay
        .ctl(&[
            "add",
            "lost",
            "--input",
            "veth1:239.1.1.1:5001",
            "--output",
            "spare0:239.20.1.1:6001",
        ])
        .expect("mcrctl");
    assert_eq!(out.code, Some(3), "{out:?}");
    assert_eq!(out.stdout.matches("problem").count(), 1, "one problem: {out:?}");
    assert!(
        out.stdout.contains("problem: waiting for interface `spare0`"),
        "{out:?}"
    );
}

#[test]
fn frames_with_a_vlan_tag_are_not_the_untagged_interfaces_stream() {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("relay-vlan").expect("chain");
    let relay = Relay::start(&c.relay, &[]).expect("mcrd");
    relay
        .add_rule("feed", "veth1:239.1.1.1:5001", &["veth2:239.10.1.1:6001"])
        .expect("add");
    let rx = Mcrgen::streams("239.10.1.1:6001", Chain::SINK_IF)
        .arg("--idle-timeout")
        .arg("2s")
        .recv(&c.sink)
        .expect("recv");
    // The tagged frames do reach the relay's interface.
    let cap = Capture::start_limited(&c.relay, Chain::RELAY_IN_IF, "vlan 100 and udp", Some(2000)).expect("capture");
    // The same group and port, the same stream numbering: had the tagged
    // frames been forwarded, the sink would see every packet twice.
    for vlan in [Some("100"), None] {
        let mut sender = Mcrgen::streams("239.1.1.1:5001", Chain::GEN_IF).count(2000).rate("5k");
        if let Some(id) = vlan {
            sender = sender.via("frames").arg("--vlan").arg(id);
        }
        let sent = sender.send(&c.generator, MINUTES).expect("send");
        assert_eq!(sent.packets, 2000);
    }
    let tagged = cap.stop().expect("captured");
    assert_eq!(tagged.len(), 2000);
    assert!(
        tagged.iter().all(|f| f[12..16] == [0x81, 0x00, 0x00, 100]),
        "802.1Q, VLAN 100"
    );
    let got = rx.finish(MINUTES).expect("recv done");
    let s = &got.report.total;
    assert_eq!(s.received, 2000, "{:?}", got.report);
    assert_eq!((s.lost, s.duplicated, s.reordered, s.corrupted), (0, 0, 0, 0), "{s:?}");
    assert_eq!(relay.stats().expect("stats").rules[0].packets, 2000);
}

fn udp_in_errors(ns: &Ns) -> u64 {
    ns.snmp("Udp", "InErrors").expect("Udp InErrors")
}

#[test]
fn a_unicast_input_takes_datagrams_sent_to_the_host_and_the_sender_hears_no_icmp() {
    unicast_input_without_icmp("ebpf");
}

#[test]
fn a_unicast_input_takes_datagrams_sent_to_the_host_and_the_sender_hears_no_icmp_on_the_packet_path() {
    unicast_input_without_icmp("packet");
}

fn unicast_input_without_icmp(datapath: &str) {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new(&format!("relay-unicast-in-{datapath}")).expect("chain");
    let relay = Relay::start(&c.relay, &["--datapath", datapath]).expect("mcrd");
    let input = format!("{}:{}:5001", Chain::RELAY_IN_IF, Chain::RELAY_IN_ADDR);
    relay
        .ctl_ok(&["add", "to-me", "--input", &input, "--output", "veth2:239.10.1.1:6001"])
        .expect("add");
    let errors_before = udp_in_errors(&c.relay);
    let rx = Mcrgen::streams("239.10.1.1:6001", Chain::SINK_IF)
        .expect(3000)
        .recv(&c.sink)
        .expect("recv");
    let dest = format!("{}:5001", Chain::RELAY_IN_ADDR);
    let sent = Mcrgen::streams(&dest, Chain::GEN_IF)
        .count(3000)
        .rate("3k")
        .send(&c.generator, MINUTES)
        .expect("send");
    assert_eq!(sent.packets, 3000);
    // With no socket on the port, the relay host's kernel would have
    // answered with ICMP port unreachable, which the sender sees.
    assert_eq!(sent.icmp_errors, 0, "{sent:?}");
    let got = rx.finish(MINUTES).expect("recv done");
    assert_eq!(got.code, Some(0), "{:?}\n{}", got.report.problems, relay.log());
    assert_eq!(got.report.total.received, 3000);
    let rule = relay.stats().expect("stats").rules.remove(0);
    assert_eq!(rule.datapath, datapath, "{rule:?}");
    let errors = udp_in_errors(&c.relay) - errors_before;
    if datapath == "ebpf" {
        // The program forwarded each one and consumed it: the host's UDP
        // never saw them (the port's holder is MCR's own, marked so).
        assert_eq!(errors, 0, "none reached the host's UDP");
    } else {
        // The supervisor's socket refused each one at its filter.
        assert!(errors >= 3000, "{errors}");
    }

    // Removing the rule lets go of the port: the kernel answers again.
    relay.ctl_ok(&["remove", "to-me"]).expect("remove");
    let sent = Mcrgen::streams(&dest, Chain::GEN_IF)
        .count(200)
        .rate("1k")
        .send(&c.generator, MINUTES)
        .expect("send");
    assert!(sent.icmp_errors > 0, "{sent:?}");
}

/// Every worker drop counter, summed over the workers.
fn worker_drops(relay: &Relay) -> std::collections::BTreeMap<String, u64> {
    let mut m = std::collections::BTreeMap::new();
    for w in relay.stats().expect("stats").workers {
        for (k, v) in w.drops {
            *m.entry(k).or_insert(0) += v;
        }
    }
    m
}

#[test]
fn hostile_frames_are_counted_by_reason_and_the_valid_streams_lose_nothing() {
    hostile_frames("relay-hostile", &[]);
}

/// With two workers sharing the input by the kernel's fanout hash, each
/// bad frame is still counted once by its reason (fragments as
/// `fragment`: the fanout does not reassemble them first).
#[test]
fn hostile_frames_are_counted_by_reason_across_two_workers() {
    hostile_frames("relay-hostile2", &["--workers", "2", "--datapath", "packet"]);
}

fn hostile_frames(name: &str, args: &[&str]) {
    use mcr_core::forward::{RxChecksum, parse};
    use mcrgen::hostile::{Kind, frame};
    const N: u64 = 15_000;
    const PER_KIND: u64 = 3000;
    const SEED: u64 = 7;
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new(name).expect("chain");
    let relay = Relay::start(&c.relay, args).expect("mcrd");
    for i in 1..=2 {
        relay
            .ctl_ok(&[
                "add",
                &format!("feed{i}"),
                "--input",
                &format!("veth1:239.1.1.{i}:{}", 5000 + i),
                "--output",
                &format!("veth2:239.10.1.{i}:{}", 6000 + i),
            ])
            .expect("add");
    }
    // From a ring, which sees every frame as it was on the wire and checks
    // its checksums itself.
    let rx = Mcrgen::streams("239.10.1.1+2:6001+", Chain::SINK_IF)
        .expect(N)
        .via("ring")
        .recv(&c.sink)
        .expect("recv");
    let gen_ns = c.generator.clone();
    let sender = std::thread::spawn(move || {
        Mcrgen::streams("239.1.1.1+2:5001+", Chain::GEN_IF)
            .count(N)
            .rate("6k")
            .send(&gen_ns, MINUTES)
            .expect("send")
    });
    std::thread::sleep(Duration::from_millis(500));
    let before = worker_drops(&relay);
    // 27,000 bad frames at 20,000 a second, all aimed at feed1's own group
    // and port, beside the valid streams.
    let out = c
        .generator
        .command(mcr_testbed::bin("mcrgen").expect("mcrgen"))
        .args([
            "hostile",
            "-i",
            Chain::GEN_IF,
            "-d",
            "239.1.1.1:5001",
            "--src",
            "10.0.0.1:4000",
        ])
        .args([
            "--count",
            &PER_KIND.to_string(),
            "--rate",
            "20k",
            "--seed",
            &SEED.to_string(),
            "--json",
        ])
        .output()
        .expect("mcrgen hostile");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: mcrgen::hostile::HostileReport = serde_json::from_slice(&out.stdout).expect("report");
    assert_eq!(report.total, PER_KIND * Kind::ALL.len() as u64);

    assert_eq!(sender.join().expect("sender").packets, 2 * N);
    let got = rx.finish(MINUTES).expect("recv done");
    for s in &got.report.streams {
        assert!(s.problems(Some(N)).is_empty(), "{:?}", s.problems(Some(N)));
        assert_eq!((s.received, s.unrecognized, s.corrupted), (N, 0, 0), "{s:?}");
    }
    assert_eq!(got.report.stray, 0, "nothing but the valid streams came out");

    // What each bad frame should have been counted as, by the relay's own
    // parser over the very same frames. A wrong UDP checksum is not the
    // relay's to judge: those frames are forwarded as they are, with a
    // checksum still wrong, and the sink's kernel refuses them.
    let mut want: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    let mut forwarded = 0;
    let src_mac = mcr_core::wire::ethernet::parse_mac(&c.generator.mac(Chain::GEN_IF).expect("mac")).expect("mac");
    for kind in Kind::ALL {
        for i in 0..PER_KIND {
            let f = frame(
                kind,
                i,
                SEED,
                src_mac,
                "10.0.0.1:4000".parse().expect("src"),
                "239.1.1.1:5001".parse().expect("dst"),
            );
            let why = match parse(&f, f.len(), RxChecksum::Unknown, None) {
                Ok(d) => {
                    assert!(!mcr_core::forward::udp_checksum_ok(&f, &d, RxChecksum::Unknown));
                    forwarded += 1;
                    continue;
                }
                Err(why) => why,
            };
            let name = mcr_core::stats::WorkerCounter::DROPS
                .iter()
                .find(|(k, _)| *k == why)
                .map(|(_, n)| n.to_string())
                .expect("a drop reason");
            *want.entry(name).or_insert(0) += 1;
        }
    }
    let after = worker_drops(&relay);
    let counted: std::collections::BTreeMap<String, u64> = after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect();
    assert_eq!(counted, want, "every bad frame counted once, by its reason");
    assert_eq!(forwarded, PER_KIND, "only the wrong UDP checksums are forwarded");
    let feed1 = relay
        .stats()
        .expect("stats")
        .rules
        .into_iter()
        .find(|r| r.name == "feed1")
        .expect("feed1");
    assert_eq!(feed1.packets, N + forwarded, "the valid stream and the wrong checksums");
    assert_eq!(
        got.report.bad_frames, forwarded,
        "the sink found exactly those, their checksums still wrong: {:?}",
        got.report.problems
    );
    assert_eq!(got.report.problems.len(), 1, "{:?}", got.report.problems);
    let ws = relay.workers().expect("workers");
    assert!(ws.iter().all(|w| w.restarts == 0 && w.state == "running"), "{ws:?}");
}

/// Resident memory of the daemon and its workers, in KiB.
fn relay_rss_kib(relay: &Relay) -> u64 {
    let mut pids = vec![relay.pid()];
    pids.extend(relay.workers().expect("workers").iter().filter_map(|w| w.pid));
    pids.iter()
        .filter_map(|p| {
            let s = std::fs::read_to_string(format!("/proc/{p}/status")).ok()?;
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))?
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

#[test]
fn an_overload_of_15_seconds_is_dropped_with_reasons_and_forwarding_recovers() {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("relay-overload").expect("chain");
    // The workers' overload: their rings and output queues. (The eBPF data
    // path forwards this load without loss; its overload is tested below.)
    let relay = Relay::start(&c.relay, &["--datapath", "packet"]).expect("mcrd");
    // Four outputs: the relay sends four packets for each it takes, so the
    // generator (which shares this machine's two cores) can offer far more
    // than it forwards: with one output, one worker forwards 64-byte
    // packets about as fast as the generator makes them.
    let mut add = vec!["add", "feed", "--input", "veth1:239.1.1.1:5001"];
    let outs: Vec<String> = (1..=4).map(|i| format!("veth2:239.10.1.{i}:6001")).collect();
    for o in &outs {
        add.extend(["--output", o.as_str()]);
    }
    relay.ctl_ok(&add).expect("add");
    every_packet_crosses(&c, &relay, "239.1.1.1:5001", Chain::GEN_IF, "239.10.1.1:6001", 5000);
    let pids: Vec<Option<u32>> = relay.workers().expect("workers").iter().map(|w| w.pid).collect();
    let rss_before = relay_rss_kib(&relay);
    // 15 s of small packets as fast as the generator goes.
    let sent = Mcrgen::streams("239.1.1.1:5001", Chain::GEN_IF)
        .duration("15s")
        .rate("max")
        .size(64)
        .send(&c.generator, MINUTES)
        .expect("send");
    // Let the last batches be counted.
    let mut st = relay.stats().expect("stats");
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let again = relay.stats().expect("stats");
        if again.rules[0].packets == st.rules[0].packets {
            break;
        }
        st = again;
    }
    let ws = relay.workers().expect("workers");
    assert_eq!(
        ws.iter().map(|w| w.pid).collect::<Vec<_>>(),
        pids,
        "no worker restarted: {ws:?}"
    );
    assert!(ws.iter().all(|w| w.restarts == 0 && w.state == "running"), "{ws:?}");
    let rule = &st.rules[0];
    let ring_drops: u64 = st.workers.iter().map(|w| w.ring_drops).sum();
    let mut queue_full = 0;
    for out in &rule.outputs {
        // Every packet the rule took was sent to each output or counted as
        // dropped there, by reason.
        let out_drops: u64 = out.drops.values().sum();
        assert_eq!(rule.packets, out.packets + out_drops, "{rule:?}");
        queue_full += out.drops["queue_full"];
    }
    eprintln!(
        "offered {} packets at {:.0} pps; taken {}, ring drops {ring_drops}, queue_full {queue_full}, sent {:?}",
        sent.packets,
        sent.achieved_pps,
        rule.packets,
        rule.outputs.iter().map(|o| o.packets).collect::<Vec<_>>()
    );
    // The overload shows, with its reasons: the ring was full, or an output
    // queue was.
    assert!(ring_drops + queue_full > 0, "{rule:?}");
    // What reached the relay's ring was taken or dropped there, nothing
    // counted twice (the 5,000 before came first; the kernel may drop some
    // before the ring, in the veth's backlog, which MCR cannot count).
    assert!(
        rule.packets + ring_drops <= sent.packets + 5000,
        "nothing counted twice"
    );
    // Memory stays bounded.
    let rss_after = relay_rss_kib(&relay);
    assert!(
        rss_after < rss_before + 16 * 1024,
        "resident memory grew from {rss_before} to {rss_after} KiB"
    );
    // When the load falls back, every packet crosses again, without a restart.
    every_packet_crosses(&c, &relay, "239.1.1.1:5001", Chain::GEN_IF, "239.10.1.1:6001", 20_000);
    assert_eq!(
        relay
            .workers()
            .expect("workers")
            .iter()
            .map(|w| w.pid)
            .collect::<Vec<_>>(),
        pids
    );
}

/// The fanout group ids of the packet sockets in `ns` (from `ss`).
fn fanout_ids(ns: &Ns) -> std::collections::BTreeSet<u16> {
    let out = ns.exec("ss", ["-0", "-e", "-O", "-H"]).expect("ss");
    out.split("fanout(id:")
        .skip(1)
        .filter_map(|rest| rest.split(',').next()?.parse().ok())
        .collect()
}

/// Another program on the relay's input that shares the interface's frames
/// through a fanout group of its own never joins the workers' group, even
/// if it picks the same id: the supervisor founds the group with an id no
/// group had, and with a flag a plain hash group lacks, so the kernel
/// refuses the program (EINVAL) rather than give it part of MCR's frames.
/// Both workers' rings are in that one group; a stream through them loses
/// nothing while the program tries.
#[test]
fn a_program_that_picks_the_workers_fanout_id_is_refused_and_takes_no_frame() {
    const N: u64 = 20_000;
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("relay-fanout-ids").expect("chain");
    let relay = Relay::start(&c.relay, &["--workers", "2", "--datapath", "packet"]).expect("mcrd");
    relay
        .add_rule("feed", "veth1:239.1.1.1:5001", &["veth2:239.10.1.1:6001"])
        .expect("add");
    let ids = fanout_ids(&c.relay);
    assert_eq!(ids.len(), 1, "one group for the input's two rings: {ids:?}");
    let rx = c.expect_at_sink("239.10.1.1:6001", N, &[]).expect("recv");
    let sender = c.send_from_generator_meanwhile("239.1.1.1:5001", N, "4000", MINUTES);
    let ns = c.relay.name().to_string();
    let tries = std::thread::spawn(move || {
        mcr_sys::netns::enter(&ns).expect("enter the relay's namespace");
        let ifindex = mcr_sys::iface::index(Chain::RELAY_IN_IF).expect("input interface");
        let mut tries = 0;
        let until = std::time::Instant::now() + Duration::from_secs(3);
        while std::time::Instant::now() < until {
            for &id in &ids {
                match mcr_sys::ring::join_foreign_fanout(ifindex, id) {
                    Ok(_) => panic!("another program joined the workers' fanout group {id}"),
                    Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "group {id}: {e}"),
                }
                tries += 1;
            }
        }
        tries
    })
    .join()
    .expect("the other program");
    sender.join().expect("sender").expect("send");
    let got = rx.finish(MINUTES).expect("recv done");
    assert_eq!(got.code, Some(0), "{:?}", got.report.problems);
    for s in &got.report.streams {
        assert!(s.problems(Some(N)).is_empty(), "{:?}", s.problems(Some(N)));
    }
    assert!(tries > 0);
    assert_eq!(fanout_ids(&c.relay).len(), 1, "the group is unchanged");
}
