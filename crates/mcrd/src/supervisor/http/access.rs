//! Who may do what over HTTP: a loopback client may read; a change, or
//! any request from beyond loopback, needs the bearer token from
//! `--http-token-file`.

use std::net::SocketAddr;
use std::path::Path;

use axum::http::{HeaderMap, StatusCode, header};

use super::problem::Problem;

/// The shortest token accepted, in characters.
pub const MIN_TOKEN_CHARS: usize = 16;

/// The client's address, put on each request by the connection.
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub SocketAddr);

/// What a request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// Reads.
    Read,
    /// Changes the rules or writes a file.
    Change,
}

/// The token, if there is one, and whether reading needs it too.
#[derive(Debug)]
pub struct Access {
    token: Option<String>,
    reads_need_token: bool,
    /// NMOS control networks: their clients read the NMOS APIs freely.
    control: Vec<mcr_core::config::Network>,
    /// And make IS-05 changes freely.
    control_changes: bool,
}

/// Reads the token from `path`: refused when others may read the file, or
/// when it is empty or short.
pub fn read_token(path: &Path) -> anyhow::Result<String> {
    let shown = path.display();
    let text = crate::supervisor::secret_file::read_private(
        path,
        "--http-token-file",
        "anyone on this host could change the rules",
    )?;
    let token = text.trim();
    anyhow::ensure!(
        token.chars().count() >= MIN_TOKEN_CHARS && !token.chars().any(char::is_whitespace),
        "--http-token-file {shown}: the token must be one word of at least {MIN_TOKEN_CHARS} characters \
         (e.g. `openssl rand -hex 32 > {shown}`)"
    );
    Ok(token.to_string())
}

impl Access {
    /// With `token` for changes (none: no changes over HTTP); with
    /// `reads_need_token`, every request needs it, loopback or not.
    pub fn new(token: Option<String>, reads_need_token: bool) -> Self {
        Access {
            token,
            reads_need_token,
            control: Vec::new(),
            control_changes: false,
        }
    }

    /// With `networks` as the NMOS control networks, whose clients read
    /// the NMOS APIs without the token, and with `changes` make IS-05
    /// changes without it too.
    pub fn with_control_networks(mut self, networks: Vec<mcr_core::config::Network>, changes: bool) -> Self {
        self.control = networks;
        self.control_changes = changes;
        self
    }

    /// [`Access::check`] for the NMOS APIs: a client on a control network
    /// (directly, not through a proxy) reads without the token, and makes
    /// changes without it when the operator opened them.
    pub fn check_nmos(&self, peer: SocketAddr, headers: &HeaderMap, needs: Needs) -> Result<(), Problem> {
        let proxied = ["forwarded", "x-forwarded-for", "x-real-ip"]
            .into_iter()
            .any(|h| headers.contains_key(h));
        let on_control = !proxied && self.control.iter().any(|n| n.contains(peer.ip()));
        match needs {
            Needs::Read if on_control => Ok(()),
            Needs::Change if on_control && self.control_changes => Ok(()),
            _ => self.check(peer, headers, needs),
        }
    }

    /// Whether the request from `peer` with `headers` may do what it `needs`.
    pub fn check(&self, peer: SocketAddr, headers: &HeaderMap, needs: Needs) -> Result<(), Problem> {
        let far = match (needs, self.reads_need_token) {
            (Needs::Read, false) => match not_local(peer, headers) {
                None => return Ok(()),
                Some(why) => Some(why),
            },
            (Needs::Read, true) => None,
            (Needs::Change, _) => None,
        };
        let Some(token) = &self.token else {
            let what = match &far {
                None => "changes over HTTP are off".to_string(),
                Some(why) => format!("{why}: only clients on this host may read without a token"),
            };
            return Err(Problem::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("{what}; start mcrd with --http-token-file FILE and send `Authorization: Bearer TOKEN`"),
            ));
        };
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, t)| t.trim());
        match given {
            None => Err(Problem::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                match (&far, needs) {
                    (_, Needs::Change) => {
                        "a change needs `Authorization: Bearer TOKEN` (the token in --http-token-file)".to_string()
                    }
                    (Some(why), Needs::Read) => format!("{why}: reading needs `Authorization: Bearer TOKEN`"),
                    (None, Needs::Read) => {
                        "reading needs `Authorization: Bearer TOKEN` (--http-reads-need-token)".to_string()
                    }
                },
            )),
            Some(g) if same(g.as_bytes(), token.as_bytes()) => Ok(()),
            Some(_) => Err(Problem::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "the bearer token is not the one in mcrd's --http-token-file",
            )),
        }
    }
}

