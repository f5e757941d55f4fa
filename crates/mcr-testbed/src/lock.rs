//! One traffic test at a time on this machine.
//!
//! Tests that measure loss share two cores with everything else; running two
//! of them at once would make each the other's noise. A test that sends
//! traffic holds a [`TrafficLock`]: an exclusive `flock` on a file that all
//! test processes share (whether run by `cargo test` or `cargo nextest`).

//!
//! Each test's wait for the lock and its time holding it are appended to
//! [`TIMES_PATH`] (test name, seconds waited, seconds held), so that a slow
//! suite shows which traffic tests take the time, not the wait for each
//! other that the runner's own times include.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::time::Instant;

use crate::{Error, Result};

const LOCK_PATH: &str = "/run/mcr-testbed.traffic.lock";
/// Where each traffic test's wait and hold times go, a line per test.
pub const TIMES_PATH: &str = "/run/mcr-testbed.traffic-times.tsv";

/// Held while a test sends traffic; released on drop.
#[derive(Debug)]
pub struct TrafficLock {
    _file: File,
    asked: Instant,
    got: Instant,
}

impl Drop for TrafficLock {
    fn drop(&mut self) {
        let name = std::thread::current().name().unwrap_or("?").to_string();
        let line = format!(
            "{name}\t{:.1}\t{:.1}\n",
            (self.got - self.asked).as_secs_f64(),
            self.got.elapsed().as_secs_f64()
        );
        // Best effort: a test's result never depends on this record.
        if let Ok(mut f) = OpenOptions::new().create(true).append(true).open(TIMES_PATH) {
            let _ = f.write_all(line.as_bytes());
        }
    }
}

/// Waits until no other test on this machine sends traffic, then holds the
/// lock until the returned guard is dropped.
pub fn traffic_lock() -> Result<TrafficLock> {
    let asked = Instant::now();
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
    Ok(TrafficLock {
        _file: file,
        asked,
        got: Instant::now(),
    })
}
