//! etcd (Debian's `etcd-server`, 3.4) inside a namespace, one member or a
//! cluster, for tests of what follows it: each member started, stopped,
//! killed, paused and restarted on the same data, and the keys changed
//! through its JSON gateway.
//!
//! Member N (from 1) listens on 127.0.0.N:2379 (clients) and :2380 (peers)
//! of its namespace, so test beds never meet. It is tuned for tests (10 ms
//! heartbeats, 100 ms elections) and logs only errors.
//!
//! A secure member ([`Etcd::start_secure`], certificates from
//! [`crate::pki`]) serves its clients over TLS on :2379, optionally asking
//! for their certificates, and can turn etcd's own users and roles on
//! ([`Etcd::enable_auth`]). The harness's own calls then go to a plain HTTP
//! listener, 127.0.0.N:2381 ([`ADMIN_PORT`]), which etcd serves beside the
//! TLS one without asking for a certificate, and authenticate as `root`.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use crate::{Error, Ns, Proc, Result, Signal};

/// The client port, on 127.0.0.N of the namespace.
pub const CLIENT_PORT: u16 = 2379;
/// The peer port.
pub const PEER_PORT: u16 = 2380;
/// The plain HTTP port of a secure member, on 127.0.0.N of the namespace,
/// for the harness's own calls (no certificate asked for, but a token once
/// authentication is on).
pub const ADMIN_PORT: u16 = 2381;
/// The most operations etcd takes in one transaction (`--max-txn-ops`).
pub const MAX_TXN_OPS: usize = 128;
/// How long starting, stopping or a call may take.
const PATIENCE: Duration = Duration::from_secs(30);

/// How a member is secured.
#[derive(Debug, Clone)]
pub struct Security {
    /// The CA that signed the certificates clients present (etcd's
    /// `--trusted-ca-file`). Given to etcd only with `client_cert_auth`:
    /// etcd 3.4 asks every TLS client for a certificate as soon as it has a
    /// trusted CA.
    pub ca: PathBuf,
    /// The server's certificate (`--cert-file`); etcd's gateway also
    /// presents it as a client certificate, so it needs the clientAuth
    /// extended key usage too (see [`crate::pki::Pki::server`]).
    pub cert: PathBuf,
    /// The server's key (`--key-file`).
    pub key: PathBuf,
    /// Whether every TLS client must present a certificate signed by `ca`
    /// (`--client-cert-auth`).
    pub client_cert_auth: bool,
    /// How long an authentication token lasts without use
    /// (`--auth-token-ttl`, seconds); `None`: etcd's default (300 s).
    pub token_ttl_s: Option<u32>,
    /// The kind of token (`--auth-token`): `None` for etcd's simple
    /// tokens, or e.g. `jwt,pub-key=P,priv-key=K,sign-method=RS256,ttl=4s`.
    pub auth_token: Option<String>,
    /// Further addresses the TLS client port also listens on (e.g.
    /// 127.0.1.1, to test a certificate that names another host).
    pub also_listen: Vec<Ipv4Addr>,
}

/// The harness's credentials once authentication is on.
#[derive(Debug)]
struct Auth {
    /// The password of `root`.
    root_password: String,
    /// `root`'s token, taken on first use and again when etcd no longer
    /// knows it.
    token: Mutex<Option<String>>,
}

/// A running (or stopped, to be restarted) etcd member. Dropping it kills
/// it; its data stays in the directory it was given.
#[derive(Debug)]
pub struct Etcd {
    ns: Ns,
    /// Its name, `mN`.
    name: String,
    /// 127.0.0.N.
    addr: Ipv4Addr,
    /// Every member, `mN=http://127.0.0.N:2380,...`.
    cluster: String,
    data_dir: PathBuf,
    proc: Option<Proc>,
    /// TLS on the client port, for a secure member.
    security: Option<Security>,
    /// Set by [`Etcd::enable_auth`].
    auth: Option<Auth>,
}

