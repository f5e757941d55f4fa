//! MCR as a system service: systemd told when it is ready, reloading and
//! stopping; shell completions and manual pages from its command line.

use std::time::{Duration, Instant};

use mcr_testbed::config_file::{HEAD, rules_toml, stream_rule};
use mcr_testbed::presets::Chain;
use mcr_testbed::relay::Relay;
use mcr_testbed::{Signal, TempDir, bin};

/// Reads the readiness messages mcrd sends to `NOTIFY_SOCKET`, up to the
/// first that contains `until`. (Not the file-descriptor store's: a ring or
/// link is handed to systemd whenever it is made, as a worker's table
/// first names its interface, between any two readiness messages; the
/// restart tests check those.)
fn notifications(sock: &std::os::unix::net::UnixDatagram, until: &str) -> Vec<String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(n) = sock.recv(&mut buf) {
            let m = String::from_utf8_lossy(&buf[..n]).into_owned();
            if m.starts_with("FDSTORE") {
                continue;
            }
            let done = m.contains(until);
            got.push(m);
            if done {
                break;
            }
        }
    }
    got
}

#[test]
fn systemd_is_told_ready_reloading_and_stopping() {
    let c = Chain::new("ops-notify").expect("chain");
    let dir = TempDir::new("ops-notify").expect("temp dir");
    let path = dir
        .file("mcrd.toml", &format!("{HEAD}{}", rules_toml(&[stream_rule(1)])))
        .expect("write file");
    let sock_path = dir.path().join("notify.sock");
    let sock = std::os::unix::net::UnixDatagram::bind(&sock_path).expect("notify socket");
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let mut relay = Relay::start_with_env(
        &c.relay,
        &["--config", path.to_str().expect("utf-8")],
        &[("NOTIFY_SOCKET", sock_path.to_str().expect("utf-8"))],
    )
    .expect("mcrd");
    let ready = notifications(&sock, "READY=1");
    assert!(
        ready
            .last()
            .is_some_and(|m| m.contains("READY=1") && m.contains("1 rule(s)")),
        "{ready:?}"
    );
    assert!(
        ready.iter().any(|m| m.contains(&format!("MAINPID={}", relay.pid()))),
        "{ready:?}"
    );
    std::fs::write(
        &path,
        format!("{HEAD}{}", rules_toml(&[stream_rule(1), stream_rule(2)])),
    )
    .expect("write");
    relay.signal(Signal::Hup).expect("SIGHUP");
    let reload = notifications(&sock, "READY=1");
    assert!(
        reload
            .first()
            .is_some_and(|m| m.contains("RELOADING=1") && m.contains("MONOTONIC_USEC=")),
        "{reload:?}"
    );
    assert!(reload.last().is_some_and(|m| m.contains("READY=1")), "{reload:?}");
    assert_eq!(relay.rule_list().expect("list").len(), 2, "SIGHUP reloaded the file");
    let log = relay.log_with("reloaded");
    assert!(log.contains("reloaded"), "{log}");
    relay.stop().expect("stopped");
    let stopping = notifications(&sock, "STOPPING=1");
    assert!(stopping.iter().any(|m| m.contains("STOPPING=1")), "{stopping:?}");
}

#[test]
fn completions_and_manual_pages_come_from_the_command_line_definitions() {
    let dir = TempDir::new("ops-man").expect("temp dir");
    let mcrctl = bin("mcrctl").expect("mcrctl");
    for shell in ["bash", "zsh", "fish"] {
        let out = std::process::Command::new(&mcrctl)
            .args(["completions", shell])
            .output()
            .expect("run");
        assert!(out.status.success());
        let script = String::from_utf8_lossy(&out.stdout);
        for cmd in ["reload", "save", "watch", "stats", "add"] {
            assert!(script.contains(cmd), "{shell} completion lacks {cmd}");
        }
        if shell == "bash" {
            let f = dir.file("mcrctl.bash", &script).expect("write file");
            let syntax = std::process::Command::new("bash")
                .arg("-n")
                .arg(&f)
                .status()
                .expect("bash -n");
            assert!(syntax.success(), "the bash completion parses");
        }
    }
    let out = std::process::Command::new(&mcrctl)
        .args(["man", "--dir"])
        .arg(dir.path())
        .output()
        .expect("man");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let page = std::fs::read_to_string(dir.path().join("mcrctl.1")).expect("mcrctl.1");
    for cmd in ["reload", "save", "watch"] {
        assert!(page.contains(cmd), "mcrctl.1 names {cmd}");
        assert!(dir.path().join(format!("mcrctl-{cmd}.1")).exists(), "mcrctl-{cmd}.1");
    }
    let out = std::process::Command::new(bin("mcrd").expect("mcrd"))
        .args(["man", "--dir"])
        .arg(dir.path())
        .output()
        .expect("mcrd man");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let page = std::fs::read_to_string(dir.path().join("mcrd.8")).expect("mcrd.8");
    for flag in [
        "config",
        "check\\-config",
        "http\\-listen",
        "http\\-token\\-file",
        "log\\-format",
    ] {
        assert!(page.contains(flag), "mcrd.8 documents --{flag}");
    }
}
