//! An etcd member's client URL as a user writes it, `http://HOST:PORT` or
//! `https://HOST:PORT`.

/// The port etcd serves clients on unless told otherwise.
pub const DEFAULT_PORT: u16 = 2379;

/// An etcd member to talk to over HTTP/1.1, plain or in TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `https://`: TLS.
    pub tls: bool,
    /// The URL, as given but without a trailing `/`: how messages name it.
    pub url: String,
    /// The host name or address (an IPv6 address without its brackets).
    pub host: String,
    /// The TCP port.
    pub port: u16,
    /// `HOST:PORT` as the `Host` header carries it.
    pub authority: String,
}

/// An endpoint that cannot be used; says what to write instead.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EndpointError {
    /// Not of the form `http(s)://HOST:PORT`.
    #[error(
        "etcd endpoint `{endpoint}`: {why}; write it as http://HOST:PORT or https://HOST:PORT, e.g. https://127.0.0.1:2379"
    )]
    Malformed {
        /// The endpoint as given.
        endpoint: String,
        /// What is wrong with it.
        why: String,
    },
}

impl Endpoint {
    /// Reads `http://HOST[:PORT][/]` or `https://...` (the port defaults
    /// to 2379; an IPv6 address goes in brackets).
    pub fn parse(text: &str) -> Result<Endpoint, EndpointError> {
        let bad = |why: &str| EndpointError::Malformed {
            endpoint: text.to_string(),
            why: why.to_string(),
        };
        let lower = text.to_ascii_lowercase();
        let scheme = if lower.starts_with("https://") {
            "https"
        } else if lower.starts_with("http://") {
            "http"
        } else {
            return Err(bad("it does not start with http:// or https://"));
        };
        let rest = &text[scheme.len() + "://".len()..];
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains(['/', '?', '#']) {
            return Err(bad("it has a path; etcd's API is at the server's root"));
        }
        if authority.contains('@') {
            return Err(bad(
                "it has a user name; give etcd's user as `user` and its password in `password_file` of [daemon.etcd]",
            ));
        }
        let (host, port) = split_host_port(authority).map_err(bad)?;
        if host.is_empty() {
            return Err(bad("it has no host"));
        }
        if !host.chars().all(|c| c.is_ascii_alphanumeric() || "-._:".contains(c)) {
            return Err(bad("its host has a character no host name or address has"));
        }
        let port = match port {
            None => DEFAULT_PORT,
            Some(p) => match p.parse::<u16>() {
                Ok(p) if p != 0 => p,
                _ => return Err(bad("its port is not a number from 1 to 65535")),
            },
        };
        let authority = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        Ok(Endpoint {
            tls: scheme == "https",
            url: format!("{scheme}://{authority}"),
            host: host.to_string(),
            port,
            authority,
        })
    }
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`.
fn split_host_port(authority: &str) -> Result<(&str, Option<&str>), &'static str> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or("its IPv6 address has no closing `]`")?;
        return match after {
            "" => Ok((host, None)),
            _ => after
                .strip_prefix(':')
                .map(|p| (host, Some(p)))
                .ok_or("something other than :PORT follows its IPv6 address"),
        };
    }
    match authority.split_once(':') {
        None => Ok((authority, None)),
        Some((_, p)) if p.contains(':') => Err("an IPv6 address goes in brackets, as in https://[::1]:2379"),
        Some((h, p)) => Ok((h, Some(p))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_host_and_port() {
        let e = Endpoint::parse("http://127.0.0.1:2379").expect("parse");
        assert_eq!((e.host.as_str(), e.port), ("127.0.0.1", 2379));
        assert_eq!(e.url, "http://127.0.0.1:2379");
        let e = Endpoint::parse("HTTP://etcd-1.example:12379/").expect("parse");
        assert_eq!((e.host.as_str(), e.port), ("etcd-1.example", 12379));
        assert_eq!(e.authority, "etcd-1.example:12379");
        let e = Endpoint::parse("http://[fd00::1]:2379").expect("parse");
        assert_eq!((e.host.as_str(), e.port), ("fd00::1", 2379));
        assert_eq!(e.url, "http://[fd00::1]:2379");
        let e = Endpoint::parse("http://etcd").expect("parse");
        assert_eq!(e.port, DEFAULT_PORT);
        assert_eq!(Endpoint::parse("http://[::1]").expect("parse").authority, "[::1]:2379");
    }

    #[test]
    fn reads_tls_endpoints() {
        let e = Endpoint::parse("HTTPS://etcd-1.example:2379/").expect("parse");
        assert!(e.tls);
        assert_eq!(e.url, "https://etcd-1.example:2379");
        assert_eq!(e.authority, "etcd-1.example:2379");
        let e = Endpoint::parse("https://[::1]").expect("parse");
        assert_eq!(
            (e.url.as_str(), e.host.as_str(), e.tls),
            ("https://[::1]:2379", "::1", true)
        );
        assert!(!Endpoint::parse("http://etcd").expect("parse").tls);
    }

    #[test]
    fn refuses_what_is_not_http_host_port() {
        for (text, says) in [
            ("etcd:2379", "does not start with http:// or https://"),
            ("grpc://etcd:2379", "does not start with http:// or https://"),
            ("https://etcd:2379/v3", "has a path"),
            ("http://etcd:2379/v3", "has a path"),
            ("http://user@etcd:2379", "user name"),
            ("http://:2379", "no host"),
            ("http://etcd:0", "port"),
            ("http://etcd:65536", "port"),
            ("http://etcd:x", "port"),
            ("http://fd00::1:2379", "brackets"),
            ("http://[fd00::1", "closing"),
            ("http://[fd00::1]x", "other than :PORT"),
            ("http://et cd:2379", "character"),
        ] {
            let e = Endpoint::parse(text).expect_err(text).to_string();
            assert!(e.contains(says), "{text}: {e}");
            assert!(e.contains("http://HOST:PORT or https://HOST:PORT"), "{text}: {e}");
        }
    }
}
