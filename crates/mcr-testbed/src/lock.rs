//! One traffic test at a time on this machine.
//!
//! Tests that measure loss share two cores with everything else; running two
//! of them at once would make each the other's noise. A test that sends
//! traffic holds a [`TrafficLock`]: an exclusive `flock` on a file that all
//! test processes share (whether run by `cargo test` or `cargo nextest`).

use std::fs::{File, OpenOptions};

use crate::{Error, Result};

const LOCK_PATH: &str = "/run/mcr-testbed.traffic.lock";

/// Held while a test sends traffic; released on drop.
#[derive(Debug)]
pub struct TrafficLock {
    _file: File,
}

/// Waits until no other test on this machine sends traffic, then holds the
/// lock until the returned guard is dropped.
pub fn traffic_lock() -> Result<TrafficLock> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(LOCK_PATH)
        .map_err(|source| Error::Io {
            what: format!("open {LOCK_PATH}"),
            source,
        })?;
    file.lock().map_err(|source| Error::Io {
        what: format!("lock {LOCK_PATH}"),
        source,
    })?;
    Ok(TrafficLock { _file: file })
}
