//! Following a key prefix in etcd (v3.4 and later): its whole content, then
//! every change, delivered in order on a thread of its own.
//!
//! It talks to etcd's gRPC-JSON gateway over HTTP/1.1 (`POST
//! /v3/kv/range`, and the streamed answer of `POST /v3/watch`), so MCR needs
//! no gRPC stack.
//!
//! # Security
//!
//! `https://` endpoints are reached over TLS, the server's certificate
//! checked against `ca_file` and the endpoint's host (`tls.rs`); with
//! `cert_file` and `key_file` the relay shows its own certificate to an
//! etcd that runs `--client-cert-auth`. With `user` and `password_file` it
//! authenticates as one of etcd's users and sends the token with each call
//! (`auth.rs`). Every file is read once, by [`StoreSettings::prepare`],
//! before mcrd gives up root. A refusal (a certificate, the password, the
//! user's permission on the prefix) is an outage like any other, with a
//! kind ([`mcr_core::control::StoreProblem`]) and a reason that says what
//! to mend: the relay forwards its last rules meanwhile and keeps trying.
//!
//! # What is delivered
//!
//! First [`StoreUpdate::Whole`]: the prefix read page by page, every page at
//! the first page's revision. Then a watch from the next revision: each
//! watch response becomes one [`StoreUpdate::Changes`] (a transaction's
//! changes come in one response). When the watch's start has been
//! compacted away (etcd cancels it with `compact_revision`), the prefix is
//! read whole again. When anything else fails the next endpoint is tried at
//! once, and when every endpoint has failed in turn one
//! [`StoreUpdate::Unreachable`] says why, for each; it is sent again only
//! when the reasons change or after etcd was back. Rounds of attempts are
//! spaced 100 ms apart, doubling to 5 s. Every reconnection starts with a
//! fresh `Whole`, so changes made meanwhile are never missed.
//!
//! # A watch that goes silent
//!
//! A watch sends nothing while nothing changes, so silence alone proves
//! nothing. Three things catch a watch that is dead without saying so:
//!
//! - **TCP keepalive** on every connection: a member whose host is down or
//!   cut off, or a connection a middlebox forgot, breaks the stream within
//!   25 s (10 s idle, then 3 probes 5 s apart).
//! - **`hasleader`**: every request asks (gRPC metadata, passed through by
//!   the gateway) that etcd refuse calls and end watches on a member that
//!   has lost the cluster's leader; such a member is alive but hears of no
//!   change any more.
//! - **A liveness probe**: once the watch has been silent for
//!   [`StoreSettings::probe_after`] (10 s by default), a linearizable
//!   count of one key is sent to the same member on its other connection,
//!   within the call timeout. A member that does not answer (hung, stopped,
//!   overloaded, without quorum) ends the watch, and the follower moves on.
//!
//! The watch also asks for etcd's progress notifications (sent when idle,
//! every 10 min by default). etcd 3.4's `progress_request` cannot be used
//! through the gateway: it would follow the create request on the watch's
//! request body, and etcd's HTTP/1.1 server (Go 1.19) sends no answer until
//! a request body has ended, so a watch whose body stays open never starts.
//!
//! # Keys
//!
//! Keys are delivered without the prefix. A key that is not UTF-8 is
//! skipped with a warning in the log.

mod auth;
mod client;
mod endpoint;
mod error;
mod follower;
#[cfg(test)]
mod secure_tests;
mod stream;
#[cfg(test)]
mod tests;
mod tls;
mod wire;

use std::net::IpAddr;
use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::Duration;

use mcr_core::control::StoreProblem;

use crate::supervisor::secret_file::{self, FileError};
pub use endpoint::{Endpoint, EndpointError};

/// The time one call to etcd has unless set otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a silent watch goes unchecked unless set otherwise.
pub const DEFAULT_PROBE_AFTER: Duration = Duration::from_secs(10);

/// Keys (without the prefix) and their values.
pub type Kvs = Vec<(String, Vec<u8>)>;
/// Keys (without the prefix) and their new values, `None` when deleted.
pub type Changes = Vec<(String, Option<Vec<u8>>)>;

/// Where the rules are in etcd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreSettings {
    /// The members' client URLs, `http://HOST:PORT` or `https://...`,
    /// tried in turn.
    pub endpoints: Vec<String>,
    /// The key prefix followed (e.g. `/mcr/rules/`).
    pub prefix: String,
    /// The time each call has, connecting included (default 2 s).
    pub timeout: Duration,
    /// How long the watch may be silent before the member is asked whether
    /// it still answers (default 10 s); with a user, how often it is asked
    /// in any case.
    pub probe_after: Duration,
    /// The CA etcd's server certificates are checked against (`https://`).
    pub ca_file: Option<PathBuf>,
    /// The relay's certificate and its key, for `--client-cert-auth`.
    pub client_cert: Option<(PathBuf, PathBuf)>,
    /// etcd's user and the file its password is in.
    pub user: Option<(String, PathBuf)>,
}

