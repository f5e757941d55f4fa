//! keepalived with MCR's notify script: a pair elects one master, and the
//! roles the script sets follow what happens to it (killed, a tracked link
//! cut, stopped). No mcrd runs here: a stand-in for mcrctl records the
//! roles it is asked for. Then the script alone, fed by hand: what it
//! ignores, its retries, and how it ends.
//!
//! Nothing here asserts a time: the adverts are 0.1 s apart and every wait
//! is generous. The failover times seen are printed.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mcr_testbed::vrrp::{self, Keepalived, Transition, VrrpConfig};
use mcr_testbed::{BridgeOptions, Ns, Proc, Signal, TempDir, Testbed};

/// Long enough for any election or failover here (each takes well under a
/// second), and for one on a loaded machine.
const WAIT: Duration = Duration::from_secs(20);

/// Two relays, `a` and `b`, on a switch (`sw`, a bridge): each has its
/// input `in0` on the switch, which carries the adverts too, and an output
/// `out0` to a namespace of its own, tracked.
struct Pair {
    _tb: Testbed,
    dir: TempDir,
    a: Ns,
    b: Ns,
    calls: PathBuf,
    mcrctl: PathBuf,
}

impl Pair {
    fn new(tag: &str) -> Pair {
        let mut tb = Testbed::new(tag).expect("test bed");
        let sw = tb.ns("sw").expect("ns");
        let a = tb.ns("a").expect("ns");
        let b = tb.ns("b").expect("ns");
        tb.bridge(&sw, "br0", BridgeOptions::default()).expect("bridge");
        for (ns, side, addr) in [(&a, "a", "10.20.0.1/24"), (&b, "b", "10.20.0.2/24")] {
            let port = format!("in_{side}");
            tb.veth(ns, "in0", &sw, &port).expect("veth");
            tb.attach(&sw, &port, "br0").expect("attach");
            ns.addr("in0", addr).expect("addr");
            let sink = tb.ns(&format!("sink{side}")).expect("ns");
            tb.veth(ns, "out0", &sink, "in0").expect("veth");
        }
        let dir = TempDir::new(tag).expect("dir");
        let calls = dir.path().join("mcrctl-calls");
        // Stands in for mcrctl: records its arguments, one call a line.
        let mcrctl = dir
            .file(
                "mcrctl",
                &format!("#!/bin/sh\nprintf '%s\\n' \"$*\" >>'{}'\n", calls.display()),
            )
            .expect("stub");
        std::fs::set_permissions(&mcrctl, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        Pair {
            _tb: tb,
            dir,
            a,
            b,
            calls,
            mcrctl,
        }
    }

    fn socket(&self, ns: &Ns) -> PathBuf {
        self.dir.path().join(format!("{}.sock", ns.name()))
    }

    fn conf(&self, ns: &Ns, priority: u8) -> VrrpConfig {
        VrrpConfig {
            instance: "MCR".into(),
            interface: "in0".into(),
            vrid: 51,
            priority,
            advert_int_s: 0.1,
            track_interfaces: vec!["out0".into()],
            track_process: None,
            track_script: None,
            virtual_ip: "10.20.0.10/24".into(),
            notify_script: vrrp::notify_script(),
            control_socket: self.socket(ns),
            script_user: "root".into(),
            synced: None,
        }
    }

    fn start(&self, ns: &Ns, priority: u8) -> Keepalived {
        let mcrctl = self.mcrctl.display().to_string();
        Keepalived::start_with_env(ns, self.dir.path(), &self.conf(ns, priority), &[("MCRCTL", &mcrctl)])
            .expect("keepalived starts")
    }

    /// The roles mcrctl was asked to set on `ns`'s relay, in order.
    fn roles(&self, ns: &Ns) -> Vec<String> {
        let prefix = format!("--socket {} role ", self.socket(ns).display());
        std::fs::read_to_string(&self.calls)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.strip_prefix(&prefix).map(String::from))
            .collect()
    }
}