impl Etcd {
    /// Starts a one-member etcd in `ns` at 127.0.0.1 with its data in
    /// `dir/etcd-m1`, and returns once it answers `/health` as healthy (a
    /// leader elected: writes work). The process ends if the thread that
    /// started it ends (see [`Ns::command`]), so start it from the test's
    /// own thread.
    pub fn start(ns: &Ns, dir: &Path) -> Result<Etcd> {
        Etcd::start_one(ns, dir, None)
    }

    /// Starts a one-member etcd like [`Etcd::start`], but serving its
    /// clients over TLS as `security` says, at `https://127.0.0.1:2379` and
    /// port 2379 of each of `security.also_listen`, with a plain HTTP
    /// listener at 127.0.0.1:[`ADMIN_PORT`] for the harness. Passwords are
    /// hashed cheaply (`--bcrypt-cost 4`).
    pub fn start_secure(ns: &Ns, dir: &Path, security: Security) -> Result<Etcd> {
        Etcd::start_one(ns, dir, Some(security))
    }

    /// Starts a cluster of `members` (at most 254) in `ns`, member N at
    /// 127.0.0.N with its data in `dir/etcd-mN`, and returns once every
    /// member is healthy.
    pub fn start_cluster(ns: &Ns, dir: &Path, members: u8) -> Result<Vec<Etcd>> {
        Etcd::start_members(ns, dir, members, None)
    }

    fn start_one(ns: &Ns, dir: &Path, security: Option<Security>) -> Result<Etcd> {
        let mut members = Etcd::start_members(ns, dir, 1, security)?;
        members.pop().ok_or_else(|| Error::Io {
            what: "start etcd".into(),
            source: std::io::Error::other("no member"),
        })
    }

    fn start_members(ns: &Ns, dir: &Path, members: u8, security: Option<Security>) -> Result<Vec<Etcd>> {
        let addrs: Vec<Ipv4Addr> = (1..=members.min(254)).map(|n| Ipv4Addr::new(127, 0, 0, n)).collect();
        let cluster = addrs
            .iter()
            .map(|a| format!("m{}=http://{a}:{PEER_PORT}", a.octets()[3]))
            .collect::<Vec<_>>()
            .join(",");
        let mut started = Vec::new();
        // All are started before any is waited for: none is healthy alone.
        for addr in addrs {
            let name = format!("m{}", addr.octets()[3]);
            let mut etcd = Etcd {
                ns: ns.clone(),
                data_dir: dir.join(format!("etcd-{name}")),
                name,
                addr,
                cluster: cluster.clone(),
                proc: None,
                security: security.clone(),
                auth: None,
            };
            etcd.spawn()?;
            started.push(etcd);
        }
        for etcd in &mut started {
            etcd.wait_healthy()?;
        }
        Ok(started)
    }

    /// Its client URL, as seen from inside its namespace:
    /// `http://127.0.0.N:2379`, or `https://127.0.0.N:2379` for a secure
    /// member.
    pub fn endpoint(&self) -> String {
        let scheme = if self.security.is_some() { "https" } else { "http" };
        format!("{scheme}://{}:{CLIENT_PORT}", self.addr)
    }

    /// The TLS client URLs of a secure member: `https://127.0.0.N:2379`
    /// first, then one for each address of [`Security::also_listen`]. Empty
    /// for a member without TLS.
    pub fn tls_endpoints(&self) -> Vec<String> {
        let Some(security) = &self.security else {
            return Vec::new();
        };
        std::iter::once(self.addr)
            .chain(security.also_listen.iter().copied())
            .map(|a| format!("https://{a}:{CLIENT_PORT}"))
            .collect()
    }

