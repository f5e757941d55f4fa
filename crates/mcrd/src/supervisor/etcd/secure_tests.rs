//! The follower against a real etcd that runs TLS with client certificates
//! and its own users: what it delivers, and each refusal with its kind and
//! its words. Certificates are made by the test (`mcr_testbed::pki`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mcr_core::control::StoreProblem;
use mcr_testbed::etcd::{Etcd, Security};
use mcr_testbed::pki::Pki;
use mcr_testbed::{Ns, TempDir, Testbed};

use super::StoreSettings;
use super::StoreUpdate;
use super::tests::{PREFIX, Watcher, settings, start};

const PASSWORD: &str = "mcr-password-1";

/// etcd with TLS, `--client-cert-auth` and authentication on, with user
/// `mcr` whose role `mcr-read` may only read [`PREFIX`].
struct SecureBed {
    etcd: Etcd,
    pki: Pki,
    ns: Ns,
    dir: TempDir,
    _bed: Testbed,
}

fn secure_bed(tag: &str, token_ttl_s: Option<u32>) -> SecureBed {
    secure_bed_with(tag, token_ttl_s, |_| None)
}

/// As [`secure_bed`], with the `--auth-token` that `token` makes in the
/// bed's directory.
fn secure_bed_with(tag: &str, token_ttl_s: Option<u32>, token: impl FnOnce(&Path) -> Option<String>) -> SecureBed {
    let mut testbed = Testbed::new(tag).expect("test bed");
    let ns = testbed.ns("etcd").expect("namespace");
    let dir = TempDir::new(&format!("etcd-{tag}")).expect("temp dir");
    let auth_token = token(dir.path());
    let pki = Pki::new(dir.path(), "plant").expect("CA");
    let (cert, key) = pki.server("etcd", &["IP:127.0.0.1"]).expect("server certificate");
    let mut etcd = Etcd::start_secure(
        &ns,
        dir.path(),
        Security {
            ca: pki.ca(),
            cert,
            key,
            client_cert_auth: true,
            token_ttl_s,
            auth_token,
            also_listen: vec![std::net::Ipv4Addr::new(127, 0, 1, 1)],
        },
    )
    .expect("etcd");
    etcd.enable_auth("mcr", PASSWORD, "mcr-read", PREFIX).expect("auth");
    SecureBed {
        etcd,
        pki,
        ns,
        dir,
        _bed: testbed,
    }
}

impl SecureBed {
    fn password_file(&self, name: &str, password: &str) -> PathBuf {
        let p = self.dir.file(name, &format!("{password}\n")).expect("password file");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        p
    }

    /// Settings that work: the CA, a client certificate without a CN, user
    /// `mcr` with its password.
    fn good(&self) -> StoreSettings {
        let mut s = settings(&[&self.etcd.endpoint()]);
        s.ca_file = Some(self.pki.ca());
        s.client_cert = Some(self.pki.client("relay", None).expect("client certificate"));
        s.user = Some(("mcr".into(), self.password_file("password", PASSWORD)));
        s
    }
}

/// The first `Unreachable` the follower sends: its reasons and kind.
fn refused(ns: &Ns, settings: StoreSettings) -> (String, StoreProblem) {
    let mut w = start(ns, settings, |_| {});
    match w.next() {
        StoreUpdate::Unreachable { why, kind } => (why, kind),
        other => panic!("expected Unreachable, got {other:?}"),
    }
}

fn other_ca(dir: &Path) -> Pki {
    Pki::new(dir, "elsewhere").expect("another CA")
}

