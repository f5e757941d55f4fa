//! The systemd harness: systemd boots as PID 1 of a container whose
//! network is the test's namespace; a service there uses that network, is
//! restarted by `systemctl restart` and, after a SIGKILL, by `Restart=`,
//! and is stopped; the file-descriptor store keeps a service's descriptors
//! across a restart and a crash and is emptied by a stop; and nothing of
//! the container is left after it is dropped, also when the test panicked;
//! and two containers at once keep to their own units.
//!
//! No time is asserted; boot and power-off times are printed.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use mcr_testbed::systemd::Systemd;
use mcr_testbed::{Ns, Signal, TempDir, Testbed};

/// Long enough for any start, restart or datagram here.
const WAIT: Duration = Duration::from_secs(20);

/// The container's namespace `sd` (10.77.0.1 on `sd0`) and a peer (10.77.0.2
/// on `peer0`) that sends it datagrams.
struct Bed {
    _tb: Testbed,
    ns: Ns,
    peer: Ns,
    dir: TempDir,
}

impl Bed {
    fn new(tag: &str) -> Bed {
        let mut tb = Testbed::new(tag).expect("test bed");
        let ns = tb.ns("sd").expect("ns");
        let peer = tb.ns("peer").expect("ns");
        tb.veth(&ns, "sd0", &peer, "peer0").expect("veth");
        ns.addr("sd0", "10.77.0.1/24").expect("addr");
        peer.addr("peer0", "10.77.0.2/24").expect("addr");
        let dir = TempDir::new(tag).expect("dir");
        Bed { _tb: tb, ns, peer, dir }
    }

    fn boot(&self) -> Systemd {
        let start = Instant::now();
        let sd = Systemd::boot(&self.ns, &self.dir).expect("boot systemd");
        eprintln!(
            "booted {} (systemd PID {}) in {:.2} s",
            sd.machine(),
            sd.leader_pid(),
            start.elapsed().as_secs_f64()
        );
        sd
    }

    /// Sends `text` in one datagram from the peer to 10.77.0.1:`port`.
    fn send(&self, port: u16, text: &str) {
        let script = format!("printf %s '{text}' | socat -u - UDP4-SENDTO:10.77.0.1:{port}");
        self.peer.exec("sh", ["-c", &script]).expect("send");
    }

