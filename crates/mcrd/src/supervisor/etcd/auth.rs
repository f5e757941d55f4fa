//! etcd's own users: the relay authenticates as `user` with the password
//! of `password_file` and sends the token etcd gives it with each call.
//!
//! A simple token (etcd's default) lives `--auth-token-ttl` (300 s by
//! default) after its last use; the follower uses it at least every probe
//! interval, and when etcd refuses it anyway (a shorter TTL, an etcd that
//! restarted and forgot it) the call authenticates again and is sent again
//! once. A JWT (`--auth-token jwt,...`) ends at a fixed time, and is renewed
//! when 80 % of its life has passed.
//!
//! What etcd answers is turned here into what an operator must mend
//! ([`explain`]): the password, a user that is missing, the role's
//! permission on the prefix, a certificate.

use std::time::{Duration, Instant, SystemTime};

use base64::Engine as _;
use mcr_core::control::StoreProblem;

use super::error::CallError;
use super::tls::Tls;

/// The user and its password. The password never shows in `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// etcd's user name.
    pub user: String,
    /// The file the password came from, for messages.
    pub password_file: String,
    password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password_file", &self.password_file)
            .field("password", &"<hidden>")
            .finish()
    }
}

impl Credentials {
    /// `user` with the password read from `password_file` (one trailing
    /// newline is not part of it).
    pub fn new(user: String, password_file: String, text: &str) -> Credentials {
        let password = text.strip_suffix('\n').unwrap_or(text);
        let password = password.strip_suffix('\r').unwrap_or(password);
        Credentials {
            user,
            password_file,
            password: password.to_string(),
        }
    }

    /// The password, for the authentication request only.
    pub fn password(&self) -> &str {
        &self.password
    }
}

/// A user's token, while it lasts.
#[derive(Debug)]
pub struct Auth {
    credentials: Credentials,
    token: Option<(String, Option<Instant>)>,
    /// etcd said authentication is off: no token is asked for.
    not_enabled: bool,
}

impl Auth {
    /// Not authenticated yet.
    pub fn new(credentials: Credentials) -> Auth {
        Auth {
            credentials,
            token: None,
            not_enabled: false,
        }
    }

    /// The user.
    pub fn user(&self) -> &str {
        &self.credentials.user
    }

    /// Who to authenticate as.
    pub fn credentials(&self) -> &Credentials {
        &self.credentials
    }

    /// The token to send, unless there is none or it is due for renewal.
    /// (With authentication off in etcd: `None`, and it is not asked for.)
    pub fn current(&self) -> Option<String> {
        match &self.token {
            Some((token, renew_at)) if renew_at.is_none_or(|at| Instant::now() < at) => Some(token.clone()),
            _ => None,
        }
    }

    /// Whether a token should be asked for.
    pub fn wanted(&self) -> bool {
        !self.not_enabled
    }

    /// etcd gave `token`: held until it is due for renewal.
    pub fn got(&mut self, token: String) -> Option<String> {
        let renew_at = jwt_life(&token, SystemTime::now()).map(|life| Instant::now() + life.mul_f64(0.8));
        self.token = Some((token.clone(), renew_at));
        Some(token)
    }

    /// The token was refused: the next call authenticates again.
    pub fn forget(&mut self) {
        self.token = None;
    }

    /// etcd has authentication off: the user is not needed.
    pub fn not_enabled(&mut self, endpoint: &str) {
        if !self.not_enabled {
            tracing::warn!(
                "etcd: {endpoint}: authentication is not enabled in etcd; mcrd reads without user `{}`",
                self.credentials.user
            );
        }
        self.not_enabled = true;
    }
}

/// How long a JWT has left from `now`, from its `exp` claim (`None` for a
/// simple token, or a JWT without one).
pub fn jwt_life(token: &str, now: SystemTime) -> Option<Duration> {
    let mut parts = token.split('.');
    let (_, payload, _) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let exp = Duration::from_secs(claims.get("exp")?.as_u64()?);
    // To the nanosecond: `exp` is a whole second, and a token issued at
    // 12.99 s with 4 s to live ends at 16 s, 3.01 s later, not 4.
    let now = now.duration_since(SystemTime::UNIX_EPOCH).ok()?;
    Some(exp.saturating_sub(now))
}

