//! A relay of a fleet whose etcd runs as production runs it (Debian's
//! etcd-server in the relay's namespace): TLS with a CA made by the test,
//! `--client-cert-auth`, and authentication on, the relay's user holding a
//! role that may only read its prefix. Rules put by the admin reach the
//! workers; each way the relay can be refused (a wrong CA, a certificate
//! for another host, no client certificate, a wrong password, a role
//! revoked while it runs) shows its kind and reason in `mcrctl store`, the
//! API and `/metrics`, while the rules it had keep forwarding every packet;
//! a token that expires while mcrd runs is renewed without a break. One
//! test walks through all of it on one etcd, to spare the test beds'
//! setting up.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use mcr_core::control::{StoreProblem, StoreStatus};
use mcr_testbed::etcd::{Etcd, RELAY_ROLE, RELAY_USER, RelayFiles};
use mcr_testbed::presets::Chain;
use mcr_testbed::relay::Relay;
use mcr_testbed::traffic::{Mcrgen, every_packet_crosses};
use mcr_testbed::{TempDir, traffic_lock};

const MINUTES: Duration = Duration::from_secs(240);
const PREFIX: &str = "/mcr/relay-1/rules/";

fn stream_rule(i: u32) -> String {
    format!(
        "input = \"veth1:239.1.1.{}:5001\"\noutputs = [\"veth2:239.10.1.{}:6001\"]\n",
        i + 1,
        i + 1
    )
}

/// A config file `name` following `endpoint` with `etcd_keys` (the TLS and
/// user keys), the cache in `dir`.
fn config(dir: &TempDir, name: &str, endpoint: &str, etcd_keys: &str) -> String {
    let text = format!(
        "[daemon]\nworkers = 2\n\n[daemon.etcd]\nendpoints = [\"{endpoint}\"]\nprefix = \"{PREFIX}\"\ncache = \"{}\"\n{etcd_keys}",
        dir.path().join("etcd-cache.json").display()
    );
    dir.file(name, &text)
        .expect("config")
        .to_str()
        .expect("utf-8")
        .to_string()
}

fn store(relay: &Relay) -> StoreStatus {
    relay.stats().expect("stats").store.expect("a store")
}

