//! Least privilege: mcrd runs as an unprivileged user with only
//! CAP_NET_RAW and CAP_NET_ADMIN, its workers too, and only members of the
//! control group may use its control socket.

use std::time::Duration;

use mcr_testbed::presets::Chain;
use mcr_testbed::relay::Relay;
use mcr_testbed::traffic::every_packet_crosses;
use mcr_testbed::{Signal, bin, traffic_lock};

/// `nobody` on Debian.
const NOBODY: u32 = 65534;
/// CAP_NET_RAW and CAP_NET_ADMIN, as /proc/PID/status shows them.
const TWO_CAPS: u64 = 0x3000;

/// The real and effective uid of `pid`.
fn uids(pid: u32) -> (u32, u32) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let line = s.lines().find_map(|l| l.strip_prefix("Uid:")).expect("Uid line");
    let v: Vec<u32> = line.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    (v[0], v[1])
}

/// A rule, 3,000 packets through it, every one checked.
fn forwards(c: &Chain, relay: &Relay) {
    relay
        .add_rule("feed", "veth1:239.1.1.1:5001", &["veth2:239.10.1.1:6001"])
        .expect("add");
    every_packet_crosses(
        &c.generator,
        Chain::GEN_IF,
        "239.1.1.1:5001",
        &c.sink,
        Chain::SINK_IF,
        "239.10.1.1:6001",
        3000,
        "3000",
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", relay.log()));
}

/// Supervisor and every worker: uid `uid`, and exactly the two capabilities
/// (effective, permitted, bounding and ambient).
fn runs_as(relay: &Relay, uid: u32) {
    let mut pids = vec![relay.pid()];
    pids.extend(relay.workers().expect("workers").iter().filter_map(|w| w.pid));
    assert!(pids.len() >= 2, "a supervisor and its workers");
    for pid in pids {
        assert_eq!(uids(pid), (uid, uid), "pid {pid}");
        let (eff, prm, _, amb) = mcr_sys::privilege::caps_of(pid).expect("caps");
        assert_eq!((eff, prm, amb), (TWO_CAPS, TWO_CAPS, TWO_CAPS), "pid {pid}");
    }
}

#[test]
fn started_as_root_with_user_it_keeps_only_the_two_capabilities_and_forwards() {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("priv-user").expect("chain");
    let mut relay = Relay::start(&c.relay, &["--user", "nobody", "--workers", "2"]).expect("mcrd");
    runs_as(&relay, NOBODY);
    let (_, _, bnd, _) = mcr_sys::privilege::caps_of(relay.pid()).expect("caps");
    assert_eq!(bnd, TWO_CAPS, "nothing else can be gained again");
    if let Err(e) = relay.wait_for_log("running as user `nobody`", Duration::from_secs(30)) {
        panic!("{e}\n{}", relay.log());
    }
    forwards(&c, &relay);
    // A worker restarted by the unprivileged supervisor is as it was.
    let w = relay.workers().expect("workers")[0].clone();
    mcr_sys::process::send_signal(w.pid.expect("pid"), Signal::Kill).expect("kill");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while relay.workers().expect("workers")[0]
        .pid
        .is_none_or(|p| Some(p) == w.pid)
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    runs_as(&relay, NOBODY);
    relay.stop().expect("stopped");
}

#[test]
fn started_as_a_non_root_user_with_the_two_capabilities_it_forwards() {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("priv-nonroot").expect("chain");
    let relay = Relay::start_wrapped(
        &c.relay,
        &[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all,+net_raw,+net_admin",
            "--ambient-caps=-all,+net_raw,+net_admin",
            "--bounding-set=-all,+net_raw,+net_admin",
        ],
        &[],
        &[],
    )
    .expect("mcrd as nobody");
    runs_as(&relay, NOBODY);
    forwards(&c, &relay);
    relay.stop().expect("stopped");
}

#[test]
fn only_members_of_the_control_group_may_use_the_socket() {
    let c = Chain::new("priv-group").expect("chain");
    // Group `daemon` (gid 1) is the control group.
    let mut relay = Relay::start(&c.relay, &["--control-group", "daemon"]).expect("mcrd");
    let meta = std::fs::metadata(relay.socket()).expect("socket");
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    assert_eq!((meta.permissions().mode() & 0o777, meta.gid()), (0o660, 1));
    let as_nobody = |groups: &str| {
        let mut cmd = std::process::Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534"]);
        match groups {
            "" => cmd.arg("--clear-groups"),
            g => cmd.arg(format!("--groups={g}")),
        };
        cmd.arg(bin("mcrctl").expect("mcrctl"))
            .arg("--socket")
            .arg(relay.socket())
            .arg("version");
        cmd.output().expect("mcrctl as nobody")
    };
    // Outside the group: the socket's mode keeps it out.
    let out = as_nobody("");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("ermission denied"),
        "{out:?}"
    );
    // In the group: served.
    let out = as_nobody("1");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    // Even with the mode opened up, the daemon checks who is calling.
    std::fs::set_permissions(relay.socket(), std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let out = as_nobody("");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("uid 65534 gid 65534 may not use mcrd") && err.contains("group `daemon`"),
        "{err}"
    );
    // The daemon logs the refusal before it answers; its log reaches this
    // test through a pipe and a reader thread, so wait for the line.
    if let Err(e) = relay.wait_for_log("refused uid 65534", Duration::from_secs(30)) {
        panic!("{e}\n{}", relay.log());
    }
    relay.ctl_ok(&["version"]).expect("root still may");
}
