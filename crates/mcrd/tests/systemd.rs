//! mcrd under a real systemd (PID 1 of a container whose network is the
//! test's relay namespace, `mcr_testbed::systemd`), with the packaged unit:
//! a package upgrade, `systemctl restart` and a crash that systemd restarts
//! interrupt no
//! stream, on either data path, because what forwards outlives mcrd in the
//! unit's file-descriptor store; `systemctl stop` lets everything go.
//! Three streams of 3,000 packets a second flow throughout; the sink checks
//! every packet (issue 31).

use std::path::{Path, PathBuf};
use std::time::Duration;

use mcr_testbed::presets::Chain;
use mcr_testbed::systemd::Systemd;
use mcr_testbed::traffic::Mcrgen;
use mcr_testbed::{Signal, TempDir, bin, traffic_lock};

const MINUTES: Duration = Duration::from_secs(180);
/// Each of the three streams: 3,000 packets a second.
const RATE_EACH_PPS: u64 = 3000;
/// `systemctl restart`s, then as many SIGKILLs.
const EVENTS: usize = 10;

fn packaging() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging")
}

/// The packaged unit, its user and /etc/mcr, in a container booted in the
/// relay's namespace; the config: three rules and `daemon`.
fn install(c: &Chain, dir: &TempDir, daemon: &str) -> Systemd {
    let sd = Systemd::boot(&c.relay, dir).expect("boot systemd");
    for (what, file, args) in [
        ("sysusers.d/mcr.conf", "mcr-sysusers.conf", vec![]),
        ("tmpfiles.d/mcr.conf", "mcr-tmpfiles.conf", vec!["--create"]),
    ] {
        let text = std::fs::read_to_string(packaging().join(what)).expect("packaging file");
        let path = dir.file(file, &text).expect("copy");
        let tool = if args.is_empty() {
            "systemd-sysusers"
        } else {
            "systemd-tmpfiles"
        };
        let mut all: Vec<String> = args.into_iter().map(String::from).collect();
        all.push(path.display().to_string());
        sd.exec(tool, &all).unwrap_or_else(|e| panic!("{tool}: {e}"));
    }
    let toml = format!("[daemon]\n{daemon}\n{}", Chain::three_feeds_toml());
    std::fs::write(sd.root().join("etc/mcr/mcrd.toml"), toml).expect("config");
    // The program inside the container's own root, as a package puts it
    // in /usr/bin: the workspace's path may be one the unit hides
    // (PrivateTmp= hides /tmp, ProtectHome= /root and /home).
    let inside = Path::new(INSTALLED);
    install_program(&sd, &bin("mcrd").expect("mcrd"));
    let unit = std::fs::read_to_string(packaging().join("mcrd.service")).expect("unit");
    let unit = unit.replace("ExecStart=/usr/bin/mcrd", &format!("ExecStart={}", inside.display()));
    sd.install_unit("mcrd.service", &unit).expect("install the unit");
    // Twenty starts in half a minute are the test's, not a crash loop:
    // systemd's start limit (5 in 10 s) would stop the unit.
    sd.install_unit("mcrd.service.d/test.conf", "[Unit]\nStartLimitIntervalSec=0\n")
        .expect("drop-in");
    sd.systemctl(&["start", "mcrd"])
        .unwrap_or_else(|e| panic!("start: {e}\n{}", sd.journal("mcrd")));
    sd
}

/// Where the container's mcrd is installed.
const INSTALLED: &str = "/opt/mcr/mcrd";

/// Puts `program` where the unit runs mcrd from, as dpkg unpacks a new
/// version: written beside it, then renamed over it (the running mcrd
/// keeps the program it started with).
fn install_program(sd: &Systemd, program: &Path) {
    let to = sd.root().join(INSTALLED.trim_start_matches('/'));
    std::fs::create_dir_all(to.parent().expect("a directory")).expect("mkdir");
    let new = to.with_extension("dpkg-new");
    std::fs::copy(program, &new).expect("copy mcrd");
    std::fs::rename(&new, &to).expect("rename over mcrd");
}