    /// Waits until a UDP socket of the namespace is bound to `port` and,
    /// with `queued`, has a datagram waiting.
    fn wait_udp(&self, port: u16, queued: bool) {
        let start = Instant::now();
        loop {
            let ss = self.ns.exec("ss", ["-Hnlu", &format!("sport = :{port}")]).expect("ss");
            let recv_q = ss.split_whitespace().nth(1).and_then(|q| q.parse::<u64>().ok());
            if recv_q.is_some_and(|q| !queued || q > 0) {
                return;
            }
            assert!(
                start.elapsed() < WAIT,
                "no socket on port {port} (queued: {queued}): {ss:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// `systemctl show --property=KEY --value UNIT`.
fn show(sd: &Systemd, unit: &str, key: &str) -> String {
    let property = format!("--property={key}");
    sd.systemctl(&["show", &property, "--value", unit])
        .unwrap_or_else(|e| panic!("{e}\n{}", sd.journal(unit)))
        .trim()
        .to_string()
}

/// The cgroup (unified hierarchy) of host process `pid`, from the host.
fn cgroup_of(pid: u32) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("cgroup");
    let line = text.lines().find(|l| l.starts_with("0::")).expect("a unified cgroup");
    line["0::".len()..].to_string()
}

fn ino(path: &str) -> Option<u64> {
    std::fs::metadata(path).ok().map(|m| m.ino())
}

/// What identifies a container after its handle is gone.
struct Traces {
    machine: String,
    leader: u32,
    pidns: u64,
}

impl Traces {
    fn of(sd: &Systemd) -> Traces {
        let leader = sd.leader_pid();
        Traces {
            machine: sd.machine().to_string(),
            leader,
            pidns: ino(&format!("/proc/{leader}/ns/pid")).expect("the container's PID namespace"),
        }
    }

    /// No process of the container is left, none in the test's namespace,
    /// and nspawn's directory for it is gone.
    fn assert_gone(&self, ns: &Ns) {
        assert!(
            !Path::new(&format!("/proc/{}", self.leader)).exists(),
            "the container's systemd (PID {}) is still there",
            self.leader
        );
        let left: Vec<String> = std::fs::read_dir("/proc")
            .expect("/proc")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|p| p.parse::<u32>().is_ok() && ino(&format!("/proc/{p}/ns/pid")) == Some(self.pidns))
            .collect();
        assert!(left.is_empty(), "processes of {} left: {left:?}", self.machine);
        let in_ns = netns_pids(ns);
        assert!(in_ns.is_empty(), "processes left in {}: {in_ns}", ns.name());
        let propagate = format!("/run/systemd/nspawn/propagate/{}", self.machine);
        assert!(!Path::new(&propagate).exists(), "{propagate} is left");
        let cgroups = std::process::Command::new("find")
            .args(["/sys/fs/cgroup", "-type", "d", "-name", &self.machine])
            .output()
            .expect("find");
        let cgroups = String::from_utf8_lossy(&cgroups.stdout);
        assert_eq!(cgroups.trim(), "", "cgroups of {} left", self.machine);
    }
}

fn netns_pids(ns: &Ns) -> String {
    let out = std::process::Command::new("ip")
        .args(["netns", "pids", ns.name()])
        .output()
        .expect("ip netns pids");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Drops `sd`, prints how long powering off took, and checks nothing is
/// left.
fn power_off(sd: Systemd, ns: &Ns) {
    let traces = Traces::of(&sd);
    let start = Instant::now();
    drop(sd);
    eprintln!(
        "powered {} off in {:.2} s",
        traces.machine,
        start.elapsed().as_secs_f64()
    );
    traces.assert_gone(ns);
}

#[test]
fn a_service_runs_in_the_namespace_and_is_restarted_killed_and_stopped() {
    let bed = Bed::new("systemd-service");
    let sd = bed.boot();
    let unit = "udp-sink.service";
    let dir = bed.dir.path().display().to_string();
    // Binding 10.77.0.1 works only where the test's namespace is.
    sd.install_unit(
        unit,
        &format!(
            "[Service]\n\
             ExecStartPre=/bin/sh -c 'ip -o link show >{dir}/links'\n\
             ExecStart=/usr/bin/socat -u UDP4-RECV:5000,bind=10.77.0.1 OPEN:{dir}/received,creat,append\n\
             Restart=always\n\
             RestartSec=100ms\n\
             # socat ends with 143 on SIGTERM.\n\
             SuccessExitStatus=143\n"
        ),
    )
    .expect("install");
    let fail = |e: mcr_testbed::Error| -> ! { panic!("{e}\n--- journal:\n{}", sd.journal(unit)) };

    sd.systemctl(&["start", unit]).unwrap_or_else(|e| fail(e));
    let first = sd.wait_active(unit, None, WAIT).unwrap_or_else(|e| fail(e));
    assert_eq!(
        ino(&format!("/proc/{first}/ns/net")),
        ino(&format!("/run/netns/{}", bed.ns.name())),
        "the service's network namespace is not the test's"
    );
    let links = std::fs::read_to_string(bed.dir.path().join("links")).expect("links");
    assert!(links.contains(" sd0@"), "the service does not see sd0:\n{links}");
    bed.wait_udp(5000, false);
    bed.send(5000, "one\n");

    sd.systemctl(&["restart", unit]).unwrap_or_else(|e| fail(e));
    let second = sd.wait_active(unit, Some(first), WAIT).unwrap_or_else(|e| fail(e));
    assert!(
        !Path::new(&format!("/proc/{first}")).exists(),
        "the first process lives on"
    );
    bed.wait_udp(5000, false);
    bed.send(5000, "two\n");

    let killed = sd.kill_main(unit, Signal::Kill).unwrap_or_else(|e| fail(e));
    assert_eq!(killed, second);
    let third = sd.wait_active(unit, Some(second), WAIT).unwrap_or_else(|e| fail(e));
    assert_eq!(show(&sd, unit, "NRestarts"), "1", "{}", sd.journal(unit));
    bed.wait_udp(5000, false);
    bed.send(5000, "three\n");

    // socat appends each datagram as it comes; wait for the last.
    let received = bed.dir.path().join("received");
    let start = Instant::now();
    while !std::fs::read_to_string(&received).unwrap_or_default().contains("three") {
        assert!(start.elapsed() < WAIT, "the third datagram did not arrive");
        std::thread::sleep(Duration::from_millis(10));
    }
    sd.systemctl(&["stop", unit]).unwrap_or_else(|e| fail(e));
    assert_eq!(sd.main_pid(unit).expect("main pid"), None);
    assert_eq!(show(&sd, unit, "ActiveState"), "inactive");
    assert!(
        !Path::new(&format!("/proc/{third}")).exists(),
        "the stopped process lives on"
    );
    assert_eq!(
        std::fs::read_to_string(&received).expect("received"),
        "one\ntwo\nthree\n"
    );

    power_off(sd, &bed.ns);
}

/// Stores a memfd ("state", written by the first process) and a UDP socket
/// bound to 10.77.0.1:5001 ("udp", never read while stored) when it gets no
/// descriptors; logs, one JSON line per start, what it got: the memfd's
/// text and the datagrams waiting in the socket.
const FDSTORE_PY: &str = r#"
import json, os, socket, sys, time
n = int(os.environ.get("LISTEN_FDS", "0")) if os.environ.get("LISTEN_PID") == str(os.getpid()) else 0
names = os.environ.get("LISTEN_FDNAMES", "").split(":") if n else []
fds = dict(zip(names, range(3, 3 + n)))
entry = {"pid": os.getpid(), "fds": n, "names": sorted(names)}
if "state" in fds:
    os.lseek(fds["state"], 0, 0)
    entry["state"] = os.read(fds["state"], 100).decode()
if "udp" in fds:
    udp = socket.socket(fileno=fds["udp"])
    udp.setblocking(False)
    entry["bound"] = "%s:%d" % udp.getsockname()
    entry["queued"] = []
    while True:
        try:
            entry["queued"].append(udp.recv(100).decode())
        except BlockingIOError:
            break
addr = os.environ["NOTIFY_SOCKET"]
notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
notify.connect("\0" + addr[1:] if addr.startswith("@") else addr)
if not n:
    state = os.memfd_create("state")
    os.write(state, b"made by %d" % os.getpid())
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("10.77.0.1", 5001))
    socket.send_fds(notify, [b"FDSTORE=1\nFDNAME=state"], [state])
    socket.send_fds(notify, [b"FDSTORE=1\nFDNAME=udp\nFDPOLL=0"], [udp.fileno()])
with open(sys.argv[1], "a") as log:
    log.write(json.dumps(entry) + "\n")
notify.send(b"READY=1")
while True:
    time.sleep(3600)
"#;

#[test]
fn the_fd_store_is_kept_across_restart_and_crash_and_emptied_by_stop() {
    let bed = Bed::new("systemd-fdstore");
    let sd = bed.boot();
    let unit = "fdstore.service";
    let script = bed.dir.file("fdstore.py", FDSTORE_PY).expect("script");
    let log = bed.dir.path().join("fdstore.log");
    sd.install_unit(
        unit,
        &format!(
            "[Service]\n\
             Type=notify\n\
             NotifyAccess=main\n\
             FileDescriptorStoreMax=8\n\
             Restart=always\n\
             RestartSec=100ms\n\
             ExecStart=/usr/bin/python3 {} {}\n",
            script.display(),
            log.display()
        ),
    )
    .expect("install");
    let fail = |e: mcr_testbed::Error| -> ! { panic!("{e}\n--- journal:\n{}", sd.journal(unit)) };
    let starts = || -> Vec<serde_json::Value> {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect()
    };
    let version = sd.systemctl(&["--version"]).expect("version");
    eprintln!("{}", version.lines().next().unwrap_or_default());
    let preserve = sd
        .systemctl(&["show", "--property=FileDescriptorStorePreserve", unit])
        .expect("show");
    eprintln!(
        "FileDescriptorStorePreserve: {:?} (empty: systemd does not know it)",
        preserve.trim()
    );

    // The first process finds nothing and stores its two descriptors.
    sd.systemctl(&["start", unit]).unwrap_or_else(|e| fail(e));
    let first = sd.wait_active(unit, None, WAIT).unwrap_or_else(|e| fail(e));
    assert_eq!(show(&sd, unit, "NFileDescriptorStore"), "2");
    let s = starts();
    assert_eq!(s.len(), 1);
    assert_eq!(s[0]["fds"], 0);
    let made_by = format!("made by {}", s[0]["pid"]);

    // A restart hands them to the next process: the same memfd, and the
    // same socket with what arrived while nobody read it.
    bed.wait_udp(5001, false);
    bed.send(5001, "while-first");
    bed.wait_udp(5001, true);
    sd.systemctl(&["restart", unit]).unwrap_or_else(|e| fail(e));
    let second = sd.wait_active(unit, Some(first), WAIT).unwrap_or_else(|e| fail(e));
    let s = starts();
    assert_eq!(s.len(), 2, "{s:?}");
    assert_eq!(s[1]["fds"], 2, "{s:?}");
    assert_eq!(s[1]["names"], serde_json::json!(["state", "udp"]));
    assert_eq!(s[1]["state"], made_by.as_str());
    assert_eq!(s[1]["bound"], "10.77.0.1:5001");
    assert_eq!(s[1]["queued"], serde_json::json!(["while-first"]));
    assert_eq!(show(&sd, unit, "NFileDescriptorStore"), "2");

    // So does a SIGKILL that Restart= answers.
    bed.send(5001, "while-second");
    bed.wait_udp(5001, true);
    sd.kill_main(unit, Signal::Kill).unwrap_or_else(|e| fail(e));
    sd.wait_active(unit, Some(second), WAIT).unwrap_or_else(|e| fail(e));
    assert_eq!(show(&sd, unit, "NRestarts"), "1");
    let s = starts();
    assert_eq!(s.len(), 3, "{s:?}");
    assert_eq!(s[2]["fds"], 2, "{s:?}");
    assert_eq!(s[2]["state"], made_by.as_str());
    assert_eq!(s[2]["queued"], serde_json::json!(["while-second"]));

    // A stop empties the store: the socket is closed with it, and the next
    // start finds nothing.
    sd.systemctl(&["stop", unit]).unwrap_or_else(|e| fail(e));
    let ss = bed.ns.exec("ss", ["-Hnlu", "sport = :5001"]).expect("ss");
    assert_eq!(ss.trim(), "", "the stored socket outlived the stop");
    sd.systemctl(&["start", unit]).unwrap_or_else(|e| fail(e));
    sd.wait_active(unit, None, WAIT).unwrap_or_else(|e| fail(e));
    let s = starts();
    assert_eq!(s.len(), 4, "{s:?}");
    assert_eq!(s[3]["fds"], 0, "{s:?}");
    assert_eq!(show(&sd, unit, "NFileDescriptorStore"), "2");

    power_off(sd, &bed.ns);
}

#[test]
fn a_panicking_test_leaves_no_container() {
    let bed = Bed::new("systemd-panic");
    let mut traces = None;
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let sd = bed.boot();
        sd.install_unit("sleeper.service", "[Service]\nExecStart=/bin/sleep infinity\n")
            .expect("install");
        sd.systemctl(&["start", "sleeper.service"]).expect("start");
        traces = Some(Traces::of(&sd));
        panic!("a test fails with its container running (on purpose)");
    }));
    assert!(outcome.is_err());
    traces.expect("booted").assert_gone(&bed.ns);
}

