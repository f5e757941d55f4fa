//! A directory for one test's files, removed when dropped (even when the
//! test fails).

use std::path::{Path, PathBuf};

/// A fresh directory under the system's temporary directory, named after
/// what it is for and this process, removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates `mcr-WHAT-PID` afresh (removing a leftover one).
    pub fn new(what: &str) -> std::io::Result<TempDir> {
        let path = std::env::temp_dir().join(format!("mcr-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)?;
        Ok(TempDir(path))
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `text` to the file `name` in it and returns the file's path.
    pub fn file(&self, name: &str, text: &str) -> std::io::Result<PathBuf> {
        let p = self.0.join(name);
        std::fs::write(&p, text)?;
        Ok(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
