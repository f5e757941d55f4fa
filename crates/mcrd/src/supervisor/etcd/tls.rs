//! TLS to etcd: the server's certificate checked against the CA of
//! `ca_file` and the endpoint's host, and the relay's own certificate
//! (`cert_file`, `key_file`) given when etcd asks for one.
//!
//! The host is checked against the certificate's subjectAltName only (a
//! DNS name for a host name, an IP address for an address), never its
//! Common Name, as browsers and Go do. Sessions are never resumed, so every
//! connection checks the certificate in full.

use std::error::Error as StdError;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::client::Resumption;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::{self, AlertDescription, CertificateError, ClientConfig, RootCertStore};

use super::EtcdError;
use crate::supervisor::secret_file;

/// The relay's side of TLS to etcd.
#[derive(Clone)]
pub struct Tls {
    connector: TlsConnector,
    ca_file: PathBuf,
    cert_file: Option<PathBuf>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("ca_file", &self.ca_file)
            .field("cert_file", &self.cert_file)
            .finish_non_exhaustive()
    }
}

impl Tls {
    /// Reads the CA and, when given, the client certificate and its key
    /// (refused when others may read the key).
    pub fn load(ca_file: &Path, client: Option<(&Path, &Path)>) -> Result<Tls, EtcdError> {
        let mut roots = RootCertStore::empty();
        for cert in secret_file::certificates(ca_file, "[daemon.etcd] ca_file")? {
            roots.add(cert).map_err(|e| {
                EtcdError::Tls(format!(
                    "[daemon.etcd] ca_file {}: not a CA certificate mcrd can use: {e}",
                    ca_file.display()
                ))
            })?;
        }
        let builder = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| EtcdError::Tls(format!("TLS: {e}")))?
            .with_root_certificates(roots);
        let mut config = match client {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = secret_file::certificates(cert, "[daemon.etcd] cert_file")?;
                let key = secret_file::private_key(
                    key,
                    "[daemon.etcd] key_file",
                    Some("anyone on this host could act as the relay towards etcd"),
                )?;
                builder.with_client_auth_cert(chain, key).map_err(|e| {
                    EtcdError::Tls(format!(
                        "[daemon.etcd] key_file {} and cert_file {} do not make a TLS identity: {e}",
                        key_path(client),
                        cert.display()
                    ))
                })?
            }
        };
        config.resumption = Resumption::disabled();
        Ok(Tls {
            connector: TlsConnector::from(Arc::new(config)),
            ca_file: ca_file.to_path_buf(),
            cert_file: client.map(|(c, _)| c.to_path_buf()),
        })
    }

    /// TLS over `tcp` to `host` (a name or an address, checked against
    /// the certificate).
    pub async fn connect(&self, host: &str, tcp: TcpStream) -> Result<TlsStream<TcpStream>, String> {
        let name = ServerName::try_from(host.to_string())
            .map_err(|e| format!("`{host}` cannot be checked against a certificate: {e}"))?;
        self.connector
            .connect(name, tcp)
            .await
            .map_err(|e| self.reason(host, &e).unwrap_or_else(|| format!("TLS handshake: {e}")))
    }

    /// What a TLS failure somewhere in `e`'s chain means to an operator,
    /// or `None` when there is none in it.
    pub fn reason(&self, host: &str, e: &(dyn StdError + 'static)) -> Option<String> {
        let tls = rustls_error(e)?;
        let ca = self.ca_file.display();
        Some(match tls {
            rustls::Error::InvalidCertificate(c) => match c {
                CertificateError::UnknownIssuer => format!(
                    "etcd's server certificate is not signed by the CA in ca_file {ca} (unknown issuer); give the CA that issued etcd's certificates"
                ),
                CertificateError::NotValidForName => format!(
                    "etcd's server certificate is not valid for {host} (mcrd checks the endpoint's host against the certificate's subjectAltName, never its CN)"
                ),
                CertificateError::NotValidForNameContext { presented, .. } => format!(
                    "etcd's server certificate is not valid for {host}: it names {} (mcrd checks the endpoint's host against the certificate's subjectAltName, never its CN)",
                    names(presented)
                ),
                CertificateError::Expired => "etcd's server certificate has expired".to_string(),
                CertificateError::ExpiredContext { time, not_after } => format!(
                    "etcd's server certificate expired {} s ago",
                    time.as_secs().saturating_sub(not_after.as_secs())
                ),
                CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                    "etcd's server certificate is not valid yet (is this host's clock right?)".to_string()
                }
                CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => {
                    "etcd's server certificate is not for a TLS server (extendedKeyUsage lacks serverAuth)".to_string()
                }
                other => format!("etcd's server certificate is refused: {other:?}"),
            },
            rustls::Error::AlertReceived(
                alert @ (AlertDescription::BadCertificate
                | AlertDescription::CertificateRequired
                | AlertDescription::UnknownCA
                | AlertDescription::CertificateUnknown
                | AlertDescription::UnsupportedCertificate
                | AlertDescription::CertificateExpired),
            ) => match &self.cert_file {
                None => format!(
                    "etcd requires a client certificate and mcrd gives none (TLS alert {}); set cert_file and key_file in [daemon.etcd]",
                    alert_name(*alert)
                ),
                Some(cert) => format!(
                    "etcd refused the client certificate cert_file {} (TLS alert {}): not signed by a CA in etcd's --trusted-ca-file, expired, or without the clientAuth key usage",
                    cert.display(),
                    alert_name(*alert)
                ),
            },
            rustls::Error::AlertReceived(alert) => {
                format!("etcd ended TLS (alert {})", alert_name(*alert))
            }
            rustls::Error::InvalidMessage(_) => {
                "what came back is not TLS; if etcd serves plain HTTP there, write http://".to_string()
            }
            other => format!("TLS: {other}"),
        })
    }
}

