//! HTTP/1.1 to one etcd member's gRPC gateway: unary calls (`/v3/kv/range`)
//! on a connection kept between calls, and connections for the watch stream
//! (`stream.rs`). Every TCP connection has keepalive on, so a peer that is
//! gone (host down, network cut, state dropped by a middlebox) breaks the
//! connection within [`KEEPALIVE_IDLE`] + [`KEEPALIVE_INTERVAL`] ×
//! [`KEEPALIVE_PROBES`] even while nothing is sent.
//!
//! An `https://` endpoint is reached over TLS ([`Tls`]); with a user, every
//! call carries the token etcd gave it ([`auth`](super::auth)), got again
//! when etcd no longer takes it.
//!
//! Every request carries `Grpc-Metadata-Hasleader: true`, which the gateway
//! hands to etcd as the gRPC metadata `hasleader`: etcd then refuses a call,
//! and ends a watch stream, on a member that has lost its cluster's leader
//! (a member cut off from the others would otherwise go on serving a watch
//! on which nothing ever changes).

use std::net::SocketAddr;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::http::{Method, Request, StatusCode, header};
use hyper_util::rt::TokioIo;
use mcr_core::control::StoreProblem;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::auth::{Auth, Credentials};
use super::endpoint::Endpoint;
pub use super::error::{CallError, What};
use super::tls::Tls;
use super::wire::{AuthenticateRequest, AuthenticateResponse, ErrorBody, RangeRequest, RangeResponse};

/// Idle time before TCP keepalive starts probing a connection.
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
/// Time between keepalive probes.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// Unanswered probes after which the connection is dead.
pub const KEEPALIVE_PROBES: u32 = 3;

/// How to reach the members: TLS, and the user to authenticate as.
#[derive(Debug, Clone, Default)]
pub struct Link {
    /// For `https://` endpoints.
    pub tls: Option<Tls>,
    /// etcd's user, when it has authentication on.
    pub credentials: Option<Credentials>,
}