/// Settings checked and their files read: what [`follow`] starts with.
#[derive(Debug)]
pub struct Prepared {
    plan: follower::Plan,
}

impl StoreSettings {
    /// Settings with the default timeout and probe interval, plain HTTP and
    /// no user.
    pub fn new(endpoints: Vec<String>, prefix: impl Into<String>) -> StoreSettings {
        StoreSettings {
            endpoints,
            prefix: prefix.into(),
            timeout: DEFAULT_TIMEOUT,
            probe_after: DEFAULT_PROBE_AFTER,
            ca_file: None,
            client_cert: None,
            user: None,
        }
    }

    /// Checks the settings as [`follow`] would, reading their files and
    /// starting nothing: for a configuration check.
    pub fn check(&self) -> Result<(), EtcdError> {
        self.prepare().map(drop)
    }

    /// Checks the settings and reads their files (the CA, the client
    /// certificate and key, the password): at the start, while mcrd may
    /// still read them.
    pub fn prepare(&self) -> Result<Prepared, EtcdError> {
        if self.endpoints.is_empty() {
            return Err(EtcdError::NoEndpoints);
        }
        if self.timeout.is_zero() || self.probe_after.is_zero() {
            return Err(EtcdError::ZeroDuration);
        }
        let endpoints = self
            .endpoints
            .iter()
            .map(|e| Endpoint::parse(e))
            .collect::<Result<Vec<_>, _>>()?;
        let tls_count = endpoints.iter().filter(|e| e.tls).count();
        let bad = |why: &str| Err(EtcdError::Settings(why.to_string()));
        if tls_count != 0 && tls_count != endpoints.len() {
            return bad(
                "the endpoints mix http:// and https://; give every member as https:// (a plain one would let anyone on the path change the rules)",
            );
        }
        let tls = if tls_count != 0 {
            let Some(ca) = &self.ca_file else {
                return bad("https:// endpoints need ca_file (the CA that issued etcd's server certificates)");
            };
            let client = self.client_cert.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));
            Some(tls::Tls::load(ca, client)?)
        } else {
            if self.ca_file.is_some() || self.client_cert.is_some() {
                return bad(
                    "ca_file, cert_file and key_file are for https:// endpoints; write the endpoints as https://",
                );
            }
            None
        };
        if let Some((user, _)) = &self.user {
            if user.is_empty() {
                return bad("user is empty; name etcd's user, or leave user and password_file out");
            }
            if let Some(e) = endpoints.iter().find(|e| !e.tls && !is_loopback(&e.host)) {
                return Err(EtcdError::Settings(format!(
                    "user `{user}` would send its password in clear to {}; write the endpoints as https:// (with ca_file)",
                    e.url
                )));
            }
        }
        let credentials = match &self.user {
            None => None,
            Some((user, file)) => {
                let text = secret_file::read_private(
                    file,
                    "[daemon.etcd] password_file",
                    &format!("anyone on this host could read the password of etcd user `{user}`"),
                )?;
                if text.trim().is_empty() {
                    return Err(EtcdError::File(FileError {
                        setting: "[daemon.etcd] password_file".into(),
                        path: file.clone(),
                        why: ": it is empty; write the password of etcd's user in it".into(),
                    }));
                }
                Some(auth::Credentials::new(user.clone(), file.display().to_string(), &text))
            }
        };
        let prefix = self.prefix.as_bytes().to_vec();
        Ok(Prepared {
            plan: follower::Plan {
                endpoints,
                start: wire::range_start(&prefix),
                end: wire::prefix_end(&prefix),
                prefix,
                timeout: self.timeout,
                probe_after: self.probe_after,
                link: client::Link { tls, credentials },
            },
        })
    }
}

/// A host that is this host: a password sent to it in clear stays here.
fn is_loopback(host: &str) -> bool {
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|a| a.is_loopback())
}

/// What the follower learned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUpdate {
    /// The prefix's whole content at `revision` (first, and after every
    /// reconnection or compaction): keys not listed are gone.
    Whole {
        /// The store's revision the keys were read at.
        revision: i64,
        /// Every key (without the prefix) and its value, in key order.
        kvs: Kvs,
    },
    /// What changed since the previous update, in order, up to `revision`.
    Changes {
        /// The revision of the last change.
        revision: i64,
        /// Each key (without the prefix) with its new value, or `None` when
        /// it was deleted.
        changes: Changes,
    },
    /// No endpoint could be had; why, for each one tried (connection
    /// refused at which address, a timeout, an HTTP status, etcd's
    /// message). The follower keeps trying and sends `Whole` when back.
    Unreachable {
        /// The reasons, `; `-separated, each starting with its endpoint.
        why: String,
        /// What kind of failure: a refusal (certificate, authentication,
        /// permission) when an endpoint refused, else unreachable.
        kind: StoreProblem,
    },
}