/// Polls until `ok` holds of the store's status.
fn until(relay: &Relay, what: &str, ok: impl Fn(&StoreStatus) -> bool) -> StoreStatus {
    let deadline = Instant::now() + MINUTES;
    loop {
        let s = store(relay);
        if ok(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "never {what}: {s:?}\n{}", relay.log());
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn metrics(c: &Chain) -> String {
    c.relay
        .exec("curl", ["-s", "http://127.0.0.1:9808/metrics"])
        .expect("curl")
}

/// The two streams the store's rules carry cross, every packet checked.
fn both_streams_cross(c: &Chain) {
    let got = every_packet_crosses(
        &c.generator,
        Chain::GEN_IF,
        "239.1.1.1+2:5001",
        &c.sink,
        Chain::SINK_IF,
        "239.10.1.1+2:6001",
        3_000,
        "3k",
    )
    .expect("the rules forward");
    assert_eq!(got.report.total.received, 6_000);
}

/// The relay is refused as `kind` says, and shows it everywhere, while the
/// cached rules forward.
fn refused_and_forwarding(c: &Chain, relay: &Relay, kind: StoreProblem, says: &str) {
    let s = until(relay, &format!("refused as {kind}"), |s| s.problem_kind == Some(kind));
    let problem = s.problem.clone().unwrap_or_default();
    eprintln!(
        "{kind}: mcrctl store says: {}",
        relay.ctl_ok(&["store"]).expect("store").trim()
    );
    assert!(!s.connected && s.rules == 2, "{s:?}");
    assert!(problem.contains(says), "{problem}");
    assert!(problem.contains("forwarding the 2 rule(s) of the cache"), "{problem}");
    let shown = relay.ctl_ok(&["store"]).expect("mcrctl store");
    assert!(shown.contains(&format!("NOT REACHED [{kind}]")), "{shown}");
    let api = c
        .relay
        .exec("curl", ["-s", "http://127.0.0.1:9808/api/store"])
        .expect("curl");
    assert!(api.contains(&format!("\"problem_kind\":\"{kind}\"")), "{api}");
    let m = metrics(c);
    assert!(m.contains(&format!("mcr_etcd_problem{{kind=\"{kind}\"}} 1")), "{m}");
    assert!(m.contains("mcr_etcd_connected 0"), "{m}");
    let log = relay.log_with(says);
    assert!(log.contains(says), "{log}");
    both_streams_cross(c);
}

fn refused_at_start(c: &Chain, dir: &TempDir, name: &str, endpoint: &str, keys: &str, kind: StoreProblem, says: &str) {
    let relay = Relay::start(&c.relay, &["--config", &config(dir, name, endpoint, keys)]).expect("mcrd");
    refused_and_forwarding(c, &relay, kind, says);
    relay.stop().expect("stopped");
}

#[test]
fn a_secured_store_renews_the_token_notices_a_revocation_and_names_each_refusal() {
    let _lock = traffic_lock().expect("lock");
    let c = Chain::new("fleet-secured").expect("chain");
    let dir = TempDir::new("fleet-secured").expect("dir");
    // Tokens end 1 s after their last use; mcrd uses its own every 3 s
    // (`probe_ms`), so each of its probes finds it expired.
    let (etcd, files): (Etcd, RelayFiles) =
        Etcd::start_fleet_store(&c.relay, dir.path(), PREFIX, Some(1)).expect("etcd");
    let url = "https://127.0.0.1:2379";
    let streams: Vec<(String, String)> = (0..2).map(|i| (format!("{PREFIX}s{i}"), stream_rule(i))).collect();
    let rev = etcd.txn_put(&streams).expect("the admin puts the rules");

    // The admin's rules reach the workers over TLS, as the relay's user.
    let good = config(&dir, "good.toml", url, &format!("{}probe_ms = 3000\n", files.toml()));
    let check = std::process::Command::new(mcr_testbed::bin("mcrd").expect("mcrd"))
        .args(["--check-config", &good])
        .output()
        .expect("mcrd --check-config");
    assert!(check.status.success(), "{check:?}");
    let relay = Relay::start(&c.relay, &["--config", &good]).expect("mcrd");
    until(&relay, "running the store's rules", |s| s.workers_revision >= rev);
    both_streams_cross(&c);
    let since = store(&relay).since_s;

    // While two streams flow: the token expires and is renewed with no
    // break; a change made after that arrives as a change; the relay's
    // role revoked is noticed (within the probe interval, the open watch
    // notwithstanding), and granted again the relay follows the
    // store. The streams lose nothing.
    let n: u64 = 45_000;
    let rx = Mcrgen::streams("239.10.1.1+2:6001", Chain::SINK_IF)
        .expect(n)
        .arg("--first-packet-timeout")
        .arg("60s")
        .recv(&c.sink)
        .expect("recv");
    let last = std::thread::scope(|s| {
        let sender = s.spawn(|| {
            Mcrgen::streams("239.1.1.1+2:5001", Chain::GEN_IF)
                .count(n)
                .rate("3k")
                .send(&c.generator, MINUTES)
                .expect("send")
        });
        let renewed = "was refused (";
        let deadline = Instant::now() + MINUTES;
        while !relay.log().contains(renewed) {
            let s = store(&relay);
            assert!(s.connected && s.since_s >= since, "{s:?}\n{}", relay.log());
            assert!(Instant::now() < deadline, "no renewal:\n{}", relay.log());
            std::thread::sleep(Duration::from_millis(100));
        }
        let log = relay.log();
        let line = log.lines().find(|l| l.contains(renewed)).unwrap_or_default();
        eprintln!("renewed: {line}");
        assert!(line.contains("invalid auth token"), "{line}");
        let rev = etcd.put(format!("{PREFIX}s2"), stream_rule(2)).expect("put");
        let s = until(&relay, "running the change", |s| s.workers_revision >= rev);
        assert!(s.connected && s.since_s >= since && s.rules == 3, "{s:?}");
        assert_eq!(s.updates, 2, "a whole read, then one change: no new session");

        etcd.revoke_role(RELAY_USER, RELAY_ROLE).expect("revoke");
        let s = until(&relay, "refused its permission", |s| {
            s.problem_kind == Some(StoreProblem::Permission)
        });
        let problem = s.problem.unwrap_or_default();
        eprintln!("revoked: {problem}");
        assert!(
            problem.contains(&format!("user `{RELAY_USER}` may not read {PREFIX}")),
            "{problem}"
        );
        assert!(metrics(&c).contains("mcr_etcd_problem{kind=\"permission\"} 1"));
        assert!(
            relay
                .ctl_ok(&["store"])
                .expect("store")
                .contains("NOT REACHED [permission]")
        );
        assert_eq!(s.rules, 3, "its rules stay");
        etcd.grant_role(RELAY_USER, RELAY_ROLE).expect("grant");
        let rev = etcd.delete(format!("{PREFIX}s2")).expect("delete");
        let back = until(&relay, "following again", |s| s.connected && s.workers_revision >= rev);
        assert_eq!((back.rules, back.problem_kind), (2, None));
        assert!(metrics(&c).contains("mcr_etcd_problem{kind=\"permission\"} 0"));
        assert_eq!(sender.join().expect("sender").packets, 2 * n);
        rev
    });
    let got = rx.finish(MINUTES).expect("recv done");
    assert_eq!(got.code, Some(0), "{:?}\n{}", got.report.problems, relay.log());
    for st in &got.report.streams {
        assert_eq!(
            (st.unique, st.lost, st.duplicated, st.reordered, st.corrupted),
            (n, 0, 0, 0, 0),
            "{st:?}\n{}",
            relay.log()
        );
    }
    mcr_testbed::etcd::wait_for_cache(&dir.path().join("etcd-cache.json"), last, MINUTES);
    relay.stop().expect("stopped");

    // Each refusal at a start: the cache's rules forward meanwhile.
    let elsewhere = mcr_testbed::pki::Pki::new(dir.path(), "elsewhere").expect("another CA");
    let wrong_ca = files
        .toml()
        .replace(&files.ca.display().to_string(), &elsewhere.ca().display().to_string());
    refused_at_start(
        &c,
        &dir,
        "wrong-ca.toml",
        url,
        &wrong_ca,
        StoreProblem::Certificate,
        "etcd's server certificate is not signed by the CA in ca_file",
    );
    // `localhost` is 127.0.0.1, but the certificate names only the address.
    refused_at_start(
        &c,
        &dir,
        "wrong-host.toml",
        "https://localhost:2379",
        &files.toml(),
        StoreProblem::Certificate,
        "etcd's server certificate is not valid for localhost: it names IP:127.0.0.1",
    );
    let no_cert: String = files
        .toml()
        .lines()
        .filter(|l| !l.starts_with("cert_file") && !l.starts_with("key_file"))
        .map(|l| format!("{l}\n"))
        .collect();
    refused_at_start(
        &c,
        &dir,
        "no-cert.toml",
        url,
        &no_cert,
        StoreProblem::Certificate,
        "etcd requires a client certificate and mcrd gives none",
    );
    let wrong = dir.file("wrong-password", "not-it\n").expect("file");
    std::fs::set_permissions(&wrong, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let wrong_password = files
        .toml()
        .replace(&files.password_file.display().to_string(), &wrong.display().to_string());
    refused_at_start(
        &c,
        &dir,
        "wrong-password.toml",
        url,
        &wrong_password,
        StoreProblem::Authentication,
        &format!(
            "etcd refused user `{RELAY_USER}` with the password in {}",
            wrong.display()
        ),
    );
}

#[test]
fn check_config_reads_every_etcd_file_and_refuses_what_cannot_work() {
    let dir = TempDir::new("fleet-check").expect("dir");
    let pki = mcr_testbed::pki::Pki::new(dir.path(), "check").expect("CA");
    let (cert, key) = pki.client("relay", None).expect("client certificate");
    let (_, other_key) = pki.client("other", None).expect("another");
    let password = dir.file("password", "pw\n").expect("file");
    std::fs::set_permissions(&password, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let check = |name: &str, endpoint: &str, keys: &str| {
        let file = config(&dir, name, endpoint, keys);
        let out = std::process::Command::new(mcr_testbed::bin("mcrd").expect("mcrd"))
            .args(["--check-config", &file])
            .output()
            .expect("run");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let keys = |ca: &Path, cert: &Path, key: &Path, password: &Path| {
        format!(
            "ca_file = \"{}\"\ncert_file = \"{}\"\nkey_file = \"{}\"\nuser = \"mcr\"\npassword_file = \"{}\"\n",
            ca.display(),
            cert.display(),
            key.display(),
            password.display()
        )
    };
    let url = "https://etcd.example:2379";
    let (code, said) = check("good.toml", url, &keys(&pki.ca(), &cert, &key, &password));
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("valid, 0 rule(s)"), "{said}");

    std::fs::set_permissions(&password, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let (code, said) = check("open.toml", url, &keys(&pki.ca(), &cert, &key, &password));
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains(&format!(
            "[daemon.etcd] password_file {} is readable or writable by others (mode 0644)",
            password.display()
        )) && said.contains("chmod 600"),
        "{said}"
    );
    assert!(!said.contains("pw\n"), "{said}");
    std::fs::set_permissions(&password, std::fs::Permissions::from_mode(0o600)).expect("chmod");

    let (code, said) = check("mismatch.toml", url, &keys(&pki.ca(), &cert, &other_key, &password));
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("do not make a TLS identity"), "{said}");
    let (code, said) = check("no-ca.toml", url, "");
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("https:// endpoints need ca_file"), "{said}");
    let (code, said) = check(
        "half.toml",
        url,
        &format!(
            "ca_file = \"{}\"\ncert_file = \"{}\"\n",
            pki.ca().display(),
            cert.display()
        ),
    );
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("cert_file needs key_file"), "{said}");
    let (code, said) = check(
        "clear.toml",
        "http://etcd.example:2379",
        &format!("user = \"mcr\"\npassword_file = \"{}\"\n", password.display()),
    );
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("would send its password in clear"), "{said}");
    let (code, said) = check("no-pem.toml", url, &keys(&password, &cert, &key, &password));
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("no certificate in it"), "{said}");
}