/// Why a request is not from a client on this host, if it is not: a peer
/// beyond loopback; a request a proxy passed on (it says whom for); or a
/// `Host` that is not this host's, as when a web page elsewhere makes a
/// browser here ask mcrd by a name of its own that points at 127.0.0.1.
fn not_local(peer: SocketAddr, headers: &HeaderMap) -> Option<String> {
    if !(peer.ip().is_loopback() || peer.ip().to_canonical().is_loopback()) {
        return Some(format!("{} is beyond loopback", peer.ip()));
    }
    if let Some(h) = ["forwarded", "x-forwarded-for", "x-real-ip"]
        .into_iter()
        .find(|h| headers.contains_key(*h))
    {
        return Some(format!("the request came through a proxy (it has `{h}`)"));
    }
    match headers.get(header::HOST).map(|h| h.to_str()) {
        Some(Ok(host)) if local_host(host) => None,
        Some(Ok(host)) => Some(format!("Host `{host}` is not a loopback name or an address")),
        _ => Some("the request names no Host".to_string()),
    }
}

/// Whether a `Host` header names this host by address or as `localhost`:
/// a web page elsewhere that makes a browser here ask mcrd (by a name
/// of its own that points at 127.0.0.1) is not let read.
fn local_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => {
            return v6
                .split(']')
                .next()
                .is_some_and(|a| a.parse::<std::net::Ipv6Addr>().is_ok());
        }
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost" || name.ends_with(".localhost") || name.parse::<std::net::IpAddr>().is_ok()
}

