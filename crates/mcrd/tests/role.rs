//! The relay's role: a standby holds its memberships, rings and outputs
//! ready, counts what it would send and sends nothing; becoming active, it
//! sends from the next frame. Every packet is checked at the sink and
//! against the relay's counts, on both data paths.

use std::time::{Duration, Instant};

use mcr_core::config::Role;
use mcr_core::control::{Reply, StatsReport};
use mcr_testbed::presets::Chain;
use mcr_testbed::relay::Relay;
use mcr_testbed::traffic::Mcrgen;
use mcr_testbed::traffic_lock;

const MINUTES: Duration = Duration::from_secs(180);

/// The one output's (packets sent, packets held).
fn sent_held(s: &StatsReport) -> (u64, u64) {
    let o = &s.rules[0].outputs[0];
    (o.packets, o.held)
}

/// Polls the relay's stats until `done` says so.
fn until(relay: &Relay, what: &str, done: impl Fn(u64, u64) -> bool) -> (u64, u64) {
    let deadline = Instant::now() + MINUTES;
    loop {
        let now = sent_held(&relay.stats().expect("stats"));
        if done(now.0, now.1) {
            return now;
        }
        assert!(Instant::now() < deadline, "waited in vain for {what}: {now:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn role(relay: &Relay, r: &str) -> mcr_core::control::RoleStatus {
    match relay.ask(&["role", r]).expect("role") {
        Reply::Role(s) => s,
        other => panic!("{other:?}"),
    }
}

/// Standby, then active, then standby again while one stream flows: the
/// sink gets exactly one unbroken run of the stream, and everything before
/// and after it was held, not sent.
fn standby_active_standby(datapath: &str) {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new(&format!("role-{datapath}")).expect("chain");
    let relay = Relay::start(&c.relay, &["--role", "standby", "--datapath", datapath]).expect("mcrd");
    relay
        .add_rule("feed", "veth1:239.1.1.1:5001", &["veth2:239.10.1.1:6001"])
        .expect("rule added");
    let shown = relay.ctl_ok(&["role"]).expect("role");
    assert!(shown.starts_with("standby"), "{shown}");
    let n: u64 = 40_000;
    let rx = Mcrgen::streams("239.10.1.1:6001", Chain::SINK_IF)
        .arg("--first-packet-timeout")
        .arg("120s")
        .arg("--idle-timeout")
        .arg("3s")
        .recv(&c.sink)
        .expect("recv");
    std::thread::scope(|s| {
        let sender = s.spawn(|| {
            Mcrgen::streams("239.1.1.1:5001", Chain::GEN_IF)
                .count(n)
                .rate("5k")
                .send(&c.generator, MINUTES)
                .expect("send")
        });
        until(&relay, "held packets", |_, held| held >= 2_000);
        let r = role(&relay, "active");
        assert!(r.changed && r.role == Role::Active, "{r:?}");
        until(&relay, "sent packets", |sent, _| sent >= 5_000);
        let r = role(&relay, "standby");
        assert!(r.changed && r.role == Role::Standby && r.changes == 2, "{r:?}");
        assert_eq!(sender.join().expect("sender").packets, n);
    });
    let (sent, held) = until(&relay, "every packet counted", |sent, held| sent + held >= n);
    assert_eq!(sent + held, n, "each packet is sent or held, once");
    assert!(held > 0 && sent > 0);
    let got = rx.finish(MINUTES).expect("recv done");
    let t = &got.report.streams[0];
    // One run: sequence numbers first..=highest, each once, in order, intact.
    let first = t.holes.first().map_or(0, |h| h.1);
    assert_eq!(t.holes, vec![(0, first)], "held before, then no gap: {:?}", got.report);
    assert_eq!(
        (t.received, t.unique, t.duplicated, t.reordered, t.corrupted),
        (sent, sent, 0, 0, 0),
        "{:?}",
        got.report
    );
    assert_eq!(t.highest_seq, Some(first + sent - 1), "then held to the end");
    let stats = relay.stats().expect("stats");
    let r = stats.role.expect("the stats say the role");
    assert_eq!((r.role, r.held), (Role::Standby, held));
    relay.stop().expect("stopped");
}

#[test]
fn a_standby_on_the_ebpf_path_holds_and_sends_from_the_next_frame() {
    standby_active_standby("ebpf");
}

#[test]
fn a_standby_on_the_workers_path_holds_and_sends_from_the_next_frame() {
    standby_active_standby("packet");
}

#[test]
fn the_role_comes_from_the_config_and_a_wrong_one_is_refused() {
    let c = Chain::new("role-config").expect("chain");
    let dir = mcr_testbed::TempDir::new("role-config").expect("dir");
    let config = dir.path().join("mcrd.toml");
    std::fs::write(&config, "[daemon]\nrole = \"standby\"\n").expect("config");
    let relay = Relay::start(&c.relay, &["--config", config.to_str().expect("utf-8")]).expect("mcrd");
    match relay.ask(&["role"]).expect("role") {
        Reply::Role(r) => assert_eq!((r.role, r.set_by.as_str(), r.changes), (Role::Standby, "config", 0)),
        other => panic!("{other:?}"),
    }
    let wrong = relay.ctl(&["role", "primary"]).expect("mcrctl");
    assert_ne!(wrong.code, Some(0));
    assert!(
        wrong
            .stderr
            .contains("role `primary` is unknown: write active or standby"),
        "{}",
        wrong.stderr
    );
    relay.stop().expect("stopped");
    std::fs::write(&config, "[daemon]\nrole = \"passive\"\n").expect("config");
    let out = c
        .relay
        .command(mcr_testbed::bin("mcrd").expect("mcrd"))
        .arg("--check-config")
        .arg(&config)
        .output()
        .expect("check");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("passive"), "{err}");
}
