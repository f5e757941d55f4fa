//! etcd (Debian's `etcd-server`, 3.4) inside a namespace, one member or a
//! cluster, for tests of what follows it: each member started, stopped,
//! killed, paused and restarted on the same data, and the keys changed
//! through its JSON gateway.
//!
//! Member N (from 1) listens on 127.0.0.N:2379 (clients) and :2380 (peers)
//! of its namespace, so test beds never meet. It is tuned for tests (10 ms
//! heartbeats, 100 ms elections) and logs only errors.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use crate::{Error, Ns, Proc, Result, Signal};

/// The client port, on 127.0.0.N of the namespace.
pub const CLIENT_PORT: u16 = 2379;
/// The peer port.
pub const PEER_PORT: u16 = 2380;
/// The most operations etcd takes in one transaction (`--max-txn-ops`).
pub const MAX_TXN_OPS: usize = 128;
/// How long starting, stopping or a call may take.
const PATIENCE: Duration = Duration::from_secs(30);

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
}

impl Etcd {
    /// Starts a one-member etcd in `ns` at 127.0.0.1 with its data in
    /// `dir/etcd-m1`, and returns once it answers `/health` as healthy (a
    /// leader elected: writes work). The process ends if the thread that
    /// started it ends (see [`Ns::command`]), so start it from the test's
    /// own thread.
    pub fn start(ns: &Ns, dir: &Path) -> Result<Etcd> {
        let mut members = Etcd::start_cluster(ns, dir, 1)?;
        members.pop().ok_or_else(|| Error::Io {
            what: "start etcd".into(),
            source: std::io::Error::other("no member"),
        })
    }

    /// Starts a cluster of `members` (at most 254) in `ns`, member N at
    /// 127.0.0.N with its data in `dir/etcd-mN`, and returns once every
    /// member is healthy.
    pub fn start_cluster(ns: &Ns, dir: &Path, members: u8) -> Result<Vec<Etcd>> {
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
            };
            etcd.spawn()?;
            started.push(etcd);
        }
        for etcd in &mut started {
            etcd.wait_healthy()?;
        }
        Ok(started)
    }

    /// Its client URL, as seen from inside its namespace.
    pub fn endpoint(&self) -> String {
        format!("http://{}:{CLIENT_PORT}", self.addr)
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
        let client = format!("http://{}:{CLIENT_PORT}", self.addr);
        let peer = format!("http://{}:{PEER_PORT}", self.addr);
        let mut cmd = self.ns.command("etcd");
        cmd.arg("--name")
            .arg(&self.name)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &self.cluster])
            .args(["--heartbeat-interval", "10", "--election-timeout", "100"])
            .args(["--logger", "zap", "--log-level", "error"]);
        self.proc = Some(self.ns.spawn(cmd)?);
        Ok(())
    }

    fn wait_healthy(&mut self) -> Result<()> {
        let start = Instant::now();
        loop {
            let health = http(&self.ns, self.addr, "GET", "/health", None);
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

    fn call(&self, path: &str, body: &Value) -> Result<Value> {
        http(&self.ns, self.addr, "POST", path, Some(body))
    }
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
/// member at `addr` in `ns`, from a thread that enters it; the JSON answer.
fn http(ns: &Ns, addr: Ipv4Addr, method: &str, path: &str, body: Option<&Value>) -> Result<Value> {
    let body = body.map(Value::to_string).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.0\r\nHost: {addr}:{CLIENT_PORT}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let name = ns.name().to_string();
    let what = format!("{method} {path} to etcd at {addr} in {name}");
    let exchange = move || -> std::io::Result<Vec<u8>> {
        mcr_sys::netns::enter(&name)?;
        let addr = SocketAddr::from((addr, CLIENT_PORT));
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
