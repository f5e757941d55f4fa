//! mcrd restarts without dropping a stream (issue 31): `mcrctl restart`
//! hands everything to a new program in the daemon's place while three
//! streams flow, again and again; the sink checks every packet. Under a
//! real systemd, the same for `systemctl restart`, a killed mcrd that
//! systemd starts again, and `systemctl stop` (tests/systemd.rs).

use std::time::Duration;

use mcr_testbed::presets::Chain;
use mcr_testbed::relay::Relay;
use mcr_testbed::traffic::Mcrgen;
use mcr_testbed::{TempDir, traffic_lock};

const MINUTES: Duration = Duration::from_secs(180);
/// Each of the three streams: 3,000 packets a second.
const RATE_EACH_PPS: u64 = 3000;
const RESTARTS: usize = 10;

/// mcrd with three rules from a config file (a restart takes the file's
/// rules, as a start does): veth1:239.1.1.N:500N -> veth2:239.10.1.N:600N.
fn start_with_three(c: &Chain, dir: &TempDir, args: &[&str]) -> Relay {
    let config = dir.file("mcrd.toml", &Chain::three_feeds_toml()).expect("config");
    let mut all = vec!["--config", config.to_str().expect("utf-8")];
    all.extend_from_slice(args);
    Relay::start(&c.relay, &all).expect("mcrd")
}

/// `mcrctl restart` ten times, and ten times `mcrctl restart --binary` to
/// another build (one whose eBPF program differs, then back to this one),
/// while three streams of 3,000 packets a second flow: not one packet
/// lost, duplicated, reordered or corrupted.
/// The daemon keeps its PID and its rules, and the new process says what
/// it took over. With the eBPF data path (`ebpf`), each restart replaces
/// the program on the input interface in place (one program there
/// throughout, a new one after each restart, on the same link); on the
/// workers' path, the frames that arrive while no worker reads wait in the
/// rings, which the new workers read on.
fn restarts_lose_nothing(tag: &str, args: &[&str], ebpf: bool) {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new(tag).expect("chain");
    let dir = TempDir::new(tag).expect("dir");
    let relay = start_with_three(&c, &dir, args);
    let (other, differs) = mcr_testbed::upgrade::other_build(&dir).expect("another build");
    let builds = [mcr_testbed::bin("mcrd").expect("mcrd"), other];
    // At most a minute of each (the restarts take 0.2 s each on an idle
    // machine); they end half a second after the last.
    let mut flow = c.three_feeds_flowing(RATE_EACH_PPS).expect("streams");
    // The stream is under way before the first restart.
    std::thread::sleep(Duration::from_millis(500));
    let list_before = relay.ctl_ok(&["list"]).expect("list");
    let pid = relay.pid();
    let mut programs = vec![c.relay.tcx_ingress(Chain::RELAY_IN_IF).expect("tcx")];
    assert_eq!(
        programs[0].len(),
        usize::from(ebpf),
        "the programs on the input: {programs:?}"
    );
    let took_over = if ebpf {
        "1 eBPF attachment(s), 1 membership socket(s), 0 port socket(s)"
    } else {
        "0 eBPF attachment(s), 1 membership socket(s), 0 port socket(s)"
    };
    let tag = |p: &[mcr_sys::bpf::LinkIds]| mcr_testbed::bpftool::program_tag(p[0].program).expect("tag");
    let mut tags = if ebpf { vec![tag(&programs[0])] } else { Vec::new() };
    for round in 1..=2 * RESTARTS {
        // Odd rounds restart the program running; even ones switch builds.
        let to = builds[(round / 2) % 2].to_str().expect("utf-8");
        let args: &[&str] = if round % 2 == 1 {
            &["restart"]
        } else {
            &["restart", "--binary", to]
        };
        let out = relay
            .ctl_ok(args)
            .unwrap_or_else(|e| panic!("restart {round}: {e}\n{}", relay.log()));
        assert!(out.contains("the new mcrd serves"), "{out}");
        // Three groups on one socket (20 fit on one); each worker's ring.
        assert!(
            out.contains(&format!(
                "restart: took over from the mcrd before (mcrctl restart): {took_over}"
            )),
            "restart {round}: {out}\n{}",
            relay.log()
        );
        assert!(
            !out.contains(", 0 receive ring(s)"),
            "restart {round}: the rings were taken over: {out}"
        );
        let now = c.relay.tcx_ingress(Chain::RELAY_IN_IF).expect("tcx");
        assert_eq!(now.len(), usize::from(ebpf), "restart {round}: {now:?}");
        if ebpf {
            let before = programs.last().expect("a program before")[0];
            assert_eq!(now[0].link, before.link, "restart {round}: the same link, taken over");
            assert_ne!(
                now[0].program, before.program,
                "restart {round}: the new process's program"
            );
            // The same build loads the same program; the other build's
            // differs.
            tags.push(tag(&now));
            let (was, is) = (&tags[tags.len() - 2], &tags[tags.len() - 1]);
            assert_eq!(
                was != is,
                round % 2 == 0 && differs,
                "restart {round}: program tags {was} then {is}"
            );
        }
        programs.push(now);
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !flow.ran_out().expect("the sender's status"),
        "the streams ended before the last restart: make them longer"
    );
    assert_eq!(relay.pid(), pid, "the same process");
    assert_eq!(relay.ctl_ok(&["list"]).expect("list"), list_before, "the same rules");
    let (sent, got) = flow.end(MINUTES).expect("streams ended");
    assert_eq!(got.report.streams.len(), 3, "{:?}", got.report);
    for i in 0..3 {
        let s = got
            .report
            .streams
            .iter()
            .find(|s| s.destination.contains(&format!("239.10.1.{}:", i + 1)))
            .expect("each stream");
        let each = sent.sent_to(i);
        assert!(
            s.problems(Some(each)).is_empty(),
            "{}: {:?}",
            s.destination,
            s.problems(Some(each))
        );
    }
    // The counters went on across every restart: each rule and output
    // counted every packet it forwarded, once.
    let stats = relay.stats().expect("stats");
    // (An older build named by MCR_UPGRADE_BUILD may not hand them on.)
    let named = mcr_testbed::upgrade::other_is_named();
    for i in (1..=3).filter(|_| !named) {
        let r = stats
            .rules
            .iter()
            .find(|r| r.name == format!("feed-{i}"))
            .expect("the rule");
        let each = sent.sent_to(i - 1);
        assert_eq!(
            r.packets, each,
            "feed-{i}: every packet counted once, across the restarts"
        );
        assert_eq!(r.outputs[0].packets, each, "feed-{i}'s output");
    }
    let log = relay.log();
    assert_eq!(log.matches("restart: handing over to").count(), 2 * RESTARTS, "{log}");
    let carried = log
        .matches("restart: counters carried over: 3 rule(s), 3 output(s) and input(s)")
        .count();
    assert!(carried == 2 * RESTARTS || named, "{log}");
    if ebpf {
        the_maps_hold_the_rules(&c, &programs);
    }
    relay.stop().expect("stopped");
    // Stopped (not restarted): no program is left on the interface.
    assert!(c.relay.tcx_ingress(Chain::RELAY_IN_IF).expect("tcx").is_empty());
}