    /// Turns etcd's authentication on: user `root` (with a password the
    /// harness chose) holding role `root`; user `user` with `password`; role
    /// `role`, which may only read the keys that start with `prefix`,
    /// granted to `user`. From then on every call of the harness
    /// authenticates as `root` (its token is kept, and taken anew once when
    /// etcd answers that it no longer knows it). Called again, it only adds
    /// another user and role; both must be new.
    pub fn enable_auth(&mut self, user: &str, password: &str, role: &str, prefix: &str) -> Result<()> {
        let first = self.auth.is_none();
        let root_password = format!(
            "mcr-testbed-{}-{}",
            std::process::id(),
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos()
        );
        if first {
            self.call(
                "/v3/auth/user/add",
                &json!({ "name": "root", "password": root_password }),
            )?;
            self.grant_role("root", "root")?;
        }
        self.call("/v3/auth/user/add", &json!({ "name": user, "password": password }))?;
        self.call("/v3/auth/role/add", &json!({ "name": role }))?;
        // etcdctl's `role grant-permission --prefix ROLE read PREFIX`.
        let (key, range_end) = prefix_range(prefix.as_bytes());
        self.call(
            "/v3/auth/role/grant",
            &json!({ "name": role, "perm": { "permType": "READ", "key": b64(&key), "range_end": b64(&range_end) } }),
        )?;
        self.grant_role(user, role)?;
        if first {
            self.call("/v3/auth/enable", &json!({}))?;
            self.auth = Some(Auth {
                root_password,
                token: Mutex::new(None),
            });
        }
        Ok(())
    }

    /// Takes `role` from `user` (`etcdctl user revoke-role`).
    pub fn revoke_role(&self, user: &str, role: &str) -> Result<()> {
        self.call("/v3/auth/user/revoke", &json!({ "name": user, "role": role }))
            .map(|_| ())
    }