/// Unary calls to one member, reusing one connection while it lasts.
#[derive(Debug)]
pub struct Unary {
    endpoint: Endpoint,
    timeout: Duration,
    tls: Option<Tls>,
    auth: Option<Auth>,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl Unary {
    /// Calls to `endpoint`, each allowed `timeout` in all (connecting
    /// included).
    pub fn new(endpoint: Endpoint, timeout: Duration, link: &Link) -> Unary {
        Unary {
            endpoint,
            timeout,
            tls: link.tls.clone(),
            auth: link.credentials.clone().map(Auth::new),
            sender: None,
        }
    }

    /// `POST /v3/kv/range`, with the user's token when there is one; a
    /// token etcd no longer takes is got again, and the call sent again,
    /// once.
    pub async fn range(&mut self, request: &RangeRequest<'_>, what: What) -> Result<RangeResponse, CallError> {
        let body = serde_json::to_vec(request).map_err(|source| self.json_error(what, source))?;
        let token = self.token().await?;
        match self.call("/v3/kv/range", body.clone(), token.as_deref(), what).await {
            Err(e) if token.is_some() && e.refuses_token() => {
                self.renew(&e).await?;
                let token = self.token().await?;
                self.call("/v3/kv/range", body, token.as_deref(), what).await
            }
            r => r,
        }
    }

    /// The token to send: none without a user; otherwise the one held,
    /// got first when there is none or it is near its end.
    pub async fn token(&mut self) -> Result<Option<String>, CallError> {
        let Some(auth) = self.auth.as_ref().filter(|a| a.wanted()) else {
            return Ok(None);
        };
        if let Some(token) = auth.current() {
            return Ok(Some(token));
        }
        self.authenticate().await
    }

    /// etcd refused the token (`why`): gets a new one.
    pub async fn renew(&mut self, why: &CallError) -> Result<(), CallError> {
        if let Some(auth) = &mut self.auth {
            tracing::info!(
                "etcd: {}: the token of user `{}` was refused ({}); authenticating again",
                self.endpoint.url,
                auth.user(),
                why
            );
            auth.forget();
        }
        self.authenticate().await.map(drop)
    }

    async fn authenticate(&mut self) -> Result<Option<String>, CallError> {
        let Some(auth) = &self.auth else {
            return Ok(None);
        };
        let credentials = auth.credentials().clone();
        let body = serde_json::to_vec(&AuthenticateRequest {
            name: &credentials.user,
            password: credentials.password(),
        })
        .map_err(|source| self.json_error("authentication", source))?;
        let answer: Result<AuthenticateResponse, _> =
            self.call("/v3/auth/authenticate", body, None, "authentication").await;
        let auth = self.auth.as_mut().expect("checked above");
        match answer {
            Ok(r) => Ok(auth.got(r.token)),
            Err(CallError::Etcd { message, .. }) if message.contains("authentication is not enabled") => {
                auth.not_enabled(&self.endpoint.url);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    fn json_error(&self, what: What, source: serde_json::Error) -> CallError {
        CallError::Json {
            endpoint: self.endpoint.url.clone(),
            what,
            source,
        }
    }

    async fn call<T: DeserializeOwned>(
        &mut self,
        path: &str,
        body: Vec<u8>,
        token: Option<&str>,
        what: What,
    ) -> Result<T, CallError> {
        let (endpoint, timeout) = (self.endpoint.clone(), self.timeout);
        let call = async {
            // A kept connection the server has closed meanwhile fails the
            // request before etcd sees it; a range is safe to send again.
            let reused = self.sender.is_some();
            match self.call_once(path, body.clone(), token, what).await {
                Err(CallError::Http { .. }) if reused => self.call_once(path, body, token, what).await,
                r => r,
            }
        };
        let result = tokio::time::timeout(timeout, call)
            .await
            .unwrap_or_else(|_| Err(timed_out(&endpoint, what, timeout)));
        if result.is_err() {
            self.sender = None;
        }
        result
    }

    async fn call_once<T: DeserializeOwned>(
        &mut self,
        path: &str,
        body: Vec<u8>,
        token: Option<&str>,
        what: What,
    ) -> Result<T, CallError> {
        let kept = match self.sender.take() {
            Some(mut s) => s.ready().await.is_ok().then_some(s),
            None => None,
        };
        let mut sender = match kept {
            Some(s) => s,
            None => connect(&self.endpoint, self.tls.as_ref(), what).await?,
        };
        let request = post(&self.endpoint, path, body, token, what)?;
        let http = CallError::http(&self.endpoint.url, what);
        let response = sender.send_request(request).await.map_err(&http)?;
        let status = response.status();
        let bytes = response.into_body().collect().await.map_err(&http)?.to_bytes();
        if status != StatusCode::OK {
            return Err(refusal(&self.endpoint, what, status, &bytes));
        }
        let value = serde_json::from_slice(&bytes).map_err(|source| self.json_error(what, source))?;
        self.sender = Some(sender);
        Ok(value)
    }
}

/// The error for a call that ran out of time.
pub fn timed_out(endpoint: &Endpoint, what: What, timeout: Duration) -> CallError {
    CallError::Timeout {
        endpoint: endpoint.url.clone(),
        what,
        seconds: timeout.as_secs_f64(),
    }
}

/// Opens an HTTP/1.1 connection with keepalive on, in TLS for an `https://`
/// endpoint; tries every address the host resolves to.
pub async fn connect(
    endpoint: &Endpoint,
    tls: Option<&Tls>,
    what: What,
) -> Result<SendRequest<Full<Bytes>>, CallError> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((endpoint.host.as_str(), endpoint.port))
        .await
        .map_err(|source| CallError::Resolve {
            endpoint: endpoint.url.clone(),
            host: endpoint.host.clone(),
            source,
        })?
        .collect();
    let mut last = None;
    for addr in addrs {
        match TcpStream::connect(addr).await {
            Ok(stream) => {
                keepalive(endpoint, &stream);
                return match (endpoint.tls, tls) {
                    (true, Some(tls)) => match tls.connect(&endpoint.host, stream).await {
                        Ok(stream) => handshake(endpoint, stream, what).await,
                        Err(reason) => Err(CallError::Denied {
                            endpoint: endpoint.url.clone(),
                            problem: StoreProblem::Certificate,
                            reason,
                        }),
                    },
                    // Refused by the settings' check before any call.
                    (true, None) => Err(CallError::Denied {
                        endpoint: endpoint.url.clone(),
                        problem: StoreProblem::Certificate,
                        reason: "https:// needs ca_file in [daemon.etcd]".into(),
                    }),
                    (false, _) => handshake(endpoint, stream, what).await,
                };
            }
            Err(source) => {
                last = Some(CallError::Connect {
                    endpoint: endpoint.url.clone(),
                    addr,
                    source,
                })
            }
        }
    }
    Err(last.unwrap_or_else(|| CallError::Resolve {
        endpoint: endpoint.url.clone(),
        host: endpoint.host.clone(),
        source: std::io::Error::new(std::io::ErrorKind::NotFound, "no address"),
    }))
}

fn keepalive(endpoint: &Endpoint, stream: &TcpStream) {
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_INTERVAL)
        .with_retries(KEEPALIVE_PROBES);
    let socket = socket2::SockRef::from(stream);
    if let Err(e) = socket.set_tcp_keepalive(&keepalive) {
        tracing::warn!("etcd: {}: cannot turn TCP keepalive on: {e}", endpoint.url);
    }
    let _ = stream.set_nodelay(true);
}

async fn handshake<S>(endpoint: &Endpoint, stream: S, what: What) -> Result<SendRequest<Full<Bytes>>, CallError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(CallError::http(&endpoint.url, what))?;
    let url = endpoint.url.clone();
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!("etcd: {url}: connection ended: {e}");
        }
    });
    Ok(sender)
}