/// After the restarts, the program on the input is the last mcrd's, and
/// its maps (read by bpftool, not asked of mcrd) hold exactly the three
/// rules: a key for each group and port on the input, each with its one
/// output rewritten to the output group and port; every program before it
/// is gone from the kernel.
fn the_maps_hold_the_rules(c: &Chain, programs: &[Vec<mcr_sys::bpf::LinkIds>]) {
    use mcr_testbed::bpftool;
    let last = programs.last().expect("programs")[0].program;
    let maps = bpftool::program_maps(last).expect("the program's maps");
    let map = |name: &str| {
        maps.iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no map `{name}` in {maps:?}"))
            .1
    };
    let (input, output) = (
        c.relay.ifindex(Chain::RELAY_IN_IF).expect("ifindex"),
        c.relay.ifindex(Chain::RELAY_OUT_IF).expect("ifindex"),
    );
    let u16_at = |b: &[u8], at: usize| u16::from_ne_bytes([b[at], b[at + 1]]);
    let u32_at = |b: &[u8], at: usize| u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let mut keys: Vec<(u32, u16, [u8; 4])> = Vec::new();
    let outputs = map("outputs");
    for (key, value) in bpftool::dump(map("rules")).expect("dump the rules map") {
        // struct rule_key: ifindex, vlan, port, family, pad, src, dst.
        let (ifindex, port, family, dst) = (
            u32_at(&key, 0),
            u16_at(&key, 6),
            key[8],
            [key[28], key[29], key[30], key[31]],
        );
        assert_eq!((family, u16_at(&key, 4)), (4, 0), "an IPv4 group, untagged: {key:?}");
        assert!(key[12..28].iter().all(|b| *b == 0), "any source: {key:?}");
        // struct rule: counters, first output, outputs, flags.
        let (first, count, flags) = (u32_at(&value, 4), u32_at(&value, 8), u32_at(&value, 12));
        assert_eq!(count, 1, "one output: {value:?}");
        assert_ne!(
            flags & mcr_core::datapath::RULE_FAST,
            0,
            "forwarded by the program: {value:?}"
        );
        // struct output: ifindex, counters, mtu, port, vlan, macs, flags,
        // ttl, dscp, pad, dst.
        let out = bpftool::lookup(outputs, first).expect("the rule's output");
        let i = dst[3];
        assert_eq!(u32_at(&out, 0), output, "sent out of the output interface: {out:?}");
        assert_eq!(u16_at(&out, 12), 6000 + u16::from(i), "to the output port: {out:?}");
        assert_eq!(&out[32..36], &[239, 10, 1, i], "to the output group: {out:?}");
        keys.push((ifindex, port, dst));
    }
    keys.sort_unstable();
    let want: Vec<(u32, u16, [u8; 4])> = (1..=3u8)
        .map(|i| (input, 5000 + u16::from(i), [239, 1, 1, i]))
        .collect();
    assert_eq!(keys, want, "the rules map holds the three rules and nothing else");
    // The programs before let go when their link was switched (the kernel
    // frees a program after the last reader of it is done).
    for before in &programs[..programs.len() - 1] {
        let id = before[0].program;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while bpftool::program_exists(id).expect("bpftool") && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            !bpftool::program_exists(id).expect("bpftool"),
            "program {id} of an mcrd before is still held"
        );
    }
}