#[test]
fn over_tls_with_a_user_the_prefix_arrives_and_each_refusal_says_what_to_mend() {
    let bed = secure_bed("etcd-tls", None);
    bed.etcd.put(format!("{PREFIX}a"), "1").expect("put");
    // Outside the prefix: the user may not read it, and is not asked to.
    bed.etcd.put("/elsewhere/x", "1").expect("put");

    let mut w: Watcher = start(&bed.ns, bed.good(), |_| {});
    let (_, kvs) = w.whole();
    assert_eq!(kvs, [("a".to_string(), b"1".to_vec())]);
    let revision = bed.etcd.put(format!("{PREFIX}b"), "2").expect("put");
    assert_eq!(w.changes(), (revision, vec![("b".to_string(), Some(b"2".to_vec()))]));
    drop(w);

    let url = bed.etcd.endpoint();
    let mut s = bed.good();
    let elsewhere = other_ca(bed.dir.path());
    s.ca_file = Some(elsewhere.ca());
    let (why, kind) = refused(&bed.ns, s);
    eprintln!("wrong CA: {why}");
    assert_eq!(kind, StoreProblem::Certificate);
    assert_eq!(
        why,
        format!(
            "{url}: certificate: etcd's server certificate is not signed by the CA in ca_file {} (unknown issuer); give the CA that issued etcd's certificates",
            elsewhere.ca().display()
        )
    );

    let mut s = bed.good();
    s.endpoints = vec![bed.etcd.tls_endpoints()[1].clone()];
    let (why, kind) = refused(&bed.ns, s);
    eprintln!("wrong host: {why}");
    assert_eq!(kind, StoreProblem::Certificate);
    assert_eq!(
        why,
        "https://127.0.1.1:2379: certificate: etcd's server certificate is not valid for 127.0.1.1: it names IP:127.0.0.1 (mcrd checks the endpoint's host against the certificate's subjectAltName, never its CN)"
    );

    let mut s = bed.good();
    s.client_cert = None;
    let (why, kind) = refused(&bed.ns, s);
    eprintln!("no client certificate: {why}");
    assert_eq!(kind, StoreProblem::Certificate);
    assert!(
        why.starts_with(&format!(
            "{url}: certificate: etcd requires a client certificate and mcrd gives none (TLS alert "
        )) && why.ends_with("); set cert_file and key_file in [daemon.etcd]"),
        "{why}"
    );

    let mut s = bed.good();
    s.client_cert = Some(elsewhere.client("stranger", None).expect("client certificate"));
    let (why, kind) = refused(&bed.ns, s);
    eprintln!("client certificate of another CA: {why}");
    assert_eq!(kind, StoreProblem::Certificate);
    assert!(why.contains("etcd refused the client certificate cert_file"), "{why}");

    let mut s = bed.good();
    s.client_cert = Some(bed.pki.client("named", Some("mcr-relay")).expect("client certificate"));
    let (why, kind) = refused(&bed.ns, s);
    eprintln!("client certificate with a CN: {why}");
    assert_eq!(kind, StoreProblem::Certificate);
    assert!(
        why.starts_with(&format!(
            "{url}: certificate: etcd refuses client certificates that have a Common Name while its authentication is on"
        )) && why.ends_with("issue cert_file with an empty subject and its name in subjectAltName"),
        "{why}"
    );

    let mut s = bed.good();
    let wrong = bed.password_file("wrong", "not-the-password");
    s.user = Some(("mcr".into(), wrong.clone()));
    let (why, kind) = refused(&bed.ns, s);
    eprintln!("wrong password: {why}");
    assert_eq!(kind, StoreProblem::Authentication);
    assert_eq!(
        why,
        format!(
            "{url}: authentication: etcd refused user `mcr` with the password in {} (etcd says \"etcdserver: authentication failed, invalid user ID or password\")",
            wrong.display()
        )
    );
    assert!(!why.contains("not-the-password"));

    let mut s = bed.good();
    s.user = None;
    let (why, kind) = refused(&bed.ns, s);
    eprintln!("no user: {why}");
    assert_eq!(
        (why, kind),
        (
            format!(
                "{url}: authentication: etcd has authentication on and mcrd gives no user; set user and password_file in [daemon.etcd]"
            ),
            StoreProblem::Authentication
        )
    );

    // A plain http:// client to the TLS port gets no answer it can read.
    let mut s = settings(&[&url.replace("https://", "http://")]);
    s.timeout = Duration::from_secs(1);
    let (why, kind) = refused(&bed.ns, s);
    eprintln!("plain HTTP to the TLS port: {why}");
    assert_eq!(
        (why, kind),
        (
            format!(
                "{}: range: etcd closed the connection without an answer; if it serves TLS there, write https://",
                url.replace("https://", "http://")
            ),
            StoreProblem::Unreachable
        )
    );
}

#[test]
fn a_role_revoked_while_watching_is_noticed_and_a_grant_brings_the_prefix_back() {
    let bed = secure_bed("etcd-revoke", None);
    bed.etcd.put(format!("{PREFIX}a"), "1").expect("put");
    let mut s = bed.good();
    s.probe_after = Duration::from_millis(500);
    let mut w = start(&bed.ns, s, |_| {});
    assert_eq!(w.whole().1.len(), 1);
    bed.etcd.revoke_role("mcr", "mcr-read").expect("revoke");
    // A change after the revocation may still come through the open watch;
    // the next probe ends it.
    let (why, kind) = loop {
        match w.next() {
            StoreUpdate::Unreachable { why, kind } => break (why, kind),
            StoreUpdate::Changes { .. } => {}
            other => panic!("expected Unreachable, got {other:?}"),
        }
    };
    eprintln!("role revoked: {why}");
    assert_eq!(kind, StoreProblem::Permission);
    assert_eq!(
        why,
        format!(
            "{}: permission: user `mcr` may not read {PREFIX} (etcd says \"etcdserver: permission denied\"); grant its role read on the prefix: etcdctl role grant-permission ROLE --prefix=true read {PREFIX}",
            bed.etcd.endpoint()
        )
    );
    bed.etcd.put(format!("{PREFIX}b"), "2").expect("put");
    bed.etcd.grant_role("mcr", "mcr-read").expect("grant");
    loop {
        match w.next() {
            StoreUpdate::Whole { kvs, .. } => {
                assert_eq!(kvs.len(), 2, "{kvs:?}");
                break;
            }
            StoreUpdate::Unreachable { kind, .. } => assert_eq!(kind, StoreProblem::Permission),
            other => panic!("expected Whole, got {other:?}"),
        }
    }
}

