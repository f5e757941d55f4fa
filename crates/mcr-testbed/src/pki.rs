//! A throw-away certificate authority for tests of TLS: a CA, server
//! certificates and client certificates, made with the `openssl` command
//! (OpenSSL 3) in a directory the test owns. Every key is EC P-256, without
//! a passphrase, mode 0600; every certificate is valid for a year.
//!
//! Each certificate is made in two steps, `openssl req -new` (a request
//! carrying the subject) then `openssl x509 -req` (signed, with the
//! extensions from a file), so nothing depends on the machine's
//! `openssl.cnf` beyond what `req` always reads. A client certificate
//! without a common name has an empty subject (`-subj /`) and, as RFC 5280
//! asks of such a certificate, a critical subjectAltName.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Error, Result, command};

/// How long a certificate is valid.
const DAYS: &str = "365";

/// A certificate authority whose files live in `dir`, named after `name`.
#[derive(Debug, Clone)]
pub struct Pki {
    dir: PathBuf,
    name: String,
}

impl Pki {
    /// A new CA (self-signed, basicConstraints CA:TRUE, keyUsage
    /// keyCertSign,cRLSign, CN `{name} test CA`), with its files
    /// `{dir}/{name}-ca.pem` and `{dir}/{name}-ca.key`, replacing any there.
    pub fn new(dir: &Path, name: &str) -> Result<Pki> {
        let pki = Pki {
            dir: dir.to_path_buf(),
            name: name.to_string(),
        };
        pki.issue(
            "ca",
            &format!("/CN={name} test CA"),
            "basicConstraints = critical, CA:TRUE\nkeyUsage = critical, keyCertSign, cRLSign\n",
            true,
        )?;
        Ok(pki)
    }

    /// The CA's certificate, `{dir}/{name}-ca.pem`.
    pub fn ca(&self) -> PathBuf {
        self.path("ca", "pem")
    }

    /// A server certificate signed by this CA: CN `etcd-server`,
    /// subjectAltName from `sans` (e.g. `["IP:127.0.0.1", "DNS:localhost"]`),
    /// extendedKeyUsage serverAuth,clientAuth (etcd's gateway presents its
    /// server certificate as a client one). Returns its certificate and key,
    /// `{dir}/{name}-{file}.pem` and `.key`.
    pub fn server(&self, file: &str, sans: &[&str]) -> Result<(PathBuf, PathBuf)> {
        let mut ext = String::from(
            "basicConstraints = critical, CA:FALSE\nkeyUsage = critical, digitalSignature\nextendedKeyUsage = serverAuth, clientAuth\n",
        );
        if !sans.is_empty() {
            ext.push_str(&format!("subjectAltName = {}\n", sans.join(", ")));
        }
        self.issue(file, "/CN=etcd-server", &ext, false)
    }

    /// A client certificate signed by this CA: extendedKeyUsage clientAuth,
    /// subjectAltName `DNS:mcr-relay`, and an empty subject unless `cn` is
    /// given (etcd's gateway refuses a client certificate with a common name
    /// while its authentication is on). Returns its certificate and key,
    /// `{dir}/{name}-{file}.pem` and `.key` (mode 0600).
    pub fn client(&self, file: &str, cn: Option<&str>) -> Result<(PathBuf, PathBuf)> {
        let (subject, san) = match cn {
            Some(cn) => (format!("/CN={cn}"), "subjectAltName = DNS:mcr-relay"),
            // RFC 5280 4.2.1.6: with an empty subject the SAN is critical.
            None => ("/".to_string(), "subjectAltName = critical, DNS:mcr-relay"),
        };
        let ext = format!(
            "basicConstraints = critical, CA:FALSE\nkeyUsage = critical, digitalSignature\nextendedKeyUsage = clientAuth\n{san}\n"
        );
        self.issue(file, &subject, &ext, false)
    }

    /// `{dir}/{name}-{file}.{ext}`.
    fn path(&self, file: &str, ext: &str) -> PathBuf {
        self.dir.join(format!("{}-{file}.{ext}", self.name))
    }