#[test]
fn two_containers_at_once_keep_to_their_own_units() {
    let mut tb = Testbed::new("systemd-two").expect("test bed");
    let a_ns = tb.ns("a").expect("ns");
    let b_ns = tb.ns("b").expect("ns");
    let dir = TempDir::new("systemd-two").expect("dir");
    let a = Systemd::boot(&a_ns, &dir).expect("boot a");
    let b = Systemd::boot(&b_ns, &dir).expect("boot b");
    let unit = "sleeper.service";
    let mut pids = Vec::new();
    for sd in [&a, &b] {
        sd.install_unit(unit, "[Service]\nExecStart=/bin/sleep infinity\n")
            .expect("install");
        sd.systemctl(&["start", unit]).expect("start");
        pids.push(sd.wait_active(unit, None, WAIT).unwrap_or_else(|e| panic!("{e}")));
    }
    let b_pid = pids[1];
    // Each container's units are in a cgroup tree of its own. In a shared
    // one, each systemd creates and removes the other's cgroups as its
    // own: containers booted side by side then fail at random (a unit
    // that cannot attach to a cgroup the other just removed, a boot that
    // never ends).
    for (sd, pid) in [(&a, pids[0]), (&b, pids[1])] {
        let cgroup = cgroup_of(pid);
        assert!(
            cgroup.contains(&format!("/{}/", sd.machine())) && cgroup.ends_with("/system.slice/sleeper.service"),
            "{unit} of {} is in cgroup {cgroup}",
            sd.machine()
        );
    }

    // A unit of the same name stopped in one container runs on in the
    // other, and so does everything when the first powers off.
    a.systemctl(&["stop", unit]).expect("stop");
    assert_eq!(a.main_pid(unit).expect("main pid"), None);
    assert_eq!(b.main_pid(unit).expect("main pid"), Some(b_pid), "{}", b.journal(unit));
    power_off(a, &a_ns);
    assert_eq!(b.main_pid(unit).expect("main pid"), Some(b_pid), "{}", b.journal(unit));
    assert_eq!(show(&b, unit, "ActiveState"), "active");
    b.systemctl(&["restart", unit]).expect("restart");
    b.wait_active(unit, Some(b_pid), WAIT).unwrap_or_else(|e| panic!("{e}"));
    power_off(b, &b_ns);
}