/// The key's path as given, for a message.
fn key_path(client: Option<(&Path, &Path)>) -> String {
    client.map(|(_, k)| k.display().to_string()).unwrap_or_default()
}

/// The first rustls error in `e`'s chain, looking inside I/O errors too
/// (whose `source()` skips the error they wrap).
pub fn rustls_error<'a>(e: &'a (dyn StdError + 'static)) -> Option<&'a rustls::Error> {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(r) = err.downcast_ref::<rustls::Error>() {
            return Some(r);
        }
        if let Some(inner) = err.downcast_ref::<std::io::Error>().and_then(std::io::Error::get_ref)
            && let Some(r) = inner.downcast_ref::<rustls::Error>()
        {
            return Some(r);
        }
        next = err.source();
    }
    None
}

/// `DnsName("x")`, `IpAddress(V4(..))` as an operator writes them:
/// `DNS:x`, `IP:1.2.3.4`.
fn names(presented: &[String]) -> String {
    if presented.is_empty() {
        return "no name".into();
    }
    presented
        .iter()
        .map(|p| {
            let inner = |s: &str| s.trim_matches(|c| c == '"' || c == '(' || c == ')').to_string();
            if let Some(rest) = p.strip_prefix("DnsName") {
                format!("DNS:{}", inner(rest))
            } else if let Some(rest) = p.strip_prefix("IpAddress") {
                format!("IP:{}", inner(rest))
            } else {
                p.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn alert_name(a: AlertDescription) -> String {
    let text = format!("{a:?}");
    // BadCertificate -> bad_certificate, as the TLS specification names it.
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_rustls::rustls::pki_types::UnixTime;

    fn tls(cert: Option<&str>) -> Tls {
        let config = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(RootCertStore::empty())
            .with_no_client_auth();
        Tls {
            connector: TlsConnector::from(Arc::new(config)),
            ca_file: "/etc/mcr/etcd-ca.pem".into(),
            cert_file: cert.map(PathBuf::from),
        }
    }

    fn say(t: &Tls, e: rustls::Error) -> String {
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, e);
        t.reason("127.0.1.1", &io).expect("a TLS error")
    }

    #[test]
    fn each_refusal_says_what_to_mend() {
        let t = tls(None);
        assert_eq!(
            say(&t, rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)),
            "etcd's server certificate is not signed by the CA in ca_file /etc/mcr/etcd-ca.pem (unknown issuer); give the CA that issued etcd's certificates"
        );
        let wrong_host = CertificateError::NotValidForNameContext {
            expected: ServerName::try_from("127.0.1.1").expect("name"),
            presented: vec!["IpAddress(127.0.0.1)".into(), "DnsName(\"localhost\")".into()],
        };
        assert_eq!(
            say(&t, rustls::Error::InvalidCertificate(wrong_host)),
            "etcd's server certificate is not valid for 127.0.1.1: it names IP:127.0.0.1, DNS:localhost (mcrd checks the endpoint's host against the certificate's subjectAltName, never its CN)"
        );
        let expired = CertificateError::ExpiredContext {
            time: UnixTime::since_unix_epoch(std::time::Duration::from_secs(10_000)),
            not_after: UnixTime::since_unix_epoch(std::time::Duration::from_secs(6_400)),
        };
        assert_eq!(
            say(&t, rustls::Error::InvalidCertificate(expired)),
            "etcd's server certificate expired 3600 s ago"
        );
        assert_eq!(
            say(&t, rustls::Error::AlertReceived(AlertDescription::BadCertificate)),
            "etcd requires a client certificate and mcrd gives none (TLS alert bad_certificate); set cert_file and key_file in [daemon.etcd]"
        );
        assert_eq!(
            say(
                &tls(Some("/etc/mcr/etcd-client.pem")),
                rustls::Error::AlertReceived(AlertDescription::CertificateRequired)
            ),
            "etcd refused the client certificate cert_file /etc/mcr/etcd-client.pem (TLS alert certificate_required): not signed by a CA in etcd's --trusted-ca-file, expired, or without the clientAuth key usage"
        );
        let plain = std::io::Error::other("connection reset");
        assert_eq!(t.reason("h", &plain), None);
    }
}
