//! Why a call to etcd failed ([`CallError`]): what the client, the
//! stream and the follower report, and what [`super::auth::explain`] turns
//! into a refusal that says what to mend.

use std::net::SocketAddr;

use hyper::http::StatusCode;
use mcr_core::control::StoreProblem;

/// What a call is, for messages.
pub type What = &'static str;

/// Why a call to etcd failed. Its text, which names the endpoint, is what
/// the follower reports as the reason etcd is unreachable.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The host name did not resolve.
    #[error("{endpoint}: cannot resolve `{host}`: {source}")]
    Resolve {
        /// The endpoint's URL.
        endpoint: String,
        /// The host.
        host: String,
        /// Why.
        source: std::io::Error,
    },
    /// No TCP connection could be made.
    #[error("{endpoint}: cannot connect to {addr}: {source}")]
    Connect {
        /// The endpoint's URL.
        endpoint: String,
        /// The address tried last.
        addr: SocketAddr,
        /// The OS error (connection refused, no route to host...).
        source: std::io::Error,
    },
    /// The call, or the connection it needed, took longer than allowed.
    #[error("{endpoint}: no answer to the {what} within {seconds:.1} s")]
    Timeout {
        /// The endpoint's URL.
        endpoint: String,
        /// The call.
        what: What,
        /// The time allowed.
        seconds: f64,
    },
    /// HTTP failed: the connection closed or broke mid-answer.
    #[error("{endpoint}: {what}: {source}")]
    Http {
        /// The endpoint's URL.
        endpoint: String,
        /// The call.
        what: What,
        /// hyper's error.
        source: hyper::Error,
    },
    /// A plain HTTP connection closed without an answer: what a TLS port
    /// does to a request that is not TLS.
    #[error("{endpoint}: {what}: etcd closed the connection without an answer; if it serves TLS there, write https://")]
    NoAnswer {
        /// The endpoint's URL.
        endpoint: String,
        /// The call.
        what: What,
    },
    /// The request could not be made (a host hyper refuses in `Host`).
    #[error("{endpoint}: {what}: cannot make the request: {source}")]
    Request {
        /// The endpoint's URL.
        endpoint: String,
        /// The call.
        what: What,
        /// Why.
        source: hyper::http::Error,
    },
    /// etcd refused the call and said why.
    #[error("{endpoint}: {what}: etcd says \"{message}\" (HTTP {status}, gRPC code {code})")]
    Etcd {
        /// The endpoint's URL.
        endpoint: String,
        /// The call.
        what: What,
        /// The HTTP status.
        status: u16,
        /// The gRPC status code.
        code: i32,
        /// etcd's message.
        message: String,
    },
    /// Another HTTP status, with no message of etcd's (not etcd, or an old
    /// one without the `/v3` gateway).
    #[error("{endpoint}: {what}: HTTP {status}: {body}")]
    Status {
        /// The endpoint's URL.
        endpoint: String,
        /// The call.
        what: What,
        /// The status.
        status: StatusCode,
        /// The start of the body.
        body: String,
    },
    /// The answer is not the JSON etcd's gateway sends.
    #[error("{endpoint}: {what}: the answer is not what etcd's gateway sends: {source}")]
    Json {
        /// The endpoint's URL.
        endpoint: String,
        /// The call.
        what: What,
        /// Why.
        source: serde_json::Error,
    },
    /// The watch stream carried an error: the gRPC stream behind it failed.
    #[error("{endpoint}: the watch failed: {message}")]
    Stream {
        /// The endpoint's URL.
        endpoint: String,
        /// The gateway's message.
        message: String,
    },
    /// The watch stream ended although no one canceled the watch.
    #[error("{endpoint}: etcd closed the watch stream")]
    Closed {
        /// The endpoint's URL.
        endpoint: String,
    },
    /// etcd canceled the watch (refused it, or ended it) and said why.
    #[error("{endpoint}: etcd canceled the watch{}", if reason.is_empty() { String::new() } else { format!(": {reason}") })]
    Canceled {
        /// The endpoint's URL.
        endpoint: String,
        /// etcd's reason (`rpc error: code = PermissionDenied desc = ...`).
        reason: String,
    },
    /// The watch was silent, and the member did not answer the probe.
    #[error("the watch was silent and the member did not answer: {0}")]
    Silent(Box<CallError>),
    /// etcd refused the relay, or the relay refused etcd: a certificate,
    /// the user, or its permission. `reason` says what to mend.
    #[error("{endpoint}: {problem}: {reason}")]
    Denied {
        /// The endpoint's URL.
        endpoint: String,
        /// What kind of refusal.
        problem: StoreProblem,
        /// What it means and what to do.
        reason: String,
    },
}

impl CallError {
    /// The error of hyper's `source` in call `what` to `endpoint` (a URL).
    pub fn http(endpoint: &str, what: What) -> impl Fn(hyper::Error) -> CallError + '_ {
        move |source| CallError::Http {
            endpoint: endpoint.to_string(),
            what,
            source,
        }
    }

    /// Whether etcd refused to read at a revision compaction has removed.
    pub fn is_compacted(&self) -> bool {
        matches!(self, CallError::Etcd { message, .. } if message.contains("required revision has been compacted"))
    }

    /// What kind of failure it is, for the status and the metrics.
    pub fn problem(&self) -> StoreProblem {
        match self {
            CallError::Denied { problem, .. } => *problem,
            CallError::Silent(inner) => inner.problem(),
            _ => StoreProblem::Unreachable,
        }
    }

    /// Whether etcd no longer takes the token sent (expired, or etcd
    /// restarted and forgot it): authenticating again mends it. An answer
    /// without a body counts too: etcd 3.4.23's gateway sends some
    /// refusals so (etcd-io/etcd#15256).
    pub fn refuses_token(&self) -> bool {
        match self {
            CallError::Etcd { message, .. } => {
                message.contains("invalid auth token") || message.contains("revision of auth store is old")
            }
            CallError::Status { status, body, .. } => *status == StatusCode::UNAUTHORIZED || body.is_empty(),
            CallError::Canceled { reason, .. } => reason.contains("invalid auth token"),
            _ => false,
        }
    }
}