/// Compares in time that depends on the length only.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(auth: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, "127.0.0.1:9808".parse().expect("host"));
        if let Some(a) = auth {
            h.insert(header::AUTHORIZATION, a.parse().expect("header"));
        }
        h
    }

    #[test]
    fn a_control_network_reads_nmos_freely_and_changes_only_when_opened() {
        let plant: SocketAddr = "10.10.3.4:4000".parse().expect("addr");
        let other: SocketAddr = "192.0.2.7:4000".parse().expect("addr");
        let nets = vec!["10.10.0.0/16".parse().expect("net")];
        let token = Some("0123456789abcdef".to_string());
        let reads = Access::new(token.clone(), false).with_control_networks(nets.clone(), false);
        assert!(reads.check_nmos(plant, &headers(None), Needs::Read).is_ok());
        let e = reads
            .check_nmos(plant, &headers(None), Needs::Change)
            .expect_err("changes closed");
        assert_eq!(e.status, StatusCode::UNAUTHORIZED);
        assert!(
            reads
                .check_nmos(plant, &headers(Some("Bearer 0123456789abcdef")), Needs::Change)
                .is_ok()
        );
        assert!(
            reads.check_nmos(other, &headers(None), Needs::Read).is_err(),
            "beyond the network"
        );
        assert!(
            reads.check(plant, &headers(None), Needs::Read).is_err(),
            "the other APIs keep the token"
        );
        let mut proxied = headers(None);
        proxied.insert("x-forwarded-for", "10.10.3.4".parse().expect("header"));
        assert!(
            reads.check_nmos(plant, &proxied, Needs::Read).is_err(),
            "through a proxy"
        );
        let open = Access::new(token, false).with_control_networks(nets, true);
        assert!(open.check_nmos(plant, &headers(None), Needs::Change).is_ok());
        assert!(open.check_nmos(other, &headers(None), Needs::Change).is_err());
    }

    #[test]
    fn loopback_reads_and_only_the_token_changes() {
        let lo: SocketAddr = "127.0.0.1:4000".parse().expect("addr");
        let lo6: SocketAddr = "[::ffff:127.0.0.1]:4000".parse().expect("addr");
        let far: SocketAddr = "192.0.2.7:4000".parse().expect("addr");
        let a = Access::new(Some("0123456789abcdef".into()), false);
        assert!(a.check(lo, &headers(None), Needs::Read).is_ok());
        assert!(a.check(lo6, &headers(None), Needs::Read).is_ok());
        let e = a.check(far, &headers(None), Needs::Read).expect_err("far read");
        assert_eq!(e.status, StatusCode::UNAUTHORIZED);
        let e = a.check(lo, &headers(None), Needs::Change).expect_err("no token");
        assert_eq!(e.status, StatusCode::UNAUTHORIZED);
        let e = a
            .check(lo, &headers(Some("Bearer 0123456789abcdeX")), Needs::Change)
            .expect_err("wrong token");
        assert!(e.detail.contains("not the one"), "{}", e.detail);
        assert!(
            a.check(lo, &headers(Some("Bearer 0123456789abcdef")), Needs::Change)
                .is_ok()
        );
        assert!(
            a.check(far, &headers(Some("Bearer 0123456789abcdef")), Needs::Read)
                .is_ok()
        );
        let mut h = headers(None);
        h.insert(header::HOST, "evil.example:9808".parse().expect("host"));
        let e = a.check(lo, &h, Needs::Read).expect_err("rebinding");
        assert_eq!(e.status, StatusCode::UNAUTHORIZED);
        assert!(e.detail.contains("evil.example"), "{}", e.detail);
        h.insert(header::AUTHORIZATION, "bearer 0123456789abcdef".parse().expect("auth"));
        assert!(a.check(lo, &h, Needs::Read).is_ok(), "the token admits a foreign Host");
        let mut proxied = headers(None);
        proxied.insert(header::HOST, "127.0.0.1:9808".parse().expect("host"));
        proxied.insert("x-forwarded-for", "192.0.2.9".parse().expect("xff"));
        let e = a.check(lo, &proxied, Needs::Read).expect_err("proxied");
        assert!(e.detail.contains("proxy"), "{}", e.detail);
        for ok in [
            "localhost:9808",
            "127.0.0.1:9808",
            "[::1]:9808",
            "10.0.0.1",
            "relay.localhost",
        ] {
            h.insert(header::HOST, ok.parse().expect("host"));
            assert!(a.check(lo, &h, Needs::Read).is_ok(), "{ok}");
        }
        let strict = Access::new(Some("0123456789abcdef".into()), true);
        let e = strict
            .check(lo, &headers(None), Needs::Read)
            .expect_err("reads need it");
        assert_eq!(e.status, StatusCode::UNAUTHORIZED);
        assert!(
            strict
                .check(lo, &headers(Some("Bearer 0123456789abcdef")), Needs::Read)
                .is_ok()
        );
        let none = Access::new(None, false);
        let e = none
            .check(lo, &headers(Some("Bearer 0123456789abcdef")), Needs::Change)
            .expect_err("no changes");
        assert_eq!(e.status, StatusCode::FORBIDDEN);
        assert!(e.detail.contains("--http-token-file"), "{}", e.detail);
    }

    #[test]
    fn a_token_file_others_may_read_or_a_short_token_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("mcrd-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let p = dir.join("token");
        std::fs::write(&p, "0123456789abcdef\n").expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let e = read_token(&p).expect_err("world-readable").to_string();
        assert!(
            e.contains("readable or writable by others") && e.contains("chmod 600"),
            "{e}"
        );
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).expect("chmod");
        assert_eq!(read_token(&p).expect("640"), "0123456789abcdef");
        std::fs::write(&p, "short\n").expect("write");
        let e = read_token(&p).expect_err("short").to_string();
        assert!(e.contains("at least 16"), "{e}");
        let e = read_token(&dir.join("absent")).expect_err("absent").to_string();
        assert!(e.contains("No such file"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