/// `mcrctl ARGS` on the container's control socket.
fn ctl(sd: &Systemd, args: &[&str]) -> String {
    let out = std::process::Command::new(bin("mcrctl").expect("mcrctl"))
        .arg("--socket")
        .arg(sd.root().join("run/mcr/mcrd.sock"))
        .args(args)
        .output()
        .expect("mcrctl ran");
    assert!(
        out.status.success(),
        "mcrctl {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        sd.journal("mcrd")
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The most a killed mcrd may cost a stream on the workers' path: the
/// frames a worker had taken from its ring and not yet sent (a batch).
const KILL_BOUND_PER_RING: u64 = 64;

/// Three streams flow through `sd`'s mcrd while `event` happens `EVENTS`
/// times (each waits until systemd has a new mcrd active), and half a
/// second more; then they end, and every packet is checked. Each hole in a
/// stream must be at most `per_hole` packets (0: none at all), and there
/// are at most `EVENTS` of them. Returns how many packets of each stream
/// arrived.
fn while_streams_flow(c: &Chain, sd: &Systemd, what: &str, per_hole: u64, mut event: impl FnMut(usize)) -> [u64; 3] {
    // At most a minute of each (the events take 0.2 to 0.8 s each on a
    // busy machine); they end half a second after the last event.
    let mut flow = c.three_feeds_flowing(RATE_EACH_PPS).expect("streams");
    std::thread::sleep(Duration::from_millis(500));
    for round in 1..=EVENTS {
        event(round);
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !flow.ran_out().expect("the sender's status"),
        "{what}: the streams ended before the last event: make them longer"
    );
    let (sent, got) = flow.end(MINUTES).expect("streams ended");
    for s in &got.report.streams {
        println!(
            "{what}: {}: {} received, {} lost, holes (first sequence, length) {:?}",
            s.destination, s.received, s.lost, s.holes
        );
    }
    let mut received = [0; 3];
    for (i, n) in received.iter_mut().enumerate() {
        let s = got
            .report
            .streams
            .iter()
            .find(|s| s.destination.contains(&format!("239.10.1.{}:", i + 1)))
            .unwrap_or_else(|| panic!("{what}: nothing of stream {i}"));
        let each = sent.sent_to(i);
        let whole = s.received + s.lost == each && s.duplicated == 0 && s.reordered == 0 && s.corrupted == 0;
        assert!(
            whole,
            "{what}: {}: {each} sent: {:?}",
            s.destination,
            s.problems(Some(each))
        );
        assert!(
            s.holes.len() <= EVENTS && s.holes.iter().all(|(_, n)| *n <= per_hole),
            "{what}: {}: holes {:?} (at most {per_hole} packets each)\n{}",
            s.destination,
            s.holes,
            sd.journal("mcrd")
        );
        *n = s.received;
    }
    received
}

/// Each rule's packets as `mcrctl stats` counts them.
fn counted(sd: &Systemd) -> [u64; 3] {
    let stats: serde_json::Value = serde_json::from_str(&ctl(sd, &["stats", "--json"])).expect("json");
    let mut n = [0; 3];
    for (i, c) in n.iter_mut().enumerate() {
        *c = stats["rules"]
            .as_array()
            .and_then(|rs| rs.iter().find(|r| r["name"] == format!("feed-{}", i + 1)))
            .and_then(|r| r["packets"].as_u64())
            .expect("the rule's packets");
    }
    n
}

fn restarts_and_crashes_lose_nothing(tag: &str, daemon: &str, ebpf: bool) {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new(tag).expect("chain");
    let dir = TempDir::new(tag).expect("dir");
    let sd = install(&c, &dir, daemon);
    let programs = c.relay.tcx_ingress(Chain::RELAY_IN_IF).expect("tcx");
    assert_eq!(
        programs.len(),
        usize::from(ebpf),
        "{programs:?}\n{}",
        sd.journal("mcrd")
    );
    let mut pid = sd.main_pid("mcrd").expect("main pid");
    // A package upgrade: a new build unpacked over the program, then the
    // unit restarted (what the package's maintainer scripts do), to a
    // build whose eBPF program differs and back. The program's tag (a
    // hash of its instructions) says which build runs.
    let (other, differs) = mcr_testbed::upgrade::other_build(&dir).expect("another build");
    let builds = [bin("mcrd").expect("mcrd"), other];
    let tag_now = || {
        let p = c.relay.tcx_ingress(Chain::RELAY_IN_IF).expect("tcx");
        mcr_testbed::bpftool::program_tag(p[0].program).expect("tag")
    };
    let mut tags = if ebpf { vec![tag_now()] } else { Vec::new() };
    let upgrades = while_streams_flow(&c, &sd, &format!("{tag}: upgrade"), 0, |round| {
        install_program(&sd, &builds[round % 2]);
        sd.systemctl(&["daemon-reload"]).expect("daemon-reload");
        sd.systemctl(&["try-restart", "mcrd"])
            .unwrap_or_else(|e| panic!("upgrade {round}: {e}\n{}", sd.journal("mcrd")));
        pid = Some(sd.wait_active("mcrd", pid, MINUTES).expect("active again"));
        if ebpf {
            tags.push(tag_now());
            let (was, is) = (&tags[round - 1], &tags[round]);
            assert_eq!(was != is, differs, "upgrade {round}: program tags {was} then {is}");
        }
    });
    install_program(&sd, &builds[0]);
    // What this build counts from (an older build named by
    // MCR_UPGRADE_BUILD may not hand its counters on).
    let start = counted(&sd);
    if !mcr_testbed::upgrade::other_is_named() {
        assert_eq!(start, upgrades, "every packet counted once, across {EVENTS} upgrades");
    }
    let restarts = while_streams_flow(&c, &sd, &format!("{tag}: systemctl restart"), 0, |round| {
        sd.systemctl(&["restart", "mcrd"])
            .unwrap_or_else(|e| panic!("restart {round}: {e}\n{}", sd.journal("mcrd")));
        pid = Some(sd.wait_active("mcrd", pid, MINUTES).expect("active again"));
    });
    // A worker killed with mcrd loses what it had taken and not sent; the
    // eBPF data path loses nothing.
    let bound = if ebpf { 0 } else { KILL_BOUND_PER_RING };
    let forwarded: Vec<u64> = (0..3).map(|i| start[i] + restarts[i]).collect();
    assert_eq!(
        counted(&sd).to_vec(),
        forwarded,
        "every packet counted once, across {EVENTS} restarts"
    );
    let kills = while_streams_flow(&c, &sd, &format!("{tag}: SIGKILL"), bound, |round| {
        let killed = sd.kill_main("mcrd", Signal::Kill).expect("SIGKILL");
        sd.wait_active("mcrd", Some(killed), MINUTES)
            .unwrap_or_else(|e| panic!("SIGKILL {round}: not restarted: {e}"));
    });
    let events = ctl(&sd, &["events"]);
    let took = if ebpf {
        "restart: took over from systemd's file-descriptor store: 1 eBPF attachment(s), 1 membership socket(s), 0 port socket(s)"
    } else {
        // Each of the two workers' ring on the input.
        "restart: took over from systemd's file-descriptor store: 0 eBPF attachment(s), 1 membership socket(s), 0 port socket(s), 2 receive ring(s)"
    };
    assert!(events.contains(took), "{events}\n{}", sd.journal("mcrd"));
    assert!(
        events.contains("restart: counters carried over: 3 rule(s), 3 output(s) and input(s)"),
        "{events}"
    );
    // The counts go on across the crashes too. The eBPF data path counts
    // every packet it forwards, once. A worker killed with mcrd may have
    // counted frames it had not sent yet (or sent frames it had not
    // counted yet): at most a batch of each ring, each time.
    let now = counted(&sd);
    for i in 0..3 {
        let forwarded = start[i] + restarts[i] + kills[i];
        let off = now[i].abs_diff(forwarded);
        let most = if ebpf {
            0
        } else {
            EVENTS as u64 * 2 * KILL_BOUND_PER_RING
        };
        assert!(
            off <= most,
            "feed-{}: counted {}, forwarded {forwarded} (at most {most} apart)",
            i + 1,
            now[i]
        );
    }
    assert!(!events.contains("not taken over"), "{events}");
    let now = c.relay.tcx_ingress(Chain::RELAY_IN_IF).expect("tcx");
    assert_eq!(now.len(), usize::from(ebpf), "{now:?}");
    if ebpf {
        assert_eq!(now[0].link, programs[0].link, "the same link throughout");
    }

    // Stopped: the program is detached, the memberships are left, and the
    // sink gets nothing more.
    sd.systemctl(&["stop", "mcrd"]).expect("stop");
    assert!(c.relay.tcx_ingress(Chain::RELAY_IN_IF).expect("tcx").is_empty());
    let groups = c
        .relay
        .ip(&["maddr", "show", "dev", Chain::RELAY_IN_IF])
        .expect("maddr");
    assert!(!groups.contains("239.1.1."), "memberships left: {groups}");
    let silent = Mcrgen::streams("239.10.1.1+3:6001+", Chain::SINK_IF)
        .arg("--idle-timeout")
        .arg("2s")
        .recv(&c.sink)
        .expect("recv");
    c.send_from_generator("239.1.1.1+3:5001+", 300, "3k", MINUTES)
        .expect("send");
    let after_stop = silent.finish(MINUTES).expect("recv done");
    assert_eq!(after_stop.report.total.received, 0, "forwarded after stop");
    // And it starts again.
    sd.systemctl(&["start", "mcrd"]).expect("start");
    let rx = c.expect_at_sink("239.10.1.1+3:6001+", 1000, &[]).expect("recv");
    c.send_from_generator("239.1.1.1+3:5001+", 1000, "3k", MINUTES)
        .expect("send");
    let got = rx.finish(MINUTES).expect("recv done");
    for s in &got.report.streams {
        assert!(s.problems(Some(1000)).is_empty(), "{:?}", s.problems(Some(1000)));
    }
    // A stop let the counters go with everything else.
    assert_eq!(counted(&sd), [1000; 3], "counted from zero after a stop");
    let events = ctl(&sd, &["events"]);
    assert!(
        !events.contains("took over"),
        "a start after a stop takes over nothing: {events}"
    );
    sd.systemctl(&["stop", "mcrd"]).expect("stop");
    drop(sd);
}

#[test]
fn under_systemd_restarts_and_crashes_lose_nothing_on_the_ebpf_data_path() {
    restarts_and_crashes_lose_nothing("sd-ebpf", "workers = 1", true);
}

#[test]
fn under_systemd_restarts_and_crashes_lose_nothing_on_the_workers_path() {
    restarts_and_crashes_lose_nothing("sd-workers", "workers = 2\ndatapath = \"packet\"", false);
}