/// What the relay needs to say about a failure: the same error, or, when
/// it is etcd refusing the relay (or TLS failing), one that says what to
/// mend.
pub fn explain(e: CallError, tls: Option<&Tls>, credentials: Option<&Credentials>, prefix: &str) -> CallError {
    let denied = |endpoint: &str, problem, reason: String| CallError::Denied {
        endpoint: endpoint.to_string(),
        problem,
        reason,
    };
    let user = |c: &Credentials| format!("user `{}`", c.user);
    match e {
        CallError::Http {
            ref endpoint,
            ref source,
            what,
        } => match tls.and_then(|t| t.reason(host_of(endpoint), source)) {
            Some(reason) => denied(endpoint, StoreProblem::Certificate, reason),
            None if source.is_incomplete_message() && endpoint.starts_with("http://") => CallError::NoAnswer {
                endpoint: endpoint.clone(),
                what,
            },
            None => e,
        },
        CallError::Silent(inner) => match explain(*inner, tls, credentials, prefix) {
            d @ CallError::Denied { .. } => d,
            other => CallError::Silent(Box::new(other)),
        },
        CallError::Status {
            ref endpoint, ref body, ..
        } if body.contains("CommonName of client") => denied(
            endpoint,
            StoreProblem::Certificate,
            format!(
                "etcd refuses client certificates that have a Common Name while its authentication is on (its gateway says \"{body}\"); issue cert_file with an empty subject and its name in subjectAltName"
            ),
        ),
        CallError::Etcd {
            ref endpoint,
            ref message,
            ..
        }
        | CallError::Canceled {
            ref endpoint,
            reason: ref message,
        }
        | CallError::Stream {
            ref endpoint,
            ref message,
        } => {
            let says = message.rsplit("desc = ").next().unwrap_or(message);
            if message.contains("user name is empty") {
                denied(
                    endpoint,
                    StoreProblem::Authentication,
                    "etcd has authentication on and mcrd gives no user; set user and password_file in [daemon.etcd]"
                        .into(),
                )
            } else if message.contains("authentication failed") {
                let who = credentials.map_or_else(
                    || "the user".to_string(),
                    |c| format!("{} with the password in {}", user(c), c.password_file),
                );
                denied(
                    endpoint,
                    StoreProblem::Authentication,
                    format!("etcd refused {who} (etcd says \"{says}\")"),
                )
            } else if message.contains("invalid auth token") || message.contains("auth store is old") {
                let who = credentials.map_or_else(|| "the user".to_string(), user);
                denied(
                    endpoint,
                    StoreProblem::Authentication,
                    format!("etcd refused the token of {who} even just after giving it (etcd says \"{says}\")"),
                )
            } else if message.contains("permission denied") {
                let who = credentials.map_or_else(|| "the user".to_string(), user);
                denied(
                    endpoint,
                    StoreProblem::Permission,
                    format!(
                        "{who} may not read {prefix} (etcd says \"{says}\"); grant its role read on the prefix: etcdctl role grant-permission ROLE --prefix=true read {prefix}"
                    ),
                )
            } else {
                e
            }
        }
        other => other,
    }
}