    /// Makes a key and a certificate for `subject` with the extensions
    /// `ext` (an `openssl x509 -extfile`), signed by this CA, or by its own
    /// key when `self_signed`; checks that `openssl x509` reads it back.
    fn issue(&self, file: &str, subject: &str, ext: &str, self_signed: bool) -> Result<(PathBuf, PathBuf)> {
        let (cert, key) = (self.path(file, "pem"), self.path(file, "key"));
        let (csr, ext_file) = (self.path(file, "csr"), self.path(file, "ext"));
        write(&ext_file, ext)?;
        let _ = std::fs::remove_file(&key);
        openssl(
            &[
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-out",
            ],
            &[&key],
        )?;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).map_err(|source| Error::Io {
            what: format!("make {} private", key.display()),
            source,
        })?;
        command::run(
            Command::new("openssl")
                .args(["req", "-new", "-subj", subject, "-key"])
                .arg(&key)
                .arg("-out")
                .arg(&csr),
        )?;
        let mut sign = Command::new("openssl");
        sign.args(["x509", "-req", "-sha256", "-days", DAYS, "-in"])
            .arg(&csr)
            .arg("-extfile")
            .arg(&ext_file)
            .arg("-out")
            .arg(&cert);
        if self_signed {
            sign.arg("-signkey").arg(&key);
        } else {
            // No -CAserial: OpenSSL 3 then picks a random serial number.
            sign.arg("-CA").arg(self.ca()).arg("-CAkey").arg(self.path("ca", "key"));
        }
        command::run(&mut sign)?;
        let _ = std::fs::remove_file(&csr);
        let _ = std::fs::remove_file(&ext_file);
        openssl(&["x509", "-noout", "-text", "-in"], &[&cert])?;
        Ok((cert, key))
    }
}

/// `openssl ARGS... PATHS...`; its stdout.
fn openssl(args: &[&str], paths: &[&Path]) -> Result<String> {
    command::run(Command::new("openssl").args(args).args(paths))
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|source| Error::Io {
        what: format!("write {}", path.display()),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TempDir;

    fn verify(ca: &Path, cert: &Path) -> Result<String> {
        openssl(&["verify", "-CAfile"], &[ca, cert])
    }

    fn text(cert: &Path) -> String {
        openssl(&["x509", "-noout", "-text", "-in"], &[cert]).expect("openssl x509")
    }

    #[test]
    fn certificates_verify_against_their_own_ca_only() {
        let dir = TempDir::new("pki-unit").expect("dir");
        let pki = Pki::new(dir.path(), "a").expect("CA");
        assert_eq!(pki.ca(), dir.path().join("a-ca.pem"));
        let ca = text(&pki.ca());
        assert!(
            ca.contains("CA:TRUE") && ca.contains("Certificate Sign, CRL Sign"),
            "{ca}"
        );

        let (server, server_key) = pki
            .server("server", &["IP:127.0.0.1", "DNS:localhost"])
            .expect("server");
        assert_eq!(server, dir.path().join("a-server.pem"));
        assert_eq!(server_key, dir.path().join("a-server.key"));
        verify(&pki.ca(), &server).expect("server verifies");
        let s = text(&server);
        assert!(s.contains("Subject: CN = etcd-server"), "{s}");
        assert!(s.contains("IP Address:127.0.0.1, DNS:localhost"), "{s}");
        assert!(
            s.contains("TLS Web Server Authentication, TLS Web Client Authentication"),
            "{s}"
        );

        let (client, client_key) = pki.client("client", None).expect("client");
        verify(&pki.ca(), &client).expect("client verifies");
        let c = text(&client);
        let subject_line = c.lines().find(|l| l.trim_start().starts_with("Subject:"));
        assert_eq!(
            subject_line.map(str::trim),
            Some("Subject:"),
            "the client has no CN:\n{c}"
        );
        let subject = openssl(&["x509", "-noout", "-subject", "-in"], &[&client]).expect("subject");
        assert_eq!(subject.trim(), "subject=");
        assert!(
            c.contains("DNS:mcr-relay") && c.contains("TLS Web Client Authentication"),
            "{c}"
        );
        assert!(!c.contains("Server Authentication"), "{c}");
        let mode = std::fs::metadata(&client_key).expect("key").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);

        let (named, _) = pki.client("named", Some("mcr")).expect("named client");
        verify(&pki.ca(), &named).expect("named client verifies");
        assert!(text(&named).contains("Subject: CN = mcr"));

        let other = Pki::new(dir.path(), "b").expect("other CA");
        let (stranger, _) = other.client("client", None).expect("other client");
        verify(&other.ca(), &stranger).expect("verifies against its own CA");
        assert!(
            verify(&pki.ca(), &stranger).is_err(),
            "b's certificate must not verify against a's CA"
        );
        assert!(
            verify(&other.ca(), &server).is_err(),
            "a's certificate must not verify against b's CA"
        );
    }
}