/// Settings the follower cannot start with.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// No endpoint was given.
    #[error("etcd: no endpoint given; name at least one, e.g. http://127.0.0.1:2379")]
    NoEndpoints,
    /// A zero timeout or probe interval.
    #[error("etcd: the call timeout and the probe interval must be longer than zero")]
    ZeroDuration,
    /// An endpoint is not `http(s)://HOST:PORT`.
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    /// Settings that do not go together.
    #[error("[daemon.etcd]: {0}")]
    Settings(String),
    /// A file the settings name cannot be used.
    #[error(transparent)]
    File(#[from] FileError),
    /// The TLS settings do not make a TLS client.
    #[error("{0}")]
    Tls(String),
    /// The thread or its runtime could not be started.
    #[error("etcd: cannot start the follower's thread: {0}")]
    Start(#[source] std::io::Error),
}

/// The running follower. Dropping it stops it and joins its thread.
#[derive(Debug)]
pub struct Follower {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// Follows `settings.prefix` on a thread with a runtime of its own, calling
/// `deliver` with each update in order. `deliver` runs on that thread and
/// should hand the update on (to a channel) rather than block: the
/// follower stops only between calls to it.
pub fn follow(
    prepared: Prepared,
    mut deliver: impl FnMut(StoreUpdate) + Send + 'static,
) -> Result<Follower, EtcdError> {
    let plan = prepared.plan;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(EtcdError::Start)?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("mcrd-etcd".into())
        .spawn(move || {
            runtime.block_on(async move {
                tokio::select! {
                    _ = stopped => {}
                    () = follower::run(plan, &mut deliver) => {}
                }
            });
            // Not waiting for a host name lookup that may still run.
            runtime.shutdown_background();
        })
        .map_err(EtcdError::Start)?;
    Ok(Follower {
        stop: Some(stop),
        thread: Some(thread),
    })
}

impl Drop for Follower {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            // Dropped by `deliver` itself: the thread ends on its own.
            if thread.thread().id() == std::thread::current().id() {
                return;
            }
            if thread.join().is_err() {
                tracing::error!("etcd: the follower's thread panicked");
            }
        }
    }
}

/// The follower's settings from the config file's `[daemon.etcd]`.
pub fn store_settings(e: &mcr_core::config::EtcdSettings) -> Result<StoreSettings, EtcdError> {
    check_keys(e)?;
    let mut s = StoreSettings::new(e.endpoints.clone(), e.prefix.clone());
    if let Some(ms) = e.timeout_ms {
        s.timeout = Duration::from_millis(u64::from(ms));
    }
    if let Some(ms) = e.probe_ms {
        s.probe_after = Duration::from_millis(u64::from(ms));
    }
    s.ca_file.clone_from(&e.ca_file);
    s.client_cert = match (&e.cert_file, &e.key_file) {
        (Some(c), Some(k)) => Some((c.clone(), k.clone())),
        _ => None,
    };
    s.user = e.user.clone().zip(e.password_file.clone());
    Ok(s)
}

/// What `[daemon.etcd]` gives out of range, or in halves: a certificate
/// without its key, a user without a password file, and the reverse.
fn check_keys(e: &mcr_core::config::EtcdSettings) -> Result<(), EtcdError> {
    for (key, value, most) in [("timeout_ms", e.timeout_ms, 60_000), ("probe_ms", e.probe_ms, 600_000)] {
        if let Some(ms) = value
            && !(100..=most).contains(&ms)
        {
            return Err(EtcdError::Settings(format!("{key} = {ms}: give 100 to {most} (ms)")));
        }
    }
    let half = |a: bool, b: bool, one: &str, other: &str| {
        if a == b {
            Ok(())
        } else {
            let (given, missing) = if a { (one, other) } else { (other, one) };
            Err(EtcdError::Settings(format!("{given} needs {missing}")))
        }
    };
    half(e.cert_file.is_some(), e.key_file.is_some(), "cert_file", "key_file")?;
    half(e.user.is_some(), e.password_file.is_some(), "user", "password_file")
}

impl From<StoreUpdate> for mcr_core::plane::store::StoreUpdate {
    fn from(u: StoreUpdate) -> Self {
        use mcr_core::plane::store::StoreUpdate as Plane;
        match u {
            StoreUpdate::Whole { revision, kvs } => Plane::Whole { revision, entries: kvs },
            StoreUpdate::Changes { revision, changes } => Plane::Changes { revision, changes },
            StoreUpdate::Unreachable { why, kind } => Plane::Unreachable { why, kind },
        }
    }
}
