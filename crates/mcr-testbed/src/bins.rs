//! Finding the workspace's own binaries (`mcrgen`, `mcrd`, ...) from a test
//! or a benchmark.

use std::path::PathBuf;

use crate::{Error, Result};

/// The path of workspace binary `name`: in `$MCR_BIN_DIR` if set, otherwise
/// beside the running executable (for a test, the profile directory above
/// `deps/`).
pub fn bin(name: &str) -> Result<PathBuf> {
    let path = bin_dir()?.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::MissingBinary {
            name: name.to_string(),
            path: path.display().to_string(),
        })
    }
}

/// The directory [`bin`] looks in.
pub(crate) fn bin_dir() -> Result<PathBuf> {
    let dir = match std::env::var_os("MCR_BIN_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            let exe = std::env::current_exe().map_err(|source| Error::Io {
                what: "find the running executable".into(),
                source,
            })?;
            let mut dir = exe.parent().map(PathBuf::from).unwrap_or_default();
            if dir.ends_with("deps") {
                dir.pop();
            }
            dir
        }
    };
    Ok(dir)
}
