//! mcrd's HTTP server (hyper, with axum's router, on the supervisor's
//! tokio): Prometheus' `/metrics`, the JSON API under `/api/` (the control
//! socket's operations, answered by the same supervisor loop with the same
//! checks and messages) and the live web page at `/`.
//!
//! Who may do what ([`access`]): a loopback client may read; every change,
//! and any request from beyond loopback, needs the bearer token of
//! `--http-token-file`. Serving beyond loopback needs TLS
//! (`--http-tls-cert`, `--http-tls-key`) or `--http-insecure`.
//!
//! Limits, as the control socket has them: at most [`MAX_CLIENTS`]
//! connections are served at once (one more gets `503`), a client has
//! [`HEAD_TIMEOUT`] for its TLS handshake and for each request head, a
//! connection lasts at most [`CONNECTION_LIFETIME`] (then it is closed
//! after the request in hand, and a browser simply opens another), and a
//! request body is at most [`MAX_REQUEST_BYTES`].

mod access;
mod api;
mod app;
mod nmos;
mod problem;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use mcr_core::config::HttpListen;
use mcr_core::control::MAX_REQUEST_BYTES;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use super::control::Call;
use super::secret_file;
pub use access::Access;

/// The most connections served at once.
pub const MAX_CLIENTS: usize = 64;
/// How long a client has for its TLS handshake, and for each request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one connection is kept, at most.
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(120);
/// How long an answer may take to be written.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Where the address comes from when none is given.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9808";

/// How the server is set up (`--http-*`, `http_*` in `[daemon]`).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Where to listen; none: the default address, which, unlike one
    /// given, may be in use (then the daemon runs without HTTP, saying so).
    pub listen: Option<HttpListen>,
    /// The file holding the bearer token for changes.
    pub token_file: Option<PathBuf>,
    /// The TLS certificate chain and key (PEM).
    pub tls_cert: Option<PathBuf>,
    /// The TLS key.
    pub tls_key: Option<PathBuf>,
    /// Serve plain HTTP beyond loopback.
    pub insecure: bool,
    /// Every request needs the token, loopback or not.
    pub reads_need_token: bool,
    /// The NMOS control networks, whose clients read the NMOS APIs
    /// without the token (`[daemon.nmos] control_networks`).
    pub nmos_networks: Vec<mcr_core::config::Network>,
    /// Whether those clients may make IS-05 changes without it too.
    pub nmos_changes: bool,
}

/// A listening server, opened before the daemon gives up root (the token
/// file and key may be readable by root alone).
pub struct Server {
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    access: Arc<Access>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("listener", &self.listener)
            .field("tls", &self.tls.is_some())
            .field("access", &self.access)
            .finish()
    }
}

/// What the settings make, checked and with their files read, before
/// anything listens.
struct Plan {
    addr: SocketAddr,
    /// Given, not the default.
    explicit: bool,
    tls: Option<TlsAcceptor>,
    token: Option<String>,
}

/// Checks the settings and reads their files (the token, the TLS
/// certificate and key): `None` when HTTP is off. What `--check-config`
/// checks, and the first half of [`open`].
fn plan(opts: &Options) -> anyhow::Result<Option<Plan>> {
    let (addr, explicit) = match opts.listen {
        Some(HttpListen::Off) => return Ok(None),
        Some(HttpListen::At(a)) => (a, true),
        None => (default_listen(), false),
    };
    let tls = match (&opts.tls_cert, &opts.tls_key) {
        (Some(cert), Some(key)) => Some(tls_acceptor(cert, key)?),
        (None, None) => None,
        (Some(_), None) => anyhow::bail!("--http-tls-cert needs --http-tls-key (the certificate's private key, PEM)"),
        (None, Some(_)) => anyhow::bail!("--http-tls-key needs --http-tls-cert (the certificate chain, PEM)"),
    };
    if !addr.ip().is_loopback() && tls.is_none() && !opts.insecure {
        anyhow::bail!(
            "--http-listen {addr} (http_listen, or metrics_listen in older config files) is beyond loopback: give \
             --http-tls-cert and --http-tls-key to serve HTTPS, or --http-insecure to serve plain HTTP there (anyone \
             on the path can then read what is sent, the token too)"
        );
    }
    anyhow::ensure!(
        !opts.reads_need_token || opts.token_file.is_some(),
        "--http-reads-need-token needs --http-token-file (the token every request must then carry)"
    );
    let token = match &opts.token_file {
        Some(p) => Some(access::read_token(p)?),
        None => None,
    };
    Ok(Some(Plan {
        addr,
        explicit,
        tls,
        token,
    }))
}