/// The host of a URL the endpoint parser made (`https://HOST:PORT`,
/// `https://[v6]:PORT`).
fn host_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    match rest.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(v6),
        None => rest.rsplit_once(':').map_or(rest, |(h, _)| h),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds() -> Credentials {
        Credentials::new("mcr".into(), "/etc/mcr/etcd-password".into(), "pw\n")
    }

    fn etcd(message: &str, code: i32) -> CallError {
        CallError::Etcd {
            endpoint: "https://127.0.0.1:2379".into(),
            what: "range",
            status: 400,
            code,
            message: message.into(),
        }
    }

    #[test]
    fn the_password_is_the_files_without_its_newline_and_never_shown() {
        let c = creds();
        assert_eq!(c.password(), "pw");
        assert!(!format!("{c:?}").contains("pw\""), "{c:?}");
        assert_eq!(Credentials::new("u".into(), "f".into(), "a b\r\n").password(), "a b");
    }

    #[test]
    fn a_jwt_is_renewed_before_its_end_and_a_simple_token_is_not_timed() {
        let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(br#"{"exp":1000100,"iat":1000000,"username":"mcr","revision":5}"#);
        let jwt = format!("eyJhbGciOiJSUzI1NiJ9.{payload}.c2ln");
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(jwt_life(&jwt, now), Some(Duration::from_secs(100)));
        // Late in a second, less is left than the whole seconds say.
        let late = now + Duration::from_millis(990);
        assert_eq!(jwt_life(&jwt, late), Some(Duration::from_millis(99_010)));
        assert_eq!(jwt_life("FidEbswFJOnYbLZL.18", now), None);
        let mut a = Auth::new(creds());
        assert_eq!(a.current(), None);
        a.got("FidEbswFJOnYbLZL.18".into());
        assert_eq!(a.current().as_deref(), Some("FidEbswFJOnYbLZL.18"));
        // A JWT already past 80 % of its life is due at once.
        a.got(jwt);
        assert_eq!(a.current(), None);
        a.forget();
        assert_eq!(a.current(), None);
    }

    #[test]
    fn etcds_refusals_say_what_to_mend() {
        let c = creds();
        let say = |e| explain(e, None, Some(&c), "/mcr/rules/");
        let e = say(etcd(
            "etcdserver: authentication failed, invalid user ID or password",
            3,
        ));
        assert_eq!(e.problem(), StoreProblem::Authentication);
        assert_eq!(
            e.to_string(),
            "https://127.0.0.1:2379: authentication: etcd refused user `mcr` with the password in /etc/mcr/etcd-password (etcd says \"etcdserver: authentication failed, invalid user ID or password\")"
        );
        let e = say(etcd("etcdserver: permission denied", 7));
        assert_eq!(e.problem(), StoreProblem::Permission);
        assert_eq!(
            e.to_string(),
            "https://127.0.0.1:2379: permission: user `mcr` may not read /mcr/rules/ (etcd says \"etcdserver: permission denied\"); grant its role read on the prefix: etcdctl role grant-permission ROLE --prefix=true read /mcr/rules/"
        );
        let canceled = CallError::Canceled {
            endpoint: "https://127.0.0.1:2379".into(),
            reason: "rpc error: code = PermissionDenied desc = etcdserver: permission denied".into(),
        };
        assert_eq!(say(canceled).to_string(), e.to_string());
        let e = explain(etcd("etcdserver: user name is empty", 3), None, None, "/p/");
        assert_eq!(
            (e.problem(), e.to_string()),
            (
                StoreProblem::Authentication,
                "https://127.0.0.1:2379: authentication: etcd has authentication on and mcrd gives no user; set user and password_file in [daemon.etcd]".into()
            )
        );
        let silent = CallError::Silent(Box::new(etcd("etcdserver: permission denied", 7)));
        assert_eq!(say(silent).problem(), StoreProblem::Permission);
        let other = say(etcd("etcdserver: no leader", 14));
        assert_eq!(other.problem(), StoreProblem::Unreachable);
        let cn = CallError::Status {
            endpoint: "https://127.0.0.1:2379".into(),
            what: "range",
            status: hyper::http::StatusCode::BAD_REQUEST,
            body: "CommonName of client sending a request against gateway will be ignored and not used as expected"
                .into(),
        };
        let e = say(cn);
        assert_eq!(e.problem(), StoreProblem::Certificate);
        assert!(e.to_string().contains("issue cert_file with an empty subject"), "{e}");
    }

    #[test]
    fn the_host_of_an_endpoints_url() {
        assert_eq!(host_of("https://127.0.1.1:2379"), "127.0.1.1");
        assert_eq!(host_of("https://[::1]:2379"), "::1");
        assert_eq!(host_of("https://etcd.example:2379"), "etcd.example");
    }
}
