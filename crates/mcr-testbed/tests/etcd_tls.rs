//! A secure etcd member (TLS, client certificates, etcd's users and roles)
//! seen by a client that is not the harness: `curl` in the namespace, with
//! the test CA, a client certificate without a common name and the token of
//! a user who may only read one prefix.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use mcr_testbed::etcd::{Etcd, Security};
use mcr_testbed::pki::Pki;
use mcr_testbed::{Ns, TempDir, Testbed};
use serde_json::{Value, json};

/// `curl` inside the namespace, over TLS with the test CA.
struct Curl {
    ns: Ns,
    ca: PathBuf,
    /// The client certificate and key, if it presents one.
    identity: Option<(PathBuf, PathBuf)>,
}

/// What curl got: its exit code, the HTTP status (0 without an answer)
/// and the body.
#[derive(Debug)]
struct Answer {
    exit: i32,
    status: u16,
    body: Value,
}

impl Curl {
    fn post(&self, url: &str, body: &Value, token: Option<&str>) -> Answer {
        let mut cmd = self.ns.command("curl");
        cmd.args(["-sS", "--max-time", "10", "-w", "\n%{http_code}", "--cacert"])
            .arg(&self.ca);
        if let Some((cert, key)) = &self.identity {
            cmd.arg("--cert").arg(cert).arg("--key").arg(key);
        }
        if let Some(token) = token {
            cmd.args(["-H", &format!("Authorization: {token}")]);
        }
        cmd.args(["-X", "POST", "-d", &body.to_string(), url]);
        let out = cmd.output().expect("run curl");
        let text = String::from_utf8_lossy(&out.stdout);
        let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
        Answer {
            exit: out.status.code().unwrap_or(-1),
            status: status.trim().parse().unwrap_or(0),
            body: serde_json::from_str(body).unwrap_or(Value::Null),
        }
    }

    fn token(&self, base: &str, name: &str, password: &str) -> String {
        let a = self.post(
            &format!("{base}/v3/auth/authenticate"),
            &json!({ "name": name, "password": password }),
            None,
        );
        assert_eq!(a.status, 200, "authenticate {name}: {a:?}");
        a.body["token"].as_str().expect("a token").to_string()
    }
}

fn b64(s: &str) -> String {
    STANDARD.encode(s)
}

fn range(key: &str, range_end: Option<&str>) -> Value {
    match range_end {
        Some(end) => json!({ "key": b64(key), "range_end": b64(end) }),
        None => json!({ "key": b64(key) }),
    }
}

fn assert_denied(a: &Answer, what: &str) {
    assert_eq!(
        (a.status, &a.body["code"]),
        (403, &json!(7)),
        "{what} must be denied: {a:?}"
    );
}

fn pki(dir: &Path) -> (Pki, Security, (PathBuf, PathBuf)) {
    let pki = Pki::new(dir, "t").expect("CA");
    let (cert, key) = pki.server("server", &["IP:127.0.0.1"]).expect("server certificate");
    let client = pki.client("relay", None).expect("client certificate");
    let security = Security {
        ca: pki.ca(),
        cert,
        key,
        client_cert_auth: true,
        token_ttl_s: Some(2),
        auth_token: None,
        // Not named by the server certificate.
        also_listen: vec!["127.0.1.1".parse().expect("address")],
    };
    (pki, security, client)
}

#[test]
fn a_reader_reads_its_prefix_only_until_its_role_is_revoked() {
    let mut tb = Testbed::new("etcdtls").expect("test bed");
    let ns = tb.ns("etcd").expect("namespace");
    let dir = TempDir::new("etcd-tls").expect("directory");
    let (pki, security, client) = pki(dir.path());
    let mut etcd = Etcd::start_secure(&ns, dir.path(), security).expect("secure etcd");
    let base = etcd.endpoint();
    assert_eq!(base, "https://127.0.0.1:2379");
    assert_eq!(etcd.tls_endpoints(), [base.as_str(), "https://127.0.1.1:2379"]);
    etcd.enable_auth("mcr", "mcr-password", "relay", "/mcr/")
        .expect("enable auth");
    etcd.put("/mcr/a", "1").expect("put under the prefix, as root");
    etcd.put("/other", "2").expect("put outside the prefix, as root");

    let anonymous = Curl {
        ns: ns.clone(),
        ca: pki.ca(),
        identity: None,
    };
    let a = anonymous.post(&format!("{base}/v3/auth/authenticate"), &json!({}), None);
    assert!(
        a.exit != 0 && a.status == 0,
        "TLS without a client certificate must fail: {a:?}"
    );
    let curl = Curl {
        ns: ns.clone(),
        ca: pki.ca(),
        identity: Some(client),
    };
    // Listening on 127.0.1.1 too, with a certificate that does not name it:
    // curl's 60 is "peer certificate cannot be authenticated".
    let a = curl.post("https://127.0.1.1:2379/v3/kv/range", &range("/mcr/a", None), None);
    assert_eq!(a.exit, 60, "{a:?}");

    let prefix = range("/mcr/", Some("/mcr0"));
    let token = curl.token(&base, "mcr", "mcr-password");
    let a = curl.post(&format!("{base}/v3/kv/range"), &prefix, Some(&token));
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.body["kvs"][0]["key"], b64("/mcr/a"), "{a:?}");
    assert_eq!(a.body["kvs"][0]["value"], b64("1"), "{a:?}");
    assert_eq!(a.body["count"], "1", "{a:?}");
    let a = curl.post(&format!("{base}/v3/kv/range"), &range("/other", None), Some(&token));
    assert_denied(&a, "reading outside the prefix");
    let a = curl.post(
        &format!("{base}/v3/kv/put"),
        &json!({ "key": b64("/mcr/b"), "value": b64("3") }),
        Some(&token),
    );
    assert_denied(&a, "writing under the prefix");
    let a = curl.post(&format!("{base}/v3/kv/range"), &range("/mcr/b", None), None);
    assert_eq!(a.status, 400, "no token, no read: {a:?}");

    etcd.revoke_role("mcr", "relay").expect("revoke");
    let token = curl.token(&base, "mcr", "mcr-password");
    assert_denied(
        &curl.post(&format!("{base}/v3/kv/range"), &prefix, Some(&token)),
        "reading the prefix once the role is revoked",
    );
    etcd.grant_role("mcr", "relay").expect("grant");
    let a = curl.post(&format!("{base}/v3/kv/range"), &prefix, Some(&token));
    assert_eq!(a.status, 200, "granted again: {a:?}");

    // Both tokens (root's, kept by the harness, and mcr's) expire unused:
    // the harness takes a new one.
    std::thread::sleep(Duration::from_secs(3));
    let a = curl.post(&format!("{base}/v3/kv/range"), &prefix, Some(&token));
    assert_eq!((a.status, &a.body["code"]), (401, &json!(16)), "expired: {a:?}");
    etcd.put("/mcr/a", "4").expect("put as root with a new token");

    // Restarted on its data, with authentication on: healthy, and root
    // still writes.
    etcd.restart().expect("restart");
    let revision = etcd.put("/mcr/a", "5").expect("put after the restart");
    assert_eq!(etcd.revision().expect("revision"), revision);
    let token = curl.token(&base, "mcr", "mcr-password");
    let a = curl.post(&format!("{base}/v3/kv/range"), &prefix, Some(&token));
    assert_eq!(a.body["kvs"][0]["value"], b64("5"), "{a:?}");
}