    /// Gives `role` to `user` (`etcdctl user grant-role`).
    pub fn grant_role(&self, user: &str, role: &str) -> Result<()> {
        self.call("/v3/auth/user/grant", &json!({ "user": user, "role": role }))
            .map(|_| ())
    }

    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.proc.as_ref().map(Proc::pid)
    }

    /// Stops it cleanly (SIGTERM) and waits until it has exited.
    pub fn stop(&mut self) -> Result<()> {
        if let Some(mut p) = self.proc.take() {
            // A paused etcd would not see SIGTERM.
            p.signal(Signal::Cont)?;
            p.stop(Signal::Term, PATIENCE)?;
        }
        Ok(())
    }

    /// Kills it (SIGKILL) and waits until it has exited.
    pub fn kill(&mut self) -> Result<()> {
        if let Some(p) = self.proc.take() {
            p.stop(Signal::Kill, PATIENCE)?;
        }
        Ok(())
    }

    /// Pauses it (SIGSTOP): its connections stay open but nothing answers.
    pub fn pause(&mut self) -> Result<()> {
        self.signal(Signal::Stop)
    }

    /// Lets a paused etcd go on (SIGCONT).
    pub fn resume(&mut self) -> Result<()> {
        self.signal(Signal::Cont)
    }

    /// Stops it if it runs, then starts it again on the same data and
    /// waits until it is healthy (for a member of a cluster: until it has
    /// a leader).
    pub fn restart(&mut self) -> Result<()> {
        self.stop()?;
        self.spawn()?;
        self.wait_healthy()
    }

    /// Writes `key`; returns the new revision.
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<i64> {
        let r = self.call(
            "/v3/kv/put",
            &json!({ "key": b64(key.as_ref()), "value": b64(value.as_ref()) }),
        )?;
        revision_of(&r)
    }

    /// Deletes `key`; returns the revision after it.
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<i64> {
        let r = self.call("/v3/kv/deleterange", &json!({ "key": b64(key.as_ref()) }))?;
        revision_of(&r)
    }

    /// Writes every pair, [`MAX_TXN_OPS`] to a transaction (so each batch is
    /// one revision); returns the revision after the last.
    pub fn txn_put<K: AsRef<[u8]>, V: AsRef<[u8]>>(&self, pairs: &[(K, V)]) -> Result<i64> {
        let mut revision = self.revision()?;
        for batch in pairs.chunks(MAX_TXN_OPS) {
            let success: Vec<Value> = batch
                .iter()
                .map(|(k, v)| json!({ "request_put": { "key": b64(k.as_ref()), "value": b64(v.as_ref()) } }))
                .collect();
            let r = self.call("/v3/kv/txn", &json!({ "success": success }))?;
            revision = revision_of(&r)?;
        }
        Ok(revision)
    }

    /// Compacts the history up to `revision` and waits until that is done.
    pub fn compact(&self, revision: i64) -> Result<()> {
        self.call(
            "/v3/kv/compaction",
            &json!({ "revision": revision.to_string(), "physical": true }),
        )
        .map(|_| ())
    }

    /// The store's current revision.
    pub fn revision(&self) -> Result<i64> {
        let r = self.call("/v3/kv/range", &json!({ "key": b64(b"\0"), "count_only": true }))?;
        revision_of(&r)
    }

    fn signal(&mut self, signal: Signal) -> Result<()> {
        match self.proc.as_mut() {
            Some(p) => p.signal(signal),
            None => Ok(()),
        }
    }

    fn spawn(&mut self) -> Result<()> {
        let client = self.endpoint();
        let listen = match &self.security {
            None => client.clone(),
            Some(_) => {
                let mut urls = self.tls_endpoints();
                urls.push(format!("http://{}:{ADMIN_PORT}", self.addr));
                urls.join(",")
            }
        };
        let peer = format!("http://{}:{PEER_PORT}", self.addr);
        let mut cmd = self.ns.command("etcd");
        cmd.arg("--name")
            .arg(&self.name)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(["--listen-client-urls", &listen, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &self.cluster])
            .args(["--heartbeat-interval", "10", "--election-timeout", "100"])
            .args(["--logger", "zap", "--log-level", "error"]);
        if let Some(security) = &self.security {
            cmd.arg("--cert-file")
                .arg(&security.cert)
                .arg("--key-file")
                .arg(&security.key)
                .args(["--bcrypt-cost", "4"]);
            if security.client_cert_auth {
                cmd.arg("--client-cert-auth").arg("--trusted-ca-file").arg(&security.ca);
            }
            if let Some(ttl_s) = security.token_ttl_s {
                cmd.arg("--auth-token-ttl").arg(ttl_s.to_string());
            }
            if let Some(kind) = &security.auth_token {
                cmd.arg("--auth-token").arg(kind);
            }
        }
        self.proc = Some(self.ns.spawn(cmd)?);
        Ok(())
    }

    /// The port the harness's own calls go to.
    fn admin_port(&self) -> u16 {
        if self.security.is_some() {
            ADMIN_PORT
        } else {
            CLIENT_PORT
        }
    }

    fn wait_healthy(&mut self) -> Result<()> {
        let start = Instant::now();
        loop {
            // etcd 3.4 answers /health without a token, also with
            // authentication on.
            let health = http(&self.ns, (self.addr, self.admin_port()), "GET", "/health", None, None);
            if matches!(&health, Ok(h) if h["health"] == "true") {
                return Ok(());
            }
            let proc = self.proc.as_mut().ok_or_else(|| Error::Io {
                what: format!("start etcd member {}", self.name),
                source: std::io::Error::other("not started"),
            })?;
            if proc.try_status()?.is_some() || start.elapsed() > PATIENCE {
                return Err(Error::Timeout {
                    what: format!("etcd member {}", self.name),
                    awaited: format!("answer /health as healthy (last: {health:?})"),
                    seconds: start.elapsed().as_secs_f64(),
                    stderr: proc.stderr_so_far(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// POSTs `body` to `path`, as `root` once authentication is on.
    fn call(&self, path: &str, body: &Value) -> Result<Value> {
        let post = |token: Option<&str>| {
            http(
                &self.ns,
                (self.addr, self.admin_port()),
                "POST",
                path,
                Some(body),
                token,
            )
        };
        let Some(auth) = &self.auth else {
            return post(None);
        };
        let kept = auth.token.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let token = match kept {
            Some(token) => token,
            None => self.authenticate(auth)?,
        };
        match post(Some(&token)) {
            // Expired, or forgotten by a restarted etcd.
            Err(e) if is_invalid_token(&e) => post(Some(&self.authenticate(auth)?)),
            answer => answer,
        }
    }

    /// Takes a new token for `root` and keeps it.
    fn authenticate(&self, auth: &Auth) -> Result<String> {
        let body = json!({ "name": "root", "password": auth.root_password });
        let r = http(
            &self.ns,
            (self.addr, self.admin_port()),
            "POST",
            "/v3/auth/authenticate",
            Some(&body),
            None,
        )?;
        let token = r["token"].as_str().ok_or_else(|| Error::Report {
            what: "etcd".into(),
            reason: "no token in its answer to /v3/auth/authenticate".into(),
            stdout: r.to_string(),
            stderr: String::new(),
        })?;
        *auth.token.lock().unwrap_or_else(PoisonError::into_inner) = Some(token.to_string());
        Ok(token.to_string())
    }
}

/// Whether etcd refused a call because it does not know (any more) the token
/// it was sent: HTTP 401, "etcdserver: invalid auth token".
fn is_invalid_token(e: &Error) -> bool {
    matches!(e, Error::Command { status, stderr, .. } if status.contains(" 401 ") && stderr.contains("invalid auth token"))
}

/// The key and range end of every key that starts with `prefix` (as
/// etcdctl's `--prefix` makes them): `prefix` and `prefix` with its last
/// byte below 0xff increased, the bytes after it dropped; `\0`, `\0` (every
/// key) for an empty prefix or one of only 0xff bytes.
fn prefix_range(prefix: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return (prefix.to_vec(), end);
        }
    }
    let key = if prefix.is_empty() { vec![0] } else { prefix.to_vec() };
    (key, vec![0])
}

fn b64(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

fn revision_of(response: &Value) -> Result<i64> {
    response["header"]["revision"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .ok_or_else(|| Error::Report {
            what: "etcd".into(),
            reason: "no header.revision in its answer".into(),
            stdout: response.to_string(),
            stderr: String::new(),
        })
}

/// One HTTP/1.0 request (answered without chunking, then closed) to the
/// member at `(addr, port)` in `ns`, from a thread that enters it, with
/// `token` in the `Authorization` header if given; the JSON answer.
fn http(
    ns: &Ns,
    (addr, port): (Ipv4Addr, u16),
    method: &str,
    path: &str,
    body: Option<&Value>,
    token: Option<&str>,
) -> Result<Value> {
    let body = body.map(Value::to_string).unwrap_or_default();
    let authorization = token.map(|t| format!("Authorization: {t}\r\n")).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.0\r\nHost: {addr}:{port}\r\n{authorization}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let name = ns.name().to_string();
    let what = format!("{method} {path} to etcd at {addr}:{port} in {name}");
    let exchange = move || -> std::io::Result<Vec<u8>> {
        mcr_sys::netns::enter(&name)?;
        let addr = SocketAddr::from((addr, port));
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        s.set_read_timeout(Some(PATIENCE))?;
        s.set_write_timeout(Some(PATIENCE))?;
        s.write_all(request.as_bytes())?;
        let mut answer = Vec::new();
        s.read_to_end(&mut answer)?;
        Ok(answer)
    };
    let answer = std::thread::spawn(exchange)
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("the request's thread panicked")))
        .map_err(|source| Error::Io {
            what: what.clone(),
            source,
        })?;
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.lines().next().unwrap_or_default();
    if !status.contains(" 200 ") {
        return Err(Error::Command {
            command: what,
            status: status.to_string(),
            stderr: body.to_string(),
        });
    }
    serde_json::from_str(body).map_err(|e| Error::Report {
        what,
        reason: e.to_string(),
        stdout: body.to_string(),
        stderr: String::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::prefix_range;

    #[test]
    fn a_prefix_range_ends_past_its_last_key() {
        assert_eq!(prefix_range(b"/mcr/"), (b"/mcr/".to_vec(), b"/mcr0".to_vec()));
        assert_eq!(prefix_range(b"a\xff\xff"), (b"a\xff\xff".to_vec(), b"b".to_vec()));
        assert_eq!(prefix_range(b"\xff"), (b"\xff".to_vec(), vec![0]));
        assert_eq!(prefix_range(b""), (vec![0], vec![0]));
    }
}

/// The user a secured store gives the relay (see [`Etcd::start_fleet_store`]).
pub const RELAY_USER: &str = "mcr";
/// The role that user holds: read of the relay's prefix, nothing else.
pub const RELAY_ROLE: &str = "mcr-read";

/// What a relay needs to follow a store that [`Etcd::start_fleet_store`]
/// secured: the CA, its own client certificate and key, and its user's
/// password in a file only its owner may read.
#[derive(Debug, Clone)]
pub struct RelayFiles {
    /// The CA that issued etcd's certificates.
    pub ca: PathBuf,
    /// The relay's client certificate (no CN, `DNS:mcr-relay`).
    pub cert: PathBuf,
    /// Its key (mode 0600).
    pub key: PathBuf,
    /// The password of [`RELAY_USER`] (mode 0600).
    pub password_file: PathBuf,
    /// The CA itself, to issue more certificates.
    pub pki: crate::pki::Pki,
}

impl RelayFiles {
    /// The `[daemon.etcd]` keys that use these files, one per line.
    pub fn toml(&self) -> String {
        format!(
            "ca_file = \"{}\"\ncert_file = \"{}\"\nkey_file = \"{}\"\nuser = \"{RELAY_USER}\"\npassword_file = \"{}\"\n",
            self.ca.display(),
            self.cert.display(),
            self.key.display(),
            self.password_file.display()
        )
    }
}

impl Etcd {
    /// A store as production runs one: TLS with a CA made here (a
    /// certificate for 127.0.0.1), `--client-cert-auth`, and authentication
    /// on, with [`RELAY_USER`] whose role [`RELAY_ROLE`] may only read
    /// `prefix`. The harness's own calls (puts, deletes) are root's. With
    /// `token_ttl_s`, tokens end that long after their last use.
    pub fn start_fleet_store(
        ns: &Ns,
        dir: &Path,
        prefix: &str,
        token_ttl_s: Option<u32>,
    ) -> Result<(Etcd, RelayFiles)> {
        let pki = crate::pki::Pki::new(dir, "fleet")?;
        let (cert, key) = pki.server("etcd", &["IP:127.0.0.1"])?;
        let mut etcd = Etcd::start_secure(
            ns,
            dir,
            Security {
                ca: pki.ca(),
                cert,
                key,
                client_cert_auth: true,
                token_ttl_s,
                auth_token: None,
                also_listen: Vec::new(),
            },
        )?;
        let password = format!("relay-{}", std::process::id());
        etcd.enable_auth(RELAY_USER, &password, RELAY_ROLE, prefix)?;
        let (cert, key) = pki.client("relay", None)?;
        let password_file = dir.join("relay-password");
        let io = |what: &str| {
            let what = what.to_string();
            move |source| Error::Io { what, source }
        };
        std::fs::write(&password_file, format!("{password}\n")).map_err(io("write the relay's password"))?;
        std::fs::set_permissions(&password_file, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .map_err(io("chmod the relay's password"))?;
        Ok((
            etcd,
            RelayFiles {
                ca: pki.ca(),
                cert,
                key,
                password_file,
                pki,
            },
        ))
    }
}

/// Waits (up to `patience`) until the relay's etcd cache at `path` holds
/// `revision`; panics with what it holds otherwise. mcrd writes it within
/// a second of a change.
pub fn wait_for_cache(path: &Path, revision: i64, patience: Duration) {
    let deadline = Instant::now() + patience;
    loop {
        let written: Option<Value> = std::fs::read_to_string(path)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
        if written.as_ref().is_some_and(|w| w["revision"] == revision) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no cache of revision {revision}: {written:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