/// [`DEFAULT_LISTEN`] as an address.
fn default_listen() -> SocketAddr {
    // A constant that parses (the unit test below holds it).
    DEFAULT_LISTEN.parse().expect("a socket address")
}

/// Settings that are valid but can do nothing as the others stand: what
/// to change, one line each, logged at the start and printed by
/// `--check-config`.
pub fn unheeded(opts: &Options) -> Vec<String> {
    let mut said = Vec::new();
    let addr = match opts.listen {
        Some(HttpListen::Off) => {
            if opts.token_file.is_some() || opts.tls_cert.is_some() || opts.tls_key.is_some() || opts.insecure {
                said.push("HTTP is off (http_listen none): its other settings are not used".to_string());
            }
            if !opts.nmos_networks.is_empty() {
                said.push(
                    "[daemon.nmos] control_networks: HTTP is off (http_listen none), so no NMOS API is served to \
                     them; give http_listen an address they reach"
                        .to_string(),
                );
            }
            return said;
        }
        Some(HttpListen::At(a)) => a,
        None => default_listen(),
    };
    let beyond = opts.nmos_networks.iter().any(|n| !n.within_loopback());
    if addr.ip().is_loopback() && beyond {
        said.push(format!(
            "[daemon.nmos] control_networks: HTTP listens on {addr}, loopback only, so no client of those \
             networks can reach the NMOS APIs; give http_listen an address they reach (with TLS, or \
             http_insecure)"
        ));
    }
    said
}

/// Checks the settings as a start would (`--check-config`), listening
/// nowhere: what [`unheeded`] says.
pub fn check(opts: &Options) -> anyhow::Result<Vec<String>> {
    plan(opts).map(|_| unheeded(opts))
}

/// Opens the server as `opts` say: `None` when HTTP is off, or when the
/// default address is in use (logged).
pub async fn open(opts: &Options) -> anyhow::Result<Option<Server>> {
    let plan = plan(opts)?;
    for said in unheeded(opts) {
        tracing::warn!("{said}");
    }
    let Some(Plan {
        addr,
        explicit,
        tls,
        token,
    }) = plan
    else {
        return Ok(None);
    };
    let listener = match TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) if !explicit => {
            tracing::warn!(
                "HTTP: cannot listen on the default address {addr} ({e}): running without the web page, API and \
                 /metrics (give --http-listen ADDRESS:PORT, or --http-listen none to say so)"
            );
            return Ok(None);
        }
        Err(e) => anyhow::bail!("HTTP: cannot listen on {addr}: {e} (see --http-listen)"),
    };
    Ok(Some(Server {
        listener,
        tls,
        access: Arc::new(
            Access::new(token, opts.reads_need_token)
                .with_control_networks(opts.nmos_networks.clone(), opts.nmos_changes),
        ),
    }))
}