#[test]
fn a_token_that_expires_is_renewed_and_nothing_stops() {
    // Tokens live 1 s without use; the follower uses its token every 3 s
    // (the probe), so each probe finds it expired and gets another.
    let bed = secure_bed("etcd-ttl", Some(1));
    let mut s = bed.good();
    s.probe_after = Duration::from_secs(3);
    let mut w = start(&bed.ns, s, |_| {});
    w.whole();
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        let revision = bed
            .etcd
            .put(format!("{PREFIX}k"), format!("{:?}", Instant::now()))
            .expect("put");
        // Each change arrives as a change: the session never broke.
        let (got, changes) = w.changes();
        assert_eq!((got, changes.len()), (revision, 1));
        std::thread::sleep(Duration::from_millis(700));
    }
    assert!(
        w.updates.try_recv().is_err(),
        "nothing else arrived (no Unreachable, no new Whole)"
    );
}

#[test]
fn config_keys_out_of_range_or_in_halves_are_refused() {
    use mcr_core::config::EtcdSettings;
    let base = EtcdSettings {
        endpoints: vec!["https://etcd:2379".into()],
        prefix: PREFIX.into(),
        ..EtcdSettings::default()
    };
    let refused = |e: EtcdSettings| super::store_settings(&e).expect_err("refused").to_string();
    assert_eq!(
        refused(EtcdSettings {
            probe_ms: Some(50),
            ..base.clone()
        }),
        "[daemon.etcd]: probe_ms = 50: give 100 to 600000 (ms)"
    );
    assert_eq!(
        refused(EtcdSettings {
            timeout_ms: Some(120_000),
            ..base.clone()
        }),
        "[daemon.etcd]: timeout_ms = 120000: give 100 to 60000 (ms)"
    );
    assert_eq!(
        refused(EtcdSettings {
            key_file: Some("/k".into()),
            ..base.clone()
        }),
        "[daemon.etcd]: key_file needs cert_file"
    );
    assert_eq!(
        refused(EtcdSettings {
            user: Some("mcr".into()),
            ..base.clone()
        }),
        "[daemon.etcd]: user needs password_file"
    );
    let s = super::store_settings(&EtcdSettings {
        probe_ms: Some(2500),
        timeout_ms: Some(700),
        ca_file: Some("/ca".into()),
        cert_file: Some("/c".into()),
        key_file: Some("/k".into()),
        user: Some("mcr".into()),
        password_file: Some("/p".into()),
        ..base
    })
    .expect("settings");
    assert_eq!(
        (s.probe_after, s.timeout, s.client_cert, s.user),
        (
            Duration::from_millis(2500),
            Duration::from_millis(700),
            Some(("/c".into(), "/k".into())),
            Some(("mcr".into(), "/p".into()))
        )
    );
}

#[test]
fn a_jwt_is_renewed_before_it_ends_and_nothing_stops() {
    // JWTs that end 4 s after they are given (etcd refuses them after
    // that, whether used or not); the follower renews at 80 % of that.
    let bed = secure_bed_with("etcd-jwt", None, |dir| {
        let (private, public) = (dir.join("jwt.key"), dir.join("jwt.pub"));
        let run = |args: &[&str]| {
            let out = std::process::Command::new("openssl")
                .args(args)
                .output()
                .expect("openssl");
            assert!(out.status.success(), "openssl {args:?}: {out:?}");
        };
        let (private_s, public_s) = (private.to_str().expect("utf-8"), public.to_str().expect("utf-8"));
        run(&["genrsa", "-out", private_s, "2048"]);
        run(&["rsa", "-in", private_s, "-pubout", "-out", public_s]);
        Some(format!(
            "jwt,pub-key={public_s},priv-key={private_s},sign-method=RS256,ttl=4s"
        ))
    });
    // The follower's log, to tell a renewal before the end from one after
    // etcd refused the token (which says so).
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
    let sink = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || Capture(sink.clone()))
        .finish();
    tracing::subscriber::set_global_default(subscriber).expect("this test's process logs to it");
    let mut s = bed.good();
    s.probe_after = Duration::from_millis(500);
    let mut w = start(&bed.ns, s, |_| {});
    w.whole();
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        let revision = bed
            .etcd
            .put(format!("{PREFIX}k"), format!("{:?}", Instant::now()))
            .expect("put");
        let (got, changes) = w.changes();
        assert_eq!((got, changes.len()), (revision, 1));
        std::thread::sleep(Duration::from_millis(700));
    }
    assert!(
        w.updates.try_recv().is_err(),
        "nothing else arrived (no Unreachable, no new Whole)"
    );
    drop(w);
    let log = String::from_utf8_lossy(&log.lock().expect("log")).into_owned();
    assert!(
        log.contains("etcd: https://127.0.0.1:2379: "),
        "the log is captured: {log}"
    );
    assert!(!log.contains("was refused"), "each JWT renewed before its end: {log}");
}

/// A writer into a shared buffer.
struct Capture(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