/// A call's request; with `token`, etcd's `Authorization` header (the
/// token alone, as etcd's gateway takes it).
pub fn post(
    endpoint: &Endpoint,
    path: &str,
    body: Vec<u8>,
    token: Option<&str>,
    what: What,
) -> Result<Request<Full<Bytes>>, CallError> {
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header(header::HOST, &endpoint.authority)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json")
        .header("grpc-metadata-hasleader", "true");
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, token);
    }
    request
        .body(Full::new(Bytes::from(body)))
        .map_err(|source| CallError::Request {
            endpoint: endpoint.url.clone(),
            what,
            source,
        })
}

/// A non-200 answer: etcd's own message if the body is one.
pub fn refusal(endpoint: &Endpoint, what: What, status: StatusCode, body: &[u8]) -> CallError {
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(e) if !e.message.is_empty() => CallError::Etcd {
            endpoint: endpoint.url.clone(),
            what,
            status: status.as_u16(),
            code: e.code,
            message: e.message,
        },
        _ => {
            let text = String::from_utf8_lossy(body);
            let text = text.trim();
            let body = match text.char_indices().nth(200) {
                Some((cut, _)) => format!("{}…", &text[..cut]),
                None => text.to_string(),
            };
            CallError::Status {
                endpoint: endpoint.url.clone(),
                what,
                status,
                body,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint() -> Endpoint {
        Endpoint::parse("http://127.0.0.1:2379").expect("endpoint")
    }

    #[test]
    fn a_refusal_carries_etcds_message() {
        let body = br#"{"error":"etcdserver: mvcc: required revision has been compacted","message":"etcdserver: mvcc: required revision has been compacted","code":11}"#;
        let e = refusal(&endpoint(), "range", StatusCode::BAD_REQUEST, body);
        assert!(e.is_compacted());
        assert_eq!(
            e.to_string(),
            "http://127.0.0.1:2379: range: etcd says \"etcdserver: mvcc: required revision has been compacted\" (HTTP 400, gRPC code 11)"
        );
    }

    #[test]
    fn a_refusal_without_etcds_message_shows_the_body() {
        let e = refusal(&endpoint(), "range", StatusCode::NOT_FOUND, b"Not Found\n");
        assert!(!e.is_compacted());
        assert_eq!(
            e.to_string(),
            "http://127.0.0.1:2379: range: HTTP 404 Not Found: Not Found"
        );
        let long = "x".repeat(500);
        let e = refusal(&endpoint(), "range", StatusCode::BAD_GATEWAY, long.as_bytes()).to_string();
        assert!(e.ends_with('…') && e.len() < 300, "{e}");
    }

    #[test]
    fn a_timeout_names_the_call() {
        let e = timed_out(&endpoint(), "range", Duration::from_secs(2));
        assert_eq!(
            e.to_string(),
            "http://127.0.0.1:2379: no answer to the range within 2.0 s"
        );
    }
}