/// The TLS settings from a PEM certificate chain and key.
fn tls_acceptor(cert: &Path, key: &Path) -> anyhow::Result<TlsAcceptor> {
    let certs = secret_file::certificates(cert, "--http-tls-cert")?;
    let key = secret_file::private_key(key, "--http-tls-key", None)?;
    let config = tokio_rustls::rustls::ServerConfig::builder_with_provider(Arc::new(
        tokio_rustls::rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| anyhow::anyhow!("TLS: {e}"))?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| anyhow::anyhow!("--http-tls-cert and --http-tls-key do not make a TLS identity: {e}"))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// How many connections beyond [`MAX_CLIENTS`] are told they are one too
/// many at once; others are closed at once.
const MAX_REFUSING: usize = 16;
/// How long such a connection has for its request head.
const REFUSING_HEAD_TIMEOUT: Duration = Duration::from_secs(2);

impl Server {
    /// Serves forever on a thread and runtime of its own: TLS, JSON and
    /// gzip never hold up the supervisor's loop, which answers each request
    /// over `calls`.
    pub fn spawn(self, calls: mpsc::Sender<Call>) -> anyhow::Result<()> {
        let listener = self.listener.into_std()?;
        let (tls, access) = (self.tls, self.access);
        std::thread::Builder::new().name("mcrd-http".into()).spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => return tracing::error!("HTTP: cannot start its runtime: {e}"),
            };
            rt.block_on(async move {
                match TcpListener::from_std(listener) {
                    Ok(listener) => serve(listener, tls, access, calls).await,
                    Err(e) => tracing::error!("HTTP: {e}"),
                }
            });
        })?;
        Ok(())
    }
}

async fn serve(listener: TcpListener, tls: Option<TlsAcceptor>, access: Arc<Access>, calls: mpsc::Sender<Call>) {
    let scheme = if tls.is_some() { "https" } else { "http" };
    if let Ok(a) = listener.local_addr() {
        tracing::info!("web page, API and metrics on {scheme}://{a}/");
    }
    let app = api::router(calls, access, tls.is_some());
    let slots = Arc::new(Semaphore::new(MAX_CLIENTS));
    let refusing = Arc::new(Semaphore::new(MAX_REFUSING));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("HTTP: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let (app, permit, head_timeout) = match slots.clone().try_acquire_owned() {
            Ok(p) => (app.clone(), p, HEAD_TIMEOUT),
            // One too many: told so over plain HTTP, a few at a time;
            // over TLS (no handshake for it) and beyond those, closed.
            Err(_) => match refusing.clone().try_acquire_owned() {
                Ok(p) if tls.is_none() => (api::busy(), p, REFUSING_HEAD_TIMEOUT),
                _ => continue,
            },
        };
        let tls = tls.clone();
        tokio::spawn(async move {
            serve_connection(stream, peer, tls, app, head_timeout).await;
            drop(permit);
        });
    }
}

async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    tls: Option<TlsAcceptor>,
    app: axum::Router,
    head_timeout: Duration,
) {
    let app = app.map_request(move |mut r: hyper::Request<hyper::body::Incoming>| {
        r.extensions_mut().insert(access::Peer(peer));
        r
    });
    let service = TowerToHyperService::new(app);
    match tls {
        Some(tls) => match tokio::time::timeout(HEAD_TIMEOUT, tls.accept(stream)).await {
            Ok(Ok(s)) => drive(TokioIo::new(s), service, head_timeout).await,
            Ok(Err(e)) => tracing::debug!("HTTP: TLS handshake with {peer}: {e}"),
            Err(_) => tracing::debug!("HTTP: TLS handshake with {peer} took longer than {HEAD_TIMEOUT:?}"),
        },
        None => drive(TokioIo::new(stream), service, head_timeout).await,
    }
}

/// Serves HTTP/1.1 on one connection, within its limits.
async fn drive<I, S>(io: I, service: S, head_timeout: Duration)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: hyper::service::HttpService<hyper::body::Incoming> + Send + 'static,
    S::Future: Send + 'static,
    S::ResBody: Send + 'static,
    <S::ResBody as hyper::body::Body>::Data: Send,
    <S::ResBody as hyper::body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(head_timeout)
        .max_buf_size(64 * 1024);
    let conn = http.serve_connection(io, service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        () = tokio::time::sleep(CONNECTION_LIFETIME) => conn.as_mut().graceful_shutdown(),
    }
    // The request in hand is answered, then the connection closes.
    let _ = tokio::time::timeout(WRITE_TIMEOUT, conn).await;
}

/// The largest request body, from the control protocol.
pub const MAX_BODY_BYTES: usize = MAX_REQUEST_BYTES;