#[test]
fn mcrctl_restart_loses_nothing_on_the_ebpf_data_path() {
    restarts_lose_nothing("restart-ebpf", &[], true);
}

#[test]
fn mcrctl_restart_loses_nothing_on_the_workers_path() {
    restarts_lose_nothing("restart-workers", &["--datapath", "packet", "--workers", "2"], false);
}

/// What must not take over is refused before anything stops, and the
/// streams flow on untouched: `mcrctl restart` to a program that is not an
/// mcrd or does not exist, and a second mcrd started by mistake beside the
/// running one (it stops at the control socket, before it loads or attaches
/// anything: the one program on the input stays the running mcrd's).
#[test]
fn what_cannot_take_over_is_refused_and_the_streams_flow_on() {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("restart-refuse").expect("chain");
    let dir = TempDir::new("restart-refuse").expect("dir");
    let relay = start_with_three(&c, &dir, &[]);
    let rx = Mcrgen::streams("239.10.1.1+3:6001+", Chain::SINK_IF)
        .expect(6000)
        .recv(&c.sink)
        .expect("recv");
    let sender = c.send_from_generator_meanwhile("239.1.1.1+3:5001+", 6000, "3k", MINUTES);
    let program = c.relay.tcx_ingress(Chain::RELAY_IN_IF).expect("tcx");
    assert_eq!(program.len(), 1, "{program:?}");

    let not_mcrd = relay.ctl(&["restart", "--binary", "/bin/true"]).expect("ran");
    assert_eq!(not_mcrd.code, Some(1), "{not_mcrd:?}");
    assert!(
        not_mcrd.stderr.contains("restart refused, nothing changed") && not_mcrd.stderr.contains("is not an mcrd"),
        "{not_mcrd:?}"
    );
    let missing = relay.ctl(&["restart", "--binary", "/nonexistent/mcrd"]).expect("ran");
    assert_eq!(missing.code, Some(1), "{missing:?}");
    assert!(missing.stderr.contains("cannot run /nonexistent/mcrd"), "{missing:?}");

    let config = dir.path().join("mcrd.toml");
    let second = c
        .relay
        .command(mcr_testbed::bin("mcrd").expect("mcrd"))
        .arg("--config")
        .arg(&config)
        .arg("--control-socket")
        .arg(relay.socket())
        .output()
        .expect("the second mcrd ran");
    let said = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{said}");
    assert!(said.contains("another mcrd is listening on"), "{said}");
    assert_eq!(
        c.relay.tcx_ingress(Chain::RELAY_IN_IF).expect("tcx"),
        program,
        "the second mcrd attached nothing"
    );
    assert!(relay.ctl_ok(&["version"]).is_ok(), "the first one serves on");

    assert_eq!(sender.join().expect("sender").expect("send").packets, 18_000);
    let got = rx.finish(MINUTES).expect("recv done");
    for s in &got.report.streams {
        assert!(
            s.problems(Some(6000)).is_empty(),
            "{}: {:?}",
            s.destination,
            s.problems(Some(6000))
        );
    }
    relay.stop().expect("stopped");
}
