//! What the etcd store gave last, kept on disk (`[daemon.etcd] cache`):
//! written (atomically, at most once a second) after each update that
//! changed it, and read at the start, so that a relay that starts while
//! etcd cannot be reached forwards the store's rules until etcd answers
//! (then only the difference is applied).

use std::path::Path;

use mcr_core::plane::store::Entries;
use serde::{Deserialize, Serialize};

/// The file's content.
#[derive(Debug, Serialize, Deserialize)]
struct Cache {
    /// The prefix the keys are under: a cache of another prefix is not
    /// used.
    prefix: String,
    /// The store's revision when it was written.
    revision: i64,
    /// Each key (after the prefix) and its value.
    entries: Vec<(String, String)>,
}

/// Writes the cache of `prefix` at `revision`.
pub fn write(path: &Path, prefix: &str, revision: i64, entries: &Entries) -> std::io::Result<()> {
    let cache = Cache {
        prefix: prefix.to_string(),
        revision,
        // Only values that parsed as rules are kept: they are UTF-8.
        entries: entries
            .iter()
            .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned()))
            .collect(),
    };
    let text = serde_json::to_string(&cache).map_err(std::io::Error::other)?;
    super::config_file::write_atomically(path, &text)
}

/// Reads the cache of `prefix`: its revision and entries; none when there
/// is no file; an error that says why when it cannot be used.
pub fn read(path: &Path, prefix: &str) -> Result<Option<(i64, Entries)>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let cache: Cache =
        serde_json::from_str(&text).map_err(|e| format!("{} is not an etcd cache: {e}", path.display()))?;
    if cache.prefix != prefix {
        return Err(format!(
            "{} holds the rules of prefix {}, not {prefix}",
            path.display(),
            cache.prefix
        ));
    }
    let entries = cache.entries.into_iter().map(|(k, v)| (k, v.into_bytes())).collect();
    Ok(Some((cache.revision, entries)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_reads_back_for_its_prefix_only() {
        let dir = std::env::temp_dir().join(format!("mcrd-cache-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("etcd-cache.json");
        assert_eq!(read(&path, "/p/"), Ok(None), "no file yet");
        let entries = vec![("a".to_string(), b"input = \"x\"\n".to_vec())];
        write(&path, "/p/", 42, &entries).expect("write");
        assert_eq!(read(&path, "/p/"), Ok(Some((42, entries))));
        let other = read(&path, "/q/").expect_err("another prefix");
        assert!(other.contains("holds the rules of prefix /p/, not /q/"), "{other}");
        std::fs::write(&path, "{").expect("break it");
        assert!(read(&path, "/p/").expect_err("broken").contains("is not an etcd cache"));
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
