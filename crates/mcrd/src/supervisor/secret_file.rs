//! The files mcrd reads its secrets and certificates from: the HTTP API's
//! token, certificate and key, and etcd's CA, client certificate, key and
//! password. Each is read once, at the start, while mcrd still runs as
//! root, and a file that holds a secret is refused when others on the host
//! may read or write it. Errors name the setting and the file, never what
//! it holds.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// A file that cannot be used, and what to do about it.
#[derive(Debug, thiserror::Error)]
#[error("{setting} {}{why}", path.display())]
pub struct FileError {
    /// The setting that names the file (`--http-token-file`,
    /// `[daemon.etcd] password_file`).
    pub setting: String,
    /// The file.
    pub path: PathBuf,
    /// What is wrong, starting with its separator (`: ...` or ` is ...`).
    pub why: String,
}

fn error(setting: &str, path: &Path, why: String) -> FileError {
    FileError {
        setting: setting.to_string(),
        path: path.to_path_buf(),
        why,
    }
}

fn io(setting: &str, path: &Path) -> impl Fn(std::io::Error) -> FileError {
    move |e| error(setting, path, format!(": {e}"))
}

/// Reads a file that holds a secret: refused when others may read or
/// write it (`exposes` says what they could do with it). The mode checked
/// is the open file's, not whatever the path names later.
pub fn read_private(path: &Path, setting: &str, exposes: &str) -> Result<String, FileError> {
    let mut file = std::fs::File::open(path).map_err(io(setting, path))?;
    private(&file, path, setting, exposes)?;
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(io(setting, path))?;
    Ok(text)
}

fn private(file: &std::fs::File, path: &Path, setting: &str, exposes: &str) -> Result<(), FileError> {
    let mode = file.metadata().map_err(io(setting, path))?.permissions().mode() & 0o777;
    if mode & 0o007 == 0 {
        return Ok(());
    }
    Err(error(
        setting,
        path,
        format!(
            " is readable or writable by others (mode {mode:04o}): {exposes}; `chmod 600 {}` (or 640 with the daemon's group)",
            path.display()
        ),
    ))
}

/// The certificates of a PEM file, in order; refused when it has none.
pub fn certificates(path: &Path, setting: &str) -> Result<Vec<CertificateDer<'static>>, FileError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .and_then(|i| i.collect::<Result<_, _>>())
        .map_err(|e| error(setting, path, format!(": {e}")))?;
    if certs.is_empty() {
        return Err(error(
            setting,
            path,
            ": no certificate in it (PEM, `-----BEGIN CERTIFICATE-----`)".into(),
        ));
    }
    Ok(certs)
}

/// The private key of a PEM file. With `exposes`, refused as
/// [`read_private`] refuses a file others may read.
pub fn private_key(path: &Path, setting: &str, exposes: Option<&str>) -> Result<PrivateKeyDer<'static>, FileError> {
    if let Some(exposes) = exposes {
        let file = std::fs::File::open(path).map_err(io(setting, path))?;
        private(&file, path, setting, exposes)?;
    }
    PrivateKeyDer::from_pem_file(path).map_err(|e| error(setting, path, format!(": {e} (a PEM private key)")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_others_may_read_is_refused_saying_how_to_mend_it() {
        let dir = std::env::temp_dir().join(format!("mcr-secret-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let p = dir.join("password");
        std::fs::write(&p, "s3cret\n").expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let e = read_private(&p, "[daemon.etcd] password_file", "anyone on this host could read it")
            .expect_err("644")
            .to_string();
        assert_eq!(
            e,
            format!(
                "[daemon.etcd] password_file {0} is readable or writable by others (mode 0644): anyone on this host could read it; `chmod 600 {0}` (or 640 with the daemon's group)",
                p.display()
            )
        );
        assert!(!e.contains("s3cret"));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).expect("chmod");
        assert_eq!(read_private(&p, "x", "y").expect("640"), "s3cret\n");
        let e = certificates(&p, "[daemon.etcd] ca_file")
            .expect_err("no PEM")
            .to_string();
        assert!(
            e.ends_with(": no certificate in it (PEM, `-----BEGIN CERTIFICATE-----`)"),
            "{e}"
        );
        assert!(!e.contains("s3cret"));
        let e = private_key(&p, "[daemon.etcd] key_file", None)
            .expect_err("no key")
            .to_string();
        assert!(e.starts_with("[daemon.etcd] key_file "), "{e}");
        assert!(e.ends_with("(a PEM private key)"), "{e}");
        let e = read_private(&dir.join("absent"), "s", "x")
            .expect_err("absent")
            .to_string();
        assert!(e.contains("No such file"), "{e}");
        std::fs::remove_dir_all(&dir).expect("clean");
    }
}