fn last_state(t: &[Transition]) -> Option<&str> {
    t.last().map(|t| t.state.as_str())
}

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64()
}

/// Starts both and waits for the election: returns (master, backup) with
/// their namespaces.
fn elect(pair: &Pair) -> ((Keepalived, &Ns), (Keepalived, &Ns)) {
    let ka = pair.start(&pair.a, 150);
    let kb = pair.start(&pair.b, 100);
    let mut master = None;
    for _ in 0..(WAIT.as_millis() / 20) {
        match (last_state(&ka.transitions()), last_state(&kb.transitions())) {
            (Some("MASTER"), Some("BACKUP")) => master = Some(true),
            (Some("BACKUP"), Some("MASTER")) => master = Some(false),
            _ => {}
        }
        if master.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let (m, b) = match master {
        Some(true) => ((ka, &pair.a), (kb, &pair.b)),
        Some(false) => ((kb, &pair.b), (ka, &pair.a)),
        None => panic!(
            "no election: a {:?}\n{}\nb {:?}\n{}",
            ka.transitions(),
            ka.log(),
            kb.transitions(),
            kb.log()
        ),
    };
    // Every event the script acted on reached mcrctl, in order.
    for (k, ns) in [(&m.0, m.1), (&b.0, b.1)] {
        let t = k.transitions();
        assert!(
            t.iter().all(|t| t.ok && t.kind == "INSTANCE" && t.name == "MCR"),
            "{t:?}"
        );
        let roles: Vec<String> = t.iter().map(|t| t.role.clone()).collect();
        assert_eq!(pair.roles(ns), roles);
    }
    assert_eq!(pair.roles(m.1).last().map(String::as_str), Some("active"));
    assert_eq!(pair.roles(b.1).last().map(String::as_str), Some("standby"));
    (m, b)
}

/// The backup's record gains a MASTER (and mcrctl a `role active`) after
/// `n` transitions; returns how long after `since` (Unix seconds).
fn takes_over(pair: &Pair, k: &Keepalived, ns: &Ns, n: usize, since: f64) -> f64 {
    let t = k
        .wait_for("become MASTER", WAIT, |t| {
            t.len() > n && last_state(t) == Some("MASTER")
        })
        .expect("the backup takes over");
    assert_eq!(pair.roles(ns).last().map(String::as_str), Some("active"));
    t[t.len() - 1].at_unix_s - since
}

#[test]
fn vrrp_killed_master_fails_over_and_a_returning_relay_stays_standby() {
    let pair = Pair::new("vrrp-kill");
    let ((mut master, mns), (backup, bns)) = elect(&pair);
    let before = backup.transitions().len();

    let at = now_s();
    master.kill().expect("kill");
    let took = takes_over(&pair, &backup, bns, before, at);
    eprintln!("SIGKILL of the master: the backup's mcrctl role active {took:.3} s later");
    // The killed relay's script saw its keepalived die without a STOP and
    // made its mcrd standby (the peer is active now).
    let t = master
        .wait_for("record the VRRP process's end", WAIT, |t| last_state(t) == Some("EOF"))
        .expect("EOF");
    assert_eq!(t.last().map(|t| (t.role.as_str(), t.ok)), Some(("standby", true)));
    assert_eq!(pair.roles(mns).last().map(String::as_str), Some("standby"));

    // It comes back, with a priority above the master's: BACKUP, and it
    // stays so (nopreempt).
    drop(master);
    let back = pair.start(mns, 200);
    back.wait_for("enter BACKUP", WAIT, |t| last_state(t) == Some("BACKUP"))
        .expect("BACKUP");
    // 30 adverts' time.
    std::thread::sleep(Duration::from_secs(3));
    let t = back.transitions();
    assert!(
        t.iter().all(|t| t.state == "BACKUP"),
        "the returning relay took over: {t:?}\n{}",
        back.log()
    );
    assert_eq!(last_state(&backup.transitions()), Some("MASTER"));
    assert_eq!(pair.roles(bns).last().map(String::as_str), Some("active"));
    assert_eq!(pair.roles(mns).last().map(String::as_str), Some("standby"));
}

#[test]
fn vrrp_a_cut_output_link_faults_the_master_and_the_backup_takes_over() {
    let pair = Pair::new("vrrp-link");
    let ((master, mns), (backup, bns)) = elect(&pair);
    let (m_before, b_before) = (master.transitions().len(), backup.transitions().len());

    let at = now_s();
    mns.link_down("out0").expect("link down");
    let t = master
        .wait_for("enter FAULT", WAIT, |t| {
            t.len() > m_before && last_state(t) == Some("FAULT")
        })
        .expect("FAULT");
    assert_eq!(t.last().map(|t| t.role.as_str()), Some("standby"));
    let took = takes_over(&pair, &backup, bns, b_before, at);
    eprintln!("output link of the master down: the backup's mcrctl role active {took:.3} s later");
    assert_eq!(pair.roles(mns).last().map(String::as_str), Some("standby"));

    // The link comes back: the old master waits as BACKUP.
    mns.link_up("out0").expect("link up");
    master
        .wait_for("enter BACKUP", WAIT, |t| last_state(t) == Some("BACKUP"))
        .expect("BACKUP");
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(last_state(&master.transitions()), Some("BACKUP"));
    assert_eq!(last_state(&backup.transitions()), Some("MASTER"));
}

#[test]
fn vrrp_a_stopped_master_hands_over_and_goes_standby() {
    let pair = Pair::new("vrrp-stop");
    let ((mut master, mns), (backup, bns)) = elect(&pair);
    let b_before = backup.transitions().len();

    let at = now_s();
    master.stop().expect("stop");
    let took = takes_over(&pair, &backup, bns, b_before, at);
    eprintln!("SIGTERM of the master's keepalived: the backup's mcrctl role active {took:.3} s later");
    // keepalived sends its script SIGTERM and then STOP; the script acts
    // on the STOP before it ends.
    let t = master.transitions();
    assert_eq!(
        t.last().map(|t| (t.state.as_str(), t.role.as_str(), t.ok)),
        Some(("STOP", "standby", true))
    );
    assert_eq!(pair.roles(mns).last().map(String::as_str), Some("standby"));
    assert!(!master.running());
}

#[test]
fn vrrp_example_config_passes_keepalived_check() {
    let mut tb = Testbed::new("vrrp-example").expect("test bed");
    let ns = tb.ns("relay").expect("ns");
    let peer = tb.ns("peer").expect("ns");
    for i in ["eth0", "eth1", "eth2"] {
        tb.veth(&ns, i, &peer, i).expect("veth");
    }
    // The example runs its script as mcr, whom keepalived -t must find:
    // here, where MCR may not be installed, root stands in.
    let text = std::fs::read_to_string(vrrp::example_conf()).expect("example");
    assert_eq!(text.matches("script_user mcr\n").count(), 1);
    let dir = TempDir::new("vrrp-example").expect("dir");
    let conf = dir
        .file(
            "keepalived.conf",
            &text.replace("script_user mcr\n", "script_user root\n"),
        )
        .expect("write");
    let out = ns
        .command("keepalived")
        .arg("-t")
        .arg("-f")
        .arg(&conf)
        .output()
        .expect("run keepalived -t");
    assert!(
        out.status.success(),
        "keepalived -t: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The notify script on its own: a fifo that the test writes, under a
/// parent (`sh`) that the test may kill, with the mcrctl stand-in of
/// `dir`.
struct Script {
    sh: Proc,
    fifo: Option<std::fs::File>,
    record: PathBuf,
    calls: PathBuf,
}

impl Script {
    fn start(dir: &Path, mcrctl_body: &str) -> Script {
        let fifo = dir.join("fifo");
        let status = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
        assert!(status.success());
        let calls = dir.join("calls");
        let mcrctl = dir.join("mcrctl");
        std::fs::write(
            &mcrctl,
            format!("#!/bin/sh\ncalls='{}'\n{mcrctl_body}", calls.display()),
        )
        .expect("stub");
        std::fs::set_permissions(&mcrctl, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let record = dir.join("record");
        let mut cmd = Command::new("sh");
        // As keepalived does: options, then the fifo last; its parent
        // stays until the test kills it.
        cmd.args(["-c", "\"$0\" --instance MCR --group PAIR \"$1\" & wait"])
            .arg(vrrp::notify_script())
            .arg(&fifo)
            .env("MCRCTL", &mcrctl)
            .env("MCR_VRRP_LOG", &record)
            .env_remove("MCR_CONTROL_SOCKET")
            .env_remove("MCR_VRRP_INSTANCE");
        let sh = Proc::spawn(cmd).expect("spawn");
        // Read and write, as keepalived opens it: never blocks.
        let fifo = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&fifo)
            .expect("open fifo");
        Script {
            sh,
            fifo: Some(fifo),
            record,
            calls,
        }
    }

    fn send(&mut self, lines: &str) {
        let fifo = self.fifo.as_mut().expect("the fifo is open");
        fifo.write_all(lines.as_bytes()).expect("write fifo");
    }

    /// Closes the test's end of the fifo, its only writer.
    fn close(&mut self) {
        self.fifo = None;
    }

    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(&self.calls)
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }

    fn record(&self) -> Vec<String> {
        // Without the time.
        std::fs::read_to_string(&self.record)
            .unwrap_or_default()
            .lines()
            .map(|l| l.split_once(' ').map_or(l, |(_, rest)| rest).to_string())
            .collect()
    }

    /// Waits until the script has recorded `n` events (it records each
    /// once its mcrctl call has returned), and returns the calls.
    fn wait_for_record(&self, n: usize) -> Vec<String> {
        for _ in 0..(WAIT.as_millis() / 20) {
            if self.record().len() >= n {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.calls()
    }

    /// The script's own process (the child of `sh`).
    fn pid(&self) -> u32 {
        let children = format!("/proc/{0}/task/{0}/children", self.sh.pid());
        for _ in 0..(WAIT.as_millis() / 20) {
            if let Some(p) = std::fs::read_to_string(&children)
                .ok()
                .and_then(|s| s.split_whitespace().next()?.parse().ok())
            {
                return p;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("the script did not start");
    }
}

fn gone(pid: u32) -> bool {
    (0..(WAIT.as_millis() / 20)).any(|_| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let alive = stat
            .rfind(')')
            .is_some_and(|i| !stat[i + 1..].trim_start().starts_with('Z'));
        if alive {
            std::thread::sleep(Duration::from_millis(20));
        }
        !alive
    })
}

#[test]
fn vrrp_notify_script_follows_its_instance_and_group_only() {
    let dir = TempDir::new("vrrp-script-filter").expect("dir");
    let mut s = Script::start(dir.path(), "printf '%s\\n' \"$*\" >>\"$calls\"\n");
    s.send(concat!(
        "INSTANCE \"OTHER\" MASTER 100\n",
        "GROUP \"OTHER\" MASTER 0\n",
        "INSTANCE \"MCR\" MASTER_RX_LOWER_PRI 150\n",
        "INSTANCE \"MCR\" MASTER_PRIORITY 140\n",
        "something keepalived never wrote\n",
        "\n",
        "INSTANCE \"MCR\" BACKUP 150\n",
        "INSTANCE \"MCR\" MASTER 150\n",
        "INSTANCE \"MCR\" BACKUP_PRIORITY 150\n",
        "INSTANCE \"MCRX\" FAULT 150\n",
        "GROUP \"PAIR\" FAULT 0\n",
        "INSTANCE \"MCR\" DELETED 150\n",
        "GROUP \"PAIR\" MASTER 0\n",
    ));
    let calls = s.wait_for_record(5);
    assert_eq!(
        calls,
        [
            "role standby",
            "role active",
            "role standby",
            "role standby",
            "role active"
        ]
    );
    assert_eq!(
        s.record(),
        [
            "INSTANCE MCR BACKUP standby ok",
            "INSTANCE MCR MASTER active ok",
            "GROUP PAIR FAULT standby ok",
            "INSTANCE MCR DELETED standby ok",
            "GROUP PAIR MASTER active ok",
        ]
    );
}

#[test]
fn vrrp_notify_script_retries_a_failing_mcrctl_and_keeps_the_order() {
    let dir = TempDir::new("vrrp-script-retry").expect("dir");
    // Fails its first two calls, as mcrctl does while mcrd restarts.
    let stub = "n=\"$calls.n\"\ni=$(cat \"$n\" 2>/dev/null || echo 0)\necho $((i + 1)) >\"$n\"\n\
                if [ \"$i\" -lt 2 ]; then echo 'mcrd: no answer' >&2; exit 1; fi\n\
                printf '%s\\n' \"$*\" >>\"$calls\"\n";
    let mut s = Script::start(dir.path(), stub);
    s.send("INSTANCE \"MCR\" MASTER 150\nINSTANCE \"MCR\" BACKUP 150\n");
    assert_eq!(s.wait_for_record(2), ["role active", "role standby"]);
    assert_eq!(
        s.record(),
        ["INSTANCE MCR MASTER active ok", "INSTANCE MCR BACKUP standby ok"]
    );
}

#[test]
fn vrrp_notify_script_acts_on_stop_after_sigterm_and_ends() {
    let dir = TempDir::new("vrrp-script-stop").expect("dir");
    let mut s = Script::start(dir.path(), "printf '%s\\n' \"$*\" >>\"$calls\"\n");
    s.send("INSTANCE \"MCR\" MASTER 150\n");
    assert_eq!(s.wait_for_record(1), ["role active"]);
    // keepalived stopping: SIGTERM first, the STOP lines after.
    let pid = s.pid();
    mcr_sys::process::send_signal(pid, Signal::Term).expect("SIGTERM");
    std::thread::sleep(Duration::from_millis(200));
    s.send("INSTANCE \"MCR\" STOP 150\n");
    assert_eq!(s.wait_for_record(2), ["role active", "role standby"]);
    assert!(gone(pid), "the script still runs after STOP");
}

#[test]
fn vrrp_notify_script_leaves_the_role_on_reload_and_sets_standby_when_keepalived_dies() {
    // A reload: the fifo closes, its writer lives on.
    let dir = TempDir::new("vrrp-script-reload").expect("dir");
    let mut s = Script::start(dir.path(), "printf '%s\\n' \"$*\" >>\"$calls\"\n");
    s.send("INSTANCE \"MCR\" MASTER 150\n");
    assert_eq!(s.wait_for_record(1), ["role active"]);
    let pid = s.pid();
    s.close();
    assert!(gone(pid), "the script still runs after the fifo closed");
    assert_eq!(s.calls(), ["role active"]);

    // Death: the parent (keepalived's VRRP process) is killed; its end
    // closes the fifo.
    let dir = TempDir::new("vrrp-script-death").expect("dir");
    let mut s = Script::start(dir.path(), "printf '%s\\n' \"$*\" >>\"$calls\"\n");
    s.send("INSTANCE \"MCR\" MASTER 150\n");
    assert_eq!(s.wait_for_record(1), ["role active"]);
    let pid = s.pid();
    s.sh.signal(Signal::Kill).expect("kill sh");
    s.close();
    assert_eq!(s.wait_for_record(2), ["role active", "role standby"]);
    assert!(gone(pid));
    assert_eq!(
        s.record().last().map(String::as_str),
        Some("keepalived vrrp-process EOF standby ok")
    );
}
