//! The config file: read and checked (at the start and for every reload,
//! `SIGHUP` or `mcrctl reload`), and saved (`mcrctl save`).
//!
//! A reload reads and checks the whole file first; a file that does not
//! read, parse or check changes nothing and the error says where it is.
//! Then the plane applies only the difference, as one new table
//! ([`mcr_core::plane::machine`]): rules that did not change keep their
//! slots, counters and memberships, and the workers leave their streams
//! alone.

use std::io::Write;
use std::path::{Path, PathBuf};

use mcr_core::config::Config;
use mcr_core::control::{ControlError, ErrorKind, Reply};

use mcr_core::plane::machine::Plane;

use super::links::interfaces;

/// Reads and checks the config file at `path` against the host's
/// interfaces: the daemon's start and every reload go through here.
pub fn load(path: &Path) -> Result<Config, ControlError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| ControlError::new(ErrorKind::InvalidConfig, format!("cannot read {shown}: {e}")))?;
    let bad = |e: mcr_core::config::ConfigError| ControlError::new(ErrorKind::InvalidConfig, e.in_file(&shown));
    let config = Config::parse(&text).map_err(bad)?;
    config.check(&text, &interfaces()).map_err(bad)?;
    Ok(config)
}

/// Writes `text` to `path` so that a reader sees the old file or the new
/// one, never a part: a temporary file in the same directory, written and
/// synced, renamed over `path`, and the directory synced. The file keeps
/// the mode of the one it replaces (0640 for a new one).
pub fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "the path names no file"))?;
    let tmp = dir.join(format!(".{}.{}.tmp", name.to_string_lossy(), std::process::id()));
    // The mode of the file replaced, if it is one (not of what a link
    // points to).
    let mode = std::fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.is_file())
        .map_or(0o640, |m| m.permissions().mode() & 0o7777);
    // The temporary file is new, or nothing is written: whatever is in the
    // way (a link planted there, a file left by a crash) is neither
    // followed nor overwritten.
    let mut f = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(mode)
        .open(&tmp)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(std::io::Error::new(
                e.kind(),
                format!("{} is in the way; remove it if it is not yours", tmp.display()),
            ));
        }
        Err(e) => return Err(e),
    };
    let written = (|| {
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(&dir)?.sync_all()
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// The running rules, with the `[daemon]` settings of the config file, as
/// the text of a config file; and how many rules.
fn render<R>(plane: &Plane<R>) -> Result<(String, usize), String> {
    // The store's rules are the store's: the file keeps its own.
    let rules = plane.own_rules();
    Config::render(plane.settings(), &rules)
        .map(|t| (t, rules.len()))
        .map_err(|e| e.to_string())
}

/// Answers `config`: what `save` would write.
pub fn text<R>(plane: &Plane<R>) -> Reply {
    match render(plane) {
        Ok((text, rules)) => Reply::Config { text, rules },
        Err(e) => error(ErrorKind::Internal, e),
    }
}

/// Writes the running rules, with the `[daemon]` settings of the config
/// file, to `to` or to the config file: only ever in the config file's
/// directory.
pub fn save<R>(plane: &Plane<R>, to: Option<PathBuf>) -> Reply {
    let Some(config) = plane.config_path() else {
        return error(
            ErrorKind::InvalidConfig,
            "mcrd was started without a config file, so it has nowhere to save (it writes only in \
                 its config file's directory): `mcrctl save --print > FILE` writes the rules yourself",
        );
    };
    let path = to.unwrap_or_else(|| config.to_path_buf());
    let target = match save_target(&path, config) {
        Ok(p) => p,
        Err(message) => return error(ErrorKind::BadRequest, message),
    };
    let (text, rules) = match render(plane) {
        Ok(r) => r,
        Err(e) => return error(ErrorKind::Internal, e),
    };
    match write_atomically(&target, &text) {
        Ok(()) => {
            tracing::info!("saved {rules} rule(s) to {}", path.display());
            Reply::Saved { path, rules }
        }
        Err(e) => error(ErrorKind::Internal, format!("could not write {}: {e}", path.display())),
    }
}

/// Where `save` writes when asked for `to`: a file directly in the
/// directory of the config file (both with every symbolic link resolved),
/// since the daemon may run as root and its control group must not make it
/// write anywhere else. Returns the path to write, in that directory as
/// resolved, or what to say.
pub fn save_target(to: &Path, config: &Path) -> Result<PathBuf, String> {
    if !to.is_absolute() {
        return Err(format!(
            "{}: give an absolute path (the daemon's directory is not yours)",
            to.display()
        ));
    }
    let dir_of = |p: &Path| match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let allowed = dir_of(config)
        .canonicalize()
        .map_err(|e| format!("{}: {e}", dir_of(config).display()))?;
    let name = match to.file_name() {
        Some(n) if to.to_str().is_none_or(|t| !t.ends_with('/')) => n,
        _ => return Err(format!("{}: names no file", to.display())),
    };
    let outside = || {
        format!(
            "{}: mcrd saves only in {}, the directory of its config file (`mcrctl save --print > FILE` \
             writes a copy anywhere you may write)",
            to.display(),
            allowed.display()
        )
    };
    match dir_of(to).canonicalize() {
        Ok(dir) if dir == allowed => Ok(dir.join(name)),
        Ok(_) => Err(outside()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(outside()),
        Err(e) => Err(format!("{}: {e}", dir_of(to).display())),
    }
}

fn error(kind: ErrorKind, message: impl Into<String>) -> Reply {
    Reply::Error {
        error: ControlError::new(kind, message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_atomic_write_replaces_the_file_and_keeps_its_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("mcrd-save-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("mcrd.toml");
        write_atomically(&path, "one\n").expect("first");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "one\n");
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o640);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        write_atomically(&path, "two\n").expect("second");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "two\n");
        assert_eq!(mode(&path), 0o600);
        let left: Vec<_> = std::fs::read_dir(&dir).expect("ls").filter_map(Result::ok).collect();
        assert_eq!(left.len(), 1, "no temporary file is left behind");
        assert!(write_atomically(&dir.join("no/such/dir/x.toml"), "x").is_err());
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
